# Tests as data: the tables in ctests/matrix/ and the functions that read them. Included from
# ctests/CMakeLists.txt and ctests/dl/CMakeLists.txt.
#
#   matrix/models.txt   the random-weight models: write_model's arguments for each
#   matrix/configs.txt  the configurations: the arguments of the runs a test compares, and its
#                       environment
#   matrix/tests.txt    the matrix: which models run which configurations in which suite, on
#                       which ggml versions, within which tolerance
#
# Every table: one row a line, fields separated by '|' and padded with spaces at will; '#' starts
# a comment line; '-' is an empty field; no ';' (CMake's list separator).

set(ctests_matrix_dir "${CMAKE_CURRENT_LIST_DIR}/matrix")

# ctests_table(<name> <out> <column>...): the rows of matrix/<name>.txt as a list, each row's
# fields stripped and joined by '|'. Fields missing at the end of a row are '-'. A table with a
# `versions` column keeps only the rows for this tree's ggml version (or `all`).
function(ctests_table name out)
    set(file "${ctests_matrix_dir}/${name}.txt")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${file}")
    file(STRINGS "${file}" lines)
    list(LENGTH ARGN n_columns)
    list(FIND ARGN versions versions_at)
    set(rows "")
    foreach(line IN LISTS lines)
        if(line MATCHES "^[ \t]*(#|$)")
            continue()
        endif()
        if(line MATCHES ";")
            message(FATAL_ERROR "${file}: ';' in a row: ${line}")
        endif()
        string(REPLACE "|" ";" raw "${line}")
        list(LENGTH raw n)
        if(n GREATER n_columns)
            message(FATAL_ERROR "${file}: more than ${n_columns} fields (${ARGN}): ${line}")
        endif()
        set(fields "")
        foreach(field IN LISTS raw)
            string(STRIP "${field}" field)
            list(APPEND fields "${field}")
        endforeach()
        while(n LESS n_columns)
            list(APPEND fields "-")
            math(EXPR n "${n} + 1")
        endwhile()
        if(versions_at GREATER -1)
            list(GET fields ${versions_at} versions)
            separate_arguments(versions)
            if(NOT "all" IN_LIST versions AND NOT GGML_BACKEND_RS_GGML_RELEASE IN_LIST versions)
                continue()
            endif()
        endif()
        list(JOIN fields "|" row)
        list(APPEND rows "${row}")
    endforeach()
    set(${out} "${rows}" PARENT_SCOPE)
endfunction()

# ctests_fields(<row> <var>...): sets each <var> to its field of <row>; '-' becomes empty.
macro(ctests_fields row)
    string(REPLACE "|" ";" ctests_row_fields "${row}")
    set(ctests_row_i 0)
    foreach(ctests_row_var ${ARGN})
        list(GET ctests_row_fields ${ctests_row_i} ${ctests_row_var})
        if(${ctests_row_var} STREQUAL "-")
            set(${ctests_row_var} "")
        endif()
        math(EXPR ctests_row_i "${ctests_row_i} + 1")
    endforeach()
endmacro()

# ctests_use_model(<model> [<test>...]): the <test>s read ${model_dir}/<model>.gguf. Registers,
# once, the test `${ctests_model_prefix}model/<model>` that writes it (write_model with the
# arguments of matrix/models.txt) as fixture `${ctests_model_prefix}model_<model>`, which the
# <test>s require: `ctest -R` of any of them writes the model first.
ctests_table(models ctests_models model arguments)
function(ctests_use_model model)
    set(setup "${ctests_model_prefix}model/${model}")
    set(fixture "${ctests_model_prefix}model_${model}")
    if(NOT TEST "${setup}")
        set(args "")
        foreach(row IN LISTS ctests_models)
            ctests_fields("${row}" name arguments)
            if(name STREQUAL model)
                separate_arguments(args UNIX_COMMAND "${arguments}")
            endif()
        endforeach()
        if(NOT args)
            message(FATAL_ERROR "ctests/matrix/models.txt: no model ${model}")
        endif()
        add_test(NAME "${setup}" COMMAND write_model ${args} --out "${model_dir}/${model}.gguf")
        set_tests_properties("${setup}" PROPERTIES FIXTURES_SETUP "${fixture}")
    endif()
    if(ARGN)
        set_tests_properties(${ARGN} PROPERTIES FIXTURES_REQUIRED "${fixture}")
    endif()
endfunction()

# ctests_config(<suite> <configuration>): sets `run_a` and `run_b` (argument lists) and `run_env`
# (a list of VAR=value) from the configuration's row in matrix/configs.txt.
ctests_table(configs ctests_configs suite configuration run_a run_b environment)
macro(ctests_config suite cfg)
    set(ctests_config_found OFF)
    foreach(ctests_config_row IN LISTS ctests_configs)
        ctests_fields("${ctests_config_row}" ctests_config_suite ctests_config_name run_a run_b run_env)
        if(ctests_config_suite STREQUAL "${suite}" AND ctests_config_name STREQUAL "${cfg}")
            set(ctests_config_found ON)
            break()
        endif()
    endforeach()
    if(NOT ctests_config_found)
        message(FATAL_ERROR "ctests/matrix/configs.txt: no configuration ${cfg} of suite ${suite}")
    endif()
    separate_arguments(run_a UNIX_COMMAND "${run_a}")
    separate_arguments(run_b UNIX_COMMAND "${run_b}")
    separate_arguments(run_env UNIX_COMMAND "${run_env}")
endmacro()

# ctests_matrix(<suite> <out>): the tests of <suite> in matrix/tests.txt for this ggml version,
# one element per model and configuration: model|configuration|TOL|environment|expectation
# (ctests_fields reads them).
ctests_table(tests ctests_matrix_rows suite models versions tol configurations environment expectation)
function(ctests_matrix suite out)
    set(tests "")
    foreach(row IN LISTS ctests_matrix_rows)
        ctests_fields("${row}" row_suite models versions tol cfgs env expect)
        if(NOT row_suite STREQUAL suite)
            continue()
        endif()
        separate_arguments(models)
        separate_arguments(cfgs)
        foreach(model IN LISTS models)
            foreach(cfg IN LISTS cfgs)
                list(APPEND tests "${model}|${cfg}|${tol}|${env}|${expect}")
            endforeach()
        endforeach()
    endforeach()
    set(${out} "${tests}" PARENT_SCOPE)
endfunction()
