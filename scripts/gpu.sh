#!/usr/bin/env bash
# The GPU benchmark on your own machine: an NVIDIA GPU with CUDA, CMake, Ninja, Python 3 and
# Rust. Builds what bench/gpu.py takes from .gpu/ (the pin's llama.cpp tree, this crate as a
# static library, the plugin), then runs it: both builds of llama.cpp with CUDA, a random
# Llama-3-8B-shaped model in f16 and Q4_0, and tensor parallelism against split none and
# upstream's tensor mode (docs/gpu.md, docs/benchmarks.md for the figures).
#
#   scripts/gpu.sh                 tp over the GPUs it finds: CUDA0,CUDA1 with two or more, else
#                                  the whole 2-way orchestration on one GPU (CUDA0,CUDA0)
#   scripts/gpu.sh <gpu.py args>   any bench/gpu.py command instead, e.g. `tp --models f16`
#
# Environment: PIN (default 0.1.161, ggml 0.26; 0.1.146 for 0.9.11).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
pin="${PIN:-0.1.161}"
features=()
case "$pin" in
    0.1.161) ;;
    0.1.146) features=(--no-default-features --features ggml-0-9-11) ;;
    *) echo "scripts/gpu.sh: bench/gpu.py builds ggml 0.26 (PIN=0.1.161) or 0.9.11 (PIN=0.1.146)" >&2; exit 2 ;;
esac
for tool in cmake ninja cargo python3 nvidia-smi; do
    command -v "$tool" > /dev/null || { echo "scripts/gpu.sh: $tool is not on PATH" >&2; exit 2; }
done

step() { printf '\n==> %s\n' "$*"; }

step "the llama.cpp tree of pin $pin into .gpu/llama.cpp"
tree="$(cmake -D "PIN=$pin" -P cmake/locate-pin.cmake)"
mkdir -p .gpu
if [[ "$(cat .gpu/llama.cpp.from 2> /dev/null)" != "$tree" ]]; then
    rm -rf .gpu/llama.cpp
    cp -r "$tree" .gpu/llama.cpp
    echo "$tree" > .gpu/llama.cpp.from
fi

step "this crate as a static library, and the plugin"
cargo build --release "${features[@]}" --target-dir build/cargo-gpu
cp build/cargo-gpu/release/libggml_backend_rs.a .gpu/
cmake -S . -B build/gpu-plugin -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    "-DGGML_BACKEND_RS_PIN=$pin" -DGGML_BACKEND_RS_VALGRIND=OFF > /dev/null
cmake --build build/gpu-plugin --target ggml-backend-rs-tp
cp build/gpu-plugin/libggml-backend-rs-tp.so .gpu/

if [[ $# -gt 0 ]]; then
    exec python3 bench/gpu.py "$@"
fi
if (( $(nvidia-smi --list-gpus | wc -l) >= 2 )); then
    devices=(CUDA0 CUDA0,CUDA1)
else
    devices=(CUDA0 CUDA0,CUDA0)
fi
step "bench/gpu.py tp --tensor ${devices[*]}"
exec python3 bench/gpu.py tp --tensor "${devices[@]}"
