// "TESTGPU0", "TESTGPU1": test-only devices with non-host buffers, computing with the CPU backend.
#pragma once

#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ggml_backend_reg_t test_device_reg(void);
// Registers the devices once (later calls only update the thread count for new backends).
void test_device_register(int n_threads);

#ifdef __cplusplus
}
#endif
