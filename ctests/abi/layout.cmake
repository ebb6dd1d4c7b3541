# abi_layout: runs the layout program built against our generated headers (OURS) and the one
# built against upstream's (UPSTREAM); their outputs must be identical. With RUST_FILE, also
# requires src/version/class_<abi class, lower case>/layout_check.rs to assert exactly the facts UPSTREAM prints (the Rust
# mirrors are then checked by the Rust compiler).
#
#   cmake -D OURS=<exe> -D UPSTREAM=<exe> [-D RUST_FILE=<layout_check.rs>] -P layout.cmake
# Regenerate the Rust file (x86_64 Linux only):
#   cmake -D UPSTREAM=<build>/ctests/abi/abi_layout_upstream
#         -D WRITE_RUST=src/version/class_<abi class, lower case>/layout_check.rs -P ctests/abi/layout.cmake

cmake_minimum_required(VERSION 3.20)

function(run_layout exe out_var)
    execute_process(COMMAND "${exe}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${exe} failed (${rc}): ${err}")
    endif()
    set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# The Rust assertions equivalent to the layout program's output.
function(rust_checks text out_var)
    set(body "")
    string(REPLACE "\n" ";" lines "${text}")
    foreach(line IN LISTS lines)
        if(line STREQUAL "")
            continue()
        elseif(line MATCHES "^sizeof\\((struct|enum) ([a-z0-9_]+)\\) = ([0-9]+)$")
            string(APPEND body "    assert!(size_of::<${CMAKE_MATCH_2}>() == ${CMAKE_MATCH_3});\n")
        elseif(line MATCHES "^alignof\\(struct ([a-z0-9_]+)\\) = ([0-9]+)$")
            string(APPEND body "    assert!(align_of::<${CMAKE_MATCH_1}>() == ${CMAKE_MATCH_2});\n")
        elseif(line MATCHES "^offsetof\\(struct ([a-z0-9_]+), ([a-z0-9_]+)\\) = ([0-9]+)$")
            set(field "${CMAKE_MATCH_2}")
            if(field STREQUAL "type" OR field STREQUAL "async") # Rust keywords
                string(APPEND field "_")
            endif()
            string(APPEND body "    assert!(offset_of!(${CMAKE_MATCH_1}, ${field}) == ${CMAKE_MATCH_3});\n")
        elseif(line MATCHES "^enum ([a-z0-9_]+) ([A-Z0-9_]+) = (-?[0-9]+)$")
            string(APPEND body "    assert!(${CMAKE_MATCH_1}::${CMAKE_MATCH_2} as i64 == ${CMAKE_MATCH_3});\n")
        elseif(line MATCHES "^const ([A-Z0-9_]+) = (-?[0-9]+)$")
            string(APPEND body "    assert!(${CMAKE_MATCH_1} as i64 == ${CMAKE_MATCH_2});\n")
        else()
            message(FATAL_ERROR "layout output line not understood: '${line}'")
        endif()
    endforeach()
    set(${out_var}
"//! Compile-time proof that the `#[repr(C)]` mirrors have the C layouts and values of this ABI
//! class on x86_64 Linux. Generated from the output of ctests/abi/layout.c (compiled against
//! upstream's headers) by ctests/abi/layout.cmake; the ctest `abi_layout` fails when it is stale.
//! Regenerate: cmake -D UPSTREAM=<build>/ctests/abi/abi_layout_upstream
//!     -D WRITE_RUST=src/version/class_<abi class, lower case>/layout_check.rs -P ctests/abi/layout.cmake

#![cfg(all(target_arch = \"x86_64\", target_os = \"linux\"))]

use std::mem::{align_of, offset_of, size_of};

use super::*;
use crate::abi::*;

const _: () = {
${body}};
" PARENT_SCOPE)
endfunction()

if(DEFINED WRITE_RUST)
    run_layout("${UPSTREAM}" up)
    rust_checks("${up}" rust)
    file(WRITE "${WRITE_RUST}" "${rust}")
    message(STATUS "wrote ${WRITE_RUST}")
    return()
endif()

run_layout("${OURS}" ours)
run_layout("${UPSTREAM}" up)
string(REPLACE "\n" ";" ours_lines "${ours}")
string(REPLACE "\n" ";" up_lines "${up}")
string(STRIP "${up}" up_stripped)
string(REPLACE "\n" ";" up_stripped "${up_stripped}")
list(LENGTH up_stripped n)
if(NOT ours STREQUAL up)
    set(diff "")
    foreach(line IN LISTS up_lines)
        if(NOT line IN_LIST ours_lines)
            string(APPEND diff "  upstream: ${line}\n")
        endif()
    endforeach()
    foreach(line IN LISTS ours_lines)
        if(NOT line IN_LIST up_lines)
            string(APPEND diff "  ours:     ${line}\n")
        endif()
    endforeach()
    message(FATAL_ERROR "layouts differ between our headers and upstream's:\n${diff}")
endif()
message(STATUS "our headers: ${n} sizes, offsets and values equal upstream's")

if(DEFINED RUST_FILE)
    rust_checks("${up}" expected)
    file(READ "${RUST_FILE}" actual)
    if(NOT actual STREQUAL expected)
        message(FATAL_ERROR "${RUST_FILE} does not assert what the C compiler reports; regenerate:\n"
            "  cmake -D UPSTREAM=${UPSTREAM} -D WRITE_RUST=${RUST_FILE} -P ${CMAKE_CURRENT_LIST_FILE}\n"
            "then rebuild the crate: a failing assertion there is a real layout mismatch")
    endif()
    message(STATUS "${RUST_FILE}: up to date")
endif()
