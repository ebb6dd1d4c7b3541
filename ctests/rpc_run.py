#!/usr/bin/env python3
"""Runs a command next to ggml-rpc servers on the loopback address (the rpc/* tests).

    rpc_run.py --work DIR [--threads N] [--wait S] [--timeout S]
               [--servers NAME=EXE:K ...] [--server-args NAME=ARGS ...] [--dead NAME ...]
               -- COMMAND [ARG ...]

For each --servers group, starts K copies of EXE (ctests/rpc_server.c: `--port P --threads N
--lifetime L`) on free ports of 127.0.0.1, waits until each has printed its ready line, then
runs COMMAND with every `@NAME@` in its arguments replaced by the group's endpoints
(`127.0.0.1:P1,127.0.0.1:P2,...`), in a process group of its own. `--server-args NAME=ARGS`
adds ARGS (split at spaces) to the command line of group NAME's servers (e.g. `--device test
--fail exit:20`); `--dead NAME` makes `@NAME@` an endpoint where nothing listens (a free port,
not used: a server missing at load). Afterwards a command still
running (past --timeout, or this program stopped by SIGTERM) is killed with its whole process
group, and the servers are always stopped: SIGTERM, then SIGKILL after 5 s. The exit status is
the command's; 1 when a server cannot be started or the command runs too long.

Bounds: a port is found by binding port 0 and closing the socket, so another process may take it
before the server binds it; a server that exits before it is ready is started again on another
port, at most 5 times. Readiness is awaited at most --wait seconds (default 10) per server, the
command runs at most --timeout seconds (default 300), and each server exits by itself once
all of that has passed, plus 60 seconds (its --lifetime), and when this process dies
(PR_SET_PDEATHSIG in rpc_server); so does the command's first process (a client left without its
servers stops on its own: ours fails its calls, upstream's aborts). The servers' output is in
DIR/<NAME><i>.log, printed when something fails.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time

HOST = "127.0.0.1"
START_ATTEMPTS = 5
STOP_WAIT_S = 5.0
POLL_S = 0.05


class Server:
    def __init__(self, name, exe, log_path):
        self.name = name
        self.exe = exe
        self.log_path = log_path
        self.proc = None
        self.port = None

    def endpoint(self):
        return f"{HOST}:{self.port}"

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        """SIGTERM, then SIGKILL when it has not exited after STOP_WAIT_S; waits for it."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_WAIT_S)


def die_with_parent():
    """In the command's process before exec (Linux): SIGKILL when this program dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start(server, threads, lifetime_s, wait_s, extra):
    """Starts the server on a free port and waits for its ready line; False when it never got ready."""
    ready = re.compile(r"^rpc_server: ready ", re.M)
    for attempt in range(1, START_ATTEMPTS + 1):
        server.port = free_port()
        with open(server.log_path, "w" if attempt == 1 else "a") as log:
            log.write(f"--- attempt {attempt}: port {server.port}\n")
            log.flush()
            server.proc = subprocess.Popen(
                [server.exe, "--port", str(server.port), "--threads", str(threads),
                 "--lifetime", str(lifetime_s)] + extra,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if ready.search(server.log()):
                return True
            if server.proc.poll() is not None:
                break
            time.sleep(POLL_S)
        if server.proc.poll() is None:
            # alive but not listening within wait_s: give up
            server.stop()
            return False
        server.proc.wait()
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--wait", type=float, default=10.0)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--servers", action="append", default=[], metavar="NAME=EXE:K")
    ap.add_argument("--server-args", action="append", default=[], metavar="NAME=ARGS")
    ap.add_argument("--dead", action="append", default=[], metavar="NAME")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not (args.servers or args.dead):
        ap.error("needs --servers or --dead, and a command after --")
    extra = {}
    for spec in args.server_args:
        name, sep, value = spec.partition("=")
        if not sep or not re.fullmatch(r"\w+", name):
            ap.error(f"--server-args {spec}: expected NAME=ARGS")
        extra[name] = value.split()

    groups = []
    for spec in args.servers:
        m = re.fullmatch(r"(\w+)=(.+):(\d+)", spec)
        if not m or not 1 <= int(m.group(3)) <= 16:
            ap.error(f"--servers {spec}: expected NAME=EXE:K with 1 <= K <= 16")
        groups.append((m.group(1), m.group(2), int(m.group(3))))

    os.makedirs(args.work, exist_ok=True)
    # A SIGTERM (e.g. from ctest) unwinds through the `finally` below.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    n_servers = sum(k for _, _, k in groups)
    lifetime_s = int(args.timeout + n_servers * START_ATTEMPTS * args.wait) + 60
    servers = []
    command_proc = None
    failed = True
    try:
        endpoints = {}
        for name, exe, k in groups:
            group = []
            for i in range(k):
                server = Server(name, exe, os.path.join(args.work, f"{name}{i}.log"))
                servers.append(server)
                if not start(server, args.threads, lifetime_s, args.wait, extra.get(name, [])):
                    print(f"rpc_run: {name}{i} ({exe}) did not get ready (its log follows)",
                          file=sys.stderr)
                    return 1
                group.append(server.endpoint())
            endpoints[name] = ",".join(group)
        for name in args.dead:
            endpoints[name] = f"{HOST}:{free_port()}"
        print("rpc_run: servers " + " ".join(f"{n}={e}" for n, e in endpoints.items()), flush=True)

        def substitute(arg):
            for name, eps in endpoints.items():
                arg = arg.replace(f"@{name}@", eps)
            return arg

        # Its own process group, so that the programs it starts stop with it.
        command_proc = subprocess.Popen([substitute(a) for a in command], start_new_session=True,
                                        preexec_fn=die_with_parent)
        try:
            rc = command_proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"rpc_run: the command ran past {args.timeout:g} s", file=sys.stderr)
            return 1
        failed = rc != 0
        return rc
    finally:
        if command_proc is not None and command_proc.poll() is None:
            try:
                os.killpg(command_proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            command_proc.wait()
        for s in servers:
            s.stop()
        if failed:
            for s in servers:
                print(f"--- {s.log_path}\n{s.log()}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
