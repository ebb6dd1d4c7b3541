// The test devices TESTGPU0, TESTGPU1 as a loadable backend module, for programs that take their
// devices from ggml's registry and accept GPU-typed devices only (llama.cpp's --device refuses
// CPU devices): GGML_BACKEND_PATH=libggml-testgpu.so llama-server --device TESTGPU0,TESTGPU1.
// The devices compute with the CPU backend of the host process's ggml.

#include "test_device.h"

#if defined(__GNUC__)
#    define TEST_DEVICE_EXPORT __attribute__((visibility("default")))
#else
#    define TEST_DEVICE_EXPORT
#endif

TEST_DEVICE_EXPORT ggml_backend_reg_t ggml_backend_init(void) {
    return test_device_reg();
}

TEST_DEVICE_EXPORT int ggml_backend_score(void) {
    return 1;
}
