# cmake -DOURS=<exe> -DREF=<exe> -DARGS=<a;b> [-DREF_ARGS=<a;b>] -P compare_stdout.cmake
# Runs a driver built against this library and against upstream with the same arguments (REF
# with REF_ARGS when given); both must succeed and print the same standard output.

foreach(var OURS REF)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "compare_stdout.cmake: -D${var}=... is required")
    endif()
endforeach()
if(NOT DEFINED REF_ARGS)
    set(REF_ARGS "${ARGS}")
endif()
set(OURS_ARGS "${ARGS}")
foreach(side OURS REF)
    execute_process(COMMAND "${${side}}" ${${side}_ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out_${side} ERROR_VARIABLE err)
    message("--- ${side}: ${${side}} ${${side}_ARGS}\n${out_${side}}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${side} failed (${rc})")
    endif()
endforeach()
if(NOT out_OURS STREQUAL out_REF)
    message(FATAL_ERROR "outputs differ")
endif()
