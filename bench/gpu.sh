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
#   bench/gpu.sh tp-start   tensor-parallel benchmark, llama-bench style (bench/llama_bench.cpp), run
#                           detached because it outlasts one device call (600 s): copies the tree
#                           and .gpu/ to /tmp/tp-src, starts `gpu.sh tp` there with setsid nohup
#                           (log /tmp/gpu/tp-job.log, marker /tmp/gpu/tp-done) and returns at once
#   bench/gpu.sh tp-wait [SECONDS]   waits up to SECONDS (default 560) for the marker, printing
#                           progress; when done prints the tables and copies /tmp/gpu/tp.tgz to
#                           $OUT (otherwise a partial tarball, tp-partial.tgz); call it again until
#                           done. The machine is given back 30 s after a call ends: start the next
#                           tp-wait call at once (same kind, timeout_s 600).
#   bench/gpu.sh tp         the same job in the foreground (what tp-start runs)
#
# The tp job: builds both trees (as `all`), writes a random Llama-3-8B-shaped f16 model (n_embd
# 4096, 32 layers, 32 heads / 8 KV heads, n_ff 14336, vocab 32000; 14.5 GB) with write_model
# --stream and its Q4_0 copy with `llama_bench --quantize`, then for each model and each
# configuration — split none on TP_NONE_DEVICE, tensor over each list in TP_DEVICES, layer over
# each list in TP_LAYER, row over each list in TP_ROW — runs llama_bench_ref (upstream) then llama_bench (ours), each one process
# doing pp<TP_NPROMPT> and tg<TP_NGEN> (flash attention on, n_ubatch 512, TP_WARMUP warm-ups,
# TP_REPS timed repetitions: median and min–max tokens/s); then llama_driver_ref / llama_driver
# with --logits-out in the same configuration, compared with compare_logits (ours vs upstream:
# bit-identical expected on one device; ours vs ours split none: rel L2 within 0.05). Tables:
# /tmp/gpu/tp/table.md; logs: /tmp/gpu/tp/; all in /tmp/gpu/tp.tgz (and $OUT/tp.tgz if OUT is set).
# A run that crashes (upstream's meta backend over CPU devices does) shows as "crashed" in the
# table; the job goes on.
#
# Environment of the tp job, set on the tp-start (or tp) command line (defaults in brackets):
#   TP_DEVICES   device lists for split tensor, space-separated ["CUDA0 CUDA0,CUDA0"]
#   TP_LAYER     device lists for split layer, e.g. "CUDA0,CUDA1" [none]
#   TP_ROW       device lists for split row (CUDA's split buffer type, found through the device's
#                registry), e.g. "CUDA0" or "CUDA0,CUDA1" [none]
#   TP_NONE_DEVICE  the device of the split-none baseline [CUDA0]
#   TP_MODELS    f16 and/or quantized copies of it: q4_0 q4_1 q5_0 q5_1 q8_0 ["f16 q4_0"]
#   TP_REPS [10]  TP_WARMUP [2]  TP_NPROMPT [512]  TP_NGEN [128]  TP_UBATCH [512]  TP_THREADS [4]
#   TP_NCCL      on: build with NCCL, as `multi`; both: also a second pair of trees without NCCL
#                (TP_PREBUILT_NONCCL, or built in /tmp/gpu/build-nonccl), in which tensor mode over
#                each multi-device list of TP_DEVICES runs again, upstream (its fallback) and ours
#                (our AllReduce), as rows "(CUDA built without NCCL)" [off]
#   TP_ENVS      extra runs of ours (benchmark and logits) for every tensor device list, one per
#                space-separated item, each item one or more VAR=value joined with '+', e.g.
#                "GGML_META_ALLREDUCE=copies GGML_META_ALLREDUCE=own" [none]
#   TP_ENVS_BOTH extra runs of upstream and ours, each with these settings, for every tensor list of
#                several devices (e.g. "GGML_CUDA_ALLREDUCE=none GGML_CUDA_ALLREDUCE=internal+GGML_META_ALLREDUCE=comm":
#                upstream's butterfly and its CUDA communicator's internal kernel, ours through it) [none]
#   TP_PLUGIN    the plugin module (libggml-backend-rs-tp.so, built on the CPU host and carried):
#                for every tensor device list, also upstream's own programs (llama_bench_ref,
#                llama_driver_ref) with the plugin's TP0 over that list (GGML_BACKEND_PATH,
#                GGML_BACKEND_RS_TP, --split-mode none --devices TP0) [$GPU_DIR/libggml-backend-rs-tp.so
#                when it exists; "off": none]
#   TP_NPREDICT  greedy tokens of each logits run [16]
#   TP_ARCHS     on: first, the small model of each architecture (tp_arch_models) in tensor mode
#                over each multi-device list of TP_DEVICES — ours, upstream, the plugin — against
#                ours split none (about 1 min) [on]
#   TP_ARCH_EMBD n_embd of those models, 4 heads [256: heads of 64; 64 with TP_CPU_TEST]
#   TP_BENCH     off: only the architectures (whatever TP_ARCHS says), no large model and no
#                benchmark [on]
#   TP_TIMEOUT   seconds after which one benchmark or logits process is stopped ("timed out") [300]
#   TP_CPU_TEST  1: check the script on a CPU-only host: no CUDA, a small model (n_embd 256, 2
#                layers), devices CPU and CPU,CPU, pp64/tg16, 3 reps, 1 warm-up (each overridable)
#   TP_PREBUILT  a build tree that already has the targets: skip configure and build
#   TP_PREBUILT_NONCCL  the same for the trees without NCCL of TP_NCCL=both
#   GPU_DIR      where llama.cpp/ and libggml_backend_rs.a are [<repo>/.gpu]
#
# Time on the 16-core H200 host (estimates, defaults): build of both trees with CUDA, in
# parallel, 3-4 min; writing the 14.5 GB f16 model 1-2 min; quantizing it to Q4_0 about 1 min;
# each benchmark process (load from the page cache + 2 warm-ups + 10 reps of pp512 and of tg128)
# about 20-30 s for f16 (tg128 of 8B f16 takes about 1 s a repetition) and 10-20 s for Q4_0;
# each logits run 5-10 s. Defaults (2 models x 3 configurations x 2 builds, benchmark + logits):
# about 12-15 min in all, i.e. tp-start and two tp-wait calls. Each TP_ENVS item adds about
# 1 min per model per tensor device list.
#
# Expects, carried next to the tree (no Rust toolchain or network on the GPU host):
#   .gpu/llama.cpp               the pin's llama.cpp source (llama-cpp-sys-2 =0.1.146)
#   .gpu/libggml_backend_rs.a    `cargo build --release` of this crate (x86_64)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=/tmp/gpu
build=${TP_PREBUILT:-/tmp/gpu/build}
gpu_dir=${GPU_DIR:-$root/.gpu}
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
    local backend=(-DGGML_CUDA=ON "${nccl[@]}" -DCMAKE_CUDA_ARCHITECTURES=90)
    [[ ${TP_CPU_TEST:-0} == 1 ]] && backend=(-DGGML_CUDA=OFF)   # bench/gpu.sh tp checked on a CPU host
    local log=${2:-}   # log-name suffix of a second tree
    step "configure $build"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DLLAMA_CPP_DIR="$gpu_dir/llama.cpp" -DGGML_BACKEND_RS_STATICLIB="$gpu_dir/libggml_backend_rs.a" \
        -DGGML_BACKEND_RS_VALGRIND=OFF \
        "${backend[@]}" -DGGML_NATIVE=OFF \
        >"$out/configure$log.log" 2>&1 || { tail -20 "$out/configure$log.log"; return 1; }
    step "build $build"
    cmake --build "$build" -j "$jobs" \
        --target llama_driver llama_driver_ref write_model compare_logits llama_bench llama_bench_ref \
        >"$out/build$log.log" 2>&1 || { grep -E -A5 'FAILED|error' "$out/build$log.log" | head -40; return 1; }
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

# ---------------------------------------------------------------------------------------------
# tp: tensor-parallel benchmark (see the header). Results go to $tpdir/results.tsv (one line per
# test of each benchmark process) and $tpdir/logits.tsv (one line per configuration); both tables
# are rebuilt from them after every configuration, so a partial run still shows what it has.
tpdir=$out/tp
tp_tarball=$out/tp.tgz

tp_settings() {
    if [[ ${TP_CPU_TEST:-0} == 1 ]]; then
        tp_devices=${TP_DEVICES-CPU CPU,CPU}
        tp_none=${TP_NONE_DEVICE:-CPU}
        tp_reps=${TP_REPS:-3} tp_warmup=${TP_WARMUP:-1}
        tp_np=${TP_NPROMPT:-64} tp_ng=${TP_NGEN:-16}
        tp_threads=${TP_THREADS:-$jobs}
        tp_shape=(--n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 2 --n-ff 512 --n-vocab 1000 --n-ctx-train 2048)
    else
        tp_devices=${TP_DEVICES-CUDA0 CUDA0,CUDA0}
        tp_none=${TP_NONE_DEVICE:-CUDA0}
        tp_reps=${TP_REPS:-10} tp_warmup=${TP_WARMUP:-2}
        tp_np=${TP_NPROMPT:-512} tp_ng=${TP_NGEN:-128}
        tp_threads=${TP_THREADS:-4}
        # Llama-3-8B-shaped (vocabulary 32000): 7.24e9 parameters, 14.5 GB (13.5 GiB) in f16.
        tp_shape=(--n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 --n-vocab 32000
                  --n-ctx-train 8192 --rope-freq-base 500000)
    fi
    tp_layer=${TP_LAYER:-}
    tp_row=${TP_ROW:-}
    tp_models=${TP_MODELS:-f16 q4_0}
    tp_ub=${TP_UBATCH:-512}
    tp_envs=${TP_ENVS:-}
    tp_envs_both=${TP_ENVS_BOTH:-}
    tp_run_args=()   # extra llama_driver arguments of the architecture check's current model
    tp_npredict=${TP_NPREDICT:-16}
    tp_nccl=${TP_NCCL:-off}
    case $tp_nccl in off|on|both) ;; *) echo "TP_NCCL=$tp_nccl: not off, on or both" >&2; exit 2 ;; esac
    tp_build_nonccl=${TP_PREBUILT_NONCCL:-/tmp/gpu/build-nonccl}
    tp_variant=""   # set while the trees without NCCL of TP_NCCL=both run
    tp_timeout=${TP_TIMEOUT:-300}
    tp_plugin=${TP_PLUGIN:-$gpu_dir/libggml-backend-rs-tp.so}
    # heads of 64 on the GPU: CUDA's flash attention has no kernel for the CPU tests' 16
    tp_arch_embd=${TP_ARCH_EMBD:-256}; [[ ${TP_CPU_TEST:-0} == 1 ]] && tp_arch_embd=${TP_ARCH_EMBD:-64}
    tp_bench=${TP_BENCH:-on}
    [[ $tp_plugin == off || ! -f $tp_plugin ]] && tp_plugin=""
}

# tp_side_args SIDE SPLIT DEVICES: sets `bin_suffix`, `run_split`, `run_devs`, `run_env` and
# `run_extra` for a run of SIDE: upstream (the pristine build), ours, or plugin (the pristine
# build with our plugin's TP0 over DEVICES).
tp_side_args() {
    bin_suffix=""; run_split=$2; run_devs=$3; run_env=(); run_extra=()
    case $1 in
        upstream) bin_suffix=_ref ;;
        plugin) bin_suffix=_ref; run_split=none; run_devs=TP0; run_extra=(--load-all-backends)
                run_env=("GGML_BACKEND_PATH=$tp_plugin" "GGML_BACKEND_RS_TP=$3") ;;
    esac
}

# "crashed (SIGSEGV)" / "failed (exit 1)" for a nonzero exit status.
tp_status() {
    local rc=$1
    if (( rc == 124 )); then echo "timed out (${tp_timeout} s, TP_TIMEOUT)"
    elif (( rc > 128 )); then echo "crashed (SIG$(kill -l $((rc - 128)) 2>/dev/null || echo $((rc - 128))))"
    else echo "failed (exit $rc)"; fi
}

# File-name tag of a configuration: split, devices, env settings, "nonccl" for the trees without
# NCCL (never for split none, which runs once).
tp_tag() {
    local t="$1-${2//,/_}"; [[ -n ${3:-} ]] && t+="-${3//[^A-Za-z0-9_.-]/_}"
    [[ -n $tp_variant && $1 != none ]] && t+="-nonccl"
    echo "$t"
}
# Row label of a configuration: "SPLIT DEVICES", and which trees ran it.
tp_label() { local l="$1 $2"; [[ -n $tp_variant ]] && l+=" (CUDA built without NCCL)"; echo "$l"; }

# tp_bench MODEL SPLIT DEVICES SIDE [ENVITEM]: one benchmark process; appends to results.tsv:
# model, test, row label, base label, split, side, status, median, min, max.
tp_bench() {
    local model=$1 split=$2 devs=$3 side=$4 envitem=${5:-}
    local bin_suffix run_split run_devs run_env run_extra
    tp_side_args "$side" "$split" "$devs"
    local bin="$build/bench/llama_bench$bin_suffix" base label
    base=$(tp_label "$split" "$devs"); label=$base
    [[ -n $envitem ]] && label+=" [${envitem//+/ }]"
    [[ $side == plugin ]] && label+=" [plugin in upstream's program]"
    local log="$tpdir/bench-$model-$(tp_tag "$split" "$devs" "$envitem")-$side.txt"
    local envs=("${run_env[@]}") more=(); [[ -n $envitem ]] && IFS=+ read -r -a more <<<"$envitem"; envs+=("${more[@]}")
    step "bench $model, $label, $side"
    # (braces with 2>/dev/null: no "Segmentation fault" note from bash; the table says it)
    { timeout -k 10 "$tp_timeout" env "${envs[@]}" "$bin" --model "$out/models/$model.gguf" --split-mode "$run_split" --devices "$run_devs" \
        "${run_extra[@]}" --n-prompt "$tp_np" --n-gen "$tp_ng" --n-ubatch "$tp_ub" --flash-attn on --threads "$tp_threads" \
        --warmup "$tp_warmup" --reps "$tp_reps" >"$log" 2>&1; } 2>/dev/null
    local rc=$? t line failed=0
    [[ $side == plugin ]] && side=ours   # a row of its own, compared with upstream's tensor run
    for t in "pp$tp_np" "tg$tp_ng"; do
        line=$(grep -m1 "^result test=$t " "$log")
        if [[ -n $line ]]; then
            awk -v m="$model" -v l="$label" -v b="$base" -v s="$split" -v side="$side" '{
                for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                printf "%s\t%s\t%s\t%s\t%s\t%s\tok\t%s\t%s\t%s\n", m, v["test"], l, b, s, side, v["median_tps"], v["min_tps"], v["max_tps"]
            }' <<<"$line" >>"$tpdir/results.tsv"
            awk -v t="$t" '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
                printf "  %s: median %s tokens/s (min %s, max %s; %s reps)\n", t, v["median_tps"], v["min_tps"], v["max_tps"], v["reps"] }' <<<"$line"
        else
            local st; st=$( ((rc)) && tp_status $rc || echo "no result (exit 0)")
            printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\n' "$model" "$t" "$label" "$base" "$split" "$side" "$st" >>"$tpdir/results.tsv"
            echo "  $t: $st"; failed=1
        fi
    done
    if ((failed)); then echo "  last lines of $log:"; tail -3 "$log" | sed 's/^/    /'; fi
}

# tp_logits MODEL SPLIT DEVICES SIDE [ENVITEM]: a greedy llama_driver run with --logits-out; prints
# "ok" or the failure.
tp_logits() {
    local model=$1 split=$2 devs=$3 side=$4 envitem=${5:-}
    local bin_suffix run_split run_devs run_env run_extra
    tp_side_args "$side" "$split" "$devs"
    local bin="$build/ctests/llama_driver$bin_suffix" tag; tag=$(tp_tag "$split" "$devs" "$envitem")
    local envs=("${run_env[@]}") more=(); [[ -n $envitem ]] && IFS=+ read -r -a more <<<"$envitem"; envs+=("${more[@]}")
    { timeout -k 10 "$tp_timeout" env "${envs[@]}" "$bin" --model "$out/models/$model.gguf" --split-mode "$run_split" --devices "$run_devs" \
        "${run_extra[@]}" "${tp_run_args[@]}" --n-predict "$tp_npredict" --threads "$tp_threads" --flash-attn on \
        --logits-out "$tpdir/logits/$model-$tag-$side.bin" >"$tpdir/logits-$model-$tag-$side.txt" 2>&1; } 2>/dev/null
    local rc=$?
    if ((rc)); then tp_status $rc; else echo ok; fi
}

# tp_compare A.bin B.bin [TOL]: one cell for the logits table.
tp_compare() {
    local res; res=$("$build/ctests/compare_logits" "$1" "$2" --tol "${3:-0}" 2>&1)
    awk -v tol="${3:-0}" '
        /^max_abs_diff:/ { d = $2 } /^rel_l2:/ { r = $2 } /^bit_identical:/ { bi = $2 }
        /^argmax_mismatch_rows:/ { am = $2 } /^shape: rows=/ { split($2, x, "="); rows = x[2] }
        /^result:/ { res = $2 }
        END {
            if (bi == "yes") { print "bit-identical"; exit }
            if (res == "" || d == "") { print "compare failed (" (res == "" ? "no result" : res) ")"; exit }
            verdict = (tol + 0 > 0) ? (res == "PASS" ? "within" : "NOT within") " rel L2 " tol ", " : "differs: "
            printf "%smax abs diff %s, rel L2 %s, argmax differs in %s/%s rows\n", verdict, d, r, am, rows
        }' <<<"$res"
}

# tp_config MODEL SPLIT DEVICES: benchmarks (upstream, ours, ours with each TP_ENVS item for tensor
# mode), then the logits runs and their comparisons.
tp_config() {
    local model=$1 split=$2 devs=$3 e
    local variants=("") both=()
    if [[ $split == tensor && -z $tp_variant ]]; then
        for e in $tp_envs; do variants+=("$e"); done
        [[ $devs == *,* ]] && for e in $tp_envs_both; do variants+=("$e"); both+=("$e"); done
    fi
    tp_bench "$model" "$split" "$devs" upstream
    for e in "${both[@]}"; do tp_bench "$model" "$split" "$devs" upstream "$e"; done
    for e in "${variants[@]}"; do tp_bench "$model" "$split" "$devs" ours "$e"; done
    local plugin=0; [[ $split == tensor && -n $tp_plugin && -z $tp_variant ]] && plugin=1
    ((plugin)) && tp_bench "$model" "$split" "$devs" plugin

    step "logits $model, $(tp_label "$split" "$devs")"
    local ndev; ndev=$(tr ',' '\n' <<<"$devs" | wc -l)
    local expect="reported"; ((ndev == 1)) && expect="bit-identical"
    local st_ref st_ours vs_ref vs_none tag label
    st_ref=$(tp_logits "$model" "$split" "$devs" upstream)
    for e in "${variants[@]}"; do
        tag=$(tp_tag "$split" "$devs" "$e"); label=$(tp_label "$split" "$devs"); [[ -n $e ]] && label+=" [${e//+/ }]"
        st_ours=$(tp_logits "$model" "$split" "$devs" ours "$e")
        local a="$tpdir/logits/$model-$tag-ours.bin" b="$tpdir/logits/$model-$(tp_tag "$split" "$devs")-upstream.bin"
        local none="$tpdir/logits/$model-$(tp_tag none "$tp_none")-ours.bin"
        if [[ $st_ours != ok ]]; then vs_ref="ours $st_ours"; vs_none="–"
        else
            if [[ -n $e ]]; then vs_ref="–"
            elif [[ $st_ref != ok ]]; then vs_ref="upstream $st_ref"
            else
                vs_ref=$(tp_compare "$a" "$b")
                [[ $expect == bit-identical && $vs_ref != bit-identical ]] && vs_ref="UNEXPECTED, $vs_ref"
            fi
            if [[ $split == none ]]; then vs_none="–"
            elif [[ -f $none ]]; then vs_none=$(tp_compare "$a" "$none" 0.05)
            else vs_none="no split-none run of ours"; fi
        fi
        [[ -n $e ]] && expect="–"
        echo "  $label: ours vs upstream: $vs_ref (expected: $expect); ours vs ours split none: $vs_none"
        printf '%s\t%s\t%s\t%s\t%s\n' "$model" "$label" "$vs_ref" "$expect" "$vs_none" >>"$tpdir/logits.tsv"
    done
    if ((plugin)); then
        # the plugin runs our meta device with the same splits and kernels as ours linked
        label="$split $devs [plugin in upstream's program]"
        local st; st=$(tp_logits "$model" "$split" "$devs" plugin)
        local p="$tpdir/logits/$model-$(tp_tag "$split" "$devs")-plugin.bin"
        local linked="$tpdir/logits/$model-$(tp_tag "$split" "$devs")-ours.bin"
        local none="$tpdir/logits/$model-$(tp_tag none "$tp_none")-ours.bin"
        if [[ $st != ok ]]; then vs_ref="plugin $st"; vs_none="–"
        else
            vs_ref=$(tp_compare "$p" "$linked"); vs_none=$(tp_compare "$p" "$none" 0.05)
        fi
        echo "  $label: vs ours linked: $vs_ref (expected: bit-identical); vs ours split none: $vs_none"
        printf '%s\t%s\t%s\t%s\t%s\n' "$model" "$label" "vs ours linked: $vs_ref" "bit-identical" "$vs_none" >>"$tpdir/logits.tsv"
    fi
}

# The small models of ctests/meta_e2e.cmake, one per architecture libllama splits in tensor mode,
# and the quantized KV caches of its kvq tests (a fourth '|' field: llama_driver arguments):
# name|write_model flags (all 2 layers, 4 heads, 300 tokens, f32; n_embd TP_ARCH_EMBD)[|tolerance[|arguments]].
tp_arch_models=("tiny-mqa-f32|--n-head-kv 1 --n-ff 128 --seed 7"
    "qwen3-f32|--arch qwen3 --n-head-kv 2 --n-ff 128 --seed 7"
    "qwen3moe-f32|--arch qwen3moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 5"
    "gpt-oss-f32|--arch gpt-oss --n-head-kv 2 --n-ff 64 --n-expert 4 --n-expert-used 2 --seed 5"
    "gemma-mqa-f32|--arch gemma --n-head-kv 1 --n-ff 128 --seed 3"
    "qwen35-f32|--arch qwen35 --n-head-kv 2 --n-ff 128 --seed 7"
    "qwen2-f32|--arch qwen2 --n-head-kv 2 --n-ff 128 --seed 7"
    "gemma2-f32|--arch gemma2 --n-head-kv 2 --n-ff 128 --seed 3|1e-3"
    "gemma3-f32|--arch gemma3 --n-head-kv 2 --n-ff 128 --seed 3|1e-3"
    "llama4-f32|--arch llama4 --n-layer 4 --n-head-kv 2 --n-ff 64 --n-expert 4 --n-expert-used 1 --seed 5|1e-3"
    "cohere2-f32|--arch cohere2 --n-head-kv 2 --n-ff 128 --seed 3"
    "glm4moe-f32|--arch glm4moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11"
    "phi3-f32|--arch phi3 --n-head-kv 2 --n-ff 128 --seed 7"
    "lfm2-f32|--arch lfm2 --n-head-kv 2 --n-ff 128 --seed 7"
    "lfm2moe-f32|--arch lfm2moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11"
    "kvq-q8_0-f32|--n-head-kv 2 --n-ff 256 --seed 3||--cache-type-k q8_0 --cache-type-v q8_0"
    "kvq-q4_0-f32|--n-head-kv 2 --n-ff 256 --seed 3||--cache-type-k q4_0 --cache-type-v q4_0")

# tp_archs: each architecture on the GPU(s): ours split none on TP_NONE_DEVICE, then ours,
# upstream and the plugin in tensor mode over each multi-device list of TP_DEVICES. The tensor
# runs must give the split-none tokens; logits within rel L2 1e-4 (f32 models, as in the CPU
# tests), or the entry's own tolerance after a second '|' (see meta_e2e.cmake); ours vs upstream
# in tensor mode is reported. Appends to archs.tsv.
tp_archs() {
    local entry name flags d tol
    for entry in "${tp_arch_models[@]}"; do
        tp_arch_entry "$entry"
        "$build/ctests/write_model" --n-embd "$tp_arch_embd" --n-layer 2 --n-head 4 --n-vocab 300 --type f32 "${flags[@]}" \
            --out "$out/models/arch-$name.gguf" >/dev/null || { echo "  $name: write_model failed"; continue; }
        step "architecture $name"
        local st_none; st_none=$(tp_logits "arch-$name" none "$tp_none" ours)
        local none="$tpdir/logits/arch-$name-$(tp_tag none "$tp_none")-ours.bin"
        for d in $tp_devices; do
            [[ $d == *,* ]] || continue
            local side st cmp row="$name\ttensor $d"
            for side in ours upstream plugin; do
                [[ $side == plugin && -z $tp_plugin ]] && { row+="\t–"; continue; }
                # the plugin learns the head size from Q/K norms or sinks, which not every
                # model has; the variable gives it (see README)
                local e=""; [[ $side == plugin ]] && e="GGML_BACKEND_RS_TP_HEAD_DIM=$((tp_arch_embd / 4))"
                st=$(tp_logits "arch-$name" tensor "$d" "$side" "$e")
                local f="$tpdir/logits/arch-$name-$(tp_tag tensor "$d" "$e")-$side.bin"
                if [[ $st != ok ]]; then cmp="$side $st"
                elif [[ $st_none != ok ]]; then cmp="split none $st_none"
                else cmp=$(tp_compare "$f" "$none" "$tol")
                    # same tokens: the driver's greedy tokens, compared as text
                    local t_a t_b
                    t_a=$(grep -m1 '^tokens:' "$tpdir/logits-arch-$name-$(tp_tag tensor "$d" "$e")-$side.txt")
                    t_b=$(grep -m1 '^tokens:' "$tpdir/logits-arch-$name-$(tp_tag none "$tp_none")-ours.txt")
                    if [[ -z $t_a || -z $t_b ]]; then cmp="no tokens line, $cmp"
                    elif [[ $t_a == "$t_b" ]]; then cmp="same tokens, $cmp"
                    else cmp="OTHER TOKENS, $cmp"; fi
                fi
                echo "  tensor $d, $side vs ours split none: $cmp"
                row+="\t$cmp"
            done
            printf '%b\n' "$row" >>"$tpdir/archs.tsv"
        done
    done
    tp_run_args=()
}

# tp_arch_entry ENTRY: `name`, `flags` (an array), `tol` and `tp_run_args` (an array) of an entry
# of tp_arch_models.
tp_arch_entry() {
    local f; IFS='|' read -r -a f <<<"$1"
    name=${f[0]}; tol=${f[2]:-1e-4}
    read -r -a flags <<<"${f[1]:-}"
    read -r -a tp_run_args <<<"${f[3]:-}"
}

# The tables, as markdown, from results.tsv, logits.tsv and archs.tsv.
tp_table() {
    {
        echo "## Throughput: llama_bench, tokens/s (median of $tp_reps timed repetitions after $tp_warmup warm-up run(s); min–max)"
        echo
        echo "flash attention on, n_ubatch $tp_ub, $tp_threads threads. ours/upstream: ratio of medians (> 1: ours faster)."
        echo "vs none: this row's median / the same build's split-none median (same model and test)."
        [[ -n $tp_envs ]] && echo "Rows with [settings] are extra runs of ours with those environment settings; their ours/upstream uses the upstream run of the same split and devices."
        [[ -n $tp_envs_both ]] && echo "Rows of the TP_ENVS_BOTH settings ($tp_envs_both) run upstream with them too, and compare with that run."
        echo
        echo "| model | test | split, devices | upstream | ours | ours/upstream | upstream vs none | ours vs none |"
        echo "|---|---|---|---|---|---|---|---|"
        awk -F'\t' '
            function cell(k) { return (k in st) ? (st[k] == "ok" ? sprintf("%.2f (%.2f–%.2f)", med[k], mn[k], mx[k]) : st[k]) : "–" }
            function ratio(a, b) { return (a in st && b in st && st[a] == "ok" && st[b] == "ok" && med[b] > 0) ? sprintf("%.3f", med[a] / med[b]) : "–" }
            {
                m = $1; t = $2; l = $3
                if (!(m in mi)) { mi[m] = ++nm; mname[nm] = m }
                if (!(t in ti)) { ti[t] = ++nt; tname[nt] = t }
                if (!(l in li)) { li[l] = ++nl; lname[nl] = l }
                k = m SUBSEP t SUBSEP l SUBSEP $6
                st[k] = $7; med[k] = $8; mn[k] = $9; mx[k] = $10
                base[l] = $4; spl[l] = $5
                if ($5 == "none") none_label[m SUBSEP t] = l
            }
            END {
                for (a = 1; a <= nm; a++) for (b = 1; b <= nt; b++) for (c = 1; c <= nl; c++) {
                    m = mname[a]; t = tname[b]; l = lname[c]
                    ko = m SUBSEP t SUBSEP l SUBSEP "ours"
                    ku = m SUBSEP t SUBSEP l SUBSEP "upstream"
                    own_up = ku in st
                    if (!own_up) ku = m SUBSEP t SUBSEP base[l] SUBSEP "upstream"
                    if (!(ko in st) && !(ku in st)) continue
                    n = (m SUBSEP t) in none_label ? none_label[m SUBSEP t] : ""
                    ru = "–"; ro = "–"
                    if (spl[l] != "none" && n != "") {
                        if (l == base[l] || own_up) ru = ratio(ku, m SUBSEP t SUBSEP n SUBSEP "upstream")
                        ro = ratio(ko, m SUBSEP t SUBSEP n SUBSEP "ours")
                    }
                    up = (l == base[l] || own_up) ? cell(ku) : "–"
                    printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", m, t, l, up, cell(ko), ratio(ko, ku), ru, ro
                }
            }' "$tpdir/results.tsv"
        echo
        echo "## Logits: llama_driver, $tp_npredict greedy tokens (prompt + $((tp_npredict - 1)) single-token steps), compare_logits"
        echo
        echo "ours vs upstream in the same configuration (bit-identical expected on one device); ours vs ours split none: passes when rel L2 <= 0.05."
        echo
        echo "| model | split, devices | ours vs upstream | expected | ours vs ours split none |"
        echo "|---|---|---|---|---|"
        [[ -f $tpdir/logits.tsv ]] && awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$tpdir/logits.tsv"
        if [[ -s $tpdir/archs.tsv ]]; then
            local entry name flags tol own=""
            for entry in "${tp_arch_models[@]}"; do
                tp_arch_entry "$entry"; [[ $tol != 1e-4 ]] && own+="; ${name%-f32}: $tol"
            done
            echo
            echo "## Architectures: the small f32 models of ctests/meta_e2e.cmake, $tp_npredict greedy tokens, each run vs ours split none on $tp_none (rel L2 <= 1e-4$own)"
            echo
            echo "| model | split, devices | ours | upstream | plugin in upstream's program (GGML_BACKEND_RS_TP_HEAD_DIM=$((tp_arch_embd / 4))) |"
            echo "|---|---|---|---|---|"
            awk -F'\t' '{ printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$tpdir/archs.tsv"
        fi
    } >"$tpdir/table.md"
}

tp_pack() {  # the logs and tables (no models, no logits files, no build tree) as one tarball
    tar -C "$out" -czf "$1" --exclude='*.bin' --exclude='*.gguf' --exclude=build --exclude=models \
        $(cd "$out" && ls -d ./*.log tp 2>/dev/null)
}

tp() {
    tp_settings
    rm -rf "$tpdir"; mkdir -p "$tpdir/logits" "$out/models"
    : >"$tpdir/results.tsv"
    {
        echo "started: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
        local gpus; gpus=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | paste -sd ';')
        echo "host: $(nproc) cores; GPUs: ${gpus:-none (no nvidia-smi)}"
        echo "settings: models='$tp_models' none=$tp_none tensor='$tp_devices' layer='$tp_layer' row='$tp_row' envs='$tp_envs' plugin='${tp_plugin:-off}'"
        echo "          reps=$tp_reps warmup=$tp_warmup n_prompt=$tp_np n_gen=$tp_ng n_ubatch=$tp_ub threads=$tp_threads nccl=$tp_nccl cpu_test=${TP_CPU_TEST:-0}"
    } | tee "$tpdir/settings.txt"
    nvidia-smi >"$tpdir/nvidia-smi.txt" 2>&1
    nvidia-smi topo -m >"$tpdir/topology.txt" 2>&1
    if [[ $tp_nccl != off ]]; then
        # the wheel build() takes NCCL from, whichever CUDA it is for
        python3 -c 'import importlib.metadata as m
names = [d.metadata["Name"] + " " + d.version for d in m.distributions()
         if (d.metadata["Name"] or "").startswith("nvidia-nccl")]
print("NCCL:", "; ".join(names) or "no nvidia-nccl wheel")' \
            >>"$tpdir/settings.txt" 2>&1
    fi
    if [[ -n ${TP_PREBUILT:-} ]]; then
        step "using the build in $build"
    else
        local arg=""; [[ $tp_nccl != off ]] && arg=nccl
        build $arg || { echo "build failed: see $out/build.log"; return 1; }
    fi
    # (the trees without NCCL serve the benchmark rows only)
    if [[ $tp_nccl == both && $tp_bench == on ]]; then
        if [[ -n ${TP_PREBUILT_NONCCL:-} ]]; then step "using the build without NCCL in $tp_build_nonccl"
        else
            local main=$build; build=$tp_build_nonccl
            build "" -nonccl || { echo "build without NCCL failed: see $out/build-nonccl.log"; return 1; }
            build=$main
        fi
    fi
    if [[ $tp_bench != on ]]; then
        tp_archs; tp_table
        echo "finished: $(date -u '+%Y-%m-%d %H:%M:%S UTC') (${SECONDS}s)" >>"$tpdir/settings.txt"
        cat "$tpdir/table.md"
        return 0
    fi
    local bin="$build/ctests" f16="$out/models/f16.gguf" want have
    # The models are kept across runs on the same machine when their flags are unchanged.
    want="write_model ${tp_shape[*]} --type f16 --seed 42 --stream"
    have=$(cat "$f16.flags" 2>/dev/null)
    if [[ -f $f16 && $have == "$want" ]]; then step "model f16: kept from an earlier run"
    else
        step "model f16: writing"
        rm -f "$out"/models/*
        "$bin/write_model" "${tp_shape[@]}" --type f16 --seed 42 --stream --out "$f16" | tail -2 || return 1
        echo "$want" >"$f16.flags"
    fi
    local m
    for m in $tp_models; do
        [[ $m == f16 ]] && continue
        [[ -f $out/models/$m.gguf && $(cat "$out/models/$m.gguf.flags" 2>/dev/null) == "$want" ]] && continue
        step "model $m: llama_bench --quantize"
        "$build/bench/llama_bench" --quantize "$f16" "$out/models/$m.gguf" "$m" | tail -1 || return 1
        echo "$want" >"$out/models/$m.gguf.flags"
    done
    ls -l "$out"/models/*.gguf | tee "$tpdir/models.txt"

    local d
    if [[ ${TP_ARCHS:-on} == on ]]; then tp_archs; tp_table; fi
    for m in $tp_models; do
        tp_config "$m" none "$tp_none"; tp_table
        for d in $tp_devices; do tp_config "$m" tensor "$d"; tp_table; done
        for d in $tp_layer; do tp_config "$m" layer "$d"; tp_table; done
        for d in $tp_row; do tp_config "$m" row "$d"; tp_table; done
        if [[ $tp_nccl == both ]]; then
            local main=$build; build=$tp_build_nonccl; tp_variant=nonccl
            for d in $tp_devices; do [[ $d == *,* ]] && { tp_config "$m" tensor "$d"; tp_table; }; done
            build=$main; tp_variant=""
        fi
    done
    echo "finished: $(date -u '+%Y-%m-%d %H:%M:%S UTC') (${SECONDS}s)" >>"$tpdir/settings.txt"
    step "tables ($tpdir/table.md)"
    cat "$tpdir/table.md"
}

tp_finish() {  # after tp: the tarball, then the marker (tp-wait copies the tarball once it sees it)
    echo "exit=$1" >"$tpdir/exit.txt"
    tp_pack "$tp_tarball.tmp" && mv "$tp_tarball.tmp" "$tp_tarball"
    echo "exit=$1" >"$out/tp-done"
    if [[ -n ${OUT:-} ]]; then cp "$tp_tarball" "$OUT/tp.tgz"; fi
}

tp_start() {
    local src=/tmp/tp-src
    if [[ -f $out/tp-job.pid ]] && kill -0 "$(cat "$out/tp-job.pid")" 2>/dev/null; then
        echo "tp-start: a tp job is already running (pid $(cat "$out/tp-job.pid")); use tp-wait" >&2
        return 1
    fi
    case ${TP_NCCL:-off} in off|on|both) ;; *) echo "tp-start: TP_NCCL=$TP_NCCL: not off, on or both" >&2; return 1 ;; esac
    # a build happens unless TP_PREBUILT (and, for TP_NCCL=both, TP_PREBUILT_NONCCL) name trees
    local builds=0
    [[ -z ${TP_PREBUILT:-} ]] && builds=1
    [[ ${TP_NCCL:-off} == both && -z ${TP_PREBUILT_NONCCL:-} ]] && builds=1
    if ((builds)) && [[ ! -f $gpu_dir/libggml_backend_rs.a || ! -d $gpu_dir/llama.cpp ]]; then
        echo "tp-start: $gpu_dir must hold llama.cpp/ and libggml_backend_rs.a (see docs/gpu.md)" >&2
        return 1
    fi
    # The tree and .gpu/ are copied: the next device call replaces the working tree and .gpu/.
    rm -rf "$src"; mkdir -p "$src"
    tar -C "$root" --exclude=./build --exclude=./target --exclude=./.git --exclude=./.gpu -cf - . | tar -C "$src" -xf -
    if [[ -d $gpu_dir ]]; then mkdir -p "$src/.gpu"; cp -rL "$gpu_dir/." "$src/.gpu/"; fi
    rm -f "$out/tp-done" "$tp_tarball" "$out/tp-wait.lines"
    GPU_DIR="$src/.gpu" OUT="" setsid nohup bash "$src/bench/gpu.sh" tp >"$out/tp-job.log" 2>&1 </dev/null &
    echo $! >"$out/tp-job.pid"
    echo "tp-start: job started (pid $!); log $out/tp-job.log; marker $out/tp-done. Next: bench/gpu.sh tp-wait"
}

# New lines of the job log since the last call (so each tp-wait shows only what is new).
tp_progress() {
    local shown n
    shown=$(cat "$out/tp-wait.lines" 2>/dev/null || echo 0); n=$(wc -l <"$out/tp-job.log")
    if (( n > shown )); then
        sed -n "$((shown + 1)),${n}p" "$out/tp-job.log" |
            grep -E '^(==>|  |started|host|settings|build failed|wrote|quantized)' | grep -v '^==> tables'
    fi
    echo "$n" >"$out/tp-wait.lines"
}

tp_wait() {
    local limit=${1:-560} t0=$SECONDS
    if [[ ! -f $out/tp-job.log ]]; then
        echo "tp-wait: no job log ($out/tp-job.log): no tp-start on this machine (a machine idle for 30 s is given back; a new one starts bare)" >&2
        return 1
    fi
    while [[ ! -f $out/tp-done ]] && (( SECONDS - t0 < limit )); do
        tp_progress
        if ! kill -0 "$(cat "$out/tp-job.pid" 2>/dev/null)" 2>/dev/null && [[ ! -f $out/tp-done ]]; then
            echo "tp-wait: the job is gone without its marker; last lines of its log:"; tail -20 "$out/tp-job.log"; break
        fi
        sleep 5
    done
    tp_progress
    if [[ -f $out/tp-done ]]; then
        echo; echo "tp job finished: $(cat "$out/tp-done"); $(tail -1 "$tpdir/settings.txt" 2>/dev/null)"; echo
        cat "$tpdir/table.md" 2>/dev/null
        if [[ -n ${OUT:-} ]]; then cp "$tp_tarball" "$OUT/tp.tgz" && echo "(logs and tables: \$OUT/tp.tgz)"; fi
        return 0
    fi
    local started; started=$(stat -c %Y "$out/tp-job.pid" 2>/dev/null || date +%s)
    echo; echo "tp-wait: not finished after $((SECONDS - t0)) s (job running for $(( $(date +%s) - started )) s); call bench/gpu.sh tp-wait again."
    if [[ -f $tpdir/table.md ]]; then echo "Tables so far:"; cat "$tpdir/table.md"; fi
    if [[ -n ${OUT:-} ]]; then tp_pack "$OUT/tp-partial.tgz" && echo "(logs so far: \$OUT/tp-partial.tgz)"; fi
    return 3
}

case "${1:-all}" in
    all) build && run; echo "exit=$?" >"$out/done" ;;
    multi) build nccl && multi; echo "exit=$?" >"$out/done" ;;
    tp) tp; tp_finish $? ;;
    tp-start) tp_start ;;
    tp-wait) tp_wait "${2:-560}" ;;
    *) echo "usage: $0 all|multi|tp|tp-start|tp-wait [SECONDS]" >&2; exit 2 ;;
esac
