# The scheduler: the split-graph test over a test device + CPU (ours and upstream's), and libllama
# decoding random-weight models end to end — on the CPU, split over TESTGPU0 + CPU, and layers
# pipelined over TESTGPU0 + TESTGPU1 — compared with the same driver built against upstream's
# C++ ggml (the suites sched and sched-upstream of ctests/matrix/tests.txt). Included from
# ctests/CMakeLists.txt after matrix.cmake; defines `model_dir` and `run` for the files after it.

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

set(model_dir "${CMAKE_CURRENT_BINARY_DIR}/models")
file(MAKE_DIRECTORY "${model_dir}")
set(run "${CMAKE_CURRENT_SOURCE_DIR}/llama_run.cmake")

# The scheduler end to end (suites sched and sched-upstream of ctests/matrix/tests.txt): run B of
# the configuration against run A (one CPU), and against upstream's driver on the same run B.
ctests_matrix(sched sched_tests)
if(TARGET llama_driver_ref)
    ctests_matrix(sched-upstream sched_upstream_tests)
endif()
foreach(entry IN LISTS sched_tests)
    ctests_fields("${entry}" model cfg tol)
    ctests_config(sched ${cfg})
    set(gguf --model "${model_dir}/${model}.gguf" --threads ${ctests_threads})
    set(test e2e/${model}/${cfg}_vs_cpu)
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${gguf};${run_a}" -D "ARGS_B=${gguf};${run_b}"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}" -D "WORK_DIR=${model_dir}/${model}-${cfg}"
        -P "${run}")
    ctests_use_model(${model} ${test})
endforeach()
foreach(entry IN LISTS sched_upstream_tests)
    ctests_fields("${entry}" model cfg tol)
    ctests_config(sched ${cfg})
    set(test differential/llama/${model}/${cfg})
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
        -D "ARGS_A=--model;${model_dir}/${model}.gguf;--threads;${ctests_threads};${run_b}" -D "COMPARE=$<TARGET_FILE:compare_logits>"
        -D "TOL=${tol}" -D "WORK_DIR=${model_dir}/${model}-${cfg}-diff" -P "${run}")
    ctests_use_model(${model} ${test})
endforeach()
