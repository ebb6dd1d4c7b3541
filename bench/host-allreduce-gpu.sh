#!/usr/bin/env bash
# The AllReduce through host memory on the one-GPU proxy (docs/benchmarks.md, "The AllReduce
# through host memory"): tensor mode over CUDA0,CUDA0 with GGML_META_ALLREDUCE=mapped and
# GGML_META_MAPPED_APART=1 (a launch per device, as on two GPUs) against split none and the
# peer kernel, on the 8B-shaped f16 model and its Q4_0 copy, depths 0 and 16384; then the
# host path's logits against the peer path's, bit for bit; then both paths over three and four
# devices (depth 0) with the same logits check. Our tree only (one CUDA build, about
# 240 s on 16 cores; the whole job about 460 s, inside one device call). It needs .gpu/ as
# docs/gpu.md prepares it; results and logs go to $OUT (default /tmp/out) as they come.
#   OUT=/tmp/out bench/host-allreduce-gpu.sh
set -u
OUT=${OUT:-/tmp/out}; T=/tmp/gb; mkdir -p $T/models "$OUT"
trap 'touch "$OUT/FINISHED"' EXIT
log() { echo "$(date +%T) $*" | tee -a "$OUT/job.log"; }
log "start $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
cmake -S . -B $T/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DLLAMA_CPP_DIR=$PWD/.gpu/llama.cpp -DGGML_BACKEND_RS_STATICLIB=$PWD/.gpu/libggml_backend_rs.a \
  -DGGML_BACKEND_RS_VALGRIND=OFF -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DGGML_NATIVE=OFF > "$OUT/configure.log" 2>&1 || { log configure failed; tail -20 "$OUT/configure.log"; exit 1; }
log configured
cmake --build $T/build -j16 --target llama_bench write_model llama_driver compare_logits > "$OUT/build.log" 2>&1 || { log build failed; grep -A5 -m5 'FAILED\|error' "$OUT/build.log"; exit 1; }
log built
B=$T/build/bench/llama_bench; D=$T/build/ctests/llama_driver; C=$T/build/ctests/compare_logits; M=$T/models
$T/build/ctests/write_model --n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 --n-vocab 32000 \
  --n-ctx-train 8192 --rope-freq-base 500000 --type f16 --seed 42 --stream --out $M/f16.gguf > "$OUT/model.log" 2>&1 || { log write_model failed; exit 1; }
log f16 written
$B --quantize $M/f16.gguf $M/q4_0.gguf q4_0 >> "$OUT/model.log" 2>&1 || { log quantize failed; exit 1; }
log q4_0 written
common="--n-prompt 512 --n-gen 128 --n-ubatch 512 --flash-attn on --threads 4 --warmup 1 --reps 3 --depths 0,16384"
run() { local name=$1; shift; timeout 150 env "$@" > "$OUT/$name.txt" 2>&1; log "$name rc=$?"; grep '^result' "$OUT/$name.txt" | sed 's/^/    /' | tee -a "$OUT/job.log"; }
apart="GGML_META_ALLREDUCE=mapped GGML_META_MAPPED_APART=1"
for m in q4_0 f16; do
  run $m-apart $apart $B --model $M/$m.gguf --split-mode tensor --devices CUDA0,CUDA0 $common
  run $m-none $B --model $M/$m.gguf --split-mode none --devices CUDA0 $common
  run $m-peer $B --model $M/$m.gguf --split-mode tensor --devices CUDA0,CUDA0 $common
  for v in peer apart; do
    e=""; [ $v = apart ] && e="$apart"
    timeout 120 env $e $D --model $M/$m.gguf --split-mode tensor --devices CUDA0,CUDA0 --n-predict 16 --threads 4 \
      --flash-attn on --logits-out $T/$m-$v.lgts > "$OUT/$m-logits-$v.txt" 2>&1; log "$m logits $v rc=$?"
  done
  $C $T/$m-peer.lgts $T/$m-apart.lgts --tol 0 2>&1 | tail -3 | tee -a "$OUT/job.log"
done
for m in q4_0 f16; do
  for d in CUDA0,CUDA0,CUDA0 CUDA0,CUDA0,CUDA0,CUDA0; do
    n=$(( $(tr -cd , <<< "$d" | wc -c) + 1 ))
    for v in peer apart; do
      e=""; [ $v = apart ] && e="$apart"
      run $m-x$n-$v $e $B --model $M/$m.gguf --split-mode tensor --devices $d ${common% --depths*}
      timeout 120 env $e $D --model $M/$m.gguf --split-mode tensor --devices $d --n-predict 16 --threads 4 \
        --flash-attn on --logits-out $T/$m-x$n-$v.lgts > "$OUT/$m-x$n-logits-$v.txt" 2>&1; log "$m x$n logits $v rc=$?"
    done
    $C $T/$m-x$n-peer.lgts $T/$m-x$n-apart.lgts --tol 0 2>&1 | tail -3 | tee -a "$OUT/job.log"
  done
done
log done
