// "TESTGPU0", "TESTGPU1" (up to TESTGPU3 with GGML_BACKEND_RS_TESTGPU_COUNT): test-only devices
// with non-host buffers, computing with the CPU backend.
#pragma once

#include "ggml-backend.h"

#ifdef __cplusplus
extern "C" {
#endif

ggml_backend_reg_t test_device_reg(void);
// Calls that reached the devices' native strided (2D) and asynchronous entries.
extern int test_device_2d_calls;
extern int test_device_async_calls;

// The trace of device operations since the last reset.
enum test_device_op {
    TEST_DEVICE_OP_COMPUTE,      // graph_compute
    TEST_DEVICE_OP_COPY,         // cpy_tensor_async
    TEST_DEVICE_OP_EVENT_RECORD,
    TEST_DEVICE_OP_EVENT_WAIT,
    TEST_DEVICE_OP_SYNC,         // backend synchronize, event synchronize (the host waits)
    TEST_DEVICE_OP_ALLOC,        // buffer allocation
    TEST_DEVICE_OP_COUNT,
};
struct test_device_trace_stats {
    int count[TEST_DEVICE_OP_COUNT];
    // operations strictly between the first graph computed and the last device-side operation
    // (compute, copy, event) of the trace
    int inside[TEST_DEVICE_OP_COUNT];
    int complete; // the trace held every operation
};
void test_device_trace_reset(void);
struct test_device_trace_stats test_device_trace_read(void);

// Registers the devices once (later calls only update the thread count for new backends).
void test_device_register(int n_threads);

#ifdef __cplusplus
}
#endif
