#!/usr/bin/env bash
# GPU run on an NVIDIA host (see docs/gpu.md): builds the pin with CUDA twice — spliced with this
# library and pristine — then decodes the same random-weight model with both on one GPU and
# compares tokens and logits, and times prompt processing and generation.
#
#   bench/gpu.sh all        build + run on one GPU, in ONE device call (about 3 min on 16 cores):
#                           every call re-sends the working tree and replaces the carried .gpu/,
#                           so a build left running across calls loses its sources mid-way.
#   bench/gpu.sh multi      the same with NCCL on a 2-GPU host: one GPU, layer split and tensor
#                           split over CUDA0,CUDA1, ours (Rust meta backend) against upstream
#                           (C++ meta backend); ours again with the AllReduce fallback forced
#                           (GGML_META_NO_BACKEND_ALLREDUCE=1, no NCCL); --tensor-split 3,1 and
#                           1,0 (empty slices on CUDA1); decode timing of tensor mode, alternating
#
# Expects, carried next to the tree (no Rust toolchain or network on the GPU host):
#   .gpu/llama.cpp               the pin's llama.cpp source (llama-cpp-sys-2 =0.1.146)
#   .gpu/libggml_backend_rs.a    `cargo build --release` of this crate (x86_64)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=/tmp/gpu
build=/tmp/gpu/build
mkdir -p "$out"
jobs=$(nproc)

step() { printf '\n==> %s (%ss)\n' "$*" "$SECONDS"; }

build() {
    local nccl=(-DGGML_CUDA_NCCL=OFF)
    if [[ ${1:-} == nccl ]]; then
        local root_nccl
        root_nccl=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')
        nccl=(-DGGML_CUDA_NCCL=ON -DNCCL_INCLUDE_DIR="$root_nccl/include" -DNCCL_LIBRARY="$root_nccl/lib/libnccl.so.2")
        export LD_LIBRARY_PATH="$root_nccl/lib:${LD_LIBRARY_PATH:-}"
    fi
    step "configure"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_CPP_DIR="$root/.gpu/llama.cpp" -DGGML_BACKEND_RS_STATICLIB="$root/.gpu/libggml_backend_rs.a" \
        -DGGML_CUDA=ON "${nccl[@]}" -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF \
        >"$out/configure.log" 2>&1 || return 1
    step "build"
    cmake --build "$build" -j "$jobs" --target llama_driver llama_driver_ref write_model compare_logits \
        >"$out/build.log" 2>&1 || return 1
}

run() {
    local bin="$build/ctests" m="$out/model.gguf"
    step "model"
    "$bin/write_model" --n-embd 2048 --n-layer 8 --n-head 16 --n-head-kv 4 --n-ff 5632 --n-vocab 32000 \
        --type f16 --out "$m" || return 1
    for side in ours ref; do
        local driver=llama_driver; [[ $side == ref ]] && driver=llama_driver_ref
        step "decode $side"
        "$bin/$driver" --model "$m" --split-mode none --devices CUDA0 --n-predict 64 --threads 4 \
            --logits-out "$out/$side.bin" >"$out/$side.txt" 2>&1
        grep -E '^(devices_available|tokens|digest|timing)' "$out/$side.txt"
    done
    step "compare"
    "$bin/compare_logits" "$out/ours.bin" "$out/ref.bin"
    step "timing: 5 alternating runs each"
    for i in 1 2 3 4 5; do
        for side in ref ours; do
            local driver=llama_driver; [[ $side == ref ]] && driver=llama_driver_ref
            "$bin/$driver" --model "$m" --split-mode none --devices CUDA0 --n-predict 128 --threads 4 \
                | sed -n "s/^timing:/$side:/p"
        done
    done
}

# Two GPUs: each split mode with both builds; ours must match upstream (same kernels and, for
# tensor mode, upstream's own meta backend), and every mode must give the single GPU's tokens.
multi() {
    local bin="$build/ctests" m="$out/model.gguf"
    step "model"
    "$bin/write_model" --n-embd 2048 --n-layer 8 --n-head 16 --n-head-kv 4 --n-ff 5632 --n-vocab 32000 \
        --type f16 --out "$m" || return 1
    local cfgs=("none CUDA0" "layer CUDA0,CUDA1" "tensor CUDA0,CUDA1")
    for cfg in "${cfgs[@]}"; do
        set -- $cfg
        for side in ours ref; do
            local driver=llama_driver; [[ $side == ref ]] && driver=llama_driver_ref
            step "$side: split $1 over $2"
            "$bin/$driver" --model "$m" --split-mode "$1" --devices "$2" --n-predict 64 --threads 4 \
                --logits-out "$out/$side-$1.bin" >"$out/$side-$1.txt" 2>&1
            echo "rc=$?"; grep -E '^(tokens|digest|timing)' "$out/$side-$1.txt" || tail -5 "$out/$side-$1.txt"
        done
        step "compare $1: ours vs upstream"; "$bin/compare_logits" "$out/ours-$1.bin" "$out/ref-$1.bin" | tail -3
        step "compare $1: ours vs ours single GPU"; "$bin/compare_logits" "$out/ours-$1.bin" "$out/ours-none.bin" --tol 0.05 | tail -3
    done
    step "ours: tensor split, AllReduce fallback (no NCCL)"
    GGML_META_NO_BACKEND_ALLREDUCE=1 "$bin/llama_driver" --model "$m" --split-mode tensor --devices CUDA0,CUDA1 \
        --n-predict 64 --threads 4 --logits-out "$out/ours-fallback.bin" >"$out/ours-fallback.txt" 2>&1
    echo "rc=$?"; grep -E '^(tokens|digest|timing)' "$out/ours-fallback.txt" || tail -5 "$out/ours-fallback.txt"
    step "compare fallback vs NCCL (ours)"; "$bin/compare_logits" "$out/ours-fallback.bin" "$out/ours-tensor.bin" --tol 0.05 | tail -3
    step "compare fallback vs single GPU"; "$bin/compare_logits" "$out/ours-fallback.bin" "$out/ours-none.bin" --tol 0.05 | tail -3
    # Uneven and empty slices on CUDA: 3:1, and everything on CUDA0 (CUDA1 holds zero-size
    # slices of every split tensor and contributes zero partial sums).
    for ts in 3,1 1,0; do
        step "ours: tensor split $ts"
        "$bin/llama_driver" --model "$m" --split-mode tensor --devices CUDA0,CUDA1 --tensor-split "$ts" \
            --n-predict 64 --threads 4 --logits-out "$out/ours-ts-$ts.bin" >"$out/ours-ts-$ts.txt" 2>&1
        echo "rc=$?"; grep -E '^(tokens|digest)' "$out/ours-ts-$ts.txt" || grep -v -E '^(/|\[)' "$out/ours-ts-$ts.txt" | tail -8
        "$bin/compare_logits" "$out/ours-ts-$ts.bin" "$out/ours-none.bin" --tol 0.05 | tail -2
    done
    step "timing, tensor split: 5 alternating runs each"
    for i in 1 2 3 4 5; do
        for side in ref ours; do
            local driver=llama_driver; [[ $side == ref ]] && driver=llama_driver_ref
            "$bin/$driver" --model "$m" --split-mode tensor --devices CUDA0,CUDA1 --n-predict 128 --threads 4 \
                | sed -n "s/^timing:/$side:/p"
        done
    done
}

case "${1:-all}" in
    all) build && run; echo "exit=$?" >"$out/done" ;;
    multi) build nccl && multi; echo "exit=$?" >"$out/done" ;;
    *) echo "usage: $0 all|multi" >&2; exit 2 ;;
esac
