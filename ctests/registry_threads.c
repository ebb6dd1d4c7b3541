// 8 threads make the first calls into the backend registry at the same moment (a barrier
// releases them together): each counts registries and devices, finds the CPU device and starts
// and frees a CPU backend. All must see the same registry; the output is compared with the
// same program on upstream's ggml (differential/registry_threads).

#include "ggml-backend.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

enum { N_THREADS = 8 };

static pthread_barrier_t start;

struct seen {
    size_t n_regs, n_devs;
    ggml_backend_dev_t cpu;
    int backend_ok;
};

static void * run(void * arg) {
    struct seen * s = arg;
    pthread_barrier_wait(&start);
    s->n_regs = ggml_backend_reg_count();
    s->n_devs = ggml_backend_dev_count();
    s->cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_t b = ggml_backend_init_by_type(GGML_BACKEND_DEVICE_TYPE_CPU, NULL);
    s->backend_ok = b != NULL && ggml_backend_get_device(b) == s->cpu;
    ggml_backend_free(b);
    return NULL;
}

int main(void) {
    pthread_t threads[N_THREADS];
    struct seen seen[N_THREADS];
    memset(seen, 0, sizeof(seen));
    pthread_barrier_init(&start, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) pthread_create(&threads[i], NULL, run, &seen[i]);
    for (int i = 0; i < N_THREADS; i++) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N_THREADS; i++) {
        if (seen[i].n_regs != seen[0].n_regs || seen[i].n_devs != seen[0].n_devs ||
            seen[i].cpu != seen[0].cpu || !seen[i].cpu || !seen[i].backend_ok) {
            printf("registry_threads: FAILED: thread %d saw %zu registries, %zu devices, CPU %p, backend %d; "
                   "thread 0 saw %zu, %zu, %p\n", i, seen[i].n_regs, seen[i].n_devs, (void *) seen[i].cpu,
                   seen[i].backend_ok, seen[0].n_regs, seen[0].n_devs, (void *) seen[0].cpu);
            return 1;
        }
    }
    printf("registry_threads: %d threads saw the same %zu registries and %zu devices (CPU: %s)\n", N_THREADS,
           seen[0].n_regs, seen[0].n_devs, ggml_backend_dev_name(seen[0].cpu));
    return 0;
}
