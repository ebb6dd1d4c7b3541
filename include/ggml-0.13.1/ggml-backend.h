// ggml-backend.h: ggml 0.13.1; generated from the ggml-backend-rs sources by
// tools/gen-headers (cbindgen). Do not edit; regenerate with
//     cargo run --manifest-path tools/gen-headers/Cargo.toml
// Declaration-compatible with upstream ggml's header of the same name.
// Defining GGML_BACKEND_RS_PROTOTYPES_ONLY hides macros, constants, enums and structs, leaving the
// typedefs and prototypes (used to check them against upstream's in one C++ TU).

#pragma once

// Lets a translation unit check that it reads these headers and not upstream's.
#define GGML_BACKEND_RS_HEADERS 1

#include "ggml.h"
#include "ggml-alloc.h"

struct ggml_backend_dev_caps;
struct ggml_backend_dev_props;
struct ggml_backend_graph_copy;
struct ggml_backend_meta_split_state;
struct ggml_backend_feature;
typedef struct ggml_backend_buffer *ggml_backend_buffer_t;

typedef void *ggml_backend_graph_plan_t;

typedef struct ggml_backend_event *ggml_backend_event_t;

typedef struct ggml_backend *ggml_backend_t;

typedef struct ggml_backend_reg *ggml_backend_reg_t;

typedef struct ggml_backend_device *ggml_backend_dev_t;

typedef struct ggml_backend_buffer_type *ggml_backend_buffer_type_t;

typedef struct ggml_backend_sched *ggml_backend_sched_t;

typedef bool (*ggml_backend_eval_callback)(int node_index, struct ggml_tensor *t1, struct ggml_tensor *t2, void *user_data);

// Assigns the split state of a statically allocated tensor.
typedef struct ggml_backend_meta_split_state (*ggml_backend_meta_get_split_state_t)(const struct ggml_tensor *tensor, void *userdata);

typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor *t, bool ask, void *user_data);

typedef ggml_backend_buffer_type_t (*ggml_backend_split_buffer_type_t)(int main_device, const float *tensor_split);

// A backend's communicator for tensor parallelism, offered by its registry as
// `ggml_backend_comm_init` / `_free` / `_allreduce_tensor`.
typedef void *(*ggml_backend_comm_init_t)(ggml_backend_t *backends, size_t n_backends);

typedef void (*ggml_backend_comm_free_t)(void *comm_ctx);

typedef bool (*ggml_backend_comm_allreduce_tensor_t)(void *comm_ctx, struct ggml_tensor **tensors);

typedef void (*ggml_backend_set_n_threads_t)(ggml_backend_t backend, int n_threads);

typedef ggml_backend_buffer_type_t *(*ggml_backend_dev_get_extra_bufts_t)(ggml_backend_dev_t device);

typedef void (*ggml_backend_set_abort_callback_t)(ggml_backend_t backend, ggml_abort_callback abort_callback, void *abort_callback_data);

typedef struct ggml_backend_feature *(*ggml_backend_get_features_t)(ggml_backend_reg_t reg);

#ifndef GGML_BACKEND_RS_PROTOTYPES_ONLY

// GGML_BACKEND_API: how a backend library marks the symbols it exports (ggml_backend_init,
// ggml_backend_score, its own API). Static builds need nothing; shared builds export with
// default visibility, or dllexport/dllimport on Windows depending on GGML_BACKEND_BUILD.
#if !defined(GGML_BACKEND_SHARED)
#    define GGML_BACKEND_API extern
#elif defined(_WIN32) && !defined(__MINGW32__)
#    if defined(GGML_BACKEND_BUILD)
#        define GGML_BACKEND_API __declspec(dllexport) extern
#    else
#        define GGML_BACKEND_API __declspec(dllimport) extern
#    endif
#else
#    define GGML_BACKEND_API __attribute__((visibility("default"))) extern
#endif

// Most devices a meta device can wrap.
#define GGML_BACKEND_META_MAX_DEVICES 16

// What a buffer holds; the scheduler prefers to run ops next to WEIGHTS buffers.
enum ggml_backend_buffer_usage {
    GGML_BACKEND_BUFFER_USAGE_ANY = 0,
    GGML_BACKEND_BUFFER_USAGE_WEIGHTS = 1,
    GGML_BACKEND_BUFFER_USAGE_COMPUTE = 2,
};

enum ggml_backend_dev_type {
    GGML_BACKEND_DEVICE_TYPE_CPU,
    GGML_BACKEND_DEVICE_TYPE_GPU,
    GGML_BACKEND_DEVICE_TYPE_IGPU,
    GGML_BACKEND_DEVICE_TYPE_ACCEL,
    GGML_BACKEND_DEVICE_TYPE_META,
};

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

struct ggml_backend_dev_caps {
    bool async;
    bool host_buffer;
    bool buffer_from_host_ptr;
    bool events;
};

struct ggml_backend_dev_props {
    const char *name;
    const char *description;
    size_t memory_free;
    size_t memory_total;
    enum ggml_backend_dev_type type;
    const char *device_id;
    struct ggml_backend_dev_caps caps;
};

// The result of `ggml_backend_graph_copy`; all fields NULL when the copy failed.
struct ggml_backend_graph_copy {
    ggml_backend_buffer_t buffer;
    struct ggml_context *ctx_allocated;
    struct ggml_context *ctx_unallocated;
    struct ggml_cgraph *graph;
};

// The split of one tensor. For a dimension axis, `ne` holds one extent per (segment,
// device) pair, segments outer and devices inner, and segment `s` repeats `nr[s]` times (a
// fused K/V pair as one segment repeated twice); the extents of one segment over all
// devices add up to that segment's size along the axis.
struct ggml_backend_meta_split_state {
    enum ggml_backend_meta_split_axis axis;
    int64_t ne[256];
    uint32_t nr[16];
    uint32_t n_segments;
};

struct ggml_backend_feature {
    const char *name;
    const char *value;
};

#endif // GGML_BACKEND_RS_PROTOTYPES_ONLY

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

GGML_API ggml_guid_t ggml_backend_guid(ggml_backend_t backend);

GGML_API const char *ggml_backend_name(ggml_backend_t backend);

GGML_API void ggml_backend_free(ggml_backend_t backend);

GGML_API ggml_backend_buffer_type_t ggml_backend_get_default_buffer_type(ggml_backend_t backend);

GGML_API ggml_backend_buffer_t ggml_backend_alloc_buffer(ggml_backend_t backend, size_t size);

GGML_API size_t ggml_backend_get_alignment(ggml_backend_t backend);

GGML_API size_t ggml_backend_get_max_size(ggml_backend_t backend);

GGML_API void ggml_backend_synchronize(ggml_backend_t backend);

GGML_API ggml_backend_graph_plan_t ggml_backend_graph_plan_create(ggml_backend_t backend, struct ggml_cgraph *cgraph);

GGML_API void ggml_backend_graph_plan_free(ggml_backend_t backend, ggml_backend_graph_plan_t plan);

GGML_API enum ggml_status ggml_backend_graph_plan_compute(ggml_backend_t backend, ggml_backend_graph_plan_t plan);

GGML_API enum ggml_status ggml_backend_graph_compute(ggml_backend_t backend, struct ggml_cgraph *cgraph);

GGML_API enum ggml_status ggml_backend_graph_compute_async(ggml_backend_t backend, struct ggml_cgraph *cgraph);

GGML_API bool ggml_backend_supports_op(ggml_backend_t backend, const struct ggml_tensor *op);

GGML_API bool ggml_backend_supports_buft(ggml_backend_t backend, ggml_backend_buffer_type_t buft);

GGML_API bool ggml_backend_offload_op(ggml_backend_t backend, const struct ggml_tensor *op);

GGML_API ggml_backend_dev_t ggml_backend_get_device(ggml_backend_t backend);

GGML_API const char *ggml_backend_buffer_name(ggml_backend_buffer_t buffer);

GGML_API void ggml_backend_buffer_free(ggml_backend_buffer_t buffer);

GGML_API void *ggml_backend_buffer_get_base(ggml_backend_buffer_t buffer);

GGML_API size_t ggml_backend_buffer_get_size(ggml_backend_buffer_t buffer);

GGML_API enum ggml_status ggml_backend_buffer_init_tensor(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor);

GGML_API size_t ggml_backend_buffer_get_alignment(ggml_backend_buffer_t buffer);

GGML_API size_t ggml_backend_buffer_get_max_size(ggml_backend_buffer_t buffer);

GGML_API size_t ggml_backend_buffer_get_alloc_size(ggml_backend_buffer_t buffer, const struct ggml_tensor *tensor);

GGML_API void ggml_backend_buffer_clear(ggml_backend_buffer_t buffer, uint8_t value);

GGML_API bool ggml_backend_buffer_is_host(ggml_backend_buffer_t buffer);

GGML_API void ggml_backend_buffer_set_usage(ggml_backend_buffer_t buffer, enum ggml_backend_buffer_usage usage);

GGML_API enum ggml_backend_buffer_usage ggml_backend_buffer_get_usage(ggml_backend_buffer_t buffer);

GGML_API ggml_backend_buffer_type_t ggml_backend_buffer_get_type(ggml_backend_buffer_t buffer);

GGML_API void ggml_backend_buffer_reset(ggml_backend_buffer_t buffer);

GGML_API ggml_backend_buffer_type_t ggml_backend_cpu_buffer_type(void);

GGML_API ggml_backend_buffer_t ggml_backend_cpu_buffer_from_ptr(void *ptr, size_t size);

GGML_API const char *ggml_backend_buft_name(ggml_backend_buffer_type_t buft);

GGML_API ggml_backend_buffer_t ggml_backend_buft_alloc_buffer(ggml_backend_buffer_type_t buft, size_t size);

GGML_API size_t ggml_backend_buft_get_alignment(ggml_backend_buffer_type_t buft);

GGML_API size_t ggml_backend_buft_get_max_size(ggml_backend_buffer_type_t buft);

GGML_API size_t ggml_backend_buft_get_alloc_size(ggml_backend_buffer_type_t buft, const struct ggml_tensor *tensor);

GGML_API bool ggml_backend_buft_is_host(ggml_backend_buffer_type_t buft);

GGML_API ggml_backend_dev_t ggml_backend_buft_get_device(ggml_backend_buffer_type_t buft);

GGML_API const char *ggml_backend_dev_name(ggml_backend_dev_t device);

GGML_API const char *ggml_backend_dev_description(ggml_backend_dev_t device);

GGML_API void ggml_backend_dev_memory(ggml_backend_dev_t device, size_t *free, size_t *total);

GGML_API enum ggml_backend_dev_type ggml_backend_dev_type(ggml_backend_dev_t device);

GGML_API void ggml_backend_dev_get_props(ggml_backend_dev_t device, struct ggml_backend_dev_props *props);

GGML_API ggml_backend_reg_t ggml_backend_dev_backend_reg(ggml_backend_dev_t device);

GGML_API ggml_backend_t ggml_backend_dev_init(ggml_backend_dev_t device, const char *params);

GGML_API ggml_backend_buffer_type_t ggml_backend_dev_buffer_type(ggml_backend_dev_t device);

GGML_API ggml_backend_buffer_type_t ggml_backend_dev_host_buffer_type(ggml_backend_dev_t device);

GGML_API ggml_backend_buffer_t ggml_backend_dev_buffer_from_host_ptr(ggml_backend_dev_t device, void *ptr, size_t size, size_t max_tensor_size);

GGML_API bool ggml_backend_dev_supports_op(ggml_backend_dev_t device, const struct ggml_tensor *op);

GGML_API bool ggml_backend_dev_supports_buft(ggml_backend_dev_t device, ggml_backend_buffer_type_t buft);

GGML_API bool ggml_backend_dev_offload_op(ggml_backend_dev_t device, const struct ggml_tensor *op);

GGML_API ggml_backend_event_t ggml_backend_event_new(ggml_backend_dev_t device);

GGML_API void ggml_backend_event_free(ggml_backend_event_t event);

GGML_API void ggml_backend_event_record(ggml_backend_event_t event, ggml_backend_t backend);

GGML_API void ggml_backend_event_synchronize(ggml_backend_event_t event);

GGML_API void ggml_backend_event_wait(ggml_backend_t backend, ggml_backend_event_t event);

GGML_API struct ggml_backend_graph_copy ggml_backend_graph_copy(ggml_backend_t backend, struct ggml_cgraph *graph);

GGML_API void ggml_backend_graph_copy_free(struct ggml_backend_graph_copy copy);

GGML_API bool ggml_backend_compare_graph_backend(ggml_backend_t backend1, ggml_backend_t backend2, struct ggml_cgraph *graph, ggml_backend_eval_callback callback, void *user_data, const struct ggml_tensor *const *test_nodes, size_t num_test_nodes);

GGML_API ggml_backend_dev_t ggml_backend_meta_device(ggml_backend_dev_t *devs, size_t n_devs, ggml_backend_meta_get_split_state_t get_split_state, void *get_split_state_ud);

GGML_API const char *ggml_backend_meta_split_axis_name(enum ggml_backend_meta_split_axis axis);

GGML_API const char *ggml_backend_reg_name(ggml_backend_reg_t reg);

GGML_API size_t ggml_backend_reg_dev_count(ggml_backend_reg_t reg);

GGML_API ggml_backend_dev_t ggml_backend_reg_dev_get(ggml_backend_reg_t reg, size_t index);

GGML_API void *ggml_backend_reg_get_proc_address(ggml_backend_reg_t reg, const char *name);

GGML_API void ggml_backend_register(ggml_backend_reg_t reg);

GGML_API void ggml_backend_device_register(ggml_backend_dev_t device);

GGML_API size_t ggml_backend_reg_count(void);

GGML_API ggml_backend_reg_t ggml_backend_reg_get(size_t index);

GGML_API ggml_backend_reg_t ggml_backend_reg_by_name(const char *name);

GGML_API size_t ggml_backend_dev_count(void);

GGML_API ggml_backend_dev_t ggml_backend_dev_get(size_t index);

GGML_API ggml_backend_dev_t ggml_backend_dev_by_name(const char *name);

GGML_API ggml_backend_dev_t ggml_backend_dev_by_type(enum ggml_backend_dev_type ty);

GGML_API ggml_backend_t ggml_backend_init_by_name(const char *name, const char *params);

GGML_API ggml_backend_t ggml_backend_init_by_type(enum ggml_backend_dev_type ty, const char *params);

GGML_API ggml_backend_t ggml_backend_init_best(void);

GGML_API ggml_backend_reg_t ggml_backend_load(const char *path);

GGML_API void ggml_backend_unload(ggml_backend_reg_t reg);

GGML_API void ggml_backend_load_all(void);

GGML_API void ggml_backend_load_all_from_path(const char *dir_path);

GGML_API ggml_backend_sched_t ggml_backend_sched_new(ggml_backend_t *backends, ggml_backend_buffer_type_t *bufts, int32_t n_backends, size_t graph_size, bool parallel, bool op_offload);

GGML_API void ggml_backend_sched_free(ggml_backend_sched_t sched);

GGML_API void ggml_backend_sched_reserve_size(ggml_backend_sched_t sched, struct ggml_cgraph *measure_graph, size_t *sizes);

GGML_API bool ggml_backend_sched_reserve(ggml_backend_sched_t sched, struct ggml_cgraph *measure_graph);

GGML_API int32_t ggml_backend_sched_get_n_backends(ggml_backend_sched_t sched);

GGML_API ggml_backend_t ggml_backend_sched_get_backend(ggml_backend_sched_t sched, int32_t i);

GGML_API int32_t ggml_backend_sched_get_n_splits(ggml_backend_sched_t sched);

GGML_API int32_t ggml_backend_sched_get_n_copies(ggml_backend_sched_t sched);

GGML_API ggml_backend_buffer_type_t ggml_backend_sched_get_buffer_type(ggml_backend_sched_t sched, ggml_backend_t backend);

GGML_API size_t ggml_backend_sched_get_buffer_size(ggml_backend_sched_t sched, ggml_backend_t backend);

GGML_API void ggml_backend_sched_set_tensor_backend(ggml_backend_sched_t sched, struct ggml_tensor *node, ggml_backend_t backend);

GGML_API ggml_backend_t ggml_backend_sched_get_tensor_backend(ggml_backend_sched_t sched, struct ggml_tensor *node);

GGML_API void ggml_backend_sched_split_graph(ggml_backend_sched_t sched, struct ggml_cgraph *graph);

GGML_API bool ggml_backend_sched_alloc_graph(ggml_backend_sched_t sched, struct ggml_cgraph *graph);

GGML_API enum ggml_status ggml_backend_sched_graph_compute(ggml_backend_sched_t sched, struct ggml_cgraph *graph);

GGML_API enum ggml_status ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph *graph);

GGML_API void ggml_backend_sched_synchronize(ggml_backend_sched_t sched);

GGML_API void ggml_backend_sched_reset(ggml_backend_sched_t sched);

GGML_API void ggml_backend_sched_set_eval_callback(ggml_backend_sched_t sched, ggml_backend_sched_eval_callback callback, void *user_data);

GGML_API void ggml_backend_tensor_set(struct ggml_tensor *tensor, const void *data, size_t offset, size_t size);

GGML_API void ggml_backend_tensor_get(const struct ggml_tensor *tensor, void *data, size_t offset, size_t size);

GGML_API void ggml_backend_tensor_set_2d(struct ggml_tensor *tensor, const void *data, size_t offset, size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);

GGML_API void ggml_backend_tensor_get_2d(const struct ggml_tensor *tensor, void *data, size_t offset, size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);

GGML_API void ggml_backend_tensor_memset(struct ggml_tensor *tensor, uint8_t value, size_t offset, size_t size);

GGML_API void ggml_backend_tensor_set_async(ggml_backend_t backend, struct ggml_tensor *tensor, const void *data, size_t offset, size_t size);

GGML_API void ggml_backend_tensor_get_async(ggml_backend_t backend, const struct ggml_tensor *tensor, void *data, size_t offset, size_t size);

GGML_API void ggml_backend_tensor_set_2d_async(ggml_backend_t backend, struct ggml_tensor *tensor, const void *data, size_t offset, size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);

GGML_API void ggml_backend_tensor_get_2d_async(ggml_backend_t backend, const struct ggml_tensor *tensor, void *data, size_t offset, size_t size, size_t n_copies, size_t stride_tensor, size_t stride_data);

GGML_API void ggml_backend_tensor_copy(const struct ggml_tensor *src, struct ggml_tensor *dst);

GGML_API void ggml_backend_tensor_copy_async(ggml_backend_t backend_src, ggml_backend_t backend_dst, const struct ggml_tensor *src, struct ggml_tensor *dst);

GGML_API enum ggml_status ggml_backend_tensor_alloc(ggml_backend_buffer_t buffer, struct ggml_tensor *tensor, void *addr);

GGML_API enum ggml_status ggml_backend_view_init(struct ggml_tensor *tensor);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus
