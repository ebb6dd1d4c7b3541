// llama_cli.h — what the libllama programs of this repository (tools/model/llama_driver.cpp,
// bench/llama_bench.cpp) share: the log filter, list and number parsing, adding ggml-rpc servers
// (--rpc), and turning --devices and --tensor-split into libllama's model parameters. Public API
// only (llama.h, ggml-backend.h), so the programs build against upstream's libraries as well as
// against ours.
#pragma once

#include "llama.h"
#include "ggml-backend.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace llama_cli {

// --- what differs in libllama's API between the llama.cpp versions the programs build for ---
// From ggml 0.18 on llama.h has a load mode instead of use_mmap (GGML_BACKEND_RS_HAS_LLAMA_LOAD_MODE,
// a fact of the tree's ABI class given by the build).
#if GGML_BACKEND_RS_HAS_LLAMA_LOAD_MODE
// mmap: libllama's default (map the file when every device supports it); no mmap: read it.
inline void set_mmap(llama_model_params & mp, bool mmap) {
    if (!mmap) mp.load_mode = LLAMA_LOAD_MODE_NONE;
}
inline bool uses_mmap(const llama_model_params & mp) { return mp.load_mode != LLAMA_LOAD_MODE_NONE; }
#else
inline void set_mmap(llama_model_params & mp, bool mmap) { mp.use_mmap = mmap; }
inline bool uses_mmap(const llama_model_params & mp) { return mp.use_mmap; }
#endif

// libllama's and ggml's log: everything when verbose, otherwise warnings and errors only
// (a continuation line follows the level of the line it continues).
inline bool verbose = false;
inline ggml_log_level last_level = GGML_LOG_LEVEL_INFO;

inline void log_cb(ggml_log_level level, const char * text, void *) {
    if (level != GGML_LOG_LEVEL_CONT) last_level = level;
    if (verbose || last_level >= GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
        fflush(stderr);
    }
}

// An integer flag value in [min, 1e9] (min >= -1e9); exits with status 1 and a message naming `prog` otherwise.
inline int parse_int(const char * prog, const char * s, const char * flag, int min) {
    char * end = nullptr;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (!end || *end || errno || v < min || v > 1000000000L) {
        fprintf(stderr, "%s: %s needs an integer >= %d, got '%s'\n", prog, flag, min, s);
        exit(1);
    }
    return (int) v;
}

// "a,b,,c" -> {"a", "b", "c"}
inline std::vector<std::string> split_list(const std::string & s) {
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= s.size()) {
        size_t p = s.find(',', start);
        if (p == std::string::npos) p = s.size();
        if (p > start) out.push_back(s.substr(start, p - start));
        start = p + 1;
    }
    return out;
}

// "devices_available: CPU(...) CUDA0(...)"
inline void print_devices_available() {
    printf("devices_available:");
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        printf(" %s(%s)", ggml_backend_dev_name(d), ggml_backend_dev_description(d));
    }
    printf("\n");
}

// --rpc HOST:PORT[,HOST:PORT..]: adds the devices of each ggml-rpc server, as llama.cpp's common
// does: the function "ggml_backend_rpc_add_server" of the registry named "RPC" makes one registry
// per server, which is then registered. In ggml 0.26 the devices are named RPC0, RPC1, ... by one
// counter over all servers, in the order given (a server with one device: RPC<i> is the i-th
// endpoint), each described by its endpoint. Returns false with `err` set when the build has no
// RPC backend, the list is empty or a server cannot be added: with ggml-backend-rs's client the
// server is unreachable, refuses the protocol or has no devices (the cause logged); upstream's
// client stops the program instead (GGML_ABORT "Failed to connect to HOST:PORT").
inline bool add_rpc_servers(const std::string & list, std::string & err) {
    const auto endpoints = split_list(list);
    if (endpoints.empty()) { err = "empty --rpc list"; return false; }
    ggml_backend_reg_t rpc = ggml_backend_reg_by_name("RPC");
    if (!rpc) { err = "--rpc: this build has no RPC backend (GGML_RPC=OFF)"; return false; }
    typedef ggml_backend_reg_t (*add_server_fn)(const char * endpoint);
    auto add_server = (add_server_fn) ggml_backend_reg_get_proc_address(rpc, "ggml_backend_rpc_add_server");
    if (!add_server) { err = "--rpc: the RPC registry has no ggml_backend_rpc_add_server"; return false; }
    for (const auto & ep : endpoints) {
        ggml_backend_reg_t reg = add_server(ep.c_str());
        if (!reg) { err = "--rpc: cannot use server " + ep + " (the reason is logged above)"; return false; }
        ggml_backend_register(reg);
    }
    return true;
}

// The --devices list as libllama's NULL-terminated device array (empty list: empty result,
// libllama's default devices). Returns false with `err` set on an unknown name or an empty list.
inline bool resolve_devices(const std::string & list, std::vector<ggml_backend_dev_t> & devs, std::string & err) {
    devs.clear();
    if (list.empty()) return true;
    for (const auto & name : split_list(list)) {
        ggml_backend_dev_t d = ggml_backend_dev_by_name(name.c_str());
        if (!d) { err = "unknown device '" + name + "' (see devices_available)"; return false; }
        devs.push_back(d);
    }
    if (devs.empty()) { err = "empty --devices list"; return false; }
    devs.push_back(nullptr);
    return true;
}

// The --tensor-split proportions, one per device up to llama_max_devices() (empty: default).
inline bool parse_tensor_split(const std::string & s, std::vector<float> & out, std::string & err) {
    out.clear();
    if (s.empty()) return true;
    out.assign(llama_max_devices(), 0.0f);
    const auto parts = split_list(s);
    if (parts.size() > out.size()) { err = "too many --tensor-split values"; return false; }
    for (size_t i = 0; i < parts.size(); ++i) {
        char * end = nullptr;
        out[i] = strtof(parts[i].c_str(), &end);
        if (!end || *end || !(out[i] >= 0.0f)) { err = "bad --tensor-split value '" + parts[i] + "'"; return false; }
    }
    return true;
}

// One sequence, the given sizes and threads, no performance counters.
inline llama_context_params context_params(int n_ctx, int n_batch, int n_ubatch, int threads,
                                           llama_flash_attn_type fa) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx           = (uint32_t) n_ctx;
    cp.n_batch         = (uint32_t) n_batch;
    cp.n_ubatch        = (uint32_t) n_ubatch;
    cp.n_seq_max       = 1;
    cp.n_threads       = threads;
    cp.n_threads_batch = threads;
    cp.flash_attn_type = fa;
    cp.no_perf         = true;
    return cp;
}

// The ggml type named `name` (ggml_type_name: f16, q8_0, ...) for --cache-type-k/-v; exits
// with a message for an unknown name.
inline ggml_type parse_type(const char * prog, const char * name, const char * flag) {
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const char * n = ggml_type_name((ggml_type) t);
        if (n && strcmp(n, name) == 0 && ggml_type_size((ggml_type) t) > 0) return (ggml_type) t;
    }
    fprintf(stderr, "%s: %s: unknown ggml type '%s'\n", prog, flag, name);
    exit(1);
}

} // namespace llama_cli
