// "TESTGPU0", "TESTGPU1": test-only devices with non-host buffers, computing with the CPU backend.
#pragma once

#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ggml_backend_reg_t test_device_reg(void);
// Calls that reached the devices' native strided (2D) and asynchronous entries.
extern int test_device_2d_calls;
extern int test_device_async_calls;

// Registers the devices once (later calls only update the thread count for new backends).
void test_device_register(int n_threads);

#ifdef __cplusplus
}
#endif
