// The plugin (libggml-backend-rs-tp.so) used directly through the ggml API by a program built
// against upstream ggml (the pristine reference build): it loads the plugin, finds its
// tensor-parallel device TP0 = TP(CPU,CPU) (GGML_BACKEND_RS_TP=CPU,CPU), places a model-like
// layer of weights on it the generic way (ggml_backend_alloc_ctx_tensors_from_buft), checks
// how the plugin's name policy split them and that each CPU holds only its slices, and runs
// an FFN block (rms_norm, mul, two matmuls whose partial sums the plugin adds, silu, add) on
// TP0 and on the host's CPU backend: the results must agree.
//
//   plugin_ops <path of libggml-backend-rs-tp.so>
//
// Tolerance: 1e-5 relative to the output's largest magnitude. TP0 adds the down projection's
// two partial sums (48 columns each) where the CPU sums all 96 in one dot product, so float32
// rounding differs by a few ulps of values of order 1; a lost or misplaced slice changes the
// output by O(1).

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The meta API's split state: public in ggml-backend.h from ggml 0.26 on (which defines
// GGML_BACKEND_META_MAX_DEVICES with it); in 0.9.11 only ggml-ext.h declared it, not a public
// header upstream, so its layout is repeated here.
#ifdef GGML_BACKEND_META_MAX_DEVICES
typedef struct ggml_backend_meta_split_state split_state_t;
#else
typedef struct {
    int axis;
    int64_t ne[16 * 16];
    uint32_t n_segments;
} split_state_t;
#endif
typedef split_state_t (*get_split_state_t)(const struct ggml_tensor *, bool);
typedef size_t (*n_bufs_t)(ggml_backend_buffer_t);
typedef ggml_backend_buffer_t (*simple_buffer_t)(ggml_backend_buffer_t, size_t);
typedef void (*set_n_threads_t)(ggml_backend_t, int);

#define CHECK_PROGRAM "plugin_ops"
#include "check.h"

// N_FF: 256 rows halve into whole shares under both versions' sizing (0.26 rounds FFN shares to
// 128 rows).
enum { N_EMBD = 64, N_FF = 256, N_TOK = 5 };

static float frand(unsigned * s) {
    *s = *s * 1664525u + 1013904223u;
    return (float) ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

struct layer {
    struct ggml_tensor * up, * down, * norm;
};

static struct layer make_layer(struct ggml_context * ctx) {
    struct layer l;
    l.up = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_EMBD, N_FF);
    ggml_set_name(l.up, "blk.0.ffn_up.weight");
    l.down = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_FF, N_EMBD);
    ggml_set_name(l.down, "blk.0.ffn_down.weight");
    l.norm = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, N_EMBD);
    ggml_set_name(l.norm, "blk.0.ffn_norm.weight");
    return l;
}

static void fill(struct layer l, const float * up, const float * down, const float * norm) {
    ggml_backend_tensor_set(l.up, up, 0, ggml_nbytes(l.up));
    ggml_backend_tensor_set(l.down, down, 0, ggml_nbytes(l.down));
    ggml_backend_tensor_set(l.norm, norm, 0, ggml_nbytes(l.norm));
}

// y = x + down · silu(up · (rms_norm(x) * norm)); returns y, sets *h to the up projection
static struct ggml_tensor * ffn(struct ggml_context * ctx, struct layer l, struct ggml_tensor * x,
                                struct ggml_tensor ** h) {
    struct ggml_tensor * n = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), l.norm);
    *h = ggml_mul_mat(ctx, l.up, n);
    struct ggml_tensor * y = ggml_mul_mat(ctx, l.down, ggml_silu(ctx, *h));
    return ggml_add(ctx, y, x);
}

// Computes the block on `backend` (weights in `l`, allocated on `buft`); writes y.
static void run(ggml_backend_t backend, ggml_backend_buffer_type_t buft, struct layer l,
                const float * x_data, float * y_out, get_split_state_t split_of) {
    struct ggml_init_params p = { ggml_tensor_overhead() * 64 + ggml_graph_overhead(), NULL, true };
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_EMBD, N_TOK);
    ggml_set_name(x, "x");
    ggml_set_input(x);
    struct ggml_tensor * h = NULL;
    struct ggml_tensor * y = ffn(ctx, l, x, &h);
    ggml_set_output(y);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_gallocr_t galloc = ggml_gallocr_new(buft);
    CHECK(ggml_gallocr_alloc_graph(galloc, gf), "graph allocation failed");
    ggml_backend_tensor_set(x, x_data, 0, ggml_nbytes(x));
    CHECK(ggml_backend_graph_compute(backend, gf) == GGML_STATUS_SUCCESS, "compute failed");
    ggml_backend_tensor_get(y, y_out, 0, ggml_nbytes(y));
    if (split_of) {
        split_state_t s = split_of(h, true);
        CHECK(s.axis == 0 && s.ne[0] == N_FF / 2 && s.ne[1] == N_FF / 2,
              "the up projection's result is split as axis %d {%lld,%lld}", s.axis,
              (long long) s.ne[0], (long long) s.ne[1]);
    }
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
}

int main(int argc, char ** argv) {
    CHECK(argc == 2, "usage: plugin_ops <libggml-backend-rs-tp.so>");
    ggml_backend_reg_t reg = ggml_backend_load(argv[1]);
    CHECK(reg != NULL, "ggml_backend_load(%s) failed", argv[1]);
    CHECK(strcmp(ggml_backend_reg_name(reg), "TP") == 0, "registry name %s", ggml_backend_reg_name(reg));
    CHECK(ggml_backend_reg_dev_count(reg) == 1, "%zu devices", ggml_backend_reg_dev_count(reg));
    ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, 0);
    CHECK(strcmp(ggml_backend_dev_name(dev), "TP0") == 0, "device %s", ggml_backend_dev_name(dev));
    CHECK(strcmp(ggml_backend_dev_description(dev), "TP(CPU,CPU)") == 0, "description %s",
          ggml_backend_dev_description(dev));
    CHECK(ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_GPU, "type %d", (int) ggml_backend_dev_type(dev));
    CHECK(ggml_backend_dev_by_name("TP0") == dev, "TP0 is not in the host's device list");

    get_split_state_t split_of =
        (get_split_state_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_meta_get_split_state");
    n_bufs_t n_bufs = (n_bufs_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_meta_buffer_n_bufs");
    simple_buffer_t simple_buffer =
        (simple_buffer_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_meta_buffer_simple_buffer");
    set_n_threads_t set_n_threads =
        (set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
    CHECK(split_of && n_bufs && simple_buffer && set_n_threads, "an inspection function is missing");
    CHECK(ggml_backend_reg_get_proc_address(reg, "ggml_backend_no_such_function") == NULL, "unknown name");

    // the same random layer for both backends
    unsigned seed = 1;
    static float up[N_EMBD * N_FF], down[N_FF * N_EMBD], norm[N_EMBD], x[N_EMBD * N_TOK];
    for (int i = 0; i < N_EMBD * N_FF; i++) up[i] = frand(&seed);
    for (int i = 0; i < N_FF * N_EMBD; i++) down[i] = frand(&seed);
    for (int i = 0; i < N_EMBD; i++) norm[i] = 1.0f + frand(&seed);
    for (int i = 0; i < N_EMBD * N_TOK; i++) x[i] = 4.0f * frand(&seed);

    struct ggml_init_params wp = { ggml_tensor_overhead() * 8, NULL, true };
    struct ggml_context * ctx_tp = ggml_init(wp);
    struct layer tp = make_layer(ctx_tp);
    ggml_backend_buffer_type_t tp_buft = ggml_backend_dev_buffer_type(dev);
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(ctx_tp, tp_buft);
    CHECK(wbuf != NULL, "weights allocation failed");
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    fill(tp, up, down, norm);

    // the name policy: FFN rows and columns halved, the norm on both devices
    split_state_t s = split_of(tp.up, false);
    CHECK(s.axis == 1 && s.n_segments == 1 && s.ne[0] == N_FF / 2 && s.ne[1] == N_FF / 2,
          "ffn_up split as axis %d {%lld,%lld}", s.axis, (long long) s.ne[0], (long long) s.ne[1]);
    s = split_of(tp.down, false);
    CHECK(s.axis == 0 && s.ne[0] == N_FF / 2 && s.ne[1] == N_FF / 2,
          "ffn_down split as axis %d {%lld,%lld}", s.axis, (long long) s.ne[0], (long long) s.ne[1]);
    s = split_of(tp.norm, false);
    CHECK(s.axis == 10, "ffn_norm split as axis %d, not MIRRORED", s.axis);

    // each CPU holds its halves of up and down and all of the norm, not the whole layer
    CHECK(n_bufs(wbuf) == 2, "%zu simple buffers", n_bufs(wbuf));
    const size_t whole = ggml_nbytes(tp.up) + ggml_nbytes(tp.down) + ggml_nbytes(tp.norm);
    const size_t share = (ggml_nbytes(tp.up) + ggml_nbytes(tp.down)) / 2 + ggml_nbytes(tp.norm);
    for (size_t j = 0; j < 2; j++) {
        size_t size = ggml_backend_buffer_get_size(simple_buffer(wbuf, j));
        CHECK(size >= share && size < share + 256 && size < whole,
              "device %zu holds %zu bytes (its share: %zu, the whole layer: %zu)", j, size, share, whole);
    }

    // reading a split weight back gathers the slices
    static float back[N_EMBD * N_FF];
    ggml_backend_tensor_get(tp.up, back, 0, sizeof(back));
    CHECK(memcmp(back, up, sizeof(back)) == 0, "ffn_up does not read back as written");

    // A buffer placed by hand with room to spare: a view initialised before the buffer is used
    // waits for its source's slices; a tensor placed after first use gets slices of its own.
    {
        struct ggml_init_params lp = { ggml_tensor_overhead() * 8, NULL, true };
        struct ggml_context * lc = ggml_init(lp);
        struct ggml_tensor * a = ggml_new_tensor_2d(lc, GGML_TYPE_F32, N_EMBD, N_FF);
        ggml_set_name(a, "blk.0.ffn_gate.weight");
        struct ggml_tensor * row = ggml_view_1d(lc, a, N_EMBD, 3 * a->nb[1]);
        struct ggml_tensor * late = ggml_new_tensor_1d(lc, GGML_TYPE_F32, 16);
        ggml_set_name(late, "late.weight");
        const size_t align = ggml_backend_buft_get_alignment(tp_buft);
        ggml_backend_buffer_t lb = ggml_backend_buft_alloc_buffer(tp_buft, 2 * ggml_nbytes(a) + 4 * align);
        CHECK(lb != NULL, "buffer");
        char * base = (char *) ggml_backend_buffer_get_base(lb);
        CHECK(ggml_backend_tensor_alloc(lb, a, base) == GGML_STATUS_SUCCESS, "placing the weight");
        CHECK(ggml_backend_view_init(row) == GGML_STATUS_SUCCESS, "initialising the view");
        ggml_backend_tensor_set(a, up, 0, ggml_nbytes(a));  // first use: slices placed
        float got[N_EMBD];
        ggml_backend_tensor_get(row, got, 0, sizeof(got));
        CHECK(memcmp(got, up + 3 * N_EMBD, sizeof(got)) == 0, "the view does not read row 3");
        char * at = base + ((ggml_nbytes(a) + align - 1) / align) * align;
        CHECK(ggml_backend_tensor_alloc(lb, late, at) == GGML_STATUS_SUCCESS, "placing a tensor late");
        float v[16], w[16];
        for (int i = 0; i < 16; i++) v[i] = (float) i - 7.5f;
        ggml_backend_tensor_set(late, v, 0, sizeof(v));
        ggml_backend_tensor_get(late, w, 0, sizeof(w));
        CHECK(memcmp(v, w, sizeof(v)) == 0, "the late tensor does not read back");
        ggml_backend_tensor_get(a, back, 0, sizeof(back));
        CHECK(memcmp(back, up, sizeof(back)) == 0, "placing late moved the first tensor's data");
        ggml_backend_buffer_free(lb);
        ggml_free(lc);
    }

    // the FFN block on TP0 and on the CPU
    ggml_backend_t tp_backend = ggml_backend_dev_init(dev, NULL);
    CHECK(tp_backend != NULL, "TP0 backend init failed");
    set_n_threads(tp_backend, 2);
    static float y_tp[N_EMBD * N_TOK], y_cpu[N_EMBD * N_TOK];
    run(tp_backend, tp_buft, tp, x, y_tp, split_of);

    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    CHECK(cpu != NULL, "no CPU backend");
    struct ggml_context * ctx_cpu = ggml_init(wp);
    struct layer ref = make_layer(ctx_cpu);
    ggml_backend_buffer_t cbuf =
        ggml_backend_alloc_ctx_tensors_from_buft(ctx_cpu, ggml_backend_get_default_buffer_type(cpu));
    fill(ref, up, down, norm);
    run(cpu, ggml_backend_get_default_buffer_type(cpu), ref, x, y_cpu, NULL);

    double max_abs = 0, max_diff = 0;
    for (int i = 0; i < N_EMBD * N_TOK; i++) {
        max_abs = fmax(max_abs, fabs(y_cpu[i]));
        max_diff = fmax(max_diff, fabs((double) y_tp[i] - y_cpu[i]));
    }
    CHECK(max_abs > 0.5 && max_diff <= 1e-5 * max_abs, "TP0 differs from the CPU by %g (max |y| %g)",
          max_diff, max_abs);
    printf("plugin_ops: TP0 = TP(CPU,CPU) matches the CPU backend (max diff %.3g, max |y| %.3g)\n",
           max_diff, max_abs);

    ggml_backend_buffer_free(cbuf);
    ggml_free(ctx_cpu);
    ggml_backend_free(cpu);
    ggml_backend_free(tp_backend);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx_tp);
    return 0;
}
