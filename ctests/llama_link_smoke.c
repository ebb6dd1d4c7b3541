// libllama links against the spliced ggml and reaches the Rust registry through it.
// (A shared libllama's every undefined symbol is checked when this program links.)

#include "llama.h"

#include <stdio.h>
#include <string.h>

int main(void) {
    llama_backend_init();
    const char * info = llama_print_system_info();
    printf("system info: %s\n", info);
    printf("max devices: %zu, gpu offload: %d\n", llama_max_devices(), (int) llama_supports_gpu_offload());
    // The CPU backend is registered and answers get_proc_address("ggml_backend_get_features").
    int ok = strstr(info, "CPU : ") != NULL;
    llama_backend_free();
    if (!ok) {
        fprintf(stderr, "llama_print_system_info does not list the CPU backend\n");
        return 1;
    }
    return 0;
}
