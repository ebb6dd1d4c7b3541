// meta_ops: op-level tests of the meta device (tensor parallelism, ggml-ext.h).
//
//   meta_ops <cases> <n_devices> [--simple cpu|tgpu] [--direct] [--out FILE] [--against FILE]
//
// Each case builds a small libllama-shaped graph twice: once on one plain CPU backend (the
// reference) and once with its weights in a meta buffer over N "simple" devices (the CPU device
// N times, or TESTGPU0,TESTGPU1 from test_device.c), computed the way libllama computes it: a
// scheduler over {meta backend, CPU backend}. `--direct` computes on the meta backend alone
// (graph allocated with ggml_gallocr on the meta buffer type). The split of every weight comes
// from the case's table (axis + extents per device, optionally in segments); anything not in the
// table is MIRRORED. The outputs are compared element by element; see the tolerance of each case.
//
// Output: one line per case, `case <name> n=<N>: max_abs=<x> tol=<t> PASS|FAIL`; exit status 1 on
// any FAIL. `--out FILE` writes the meta outputs (raw F32, cases in order) for a differential run;
// `--against FILE` compares this run's meta outputs with such a file (another build's), per case
// with the same tolerance. <cases>: comma-separated case names, `all`, and `-name` to leave one
// out again (e.g. `all,-moe`); without arguments the program lists them. Cases whose name starts with `abort_` are not part of `all`: each must
// stop in the meta backend (an op/split combination it does not support); if it completes, the
// program says so and exits 1.

#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "meta_split_state.h"
#include "ggml.h"
#include "test_device.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

// libllama-like shapes: n_embd, head size, heads, KV heads (GQA 2:1), n_ff, tokens (5: not a
// multiple of any N), KV cache size, vocabulary, experts, experts used per token, expert n_ff.
constexpr int64_t E = 64, D = 16, H = 4, HKV = 2, F = 96, T = 5, NCTX = 8, V = 10;
constexpr int64_t NEXP = 4, NUSED = 3, FE = 48;
constexpr int GRAPH_SIZE = 512;

// Relative tolerance for results that went through a PARTIAL reduction. In F32 each device sums
// its share of the dot product and the reduction adds the N partial sums, a different order from
// the single dot product of the reference: each output differs by a few ulp times the reduction
// length (48..96 here: a bound of ~1e-5 relative to values of order 1; 2e-5 leaves a margin of 2).
// Measured with upstream's meta, N = 2..4: at most 6e-8 absolute. A lost or doubled summand shows
// as ~1e-2 (upstream's N = 3 AllReduce in mlp_reduce_rows: 5.4e-3).
constexpr double TOL_PARTIAL = 2e-5;
// Bit identity: rows/heads split without PARTIAL run the very same kernels on the same inputs per
// output element (a slice of a matmul computes each dot product exactly as the full one does), so
// the gathered result must equal the reference bit for bit (measured: identical).
constexpr double BITEXACT = 0.0;
// Tokens split: a device that gets 1 column runs the CPU's matrix-vector kernel instead of the
// batched one (another summation order), so a matmul over a token split differs from the
// reference by a few ulp times the dot length (64): same bound as TOL_PARTIAL (measured 1.5e-8).
constexpr double TOL_KERNEL = 2e-5;

using Extents = std::vector<int64_t>;

// Extents of `total` over n devices in proportions `w` (libllama's scheme): cumulative boundaries
// rounded down to a multiple of `gran`, the last device takes the rest.
Extents split_by(int64_t total, int64_t gran, const std::vector<int> & w) {
    int64_t sum_w = 0;
    for (int x : w) sum_w += x;
    Extents ext;
    int64_t prev = 0, acc = 0;
    for (size_t j = 0; j < w.size(); j++) {
        acc += w[j];
        int64_t high = j + 1 == w.size() ? total : (total * acc / sum_w) / gran * gran;
        ext.push_back(high - prev);
        prev = high;
    }
    return ext;
}
// Equal weights: what libllama does by default; with whole-head granularity zero slices appear
// (64 in groups of 32 over 3 devices: {0,32,32}; over 4: {0,32,0,32}).
Extents even(int n, int64_t total, int64_t gran) { return split_by(total, gran, std::vector<int>(n, 1)); }
// Uneven on purpose: 64 in units of 16 → {48,16}, {0,32,32}, {16,0,32,16}.
Extents uneven(int n, int64_t total, int64_t gran) {
    static const std::vector<int> w[5] = { {}, { 1 }, { 3, 1 }, { 0, 1, 1 }, { 1, 0, 2, 1 } };
    return n <= 4 ? split_by(total, gran, w[n]) : even(n, total, gran);
}
Extents scaled(Extents e, int64_t k) {
    for (auto & x : e) x *= k;
    return e;
}

// --- the graph under construction ------------------------------------------------------------

using SplitTable = std::map<std::string, ggml_backend_meta_split_state>;

ggml_backend_meta_split_state mirrored() { return meta_split_state_mirrored(); }

// The split-state callback of the meta device: the weight's name looked up in the case's table.
ggml_backend_meta_split_state table_split(const ggml_tensor * t, void * ud) {
    const SplitTable & table = *static_cast<const SplitTable *>(ud);
    auto it = table.find(ggml_get_name(t));
    return it == table.end() ? mirrored() : it->second;
}

uint64_t name_hash(const char * s) { // FNV-1a
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (uint8_t) *s) * 1099511628211ull;
    return h;
}
// Deterministic pseudo-random values in [-scale, scale), seeded by the tensor's name.
std::vector<float> random_values(const char * name, size_t n, float scale) {
    uint64_t s = name_hash(name) | 1;
    std::vector<float> v(n);
    for (auto & x : v) {
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        double u = (double) ((s * 2685821657736338717ull) >> 40) / (double) (1ull << 24);
        x = (float) ((2.0 * u - 1.0) * scale);
    }
    return v;
}
std::vector<uint8_t> as_bytes(const std::vector<float> & v, ggml_type type) {
    std::vector<uint8_t> b(v.size() * ggml_type_size(type));
    if (type == GGML_TYPE_F32) memcpy(b.data(), v.data(), b.size());
    else if (type == GGML_TYPE_F16) ggml_fp32_to_fp16_row(v.data(), (ggml_fp16_t *) b.data(), (int64_t) v.size());
    else { fprintf(stderr, "meta_ops: unsupported data type %s\n", ggml_type_name(type)); exit(2); }
    return b;
}

// What a case builds its graph with: weights (ctx_w), caches (ctx_kv, zero-initialised),
// compute tensors and inputs (ctx); the split table is only used by the meta run.
struct Env {
    int n;
    ggml_context * ctx_w;
    ggml_context * ctx_kv;
    ggml_context * ctx;
    ggml_cgraph * gf;
    SplitTable splits;
    struct Input { ggml_tensor * t; std::vector<uint8_t> data; };
    std::vector<Input> inputs;
    // Nodes the scheduler of the meta run must give the CPU backend (another backend's part
    // of the graph, as libllama's CPU-side ops are).
    std::vector<ggml_tensor *> on_cpu;
    // Outputs compared after the case's own (in this order), last in the graph.
    std::vector<ggml_tensor *> also;
    // What a second step changes (see case 10): the RMS norms' epsilon, and whether the
    // reduced sum of the MLP is also read on the CPU backend.
    float norm_eps = 1e-5f;
    bool read_sum_on_cpu = false;
    bool read_norm_on_cpu = false;

    explicit Env(int n_devices) : n(n_devices) {
        ggml_init_params meta_only = { ggml_tensor_overhead() * 64, nullptr, true };
        ctx_w = ggml_init(meta_only);
        ctx_kv = ggml_init(meta_only);
        ggml_init_params p = { ggml_tensor_overhead() * GRAPH_SIZE + ggml_graph_overhead_custom(GRAPH_SIZE, false), nullptr, true };
        ctx = ggml_init(p);
        gf = ggml_new_graph_custom(ctx, GRAPH_SIZE, false);
    }
    ~Env() { ggml_free(ctx); ggml_free(ctx_kv); ggml_free(ctx_w); }
    // Starts the graph again in the same memory, as libllama builds each step's graph: the
    // same tensors made in the same order get the same addresses. Weights and caches stay.
    void restart() {
        ggml_reset(ctx);
        inputs.clear();
        on_cpu.clear();
        also.clear();
        gf = ggml_new_graph_custom(ctx, GRAPH_SIZE, false);
    }

    static ggml_tensor * named(ggml_tensor * t, const char * name) { ggml_set_name(t, name); return t; }
    // (a graph built again finds its weights and caches by name)
    ggml_tensor * weight(const char * name, int64_t ne0, int64_t ne1 = 1, int64_t ne2 = 1, ggml_type type = GGML_TYPE_F32) {
        if (ggml_tensor * t = ggml_get_tensor(ctx_w, name)) return t;
        return named(ggml_new_tensor_3d(ctx_w, type, ne0, ne1, ne2), name);
    }
    ggml_tensor * cache(const char * name, int64_t ne0, int64_t ne1) {
        if (ggml_tensor * t = ggml_get_tensor(ctx_kv, name)) return t;
        return named(ggml_new_tensor_3d(ctx_kv, GGML_TYPE_F16, ne0, ne1, 1), name);
    }
    ggml_tensor * input(ggml_tensor * t, const char * name, std::vector<uint8_t> data) {
        ggml_set_input(named(t, name));
        inputs.push_back({ t, std::move(data) });
        return t;
    }
    // An F32 activation [ne0, ne1] with random values.
    ggml_tensor * act(const char * name, int64_t ne0, int64_t ne1) {
        return input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1), name,
                     as_bytes(random_values(name, (size_t) (ne0 * ne1), 1.0f), GGML_TYPE_F32));
    }
    // An index vector (I32 positions/row ids or I64 cache slots).
    ggml_tensor * index(const char * name, ggml_type type, const std::vector<int64_t> & vals) {
        std::vector<uint8_t> b(vals.size() * ggml_type_size(type));
        for (size_t i = 0; i < vals.size(); i++) {
            if (type == GGML_TYPE_I32) ((int32_t *) b.data())[i] = (int32_t) vals[i];
            else ((int64_t *) b.data())[i] = vals[i];
        }
        return input(ggml_new_tensor_1d(ctx, type, (int64_t) vals.size()), name, b);
    }
    // A causal F32 mask [n_kv, T] for tokens stored at slots 0..T-1: token t sees slots <= t.
    ggml_tensor * causal_mask(const char * name, int64_t n_kv) {
        std::vector<float> m((size_t) (n_kv * T));
        for (int64_t t = 0; t < T; t++)
            for (int64_t s = 0; s < n_kv; s++) m[(size_t) (t * n_kv + s)] = s <= t ? 0.0f : -INFINITY;
        return input(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_kv, T), name, as_bytes(m, GGML_TYPE_F32));
    }
    // The split of a weight/cache along `axis`, one extent list per segment.
    void split(const char * name, int axis, const std::vector<Extents> & segments) {
        ggml_backend_meta_split_state s = mirrored();
        s.axis = (ggml_backend_meta_split_axis) axis;
        s.n_segments = (uint32_t) segments.size();
        for (size_t k = 0; k < segments.size(); k++)
            for (int j = 0; j < n; j++) s.ne[k * n + j] = segments[k][j];
        splits[name] = s;
    }
    void split(const char * name, int axis, const Extents & e) { split(name, axis, std::vector<Extents>{ e }); }
    void partial(const char * name) {
        ggml_backend_meta_split_state s = mirrored();
        s.axis = GGML_BACKEND_SPLIT_AXIS_PARTIAL;
        splits[name] = s;
    }
    void expand(ggml_tensor * t) { ggml_build_forward_expand(gf, t); }
};

ggml_tensor * mm(Env & e, ggml_tensor * w, ggml_tensor * x) { return ggml_mul_mat(e.ctx, w, x); }
ggml_tensor * rope(Env & e, ggml_tensor * x, ggml_tensor * pos) {
    return ggml_rope_ext(e.ctx, x, pos, nullptr, (int) D, 0, 0, 10000.0f, 1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
}
ggml_tensor * positions(Env & e) { return e.index("inp_pos", GGML_TYPE_I32, { 0, 1, 2, 3, 4 }); }
// rms_norm × a MIRRORED norm weight, as libllama applies before attention and FFN. It also puts a
// MIRRORED weight into every device's share of the weights (upstream's weight allocation aborts
// when a device's share is empty: only mul_mat_rows keeps that situation, on purpose).
ggml_tensor * norm(Env & e, ggml_tensor * x, const char * name) {
    return ggml_mul(e.ctx, ggml_rms_norm(e.ctx, x, e.norm_eps), e.weight(name, E));
}

// --- cases -------------------------------------------------------------------------------------

// 1. Row split: W [n_in, n_out] split along ne[1] (uneven, zero slice for N=3,4) × x MIRRORED →
//    AXIS_0, gathered by get_tensor. Bit-exact. For N=3,4 device 0 holds no weight bytes at all.
ggml_tensor * c_mul_mat_rows(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 1, uneven(e.n, F, 1));
    return mm(e, w, e.act("x", E, T));
}
// 1b. The same with F16 weights and an even split. Bit-exact.
ggml_tensor * c_mul_mat_rows_f16(Env & e) {
    ggml_tensor * w = e.weight("w", E, F, 1, GGML_TYPE_F16);
    e.split("w", 1, even(e.n, F, 1));
    return mm(e, w, e.act("x", E, T));
}
// 2. MLP: gate/up AXIS_1 → AXIS_0, silu * up (AXIS_0 ⊙ AXIS_0), down AXIS_0 × AXIS_0 → PARTIAL →
//    AllReduce → + MIRRORED residual → MIRRORED. Tolerance TOL_PARTIAL (reduction length n_ff=96).
ggml_tensor * c_mlp_partial(Env & e) {
    ggml_tensor * wg = e.weight("blk.0.ffn_gate.weight", E, F);
    ggml_tensor * wu = e.weight("blk.0.ffn_up.weight", E, F);
    ggml_tensor * wd = e.weight("blk.0.ffn_down.weight", F, E);
    const Extents ff = uneven(e.n, F, 1);
    e.split("blk.0.ffn_gate.weight", 1, ff);
    e.split("blk.0.ffn_up.weight", 1, ff);
    e.split("blk.0.ffn_down.weight", 0, ff);
    ggml_tensor * x = e.act("x", E, T), * xn = norm(e, x, "blk.0.ffn_norm.weight");
    ggml_tensor * h = ggml_mul(e.ctx, ggml_silu(e.ctx, mm(e, wg, xn)), mm(e, wu, xn));
    return ggml_add(e.ctx, mm(e, wd, h), x);
}
// 2b. The reduced MLP output feeds a row-split matmul (AXIS_1 weight, even split): every device
//     computes its rows from its own copy of the reduced sum, so an AllReduce that leaves any
//     device without the full sum shows up here (upstream's fallback for N = 3). TOL_PARTIAL.
ggml_tensor * c_mlp_reduce_rows(Env & e) {
    ggml_tensor * wu = e.weight("blk.0.ffn_up.weight", E, F), * wd = e.weight("blk.0.ffn_down.weight", F, E);
    ggml_tensor * wo = e.weight("output.weight", E, V);
    const Extents ff = even(e.n, F, 1);
    e.split("blk.0.ffn_up.weight", 1, ff);
    e.split("blk.0.ffn_down.weight", 0, ff);
    e.split("output.weight", 1, even(e.n, V, 1));
    ggml_tensor * x = e.act("x", E, T);
    ggml_tensor * h = ggml_silu(e.ctx, mm(e, wu, norm(e, x, "blk.0.ffn_norm.weight")));
    return mm(e, wo, ggml_add(e.ctx, mm(e, wd, h), x));
}
// 3. Element-wise ops on equal splits and broadcasts: AXIS_0 + AXIS_0 bias [n,1] (like a Q bias),
//    × MIRRORED per-token scale [1,T] (ne[0]==1 broadcast), scale, − another AXIS_0. Bit-exact.
// A whole (MIRRORED) operand meets split ones: each device reads its slice of it. W split
// along its reduction dim with an unsplit x (each device multiplies its rows of x: partial sums),
// and a row-split product plus a full-size unsplit y (each device adds its rows of y).
ggml_tensor * c_mul_mat_whole_input(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 0, uneven(e.n, E, 1));
    return mm(e, w, e.act("x", E, T));
}
ggml_tensor * c_add_whole_operand(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 1, uneven(e.n, F, 1));
    return ggml_add(e.ctx, mm(e, w, e.act("x", E, T)), e.act("y", F, T));
}
ggml_tensor * c_bin_bcast(Env & e) {
    const Extents ff = uneven(e.n, F, 1);
    ggml_tensor * w1 = e.weight("w1", E, F), * w2 = e.weight("w2", E, F), * b = e.weight("b1", F);
    ggml_tensor * s = e.weight("tok_scale", 1, T);
    e.split("w1", 1, ff);
    e.split("w2", 1, ff);
    e.split("b1", 0, ff);
    ggml_tensor * x = e.act("x", E, T);
    ggml_tensor * a = ggml_add(e.ctx, mm(e, w1, x), b);
    a = ggml_scale(e.ctx, ggml_mul(e.ctx, a, s), 0.5f);
    return ggml_sub(e.ctx, a, mm(e, w2, x));
}
// 4. rms_norm of a MIRRORED activation × MIRRORED norm weight, + MIRRORED. Bit-exact.
ggml_tensor * c_rms_norm(Env & e) {
    ggml_tensor * nw = e.weight("blk.0.attn_norm.weight", E);
    ggml_tensor * x = e.act("x", E, T);
    return ggml_add(e.ctx, ggml_mul(e.ctx, ggml_rms_norm(e.ctx, x, 1e-5f), nw), x);
}
// 4b. Tokens split: an activation-shaped weight split along ne[1] (tokens, uneven), rms_norm
//     (per row: allowed on AXIS_1), × MIRRORED norm weight, MIRRORED W × AXIS_1 → AXIS_1.
//     TOL_KERNEL (N=4 gives device 0 a single token).
ggml_tensor * c_rms_norm_tokens(Env & e) {
    ggml_tensor * a = e.weight("tok_act", E, T), * nw = e.weight("norm", E), * w = e.weight("w_mirrored", E, E);
    e.split("tok_act", 1, uneven(e.n, T, 1));
    return mm(e, w, ggml_mul(e.ctx, ggml_rms_norm(e.ctx, a, 1e-5f), nw));
}
// 5. Rope on heads: Wq AXIS_1 in whole heads (uneven) → reshape [D, H, T] → AXIS_1, positions
//    MIRRORED (I32). Bit-exact.
ggml_tensor * c_rope(Env & e) {
    ggml_tensor * wq = e.weight("blk.0.attn_q.weight", E, H * D);
    e.split("blk.0.attn_q.weight", 1, uneven(e.n, H * D, D));
    ggml_tensor * xn = norm(e, e.act("x", E, T), "blk.0.attn_norm.weight");
    return rope(e, ggml_reshape_3d(e.ctx, mm(e, wq, xn), D, H, T), positions(e));
}
// 6. soft_max over rows of a heads-split tensor (no mask: a MIRRORED mask with a split input is
//    rejected, see abort_soft_max_mask). Bit-exact.
ggml_tensor * c_soft_max_heads(Env & e) {
    ggml_tensor * wq = e.weight("blk.0.attn_q.weight", E, H * D);
    e.split("blk.0.attn_q.weight", 1, uneven(e.n, H * D, D));
    ggml_tensor * xn = norm(e, e.act("x", E, T), "blk.0.attn_norm.weight");
    return ggml_soft_max(e.ctx, ggml_reshape_3d(e.ctx, mm(e, wq, xn), D, H, T));
}
// 6b. soft_max_ext with scale and a MIRRORED causal mask on MIRRORED scores. Bit-exact.
ggml_tensor * c_soft_max_mask(Env & e) {
    ggml_tensor * w = e.weight("w_scores", E, NCTX);
    ggml_tensor * s = mm(e, w, e.act("x", E, T));
    return ggml_soft_max_ext(e.ctx, s, e.causal_mask("kq_mask", NCTX), 0.25f, 0.0f);
}
// 7. get_rows from an AXIS_0-split table (uneven) with MIRRORED I32 ids → AXIS_0, then × a
//    MIRRORED per-token scale [1,T]. Bit-exact.
ggml_tensor * c_get_rows_split(Env & e) {
    ggml_tensor * tab = e.weight("table", E, V), * s = e.weight("tok_scale", 1, T);
    e.split("table", 0, uneven(e.n, E, 1));
    return ggml_mul(e.ctx, ggml_get_rows(e.ctx, tab, e.index("ids", GGML_TYPE_I32, { 3, 0, 9, 3, 7 })), s);
}
// 7b. get_rows from a MIRRORED table (token embeddings), then a row-split matmul. Bit-exact.
ggml_tensor * c_get_rows_mirrored(Env & e) {
    ggml_tensor * tab = e.weight("token_embd.weight", E, V), * w = e.weight("w", E, F);
    e.split("w", 1, uneven(e.n, F, 1));
    return mm(e, w, ggml_get_rows(e.ctx, tab, e.index("ids", GGML_TYPE_I32, { 3, 0, 9, 3, 7 })));
}

// Attention shared by the flash-attention cases, the way libllama builds it (build_attn_mha):
// q/k/v [D, heads, T] → permute(0,2,1,3) → F16 K/V → flash_attn_ext with an F16 causal mask →
// [D, H, T] → reshape [D*H, T] → Wo (AXIS_0) → PARTIAL → AllReduce → + residual x.
struct AttnSplit { Extents q, kv; };
// Whole KV heads per device (libllama: granularity of a GQA group), e.g. {1,1}, {0,1,1}, {0,1,0,1}.
AttnSplit attn_split(int n) {
    Extents kvh = even(n, HKV, 1);
    return { scaled(kvh, (H / HKV) * D), scaled(kvh, D) };
}
ggml_tensor * attention(Env & e, ggml_tensor * x, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                        const AttnSplit & sp) {
    ggml_tensor * wo = e.weight("blk.0.attn_output.weight", H * D, E);
    e.split("blk.0.attn_output.weight", 0, sp.q);
    q = ggml_permute(e.ctx, q, 0, 2, 1, 3);
    k = ggml_permute(e.ctx, k, 0, 2, 1, 3);
    v = ggml_permute(e.ctx, v, 0, 2, 1, 3);
    if (k->type == GGML_TYPE_F32) k = ggml_cast(e.ctx, k, GGML_TYPE_F16);
    if (v->type == GGML_TYPE_F32) v = ggml_cast(e.ctx, v, GGML_TYPE_F16);
    ggml_tensor * fa = ggml_flash_attn_ext(e.ctx, q, k, v, ggml_cast(e.ctx, mask, GGML_TYPE_F16), 1.0f / sqrtf((float) D), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(fa, GGML_PREC_F32);
    ggml_tensor * cur = mm(e, wo, ggml_reshape_2d(e.ctx, fa, D * H, T));
    return ggml_add(e.ctx, cur, x);
}
// Q, K, V projections with AXIS_1 weights in whole heads; q and k roped.
void qkv_proj(Env & e, ggml_tensor * x, ggml_tensor * pos, const AttnSplit & sp, ggml_tensor ** q, ggml_tensor ** k, ggml_tensor ** v) {
    ggml_tensor * wq = e.weight("blk.0.attn_q.weight", E, H * D);
    ggml_tensor * wk = e.weight("blk.0.attn_k.weight", E, HKV * D), * wv = e.weight("blk.0.attn_v.weight", E, HKV * D);
    e.split("blk.0.attn_q.weight", 1, sp.q);
    e.split("blk.0.attn_k.weight", 1, sp.kv);
    e.split("blk.0.attn_v.weight", 1, sp.kv);
    x = norm(e, x, "blk.0.attn_norm.weight");
    *q = rope(e, ggml_reshape_3d(e.ctx, mm(e, wq, x), D, H, T), pos);
    *k = rope(e, ggml_reshape_3d(e.ctx, mm(e, wk, x), D, HKV, T), pos);
    *v = ggml_reshape_3d(e.ctx, mm(e, wv, x), D, HKV, T);
}
// 8. Flash attention on heads (GQA 4:2), K/V straight from the projections. TOL_PARTIAL (Wo).
ggml_tensor * c_flash_attn(Env & e) {
    const AttnSplit sp = attn_split(e.n);
    ggml_tensor * x = e.act("x", E, T), * q, * k, * v;
    qkv_proj(e, x, positions(e), sp, &q, &k, &v);
    return attention(e, x, q, k, v, e.causal_mask("kq_mask", T), sp);
}
// 8b. The same through a KV cache, as libllama: cache_k_l0/cache_v_l0 [D*HKV, NCTX] F16 allocated
//     through the meta buffer type (AXIS_0, whole KV heads), written with set_rows at slots 0..T-1
//     (I64), read through 4D views of all NCTX slots; unused slots are masked. TOL_PARTIAL (Wo).
//     This is the path upstream's meta crashes on with CPU simple devices (set_rows on a host view).
ggml_tensor * c_flash_attn_kv(Env & e) {
    const AttnSplit sp = attn_split(e.n);
    ggml_tensor * ck = e.cache("cache_k_l0", D * HKV, NCTX), * cv = e.cache("cache_v_l0", D * HKV, NCTX);
    e.split("cache_k_l0", 0, sp.kv);
    e.split("cache_v_l0", 0, sp.kv);
    ggml_tensor * x = e.act("x", E, T), * q, * k, * v;
    qkv_proj(e, x, positions(e), sp, &q, &k, &v);
    ggml_tensor * slots = e.index("k_idxs", GGML_TYPE_I64, { 0, 1, 2, 3, 4 });
    e.expand(ggml_set_rows(e.ctx, ck, ggml_view_2d(e.ctx, k, D * HKV, T, k->nb[2], 0), slots));
    e.expand(ggml_set_rows(e.ctx, cv, ggml_view_2d(e.ctx, v, D * HKV, T, v->nb[2], 0), slots));
    auto kv_view = [&](ggml_tensor * c) {
        const size_t row = ggml_row_size(c->type, D);
        return ggml_view_4d(e.ctx, c, D, HKV, NCTX, 1, row, row * HKV, row * HKV * NCTX, 0);
    };
    return attention(e, x, q, kv_view(ck), kv_view(cv), e.causal_mask("kq_mask", NCTX), sp);
}
// 8c. Fused QKV weight split in 3 segments (Q, K, V each split over the devices), q/k/v as views
//     of the fused projection (view offsets inside the split), then attention. TOL_PARTIAL (Wo).
ggml_tensor * c_qkv_segments(Env & e) {
    const AttnSplit sp = attn_split(e.n);
    ggml_tensor * wqkv = e.weight("blk.0.attn_qkv.weight", E, (H + 2 * HKV) * D);
    e.split("blk.0.attn_qkv.weight", 1, std::vector<Extents>{ sp.q, sp.kv, sp.kv });
    ggml_tensor * x = e.act("x", E, T), * pos = positions(e);
    ggml_tensor * qkv = mm(e, wqkv, norm(e, x, "blk.0.attn_norm.weight"));
    const size_t f = sizeof(float);
    ggml_tensor * q = ggml_view_3d(e.ctx, qkv, D, H, T, D * f, qkv->nb[1], 0);
    ggml_tensor * k = ggml_view_3d(e.ctx, qkv, D, HKV, T, D * f, qkv->nb[1], H * D * f);
    ggml_tensor * v = ggml_view_3d(e.ctx, qkv, D, HKV, T, D * f, qkv->nb[1], (H + HKV) * D * f);
    return attention(e, x, rope(e, q, pos), rope(e, k, pos), v, e.causal_mask("kq_mask", T), sp);
}

// 9. MoE as libllama's build_moe_ffn emits it: router (MIRRORED) → soft_max → argsort top-k ids →
//    weights get_rows; gate/up experts AXIS_1 and down AXIS_0 ([n_in, n_out, n_expert]) with
//    mul_mat_id; swiglu; × router weights; one view per used expert, then a chain of adds (the
//    pattern the meta backend recognises to reduce after the expert sum). Optionally a PARTIAL
//    down bias through add_id (libllama's ffn_down_exps.bias). TOL_PARTIAL (length FE=48).
//    The expert ids are a non-contiguous view (argsort + view); over TESTGPU devices, which refuse
//    GET_ROWS, the scheduler copies that view out of the meta backend to the CPU, which upstream's
//    meta get_tensor refuses (contiguous tensors only): `cont_ids` makes them contiguous first.
ggml_tensor * moe(Env & e, bool bias, bool cont_ids) {
    ggml_tensor * x = norm(e, e.act("x", E, T), "blk.0.ffn_norm.weight");
    ggml_tensor * wr = e.weight("blk.0.ffn_gate_inp.weight", E, NEXP);
    ggml_tensor * up = e.weight("blk.0.ffn_up_exps.weight", E, FE, NEXP), * gate = e.weight("blk.0.ffn_gate_exps.weight", E, FE, NEXP);
    ggml_tensor * down = e.weight("blk.0.ffn_down_exps.weight", FE, E, NEXP);
    const Extents ff = uneven(e.n, FE, 1);
    e.split("blk.0.ffn_up_exps.weight", 1, ff);
    e.split("blk.0.ffn_gate_exps.weight", 1, ff);
    e.split("blk.0.ffn_down_exps.weight", 0, ff);

    ggml_tensor * probs = ggml_soft_max(e.ctx, mm(e, wr, x));                        // [NEXP, T]
    ggml_tensor * sel = ggml_argsort_top_k(e.ctx, probs, (int) NUSED);               // [NUSED, T]
    if (cont_ids) sel = ggml_cont(e.ctx, sel);
    ggml_tensor * weights = ggml_get_rows(e.ctx, ggml_reshape_3d(e.ctx, probs, 1, NEXP, T), sel); // [1, NUSED, T]
    e.expand(weights);
    ggml_tensor * cur = ggml_reshape_3d(e.ctx, x, E, 1, T);
    ggml_tensor * h = ggml_swiglu_split(e.ctx, ggml_mul_mat_id(e.ctx, gate, cur, sel), ggml_mul_mat_id(e.ctx, up, cur, sel));
    ggml_tensor * ex = ggml_mul_mat_id(e.ctx, down, h, sel);                         // [E, NUSED, T]
    if (bias) {
        ggml_tensor * b = e.weight("blk.0.ffn_down_exps.bias", E, NEXP);
        e.partial("blk.0.ffn_down_exps.bias");
        ex = ggml_add_id(e.ctx, ex, b, sel);
    }
    ex = ggml_mul(e.ctx, ex, weights);
    e.expand(ex);
    ggml_tensor * views[NUSED];
    for (int64_t i = 0; i < NUSED; i++) {
        views[i] = ggml_view_2d(e.ctx, ex, E, T, ex->nb[2], (size_t) i * ex->nb[1]);
        e.expand(views[i]);
    }
    ggml_tensor * out = views[0];
    for (int64_t i = 1; i < NUSED; i++) {
        out = ggml_add(e.ctx, out, views[i]);
        e.expand(out);
    }
    return out;
}
ggml_tensor * c_moe(Env & e) { return moe(e, false, false); }
ggml_tensor * c_moe_bias(Env & e) { return moe(e, true, false); }
ggml_tensor * c_moe_cont_ids(Env & e) { return moe(e, false, true); }
ggml_tensor * c_moe_bias_cont_ids(Env & e) { return moe(e, true, true); }

// 10. Second steps. The graph is computed, built again in the same memory with one change (every
//     node of the first graph at its address again, as libllama's next step's graph) and computed
//     again; both steps' results are compared. The graph: the MLP's reduced output + residual,
//     then the next layer's norm, which an AllReduce can compute along with the sum (a fused
//     epilogue). TOL_PARTIAL.
ggml_tensor * c_mlp_then_norm(Env & e) {
    ggml_tensor * wd = e.weight("blk.0.ffn_down.weight", F, E);
    ggml_tensor * out = norm(e, c_mlp_partial(e), "blk.1.attn_norm.weight");
    if (e.read_sum_on_cpu) { // the down projection's sum, read by the CPU backend
        ggml_tensor * add = out->src[0]->src[0];
        ggml_tensor * sum = add->src[0];
        if (add->op != GGML_OP_ADD || sum->op != GGML_OP_MUL_MAT || sum->src[0] != wd) {
            fprintf(stderr, "meta_ops: mlp_then_norm: no reduced sum\n");
            exit(2);
        }
        ggml_tensor * read = ggml_scale(e.ctx, sum, 2.0f);
        e.on_cpu.push_back(read);
        e.also.push_back(read);
    }
    if (e.read_norm_on_cpu) { // the RMS norm behind the cut, read by the CPU backend
        ggml_tensor * nrm = out->src[0];
        if (nrm->op != GGML_OP_RMS_NORM) {
            fprintf(stderr, "meta_ops: mlp_then_norm: no RMS norm\n");
            exit(2);
        }
        ggml_tensor * read = ggml_scale(e.ctx, nrm, 2.0f);
        e.on_cpu.push_back(read);
        e.also.push_back(read);
    }
    return out;
}
// 10a. Another epsilon for the RMS norms (an op parameter). Where the AllReduce computes the norm
//      (over CPU devices, and --direct) a plan kept from the first step would use the old one;
//      over the test GPUs the cut is reduced by copies, without an epilogue, and the norm runs
//      in the devices' graphs.
void again_norm_eps(Env & e) { e.norm_eps = 1e-2f; }
// 10b. The reduced sum also read on the CPU backend: the meta backend's part of the graph has
//      the same nodes, but the sum must now be left whole on the devices. (The read makes a
//      per-device view of the sum, so the first step's plan is dropped as stale whatever its
//      use counts say: this case checks the outcome.)
void again_sum_read_on_cpu(Env & e) { e.read_sum_on_cpu = true; }
// 10c. The RMS norm behind the cut also read on the CPU backend: the meta backend's part of the
//      graph has the same nodes, and the norm's use count goes from 1 to 2. The first step's
//      plan fused the norm into the AllReduce's epilogue, which writes only the product with the
//      norm's weight; the second must leave the norm's own result where the CPU reads it. (The
//      scheduler lays the compute buffer out anew for the CPU's read, so the first plan is
//      dropped as stale whatever its use counts say: this case checks the outcome.)
void again_norm_read_on_cpu(Env & e) { e.read_norm_on_cpu = true; }

// --- cases that the meta backend must reject (each stops in ggml_abort) ------------------------

// rms_norm needs whole rows: an AXIS_0-split input is rejected.
ggml_tensor * a_rms_norm_axis0(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 1, even(e.n, F, 1));
    return ggml_rms_norm(e.ctx, mm(e, w, e.act("x", E, T)), 1e-5f);
}
// W split along its reduction dim (AXIS_0) in two segments, with an unsplit x: each device's
// columns are two runs, so its rows of x would not be one view.
ggml_tensor * a_mul_mat_w0_segments_xm(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 0, std::vector<Extents>{ even(e.n, E / 2, 1), even(e.n, E / 2, 1) });
    return mm(e, w, e.act("x", E, T));
}
// AXIS_0 + a MIRRORED operand that repeats along the split dimension (half the rows): neither
// broadcast nor a slice per device.
ggml_tensor * a_add_split_repeated(Env & e) {
    ggml_tensor * w = e.weight("w", E, F);
    e.split("w", 1, even(e.n, F, 1));
    return ggml_add(e.ctx, mm(e, w, e.act("x", E, T)), e.act("y", F / 2, T));
}
// soft_max of a heads-split tensor with a MIRRORED mask: states do not match.
ggml_tensor * a_soft_max_mask(Env & e) {
    ggml_tensor * wq = e.weight("w", E, H * D);
    e.split("w", 1, even(e.n, H * D, D));
    ggml_tensor * q = ggml_reshape_3d(e.ctx, mm(e, wq, e.act("x", E, T)), D, H, T);
    return ggml_soft_max_ext(e.ctx, q, e.act("mask", D, H), 1.0f, 0.0f);
}

struct Case {
    const char * name;
    ggml_tensor * (*build)(Env &);
    double tol; // BITEXACT (0): outputs must be bit-identical; else relative, see above
    // A second step: what changes before the graph is built and computed again (see 10).
    void (*again)(Env &) = nullptr;
};
const Case CASES[] = {
    { "mul_mat_rows", c_mul_mat_rows, BITEXACT },
    { "mul_mat_rows_f16", c_mul_mat_rows_f16, BITEXACT },
    { "mlp_partial", c_mlp_partial, TOL_PARTIAL },
    { "mlp_reduce_rows", c_mlp_reduce_rows, TOL_PARTIAL },
    { "bin_bcast", c_bin_bcast, BITEXACT },
    { "mul_mat_whole_input", c_mul_mat_whole_input, TOL_PARTIAL },
    { "add_whole_operand", c_add_whole_operand, BITEXACT },
    { "rms_norm", c_rms_norm, BITEXACT },
    { "rms_norm_tokens", c_rms_norm_tokens, TOL_KERNEL },
    { "rope", c_rope, BITEXACT },
    { "soft_max_heads", c_soft_max_heads, BITEXACT },
    { "soft_max_mask", c_soft_max_mask, BITEXACT },
    { "get_rows_split", c_get_rows_split, BITEXACT },
    { "get_rows_mirrored", c_get_rows_mirrored, BITEXACT },
    { "flash_attn", c_flash_attn, TOL_PARTIAL },
    { "flash_attn_kv", c_flash_attn_kv, TOL_PARTIAL },
    { "qkv_segments", c_qkv_segments, TOL_PARTIAL },
    { "moe", c_moe, TOL_PARTIAL },
    { "moe_bias", c_moe_bias, TOL_PARTIAL },
    { "moe_cont_ids", c_moe_cont_ids, TOL_PARTIAL },
    { "moe_bias_cont_ids", c_moe_bias_cont_ids, TOL_PARTIAL },
    { "again_norm_eps", c_mlp_then_norm, TOL_PARTIAL, again_norm_eps },
    { "again_sum_read_on_cpu", c_mlp_then_norm, TOL_PARTIAL, again_sum_read_on_cpu },
    { "again_norm_read_on_cpu", c_mlp_then_norm, TOL_PARTIAL, again_norm_read_on_cpu },
    { "abort_rms_norm_axis0", a_rms_norm_axis0, 0 },
    { "abort_mul_mat_w0_segments_xm", a_mul_mat_w0_segments_xm, 0 },
    { "abort_add_split_repeated", a_add_split_repeated, 0 },
    { "abort_soft_max_mask", a_soft_max_mask, 0 },
};
bool is_abort_case(const Case & c) { return strncmp(c.name, "abort_", 6) == 0; }

// --- harness -------------------------------------------------------------------------------------

struct Options {
    int n = 2;
    bool tgpu = false;   // simple devices: TESTGPU0,TESTGPU1 instead of the CPU device
    bool direct = false; // meta backend's graph_compute without the scheduler
};

// Weight values: random, scaled by 1/sqrt(n_in) so that matmul outputs stay of order 1.
void upload_weights(ggml_context * ctx_w) {
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_w); t; t = ggml_get_next_tensor(ctx_w, t)) {
        auto v = random_values(ggml_get_name(t), (size_t) ggml_nelements(t), 1.0f / sqrtf((float) t->ne[0]));
        auto b = as_bytes(v, t->type);
        ggml_backend_tensor_set(t, b.data(), 0, b.size());
    }
}
void set_inputs(const Env & e) {
    for (const auto & in : e.inputs) ggml_backend_tensor_set(in.t, in.data.data(), 0, in.data.size());
}
// Weights and caches of `e` in buffers of `buft`: weights uploaded, caches cleared (libllama).
std::vector<ggml_backend_buffer_t> alloc_static(Env & e, ggml_backend_buffer_type_t buft) {
    std::vector<ggml_backend_buffer_t> bufs;
    if (ggml_get_first_tensor(e.ctx_w)) {
        ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(e.ctx_w, buft);
        ggml_backend_buffer_set_usage(b, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
        upload_weights(e.ctx_w);
        bufs.push_back(b);
    }
    if (ggml_get_first_tensor(e.ctx_kv)) {
        ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(e.ctx_kv, buft);
        ggml_backend_buffer_clear(b, 0);
        bufs.push_back(b);
    }
    return bufs;
}
ggml_tensor * build(Env & e, const Case & c) {
    ggml_tensor * out = c.build(e);
    ggml_set_output(out);
    e.expand(out);
    for (ggml_tensor * t : e.also) {
        ggml_set_output(t);
        e.expand(t);
    }
    return out;
}
// The case's output, then the other outputs it named, appended to `r`.
void read_outputs(const Env & e, const ggml_tensor * out, std::vector<float> & r) {
    std::vector<const ggml_tensor *> all = { out };
    all.insert(all.end(), e.also.begin(), e.also.end());
    for (const ggml_tensor * t : all) {
        if (t->type != GGML_TYPE_F32) { fprintf(stderr, "meta_ops: output is not F32\n"); exit(2); }
        std::vector<float> v((size_t) ggml_nelements(t));
        ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
        r.insert(r.end(), v.begin(), v.end());
    }
}
// Before step 1 of a case with a second step: the change, and the graph built again.
ggml_tensor * build_again(Env & e, const Case & c) {
    c.again(e);
    e.restart();
    return build(e, c);
}

std::vector<float> run_reference(const Case & c, int n) {
    Env e(n);
    ggml_tensor * out = build(e, c);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 2);
    auto bufs = alloc_static(e, ggml_backend_get_default_buffer_type(cpu));
    ggml_gallocr_t galloc = ggml_gallocr_new(ggml_backend_get_default_buffer_type(cpu));
    std::vector<float> r;
    for (int step = 0; step < (c.again ? 2 : 1); step++) {
        if (step == 1) out = build_again(e, c);
        if (!ggml_gallocr_alloc_graph(galloc, e.gf)) { fprintf(stderr, "reference: allocation failed\n"); exit(2); }
        set_inputs(e);
        if (ggml_backend_graph_compute(cpu, e.gf) != GGML_STATUS_SUCCESS) { fprintf(stderr, "reference: compute failed\n"); exit(2); }
        read_outputs(e, out, r);
    }
    ggml_gallocr_free(galloc);
    for (auto b : bufs) ggml_backend_buffer_free(b);
    ggml_backend_free(cpu);
    return r;
}

std::vector<float> run_meta(const Case & c, const Options & o) {
    Env e(o.n);
    ggml_tensor * out = build(e, c);

    std::vector<ggml_backend_dev_t> devs;
    for (int j = 0; j < o.n; j++)
        devs.push_back(o.tgpu ? ggml_backend_dev_by_name(j == 0 ? "TESTGPU0" : "TESTGPU1")
                              : ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU));
    // Meta devices live forever and are keyed by (devices, callback, userdata): give each run
    // its own table, freed only at exit (after its device's last use), so that no two runs share
    // a device.
    static std::vector<std::unique_ptr<SplitTable>> tables;
    tables.push_back(std::make_unique<SplitTable>(e.splits));
    SplitTable * table = tables.back().get();
    ggml_backend_dev_t mdev = ggml_backend_meta_device(devs.data(), devs.size(), table_split, table);
    ggml_backend_t meta = ggml_backend_dev_init(mdev, nullptr);
    if (!meta || !ggml_backend_is_meta(meta) || ggml_backend_meta_n_backends(meta) != (size_t) o.n) {
        fprintf(stderr, "meta_ops: no meta backend over %d devices\n", o.n);
        exit(2);
    }
    for (int j = 0; j < o.n; j++) { // one thread per simple CPU backend (its count is not numerics)
        ggml_backend_t sb = ggml_backend_meta_simple_backend(meta, (size_t) j);
        if (ggml_backend_is_cpu(sb)) ggml_backend_cpu_set_n_threads(sb, 1);
    }
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(mdev);
    auto bufs = alloc_static(e, buft);
    ggml_backend_t cpu = ggml_backend_cpu_init();
    ggml_backend_cpu_set_n_threads(cpu, 2);

    std::vector<float> r;
    // --direct: the meta backend on its own; else as libllama: a scheduler over {meta, CPU}, no
    // parallel copies, op offload on
    ggml_backend_t backends[2] = { meta, cpu };
    ggml_gallocr_t galloc = o.direct ? ggml_gallocr_new(buft) : nullptr;
    ggml_backend_sched_t sched = o.direct ? nullptr : ggml_backend_sched_new(backends, nullptr, 2, GRAPH_SIZE, false, true);
    for (int step = 0; step < (c.again ? 2 : 1); step++) {
        if (step == 1) out = build_again(e, c);
        bool ok;
        if (o.direct) {
            ok = ggml_gallocr_alloc_graph(galloc, e.gf);
        } else {
            ggml_backend_sched_reset(sched);
            for (ggml_tensor * t : e.on_cpu) ggml_backend_sched_set_tensor_backend(sched, t, cpu);
            ok = ggml_backend_sched_alloc_graph(sched, e.gf);
        }
        if (!ok) { fprintf(stderr, "meta: allocation failed\n"); exit(2); }
        set_inputs(e);
        ggml_status st = o.direct ? ggml_backend_graph_compute(meta, e.gf) : ggml_backend_sched_graph_compute(sched, e.gf);
        if (st != GGML_STATUS_SUCCESS) { fprintf(stderr, "meta: compute failed\n"); exit(2); }
        read_outputs(e, out, r);
    }
    if (galloc) ggml_gallocr_free(galloc);
    if (sched) ggml_backend_sched_free(sched);
    for (auto b : bufs) ggml_backend_buffer_free(b);
    ggml_backend_free(cpu);
    ggml_backend_free(meta);
    return r;
}

struct Diff { double max_abs = 0, max_ref = 0; bool nan = false, identical = true; };
Diff compare(const std::vector<float> & ref, const std::vector<float> & got) {
    Diff d;
    if (ref.size() != got.size()) { d.nan = true; d.identical = false; return d; }
    d.identical = memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (std::isnan(ref[i]) || std::isnan(got[i])) d.nan = true;
        d.max_abs = std::max(d.max_abs, (double) std::fabs(ref[i] - got[i]));
        d.max_ref = std::max(d.max_ref, (double) std::fabs(ref[i]));
    }
    return d;
}
// Pass: bit-identical where that holds (tol 0), else max|a-b| <= tol * max(1, max|ref|).
bool passes(const Diff & d, double tol) {
    if (d.nan) return false;
    return tol == BITEXACT ? d.identical : d.max_abs <= tol * std::max(1.0, d.max_ref);
}

int usage() {
    fprintf(stderr, "usage: meta_ops <case[,case|,-case...]|all> <n_devices> [--simple cpu|tgpu] [--direct] [--out FILE] [--against FILE]\ncases:");
    for (const Case & c : CASES) fprintf(stderr, " %s", c.name);
    fprintf(stderr, "\n");
    return 2;
}

} // namespace

int main(int argc, char ** argv) {
    if (argc < 3) return usage();
    const std::string which = argv[1];
    Options o;
    o.n = atoi(argv[2]);
    const char * out_path = nullptr, * against_path = nullptr;
    for (int i = 3; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--simple" && i + 1 < argc) {
            std::string s = argv[++i];
            if (s != "cpu" && s != "tgpu") return usage();
            o.tgpu = s == "tgpu";
        } else if (a == "--direct") o.direct = true;
        else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
        else if (a == "--against" && i + 1 < argc) against_path = argv[++i];
        else return usage();
    }
    if (o.n < 1 || o.n > GGML_BACKEND_META_MAX_DEVICES || (o.tgpu && o.n != 2)) {
        fprintf(stderr, "meta_ops: n_devices must be 1..%d (2 with --simple tgpu)\n", GGML_BACKEND_META_MAX_DEVICES);
        return 2;
    }
    if (o.tgpu) test_device_register(1);

    // Case selection: comma-separated names; `all` = every case but the abort_ ones; `-name`
    // removes a case again (e.g. all,-moe).
    std::vector<const Case *> run;
    for (size_t pos = 0; pos <= which.size();) {
        size_t end = std::min(which.find(',', pos), which.size());
        std::string item = which.substr(pos, end - pos);
        pos = end + 1;
        bool remove = !item.empty() && item[0] == '-';
        if (remove) item.erase(0, 1);
        bool known = false;
        for (const Case & c : CASES) {
            if (item != c.name && !(item == "all" && !is_abort_case(c))) continue;
            known = true;
            auto it = std::find(run.begin(), run.end(), &c);
            if (remove && it != run.end()) run.erase(it);
            if (!remove && it == run.end()) run.push_back(&c);
        }
        if (!known) return usage();
    }
    if (run.empty()) return usage();

    FILE * against = against_path ? fopen(against_path, "rb") : nullptr;
    if (against_path && !against) { fprintf(stderr, "meta_ops: cannot read %s\n", against_path); return 2; }
    std::vector<float> all_out;
    bool ok = true;
    for (const Case * c : run) {
        if (is_abort_case(*c)) {
            fprintf(stderr, "case %s n=%d: computing; the meta backend must abort\n", c->name, o.n);
            run_meta(*c, o);
            printf("case %s n=%d: completed, but an abort was expected FAIL\n", c->name, o.n);
            return 1;
        }
        std::vector<float> ref = run_reference(*c, o.n);
        std::vector<float> got = run_meta(*c, o);
        Diff d = compare(ref, got);
        bool pass = passes(d, c->tol);
        ok = ok && pass;
        printf("case %s n=%d: max_abs=%.3g tol=%g%s %s\n", c->name, o.n, d.max_abs, c->tol,
               c->tol == BITEXACT ? " (bit-exact)" : "", pass ? "PASS" : "FAIL");
        fflush(stdout);
        if (against) { // the same case computed by another build (differential run)
            std::vector<float> other(got.size());
            size_t nr = fread(other.data(), sizeof(float), other.size(), against);
            Diff od = nr == other.size() ? compare(other, got) : Diff{ 0, 0, true, false };
            bool opass = passes(od, c->tol);
            ok = ok && opass;
            printf("  against %s: max_abs=%.3g %s %s\n", against_path, od.max_abs,
                   od.identical ? "identical" : "differs", opass ? "PASS" : "FAIL");
        }
        all_out.insert(all_out.end(), got.begin(), got.end());
    }
    if (against) fclose(against);
    if (out_path) {
        FILE * f = fopen(out_path, "wb");
        if (!f || fwrite(all_out.data(), sizeof(float), all_out.size(), f) != all_out.size()) {
            fprintf(stderr, "meta_ops: cannot write %s\n", out_path);
            return 2;
        }
        fclose(f);
    }
    return ok ? 0 : 1;
}
