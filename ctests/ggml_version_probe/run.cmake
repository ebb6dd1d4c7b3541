# ggml_version/probe/*: the version check of cmake/ggml-version.cmake in project mode, where it
# asks the compilers what a tree's headers say, on a copy of the tree's headers (ggml/include,
# ggml/src/*.h, include/llama.h) with its version and one change of its ABI:
#   VERSION  "same" (the tree's) or "unlisted" (the tree's with 100 added to the patch level)
#   CHANGE   none; field (a field added to struct ggml_backend_dev_caps: a layout, no fact);
#            function (a new GGML_API function in ggml-backend.h); uid (struct ggml_cgraph's
#            `uid` removed, or added where the tree has none: the fact CGRAPH_UID)
# The configure's output (CMake's line wrapping undone) must match EXPECT, and it must fail
# when FAIL is ON.
#
#   cmake -D ROOT=<repo> -D TREE=<llama.cpp tree> -D WORK=<dir> -D GENERATOR=<cmake -G>
#         -D VERSION=same|unlisted
#         -D CHANGE=<change> -D EXPECT=<regex> -D FAIL=ON|OFF -P run.cmake
cmake_minimum_required(VERSION 3.24)

# The copies are files of their own, never links into the tree (a tree may be a farm of
# symbolic links): a change below must not reach the original.
file(REMOVE_RECURSE "${WORK}")
function(copy_headers pattern dest)
    file(GLOB files "${pattern}")
    foreach(f IN LISTS files)
        cmake_path(GET f FILENAME name)
        file(READ "${f}" content)
        file(WRITE "${dest}/${name}" "${content}")
    endforeach()
endfunction()
copy_headers("${TREE}/ggml/include/*.h" "${WORK}/tree/ggml/include")
copy_headers("${TREE}/ggml/src/*.h" "${WORK}/tree/ggml/src")
copy_headers("${TREE}/include/llama.h" "${WORK}/tree/include")

file(STRINGS "${TREE}/ggml/CMakeLists.txt" lines REGEX "^[ \t]*set\\(GGML_VERSION_(MAJOR|MINOR|PATCH) ")
set(cmake_lists "")
foreach(line IN LISTS lines)
    if(VERSION STREQUAL "unlisted" AND line MATCHES "GGML_VERSION_PATCH +([0-9]+)")
        math(EXPR patch "${CMAKE_MATCH_1} + 100")
        set(line "set(GGML_VERSION_PATCH ${patch})")
    endif()
    string(APPEND cmake_lists "${line}\n")
endforeach()
file(WRITE "${WORK}/tree/ggml/CMakeLists.txt" "${cmake_lists}")

# Inserts <text> after the first <anchor> in <file>.
function(insert_after file anchor text)
    file(READ "${file}" content)
    string(FIND "${content}" "${anchor}" at)
    if(at EQUAL -1)
        message(FATAL_ERROR "${file} has no '${anchor}'")
    endif()
    string(LENGTH "${anchor}" n)
    math(EXPR at "${at} + ${n}")
    string(SUBSTRING "${content}" 0 ${at} head)
    string(SUBSTRING "${content}" ${at} -1 tail)
    file(WRITE "${file}" "${head}${text}${tail}")
endfunction()

set(headers "${WORK}/tree/ggml")
if(CHANGE STREQUAL "field")
    insert_after("${headers}/include/ggml-backend.h" "struct ggml_backend_dev_caps {" "\n        int probe_extra;")
elseif(CHANGE STREQUAL "function")
    insert_after("${headers}/include/ggml-backend.h" "extern \"C\" {"
        "\n#endif\n    GGML_API void ggml_backend_probe_new_function(void);\n#ifdef __cplusplus")
elseif(CHANGE STREQUAL "uid")
    file(READ "${headers}/src/ggml-impl.h" impl)
    if(impl MATCHES "uint64_t uid;")
        string(REPLACE "uint64_t uid;" "uint64_t generation;" impl "${impl}")
        file(WRITE "${headers}/src/ggml-impl.h" "${impl}")
    else()
        insert_after("${headers}/src/ggml-impl.h" "struct ggml_cgraph {" "\n    uint64_t uid;")
    endif()
elseif(NOT CHANGE STREQUAL "none")
    message(FATAL_ERROR "unknown CHANGE ${CHANGE}")
endif()

execute_process(
    COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_CURRENT_LIST_DIR}" -B "${WORK}/build" -G "${GENERATOR}"
        -D "ROOT=${ROOT}" -D "TREE=${WORK}/tree"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REGEX REPLACE "\n *" " " text "${err}${out}")
if(NOT text MATCHES "${EXPECT}")
    message(FATAL_ERROR "exit ${rc}, output does not match '${EXPECT}':\n${text}")
endif()
if(FAIL AND rc EQUAL 0)
    message(FATAL_ERROR "the configure succeeded; it must stop:\n${out}${err}")
elseif(NOT FAIL AND NOT rc EQUAL 0)
    message(FATAL_ERROR "the configure failed (${rc}):\n${out}${err}")
endif()
message(STATUS "exit ${rc}, as expected")
