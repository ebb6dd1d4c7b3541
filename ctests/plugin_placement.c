// A weight placed on the plugin's device TP0 = TP(CPU,CPU) and used by a program that is not
// libllama: y = mul_mat(w, x) for weights named as libllama names them and not, small and large,
// with x and y allocated the two ways a program does (in one context with
// ggml_backend_alloc_ctx_tensors, as ggml's test-backend-ops does, or by ggml-alloc's graph
// allocator in a compute buffer). Every result must equal a double-precision reference, or the
// plugin must refuse the graph (supports_op false); a wrong result reported as success fails.
//
//   plugin_placement <path of libggml-backend-rs-tp.so>
//
// Tolerance: |y - ref| <= K * 2^-24 * sum_k |w_k x_k| per element, the bound on float32
// summation of K products in any order (gamma_K). Both TP0 and the CPU backend stay inside
// it; a slice read from the wrong rows or a lost partial sum misses it by orders of magnitude.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            fprintf(stderr, "plugin_placement: FAILED at line %d: %s: ", __LINE__, #cond);      \
            fprintf(stderr, __VA_ARGS__);                                                       \
            fprintf(stderr, "\n");                                                              \
            exit(1);                                                                            \
        }                                                                                       \
    } while (0)

enum { N_TOK = 3 };

static float frand(unsigned * s) {
    *s = *s * 1664525u + 1013904223u;
    return (float) ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

enum alloc_kind { IN_CONTEXT, GALLOCR };

// Computes y = w x on TP0 with w named `name` and shaped [k, m]; returns 1 when it matched,
// 0 when TP0 refused the graph.
static int run(ggml_backend_dev_t dev, ggml_backend_t backend, const char * name, int64_t k, int64_t m,
               enum alloc_kind how) {
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
    struct ggml_init_params p = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true };
    struct ggml_context * wctx = ggml_init(p);
    struct ggml_tensor * w = ggml_new_tensor_2d(wctx, GGML_TYPE_F32, k, m);
    ggml_set_name(w, name);
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, N_TOK);
    ggml_set_name(x, "x");
    ggml_set_input(x);
    struct ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    ggml_set_name(y, "y");
    ggml_set_output(y);

    if (!ggml_backend_dev_supports_op(dev, y)) {
        printf("plugin_placement: %-24s [%lld, %lld] %-10s refused (supports_op false)\n", name,
               (long long) k, (long long) m, how == IN_CONTEXT ? "in-context" : "gallocr");
        ggml_free(ctx);
        ggml_free(wctx);
        return 0;
    }
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
    CHECK(wbuf != NULL, "allocating %s", name);
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);

    struct ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_backend_buffer_t xbuf = NULL;
    ggml_gallocr_t galloc = NULL;
    if (how == IN_CONTEXT) {
        xbuf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
        CHECK(xbuf != NULL, "allocating x and y");
    } else {
        galloc = ggml_gallocr_new(buft);
        CHECK(ggml_gallocr_alloc_graph(galloc, gf), "graph allocation failed");
    }

    unsigned seed = 7;
    float * wd = malloc(sizeof(float) * k * m);
    float * xd = malloc(sizeof(float) * k * N_TOK);
    float * yd = malloc(sizeof(float) * m * N_TOK);
    CHECK(wd && xd && yd, "out of host memory");
    for (int64_t i = 0; i < k * m; i++) wd[i] = frand(&seed);
    for (int64_t i = 0; i < k * N_TOK; i++) xd[i] = frand(&seed);
    ggml_backend_tensor_set(w, wd, 0, ggml_nbytes(w));
    ggml_backend_tensor_set(x, xd, 0, ggml_nbytes(x));
    CHECK(ggml_backend_graph_compute(backend, gf) == GGML_STATUS_SUCCESS, "compute failed");
    ggml_backend_tensor_get(y, yd, 0, ggml_nbytes(y));

    double worst = 0.0;
    for (int t = 0; t < N_TOK; t++) {
        for (int64_t r = 0; r < m; r++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t c = 0; c < k; c++) {
                double prod = (double) wd[r * k + c] * xd[t * k + c];
                ref += prod;
                mag += fabs(prod);
            }
            double bound = (double) k * ldexp(1.0, -24) * mag + 1e-30;
            double ratio = fabs(yd[t * m + r] - ref) / bound;
            if (ratio > worst) worst = ratio;
        }
    }
    printf("plugin_placement: %-24s [%lld, %lld] %-10s error %.3g of the bound\n", name, (long long) k,
           (long long) m, how == IN_CONTEXT ? "in-context" : "gallocr", worst);
    CHECK(worst <= 1.0, "%s [%lld, %lld]: y differs from the reference (%.3g times the bound)", name,
          (long long) k, (long long) m, worst);

    free(wd);
    free(xd);
    free(yd);
    if (galloc) ggml_gallocr_free(galloc);
    if (xbuf) ggml_backend_buffer_free(xbuf);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx);
    ggml_free(wctx);
    return 1;
}

int main(int argc, char ** argv) {
    CHECK(argc == 2, "usage: plugin_placement <libggml-backend-rs-tp.so>");
    ggml_backend_reg_t reg = ggml_backend_load(argv[1]);
    CHECK(reg != NULL, "ggml_backend_load(%s) failed", argv[1]);
    ggml_backend_dev_t dev = ggml_backend_dev_by_name("TP0");
    CHECK(dev != NULL, "no device TP0");
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    CHECK(backend != NULL, "TP0's backend");

    static const struct {
        const char * name;
        int64_t k, m;
    } rows[] = {
        { "w_plain", 256, 128 },
        { "blk.0.ffn_up.weight", 256, 128 },
        { "blk.0.ffn_down.weight", 256, 128 },
        { "blk.1.ffn_up.weight", 1024, 1024 },
        { "blk.2.ffn_up.weight", 4096, 4096 },
        { "blk.3.attn_q.weight", 512, 512 },
        { "output.weight", 256, 1000 },
    };
    int computed = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int how = IN_CONTEXT; how <= GALLOCR; how++) {
            computed += run(dev, backend, rows[i].name, rows[i].k, rows[i].m, (enum alloc_kind) how);
        }
    }
    ggml_backend_free(backend);
    printf("plugin_placement: %d of %d computed and correct, the rest refused\n", computed,
           (int) (2 * sizeof(rows) / sizeof(rows[0])));
    return 0;
}
