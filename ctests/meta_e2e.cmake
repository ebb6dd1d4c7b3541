# Tensor parallelism end to end: libllama with --split-mode tensor (the meta device) decodes the
# random-weight models of sched_llama.cmake, plus an MoE model, and must produce the same greedy
# tokens as one plain CPU, with logits within a measured tolerance. Included from
# ctests/CMakeLists.txt right after sched_llama.cmake (it reuses that file's models, fixtures,
# `model_dir` and the llama_driver / llama_driver_ref / compare_logits targets).
#
# Tests:
#   meta/e2e/<model>/cpu2_vs_cpu          meta over CPU,CPU vs --split-mode none on CPU
#   meta/e2e/<model>/cpu3_vs_cpu          CPU x3: zero-size slices (e.g. attention heads {0,32,32})
#   meta/e2e/tiny-gqa-f32/cpu4_vs_cpu     CPU x4
#   meta/e2e/<model>/cpu2_split31_vs_cpu  --tensor-split 3,1 (uneven slices)
#   meta/e2e/<model>/cpu2_split10_vs_cpu  --tensor-split 1,0 (the second device holds empty slices)
#   meta/e2e/<model>/cpu2_nommap_vs_cpu   --no-mmap (the loader writes weights through the meta buffer)
#   meta/e2e/<model>/cpu2_ubatch_vs_cpu   --n-ubatch 16 < prompt (63 tokens: 4 graphs), all logits
#   meta/e2e/<model>/tgpu2_vs_cpu         meta over the non-host test devices TESTGPU0,TESTGPU1,
#                                         GET_ROWS accepted by them (see below)
#   meta/e2e/<model>/tgpu2_cpu_ops_vs_cpu the same with the test devices' default op set: GET_ROWS
#                                         and SOFT_MAX run on the CPU, between meta splits
#   meta/e2e/<model>/tgpu2_no_fa_vs_cpu   test devices without FLASH_ATTN_EXT (as CUDA for heads
#                                         of 16): attention runs on the CPU, its inputs are
#                                         gathered from split views and its whole result comes
#                                         back to split consumers, which take their slices of it
#   meta/e2e/<model>/tgpu{3,4}_vs_cpu     meta over 3 and 4 test devices (gather-and-add and
#                                         butterfly AllReduce over asynchronous devices)
#   meta/e2e/<model>/tgpu{2,3,4}_direct_vs_cpu  the same with the direct AllReduce
#                                         (GGML_META_ALLREDUCE=direct: partials in scratch slots,
#                                         each device adds all of them; no copies)
#   meta/steps/<model>/tgpu{2,3,4}[_direct]  decode steps over 2, 3, 4 test devices wait on the
#                                         host for nothing and allocate nothing
#                                         (ctests/meta_steps.cmake)
#   differential/meta/<model>/tgpu2       the tgpu2 run, this library vs upstream's C++, TOL 0
#   meta/e2e/tiny-mqa-f32/{cpu2,cpu3,tgpu2}_vs_cpu  one KV head: it lives on one device, the
#                                         others hold no attention (upstream aborts)
#   meta/e2e/{qwen3,qwen3moe,gpt-oss}-f32/{cpu2,cpu3,tgpu2}_vs_cpu  Qwen3, Qwen3-MoE (Q/K norms
#                                         per head), gpt-oss (sinks, expert biases, SWA)
#   meta/e2e/gemma-mqa-f32/{cpu2,cpu3,tgpu2}_vs_cpu  Gemma with one KV head (upstream aborts)
#   meta/e2e/qwen35-f32/<cfg>_vs_cpu      Qwen3.5: gated-delta-net layers (fused QKV, conv state,
#                                         recurrent state, all split by heads in segments) and
#                                         gated full attention; cpu2, cpu3, tgpu2, cpu2_split31,
#                                         cpu2_ubatch, tgpu3_direct, tgpu4 (and upstream over tgpu2)
#   meta/e2e/{qwen2,gemma2,gemma3,glm4moe,llama4,cohere2}-f32/{cpu2,cpu3,tgpu2,tgpu2_no_fa}_vs_cpu
#                                         Qwen2, Gemma 2 and 3, GLM-4.5, Llama 4, Command R (and
#                                         upstream over tgpu2, bit-identical)
#   meta/e2e/phi3-f32/cpu2_fails_at_context  Phi-3's fused gate/up, split in one segment by
#                                         libllama's callback, is refused when the context is made
#   meta/e2e/qwen35-f32/tgpu2_cpu_ops_fails_at_context  a split the meta backend cannot do is
#                                         reported when the context is created: exit 1, no signal
#   meta/allreduce/<model>/<cfg>_vs_cpu   the simple backends' own AllReduce (0.26: the comm API;
#                                         0.9.11: ggml_backend_allreduce_tensor), offered by the
#                                         test devices' registry, reduces every cut, or declines
#                                         every one and the meta backend reduces them itself
#   differential/meta/allreduce/<model>/<cfg>  the same, this library vs upstream's meta backend
#   meta/e2e/fa_off_fails                 tensor mode with --flash-attn off: libllama refuses the
#                                         context; both builds exit 1 with its message, no signal
#
# Upstream's meta backend (ggml-backend-meta.cpp, which the pristine reference build links) crashes
# on simple CPU devices (its meta buffer type claims is_host: SIGSEGV in the first decode's
# set_rows, or in the loader's read with --no-mmap), so every cpu* test fails against it.
#
# Test devices and GET_ROWS: TESTGPU0/1 refuse GET_ROWS and SOFT_MAX by default, so the scheduler
# runs those on the CPU and copies meta tensors out of the meta backend. Upstream aborts there:
# the last layer's attention output (a PARTIAL matmul result, unreduced because it is the last
# node of its meta split) feeds the CPU's GET_ROWS of inp_out_ids (ggml-backend-meta.cpp:1304,
# get_tensor of a PARTIAL tensor), and the MoE top-k view (non-contiguous) feeds the CPU's
# GET_ROWS of the router weights (:1273). With GET_ROWS accepted by the test devices
# (GGML_BACKEND_RS_TESTGPU_GET_ROWS=1, read by ctests/doubles/test_device.c) only the router's
# SOFT_MAX leaves the meta backend and upstream decodes correctly — that configuration is the
# tgpu2 / differential one; tgpu2_cpu_ops keeps the default op set (a backend lacking ops next to
# meta).
#
# Tolerance (relative L2 over all logits rows, compare_logits). Tensor parallelism computes the
# attention-output and FFN-down projections as per-device partial sums that are then added
# (AllReduce), so float32 rounding differs from one device; and a last-bit difference can become an
# f16 rounding step (2^-11 relative) of one element wherever values are stored or multiplied in f16:
# the KV cache (f16 in every model) and, in f16 models, the activations the CPU converts to f16
# for f16 weights. Measured with upstream's meta over TESTGPU0,TESTGPU1 (same math as any meta
# over two devices), largest rel_l2 / max_abs_diff over plain, --tensor-split 3,1, --tensor-split
# 1,3 (device 0 gets no attention head) and --n-ubatch 16 / 7 --all-logits runs:
#   tiny-gqa-f32  3.0e-6 / 2.1e-4   -> TOL 1e-4   (plain run: 1.4e-7)
#   tiny-moe-f32  4.2e-6 / 4.9e-4   -> TOL 1e-4   (plain run: 2.1e-6)
#   tiny-gqa-f16  1.2e-4 / 2.9e-3   -> TOL 1e-3   (plain run: 9.0e-5; f16 activations)
# about 25x (f32) and 8x (f16) above what was seen, for 3 and 4 devices and other rounding orders;
# The other architectures' f32 models, measured (cpu2 / cpu3 / tgpu2_no_fa): Qwen2 1.3e-7 /
# 1.3e-7 / 2.1e-6, GLM-4.5 6.4e-7 / 6.4e-7 / 6.4e-7, Command R 4.0e-6 / 4.0e-6 (on CUDA with
# n_embd 256: 2.2e-5), all with TOL 1e-4. Gemma 2 and 3 and Llama 4 have TOL 1e-3: their f32
# differences from one device are larger and grow with the width. Gemma 2: 1.4e-5 over cpu2 /
# tgpu2, 5.2e-6 over cpu3, up to 1.0e-4 with n_embd 256 over CPU x3; Gemma 3: 8.6e-5 over cpu2 /
# tgpu2, 7.0e-5 over cpu3, 6.1e-7 over tgpu2_no_fa, 1.2e-4 with n_embd 256 over CPU x3 (the same
# tokens every time; post-norm weights of 1 instead of 4*sqrt(n_embd) give larger differences
# still); Llama 4: 3.5e-5 over cpu2 and 4.5e-5 over cpu3 with this model's seed, 1.2e-4 / 1.3e-4
# with seed 7 (its router picks one expert by sigmoid and scales the expert's input by that
# weight, across four layers). Upstream's meta backend gives the same
# bits for all three (differential/meta/*/tgpu2), and 1e-3 stays far below the O(0.1..1) change
# of a lost summand or a misplaced slice;
# a slicing or reduction fault (a lost summand, a misplaced slice) changes hidden states by O(1)
# and is expected to move logits by far more than that.
# Greedy tokens must be identical (the smallest top1-top2 gap of these models is 0.02 .. 0.6
# logits, well above the differences seen). Ours vs upstream on the same configuration runs the
# same kernels in the same order: bit-identical (TOL 0).

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

# The environment switch of ctests/doubles/test_device.c that makes TESTGPU0/1 accept GET_ROWS.
set(meta_testgpu_get_rows "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1")

# The MoE fixture: llama architecture, 6 experts, top-3 (so the delayed reduction of the experts'
# down projections covers a chain of two ADDs). Seed 5: greedy margins >= 0.6 logits.
set(meta_moe_gguf "${model_dir}/tiny-moe-f32.gguf")
add_test(NAME model/tiny-moe-f32 COMMAND write_model --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2
    --n-ff 64 --n-expert 6 --n-expert-used 3 --n-vocab 300 --type f32 --seed 5 --out "${meta_moe_gguf}")
set_tests_properties(model/tiny-moe-f32 PROPERTIES FIXTURES_SETUP model_tiny-moe-f32)

# One KV head (multi-query attention): libllama's split gives the head to one device and none to
# the other, which reaches rope and flash attention as K rows split all-or-nothing (upstream
# aborts there). Seed 7.
set(meta_mqa_gguf "${model_dir}/tiny-mqa-f32.gguf")
add_test(NAME model/tiny-mqa-f32 COMMAND write_model --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 1
    --n-ff 128 --n-vocab 300 --type f32 --seed 7 --out "${meta_mqa_gguf}")
set_tests_properties(model/tiny-mqa-f32 PROPERTIES FIXTURES_SETUP model_tiny-mqa-f32)

# Other architectures the pin splits in tensor mode (write_model --arch): Qwen3 (per-head Q/K
# norms, NeoX RoPE), Qwen3-MoE (the same attention, experts of width n_ff) and gpt-oss
# (attention sinks, biases everywhere incl. the experts', sliding-window attention in every
# other layer: two KV caches) and Gemma with one KV head (Gemma-2B's multi-query attention; tied
# output embedding, so its greedy tokens settle on one token: seed 3 gives margins >= 1.6, and
# the logits of all 300 tokens are compared), Qwen2 (biases on Q, K and V), Gemma 2 (post-norms,
# attention and final logit soft-capping, sliding-window attention in every other layer; tied
# output like Gemma, its tokens settle on one too), Gemma 3 (Gemma 2's layout with per-head Q/K
# norms, no soft-capping, its own RoPE base in the sliding-window layers), GLM-4.5 (Q/K/V biases,
# RoPE on half of each head, a dense first layer, then experts routed by sigmoid with a selection
# bias next to a shared expert, which stays whole on every device and is added to the experts'
# AllReduced sum), Llama 4 (four layers: dense and MoE layers alternating, the MoE ones with top-1
# sigmoid routing and a shared expert; chunked attention in three, and no RoPE but attention
# temperature in the fourth; with fewer than four layers the pin's libllama sets an input that
# its graph does not use and aborts, upstream's build alike), Command R7B / Command A (cohere2:
# attention and FFN side by side on one LayerNorm, two partial sums per layer, RoPE only in the
# sliding-window layers, tied output), Phi-3 (fused QKV and fused gate/up
# projections, see phi3-f32/cpu2_fails_at_context below), and LFM2 / LFM2-MoE (short-convolution
# layers, which libllama's callback keeps whole on every device with their conv state, between
# attention layers with per-head Q/K norms; the MoE variant routes by sigmoid with a selection
# bias after a dense first layer). ggml 0.26's libllama splits LFM2 in tensor mode; 0.9.11's
# refuses the model (lfm2-f32/cpu2_refused_by_libllama below).
set(meta_arch_models "qwen3-f32|--arch qwen3 --n-ff 128 --seed 7"
    "qwen2-f32|--arch qwen2 --n-ff 128 --seed 7"
    "gemma2-f32|--arch gemma2 --n-ff 128 --seed 3"
    "gemma3-f32|--arch gemma3 --n-ff 128 --seed 3"
    "llama4-f32|--arch llama4 --n-layer 4 --n-ff 64 --n-expert 4 --n-expert-used 1 --seed 5"
    "cohere2-f32|--arch cohere2 --n-ff 128 --seed 3"
    "glm4moe-f32|--arch glm4moe --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11"
    "phi3-f32|--arch phi3 --n-ff 128 --seed 7"
    "qwen3moe-f32|--arch qwen3moe --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 5"
    "gpt-oss-f32|--arch gpt-oss --n-ff 64 --n-expert 4 --n-expert-used 2 --seed 5"
    "gemma-mqa-f32|--arch gemma --n-head-kv 1 --n-ff 128 --seed 3"
    "qwen35-f32|--arch qwen35 --n-ff 128 --seed 7"
    "lfm2-f32|--arch lfm2 --n-ff 128 --seed 7"
    "lfm2moe-f32|--arch lfm2moe --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11")
set(meta_arch_names "")
foreach(entry IN LISTS meta_arch_models)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 flag_text)
    list(APPEND meta_arch_names ${name})
    separate_arguments(flags UNIX_COMMAND "${flag_text}")
    add_test(NAME model/${name} COMMAND write_model --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2
        --n-vocab 300 --type f32 ${flags} --out "${model_dir}/${name}.gguf")
    set_tests_properties(model/${name} PROPERTIES FIXTURES_SETUP model_${name})
endforeach()

# model|TOL (see the table above); the dense models are sched_llama.cmake's.
set(meta_models "tiny-gqa-f32|1e-4" "tiny-gqa-f16|1e-3" "tiny-moe-f32|1e-4" "tiny-mqa-f32|1e-4"
    "qwen3-f32|1e-4" "qwen3moe-f32|1e-4" "gpt-oss-f32|1e-4" "gemma-mqa-f32|1e-4" "qwen35-f32|1e-4"
    "qwen2-f32|1e-4" "gemma2-f32|1e-3" "gemma3-f32|1e-3" "glm4moe-f32|1e-4" "llama4-f32|1e-3"
    "cohere2-f32|1e-4")
# Phi-3's fused gate/up: libllama of ggml 0.26 splits it in two repeated segments ({n_ff, nr 2});
# 0.9.11's in one, which is refused (phi3-f32/cpu2_fails_at_context below).
# LFM2 and LFM2-MoE (0.26 only): rel L2 measured over cpu2 / cpu3 / tgpu2_no_fa 9.3e-8 / 9.3e-8 /
# 9.4e-8 (LFM2) and 8.8e-8 / 8.8e-8 / 8.7e-8 (LFM2-MoE), TOL 1e-4 as for the other f32 models.
if(NOT GGML_BACKEND_RS_GGML_VERSION VERSION_LESS 0.26)
    list(APPEND meta_models "phi3-f32|1e-4" "lfm2-f32|1e-4" "lfm2moe-f32|1e-4")
endif()
# Models that run a subset of the configurations: the one-KV-head models and the architectures
# of meta_arch_models but Qwen3.5 (tiny-mqa-f32 and gemma-mqa-f32 without the differential
# against upstream, which aborts on them; the other architectures with it).
set(meta_mqa_configs
    "cpu2|--devices CPU,CPU|"
    "cpu3|--devices CPU,CPU,CPU|"
    "tgpu2|--test-device --devices TESTGPU0,TESTGPU1|"
    "tgpu2_no_fa|--test-device --devices TESTGPU0,TESTGPU1|")
# Qwen3.5's recurrent layers split by heads in segments (libllama's callback): uneven slices,
# several graphs per prompt (the chunked delta net carries its state between them), and 3 and 4
# devices, over the copies and the direct AllReduce.
set(meta_qwen35_configs ${meta_mqa_configs}
    "cpu2_split31|--devices CPU,CPU --tensor-split 3,1|"
    "cpu2_ubatch|--devices CPU,CPU|--n-ubatch 16 --all-logits"
    "tgpu3_direct|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2|"
    "tgpu4|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2,TESTGPU3|")

# Configurations: name|arguments of the tensor-parallel run|arguments of both runs.
set(meta_configs
    "cpu2|--devices CPU,CPU|"
    "cpu3|--devices CPU,CPU,CPU|"
    "cpu2_split31|--devices CPU,CPU --tensor-split 3,1|"
    "cpu2_split10|--devices CPU,CPU --tensor-split 1,0|"
    "cpu2_nommap|--devices CPU,CPU --no-mmap|"
    "cpu2_ubatch|--devices CPU,CPU|--n-ubatch 16 --all-logits"
    "tgpu2|--test-device --devices TESTGPU0,TESTGPU1|"
    "tgpu2_cpu_ops|--test-device --devices TESTGPU0,TESTGPU1|"
    "tgpu2_no_fa|--test-device --devices TESTGPU0,TESTGPU1|"
    "tgpu3|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2|"
    "tgpu4|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2,TESTGPU3|"
    "tgpu2_direct|--test-device --devices TESTGPU0,TESTGPU1|"
    "tgpu3_direct|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2|"
    "tgpu4_direct|--test-device --devices TESTGPU0,TESTGPU1,TESTGPU2,TESTGPU3|")
# Four test devices registered (the default is two), GET_ROWS on them.
set(meta_testgpu4 "${meta_testgpu_get_rows};GGML_BACKEND_RS_TESTGPU_COUNT=4")
set(meta_cpu4_model tiny-gqa-f32)

foreach(model_entry IN LISTS meta_models)
    string(REPLACE "|" ";" model_parts "${model_entry}")
    list(GET model_parts 0 model)
    list(GET model_parts 1 tol)
    set(gguf "${model_dir}/${model}.gguf")
    set(common --model "${gguf}" --flash-attn on --threads 2 --n-predict 12)
    set(configs ${meta_configs})
    if(model MATCHES "^qwen35")
        set(configs ${meta_qwen35_configs})
    elseif(model MATCHES "mqa" OR model IN_LIST meta_arch_names)
        set(configs ${meta_mqa_configs})
    endif()
    if(model STREQUAL meta_cpu4_model)
        list(APPEND configs "cpu4|--devices CPU,CPU,CPU,CPU|")
    endif()
    set(tests "")
    foreach(cfg_entry IN LISTS configs)
        # pad so that an empty last field still yields three list elements
        string(REPLACE "|" ";" cfg_parts "${cfg_entry} ")
        list(GET cfg_parts 0 cfg)
        list(GET cfg_parts 1 tensor_text)
        list(GET cfg_parts 2 both_text)
        separate_arguments(tensor_flags UNIX_COMMAND "${tensor_text}")
        separate_arguments(both_flags UNIX_COMMAND "${both_text}")
        set(cpu_args ${common} --split-mode none --devices CPU ${both_flags})
        set(tp_args ${common} --split-mode tensor ${tensor_flags} ${both_flags})

        set(test meta/e2e/${model}/${cfg}_vs_cpu)
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${cpu_args}" -D "ARGS_B=${tp_args}"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
            -D "WORK_DIR=${model_dir}/meta-${model}-${cfg}" -P "${run}")
        list(APPEND tests ${test})
        set(cfg_env "")
        if(cfg MATCHES "_direct$")
            set(cfg_env "GGML_META_ALLREDUCE=direct")
        endif()
        if(cfg MATCHES "^tgpu[34]" OR cfg MATCHES "_direct$")
            set_tests_properties(${test} PROPERTIES ENVIRONMENT "${meta_testgpu4};${cfg_env}")
        endif()
        if(cfg STREQUAL "tgpu2_no_fa")
            set_tests_properties(${test} PROPERTIES
                ENVIRONMENT "${meta_testgpu_get_rows};GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN=1")
        endif()
        if(cfg MATCHES "^tgpu([234])(_direct)?$")
            set(n_dev ${CMAKE_MATCH_1})
            set(steps_test meta/steps/${model}/${cfg})
            set(copies some)   # the copies AllReduce (no CUDA here)
            if(cfg MATCHES "_direct$")
                set(copies none)
            endif()
            add_test(NAME ${steps_test} COMMAND "${CMAKE_COMMAND}"
                -D "DRIVER=$<TARGET_FILE:llama_driver>" -D "ARGS=${tp_args}" -D "N_DEV=${n_dev}"
                -D N_PREDICT=12 -D COPIES=${copies} -P "${CMAKE_CURRENT_SOURCE_DIR}/meta_steps.cmake")
            # every op on the test devices: the CPU's router soft_max of the MoE model would
            # make the scheduler wait between splits, which is not the meta backend's doing
            set_tests_properties(${steps_test} PROPERTIES
                ENVIRONMENT "${meta_testgpu4};GGML_BACKEND_RS_TESTGPU_ALL_OPS=1;${cfg_env}")
            list(APPEND tests ${steps_test})
        endif()
        if(cfg STREQUAL "tgpu2")
            set_tests_properties(${test} PROPERTIES ENVIRONMENT "${meta_testgpu_get_rows}")
            # Bit-identical to upstream, except gpt-oss: the same tokens, logits within rel L2
            # 1.2e-7 / max abs 1.9e-6 (measured; TOL 1e-5, float32 rounding of a few additions,
            # far below what a misplaced slice or a lost summand changes). The two meta backends
            # sum the experts' partial results at different nodes: ours after the expert bias,
            # weighting and sum (GGML_META_DEBUG: the AllReduce is on ffn_moe_out); upstream's
            # match for that tail (get_i_delayed in ggml-backend-meta.cpp) expects the weighting
            # MUL right after the down projection, and gpt-oss has the bias ADD_ID there, so it
            # reduces the down projection itself, then adds the rest on every device.
            set(diff_tol 0)
            if(model STREQUAL "gpt-oss-f32")
                set(diff_tol 1e-5)
            endif()
            if(TARGET llama_driver_ref AND NOT model MATCHES "mqa")
                set(test differential/meta/${model}/tgpu2)
                add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
                    -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
                    -D "ARGS_A=${tp_args}" -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${diff_tol}"
                    -D "WORK_DIR=${model_dir}/meta-${model}-tgpu2-diff" -P "${run}")
                set_tests_properties(${test} PROPERTIES ENVIRONMENT "${meta_testgpu_get_rows}")
                list(APPEND tests ${test})
            endif()
        endif()
    endforeach()
    set_tests_properties(${tests} PROPERTIES FIXTURES_REQUIRED model_${model})
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
    -P "${CMAKE_CURRENT_LIST_FILE}")
set_tests_properties(meta/e2e/fa_off_fails PROPERTIES FIXTURES_REQUIRED model_tiny-gqa-f32)

# tgpu2_no_fa really takes attention off the meta device: the scheduler's split list puts every
# layer's FLASH_ATTN_EXT on the CPU (the e2e tests above check the tokens of that run). The
# scheduler's debug output is upstream's: the op's name in 10 columns (FLASH_ATTN), the node's
# size, the backend's name padded.
add_test(NAME meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu COMMAND llama_driver
    --model "${model_dir}/tiny-gqa-f32.gguf" --flash-attn on --threads 2 --n-predict 2
    --split-mode tensor --test-device --devices TESTGPU0,TESTGPU1 --verbose)
set_tests_properties(meta/e2e/tiny-gqa-f32/tgpu2_no_fa_runs_attention_on_cpu PROPERTIES
    ENVIRONMENT "${meta_testgpu_get_rows};GGML_BACKEND_RS_TESTGPU_NO_FLASH_ATTN=1;GGML_SCHED_DEBUG=2"
    PASS_REGULAR_EXPRESSION "FLASH_ATTN[_A-Z]*\\): +[^ ]+ (\\([ 0-9]+K\\) )?\\[ *CPU *\\].*tokens: "
    FIXTURES_REQUIRED model_tiny-gqa-f32)

# A combination the meta backend cannot split fails when the context is created (the scheduler's
# reserve checks every node the meta backend is given), naming the node and the reason, with exit
# status 1 and no signal. Here: Qwen3.5 on the test devices with their default op set, which run
# GET_ROWS on the CPU, so the conv state comes back whole (mirrored) and its CONCAT with the
# projection split by heads has no per-device rule. (Upstream's meta backend aborts in the first
# decode.)
# The first node refused depends on libllama's graph: 0.26 reads the recurrent state first.
if(GGML_BACKEND_RS_GGML_VERSION VERSION_LESS 0.26)
    set(q35_refused "'conv_input-0' .CONCAT. across devices: no rule computes this op device by device for sources .src0 MIRRORED, src1 AXIS_1.64,64. in 4 segments")
else()
    set(q35_refused "'node_[0-9]+' .GATED_DELTA_NET. across devices: gated_delta_net's state must be split by v's heads .AXIS_1.0,4.., not MIRRORED")
endif()
add_test(NAME meta/e2e/qwen35-f32/tgpu2_cpu_ops_fails_at_context COMMAND "${CMAKE_COMMAND}"
    -D "EXES=$<TARGET_FILE:llama_driver>"
    -D "ARGS=--model;${model_dir}/qwen35-f32.gguf;--split-mode;tensor;--test-device;--devices;TESTGPU0,TESTGPU1;--flash-attn;on;--n-predict;2"
    -D "EXPECT=ggml_backend_sched_reserve: meta backend: cannot split tensor ${q35_refused}.*llama_driver: failed to create context"
    -P "${CMAKE_CURRENT_LIST_FILE}")
set_tests_properties(meta/e2e/qwen35-f32/tgpu2_cpu_ops_fails_at_context PROPERTIES
    FIXTURES_REQUIRED model_qwen35-f32)

# Phi-3's fused ffn_up holds the gate rows, then the up rows, and the graph's SwiGLU takes the two
# halves. libllama's callback splits ffn_up in one segment (its gate/up rule is for separate
# tensors), so one device would hold only gate rows: the context is refused, naming the node.
# (Upstream's meta backend decodes it over the test devices and gives other tokens than one CPU
# from the fourth on; the plugin, whose policy splits each half, decodes it like one CPU:
# plugin/llama/phi3-f32/*.) ggml 0.9.11's libllama only: 0.26's callback splits the fused
# tensor in two repeated segments ({n_ff, nr 2}).
#
# And libllama of ggml 0.9.11 does not split LFM2 in tensor mode (llm_arch_supports_sm_tensor):
# the model load fails with its message.
# meta_e2e_fails(<test> <model> <expected output>): tensor mode over CPU,CPU exits with status 1
# (no signal) and that message.
function(meta_e2e_fails test model expect)
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}" -D "EXES=$<TARGET_FILE:llama_driver>"
        -D "ARGS=--model;${model_dir}/${model}.gguf;--split-mode;tensor;--devices;CPU,CPU;--flash-attn;on;--n-predict;2"
        -D "EXPECT=${expect}" -P "${CMAKE_CURRENT_LIST_FILE}")
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED model_${model})
endfunction()
if(GGML_BACKEND_RS_GGML_VERSION VERSION_LESS 0.26)
    meta_e2e_fails(meta/e2e/phi3-f32/cpu2_fails_at_context phi3-f32
        "ggml_backend_sched_reserve: meta backend: cannot split tensor 'ffn_swiglu-0' .SWIGLU. across devices: glu of one fused source needs its gate and up halves split alike .two equal segments., not AXIS_0.128,128.*llama_driver: failed to create context")
    meta_e2e_fails(meta/e2e/lfm2-f32/cpu2_refused_by_libllama lfm2-f32
        "LLAMA_SPLIT_MODE_TENSOR not implemented for architecture 'lfm2'")
endif()

# Quantized KV caches in tensor mode, which libllama of ggml 0.26 allows (0.9.11's refuses the
# context): K and V blocks lie along the head dimension, which a head split keeps whole, and
# libllama rotates every head's rows (Q, K and V reshaped to one row per head and token, times a
# mirrored matrix) before they are cached. Heads of 64 (quantized blocks of 32 need whole ones).
# Over CPU×2 and two test devices against one CPU with the same cache types: the same tokens,
# and the logits within TOL 1e-4 as for the other f32 models (partial sums added in another
# order; measured rel L2 1.4e-7 for q8_0 and q4_0 over CPU×2), and bit-identical to upstream
# 0.26's meta backend over the test devices.
# (The model, heads of 64 and an FFN that every device gets rows of, serves the backend AllReduce
# tests below too, on both versions.)
set(kvq_gguf "${model_dir}/kvq-f32.gguf")
add_test(NAME model/kvq-f32 COMMAND write_model --n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2
    --n-ff 256 --n-vocab 300 --type f32 --seed 3 --out "${kvq_gguf}")
set_tests_properties(model/kvq-f32 PROPERTIES FIXTURES_SETUP model_kvq-f32)
if(NOT GGML_BACKEND_RS_GGML_VERSION VERSION_LESS 0.26)
    foreach(kv "q8_0|q8_0" "q4_0|q4_0" "q8_0|f16" "f16|q4_0")
        string(REPLACE "|" ";" kv_parts "${kv}")
        list(GET kv_parts 0 type_k)
        list(GET kv_parts 1 type_v)
        set(common --model "${kvq_gguf}" --flash-attn on --threads 2 --n-predict 12
            --cache-type-k ${type_k} --cache-type-v ${type_v})
        foreach(cfg_entry "cpu2|--devices CPU,CPU" "tgpu2|--test-device --devices TESTGPU0,TESTGPU1")
            string(REPLACE "|" ";" cfg_parts "${cfg_entry}")
            list(GET cfg_parts 0 cfg)
            list(GET cfg_parts 1 tensor_text)
            separate_arguments(tensor_flags UNIX_COMMAND "${tensor_text}")
            set(test meta/e2e/kvq-f32/k_${type_k}_v_${type_v}/${cfg}_vs_cpu)
            add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
                -D "DRIVER_A=$<TARGET_FILE:llama_driver>"
                -D "ARGS_A=${common};--split-mode;none;--devices;CPU"
                -D "ARGS_B=${common};--split-mode;tensor;${tensor_flags}"
                -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=1e-4
                -D "WORK_DIR=${model_dir}/meta-kvq-${type_k}-${type_v}-${cfg}" -P "${run}")
            set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED model_kvq-f32
                ENVIRONMENT "${meta_testgpu_get_rows}")
        endforeach()
        # against upstream 0.26's meta backend over the test devices: bit-identical
        if(TARGET llama_driver_ref)
            set(test differential/meta/kvq-f32/k_${type_k}_v_${type_v}/tgpu2)
            add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
                -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
                -D "ARGS_A=${common};--split-mode;tensor;--test-device;--devices;TESTGPU0,TESTGPU1"
                -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
                -D "WORK_DIR=${model_dir}/meta-kvq-${type_k}-${type_v}-diff" -P "${run}")
            set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED model_kvq-f32
                ENVIRONMENT "${meta_testgpu_get_rows}")
        endif()
    endforeach()
endif()

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
foreach(cfg "cpu2|CPU,CPU|" "tgpu2|TESTGPU0,TESTGPU1|--test-device")
    string(REPLACE "|" ";" parts "${cfg} ")
    list(GET parts 0 name)
    list(GET parts 1 devices)
    list(GET parts 2 extra_text)
    separate_arguments(extra UNIX_COMMAND "${extra_text}")
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
        -D "ARGS_A=--model;${model_dir}/qwen35-f32.gguf;--threads;2;--n-predict;12;--split-mode;none;--devices;CPU"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
        -D "WORK_DIR=${model_dir}/qwen35-cpu-diff" -P "${run}")
    set_tests_properties(differential/llama/qwen35-f32/cpu PROPERTIES FIXTURES_REQUIRED model_qwen35-f32)
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
set_tests_properties(${threads_tests} PROPERTIES FIXTURES_REQUIRED model_tiny-gqa-f32)

# The simple backends' own AllReduce: GGML_BACKEND_RS_TESTGPU_ALLREDUCE=1 makes the test devices'
# registry offer it as the version defines it (0.26: ggml_backend_comm_init / _free /
# _allreduce_tensor; 0.9.11: ggml_backend_allreduce_tensor), summing f32 partials in device order
# on the host; =decline declines every call, so the meta backend must reduce each cut another way
# (the copies path). The driver's exit line ("TESTGPU AllReduce: <n> reduced, <m> declined") shows
# which path ran. The same tokens as one CPU (TOL as for the model above); GGML_META_ALLREDUCE=comm
# (tgpu3) forces the path by its 0.26 name.
# Against upstream's meta backend (differential, bit-identical: both hand the same partials to the
# same entry point) only where no device holds an empty slice: upstream zeroes the partial of a
# device whose slice is empty only on its own fallback path, so a backend AllReduce adds that
# device's stale memory (tiny-gqa-f32: libllama gives TESTGPU0 no FFN rows at n_ff 128; kvq-f32
# over three devices: two KV heads) and upstream decodes other tokens than one CPU there.
set(allreduce_used "TESTGPU AllReduce: [1-9][0-9]* reduced, 0 declined")
set(allreduce_declined "TESTGPU AllReduce: 0 reduced, [1-9][0-9]* declined")
# model|configuration|devices|GGML_BACKEND_RS_TESTGPU_ALLREDUCE|TOL|differential against upstream
foreach(entry
        "tiny-gqa-f32|tgpu2|TESTGPU0,TESTGPU1|1|1e-4|"
        "tiny-moe-f32|tgpu2|TESTGPU0,TESTGPU1|1|1e-4|"
        "kvq-f32|tgpu2|TESTGPU0,TESTGPU1|1|1e-4|diff"
        "kvq-f32|tgpu3|TESTGPU0,TESTGPU1,TESTGPU2|1|1e-4|"
        "tiny-gqa-f32|tgpu2_declined|TESTGPU0,TESTGPU1|decline|1e-4|diff")
    string(REPLACE "|" ";" parts "${entry} ")
    list(GET parts 0 model)
    list(GET parts 1 cfg)
    list(GET parts 2 devices)
    list(GET parts 3 mode)
    list(GET parts 4 tol)
    list(GET parts 5 diff)
    string(STRIP "${diff}" diff)
    set(expect "${allreduce_used}")
    if(mode STREQUAL "decline")
        set(expect "${allreduce_declined}")
    endif()
    set(env "${meta_testgpu4};GGML_BACKEND_RS_TESTGPU_ALLREDUCE=${mode}")
    if(cfg STREQUAL "tgpu3")
        list(APPEND env "GGML_META_ALLREDUCE=comm")
    endif()
    set(common --model "${model_dir}/${model}.gguf" --flash-attn on --threads 2 --n-predict 12)
    set(tp_args ${common} --split-mode tensor --test-device --devices ${devices})
    set(test meta/allreduce/${model}/${cfg}_vs_cpu)
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "ARGS_A=${common};--split-mode;none;--devices;CPU"
        -D "ARGS_B=${tp_args}" -D "EXPECT_B=${expect}"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
        -D "WORK_DIR=${model_dir}/meta-allreduce-${model}-${cfg}" -P "${run}")
    set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED model_${model} ENVIRONMENT "${env}")
    if(TARGET llama_driver_ref AND diff STREQUAL "diff")
        set(test differential/meta/allreduce/${model}/${cfg})
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
            -D "ARGS_A=${tp_args}" -D "EXPECT_A=${expect}" -D "EXPECT_B=${expect}"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
            -D "WORK_DIR=${model_dir}/meta-allreduce-${model}-${cfg}-diff" -P "${run}")
        set_tests_properties(${test} PROPERTIES FIXTURES_REQUIRED model_${model} ENVIRONMENT "${env}")
    endif()
endforeach()
