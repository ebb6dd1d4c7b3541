// Differential driver: softmax(A^T B + bias) on the CPU backend, found through the registry.
//
// Built twice (against the Rust backend layer and against upstream's); both builds must write
// byte-identical output. Usage: graph_matmul_add_softmax <output-file>
// The output file holds the raw f32 result; stdout gets a short human-readable summary.

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

// Sizes chosen to be neither powers of two nor multiples of the SIMD width.
enum { K = 67, M = 45, N = 33 };

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

// Deterministic values in [-1, 1) from a 32-bit LCG; no libc rand().
static void fill(float * dst, size_t n, uint32_t seed) {
    uint32_t s = seed;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        dst[i] = (float) (s >> 8) / (float) (1u << 23) - 1.0f;
    }
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <output-file>\n", argv[0]);
        return 2;
    }

    printf("devices: %zu\n", ggml_backend_dev_count());
    ggml_backend_t backend = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    CHECK(backend != NULL);
    printf("backend: %s\n", ggml_backend_name(backend));
    ggml_backend_cpu_set_n_threads(backend, 2);

    struct ggml_init_params params = {
        /* .mem_size   = */ 16 * ggml_tensor_overhead() + ggml_graph_overhead(),
        /* .mem_buffer = */ NULL,
        /* .no_alloc   = */ true,
    };
    struct ggml_context * ctx = ggml_init(params);
    CHECK(ctx != NULL);

    struct ggml_tensor * a    = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, M);
    struct ggml_tensor * b    = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, N);
    struct ggml_tensor * bias = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, M);
    struct ggml_tensor * mm   = ggml_mul_mat(ctx, a, b);           // [M, N]
    struct ggml_tensor * sum  = ggml_add(ctx, mm, bias);           // bias broadcast over N
    struct ggml_tensor * out  = ggml_soft_max(ctx, sum);           // over M, per column
    ggml_set_name(out, "out");

    struct ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);

    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
    CHECK(buf != NULL);

    static float va[K * M], vb[K * N], vbias[M], vout[M * N];
    fill(va, K * M, 1);
    fill(vb, K * N, 2);
    fill(vbias, M, 3);
    ggml_backend_tensor_set(a, va, 0, sizeof(va));
    ggml_backend_tensor_set(b, vb, 0, sizeof(vb));
    ggml_backend_tensor_set(bias, vbias, 0, sizeof(vbias));

    CHECK(ggml_backend_graph_compute(backend, graph) == GGML_STATUS_SUCCESS);

    CHECK(ggml_nbytes(out) == sizeof(vout));
    ggml_backend_tensor_get(out, vout, 0, sizeof(vout));

    // Each softmax column sums to 1: a cheap sanity check independent of the other build.
    for (int j = 0; j < N; j++) {
        double s = 0.0;
        for (int i = 0; i < M; i++) {
            s += vout[j * M + i];
        }
        CHECK(s > 0.999 && s < 1.001);
    }

    FILE * f = fopen(argv[1], "wb");
    CHECK(f != NULL);
    CHECK(fwrite(vout, 1, sizeof(vout), f) == sizeof(vout));
    CHECK(fclose(f) == 0);
    printf("out[0..3]: %.9g %.9g %.9g %.9g\n", vout[0], vout[1], vout[2], vout[3]);

    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return 0;
}
