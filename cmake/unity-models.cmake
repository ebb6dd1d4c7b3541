# libllama's model sources (src/models/*.cpp, one small file per architecture, 113 to 145 of them
# before ggml 0.24) compiled in unity batches of 16, as llama.cpp's own CMake does from ggml 0.24
# on. The test trees of the older releases compile libllama twice (the spliced build and the
# pristine reference), and most of that time is the same headers parsed once per model file. The
# other sources of libllama stay one translation unit each, as upstream leaves them.
#
# A model file that defines a file-scope static function under a name that another model file
# defines too (0.9.11 to 0.18.0: `ggml_view_2d_slice` in gemma3n and gemma4, `get_slice_2d` in
# delta-net-base and qwen3next) is left out of the batches: the two definitions would collide in
# one unit. The names are read from the sources at configure time, so no list per release.
#
# Used two ways:
#   - include()d by this project, which calls ggml_backend_rs_unity_models(llama) after adding
#     llama.cpp (GGML_BACKEND_RS_UNITY_MODELS, CMakeLists.txt);
#   - given to the reference build (cmake/ggml-reference.cmake) as CMAKE_PROJECT_llama.cpp_INCLUDE:
#     there it defers the same call to the end of llama.cpp's top-level directory, where the
#     target exists, so the reference is compiled as the spliced build is.

include_guard(GLOBAL)

# ggml_backend_rs_unity_models(<target>): <target>'s sources under a `models/` directory in unity
# batches of 16; nothing when the target is a unity build already.
function(ggml_backend_rs_unity_models target)
    get_target_property(unity ${target} UNITY_BUILD)
    if(unity)
        return()
    endif()
    get_target_property(dir ${target} SOURCE_DIR)
    get_target_property(sources ${target} SOURCES)
    set(models "")
    set(alone "")
    foreach(source IN LISTS sources)
        cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${dir}" OUTPUT_VARIABLE path)
        if(path MATCHES "/models/[^/]+\\.cpp$")
            list(APPEND models "${path}")
        else()
            list(APPEND alone "${path}")
        endif()
    endforeach()
    if(NOT models)
        return()
    endif()

    # Each file-scope static function's name, with the model files that define it.
    set(names "")
    foreach(path IN LISTS models)
        file(STRINGS "${path}" definitions REGEX "^static [^(=;]*[ *&][A-Za-z_][A-Za-z0-9_]*\\(")
        foreach(definition IN LISTS definitions)
            string(REGEX MATCH "[A-Za-z_][A-Za-z0-9_]*\\(" name "${definition}")
            string(REGEX REPLACE "\\($" "" name "${name}")
            list(APPEND names "${name}")
            list(APPEND "defined_by_${name}" "${path}")
        endforeach()
    endforeach()
    list(REMOVE_DUPLICATES names)
    foreach(name IN LISTS names)
        set(files ${defined_by_${name}})
        list(REMOVE_DUPLICATES files)
        list(LENGTH files count)
        if(count GREATER 1)
            list(APPEND alone ${files})
        endif()
    endforeach()

    set_source_files_properties(${alone} DIRECTORY "${dir}" PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 16)
endfunction()

if(PROJECT_NAME STREQUAL "llama.cpp" AND CMAKE_CURRENT_SOURCE_DIR STREQUAL CMAKE_SOURCE_DIR)
    cmake_language(DEFER CALL ggml_backend_rs_unity_models llama)
endif()
