// The scheduler over two backends (TESTGPU + CPU) against one (CPU): a small graph whose ops
// are split between the devices (TESTGPU refuses get_rows and soft_max), with weights in
// both kinds of buffer, graph inputs (one that no node reads), and pipeline copies when run
// with "parallel". The compute buffer sizes it prints show which graph inputs got pipeline
// copies: ggml 0.25.3 on copies every input leaf, earlier releases those a node reads.
//
// Usage: sched_split [parallel]
// Prints one line per evaluation with the split count and a digest of the output; exits 1
// when the two-backend result differs from the CPU-only result. Built against upstream too:
// the printed lines must be identical (ctest compares them).

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "test_device.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 32, N_VOCAB = 50, N_TOKENS = 7, N_HIDDEN = 48 };

struct model {
    struct ggml_context * ctx;     // tok_embd
    struct ggml_context * ctx_dev; // w1, w2
    struct ggml_tensor * tok_embd; // CPU, weights
    struct ggml_tensor * w1;       // device, weights
    struct ggml_tensor * w2;       // device, weights
    ggml_backend_buffer_t buf_cpu, buf_dev;
};

static float value(int i, int salt) { return sinf(0.37f * (float) i + (float) salt) * 0.5f; }

static void fill(struct ggml_tensor * t, int salt) {
    int64_t n = ggml_nelements(t);
    float * v = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) v[i] = value((int) i, salt);
    ggml_backend_tensor_set(t, v, 0, n * sizeof(float));
    free(v);
}

static struct model load(ggml_backend_t dev_backend) {
    struct model m;
    struct ggml_init_params p = { 8 * ggml_tensor_overhead(), NULL, true };
    m.ctx = ggml_init(p);
    m.ctx_dev = ggml_init(p);
    m.tok_embd = ggml_new_tensor_2d(m.ctx, GGML_TYPE_F32, N_EMBD, N_VOCAB);
    m.w1 = ggml_new_tensor_2d(m.ctx_dev, GGML_TYPE_F32, N_EMBD, N_HIDDEN);
    m.w2 = ggml_new_tensor_2d(m.ctx_dev, GGML_TYPE_F32, N_HIDDEN, N_EMBD);
    m.buf_cpu = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx, ggml_backend_cpu_buffer_type());
    m.buf_dev = ggml_backend_alloc_ctx_tensors_from_buft(m.ctx_dev, ggml_backend_get_default_buffer_type(dev_backend));
    ggml_backend_buffer_set_usage(m.buf_cpu, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_buffer_set_usage(m.buf_dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    fill(m.tok_embd, 1);
    fill(m.w1, 2);
    fill(m.w2, 3);
    return m;
}

// Frees what load() made (not for a copy sharing its CPU part, like main's m_cpu).
static void unload(struct model * m) {
    ggml_backend_buffer_free(m->buf_cpu);
    ggml_backend_buffer_free(m->buf_dev);
    ggml_free(m->ctx);
    ggml_free(m->ctx_dev);
}

// builds the graph in a fresh context; returns the output tensor
static struct ggml_tensor * build(struct ggml_context * ctx, struct model * m, struct ggml_tensor ** ids_out, struct ggml_cgraph ** gf_out) {
    struct ggml_tensor * ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, N_TOKENS);
    ggml_set_input(ids);
    struct ggml_tensor * x = ggml_get_rows(ctx, m->tok_embd, ids);        // CPU: refused by TESTGPU
    struct ggml_tensor * h = ggml_mul_mat(ctx, m->w1, x);                 // TESTGPU: weights there
    h = ggml_gelu(ctx, h);                                                // TESTGPU by expansion
    struct ggml_tensor * s = ggml_soft_max(ctx, h);                       // CPU: refused by TESTGPU
    struct ggml_tensor * y = ggml_mul_mat(ctx, m->w2, s);                 // TESTGPU again
    struct ggml_tensor * out = ggml_add(ctx, y, x);                       // residual across devices
    ggml_set_output(out);
    // an input leaf in the graph that no node reads (libllama's graphs have such inputs for
    // some batch shapes)
    struct ggml_tensor * unread = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 1024);
    ggml_set_input(unread);
    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, unread);
    ggml_build_forward_expand(gf, out);
    *ids_out = ids;
    *gf_out = gf;
    return out;
}

static uint64_t fnv(const void * data, size_t n) {
    const uint8_t * p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int n_evals_observed = 0;
static bool observe(struct ggml_tensor * t, bool ask, void * ud) {
    (void) ud;
    if (ask) return t->op == GGML_OP_SOFT_MAX; // only soft_max is of interest
    n_evals_observed++;
    return true;
}

// runs 3 evaluations with different inputs; writes the outputs into `results`
static void run(ggml_backend_t * backends, int n_backends, struct model * m, bool parallel, bool callback,
                float results[3][N_EMBD * N_TOKENS], int splits[3]) {
    ggml_backend_sched_t sched = ggml_backend_sched_new(backends, NULL, n_backends, 256, parallel, true);
    if (callback) ggml_backend_sched_set_eval_callback(sched, observe, NULL);
    for (int it = 0; it < 3; it++) {
        struct ggml_init_params p = { 64 * ggml_tensor_overhead() + ggml_graph_overhead(), NULL, true };
        struct ggml_context * ctx = ggml_init(p);
        struct ggml_tensor * ids;
        struct ggml_cgraph * gf;
        struct ggml_tensor * out = build(ctx, m, &ids, &gf);
        if (it == 0) {
            // reserve with a graph of its own: splitting rewrites a graph's sources, so a
            // graph is split once (as libllama does)
            struct ggml_context * ctx_r = ggml_init(p);
            struct ggml_tensor * ids_r;
            struct ggml_cgraph * gf_r;
            build(ctx_r, m, &ids_r, &gf_r);
            if (!ggml_backend_sched_reserve(sched, gf_r)) { fprintf(stderr, "reserve failed\n"); exit(1); }
            ggml_free(ctx_r);
        }
        ggml_backend_sched_reset(sched);
        if (!ggml_backend_sched_alloc_graph(sched, gf)) { fprintf(stderr, "alloc failed\n"); exit(1); }
        int32_t tok[N_TOKENS];
        for (int i = 0; i < N_TOKENS; i++) tok[i] = (i * 7 + it * 13) % N_VOCAB;
        ggml_backend_tensor_set(ids, tok, 0, sizeof(tok));
        if (ggml_backend_sched_graph_compute(sched, gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "compute failed\n"); exit(1); }
        ggml_backend_tensor_get(out, results[it], 0, sizeof(results[it]));
        splits[it] = ggml_backend_sched_get_n_splits(sched);
        if (ggml_backend_sched_get_tensor_backend(sched, out) == NULL) { fprintf(stderr, "output has no backend\n"); exit(1); }
        ggml_free(ctx);
    }
    printf("n_backends=%d n_copies=%d\n", ggml_backend_sched_get_n_backends(sched), ggml_backend_sched_get_n_copies(sched));
    for (int b = 0; b < n_backends; b++) {
        printf("backend %s buffer %s size %zu\n", ggml_backend_name(ggml_backend_sched_get_backend(sched, b)),
               ggml_backend_buft_name(ggml_backend_sched_get_buffer_type(sched, backends[b])),
               ggml_backend_sched_get_buffer_size(sched, backends[b]));
    }
    ggml_backend_sched_free(sched);
}

int main(int argc, char ** argv) {
    bool parallel = argc > 1 && strcmp(argv[1], "parallel") == 0;
    test_device_register(2);
    ggml_backend_t dev = ggml_backend_init_by_name("TESTGPU0", NULL);
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    if (!dev || !cpu) { fprintf(stderr, "no backends\n"); return 1; }
    ggml_backend_cpu_set_n_threads(cpu, 2);

    // reference: everything on the CPU (the device weights copied into CPU memory)
    struct model m = load(dev);
    struct model m_cpu = m; // tok_embd shared; w1 and w2 copied into a context and buffer of its own
    struct ggml_init_params p = { 4 * ggml_tensor_overhead(), NULL, true };
    m_cpu.ctx_dev = ggml_init(p);
    m_cpu.w1 = ggml_dup_tensor(m_cpu.ctx_dev, m.w1);
    m_cpu.w2 = ggml_dup_tensor(m_cpu.ctx_dev, m.w2);
    m_cpu.buf_dev = ggml_backend_alloc_ctx_tensors_from_buft(m_cpu.ctx_dev, ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_set_usage(m_cpu.buf_dev, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_tensor_copy(m.w1, m_cpu.w1);
    ggml_backend_tensor_copy(m.w2, m_cpu.w2);
    static float ref[3][N_EMBD * N_TOKENS], got[3][N_EMBD * N_TOKENS];
    int ref_splits[3], got_splits[3];
    ggml_backend_t one[1] = { cpu };
    run(one, 1, &m_cpu, false, false, ref, ref_splits);

    ggml_backend_t two[2] = { dev, cpu };
    run(two, 2, &m, parallel, false, got, got_splits);

    int failures = 0;
    for (int it = 0; it < 3; it++) {
        printf("eval %d: splits %d (cpu-only %d) digest %016llx\n", it, got_splits[it], ref_splits[it],
               (unsigned long long) fnv(got[it], sizeof(got[it])));
        if (memcmp(got[it], ref[it], sizeof(got[it])) != 0) {
            int first = -1, count = 0;
            for (int i = 0; i < N_EMBD * N_TOKENS; i++) {
                if (got[it][i] != ref[it][i]) { if (first < 0) first = i; count++; }
            }
            fprintf(stderr, "FAIL: eval %d differs from the CPU-only result (%d values, first at %d: %g vs %g)\n", it, count,
                    first, (double) got[it][first], (double) ref[it][first]);
            failures++;
        }
        if (got_splits[it] < 4) {
            fprintf(stderr, "FAIL: expected the graph to be split (got %d splits)\n", got_splits[it]);
            failures++;
        }
    }

    // the eval callback sees soft_max once per evaluation and does not change results
    static float cb[3][N_EMBD * N_TOKENS];
    int cb_splits[3];
    run(two, 2, &m, parallel, true, cb, cb_splits);
    printf("callback observed %d nodes\n", n_evals_observed);
    if (n_evals_observed != 3 || memcmp(cb, got, sizeof(cb)) != 0) {
        fprintf(stderr, "FAIL: eval callback\n");
        failures++;
    }

    ggml_backend_buffer_free(m_cpu.buf_dev);
    ggml_free(m_cpu.ctx_dev);
    unload(&m);
    ggml_backend_free(dev);
    ggml_backend_free(cpu);
    return failures ? 1 : 0;
}
