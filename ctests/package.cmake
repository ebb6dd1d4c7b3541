# cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<ctests/package> -DOUR_HEADER=<include/ggml-backend.h>
#       -DWORK_DIR=<dir> -DSHARED=<ON|OFF> -DCC=<c compiler> [-DCONSUMER_FLAGS=<flags>]
#       [-DBACKENDS=<ggml-cpu,...> -DOPENMP=<ON|OFF>] -P package.cmake
# `cmake --install` of the build into WORK_DIR/prefix, then the consumer program built against
# the installed tree — through find_package(ggml-backend-rs) and through pkg-config, and in a
# static build also with the archives named by path and no flag of ours (BACKENDS, OPENMP) —
# and run: each must add two vectors correctly on the installed CPU backend. The installed
# ggml-backend.h must be ours. CONSUMER_FLAGS: compile and link flags the consumer needs besides
# the package's (an AddressSanitizer build's -fsanitize=address).

foreach(var BUILD_DIR SOURCE_DIR OUR_HEADER WORK_DIR SHARED CC)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "package.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")

function(run what)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${what} failed (${rc}):\n${out}${err}")
    endif()
    message("--- ${what}\n${out}")
endfunction()

run("cmake --install" "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files "${OUR_HEADER}" "${prefix}/include/ggml-backend.h"
    RESULT_VARIABLE same)
if(NOT same EQUAL 0)
    message(FATAL_ERROR "the installed ggml-backend.h is not the crate's generated header")
endif()
foreach(f include/ggml-ext.h lib/cmake/ggml-backend-rs/ggml-backend-rs-config.cmake
          lib/pkgconfig/ggml-backend-rs.pc)
    if(NOT EXISTS "${prefix}/${f}")
        message(FATAL_ERROR "not installed: ${f}")
    endif()
endforeach()
set(ENV{LD_LIBRARY_PATH} "${prefix}/lib")

set(consumer_args "")
if(CONSUMER_FLAGS)
    set(consumer_args "-DCMAKE_C_FLAGS=${CONSUMER_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${CONSUMER_FLAGS}")
endif()

# find_package
run("configure the consumer (find_package)" "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${WORK_DIR}/cmake-build"
    -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=${prefix}" ${consumer_args})
run("build the consumer (find_package)" "${CMAKE_COMMAND}" --build "${WORK_DIR}/cmake-build")
run("run the consumer (find_package)" "${WORK_DIR}/cmake-build/consumer")

# pkg-config
find_program(PKG_CONFIG NAMES pkg-config pkgconf REQUIRED)
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
set(static_flag "")
if(NOT SHARED)
    set(static_flag --static)
endif()
execute_process(COMMAND "${PKG_CONFIG}" --cflags --libs ${static_flag} ggml-backend-rs
    RESULT_VARIABLE rc OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ggml-backend-rs failed:\n${err}")
endif()
message("--- pkg-config --cflags --libs ${static_flag} ggml-backend-rs\n${flags}")
separate_arguments(flags UNIX_COMMAND "${flags} ${CONSUMER_FLAGS}")
run("build the consumer (pkg-config)" "${CC}" "${SOURCE_DIR}/consumer.c" -o "${WORK_DIR}/consumer-pc" ${flags})
run("run the consumer (pkg-config)" "${WORK_DIR}/consumer-pc")

# Static: the installed archives named by path, with none of the package's flags, as cargo's
# llama-cpp-sys-2, Meson or a Makefile link them. libggml.a's one object, the list of compiled-in
# backends, is referenced only by ggml core's ggml.c (cmake/ggml-backend-rs-keep-builtins.h);
# without that the linker drops it and the consumer finds no devices. The archives refer to each
# other (ggml core and the Rust layer), so they are one group; cargo, which bundles a -sys crate's
# archives into its rlib, links them as one archive, which the linker also searches until done.
if(NOT SHARED)
    foreach(var BACKENDS OPENMP)
        if(NOT DEFINED ${var})
            message(FATAL_ERROR "package.cmake: -D${var}=... is required for a static build")
        endif()
    endforeach()
    set(archives "${prefix}/lib/libggml.a" "${prefix}/lib/libggml-base.a")
    string(REPLACE "," ";" BACKENDS "${BACKENDS}")
    foreach(b IN LISTS BACKENDS)
        list(APPEND archives "${prefix}/lib/lib${b}.a")
    endforeach()
    list(APPEND archives "${prefix}/lib/libggml_backend_rs.a")
    set(system -lstdc++ -lm -lpthread -ldl -lrt -lutil)
    if(OPENMP)
        list(APPEND system -fopenmp)
    endif()
    separate_arguments(extra UNIX_COMMAND "${CONSUMER_FLAGS}")
    run("build the consumer (archives by path, one group)" "${CC}" "${SOURCE_DIR}/consumer.c"
        -o "${WORK_DIR}/consumer-path" "-I${prefix}/include" -Wl,--start-group ${archives}
        -Wl,--end-group ${system} ${extra})
    run("run the consumer (archives by path, one group)" "${WORK_DIR}/consumer-path")
endif()
