// write_model.cpp — write a random-weight Llama-family GGUF (llama, llama4, qwen2, qwen3, qwen3moe, gemma, gemma2,
// gemma3, cohere2, phi3, glm4moe, gpt-oss, qwen35, lfm2, lfm2moe) with ggml's own gguf.h API.
//
// Part of ggml-backend-rs' end-to-end differential test (DESIGN.md §4.3): the same file is loaded
// by tools/model/llama_driver built against upstream and against our library.
//
// Usage:
//   write_model --out PATH [--n-embd 64] [--n-layer 2] [--n-head 4] [--n-head-kv 2] [--n-ff 128]
//               [--n-vocab 300] [--n-ctx-train 512] [--type f32|f16] [--seed 42]
//               [--output-scale 8] [--rms-eps 1e-5] [--rope-freq-base 10000] [--stream]
//               [--n-expert E --n-expert-used K]   (MoE feed-forward, E >= K >= 1; default dense)
//               [--arch llama|llama4|qwen2|qwen3|qwen3moe|gemma|gemma2|gemma3|cohere2|phi3|glm4moe|gpt-oss|qwen35|lfm2|lfm2moe]
//               [--swa N]
//
// What it writes (checked against the pin's src/llama-model.cpp LLM_ARCH_LLAMA load_hparams /
// load_tensors and src/llama-vocab.cpp "llama" tokenizer):
//   KV:   general.architecture="llama", general.name, general.alignment=32,
//         llama.context_length, llama.embedding_length, llama.block_count,
//         llama.feed_forward_length, llama.attention.head_count, llama.attention.head_count_kv,
//         llama.rope.dimension_count (= n_embd/n_head; the loader requires exactly that),
//         llama.vocab_size (all u32), llama.attention.layer_norm_rms_epsilon, llama.rope.freq_base (f32),
//         tokenizer.ggml.model="llama" (SPM), tokenizer.ggml.tokens/scores/token_type,
//         tokenizer.ggml.bos_token_id=1, eos_token_id=2, unknown_token_id=0 (u32);
//         with --n-expert also llama.expert_count, llama.expert_used_count (u32).
//   Vocab: 0 <unk> (type 2), 1 <s>, 2 </s> (type 3), 3..258 <0x00>..<0xFF> (type 6), then unique
//          filler tokens (type 1): "▁", a..z, A..Z, 0..9, ".", ",", "▁a".., then letter pairs.
//          Hence n_vocab >= 259.
//   Tensors: token_embd.weight {n_embd,n_vocab}, output_norm.weight {n_embd}, output.weight
//            {n_embd,n_vocab}; per layer blk.N.{attn_norm,ffn_norm}.weight {n_embd} (f32),
//            attn_q {n_embd,n_embd}, attn_k/attn_v {n_embd,n_embd_gqa}, attn_output {n_embd,n_embd},
//            ffn_gate/ffn_up {n_embd,n_ff}, ffn_down {n_ff,n_embd}. 2D matrices in --type,
//            norms always f32.
//   MoE (--n-expert E > 0): instead of ffn_gate/ffn_up/ffn_down each layer has the router
//            blk.N.ffn_gate_inp.weight {n_embd,E} (always f32) and the stacked experts
//            ffn_gate_exps/ffn_up_exps {n_embd,n_ff,E}, ffn_down_exps {n_ff,n_embd,E} (--type).
//            That is what the pin's LLM_ARCH_LLAMA loads when llama.expert_count > 0 (no shared
//            expert, no biases); its graph (models/llama.cpp -> build_moe_ffn) routes with softmax
//            over the router logits, top-K experts, weights renormalised to sum 1, SiLU gate.
//
// Architectures (--arch, default llama): the KV keys above use the architecture's name as prefix.
//   llama4    (LLM_ARCH_LLAMA4; needs --n-expert): the llama tensors; every other layer (1, 3, ..;
//             interleave_moe_layer_step 2) is MoE — router, experts of width n_ff
//             (expert_feed_forward_length) and one shared expert (ffn_{gate,up,down}_shexp) —,
//             the others dense. The pin's defaults for the rest: chunked attention in three
//             layers of four (chunks of 8192), no RoPE (and attention temperature tuning) in
//             every fourth layer. Needs --n-layer 4 or more: with fewer, the pin's libllama sets
//             the temperature input that no layer uses, and aborts.
//   qwen2     (LLM_ARCH_QWEN2, Qwen2 / Qwen2.5): the llama tensors plus biases on Q, K and V
//             (blk.N.attn_{q,k,v}.bias, uniform in [-0.1, 0.1], f32); NeoX RoPE.
//   cohere2   (LLM_ARCH_COHERE2, Command R7B / Command A): attention and FFN side by side on one
//             LayerNorm (attention.layer_norm_epsilon; no ffn_norm), both added to the residual;
//             tied output scaled by logit_scale 0.5 (attn_output and ffn_down scaled by 16, else the
//             residual stream repeats the input token, as for gemma); sliding_window = --swa with
//             sliding_window_pattern 2 (RoPE in the sliding-window layers only, as the pin's graph).
//   phi3      (LLM_ARCH_PHI3): fused projections: blk.N.attn_qkv {n_embd, n_embd + 2*n_embd_gqa}
//             (Q, K, V rows in that order) and blk.N.ffn_up {n_embd, 2*n_ff} (gate rows, then up
//             rows; the graph's SwiGLU takes the two halves); no ffn_gate; dense.
//   qwen3     (the pin's LLM_ARCH_QWEN3): the llama tensors plus per-head RMS norms of Q and K,
//             blk.N.attn_q_norm / attn_k_norm {n_embd_head} (f32); NeoX RoPE; dense FFN.
//   qwen3moe  (LLM_ARCH_QWEN3MOE): qwen3 attention, the MoE FFN above (needs --n-expert), and
//             qwen3moe.expert_feed_forward_length = n_ff (the experts' width). Its graph routes
//             with softmax, top-K, renormalised weights.
//   gemma     (LLM_ARCH_GEMMA): the llama tensors without output.weight: the output projection is
//             token_embd (tied), so --output-scale does not apply; embeddings are scaled by
//             sqrt(n_embd) in the graph, and so are attn_output and ffn_down here (else the
//             residual stream echoes the input token); GELU FFN; NeoX RoPE. --n-head-kv 1 gives
//             Gemma-2B's multi-query attention.
//   qwen35    (LLM_ARCH_QWEN35, dense): hybrid; layers 0, 2, .. are linear attention (gated delta
//             net: attn_qkv {n_embd, 2*key+value}, attn_gate {n_embd, value}, ssm_conv1d {4, conv},
//             ssm_dt.bias / ssm_a {n_head}, ssm_beta / ssm_alpha {n_embd, n_head} (f32),
//             ssm_norm {head}, ssm_out {value, n_embd}; K heads = --n-head-kv, V heads = --n-head,
//             head size n_embd/n_head), layers 1, 3, .. full attention with the gate folded into Q
//             (attn_q {n_embd, 2*n_embd}) and per-head Q/K norms; post_attention_norm before the
//             FFN; qwen35.ssm.* keys, full_attention_interval 2, rope.dimension_sections.
//   gemma2    (LLM_ARCH_GEMMA2): gemma's tied output and scaled embeddings, plus
//             blk.N.post_attention_norm and blk.N.post_ffw_norm {n_embd} after attention and the
//             FFN (their weights around 4*sqrt(n_embd), in the place of gemma's scaled output
//             projections), gemma2.attn_logit_softcapping 50 and final_logit_softcapping 30, and
//             gemma2.attention.sliding_window = --swa: every other layer attends to a sliding
//             window (two KV caches, as gpt-oss).
//   gemma3    (LLM_ARCH_GEMMA3): gemma2's tensors plus per-head Q/K norms (attn_{q,k}_norm
//             {n_embd_head}); no soft-capping; gemma3.attention.sliding_window = --swa with
//             sliding_window_pattern 2 (every other layer, so both KV caches are used even with two
//             layers); RoPE base 1e6 in the global layers (rope.freq_base, as Gemma 3 has; not
//             --rope-freq-base) and 1e4 in the sliding-window ones (rope.freq_base_swa).
//   glm4moe   (LLM_ARCH_GLM4_MOE, GLM-4.5; needs --n-expert): biases on Q, K and V, RoPE on half of
//             each head (rope.dimension_count = n_embd_head/2), blk.N.post_attention_norm as the
//             FFN's norm (no ffn_norm); layer 0 dense (leading_dense_block_count 1), the others
//             MoE routed by sigmoid with a selection bias (blk.N.exp_probs_b.bias {E}, f32), weights
//             renormalised, plus one shared expert (ffn_{gate,up}_shexp {n_embd,n_ff},
//             ffn_down_shexp {n_ff,n_embd}) added to the routed experts' sum.
//   gpt-oss   (LLM_ARCH_OPENAI_MOE): biases on Q, K, V and the output projection, attention sinks
//             blk.N.attn_sinks {n_head}, blk.N.post_attention_norm {n_embd} before the FFN (no
//             ffn_norm), MoE with biases on the router and every expert (ffn_{gate,up}_exps.bias
//             {n_ff,E}, ffn_down_exps.bias {n_embd,E}); gpt-oss.expert_feed_forward_length = n_ff,
//             gpt-oss.attention.sliding_window = --swa (default 16): every other layer attends to
//             a sliding window (the pin's default pattern for gpt-oss). Biases and sinks are
//             uniform in [-0.1, 0.1] and [-1, 1], f32.
//   lfm2      (LLM_ARCH_LFM2, LFM2; ggml 0.26's libllama splits it in tensor mode, 0.9.11's does not):
//             hybrid; layers 0, 2, .. are short convolutions (blk.N.shortconv.in_proj {n_embd,
//             3*n_embd}: gates B and C and the input x; shortconv.conv {3, n_embd} (f32, l_cache 3);
//             shortconv.out_proj {n_embd, n_embd}), layers 1, 3, .. attention with per-head Q/K
//             norms; head_count_kv is an array per layer (0: a convolution layer); every layer has a
//             dense FFN after ffn_norm; the final norm is named token_embd_norm (as libllama reads it).
//   lfm2moe   (LLM_ARCH_LFM2MOE; needs --n-expert): lfm2's layers, the FFN of layer 0 dense
//             (leading_dense_block_count 1), the others MoE of width n_ff routed by sigmoid with a
//             selection bias (blk.N.exp_probs_b.bias {E}, f32), weights renormalised.
//
// Values: each tensor gets its own splitmix64 stream seeded from (--seed, FNV-1a of tensor name), so
// the content does not depend on write order. Matrices: uniform in [-a, a], a = 1/sqrt(fan_in)
// (fan_in = ne0); token_embd: a = 1; output.weight additionally multiplied by --output-scale so that
// logits are peaked and greedy argmax is robust to rounding differences. Norm weights: uniform in
// [0.9, 1.1] (gemma2's and gemma3's post-norms: that times 4*sqrt(n_embd)). f16 conversion uses ggml_fp32_to_fp16_row. Same flags -> byte-identical file.
//
// Memory: by default all tensors live in one ggml context (no_alloc=false) and the file is written
// with gguf_write_to_file(ctx, path, false) — fine up to ~1 GiB of weights. Above 1 GiB, or with
// --stream, tensors are created metadata-only, the header is written with
// gguf_write_to_file(..., only_meta=true) and the tensor data is appended one tensor at a time with
// the same alignment padding gguf uses; the bytes are identical to the in-memory path.
//
// Build (against the pin):  g++ -std=c++17 -O2 write_model.cpp -I<llama>/ggml/include -L<lib> -lggml -lggml-base
#include "ggml.h"
#include "gguf.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Opts {
    int64_t n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 128, n_vocab = 300, n_ctx_train = 512;
    ggml_type type = GGML_TYPE_F32;
    uint64_t seed = 42;
    float output_scale = 8.0f;
    float rms_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    int64_t n_expert = 0, n_expert_used = 0;  // 0: dense feed-forward
    bool stream = false;
    std::string arch = "llama";
    int64_t n_swa = 16;
    std::string out;
};

[[noreturn]] void die(const char * msg) {
    fprintf(stderr, "write_model: error: %s\n", msg);
    exit(2);
}

void usage() {
    fprintf(stderr,
        "usage: write_model --out PATH [--n-embd N] [--n-layer N] [--n-head N] [--n-head-kv N]\n"
        "                   [--n-ff N] [--n-vocab N (>=259)] [--n-ctx-train N] [--type f32|f16]\n"
        "                   [--seed N] [--output-scale S] [--rms-eps E] [--rope-freq-base B] [--stream]\n"
        "                   [--n-expert E --n-expert-used K] [--arch llama|llama4|qwen2|qwen3|qwen3moe|gemma|gemma2|gemma3|cohere2|phi3|glm4moe|gpt-oss|qwen35|lfm2|lfm2moe]\n"
        "                   [--swa N (gpt-oss, gemma2, gemma3, cohere2)]\n");
}

uint64_t splitmix64(uint64_t & s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t fnv1a64(const char * s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; ++s) { h ^= (uint8_t) *s; h *= 0x100000001b3ull; }
    return h;
}

// How to fill one tensor.
struct Fill {
    float lo, hi;   // uniform in [lo, hi)
};

struct TensorSpec {
    std::string name;
    ggml_type type;
    int64_t ne0, ne1;  // ne1 == 1 for 1D
    Fill fill;
    int64_t ne2 = 1;   // > 1: a stack of ne2 matrices (MoE experts)
    int64_t n() const { return ne0 * ne1 * ne2; }
};

// Deterministic fp32 values of a tensor.
void gen_values(const Opts & o, const TensorSpec & t, std::vector<float> & v) {
    const int64_t n = t.n();
    v.resize(n);
    uint64_t s = o.seed * 0xD1B54A32D192ED03ull ^ fnv1a64(t.name.c_str());
    const float span = t.fill.hi - t.fill.lo;
    for (int64_t i = 0; i < n; ++i) {
        const double u = (double) (splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); // [0,1)
        v[i] = t.fill.lo + (float) (u * span);
    }
}

// Convert to the tensor's storage type into dst (ggml_row_size(type, n) bytes).
void encode(const TensorSpec & t, const std::vector<float> & v, void * dst) {
    if (t.type == GGML_TYPE_F32) {
        memcpy(dst, v.data(), v.size() * sizeof(float));
    } else if (t.type == GGML_TYPE_F16) {
        ggml_fp32_to_fp16_row(v.data(), (ggml_fp16_t *) dst, (int64_t) v.size());
    } else {
        die("unsupported tensor type");
    }
}

std::vector<TensorSpec> make_specs(const Opts & o) {
    std::vector<TensorSpec> specs;
    const int64_t n_embd_head = o.n_embd / o.n_head;
    const int64_t n_embd_gqa  = n_embd_head * o.n_head_kv;
    // a = scale/sqrt(fan_in); ne2 > 1 stacks that many independent matrices (one per expert)
    auto mat = [&](const std::string & name, int64_t ne0, int64_t ne1, float scale, int64_t ne2 = 1,
                   ggml_type type = GGML_TYPE_COUNT) {
        const float a = scale / std::sqrt((float) ne0);
        specs.push_back({name, type == GGML_TYPE_COUNT ? o.type : type, ne0, ne1, {-a, a}, ne2});
    };
    auto norm = [&](const std::string & name, int64_t ne0, float scale = 1.0f) {
        specs.push_back({name, GGML_TYPE_F32, ne0, 1, {0.9f * scale, 1.1f * scale}});
    };
    auto bias = [&](const std::string & name, int64_t ne0, int64_t ne1 = 1, float a = 0.1f) {
        specs.push_back({name, GGML_TYPE_F32, ne0, ne1, {-a, a}});
    };
    const bool oss = o.arch == "gpt-oss";
    const bool q35 = o.arch == "qwen35";
    const bool lfm2 = o.arch == "lfm2" || o.arch == "lfm2moe";
    // gemma2 and gemma3 share their layout (gemma3 adds per-head Q/K norms)
    const bool gemma2 = o.arch == "gemma2" || o.arch == "gemma3";
    const bool tied = o.arch == "gemma" || gemma2 || o.arch == "cohere2";  // output projection = token_embd
    // qwen35's linear-attention layers: K heads = n_head_kv, V heads = n_head, head size n_embd_head
    const int64_t key_dim = n_embd_head * o.n_head_kv, value_dim = n_embd_head * o.n_head;
    // token_embd: a = 1 (rows are RMS-normalised before use anyway)
    specs.push_back({"token_embd.weight", o.type, o.n_embd, o.n_vocab, {-1.0f, 1.0f}});
    // the stacked experts of width n_ff and one shared expert of the same width (llama4, glm4moe)
    auto experts_and_shared = [&](const std::string & p) {
        mat(p + "ffn_gate_exps.weight",  o.n_embd, o.n_ff,   1.0f, o.n_expert);
        mat(p + "ffn_up_exps.weight",    o.n_embd, o.n_ff,   1.0f, o.n_expert);
        mat(p + "ffn_down_exps.weight",  o.n_ff,   o.n_embd, 1.0f, o.n_expert);
        mat(p + "ffn_gate_shexp.weight", o.n_embd, o.n_ff,   1.0f);
        mat(p + "ffn_up_shexp.weight",   o.n_embd, o.n_ff,   1.0f);
        mat(p + "ffn_down_shexp.weight", o.n_ff,   o.n_embd, 1.0f);
    };
    for (int64_t il = 0; il < o.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        norm(p + "attn_norm.weight", o.n_embd);
        if (q35) {
            norm(p + "post_attention_norm.weight", o.n_embd);
            if ((il + 1) % 2 != 0) {  // recurrent (gated delta net) layer
                mat(p + "attn_qkv.weight",  o.n_embd, 2 * key_dim + value_dim, 1.0f);
                mat(p + "attn_gate.weight", o.n_embd, value_dim, 1.0f);
                specs.push_back({p + "ssm_conv1d.weight", GGML_TYPE_F32, 4, 2 * key_dim + value_dim, {-0.5f, 0.5f}});
                bias(p + "ssm_dt.bias", o.n_head, 1, 0.5f);
                specs.push_back({p + "ssm_a", GGML_TYPE_F32, o.n_head, 1, {-1.0f, -0.1f}});
                mat(p + "ssm_beta.weight",  o.n_embd, o.n_head, 1.0f, 1, GGML_TYPE_F32);
                mat(p + "ssm_alpha.weight", o.n_embd, o.n_head, 1.0f, 1, GGML_TYPE_F32);
                norm(p + "ssm_norm.weight", n_embd_head);
                mat(p + "ssm_out.weight",   value_dim, o.n_embd, 1.0f);
            } else {
                mat(p + "attn_q.weight",      o.n_embd, 2 * o.n_embd, 1.0f);
                mat(p + "attn_k.weight",      o.n_embd, n_embd_gqa,   1.0f);
                mat(p + "attn_v.weight",      o.n_embd, n_embd_gqa,   1.0f);
                mat(p + "attn_output.weight", o.n_embd, o.n_embd,     1.0f);
                norm(p + "attn_q_norm.weight", n_embd_head);
                norm(p + "attn_k_norm.weight", n_embd_head);
            }
            mat(p + "ffn_gate.weight",    o.n_embd, o.n_ff,       1.0f);
            mat(p + "ffn_up.weight",      o.n_embd, o.n_ff,       1.0f);
            mat(p + "ffn_down.weight",    o.n_ff,   o.n_embd,     1.0f);
            continue;
        }
        if (lfm2) {
            if (il % 2 == 0) {  // short convolution
                mat(p + "shortconv.in_proj.weight",  o.n_embd, 3 * o.n_embd, 1.0f);
                specs.push_back({p + "shortconv.conv.weight", GGML_TYPE_F32, 3, o.n_embd, {-0.5f, 0.5f}});
                mat(p + "shortconv.out_proj.weight", o.n_embd, o.n_embd, 1.0f);
            } else {
                mat(p + "attn_q.weight",      o.n_embd, o.n_embd,   1.0f);
                mat(p + "attn_k.weight",      o.n_embd, n_embd_gqa, 1.0f);
                mat(p + "attn_v.weight",      o.n_embd, n_embd_gqa, 1.0f);
                mat(p + "attn_output.weight", o.n_embd, o.n_embd,   1.0f);
                norm(p + "attn_q_norm.weight", n_embd_head);
                norm(p + "attn_k_norm.weight", n_embd_head);
            }
            norm(p + "ffn_norm.weight", o.n_embd);
            if (o.arch == "lfm2" || il == 0) {
                mat(p + "ffn_gate.weight", o.n_embd, o.n_ff, 1.0f);
                mat(p + "ffn_up.weight",   o.n_embd, o.n_ff, 1.0f);
                mat(p + "ffn_down.weight", o.n_ff, o.n_embd, 1.0f);
            } else {
                mat(p + "ffn_gate_inp.weight",  o.n_embd, o.n_expert, 1.0f, 1, GGML_TYPE_F32);
                bias(p + "exp_probs_b.bias", o.n_expert);
                mat(p + "ffn_gate_exps.weight", o.n_embd, o.n_ff,     1.0f, o.n_expert);
                mat(p + "ffn_up_exps.weight",   o.n_embd, o.n_ff,     1.0f, o.n_expert);
                mat(p + "ffn_down_exps.weight", o.n_ff,   o.n_embd,   1.0f, o.n_expert);
            }
            continue;
        }
        if (o.arch == "glm4moe") {
            mat(p + "attn_q.weight",      o.n_embd, o.n_embd,     1.0f);
            mat(p + "attn_k.weight",      o.n_embd, n_embd_gqa,   1.0f);
            mat(p + "attn_v.weight",      o.n_embd, n_embd_gqa,   1.0f);
            bias(p + "attn_q.bias", o.n_embd);
            bias(p + "attn_k.bias", n_embd_gqa);
            bias(p + "attn_v.bias", n_embd_gqa);
            mat(p + "attn_output.weight", o.n_embd, o.n_embd,     1.0f);
            norm(p + "post_attention_norm.weight", o.n_embd);
            if (il == 0) {
                mat(p + "ffn_gate.weight", o.n_embd, o.n_ff, 1.0f);
                mat(p + "ffn_up.weight",   o.n_embd, o.n_ff, 1.0f);
                mat(p + "ffn_down.weight", o.n_ff, o.n_embd, 1.0f);
                continue;
            }
            mat(p + "ffn_gate_inp.weight",  o.n_embd, o.n_expert, 1.0f, 1, GGML_TYPE_F32);
            bias(p + "exp_probs_b.bias", o.n_expert);
            experts_and_shared(p);
            continue;
        }
        if (o.arch == "phi3") {
            mat(p + "attn_qkv.weight",    o.n_embd, o.n_embd + 2 * n_embd_gqa, 1.0f);
            mat(p + "attn_output.weight", o.n_embd, o.n_embd,     1.0f);
            norm(p + "ffn_norm.weight", o.n_embd);
            mat(p + "ffn_up.weight",      o.n_embd, 2 * o.n_ff,   1.0f);
            mat(p + "ffn_down.weight",    o.n_ff,   o.n_embd,     1.0f);
            continue;
        }
        mat(p + "attn_q.weight",      o.n_embd, o.n_embd,     1.0f);
        mat(p + "attn_k.weight",      o.n_embd, n_embd_gqa,   1.0f);
        mat(p + "attn_v.weight",      o.n_embd, n_embd_gqa,   1.0f);
        if (o.arch == "qwen2") {
            bias(p + "attn_q.bias", o.n_embd);
            bias(p + "attn_k.bias", n_embd_gqa);
            bias(p + "attn_v.bias", n_embd_gqa);
        }
        // gemma adds each layer to an embedding scaled by sqrt(n_embd): the layers' outputs
        // are scaled alike, or the residual stream repeats the input token
        // (cohere2's tied output meets the same echo: its outputs are scaled by 16)
        const float out_scale = o.arch == "gemma" ? 4.0f * std::sqrt((float) o.n_embd) : o.arch == "cohere2" ? 16.0f : 1.0f;
        mat(p + "attn_output.weight", o.n_embd, o.n_embd,     out_scale);
        // gemma2 normalises both outputs again before the residual add: the scale goes there
        const float post_scale = 4.0f * std::sqrt((float) o.n_embd);
        if (gemma2) {
            norm(p + "post_attention_norm.weight", o.n_embd, post_scale);
        }
        if (o.arch == "qwen3" || o.arch == "qwen3moe" || o.arch == "gemma3") {
            norm(p + "attn_q_norm.weight", n_embd_head);
            norm(p + "attn_k_norm.weight", n_embd_head);
        }
        if (oss) {
            bias(p + "attn_q.bias", o.n_embd);
            bias(p + "attn_k.bias", n_embd_gqa);
            bias(p + "attn_v.bias", n_embd_gqa);
            bias(p + "attn_output.bias", o.n_embd);
            bias(p + "attn_sinks.weight", o.n_head, 1, 1.0f);
            norm(p + "post_attention_norm.weight", o.n_embd);
            mat(p + "ffn_gate_inp.weight",  o.n_embd, o.n_expert, 1.0f, 1, GGML_TYPE_F32);
            bias(p + "ffn_gate_inp.bias", o.n_expert);
            mat(p + "ffn_gate_exps.weight", o.n_embd, o.n_ff,     1.0f, o.n_expert);
            mat(p + "ffn_up_exps.weight",   o.n_embd, o.n_ff,     1.0f, o.n_expert);
            mat(p + "ffn_down_exps.weight", o.n_ff,   o.n_embd,   1.0f, o.n_expert);
            bias(p + "ffn_gate_exps.bias", o.n_ff, o.n_expert);
            bias(p + "ffn_up_exps.bias", o.n_ff, o.n_expert);
            bias(p + "ffn_down_exps.bias", o.n_embd, o.n_expert);
            continue;
        }
        if (o.arch != "cohere2") {  // (cohere2's FFN reads attn_norm's output)
            norm(p + "ffn_norm.weight", o.n_embd);
        }
        // (llama4: MoE in the odd layers only, interleave_moe_layer_step 2)
        const bool moe = o.n_expert > 0 && (o.arch != "llama4" || il % 2 == 1);
        if (!moe) {
            mat(p + "ffn_gate.weight",    o.n_embd, o.n_ff,       1.0f);
            mat(p + "ffn_up.weight",      o.n_embd, o.n_ff,       1.0f);
            mat(p + "ffn_down.weight",    o.n_ff,   o.n_embd,     out_scale);
            if (gemma2) {
                norm(p + "post_ffw_norm.weight", o.n_embd, post_scale);
            }
        } else {
            // Router in f32: its logits pick the experts, so keep them free of f16 weight rounding.
            mat(p + "ffn_gate_inp.weight",  o.n_embd, o.n_expert, 1.0f, 1, GGML_TYPE_F32);
            if (o.arch == "llama4") {
                experts_and_shared(p);
            } else {
                mat(p + "ffn_gate_exps.weight", o.n_embd, o.n_ff,     1.0f, o.n_expert);
                mat(p + "ffn_up_exps.weight",   o.n_embd, o.n_ff,     1.0f, o.n_expert);
                mat(p + "ffn_down_exps.weight", o.n_ff,   o.n_embd,   1.0f, o.n_expert);
            }
        }
    }
    norm(lfm2 ? "token_embd_norm.weight" : "output_norm.weight", o.n_embd);
    if (!tied) {
        mat("output.weight", o.n_embd, o.n_vocab, o.output_scale);
    }
    return specs;
}

// Byte-level SPM vocabulary with unique filler tokens.
void make_vocab(int64_t n_vocab, std::vector<std::string> & tokens, std::vector<float> & scores, std::vector<int32_t> & types) {
    tokens.clear(); scores.clear(); types.clear();
    auto add = [&](const std::string & s, float score, int32_t type) {
        tokens.push_back(s); scores.push_back(score); types.push_back(type);
    };
    add("<unk>", 0.0f, 2);
    add("<s>",   0.0f, 3);
    add("</s>",  0.0f, 3);
    for (int b = 0; b < 256; ++b) {
        char buf[16];
        snprintf(buf, sizeof(buf), "<0x%02X>", b);
        add(buf, 0.0f, 6);
    }
    const std::string sp = "\xE2\x96\x81"; // U+2581 '▁'
    std::vector<std::string> filler;
    filler.push_back(sp);
    std::string alpha;
    for (char c = 'a'; c <= 'z'; ++c) alpha += c;
    for (char c = 'A'; c <= 'Z'; ++c) alpha += c;
    for (char c = '0'; c <= '9'; ++c) alpha += c;
    alpha += ".,!?";
    for (char c : alpha) filler.push_back(std::string(1, c));
    for (char c : alpha) filler.push_back(sp + c);
    // letter pairs and "▁"+pair, as many as needed (lowercase letters only)
    for (int i = 0; i < 26 && (int64_t) (tokens.size() + filler.size()) < n_vocab; ++i) {
        for (int j = 0; j < 26; ++j) {
            const std::string pr = std::string(1, (char) ('a' + i)) + (char) ('a' + j);
            filler.push_back(pr);
            filler.push_back(sp + pr);
        }
    }
    // still short (very large n_vocab): numbered tokens, unique by construction
    for (int64_t k = 0; (int64_t) (tokens.size() + filler.size()) < n_vocab; ++k) {
        filler.push_back("[F" + std::to_string(k) + "]");
    }
    for (size_t i = 0; (int64_t) tokens.size() < n_vocab; ++i) {
        add(filler[i], -(float) i, 1);
    }
}

int64_t parse_i(const char * s, const char * flag) {
    char * end = nullptr;
    long long v = strtoll(s, &end, 10);
    if (!end || *end || v < 0) { fprintf(stderr, "bad value for %s: %s\n", flag, s); exit(2); }
    return v;
}

} // namespace

int main(int argc, char ** argv) {
    Opts o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto need = [&]() -> const char * {
            if (i + 1 >= argc) { fprintf(stderr, "missing value for %s\n", a.c_str()); usage(); exit(2); }
            return argv[++i];
        };
        if      (a == "--n-embd")         o.n_embd = parse_i(need(), "--n-embd");
        else if (a == "--n-layer")        o.n_layer = parse_i(need(), "--n-layer");
        else if (a == "--n-head")         o.n_head = parse_i(need(), "--n-head");
        else if (a == "--n-head-kv")      o.n_head_kv = parse_i(need(), "--n-head-kv");
        else if (a == "--n-ff")           o.n_ff = parse_i(need(), "--n-ff");
        else if (a == "--n-vocab")        o.n_vocab = parse_i(need(), "--n-vocab");
        else if (a == "--n-ctx-train")    o.n_ctx_train = parse_i(need(), "--n-ctx-train");
        else if (a == "--seed")           o.seed = (uint64_t) parse_i(need(), "--seed");
        else if (a == "--output-scale")   o.output_scale = strtof(need(), nullptr);
        else if (a == "--rms-eps")        o.rms_eps = strtof(need(), nullptr);
        else if (a == "--rope-freq-base") o.rope_freq_base = strtof(need(), nullptr);
        else if (a == "--stream")         o.stream = true;
        else if (a == "--n-expert")       o.n_expert = parse_i(need(), "--n-expert");
        else if (a == "--n-expert-used")  o.n_expert_used = parse_i(need(), "--n-expert-used");
        else if (a == "--out")            o.out = need();
        else if (a == "--arch")           o.arch = need();
        else if (a == "--swa")            o.n_swa = parse_i(need(), "--swa");
        else if (a == "--type") {
            const std::string t = need();
            if (t == "f32") o.type = GGML_TYPE_F32;
            else if (t == "f16") o.type = GGML_TYPE_F16;
            else die("--type must be f32 or f16");
        } else if (a == "-h" || a == "--help") { usage(); return 0; }
        else { fprintf(stderr, "unknown argument: %s\n", a.c_str()); usage(); return 2; }
    }
    if (o.out.empty()) { usage(); die("--out is required"); }
    if (o.n_embd <= 0 || o.n_layer <= 0 || o.n_head <= 0 || o.n_head_kv <= 0 || o.n_ff <= 0 || o.n_ctx_train <= 0) die("sizes must be > 0");
    if (o.n_embd % o.n_head != 0) die("n_embd must be divisible by n_head");
    if (o.n_head % o.n_head_kv != 0) die("n_head must be divisible by n_head_kv");
    if ((o.n_embd / o.n_head) % 2 != 0) die("head dim (n_embd/n_head) must be even (RoPE)");
    if (o.n_vocab < 259) die("n_vocab must be >= 259 (3 special + 256 byte tokens)");
    if (!(o.output_scale > 0.0f)) die("--output-scale must be > 0");
    // the pin's loader: n_expert <= LLAMA_MAX_EXPERTS (512), 0 < n_expert_used <= n_expert
    if ((o.n_expert == 0) != (o.n_expert_used == 0)) die("--n-expert and --n-expert-used go together");
    if (o.n_expert_used > o.n_expert) die("--n-expert-used must be <= --n-expert");
    if (o.n_expert > 512) die("--n-expert must be <= 512");
    static const char * const archs[] = {"llama", "llama4", "qwen2", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3", "cohere2", "phi3", "glm4moe",
                                         "gpt-oss", "qwen35", "lfm2", "lfm2moe"};
    bool known = false;
    for (const char * a : archs) known = known || o.arch == a;
    if (!known) die("--arch must be llama, llama4, qwen2, qwen3, qwen3moe, gemma, gemma2, gemma3, cohere2, phi3, glm4moe, gpt-oss, qwen35, lfm2 or lfm2moe");
    if (o.arch == "lfm2" && o.n_expert > 0) die("lfm2 is dense: use --arch lfm2moe for experts");
    if (o.arch == "lfm2moe" && (o.n_expert == 0 || o.n_layer < 2)) die("lfm2moe needs --n-expert and 2 layers or more (layer 0 is dense)");
    if (o.arch == "llama4" && (o.n_expert == 0 || o.n_layer < 4))
        die("llama4 needs --n-expert, --n-expert-used and 4 layers or more (the pin's libllama aborts with fewer)");
    if (o.arch == "glm4moe" && (o.n_embd / o.n_head) % 4 != 0) die("glm4moe rotates half of each head: head dim must be a multiple of 4");
    if (o.arch == "glm4moe" && (o.n_expert == 0 || o.n_layer < 2)) die("glm4moe needs --n-expert and 2 layers or more (layer 0 is dense)");
    if ((o.arch == "qwen2" || o.arch == "gemma2" || o.arch == "gemma3" || o.arch == "cohere2" || o.arch == "phi3")
        && o.n_expert > 0)
        die("qwen2, gemma2, gemma3, cohere2 and phi3 are dense");
    if (o.arch == "qwen35" && o.n_expert > 0) die("qwen35 is dense");
    if (o.arch == "gemma" && o.n_expert > 0) die("gemma is dense");
    if (o.arch == "gpt-oss" && o.n_expert == 0) die("gpt-oss needs --n-expert and --n-expert-used");
    if (o.n_swa <= 0) die("--swa must be > 0");
    if (o.arch == "qwen3" && o.n_expert > 0) die("qwen3 is dense: use --arch qwen3moe for experts");
    if (o.arch == "qwen3moe" && o.n_expert == 0) die("qwen3moe needs --n-expert and --n-expert-used");

    const std::vector<TensorSpec> specs = make_specs(o);
    size_t data_bytes = 0;
    for (const auto & t : specs) data_bytes += ggml_row_size(t.type, t.ne0) * t.ne1 * t.ne2;
    const size_t in_memory_limit = (size_t) 1 << 30;
    const bool stream = o.stream || data_bytes > in_memory_limit;

    // --- metadata ---
    gguf_context * g = gguf_init_empty();
    const std::string & A = o.arch;
    auto key = [&](const char * k) { return (A + "." + k); };
    gguf_set_val_str(g, "general.architecture", A.c_str());
    // (a name with "phi3" in it makes the pin's vocabulary look up Phi-3's own special tokens)
    const std::string name = A == "phi3" ? "ggml-backend-rs random fused-projection model" : "ggml-backend-rs random " + A;
    gguf_set_val_str(g, "general.name", name.c_str());
    gguf_set_val_u32(g, "general.alignment", 32);
    gguf_set_val_u32(g, key("context_length").c_str(),             (uint32_t) o.n_ctx_train);
    gguf_set_val_u32(g, key("embedding_length").c_str(),           (uint32_t) o.n_embd);
    gguf_set_val_u32(g, key("block_count").c_str(),                (uint32_t) o.n_layer);
    gguf_set_val_u32(g, key("feed_forward_length").c_str(),        (uint32_t) o.n_ff);
    gguf_set_val_u32(g, key("attention.head_count").c_str(),       (uint32_t) o.n_head);
    if (A == "lfm2" || A == "lfm2moe") {
        // per layer: 0 for the short-convolution layers (0, 2, ..), which makes them recurrent
        std::vector<int32_t> kv(o.n_layer);
        for (int64_t il = 0; il < o.n_layer; ++il) kv[il] = il % 2 == 0 ? 0 : (int32_t) o.n_head_kv;
        gguf_set_arr_data(g, key("attention.head_count_kv").c_str(), GGUF_TYPE_INT32, kv.data(), kv.size());
        gguf_set_val_u32(g, key("shortconv.l_cache").c_str(), 3);
    } else {
        gguf_set_val_u32(g, key("attention.head_count_kv").c_str(), (uint32_t) o.n_head_kv);
    }
    // (GLM-4.5 rotates half of each head)
    const int64_t n_rot = A == "glm4moe" ? o.n_embd / o.n_head / 2 : o.n_embd / o.n_head;
    gguf_set_val_u32(g, key("rope.dimension_count").c_str(),       (uint32_t) n_rot);
    gguf_set_val_u32(g, key("vocab_size").c_str(),                 (uint32_t) o.n_vocab);
    gguf_set_val_f32(g, key("attention.layer_norm_rms_epsilon").c_str(), o.rms_eps);
    gguf_set_val_f32(g, key("rope.freq_base").c_str(),             A == "gemma3" ? 1.0e6f : o.rope_freq_base);
    if (o.n_expert > 0) {
        gguf_set_val_u32(g, key("expert_count").c_str(),           (uint32_t) o.n_expert);
        gguf_set_val_u32(g, key("expert_used_count").c_str(),      (uint32_t) o.n_expert_used);
    }
    if (A == "lfm2moe") {
        gguf_set_val_u32(g, key("leading_dense_block_count").c_str(), 1);
        gguf_set_val_u32(g, key("expert_gating_func").c_str(), 2);  // sigmoid
    }
    if (A == "glm4moe") {
        gguf_set_val_u32(g, key("expert_shared_count").c_str(), 1);
        gguf_set_val_u32(g, key("leading_dense_block_count").c_str(), 1);
        gguf_set_val_bool(g, key("expert_weights_norm").c_str(), true);
        gguf_set_val_f32(g, key("expert_weights_scale").c_str(), 1.0f);
        gguf_set_val_u32(g, key("expert_gating_func").c_str(), 2);  // sigmoid
    }
    if (A == "llama4") {
        gguf_set_val_u32(g, key("interleave_moe_layer_step").c_str(), 2);
    }
    if (A == "qwen3moe" || A == "gpt-oss" || A == "glm4moe" || A == "llama4" || A == "lfm2moe") {
        gguf_set_val_u32(g, key("expert_feed_forward_length").c_str(), (uint32_t) o.n_ff);
    }
    if (A == "gpt-oss" || A == "gemma2" || A == "gemma3" || A == "cohere2") {
        gguf_set_val_u32(g, key("attention.sliding_window").c_str(), (uint32_t) o.n_swa);
    }
    if (A == "cohere2") {
        gguf_set_val_u32(g, key("attention.sliding_window_pattern").c_str(), 2);
        gguf_set_val_f32(g, key("attention.layer_norm_epsilon").c_str(), o.rms_eps);
        gguf_set_val_f32(g, key("logit_scale").c_str(), 0.5f);
    }
    if (A == "gemma3") {
        gguf_set_val_u32(g, key("attention.sliding_window_pattern").c_str(), 2);
        gguf_set_val_f32(g, key("rope.freq_base_swa").c_str(), 10000.0f);
    }
    if (A == "gemma2") {
        gguf_set_val_f32(g, key("attn_logit_softcapping").c_str(), 50.0f);
        gguf_set_val_f32(g, key("final_logit_softcapping").c_str(), 30.0f);
    }
    if (A == "qwen35") {
        const int64_t hd = o.n_embd / o.n_head;
        gguf_set_val_u32(g, key("ssm.conv_kernel").c_str(), 4);
        gguf_set_val_u32(g, key("ssm.inner_size").c_str(), (uint32_t) (hd * o.n_head));
        gguf_set_val_u32(g, key("ssm.state_size").c_str(), (uint32_t) hd);
        gguf_set_val_u32(g, key("ssm.time_step_rank").c_str(), (uint32_t) o.n_head);
        gguf_set_val_u32(g, key("ssm.group_count").c_str(), (uint32_t) o.n_head_kv);
        gguf_set_val_u32(g, key("full_attention_interval").c_str(), 2);
        // text only: the multimodal RoPE's sections cover the rotated half in the first three
        const int32_t half = (int32_t) (hd / 2);
        const int32_t sections[4] = { half - 2 * (half / 3), half / 3, half / 3, 0 };
        gguf_set_arr_data(g, key("rope.dimension_sections").c_str(), GGUF_TYPE_INT32, sections, 4);
    }

    std::vector<std::string> tokens; std::vector<float> scores; std::vector<int32_t> types;
    make_vocab(o.n_vocab, tokens, scores, types);
    std::vector<const char *> tok_ptrs;
    for (const auto & s : tokens) tok_ptrs.push_back(s.c_str());
    gguf_set_val_str(g, "tokenizer.ggml.model", "llama");
    gguf_set_arr_str(g, "tokenizer.ggml.tokens", tok_ptrs.data(), tok_ptrs.size());
    gguf_set_arr_data(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, scores.data(), scores.size());
    gguf_set_arr_data(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, types.data(), types.size());
    gguf_set_val_u32(g, "tokenizer.ggml.bos_token_id", 1);
    gguf_set_val_u32(g, "tokenizer.ggml.eos_token_id", 2);
    gguf_set_val_u32(g, "tokenizer.ggml.unknown_token_id", 0);

    // --- tensors ---
    ggml_init_params ip;
    ip.mem_size   = ggml_tensor_overhead() * (specs.size() + 1) + (stream ? 0 : data_bytes + 64 * specs.size());
    ip.mem_buffer = nullptr;
    ip.no_alloc   = stream;
    ggml_context * ctx = ggml_init(ip);
    if (!ctx) die("ggml_init failed (out of memory?)");

    std::vector<ggml_tensor *> ts;
    std::vector<float> vals;
    for (const auto & t : specs) {
        ggml_tensor * x = t.ne2 > 1  ? ggml_new_tensor_3d(ctx, t.type, t.ne0, t.ne1, t.ne2)
                        : t.ne1 == 1 ? ggml_new_tensor_1d(ctx, t.type, t.ne0)
                                     : ggml_new_tensor_2d(ctx, t.type, t.ne0, t.ne1);
        ggml_set_name(x, t.name.c_str());
        if (!stream) {
            gen_values(o, t, vals);
            encode(t, vals, x->data);
        }
        gguf_add_tensor(g, x);
        ts.push_back(x);
    }

    if (!stream) {
        if (!gguf_write_to_file(g, o.out.c_str(), /*only_meta=*/false)) die("gguf_write_to_file failed");
    } else {
        if (!gguf_write_to_file(g, o.out.c_str(), /*only_meta=*/true)) die("gguf_write_to_file (meta) failed");
        FILE * f = fopen(o.out.c_str(), "ab");
        if (!f) die("cannot reopen output for appending");
        const size_t align = gguf_get_alignment(g);
        std::vector<uint8_t> buf;
        size_t written = 0;
        for (size_t i = 0; i < specs.size(); ++i) {
            const size_t off = gguf_get_tensor_offset(g, (int64_t) i);
            if (off != written) die("unexpected tensor offset while streaming");
            gen_values(o, specs[i], vals);
            const size_t nb = ggml_nbytes(ts[i]);
            buf.assign(GGML_PAD(nb, align), 0);
            encode(specs[i], vals, buf.data());
            if (fwrite(buf.data(), 1, buf.size(), f) != buf.size()) die("short write");
            written += buf.size();
        }
        if (fclose(f) != 0) die("fclose failed");
    }

    int64_t n_params = 0;
    for (const auto & t : specs) n_params += t.n();
    printf("wrote %s: arch=%s n_embd=%lld n_layer=%lld n_head=%lld n_head_kv=%lld n_ff=%lld n_vocab=%lld "
           "n_expert=%lld n_expert_used=%lld type=%s seed=%llu output_scale=%g tensors=%zu params=%lld data_bytes=%zu mode=%s\n",
           o.out.c_str(), o.arch.c_str(), (long long) o.n_embd, (long long) o.n_layer, (long long) o.n_head, (long long) o.n_head_kv,
           (long long) o.n_ff, (long long) o.n_vocab, (long long) o.n_expert, (long long) o.n_expert_used, ggml_type_name(o.type), (unsigned long long) o.seed,
           o.output_scale, specs.size(), (long long) n_params, data_bytes, stream ? "stream" : "in-memory");

    ggml_free(ctx);
    gguf_free(g);
    return 0;
}
