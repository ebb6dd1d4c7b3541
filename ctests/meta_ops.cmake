# The meta device (tensor parallelism) op by op: meta_ops.cpp builds small libllama-shaped graphs,
# computes them on one CPU backend and on a meta device over N simple devices (the scheduler over
# {meta, CPU}, as libllama), and compares. Included from ctests/CMakeLists.txt.
#
# This file is also the differential driver (script mode):
#   cmake -DOURS=<exe> -DREF=<exe> -DARGS=<a;b> -DWORK_DIR=<dir> -P meta_ops.cmake
# runs REF with ARGS --out ref.bin, then OURS with ARGS --out ours.bin --against ref.bin: OURS must
# pass its own reference check and match REF's outputs within each case's tolerance (bit for bit
# where the case is bit-exact). Says whether the two files are byte-identical.

if(CMAKE_SCRIPT_MODE_FILE)
    foreach(var OURS REF WORK_DIR)
        if(NOT DEFINED ${var})
            message(FATAL_ERROR "meta_ops.cmake: -D${var}=... is required")
        endif()
    endforeach()
    file(REMOVE_RECURSE "${WORK_DIR}")
    file(MAKE_DIRECTORY "${WORK_DIR}")
    execute_process(COMMAND "${REF}" ${ARGS} --out "${WORK_DIR}/ref.bin"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message("--- ref: ${REF} ${ARGS}\n${out}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "reference build failed (${rc})")
    endif()
    execute_process(COMMAND "${OURS}" ${ARGS} --out "${WORK_DIR}/ours.bin" --against "${WORK_DIR}/ref.bin"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message("--- ours: ${OURS} ${ARGS}\n${out}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "ours failed (${rc})")
    endif()
    execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${WORK_DIR}/ours.bin" "${WORK_DIR}/ref.bin"
        RESULT_VARIABLE differ)
    if(differ EQUAL 0)
        message("output files byte-identical")
    else()
        message("output files differ (within the stated tolerances)")
    endif()
    return()
endif()

add_executable(meta_ops meta_ops.cpp doubles/test_device.c)
target_include_directories(meta_ops PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}"
    "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(meta_ops PRIVATE ggml ggml-cpu)

# Every case over the CPU device repeated N times (uneven extents, zero-size slices for N = 3, 4),
# through the scheduler; once without the scheduler (meta backend's graph_compute on its own).
foreach(n 2 3 4)
    add_test(NAME meta/ops/n${n} COMMAND meta_ops all ${n} --simple cpu)
endforeach()
add_test(NAME meta/ops_direct/n3 COMMAND meta_ops all 3 --simple cpu --direct)
# A plan is kept for a graph with the same nodes only while the use counts it read hold: a view
# of a larger graph (ggml's recorded counts) in the same memory must not reuse it.
add_executable(meta_use_counts meta_use_counts.cpp)
target_include_directories(meta_use_counts PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}"
    "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/src") # ggml-impl.h: ggml_graph_view
target_link_libraries(meta_use_counts PRIVATE ggml ggml-cpu)
add_test(NAME meta/plan/use_counts_under_view COMMAND meta_use_counts)
# Over TESTGPU0,TESTGPU1 (non-host buffers; they refuse SOFT_MAX and GET_ROWS, so the scheduler
# runs those on the CPU backend and copies meta tensors out and back). In moe and moe_bias the
# copied-out tensor is libllama's expert-id view (argsort + view, not contiguous), which upstream's
# meta get_tensor refuses: those two run as their own test (the *_cont_ids cases are in `all`).
add_test(NAME meta/ops_tgpu/n2 COMMAND meta_ops all,-moe,-moe_bias 2 --simple tgpu)
add_test(NAME meta/ops_tgpu/moe_view_copy COMMAND meta_ops moe,moe_bias 2 --simple tgpu)

# Op/split combinations the meta backend does not support: each must stop through ggml_abort
# with its message (case|message; the prefix names the tensor and op).
set(meta_split_stop "meta backend: cannot split tensor 'node_[0-9]' \\([A-Z_]+\\) across devices: ")
set(meta_abort_cases
    "rms_norm_axis0|the op needs whole rows, but its source is split along dimension 0"
    "mul_mat_w0_segments_xm|no rule for a matmul of weight AXIS_0\\{32,32\\} in 2 segments with input MIRRORED"
    "add_split_repeated|cannot combine AXIS_0\\{48,48\\} with MIRRORED \\(a mirrored operand must be broadcast along the split dimension\\)"
    "soft_max_mask|cannot combine AXIS_1\\{2,2\\} with MIRRORED \\(a mirrored operand must be broadcast along the split dimension\\)")
foreach(entry IN LISTS meta_abort_cases)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 message)
    add_test(NAME meta/abort/${name}
        COMMAND "${CMAKE_COMMAND}" -D "EXE=$<TARGET_FILE:meta_ops>" -D "ARGS=abort_${name};2;--simple;cpu"
            -D "EXPECT=${meta_split_stop}${message}"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
endforeach()

# Differential: the same program against upstream's ggml (and upstream's meta backend), over the
# two test devices (upstream's meta cannot compute over CPU devices, see docs/meta-upstream.md).
if(TARGET ggml_ref::ggml)
    if(NOT DEFINED ref_private_includes)
        set(ref_private_includes "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/src" "${CMAKE_CURRENT_SOURCE_DIR}"
            "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
    endif()
    add_executable(meta_ops_ref meta_ops.cpp doubles/test_device.c)
    target_include_directories(meta_ops_ref PRIVATE ${ref_private_includes})
    target_link_libraries(meta_ops_ref PRIVATE ggml_ref::ggml ggml_ref::ggml-base ggml_ref::ggml-cpu)
    # (mul_mat_whole_input and add_whole_operand are ours only: upstream's meta backend stops
    # with "fatal error" in its matmul rule, ggml-backend-meta.cpp:557; so is
    # again_sum_read_on_cpu: upstream's get_tensor of a reduced sum stops with "fatal error",
    # ggml-backend-meta.cpp:1649.)
    add_test(NAME differential/meta_ops_tgpu
        COMMAND "${CMAKE_COMMAND}" -D "OURS=$<TARGET_FILE:meta_ops>" -D "REF=$<TARGET_FILE:meta_ops_ref>"
            -D "ARGS=all,-moe,-moe_bias,-mul_mat_whole_input,-add_whole_operand,-again_sum_read_on_cpu;2;--simple;tgpu" -D "WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/meta_ops_tgpu.out"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/meta_ops.cmake")
endif()
