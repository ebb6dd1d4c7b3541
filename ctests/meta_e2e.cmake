# Tensor parallelism end to end: libllama with --split-mode tensor (the meta device) decodes the
# random-weight models and must produce the greedy tokens of one plain CPU, with logits within a
# measured tolerance. Included from ctests/CMakeLists.txt after sched_llama.cmake (its `model_dir`,
# `run` and the llama_driver / llama_driver_ref / compare_logits targets).
#
# The models, configurations and tolerances are data (ctests/matrix/, read by matrix.cmake): the
# suites meta, meta-upstream, steps, allreduce, allreduce-upstream, kvq, kvq-upstream and refused
# of tests.txt. Here, besides them:
#   meta/e2e/fa_off_fails                 tensor mode with --flash-attn off: libllama refuses the
#                                         context; both builds exit 1 with its message, no signal
#   meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu  the scheduler puts attention on the CPU
#   meta/threads/*, meta/long/*           two contexts at once; 10 000 tokens (llama_threads.cpp)
#   differential/llama/qwen35-f32/cpu     Qwen3.5 on one CPU, this build vs upstream's
#   meta/fusion/<model>/cpu2_host_vs_copies  the host AllReduce taking over the nodes behind its
#                                         cuts gives the copies path's bits (those nodes in the
#                                         graph), and its plan says which cuts took them
#   meta/fusion/<model>/tgpu2_staged_vs_copies  the same for the staged path over test devices
#   meta/fusion/tiny-gqa-f32/tgpu2_no_peer_copy_staged  test devices that decline copies between
#                                         each other: the staged path chosen unasked, and said

if(CMAKE_SCRIPT_MODE_FILE)
    # cmake -DEXES=<exe;exe> -DARGS=<a;b> -DEXPECT=<regex> -P meta_e2e.cmake
    # Each program must fail cleanly: exit status 1 (not a signal, not ggml's abort) with output
    # matching EXPECT.
    foreach(var EXES EXPECT)
        if(NOT DEFINED ${var})
            message(FATAL_ERROR "meta_e2e.cmake: -D${var}=... is required")
        endif()
    endforeach()
    set(ENV{GGML_NO_BACKTRACE} 1)
    foreach(exe IN LISTS EXES)
        execute_process(COMMAND "${exe}" ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
        message("--- ${exe} ${ARGS}\n${out}${err}")
        if(NOT rc STREQUAL "1")
            message(FATAL_ERROR "expected exit status 1, got: ${rc}")
        endif()
        if(NOT "${out}${err}" MATCHES "${EXPECT}")
            message(FATAL_ERROR "exit status 1, but the output does not match: ${EXPECT}")
        endif()
    endforeach()
    message("failed cleanly as expected")
    return()
endif()

# The arguments every run of these suites starts with (then the configuration's, configs.txt).
set(meta_common --flash-attn on --threads ${ctests_threads} --n-predict 12)
set(meta_e2e_script "${CMAKE_CURRENT_LIST_FILE}")

# meta_test(<test> <work> <model> <tol> <env> <expect> A <args of run A> B <args of run B>):
# llama_run.cmake runs llama_driver with A and with B (each after --model and meta_common) and
# compares them within <tol>; with `driver_b` set, B's arguments in this build and in <driver_b>
# (upstream's). <expect>, when not empty: a regex the output of run B (with driver_b: of both)
# must match. <env>: the test's ENVIRONMENT (duplicates dropped).
function(meta_test test work model tol env expect)
    cmake_parse_arguments(PARSE_ARGV 6 arg "" "" "A;B")
    set(args_a --model "${model_dir}/${model}.gguf" ${meta_common} ${arg_A})
    set(args_b --model "${model_dir}/${model}.gguf" ${meta_common} ${arg_B})
    set(expect_a "")
    set(expect_b "")
    if(expect)
        set(expect_a -D "EXPECT_A=${expect}")
        set(expect_b -D "EXPECT_B=${expect}")
    endif()
    if(driver_b)
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=${driver_b}" -D "ARGS_A=${args_b}"
            ${expect_a} ${expect_b} -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
            -D "WORK_DIR=${model_dir}/${work}" -P "${run}")
    else()
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${args_a}" -D "ARGS_B=${args_b}"
            ${expect_b} -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
            -D "WORK_DIR=${model_dir}/${work}" -P "${run}")
    endif()
    list(FILTER env EXCLUDE REGEX "^$")
    list(REMOVE_DUPLICATES env)
    if(env)
        set_tests_properties(${test} PROPERTIES ENVIRONMENT "${env}")
    endif()
    ctests_use_model(${model} ${test})
endfunction()

# meta, allreduce: run B against run A (one CPU) in this build; meta-upstream,
# allreduce-upstream: run B in this build against run B in upstream's (its meta backend).
foreach(suite meta allreduce)
    set(name meta/e2e)
    set(diff_name differential/meta)
    set(work meta)
    if(suite STREQUAL "allreduce")
        set(name meta/allreduce)
        set(diff_name differential/meta/allreduce)
        set(work meta-allreduce)
    endif()
    ctests_matrix(${suite} tests)
    foreach(entry IN LISTS tests)
        ctests_fields("${entry}" model cfg tol env expect)
        ctests_config(${suite} ${cfg})
        separate_arguments(env UNIX_COMMAND "${env}")
        meta_test(${name}/${model}/${cfg}_vs_cpu ${work}-${model}-${cfg} ${model} ${tol}
            "${run_env};${env}" "${expect}" A ${run_a} B ${run_b})
    endforeach()
    if(TARGET llama_driver_ref)
        set(driver_b "$<TARGET_FILE:llama_driver_ref>")
        ctests_matrix(${suite}-upstream tests)
        foreach(entry IN LISTS tests)
            ctests_fields("${entry}" model cfg tol env expect)
            ctests_config(${suite} ${cfg})
            separate_arguments(env UNIX_COMMAND "${env}")
            meta_test(${diff_name}/${model}/${cfg} ${work}-${model}-${cfg}-diff ${model} ${tol}
                "${run_env};${env}" "${expect}" B ${run_b})
        endforeach()
        unset(driver_b)
    endif()
endforeach()

# kvq, kvq-upstream: each "configuration" is a pair of cache types <type_k>/<type_v>, run in the
# meta configurations cpu2 and tgpu2 against one CPU with the same types (kvq), and in tgpu2
# against upstream's meta backend (kvq-upstream).
foreach(suite kvq kvq-upstream)
    if(suite STREQUAL "kvq-upstream" AND NOT TARGET llama_driver_ref)
        continue()
    endif()
    ctests_matrix(${suite} tests)
    foreach(entry IN LISTS tests)
        ctests_fields("${entry}" model types tol env)
        string(REPLACE "/" ";" types "${types}")
        list(GET types 0 type_k)
        list(GET types 1 type_v)
        separate_arguments(env UNIX_COMMAND "${env}")
        set(cache --cache-type-k ${type_k} --cache-type-v ${type_v})
        set(kv k_${type_k}_v_${type_v})
        if(suite STREQUAL "kvq")
            foreach(cfg cpu2 tgpu2)
                ctests_config(meta ${cfg})
                meta_test(meta/e2e/${model}/${kv}/${cfg}_vs_cpu meta-kvq-${type_k}-${type_v}-${cfg}
                    ${model} ${tol} "${run_env};${env}" "" A ${cache} ${run_a} B ${cache} ${run_b})
            endforeach()
        else()
            ctests_config(meta tgpu2)
            set(driver_b "$<TARGET_FILE:llama_driver_ref>")
            meta_test(differential/meta/${model}/${kv}/tgpu2 meta-kvq-${type_k}-${type_v}-diff
                ${model} ${tol} "${run_env};${env}" "" B ${cache} ${run_b})
            unset(driver_b)
        endif()
    endforeach()
endforeach()

# steps: run B's decode steps (meta_steps.cmake). N_DEV: the devices of --devices; COPIES: the
# direct AllReduce reads the partials in place (none), the copies AllReduce copies them (some).
ctests_matrix(steps tests)
foreach(entry IN LISTS tests)
    ctests_fields("${entry}" model cfg)
    ctests_config(steps ${cfg})
    list(FIND run_b --devices at)
    math(EXPR at "${at} + 1")
    list(GET run_b ${at} devices)
    string(REPLACE "," ";" devices "${devices}")
    list(LENGTH devices n_dev)
    set(copies some)
    if("GGML_META_ALLREDUCE=direct" IN_LIST run_env)
        set(copies none)
    endif()
    set(test meta/steps/${model}/${cfg})
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}" -D "DRIVER=$<TARGET_FILE:llama_driver>"
        -D "ARGS=--model;${model_dir}/${model}.gguf;${meta_common};${run_b}" -D "N_DEV=${n_dev}"
        -D N_PREDICT=12 -D COPIES=${copies} -P "${CMAKE_CURRENT_SOURCE_DIR}/meta_steps.cmake")
    if(run_env)
        set_tests_properties(${test} PROPERTIES ENVIRONMENT "${run_env}")
    endif()
    ctests_use_model(${model} ${test})
endforeach()

# refused: run B alone must exit with status 1 (no signal) and the expected message.
ctests_matrix(refused tests)
foreach(entry IN LISTS tests)
    ctests_fields("${entry}" model cfg tol env expect)
    ctests_config(refused ${cfg})
    set(test meta/e2e/${model}/${cfg})
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}" -D "EXES=$<TARGET_FILE:llama_driver>"
        -D "ARGS=--model;${model_dir}/${model}.gguf;${run_b}" -D "EXPECT=${expect}" -P "${meta_e2e_script}")
    ctests_use_model(${model} ${test})
endforeach()

# Tensor mode needs flash attention (libllama's llama_init_from_model refuses the context
# otherwise). The model loads first (with mmap, which upstream's meta over CPUs survives).
set(fa_off_exes "$<TARGET_FILE:llama_driver>")
if(TARGET llama_driver_ref)
    list(APPEND fa_off_exes "$<TARGET_FILE:llama_driver_ref>")
endif()
add_test(NAME meta/e2e/fa_off_fails COMMAND "${CMAKE_COMMAND}"
    -D "EXES=${fa_off_exes}"
    -D "ARGS=--model;${model_dir}/tiny-gqa-f32.gguf;--split-mode;tensor;--devices;CPU,CPU;--flash-attn;off;--n-predict;2"
    -D "EXPECT=SPLIT_MODE_TENSOR requires flash_attn to be enabled"
    -P "${meta_e2e_script}")
ctests_use_model(tiny-gqa-f32 meta/e2e/fa_off_fails)

# tgpu2_no_fa really takes attention off the meta device: the scheduler's split list puts every
# layer's FLASH_ATTN_EXT on the CPU (the e2e tests check the tokens of that run). The scheduler's
# debug output is upstream's: the op's name in 10 columns (FLASH_ATTN), the node's size, the
# backend's name padded.
add_test(NAME meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu COMMAND llama_driver
    --model "${model_dir}/tiny-gqa-f32.gguf" --flash-attn on --threads ${ctests_threads} --n-predict 2
    --split-mode tensor --test-device --devices TESTGPU0,TESTGPU1 --verbose)
set_tests_properties(meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu PROPERTIES
    ENVIRONMENT "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1;GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN=1;GGML_SCHED_DEBUG=2"
    PASS_REGULAR_EXPRESSION "FLASH_ATTN[_A-Z]*\\): +[^ ]+ (\\([ 0-9]+K\\) )?\\[ *CPU *\\].*tokens: ")
ctests_use_model(tiny-gqa-f32 meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu)

# Beyond one context and a few tokens (ctests/llama_threads.cpp):
#   meta/threads/two_contexts/{cpu2,tgpu2}  two contexts on one meta device decode at the same time
#                                         from two threads: each gives the tokens and bit-identical
#                                         logits of one context decoding alone
#   meta/long/{cpu2,tgpu2}                10 000 tokens in a 256-cell context restarted when full:
#                                         resident memory after the first 1000 tokens grows by at
#                                         most 512 KiB (the figure is printed; meta/long/none and
#                                         none_upstream: the same run without the meta device, in
#                                         this build and upstream's, for comparison)
add_executable(llama_threads llama_threads.cpp doubles/test_device.c)
target_compile_definitions(llama_threads PRIVATE LLAMA_THREADS_TEST_DEVICE)
target_include_directories(llama_threads PRIVATE ${GGML_BACKEND_RS_API_INCLUDES}
    "${CMAKE_CURRENT_SOURCE_DIR}" "${CMAKE_CURRENT_SOURCE_DIR}/doubles" "${GGML_BACKEND_RS_ROOT}/tools/model")
target_link_libraries(llama_threads PRIVATE llama ggml ggml-cpu)
set(threads_tests "")
foreach(name cpu2 tgpu2)
    set(devices CPU,CPU)
    set(extra "")
    if(name STREQUAL "tgpu2")
        set(devices TESTGPU0,TESTGPU1)
        set(extra --test-device)
    endif()
    add_test(NAME meta/threads/two_contexts/${name}
        COMMAND llama_threads two "${model_dir}/tiny-gqa-f32.gguf" "${devices}" ${extra})
    add_test(NAME meta/long/${name}
        COMMAND llama_threads long "${model_dir}/tiny-gqa-f32.gguf" "${devices}" 10000 ${extra})
    set_tests_properties(meta/threads/two_contexts/${name} PROPERTIES
        PASS_REGULAR_EXPRESSION "the tokens and logits of one context alone")
    set_tests_properties(meta/long/${name} PROPERTIES
        PASS_REGULAR_EXPRESSION "resident memory [0-9]+ KiB after 1000 tokens" TIMEOUT 600)
    list(APPEND threads_tests meta/threads/two_contexts/${name} meta/long/${name})
endforeach()
# Qwen3.5 on one CPU: ours decodes bit-identically to upstream.
if(TARGET llama_driver_ref)
    add_test(NAME differential/llama/qwen35-f32/cpu COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
        -D "ARGS_A=--model;${model_dir}/qwen35-f32.gguf;--threads;${ctests_threads};--n-predict;12;--split-mode;none;--devices;CPU"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
        -D "WORK_DIR=${model_dir}/qwen35-cpu-diff" -P "${run}")
    ctests_use_model(qwen35-f32 differential/llama/qwen35-f32/cpu)
endif()

# The baseline of the memory figure: one CPU without the meta device, this build and upstream's.
add_test(NAME meta/long/none COMMAND llama_threads long "${model_dir}/tiny-gqa-f32.gguf" none 10000)
set_tests_properties(meta/long/none PROPERTIES
    PASS_REGULAR_EXPRESSION "resident memory [0-9]+ KiB after 1000 tokens" TIMEOUT 600)
list(APPEND threads_tests meta/long/none)
if(TARGET ggml_ref::llama)
    add_executable(llama_threads_ref llama_threads.cpp doubles/test_device.c)
    target_compile_definitions(llama_threads_ref PRIVATE LLAMA_THREADS_TEST_DEVICE)
    target_include_directories(llama_threads_ref PRIVATE ${ref_private_includes}
        "${GGML_BACKEND_RS_ROOT}/tools/model")
    target_link_libraries(llama_threads_ref PRIVATE ggml_ref::llama ggml_ref::ggml ggml_ref::ggml-base
        ggml_ref::ggml-cpu)
    add_test(NAME meta/long/none_upstream
        COMMAND llama_threads_ref long "${model_dir}/tiny-gqa-f32.gguf" none 10000)
    set_tests_properties(meta/long/none_upstream PROPERTIES
        PASS_REGULAR_EXPRESSION "resident memory [0-9]+ KiB after 1000 tokens" TIMEOUT 600)
    list(APPEND threads_tests meta/long/none_upstream)
endif()
ctests_use_model(tiny-gqa-f32 ${threads_tests})

# The AllReduce's epilogue (src/meta/host.rs): run B (the host path, its plans logged) must take
# over the residual add and the RMS norm behind a cut and give run A's bits (the copies path,
# which leaves those nodes in the sub-graphs). The models: plain, MoE, Q/K norms; and parallel
# attention and FFN blocks with a layer norm (Cohere 2), where only the add is taken over.
foreach(item tiny-gqa-f32:rms tiny-moe-f32:rms qwen3-f32:rms cohere2-f32:add)
    string(REPLACE ":" ";" item "${item}")
    list(GET item 0 model)
    list(GET item 1 takes)
    set(expect "Host [+] add, rms_norm, mul")
    if(takes STREQUAL "add")
        set(expect "Host [+] add\n")
    endif()
    set(args --model "${model_dir}/${model}.gguf" ${meta_common} --split-mode tensor --devices CPU,CPU)
    set(test meta/fusion/${model}/cpu2_host_vs_copies)
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${args}" -D "ARGS_B=${args};--verbose"
        -D "ENV_A=GGML_META_ALLREDUCE=copies" -D "ENV_B=GGML_META_DEBUG=1"
        -D "EXPECT_B=AllReduce +[0-9]+ of '[^']+' .[0-9]+ bytes.: ${expect}"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=0"
        -D "WORK_DIR=${model_dir}/meta-fusion-${model}" -P "${run}")
    ctests_use_model(${model} ${test})
    # The staged path (src/meta/host.rs, for devices reached only through their backends, such
    # as RPC servers), forced over the test devices: the same bits again, its epilogue included.
    string(REPLACE "Host" "Staged" expect "${expect}")
    set(args --model "${model_dir}/${model}.gguf" ${meta_common} --split-mode tensor --test-device
        --devices TESTGPU0,TESTGPU1)
    set(test meta/fusion/${model}/tgpu2_staged_vs_copies)
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${args}" -D "ARGS_B=${args};--verbose"
        -D "ENV_A=GGML_META_ALLREDUCE=copies"
        -D "ENV_B=GGML_META_DEBUG=1;GGML_META_ALLREDUCE=staged"
        -D "EXPECT_B=AllReduce +[0-9]+ of '[^']+' .[0-9]+ bytes.: ${expect}"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=0"
        -D "WORK_DIR=${model_dir}/meta-fusion-staged-${model}" -P "${run}")
    ctests_use_model(${model} ${test})
endforeach()

# Devices whose backends decline asynchronous copies between each other (ggml-vulkan between two
# GPUs; here the test devices with GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY=1): the meta backend
# finds it out when it starts, says so, and stages its AllReduces through the host unasked.
# Run A, the copies path with every copy through the host, gives the same bits.
set(args --model "${model_dir}/tiny-gqa-f32.gguf" ${meta_common} --split-mode tensor --test-device
    --devices TESTGPU0,TESTGPU1)
set(test meta/fusion/tiny-gqa-f32/tgpu2_no_peer_copy_staged)
add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${args}" -D "ARGS_B=${args};--verbose"
    -D "ENV_A=GGML_META_ALLREDUCE=copies;GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY=1"
    -D "EXPECT_A=TESTGPU[01]: declines copies from another test device"
    -D "ENV_B=GGML_META_DEBUG=1;GGML_BACKEND_RS_TESTGPU_NO_PEER_COPY=1"
    -D "EXPECT_B=device 1 .TESTGPU1. copies from device 0 .TESTGPU0. only through the host.*AllReduce +[0-9]+ of '[^']+' .[0-9]+ bytes.: Staged [+] add, rms_norm, mul"
    -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=0"
    -D "WORK_DIR=${model_dir}/meta-no-peer-copy" -P "${run}")
set_tests_properties(${test} PROPERTIES ENVIRONMENT "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1")
ctests_use_model(tiny-gqa-f32 ${test})
