//! Tensors and graphs as the protocol carries them to a server.

use std::sync::Arc;

use ggml_backend_rs_core::owned::AddrSet;
use ggml_backend_rs_rpc::wire::MAX_SRC;
use ggml_backend_rs_rpc::WireTensor;

use super::remote::Remote;
use super::state::{BUFFERS, PADDED_ROW};
use crate::abi::*;

/// `t` as the protocol carries it to `remote`: its buffer handle and address there when it
/// lives in a buffer of that server, none otherwise. Errors when a size or stride does not
/// fit the protocol's 32 bits.
pub(super) fn wire(t: Tensor, remote: &Arc<Remote>) -> Result<WireTensor, String> {
    wire_in(t, &mut Handles::new(remote))
}

/// The server's handles of the buffers a graph's tensors live in, looked up once per buffer
/// (a graph has hundreds of tensors in a few buffers).
struct Handles<'a> {
    remote: &'a Arc<Remote>,
    /// (buffer address, its handle on `remote`'s server if it is one of its buffers)
    known: Vec<(usize, Option<u64>)>,
}

impl<'a> Handles<'a> {
    fn new(remote: &'a Arc<Remote>) -> Handles<'a> {
        Handles {
            remote,
            known: Vec::new(),
        }
    }

    fn of(&mut self, buffer: usize) -> Option<u64> {
        if let Some(&(_, h)) = self.known.iter().find(|(b, _)| *b == buffer) {
            return h;
        }
        let h = BUFFERS
            .get(buffer)
            .filter(|b| Arc::ptr_eq(&b.dev.remote, self.remote))
            .map(|b| b.handle);
        self.known.push((buffer, h));
        h
    }
}

fn wire_in(t: Tensor, handles: &mut Handles) -> Result<WireTensor, String> {
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
    if let Some(handle) = handles.of(t.buffer() as usize) {
        w.buffer = handle;
        w.data = t.data() as u64;
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
    w.set_name_bytes(t.name_bytes());
    Ok(w)
}

/// A graph as GRAPH_COMPUTE carries it: its nodes' ids, and every tensor they reach (sources
/// and view sources first), each with the graph's use count.
pub(super) fn wire_graph(
    g: Graph,
    remote: &Arc<Remote>,
) -> Result<(Vec<u64>, Vec<WireTensor>), String> {
    let mut handles = Handles::new(remote);
    let n = g.n_nodes();
    let mut seen = AddrSet::with_capacity_and_hasher(2 * n, Default::default());
    let mut out = Vec::with_capacity(2 * n);
    // depth-first, iteratively: (tensor, whether its inputs are already pushed)
    let mut stack: Vec<(Tensor, bool)> = g.nodes().map(|t| (t, false)).collect();
    stack.reverse();
    while let Some((t, expanded)) = stack.pop() {
        if expanded {
            let mut w = wire_in(t, &mut handles)?;
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
    Ok((g.nodes().map(|n| n.as_ptr() as u64).collect(), out))
}

/// Whether the server sizes and initialises `t` itself (INIT_TENSOR, GET_ALLOC_SIZE): a
/// quantized tensor of its own memory whose rows a CUDA server pads to [`PADDED_ROW`] elements.
/// (Every quantized type of ggml has blocks of more than one element, no other type does.)
pub(super) fn server_pads(t: Tensor) -> bool {
    t.blck_size() > 1 && t.ne(0) % PADDED_ROW != 0 && t.view_src().is_none()
}
