# ggml's own op tests over the tensor-parallel devices: upstream's test-backend-ops, from the
# trees that ship it (llama-cpp-python's; the crates.io trees strip tests/), each device against
# the host's CPU backend, one test an op. Every case the device claims to support must pass in
# mode `test` ("FAIL" anywhere fails the test). Included from ctests/CMakeLists.txt after
# plugin.cmake (`plugin_env`) and meta_e2e.cmake (`model_dir`).
#
#   plugin/backend_ops/<OP>   the program built against the pristine host, -b TP0 over
#                             TP(CPU,CPU): the plugin's name policy mirrors the test's tensors
#   meta/backend_ops/<OP>     the program built against this build, -b Meta(CPU,CPU): the
#                             linked meta device from meta_harness.c's module, whose callback
#                             splits every tensor it can (the outermost axis that has a unit
#                             per device); the meta device keeps the splits its ops can be
#                             derived over and places the rest whole
#
# The ops are the ones libllama's graphs use; FLASH_ATTN_EXT runs its cases of head size 128
# and one query, and MUL_MAT_ID those of f32, f16 and Q4_0 experts (their whole sets take longer
# than CI has), the rest all their cases. The whole list by hand: docs/testing.md.

set(backend_ops_src "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/tests/test-backend-ops.cpp")
if(NOT EXISTS "${backend_ops_src}")
    return()
endif()

set(backend_ops ADD MUL CONT GET_ROWS RMS_NORM NORM ROPE MUL_MAT MUL_MAT_ID SILU GELU CONCAT
    SCALE CPY SOFT_MAX SET_ROWS SWIGLU GEGLU ADD_ID ARGSORT ARANGE FLASH_ATTN_EXT)

# add_backend_ops_tests(<prefix> <program> <device> <env>)
function(add_backend_ops_tests prefix program device env)
    foreach(op IN LISTS backend_ops)
        set(filter -o ${op})
        if(op STREQUAL "FLASH_ATTN_EXT")
            set(filter -o ${op} -p "hsk=128,hsv=128,.*nb=1,")
        elseif(op STREQUAL "MUL_MAT_ID")
            set(filter -o ${op} -p "type_a=(f32|f16|q4_0),type_b=f32,")
        endif()
        string(REGEX REPLACE "([()])" "\\\\\\1" device_re "${device}")
        add_test(NAME ${prefix}/backend_ops/${op} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER=$<TARGET_FILE:${program}>" -D "ARGS=test;-b;${device};${filter}"
            -D EXPECT_RC=0 -D "ENV=${env}"
            "-DEXPECT=Backend [0-9]+/[0-9]+: ${device_re};  [1-9][0-9]*/[0-9]+ tests passed"
            -D "REJECT=FAIL" -D "WORK_DIR=${model_dir}/backend-ops"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
    endforeach()
endfunction()

if(TARGET ggml-backend-rs-tp AND TARGET llama_driver_ref)
    add_executable(test_backend_ops_ref "${backend_ops_src}")
    target_link_libraries(test_backend_ops_ref PRIVATE ggml_ref::ggml ggml_ref::ggml-base Threads::Threads)
    target_compile_features(test_backend_ops_ref PRIVATE cxx_std_17)
    add_dependencies(test_backend_ops_ref ggml-backend-rs-tp)
    add_backend_ops_tests(plugin test_backend_ops_ref TP0 "${plugin_env};GGML_BACKEND_RS_TP=CPU,CPU")
endif()

if(BUILD_SHARED_LIBS AND NOT GGML_BACKEND_DL)
    add_executable(test_backend_ops "${backend_ops_src}")
    target_link_libraries(test_backend_ops PRIVATE ggml ggml-base Threads::Threads)
    target_compile_features(test_backend_ops PRIVATE cxx_std_17)
    add_library(meta_harness MODULE meta_harness.c)
    target_include_directories(meta_harness PRIVATE ${GGML_BACKEND_RS_API_INCLUDES})
    target_link_libraries(meta_harness PRIVATE ggml ggml-cpu)
    add_dependencies(test_backend_ops meta_harness)
    add_backend_ops_tests(meta test_backend_ops "Meta(CPU,CPU)"
        "GGML_BACKEND_PATH=$<TARGET_FILE:meta_harness>")
endif()
