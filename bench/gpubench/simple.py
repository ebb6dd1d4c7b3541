"""Subcommands all (one GPU) and multi (two GPUs with NCCL): llama_driver of both builds on one
random f16 model (n_embd 2048, 8 layers, 0.98 GB), tokens and logits compared, then alternating
timing runs. Both fit in one device call (build included)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Dict, List, Sequence

from . import build, compare, proc
from .compare import cell
from .proc import say, step
from .results import Results
from . import settings as settings_mod
from .settings import Settings

DASH = "–"
SHOWN = ("devices_available:", "tokens:", "digest:", "timing:")
N_PREDICT = 64        # greedy tokens of a compared run
N_PREDICT_TIMING = 128
TIMING_RUNS = 5


def variant_name(i: int, env: str) -> str:
    """The `i`-th environment item (VAR=value[+VAR=value...]) as part of a file name (the index
    keeps items apart that differ only in characters a name cannot hold)."""
    return f"{i}-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in env)


def tree_ready(s: Settings, nccl: bool) -> bool:
    if s.prebuilt:
        step(f"using the build in {s.build_dir}")
    elif not build.build(s, s.build_dir, nccl=nccl):
        say(f"build failed: see {Path(s.out) / 'build.log'}")
        return False
    lack = build.missing(s.build_dir)
    if lack:
        say(f"{s.build_dir} lacks {' '.join(lack)}")
    return not lack


class Decode:
    """llama_driver runs of one subcommand, kept in results.json."""

    def __init__(self, s: Settings, kind: str):
        self.s = s
        self.dir = Path(s.out) / kind
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.bin = build.binaries(s.build_dir)
        self.model = Path(s.out) / "model.gguf"
        self.res = Results(self.dir, kind, s.to_json())
        self.res["ggml"] = settings_mod.ggml_version(s)
        self.status: Dict[str, str] = {}   # run name -> "ok" or its failure

    def write_model(self) -> bool:
        step("model")
        r, text = proc.run([self.bin["write_model"]] + self.s.small_shape() + ["--type", "f16", "--out", self.model],
                           capture=True)
        say(text.rstrip())
        return r.ok

    def driver(self, side: str, name: str, args: List[str], env: List[str] = (), logits: bool = True) -> Dict:
        """One run of ours (side "ours") or upstream ("ref"); prints and returns its key lines."""
        exe = self.bin["llama_driver" if side == "ours" else "llama_driver_ref"]
        log = self.dir / f"{name}.txt"
        cmd = [exe, "--model", self.model] + args + ["--threads", self.s.threads]
        if logits:
            cmd += ["--logits-out", self.dir / f"{name}.bin"]
        r, _ = proc.run(cmd, log=log, env=list(env), timeout=self.s.timeout)
        rec = {"side": side, "name": name, "args": [str(a) for a in args], "env": list(env), "status": r.status()}
        self.status[name] = rec["status"]
        for key in SHOWN:
            line = proc.first_line(log, key)
            if line is not None:
                rec[key[:-1]] = line.split(":", 1)[1].strip()
        if "timing" in rec:
            rec["timing"] = {k: float(v) for k, v in proc.key_values("timing: " + rec["timing"]).items()}
        return rec

    def show(self, rec: Dict, full: bool = True) -> None:
        lines = [f"{k}: {rec[k]}" for k in ("devices_available", "tokens", "digest") if k in rec and (full or k != "devices_available")]
        if "timing" in rec:
            lines.append("timing: " + " ".join(f"{k}={v:g}" for k, v in rec["timing"].items()))
        if rec["status"] != "ok":
            lines.append(f"status: {rec['status']}")
            lines += proc.tail(self.dir / f"{rec['name']}.txt", 5)
        say("\n".join(lines))

    def compare(self, a: str, b: str, tol: str = "0") -> Dict:
        for name in (a, b):
            st = self.status.get(name, "not run")
            if st != "ok":
                who = "ours" if name.startswith("ours") else "upstream"
                c = cell(f"{who} {st}", verdict="run failed")
                say(c["text"])
                return c
        c = compare.compare(self.bin["compare_logits"], self.dir / f"{a}.bin", self.dir / f"{b}.bin", tol)
        say(c["text"])
        return c

    def timing(self, args: List[str], envs: Sequence[str] = ()) -> None:
        """TIMING_RUNS rounds of upstream, ours, then ours with each of `envs` (VAR=value[+...])."""
        runs = [("ref", "", 0), ("ours", "", 0)] + [("ours", e, k) for k, e in enumerate(envs)]
        for i in range(1, TIMING_RUNS + 1):
            for side, variant, k in runs:
                name = f"timing-{i}-{side}" + (f"-{variant_name(k, variant)}" if variant else "")
                rec = self.driver(side, name, args + ["--n-predict", N_PREDICT_TIMING],
                                  env=variant.split("+") if variant else [], logits=False)
                rec["run"], rec["variant"] = i, variant
                t = rec.get("timing")
                label = side + (f" [{variant}]" if variant else "")
                say(f"{label}: " + (" ".join(f"{k}={v:g}" for k, v in t.items()) if t else rec["status"]))
                self.res.append("timing", rec)
        self.res.save()

    def finish(self, code: int) -> int:
        self.res.finish(code)
        (Path(self.s.out) / "done").write_text(f"exit={code}\n")
        step(f"table ({self.dir / 'table.md'})")
        say((self.dir / "table.md").read_text())
        copy_to = os.environ.get("OUT")
        if copy_to:
            kind = self.res["kind"]
            shutil.copy(self.dir / "results.json", Path(copy_to) / f"{kind}-results.json")
            shutil.copy(self.dir / "table.md", Path(copy_to) / f"{kind}-table.md")
        return code


def run_all(s: Settings) -> int:
    """Build, then ours and upstream on one device: tokens, logits, timing."""
    if not tree_ready(s, nccl=False):
        return 1
    d = Decode(s, "all")
    if not d.write_model():
        return d.finish(1)
    base = ["--split-mode", "none", "--devices", s.device(0)]
    for side in ("ours", "ref"):
        step(f"decode {side}")
        rec = d.driver(side, side, base + ["--n-predict", N_PREDICT])
        d.show(rec)
        d.res.append("decode", rec)
    step("compare")
    d.res["compare"] = d.compare("ours", "ref")
    d.res.save()
    step(f"timing: {TIMING_RUNS} alternating runs each")
    d.timing(base)
    return d.finish(0)


def run_multi(s: Settings) -> int:
    """Two devices: each split mode with both builds (ours must match upstream, and every mode the
    single device's tokens); ours in tensor mode with each --envs item; ours with the AllReduce
    fallback forced; uneven and empty tensor slices; timing of tensor mode (with each --envs item)."""
    if not tree_ready(s, nccl=not s.cpu_test):
        return 1
    d = Decode(s, "multi")
    if not d.write_model():
        return d.finish(1)
    d0, pair = s.device(0), f"{s.device(0)},{s.device(1)}"
    for split, devs in (("none", d0), ("layer", pair), ("tensor", pair)):
        recs = {}
        for side in ("ours", "ref"):
            step(f"{side}: split {split} over {devs}")
            recs[side] = d.driver(side, f"{side}-{split}", ["--split-mode", split, "--devices", devs,
                                                            "--n-predict", N_PREDICT])
            d.show(recs[side], full=False)
            d.res.append("runs", recs[side])
        step(f"compare {split}: ours vs upstream")
        vs_up = d.compare(f"ours-{split}", f"ref-{split}")
        vs_one = cell(DASH)
        if split != "none":
            step(f"compare {split}: ours vs ours on one device")
            vs_one = d.compare(f"ours-{split}", "ours-none", "0.05")
        d.res.append("configs", {"label": f"{split}, {devs}", "ours": recs["ours"]["status"],
                                 "upstream": recs["ref"]["status"], "vs_upstream": vs_up, "vs_one": vs_one})
        d.res.save()
    # Ours in tensor mode with each --envs item: the same logits as without it (bit for bit: an
    # item that changes how a step is queued, not what it computes), and as one device.
    for k, env in enumerate(s.envs):
        step(f"ours: tensor split over {pair} with {env}")
        name = f"ours-tensor-{variant_name(k, env)}"
        rec = d.driver("ours", name, ["--split-mode", "tensor", "--devices", pair, "--n-predict", N_PREDICT],
                       env=env.split("+"))
        d.show(rec, full=False)
        d.res.append("runs", rec)
        step(f"compare {env} vs ours without it")
        vs_ours = d.compare(name, "ours-tensor")
        vs_ours["text"] = "vs ours without it: " + vs_ours["text"]
        d.res.append("configs", {"label": f"tensor, {pair}, {env}", "ours": rec["status"], "vs_upstream": vs_ours,
                                 "vs_one": d.compare(name, "ours-none", "0.05")})
        d.res.save()
    step("ours: tensor split, AllReduce fallback (no NCCL)")
    rec = d.driver("ours", "ours-fallback", ["--split-mode", "tensor", "--devices", pair, "--n-predict", N_PREDICT],
                   env=["GGML_META_NO_BACKEND_ALLREDUCE=1"])
    d.show(rec, full=False)
    d.res.append("runs", rec)
    step("compare fallback vs NCCL (ours)")
    vs_default = d.compare("ours-fallback", "ours-tensor", "0.05")
    vs_default["text"] = "vs ours' default AllReduce: " + vs_default["text"]
    step("compare fallback vs one device")
    d.res.append("configs", {"label": f"tensor, {pair}, GGML_META_NO_BACKEND_ALLREDUCE=1", "ours": rec["status"],
                             "vs_upstream": vs_default, "vs_one": d.compare("ours-fallback", "ours-none", "0.05")})
    # Uneven and empty slices: 3:1, and everything on the first device (the second holds
    # zero-size slices of every split tensor and contributes zero partial sums).
    for ts in ("3,1", "1,0"):
        step(f"ours: tensor split {ts}")
        name = f"ours-ts-{ts.replace(',', '_')}"
        rec = d.driver("ours", name, ["--split-mode", "tensor", "--devices", pair, "--tensor-split", ts,
                                      "--n-predict", N_PREDICT])
        d.show(rec, full=False)
        d.res.append("runs", rec)
        d.res.append("configs", {"label": f"tensor, {pair}, --tensor-split {ts}", "ours": rec["status"],
                                 "vs_one": d.compare(name, "ours-none", "0.05")})
    d.res.save()
    step(f"timing, tensor split: {TIMING_RUNS} alternating runs each")
    d.timing(["--split-mode", "tensor", "--devices", pair], s.envs)
    return d.finish(0)
