//! `ggml_backend_graph_copy`: a copy of an allocated graph in a buffer of another backend,
//! with the data of every tensor copied and views re-created over the copied sources; and
//! `ggml_backend_compare_graph_backend`, which runs a graph and its copy node by node.

use std::collections::HashMap;
use std::ptr;

use crate::abi::log::{abort, ggml_assert, log_error};
use crate::abi::*;

/// A graph copy that owns its contexts and buffer until it is converted into the C struct.
pub struct GraphCopy {
    pub buffer: Buffer,
    pub ctx_allocated: *mut ggml_context,
    pub ctx_unallocated: *mut ggml_context,
    pub graph: Graph,
}

impl GraphCopy {
    pub fn into_c(self) -> ggml_backend_graph_copy {
        ggml_backend_graph_copy {
            buffer: self.buffer.as_ptr(),
            ctx_allocated: self.ctx_allocated,
            ctx_unallocated: self.ctx_unallocated,
            graph: self.graph.as_ptr(),
        }
    }
}

pub const EMPTY: ggml_backend_graph_copy = ggml_backend_graph_copy {
    buffer: ptr::null_mut(),
    ctx_allocated: ptr::null_mut(),
    ctx_unallocated: ptr::null_mut(),
    graph: ptr::null_mut(),
};

/// Frees what a graph copy owns; NULL members are skipped.
pub fn free(copy: &ggml_backend_graph_copy) {
    // SAFETY: the members were created by `copy` below (or are NULL).
    unsafe {
        if let Some(b) = Buffer::from_ptr(copy.buffer) {
            crate::buffer::free(b);
        }
        if !copy.ctx_allocated.is_null() {
            ggml_free(copy.ctx_allocated);
        }
        if !copy.ctx_unallocated.is_null() {
            ggml_free(copy.ctx_unallocated);
        }
    }
}

/// Maps each tensor reachable from the graph to its duplicate.
struct Duplicator {
    ctx_allocated: *mut ggml_context,
    ctx_unallocated: *mut ggml_context,
    copies: HashMap<Tensor, Tensor>,
}

impl Duplicator {
    /// Duplicates `root` and everything it depends on (sources and view sources), sources
    /// first. Iterative, so deep graphs cannot overflow the stack.
    fn dup(&mut self, root: Tensor) -> Tensor {
        let mut stack = vec![(root, false)];
        while let Some((t, deps_done)) = stack.pop() {
            if self.copies.contains_key(&t) {
                continue;
            }
            if !deps_done {
                stack.push((t, true));
                stack.extend(t.view_src().into_iter().chain(t.srcs()).map(|d| (d, false)));
                continue;
            }
            let copy = self.dup_one(t);
            self.copies.insert(t, copy);
        }
        self.copies[&root]
    }

    fn dup_one(&self, src: Tensor) -> Tensor {
        ggml_assert!(
            !src.data().is_null(),
            "ggml_backend_graph_copy: graph must be allocated (tensor '{}')",
            src.name_string()
        );
        let ctx = if src.view_src().is_none() {
            self.ctx_allocated
        } else {
            self.ctx_unallocated
        };
        // SAFETY: the context has room for one tensor per graph hash slot; `src` is live.
        let dst = unsafe { ggml_dup_tensor(ctx, src.as_ptr()) };
        // SAFETY: ggml_dup_tensor returns a live tensor of `ctx` (it aborts on exhaustion).
        let dst_t = unsafe { Tensor::from_ptr(dst) }
            .unwrap_or_else(|| abort(file!(), line!(), "ggml_dup_tensor returned NULL"));
        // SAFETY: both tensors are live; `dst` is exclusively ours until the copy is returned.
        unsafe {
            let (s, d) = (&*src.as_ptr(), &mut *dst);
            d.nb = s.nb;
            if let Some(vs) = src.view_src() {
                d.view_src = self.copies[&vs].as_ptr();
                d.view_offs = s.view_offs;
            }
            d.op = s.op;
            d.flags = s.flags;
            d.op_params = s.op_params;
            ggml_set_name(dst, s.name.as_ptr());
            for (i, &sp) in s.src.iter().enumerate() {
                if let Some(st) = Tensor::from_ptr(sp) {
                    d.src[i] = self.copies[&st].as_ptr();
                }
            }
        }
        dst_t
    }
}

/// Copies `graph` (allocated) to `backend`. `None` when contexts or the buffer cannot be
/// allocated; the reason is logged.
pub fn copy(backend: Backend, graph: Graph) -> Option<GraphCopy> {
    let hash_size = graph.hash_size();
    // SAFETY: plain size computations of ggml.
    let mem_size = unsafe { ggml_tensor_overhead() }
        .checked_mul(hash_size)
        .and_then(|t| t.checked_add(unsafe { ggml_graph_overhead_custom(graph.size(), false) }))
        .unwrap_or_else(|| {
            abort(
                file!(),
                line!(),
                "ggml_backend_graph_copy: context size overflows",
            )
        });
    let params = || ggml_init_params {
        mem_size,
        mem_buffer: ptr::null_mut(),
        no_alloc: true,
    };
    // SAFETY: ggml_init with no_alloc only allocates the tensor metadata pool.
    let (ctx_allocated, ctx_unallocated) = unsafe { (ggml_init(params()), ggml_init(params())) };
    let fail = |what: &str| {
        log_error!("ggml_backend_graph_copy: failed to allocate {what} for graph copy");
        // SAFETY: ggml_free accepts the contexts just created (and NULL).
        unsafe {
            if !ctx_allocated.is_null() {
                ggml_free(ctx_allocated);
            }
            if !ctx_unallocated.is_null() {
                ggml_free(ctx_unallocated);
            }
        }
        None
    };
    if ctx_allocated.is_null() || ctx_unallocated.is_null() {
        return fail("context");
    }

    let mut dup = Duplicator {
        ctx_allocated,
        ctx_unallocated,
        copies: HashMap::new(),
    };
    let node_copies: Vec<Tensor> = graph.nodes().map(|n| dup.dup(n)).collect();

    // SAFETY: allocates every tensor of ctx_allocated (the non-views) in one buffer.
    let Some(buffer) = (unsafe {
        Buffer::from_ptr(ggml_backend_alloc_ctx_tensors(
            ctx_allocated,
            backend.as_ptr(),
        ))
    }) else {
        return fail("buffer");
    };

    // Data and views: sources before the tensors that read them.
    let mut initialised: HashMap<Tensor, ()> = HashMap::new();
    for node in graph.nodes() {
        init_tensor(&dup.copies, &mut initialised, node);
    }

    // SAFETY: the context has room for a graph of `graph.size()` nodes.
    let new_graph = unsafe { ggml_new_graph_custom(ctx_allocated, graph.size(), false) };
    // SAFETY: ggml_new_graph_custom returns a live graph (it aborts on exhaustion).
    let new_graph = unsafe { Graph::from_ptr(new_graph) }
        .unwrap_or_else(|| abort(file!(), line!(), "ggml_new_graph_custom failed"));
    for c in node_copies {
        new_graph.push_node(c);
    }
    Some(GraphCopy {
        buffer,
        ctx_allocated,
        ctx_unallocated,
        graph: new_graph,
    })
}

/// Gives the copy of `root` (and everything it depends on) its data: views are attached to
/// their copied source, other tensors receive the original's bytes.
fn init_tensor(copies: &HashMap<Tensor, Tensor>, done: &mut HashMap<Tensor, ()>, root: Tensor) {
    let mut stack = vec![(root, false)];
    while let Some((src, deps_done)) = stack.pop() {
        if done.contains_key(&src) {
            continue;
        }
        if !deps_done {
            stack.push((src, true));
            stack.extend(
                src.view_src()
                    .into_iter()
                    .chain(src.srcs())
                    .map(|d| (d, false)),
            );
            continue;
        }
        done.insert(src, ());
        let dst = copies[&src];
        if dst.view_src().is_some() {
            let status = crate::backend::view_init(dst);
            ggml_assert!(
                status == GGML_STATUS_SUCCESS,
                "ggml_backend_graph_copy: view init failed with status {status}"
            );
        } else {
            crate::tensor::copy(src, dst);
        }
    }
}

/// Runs `graph` on `backend1` and a copy of it on `backend2` and hands each pair of results
/// to `callback`: every node one at a time, or, with `test_nodes`, the whole graph once and
/// only those nodes. Returns false when the copy could not be made.
pub fn compare(
    backend1: Backend,
    backend2: Backend,
    graph: Graph,
    mut callback: impl FnMut(usize, Tensor, Tensor) -> bool,
    test_nodes: &[*const ggml_tensor],
) -> bool {
    let Some(copy) = copy(backend2, graph) else {
        return false;
    };
    let (g1, g2) = (graph, copy.graph);
    if !test_nodes.is_empty() {
        crate::backend::graph_compute(backend1, g1);
        crate::backend::graph_compute(backend2, g2);
        let mut verified = false;
        for i in 0..g1.n_nodes() {
            let n1 = g1.node(i);
            if test_nodes.iter().any(|&t| ptr::eq(t, n1.as_ptr())) {
                callback(i, n1, g2.node(i));
                verified = true;
            }
        }
        ggml_assert!(
            verified,
            "ggml_backend_compare_graph_backend: none of the test nodes is in the graph"
        );
    } else {
        for i in 0..g1.n_nodes() {
            let (t1, t2) = (g1.node(i), g2.node(i));
            // SAFETY: single-node views of two live graphs.
            let (mut v1, mut v2) = unsafe {
                (
                    ggml_graph_view(g1.as_ptr(), i as i32, i as i32 + 1),
                    ggml_graph_view(g2.as_ptr(), i as i32, i as i32 + 1),
                )
            };
            // SAFETY: the views live on this stack frame for the duration of the calls.
            let (v1, v2) = unsafe {
                (
                    Graph::from_ptr(&mut v1).expect("stack address"),
                    Graph::from_ptr(&mut v2).expect("stack address"),
                )
            };
            crate::backend::graph_compute(backend1, v1);
            crate::backend::graph_compute(backend2, v2);
            if t1.is_view_op() {
                continue;
            }
            if !callback(i, t1, t2) {
                break;
            }
        }
    }
    free(&copy.into_c());
    true
}
