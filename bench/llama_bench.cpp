// llama_bench.cpp — prompt-processing and token-generation throughput of a GGUF model through
// libllama's public API (llama.h), in the manner of llama.cpp's llama-bench: the same program is
// built against this library (`llama_bench`) and against the pristine reference build
// (`llama_bench_ref`), so bench/gpu.sh can alternate the two in one run.
//
// Usage:
//   llama_bench --model PATH [--split-mode none|layer|row|tensor (none)] [--devices LIST]
//               [--tensor-split F,F,..] [--main-gpu I (0)] [--n-gpu-layers N (999)]
//               [--n-prompt N (512)] [--n-gen N (128)] [--n-batch N (2048)] [--n-ubatch N (512)]
//               [--flash-attn on|off (on)] [--threads N (hardware threads)] [--warmup N (2)]
//               [--reps N (10)] [--seed N (42)] [--depths D,D,.. (0)] [--no-mmap] [--verbose]
//               [--rpc HOST:PORT[,HOST:PORT..]]
//   llama_bench --quantize IN OUT TYPE [--threads N]      TYPE: q4_0 q4_1 q5_0 q5_1 q8_0
//
// --devices is a comma list of ggml device names (ggml_backend_dev_by_name: CPU, CUDA0, ...); a
// name may repeat (tensor mode over CUDA0,CUDA0 splits the model into two slices on one GPU). The
// list goes NULL-terminated into llama_model_params.devices, as tools/model/llama_driver does;
// without --devices libllama picks its default devices. --rpc adds the devices of ggml-rpc servers
// (builds with GGML_RPC; tools/model/llama_cli.h): RPC0, RPC1, ... in the order of the list.
//
// Tests (each in its own context on the one loaded model; --n-prompt 0 or --n-gen 0 skips one),
// each run once per depth D of --depths (a comma list of token counts >= 0), in the order pp at
// every depth, then tg at every depth:
//   ppN  N tokens in one llama_decode call (in chunks of n_batch when N > n_batch) at positions
//        D, D+1, ..., logits of the last position only, then llama_synchronize; the time of the
//        whole gives N / seconds.
//   tgN  N single-token llama_decode calls, one after the other, at positions D, D+1, ..., each
//        followed by llama_synchronize; N / seconds of the whole.
// Depth 0 (the test is named ppN / tgN): the KV cache is cleared (llama_memory_clear(.., true))
// before every warm-up and repetition. Depth D > 0 (named ppN@dD / tgN@dD): once, before the
// warm-ups, D tokens are decoded at positions 0..D-1 (in chunks of n_batch, untimed); every
// warm-up and repetition then first drops positions >= D of sequence 0
// (llama_memory_seq_rm(.., 0, D, -1)), so each one starts from the same D cached tokens. A model
// whose memory cannot drop a tail of positions (recurrent state) fails there.
// Tokens are pseudo-random but fixed by --seed (uniform over the vocabulary), so every build and
// run feeds the same ids: the D context tokens are the same for every test, and a test's own
// tokens the same at every depth. The first token of the context (the D tokens at depth D > 0,
// else the test's own) is BOS when the vocabulary adds one. Context size per test: D + its own
// token count (libllama rounds it up).
//
// Output on stdout, `key: value` lines, then per test and depth:
//   reps: test=pp512 tps=T1,T2,...             tokens/s of each timed repetition, in run order
//   result test=pp512 build=ours model=NAME split=tensor devices=CUDA0,CUDA0 n_prompt=512 n_gen=0
//          depth=0 reps=10 median_tps=... min_tps=... max_tps=...       (one line)
// test= is the test's name with its depth (tg128@d4096); n_prompt= and n_gen= count the test's own
// tokens. build= is `ours` for llama_bench, `upstream` for llama_bench_ref; model= the file name
// without directory and .gguf. Errors go to stderr; exit status 1 on any failure. libllama's log
// is shown from WARN up unless --verbose.
#include "llama_cli.h" // tools/model: log filter, --devices and --tensor-split
#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifndef LLAMA_BENCH_BUILD_NAME
#define LLAMA_BENCH_BUILD_NAME "unknown"
#endif

namespace {

struct Opts {
    std::string model;
    std::string split_mode = "none";
    std::string devices;       // empty: libllama's default devices
    std::string rpc;           // --rpc: ggml-rpc servers whose devices are added
    std::string tensor_split;  // empty: libllama's default
    int main_gpu = 0;
    bool load_all = false;
    int n_gpu_layers = 999;
    int n_prompt = 512;
    int n_gen = 128;
    int n_batch = 2048;
    int n_ubatch = 512;
    std::string flash_attn = "on";
    int threads = 0;           // 0: hardware threads
    int warmup = 2;
    int reps = 10;
    uint32_t seed = 42;
    std::vector<int> depths = {0};  // tokens already in the KV cache when a test starts
    bool no_mmap = false;
    bool verbose = false;
};

void usage() {
    fprintf(stderr,
        "usage: llama_bench --model PATH [--split-mode none|layer|row|tensor] [--devices LIST]\n"
        "                   [--tensor-split F,F,..] [--main-gpu I] [--n-gpu-layers N] [--n-prompt N]\n"
        "                   [--n-gen N] [--n-batch N] [--n-ubatch N] [--flash-attn on|off] [--threads N]\n"
        "                   [--warmup N] [--reps N] [--seed N] [--depths D,D,..] [--no-mmap]\n"
        "                   [--load-all-backends] [--verbose] [--rpc HOST:PORT,..]\n"
        "       llama_bench --quantize IN OUT q4_0|q4_1|q5_0|q5_1|q8_0 [--threads N]\n");
}

[[noreturn]] __attribute__((format(printf, 1, 2))) void fail(const char * fmt, ...) {
    fprintf(stderr, "llama_bench: ");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    exit(1);
}

int parse_int(const char * s, const char * flag, int min) { return llama_cli::parse_int("llama_bench", s, flag, min); }

double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int hardware_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? (int) n : 1;
}

// --quantize IN OUT TYPE [--threads N], with argv[i] == "--quantize" and i + 3 < argc.
int quantize(int argc, char ** argv, int i) {
    const std::string in = argv[i + 1], out = argv[i + 2], type = argv[i + 3];
    int threads = hardware_threads();
    for (int j = i + 4; j < argc; ++j) {
        const std::string a = argv[j];
        if (a == "--threads" && j + 1 < argc) threads = parse_int(argv[++j], "--threads", 1);
        else { fprintf(stderr, "llama_bench: unknown argument after --quantize: %s\n", a.c_str()); usage(); return 1; }
    }
    struct { const char * name; llama_ftype ftype; } const types[] = {
        {"q4_0", LLAMA_FTYPE_MOSTLY_Q4_0}, {"q4_1", LLAMA_FTYPE_MOSTLY_Q4_1},
        {"q5_0", LLAMA_FTYPE_MOSTLY_Q5_0}, {"q5_1", LLAMA_FTYPE_MOSTLY_Q5_1},
        {"q8_0", LLAMA_FTYPE_MOSTLY_Q8_0},
    };
    const llama_ftype * ftype = nullptr;
    for (const auto & t : types) if (type == t.name) ftype = &t.ftype;
    if (!ftype) fail("--quantize: unsupported type '%s' (q4_0, q4_1, q5_0, q5_1, q8_0)", type.c_str());

    llama_log_set(llama_cli::log_cb, nullptr);
    llama_backend_init();
    llama_model_quantize_params qp = llama_model_quantize_default_params();
    qp.nthread = threads;
    qp.ftype = *ftype;
    const double t0 = now_s();
    const uint32_t rc = llama_model_quantize(in.c_str(), out.c_str(), &qp);
    const double t1 = now_s();
    llama_backend_free();
    if (rc != 0) fail("llama_model_quantize(%s -> %s) failed", in.c_str(), out.c_str());
    printf("quantized: %s -> %s type=%s threads=%d seconds=%.1f\n", in.c_str(), out.c_str(), type.c_str(), threads, t1 - t0);
    return 0;
}

// --depths: a comma list of distinct integers >= 0.
std::vector<int> parse_depths(const char * s) {
    std::vector<int> out;
    for (const auto & item : llama_cli::split_list(s)) {
        const int d = parse_int(item.c_str(), "--depths", 0);
        if (std::find(out.begin(), out.end(), d) != out.end()) fail("--depths: %d is given twice", d);
        out.push_back(d);
    }
    if (out.empty()) fail("--depths: empty list");
    return out;
}

struct Test {
    std::string name;   // pp512 / tg128 at depth 0, pp512@d4096 / tg128@d4096 at depth 4096
    bool prompt;        // pp (one batch) or tg (single tokens)
    int n_tokens;
    int depth;          // tokens in the KV cache before the test's own
};

struct Summary {
    double median, min, max;
};

Summary summarize(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return {med, v.front(), v.back()};
}

} // namespace

int main(int argc, char ** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--quantize") {
            if (i != 1) fail("--quantize must be the first argument");
            if (argc < 5) { usage(); return 1; }
            return quantize(argc, argv, i);
        }
        auto need = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "llama_bench: missing value for %s\n", a.c_str()); usage(); exit(1); }
            return argv[++i];
        };
        if      (a == "--model" || a == "-m")   o.model = need();
        else if (a == "--split-mode" || a == "-sm") o.split_mode = need();
        else if (a == "--devices" || a == "-dev") o.devices = need();
        else if (a == "--tensor-split" || a == "-ts") o.tensor_split = need();
        else if (a == "--main-gpu" || a == "-mg") o.main_gpu = parse_int(need(), "--main-gpu", 0);
        else if (a == "--n-gpu-layers" || a == "-ngl") o.n_gpu_layers = parse_int(need(), "--n-gpu-layers", 0);
        else if (a == "--n-prompt" || a == "-p") o.n_prompt = parse_int(need(), "--n-prompt", 0);
        else if (a == "--n-gen" || a == "-n")   o.n_gen = parse_int(need(), "--n-gen", 0);
        else if (a == "--n-batch" || a == "-b") o.n_batch = parse_int(need(), "--n-batch", 1);
        else if (a == "--n-ubatch" || a == "-ub") o.n_ubatch = parse_int(need(), "--n-ubatch", 1);
        else if (a == "--flash-attn" || a == "-fa") o.flash_attn = need();
        else if (a == "--threads" || a == "-t") o.threads = parse_int(need(), "--threads", 1);
        else if (a == "--warmup")               o.warmup = parse_int(need(), "--warmup", 0);
        else if (a == "--reps" || a == "-r")    o.reps = parse_int(need(), "--reps", 1);
        else if (a == "--seed")                 o.seed = (uint32_t) parse_int(need(), "--seed", 0);
        else if (a == "--depths" || a == "-d")  o.depths = parse_depths(need());
        else if (a == "--no-mmap")              o.no_mmap = true;
        else if (a == "--load-all-backends")    o.load_all = true;
        else if (a == "--rpc")                  o.rpc = need();
        else if (a == "--verbose")              o.verbose = true;
        else if (a == "-h" || a == "--help")    { usage(); return 0; }
        else { fprintf(stderr, "llama_bench: unknown argument: %s\n", a.c_str()); usage(); return 1; }
    }
    if (o.model.empty()) { usage(); return 1; }
    if (o.n_prompt == 0 && o.n_gen == 0) fail("--n-prompt and --n-gen are both 0: nothing to measure");
    if (o.threads == 0) o.threads = hardware_threads();

    llama_split_mode split_mode;
    if      (o.split_mode == "none")   split_mode = LLAMA_SPLIT_MODE_NONE;
    else if (o.split_mode == "layer")  split_mode = LLAMA_SPLIT_MODE_LAYER;
    else if (o.split_mode == "row")    split_mode = LLAMA_SPLIT_MODE_ROW;
    else if (o.split_mode == "tensor") split_mode = LLAMA_SPLIT_MODE_TENSOR;
    else fail("bad --split-mode '%s' (none, layer, row, tensor)", o.split_mode.c_str());

    llama_flash_attn_type fa;
    if      (o.flash_attn == "on")  fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
    else if (o.flash_attn == "off") fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    else fail("bad --flash-attn '%s' (on, off)", o.flash_attn.c_str());

    // LLAMA_BENCH_VERBOSE=1 is --verbose for runs whose command line a script fixes (e.g. to
    // see GGML_META_PROFILE's report, which goes through the log)
    const char * verbose_env = getenv("LLAMA_BENCH_VERBOSE");
    llama_cli::verbose = o.verbose || (verbose_env && strcmp(verbose_env, "1") == 0);
    llama_log_set(llama_cli::log_cb, nullptr);
    // ggml_backend_load_all: backend modules and GGML_BACKEND_PATH (e.g. our plugin)
    if (o.load_all) ggml_backend_load_all();
    std::string err;
    if (!o.rpc.empty() && !llama_cli::add_rpc_servers(o.rpc, err)) fail("%s", err.c_str());
    llama_backend_init();

    printf("build: %s\n", LLAMA_BENCH_BUILD_NAME);
    printf("model: %s\n", o.model.c_str());
    llama_cli::print_devices_available();

    std::vector<ggml_backend_dev_t> devs;
    std::vector<float> tsplit;
    if (!llama_cli::resolve_devices(o.devices, devs, err) || !llama_cli::parse_tensor_split(o.tensor_split, tsplit, err)) {
        fail("%s", err.c_str());
    }
    std::string devices_label;
    for (auto * d : devs) {
        if (d) devices_label += (devices_label.empty() ? "" : ",") + std::string(ggml_backend_dev_name(d));
    }
    if (devices_label.empty()) devices_label = "default";
    printf("devices: %s\n", devices_label.c_str());

    llama_model_params mp = llama_model_default_params();
    mp.devices      = devs.empty() ? nullptr : devs.data();
    mp.n_gpu_layers = o.n_gpu_layers;
    mp.split_mode   = split_mode;
    mp.main_gpu     = o.main_gpu;
    mp.tensor_split = tsplit.empty() ? nullptr : tsplit.data();
    llama_cli::set_mmap(mp, !o.no_mmap);

    std::string depths_label;
    for (int d : o.depths) depths_label += (depths_label.empty() ? "" : ",") + std::to_string(d);
    printf("params: split=%s devices=%s tensor_split=%s n_gpu_layers=%d n_prompt=%d n_gen=%d n_batch=%d "
           "n_ubatch=%d flash_attn=%s threads=%d warmup=%d reps=%d seed=%u depths=%s mmap=%d\n",
           o.split_mode.c_str(), devices_label.c_str(), o.tensor_split.empty() ? "default" : o.tensor_split.c_str(),
           o.n_gpu_layers, o.n_prompt, o.n_gen, o.n_batch, o.n_ubatch, o.flash_attn.c_str(), o.threads, o.warmup,
           o.reps, o.seed, depths_label.c_str(), (int) llama_cli::uses_mmap(mp));
    fflush(stdout);

    const double t_load0 = now_s();
    llama_model * model = llama_model_load_from_file(o.model.c_str(), mp);
    const double t_load1 = now_s();
    if (!model) fail("failed to load model %s", o.model.c_str());
    char desc[256];
    llama_model_desc(model, desc, sizeof(desc));
    for (char * p = desc; *p; ++p) if (*p == ' ') *p = '_';  // one token in the result line
    printf("model_desc: %s size_mib=%.1f params=%llu load_s=%.2f\n", desc,
           (double) llama_model_size(model) / (1024.0 * 1024.0), (unsigned long long) llama_model_n_params(model),
           t_load1 - t_load0);
    // The result lines name the model by its file name (without directory and .gguf).
    std::string model_name = o.model.substr(o.model.find_last_of('/') == std::string::npos ? 0 : o.model.find_last_of('/') + 1);
    if (model_name.size() > 5 && model_name.compare(model_name.size() - 5, 5, ".gguf") == 0) model_name.resize(model_name.size() - 5);
    for (char & c : model_name) if (c == ' ' || c == '=') c = '_';

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const bool add_bos = llama_vocab_get_add_bos(vocab);
    const llama_token bos = llama_vocab_bos(vocab);

    std::vector<Test> tests;
    for (int d : o.depths) {
        if (o.n_prompt > 0) tests.push_back({"pp" + std::to_string(o.n_prompt), true, o.n_prompt, d});
    }
    for (int d : o.depths) {
        if (o.n_gen > 0) tests.push_back({"tg" + std::to_string(o.n_gen), false, o.n_gen, d});
    }
    for (Test & t : tests) {
        if (t.depth > 0) t.name += "@d" + std::to_string(t.depth);
        if (t.n_tokens > 1000000000 - t.depth) fail("%s: context of more than 1e9 tokens", t.name.c_str());
    }

    // n pseudo-random token ids, uniform over the vocabulary, fixed by seed.
    auto random_tokens = [&](uint32_t seed, int n) {
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> pick(0, n_vocab - 1);
        std::vector<llama_token> v((size_t) n);
        for (auto & tk : v) tk = pick(rng);
        return v;
    };

    for (const Test & t : tests) {
        // The test's own tokens (the same at every depth) and at depth D > 0 the D context tokens
        // before them (the same for every test).
        std::vector<llama_token> toks = random_tokens(o.seed + (t.prompt ? 0u : 1u), t.n_tokens);
        std::vector<llama_token> ctx_toks = random_tokens(o.seed + 2u, t.depth);
        if (add_bos && bos >= 0) {
            if (t.depth > 0) ctx_toks[0] = bos;
            else toks[0] = bos;
        }

        const llama_context_params cp =
            llama_cli::context_params(t.depth + t.n_tokens, o.n_batch, o.n_ubatch, o.threads, fa);
        llama_context * ctx = llama_init_from_model(model, cp);
        if (!ctx) fail("failed to create a context for %s", t.name.c_str());
        llama_memory_t mem = llama_get_memory(ctx);
        const int n_batch = std::max(1, std::min(o.n_batch, (int) llama_n_batch(ctx)));
        llama_batch batch = llama_batch_init(t.prompt || t.depth > 0 ? n_batch : 1, 0, 1);

        // ids[0..n) at positions pos, pos+1, ... of sequence 0.
        auto decode = [&](const llama_token * ids, int pos, int n, bool last_logits) {
            batch.n_tokens = n;
            for (int j = 0; j < n; ++j) {
                batch.token[j] = ids[j];
                batch.pos[j] = pos + j;
                batch.n_seq_id[j] = 1;
                batch.seq_id[j][0] = 0;
                batch.logits[j] = last_logits && j == n - 1;
            }
            const int rc = llama_decode(ctx, batch);
            if (rc != 0) {
                fprintf(stderr, "llama_bench: llama_decode failed in %s at position %d: %d\n", t.name.c_str(), pos, rc);
                exit(1);
            }
        };
        // n tokens of ids from position pos, n_batch at a time; logits of the last one.
        auto decode_chunks = [&](const llama_token * ids, int pos, int n) {
            for (int start = 0; start < n; start += n_batch) {
                const int k = std::min(n_batch, n - start);
                decode(ids + start, pos + start, k, start + k == n);
            }
        };
        // The depth's context, decoded once (untimed); each repetition keeps it.
        if (t.depth > 0) {
            decode_chunks(ctx_toks.data(), 0, t.depth);
            llama_synchronize(ctx);
        }
        // One repetition; returns its seconds.
        auto run_once = [&]() -> double {
            if (t.depth == 0) {
                llama_memory_clear(mem, true);
            } else if (!llama_memory_seq_rm(mem, 0, t.depth, -1)) {
                fail("%s: the model's memory cannot drop positions >= %d (llama_memory_seq_rm)", t.name.c_str(), t.depth);
            }
            llama_synchronize(ctx);
            const double t0 = now_s();
            if (t.prompt) {
                decode_chunks(toks.data(), t.depth, t.n_tokens);
                llama_synchronize(ctx);
            } else {
                for (int i = 0; i < t.n_tokens; ++i) {
                    decode(&toks[(size_t) i], t.depth + i, 1, true);
                    llama_synchronize(ctx);
                }
            }
            return now_s() - t0;
        };

        for (int w = 0; w < o.warmup; ++w) run_once();
        std::vector<double> tps;
        for (int r = 0; r < o.reps; ++r) {
            const double s = run_once();
            tps.push_back(s > 0 ? t.n_tokens / s : 0.0);
        }
        llama_batch_free(batch);
        llama_free(ctx);

        printf("reps: test=%s tps=", t.name.c_str());
        for (size_t r = 0; r < tps.size(); ++r) printf("%s%.2f", r ? "," : "", tps[r]);
        printf("\n");
        const Summary s = summarize(tps);
        printf("result test=%s build=%s model=%s split=%s devices=%s n_prompt=%d n_gen=%d depth=%d reps=%d "
               "median_tps=%.2f min_tps=%.2f max_tps=%.2f\n",
               t.name.c_str(), LLAMA_BENCH_BUILD_NAME, model_name.c_str(), o.split_mode.c_str(), devices_label.c_str(),
               t.prompt ? t.n_tokens : 0, t.prompt ? 0 : t.n_tokens, t.depth, o.reps, s.median, s.min, s.max);
        fflush(stdout);
    }

    llama_model_free(model);
    llama_backend_free();
    return 0;
}
