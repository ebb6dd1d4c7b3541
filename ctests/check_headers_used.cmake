# cmake -DNINJA=<ninja> -DBUILD_DIR=<build> -DOUR_INCLUDE=<repo>/include
#       -DTARGET_DIRS=<a.dir;b.dir> -P check_headers_used.cmake
# Proves that the objects of the given targets were compiled against our generated headers: every
# header named like one in OUR_INCLUDE that those objects read (ninja's dependency log) must be
# ours (after resolving the symlinks of the build's header overlay), and each target must have
# read at least one of them.

execute_process(COMMAND "${NINJA}" -C "${BUILD_DIR}" -t deps
    RESULT_VARIABLE rc OUTPUT_VARIABLE deps ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ninja -t deps failed: ${err}")
endif()

file(GLOB ours RELATIVE "${OUR_INCLUDE}" "${OUR_INCLUDE}/*.h")
file(REAL_PATH "${OUR_INCLUDE}" our_dir)
string(REPLACE "." "\\." names_re "${ours}")
string(REPLACE ";" "|" names_re "${names_re}")

string(REPLACE ";" "\\;" deps "${deps}")
string(REPLACE "\n" ";" lines "${deps}")
set(object "")
set(bad "")
foreach(td IN LISTS TARGET_DIRS)
    set(hits_${td} 0)
endforeach()
foreach(line IN LISTS lines)
    if(line MATCHES "^([^ ].*): #deps")
        set(object "${CMAKE_MATCH_1}")
        set(object_td "")
        foreach(td IN LISTS TARGET_DIRS)
            if(object MATCHES "/${td}/")
                set(object_td "${td}")
            endif()
        endforeach()
    elseif(object_td AND line MATCHES "^ +(.*/)?(${names_re})$")
        string(STRIP "${line}" header)
        cmake_path(ABSOLUTE_PATH header BASE_DIRECTORY "${BUILD_DIR}" NORMALIZE)
        file(REAL_PATH "${header}" header)
        cmake_path(GET header PARENT_PATH dir)
        if(dir STREQUAL our_dir)
            math(EXPR hits_${object_td} "${hits_${object_td}} + 1")
        else()
            list(APPEND bad "${object}: ${header}")
        endif()
    endif()
endforeach()

foreach(td IN LISTS TARGET_DIRS)
    message("${td}: ${hits_${td}} includes of our headers")
    if(hits_${td} EQUAL 0)
        list(APPEND bad "${td}: no object read any header from ${OUR_INCLUDE}")
    endif()
endforeach()
if(bad)
    list(JOIN bad "\n  " bad)
    message(FATAL_ERROR "compiled against headers that are not ours:\n  ${bad}")
endif()
