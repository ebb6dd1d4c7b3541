"""Command line of bench/gpu.py."""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional

from . import dl, job, profile, results, settings, simple, table, timeline, tp
from .proc import say
from .settings import ANALYSIS, PROFILE, PROFILE_DEFAULTS, RUN, Settings, SettingsError

DESCRIPTION = """\
GPU benchmark of ggml-backend-rs on an NVIDIA host (docs/gpu.md). The pin is built twice with CUDA
(spliced with this library, and pristine as *_ref) from .gpu/llama.cpp and .gpu/libggml_backend_rs.a,
carried next to the tree; the same random-weight models decode with both builds.

  all        build + run on one GPU, in one device call (about 3 min on 16 cores)
  multi      the same with NCCL on two GPUs: split none, layer, tensor; the AllReduce fallback;
             --tensor-split 3,1 and 1,0; tensor-mode timing
  tp         the tensor-parallel benchmark in the foreground (llama_bench, logits, architectures)
  tp-start   tp, detached (it outlasts one 600 s device call); then tp-wait until it prints tables
  tp-wait    wait up to SECONDS [560] for the tp job; prints progress, then the tables
  profile    GPU timeline of decode (CUPTI tracer): split none vs tensor, per token and per cut
  profile-start, profile-wait [SECONDS, 560]   profile, detached, and its polling
  profile-report TRACE...   the tables of gpuprof traces; profile-compare A B: B against A
  dl-start   GGML_BACKEND_DL build with CUDA + ctest, detached; dl-wait [SECONDS, 540] polls it
  table      render the markdown tables of a results.json (tp, all or multi) or profile.json
  settings   print the settings a command line resolves to, as JSON
"""


def _settings_parser(sub, name: str, help: str, internal_job: bool = False,
                     groups=(RUN,)) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=help, description=help)
    settings.add_options(p, groups)
    if internal_job:
        p.add_argument("--settings", dest="settings_file", help="settings JSON written by the *-start subcommand")
    return p


def _wait_parser(sub, name: str, default: int, default_out: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help=f"wait up to SECONDS [{default}] for the detached job")
    p.add_argument("seconds", nargs="?", type=int, default=default)
    p.add_argument("--out", default=default_out, help=f"the job's work directory [{default_out}]")
    p.add_argument("--from-env", action="store_true", help=argparse.SUPPRESS)
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bench/gpu.py", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", metavar="SUBCOMMAND")
    sub.required = True
    _settings_parser(sub, "all", "build, then ours vs upstream on one GPU")
    _settings_parser(sub, "multi", "build with NCCL, then the split modes over two GPUs")
    _settings_parser(sub, "tp", "the tensor-parallel benchmark in the foreground", internal_job=True)
    _settings_parser(sub, "tp-start", "start the tp benchmark detached")
    _wait_parser(sub, "tp-wait", 560, "/tmp/gpu")
    profiling = (RUN, ANALYSIS, PROFILE)
    _settings_parser(sub, "profile", "the decode profile in the foreground", internal_job=True, groups=profiling)
    _settings_parser(sub, "profile-start", "start the decode profile detached", groups=profiling)
    _wait_parser(sub, "profile-wait", 560, "/tmp/gpu")
    r = _settings_parser(sub, "profile-report", "the tables of gpuprof traces", groups=(ANALYSIS,))
    r.add_argument("traces", nargs="+", metavar="TRACE", help="gpuprof traces (.tsv or .tsv.gz)")
    r.add_argument("--json", help="also write the reports to this file")
    c = _settings_parser(sub, "profile-compare", "trace B against trace A", groups=(ANALYSIS,))
    c.add_argument("a", metavar="A", help="the baseline trace (e.g. split none)")
    c.add_argument("b", metavar="B", help="the trace compared with it (e.g. split tensor)")
    c.add_argument("--json", help="also write both reports and the comparison to this file")
    _settings_parser(sub, "dl", "the GGML_BACKEND_DL build and ctest in the foreground", internal_job=True)
    _settings_parser(sub, "dl-start", "start the GGML_BACKEND_DL build and ctest detached")
    _wait_parser(sub, "dl-wait", 540, "/tmp/gpu-dl")
    t = sub.add_parser("table", help="render the tables of a results.json or profile.json")
    t.add_argument("file", help="a results.json (tp, all or multi) or a profile.json")
    t.add_argument("--csv", help="also write the throughput rows of a tp result as CSV to this file")
    _settings_parser(sub, "settings", "print the resolved settings as JSON", groups=(RUN, ANALYSIS, PROFILE))
    return p


def resolve(ns: argparse.Namespace) -> Settings:
    if getattr(ns, "settings_file", None):
        return settings.load(Path(ns.settings_file))
    s = settings.resolve(ns, defaults=PROFILE_DEFAULTS if ns.cmd.startswith("profile") else None)
    if ns.cmd.startswith("dl") and ns.out is None:
        s.out = "/tmp/gpu-dl"
    if ns.cmd in ("profile", "profile-start") and s.cpu_test:
        raise SettingsError("profile needs a GPU (CUPTI); its analysis runs anywhere: profile-report, profile-compare")
    return s


def main(argv: Optional[List[str]] = None) -> int:
    ns = parser().parse_args(argv)
    try:
        if ns.cmd == "table":
            doc = results.load(Path(ns.file))
            sys.stdout.write(table.render(doc))
            if ns.csv:
                results.write_bench_csv(doc.get("bench", []), Path(ns.csv))
            return 0
        if ns.cmd == "tp-wait":
            return tp_wait(job.tp_job(ns.out), ns.seconds)
        if ns.cmd == "profile-wait":
            return profile_wait(job.profile_job(ns.out), ns.seconds)
        if ns.cmd == "dl-wait":
            j = job.dl_job(ns.out)
            s = Settings(out=ns.out)
            return job.wait(j, ns.seconds, lambda: dl.done(s), lambda: dl.partial(s))
        s = resolve(ns)
    except SettingsError as e:
        say(f"gpu.py {ns.cmd}: {e}")
        return 2
    if ns.cmd == "settings":
        print(json.dumps(s.to_json(), indent=1))
        return 0
    if ns.cmd == "all":
        return simple.run_all(s)
    if ns.cmd == "multi":
        return simple.run_multi(s)
    if ns.cmd == "tp":
        return tp.main(s)
    if ns.cmd == "tp-start":
        needs_build = not s.prebuilt or (s.nccl == "both" and not s.prebuilt_nonccl)
        return job.start(job.tp_job(s.out), s, needs_build)
    if ns.cmd == "profile":
        return profile.main(s)
    if ns.cmd == "profile-start":
        return job.start(job.profile_job(s.out), s, needs_build=not s.prebuilt)
    if ns.cmd in ("profile-report", "profile-compare"):
        return report(ns, profile.options(s))
    if ns.cmd == "dl":
        return dl.main(s)
    if ns.cmd == "dl-start":
        return job.start(job.dl_job(s.out), s, needs_build=True, clean=True)
    raise AssertionError(ns.cmd)


def tp_wait(j: job.Job, limit: int) -> int:
    tp_dir = j.dir / "tp"
    copy_to = os.environ.get("OUT")

    def done() -> int:
        last = (tp_dir / "settings.txt").read_text().splitlines()[-1:] if (tp_dir / "settings.txt").is_file() else []
        say(f"\ntp job finished: {j.marker.read_text().strip()}; {' '.join(last)}\n")
        if (tp_dir / "table.md").is_file():
            say((tp_dir / "table.md").read_text())
        if copy_to:
            shutil.copy(j.dir / "tp.tgz", Path(copy_to) / "tp.tgz")
            if (tp_dir / "results.json").is_file():
                shutil.copy(tp_dir / "results.json", Path(copy_to) / "tp-results.json")
            say("(logs and tables: $OUT/tp.tgz; results: $OUT/tp-results.json)")
        return 0

    def partial() -> None:
        if (tp_dir / "table.md").is_file():
            say("Tables so far:")
            say((tp_dir / "table.md").read_text())
        if copy_to:
            tp.pack(j.dir, Path(copy_to) / "tp-partial.tgz")
            say("(logs so far: $OUT/tp-partial.tgz)")

    return job.wait(j, limit, done, partial)


def profile_wait(j: job.Job, limit: int) -> int:
    prof_dir = j.dir / "profile"
    copy_to = os.environ.get("OUT")

    def done() -> int:
        say(f"\nprofile job finished: {j.marker.read_text().strip()}\n")
        if (prof_dir / "profile.md").is_file():
            say((prof_dir / "profile.md").read_text())
        if copy_to:
            profile.copy_back(j.dir, prof_dir, Path(copy_to))
            say("(tables, JSON and logs: $OUT/profile.tgz, profile.md, profile.json; the traces: "
                "$OUT/profile-traces.tgz when under 15 MiB)")
        return 0

    def partial() -> None:
        if copy_to:
            profile.pack(j.dir, Path(copy_to) / "profile-partial.tgz")
            say("(logs so far: $OUT/profile-partial.tgz)")

    return job.wait(j, limit, done, partial)


def report(ns: argparse.Namespace, opt: timeline.Options) -> int:
    """profile-report and profile-compare: the tables on stdout, the reports as JSON with --json."""
    try:
        if ns.cmd == "profile-report":
            reps = [timeline.analyse_file(Path(t), opt) for t in ns.traces]
            md = "".join("\n".join(table.profile_report(r, r["trace"])) + "\n\n" for r in reps)
            doc: object = reps[0] if len(reps) == 1 else reps
        else:
            a, b = timeline.analyse_file(Path(ns.a), opt), timeline.analyse_file(Path(ns.b), opt)
            c = timeline.compare(a, b)
            md = "\n".join(table.profile_report(a, f"A: {a['trace']}") + [""] + table.profile_report(b, f"B: {b['trace']}")
                           + [""] + table.profile_compare(c, "B against A")) + "\n"
            doc = {"a": a, "b": b, "compare": c}
    except (OSError, timeline.TraceError) as e:
        say(f"gpu.py {ns.cmd}: {e}")
        return 1
    sys.stdout.write(md)
    if ns.json:
        Path(ns.json).write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return 0
