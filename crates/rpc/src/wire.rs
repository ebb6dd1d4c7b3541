//! The bytes of ggml-rpc protocol 7.0.x, the protocol of ggml 0.26.0's `rpc-server`: its
//! commands, the packed tensor, and every message this client sends or reads.
//!
//! Everything is little-endian and packed (no padding). A request is one command byte, the
//! payload's size as a `u64`, then the payload; a reply, for the commands that have one, is
//! the payload's size as a `u64`, then the payload. Encoders here produce exactly the sizes
//! upstream's packed structs have; decoders take a slice and refuse any other size, so a bad
//! reply is an error value, never a panic or a short read.

use std::fmt;

/// The protocol version this client speaks.
pub const PROTOCOL: Version = Version {
    major: 7,
    minor: 0,
    patch: 0,
};

/// Size of the connection capabilities in HELLO. All zero: plain TCP, no RDMA upgrade.
pub const CONN_CAPS_SIZE: usize = 24;
/// Dimensions of a tensor (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Sources of a tensor (`GGML_MAX_SRC`).
pub const MAX_SRC: usize = 10;
/// `int32` words of a tensor's op parameters (`GGML_MAX_OP_PARAMS` bytes / 4).
pub const OP_PARAMS: usize = 16;
/// Bytes of a tensor's name, its terminating NUL included (`GGML_MAX_NAME`).
pub const NAME_SIZE: usize = 64;
/// Size of a serialized tensor on the wire.
pub const WIRE_TENSOR_SIZE: usize = 296;
/// Above this many bytes of weights, a client asks the server's cache (SET_TENSOR_HASH)
/// before it sends the data.
pub const HASH_THRESHOLD: usize = 10 * 1024 * 1024;
/// Size of a request's header: the command byte and the payload size.
pub const REQUEST_HEADER_SIZE: usize = 9;
/// Size of a reply's header: the payload size.
pub const REPLY_HEADER_SIZE: usize = 8;

/// A protocol version as HELLO reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub patch: u8,
}

impl Version {
    /// Whether this client can talk to a server of version `self`: the same major version, no
    /// newer minor one, and the same patch level. The messages do not change with the patch
    /// level, but upstream raises it whenever ggml's op list changes (ggml-rpc.h asserts
    /// `GGML_OP_COUNT` next to it): a server of another patch level reads every op value from
    /// the first changed one on as another op, so it is refused, not warned about.
    // The rule holds whatever our minor version is; with 0 today, `<=` is `==` to clippy.
    #[allow(clippy::absurd_extreme_comparisons)]
    pub fn is_supported(self) -> bool {
        self.messages_supported() && self.patch == PROTOCOL.patch
    }

    /// Whether this client reads and writes the messages of a server of version `self` (the
    /// same major version, no newer minor one), whatever its patch level.
    #[allow(clippy::absurd_extreme_comparisons)]
    pub fn messages_supported(self) -> bool {
        self.major == PROTOCOL.major && self.minor <= PROTOCOL.minor
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The commands of protocol 7, with their command bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Command {
    AllocBuffer = 0,
    GetAlignment = 1,
    GetMaxSize = 2,
    BufferGetBase = 3,
    FreeBuffer = 4,
    BufferClear = 5,
    SetTensor = 6,
    SetTensorHash = 7,
    GetTensor = 8,
    CopyTensor = 9,
    GraphCompute = 10,
    GetDeviceMemory = 11,
    InitTensor = 12,
    GetAllocSize = 13,
    Hello = 14,
    DeviceCount = 15,
    GraphRecompute = 16,
    MemsetTensor = 17,
}

impl Command {
    /// Every command, in command-byte order.
    pub const ALL: [Command; 18] = [
        Command::AllocBuffer,
        Command::GetAlignment,
        Command::GetMaxSize,
        Command::BufferGetBase,
        Command::FreeBuffer,
        Command::BufferClear,
        Command::SetTensor,
        Command::SetTensorHash,
        Command::GetTensor,
        Command::CopyTensor,
        Command::GraphCompute,
        Command::GetDeviceMemory,
        Command::InitTensor,
        Command::GetAllocSize,
        Command::Hello,
        Command::DeviceCount,
        Command::GraphRecompute,
        Command::MemsetTensor,
    ];

    /// The command byte.
    #[inline]
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The command of a command byte, if there is one.
    pub fn from_code(code: u8) -> Option<Command> {
        Command::ALL.get(usize::from(code)).copied()
    }

    /// The name upstream gives the command, without its `RPC_CMD_` prefix.
    pub const fn name(self) -> &'static str {
        match self {
            Command::AllocBuffer => "ALLOC_BUFFER",
            Command::GetAlignment => "GET_ALIGNMENT",
            Command::GetMaxSize => "GET_MAX_SIZE",
            Command::BufferGetBase => "BUFFER_GET_BASE",
            Command::FreeBuffer => "FREE_BUFFER",
            Command::BufferClear => "BUFFER_CLEAR",
            Command::SetTensor => "SET_TENSOR",
            Command::SetTensorHash => "SET_TENSOR_HASH",
            Command::GetTensor => "GET_TENSOR",
            Command::CopyTensor => "COPY_TENSOR",
            Command::GraphCompute => "GRAPH_COMPUTE",
            Command::GetDeviceMemory => "GET_DEVICE_MEMORY",
            Command::InitTensor => "INIT_TENSOR",
            Command::GetAllocSize => "GET_ALLOC_SIZE",
            Command::Hello => "HELLO",
            Command::DeviceCount => "DEVICE_COUNT",
            Command::GraphRecompute => "GRAPH_RECOMPUTE",
            Command::MemsetTensor => "MEMSET_TENSOR",
        }
    }

    /// Whether the server answers the command. The others are fire-and-forget: the server
    /// reports nothing, and when it rejects one it closes the connection, which the client
    /// only sees at its next command that waits for a reply.
    pub const fn has_reply(self) -> bool {
        !matches!(
            self,
            Command::FreeBuffer
                | Command::BufferClear
                | Command::SetTensor
                | Command::InitTensor
                | Command::GraphCompute
                | Command::GraphRecompute
                | Command::MemsetTensor
        )
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A message of the wrong size or content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// `what` has `got` bytes where the protocol has `expected`.
    Size {
        what: &'static str,
        expected: usize,
        got: usize,
    },
    /// A graph message that does not hold together.
    Graph(GraphError),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Size {
                what,
                expected,
                got,
            } => write!(f, "{what}: {got} bytes, expected {expected}"),
            WireError::Graph(e) => write!(f, "graph: {e}"),
        }
    }
}

impl std::error::Error for WireError {}

/// The bytes of `what` as an array of exactly `N`, or the size error.
fn exact<const N: usize>(what: &'static str, bytes: &[u8]) -> Result<[u8; N], WireError> {
    bytes.try_into().map_err(|_| WireError::Size {
        what,
        expected: N,
        got: bytes.len(),
    })
}

/// Reads little-endian fields off the front of a slice whose length the caller has checked.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        let mut out = [0u8; N];
        out.copy_from_slice(head);
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }
    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
}

/// A tensor as the protocol carries it (upstream's packed `rpc_tensor`, 296 bytes).
///
/// Ids are the client's names for tensors (upstream sends its tensor addresses); the server
/// only matches them within one graph message, and 0 means "none" for `src` and `view_src`.
/// `buffer` is a handle ALLOC_BUFFER returned (0: not in a buffer of this server) and `data`
/// the tensor's absolute address on the server, the buffer's base (BUFFER_GET_BASE) plus the
/// tensor's offset. `ty` and `op` are ggml's `enum ggml_type` and `enum ggml_op` values of the
/// server's ggml version. `ne` and `nb` are 32 bits wide on the wire: whoever fills them must
/// make sure a tensor's sizes and strides fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WireTensor {
    pub id: u64,
    pub ty: u32,
    pub buffer: u64,
    pub ne: [u32; MAX_DIMS],
    pub nb: [u32; MAX_DIMS],
    pub op: u32,
    pub op_params: [i32; OP_PARAMS],
    pub flags: i32,
    pub src: [u64; MAX_SRC],
    pub view_src: u64,
    pub view_offs: u64,
    pub data: u64,
    /// NUL-terminated, NUL-padded.
    pub name: [u8; NAME_SIZE],
    /// How many nodes of the graph use this tensor (GRAPH_COMPUTE; 0 elsewhere). The server
    /// hands it to the backend, whose op fusion relies on it.
    pub use_count: i32,
}

impl Default for WireTensor {
    /// All zero: also the "no tensor" of GET_ALLOC_SIZE's source slots.
    fn default() -> Self {
        WireTensor {
            id: 0,
            ty: 0,
            buffer: 0,
            ne: [0; MAX_DIMS],
            nb: [0; MAX_DIMS],
            op: 0,
            op_params: [0; OP_PARAMS],
            flags: 0,
            src: [0; MAX_SRC],
            view_src: 0,
            view_offs: 0,
            data: 0,
            name: [0; NAME_SIZE],
            use_count: 0,
        }
    }
}

impl WireTensor {
    /// The name's bytes, up to its first NUL.
    pub fn name(&self) -> &[u8] {
        let end = self.name.iter().position(|&b| b == 0).unwrap_or(NAME_SIZE);
        &self.name[..end]
    }

    /// Sets the name, cut to the longest whole-character prefix of at most 63 bytes (the wire
    /// keeps a terminating NUL, as ggml does).
    /// The name from bytes, as ggml's C strings are: up to the first NUL, at most 63 bytes.
    pub fn set_name_bytes(&mut self, name: &[u8]) {
        let name = name.split(|&b| b == 0).next().unwrap_or_default();
        let end = name.len().min(NAME_SIZE - 1);
        self.name = [0; NAME_SIZE];
        self.name[..end].copy_from_slice(&name[..end]);
    }

    pub fn set_name(&mut self, name: &str) {
        let mut end = name.len().min(NAME_SIZE - 1);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        self.name = [0; NAME_SIZE];
        self.name[..end].copy_from_slice(&name.as_bytes()[..end]);
    }

    /// Appends the tensor's 296 bytes.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(WIRE_TENSOR_SIZE);
        out.extend_from_slice(&self.id.to_le_bytes());
        out.extend_from_slice(&self.ty.to_le_bytes());
        out.extend_from_slice(&self.buffer.to_le_bytes());
        for v in self.ne.iter().chain(&self.nb) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        for p in &self.op_params {
            out.extend_from_slice(&p.to_le_bytes());
        }
        out.extend_from_slice(&self.flags.to_le_bytes());
        for s in &self.src {
            out.extend_from_slice(&s.to_le_bytes());
        }
        out.extend_from_slice(&self.view_src.to_le_bytes());
        out.extend_from_slice(&self.view_offs.to_le_bytes());
        out.extend_from_slice(&self.data.to_le_bytes());
        out.extend_from_slice(&self.name);
        out.extend_from_slice(&self.use_count.to_le_bytes());
    }

    /// The tensor's 296 bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(WIRE_TENSOR_SIZE);
        self.encode_into(&mut out);
        out
    }

    /// A tensor from exactly 296 bytes.
    pub fn decode(bytes: &[u8]) -> Result<WireTensor, WireError> {
        let bytes: [u8; WIRE_TENSOR_SIZE] = exact("tensor", bytes)?;
        let mut f = Fields(&bytes);
        let mut t = WireTensor {
            id: f.u64(),
            ty: f.u32(),
            buffer: f.u64(),
            ..WireTensor::default()
        };
        for v in t.ne.iter_mut().chain(t.nb.iter_mut()) {
            *v = f.u32();
        }
        t.op = f.u32();
        for p in &mut t.op_params {
            *p = f.i32();
        }
        t.flags = f.i32();
        for s in &mut t.src {
            *s = f.u64();
        }
        t.view_src = f.u64();
        t.view_offs = f.u64();
        t.data = f.u64();
        t.name = f.take();
        t.use_count = f.i32();
        Ok(t)
    }
}

/// FNV-1a, 64 bits: the hash by which SET_TENSOR_HASH names data the server may have cached.
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A graph that GRAPH_COMPUTE cannot carry, found before anything is sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphError {
    /// No nodes (the server has nothing to compute).
    Empty,
    /// More nodes or tensors than the 32-bit counts hold.
    TooLarge { nodes: usize, tensors: usize },
    /// A tensor or node with id 0, which the protocol reserves for "none".
    ZeroId,
    /// Two tensors with the same id.
    DuplicateTensor(u64),
    /// A node listed twice.
    DuplicateNode(u64),
    /// A node id with no tensor in the message.
    UnknownNode(u64),
    /// A source or view source id with no tensor in the message.
    UnknownSource { tensor: u64, source: u64 },
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::Empty => write!(f, "a graph without nodes"),
            GraphError::TooLarge { nodes, tensors } => {
                write!(
                    f,
                    "{nodes} nodes and {tensors} tensors exceed the 32-bit counts"
                )
            }
            GraphError::ZeroId => write!(f, "a tensor or node with id 0 (reserved for none)"),
            GraphError::DuplicateTensor(id) => write!(f, "two tensors with id {id}"),
            GraphError::DuplicateNode(id) => write!(f, "node {id} listed twice"),
            GraphError::UnknownNode(id) => write!(f, "node {id} is not among the tensors"),
            GraphError::UnknownSource { tensor, source } => {
                write!(
                    f,
                    "tensor {tensor} uses {source}, which is not among the tensors"
                )
            }
        }
    }
}

impl std::error::Error for GraphError {}

/// A GRAPH_COMPUTE payload that passed [`GraphMsg::check`]: made once by [`GraphMsg::payload`]
/// (e.g. on the thread that has the graph) and sent as it is by [`Client::send_graph`].
///
/// [`Client::send_graph`]: super::Client::send_graph
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphPayload(Vec<u8>);

impl GraphPayload {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The payload of GRAPH_COMPUTE, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GraphMsg {
    pub device: u32,
    /// Node ids in execution order.
    pub nodes: Vec<u64>,
    /// Every tensor the nodes reach through their sources and view sources, nodes included.
    pub tensors: Vec<WireTensor>,
}

impl GraphMsg {
    /// Checks that the message holds together, as the server needs it to: nodes present and
    /// distinct, tensor ids distinct and non-zero, every source and view source present.
    pub fn check(nodes: &[u64], tensors: &[WireTensor]) -> Result<(), GraphError> {
        if nodes.is_empty() {
            return Err(GraphError::Empty);
        }
        if u32::try_from(nodes.len()).is_err() || u32::try_from(tensors.len()).is_err() {
            return Err(GraphError::TooLarge {
                nodes: nodes.len(),
                tensors: tensors.len(),
            });
        }
        // Sorted ids answer membership by binary search: no hashing, whose cost per id is more
        // than the rest of a graph's encoding.
        let mut ids: Vec<u64> = tensors.iter().map(|t| t.id).collect();
        ids.sort_unstable();
        if ids.first() == Some(&0) {
            return Err(GraphError::ZeroId);
        }
        if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(GraphError::DuplicateTensor(w[0]));
        }
        let known = |id: &u64| ids.binary_search(id).is_ok();
        for t in tensors {
            for &s in t.src.iter().chain(std::iter::once(&t.view_src)) {
                if s != 0 && !known(&s) {
                    return Err(GraphError::UnknownSource {
                        tensor: t.id,
                        source: s,
                    });
                }
            }
        }
        let mut sorted_nodes = nodes.to_vec();
        sorted_nodes.sort_unstable();
        for &n in nodes {
            if n == 0 {
                return Err(GraphError::ZeroId);
            }
            if !known(&n) {
                return Err(GraphError::UnknownNode(n));
            }
        }
        if let Some(w) = sorted_nodes.windows(2).find(|w| w[0] == w[1]) {
            return Err(GraphError::DuplicateNode(w[0]));
        }
        Ok(())
    }

    /// The payload: device (u32), node count (u32), node ids (u64 each), tensor count (u32),
    /// tensors (296 bytes each). Checked first ([`GraphMsg::check`]).
    pub fn encode(
        device: u32,
        nodes: &[u64],
        tensors: &[WireTensor],
    ) -> Result<Vec<u8>, GraphError> {
        GraphMsg::check(nodes, tensors)?;
        let mut out = Vec::with_capacity(12 + nodes.len() * 8 + tensors.len() * WIRE_TENSOR_SIZE);
        out.extend_from_slice(&device.to_le_bytes());
        // Both counts fit: `check` refused more.
        out.extend_from_slice(&(nodes.len() as u32).to_le_bytes());
        for n in nodes {
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(tensors.len() as u32).to_le_bytes());
        for t in tensors {
            t.encode_into(&mut out);
        }
        Ok(out)
    }

    /// [`GraphMsg::encode`], kept as a payload known to be checked.
    pub fn payload(
        device: u32,
        nodes: &[u64],
        tensors: &[WireTensor],
    ) -> Result<GraphPayload, GraphError> {
        GraphMsg::encode(device, nodes, tensors).map(GraphPayload)
    }

    /// A payload decoded: its counts must account for every byte, and it must pass
    /// [`GraphMsg::check`].
    pub fn decode(bytes: &[u8]) -> Result<GraphMsg, WireError> {
        let size_error = |expected| WireError::Size {
            what: "GRAPH_COMPUTE payload",
            expected,
            got: bytes.len(),
        };
        if bytes.len() < 8 {
            return Err(size_error(8));
        }
        let mut f = Fields(bytes);
        let device = f.u32();
        let n_nodes = f.u32() as usize;
        let nodes_end = n_nodes
            .checked_mul(8)
            .and_then(|n| n.checked_add(12))
            .ok_or(size_error(usize::MAX))?;
        if bytes.len() < nodes_end {
            return Err(size_error(nodes_end));
        }
        let nodes: Vec<u64> = (0..n_nodes).map(|_| f.u64()).collect();
        let n_tensors = f.u32() as usize;
        let expected = n_tensors
            .checked_mul(WIRE_TENSOR_SIZE)
            .and_then(|n| n.checked_add(nodes_end))
            .ok_or(size_error(usize::MAX))?;
        if bytes.len() != expected {
            return Err(size_error(expected));
        }
        let tensors = bytes[nodes_end..]
            .chunks_exact(WIRE_TENSOR_SIZE)
            .map(WireTensor::decode)
            .collect::<Result<Vec<_>, _>>()?;
        GraphMsg::check(&nodes, &tensors).map_err(WireError::Graph)?;
        Ok(GraphMsg {
            device,
            nodes,
            tensors,
        })
    }
}

/// One request: the command and its fields. Bulk data (SET_TENSOR's bytes, GRAPH_COMPUTE's
/// encoded graph) is borrowed, so that sending it copies nothing.
#[derive(Clone, Copy, Debug)]
pub enum Request<'a> {
    /// Offers connection capabilities (ours are all zero: plain TCP).
    Hello,
    DeviceCount,
    AllocBuffer {
        device: u32,
        size: u64,
    },
    GetAlignment {
        device: u32,
    },
    GetMaxSize {
        device: u32,
    },
    BufferGetBase {
        buffer: u64,
    },
    FreeBuffer {
        buffer: u64,
    },
    BufferClear {
        buffer: u64,
        value: u8,
    },
    /// `cache`: asks a server with a cache directory to keep the data under its hash.
    SetTensor {
        tensor: &'a WireTensor,
        cache: bool,
        offset: u64,
        data: &'a [u8],
    },
    SetTensorHash {
        tensor: &'a WireTensor,
        offset: u64,
        hash: u64,
    },
    GetTensor {
        tensor: &'a WireTensor,
        offset: u64,
        size: u64,
    },
    CopyTensor {
        src: &'a WireTensor,
        dst: &'a WireTensor,
    },
    /// `graph`: a payload from [`GraphMsg::encode`].
    GraphCompute {
        graph: &'a [u8],
    },
    GraphRecompute {
        device: u32,
    },
    GetDeviceMemory {
        device: u32,
    },
    InitTensor {
        tensor: &'a WireTensor,
    },
    /// `srcs`: the tensor's sources, all-zero tensors where it has none.
    GetAllocSize {
        device: u32,
        tensor: &'a WireTensor,
        srcs: &'a [WireTensor; MAX_SRC],
    },
    MemsetTensor {
        tensor: &'a WireTensor,
        offset: u64,
        size: u64,
        value: u8,
    },
}

impl Request<'_> {
    /// The request's command.
    pub fn command(&self) -> Command {
        match self {
            Request::Hello => Command::Hello,
            Request::DeviceCount => Command::DeviceCount,
            Request::AllocBuffer { .. } => Command::AllocBuffer,
            Request::GetAlignment { .. } => Command::GetAlignment,
            Request::GetMaxSize { .. } => Command::GetMaxSize,
            Request::BufferGetBase { .. } => Command::BufferGetBase,
            Request::FreeBuffer { .. } => Command::FreeBuffer,
            Request::BufferClear { .. } => Command::BufferClear,
            Request::SetTensor { .. } => Command::SetTensor,
            Request::SetTensorHash { .. } => Command::SetTensorHash,
            Request::GetTensor { .. } => Command::GetTensor,
            Request::CopyTensor { .. } => Command::CopyTensor,
            Request::GraphCompute { .. } => Command::GraphCompute,
            Request::GraphRecompute { .. } => Command::GraphRecompute,
            Request::GetDeviceMemory { .. } => Command::GetDeviceMemory,
            Request::InitTensor { .. } => Command::InitTensor,
            Request::GetAllocSize { .. } => Command::GetAllocSize,
            Request::MemsetTensor { .. } => Command::MemsetTensor,
        }
    }

    /// The bulk bytes that follow [`Request::head`] on the wire (empty for most requests).
    pub fn bulk(&self) -> &[u8] {
        match self {
            Request::SetTensor { data, .. } => data,
            Request::GraphCompute { graph } => graph,
            _ => &[],
        }
    }

    /// The request's header and its payload up to the bulk bytes.
    pub fn head(&self) -> Vec<u8> {
        let mut p = Vec::with_capacity(REQUEST_HEADER_SIZE + 2 * WIRE_TENSOR_SIZE);
        p.push(self.command().code());
        p.extend_from_slice(&[0; 8]); // the payload size, written below
        match *self {
            Request::Hello => p.extend_from_slice(&[0; CONN_CAPS_SIZE]),
            Request::DeviceCount | Request::GraphCompute { .. } => {}
            Request::AllocBuffer { device, size } => {
                p.extend_from_slice(&device.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
            }
            Request::GetAlignment { device }
            | Request::GetMaxSize { device }
            | Request::GraphRecompute { device }
            | Request::GetDeviceMemory { device } => p.extend_from_slice(&device.to_le_bytes()),
            Request::BufferGetBase { buffer } | Request::FreeBuffer { buffer } => {
                p.extend_from_slice(&buffer.to_le_bytes())
            }
            Request::BufferClear { buffer, value } => {
                p.extend_from_slice(&buffer.to_le_bytes());
                p.push(value);
            }
            Request::SetTensor {
                tensor,
                cache,
                offset,
                ..
            } => {
                tensor.encode_into(&mut p);
                p.push(u8::from(cache));
                p.extend_from_slice(&offset.to_le_bytes());
            }
            Request::SetTensorHash {
                tensor,
                offset,
                hash,
            } => {
                tensor.encode_into(&mut p);
                p.extend_from_slice(&offset.to_le_bytes());
                p.extend_from_slice(&hash.to_le_bytes());
            }
            Request::GetTensor {
                tensor,
                offset,
                size,
            } => {
                tensor.encode_into(&mut p);
                p.extend_from_slice(&offset.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
            }
            Request::CopyTensor { src, dst } => {
                src.encode_into(&mut p);
                dst.encode_into(&mut p);
            }
            Request::InitTensor { tensor } => tensor.encode_into(&mut p),
            Request::GetAllocSize {
                device,
                tensor,
                srcs,
            } => {
                p.extend_from_slice(&device.to_le_bytes());
                tensor.encode_into(&mut p);
                for s in srcs {
                    s.encode_into(&mut p);
                }
            }
            Request::MemsetTensor {
                tensor,
                offset,
                size,
                value,
            } => {
                tensor.encode_into(&mut p);
                p.extend_from_slice(&offset.to_le_bytes());
                p.extend_from_slice(&size.to_le_bytes());
                p.push(value);
            }
        }
        let payload = (p.len() - REQUEST_HEADER_SIZE + self.bulk().len()) as u64;
        p[1..REQUEST_HEADER_SIZE].copy_from_slice(&payload.to_le_bytes());
        p
    }

    /// The whole request as one buffer (head and bulk).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.head();
        out.extend_from_slice(self.bulk());
        out
    }

    /// The size of the reply's payload, or `None` for a command without reply.
    pub fn reply_size(&self) -> Option<u64> {
        let size = match self {
            Request::Hello => HelloReply::SIZE as u64,
            Request::DeviceCount => 4,
            Request::AllocBuffer { .. } | Request::GetDeviceMemory { .. } => 16,
            Request::GetAlignment { .. }
            | Request::GetMaxSize { .. }
            | Request::BufferGetBase { .. }
            | Request::GetAllocSize { .. } => 8,
            Request::SetTensorHash { .. } | Request::CopyTensor { .. } => 1,
            Request::GetTensor { size, .. } => *size,
            Request::FreeBuffer { .. }
            | Request::BufferClear { .. }
            | Request::SetTensor { .. }
            | Request::GraphCompute { .. }
            | Request::GraphRecompute { .. }
            | Request::InitTensor { .. }
            | Request::MemsetTensor { .. } => return None,
        };
        Some(size)
    }
}

/// HELLO's reply: the server's protocol version and its connection capabilities.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloReply {
    pub version: Version,
    pub conn_caps: [u8; CONN_CAPS_SIZE],
}

impl HelloReply {
    /// Size on the wire: major, minor, patch, one byte of padding, the capabilities.
    pub const SIZE: usize = 4 + CONN_CAPS_SIZE;

    pub fn decode(bytes: &[u8]) -> Result<HelloReply, WireError> {
        let bytes: [u8; Self::SIZE] = exact("HELLO reply", bytes)?;
        let mut f = Fields(&bytes);
        let version = Version {
            major: f.u8(),
            minor: f.u8(),
            patch: f.u8(),
        };
        f.u8();
        Ok(HelloReply {
            version,
            conn_caps: f.take(),
        })
    }

    pub fn encode(&self) -> [u8; Self::SIZE] {
        let mut out = [0u8; Self::SIZE];
        out[0] = self.version.major;
        out[1] = self.version.minor;
        out[2] = self.version.patch;
        out[4..].copy_from_slice(&self.conn_caps);
        out
    }
}

/// ALLOC_BUFFER's reply: the buffer's handle and size, or handle 0 when the server could not
/// allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocBufferReply {
    pub remote_ptr: u64,
    pub remote_size: u64,
}

impl AllocBufferReply {
    pub const SIZE: usize = 16;

    pub fn decode(bytes: &[u8]) -> Result<AllocBufferReply, WireError> {
        let bytes: [u8; Self::SIZE] = exact("ALLOC_BUFFER reply", bytes)?;
        let mut f = Fields(&bytes);
        Ok(AllocBufferReply {
            remote_ptr: f.u64(),
            remote_size: f.u64(),
        })
    }
}

/// GET_DEVICE_MEMORY's reply, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceMemory {
    pub free: u64,
    pub total: u64,
}

impl DeviceMemory {
    pub const SIZE: usize = 16;

    pub fn decode(bytes: &[u8]) -> Result<DeviceMemory, WireError> {
        let bytes: [u8; Self::SIZE] = exact("GET_DEVICE_MEMORY reply", bytes)?;
        let mut f = Fields(&bytes);
        Ok(DeviceMemory {
            free: f.u64(),
            total: f.u64(),
        })
    }
}

/// A `u32` reply (DEVICE_COUNT).
pub fn decode_u32(what: &'static str, bytes: &[u8]) -> Result<u32, WireError> {
    exact(what, bytes).map(u32::from_le_bytes)
}

/// A `u64` reply (GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, GET_ALLOC_SIZE).
pub fn decode_u64(what: &'static str, bytes: &[u8]) -> Result<u64, WireError> {
    exact(what, bytes).map(u64::from_le_bytes)
}

/// A one-byte result (SET_TENSOR_HASH, COPY_TENSOR): any non-zero byte is success.
pub fn decode_bool(what: &'static str, bytes: &[u8]) -> Result<bool, WireError> {
    exact::<1>(what, bytes).map(|b| b[0] != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tensor whose every field holds a distinct value.
    fn sample() -> WireTensor {
        let mut t = WireTensor {
            id: 0x1111_2222_3333_4444,
            ty: 0x0102_0304,
            buffer: 0x5555_6666_7777_8888,
            ne: [1, 2, 3, 4],
            nb: [5, 6, 7, 8],
            op: 0x0a0b_0c0d,
            flags: -2,
            view_src: 0x99,
            view_offs: 0xaa,
            data: 0xbb,
            use_count: 3,
            ..WireTensor::default()
        };
        for (i, p) in t.op_params.iter_mut().enumerate() {
            *p = -(i as i32) - 1;
        }
        for (i, s) in t.src.iter_mut().enumerate() {
            *s = 0x100 + i as u64;
        }
        t.set_name("node_7");
        t
    }

    fn u32_at(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
    }
    fn u64_at(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn tensor_fields_sit_at_the_packed_offsets() {
        let t = sample();
        let b = t.encode();
        assert_eq!(b.len(), WIRE_TENSOR_SIZE);
        assert_eq!(WIRE_TENSOR_SIZE % 8, 0);
        assert_eq!(u64_at(&b, 0), t.id);
        assert_eq!(u32_at(&b, 8), t.ty);
        assert_eq!(u64_at(&b, 12), t.buffer);
        for i in 0..MAX_DIMS {
            assert_eq!(u32_at(&b, 20 + 4 * i), t.ne[i]);
            assert_eq!(u32_at(&b, 36 + 4 * i), t.nb[i]);
        }
        assert_eq!(u32_at(&b, 52), t.op);
        for i in 0..OP_PARAMS {
            assert_eq!(u32_at(&b, 56 + 4 * i) as i32, t.op_params[i]);
        }
        assert_eq!(u32_at(&b, 120) as i32, t.flags);
        for i in 0..MAX_SRC {
            assert_eq!(u64_at(&b, 124 + 8 * i), t.src[i]);
        }
        assert_eq!(u64_at(&b, 204), t.view_src);
        assert_eq!(u64_at(&b, 212), t.view_offs);
        assert_eq!(u64_at(&b, 220), t.data);
        assert_eq!(&b[228..234], b"node_7");
        assert!(b[234..292].iter().all(|&c| c == 0));
        assert_eq!(u32_at(&b, 292) as i32, t.use_count);
    }

    #[test]
    fn tensor_round_trips_and_refuses_other_sizes() {
        let t = sample();
        assert_eq!(WireTensor::decode(&t.encode()), Ok(t));
        let b = t.encode();
        assert_eq!(
            WireTensor::decode(&b[..295]),
            Err(WireError::Size {
                what: "tensor",
                expected: 296,
                got: 295
            })
        );
        let mut longer = b.clone();
        longer.push(0);
        assert!(WireTensor::decode(&longer).is_err());
        assert!(WireTensor::decode(&[]).is_err());
    }

    #[test]
    fn names_keep_a_nul_and_whole_characters() {
        let mut t = WireTensor::default();
        t.set_name(&"x".repeat(100));
        assert_eq!(t.name().len(), 63);
        assert_eq!(t.name[63], 0);
        // 31 two-byte characters fill 62 bytes; the 32nd would end at byte 64.
        t.set_name(&"é".repeat(40));
        assert_eq!(t.name(), "é".repeat(31).as_bytes());
        t.set_name("short");
        assert_eq!(t.name(), b"short");
        assert!(t.name[5..].iter().all(|&c| c == 0));
    }

    #[test]
    fn command_bytes_follow_upstreams_enum() {
        for (i, c) in Command::ALL.iter().enumerate() {
            assert_eq!(usize::from(c.code()), i);
            assert_eq!(Command::from_code(i as u8), Some(*c));
        }
        assert_eq!(Command::Hello.code(), 14);
        assert_eq!(Command::GraphCompute.code(), 10);
        assert_eq!(Command::MemsetTensor.code(), 17);
        // 18 is upstream's client-internal RPC_CMD_NONE, never sent.
        assert_eq!(Command::from_code(18), None);
        let no_reply: Vec<_> = Command::ALL.iter().filter(|c| !c.has_reply()).collect();
        assert_eq!(
            no_reply,
            [
                &Command::FreeBuffer,
                &Command::BufferClear,
                &Command::SetTensor,
                &Command::GraphCompute,
                &Command::InitTensor,
                &Command::GraphRecompute,
                &Command::MemsetTensor
            ]
        );
    }

    /// Every request's frame: command byte, payload size, and a payload of the size of
    /// upstream's packed request struct; the reply size the command has.
    #[test]
    fn request_sizes_match_the_packed_structs() {
        let t = sample();
        let srcs = [WireTensor::default(); MAX_SRC];
        let data = [7u8; 5];
        let graph = GraphMsg::encode(
            0,
            &[t.id],
            &[WireTensor {
                src: [0; MAX_SRC],
                view_src: 0,
                ..t
            }],
        )
        .unwrap();
        let cases: Vec<(Request, usize, Option<u64>)> = vec![
            (Request::Hello, 24, Some(28)),
            (Request::DeviceCount, 0, Some(4)),
            (Request::AllocBuffer { device: 1, size: 2 }, 12, Some(16)),
            (Request::GetAlignment { device: 1 }, 4, Some(8)),
            (Request::GetMaxSize { device: 1 }, 4, Some(8)),
            (Request::BufferGetBase { buffer: 1 }, 8, Some(8)),
            (Request::FreeBuffer { buffer: 1 }, 8, None),
            (
                Request::BufferClear {
                    buffer: 1,
                    value: 2,
                },
                9,
                None,
            ),
            (
                Request::SetTensor {
                    tensor: &t,
                    cache: true,
                    offset: 3,
                    data: &data,
                },
                296 + 1 + 8 + 5,
                None,
            ),
            (
                Request::SetTensorHash {
                    tensor: &t,
                    offset: 1,
                    hash: 2,
                },
                312,
                Some(1),
            ),
            (
                Request::GetTensor {
                    tensor: &t,
                    offset: 1,
                    size: 40,
                },
                312,
                Some(40),
            ),
            (Request::CopyTensor { src: &t, dst: &t }, 592, Some(1)),
            (
                Request::GraphCompute { graph: &graph },
                4 + 4 + 8 + 4 + 296,
                None,
            ),
            (Request::GraphRecompute { device: 1 }, 4, None),
            (Request::GetDeviceMemory { device: 1 }, 4, Some(16)),
            (Request::InitTensor { tensor: &t }, 296, None),
            (
                Request::GetAllocSize {
                    device: 1,
                    tensor: &t,
                    srcs: &srcs,
                },
                4 + 296 * 11,
                Some(8),
            ),
            (
                Request::MemsetTensor {
                    tensor: &t,
                    offset: 1,
                    size: 2,
                    value: 3,
                },
                313,
                None,
            ),
        ];
        assert_eq!(cases.len(), Command::ALL.len());
        for (req, payload, reply) in cases {
            let frame = req.encode();
            let c = req.command();
            assert_eq!(frame[0], c.code(), "{c}");
            assert_eq!(u64_at(&frame, 1), payload as u64, "{c}");
            assert_eq!(frame.len(), REQUEST_HEADER_SIZE + payload, "{c}");
            assert_eq!(req.head().len() + req.bulk().len(), frame.len(), "{c}");
            assert_eq!(req.reply_size(), reply, "{c}");
            assert_eq!(reply.is_some(), c.has_reply(), "{c}");
        }
    }

    #[test]
    fn request_fields_in_upstreams_order() {
        let t = sample();
        let b = Request::AllocBuffer {
            device: 3,
            size: 1 << 40,
        }
        .encode();
        assert_eq!((u32_at(&b, 9), u64_at(&b, 13)), (3, 1 << 40));

        let b = Request::BufferClear {
            buffer: 0xdead,
            value: 0x5a,
        }
        .encode();
        assert_eq!((u64_at(&b, 9), b[17]), (0xdead, 0x5a));

        let b = Request::SetTensor {
            tensor: &t,
            cache: true,
            offset: 12,
            data: b"abc",
        }
        .encode();
        let p = &b[9..];
        assert_eq!(WireTensor::decode(&p[..296]), Ok(t));
        assert_eq!((p[296], u64_at(p, 297), &p[305..]), (1, 12, &b"abc"[..]));

        let b = Request::SetTensorHash {
            tensor: &t,
            offset: 4,
            hash: 0x77,
        }
        .encode();
        assert_eq!((u64_at(&b[9..], 296), u64_at(&b[9..], 304)), (4, 0x77));

        let b = Request::GetTensor {
            tensor: &t,
            offset: 8,
            size: 16,
        }
        .encode();
        assert_eq!((u64_at(&b[9..], 296), u64_at(&b[9..], 304)), (8, 16));

        let other = WireTensor { id: 9, ..t };
        let b = Request::CopyTensor {
            src: &t,
            dst: &other,
        }
        .encode();
        assert_eq!(WireTensor::decode(&b[9..305]), Ok(t));
        assert_eq!(WireTensor::decode(&b[305..]), Ok(other));

        let mut srcs = [WireTensor::default(); MAX_SRC];
        srcs[1] = other;
        let b = Request::GetAllocSize {
            device: 2,
            tensor: &t,
            srcs: &srcs,
        }
        .encode();
        let p = &b[9..];
        assert_eq!(u32_at(p, 0), 2);
        assert_eq!(WireTensor::decode(&p[4..300]), Ok(t));
        assert_eq!(WireTensor::decode(&p[300 + 296..300 + 592]), Ok(other));

        let b = Request::MemsetTensor {
            tensor: &t,
            offset: 5,
            size: 6,
            value: 7,
        }
        .encode();
        let p = &b[9..];
        assert_eq!((u64_at(p, 296), u64_at(p, 304), p[312]), (5, 6, 7));

        // HELLO offers all-zero capabilities: plain TCP.
        assert_eq!(Request::Hello.encode()[9..], [0u8; CONN_CAPS_SIZE]);
    }

    #[test]
    fn replies_decode_at_their_size_only() {
        let hello = HelloReply {
            version: Version {
                major: 7,
                minor: 0,
                patch: 3,
            },
            conn_caps: [1; CONN_CAPS_SIZE],
        };
        let b = hello.encode();
        assert_eq!((b.len(), b[3]), (28, 0));
        assert_eq!(HelloReply::decode(&b), Ok(hello));
        assert!(HelloReply::decode(&b[..27]).is_err());

        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&0x1000u64.to_le_bytes());
        b[8..].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(
            AllocBufferReply::decode(&b),
            Ok(AllocBufferReply {
                remote_ptr: 0x1000,
                remote_size: 4096
            })
        );
        assert_eq!(
            DeviceMemory::decode(&b),
            Ok(DeviceMemory {
                free: 0x1000,
                total: 4096
            })
        );
        assert!(DeviceMemory::decode(&b[..15]).is_err());
        assert_eq!(decode_u32("x", &[2, 0, 0, 0]), Ok(2));
        assert!(decode_u32("x", &[2, 0, 0, 0, 0]).is_err());
        assert_eq!(decode_u64("x", &9u64.to_le_bytes()), Ok(9));
        assert!(decode_u64("x", &[0; 4]).is_err());
        assert_eq!(decode_bool("x", &[0]), Ok(false));
        assert_eq!(decode_bool("x", &[2]), Ok(true));
        assert!(decode_bool("x", &[]).is_err());
    }

    #[test]
    fn versions_of_the_same_major_no_newer_minor_and_the_same_patch_are_supported() {
        let v = |major, minor, patch| Version {
            major,
            minor,
            patch,
        };
        assert!(v(7, 0, 0).is_supported());
        assert!(
            !v(7, 0, 9).is_supported(),
            "another patch level numbers ops differently"
        );
        assert!(!v(7, 1, 0).is_supported());
        assert!(!v(6, 0, 0).is_supported());
        assert!(!v(8, 0, 0).is_supported());
        assert_eq!(v(7, 0, 1).to_string(), "7.0.1");
    }

    #[test]
    fn fnv1a64_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    fn leaf(id: u64) -> WireTensor {
        WireTensor {
            id,
            ..WireTensor::default()
        }
    }

    fn node(id: u64, srcs: &[u64]) -> WireTensor {
        let mut t = leaf(id);
        t.src[..srcs.len()].copy_from_slice(srcs);
        t
    }

    #[test]
    fn graph_layout_and_round_trip() {
        let tensors = [leaf(1), leaf(2), node(3, &[1, 2]), node(4, &[3, 1])];
        let b = GraphMsg::encode(5, &[3, 4], &tensors).unwrap();
        assert_eq!(b.len(), 4 + 4 + 2 * 8 + 4 + 4 * 296);
        assert_eq!(u32_at(&b, 0), 5);
        assert_eq!(u32_at(&b, 4), 2);
        assert_eq!((u64_at(&b, 8), u64_at(&b, 16)), (3, 4));
        assert_eq!(u32_at(&b, 24), 4);
        assert_eq!(WireTensor::decode(&b[28..28 + 296]), Ok(tensors[0]));
        let m = GraphMsg::decode(&b).unwrap();
        assert_eq!(
            (m.device, m.nodes, m.tensors),
            (5, vec![3, 4], tensors.to_vec())
        );
        // Counts that do not account for every byte.
        assert!(GraphMsg::decode(&b[..b.len() - 1]).is_err());
        let mut longer = b.clone();
        longer.push(0);
        assert!(GraphMsg::decode(&longer).is_err());
        assert!(GraphMsg::decode(&b[..7]).is_err());
        let mut huge = b.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(GraphMsg::decode(&huge).is_err());
    }

    #[test]
    fn graphs_that_do_not_hold_together_are_refused() {
        let enc = |nodes: &[u64], tensors: &[WireTensor]| GraphMsg::encode(0, nodes, tensors);
        assert_eq!(enc(&[], &[leaf(1)]), Err(GraphError::Empty));
        assert_eq!(enc(&[1], &[leaf(0), leaf(1)]), Err(GraphError::ZeroId));
        assert_eq!(enc(&[0], &[leaf(1)]), Err(GraphError::ZeroId));
        assert_eq!(
            enc(&[1], &[leaf(1), leaf(1)]),
            Err(GraphError::DuplicateTensor(1))
        );
        assert_eq!(enc(&[1, 1], &[leaf(1)]), Err(GraphError::DuplicateNode(1)));
        assert_eq!(enc(&[2], &[leaf(1)]), Err(GraphError::UnknownNode(2)));
        assert_eq!(
            enc(&[2], &[node(2, &[1])]),
            Err(GraphError::UnknownSource {
                tensor: 2,
                source: 1
            })
        );
        let view = WireTensor {
            view_src: 7,
            ..leaf(2)
        };
        assert_eq!(
            enc(&[2], &[view]),
            Err(GraphError::UnknownSource {
                tensor: 2,
                source: 7
            })
        );
    }
}
