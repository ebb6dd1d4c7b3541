// Behaviour of the ggml-backend C API on the CPU backend: buffer types, buffers, tensor data
// access (incl. 2D and async), copies, backends, events, devices, registry, dynamic loading,
// graph copy and comparison, and rejection of bad input.
//
// Usage: backend_api <case> [args]. Normal cases exit 0 on success and print "FAIL ..." and
// exit 1 otherwise. Cases named bad_* must stop the process through ggml's abort with a
// message; ctest checks that message (see ctests/CMakeLists.txt).
// The same program is built against upstream's C++ ggml-backend for the cases where the two
// must agree, so every expectation here is upstream's behaviour.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h" // multi-buffer
#include "ggml-cpu.h"
#include "test_device.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);        \
            failures++;                                                            \
        }                                                                          \
    } while (0)

static struct ggml_context * new_ctx(void) {
    struct ggml_init_params params = { 64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(params);
    CHECK(ctx != NULL);
    return ctx;
}

static ggml_backend_t cpu_backend(void) {
    ggml_backend_t backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    CHECK(backend != NULL);
    ggml_backend_cpu_set_n_threads(backend, 2);
    return backend;
}

// ---------------------------------------------------------------------------------------

static void test_buffer_type(void) {
    ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
    CHECK(strcmp(ggml_backend_buft_name(buft), "CPU") == 0);
    CHECK(ggml_backend_buft_get_alignment(buft) == 32);
    CHECK(ggml_backend_buft_get_max_size(buft) == SIZE_MAX);
    CHECK(ggml_backend_buft_is_host(buft));

    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 7, 3);
    CHECK(ggml_backend_buft_get_alloc_size(buft, t) == ggml_nbytes(t));

    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, 1000);
    CHECK(buf != NULL);
    CHECK(ggml_backend_buffer_get_type(buf) == buft);
    CHECK(ggml_backend_buffer_get_size(buf) == 1000);
    CHECK(((uintptr_t) ggml_backend_buffer_get_base(buf)) % 32 == 0);
    CHECK(ggml_backend_buffer_get_alignment(buf) == 32);
    CHECK(ggml_backend_buffer_get_max_size(buf) == SIZE_MAX);
    CHECK(ggml_backend_buffer_get_alloc_size(buf, t) == ggml_nbytes(t));
    CHECK(ggml_backend_buffer_is_host(buf));
    CHECK(strcmp(ggml_backend_buffer_name(buf), "CPU") == 0);
    ggml_backend_buffer_free(buf);

    // a zero-size allocation is an empty buffer of that type, not NULL
    ggml_backend_buffer_t empty = ggml_backend_buft_alloc_buffer(buft, 0);
    CHECK(empty != NULL);
    CHECK(ggml_backend_buffer_get_size(empty) == 0);
    CHECK(ggml_backend_buffer_get_base(empty) == NULL);
    CHECK(ggml_backend_buffer_get_type(empty) == buft);
    ggml_backend_buffer_clear(empty, 0); // nothing to clear
    ggml_backend_buffer_reset(empty);
    ggml_backend_buffer_free(empty);

    ggml_backend_buffer_free(NULL); // allowed
    ggml_free(ctx);
}

static void test_buffer(void) {
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 256);
    CHECK(ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_ANY);
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    CHECK(ggml_backend_buffer_get_usage(buf) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS);

    ggml_backend_buffer_clear(buf, 0xAB);
    const uint8_t * base = (const uint8_t *) ggml_backend_buffer_get_base(buf);
    int all = 1;
    for (int i = 0; i < 256; i++) all &= base[i] == 0xAB;
    CHECK(all);

    // tensor_alloc places a tensor, init_tensor is a no-op for CPU buffers
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
    CHECK(ggml_backend_tensor_alloc(buf, t, (char *) base + 64) == GGML_STATUS_SUCCESS);
    CHECK(t->buffer == buf && t->data == (char *) base + 64);
    CHECK(ggml_backend_buffer_init_tensor(buf, t) == GGML_STATUS_SUCCESS);

    // a view shares its source's memory
    struct ggml_tensor * v = ggml_view_1d(ctx, t, 4, 8 * sizeof(float));
    CHECK(ggml_backend_view_init(v) == GGML_STATUS_SUCCESS);
    CHECK(v->buffer == buf && v->data == (char *) t->data + 8 * sizeof(float));
    float x[16];
    for (int i = 0; i < 16; i++) x[i] = (float) i;
    ggml_backend_tensor_set(t, x, 0, sizeof(x));
    float y[4];
    ggml_backend_tensor_get(v, y, 0, sizeof(y));
    CHECK(y[0] == 8.0f && y[3] == 11.0f);

    // multi-buffer: sizes add up, usage and clear reach every part
    ggml_backend_buffer_t parts[2] = {
        ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 64),
        ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 96),
    };
    ggml_backend_buffer_t multi = ggml_backend_multi_buffer_alloc_buffer(parts, 2);
    CHECK(ggml_backend_buffer_is_multi_buffer(multi));
    CHECK(!ggml_backend_buffer_is_multi_buffer(buf));
    CHECK(ggml_backend_buffer_get_size(multi) == 160);
    ggml_backend_buffer_set_usage(multi, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    CHECK(ggml_backend_buffer_get_usage(parts[0]) == GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    CHECK(ggml_backend_buffer_get_usage(parts[1]) == GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    ggml_backend_multi_buffer_set_usage(multi, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    CHECK(ggml_backend_buffer_get_usage(parts[1]) == GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_buffer_clear(multi, 7);
    CHECK(((uint8_t *) ggml_backend_buffer_get_base(parts[1]))[95] == 7);
    ggml_backend_buffer_free(multi); // frees the parts

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
}

// tensor data: set/get, memset, 2D with strides, async on the CPU backend
static void test_tensor_data(void) {
    ggml_backend_t backend = cpu_backend();
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * t = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, 10, 6); // 6 rows of 10
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    CHECK(buf != NULL);

    int32_t host[60];
    for (int i = 0; i < 60; i++) host[i] = i;
    ggml_backend_tensor_set(t, host, 0, sizeof(host));
    int32_t back[60] = { 0 };
    ggml_backend_tensor_get(t, back, 0, sizeof(back));
    CHECK(memcmp(host, back, sizeof(host)) == 0);

    ggml_backend_tensor_memset(t, 0, 4 * 10, 4 * 5); // row 1, elements 0..4
    ggml_backend_tensor_get(t, back, 0, sizeof(back));
    CHECK(back[9] == 9 && back[10] == 0 && back[14] == 0 && back[15] == 15);

    // zero-size accesses are no-ops, even at the end of the tensor
    ggml_backend_tensor_set(t, host, ggml_nbytes(t), 0);
    ggml_backend_tensor_get(t, back, ggml_nbytes(t), 0);
    ggml_backend_tensor_memset(t, 0, ggml_nbytes(t), 0);

    // 2D: write 3 elements into column block 2..4 of rows 1, 3, 5 (tensor stride 2 rows),
    // reading from a host array with a stride of 5 elements
    int32_t src[15];
    for (int i = 0; i < 15; i++) src[i] = 1000 + i;
    ggml_backend_tensor_set_2d(t, src, (1 * 10 + 2) * 4, 3 * 4, 3, 2 * 10 * 4, 5 * 4);
    ggml_backend_tensor_get(t, back, 0, sizeof(back));
    CHECK(back[1 * 10 + 2] == 1000 && back[1 * 10 + 4] == 1002);
    CHECK(back[3 * 10 + 2] == 1005 && back[3 * 10 + 4] == 1007);
    CHECK(back[5 * 10 + 2] == 1010 && back[5 * 10 + 4] == 1012);
    CHECK(back[1 * 10 + 5] == 15 && back[2 * 10 + 2] == 22);

    int32_t dst[12];
    memset(dst, 0xff, sizeof(dst));
    ggml_backend_tensor_get_2d(t, dst, (3 * 10 + 2) * 4, 2 * 4, 2, 2 * 10 * 4, 6 * 4);
    CHECK(dst[0] == 1005 && dst[1] == 1006 && dst[6] == 1010 && dst[7] == 1011);
    CHECK(dst[2] == -1 && dst[5] == -1);

    // n_copies == 0 and size == 0 do nothing
    ggml_backend_tensor_set_2d(t, src, 0, 4, 0, 4, 4);
    ggml_backend_tensor_get_2d(t, dst, 0, 0, 3, 4, 4);

    // async forms: the CPU backend has none, so they fall back to synchronous copies
    int32_t v = 77;
    ggml_backend_tensor_set_async(backend, t, &v, 59 * 4, 4);
    ggml_backend_tensor_set_2d_async(backend, t, src, 0, 4, 2, 10 * 4, 4);
    ggml_backend_synchronize(backend);
    int32_t w[2] = { 0, 0 };
    ggml_backend_tensor_get_async(backend, t, &w[0], 59 * 4, 4);
    ggml_backend_tensor_get_2d_async(backend, t, w, 10 * 4, 4, 1, 0, 0);
    ggml_backend_synchronize(backend);
    CHECK(w[0] == 1001);
    ggml_backend_tensor_get(t, back, 0, sizeof(back));
    CHECK(back[59] == 77 && back[0] == 1000 && back[10] == 1001);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
}

// tensor_copy between buffers of different types (CPU and CPU_Mapped), and copy_async
static void test_tensor_copy(void) {
    ggml_backend_t backend = cpu_backend();
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 33);
    struct ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 33);
    ggml_backend_buffer_t buf_a = ggml_backend_alloc_buffer(backend, 256);
    void * mem = NULL;
    CHECK(posix_memalign(&mem, 64, 256) == 0);
    ggml_backend_buffer_t buf_b = ggml_backend_cpu_buffer_from_ptr(mem, 256);
    CHECK(strcmp(ggml_backend_buffer_name(buf_b), "CPU_Mapped") == 0);
    CHECK(ggml_backend_buffer_get_type(buf_b) != ggml_backend_buffer_get_type(buf_a));
    CHECK(ggml_backend_buffer_get_base(buf_b) == mem);
    CHECK(ggml_backend_tensor_alloc(buf_a, a, ggml_backend_buffer_get_base(buf_a)) == GGML_STATUS_SUCCESS);
    CHECK(ggml_backend_tensor_alloc(buf_b, b, ggml_backend_buffer_get_base(buf_b)) == GGML_STATUS_SUCCESS);

    float x[33], y[33];
    for (int i = 0; i < 33; i++) x[i] = 0.5f * (float) i;
    ggml_backend_tensor_set(a, x, 0, sizeof(x));
    ggml_backend_tensor_copy(a, b);
    ggml_backend_tensor_get(b, y, 0, sizeof(y));
    CHECK(memcmp(x, y, sizeof(x)) == 0);
    CHECK(memcmp(mem, x, sizeof(x)) == 0); // the mapped buffer wrote to the caller's memory

    ggml_backend_tensor_memset(a, 0, 0, ggml_nbytes(a));
    ggml_backend_tensor_copy_async(backend, backend, b, a);
    ggml_backend_synchronize(backend);
    ggml_backend_tensor_get(a, y, 0, sizeof(y));
    CHECK(memcmp(x, y, sizeof(x)) == 0);

    CHECK(ggml_backend_buffer_copy_tensor(a, b)); // CPU buffers copy from host buffers
    ggml_backend_tensor_copy(a, a);               // same tensor: nothing to do

    ggml_backend_buffer_free(buf_b); // does not free caller memory
    free(mem);
    ggml_backend_buffer_free(buf_a);
    ggml_free(ctx);
    ggml_backend_free(backend);
}

static void test_backend(void) {
    ggml_backend_t backend = cpu_backend();
    CHECK(strcmp(ggml_backend_name(backend), "CPU") == 0);
    CHECK(strcmp(ggml_backend_name(NULL), "NULL") == 0);
    CHECK(ggml_backend_guid(backend) != NULL);
    CHECK(ggml_backend_guid(NULL) == NULL);
    CHECK(ggml_backend_get_default_buffer_type(backend) == ggml_backend_cpu_buffer_type());
    CHECK(ggml_backend_get_alignment(backend) == 32);
    CHECK(ggml_backend_get_max_size(backend) == SIZE_MAX);
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    CHECK(dev != NULL && ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(ggml_backend_supports_buft(backend, ggml_backend_cpu_buffer_type()));

    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5);
    struct ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5);
    struct ggml_tensor * c = ggml_add(ctx, a, b);
    CHECK(ggml_backend_supports_op(backend, c));
    CHECK(!ggml_backend_offload_op(backend, c));
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, c);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    float xa[5] = { 1, 2, 3, 4, 5 }, xb[5] = { 10, 20, 30, 40, 50 }, out[5];
    ggml_backend_tensor_set(a, xa, 0, sizeof(xa));
    ggml_backend_tensor_set(b, xb, 0, sizeof(xb));

    // graph plans are supported by the CPU backend
    ggml_backend_graph_plan_t plan = ggml_backend_graph_plan_create(backend, gf);
    CHECK(plan != NULL);
    CHECK(ggml_backend_graph_plan_compute(backend, plan) == GGML_STATUS_SUCCESS);
    ggml_backend_graph_plan_free(backend, plan);
    ggml_backend_tensor_get(c, out, 0, sizeof(out));
    CHECK(out[0] == 11 && out[4] == 55);

    ggml_backend_tensor_memset(c, 0, 0, ggml_nbytes(c));
    CHECK(ggml_backend_graph_compute_async(backend, gf) == GGML_STATUS_SUCCESS);
    ggml_backend_synchronize(backend);
    ggml_backend_tensor_get(c, out, 0, sizeof(out));
    CHECK(out[2] == 33);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
    ggml_backend_free(NULL); // allowed
}

static void test_events(void) {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    struct ggml_backend_dev_props props;
    ggml_backend_dev_get_props(cpu, &props);
    // the CPU device has no events: creating one yields NULL, freeing NULL is allowed
    CHECK(props.caps.events == false);
    CHECK(ggml_backend_event_new(cpu) == NULL);
    CHECK(ggml_backend_event_new(NULL) == NULL);
    ggml_backend_event_free(NULL);
}

static void test_devices(void) {
    CHECK(ggml_backend_dev_count() >= 1);
    ggml_backend_dev_t cpu = ggml_backend_dev_by_name("cpu"); // case-insensitive
    CHECK(cpu != NULL);
    CHECK(cpu == ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    CHECK(strcmp(ggml_backend_dev_name(cpu), "CPU") == 0);
    CHECK(ggml_backend_dev_description(cpu) != NULL);
    CHECK(ggml_backend_dev_type(cpu) == GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_META) == NULL);

    size_t free_mem = 0, total_mem = 0;
    ggml_backend_dev_memory(cpu, &free_mem, &total_mem);
    CHECK(total_mem > 0 && free_mem <= total_mem);

    struct ggml_backend_dev_props props;
    memset(&props, 0x5a, sizeof(props));
    ggml_backend_dev_get_props(cpu, &props);
    CHECK(strcmp(props.name, "CPU") == 0);
    CHECK(props.type == GGML_BACKEND_DEVICE_TYPE_CPU);
    CHECK(props.memory_total == total_mem);
    CHECK(props.caps.buffer_from_host_ptr);

    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(cpu);
    CHECK(reg != NULL && strcmp(ggml_backend_reg_name(reg), "CPU") == 0);
    CHECK(ggml_backend_dev_buffer_type(cpu) == ggml_backend_cpu_buffer_type());
    (void) ggml_backend_dev_host_buffer_type(cpu); // optional entry: any value

    float * mem = NULL;
    CHECK(posix_memalign((void **) &mem, 64, 128) == 0);
    ggml_backend_buffer_t hb = ggml_backend_dev_buffer_from_host_ptr(cpu, mem, 128, 128);
    CHECK(hb != NULL && ggml_backend_buffer_get_base(hb) == mem && ggml_backend_buffer_is_host(hb));
    ggml_backend_buffer_free(hb);
    free(mem);

    ggml_backend_t be = ggml_backend_dev_init(cpu, NULL);
    CHECK(be != NULL && ggml_backend_get_device(be) == cpu);
    ggml_backend_free(be);

    CHECK(ggml_backend_dev_supports_buft(cpu, ggml_backend_cpu_buffer_type()));
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    struct ggml_tensor * s = ggml_soft_max(ctx, a);
    CHECK(ggml_backend_dev_supports_op(cpu, s));
    CHECK(!ggml_backend_dev_offload_op(cpu, s));
    ggml_free(ctx);
}

static void test_registry(void) {
    CHECK(ggml_backend_reg_count() >= 1);
    ggml_backend_reg_t cpu = ggml_backend_reg_by_name("CPU");
    CHECK(cpu != NULL);
    CHECK(ggml_backend_reg_by_name("cPu") == cpu);
    CHECK(ggml_backend_reg_by_name("no-such-backend") == NULL);
    CHECK(ggml_backend_dev_by_name("no-such-device") == NULL);
    CHECK(ggml_backend_init_by_name("no-such-device", NULL) == NULL);

    int found = 0;
    for (size_t i = 0; i < ggml_backend_reg_count(); i++) found |= ggml_backend_reg_get(i) == cpu;
    CHECK(found);
    CHECK(ggml_backend_reg_dev_count(cpu) == 1);
    CHECK(ggml_backend_reg_dev_get(cpu, 0) == ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    found = 0;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) found |= ggml_backend_dev_get(i) == ggml_backend_reg_dev_get(cpu, 0);
    CHECK(found);

    CHECK(ggml_backend_reg_get_proc_address(cpu, "ggml_backend_set_n_threads") != NULL);
    CHECK(ggml_backend_reg_get_proc_address(cpu, "no_such_function") == NULL);

    ggml_backend_t by_name = ggml_backend_init_by_name("CPU", NULL);
    ggml_backend_t best = ggml_backend_init_best();
    CHECK(by_name != NULL && best != NULL);
    CHECK(ggml_backend_get_device(best) == ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    ggml_backend_free(by_name);
    ggml_backend_free(best);

    // a device registered on its own joins the device list, again if it is there already
    // (ggml 0.9.11); in the ABI classes that made registration idempotent, nothing happens
#if GGML_BACKEND_RS_HAS_IDEMPOTENT_REGISTRATION
    const size_t again = 0;
#else
    const size_t again = 1;
#endif
    size_t n = ggml_backend_dev_count();
    ggml_backend_device_register(ggml_backend_reg_dev_get(cpu, 0));
    CHECK(ggml_backend_dev_count() == n + again);
    ggml_backend_register(NULL); // ignored
    CHECK(ggml_backend_dev_count() == n + again);
}

// dynamic loading: argv[2] = a plugin library, argv[3] = a directory with scored variants
static void test_plugin(const char * plugin, const char * dir) {
    size_t regs = ggml_backend_reg_count(), devs = ggml_backend_dev_count();
    ggml_backend_reg_t reg = ggml_backend_load(plugin);
    CHECK(reg != NULL);
    if (reg == NULL) return;
    CHECK(strcmp(ggml_backend_reg_name(reg), "TESTPLUGIN") == 0);
    CHECK(ggml_backend_reg_count() == regs + 1 && ggml_backend_dev_count() == devs + 1);
    ggml_backend_dev_t dev = ggml_backend_dev_by_name("testplugin_dev");
    CHECK(dev != NULL && ggml_backend_dev_backend_reg(dev) == reg);
    CHECK(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_ACCEL);
    int (*answer)(void) = (int (*)(void)) ggml_backend_reg_get_proc_address(reg, "answer");
    CHECK(answer != NULL && answer() == 42);
    CHECK(ggml_backend_reg_by_name("TESTPLUGIN") == reg);

    ggml_backend_unload(reg);
    CHECK(ggml_backend_reg_count() == regs && ggml_backend_dev_count() == devs);
    CHECK(ggml_backend_dev_by_name("testplugin_dev") == NULL);

    // the directory holds libggml-blas-low.so (score 5), libggml-blas-high.so (score 10),
    // libggml-blas-zero.so (score 0): the highest score wins
    ggml_backend_load_all_from_path(dir);
    ggml_backend_reg_t blas = ggml_backend_reg_by_name("BLAS_HIGH");
    CHECK(blas != NULL);
    CHECK(ggml_backend_reg_by_name("BLAS_LOW") == NULL);
    CHECK(ggml_backend_reg_by_name("BLAS_ZERO") == NULL);
}

// files that are not loadable ggml backends: NULL and a logged reason, never a crash
static void test_plugin_rejects(const char * dir) {
    size_t regs = ggml_backend_reg_count();
    char path[4096];
    snprintf(path, sizeof(path), "%s/not-a-library.so", dir);
    CHECK(ggml_backend_load(path) == NULL);
    snprintf(path, sizeof(path), "%s/does-not-exist.so", dir);
    CHECK(ggml_backend_load(path) == NULL);
    snprintf(path, sizeof(path), "%s/libno-init.so", dir);
    CHECK(ggml_backend_load(path) == NULL);
    snprintf(path, sizeof(path), "%s/libscore-zero.so", dir);
    CHECK(ggml_backend_load(path) == NULL);
    snprintf(path, sizeof(path), "%s/libold-api.so", dir);
    CHECK(ggml_backend_load(path) == NULL);
    CHECK(ggml_backend_reg_count() == regs);
}

static bool compare_cb(int i, struct ggml_tensor * t1, struct ggml_tensor * t2, void * ud) {
    int * n = (int *) ud;
    (void) i;
    size_t nb = ggml_nbytes(t1);
    void * a = malloc(nb), * b = malloc(nb);
    ggml_backend_tensor_get(t1, a, 0, nb);
    ggml_backend_tensor_get(t2, b, 0, nb);
    CHECK(memcmp(a, b, nb) == 0);
    free(a);
    free(b);
    (*n)++;
    return true;
}

static void test_graph_copy(void) {
    ggml_backend_t b1 = cpu_backend(), b2 = cpu_backend();
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 6);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 3);
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);               // 6 x 3
    struct ggml_tensor * v = ggml_view_2d(ctx, y, 3, 3, y->nb[1], 0); // a view
    struct ggml_tensor * z = ggml_soft_max(ctx, ggml_cont(ctx, v));
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, z);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, b1);
    float data[48];
    for (int i = 0; i < 48; i++) data[i] = sinf((float) i);
    ggml_backend_tensor_set(w, data, 0, ggml_nbytes(w));
    ggml_backend_tensor_set(x, data + 10, 0, ggml_nbytes(x));
    // graph_copy copies data of allocated tensors, so compute once to give every node data
    ggml_backend_graph_compute(b1, gf);

    struct ggml_backend_graph_copy copy = ggml_backend_graph_copy(b2, gf);
    CHECK(copy.buffer != NULL && copy.graph != NULL);
    CHECK(ggml_graph_n_nodes(copy.graph) == ggml_graph_n_nodes(gf));
    struct ggml_tensor * zc = ggml_graph_node(copy.graph, -1);
    CHECK(zc != z && zc->ne[0] == 3 && zc->ne[1] == 3 && zc->op == GGML_OP_SOFT_MAX);
    float r1[9], r2[9];
    ggml_backend_tensor_get(z, r1, 0, sizeof(r1));
    ggml_backend_tensor_get(zc, r2, 0, sizeof(r2));
    CHECK(memcmp(r1, r2, sizeof(r1)) == 0);
    ggml_backend_graph_copy_free(copy);

    int n = 0;
    CHECK(ggml_backend_compare_graph_backend(b1, b2, gf, compare_cb, &n, NULL, 0));
    CHECK(n >= 3); // mul_mat, cont, soft_max (views are skipped)
    int m = 0;
    const struct ggml_tensor * test_nodes[1] = { z };
    CHECK(ggml_backend_compare_graph_backend(b1, b2, gf, compare_cb, &m, test_nodes, 1));
    CHECK(m == 1);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(b1);
    ggml_backend_free(b2);
}

// strided and asynchronous transfers that reach the native entries of a device (TESTGPU0
// implements them; the CPU backend does not), and copies between non-host buffers
static void test_device_transfers(void) {
    test_device_register(2);
    ggml_backend_t dev0 = ggml_backend_init_by_name("TESTGPU0", NULL);
    ggml_backend_t dev1 = ggml_backend_init_by_name("TESTGPU1", NULL);
    CHECK(dev0 != NULL && dev1 != NULL);
    if (!dev0 || !dev1) return;
    CHECK(!ggml_backend_buft_is_host(ggml_backend_get_default_buffer_type(dev0)));
    CHECK(ggml_backend_get_alignment(dev0) == 64);

    struct ggml_context * ctx0 = new_ctx();
    struct ggml_context * ctx1 = new_ctx();
    struct ggml_tensor * t = ggml_new_tensor_2d(ctx0, GGML_TYPE_I32, 8, 5);
    struct ggml_tensor * u = ggml_new_tensor_2d(ctx1, GGML_TYPE_I32, 8, 5);
    ggml_backend_buffer_t b0 = ggml_backend_alloc_ctx_tensors(ctx0, dev0);
    ggml_backend_buffer_t b1 = ggml_backend_alloc_ctx_tensors(ctx1, dev1);
    CHECK(b0 != NULL && b1 != NULL && !ggml_backend_buffer_is_host(b0));
    ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));

    int32_t src[12], all[40], dst[8];
    for (int i = 0; i < 12; i++) src[i] = 100 + i;
    int calls = test_device_2d_calls;
    // 3 blocks of 2 elements at columns 1..2 of rows 0, 2, 4; host stride 4 elements
    ggml_backend_tensor_set_2d(t, src, 1 * 4, 2 * 4, 3, 2 * 8 * 4, 4 * 4);
    CHECK(test_device_2d_calls == calls + 1);
    ggml_backend_tensor_get(t, all, 0, sizeof(all));
    CHECK(all[1] == 100 && all[2] == 101 && all[17] == 104 && all[18] == 105 && all[33] == 108 && all[34] == 109);
    CHECK(all[0] == 0 && all[3] == 0 && all[9] == 0);
    ggml_backend_tensor_get_2d(t, dst, 1 * 4, 2 * 4, 2, 2 * 8 * 4, 3 * 4);
    CHECK(test_device_2d_calls == calls + 2);
    CHECK(dst[0] == 100 && dst[1] == 101 && dst[3] == 104 && dst[4] == 105);
    // a single block takes the plain path
    ggml_backend_tensor_set_2d(t, src, 0, 4, 1, 0, 0);
    CHECK(test_device_2d_calls == calls + 2);

    int acalls = test_device_async_calls;
    ggml_backend_tensor_set_2d_async(dev0, t, src, 6 * 4, 2 * 4, 2, 8 * 4, 2 * 4);
    ggml_backend_tensor_get_2d_async(dev0, t, dst, 6 * 4, 2 * 4, 2, 8 * 4, 2 * 4);
    int32_t one = 7, back = 0;
    ggml_backend_tensor_set_async(dev0, t, &one, 39 * 4, 4);
    ggml_backend_tensor_get_async(dev0, t, &back, 39 * 4, 4);
    ggml_backend_synchronize(dev0);
    CHECK(test_device_async_calls == acalls + 4);
    CHECK(dst[0] == 100 && dst[1] == 101 && dst[2] == 102 && dst[3] == 103 && back == 7);

    // device -> other device (neither host, no direct copy): through host memory
    ggml_backend_tensor_copy(t, u);
    int32_t all_u[40];
    ggml_backend_tensor_get(t, all, 0, sizeof(all));
    ggml_backend_tensor_get(u, all_u, 0, sizeof(all_u));
    CHECK(memcmp(all, all_u, sizeof(all)) == 0);

    // device -> CPU and back, and an asynchronous copy host -> device
    struct ggml_context * ctxc = new_ctx();
    struct ggml_tensor * c = ggml_new_tensor_2d(ctxc, GGML_TYPE_I32, 8, 5);
    ggml_backend_buffer_t bc = ggml_backend_alloc_ctx_tensors_from_buft(ctxc, ggml_backend_cpu_buffer_type());
    ggml_backend_tensor_copy(u, c);
    CHECK(memcmp(c->data, all, sizeof(all)) == 0);
    ggml_backend_tensor_memset(t, 0, 0, ggml_nbytes(t));
    ggml_backend_tensor_copy_async(NULL, dev0, c, t);
    ggml_backend_synchronize(dev0);
    ggml_backend_tensor_get(t, all_u, 0, sizeof(all_u));
    CHECK(memcmp(all, all_u, sizeof(all)) == 0);

    ggml_backend_buffer_free(bc);
    ggml_backend_buffer_free(b0);
    ggml_backend_buffer_free(b1);
    ggml_free(ctxc);
    ggml_free(ctx0);
    ggml_free(ctx1);
    ggml_backend_free(dev0);
    ggml_backend_free(dev1);
}

// ---------------------------------------------------------------------------------------
// bad input: each of these must end in ggml's abort with a message, never in UB

static struct ggml_tensor * allocated_tensor(ggml_backend_t * backend_out) {
    ggml_backend_t backend = cpu_backend();
    struct ggml_context * ctx = new_ctx();
    struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
    ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (backend_out) *backend_out = backend;
    return t;
}

// An eval callback that asks its own scheduler something (upstream answers; here the
// computation holds the scheduler, so the call stops).
static bool reentrant_eval(struct ggml_tensor * t, bool ask, void * user_data) {
    (void) t;
    (void) ask;
    ggml_backend_sched_get_n_splits((ggml_backend_sched_t) user_data);
    return true;
}

static void sched_reentry(void) {
    ggml_backend_t backend = cpu_backend();
    ggml_backend_sched_t sched = ggml_backend_sched_new(&backend, NULL, 1, 64, false, true);
    struct ggml_context * ctx = ggml_init((struct ggml_init_params) { 16 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true });
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    ggml_set_input(a);
    struct ggml_tensor * b = ggml_scale(ctx, a, 2.0f);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, b);
    ggml_backend_sched_set_eval_callback(sched, reentrant_eval, sched);
    ggml_backend_sched_alloc_graph(sched, gf);
    float x[4] = { 1, 2, 3, 4 };
    ggml_backend_tensor_set(a, x, 0, sizeof(x));
    ggml_backend_sched_graph_compute(sched, gf);
}

static int bad_input(const char * name) {
    float buf[64] = { 0 };
    if (strcmp(name, "bad_set_out_of_bounds") == 0) {
        ggml_backend_tensor_set(allocated_tensor(NULL), buf, 60, 8);
    } else if (strcmp(name, "bad_get_offset_overflow") == 0) {
        ggml_backend_tensor_get(allocated_tensor(NULL), buf, SIZE_MAX - 2, 4);
    } else if (strcmp(name, "bad_set_2d_out_of_bounds") == 0) {
        ggml_backend_tensor_set_2d(allocated_tensor(NULL), buf, 0, 8, 3, 32, 8);
    } else if (strcmp(name, "bad_get_2d_stride_overflow") == 0) {
        ggml_backend_tensor_get_2d(allocated_tensor(NULL), buf, 0, 4, 3, SIZE_MAX / 2, 4);
    } else if (strcmp(name, "bad_memset_out_of_bounds") == 0) {
        ggml_backend_tensor_memset(allocated_tensor(NULL), 0, 64, 1);
    } else if (strcmp(name, "bad_set_async_out_of_bounds") == 0) {
        ggml_backend_t backend;
        struct ggml_tensor * t = allocated_tensor(&backend);
        ggml_backend_tensor_set_async(backend, t, buf, 0, 65);
    } else if (strcmp(name, "bad_set_unallocated") == 0) {
        struct ggml_context * ctx = new_ctx();
        struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 16);
        ggml_backend_tensor_set(t, buf, 0, 4);
    } else if (strcmp(name, "bad_copy_layouts") == 0) {
        struct ggml_context * ctx = new_ctx();
        ggml_backend_tensor_copy(ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4), ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 5));
    } else if (strcmp(name, "bad_buffer_copy_too_small") == 0) {
        // upstream lets the destination buffer's cpy_tensor write past the smaller tensor
        struct ggml_context * ctx = new_ctx();
        struct ggml_tensor * src = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 8);
        struct ggml_tensor * dst = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
        ggml_set_name(src, "src8");
        ggml_set_name(dst, "dst4");
        ggml_backend_alloc_ctx_tensors_from_buft(ctx, ggml_backend_cpu_buffer_type());
        ggml_backend_buffer_copy_tensor(src, dst);
    } else if (strcmp(name, "bad_null_buft") == 0) {
        ggml_backend_buft_name(NULL);
    } else if (strcmp(name, "bad_null_buffer") == 0) {
        ggml_backend_buffer_get_size(NULL);
    } else if (strcmp(name, "bad_null_tensor") == 0) {
        ggml_backend_tensor_set(NULL, buf, 0, 4);
    } else if (strcmp(name, "bad_dev_index") == 0) {
        ggml_backend_dev_get(ggml_backend_dev_count());
    } else if (strcmp(name, "bad_reg_index") == 0) {
        ggml_backend_reg_get(1000);
    } else if (strcmp(name, "bad_sched_reentry") == 0) {
        sched_reentry();
    } else if (strcmp(name, "bad_tensor_alloc_outside") == 0) {
        struct ggml_context * ctx = new_ctx();
        struct ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 64);
        ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(ggml_backend_cpu_buffer_type(), 128);
        ggml_backend_tensor_alloc(b, t, ggml_backend_buffer_get_base(b));
    } else {
        fprintf(stderr, "unknown case %s\n", name);
        return 2;
    }
    fprintf(stderr, "NOT STOPPED: %s returned\n", name);
    return 1;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <case> [args]\n", argv[0]);
        return 2;
    }
    const char * c = argv[1];
    if (strncmp(c, "bad_", 4) == 0) return bad_input(c);
    if (strcmp(c, "buffer_type") == 0) test_buffer_type();
    else if (strcmp(c, "buffer") == 0) test_buffer();
    else if (strcmp(c, "tensor_data") == 0) test_tensor_data();
    else if (strcmp(c, "tensor_copy") == 0) test_tensor_copy();
    else if (strcmp(c, "backend") == 0) test_backend();
    else if (strcmp(c, "events") == 0) test_events();
    else if (strcmp(c, "devices") == 0) test_devices();
    else if (strcmp(c, "registry") == 0) test_registry();
    else if (strcmp(c, "plugin") == 0 && argc == 4) test_plugin(argv[2], argv[3]);
    else if (strcmp(c, "plugin_rejects") == 0 && argc == 3) test_plugin_rejects(argv[2]);
    else if (strcmp(c, "graph_copy") == 0) test_graph_copy();
    else if (strcmp(c, "device_transfers") == 0) test_device_transfers();
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", c, failures);
        return 1;
    }
    printf("%s: ok\n", c);
    return 0;
}
