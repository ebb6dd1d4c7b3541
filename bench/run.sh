#!/usr/bin/env bash
# Benchmarks ours against upstream in the same run, on this machine's CPU:
#   1. scheduler overhead per decode step (bench/sched_overhead.c: a 32-layer llama-shaped graph
#      of tiny tensors, so the time is split + alloc + dispatch, not kernels), 1 and 2 backends;
#   2. end-to-end greedy decoding with libllama (tools/model/llama_driver) on a small model.
# Each figure is the median over REPS alternating runs of both builds; the ratio is ours/upstream
# (time: lower is better for ours). Prints a markdown table.
#
#   bench/run.sh [BUILD_DIR]     default build/shared (configured and built by scripts/test.sh)
# Environment: REPS (default 7), ITERS (sched steps per run, default 300).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build/shared}"
reps="${REPS:-7}"
iters="${ITERS:-300}"

cmake --build "$build" --target sched_overhead sched_overhead_ref llama_driver llama_driver_ref write_model >/dev/null
bin_b="$build/bench"
bin_c="$build/ctests"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| benchmark | upstream | ours | ours/upstream |"
echo "|---|---|---|---|"

for nb in 1 2; do
    : >"$work/up" ; : >"$work/ours"
    for _ in $(seq "$reps"); do
        "$bin_b/sched_overhead_ref" "$nb" "$iters" | sed -n 's/.*median_us=\([0-9.]*\).*/\1/p' >>"$work/up"
        "$bin_b/sched_overhead" "$nb" "$iters" | sed -n 's/.*median_us=\([0-9.]*\).*/\1/p' >>"$work/ours"
    done
    up=$(median <"$work/up"); ours=$(median <"$work/ours")
    label="scheduler step, $nb backend(s) (µs, 706 nodes)"
    awk -v l="$label" -v u="$up" -v o="$ours" 'BEGIN { printf "| %s | %.1f | %.1f | %.3f |\n", l, u, o, o / u }'
done

# End to end: a small f16 model, prompt + 128 decoded tokens, 1 thread (2 shared cores are noisy).
model="$work/bench.gguf"
"$bin_c/write_model" --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 768 --n-vocab 4096 --type f16 --out "$model" >/dev/null
for cfg in cpu tgpu; do
    if [[ $cfg == cpu ]]; then args=(--split-mode none --devices CPU); label="llama decode, CPU (tokens/s)";
    else args=(--test-device --devices TESTGPU0 --split-mode layer); label="llama decode, TESTGPU0+CPU splits (tokens/s)"; fi
    : >"$work/up" ; : >"$work/ours"
    for _ in $(seq "$reps"); do
        "$bin_c/llama_driver_ref" --model "$model" "${args[@]}" --threads 1 --n-predict 128 | sed -n 's/.*decode_tps=\([0-9.]*\).*/\1/p' >>"$work/up"
        "$bin_c/llama_driver" --model "$model" "${args[@]}" --threads 1 --n-predict 128 | sed -n 's/.*decode_tps=\([0-9.]*\).*/\1/p' >>"$work/ours"
    done
    up=$(median <"$work/up"); ours=$(median <"$work/ours")
    # tokens/s: the time ratio ours/upstream is upstream_tps / ours_tps
    awk -v l="$label" -v u="$up" -v o="$ours" 'BEGIN { printf "| %s | %.1f | %.1f | %.3f (time) |\n", l, u, o, u / o }'
done
echo
echo "machine: $(nproc) cores, $(uname -m); reps=$reps; command: bench/run.sh $build"
