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
