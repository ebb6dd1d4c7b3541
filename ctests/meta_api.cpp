// meta_api: behaviour tests of the meta device's API, buffers and data transfers (ggml-ext.h,
// ggml-backend-impl.h), one case per run:
//
//   meta_api <case>
//
// The simple devices are the CPU device repeated N times (plus TESTGPU0 from test_device.c where
// two distinct devices are needed: device identity depends on their order). Every static tensor's
// split comes from a table keyed by tensor name (the meta device's split-state callback); names
// missing from the table are MIRRORED. Data checks compare bytes: what ggml_backend_tensor_get of
// the meta tensor returns, and what each device holds (ggml_backend_meta_buffer_simple_tensor +
// ggml_backend_tensor_get), against a host-side model of the split.
//
// Exit status 0 when every check of the case passed; otherwise each failed check is printed and
// the status is 1. Cases named abort_* must stop in ggml_abort (see meta_api.cmake); if one returns,
// it says so and exits 1.

#include "ggml-alloc.h"
#include "ggml-backend-impl.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "meta_split_state.h"
#include "ggml.h"
#include "test_device.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace {

// --- checks -----------------------------------------------------------------------------------

int g_failures = 0;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            g_failures++;                                                                  \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
        }                                                                                  \
    } while (0)

using Bytes = std::vector<uint8_t>;

// Reports the first differing byte, if any.
void same_bytes(const Bytes & got, const Bytes & want, const std::string & what) {
    CHECK(got.size() == want.size(), "%s: %zu bytes, expected %zu", what.c_str(), got.size(), want.size());
    for (size_t i = 0; i < got.size() && got.size() == want.size(); i++) {
        if (got[i] != want[i]) {
            CHECK(got[i] == want[i], "%s: byte %zu is 0x%02x, expected 0x%02x", what.c_str(), i, got[i], want[i]);
            return;
        }
    }
}

Bytes random_bytes(size_t n, uint32_t seed) {
    Bytes b(n);
    uint32_t s = seed * 2654435761u + 1;
    for (auto & x : b) x = (uint8_t) ((s = s * 1664525u + 1013904223u) >> 24);
    return b;
}

// F32 values as bytes (PARTIAL tensors are read as sums: they must hold real numbers).
Bytes float_bytes(size_t n_floats, float base) {
    Bytes b(n_floats * 4);
    for (size_t i = 0; i < n_floats; i++) {
        float v = base + 0.25f * (float) i - 0.5f * (float) (i % 3);
        memcpy(&b[i * 4], &v, 4);
    }
    return b;
}

// The meta API's own allocation of a context's tensors: an export of ggml 0.9.11; from 0.26 on
// ggml-alloc hands the tensor list to the meta buffer type's alloc_buffer_n.
ggml_backend_buffer_t alloc_meta(ggml_context * ctx, ggml_backend_buffer_type_t buft) {
#if GGML_BACKEND_RS_HAS_LIST_ALLOC
    return ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
#else
    return ggml_backend_meta_alloc_ctx_tensors_from_buft(ctx, buft);
#endif
}

// --- splits -----------------------------------------------------------------------------------

using State = ggml_backend_meta_split_state;
using Extents = std::vector<int64_t>;

State make_state(ggml_backend_meta_split_axis axis) {
    State s = meta_split_state_mirrored();
    s.axis = axis;
    return s;
}
State mirrored() { return make_state(GGML_BACKEND_SPLIT_AXIS_MIRRORED); }
State partial() { return make_state(GGML_BACKEND_SPLIT_AXIS_PARTIAL); }
// A split along `axis` in segments: segs[s][j] is segment s's extent on device j.
State dim(int axis, const std::vector<Extents> & segs) {
    State s = make_state((ggml_backend_meta_split_axis) axis);
    size_t k = 0;
    for (const auto & seg : segs)
        for (int64_t e : seg) s.ne[k++] = e;
    s.n_segments = (uint32_t) segs.size();
    return s;
}
State dim(int axis, const Extents & e) { return dim(axis, std::vector<Extents>{ e }); }

bool is_dim(const State & s) { return (int) s.axis >= 0 && (int) s.axis <= 3; }

// The segments of a dimension split, each repetition spelled out (ggml 0.26 writes a segment
// once with its repeat count nr; 0.9.11 has no repeats): segments(s, n)[k][j] is device j's extent.
std::vector<Extents> segments(const State & s, size_t n) {
    std::vector<Extents> out;
    for (uint32_t seg = 0; seg < s.n_segments; seg++) {
#if GGML_BACKEND_RS_HAS_SPLIT_NR
        const uint32_t repeats = s.nr[seg];
#else
        const uint32_t repeats = 1;
#endif
        for (uint32_t r = 0; r < repeats; r++) out.emplace_back(s.ne + seg * n, s.ne + (seg + 1) * n);
    }
    return out;
}

// Two states that place values alike describe alike, however their segments are written.
std::string describe(const State & s, size_t n) {
    std::string r = ggml_backend_meta_split_axis_name(s.axis);
    if (!is_dim(s)) return r;
    const std::vector<Extents> segs = segments(s, n);
    size_t k = 0;
    for (const Extents & seg : segs)
        for (int64_t e : seg) r += (k++ ? "," : "{") + std::to_string(e);
    return r + "}/" + std::to_string(segs.size());
}

using SplitTable = std::map<std::string, State>;

State table_split(const ggml_tensor * t, void * ud) {
    const SplitTable & table = *static_cast<const SplitTable *>(ud);
    auto it = table.find(ggml_get_name(t));
    return it == table.end() ? mirrored() : it->second;
}

// What device j holds of a contiguous tensor with host bytes `host`, split as `s` over n devices.
Bytes device_part(const ggml_tensor * t, const State & s, size_t n, size_t j, const Bytes & host) {
    if (s.axis == GGML_BACKEND_SPLIT_AXIS_MIRRORED) return host;
    if (s.axis == GGML_BACKEND_SPLIT_AXIS_PARTIAL) return j == 0 ? host : Bytes(host.size(), 0);
    // Work in units of one block along dimension 0 (one element for non-quantized types).
    const int axis = (int) s.axis;
    const size_t unit = ggml_type_size(t->type);
    const int64_t blck = ggml_blck_size(t->type);
    int64_t ne[4] = { t->ne[0] / blck, t->ne[1], t->ne[2], t->ne[3] };
    const int64_t scale = axis == 0 ? blck : 1;
    // host indices along the split axis that device j holds, in device order
    std::vector<int64_t> idx;
    int64_t host_start = 0;
    for (const Extents & seg : segments(s, n)) {
        for (size_t d = 0; d < n; d++) {
            int64_t len = seg[d] / scale;
            if (d == j)
                for (int64_t k = 0; k < len; k++) idx.push_back(host_start + k);
            host_start += len;
        }
    }
    int64_t dne[4] = { ne[0], ne[1], ne[2], ne[3] };
    dne[axis] = (int64_t) idx.size();
    Bytes out;
    for (int64_t i3 = 0; i3 < dne[3]; i3++)
        for (int64_t i2 = 0; i2 < dne[2]; i2++)
            for (int64_t i1 = 0; i1 < dne[1]; i1++)
                for (int64_t i0 = 0; i0 < dne[0]; i0++) {
                    int64_t i[4] = { i0, i1, i2, i3 };
                    i[axis] = idx[i[axis]];
                    size_t off = (size_t) (((i[3] * ne[2] + i[2]) * ne[1] + i[1]) * ne[0] + i[0]) * unit;
                    out.insert(out.end(), host.begin() + off, host.begin() + off + unit);
                }
    return out;
}

// --- fixtures ---------------------------------------------------------------------------------

ggml_backend_dev_t need(ggml_backend_dev_t d, const char * what) {
    if (!d) {
        fprintf(stderr, "meta_api: no %s device\n", what);
        exit(2);
    }
    return d;
}
ggml_backend_dev_t cpu_dev() { return need(ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU), "CPU"); }
ggml_backend_dev_t testgpu0() {
    test_device_register(1);
    return need(ggml_backend_dev_by_name("TESTGPU0"), "TESTGPU0");
}

// A meta device over the CPU device n times, with its own split table.
struct Meta {
    size_t n;
    SplitTable table;
    ggml_backend_dev_t dev;
    ggml_backend_buffer_type_t buft;

    explicit Meta(size_t n_devs) : n(n_devs) {
        std::vector<ggml_backend_dev_t> devs(n, cpu_dev());
        dev = ggml_backend_meta_device(devs.data(), n, table_split, &table);
        buft = ggml_backend_dev_buffer_type(dev);
    }
    Meta(const Meta &) = delete;
    Meta & operator=(const Meta &) = delete;
};

// Static tensors (weights, caches) of one context, allocated together in one meta buffer.
struct Weights {
    Meta & m;
    ggml_context * ctx;
    ggml_backend_buffer_t buf = nullptr;

    explicit Weights(Meta & meta) : m(meta), ctx(ggml_init({ 64 * ggml_tensor_overhead(), nullptr, true })) {}
    ~Weights() {
        if (buf) ggml_backend_buffer_free(buf);
        ggml_free(ctx);
    }
    ggml_tensor * add(const char * name, ggml_type type, std::array<int64_t, 4> ne, const State & s) {
        m.table[name] = s;
        ggml_tensor * t = ggml_new_tensor_4d(ctx, type, ne[0], ne[1], ne[2], ne[3]);
        ggml_set_name(t, name);
        return t;
    }
    // `generic`: through ggml-alloc's ggml_backend_alloc_ctx_tensors_from_buft (which, from
    // ggml 0.26 on, is the only way: the meta buffer type's alloc_buffer_n).
    ggml_backend_buffer_t alloc(bool generic = false) {
        buf = generic ? ggml_backend_alloc_ctx_tensors_from_buft(ctx, m.buft) : alloc_meta(ctx, m.buft);
        CHECK(buf && ggml_backend_buffer_is_meta(buf) && ggml_backend_buffer_get_type(buf) == m.buft &&
                  ggml_backend_meta_buffer_n_bufs(buf) == m.n, "allocation: not a meta buffer of %zu devices", m.n);
        return buf;
    }
    const State & split(const ggml_tensor * t) const { return m.table.at(ggml_get_name(t)); }
};

Bytes get(const ggml_tensor * t, size_t off, size_t size) {
    Bytes b(size);
    ggml_backend_tensor_get(t, b.data(), off, size);
    return b;
}
Bytes get(const ggml_tensor * t) { return get(t, 0, ggml_nbytes(t)); }
void set(ggml_tensor * t, const Bytes & b, size_t off = 0) { ggml_backend_tensor_set(t, b.data(), off, b.size()); }

// Every device holds its part of `host` (the meta tensor's full value) as split `s` says.
void check_devices(const ggml_tensor * t, const State & s, size_t n, const Bytes & host, const std::string & what) {
    for (size_t j = 0; j < n; j++) {
        const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(t, j);
        std::string w = what + ": '" + ggml_get_name(t) + "' on device " + std::to_string(j);
        CHECK(st != nullptr, "%s: no per-device tensor", w.c_str());
        if (!st) continue;
        Bytes want = device_part(t, s, n, j, host);
        CHECK(ggml_nbytes(st) == want.size(), "%s: %zu bytes, expected %zu", w.c_str(), ggml_nbytes(st), want.size());
        if (ggml_nbytes(st) == want.size() && !want.empty()) same_bytes(get(st), want, w);
    }
}

// The full value reads back, and every device holds its part.
void check_tensor(const ggml_tensor * t, const State & s, size_t n, const Bytes & host, const std::string & what) {
    same_bytes(get(t), host, what + ": get '" + ggml_get_name(t) + "'");
    check_devices(t, s, n, host, what);
}

void check_split_state(const ggml_tensor * t, bool assume_sync, const State & want, size_t n) {
    State got = ggml_backend_meta_get_split_state(t, assume_sync);
    CHECK(describe(got, n) == describe(want, n), "split state of '%s' (assume_sync=%d): %s, expected %s", ggml_get_name(t),
          (int) assume_sync, describe(got, n).c_str(), describe(want, n).c_str());
}

// --- 1. device and buffer type ----------------------------------------------------------------

int case_device() {
    ggml_backend_dev_t cpu = cpu_dev();
    SplitTable t1, t2;
    ggml_backend_dev_t two[2] = { cpu, cpu };
    ggml_backend_dev_t m = ggml_backend_meta_device(two, 2, table_split, &t1);
    CHECK(m != nullptr, "meta device");
    CHECK(ggml_backend_meta_device(two, 2, table_split, &t1) == m, "same arguments, same device");
    CHECK(ggml_backend_meta_device(two, 2, table_split, &t2) != m, "other userdata, other device");
    CHECK(ggml_backend_meta_device(two, 2, nullptr, &t1) != m, "other callback, other device");
    ggml_backend_dev_t three[3] = { cpu, cpu, cpu };
    ggml_backend_dev_t m3 = ggml_backend_meta_device(three, 3, table_split, &t1);
    CHECK(m3 != m, "other device count, other device");
    ggml_backend_dev_t g0 = testgpu0();
    ggml_backend_dev_t ab[2] = { cpu, g0 }, ba[2] = { g0, cpu };
    ggml_backend_dev_t mab = ggml_backend_meta_device(ab, 2, table_split, &t1);
    ggml_backend_dev_t mba = ggml_backend_meta_device(ba, 2, table_split, &t1);
    CHECK(mab != mba && mab != m, "order matters");
    CHECK(std::string(ggml_backend_dev_name(mab)) == "Meta(CPU,TESTGPU0)", "name %s", ggml_backend_dev_name(mab));
    CHECK(std::string(ggml_backend_dev_name(mba)) == "Meta(TESTGPU0,CPU)", "name %s", ggml_backend_dev_name(mba));

    // identity and accessors
    CHECK(std::string(ggml_backend_dev_name(m)) == "Meta(CPU,CPU)", "name %s", ggml_backend_dev_name(m));
    CHECK(std::string(ggml_backend_dev_name(m3)) == "Meta(CPU,CPU,CPU)", "name %s", ggml_backend_dev_name(m3));
    CHECK(strstr(ggml_backend_dev_description(m), ggml_backend_dev_description(cpu)) != nullptr,
          "description %s", ggml_backend_dev_description(m));
    CHECK(ggml_backend_dev_type(m) == GGML_BACKEND_DEVICE_TYPE_META, "type %d", (int) ggml_backend_dev_type(m));
    CHECK(ggml_backend_dev_is_meta(m) && ggml_backend_dev_is_meta(m3) && ggml_backend_dev_is_meta(mab), "is_meta");
    CHECK(!ggml_backend_dev_is_meta(cpu) && !ggml_backend_dev_is_meta(g0), "simple devices are not meta");
    CHECK(ggml_backend_meta_dev_n_devs(m) == 2 && ggml_backend_meta_dev_n_devs(m3) == 3, "n_devs");
    for (size_t j = 0; j < 3; j++) CHECK(ggml_backend_meta_dev_simple_dev(m3, j) == cpu, "simple_dev(%zu)", j);
    CHECK(ggml_backend_meta_dev_simple_dev(mba, 0) == g0 && ggml_backend_meta_dev_simple_dev(mba, 1) == cpu, "order");

    // props and memory
    ggml_backend_dev_props p;
    ggml_backend_dev_get_props(m, &p);
    size_t cf, ct, mf, mt;
    // What the split can place, counted as bytes on each device of an even split: one device
    // listed twice is one pool, half of it for each entry (upstream's meta device reports the
    // sum, 2 * cf, which no split of Meta(CPU,CPU) can hold); two devices offer the smaller
    // one's memory.
    ggml_backend_dev_memory(cpu, &cf, &ct);
    ggml_backend_dev_memory(m, &mf, &mt);
    CHECK(mf == cf / 2 && mt == ct / 2, "memory %zu/%zu, expected %zu/%zu (half a CPU)", mf, mt, cf / 2, ct / 2);
    CHECK(p.memory_free == mf && p.memory_total == mt, "props memory");
    ggml_backend_dev_memory(m3, &mf, &mt);
    CHECK(mf == cf / 3 && mt == ct / 3, "Meta(CPU,CPU,CPU) memory %zu/%zu, expected %zu/%zu", mf, mt, cf / 3, ct / 3);
    {
        // the test device's free memory follows its buffers, and its total bounds them
        size_t f0, t0, f1, t1;
        ggml_backend_buffer_type_t g0_buft = ggml_backend_dev_buffer_type(g0);
        ggml_backend_dev_memory(g0, &f0, &t0);
        ggml_backend_buffer_t b = ggml_backend_buft_alloc_buffer(g0_buft, 1 << 20);
        ggml_backend_dev_memory(g0, &f1, &t1);
        CHECK(b && t1 == t0 && f1 + (1 << 20) == f0, "TESTGPU0 memory %zu/%zu after 1 MiB, was %zu/%zu", f1, t1, f0, t0);
        CHECK(ggml_backend_buft_alloc_buffer(g0_buft, t0) == nullptr, "an allocation past TESTGPU0's memory");
        ggml_backend_buffer_free(b);
        ggml_backend_dev_memory(g0, &f1, &t1);
        CHECK(f1 == f0, "TESTGPU0 free memory %zu after the free, was %zu", f1, f0);
    }
    {
        size_t gf, gt;
        ggml_backend_dev_memory(g0, &gf, &gt);
        ggml_backend_dev_memory(mab, &mf, &mt);
        CHECK(mf == std::min(cf, gf) && mt == std::min(ct, gt), "Meta(CPU,TESTGPU0) memory %zu/%zu, "
              "expected %zu/%zu", mf, mt, std::min(cf, gf), std::min(ct, gt));
    }
    {
        // Sizes in the same unit: a weight split in halves takes what one device holds of it,
        // a mirrored one a whole copy; so does an op's result (a compute buffer is laid out on
        // every device like an unsplit one).
        t1["mem_split"] = dim(1, Extents{ 4, 4 });
        t1["mem_mirrored"] = mirrored();
        ggml_init_params ip = { 8 * ggml_tensor_overhead(), nullptr, true };
        ggml_context * ctx = ggml_init(ip);
        ggml_tensor * ws = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 8);
        ggml_set_name(ws, "mem_split");
        ggml_tensor * wm = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 64, 8);
        ggml_set_name(wm, "mem_mirrored");
        ggml_context * gctx = ggml_init(ip);
        ggml_tensor * sum = ggml_add(gctx, ws, wm);
        ggml_backend_buffer_type_t mbuft = ggml_backend_dev_buffer_type(m);
        const size_t whole = ggml_nbytes(ws), align = ggml_backend_buft_get_alignment(mbuft);
        const size_t half = (whole / 2 + align - 1) / align * align;
        CHECK(ggml_backend_buft_get_alloc_size(mbuft, ws) == half, "alloc size of a split weight %zu, expected %zu",
              ggml_backend_buft_get_alloc_size(mbuft, ws), half);
        CHECK(ggml_backend_buft_get_alloc_size(mbuft, wm) == whole, "alloc size of a mirrored weight %zu, expected %zu",
              ggml_backend_buft_get_alloc_size(mbuft, wm), whole);
        CHECK(ggml_backend_buft_get_alloc_size(mbuft, sum) == whole, "alloc size of a result %zu, expected %zu",
              ggml_backend_buft_get_alloc_size(mbuft, sum), whole);
        // and a buffer of them says what each device holds
        ggml_backend_buffer_t b = ggml_backend_alloc_ctx_tensors_from_buft(ctx, mbuft);
        CHECK(b && ggml_backend_buffer_get_size(b) == half + whole, "buffer of a split and a mirrored weight: %zu, "
              "expected %zu", b ? ggml_backend_buffer_get_size(b) : 0, half + whole);
        if (b) ggml_backend_buffer_free(b);
        ggml_free(gctx);
        ggml_free(ctx);
    }
    CHECK(std::string(p.name) == "Meta(CPU,CPU)" && p.type == GGML_BACKEND_DEVICE_TYPE_META, "props name/type");
    CHECK(!p.caps.host_buffer && !p.caps.events && !p.caps.buffer_from_host_ptr, "caps %d %d %d",
          (int) p.caps.host_buffer, (int) p.caps.events, (int) p.caps.buffer_from_host_ptr);
    CHECK(!p.caps.async, "async: no, as the CPU device");

    // buffer types
    ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(m);
    ggml_backend_buffer_type_t cpu_buft = ggml_backend_dev_buffer_type(cpu);
    CHECK(ggml_backend_buft_is_meta(buft) && !ggml_backend_buft_is_meta(cpu_buft), "buft_is_meta");
    CHECK(!ggml_backend_buft_is_host(buft), "meta buffer type claims host memory");
    CHECK(ggml_backend_buft_get_device(buft) == m, "buft device");
    CHECK(std::string(ggml_backend_buft_name(buft)) == "Meta(CPU,CPU)", "buft name %s", ggml_backend_buft_name(buft));
    CHECK(ggml_backend_buft_get_alignment(buft) == ggml_backend_buft_get_alignment(cpu_buft), "alignment");
    CHECK(ggml_backend_buft_get_max_size(buft) == ggml_backend_buft_get_max_size(cpu_buft), "max size");
    CHECK(ggml_backend_meta_buft_n_bufts(buft) == 2, "n_bufts");
    CHECK(ggml_backend_meta_buft_simple_buft(buft, 0) == cpu_buft && ggml_backend_meta_buft_simple_buft(buft, 1) == cpu_buft,
          "simple_buft");
    ggml_backend_buffer_type_t buft_ab = ggml_backend_dev_buffer_type(mab);
    size_t a_cpu = ggml_backend_buft_get_alignment(cpu_buft);
    size_t a_g0 = ggml_backend_buft_get_alignment(ggml_backend_dev_buffer_type(g0));
    CHECK(ggml_backend_buft_get_alignment(buft_ab) == std::max(a_cpu, a_g0), "alignment %zu, expected max(%zu,%zu)",
          ggml_backend_buft_get_alignment(buft_ab), a_cpu, a_g0);
    CHECK(ggml_backend_meta_buft_simple_buft(buft_ab, 1) == ggml_backend_dev_buffer_type(g0), "simple_buft of TESTGPU0");

    // who supports which buffer type
    CHECK(!ggml_backend_dev_supports_buft(cpu, buft), "the CPU device accepts a meta buffer type");
    CHECK(!ggml_backend_dev_supports_buft(m, cpu_buft), "the meta device accepts the CPU buffer type");
    CHECK(ggml_backend_dev_supports_buft(m, buft), "the meta device refuses its own buffer type");
    CHECK(ggml_backend_dev_supports_buft(mab, buft_ab), "Meta(CPU,TESTGPU0) refuses its own buffer type");
    CHECK(!ggml_backend_dev_supports_buft(mab, ggml_backend_dev_buffer_type(mba)), "order ignored by supports_buft");
    CHECK(!ggml_backend_dev_supports_buft(m, ggml_backend_dev_buffer_type(m3)), "count ignored by supports_buft");

    // axis names
    const std::pair<ggml_backend_meta_split_axis, const char *> names[] = {
        { GGML_BACKEND_SPLIT_AXIS_0, "0" },          { GGML_BACKEND_SPLIT_AXIS_1, "1" },
        { GGML_BACKEND_SPLIT_AXIS_2, "2" },          { GGML_BACKEND_SPLIT_AXIS_3, "3" },
        { GGML_BACKEND_SPLIT_AXIS_MIRRORED, "MIRRORED" }, { GGML_BACKEND_SPLIT_AXIS_PARTIAL, "PARTIAL" },
        { GGML_BACKEND_SPLIT_AXIS_NONE, "NONE" },    { GGML_BACKEND_SPLIT_AXIS_UNKNOWN, "UNKNOWN" },
    };
    for (const auto & a : names) {
        const char * got = ggml_backend_meta_split_axis_name(a.first);
        CHECK(got && std::string(got) == a.second, "axis %d name %s, expected %s", (int) a.first, got ? got : "NULL", a.second);
    }
    return g_failures;
}

// --- 2. backend -------------------------------------------------------------------------------

int case_backend() {
    Meta m(2);
    ggml_backend_t b = ggml_backend_dev_init(m.dev, nullptr);
    CHECK(b != nullptr, "no meta backend");
    if (!b) return g_failures;
    CHECK(ggml_backend_is_meta(b), "is_meta");
    CHECK(ggml_backend_get_device(b) == m.dev, "backend device");
    CHECK(std::string(ggml_backend_name(b)) == "Meta(CPU,CPU)", "name %s", ggml_backend_name(b));
    CHECK(ggml_backend_meta_n_backends(b) == 2, "n_backends %zu", ggml_backend_meta_n_backends(b));
    ggml_backend_t s0 = ggml_backend_meta_simple_backend(b, 0), s1 = ggml_backend_meta_simple_backend(b, 1);
    CHECK(s0 && s1 && s0 != s1 && s0 != b, "simple backends must be distinct");
    CHECK(ggml_backend_is_cpu(s0) && ggml_backend_is_cpu(s1), "simple backends are CPU backends");
    CHECK(!ggml_backend_is_meta(s0) && ggml_backend_get_device(s0) == cpu_dev(), "simple backend 0");
    CHECK(ggml_backend_get_default_buffer_type(b) == m.buft, "default buffer type");

    ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(m.dev);
    CHECK(reg != nullptr, "meta device has no registry");
    if (reg) {
        CHECK(ggml_backend_reg_dev_count(reg) == 0, "the meta registry lists devices");
        auto set_n_threads = (void (*)(ggml_backend_t, int)) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
        CHECK(set_n_threads != nullptr, "no ggml_backend_set_n_threads");
        CHECK(ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_abort_callback") != nullptr, "no set_abort_callback");
        CHECK(ggml_backend_reg_get_proc_address(reg, "no_such_function") == nullptr, "unknown name answered");
        if (set_n_threads) {
            set_n_threads(b, 4);
            set_n_threads(s0, 2); // a simple backend: ignored
        }
    }
    ggml_backend_synchronize(b);

    Meta m3(3);
    ggml_backend_t b3 = ggml_backend_dev_init(m3.dev, nullptr);
    CHECK(b3 && ggml_backend_meta_n_backends(b3) == 3, "three simple backends");
    ggml_backend_t t0 = ggml_backend_meta_simple_backend(b3, 0), t1 = ggml_backend_meta_simple_backend(b3, 1),
                   t2 = ggml_backend_meta_simple_backend(b3, 2);
    CHECK(t0 != t1 && t1 != t2 && t0 != t2, "simple backends of a 3-device meta backend must be distinct");
    ggml_backend_free(b3);
    ggml_backend_free(b);
    return g_failures;
}

// --- 3. set/get round trips -------------------------------------------------------------------

// Full set/get, device contents, split state, then writes of byte ranges that are not whole rows.
void round_trip(Weights & w, ggml_tensor * t, uint32_t seed) {
    const State & s = w.split(t);
    const size_t n = w.m.n, nb = ggml_nbytes(t);
    Bytes host = random_bytes(nb, seed);
    set(t, host);
    check_tensor(t, s, n, host, "full set");
    check_split_state(t, false, s, n);
    check_split_state(t, true, s, n);
    const std::pair<size_t, size_t> ranges[] = { { 12, 28 }, { nb / 3 + 1, nb / 3 }, { nb - 5, 5 }, { 0, 7 } };
    for (auto r : ranges) {
        if (r.first + r.second > nb) continue;
        Bytes patch = random_bytes(r.second, seed * 31 + (uint32_t) r.first);
        set(t, patch, r.first);
        std::copy(patch.begin(), patch.end(), host.begin() + r.first);
        std::string what = "range " + std::to_string(r.first) + "+" + std::to_string(r.second);
        same_bytes(get(t, r.first, r.second), patch, what + ": get of the range of '" + ggml_get_name(t) + "'");
        check_tensor(t, s, n, host, what);
    }
}

int case_set_get() {
    Meta m(3);
    Weights w(m);
    std::vector<ggml_tensor *> ts = {
        w.add("a0_f32", GGML_TYPE_F32, { 10, 4, 1, 1 }, dim(0, { 3, 0, 7 })),
        w.add("a0_f16", GGML_TYPE_F16, { 12, 3, 2, 1 }, dim(0, { 5, 4, 3 })),
        w.add("a1", GGML_TYPE_F32, { 4, 9, 2, 1 }, dim(1, { 2, 3, 4 })),
        w.add("a2", GGML_TYPE_F32, { 3, 2, 6, 1 }, dim(2, { 0, 2, 4 })),
        w.add("a3", GGML_TYPE_F32, { 2, 3, 2, 5 }, dim(3, { 1, 3, 1 })),
        w.add("mirrored", GGML_TYPE_F32, { 5, 3, 1, 1 }, mirrored()),
        // fused QKV: rows Q 6, K 3, V 3; device j holds [Q_j][K_j][V_j]
        w.add("qkv", GGML_TYPE_F32, { 8, 12, 1, 1 }, dim(1, { { 2, 1, 3 }, { 1, 0, 2 }, { 1, 1, 1 } })),
        // two segments along dimension 0 (fused gate/up in columns): each row [g_j][u_j]
        w.add("gate_up", GGML_TYPE_F32, { 12, 3, 1, 1 }, dim(0, { { 2, 2, 2 }, { 4, 0, 2 } })),
        w.add("q8", GGML_TYPE_Q8_0, { 128, 3, 1, 1 }, dim(0, { 32, 0, 96 })),
    };
#if GGML_BACKEND_RS_HAS_SPLIT_NR
    // ggml 0.26's repeated segments: the same QKV layout written as {Q, 1}, {K/V, 2}
    State qkv_nr = dim(1, { { 1, 0, 2 }, { 1, 1, 1 } });
    qkv_nr.nr[1] = 2;
    ggml_tensor * qkv_rep = w.add("qkv_nr", GGML_TYPE_F32, { 8, 9, 1, 1 }, qkv_nr);
    ts.push_back(qkv_rep);
#endif
    ggml_backend_buffer_t buf = w.alloc();
    if (!buf) return g_failures;
    ggml_tensor * qkv = ts[6];
    // per-device shapes: the split dimension holds the device's extents over all segments
    const int64_t qkv_rows[3] = { 4, 2, 6 };
    for (size_t j = 0; j < 3; j++) {
        const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(qkv, j);
        CHECK(st && st->ne[0] == 8 && st->ne[1] == qkv_rows[j], "qkv device %zu shape", j);
        CHECK(st && ggml_backend_buffer_get_type(st->buffer) == ggml_backend_dev_buffer_type(cpu_dev()), "qkv device %zu buffer", j);
    }
    for (size_t i = 0; i < ts.size(); i++) round_trip(w, ts[i], (uint32_t) i + 1);
#if GGML_BACKEND_RS_HAS_SPLIT_NR
    {
        // read back as written: the repeat kept, not spelled out
        const State got = ggml_backend_meta_get_split_state(qkv_rep, true);
        CHECK(got.n_segments == 2 && got.nr[0] == 1 && got.nr[1] == 2 && got.ne[3] == 1 && got.ne[5] == 1,
              "qkv_nr reads back as %u segments, repeats {%u,%u}", got.n_segments, got.nr[0], got.nr[1]);
        const int64_t rows[3] = { 3, 2, 4 };
        for (size_t j = 0; j < 3; j++) {
            const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(qkv_rep, j);
            CHECK(st && st->ne[1] == rows[j], "qkv_nr device %zu holds %lld rows, expected %lld", j,
                  st ? (long long) st->ne[1] : -1LL, (long long) rows[j]);
        }
    }
#endif

    // Explicit QKV layout: row r of the host tensor holds value r in every column.
    {
        std::vector<float> host(8 * 12);
        for (size_t i = 0; i < host.size(); i++) host[i] = (float) (i / 8);
        ggml_backend_tensor_set(qkv, host.data(), 0, host.size() * 4);
        const std::vector<std::vector<int>> rows = { { 0, 1, 6, 9 }, { 2, 10 }, { 3, 4, 5, 7, 8, 11 } };
        for (size_t j = 0; j < 3; j++) {
            const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(qkv, j);
            if (!st || st->ne[1] != (int64_t) rows[j].size()) continue; // reported above
            std::vector<float> got(8 * rows[j].size());
            ggml_backend_tensor_get(st, got.data(), 0, got.size() * 4);
            for (size_t r = 0; r < rows[j].size(); r++)
                CHECK(got[r * 8] == (float) rows[j][r] && got[r * 8 + 7] == (float) rows[j][r],
                      "qkv device %zu row %zu holds host row %g, expected %d", j, r, got[r * 8], rows[j][r]);
        }
    }

    // ggml-alloc's generic entry dispatches to the meta allocation: slices packed per device.
    Weights w2(m);
    ggml_tensor * b0 = w2.add("b0", GGML_TYPE_F32, { 6, 3, 1, 1 }, dim(0, { 2, 4, 0 }));
    ggml_backend_buffer_t buf2 = w2.alloc(/*generic=*/true);
    if (buf2) {
        ggml_backend_buffer_t s0 = ggml_backend_meta_buffer_simple_buffer(buf2, 0);
        ggml_backend_buffer_t s1 = ggml_backend_meta_buffer_simple_buffer(buf2, 1);
        CHECK(s0 && ggml_backend_buffer_get_size(s0) == 2 * 3 * 4, "device 0: %zu bytes, expected 24",
              s0 ? ggml_backend_buffer_get_size(s0) : 0);
        CHECK(s1 && ggml_backend_buffer_get_size(s1) == 4 * 3 * 4, "device 1: %zu bytes, expected 48",
              s1 ? ggml_backend_buffer_get_size(s1) : 0);
        // a device whose slices are all empty still gets a minimal buffer (one alignment unit),
        // so that its empty tensors have a buffer and an address like any other
        ggml_backend_buffer_t s2 = ggml_backend_meta_buffer_simple_buffer(buf2, 2);
        CHECK(s2 && ggml_backend_buffer_get_size(s2) == ggml_backend_buft_get_alignment(ggml_backend_buffer_get_type(s2)),
              "device 2: %zu bytes, expected one alignment unit", s2 ? ggml_backend_buffer_get_size(s2) : 0);
        CHECK(ggml_backend_meta_buffer_simple_tensor(b0, 2) && ggml_backend_meta_buffer_simple_tensor(b0, 2)->buffer == s2,
              "device 2's empty slice is not in device 2's buffer");
        round_trip(w2, b0, 100);
    }
    return g_failures;
}

// --- 4. PARTIAL -------------------------------------------------------------------------------

int case_partial() {
    Meta m(3);
    Weights w(m);
    ggml_tensor * t = w.add("bias", GGML_TYPE_F32, { 7, 3, 1, 1 }, partial());
    if (!w.alloc()) return g_failures;
    Bytes host = float_bytes(21, 1.5f);
    set(t, host);
    check_tensor(t, partial(), 3, host, "PARTIAL set");
    check_split_state(t, false, partial(), 3);
    check_split_state(t, true, partial(), 3);
    // a range of whole floats: device 0 takes the values, the others zeros there
    Bytes patch = float_bytes(4, -7.0f);
    set(t, patch, 8);
    std::copy(patch.begin(), patch.end(), host.begin() + 8);
    check_tensor(t, partial(), 3, host, "PARTIAL range set");
    same_bytes(get(t, 8, 16), patch, "PARTIAL range get");
    // the value is the sum over devices: put 2.0 on device 2 at element 5, 0.5 on device 1 at 0
    float two = 2.0f, half = 0.5f, want[21], got[21], one;
    ggml_backend_tensor_set(ggml_backend_meta_buffer_simple_tensor(t, 2), &two, 5 * 4, 4);
    ggml_backend_tensor_set(ggml_backend_meta_buffer_simple_tensor(t, 1), &half, 0, 4);
    memcpy(want, host.data(), sizeof(want));
    want[5] += 2.0f, want[0] += 0.5f;
    ggml_backend_tensor_get(t, got, 0, sizeof(got));
    for (int i = 0; i < 21; i++) CHECK(got[i] == want[i], "element %d reads %g, expected the sum %g", i, got[i], want[i]);
    ggml_backend_tensor_get(t, &one, 5 * 4, 4);
    CHECK(one == want[5], "element 5 alone reads %g, expected %g", one, want[5]);
    return g_failures;
}

// --- 5. memset, clear, usage ------------------------------------------------------------------

int case_memset() {
    Meta m(3);
    Weights w(m);
    ggml_tensor * a0 = w.add("m_axis0", GGML_TYPE_F32, { 10, 4, 1, 1 }, dim(0, { 3, 0, 7 }));
    ggml_tensor * mm = w.add("m_mirrored", GGML_TYPE_F32, { 5, 3, 1, 1 }, mirrored());
    ggml_tensor * mp = w.add("m_partial", GGML_TYPE_F32, { 6, 2, 1, 1 }, partial());
    ggml_backend_buffer_t buf = w.alloc();
    if (!buf) return g_failures;

    for (ggml_tensor * t : { a0, mm, mp }) {
        const State & s = w.split(t);
        const size_t nb = ggml_nbytes(t);
        Bytes host = t == mp ? float_bytes(nb / 4, 3.0f) : random_bytes(nb, 7);
        set(t, host);
        // a range of whole floats (PARTIAL reads sums of floats) that is not whole rows
        const size_t off = 8, size = 20;
        ggml_backend_tensor_memset(t, 0x3f, off, size);
        std::fill(host.begin() + off, host.begin() + off + size, 0x3f);
        check_tensor(t, s, 3, host, "memset range");
        ggml_backend_tensor_memset(t, 0x40, 0, nb);
        std::fill(host.begin(), host.end(), 0x40);
        check_tensor(t, s, 3, host, "memset full");
    }
    // odd byte range of a split tensor
    ggml_backend_tensor_memset(a0, 0xab, 13, 29);
    Bytes h0(ggml_nbytes(a0), 0x40);
    std::fill(h0.begin() + 13, h0.begin() + 42, 0xab);
    check_tensor(a0, w.split(a0), 3, h0, "memset 13+29");

    // clear: every simple buffer is cleared, so every device holds the value everywhere
    ggml_backend_buffer_clear(buf, 0x5a);
    for (ggml_tensor * t : { a0, mm, mp })
        for (size_t j = 0; j < 3; j++) {
            const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(t, j);
            if (st && ggml_nbytes(st) > 0)
                same_bytes(get(st), Bytes(ggml_nbytes(st), 0x5a),
                           std::string("clear: '") + ggml_get_name(t) + "' on device " + std::to_string(j));
        }
    same_bytes(get(a0), Bytes(ggml_nbytes(a0), 0x5a), "clear: get of m_axis0");
    same_bytes(get(mm), Bytes(ggml_nbytes(mm), 0x5a), "clear: get of m_mirrored");

    // usage reaches the simple buffers
    for (auto usage : { GGML_BACKEND_BUFFER_USAGE_WEIGHTS, GGML_BACKEND_BUFFER_USAGE_ANY }) {
        ggml_backend_buffer_set_usage(buf, usage);
        CHECK(ggml_backend_buffer_get_usage(buf) == usage, "meta buffer usage");
        for (size_t j = 0; j < 3; j++) {
            ggml_backend_buffer_t sb = ggml_backend_meta_buffer_simple_buffer(buf, j);
            CHECK(sb != nullptr, "device %zu has no buffer", j);
            if (sb) CHECK(ggml_backend_buffer_get_usage(sb) == usage, "device %zu usage %d, expected %d", j,
                          (int) ggml_backend_buffer_get_usage(sb), (int) usage);
        }
    }
    return g_failures;
}

// --- 6. copies --------------------------------------------------------------------------------

// `extents`: the AXIS_0 split of the source and of the same-split destination.
int copies(const Extents & extents) {
    Meta m(3);
    Weights wa(m), wb(m);
    const std::array<int64_t, 4> ne = { 8, 5, 1, 1 };
    ggml_tensor * src = wa.add("c_src", GGML_TYPE_F32, ne, dim(0, extents));
    ggml_tensor * src_p = wa.add("c_src_partial", GGML_TYPE_F32, ne, partial());
    ggml_tensor * same = wb.add("c_same", GGML_TYPE_F32, ne, dim(0, extents));
    ggml_tensor * other = wb.add("c_other", GGML_TYPE_F32, ne, dim(1, { 2, 2, 1 }));
    ggml_tensor * mir = wb.add("c_mirrored", GGML_TYPE_F32, ne, mirrored());
    if (!wa.alloc() || !wb.alloc()) return g_failures;

    // a plain CPU tensor of the same shape
    ggml_context * cctx = ggml_init({ 4 * ggml_tensor_overhead(), nullptr, true });
    ggml_tensor * host_t = ggml_new_tensor_2d(cctx, GGML_TYPE_F32, ne[0], ne[1]);
    ggml_backend_buffer_t cbuf = ggml_backend_alloc_ctx_tensors_from_buft(cctx, ggml_backend_dev_buffer_type(cpu_dev()));
    const size_t nb = ggml_nbytes(src);

    Bytes v = float_bytes(nb / 4, 0.75f);
    set(src, v);
    ggml_backend_tensor_copy(src, same); // same split: device by device
    check_tensor(same, wb.split(same), 3, v, "copy meta->meta (same split)");
    ggml_backend_tensor_copy(src, other); // different splits: through the host
    check_tensor(other, wb.split(other), 3, v, "copy meta->meta (AXIS_0 -> AXIS_1)");
    ggml_backend_tensor_copy(other, mir);
    check_tensor(mir, wb.split(mir), 3, v, "copy meta->meta (AXIS_1 -> MIRRORED)");
    ggml_backend_tensor_copy(src, host_t);
    same_bytes(Bytes((uint8_t *) host_t->data, (uint8_t *) host_t->data + nb), v, "copy meta->CPU");

    Bytes v2 = float_bytes(nb / 4, -2.0f);
    memcpy(host_t->data, v2.data(), nb);
    ggml_backend_tensor_copy(host_t, src);
    check_tensor(src, wa.split(src), 3, v2, "copy CPU->meta");
    ggml_backend_tensor_copy(host_t, src_p);
    check_tensor(src_p, partial(), 3, v2, "copy CPU->meta (PARTIAL)");
    // PARTIAL read out as its sum
    float one = 1.0f;
    ggml_backend_tensor_set(ggml_backend_meta_buffer_simple_tensor(src_p, 1), &one, 0, 4);
    ggml_backend_tensor_copy(src_p, host_t);
    float first, got0 = ((float *) host_t->data)[0];
    memcpy(&first, v2.data(), 4);
    CHECK(got0 == first + 1.0f, "copy PARTIAL->CPU: element 0 is %g, expected the sum %g", got0, first + 1.0f);
    same_bytes(Bytes((uint8_t *) host_t->data + 4, (uint8_t *) host_t->data + nb), Bytes(v2.begin() + 4, v2.end()),
               "copy PARTIAL->CPU (rest)");

    ggml_backend_buffer_free(cbuf);
    ggml_free(cctx);
    return g_failures;
}

// --- 7. asynchronous transfers ----------------------------------------------------------------

int case_async() {
    Meta m(3);
    Weights w(m);
    ggml_tensor * a1 = w.add("s_axis1", GGML_TYPE_F32, { 5, 7, 2, 1 }, dim(1, { 3, 0, 4 }));
    ggml_tensor * mm = w.add("s_mirrored", GGML_TYPE_F32, { 6, 4, 1, 1 }, mirrored());
    ggml_tensor * mp = w.add("s_partial", GGML_TYPE_F32, { 6, 4, 1, 1 }, partial());
    if (!w.alloc()) return g_failures;
    ggml_backend_t b = ggml_backend_dev_init(m.dev, nullptr);
    CHECK(b != nullptr, "no meta backend");
    if (!b) return g_failures;
    auto set_async = [b](ggml_tensor * t, const Bytes & v, size_t off) {
        ggml_backend_tensor_set_async(b, t, v.data(), off, v.size());
        ggml_backend_synchronize(b);
    };
    auto get_async = [b](ggml_tensor * t, size_t off, size_t size) {
        Bytes v(size);
        ggml_backend_tensor_get_async(b, t, v.data(), off, size);
        ggml_backend_synchronize(b);
        return v;
    };
    for (ggml_tensor * t : { a1, mm, mp }) {
        const std::string name = ggml_get_name(t);
        Bytes host = float_bytes(ggml_nbytes(t) / 4, 9.0f);
        set_async(t, host, 0);
        check_devices(t, w.split(t), 3, host, "set_async");
        same_bytes(get_async(t, 0, host.size()), host, "get_async of '" + name + "'");
        // a range of whole floats, not whole rows
        const size_t off = 12, size = 36;
        Bytes patch = float_bytes(size / 4, -4.0f);
        set_async(t, patch, off);
        std::copy(patch.begin(), patch.end(), host.begin() + off);
        check_tensor(t, w.split(t), 3, host, "set_async range");
        same_bytes(get_async(t, off, size), patch, "get_async range of '" + name + "'");
    }
    ggml_backend_free(b);
    return g_failures;
}

// --- 8. bad input (each must stop in ggml_abort) ----------------------------------------------

int did_not_abort(const std::string & what) {
    fprintf(stderr, "meta_api: %s did not abort\n", what.c_str());
    return 1;
}

// A tensor named "bad" of 4 rows, split as `s` over 2 devices: allocating it must abort.
int abort_bad_split(State s, const char * what) {
    Meta m(2);
    Weights w(m);
    w.add("bad", GGML_TYPE_F32, { 8, 4, 1, 1 }, s);
    w.alloc();
    return did_not_abort(what);
}

State with_axis(State s, int axis) {
    s.axis = (ggml_backend_meta_split_axis) axis;
    return s;
}

// A weight placed as {2,2} rows whose callback then answers {1,3}: initialising it again must
// stop (its slices cannot move), while a second initialisation with the same answer keeps them.
int abort_split_changes() {
    Meta m(2);
    Weights w(m);
    ggml_tensor * t = w.add("w", GGML_TYPE_F32, { 8, 4, 1, 1 }, dim(1, { 2, 2 }));
    w.alloc();
    std::vector<float> data(32);
    for (size_t i = 0; i < data.size(); i++) data[i] = (float) i;
    ggml_backend_tensor_set(t, data.data(), 0, ggml_nbytes(t));
    CHECK(ggml_backend_buffer_init_tensor(w.buf, t) == GGML_STATUS_SUCCESS, "initialising again");
    std::vector<float> back(32);
    ggml_backend_tensor_get(t, back.data(), 0, ggml_nbytes(t));
    CHECK(back == data, "a second initialisation with the same split moved the slices");
    m.table["w"] = dim(1, { 1, 3 });
    ggml_backend_buffer_init_tensor(w.buf, t);
    return did_not_abort("a split-state callback that changed its answer");
}

// The same, when the policy is asked again because the weight was renamed: a transfer of it
// must stop, not scatter its bytes as the new answer says into slices placed for the old one.
int abort_split_changes_renamed() {
    Meta m(2);
    Weights w(m);
    ggml_tensor * t = w.add("w", GGML_TYPE_F32, { 8, 4, 1, 1 }, dim(1, { 2, 2 }));
    w.alloc();
    std::vector<float> data(32, 1.0f);
    ggml_backend_tensor_set(t, data.data(), 0, ggml_nbytes(t));
    m.table["w2"] = dim(1, { 1, 3 });
    ggml_set_name(t, "w2");
    ggml_backend_tensor_set(t, data.data(), 0, ggml_nbytes(t));
    return did_not_abort("a transfer after the split-state callback changed its answer");
}

int abort_null_device() {
    ggml_backend_dev_t devs[2] = { cpu_dev(), nullptr };
    SplitTable t;
    ggml_backend_meta_device(devs, 2, table_split, &t);
    return did_not_abort("ggml_backend_meta_device with a NULL device");
}

int abort_nested() {
    ggml_backend_dev_t two[2] = { cpu_dev(), cpu_dev() };
    SplitTable t;
    ggml_backend_dev_t inner = ggml_backend_meta_device(two, 2, table_split, &t);
    ggml_backend_dev_t outer[2] = { inner, cpu_dev() };
    ggml_backend_meta_device(outer, 2, table_split, &t);
    return did_not_abort("a meta device over a meta device");
}

// Without a split-state callback every weight and cache is mirrored: each device holds all of it.
int null_callback() {
    ggml_backend_dev_t two[2] = { cpu_dev(), cpu_dev() };
    ggml_backend_dev_t dev = ggml_backend_meta_device(two, 2, nullptr, nullptr);
    ggml_context * ctx = ggml_init({ 8 * ggml_tensor_overhead(), nullptr, true });
    ggml_tensor * w = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 8, 4);
    ggml_set_name(w, "blk.0.attn_q.weight");
    ggml_backend_buffer_t buf = alloc_meta(ctx, ggml_backend_dev_buffer_type(dev));
    CHECK(buf != nullptr, "allocation");
    CHECK(ggml_backend_meta_get_split_state(w, false).axis == GGML_BACKEND_SPLIT_AXIS_MIRRORED, "not mirrored");
    for (size_t j = 0; j < 2; j++) {
        const ggml_tensor * s = ggml_backend_meta_buffer_simple_tensor(w, j);
        CHECK(s != nullptr && ggml_nelements(s) == 32, "device %zu holds %lld elements", j,
              s ? (long long) ggml_nelements(s) : -1LL);
    }
    ggml_backend_buffer_free(buf);
    ggml_free(ctx);
    return 0;
}

int abort_n_devs(size_t n) {
    std::vector<ggml_backend_dev_t> devs(17, cpu_dev());
    SplitTable t;
    ggml_backend_meta_device(devs.data(), n, table_split, &t);
    return did_not_abort("ggml_backend_meta_device with n_devs " + std::to_string(n));
}

// --- 9. split states of compute tensors -------------------------------------------------------

// out[r, c] = sum_k w[r*K + k] * x[c*K + k]
std::vector<double> matmul_ref(const Bytes & w, const Bytes & x, int64_t K, int64_t R, int64_t C) {
    std::vector<double> out(R * C, 0.0);
    const float *wf = (const float *) w.data(), *xf = (const float *) x.data();
    for (int64_t c = 0; c < C; c++)
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < K; k++) out[c * R + r] += (double) wf[r * K + k] * xf[c * K + k];
    return out;
}

void check_values(const ggml_tensor * t, const std::vector<double> & want) {
    std::vector<float> got(ggml_nelements(t));
    ggml_backend_tensor_get(t, got.data(), 0, got.size() * 4);
    double max_err = 0;
    for (size_t i = 0; i < got.size(); i++) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
    CHECK(max_err < 1e-4, "'%s': max abs error %g", ggml_get_name(t), max_err);
}

int case_compute_split() {
    const int64_t K = 64, R = 48, T = 5;
    Meta m(3);
    Weights w(m);
    ggml_tensor * w1 = w.add("w_rows", GGML_TYPE_F32, { K, R, 1, 1 }, dim(1, { 16, 0, 32 }));
    ggml_tensor * x = w.add("x", GGML_TYPE_F32, { K, T, 1, 1 }, mirrored());
    ggml_tensor * w0 = w.add("w_cols", GGML_TYPE_F32, { K, R, 1, 1 }, dim(0, { 32, 0, 32 }));
    ggml_tensor * x0 = w.add("x_cols", GGML_TYPE_F32, { K, T, 1, 1 }, dim(0, { 32, 0, 32 }));
    if (!w.alloc()) return g_failures;
    Bytes vw1 = float_bytes(K * R, -3.0f), vx = float_bytes(K * T, 0.125f);
    Bytes vw0 = float_bytes(K * R, 1.0f), vx0 = float_bytes(K * T, -0.5f);
    for (auto & b : { &vw1, &vx, &vw0, &vx0 }) // keep products moderate
        for (size_t i = 0; i < b->size() / 4; i++) ((float *) b->data())[i] *= 0.01f;
    set(w1, vw1), set(x, vx), set(w0, vw0), set(x0, vx0);

    ggml_context * ctx = ggml_init({ 16 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true });
    ggml_tensor * rows = ggml_mul_mat(ctx, w1, x); // output rows split with the weight's rows
    ggml_set_name(rows, "out_rows");
    ggml_tensor * sum = ggml_mul_mat(ctx, w0, x0); // contraction split: partial sums
    ggml_set_name(sum, "out_sum");
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, rows);
    ggml_build_forward_expand(gf, sum);
    ggml_gallocr_t galloc = ggml_gallocr_new(m.buft);
    CHECK(ggml_gallocr_alloc_graph(galloc, gf), "gallocr failed");

    check_split_state(rows, true, dim(0, { 16, 0, 32 }), 3);
    check_split_state(rows, false, dim(0, { 16, 0, 32 }), 3);
    check_split_state(sum, false, partial(), 3);
    check_split_state(sum, true, mirrored(), 3);
    for (size_t j = 0; j < 3; j++) {
        const ggml_tensor * st = ggml_backend_meta_buffer_simple_tensor(rows, j);
        const int64_t want = j == 0 ? 16 : j == 1 ? 0 : 32;
        CHECK(st && st->ne[0] == want && st->ne[1] == T, "out_rows device %zu shape", j);
        st = ggml_backend_meta_buffer_simple_tensor(sum, j);
        CHECK(st && st->ne[0] == R && st->ne[1] == T, "out_sum device %zu shape (each device the full result)", j);
    }

    ggml_backend_t b = ggml_backend_dev_init(m.dev, nullptr);
    CHECK(b && ggml_backend_graph_compute(b, gf) == GGML_STATUS_SUCCESS, "compute failed");
    check_values(rows, matmul_ref(vw1, vx, K, R, T));
    check_values(sum, matmul_ref(vw0, vx0, K, R, T));

    ggml_backend_free(b);
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    return g_failures;
}

// A result allocated with its sources in one context (as ggml's test-backend-ops does) that
// cannot be computed over the callback's splits: W split by rows times X split by tokens. The
// device places the nearest source whose whole copy makes it computable whole instead (X, the
// input, before W), keeps W's split, and computes W's rows of the result.
int case_settle() {
    const int64_t K = 64, R = 32, T = 4;
    Meta m(2);
    Weights w(m);
    ggml_tensor * wt = w.add("W", GGML_TYPE_F32, { K, R, 1, 1 }, dim(1, { 16, 16 }));
    ggml_tensor * x = w.add("X", GGML_TYPE_F32, { K, T, 1, 1 }, dim(1, { 2, 2 }));
    ggml_tensor * out = ggml_mul_mat(w.ctx, wt, x);
    ggml_set_name(out, "out");
    if (!w.alloc()) return g_failures;
    check_split_state(wt, false, dim(1, { 16, 16 }), 2);
    check_split_state(x, false, mirrored(), 2);
    check_split_state(out, false, dim(0, { 16, 16 }), 2);
    Bytes vw = float_bytes(K * R, 0.5f), vx = float_bytes(K * T, -0.25f);
    for (auto & b : { &vw, &vx })
        for (size_t i = 0; i < b->size() / 4; i++) ((float *) b->data())[i] *= 0.01f;
    set(wt, vw), set(x, vx);
    ggml_context * ctx = ggml_init({ ggml_graph_overhead(), nullptr, true });
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    ggml_backend_t b = ggml_backend_dev_init(m.dev, nullptr);
    CHECK(b && ggml_backend_graph_compute(b, gf) == GGML_STATUS_SUCCESS, "compute failed");
    check_values(out, matmul_ref(vw, vx, K, R, T));
    ggml_backend_free(b);
    ggml_free(ctx);
    return g_failures;
}

// Two meta devices over the same CPU devices, with their own split tables: a weight in one
// device's buffer, read by a graph computed on the other (its buffer type serves both). The
// weight's split is the one its own device placed it with.
int case_compute_other_device() {
    const int64_t K = 64, R = 48, T = 5;
    Meta a(2), b(2);
    Weights wb(b);
    ggml_tensor * w = wb.add("w", GGML_TYPE_F32, { K, R, 1, 1 }, dim(1, { 16, 32 }));
    ggml_tensor * x = wb.add("x", GGML_TYPE_F32, { K, T, 1, 1 }, mirrored());
    if (!wb.alloc()) return g_failures;
    CHECK(ggml_backend_dev_supports_buft(a.dev, b.buft), "a meta device serves another's buffer type");
    Bytes vw = float_bytes(K * R, -3.0f), vx = float_bytes(K * T, 0.125f);
    for (auto & v : { &vw, &vx })
        for (size_t i = 0; i < v->size() / 4; i++) ((float *) v->data())[i] *= 0.01f;
    set(w, vw), set(x, vx);

    ggml_context * ctx = ggml_init({ 8 * ggml_tensor_overhead() + ggml_graph_overhead(), nullptr, true });
    ggml_tensor * y = ggml_mul_mat(ctx, w, x);
    ggml_set_name(y, "y");
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, y);
    ggml_gallocr_t galloc = ggml_gallocr_new(a.buft);
    CHECK(ggml_gallocr_alloc_graph(galloc, gf), "gallocr failed");
    check_split_state(y, false, dim(0, { 16, 32 }), 2);
    ggml_backend_t be = ggml_backend_dev_init(a.dev, nullptr);
    CHECK(be && ggml_backend_graph_compute(be, gf) == GGML_STATUS_SUCCESS, "compute failed");
    check_values(y, matmul_ref(vw, vx, K, R, T));
    ggml_backend_free(be);
    ggml_gallocr_free(galloc);
    ggml_free(ctx);
    return g_failures;
}

// --- driver -----------------------------------------------------------------------------------

const std::map<std::string, std::function<int()>> & cases() {
    static const std::map<std::string, std::function<int()>> c = {
        { "device", case_device },
        { "backend", case_backend },
        { "set_get", case_set_get },
        { "partial", case_partial },
        { "memset", case_memset },
        { "copies", [] { return copies({ 3, 1, 4 }); } },
        // the same with a device that holds nothing of the split tensors
        { "copies_zero_slice", [] { return copies({ 3, 0, 5 }); } },
        { "async", case_async },
        { "compute_split", case_compute_split },
        { "compute_other_device", case_compute_other_device },
        { "settle", case_settle },
        { "abort_simple_backend_index",
          [] {
              Meta m(2);
              ggml_backend_meta_simple_backend(ggml_backend_dev_init(m.dev, nullptr), 2);
              return did_not_abort("ggml_backend_meta_simple_backend(meta, 2) over 2 devices");
          } },
        { "abort_not_meta_backend",
          [] {
              ggml_backend_meta_n_backends(ggml_backend_dev_init(cpu_dev(), nullptr));
              return did_not_abort("ggml_backend_meta_n_backends(CPU backend)");
          } },
        { "abort_extents", [] { return abort_bad_split(dim(1, { 2, 1 }), "extents 2+1 for 4 rows"); } },
        { "abort_axis", [] { return abort_bad_split(with_axis(dim(1, { 2, 2 }), 7), "split axis 7"); } },
        { "abort_split_changes", abort_split_changes },
        { "abort_split_changes_renamed", abort_split_changes_renamed },
        { "abort_null_device", abort_null_device },
        { "abort_nested", abort_nested },
        { "null_callback", null_callback },
        { "abort_n_devs_0", [] { return abort_n_devs(0); } },
        { "abort_n_devs_17", [] { return abort_n_devs(17); } },
    };
    return c;
}

} // namespace

int main(int argc, char ** argv) {
    auto it = argc == 2 ? cases().find(argv[1]) : cases().end();
    if (it == cases().end()) {
        fprintf(stderr, "usage: meta_api <case>\ncases:");
        for (const auto & c : cases()) fprintf(stderr, " %s", c.first.c_str());
        fprintf(stderr, "\n");
        return 2;
    }
    int failures = it->second();
    if (failures) {
        fprintf(stderr, "meta_api %s: %d check(s) failed\n", argv[1], failures);
        return 1;
    }
    printf("meta_api %s: passed\n", argv[1]);
    return 0;
}
