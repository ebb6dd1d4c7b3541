# What the memory checks share (valgrind.cmake, fault_run.cmake): memcheck's options, and the
# verdict on its report. Passes with no memcheck error (invalid reads and writes, uses of
# uninitialised values, bad frees) and no block definitely lost; still-reachable and "possibly
# lost" blocks are not errors (valgrind.cmake says why). valgrind.supp: what memcheck flags that is
# not an error of ours, each with its reason.

set(valgrind_memcheck_options --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --num-callers=30
    "--suppressions=${CMAKE_CURRENT_LIST_DIR}/valgrind.supp")

# valgrind_memcheck_verdict(<stderr of the run>): stops the script unless the report is clean.
function(valgrind_memcheck_verdict err)
    if(NOT err MATCHES "ERROR SUMMARY: 0 errors")
        message(FATAL_ERROR "valgrind: no clean ERROR SUMMARY")
    endif()
    if(NOT err MATCHES "definitely lost: 0 bytes in 0 blocks" AND NOT err MATCHES "All heap blocks were freed")
        message(FATAL_ERROR "valgrind: memory definitely lost")
    endif()
endfunction()
