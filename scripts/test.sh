#!/usr/bin/env bash
# The project's test command. For each supported ABI class (docs/abi-classes.md) it builds ggml +
# llama with the Rust backend layer spliced in and runs the ctests, then the crate's own tests:
#
#   class F, ggml 0.26.0 (pin llama-cpp-sys-2 0.1.161, the default): every tree — shared
#     (with the valgrind tests), static (the tests whose outcome depends on how the library is
#     linked: ctest label "linkage"), and shared with the backends as run-time modules
#     (GGML_BACKEND_DL, with the Vulkan module, run on Mesa's CPU driver lavapipe); cargo test
#     links the static tree's libraries.
#   class E, ggml 0.25.3 (pin llama-cpp-python-0.3.36, PyPI's sdist): the shared tree, with its
#     differential, meta, plugin, fault and valgrind tests, and llama.cpp's own llama-server,
#     llama-completion and llama-bench built on it; ggml 0.24.0 (pin 0.1.159), the same
#     ABI with one scheduler pass of its own: the shared tree's ABI, scheduler and plugin tests.
#   classes D, ggml 0.19.0 (pin 0.1.156), C, ggml 0.18.0 (pin 0.1.154), and B, ggml 0.13.1 (pin
#     0.1.153): shared trees, their ABI, scheduler, plugin and fault tests, and tensor mode on
#     one model (B: and on the hybrid model, whose gated delta net takes its state flattened).
#   class A, ggml 0.9.11 (pin 0.1.146): the shared tree, with its differential, meta, plugin,
#     fault and valgrind tests (the static and DL trees exercise no code of ours that differs per
#     class).
#
# The plugin of each shared tree is loaded into the pristine host of every other class and must
# refuse it (ctests plugin/class/*).
#
# Before the builds: cargo fmt --check and clippy for both versions. After them: the GPU benchmark
# program's unit tests (bench/gpubench, Python) and the generated headers' check.
#
#   ./scripts/test.sh              build dirs: build/shared, build/static, build/dl (0.26),
#                                  build/shared-0.25.3, build/shared-0.24.0, build/shared-0.19.0,
#                                  build/shared-0.18.0, build/shared-0.13.1 and
#                                  build/shared-0.9.11 (kept between runs)
#   ./scripts/test.sh --quick [RE] one tree (build/shared, or build/shared-<ggml> with PIN=<pin>
#                                  of another release) and its ctests matching the regular expression
#                                  RE (all when omitted): for iterating on a change, not a
#                                  substitute for the full run
#
# Environment: JOBS (default: nproc); PIN (--quick only); LLAMA_CPP_DIR (optional) a llama.cpp
# tree of a supported version instead of the pin, for the 0.26 trees (or the quick tree).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
jobs="${JOBS:-$(nproc)}"
# One cargo target dir for all CMake builds (the crate of each ggml version builds in its own
# subdirectory, ggml-<version>).
cargo_dir="$root/build/cargo"

pin_main=0.1.161                  # ggml 0.26.0: build/shared, build/static, build/dl
pin_e=llama-cpp-python-0.3.36     # ggml 0.25.3: build/shared-0.25.3
pin_e_old=0.1.159                 # ggml 0.24.0: build/shared-0.24.0
pin_d=0.1.156                     # ggml 0.19.0: build/shared-0.19.0
pin_c=0.1.154                     # ggml 0.18.0: build/shared-0.18.0
pin_b=0.1.153                     # ggml 0.13.1: build/shared-0.13.1
pin_old=0.1.146                   # ggml 0.9.11: build/shared-0.9.11

# The reduced test sets of the older releases' trees (below; scripts/stress-tests.sh reads them).
filter_0_24='^(abi_|ggml_version/|headers/|differential/(llama/|sched_split)|sched/|e2e/|plugin/class/)'
filter_c_d='^(abi_|ggml_version/|headers/|differential/(llama/|sched_split|meta/tiny-gqa-f32/)|sched/|e2e/|meta/e2e/tiny-gqa-f32/|faults/upstream/|plugin/class/)'
filter_b='^(abi_|ggml_version/|headers/|differential/(llama/|sched_split|meta/(tiny-gqa|qwen35)-f32/)|sched/|e2e/|meta/e2e/(tiny-gqa|qwen35)-f32/|faults/upstream/|plugin/(class/|llama/qwen35-f32/))'

# LLAMA_CPP_DIR is always passed, empty for "the pin", so a tree configured with a tree before
# goes back to its pin.
common=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DGGML_BACKEND_RS_CARGO_TARGET_DIR=$cargo_dir")

step() { printf '\n==> %s (%ds)\n' "$*" "$SECONDS"; }
SECONDS=0

# tree <dir> <pin> <llama.cpp dir or empty> [cmake args...]: configure, build, ctest (the tests
# the array `filter` selects: all when empty).
tree() {
    local dir=$1 pin=$2 src=$3; shift 3
    step "configure + build: $dir (pin $pin${src:+, $src})"
    cmake -S . -B "$dir" "${common[@]}" "-DGGML_BACKEND_RS_PIN=$pin" "-DLLAMA_CPP_DIR=$src" "$@"
    cmake --build "$dir" -j "$jobs"
    step "ctest: $dir${filter[*]:+ (${filter[*]})}"
    ctest --test-dir "$dir" --output-on-failure -j "$jobs" "${filter[@]}"
}
filter=()

if [[ "${1:-}" == "--quick" ]]; then
    [[ -n "${2:-}" ]] && filter=(-R "$2")
    pin="${PIN:-$pin_main}"
    dir=build/shared
    rpc=(-DGGML_RPC=ON)
    if [[ -z "${LLAMA_CPP_DIR:-}" ]]; then
        case "$pin" in
            "$pin_old") dir=build/shared-0.9.11 rpc=() ;;
            "$pin_e") dir=build/shared-0.25.3 ;;
            "$pin_e_old") dir=build/shared-0.24.0 ;;
            "$pin_d") dir=build/shared-0.19.0 ;;
            "$pin_c") dir=build/shared-0.18.0 ;;
            "$pin_b") dir=build/shared-0.13.1 ;;
        esac
    fi
    tree "$dir" "$pin" "${LLAMA_CPP_DIR:-}" -DBUILD_SHARED_LIBS=ON "${rpc[@]}"
    step "quick tests passed"
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: $0 [--quick [REGEX]]" >&2
    exit 2
fi

# Formatting and lints of every crate, for each ggml release's feature.
step "cargo fmt --check, clippy (every release, the fuzz targets)"
cargo fmt --check
cargo clippy --all-targets --target-dir build/cargo-clippy -- -D warnings
for release in ggml-0-25-3 ggml-0-24-0 ggml-0-19-0 ggml-0-18-0 ggml-0-13-1 ggml-0-9-11; do
    cargo clippy --all-targets --target-dir build/cargo-clippy --no-default-features \
        --features "$release" -- -D warnings
done
# the fuzz targets (their own workspace)
cargo fmt --check --manifest-path fuzz/Cargo.toml
cargo clippy --manifest-path fuzz/Cargo.toml --target-dir build/cargo-clippy-fuzz --bins -- -D warnings

# 0.26, shared: also builds the pristine reference ggml for the differential tests. Both have the
# RPC backend (GGML_RPC, given explicitly: a tree configured before keeps its cached value), for
# the rpc/* tests against servers on the loopback address.
tree build/shared $pin_main "${LLAMA_CPP_DIR:-}" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_RS_VALGRIND=ON \
    -DGGML_RPC=ON

# 0.26, static: reuses the shared tree's reference libraries instead of building them again; runs
# the tests labelled "linkage" (ctests/CMakeLists.txt), the rest being the shared tree's code.
# The RPC backend as in the shared tree: the reference's registry lists it.
filter=(-L linkage)
tree build/static $pin_main "${LLAMA_CPP_DIR:-}" -DBUILD_SHARED_LIBS=OFF -DGGML_RPC=ON \
    "-DGGML_BACKEND_RS_REFERENCE_LIBDIR=$root/build/shared/ggml-reference/build/bin"
filter=()

# 0.26, DL: the backends as modules loaded at run time (GGML_BACKEND_DL), found by our loader and
# compared with upstream's own loader and with the shared (linked) tree above. One CPU module:
# the choice among scored variants is checked in the shared trees (api/plugin); all 14 CPU
# variants (-DGGML_CPU_ALL_VARIANTS=ON, ctests/dl handles both) would cost ten minutes here.
# Its reference builds only upstream's libggml-base, libggml and libllama.
# The Vulkan module too (ggml-vulkan, compiled once here and loaded by both loaders): tensor
# parallelism over Vulkan devices on Mesa's CPU driver, ours, upstream's and the shared tree's
# plugin in upstream's host (ctests/dl, "Vulkan"). ggml-vulkan 0.26 needs Vulkan 1.4 headers.
vulkan_include=$(./scripts/vulkan-headers.sh)
tree build/dl $pin_main "${LLAMA_CPP_DIR:-}" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON \
    "-DGGML_BACKEND_RS_LINKED_DRIVER=$root/build/shared/ctests/llama_driver" \
    -DGGML_VULKAN=ON "-DVulkan_INCLUDE_DIR=$vulkan_include" \
    "-DGGML_BACKEND_RS_TP_PLUGIN=$root/build/shared/libggml-backend-rs-tp.so"

# 0.9.11, shared: the older ABI's exports, layouts and headers, the scheduler and meta device
# against its pristine build, its libllama end to end, the memory tests and faults under valgrind.
# Its plugin and the 0.26 tree's are each loaded into the other version's pristine host and refused.
tree build/shared-0.9.11 $pin_old "" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_RS_VALGRIND=ON \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared"

# Class E, 0.25.3 (llama-cpp-python's tree), shared: everything the 0.26 shared tree runs, RPC
# included; its plugin against the hosts of classes A and F and theirs against its host. This
# tree ships llama.cpp's tools: llama-server, llama-completion and llama-bench are built on the
# library and tested against upstream's (GGML_BACKEND_RS_LLAMA_TOOLS, ctests/tools.cmake).
tree build/shared-0.25.3 $pin_e "" -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_RS_VALGRIND=ON -DGGML_RPC=ON \
    -DGGML_BACKEND_RS_LLAMA_TOOLS=ON \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared;$root/build/shared-0.9.11"

# Class E, 0.24.0: the same ABI as 0.25.3 but for one scheduler pass (graph inputs get pipeline
# copies only where a node reads them). Its exports, layouts, headers and prototypes, the version
# check, its scheduler against its pristine build and end to end (the pipeline configuration
# exercises that pass), and its plugin refused by the other classes' hosts.
filter=(-R "$filter_0_24")
tree build/shared-0.24.0 $pin_e_old "" -DBUILD_SHARED_LIBS=ON -DGGML_RPC=OFF \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared;$root/build/shared-0.25.3"

# Class D, 0.19.0: class E's layouts but three facts, and a scheduler of its own; class C,
# 0.18.0: class D's layouts without a device's mmap_support, its scheduler but for the graph
# size. A reduced set, for CI's time (each whole set, about 475 tests and two minutes, passes
# too): ABI, the header probe, the scheduler against its pristine build and end to end, tensor
# mode on one model against split none (CPU and test devices) and bit for bit against upstream's
# meta backend, upstream's aborts on a device out of memory, and the plugin and every other
# class's refused both ways.
filter=(-R "$filter_c_d")
tree build/shared-0.19.0 $pin_d "" -DBUILD_SHARED_LIBS=ON -DGGML_RPC=OFF \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared;$root/build/shared-0.25.3;$root/build/shared-0.9.11"
tree build/shared-0.18.0 $pin_c "" -DBUILD_SHARED_LIBS=ON -DGGML_RPC=OFF \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared;$root/build/shared-0.25.3;$root/build/shared-0.9.11;$root/build/shared-0.19.0"

# Class B, 0.13.1: class C's layouts on class A's op enum, class C's scheduler but for flash
# attention (it follows its sinks), and gated_delta_net's state flattened. The same reduced set,
# with the hybrid model's tensor mode (its gated delta net) in the linked library and the plugin.
filter=(-R "$filter_b")
tree build/shared-0.13.1 $pin_b "" -DBUILD_SHARED_LIBS=ON -DGGML_RPC=OFF \
    "-DGGML_BACKEND_RS_OTHER_CLASS_TREES=$root/build/shared;$root/build/shared-0.25.3;$root/build/shared-0.9.11;$root/build/shared-0.18.0"
filter=()

# llama-cpp-python as a Python user builds it, with the splice (README, "llama-cpp-python"): pip
# builds its sdist's llama.cpp (ggml 0.25.3) from PyPI with our backend layer, reusing the crate
# the 0.25.3 tree built; then a Python program decodes through llama-cpp-python's own bindings
# with split none and with tensor parallelism over CPU,CPU and demands the same tokens.
step "llama-cpp-python 0.3.36 on this library: pip install with the splice, tensor mode through its API"
venv="$root/build/venv-llama-cpp-python"
[[ -x "$venv/bin/python" ]] || python3 -m venv "$venv"
"$venv/bin/pip" uninstall -y -q llama-cpp-python || true
CMAKE_ARGS="-DCMAKE_PROJECT_ggml_INCLUDE=$root/cmake/ggml-backend-rs.cmake -DGGML_BACKEND_RS_CARGO_TARGET_DIR=$cargo_dir -DLLAVA_BUILD=OFF" \
    "$venv/bin/pip" install -q --no-cache-dir --no-binary llama-cpp-python llama-cpp-python==0.3.36
"$venv/bin/python" ctests/python/llama_cpp_python_tp.py \
    --model build/shared-0.25.3/ctests/models/tiny-gqa-f32.gguf

# ---------------------------------------------------------------------------------------------
# cargo test — the Rust tests link the crate with ggml core and the CPU backend from the static
# tree. GGML_BACKEND_RS_TEST_LIBS is a ';'-separated list of absolute paths:
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
GGML_BACKEND_RS_TEST_LIBS="$(cat build/static/rust-test-libs.txt)" GGML_BACKEND_RS_RPC_SERVER="$root/build/shared/ctests/rpc_server" \
    cargo test --release "${cargo_features[@]}" --target-dir "$root/build/cargo-test"

# Coverage-guided fuzzing, bounded: every target of fuzz/ (the RPC client's decoding and a byte
# stream fed to it, split states from C, view mapping) for 20 s over its committed corpus, as
# many at a time as there are cores; any crash, panic, hang or excess memory fails the run
# (scripts/fuzz.sh).
step "fuzzing: each target 20 s"
./scripts/fuzz.sh 20

# The safe crates' unit tests under miri (scripts/miri.sh): where a nightly toolchain has the
# miri component or rustup can fetch it (from static.rust-lang.org, which a machine reaching only
# package registries may not); the log says when it could not run.
step "miri: the safe crates' unit tests"
if timeout 60 env RUSTUP_AUTO_INSTALL=0 cargo +nightly miri --version >/dev/null 2>&1 \
        || timeout 300 rustup component add --toolchain nightly miri rust-src >/dev/null 2>&1; then
    ./scripts/miri.sh
else
    echo "miri: no nightly toolchain with the miri component on this machine, none to fetch: not run"
fi

# The committed headers in include/ggml-<version>/ must be what cbindgen generates now.
step "GPU benchmark program: its unit tests (settings, logits parsing, tables from results)"
python3 -m unittest discover bench

step "generated headers up to date"
cargo test --release --manifest-path tools/gen-headers/Cargo.toml --target-dir "$root/build/cargo-gen-headers"

step "all tests passed"
