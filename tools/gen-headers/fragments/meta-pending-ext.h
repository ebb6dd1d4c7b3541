// ---------------------------------------------------------------------------------------
// Meta backend: PENDING. Not implemented by ggml-backend-rs yet; these functions are still
// provided by upstream's ggml-backend-meta.cpp, linked into ggml-base. Declared here by hand
// (not generated). As upstream, they have C++ linkage when included from C++ (no extern "C").
// ---------------------------------------------------------------------------------------

GGML_API const char *ggml_backend_meta_split_axis_name(enum ggml_backend_meta_split_axis split_axis);

// Creates a meta device over the "simple" devices devs[0..n_devs); get_split_state assigns the
// split of each statically allocated tensor.
GGML_API ggml_backend_dev_t ggml_backend_meta_device(ggml_backend_dev_t *devs, size_t n_devs, ggml_backend_meta_get_split_state_t get_split_state, void *get_split_state_ud);
