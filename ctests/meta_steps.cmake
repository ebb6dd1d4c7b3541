# cmake -DDRIVER=<llama_driver> -DARGS=<a;b> -DN_DEV=<n> -DN_PREDICT=<k> [-DCOPIES=none|some]
#       -P meta_steps.cmake
#
# A tensor-parallel decode over the test devices must not make the host wait inside a step:
# llama_driver --step-report prints, for every single-token decode step, what reached the test
# devices (ctests/doubles/test_device.c traces every call) between the step's first graph and its
# last device operation. From the second step on (the first may build and allocate new plans):
#   host_syncs=0 and allocs=0 in that window (every ordering is by events), and no allocation in
#   the whole step (a plan rebuilt every step would allocate its AllReduce scratch before the
#   window opens);
#   device graphs > 0; with N_DEV > 1 also event_waits > 0 (the AllReduce ran, ordered by
#   events; the copies path also copies, the direct path reads the other devices' partials in
#   place), so a run that skipped the devices cannot pass; COPIES=none (the direct AllReduce)
#   requires that no copy reached the devices, COPIES=some that copies did.
foreach(var DRIVER ARGS N_DEV N_PREDICT)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "meta_steps.cmake: -D${var}=... is required")
    endif()
endforeach()
set(ENV{GGML_NO_BACKTRACE} 1)
execute_process(COMMAND "${DRIVER}" ${ARGS} --step-report RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("--- ${DRIVER} ${ARGS} --step-report\n${out}${err}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "driver failed (${rc})")
endif()
string(REGEX MATCHALL "step [0-9]+: [^\n]*" steps "${out}")
list(LENGTH steps n_steps)
math(EXPR want "${N_PREDICT} - 1")
if(NOT n_steps EQUAL want)
    message(FATAL_ERROR "expected ${want} step reports, got ${n_steps}")
endif()
set(re "^step ([0-9]+): device graphs=([0-9]+) copies=([0-9]+) event_records=([0-9]+) event_waits=([0-9]+) host_syncs=[0-9]+ allocs=([0-9]+), between the first graph and the last device operation: host_syncs=([0-9]+) allocs=([0-9]+)$")
foreach(line IN LISTS steps)
    if(NOT line MATCHES "${re}")
        message(FATAL_ERROR "unexpected step report: ${line}")
    endif()
    set(k ${CMAKE_MATCH_1})
    set(graphs ${CMAKE_MATCH_2})
    set(copies ${CMAKE_MATCH_3})
    set(waits ${CMAKE_MATCH_5})
    set(allocs_step ${CMAKE_MATCH_6})
    set(syncs ${CMAKE_MATCH_7})
    set(allocs ${CMAKE_MATCH_8})
    if(graphs EQUAL 0)
        message(FATAL_ERROR "step ${k}: no graph reached the test devices")
    endif()
    if(N_DEV GREATER 1 AND waits EQUAL 0)
        message(FATAL_ERROR "step ${k}: no AllReduce (no event waits) on ${N_DEV} devices (${copies} copies)")
    endif()
    if(k GREATER 1 AND (NOT syncs EQUAL 0 OR NOT allocs EQUAL 0))
        message(FATAL_ERROR "step ${k}: the host waited (${syncs}) or allocated (${allocs}) inside the step")
    endif()
    if(k GREATER 1 AND NOT allocs_step EQUAL 0)
        message(FATAL_ERROR "step ${k}: ${allocs_step} buffer allocations (plans rebuilt?)")
    endif()
    if(COPIES STREQUAL "none" AND NOT copies EQUAL 0)
        message(FATAL_ERROR "step ${k}: ${copies} copies, expected none")
    elseif(COPIES STREQUAL "some" AND copies EQUAL 0)
        message(FATAL_ERROR "step ${k}: no copies, expected some")
    endif()
endforeach()
message("${n_steps} steps, none waiting on the host or allocating after the first")
