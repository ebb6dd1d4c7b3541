// libllama over one tensor-parallel (meta) device, beyond one context and a few tokens:
//
//   llama_threads two  MODEL DEVICES [--test-device]  two contexts of one model decode at the
//                      same time from two threads; each must give the tokens of the same decode
//                      run alone
//   llama_threads long MODEL DEVICES N [--test-device]  N greedy tokens in one context of 256
//                      cells, cleared and restarted from the prompt whenever it is full; the
//                      resident memory after the first 1000 tokens must not grow by more than
//                      2 MiB (the plans and per-device headers the meta backend caches are
//                      bounded, so nothing accumulates per token or per restart)
//
// DEVICES: a comma-separated list for --split-mode tensor (e.g. CPU,CPU or TESTGPU0,TESTGPU1).

#include "llama.h"
#include "llama_cli.h"
#ifdef LLAMA_THREADS_TEST_DEVICE
#include "test_device.h"
#endif

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

llama_token greedy(llama_context * ctx, int n_vocab) {
    const float * logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int i = 1; i < n_vocab; i++) if (logits[i] > logits[best]) best = i;
    return best;
}

// Prompt + n greedy tokens in `ctx`; clears the memory and starts again from the prompt when the
// context is full. `after(i)` runs after token i.
template <typename F>
std::vector<llama_token> decode(llama_model * model, llama_context * ctx, int n, F after) {
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
        next = greedy(ctx, n_vocab);
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
            next = greedy(ctx, n_vocab);
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

    std::vector<ggml_backend_dev_t> devs;
    std::string err;
    if (!llama_cli::resolve_devices(argv[3], devs, err)) fail(err);
    llama_model_params mp = llama_model_default_params();
    mp.devices = devs.data();
    mp.split_mode = LLAMA_SPLIT_MODE_TENSOR;
    llama_model * model = llama_model_load_from_file(argv[2], mp);
    if (!model) fail("load model");

    if (mode == "two") {
        const int n = 24;
        llama_context * alone = context(model, 256);
        const std::vector<llama_token> want = decode(model, alone, n, [](int) {});
        llama_free(alone);
        llama_context * a = context(model, 256);
        llama_context * b = context(model, 256);
        std::vector<llama_token> got_a, got_b;
        std::thread ta([&] { got_a = decode(model, a, n, [](int) {}); });
        std::thread tb([&] { got_b = decode(model, b, n, [](int) {}); });
        ta.join();
        tb.join();
        if (got_a != want || got_b != want) fail("a context decoding next to another gave other tokens");
        llama_free(a);
        llama_free(b);
        printf("llama_threads: two contexts decoded %d tokens each at the same time, "
               "the tokens of one context alone\n", n);
    } else if (mode == "long") {
        if (argc < 5) fail("long: N missing");
        const int n = atoi(argv[4]);
        if (n < 2000) fail("long: N must be at least 2000");
        llama_context * ctx = context(model, 256);
        long warm = 0, peak = 0;
        decode(model, ctx, n, [&](int i) {
            if (i == 999) warm = rss_kib();
            if (i >= 999) peak = std::max(peak, rss_kib());
        });
        llama_free(ctx);
        const long growth = peak - warm;
        printf("llama_threads: %d tokens (context of 256 cells, restarted when full): resident memory "
               "%ld KiB after 1000 tokens, at most %ld KiB after (+%ld KiB)\n", n, warm, peak, growth);
        if (growth > 2048) fail("resident memory grew by " + std::to_string(growth) + " KiB after warm-up");
    } else {
        fail("unknown mode " + mode);
    }
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
