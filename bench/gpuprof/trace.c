/*
 * gpuprof: a GPU timeline tracer on CUPTI's Activity API, for `python3 bench/gpu.py profile`
 * (docs/gpu.md, "Profiling a decode step"). No nsys needed: the CUDA driver loads it.
 *
 * Loading
 *   CUDA_INJECTION64_PATH=/path/libgpuprof.so   the driver loads it at cuInit and calls
 *                                              InitializeInjection();
 *   LD_PRELOAD=/path/libgpuprof.so              a constructor does the same before main (unless
 *                                              CUDA_INJECTION64_PATH names this library too).
 *   Either way it initialises once.
 *
 * Environment
 *   GPUPROF_OUT   the output file [gpuprof.tsv], truncated at start
 *   GPUPROF_API   1: also the host side of the launch and ordering calls below
 *
 * Output: a first line "# gpuprof 1 kind start_ns end_ns device stream correlation graph_id name",
 * then one line per activity record, tab-separated, in the order CUPTI delivers them (per buffer;
 * not sorted by time):
 *   kind         kernel | memcpy | memset | driver | runtime
 *   start_ns     CUPTI timestamps in ns; GPU and host records share one clock
 *   end_ns
 *   device       CUDA device ordinal (-1 for driver/runtime records)
 *   stream       CUPTI stream id (-1 for driver/runtime records); a kernel of a CUDA graph has the
 *                id of the stream the graph was launched into
 *   correlation  ties a GPU record to the API call that issued it (the API record has the same id)
 *   graph_id     the CUDA graph of the node (0: not launched from a graph; -1 for API records)
 *   name         kernel: its mangled name; memcpy: HtoD, DtoH, DtoD, HtoH, PtoP, ...; memset:
 *                memset; driver/runtime: the function (cuGraphLaunch, cudaEventRecord, ...)
 * Lines are written whenever CUPTI hands back a full buffer (8 MiB: the hot path only fills
 * buffers) and at exit, after cuptiActivityFlushAll.
 *
 * Errors: a failing CUPTI call or an unwritable output prints one line "gpuprof: ..." to stderr
 * and turns tracing off; it never stops the traced program.
 *
 * Records are read through CUpti_ActivityKernel9, CUpti_ActivityMemcpy6 and
 * CUpti_ActivityMemset4: the fields used here have the same offsets in every later version up to
 * CUpti_ActivityKernel13 / Memcpy7 / Memset5 (CUPTI 12.x and 13.x headers), and CUPTI returns its
 * newest version, which only appends fields.
 *
 * Build: gcc -shared -fPIC -O2 trace.c -I<cupti include> -I<cuda include> -L<cupti lib>
 *        -l:libcupti.so[.N] -Wl,-rpath,<cupti lib> -ldl -lpthread
 *        (bench/gpubench/cupti.py finds the directories; pip wheels have no plain libcupti.so)
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_SIZE (8u << 20)

static FILE *out;
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int disabled;            /* set by the first failure: buffers are then dropped */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* ---- errors ------------------------------------------------------------------------------- */

/* One line per failure, then tracing off; later failures stay silent. */
static void fail(const char *what, const char *why)
{
    if (atomic_exchange(&disabled, 1) == 0)
        fprintf(stderr, "gpuprof: %s failed: %s; tracing off\n", what, why);
}

/* Checks a CUPTI call; returns 1 when it succeeded. */
static int ok(CUptiResult r, const char *what)
{
    if (r == CUPTI_SUCCESS)
        return 1;
    const char *why = NULL;
    if (cuptiGetResultString(r, &why) != CUPTI_SUCCESS || !why)
        why = "unknown CUPTI error";
    fail(what, why);
    return 0;
}

#define CHECK(call) ok((call), #call)

/* ---- names -------------------------------------------------------------------------------- */

static const char *memcpy_name(uint8_t kind)
{
    switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return "HtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return "AtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA: return "AtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD: return "AtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return "DtoA";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "PtoP";
    default: return "unknown";
    }
}

struct api {
    CUpti_CallbackId cbid;
    const char *name;
};

/* The host calls GPUPROF_API=1 records: launches, and the events that order streams. */
static const struct api driver_apis[] = {
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, "cuGraphLaunch"},
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, "cuGraphLaunch"},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel"},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cuLaunchKernel"},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cuLaunchKernelEx"},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, "cuLaunchKernelEx"},
    {CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, "cuStreamWaitEvent"},
    {CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent_ptsz, "cuStreamWaitEvent"},
    {CUPTI_DRIVER_TRACE_CBID_cuEventRecord, "cuEventRecord"},
    {CUPTI_DRIVER_TRACE_CBID_cuEventRecord_ptsz, "cuEventRecord"},
    {CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags, "cuEventRecordWithFlags"},
    {CUPTI_DRIVER_TRACE_CBID_cuEventRecordWithFlags_ptsz, "cuEventRecordWithFlags"},
    {CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, "cuStreamSynchronize"},
    {CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, "cuStreamSynchronize"},
};

static const struct api runtime_apis[] = {
    {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000, "cudaGraphLaunch"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020, "cudaEventRecord"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_ptsz_v7000, "cudaEventRecord"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_v11010, "cudaEventRecordWithFlags"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaEventRecordWithFlags_ptsz_v11010, "cudaEventRecordWithFlags"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, "cudaStreamWaitEvent"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_ptsz_v7000, "cudaStreamWaitEvent"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, "cudaStreamSynchronize"},
    {CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000, "cudaStreamSynchronize"},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *api_name(const struct api *table, size_t n, CUpti_CallbackId cbid)
{
    for (size_t i = 0; i < n; ++i)
        if (table[i].cbid == cbid)
            return table[i].name;
    return "other";
}

/* ---- records ------------------------------------------------------------------------------ */

/* One line per record; called with out_lock held. */
static void write_record(const CUpti_Activity *rec)
{
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const CUpti_ActivityKernel9 *k = (const CUpti_ActivityKernel9 *)rec;
        fprintf(out, "kernel\t%" PRIu64 "\t%" PRIu64 "\t%u\t%u\t%u\t%u\t%s\n", (uint64_t)k->start,
                (uint64_t)k->end, k->deviceId, k->streamId, k->correlationId, k->graphId,
                k->name ? k->name : "?");
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
        fprintf(out, "memcpy\t%" PRIu64 "\t%" PRIu64 "\t%u\t%u\t%u\t%u\t%s\n", (uint64_t)m->start,
                (uint64_t)m->end, m->deviceId, m->streamId, m->correlationId, m->graphId,
                memcpy_name(m->copyKind));
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
        fprintf(out, "memset\t%" PRIu64 "\t%" PRIu64 "\t%u\t%u\t%u\t%u\tmemset\n", (uint64_t)m->start,
                (uint64_t)m->end, m->deviceId, m->streamId, m->correlationId, m->graphId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const CUpti_ActivityAPI *a = (const CUpti_ActivityAPI *)rec;
        const int driver = rec->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        const char *name = driver ? api_name(driver_apis, COUNT(driver_apis), a->cbid)
                                  : api_name(runtime_apis, COUNT(runtime_apis), a->cbid);
        fprintf(out, "%s\t%" PRIu64 "\t%" PRIu64 "\t-1\t-1\t%u\t-1\t%s\n", driver ? "driver" : "runtime",
                (uint64_t)a->start, (uint64_t)a->end, a->correlationId, name);
        break;
    }
    default:
        break;
    }
}

/* ---- CUPTI buffers ------------------------------------------------------------------------ */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    /* malloc's alignment (16) covers ACTIVITY_RECORD_ALIGNMENT (8) */
    *buffer = malloc(BUFFER_SIZE);
    *size = *buffer ? BUFFER_SIZE : 0;
    *max_records = 0;
    if (!*buffer)
        fail("malloc of an activity buffer", "out of memory");
}

/* CUPTI hands a buffer back when it is full, or at a flush: the only place that writes. */
static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                                      size_t valid)
{
    (void)size;
    if (!atomic_load(&disabled) && valid > 0) {
        pthread_mutex_lock(&out_lock);
        CUpti_Activity *rec = NULL;
        for (;;) {
            const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid, &rec);
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED)
                break;
            if (!CHECK(r))
                break;
            write_record(rec);
        }
        if (fflush(out) != 0)
            fail("writing GPUPROF_OUT", "fflush");
        pthread_mutex_unlock(&out_lock);
        size_t dropped = 0;
        if (CHECK(cuptiActivityGetNumDroppedRecords(ctx, stream, &dropped)) && dropped > 0)
            fprintf(stderr, "gpuprof: %zu records dropped (context %p, stream %u)\n", dropped, (void *)ctx,
                    stream);
    }
    free(buffer);
}

static void flush_at_exit(void)
{
    if (atomic_load(&disabled))
        return;
    CHECK(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
    pthread_mutex_lock(&out_lock);
    fflush(out);  /* not closed: a context torn down later may still hand back a buffer */
    pthread_mutex_unlock(&out_lock);
}

/* ---- initialisation ----------------------------------------------------------------------- */

static void enable_apis(void)
{
    for (size_t i = 0; i < COUNT(driver_apis); ++i)
        if (!CHECK(cuptiActivityEnableDriverApi(driver_apis[i].cbid, 1)))
            return;
    for (size_t i = 0; i < COUNT(runtime_apis); ++i)
        if (!CHECK(cuptiActivityEnableRuntimeApi(runtime_apis[i].cbid, 1)))
            return;
}

static void init(void)
{
    const char *path = getenv("GPUPROF_OUT");
    if (!path || !*path)
        path = "gpuprof.tsv";
    out = fopen(path, "w");
    if (!out) {
        fail("opening GPUPROF_OUT", path);
        return;
    }
    /* lines go out in one write per buffer rather than one per record */
    setvbuf(out, NULL, _IOFBF, 1u << 20);
    fprintf(out, "# gpuprof 1 kind start_ns end_ns device stream correlation graph_id name\n");
    fflush(out);

    if (!CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed)) ||
        !CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) ||
        !CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY)) ||
        !CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET)))
        return;
    const char *api = getenv("GPUPROF_API");
    if (api && strcmp(api, "1") == 0)
        enable_apis();
    if (atexit(flush_at_exit) != 0)
        fail("atexit", "no slot for the exit flush");
}

/* Called by the CUDA driver when CUDA_INJECTION64_PATH names this library. */
__attribute__((visibility("default"))) int InitializeInjection(void)
{
    pthread_once(&init_once, init);
    return 1;
}

/* True when CUDA_INJECTION64_PATH names this library: the driver will call InitializeInjection. */
static int injected(void)
{
    const char *inj = getenv("CUDA_INJECTION64_PATH");
    Dl_info self;
    if (!inj || !*inj || !dladdr((const void *)&out_lock, &self) || !self.dli_fname)
        return 0;
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(inj, a) || !realpath(self.dli_fname, b))
        return 0;
    return strcmp(a, b) == 0;
}

/* LD_PRELOAD: initialise before main. Under injection the driver is inside cuInit while it loads
 * us, so the constructor leaves the work to InitializeInjection. */
__attribute__((constructor)) static void preload_init(void)
{
    if (!injected())
        pthread_once(&init_once, init);
}
