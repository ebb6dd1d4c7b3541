# The RPC backend (GGML_RPC, ggml 0.26): libllama over ggml-rpc servers on the loopback address.
# Included from ctests/CMakeLists.txt after sched_llama.cmake (llama_driver, `model_dir`, `run`)
# when the build has target ggml-rpc.
#
# rpc_server (ctests/rpc_server.c) serves the CPU backend of its build; it is built against this
# library (`rpc_server`, compiled against our headers like the other programs of this build) and
# against upstream's pristine build (`rpc_server_ref`). ctests/rpc_run.py starts the servers on
# free ports, waits for them, runs llama_run.cmake with their endpoints in place of `@NAME@`, and
# stops them.
#
#   headers/ggml-rpc-uses-ours   ggml-rpc and rpc_server read our headers (ggml-backend.h, and
#       ggml-rpc also ggml-backend-impl.h), from ninja's dependency log
#   rpc/layer/<model>/two_servers_vs_upstream   --split-mode layer over RPC0,RPC1: ours (client
#       and two servers of this build) against upstream (client and two servers of the pristine
#       build): the same tokens, bit-identical logits
#   rpc/layer/<model>/vs_cpu                    the same split (ours) against one local CPU:
#       the same tokens and bit-identical logits, as the scheduler's layer split over the test
#       devices (suite sched of ctests/matrix/tests.txt, tolerance 0)
#   rpc/tensor/<model>/{two_servers_vs_cpu2,three_servers_vs_cpu3,cpu_and_server_vs_cpu2}
#       --split-mode tensor over 2 and 3 servers and over a local CPU with one server: the
#       tokens and bit-identical logits of the same split over as many local CPUs, reduced by
#       the staged path (its plan log demanded); two_servers_vs_upstream: against upstream's
#       meta backend over servers of its own build, bit-identical

find_package(Python3 REQUIRED COMPONENTS Interpreter)
find_package(Threads REQUIRED)

add_executable(rpc_server rpc_server.c doubles/test_device.c)
target_include_directories(rpc_server PRIVATE ${GGML_BACKEND_RS_API_INCLUDES}
    "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(rpc_server PRIVATE ggml ggml-rpc ggml-cpu Threads::Threads)
if(TARGET ggml_ref::ggml-rpc)
    add_executable(rpc_server_ref rpc_server.c doubles/test_device.c)
    target_include_directories(rpc_server_ref PRIVATE ${ref_private_includes}
        "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
    target_link_libraries(rpc_server_ref PRIVATE ggml_ref::ggml-rpc ggml_ref::ggml ggml_ref::ggml-base
        ggml_ref::ggml-cpu Threads::Threads)
endif()

# ggml-rpc (upstream's source) and the server must have been compiled against our generated
# headers, as ggml-cpu and llama are (headers/ggml-cpu-and-llama-use-ours in CMakeLists.txt).
if(EXISTS "${GGML_BACKEND_RS_OUR_INCLUDE_DIR}/ggml-backend.h" AND CMAKE_GENERATOR MATCHES "Ninja")
    add_test(NAME headers/ggml-rpc-uses-ours
        COMMAND "${CMAKE_COMMAND}"
            -D "NINJA=${CMAKE_MAKE_PROGRAM}"
            -D "BUILD_DIR=${CMAKE_BINARY_DIR}"
            -D "OUR_INCLUDE=${GGML_BACKEND_RS_OUR_INCLUDE_DIR}"
            -D "TARGET_DIRS=ggml-rpc.dir;rpc_server.dir"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/check_headers_used.cmake")
endif()

set(rpc_run "${CMAKE_CURRENT_SOURCE_DIR}/rpc_run.py")
set(rpc_model tiny-gqa-f32)
set(rpc_base --model "${model_dir}/${rpc_model}.gguf" --threads ${ctests_threads} --n-predict 12)
set(rpc_layer ${rpc_base} --split-mode layer --devices RPC0,RPC1)

# rpc_test(<split> <name> SERVERS <NAME=EXE:K..> DRIVER_A <exe> [DRIVER_B <exe>]
#          ARGS_A <args..> ARGS_B <args..> [ENV_B <VAR=value..>] [EXPECT_B <regex>]):
# llama_run.cmake with tolerance 0 next to the servers (each with ctests_threads threads).
function(rpc_test split name)
    cmake_parse_arguments(R "" "DRIVER_A;DRIVER_B;EXPECT_B" "SERVERS;ARGS_A;ARGS_B;ENV_B" ${ARGN})
    set(extra "")
    if(R_EXPECT_B)
        list(APPEND extra -D "EXPECT_B=${R_EXPECT_B}")
    endif()
    set(servers "")
    foreach(s IN LISTS R_SERVERS)
        list(APPEND servers --servers "${s}")
    endforeach()
    if(NOT R_DRIVER_B)
        set(R_DRIVER_B "${R_DRIVER_A}")
    endif()
    set(test rpc/${split}/${rpc_model}/${name})
    set(work "${model_dir}/rpc-${split}-${name}")
    add_test(NAME ${test} COMMAND "${Python3_EXECUTABLE}" "${rpc_run}"
        --work "${work}" --threads ${ctests_threads} --timeout 300 ${servers} --
        "${CMAKE_COMMAND}" -D "DRIVER_A=${R_DRIVER_A}" -D "DRIVER_B=${R_DRIVER_B}"
        -D "ARGS_A=${R_ARGS_A}" -D "ARGS_B=${R_ARGS_B}" -D "ENV_B=${R_ENV_B}" ${extra} -D TOL=0
        -D "COMPARE=$<TARGET_FILE:compare_logits>" -D "WORK_DIR=${work}" -P "${run}")
    set_tests_properties(${test} PROPERTIES TIMEOUT 420)
    ctests_use_model(${rpc_model} ${test})
endfunction()

if(TARGET rpc_server_ref AND TARGET llama_driver_ref)
    rpc_test(layer two_servers_vs_upstream
        SERVERS "A=$<TARGET_FILE:rpc_server>:2" "B=$<TARGET_FILE:rpc_server_ref>:2"
        DRIVER_A "$<TARGET_FILE:llama_driver>" DRIVER_B "$<TARGET_FILE:llama_driver_ref>"
        ARGS_A ${rpc_layer} --rpc @A@
        ARGS_B ${rpc_layer} --rpc @B@)
endif()
rpc_test(layer vs_cpu
    SERVERS "B=$<TARGET_FILE:rpc_server>:2"
    DRIVER_A "$<TARGET_FILE:llama_driver>"
    ARGS_A ${rpc_base} --split-mode none --devices CPU
    ARGS_B ${rpc_layer} --rpc @B@)

# Tensor mode over RPC servers. Our meta device reduces through the host there (the staged
# path: RPC has no copies between servers), with the host path's arithmetic, so the logits are
# bit-identical to the same split over local CPUs; the plan log must show the staged path.
set(rpc_tensor ${rpc_base} --flash-attn on --split-mode tensor)
set(staged_plan "AllReduce +[0-9]+ of '[^']+' .[0-9]+ bytes.: Staged")
# <name>:<servers>:<local devices of run A>:<devices of run B>
foreach(case two_servers_vs_cpu2:2:CPU,CPU:RPC0,RPC1 three_servers_vs_cpu3:3:CPU,CPU,CPU:RPC0,RPC1,RPC2
             cpu_and_server_vs_cpu2:1:CPU,CPU:CPU,RPC0)
    string(REPLACE ":" ";" case "${case}")
    list(GET case 0 name)
    list(GET case 1 k)
    list(GET case 2 devs_a)
    list(GET case 3 devs_b)
    rpc_test(tensor ${name}
        SERVERS "B=$<TARGET_FILE:rpc_server>:${k}"
        DRIVER_A "$<TARGET_FILE:llama_driver>"
        ARGS_A ${rpc_tensor} --devices ${devs_a}
        ARGS_B ${rpc_tensor} --rpc @B@ --devices ${devs_b} --verbose
        ENV_B GGML_META_DEBUG=1 EXPECT_B "${staged_plan}")
endforeach()
if(TARGET rpc_server_ref AND TARGET llama_driver_ref)
    # upstream's meta backend over its own servers: the same bits (two devices add in one order)
    rpc_test(tensor two_servers_vs_upstream
        SERVERS "A=$<TARGET_FILE:rpc_server>:2" "B=$<TARGET_FILE:rpc_server_ref>:2"
        DRIVER_A "$<TARGET_FILE:llama_driver>" DRIVER_B "$<TARGET_FILE:llama_driver_ref>"
        ARGS_A ${rpc_tensor} --rpc @A@ --devices RPC0,RPC1
        ARGS_B ${rpc_tensor} --rpc @B@ --devices RPC0,RPC1)
endif()
