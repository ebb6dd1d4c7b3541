# cmake -DOURS=<exe> -DREF=<exe> -DWORK_DIR=<dir> -P run_differential.cmake
# Runs both builds of a differential driver (each writes its result to the file named by its one
# argument) and fails unless the two files are byte-identical.

foreach(var OURS REF WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run_differential.cmake: -D${var}=... is required")
    endif()
endforeach()
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

foreach(side ours ref)
    string(TOUPPER "${side}" var)
    execute_process(COMMAND "${${var}}" "${WORK_DIR}/${side}.bin"
        RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    message("--- ${side}: ${${var}}\n${out}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "${side} driver failed (${rc})")
    endif()
endforeach()

execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files
    "${WORK_DIR}/ours.bin" "${WORK_DIR}/ref.bin" RESULT_VARIABLE differ)
if(NOT differ EQUAL 0)
    file(SIZE "${WORK_DIR}/ours.bin" n_ours)
    file(SIZE "${WORK_DIR}/ref.bin" n_ref)
    message(FATAL_ERROR "outputs differ: ${WORK_DIR}/ours.bin (${n_ours} bytes) vs "
                        "${WORK_DIR}/ref.bin (${n_ref} bytes)")
endif()
message("identical")
