# cmake -D PIN=<pin> -P cmake/locate-pin.cmake: prints the llama.cpp directory of a pin (fetched
# once, see pin.cmake), for scripts that need the tree without configuring a build.
if(NOT PIN)
    message(FATAL_ERROR "locate-pin.cmake: -DPIN=<pin> is required")
endif()
include("${CMAKE_CURRENT_LIST_DIR}/pin.cmake")
ggml_backend_rs_locate_pin("${PIN}" dir)
execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${dir}")
