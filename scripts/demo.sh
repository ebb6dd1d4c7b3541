#!/usr/bin/env bash
# The main job: build everything, write a small random-weight Llama model, and decode it greedily
# with libllama running on this library — on one device, and split by the scheduler over two
# (the test device TESTGPU0 + the CPU) — next to the same driver built against upstream's C++.
#
#   ./scripts/demo.sh        (uses build/shared; builds it when needed)
#
# Tensor parallelism (--split-mode tensor, the meta device) is the next milestone: until it
# lands, upstream's meta backend is linked and, on a CPU-only host, crashes in its first decode.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build/shared"
if [[ ! -f "$build/build.ninja" ]]; then
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON
fi
cmake --build "$build" --target write_model llama_driver llama_driver_ref compare_logits
bin="$build/ctests"
work="$build/demo"
mkdir -p "$work"

"$bin/write_model" --n-embd 128 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 384 --n-vocab 2048 \
    --type f16 --out "$work/demo.gguf"

run() { # name driver args...
    local name=$1 driver=$2; shift 2
    "$bin/$driver" --model "$work/demo.gguf" --n-predict 24 --threads 2 --logits-out "$work/$name.bin" "$@" \
        | grep -E '^(devices|tokens|digest|timing):' | sed "s/^/  /"
}
echo; echo "== ours, one device (CPU)";               run ours-cpu  llama_driver     --split-mode none --devices CPU
echo; echo "== ours, TESTGPU0 + CPU (scheduler splits)"; run ours-tgpu llama_driver     --test-device --devices TESTGPU0 --split-mode layer
echo; echo "== upstream, one device (CPU)";           run ref-cpu   llama_driver_ref --split-mode none --devices CPU
echo
echo "== logits: ours split vs ours single";   "$bin/compare_logits" "$work/ours-tgpu.bin" "$work/ours-cpu.bin" | tail -1
echo "== logits: ours single vs upstream";     "$bin/compare_logits" "$work/ours-cpu.bin" "$work/ref-cpu.bin" | tail -1
