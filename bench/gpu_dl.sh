#!/usr/bin/env bash
# GGML_BACKEND_DL on the GPU host: CUDA and every CPU variant as modules, loaded at run time by
# our registry; ctests/dl against upstream's own loader (CPU and CUDA0). Carried: .gpu/llama.cpp
# and .gpu/libggml_backend_rs.a, as for bench/gpu.sh. The build outlives one call, so:
#   bash bench/gpu_dl.sh start && bash bench/gpu_dl.sh wait 540   (then `wait` again if needed)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out=/tmp/gpu-dl
case "${1:-}" in
start)
    rm -rf "$out" && mkdir -p "$out"
    cp -r "$root" "$out/src"          # the carried tree is replaced by the next call
    setsid bash -c "
        cd '$out/src' && SECONDS=0
        cmake -S . -B '$out/build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
            -DLLAMA_CPP_DIR='$out/src/.gpu/llama.cpp' -DGGML_BACKEND_RS_STATICLIB='$out/src/.gpu/libggml_backend_rs.a' \
            -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF \
            -DCMAKE_CUDA_ARCHITECTURES=90 > '$out/configure.log' 2>&1 &&
        cmake --build '$out/build' -j \$(nproc) > '$out/build.log' 2>&1 &&
        echo \"built in \${SECONDS}s\" > '$out/built' &&
        ctest --test-dir '$out/build' --output-on-failure -j 4 > '$out/ctest.log' 2>&1
        echo \$? > '$out/done'" > /dev/null 2>&1 < /dev/null &
    echo "gpu_dl: started"
    ;;
wait)
    limit=${2:-540}
    while [[ ! -f $out/done && $SECONDS -lt $limit ]]; do sleep 5; done
    [[ -f $out/built ]] && cat "$out/built"
    if [[ ! -f $out/done ]]; then
        echo "gpu_dl: not finished after ${SECONDS}s"; tail -3 "$out/build.log" 2>/dev/null; exit 3
    fi
    grep -E 'Test +#|tests passed|tests failed' "$out/ctest.log"
    mkdir -p "${OUT:-/tmp}" && tar czf "${OUT:-/tmp}/gpu-dl.tgz" -C "$out" configure.log build.log ctest.log
    exit "$(cat "$out/done")"
    ;;
*) echo "usage: $0 start | wait [SECONDS]" >&2; exit 2 ;;
esac
