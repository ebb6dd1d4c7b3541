# Faults: a device that runs out of memory, a graph compute that fails or is aborted, copies
# declined and events missing, injected into the test devices (GGML_BACKEND_RS_TESTGPU_FAIL, see
# ctests/doubles/test_device.c) or through libllama's abort callback (llama_driver
# --abort-on-call), during a tensor-parallel decode of tiny-gqa-f32 over TESTGPU0,TESTGPU1 (and
# CPU,CPU, and the scheduler's layer split). Included from ctests/CMakeLists.txt after
# sched_llama.cmake and the valgrind option (`valgrind_on`).
#
#   faults/<case>            ours (fault_run.cmake): the exit status and messages the user sees;
#                            under valgrind when it is on (nothing leaked, no invalid access);
#                            where the driver goes on after the fault (--retry-failed-decode),
#                            the same tokens and bit-identical logits as a run without it
#   faults/upstream/<case>   upstream's driver with the same fault: the same status and results
#                            where it survives (llama_run.cmake against ours, logits 0), its
#                            abort and message where it does not (expect_abort.cmake)
#
# The ordinals (the Nth allocation of TESTGPU1, ...) follow from the program: allocation 1 is the
# model's weights, 2 the KV cache, 3 the compute buffer, 4 the first AllReduce scratch memory of
# ours (upstream allocates none there); compute 30 of TESTGPU1 falls in a decode step after the
# prompt (the second or third: the versions' graphs differ); a layer split's TESTGPU1 computes once per step, so its compute 3 is the
# second step; copies 1 and 2 are our meta backend's question whether the test devices copy
# between each other (one each way, when its first plan is built; upstream asks nothing), so
# copy 5 is the third copy of an AllReduce in ours. Each case demands the "injected fault" line,
# so a shift cannot pass unseen.

set(fault_model tiny-gqa-f32)
set(fault_gguf "${model_dir}/${fault_model}.gguf")
set(fault_base --model "${fault_gguf}" --flash-attn on --threads ${ctests_threads} --n-predict 4)
set(fault_tgpu2 ${fault_base} --split-mode tensor --test-device --devices TESTGPU0,TESTGPU1)
set(fault_cpu2 ${fault_base} --split-mode tensor --devices CPU,CPU)
set(fault_layer ${fault_base} --split-mode layer --test-device --devices TESTGPU0,TESTGPU1)
# upstream's meta backend needs GET_ROWS on the test devices (ctests/matrix/configs.txt, tgpu2)
set(fault_env GGML_BACKEND_RS_TESTGPU_GET_ROWS=1)
set(retry --retry-failed-decode 2)
set(fault_vg "")
if(valgrind_on)
    set(fault_vg -D "VALGRIND=${VALGRIND}")
endif()

# fault_case(<name> RC <status> ARGS <args..> [FAIL <rule>] [EXPECT <regex..>] [CLEAN <args..>])
function(fault_case name)
    cmake_parse_arguments(F "" "RC;FAIL" "ARGS;EXPECT;CLEAN" ${ARGN})
    set(env ${fault_env})
    if(F_FAIL)
        list(APPEND env "GGML_BACKEND_RS_TESTGPU_FAIL=${F_FAIL}")
    endif()
    add_test(NAME faults/${name} COMMAND "${CMAKE_COMMAND}" -D "DRIVER=$<TARGET_FILE:llama_driver>"
        -D "ARGS=${F_ARGS}" -D "ENV=${env}" -D "EXPECT_RC=${F_RC}" -D "EXPECT=${F_EXPECT}"
        -D "CLEAN_ARGS=${F_CLEAN}" -D "COMPARE=$<TARGET_FILE:compare_logits>"
        ${fault_vg} -D "WORK_DIR=${model_dir}/faults/${name}"
        -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
    set_tests_properties(faults/${name} PROPERTIES TIMEOUT 300)
    ctests_use_model(${fault_model} faults/${name})
endfunction()

# --- out of memory -------------------------------------------------------------------------
# The model's weights: the meta buffer frees what the other device allocated and returns NULL.
fault_case(load/tgpu2_weights_oom RC 1 FAIL alloc:1@1 ARGS ${fault_tgpu2}
    EXPECT "TESTGPU1: injected fault: alloc #1[^0-9]"
           "meta buffer: failed to allocate [0-9]+ bytes on TESTGPU1"
           "llama_driver: failed to load model")
# The context: its KV cache, then its compute buffer.
fault_case(context/tgpu2_kv_cache_oom RC 1 FAIL alloc:2@1 ARGS ${fault_tgpu2}
    EXPECT "TESTGPU1: injected fault: alloc #2[^0-9]" "failed to allocate buffer for kv cache"
           "llama_driver: failed to create context")
fault_case(context/tgpu2_compute_buffer_oom RC 1 FAIL alloc:3@1 ARGS ${fault_tgpu2}
    EXPECT "TESTGPU1: injected fault: alloc #3[^0-9]" "failed to allocate compute"
           "llama_driver: failed to create context")
# The AllReduce's scratch memory, allocated when the first graph is planned: the decode returns
# -2 (GGML_STATUS_ALLOC_FAILED); made again, the plan is built anew and the decode succeeds.
fault_case(decode/tgpu2_allreduce_scratch_oom RC 0 FAIL alloc:4@1 ARGS ${fault_tgpu2} ${retry}
    EXPECT "TESTGPU1: injected fault: alloc #4[^0-9]"
           "meta AllReduce: cannot allocate [0-9]+ bytes of scratch memory on TESTGPU1"
           "decode_error: prompt 0 rc=-2[^0-9]"
    CLEAN ${fault_tgpu2})

# --- a failed or aborted compute ------------------------------------------------------------
# One sub-graph of a decode step fails on one device: llama_decode returns -3 (GGML_STATUS_FAILED),
# libllama drops the step's positions from the KV cache, and the step made again succeeds.
fault_case(decode/tgpu2_compute_failed RC 0 FAIL compute:30@1 ARGS ${fault_tgpu2} ${retry}
    EXPECT "TESTGPU1: injected fault: compute #30[^0-9]" "decode_error: step [0-9]+ rc=-3[^0-9]"
    CLEAN ${fault_tgpu2})
# A device that keeps failing: the decode fails, the driver frees the context and the model
# (under valgrind: nothing left behind).
fault_case(decode/tgpu2_compute_keeps_failing RC 1 FAIL compute:30+@1 ARGS ${fault_tgpu2}
    EXPECT "TESTGPU1: injected fault: compute #30[^0-9]" "llama_driver: llama_decode\\(step [0-9]+\\) failed: -3")
# A backend returning GGML_STATUS_ABORTED: llama_decode returns 2.
fault_case(decode/tgpu2_compute_aborted RC 0 FAIL abort:30@0 ARGS ${fault_tgpu2} ${retry}
    EXPECT "TESTGPU0: injected fault: abort #30[^0-9]" "decode_error: step [0-9]+ rc=2[^0-9]"
    CLEAN ${fault_tgpu2})
# libllama's abort callback mid-step, asked by the CPU backends the meta device runs side by side.
fault_case(decode/cpu2_abort_callback RC 0 ARGS ${fault_cpu2} ${retry} --abort-on-call 200
    EXPECT "abort_callback: call 200 asks to abort[^0-9]" "decode_error: (prompt|step) [0-9]+ rc=2[^0-9]"
    CLEAN ${fault_cpu2})
# The scheduler without the meta device: a layer split's failed and aborted computes.
fault_case(decode/layer_compute_failed RC 0 FAIL compute:3@1 ARGS ${fault_layer} ${retry}
    EXPECT "TESTGPU1: injected fault: compute #3[^0-9]" "decode_error: (prompt|step) [0-9]+ rc=-3[^0-9]"
    CLEAN ${fault_layer})
fault_case(decode/cpu_abort_callback RC 0 ARGS ${fault_base} --devices CPU ${retry} --abort-on-call 5
    EXPECT "abort_callback: call 5 asks to abort[^0-9]" "decode_error: prompt 0 rc=2[^0-9]"
    CLEAN ${fault_base} --devices CPU)

# --- declined copies, no events -------------------------------------------------------------
# Every asynchronous copy into a test device declined from the fifth on, and events that cannot
# be created: the callers take their synchronous paths, with the same results.
fault_case(decode/tgpu2_copies_declined RC 0 FAIL copy:5+ ARGS ${fault_tgpu2}
    EXPECT "injected fault: copy #5[^0-9]" CLEAN ${fault_tgpu2})
fault_case(decode/tgpu2_no_events RC 0 FAIL event:1+ ARGS ${fault_tgpu2}
    EXPECT "injected fault: event #1[^0-9]" CLEAN ${fault_tgpu2})

# --- upstream beside it ----------------------------------------------------------------------
if(TARGET llama_driver_ref)
    # upstream_same(<name> <rule or -> <expected regex> <args..>): upstream survives the fault
    # (the test devices' rule, or the driver's arguments when it is -); ours and upstream's
    # driver, each with it, print the expected line and give the same tokens and bit-identical
    # logits.
    function(upstream_same name rule expect)
        set(env ${fault_env})
        if(NOT rule STREQUAL "-")
            list(APPEND env "GGML_BACKEND_RS_TESTGPU_FAIL=${rule}")
        endif()
        add_test(NAME faults/upstream/${name} COMMAND "${CMAKE_COMMAND}"
            -D "DRIVER_A=$<TARGET_FILE:llama_driver>" -D "DRIVER_B=$<TARGET_FILE:llama_driver_ref>"
            -D "ARGS_A=${ARGN}" -D "ENV_A=${env}" -D "ENV_B=${env}"
            -D "EXPECT_A=${expect}" -D "EXPECT_B=${expect}"
            -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "TOL=0"
            -D "WORK_DIR=${model_dir}/faults/upstream/${name}" -P "${run}")
        ctests_use_model(${fault_model} faults/upstream/${name})
    endfunction()
    upstream_same(tgpu2_compute_failed compute:30@1 "decode_error: step [0-9]+ rc=-3" ${fault_tgpu2} ${retry})
    upstream_same(tgpu2_compute_aborted abort:30@0 "decode_error: step [0-9]+ rc=2" ${fault_tgpu2} ${retry})
    upstream_same(layer_compute_failed compute:3@1 "decode_error: step [0-9]+ rc=-3" ${fault_layer} ${retry})
    upstream_same(cpu_abort_callback - "decode_error: prompt 0 rc=2" ${fault_base} --devices CPU ${retry}
        --abort-on-call 5)
    upstream_same(tgpu2_copies_declined copy:5+ "injected fault: copy #5" ${fault_tgpu2})

    # upstream_aborts(<name> <rule> <message regex>): upstream's meta backend stops the process
    # where ours reports the failure (the faults/load and faults/context cases above).
    function(upstream_aborts name rule expect)
        add_test(NAME faults/upstream/${name} COMMAND "${CMAKE_COMMAND}"
            -D "EXE=$<TARGET_FILE:llama_driver_ref>" -D "ARGS=${fault_tgpu2}"
            -D "ENV=${fault_env};GGML_BACKEND_RS_TESTGPU_FAIL=${rule}" -D "EXPECT=${expect}"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
        ctests_use_model(${fault_model} faults/upstream/${name})
    endfunction()
    # the assertions that stop it, per ggml release
    if(GGML_BACKEND_RS_GGML_RELEASE VERSION_LESS 0.13)
        set(weights_assert "buffer")           # ggml-backend.cpp, ggml_backend_buffer_get_size
                                               # (weights and KV cache)
        set(compute_buffer_assert "buffer")
    else()
        # ggml-backend-meta.cpp (weights, KV cache; from 0.13 on)
        set(weights_assert "meta_buf_ctx->bufs\\[i\\]")
        set(compute_buffer_assert "bufs.back\\(\\) != nullptr")
    endif()
    upstream_aborts(tgpu2_weights_oom_aborts alloc:1@1 "GGML_ASSERT\\(${weights_assert}\\) failed")
    upstream_aborts(tgpu2_kv_cache_oom_aborts alloc:2@1 "GGML_ASSERT\\(${weights_assert}\\) failed")
    upstream_aborts(tgpu2_compute_buffer_oom_aborts alloc:3@1 "GGML_ASSERT\\(${compute_buffer_assert}\\) failed")
endif()

# --- ggml-rpc servers ----------------------------------------------------------------------
# Our RPC client (src/rpc) with a server missing at load, one that dies at each point of a step
# and one that stops answering (ggml 0.24 on, built with GGML_RPC; servers from rpc.cmake, run
# by rpc_run.py): the load fails naming the endpoint; the decode of the step in which the
# server was lost returns -3 (GGML_STATUS_FAILED) within the client's timeouts
# (GGML_BACKEND_RS_RPC_TIMEOUT), never logits nobody computed with success. In tensor mode a
# server lost in one of the step's sub-graphs shows in the staged AllReduce's reads after it;
# one lost in the last sub-graph, and in a layer split one lost in any split, shows when the
# scheduler settles the servers at the end of the compute (one DEVICE_COUNT round trip each:
# backend::Extension::settle). The driver frees everything, under valgrind when it is on.
# The failing server runs TESTGPU0, whose Nth graph compute ends the process or stops it
# (`rpc_server --device test --fail exit:N|hang:N`). Graph computes on one server per step of
# the 2-layer model: 6 in tensor mode (the prompt is computes 1-6, step 0 is 7-12, step 1 13-18;
# its sub-graphs are cut at each layer's attention output and FFN down projection), 1 in a layer
# split (the prompt is compute 1, step 1 is compute 3). Upstream's client beside it aborts, or
# waits with no end (rpc_run.py's time limit stops it).
if(TARGET rpc_server)
    set(rpc_fault_base --model "${fault_gguf}" --threads ${ctests_threads} --n-predict 4)
    set(rpc_fault_tensor ${rpc_fault_base} --flash-attn on --split-mode tensor --rpc @A@,@B@
        --devices RPC0,RPC1)
    # (even: by free memory, the test device's 4 GiB would get no layer next to the CPU's)
    set(rpc_fault_layer ${rpc_fault_base} --split-mode layer --tensor-split 1,1 --rpc @A@,@B@
        --devices RPC0,RPC1)
    set(rpc_fault_layer3 ${rpc_fault_base} --split-mode layer --tensor-split 1,1,1
        --rpc @A@,@B@,@C@ --devices RPC0,RPC1,RPC2)
    set(rpc_fault_missing ${rpc_fault_base} --rpc @X@ --devices RPC0)
    set(rpc_closed "RPC server 127.0.0.1:[0-9]+: [A-Z_]+: connection closed by the server")
    # (the read of a later split's input from the lost server may see it first, GET_TENSOR)
    set(rpc_settled "ggml_backend_sched_graph_compute: RPC server 127.0.0.1:[0-9]+: [A-Z_]+: connection closed by the server")
    function(rpc_failed_in out step)
        set(${out} "llama_driver: llama_decode\\(step ${step}\\) failed: -3" PARENT_SCOPE)
    endfunction()

    # rpc_servers(<out> <server exe> <servers> <fault>): rpc_run.py's arguments for the servers
    # named in <servers> (e.g. "A;B"), each one process; <fault> is `<server>=<rule>` (that
    # server runs TESTGPU0 with the rule) or `-`: then the only endpoint is X, where nothing
    # listens.
    function(rpc_servers out exe servers fault)
        if(fault STREQUAL "-")
            set(${out} --dead X PARENT_SCOPE)
            return()
        endif()
        string(REPLACE "=" ";" fault "${fault}")
        list(GET fault 0 faulty)
        list(GET fault 1 rule)
        set(args "")
        foreach(name IN LISTS servers)
            list(APPEND args --servers "${name}=${exe}:1")
        endforeach()
        list(APPEND args --server-args "${faulty}=--device test --fail ${rule}")
        set(${out} ${args} PARENT_SCOPE)
    endfunction()

    # rpc_fault(<name> <fault> SERVERS <names..> RC <status> ARGS <args..> EXPECT <regex..>
    #           [ENV <VAR=value..>])
    function(rpc_fault name fault)
        cmake_parse_arguments(F "" "RC" "SERVERS;ARGS;EXPECT;ENV" ${ARGN})
        rpc_servers(servers "$<TARGET_FILE:rpc_server>" "${F_SERVERS}" ${fault})
        set(work "${model_dir}/faults/rpc/${name}")
        add_test(NAME faults/rpc/${name} COMMAND "${Python3_EXECUTABLE}" "${rpc_run}"
            --work "${work}" --threads ${ctests_threads} --timeout 240 ${servers} --
            "${CMAKE_COMMAND}" -D "DRIVER=$<TARGET_FILE:llama_driver>" -D "ARGS=${F_ARGS}"
            -D "ENV=${F_ENV}" -D "EXPECT_RC=${F_RC}" -D "EXPECT=${F_EXPECT}" ${fault_vg}
            -D "WORK_DIR=${work}" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
        set_tests_properties(faults/rpc/${name} PROPERTIES TIMEOUT 300)
        ctests_use_model(${fault_model} faults/rpc/${name})
    endfunction()

    rpc_failed_in(step1 1)
    rpc_failed_in(step2 2)
    rpc_fault(missing_at_load - RC 1 ARGS ${rpc_fault_missing}
        EXPECT "RPC server 127.0.0.1:[0-9]+: connect: connection refused"
               "--rpc: cannot use server 127.0.0.1:[0-9]+")
    # tensor mode, server B lost in step 1's first, a middle and its last sub-graph
    rpc_fault(tensor_server_dies_first_subgraph B=exit:13 SERVERS A B RC 1 ARGS ${rpc_fault_tensor}
        EXPECT "${rpc_closed}" "${step1}")
    rpc_fault(tensor_server_dies_middle_subgraph B=exit:15 SERVERS A B RC 1 ARGS ${rpc_fault_tensor}
        EXPECT "${rpc_closed}" "${step1}")
    rpc_fault(tensor_server_dies_last_subgraph B=exit:18 SERVERS A B RC 1 ARGS ${rpc_fault_tensor}
        EXPECT "ggml_backend_sched_graph_compute: RPC server 127.0.0.1:[0-9]+: DEVICE_COUNT: connection closed"
               "${step1}")
    rpc_fault(tensor_server_hangs B=hang:20 SERVERS A B RC 1 ARGS ${rpc_fault_tensor}
        ENV GGML_BACKEND_RS_RPC_TIMEOUT=4
        EXPECT "RPC server 127.0.0.1:[0-9]+: [A-Z_]+: no reply within [0-9]+ s" "${step2}")
    # a layer split, the server of step 1's first, middle (three servers) and last split lost
    rpc_fault(layer_first_split_dies A=exit:3 SERVERS A B RC 1 ARGS ${rpc_fault_layer}
        EXPECT "${rpc_settled}" "${step1}")
    rpc_fault(layer_middle_split_dies B=exit:3 SERVERS A B C RC 1 ARGS ${rpc_fault_layer3}
        EXPECT "${rpc_settled}" "${step1}")
    rpc_fault(layer_last_split_dies B=exit:3 SERVERS A B RC 1 ARGS ${rpc_fault_layer}
        EXPECT "${rpc_settled}" "${step1}")

    if(TARGET rpc_server_ref AND TARGET llama_driver_ref)
        # upstream's client over servers of its build: aborts where ours fails the call. Its
        # sockets write without MSG_NOSIGNAL: a request sent after the dead server's reset kills
        # the process by SIGPIPE before its own check, and whether a step's write comes before or
        # after that reset is timing (under load the test saw both). The driver runs with SIGPIPE
        # ignored, so each lost server ends in the client's own abort, the outcome to compare.
        function(rpc_upstream_aborts name rule expect)
            rpc_servers(servers "$<TARGET_FILE:rpc_server_ref>" "A;B" ${rule})
            add_test(NAME faults/upstream/rpc_${name} COMMAND "${Python3_EXECUTABLE}" "${rpc_run}"
                --work "${model_dir}/faults/upstream/rpc_${name}" --threads ${ctests_threads}
                --timeout 240 ${servers} --
                "${CMAKE_COMMAND}" -D "EXE=$<TARGET_FILE:llama_driver_ref>" -D "ARGS=${ARGN}"
                -D "EXPECT=${expect}" -D IGNORE_SIGPIPE=ON
                -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
            set_tests_properties(faults/upstream/rpc_${name} PROPERTIES TIMEOUT 300)
            ctests_use_model(${fault_model} faults/upstream/rpc_${name})
        endfunction()
        rpc_upstream_aborts(missing_at_load_aborts - "Failed to connect to 127.0.0.1:[0-9]+"
            ${rpc_fault_missing})
        rpc_upstream_aborts(tensor_server_dies_aborts B=exit:20
            "Remote RPC server crashed or returned malformed response" ${rpc_fault_tensor})
        # ... and waits for a server that stops answering until something else stops it: here
        # rpc_run.py, after 10 s
        rpc_servers(servers "$<TARGET_FILE:rpc_server_ref>" "A;B" B=hang:20)
        add_test(NAME faults/upstream/rpc_tensor_server_hangs_waits COMMAND "${Python3_EXECUTABLE}"
            "${rpc_run}" --work "${model_dir}/faults/upstream/rpc_hangs" --threads ${ctests_threads}
            --timeout 10 ${servers} -- "$<TARGET_FILE:llama_driver_ref>" ${rpc_fault_tensor})
        set_tests_properties(faults/upstream/rpc_tensor_server_hangs_waits PROPERTIES TIMEOUT 120
            PASS_REGULAR_EXPRESSION "rpc_run: the command ran past 10 s")
        ctests_use_model(${fault_model} faults/upstream/rpc_tensor_server_hangs_waits)
    endif()
endif()
