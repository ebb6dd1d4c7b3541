// The registries of the backends linked into this build, for the Rust registry in ggml-base.
//
// This file is the only source of target `ggml` in a ggml-backend-rs build. The upstream
// build marks each statically linked backend with a GGML_USE_<NAME> definition on `ggml`;
// the list below turns those definitions into reg handles, in the order upstream registers
// them. With GGML_BACKEND_DL no definition is set and backends are found by loading instead.
// One list for every supported ggml version: a backend a version does not have is never defined
// there (GGML_USE_ET exists from ggml 0.26 on, which registers ET right before the CPU).

#include "ggml-backend.h"

#include <stddef.h>
#include <stdlib.h>

#ifdef GGML_USE_CUDA
#include "ggml-cuda.h"
#endif
#ifdef GGML_USE_METAL
#include "ggml-metal.h"
#endif
#ifdef GGML_USE_SYCL
#include "ggml-sycl.h"
#endif
#ifdef GGML_USE_VULKAN
#include "ggml-vulkan.h"
#endif
#ifdef GGML_USE_WEBGPU
#include "ggml-webgpu.h"
#endif
#ifdef GGML_USE_ZDNN
#include "ggml-zdnn.h"
#endif
#ifdef GGML_USE_VIRTGPU_FRONTEND
#include "ggml-virtgpu.h"
#endif
#ifdef GGML_USE_OPENCL
#include "ggml-opencl.h"
#endif
#ifdef GGML_USE_ZENDNN
#include "ggml-zendnn.h"
#endif
#ifdef GGML_USE_HEXAGON
#include "ggml-hexagon.h"
#endif
#ifdef GGML_USE_CANN
#include "ggml-cann.h"
#endif
#ifdef GGML_USE_BLAS
#include "ggml-blas.h"
#endif
#ifdef GGML_USE_RPC
#include "ggml-rpc.h"
#endif
#ifdef GGML_USE_OPENVINO
#include "ggml-openvino.h"
#endif
#ifdef GGML_USE_ET
#include "ggml-et.h"
#endif
#ifdef GGML_USE_CPU
#include "ggml-cpu.h"
#endif

// Declared here rather than in a header: only the Rust registry calls it.
GGML_API size_t ggml_backend_rs_builtin_regs(ggml_backend_reg_t * regs, size_t capacity);

// The Rust registry (in ggml-base, which this library links) takes the list from here.
void ggml_backend_rs_set_builtin_list(size_t (*list)(ggml_backend_reg_t * regs, size_t capacity));

// Hands the list to the registry when this library loads: a library loaded with RTLD_LOCAL
// (Python's ctypes, as llama-cpp-python loads libllama) is not in the process's global scope,
// where the registry would otherwise look the list up by name. ggml-base is loaded, and its
// constructors have run, before those of a library that depends on it.
__attribute__((constructor)) static void ggml_backend_rs_hand_over_builtins(void) {
    ggml_backend_rs_set_builtin_list(ggml_backend_rs_builtin_regs);
}

// Appends `reg` unless it is NULL (a backend may decline to register, e.g. no device found).
static void push(ggml_backend_reg_t reg, ggml_backend_reg_t * regs, size_t capacity, size_t * n) {
    if (reg == NULL) {
        return;
    }
    if (regs != NULL && *n < capacity) {
        regs[*n] = reg;
    }
    (*n)++;
}

size_t ggml_backend_rs_builtin_regs(ggml_backend_reg_t * regs, size_t capacity) {
    size_t n = 0;
    (void) regs;
    (void) capacity;
    (void) push;

#ifdef GGML_USE_CUDA
    push(ggml_backend_cuda_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_METAL
    push(ggml_backend_metal_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_SYCL
    push(ggml_backend_sycl_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_VULKAN
    if (getenv("GGML_DISABLE_VULKAN") == NULL) {
        push(ggml_backend_vk_reg(), regs, capacity, &n);
    }
#endif
#ifdef GGML_USE_WEBGPU
    push(ggml_backend_webgpu_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_ZDNN
    push(ggml_backend_zdnn_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_VIRTGPU_FRONTEND
    push(ggml_backend_virtgpu_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_OPENCL
    push(ggml_backend_opencl_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_ZENDNN
    push(ggml_backend_zendnn_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_HEXAGON
    push(ggml_backend_hexagon_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_CANN
    push(ggml_backend_cann_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_BLAS
    push(ggml_backend_blas_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_RPC
    push(ggml_backend_rpc_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_OPENVINO
    push(ggml_backend_openvino_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_ET
    push(ggml_backend_et_reg(), regs, capacity, &n);
#endif
#ifdef GGML_USE_CPU
    push(ggml_backend_cpu_reg(), regs, capacity, &n);
#endif

    return n;
}
