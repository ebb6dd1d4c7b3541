// ggml-ext.h: ggml 0.9.11; generated from the ggml-backend-rs sources by
// tools/gen-headers (cbindgen). Do not edit; regenerate with
//     cargo run --manifest-path tools/gen-headers/Cargo.toml
// Declaration-compatible with upstream ggml's header of the same name.
// Defining GGML_BACKEND_RS_PROTOTYPES_ONLY hides macros, constants, enums and structs, leaving the
// typedefs and prototypes (used to check them against upstream's in one C++ TU).

#pragma once

// Lets a translation unit check that it reads these headers and not upstream's.
#define GGML_BACKEND_RS_HEADERS 1

#include "ggml.h"
#include "ggml-backend.h"

struct ggml_backend_meta_split_state;
// Assigns the split state of a statically allocated tensor.
typedef struct ggml_backend_meta_split_state (*ggml_backend_meta_get_split_state_t)(const struct ggml_tensor *tensor, void *userdata);

#ifndef GGML_BACKEND_RS_PROTOTYPES_ONLY

// Most devices a meta device can wrap.
#define GGML_BACKEND_META_MAX_DEVICES 16

// How a tensor is distributed over the devices of a meta device.
enum ggml_backend_meta_split_axis {
    // Each device holds a slice along tensor dimension 0 (1, 2, 3 below likewise).
    GGML_BACKEND_SPLIT_AXIS_0 = 0,
    GGML_BACKEND_SPLIT_AXIS_1 = 1,
    GGML_BACKEND_SPLIT_AXIS_2 = 2,
    GGML_BACKEND_SPLIT_AXIS_3 = 3,
    // Every device holds all values.
    GGML_BACKEND_SPLIT_AXIS_MIRRORED = 10,
    // Every device holds a partial sum; the full value is their sum.
    GGML_BACKEND_SPLIT_AXIS_PARTIAL = 11,
    // Bookkeeping only: not split.
    GGML_BACKEND_SPLIT_AXIS_NONE = 98,
    // Bookkeeping only: not yet known.
    GGML_BACKEND_SPLIT_AXIS_UNKNOWN = 99,
};

// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
// device) pair, segments outer and devices inner; the extents of one segment over all
// devices add up to that segment's size along the axis.
struct ggml_backend_meta_split_state {
    enum ggml_backend_meta_split_axis axis;
    int64_t ne[256];
    uint32_t n_segments;
};

#endif // GGML_BACKEND_RS_PROTOTYPES_ONLY

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

GGML_API bool ggml_backend_dev_is_meta(ggml_backend_dev_t dev);

GGML_API size_t ggml_backend_meta_dev_n_devs(ggml_backend_dev_t dev);

GGML_API ggml_backend_dev_t ggml_backend_meta_dev_simple_dev(ggml_backend_dev_t dev, size_t index);

GGML_API size_t ggml_backend_meta_buft_n_bufts(ggml_backend_buffer_type_t buft);

GGML_API ggml_backend_buffer_type_t ggml_backend_meta_buft_simple_buft(ggml_backend_buffer_type_t buft, size_t index);

GGML_API size_t ggml_backend_meta_buffer_n_bufs(ggml_backend_buffer_t buf);

GGML_API ggml_backend_buffer_t ggml_backend_meta_buffer_simple_buffer(ggml_backend_buffer_t buf, size_t index);

GGML_API struct ggml_tensor *ggml_backend_meta_buffer_simple_tensor(const struct ggml_tensor *tensor, size_t index);

GGML_API struct ggml_backend_meta_split_state ggml_backend_meta_get_split_state(const struct ggml_tensor *tensor, bool assume_sync);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

// ---------------------------------------------------------------------------------------
// Declared with C++ linkage when included from C++, as upstream's ggml-ext.h does (no
// extern "C"): libllama links these by their mangled names, which ggml-backend-rs exports.
// Hand-written, because cbindgen only writes C-linkage prototypes.
// ---------------------------------------------------------------------------------------

// The name of a split axis: "0".."3", "MIRRORED", "PARTIAL", "NONE", "UNKNOWN".
GGML_API const char *ggml_backend_meta_split_axis_name(enum ggml_backend_meta_split_axis split_axis);

// The meta device over the "simple" devices devs[0..n_devs) (1..GGML_BACKEND_META_MAX_DEVICES;
// a device may repeat). get_split_state assigns the split of each statically allocated tensor
// (weights, caches). The same arguments return the same device.
GGML_API ggml_backend_dev_t ggml_backend_meta_device(ggml_backend_dev_t *devs, size_t n_devs, ggml_backend_meta_get_split_state_t get_split_state, void *get_split_state_ud);
