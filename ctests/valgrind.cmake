# Memory checks under valgrind's memcheck (VALGRIND: the program). Included from
# ctests/CMakeLists.txt in shared trees. The build is not native
# (GGML_NATIVE=OFF), so valgrind emulates every instruction the CPU backend uses.
#
#   valgrind/api/<case>           the API behaviour program, each family (backend_api.c)
#   valgrind/meta_api/<case>      the meta API program's cases (meta_api.cpp)
#   valgrind/meta_ops/n3          every op-level meta case over 3 CPU devices (meta_ops.cpp)
#   valgrind/llama/{cpu2,tgpu2}   a tensor-mode decode of tiny-gqa-f32 over CPU x2 and over the
#                                 test devices TESTGPU0,TESTGPU1 (llama_driver)
#   valgrind/llama/tgpu2_no_fa    the same over test devices without flash attention (views
#                                 gathered, whole results sliced per device)
#   valgrind/llama/qwen35_cpu2    Qwen3.5 over CPU x2 (gated delta net split by heads)
#   valgrind/plugin/cpu2          the same decode by upstream's program through the plugin
#
# Passes with no memcheck error (invalid reads and writes, uses of uninitialised values, bad
# frees) and no block definitely lost. Still-reachable memory (process-lifetime registries,
# devices, thread pools) and "possibly lost" blocks (interior pointers to leaked, process-lifetime
# meta devices) are not errors.

if(CMAKE_SCRIPT_MODE_FILE)
    # cmake -DVALGRIND=<valgrind> -DEXE=<program> -DARGS=<a;b> -P valgrind.cmake
    include("${CMAKE_CURRENT_LIST_DIR}/valgrind_memcheck.cmake")
    set(ENV{GGML_NO_BACKTRACE} 1)
    execute_process(COMMAND "${VALGRIND}" ${valgrind_memcheck_options} "${EXE}" ${ARGS}
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message("${out}${err}")
    if(NOT rc STREQUAL "0")
        message(FATAL_ERROR "valgrind: the program failed or memcheck found errors (${rc})")
    endif()
    valgrind_memcheck_verdict("${err}")
    return()
endif()

function(ggml_backend_rs_valgrind name exe)
    add_test(NAME valgrind/${name} COMMAND "${CMAKE_COMMAND}" -D "VALGRIND=${VALGRIND}"
        -D "EXE=${exe}" -D "ARGS=${ARGN}" -P "${CMAKE_CURRENT_SOURCE_DIR}/valgrind.cmake")
    set_tests_properties(valgrind/${name} PROPERTIES TIMEOUT 600)
endfunction()

foreach(case IN LISTS api_cases)
    ggml_backend_rs_valgrind(api/${case} "$<TARGET_FILE:backend_api>" ${case})
endforeach()
foreach(case device backend set_get partial memset copies copies_zero_slice async compute_split)
    ggml_backend_rs_valgrind(meta_api/${case} "$<TARGET_FILE:meta_api>" ${case})
endforeach()
ggml_backend_rs_valgrind(meta_ops/n3 "$<TARGET_FILE:meta_ops>" all 3 --simple cpu)

set(vg_model "${model_dir}/tiny-gqa-f32.gguf")
set(vg_decode --model "${vg_model}" --flash-attn on --threads ${ctests_threads} --n-predict 4
    --split-mode tensor)
ggml_backend_rs_valgrind(llama/cpu2 "$<TARGET_FILE:llama_driver>" ${vg_decode} --devices CPU,CPU)
ggml_backend_rs_valgrind(llama/tgpu2 "$<TARGET_FILE:llama_driver>" ${vg_decode} --test-device
    --devices TESTGPU0,TESTGPU1)
ggml_backend_rs_valgrind(llama/tgpu2_no_fa "$<TARGET_FILE:llama_driver>" ${vg_decode} --test-device
    --devices TESTGPU0,TESTGPU1)
set_tests_properties(valgrind/llama/tgpu2_no_fa PROPERTIES ENVIRONMENT
    "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1;GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN=1")
# the test devices' own AllReduce (0.26: a communicator, freed with the meta backend)
ggml_backend_rs_valgrind(llama/tgpu2_allreduce "$<TARGET_FILE:llama_driver>" ${vg_decode} --test-device
    --devices TESTGPU0,TESTGPU1)
set_tests_properties(valgrind/llama/tgpu2_allreduce PROPERTIES ENVIRONMENT
    "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1;GGML_BACKEND_RS_TESTGPU_ALLREDUCE=1")
ggml_backend_rs_valgrind(llama/qwen35_cpu2 "$<TARGET_FILE:llama_driver>" --model
    "${model_dir}/qwen35-f32.gguf" --flash-attn on --threads ${ctests_threads} --n-predict 4
    --split-mode tensor --devices CPU,CPU)
ctests_use_model(qwen35-f32 valgrind/llama/qwen35_cpu2)
set(vg_tests valgrind/llama/cpu2 valgrind/llama/tgpu2 valgrind/llama/tgpu2_no_fa
    valgrind/llama/tgpu2_allreduce)
if(TARGET ggml-backend-rs-tp AND TARGET llama_driver_ref)
    ggml_backend_rs_valgrind(plugin/cpu2 "$<TARGET_FILE:llama_driver_ref>" --model "${vg_model}"
        --threads ${ctests_threads} --n-predict 4 --load-all-backends --devices TP0)
    set_tests_properties(valgrind/plugin/cpu2 PROPERTIES ENVIRONMENT
        "GGML_BACKEND_PATH=$<TARGET_FILE:ggml-backend-rs-tp>;GGML_BACKEND_RS_TP=CPU,CPU")
    list(APPEND vg_tests valgrind/plugin/cpu2)
endif()
ctests_use_model(tiny-gqa-f32 ${vg_tests})
