// ggml-ext.h: ggml 0.13.1; generated from the ggml-backend-rs sources by
// tools/gen-headers (cbindgen). Do not edit; regenerate with
//     cargo run --manifest-path tools/gen-headers/Cargo.toml
// ggml-backend-rs's own extension (upstream has no such header in this version): the
// meta device's accessors.
// Defining GGML_BACKEND_RS_PROTOTYPES_ONLY hides macros, constants, enums and structs, leaving the
// typedefs and prototypes (used to check them against upstream's in one C++ TU).

#pragma once

// Lets a translation unit check that it reads these headers and not upstream's.
#define GGML_BACKEND_RS_HEADERS 1

#include "ggml.h"
#include "ggml-backend.h"

#ifndef GGML_BACKEND_RS_PROTOTYPES_ONLY

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
