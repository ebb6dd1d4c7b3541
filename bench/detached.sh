# Sourced by the GPU scripts (bench/llama-bench-gpu.sh, bench/fit-gpu.sh): a job that outlives
# the short calls of a GPU host. The job runs from a copy of the repository in <work>/src, in a
# session of its own, writing <work>/job.log and, when it ends, the marker <work>/done.

# detached_start <work> <command...>: copies the repository and starts the command there.
detached_start() {
    local work=$1; shift
    mkdir -p "$work"
    rm -f "$work/done"
    rm -rf "$work/src" && cp -r "$root" "$work/src"
    local cmd
    printf -v cmd '%q ' "$@"
    setsid nohup bash -c "cd '$work/src' && $cmd > '$work/job.log' 2>&1; touch '$work/done'" \
        > /dev/null 2>&1 < /dev/null &
    printf '[%s] started; log %s\n' "$(date +%T)" "$work/job.log"
}

# detached_wait <work> <seconds>: prints the job's new log lines until it ends (return 0) or the
# seconds pass (exit 3: call again).
detached_wait() {
    local work=$1 deadline=$((SECONDS + $2)) seen=0 n
    while true; do
        if [[ -f "$work/job.log" ]]; then
            n=$(wc -l < "$work/job.log")
            if (( n > seen )); then sed -n "$((seen + 1)),${n}p" "$work/job.log"; seen=$n; fi
        fi
        [[ -f "$work/done" ]] && return 0
        (( SECONDS >= deadline )) && exit 3
        sleep 5
    done
}
