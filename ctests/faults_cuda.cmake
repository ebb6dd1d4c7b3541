# Faults of the CUDA path, injected with GGML_META_CUDA_FAULT (src/meta/fault.rs): our AllReduce
# kernel's launch refused, and a step's CUDA graph capture the driver will not end. Only in trees
# built with CUDA (never in CI, which has no GPU): the GPU host runs them (docs/gpu.md, "The
# CUDA fault tests"). Tensor mode over CUDA0,CUDA0, tiny-gqa-f32, with fault_case's checks
# (faults.cmake): the exit status, the messages, and where the driver goes on, the tokens and
# logits of a run without the fault. Included from ctests/CMakeLists.txt after faults.cmake.
#
#   faults/cuda/allreduce_once         the first AllReduce's launch fails: llama_decode returns
#                                      -3, and made again gives the clean run's results
#   faults/cuda/allreduce_always       every launch fails: every decode fails, the driver frees
#                                      everything and stops (no hang)
#   faults/cuda/fallback_allreduce     the backend's AllReduce declines (upstream's without NCCL,
#                                      GGML_CUDA_ALLREDUCE=none) and our kernel, the fallback,
#                                      fails: the step fails (-3) rather than keep partial sums
#   faults/cuda/capture_end            the driver will not end the first capture: that decode
#                                      fails, and so does every later one, naming the reason
#   faults/cuda/mapped_allreduce_once  allreduce_once through host memory, a launch per device
#                                      (GGML_META_ALLREDUCE=mapped, GGML_META_MAPPED_APART=1):
#                                      the retry exchanges after the failed step's clear
#   faults/cuda/mapped_lost            through host memory with a launch per device
#                                      (GGML_META_MAPPED_APART=1, as two GPUs), the second
#                                      device's first launch is left out, as a GPU that stopped:
#                                      the first gives up waiting after 200 ms, the decode fails
#                                      naming the device it waited for, and made again gives the
#                                      clean run's results (the peer path's: the same bits)

if(NOT TARGET ggml-cuda)
    return()
endif()

set(cuda_tp ${fault_base} --split-mode tensor --devices CUDA0,CUDA0)
set(cuda_fault_cases
    "allreduce_once|0|allreduce:1||retry"
    "allreduce_always|1|allreduce:1+||"
    "fallback_allreduce|0|allreduce:1|GGML_META_ALLREDUCE=backend,GGML_CUDA_ALLREDUCE=none|retry"
    "capture_end|1|capture_end:1||retry"
    "mapped_allreduce_once|0|allreduce:1|GGML_META_ALLREDUCE=mapped,GGML_META_MAPPED_APART=1|retry"
    "mapped_lost|0|mapped_lost:1|GGML_META_ALLREDUCE=mapped,GGML_META_MAPPED_APART=1,GGML_META_MAPPED_TIMEOUT_MS=200|retry")
foreach(entry IN LISTS cuda_fault_cases)
    string(REPLACE "|" ";" f "${entry}")
    list(GET f 0 name)
    list(GET f 1 rc)
    list(GET f 2 rule)
    list(GET f 3 extra_env)
    list(GET f 4 again)
    string(REPLACE "," ";" extra_env "${extra_env}")
    set(args ${cuda_tp})
    set(clean "")
    if(again)
        list(APPEND args ${retry})
        if(rc EQUAL 0)
            set(clean ${cuda_tp})
        endif()
    endif()
    string(REGEX REPLACE ":([0-9]+)\\+?$" " #\\1[^0-9]" expect "meta backend: injected fault: ${rule}")
    if(name STREQUAL "capture_end")
        list(APPEND expect
            "meta backend: CUDA graph of the step failed: injected fault: capture_end #1; the capture of a step could not be ended"
            "meta backend: graph not computed: injected fault: capture_end #1; the capture of a step could not be ended"
            "llama_driver: llama_decode\\(step [0-9]+\\) failed: -3")
    elseif(name STREQUAL "mapped_lost")
        list(APPEND expect "own CUDA AllReduce over CUDA0,CUDA0 through host memory: forced"
            "graph failed: CUDA0 \\[device 0\\] waited 200 ms for CUDA0 \\[device 1\\] in the AllReduce through host memory"
            "decode_error: prompt 0 rc=-3[^0-9]")
    elseif(rc EQUAL 0)
        list(APPEND expect "meta backend: CUDA AllReduce failed: injected fault: allreduce #1"
            "decode_error: prompt 0 rc=-3[^0-9]")
    else()
        list(APPEND expect "llama_driver: llama_decode\\(prompt\\) failed: -3")
    endif()
    # (info lines: the driver shows those with --verbose)
    if(name MATCHES "^(fallback_allreduce|mapped_lost)$")
        list(APPEND args --verbose)
    endif()
    if(name STREQUAL "fallback_allreduce")
        list(APPEND expect "the backend's AllReduce declined")
    endif()
    set(env "GGML_META_CUDA_FAULT=${rule}" ${extra_env})
    add_test(NAME faults/cuda/${name} COMMAND "${CMAKE_COMMAND}" -D "DRIVER=$<TARGET_FILE:llama_driver>"
        -D "ARGS=${args}" -D "ENV=${env}" -D "EXPECT_RC=${rc}"
        -D "EXPECT=${expect}" -D "CLEAN_ARGS=${clean}" -D "COMPARE=$<TARGET_FILE:compare_logits>"
        -D "WORK_DIR=${model_dir}/faults/cuda/${name}" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
    set_tests_properties(faults/cuda/${name} PROPERTIES TIMEOUT 300)
    ctests_use_model(${fault_model} faults/cuda/${name})
endforeach()
