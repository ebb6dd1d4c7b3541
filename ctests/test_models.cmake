# The random-weight test models (tools/model/write_model), shared by ctests/sched_llama.cmake and
# ctests/dl: name, then write_model flags. Two shapes (grouped-query and plain multi-head
# attention), f32 and f16; output.weight scaled by 8 so greedy tokens have clear margins.
set(GGML_BACKEND_RS_TEST_MODELS
    "tiny-gqa-f32|--n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --n-vocab 300 --type f32"
    "tiny-gqa-f16|--n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 128 --n-vocab 300 --type f16"
    "small-mha-f32|--n-embd 96 --n-layer 3 --n-head 6 --n-head-kv 6 --n-ff 192 --n-vocab 320 --type f32")

# Registers the test `<prefix>model/<name>` that writes model `entry` (of the list above) to
# <model_dir>/<name>.gguf, as fixture `<prefix>model_<name>`; sets `name_var` and `gguf_var`.
function(ggml_backend_rs_test_model entry model_dir prefix name_var gguf_var)
    string(REPLACE "|" ";" parts "${entry}")
    list(GET parts 0 name)
    list(GET parts 1 flag_text)
    separate_arguments(flags UNIX_COMMAND "${flag_text}")
    set(gguf "${model_dir}/${name}.gguf")
    add_test(NAME ${prefix}model/${name} COMMAND write_model ${flags} --seed 7 --out "${gguf}")
    set_tests_properties(${prefix}model/${name} PROPERTIES FIXTURES_SETUP ${prefix}model_${name})
    set(${name_var} "${name}" PARENT_SCOPE)
    set(${gguf_var} "${gguf}" PARENT_SCOPE)
endfunction()
