// Scheduler CPU overhead per decode step: the time ggml_backend_sched spends splitting,
// allocating and dispatching a llama-shaped graph, with kernels made negligible (tiny
// tensors), so what is measured is the scheduler, not the math.
//
// The graph mimics one decode step of a 32-layer transformer (about 30 nodes per layer:
// norms, matmuls against weights, rope-like views, softmax, adds), over two backends
// (TESTGPU + CPU) so that there are splits and input copies, or over the CPU alone.
//
// Usage: sched_overhead <n_backends: 1|2> <iterations>
// Prints: "sched_overhead backends=N nodes=M splits=S median_us=X min_us=Y max_us=Z".
// Built against upstream's ggml-backend and against ours; bench/run.sh runs both.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "test_device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N_LAYER = 32, N_EMBD = 8, N_FF = 16, N_VOCAB = 16 };

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e6 + (double) ts.tv_nsec / 1e3;
}

static int cmp_double(const void * a, const void * b) {
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

struct weights {
    struct ggml_tensor * tok_embd;
    struct ggml_tensor * wq[N_LAYER], * wk[N_LAYER], * wv[N_LAYER], * wo[N_LAYER];
    struct ggml_tensor * w1[N_LAYER], * w2[N_LAYER], * w3[N_LAYER];
    struct ggml_tensor * norm[N_LAYER];
    struct ggml_tensor * out;
};

static struct ggml_cgraph * build(struct ggml_context * ctx, struct weights * w, struct ggml_tensor ** ids) {
    *ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    ggml_set_input(*ids);
    struct ggml_tensor * x = ggml_get_rows(ctx, w->tok_embd, *ids);
    for (int l = 0; l < N_LAYER; l++) {
        struct ggml_tensor * h = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), w->norm[l]);
        struct ggml_tensor * q = ggml_mul_mat(ctx, w->wq[l], h);
        struct ggml_tensor * k = ggml_mul_mat(ctx, w->wk[l], h);
        struct ggml_tensor * v = ggml_mul_mat(ctx, w->wv[l], h);
        struct ggml_tensor * kq = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, k, N_EMBD, 1), ggml_reshape_2d(ctx, q, N_EMBD, 1));
        kq = ggml_soft_max(ctx, kq);
        struct ggml_tensor * att = ggml_scale(ctx, v, 0.5f);
        att = ggml_mul(ctx, att, ggml_repeat(ctx, kq, att));
        x = ggml_add(ctx, x, ggml_mul_mat(ctx, w->wo[l], att));
        h = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), w->norm[l]);
        struct ggml_tensor * g = ggml_silu(ctx, ggml_mul_mat(ctx, w->w1[l], h));
        struct ggml_tensor * u = ggml_mul_mat(ctx, w->w3[l], h);
        x = ggml_add(ctx, x, ggml_mul_mat(ctx, w->w2[l], ggml_mul(ctx, g, u)));
    }
    struct ggml_tensor * logits = ggml_mul_mat(ctx, w->out, x);
    ggml_set_output(logits);
    struct ggml_cgraph * gf = ggml_new_graph_custom(ctx, 4096, false);
    ggml_build_forward_expand(gf, logits);
    return gf;
}

int main(int argc, char ** argv) {
    int n_backends = argc > 1 ? atoi(argv[1]) : 2;
    int iters = argc > 2 ? atoi(argv[2]) : 200;
    test_device_register(1);
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    ggml_backend_cpu_set_n_threads(cpu, 1);
    ggml_backend_t dev = ggml_backend_init_by_name("TESTGPU0", NULL);
    ggml_backend_t backends[2] = { dev, cpu };
    ggml_backend_t * used = n_backends == 2 ? backends : &cpu;

    struct ggml_init_params wp = { (10 * N_LAYER + 4) * ggml_tensor_overhead(), NULL, true };
    struct ggml_context * wctx_cpu = ggml_init(wp);
    struct ggml_context * wctx_dev = ggml_init(wp);
    struct ggml_context * wc = n_backends == 2 ? wctx_dev : wctx_cpu;
    struct weights w;
    w.tok_embd = ggml_new_tensor_2d(wctx_cpu, GGML_TYPE_F32, N_EMBD, N_VOCAB);
    for (int l = 0; l < N_LAYER; l++) {
        w.wq[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_EMBD);
        w.wk[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_EMBD);
        w.wv[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_EMBD);
        w.wo[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_EMBD);
        w.w1[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_FF);
        w.w3[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_EMBD, N_FF);
        w.w2[l] = ggml_new_tensor_2d(wc, GGML_TYPE_F32, N_FF, N_EMBD);
        w.norm[l] = ggml_new_tensor_1d(wc, GGML_TYPE_F32, N_EMBD);
    }
    w.out = ggml_new_tensor_2d(wctx_cpu, GGML_TYPE_F32, N_EMBD, N_VOCAB);
    ggml_backend_buffer_t b1 = ggml_backend_alloc_ctx_tensors_from_buft(wctx_cpu, ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_set_usage(b1, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_buffer_clear(b1, 0);
    if (n_backends == 2) {
        ggml_backend_buffer_t b2 = ggml_backend_alloc_ctx_tensors_from_buft(wctx_dev, ggml_backend_get_default_buffer_type(dev));
        ggml_backend_buffer_set_usage(b2, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        ggml_backend_buffer_clear(b2, 0);
    }

    ggml_backend_sched_t sched = ggml_backend_sched_new(used, NULL, n_backends, 8192, false, true);
    struct ggml_init_params gp = { 4096 * ggml_tensor_overhead() + ggml_graph_overhead_custom(4096, false), NULL, true };
    double * t = malloc(sizeof(double) * iters);
    int n_nodes = 0, n_splits = 0;
    for (int i = -10; i < iters; i++) { // 10 warm-up steps
        struct ggml_context * ctx = ggml_init(gp);
        struct ggml_tensor * ids;
        struct ggml_cgraph * gf = build(ctx, &w, &ids);
        double t0 = now_us();
        ggml_backend_sched_reset(sched);
        ggml_backend_sched_alloc_graph(sched, gf);
        int32_t tok = i & 7;
        ggml_backend_tensor_set(ids, &tok, 0, sizeof(tok));
        ggml_backend_sched_graph_compute(sched, gf);
        double t1 = now_us();
        if (i >= 0) t[i] = t1 - t0;
        n_nodes = ggml_graph_n_nodes(gf);
        n_splits = ggml_backend_sched_get_n_splits(sched);
        ggml_free(ctx);
    }
    qsort(t, iters, sizeof(double), cmp_double);
    printf("sched_overhead backends=%d nodes=%d splits=%d median_us=%.1f min_us=%.1f max_us=%.1f\n", n_backends, n_nodes,
           n_splits, t[iters / 2], t[0], t[iters - 1]);
    ggml_backend_sched_free(sched);
    return 0;
}
