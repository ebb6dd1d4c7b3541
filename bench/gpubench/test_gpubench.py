"""Unit tests of the pure parts: settings, compare_logits parsing, status words, file tags, and
the tables rendered from results JSON. Run: python3 -m unittest discover bench"""
import contextlib
import io
import json
import os
import tempfile
import unittest
from pathlib import Path

from gpubench import cli, compare, proc, results, settings, table, tp


def parse(argv, environ=None):
    ns = cli.parser().parse_args(argv)
    return settings.resolve(ns, environ or {})


class SettingsTest(unittest.TestCase):
    def test_gpu_defaults(self):
        s = parse(["tp"])
        self.assertEqual(s.tensor, ["CUDA0", "CUDA0,CUDA0"])
        self.assertEqual((s.none_device, s.reps, s.warmup, s.n_prompt, s.n_gen, s.threads), ("CUDA0", 10, 2, 512, 128, 4))
        self.assertEqual((s.models, s.nccl, s.arch_embd, s.archs, s.bench), (["f16", "q4_0"], "off", 256, True, True))
        self.assertEqual(s.build_dir, Path("/tmp/gpu/build"))

    def test_cpu_test_defaults_and_overrides(self):
        s = parse(["tp", "--cpu-test", "--reps", "5"])
        self.assertEqual((s.tensor, s.none_device, s.reps, s.warmup, s.n_prompt, s.n_gen, s.arch_embd),
                         (["CPU", "CPU,CPU"], "CPU", 5, 1, 64, 16, 64))
        self.assertEqual(s.threads, os.cpu_count())
        self.assertIn("--n-embd", s.tp_shape())
        self.assertEqual(s.tp_shape()[1], "256")

    def test_environment_only_with_from_env(self):
        env = {"TP_DEVICES": "CUDA0,CUDA1", "TP_REPS": "3", "TP_ARCHS": "off", "TP_NCCL": "both"}
        s = parse(["tp"], env)
        self.assertEqual((s.tensor, s.reps, s.archs, s.nccl), (["CUDA0", "CUDA0,CUDA0"], 10, True, "off"))
        s = parse(["tp", "--from-env"], env)
        self.assertEqual((s.tensor, s.reps, s.archs, s.nccl), (["CUDA0,CUDA1"], 3, False, "both"))
        s = parse(["tp", "--from-env", "--reps", "7"], env)   # a flag wins
        self.assertEqual(s.reps, 7)

    def test_empty_environment_values(self):
        # TP_DEVICES="" means no tensor lists (gpu.sh's ${TP_DEVICES-...}); other empties are unset
        s = parse(["tp", "--from-env"], {"TP_DEVICES": "", "TP_MODELS": "", "TP_CPU_TEST": "1"})
        self.assertEqual((s.tensor, s.models, s.cpu_test), ([], ["f16", "q4_0"], True))
        self.assertEqual(parse(["tp", "--tensor"]).tensor, [])

    def test_lists_and_env_items(self):
        s = parse(["tp", "--envs", "A=1+B=x=y", "C=3", "--layer", "CUDA0,CUDA1"])
        self.assertEqual((s.envs, s.layer), (["A=1+B=x=y", "C=3"], ["CUDA0,CUDA1"]))
        self.assertEqual(proc.env_items("A=1+B=x=y".split("+")), {"A": "1", "B": "x=y"})
        with self.assertRaises(settings.SettingsError):
            parse(["tp", "--envs", "NOEQUALS"])

    def test_invalid(self):
        with self.assertRaises(settings.SettingsError):
            parse(["tp", "--from-env"], {"TP_NCCL": "sometimes"})
        with self.assertRaises(settings.SettingsError):
            parse(["tp", "--models", "q3_k"])
        with self.assertRaises(settings.SettingsError):
            parse(["tp", "--from-env"], {"TP_REPS": "ten"})
        with self.assertRaises(SystemExit):
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                parse(["tp", "--archs", "maybe"])

    def test_depths(self):
        self.assertEqual(parse(["tp"]).depths, [0])
        self.assertEqual(parse(["tp", "--cpu-test"]).depths, [0])
        self.assertEqual(parse(["tp", "--depths", "0", "4096", "16384"]).depths, [0, 4096, 16384])
        self.assertEqual(parse(["tp", "--depths", "512"]).depths, [512])
        env = {"TP_DEPTHS": "0 8192"}
        self.assertEqual(parse(["tp"], env).depths, [0])               # the environment only with --from-env
        self.assertEqual(parse(["tp", "--from-env"], env).depths, [0, 8192])
        self.assertEqual(parse(["tp", "--from-env", "--depths", "64"], env).depths, [64])   # a flag wins
        self.assertEqual(parse(["tp", "--from-env"], {"TP_DEPTHS": " "}).depths, [0])     # empty: unset
        for argv, environ in ((["tp", "--depths"], {}), (["tp", "--depths", "-1"], {}),
                              (["tp", "--depths", "0", "64", "0"], {}),
                              (["tp", "--from-env"], {"TP_DEPTHS": "0,4096"}),
                              (["tp", "--from-env"], {"TP_DEPTHS": "many"})):
            with self.subTest(argv=argv, environ=environ), self.assertRaises(settings.SettingsError):
                parse(argv, environ)
        with self.assertRaises(SystemExit):
            with open(os.devnull, "w") as devnull, contextlib.redirect_stderr(devnull):
                parse(["tp", "--depths", "4k"])
        s = parse(["tp", "--depths", "0", "4096"])
        self.assertEqual(settings.Settings.from_json(json.loads(json.dumps(s.to_json()))).depths, [0, 4096])

    def test_paths_absolute_and_json_round_trip(self):
        s = parse(["tp", "--prebuilt", "build/shared", "--plugin", "x.so"])
        self.assertTrue(os.path.isabs(s.prebuilt) and s.prebuilt.endswith("build/shared"))
        self.assertTrue(os.path.isabs(s.plugin))
        with tempfile.TemporaryDirectory() as d:
            settings.save(s, Path(d) / "s.json")
            self.assertEqual(settings.load(Path(d) / "s.json"), s)

    def test_plugin_path(self):
        with tempfile.TemporaryDirectory() as d:
            s = settings.Settings(gpu_dir=d)
            self.assertEqual(s.plugin_path(), "")            # no module there
            (Path(d) / "libggml-backend-rs-tp.so").write_text("")
            self.assertTrue(s.plugin_path().endswith("libggml-backend-rs-tp.so"))
            s.plugin = "off"
            self.assertEqual(s.plugin_path(), "")


COMPARE_PASS = """shape: rows=16 n_vocab=32000
max_abs_diff: 0.0651 (row 3, id 17)
rel_l2: 0.0023
bit_identical: no
argmax_mismatch_rows: 0
result: PASS (tol=0.05)
"""


class CompareTest(unittest.TestCase):
    def test_bit_identical(self):
        out = "shape: rows=16 n_vocab=9\nmax_abs_diff: 0 (row 0, id 0)\nrel_l2: 0\nbit_identical: yes\n" \
              "argmax_mismatch_rows: 0\nresult: PASS (tol=0)\n"
        c = compare.parse(out)
        self.assertEqual((c["text"], c["verdict"], c["rows"]), ("bit-identical", "bit-identical", 16))

    def test_within_and_not(self):
        c = compare.parse(COMPARE_PASS, "0.05")
        self.assertEqual(c["text"], "within rel L2 0.05, max abs diff 0.0651, rel L2 0.0023, argmax differs in 0/16 rows")
        self.assertEqual((c["rel_l2"], c["argmax_mismatch_rows"], c["tol"]), (0.0023, 0, "0.05"))
        c = compare.parse(COMPARE_PASS.replace("PASS", "FAIL"), "1e-4")
        self.assertTrue(c["text"].startswith("NOT within rel L2 1e-4, "))
        c = compare.parse(COMPARE_PASS.replace("PASS", "FAIL"), "0")
        self.assertTrue(c["text"].startswith("differs: max abs diff"))
        self.assertNotIn("tol", c)

    def test_failed(self):
        out = "shape: rows=16 n_vocab=9\nresult: FAIL (row 6: A pos=44 tok=3, B pos=44 tok=5)\n"
        self.assertEqual(compare.parse(out, "0.05")["text"], "compare failed (FAIL)")
        self.assertEqual(compare.parse("", "0")["text"], "compare failed (no result)")

    @staticmethod
    def _write(path, rows, n_vocab=3):
        import struct
        with open(path, "wb") as f:
            f.write(b"LGTSv001" + struct.pack("<II", n_vocab, len(rows)))
            for pos, tok, logits in rows:
                f.write(struct.pack("<iI", pos, tok) + struct.pack(f"<{n_vocab}f", *logits))

    def test_divergence(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            a, b, c = (os.path.join(d, n) for n in ("a.bin", "b.bin", "c.bin"))
            # the same tokens for rows 0-1; row 1's near tie (gap 0.25 / 0.125) then goes the other way
            self._write(a, [(5, 1, [1.0, 2.0, 0.0]), (6, 1, [3.0, 2.75, 0.0]), (7, 0, [0.0, 0.0, 1.0])])
            self._write(b, [(5, 1, [1.0, 2.0, 0.0]), (6, 1, [2.75, 2.875, 0.0]), (7, 1, [0.0, 0.0, 1.0])])
            self._write(c, [(5, 2, [1.0, 2.0, 0.0])])
            dv = compare.divergence(a, b)
            self.assertEqual((dv["verdict"], dv["parted_at"], dv["rows"]), ("tokens part", 2, 3))
            self.assertEqual((dv["margin_a"], dv["margin_b"]), (0.25, 0.125))
            self.assertAlmostEqual(dv["rel_l2"], (0.25 ** 2 + 0.125 ** 2) ** 0.5 / (1 + 4 + 9 + 7.5625) ** 0.5)
            self.assertTrue(dv["text"].startswith("other tokens from row 2 of 3 (top-two gap there 0.25 / 0.125)"))
            self.assertIsNone(compare.divergence(a, a))       # nothing parts
            self.assertIsNone(compare.divergence(a, c))       # other shapes
            self.assertIsNone(compare.divergence(a, os.path.join(d, "missing.bin")))


class ProcTest(unittest.TestCase):
    def test_failure_words(self):
        self.assertEqual(proc.failure_text(-11), "crashed (SIGSEGV)")
        self.assertEqual(proc.failure_text(-6), "crashed (SIGABRT)")
        self.assertEqual(proc.failure_text(1), "failed (exit 1)")
        self.assertEqual(proc.failure_text(-15, True, 300), "timed out (300 s, --timeout)")

    def test_run_crash_timeout_env(self):
        r, out = proc.run(["sh", "-c", "echo $X; kill -SEGV $$"], env=["X=a=b"], capture=True)
        self.assertEqual((r.status(), out.strip()), ("crashed (SIGSEGV)", "a=b"))
        r, _ = proc.run(["sleep", "5"], timeout=1, capture=True)
        self.assertEqual(r.status(), "timed out (1 s, --timeout)")

    def test_key_values(self):
        kv = proc.key_values("result test=pp512 build=ours median_tps=1.50 min_tps=1 max_tps=2")
        self.assertEqual((kv["test"], kv["median_tps"]), ("pp512", "1.50"))


class TagTest(unittest.TestCase):
    def test_tags_and_labels(self):
        self.assertEqual(tp.tag("tensor", "CUDA0,CUDA1"), "tensor-CUDA0_CUDA1")
        self.assertEqual(tp.tag("tensor", "CUDA0,CUDA1", "A=1+B=x y", "nonccl"), "tensor-CUDA0_CUDA1-A_1_B_x_y-nonccl")
        self.assertEqual(tp.tag("none", "CUDA0", variant="nonccl"), "none-CUDA0")
        self.assertEqual(tp.label("tensor", "CUDA0,CUDA1", "nonccl"), "tensor CUDA0,CUDA1 (CUDA built without NCCL)")
        self.assertEqual(tp.env_label("A=1+B=2"), " [A=1 B=2]")

    def test_bench_tests(self):
        s = settings.Settings(n_prompt=512, n_gen=128, depths=[0, 4096])
        self.assertEqual(tp.bench_tests(s), [("pp512", 0), ("pp512@d4096", 4096), ("tg128", 0), ("tg128@d4096", 4096)])
        s = settings.Settings(n_prompt=0, n_gen=32, depths=[1024])
        self.assertEqual(tp.bench_tests(s), [("tg32@d1024", 1024)])
        self.assertEqual(tp.bench_tests(settings.Settings()), [("pp512", 0), ("tg128", 0)])

    def test_arch_models(self):
        names = [a.name for a in tp.ARCH_MODELS]
        self.assertEqual(len(names), len(set(names)))
        self.assertEqual(tp.arch_tolerances(), [["gemma2-f32", "1e-3"], ["gemma3-f32", "1e-3"], ["llama4-f32", "1e-3"]])


def run_row(model, test, label, base, split, side, med=None, status="ok"):
    r = {"model": model, "test": test, "label": label, "base": base, "split": split, "side": side, "status": status}
    if status == "ok":
        r.update(median_tps=med, min_tps=med - 1, max_tps=med + 1)
    return r


BENCH = [
    run_row("f16", "tg128", "none CUDA0", "none CUDA0", "none", "upstream", 200.0),
    run_row("f16", "tg128", "none CUDA0", "none CUDA0", "none", "ours", 210.0),
    run_row("f16", "tg128", "tensor CUDA0,CUDA0", "tensor CUDA0,CUDA0", "tensor", "upstream", 150.0),
    run_row("f16", "tg128", "tensor CUDA0,CUDA0 [E=both]", "tensor CUDA0,CUDA0", "tensor", "upstream", 100.0),
    run_row("f16", "tg128", "tensor CUDA0,CUDA0", "tensor CUDA0,CUDA0", "tensor", "ours", 180.0),
    run_row("f16", "tg128", "tensor CUDA0,CUDA0 [E=ours]", "tensor CUDA0,CUDA0", "tensor", "ours", 165.0),
    run_row("f16", "tg128", "tensor CUDA0,CUDA0 [E=both]", "tensor CUDA0,CUDA0", "tensor", "ours", 120.0),
    run_row("f16", "tg128", "layer CUDA0,CUDA1", "layer CUDA0,CUDA1", "layer", "upstream", status="crashed (SIGSEGV)"),
    run_row("f16", "tg128", "layer CUDA0,CUDA1", "layer CUDA0,CUDA1", "layer", "ours", 105.0),
]


FAKE_LLAMA_BENCH = """#!/bin/sh
# llama_bench's result lines for each test and depth; its arguments go to args.txt
echo "$@" > "$(dirname "$0")/args.txt"
p=0; n=0; depths=0
while [ $# -gt 0 ]; do case $1 in --n-prompt) p=$2; shift;; --n-gen) n=$2; shift;; --depths) depths=$2; shift;; esac; shift; done
for t in pp$p tg$n; do
  for d in $(echo $depths | tr , ' '); do
    name=$t; [ $d -gt 0 ] && name=$t@d$d
    [ "$name" = tg$n@d64 ] && [ -n "$NO_DEPTH_TG" ] && continue
    echo "reps: test=$name tps=$((100 + d)).00,$((102 + d)).00"
    echo "result test=$name build=ours model=f16 split=none depth=$d reps=2 median_tps=$((101 + d)).00" \
      "min_tps=$((100 + d)).00 max_tps=$((102 + d)).00"
  done
done
"""


class TpBenchTest(unittest.TestCase):
    """Tp.bench with a stand-in for llama_bench: the flags it gets and the rows it records."""

    def run_bench(self, argv, env=""):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        tree, out = Path(tmp.name) / "tree", Path(tmp.name) / "out"
        (tree / "bench").mkdir(parents=True)
        for name in ("llama_bench", "llama_bench_ref"):
            (tree / "bench" / name).write_text(FAKE_LLAMA_BENCH)
            (tree / "bench" / name).chmod(0o755)
        s = parse(["tp", "--prebuilt", str(tree), "--out", str(out), "--n-prompt", "32", "--n-gen", "8"] + argv)
        job = tp.Tp(s)
        job.dir.mkdir(parents=True)
        with contextlib.redirect_stdout(io.StringIO()):
            job.bench("f16", "none", "CPU", "ours", env)
        return job.res["bench"], (tree / "bench" / "args.txt").read_text().split()

    def test_depths(self):
        rows, args = self.run_bench(["--depths", "0", "64"])
        self.assertEqual(args[args.index("--depths") + 1], "0,64")
        self.assertEqual([(r["test"], r["depth"], r["status"]) for r in rows],
                         [("pp32", 0, "ok"), ("pp32@d64", 64, "ok"), ("tg8", 0, "ok"), ("tg8@d64", 64, "ok")])
        self.assertEqual((rows[3]["median_tps"], rows[3]["min_tps"], rows[3]["reps_tps"]), (165.0, 164.0, [164.0, 166.0]))
        self.assertEqual(rows[0]["median_tps"], 101.0)

    def test_default_depth_passes_no_flag(self):
        rows, args = self.run_bench([])
        self.assertNotIn("--depths", args)
        self.assertEqual([(r["test"], r["depth"]) for r in rows], [("pp32", 0), ("tg8", 0)])

    def test_missing_depth_result(self):
        rows, _ = self.run_bench(["--depths", "64"], env="NO_DEPTH_TG=1")
        self.assertEqual([(r["test"], r["status"]) for r in rows], [("pp32@d64", "ok"), ("tg8@d64", "no result (exit 0)")])


def depth_row(test, depth, label, split, side, med, status="ok"):
    r = run_row("f16", test, label, label, split, side, med, status)
    r["depth"] = depth
    return r


BENCH_DEPTHS = [
    depth_row("tg128", 0, "none CUDA0", "none", "upstream", 200.0),
    depth_row("tg128@d4096", 4096, "none CUDA0", "none", "upstream", 100.0),
    depth_row("tg128", 0, "none CUDA0", "none", "ours", 210.0),
    depth_row("tg128@d4096", 4096, "none CUDA0", "none", "ours", 120.0),
    depth_row("tg128", 0, "tensor CUDA0,CUDA0", "tensor", "upstream", 150.0),
    depth_row("tg128@d4096", 4096, "tensor CUDA0,CUDA0", "tensor", "upstream", 80.0),
    depth_row("tg128", 0, "tensor CUDA0,CUDA0", "tensor", "ours", 180.0),
    depth_row("tg128@d4096", 4096, "tensor CUDA0,CUDA0", "tensor", "ours", 90.0, status="timed out (300 s, --timeout)"),
    depth_row("tg128@d16384", 16384, "tensor CUDA0,CUDA0", "tensor", "ours", 50.0),
]


class TableTest(unittest.TestCase):
    def test_throughput_rows(self):
        rows = table.throughput_rows(BENCH)
        self.assertEqual(rows, [
            ["f16", "tg128", "none CUDA0", "200.00 (199.00–201.00)", "210.00 (209.00–211.00)", "1.050", "–", "–"],
            ["f16", "tg128", "tensor CUDA0,CUDA0", "150.00 (149.00–151.00)", "180.00 (179.00–181.00)", "1.200",
             "0.750", "0.857"],
            # --envs-both: its own upstream run, shown and compared
            ["f16", "tg128", "tensor CUDA0,CUDA0 [E=both]", "100.00 (99.00–101.00)", "120.00 (119.00–121.00)",
             "1.200", "0.500", "0.571"],
            # --envs: compared with the base label's upstream run, which it does not show again
            ["f16", "tg128", "tensor CUDA0,CUDA0 [E=ours]", "–", "165.00 (164.00–166.00)", "1.100", "–", "0.786"],
            ["f16", "tg128", "layer CUDA0,CUDA1", "crashed (SIGSEGV)", "105.00 (104.00–106.00)", "–", "–", "0.500"],
        ])

    def test_throughput_rows_with_depths(self):
        # each test at each depth its own rows, compared with split none at the same test and depth
        rows = table.throughput_rows(BENCH_DEPTHS)
        self.assertEqual(rows, [
            ["f16", "tg128", "none CUDA0", "200.00 (199.00–201.00)", "210.00 (209.00–211.00)", "1.050", "–", "–"],
            ["f16", "tg128", "tensor CUDA0,CUDA0", "150.00 (149.00–151.00)", "180.00 (179.00–181.00)", "1.200",
             "0.750", "0.857"],
            ["f16", "tg128@d4096", "none CUDA0", "100.00 (99.00–101.00)", "120.00 (119.00–121.00)", "1.200", "–",
             "–"],
            ["f16", "tg128@d4096", "tensor CUDA0,CUDA0", "80.00 (79.00–81.00)", "timed out (300 s, --timeout)", "–",
             "0.800", "–"],
            # no split-none run at this depth: no ratio against it
            ["f16", "tg128@d16384", "tensor CUDA0,CUDA0", "–", "50.00 (49.00–51.00)", "–", "–", "–"],
        ])
        # a row without "depth" (results stored before depths) is at depth 0
        old = [{k: v for k, v in r.items() if k != "depth"} for r in BENCH_DEPTHS if r["depth"] == 0]
        self.assertEqual(table.throughput_rows(old), rows[:2])

    def test_render_tp_depths(self):
        doc = {"kind": "tp", "settings": settings.Settings(depths=[0, 4096, 16384]).to_json(), "bench": BENCH_DEPTHS}
        md = table.render(doc)
        self.assertIn("ppN@dD, tgN@dD: the test after D tokens in the KV cache", md)
        self.assertIn("| f16 | tg128@d4096 | none CUDA0 | 100.00 (99.00–101.00) | 120.00 (119.00–121.00) | 1.200 "
                      "| – | – |", md)
        self.assertNotIn("ppN@dD", table.render(dict(doc, bench=BENCH)))

    def test_render_tp_sections(self):
        s = settings.Settings(envs=["E=ours"], envs_both=["E=both"]).to_json()
        doc = {"kind": "tp", "settings": s, "bench": BENCH, "logits": [
            {"model": "f16", "label": "none CUDA0", "vs_upstream": {"text": "bit-identical"},
             "expected": "bit-identical", "vs_none": {"text": "–"}}],
            "archs": [{"model": "qwen3-f32", "label": "tensor CUDA0,CUDA0", "ours": {"text": "same tokens, x"},
                       "upstream": {"text": "upstream crashed (SIGABRT)"}, "plugin": {"text": "–"}}],
            "arch_tolerances": [["gemma2-f32", "1e-3"]]}
        md = table.render(doc)
        self.assertIn("median of 10 timed repetitions after 2 warm-up run(s)", md)
        self.assertIn("Rows with [settings] are extra runs of ours", md)
        self.assertIn("Rows of the --envs-both settings (E=both)", md)
        self.assertIn("| f16 | none CUDA0 | bit-identical | bit-identical | – |", md)
        self.assertIn("(rel L2 <= 1e-4; gemma2: 1e-3)", md)
        self.assertIn("GGML_BACKEND_RS_TP_HEAD_DIM=64", md)
        self.assertIn("| qwen3-f32 | tensor CUDA0,CUDA0 | same tokens, x | upstream crashed (SIGABRT) | – |", md)
        only_archs = dict(doc, bench=[], logits=[])
        self.assertTrue(table.render(only_archs).startswith("## Architectures"))
        self.assertEqual(table.render(dict(doc, bench=[], logits=[], archs=[])), "(no results yet)\n")

    def test_results_file_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            r = results.Results(Path(d), "tp", settings.Settings().to_json())
            for row in BENCH:
                r.append("bench", row)
            r.finish(0)
            doc = results.load(Path(d) / "results.json")
            self.assertEqual((doc["kind"], doc["exit"], len(doc["bench"])), ("tp", 0, len(BENCH)))
            self.assertEqual(table.render(doc), (Path(d) / "table.md").read_text())
            self.assertEqual(len((Path(d) / "bench.csv").read_text().splitlines()), len(BENCH) + 1)

    def test_timing_rows(self):
        runs = [{"side": side, "timing": {"decode_tps": tps, "prompt_tps": 10 * tps, "n_prompt": 33.0}}
                for side, tps in (("ref", 800.0), ("ours", 840.0), ("ref", 820.0), ("ours", 850.0), ("ref", 810.0))]
        rows = table.timing_rows(runs)
        self.assertEqual(rows[0], ["decode (tg)", "810.0 (800.0–820.0)", "845.0 (840.0–850.0)", "0.959"])
        self.assertEqual(rows[1][0], "prompt (33 tokens)")
        # ours also timed with an environment item: its tokens/s and time against ours without it
        runs += [{"side": "ours", "variant": "A=1", "timing": {"decode_tps": tps, "prompt_tps": 10 * tps}}
                 for tps in (880.0, 900.0)]
        self.assertEqual(table.timing_header(runs)[4:], ["ours [A=1]", "time ratio [A=1]/ours"])
        self.assertEqual(table.timing_rows(runs)[0],
                         ["decode (tg)", "810.0 (800.0–820.0)", "845.0 (840.0–850.0)", "0.959",
                          "890.0 (880.0–900.0)", "0.949"])
        md = table.render_multi({"configs": [], "timing": runs})
        self.assertIn("## Timing, tensor split: 3 alternating runs each", md)
        self.assertIn("| decode (tg) | 810.0 (800.0–820.0) | 845.0 (840.0–850.0) | 0.959 | 890.0 (880.0–900.0) | 0.949 |",
                      md)

    def test_stored_results_render(self):
        # every results file kept in bench/results renders
        for p in sorted((Path(__file__).resolve().parents[1] / "results").glob("*.json")):
            with self.subTest(p.name):
                self.assertTrue(table.render(json.loads(p.read_text())).strip())


if __name__ == "__main__":
    unittest.main()
