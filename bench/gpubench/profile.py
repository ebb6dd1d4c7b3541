"""The decode profile (subcommand profile; profile-start runs it detached): the GPU timeline of
tensor-parallel decode, recorded by the CUPTI tracer bench/gpuprof/trace.c and read by timeline.py.

It builds our tree only (llama_bench, write_model; no *_ref) with CUDA, compiles the tracer against
the host's CUPTI, writes tp's f16 model (the same file and flags: a tp run on the same machine
reuses it) and the quantized copies of --models, then for each model and configuration (split none
on the baseline device, tensor over each --tensor list, with each --envs item too) runs llama_bench's
decode test under the tracer and once without it (the tracer's overhead shows in tokens/s). Each
trace is analysed, and each tensor trace compared with split none's. Into <out>/profile:
profile.md, profile.json, the traces (trace-*.tsv.gz) and the logs; profile.tgz packs the tables
and logs, profile-traces.tgz the traces.
"""
from __future__ import annotations

import gzip
import json
import os
import shutil
import tarfile
from pathlib import Path
from typing import Dict, List, Optional

from . import build, cupti, proc, table, timeline, tp
from . import settings as settings_mod
from .proc import say, step
from .results import now
from .settings import Settings

TARGETS = ["llama_bench", "write_model"]


def options(s: Settings) -> timeline.Options:
    return timeline.Options(token_start=s.token_start, skip=s.skip, tokens=s.tokens, cut=s.cut)


def tree(s: Settings) -> Path:
    return Path(s.prebuilt) if s.prebuilt else s.profile_dir / "build"


def tokens_per_s(log: Path, n_gen: int) -> Optional[float]:
    line = proc.first_line(log, f"result test=tg{n_gen} ")
    return float(proc.key_values(line)["median_tps"]) if line else None


class Profile:
    def __init__(self, s: Settings):
        self.s = s
        self.out = Path(s.out)
        self.dir = s.profile_dir
        self.tree = tree(s)
        self.models = self.out / "models"
        self.tracer: Optional[Path] = None
        self.doc: Dict = {"kind": "profile", "started": now(), "finished": None, "exit": None, "code": s.code,
                          "ggml": "", "host": {}, "cupti": "", "settings": s.to_json(), "runs": [], "compares": []}

    def save(self) -> None:
        tmp = self.dir / "profile.json.tmp"
        tmp.write_text(json.dumps(self.doc, indent=1, ensure_ascii=False) + "\n")
        os.replace(tmp, self.dir / "profile.json")
        (self.dir / "profile.md").write_text(table.render(self.doc))

    # ---- one configuration -----------------------------------------------------------------
    def bench_cmd(self, model: str, split: str, devs: str) -> List:
        s = self.s
        return [self.tree / "bench" / "llama_bench", "--model", self.models / f"{model}.gguf",
                "--split-mode", split, "--devices", devs, "--n-prompt", "0", "--n-gen", s.n_gen,
                "--n-ubatch", s.ubatch, "--flash-attn", "on", "--threads", s.threads,
                "--warmup", s.warmup, "--reps", s.reps]

    def config(self, model: str, split: str, devs: str, env: str = "") -> Dict:
        """The traced and the untraced run of one configuration, and the trace's report."""
        s = self.s
        name = f"{model}-{tp.tag(split, devs, env)}"
        lab = tp.label(split, devs) + tp.env_label(env)
        step(f"profile {model}, {lab}")
        trace = self.dir / f"trace-{name}.tsv"
        extra = env.split("+") if env else []
        tracer_env = [f"CUDA_INJECTION64_PATH={self.tracer}", f"GPUPROF_OUT={trace}"] + (["GPUPROF_API=1"] if s.api else [])
        row: Dict = {"model": model, "label": lab, "split": split, "devices": devs, "env": env}
        for side, run_env in (("traced", tracer_env + extra), ("untraced", extra)):
            log = self.dir / f"run-{name}-{side}.txt"
            r, _ = proc.run(self.bench_cmd(model, split, devs), log=log, env=run_env, timeout=s.timeout)
            tps = tokens_per_s(log, s.n_gen)
            row[side] = {"status": r.status() if not r.ok else ("ok" if tps else "no result (exit 0)"),
                         "tps": tps, "log": log.name}
            say(f"  {side}: " + (f"{tps:.2f} tokens/s" if tps else row[side]["status"]))
        traced_log = (self.dir / row["traced"]["log"]).read_text(errors="replace")
        notes = [l for l in traced_log.splitlines() if l.startswith("gpuprof:")]
        if notes:
            row["tracer"] = notes
            say("\n".join("  " + l for l in notes))
        if trace.is_file():
            try:
                row["report"] = timeline.analyse_file(trace, options(s))
                summary = row["report"]["summary"]
                say(f"  wall {summary['wall_us']['median']:.1f} µs per token, busy {summary['busy_us']['median']:.1f}, "
                    f"{row['report']['tokens_kept']} tokens")
            except timeline.TraceError as e:
                row["error"] = str(e)
                say(f"  analysis: {e}")
            row["trace"] = compress(trace).name
        else:
            row["error"] = "no trace written"
            say(f"  no trace ({trace.name})")
        self.doc["runs"].append(row)
        return row

    def compare(self, none: Dict, other: Dict) -> None:
        if "report" not in none or "report" not in other:
            return
        c = timeline.compare(none["report"], other["report"])
        self.doc["compares"].append({"model": other["model"], "a": none["label"], "b": other["label"], "compare": c})
        say(f"  against {none['label']}: wall {c['wall_us']['diff']:+.1f} µs per token"
            + (f", {c['wall_us']['per_cut']:+.2f} µs per cut" if c["wall_us"]["per_cut"] is not None else ""))

    # ---- the job ---------------------------------------------------------------------------
    def prepare(self) -> bool:
        """A clean work directory (the build kept), the header, the build and the tracer."""
        s = self.s
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in self.dir.iterdir():
            if p.name != "build":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        gpus = proc.capture(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                           missing="")
        self.doc["host"] = {"cores": os.cpu_count(),
                            "gpus": ";".join(l.strip() for l in gpus.splitlines() if l.strip()) or "none (no nvidia-smi)"}
        lines = [f"started: {self.doc['started']}",
                 f"host: {self.doc['host']['cores']} cores; GPUs: {self.doc['host']['gpus']}",
                 f"settings: models='{' '.join(s.models)}' none={s.none_device} tensor='{' '.join(s.tensor)}' "
                 f"envs='{' '.join(s.envs)}' n_gen={s.n_gen} warmup={s.warmup} reps={s.reps} threads={s.threads} "
                 f"token_start='{s.token_start}' skip={s.skip} tokens={s.tokens} cut='{s.cut}' api={int(s.api)}",
                 f"code: {s.code or 'unknown'}"]
        say("\n".join(lines))
        self.save()
        if s.prebuilt:
            step(f"using the build in {self.tree}")
        elif not build.build(s, self.tree, nccl=s.nccl != "off", log_suffix="-profile", targets=TARGETS):
            say(f"build failed: see {self.out}/configure-profile.log or build-profile.log")
            return False
        lack = build.missing(self.tree, TARGETS)
        if lack:
            say(f"{self.tree} lacks {' '.join(lack)}")
            return False
        self.doc["ggml"] = settings_mod.ggml_version(s, self.tree)
        step("tracer")
        try:
            c = cupti.find()
            say(f"  {c.describe()}")
            self.doc["cupti"] = c.describe()
            self.tracer = cupti.build(c, self.dir)
        except cupti.CuptiError as e:
            say(f"tracer: {e}")
            return False
        say(f"built {self.tracer}")
        return tp.prepare_models(s, self.tree, self.models, self.dir / "models.txt")

    def run(self) -> int:
        s = self.s
        if not self.prepare():
            return 1
        for m in s.models:
            none = self.config(m, "none", s.none_device)
            self.save()
            for d in s.tensor:
                for e in [""] + s.envs:
                    self.compare(none, self.config(m, "tensor", d, e))
                    self.save()
        return 0


def compress(trace: Path) -> Path:
    """trace.tsv -> trace.tsv.gz (the raw file removed)."""
    gz = trace.with_name(trace.name + ".gz")
    with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        shutil.copyfileobj(src, dst)
    trace.unlink()
    return gz


# The device tool returns files of at most 16 MiB from $OUT: the traces go in a tarball of their
# own, copied back only when it is below this.
TRACES_BACK_MAX = 15 << 20


def pack(out: Path, tarball: Path, traces: bool = False) -> None:
    """The profile's tables and logs, and the build logs (no build tree, tracer or model); with
    `traces`, the compressed traces instead."""
    def keep(ti: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        skip = ti.name == "profile/build" or ti.name.endswith((".so", ".gguf", ".tmp"))
        if ti.isfile() and ti.name.endswith(".tsv.gz") != traces:
            skip = True
        return None if skip else ti
    with tarfile.open(tarball, "w:gz") as t:
        for p in sorted(out.glob("*-profile.log")) if not traces else []:
            t.add(p, arcname=p.name)
        if (out / "profile").is_dir():
            t.add(out / "profile", arcname="profile", filter=keep)


def main(s: Settings) -> int:
    """The profile job in the foreground, then profile.tgz and the marker profile-wait looks for."""
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    job = Profile(s)
    code = proc.guarded(job.run)
    job.doc["finished"], job.doc["exit"] = now(), code
    job.dir.mkdir(parents=True, exist_ok=True)
    job.save()
    step(f"tables ({job.dir / 'profile.md'})")
    say((job.dir / "profile.md").read_text())
    for name, traces in (("profile.tgz", False), ("profile-traces.tgz", True)):
        pack(out, out / (name + ".tmp"), traces)
        os.replace(out / (name + ".tmp"), out / name)
    (out / "profile-done").write_text(f"exit={code}\n")
    copy_to = os.environ.get("OUT")
    if copy_to:
        copy_back(out, job.dir, Path(copy_to))
    return code


def copy_back(out: Path, prof_dir: Path, dest: Path) -> None:
    """profile.tgz, the tables and the JSON into dest ($OUT), and the traces' tarball when the
    device tool can return it (TRACES_BACK_MAX)."""
    for name in ("profile.tgz", "profile-traces.tgz"):
        p = out / name
        if p.is_file() and (name == "profile.tgz" or p.stat().st_size <= TRACES_BACK_MAX):
            shutil.copy(p, dest / name)
    for name in ("profile.md", "profile.json"):
        if (prof_dir / name).is_file():
            shutil.copy(prof_dir / name, dest / name)
