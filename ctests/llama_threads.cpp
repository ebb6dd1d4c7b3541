// libllama over one tensor-parallel (meta) device, beyond one context and a few tokens:
//
//   llama_threads two  MODEL DEVICES [--test-device]  two contexts of one model decode at the
//                      same time from two threads (released together by a barrier); each must give
//                      the tokens and the bit-identical logits of the same decode run alone
//   llama_threads long MODEL DEVICES N [--test-device]  N greedy tokens in one context of 256
//                      cells, cleared and restarted from the prompt whenever it is full; the
//                      resident memory after the first 1000 tokens must not grow by more than
//                      512 KiB (the plans and per-device headers the meta backend caches are
//                      bounded, so nothing accumulates per token or per restart). Measured over
//                      10 000 tokens: +84..+88 KiB with and without the meta device and in
//                      upstream's build alike (about 10 bytes a token that libllama or the C
//                      allocator keep; 20 000 tokens: +188 KiB in all three)
//
// DEVICES: a comma-separated list for --split-mode tensor (e.g. CPU,CPU or TESTGPU0,TESTGPU1), or
// "none": one CPU without the meta device.

#include "llama.h"
#include "llama_cli.h"
#ifdef LLAMA_THREADS_TEST_DEVICE
#include "test_device.h"
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

const char * const PROMPT = "The quick brown fox jumps over the lazy dog, again and again.";

[[noreturn]] void fail(const std::string & what) {
    fprintf(stderr, "llama_threads: FAILED: %s\n", what.c_str());
    exit(1);
}

// The last row's logits are appended to `seen` (when given); returns the greedy token.
llama_token greedy(llama_context * ctx, int n_vocab, std::vector<float> * seen = nullptr) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    if (seen) seen->insert(seen->end(), logits, logits + n_vocab);
    int best = 0;
    for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

// Prompt + n greedy tokens in `ctx`; clears the memory and starts again from the prompt when the
// context is full. `after(i)` runs after token i.
template <typename F>
std::vector<llama_token> decode(llama_model * model, llama_context * ctx, int n, F after,
                                std::vector<float> * seen = nullptr) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<llama_token> prompt(256);
    const int n_prompt = llama_tokenize(vocab, PROMPT, (int32_t) strlen(PROMPT), prompt.data(),
                                        (int32_t) prompt.size(), true, false);
    if (n_prompt <= 0) fail("tokenize");
    prompt.resize(n_prompt);
    const int n_ctx = (int) llama_n_ctx(ctx);
    std::vector<llama_token> out;
    int n_past = 0;
    llama_token next = 0;
    auto start = [&] {
        llama_memory_clear(llama_get_memory(ctx), true);
        llama_batch b = llama_batch_get_one(prompt.data(), n_prompt);
        if (llama_decode(ctx, b) != 0) fail("decode prompt");
        n_past = n_prompt;
        next = greedy(ctx, n_vocab, seen);
    };
    start();
    for (int i = 0; i < n; i++) {
        out.push_back(next);
        if (n_past + 1 > n_ctx) {
            start();
        } else {
            llama_batch b = llama_batch_get_one(&out.back(), 1);
            if (llama_decode(ctx, b) != 0) fail("decode step " + std::to_string(i));
            n_past++;
            next = greedy(ctx, n_vocab, seen);
        }
        after(i);
    }
    return out;
}

llama_context * context(llama_model * model, int n_ctx) {
    llama_context_params cp = llama_cli::context_params(n_ctx, 64, 64, 1, LLAMA_FLASH_ATTN_TYPE_ENABLED);
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("context");
    return ctx;
}

long rss_kib() {
    FILE * f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f || fscanf(f, "%ld %ld", &pages, &resident) != 2) fail("read /proc/self/statm");
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

} // namespace

int main(int argc, char ** argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: llama_threads two MODEL DEVICES [--test-device]\n"
                        "       llama_threads long MODEL DEVICES N [--test-device]\n");
        return 2;
    }
    const std::string mode = argv[1];
    bool test_device = false;
    for (int i = 4; i < argc; i++) test_device |= strcmp(argv[i], "--test-device") == 0;
    llama_cli::verbose = false;
    llama_log_set(llama_cli::log_cb, nullptr);
#ifdef LLAMA_THREADS_TEST_DEVICE
    if (test_device) test_device_register(1);
#else
    if (test_device) fail("--test-device needs a build with test_device.c");
#endif
    llama_backend_init();

    // DEVICES "none": one CPU without tensor parallelism (the baseline of the memory figures)
    std::vector<ggml_backend_dev_t> devs;
    std::string err;
    llama_model_params mp = llama_model_default_params();
    if (strcmp(argv[3], "none") == 0) {
        mp.split_mode = LLAMA_SPLIT_MODE_NONE;
        mp.n_gpu_layers = 0;
        mp.main_gpu = -1;
    } else {
        if (!llama_cli::resolve_devices(argv[3], devs, err)) fail(err);
        mp.devices = devs.data();
        mp.split_mode = LLAMA_SPLIT_MODE_TENSOR;
    }
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) fail("load model");

    if (mode == "two") {
        const int n = 24;
        std::vector<float> want_logits, logits_a, logits_b;
        llama_context * alone = context(model, 256);
        const std::vector<llama_token> want = decode(model, alone, n, [](int) {}, &want_logits);
        llama_free(alone);
        llama_context * a = context(model, 256);
        llama_context * b = context(model, 256);
        std::vector<llama_token> got_a, got_b;
        std::atomic<int> ready{0};
        auto together = [&] {  // both threads start decoding at the same moment
            ready.fetch_add(1);
            while (ready.load() < 2) std::this_thread::yield();
        };
        std::thread ta([&] { together(); got_a = decode(model, a, n, [](int) {}, &logits_a); });
        std::thread tb([&] { together(); got_b = decode(model, b, n, [](int) {}, &logits_b); });
        ta.join();
        tb.join();
        if (got_a != want || got_b != want) fail("a context decoding next to another gave other tokens");
        if (logits_a != want_logits || logits_b != want_logits) {
            fail("a context decoding next to another gave other logits");
        }
        llama_free(a);
        llama_free(b);
        printf("llama_threads: two contexts decoded %d tokens each at the same time, "
               "the tokens and logits of one context alone\n", n);
    } else if (mode == "long") {
        if (argc < 5) fail("long: N missing");
        const int n = atoi(argv[4]);
        if (n < 2000) fail("long: N must be at least 2000");
        llama_context * ctx = context(model, 256);
        long warm = 0, peak = 0;
        decode(model, ctx, n, [&](int i) {
#ifdef LLAMA_THREADS_TEST_DEVICE
            // the test devices' operation trace is a static 1 MiB array: keep it in its first
            // pages, or its filling reads as growth
            if (test_device) test_device_trace_reset();
#endif
            if (i == 999) warm = rss_kib();
            if (i >= 999) peak = std::max(peak, rss_kib());
        });
        llama_free(ctx);
        const long growth = peak - warm;
        printf("llama_threads: %d tokens (context of 256 cells, restarted when full): resident memory "
               "%ld KiB after 1000 tokens, at most %ld KiB after (+%ld KiB)\n", n, warm, peak, growth);
        if (growth > 512) fail("resident memory grew by " + std::to_string(growth) + " KiB after warm-up");
    } else {
        fail("unknown mode " + mode);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
