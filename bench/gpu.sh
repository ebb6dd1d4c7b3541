#!/usr/bin/env bash
# The GPU benchmark is bench/gpu.py (see docs/gpu.md). This wrapper keeps the old command lines
# working: the same modes (all, multi, tp, tp-start, tp-wait [SECONDS]) and the TP_* / GPU_DIR
# environment settings, which gpu.py reads with --from-env (its flags set the same, typed).
mode=${1:-all}
shift $(($# > 0))
exec python3 "$(dirname "${BASH_SOURCE[0]}")/gpu.py" "$mode" --from-env "$@"
