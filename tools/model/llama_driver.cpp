// llama_driver.cpp — load a GGUF model through libllama and decode greedily; the end-to-end driver of
// ggml-backend-rs' differential test (DESIGN.md §4.3). Built twice (upstream ggml / our ggml), run on
// the same model file, and the outputs compared: `tokens:` lines exactly, --logits-out files with
// tools/model/compare_logits.
//
// Usage:
//   llama_driver --model PATH [--split-mode none|layer|row|tensor] [--devices CPU|CUDA0,CUDA1,...]
//                [--main-gpu I] [--tensor-split 1,1,...] [--n-gpu-layers N (999)]
//                [--prompt TEXT] [--n-predict N (16)] [--n-ctx N (512)] [--n-batch N (512)]
//                [--n-ubatch N (512)] [--threads N (2)] [--flash-attn on|off|auto (auto)] [--no-mmap]
//                [--all-logits] [--logits-out FILE] [--stop-eog] [--load-all-backends] [--verbose]
//                [--backend-dir DIR]  (ggml_backend_load_all_from_path(DIR): backends built as
//                                      modules, GGML_BACKEND_DL, from that directory only)
//                [--rpc HOST:PORT[,HOST:PORT..]]  (builds with GGML_RPC, ggml 0.26: the devices of
//                                  these ggml-rpc servers are added, as llama.cpp's --rpc does;
//                                  they are named RPC0, RPC1, ... over all servers in list order
//                                  and described by their endpoint, e.g. RPC1(127.0.0.1:50053);
//                                  libllama's default selection puts them before other GPUs)
//                [--test-device]  (builds with LLAMA_DRIVER_TEST_DEVICE: register ctests' TESTGPU0/1)
//                [--step-report]  (with --test-device: per decode step, what reached the test devices
//                                  between the step's first graph and its last device operation)
//                [--retry-failed-decode N (0)]  (a llama_decode call that fails is reported as
//                                  `decode_error: prompt|step K rc=R` and made again, at most N
//                                  times in the run; the fault tests inject failures)
//                [--abort-on-call N]  (an abort callback, llama_set_abort_callback, that asks to
//                                  abort on its Nth call only: the CPU backend asks it between
//                                  nodes, and the decode in flight returns 2)
//                [--override-tensor REGEX=CPU[,REGEX=CPU..]]  (llama.cpp's -ot: weights whose
//                                  names match REGEX in the CPU's buffer type, e.g. one layer's
//                                  FFN left on the host while the rest is on the devices)
//                [--seed N (ignored: decoding is greedy)]
//
// Greedy: next token = argmax of the logits (ties -> lowest id). Generation does not stop at EOS
// unless --stop-eog. The prompt is tokenized with BOS (add_special=true, parse_special=false) and
// evaluated in chunks of n_batch tokens; by default only the last prompt position requests logits
// (--all-logits: every prompt position). Then n_predict-1 single-token decode steps follow, so
// n_predict tokens are produced from n_predict logits rows (last prompt position + each step).
//
// Output on stdout, one `key: value` per line, stable across runs:
//   model: PATH
//   system: <llama_print_system_info>
//   devices_available: NAME(desc) ...
//   devices: NAME ...            (the list passed in llama_model_params.devices, or "default")
//   params: split_mode=... n_gpu_layers=... n_ctx=... n_batch=... n_ubatch=... threads=... flash_attn=... mmap=...
//   n_vocab: V
//   prompt_tokens: 1 ...         (ids after tokenization, incl. BOS)
//   tokens: ...                  (the n_predict generated ids)
//   text: "..."                  (generated pieces; bytes < 0x20 and >= 0x7f as \\xNN, so ASCII-only)
//   digest: rows=R n_vocab=V fnv1a64=0x... sum=... maxabs=...   (over the raw float32 bytes of every logits row)
//   margin: min=... mean=... min_rel=...  (top1 - top2 logit gap of the rows used for greedy choice;
//                                min_rel = smallest gap / that row's max |logit|)
//   timing: load_ms=... ctx_ms=... prompt_ms=... prompt_tps=... decode_ms=... decode_tps=...
// Errors go to stderr; exit status 1 on any failure, after freeing whatever was created (so a
// memory checker sees a failed load, context or decode leave nothing behind). libllama's log is
// shown only from WARN up unless --verbose.
//
// --logits-out FILE format (little-endian):
//   header: char magic[8] = "LGTSv001"; uint32 n_vocab; uint32 n_rows
//   n_rows times: int32 pos (position of the evaluated token); uint32 token (the token at pos);
//                 float32 logits[n_vocab]
//
// Build (against the pin): g++ -std=c++17 -O2 llama_driver.cpp -I<llama>/include -I<llama>/ggml/include
//                          -L<lib> -lllama -lggml -lggml-base
#ifdef LLAMA_DRIVER_TEST_DEVICE
#include "test_device.h" // ctests/doubles/: TESTGPU0..3, test devices for multi-backend runs on a CPU-only host
#endif
#include "llama_cli.h" // log filter, --devices and --tensor-split (shared with bench/llama_bench.cpp)
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Opts {
    std::string model;
    std::string split_mode = "layer";
    bool split_mode_given = false;
    std::string devices;          // empty = library default
    int main_gpu = 0;
    std::string tensor_split;     // empty = default
    int n_gpu_layers = 999;
    std::string prompt = "The quick brown fox jumps over the lazy dog. Once upon a time";
    int n_predict = 16;
    int n_ctx = 512;
    int n_batch = 512;
    int n_ubatch = 512;
    int threads = 2;
    std::string flash_attn = "auto";
    bool no_mmap = false;
    ggml_type cache_type_k = GGML_TYPE_F16;  // libllama's defaults
    ggml_type cache_type_v = GGML_TYPE_F16;
    bool all_logits = false;
    std::string logits_out;
    bool stop_eog = false;
    bool load_all = false;
    std::string backend_dir;      // --backend-dir: load backend modules from this directory
    std::string rpc;              // --rpc: ggml-rpc servers whose devices are added
    bool test_device = false;     // register the test-only TESTGPU0/1 devices (ctests builds)
    bool step_report = false;     // print the test devices' trace of every decode step
    int retry_decode = 0;         // failed llama_decode calls made again, at most, in the run
    long abort_on_call = 0;       // the call of the abort callback that answers "abort" (0: none)
    bool verbose = false;
    std::vector<std::string> override_tensor; // --override-tensor: patterns whose weights stay on the CPU
};

void usage() {
    fprintf(stderr,
        "usage: llama_driver --model PATH [--split-mode none|layer|row|tensor] [--devices LIST]\n"
        "                    [--main-gpu I] [--tensor-split F,F,..] [--n-gpu-layers N] [--prompt TEXT]\n"
        "                    [--n-predict N] [--n-ctx N] [--n-batch N] [--n-ubatch N] [--threads N]\n"
        "                    [--flash-attn on|off|auto] [--no-mmap] [--cache-type-k T] [--cache-type-v T]\n"
        "                    [--all-logits] [--logits-out FILE]\n"
        "                    [--stop-eog] [--load-all-backends] [--verbose] [--seed N]\n"
        "                    [--retry-failed-decode N] [--abort-on-call N] [--rpc HOST:PORT,..]\n"
        "                    [--override-tensor REGEX=CPU,..]\n");
}

int parse_int(const char * s, const char * flag) { return llama_cli::parse_int("llama_driver", s, flag, -1000000000); }

// What main creates from llama_backend_init on, freed on every way out of it.
struct Run {
    llama_model * model = nullptr;
    llama_context * ctx = nullptr;
    llama_batch batch = {};
    bool has_batch = false;
    Run() { llama_backend_init(); }
    ~Run() {
        if (has_batch) llama_batch_free(batch);
        if (ctx) llama_free(ctx);
        if (model) llama_model_free(model);
        llama_backend_free();
    }
    Run(const Run &) = delete;
    Run & operator=(const Run &) = delete;
};

// --abort-on-call: the calls so far, and the one that answers true. Backends may ask from
// several threads (the meta device runs CPU devices side by side), hence the atomic count.
std::atomic<long> abort_calls{0};
bool abort_on_nth_call(void * data) {
    const long n = *(const long *) data;
    const long call = ++abort_calls;
    if (call == n) {
        printf("abort_callback: call %ld asks to abort\n", call);
        fflush(stdout);
    }
    return call == n;
}

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Digest {
    uint64_t h = 0xcbf29ce484222325ull;
    double sum = 0.0;
    double maxabs = 0.0;
    uint64_t rows = 0;
    void add(const float * x, int n) {
        const uint8_t * b = (const uint8_t *) x;
        for (size_t i = 0; i < (size_t) n * sizeof(float); ++i) { h ^= b[i]; h *= 0x100000001b3ull; }
        for (int i = 0; i < n; ++i) {
            sum += x[i];
            const double a = std::fabs((double) x[i]);
            if (a > maxabs || std::isnan(a)) maxabs = a;
        }
        rows++;
    }
};

struct LogitsWriter {
    FILE * f = nullptr;
    uint32_t n_vocab = 0, n_rows = 0;
    bool open(const std::string & path, uint32_t nv) {
        f = fopen(path.c_str(), "wb");
        if (!f) return false;
        n_vocab = nv;
        return write_header();
    }
    bool write_header() {
        const char magic[8] = {'L', 'G', 'T', 'S', 'v', '0', '0', '1'};
        return fwrite(magic, 1, 8, f) == 8 && fwrite(&n_vocab, 4, 1, f) == 1 && fwrite(&n_rows, 4, 1, f) == 1;
    }
    bool row(int32_t pos, uint32_t tok, const float * x) {
        if (!f) return true;
        n_rows++;
        return fwrite(&pos, 4, 1, f) == 1 && fwrite(&tok, 4, 1, f) == 1 &&
               fwrite(x, sizeof(float), n_vocab, f) == n_vocab;
    }
    bool close() {
        if (!f) return true;
        bool ok = fseek(f, 0, SEEK_SET) == 0 && write_header();
        ok = (fclose(f) == 0) && ok;
        f = nullptr;
        return ok;
    }
};

// argmax with ties -> lowest id; also returns top1 - top2 gap.
int argmax(const float * x, int n, float * margin) {
    int best = 0;
    for (int i = 1; i < n; ++i) if (x[i] > x[best]) best = i;
    float second = -INFINITY;
    for (int i = 0; i < n; ++i) if (i != best && x[i] > second) second = x[i];
    if (margin) *margin = x[best] - second;
    return best;
}

std::string escape(const std::string & s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '\\') o += "\\\\";
        else if (c == '"') o += "\\\"";
        else if (c == '\n') o += "\\n";
        else if (c < 0x20 || c >= 0x7f) { char b[8]; snprintf(b, sizeof(b), "\\x%02x", c); o += b; }
        else o += (char) c;
    }
    return o;
}

} // namespace

int main(int argc, char ** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto need = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "llama_driver: missing value for %s\n", a.c_str()); usage(); exit(1); }
            return argv[++i];
        };
        if      (a == "--model" || a == "-m")   o.model = need();
        else if (a == "--split-mode")           { o.split_mode = need(); o.split_mode_given = true; }
        else if (a == "--devices")              o.devices = need();
        else if (a == "--main-gpu")             o.main_gpu = parse_int(need(), "--main-gpu");
        else if (a == "--tensor-split")         o.tensor_split = need();
        else if (a == "--n-gpu-layers" || a == "-ngl") o.n_gpu_layers = parse_int(need(), "--n-gpu-layers");
        else if (a == "--prompt" || a == "-p")  o.prompt = need();
        else if (a == "--n-predict" || a == "-n") o.n_predict = parse_int(need(), "--n-predict");
        else if (a == "--n-ctx")                o.n_ctx = parse_int(need(), "--n-ctx");
        else if (a == "--n-batch")              o.n_batch = parse_int(need(), "--n-batch");
        else if (a == "--n-ubatch")             o.n_ubatch = parse_int(need(), "--n-ubatch");
        else if (a == "--threads" || a == "-t") o.threads = parse_int(need(), "--threads");
        else if (a == "--flash-attn")           o.flash_attn = need();
        else if (a == "--no-mmap")              o.no_mmap = true;
        else if (a == "--cache-type-k")         o.cache_type_k = llama_cli::parse_type("llama_driver", need(), "--cache-type-k");
        else if (a == "--cache-type-v")         o.cache_type_v = llama_cli::parse_type("llama_driver", need(), "--cache-type-v");
        else if (a == "--all-logits")           o.all_logits = true;
        else if (a == "--logits-out")           o.logits_out = need();
        else if (a == "--stop-eog")             o.stop_eog = true;
        else if (a == "--load-all-backends")    o.load_all = true;
        else if (a == "--backend-dir")          o.backend_dir = need();
        else if (a == "--rpc")                  o.rpc = need();
        else if (a == "--test-device")          o.test_device = true;
        else if (a == "--step-report")          o.step_report = true;
        else if (a == "--override-tensor" || a == "-ot") {
            std::string list = need();
            for (size_t pos = 0; pos <= list.size();) {
                size_t end = std::min(list.find(',', pos), list.size());
                std::string item = list.substr(pos, end - pos);
                const size_t eq = item.rfind('=');
                if (eq == std::string::npos || eq == 0 || item.substr(eq + 1) != "CPU") {
                    fprintf(stderr, "llama_driver: --override-tensor takes REGEX=CPU, got '%s'\n", item.c_str());
                    exit(1);
                }
                o.override_tensor.push_back(item.substr(0, eq));
                pos = end + 1;
            }
        }
        else if (a == "--abort-on-call")        o.abort_on_call = std::max(0, parse_int(need(), "--abort-on-call"));
        else if (a == "--retry-failed-decode")  o.retry_decode = std::max(0, parse_int(need(), "--retry-failed-decode"));
        else if (a == "--verbose")              o.verbose = true;
        else if (a == "--seed")                 (void) need();
        else if (a == "-h" || a == "--help")    { usage(); return 0; }
        else { fprintf(stderr, "llama_driver: unknown argument: %s\n", a.c_str()); usage(); return 1; }
    }
    if (o.model.empty()) { usage(); return 1; }
    if (o.n_predict < 1 || o.n_batch < 1 || o.n_ubatch < 1 || o.threads < 1) {
        fprintf(stderr, "llama_driver: --n-predict, --n-batch, --n-ubatch, --threads must be >= 1\n");
        return 1;
    }

    llama_split_mode split_mode;
    if      (o.split_mode == "none")   split_mode = LLAMA_SPLIT_MODE_NONE;
    else if (o.split_mode == "layer")  split_mode = LLAMA_SPLIT_MODE_LAYER;
    else if (o.split_mode == "row")    split_mode = LLAMA_SPLIT_MODE_ROW;
    else if (o.split_mode == "tensor") split_mode = LLAMA_SPLIT_MODE_TENSOR;
    else { fprintf(stderr, "llama_driver: bad --split-mode %s\n", o.split_mode.c_str()); return 1; }

    llama_flash_attn_type fa;
    if      (o.flash_attn == "on")   fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (o.flash_attn == "off")  fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else if (o.flash_attn == "auto") fa = LLAMA_FLASH_ATTN_TYPE_AUTO;
    else { fprintf(stderr, "llama_driver: bad --flash-attn %s\n", o.flash_attn.c_str()); return 1; }

    llama_cli::verbose = o.verbose;
    llama_log_set(llama_cli::log_cb, nullptr);
    // Test devices first: a plugin loaded next (GGML_BACKEND_PATH) may build on them.
    if (o.test_device) {
#ifdef LLAMA_DRIVER_TEST_DEVICE
        test_device_register(o.threads);
#else
        fprintf(stderr, "llama_driver: --test-device needs a build with LLAMA_DRIVER_TEST_DEVICE\n");
        return 1;
#endif
    }
    if (o.load_all) ggml_backend_load_all();
    if (!o.backend_dir.empty()) ggml_backend_load_all_from_path(o.backend_dir.c_str());
    if (!o.rpc.empty()) {
        std::string err;
        if (!llama_cli::add_rpc_servers(o.rpc, err)) { fprintf(stderr, "llama_driver: %s\n", err.c_str()); return 1; }
    }
    if (o.step_report && !o.test_device) {
        fprintf(stderr, "llama_driver: --step-report needs --test-device\n");
        return 1;
    }
    Run run;

    printf("model: %s\n", o.model.c_str());
    printf("system: %s\n", llama_print_system_info());
    llama_cli::print_devices_available();

    std::vector<ggml_backend_dev_t> devs;
    std::vector<float> tsplit;
    std::string err;
    if (!llama_cli::resolve_devices(o.devices, devs, err) || !llama_cli::parse_tensor_split(o.tensor_split, tsplit, err)) {
        fprintf(stderr, "llama_driver: %s\n", err.c_str());
        return 1;
    }
    if (devs.empty()) {
        printf("devices: default\n");
    } else {
        printf("devices:");
        for (auto * d : devs) if (d) printf(" %s", ggml_backend_dev_name(d));
        printf("\n");
    }

    llama_model_params mp = llama_model_default_params();
    mp.devices      = devs.empty() ? nullptr : devs.data();
    mp.n_gpu_layers = o.n_gpu_layers;
    if (o.split_mode_given) mp.split_mode = split_mode;
    mp.main_gpu     = o.main_gpu;
    mp.tensor_split = tsplit.empty() ? nullptr : tsplit.data();
    llama_cli::set_mmap(mp, !o.no_mmap);
    std::vector<llama_model_tensor_buft_override> overrides;
    if (!o.override_tensor.empty()) {
        ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
        for (const std::string & pattern : o.override_tensor) {
            overrides.push_back({ pattern.c_str(), ggml_backend_dev_buffer_type(cpu) });
        }
        overrides.push_back({ nullptr, nullptr });
        mp.tensor_buft_overrides = overrides.data();
    }

    printf("params: split_mode=%s n_gpu_layers=%d main_gpu=%d n_ctx=%d n_batch=%d n_ubatch=%d threads=%d flash_attn=%s mmap=%d all_logits=%d\n",
           o.split_mode_given ? o.split_mode.c_str() : "default", o.n_gpu_layers, o.main_gpu, o.n_ctx, o.n_batch,
           o.n_ubatch, o.threads, o.flash_attn.c_str(), (int) llama_cli::uses_mmap(mp), (int) o.all_logits);
    fflush(stdout);

    const double t_load0 = now_ms();
    llama_model * model = run.model = llama_model_load_from_file(o.model.c_str(), mp);
    const double t_load1 = now_ms();
    if (!model) { fprintf(stderr, "llama_driver: failed to load model %s\n", o.model.c_str()); return 1; }

    llama_context_params cp = llama_cli::context_params(o.n_ctx, o.n_batch, o.n_ubatch, o.threads, fa);
    cp.type_k = o.cache_type_k;
    cp.type_v = o.cache_type_v;
    llama_context * ctx = run.ctx = llama_init_from_model(model, cp);
    const double t_ctx1 = now_ms();
    if (!ctx) { fprintf(stderr, "llama_driver: failed to create context\n"); return 1; }
    if (o.abort_on_call > 0) llama_set_abort_callback(ctx, abort_on_nth_call, &o.abort_on_call);

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    printf("n_vocab: %d\n", n_vocab);

    // tokenize
    std::vector<llama_token> prompt(o.prompt.size() + 8);
    int n_prompt = llama_tokenize(vocab, o.prompt.c_str(), (int32_t) o.prompt.size(), prompt.data(), (int32_t) prompt.size(), true, false);
    if (n_prompt < 0) {
        prompt.resize(-n_prompt);
        n_prompt = llama_tokenize(vocab, o.prompt.c_str(), (int32_t) o.prompt.size(), prompt.data(), (int32_t) prompt.size(), true, false);
    }
    if (n_prompt <= 0) { fprintf(stderr, "llama_driver: tokenization failed (%d)\n", n_prompt); return 1; }
    prompt.resize(n_prompt);
    printf("prompt_tokens:");
    for (auto t : prompt) printf(" %d", t);
    printf("\n");
    fflush(stdout);

    const int n_ctx_real = (int) llama_n_ctx(ctx);
    if (n_prompt + o.n_predict > n_ctx_real) {
        fprintf(stderr, "llama_driver: prompt (%d) + n_predict (%d) exceeds n_ctx (%d)\n", n_prompt, o.n_predict, n_ctx_real);
        return 1;
    }

    LogitsWriter lw;
    if (!o.logits_out.empty() && !lw.open(o.logits_out, (uint32_t) n_vocab)) {
        fprintf(stderr, "llama_driver: cannot open %s\n", o.logits_out.c_str());
        return 1;
    }
    Digest dg;
    double margin_min = INFINITY, margin_sum = 0.0, margin_rel_min = INFINITY;
    int margin_n = 0;
    // record the top1-top2 gap of a row used for a greedy choice (absolute, and relative to the row's max |logit|)
    auto note_margin = [&](const float * lg, float m) {
        double mx = 0.0;
        for (int i = 0; i < n_vocab; ++i) mx = std::max(mx, (double) std::fabs(lg[i]));
        margin_min = std::min(margin_min, (double) m);
        margin_rel_min = std::min(margin_rel_min, mx > 0.0 ? m / mx : 0.0);
        margin_sum += m; margin_n++;
    };

    const int n_batch_real = std::max(1, std::min(o.n_batch, (int) llama_n_batch(ctx)));
    run.batch = llama_batch_init(std::max(n_batch_real, 1), 0, 1);
    run.has_batch = true;
    llama_batch & batch = run.batch;
    // llama_decode, made again after a failure while --retry-failed-decode allows
    int retries_left = o.retry_decode;
    auto decode = [&](const char * what, int k) -> int {
        for (;;) {
            const int rc = llama_decode(ctx, batch);
            if (rc == 0 || retries_left == 0) return rc;
            retries_left--;
            printf("decode_error: %s %d rc=%d\n", what, k, rc);
            fflush(stdout);
        }
    };
    auto batch_add = [&](llama_token t, llama_pos pos, bool logits) {
        const int i = batch.n_tokens++;
        batch.token[i] = t;
        batch.pos[i] = pos;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = logits;
    };

    // prompt
    std::vector<llama_token> out;
    llama_token next = -1;
    const double t_p0 = now_ms();
    for (int start = 0; start < n_prompt; start += n_batch_real) {
        const int n = std::min(n_batch_real, n_prompt - start);
        batch.n_tokens = 0;
        for (int j = 0; j < n; ++j) {
            const int pos = start + j;
            batch_add(prompt[pos], pos, o.all_logits || pos == n_prompt - 1);
        }
        const int rc = decode("prompt", start);
        if (rc != 0) { fprintf(stderr, "llama_driver: llama_decode(prompt) failed: %d\n", rc); return 1; }
        llama_synchronize(ctx);
        for (int j = 0; j < n; ++j) {
            if (!batch.logits[j]) continue;
            const float * lg = llama_get_logits_ith(ctx, j);
            if (!lg) { fprintf(stderr, "llama_driver: no logits for prompt row %d\n", j); return 1; }
            dg.add(lg, n_vocab);
            if (!lw.row(start + j, (uint32_t) prompt[start + j], lg)) { fprintf(stderr, "llama_driver: write failed\n"); return 1; }
            if (start + j == n_prompt - 1) {
                float m;
                next = argmax(lg, n_vocab, &m);
                note_margin(lg, m);
            }
        }
    }
    const double t_p1 = now_ms();

    // decode
    out.push_back(next);
    int n_decoded = 0;
    const double t_d0 = now_ms();
    while ((int) out.size() < o.n_predict) {
        if (o.stop_eog && llama_vocab_is_eog(vocab, next)) break;
        const int pos = n_prompt + (int) out.size() - 1;
        batch.n_tokens = 0;
        batch_add(next, pos, true);
#ifdef LLAMA_DRIVER_TEST_DEVICE
        if (o.step_report) test_device_trace_reset();
#endif
        const int rc = decode("step", n_decoded);
        if (rc != 0) { fprintf(stderr, "llama_driver: llama_decode(step %d) failed: %d\n", n_decoded, rc); return 1; }
        llama_synchronize(ctx);
        n_decoded++;
#ifdef LLAMA_DRIVER_TEST_DEVICE
        if (o.step_report) {
            const test_device_trace_stats st = test_device_trace_read();
            printf("step %d: device graphs=%d copies=%d event_records=%d event_waits=%d host_syncs=%d allocs=%d,"
                   " between the first graph and the last device operation: host_syncs=%d allocs=%d%s\n",
                   n_decoded, st.count[TEST_DEVICE_OP_COMPUTE], st.count[TEST_DEVICE_OP_COPY],
                   st.count[TEST_DEVICE_OP_EVENT_RECORD], st.count[TEST_DEVICE_OP_EVENT_WAIT],
                   st.count[TEST_DEVICE_OP_SYNC], st.count[TEST_DEVICE_OP_ALLOC],
                   st.inside[TEST_DEVICE_OP_SYNC], st.inside[TEST_DEVICE_OP_ALLOC],
                   st.complete ? "" : " (trace incomplete)");
        }
#endif
        const float * lg = llama_get_logits_ith(ctx, -1);
        if (!lg) { fprintf(stderr, "llama_driver: no logits at step %d\n", n_decoded); return 1; }
        dg.add(lg, n_vocab);
        if (!lw.row(pos, (uint32_t) next, lg)) { fprintf(stderr, "llama_driver: write failed\n"); return 1; }
        float m;
        next = argmax(lg, n_vocab, &m);
        note_margin(lg, m);
        out.push_back(next);
    }
    const double t_d1 = now_ms();

    if (!lw.close()) { fprintf(stderr, "llama_driver: failed to finalize %s\n", o.logits_out.c_str()); return 1; }

    printf("tokens:");
    for (auto t : out) printf(" %d", t);
    printf("\n");
    std::string text;
    for (auto t : out) {
        char buf[256];
        const int n = llama_token_to_piece(vocab, t, buf, sizeof(buf), 0, true);
        if (n > 0) text.append(buf, n);
    }
    printf("text: \"%s\"\n", escape(text).c_str());
    printf("digest: rows=%" PRIu64 " n_vocab=%d fnv1a64=0x%016" PRIx64 " sum=%.9g maxabs=%.9g\n",
           dg.rows, n_vocab, dg.h, dg.sum, dg.maxabs);
    printf("margin: min=%.6g mean=%.6g min_rel=%.6g\n", margin_min, margin_n ? margin_sum / margin_n : 0.0, margin_rel_min);
    const double prompt_ms = t_p1 - t_p0, decode_ms = t_d1 - t_d0;
    printf("timing: load_ms=%.3f ctx_ms=%.3f prompt_ms=%.3f prompt_tps=%.2f decode_ms=%.3f decode_tps=%.2f n_prompt=%d n_decode=%d\n",
           t_load1 - t_load0, t_ctx1 - t_load1, prompt_ms, prompt_ms > 0 ? n_prompt * 1000.0 / prompt_ms : 0.0,
           decode_ms, decode_ms > 0 ? n_decoded * 1000.0 / decode_ms : 0.0, n_prompt, n_decoded);
    fflush(stdout);
    return 0;
}
