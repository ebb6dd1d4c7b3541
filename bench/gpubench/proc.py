"""Processes: progress lines, one run with a time limit, and the words a failed run gets."""
from __future__ import annotations

import os
import signal
import subprocess
import traceback
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List, Optional, Sequence

T0 = time.monotonic()


def elapsed() -> int:
    return int(time.monotonic() - T0)


def step(msg: str) -> None:
    # tp-wait shows the job log's "==>" lines as progress
    print(f"\n==> {msg} ({elapsed()}s)", flush=True)


def say(msg: str) -> None:
    print(msg, flush=True)


@dataclass
class Run:
    rc: int                   # exit status; -N: killed by signal N
    timed_out: bool = False
    timeout: int = 0

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def status(self) -> str:
        """"ok", or what the table shows for the run."""
        return "ok" if self.ok else failure_text(self.rc, self.timed_out, self.timeout)


def failure_text(rc: int, timed_out: bool = False, timeout: int = 0) -> str:
    if timed_out:
        return f"timed out ({timeout} s, --timeout)"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"crashed ({name})"
    return f"failed (exit {rc})"


def env_items(items: Sequence[str]) -> dict:
    """VAR=value strings as a dict (the value may contain '=')."""
    out = {}
    for kv in items:
        k, _, v = kv.partition("=")
        out[k] = v
    return out


def run(cmd: Sequence[str], log: Optional[Path] = None, env: Sequence[str] = (), timeout: Optional[int] = None,
        capture: bool = False) -> "tuple[Run, str]":
    """Runs cmd with the extra environment items, stdout and stderr to log (or captured).
    After timeout seconds: SIGTERM, and SIGKILL 10 s later (as `timeout -k 10`)."""
    full_env = dict(os.environ)
    full_env.update(env_items(env))
    out_f = open(log, "w") if log is not None else (subprocess.PIPE if capture else None)
    try:
        # its own process group, so a timeout stops whatever it started too
        p = subprocess.Popen(list(map(str, cmd)), stdout=out_f, stderr=subprocess.STDOUT, env=full_env,
                             stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        try:
            text, _ = p.communicate(timeout=timeout)
            return Run(p.returncode), text or ""
        except subprocess.TimeoutExpired:
            _signal_group(p, signal.SIGTERM)
            try:
                text, _ = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                text, _ = p.communicate()
            return Run(p.returncode, timed_out=True, timeout=timeout or 0), text or ""
    finally:
        if log is not None:
            out_f.close()


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def tail(path: Path, n: int) -> List[str]:
    try:
        return Path(path).read_text(errors="replace").splitlines()[-n:]
    except OSError:
        return []


def first_line(path: Path, prefix: str) -> Optional[str]:
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith(prefix):
                    return line.rstrip("\n")
    except OSError:
        pass
    return None


def key_values(line: str) -> dict:
    """ "result test=pp512 median_tps=1.0 ..." -> {"test": "pp512", "median_tps": "1.0", ...}"""
    out = {}
    for word in line.split()[1:]:
        k, sep, v = word.partition("=")
        if sep:
            out[k] = v
    return out


def capture(cmd: List[str], missing: Optional[str] = None) -> str:
    """cmd's output; when it cannot start, missing (or the error)."""
    try:
        return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    except OSError as e:
        return f"{cmd[0]}: {e}\n" if missing is None else missing


def guarded(run: Callable[[], int]) -> int:
    """run()'s exit code, or 1 with the traceback printed when it raises: a detached job must still
    write its tables and its marker."""
    try:
        return run()
    except Exception:  # noqa: BLE001 (reported here, the job goes on to its marker)
        traceback.print_exc()
        return 1
