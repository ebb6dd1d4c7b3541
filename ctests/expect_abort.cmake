# cmake -DEXE=<program> -DARGS=<a;b> -DEXPECT=<regex> -P expect_abort.cmake
# Passes when <program> stops abnormally (ggml's abort: SIGABRT) and its output matches <regex>.
# ctest alone cannot say this: a test killed by a signal fails whatever PASS_REGULAR_EXPRESSION
# says, and a plain non-zero exit would also accept a crash.

foreach(var EXE EXPECT)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "expect_abort.cmake: -D${var}=... is required")
    endif()
endforeach()

# No gdb backtrace from ggml_print_backtrace: slow, and noise in the test log.
set(ENV{GGML_NO_BACKTRACE} 1)
execute_process(COMMAND "${EXE}" ${ARGS} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(result MATCHES "^[0-9]+$")
    message(FATAL_ERROR "expected an abort, but the program exited with status ${result}")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
    message(FATAL_ERROR "stopped (${result}), but the output does not match: ${EXPECT}")
endif()
message("stopped as expected (${result})")
