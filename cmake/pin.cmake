# Locates the pinned llama.cpp source (crates.io package llama-cpp-sys-2 =0.1.146, ggml 0.9.11).
#
# ggml_backend_rs_locate_pin(<out-var>) fetches the package with cargo through the manifest in
# tools/pin (so only the crates.io registry is needed) and sets <out-var> to the llama.cpp
# directory inside the unpacked package.

function(ggml_backend_rs_locate_pin out_var)
    set(manifest "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../tools/pin/Cargo.toml")
    cmake_path(NORMAL_PATH manifest)
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
        if(name STREQUAL "llama-cpp-sys-2")
            string(JSON pkg_manifest GET "${json}" packages ${i} manifest_path)
            break()
        endif()
    endforeach()
    if(pkg_manifest STREQUAL "")
        message(FATAL_ERROR "cargo metadata does not list llama-cpp-sys-2 (${manifest})")
    endif()

    cmake_path(GET pkg_manifest PARENT_PATH pkg_dir)
    set(dir "${pkg_dir}/llama.cpp")
    if(NOT EXISTS "${dir}/ggml/src/ggml-backend.cpp")
        message(FATAL_ERROR "llama-cpp-sys-2 at ${pkg_dir} has no llama.cpp/ggml source tree")
    endif()
    set(${out_var} "${dir}" PARENT_SCOPE)
endfunction()
