//! The RPC client against scripted in-process servers: the handshake, requests as the server
//! reads them, and every failure the client must turn into an error (refused, timed out,
//! closed, malformed, version mismatch) instead of aborting or waiting forever.
//!
//! Each fake server is one thread with one listener on 127.0.0.1:0 that accepts one client
//! and runs a script; every wait it makes is bounded by `LIMIT`, so a broken client fails the
//! test instead of hanging it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use ggml_backend_rs_rpc::wire::{
    fnv1a64, GraphMsg, HelloReply, Version, WireTensor, CONN_CAPS_SIZE, HASH_THRESHOLD,
    WIRE_TENSOR_SIZE,
};
use ggml_backend_rs_rpc::{
    Cause, Client, Command, ErrorKind, RemoteBuffer, Step, Timeouts, Upload, Waiting,
};

/// The longest any fake server waits for anything.
const LIMIT: Duration = Duration::from_secs(20);

/// Timeouts that make the timeout tests quick.
fn short() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(5),
        reply: Duration::from_millis(200),
        compute: Duration::from_secs(10),
        ..Timeouts::default()
    }
}

/// Starts a server thread that accepts one client and runs `script` on the connection.
fn serve<R: Send + 'static>(
    script: impl FnOnce(TcpStream) -> R + Send + 'static,
) -> (String, JoinHandle<R>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let handle = thread::spawn(move || {
        listener.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let stream = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && start.elapsed() < LIMIT => {
                    thread::sleep(Duration::from_millis(5))
                }
                Err(e) => panic!("fake server: no client: {e}"),
            }
        };
        stream.set_nonblocking(false).unwrap();
        stream.set_read_timeout(Some(LIMIT)).unwrap();
        stream.set_write_timeout(Some(LIMIT)).unwrap();
        script(stream)
    });
    (addr, handle)
}

/// The next request's command byte and payload; `None` when the client closed.
fn request(s: &mut TcpStream) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    match s.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
        Err(e) => panic!("fake server: reading a request: {e}"),
    }
    let size = u64::from_le_bytes(head[1..].try_into().unwrap());
    let mut payload = vec![0u8; usize::try_from(size).unwrap()];
    s.read_exact(&mut payload).unwrap();
    Some((head[0], payload))
}

/// The next request, which must be of `command`.
fn expect(s: &mut TcpStream, command: Command) -> Vec<u8> {
    let (code, payload) = request(s).expect("fake server: the client closed");
    assert_eq!(Command::from_code(code), Some(command));
    payload
}

fn reply(s: &mut TcpStream, payload: &[u8]) {
    s.write_all(&(payload.len() as u64).to_le_bytes()).unwrap();
    s.write_all(payload).unwrap();
}

/// Answers HELLO (which must offer plain TCP) with `version`.
fn hello(s: &mut TcpStream, version: Version) {
    let caps = expect(s, Command::Hello);
    assert_eq!(caps, [0u8; CONN_CAPS_SIZE]);
    let rsp = HelloReply {
        version,
        conn_caps: [0; CONN_CAPS_SIZE],
    };
    reply(s, &rsp.encode());
}

const V7: Version = Version {
    major: 7,
    minor: 0,
    patch: 0,
};

/// Reads until the client closes; returns how many bytes came.
fn drain(s: &mut TcpStream) -> usize {
    let start = Instant::now();
    let mut total = 0;
    let mut buf = [0u8; 4096];
    while start.elapsed() < LIMIT {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => total += n,
        }
    }
    total
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn tensor(id: u64, buffer: u64, data: u64) -> WireTensor {
    let mut t = WireTensor {
        id,
        buffer,
        data,
        ne: [4, 1, 1, 1],
        nb: [4, 16, 16, 16],
        ..WireTensor::default()
    };
    t.set_name(&format!("t{id}"));
    t
}

#[test]
fn handshake_then_each_request_as_the_server_reads_it() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::DeviceCount)
            .is_empty()
            .then_some(())
            .unwrap();
        reply(&mut s, &2u32.to_le_bytes());
        let p = expect(&mut s, Command::GetAlignment);
        assert_eq!(p, 1u32.to_le_bytes());
        reply(&mut s, &32u64.to_le_bytes());
        let p = expect(&mut s, Command::AllocBuffer);
        assert_eq!((u32_at(&p, 0), u64_at(&p, 4)), (1, 4096));
        let mut r = 0xb0f_u64.to_le_bytes().to_vec();
        r.extend_from_slice(&4096u64.to_le_bytes());
        reply(&mut s, &r);
        let p = expect(&mut s, Command::BufferGetBase);
        assert_eq!(u64_at(&p, 0), 0xb0f);
        reply(&mut s, &0x7000u64.to_le_bytes());
        let p = expect(&mut s, Command::SetTensor);
        assert_eq!(
            WireTensor::decode(&p[..WIRE_TENSOR_SIZE]).unwrap(),
            tensor(1, 0xb0f, 0x7000)
        );
        assert_eq!((p[296], u64_at(&p, 297), &p[305..]), (0, 4, &b"abcd"[..]));
        let p = expect(&mut s, Command::GetTensor);
        assert_eq!((u64_at(&p, 296), u64_at(&p, 304)), (2, 3));
        reply(&mut s, b"xyz");
        let p = expect(&mut s, Command::GraphCompute);
        let g = GraphMsg::decode(&p).unwrap();
        assert_eq!(
            (g.device, g.nodes.as_slice(), g.tensors.len()),
            (1, &[2u64][..], 2)
        );
        // synchronize: a DEVICE_COUNT round trip.
        expect(&mut s, Command::DeviceCount);
        reply(&mut s, &2u32.to_le_bytes());
        let p = expect(&mut s, Command::GetDeviceMemory);
        assert_eq!(p, 1u32.to_le_bytes());
        let mut r = 100u64.to_le_bytes().to_vec();
        r.extend_from_slice(&200u64.to_le_bytes());
        reply(&mut s, &r);
        let p = expect(&mut s, Command::FreeBuffer);
        assert_eq!(u64_at(&p, 0), 0xb0f);
        assert!(request(&mut s).is_none(), "the client sent more");
    });
    let mut c = Client::connect(&addr, &Timeouts::default()).unwrap();
    assert_eq!(c.server_version(), V7);
    assert_eq!(c.endpoint(), addr);
    assert_eq!(c.device_count().unwrap(), 2);
    assert_eq!(c.alignment(1).unwrap(), 32);
    let buf = c.alloc_buffer(1, 4096).unwrap().unwrap();
    assert_eq!(
        buf,
        RemoteBuffer {
            handle: 0xb0f,
            size: 4096
        }
    );
    let base = c.buffer_base(buf.handle).unwrap();
    let a = tensor(1, buf.handle, base);
    c.set_tensor(&a, 4, b"abcd").unwrap();
    let mut out = [0u8; 3];
    c.get_tensor(&a, 2, &mut out).unwrap();
    assert_eq!(&out, b"xyz");
    let mut b = tensor(2, buf.handle, base + 16);
    b.src[0] = 1;
    c.graph_compute(1, &[2], &[a, b]).unwrap();
    c.synchronize().unwrap();
    let m = c.device_memory(1).unwrap();
    assert_eq!((m.free, m.total), (100, 200));
    c.free_buffer(buf.handle).unwrap();
    drop(c);
    server.join().unwrap();
}

#[test]
fn a_server_of_another_protocol_version_is_refused() {
    for version in [
        Version { major: 6, ..V7 },
        Version { minor: 1, ..V7 },
        Version { major: 8, ..V7 },
    ] {
        let (addr, server) = serve(move |mut s| {
            hello(&mut s, version);
            drain(&mut s)
        });
        let e = Client::connect(&addr, &short()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::VersionMismatch);
        assert_eq!(e.step(), Step::Command(Command::Hello));
        assert_eq!(e.cause(), &Cause::VersionMismatch(version));
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!("RPC server {addr}: HELLO: ")),
            "{msg}"
        );
        assert!(
            msg.contains(&version.to_string()) && msg.contains("7.0.x"),
            "{msg}"
        );
        // The client closed the connection without sending anything more.
        assert_eq!(server.join().unwrap(), 0);
    }
}

#[test]
fn a_server_of_another_patch_level_is_refused_as_numbering_ops_differently() {
    let version = Version { patch: 1, ..V7 };
    let (addr, server) = serve(move |mut s| {
        hello(&mut s, version);
        drain(&mut s)
    });
    let e = Client::connect(&addr, &short()).unwrap_err();
    assert_eq!(e.cause(), &Cause::VersionMismatch(version));
    let msg = e.to_string();
    assert!(
        msg.contains("protocol 7.0.1, this client 7.0.0")
            && msg.contains("numbers ops differently"),
        "{msg}"
    );
    assert_eq!(server.join().unwrap(), 0);
}

/// A server that answers the requests of `script` in order, each with its payload, then
/// reads until the client closes (returning how many more bytes came).
fn scripted(script: Vec<(Command, Vec<u8>)>) -> (String, JoinHandle<usize>) {
    serve(move |mut s| {
        hello(&mut s, V7);
        for (command, payload) in script {
            expect(&mut s, command);
            reply(&mut s, &payload);
        }
        drain(&mut s)
    })
}

fn le64(values: &[u64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn every_value_a_server_answers_is_checked_before_it_is_used() {
    type Call = fn(&mut Client) -> Result<(), ggml_backend_rs_rpc::Error>;
    type Script = Vec<(Command, Vec<u8>)>;
    /// (case, the server's replies, the calls, the command that fails, the value's name, the
    /// value)
    type Case = (&'static str, Script, Call, Command, &'static str, u64);
    let t = tensor(1, 1, 0x1000);
    let cases: Vec<Case> = vec![
        (
            "no devices",
            vec![(Command::DeviceCount, 0u32.to_le_bytes().to_vec())],
            |c| c.device_count().map(drop),
            Command::DeviceCount,
            "a device count of",
            0,
        ),
        (
            "2^32 - 1 devices (would hold the caller for hours)",
            vec![(Command::DeviceCount, u32::MAX.to_le_bytes().to_vec())],
            |c| c.device_count().map(drop),
            Command::DeviceCount,
            "a device count of",
            u64::from(u32::MAX),
        ),
        (
            "alignment 0 (ggml-alloc divides by it)",
            vec![(Command::GetAlignment, le64(&[0]))],
            |c| c.alignment(0).map(drop),
            Command::GetAlignment,
            "an alignment of",
            0,
        ),
        (
            "alignment 48, not a power of two",
            vec![(Command::GetAlignment, le64(&[48]))],
            |c| c.alignment(0).map(drop),
            Command::GetAlignment,
            "an alignment of",
            48,
        ),
        (
            "alignment 2 MiB",
            vec![(Command::GetAlignment, le64(&[2 << 20]))],
            |c| c.alignment(0).map(drop),
            Command::GetAlignment,
            "an alignment of",
            2 << 20,
        ),
        (
            "maximum size 16, below the alignment 32",
            vec![
                (Command::GetAlignment, le64(&[32])),
                (Command::GetMaxSize, le64(&[16])),
            ],
            |c| c.alignment(0).and_then(|_| c.max_size(0)).map(drop),
            Command::GetMaxSize,
            "a maximum buffer size of",
            16,
        ),
        (
            "maximum size 0",
            vec![(Command::GetMaxSize, le64(&[0]))],
            |c| c.max_size(0).map(drop),
            Command::GetMaxSize,
            "a maximum buffer size of",
            0,
        ),
        (
            "a buffer smaller than asked for",
            vec![(Command::AllocBuffer, le64(&[0xb0f, 100]))],
            |c| c.alloc_buffer(0, 4096).map(drop),
            Command::AllocBuffer,
            "a buffer size of",
            100,
        ),
        (
            "a buffer larger than any memory",
            vec![(Command::AllocBuffer, le64(&[0xb0f, 1 << 60]))],
            |c| c.alloc_buffer(0, 4096).map(drop),
            Command::AllocBuffer,
            "a buffer size of",
            1 << 60,
        ),
        (
            "base address 0 (ggml-alloc aborts on it)",
            vec![
                (Command::AllocBuffer, le64(&[0xb0f, 4096])),
                (Command::BufferGetBase, le64(&[0])),
            ],
            |c| {
                c.alloc_buffer(0, 4096)
                    .and_then(|b| c.buffer_base(b.unwrap().handle))
                    .map(drop)
            },
            Command::BufferGetBase,
            "a base address of",
            0,
        ),
        (
            "a base address off the device's alignment",
            vec![
                (Command::GetAlignment, le64(&[64])),
                (Command::AllocBuffer, le64(&[0xb0f, 4096])),
                (Command::BufferGetBase, le64(&[0x1004])),
            ],
            |c| {
                c.alignment(0)?;
                let b = c.alloc_buffer(0, 4096)?.unwrap();
                c.buffer_base(b.handle).map(drop)
            },
            Command::BufferGetBase,
            "a base address of",
            0x1004,
        ),
        (
            "a base address whose buffer would end past 2^64",
            vec![
                (Command::AllocBuffer, le64(&[0xb0f, 4096])),
                (Command::BufferGetBase, le64(&[u64::MAX - 10])),
            ],
            |c| {
                c.alloc_buffer(0, 4096)
                    .and_then(|b| c.buffer_base(b.unwrap().handle))
                    .map(drop)
            },
            Command::BufferGetBase,
            "a base address of",
            u64::MAX - 10,
        ),
        (
            "an allocation size above the device's largest buffer",
            vec![
                (Command::GetMaxSize, le64(&[1 << 20])),
                (Command::GetAllocSize, le64(&[2 << 20])),
            ],
            |c| {
                c.max_size(0)?;
                c.alloc_size(0, &tensor(1, 1, 0x1000), &[]).map(drop)
            },
            Command::GetAllocSize,
            "an allocation size of",
            2 << 20,
        ),
        (
            "an allocation size above any memory",
            vec![(Command::GetAllocSize, le64(&[1 << 60]))],
            |c| c.alloc_size(0, &tensor(1, 1, 0x1000), &[]).map(drop),
            Command::GetAllocSize,
            "an allocation size of",
            1 << 60,
        ),
        (
            "more memory free than there is",
            vec![(Command::GetDeviceMemory, le64(&[300, 200]))],
            |c| c.device_memory(0).map(drop),
            Command::GetDeviceMemory,
            "a free memory of",
            300,
        ),
        (
            "a total memory above any memory",
            vec![(Command::GetDeviceMemory, le64(&[0, 1 << 60]))],
            |c| c.device_memory(0).map(drop),
            Command::GetDeviceMemory,
            "a total memory of",
            1 << 60,
        ),
    ];
    for (name, script, call, command, what, got) in cases {
        let (addr, server) = scripted(script);
        let mut c = Client::connect(&addr, &short()).unwrap();
        let e = call(&mut c).expect_err(name);
        assert_eq!(e.kind(), ErrorKind::Invalid, "{name}: {e}");
        assert_eq!(e.step(), Step::Command(command), "{name}");
        let msg = e.to_string();
        assert!(
            msg.starts_with(&format!(
                "RPC server {addr}: {command}: the server answered {what} {got}, which "
            )),
            "{name}: {msg}"
        );
        // The server is not trusted again: the next call fails at once, without I/O.
        assert_eq!(c.alloc_size(0, &t, &[]).unwrap_err(), e, "{name}");
        drop(c);
        assert_eq!(server.join().unwrap(), 0, "{name}: the client sent more");
    }
}

#[test]
fn a_server_that_trickles_a_reply_times_out_in_total_not_per_stall() {
    // One byte every 20 ms never stalls for the 200 ms reply bound, but 4096 bytes at 10 000
    // bytes/s may take 0.2 + 0.41 s in all.
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GetTensor);
        s.write_all(&4096u64.to_le_bytes()).unwrap();
        let start = Instant::now();
        let mut sent = 0;
        while sent < 4096 && start.elapsed() < LIMIT && s.write_all(&[7]).is_ok() {
            sent += 1;
            thread::sleep(Duration::from_millis(20));
        }
        sent
    });
    let timeouts = Timeouts {
        min_rate: 10_000,
        ..short()
    };
    let mut c = Client::connect(&addr, &timeouts).unwrap();
    let mut out = vec![0u8; 4096];
    let start = Instant::now();
    let e = c
        .get_tensor(&tensor(1, 1, 0x1000), 0, &mut out)
        .unwrap_err();
    let took = start.elapsed();
    let total = timeouts.transfer(4096, timeouts.reply);
    assert_eq!(
        e.cause(),
        &Cause::TimedOut {
            waiting: Waiting::ReplyData,
            after: total
        }
    );
    assert!(
        took >= total && took < total + Duration::from_secs(2),
        "took {took:?}"
    );
    drop(c);
    let sent = server.join().unwrap();
    assert!(sent < 4096, "the server sent everything ({sent} bytes)");
}

#[test]
fn nothing_listening_is_refused_naming_the_endpoint() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let e = Client::connect(&addr, &short()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Refused);
    assert_eq!(e.step(), Step::Connect);
    assert_eq!(e.endpoint(), addr);
    let msg = e.to_string();
    assert!(
        msg.starts_with(&format!("RPC server {addr}: connect: connection refused")),
        "{msg}"
    );
}

#[test]
fn endpoints_that_are_not_host_port_are_refused_before_any_io() {
    for bad in [
        "localhost",
        "localhost:",
        ":50052",
        "localhost:http",
        "localhost:0",
        "h:70000",
    ] {
        let e = Client::connect(bad, &short()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadEndpoint, "{bad}: {e}");
        assert!(e.to_string().contains("expected HOST:PORT"), "{e}");
    }
}

#[test]
fn a_server_that_closes_at_hello_gives_closed() {
    let (addr, server) = serve(|mut s| {
        // As a server of another protocol version does when HELLO has the wrong size.
        expect(&mut s, Command::Hello);
    });
    let e = Client::connect(&addr, &short()).unwrap_err();
    assert_eq!(e.step(), Step::Command(Command::Hello));
    assert_eq!(e.kind(), ErrorKind::Closed);
    assert!(e.to_string().contains("during the handshake"), "{e}");
    server.join().unwrap();
}

#[test]
fn a_server_that_never_answers_hello_times_out() {
    let (addr, server) = serve(|mut s| {
        expect(&mut s, Command::Hello);
        drain(&mut s)
    });
    let e = Client::connect(&addr, &short()).unwrap_err();
    assert_eq!(e.step(), Step::Command(Command::Hello));
    assert_eq!(
        e.cause(),
        &Cause::TimedOut {
            waiting: Waiting::Reply,
            after: Duration::from_millis(200)
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("HELLO: no reply within 200 ms"), "{msg}");
    assert!(msg.contains("one client at a time"), "{msg}");
    server.join().unwrap();
}

#[test]
fn a_server_that_stops_answering_times_out() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GetTensor);
        drain(&mut s)
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    let mut out = [0u8; 16];
    let e = c.get_tensor(&tensor(1, 1, 1), 0, &mut out).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert_eq!(
        e.to_string(),
        format!("RPC server {addr}: GET_TENSOR: no reply within 200 ms")
    );
    server.join().unwrap();
}

#[test]
fn a_server_that_stops_reading_times_out_the_send() {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let (addr, server) = serve(move |mut s| {
        hello(&mut s, V7);
        // Reads nothing more until the test is done with the client.
        let _ = wait.recv_timeout(LIMIT);
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    // More than the socket buffers of both ends hold.
    let data = vec![0u8; 64 << 20];
    let e = c.set_tensor(&tensor(1, 1, 1), 0, &data).unwrap_err();
    assert_eq!(
        e.cause(),
        &Cause::TimedOut {
            waiting: Waiting::Send,
            after: Duration::from_millis(200)
        }
    );
    assert!(
        e.to_string()
            .contains("SET_TENSOR: the server took no data for 200 ms"),
        "{e}"
    );
    done.send(()).unwrap();
    server.join().unwrap();
}

#[test]
fn a_server_that_closes_mid_reply_gives_closed() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GetMaxSize);
        s.write_all(&8u64.to_le_bytes()).unwrap();
        s.write_all(&[1, 2, 3]).unwrap();
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    let e = c.max_size(0).unwrap_err();
    assert_eq!(e.cause(), &Cause::Closed { after: None });
    assert!(
        e.to_string()
            .contains("GET_MAX_SIZE: connection closed by the server"),
        "{e}"
    );
    server.join().unwrap();
}

#[test]
fn a_close_after_a_command_without_reply_names_that_command() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GraphRecompute);
        // As upstream's server does when it rejects a request: close without a word.
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    c.graph_recompute(0).unwrap();
    let e = c.synchronize().unwrap_err();
    assert_eq!(e.step(), Step::Command(Command::DeviceCount));
    assert_eq!(
        e.cause(),
        &Cause::Closed {
            after: Some(Command::GraphRecompute)
        }
    );
    assert!(e.to_string().contains("preceding GRAPH_RECOMPUTE"), "{e}");
    server.join().unwrap();
}

#[test]
fn a_reply_of_the_wrong_length_is_malformed() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GetAlignment);
        reply(&mut s, &32u32.to_le_bytes());
        drain(&mut s)
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    let e = c.alignment(0).unwrap_err();
    assert_eq!(
        e.cause(),
        &Cause::Malformed {
            expected: 8,
            got: 4
        }
    );
    assert!(
        e.to_string()
            .contains("GET_ALIGNMENT: malformed reply: 4 bytes announced, 8 expected"),
        "{e}"
    );
    server.join().unwrap();
}

#[test]
fn something_else_than_an_rpc_server_is_malformed_at_hello() {
    let (addr, server) = serve(|mut s| {
        expect(&mut s, Command::Hello);
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
        drain(&mut s)
    });
    let e = Client::connect(&addr, &short()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Malformed);
    assert_eq!(e.step(), Step::Command(Command::Hello));
    server.join().unwrap();
}

#[test]
fn a_failed_client_returns_its_first_error_without_io() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GetAlignment);
        reply(&mut s, &[0u8; 3]);
        drain(&mut s)
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    let first = c.alignment(0).unwrap_err();
    assert_eq!(c.failure(), Some(&first));
    assert_eq!(c.device_count().unwrap_err(), first);
    assert_eq!(
        c.set_tensor(&tensor(1, 1, 1), 0, b"data").unwrap_err(),
        first
    );
    assert_eq!(c.free_buffer(1).unwrap_err(), first);
    assert_eq!(
        c.graph_compute(0, &[1], &[tensor(1, 1, 1)]).unwrap_err(),
        first
    );
    // Even a request the client would refuse reports the failure.
    assert_eq!(c.graph_compute(0, &[], &[]).unwrap_err(), first);
    drop(c);
    assert_eq!(server.join().unwrap(), 0, "bytes sent after the failure");
}

#[test]
fn an_invalid_graph_is_refused_before_sending_and_the_client_goes_on() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::DeviceCount);
        reply(&mut s, &1u32.to_le_bytes());
        assert!(request(&mut s).is_none());
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    let mut node = tensor(2, 1, 1);
    node.src[0] = 9;
    let e = c.graph_compute(0, &[2], &[node]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    assert!(
        e.to_string()
            .contains("GRAPH_COMPUTE: invalid request: tensor 2 uses 9"),
        "{e}"
    );
    let e = c
        .alloc_size(0, &node, &[WireTensor::default(); 11])
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    assert_eq!(c.failure(), None);
    assert_eq!(c.device_count().unwrap(), 1);
    drop(c);
    server.join().unwrap();
}

#[test]
fn a_pending_compute_extends_the_wait_for_the_next_reply() {
    let (addr, server) = serve(|mut s| {
        hello(&mut s, V7);
        expect(&mut s, Command::GraphCompute);
        // Computing: longer than the reply timeout, well within the compute timeout.
        thread::sleep(Duration::from_millis(600));
        expect(&mut s, Command::DeviceCount);
        reply(&mut s, &1u32.to_le_bytes());
        assert!(request(&mut s).is_none());
    });
    let mut c = Client::connect(&addr, &short()).unwrap();
    c.graph_compute(0, &[1], &[tensor(1, 1, 1)]).unwrap();
    c.synchronize().unwrap();
    drop(c);
    server.join().unwrap();
}

#[test]
fn weights_above_the_threshold_go_through_the_servers_cache() {
    let data: Vec<u8> = (0..HASH_THRESHOLD + 1).map(|i| (i % 251) as u8).collect();
    let hash = fnv1a64(&data);
    let (addr, server) = serve(move |mut s| {
        hello(&mut s, V7);
        // A miss: the data follows, with the cache flag set.
        let p = expect(&mut s, Command::SetTensorHash);
        assert_eq!((u64_at(&p, 296), u64_at(&p, 304)), (8, hash));
        reply(&mut s, &[0]);
        let p = expect(&mut s, Command::SetTensor);
        assert_eq!((p[296], u64_at(&p, 297)), (1, 8));
        assert_eq!(fnv1a64(&p[305..]), hash);
        // A hit: nothing follows.
        expect(&mut s, Command::SetTensorHash);
        reply(&mut s, &[1]);
        // Small data: sent at once, no cache flag.
        let p = expect(&mut s, Command::SetTensor);
        assert_eq!((p[296], &p[305..]), (0, &b"small"[..]));
        assert!(request(&mut s).is_none());
    });
    let mut c = Client::connect(&addr, &Timeouts::default()).unwrap();
    let w = tensor(1, 1, 1);
    assert_eq!(c.set_weights(&w, 8, &data).unwrap(), Upload::Sent);
    assert_eq!(c.set_weights(&w, 8, &data).unwrap(), Upload::FromCache);
    assert_eq!(c.set_weights(&w, 0, b"small").unwrap(), Upload::Sent);
    drop(c);
    server.join().unwrap();
}
