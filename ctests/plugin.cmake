# The plugin module (libggml-backend-rs-tp.so, target ggml-backend-rs-tp) in programs built
# against upstream ggml: the pristine reference build's llama_driver_ref and plugin_ops.
# Included from ctests/CMakeLists.txt after meta_e2e.cmake (`model_dir`, `run`).
#
#   plugin/exports                        the module's dynamic symbols are ggml_backend_init
#                                         and ggml_backend_score, nothing else
#   plugin/ops                            plugin_ops.c: TP0 = TP(CPU,CPU) through the ggml API
#                                         (split states, per-device memory, an FFN block
#                                         against the host's CPU backend)
#   plugin/llama/<model>/<cfg>_vs_cpu, plugin/llama/<model>/<cfg>_vs_linked_tensor
#                                         upstream's libllama decodes with --devices TP0: the
#                                         suites plugin and plugin-linked of
#                                         ctests/matrix/tests.txt (models, devices, tolerances)
#   plugin/llama/default_selection        with the plugin's TP(TESTGPU0,TESTGPU1) loaded and no
#                                         --devices, libllama's default device selection skips
#                                         TP0 (same device id as TESTGPU0) and uses the test
#                                         devices, with the tokens of a run without the plugin
#   plugin/llama/cut_heads_stop_at_context  equal shares that would cut heads stop when the context
#                                         is created, naming GGML_BACKEND_RS_TP_HEAD_DIM
#   plugin/llama/no_host_devices          a GGML_BACKEND_RS_TP naming a device the host does
#                                         not have: the device is left out with a message and
#                                         the plugin offers none (--devices TP0 is invalid)
#   plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context  the recurrent layers need GET_ROWS
#                                         on each device: without it the context stops
#   plugin/llama/compute_buffer_oom       a device out of memory for the compute buffer, which a
#                                         plugin device makes when the first graph is allocated:
#                                         the decode fails (-2) naming the device and the bytes,
#                                         no abort (libllama then reuses the failed graph: the
#                                         retries fail the same way)
#
# Upstream's own tensor mode over CPU,CPU crashes (see ctests/matrix/tests.txt); through the
# plugin the same upstream libllama runs it, because the meta device is ours.

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

# A weight used by a program that is not libllama (plugin_placement.c): named as libllama names
# it and not, small and large, y = w x with x and y in one context or in a compute buffer; each
# result equals a double-precision reference, or TP0 refuses the graph.
add_executable(plugin_placement plugin_placement.c)
target_link_libraries(plugin_placement PRIVATE ggml_ref::ggml ggml_ref::ggml-base m)
add_dependencies(plugin_placement ggml-backend-rs-tp)
add_test(NAME plugin/placement COMMAND plugin_placement "${plugin}")
set_tests_properties(plugin/placement PROPERTIES
    ENVIRONMENT "GGML_BACKEND_RS_TP=CPU,CPU;GGML_NO_BACKTRACE=1")

# The differential graph fuzzer (graph_fuzz.c): its committed corpus (fuzz/corpus/tp_graph), then
# random graphs for GGML_BACKEND_RS_GRAPH_FUZZ_SECONDS, over TP0 on two and on three CPUs against
# the host's CPU backend: each graph equal to the CPU's or refused by supports_op. An input that
# fails is kept in the test's work directory (current, mismatch-<n>).
set(GGML_BACKEND_RS_GRAPH_FUZZ_SECONDS 20 CACHE STRING
    "seconds of random graphs after the corpus in each plugin/graph_fuzz test")
add_executable(graph_fuzz graph_fuzz.c)
target_link_libraries(graph_fuzz PRIVATE ggml_ref::ggml ggml_ref::ggml-base m)
add_dependencies(graph_fuzz ggml-backend-rs-tp)
foreach(members "CPU,CPU" "CPU,CPU,CPU")
    string(REPLACE "," "_" tag "${members}")
    set(work "${CMAKE_CURRENT_BINARY_DIR}/graph_fuzz_${tag}")
    file(MAKE_DIRECTORY "${work}")
    add_test(NAME plugin/graph_fuzz/${tag} COMMAND graph_fuzz "${plugin}"
        --corpus "${PROJECT_SOURCE_DIR}/fuzz/corpus/tp_graph"
        --seconds ${GGML_BACKEND_RS_GRAPH_FUZZ_SECONDS} --save "${work}")
    set_tests_properties(plugin/graph_fuzz/${tag} PROPERTIES
        ENVIRONMENT "GGML_BACKEND_RS_TP=${members};GGML_NO_BACKTRACE=1")
endforeach()

# The plugin checks its host's ABI class (src/abi/class.rs): ggml_version() and the exports that
# tell the class apart. In a host of its own class it scores 1 and loads; in a host of another
# class (GGML_BACKEND_RS_OTHER_CLASS_TREES: build trees of the other ggml versions, each with its
# plugin_host and plugin) it scores 0 and is refused with one line naming both versions; a tree of
# another release of the same class (E: 0.24.0 and 0.25.3) loads it. Both directions are tested:
# this tree's plugin in the other tree's host, and the other's in ours.
add_executable(plugin_host plugin_host.c)
target_link_libraries(plugin_host PRIVATE ggml_ref::ggml ggml_ref::ggml-base ${CMAKE_DL_LIBS})
add_dependencies(plugin_host ggml-backend-rs-tp)
add_test(NAME plugin/class/own_class_host_accepts COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER=$<TARGET_FILE:plugin_host>" -D "ARGS=${plugin};accepted" -D EXPECT_RC=0
    -D "EXPECT=plugin_host: score 1;plugin_host: load accepted"
    -D "REJECT=ggml-backend-rs plugin: built for"
    -D "WORK_DIR=${model_dir}/plugin-class" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
# "built for ggml 0.24.0 or 0.25.3 (ABI class E)": a class may have several releases.
set(our_class_text "ggml ([0-9.]+ or )*${GGML_BACKEND_RS_GGML_VERSION}( or [0-9.]+)* \\(ABI class [A-Z]\\)")
foreach(other IN LISTS GGML_BACKEND_RS_OTHER_CLASS_TREES)
    cmake_path(ABSOLUTE_PATH other NORMALIZE)
    load_cache("${other}" READ_WITH_PREFIX other_ GGML_BACKEND_RS_GGML_VERSION GGML_BACKEND_RS_ABI_CLASS)
    set(v "${other_GGML_BACKEND_RS_GGML_VERSION}")
    if(v STREQUAL "" OR NOT EXISTS "${other}/ctests/plugin_host")
        message(FATAL_ERROR "GGML_BACKEND_RS_OTHER_CLASS_TREES: ${other} is not a built tree of "
            "this project with its tests (no ggml version in its cache, or no ctests/plugin_host)")
    endif()
    if(other_GGML_BACKEND_RS_ABI_CLASS STREQUAL GGML_BACKEND_RS_ABI_CLASS)
        # Another release of the same class (0.24.0 and 0.25.3): the plugins are interchangeable.
        add_test(NAME plugin/class/accepted_by_ggml_${v}_host COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER=${other}/ctests/plugin_host" -D "ARGS=${plugin};accepted" -D EXPECT_RC=0
            -D "EXPECT=plugin_host: ggml ${v}\n;plugin_host: score 1;plugin_host: load accepted"
            -D "REJECT=ggml-backend-rs plugin: built for"
            -D "WORK_DIR=${model_dir}/plugin-class" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
        add_test(NAME plugin/class/ggml_${v}_plugin_accepted COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER=$<TARGET_FILE:plugin_host>" -D "ARGS=${other}/libggml-backend-rs-tp.so;accepted"
            -D EXPECT_RC=0 -D "EXPECT=plugin_host: score 1;plugin_host: load accepted"
            -D "REJECT=ggml-backend-rs plugin: built for"
            -D "WORK_DIR=${model_dir}/plugin-class" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
        continue()
    endif()
    add_test(NAME plugin/class/refused_by_ggml_${v}_host COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER=${other}/ctests/plugin_host" -D "ARGS=${plugin};refused" -D EXPECT_RC=0
        -D "EXPECT=plugin_host: ggml ${v}\n;plugin_host: score 0;plugin_host: load refused;ggml-backend-rs plugin: built for ${our_class_text}, but the host is ggml ${v}: not loaded; rebuild the plugin"
        -D "WORK_DIR=${model_dir}/plugin-class" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
    add_test(NAME plugin/class/ggml_${v}_plugin_refused COMMAND "${CMAKE_COMMAND}"
        -D "DRIVER=$<TARGET_FILE:plugin_host>" -D "ARGS=${other}/libggml-backend-rs-tp.so;refused"
        -D EXPECT_RC=0
        -D "EXPECT=plugin_host: score 0;plugin_host: load refused;ggml-backend-rs plugin: built for ggml ([0-9.]+ or )*${v}( or [0-9.]+)* \\(ABI class [A-Z]\\), but the host is ggml ${GGML_BACKEND_RS_GGML_VERSION}: not loaded; rebuild the plugin"
        -D "WORK_DIR=${model_dir}/plugin-class" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
endforeach()

# The suites plugin and plugin-linked of ctests/matrix/tests.txt: run B is upstream's
# llama_driver_ref with the plugin loaded (the configuration's environment: which devices TP0
# wraps), run A one plain CPU in the same program (plugin) or this build's own tensor mode over
# the same devices (plugin-linked).
foreach(suite plugin plugin-linked)
    set(common --threads ${ctests_threads} --n-predict 12)
    set(driver_a "$<TARGET_FILE:llama_driver_ref>")
    set(suffix vs_cpu)
    if(suite STREQUAL "plugin-linked")
        set(common --threads ${ctests_threads} --n-predict 12 --flash-attn on)
        set(driver_a "$<TARGET_FILE:llama_driver>")
        set(suffix vs_linked_tensor)
    endif()
    ctests_matrix(${suite} tests)
    foreach(entry IN LISTS tests)
        ctests_fields("${entry}" model cfg tol env)
        ctests_config(${suite} ${cfg})
        separate_arguments(env UNIX_COMMAND "${env}")
        set(args --model "${model_dir}/${model}.gguf" ${common})
        set(test plugin/llama/${model}/${cfg}_${suffix})
        string(REPLACE "/" "-" work "${test}")
        if(suite STREQUAL "plugin-linked")
            set(work plugin-${model}-${cfg}-vs-linked)
        endif()
        add_test(NAME ${test} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=${driver_a}" -D "ARGS_A=${args};${run_a}"
            -D "DRIVER_B=${CMAKE_COMMAND}"
            -D "ARGS_B=-E;env;${plugin_env};${run_env};$<TARGET_FILE:llama_driver_ref>;${args};${run_b}"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=${tol}"
            -D "WORK_DIR=${model_dir}/${work}" -P "${run}")
        if(env)
            set_tests_properties(${test} PROPERTIES ENVIRONMENT "${env}")
        endif()
        ctests_use_model(${model} ${test})
    endforeach()
endforeach()

# qwen35-f32 on the test devices with their default op set (no GET_ROWS): the context's creation
# stops, naming the op and GGML_BACKEND_RS_TP_RECURRENT=mirrored (with it set:
# plugin/llama/qwen35-f32/tgpu2_cpu_ops_mirrored_vs_cpu, tests.txt). (libllama of ggml 0.9.11
# names the GET_ROWS node conv_states-0; 0.26's leaves it unnamed.)
set(q35 "${model_dir}/qwen35-f32.gguf")
add_test(NAME plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context COMMAND "${CMAKE_COMMAND}"
    -D "EXE=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS=--model;${q35};--n-predict;4;--load-all-backends;--test-device;--devices;TP0"
    "-DEXPECT=TP0: its devices cannot run GET_ROWS \\('[^']+'\\), which layer 0's gated delta net needs on each device when it is split: set GGML_BACKEND_RS_TP_RECURRENT=mirrored to compute those layers whole"
    -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
set_tests_properties(plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context PROPERTIES
    ENVIRONMENT "${plugin_env};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1")
ctests_use_model(qwen35-f32 plugin/llama/qwen35-f32/tgpu2_cpu_ops_stops_at_context)

set(gguf "${model_dir}/tiny-gqa-f32.gguf")
add_test(NAME plugin/llama/default_selection COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER_A=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS_A=--model;${gguf};--threads;${ctests_threads};--n-predict;12;--test-device"
    -D "DRIVER_B=${CMAKE_COMMAND}"
    -D "ARGS_B=-E;env;${plugin_env};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1;$<TARGET_FILE:llama_driver_ref>;--model;${gguf};--threads;${ctests_threads};--n-predict;12;--test-device;--load-all-backends;--verbose"
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
ctests_use_model(tiny-gqa-f32 plugin/llama/default_selection plugin/llama/no_host_devices)

# A model whose head size no tensor tells (6 heads of 32 rows, no Q/K norms) over 4 CPUs: the
# plugin's equal shares of 48 rows would cut heads. The rope nodes show the head size when the
# context reserves its graphs, and the plugin stops there with a message naming the setting;
# with GGML_BACKEND_RS_TP_HEAD_DIM=32 it splits whole heads and decodes like one CPU
# (plugin/llama/mha6-f32/cpu4_head_dim_vs_cpu, tests.txt).
set(mha6 "${model_dir}/mha6-f32.gguf")
add_test(NAME plugin/llama/cut_heads_stop_at_context COMMAND "${CMAKE_COMMAND}"
    -D "EXE=$<TARGET_FILE:llama_driver_ref>"
    -D "ARGS=--model;${mha6};--n-predict;4;--load-all-backends;--devices;TP0"
    "-DEXPECT=TP0: layer 0's attention is split into K shares of \\[48, 48, 48, 48\\] rows, which cut its heads of 32 rows \\(the head size is not in the model's tensors\\): set GGML_BACKEND_RS_TP_HEAD_DIM=32"
    -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
set_tests_properties(plugin/llama/cut_heads_stop_at_context PROPERTIES
    ENVIRONMENT "${plugin_env};GGML_BACKEND_RS_TP=CPU,CPU,CPU,CPU")
ctests_use_model(mha6-f32 plugin/llama/cut_heads_stop_at_context)

# A plugin device's compute buffer gets its memory when ggml-alloc places the first graph's
# tensors, which ignores the status: the graph's compute reports it (upstream's libllama then
# reuses the graph as it is, so the decode fails again when made again). TESTGPU1's allocation
# ALLOC_N is that buffer's (the weights and the KV cache come first; the "injected fault" line
# pins it).
set(compute_oom_alloc 3)
set(plugin_tgpu2 -E env "${plugin_env}" GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1 "$<TARGET_FILE:llama_driver_ref>"
    --model "${gguf}" --threads ${ctests_threads} --n-predict 4 --test-device --load-all-backends
    --devices TP0)
add_test(NAME plugin/llama/compute_buffer_oom COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER=${CMAKE_COMMAND}" "-DARGS=${plugin_tgpu2};--retry-failed-decode;1"
    "-DENV=GGML_BACKEND_RS_TESTGPU_FAIL=alloc:${compute_oom_alloc}@1"
    -D EXPECT_RC=1
    "-DEXPECT=TESTGPU1: injected fault: alloc #${compute_oom_alloc}[^0-9];meta buffer: failed to allocate [0-9]+ bytes on TESTGPU1;meta backend: graph not computed: meta buffer: failed to allocate [0-9]+ bytes on TESTGPU1;decode_error: prompt 0 rc=-2[^0-9];llama_driver: llama_decode\\(prompt\\) failed: -2"
    -D "WORK_DIR=${model_dir}/plugin-compute-buffer-oom" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
ctests_use_model(tiny-gqa-f32 plugin/llama/compute_buffer_oom)
