#!/usr/bin/env bash
# GGML_BACKEND_DL with CUDA on the GPU host: bench/gpu.py dl-start / dl-wait (see docs/gpu.md).
# This wrapper keeps the old command lines: bash bench/gpu_dl.sh start | wait [SECONDS].
case ${1:-} in
    start | wait) mode=dl-$1; shift ;;
    *) echo "usage: $0 start | wait [SECONDS]" >&2; exit 2 ;;
esac
exec python3 "$(dirname "${BASH_SOURCE[0]}")/gpu.py" "$mode" --from-env "$@"
