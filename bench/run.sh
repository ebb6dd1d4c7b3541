#!/usr/bin/env bash
# Benchmarks ours against upstream in the same run, on this machine's CPU:
#   1. scheduler overhead per decode step (bench/sched_overhead.c: a 32-layer llama-shaped graph
#      of tiny tensors, so the time is split + alloc + dispatch, not kernels), 1 and 2 backends;
#   2. end-to-end greedy decoding with libllama (tools/model/llama_driver) on a small model;
#   3. meta (tensor-parallel) backend overhead per decode step (bench/meta_overhead.cpp: a 4-layer
#      llama decode graph with flash attention and a KV cache, tiny tensors) over TESTGPU0,TESTGPU1,
#      against the same graph on TESTGPU0 alone; and meta over CPU,CPU for ours only (upstream's
#      meta crashes there), reported without a ratio.
# Each figure is the median over REPS alternating runs of both builds; the ratio is ours/upstream
# (time: lower is better for ours). Prints a markdown table.
#
#   bench/run.sh [BUILD_DIR]            default build/shared (configured and built by scripts/test.sh)
#   ONLY=meta bench/run.sh [BUILD_DIR]  only the meta backend rows (3.)
# Environment: REPS (default 7), ITERS (sched/meta steps per run, default 300), ONLY (sched|llama|meta).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build/shared}"
reps="${REPS:-7}"
iters="${ITERS:-300}"
only="${ONLY:-}"
want() { [[ -z $only || $only == "$1" ]]; }

cmake --build "$build" --target sched_overhead sched_overhead_ref llama_driver llama_driver_ref write_model \
    bench_meta_overhead bench_meta_overhead_ref >/dev/null
bin_b="$build/bench"
bin_c="$build/ctests"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "| benchmark | upstream | ours | ours/upstream |"
echo "|---|---|---|---|"

for nb in 1 2; do
    want sched || break
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
want llama && "$bin_c/write_model" --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 768 --n-vocab 4096 --type f16 --out "$model" >/dev/null
for cfg in cpu tgpu; do
    want llama || break
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
# Tensor split (meta backend) over CPU,CPU: ours only, upstream's meta crashes on CPU devices. (Over
# TESTGPU0,TESTGPU1 both abort: the test devices refuse GET_ROWS, so the scheduler reads a PARTIAL
# meta tensor back to the CPU for inp_out_ids, which upstream's get_tensor cannot do.)
if want llama; then
    : >"$work/ours"
    for _ in $(seq "$reps"); do
        { "$bin_c/llama_driver" --model "$model" --split-mode tensor --devices CPU,CPU --flash-attn on --threads 1 \
            --n-predict 128; } 2>/dev/null | sed -n 's/.*decode_tps=\([0-9.]*\).*/\1/p' >>"$work/ours" || true
    done
    if [[ -s $work/ours ]]; then
        printf '| llama decode, tensor split CPU,CPU (tokens/s; ours only) | – | %.1f | – |\n' "$(median <"$work/ours")"
    else
        echo "| llama decode, tensor split CPU,CPU (ours only) | – | failed (expected while upstream's meta is linked) | – |"
    fi
fi
# Meta backend: one step = (rebuild: build + sched reset + alloc +) set inputs + compute + read
# logits. "overhead" = meta over two devices minus the same graph on one device (TESTGPU0 + CPU).
# meta_us BIN CONFIG MODE: the run's median step time in µs, or nothing if the run failed.
meta_us() {
    local out
    out=$( { "$bin_b/$1" "$2" "$3" "$iters"; } 2>/dev/null ) || true
    sed -n 's/.*median_us=\([0-9.]*\).*/\1/p' <<<"$out"
}
row() { # label, upstream, ours
    awk -v l="$1" -v u="$2" -v o="$3" 'BEGIN { printf "| %s | %.1f | %.1f | %.3f |\n", l, u, o, o / u }'
}
for mode in rebuild reuse; do
    want meta || break
    for cfg in single-testgpu meta-testgpu; do : >"$work/up.$cfg"; : >"$work/ours.$cfg"; done
    : >"$work/ours.single-cpu"; : >"$work/ours.meta-cpu"
    for r in $(seq "$reps"); do
        for cfg in single-testgpu meta-testgpu; do
            # alternate which build goes first, so neither always runs on a warmer cache
            if (( r % 2 )); then
                meta_us bench_meta_overhead_ref "$cfg" "$mode" >>"$work/up.$cfg"
                meta_us bench_meta_overhead "$cfg" "$mode" >>"$work/ours.$cfg"
            else
                meta_us bench_meta_overhead "$cfg" "$mode" >>"$work/ours.$cfg"
                meta_us bench_meta_overhead_ref "$cfg" "$mode" >>"$work/up.$cfg"
            fi
        done
        for cfg in single-cpu meta-cpu; do meta_us bench_meta_overhead "$cfg" "$mode" >>"$work/ours.$cfg"; done
    done
    for f in up.single-testgpu ours.single-testgpu up.meta-testgpu ours.meta-testgpu; do
        [[ -s $work/$f ]] || { echo "| meta step ($mode): $f failed | | | |"; continue 2; }
    done
    us=$(median <"$work/up.single-testgpu"); os=$(median <"$work/ours.single-testgpu")
    um=$(median <"$work/up.meta-testgpu"); om=$(median <"$work/ours.meta-testgpu")
    row "meta step ($mode), TESTGPU0,TESTGPU1 + CPU (µs)" "$um" "$om"
    row "same graph ($mode), TESTGPU0 + CPU, no meta (µs)" "$us" "$os"
    row "meta overhead ($mode) = meta − single (µs)" "$(awk -v a="$um" -v b="$us" 'BEGIN{print a-b}')" \
        "$(awk -v a="$om" -v b="$os" 'BEGIN{print a-b}')"
    # ours only: upstream's meta crashes over CPU devices (docs/meta-upstream.md section 5)
    if [[ -s $work/ours.meta-cpu && -s $work/ours.single-cpu ]]; then
        oc=$(median <"$work/ours.meta-cpu"); os=$(median <"$work/ours.single-cpu")
        awk -v l="meta step ($mode), CPU,CPU + CPU (µs; ours only)" -v o="$oc" -v s="$os" \
            'BEGIN { printf "| %s | – | %.1f (single CPU %.1f, overhead %.1f) | – |\n", l, o, s, o - s }'
    else
        echo "| meta step ($mode), CPU,CPU + CPU (ours only) | – | failed (expected while upstream's meta is linked) | – |"
    fi
done

echo
echo "machine: $(nproc) cores, $(uname -m); reps=$reps; command: bench/run.sh $build"
