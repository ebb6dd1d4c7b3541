# The reference for differential tests: the same llama.cpp tree's pristine ggml (ggml-base, ggml,
# ggml-cpu, shared) and libllama on top of it (any supported version: 0.9.11, 0.26.0),
# with the same options as the spliced build, built as an ExternalProject. Defines the imported
# targets ggml_ref::ggml-base, ggml_ref::ggml, ggml_ref::ggml-cpu, ggml_ref::llama (and
# ggml_ref::ggml-rpc with GGML_RPC) and sets GGML_REFERENCE_BUILD_DIR and GGML_REFERENCE_LIBDIR.
# It is configured from llama.cpp's top level, exactly as the spliced ggml is (the pin's ggml/
# cannot be configured on its own: the crates.io package lacks ggml/ggml.pc.in), but only those
# targets are built.
#
# GGML_BACKEND_RS_REFERENCE_LIBDIR: a directory that already holds the reference libraries
# (e.g. <shared-build>/ggml-reference/build/bin); then nothing is built here. When it is another
# tree's reference build, that build must come from the same llama.cpp source, have the RPC
# backend exactly when this tree has it and AddressSanitizer exactly when this tree has it (all
# checked).

include_guard(GLOBAL)
include(ExternalProject)

# Stops configuring unless the reference build in build_dir has its cache option `option` set as
# `want` says (both read as booleans, so ON, TRUE, 1 and an unset OFF compare alike). `libdir` and
# `ours` ("NAME=value" of this tree's setting) go into the message.
function(_ggml_ref_require_same build_dir option want libdir ours)
    file(STRINGS "${build_dir}/CMakeCache.txt" line REGEX "^${option}:BOOL=")
    string(REGEX REPLACE "^[^=]*=" "" theirs "${line}")
    set(theirs_on OFF)
    if(theirs)
        set(theirs_on ON)
    endif()
    set(want_on OFF)
    if(want)
        set(want_on ON)
    endif()
    if(NOT theirs_on STREQUAL want_on)
        if(theirs STREQUAL "")
            set(theirs "(unset)")
        endif()
        message(FATAL_ERROR "GGML_BACKEND_RS_REFERENCE_LIBDIR: ${libdir} was built with "
                            "${option}=${theirs}, this tree has ${ours}")
    endif()
endfunction()

function(ggml_backend_rs_add_reference llama_cpp_dir)
    set(GGML_BACKEND_RS_REFERENCE_LIBDIR "" CACHE PATH
        "Existing directory with the reference libggml*.so (skips building the reference)")
    set(names ggml-base ggml ggml-cpu llama)
    set(dl_args "")
    if(GGML_BACKEND_DL)
        # Backends loaded at run time: upstream's loader (in its libggml) is the reference. It
        # is built without CPU modules of its own; the tests run it where this build's CPU
        # variants are (upstream's search includes the working directory), so both loaders
        # choose among the same modules, compiled once from the pin's ggml-cpu.
        set(names ggml-base ggml llama)
        set(dl_args -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF)
    elseif(GGML_RPC)
        list(APPEND names ggml-rpc)
    endif()

    if(GGML_BACKEND_RS_REFERENCE_LIBDIR)
        set(libdir "${GGML_BACKEND_RS_REFERENCE_LIBDIR}")
        foreach(n IN LISTS names)
            if(NOT EXISTS "${libdir}/lib${n}.so")
                message(FATAL_ERROR "GGML_BACKEND_RS_REFERENCE_LIBDIR: ${libdir}/lib${n}.so is missing")
            endif()
        endforeach()
        message(STATUS "ggml-backend-rs: reference ggml from ${libdir}")
        # A reference built by another tree of this project: its llama.cpp build dir is the parent.
        cmake_path(GET libdir PARENT_PATH build_dir)
        if(NOT EXISTS "${build_dir}/ggml/src/CMakeFiles")
            set(build_dir "")
        elseif(EXISTS "${build_dir}/CMakeCache.txt")
            file(STRINGS "${build_dir}/CMakeCache.txt" home REGEX "^CMAKE_HOME_DIRECTORY:INTERNAL=")
            string(REGEX REPLACE "^[^=]*=" "" home "${home}")
            file(REAL_PATH "${llama_cpp_dir}" want)
            if(EXISTS "${home}")
                file(REAL_PATH "${home}" home)
            endif()
            if(NOT home STREQUAL want)
                message(FATAL_ERROR "GGML_BACKEND_RS_REFERENCE_LIBDIR: ${libdir} was built from "
                                    "${home}, this tree builds ${llama_cpp_dir}")
            endif()
            # Its registry lists RPC when it was built with it: this tree must match.
            set(has_rpc OFF)
            if(GGML_RPC AND NOT GGML_BACKEND_DL)
                set(has_rpc ON)
            endif()
            _ggml_ref_require_same("${build_dir}" GGML_RPC "${has_rpc}" "${libdir}"
                                   "GGML_RPC=${GGML_RPC}")
            # Compiled alike, or the bit-identical comparisons fail: AddressSanitizer in both or
            # in neither.
            _ggml_ref_require_same("${build_dir}" GGML_SANITIZE_ADDRESS
                                   "${GGML_BACKEND_RS_ASAN}" "${libdir}"
                                   "GGML_BACKEND_RS_ASAN=${GGML_BACKEND_RS_ASAN}")
        endif()
    else()
        set(prefix "${CMAKE_BINARY_DIR}/ggml-reference")
        set(build_dir "${prefix}/build")
        set(libdir "${build_dir}/bin")
        set(byproducts "")
        foreach(n IN LISTS names)
            list(APPEND byproducts "${libdir}/lib${n}.so")
        endforeach()
        if(CMAKE_BUILD_TYPE)
            set(build_type "${CMAKE_BUILD_TYPE}")
        else()
            set(build_type Release)
        endif()
        # The reference gets the same compute backends as the spliced build.
        set(backend_args "")
        foreach(opt GGML_CUDA GGML_CUDA_NCCL NCCL_INCLUDE_DIR NCCL_LIBRARY CMAKE_CUDA_ARCHITECTURES GGML_BLAS
                    GGML_RPC)
            if(DEFINED ${opt} AND NOT "${${opt}}" STREQUAL "")
                list(APPEND backend_args "-D${opt}=${${opt}}")
            endif()
        endforeach()
        if(GGML_BACKEND_DL)
            # no modules of its own, CUDA's neither (see above)
            set(backend_args -DGGML_CUDA=OFF)
        endif()
        # With AddressSanitizer as the spliced build has it, so that the two compute alike (bit
        # for bit): upstream's own options, passed either way so that turning it off reaches an
        # existing reference too.
        if(GGML_BACKEND_RS_ASAN)
            set(asan ON)
        else()
            set(asan OFF)
        endif()
        list(APPEND backend_args -DGGML_SANITIZE_ADDRESS=${asan} -DLLAMA_SANITIZE_ADDRESS=${asan})
        # libllama's model sources batched as the spliced build's are (cmake/unity-models.cmake);
        # passed either way so that turning it off reaches an existing reference too.
        if(GGML_BACKEND_RS_UNITY_MODELS)
            list(APPEND backend_args
                "-DCMAKE_PROJECT_llama.cpp_INCLUDE=${CMAKE_CURRENT_FUNCTION_LIST_DIR}/unity-models.cmake")
        else()
            list(APPEND backend_args "-DCMAKE_PROJECT_llama.cpp_INCLUDE=")
        endif()
        ExternalProject_Add(ggml_reference
            SOURCE_DIR "${llama_cpp_dir}"
            BINARY_DIR "${build_dir}"
            PREFIX "${prefix}"
            CMAKE_ARGS
                -DCMAKE_BUILD_TYPE=${build_type}
                -DCMAKE_C_COMPILER=${CMAKE_C_COMPILER}
                -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
                -DBUILD_SHARED_LIBS=ON
                -DGGML_NATIVE=${GGML_NATIVE}
                -DGGML_OPENMP=${GGML_OPENMP}
                -DLLAMA_BUILD_COMMON=OFF
                -DLLAMA_BUILD_TESTS=OFF
                -DLLAMA_BUILD_TOOLS=OFF
                -DLLAMA_BUILD_EXAMPLES=OFF
                -DLLAMA_BUILD_SERVER=OFF
                -DLLAMA_BUILD_APP=OFF # ggml 0.26 (its default, ON, needs app/, which the crate lacks)
                ${backend_args}
                ${dl_args}
            BUILD_COMMAND "${CMAKE_COMMAND}" --build <BINARY_DIR> --target ${names}
            INSTALL_COMMAND ""
            BUILD_BYPRODUCTS ${byproducts}
            USES_TERMINAL_CONFIGURE TRUE
            USES_TERMINAL_BUILD TRUE)
    endif()

    # The pristine llama.cpp build tree (its objects), for ctests/abi; empty when unknown.
    set(GGML_REFERENCE_BUILD_DIR "${build_dir}" PARENT_SCOPE)
    # Where the reference libraries are (ctests/asan/upstream-leaks.supp names its RPC library).
    set(GGML_REFERENCE_LIBDIR "${libdir}" PARENT_SCOPE)

    foreach(n IN LISTS names)
        add_library(ggml_ref::${n} SHARED IMPORTED GLOBAL)
        set_target_properties(ggml_ref::${n} PROPERTIES
            IMPORTED_LOCATION "${libdir}/lib${n}.so"
            INTERFACE_INCLUDE_DIRECTORIES "${llama_cpp_dir}/ggml/include;${llama_cpp_dir}/include"
            INTERFACE_COMPILE_DEFINITIONS "GGML_SHARED;GGML_BACKEND_SHARED")
        if(TARGET ggml_reference)
            add_dependencies(ggml_ref::${n} ggml_reference)
        endif()
    endforeach()
endfunction()
