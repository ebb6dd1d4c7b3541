//! One connection to one ggml-rpc server, with every wait bounded and every failure an error
//! value that names the server, the command and the cause.
//!
//! The server serves one client at a time and executes commands in the order they arrive, so
//! a connection is a strict sequence: write a request, then (for commands with a reply) read
//! the reply. A reply therefore also says that every earlier command has finished, which is
//! how a client learns that a graph compute is done: GRAPH_COMPUTE has no reply of its own.
//! After any error the stream may sit in the middle of a message and cannot be trusted, so
//! the client closes it and keeps the error: every later call returns that error at once.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::wire::{
    decode_bool, decode_u32, decode_u64, fnv1a64, AllocBufferReply, Command, DeviceMemory,
    GraphMsg, GraphPayload, HelloReply, Request, Version, WireError, WireTensor, HASH_THRESHOLD,
    MAX_SRC, PROTOCOL, REPLY_HEADER_SIZE,
};

/// How long the client waits, per kind of wait. A zero duration is taken as 1 ms.
///
/// * `connect`: establishing the TCP connection (name resolution is the system resolver's,
///   with its own timeouts);
/// * `reply`: from the end of a request to the whole header of its reply; also the longest
///   stall while sending a request or reading a reply's payload;
/// * `compute`: added to those bounds once per graph compute (GRAPH_COMPUTE or
///   GRAPH_RECOMPUTE) sent since the last reply, because the server computes before it reads
///   or answers anything else;
/// * `min_rate`: the slowest a transfer may go, in bytes per second: sending a request or
///   reading a reply's payload of N bytes takes at most its stall bound plus N / `min_rate`
///   in all, so a server that trickles data cannot hold the caller without end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub reply: Duration,
    pub compute: Duration,
    pub min_rate: u64,
}

impl Default for Timeouts {
    /// 10 s to connect, 30 s for a reply, 300 s per graph compute, transfers at 1 MiB/s or
    /// faster.
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            reply: Duration::from_secs(30),
            compute: Duration::from_secs(300),
            min_rate: 1 << 20,
        }
    }
}

impl Timeouts {
    /// The longest a transfer of `bytes` may take in all, given its stall bound.
    pub fn transfer(&self, bytes: u64, stall: Duration) -> Duration {
        let rate = self.min_rate.max(1);
        stall.saturating_add(Duration::from_secs_f64(bytes as f64 / rate as f64))
    }
}

/// What the client was doing when it failed: connecting, or one command (HELLO is the
/// handshake after the TCP connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    Connect,
    Command(Command),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Connect => f.write_str("connect"),
            Step::Command(c) => f.write_str(c.name()),
        }
    }
}

/// What a timed-out wait was for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// The TCP connection.
    Connect,
    /// The server to take more of a request.
    Send,
    /// The header of a reply.
    Reply,
    /// More of a reply's payload.
    ReplyData,
}

/// The cause of an [`Error`], with what the message to the user needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// The endpoint is not `HOST:PORT`.
    BadEndpoint(String),
    /// The host name did not resolve (the resolver's message).
    Unresolved(String),
    /// Nothing listens on the port.
    Refused,
    /// No route to the host or network (the system's message).
    Unreachable(String),
    /// A wait exceeded its bound.
    TimedOut { waiting: Waiting, after: Duration },
    /// The server closed the connection. `after`: the last command sent without a reply
    /// since the last reply, which the server may have rejected (it closes the connection
    /// when it rejects a request).
    Closed { after: Option<Command> },
    /// A reply whose announced size is not the command's.
    Malformed { expected: u64, got: u64 },
    /// The server speaks a protocol version this client does not.
    VersionMismatch(Version),
    /// A reply of the right size whose value cannot be true (a server is an untrusted peer):
    /// `what` the value is, `got` as received, `rule` what it must be.
    Invalid {
        what: &'static str,
        got: u64,
        rule: String,
    },
    /// A request this client cannot send (nothing was sent; the client stays usable).
    InvalidRequest(String),
    /// Another I/O error.
    Io {
        kind: io::ErrorKind,
        message: String,
    },
}

/// The kinds of [`Cause`], for callers that branch on them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    BadEndpoint,
    /// A name that does not resolve, or no route to the host.
    Unreachable,
    Refused,
    TimedOut,
    Closed,
    Malformed,
    VersionMismatch,
    Invalid,
    InvalidRequest,
    Io,
}

impl Cause {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Cause::BadEndpoint(_) => ErrorKind::BadEndpoint,
            Cause::Unresolved(_) | Cause::Unreachable(_) => ErrorKind::Unreachable,
            Cause::Refused => ErrorKind::Refused,
            Cause::TimedOut { .. } => ErrorKind::TimedOut,
            Cause::Closed { .. } => ErrorKind::Closed,
            Cause::Malformed { .. } => ErrorKind::Malformed,
            Cause::VersionMismatch(_) => ErrorKind::VersionMismatch,
            Cause::Invalid { .. } => ErrorKind::Invalid,
            Cause::InvalidRequest(_) => ErrorKind::InvalidRequest,
            Cause::Io { .. } => ErrorKind::Io,
        }
    }
}

/// A failed connect or command: the server's endpoint, the step, the cause.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    endpoint: String,
    step: Step,
    cause: Cause,
}

impl Error {
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
    pub fn step(&self) -> Step {
        self.step
    }
    pub fn cause(&self) -> &Cause {
        &self.cause
    }
    pub fn kind(&self) -> ErrorKind {
        self.cause.kind()
    }
}

/// "30 s", "1.5 s", "200 ms".
fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RPC server {}: {}: ", self.endpoint, self.step)?;
        match &self.cause {
            Cause::BadEndpoint(why) => write!(f, "invalid endpoint ({why}); expected HOST:PORT"),
            Cause::Unresolved(msg) => write!(f, "cannot resolve the host: {msg}"),
            Cause::Refused => {
                write!(
                    f,
                    "connection refused (is an rpc-server listening on that port?)"
                )
            }
            Cause::Unreachable(msg) => write!(f, "host unreachable: {msg}"),
            Cause::TimedOut { waiting, after } => {
                let after = seconds(*after);
                match waiting {
                    Waiting::Connect => write!(f, "no connection within {after}"),
                    Waiting::Send => write!(f, "the server took no data for {after}"),
                    Waiting::Reply if self.step == Step::Command(Command::Hello) => write!(
                        f,
                        "no reply within {after} (the server serves one client at a time: is \
                         another client connected?)"
                    ),
                    Waiting::Reply => write!(f, "no reply within {after}"),
                    Waiting::ReplyData => write!(f, "the reply stalled for {after}"),
                }
            }
            Cause::Closed { .. } if self.step == Step::Command(Command::Hello) => write!(
                f,
                "connection closed by the server during the handshake (a server of another \
                 protocol version does that; see the server's log)"
            ),
            Cause::Closed { after: Some(c) } => write!(
                f,
                "connection closed by the server (it may have rejected the preceding {c}, \
                 which has no reply; see the server's log)"
            ),
            Cause::Closed { after: None } => write!(
                f,
                "connection closed by the server (it stopped, or rejected this request; see \
                 the server's log)"
            ),
            Cause::Malformed { expected, got } => write!(
                f,
                "malformed reply: {got} bytes announced, {expected} expected (is this a ggml \
                 0.26 rpc-server?)"
            ),
            Cause::VersionMismatch(v) if v.messages_supported() => {
                write!(
                    f,
                    "the server speaks RPC protocol {v}, this client {PROTOCOL}: the patch \
                     level follows ggml's op list, so that server numbers ops differently \
                     (build it from the same llama.cpp as this program)"
                )
            }
            Cause::VersionMismatch(v) => write!(
                f,
                "the server speaks RPC protocol {v}, this client {}.{}.x (ggml 0.24-0.26's \
                 rpc-server)",
                PROTOCOL.major, PROTOCOL.minor
            ),
            Cause::Invalid { what, got, rule } => {
                write!(f, "the server answered {what} {got}, which {rule}")
            }
            Cause::InvalidRequest(why) => write!(f, "invalid request: {why}"),
            Cause::Io { message, .. } => write!(f, "I/O error: {message}"),
        }
    }
}

impl std::error::Error for Error {}

/// A buffer on the server: the handle ALLOC_BUFFER returned and the size it has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteBuffer {
    pub handle: u64,
    pub size: u64,
}

/// How [`Client::set_weights`] got the data to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upload {
    /// The server had the data in its cache and copied it from there.
    FromCache,
    /// The data was sent.
    Sent,
}

/// A connection to one ggml-rpc server (protocol 7, ggml 0.26.0's `rpc-server`), plain TCP.
///
/// Methods take `&mut self`: one request at a time. `device` arguments index the server's
/// devices (see [`Client::device_count`]); the server closes the connection on an index out
/// of range. Commands without reply (`free_buffer`, `clear_buffer`, `set_tensor`,
/// `init_tensor`, `memset_tensor`, `graph_compute`, `graph_recompute`) return once the
/// request is sent; a rejection shows up as [`Cause::Closed`] at the next command with a
/// reply ([`Client::synchronize`] when nothing else is due).
#[derive(Debug)]
pub struct Client {
    endpoint: String,
    timeouts: Timeouts,
    version: Version,
    /// `None` once failed.
    stream: Option<TcpStream>,
    failed: Option<Error>,
    /// Graph computes sent since the last reply: each extends the next wait.
    pending_computes: u32,
    /// The last command without reply sent since the last reply.
    unanswered: Option<Command>,
    /// What the server said of its devices (alignment, maximum buffer size) and buffers
    /// (device, size): the bounds later replies are checked against.
    limits: Limits,
}

/// Most devices one server may report; more is a broken reply, not hardware.
pub const MAX_DEVICES: u32 = 256;
/// Largest buffer alignment a server may report (1 MiB; GPUs ask for 256 bytes at most).
pub const MAX_ALIGNMENT: u64 = 1 << 20;
/// Largest size in bytes any reply may state (1 PiB).
pub const MAX_BYTES: u64 = 1 << 50;

#[derive(Debug, Default)]
struct Limits {
    /// Per device: alignment and maximum buffer size, once asked.
    alignment: std::collections::HashMap<u32, u64>,
    max_size: std::collections::HashMap<u32, u64>,
    /// Per live buffer handle: its device and size.
    buffers: std::collections::HashMap<u64, (u32, u64)>,
}

fn at_least_1ms(d: Duration) -> Duration {
    d.max(Duration::from_millis(1))
}

fn closed() -> Cause {
    Cause::Closed { after: None }
}

/// The cause for a failed read or write of a connected stream.
fn io_cause(e: &io::Error, waiting: Waiting, bound: Duration) -> Cause {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => Cause::TimedOut {
            waiting,
            after: bound,
        },
        io::ErrorKind::BrokenPipe
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::NotConnected
        | io::ErrorKind::UnexpectedEof
        | io::ErrorKind::WriteZero => closed(),
        kind => Cause::Io {
            kind,
            message: e.to_string(),
        },
    }
}

fn other_io(e: &io::Error) -> Cause {
    Cause::Io {
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// The addresses of `HOST:PORT`.
fn resolve(endpoint: &str) -> Result<Vec<SocketAddr>, Cause> {
    let Some((host, port)) = endpoint.rsplit_once(':') else {
        return Err(Cause::BadEndpoint("no ':' before a port".into()));
    };
    if host.is_empty() {
        return Err(Cause::BadEndpoint("no host".into()));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => {
            return Err(Cause::BadEndpoint(format!("'{port}' is not a port number")));
        }
        Ok(_) => {}
    }
    let addrs: Vec<SocketAddr> = endpoint
        .to_socket_addrs()
        .map_err(|e| Cause::Unresolved(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(Cause::Unresolved("no address".into()));
    }
    Ok(addrs)
}

/// A TCP connection to the first address that takes one, all attempts within `limit`. The
/// error is the last attempt's.
fn connect_any(addrs: &[SocketAddr], limit: Duration) -> Result<TcpStream, Cause> {
    let start = Instant::now();
    let timed_out = Cause::TimedOut {
        waiting: Waiting::Connect,
        after: limit,
    };
    let mut last = None;
    for addr in addrs {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            break;
        }
        match TcpStream::connect_timeout(addr, left) {
            Ok(s) => return Ok(s),
            Err(e) => {
                last = Some(match e.kind() {
                    io::ErrorKind::ConnectionRefused => Cause::Refused,
                    io::ErrorKind::HostUnreachable
                    | io::ErrorKind::NetworkUnreachable
                    | io::ErrorKind::AddrNotAvailable => Cause::Unreachable(e.to_string()),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => timed_out.clone(),
                    _ => other_io(&e),
                })
            }
        }
    }
    Err(last.unwrap_or(timed_out))
}

/// Writes every part, failing when the server takes nothing for `stall`. (`TcpStream` sends
/// with `MSG_NOSIGNAL`, so a closed peer is an error here, not a SIGPIPE in the host.)
fn send(
    stream: &mut TcpStream,
    parts: &[&[u8]],
    stall: Duration,
    total: Duration,
) -> Result<(), Cause> {
    stream
        .set_write_timeout(Some(stall))
        .map_err(|e| other_io(&e))?;
    let start = Instant::now();
    for part in parts {
        let mut rest = *part;
        while !rest.is_empty() {
            if start.elapsed() > total {
                return Err(Cause::TimedOut {
                    waiting: Waiting::Send,
                    after: total,
                });
            }
            match stream.write(rest) {
                Ok(0) => return Err(closed()),
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_cause(&e, Waiting::Send, stall)),
            }
        }
    }
    Ok(())
}

/// Fills `buf` within `limit` in all.
fn read_within(stream: &mut TcpStream, buf: &mut [u8], limit: Duration) -> Result<(), Cause> {
    let start = Instant::now();
    let mut filled = 0;
    while filled < buf.len() {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            return Err(Cause::TimedOut {
                waiting: Waiting::Reply,
                after: limit,
            });
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| other_io(&e))?;
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(closed()),
            Ok(n) => filled += n,
            // Time left is checked again above.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(io_cause(&e, Waiting::Reply, limit)),
        }
    }
    Ok(())
}

/// Fills `buf`, failing when no data comes for `stall`.
fn read_progress(
    stream: &mut TcpStream,
    buf: &mut [u8],
    stall: Duration,
    total: Duration,
) -> Result<(), Cause> {
    stream
        .set_read_timeout(Some(stall))
        .map_err(|e| other_io(&e))?;
    let start = Instant::now();
    let mut filled = 0;
    while filled < buf.len() {
        if start.elapsed() > total {
            return Err(Cause::TimedOut {
                waiting: Waiting::ReplyData,
                after: total,
            });
        }
        match stream.read(&mut buf[filled..]) {
            Ok(0) => return Err(closed()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_cause(&e, Waiting::ReplyData, stall)),
        }
    }
    Ok(())
}

/// A decoder's complaint about a reply of the size the header announced (which the client
/// checked before), kept as the same kind of error.
fn malformed(e: WireError) -> Cause {
    match e {
        WireError::Size { expected, got, .. } => Cause::Malformed {
            expected: expected as u64,
            got: got as u64,
        },
        WireError::Graph(g) => Cause::InvalidRequest(g.to_string()),
    }
}

impl Client {
    /// Connects to `endpoint` (`HOST:PORT`), with TCP_NODELAY, and shakes hands: HELLO
    /// offering plain TCP, and a check that the server's protocol version is one this client
    /// speaks (major 7, minor 0).
    pub fn connect(endpoint: &str, timeouts: &Timeouts) -> Result<Client, Error> {
        let fail = |cause| Error {
            endpoint: endpoint.to_string(),
            step: Step::Connect,
            cause,
        };
        let addrs = resolve(endpoint).map_err(fail)?;
        let stream = connect_any(&addrs, at_least_1ms(timeouts.connect)).map_err(fail)?;
        stream.set_nodelay(true).map_err(|e| fail(other_io(&e)))?;
        let mut client = Client {
            endpoint: endpoint.to_string(),
            timeouts: *timeouts,
            version: PROTOCOL,
            stream: Some(stream),
            failed: None,
            pending_computes: 0,
            unanswered: None,
            limits: Limits::default(),
        };
        let mut reply = [0u8; HelloReply::SIZE];
        client.exchange(&Request::Hello, &mut reply)?;
        let hello =
            HelloReply::decode(&reply).map_err(|e| client.fail(Command::Hello, malformed(e)))?;
        if !hello.version.is_supported() {
            return Err(client.fail(Command::Hello, Cause::VersionMismatch(hello.version)));
        }
        // The server's capabilities are ignored: ours are all zero, so it stays on TCP.
        client.version = hello.version;
        Ok(client)
    }

    /// The endpoint as given to [`Client::connect`].
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The protocol version the server reported.
    pub fn server_version(&self) -> Version {
        self.version
    }

    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Bounds for the calls from now on.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }

    /// The error that failed the client, if one did: every call returns it from then on.
    pub fn failure(&self) -> Option<&Error> {
        self.failed.as_ref()
    }

    /// Records `cause` as the client's failure and closes the connection.
    fn fail(&mut self, command: Command, cause: Cause) -> Error {
        let e = Error {
            endpoint: self.endpoint.clone(),
            step: Step::Command(command),
            cause,
        };
        if let Some(s) = self.stream.take() {
            let _ = s.shutdown(Shutdown::Both);
        }
        self.failed = Some(e.clone());
        e
    }

    /// An error for a request refused before sending; the client stays usable.
    fn invalid(&self, command: Command, why: String) -> Error {
        if let Some(e) = &self.failed {
            return e.clone();
        }
        Error {
            endpoint: self.endpoint.clone(),
            step: Step::Command(command),
            cause: Cause::InvalidRequest(why),
        }
    }

    /// Sends `req` and, for a command with a reply, reads the reply's payload into `reply`
    /// (exactly `reply.len()` bytes, the size the request implies).
    fn exchange(&mut self, req: &Request<'_>, reply: &mut [u8]) -> Result<(), Error> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let command = req.command();
        match self.exchange_on_stream(req, reply) {
            Ok(()) => Ok(()),
            Err(Cause::Closed { after: None }) => {
                let after = self.unanswered;
                Err(self.fail(command, Cause::Closed { after }))
            }
            Err(cause) => Err(self.fail(command, cause)),
        }
    }

    fn exchange_on_stream(&mut self, req: &Request<'_>, reply: &mut [u8]) -> Result<(), Cause> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(closed());
        };
        let command = req.command();
        let reply_bound = at_least_1ms(
            self.timeouts
                .reply
                .saturating_add(self.timeouts.compute.saturating_mul(self.pending_computes)),
        );
        let head = req.head();
        let send_bound = self
            .timeouts
            .transfer((head.len() + req.bulk().len()) as u64, reply_bound);
        send(stream, &[&head, req.bulk()], reply_bound, send_bound)?;
        let Some(size) = req.reply_size() else {
            self.unanswered = Some(command);
            if matches!(command, Command::GraphCompute | Command::GraphRecompute) {
                self.pending_computes = self.pending_computes.saturating_add(1);
            }
            return Ok(());
        };
        debug_assert_eq!(size, reply.len() as u64);
        let mut header = [0u8; REPLY_HEADER_SIZE];
        read_within(stream, &mut header, reply_bound)?;
        let announced = u64::from_le_bytes(header);
        if announced != size {
            return Err(Cause::Malformed {
                expected: size,
                got: announced,
            });
        }
        let stall = at_least_1ms(self.timeouts.reply);
        let total = self.timeouts.transfer(size, stall);
        read_progress(stream, reply, stall, total)?;
        // The server answers in order: everything sent before has been done.
        self.pending_computes = 0;
        self.unanswered = None;
        Ok(())
    }

    /// A command with a fixed-size reply of `N` bytes, decoded by `decode`.
    fn ask<const N: usize, T>(
        &mut self,
        req: &Request<'_>,
        decode: impl FnOnce(&[u8]) -> Result<T, WireError>,
    ) -> Result<T, Error> {
        let mut reply = [0u8; N];
        self.exchange(req, &mut reply)?;
        decode(&reply).map_err(|e| self.fail(req.command(), malformed(e)))
    }

    /// Fails the client when a reply's value breaks `rule` (see [`Cause::Invalid`]).
    fn check(
        &mut self,
        command: Command,
        what: &'static str,
        got: u64,
        holds: bool,
        rule: impl FnOnce() -> String,
    ) -> Result<u64, Error> {
        if holds {
            Ok(got)
        } else {
            let rule = rule();
            Err(self.fail(command, Cause::Invalid { what, got, rule }))
        }
    }

    /// How many devices the server serves: 1 to [`MAX_DEVICES`].
    pub fn device_count(&mut self) -> Result<u32, Error> {
        let n = self.ask::<4, _>(&Request::DeviceCount, |b| {
            decode_u32("DEVICE_COUNT reply", b)
        })?;
        self.check(
            Command::DeviceCount,
            "a device count of",
            n.into(),
            (1..=MAX_DEVICES).contains(&n),
            || format!("must be 1 to {MAX_DEVICES}"),
        )?;
        Ok(n)
    }

    /// The alignment of the device's buffers, in bytes: a power of two up to
    /// [`MAX_ALIGNMENT`].
    pub fn alignment(&mut self, device: u32) -> Result<u64, Error> {
        let a = self.ask::<8, _>(&Request::GetAlignment { device }, |b| {
            decode_u64("GET_ALIGNMENT reply", b)
        })?;
        let a = self.check(
            Command::GetAlignment,
            "an alignment of",
            a,
            a.is_power_of_two() && a <= MAX_ALIGNMENT,
            || format!("must be a power of two up to {MAX_ALIGNMENT}"),
        )?;
        self.limits.alignment.insert(device, a);
        Ok(a)
    }

    /// The largest buffer the device allocates, in bytes: at least its alignment (when
    /// known) and at least 1.
    pub fn max_size(&mut self, device: u32) -> Result<u64, Error> {
        let m = self.ask::<8, _>(&Request::GetMaxSize { device }, |b| {
            decode_u64("GET_MAX_SIZE reply", b)
        })?;
        let least = self.limits.alignment.get(&device).copied().unwrap_or(1);
        let m = self.check(
            Command::GetMaxSize,
            "a maximum buffer size of",
            m,
            m >= least,
            || format!("must be at least {least} (the device's alignment)"),
        )?;
        self.limits.max_size.insert(device, m);
        Ok(m)
    }

    /// Allocates a buffer of `size` bytes on the device; `None` when the server could not.
    /// A buffer smaller than asked for, or larger than any reply may state, fails the client.
    pub fn alloc_buffer(&mut self, device: u32, size: u64) -> Result<Option<RemoteBuffer>, Error> {
        let r = self.ask::<{ AllocBufferReply::SIZE }, _>(
            &Request::AllocBuffer { device, size },
            AllocBufferReply::decode,
        )?;
        if r.remote_ptr == 0 {
            return Ok(None);
        }
        self.check(
            Command::AllocBuffer,
            "a buffer size of",
            r.remote_size,
            r.remote_size >= size && r.remote_size <= MAX_BYTES.max(size),
            || format!("must be at least the {size} bytes asked for"),
        )?;
        self.limits
            .buffers
            .insert(r.remote_ptr, (device, r.remote_size));
        Ok(Some(RemoteBuffer {
            handle: r.remote_ptr,
            size: r.remote_size,
        }))
    }

    /// The buffer's base address on the server: tensors' `data` fields are this plus their
    /// offset in the buffer. Not 0, aligned to its device's alignment, and with room for the
    /// buffer's size below 2^64 (for a buffer this client allocated).
    pub fn buffer_base(&mut self, buffer: u64) -> Result<u64, Error> {
        let base = self.ask::<8, _>(&Request::BufferGetBase { buffer }, |b| {
            decode_u64("BUFFER_GET_BASE reply", b)
        })?;
        let (align, size) = match self.limits.buffers.get(&buffer) {
            Some(&(device, size)) => (
                self.limits.alignment.get(&device).copied().unwrap_or(1),
                size,
            ),
            None => (1, 0),
        };
        self.check(
            Command::BufferGetBase,
            "a base address of",
            base,
            base != 0 && base % align == 0 && base.checked_add(size).is_some(),
            || format!("must be non-zero, a multiple of {align} and below 2^64 - {size}"),
        )
    }

    /// Frees a buffer (no reply). The server also forgets its stored graphs, so the next
    /// compute must be a GRAPH_COMPUTE, not a GRAPH_RECOMPUTE.
    pub fn free_buffer(&mut self, buffer: u64) -> Result<(), Error> {
        self.limits.buffers.remove(&buffer);
        self.exchange(&Request::FreeBuffer { buffer }, &mut [])
    }

    /// Sets every byte of a buffer to `value` (no reply).
    pub fn clear_buffer(&mut self, buffer: u64, value: u8) -> Result<(), Error> {
        self.exchange(&Request::BufferClear { buffer, value }, &mut [])
    }

    /// Writes `data` into the tensor at byte `offset` (no reply).
    pub fn set_tensor(
        &mut self,
        tensor: &WireTensor,
        offset: u64,
        data: &[u8],
    ) -> Result<(), Error> {
        let req = Request::SetTensor {
            tensor,
            cache: false,
            offset,
            data,
        };
        self.exchange(&req, &mut [])
    }

    /// Asks the server to fill the tensor at `offset` from its cache with the data whose
    /// FNV-1a hash is `hash`; `false` when it has no such data (or no cache).
    pub fn set_tensor_hash(
        &mut self,
        tensor: &WireTensor,
        offset: u64,
        hash: u64,
    ) -> Result<bool, Error> {
        let req = Request::SetTensorHash {
            tensor,
            offset,
            hash,
        };
        self.ask::<1, _>(&req, |b| decode_bool("SET_TENSOR_HASH reply", b))
    }

    /// Writes weights, as upstream's client does: above [`HASH_THRESHOLD`] bytes it first
    /// asks the server's cache by hash and sends the data only on a miss, asking the server
    /// to cache it; smaller data is simply sent. (Meant for weights, which a reload sends
    /// again; data that changes every step would fill the server's cache directory.)
    pub fn set_weights(
        &mut self,
        tensor: &WireTensor,
        offset: u64,
        data: &[u8],
    ) -> Result<Upload, Error> {
        let cache = data.len() > HASH_THRESHOLD;
        if cache && self.set_tensor_hash(tensor, offset, fnv1a64(data))? {
            return Ok(Upload::FromCache);
        }
        let req = Request::SetTensor {
            tensor,
            cache,
            offset,
            data,
        };
        self.exchange(&req, &mut [])?;
        Ok(Upload::Sent)
    }

    /// Reads `out.len()` bytes of the tensor from byte `offset`.
    pub fn get_tensor(
        &mut self,
        tensor: &WireTensor,
        offset: u64,
        out: &mut [u8],
    ) -> Result<(), Error> {
        let req = Request::GetTensor {
            tensor,
            offset,
            size: out.len() as u64,
        };
        self.exchange(&req, out)
    }

    /// Copies `src` into `dst`, both on this server; `false` when the server's backend could
    /// not copy between their buffers.
    pub fn copy_tensor(&mut self, src: &WireTensor, dst: &WireTensor) -> Result<bool, Error> {
        self.ask::<1, _>(&Request::CopyTensor { src, dst }, |b| {
            decode_bool("COPY_TENSOR reply", b)
        })
    }

    /// Lets the buffer's backend prepare the tensor (e.g. padding of quantized rows) (no
    /// reply).
    pub fn init_tensor(&mut self, tensor: &WireTensor) -> Result<(), Error> {
        self.exchange(&Request::InitTensor { tensor }, &mut [])
    }

    /// The bytes the device's buffer type needs for the tensor, whose sources (at most
    /// [`MAX_SRC`]) the size may depend on.
    pub fn alloc_size(
        &mut self,
        device: u32,
        tensor: &WireTensor,
        srcs: &[WireTensor],
    ) -> Result<u64, Error> {
        if srcs.len() > MAX_SRC {
            return Err(self.invalid(
                Command::GetAllocSize,
                format!("{} sources, at most {MAX_SRC}", srcs.len()),
            ));
        }
        let mut all = [WireTensor::default(); MAX_SRC];
        all[..srcs.len()].copy_from_slice(srcs);
        let req = Request::GetAllocSize {
            device,
            tensor,
            srcs: &all,
        };
        let size = self.ask::<8, _>(&req, |b| decode_u64("GET_ALLOC_SIZE reply", b))?;
        let max = self
            .limits
            .max_size
            .get(&device)
            .copied()
            .unwrap_or(MAX_BYTES);
        let max = max.min(MAX_BYTES);
        self.check(
            Command::GetAllocSize,
            "an allocation size of",
            size,
            size <= max,
            || format!("must be at most {max} (the device's largest buffer)"),
        )
    }

    /// Sets `size` bytes of the tensor from byte `offset` to `value` (no reply).
    pub fn memset_tensor(
        &mut self,
        tensor: &WireTensor,
        offset: u64,
        size: u64,
        value: u8,
    ) -> Result<(), Error> {
        let req = Request::MemsetTensor {
            tensor,
            offset,
            size,
            value,
        };
        self.exchange(&req, &mut [])
    }

    /// The device's free and total memory: free at most total, total at most [`MAX_BYTES`].
    pub fn device_memory(&mut self, device: u32) -> Result<DeviceMemory, Error> {
        let m = self.ask::<{ DeviceMemory::SIZE }, _>(
            &Request::GetDeviceMemory { device },
            DeviceMemory::decode,
        )?;
        self.check(
            Command::GetDeviceMemory,
            "a total memory of",
            m.total,
            m.total <= MAX_BYTES,
            || format!("must be at most {MAX_BYTES}"),
        )?;
        self.check(
            Command::GetDeviceMemory,
            "a free memory of",
            m.free,
            m.free <= m.total,
            || format!("must be at most the total, {}", m.total),
        )?;
        Ok(m)
    }

    /// Computes a graph on the device (no reply): `nodes` in execution order, `tensors`
    /// every tensor they reach (see [`GraphMsg`]). The graph is checked before anything is
    /// sent. The server keeps it for [`Client::graph_recompute`]. Its completion shows at the
    /// next reply; a failed compute ends the server process (upstream asserts success), which
    /// the next reply reports as [`Cause::Closed`].
    pub fn graph_compute(
        &mut self,
        device: u32,
        nodes: &[u64],
        tensors: &[WireTensor],
    ) -> Result<(), Error> {
        let graph = GraphMsg::payload(device, nodes, tensors)
            .map_err(|e| self.invalid(Command::GraphCompute, e.to_string()))?;
        self.send_graph(&graph)
    }

    /// [`Client::graph_compute`] with the payload made beforehand ([`GraphMsg::payload`]).
    pub fn send_graph(&mut self, graph: &GraphPayload) -> Result<(), Error> {
        self.exchange(
            &Request::GraphCompute {
                graph: graph.bytes(),
            },
            &mut [],
        )
    }

    /// Computes the device's last graph again (no reply), e.g. after new inputs were set.
    /// The server rejects it (closing the connection) when it has no stored graph for the
    /// device, as after [`Client::free_buffer`].
    pub fn graph_recompute(&mut self, device: u32) -> Result<(), Error> {
        self.exchange(&Request::GraphRecompute { device }, &mut [])
    }

    /// Returns once the server has done every command sent before: a DEVICE_COUNT round
    /// trip, which has no effect, bounded like any reply after the pending computes.
    pub fn synchronize(&mut self) -> Result<(), Error> {
        self.device_count().map(|_| ())
    }
}
