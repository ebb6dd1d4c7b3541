# The scheduler: the split-graph test over a test device + CPU (ours and upstream's), and libllama
# decoding random-weight models end to end — on the CPU, split over TESTGPU0 + CPU, and layers
# pipelined over TESTGPU0 + TESTGPU1 — compared with the same driver built against upstream's
# C++ ggml. Included from ctests/CMakeLists.txt.

# ctests/ for meta_split_state.h, doubles/ for test_device.h (the test devices TESTGPU0..3)
set(ref_private_includes "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/src" "${CMAKE_CURRENT_SOURCE_DIR}"
    "${CMAKE_CURRENT_SOURCE_DIR}/doubles")

add_executable(sched_split sched_split.c doubles/test_device.c)
target_include_directories(sched_split PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(sched_split PRIVATE ggml ggml-cpu m)
add_test(NAME sched/split_graph COMMAND sched_split)
add_test(NAME sched/split_graph_parallel COMMAND sched_split parallel)

set(model_src "${GGML_BACKEND_RS_ROOT}/tools/model")
add_executable(write_model "${model_src}/write_model.cpp")
target_link_libraries(write_model PRIVATE ggml)
add_executable(compare_logits "${model_src}/compare_logits.cpp")

add_executable(llama_driver "${model_src}/llama_driver.cpp" doubles/test_device.c)
target_compile_definitions(llama_driver PRIVATE LLAMA_DRIVER_TEST_DEVICE)
target_include_directories(llama_driver PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(llama_driver PRIVATE llama ggml ggml-cpu)

if(TARGET ggml_ref::ggml)
    add_executable(sched_split_ref sched_split.c doubles/test_device.c)
    target_include_directories(sched_split_ref PRIVATE ${ref_private_includes})
    target_link_libraries(sched_split_ref PRIVATE ggml_ref::ggml ggml_ref::ggml-base ggml_ref::ggml-cpu m)
    foreach(mode "" parallel)
        add_test(NAME differential/sched_split${mode}
            COMMAND "${CMAKE_COMMAND}" -D "OURS=$<TARGET_FILE:sched_split>" -D "REF=$<TARGET_FILE:sched_split_ref>"
                -D "ARGS=${mode}" -P "${CMAKE_CURRENT_SOURCE_DIR}/compare_stdout.cmake")
    endforeach()
endif()
if(TARGET ggml_ref::llama)
    add_executable(llama_driver_ref "${model_src}/llama_driver.cpp" doubles/test_device.c)
    target_compile_definitions(llama_driver_ref PRIVATE LLAMA_DRIVER_TEST_DEVICE)
    target_include_directories(llama_driver_ref PRIVATE ${ref_private_includes})
    target_link_libraries(llama_driver_ref PRIVATE ggml_ref::llama ggml_ref::ggml ggml_ref::ggml-base ggml_ref::ggml-cpu)
endif()

include("${CMAKE_CURRENT_LIST_DIR}/test_models.cmake")
set(model_dir "${CMAKE_CURRENT_BINARY_DIR}/models")
file(MAKE_DIRECTORY "${model_dir}")

set(run "${CMAKE_CURRENT_SOURCE_DIR}/llama_run.cmake")
foreach(entry IN LISTS GGML_BACKEND_RS_TEST_MODELS)
    ggml_backend_rs_test_model("${entry}" "${model_dir}" "" name gguf)

    set(cpu_args --model "${gguf}" --split-mode none --devices CPU --threads 2 --n-predict 12)
    set(tgpu_args --model "${gguf}" --test-device --devices TESTGPU0 --split-mode layer --threads 2 --n-predict 12)
    # Layers over two devices: libllama turns on pipeline parallelism (scheduler n_copies > 1,
    # events) because both devices report async compute and events.
    set(pipe_args --model "${gguf}" --test-device --devices TESTGPU0,TESTGPU1 --split-mode layer --threads 2 --n-predict 12)
    set(tests "")
    # The scheduler splitting libllama's graphs over test devices + CPU computes exactly what the
    # CPU alone computes (same kernels, same order of operations): bit-identical.
    foreach(cfg tgpu pipe)
        add_test(NAME e2e/${name}/${cfg}_vs_cpu COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${cpu_args}" -D "ARGS_B=${${cfg}_args}"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0 -D "WORK_DIR=${model_dir}/${name}-${cfg}" -P "${run}")
        list(APPEND tests e2e/${name}/${cfg}_vs_cpu)
    endforeach()
    if(TARGET llama_driver_ref)
        foreach(cfg cpu tgpu pipe)
            add_test(NAME differential/llama/${name}/${cfg} COMMAND "${CMAKE_COMMAND}"
                -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
                -D "ARGS_A=${${cfg}_args}" -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
                -D "WORK_DIR=${model_dir}/${name}-${cfg}-diff" -P "${run}")
            list(APPEND tests differential/llama/${name}/${cfg})
        endforeach()
    endif()
    set_tests_properties(${tests} PROPERTIES FIXTURES_REQUIRED model_${name})
endforeach()
