#!/usr/bin/env bash
# llama.cpp's --fit through the plugin's TP0 = TP(CUDA0,CUDA0) on one NVIDIA GPU: what TP0
# reports, the context and offload fit plans on it, whether the model then loads and answers, and
# what the GPU holds (nvidia-smi) — next to upstream's own -sm tensor over CUDA0,CUDA0, which fit
# refuses (docs/benchmarks.md, "Memory through --fit").
#
#   bench/fit-gpu.sh run | start | wait [SECONDS]     as bench/llama-bench-gpu.sh
#
# Inputs as bench/llama-bench-gpu.sh (.gpu/llama.cpp-e, .gpu/libggml-backend-rs-tp-e.so); the
# model is the Llama-3-8B-shaped f16 one with a training context of FIT_CTX_TRAIN tokens (default
# 1048576: its KV cache, 128 KiB a token, cannot all fit, so fit has to choose).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${FIT_WORK:-/tmp/fitgpu}"
ctx_train="${FIT_CTX_TRAIN:-1048576}"
arch="${CUDA_ARCH:-90}"

log() { printf '[%s] %s\n' "$(date +%T)" "$*"; }
# shellcheck source=bench/detached.sh
source "$root/bench/detached.sh"

gpu_used_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; }

# serve <name> <env...> -- <llama-server args...>: starts the server, waits for it, asks one
# completion, records nvidia-smi, stops it. Bounded: 600 s to be ready.
serve() {
    local name=$1; shift
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    local logf="$work/$name.log"
    log "$name: llama-server $*"
    env "${envs[@]}" "$work/build/bin/llama-server" --host 127.0.0.1 --port 0 -lv 4 "$@" > "$logf" 2>&1 &
    local pid=$! port="" deadline=$((SECONDS + 600))
    while (( SECONDS < deadline )); do
        kill -0 $pid 2>/dev/null || { log "$name: exited: $(grep -i 'error\|fail\|abort' "$logf" | tail -3 | tr '\n' ' ')"; wait $pid || true; return 0; }
        port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$logf" | grep -o '[0-9]*$' || true)
        if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/health" > /dev/null 2>&1; then break; fi
        sleep 1
    done
    local answer
    answer=$(curl -s --max-time 300 "http://127.0.0.1:$port/completion" -H 'Content-Type: application/json' \
        -d '{"prompt":"The quick brown fox","n_predict":32,"temperature":0}' | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("tokens_predicted", d))' 2>&1 || true)
    local used; used=$(gpu_used_mib)
    kill -TERM $pid; wait $pid || true
    {
        echo "## $name"
        echo "answer: $answer tokens predicted; nvidia-smi while serving: $used MiB used"
        grep -E "using device|fitting params|fit_params|n_ctx *=|n_ctx_seq|model buffer size|KV buffer size|compute buffer size|memory breakdown|\| +- " "$logf" | sed 's/^[0-9.]* [IWE] //' | head -40
        echo
    } >> "$work/report.md"
}

run() {
    mkdir -p "$work"
    rm -f "$work/report.md"
    local tree="$root/.gpu/llama.cpp-e" plugin="$root/.gpu/libggml-backend-rs-tp-e.so"
    cp "$plugin" "$work/plugin.so"
    if [[ ! -x "$work/build/bin/llama-server" ]]; then
        log "configure + build (pristine, CUDA $arch): llama-server"
        cmake -S "$tree" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
            -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DGGML_NATIVE=OFF \
            -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
            -DLLAMA_USE_PREBUILT_UI=OFF > "$work/configure.log" 2>&1
        cmake --build "$work/build" --target llama-server > "$work/build.log" 2>&1
    fi
    g++ -O2 -std=c++17 -I "$tree/ggml/include" "$root/tools/model/write_model.cpp" \
        -L "$work/build/bin" -lggml-base -lggml -Wl,-rpath,"$work/build/bin" -o "$work/write_model"
    if [[ ! -f "$work/f16.gguf" ]]; then
        log "model f16 (Llama-3-8B shape, n_ctx_train $ctx_train)"
        "$work/write_model" --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 \
            --n-vocab 32000 --n-ctx-train "$ctx_train" --rope-freq-base 500000 --type f16 \
            --out "$work/f16.gguf" > /dev/null
    fi
    echo "GPU: $(nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader); idle" >> "$work/report.md"
    serve plugin-tp0-fit "GGML_BACKEND_PATH=$work/plugin.so" "GGML_BACKEND_RS_TP=CUDA0,CUDA0" -- \
        -m "$work/f16.gguf" --device TP0 -np 1
    serve upstream-tensor-fit -- -m "$work/f16.gguf" -sm tensor --device CUDA0,CUDA0 -np 1
    serve upstream-none-fit -- -m "$work/f16.gguf" --device CUDA0 -np 1
    log "done"
}

case "${1:-}" in
    run) run ;;
    start) detached_start "$work" env "FIT_WORK=$work" bash bench/fit-gpu.sh run ;;
    wait)
        detached_wait "$work" "${2:-560}"
        cat "$work/report.md"
        if [[ -n "${OUT:-}" ]]; then
            cp "$work/report.md" "$work"/*.log "$OUT"/
        fi
        ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
esac
