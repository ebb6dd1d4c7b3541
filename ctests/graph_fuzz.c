// A differential graph fuzzer for the plugin's tensor-parallel device TP0, through ggml's C API in
// a program built against upstream ggml (the pristine reference build).
//
// Each input (a byte string) decodes into a small graph: weights named as libllama names them
// (whole layers, parts of layers, single weights) or not, in f32, f16 or Q4_0, with shapes that
// divide among the devices and shapes that do not; and a chain of ops over an input: matmuls,
// adds, norms, views, rope, softmax, get_rows, activations, copies. The same graph is built
// twice, once with its weights on TP0 and once on the host's CPU backend, with the same bytes.
// Either every node is supported by TP0 (asked once the weights are placed) and TP0's result
// equals the CPU's within the tolerance below, or TP0 refuses a node (supports_op false), which
// counts as a refusal. A wrong result, a failed compute or an abort fails the run.
//
//   graph_fuzz <libggml-backend-rs-tp.so> [--corpus DIR] [--seconds S] [--seed N] [--save DIR]
//
// Every file of --corpus runs first, in name order, then random inputs from --seed until S seconds have passed
// (default 0: the corpus only). Before each input runs it is written to DIR/current (--save), so
// an input that aborts the process is kept; one that gives a wrong result is written to
// DIR/mismatch-<n>. The last line gives the counts: executions, computed, refused.
//
// Tolerance: max |tp - cpu| <= 2e-3 * max |cpu| + 1e-5 over the output. TP0 sums a contraction
// split over the devices in another order than the CPU's one dot product (float32 rounding of
// at most K * 2^-24 of the summed magnitudes, K <= 384 here: ~2e-5 relative), and norms, softmax
// and rope carry that through with gains of a few units; an output stored as f16 may round one
// ulp (2^-11) the other way. A slice read from the wrong rows, a lost or doubled partial sum, or
// a stale value moves the output by O(1) of its magnitude.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK_PROGRAM "graph_fuzz"
#include "check.h"

enum { INPUT_BYTES = 64, MAX_CHAIN = 8, VOCAB = 48, HEAD = 32 };

// --- decoding an input ---------------------------------------------------------------------

struct reader {
    const uint8_t * data;
    size_t len, at;
};

// The next byte, 0 once the input is exhausted (so every input decodes).
static unsigned next(struct reader * r) {
    return r->at < r->len ? r->data[r->at++] : 0;
}

static unsigned pick(struct reader * r, unsigned n) {
    return next(r) % n;
}

enum op_kind {
    OP_MATMUL, OP_ADD, OP_RMS_NORM, OP_NORM, OP_MUL_NORM, OP_SILU, OP_GELU, OP_SCALE,
    OP_SOFT_MAX, OP_ROPE, OP_VIEW_HALF, OP_TRANSPOSE_CONT, OP_CPY_F16, OP_SWIGLU, N_OP_KINDS
};
static const char * const op_names[] = {
    "matmul", "add", "rms_norm", "norm", "mul_norm", "silu", "gelu", "scale",
    "soft_max", "rope", "view_half", "transpose_cont", "cpy_f16", "swiglu",
};

// Which weight a matmul reads: a layer's projection (by its libllama name), or the output.
enum weight_kind { W_Q, W_K, W_V, W_O, W_UP, W_GATE, W_DOWN, W_OUTPUT, N_WEIGHT_KINDS };
static const char * const weight_names[] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_up", "ffn_gate", "ffn_down", "output",
};

struct op {
    enum op_kind kind;
    unsigned arg; // the weight's index in the pool (matmul), or a variant
};

// A decoded input: everything the graph builder needs, the same for both backends.
struct program {
    int64_t embd, ff, tokens;
    enum ggml_type type;
    int layer;
    int named_mask;       // weight kinds named as libllama names them (else "w<k>")
    int embed_input;      // the input is get_rows(token_embd, ids), else x
    int in_context;       // results allocated with the weights' context, else by ggml-alloc
    int n_ops;
    struct op ops[MAX_CHAIN];
    uint32_t seed;        // of the weights' and inputs' values
};

static void decode(const uint8_t * data, size_t len, struct program * p) {
    struct reader r = { data, len, 0 };
    static const int64_t embds[] = { 64, 96, 128 };
    static const int64_t ffs[] = { 128, 192, 256, 96 };
    static const int64_t toks[] = { 1, 3, 5 };
    static const enum ggml_type types[] = { GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0 };
    memset(p, 0, sizeof(*p));
    p->embd = embds[pick(&r, 3)];
    p->ff = ffs[pick(&r, 4)];
    p->tokens = toks[pick(&r, 3)];
    p->type = types[pick(&r, 3)];
    p->layer = (int) pick(&r, 3);
    p->named_mask = (int) (next(&r) | (next(&r) << 8));
    p->embed_input = (int) pick(&r, 2);
    p->in_context = (int) pick(&r, 2);
    p->n_ops = 1 + (int) pick(&r, MAX_CHAIN);
    for (int i = 0; i < p->n_ops; i++) {
        p->ops[i].kind = (enum op_kind) pick(&r, N_OP_KINDS);
        p->ops[i].arg = next(&r);
    }
    p->seed = next(&r) | (next(&r) << 8) | 1u;
}

// --- building the graph ----------------------------------------------------------------------

static float frand(uint32_t * s) {
    *s = *s * 1664525u + 1013904223u;
    return (float) ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

struct built {
    struct ggml_context * wctx, * ctx;
    struct ggml_tensor * weights[N_WEIGHT_KINDS + 2]; // + norm, token_embd
    struct ggml_tensor * x, * ids, * pos, * out;
    struct ggml_cgraph * graph;
};

enum { W_NORM = N_WEIGHT_KINDS, W_EMBD = N_WEIGHT_KINDS + 1 };

static void weight_shape(const struct program * p, int k, int64_t * ne0, int64_t * ne1) {
    const int64_t e = p->embd, f = p->ff;
    switch (k) {
        case W_Q: case W_O: *ne0 = e; *ne1 = e; break;
        case W_K: case W_V: *ne0 = e; *ne1 = e / 2; break;
        case W_UP: case W_GATE: *ne0 = e; *ne1 = f; break;
        case W_DOWN: *ne0 = f; *ne1 = e; break;
        case W_OUTPUT: case W_EMBD: *ne0 = e; *ne1 = VOCAB; break;
        default: *ne0 = e; *ne1 = 1; break; // the norm
    }
}

static struct ggml_tensor * weight(const struct program * p, struct built * b, int k) {
    if (b->weights[k]) {
        return b->weights[k];
    }
    int64_t ne0, ne1;
    weight_shape(p, k, &ne0, &ne1);
    // Q4_0 only where rows are whole blocks; norms stay f32, as in every model
    enum ggml_type type = (k == W_NORM || ne0 % 32 != 0) ? GGML_TYPE_F32 : p->type;
    struct ggml_tensor * w = k == W_NORM ? ggml_new_tensor_1d(b->wctx, GGML_TYPE_F32, ne0)
                                         : ggml_new_tensor_2d(b->wctx, type, ne0, ne1);
    char name[64];
    if (k == W_NORM) {
        snprintf(name, sizeof(name), "blk.%d.ffn_norm.weight", p->layer);
    } else if (k == W_EMBD) {
        snprintf(name, sizeof(name), "token_embd.weight");
    } else if (k == W_OUTPUT) {
        snprintf(name, sizeof(name), (p->named_mask >> k) & 1 ? "output.weight" : "w_output");
    } else if ((p->named_mask >> k) & 1) {
        snprintf(name, sizeof(name), "blk.%d.%s.weight", p->layer, weight_names[k]);
    } else {
        snprintf(name, sizeof(name), "w_%s", weight_names[k]);
    }
    ggml_set_name(w, name);
    b->weights[k] = w;
    return w;
}

// The matmul weights whose columns match `d`, by kind.
static int matmul_weight(const struct program * p, int64_t d, unsigned arg) {
    int fits[N_WEIGHT_KINDS], n = 0;
    for (int k = 0; k < N_WEIGHT_KINDS; k++) {
        int64_t ne0, ne1;
        weight_shape(p, k, &ne0, &ne1);
        if (ne0 == d) {
            fits[n++] = k;
        }
    }
    return n ? fits[arg % n] : -1;
}

// Builds the program's graph in fresh contexts (the same tensors, in the same order, each time).
static void build(const struct program * p, struct built * b) {
    memset(b, 0, sizeof(*b));
    struct ggml_init_params params = { ggml_tensor_overhead() * 256 + ggml_graph_overhead(), NULL, true };
    b->wctx = ggml_init(params);
    b->ctx = ggml_init(params);
    struct ggml_context * ctx = b->ctx;
    struct ggml_tensor * cur;
    if (p->embed_input) {
        b->ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, p->tokens);
        ggml_set_name(b->ids, "ids");
        ggml_set_input(b->ids);
        cur = ggml_get_rows(ctx, weight(p, b, W_EMBD), b->ids);
    } else {
        b->x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, p->embd, p->tokens);
        ggml_set_name(b->x, "x");
        ggml_set_input(b->x);
        cur = b->x;
    }
    struct ggml_tensor * first = cur;
    for (int i = 0; i < p->n_ops; i++) {
        const struct op o = p->ops[i];
        const int64_t d = cur->ne[0];
        switch (o.kind) {
            case OP_MATMUL: {
                int k = matmul_weight(p, d, o.arg);
                if (k >= 0) cur = ggml_mul_mat(ctx, weight(p, b, k), cur);
                break;
            }
            case OP_ADD:
                cur = ggml_are_same_shape(cur, first) && (o.arg & 1) ? ggml_add(ctx, cur, first)
                                                                     : ggml_add(ctx, cur, cur);
                break;
            case OP_RMS_NORM: cur = ggml_rms_norm(ctx, cur, 1e-5f); break;
            case OP_NORM: cur = ggml_norm(ctx, cur, 1e-5f); break;
            case OP_MUL_NORM:
                if (d == p->embd) cur = ggml_mul(ctx, cur, weight(p, b, W_NORM));
                break;
            case OP_SILU: cur = ggml_silu(ctx, cur); break;
            case OP_GELU: cur = ggml_gelu(ctx, cur); break;
            case OP_SCALE: cur = ggml_scale(ctx, cur, 0.5f + (float) (o.arg % 4)); break;
            case OP_SOFT_MAX: cur = ggml_soft_max(ctx, cur); break;
            case OP_ROPE:
                if (d % HEAD == 0 && cur->type == GGML_TYPE_F32 && ggml_is_contiguous(cur)) {
                    if (!b->pos) {
                        b->pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, p->tokens);
                        ggml_set_name(b->pos, "pos");
                        ggml_set_input(b->pos);
                    }
                    struct ggml_tensor * heads = ggml_reshape_3d(ctx, cur, HEAD, d / HEAD, p->tokens);
                    heads = ggml_rope(ctx, heads, b->pos, HEAD, (o.arg & 1) ? GGML_ROPE_TYPE_NEOX : 0);
                    cur = ggml_reshape_2d(ctx, heads, d, p->tokens);
                }
                break;
            case OP_VIEW_HALF:
                if (d >= 2 && ggml_is_contiguous(cur)) {
                    size_t offs = (o.arg & 1) ? (size_t) (d / 2) * ggml_element_size(cur) : 0;
                    cur = ggml_cont(ctx, ggml_view_2d(ctx, cur, d / 2, p->tokens, cur->nb[1], offs));
                }
                break;
            case OP_TRANSPOSE_CONT:
                cur = ggml_cont(ctx, ggml_transpose(ctx, ggml_cont(ctx, ggml_transpose(ctx, cur))));
                break;
            case OP_CPY_F16:
                if (cur->type == GGML_TYPE_F32) {
                    cur = ggml_cpy(ctx, cur, ggml_new_tensor(ctx, GGML_TYPE_F16, 2, cur->ne));
                    cur = ggml_scale(ctx, ggml_cast(ctx, cur, GGML_TYPE_F32), 1.0f);
                }
                break;
            case OP_SWIGLU:
                if (d % 2 == 0 && ggml_is_contiguous(cur)) cur = ggml_swiglu(ctx, cur);
                break;
            default: break;
        }
    }
    if (cur->type != GGML_TYPE_F32) {
        cur = ggml_cast(ctx, cur, GGML_TYPE_F32);
    }
    ggml_set_name(cur, "out");
    ggml_set_output(cur);
    b->out = cur;
    b->graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(b->graph, cur);
}

// Writes the program's values (the same bytes for both backends) into b's weights and inputs.
static void fill(const struct program * p, struct built * b) {
    uint32_t s = p->seed;
    for (int k = 0; k < N_WEIGHT_KINDS + 2; k++) {
        struct ggml_tensor * w = b->weights[k];
        if (!w) continue;
        const int64_t n = ggml_nelements(w);
        float * f = malloc(sizeof(float) * n);
        CHECK(f, "out of memory");
        for (int64_t i = 0; i < n; i++) f[i] = k == W_NORM ? 1.0f + frand(&s) : frand(&s);
        void * bytes = malloc(ggml_nbytes(w));
        CHECK(bytes, "out of memory");
        if (w->type == GGML_TYPE_F32) {
            memcpy(bytes, f, ggml_nbytes(w));
        } else if (w->type == GGML_TYPE_F16) {
            ggml_fp32_to_fp16_row(f, bytes, n);
        } else {
            ggml_quantize_chunk(w->type, f, bytes, 0, w->ne[1], w->ne[0], NULL);
        }
        ggml_backend_tensor_set(w, bytes, 0, ggml_nbytes(w));
        free(bytes);
        free(f);
    }
    if (b->x) {
        float * f = malloc(ggml_nbytes(b->x));
        for (int64_t i = 0; i < ggml_nelements(b->x); i++) f[i] = 2.0f * frand(&s);
        ggml_backend_tensor_set(b->x, f, 0, ggml_nbytes(b->x));
        free(f);
    }
    int32_t v[8];
    if (b->ids) {
        for (int64_t i = 0; i < p->tokens; i++) v[i] = (int32_t) ((s = s * 1664525u + 1013904223u) >> 8) % VOCAB;
        ggml_backend_tensor_set(b->ids, v, 0, ggml_nbytes(b->ids));
    }
    if (b->pos) {
        for (int64_t i = 0; i < p->tokens; i++) v[i] = (int32_t) (7 * i + 3);
        ggml_backend_tensor_set(b->pos, v, 0, ggml_nbytes(b->pos));
    }
}

struct device {
    ggml_backend_dev_t dev;
    ggml_backend_t backend;
};

struct run {
    ggml_backend_buffer_t wbuf, buf;
    ggml_gallocr_t galloc;
};

// Places b on d (weights, then the rest); 0 when TP0 refuses a node (asked after placing).
static int place(const struct program * p, struct built * b, struct device d, struct run * r, int ask) {
    memset(r, 0, sizeof(*r));
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(d.dev);
    if (ggml_get_first_tensor(b->wctx)) {
        r->wbuf = ggml_backend_alloc_ctx_tensors_from_buft(b->wctx, buft);
        CHECK(r->wbuf, "allocating the weights on %s", ggml_backend_dev_name(d.dev));
        ggml_backend_buffer_set_usage(r->wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    }
    if (ask) {
        for (int i = 0; i < ggml_graph_n_nodes(b->graph); i++) {
            if (!ggml_backend_dev_supports_op(d.dev, ggml_graph_node(b->graph, i))) {
                return 0;
            }
        }
    }
    if (p->in_context) {
        r->buf = ggml_backend_alloc_ctx_tensors_from_buft(b->ctx, buft);
        CHECK(r->buf, "allocating the graph in its context");
    } else {
        r->galloc = ggml_gallocr_new(buft);
        CHECK(ggml_gallocr_alloc_graph(r->galloc, b->graph), "ggml-alloc failed");
    }
    return 1;
}

static void release(struct built * b, struct run * r) {
    if (r->galloc) ggml_gallocr_free(r->galloc);
    if (r->buf) ggml_backend_buffer_free(r->buf);
    if (r->wbuf) ggml_backend_buffer_free(r->wbuf);
    ggml_free(b->ctx);
    ggml_free(b->wctx);
}

static float * output(struct built * b) {
    float * y = malloc(ggml_nbytes(b->out));
    CHECK(y, "out of memory");
    ggml_backend_tensor_get(b->out, y, 0, ggml_nbytes(b->out));
    return y;
}

static void describe(const struct program * p, FILE * f) {
    fprintf(f, "embd %lld, ff %lld, tokens %lld, %s, layer %d, named 0x%x, %s, %s:", (long long) p->embd,
            (long long) p->ff, (long long) p->tokens, ggml_type_name(p->type), p->layer, p->named_mask & 0xff,
            p->embed_input ? "get_rows input" : "x input", p->in_context ? "in context" : "ggml-alloc");
    for (int i = 0; i < p->n_ops; i++) fprintf(f, " %s/%u", op_names[p->ops[i].kind], p->ops[i].arg);
    fprintf(f, "\n");
}

static const char * save_dir = NULL;

static void save(const char * name, const uint8_t * data, size_t len) {
    if (!save_dir) return;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", save_dir, name);
    FILE * f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

// Runs one input; returns 1 when computed and equal, 0 when TP0 refused it (exits on a mismatch).
static int run_one(struct device tp, struct device cpu, const uint8_t * data, size_t len) {
    save("current", data, len);
    struct program p;
    decode(data, len, &p);
    struct built bt, bc;
    struct run rt, rc;
    build(&p, &bt);
    if (!place(&p, &bt, tp, &rt, 1)) {
        release(&bt, &rt);
        return 0;
    }
    fill(&p, &bt);
    CHECK(ggml_backend_graph_compute(tp.backend, bt.graph) == GGML_STATUS_SUCCESS, "TP0's compute failed");
    float * yt = output(&bt);

    build(&p, &bc);
    place(&p, &bc, cpu, &rc, 0);
    fill(&p, &bc);
    CHECK(ggml_backend_graph_compute(cpu.backend, bc.graph) == GGML_STATUS_SUCCESS, "the CPU's compute failed");
    float * yc = output(&bc);

    const int64_t n = ggml_nelements(bc.out);
    double worst = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        mag = fmax(mag, fabs(yc[i]));
        // (NaN in both counts as equal, NaN in one as the largest difference)
        double diff = isnan(yt[i]) || isnan(yc[i]) ? (isnan(yt[i]) && isnan(yc[i]) ? 0.0 : INFINITY)
                                                   : fabs((double) yt[i] - yc[i]);
        worst = fmax(worst, diff);
    }
    if (!(worst <= 2e-3 * mag + 1e-5)) {
        static int mismatches = 0;
        char name[64];
        snprintf(name, sizeof(name), "mismatch-%d", mismatches++);
        save(name, data, len);
        fprintf(stderr, "graph_fuzz: TP0 differs from the CPU by %g (largest |value| %g) for: ", worst, mag);
        describe(&p, stderr);
        exit(1);
    }
    free(yt);
    free(yc);
    release(&bt, &rt);
    release(&bc, &rc);
    return 1;
}

int main(int argc, char ** argv) {
    CHECK(argc >= 2, "usage: graph_fuzz <libggml-backend-rs-tp.so> [--corpus DIR] [--seconds S] [--seed N] [--save DIR]");
    const char * corpus = NULL;
    double seconds = 0;
    uint32_t seed = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--corpus")) corpus = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds")) seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = (uint32_t) strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--save")) save_dir = argv[i + 1];
        else CHECK(0, "unknown option %s", argv[i]);
    }
    CHECK(ggml_backend_load(argv[1]) != NULL, "ggml_backend_load(%s) failed", argv[1]);
    struct device tp = { ggml_backend_dev_by_name("TP0"), NULL };
    struct device cpu = { ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), NULL };
    CHECK(tp.dev && cpu.dev, "no TP0 or no CPU device");
    tp.backend = ggml_backend_dev_init(tp.dev, NULL);
    cpu.backend = ggml_backend_dev_init(cpu.dev, NULL);
    CHECK(tp.backend && cpu.backend, "backends");

    long executions = 0, computed = 0;
    if (corpus) {
        // in name order: some inputs only fail after others (a device keeps what it has seen)
        struct dirent ** entries;
        const int n_entries = scandir(corpus, &entries, NULL, alphasort);
        CHECK(n_entries >= 0, "cannot open %s", corpus);
        for (int ei = 0; ei < n_entries; ei++) {
            struct dirent * e = entries[ei];
            if (e->d_name[0] == '.') continue;
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s", corpus, e->d_name);
            FILE * f = fopen(path, "rb");
            CHECK(f, "cannot read %s", path);
            uint8_t data[INPUT_BYTES];
            size_t len = fread(data, 1, sizeof(data), f);
            fclose(f);
            computed += run_one(tp, cpu, data, len);
            executions++;
        }
        for (int ei = 0; ei < n_entries; ei++) free(entries[ei]);
        free(entries);
    }
    const long corpus_runs = executions;
    // a corpus that TP0 refuses whole proves nothing
    CHECK(!corpus || computed > 0, "TP0 refused every input of %s", corpus);
    const time_t start = time(NULL);
    uint32_t s = seed;
    while (difftime(time(NULL), start) < seconds) {
        uint8_t data[INPUT_BYTES];
        for (size_t i = 0; i < sizeof(data); i++) data[i] = (uint8_t) ((s = s * 1664525u + 1013904223u) >> 24);
        computed += run_one(tp, cpu, data, sizeof(data));
        executions++;
    }
    ggml_backend_free(tp.backend);
    ggml_backend_free(cpu.backend);
    printf("graph_fuzz: %ld executions (%ld of the corpus), %ld computed and equal to the CPU's, %ld refused\n",
           executions, corpus_runs, computed, executions - computed);
    return 0;
}
