"""Unit tests of the profile's analysis (timeline.py) and its tables, on small generated traces,
and of the CUPTI search (cupti.py) on fake directory layouts. Run: python3 -m unittest discover bench"""
import contextlib
import gzip
import io
import json
import os
import re
import tarfile
import tempfile
import unittest
from pathlib import Path
from unittest import mock

from gpubench import cli, cupti, profile, table, timeline

US = 1000  # ns

MUL_MAT = "_Z7mul_matPKfPf"
GET_ROWS = "_Z16k_get_rows_floatI6__halffEvPKT_PKiPT0_"
LM_HEAD = "_ZN4ggml4cuda7lm_headILi4EEEvPKf"
ALLREDUCE = "ggml_meta_allreduce_f32_x2"
PERIOD = 1000   # µs from one token's first kernel to the next's


def line(kind, start, end, stream, name, device=0, corr=0, graph=0):
    return f"{kind}\t{int(start * US)}\t{int(end * US)}\t{device}\t{stream}\t{corr}\t{graph}\t{name}"


def tensor_token(t, first=False):
    """One token of a 2-way tensor run: backend streams 7 and 8, our AllReduce stream 9; two cuts;
    two get_rows in a row on each backend stream (libllama's output rows of cur and inpSA).
    Wall 310 µs, busy 297, idle 13, 11 kernels; cut 1 waits 5 in, 2 out; cut 2 waits 3 and 3."""
    long = 400 if first else 0   # the first token is slower (warm-up)
    return [
        line("memcpy", t - 20, t - 15, 7, "HtoD"),                          # inputs: no token's wall
        line("kernel", t, t + 100 + long, 7, MUL_MAT),
        line("kernel", t + 10, t + 100 + long, 8, MUL_MAT),
        line("kernel", t + 105 + long, t + 110 + long, 9, ALLREDUCE),
        line("kernel", t + 112 + long, t + 200 + long, 7, MUL_MAT),
        line("kernel", t + 115 + long, t + 190 + long, 8, MUL_MAT),
        line("kernel", t + 203 + long, t + 207 + long, 9, ALLREDUCE),
        line("kernel", t + 210 + long, t + 213 + long, 7, GET_ROWS),
        line("kernel", t + 211 + long, t + 213 + long, 8, GET_ROWS),
        line("kernel", t + 213 + long, t + 215 + long, 7, GET_ROWS),
        line("kernel", t + 213 + long, t + 214 + long, 8, GET_ROWS),
        line("kernel", t + 215 + long, t + 300 + long, 7, LM_HEAD),
        line("memcpy", t + 300 + long, t + 310 + long, 7, "DtoH"),          # the logits
    ]


def none_token(t):
    """One token of split none on stream 7: wall 280 µs, busy 275, idle 5, 4 kernels."""
    return [
        line("memcpy", t - 20, t - 15, 7, "HtoD"),
        line("kernel", t, t + 180, 7, MUL_MAT),
        line("kernel", t + 185, t + 188, 7, GET_ROWS),
        line("kernel", t + 188, t + 190, 7, GET_ROWS),
        line("kernel", t + 190, t + 270, 7, LM_HEAD),
        line("memcpy", t + 270, t + 280, 7, "DtoH"),
    ]


def trace(token, n=6, teardown=True):
    lines = ["# gpuprof 1 kind start_ns end_ns device stream correlation graph_id name",
             line("memcpy", 0, 50, 7, "HtoD")]   # the model's upload, before any token
    for i in range(n):
        t = 1000 + i * PERIOD
        lines += token(t, first=True) if (i == 0 and token is tensor_token) else token(t)
    if teardown:   # a kernel long after the last token is no token's
        lines.append(line("kernel", 1000 + n * PERIOD + 5000, 1000 + n * PERIOD + 5100, 7, "teardown"))
    lines.append(line("runtime", 1000, 1002, -1, "cudaGraphLaunch", device=-1))
    return "\n".join(lines) + "\n"


def records(text):
    return timeline.parse(text.splitlines())


class ParseTest(unittest.TestCase):
    def test_fields_and_errors(self):
        r = records(trace(none_token, n=1))
        self.assertEqual(r[2], timeline.Record("kernel", 1000 * US, 1180 * US, 0, 7, 0, 0, MUL_MAT))
        with self.assertRaisesRegex(timeline.TraceError, r"trace:1: 3 fields"):
            timeline.parse(["kernel\t1\t2"])
        with self.assertRaisesRegex(timeline.TraceError, "not a number"):
            timeline.parse(["kernel\tx\t2\t0\t7\t0\t0\tk"])

    def test_gzip(self):
        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "t.tsv.gz"
            with gzip.open(p, "wt") as f:
                f.write(trace(none_token, n=3))
            self.assertEqual(len(timeline.read(p)), len(records(trace(none_token, n=3))))


class NameTest(unittest.TestCase):
    def test_short_names(self):
        cases = {
            GET_ROWS: "k_get_rows_float",
            "_ZL12rms_norm_f32ILi1024ELb1ELb0EEvPKfPfillllfPS0_": "rms_norm_f32",
            LM_HEAD: "ggml::cuda::lm_head",
            "_Z22flash_attn_ext_vec_f16ILi128ELi1EL9ggml_type1ELS0_1ELb0EEvPKcS2_": "flash_attn_ext_vec_f16",
            "_ZN4ggml3fooIL9ggml_type1EE3barEv": "ggml::foo::bar",
            "_ZN12_GLOBAL__N_110add_kernelEPf": "(anonymous)::add_kernel",
            "_ZN7cutlass6KernelINS_4gemm6kernel4GemmIiEEEEvNT_6ParamsE": "cutlass::Kernel",
            ALLREDUCE: ALLREDUCE,
            "_ZZ4mainENKUlvE_clEv": "_ZZ4mainENKUlvE_clEv",   # not followed: unchanged
            "_Z3fooILb1EXadL_Z3barvEEEvv": "foo",             # external-name literal: first identifier
        }
        for mangled, short in cases.items():
            with self.subTest(mangled):
                self.assertEqual(timeline.short_name(mangled), short)


class IntervalTest(unittest.TestCase):
    def test_merge_covered_percentile(self):
        self.assertEqual(timeline.merge([(5, 7), (0, 2), (1, 3), (7, 8)]), [(0, 3), (5, 8)])
        self.assertEqual(timeline.covered([(0, 10), (5, 20), (30, 40)], 2, 35), 23)
        self.assertEqual(timeline.percentile([1, 2, 3, 4], 50), 2.5)
        self.assertAlmostEqual(timeline.percentile([10, 20, 30, 40, 50], 10), 14.0)
        self.assertEqual(timeline.percentile([3, 3, 5, 5], 90), 5)


class TokenTest(unittest.TestCase):
    def test_split_tensor(self):
        toks = timeline.split_tokens(records(trace(tensor_token)), "get_rows")
        self.assertEqual(len(toks), 6)
        t = toks[3]
        self.assertEqual((t.start, t.end), (4000 * US, 4310 * US))
        self.assertEqual((t.wall, t.busy, len(t.kernels)), (310 * US, 297 * US, 11))
        # the warm-up token, and the last one: no teardown kernel, its DtoH copy in
        self.assertEqual(toks[0].wall, 710 * US)
        self.assertEqual((toks[5].end, toks[5].kernels[-1].name), (6310 * US, LM_HEAD))
        # any kernel that runs once per token and stream gives the same tokens, wherever it runs
        for anchor in ("lm_head", "_ZN4ggml4cuda"):   # matched against the mangled name
            self.assertEqual([(t.start, t.end) for t in timeline.split_tokens(records(trace(tensor_token)), anchor)],
                             [(t.start, t.end) for t in toks])
        none = records(trace(none_token))
        self.assertEqual([t.start for t in timeline.split_tokens(none, "mul_mat")],
                         [t.start for t in timeline.split_tokens(none, "get_rows")])

    def test_anchor_groups(self):
        k = [timeline.Record("kernel", s, s + 1, 0, lane, 0, 0, name) for s, lane, name in
             ((0, 7, "get_rows"), (1, 8, "get_rows"), (2, 7, "get_rows"), (3, 7, "add"),
              (10, 7, "get_rows"), (11, 8, "get_rows"), (12, 8, "add"), (13, 8, "get_rows"))]
        groups = timeline.anchor_groups(k, re.compile("get_rows"))
        self.assertEqual([[a.start for a in g] for g in groups], [[0, 1, 2], [10, 11], [13]])

    def test_no_anchor_and_too_few(self):
        with self.assertRaisesRegex(timeline.TraceError, "no kernel matches --token-start 'nothing'"):
            timeline.analyse(records(trace(none_token)), timeline.Options(token_start="nothing"))
        with self.assertRaisesRegex(timeline.TraceError, "2 token.s. found, all dropped by --skip 2"):
            timeline.analyse(records(trace(none_token, n=2)), timeline.Options())


class ReportTest(unittest.TestCase):
    def test_tensor_report(self):
        rep = timeline.analyse(records(trace(tensor_token)), timeline.Options(), "tensor.tsv")
        self.assertEqual((rep["tokens_found"], rep["tokens_kept"]), (6, 4))
        sm = rep["summary"]
        self.assertEqual((sm["wall_us"], sm["busy_us"], sm["idle_us"]),
                         ({"median": 310.0, "min": 310.0}, {"median": 297.0, "min": 297.0},
                          {"median": 13.0, "min": 13.0}))
        self.assertEqual((sm["kernels"]["median"], sm["streams"]["median"], sm["cut_window_us"]["median"]),
                         (11, 3, 22.0))
        self.assertEqual(rep["streams"], [
            {"stream": "0:7", "kernels_per_token": 5, "kernel_us_per_token": 278.0},
            {"stream": "0:8", "kernels_per_token": 4, "kernel_us_per_token": 168.0},
            {"stream": "0:9", "kernels_per_token": 2, "kernel_us_per_token": 9.0}])
        self.assertEqual(rep["kernels"][0], {"name": "mul_mat", "us_per_token": 353.0, "count_per_token": 4.0,
                                             "mean_us": 88.25, "share": round(353 / 455, 4)})
        self.assertEqual([k["name"] for k in rep["kernels"]],
                         ["mul_mat", "ggml::cuda::lm_head", ALLREDUCE, "k_get_rows_float"])
        c = rep["cuts"]
        self.assertEqual((c["kernels_per_token"], c["streams"], c["per_token"]), (2, 1, 2))
        self.assertEqual(c["wait_in_us"], {"median": 4.0, "p10": 3.0, "p90": 5.0, "n": 8})
        self.assertEqual(c["dur_us"], {"median": 4.5, "p10": 4.0, "p90": 5.0, "n": 8})
        self.assertEqual(c["wait_out_us"], {"median": 2.5, "p10": 2.0, "p90": 3.0, "n": 8})
        self.assertEqual(rep["api"], [])   # the one API call is in the warm-up token

    def test_keep_last_tokens(self):
        rep = timeline.analyse(records(trace(tensor_token)), timeline.Options(skip=0, tokens=3))
        self.assertEqual(([r["index"] for r in rep["tokens"]], rep["tokens_kept"]), ([3, 4, 5], 3))
        rep = timeline.analyse(records(trace(tensor_token)), timeline.Options(skip=0))
        self.assertEqual((rep["summary"]["wall_us"]["median"], rep["tokens"][0]["wall_us"]), (310.0, 710.0))

    def test_none_has_no_cuts(self):
        rep = timeline.analyse(records(trace(none_token, teardown=False)), timeline.Options())
        sm = rep["summary"]
        self.assertEqual((sm["wall_us"]["median"], sm["busy_us"]["median"], sm["idle_us"]["median"]),
                         (280.0, 275.0, 5.0))
        self.assertIsNone(rep["cuts"])

    def test_api_calls(self):
        text = trace(none_token) + line("driver", 4010, 4014, -1, "cuGraphLaunch", device=-1) + "\n" \
            + line("driver", 5010, 5012, -1, "cuGraphLaunch", device=-1) + "\n"
        rep = timeline.analyse(records(text), timeline.Options())
        self.assertEqual(rep["api"], [{"name": "cuGraphLaunch", "calls_per_token": 0.5, "mean_us": 3.0}])

    def test_cut_without_producer(self):
        t = timeline.Token(0, records("\n".join([line("kernel", 0, 5, 9, ALLREDUCE), line("kernel", 6, 10, 7, GET_ROWS)])))
        (c,) = timeline.cuts(t, "allreduce")
        self.assertEqual((c.wait_in, c.wait_out, c.window), (None, 1 * US, (0, 6 * US)))


def graph_token(t):
    """One token of two CUDA graph launches on streams 7 and 8 (graph ids 1 and 2) and one cut in
    the first: wall 300 µs; idle 20 in the cut window (wait_in 6, wait_out 14), 3 + 3 inside the
    first graph (after the cut's consumers, both streams pausing at once), 40 between the launches."""
    return [
        line("memcpy", t - 20, t - 15, 7, "HtoD"),
        line("kernel", t, t + 100, 7, MUL_MAT, graph=1),
        line("kernel", t + 2, t + 98, 8, MUL_MAT, graph=1),
        line("kernel", t + 106, t + 110, 9, ALLREDUCE, graph=1),
        line("kernel", t + 124, t + 150, 7, MUL_MAT, graph=1),
        line("kernel", t + 124, t + 149, 8, MUL_MAT, graph=1),
        line("kernel", t + 153, t + 170, 7, MUL_MAT, graph=1),
        line("kernel", t + 153, t + 160, 8, MUL_MAT, graph=1),
        line("kernel", t + 173, t + 180, 7, MUL_MAT, graph=1),
        line("kernel", t + 220, t + 223, 7, GET_ROWS, graph=2),
        line("kernel", t + 223, t + 290, 7, LM_HEAD, graph=2),
        line("memcpy", t + 290, t + 300, 7, "DtoH"),
    ]


class GapTest(unittest.TestCase):
    def test_where_gaps_lie(self):
        rep = timeline.analyse(records(trace(graph_token)), timeline.Options(), "graphs.tsv")
        sm, idle = rep["summary"], rep["idle"]
        self.assertEqual((sm["wall_us"]["median"], sm["idle_us"]["median"]), (300.0, 66.0))
        self.assertEqual([(w["where"], w["us_per_token"], w["gaps_per_token"]) for w in idle["where"]],
                         [("cut window", 20.0, 2), ("inside one graph", 6.0, 2), ("between launches", 40.0, 1)])
        self.assertEqual(sum(w["us_per_token"] for w in idle["where"]), sm["idle_us"]["median"])
        self.assertEqual(idle["largest_us"], {"median": 40.0, "min": 40.0})
        self.assertEqual(idle["sizes"], [
            {"bucket": "2-5", "gaps_per_token": 2.0, "us_per_token": 6.0},
            {"bucket": "5-20", "gaps_per_token": 2.0, "us_per_token": 20.0},
            {"bucket": "20-100", "gaps_per_token": 1.0, "us_per_token": 40.0}])
        self.assertEqual([(p["before"], p["after"], p["where"], p["us_per_token"]) for p in idle["pairs"]], [
            ("mul_mat", "k_get_rows_float", "between launches", 40.0),
            ("ggml_meta_allreduce_f32_x2", "mul_mat", "cut window", 14.0),
            ("mul_mat", "ggml_meta_allreduce_f32_x2", "cut window", 6.0),
            ("mul_mat", "mul_mat", "inside one graph", 6.0)])
        self.assertEqual(idle["pairs"][3]["mean_us"], 3.0)

    def test_gaps_are_the_idle_time_of_each_token(self):
        # tokens that differ: overlapping streams, records ending together, a copy past the
        # token's end (the next token's inputs), and a gap only one stream leaves
        def uneven(t, first=False):
            k = (t // PERIOD) % 3
            return [
                line("memcpy", t - 20, t - 15, 7, "HtoD"),
                line("kernel", t, t + 50 + 10 * k, 7, MUL_MAT, graph=1),
                line("kernel", t + 5, t + 50 + 10 * k, 8, MUL_MAT, graph=1),   # ends with the other
                line("kernel", t + 53 + 10 * k, t + 60 + 10 * k, 9, ALLREDUCE, graph=1),
                line("kernel", t + 61 + 10 * k, t + 90 + 10 * k, 7, MUL_MAT, graph=1),
                line("kernel", t + 70 + 10 * k, t + 80 + 10 * k, 8, MUL_MAT, graph=1),  # inside 7's
                line("kernel", t + 90 + 12 * k + 2, t + 95 + 12 * k + 2, 7, GET_ROWS, graph=2),
                line("kernel", t + 100 + 12 * k, t + 150 + 12 * k, 7, LM_HEAD, graph=2),
                line("memcpy", t + 150 + 12 * k, t + 155 + 12 * k, 7, "DtoH"),
                line("memcpy", t + 400, t + 405, 7, "HtoD"),                  # past the token
            ]
        rs = records(trace(uneven, n=7))
        opt = timeline.Options()
        toks = timeline.kept(timeline.split_tokens(rs, opt.token_start), opt)
        self.assertEqual(len({t.wall for t in toks}), 3)
        for t in toks:
            windows = [c.window for c in timeline.cuts(t, opt.cut)]
            with self.subTest(token=t.index):
                self.assertEqual(sum(g.size for g in timeline.gaps(t, windows)), t.wall - t.busy)
        rep = timeline.analyse(rs, opt)
        mean_idle = sum(r["idle_us"] for r in rep["tokens"]) / len(rep["tokens"])
        self.assertAlmostEqual(sum(w["us_per_token"] for w in rep["idle"]["where"]), mean_idle, places=3)

    def test_buckets(self):
        self.assertEqual([timeline.bucket(ns) for ns in (0, 499, 500, 999, 1000, 99_999, 100_000, 10**9)],
                         ["0-0.5", "0-0.5", "0.5-1", "0.5-1", "1-2", "20-100", ">= 100", ">= 100"])

    def test_tables(self):
        a = timeline.analyse(records(trace(none_token)), timeline.Options(), "none.tsv")
        b = timeline.analyse(records(trace(graph_token)), timeline.Options(), "graphs.tsv")
        md = "\n".join(table.profile_report(b, "graphs"))
        self.assertIn("The largest gap of a token: 40.0 µs (median; min 40.0).", md)
        self.assertIn("| inside one graph | 6.0 | 2 |", md)
        self.assertIn("| 20-100 | 1 | 40.0 |", md)
        self.assertIn("| `mul_mat` | `k_get_rows_float` | between launches | 1 | 40.0 | 40.00 |", md)
        md = "\n".join(table.profile_compare(timeline.compare(a, b), "cmp"))
        self.assertIn("| idle (mean): between launches | 5.0 | 40.0 | 35.0 | 35.00 |", md)
        self.assertIn("| idle (mean): cut window | 0.0 | 20.0 | 20.0 | 20.00 |", md)
        # a report without the gaps (written before they were analysed) renders without them
        old = {k: v for k, v in b.items() if k != "idle"}
        self.assertNotIn("Idle inside the token", "\n".join(table.profile_report(old, "old")))
        self.assertNotIn("idle (mean)", "\n".join(table.profile_compare(timeline.compare(a, old), "cmp")))


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.a = timeline.analyse(records(trace(none_token)), timeline.Options(), "none.tsv")
        self.b = timeline.analyse(records(trace(tensor_token)), timeline.Options(), "tensor.tsv")

    def test_compare(self):
        c = timeline.compare(self.a, self.b)
        self.assertEqual((c["a"], c["b"], c["cuts_per_token_b"]), ("none.tsv", "tensor.tsv", 2))
        self.assertEqual(c["wall_us"], {"a": 280.0, "b": 310.0, "diff": 30.0, "per_cut": 15.0})
        self.assertEqual(c["busy_us"], {"a": 275.0, "b": 297.0, "diff": 22.0, "per_cut": 11.0})
        self.assertEqual(c["idle_us"], {"a": 5.0, "b": 13.0, "diff": 8.0, "per_cut": 4.0})
        self.assertEqual([(k["name"], k["diff_us"]) for k in c["kernels"]],
                         [("mul_mat", 173.0), (ALLREDUCE, 9.0), ("ggml::cuda::lm_head", 5.0),
                          ("k_get_rows_float", 3.0)])
        self.assertEqual((c["kernels"][1]["a_count"], c["kernels"][1]["b_count"]), (0.0, 2.0))

    def test_tables(self):
        md = "\n".join(table.profile_report(self.b, "tensor"))
        self.assertIn("| wall: first kernel to last kernel or DtoH copy, µs | 310.0 | 310.0 |", md)
        self.assertIn("| `mul_mat` | 353.0 | 77.6 % | 4 | 88.25 |", md)
        self.assertIn("| wait_in | 4.00 | 3.00 | 5.00 | 8 |", md)
        self.assertIn("2 kernels per token on 1 stream(s), 2 cuts per token", md)
        md = "\n".join(table.profile_compare(timeline.compare(self.a, self.b), "cmp"))
        self.assertIn("| wall | 280.0 | 310.0 | 30.0 | 15.00 |", md)
        self.assertIn(f"| `{ALLREDUCE}` | 0.0 | 9.0 | 9.0 | 0 | 2 |", md)

    def test_profile_json_renders(self):
        run = {"model": "f16", "label": "tensor CUDA0,CUDA0", "untraced": {"status": "ok", "tps": 180.0},
               "traced": {"status": "ok", "tps": 170.5}, "report": self.b}
        failed = {"model": "f16", "label": "tensor CUDA0,CUDA0 [A=1]", "untraced": {"status": "ok", "tps": 1.0},
                  "traced": {"status": "crashed (SIGSEGV)", "tps": None}, "error": "no trace written"}
        doc = {"kind": "profile", "settings": {"n_gen": 32, "warmup": 1, "reps": 1}, "runs": [run, failed],
               "compares": [{"model": "f16", "a": "none CUDA0", "b": run["label"],
                             "compare": timeline.compare(self.a, self.b)}]}
        md = table.render(doc)
        self.assertIn("| f16 | tensor CUDA0,CUDA0 | 180.00 | 170.50 | 310.0 | 297.0 | 13.0 | 11 | 3 | 2 | 22.0 |", md)
        self.assertIn("| f16 | tensor CUDA0,CUDA0 [A=1] | 1.00 | crashed (SIGSEGV) | no trace written |", md)
        self.assertIn("### f16: tensor CUDA0,CUDA0 against none CUDA0", md)


class CliTest(unittest.TestCase):
    def test_report_and_compare(self):
        with tempfile.TemporaryDirectory() as d:
            a, b = Path(d) / "none.tsv", Path(d) / "tensor.tsv.gz"
            a.write_text(trace(none_token))
            with gzip.open(b, "wt") as f:
                f.write(trace(tensor_token))
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = cli.main(["profile-compare", str(a), str(b), "--skip", "1", "--json", str(Path(d) / "c.json")])
            self.assertEqual(rc, 0)
            self.assertIn("| wall | 280.0 | 310.0 | 30.0 | 15.00 |", out.getvalue())
            doc = json.loads((Path(d) / "c.json").read_text())
            self.assertEqual((doc["b"]["tokens_kept"], doc["b"]["options"]["skip"]), (5, 1))
            with contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(cli.main(["profile-report", str(a), "--token-start", "nope"]), 1)

    def test_profile_defaults(self):
        s = cli.resolve(cli.parser().parse_args(["profile"]))
        self.assertEqual((s.models, s.tensor, s.n_gen, s.reps, s.warmup, s.none_device),
                         (["f16"], ["CUDA0,CUDA0"], 32, 1, 1, "CUDA0"))
        self.assertEqual((s.token_start, s.skip, s.tokens, s.cut, s.api), ("get_rows", 2, 0, "ggml_meta_allreduce", False))
        s = cli.resolve(cli.parser().parse_args(["profile-start", "--n-gen", "64", "--models", "f16", "q4_0",
                                                 "--envs", "GGML_META_ALLREDUCE=direct", "--api"]))
        self.assertEqual((s.n_gen, s.models, s.envs, s.api), (64, ["f16", "q4_0"], ["GGML_META_ALLREDUCE=direct"], True))
        self.assertEqual(cli.resolve(cli.parser().parse_args(["tp"])).tensor, ["CUDA0", "CUDA0,CUDA0"])
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            cli.parser().parse_args(["tp", "--skip", "3"])   # the profile's flags are the profile's
        with self.assertRaises(cli.SettingsError):
            cli.resolve(cli.parser().parse_args(["profile", "--cut", "("]))
        with self.assertRaises(cli.SettingsError):
            cli.resolve(cli.parser().parse_args(["profile", "--cpu-test"]))


FAKE_BENCH = """#!/bin/sh
# llama_bench's result line; under the tracer a stored trace of the split mode as the trace
split=none; n=0
while [ $# -gt 0 ]; do case $1 in --split-mode) split=$2; shift;; --n-gen) n=$2; shift;; esac; shift; done
if [ -n "$GPUPROF_OUT" ]; then cp "$(dirname "$0")/$split.tsv" "$GPUPROF_OUT"; tps=170.00; else tps=180.00; fi
[ -n "$CRASH" ] && kill -SEGV $$
echo "result test=tg$n build=ours model=f16 split=$split median_tps=$tps min_tps=1 max_tps=2"
"""

FAKE_WRITE_MODEL = """#!/bin/sh
while [ $# -gt 0 ]; do [ "$1" = --out ] && : > "$2"; shift; done
"""


class ProfileJobTest(unittest.TestCase):
    """The job's wiring with stand-ins for the programs and the tracer (no GPU, no CUPTI)."""

    def test_job(self):
        with tempfile.TemporaryDirectory() as d:
            tree, out = Path(d) / "tree", Path(d) / "out"
            for rel, text in (("bench/llama_bench", FAKE_BENCH), ("ctests/write_model", FAKE_WRITE_MODEL),
                              ("bench/none.tsv", trace(none_token)), ("bench/tensor.tsv", trace(tensor_token))):
                (tree / rel).parent.mkdir(parents=True, exist_ok=True)
                (tree / rel).write_text(text)
                (tree / rel).chmod(0o755)
            s = cli.resolve(cli.parser().parse_args(["profile", "--prebuilt", str(tree), "--out", str(out),
                                                     "--envs", "CRASH=1"]))
            fake = cupti.Cupti("a test", Path(d), Path(d) / "libcupti.so")
            env = {k: v for k, v in os.environ.items() if k != "OUT"}
            with mock.patch.object(cupti, "find", return_value=fake), \
                    mock.patch.object(cupti, "build", side_effect=lambda c, dest: dest / cupti.LIBRARY), \
                    mock.patch.dict(os.environ, env, clear=True), contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(profile.main(s), 0)
            doc = json.loads((out / "profile" / "profile.json").read_text())
            self.assertEqual([r["label"] for r in doc["runs"]],
                             ["none CUDA0", "tensor CUDA0,CUDA0", "tensor CUDA0,CUDA0 [CRASH=1]"])
            none, tensor, crashed = doc["runs"]
            self.assertEqual((tensor["untraced"]["tps"], tensor["traced"]["tps"], tensor["trace"]),
                             (180.0, 170.0, "trace-f16-tensor-CUDA0_CUDA0.tsv.gz"))
            self.assertEqual(tensor["report"]["summary"]["wall_us"]["median"], 310.0)
            self.assertEqual((crashed["traced"]["status"], crashed["untraced"]["status"]),
                             ("crashed (SIGSEGV)", "crashed (SIGSEGV)"))
            # the crashed run's trace was still written (by the stand-in) and analysed
            self.assertEqual([c["b"] for c in doc["compares"]], ["tensor CUDA0,CUDA0", "tensor CUDA0,CUDA0 [CRASH=1]"])
            self.assertEqual(doc["compares"][0]["compare"]["wall_us"]["per_cut"], 15.0)
            self.assertEqual(doc["cupti"], "CUPTI from a test: " + f"{d}, {d}/libcupti.so")
            self.assertIn("| f16 | none CUDA0 | 180.00 | 170.00 | 280.0 |", (out / "profile" / "profile.md").read_text())
            self.assertTrue((out / "models" / "f16.gguf").is_file())
            self.assertEqual((out / "profile-done").read_text(), "exit=0\n")
            with tarfile.open(out / "profile.tgz") as t:
                names = set(t.getnames())
            self.assertTrue({"profile/profile.md", "profile/profile.json",
                             "profile/run-f16-none-CUDA0-traced.txt"} <= names)
            self.assertFalse([n for n in names if n.endswith((".tsv", ".tsv.gz"))])
            with tarfile.open(out / "profile-traces.tgz") as t:
                traces = {n for n in t.getnames() if t.getmember(n).isfile()}
            self.assertEqual(traces, {n for n in traces if n.endswith(".tsv.gz")})
            self.assertIn("profile/trace-f16-none-CUDA0.tsv.gz", traces)


class CuptiTest(unittest.TestCase):
    def touch(self, *paths):
        for p in paths:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("")

    def test_toolkit_extras(self):
        with tempfile.TemporaryDirectory() as d:
            r = Path(d) / "cuda"
            self.touch(r / "extras/CUPTI/include/cupti.h", r / "extras/CUPTI/lib64/libcupti.so",
                       r / "include/cuda.h", r / "include/crt/host_defines.h")
            c = cupti.find([Path(d) / "missing", r], [])
            self.assertEqual((c.include, c.lib, c.extra_includes),
                             (r / "extras/CUPTI/include", r / "extras/CUPTI/lib64/libcupti.so", [r / "include"]))
            self.assertIn(f"the CUDA toolkit {r}", c.describe())
            cmd = cupti.compile_cmd(c, Path(d) / "libgpuprof.so")
            self.assertEqual(cmd[:4], ["gcc", "-shared", "-fPIC", "-O2"])
            self.assertIn(f"-l:libcupti.so", cmd)
            self.assertIn(f"-Wl,-rpath,{r / 'extras/CUPTI/lib64'}", cmd)

    def test_wheels(self):
        with tempfile.TemporaryDirectory() as d:
            w = Path(d) / "nvidia"
            # CUDA 12's wheels: CUPTI without a plain .so; cuda.h from the runtime, crt/ from nvcc
            self.touch(w / "cuda_cupti/include/cupti.h", w / "cuda_cupti/lib/libcupti.so.12",
                       w / "cuda_cupti/lib/libcupti.so.2024.1", w / "cuda_runtime/include/cuda.h",
                       w / "cuda_nvcc/include/crt/host_defines.h")
            c = cupti.find([], [w / "cuda_cupti", w / "cu13"])
            self.assertEqual(c.lib.name, "libcupti.so.2024.1")
            self.assertEqual(c.extra_includes, [w / "cuda_runtime/include", w / "cuda_nvcc/include"])
            self.assertIn("-l:libcupti.so.2024.1", cupti.compile_cmd(c, Path("x.so")))
            # CUDA 13's: one include directory with everything
            self.touch(w / "cu13/include/cupti.h", w / "cu13/include/cuda.h", w / "cu13/include/crt/host_defines.h",
                       w / "cu13/lib/libcupti.so.13")
            c = cupti.find([], [w / "cu13"])
            self.assertEqual((c.include, c.lib.name, c.extra_includes), (w / "cu13/include", "libcupti.so.13", []))

    def test_none(self):
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(cupti.CuptiError, "no CUPTI .* found; tried .*extras/CUPTI/include"):
                cupti.find([Path(d)], [])
            self.touch(Path(d) / "extras/CUPTI/include/cupti.h", Path(d) / "extras/CUPTI/lib64/libcupti.so")
            with self.assertRaisesRegex(cupti.CuptiError, "but no cuda.h"):
                cupti.find([Path(d)], [])


if __name__ == "__main__":
    unittest.main()
