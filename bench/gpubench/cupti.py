"""The profile's tracer (bench/gpuprof/trace.c): where CUPTI is on the GPU host, and the gcc line
that builds the tracer against it.

CUPTI comes with the CUDA toolkit (extras/CUPTI, or the toolkit's own include and lib directories)
or as a pip wheel (nvidia-cuda-cupti-cu12: nvidia/cuda_cupti/; CUDA 13's nvidia-cuda-cupti:
nvidia/cu13/). Its headers include cuda.h and, through builtin_types.h, crt/host_defines.h, which
the toolkit's include directory has (pip: nvidia-cuda-runtime and nvidia-cuda-nvcc / -crt)."""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from . import proc
from .settings import ROOT

SOURCE = ROOT / "bench" / "gpuprof" / "trace.c"
LIBRARY = "libgpuprof.so"


class CuptiError(RuntimeError):
    pass


@dataclass(frozen=True)
class Cupti:
    origin: str          # where it was found, in words
    include: Path        # has cupti.h
    lib: Path            # libcupti.so or libcupti.so.N
    extra_includes: List[Path] = field(default_factory=list)   # cuda.h, crt/host_defines.h

    def describe(self) -> str:
        extra = "".join(f", {p}" for p in self.extra_includes)
        return f"CUPTI from {self.origin}: {self.include}, {self.lib}{extra}"


def toolkit_roots(environ=os.environ) -> List[Path]:
    """CUDA toolkits, the one the environment names first."""
    roots = [Path(environ[v]) for v in ("CUDA_HOME", "CUDA_PATH") if environ.get(v)]
    roots.append(Path("/usr/local/cuda"))
    for pattern in ("/usr/local/cuda-*", "/opt/cuda*"):
        roots += sorted((Path(p) for p in glob.glob(pattern)), reverse=True)
    return _unique(roots)


def pip_roots() -> List[Path]:
    """The directories of the nvidia-* wheels that can hold CUPTI (nvidia is a namespace package)."""
    try:
        import nvidia  # type: ignore
    except ImportError:
        return []
    return _unique(Path(p) / sub for p in getattr(nvidia, "__path__", []) for sub in ("cuda_cupti", "cu13", "cu12"))


def candidates(toolkits: Sequence[Path], wheels: Sequence[Path]) -> List[Tuple[str, Path, Path]]:
    """(origin, include directory, lib directory) pairs to try, in order: each toolkit's
    extras/CUPTI, its targets/ tree, its include and lib64; then each wheel directory."""
    out = []
    for r in toolkits:
        out += [(f"the CUDA toolkit {r}", r / "extras" / "CUPTI" / "include", r / "extras" / "CUPTI" / "lib64"),
                (f"the CUDA toolkit {r}", r / "targets" / "x86_64-linux" / "include", r / "targets" / "x86_64-linux" / "lib"),
                (f"the CUDA toolkit {r}", r / "include", r / "lib64")]
    out += [(f"the pip wheel in {w}", w / "include", w / "lib") for w in wheels]
    return out


def header_dirs(toolkits: Sequence[Path], wheels: Sequence[Path]) -> List[Path]:
    """Where cuda.h and crt/host_defines.h may be: the toolkits' include directories, then the
    wheels' (nvidia-cuda-runtime, nvidia-cuda-nvcc; CUDA 13's share nvidia/cu13/include)."""
    dirs = []
    for r in toolkits:
        dirs += [r / "include", r / "targets" / "x86_64-linux" / "include"]
    for w in wheels:
        dirs += [w / "include", w.parent / "cuda_runtime" / "include", w.parent / "cuda_nvcc" / "include"]
    return _unique(dirs)


def library_in(d: Path) -> Optional[Path]:
    """libcupti.so, else the libcupti.so.N with the highest version (wheels have no plain .so)."""
    if (d / "libcupti.so").is_file():
        return d / "libcupti.so"
    versioned = [p for p in glob.glob(str(d / "libcupti.so.*")) if re.fullmatch(r"libcupti\.so(\.\d+)+", Path(p).name)]
    if not versioned:
        return None
    return Path(max(versioned, key=lambda p: [int(x) for x in Path(p).name.split(".")[2:]]))


def find(toolkits: Optional[Sequence[Path]] = None, wheels: Optional[Sequence[Path]] = None) -> Cupti:
    """The first candidate with cupti.h and a libcupti, with the directories of cuda.h and
    crt/host_defines.h that its headers need; CuptiError naming every place tried otherwise."""
    toolkits = toolkit_roots() if toolkits is None else list(toolkits)
    wheels = pip_roots() if wheels is None else list(wheels)
    tried = []
    for origin, inc, lib_dir in candidates(toolkits, wheels):
        lib = library_in(lib_dir)
        if not (inc / "cupti.h").is_file() or lib is None:
            tried.append(f"{inc} + {lib_dir}")
            continue
        extra: List[Path] = []
        for needed in ("cuda.h", "crt/host_defines.h"):
            if (inc / needed).is_file() or any((d / needed).is_file() for d in extra):
                continue
            d = next((d for d in header_dirs(toolkits, wheels) if (d / needed).is_file()), None)
            if d is None:
                raise CuptiError(f"CUPTI found in {origin} ({inc}), but no {needed} in the toolkits or wheels")
            extra.append(d)
        return Cupti(origin, inc, lib, extra)
    raise CuptiError("no CUPTI (cupti.h with libcupti.so*) found; tried " + "; ".join(tried)
                     + ". Install the CUDA toolkit's CUPTI or the pip package nvidia-cuda-cupti, or set CUDA_HOME")


def compile_cmd(c: Cupti, output: Path, source: Path = SOURCE) -> List[str]:
    includes = [f"-I{d}" for d in [c.include] + list(c.extra_includes)]
    return (["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-o", str(output), str(source)] + includes
            + [f"-L{c.lib.parent}", f"-l:{c.lib.name}", f"-Wl,-rpath,{c.lib.parent}", "-ldl", "-lpthread"])


def build(c: Cupti, directory: Path) -> Path:
    """Compiles the tracer against c into directory; returns the library (CuptiError with the
    log's last lines when gcc fails)."""
    out = directory / LIBRARY
    log = directory / "gpuprof-build.txt"
    r, _ = proc.run(compile_cmd(c, out), log=log)
    if not r.ok:
        raise CuptiError(f"gcc failed ({r.status()}):\n" + "\n".join(proc.tail(log, 15)))
    return out


def _unique(paths) -> List[Path]:
    seen, out = set(), []
    for p in paths:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out
