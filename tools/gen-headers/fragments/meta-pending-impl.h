// ---------------------------------------------------------------------------------------
// Meta backend: PENDING. Not implemented by ggml-backend-rs yet; these functions are still
// provided by upstream's ggml-backend-meta.cpp, linked into ggml-base. Declared here by hand
// (not generated) so that this header is a complete drop-in for upstream's.
// ---------------------------------------------------------------------------------------
#ifdef __cplusplus
extern "C" {
#endif

GGML_API bool ggml_backend_is_meta(ggml_backend_t backend);
GGML_API bool ggml_backend_buffer_is_meta(ggml_backend_buffer_t buf);
GGML_API bool ggml_backend_buft_is_meta(ggml_backend_buffer_type_t buft);

GGML_API size_t ggml_backend_meta_n_backends(ggml_backend_t meta_backend);
GGML_API ggml_backend_t ggml_backend_meta_simple_backend(ggml_backend_t meta_backend, size_t index);

// Allocates the tensors of ctx once per distinct buffer type behind buft.
GGML_API struct ggml_backend_buffer *ggml_backend_meta_alloc_ctx_tensors_from_buft(struct ggml_context *ctx, ggml_backend_buffer_type_t buft);

#ifdef __cplusplus
}
#endif
