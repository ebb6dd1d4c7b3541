// mappedcheck: runs the mapped AllReduce kernel (crates/core/src/mapped.rs, `mapped::ptx`,
// written as DIR/mapped_x<n>.ptx by `cargo run -p ggml-backend-rs-core --example dump_ptx -- DIR`)
// on GPU 0 through the CUDA driver API, as several GPUs at once: one launch per GPU, each on a
// stream of its own, all over one region of pinned host memory mapped into the device (the
// layout of `mapped::Layout`). It checks the protocol's contract:
//
//   every member's result is the partials summed in exchange::reference_sum order (a pairwise
//   tree for a power of two, else device order), bit for bit, in every step, with the partials
//   different in each step (a slot read from another step or member changes the sum);
//   consecutive steps' launches have grids of 8, 3 and 1 blocks in turn, and agree on their
//   epochs all the same;
//   a GPU that does not launch makes the others' blocks give up after the timeout: their error
//   word names it (index + 1), their outputs stay as they were and their counters do not move;
//   the launch after that gives up at once (within a second, its bound being 5 s); with the
//   flags, error words and counters cleared, the next step is right again.
//
// Configurations: members on their own GPUs (2, 3, 4 and 8), two members on one GPU (one launch
// for both, as CUDA0,CUDA0), and two on one GPU with a third on another.
//
// The epilogues (`add`, `add_rms_mul`) are checked against the peer kernel's entries
// (allreduce_x<n>.ptx), bit for bit: X and Z of every member through host memory must be the
// peer kernel's, for a decode row, rows longer than a block's trip, and rows of one warp, with
// each GPU's launch given only its own members.
//
// Usage: mappedcheck DIR. Prints one line per case ("ok ..." or "FAIL ...") and exits 1 on any
// failure. bench/ptxcheck/run.sh compiles and runs it.
//
//        mappedcheck --time DIR
// Microseconds per step (every GPU's launch and a wait for all, from the host, so launch costs
// included) for two members on one GPU (one launch), on two and on four GPUs run as launches
// on one GPU, for a decode row of 4096 values and a pp512 tensor (512 rows); then the copy
// engines' transport (out to pinned host memory and back, then a sum) beside two launches as two
// GPUs, for partials of 16 KiB to 8 MiB.

#define _POSIX_C_SOURCE 200809L

#include <cuda.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_MEMBERS 8
#define THREADS 256
#define ALIGN 128

static void check(CUresult r, const char *what, int line) {
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "mappedcheck: %s failed: %s (line %d)\n", what, name, line);
        exit(2);
    }
}
#define CK(call) check((call), #call, __LINE__)

static size_t align_up(size_t x) { return (x + ALIGN - 1) / ALIGN * ALIGN; }

// mapped::Layout
struct layout {
    size_t slot_bytes, flags_at, flag_bytes, errors_at, bytes;
};

// (`words`: flags and counters per GPU, the most blocks of a launch)
static struct layout layout_of(int members, int gpus, size_t capacity, int words) {
    struct layout l;
    l.slot_bytes = align_up(capacity * 4);
    l.flags_at = l.slot_bytes * 2 * (size_t) members;
    l.flag_bytes = align_up((size_t) words * 4);
    l.errors_at = l.flags_at + l.flag_bytes * (size_t) gpus;
    l.bytes = l.errors_at + align_up((size_t) gpus * 4);
    return l;
}

// Member k's value i in step `step`: 24 random bits of mantissa times 2^-8..2^7, so that sums in
// another order round otherwise, and different in every (step, k, i).
static float value(int step, int k, size_t i) {
    uint64_t z = ((uint64_t) step << 48) ^ ((uint64_t) k << 40) ^ (uint64_t) i;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const float m = (float) (z >> 40) / 16777216.0f - 0.5f;
    return ldexpf(m, (int) ((z >> 8) & 15) - 8);
}

// exchange::reference_sum
static float reference_sum(const float *p, int n) {
    if ((n & (n - 1)) == 0) {
        float level[MAX_MEMBERS];
        memcpy(level, p, sizeof(float) * (size_t) n);
        for (int m = n; m > 1; m /= 2) {
            for (int j = 0; j < m / 2; j++) level[j] = level[2 * j] + level[2 * j + 1];
        }
        return level[0];
    }
    float s = p[0];
    for (int k = 1; k < n; k++) s = s + p[k];
    return s;
}

// The PTX module DIR/NAME, loaded (its compile log printed if the driver refuses it).
static CUmodule load_module(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "rb");
    if (!fp) { perror(path); exit(2); }
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t) size + 1);
    if (!text || fread(text, 1, (size_t) size, fp) != (size_t) size) { perror(path); exit(2); }
    text[size] = 0;
    fclose(fp);
    static char log[8192];
    CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *val[2] = {log, (void *) (uintptr_t) sizeof log};
    CUmodule mod;
    CUresult r = cuModuleLoadDataEx(&mod, text, 2, opt, val);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "mappedcheck: %s does not load:\n%s\n", path, log);
        check(r, "cuModuleLoadDataEx", __LINE__);
    }
    free(text);
    return mod;
}

// The mapped kernel for n members.
static CUmodule load(const char *dir, int n, CUfunction *f) {
    char name[64];
    snprintf(name, sizeof name, "mapped_x%d.ptx", n);
    CUmodule mod = load_module(dir, name);
    snprintf(name, sizeof name, "ggml_meta_allreduce_mapped_sum_f32_x%d", n);
    CK(cuModuleGetFunction(f, mod, name));
    return mod;
}

// Flags and counters per GPU (Layout::words_per_gpu): launches take up to this many blocks.
#define WORDS 1024

struct run {
    int members, gpus, blocks;
    const int *gpu_of;
    size_t len;
    struct layout l;
    uint8_t *host;       // the region (host view)
    CUdeviceptr region;  // the region (device view)
    CUdeviceptr part[MAX_MEMBERS], out[MAX_MEMBERS], counters[MAX_MEMBERS];
    CUstream stream[MAX_MEMBERS];
    CUmodule mod;
    CUfunction f;
};

// A run of `members` partials of `len` values on GPUs `gpu_of`, launches of `blocks` blocks:
// the module, the mapped region (zeroed), partials, outputs, counters and streams.
static void run_open(struct run *r, const char *dir, int members, const int *gpu_of, size_t len, int blocks) {
    memset(r, 0, sizeof *r);
    r->members = members;
    r->gpu_of = gpu_of;
    r->len = len;
    r->blocks = blocks;
    for (int k = 0; k < members; k++) r->gpus = gpu_of[k] + 1 > r->gpus ? gpu_of[k] + 1 : r->gpus;
    r->l = layout_of(members, r->gpus, len, WORDS);
    r->mod = load(dir, members, &r->f);
    void *host;
    CK(cuMemHostAlloc(&host, r->l.bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    r->host = host;
    memset(r->host, 0, r->l.bytes);
    CK(cuMemHostGetDevicePointer(&r->region, host, 0));
    for (int k = 0; k < members; k++) {
        CK(cuMemAlloc(&r->part[k], len * sizeof(float)));
        CK(cuMemAlloc(&r->out[k], len * sizeof(float)));
    }
    for (int g = 0; g < r->gpus; g++) {
        CK(cuMemAlloc(&r->counters[g], (size_t) WORDS * 4));
        CK(cuMemsetD32(r->counters[g], 0, (size_t) WORDS));
        CK(cuStreamCreate(&r->stream[g], CU_STREAM_NON_BLOCKING));
    }
}

static void run_close(struct run *r) {
    for (int k = 0; k < r->members; k++) {
        CK(cuMemFree(r->part[k]));
        CK(cuMemFree(r->out[k]));
    }
    for (int g = 0; g < r->gpus; g++) {
        CK(cuMemFree(r->counters[g]));
        CK(cuStreamDestroy(r->stream[g]));
    }
    CK(cuMemFreeHost(r->host));
    CK(cuModuleUnload(r->mod));
}

static void launch(struct run *r, int g, uint64_t timeout_ns) {
    uint64_t v[2 * MAX_MEMBERS + 11];
    int a = 0;
    for (int k = 0; k < r->members; k++) v[a++] = r->gpu_of[k] == g ? (uint64_t) r->part[k] : 0;
    for (int k = 0; k < r->members; k++) v[a++] = r->gpu_of[k] == g ? (uint64_t) r->out[k] : 0;
    v[a++] = (uint64_t) r->region;
    v[a++] = r->l.slot_bytes;
    v[a++] = (uint64_t) r->region + r->l.flags_at;
    v[a++] = r->l.flag_bytes;
    v[a++] = (uint64_t) r->region + r->l.errors_at;
    v[a++] = (uint64_t) r->counters[g];
    v[a++] = (uint64_t) g;
    v[a++] = (uint64_t) r->gpus;
    v[a++] = timeout_ns;
    v[a++] = 0;
    v[a++] = r->len;
    void *args[2 * MAX_MEMBERS + 11];
    for (int i = 0; i < a; i++) args[i] = &v[i];
    CK(cuLaunchKernel(r->f, (unsigned) r->blocks, 1, 1, THREADS, 1, 1, 0, r->stream[g], args, NULL));
}

static void upload(struct run *r, int step) {
    float *h = malloc(r->len * sizeof(float));
    for (int k = 0; k < r->members; k++) {
        for (size_t i = 0; i < r->len; i++) h[i] = value(step, k, i);
        CK(cuMemcpyHtoD(r->part[k], h, r->len * sizeof(float)));
        for (size_t i = 0; i < r->len; i++) h[i] = NAN;
        CK(cuMemcpyHtoD(r->out[k], h, r->len * sizeof(float)));
    }
    free(h);
}

// Every member's result against the reference sum of `step`; 0 when right.
static int verify(struct run *r, int step, const char *what) {
    float *got = malloc(r->len * sizeof(float));
    int bad = 0;
    for (int k = 0; k < r->members && !bad; k++) {
        CK(cuMemcpyDtoH(got, r->out[k], r->len * sizeof(float)));
        for (size_t i = 0; i < r->len; i++) {
            float p[MAX_MEMBERS] = {0};
            for (int j = 0; j < r->members; j++) p[j] = value(step, j, i);
            float want = reference_sum(p, r->members);
            uint32_t a, b;
            memcpy(&a, &got[i], 4);
            memcpy(&b, &want, 4);
            if (a != b) {
                printf("FAIL %s: step %d member %d element %zu: %.9g, want %.9g\n", what, step, k, i,
                       (double) got[i], (double) want);
                bad = 1;
                break;
            }
        }
    }
    free(got);
    return bad;
}

static void clear(struct run *r) {
    memset(r->host + r->l.flags_at, 0, r->l.bytes - r->l.flags_at);
    for (int g = 0; g < r->gpus; g++) CK(cuMemsetD32(r->counters[g], 0, (size_t) WORDS));
}

static int one_config(const char *dir, int members, const int *gpu_of, size_t len) {
    const int blocks = 8;
    struct run r;
    run_open(&r, dir, members, gpu_of, len, blocks);
    char what[128];
    int n = snprintf(what, sizeof what, "x%d gpus", members);
    for (int k = 0; k < members; k++) n += snprintf(what + n, sizeof what - (size_t) n, "%s%d", k ? "," : " ", gpu_of[k]);
    snprintf(what + n, sizeof what - (size_t) n, " len %zu", len);
    int bad = 0;
    // steps, every GPU launching, with grids of 8, 3 and 1 blocks in turn (a cut's launches
    // take the grid their kernel needs; the epochs must stay in step)
    const int steps = 6, grids[] = {8, 3, 1};
    for (int step = 0; step < steps && !bad; step++) {
        r.blocks = grids[step % 3];
        upload(&r, step);
        for (int g = 0; g < r.gpus; g++) launch(&r, g, 2000000000ull);
        CK(cuCtxSynchronize());
        bad = verify(&r, step, what);
    }
    for (int g = 0; g < r.gpus && !bad; g++) {
        uint32_t e;
        memcpy(&e, r.host + r.l.errors_at + 4 * (size_t) g, 4);
        if (e != 0) { printf("FAIL %s: GPU %d's error word %u\n", what, g, e); bad = 1; }
    }
    // GPU 0 launches alone: it gives up on GPU 1, the first it waits for
    if (!bad && r.gpus > 1) {
        upload(&r, steps);
        uint32_t before[8], after[8];
        CK(cuMemcpyDtoH(before, r.counters[0], sizeof before));
        launch(&r, 0, 50000000ull); // 50 ms
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(after, r.counters[0], sizeof after));
        uint32_t e;
        memcpy(&e, r.host + r.l.errors_at, 4);
        float *got = malloc(len * sizeof(float));
        int untouched = 1;
        for (int k = 0; k < members; k++) {
            if (gpu_of[k] != 0) continue;
            CK(cuMemcpyDtoH(got, r.out[k], len * sizeof(float)));
            for (size_t i = 0; i < len; i++) untouched &= isnan(got[i]);
        }
        free(got);
        if (e != 2 || !untouched || memcmp(before, after, sizeof before) != 0) {
            printf("FAIL %s: lost GPU 1: error word %u (want 2), outputs %s, counters %s\n", what,
                   e, untouched ? "untouched" : "written",
                   memcmp(before, after, sizeof before) ? "moved" : "kept");
            bad = 1;
        }
        // the step's next cut gives up at once: the error word is set (a bound of 5 s)
        if (!bad) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            launch(&r, 0, 5000000000ull);
            CK(cuCtxSynchronize());
            clock_gettime(CLOCK_MONOTONIC, &t1);
            const double s = (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) / 1e9;
            if (s > 1.0) {
                printf("FAIL %s: the cut after a lost GPU waited %.2f s\n", what, s);
                bad = 1;
            }
        }
        // cleared, the next step is right again
        if (!bad) {
            clear(&r);
            upload(&r, steps + 1);
            for (int g = 0; g < r.gpus; g++) launch(&r, g, 2000000000ull);
            CK(cuCtxSynchronize());
            bad = verify(&r, steps + 1, what);
        }
    }
    if (!bad) printf("ok %s: %d steps, lost GPU named, then cleared\n", what, steps);
    run_close(&r);
    return bad;
}

// A kernel's arguments, in its parameters' order: u64 values and the one f32 (eps).
struct args {
    uint64_t v[64];
    float eps;
    void *p[64];
    int n;
};

static void arg(struct args *a, uint64_t x) {
    a->v[a->n] = x;
    a->p[a->n] = &a->v[a->n];
    a->n++;
}

static void arg_eps(struct args *a, float e) {
    a->eps = e;
    a->p[a->n] = &a->eps;
    a->n++;
}

// The epilogues (`add`: X = r + S; `add_rms_mul`: Z = rms_norm(X) * w as well) through host
// memory against the peer kernel's, bit for bit: the peer kernel over every partial on this GPU
// gives the reference X (and Z); each GPU's mapped launch, given only its own members' partials
// and outputs (in `writes` order: its members in order), must store the same bits for each of
// its members. Rows of `ncols`; three steps of new partials; the norm's launches have the peer
// launch's threads (its row sum is a tree over the block) and fewer blocks than rows.
static int epilogue_config(const char *dir, int members, const int *gpu_of, size_t rows, size_t ncols) {
    const size_t len = rows * ncols;
    int gpus = 0;
    for (int k = 0; k < members; k++) gpus = gpu_of[k] + 1 > gpus ? gpu_of[k] + 1 : gpus;
    char name[96];
    snprintf(name, sizeof name, "allreduce_x%d.ptx", members);
    CUmodule peer = load_module(dir, name);
    snprintf(name, sizeof name, "mapped_x%d.ptx", members);
    CUmodule mapped = load_module(dir, name);
    const struct layout l = layout_of(members, gpus, len, WORDS);
    void *host;
    CK(cuMemHostAlloc(&host, l.bytes, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    memset(host, 0, l.bytes);
    CUdeviceptr region;
    CK(cuMemHostGetDevicePointer(&region, host, 0));
    CUdeviceptr part[MAX_MEMBERS], x[MAX_MEMBERS], z[MAX_MEMBERS], counters[MAX_MEMBERS], r, w, xr, zr;
    CUstream stream[MAX_MEMBERS];
    for (int k = 0; k < members; k++) {
        CK(cuMemAlloc(&part[k], len * 4));
        CK(cuMemAlloc(&x[k], len * 4));
        CK(cuMemAlloc(&z[k], len * 4));
    }
    for (int g = 0; g < gpus; g++) {
        CK(cuMemAlloc(&counters[g], (size_t) WORDS * 4));
        CK(cuMemsetD32(counters[g], 0, WORDS));
        CK(cuStreamCreate(&stream[g], CU_STREAM_NON_BLOCKING));
    }
    CK(cuMemAlloc(&r, len * 4));
    CK(cuMemAlloc(&w, ncols * 4));
    CK(cuMemAlloc(&xr, len * 4));
    CK(cuMemAlloc(&zr, len * 4));
    float *h = malloc(len * 4), *want = malloc(len * 4), *got = malloc(len * 4);
    for (size_t i = 0; i < len; i++) h[i] = value(99, 0, i);
    CK(cuMemcpyHtoD(r, h, len * 4));
    for (size_t c = 0; c < ncols; c++) h[c] = 1.0f + value(98, 0, c);
    CK(cuMemcpyHtoD(w, h, ncols * 4));
    const float eps = 1e-5f;
    const unsigned threads = (unsigned) (ncols + 31) / 32 * 32 > 1024 ? 1024 : (unsigned) (ncols + 31) / 32 * 32;
    int bad = 0;
    for (int norm = 0; norm < 2 && !bad; norm++) {
        const char *tag = norm ? "add_rms_mul" : "add";
        CUfunction fp, fm;
        snprintf(name, sizeof name, "ggml_meta_allreduce_%s_f32_x%d", tag, members);
        CK(cuModuleGetFunction(&fp, peer, name));
        snprintf(name, sizeof name, "ggml_meta_allreduce_mapped_%s_f32_x%d", tag, members);
        CK(cuModuleGetFunction(&fm, mapped, name));
        const uint64_t limit = norm ? rows : len;
        for (int step = 0; step < 3 && !bad; step++) {
            for (int k = 0; k < members; k++) {
                for (size_t i = 0; i < len; i++) h[i] = value(step + 10 * norm, k, i);
                CK(cuMemcpyHtoD(part[k], h, len * 4));
                CK(cuMemsetD32(x[k], 0x7fc00000u, len));
                CK(cuMemsetD32(z[k], 0x7fc00000u, len));
            }
            // the reference: the peer kernel, every partial here, X (and Z) into xr (zr)
            struct args a = {0};
            for (int k = 0; k < members; k++) arg(&a, part[k]);
            for (int k = 0; k < members; k++) arg(&a, 0);
            arg(&a, r);
            for (int k = 0; k < members; k++) arg(&a, k == 0 ? xr : 0);
            if (norm) {
                arg(&a, w);
                for (int k = 0; k < members; k++) arg(&a, k == 0 ? zr : 0);
                arg_eps(&a, eps);
                arg(&a, ncols);
            }
            arg(&a, 0);
            arg(&a, limit);
            const unsigned pblocks = norm ? (unsigned) (rows < 1024 ? rows : 1024) : (unsigned) ((len + 255) / 256 < 1024 ? (len + 255) / 256 : 1024);
            CK(cuLaunchKernel(fp, pblocks, 1, 1, norm ? threads : THREADS, 1, 1, 0, NULL, a.p, NULL));
            CK(cuCtxSynchronize());
            // through host memory: a launch per GPU, its own members only
            const unsigned mblocks = norm ? (unsigned) (rows < 3 ? rows : 3) : 5;
            static struct args m[MAX_MEMBERS];
            for (int g = 0; g < gpus; g++) {
                memset(&m[g], 0, sizeof m[g]);
                int own[MAX_MEMBERS], n_own = 0;
                for (int k = 0; k < members; k++)
                    if (gpu_of[k] == g) own[n_own++] = k;
                for (int k = 0; k < members; k++) arg(&m[g], gpu_of[k] == g ? part[k] : 0);
                for (int k = 0; k < members; k++) arg(&m[g], 0);
                arg(&m[g], r);
                for (int j = 0; j < members; j++) arg(&m[g], j < n_own ? x[own[j]] : 0);
                if (norm) {
                    arg(&m[g], w);
                    for (int j = 0; j < members; j++) arg(&m[g], j < n_own ? z[own[j]] : 0);
                    arg_eps(&m[g], eps);
                    arg(&m[g], ncols);
                }
                arg(&m[g], region);
                arg(&m[g], l.slot_bytes);
                arg(&m[g], region + l.flags_at);
                arg(&m[g], l.flag_bytes);
                arg(&m[g], region + l.errors_at);
                arg(&m[g], counters[g]);
                arg(&m[g], (uint64_t) g);
                arg(&m[g], (uint64_t) gpus);
                arg(&m[g], 2000000000ull);
                arg(&m[g], 0);
                arg(&m[g], limit);
                CK(cuLaunchKernel(fm, mblocks, 1, 1, norm ? threads : THREADS, 1, 1, 0, stream[g], m[g].p, NULL));
            }
            CK(cuCtxSynchronize());
            for (int pass = 0; pass < 1 + norm && !bad; pass++) {
                CK(cuMemcpyDtoH(want, pass ? zr : xr, len * 4));
                for (int k = 0; k < members && !bad; k++) {
                    CK(cuMemcpyDtoH(got, pass ? z[k] : x[k], len * 4));
                    if (memcmp(got, want, len * 4) != 0) {
                        size_t i = 0;
                        while (i < len && memcmp(&got[i], &want[i], 4) == 0) i++;
                        printf("FAIL %s x%d rows %zu ncols %zu step %d member %d: %s[%zu] %.9g, peer %.9g\n", tag,
                               members, rows, ncols, step, k, pass ? "z" : "x", i, (double) got[i], (double) want[i]);
                        bad = 1;
                    }
                }
            }
        }
    }
    for (int g = 0; g < gpus && !bad; g++) {
        uint32_t e;
        memcpy(&e, (uint8_t *) host + l.errors_at + 4 * (size_t) g, 4);
        if (e != 0) { printf("FAIL epilogues x%d: GPU %d's error word %u\n", members, g, e); bad = 1; }
    }
    if (!bad) {
        printf("ok epilogues x%d gpus", members);
        for (int k = 0; k < members; k++) printf("%s%d", k ? "," : " ", gpu_of[k]);
        printf(" rows %zu ncols %zu: add and add_rms_mul, 3 steps each, the peer kernel's bits\n", rows, ncols);
    }
    free(h);
    free(want);
    free(got);
    for (int k = 0; k < members; k++) {
        CK(cuMemFree(part[k]));
        CK(cuMemFree(x[k]));
        CK(cuMemFree(z[k]));
    }
    for (int g = 0; g < gpus; g++) {
        CK(cuMemFree(counters[g]));
        CK(cuStreamDestroy(stream[g]));
    }
    CK(cuMemFree(r));
    CK(cuMemFree(w));
    CK(cuMemFree(xr));
    CK(cuMemFree(zr));
    CK(cuMemFreeHost(host));
    CK(cuModuleUnload(peer));
    CK(cuModuleUnload(mapped));
    return bad;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

// Microseconds per call of `step` (which waits for its work), the median of 5 runs of 200
// calls after 20 unmeasured.
static double median_step_us(void (*step)(void *), void *arg) {
    double runs[5];
    for (int run = 0; run < 5; run++) {
        for (int it = 0; it < 220; it++) {
            if (it == 20) runs[run] = now_us();
            step(arg);
        }
        runs[run] = (now_us() - runs[run]) / 200.0;
    }
    for (int i = 0; i < 5; i++) {
        for (int j = i + 1; j < 5; j++) {
            if (runs[j] < runs[i]) { double t = runs[i]; runs[i] = runs[j]; runs[j] = t; }
        }
    }
    return runs[2];
}

static void mapped_step(void *arg) {
    struct run *r = arg;
    for (int g = 0; g < r->gpus; g++) launch(r, g, 2000000000ull);
    CK(cuCtxSynchronize());
}

// --time: the mapped kernel per step (every GPU's launch, then a wait for all), for a decode
// row (4096 values) and a pp512 tensor.
static void time_config(const char *dir, int members, const int *gpu_of, size_t len, int blocks) {
    struct run r;
    run_open(&r, dir, members, gpu_of, len, blocks);
    upload(&r, 0);
    const double us = median_step_us(mapped_step, &r);
    printf("time x%d gpus %s len %zu (%zu bytes), %d blocks: %.2f us per step\n", members,
           r.gpus == 1 ? "one" : "one each", len, len * 4, blocks, us);
    run_close(&r);
}

struct peer_launch {
    CUfunction f;
    unsigned blocks;
    void **args;
};

static void peer_step(void *arg) {
    struct peer_launch *p = arg;
    CK(cuLaunchKernel(p->f, p->blocks, 1, 1, 256, 1, 1, 0, NULL, p->args, NULL));
    CK(cuCtxSynchronize());
}

// The same loop over the peer kernel's plain sum for two partials on this GPU (allreduce_x2.ptx,
// launched as the meta backend launches it: 256 threads a block, up to 1024 blocks), the
// baseline in the same run.
static void time_peer(const char *dir, size_t len) {
    CUmodule mod = load_module(dir, "allreduce_x2.ptx");
    struct peer_launch pl;
    CK(cuModuleGetFunction(&pl.f, mod, "ggml_meta_allreduce_sum_f32_x2"));
    CUdeviceptr p[2], o[2];
    for (int k = 0; k < 2; k++) {
        CK(cuMemAlloc(&p[k], len * 4));
        CK(cuMemAlloc(&o[k], len * 4));
        CK(cuMemsetD32(p[k], 0, len));
    }
    uint64_t v[6] = {(uint64_t) p[0], (uint64_t) p[1], (uint64_t) o[0], (uint64_t) o[1], 0, len};
    void *args[6];
    for (int i = 0; i < 6; i++) args[i] = &v[i];
    pl.blocks = (unsigned) ((len + 255) / 256 < 1024 ? (len + 255) / 256 : 1024);
    pl.args = args;
    const double us = median_step_us(peer_step, &pl);
    printf("time peer x2 gpus one len %zu (%zu bytes): %.2f us per step\n", len, len * 4, us);
    for (int k = 0; k < 2; k++) {
        CK(cuMemFree(p[k]));
        CK(cuMemFree(o[k]));
    }
    CK(cuModuleUnload(mod));
}

// The copy-engine alternative for large partials, on the same loop: each member copies its
// partial into its slot of pinned host memory (cuMemcpyDtoHAsync on a stream of its own),
// then, once every member's copy is done (events), copies the others' partials back
// (cuMemcpyHtoDAsync) and sums on its own stream with the peer kernel's plain sum (two members:
// its partial and the other's). Members on one GPU, as the one-GPU proxy with a launch per
// device; the transport is what differs from the mapped kernel, whose rows above it sits beside.
struct engine_run {
    int members;
    size_t bytes;
    CUstream stream[MAX_MEMBERS];
    CUevent out_done[MAX_MEMBERS];
    CUdeviceptr part[MAX_MEMBERS], recv[MAX_MEMBERS], out[MAX_MEMBERS];
    void *host;
    CUfunction sum;
    unsigned blocks;
    uint64_t v[MAX_MEMBERS][6];
    void *args[MAX_MEMBERS][6];
};

static void engine_step(void *arg) {
    struct engine_run *e = arg;
    char *host = e->host;
    for (int k = 0; k < e->members; k++) {
        CK(cuMemcpyDtoHAsync(host + (size_t) k * e->bytes, e->part[k], e->bytes, e->stream[k]));
        CK(cuEventRecord(e->out_done[k], e->stream[k]));
    }
    for (int k = 0; k < e->members; k++) {
        const int other = (k + 1) % e->members;
        CK(cuStreamWaitEvent(e->stream[k], e->out_done[other], 0));
        CK(cuMemcpyHtoDAsync(e->recv[k], host + (size_t) other * e->bytes, e->bytes, e->stream[k]));
        CK(cuLaunchKernel(e->sum, e->blocks, 1, 1, 256, 1, 1, 0, e->stream[k], e->args[k], NULL));
    }
    CK(cuCtxSynchronize());
}

static void time_engine(const char *dir, size_t len) {
    struct engine_run e;
    memset(&e, 0, sizeof e);
    e.members = 2;
    e.bytes = len * 4;
    CUmodule mod = load_module(dir, "allreduce_x2.ptx");
    CK(cuModuleGetFunction(&e.sum, mod, "ggml_meta_allreduce_sum_f32_x2"));
    CK(cuMemHostAlloc(&e.host, e.bytes * (size_t) e.members, CU_MEMHOSTALLOC_PORTABLE));
    e.blocks = (unsigned) ((len + 255) / 256 < 1024 ? (len + 255) / 256 : 1024);
    for (int k = 0; k < e.members; k++) {
        CK(cuStreamCreate(&e.stream[k], CU_STREAM_NON_BLOCKING));
        CK(cuEventCreate(&e.out_done[k], CU_EVENT_DISABLE_TIMING));
        CK(cuMemAlloc(&e.part[k], e.bytes));
        CK(cuMemAlloc(&e.recv[k], e.bytes));
        CK(cuMemAlloc(&e.out[k], e.bytes));
        CK(cuMemsetD32(e.part[k], 0, len));
        // the sum kernel writes two outputs; the second, unused, goes back over the received
        // partial (element by element, each read before it is written)
        uint64_t v[6] = {(uint64_t) e.part[k], (uint64_t) e.recv[k], (uint64_t) e.out[k],
                         (uint64_t) e.recv[k], 0, len};
        memcpy(e.v[k], v, sizeof v);
        for (int i = 0; i < 6; i++) e.args[k][i] = &e.v[k][i];
    }
    const double us = median_step_us(engine_step, &e);
    printf("time copy engine x2 gpus one, a stream each, len %zu (%zu bytes): %.2f us per step\n",
           len, len * 4, us);
    for (int k = 0; k < e.members; k++) {
        CK(cuMemFree(e.part[k]));
        CK(cuMemFree(e.recv[k]));
        CK(cuMemFree(e.out[k]));
        CK(cuEventDestroy(e.out_done[k]));
        CK(cuStreamDestroy(e.stream[k]));
    }
    CK(cuMemFreeHost(e.host));
    CK(cuModuleUnload(mod));
}

int main(int argc, char **argv) {
    const int timing = argc == 3 && strcmp(argv[1], "--time") == 0;
    if (argc != 2 && !timing) {
        fprintf(stderr, "usage: mappedcheck [--time] DIR\n");
        return 2;
    }
    CK(cuInit(0));
    CUdevice dev;
    CK(cuDeviceGet(&dev, 0));
    int can_map = 0;
    CK(cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
    if (!can_map) {
        fprintf(stderr, "mappedcheck: GPU 0 cannot map host memory\n");
        return 2;
    }
    CUcontext ctx;
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    static const int own2[] = {0, 1}, own3[] = {0, 1, 2}, own4[] = {0, 1, 2, 3};
    if (timing) {
        static const int one_gpu2[] = {0, 0};
        for (size_t len = 4096; len <= 512 * 4096; len *= 512) {
            const int blocks = len > 4096 ? 128 : 8;
            time_peer(argv[2], len);
            time_config(argv[2], 2, one_gpu2, len, blocks);
            time_config(argv[2], 2, own2, len, blocks);
            time_config(argv[2], 4, own4, len, blocks);
        }
        // where the copy engines and the mapped kernel (two launches as two GPUs) cross: a
        // partial from a decode row (16 KiB) to a pp512 cut (8 MiB), by factors of 4
        for (size_t len = 4096; len <= 512 * 4096; len *= 4) {
            const int blocks = len > 4096 ? 128 : 8;
            time_engine(argv[2], len);
            time_config(argv[2], 2, own2, len, blocks);
        }
        CK(cuDevicePrimaryCtxRelease(dev));
        return 0;
    }
    static const int own8[] = {0, 1, 2, 3, 4, 5, 6, 7}, one_gpu[] = {0, 0}, mixed[] = {0, 0, 1};
    static const size_t lens[] = {1, 1000, 4096 * 2 + 5};
    int bad = 0;
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        size_t len = lens[li];
        bad |= one_config(argv[1], 2, own2, len);
        bad |= one_config(argv[1], 3, own3, len);
        bad |= one_config(argv[1], 4, own4, len);
        bad |= one_config(argv[1], 8, own8, len);
        bad |= one_config(argv[1], 2, one_gpu, len);
        bad |= one_config(argv[1], 3, mixed, len);
    }
    // the epilogues against the peer kernel: a decode row, rows longer than a block's trip,
    // and rows of one warp
    static const size_t shapes[][2] = {{1, 4096}, {7, 8200}, {5, 32}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        bad |= epilogue_config(argv[1], 2, own2, shapes[si][0], shapes[si][1]);
        bad |= epilogue_config(argv[1], 4, own4, shapes[si][0], shapes[si][1]);
        bad |= epilogue_config(argv[1], 3, mixed, shapes[si][0], shapes[si][1]);
        bad |= epilogue_config(argv[1], 2, one_gpu, shapes[si][0], shapes[si][1]);
    }
    CK(cuDevicePrimaryCtxRelease(dev));
    printf("mappedcheck: %s\n", bad ? "FAILED" : "all cases ok");
    return bad;
}
