# Export-list checks.
#
# MODE=ours (ctest abi_exports): every symbol of EXPECTED (upstream-exports-<version>.txt) must be defined
# by LIBS (our ggml-base; in a static build also the Rust archive, which libggml-base.a does not
# contain), the meta functions included: upstream's ggml-backend-meta.cpp is not compiled, so
# the Rust crate must provide them (a second definition would fail to link anyway).
#
# MODE=upstream (ctest abi_exports_upstream_list): EXPECTED must equal the global symbols that
# upstream's backend-layer objects define in the pristine build REFERENCE_DIR: C-linkage
# `ggml_*` names and C++ free functions `_Z<n>ggml_*`; templates, classes and the internal
# dl_* helpers are not part of the ABI.
#
#   cmake -D MODE=ours -D NM=<nm> -D EXPECTED=<file> -D "LIBS=<lib>;..." -P exports.cmake
#   cmake -D MODE=upstream -D NM=<nm> -D EXPECTED=<file> -D REFERENCE_DIR=<dir> -P exports.cmake
#   (MODE=upstream -D WRITE=ON rewrites EXPECTED from the reference objects; its header names
#   the version: -D "SOURCE=llama-cpp-sys-2 =0.1.161, ggml 0.26.0".)
#
# The reference objects need not come from a whole build: upstream's four files compiled alone
# (g++ -std=c++17 -fPIC -c -I<ggml>/include -I<ggml>/src, into <dir>/ggml/src/CMakeFiles/
# ggml-base.dir/<file>.o and ggml.dir/<file>.o as below) define the same global symbols.

cmake_minimum_required(VERSION 3.20)

if(NOT NM)
    set(NM nm)
endif()

# Defined global symbols of `file` (the dynamic table of a shared library).
function(defined_symbols file out_var)
    set(args --defined-only -g)
    if(file MATCHES "\\.so(\\.[0-9]+)*$")
        list(APPEND args -D)
    endif()
    execute_process(COMMAND "${NM}" ${args} "${file}"
        OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${NM} ${args} ${file} failed: ${err}")
    endif()
    string(REPLACE "\n" ";" lines "${out}")
    set(syms "")
    foreach(line IN LISTS lines)
        # "<address> <type> <name>"; archives also list "<member>:" headers and blank lines
        if(line MATCHES "^[0-9a-fA-F]+ ([A-Za-z]) (.+)$")
            list(APPEND syms "${CMAKE_MATCH_2}")
        endif()
    endforeach()
    set(${out_var} "${syms}" PARENT_SCOPE)
endfunction()

function(read_expected out_var)
    file(STRINGS "${EXPECTED}" lines)
    set(syms "")
    foreach(line IN LISTS lines)
        if(NOT line MATCHES "^#" AND NOT line STREQUAL "")
            list(APPEND syms "${line}")
        endif()
    endforeach()
    set(${out_var} "${syms}" PARENT_SCOPE)
endfunction()

if(EXISTS "${EXPECTED}" OR NOT WRITE)
    read_expected(expected)
endif()
list(LENGTH expected n_expected)

if(MODE STREQUAL "ours")
    set(ours "")
    foreach(lib IN LISTS LIBS)
        if(NOT EXISTS "${lib}")
            message(FATAL_ERROR "no such library: ${lib}")
        endif()
        defined_symbols("${lib}" syms)
        list(APPEND ours ${syms})
    endforeach()
    list(REMOVE_DUPLICATES ours)

    set(missing "")
    set(placeholders "")
    foreach(sym IN LISTS expected)
        if(NOT sym IN_LIST ours)
            list(APPEND missing "${sym}")
        elseif(sym MATCHES "^ggml_backend_sched_")
            list(APPEND placeholders "${sym}")
        endif()
    endforeach()
    set(extra "")
    foreach(sym IN LISTS ours)
        if(sym MATCHES "^(ggml_backend_|_Z[0-9]+ggml_backend_)" AND NOT sym IN_LIST expected)
            list(APPEND extra "${sym}")
        endif()
    endforeach()

    list(LENGTH placeholders n_placeholders)
    message(STATUS "${n_placeholders} ggml_backend_sched_* symbols present (placeholders)")
    foreach(sym IN LISTS extra)
        message(STATUS "also exported, not in the list (ggml core or ours): ${sym}")
    endforeach()
    if(missing)
        list(LENGTH missing n_missing)
        list(JOIN missing "\n  " missing_text)
        message(FATAL_ERROR "${n_missing} of ${n_expected} upstream exports missing from ${LIBS}:\n  ${missing_text}")
    endif()
    message(STATUS "all ${n_expected} upstream exports present")

elseif(MODE STREQUAL "upstream")
    set(objects
        ggml-base.dir/ggml-backend.cpp.o
        ggml-base.dir/ggml-backend-meta.cpp.o
        ggml.dir/ggml-backend-reg.cpp.o
        ggml.dir/ggml-backend-dl.cpp.o)
    set(upstream "")
    foreach(obj IN LISTS objects)
        # a llama.cpp build has ggml/ inside; a ggml build does not
        set(path "")
        foreach(base "${REFERENCE_DIR}/ggml/src/CMakeFiles" "${REFERENCE_DIR}/src/CMakeFiles")
            if(EXISTS "${base}/${obj}")
                set(path "${base}/${obj}")
                break()
            endif()
        endforeach()
        if(NOT path)
            message(FATAL_ERROR "reference build ${REFERENCE_DIR} has no ${obj} "
                                "(expected under ggml/src/CMakeFiles or src/CMakeFiles)")
        endif()
        defined_symbols("${path}" syms)
        foreach(sym IN LISTS syms)
            if(sym MATCHES "^(ggml_|_Z[0-9]+ggml_)")
                list(APPEND upstream "${sym}")
            endif()
        endforeach()
    endforeach()
    list(REMOVE_DUPLICATES upstream)
    list(SORT upstream)
    list(LENGTH upstream n_upstream)

    if(WRITE)
        if(NOT SOURCE)
            message(FATAL_ERROR "WRITE=ON needs -D \"SOURCE=llama-cpp-sys-2 =<pin>, ggml <version>\"")
        endif()
        list(JOIN upstream "\n" text)
        file(WRITE "${EXPECTED}"
"# Global symbols defined by upstream's ggml-backend.cpp, ggml-backend-meta.cpp,
# ggml-backend-reg.cpp and ggml-backend-dl.cpp (${SOURCE}):
# C-linkage ggml_* names and C++ free functions (_Z<n>ggml_*: 0.9.11's two meta functions of
# ggml-ext.h). Checked against a pristine build by ctest abi_exports_upstream_list; regenerate with
#   cmake -D MODE=upstream -D WRITE=ON -D \"SOURCE=${SOURCE}\" -D REFERENCE_DIR=<build>
#         -D EXPECTED=<this file> -P ctests/abi/exports.cmake
${text}
")
        message(STATUS "wrote ${n_upstream} symbols to ${EXPECTED}")
        return()
    endif()

    set(diff "")
    foreach(sym IN LISTS upstream)
        if(NOT sym IN_LIST expected)
            string(APPEND diff "  only upstream: ${sym}\n")
        endif()
    endforeach()
    foreach(sym IN LISTS expected)
        if(NOT sym IN_LIST upstream)
            string(APPEND diff "  only in ${EXPECTED}: ${sym}\n")
        endif()
    endforeach()
    if(diff)
        message(FATAL_ERROR "${EXPECTED} differs from upstream's objects in ${REFERENCE_DIR}:\n${diff}")
    endif()
    message(STATUS "${EXPECTED}: ${n_expected} symbols, equal to upstream's objects")
else()
    message(FATAL_ERROR "MODE must be 'ours' or 'upstream'")
endif()
