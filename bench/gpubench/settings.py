"""Settings of every subcommand: one typed dataclass, filled from command-line flags and, with
--from-env (what bench/gpu.sh passes), from the TP_* / GPU_DIR environment gpu.sh used to read.

Defaults that depend on --cpu-test (a CPU-only host checking the program) are left None by the
parser and filled in by resolve(), so a flag or an environment value always wins over them.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

ROOT = Path(__file__).resolve().parents[2]  # bench/gpubench/settings.py -> the repository

QUANT_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
NCCL_MODES = ("off", "on", "both")


@dataclass
class Settings:
    out: str = "/tmp/gpu"             # logs, models, build trees, results
    gpu_dir: str = str(ROOT / ".gpu")  # llama.cpp/ and libggml_backend_rs.a, carried
    prebuilt: str = ""                # a tree that has the targets: no configure, no build
    prebuilt_nonccl: str = ""         # the same for the trees without NCCL of --nccl both
    cpu_test: bool = False            # CPU-only check: no CUDA, small models, CPU devices
    jobs: int = os.cpu_count() or 1
    timeout: int = 300                # seconds for one benchmark or logits process
    models: List[str] = field(default_factory=lambda: ["f16", "q4_0"])
    none_device: str = "CUDA0"
    tensor: List[str] = field(default_factory=lambda: ["CUDA0", "CUDA0,CUDA0"])
    layer: List[str] = field(default_factory=list)
    row: List[str] = field(default_factory=list)
    reps: int = 10
    warmup: int = 2
    n_prompt: int = 512
    n_gen: int = 128
    depths: List[int] = field(default_factory=lambda: [0])  # context depths: tokens cached before each test
    ubatch: int = 512
    threads: int = 4
    nccl: str = "off"
    envs: List[str] = field(default_factory=list)
    envs_both: List[str] = field(default_factory=list)
    plugin: Optional[str] = None      # None: <gpu_dir>/libggml-backend-rs-tp.so if it exists; "off"
    n_predict: int = 16
    archs: bool = True
    arch_embd: int = 256
    bench: bool = True
    code: str = ""                    # the code measured: a commit (git's, where the tree has .git)
    # the profile (gpu.py profile) and its analysis (timeline.Options)
    token_start: str = "get_rows"     # regex of the kernel that occurs once per token and stream
    skip: int = 2                     # first tokens dropped
    tokens: int = 0                   # the last N tokens kept (0: all after skip)
    cut: str = "ggml_meta_allreduce"  # regex of the AllReduce kernels
    api: bool = False                 # the tracer records host API calls too (GPUPROF_API=1)

    # ---- derived -------------------------------------------------------------------------
    @property
    def build_dir(self) -> Path:
        return Path(self.prebuilt) if self.prebuilt else Path(self.out) / "build"

    @property
    def build_dir_nonccl(self) -> Path:
        return Path(self.prebuilt_nonccl) if self.prebuilt_nonccl else Path(self.out) / "build-nonccl"

    @property
    def tp_dir(self) -> Path:
        return Path(self.out) / "tp"

    def plugin_path(self) -> str:
        """The plugin module, or "" for none."""
        p = self.plugin if self.plugin is not None else str(Path(self.gpu_dir) / "libggml-backend-rs-tp.so")
        return "" if p == "off" or not os.path.isfile(p) else p

    def tp_shape(self) -> List[str]:
        """write_model flags of the tp job's large model."""
        if self.cpu_test:
            return "--n-embd 256 --n-layer 2 --n-head 8 --n-head-kv 2 --n-ff 512 --n-vocab 1000 --n-ctx-train 2048".split()
        # Llama-3-8B-shaped (vocabulary 32000): 7.24e9 parameters, 14.5 GB (13.5 GiB) in f16.
        return ("--n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336 --n-vocab 32000"
                " --n-ctx-train 8192 --rope-freq-base 500000").split()

    def small_shape(self) -> List[str]:
        """write_model flags of the all/multi model (0.98 GB f16; the tp CPU shape with --cpu-test)."""
        if self.cpu_test:
            return self.tp_shape()
        return "--n-embd 2048 --n-layer 8 --n-head 16 --n-head-kv 4 --n-ff 5632 --n-vocab 32000".split()

    @property
    def profile_dir(self) -> Path:
        return Path(self.out) / "profile"

    def device(self, i: int) -> str:
        """GPU i of all/multi; the CPU with --cpu-test."""
        return "CPU" if self.cpu_test else f"CUDA{i}"

    def to_json(self) -> Dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Mapping) -> "Settings":
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


# Defaults that --cpu-test changes: (GPU host, CPU test). None: "the number of cores".
CPU_TEST_DEFAULTS = {
    "tensor": (["CUDA0", "CUDA0,CUDA0"], ["CPU", "CPU,CPU"]),
    "none_device": ("CUDA0", "CPU"),
    "reps": (10, 3),
    "warmup": (2, 1),
    "n_prompt": (512, 64),
    "n_gen": (128, 16),
    "threads": (4, None),
    # heads of 64 on the GPU: CUDA's flash attention has no kernel for the CPU tests' 16
    "arch_embd": (256, 64),
}

# Defaults of the profile subcommands: one model, the 2-way proxy, decode only and short.
PROFILE_DEFAULTS = {
    "models": ["f16"],
    "tensor": ["CUDA0,CUDA0"],
    "n_gen": 32,
    "reps": 1,
    "warmup": 1,
}

# The groups of settings a subcommand takes (Opt.group).
RUN, ANALYSIS, PROFILE = "run", "analysis", "profile"


@dataclass(frozen=True)
class Opt:
    dest: str
    flag: str
    env: Optional[str]    # the variable gpu.sh read (used with --from-env)
    kind: str             # str, int, list, ints (a list of integers), bool, path, choice
    help: str
    choices: tuple = ()
    empty_is_value: bool = False  # TP_DEVICES="" means "no tensor lists", not "default"
    group: str = RUN              # run: every running subcommand; analysis, profile: the profile's


OPTS = [
    Opt("out", "--out", None, "path", "work directory: logs, models, build trees, results [/tmp/gpu]"),
    Opt("gpu_dir", "--gpu-dir", "GPU_DIR", "path", "where llama.cpp/ and libggml_backend_rs.a are [<repo>/.gpu]"),
    Opt("prebuilt", "--prebuilt", "TP_PREBUILT", "path", "a build tree that already has the targets: skip configure and build"),
    Opt("prebuilt_nonccl", "--prebuilt-nonccl", "TP_PREBUILT_NONCCL", "path", "the same for the trees without NCCL of --nccl both"),
    Opt("cpu_test", "--cpu-test", "TP_CPU_TEST", "bool", "check on a CPU-only host: no CUDA, small models, devices CPU and CPU,CPU"),
    Opt("jobs", "--jobs", None, "int", "build jobs [cores]"),
    Opt("timeout", "--timeout", "TP_TIMEOUT", "int", "seconds after which one benchmark or logits process is stopped [300]"),
    Opt("models", "--models", "TP_MODELS", "list", "f16 and/or quantized copies: " + " ".join(QUANT_TYPES) + " [f16 q4_0]"),
    Opt("none_device", "--none-device", "TP_NONE_DEVICE", "str", "the device of the split-none baseline [CUDA0; CPU]"),
    Opt("tensor", "--tensor", "TP_DEVICES", "list", "device lists for split tensor [CUDA0 CUDA0,CUDA0; CPU CPU,CPU]", empty_is_value=True),
    Opt("layer", "--layer", "TP_LAYER", "list", "device lists for split layer, e.g. CUDA0,CUDA1 [none]"),
    Opt("row", "--row", "TP_ROW", "list", "device lists for split row (CUDA's split buffer type) [none]"),
    Opt("reps", "--reps", "TP_REPS", "int", "timed repetitions [10; 3]"),
    Opt("warmup", "--warmup", "TP_WARMUP", "int", "warm-up runs [2; 1]"),
    Opt("n_prompt", "--n-prompt", "TP_NPROMPT", "int", "prompt tokens of the pp test [512; 64]"),
    Opt("n_gen", "--n-gen", "TP_NGEN", "int", "generated tokens of the tg test [128; 16]"),
    Opt("depths", "--depths", "TP_DEPTHS", "ints",
        "context depths: each pp and tg test runs once per depth D, after D tokens in the KV cache [0]"),
    Opt("ubatch", "--ubatch", "TP_UBATCH", "int", "n_ubatch [512]"),
    Opt("threads", "--threads", "TP_THREADS", "int", "threads of each process [4; cores]"),
    Opt("nccl", "--nccl", "TP_NCCL", "choice", "on: build with NCCL; both: also trees without NCCL for tensor mode [off]", NCCL_MODES),
    Opt("envs", "--envs", "TP_ENVS", "list", "extra runs of ours per tensor list, each item VAR=value[+VAR=value...]"),
    Opt("envs_both", "--envs-both", "TP_ENVS_BOTH", "list", "extra runs of upstream and ours per multi-device tensor list"),
    Opt("plugin", "--plugin", "TP_PLUGIN", "str", "the plugin module, or off [<gpu-dir>/libggml-backend-rs-tp.so if present]"),
    Opt("n_predict", "--n-predict", "TP_NPREDICT", "int", "greedy tokens of each logits run [16]"),
    Opt("archs", "--archs", "TP_ARCHS", "bool", "on: the architecture check first [on]"),
    Opt("arch_embd", "--arch-embd", "TP_ARCH_EMBD", "int", "n_embd of the architecture models, 4 heads [256; 64]"),
    Opt("bench", "--bench", "TP_BENCH", "bool", "off: only the architecture check [on]"),
    Opt("code", "--code", None, "str", "the code measured, kept in the results [git's commit, where the tree has .git]"),
    Opt("token_start", "--token-start", None, "str", "kernel (regex) that runs once per token and stream [get_rows]",
        group=ANALYSIS),
    Opt("skip", "--skip", None, "int", "first tokens dropped (warm-up) [2]", group=ANALYSIS),
    Opt("tokens", "--tokens", None, "int", "keep the last N tokens after --skip (0: all) [0]", group=ANALYSIS),
    Opt("cut", "--cut", None, "str", "the AllReduce kernels (regex) [ggml_meta_allreduce]", group=ANALYSIS),
    Opt("api", "--api", None, "bool", "on: the tracer records host API calls too (GPUPROF_API=1) [off]", group=PROFILE),
]

TRUE_WORDS = ("on", "1", "yes", "true")
FALSE_WORDS = ("off", "0", "no", "false", "")


def parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in TRUE_WORDS:
        return True
    if t in FALSE_WORDS:
        return False
    raise argparse.ArgumentTypeError(f"{text!r}: not on or off")


def add_options(p: argparse.ArgumentParser, groups: Sequence[str] = (RUN,)) -> None:
    """Adds the settings of groups as flags; all default to None so resolve() sees what was given."""
    for o in OPTS:
        if o.group not in groups:
            continue
        kw = dict(dest=o.dest, default=None, help=o.help)
        if o.kind == "list":
            kw.update(nargs="*", metavar="ITEM")
        elif o.kind == "ints":
            kw.update(nargs="*", type=int, metavar="N")
        elif o.kind == "int":
            kw.update(type=int)
        elif o.kind == "bool":
            kw.update(nargs="?", const=True, type=parse_bool, metavar="on|off")
        elif o.kind == "choice":
            kw.update(choices=o.choices)
        p.add_argument(o.flag, **kw)
    p.add_argument("--from-env", action="store_true",
                   help="also read gpu.sh's environment (TP_*, GPU_DIR); flags win (bench/gpu.sh passes it)")


class SettingsError(ValueError):
    pass


def _from_text(o: Opt, text: str):
    if o.kind == "list":
        return text.split()
    if o.kind == "ints":
        try:
            return [int(t) for t in text.split()]
        except ValueError:
            raise SettingsError(f"{o.env}={text}: not a list of numbers") from None
    if o.kind == "int":
        try:
            return int(text)
        except ValueError:
            raise SettingsError(f"{o.env}={text}: not a number") from None
    if o.kind == "bool":
        try:
            return parse_bool(text)
        except argparse.ArgumentTypeError as e:
            raise SettingsError(f"{o.env}: {e}") from None
    if o.kind == "choice" and text not in o.choices:
        raise SettingsError(f"{o.env}={text}: not {', '.join(o.choices[:-1])} or {o.choices[-1]}")
    return text


def resolve(ns: argparse.Namespace, environ: Optional[Mapping[str, str]] = None,
            defaults: Optional[Mapping[str, object]] = None) -> Settings:
    """Settings from parsed flags (None: not given), then the environment with --from-env, then
    the defaults: the subcommand's (defaults), else those of --cpu-test where it changes them."""
    environ = os.environ if environ is None else environ
    use_env = bool(getattr(ns, "from_env", False))
    given = {}
    for o in OPTS:
        v = getattr(ns, o.dest, None)
        if v is None and use_env and o.env and o.env in environ:
            text = environ[o.env]
            if text.strip() or o.empty_is_value:
                v = _from_text(o, text)
        if v is not None:
            given[o.dest] = v
    s = Settings()
    cpu_test = bool(given.get("cpu_test", False))
    for name, (gpu, cpu) in CPU_TEST_DEFAULTS.items():
        d = cpu if cpu_test else gpu
        setattr(s, name, (os.cpu_count() or 1) if d is None else d)
    for k, v in (defaults or {}).items():
        setattr(s, k, list(v) if isinstance(v, list) else v)
    for k, v in given.items():
        setattr(s, k, v)
    # child processes may run in another directory (the detached job)
    for k in ("out", "gpu_dir", "prebuilt", "prebuilt_nonccl"):
        if getattr(s, k):
            setattr(s, k, os.path.abspath(getattr(s, k)))
    if s.plugin not in (None, "off"):
        s.plugin = os.path.abspath(s.plugin)
    if not s.code:
        s.code = git_commit()
    validate(s)
    return s


def git_commit() -> str:
    """The tree's commit, "+" when it has changes; "" without git (the GPU host's copy has no .git)."""
    try:
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
        return head.stdout.strip() + ("+" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return ""


def ggml_version(s: Settings, tree: Optional[Path] = None) -> str:
    """The ggml version of the build tree (s.build_dir unless given; its CMake cache says it),
    else of the carried pin."""
    cache = (tree or s.build_dir) / "CMakeCache.txt"
    if cache.is_file():
        m = re.search(r"^GGML_BACKEND_RS_GGML_VERSION:\w+=(.+)$", cache.read_text(errors="replace"), re.M)
        if m:
            return m.group(1).strip()
    try:
        text = (Path(s.gpu_dir) / "llama.cpp" / "ggml" / "CMakeLists.txt").read_text(errors="replace")
    except OSError:
        return ""
    parts = [re.search(rf"set\(GGML_VERSION_{p} (\d+)\)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else ""


def validate(s: Settings) -> None:
    for m in s.models:
        if m != "f16" and m not in QUANT_TYPES:
            raise SettingsError(f"model {m!r}: not f16 or one of {' '.join(QUANT_TYPES)}")
    if s.nccl not in NCCL_MODES:
        raise SettingsError(f"nccl {s.nccl!r}: not off, on or both")
    for name in ("reps", "threads", "ubatch", "n_predict", "timeout", "arch_embd", "jobs"):
        if getattr(s, name) < 1:
            raise SettingsError(f"{name} must be >= 1")
    for name in ("warmup", "n_prompt", "n_gen", "skip", "tokens"):
        if getattr(s, name) < 0:
            raise SettingsError(f"{name} must be >= 0")
    if s.n_prompt == 0 and s.n_gen == 0:
        raise SettingsError("n_prompt and n_gen are both 0: nothing to measure")
    if not s.depths:
        raise SettingsError("depths: an empty list (0 is the test without context)")
    if any(d < 0 for d in s.depths):
        raise SettingsError("depths must be >= 0")
    if len(set(s.depths)) != len(s.depths):
        raise SettingsError(f"depths {' '.join(map(str, s.depths))}: a depth is given twice")
    for name in ("token_start", "cut"):
        try:
            re.compile(getattr(s, name))
        except re.error as e:
            raise SettingsError(f"{name} {getattr(s, name)!r}: not a regular expression ({e})") from None
    for item in s.envs + s.envs_both:
        for kv in item.split("+"):
            if "=" not in kv or kv.startswith("="):
                raise SettingsError(f"environment item {item!r}: each part must be VAR=value")


def save(s: Settings, path: Path) -> None:
    path.write_text(json.dumps(s.to_json(), indent=1) + "\n")


def load(path: Path) -> Settings:
    return Settings.from_json(json.loads(Path(path).read_text()))
