# The meta device's API, buffers and data transfers, case by case (meta_api.cpp): device and
# buffer type identity and properties, the meta backend, set/get/memset/copy of split, mirrored
# and partial tensors (whole tensors and byte ranges, per-device contents checked), asynchronous
# transfers, split states of compute tensors, and bad input that must stop in ggml_abort.
# Over the CPU device repeated N times (TESTGPU0 where two distinct devices are needed).
# Included from ctests/CMakeLists.txt.

add_executable(meta_api meta_api.cpp doubles/test_device.c)
target_include_directories(meta_api PRIVATE ${GGML_BACKEND_RS_API_INCLUDES} "${CMAKE_CURRENT_SOURCE_DIR}"
    "${CMAKE_CURRENT_SOURCE_DIR}/doubles")
target_link_libraries(meta_api PRIVATE ggml ggml-cpu)

foreach(case device backend set_get partial memset copies copies_zero_slice async compute_split
        compute_other_device settle null_callback)
    add_test(NAME meta/api/${case} COMMAND meta_api ${case})
endforeach()

# Bad input: each case must stop through ggml_abort with a message matching its regex.
set(meta_api_aborts
    "abort_simple_backend_index=ggml_backend_meta_simple_backend: index 2 out of range \\(2 devices\\)"
    "abort_not_meta_backend=ggml_backend_meta_n_backends: not a meta backend"
    "abort_extents=meta backend: cannot split tensor 'bad' \\(NONE\\) across devices: extents add up to 3 but the tensor has 4 along axis 1"
    "abort_axis=meta backend: cannot split tensor 'bad' \\(NONE\\) across devices: invalid split axis 7"
    "abort_split_changes=meta backend: cannot split tensor 'w' \\(NONE\\) across devices: the split-state callback now answers AXIS_1\\{1,3\\} for it, but its slices were placed as AXIS_1\\{2,2\\}"
    "abort_split_changes_renamed=ggml_backend_tensor_set: meta backend: cannot split tensor 'w2' \\(NONE\\) across devices: the split-state callback now answers AXIS_1\\{1,3\\} for it, but its slices were placed as AXIS_1\\{2,2\\}"
    "abort_null_device=ggml_backend_meta_device: devs\\[1\\] is NULL"
    "abort_nested=ggml_backend_meta_device: a meta device cannot wrap another meta device"
    "abort_n_devs_0=ggml_backend_meta_device: n_devs must be 1\\.\\.=16, got 0"
    "abort_n_devs_17=ggml_backend_meta_device: n_devs must be 1\\.\\.=16, got 17")
foreach(entry IN LISTS meta_api_aborts)
    string(FIND "${entry}" "=" eq)
    string(SUBSTRING "${entry}" 0 ${eq} case)
    math(EXPR eq "${eq} + 1")
    string(SUBSTRING "${entry}" ${eq} -1 expect)
    add_test(NAME meta/api/${case}
        COMMAND "${CMAKE_COMMAND}" -D "EXE=$<TARGET_FILE:meta_api>" -D "ARGS=${case}" -D "EXPECT=${expect}"
            -P "${CMAKE_CURRENT_SOURCE_DIR}/expect_abort.cmake")
endforeach()
