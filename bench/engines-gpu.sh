#!/usr/bin/env bash
# The AllReduce through host memory by the copy engines against the mapped kernel, on the one-GPU
# proxy (docs/benchmarks.md, "The copy engines"): first `mappedcheck --time` (the transports
# alone, 16 KiB to 8 MiB a partial); then tensor mode over CUDA0,CUDA0 with
# GGML_META_ALLREDUCE=mapped and GGML_META_MAPPED_APART=1 (a launch per device, as on two GPUs),
# the copy engines from their default threshold (as the meta device runs) against the kernel
# alone (GGML_META_ENGINES_MIN=off), split none and the peer kernel, pp512 and tg128 at depths 0
# and 16 384, on the 8B-shaped f16 model and its Q4_0 copy; prompts of 2 to 64 tokens, every cut
# by the engines (GGML_META_ENGINES_MIN=0) against the kernel alone: where the two cross; and,
# every cut by the copy engines, the logits of two devices (first) and four (last) against the
# peer path's, bit for bit. Our tree only (one CUDA build, about 200 s on 16 cores; the whole
# job about 420 s, inside one device call). It needs .gpu/ as docs/gpu.md prepares it and the
# PTX in .gpu-ptx/ (`cargo run --release -p ggml-backend-rs-core --example dump_ptx -- .gpu-ptx`);
# results and logs go to $OUT (default /tmp/out) as they come.
#   OUT=/tmp/out bench/engines-gpu.sh            (MODELS=f16 for the f16 model alone)
set -u
OUT=${OUT:-/tmp/out}; T=/tmp/ge; mkdir -p $T/models "$OUT"
trap 'touch "$OUT/FINISHED"' EXIT
log() { echo "$(date +%T) $*" | tee -a "$OUT/job.log"; }
log "start $(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader)"
inc=/usr/local/cuda/include
cc -O2 -std=c11 -Wall -Wextra -ffp-contract=off -I$inc bench/ptxcheck/mappedcheck.c -o $T/mappedcheck \
  -L$inc/../lib64/stubs -L$inc/../lib64 -lcuda -lm > "$OUT/mappedcheck-build.log" 2>&1 \
  && timeout 120 $T/mappedcheck --time .gpu-ptx > "$OUT/mappedcheck-time.txt" 2>&1
log "mappedcheck --time rc=$?"
grep '^time' "$OUT/mappedcheck-time.txt" | sed 's/^/    /' | tee -a "$OUT/job.log"
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
common="--n-gen 128 --n-ubatch 512 --flash-attn on --threads 4 --warmup 1 --reps 3"
run() { local name=$1; shift; timeout 150 env "$@" > "$OUT/$name.txt" 2>&1; log "$name rc=$?"; grep '^result' "$OUT/$name.txt" | sed 's/^/    /' | tee -a "$OUT/job.log"; }
apart="GGML_META_ALLREDUCE=mapped GGML_META_MAPPED_APART=1"
logits() {  # <model> <devices> <name> [env...]: 16 tokens' logits
  local m=$1 d=$2 name=$3; shift 3
  timeout 120 env "$@" $D --model $M/$m.gguf --split-mode tensor --devices $d --n-predict 16 --threads 4 \
    --flash-attn on --logits-out $T/$name.lgts > "$OUT/$name-logits.txt" 2>&1; log "$name logits rc=$?"
}
for m in ${MODELS:-f16 q4_0}; do
  if [ $m = q4_0 ]; then
    $B --quantize $M/f16.gguf $M/q4_0.gguf q4_0 >> "$OUT/model.log" 2>&1 || { log quantize failed; exit 1; }
    log q4_0 written
  fi
  logits $m CUDA0,CUDA0 $m-x2-peer
  logits $m CUDA0,CUDA0 $m-x2-engines $apart GGML_META_ENGINES_MIN=0
  $C $T/$m-x2-peer.lgts $T/$m-x2-engines.lgts --tol 0 2>&1 | tail -3 | tee -a "$OUT/job.log"
  tensor="--model $M/$m.gguf --split-mode tensor --devices CUDA0,CUDA0 $common --n-prompt 512 --depths 0,16384"
  run $m-engines $apart $B $tensor
  run $m-kernel $apart GGML_META_ENGINES_MIN=off $B $tensor
  run $m-none $B --model $M/$m.gguf --split-mode none --devices CUDA0 $common --n-prompt 512 --depths 0,16384
  run $m-peer $B $tensor
  for p in 2 4 16 64; do
    small="--model $M/$m.gguf --split-mode tensor --devices CUDA0,CUDA0 --n-prompt $p --n-gen 0 --n-ubatch 512 --flash-attn on --threads 4 --warmup 1 --reps 5 --depths 0"
    run $m-pp$p-engines $apart GGML_META_ENGINES_MIN=0 $B $small
    run $m-pp$p-kernel $apart GGML_META_ENGINES_MIN=off $B $small
  done
  logits $m CUDA0,CUDA0,CUDA0,CUDA0 $m-x4-peer
  logits $m CUDA0,CUDA0,CUDA0,CUDA0 $m-x4-engines $apart GGML_META_ENGINES_MIN=0
  $C $T/$m-x4-peer.lgts $T/$m-x4-engines.lgts --tol 0 2>&1 | tail -3 | tee -a "$OUT/job.log"
done
log done
