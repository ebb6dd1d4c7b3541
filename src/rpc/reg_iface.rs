//! The "RPC" registry and one registry per server (`RPC[host:port]`, what
//! `ggml_backend_rpc_add_server` returns), and connecting to a server.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::sync::{Arc, Mutex, OnceLock};

use ggml_backend_rs_rpc::{Client, Error as RpcError};

use super::buft_iface::BUFT_IFACE;
use super::device_iface::DEVICE_IFACE;
use super::remote::timeouts;
use super::remote::Remote;
use super::state::{lock, RpcDevice, Server, DEVICES, SERVERS};
use crate::abi::log::log_error;
use crate::abi::object::{reg_iface, CObject};
use crate::abi::*;
use crate::registry::{c_name, StaticReg};

/// The vtable of the "RPC" registry and of each server's.
const REG_IFACE: ggml_backend_reg_i = reg_iface!(RpcReg {
    get_name,
    get_device_count,
    get_device,
    get_proc_address,
});

static REG: StaticReg = StaticReg::new(REG_IFACE);

/// The "RPC" registry: no devices of its own (servers are added), the functions by name.
pub fn registry() -> ggml_backend_reg_t {
    REG.as_ptr()
}

/// A registry of the client: "RPC" or a server's.
#[derive(Clone, Copy)]
enum RpcReg {
    Rpc,
    Server(&'static Server),
}

impl CObject for RpcReg {
    const KIND: &'static str = "RPC registry";
    type Held = RpcReg;
    fn find(addr: usize) -> Option<RpcReg> {
        // (the "RPC" registry without the server list's lock, which adding a server holds)
        if addr == registry() as usize {
            return Some(RpcReg::Rpc);
        }
        lock(&SERVERS)
            .iter()
            .copied()
            .find(|s| s.reg == addr)
            .map(RpcReg::Server)
    }
}

impl RpcReg {
    fn get_name(&self, _: Reg) -> &CStr {
        match self {
            RpcReg::Rpc => c"RPC",
            RpcReg::Server(s) => &s.name,
        }
    }

    fn get_device_count(&self, _: Reg) -> usize {
        match self {
            RpcReg::Rpc => 0,
            RpcReg::Server(s) => s.devices.len(),
        }
    }

    fn get_device(&self, _: Reg, index: usize) -> ggml_backend_dev_t {
        let device = match self {
            RpcReg::Rpc => None,
            RpcReg::Server(s) => s.devices.get(index),
        };
        match device {
            Some(d) => d.device as ggml_backend_dev_t,
            None => {
                log_error!(
                    "ggml_backend_reg_dev_get: the RPC registry has no device {index} (servers are added with ggml_backend_rpc_add_server)"
                );
                std::ptr::null_mut()
            }
        }
    }

    fn get_proc_address(&self, _: Reg, name: &CStr) -> *mut c_void {
        if name == c"ggml_backend_rpc_add_server" {
            return add_server as *mut c_void;
        }
        upstream_proc_address(name)
    }
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
pub(super) fn connect(endpoint: &str, first: usize) -> Result<&'static Server, String> {
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

// --- in place of upstream's client ------------------------------------------------------

/// Upstream's RPC registry, where [`substitute`] replaced it (its `ggml_backend_rpc_start_server`
/// stays reachable through ours).
static UPSTREAM: OnceLock<usize> = OnceLock::new();

/// The registry to list for `reg`: ours in place of upstream's "RPC" (unless
/// `GGML_BACKEND_RS_RPC=upstream`), `reg` itself otherwise.
pub fn substitute(reg: Reg) -> Reg {
    if reg.name_string() != "RPC" || reg.as_ptr() == registry() {
        return reg;
    }
    if std::env::var("GGML_BACKEND_RS_RPC").is_ok_and(|v| v == "upstream") {
        return reg;
    }
    let _ = UPSTREAM.set(reg.as_ptr() as usize);
    // SAFETY: our registry is a static of this library.
    unsafe { Reg::from_ptr(registry()) }.unwrap_or(reg)
}

/// `name` looked up in upstream's RPC registry, when it was replaced.
fn upstream_proc_address(name: &CStr) -> *mut std::ffi::c_void {
    let Some(&reg) = UPSTREAM.get() else {
        return std::ptr::null_mut();
    };
    // SAFETY: the replaced registry was compiled in, or loaded from a library that the registry
    // entry which now lists ours keeps mapped.
    let Some(reg) = (unsafe { Reg::from_ptr(reg as ggml_backend_reg_t) }) else {
        return std::ptr::null_mut();
    };
    reg.proc_address(name)
}
