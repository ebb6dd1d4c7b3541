# cmake -P valgrind_option_test.cmake
# The option GGML_BACKEND_RS_VALGRIND as a configure reads it (valgrind_option.cmake), for each
# value with valgrind found and not found: a default configure (AUTO) on a host without valgrind
# must go on without the memory tests, and only an explicit ON may stop it.

set(here "${CMAKE_CURRENT_LIST_DIR}")
# case <option> <valgrind> <expected: ON, OFF or "error">
function(case option valgrind expected)
    execute_process(COMMAND "${CMAKE_COMMAND}" "-DOPTION=${option}" "-DVALGRIND=${valgrind}"
            -P "${here}/valgrind_option.cmake"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    set(what "GGML_BACKEND_RS_VALGRIND=${option}, valgrind ${valgrind}")
    if(expected STREQUAL "error")
        if(rc EQUAL 0 OR NOT err MATCHES "GGML_BACKEND_RS_VALGRIND=${option} but valgrind is not found")
            message(FATAL_ERROR "${what}: expected the configure to stop, got (${rc}): ${out}${err}")
        endif()
    elseif(NOT rc EQUAL 0 OR NOT err MATCHES "valgrind tests: ${expected}\n")
        message(FATAL_ERROR "${what}: expected valgrind tests ${expected}, got (${rc}): ${out}${err}")
    endif()
    message("${what}: ${expected}")
endfunction()

set(found /usr/bin/valgrind)
set(missing VALGRIND-NOTFOUND)
case(AUTO ${missing} OFF)
case(AUTO ${found} ON)
case(auto ${missing} OFF)
case(ON ${missing} error)
case(ON ${found} ON)
case(YES ${missing} error)
case(OFF ${missing} OFF)
case(OFF ${found} OFF)
case(0 ${found} OFF)
