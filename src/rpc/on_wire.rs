//! Tensors and graphs as the protocol carries them to a server.

use std::sync::Arc;

use ggml_backend_rs_rpc::wire::MAX_SRC;
use ggml_backend_rs_rpc::WireTensor;

use super::remote::Remote;
use super::state::{BUFFERS, PADDED_ROW};
use crate::abi::*;

/// `t` as the protocol carries it to `remote`: its buffer handle and address there when it
/// lives in a buffer of that server, none otherwise. Errors when a size or stride does not
/// fit the protocol's 32 bits.
pub(super) fn wire(t: Tensor, remote: &Arc<Remote>) -> Result<WireTensor, String> {
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
pub(super) fn wire_graph(
    g: Graph,
    remote: &Arc<Remote>,
) -> Result<(Vec<u64>, Vec<WireTensor>), String> {
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
pub(super) fn server_pads(t: Tensor) -> bool {
    t.blck_size() > 1 && t.ne(0) % PADDED_ROW != 0 && t.view_src().is_none()
}
