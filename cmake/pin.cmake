# Locates a pinned llama.cpp source: the tree inside the crates.io package llama-cpp-sys-2 =<pin>
# (cmake/ggml-version.cmake lists the pins: 0.1.146 ships ggml 0.9.11, 0.1.161 ggml 0.26.0).
#
# ggml_backend_rs_locate_pin(<pin> <out-var>) fetches the package with cargo through the manifest
# in tools/pin/<pin> (one manifest per pin; only the crates.io registry is needed) and sets
# <out-var> to the llama.cpp directory inside the unpacked package.

include_guard(GLOBAL)

function(ggml_backend_rs_locate_pin pin out_var)
    set(pins_dir "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../tools/pin")
    cmake_path(NORMAL_PATH pins_dir)
    set(manifest "${pins_dir}/${pin}/Cargo.toml")
    if(NOT EXISTS "${manifest}")
        file(GLOB pins RELATIVE "${pins_dir}" "${pins_dir}/*/Cargo.toml")
        list(TRANSFORM pins REPLACE "/Cargo.toml$" "")
        list(JOIN pins ", " pins)
        message(FATAL_ERROR "ggml-backend-rs: no pin ${pin} (${manifest}); pins: ${pins}")
    endif()
    find_program(GGML_BACKEND_RS_CARGO cargo HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin" REQUIRED)

    execute_process(
        COMMAND "${GGML_BACKEND_RS_CARGO}" fetch --locked --manifest-path "${manifest}"
        RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "cargo fetch of the llama.cpp pin failed (${manifest}):\n${err}")
    endif()
    execute_process(
        COMMAND "${GGML_BACKEND_RS_CARGO}" metadata --locked --offline --format-version 1
                --manifest-path "${manifest}"
        RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "cargo metadata of the llama.cpp pin failed (${manifest}):\n${err}")
    endif()

    string(JSON n_packages LENGTH "${json}" packages)
    math(EXPR last "${n_packages} - 1")
    set(pkg_manifest "")
    foreach(i RANGE ${last})
        string(JSON name GET "${json}" packages ${i} name)
        string(JSON version GET "${json}" packages ${i} version)
        if(name STREQUAL "llama-cpp-sys-2" AND version STREQUAL pin)
            string(JSON pkg_manifest GET "${json}" packages ${i} manifest_path)
            break()
        endif()
    endforeach()
    if(pkg_manifest STREQUAL "")
        message(FATAL_ERROR "cargo metadata does not list llama-cpp-sys-2 ${pin} (${manifest})")
    endif()

    cmake_path(GET pkg_manifest PARENT_PATH pkg_dir)
    set(dir "${pkg_dir}/llama.cpp")
    if(NOT EXISTS "${dir}/ggml/src/ggml-backend.cpp")
        message(FATAL_ERROR "llama-cpp-sys-2 at ${pkg_dir} has no llama.cpp/ggml source tree")
    endif()
    set(${out_var} "${dir}" PARENT_SCOPE)
endfunction()
