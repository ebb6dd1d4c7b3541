#!/usr/bin/env bash
# Compiles bench/ptxcheck/ptxcheck.c against the CUDA driver API and runs it on the PTX modules
# in DIR (written by `cargo run -p ggml-backend-rs-core --example dump_ptx -- DIR`), on GPU 0:
# the checks of DIR (with `mappedcheck.c` for the mapped kernel's modules), then the timings (`ptxcheck --time`) of every BASELINE_DIR and DIR, and
# with a BASELINE_DIR the bit-for-bit comparison of DIR's outputs with the first one's.
#
#   bench/ptxcheck/run.sh DIR [BASELINE_DIR ...]
#
# To time a change: dump the PTX of the commit before it into BASELINE_DIR and the PTX after it
# into DIR. cuda.h: $CUDA_INCLUDE_DIR, else $CUDA_HOME/include, $CUDA_PATH/include, nvcc's
# ../include, /usr/local/cuda/include. libcuda: the driver's, through the linker's search path or
# CUDA's lib64/stubs (the driver's libcuda.so.1 is the one loaded at run time). CC: the compiler
# [cc]. Exits non-zero when a check fails or an output differs from the baseline's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: run.sh DIR_WITH_PTX [BASELINE_DIR ...]}"
shift

inc="${CUDA_INCLUDE_DIR:-}"
if [[ -z $inc ]]; then
    nvcc_inc=""
    if command -v nvcc >/dev/null; then nvcc_inc="$(dirname "$(command -v nvcc)")/../include"; fi
    for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}"; do
        [[ -n $d && -f $d/include/cuda.h ]] && { inc="$d/include"; break; }
    done
    if [[ -z $inc ]]; then
        for d in "$nvcc_inc" /usr/local/cuda/include; do
            [[ -n $d && -f $d/cuda.h ]] && { inc="$d"; break; }
        done
    fi
fi
[[ -f $inc/cuda.h ]] || { echo "run.sh: no cuda.h found; set CUDA_INCLUDE_DIR" >&2; exit 2; }

libs=()
for d in "$inc/../lib64" "$inc/../lib64/stubs" "$inc/../lib/stubs"; do
    [[ -d $d ]] && libs+=("-L$d")
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# -ffp-contract=off: the CPU model must round every f32 add on its own, as the kernels do
"${CC:-cc}" -O2 -std=c11 -Wall -Wextra -ffp-contract=off -I"$inc" "$here/ptxcheck.c" \
    -o "$work/ptxcheck" "${libs[@]}" -lcuda -lm
rc=0
"$work/ptxcheck" "$dir" || rc=$?
"$work/ptxcheck" --time "$@" "$dir" || rc=$((rc ? rc : $?))
# the mapped kernel (crates/core/src/mapped.rs), where DIR has it
if compgen -G "$dir/mapped_x*.ptx" > /dev/null; then
    "${CC:-cc}" -O2 -std=c11 -Wall -Wextra -ffp-contract=off -I"$inc" "$here/mappedcheck.c" \
        -o "$work/mappedcheck" "${libs[@]}" -lcuda -lm
    "$work/mappedcheck" "$dir" || rc=$((rc ? rc : $?))
fi
exit "$rc"
