#!/usr/bin/env bash
# Tensor parallelism over ggml-rpc on the loopback address: decode throughput of tensor mode over
# K servers (the meta device, staged AllReduce) against layer split over the same servers and
# against one local CPU, ours (with our RPC client, and with upstream's, for both splits) and
# upstream's in the same run, with our meta device's host time
# per graph compute (GGML_META_PROFILE: sub-graph launches, AllReduces including the waits for
# the servers' sub-graphs). Every server is the CPU backend of its build (ctests/rpc_server.c),
# started and stopped by ctests/rpc_run.py.
#
#   bench/rpc.sh [BUILD_DIR (build/shared)]
#
# Environment: SERVERS (2), SERVER_THREADS (1), THREADS (client, 1), N_GEN (32), REPS (3),
# MODEL_ARGS (write_model's, default a small f16 Llama: n_embd 1024, 8 layers, vocab 32000).
# Loopback on one machine measures the protocol's round trips and copies, not a network: the
# servers share the host's cores with the client. docs/benchmarks.md has the figures and the
# estimate for real links.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build/shared}" && pwd)"
servers="${SERVERS:-2}" sthreads="${SERVER_THREADS:-1}" threads="${THREADS:-1}"
n_gen="${N_GEN:-32}" reps="${REPS:-3}"
model_args="${MODEL_ARGS:---n-embd 1024 --n-layer 8 --n-head 16 --n-head-kv 4 --n-ff 2816 --n-vocab 32000 --type f16}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
"$build/ctests/write_model" $model_args --out "$work/m.gguf" >/dev/null

devs=""
for ((i = 0; i < servers; i++)); do devs+="${devs:+,}RPC$i"; done
bench() { # <label> <llama_bench suffix> <server exe or -> <args...>; CLIENT_ENV: VAR=value for the run
    local label=$1 suffix=$2 server=$3; shift 3
    local cmd=("$build/bench/llama_bench$suffix" --model "$work/m.gguf" --n-prompt 0 --n-gen "$n_gen"
               --reps "$reps" --warmup 1 --threads "$threads" "$@")
    local out
    if [[ $server == - ]]; then
        out="$("${cmd[@]}" 2>&1)"
    else
        # shellcheck disable=SC2086
        out="$(env ${CLIENT_ENV:-} LLAMA_BENCH_VERBOSE=1 GGML_META_PROFILE=1 python3 "$root/ctests/rpc_run.py" --work "$work/$label" \
               --threads "$sthreads" --servers "S=$server:$servers" -- "${cmd[@]}" 2>&1)"
    fi
    local tps prof
    tps="$(grep -o 'median_tps=[0-9.]*' <<<"$out" | head -1 | cut -d= -f2)"
    prof="$(grep -o 'host time per compute: .*' <<<"$out" | tail -1 || true)"
    printf '| %s | %s | %s |\n' "$label" "${tps:-failed}" "${prof:-–}"
}
echo "model: $model_args; $servers servers x $sthreads thread(s); client $threads thread(s); tg$n_gen, median of $reps"
echo
echo "| run | tokens/s | meta device, host time per graph compute |"
echo "|---|---|---|"
bench "ours, one local CPU" "" - --devices CPU
bench "upstream, one local CPU" _ref - --devices CPU
bench "ours, layer split over $servers servers" "" "$build/ctests/rpc_server" --rpc @S@ --split-mode layer --devices "$devs"
bench "upstream, layer split over $servers servers" _ref "$build/ctests/rpc_server_ref" --rpc @S@ --split-mode layer --devices "$devs"
bench "ours, tensor over $servers servers" "" "$build/ctests/rpc_server" --rpc @S@ --split-mode tensor --devices "$devs"
bench "upstream, tensor over $servers servers" _ref "$build/ctests/rpc_server_ref" --rpc @S@ --split-mode tensor --devices "$devs"
CLIENT_ENV=GGML_BACKEND_RS_RPC=upstream \
    bench "ours with upstream's RPC client, layer split over $servers servers" "" "$build/ctests/rpc_server" --rpc @S@ --split-mode layer --devices "$devs"
CLIENT_ENV=GGML_BACKEND_RS_RPC=upstream \
    bench "ours with upstream's RPC client, tensor over $servers servers" "" "$build/ctests/rpc_server" --rpc @S@ --split-mode tensor --devices "$devs"
