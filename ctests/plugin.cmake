# The plugin module (libggml-backend-rs-tp.so, target ggml-backend-rs-tp) in programs built
# against upstream ggml: the pristine reference build's llama_driver_ref and plugin_ops.
# Included from ctests/CMakeLists.txt after meta_e2e.cmake (models, fixtures, `run`).
#
#   plugin/exports                        the module's dynamic symbols are ggml_backend_init
#                                         and ggml_backend_score, nothing else
#   plugin/ops                            plugin_ops.c: TP0 = TP(CPU,CPU) through the ggml API
#                                         (split states, per-device memory, an FFN block
#                                         against the host's CPU backend)
#   plugin/llama/<model>/<cfg>_vs_cpu     upstream's libllama decodes with --devices TP0 (the
#                                         plugin's device over cpu2: CPU,CPU, cpu3: CPU x3,
#                                         tgpu2: TESTGPU0,TESTGPU1) and gives the greedy tokens
#                                         of one plain CPU, logits within the tolerance of
#                                         meta_e2e.cmake (the same partial sums are added;
#                                         model|TOL below)
#   plugin/llama/default_selection        with the plugin's TP(TESTGPU0,TESTGPU1) loaded and no
#                                         --devices, libllama's default device selection skips
#                                         TP0 (same device id as TESTGPU0) and uses the test
#                                         devices, with the tokens of a run without the plugin
#   plugin/llama/cut_heads_stop_at_context  equal shares that would cut heads stop when the context
#                                         is created, naming GGML_BACKEND_RS_TP_HEAD_DIM; with it set,
#                                         plugin/llama/mha6-f32/cpu4_head_dim_vs_cpu decodes
#   plugin/llama/no_host_devices          a GGML_BACKEND_RS_TP naming a device the host does
#                                         not have: the device is left out with a message and
#                                         the plugin offers none (--devices TP0 is invalid)
#
# qwen35-f32 (hybrid): the plugin splits its gated-delta-net layers by K heads in libllama's
# segments and its gated-Q attention by KV heads. Those layers need GET_ROWS (of their states),
# CONCAT, SSM_CONV and GATED_DELTA_NET on every device, so its tgpu2 run lets the test devices
# run GET_ROWS;
#   plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context  with their default op set (no
#                                         GET_ROWS) the context's creation stops, naming the op
#                                         and GGML_BACKEND_RS_TP_RECURRENT=mirrored; with it set,
#   plugin/llama/qwen35-f32/tgpu2_cpu_ops_mirrored_vs_cpu  the recurrent layers are computed
#                                         whole on each device and the decode gives one CPU's
#                                         tokens
#
# Upstream's own tensor mode over CPU,CPU crashes (see meta_e2e.cmake); through the plugin the
# same upstream libllama runs it, because the meta device is ours.

set(plugin "$<TARGET_FILE:ggml-backend-rs-tp>")
set(plugin_env "GGML_BACKEND_PATH=${plugin}")

add_test(NAME plugin/exports COMMAND "${CMAKE_COMMAND}" -D "MODULE=${plugin}"
    -P "${CMAKE_CURRENT_SOURCE_DIR}/plugin_exports.cmake")

add_executable(plugin_ops plugin_ops.c)
target_link_libraries(plugin_ops PRIVATE ggml_ref::ggml ggml_ref::ggml-base ggml_ref::ggml-cpu m)
add_dependencies(plugin_ops ggml-backend-rs-tp)
add_test(NAME plugin/ops COMMAND plugin_ops "${plugin}")
set_tests_properties(plugin/ops PROPERTIES
    ENVIRONMENT "GGML_BACKEND_RS_TP=CPU,CPU;GGML_NO_BACKTRACE=1"
    PASS_REGULAR_EXPRESSION "plugin_ops: TP0 = TP\\(CPU,CPU\\) matches the CPU backend")

# plugin_vs_cpu(<test> <gguf> <TOL> <env> [driver args]): upstream's libllama decodes <gguf>
# through the plugin's TP0 (the plugin's environment plus <env>, a list of VAR=value) and must
# give one CPU's tokens, with logits within <TOL> (ctests/llama_run.cmake).
# (`plugin_both_args`, when set by the caller: driver arguments of both runs.)
function(plugin_vs_cpu test gguf tol env)
    set(common --model "${gguf}" --threads 2 --n-predict 12 ${plugin_both_args})
    string(REPLACE "/" "-" work "${test}")
    add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER_A=$<TARGET_FILE:llama_driver_ref>"
        -D "ARGS_A=${common};--split-mode;none;--devices;CPU"
        -D "DRIVER_B=${CMAKE_COMMAND}"
        -D "ARGS_B=-E;env;${plugin_env};${env};$<TARGET_FILE:llama_driver_ref>;${common};--load-all-backends;${ARGN};--devices;TP0"
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
        -D "WORK_DIR=${model_dir}/${work}" -P "${run}")
endfunction()

# model|TOL, as meta_e2e.cmake measured them for the same sums (phi3-f32, which only the plugin
# splits: 1.5e-7 over cpu2, 1.0e-7 over cpu3, TOL 1e-4)
set(plugin_models "tiny-gqa-f32|1e-4" "tiny-gqa-f16|1e-3" "small-mha-f32|1e-4" "tiny-moe-f32|1e-4"
    "tiny-mqa-f32|1e-4" "qwen3-f32|1e-4" "qwen3moe-f32|1e-4" "gpt-oss-f32|1e-4" "gemma-mqa-f32|1e-4"
    "qwen35-f32|1e-4" "qwen2-f32|1e-4" "gemma2-f32|1e-3" "gemma3-f32|1e-3"
    "glm4moe-f32|1e-4" "llama4-f32|1e-3" "cohere2-f32|1e-4"
    "phi3-f32|1e-4" "lfm2-f32|1e-4" "lfm2moe-f32|1e-4")
set(plugin_configs "cpu2|CPU,CPU|" "cpu3|CPU,CPU,CPU|" "tgpu2|TESTGPU0,TESTGPU1|--test-device")
foreach(model_entry IN LISTS plugin_models)
    string(REPLACE "|" ";" parts "${model_entry}")
    list(GET parts 0 model)
    list(GET parts 1 tol)
    set(tests "")
    foreach(cfg_entry IN LISTS plugin_configs)
        string(REPLACE "|" ";" cfg_parts "${cfg_entry} ")
        list(GET cfg_parts 0 cfg)
        list(GET cfg_parts 1 members)
        list(GET cfg_parts 2 extra_text)
        separate_arguments(extra UNIX_COMMAND "${extra_text}")
        set(test plugin/llama/${model}/${cfg}_vs_cpu)
        plugin_vs_cpu(${test} "${model_dir}/${model}.gguf" ${tol} "GGML_BACKEND_RS_TP=${members}" ${extra})
        list(APPEND tests ${test})
        if(model STREQUAL "qwen35-f32" AND cfg STREQUAL "tgpu2")
            set_tests_properties(${test} PROPERTIES ENVIRONMENT "GGML_BACKEND_RS_TESTGPU_GET_ROWS=1")
        endif()
    endforeach()
    set_tests_properties(${tests} PROPERTIES FIXTURES_REQUIRED model_${model})
endforeach()

# Quantized KV caches (the models' KV cache on TP0, split by heads by the plugin's policy; ggml
# 0.26's libllama also rotates each head's rows, see meta_e2e.cmake): one CPU's tokens with the
# same cache types, TOL 1e-4 as for the f32 models.
foreach(kv q8_0 q4_0)
    set(plugin_both_args --flash-attn on --cache-type-k ${kv} --cache-type-v ${kv})
    set(tests "")
    foreach(cfg_entry "cpu2|CPU,CPU|" "tgpu2|TESTGPU0,TESTGPU1|--test-device")
        string(REPLACE "|" ";" cfg_parts "${cfg_entry} ")
        list(GET cfg_parts 0 cfg)
        list(GET cfg_parts 1 members)
        list(GET cfg_parts 2 extra_text)
        separate_arguments(extra UNIX_COMMAND "${extra_text}")
        set(test plugin/llama/kvq-f32/k_${kv}_v_${kv}/${cfg}_vs_cpu)
        plugin_vs_cpu(${test} "${model_dir}/kvq-f32.gguf" 1e-4 "GGML_BACKEND_RS_TP=${members}" ${extra})
        list(APPEND tests ${test})
    endforeach()
    set_tests_properties(${tests} PROPERTIES FIXTURES_REQUIRED model_kvq-f32)
endforeach()
unset(plugin_both_args)

# The plugin's name policy sizes and rotates the slices as the version's libllama callback does
# (NAME_CONVENTIONS in src/version/ggml_<version>): given the head size (which libllama knows
# from the model and the plugin from GGML_BACKEND_RS_TP_HEAD_DIM here: 16, every model below has
# heads of 16), upstream's program with
# the plugin decodes bit-identically to the linked build's own tensor mode over the same
# devices. Not gpt-oss (rel L2 6.9e-8, TOL 1e-6: the expert biases' partial sum, which libllama's
# callback marks with the devices that hold experts' rows, is added on device 0 by the plugin),
# and only the models this version's libllama splits in tensor mode.
set(plugin_linked_models tiny-gqa-f32 tiny-gqa-f16 small-mha-f32 tiny-moe-f32 qwen3-f32 qwen3moe-f32
    qwen2-f32 gemma2-f32 gemma3-f32 glm4moe-f32 llama4-f32 cohere2-f32 qwen35-f32 gpt-oss-f32)
if(NOT GGML_BACKEND_RS_GGML_VERSION VERSION_LESS 0.26)
    list(APPEND plugin_linked_models phi3-f32 lfm2-f32 lfm2moe-f32)
endif()
foreach(model IN LISTS plugin_linked_models)
    set(tol 0)
    if(model STREQUAL "gpt-oss-f32")
        set(tol 1e-6)
    endif()
    set(gguf "${model_dir}/${model}.gguf")
    set(common --model "${gguf}" --threads 2 --n-predict 12 --flash-attn on)
    set(tests "")
    foreach(members CPU,CPU CPU,CPU,CPU)
        string(REPLACE "," ";" member_list "${members}")
        list(LENGTH member_list n_members)
        set(test plugin/llama/${model}/cpu${n_members}_vs_linked_tensor)
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>"
            -D "ARGS_A=${common};--split-mode;tensor;--devices;${members}"
            -D "DRIVER_B=${CMAKE_COMMAND}"
            -D "ARGS_B=-E;env;${plugin_env};GGML_BACKEND_RS_TP=${members};GGML_BACKEND_RS_TP_HEAD_DIM=16;$<TARGET_FILE:llama_driver_ref>;${common};--load-all-backends;--devices;TP0"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
            -D "WORK_DIR=${model_dir}/plugin-${model}-cpu${n_members}-vs-linked" -P "${run}")
        list(APPEND tests ${test})
    endforeach()
    set_tests_properties(${tests} PROPERTIES FIXTURES_REQUIRED model_${model})
endforeach()

set(q35 "${model_dir}/qwen35-f32.gguf")
# (libllama of ggml 0.9.11 names the GET_ROWS node conv_states-0; 0.26's leaves it unnamed.)
add_test(NAME plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context COMMAND "${CMAKE_COMMAND}"
    -D "EXE=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS=--model;${q35};--n-predict;4;--load-all-backends;--test-device;--devices;TP0"
    "-DEXPECT=TP0: its devices cannot run GET_ROWS \\('[^']+'\\), which layer 0's gated delta net needs on each device when it is split: set GGML_BACKEND_RS_TP_RECURRENT=mirrored to compute those layers whole"
    -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
set_tests_properties(plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context PROPERTIES
    ENVIRONMENT "${plugin_env};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1")
plugin_vs_cpu(plugin/llama/qwen35-f32/tgpu2_cpu_ops_mirrored_vs_cpu "${q35}" 1e-4
    "GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1;GGML_BACKEND_RS_TP_RECURRENT=mirrored" --test-device)
set_tests_properties(plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context
    plugin/llama/qwen35-f32/tgpu2_cpu_ops_mirrored_vs_cpu PROPERTIES FIXTURES_REQUIRED model_qwen35-f32)

set(gguf "${model_dir}/tiny-gqa-f32.gguf")
add_test(NAME plugin/llama/default_selection COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER_A=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS_A=--model;${gguf};--threads;2;--n-predict;12;--test-device"
    -D "DRIVER_B=${CMAKE_COMMAND}"
    -D "ARGS_B=-E;env;${plugin_env};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1;$<TARGET_FILE:llama_driver_ref>;--model;${gguf};--threads;2;--n-predict;12;--test-device;--load-all-backends;--verbose"
    -D "EXPECT_B=skipping device TP0 \\(TP\\(TESTGPU0,TESTGPU1\\)\\) with id testgpu:0 - already using device TESTGPU0"
    -D "REJECT_B=using device TP0"
    -D "COMPARE=$<TARGET_FILE:compare_logits>" -D TOL=0
    -D "WORK_DIR=${model_dir}/plugin-default-selection" -P "${run}")
add_test(NAME plugin/llama/no_host_devices COMMAND "${CMAKE_COMMAND}" -E env
    "${plugin_env}" "GGML_BACKEND_RS_TP=CPU,NOSUCHDEVICE"
    "$<TARGET_FILE:llama_driver_ref>" --model "${gguf}" --n-predict 2 --load-all-backends
    --verbose --devices TP0)
set_tests_properties(plugin/llama/no_host_devices PROPERTIES
    PASS_REGULAR_EXPRESSION "GGML_BACKEND_RS_TP names `NOSUCHDEVICE`, which the host does not have; device `CPU,NOSUCHDEVICE` left out.*unknown device 'TP0'")
set_tests_properties(plugin/llama/default_selection plugin/llama/no_host_devices PROPERTIES
    FIXTURES_REQUIRED model_tiny-gqa-f32)

# A model whose head size no tensor tells (6 heads of 32 rows, no Q/K norms) over 4 CPUs: the
# plugin's equal shares of 48 rows would cut heads. The rope nodes show the head size when the
# context reserves its graphs, and the plugin stops there with a message naming the setting;
# with GGML_BACKEND_RS_TP_HEAD_DIM=32 it splits whole heads and decodes like one CPU.
set(mha6 "${model_dir}/mha6-f32.gguf")
add_test(NAME model/mha6-f32 COMMAND write_model --n-embd 192 --n-layer 2 --n-head 6 --n-head-kv 6
    --n-ff 128 --n-vocab 300 --type f32 --seed 7 --out "${mha6}")
set_tests_properties(model/mha6-f32 PROPERTIES FIXTURES_SETUP model_mha6-f32)
add_test(NAME plugin/llama/cut_heads_stop_at_context COMMAND "${CMAKE_COMMAND}"
    -D "EXE=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS=--model;${mha6};--n-predict;4;--load-all-backends;--devices;TP0"
    "-DEXPECT=TP0: layer 0's attention is split into K shares of \\[48, 48, 48, 48\\] rows, which cut its heads of 32 rows \\(the head size is not in the model's tensors\\): set GGML_BACKEND_RS_TP_HEAD_DIM=32"
    -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
set_tests_properties(plugin/llama/cut_heads_stop_at_context PROPERTIES
    ENVIRONMENT "${plugin_env};GGML_BACKEND_RS_TP=CPU,CPU,CPU,CPU")
plugin_vs_cpu(plugin/llama/mha6-f32/cpu4_head_dim_vs_cpu "${mha6}" 1e-4
    "GGML_BACKEND_RS_TP=CPU,CPU,CPU,CPU;GGML_BACKEND_RS_TP_HEAD_DIM=32")
set_tests_properties(plugin/llama/cut_heads_stop_at_context plugin/llama/mha6-f32/cpu4_head_dim_vs_cpu
    PROPERTIES FIXTURES_REQUIRED model_mha6-f32)
