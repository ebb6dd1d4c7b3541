// Prints the size, alignment and field offsets of every struct of ggml-backend.h,
// ggml-backend-impl.h and (ggml 0.9.11) ggml-ext.h, plus the ggml core structs the Rust crate
// mirrors, and the values of their enums and constants, one fact per line. Built twice, against
// our generated headers (EXPECT_OURS) and against upstream's; the ctest abi_layout requires the
// same output from both, and that the version's src/version/ggml_<version>/layout_check.rs
// asserts exactly these facts. Backend API version 3 is ggml 0.26.

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#if !GGML_BACKEND_RS_HAS_META_C_LINKAGE
#    include "ggml-ext.h" // the meta API, in ggml-backend.h since
#endif
#include "ggml-impl.h" // struct ggml_cgraph, struct ggml_hash_set, TENSOR_ALIGNMENT

#if defined(EXPECT_OURS) != defined(GGML_BACKEND_RS_HEADERS)
#    error "compiled against the wrong ggml-backend headers"
#endif

// ggml-impl.h's static helpers call ggml_abort; defining it here keeps the program free of
// any library (it only inspects types).
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "%s:%d: %s\n", file, line, fmt);
    abort();
}

#define STRUCT(S)                                                              \
    printf("sizeof(struct %s) = %zu\n", #S, sizeof(struct S));                 \
    printf("alignof(struct %s) = %zu\n", #S, (size_t) _Alignof(struct S))
#define FIELD(S, f) printf("offsetof(struct %s, %s) = %zu\n", #S, #f, offsetof(struct S, f))
#define ENUM(E) printf("sizeof(enum %s) = %zu\n", #E, sizeof(enum E))
#define ENUMERATOR(E, v) printf("enum %s %s = %lld\n", #E, #v, (long long) (enum E) v)
#define CONST(c) printf("const %s = %lld\n", #c, (long long) (c))

int main(void) {
    STRUCT(ggml_backend_buffer_type_i);
    FIELD(ggml_backend_buffer_type_i, get_name);
    FIELD(ggml_backend_buffer_type_i, alloc_buffer);
#if GGML_BACKEND_RS_HAS_LIST_ALLOC
    FIELD(ggml_backend_buffer_type_i, alloc_buffer_n);
#endif
    FIELD(ggml_backend_buffer_type_i, get_alignment);
    FIELD(ggml_backend_buffer_type_i, get_max_size);
    FIELD(ggml_backend_buffer_type_i, get_alloc_size);
#if GGML_BACKEND_RS_HAS_LIST_ALLOC
    FIELD(ggml_backend_buffer_type_i, get_alloc_size_n);
#endif
    FIELD(ggml_backend_buffer_type_i, is_host);

    STRUCT(ggml_backend_buffer_type);
    FIELD(ggml_backend_buffer_type, iface);
    FIELD(ggml_backend_buffer_type, device);
    FIELD(ggml_backend_buffer_type, context);

    STRUCT(ggml_backend_buffer_i);
    FIELD(ggml_backend_buffer_i, free_buffer);
    FIELD(ggml_backend_buffer_i, get_base);
    FIELD(ggml_backend_buffer_i, init_tensor);
    FIELD(ggml_backend_buffer_i, memset_tensor);
    FIELD(ggml_backend_buffer_i, set_tensor);
    FIELD(ggml_backend_buffer_i, get_tensor);
    FIELD(ggml_backend_buffer_i, set_tensor_2d);
    FIELD(ggml_backend_buffer_i, get_tensor_2d);
    FIELD(ggml_backend_buffer_i, cpy_tensor);
    FIELD(ggml_backend_buffer_i, clear);
    FIELD(ggml_backend_buffer_i, reset);

    STRUCT(ggml_backend_buffer);
    FIELD(ggml_backend_buffer, iface);
    FIELD(ggml_backend_buffer, buft);
    FIELD(ggml_backend_buffer, context);
    FIELD(ggml_backend_buffer, size);
    FIELD(ggml_backend_buffer, usage);

    STRUCT(ggml_backend_i);
    FIELD(ggml_backend_i, get_name);
    FIELD(ggml_backend_i, free);
    FIELD(ggml_backend_i, set_tensor_async);
    FIELD(ggml_backend_i, get_tensor_async);
    FIELD(ggml_backend_i, set_tensor_2d_async);
    FIELD(ggml_backend_i, get_tensor_2d_async);
    FIELD(ggml_backend_i, cpy_tensor_async);
    FIELD(ggml_backend_i, synchronize);
    FIELD(ggml_backend_i, graph_plan_create);
    FIELD(ggml_backend_i, graph_plan_free);
    FIELD(ggml_backend_i, graph_plan_update);
    FIELD(ggml_backend_i, graph_plan_compute);
    FIELD(ggml_backend_i, graph_compute);
    FIELD(ggml_backend_i, event_record);
    FIELD(ggml_backend_i, event_wait);
    FIELD(ggml_backend_i, graph_optimize);

    STRUCT(ggml_backend);
    FIELD(ggml_backend, guid);
    FIELD(ggml_backend, iface);
    FIELD(ggml_backend, device);
    FIELD(ggml_backend, context);

    STRUCT(ggml_backend_event);
    FIELD(ggml_backend_event, device);
    FIELD(ggml_backend_event, context);

    STRUCT(ggml_backend_device_i);
    FIELD(ggml_backend_device_i, get_name);
    FIELD(ggml_backend_device_i, get_description);
    FIELD(ggml_backend_device_i, get_memory);
    FIELD(ggml_backend_device_i, get_type);
    FIELD(ggml_backend_device_i, get_props);
    FIELD(ggml_backend_device_i, init_backend);
    FIELD(ggml_backend_device_i, get_buffer_type);
    FIELD(ggml_backend_device_i, get_host_buffer_type);
    FIELD(ggml_backend_device_i, buffer_from_host_ptr);
    FIELD(ggml_backend_device_i, supports_op);
    FIELD(ggml_backend_device_i, supports_buft);
    FIELD(ggml_backend_device_i, offload_op);
    FIELD(ggml_backend_device_i, event_new);
    FIELD(ggml_backend_device_i, event_free);
    FIELD(ggml_backend_device_i, event_synchronize);

    STRUCT(ggml_backend_device);
    FIELD(ggml_backend_device, iface);
    FIELD(ggml_backend_device, reg);
    FIELD(ggml_backend_device, context);

    STRUCT(ggml_backend_reg_i);
    FIELD(ggml_backend_reg_i, get_name);
    FIELD(ggml_backend_reg_i, get_device_count);
    FIELD(ggml_backend_reg_i, get_device);
    FIELD(ggml_backend_reg_i, get_proc_address);

    STRUCT(ggml_backend_reg);
    FIELD(ggml_backend_reg, api_version);
    FIELD(ggml_backend_reg, iface);
    FIELD(ggml_backend_reg, context);

    STRUCT(ggml_backend_dev_caps);
    FIELD(ggml_backend_dev_caps, async);
    FIELD(ggml_backend_dev_caps, host_buffer);
    FIELD(ggml_backend_dev_caps, buffer_from_host_ptr);
    FIELD(ggml_backend_dev_caps, events);
#if GGML_BACKEND_RS_HAS_MMAP_CAPS
    FIELD(ggml_backend_dev_caps, mmap_support);
#endif

    STRUCT(ggml_backend_dev_props);
    FIELD(ggml_backend_dev_props, name);
    FIELD(ggml_backend_dev_props, description);
    FIELD(ggml_backend_dev_props, memory_free);
    FIELD(ggml_backend_dev_props, memory_total);
    FIELD(ggml_backend_dev_props, type);
    FIELD(ggml_backend_dev_props, device_id);
    FIELD(ggml_backend_dev_props, caps);

    STRUCT(ggml_backend_feature);
    FIELD(ggml_backend_feature, name);
    FIELD(ggml_backend_feature, value);

    STRUCT(ggml_backend_graph_copy);
    FIELD(ggml_backend_graph_copy, buffer);
    FIELD(ggml_backend_graph_copy, ctx_allocated);
    FIELD(ggml_backend_graph_copy, ctx_unallocated);
    FIELD(ggml_backend_graph_copy, graph);

    STRUCT(ggml_backend_meta_split_state);
    FIELD(ggml_backend_meta_split_state, axis);
    FIELD(ggml_backend_meta_split_state, ne);
#if GGML_BACKEND_RS_HAS_SPLIT_NR
    FIELD(ggml_backend_meta_split_state, nr);
#endif
    FIELD(ggml_backend_meta_split_state, n_segments);

    // ggml core layouts the Rust crate mirrors (src/abi/ggml.rs).
    STRUCT(ggml_tensor);
    FIELD(ggml_tensor, type);
    FIELD(ggml_tensor, buffer);
    FIELD(ggml_tensor, ne);
    FIELD(ggml_tensor, nb);
    FIELD(ggml_tensor, op);
    FIELD(ggml_tensor, op_params);
    FIELD(ggml_tensor, flags);
    FIELD(ggml_tensor, src);
    FIELD(ggml_tensor, view_src);
    FIELD(ggml_tensor, view_offs);
    FIELD(ggml_tensor, data);
    FIELD(ggml_tensor, name);
    FIELD(ggml_tensor, extra);
    FIELD(ggml_tensor, padding);

    STRUCT(ggml_hash_set);
    FIELD(ggml_hash_set, size);
    FIELD(ggml_hash_set, used);
    FIELD(ggml_hash_set, keys);

    STRUCT(ggml_cgraph);
    FIELD(ggml_cgraph, size);
    FIELD(ggml_cgraph, n_nodes);
    FIELD(ggml_cgraph, n_leafs);
    FIELD(ggml_cgraph, nodes);
    FIELD(ggml_cgraph, grads);
    FIELD(ggml_cgraph, grad_accs);
    FIELD(ggml_cgraph, leafs);
    FIELD(ggml_cgraph, use_counts);
    FIELD(ggml_cgraph, visited_hash_set);
    FIELD(ggml_cgraph, order);
#if GGML_BACKEND_RS_HAS_CGRAPH_UID
    FIELD(ggml_cgraph, uid);
#endif
#if GGML_BACKEND_RS_HAS_GRAPH_OPTIMIZE_PARAMS
    STRUCT(ggml_backend_graph_optimize_params);
    FIELD(ggml_backend_graph_optimize_params, add_alloc_dep);
    FIELD(ggml_backend_graph_optimize_params, user_data);
#endif

    STRUCT(ggml_init_params);
    FIELD(ggml_init_params, mem_size);
    FIELD(ggml_init_params, mem_buffer);
    FIELD(ggml_init_params, no_alloc);

    ENUM(ggml_backend_buffer_usage);
    ENUMERATOR(ggml_backend_buffer_usage, GGML_BACKEND_BUFFER_USAGE_ANY);
    ENUMERATOR(ggml_backend_buffer_usage, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ENUMERATOR(ggml_backend_buffer_usage, GGML_BACKEND_BUFFER_USAGE_COMPUTE);

    ENUM(ggml_backend_dev_type);
    ENUMERATOR(ggml_backend_dev_type, GGML_BACKEND_DEVICE_TYPE_CPU);
    ENUMERATOR(ggml_backend_dev_type, GGML_BACKEND_DEVICE_TYPE_GPU);
    ENUMERATOR(ggml_backend_dev_type, GGML_BACKEND_DEVICE_TYPE_IGPU);
    ENUMERATOR(ggml_backend_dev_type, GGML_BACKEND_DEVICE_TYPE_ACCEL);
    ENUMERATOR(ggml_backend_dev_type, GGML_BACKEND_DEVICE_TYPE_META);

    ENUM(ggml_backend_meta_split_axis);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_0);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_1);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_2);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_3);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_MIRRORED);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_PARTIAL);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_NONE);
    ENUMERATOR(ggml_backend_meta_split_axis, GGML_BACKEND_SPLIT_AXIS_UNKNOWN);

    CONST(GGML_BACKEND_API_VERSION);
    CONST(GGML_BACKEND_META_MAX_DEVICES);

    // ggml core constants and enum values the Rust crate mirrors as integers.
    CONST(GGML_MAX_DIMS);
    CONST(GGML_MAX_SRC);
    CONST(GGML_MAX_OP_PARAMS);
    CONST(GGML_MAX_NAME);
    CONST(TENSOR_ALIGNMENT);
    CONST(GGML_STATUS_ALLOC_FAILED);
    CONST(GGML_STATUS_FAILED);
    CONST(GGML_STATUS_SUCCESS);
    CONST(GGML_STATUS_ABORTED);
    CONST(GGML_LOG_LEVEL_DEBUG);
    CONST(GGML_LOG_LEVEL_INFO);
    CONST(GGML_LOG_LEVEL_WARN);
    CONST(GGML_LOG_LEVEL_ERROR);
    CONST(GGML_OP_RESHAPE);
    CONST(GGML_OP_VIEW);
    CONST(GGML_OP_PERMUTE);
    CONST(GGML_OP_TRANSPOSE);
    CONST(GGML_OP_NONE);
    CONST(GGML_OP_MUL_MAT_ID);
    CONST(GGML_OP_ROPE);
    CONST(GGML_OP_COUNT);
    CONST(GGML_TENSOR_FLAG_INPUT);
    CONST(GGML_TENSOR_FLAG_OUTPUT);
    CONST(GGML_TENSOR_FLAG_COMPUTE);
    return 0;
}
