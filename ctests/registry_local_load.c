// A ggml build loaded with RTLD_LOCAL, as Python's ctypes loads libllama (llama-cpp-python):
// its symbols stay out of the process's global scope, and its registry must still list the
// backends compiled into it. Prints each device's name; the same for upstream's build.
//
//   registry_local_load <libggml.so>      exit status 0 when the registry has a device

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <libggml.so>\n", argv[0]);
        return 2;
    }
    void * lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "registry_local_load: %s\n", dlerror());
        return 1;
    }
    size_t (*dev_count)(void) = (size_t (*)(void)) dlsym(lib, "ggml_backend_dev_count");
    void * (*dev_get)(size_t) = (void * (*)(size_t)) dlsym(lib, "ggml_backend_dev_get");
    const char * (*dev_name)(void *) = (const char * (*)(void *)) dlsym(lib, "ggml_backend_dev_name");
    if (dev_count == NULL || dev_get == NULL || dev_name == NULL) {
        fprintf(stderr, "registry_local_load: the library lacks the registry functions\n");
        return 1;
    }
    size_t n = dev_count();
    printf("registry_local_load: %zu devices:", n);
    for (size_t i = 0; i < n; i++) {
        printf(" %s", dev_name(dev_get(i)));
    }
    printf("\n");
    return n > 0 ? 0 : 1;
}
