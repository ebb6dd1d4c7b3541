#!/usr/bin/env bash
# The main job: build everything, write a small random-weight Llama model, and decode it greedily
# with libllama running on this library — on one device, and split by the scheduler over two
# (the test device TESTGPU0 + the CPU) — next to the same driver built against upstream's C++.
# Then tensor parallelism (--split-mode tensor, the meta device): every matrix split over two CPU
# backends, and over the two test devices TESTGPU0 + TESTGPU1, next to the single-device run.
#
#   ./scripts/demo.sh        (uses build/shared; builds it when needed)
#
# The tensor-parallel runs report a failure instead of ending the demo. Upstream's C++ meta
# backend over CPU devices crashes in its first decode (SIGSEGV; docs/meta-upstream.md section 5),
# shown below; ours runs. Upstream over the test devices needs them to accept GET_ROWS
# (GGML_BACKEND_RS_TESTGPU_GET_ROWS=1, set below): it cannot hand partial sums to the CPU.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/shared"
pin=0.1.161   # build/shared's pin, as scripts/test.sh configures it (ggml 0.26.0)
if [[ ! -f "$build/build.ninja" ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DGGML_BACKEND_RS_PIN=$pin
fi
cmake --build "$build" --target write_model llama_driver llama_driver_ref compare_logits
bin="$build/ctests"
work="$build/demo"
mkdir -p "$work"

"$bin/write_model" --n-embd 128 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 384 --n-vocab 2048 \
    --type f16 --out "$work/demo.gguf"

# Tokens and a digest of the logits per run (speed is measured by bench/, not here: a single
# short run on a tiny model says nothing about it).
run() { # name driver args...
    local name=$1 driver=$2; shift 2
    "$bin/$driver" --model "$work/demo.gguf" --n-predict 24 --threads 2 --logits-out "$work/$name.bin" "$@" \
        | grep -E '^(devices|tokens|digest):' | sed "s/^/  /"
}
echo; echo "== ours, one device (CPU)";               run ours-cpu  llama_driver     --split-mode none --devices CPU
echo; echo "== ours, TESTGPU0 + CPU (scheduler splits)"; run ours-tgpu llama_driver     --test-device --devices TESTGPU0 --split-mode layer
echo; echo "== upstream, one device (CPU)";           run ref-cpu   llama_driver_ref --split-mode none --devices CPU
echo
echo "== logits: ours split vs ours single";   "$bin/compare_logits" "$work/ours-tgpu.bin" "$work/ours-cpu.bin" | tail -1
echo "== logits: ours single vs upstream";     "$bin/compare_logits" "$work/ours-cpu.bin" "$work/ref-cpu.bin" | tail -1

# Tensor parallelism needs flash attention (libllama refuses the context without it); the single-
# device runs above already use it (auto -> enabled on the CPU), so they are the reference.
tp_run() { # like run, but a failed run is reported and leaves no logits file
    local name=$1 status=0
    GGML_NO_BACKTRACE=1 GGML_BACKEND_RS_TESTGPU_GET_ROWS=1 run "$@" --split-mode tensor --flash-attn on || status=$?
    if (( status != 0 )); then
        echo "  FAILED (exit status $status$( (( status > 128 )) && echo ", signal $((status - 128))"))"
        rm -f "$work/$name.bin"
    fi
}
compare() { # label A B tol: the compare_logits summary, when both runs succeeded
    echo "== logits: $1"
    if [[ -f "$work/$2.bin" && -f "$work/$3.bin" ]]; then
        "$bin/compare_logits" "$work/$2.bin" "$work/$3.bin" --tol "$4" \
            | grep -E '^(max_abs_diff|rel_l2|argmax_mismatch_rows|result):' | sed "s/^/  /" || true
    else
        echo "  (a run failed)"
    fi
}
echo; echo "== ours, tensor parallel over CPU,CPU";   tp_run ours-tp-cpu2  llama_driver     --devices CPU,CPU
echo; echo "== ours, tensor parallel over TESTGPU0,TESTGPU1"
tp_run ours-tp-tgpu2 llama_driver --test-device --devices TESTGPU0,TESTGPU1
echo; echo "== upstream, tensor parallel over TESTGPU0,TESTGPU1"
tp_run ref-tp-tgpu2  llama_driver_ref --test-device --devices TESTGPU0,TESTGPU1
echo; echo "== upstream, tensor parallel over CPU,CPU (expected to crash)"
tp_run ref-tp-cpu2   llama_driver_ref --devices CPU,CPU 2>/dev/null
echo
# Partial sums added across devices round differently from one device, and this f16 model
# converts activations to f16: relative L2 of a few 1e-4 is expected, the tokens must not change.
compare "ours tensor CPU,CPU vs ours single"              ours-cpu      ours-tp-cpu2  1e-3
compare "ours tensor TESTGPU0,TESTGPU1 vs ours single"    ours-cpu      ours-tp-tgpu2 1e-3
compare "ours tensor TESTGPU0,TESTGPU1 vs upstream same"  ref-tp-tgpu2  ours-tp-tgpu2 0
