# What a llama.cpp tree's own headers say about its ABI, asked of the C and C++ compilers at
# configure time (project mode only: try_compile and try_run need a project).
#
# ggml_backend_rs_probe_abi(<ggml dir> <facts-var> <unknown-var>)
#   <facts-var>:   the facts of cmake/ggml-version.cmake's table that the headers have
#   <unknown-var>: the facts the headers cannot tell (IDEMPOTENT_REGISTRATION, a behaviour;
#                  LLAMA_LOAD_MODE in a ggml checkout without llama.h)
#   The crate's own layout facts are probed too, by the names of Cargo.toml's features
#   (OP_ENUM_101, ALLOC_SIZE_MAY_EXPAND, META_BUFFER_SET_USAGE).
#
# ggml_backend_rs_compare_layouts(<ggml dir> <our include dir> <facts> <out-var>)
#   runs ctests/abi/layout.c (every size, offset and value the crate mirrors) compiled against
#   the tree's headers and against ours, and sets <out-var> to the lines that differ (empty
#   when they agree).
#
# ggml_backend_rs_compare_declarations(<ggml dir> <our include dir> <out-var>)
#   the functions ggml-backend.h, ggml-backend-impl.h and (where the tree has it) ggml-ext.h
#   declare (GGML_API) in the tree and not in ours: a release that adds a backend function is
#   not an ABI this library implements. (Ours may declare more: the functions upstream exports
#   without declaring them, and our extensions.)
#
# Results are cached per header content (INTERNAL cache entries named by its hash), so a
# re-configure of the same tree asks the compilers nothing.

include_guard(GLOBAL)

# The tree's header directories: ggml/include, ggml/src and, in a llama.cpp tree, include/.
function(_ggml_backend_rs_tree_include_dirs ggml_dir out_var)
    set(dirs "${ggml_dir}/include" "${ggml_dir}/src")
    if(EXISTS "${ggml_dir}/../include/llama.h")
        list(APPEND dirs "${ggml_dir}/../include")
    endif()
    set(${out_var} "${dirs}" PARENT_SCOPE)
endfunction()

# The first of <dirs> that holds <header>, or empty.
function(_ggml_backend_rs_find_header header dirs out_var)
    foreach(d IN LISTS dirs)
        if(EXISTS "${d}/${header}")
            set(${out_var} "${d}/${header}" PARENT_SCOPE)
            return()
        endif()
    endforeach()
    set(${out_var} "" PARENT_SCOPE)
endfunction()

# A hash of the headers a probe reads, which names its cache entries.
function(_ggml_backend_rs_headers_hash dirs out_var)
    set(text "")
    foreach(h ggml.h ggml-backend.h ggml-backend-impl.h ggml-ext.h ggml-impl.h llama.h)
        _ggml_backend_rs_find_header(${h} "${dirs}" path)
        if(path)
            file(SHA256 "${path}" sum)
            string(APPEND text "${h}=${sum};")
        endif()
    endforeach()
    string(SHA256 hash "${text}")
    string(SUBSTRING "${hash}" 0 16 hash)
    set(${out_var} "${hash}" PARENT_SCOPE)
endfunction()

# Whether <statement> compiles in <lang> (C or CXX) after #include of each of <headers> that
# the tree has; appends <fact> to `facts` if so. A probe that needs a header the tree lacks
# (llama.h in a ggml checkout) appends <fact> to `unknown` instead. Compiled only, never
# linked (ggml-impl.h's inline helpers call ggml_abort).
macro(_ggml_backend_rs_probe fact lang headers statement)
    set(_includes "")
    set(_missing FALSE)
    foreach(_h IN ITEMS ${headers})
        _ggml_backend_rs_find_header(${_h} "${dirs}" _path)
        if(_path)
            string(APPEND _includes "#include \"${_h}\"\n")
        elseif(_h STREQUAL "llama.h")
            set(_missing TRUE)
        endif()
    endforeach()
    if(_missing)
        list(APPEND unknown ${fact})
    else()
        if("${lang}" STREQUAL "C")
            set(_ext c)
        else()
            set(_ext cpp)
        endif()
        set(_dir "${CMAKE_BINARY_DIR}/CMakeFiles/ggml-backend-rs-probe/${fact}")
        file(WRITE "${_dir}/probe.${_ext}"
            "${_includes}\nint probe(void) { ${statement} return 0; }\n")
        # try_compile (before CMake 3.25's NO_CACHE) stores its result in the cache, where a
        # variable of the same name would hide it: neither may exist before, nor stay after.
        unset(_has)
        unset(_has CACHE)
        try_compile(_has "${_dir}/build" "${_dir}/probe.${_ext}"
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${dirs}"
            ${lang}_STANDARD 17)
        if(_has)
            list(APPEND facts ${fact})
        endif()
        unset(_has CACHE)
    endif()
endmacro()

function(ggml_backend_rs_probe_abi ggml_dir facts_var unknown_var)
    _ggml_backend_rs_tree_include_dirs("${ggml_dir}" dirs)
    _ggml_backend_rs_headers_hash("${dirs}" hash)
    set(key "_GGML_BACKEND_RS_PROBED_${hash}")
    if(DEFINED ${key})
        set(${facts_var} "${${key}}" PARENT_SCOPE)
        set(${unknown_var} "${${key}_UNKNOWN}" PARENT_SCOPE)
        return()
    endif()
    set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
    set(facts "")
    set(unknown IDEMPOTENT_REGISTRATION) # a behaviour of ggml-backend-reg.cpp, not a declaration
    # One probe per fact: the statement compiles only where the fact holds. ggml-ext.h is
    # included where the tree has it (the meta API of ggml 0.9.11, with C++ linkage).
    _ggml_backend_rs_probe(META_C_LINKAGE C "ggml-backend.h"
        [[(void) &ggml_backend_meta_device;]])
    _ggml_backend_rs_probe(SPLIT_NR CXX "ggml-backend.h;ggml-backend-impl.h;ggml-ext.h"
        [[ggml_backend_meta_split_state s{}; (void) s.nr;]])
    _ggml_backend_rs_probe(COMM_API CXX "ggml-backend.h"
        [[ggml_backend_comm_init_t f = nullptr; (void) f;]])
    _ggml_backend_rs_probe(CGRAPH_UID CXX "ggml-impl.h"
        [[ggml_cgraph g{}; (void) g.uid;]])
    _ggml_backend_rs_probe(MMAP_CAPS C "ggml-backend.h"
        [[struct ggml_backend_dev_caps c = {0}; (void) c.mmap_support;]])
    _ggml_backend_rs_probe(GRAPH_OPTIMIZE_PARAMS CXX "ggml-backend-impl.h"
        [[ggml_backend_graph_optimize_params p{}; (void) p;]])
    _ggml_backend_rs_probe(LIST_ALLOC C "ggml-backend.h"
        [[(void) &ggml_backend_buft_alloc_buffer_n;]])
    _ggml_backend_rs_probe(LLAMA_LOAD_MODE C "llama.h"
        [[struct llama_model_params p = {0}; (void) p.load_mode;]])
    _ggml_backend_rs_probe(OP_ENUM_101 C "ggml.h"
        [[_Static_assert(GGML_OP_COUNT == 101, "");]])
    _ggml_backend_rs_probe(ALLOC_SIZE_MAY_EXPAND CXX "ggml-backend-impl.h"
        [[(void) &ggml_op_alloc_size_may_expand;]])
    _ggml_backend_rs_probe(META_BUFFER_SET_USAGE CXX "ggml-backend.h;ggml-backend-impl.h;ggml-ext.h"
        [[(void) &ggml_backend_meta_buffer_set_usage;]])
    set(${key} "${facts}" CACHE INTERNAL "")
    set(${key}_UNKNOWN "${unknown}" CACHE INTERNAL "")
    set(${facts_var} "${facts}" PARENT_SCOPE)
    set(${unknown_var} "${unknown}" PARENT_SCOPE)
endfunction()

# Runs layout.c built against <include dirs> (<name>: tree or ours) with GGML_BACKEND_RS_HAS_<fact>=1 for each fact.
function(_ggml_backend_rs_run_layout name include_dirs facts defines out_var)
    set(defs ${defines})
    foreach(f IN LISTS facts)
        list(APPEND defs "-DGGML_BACKEND_RS_HAS_${f}=1")
    endforeach()
    set(dir "${CMAKE_BINARY_DIR}/CMakeFiles/ggml-backend-rs-probe/layout-${name}")
    unset(rc CACHE) # cached results, as in _ggml_backend_rs_probe
    unset(compiled CACHE)
    try_run(rc compiled "${dir}" "${GGML_BACKEND_RS_ROOT}/ctests/abi/layout.c"
        CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${include_dirs}"
        COMPILE_DEFINITIONS ${defs}
        C_STANDARD 11
        COMPILE_OUTPUT_VARIABLE compile_out
        RUN_OUTPUT_VARIABLE out)
    set(rc "${rc}")
    set(compiled "${compiled}")
    unset(rc CACHE)
    unset(compiled CACHE)
    if(NOT compiled)
        string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${compile_out}")
        set(${out_var} "ERROR: layout.c does not compile against the ${name} headers: ${first_error}" PARENT_SCOPE)
    elseif(NOT rc EQUAL 0)
        set(${out_var} "ERROR: layout.c against the ${name} headers exited with ${rc}" PARENT_SCOPE)
    else()
        set(${out_var} "${out}" PARENT_SCOPE)
    endif()
endfunction()

function(ggml_backend_rs_compare_layouts ggml_dir ours facts out_var)
    _ggml_backend_rs_tree_include_dirs("${ggml_dir}" dirs)
    _ggml_backend_rs_headers_hash("${dirs}" hash)
    string(SHA256 key "${hash};${ours};${facts}")
    string(SUBSTRING "${key}" 0 16 key)
    set(key "_GGML_BACKEND_RS_LAYOUT_${key}")
    if(DEFINED ${key})
        set(${out_var} "${${key}}" PARENT_SCOPE)
        return()
    endif()
    if(CMAKE_CROSSCOMPILING)
        message(STATUS "ggml-backend-rs: cross-compiling; layouts are checked by the abi_layout test only")
        set(${out_var} "" PARENT_SCOPE)
        return()
    endif()
    _ggml_backend_rs_run_layout(tree "${dirs}" "${facts}" "" theirs)
    _ggml_backend_rs_run_layout(ours "${ours};${dirs}" "${facts}" "-DEXPECT_OURS" mine)
    set(diff "")
    if(theirs MATCHES "^ERROR: " OR mine MATCHES "^ERROR: ")
        foreach(r "${theirs}" "${mine}")
            if(r MATCHES "^ERROR: (.*)")
                list(APPEND diff "${CMAKE_MATCH_1}")
            endif()
        endforeach()
    else()
        string(REPLACE "\n" ";" their_lines "${theirs}")
        string(REPLACE "\n" ";" my_lines "${mine}")
        foreach(line IN LISTS their_lines)
            if(line AND NOT line IN_LIST my_lines)
                list(APPEND diff "tree: ${line}")
            endif()
        endforeach()
        foreach(line IN LISTS my_lines)
            if(line AND NOT line IN_LIST their_lines)
                list(APPEND diff "ours: ${line}")
            endif()
        endforeach()
    endif()
    set(${key} "${diff}" CACHE INTERNAL "")
    set(${out_var} "${diff}" PARENT_SCOPE)
endfunction()

# The names a header declares with GGML_API (functions of the backend layer).
function(_ggml_backend_rs_declared header out_var)
    set(names "")
    if(EXISTS "${header}")
        file(READ "${header}" text)
        # Comments out, declarations joined onto one line each.
        string(REGEX REPLACE "//[^\n]*" "" text "${text}")
        string(REGEX REPLACE "\n[ \t]*" " " text "${text}")
        string(REGEX MATCHALL "GGML_API[^;{]*\\(" decls "${text}")
        foreach(d IN LISTS decls)
            if(d MATCHES "([A-Za-z_][A-Za-z0-9_]*)[ \t]*\\($")
                list(APPEND names "${CMAKE_MATCH_1}")
            endif()
        endforeach()
    endif()
    list(REMOVE_DUPLICATES names)
    set(${out_var} "${names}" PARENT_SCOPE)
endfunction()

function(ggml_backend_rs_compare_declarations ggml_dir ours out_var)
    set(theirs "")
    set(mine "")
    foreach(h include/ggml-backend.h src/ggml-backend-impl.h src/ggml-ext.h)
        cmake_path(GET h FILENAME name)
        _ggml_backend_rs_declared("${ggml_dir}/${h}" t)
        _ggml_backend_rs_declared("${ours}/${name}" m)
        list(APPEND theirs ${t})
        list(APPEND mine ${m})
    endforeach()
    set(diff "")
    foreach(n IN LISTS theirs)
        if(NOT n IN_LIST mine)
            list(APPEND diff "the tree declares ${n}, which this library does not define")
        endif()
    endforeach()
    set(${out_var} "${diff}" PARENT_SCOPE)
endfunction()
