# ggml_backend_rs_valgrind_enabled(<out> <option> <valgrind>): whether the memory tests run
# under valgrind, from the option GGML_BACKEND_RS_VALGRIND and find_program's result:
#   OFF (or any false value)   no
#   AUTO                       when valgrind was found
#   ON (or any other true value) yes; stops the configure when valgrind was not found
# Included by ctests/CMakeLists.txt; ctests/valgrind_option_test.cmake checks every case.
function(ggml_backend_rs_valgrind_enabled out option valgrind)
    string(TOUPPER "${option}" mode)
    if(mode STREQUAL "AUTO")
        set(enabled OFF)
        if(valgrind)
            set(enabled ON)
        endif()
    elseif(NOT option)
        set(enabled OFF)
    elseif(valgrind)
        set(enabled ON)
    else()
        message(FATAL_ERROR "GGML_BACKEND_RS_VALGRIND=${option} but valgrind is not found "
            "(apt-get install valgrind, or configure with -DGGML_BACKEND_RS_VALGRIND=AUTO or OFF)")
    endif()
    set(${out} ${enabled} PARENT_SCOPE)
endfunction()

# cmake -DOPTION=<value> -DVALGRIND=<path or VALGRIND-NOTFOUND> -P valgrind_option.cmake
# prints "valgrind tests: ON|OFF" (or stops as the configure would): for the test of this file.
if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
    ggml_backend_rs_valgrind_enabled(enabled "${OPTION}" "${VALGRIND}")
    message("valgrind tests: ${enabled}")
endif()
