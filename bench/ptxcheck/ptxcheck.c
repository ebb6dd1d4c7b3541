// ptxcheck: runs the meta backend's AllReduce kernels (the PTX modules of
// crates/core/src/ptx.rs, written by `cargo run -p ggml-backend-rs-core --example dump_ptx -- DIR`)
// on GPU 0 through the CUDA driver API, and compares every output with a CPU model of the
// kernels' contract:
//
//   S = the partials summed in exchange::reference_expr order, stored to every non-null s_k;
//   X = r + S (Add, AddRmsNormMul), stored to every non-null x_k;
//   Z = (rsqrt(mean of the row's X^2 + eps) * X) * w[col] (AddRmsNormMul), stored to every
//       non-null z_k, from X read back from the first non-null x_k;
//   stores in the order S, X, Z, so where outputs alias each other or an input the last wins;
//   nothing else written.
//
// S and X must match bit for bit, Z within the bound of Z_REL_TOL. Every buffer of a case is
// compared whole (plus GUARD elements past the end), so a stray or missing store shows.
//
// Usage: ptxcheck FILE.ptx|DIR ...   (DIR: every allreduce_x<n>.ptx in it; n from the name)
// Prints one line per case ("ok ..." or "FAIL ..." with the first mismatch) and exits 1 on any
// failure. PTXCHECK_SMALL=1 leaves out the largest size (for runs under compute-sanitizer).
//
//        ptxcheck --time DIR [DIR ...]
// Times every entry as the meta backend launches it (src/meta/cuda.rs: Sum and Add 256 threads
// a block, up to 1024 blocks; AddRmsNormMul a block per row, up to 1024 blocks, ncols rounded
// up to 32 threads, 32 to 1024), for n = 2 at decode (1 row of 4096 and of 8192) and prefill
// (512 rows of 4096) shapes, and AddRmsNormMul for every other n at decode, in every DIR (say
// the PTX before a change and after it). With two DIRs or more it then runs every check case of
// every entry (and prefill) with each later DIR's kernels and with the first DIR's, and compares
// all their outputs bit for bit ("DIFF" lines); exits 1 on any difference.
//
// bench/ptxcheck/run.sh compiles and runs it.

#define _POSIX_C_SOURCE 200809L

#include <cuda.h>

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NMAX = 8, GUARD = 64 };
enum { SUM, ADD, RMS, N_EPI };
static const char *const EPI_TAG[N_EPI] = {"sum", "add", "add_rms_mul"};

// Buffers, the same layout for every n: partials, sum outputs, residual, add outputs, weight,
// norm outputs.
#define P(k) (k)
#define S(k) (NMAX + (k))
#define R (2 * NMAX)
#define X(k) (2 * NMAX + 1 + (k))
#define W (3 * NMAX + 1)
#define Z(k) (3 * NMAX + 2 + (k))
enum { NBUF = 4 * NMAX + 2, NUL = -1 };
// Largest case: 4096 * 512 + 3 elements.
enum { MAXLEN = 4096 * 512 + 3, CAP = MAXLEN + GUARD };

static const float EPS = 1e-6f;

// Z's tolerance, relative to the exact value (the CPU computes Z in double, rounded to f32 once:
// 2^-24 more). Bound of the GPU's error: the row's sum of squares is a tree of f32 additions of
// non-negative terms, each thread adding ceil(ncols/ntid) terms in series (fma: one rounding
// each), then 5 butterfly levels per warp and 5 over the warps: depth d <= 16 + 10 = 26 for the
// shapes below (MAX_SERIAL), relative error <= d * 2^-24 = 1.55e-6; the square root halves it
// (0.78e-6); the division by ncols and the add of eps round twice more (0.06e-6 after the
// root); rsqrt.approx.f32 errs by at most 2^-22.9 = 1.3e-7; the two multiplications round twice
// (1.2e-7). Total 1.1e-6 < 2e-6. Results in the denormal range carry an absolute error of up to
// 2^-150 per rounding: Z_ABS_TOL.
static const double Z_REL_TOL = 2e-6;
#define Z_ABS_TOL (4 * 0x1p-149)
enum { MAX_SERIAL = 16 };

static CUdeviceptr dev[NBUF];
static float *master[NBUF]; // initial contents of every buffer
static float *work[NBUF];   // pinned: uploaded, then turned into the expected result
static float *got[NBUF];    // pinned: what the GPU left
static CUstream stream;
static int failures, cases;
static int small_only; // PTXCHECK_SMALL set: no largest size (for compute-sanitizer)
static float *ref[NBUF]; // --time: the first DIR's outputs of a case, to compare

static void check(CUresult r, const char *what, int line) {
    if (r != CUDA_SUCCESS) {
        const char *name = "?";
        cuGetErrorName(r, &name);
        fprintf(stderr, "ptxcheck: %s failed: %s (line %d)\n", what, name, line);
        exit(2);
    }
}
#define CK(call) check((call), #call, __LINE__)

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Mixed signs and magnitudes (2^-13 .. 2^11), every 97th element of the inputs a denormal (sums
// of denormals are exact: a kernel that flushed them to zero would show).
static void fill(void) {
    for (int b = 0; b < NBUF; b++) {
        uint64_t st = 0x5eed0000ull + (uint64_t) b;
        int input = b < NMAX || b == R;
        for (int i = 0; i < CAP; i++) {
            uint64_t z = splitmix(&st);
            float mant = (float) (z >> 40) / (float) (1 << 24) - 0.5f;
            float v;
            if (b == W)
                v = (mant < 0 ? -1.0f : 1.0f) * (0.5f + fabsf(mant) * 2.0f);
            else if (input && i % 97 == 13)
                v = ldexpf((float) ((int64_t) (z >> 45) - (1 << 18)), -149);
            else
                v = ldexpf(mant, (int) ((z >> 8) % 24) - 12);
            master[b][i] = v;
        }
    }
}

// The partials' sum in exchange::reference_expr order: the balanced pairwise tree for a power
// of two, left to right otherwise.
static float ref_sum(const float *v, int n) {
    float t[NMAX] = {0};
    for (int k = 0; k < n; k++)
        t[k] = v[k];
    if ((n & (n - 1)) == 0) {
        for (int m = n; m > 1; m /= 2)
            for (int j = 0; j < m / 2; j++)
                t[j] = t[2 * j] + t[2 * j + 1];
        return t[0];
    }
    float a = t[0];
    for (int k = 1; k < n; k++)
        a = a + t[k];
    return a;
}

// Where a case stores: a buffer per output, or NUL.
typedef struct {
    int s[NMAX], x[NMAX], z[NMAX];
} Outs;

// The CPU model: pass 1 of element i on the host buffers (S, then X), in the kernel's order.
static float ref_element(int n, int e, const Outs *o, size_t i) {
    float v[NMAX];
    for (int k = 0; k < n; k++)
        v[k] = work[P(k)][i];
    float s = ref_sum(v, n);
    float r = e == SUM ? 0.0f : work[R][i];
    for (int k = 0; k < n; k++)
        if (o->s[k] != NUL)
            work[o->s[k]][i] = s;
    if (e == SUM)
        return s;
    float x = r + s;
    for (int k = 0; k < n; k++)
        if (o->x[k] != NUL)
            work[o->x[k]][i] = x;
    return x;
}

static void ref_range(int n, int e, const Outs *o, size_t first, size_t limit, size_t ncols) {
    if (e != RMS) {
        for (size_t i = first; i < limit; i++)
            ref_element(n, e, o, i);
        return;
    }
    int xb = NUL;
    for (int k = n - 1; k >= 0; k--)
        if (o->x[k] != NUL)
            xb = o->x[k];
    for (size_t row = first; row < limit; row++) {
        double acc = 0;
        for (size_t c = 0; c < ncols; c++) {
            double x = ref_element(n, e, o, row * ncols + c);
            acc += x * x;
        }
        double scale = 1.0 / sqrt(acc / (double) ncols + (double) EPS);
        for (size_t c = 0; c < ncols; c++) {
            size_t i = row * ncols + c;
            float z = (float) (scale * (double) work[xb][i] * (double) work[W][c]);
            for (int k = 0; k < n; k++)
                if (o->z[k] != NUL)
                    work[o->z[k]][i] = z;
        }
    }
}

static const char *buf_name(int b) {
    static char s[8];
    if (b < NMAX) snprintf(s, sizeof s, "p%d", b);
    else if (b < R) snprintf(s, sizeof s, "s%d", b - NMAX);
    else if (b == R) snprintf(s, sizeof s, "r");
    else if (b < W) snprintf(s, sizeof s, "x%d", b - X(0));
    else if (b == W) snprintf(s, sizeof s, "w");
    else snprintf(s, sizeof s, "z%d", b - Z(0));
    return s;
}

// Output patterns; `epis` says which epilogues they apply to (bit per epilogue).
enum { PAT_ALL, PAT_DEV0, PAT_S_IS_P, PAT_X1, PAT_X0_IS_P0, PAT_X0_IS_R, PAT_Z0_IS_X0, PAT_ALL_IS_P, N_PAT };
static const struct {
    const char *name;
    unsigned epis;
} PAT[N_PAT] = {
    {"all", 7}, {"dev0", 7}, {"s=p", 7}, {"x1only", 6}, {"x0=p0", 6}, {"x0=r", 6}, {"z0=x0", 4}, {"all=p", 6},
};

static Outs outs_of(int pat, int n) {
    Outs o;
    for (int k = 0; k < NMAX; k++) {
        int mine = k < n;
        o.s[k] = mine ? S(k) : NUL;
        o.x[k] = mine ? X(k) : NUL;
        o.z[k] = mine ? Z(k) : NUL;
        switch (pat) {
        case PAT_ALL: break;
        case PAT_DEV0: if (k > 0) o.s[k] = o.x[k] = o.z[k] = NUL; break;
        case PAT_S_IS_P: o.s[k] = mine ? P(k) : NUL; break;
        case PAT_X1: o.s[k] = NUL; if (k != 1) o.x[k] = NUL; if (k > 1) o.z[k] = NUL; break;
        case PAT_X0_IS_P0: o.s[k] = NUL; if (k == 0) o.x[k] = P(0); break;
        case PAT_X0_IS_R: if (k > 0) o.s[k] = NUL; o.x[k] = k == 0 ? R : NUL; break;
        case PAT_Z0_IS_X0: o.s[k] = NUL; if (k == 0) o.z[k] = X(0); break;
        case PAT_ALL_IS_P: o.s[k] = o.x[k] = o.z[k] = mine ? P(k) : NUL; break;
        }
    }
    return o;
}

// One launch of entry `e` over units [first, limit), in params(n, e) order.
static void launch(CUfunction f, int n, int e, const Outs *o, uint64_t first, uint64_t limit,
                   uint64_t ncols, unsigned blocks, unsigned ntid) {
    unsigned long long v[4 * NMAX + 6];
    float eps = EPS;
    void *args[4 * NMAX + 6];
    int a = 0;
#define ADDR(b) (v[a] = (b) == NUL ? 0 : dev[b], args[a] = &v[a], a++)
    for (int k = 0; k < n; k++) ADDR(P(k));
    for (int k = 0; k < n; k++) ADDR(o->s[k]);
    if (e != SUM) {
        ADDR(R);
        for (int k = 0; k < n; k++) ADDR(o->x[k]);
    }
    if (e == RMS) {
        ADDR(W);
        for (int k = 0; k < n; k++) ADDR(o->z[k]);
        args[a++] = &eps;
        v[a] = ncols, args[a] = &v[a], a++;
    }
#undef ADDR
    v[a] = first, args[a] = &v[a], a++;
    v[a] = limit, args[a] = &v[a], a++;
    CK(cuLaunchKernel(f, blocks, 1, 1, ntid, 1, 1, 0, stream, args, NULL));
}

static unsigned grid_blocks(uint64_t units) { // the launcher's rule for Sum and Add
    uint64_t b = (units + 255) / 256;
    return (unsigned) (b < 1 ? 1 : b > 1024 ? 1024 : b);
}

enum { RANGE_FULL, RANGE_SPLIT, RANGE_TAIL, N_RANGE };
static const char *const RANGE_NAME[N_RANGE] = {"full", "split", "tail"};

// The buffers entry `e` of `n` partials uses (a flag per buffer); returns the elements per
// buffer of a case over `units` (elements for Sum and Add, rows for AddRmsNormMul).
static size_t used_of(int n, int e, size_t units, size_t ncols, int used[NBUF]) {
    memset(used, 0, NBUF * sizeof *used);
    for (int k = 0; k < n; k++) {
        used[P(k)] = used[S(k)] = 1;
        if (e != SUM) used[X(k)] = used[R] = 1;
        if (e == RMS) used[Z(k)] = used[W] = 1;
    }
    return e == RMS ? units * ncols : units;
}

// The launches of a case: one over all units, two halves (split), or the second half (tail).
typedef struct {
    size_t lo[2], hi[2];
    int parts;
} Ranges;

static Ranges ranges_of(int range, size_t units) {
    size_t half = units / 2;
    Ranges r = {{0, half}, {units, units}, 1};
    if (range == RANGE_SPLIT) r.hi[0] = half, r.parts = 2;
    if (range == RANGE_TAIL) r.lo[0] = half;
    return r;
}

// Uploads the initial contents of the used buffers (into `work` too), launches the case and
// downloads every used buffer into `got`.
static void exec_case(CUfunction f, int n, int e, const Outs *o, const Ranges *rg, size_t len,
                      const int used[NBUF], size_t ncols, unsigned ntid, unsigned max_blocks) {
    for (int b = 0; b < NBUF; b++) {
        if (!used[b]) continue;
        memcpy(work[b], master[b], (len + GUARD) * sizeof(float));
        CK(cuMemcpyHtoDAsync(dev[b], work[b], (len + GUARD) * sizeof(float), stream));
    }
    for (int j = 0; j < rg->parts; j++) {
        size_t cnt = rg->hi[j] - rg->lo[j];
        unsigned blocks = e == RMS ? (unsigned) (cnt < 1 ? 1 : cnt > max_blocks ? max_blocks : cnt)
                                   : grid_blocks(cnt);
        launch(f, n, e, o, rg->lo[j], rg->hi[j], ncols, blocks, ntid);
    }
    for (int b = 0; b < NBUF; b++)
        if (used[b]) CK(cuMemcpyDtoHAsync(got[b], dev[b], (len + GUARD) * sizeof(float), stream));
    CK(cuStreamSynchronize(stream));
}

// One case: upload, launch(es), download, model, compare. `units`: elements (Sum, Add) or rows.
static void run_case(CUfunction f, int n, int e, int pat, int range, size_t units, size_t ncols,
                     unsigned ntid, unsigned max_blocks) {
    Outs o = outs_of(pat, n);
    int used[NBUF], zbuf[NBUF] = {0};
    size_t len = used_of(n, e, units, ncols, used);
    for (int k = 0; k < n; k++)
        if (e == RMS && o.z[k] != NUL) zbuf[o.z[k]] = 1;
    Ranges rg = ranges_of(range, units);
    size_t half = units / 2;
    exec_case(f, n, e, &o, &rg, len, used, ncols, ntid, max_blocks);
    // only now: the uploads read `work` until the stream is done
    for (int j = 0; j < rg.parts; j++)
        ref_range(n, e, &o, rg.lo[j], rg.hi[j], ncols);

    // Z lies in the launched rows of the buffers Z was stored to (Z is stored last).
    size_t zlo = (range == RANGE_TAIL ? half : 0) * ncols, zhi = len;
    char what[160], shape[64];
    if (e == RMS)
        snprintf(shape, sizeof shape, "rows=%zu ncols=%zu ntid=%u", units, ncols, ntid);
    else
        snprintf(shape, sizeof shape, "elements=%zu", units);
    snprintf(what, sizeof what, "x%d %-11s %-6s %-5s %s", n, EPI_TAG[e], PAT[pat].name,
             RANGE_NAME[range], shape);
    cases++;
    for (int b = 0; b < NBUF; b++) {
        if (!used[b] || (!zbuf[b] && memcmp(got[b], work[b], (len + GUARD) * sizeof(float)) == 0))
            continue;
        for (size_t i = 0; i < len + GUARD; i++) {
            float g = got[b][i], w = work[b][i];
            int bad;
            if (zbuf[b] && i >= zlo && i < zhi)
                bad = !(fabs((double) g - (double) w) <= Z_REL_TOL * fabs((double) w) + Z_ABS_TOL);
            else
                bad = memcmp(&g, &w, sizeof g) != 0;
            if (bad) {
                uint32_t gb, wb;
                memcpy(&gb, &g, 4), memcpy(&wb, &w, 4);
                printf("FAIL %s: %s[%zu] = %.9g (0x%08x), want %.9g (0x%08x)\n", what, buf_name(b),
                       i, g, gb, w, wb);
                failures++;
                return;
            }
        }
    }
    printf("ok   %s\n", what);
}

static void load(const char *path, int n, CUfunction f[N_EPI], CUmodule *mod) {
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
    CUresult r = cuModuleLoadDataEx(mod, text, 2, opt, val);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "ptxcheck: %s does not load:\n%s\n", path, log);
        check(r, "cuModuleLoadDataEx", __LINE__);
    }
    free(text);
    for (int e = 0; e < N_EPI; e++) {
        char name[64];
        snprintf(name, sizeof name, "ggml_meta_allreduce_%s_f32_x%d", EPI_TAG[e], n);
        CK(cuModuleGetFunction(&f[e], *mod, name));
        int regs = 0, maxt = 0, local = 0;
        CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f[e]));
        CK(cuFuncGetAttribute(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f[e]));
        CK(cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, f[e]));
        printf("loaded %s: %d registers, %d bytes local (spills) a thread, up to %d threads a "
               "block\n", name, regs, local, maxt);
        if (e == RMS && maxt < 1024) {
            printf("FAIL %s: blocks of 1024 threads do not fit\n", name);
            failures++;
        }
    }
}

// The check cases of one entry: output pattern, range, and shape.
typedef struct {
    int pat, range;
    size_t units, ncols;
    unsigned ntid, blocks;
} Case;

// Sum and Add: elements (the last one the largest size).
static const size_t ELEMS[] = {1, 1000, 4096, MAXLEN};
// AddRmsNormMul: ncols, rows, ntid, most blocks (fewer than rows: a block takes several rows),
// whether it is the largest size. Row lengths around the kernel's trips (ptx::row_chunk(n)
// columns a thread): one trip of 1024 threads (the register path) for some n, more (the
// read-back path) for others, a last trip of one column (8193) or a part of one (3000, 9000).
static const struct {
    size_t ncols, rows;
    unsigned ntid, blocks;
    int big;
} SHAPES[] = {
    {4096, 1, 1024, 1, 0}, {300, 7, 320, 4, 0},   {2048, 3, 1024, 2, 0}, {3000, 2, 1024, 2, 0},
    {8192, 1, 1024, 1, 0}, {8193, 1, 1024, 1, 0}, {9000, 2, 1024, 1, 0}, {4096, 512, 256, 120, 1},
};
enum { N_SHAPES = sizeof SHAPES / sizeof SHAPES[0], MAX_CASES = 256 };

// The check cases of entry `e` for `n` partials into `c`; returns how many.
static int cases_of(int n, int e, Case *c) {
    int k = 0;
    int nshapes = e == RMS ? N_SHAPES : 4;
    for (int s = 0; s < nshapes; s++) {
        size_t units = e == RMS ? SHAPES[s].rows : ELEMS[s];
        size_t ncols = e == RMS ? SHAPES[s].ncols : 1;
        unsigned ntid = e == RMS ? SHAPES[s].ntid : 256, blocks = e == RMS ? SHAPES[s].blocks : 0;
        int big = e == RMS ? SHAPES[s].big : s == 3;
        if (e == RMS && (ncols + ntid - 1) / ntid > MAX_SERIAL) {
            fprintf(stderr, "ptxcheck: shape outside Z_REL_TOL's bound\n");
            exit(2);
        }
        if (big && small_only) continue;
        for (int pat = 0; pat < N_PAT; pat++) {
            if (!(PAT[pat].epis >> e & 1) || (pat == PAT_X1 && n < 2)) continue;
            for (int range = 0; range < N_RANGE; range++) {
                // the largest size (many blocks, several units a thread or rows a block):
                // all outputs, split in two launches
                if (big && !(pat == PAT_ALL && range == RANGE_SPLIT)) continue;
                if (k < MAX_CASES) c[k++] = (Case) {pat, range, units, ncols, ntid, blocks};
            }
        }
    }
    return k;
}

static void check_module(const char *path, int n) {
    CUmodule mod;
    CUfunction f[N_EPI];
    load(path, n, f, &mod);
    Case c[MAX_CASES];
    for (int e = 0; e < N_EPI; e++) {
        int k = cases_of(n, e, c);
        for (int i = 0; i < k; i++)
            run_case(f[e], n, e, c[i].pat, c[i].range, c[i].units, c[i].ncols, c[i].ntid,
                     c[i].blocks);
    }
    CK(cuModuleUnload(mod));
}

// --time: every check case of every entry, plus prefill as the meta backend launches it (512
// rows of 4096, 1024 threads, a block per row), with `fa` and with `fb`; their outputs must be
// the same bit for bit. Returns the number of cases that differ.
static int compare_modules(int n, CUfunction fa[N_EPI], CUfunction fb[N_EPI], const char *a,
                           const char *b) {
    Case c[MAX_CASES + 1];
    int same = 0, differ = 0;
    for (int e = 0; e < N_EPI; e++) {
        int k = cases_of(n, e, c);
        if (e == RMS && !small_only) c[k++] = (Case) {PAT_ALL, RANGE_FULL, 512, 4096, 1024, 512};
        for (int i = 0; i < k; i++) {
            Outs o = outs_of(c[i].pat, n);
            int used[NBUF];
            size_t len = used_of(n, e, c[i].units, c[i].ncols, used);
            Ranges rg = ranges_of(c[i].range, c[i].units);
            size_t bytes = (len + GUARD) * sizeof(float);
            exec_case(fa[e], n, e, &o, &rg, len, used, c[i].ncols, c[i].ntid, c[i].blocks);
            for (int bf = 0; bf < NBUF; bf++)
                if (used[bf]) memcpy(ref[bf], got[bf], bytes);
            exec_case(fb[e], n, e, &o, &rg, len, used, c[i].ncols, c[i].ntid, c[i].blocks);
            int bad = 0;
            for (int bf = 0; bf < NBUF && !bad; bf++) {
                if (!used[bf] || memcmp(ref[bf], got[bf], bytes) == 0) continue;
                size_t j = 0;
                while (memcmp(&ref[bf][j], &got[bf][j], sizeof(float)) == 0) j++;
                printf("DIFF x%d %-11s %-6s %-5s rows/elements=%zu ncols=%zu ntid=%u: %s[%zu] = "
                       "%.9g in %s, %.9g in %s\n", n, EPI_TAG[e], PAT[c[i].pat].name,
                       RANGE_NAME[c[i].range], c[i].units, c[i].ncols, c[i].ntid, buf_name(bf), j,
                       ref[bf][j], a, got[bf][j], b);
                bad = 1;
            }
            if (bad) differ++;
            else same++;
        }
    }
    printf("same x%d: %d cases bit for bit, %d differ (%s vs %s)\n", n, same, differ, a, b);
    return differ;
}

enum { SAMPLES = 200, B2B = 1000, WARMUP = 20, GRAPH = 20 };
static CUevent ev[2 * SAMPLES];
static CUdeviceptr scratch; // written before each cold launch, to evict the L2 cache
static const size_t SCRATCH_BYTES = (size_t) 256 << 20;

static int by_value(const void *a, const void *b) {
    float x = *(const float *) a, y = *(const float *) b;
    return (x > y) - (x < y);
}

// The median of SAMPLES launches, each between the events ev[2i] and ev[2i+1], in µs.
static double median_us(void) {
    float ms[SAMPLES];
    CK(cuStreamSynchronize(stream));
    for (int i = 0; i < SAMPLES; i++)
        CK(cuEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    qsort(ms, SAMPLES, sizeof ms[0], by_value);
    return (double) ms[SAMPLES / 2] * 1e3;
}

// Times entry `e` over `rows` rows of `ncols` as the meta backend launches it (s stored only by
// Sum; x and z to every device), in µs: t[0] the median of SAMPLES single launches (inputs in
// the L2 cache), t[1] the same with the L2 cache evicted before each, t[2] the mean of B2B
// launches back to back, t[3] the median over SAMPLES runs of a CUDA graph of GRAPH launches,
// per launch (the kernel with the least launch overhead).
static void time_entry(CUfunction f, int n, int e, size_t rows, size_t ncols, double t[4],
                       unsigned *blocks_out, unsigned *ntid_out) {
    Outs o;
    for (int k = 0; k < NMAX; k++) {
        o.s[k] = e == SUM && k < n ? S(k) : NUL;
        o.x[k] = k < n ? X(k) : NUL;
        o.z[k] = k < n ? Z(k) : NUL;
    }
    size_t units = e == RMS ? rows : rows * ncols;
    unsigned blocks, ntid;
    if (e == RMS) {
        size_t th = (ncols + 31) / 32 * 32;
        blocks = (unsigned) (rows < 1024 ? rows : 1024);
        ntid = (unsigned) (th < 32 ? 32 : th > 1024 ? 1024 : th);
    } else {
        blocks = grid_blocks(units);
        ntid = 256;
    }
    *blocks_out = blocks, *ntid_out = ntid;
    int used[NBUF];
    size_t len = used_of(n, e, units, ncols, used);
    for (int b = 0; b < NBUF; b++)
        if (used[b]) CK(cuMemcpyHtoD(dev[b], master[b], (len + GUARD) * sizeof(float)));
    for (int i = 0; i < WARMUP; i++) launch(f, n, e, &o, 0, units, ncols, blocks, ntid);
    for (int i = 0; i < SAMPLES; i++) {
        CK(cuEventRecord(ev[2 * i], stream));
        launch(f, n, e, &o, 0, units, ncols, blocks, ntid);
        CK(cuEventRecord(ev[2 * i + 1], stream));
    }
    t[0] = median_us();
    for (int i = 0; i < SAMPLES; i++) {
        CK(cuMemsetD32Async(scratch, (unsigned) i, SCRATCH_BYTES / 4, stream));
        CK(cuEventRecord(ev[2 * i], stream));
        launch(f, n, e, &o, 0, units, ncols, blocks, ntid);
        CK(cuEventRecord(ev[2 * i + 1], stream));
    }
    t[1] = median_us();
    CK(cuEventRecord(ev[0], stream));
    for (int i = 0; i < B2B; i++) launch(f, n, e, &o, 0, units, ncols, blocks, ntid);
    CK(cuEventRecord(ev[1], stream));
    CK(cuEventSynchronize(ev[1]));
    float ms = 0;
    CK(cuEventElapsedTime(&ms, ev[0], ev[1]));
    t[2] = (double) ms * 1e3 / B2B;
    CUgraph g;
    CUgraphExec ge;
    CK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    for (int i = 0; i < GRAPH; i++) launch(f, n, e, &o, 0, units, ncols, blocks, ntid);
    CK(cuStreamEndCapture(stream, &g));
    CK(cuGraphInstantiateWithFlags(&ge, g, 0));
    for (int i = 0; i < 3; i++) CK(cuGraphLaunch(ge, stream));
    for (int i = 0; i < SAMPLES; i++) {
        CK(cuEventRecord(ev[2 * i], stream));
        CK(cuGraphLaunch(ge, stream));
        CK(cuEventRecord(ev[2 * i + 1], stream));
    }
    t[3] = median_us() / GRAPH;
    CK(cuGraphExecDestroy(ge));
    CK(cuGraphDestroy(g));
}

static void time_line(CUfunction f, int n, int e, size_t rows, size_t ncols, const char *dir) {
    double t[4];
    unsigned blocks, ntid;
    time_entry(f, n, e, rows, ncols, t, &blocks, &ntid);
    char shape[32];
    snprintf(shape, sizeof shape, "%zux%zu", rows, ncols);
    printf("time x%d %-11s %-8s blocks=%-4u ntid=%-4u warm %6.2f  cold %6.2f  b2b %6.2f  graph "
           "%6.2f us  %s\n", n, EPI_TAG[e], shape, blocks, ntid, t[0], t[1], t[2], t[3], dir);
}

enum { MAXDIRS = 8 };

static int time_main(int ndirs, char **dirs) {
    if (ndirs > MAXDIRS) {
        fprintf(stderr, "ptxcheck: --time takes at most %d DIRs\n", MAXDIRS);
        return 2;
    }
    static CUmodule mod[MAXDIRS][NMAX + 1];
    static CUfunction f[MAXDIRS][NMAX + 1][N_EPI];
    static int have[MAXDIRS][NMAX + 1];
    for (int d = 0; d < ndirs; d++) {
        for (int n = 1; n <= NMAX; n++) {
            char path[4096];
            snprintf(path, sizeof path, "%s/allreduce_x%d.ptx", dirs[d], n);
            FILE *fp = fopen(path, "rb");
            if (!fp) continue;
            fclose(fp);
            load(path, n, f[d][n], &mod[d][n]);
            have[d][n] = 1;
        }
        if (!have[d][2]) {
            fprintf(stderr, "ptxcheck: no %s/allreduce_x2.ptx\n", dirs[d]);
            return 2;
        }
    }
    for (int i = 0; i < 2 * SAMPLES; i++) CK(cuEventCreate(&ev[i], CU_EVENT_DEFAULT));
    CK(cuMemAlloc(&scratch, SCRATCH_BYTES));
    printf("time: warm = median of %d launches (inputs in L2), cold = the same with L2 evicted "
           "before each launch, b2b = mean of %d launches back to back, graph = median of %d runs "
           "of a CUDA graph of %d launches, per launch\n", SAMPLES, B2B, SAMPLES, GRAPH);
    // the GPU busy for a while first (out of its idle clocks)
    {
        Outs o = outs_of(PAT_ALL, 2);
        for (int i = 0; i < 4000; i++)
            launch(f[0][2][SUM], 2, SUM, &o, 0, MAXLEN, 1, grid_blocks(MAXLEN), 256);
        CK(cuStreamSynchronize(stream));
    }
    const struct { size_t rows, ncols; } shapes[] = {{1, 4096}, {1, 8192}, {512, 4096}};
    for (int e = 0; e < N_EPI; e++)
        for (int s = 0; s < 3; s++)
            for (int d = 0; d < ndirs; d++)
                time_line(f[d][2][e], 2, e, shapes[s].rows, shapes[s].ncols, dirs[d]);
    for (int n = 1; n <= NMAX; n++)
        for (int s = 0; s < 2; s++)
            for (int d = 0; d < ndirs; d++)
                if (n != 2 && have[d][n])
                    time_line(f[d][n][RMS], n, RMS, shapes[s].rows, shapes[s].ncols, dirs[d]);
    int differ = 0;
    if (ndirs > 1) {
        for (int b = 0; b < NBUF; b++) {
            ref[b] = malloc(CAP * sizeof(float));
            if (!ref[b]) { fprintf(stderr, "ptxcheck: out of memory\n"); return 2; }
        }
        for (int d = 1; d < ndirs; d++)
            for (int n = 1; n <= NMAX; n++)
                if (have[0][n] && have[d][n])
                    differ += compare_modules(n, f[0][n], f[d][n], dirs[0], dirs[d]);
        printf("compared with %s: %d cases differ\n", dirs[0], differ);
    }
    for (int d = 0; d < ndirs; d++)
        for (int n = 1; n <= NMAX; n++)
            if (have[d][n]) CK(cuModuleUnload(mod[d][n]));
    return differ ? 1 : 0;
}

static int n_of(const char *path) {
    const char *base = strrchr(path, '/');
    int n = 0;
    char tail[8];
    if (sscanf(base ? base + 1 : path, "allreduce_x%d%7s", &n, tail) != 2 || strcmp(tail, ".ptx") != 0)
        return 0;
    return n >= 1 && n <= NMAX ? n : 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *) a, *(char *const *) b);
}

int main(int argc, char **argv) {
    int timing = argc > 1 && strcmp(argv[1], "--time") == 0;
    if (argc < 2 + timing) {
        fprintf(stderr, "usage: ptxcheck FILE.ptx|DIR ...\n       ptxcheck --time DIR ...\n");
        return 2;
    }
    small_only = getenv("PTXCHECK_SMALL") != NULL;
    char *paths[256];
    int np = 0;
    for (int a = 1; a < argc && !timing; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) {
            if (np < 256) paths[np++] = argv[a];
            continue;
        }
        struct dirent *de;
        while ((de = readdir(d)) && np < 256) {
            if (!n_of(de->d_name)) continue;
            char *p = malloc(strlen(argv[a]) + strlen(de->d_name) + 2);
            sprintf(p, "%s/%s", argv[a], de->d_name);
            paths[np++] = p;
        }
        closedir(d);
    }
    qsort(paths, (size_t) np, sizeof *paths, by_name);
    if (np == 0 && !timing) {
        fprintf(stderr, "ptxcheck: no allreduce_x<n>.ptx given\n");
        return 2;
    }

    CUdevice device;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&device, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, device));
    CK(cuCtxSetCurrent(ctx));
    char dname[128];
    CK(cuDeviceGetName(dname, sizeof dname, device));
    printf("GPU 0: %s\n", dname);
    CK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
    for (int b = 0; b < NBUF; b++) {
        master[b] = malloc(CAP * sizeof(float));
        if (!master[b]) { fprintf(stderr, "ptxcheck: out of memory\n"); return 2; }
        CK(cuMemAllocHost((void **) &work[b], CAP * sizeof(float)));
        CK(cuMemAllocHost((void **) &got[b], CAP * sizeof(float)));
        CK(cuMemAlloc(&dev[b], CAP * sizeof(float)));
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fill();
    if (timing) {
        int rc = time_main(argc - 2, argv + 2);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("(%.1f s)\n", (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9);
        return rc;
    }
    for (int i = 0; i < np; i++) {
        int n = n_of(paths[i]);
        if (!n) {
            fprintf(stderr, "ptxcheck: %s: name is not allreduce_x<n>.ptx\n", paths[i]);
            return 2;
        }
        check_module(paths[i], n);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%d cases, %d failed (%.1f s)\n", cases, failures,
           (double) (t1.tv_sec - t0.tv_sec) + (double) (t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return failures ? 1 : 0;
}
