#!/usr/bin/env bash
# The safe crates' unit tests under miri, which checks every operation against Rust's rules
# (undefined behaviour, out-of-bounds and dangling accesses, data races, leaks): the core
# (`ggml-backend-rs-core`: split rules, inference, planning, the AllReduce schedule, the PTX
# text, the address registry) and the RPC client's messages (`ggml-backend-rs-rpc`'s wire
# format). They touch no C and no socket; the root crate's tests need ggml linked, which miri
# cannot run. Under miri a few tests take fewer cases (`cfg!(miri)`): each case costs about a
# thousand times more there.
#
#   scripts/miri.sh           needs a nightly toolchain with the miri component
#                             (rustup component add --toolchain nightly miri rust-src)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cargo +nightly miri test -p ggml-backend-rs-core -p ggml-backend-rs-rpc --lib \
    --target-dir "$root/build/cargo-miri"
