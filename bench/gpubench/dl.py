"""GGML_BACKEND_DL on the GPU host (subcommands dl-start / dl-wait; dl is the job itself): CUDA
and every CPU variant built as modules and loaded at run time by our registry, then ctest (the
ctests/dl tests run against upstream's own loader, on the CPU and on CUDA0)."""
from __future__ import annotations

import os
import re
import tarfile
import time
from pathlib import Path

from . import proc
from .proc import say, step
from .settings import ROOT, Settings

LOGS = ("configure.log", "build.log", "ctest.log")


def configure_cmd(s: Settings, tree: Path) -> list:
    gpu = Path(s.gpu_dir)
    backend = ["-DGGML_CUDA=OFF"] if s.cpu_test else \
        ["-DGGML_CUDA=ON", "-DGGML_CUDA_NCCL=OFF", "-DCMAKE_CUDA_ARCHITECTURES=90"]
    return ["cmake", "-S", str(ROOT), "-B", str(tree), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
            "-DBUILD_SHARED_LIBS=ON", f"-DLLAMA_CPP_DIR={gpu / 'llama.cpp'}",
            f"-DGGML_BACKEND_RS_STATICLIB={gpu / 'libggml_backend_rs.a'}",
            "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"] + backend


def main(s: Settings) -> int:
    """Configure, build every target, ctest; the marker `done` holds the exit status."""
    out = Path(s.out)
    tree = out / "build"
    t0 = time.monotonic()
    code = 1
    try:
        step(f"configure {tree}")
        r, _ = proc.run(configure_cmd(s, tree), log=out / "configure.log")
        if r.ok:
            step(f"build {tree}")
            r, _ = proc.run(["cmake", "--build", str(tree), "-j", str(s.jobs)], log=out / "build.log")
        if r.ok:
            (out / "built").write_text(f"built in {int(time.monotonic() - t0)}s\n")
            step("ctest")
            r, _ = proc.run(["ctest", "--test-dir", str(tree), "--output-on-failure", "-j", "4"],
                            log=out / "ctest.log")
        code = r.rc if r.rc >= 0 else 128 - r.rc
    finally:
        (out / "done").write_text(f"{code}\n")
    return code


def done(s: Settings) -> int:
    out = Path(s.out)
    if (out / "built").is_file():
        say((out / "built").read_text().strip())
    else:
        log = out / ("build.log" if (out / "build.log").is_file() else "configure.log")
        say(f"{log.name}, last lines:")
        say("\n".join(proc.tail(log, 10)))
    ctest = out / "ctest.log"
    if ctest.is_file():
        for line in ctest.read_text(errors="replace").splitlines():
            if re.search(r"Test +#|tests passed|tests failed", line):
                say(line)
    dest = Path(os.environ.get("OUT") or "/tmp")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(dest / "gpu-dl.tgz", "w:gz") as t:
        for name in LOGS:
            if (out / name).is_file():
                t.add(out / name, arcname=name)
    try:
        return int((out / "done").read_text().strip())
    except ValueError:
        return 1


def partial(s: Settings) -> None:
    say("\n".join(proc.tail(Path(s.out) / "build.log", 3)))

