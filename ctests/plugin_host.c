// A pristine ggml program that loads one backend plugin: prints the host's ggml version, the
// plugin's ggml_backend_score and whether ggml_backend_load accepted it. Built against the
// reference build of each tree, it is the host for the plugins of the other ABI classes.
//
//   plugin_host <plugin.so> accepted|refused      exit status 0 when the load went that way and
//                                                 the score agreed (non-zero / zero)

#include "ggml.h"
#include "ggml-backend.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char ** argv) {
    if (argc != 3 || (strcmp(argv[2], "accepted") != 0 && strcmp(argv[2], "refused") != 0)) {
        fprintf(stderr, "usage: %s <plugin.so> accepted|refused\n", argv[0]);
        return 2;
    }
    printf("plugin_host: ggml %s\n", ggml_version());
    fflush(stdout);
    void * module = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (module == NULL) {
        printf("plugin_host: dlopen failed: %s\n", dlerror());
        return 1;
    }
    int (*score_fn)(void) = (int (*)(void)) dlsym(module, "ggml_backend_score");
    int score = score_fn != NULL ? score_fn() : -1;
    printf("plugin_host: score %d\n", score);
    fflush(stdout);
    ggml_backend_reg_t reg = ggml_backend_load(argv[1]);
    const char * outcome = reg != NULL ? "accepted" : "refused";
    printf("plugin_host: load %s\n", outcome);
    if (reg != NULL) {
        printf("plugin_host: registry %s with %zu devices\n", ggml_backend_reg_name(reg),
               ggml_backend_reg_dev_count(reg));
    }
    int score_agrees = reg != NULL ? score > 0 : score == 0;
    return strcmp(outcome, argv[2]) == 0 && score_agrees ? 0 : 1;
}
