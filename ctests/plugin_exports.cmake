# cmake -DMODULE=<libggml-backend-rs-tp.so> -P plugin_exports.cmake
# The plugin's dynamic symbol table defines exactly ggml's two plugin entry points: none of the
# library's ggml_backend_* functions (which would meet the host's) and nothing of Rust's std.
if(NOT DEFINED MODULE)
    message(FATAL_ERROR "plugin_exports.cmake: -DMODULE=... is required")
endif()
find_program(NM NAMES nm REQUIRED)
execute_process(COMMAND "${NM}" -D --defined-only "${MODULE}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "nm failed (${rc}): ${err}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${out}")
set(names "")
foreach(line IN LISTS lines)
    string(REGEX REPLACE "^.* " "" name "${line}")
    list(APPEND names "${name}")
endforeach()
list(SORT names)
message("defined dynamic symbols: ${names}")
if(NOT names STREQUAL "ggml_backend_init;ggml_backend_score")
    message(FATAL_ERROR "the plugin must define ggml_backend_init and ggml_backend_score only, not: ${names}")
endif()
