// A program built against an installed ggml-backend-rs (find_package or pkg-config, see
// ctests/package.cmake): it adds two vectors on the CPU backend through the installed headers
// and libraries, and through the scheduler, and prints the result.
#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <stdio.h>

int main(void) {
    ggml_backend_load_all();
    if (ggml_backend_dev_count() < 1) {
        fprintf(stderr, "consumer: no devices\n");
        return 1;
    }
    ggml_backend_t cpu = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    if (cpu == NULL) {
        fprintf(stderr, "consumer: no CPU backend\n");
        return 1;
    }
    struct ggml_init_params params = {ggml_tensor_overhead() * 8 + ggml_graph_overhead(), NULL, true};
    struct ggml_context * ctx = ggml_init(params);
    struct ggml_tensor * a = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    struct ggml_tensor * b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, 4);
    struct ggml_tensor * c = ggml_add(ctx, a, b);
    struct ggml_cgraph * g = ggml_new_graph(ctx);
    ggml_build_forward_expand(g, c);
    ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors(ctx, cpu);
    const float va[4] = {1, 2, 3, 4}, vb[4] = {10, 20, 30, 40};
    ggml_backend_tensor_set(a, va, 0, sizeof va);
    ggml_backend_tensor_set(b, vb, 0, sizeof vb);
    ggml_backend_sched_t sched = ggml_backend_sched_new(&cpu, NULL, 1, 64, false, true);
    if (ggml_backend_sched_graph_compute(sched, g) != GGML_STATUS_SUCCESS) {
        fprintf(stderr, "consumer: compute failed\n");
        return 1;
    }
    float vc[4];
    ggml_backend_tensor_get(c, vc, 0, sizeof vc);
    printf("consumer: %s: %g %g %g %g\n", ggml_backend_name(cpu), vc[0], vc[1], vc[2], vc[3]);
    ggml_backend_sched_free(sched);
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    ggml_backend_free(cpu);
    return vc[0] == 11 && vc[1] == 22 && vc[2] == 33 && vc[3] == 44 ? 0 : 1;
}
