//! What the ggml versions' schedulers (`ggml_backend_sched`) do differently, as data: each
//! ABI class's module in the root crate holds one [`SchedPolicy`]; the core's passes take
//! their parts, the edge carries out the rest. Graph identities (uids) are not here: the
//! caller's graph and each split's get fresh ones wherever the version's graphs have them.

use crate::{assign, partition};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedPolicy {
    /// Passes 1–4.
    pub assign: assign::Policy,
    /// Pass 5 and the graph inputs' pipeline copies.
    pub partition: partition::Policy,
    /// How the size of the graph handed to ggml-alloc is counted, which
    /// `GGML_SCHED_DEBUG_REALLOC` compares between graphs.
    pub alloc_graph_size: AllocGraphSize,
    /// A failed re-plan of the compute buffers (`ggml_gallocr_reserve_n`) fails the
    /// allocation at once; otherwise the allocation is tried anyway.
    pub failed_reserve_fails: bool,
    /// Before a split without inputs on another backend than the previous split, wait for the
    /// previous split (its event, or its backend): the allocator may have given the later
    /// split memory the earlier one still uses.
    pub wait_before_split_without_inputs: bool,
    /// Record the backend's event after every split; otherwise only after splits with inputs.
    pub event_after_every_split: bool,
    /// `GGML_SCHED_DEBUG` names nodes' ops by `ggml_op_desc` (a unary op's own name);
    /// otherwise by `ggml_op_name` (UNARY).
    pub debug_op_desc: bool,
}

/// How the split graph's size is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocGraphSize {
    /// Room for `MAX_SPLIT_INPUTS` inputs per split, whatever they hold.
    PerSplit,
    /// The inputs there are (graph inputs included) and the allocation dependencies.
    Counted,
}
