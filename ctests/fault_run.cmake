# cmake -DDRIVER=<llama_driver> -DARGS=<a;b> [-DENV=<VAR=value;..>] -DEXPECT_RC=<status>
#       [-DEXPECT=<regex;regex..>] [-DREJECT=<regex>] [-DVALGRIND=<valgrind>]
#       [-DCLEAN_ARGS=<a;b> -DCOMPARE=<compare_logits>] -DWORK_DIR=<dir> -P fault_run.cmake
# (an empty CLEAN_ARGS is none)
# One run of the driver with a fault injected (ENV: the test devices' GGML_BACKEND_RS_TESTGPU_FAIL,
# or ARGS: --abort-on-call). It passes when:
#   * the driver exits with status EXPECT_RC (a signal, an abort included, always fails);
#   * its output (stdout and stderr) matches every regular expression of EXPECT, none of REJECT;
#   * with VALGRIND: memcheck found no error and no block definitely lost (see valgrind.cmake),
#     so a load, context or decode that failed left nothing behind (valgrind_memcheck.cmake);
#   * with CLEAN_ARGS: the driver run again without the fault (CLEAN_ARGS, no ENV) printed the
#     same tokens line and bit-identical logits (--logits-out of both, compare_logits 0): a
#     decode that failed and was made again gives what a run without the fault gives.

foreach(var DRIVER ARGS EXPECT_RC WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "fault_run.cmake: -D${var}=... is required")
    endif()
endforeach()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(ENV{GGML_NO_BACKTRACE} 1)

set(logits "")
if(CLEAN_ARGS)
    set(logits --logits-out "${WORK_DIR}/fault.bin")
endif()
set(cmd "${DRIVER}" ${ARGS} ${logits})
if(VALGRIND)
    include("${CMAKE_CURRENT_LIST_DIR}/valgrind_memcheck.cmake")
    set(cmd "${VALGRIND}" ${valgrind_memcheck_options} ${cmd})
endif()
foreach(item IN LISTS ENV)
    string(REGEX REPLACE "=.*" "" var "${item}")
    string(REGEX REPLACE "^[^=]*=" "" value "${item}")
    set(ENV{${var}} "${value}")
endforeach()
execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
foreach(item IN LISTS ENV)
    string(REGEX REPLACE "=.*" "" var "${item}")
    unset(ENV{${var}})
endforeach()
message("--- ${ENV} ${cmd}\n${out}${err}")
if(VALGRIND AND rc STREQUAL "99")
    message(FATAL_ERROR "valgrind: memcheck found errors")
endif()
if(NOT rc STREQUAL "${EXPECT_RC}")
    message(FATAL_ERROR "the driver stopped with '${rc}', expected exit status ${EXPECT_RC}")
endif()
foreach(re IN LISTS EXPECT)
    if(NOT "${out}${err}" MATCHES "${re}")
        message(FATAL_ERROR "the output does not match: ${re}")
    endif()
endforeach()
if(DEFINED REJECT AND "${out}${err}" MATCHES "${REJECT}")
    message(FATAL_ERROR "the output matches what it must not: ${REJECT}")
endif()
if(VALGRIND)
    valgrind_memcheck_verdict("${err}")
endif()

if(CLEAN_ARGS)
    foreach(var COMPARE)
        if(NOT DEFINED ${var})
            message(FATAL_ERROR "fault_run.cmake: CLEAN_ARGS needs -D${var}=...")
        endif()
    endforeach()
    execute_process(COMMAND "${DRIVER}" ${CLEAN_ARGS} --logits-out "${WORK_DIR}/clean.bin"
        RESULT_VARIABLE rc OUTPUT_VARIABLE clean_out ERROR_VARIABLE clean_err)
    message("--- without the fault: ${DRIVER} ${CLEAN_ARGS}\n${clean_out}${clean_err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "the run without the fault failed (${rc})")
    endif()
    string(REGEX MATCH "\ntokens: [^\n]*" tokens_fault "\n${out}")
    string(REGEX MATCH "\ntokens: [^\n]*" tokens_clean "\n${clean_out}")
    if(tokens_fault STREQUAL "" OR NOT tokens_fault STREQUAL tokens_clean)
        message(FATAL_ERROR "tokens differ from the run without the fault:${tokens_fault} vs${tokens_clean}")
    endif()
    execute_process(COMMAND "${COMPARE}" "${WORK_DIR}/fault.bin" "${WORK_DIR}/clean.bin" --tol 0
        RESULT_VARIABLE rc OUTPUT_VARIABLE cmp_out ERROR_VARIABLE cmp_err)
    message("${cmp_out}${cmp_err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "logits differ from the run without the fault")
    endif()
endif()
message("the fault gave what was expected")
