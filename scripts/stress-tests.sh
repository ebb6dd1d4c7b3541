#!/usr/bin/env bash
# The suite's stability check, run by hand after ./scripts/test.sh has built the trees: every
# tree's ctests ROUNDS times in a row (default 3) at -j JOBS (default 4, more tests at once than
# CI's machine has cores), stopping at the first failure. A test that only passes with the cores
# to itself waits on timing instead of the thing it needs; this shows it.
#
#   ./scripts/stress-tests.sh [tree...]   default: every tree scripts/test.sh builds that exists
#
# Environment: ROUNDS, JOBS. Prints each round's time per tree; exits non-zero on a failure,
# with ctest's output of the failing tests.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
rounds="${ROUNDS:-3}"
jobs="${JOBS:-4}"

trees=("$@")
if [[ ${#trees[@]} -eq 0 ]]; then
    for t in build/shared build/static build/dl build/shared-0.9.11 build/shared-0.25.3 \
             build/shared-0.24.0 build/shared-0.19.0 \
             build/shared-0.18.0 build/shared-0.13.1; do
        [[ -f "$t/CTestTestfile.cmake" ]] && trees+=("$t")
    done
fi
if [[ ${#trees[@]} -eq 0 ]]; then
    echo "stress-tests: no built tree; run ./scripts/test.sh first" >&2
    exit 2
fi

for round in $(seq 1 "$rounds"); do
    for t in "${trees[@]}"; do
        # the tests scripts/test.sh runs in each tree: the static tree's "linkage" tests (the
        # rest is the shared tree's code), the reduced sets of 0.24.0, 0.19.0, 0.18.0 and 0.13.1
        filter=()
        case "$(basename "$t")" in
            static) filter=(-L linkage) ;;
            shared-0.24.0) filter=(-R "$(sed -n "s/^filter_0_24='\(.*\)'$/\1/p" scripts/test.sh)") ;;
            shared-0.19.0|shared-0.18.0)
                filter=(-R "$(sed -n "s/^filter_c_d='\(.*\)'$/\1/p" scripts/test.sh)") ;;
            shared-0.13.1) filter=(-R "$(sed -n "s/^filter_b='\(.*\)'$/\1/p" scripts/test.sh)") ;;
        esac
        start=$SECONDS
        if ! ctest --test-dir "$t" --output-on-failure -j "$jobs" "${filter[@]}" > "$t/stress-round-$round.log" 2>&1; then
            grep -E "tests passed|\*\*\*|Failed|Timeout" "$t/stress-round-$round.log" | tail -20
            echo "stress-tests: round $round of $t failed (log: $t/stress-round-$round.log)" >&2
            exit 1
        fi
        summary=$(grep -E "tests passed" "$t/stress-round-$round.log")
        printf 'round %d  %-22s %4d s  %s\n' "$round" "$t" $((SECONDS - start)) "$summary"
    done
done
echo "stress-tests: ${#trees[@]} trees x $rounds rounds at -j $jobs: no failure"
