//! Our client for ggml-rpc servers, as a ggml backend: devices `RPC0`, `RPC1`, ... on
//! unchanged `rpc-server`s of ggml 0.26 (protocol 7), in place of upstream's client.
//!
//! Upstream's client aborts the process when a server is missing, dies or answers badly, and
//! blocks forever when one stops answering. This one speaks the same protocol through the
//! core's [`Client`](ggml_backend_rs_rpc::Client), which bounds every wait and turns
//! every failure into an error naming the server; here those errors become what the ggml ABI
//! can say: `ggml_backend_rpc_add_server` returns NULL (the endpoint and the cause logged), a
//! buffer allocation returns NULL, and a graph compute on a server whose connection failed
//! returns `GGML_STATUS_FAILED`, so `llama_decode` fails instead of the process. Reads from a
//! failed server give zeros. Nothing waits longer than the timeouts
//! (`GGML_BACKEND_RS_RPC_TIMEOUT`, below).
//!
//! The registry lists this client as backend "RPC" wherever upstream's would be (compiled in
//! with `GGML_RPC`, loaded as a module, or registered): [`substitute`] swaps the registries, and
//! the swapped-in one answers `ggml_backend_rpc_add_server` itself and forwards every other name
//! (the server's `ggml_backend_rpc_start_server`) to upstream's. `GGML_BACKEND_RS_RPC=upstream`
//! keeps upstream's client. Upstream's exported functions called by name
//! (`ggml_backend_rpc_add_server`, `ggml_backend_rpc_init`, ...) remain upstream's client.
//!
//! * `remote`: one thread per server that owns its connection and runs its requests in
//!   order (asynchronous ones queued, synchronous ones waited for), and the client's bounds;
//! * the C objects and their vtables, one file each as in `meta`: `state` (the objects as
//!   Rust state and how a vtable argument finds its object), `reg_iface` (the registries,
//!   connecting to a server, [`substitute`]), `device_iface` (devices, events), `buft_iface`,
//!   `buffer_iface` and `backend_iface`; `on_wire`: tensors and graphs in the protocol's form.

mod backend_iface;
mod buffer_iface;
mod buft_iface;
mod device_iface;
mod on_wire;
mod reg_iface;
mod remote;
mod state;

pub use reg_iface::add_server;
use reg_iface::substitute;

/// Lists our client in place of upstream's (see [`substitute`]): a substitute of the registry,
/// added when the library is loaded (an entry of the ELF `.init_array`, or of Mach-O's
/// `__DATA,__mod_init_func`, which the loader runs before any code of the library, as
/// `crate::abi::log` does for the panic hook). CMake links the crate's archive whole into
/// `libggml-base` and static programs, so the entry is kept; the plugin module, which links
/// members only, uses its host's registry and needs none.
#[used]
#[cfg_attr(
    any(target_os = "linux", target_os = "android", target_os = "freebsd"),
    link_section = ".init_array"
)]
#[cfg_attr(target_os = "macos", link_section = "__DATA,__mod_init_func")]
static SUBSTITUTE_UPSTREAMS_CLIENT: extern "C" fn() = substitute_upstreams_client;

extern "C" fn substitute_upstreams_client() {
    crate::registry::substitute_with(substitute);
}
