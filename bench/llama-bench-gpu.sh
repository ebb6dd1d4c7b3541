#!/usr/bin/env bash
# llama.cpp's own llama-bench, upstream's build, on one NVIDIA GPU: upstream's tensor mode against
# this library's plugin in the same program, in one run (docs/benchmarks.md, "In llama.cpp's own
# llama-bench").
#
#   bench/llama-bench-gpu.sh run            build, write the models, measure (foreground)
#   bench/llama-bench-gpu.sh start          the same, detached (log /tmp/lbg/job.log, marker
#                                           /tmp/lbg/done), for hosts whose calls are short
#   bench/llama-bench-gpu.sh wait [SECONDS] wait for the marker (default 560 s), print new log
#                                           lines, then the table; copies results to $OUT if set;
#                                           exit 3 while the job runs
#
# Inputs, carried in .gpu/ (docs/gpu.md says how):
#   .gpu/llama.cpp-e            a llama.cpp tree with tools/ (the pin llama-cpp-python-0.3.36's
#                               vendor/llama.cpp, ggml 0.25.3, trimmed)
#   .gpu/libggml-backend-rs-tp-e.so  the plugin built for that tree (build/shared-0.25.3)
# The tree is built pristine with CUDA (llama-bench, llama-quantize); a random Llama-3-8B-shaped
# model is written (f16, 14.5 GB) and quantized (Q4_0). Each configuration is one llama-bench
# process, -p 512 -n 128 -d 0,4096 -fa 1 -r 5, JSON output:
#   none             -sm none   -dev CUDA0
#   upstream 2       -sm tensor -dev CUDA0/CUDA0     upstream's meta device, its AllReduce
#   upstream 2 bfly  the same with GGML_CUDA_ALLREDUCE=none (a butterfly of copies)
#   plugin 2         -sm none   -dev TP0, GGML_BACKEND_RS_TP=CUDA0,CUDA0   this library's meta device
#   upstream 1       -sm tensor -dev CUDA0
#   plugin 1         -sm none   -dev TP0, GGML_BACKEND_RS_TP=CUDA0
# Environment: REPS (5), DEPTHS (0,4096), MODELS ("f16 q4_0"), CUDA_ARCH (90).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${LBG_WORK:-/tmp/lbg}"
reps="${REPS:-5}"
depths="${DEPTHS:-0,4096}"
models="${MODELS:-f16 q4_0}"
arch="${CUDA_ARCH:-90}"

log() { printf '[%s] %s\n' "$(date +%T)" "$*"; }
# shellcheck source=bench/detached.sh
source "$root/bench/detached.sh"

run() {
    mkdir -p "$work/results"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader \
        > "$work/results/gpu.txt" 2> /dev/null || rm -f "$work/results/gpu.txt"
    local tree="$root/.gpu/llama.cpp-e" plugin="$root/.gpu/libggml-backend-rs-tp-e.so"
    [[ -d "$tree" && -f "$plugin" ]] || { echo "missing .gpu/llama.cpp-e or .gpu/libggml-backend-rs-tp-e.so" >&2; exit 2; }
    cp "$plugin" "$work/plugin.so"
    local build="$work/build"
    if [[ ! -x "$build/bin/llama-bench" ]]; then
        log "configure + build (pristine, CUDA $arch): llama-bench, llama-quantize"
        cmake -S "$tree" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
            -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF "-DCMAKE_CUDA_ARCHITECTURES=$arch" -DGGML_NATIVE=OFF \
            -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF > "$work/configure.log" 2>&1
        cmake --build "$build" --target llama-bench llama-quantize > "$work/build.log" 2>&1
    fi
    log "write_model"
    g++ -O2 -std=c++17 -I "$tree/ggml/include" "$root/tools/model/write_model.cpp" \
        -L "$build/bin" -lggml-base -lggml -Wl,-rpath,"$build/bin" -o "$work/write_model"
    local m="$work/models"
    mkdir -p "$m"
    if [[ ! -f "$m/f16.gguf" ]]; then
        log "model f16 (Llama-3-8B shape)"
        "$work/write_model" --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 \
            --n-vocab 32000 --n-ctx-train 8192 --rope-freq-base 500000 --type f16 --out "$m/f16.gguf.tmp"
        mv "$m/f16.gguf.tmp" "$m/f16.gguf"
    fi
    if [[ " $models " == *" q4_0 "* && ! -f "$m/q4_0.gguf" ]]; then
        log "model q4_0"
        "$build/bin/llama-quantize" "$m/f16.gguf" "$m/q4_0.gguf.tmp" Q4_0 > "$work/quantize.log" 2>&1
        mv "$m/q4_0.gguf.tmp" "$m/q4_0.gguf"
    fi
    local bench="$build/bin/llama-bench"
    local common=(-p 512 -n 128 -d "$depths" -fa 1 -r "$reps" -o json)
    for model in $models; do
        for cfg in "none|-sm none -dev CUDA0|" \
                   "upstream 2|-sm tensor -dev CUDA0/CUDA0|" \
                   "upstream 2 bfly|-sm tensor -dev CUDA0/CUDA0|GGML_CUDA_ALLREDUCE=none" \
                   "plugin 2|-sm none -dev TP0|GGML_BACKEND_PATH=$work/plugin.so GGML_BACKEND_RS_TP=CUDA0,CUDA0" \
                   "upstream 1|-sm tensor -dev CUDA0|" \
                   "plugin 1|-sm none -dev TP0|GGML_BACKEND_PATH=$work/plugin.so GGML_BACKEND_RS_TP=CUDA0"; do
            IFS='|' read -r name args envs <<< "$cfg"
            local out="$work/results/$model-${name// /-}.json"
            [[ -s "$out" ]] && continue
            log "$model: $name"
            # shellcheck disable=SC2086 # word splitting of args and envs is intended
            if env $envs "$bench" -m "$m/$model.gguf" $args "${common[@]}" > "$out.tmp" 2> "$out.log"; then
                mv "$out.tmp" "$out"
            else
                log "$model: $name failed: $(tail -3 "$out.log" | tr '\n' ' ')"
                echo '[]' > "$out"
            fi
        done
    done
    table > "$work/results/table.md"
    log "done"
}

# The markdown table of the results: median tokens/s per configuration and test, ratios to none.
table() {
    [[ -s "$work/results/gpu.txt" ]] && echo "GPU: $(head -1 "$work/results/gpu.txt")" && echo
    python3 - "$work/results" <<'EOF'
import json, pathlib, statistics, sys
d = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(d.glob("*.json")):
    model, _, cfg = f.stem.partition("-")
    for r in json.loads(f.read_text() or "[]"):
        test = (f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}") + (f"@d{r['n_depth']}" if r.get("n_depth") else "")
        # the median of the repetitions (llama-bench's own avg_ts is a mean, which one slow first
        # repetition pulls down)
        rows.setdefault((model, test), {})[cfg.replace("-", " ")] = statistics.median(r["samples_ts"])
cfgs = ["none", "upstream 2", "upstream 2 bfly", "plugin 2", "upstream 1", "plugin 1"]
print("| model | test | " + " | ".join(cfgs) + " | plugin 2 / upstream 2 best | plugin 1 / upstream 1 |")
print("|---" * (len(cfgs) + 4) + "|")
for (model, test), v in sorted(rows.items()):
    cell = lambda c: f"{v[c]:.1f}" + (f" ({v[c] / v['none']:.3f})" if c != "none" and "none" in v and c in v else "") if c in v else "-"
    best = max([v[c] for c in ("upstream 2", "upstream 2 bfly") if c in v] or [0])
    r2 = f"{v['plugin 2'] / best:.3f}" if best and "plugin 2" in v else "-"
    r1 = f"{v['plugin 1'] / v['upstream 1']:.3f}" if "plugin 1" in v and "upstream 1" in v else "-"
    print(f"| {model} | {test} | " + " | ".join(cell(c) for c in cfgs) + f" | {r2} | {r1} |")
EOF
}

case "${1:-}" in
    run) run ;;
    start) detached_start "$work" env "LBG_WORK=$work" bash bench/llama-bench-gpu.sh run ;;
    wait)
        detached_wait "$work" "${2:-560}"
        cat "$work/results/table.md"
        if [[ -n "${OUT:-}" ]]; then
            tar -czf "$OUT/llama-bench-gpu.tgz" -C "$work" results job.log
        fi
        ;;
    *) sed -n '2,30p' "$0"; exit 2 ;;
esac
