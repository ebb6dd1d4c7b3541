#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer through the libfuzzer-sys crate, on stable Rust: the
# sanitizer-coverage instrumentation is a set of stable `-C` options). Builds the targets of
# fuzz/ and runs each for SECONDS (default 30), JOBS of them at a time (default: the cores),
# over its committed corpus (fuzz/corpus/<target>, read only: new inputs go to
# build/fuzz/corpus/<target>). Fails on any crash, panic, input that takes longer than 10 s (a
# hang) or more than 2 GiB, and prints each target's executions.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]        default: every target of fuzz/Cargo.toml
#   scripts/fuzz.sh --merge TARGET               fold build/fuzz/corpus/TARGET into the
#                                                committed corpus, minimised (libFuzzer -merge)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="$root/build/fuzz"
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing"
# An explicit --target keeps the flags off build scripts, which run on the host uninstrumented.
host="$(rustc -vV | sed -n 's/^host: //p')"
cargo build --release --manifest-path fuzz/Cargo.toml --target-dir "$out/target" --target "$host" --bins
bin="$out/target/$host/release"

if [[ "${1:-}" == "--merge" ]]; then
    t=${2:?--merge needs a target}
    mkdir -p "fuzz/corpus/$t"
    "$bin/$t" -merge=1 "fuzz/corpus/$t" "$out/corpus/$t"
    exit 0
fi

seconds="${1:-30}"
shift || true
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(sed -n 's/^name = "\([a-z_]*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^ggml')
fi
# One target's run; its log is $out/<target>.log. Fails, printing the log's tail, on a finding.
fuzz_one() {
    local t=$1 log="$out/$1.log"
    mkdir -p "$out/corpus/$t" "$out/artifacts/$t" "fuzz/corpus/$t"
    if ! "$bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -artifact_prefix="$out/artifacts/$t/" -print_final_stats=1 \
            "$out/corpus/$t" "fuzz/corpus/$t" > "$log" 2>&1; then
        tail -40 "$log"
        echo "fuzz: $t failed; the input is in $out/artifacts/$t/" >&2
        return 1
    fi
}

# The targets side by side, as many at a time as there are cores (JOBS): each one runs its
# SECONDS whatever runs beside it (libFuzzer's run is one process on one core).
jobs="${JOBS:-$(nproc)}"
failed=0
running=0
reap() { wait -n || failed=1; running=$((running - 1)); }
for t in "${targets[@]}"; do
    if (( running >= jobs )); then reap; fi
    fuzz_one "$t" &
    running=$((running + 1))
done
while (( running > 0 )); do reap; done
(( failed == 0 )) || exit 1
for t in "${targets[@]}"; do
    log="$out/$t.log"
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    printf 'fuzz: %-14s %9s executions in %s s (%s/s), %s, corpus %s files\n' "$t" "$execs" "$seconds" \
        "$rate" "$cov" "$(ls "fuzz/corpus/$t" | wc -l)"
done
