// llama.cpp's --fit (common_fit_params, libllama-common) through the plugin's tensor-parallel
// device TP0 over the test devices, each capped at GGML_BACKEND_RS_TESTGPU_MEMORY_MIB: the
// context fit picks must load and decode, and be within 5 % of the largest context that does
// (found here by bisection, each try in a process of its own, since a device that runs out of
// memory while the plugin places a buffer stops the process).
//
//   fit_check fit <model> <testgpu module> <plugin> <margin MiB>
//   fit_check try <model> <testgpu module> <plugin> <n_ctx>     exit 0: loaded and decoded
//
// Every try that loads also checks llama.cpp's memory breakdown (what llama-server prints as
// "memory breakdown"): TP0's figure (model + context + compute) is what its fullest member holds,
// to 1 %.
//
// Built against the llama.cpp tree's common/ and linked with its libllama-common and libllama
// (ctests/tools.cmake); the devices come from GGML_BACKEND_RS_TP (the plugin) and the module.

#include "fit.h"
#include "ggml-backend.h"
#include "gguf.h"
#include "llama.h"
#include "../src/llama-ext.h" // llama_get_memory_breakdown, as common/fit.cpp uses it

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <string>
#include <vector>

static ggml_backend_dev_t load_devices(const char * module, const char * plugin) {
    if (!ggml_backend_load(module) || !ggml_backend_load(plugin)) {
        fprintf(stderr, "fit_check: cannot load %s or %s\n", module, plugin);
        exit(2);
    }
    ggml_backend_dev_t tp = ggml_backend_dev_by_name("TP0");
    if (!tp) {
        fprintf(stderr, "fit_check: no device TP0 (GGML_BACKEND_RS_TP?)\n");
        exit(2);
    }
    return tp;
}

static void quiet(ggml_log_level level, const char * text, void *) {
    if (level >= GGML_LOG_LEVEL_WARN || getenv("FIT_CHECK_VERBOSE")) {
        fputs(text, stderr);
    }
}

// With FIT_CHECK_VERBOSE: what each device has free at `when`.
static void show_memory(const char * when) {
    if (!getenv("FIT_CHECK_VERBOSE")) {
        return;
    }
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        size_t free_b, total_b;
        ggml_backend_dev_memory(d, &free_b, &total_b);
        fprintf(stderr, "fit_check: %s: %s %.2f MiB free of %.2f MiB\n", when, ggml_backend_dev_name(d),
                free_b / 1048576.0, total_b / 1048576.0);
    }
}

// llama.cpp's memory breakdown of TP0 against what its members (the test devices) hold: the
// largest holding is TP0's figure.
static bool breakdown_matches(const llama_context * ctx, ggml_backend_dev_t tp) {
    size_t self = 0;
    for (const auto & [buft, mb] : llama_get_memory_breakdown(ctx)) {
        if (ggml_backend_buft_get_device(buft) == tp) {
            self += mb.total();
        }
    }
    size_t held = 0;
    for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
        ggml_backend_dev_t d = ggml_backend_dev_get(i);
        if (std::string(ggml_backend_dev_name(d)).rfind("TESTGPU", 0) == 0) {
            size_t free_b, total_b;
            ggml_backend_dev_memory(d, &free_b, &total_b);
            held = std::max(held, total_b - free_b);
        }
    }
    const bool ok = self > 0 && std::abs((double) held - (double) self) <= 0.01 * (double) self;
    if (!ok || getenv("FIT_CHECK_VERBOSE")) {
        printf("fit_check: memory breakdown: TP0 %.2f MiB (model + context + compute); its fullest member "
               "holds %.2f MiB%s\n", self / 1048576.0, held / 1048576.0, ok ? "" : ": FAIL");
    }
    return ok;
}

// Loads the model on TP0 with a context of n_ctx tokens (the context parameters fit planned with)
// and decodes 32 tokens at its end.
static int try_ctx(const char * model_path, ggml_backend_dev_t tp, uint32_t n_ctx) {
    ggml_backend_dev_t devs[2] = { tp, nullptr };
    llama_model_params mp = llama_model_default_params();
    mp.devices = devs;
    llama_model * model = llama_model_load_from_file(model_path, mp);
    if (!model) {
        return 3;
    }
    show_memory("model loaded");
    llama_context_params cp = llama_context_default_params(); // as fit's, but for n_ctx
    cp.n_ctx = n_ctx;
    cp.n_seq_max = 1;
    llama_context * ctx = llama_init_from_model(model, cp);
    show_memory("context made");
    if (!ctx) {
        llama_model_free(model);
        return 4;
    }
    const uint32_t n = 32;
    llama_batch batch = llama_batch_init((int32_t) n, 0, 1);
    for (uint32_t i = 0; i < n; i++) {
        batch.token[i] = (llama_token) (1 + i % 200);
        batch.pos[i] = (llama_pos) (n_ctx - n + i); // the context's last positions
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = i == n - 1;
    }
    batch.n_tokens = (int32_t) n;
    const int rc = llama_decode(ctx, batch);
    llama_batch_free(batch);
    if (rc == 0 && !breakdown_matches(ctx, tp)) {
        llama_free(ctx);
        llama_model_free(model);
        return 6;
    }
    llama_free(ctx);
    llama_model_free(model);
    return rc == 0 ? 0 : 5;
}

// The model's training context (the largest a context may be): <arch>.context_length.
static uint32_t n_ctx_train(const char * model_path) {
    gguf_init_params params = { /*.no_alloc =*/ true, /*.ctx =*/ nullptr };
    gguf_context * g = gguf_init_from_file(model_path, params);
    if (!g) {
        fprintf(stderr, "fit_check: cannot read %s\n", model_path);
        exit(2);
    }
    const int64_t arch_key = gguf_find_key(g, "general.architecture");
    const std::string key = std::string(arch_key >= 0 ? gguf_get_val_str(g, arch_key) : "llama") + ".context_length";
    const int64_t k = gguf_find_key(g, key.c_str());
    const uint32_t n = k >= 0 ? gguf_get_val_u32(g, k) : 0;
    gguf_free(g);
    if (n == 0) {
        fprintf(stderr, "fit_check: %s has no %s\n", model_path, key.c_str());
        exit(2);
    }
    return n;
}

int main(int argc, char ** argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: fit_check fit|try <model> <testgpu module> <plugin> <margin MiB|n_ctx>\n");
        return 2;
    }
    const std::string mode = argv[1];
    const char * model_path = argv[2];
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    ggml_backend_dev_t tp = load_devices(argv[3], argv[4]);
    if (mode == "try") {
        const int rc = try_ctx(model_path, tp, (uint32_t) strtoul(argv[5], nullptr, 10));
        llama_backend_free();
        return rc;
    }

    size_t free_b, total_b;
    ggml_backend_dev_memory(tp, &free_b, &total_b);
    printf("fit_check: %s (%s) reports %zu MiB free of %zu MiB\n", ggml_backend_dev_name(tp),
           ggml_backend_dev_description(tp), free_b >> 20, total_b >> 20);

    // What llama-server's default -fit on does (its smallest context, --fit-ctx, 4096 tokens), with
    // the margin given for every device (--fit-target; the default 1 GiB is more than the
    // test devices have).
    ggml_backend_dev_t devs[2] = { tp, nullptr };
    llama_model_params mp = llama_model_default_params();
    mp.devices = devs;
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 0; // fit chooses
    cp.n_seq_max = 1;
    std::vector<float> split(llama_max_devices(), 0.0f);
    std::vector<llama_model_tensor_buft_override> overrides(llama_max_tensor_buft_overrides());
    std::vector<size_t> margins(llama_max_devices(), (size_t) strtoul(argv[5], nullptr, 10) << 20);
    const auto status = common_fit_params(model_path, &mp, &cp, split.data(), overrides.data(),
                                          margins.data(), 4096, nullptr, GGML_LOG_LEVEL_INFO);
    printf("fit_check: fit status %d, n_ctx %u, n_gpu_layers %d\n", (int) status, cp.n_ctx, mp.n_gpu_layers);
    if (status != COMMON_PARAMS_FIT_STATUS_SUCCESS || cp.n_ctx == 0) {
        printf("fit_check: FAIL: fit found nothing\n");
        return 1;
    }
    const uint32_t chosen = cp.n_ctx;

    auto fits = [&](uint32_t n) {
        const std::string cmd = std::string("\"") + argv[0] + "\" try \"" + model_path + "\" \"" + argv[3] +
                                "\" \"" + argv[4] + "\" " + std::to_string(n) + " 2>/dev/null";
        fflush(stdout);
        const int status = std::system(cmd.c_str());
        const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        printf("fit_check:   n_ctx %u: %s\n", n, rc == 0 ? "loads and decodes" : "does not fit");
        if (rc == 6) {
            printf("fit_check: FAIL: the memory breakdown does not say what the devices hold\n");
            exit(1);
        }
        return rc == 0;
    };
    if (!fits(chosen)) {
        printf("fit_check: FAIL: the context fit chose (%u) does not load\n", chosen);
        return 1;
    }
    // The largest context that loads, to 256 tokens: bisection between what fit chose and the
    // model's training context.
    const uint32_t step = 256;
    uint32_t lo = chosen, hi = n_ctx_train(model_path);
    if (fits(hi)) {
        lo = hi;
    } else {
        while (hi - lo > step) {
            const uint32_t mid = lo + (hi - lo) / 2 / step * step;
            if (mid == lo) {
                break;
            }
            (fits(mid) ? lo : hi) = mid;
        }
    }
    printf("fit_check: fit chose n_ctx %u; the largest that loads is %u (%.1f %%)\n", chosen, lo,
           100.0 * chosen / lo);
    if (chosen < 0.95 * lo) {
        printf("fit_check: FAIL: fit's context is more than 5 %% below the largest that fits\n");
        return 1;
    }
    printf("fit_check: OK\n");
    llama_backend_free();
    return 0;
}
