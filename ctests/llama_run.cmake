# cmake -DDRIVER_A=<exe> -DARGS_A=<a;b> [-DDRIVER_B=<exe> -DARGS_B=<a;b>] -DCOMPARE=<compare_logits>
#       -DTOL=<t> -DWORK_DIR=<dir> [-DCWD_A=<dir> -DCWD_B=<dir>] [-DSAME_SYSTEM=ON] -P llama_run.cmake
# Runs tools/model/llama_driver twice (two builds, or two configurations) with --logits-out and
# passes when both produce the same greedy tokens and their logits agree within TOL
# (compare_logits: 0 = bit-identical, else relative L2). CWD_A / CWD_B: the drivers' working
# directories (upstream's loader searches it for backend modules). SAME_SYSTEM: the drivers'
# `system:` lines (llama_print_system_info: the features of the CPU backend that was loaded,
# i.e. which variant) must be equal too. EXPECT_A / EXPECT_B: a regular expression side A / B's
# output (stdout and stderr) must match; REJECT_A / REJECT_B: one it must not match.
# ENV_A / ENV_B: `VAR=value` items set for that side's run only. TOKENS_DIFFER=ON: passes only
# when the greedy tokens differ (a defect of upstream's, demanded as it is; logits not compared).

foreach(var DRIVER_A ARGS_A COMPARE TOL WORK_DIR)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "llama_run.cmake: -D${var}=... is required")
    endif()
endforeach()
if(NOT DEFINED DRIVER_B)
    set(DRIVER_B "${DRIVER_A}")
endif()
if(NOT DEFINED ARGS_B)
    set(ARGS_B "${ARGS_A}")
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")
set(ENV{GGML_NO_BACKTRACE} 1)

foreach(side A B)
    set(cwd "")
    if(DEFINED CWD_${side})
        set(cwd WORKING_DIRECTORY "${CWD_${side}}")
    endif()
    set(side_env "")
    foreach(item IN LISTS ENV_${side})
        string(REGEX REPLACE "=.*" "" var "${item}")
        string(REGEX REPLACE "^[^=]*=" "" value "${item}")
        set(ENV{${var}} "${value}")
        list(APPEND side_env ${var})
    endforeach()
    execute_process(COMMAND "${DRIVER_${side}}" ${ARGS_${side}} --logits-out "${WORK_DIR}/${side}.bin"
        ${cwd} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    foreach(var IN LISTS side_env)
        unset(ENV{${var}})
    endforeach()
    message("--- ${side}: ${ENV_${side}} ${DRIVER_${side}} ${ARGS_${side}}\n${out}${err}")
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "driver ${side} failed (${rc})")
    endif()
    string(REGEX MATCH "\ntokens: [^\n]*" tokens_${side} "\n${out}")
    string(REGEX MATCH "\nsystem: [^\n]*" system_${side} "\n${out}")
    if(tokens_${side} STREQUAL "")
        message(FATAL_ERROR "driver ${side} printed no tokens line")
    endif()
    if(DEFINED EXPECT_${side} AND NOT "${out}${err}" MATCHES "${EXPECT_${side}}")
        message(FATAL_ERROR "driver ${side}'s output does not match: ${EXPECT_${side}}")
    endif()
    if(DEFINED REJECT_${side} AND "${out}${err}" MATCHES "${REJECT_${side}}")
        message(FATAL_ERROR "driver ${side}'s output matches what it must not: ${REJECT_${side}}")
    endif()
endforeach()

if(SAME_SYSTEM AND NOT system_A STREQUAL system_B)
    message(FATAL_ERROR "the drivers loaded different CPU backends:${system_A}\nvs${system_B}")
endif()
if(TOKENS_DIFFER)
    if(tokens_A STREQUAL tokens_B)
        message(FATAL_ERROR "greedy tokens are the same, expected them to differ:${tokens_A}")
    endif()
    message("greedy tokens differ, as expected:${tokens_A}\nvs${tokens_B}")
    return()
endif()
if(NOT tokens_A STREQUAL tokens_B)
    message(FATAL_ERROR "greedy tokens differ:${tokens_A}\nvs${tokens_B}")
endif()
execute_process(COMMAND "${COMPARE}" "${WORK_DIR}/A.bin" "${WORK_DIR}/B.bin" --tol "${TOL}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("--- compare_logits (tol ${TOL})\n${out}${err}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "logits differ beyond tolerance ${TOL}")
endif()
