//! The C objects of our RPC client and their vtables: the "RPC" registry, one registry per
//! server (`RPC[host:port]`, what `ggml_backend_rpc_add_server` returns), its devices and
//! their buffer types, buffers, backends and events.
//!
//! Servers and devices live for the process (as upstream's); buffers, backends and events sit
//! in registries while alive. Every object is recognised by its address; no code casts a C
//! object's `context` back to a Rust type.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::{Arc, Mutex};

use ggml_backend_rs_core::owned::Registry;
use ggml_backend_rs_rpc::wire::MAX_SRC;
use ggml_backend_rs_rpc::{Client, Error as RpcError, GraphMsg, WireTensor};

use super::remote::{Marker, Remote};
use super::{timeouts, upstream_proc_address};
use crate::abi::*;
use crate::log::{abort, log_error};
use crate::registry::{c_name, StaticReg};

/// ggml-rpc's devices pad quantized rows to 512 elements on CUDA servers: tensors whose
/// first dimension is not a multiple of it are sized and initialised by the server.
const PADDED_ROW: i64 = 512;

static GUID: ggml_guid = [
    0x3c, 0x52, 0x9d, 0x07, 0xa1, 0x6e, 0x48, 0x0b, 0x8f, 0x14, 0x6a, 0xd3, 0x27, 0x90, 0xc5, 0x1e,
];

// --- state ----------------------------------------------------------------------------------

/// A server added with `ggml_backend_rpc_add_server`.
struct Server {
    endpoint: String,
    name: CString,
    /// Our registry object for it (`RPC[endpoint]`).
    reg: usize,
    devices: Vec<&'static RpcDevice>,
}

/// One device of a server.
pub struct RpcDevice {
    remote: Arc<Remote>,
    /// The device's index on its server.
    index: u32,
    /// `RPC<n>`, numbered over all servers in the order they were added.
    name: CString,
    /// The endpoint.
    description: CString,
    /// `RPC<index>[endpoint]`: its buffer type's and backends' name.
    long_name: CString,
    alignment: usize,
    max_size: usize,
    device: usize,
    buft: usize,
    /// The uid of the last graph sent for this device: the server keeps it for a recompute.
    last_graph: Mutex<u64>,
    /// Sizes the server reported for tensors it sizes itself, by shape and op.
    alloc_sizes: Mutex<HashMap<AllocKey, usize>>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct AllocKey {
    ty: ggml_type,
    op: ggml_op,
    op_params: [i32; GGML_MAX_OP_PARAMS / 4],
    ne: [i64; 4],
    nb: [usize; 4],
}

/// A buffer on a server: its handle there and its base address in the server's memory (the
/// buffer's base: tensors' `data` are server addresses).
struct RpcBuffer {
    dev: &'static RpcDevice,
    handle: u64,
    base: u64,
}

struct RpcBackend {
    dev: &'static RpcDevice,
}

static SERVERS: Mutex<Vec<&'static Server>> = Mutex::new(Vec::new());
static DEVICES: Mutex<Vec<&'static RpcDevice>> = Mutex::new(Vec::new());
static BUFFERS: Registry<RpcBuffer> = Registry::new();
static BACKENDS: Registry<RpcBackend> = Registry::new();
static EVENTS: Registry<Marker> = Registry::new();

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn find_device(pred: impl Fn(&RpcDevice) -> bool) -> Option<&'static RpcDevice> {
    lock(&DEVICES).iter().copied().find(|d| pred(d))
}

/// The device behind a device vtable entry's argument: only our RPC devices carry that vtable.
fn device(dev: ggml_backend_dev_t) -> &'static RpcDevice {
    find_device(|d| d.device == dev as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("RPC device vtable called with {dev:p}, which is not an RPC device"),
        )
    })
}

fn device_of_buft(buft: ggml_backend_buffer_type_t) -> &'static RpcDevice {
    find_device(|d| d.buft == buft as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!(
                "RPC buffer type vtable called with {buft:p}, which is not an RPC buffer type"
            ),
        )
    })
}

fn buffer(buffer: ggml_backend_buffer_t) -> Arc<RpcBuffer> {
    BUFFERS.get(buffer as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("RPC buffer vtable called with {buffer:p}, which is not a live RPC buffer"),
        )
    })
}

fn backend(backend: ggml_backend_t) -> Arc<RpcBackend> {
    BACKENDS.get(backend as usize).unwrap_or_else(|| {
        abort(
            file!(),
            line!(),
            &format!("RPC backend vtable called with {backend:p}, which is not a live RPC backend"),
        )
    })
}

// --- tensors and graphs on the wire ---------------------------------------------------------

/// `t` as the protocol carries it to `remote`: its buffer handle and address there when it
/// lives in a buffer of that server, none otherwise. Errors when a size or stride does not
/// fit the protocol's 32 bits.
fn wire(t: Tensor, remote: &Arc<Remote>) -> Result<WireTensor, String> {
    let mut w = WireTensor {
        id: t.as_ptr() as u64,
        ty: t.type_() as u32,
        op: t.op() as u32,
        op_params: t.op_params(),
        flags: t.flags(),
        view_offs: t.view_offs() as u64,
        view_src: t.view_src().map_or(0, |s| s.as_ptr() as u64),
        ..WireTensor::default()
    };
    if let Some(b) = BUFFERS.get(t.buffer() as usize) {
        if Arc::ptr_eq(&b.dev.remote, remote) {
            w.buffer = b.handle;
            w.data = t.data() as u64;
        }
    }
    let (ne, nb) = (t.ne_all(), t.nb_all());
    for d in 0..4 {
        // A stride of a dimension of size 1 is never used for an address: it may be cut to 32
        // bits (as upstream's client cuts every stride); any other size or stride must fit.
        let stride = match u32::try_from(nb[d]) {
            Ok(s) => Some(s),
            Err(_) if ne[d] == 1 => Some(nb[d] as u32),
            Err(_) => None,
        };
        let (Ok(n), Some(s)) = (u32::try_from(ne[d]), stride) else {
            return Err(format!(
                "tensor '{}' ({:?}, strides {:?}) does not fit the RPC protocol's 32-bit sizes",
                t.name_string(),
                ne,
                nb
            ));
        };
        w.ne[d] = n;
        w.nb[d] = s;
    }
    for (j, s) in w.src.iter_mut().enumerate().take(MAX_SRC.min(GGML_MAX_SRC)) {
        *s = t.src(j).map_or(0, |s| s.as_ptr() as u64);
    }
    w.set_name(&t.name_string());
    Ok(w)
}

/// A graph as GRAPH_COMPUTE carries it: its nodes' ids, and every tensor they reach (sources
/// and view sources first), each with the graph's use count.
fn wire_graph(g: Graph, remote: &Arc<Remote>) -> Result<(Vec<u64>, Vec<WireTensor>), String> {
    let nodes: Vec<Tensor> = g.nodes().collect();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    // depth-first, iteratively: (tensor, whether its inputs are already pushed)
    let mut stack: Vec<(Tensor, bool)> = nodes.iter().rev().map(|&n| (n, false)).collect();
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            let mut w = wire(t, remote)?;
            w.use_count = g.recorded_use_count(t).unwrap_or(0);
            out.push(w);
            continue;
        }
        if !seen.insert(t.as_ptr() as usize) {
            continue;
        }
        stack.push((t, true));
        if let Some(v) = t.view_src() {
            stack.push((v, false));
        }
        for j in (0..GGML_MAX_SRC).rev() {
            if let Some(s) = t.src(j) {
                stack.push((s, false));
            }
        }
    }
    Ok((nodes.iter().map(|n| n.as_ptr() as u64).collect(), out))
}

/// Whether the server sizes and initialises `t` itself (INIT_TENSOR, GET_ALLOC_SIZE): a
/// quantized tensor of its own memory whose rows a CUDA server pads to [`PADDED_ROW`] elements.
/// (Every quantized type of ggml has blocks of more than one element, no other type does.)
fn server_pads(t: Tensor) -> bool {
    t.blck_size() > 1 && t.ne(0) % PADDED_ROW != 0 && t.view_src().is_none()
}

// --- registries -----------------------------------------------------------------------------

/// The vtable of the "RPC" registry and of each server's: the entries tell them apart.
const REG_IFACE: ggml_backend_reg_i = ggml_backend_reg_i {
    get_name: Some(reg_get_name),
    get_device_count: Some(reg_get_device_count),
    get_device: Some(reg_get_device),
    get_proc_address: Some(reg_get_proc_address),
};

static REG: StaticReg = StaticReg::new(REG_IFACE);

/// The "RPC" registry: no devices of its own (servers are added), the functions by name.
pub fn registry() -> ggml_backend_reg_t {
    REG.as_ptr()
}

fn server_of_reg(reg: ggml_backend_reg_t) -> Option<&'static Server> {
    lock(&SERVERS)
        .iter()
        .copied()
        .find(|s| s.reg == reg as usize)
}

unsafe extern "C" fn reg_get_name(reg: ggml_backend_reg_t) -> *const c_char {
    // (the "RPC" registry's name without the server list's lock, which adding a server holds)
    if reg == registry() {
        return c"RPC".as_ptr();
    }
    match server_of_reg(reg) {
        Some(s) => s.name.as_ptr(),
        None => c"RPC".as_ptr(),
    }
}

unsafe extern "C" fn reg_get_device_count(reg: ggml_backend_reg_t) -> usize {
    server_of_reg(reg).map_or(0, |s| s.devices.len())
}

unsafe extern "C" fn reg_get_device(reg: ggml_backend_reg_t, index: usize) -> ggml_backend_dev_t {
    match server_of_reg(reg).and_then(|s| s.devices.get(index)) {
        Some(d) => d.device as ggml_backend_dev_t,
        None => {
            log_error!(
                "ggml_backend_reg_dev_get: the RPC registry has no device {index} (servers are added with ggml_backend_rpc_add_server)"
            );
            std::ptr::null_mut()
        }
    }
}

unsafe extern "C" fn reg_get_proc_address(
    _reg: ggml_backend_reg_t,
    name: *const c_char,
) -> *mut c_void {
    if name.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: ggml_backend_reg_get_proc_address passes a NUL-terminated name.
    if unsafe { CStr::from_ptr(name) } == c"ggml_backend_rpc_add_server" {
        return add_server as *mut c_void;
    }
    upstream_proc_address(name)
}

/// `ggml_backend_rpc_add_server`: connects to `endpoint` ("host:port"), asks for its devices
/// and returns a registry `RPC[endpoint]` listing them (the same one when asked again). NULL,
/// with the endpoint and the cause logged, when the server cannot be reached, refuses the
/// protocol, or has no device.
///
/// # Safety
/// `endpoint` is NULL or a NUL-terminated string.
pub unsafe extern "C" fn add_server(endpoint: *const c_char) -> ggml_backend_reg_t {
    if endpoint.is_null() {
        log_error!("ggml_backend_rpc_add_server: endpoint is NULL");
        return std::ptr::null_mut();
    }
    // SAFETY: non-NULL and NUL-terminated by the contract.
    let endpoint = unsafe { CStr::from_ptr(endpoint) }
        .to_string_lossy()
        .into_owned();
    // One server added at a time (device numbers follow the order), without holding the server
    // list, which registry lookups read, while the network is asked.
    static ADDING: Mutex<()> = Mutex::new(());
    let _adding = lock(&ADDING);
    let first = {
        let servers = lock(&SERVERS);
        if let Some(s) = servers.iter().find(|s| s.endpoint == endpoint) {
            return s.reg as ggml_backend_reg_t;
        }
        servers.iter().map(|s| s.devices.len()).sum()
    };
    match connect(&endpoint, first) {
        Ok(server) => {
            let reg = server.reg as ggml_backend_reg_t;
            lock(&DEVICES).extend(server.devices.iter().copied());
            lock(&SERVERS).push(server);
            reg
        }
        Err(e) => {
            log_error!("ggml_backend_rpc_add_server: {e}");
            std::ptr::null_mut()
        }
    }
}

/// Connects to a new server whose devices are numbered from `first`.
fn connect(endpoint: &str, first: usize) -> Result<&'static Server, String> {
    let remote = Arc::new(Remote::connect(endpoint, &timeouts())?);
    let gone = || format!("RPC server {endpoint}: its connection's thread is gone");
    let count = remote
        .call(|c: &mut Client| c.device_count())
        .ok_or_else(gone)?
        .map_err(|e| e.to_string())?;
    if count == 0 {
        return Err(format!("RPC server {endpoint} has no devices"));
    }
    // every device's properties before anything is made, so that a failure leaves nothing
    let props = remote
        .call(move |c: &mut Client| {
            (0..count)
                .map(|i| Ok((c.alignment(i)?, c.max_size(i)?)))
                .collect::<Result<Vec<_>, RpcError>>()
        })
        .ok_or_else(gone)?
        .map_err(|e| e.to_string())?;
    let reg = Box::leak(Box::new(ggml_backend_reg {
        api_version: crate::version::GGML_BACKEND_API_VERSION,
        iface: REG_IFACE,
        context: std::ptr::null_mut(),
    })) as *mut ggml_backend_reg;
    let mut devices = Vec::new();
    for (index, (alignment, max_size)) in (0..count).zip(props) {
        let long_name = format!("RPC{index}[{endpoint}]");
        let dev: &'static mut RpcDevice = Box::leak(Box::new(RpcDevice {
            remote: remote.clone(),
            index,
            name: c_name(format!("RPC{}", first + index as usize)),
            description: c_name(endpoint.to_owned()),
            long_name: c_name(long_name),
            alignment: usize::try_from(alignment).unwrap_or(usize::MAX),
            max_size: usize::try_from(max_size).unwrap_or(usize::MAX),
            device: 0,
            buft: 0,
            last_graph: Mutex::new(0),
            alloc_sizes: Mutex::new(HashMap::new()),
        }));
        let device = Box::leak(Box::new(ggml_backend_device {
            iface: DEVICE_IFACE,
            reg: registry(),
            context: std::ptr::null_mut(),
        })) as *mut ggml_backend_device;
        let buft = Box::leak(Box::new(ggml_backend_buffer_type {
            iface: BUFT_IFACE,
            device,
            context: std::ptr::null_mut(),
        })) as *mut ggml_backend_buffer_type;
        dev.device = device as usize;
        dev.buft = buft as usize;
        devices.push(&*dev);
    }
    Ok(Box::leak(Box::new(Server {
        endpoint: endpoint.to_owned(),
        name: c_name(format!("RPC[{endpoint}]")),
        reg: reg as usize,
        devices,
    })))
}

// --- device ---------------------------------------------------------------------------------

const DEVICE_IFACE: ggml_backend_device_i = ggml_backend_device_i {
    get_name: Some(dev_get_name),
    get_description: Some(dev_get_description),
    get_memory: Some(dev_get_memory),
    get_type: Some(dev_get_type),
    get_props: Some(dev_get_props),
    init_backend: Some(dev_init_backend),
    get_buffer_type: Some(dev_get_buffer_type),
    get_host_buffer_type: None,
    buffer_from_host_ptr: None,
    supports_op: Some(dev_supports_op),
    supports_buft: Some(dev_supports_buft),
    offload_op: None,
    event_new: Some(dev_event_new),
    event_free: Some(dev_event_free),
    event_synchronize: Some(dev_event_synchronize),
};

unsafe extern "C" fn dev_get_name(dev: ggml_backend_dev_t) -> *const c_char {
    device(dev).name.as_ptr()
}

unsafe extern "C" fn dev_get_description(dev: ggml_backend_dev_t) -> *const c_char {
    device(dev).description.as_ptr()
}

/// The server's free and total memory; zeros when it cannot be asked.
fn memory(d: &'static RpcDevice) -> (usize, usize) {
    let index = d.index;
    match d.remote.call(move |c: &mut Client| c.device_memory(index)) {
        Some(Ok(m)) => (
            usize::try_from(m.free).unwrap_or(usize::MAX),
            usize::try_from(m.total).unwrap_or(usize::MAX),
        ),
        _ => (0, 0),
    }
}

unsafe extern "C" fn dev_get_memory(dev: ggml_backend_dev_t, free: *mut usize, total: *mut usize) {
    let (f, t) = memory(device(dev));
    // SAFETY: ggml_backend_dev_memory passes two writable `size_t`s.
    unsafe {
        *free = f;
        *total = t;
    }
}

unsafe extern "C" fn dev_get_type(_dev: ggml_backend_dev_t) -> ggml_backend_dev_type_raw {
    // what upstream's client reports: the server's kind is not part of the protocol
    DEVICE_GPU
}

unsafe extern "C" fn dev_get_props(dev: ggml_backend_dev_t, props: *mut ggml_backend_dev_props) {
    let d = device(dev);
    // SAFETY: ggml_backend_dev_get_props passes a writable props struct, ours for the call.
    let p = unsafe { &mut *props };
    p.name = d.name.as_ptr();
    p.description = d.description.as_ptr();
    p.type_ = DEVICE_GPU;
    p.device_id = std::ptr::null();
    (p.memory_free, p.memory_total) = memory(d);
    p.caps.async_ = true;
    p.caps.set_mmap_support(true);
    p.caps.host_buffer = false;
    p.caps.buffer_from_host_ptr = false;
    p.caps.events = true;
}

unsafe extern "C" fn dev_init_backend(
    dev: ggml_backend_dev_t,
    _params: *const c_char,
) -> ggml_backend_t {
    let d = device(dev);
    let b = Arc::new(RpcBackend { dev: d });
    let backend = Box::into_raw(Box::new(ggml_backend {
        guid: &GUID as *const ggml_guid as ggml_guid_t,
        iface: BACKEND_IFACE,
        device: dev,
        // the state's address, for identification only: it is found through the registry
        context: Arc::as_ptr(&b) as *mut c_void,
    }));
    BACKENDS.insert(backend as usize, b.clone());
    // SAFETY: made just above; live until `backend_free`.
    if let Some(h) = unsafe { Backend::from_ptr(backend) } {
        crate::backend::extend(h, b);
    }
    backend
}

impl crate::backend::Extension for RpcBackend {
    fn failure(&self) -> Option<String> {
        self.dev.remote.failure()
    }

    /// One round trip after the graphs sent since the last one (none when nothing was sent:
    /// the server's other devices settled it): its reply comes once they are computed.
    fn settle(&self) -> Result<(), String> {
        let remote = &self.dev.remote;
        if remote.take_unsettled() {
            remote.call(|c| {
                let _ = c.synchronize();
            });
        }
        remote.failure().map_or(Ok(()), Err)
    }
}

unsafe extern "C" fn dev_get_buffer_type(dev: ggml_backend_dev_t) -> ggml_backend_buffer_type_t {
    device(dev).buft as ggml_backend_buffer_type_t
}

unsafe extern "C" fn dev_supports_op(_dev: ggml_backend_dev_t, op: *const ggml_tensor) -> bool {
    // the protocol cannot ask; the server's backend computes what it is sent (as upstream)
    !op.is_null()
}

unsafe extern "C" fn dev_supports_buft(
    dev: ggml_backend_dev_t,
    buft: ggml_backend_buffer_type_t,
) -> bool {
    device(dev).buft == buft as usize
}

unsafe extern "C" fn dev_event_new(dev: ggml_backend_dev_t) -> ggml_backend_event_t {
    let _ = device(dev);
    let marker = Arc::new(Marker::default());
    let event = Box::into_raw(Box::new(ggml_backend_event {
        device: dev,
        context: Arc::as_ptr(&marker) as *mut c_void,
    }));
    EVENTS.insert(event as usize, marker);
    event
}

unsafe extern "C" fn dev_event_free(_dev: ggml_backend_dev_t, event: ggml_backend_event_t) {
    if EVENTS.remove(event as usize).is_some() {
        // SAFETY: made by dev_event_new with Box; ggml frees an event once, through this entry.
        drop(unsafe { Box::from_raw(event) });
    }
}

unsafe extern "C" fn dev_event_synchronize(_dev: ggml_backend_dev_t, event: ggml_backend_event_t) {
    wait_event(event);
}

/// Waits on the host for `event`: ours, or another device's through that device.
fn wait_event(event: ggml_backend_event_t) {
    if let Some(m) = EVENTS.get(event as usize) {
        m.wait();
        return;
    }
    // SAFETY: ggml passes a live event, whose device outlives it.
    if let Some(e) = unsafe { Event::from_ptr(event) } {
        if let Some(d) = e.device() {
            d.event_synchronize(e);
        }
    }
}

// --- buffer type ----------------------------------------------------------------------------

const BUFT_IFACE: ggml_backend_buffer_type_i = ggml_backend_buffer_type_i {
    get_name: Some(buft_get_name),
    alloc_buffer: Some(buft_alloc_buffer),
    get_alignment: Some(buft_get_alignment),
    get_max_size: Some(buft_get_max_size),
    get_alloc_size: Some(buft_get_alloc_size),
    ..ggml_backend_buffer_type_i::EMPTY
};

unsafe extern "C" fn buft_get_name(buft: ggml_backend_buffer_type_t) -> *const c_char {
    device_of_buft(buft).long_name.as_ptr()
}

unsafe extern "C" fn buft_alloc_buffer(
    buft: ggml_backend_buffer_type_t,
    size: usize,
) -> ggml_backend_buffer_t {
    let d = device_of_buft(buft);
    let index = d.index;
    let made = d.remote.call(move |c: &mut Client| -> Result<_, RpcError> {
        let Some(rb) = c.alloc_buffer(index, size as u64)? else {
            return Ok(None);
        };
        Ok(Some((rb, c.buffer_base(rb.handle)?)))
    });
    let (rb, base) = match made {
        Some(Ok(Some(made))) => made,
        Some(Ok(None)) => {
            log_error!(
                "{}: the server cannot allocate {size} bytes",
                d.long_name.to_string_lossy()
            );
            return std::ptr::null_mut();
        }
        // the connection's failure is logged by its thread
        _ => return std::ptr::null_mut(),
    };
    let state = Arc::new(RpcBuffer {
        dev: d,
        handle: rb.handle,
        base,
    });
    // the context is the state's address, for identification only
    let context = Arc::as_ptr(&state) as *mut c_void;
    let b = crate::buffer::init(
        buft,
        BUFFER_IFACE,
        context,
        usize::try_from(rb.size).unwrap_or(size),
    );
    BUFFERS.insert(b.as_ptr() as usize, state);
    b.as_ptr()
}

unsafe extern "C" fn buft_get_alignment(buft: ggml_backend_buffer_type_t) -> usize {
    device_of_buft(buft).alignment
}

unsafe extern "C" fn buft_get_max_size(buft: ggml_backend_buffer_type_t) -> usize {
    device_of_buft(buft).max_size
}

unsafe extern "C" fn buft_get_alloc_size(
    buft: ggml_backend_buffer_type_t,
    tensor: *const ggml_tensor,
) -> usize {
    let d = device_of_buft(buft);
    // SAFETY: ggml_backend_buft_get_alloc_size passes a live tensor.
    let Some(t) = (unsafe { Tensor::from_ptr(tensor as *mut ggml_tensor) }) else {
        return 0;
    };
    let nbytes = t.nbytes();
    if !server_pads(t) && !crate::abi::facts::alloc_size_may_expand(t.op()) {
        return nbytes;
    }
    let key = AllocKey {
        ty: t.type_(),
        op: t.op(),
        op_params: t.op_params(),
        ne: t.ne_all(),
        nb: t.nb_all(),
    };
    if let Some(&size) = lock(&d.alloc_sizes).get(&key) {
        return size.max(nbytes);
    }
    let (Ok(w), Ok(srcs)) = (
        wire(t, &d.remote),
        (0..MAX_SRC)
            .map(|j| {
                t.src(j)
                    .map_or(Ok(WireTensor::default()), |s| wire(s, &d.remote))
            })
            .collect::<Result<Vec<_>, _>>(),
    ) else {
        return nbytes;
    };
    let index = d.index;
    match d
        .remote
        .call(move |c: &mut Client| c.alloc_size(index, &w, &srcs))
    {
        Some(Ok(size)) => {
            let size = usize::try_from(size).unwrap_or(usize::MAX);
            lock(&d.alloc_sizes).insert(key, size);
            size.max(nbytes)
        }
        _ => nbytes,
    }
}

// --- buffer ---------------------------------------------------------------------------------

const BUFFER_IFACE: ggml_backend_buffer_i = ggml_backend_buffer_i {
    free_buffer: Some(buffer_free),
    get_base: Some(buffer_get_base),
    init_tensor: Some(buffer_init_tensor),
    memset_tensor: Some(buffer_memset_tensor),
    set_tensor: Some(buffer_set_tensor),
    get_tensor: Some(buffer_get_tensor),
    set_tensor_2d: None,
    get_tensor_2d: None,
    cpy_tensor: Some(buffer_cpy_tensor),
    clear: Some(buffer_clear),
    reset: None,
};

unsafe extern "C" fn buffer_free(buf: ggml_backend_buffer_t) {
    if let Some(b) = BUFFERS.remove(buf as usize) {
        // The server drops its stored graphs with any buffer: the next graph of each of its
        // devices goes in full. Their graph locks are held while the free is queued, so that no
        // graph queued in between is taken for stored.
        let same: Vec<&'static RpcDevice> = lock(&DEVICES)
            .iter()
            .copied()
            .filter(|d| Arc::ptr_eq(&d.remote, &b.dev.remote))
            .collect();
        let mut graphs: Vec<_> = same.iter().map(|d| lock(&d.last_graph)).collect();
        let handle = b.handle;
        b.dev.remote.post(move |c| {
            let _ = c.free_buffer(handle);
        });
        graphs.iter_mut().for_each(|g| **g = 0);
    }
}

unsafe extern "C" fn buffer_get_base(buf: ggml_backend_buffer_t) -> *mut c_void {
    buffer(buf).base as usize as *mut c_void
}

/// The tensor behind a vtable argument and its wire form for `d`'s server; None (logged) when it
/// cannot be sent.
fn on_wire(d: &RpcDevice, tensor: *const ggml_tensor) -> Option<(Tensor, WireTensor)> {
    // SAFETY: ggml passes NULL or a live tensor to every buffer and backend entry.
    let t = unsafe { Tensor::from_ptr(tensor as *mut ggml_tensor) }?;
    match wire(t, &d.remote) {
        Ok(w) => Some((t, w)),
        Err(e) => {
            log_error!("{}: {e}", d.long_name.to_string_lossy());
            None
        }
    }
}

unsafe extern "C" fn buffer_init_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
) -> ggml_status {
    let b = buffer(buf);
    let Some((t, w)) = on_wire(b.dev, tensor) else {
        return GGML_STATUS_FAILED;
    };
    if server_pads(t) {
        // a failure ends the connection (logged); the next compute reports it
        let _ = b.dev.remote.call(move |c: &mut Client| c.init_tensor(&w));
    }
    GGML_STATUS_SUCCESS
}

unsafe extern "C" fn buffer_memset_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    value: u8,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    if let Some((_, w)) = on_wire(b.dev, tensor) {
        let _ = b
            .dev
            .remote
            .call(move |c: &mut Client| c.memset_tensor(&w, offset as u64, size as u64, value));
    }
}

/// Sends `data` to `w` at `offset`: weights through the server's cache (by hash, when large),
/// anything else directly.
fn upload(c: &mut Client, w: &WireTensor, weights: bool, offset: usize, data: &[u8]) {
    let _ = if weights {
        c.set_weights(w, offset as u64, data).map(|_| ())
    } else {
        c.set_tensor(w, offset as u64, data)
    };
}

unsafe extern "C" fn buffer_set_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        return;
    };
    // SAFETY: a live buffer (checked above).
    let weights = unsafe { Buffer::from_ptr(buf) }.is_some_and(|h| h.usage() == USAGE_WEIGHTS);
    let at = data as usize;
    let _ = b.dev.remote.call(move |c: &mut Client| {
        // SAFETY: ggml_backend_tensor_set passes `size` readable bytes (checked against the
        // tensor), readable until it returns; `call` returns after this job.
        let bytes = unsafe { host_bytes(at, size) };
        upload(c, &w, weights, offset, bytes)
    });
}

unsafe extern "C" fn buffer_get_tensor(
    buf: ggml_backend_buffer_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let b = buffer(buf);
    let at = data as usize;
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        // SAFETY: ggml_backend_tensor_get passes `size` writable bytes (checked against the
        // tensor).
        unsafe { read_failed(at, size) };
        return;
    };
    // SAFETY: as above, writable until ggml_backend_tensor_get returns; `call` returns after
    // this job.
    let _ = b
        .dev
        .remote
        .call(move |c: &mut Client| unsafe { read_into(c, &w, offset, at, size) });
}

/// Reads `size` bytes of `w` from `offset` into the caller's memory at `at`: zeros where the
/// server cannot give them.
///
/// # Safety
/// `at` is the address of `size` writable bytes that nothing else uses until this returns.
unsafe fn read_into(c: &mut Client, w: &WireTensor, offset: usize, at: usize, size: usize) {
    // SAFETY: this function's contract.
    let out = unsafe { host_bytes_mut(at, size) };
    if !out.is_empty() && c.get_tensor(w, offset as u64, out).is_err() {
        out.fill(0);
    }
}

/// Zeros for a read that cannot be made.
///
/// # Safety
/// As [`read_into`].
unsafe fn read_failed(at: usize, size: usize) {
    // SAFETY: this function's contract.
    unsafe { host_bytes_mut(at, size) }.fill(0);
}

/// The caller's `size` bytes at `at`; empty, without touching the pointer (which ggml may pass
/// as NULL or dangling), when `size` is 0.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` readable bytes that stay live and unwritten
/// for `'a`.
unsafe fn host_bytes<'a>(at: usize, size: usize) -> &'a [u8] {
    if size == 0 {
        return &[];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts(at as *const u8, size) }
}

/// As [`host_bytes`], writable.
///
/// # Safety
/// When `size` > 0, `at` is the address of `size` writable bytes that nothing else uses for
/// `'a`.
unsafe fn host_bytes_mut<'a>(at: usize, size: usize) -> &'a mut [u8] {
    if size == 0 {
        return &mut [];
    }
    // SAFETY: this function's contract, with a non-zero size.
    unsafe { std::slice::from_raw_parts_mut(at as *mut u8, size) }
}

unsafe extern "C" fn buffer_cpy_tensor(
    buf: ggml_backend_buffer_t,
    src: *const ggml_tensor,
    dst: *mut ggml_tensor,
) -> bool {
    let b = buffer(buf);
    // SAFETY: ggml_backend_buffer_copy_tensor passes live tensors.
    let Some(s) = (unsafe { Tensor::from_ptr(src as *mut ggml_tensor) }) else {
        return false;
    };
    // only between buffers of one server: the protocol has no copies between servers
    let same_server = BUFFERS
        .get(s.buffer() as usize)
        .is_some_and(|sb| Arc::ptr_eq(&sb.dev.remote, &b.dev.remote));
    if !same_server {
        return false;
    }
    let (Some((_, ws)), Some((_, wd))) = (on_wire(b.dev, src), on_wire(b.dev, dst)) else {
        return false;
    };
    matches!(
        b.dev
            .remote
            .call(move |c: &mut Client| c.copy_tensor(&ws, &wd)),
        Some(Ok(true))
    )
}

unsafe extern "C" fn buffer_clear(buf: ggml_backend_buffer_t, value: u8) {
    let b = buffer(buf);
    let handle = b.handle;
    let _ = b
        .dev
        .remote
        .call(move |c: &mut Client| c.clear_buffer(handle, value));
}

// --- backend --------------------------------------------------------------------------------

const BACKEND_IFACE: ggml_backend_i = ggml_backend_i {
    get_name: Some(backend_get_name),
    free: Some(backend_free),
    set_tensor_async: Some(backend_set_tensor_async),
    get_tensor_async: Some(backend_get_tensor_async),
    set_tensor_2d_async: None,
    get_tensor_2d_async: None,
    cpy_tensor_async: None,
    synchronize: Some(backend_synchronize),
    graph_plan_create: None,
    graph_plan_free: None,
    graph_plan_update: None,
    graph_plan_compute: None,
    graph_compute: Some(backend_graph_compute),
    event_record: Some(backend_event_record),
    event_wait: Some(backend_event_wait),
    graph_optimize: None,
};

unsafe extern "C" fn backend_get_name(be: ggml_backend_t) -> *const c_char {
    backend(be).dev.long_name.as_ptr()
}

unsafe extern "C" fn backend_free(be: ggml_backend_t) {
    if let Some(b) = BACKENDS.remove(be as usize) {
        // SAFETY: the live backend ggml frees through this entry.
        if let Some(h) = unsafe { Backend::from_ptr(be) } {
            crate::backend::unextend(h);
        }
        b.dev.remote.drain();
        // SAFETY: made by dev_init_backend with Box; ggml frees a backend once, through this
        // entry.
        drop(unsafe { Box::from_raw(be) });
    }
}

unsafe extern "C" fn backend_set_tensor_async(
    be: ggml_backend_t,
    tensor: *mut ggml_tensor,
    data: *const c_void,
    offset: usize,
    size: usize,
) {
    let b = backend(be);
    let Some((t, w)) = on_wire(b.dev, tensor) else {
        return;
    };
    // SAFETY: ggml_backend_tensor_set_async passes `size` readable bytes; they are copied now.
    let bytes = unsafe { host_bytes(data as usize, size) }.to_vec();
    let weights = t
        .data_buffer()
        .is_some_and(|buf| buf.usage() == USAGE_WEIGHTS);
    b.dev
        .remote
        .post(move |c| upload(c, &w, weights, offset, &bytes));
}

unsafe extern "C" fn backend_get_tensor_async(
    be: ggml_backend_t,
    tensor: *const ggml_tensor,
    data: *mut c_void,
    offset: usize,
    size: usize,
) {
    let b = backend(be);
    let at = data as usize;
    let Some((_, w)) = on_wire(b.dev, tensor) else {
        // SAFETY: as below; written now, before the caller can synchronize.
        unsafe { read_failed(at, size) };
        return;
    };
    // SAFETY: ggml_backend_tensor_get_async's caller keeps `size` writable bytes at `data`
    // untouched until it synchronizes the backend, which waits for this job.
    b.dev
        .remote
        .post(move |c| unsafe { read_into(c, &w, offset, at, size) });
}

unsafe extern "C" fn backend_synchronize(be: ggml_backend_t) {
    backend(be).dev.remote.drain();
}

unsafe extern "C" fn backend_graph_compute(
    be: ggml_backend_t,
    cgraph: *mut ggml_cgraph,
) -> ggml_status {
    let b = backend(be);
    let d = b.dev;
    if let Some(e) = d.remote.failure() {
        log_error!(
            "{}: graph compute refused: {e}",
            d.long_name.to_string_lossy()
        );
        return GGML_STATUS_FAILED;
    }
    // SAFETY: ggml_backend_graph_compute passes a live graph.
    let Some(g) = (unsafe { Graph::from_ptr(cgraph) }) else {
        return GGML_STATUS_FAILED;
    };
    if g.n_nodes() == 0 {
        return GGML_STATUS_SUCCESS;
    }
    let index = d.index;
    let uid = g.uid();
    let mut last = lock(&d.last_graph);
    if uid != 0 && *last == uid {
        d.remote.post_compute(move |c| {
            let _ = c.graph_recompute(index);
        });
        return GGML_STATUS_SUCCESS;
    }
    // made and checked here, so that a graph the protocol cannot carry fails this call
    let payload = wire_graph(g, &d.remote).and_then(|(nodes, tensors)| {
        GraphMsg::payload(index, &nodes, &tensors)
            .map_err(|e| format!("graph of {} nodes cannot be sent: {e}", g.n_nodes()))
    });
    match payload {
        Ok(payload) => {
            *last = uid;
            d.remote.post_compute(move |c| {
                let _ = c.send_graph(&payload);
            });
            GGML_STATUS_SUCCESS
        }
        Err(e) => {
            *last = 0;
            log_error!("{}: {e}", d.long_name.to_string_lossy());
            GGML_STATUS_FAILED
        }
    }
}

unsafe extern "C" fn backend_event_record(be: ggml_backend_t, event: ggml_backend_event_t) {
    let b = backend(be);
    if let Some(m) = EVENTS.get(event as usize) {
        m.record(&b.dev.remote);
    }
}

unsafe extern "C" fn backend_event_wait(be: ggml_backend_t, event: ggml_backend_event_t) {
    let b = backend(be);
    // SAFETY: ggml_backend_event_wait passes a live event.
    let ev_dev = unsafe { (*event).device } as usize;
    // One queue per server keeps its own order; an event of another server is waited for here.
    let same_server =
        find_device(|d| d.device == ev_dev).is_some_and(|d| Arc::ptr_eq(&d.remote, &b.dev.remote));
    if !same_server {
        wait_event(event);
    }
}
