#!/usr/bin/env python3
"""llama.cpp's own programs on this library, driven as a user drives them (standard library only).

  llama_tools_check.py server --bin DIR --model M --module LIB --upstream-libdir DIR --plugin LIB
      llama-server (loopback, a free port, 4 slots) in four configurations:
        ours-none      this library, --device TESTGPU0                      (the reference)
        ours-tensor    this library, -sm tensor --device TESTGPU0,TESTGPU1
        upstream-none  upstream's ggml and libllama, --device TESTGPU0
        upstream-tp0   upstream's ggml and libllama with our plugin, --device TP0 = TP(CPU,CPU)
      Each gets the same workload: 32 greedy completions 8 at a time, of varied prompt lengths
      with shared prefixes (prompt cache reuse) and one prompt repeated, a prompt longer than the
      context, a body that is not JSON, a client that disconnects mid-stream (its slot must be
      freed, /slots); then /health,
      /props and /metrics. Every answer must equal ours-none's: the tokens, and for the requests
      the server refuses, the status and the error. The devices each server put buffers on (its
      log) must be the ones asked for.

  llama_tools_check.py bench --bin DIR --model M --module LIB --upstream-libdir DIR --plugin LIB
      llama-bench -sm tensor over TESTGPU0/TESTGPU1 (ours) and -dev TP0 (upstream with the
      plugin), markdown and JSON output parsed: one pp and one tg row each, positive rates.

  llama_tools_check.py completion --bin DIR --model M --module LIB --upstream-libdir DIR
      llama-completion, greedy: ours -sm tensor over TESTGPU0,TESTGPU1 generates upstream's
      --device TESTGPU0 tokens (read from the session file it writes).

Every wait is bounded; every server is stopped (SIGTERM, then SIGKILL) whatever happens.
"""

import argparse
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

READY_TIMEOUT = 120  # seconds for a server to load the model and answer /health
REQUEST_TIMEOUT = 120  # seconds for one HTTP request (--request-timeout: more under valgrind)
STOP_TIMEOUT = 30  # seconds for a server to exit after SIGTERM


def fail(message):
    print(f"llama_tools_check: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


class Server:
    """One llama-server process on 127.0.0.1 and the port it chose (--port 0)."""

    def __init__(self, name, binary, args, env, workdir, launcher=()):
        self.name = name
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.log = open(self.log_path, "w+b")
        cmd = list(launcher) + [binary, "--host", "127.0.0.1", "--port", "0"] + args
        print(f"[{name}] {' '.join(cmd)}", flush=True)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait_ready(self):
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                fail(f"[{self.name}] exited with {self.proc.returncode} before it was ready:\n{self.text()[-4000:]}")
            if self.port is None:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
                if m:
                    self.port = int(m.group(1))
            if self.port is not None:
                try:
                    status, _ = self.request("GET", "/health", timeout=5)
                    if status == 200:
                        return
                except OSError:
                    pass
            time.sleep(0.1)
        fail(f"[{self.name}] not ready within {READY_TIMEOUT} s:\n{self.text()[-4000:]}")

    def request(self, method, path, body=None, timeout=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout or REQUEST_TIMEOUT)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def complete(self, prompt, n_predict=16, stream=False):
        body = json.dumps({
            "prompt": prompt, "n_predict": n_predict, "temperature": 0, "top_k": 1,
            "seed": 1, "cache_prompt": True, "return_tokens": True, "stream": stream,
        })
        status, data = self.request("POST", "/completion", body)
        return status, json.loads(data)

    def ggml_base(self):
        """The libggml-base the running server has loaded (ours or upstream's)."""
        with open(f"/proc/{self.proc.pid}/maps") as f:
            paths = {line.split()[-1] for line in f if "libggml-base.so" in line}
        if len(paths) != 1:
            fail(f"[{self.name}] maps libggml-base {len(paths)} times: {paths}")
        return os.path.realpath(paths.pop())

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
        self.log.close()


PREFIX = "The quick brown fox jumps over the lazy dog. "


def prompts():
    """32 prompts: 1-6 repeats of one prefix (shared by all: cached prefixes), a tail that
    differs, and the first prompt asked again at the end (a whole cached prompt)."""
    out = [PREFIX * (1 + i % 6) + f"Question {i}: what comes next?" for i in range(31)]
    out.append(out[0])
    return out


def disconnect_mid_stream(server):
    """A client that asks for a long stream, reads the first event and hangs up."""
    body = json.dumps({"prompt": PREFIX * 3, "n_predict": 200, "temperature": 0, "stream": True})
    with socket.create_connection(("127.0.0.1", server.port), timeout=REQUEST_TIMEOUT) as s:
        s.sendall((f"POST /completion HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                   f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
        got = b""
        while b"data:" not in got:
            chunk = s.recv(4096)
            if not chunk:
                fail(f"[{server.name}] closed the stream before its first event: {got[:500]!r}")
            got += chunk


def workload(server):
    """What a user's clients do to a server; returns every answer, to compare."""
    answers = {}
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(server.complete, prompts()))
    for i, (status, d) in enumerate(results):
        if status != 200:
            fail(f"[{server.name}] request {i}: status {status}: {d}")
        answers[f"completion {i}"] = {"tokens": d.get("tokens"), "content": d.get("content")}
        if not d.get("tokens"):
            fail(f"[{server.name}] request {i} returned no tokens: {d}")
    cached = [d.get("timings", {}).get("cache_n", d.get("tokens_cached", 0)) for _, d in results]
    if not any(c and c > 0 for c in cached):
        fail(f"[{server.name}] no request reused a cached prefix: {cached}")

    # Longer than the context: whatever upstream answers (an error or a shifted context).
    status, d = server.complete("word " * 3000, n_predict=4)
    answers["too long"] = {"status": status, "error": d.get("error"), "tokens": d.get("tokens")}

    status, data = server.request("POST", "/completion", b"{this is not json")
    answers["bad json"] = {"status": status, "body": json.loads(data) if data.startswith(b"{") else data.decode()}

    disconnect_mid_stream(server)
    # The slot of the client that hung up is freed: every slot idle, within a bound.
    deadline = time.monotonic() + 30
    while True:
        status, data = server.request("GET", "/slots")
        if status != 200:
            fail(f"[{server.name}] /slots: status {status}")
        busy = [s["id"] for s in json.loads(data) if s.get("is_processing")]
        if not busy:
            break
        if time.monotonic() > deadline:
            fail(f"[{server.name}] slots {busy} still processing 30 s after their client hung up")
        time.sleep(0.05)
    answers["slots after disconnect"] = "all idle"
    # The server still serves, with the same answer as before.
    status, d = server.complete(prompts()[5])
    if status != 200:
        fail(f"[{server.name}] after a client disconnected: status {status}: {d}")
    answers["after disconnect"] = {"tokens": d.get("tokens")}

    status, _ = server.request("GET", "/health")
    answers["health"] = status
    status, data = server.request("GET", "/props")
    props = json.loads(data)
    answers["props total_slots"] = props.get("total_slots")
    status, data = server.request("GET", "/metrics")
    if status != 200:
        fail(f"[{server.name}] /metrics: status {status}")
    metrics = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            metrics[name] = float(value)
    answers["metrics names"] = sorted(metrics)
    if metrics.get("llamacpp:prompt_tokens_total", 0) <= 0:
        fail(f"[{server.name}] /metrics counts no prompt tokens: {metrics}")
    return answers


def buffer_devices(log):
    """The devices a server's log says hold model weights or KV cache (a tensor-parallel
    device is named Meta(TESTGPU0,TESTGPU1) by libllama)."""
    return sorted(set(re.findall(r"(\S+) (?:model buffer|KV buffer) size", log)))


def run_server(args):
    model = ["-m", args.model, "-np", "4", "-c", "2048", "-t", "1", "-fa", "on", "--seed", "1",
             "--metrics", "--no-webui", "-lv", "4"]  # 4: the loader's buffer lines
    ours = dict(os.environ, GGML_BACKEND_PATH=args.module, GGML_NO_BACKTRACE="1")
    upstream = dict(ours, LD_LIBRARY_PATH=args.upstream_libdir)
    upstream_tp = dict(upstream, GGML_BACKEND_PATH=args.plugin, GGML_BACKEND_RS_TP="CPU,CPU")
    configs = [
        ("ours-none", ours, ["--device", "TESTGPU0", "-sm", "none"], ["TESTGPU0"]),
        ("ours-tensor", ours, ["--device", "TESTGPU0,TESTGPU1", "-sm", "tensor"], ["TESTGPU0", "TESTGPU1"]),
        ("upstream-none", upstream, ["--device", "TESTGPU0", "-sm", "none"], ["TESTGPU0"]),
        ("upstream-tp0", upstream_tp, ["--device", "TP0", "-sm", "none"], ["TP0"]),
    ]
    server_bin = os.path.join(args.bin, "llama-server")
    results = {}
    work = args.workdir or tempfile.mkdtemp(prefix="llama-server-")
    os.makedirs(work, exist_ok=True)
    for name, env, extra, devices in configs:
        server = Server(name, server_bin, model + extra, env, work)
        try:
            server.wait_ready()
            base = server.ggml_base()
            want_upstream = name.startswith("upstream")
            if (os.path.dirname(base) == os.path.realpath(args.upstream_libdir)) != want_upstream:
                fail(f"[{name}] runs on {base}")
            results[name] = workload(server)
        finally:
            server.stop()
        log = server.text()
        seen = buffer_devices(log)
        if not all(any(d in s for s in seen) for d in devices):
            fail(f"[{name}] buffers on {seen}, asked for {devices}")
        print(f"[{name}] {len(results[name])} answers; ggml from {base}; buffers on {', '.join(seen)}",
              flush=True)
    reference = results["ours-none"]
    for name, answers in results.items():
        differing = [k for k in reference if answers.get(k) != reference[k]]
        if differing:
            k = differing[0]
            fail(f"{name} differs from ours-none in {len(differing)} answers, first '{k}':\n"
                 f"  {name}: {answers.get(k)}\n  ours-none: {reference[k]}")
        print(f"{name}: all {len(reference)} answers equal ours-none's", flush=True)
    print(f"too long: {reference['too long']['status']} {reference['too long']['error']}")
    print(f"bad json: {reference['bad json']['status']}")
    print("llama_tools_check: server: OK")


def run_bench(args):
    bench = os.path.join(args.bin, "llama-bench")
    ours = dict(os.environ, GGML_BACKEND_PATH=args.module, GGML_NO_BACKTRACE="1")
    upstream_tp = dict(ours, LD_LIBRARY_PATH=args.upstream_libdir, GGML_BACKEND_PATH=args.plugin,
                       GGML_BACKEND_RS_TP="CPU,CPU")
    common = ["-m", args.model, "-p", "32", "-n", "8", "-r", "1", "-t", "1", "-fa", "1"]
    for name, env, extra in [("ours-tensor", ours, ["-sm", "tensor", "-dev", "TESTGPU0/TESTGPU1"]),
                             ("upstream-tp0", upstream_tp, ["-sm", "none", "-dev", "TP0"])]:
        for fmt in ["json", "md"]:
            cmd = [bench] + common + extra + ["-o", fmt]
            print(f"[{name}] {' '.join(cmd)}", flush=True)
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
            if p.returncode != 0:
                fail(f"[{name}] llama-bench exited with {p.returncode}:\n{p.stderr[-4000:]}")
            if fmt == "json":
                rows = json.loads(p.stdout)
                kinds = sorted((r["n_prompt"], r["n_gen"]) for r in rows)
                if kinds != [(0, 8), (32, 0)] or any(r["avg_ts"] <= 0 for r in rows):
                    fail(f"[{name}] JSON rows: {rows}")
                mode = {r.get("split_mode") for r in rows}
                devs = {r.get("devices") for r in rows}
                print(f"[{name}] json: {len(rows)} rows, split_mode {mode}, devices {devs}, "
                      + ", ".join(f"{r['n_prompt']}/{r['n_gen']}: {r['avg_ts']:.1f} t/s" for r in rows))
            else:
                table = [l for l in p.stdout.splitlines() if l.startswith("|")]
                header = [c.strip() for c in table[0].strip("|").split("|")]
                body = [[c.strip() for c in l.strip("|").split("|")] for l in table[2:]]
                tests = sorted(r[header.index("test")] for r in body)
                if tests != ["pp32", "tg8"]:
                    fail(f"[{name}] markdown rows: {table}")
                print(f"[{name}] md: tests {tests}, columns {header}")
    print("llama_tools_check: bench: OK")


def session_tokens(path):
    """The tokens of a llama.cpp session file (llama_state_save_file: magic 'ggsn', version,
    token count, the tokens as int32, then the context's state)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, _version, n = struct.unpack_from("<III", data)
    if magic != 0x6767736E:
        fail(f"{path}: not a session file")
    return list(struct.unpack_from(f"<{n}i", data, 12))


def run_completion(args):
    """Its text goes through common's asynchronous logger, whose last bytes reach stdout or
    not depending on the exit's timing; the tokens are compared instead, from the session file
    --prompt-cache-all writes (the prompt's and every generated token)."""
    binary = os.path.join(args.bin, "llama-completion")
    ours = dict(os.environ, GGML_BACKEND_PATH=args.module, GGML_NO_BACKTRACE="1")
    upstream = dict(ours, LD_LIBRARY_PATH=args.upstream_libdir)
    work = args.workdir or tempfile.mkdtemp(prefix="llama-completion-")
    os.makedirs(work, exist_ok=True)
    n_predict = 24
    common = ["-m", args.model, "-p", PREFIX * 2, "-n", str(n_predict), "--temp", "0", "--seed", "1",
              "-t", "1", "-no-cnv", "--no-warmup", "-c", "512", "--prompt-cache-all"]
    tokens = {}
    for name, env, extra in [("ours-tensor", ours, ["-sm", "tensor", "--device", "TESTGPU0,TESTGPU1"]),
                             ("upstream-none", upstream, ["-sm", "none", "--device", "TESTGPU0"])]:
        session = os.path.join(work, f"{name}.session")
        if os.path.exists(session):
            os.remove(session)
        p = subprocess.run([binary] + common + extra + ["--prompt-cache", session], env=env,
                           capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
        if p.returncode != 0:
            fail(f"[{name}] llama-completion exited with {p.returncode}:\n{p.stderr[-4000:].decode()}")
        tokens[name] = session_tokens(session)
        print(f"[{name}] {len(tokens[name])} tokens, the last {n_predict}: {tokens[name][-n_predict:]}")
    if len(tokens["upstream-none"]) <= n_predict:
        fail(f"the session holds {len(tokens['upstream-none'])} tokens, fewer than the prompt and {n_predict}")
    if tokens["ours-tensor"] != tokens["upstream-none"]:
        fail("tokens differ")
    print("llama_tools_check: completion: OK")


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    fail(f"no VmRSS for {pid}")


def soak_one(args, config):
    """One server of `config` through the soak workload; returns the (requests, RSS KiB,
    seconds) samples."""
    work = os.path.join(args.workdir or tempfile.mkdtemp(prefix="llama-soak-"), config)
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, GGML_BACKEND_PATH=args.module, GGML_NO_BACKTRACE="1", GGML_META_PROFILE="1")
    # --cache-ram 0: the server's own prompt cache in host memory grows by design
    server_args = ["-m", args.model, "-np", "4", "-c", "2048", "-t", "1", "-fa", "on", "--seed", "1",
                   "--no-webui", "-lv", "4", "--cache-ram", "0"]
    server_args += {"ours-tensor": ["--device", "TESTGPU0,TESTGPU1", "-sm", "tensor"],
                    "ours-none": ["--device", "TESTGPU0", "-sm", "none"],
                    "upstream-none": ["--device", "TESTGPU0", "-sm", "none"]}[config]
    if config.startswith("upstream"):
        env["LD_LIBRARY_PATH"] = args.upstream_libdir
    launcher = []
    vg_log = os.path.join(work, "valgrind.log")
    if args.valgrind:
        launcher = ["valgrind", "--leak-check=full", f"--log-file={vg_log}"]
    server = Server(config, os.path.join(args.bin, "llama-server"), server_args, env, work, launcher)
    samples = []
    start = time.monotonic()
    done = 0
    try:
        server.wait_ready()
        pid = server.proc.pid
        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            while done < args.requests and time.monotonic() - start < args.max_seconds:
                batch = range(done, min(done + 100, args.requests))
                work_items = [(PREFIX * (1 + i % 8) + f"item {i}", 8 + i % 24) for i in batch]
                for status, d in pool.map(lambda w: server.complete(*w), work_items):
                    if status != 200:
                        fail(f"[{config}] status {status}: {d}")
                done = batch.stop
                samples.append((done, vm_rss_kib(pid), time.monotonic() - start))
                print(f"[{config}] {done} requests, RSS {samples[-1][1]} KiB, {samples[-1][2]:.0f} s", flush=True)
    finally:
        server.stop()
    profile = re.findall(r"meta profile [^:]*: (\d+) graph computes \((\d+) plans built\)", server.text())
    if profile:
        print(f"[{config}] meta backends at exit: "
              + ", ".join(f"{c} graph computes, {p} plans built" for c, p in profile))
    if args.valgrind:
        with open(vg_log) as f:
            vg = f.read()
        lost = re.search(r"definitely lost: [\d,]+ bytes in [\d,]+ blocks", vg)
        print(f"[{config}] valgrind: {lost.group(0) if lost else 'All heap blocks were freed'}")
        if "ERROR SUMMARY" not in vg:
            fail(f"[{config}] valgrind ended without a summary, see {vg_log}")
        if lost and not lost.group(0).startswith("definitely lost: 0 bytes"):
            fail(f"[{config}] valgrind reports a definite leak, see {vg_log}")
    return samples


def growth_after(samples, warmup):
    warm = [s for s in samples if s[0] >= warmup]
    if len(warm) < 2:
        fail(f"too few samples after {warmup} requests: {samples}")
    return max(s[1] for s in warm) - warm[0][1]


def run_soak(args):
    """A long run of llama-server in tensor mode (ours over TESTGPU0,TESTGPU1): --requests
    greedy completions of mixed lengths, 8 at a time (or --max-seconds, whichever comes
    first), its resident memory sampled every 100. After --warmup requests it may grow by no
    more than upstream's server grows through the same workload (--against), plus
    --growth-kib. With --valgrind the server runs under memcheck and must end with nothing
    definitely lost (no comparison)."""
    samples = soak_one(args, args.config)
    if not args.valgrind:
        ours = growth_after(samples, args.warmup)
        base = growth_after(soak_one(args, args.against), args.warmup) if args.against else 0
        print(f"RSS growth after {args.warmup} requests: {args.config} {ours} KiB"
              + (f", {args.against} {base} KiB" if args.against else ""))
        if ours > base + args.growth_kib:
            fail(f"{args.config} grew by {ours} KiB, more than {base} + {args.growth_kib} KiB")
    print(f"llama_tools_check: soak: OK ({samples[-1][0]} requests)")


def main():
    global REQUEST_TIMEOUT, READY_TIMEOUT
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["server", "bench", "completion", "soak"])
    ap.add_argument("--bin", required=True, help="directory of llama-server, llama-bench, llama-completion")
    ap.add_argument("--model", required=True)
    ap.add_argument("--module", required=True, help="the test devices as a backend module")
    ap.add_argument("--upstream-libdir", required=True, help="upstream's libggml*.so and libllama.so")
    ap.add_argument("--plugin", help="libggml-backend-rs-tp.so")
    ap.add_argument("--workdir", help="where the servers' logs go (default: a new temporary directory)")
    ap.add_argument("--requests", type=int, default=2000, help="soak: how many requests")
    ap.add_argument("--max-seconds", type=float, default=1800, help="soak: or until this much time")
    ap.add_argument("--warmup", type=int, default=300, help="soak: requests before memory must stay flat")
    ap.add_argument("--growth-kib", type=int, default=1024,
                    help="soak: RSS growth after warm-up allowed beyond --against's")
    ap.add_argument("--against", choices=["ours-none", "upstream-none"],
                    help="soak: a second server whose growth through the same workload bounds ours")
    ap.add_argument("--valgrind", action="store_true", help="soak: the server under valgrind memcheck")
    ap.add_argument("--clients", type=int, default=8, help="soak: requests in flight at once")
    ap.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT,
                    help="seconds one request may take (a server under valgrind on a loaded machine: more)")
    ap.add_argument("--config", default="ours-tensor", choices=["ours-tensor", "ours-none", "upstream-none"],
                    help="soak: which library and devices (default ours-tensor)")
    args = ap.parse_args()
    REQUEST_TIMEOUT = args.request_timeout
    READY_TIMEOUT = max(READY_TIMEOUT, args.request_timeout)
    {"server": run_server, "bench": run_bench, "completion": run_completion,
     "soak": run_soak}[args.what](args)


if __name__ == "__main__":
    main()
