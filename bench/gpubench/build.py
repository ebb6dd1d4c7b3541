"""Configure and build this repository's CMake tree against the carried pin: both builds (spliced
with this library, and pristine as *_ref) come from one tree."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import List, Sequence

from . import proc
from .settings import ROOT, Settings

TARGETS = ["llama_driver", "llama_driver_ref", "write_model", "compare_logits", "llama_bench", "llama_bench_ref"]


def nccl_root() -> str:
    """The nvidia-nccl wheel's directory (the GPU host has NCCL only as a pip wheel)."""
    import nvidia.nccl as m  # type: ignore
    return list(m.__path__)[0]


def nccl_version() -> str:
    import importlib.metadata as md
    names = [f"{d.metadata['Name']} {d.version}" for d in md.distributions()
             if (d.metadata["Name"] or "").startswith("nvidia-nccl")]
    return "; ".join(names) or "no nvidia-nccl wheel"


def backend_flags(s: Settings, nccl: bool) -> List[str]:
    if s.cpu_test:
        return ["-DGGML_CUDA=OFF"]
    flags = ["-DGGML_CUDA=ON"]
    if nccl:
        r = nccl_root()
        flags += ["-DGGML_CUDA_NCCL=ON", f"-DNCCL_INCLUDE_DIR={r}/include", f"-DNCCL_LIBRARY={r}/lib/libnccl.so.2"]
        # the programs load libnccl.so.2 at run time too
        os.environ["LD_LIBRARY_PATH"] = f"{r}/lib:" + os.environ.get("LD_LIBRARY_PATH", "")
    else:
        flags.append("-DGGML_CUDA_NCCL=OFF")
    return flags + ["-DCMAKE_CUDA_ARCHITECTURES=90"]


def configure_cmd(s: Settings, tree: Path, extra: List[str]) -> List[str]:
    gpu = Path(s.gpu_dir)
    return ["cmake", "-S", str(ROOT), "-B", str(tree), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_SHARED_LIBS=ON", f"-DLLAMA_CPP_DIR={gpu / 'llama.cpp'}",
            f"-DGGML_BACKEND_RS_STATICLIB={gpu / 'libggml_backend_rs.a'}",
            "-DGGML_BACKEND_RS_VALGRIND=OFF"] + extra + ["-DGGML_NATIVE=OFF"]


def build(s: Settings, tree: Path, nccl: bool, log_suffix: str = "", targets=TARGETS) -> bool:
    """Configures and builds the targets into tree; on failure prints the errors and returns False."""
    out = Path(s.out)
    out.mkdir(parents=True, exist_ok=True)
    conf_log, build_log = out / f"configure{log_suffix}.log", out / f"build{log_suffix}.log"
    proc.step(f"configure {tree}")
    r, _ = proc.run(configure_cmd(s, tree, backend_flags(s, nccl)), log=conf_log)
    if not r.ok:
        proc.say("\n".join(proc.tail(conf_log, 20)))
        return False
    proc.step(f"build {tree}")
    cmd = ["cmake", "--build", str(tree), "-j", str(s.jobs)]
    if targets:
        cmd += ["--target"] + list(targets)
    r, _ = proc.run(cmd, log=build_log)
    if not r.ok:
        proc.say("\n".join(error_lines(build_log.read_text(errors="replace"))[:40]))
        return False
    return True


def error_lines(log: str, after: int = 5) -> List[str]:
    """The lines of a build log that say FAILED or error, each with the few lines after it."""
    lines = log.splitlines()
    keep: List[str] = []
    until = -1
    for i, line in enumerate(lines):
        if re.search(r"FAILED|error", line):
            until = i + after
        if i <= until:
            keep.append(line)
    return keep


def binaries(tree: Path) -> dict:
    b = Path(tree)
    return {"write_model": b / "ctests" / "write_model", "compare_logits": b / "ctests" / "compare_logits",
            "llama_driver": b / "ctests" / "llama_driver", "llama_driver_ref": b / "ctests" / "llama_driver_ref",
            "llama_bench": b / "bench" / "llama_bench", "llama_bench_ref": b / "bench" / "llama_bench_ref"}


def missing(tree: Path, targets: Sequence[str] = TARGETS) -> List[str]:
    """The programs of targets that tree lacks."""
    return [name for name, p in binaries(tree).items() if name in targets and not p.is_file()]
