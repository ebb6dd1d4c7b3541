"""Detached jobs: a job that outlasts one device call (600 s) is started with `*-start` and polled
with `*-wait` calls.

Every device call re-sends the working tree and replaces the carried .gpu/, so a job must not run
from them: `*-start` copies both to a directory of its own and starts the job there in a new
session (it survives the end of the call). The machine is given back 30 s after a call ends and a
new one starts bare, so each `*-wait` call must follow the previous one at once; a `*-wait` that
finds no job says so.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import settings as settings_mod
from .proc import say
from .settings import ROOT, Settings

PROGRESS = re.compile(r"^(==>|  |started|host|settings|build failed|wrote|quantized|built|tracer)")


@dataclass(frozen=True)
class Job:
    name: str        # the subcommand the job runs: tp, profile or dl
    dir: Path        # its work directory (--out)
    src: Path        # where the tree and .gpu/ are copied
    log_name: str
    marker_name: str

    @property
    def log(self) -> Path:
        return self.dir / self.log_name

    @property
    def pid_file(self) -> Path:
        return self.dir / f"{self.name}-job.pid"

    @property
    def marker(self) -> Path:
        return self.dir / self.marker_name

    @property
    def lines_file(self) -> Path:
        return self.dir / f"{self.name}-wait.lines"

    @property
    def settings_file(self) -> Path:
        return self.dir / f"{self.name}-job-settings.json"


def tp_job(out: str) -> Job:
    return Job("tp", Path(out), Path("/tmp/tp-src"), "tp-job.log", "tp-done")


def profile_job(out: str) -> Job:
    return Job("profile", Path(out), Path("/tmp/profile-src"), "profile-job.log", "profile-done")


def dl_job(out: str) -> Job:
    return Job("dl", Path(out), Path(out) / "src", "dl-job.log", "done")


def pid_alive(pid_file: Path) -> Optional[int]:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


def copy_tree(src_root: Path, gpu_dir: Path, dest: Path) -> None:
    """The working tree without build outputs and .git, and the carried directory as dest/.gpu
    (links followed: the copy must not point back into the tree the next call replaces)."""
    shutil.rmtree(dest, ignore_errors=True)
    top_skip = {"build", ".git", ".gpu"}

    def skip(d: str, names):
        # cargo's target/ directories anywhere (tools/*/target too): build outputs, never sources
        return [n for n in names if n == "target" or (Path(d) == src_root and n in top_skip)]
    shutil.copytree(src_root, dest, symlinks=True, ignore=skip)
    if gpu_dir.is_dir():
        shutil.copytree(gpu_dir, dest / ".gpu", symlinks=False)


def start(job: Job, s: Settings, needs_build: bool, clean: bool = False) -> int:
    """Copies the tree and starts `gpu.py <job.name> --settings FILE` there, detached. clean:
    empty the work directory first (a job that configures its tree afresh)."""
    pid = pid_alive(job.pid_file)
    if pid:
        say(f"{job.name}-start: a {job.name} job is already running (pid {pid}); use {job.name}-wait")
        return 1
    if clean:
        shutil.rmtree(job.dir, ignore_errors=True)
    gpu = Path(s.gpu_dir)
    if needs_build and not ((gpu / "libggml_backend_rs.a").is_file() and (gpu / "llama.cpp").is_dir()):
        say(f"{job.name}-start: {gpu} must hold llama.cpp/ and libggml_backend_rs.a (see docs/gpu.md)")
        return 1
    job.dir.mkdir(parents=True, exist_ok=True)
    copy_tree(ROOT, gpu, job.src)
    for p in (job.marker, job.lines_file, job.dir / f"{job.name}.tgz"):
        p.unlink(missing_ok=True)
    s.gpu_dir = str(job.src / ".gpu")
    settings_mod.save(s, job.settings_file)
    env = {k: v for k, v in os.environ.items() if k != "OUT"}  # $OUT is the call's, gone after it
    with open(job.log, "w") as log:
        p = subprocess.Popen([sys.executable, "-u", str(job.src / "bench" / "gpu.py"), job.name,
                              "--settings", str(job.settings_file)],
                             cwd=job.src, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             env=env, start_new_session=True,
                             preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    job.pid_file.write_text(f"{p.pid}\n")
    say(f"{job.name}-start: job started (pid {p.pid}); log {job.log}; marker {job.marker}. "
        f"Next: bench/gpu.py {job.name}-wait")
    return 0


def progress(job: Job) -> None:
    """The new lines of the job log since the last call (so each wait shows only what is new)."""
    try:
        shown = int(job.lines_file.read_text())
    except (OSError, ValueError):
        shown = 0
    lines = job.log.read_text(errors="replace").splitlines()
    for line in lines[shown:]:
        if PROGRESS.match(line) and not line.startswith("==> table"):
            say(line)
    job.lines_file.write_text(str(len(lines)))


def wait(job: Job, limit: int, done: Callable[[], int], partial: Callable[[], None]) -> int:
    """Waits up to limit seconds for the marker, printing progress; then done() or partial()."""
    if not job.log.is_file():
        say(f"{job.name}-wait: no job log ({job.log}): no {job.name}-start on this machine (a machine idle "
            "for 30 s is given back; a new one starts bare)")
        return 1
    t0 = time.monotonic()
    while not job.marker.is_file() and time.monotonic() - t0 < limit:
        progress(job)
        if not pid_alive(job.pid_file) and not job.marker.is_file():
            say(f"{job.name}-wait: the job is gone without its marker; last lines of its log:")
            say("\n".join(job.log.read_text(errors="replace").splitlines()[-20:]))
            break
        time.sleep(5)
    progress(job)
    if job.marker.is_file():
        return done()
    try:
        started = job.pid_file.stat().st_mtime
    except OSError:
        started = time.time()
    say(f"\n{job.name}-wait: not finished after {int(time.monotonic() - t0)} s (job running for "
        f"{int(time.time() - started)} s); call bench/gpu.py {job.name}-wait again.")
    partial()
    return 3
