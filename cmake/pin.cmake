# Locates a pinned llama.cpp source (cmake/ggml-version.cmake lists the pins and their ggml
# releases). A pin is a folder tools/pin/<pin> of one of two kinds:
#   * a cargo manifest (Cargo.toml, Cargo.lock) depending on crates.io's llama-cpp-sys-2 =<pin>:
#     fetched with cargo (only the crates.io registry is needed); the tree is llama.cpp/ inside
#     the unpacked package;
#   * sdist.cmake, naming a source archive on PyPI (URL, SHA256, the tree's path inside it), for
#     trees that ship in a Python package (llama-cpp-python vendors llama.cpp, tools included):
#     downloaded once, checked against its hash and unpacked into GGML_BACKEND_RS_PIN_CACHE
#     (default: ~/.cache/ggml-backend-rs/pins).
#
# ggml_backend_rs_locate_pin(<pin> <out-var>) sets <out-var> to the llama.cpp directory.

include_guard(GLOBAL)

# The tree of an sdist pin (see above): downloaded, verified and unpacked once.
function(_ggml_backend_rs_locate_sdist pin desc out_var)
    set(SDIST_URL "")
    set(SDIST_SHA256 "")
    set(SDIST_TREE "")
    include("${desc}")
    foreach(var SDIST_URL SDIST_SHA256 SDIST_TREE)
        if(${var} STREQUAL "")
            message(FATAL_ERROR "ggml-backend-rs: ${desc} sets no ${var}")
        endif()
    endforeach()
    set(cache "$ENV{GGML_BACKEND_RS_PIN_CACHE}")
    if(cache STREQUAL "")
        set(cache "$ENV{HOME}/.cache/ggml-backend-rs/pins")
    endif()
    set(root "${cache}/${pin}")
    set(dir "${root}/${SDIST_TREE}")
    if(NOT EXISTS "${root}/.complete")
        cmake_path(GET SDIST_URL FILENAME archive_name)
        set(archive "${cache}/${archive_name}")
        message(STATUS "ggml-backend-rs: fetching ${SDIST_URL}")
        file(DOWNLOAD "${SDIST_URL}" "${archive}" EXPECTED_HASH "SHA256=${SDIST_SHA256}"
             STATUS status TLS_VERIFY ON)
        list(GET status 0 code)
        if(NOT code EQUAL 0)
            list(GET status 1 why)
            message(FATAL_ERROR "ggml-backend-rs: downloading pin ${pin} (${SDIST_URL}) failed: ${why}")
        endif()
        file(REMOVE_RECURSE "${root}")
        file(ARCHIVE_EXTRACT INPUT "${archive}" DESTINATION "${root}" PATTERNS "${SDIST_TREE}")
        file(REMOVE "${archive}")
        file(TOUCH "${root}/.complete")
    endif()
    if(NOT EXISTS "${dir}/ggml/src/ggml-backend.cpp")
        message(FATAL_ERROR "ggml-backend-rs: pin ${pin} has no llama.cpp/ggml source tree at ${dir}")
    endif()
    set(${out_var} "${dir}" PARENT_SCOPE)
endfunction()

function(ggml_backend_rs_locate_pin pin out_var)
    set(pins_dir "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/../tools/pin")
    cmake_path(NORMAL_PATH pins_dir)
    if(EXISTS "${pins_dir}/${pin}/sdist.cmake")
        _ggml_backend_rs_locate_sdist("${pin}" "${pins_dir}/${pin}/sdist.cmake" dir)
        set(${out_var} "${dir}" PARENT_SCOPE)
        return()
    endif()
    set(manifest "${pins_dir}/${pin}/Cargo.toml")
    if(NOT EXISTS "${manifest}")
        file(GLOB pins RELATIVE "${pins_dir}" "${pins_dir}/*")
        list(JOIN pins ", " pins)
        message(FATAL_ERROR "ggml-backend-rs: no pin ${pin} (tools/pin/${pin}); pins: ${pins}")
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
