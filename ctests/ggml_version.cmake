# ggml_version/*: cmake/ggml-version.cmake on a ggml tree of a given version (a CMakeLists.txt
# that sets GGML_VERSION_MAJOR/MINOR/PATCH, written to WORK). A supported version reports its
# cargo feature; any other stops the configure with a message naming the supported versions and
# their pins. The test requires the output (line breaks of CMake's wrapping removed) to match
# EXPECT.
#
#   cmake -D ROOT=<repo> -D WORK=<dir> -D VERSION=<x.y.z> -D EXPECT=<regex> -P ggml_version.cmake
cmake_minimum_required(VERSION 3.24)

if(DEFINED DETECT) # the inner run: detection only
    set(GGML_BACKEND_RS_ROOT "${ROOT}")
    include("${ROOT}/cmake/ggml-version.cmake")
    ggml_backend_rs_detect_ggml_version("${WORK}/ggml")
    message(STATUS "features: '${GGML_BACKEND_RS_CARGO_FEATURE_ARGS}'")
    return()
endif()

string(REPLACE "." ";" parts "${VERSION}")
list(GET parts 0 major)
list(GET parts 1 minor)
list(GET parts 2 patch)
file(WRITE "${WORK}/ggml/CMakeLists.txt"
    "set(GGML_VERSION_MAJOR ${major})\nset(GGML_VERSION_MINOR ${minor})\nset(GGML_VERSION_PATCH ${patch})\n")
execute_process(
    COMMAND "${CMAKE_COMMAND}" -D DETECT=1 -D "ROOT=${ROOT}" -D "WORK=${WORK}" -P "${CMAKE_CURRENT_LIST_FILE}"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REGEX REPLACE "\n *" " " text "${out}${err}")
if(NOT text MATCHES "${EXPECT}")
    message(FATAL_ERROR "ggml ${VERSION}: exit ${rc}, output does not match '${EXPECT}':\n${out}${err}")
endif()
message(STATUS "ggml ${VERSION}: exit ${rc}, as expected")
