// compare_logits.cpp — compare two logits files written by tools/model/llama_driver --logits-out.
//
// Usage: compare_logits A.bin B.bin [--tol T]      (T default 0 = bit-identical required)
//
// File format (little-endian): char magic[8] = "LGTSv001"; uint32 n_vocab; uint32 n_rows;
// then n_rows records of { int32 pos; uint32 token; float32 logits[n_vocab] }.
//
// Prints one line per key:
//   shape: rows=R n_vocab=V
//   max_abs_diff: X (row r, id i)
//   rel_l2: Y                      (||A-B||_2 / ||A||_2 over all rows; 0 when both are all zero)
//   bit_identical: yes|no
//   argmax_mismatch_rows: K        (rows whose argmax, ties -> lowest id, differs)
//   result: PASS|FAIL
// Exit status: 0 pass; 1 values differ beyond tolerance (tol == 0: any bit difference;
// tol > 0: rel_l2 > tol, or any NaN/Inf mismatch); 2 usage/IO/format error or shape mismatch
// (header, or differing pos/token per row).
//
// Standalone: needs no ggml/llama library. Build: g++ -std=c++17 -O2 compare_logits.cpp -o compare_logits
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Rows {
    uint32_t n_vocab = 0, n_rows = 0;
    std::vector<int32_t> pos;
    std::vector<uint32_t> tok;
    std::vector<float> data;
};

bool load(const char * path, Rows & r) {
    FILE * f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "compare_logits: cannot open %s\n", path); return false; }
    char magic[8];
    bool ok = fread(magic, 1, 8, f) == 8 && memcmp(magic, "LGTSv001", 8) == 0 &&
              fread(&r.n_vocab, 4, 1, f) == 1 && fread(&r.n_rows, 4, 1, f) == 1;
    if (!ok) { fprintf(stderr, "compare_logits: %s: bad header\n", path); fclose(f); return false; }
    r.pos.resize(r.n_rows); r.tok.resize(r.n_rows);
    r.data.resize((size_t) r.n_rows * r.n_vocab);
    for (uint32_t i = 0; i < r.n_rows && ok; ++i) {
        ok = fread(&r.pos[i], 4, 1, f) == 1 && fread(&r.tok[i], 4, 1, f) == 1 &&
             fread(&r.data[(size_t) i * r.n_vocab], sizeof(float), r.n_vocab, f) == r.n_vocab;
    }
    if (ok && fgetc(f) != EOF) { fprintf(stderr, "compare_logits: %s: trailing bytes\n", path); ok = false; }
    else if (!ok) fprintf(stderr, "compare_logits: %s: truncated\n", path);
    fclose(f);
    return ok;
}

uint32_t argmax(const float * x, uint32_t n) {
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; ++i) if (x[i] > x[b]) b = i;
    return b;
}

} // namespace

int main(int argc, char ** argv) {
    const char * pa = nullptr, * pb = nullptr;
    double tol = 0.0;
    for (int i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "--tol") && i + 1 < argc) {
            char * end = nullptr;
            tol = strtod(argv[++i], &end);
            if (!end || *end || !(tol >= 0.0)) { fprintf(stderr, "compare_logits: bad --tol\n"); return 2; }
        } else if (!pa) pa = argv[i];
        else if (!pb) pb = argv[i];
        else { fprintf(stderr, "usage: compare_logits A B [--tol T]\n"); return 2; }
    }
    if (!pa || !pb) { fprintf(stderr, "usage: compare_logits A B [--tol T]\n"); return 2; }

    Rows a, b;
    if (!load(pa, a) || !load(pb, b)) return 2;
    if (a.n_vocab != b.n_vocab || a.n_rows != b.n_rows) {
        printf("shape: A rows=%u n_vocab=%u, B rows=%u n_vocab=%u\nresult: FAIL (shape mismatch)\n",
               a.n_rows, a.n_vocab, b.n_rows, b.n_vocab);
        return 2;
    }
    for (uint32_t i = 0; i < a.n_rows; ++i) {
        if (a.pos[i] != b.pos[i] || a.tok[i] != b.tok[i]) {
            printf("shape: rows=%u n_vocab=%u\nresult: FAIL (row %u: A pos=%d tok=%u, B pos=%d tok=%u)\n",
                   a.n_rows, a.n_vocab, i, a.pos[i], a.tok[i], b.pos[i], b.tok[i]);
            return 2;
        }
    }
    printf("shape: rows=%u n_vocab=%u\n", a.n_rows, a.n_vocab);

    const bool bit_identical = a.data.size() == 0 ||
        memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
    double max_abs = 0.0, num = 0.0, den = 0.0;
    size_t max_i = 0;
    bool nonfinite_mismatch = false;
    for (size_t i = 0; i < a.data.size(); ++i) {
        const double x = a.data[i], y = b.data[i];
        if (!std::isfinite(x) || !std::isfinite(y)) {
            uint32_t bx, by;
            memcpy(&bx, &a.data[i], 4); memcpy(&by, &b.data[i], 4);
            if (!(std::isnan(x) && std::isnan(y)) && bx != by) nonfinite_mismatch = true;
            continue;
        }
        const double d = std::fabs(x - y);
        if (d > max_abs) { max_abs = d; max_i = i; }
        num += (x - y) * (x - y);
        den += x * x;
    }
    const double rel = den > 0.0 ? std::sqrt(num / den) : (num > 0.0 ? INFINITY : 0.0);
    uint32_t argmax_mismatch = 0;
    for (uint32_t r = 0; r < a.n_rows; ++r) {
        const size_t o = (size_t) r * a.n_vocab;
        if (a.n_vocab && argmax(&a.data[o], a.n_vocab) != argmax(&b.data[o], b.n_vocab)) argmax_mismatch++;
    }

    printf("max_abs_diff: %.9g (row %zu, id %zu)\n", max_abs,
           a.n_vocab ? max_i / a.n_vocab : 0, a.n_vocab ? max_i % a.n_vocab : 0);
    printf("rel_l2: %.9g\n", rel);
    printf("bit_identical: %s\n", bit_identical ? "yes" : "no");
    printf("argmax_mismatch_rows: %u\n", argmax_mismatch);
    if (nonfinite_mismatch) printf("nonfinite_mismatch: yes\n");

    bool pass;
    if (tol == 0.0) pass = bit_identical;
    else pass = !nonfinite_mismatch && rel <= tol;
    printf("result: %s (tol=%g)\n", pass ? "PASS" : "FAIL", tol);
    return pass ? 0 : 1;
}
