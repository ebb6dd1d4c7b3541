#!/usr/bin/env bash
# Tensor parallelism over Vulkan, ours against upstream's in the same run, on this machine's
# first Vulkan device (GGML_VK_VISIBLE_DEVICES=0: Mesa's lavapipe on a machine without a GPU),
# with llama_bench (bench/llama_bench.cpp) built in a DL tree with the Vulkan module
# (scripts/test.sh's build/dl): both builds load the same ggml-vulkan and CPU modules.
#
# Configurations, each a llama_bench run of every build that has it:
#   none      split none on Vulkan0                               (ours, upstream)
#   vk2       tensor over Vulkan0,Vulkan0: one device twice; ggml-vulkan copies between the
#             members on the device                                (ours, upstream)
#   vk2_host  the same with the path of two Vulkan GPUs, whose ggml-vulkan declines copies
#             between them: the partials through host memory (GGML_META_ALLREDUCE=staged; ours
#             only, upstream has no such switch and would copy through the host at every
#             butterfly step)
#   vk_cpu    tensor over Vulkan0,CPU                               (ours, upstream)
#   vk_cpu_nofuse, vk_cpu_copies  ours over Vulkan0,CPU with the residual add and RMS norm left
#             in the graphs (GGML_META_FUSE=0), and on the copies path (GGML_META_ALLREDUCE=copies)
# Every configuration runs once per round, in turn, ROUNDS times; a figure is the median over the
# rounds of llama_bench's median over REPS repetitions (after one warm-up). Each row's ratio is
# against the same build's split none. Prints a markdown table and writes it, with the command
# and the machine, to bench/results/<date>-vulkan-<device>-<commit>.md.
#
#   bench/vulkan.sh [BUILD_DIR]     default build/dl
# Environment: ROUNDS (3), REPS (3), N_PROMPT (128), N_GEN (32), THREADS (CPU threads, 2), MODEL
# (a GGUF; default: a 4-layer random-weight llama of n_embd 256 written by write_model, f32).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build/dl}" && pwd)"
rounds="${ROUNDS:-3}" reps="${REPS:-3}" n_prompt="${N_PROMPT:-128}" n_gen="${N_GEN:-32}"
threads="${THREADS:-2}"
export GGML_VK_VISIBLE_DEVICES=0 GGML_VK_DISABLE_F16=1 GGML_VK_DISABLE_COOPMAT=1

cmake --build "$build" --target llama_bench llama_bench_ref write_model >/dev/null
bin="$build/bin"
ours="$bin/llama_bench"
theirs="$build/ctests/dl/llama_bench_ref"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
model="${MODEL:-$work/bench-f32.gguf}"
if [[ -z "${MODEL:-}" ]]; then
    "$build/ctests/dl/write_model" --out "$model" --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 \
        --n-ff 768 --n-vocab 1000 --type f32 --seed 7 >/dev/null
fi

# name | build | environment | llama_bench arguments
configs=(
    "none|ours||--devices Vulkan0"
    "none|upstream||--devices Vulkan0"
    "vk2|ours||--split-mode tensor --devices Vulkan0,Vulkan0"
    "vk2|upstream||--split-mode tensor --devices Vulkan0,Vulkan0"
    "vk2_host|ours|GGML_META_ALLREDUCE=staged|--split-mode tensor --devices Vulkan0,Vulkan0"
    "vk_cpu|ours||--split-mode tensor --devices Vulkan0,CPU"
    "vk_cpu|upstream||--split-mode tensor --devices Vulkan0,CPU"
    "vk_cpu_nofuse|ours|GGML_META_FUSE=0|--split-mode tensor --devices Vulkan0,CPU"
    "vk_cpu_copies|ours|GGML_META_ALLREDUCE=copies|--split-mode tensor --devices Vulkan0,CPU"
)

for round in $(seq "$rounds"); do
    for cfg in "${configs[@]}"; do
        IFS='|' read -r name which envs args <<<"$cfg"
        exe=$ours
        [[ $which == upstream ]] && exe=$theirs
        out="$work/$name-$which.$round"
        # upstream's loader finds the modules through the working directory
        # shellcheck disable=SC2086 # word splitting of envs and args is intended
        (cd "$bin" && env $envs "$exe" --model "$model" --load-all-backends $args --threads "$threads" \
            --n-prompt "$n_prompt" --n-gen "$n_gen" --reps "$reps" --warmup 1) >"$out" 2>"$out.log" \
            || { echo "$name $which failed, see below" >&2; tail -20 "$out.log" >&2; exit 1; }
        for t in pp tg; do
            sed -n "s/^result test=$t[0-9]* .*median_tps=\([0-9.]*\).*/\1/p" "$out" >>"$work/$name-$which.$t"
        done
    done
    echo "round $round of $rounds done" >&2
done

median() { sort -g "$1" | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
device=$(sed -n 's/^devices_available: Vulkan0(\(.*\)) CPU(.*/\1/p' "$work/none-ours.1" | head -1)
commit=$(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo +)
table="$work/table.md"
{
    echo "| configuration | build | pp$n_prompt t/s | of split none | tg$n_gen t/s | of split none |"
    echo "|---|---|---|---|---|---|"
    for cfg in "${configs[@]}"; do
        IFS='|' read -r name which _ _ <<<"$cfg"
        pp=$(median "$work/$name-$which.pp") tg=$(median "$work/$name-$which.tg")
        pp0=$(median "$work/none-$which.pp") tg0=$(median "$work/none-$which.tg")
        awk -v n="$name" -v w="$which" -v pp="$pp" -v tg="$tg" -v pp0="$pp0" -v tg0="$tg0" \
            'BEGIN { printf "| %s | %s | %.1f | %.3f | %.2f | %.3f |\n", n, w, pp, pp / pp0, tg, tg / tg0 }'
    done
} >"$table"
cat "$table"
mkdir -p "$root/bench/results"
slug=$(echo "${device:-unknown}" | tr -cs 'A-Za-z0-9' '-' | cut -c1-24 | sed 's/-$//')
res="$root/bench/results/$(date -u +%Y-%m-%d-%H%M)-vulkan-${slug}-${commit}.md"
{
    echo "# bench/vulkan.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), code $commit"
    echo
    echo "Device: ${device:-?}; CPU: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
    echo "Command: ROUNDS=$rounds REPS=$reps N_PROMPT=$n_prompt N_GEN=$n_gen THREADS=$threads bench/vulkan.sh ${1:-}"
    echo "Model: ${MODEL:-write_model --n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 4 --n-ff 768 --n-vocab 1000 --type f32 --seed 7}"
    echo
    cat "$table"
} >"$res"
echo "written: $res" >&2
