// A weight placed on the plugin's device TP0 = TP(CPU,CPU) and used by a program that is not
// libllama: y = mul_mat(w, x) for weights named as libllama names them and not, small and large,
// and y = rms_norm(w) over a weight split along its rows' length, with x and y allocated the two
// ways a program does (in one context with ggml_backend_alloc_ctx_tensors, as ggml's
// test-backend-ops does, or by ggml-alloc's graph allocator in a compute buffer). Every result
// must equal a double-precision reference, or the plugin must refuse the graph (supports_op
// false, asked once the weight is placed), as the table says of each row; a wrong result
// reported as success fails.
//
//   plugin_placement <path of libggml-backend-rs-tp.so>
//
// Tolerance: |y - ref| <= K * 2^-24 * sum_k |w_k x_k| per element, the bound on float32
// summation of K products in any order (gamma_K); for rms_norm the same bound on the sum of
// squares, carried through the square root. TP0 and the CPU backend stay inside it; a slice
// read from the wrong rows or a lost partial sum misses it by orders of magnitude.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_PROGRAM "plugin_placement"
#include "check.h"

enum { N_TOK = 3 };

static float frand(unsigned * s) {
    *s = *s * 1664525u + 1013904223u;
    return (float) ((*s >> 8) & 0xffff) / 65536.0f - 0.5f;
}

enum alloc_kind { IN_CONTEXT, GALLOCR };
enum op_kind { MATMUL, RMS_NORM };

// Computes y = w x (or rms_norm(w)) on TP0 with w named `name` and shaped [k, m]; returns 1
// when it matched, 0 when TP0 refused the graph.
static int run(ggml_backend_dev_t dev, ggml_backend_t backend, const char * name, int64_t k, int64_t m,
               enum op_kind op, enum alloc_kind how) {
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
    struct ggml_init_params p = { ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true };
    struct ggml_context * wctx = ggml_init(p);
    struct ggml_tensor * w = ggml_new_tensor_2d(wctx, GGML_TYPE_F32, k, m);
    ggml_set_name(w, name);
    struct ggml_context * ctx = ggml_init(p);
    struct ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, N_TOK);
    ggml_set_name(x, "x");
    ggml_set_input(x);
    struct ggml_tensor * y = op == MATMUL ? ggml_mul_mat(ctx, w, x) : ggml_rms_norm(ctx, w, 1e-6f);
    ggml_set_name(y, "y");
    ggml_set_output(y);
    const char * what = op == MATMUL ? "w x" : "rms_norm(w)";
    const char * where = how == IN_CONTEXT ? "in-context" : "gallocr";

    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(wctx, buft);
    CHECK(wbuf != NULL, "allocating %s", name);
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    if (!ggml_backend_dev_supports_op(dev, y)) {
        printf("plugin_placement: %-22s [%lld, %lld] %-11s %-10s refused (supports_op false)\n", name,
               (long long) k, (long long) m, what, where);
        ggml_backend_buffer_free(wbuf);
        ggml_free(ctx);
        ggml_free(wctx);
        return 0;
    }

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
    float * yd = malloc(sizeof(float) * (size_t) ggml_nelements(y));
    CHECK(wd && xd && yd, "out of host memory");
    for (int64_t i = 0; i < k * m; i++) wd[i] = frand(&seed);
    for (int64_t i = 0; i < k * N_TOK; i++) xd[i] = frand(&seed);
    ggml_backend_tensor_set(w, wd, 0, ggml_nbytes(w));
    if (op == MATMUL) {
        ggml_backend_tensor_set(x, xd, 0, ggml_nbytes(x));
    }
    CHECK(ggml_backend_graph_compute(backend, gf) == GGML_STATUS_SUCCESS, "compute failed");
    ggml_backend_tensor_get(y, yd, 0, ggml_nbytes(y));

    double worst = 0.0;
    const double gamma = (double) k * ldexp(1.0, -24);
    if (op == MATMUL) {
        for (int t = 0; t < N_TOK; t++) {
            for (int64_t r = 0; r < m; r++) {
                double ref = 0.0, mag = 0.0;
                for (int64_t c = 0; c < k; c++) {
                    double prod = (double) wd[r * k + c] * xd[t * k + c];
                    ref += prod;
                    mag += fabs(prod);
                }
                double ratio = fabs(yd[t * m + r] - ref) / (gamma * mag + 1e-30);
                if (ratio > worst) worst = ratio;
            }
        }
    } else {
        // y = w / sqrt(mean(w^2) + eps) per row: a relative error e in the sum of squares moves
        // y by e/2 of |y| (plus the rounding of the division, ~2^-24)
        for (int64_t r = 0; r < m; r++) {
            double ss = 0.0;
            for (int64_t c = 0; c < k; c++) ss += (double) wd[r * k + c] * wd[r * k + c];
            double scale = 1.0 / sqrt(ss / (double) k + 1e-6);
            for (int64_t c = 0; c < k; c++) {
                double ref = wd[r * k + c] * scale;
                double ratio = fabs(yd[r * k + c] - ref) / ((gamma / 2 + ldexp(1.0, -23)) * fabs(ref) + 1e-30);
                if (ratio > worst) worst = ratio;
            }
        }
    }
    printf("plugin_placement: %-22s [%lld, %lld] %-11s %-10s error %.3g of the bound\n", name, (long long) k,
           (long long) m, what, where, worst);
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

    // computed: 1 when the row must be computed, 0 when it must be refused
    static const struct {
        const char * name;
        int64_t k, m;
        enum op_kind op;
        int computed;
    } rows[] = {
        { "w_plain", 256, 128, MATMUL, 1 },
        { "blk.0.ffn_up.weight", 256, 128, MATMUL, 1 },
        { "blk.0.ffn_down.weight", 256, 128, MATMUL, 1 },
        { "blk.1.ffn_up.weight", 1024, 1024, MATMUL, 1 },
        { "blk.2.ffn_up.weight", 4096, 4096, MATMUL, 1 },
        { "blk.3.attn_q.weight", 512, 512, MATMUL, 1 },
        { "output.weight", 256, 1000, MATMUL, 1 },
        // split along its rows' length: each device holds part of every row
        { "blk.4.ffn_down.weight", 256, 128, RMS_NORM, 0 },
        // split across rows: each row whole on one device
        { "blk.5.ffn_up.weight", 256, 128, RMS_NORM, 1 },
    };
    int computed = 0, cases = 0;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        for (int how = IN_CONTEXT; how <= GALLOCR; how++) {
            int c = run(dev, backend, rows[i].name, rows[i].k, rows[i].m, rows[i].op, (enum alloc_kind) how);
            CHECK(c == rows[i].computed, "%s: %s, expected %s", rows[i].name, c ? "computed" : "refused",
                  rows[i].computed ? "computed" : "refused");
            computed += c;
            cases++;
        }
    }
    ggml_backend_free(backend);
    printf("plugin_placement: %d of %d computed and correct, the rest refused\n", computed, cases);
    return 0;
}
