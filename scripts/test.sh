#!/usr/bin/env bash
# The project's test command: builds llama.cpp's ggml + llama with the Rust backend layer spliced
# in, shared, static, and shared with the backends as run-time modules (GGML_BACKEND_DL), runs
# the ctests of each, then the crate's own tests.
#
#   ./scripts/test.sh              build dirs: build/shared, build/static, build/dl (kept between
#                                  runs)
#   ./scripts/test.sh --quick [RE] one tree (build/shared) and its ctests matching the regular
#                                  expression RE (all when omitted); no static tree, no cargo
#                                  test: for iterating on a change, not a substitute for the
#                                  full run
#
# Each tree names its pin (GGML_BACKEND_RS_PIN, the llama-cpp-sys-2 version whose llama.cpp it
# builds: 0.1.146 = ggml 0.9.11, 0.1.161 = ggml 0.26.0); for now every tree builds 0.1.146.
# Environment: LLAMA_CPP_DIR (optional) a llama.cpp tree instead of the pins, for every tree;
# JOBS (default: nproc).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${JOBS:-$(nproc)}"
# One cargo target dir for all CMake builds (the crate of each ggml version builds in its own
# subdirectory, ggml-<version>).
cargo_dir="$root/build/cargo"

# The pins of the trees. build/static reuses build/shared's reference libraries and build/dl
# compares with build/shared's driver: each must have build/shared's pin.
pin_shared=0.1.146
pin_static=$pin_shared
pin_dl=$pin_shared

# LLAMA_CPP_DIR is always passed, empty for "the pin", so a tree configured with a tree before
# goes back to its pin.
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DGGML_BACKEND_RS_CARGO_TARGET_DIR=$cargo_dir"
        "-DLLAMA_CPP_DIR=${LLAMA_CPP_DIR:-}")

step() { printf '\n==> %s\n' "$*"; }
SECONDS=0

if [[ "${1:-}" == "--quick" ]]; then
    filter=(); [[ -n "${2:-}" ]] && filter=(-R "$2")
    step "configure + build: shared (quick)"
    cmake -S . -B build/shared "${common[@]}" -DGGML_BACKEND_RS_PIN=$pin_shared -DBUILD_SHARED_LIBS=ON
    cmake --build build/shared -j "$jobs"
    step "ctest: shared ${2:+(matching $2)}"
    ctest --test-dir build/shared --output-on-failure -j "$jobs" "${filter[@]}"
    step "quick tests passed (${SECONDS}s)"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--quick [REGEX]]" >&2
    exit 2
fi

# Shared: also builds the pristine reference ggml for the differential tests.
step "configure + build: shared"
cmake -S . -B build/shared "${common[@]}" -DGGML_BACKEND_RS_PIN=$pin_shared -DBUILD_SHARED_LIBS=ON \
    -DGGML_BACKEND_RS_VALGRIND=ON
cmake --build build/shared -j "$jobs"
step "ctest: shared"
ctest --test-dir build/shared --output-on-failure -j "$jobs"

# Static: reuses the shared build's reference libraries instead of building them again.
step "configure + build: static"
cmake -S . -B build/static "${common[@]}" -DGGML_BACKEND_RS_PIN=$pin_static -DBUILD_SHARED_LIBS=OFF \
    "-DGGML_BACKEND_RS_REFERENCE_LIBDIR=$root/build/shared/ggml-reference/build/bin"
cmake --build build/static -j "$jobs"
step "ctest: static"
ctest --test-dir build/static --output-on-failure -j "$jobs"

# DL: the backends as modules loaded at run time (GGML_BACKEND_DL, every CPU variant), as
# llama.cpp's release builds ship; compared with upstream's own loader and with the shared
# (linked) build above. Its reference builds only upstream's libggml-base, libggml and libllama.
step "configure + build: dl"
# LLAMA_ALL_WARNINGS=OFF (llama.cpp hands it on as GGML_ALL_WARNINGS): with upstream's -Wall,
# GCC 12's own AVX-512 headers give some 7 500 "may be used uninitialized" warnings (140 000 log
# lines) in the AVX-512 variants. It changes warnings only, of upstream's sources (the other
# trees keep them).
cmake -S . -B build/dl "${common[@]}" -DGGML_BACKEND_RS_PIN=$pin_dl -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON \
    -DGGML_CPU_ALL_VARIANTS=ON -DLLAMA_ALL_WARNINGS=OFF \
    "-DGGML_BACKEND_RS_LINKED_DRIVER=$root/build/shared/ctests/llama_driver"
cmake --build build/dl -j "$jobs"
step "ctest: dl"
ctest --test-dir build/dl --output-on-failure -j "$jobs"

# ---------------------------------------------------------------------------------------------
# cargo test — the Rust tests link the crate with ggml core and the CPU backend from the static
# build above. GGML_BACKEND_RS_TEST_LIBS is a ';'-separated list of absolute paths:
#   libggml-base.a (ggml core C/C++ only: ggml.c, ggml-alloc.c, gguf.cpp, ...; the backend layer is ours),
#   libggml.a (ggml_backend_rs_builtin_regs), libggml-cpu.a, then libgomp.so (OpenMP, when the
#   CPU backend uses it) and libstdc++.so.
# The archives and the crate refer to each other: build.rs links them inside
# -Wl,--start-group/--end-group. Written by CMake to build/static/rust-test-libs.txt.
# Its own target dir: with the variable set, build.rs changes the crate's build, and sharing
# build/cargo with the CMake builds would recompile the crate twice per run.
# The crate is built for the static tree's ggml version: its cargo feature arguments are in
# build/static/cargo-feature-args.txt (written by CMake; empty for the default feature).
# ---------------------------------------------------------------------------------------------
step "cargo test"
read -ra cargo_features < build/static/cargo-feature-args.txt
GGML_BACKEND_RS_TEST_LIBS="$(cat build/static/rust-test-libs.txt)" \
    cargo test --release "${cargo_features[@]}" --target-dir "$root/build/cargo-test"

# The committed headers in include/ must be what cbindgen generates from the crate now.
step "generated headers up to date"
cargo test --release --manifest-path tools/gen-headers/Cargo.toml --target-dir "$root/build/cargo-gen-headers"

step "all tests passed (${SECONDS}s)"
