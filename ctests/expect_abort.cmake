# cmake -DEXE=<program> -DARGS=<a;b> -DEXPECT=<regex> [-DENV=<VAR=value;..>] [-DIGNORE_SIGPIPE=ON]
#       -P expect_abort.cmake
# Passes when <program> stops through ggml's abort: killed by SIGABRT (any other signal, a
# segmentation fault included, and any exit status fail), with ggml_abort's line
# `<file>:<line>: <message>` in its output, where <message> matches <regex> from its start.
# ctest alone cannot say this: a test killed by a signal fails whatever PASS_REGULAR_EXPRESSION
# says, and a plain non-zero exit would also accept a crash.

foreach(var EXE EXPECT)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "expect_abort.cmake: -D${var}=... is required")
    endif()
endforeach()

# No gdb backtrace from ggml_print_backtrace: slow, and noise in the test log.
set(ENV{GGML_NO_BACKTRACE} 1)
# ENV: `VAR=value` items set for the program's run
foreach(item IN LISTS ENV)
    string(REGEX REPLACE "=.*" "" var "${item}")
    string(REGEX REPLACE "^[^=]*=" "" value "${item}")
    set(ENV{${var}} "${value}")
endforeach()
# IGNORE_SIGPIPE: the program starts with SIGPIPE ignored (coreutils' env; CMake's children start
# with every signal at its default), so a write to a peer that is gone fails with EPIPE instead of
# killing the program first. The program is then stopped by its own handling of that error alone.
set(launcher "")
if(IGNORE_SIGPIPE)
    set(launcher env --ignore-signal=PIPE)
endif()
execute_process(COMMAND ${launcher} "${EXE}" ${ARGS} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(result MATCHES "^[0-9]+$")
    message(FATAL_ERROR "expected an abort, but the program exited with status ${result}")
endif()
# CMake names SIGABRT "Subprocess aborted" (older releases: "Child aborted").
if(NOT result MATCHES "aborted$")
    message(FATAL_ERROR "expected SIGABRT (ggml's abort), but the program stopped with: ${result}")
endif()
if(NOT "\n${out}${err}" MATCHES "\n[^\n:]+:[0-9]+: ${EXPECT}")
    message(FATAL_ERROR "aborted, but no ggml_abort line `<file>:<line>: ` followed by: ${EXPECT}")
endif()
message("stopped as expected (${result})")
