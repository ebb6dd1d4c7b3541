# Behaviour tests of the C API (ctests/backend_api.c), run against this build and, where the
# reference build exists, against upstream's C++ ggml-backend: same program, same expectations.
# Included from ctests/CMakeLists.txt.

# Test plugins: one to load by path, scored variants for the search, and rejected libraries.
set(plugin_dir   "${CMAKE_CURRENT_BINARY_DIR}/plugins")
set(variants_dir "${CMAKE_CURRENT_BINARY_DIR}/plugin-variants")
set(rejects_dir  "${CMAKE_CURRENT_BINARY_DIR}/plugin-rejects")

function(ggml_backend_rs_test_plugin target dir file_name)
    add_library(${target} MODULE test_plugin.c)
    target_include_directories(${target} PRIVATE ${GGML_BACKEND_RS_API_INCLUDES})
    target_compile_definitions(${target} PRIVATE ${ARGN})
    set_target_properties(${target} PROPERTIES
        LIBRARY_OUTPUT_DIRECTORY "${dir}" PREFIX "" SUFFIX "" OUTPUT_NAME "${file_name}")
endfunction()

ggml_backend_rs_test_plugin(test_plugin_main "${plugin_dir}" "libtest-plugin.so"
    TEST_PLUGIN_NAME="TESTPLUGIN")
ggml_backend_rs_test_plugin(test_plugin_low "${variants_dir}" "libggml-blas-low.so"
    TEST_PLUGIN_NAME="BLAS_LOW" TEST_PLUGIN_SCORE=5)
ggml_backend_rs_test_plugin(test_plugin_high "${variants_dir}" "libggml-blas-high.so"
    TEST_PLUGIN_NAME="BLAS_HIGH" TEST_PLUGIN_SCORE=10)
ggml_backend_rs_test_plugin(test_plugin_zero "${variants_dir}" "libggml-blas-zero.so"
    TEST_PLUGIN_NAME="BLAS_ZERO" TEST_PLUGIN_SCORE=0)
ggml_backend_rs_test_plugin(test_plugin_score0 "${rejects_dir}" "libscore-zero.so"
    TEST_PLUGIN_SCORE=0)
ggml_backend_rs_test_plugin(test_plugin_old_api "${rejects_dir}" "libold-api.so"
    TEST_PLUGIN_API_VERSION=1)
add_library(test_not_a_backend MODULE not_a_backend.c)
set_target_properties(test_not_a_backend PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY "${rejects_dir}" PREFIX "" SUFFIX "" OUTPUT_NAME "libno-init.so")
file(MAKE_DIRECTORY "${rejects_dir}")
file(WRITE "${rejects_dir}/not-a-library.so" "this is a text file, not a shared library\n")

set(plugin_targets test_plugin_main test_plugin_low test_plugin_high test_plugin_zero
    test_plugin_score0 test_plugin_old_api test_not_a_backend)

set(api_cases buffer_type buffer tensor_data tensor_copy backend events devices registry graph_copy
    device_transfers)

function(ggml_backend_rs_api_tests exe prefix)
    add_dependencies(${exe} ${plugin_targets})
    foreach(case IN LISTS api_cases)
        add_test(NAME ${prefix}/${case} COMMAND ${exe} ${case})
    endforeach()
    add_test(NAME ${prefix}/plugin COMMAND ${exe} plugin "${plugin_dir}/libtest-plugin.so" "${variants_dir}")
    add_test(NAME ${prefix}/plugin_rejects COMMAND ${exe} plugin_rejects "${rejects_dir}")
    set_tests_properties(${prefix}/plugin_rejects PROPERTIES
        PASS_REGULAR_EXPRESSION "plugin_rejects: ok")
endfunction()

add_executable(backend_api backend_api.c doubles/test_device.c)
target_include_directories(backend_api PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(backend_api PRIVATE ggml ggml-cpu m)
ggml_backend_rs_api_tests(backend_api api)

if(TARGET ggml_ref::ggml)
    add_executable(backend_api_ref backend_api.c doubles/test_device.c)
    target_include_directories(backend_api_ref PRIVATE "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/src" "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
    target_link_libraries(backend_api_ref PRIVATE ggml_ref::ggml ggml_ref::ggml-base ggml_ref::ggml-cpu m)
    ggml_backend_rs_api_tests(backend_api_ref api_upstream)
endif()

# Bad input: each case must stop through ggml's abort (SIGABRT) with a message naming the
# problem; expect_abort.cmake checks both (a crash would also exit non-zero). Not run against
# upstream, which crashes on several of them.
set(bad_cases
    "bad_set_out_of_bounds|ggml_backend_tensor_set: access out of bounds"
    "bad_get_offset_overflow|ggml_backend_tensor_get: access out of bounds"
    "bad_set_2d_out_of_bounds|ggml_backend_tensor_set_2d: access out of bounds"
    "bad_get_2d_stride_overflow|ggml_backend_tensor_get_2d: access out of bounds"
    "bad_memset_out_of_bounds|ggml_backend_tensor_memset: access out of bounds"
    "bad_set_async_out_of_bounds|ggml_backend_tensor_set_async: access out of bounds"
    "bad_set_unallocated|ggml_backend_tensor_set: tensor '.*' buffer not set"
    "bad_copy_layouts|ggml_backend_tensor_copy: cannot copy tensors with different layouts"
    "bad_buffer_copy_too_small|ggml_backend_buffer_copy_tensor: 'src8' \\(32 bytes\\) does not fit in 'dst4' \\(16 bytes\\)"
    "bad_null_buft|ggml_backend_buft_name: argument `buft` is NULL"
    "bad_null_buffer|ggml_backend_buffer_get_size: argument `buffer` is NULL"
    "bad_null_tensor|ggml_backend_tensor_set: argument `tensor` is NULL"
    "bad_dev_index|ggml_backend_dev_get: index [0-9]+ out of range"
    "bad_reg_index|ggml_backend_reg_get: index 1000 out of range"
    "bad_sched_reentry|ggml_backend_sched_get_n_splits: called from the scheduler's eval callback, which cannot use the scheduler until ggml_backend_sched_graph_compute returns"
    "bad_tensor_alloc_outside|ggml_backend_tensor_alloc: tensor '.*' \\(256 bytes at offset 0\\) does not fit")
foreach(entry IN LISTS bad_cases)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 case)
    list(GET parts 1 message)
    add_test(NAME bad_input/${case}
        COMMAND "${CMAKE_COMMAND}" -D "EXE=$<TARGET_FILE:backend_api>" -D "ARGS=${case}"
            -D "EXPECT=${message}" -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
endforeach()
