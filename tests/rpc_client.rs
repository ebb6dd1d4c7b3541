//! Our RPC client (`ggml_backend_rs_rpc`) against upstream's `rpc-server` of ggml 0.26:
//! the CPU backend served by `ggml_backend_rpc_start_server` (ctests/rpc_server.c, built by
//! CMake in build/shared). The program comes from `GGML_BACKEND_RS_RPC_SERVER`, which
//! scripts/test.sh sets.
//!
//! One server, one story: the handshake, buffers, tensor data, a graph (MUL_MAT then ADD,
//! described as wire tensors by hand) computed and recomputed and checked against the same
//! arithmetic in Rust; then the faults upstream's own client aborts or hangs on: a stopped
//! server (SIGSTOP) gives a timeout, a killed one "closed" on the live connection and
//! "refused" on a new one.

// Without ggml to link (plain `cargo test`, see build.rs) there is nothing to run here. The
// server speaks protocol 7, ggml 0.26's; the op numbers below are 0.26's.
#![cfg(all(not(ggml_backend_rs_unlinked), feature = "ggml-0-26-0"))]

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use ggml_backend_rs::abi::facts::OPS;
use ggml_backend_rs::abi::{GGML_TENSOR_FLAG_COMPUTE, GGML_TENSOR_FLAG_OUTPUT, GGML_TYPE_F32};
use ggml_backend_rs_core::Op;
use ggml_backend_rs_rpc::{Cause, Client, ErrorKind, Step, Timeouts, Waiting, WireTensor};

/// How long the server may take to print its ready line.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// The rpc_server process; killed when dropped, whatever the test did to it.
struct Server {
    child: Child,
    endpoint: String,
}

impl Server {
    fn start() -> Server {
        let program = std::env::var("GGML_BACKEND_RS_RPC_SERVER").unwrap_or_else(|_| {
            panic!(
                "GGML_BACKEND_RS_RPC_SERVER is not set: it names the rpc_server program built \
                 by CMake (build/shared/ctests/rpc_server); scripts/test.sh sets it"
            )
        });
        // A port that was free a moment ago (the server cannot report one it picks itself).
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut child = Command::new(&program)
            .args(["--port", &port.to_string(), "--threads", "1"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let server = Server {
            child,
            endpoint: format!("127.0.0.1:{port}"),
        };
        // Lines to the test until the ready line, then drained until the server exits, so
        // that it never blocks on a full pipe.
        let (lines, ready) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = lines.send(line);
            }
        });
        let start = Instant::now();
        loop {
            let left = READY_WITHIN.saturating_sub(start.elapsed());
            match ready.recv_timeout(left) {
                Ok(line) if line.starts_with("rpc_server: ready ") => break,
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("{program}: no ready line within {READY_WITHIN:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    panic!("{program} exited before it was ready")
                }
            }
        }
        server
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} failed");
    }

    /// SIGKILL, then waits until the process is gone (its sockets closed).
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A contiguous f32 tensor of the buffer, at `offset` from its base.
fn f32_tensor(id: u64, buffer: u64, base: u64, offset: u64, ne: [u32; 4]) -> WireTensor {
    let mut t = WireTensor {
        id,
        ty: GGML_TYPE_F32 as u32,
        buffer,
        data: base + offset,
        ne,
        nb: [4, 4 * ne[0], 4 * ne[0] * ne[1], 4 * ne[0] * ne[1] * ne[2]],
        ..WireTensor::default()
    };
    t.set_name(&format!("t{id}"));
    t
}

fn nbytes(t: &WireTensor) -> usize {
    t.ne.iter().product::<u32>() as usize * 4
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn read(c: &mut Client, t: &WireTensor) -> Vec<f32> {
    let mut out = vec![0u8; nbytes(t)];
    c.get_tensor(t, 0, &mut out).unwrap();
    floats(&out)
}

/// ggml's mul_mat then add: d[n][m] = sum_k a[m][k] * b[n][k] + e[n][m].
fn reference(a: &[f32], b: &[f32], e: &[f32], k: usize, m: usize, n: usize) -> Vec<f32> {
    let mut d = vec![0f32; m * n];
    for j in 0..n {
        for i in 0..m {
            let dot: f32 = (0..k).map(|x| a[i * k + x] * b[j * k + x]).sum();
            d[j * m + i] = dot + e[j * m + i];
        }
    }
    d
}

#[test]
fn our_client_against_upstreams_rpc_server() {
    let mut server = Server::start();
    let ep = server.endpoint.clone();
    let timeouts = Timeouts {
        connect: Duration::from_secs(10),
        reply: Duration::from_secs(60),
        compute: Duration::from_secs(60),
        ..Timeouts::default()
    };
    let mut c = Client::connect(&ep, &timeouts).unwrap();
    assert_eq!(c.server_version().major, 7);
    assert_eq!(c.device_count().unwrap(), 1);
    let align = c.alignment(0).unwrap();
    assert!(align.is_power_of_two(), "alignment {align}");
    assert!(c.max_size(0).unwrap() > 0);
    assert!(c.device_memory(0).unwrap().total > 0);

    let buf = c
        .alloc_buffer(0, 1 << 16)
        .unwrap()
        .expect("64 KiB on the server");
    assert!(buf.size >= 1 << 16);
    let base = c.buffer_base(buf.handle).unwrap();
    assert!(base != 0 && base % align == 0, "base {base:#x}");

    // a: [K, M], b: [K, N] -> mm = MUL_MAT(a, b): [M, N]; d = ADD(mm, e).
    let (k, m, n) = (4u32, 3u32, 2u32);
    let slot = |i: u64| i * 1024; // 1 KiB apart: aligned for any alignment up to 1 KiB
    assert!(align <= 1024);
    let a = f32_tensor(1, buf.handle, base, slot(0), [k, m, 1, 1]);
    let b = f32_tensor(2, buf.handle, base, slot(1), [k, n, 1, 1]);
    let e = f32_tensor(3, buf.handle, base, slot(2), [m, n, 1, 1]);
    let mut mm = f32_tensor(4, buf.handle, base, slot(3), [m, n, 1, 1]);
    mm.op = OPS.value_of(Op::MulMat) as u32;
    mm.src[..2].copy_from_slice(&[a.id, b.id]);
    mm.flags = GGML_TENSOR_FLAG_COMPUTE;
    mm.use_count = 1; // d uses it
    let mut d = f32_tensor(5, buf.handle, base, slot(4), [m, n, 1, 1]);
    d.op = OPS.value_of(Op::Add) as u32;
    d.src[..2].copy_from_slice(&[mm.id, e.id]);
    d.flags = GGML_TENSOR_FLAG_COMPUTE | GGML_TENSOR_FLAG_OUTPUT;

    let av: Vec<f32> = (0..k * m).map(|i| i as f32 - 5.0).collect();
    let bv: Vec<f32> = (0..k * n).map(|i| (i % 3) as f32 + 0.5).collect();
    let ev: Vec<f32> = (0..m * n).map(|i| 100.0 * i as f32).collect();
    c.set_tensor(&a, 0, &bytes(&av)).unwrap();
    c.set_tensor(&b, 0, &bytes(&bv)).unwrap();
    c.set_tensor(&e, 0, &bytes(&ev)).unwrap();
    // The bytes come back as they went.
    assert_eq!(read(&mut c, &a), av);
    let mut part = [0u8; 8];
    c.get_tensor(&a, 4, &mut part).unwrap();
    assert_eq!(floats(&part), av[1..3]);
    assert_eq!(c.alloc_size(0, &d, &[mm, e]).unwrap(), nbytes(&d) as u64);

    let (ku, mu, nu) = (k as usize, m as usize, n as usize);
    c.graph_compute(0, &[mm.id, d.id], &[a, b, e, mm, d])
        .unwrap();
    // The small integers make every sum exact in f32.
    assert_eq!(read(&mut c, &d), reference(&av, &bv, &ev, ku, mu, nu));

    // New input, the stored graph again.
    let bv2: Vec<f32> = bv.iter().map(|x| -2.0 * x).collect();
    c.set_tensor(&b, 0, &bytes(&bv2)).unwrap();
    c.graph_recompute(0).unwrap();
    assert_eq!(read(&mut c, &d), reference(&av, &bv2, &ev, ku, mu, nu));

    // Memset, copy, clear.
    c.memset_tensor(&e, 0, nbytes(&e) as u64, 0).unwrap();
    c.graph_recompute(0).unwrap();
    assert_eq!(
        read(&mut c, &d),
        reference(&av, &bv2, &[0.0; 6], ku, mu, nu)
    );
    let a2 = f32_tensor(6, buf.handle, base, slot(5), a.ne);
    assert!(c.copy_tensor(&a, &a2).unwrap());
    assert_eq!(read(&mut c, &a2), av);
    c.init_tensor(&a2).unwrap();
    c.clear_buffer(buf.handle, 0).unwrap();
    assert_eq!(read(&mut c, &a), vec![0.0; av.len()]);
    c.free_buffer(buf.handle).unwrap();
    c.synchronize().unwrap();
    assert_eq!(c.failure(), None);

    // A stopped server: the call returns with a timeout instead of waiting forever. The
    // request is one the server rejects without writing (a device out of range), so that
    // after SIGCONT it writes nothing to the connection the client has closed (upstream's
    // server does not ignore SIGPIPE, and a write there could kill it).
    c.set_timeouts(Timeouts {
        reply: Duration::from_secs(1),
        ..timeouts
    });
    server.signal("-STOP");
    let stopped = c.alignment(u32::MAX);
    server.signal("-CONT");
    let stopped = stopped.unwrap_err();
    assert_eq!(stopped.kind(), ErrorKind::TimedOut, "{stopped}");
    assert_eq!(
        stopped.cause(),
        &Cause::TimedOut {
            waiting: Waiting::Reply,
            after: Duration::from_secs(1)
        }
    );
    assert_eq!(
        stopped.to_string(),
        format!("RPC server {ep}: GET_ALIGNMENT: no reply within 1 s")
    );
    // Failed for good, without touching the socket.
    assert_eq!(c.device_count().unwrap_err(), stopped);
    drop(c);

    // The server serves the next client; then it is killed under it.
    let mut c = Client::connect(&ep, &timeouts).unwrap();
    assert_eq!(c.device_count().unwrap(), 1);
    server.kill();
    let dead = c.device_count().unwrap_err();
    assert_eq!(dead.kind(), ErrorKind::Closed, "{dead}");
    assert!(
        dead.to_string()
            .starts_with(&format!("RPC server {ep}: DEVICE_COUNT: ")),
        "{dead}"
    );
    assert_eq!(c.alignment(0).unwrap_err(), dead);

    // Nobody listens there any more.
    let refused = Client::connect(&ep, &timeouts).unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Refused, "{refused}");
    assert_eq!(refused.step(), Step::Connect);
    assert_eq!(refused.endpoint(), ep);
    assert!(refused.to_string().contains(&ep), "{refused}");
}
