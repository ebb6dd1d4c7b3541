// Test-only ggml devices, "TESTGPU0" and "TESTGPU1", that look like accelerators to the
// scheduler: their buffer types are not host memory and each device can use only its own
// buffers, so every tensor crossing between them (or to the CPU) is copied as a split input. Underneath, its memory is ordinary
// memory and it computes with a CPU backend, so results can be compared bit for bit with
// a plain CPU run. It has events (no-ops: every operation completes synchronously), so
// pipeline parallelism (n_copies > 1) takes the event paths.
//
// GGML_BACKEND_RS_TESTGPU_COUNT=N (1..4, default 2) registers TESTGPU0..N-1 (tensor-parallel
// tests over 3 and 4 of them). Every operation that reaches a device is appended to a trace
// (test_device_trace_reset, test_device_trace_read), so tests can check what a step did between its first and last device
// operation: no host synchronisation, no buffer allocation.
//
// They refuse GGML_OP_SOFT_MAX and GGML_OP_GET_ROWS (the latter unless the environment sets
// GGML_BACKEND_RS_TESTGPU_GET_ROWS=1, both with GGML_BACKEND_RS_TESTGPU_ALL_OPS=1), so graphs
// that use them are split between a TESTGPU and the CPU.
// GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN=1 refuses GGML_OP_FLASH_ATTN_EXT as well (as CUDA
// does for head sizes it has no kernel for). GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY=1 declines
// asynchronous copies from one test device to another (as ggml-vulkan between two GPUs) and
// says so on stderr, once. GGML_BACKEND_RS_TESTGPU_ALLREDUCE=1 (or =decline)
// makes the registry offer the backend AllReduce of the ggml version (see "the backend's own
// AllReduce" below). Two devices with async + events make libllama enable pipeline
// parallelism (scheduler n_copies > 1) for a layer split over both.
//
// Memory: GGML_BACKEND_RS_TESTGPU_MEMORY_MIB=N (default 4096) is each device's total; what its
// buffers hold is used, the rest is reported free, and an allocation that would pass the total
// fails (NULL), as on a full GPU.
//
// Faults on demand (see "fault injection" below): GGML_BACKEND_RS_TESTGPU_FAIL=RULE[,RULE...]
// with RULE = OP:N[+][@D] makes the Nth operation OP (counted from 1, on device D or on all
// test devices together) fail; with '+' that one and every later one. OP is one of
//   alloc    a buffer allocation returns NULL (the device is out of memory)
//   compute  a graph compute returns GGML_STATUS_FAILED without computing
//   abort    a graph compute returns GGML_STATUS_ABORTED without computing
//   copy     an asynchronous tensor copy is declined (returns false: the caller copies otherwise)
//   event    an event cannot be created (event_new returns NULL)
//   exit     a graph compute ends the process (_exit(3)): a ggml-rpc server that dies
//   hang     a graph compute stops (sleeps up to 10 minutes, then computes): a server that
//            stops answering
// (exit and hang count graph computes, as compute and abort do, but separately.)
// Every injected fault is reported on stderr as "TESTGPU<d>: injected fault: <op> #<n>", so a
// test can demand that its fault was reached.

#include "test_device.h"

#include "ggml-backend-impl.h"
#include "ggml-cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TESTGPU_ALIGNMENT 64
#define TESTGPU_COUNT 4 // at most; testgpu_count() registers 2 unless the environment says otherwise

// --- trace --------------------------------------------------------------------------------

#define TRACE_CAP (1 << 20)
static unsigned char trace_ops[TRACE_CAP];
static size_t trace_len;
static size_t trace_dropped;

static void trace(enum test_device_op op) {
    size_t i = __atomic_fetch_add(&trace_len, 1, __ATOMIC_RELAXED);
    if (i < TRACE_CAP) {
        trace_ops[i] = (unsigned char) op;
    } else {
        __atomic_fetch_add(&trace_dropped, 1, __ATOMIC_RELAXED);
    }
}

void test_device_trace_reset(void) {
    __atomic_store_n(&trace_len, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&trace_dropped, 0, __ATOMIC_RELAXED);
}

struct test_device_trace_stats test_device_trace_read(void) {
    struct test_device_trace_stats st;
    memset(&st, 0, sizeof(st));
    size_t n = trace_len < TRACE_CAP ? trace_len : TRACE_CAP;
    st.complete = trace_dropped == 0;
    // the device work of the step: from its first graph to its last device-side operation
    size_t first = n, last = 0;
    for (size_t i = 0; i < n; i++) {
        enum test_device_op op = (enum test_device_op) trace_ops[i];
        if (op == TEST_DEVICE_OP_COMPUTE && first == n) first = i;
        if (op != TEST_DEVICE_OP_SYNC && op != TEST_DEVICE_OP_ALLOC) last = i;
    }
    for (size_t i = 0; i < n; i++) {
        enum test_device_op op = (enum test_device_op) trace_ops[i];
        st.count[op]++;
        if (first < n && i > first && i < last) st.inside[op]++;
    }
    return st;
}

// --- fault injection ----------------------------------------------------------------------

enum fault_op { FAULT_ALLOC, FAULT_COMPUTE, FAULT_ABORT, FAULT_COPY, FAULT_EVENT, FAULT_EXIT, FAULT_HANG, FAULT_OP_COUNT };
static const char * const fault_op_names[FAULT_OP_COUNT] = { "alloc", "compute", "abort", "copy", "event", "exit", "hang" };

#define FAULT_RULES_MAX 16
struct fault_rule {
    enum fault_op op;
    long n;         // the ordinal that fails (from 1)
    bool onwards;   // and every later one
    int device;     // -1: counted over all test devices
};
static struct fault_rule fault_rules[FAULT_RULES_MAX];
static int fault_rule_count;
// operations seen so far, per device and over all devices ([TESTGPU_COUNT])
static long fault_seen[FAULT_OP_COUNT][TESTGPU_COUNT + 1];

// Reads GGML_BACKEND_RS_TESTGPU_FAIL (once: see `fault`). A malformed rule stops the process:
// a test that means to inject a fault must not pass without it.
static void fault_rules_read(void) {
    int count = 0;
    const char * e = getenv("GGML_BACKEND_RS_TESTGPU_FAIL");
    char spec[256];
    snprintf(spec, sizeof(spec), "%s", e ? e : "");
    for (char * save = NULL, * rule = strtok_r(spec, ",", &save); rule; rule = strtok_r(NULL, ",", &save)) {
        struct fault_rule r = { FAULT_OP_COUNT, 0, false, -1 };
        char * colon = strchr(rule, ':');
        if (colon) {
            *colon = '\0';
            for (int op = 0; op < FAULT_OP_COUNT; op++) {
                if (strcmp(rule, fault_op_names[op]) == 0) r.op = (enum fault_op) op;
            }
            char * end = NULL;
            r.n = strtol(colon + 1, &end, 10);
            if (end && *end == '+') { r.onwards = true; end++; }
            if (end && *end == '@') { r.device = (int) strtol(end + 1, &end, 10); }
            if (!end || *end != '\0') r.op = FAULT_OP_COUNT;
        }
        if (r.op == FAULT_OP_COUNT || r.n < 1 || r.device < -1 || r.device >= TESTGPU_COUNT || count == FAULT_RULES_MAX) {
            fprintf(stderr, "GGML_BACKEND_RS_TESTGPU_FAIL: bad rule '%s' (OP:N[+][@D], OP one of alloc, compute, "
                            "abort, copy, event, exit, hang; at most %d rules)\n", rule, FAULT_RULES_MAX);
            abort();
        }
        fault_rules[count++] = r;
    }
    fault_rule_count = count;
}

// Counts operation `op` on device `dev` and says whether it is to fail.
static bool fault(enum fault_op op, int dev) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fault_rules_read);
    if (fault_rule_count == 0) return false;
    const long on_dev = __atomic_add_fetch(&fault_seen[op][dev], 1, __ATOMIC_RELAXED);
    const long on_all = __atomic_add_fetch(&fault_seen[op][TESTGPU_COUNT], 1, __ATOMIC_RELAXED);
    for (int i = 0; i < fault_rule_count; i++) {
        const struct fault_rule * r = &fault_rules[i];
        if (r->op != op || (r->device >= 0 && r->device != dev)) continue;
        const long n = r->device >= 0 ? on_dev : on_all;
        if (n == r->n || (r->onwards && n > r->n)) {
            fprintf(stderr, "TESTGPU%d: injected fault: %s #%ld\n", dev, fault_op_names[op], n);
            return true;
        }
    }
    return false;
}

// --- buffer -------------------------------------------------------------------------------

static void * tbuf_base(ggml_backend_buffer_t buffer) {
    uintptr_t p = (uintptr_t) buffer->context;
    return (void *) ((p + TESTGPU_ALIGNMENT - 1) & ~(uintptr_t) (TESTGPU_ALIGNMENT - 1));
}
// --- memory -------------------------------------------------------------------------------

static size_t testgpu_used[TESTGPU_COUNT];

static size_t testgpu_total(void) {
    static size_t total = 0;
    if (total == 0) {
        const char * e = getenv("GGML_BACKEND_RS_TESTGPU_MEMORY_MIB");
        const long v = e ? strtol(e, NULL, 10) : 4096;
        total = (size_t) (v > 0 ? v : 4096) << 20;
    }
    return total;
}

// Takes `size` bytes of device i's memory; false (nothing taken) when they are not free.
static bool testgpu_take(int i, size_t size) {
    const size_t before = __atomic_fetch_add(&testgpu_used[i], size, __ATOMIC_SEQ_CST);
    if (before + size > testgpu_total() || before + size < before) {
        __atomic_fetch_sub(&testgpu_used[i], size, __ATOMIC_SEQ_CST);
        return false;
    }
    return true;
}

static void tbuf_free(ggml_backend_buffer_t buffer) {
    __atomic_fetch_sub(&testgpu_used[(int) (intptr_t) buffer->buft->context], buffer->size, __ATOMIC_SEQ_CST);
    free(buffer->context);
}
static void tbuf_memset(ggml_backend_buffer_t b, struct ggml_tensor * t, uint8_t v, size_t off, size_t size) {
    (void) b;
    memset((char *) t->data + off, v, size);
}
static void tbuf_set(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    (void) b;
    memcpy((char *) t->data + off, data, size);
}
static void tbuf_get(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    (void) b;
    memcpy(data, (const char *) t->data + off, size);
}
// Native strided transfers: counted, so tests can tell them from the generic per-block loop.
int test_device_2d_calls = 0;
static void tbuf_set_2d(ggml_backend_buffer_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size,
                        size_t n, size_t stride_t, size_t stride_d) {
    (void) b;
    test_device_2d_calls++;
    for (size_t i = 0; i < n; i++) {
        memcpy((char *) t->data + off + i * stride_t, (const char *) data + i * stride_d, size);
    }
}
static void tbuf_get_2d(ggml_backend_buffer_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size,
                        size_t n, size_t stride_t, size_t stride_d) {
    (void) b;
    test_device_2d_calls++;
    for (size_t i = 0; i < n; i++) {
        memcpy((char *) data + i * stride_d, (const char *) t->data + off + i * stride_t, size);
    }
}
static bool tbuf_cpy(ggml_backend_buffer_t b, const struct ggml_tensor * src, struct ggml_tensor * dst) {
    (void) b;
    ggml_backend_buffer_t sb = src->view_src ? src->view_src->buffer : src->buffer;
    if (sb && sb->buft == dst->buffer->buft) { // device to device
        memcpy(dst->data, src->data, ggml_nbytes(src));
        return true;
    }
    return false;
}
static void tbuf_clear(ggml_backend_buffer_t buffer, uint8_t v) { memset(buffer->context, v, buffer->size + TESTGPU_ALIGNMENT); }

static const struct ggml_backend_buffer_i tbuf_iface = {
    /* .free_buffer   = */ tbuf_free,
    /* .get_base      = */ tbuf_base,
    /* .init_tensor   = */ NULL,
    /* .memset_tensor = */ tbuf_memset,
    /* .set_tensor    = */ tbuf_set,
    /* .get_tensor    = */ tbuf_get,
    /* .set_tensor_2d = */ tbuf_set_2d,
    /* .get_tensor_2d = */ tbuf_get_2d,
    /* .cpy_tensor    = */ tbuf_cpy,
    /* .clear         = */ tbuf_clear,
    /* .reset         = */ NULL,
};

// --- buffer type --------------------------------------------------------------------------

static const char * const testgpu_names[TESTGPU_COUNT] = { "TESTGPU0", "TESTGPU1", "TESTGPU2", "TESTGPU3" };
static const char * const testgpu_ids[TESTGPU_COUNT] = { "testgpu:0", "testgpu:1", "testgpu:2", "testgpu:3" };

static size_t testgpu_count(void) {
    static size_t n = 0;
    if (n == 0) {
        const char * e = getenv("GGML_BACKEND_RS_TESTGPU_COUNT");
        const long v = e ? strtol(e, NULL, 10) : 2;
        n = v >= 1 && v <= TESTGPU_COUNT ? (size_t) v : 2;
    }
    return n;
}

static int dev_index(ggml_backend_dev_t d) { return (int) (intptr_t) d->context; }

static const char * tbuft_name(ggml_backend_buffer_type_t buft) { return testgpu_names[(int) (intptr_t) buft->context]; }
static ggml_backend_buffer_t tbuft_alloc(ggml_backend_buffer_type_t buft, size_t size) {
    trace(TEST_DEVICE_OP_ALLOC);
    const int i = (int) (intptr_t) buft->context;
    if (fault(FAULT_ALLOC, i)) return NULL;
    if (!testgpu_take(i, size)) return NULL;
    void * mem = calloc(1, size + TESTGPU_ALIGNMENT);
    if (!mem) {
        __atomic_fetch_sub(&testgpu_used[i], size, __ATOMIC_SEQ_CST);
        return NULL;
    }
    return ggml_backend_buffer_init(buft, tbuf_iface, mem, size);
}
static size_t tbuft_align(ggml_backend_buffer_type_t buft) { (void) buft; return TESTGPU_ALIGNMENT; }

static struct ggml_backend_device testgpu_devices[TESTGPU_COUNT];

// Designated initializers: the entries of ggml_backend_buffer_type_i differ between ggml
// versions (0.26 inserted alloc_buffer_n and get_alloc_size_n, left NULL: the defaults).
#define TESTGPU_BUFT(i)                                                                         \
    {                                                                                           \
        .iface = { .get_name = tbuft_name, .alloc_buffer = tbuft_alloc, .get_alignment = tbuft_align }, \
        .device = &testgpu_devices[i], .context = (void *) (i),                                 \
    }

static struct ggml_backend_buffer_type testgpu_bufts[TESTGPU_COUNT] = {
    TESTGPU_BUFT(0), TESTGPU_BUFT(1), TESTGPU_BUFT(2), TESTGPU_BUFT(3),
};

static bool is_testgpu_buft(ggml_backend_buffer_type_t buft) {
    return buft >= &testgpu_bufts[0] && buft < &testgpu_bufts[TESTGPU_COUNT];
}

// --- backend ------------------------------------------------------------------------------

static const char * tb_name(ggml_backend_t b) { return testgpu_names[dev_index(b->device)]; }
static void tb_free(ggml_backend_t b) {
    ggml_backend_free((ggml_backend_t) b->context);
    free(b);
}
static enum ggml_status tb_compute(ggml_backend_t b, struct ggml_cgraph * g) {
    trace(TEST_DEVICE_OP_COMPUTE);
    if (fault(FAULT_COMPUTE, dev_index(b->device))) return GGML_STATUS_FAILED;
    if (fault(FAULT_ABORT, dev_index(b->device))) return GGML_STATUS_ABORTED;
    if (fault(FAULT_EXIT, dev_index(b->device))) {
        fflush(stderr);
        _exit(3);
    }
    if (fault(FAULT_HANG, dev_index(b->device))) {
        fflush(stderr);
        const struct timespec minute = {60, 0};
        for (int i = 0; i < 10; i++) nanosleep(&minute, NULL);
    }
    return ggml_backend_graph_compute((ggml_backend_t) b->context, g);
}
static void tb_synchronize(ggml_backend_t b) {
    (void) b;
    trace(TEST_DEVICE_OP_SYNC);
}
static bool env_is_1(const char * name);
static bool tb_cpy_async(ggml_backend_t src, ggml_backend_t dst, const struct ggml_tensor * s, struct ggml_tensor * d) {
    (void) src; (void) dst;
    // host -> device and device -> device copies complete immediately: a valid (if eager)
    // asynchronous copy
    ggml_backend_buffer_t sb = s->view_src ? s->view_src->buffer : s->buffer;
    ggml_backend_buffer_t db = d->view_src ? d->view_src->buffer : d->buffer;
    // GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY=1: copies between two test devices are declined, as
    // ggml-vulkan declines them between two GPUs (the caller copies through the host)
    if (sb && db && is_testgpu_buft(sb->buft) && is_testgpu_buft(db->buft) && sb->buft != db->buft &&
        env_is_1("GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY")) {
        static bool said = false;
        if (!said) {
            said = true;
            fprintf(stderr, "%s: declines copies from another test device\n", testgpu_names[dev_index(dst->device)]);
        }
        return false;
    }
    if (sb && db && is_testgpu_buft(db->buft) && (ggml_backend_buffer_is_host(sb) || is_testgpu_buft(sb->buft))) {
        if (fault(FAULT_COPY, dev_index(dst->device))) return false;
        trace(TEST_DEVICE_OP_COPY);
        memcpy(d->data, s->data, ggml_nbytes(s));
        return true;
    }
    return false;
}
// Asynchronous data access that completes at once (a valid, eager implementation).
int test_device_async_calls = 0;
static void tb_set_async(ggml_backend_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size) {
    (void) b;
    test_device_async_calls++;
    memcpy((char *) t->data + off, data, size);
}
static void tb_get_async(ggml_backend_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size) {
    (void) b;
    test_device_async_calls++;
    memcpy(data, (const char *) t->data + off, size);
}
static void tb_set_2d_async(ggml_backend_t b, struct ggml_tensor * t, const void * data, size_t off, size_t size,
                            size_t n, size_t stride_t, size_t stride_d) {
    test_device_async_calls++;
    tbuf_set_2d(t->buffer, t, data, off, size, n, stride_t, stride_d);
    (void) b;
}
static void tb_get_2d_async(ggml_backend_t b, const struct ggml_tensor * t, void * data, size_t off, size_t size,
                            size_t n, size_t stride_t, size_t stride_d) {
    test_device_async_calls++;
    tbuf_get_2d(t->buffer, t, data, off, size, n, stride_t, stride_d);
    (void) b;
}
static void tb_event_record(ggml_backend_t b, ggml_backend_event_t e) { (void) b; (void) e; trace(TEST_DEVICE_OP_EVENT_RECORD); }
static void tb_event_wait(ggml_backend_t b, ggml_backend_event_t e) { (void) b; (void) e; trace(TEST_DEVICE_OP_EVENT_WAIT); }

static const struct ggml_backend_i tb_iface = {
    /* .get_name            = */ tb_name,
    /* .free                = */ tb_free,
    /* .set_tensor_async    = */ tb_set_async,
    /* .get_tensor_async    = */ tb_get_async,
    /* .set_tensor_2d_async = */ tb_set_2d_async,
    /* .get_tensor_2d_async = */ tb_get_2d_async,
    /* .cpy_tensor_async    = */ tb_cpy_async,
    /* .synchronize         = */ tb_synchronize,
    /* .graph_plan_create   = */ NULL,
    /* .graph_plan_free     = */ NULL,
    /* .graph_plan_update   = */ NULL,
    /* .graph_plan_compute  = */ NULL,
    /* .graph_compute       = */ tb_compute,
    /* .event_record        = */ tb_event_record,
    /* .event_wait          = */ tb_event_wait,
    /* .graph_optimize      = */ NULL,
};

static ggml_guid testgpu_guid = { 0x7e, 0x57, 0x60, 0x70, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };

// --- device -------------------------------------------------------------------------------

static const char * td_name(ggml_backend_dev_t d) { return testgpu_names[dev_index(d)]; }
static const char * td_desc(ggml_backend_dev_t d) { (void) d; return "test device backed by the CPU backend"; }
static void td_memory(ggml_backend_dev_t d, size_t * free_mem, size_t * total) {
    *total = testgpu_total();
    *free_mem = *total - __atomic_load_n(&testgpu_used[dev_index(d)], __ATOMIC_SEQ_CST);
}
static enum ggml_backend_dev_type td_type(ggml_backend_dev_t d) { (void) d; return GGML_BACKEND_DEVICE_TYPE_GPU; }
static void td_props(ggml_backend_dev_t d, struct ggml_backend_dev_props * p) {
    p->name = td_name(d);
    p->description = td_desc(d);
    td_memory(d, &p->memory_free, &p->memory_total);
    p->type = td_type(d);
    // distinct ids, like real GPUs' PCI bus ids (libllama keeps one device per id)
    p->device_id = testgpu_ids[dev_index(d)];
    p->caps.async = true;
    p->caps.host_buffer = false;
    p->caps.buffer_from_host_ptr = false;
    p->caps.events = true;
#if GGML_BACKEND_RS_HAS_MMAP_CAPS
    p->caps.mmap_support = true; // weights reach it through set_tensor, from wherever they are
#endif
}
static int testgpu_threads = 2;
static ggml_backend_t td_init(ggml_backend_dev_t d, const char * params) {
    (void) params;
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, testgpu_threads);
    ggml_backend_t b = (ggml_backend_t) malloc(sizeof(struct ggml_backend));
    b->guid = &testgpu_guid;
    b->iface = tb_iface;
    b->device = d;
    b->context = cpu;
    return b;
}
static ggml_backend_buffer_type_t td_buft(ggml_backend_dev_t d) { return &testgpu_bufts[dev_index(d)]; }
static bool env_is_1(const char * name) {
    const char * e = getenv(name);
    return e && strcmp(e, "1") == 0;
}
static bool td_supports_op(ggml_backend_dev_t d, const struct ggml_tensor * op) {
    (void) d;
    // GGML_BACKEND_RS_TESTGPU_ALL_OPS=1: every op the CPU backend supports (a graph that runs
    // on the test devices from end to end, e.g. to check a step's host waits).
    const bool all_ops = env_is_1("GGML_BACKEND_RS_TESTGPU_ALL_OPS");
    if (op->op == GGML_OP_SOFT_MAX && !all_ops) {
        return false;
    }
    if (op->op == GGML_OP_FLASH_ATTN_EXT && env_is_1("GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN")) {
        return false;
    }
    if (op->op == GGML_OP_GET_ROWS) {
        // GGML_BACKEND_RS_TESTGPU_GET_ROWS=1 accepts GET_ROWS: upstream's meta backend cannot
        // hand the partial sums or non-contiguous views that the CPU's get_rows would read to
        // the CPU, so differential tensor-parallel runs against upstream keep it on the device.
        if (!all_ops && !env_is_1("GGML_BACKEND_RS_TESTGPU_GET_ROWS")) {
            return false;
        }
    }
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    return ggml_backend_dev_supports_op(cpu, op);
}
static bool td_supports_buft(ggml_backend_dev_t d, ggml_backend_buffer_type_t buft) { return buft == &testgpu_bufts[dev_index(d)]; }
static bool td_offload_op(ggml_backend_dev_t d, const struct ggml_tensor * op) { (void) d; return op->op == GGML_OP_MUL_MAT; }

static int event_token;
static ggml_backend_event_t td_event_new(ggml_backend_dev_t d) {
    if (fault(FAULT_EVENT, dev_index(d))) return NULL;
    ggml_backend_event_t e = (ggml_backend_event_t) malloc(sizeof(struct ggml_backend_event));
    e->device = d;
    e->context = &event_token;
    return e;
}
static void td_event_free(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; free(e); }
static void td_event_sync(ggml_backend_dev_t d, ggml_backend_event_t e) { (void) d; (void) e; trace(TEST_DEVICE_OP_SYNC); }

static struct ggml_backend_reg testgpu_reg;

#define TESTGPU_DEVICE(i)                                                          \
    {                                                                              \
        /* .iface = */ {                                                           \
            td_name, td_desc, td_memory, td_type, td_props, td_init, td_buft,      \
            /* .get_host_buffer_type = */ NULL,                                    \
            /* .buffer_from_host_ptr = */ NULL,                                    \
            td_supports_op, td_supports_buft, td_offload_op,                       \
            td_event_new, td_event_free, td_event_sync,                            \
        },                                                                         \
        /* .reg     = */ &testgpu_reg,                                             \
        /* .context = */ (void *) (i),                                             \
    }

static struct ggml_backend_device testgpu_devices[TESTGPU_COUNT] = {
    TESTGPU_DEVICE(0), TESTGPU_DEVICE(1), TESTGPU_DEVICE(2), TESTGPU_DEVICE(3),
};

static const char * tr_name(ggml_backend_reg_t r) { (void) r; return "TESTGPU"; }
static size_t tr_count(ggml_backend_reg_t r) { (void) r; return testgpu_count(); }
static ggml_backend_dev_t tr_get(ggml_backend_reg_t r, size_t i) { (void) r; return i < testgpu_count() ? &testgpu_devices[i] : NULL; }

// The test devices' memory is the host's, so each can compute on the others' tensors: the
// meta backend's direct AllReduce asks through this optional entry.
static bool tr_dev_reads_peer(ggml_backend_dev_t dev, ggml_backend_dev_t peer) {
    (void) dev; (void) peer;
    return true;
}
// --- the backend's own AllReduce -----------------------------------------------------------
//
// GGML_BACKEND_RS_TESTGPU_ALLREDUCE=1 makes the registry offer an AllReduce as ggml's version
// defines it (0.9.11: ggml_backend_allreduce_tensor; 0.26: the communicator,
// ggml_backend_comm_init / _free / _allreduce_tensor): contiguous f32 tensors of the test
// devices are summed in device order into every device's tensor, anything else is declined (as
// CUDA's declines what it does not reduce). =decline declines every call. The process prints
// "TESTGPU AllReduce: <n> reduced, <m> declined" when it exits, so tests see which path ran.

static size_t allreduce_done, allreduce_declined;

static void allreduce_report(void) {
    fprintf(stderr, "TESTGPU AllReduce: %zu reduced, %zu declined\n",
            __atomic_load_n(&allreduce_done, __ATOMIC_RELAXED),
            __atomic_load_n(&allreduce_declined, __ATOMIC_RELAXED));
}

static const char * allreduce_mode(void) {
    static int reported = 0;
    const char * e = getenv("GGML_BACKEND_RS_TESTGPU_ALLREDUCE");
    if (e && !__atomic_exchange_n(&reported, 1, __ATOMIC_RELAXED)) {
        atexit(allreduce_report);
    }
    return e;
}

static bool testgpu_allreduce(ggml_backend_t * backends, struct ggml_tensor ** tensors, size_t n) {
    const char * mode = allreduce_mode();
    bool ok = mode && strcmp(mode, "1") == 0 && n > 0;
    for (size_t j = 0; ok && j < n; j++) {
        ok = backends[j]->iface.get_name == tb_name && tensors[j]->type == GGML_TYPE_F32 &&
             ggml_is_contiguous(tensors[j]) && ggml_nelements(tensors[j]) == ggml_nelements(tensors[0]);
    }
    if (!ok) {
        __atomic_fetch_add(&allreduce_declined, 1, __ATOMIC_RELAXED);
        return false;
    }
    const int64_t ne = ggml_nelements(tensors[0]);
    for (int64_t i = 0; i < ne; i++) {
        float sum = ((const float *) tensors[0]->data)[i];
        for (size_t j = 1; j < n; j++) {
            sum += ((const float *) tensors[j]->data)[i];
        }
        for (size_t j = 0; j < n; j++) {
            ((float *) tensors[j]->data)[i] = sum;
        }
    }
    __atomic_fetch_add(&allreduce_done, 1, __ATOMIC_RELAXED);
    return true;
}

#if GGML_BACKEND_RS_HAS_COMM_API
struct testgpu_comm {
    size_t n;
    ggml_backend_t backends[TESTGPU_COUNT];
};
static void * testgpu_comm_init(ggml_backend_t * backends, size_t n) {
    if (!allreduce_mode() || n > TESTGPU_COUNT) {
        return NULL;
    }
    struct testgpu_comm * c = (struct testgpu_comm *) calloc(1, sizeof(*c));
    c->n = n;
    memcpy(c->backends, backends, n * sizeof(*backends));
    return c;
}
static void testgpu_comm_free(void * ctx) { free(ctx); }
static bool testgpu_comm_allreduce(void * ctx, struct ggml_tensor ** tensors) {
    struct testgpu_comm * c = (struct testgpu_comm *) ctx;
    return testgpu_allreduce(c->backends, tensors, c->n);
}
#endif

static void * tr_proc(ggml_backend_reg_t r, const char * name) {
    (void) r;
    if (strcmp(name, "ggml_backend_rs_dev_reads_peer") == 0) {
        return (void *) tr_dev_reads_peer;
    }
    if (getenv("GGML_BACKEND_RS_TESTGPU_ALLREDUCE")) {
#if GGML_BACKEND_RS_HAS_COMM_API
        if (strcmp(name, "ggml_backend_comm_init") == 0) return (void *) testgpu_comm_init;
        if (strcmp(name, "ggml_backend_comm_free") == 0) return (void *) testgpu_comm_free;
        if (strcmp(name, "ggml_backend_comm_allreduce_tensor") == 0) return (void *) testgpu_comm_allreduce;
#else
        if (strcmp(name, "ggml_backend_allreduce_tensor") == 0) return (void *) testgpu_allreduce;
#endif
    }
    return NULL;
}

static struct ggml_backend_reg testgpu_reg = {
    /* .api_version = */ GGML_BACKEND_API_VERSION,
    /* .iface       = */ { tr_name, tr_count, tr_get, tr_proc },
    /* .context     = */ NULL,
};

ggml_backend_reg_t test_device_reg(void) { return &testgpu_reg; }

void test_device_register(int n_threads) {
    static int done = 0;
    testgpu_threads = n_threads;
    if (!done) {
        ggml_backend_register(&testgpu_reg);
        done = 1;
    }
}
