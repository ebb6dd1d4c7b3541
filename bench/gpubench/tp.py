"""The tensor-parallel benchmark (subcommand tp; tp-start runs it detached).

For each model and configuration (split none on the baseline device, tensor over each --tensor
list, layer over each --layer list, row over each --row list): llama_bench_ref (upstream) then
llama_bench (ours), one process each doing pp<n_prompt> and tg<n_gen> at each --depths D (named
pp<n_prompt>@d<D> and tg<n_gen>@d<D> for D > 0: after D tokens in the KV cache); then
llama_driver_ref / llama_driver with --logits-out, compared with compare_logits. Before that, with
--archs, the small model of each architecture in tensor mode against ours split none. A run that
fails or crashes is a table cell; the job goes on.
"""
from __future__ import annotations

import os
import re
import shutil
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from . import build, compare, proc
from . import settings as settings_mod
from .compare import cell
from .proc import say, step
from .results import Results
from .settings import Settings

DASH = "–"
NONE_TOL = "0.05"   # ours in a split mode vs ours split none
# what the meta backend logs when it first runs a step as one CUDA graph (src/meta/backend.rs)
CAPTURED = "repeated steps run as one CUDA graph each"
ARCH_TOL = "1e-4"   # an architecture's default tolerance (f32 models, as in the CPU tests)


@dataclass(frozen=True)
class ArchModel:
    """A small model of ctests/matrix/models.txt: write_model flags (on top of 2 layers, 4 heads,
    300 tokens, f32, n_embd --arch-embd), its tolerance against split none (its TOL in
    ctests/matrix/tests.txt), and extra llama_driver arguments (the quantized KV caches of its
    kvq tests)."""
    name: str
    flags: str
    tol: str = ARCH_TOL
    driver_args: str = ""


ARCH_MODELS = [
    ArchModel("tiny-mqa-f32", "--n-head-kv 1 --n-ff 128 --seed 7"),
    ArchModel("qwen3-f32", "--arch qwen3 --n-head-kv 2 --n-ff 128 --seed 7"),
    ArchModel("qwen3moe-f32", "--arch qwen3moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 5"),
    ArchModel("gpt-oss-f32", "--arch gpt-oss --n-head-kv 2 --n-ff 64 --n-expert 4 --n-expert-used 2 --seed 5"),
    ArchModel("gemma-mqa-f32", "--arch gemma --n-head-kv 1 --n-ff 128 --seed 3"),
    ArchModel("qwen35-f32", "--arch qwen35 --n-head-kv 2 --n-ff 128 --seed 7"),
    ArchModel("qwen2-f32", "--arch qwen2 --n-head-kv 2 --n-ff 128 --seed 7"),
    ArchModel("gemma2-f32", "--arch gemma2 --n-head-kv 2 --n-ff 128 --seed 3", "1e-3"),
    ArchModel("gemma3-f32", "--arch gemma3 --n-head-kv 2 --n-ff 128 --seed 3", "1e-3"),
    ArchModel("llama4-f32", "--arch llama4 --n-layer 4 --n-head-kv 2 --n-ff 64 --n-expert 4 --n-expert-used 1 --seed 5",
              "1e-3"),
    ArchModel("cohere2-f32", "--arch cohere2 --n-head-kv 2 --n-ff 128 --seed 3"),
    ArchModel("glm4moe-f32", "--arch glm4moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11"),
    ArchModel("phi3-f32", "--arch phi3 --n-head-kv 2 --n-ff 128 --seed 7"),
    ArchModel("lfm2-f32", "--arch lfm2 --n-head-kv 2 --n-ff 128 --seed 7"),
    ArchModel("lfm2moe-f32", "--arch lfm2moe --n-head-kv 2 --n-ff 64 --n-expert 6 --n-expert-used 3 --seed 11"),
    ArchModel("kvq-q8_0-f32", "--n-head-kv 2 --n-ff 256 --seed 3", driver_args="--cache-type-k q8_0 --cache-type-v q8_0"),
    ArchModel("kvq-q4_0-f32", "--n-head-kv 2 --n-ff 256 --seed 3", driver_args="--cache-type-k q4_0 --cache-type-v q4_0"),
]


def arch_tolerances() -> List[List[str]]:
    return [[a.name, a.tol] for a in ARCH_MODELS if a.tol != ARCH_TOL]


def tag(split: str, devs: str, env: str = "", variant: str = "") -> str:
    """File-name tag of a configuration; "-nonccl" for the trees without NCCL (never for split
    none, which runs once)."""
    t = f"{split}-{devs.replace(',', '_')}"
    if env:
        t += "-" + re.sub(r"[^A-Za-z0-9_.-]", "_", env)
    if variant and split != "none":
        t += "-nonccl"
    return t


def label(split: str, devs: str, variant: str = "") -> str:
    return f"{split} {devs}" + (" (CUDA built without NCCL)" if variant else "")


def env_label(env: str) -> str:
    return f" [{env.replace('+', ' ')}]" if env else ""


def bench_tests(s: Settings) -> List[Tuple[str, int]]:
    """(test name as llama_bench prints it, depth) of each test of a llama_bench run, in its
    order: pp at every depth, then tg at every depth; "tg128" at depth 0, "tg128@d4096" at 4096."""
    kinds = ([f"pp{s.n_prompt}"] if s.n_prompt else []) + ([f"tg{s.n_gen}"] if s.n_gen else [])
    return [(k + (f"@d{d}" if d else ""), d) for k in kinds for d in s.depths]


class Tp:
    def __init__(self, s: Settings):
        self.s = s
        self.out = Path(s.out)
        self.dir = s.tp_dir
        self.models = self.out / "models"
        self.tree = s.build_dir
        self.variant = ""          # "nonccl" while the trees without NCCL run
        self.plugin = s.plugin_path()
        self.driver_args: List[str] = []   # the architecture check's current model's
        self.res = Results(self.dir, "tp", s.to_json())
        self.res["settings"]["plugin"] = self.plugin or "off"
        self.res["arch_tolerances"] = arch_tolerances()
        for k in ("bench", "logits", "archs"):
            self.res[k] = []

    # ---- one process -----------------------------------------------------------------------
    def side_args(self, side: str, split: str, devs: str) -> Tuple[str, str, str, List[str], List[str]]:
        """(binary suffix, split, devices, environment, extra arguments) of a run of side:
        upstream (the pristine build), ours, or plugin (the pristine build with the plugin's TP0
        over devs)."""
        if side == "upstream":
            return "_ref", split, devs, [], []
        if side == "plugin":
            return "_ref", "none", "TP0", [f"GGML_BACKEND_PATH={self.plugin}", f"GGML_BACKEND_RS_TP={devs}"], \
                ["--load-all-backends"]
        return "", split, devs, [], []

    def bench(self, model: str, split: str, devs: str, side: str, env: str = "") -> None:
        s = self.s
        suffix, run_split, run_devs, run_env, extra = self.side_args(side, split, devs)
        base = label(split, devs, self.variant)
        lab = base + env_label(env) + (" [plugin in upstream's program]" if side == "plugin" else "")
        log = self.dir / f"bench-{model}-{tag(split, devs, env, self.variant)}-{side}.txt"
        step(f"bench {model}, {lab}, {side}")
        cmd = [self.tree / "bench" / f"llama_bench{suffix}", "--model", self.models / f"{model}.gguf",
               "--split-mode", run_split, "--devices", run_devs] + extra + [
               "--n-prompt", s.n_prompt, "--n-gen", s.n_gen, "--n-ubatch", s.ubatch, "--flash-attn", "on",
               "--threads", s.threads, "--warmup", s.warmup, "--reps", s.reps]
        if s.depths != [0]:   # depth 0 alone is llama_bench's default: no flag (older programs lack it)
            cmd += ["--depths", ",".join(str(d) for d in s.depths)]
        r, _ = proc.run(cmd, log=log, env=run_env + (env.split("+") if env else []), timeout=s.timeout)
        failed = False
        for t, depth in bench_tests(s):
            row = {"model": model, "test": t, "depth": depth, "label": lab, "base": base, "split": split,
                   "devices": devs,
                   # a plugin row is a row of its own, compared with upstream's tensor run
                   "side": "ours" if side == "plugin" else side, "program": side, "env": env,
                   "build": self.variant or "main", "log": log.name}
            line = proc.first_line(log, f"result test={t} ")
            if line:
                kv = proc.key_values(line)
                reps = proc.first_line(log, f"reps: test={t} ")
                row.update(status="ok", median_tps=float(kv["median_tps"]), min_tps=float(kv["min_tps"]),
                           max_tps=float(kv["max_tps"]),
                           reps_tps=[float(x) for x in proc.key_values(reps).get("tps", "").split(",") if x]
                           if reps else [])
                say(f"  {t}: median {kv['median_tps']} tokens/s (min {kv['min_tps']}, max {kv['max_tps']}; "
                    f"{kv.get('reps', '?')} reps)")
            else:
                row["status"] = r.status() if not r.ok else "no result (exit 0)"
                say(f"  {t}: {row['status']}")
                failed = True
            self.res.append("bench", row)
        if failed:
            say(f"  last lines of {log}:")
            say("\n".join("    " + l for l in proc.tail(log, 3)))

    def logits_file(self, model: str, split: str, devs: str, side: str, env: str = "") -> Path:
        return self.dir / "logits" / f"{model}-{tag(split, devs, env, self.variant)}-{side}.bin"

    def logits_log(self, model: str, split: str, devs: str, side: str, env: str = "") -> Path:
        return self.dir / f"logits-{model}-{tag(split, devs, env, self.variant)}-{side}.txt"

    def logits(self, model: str, split: str, devs: str, side: str, env: str = "") -> str:
        """A greedy llama_driver run with --logits-out: "ok" or what failed."""
        s = self.s
        suffix, run_split, run_devs, run_env, extra = self.side_args(side, split, devs)
        cmd = [self.tree / "ctests" / f"llama_driver{suffix}", "--model", self.models / f"{model}.gguf",
               "--split-mode", run_split, "--devices", run_devs] + extra + self.driver_args + [
               "--n-predict", s.n_predict, "--threads", s.threads, "--flash-attn", "on",
               "--logits-out", self.logits_file(model, split, devs, side, env)]
        if side == "ours" and split == "tensor":
            cmd.append("--verbose")   # libllama's and the meta backend's info lines (CAPTURED)
        r, _ = proc.run(cmd, log=self.logits_log(model, split, devs, side, env),
                        env=run_env + (env.split("+") if env else []), timeout=s.timeout)
        return r.status()

    def compare(self, a: Path, b: Path, tol: str = "0") -> Dict:
        return compare.compare(self.tree / "ctests" / "compare_logits", a, b, tol)

    # ---- one configuration -----------------------------------------------------------------
    def config(self, model: str, split: str, devs: str) -> None:
        """Benchmarks (upstream, ours, ours with each --envs item in tensor mode, upstream and ours
        with each --envs-both item over several devices, the plugin), then logits and comparisons."""
        s = self.s
        variants, both = [""], []
        if split == "tensor" and not self.variant:
            variants += s.envs
            if "," in devs:
                variants += s.envs_both
                both += s.envs_both
        self.bench(model, split, devs, "upstream")
        for e in both:
            self.bench(model, split, devs, "upstream", e)
        for e in variants:
            self.bench(model, split, devs, "ours", e)
        plugin = split == "tensor" and bool(self.plugin) and not self.variant
        if plugin:
            self.bench(model, split, devs, "plugin")

        step(f"logits {model}, {label(split, devs, self.variant)}")
        expect = "bit-identical" if len(devs.split(",")) == 1 else "reported"
        st_ref = self.logits(model, split, devs, "upstream")
        none = self.logits_file(model, "none", s.none_device, "ours")
        for e in variants:
            lab = label(split, devs, self.variant) + env_label(e)
            st = self.logits(model, split, devs, "ours", e)
            a = self.logits_file(model, split, devs, "ours", e)
            b = self.logits_file(model, split, devs, "upstream")
            if st != "ok":
                vs_ref, vs_none = cell(f"ours {st}", verdict="run failed"), cell(DASH)
            else:
                if e:   # upstream has no logits run with these settings: against ours without
                    ours = self.logits_file(model, split, devs, "ours")
                    vs_ref = self.compare(a, ours) if ours.is_file() else cell(DASH)
                    log = self.logits_log(model, split, devs, "ours")
                    captured = log.is_file() and CAPTURED in log.read_text(errors="replace")
                    vs_ref["text"] = (f"vs ours without it{' (its steps captured)' if captured else ''}: "
                                      + vs_ref["text"])
                elif st_ref != "ok":
                    vs_ref = cell(f"upstream {st_ref}", verdict="run failed")
                else:
                    vs_ref = self.compare(a, b)
                    if expect == "bit-identical" and vs_ref["text"] != "bit-identical":
                        vs_ref["text"] = "UNEXPECTED, " + vs_ref["text"]
                if split == "none":
                    vs_none = cell(DASH)
                elif none.is_file():
                    vs_none = self.compare(a, none, NONE_TOL)
                else:
                    vs_none = cell("no split-none run of ours")
            exp = DASH if e else expect
            say(f"  {lab}: ours vs upstream: {vs_ref['text']} (expected: {exp}); "
                f"ours vs ours split none: {vs_none['text']}")
            self.res.append("logits", {"model": model, "label": lab, "split": split, "devices": devs, "env": e,
                                       "build": self.variant or "main", "vs_upstream": vs_ref, "expected": exp,
                                       "vs_none": vs_none})
        if plugin:
            # the plugin runs our meta device with the same splits and kernels as ours linked
            lab = f"{split} {devs} [plugin in upstream's program]"
            st = self.logits(model, split, devs, "plugin")
            p = self.logits_file(model, split, devs, "plugin")
            if st != "ok":
                vs_ref, vs_none = cell(f"plugin {st}", verdict="run failed"), cell(DASH)
            else:
                vs_ref = self.compare(p, self.logits_file(model, split, devs, "ours"))
                vs_none = self.compare(p, none, NONE_TOL)
            vs_ref["text"] = "vs ours linked: " + vs_ref["text"]
            say(f"  {lab}: {vs_ref['text']} (expected: bit-identical); vs ours split none: {vs_none['text']}")
            self.res.append("logits", {"model": model, "label": lab, "split": split, "devices": devs, "env": "",
                                       "build": "main", "vs_upstream": vs_ref, "expected": "bit-identical",
                                       "vs_none": vs_none})

    # ---- the architectures ----------------------------------------------------------------
    def archs(self) -> None:
        """Each architecture: ours split none on the baseline device, then ours, upstream and the
        plugin in tensor mode over each multi-device --tensor list, each against the split-none run:
        the same greedy tokens, logits within the model's tolerance."""
        s = self.s
        head_dim = f"GGML_BACKEND_RS_TP_HEAD_DIM={s.arch_embd // 4}"
        for a in ARCH_MODELS:
            name = f"arch-{a.name}"
            r, _ = proc.run([self.tree / "ctests" / "write_model", "--n-embd", s.arch_embd, "--n-layer", "2",
                             "--n-head", "4", "--n-vocab", "300", "--type", "f32"] + a.flags.split()
                            + ["--out", self.models / f"{name}.gguf"], capture=True)
            if not r.ok:
                say(f"  {a.name}: write_model failed")
                continue
            step(f"architecture {a.name}")
            self.driver_args = a.driver_args.split()
            st_none = self.logits(name, "none", s.none_device, "ours")
            none = self.logits_file(name, "none", s.none_device, "ours")
            tokens_none = proc.first_line(self.logits_log(name, "none", s.none_device, "ours"), "tokens:")
            for d in s.tensor:
                if "," not in d:
                    continue
                row = {"model": a.name, "label": f"tensor {d}", "devices": d, "tol": a.tol}
                for side in ("ours", "upstream", "plugin"):
                    if side == "plugin" and not self.plugin:
                        row[side] = cell(DASH)
                        continue
                    # the plugin learns the head size from Q/K norms or sinks, which not every
                    # model has; the variable gives it (see README)
                    e = head_dim if side == "plugin" else ""
                    st = self.logits(name, "tensor", d, side, e)
                    if st != "ok":
                        c = cell(f"{side} {st}", verdict="run failed")
                    elif st_none != "ok":
                        c = cell(f"split none {st_none}", verdict="run failed")
                    else:
                        c = self.compare(self.logits_file(name, "tensor", d, side, e), none, a.tol)
                        t = proc.first_line(self.logits_log(name, "tensor", d, side, e), "tokens:")
                        if not t or not tokens_none:
                            c["text"] = "no tokens line, " + c["text"]
                        else:
                            c["same_tokens"] = t == tokens_none
                            c["text"] = ("same tokens, " if t == tokens_none else "OTHER TOKENS, ") + c["text"]
                    say(f"  tensor {d}, {side} vs ours split none: {c['text']}")
                    row[side] = c
                self.res.append("archs", row)
            self.res.save()
        self.driver_args = []

    # ---- the job ---------------------------------------------------------------------------
    def header(self) -> None:
        s = self.s
        gpus = proc.capture(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"], missing="")
        gpus = ";".join(l.strip() for l in gpus.splitlines() if l.strip())
        host = {"cores": os.cpu_count(), "gpus": gpus or "none (no nvidia-smi)"}
        lines = [f"started: {self.res['started']}",
                 f"host: {host['cores']} cores; GPUs: {host['gpus']}",
                 f"settings: models='{' '.join(s.models)}' none={s.none_device} tensor='{' '.join(s.tensor)}' "
                 f"layer='{' '.join(s.layer)}' row='{' '.join(s.row)}' envs='{' '.join(s.envs)}' "
                 f"envs_both='{' '.join(s.envs_both)}' plugin='{self.plugin or 'off'}'",
                 f"          reps={s.reps} warmup={s.warmup} n_prompt={s.n_prompt} n_gen={s.n_gen} "
                 f"depths={','.join(str(d) for d in s.depths)} "
                 f"n_ubatch={s.ubatch} threads={s.threads} nccl={s.nccl} cpu_test={int(s.cpu_test)}"]
        (self.dir / "nvidia-smi.txt").write_text(proc.capture(["nvidia-smi"]))
        (self.dir / "topology.txt").write_text(proc.capture(["nvidia-smi", "topo", "-m"]))
        if s.nccl != "off":
            try:
                host["nccl"] = build.nccl_version()
            except Exception as e:  # noqa: BLE001 (a note in the settings, not a failure)
                host["nccl"] = f"unknown ({e})"
            lines.append(f"NCCL: {host['nccl']}")
        self.res["host"] = host
        lines.append(f"code: {s.code or 'unknown'}")
        (self.dir / "settings.txt").write_text("\n".join(lines) + "\n")
        say("\n".join(lines))

    def build_trees(self) -> bool:
        s = self.s
        if s.prebuilt:
            step(f"using the build in {self.tree}")
        elif not build.build(s, self.tree, nccl=s.nccl != "off"):
            say(f"build failed: see {self.out}/configure.log or build.log")
            return False
        trees = [self.tree]
        # (the trees without NCCL serve the benchmark rows only)
        if s.nccl == "both" and s.bench:
            trees.append(s.build_dir_nonccl)
            if s.prebuilt_nonccl:
                step(f"using the build without NCCL in {s.build_dir_nonccl}")
            elif not build.build(s, s.build_dir_nonccl, nccl=False, log_suffix="-nonccl"):
                say(f"build without NCCL failed: see {self.out}/configure-nonccl.log or build-nonccl.log")
                return False
        for t in trees:
            lack = build.missing(t)
            if lack:
                say(f"{t} lacks {' '.join(lack)}")
                return False
        return True

    def prepare_models(self) -> bool:
        return prepare_models(self.s, self.tree, self.models, self.dir / "models.txt")

    def run(self) -> int:
        s = self.s
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "logits").mkdir(parents=True)
        self.models.mkdir(parents=True, exist_ok=True)
        self.header()
        self.res.save()
        if not self.build_trees():
            return 1
        self.res["ggml"] = settings_mod.ggml_version(s)
        say(f"ggml {self.res['ggml'] or 'unknown'}")
        if not s.bench:
            self.archs()
            self.res.save()
            return 0
        if not self.prepare_models():
            return 1
        if s.archs:
            self.archs()
            self.res.save()
        for m in s.models:
            configs = [("none", s.none_device)] + [("tensor", d) for d in s.tensor] \
                + [("layer", d) for d in s.layer] + [("row", d) for d in s.row]
            for split, d in configs:
                self.config(m, split, d)
                self.res.save()
            if s.nccl == "both":
                main, self.tree, self.variant = self.tree, s.build_dir_nonccl, "nonccl"
                for d in s.tensor:
                    if "," in d:
                        self.config(m, "tensor", d)
                        self.res.save()
                self.tree, self.variant = main, ""
        return 0


def prepare_models(s: Settings, tree: Path, models: Path, listing: Path) -> bool:
    """The large f16 model (s.tp_shape()) and its quantized copies (s.models) in models, written
    with tree's write_model and llama_bench --quantize; their sizes go to listing. A model is kept
    across runs on the same machine (tp's and profile's) while its flags are unchanged."""
    models.mkdir(parents=True, exist_ok=True)
    f16 = models / "f16.gguf"
    want = " ".join(["write_model"] + s.tp_shape() + ["--type", "f16", "--seed", "42", "--stream"])
    if f16.is_file() and _read(f16.with_name("f16.gguf.flags")) == want:
        step("model f16: kept from an earlier run")
    else:
        step("model f16: writing")
        for p in models.iterdir():
            p.unlink()
        r, text = proc.run([tree / "ctests" / "write_model"] + s.tp_shape()
                           + ["--type", "f16", "--seed", "42", "--stream", "--out", f16], capture=True)
        say("\n".join(text.splitlines()[-2:]))
        if not r.ok:
            return False
        f16.with_name("f16.gguf.flags").write_text(want + "\n")
    for m in s.models:
        q = models / f"{m}.gguf"
        if m == "f16" or (q.is_file() and _read(q.with_name(f"{m}.gguf.flags")) == want):
            continue
        step(f"model {m}: llama_bench --quantize")
        r, text = proc.run([tree / "bench" / "llama_bench", "--quantize", f16, q, m], capture=True)
        say("\n".join(text.splitlines()[-1:]))
        if not r.ok:
            return False
        q.with_name(f"{m}.gguf.flags").write_text(want + "\n")
    sizes = "\n".join(f"{p.stat().st_size:>14} {p}" for p in sorted(models.glob("*.gguf")))
    listing.write_text(sizes + "\n")
    say(sizes)
    return True


def _read(p: Path) -> Optional[str]:
    try:
        return p.read_text().strip()
    except OSError:
        return None


def pack(out: Path, tarball: Path) -> None:
    """The logs and tables (no models, no logits files, no build tree) as one tarball."""
    def keep(ti: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        return None if ti.name.endswith((".bin", ".gguf")) else ti
    with tarfile.open(tarball, "w:gz") as t:
        for p in sorted(out.glob("*.log")):
            t.add(p, arcname=p.name, filter=keep)
        if (out / "tp").is_dir():
            t.add(out / "tp", arcname="tp", filter=keep)


def main(s: Settings) -> int:
    """The tp job in the foreground, then the tarball and the marker tp-wait looks for."""
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    job = Tp(s)
    code = proc.guarded(job.run)
    job.res.finish(code)
    with open(job.dir / "settings.txt", "a") as f:
        f.write(f"finished: {job.res['finished']} ({proc.elapsed()}s)\n")
    step(f"tables ({job.dir / 'table.md'})")
    say((job.dir / "table.md").read_text())
    (job.dir / "exit.txt").write_text(f"exit={code}\n")
    tarball = out / "tp.tgz"
    pack(out, out / "tp.tgz.tmp")
    os.replace(out / "tp.tgz.tmp", tarball)
    (out / "tp-done").write_text(f"exit={code}\n")
    copy_to = os.environ.get("OUT")
    if copy_to:
        shutil.copy(tarball, Path(copy_to) / "tp.tgz")
        shutil.copy(job.dir / "results.json", Path(copy_to) / "tp-results.json")
    return code
