// Meta (tensor-parallel) backend CPU overhead per decode step.
//
// Builds the graph libllama builds for one decoded token of a small llama model with flash
// attention (per layer: rms_norm, Q/K/V matmuls, rope, K/V written into a cache with set_rows,
// flash attention over views of the cache, attn_output, residual add, SwiGLU FFN, residual add;
// then the output norm and the output matmul), with tiny dimensions so the kernels cost little
// and what is measured is the scheduler plus the meta backend (split states, per-device
// subgraphs, allreduces, scatter/gather of inputs and outputs).
//
// Weights and the KV cache are split like libllama's tensor mode does it: Q/K/V, FFN up/gate and
// the output matrix on AXIS_1 (output rows), attn_output and FFN down on AXIS_0 (so their
// results are PARTIAL and get an allreduce), the KV cache on AXIS_0 (whole KV heads), norms
// MIRRORED; the token embedding stays on the CPU. The scheduler runs over {meta, CPU}.
//
// Configurations (first argument):
//   single-cpu      no meta: everything on one CPU backend (sched over {CPU})
//   single-testgpu  no meta: layers on TESTGPU0, inputs and embedding on the CPU (sched over {TESTGPU0, CPU})
//   meta-testgpu    meta over TESTGPU0,TESTGPU1 (ctests/test_device.c, non-host buffers) + CPU
//   meta-cpu        meta over CPU,CPU + CPU (upstream's meta crashes here: its meta buffer type claims
//                   to be host memory, see docs/meta-upstream.md section 5)
// Modes (second argument), the two ways libllama runs a decode step:
//   rebuild   new graph every step: build + sched reset + alloc + set inputs + compute + read logits
//   reuse     graph built and allocated once (libllama's graph reuse): set inputs + compute + read logits
//
// Usage: meta_overhead <config> <rebuild|reuse> [iterations (200)]
// Prints: "meta_overhead config=C mode=M nodes=N splits=S median_us=X min_us=Y max_us=Z".
// Built against upstream's ggml-backend and against ours; bench/run.sh runs both.
// (C++ because ggml 0.9.11's meta API in ggml-ext.h is declared without extern "C".)

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-backend-impl.h"
#include "ggml-cpu.h"
#include "meta_split_state.h" // ctests/
#include "test_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// Model shape: 4 layers, GQA 4 query heads over 2 KV heads of 8 values each.
constexpr int N_LAYER   = 4;
constexpr int HEAD_DIM  = 8;
constexpr int N_HEAD    = 4;
constexpr int N_HEAD_KV = 2;
constexpr int N_GQA     = N_HEAD / N_HEAD_KV;
constexpr int N_EMBD    = N_HEAD * HEAD_DIM;    // 32
constexpr int N_EMBD_KV = N_HEAD_KV * HEAD_DIM; // 16
constexpr int N_FF      = 64;
constexpr int N_VOCAB   = 64;
constexpr int KV_SIZE   = 512; // cache rows
constexpr int N_KV      = 256; // rows attended to (libllama pads the used part of the cache to 256)
constexpr int MAX_NODES = 2048;

double now_us() {
    using namespace std::chrono;
    return duration<double, std::micro>(steady_clock::now().time_since_epoch()).count();
}

// --- split states of the statically allocated tensors (weights, KV cache) ----------------------

struct split_rule {
    const char * suffix; // matched against the end of the tensor name
    int axis;
    int64_t granularity; // slices are multiples of this (whole heads / whole GQA groups)
};

// The same assignment libllama's tensor mode makes for a llama model (see docs/meta-upstream.md 3.3).
const split_rule SPLIT_RULES[] = {
    { ".attn_q.weight",      1, HEAD_DIM * N_GQA },
    { ".attn_k.weight",      1, HEAD_DIM },
    { ".attn_v.weight",      1, HEAD_DIM },
    { ".attn_output.weight", 0, HEAD_DIM * N_GQA },
    { ".ffn_up.weight",      1, 1 },
    { ".ffn_gate.weight",    1, 1 },
    { ".ffn_down.weight",    0, 1 },
    { "cache_k",             0, HEAD_DIM }, // names "cache_k_lN": matched as a prefix below
    { "cache_v",             0, HEAD_DIM },
};

bool ends_with(const std::string & s, const char * suffix) {
    size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

ggml_backend_meta_split_state weight_split_state(const ggml_tensor * t, void * ud) {
    const int n_dev = *static_cast<const int *>(ud);
    const std::string name = t->name;
    ggml_backend_meta_split_state st = meta_split_state_mirrored();
    int axis = -1;
    int64_t gran = 1;
    if (name == "output.weight") {
        axis = 1;
    } else {
        for (const split_rule & r : SPLIT_RULES) {
            bool prefix = r.suffix[0] != '.';
            if (prefix ? name.rfind(r.suffix, 0) == 0 : ends_with(name, r.suffix)) {
                axis = r.axis;
                gran = r.granularity;
                break;
            }
        }
    }
    if (axis < 0) {
        return st; // norms: a full copy on every device
    }
    // Even split: device j ends at ne*(j+1)/n rounded down to the granularity; the last one takes the rest.
    st.axis = (ggml_backend_meta_split_axis) axis;
    const int64_t ne = t->ne[axis];
    int64_t prev = 0;
    for (int j = 0; j < n_dev; j++) {
        int64_t high = j == n_dev - 1 ? ne : ne * (j + 1) / n_dev / gran * gran;
        st.ne[j] = high - prev;
        prev = high;
    }
    return st;
}

// --- model ------------------------------------------------------------------------------------

struct layer {
    ggml_tensor * attn_norm, * wq, * wk, * wv, * wo;
    ggml_tensor * ffn_norm, * w_up, * w_gate, * w_down;
    ggml_tensor * cache_k, * cache_v;
};

struct model {
    ggml_tensor * tok_embd;
    layer layers[N_LAYER];
    ggml_tensor * out_norm, * output;
};

ggml_tensor * named(ggml_tensor * t, const char * fmt, int il) {
    if (il < 0) {
        ggml_set_name(t, fmt);
    } else {
        ggml_format_name(t, fmt, il);
    }
    return t;
}

struct inputs {
    ggml_tensor * tokens, * pos, * k_idxs, * v_idxs, * mask, * logits;
};

// One decode step for one token at position `pos`, as libllama's llama graph with flash attention.
ggml_cgraph * build_graph(ggml_context * ctx, const model & m, inputs & in) {
    ggml_cgraph * gf = ggml_new_graph_custom(ctx, MAX_NODES, false);
    in.tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    in.pos    = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 1);
    in.k_idxs = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, 1);
    in.v_idxs = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, 1);
    in.mask   = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, N_KV, 1);
    for (ggml_tensor * t : { in.tokens, in.pos, in.k_idxs, in.v_idxs, in.mask }) {
        ggml_set_input(t);
    }
    ggml_tensor * mask_f16 = ggml_cast(ctx, in.mask, GGML_TYPE_F16);
    const float kq_scale = 1.0f / sqrtf((float) HEAD_DIM);

    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, in.tokens);
    for (int il = 0; il < N_LAYER; il++) {
        const layer & L = m.layers[il];
        ggml_tensor * cur = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), L.attn_norm);
        ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wq, cur), HEAD_DIM, N_HEAD, 1);
        ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wk, cur), HEAD_DIM, N_HEAD_KV, 1);
        ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, L.wv, cur), HEAD_DIM, N_HEAD_KV, 1);
        q = ggml_rope_ext(ctx, q, in.pos, nullptr, HEAD_DIM, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
        k = ggml_rope_ext(ctx, k, in.pos, nullptr, HEAD_DIM, 0, 4096, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);

        // Store this token's K and V into the cache (2D views of the new rows, as libllama's cpy_k/cpy_v).
        ggml_tensor * k_rows = ggml_view_2d(ctx, k, N_EMBD_KV, 1, k->nb[2], 0);
        ggml_tensor * v_rows = ggml_view_2d(ctx, v, N_EMBD_KV, 1, v->nb[2], 0);
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, L.cache_k, k_rows, in.k_idxs));
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, L.cache_v, v_rows, in.v_idxs));

        // Attend over the first N_KV cache rows: [head_dim, n_head_kv, n_kv] views, heads moved to dim 2.
        const size_t row = ggml_row_size(L.cache_k->type, N_EMBD_KV);
        ggml_tensor * kv_k = ggml_view_4d(ctx, L.cache_k, HEAD_DIM, N_HEAD_KV, N_KV, 1,
                                          ggml_row_size(L.cache_k->type, HEAD_DIM), row, row * KV_SIZE, 0);
        ggml_tensor * kv_v = ggml_view_4d(ctx, L.cache_v, HEAD_DIM, N_HEAD_KV, N_KV, 1,
                                          ggml_row_size(L.cache_v->type, HEAD_DIM), row, row * KV_SIZE, 0);
        ggml_tensor * att = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), ggml_permute(ctx, kv_k, 0, 2, 1, 3),
                                                ggml_permute(ctx, kv_v, 0, 2, 1, 3), mask_f16, kq_scale, 0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
        att = ggml_reshape_2d(ctx, att, HEAD_DIM * N_HEAD, 1);
        ggml_tensor * ffn_in = ggml_add(ctx, ggml_mul_mat(ctx, L.wo, att), x);

        cur = ggml_mul(ctx, ggml_rms_norm(ctx, ffn_in, 1e-5f), L.ffn_norm);
        ggml_tensor * h = ggml_swiglu_split(ctx, ggml_mul_mat(ctx, L.w_gate, cur), ggml_mul_mat(ctx, L.w_up, cur));
        x = ggml_add(ctx, ggml_mul_mat(ctx, L.w_down, h), ffn_in);
    }
    x = ggml_mul(ctx, ggml_rms_norm(ctx, x, 1e-5f), m.out_norm);
    in.logits = ggml_mul_mat(ctx, m.output, x);
    ggml_set_output(in.logits);
    ggml_build_forward_expand(gf, in.logits);
    return gf;
}

// Fills every tensor of a context's buffer with small pseudo-random values (through the buffer's
// set_tensor, so meta tensors are scattered to their devices).
void fill(ggml_context * ctx, unsigned seed) {
    std::vector<uint8_t> bytes;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx); t; t = ggml_get_next_tensor(ctx, t)) {
        const int64_t n = ggml_nelements(t);
        std::vector<float> f(n);
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            f[i] = ((float) (seed >> 8) / (float) (1u << 24) - 0.5f) * 0.2f;
        }
        if (t->type == GGML_TYPE_F16) {
            bytes.resize(n * sizeof(ggml_fp16_t));
            ggml_fp32_to_fp16_row(f.data(), (ggml_fp16_t *) bytes.data(), n);
            ggml_backend_tensor_set(t, bytes.data(), 0, bytes.size());
        } else {
            ggml_backend_tensor_set(t, f.data(), 0, n * sizeof(float));
        }
    }
}

int usage(void) {
    fprintf(stderr, "usage: meta_overhead single-cpu|single-testgpu|meta-testgpu|meta-cpu rebuild|reuse [iterations]\n");
    return 2;
}

} // namespace

int main(int argc, char ** argv) {
    if (argc < 3) {
        return usage();
    }
    const std::string config = argv[1];
    const std::string mode = argv[2];
    const int iters = argc > 3 ? atoi(argv[3]) : 200;
    if ((mode != "rebuild" && mode != "reuse") || iters <= 0) {
        return usage();
    }

    test_device_register(1);
    ggml_backend_dev_t cpu_dev = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_t cpu = ggml_backend_dev_init(cpu_dev, nullptr);
    ggml_backend_cpu_set_n_threads(cpu, 1);

    // The backend that holds the layers (and the output matrix) and the buffer type for them.
    ggml_backend_t main_backend = nullptr;
    static int n_dev = 2; // userdata of the split-state callback: must outlive the meta device
    if (config == "single-cpu") {
        main_backend = cpu;
    } else if (config == "single-testgpu") {
        main_backend = ggml_backend_init_by_name("TESTGPU0", nullptr);
    } else if (config == "meta-testgpu" || config == "meta-cpu") {
        ggml_backend_dev_t simple[2];
        if (config == "meta-testgpu") {
            simple[0] = ggml_backend_dev_by_name("TESTGPU0");
            simple[1] = ggml_backend_dev_by_name("TESTGPU1");
        } else {
            simple[0] = simple[1] = cpu_dev;
        }
        ggml_backend_dev_t meta_dev = ggml_backend_meta_device(simple, 2, weight_split_state, &n_dev);
        main_backend = ggml_backend_dev_init(meta_dev, nullptr);
        // The meta device has no registry, so libllama cannot set threads on it; a CPU simple backend
        // would default to 4 threads. One thread each, like every other backend here.
        for (size_t j = 0; j < ggml_backend_meta_n_backends(main_backend); j++) {
            ggml_backend_t s = ggml_backend_meta_simple_backend(main_backend, j);
            if (ggml_backend_dev_type(ggml_backend_get_device(s)) == GGML_BACKEND_DEVICE_TYPE_CPU) {
                ggml_backend_cpu_set_n_threads(s, 1);
            }
        }
    } else {
        return usage();
    }
    if (!main_backend) {
        fprintf(stderr, "meta_overhead: could not create the backend for %s\n", config.c_str());
        return 1;
    }

    // Weights: token embedding on the CPU, the rest with the main backend (F32); KV cache F16.
    const size_t meta_size = (16 * N_LAYER + 8) * ggml_tensor_overhead();
    ggml_context * ctx_cpu = ggml_init({ meta_size, nullptr, true });
    ggml_context * ctx_w   = ggml_init({ meta_size, nullptr, true });
    ggml_context * ctx_kv  = ggml_init({ meta_size, nullptr, true });
    model m;
    m.tok_embd = named(ggml_new_tensor_2d(ctx_cpu, GGML_TYPE_F32, N_EMBD, N_VOCAB), "token_embd.weight", -1);
    for (int il = 0; il < N_LAYER; il++) {
        layer & L = m.layers[il];
        L.attn_norm = named(ggml_new_tensor_1d(ctx_w, GGML_TYPE_F32, N_EMBD), "blk.%d.attn_norm.weight", il);
        L.wq     = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_EMBD), "blk.%d.attn_q.weight", il);
        L.wk     = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_EMBD_KV), "blk.%d.attn_k.weight", il);
        L.wv     = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_EMBD_KV), "blk.%d.attn_v.weight", il);
        L.wo     = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_EMBD), "blk.%d.attn_output.weight", il);
        L.ffn_norm = named(ggml_new_tensor_1d(ctx_w, GGML_TYPE_F32, N_EMBD), "blk.%d.ffn_norm.weight", il);
        L.w_up   = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_FF), "blk.%d.ffn_up.weight", il);
        L.w_gate = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_FF), "blk.%d.ffn_gate.weight", il);
        L.w_down = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_FF, N_EMBD), "blk.%d.ffn_down.weight", il);
        L.cache_k = named(ggml_new_tensor_2d(ctx_kv, GGML_TYPE_F16, N_EMBD_KV, KV_SIZE), "cache_k_l%d", il);
        L.cache_v = named(ggml_new_tensor_2d(ctx_kv, GGML_TYPE_F16, N_EMBD_KV, KV_SIZE), "cache_v_l%d", il);
    }
    m.out_norm = named(ggml_new_tensor_1d(ctx_w, GGML_TYPE_F32, N_EMBD), "output_norm.weight", -1);
    m.output   = named(ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, N_EMBD, N_VOCAB), "output.weight", -1);

    // For a meta buffer type this dispatches to the meta allocator (per-device slices).
    ggml_backend_buffer_type_t main_buft = ggml_backend_get_default_buffer_type(main_backend);
    ggml_backend_buffer_t buf_cpu = ggml_backend_alloc_ctx_tensors_from_buft(ctx_cpu, ggml_backend_cpu_buffer_type());
    ggml_backend_buffer_t buf_w   = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, main_buft);
    ggml_backend_buffer_t buf_kv  = ggml_backend_alloc_ctx_tensors_from_buft(ctx_kv, main_buft);
    if (!buf_cpu || !buf_w || !buf_kv) {
        fprintf(stderr, "meta_overhead: weight allocation failed\n");
        return 1;
    }
    ggml_backend_buffer_set_usage(buf_cpu, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    ggml_backend_buffer_set_usage(buf_w, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    fill(ctx_cpu, 1);
    fill(ctx_w, 2);
    ggml_backend_buffer_clear(buf_kv, 0);

    // Scheduler over {main, CPU} like libllama (the CPU last; no pipeline parallelism, op offload on).
    std::vector<ggml_backend_t> backends = { main_backend };
    if (main_backend != cpu) {
        backends.push_back(cpu);
    }
    ggml_backend_sched_t sched =
        ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), MAX_NODES, false, true);

    const size_t graph_mem = MAX_NODES * ggml_tensor_overhead() + ggml_graph_overhead_custom(MAX_NODES, false);
    std::vector<float> mask(N_KV), logits(N_VOCAB);
    std::vector<double> t(iters);
    int n_nodes = 0, n_splits = 0;
    ggml_context * ctx = nullptr;
    ggml_cgraph * gf = nullptr;
    inputs in{};
    double checksum = 0;
    for (int i = -10; i < iters; i++) { // 10 warm-up steps
        const int32_t pos = (i + 10) % N_KV;
        const double t0 = now_us();
        if (mode == "rebuild" || !gf) {
            if (ctx) {
                ggml_free(ctx);
            }
            ctx = ggml_init({ graph_mem, nullptr, true });
            gf = build_graph(ctx, m, in);
            ggml_backend_sched_reset(sched);
            if (!ggml_backend_sched_alloc_graph(sched, gf)) {
                fprintf(stderr, "meta_overhead: graph allocation failed\n");
                return 1;
            }
        }
        const int32_t tok = pos % N_VOCAB;
        const int64_t idx = pos;
        for (int j = 0; j < N_KV; j++) {
            mask[j] = j <= pos ? 0.0f : -INFINITY;
        }
        ggml_backend_tensor_set(in.tokens, &tok, 0, sizeof(tok));
        ggml_backend_tensor_set(in.pos, &pos, 0, sizeof(pos));
        ggml_backend_tensor_set(in.k_idxs, &idx, 0, sizeof(idx));
        ggml_backend_tensor_set(in.v_idxs, &idx, 0, sizeof(idx));
        ggml_backend_tensor_set(in.mask, mask.data(), 0, mask.size() * sizeof(float));
        if (ggml_backend_sched_graph_compute(sched, gf) != GGML_STATUS_SUCCESS) {
            fprintf(stderr, "meta_overhead: compute failed\n");
            return 1;
        }
        ggml_backend_tensor_get(in.logits, logits.data(), 0, logits.size() * sizeof(float));
        const double t1 = now_us();
        if (i >= 0) {
            t[i] = t1 - t0;
        }
        checksum += logits[0];
        n_nodes = ggml_graph_n_nodes(gf);
        n_splits = ggml_backend_sched_get_n_splits(sched);
    }
    std::sort(t.begin(), t.end());
    printf("meta_overhead config=%s mode=%s nodes=%d splits=%d median_us=%.1f min_us=%.1f max_us=%.1f checksum=%.6g\n",
           config.c_str(), mode.c_str(), n_nodes, n_splits, t[iters / 2], t[0], t[iters - 1], checksum);

    ggml_free(ctx);
    ggml_backend_sched_free(sched);
    ggml_backend_buffer_free(buf_kv);
    ggml_backend_buffer_free(buf_w);
    ggml_backend_buffer_free(buf_cpu);
    ggml_free(ctx_kv);
    ggml_free(ctx_w);
    ggml_free(ctx_cpu);
    if (main_backend != cpu) {
        ggml_backend_free(main_backend);
    }
    ggml_backend_free(cpu);
    return 0;
}
