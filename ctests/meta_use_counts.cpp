// meta_use_counts: a meta backend's plan is kept for a graph with the same nodes only while the
// use counts it was built on hold (src/meta/graph_plan.rs, `Assumed`).
//
//   meta_use_counts
//
// Over Meta(CPU,CPU), the meta backend alone (no scheduler), one compute buffer for both graphs:
//
//   y = w x          (w split along the contraction: each device holds partial sums, reduced)
//   z = y + r        (the residual add, which the AllReduce computes)
//   n = rms_norm(z)
//   o = n * g        (with the norm, computed by the AllReduce's epilogue when n is read once)
//   e = 2 n          (only in graph B)
//
// Graph A holds the first four nodes; graph B holds the same nodes followed by e. The program
// computes A, then ggml_graph_view(B, 0, 4): the same nodes at the same addresses in the same
// memory, but ggml's recorded use count of n is 2 there (B's e reads it), so n must be written.
// n is poisoned (NaN) before each step. After A the poison stays (the premise: A's plan folds the
// norm into the AllReduce, and n is not written); after the view n must hold the norm. A plan
// kept from A for the view would leave the poison.
//
// Tolerance: y sums K = 64 products per element in float32, in another order than the double
// reference (two partial sums added): |error| <= K * 2^-24 * sum|w x| per element, about 4e-6 of
// the values here (order 1); the norm and the product keep that relative size. 1e-4 relative to
// max(1, |reference|) leaves a margin of 25; a poisoned or stale value is NaN or of order 1.

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml-impl.h" // ggml_graph_view and struct ggml_cgraph
#include "ggml.h"
#include "meta_split_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int64_t K = 64, E = 32, T = 3;
constexpr float EPS = 1e-5f;
constexpr double TOL = 1e-4;

// w: split along dimension 0 (the contraction), half each; everything else mirrored.
ggml_backend_meta_split_state split(const ggml_tensor * t, void *) {
    ggml_backend_meta_split_state s = meta_split_state_mirrored();
    if (std::string(ggml_get_name(t)) == "w") {
        s.axis = GGML_BACKEND_SPLIT_AXIS_0;
        s.ne[0] = K / 2;
        s.ne[1] = K / 2;
    }
    return s;
}

std::vector<float> values(size_t n, float scale, unsigned seed) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = scale * ((float) ((seed >> 8) & 0xffff) / 32768.0f - 1.0f);
    }
    return v;
}

int fail(const char * what) {
    fprintf(stderr, "meta_use_counts: FAIL: %s\n", what);
    return 1;
}

} // namespace

int main() {
    ggml_backend_dev_t cpu = ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU);
    ggml_backend_dev_t devs[2] = { cpu, cpu };
    ggml_backend_dev_t mdev = ggml_backend_meta_device(devs, 2, split, nullptr);
    ggml_backend_t meta = ggml_backend_dev_init(mdev, nullptr);
    if (meta == nullptr) return fail("no meta backend");
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(mdev);

    ggml_init_params wp = { 2 * ggml_tensor_overhead(), nullptr, true };
    ggml_context * ctx_w = ggml_init(wp);
    ggml_tensor * w = ggml_new_tensor_2d(ctx_w, GGML_TYPE_F32, K, E);
    ggml_tensor * g = ggml_new_tensor_1d(ctx_w, GGML_TYPE_F32, E);
    ggml_set_name(w, "w");
    ggml_set_name(g, "g");
    ggml_backend_buffer_t wbuf = ggml_backend_alloc_ctx_tensors_from_buft(ctx_w, buft);
    ggml_backend_buffer_set_usage(wbuf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    const std::vector<float> wv = values((size_t) (K * E), 1.0f / 8.0f, 1);
    const std::vector<float> gv = values((size_t) E, 1.0f, 2);
    ggml_backend_tensor_set(w, wv.data(), 0, ggml_nbytes(w));
    ggml_backend_tensor_set(g, gv.data(), 0, ggml_nbytes(g));

    ggml_init_params cp = { 16 * ggml_tensor_overhead() + 2 * ggml_graph_overhead(), nullptr, true };
    ggml_context * ctx = ggml_init(cp);
    ggml_tensor * x = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, K, T);
    ggml_tensor * r = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, E, T);
    ggml_set_input(x);
    ggml_set_input(r);
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    ggml_tensor * z = ggml_add(ctx, y, r);
    ggml_tensor * n = ggml_rms_norm(ctx, z, EPS);
    ggml_tensor * o = ggml_mul(ctx, n, g);
    ggml_tensor * e = ggml_scale(ctx, n, 2.0f);
    // every tensor an output, so that ggml-alloc gives each memory of its own: the poison
    // written into n's memory before a step is n's alone
    for (ggml_tensor * t : { x, r, y, z, n, o, e }) ggml_set_output(t);
    ggml_cgraph * ga = ggml_new_graph(ctx);
    ggml_build_forward_expand(ga, o);
    ggml_cgraph * gb = ggml_new_graph(ctx);
    ggml_build_forward_expand(gb, o);
    ggml_build_forward_expand(gb, e);
    if (ggml_graph_n_nodes(ga) != 4 || ggml_graph_n_nodes(gb) != 5) return fail("unexpected graphs");
    for (int i = 0; i < 4; i++) {
        if (ggml_graph_node(ga, i) != ggml_graph_node(gb, i)) return fail("A is not the start of B");
    }
    ggml_cgraph view = ggml_graph_view(gb, 0, 4);

    // one layout for both: B's (n lives until e)
    ggml_gallocr_t galloc = ggml_gallocr_new(buft);
    if (!ggml_gallocr_alloc_graph(galloc, gb)) return fail("allocation");
    const std::vector<float> xv = values((size_t) (K * T), 1.0f, 3);
    const std::vector<float> rv = values((size_t) (E * T), 1.0f, 4);
    ggml_backend_tensor_set(x, xv.data(), 0, ggml_nbytes(x));
    ggml_backend_tensor_set(r, rv.data(), 0, ggml_nbytes(r));

    // the reference, in double
    std::vector<double> nref((size_t) (E * T)), oref((size_t) (E * T));
    for (int64_t t = 0; t < T; t++) {
        std::vector<double> zt((size_t) E);
        double ss = 0;
        for (int64_t i = 0; i < E; i++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++) acc += (double) wv[(size_t) (i * K + k)] * xv[(size_t) (t * K + k)];
            zt[(size_t) i] = acc + rv[(size_t) (t * E + i)];
            ss += zt[(size_t) i] * zt[(size_t) i];
        }
        const double scale = 1.0 / std::sqrt(ss / (double) E + EPS);
        for (int64_t i = 0; i < E; i++) {
            nref[(size_t) (t * E + i)] = zt[(size_t) i] * scale;
            oref[(size_t) (t * E + i)] = zt[(size_t) i] * scale * gv[(size_t) i];
        }
    }
    auto close = [](const ggml_tensor * t, const std::vector<double> & ref) {
        std::vector<float> got((size_t) ggml_nelements(t));
        ggml_backend_tensor_get(t, got.data(), 0, ggml_nbytes(t));
        for (size_t i = 0; i < got.size(); i++) {
            if (!(std::fabs(got[i] - ref[i]) <= TOL * std::max(1.0, std::fabs(ref[i])))) {
                fprintf(stderr, "meta_use_counts: %s[%zu] = %g, reference %g\n", ggml_get_name(t), i, got[i], ref[i]);
                return false;
            }
        }
        return true;
    };
    const std::vector<float> poison((size_t) ggml_nelements(n), NAN);
    auto poisoned = [&]() {
        std::vector<float> got(poison.size());
        ggml_backend_tensor_get(n, got.data(), 0, ggml_nbytes(n));
        for (float v : got) {
            if (!std::isnan(v)) return false;
        }
        return true;
    };

    ggml_backend_tensor_set(n, poison.data(), 0, ggml_nbytes(n));
    if (ggml_backend_graph_compute(meta, ga) != GGML_STATUS_SUCCESS) return fail("compute of A");
    if (!close(o, oref)) return fail("A: o differs from the reference");
    if (!poisoned()) return fail("A: n was written (the premise: A's plan folds the norm into the AllReduce)");
    printf("A: o matches, n not written (the norm folded into the AllReduce)\n");

    ggml_backend_tensor_set(n, poison.data(), 0, ggml_nbytes(n));
    if (ggml_backend_graph_compute(meta, &view) != GGML_STATUS_SUCCESS) return fail("compute of the view of B");
    if (!close(o, oref)) return fail("view of B: o differs from the reference");
    if (!close(n, nref)) return fail("view of B: n is not the norm (a plan kept from A?)");
    printf("view of B: o matches, n holds the norm\n");

    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    ggml_backend_buffer_free(wbuf);
    ggml_free(ctx_w);
    ggml_backend_free(meta);
    printf("meta_use_counts: PASS\n");
    return 0;
}
