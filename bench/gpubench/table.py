"""Markdown tables from a results file (results.json of tp, all or multi; profile.json of profile)
and of the timeline reports (timeline.py); pure functions of the JSON, so `gpu.py table FILE`
re-renders any stored run (bench/results/*.json included)."""
from __future__ import annotations

import statistics
from typing import Dict, List, Optional

DASH = "–"
TOP_KERNELS = 20   # kernels in a profile report
SIDE_NAMES = {"ref": "upstream", "ours": "ours"}  # all/multi name the pristine build's runs "ref"


def render(res: Dict) -> str:
    kind = res.get("kind", "tp")
    if kind == "tp":
        return render_tp(res)
    if kind == "all":
        return render_all(res)
    if kind == "multi":
        return render_multi(res)
    if kind == "profile":
        return render_profile(res)
    raise ValueError(f"results of kind {kind!r}: no table")


def _text(c) -> str:
    if c is None:
        return DASH
    return c["text"] if isinstance(c, dict) else str(c)


# ---- tp ----------------------------------------------------------------------------------------

def throughput_rows(bench: List[Dict]) -> List[List[str]]:
    """The throughput table's rows: per model, test at its depth and row label (each in first-seen
    order) the upstream and ours runs, ours/upstream, and each against the same build's split-none
    run of the same test and depth.

    A test is its name and its context depth (a row's "depth", 0 where absent): "tg128" at depth 0,
    "tg128@d4096" at 4096, each its own rows. A label with settings ("tensor CUDA0,CUDA0 [VAR=x]")
    that has no upstream run of its own is compared with the upstream run of its base label (the
    same split and devices)."""
    models: List[str] = []
    tests: List[tuple] = []
    labels: List[str] = []
    runs: Dict[tuple, Dict] = {}
    base: Dict[str, str] = {}
    split: Dict[str, str] = {}
    none_label: Dict[tuple, str] = {}
    for r in bench:
        m, t, l = r["model"], (r["test"], r.get("depth", 0)), r["label"]
        for seq, v in ((models, m), (tests, t), (labels, l)):
            if v not in seq:
                seq.append(v)
        runs[(m, t, l, r["side"])] = r
        base[l], split[l] = r["base"], r["split"]
        if r["split"] == "none":
            none_label[(m, t)] = l

    def cell(k) -> str:
        r = runs.get(k)
        if r is None:
            return DASH
        if r["status"] != "ok":
            return r["status"]
        if r.get("min_tps") is None:   # stored results that kept only the median
            return f"{r['median_tps']:.2f}"
        return f"{r['median_tps']:.2f} ({r['min_tps']:.2f}–{r['max_tps']:.2f})"

    def ratio(a, b) -> str:
        ra, rb = runs.get(a), runs.get(b)
        if ra and rb and ra["status"] == "ok" and rb["status"] == "ok" and rb["median_tps"] > 0:
            return f"{ra['median_tps'] / rb['median_tps']:.3f}"
        return DASH

    rows = []
    for m in models:
        for t in tests:
            for l in labels:
                ko = (m, t, l, "ours")
                ku = (m, t, l, "upstream")
                own_up = ku in runs
                if not own_up:
                    ku = (m, t, base[l], "upstream")
                if ko not in runs and ku not in runs:
                    continue
                n = none_label.get((m, t))
                shows_up = l == base[l] or own_up
                ru = ro = DASH
                if split[l] != "none" and n is not None:
                    if shows_up:
                        ru = ratio(ku, (m, t, n, "upstream"))
                    ro = ratio(ko, (m, t, n, "ours"))
                rows.append([m, t[0], l, cell(ku) if shows_up else DASH, cell(ko), ratio(ko, ku), ru, ro])
    return rows


def _md(header: List[str], rows: List[List[str]]) -> List[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def render_tp(res: Dict) -> str:
    s = res["settings"]
    out: List[str] = []
    if res.get("bench"):
        out += [f"## Throughput: llama_bench, tokens/s (median of {s['reps']} timed repetitions after "
                f"{s['warmup']} warm-up run(s); min–max)", "",
                f"flash attention on, n_ubatch {s['ubatch']}, {s['threads']} threads. "
                "ours/upstream: ratio of medians (> 1: ours faster).",
                "vs none: this row's median / the same build's split-none median (same model, test and depth)."]
        if any(r.get("depth", 0) for r in res["bench"]):
            out.append("ppN@dD, tgN@dD: the test after D tokens in the KV cache (decoded once, untimed, before the "
                       "warm-ups; each repetition drops the positions from D on and decodes from position D).")
        if s.get("envs"):
            out.append("Rows with [settings] are extra runs of ours with those environment settings; their "
                       "ours/upstream uses the upstream run of the same split and devices.")
        if s.get("envs_both"):
            out.append(f"Rows of the --envs-both settings ({' '.join(s['envs_both'])}) run upstream with them "
                       "too, and compare with that run.")
        out.append("")
        out += _md(["model", "test", "split, devices", "upstream", "ours", "ours/upstream", "upstream vs none",
                    "ours vs none"], throughput_rows(res["bench"]))
    if res.get("logits"):
        n = s["n_predict"]
        if out:
            out.append("")
        out += [f"## Logits: llama_driver, {n} greedy tokens (prompt + {n - 1} single-token steps), compare_logits",
                "", "ours vs upstream in the same configuration (bit-identical expected on one device); "
                "ours vs ours split none: passes when rel L2 <= 0.05.", ""]
        out += _md(["model", "split, devices", "ours vs upstream", "expected", "ours vs ours split none"],
                   [[r["model"], r["label"], _text(r["vs_upstream"]), r["expected"], _text(r["vs_none"])]
                    for r in res["logits"]])
    if res.get("archs"):
        own = "".join(f"; {_strip(name)}: {tol}"
                      for name, tol in res.get("arch_tolerances", []))
        if out:
            out.append("")
        out += [f"## Architectures: the small f32 models of ctests/matrix/models.txt, {s['n_predict']} greedy tokens, "
                f"each run vs ours split none on {s['none_device']} (rel L2 <= 1e-4{own})", ""]
        out += _md(["model", "split, devices", "ours", "upstream",
                    f"plugin in upstream's program (GGML_BACKEND_RS_TP_HEAD_DIM={s['arch_embd'] // 4})"],
                   [[r["model"], r["label"], _text(r["ours"]), _text(r["upstream"]), _text(r["plugin"])]
                    for r in res["archs"]])
    return "\n".join(out) + "\n" if out else "(no results yet)\n"


def _strip(name: str) -> str:  # str.removesuffix is Python 3.9+
    return name[:-4] if name.endswith("-f32") else name


# ---- all and multi -------------------------------------------------------------------------------

def _values(runs: List[Dict], side: str, key: str, variant: str = "") -> List[float]:
    return [r["timing"][key] for r in runs if r["side"] == side and r.get("variant", "") == variant
            and r.get("timing") and key in r["timing"]]


def _cell(v: List[float]) -> str:
    return f"{statistics.median(v):.1f} ({min(v):.1f}–{max(v):.1f})" if v else DASH


def _ratio(a: List[float], b: List[float]) -> str:
    """Time of b over time of a, from median tokens/s (< 1: b takes less time)."""
    return f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else DASH


def timing_variants(runs: List[Dict]) -> List[str]:
    """The environment items ours was also timed with, in the order they ran."""
    return list(dict.fromkeys(r["variant"] for r in runs if r["side"] == "ours" and r.get("variant")))


def timing_header(runs: List[Dict]) -> List[str]:
    h = ["", "upstream", "ours", "time ratio ours/upstream"]
    for v in timing_variants(runs):
        h += [f"ours [{v}]", f"time ratio [{v}]/ours"]
    return h


def timing_rows(runs: List[Dict]) -> List[List[str]]:
    """Alternating timing runs: median tokens/s (min–max) of each build, and the time ratio
    ours/upstream (upstream's tokens/s over ours: < 1 means ours takes less time); then for each
    environment item ours also ran with, its tokens/s and time ratio against ours without it."""
    rows = []
    for name, key in (("decode (tg)", "decode_tps"), ("prompt", "prompt_tps")):
        if key == "prompt_tps":
            n = [r["timing"].get("n_prompt") for r in runs if r.get("timing")]
            if n and n[0] is not None:
                name = f"prompt ({int(n[0])} tokens)"
        up, ours = _values(runs, "ref", key), _values(runs, "ours", key)
        row = [name, _cell(up), _cell(ours), _ratio(up, ours)]
        for v in timing_variants(runs):
            var = _values(runs, "ours", key, v)
            row += [_cell(var), _ratio(ours, var)]
        rows.append(row)
    return rows


def render_all(res: Dict) -> str:
    decode = res.get("decode", [])
    out = ["## Decode on one device: ours vs upstream", ""]
    out += _md(["build", "status", "tokens (first 8)", "digest"],
               [[SIDE_NAMES.get(d["side"], d["side"]), d["status"], " ".join(d.get("tokens", "").split()[:8]) or DASH,
                 d.get("digest") or DASH] for d in decode])
    tokens = {d["side"]: d.get("tokens") for d in decode}
    same = "same" if tokens.get("ours") and tokens.get("ours") == tokens.get("ref") else "NOT the same"
    out += ["", f"tokens: {same}; logits, ours vs upstream: {_text(res.get('compare'))}", ""]
    n = len([r for r in res.get("timing", []) if r["side"] == "ref"])
    out += [f"## Timing: {n} alternating runs each, median tokens/s (min–max)", ""]
    out += _md(timing_header(res.get("timing", [])), timing_rows(res.get("timing", [])))
    return "\n".join(out) + "\n"


def render_multi(res: Dict) -> str:
    out = ["## Split modes: ours vs upstream, and each vs ours on one device", ""]
    out += _md(["split mode, devices", "ours", "upstream", "ours vs upstream", "vs one device"],
               [[r["label"], r["ours"], r.get("upstream") or DASH, _text(r.get("vs_upstream")), _text(r.get("vs_one"))]
                for r in res.get("configs", [])])
    n = len([r for r in res.get("timing", []) if r["side"] == "ref"])
    out += ["", f"## Timing, tensor split: {n} alternating runs each, median tokens/s (min–max)", ""]
    out += _md(timing_header(res.get("timing", [])), timing_rows(res.get("timing", [])))
    return "\n".join(out) + "\n"


# ---- profile -----------------------------------------------------------------------------------

def _f(x, digits: int = 1) -> str:
    return DASH if x is None else f"{x:.{digits}f}"


def _count(x) -> str:
    return DASH if x is None else f"{x:g}"


def profile_report(rep: Dict, title: str) -> List[str]:
    """The tables of one trace's report: per token, streams, kernels by time, cuts, API calls."""
    o, sm = rep["options"], rep["summary"]
    kept = f"the last {o['tokens']}" if o["tokens"] else "all"
    out = [f"### {title}", "",
           f"{rep['tokens_kept']} tokens of {rep['tokens_found']} ({kept} after the first {o['skip']}; "
           f"a token per `{o['token_start']}` group, split at the largest kernel gap).", ""]
    rows = [["wall: first kernel to last kernel or DtoH copy, µs", _f(sm["wall_us"]["median"]), _f(sm["wall_us"]["min"])],
            ["GPU busy: union of all streams' work, µs", _f(sm["busy_us"]["median"]), _f(sm["busy_us"]["min"])],
            ["idle inside the token (wall - busy), µs", _f(sm["idle_us"]["median"]), _f(sm["idle_us"]["min"])],
            ["kernels", _count(sm["kernels"]["median"]), _count(sm["kernels"]["min"])],
            ["streams", _count(sm["streams"]["median"]), _count(sm["streams"]["min"])]]
    if rep.get("cuts"):
        rows.append(["in cut windows (producer end to consumer start), µs", _f(sm["cut_window_us"]["median"]),
                     _f(sm["cut_window_us"]["min"])])
    out += _md(["per token", "median", "min"], rows) + [""]
    out += _md(["stream (device:id)", "kernels per token", "kernel time per token, µs"],
               [[st["stream"], _count(st["kernels_per_token"]), _f(st["kernel_us_per_token"])] for st in rep["streams"]])
    out += ["", f"Kernels by time per token (top {min(TOP_KERNELS, len(rep['kernels']))} of {len(rep['kernels'])}; names without "
            "template arguments):", ""]
    out += _md(["kernel", "µs per token", "share", "count per token", "mean µs"],
               [[f"`{k['name']}`", _f(k["us_per_token"]), f"{100 * k['share']:.1f} %", _count(k["count_per_token"]),
                 _f(k["mean_us"], 2)] for k in rep["kernels"][:TOP_KERNELS]])
    c = rep.get("cuts")
    if c:
        out += ["", f"Cuts (`{o['cut']}`): {_count(c['kernels_per_token'])} kernels per token on {c['streams']} "
                f"stream(s), {_count(c['per_token'])} cuts per token; in cut windows "
                f"{_f(c['window_us_per_token']['median'])} µs per token (min {_f(c['window_us_per_token']['min'])}). "
                "wait_in: from the latest producer's end; wait_out: to the earliest consumer's start.", ""]
        out += _md(["µs", "median", "p10", "p90", "n"],
                    [[name, _f(c[key].get("median"), 2), _f(c[key].get("p10"), 2), _f(c[key].get("p90"), 2),
                      str(c[key]["n"])] for name, key in (("wait_in", "wait_in_us"), ("dur", "dur_us"),
                                                          ("wait_out", "wait_out_us"))])
    out += idle_report(rep.get("idle"))
    if rep.get("api"):
        out += ["", "Host API calls (GPUPROF_API=1) over the tokens kept:", ""]
        out += _md(["call", "per token", "mean µs"],
                   [[a["name"], _count(a["calls_per_token"]), _f(a["mean_us"], 2)] for a in rep["api"]])
    return out


def idle_report(idle: Optional[Dict]) -> List[str]:
    """Where a trace's idle time inside the tokens lies: by place, by gap size, by the kernels
    either side (absent from reports written before the gaps were analysed)."""
    if not idle:
        return []
    out = ["", "Idle inside the token by where its gaps lie: in a cut window; between two records of the same "
           "CUDA graph (the driver's pace); between launches (separate kernels or graphs: the host's pace). "
           "Means per token, which add up to the mean idle time. "
           f"The largest gap of a token: {_f(idle['largest_us']['median'])} µs (median; min "
           f"{_f(idle['largest_us']['min'])}).", ""]
    out += _md(["idle", "µs per token", "gaps per token"],
               [[w["where"], _f(w["us_per_token"]), _count(w["gaps_per_token"])] for w in idle["where"]])
    out += [""]
    out += _md(["gap, µs", "gaps per token", "µs per token"],
               [[b["bucket"], _count(b["gaps_per_token"]), _f(b["us_per_token"])] for b in idle["sizes"]])
    if idle["pairs"]:
        out += ["", "The kernels either side of the gaps that add up to most idle time:", ""]
        out += _md(["before", "after", "where", "gaps per token", "µs per token", "mean µs"],
                   [[f"`{p['before']}`", f"`{p['after']}`", p["where"], _count(p["gaps_per_token"]),
                     _f(p["us_per_token"]), _f(p["mean_us"], 2)] for p in idle["pairs"]])
    return out


def profile_compare(c: Dict, title: str) -> List[str]:
    """B against A: median wall, busy and idle per token, the mean idle by place, per cut of B,
    and the kernels whose time per token changed most."""
    cuts = c["cuts_per_token_b"]
    out = [f"### {title}", "", f"A: {c['a']}; B: {c['b']}; {_count(cuts)} cuts per token in B.", ""]
    out += _md(["per token, µs (median)", "A", "B", "B - A", "per cut of B"],
               [[name, _f(c[key]["a"]), _f(c[key]["b"]), _f(c[key]["diff"]), _f(c[key]["per_cut"], 2)]
                for name, key in (("wall", "wall_us"), ("GPU busy", "busy_us"), ("idle", "idle_us"))]
               + [[f"idle (mean): {w['where']}", _f(w["a"]), _f(w["b"]), _f(w["diff"]), _f(w["per_cut"], 2)]
                  for w in c.get("idle_where", [])])
    out += ["", "Kernels whose time per token changed most:", ""]
    out += _md(["kernel", "A µs", "B µs", "B - A", "A count", "B count"],
               [[f"`{k['name']}`", _f(k["a_us"]), _f(k["b_us"]), _f(k["diff_us"]), _count(k["a_count"]),
                 _count(k["b_count"])] for k in c["kernels"]])
    return out


def profile_rows(runs: List[Dict]) -> List[List[str]]:
    """The summary rows: tokens/s with and without the tracer, and the trace's medians per token."""
    rows = []
    for r in runs:
        tps = [_f(r[side]["tps"], 2) if r[side]["tps"] else r[side]["status"] for side in ("untraced", "traced")]
        rep = r.get("report")
        if rep:
            sm, cuts = rep["summary"], rep.get("cuts") or {}
            rows.append([r["model"], r["label"]] + tps + [
                _f(sm["wall_us"]["median"]), _f(sm["busy_us"]["median"]), _f(sm["idle_us"]["median"]),
                _count(sm["kernels"]["median"]), _count(sm["streams"]["median"]), _count(cuts.get("per_token")),
                _f(sm["cut_window_us"]["median"]) if cuts else DASH])
        else:
            rows.append([r["model"], r["label"]] + tps + [r.get("error", DASH)] + [DASH] * 6)
    return rows


def render_profile(res: Dict) -> str:
    s = res["settings"]
    out: List[str] = []
    if res.get("runs"):
        out += [f"## Decode profile: llama_bench tg{s['n_gen']} ({s['warmup']} warm-up run(s), {s['reps']} timed), "
                "under the CUPTI tracer", "",
                f"tokens/s: llama_bench's median, without and with the tracer. Per token (medians over the tokens "
                f"kept): wall, GPU busy and idle in µs. {res.get('cupti', '')}", ""]
        out += _md(["model", "split, devices", "tokens/s", "traced", "wall", "busy", "idle", "kernels", "streams",
                    "cuts", "in cut windows"], profile_rows(res["runs"]))
    for c in res.get("compares", []):
        out += [""] + profile_compare(c["compare"], f"{c['model']}: {c['b']} against {c['a']}")
    for r in res.get("runs", []):
        if r.get("report"):
            out += [""] + profile_report(r["report"], f"{r['model']}: {r['label']}")
    return "\n".join(out) + "\n" if out else "(no results yet)\n"
