# llama.cpp's own programs on this library: llama-server, llama-completion and llama-bench, built
# from this tree unchanged, the way a user with a llama.cpp checkout builds them on the library
# (the project include, cmake/ggml-backend-rs.cmake), as an ExternalProject in <build>/llama-tools.
# On with GGML_BACKEND_RS_LLAMA_TOOLS=ON, in a tree that ships llama.cpp's tools (the crates.io
# trees strip them; llama-cpp-python's, GGML_BACKEND_RS_PIN=llama-cpp-python-0.3.36, has them).
# Included from ctests/CMakeLists.txt after plugin.cmake and the valgrind options (`model_dir`,
# `plugin`, `valgrind_on`).
#
# The programs' own code (libllama-common, the server, the bench) is compiled against upstream's
# headers (only ggml and libllama get ours), so the same binaries with upstream's libraries first
# on LD_LIBRARY_PATH (the reference build's) are upstream's programs: that is "upstream" below.
# llama.cpp's --device refuses CPU devices, so the programs get GPU-typed ones: the test devices
# as a backend module (libggml-testgpu.so, GGML_BACKEND_PATH), or the plugin's TP0 over CPU,CPU.
#
#   tools/server          ctests/tools/llama_tools_check.py server: llama-server, 4 slots, 32
#                         greedy requests 8 at a time with shared prefixes, a prompt longer than
#                         the context, a body that is not JSON, a client gone mid-stream, /health,
#                         /props, /metrics: ours -sm tensor over TESTGPU0,TESTGPU1, upstream
#                         --device TESTGPU0 and upstream with the plugin's TP0 all answer as ours
#                         with --device TESTGPU0 does
#   tools/server_upstream_tensor_aborts   upstream's own tensor mode over the test devices
#                         aborts in its meta device during warmup (what a user gets today)
#   tools/bench           llama-bench -sm tensor -dev TESTGPU0/TESTGPU1 (ours) and -dev TP0
#                         (upstream with the plugin), its JSON and markdown parsed
#   tools/completion      llama-completion: ours in tensor mode generates upstream's tokens
#   tools/fit/even, tools/fit/3_1   llama.cpp's --fit (common_fit_params, ctests/tools/fit_check.cpp)
#                         in upstream's host through the plugin's TP0 over TESTGPU0,TESTGPU1
#                         capped at 64 MiB each, split evenly and 3:1: the context fit picks
#                         loads and decodes, and is within 5 % of the largest that does
#   tools/server_valgrind llama-server in tensor mode under valgrind memcheck, 40 requests:
#                         nothing definitely lost (with the valgrind tests)
# A long run (2 000 requests and more, resident memory against upstream's server) is not a
# test: `llama_tools_check.py soak` (docs/testing.md).

set(GGML_BACKEND_RS_LLAMA_TOOLS OFF CACHE BOOL
    "build llama.cpp's llama-server, llama-completion and llama-bench on this library and test them")
if(NOT GGML_BACKEND_RS_LLAMA_TOOLS)
    return()
endif()
if(NOT EXISTS "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/tools/server/CMakeLists.txt")
    message(FATAL_ERROR "GGML_BACKEND_RS_LLAMA_TOOLS: ${GGML_BACKEND_RS_LLAMA_CPP_DIR} has no "
        "tools/server (the crates.io trees strip llama.cpp's tools); use a whole llama.cpp tree, "
        "e.g. GGML_BACKEND_RS_PIN=llama-cpp-python-0.3.36")
endif()
if(NOT BUILD_SHARED_LIBS OR NOT TARGET ggml_ref::llama OR NOT TARGET ggml-backend-rs-tp)
    message(FATAL_ERROR "GGML_BACKEND_RS_LLAMA_TOOLS needs a shared build with the reference "
        "build and the plugin")
endif()
find_package(Python3 REQUIRED COMPONENTS Interpreter)

include(ExternalProject)
set(tools_dir "${CMAKE_BINARY_DIR}/llama-tools")
set(tools_bin "${tools_dir}/bin")
set(tools_programs llama-server llama-completion llama-bench)
set(tools_byproducts "")
foreach(p IN LISTS tools_programs)
    list(APPEND tools_byproducts "${tools_bin}/${p}")
endforeach()
# the libraries fit_check links (built with the programs)
set(tools_libs "")
foreach(l llama-common llama ggml-base ggml)
    list(APPEND tools_libs "${tools_bin}/${CMAKE_SHARED_LIBRARY_PREFIX}${l}${CMAKE_SHARED_LIBRARY_SUFFIX}")
endforeach()
list(APPEND tools_byproducts ${tools_libs})
ExternalProject_Add(llama_tools
    SOURCE_DIR "${GGML_BACKEND_RS_LLAMA_CPP_DIR}"
    BINARY_DIR "${tools_dir}"
    PREFIX "${CMAKE_BINARY_DIR}/llama-tools-prefix"
    CMAKE_ARGS
        -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
        -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
        -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
        "-DCMAKE_PROJECT_ggml_INCLUDE=${GGML_BACKEND_RS_ROOT}/cmake/ggml-backend-rs.cmake"
        # the crate this tree already builds: cargo finds it up to date
        "-DGGML_BACKEND_RS_CARGO_TARGET_DIR=${GGML_BACKEND_RS_CARGO_TARGET_DIR}"
        -DBUILD_SHARED_LIBS=ON
        -DGGML_NATIVE=${GGML_NATIVE}
        -DGGML_OPENMP=${GGML_OPENMP}
        -DLLAMA_BUILD_TOOLS=ON
        -DLLAMA_BUILD_SERVER=ON
        -DLLAMA_BUILD_TESTS=OFF
        -DLLAMA_BUILD_EXAMPLES=OFF
        -DLLAMA_CURL=OFF
        -DLLAMA_USE_PREBUILT_UI=OFF
        -DLLAMA_OPENSSL=OFF # the tests speak HTTP on the loopback address
    BUILD_COMMAND "${CMAKE_COMMAND}" --build <BINARY_DIR> --target ${tools_programs}
    INSTALL_COMMAND ""
    BUILD_BYPRODUCTS ${tools_byproducts}
    USES_TERMINAL_CONFIGURE TRUE
    USES_TERMINAL_BUILD TRUE)
# The crate first, so the tools' cargo step finds it built.
add_dependencies(llama_tools ggml_backend_rs_cargo)

# The test devices as a backend module: TESTGPU0, TESTGPU1 computing with the host's CPU backend.
# Compiled as a third party's module is, against upstream's headers; it runs in both hosts.
add_library(ggml-testgpu MODULE doubles/test_device_module.c doubles/test_device.c)
target_include_directories(ggml-testgpu PRIVATE "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/src"
    "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(ggml-testgpu PRIVATE ggml-base ggml-cpu)
set_target_properties(ggml-testgpu PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden)

get_target_property(upstream_llama ggml_ref::llama IMPORTED_LOCATION)
cmake_path(GET upstream_llama PARENT_PATH upstream_libdir)
set(tools_model tiny-gqa-f32)
set(tools_args --bin "${tools_bin}" --model "${model_dir}/${tools_model}.gguf"
    --module "$<TARGET_FILE:ggml-testgpu>" --upstream-libdir "${upstream_libdir}" --plugin "${plugin}")
foreach(what server bench completion)
    add_test(NAME tools/${what} COMMAND "${Python3_EXECUTABLE}"
        "${CMAKE_CURRENT_SOURCE_DIR}/tools/llama_tools_check.py" ${what} ${tools_args}
        --workdir "${CMAKE_CURRENT_BINARY_DIR}/tools/${what}")
    set_tests_properties(tools/${what} PROPERTIES
        PASS_REGULAR_EXPRESSION "llama_tools_check: ${what}: OK" TIMEOUT 900)
    ctests_use_model(${tools_model} tools/${what})
endforeach()

if(valgrind_on)
    add_test(NAME tools/server_valgrind COMMAND "${Python3_EXECUTABLE}"
        "${CMAKE_CURRENT_SOURCE_DIR}/tools/llama_tools_check.py" soak --valgrind --requests 40
        --clients 4 --request-timeout 1200
        ${tools_args} --workdir "${CMAKE_CURRENT_BINARY_DIR}/tools/server_valgrind")
    # Under valgrind on a machine busy with the other tests a request can take minutes: the bound
    # is wide, the wait is for the answer itself.
    set_tests_properties(tools/server_valgrind PROPERTIES
        PASS_REGULAR_EXPRESSION "llama_tools_check: soak: OK" TIMEOUT 2400)
    ctests_use_model(${tools_model} tools/server_valgrind)
endif()

# Upstream's tensor mode: the meta device of upstream's ggml aborts while the server warms up.
add_test(NAME tools/server_upstream_tensor_aborts COMMAND "${CMAKE_COMMAND}"
    -D "EXE=${tools_bin}/llama-server"
    "-DARGS=-m;${model_dir}/${tools_model}.gguf;--host;127.0.0.1;--port;0;-np;4;-c;2048;-t;1;-fa;on;-sm;tensor;--device;TESTGPU0,TESTGPU1"
    "-DENV=LD_LIBRARY_PATH=${upstream_libdir};GGML_BACKEND_PATH=$<TARGET_FILE:ggml-testgpu>"
    -D "EXPECT=fatal error" -P "${expect_abort}")
set_tests_properties(tools/server_upstream_tensor_aborts PROPERTIES TIMEOUT 300)
ctests_use_model(${tools_model} tools/server_upstream_tensor_aborts)

# llama.cpp's --fit through the plugin: fit_check is built against the tools tree's common/
# (what llama-server's default `-fit on` calls) and runs in upstream's host with our plugin. The
# test devices get 64 MiB each; fit may leave 1 MiB free per device (its margin), about 2 % of
# the context, so a context within 5 % of the largest that loads is within reach only when the
# device reports what its members can hold and its buffers take what they report.
add_executable(fit_check tools/fit_check.cpp)
target_include_directories(fit_check PRIVATE "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/common"
    "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/include" "${GGML_BACKEND_RS_LLAMA_CPP_DIR}/ggml/include")
target_link_libraries(fit_check PRIVATE ${tools_libs})
add_dependencies(fit_check llama_tools)
foreach(split even 3_1)
    string(REPLACE "_" "," shares "${split}")
    if(split STREQUAL "even")
        set(shares "")
    endif()
    add_test(NAME tools/fit/${split} COMMAND fit_check fit "${model_dir}/fit-f16.gguf"
        "$<TARGET_FILE:ggml-testgpu>" "${plugin}" 1)
    set_tests_properties(tools/fit/${split} PROPERTIES
        ENVIRONMENT "LD_LIBRARY_PATH=${upstream_libdir};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1;GGML_BACKEND_RS_TP_SPLIT=${shares};GGML_BACKEND_RS_TESTGPU_MEMORY_MIB=64"
        PASS_REGULAR_EXPRESSION "fit_check: OK" TIMEOUT 600)
    ctests_use_model(fit-f16 tools/fit/${split})
endforeach()

# A split that leaves a device with more than it can hold fails the load while the host
# allocates the weights, naming the device and the bytes missing: no abort, nothing leaked (under
# valgrind with the valgrind tests). fit-f16's weights split 3:1 over two 12 MiB test devices:
# the first would need 15 MiB.
set(split_beyond_vg "")
if(valgrind_on)
    set(split_beyond_vg -D "VALGRIND=${VALGRIND}")
endif()
add_test(NAME tools/fit/split_beyond_device COMMAND "${CMAKE_COMMAND}"
    -D "DRIVER=$<TARGET_FILE:fit_check>"
    "-DARGS=try;${model_dir}/fit-f16.gguf;$<TARGET_FILE:ggml-testgpu>;${plugin};256"
    "-DENV=LD_LIBRARY_PATH=${upstream_libdir};GGML_BACKEND_RS_TP=TESTGPU0,TESTGPU1;GGML_BACKEND_RS_TP_SPLIT=3,1;GGML_BACKEND_RS_TESTGPU_MEMORY_MIB=12"
    -D EXPECT_RC=3
    "-DEXPECT=meta buffer: TESTGPU0 cannot hold its slices of the weights: '[^']+' brings them to [0-9]+ bytes and it has 12582912 free \\([0-9]+ bytes missing\\);llama_model_load: error loading model: unable to allocate TP0 buffer"
    ${split_beyond_vg}
    -D "WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/tools/split_beyond_device" -P "${CMAKE_CURRENT_SOURCE_DIR}/fault_run.cmake")
set_tests_properties(tools/fit/split_beyond_device PROPERTIES TIMEOUT 900)
ctests_use_model(fit-f16 tools/fit/split_beyond_device)
