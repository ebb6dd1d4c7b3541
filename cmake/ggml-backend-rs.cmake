# Splices the Rust crate ggml-backend-rs into llama.cpp's ggml build.
#
# Two ways to use this file:
#   * include() it, add_subdirectory(<llama.cpp>), then call ggml_backend_rs_splice()
#     (what this repository's top-level CMakeLists.txt does);
#   * pass -DCMAKE_PROJECT_ggml_INCLUDE=<this file> to a configure of an unchanged llama.cpp
#     (or ggml) checkout: it is included right after project(ggml) and defers the splice to the
#     end of the top-level directory, when ggml-base, ggml, the backends and llama all exist.
#
# Supported trees: ggml 0.9.11 and 0.26.0 (cmake/ggml-version.cmake). The tree's version picks
# the crate's cargo feature and our generated headers (include/ggml-<version>/); any other version
# stops the configure.
#
# What the splice does (upstream files are never edited; only target properties change):
#   * cargo builds libggml_backend_rs.a with the version's feature (target ggml_backend_rs_cargo,
#     imported target ggml_backend_rs::static);
#   * ggml-base loses ggml-backend.cpp and links the Rust archive whole, so ggml core and the
#     Rust backend layer resolve each other inside one library (ggml-backend-meta.cpp goes too);
#   * ggml loses ggml-backend-reg.cpp and ggml-backend-dl.cpp; its one source is
#     ggml-backend-rs-builtins.c (ggml_backend_rs_builtin_regs, looked up by the Rust registry);
#   * ggml-base links ggml as INTERFACE (the reverse edge of the ggml -> ggml-base cycle), and
#     consumers of a shared ggml-base link with --no-as-needed so libggml is not dropped;
#   * when the crate's generated headers exist in <repo>/include/ggml-<version>, ggml-base, ggml,
#     the backends and llama compile against them (through a header overlay, see below).
#
# Cache variables:
#   GGML_BACKEND_RS_CARGO_TARGET_DIR  where cargo builds (default <build>/cargo); the crate of
#                                     ggml <version> is built in its subdirectory ggml-<version>
#                                     (cargo --target-dir), so trees of both versions can share it
#   GGML_BACKEND_RS_STATICLIB         use this prebuilt archive instead of running cargo
#                                     (debugging the splice without the crate)

include_guard(GLOBAL)
cmake_minimum_required(VERSION 3.24) # $<LINK_LIBRARY:WHOLE_ARCHIVE,...>

# Cache (not directory) variables: the deferred splice runs in another directory's scope.
set(root "${CMAKE_CURRENT_LIST_DIR}/..")
cmake_path(NORMAL_PATH root)
string(REGEX REPLACE "/$" "" root "${root}")
set(GGML_BACKEND_RS_ROOT "${root}" CACHE INTERNAL "ggml-backend-rs repository")
unset(root)
include("${CMAKE_CURRENT_LIST_DIR}/ggml-version.cmake")

# A static program holds the builtin list (libggml.a's ggml_backend_rs_builtin_regs; ggml.c's
# object refers to it, see _ggml_backend_rs_keep_builtins), which its constructor hands to the
# Rust registry. Exported too, so a registry used before that constructor runs (another
# constructor's call) still finds it by name. (Compiler-driver flags: also what the installed
# package config and .pc hand to consumers; a program linked without them works the same.)
set(GGML_BACKEND_RS_STATIC_EXPORTS
    "-Wl,--export-dynamic-symbol=ggml_backend_rs_builtin_regs" CACHE INTERNAL "")

# Native libraries the Rust staticlib needs (`--print native-static-libs` on Linux).
set(GGML_BACKEND_RS_NATIVE_LIBS dl gcc_s util rt pthread m c CACHE INTERNAL "")

# Builds the crate with cargo and defines the imported target ggml_backend_rs::static.
function(ggml_backend_rs_add_crate)
    if(TARGET ggml_backend_rs::static)
        return()
    endif()
    set(GGML_BACKEND_RS_STATICLIB "" CACHE FILEPATH
        "Prebuilt libggml_backend_rs.a to link instead of building the crate with cargo")

    if(GGML_BACKEND_RS_STATICLIB)
        set(archive "${GGML_BACKEND_RS_STATICLIB}")
        message(STATUS "ggml-backend-rs: using prebuilt ${archive}")
    else()
        find_program(GGML_BACKEND_RS_CARGO cargo
            HINTS "$ENV{CARGO_HOME}/bin" "$ENV{HOME}/.cargo/bin" REQUIRED)
        set(GGML_BACKEND_RS_CARGO_TARGET_DIR "${CMAKE_BINARY_DIR}/cargo" CACHE PATH
            "where cargo builds the ggml-backend-rs crate (in a subdirectory per ggml version)")
        set(root "${GGML_BACKEND_RS_ROOT}")
        set(tdir "${GGML_BACKEND_RS_CARGO_TARGET_DIR}/ggml-${GGML_BACKEND_RS_GGML_VERSION}")
        set(GGML_BACKEND_RS_CARGO_BUILD_DIR "${tdir}" CACHE INTERNAL
            "cargo --target-dir of this tree's ggml version")
        set(archive "${tdir}/release/libggml_backend_rs.a")

        # cargo tracks its own inputs; the glob (re-checked at every build) decides when to ask it.
        file(GLOB_RECURSE rs_sources CONFIGURE_DEPENDS "${root}/src/*.rs" "${root}/crates/*.rs"
            "${root}/crates/*/Cargo.toml")
        set(deps ${rs_sources})
        foreach(f Cargo.toml Cargo.lock build.rs cbindgen.toml)
            if(EXISTS "${root}/${f}")
                list(APPEND deps "${root}/${f}")
            endif()
        endforeach()

        add_custom_command(
            OUTPUT "${archive}" "${tdir}/release/libggml_backend_rs.so"
            COMMAND "${CMAKE_COMMAND}" -E env "LLAMA_CPP_DIR=${GGML_BACKEND_RS_LLAMA_CPP_DIR}"
                    "GGML_BACKEND_RS_UNLISTED_RELEASE=${GGML_BACKEND_RS_UNLISTED_RELEASE}"
                    "${GGML_BACKEND_RS_CARGO}" build --release --lib ${GGML_BACKEND_RS_CARGO_FEATURE_ARGS}
                    --manifest-path "${root}/Cargo.toml" --target-dir "${tdir}"
            # cargo leaves an up-to-date archive untouched; the outputs must still be newer than
            # the inputs, or ninja would ask again at every build.
            COMMAND "${CMAKE_COMMAND}" -E touch_nocreate "${archive}"
                    "${tdir}/release/libggml_backend_rs.so"
            DEPENDS ${deps}
            WORKING_DIRECTORY "${root}"
            COMMENT "cargo build --release (ggml-backend-rs, ggml ${GGML_BACKEND_RS_GGML_VERSION})"
            USES_TERMINAL
            VERBATIM)
    endif()
    add_custom_target(ggml_backend_rs_cargo DEPENDS "${archive}")

    add_library(ggml_backend_rs_static STATIC IMPORTED GLOBAL)
    set_target_properties(ggml_backend_rs_static PROPERTIES
        IMPORTED_LOCATION "${archive}"
        INTERFACE_LINK_LIBRARIES "${GGML_BACKEND_RS_NATIVE_LIBS}")
    add_dependencies(ggml_backend_rs_static ggml_backend_rs_cargo)
    add_library(ggml_backend_rs::static ALIAS ggml_backend_rs_static)
endfunction()

# The library as a backend plugin for programs built against upstream ggml: the module
# libggml-backend-rs-tp.so (target ggml-backend-rs-tp), loaded with ggml_backend_load() or
# GGML_BACKEND_PATH. cargo builds crates/plugin as a static archive; the module links it with
# a version script that exports ggml_backend_init and ggml_backend_score only, so the
# library's own ggml_backend_* functions stay local and never meet the host's. ggml core
# (ggml_nbytes, ...) stays undefined: the host's libggml-base provides it when the module
# loads.
function(ggml_backend_rs_add_plugin)
    if(TARGET ggml-backend-rs-tp OR GGML_BACKEND_RS_STATICLIB)
        return()
    endif()
    ggml_backend_rs_add_crate()
    set(root "${GGML_BACKEND_RS_ROOT}")
    set(tdir "${GGML_BACKEND_RS_CARGO_BUILD_DIR}")
    set(archive "${tdir}/release/libggml_backend_rs_plugin.a")
    file(GLOB_RECURSE rs_sources CONFIGURE_DEPENDS "${root}/src/*.rs" "${root}/crates/*.rs"
        "${root}/crates/*/Cargo.toml")
    add_custom_command(
        OUTPUT "${archive}"
        COMMAND "${CMAKE_COMMAND}" -E env
                "GGML_BACKEND_RS_UNLISTED_RELEASE=${GGML_BACKEND_RS_UNLISTED_RELEASE}"
                "${GGML_BACKEND_RS_CARGO}" build --release -p ggml-backend-rs-plugin
                ${GGML_BACKEND_RS_CARGO_FEATURE_ARGS}
                --manifest-path "${root}/Cargo.toml" --target-dir "${tdir}"
        COMMAND "${CMAKE_COMMAND}" -E touch_nocreate "${archive}"
        DEPENDS ${rs_sources} "${root}/Cargo.toml" "${root}/Cargo.lock"
        WORKING_DIRECTORY "${root}"
        COMMENT "cargo build --release -p ggml-backend-rs-plugin (ggml ${GGML_BACKEND_RS_GGML_VERSION})"
        USES_TERMINAL
        VERBATIM)
    add_custom_target(ggml_backend_rs_plugin_cargo DEPENDS "${archive}")

    set(map "${root}/crates/plugin/exports.map")
    set(stub "${CMAKE_BINARY_DIR}/ggml-backend-rs-tp.c")
    file(CONFIGURE OUTPUT "${stub}" CONTENT
        "/* libggml-backend-rs-tp: every symbol comes from the Rust archive. */\n")
    add_library(ggml-backend-rs-tp MODULE "${stub}")
    add_dependencies(ggml-backend-rs-tp ggml_backend_rs_plugin_cargo)
    target_link_libraries(ggml-backend-rs-tp PRIVATE "${archive}" ${GGML_BACKEND_RS_NATIVE_LIBS})
    target_link_options(ggml-backend-rs-tp PRIVATE
        "-Wl,--version-script=${map}"
        "-Wl,--undefined=ggml_backend_init" "-Wl,--undefined=ggml_backend_score"
        "-Wl,--gc-sections")
    set_target_properties(ggml-backend-rs-tp PROPERTIES
        PREFIX "lib" LINK_DEPENDS "${archive};${map}")
    include(GNUInstallDirs)
    install(TARGETS ggml-backend-rs-tp LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
endfunction()

# Static ggml-base: its ggml.c refers to libggml.a's builtin list, so that a program linking the
# archives by path, with no link option of ours (cargo, Meson, a Makefile), keeps the list
# (cmake/ggml-backend-rs-keep-builtins.h says why). ggml.c's object is in every such program.
function(_ggml_backend_rs_keep_builtins)
    get_target_property(dir ggml-base SOURCE_DIR)
    set(ggml_c "${dir}/ggml.c")
    get_target_property(sources ggml-base SOURCES)
    if(NOT "ggml.c" IN_LIST sources AND NOT ggml_c IN_LIST sources)
        message(FATAL_ERROR "ggml-backend-rs: ggml-base has no source ggml.c; "
                            "is this a supported llama.cpp (ggml ${GGML_BACKEND_RS_GGML_VERSION})?")
    endif()
    set(header "${GGML_BACKEND_RS_ROOT}/cmake/ggml-backend-rs-keep-builtins.h")
    set_property(SOURCE "${ggml_c}" TARGET_DIRECTORY ggml-base APPEND PROPERTY
        COMPILE_OPTIONS -include "${header}")
    set_property(SOURCE "${ggml_c}" TARGET_DIRECTORY ggml-base APPEND PROPERTY
        OBJECT_DEPENDS "${header}")
endfunction()

# Removes the sources whose file name is in the remaining arguments from `target`.
function(_ggml_backend_rs_drop_sources target)
    get_target_property(sources ${target} SOURCES)
    set(kept "")
    set(dropped "")
    foreach(src IN LISTS sources)
        cmake_path(GET src FILENAME name)
        if(name IN_LIST ARGN)
            list(APPEND dropped "${name}")
        else()
            list(APPEND kept "${src}")
        endif()
    endforeach()
    foreach(name IN LISTS ARGN)
        if(NOT name IN_LIST dropped)
            message(FATAL_ERROR "ggml-backend-rs: ${target} has no source ${name}; "
                                "is this a supported llama.cpp (ggml ${GGML_BACKEND_RS_GGML_VERSION})?")
        endif()
    endforeach()
    set_property(TARGET ${target} PROPERTY SOURCES "${kept}")
endfunction()

# Makes ggml-base, ggml, the backends and llama compile against the crate's generated headers.
#
# Putting <repo>/include first on the include path is not enough: upstream headers such as
# ggml-cpu.h say #include "ggml-backend.h", which finds the file next to them first, and two
# different ggml-backend.h in one translation unit collide. So the build tree gets an overlay,
# <build>/ggml-backend-rs-headers/include, that holds a symlink to every upstream public header
# and, for the headers the crate generates, a symlink to ours; it comes first for those targets.
# Symlinks (not copies) keep #pragma once working and follow header regeneration.
#   * upstream's files in ggml/src still see the ggml-backend-impl.h / ggml-ext.h next to them;
#   * ggml 0.9.11: llama's #include "../src/ggml-ext.h" finds <overlay>/src/ggml-ext.h (ours).
#     Only where upstream has a ggml/src/ggml-ext.h: from 0.26 on its meta API is in
#     ggml-backend.h, libllama does not include ggml-ext.h, and ours holds only our extensions.
# A header of ours that upstream does not have (0.26's ggml-ext.h) is on the path too, unused by
# upstream's sources.
function(_ggml_backend_rs_headers_first)
    set(ours_dir "${GGML_BACKEND_RS_OUR_INCLUDE_DIR}")
    # Globbed with CONFIGURE_DEPENDS even when empty: generating the headers re-runs CMake.
    file(GLOB our_headers RELATIVE "${ours_dir}" CONFIGURE_DEPENDS "${ours_dir}/*.h")
    if(NOT "ggml-backend.h" IN_LIST our_headers)
        set(GGML_BACKEND_RS_HEADER_OVERLAY "" CACHE INTERNAL "")
        message(STATUS "ggml-backend-rs: ${ours_dir}/ggml-backend.h not generated yet; "
                       "building against upstream's headers")
        return()
    endif()
    get_target_property(base_src ggml-base SOURCE_DIR)
    set(upstream_dir "${base_src}/../include")
    cmake_path(NORMAL_PATH upstream_dir)

    set(overlay "${CMAKE_BINARY_DIR}/ggml-backend-rs-headers")
    file(REMOVE_RECURSE "${overlay}")
    file(MAKE_DIRECTORY "${overlay}/include" "${overlay}/src")
    file(GLOB upstream_headers RELATIVE "${upstream_dir}" CONFIGURE_DEPENDS "${upstream_dir}/*.h")
    foreach(h IN LISTS upstream_headers)
        if(NOT h IN_LIST our_headers)
            file(CREATE_LINK "${upstream_dir}/${h}" "${overlay}/include/${h}" SYMBOLIC)
        endif()
    endforeach()
    foreach(h IN LISTS our_headers)
        file(CREATE_LINK "${ours_dir}/${h}" "${overlay}/include/${h}" SYMBOLIC)
    endforeach()
    if("ggml-ext.h" IN_LIST our_headers AND EXISTS "${base_src}/ggml-ext.h")
        file(CREATE_LINK "${ours_dir}/ggml-ext.h" "${overlay}/src/ggml-ext.h" SYMBOLIC)
    endif()

    set(targets ggml-base ggml llama ${GGML_AVAILABLE_BACKENDS})
    list(REMOVE_DUPLICATES targets)
    foreach(t IN LISTS targets)
        if(TARGET ${t})
            target_include_directories(${t} BEFORE PRIVATE "${overlay}/include")
        endif()
    endforeach()
    set(GGML_BACKEND_RS_HEADER_OVERLAY "${overlay}" CACHE INTERNAL "")
    list(JOIN our_headers ", " names)
    message(STATUS "ggml-backend-rs: compiling against ${names} from ${ours_dir}")
endfunction()

# The splice. Call it once ggml-base and ggml exist (and llama, for its include directories).
function(ggml_backend_rs_splice)
    get_property(done GLOBAL PROPERTY GGML_BACKEND_RS_SPLICED)
    if(done)
        return()
    endif()
    set_property(GLOBAL PROPERTY GGML_BACKEND_RS_SPLICED TRUE)
    foreach(t ggml-base ggml)
        if(NOT TARGET ${t})
            message(FATAL_ERROR "ggml-backend-rs: target ${t} does not exist; add llama.cpp/ggml first")
        endif()
    endforeach()
    # The version of the ggml these targets are built from (read here too, for projects that
    # include this file and add llama.cpp themselves).
    get_target_property(base_src ggml-base SOURCE_DIR)
    ggml_backend_rs_detect_ggml_version("${base_src}/..")

    ggml_backend_rs_add_crate()

    # ggml-base: ggml core (C) + the Rust backend layer, in one library.
    _ggml_backend_rs_drop_sources(ggml-base ggml-backend.cpp ggml-backend-meta.cpp)
    get_target_property(base_type ggml-base TYPE)
    if(base_type STREQUAL "STATIC_LIBRARY")
        # A program gets the whole Rust archive first on its link line (a link option), so the
        # ggml archives that follow resolve what it needs. As a link item instead, CMake would put
        # it inside the repeated ggml-base/ggml/backend cycle, twice: duplicate definitions.
        get_target_property(archive ggml_backend_rs_static IMPORTED_LOCATION)
        target_link_options(ggml-base INTERFACE
            "SHELL:-Wl,--whole-archive \"${archive}\" -Wl,--no-whole-archive"
            ${GGML_BACKEND_RS_STATIC_EXPORTS})
        set_property(TARGET ggml-base APPEND PROPERTY INTERFACE_LINK_DEPENDS "${archive}")
        target_link_libraries(ggml-base INTERFACE ${GGML_BACKEND_RS_NATIVE_LIBS})
        add_dependencies(ggml-base ggml_backend_rs_cargo)
        _ggml_backend_rs_keep_builtins()
    else()
        target_link_libraries(ggml-base PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,ggml_backend_rs::static>")
    endif()
    # The Rust registry looks up ggml_backend_rs_builtin_regs, defined in ggml, at run time:
    # whatever links ggml-base links ggml too, except ggml itself and the backends ggml links
    # (for shared libraries CMake refuses that cycle).
    set(not_ggml_side "")
    foreach(t ggml ${GGML_AVAILABLE_BACKENDS})
        list(APPEND not_ggml_side "$<STREQUAL:$<TARGET_PROPERTY:NAME>,${t}>")
    endforeach()
    list(JOIN not_ggml_side "," not_ggml_side)
    target_link_libraries(ggml-base INTERFACE "$<$<NOT:$<OR:${not_ggml_side}>>:ggml>")
    if(base_type STREQUAL "SHARED_LIBRARY")
        # Nothing but libggml-base refers to libggml any more: keep it as a dependency anyway.
        target_link_options(ggml-base INTERFACE "LINKER:--no-as-needed")
    endif()

    # ggml: only the list of compiled-in backends.
    _ggml_backend_rs_drop_sources(ggml ggml-backend-reg.cpp ggml-backend-dl.cpp)
    target_sources(ggml PRIVATE "${GGML_BACKEND_RS_ROOT}/cmake/ggml-backend-rs-builtins.c")
    set_property(TARGET ggml PROPERTY LINKER_LANGUAGE C)

    _ggml_backend_rs_headers_first()
    _ggml_backend_rs_install()
    message(STATUS "ggml-backend-rs: spliced into ggml-base / ggml")
endfunction()

# `cmake --install`: llama.cpp's own rules install the libraries (ggml-base holds the Rust layer)
# and headers; here ggml's public ggml-backend.h becomes ours, and this package adds the meta
# API header (ggml-ext.h), the crate's archive (static builds), a CMake package config
# (find_package(ggml-backend-rs)) and a pkg-config file (ggml-backend-rs.pc).
function(_ggml_backend_rs_install)
    include(GNUInstallDirs)
    include(CMakePackageConfigHelpers)
    set(ours "${GGML_BACKEND_RS_OUR_INCLUDE_DIR}")
    if(EXISTS "${ours}/ggml-backend.h")
        # Runs after ggml's own rule for its public headers (install rules run in the order they
        # are declared, subdirectories included: policy CMP0082), so ours replaces upstream's.
        install(FILES "${ours}/ggml-backend.h" "${ours}/ggml-ext.h"
                DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
    endif()

    list(JOIN GGML_BACKEND_RS_STATIC_EXPORTS " " GGML_BACKEND_RS_STATIC_EXPORTS_LIST)
    get_target_property(base_type ggml-base TYPE)
    if(base_type STREQUAL "SHARED_LIBRARY")
        set(GGML_BACKEND_RS_SHARED ON)
        # libggml-base calls into libggml (the builtin backend list): keep it when linking.
        set(pc_libs "-Wl,--no-as-needed -lggml -lggml-base")
        set(pc_libs_private "")
    else()
        set(GGML_BACKEND_RS_SHARED OFF)
        get_target_property(archive ggml_backend_rs_static IMPORTED_LOCATION)
        install(FILES "${archive}" DESTINATION "${CMAKE_INSTALL_LIBDIR}")
        set(backends "")
        foreach(b IN LISTS GGML_AVAILABLE_BACKENDS)
            string(APPEND backends " -l${b}")
        endforeach()
        set(pc_libs "-Wl,--whole-archive \${libdir}/libggml_backend_rs.a -Wl,--no-whole-archive -Wl,--start-group -lggml -lggml-base${backends} -Wl,--end-group ${GGML_BACKEND_RS_STATIC_EXPORTS_LIST}")
        list(JOIN GGML_BACKEND_RS_NATIVE_LIBS " -l" native)
        set(pc_libs_private "-l${native} -lstdc++")
        if(GGML_OPENMP)
            string(APPEND pc_libs_private " -fopenmp")
        endif()
    endif()

    file(STRINGS "${GGML_BACKEND_RS_ROOT}/Cargo.toml" version_line REGEX "^version = ")
    string(REGEX REPLACE "^version = \"([^\"]+)\".*" "\\1" GGML_BACKEND_RS_VERSION "${version_line}")
    list(JOIN GGML_BACKEND_RS_NATIVE_LIBS " " GGML_BACKEND_RS_NATIVE_LIBS_LIST)
    set(GGML_BACKEND_RS_INCLUDE_DIR "${CMAKE_INSTALL_INCLUDEDIR}")
    set(GGML_BACKEND_RS_LIB_DIR "${CMAKE_INSTALL_LIBDIR}")
    set(pkg_dir "${CMAKE_BINARY_DIR}/ggml-backend-rs-package")
    configure_package_config_file(
        "${GGML_BACKEND_RS_ROOT}/cmake/ggml-backend-rs-config.cmake.in"
        "${pkg_dir}/ggml-backend-rs-config.cmake"
        INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/ggml-backend-rs"
        PATH_VARS GGML_BACKEND_RS_INCLUDE_DIR GGML_BACKEND_RS_LIB_DIR)
    write_basic_package_version_file("${pkg_dir}/ggml-backend-rs-config-version.cmake"
        VERSION "${GGML_BACKEND_RS_VERSION}" COMPATIBILITY SameMinorVersion)
    install(FILES "${pkg_dir}/ggml-backend-rs-config.cmake"
                  "${pkg_dir}/ggml-backend-rs-config-version.cmake"
            DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/ggml-backend-rs")

    file(CONFIGURE OUTPUT "${pkg_dir}/ggml-backend-rs.pc" @ONLY CONTENT [=[
prefix=${pcfiledir}/../..
exec_prefix=${prefix}
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@

Name: ggml-backend-rs
Description: ggml (@GGML_BACKEND_RS_GGML_VERSION@) with its backend layer in Rust
Version: @GGML_BACKEND_RS_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} @pc_libs@
Libs.private: @pc_libs_private@
]=])
    install(FILES "${pkg_dir}/ggml-backend-rs.pc" DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endfunction()

# Included through CMAKE_PROJECT_ggml_INCLUDE: splice at the end of the top-level directory.
# The version is read at once, so an unsupported tree stops before anything else is configured.
if(PROJECT_NAME STREQUAL "ggml")
    ggml_backend_rs_detect_ggml_version("${CMAKE_CURRENT_SOURCE_DIR}")
    if(NOT DEFINED GGML_BACKEND_RS_LLAMA_CPP_DIR)
        cmake_path(GET CMAKE_CURRENT_SOURCE_DIR PARENT_PATH dir)
        set(GGML_BACKEND_RS_LLAMA_CPP_DIR "${dir}" CACHE INTERNAL "")
    endif()
    cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL ggml_backend_rs_splice)
endif()
