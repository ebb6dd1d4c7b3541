//! A split policy by GGUF tensor name, for meta devices that libllama does not know are meta
//! devices (the plugin's tensor-parallel devices).
//!
//! In tensor mode libllama passes `ggml_backend_meta_device` a callback that splits each
//! weight and cache by its name, using the model's hyperparameters (head size, GQA ratio). A
//! program that merely names a plugin device gives no callback, so the plugin decides from
//! what it can see: the name, type and shape of every tensor allocated on the device
//! ([`NamePolicy::record`]). The layout follows libllama's rules for the same names:
//!
//! | tensor | split |
//! |---|---|
//! | `blk.N.attn_{q,k,v}.weight`, fused `attn_qkv.weight` (3 segments) | rows (axis 1), whole heads |
//! | their biases | axis 0, like the rows |
//! | `blk.N.attn_output.weight` | columns (axis 0), like Q's rows |
//! | `blk.N.attn_{q,k}_norm.weight` | mirrored when 1-D (per head), else by heads |
//! | `blk.N.attn_sinks.weight`, `cache_{k,v}_lN` | axis 0, by heads |
//! | `blk.N.ffn_{up,gate}[_exps]`, fused `ffn_gate_up[_exps]` (2 segments) | rows (axis 1) |
//! | `blk.N.ffn_up.weight` with twice `ffn_down`'s columns and no `ffn_gate` (Phi-3's fused gate and up) | rows, 2 segments |
//! | `blk.N.ffn_down[_exps].weight` | columns (axis 0) |
//! | `blk.N.ffn_down_exps.bias` | partial (added once, by device 0) |
//! | `output.weight`, `output.bias` | vocabulary rows |
//! | gated delta net (Qwen3.5): `attn_qkv`, `ssm_conv1d` (Q, K and V segments), `attn_gate`, `ssm_out`, `ssm_{alpha,beta,dt,a}`, `cache_{r,s}_lN` | by K heads in every segment, as libllama |
//! | everything else (norms, embeddings, routers, shared experts) | mirrored |
//!
//! Heads: a layer's attention is divided in units of KV heads when the head size is known:
//! from a per-head Q/K norm (its length), from attention sinks (one per Q head), or from the
//! caller (`head_dim`). Otherwise each device gets an equal share of K's rows when the share
//! is a multiple of 16 rows (no head is smaller, and every head size in use is a multiple of
//! 16): that is whole heads exactly when the number of devices divides the number of KV heads
//! (true of every grouped-query model with 2, 4 or 8 KV heads on 2 devices). Otherwise shares
//! can cut a head: [`NamePolicy::check_head_size`] compares them with the head size the graph
//! shows (the plugin asks it for every rope node when the context reserves its graphs), and
//! the caller's `head_dim` is the way out. Attention stays mirrored (computed whole on every device, at
//! the memory cost of one full copy of its weights and KV cache per device) where it cannot
//! be divided: a single KV head, shares that are not whole quantization blocks, a full-width
//! Q norm, Q rows that are neither the output projection's columns nor twice as many (a gate
//! folded into Q after each head, as in Qwen3.5), or a layer with unknown `attn_*` tensors,
//! whose layout this table does not describe. Recurrent layers other than Qwen3.5's gated
//! delta net (one K head, Qwen3-Next's fused `ssm_ba`, Mamba) stay mirrored.
//!
//! Sizes: each device's share is a multiple of a granule and the remainder goes to the last
//! device, with the device order rotated per layer, as libllama's callback does. How the granule
//! grows beyond the quantization block and how the rotation counts layers changed between ggml
//! versions ([`Conventions`], given by the caller). What the plugin cannot see — the sliding-window
//! pattern, `--tensor-split` — it does not follow: its shares are equal, and sliding-window layers
//! rotate with the other attention layers.
//!
//! Decisions are per layer and fixed the first time a layer is asked about, so that every
//! tensor of a layer agrees even if its tensors arrive in several allocations (a tensor that
//! arrives later cannot change them). They are kept per shape: another model with the same
//! tensor names and other shapes (a draft model) gets decisions of its own, and a KV cache
//! follows the decision made for its K (or V) rows.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use regex::Regex;

use crate::split::{RawSplitState, AXIS_PARTIAL, MAX_DEVICES};

/// What the policy knows of one tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Info {
    /// Elements per quantization block of the tensor's type (1 for f32/f16).
    pub blck: i64,
    pub ne: [i64; 4],
}

/// Without a known head size, equal shares of K's rows are used only when they are a multiple
/// of this: the smallest head size in use (16, test models), of which every other (32 to 256)
/// is a multiple. A share smaller than a head (a single KV head over two devices) or a
/// fraction of one keeps attention mirrored.
const MIN_HEAD: i64 = 16;

/// A layer's attention: mirrored, or split in `units` (KV heads, or equal shares when the
/// head size is unknown), `per_device[d]` of them on device `d`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Attn {
    Mirrored,
    Split { units: i64, per_device: Vec<i64> },
}

/// How libllama's split callback sizes and rotates the slices, which differs between ggml
/// versions (the version module of the root crate says which applies).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conventions {
    /// FFN rows and recurrent heads are split in multiples of lcm(block, `perf_rows`);
    /// attention's block doubles towards `perf_rows` while every device still gets a share of
    /// a KV head's group of Q rows. 1: the quantization block alone.
    pub perf_rows: i64,
    /// Layer `l`'s slices rotate by the number of earlier layers of its kind (recurrent or
    /// attention), not by `l`.
    pub rotate_within_kind: bool,
}

impl Conventions {
    /// Whole quantization blocks, rotated by the layer index.
    pub const BLOCKS: Conventions = Conventions {
        perf_rows: 1,
        rotate_within_kind: false,
    };
}

/// The policy of one meta device over `n` devices.
#[derive(Debug)]
pub struct NamePolicy {
    n: usize,
    /// Each device's share of a split tensor, relative to the others' ([`NamePolicy::with_weights`]).
    weights: Vec<u64>,
    conventions: Conventions,
    head_dim: Option<i64>,
    tensors: HashMap<String, Info>,
    /// Per layer: the attention decisions made, each for the rows of Q, K and V it was made
    /// for (two models with the same tensor names and other shapes keep theirs apart).
    attn: HashMap<u32, Vec<(Rows, Attn)>>,
    /// Per (layer, FFN width): the granule the FFN's splits are multiples of, and their rotation.
    ffn_layout: HashMap<(u32, i64), (i64, usize)>,
    /// Per layer: the gated-delta-net decision, made once (None: mirrored).
    recurrent: HashMap<u32, Option<Recurrent>>,
    /// Whether gated-delta-net layers may be split ([`NamePolicy::mirroring_recurrent`]).
    split_recurrent: bool,
    /// While [`NamePolicy::peek`] answers: decisions are made but not kept.
    peeking: bool,
}

/// A gated-delta-net layer (Qwen3.5) split by heads as libllama's callback splits it: its
/// fused projection and conv kernel in Q, K and one V segment per K head group, its gate,
/// output projection and per-head vectors in the V segments, its conv and recurrent states
/// alike. V head `h` reads K head `h mod n_k`, so each device takes the same K heads of every
/// segment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Recurrent {
    /// Values per head (`ssm_norm`'s length).
    hd: i64,
    /// K heads; V heads are `ratio` times as many.
    n_k: i64,
    ratio: i64,
    /// The conv kernel's width (the conv state keeps `d_conv - 1` columns).
    d_conv: i64,
    /// K heads per device.
    per_device: Vec<i64>,
}

impl Recurrent {
    /// `segs` segments, each `unit` times each device's K heads, along `axis`.
    fn split(&self, axis: i32, segs: i64, unit: i64) -> RawSplitState {
        let seg: Vec<i64> = self.per_device.iter().map(|h| h * unit).collect();
        along(axis, &vec![seg; segs as usize])
    }
}

/// The rows of a layer's Q, K and V projections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rows {
    q: i64,
    k: i64,
    v: i64,
}

/// A tensor name, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Name<'a> {
    /// `blk.<layer>.<base>[.<weight|bias>]`
    Block {
        layer: u32,
        base: &'a str,
        bias: bool,
    },
    /// `cache_<k|v|r|s>_l<layer>`
    Cache {
        kind: char,
        layer: u32,
    },
    /// `output.weight` / `output.bias`
    Output,
    Other,
}

fn parse(name: &str) -> Name<'_> {
    static BLOCK: OnceLock<Regex> = OnceLock::new();
    static CACHE: OnceLock<Regex> = OnceLock::new();
    let block = BLOCK.get_or_init(|| {
        Regex::new(r"^blk\.([0-9]+)\.([A-Za-z0-9_]+)(?:\.(weight|bias))?$").expect("valid regex")
    });
    let cache =
        CACHE.get_or_init(|| Regex::new(r"^cache_([kvrs])_l([0-9]+)$").expect("valid regex"));
    if let Some(c) = block.captures(name) {
        let (Some(il), Some(base)) = (c.get(1), c.get(2)) else {
            return Name::Other;
        };
        let Ok(layer) = il.as_str().parse() else {
            return Name::Other;
        };
        return Name::Block {
            layer,
            base: base.as_str(),
            bias: c.get(3).is_some_and(|k| k.as_str() == "bias"),
        };
    }
    if let Some(c) = cache.captures(name) {
        let (Some(k), Some(il)) = (c.get(1), c.get(2)) else {
            return Name::Other;
        };
        let Ok(layer) = il.as_str().parse() else {
            return Name::Other;
        };
        let kind = k.as_str().chars().next().unwrap_or('?');
        return Name::Cache { kind, layer };
    }
    if name == "output.weight" || name == "output.bias" {
        return Name::Output;
    }
    Name::Other
}

/// The attention tensors whose layout the table describes; any other `attn_*` tensor in a
/// layer keeps that layer's attention mirrored.
const KNOWN_ATTN: &[&str] = &[
    "attn_norm",
    "attn_norm_2",
    "attn_post_norm",
    "attn_q",
    "attn_k",
    "attn_v",
    "attn_qkv",
    "attn_output",
    "attn_q_norm",
    "attn_k_norm",
    "attn_sinks",
];

/// The layer index and the first name segment after it of a tensor `blk.<layer>.<base>...`.
fn block_base(name: &str) -> Option<(u32, &str)> {
    let (layer, rest) = name.strip_prefix("blk.")?.split_once('.')?;
    let base = rest.split('.').next().unwrap_or(rest);
    Some((layer.parse().ok()?, base))
}

/// Splits `e` elements over devices of relative `weights` in multiples of `g` as libllama
/// does: device `d`'s share ends at `e · (its and earlier devices' weights) / Σweights`, the
/// devices taken in order rotated by `rot`, rounded down to `g`, the remainder (which need not
/// be a multiple of `g`) to the last. Equal weights give equal shares. `None` for no devices
/// or a negative `e`.
fn distribute(e: i64, g: i64, weights: &[u64], rot: usize) -> Option<Vec<i64>> {
    let g = g.max(1);
    let n = weights.len();
    if n == 0 || e < 0 {
        return None;
    }
    let total: u128 = weights.iter().map(|&w| w as u128).sum();
    let mut out = vec![0; n];
    let (mut low, mut scan) = (0, 0u128);
    for j in 0..n - 1 {
        let d = (j + rot) % n;
        scan += weights[d] as u128;
        let mut high = (e as u128 * scan / total.max(1)) as i64;
        high -= high % g;
        out[d] = high - low;
        low = high;
    }
    out[(n - 1 + rot) % n] = e - low;
    Some(out)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a.abs()
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: i64, b: i64) -> i64 {
    if a == 0 || b == 0 {
        0
    } else {
        a / gcd(a, b) * b
    }
}

fn mirrored() -> RawSplitState {
    RawSplitState::mirrored()
}

fn partial() -> RawSplitState {
    RawSplitState {
        axis: AXIS_PARTIAL,
        ..mirrored()
    }
}

/// Each segment of extents `segs` split along `axis` by an attention decision's units.
fn split_by(a: &Attn, axis: i32, segs: &[i64]) -> RawSplitState {
    let Attn::Split { units, per_device } = a else {
        return mirrored();
    };
    let mut out = Vec::with_capacity(segs.len());
    for &e in segs {
        if e % units != 0 {
            return mirrored();
        }
        out.push(per_device.iter().map(|u| e / units * u).collect());
    }
    along(axis, &out)
}

/// A split along `axis` with one entry per segment, each a per-device list.
fn along(axis: i32, segments: &[Vec<i64>]) -> RawSplitState {
    let mut s = RawSplitState {
        axis,
        n_segments: segments.len() as u32,
        ..RawSplitState::mirrored()
    };
    let n = segments.first().map_or(0, Vec::len);
    for (i, seg) in segments.iter().enumerate() {
        s.ne[i * n..(i + 1) * n].copy_from_slice(seg);
    }
    s
}

impl NamePolicy {
    /// A policy for `n` devices (1..=16); `head_dim` overrides the head size wherever the
    /// tensors do not tell it.
    pub fn new(n: usize, head_dim: Option<i64>) -> NamePolicy {
        let n = n.clamp(1, MAX_DEVICES);
        NamePolicy {
            n,
            weights: vec![1; n],
            conventions: Conventions::BLOCKS,
            head_dim: head_dim.filter(|&h| h > 0),
            tensors: HashMap::new(),
            attn: HashMap::new(),
            ffn_layout: HashMap::new(),
            recurrent: HashMap::new(),
            split_recurrent: true,
            peeking: false,
        }
    }

    /// The same policy sizing and rotating slices by `c` (default: [`Conventions::BLOCKS`]).
    pub fn with_conventions(mut self, c: Conventions) -> NamePolicy {
        self.conventions = c;
        self
    }

    /// The same policy giving device `j` the share `weights[j] / Σweights` of every split
    /// tensor (as libllama's `--tensor-split`); ignored unless there is a positive weight for
    /// each device.
    pub fn with_weights(mut self, weights: &[u64]) -> NamePolicy {
        if weights.len() == self.n && weights.iter().all(|&w| w > 0) {
            self.weights = weights.to_vec();
        }
        self
    }

    /// The same policy with every recurrent layer mirrored: for devices that cannot run the
    /// ops a split gated delta net needs on each of them (see [`NamePolicy::splits_recurrent`]).
    pub fn mirroring_recurrent(mut self) -> NamePolicy {
        self.split_recurrent = false;
        self
    }

    /// Whether `layer` is a gated-delta-net layer split across the devices: its GET_ROWS of
    /// the states, CONCAT, SSM_CONV and GATED_DELTA_NET must then run on every device, since
    /// a result computed elsewhere would come back whole to consumers that are split.
    pub fn splits_recurrent(&mut self, layer: u32) -> bool {
        self.n > 1 && self.recurrent(layer).is_some()
    }

    /// Notes a tensor allocated on the device (the latest shape for each name counts).
    /// Decisions already made stay: a layer's tensors must agree even when some of them are
    /// placed before others are known.
    pub fn record(&mut self, name: &str, info: Info) {
        if self.tensors.get(name) != Some(&info) {
            self.tensors.insert(name.to_owned(), info);
        }
    }

    fn get(&self, layer: u32, base: &str) -> Option<Info> {
        self.tensors
            .get(&format!("blk.{layer}.{base}.weight"))
            .copied()
    }

    fn layer_has(&self, layer: u32, pred: impl Fn(&str) -> bool) -> bool {
        self.tensors
            .keys()
            .filter_map(|k| block_base(k))
            .any(|(l, base)| l == layer && pred(base))
    }

    /// The rotation of `layer`'s slices over the devices (one pass over the tensors: callers
    /// keep it with their per-layer decision).
    fn rotation(&self, layer: u32) -> usize {
        if !self.conventions.rotate_within_kind {
            return layer as usize % self.n;
        }
        // recurrent layers (a gated delta net, Mamba, LFM2's short convolution) have `ssm_*`
        // or `shortconv` tensors; a layer counts the earlier layers of its own kind
        let recurrent: HashSet<u32> = self
            .tensors
            .keys()
            .filter_map(|k| block_base(k))
            .filter(|(_, base)| base.starts_with("ssm_") || base.starts_with("shortconv"))
            .map(|(l, _)| l)
            .collect();
        let kind = recurrent.contains(&layer);
        let index = (0..layer).filter(|l| recurrent.contains(l) == kind).count();
        index % self.n
    }

    /// One past the highest layer index recorded.
    fn n_layer(&self) -> usize {
        self.tensors
            .keys()
            .filter_map(|k| match parse(k) {
                Name::Block { layer, .. } => Some(layer as usize + 1),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// The split state of the tensor `name` (shape `info`), in the C layout the meta device
    /// checks like any callback's answer.
    pub fn split(&mut self, name: &str, info: Info) -> RawSplitState {
        self.record(name, info);
        let n = self.n;
        if n == 1 {
            return mirrored();
        }
        match parse(name) {
            Name::Block { layer, base, bias } => self.block(layer, base, bias, info),
            Name::Cache { kind, layer } => match kind {
                // a cache follows the decision made for its K (or V) rows
                'k' | 'v' => {
                    let a = self.attention_for_cache(layer, kind, info.ne[0]);
                    split_by(&a, 0, &[info.ne[0]])
                }
                'r' | 's' => match self.recurrent(layer) {
                    // conv state: (d_conv - 1) values per channel, channels as in attn_qkv;
                    // recurrent state: hd x hd values per V head
                    Some(r) if kind == 'r' => r.split(0, 2 + r.ratio, r.hd * (r.d_conv - 1)),
                    Some(r) => r.split(0, r.ratio, r.hd * r.hd),
                    None => mirrored(),
                },
                _ => mirrored(),
            },
            Name::Output => {
                let axis = if name.ends_with(".bias") { 0 } else { 1 };
                let rot = self.n_layer() % n;
                match distribute(info.ne[axis], 1, &self.weights, rot) {
                    Some(d) => along(axis as i32, &[d]),
                    None => mirrored(),
                }
            }
            Name::Other => mirrored(),
        }
    }

    /// The split [`NamePolicy::split`] would give the tensor now, without fixing any decision:
    /// for a size asked before the layer's other tensors may have been seen (the decision is
    /// made when the split is asked for, and may then differ).
    pub fn peek(&mut self, name: &str, info: Info) -> RawSplitState {
        self.peeking = true;
        let s = self.split(name, info);
        self.peeking = false;
        s
    }

    fn block(&mut self, layer: u32, base: &str, bias: bool, info: Info) -> RawSplitState {
        if let Some(r) = self.recurrent(layer) {
            match (base, bias) {
                // channels: Q, K, then the V groups, each `n_k * hd` rows
                ("attn_qkv" | "ssm_conv1d", false) => return r.split(1, 2 + r.ratio, r.hd),
                ("attn_gate", false) => return r.split(1, r.ratio, r.hd),
                ("ssm_out", false) => return r.split(0, r.ratio, r.hd),
                // one value per V head
                ("ssm_alpha" | "ssm_beta", false) => return r.split(1, r.ratio, 1),
                ("ssm_dt", true) | ("ssm_a", false) => return r.split(0, r.ratio, 1),
                _ => {}
            }
        }
        match base {
            "attn_q" | "attn_k" | "attn_v" => {
                let axis = if bias { 0 } else { 1 };
                self.by_heads(layer, axis, &[info.ne[axis as usize]])
            }
            "attn_qkv" => {
                let axis = if bias { 0 } else { 1 };
                match self.qkv_segments(layer) {
                    Some(segs) if segs.iter().sum::<i64>() == info.ne[axis as usize] => {
                        self.by_heads(layer, axis, &segs)
                    }
                    _ => mirrored(),
                }
            }
            "attn_output" if !bias => self.by_heads(layer, 0, &[info.ne[0]]),
            "attn_q_norm" | "attn_k_norm" if !bias => {
                if info.ne[1] == 1 {
                    mirrored()
                } else {
                    self.by_heads(layer, 1, &[info.ne[1]])
                }
            }
            "attn_sinks" if !bias => self.by_heads(layer, 0, &[info.ne[0]]),
            // Phi-3 fuses gate and up into ffn_up (the graph's SwiGLU takes the two halves):
            // each half of the weight and of its bias is split like the down projection's
            // columns. (libllama's callback splits it in one segment, which the meta backend
            // refuses at context creation.)
            "ffn_up" if self.fused_gate_up(layer) => {
                let axis = if bias { 0 } else { 1 };
                let e = info.ne[axis as usize] / 2;
                self.ffn(layer, axis, &[e, e])
            }
            "ffn_up" | "ffn_gate" | "ffn_up_exps" | "ffn_gate_exps" => {
                let axis = if bias { 0 } else { 1 };
                self.ffn(layer, axis, &[info.ne[axis as usize]])
            }
            "ffn_gate_up" | "ffn_gate_up_exps" if !bias => {
                let e = info.ne[1];
                if e % 2 != 0 {
                    return mirrored();
                }
                self.ffn(layer, 1, &[e / 2, e / 2])
            }
            "ffn_down" | "ffn_down_exps" if !bias => self.ffn(layer, 0, &[info.ne[0]]),
            "ffn_down_exps" => partial(),
            _ => mirrored(),
        }
    }

    /// The layer's gated-delta-net decision, made once: heads from `ssm_norm` (values per
    /// head), `attn_gate` (V rows), `ssm_conv1d` (channels: 2 x K rows + V rows) and `ssm_a`
    /// (V heads); None (mirrored) for any other layer, or shapes that do not fit together.
    fn recurrent(&mut self, layer: u32) -> Option<Recurrent> {
        if let Some(r) = self.recurrent.get(&layer) {
            return r.clone();
        }
        let r = self.decide_recurrent(layer);
        if !self.peeking {
            self.recurrent.insert(layer, r.clone());
        }
        r
    }

    fn decide_recurrent(&self, layer: u32) -> Option<Recurrent> {
        if !self.split_recurrent {
            return None;
        }
        let hd = self.get(layer, "ssm_norm").filter(|t| t.ne[1] == 1)?.ne[0];
        let gate = self.get(layer, "attn_gate")?;
        let value = gate.ne[1];
        let conv = self.get(layer, "ssm_conv1d")?;
        let n_v = self.tensors.get(&format!("blk.{layer}.ssm_a"))?.ne[0];
        let qkv = self.get(layer, "attn_qkv")?;
        let out = self.get(layer, "ssm_out")?;
        // Qwen3.5's separate beta and alpha projections (Qwen3-Next fuses them into ssm_ba and
        // pairs V heads with K heads in another order: not this layout)
        self.get(layer, "ssm_alpha")?;
        self.get(layer, "ssm_beta")?;
        let (d_conv, channels) = (conv.ne[0], conv.ne[1]);
        let key = (channels - value) / 2;
        let fits = hd > 0
            && d_conv > 1
            && value == n_v * hd
            && key > 0
            && 2 * key + value == channels
            && key % hd == 0
            && qkv.ne[1] == channels
            && out.ne[0] == value;
        if !fits {
            return None;
        }
        let n_k = key / hd;
        if n_v % n_k != 0 || n_k < 2 {
            return None;
        }
        // whole heads that are whole blocks of the projections' rows and of ssm_out's
        // columns (libllama: lcm(block, head size) rows)
        let blck = [qkv.blck, out.blck, gate.blck, self.conventions.perf_rows]
            .into_iter()
            .fold(1, lcm);
        let granule = lcm(blck, hd) / hd;
        let per_device = distribute(n_k, granule, &self.weights, self.rotation(layer))?;
        Some(Recurrent {
            hd,
            n_k,
            ratio: n_v / n_k,
            d_conv,
            per_device,
        })
    }

    /// Whether the layer's `ffn_up` weight holds the gate rows and then the up rows: no
    /// `ffn_gate`, and twice as many rows as the down projection has columns.
    fn fused_gate_up(&self, layer: u32) -> bool {
        let (Some(up), Some(down)) = (self.get(layer, "ffn_up"), self.get(layer, "ffn_down"))
        else {
            return false;
        };
        self.get(layer, "ffn_gate").is_none() && up.ne[1] == 2 * down.ne[0]
    }

    /// The three segments of a fused QKV tensor: Q's rows (the model width, as in libllama)
    /// and two equal K and V parts.
    fn qkv_segments(&self, layer: u32) -> Option<Vec<i64>> {
        let qkv = self.get(layer, "attn_qkv")?;
        let (n_embd, rows) = (qkv.ne[0], qkv.ne[1]);
        let kv2 = rows - n_embd;
        if kv2 <= 0 || kv2 % 2 != 0 {
            return None;
        }
        Some(vec![n_embd, kv2 / 2, kv2 / 2])
    }

    /// Splits each segment of extents `segs` along `axis` by the layer's attention units.
    fn by_heads(&mut self, layer: u32, axis: i32, segs: &[i64]) -> RawSplitState {
        let a = self.attention(layer);
        split_by(&a, axis, segs)
    }

    /// The rows of the layer's Q, K and V as recorded (None without K).
    fn rows(&self, layer: u32) -> Option<Rows> {
        match (
            self.get(layer, "attn_q"),
            self.get(layer, "attn_k"),
            self.get(layer, "attn_v"),
        ) {
            (Some(q), Some(k), Some(v)) => Some(Rows {
                q: q.ne[1],
                k: k.ne[1],
                v: v.ne[1],
            }),
            _ => self.qkv_segments(layer).map(|s| Rows {
                q: s[0],
                k: s[1],
                v: s[2],
            }),
        }
    }

    /// The layer's attention decision for its current rows, made once.
    fn attention(&mut self, layer: u32) -> Attn {
        let Some(rows) = self.rows(layer) else {
            return Attn::Mirrored;
        };
        if let Some((_, a)) = self
            .attn
            .get(&layer)
            .and_then(|v| v.iter().find(|(r, _)| *r == rows))
        {
            return a.clone();
        }
        let a = self.decide_attention(layer);
        if !self.peeking {
            self.attn.entry(layer).or_default().push((rows, a.clone()));
        }
        a
    }

    /// The decision a KV cache of `ne0` rows follows: the one made for a model whose K (or V)
    /// has those rows, else the current one.
    fn attention_for_cache(&mut self, layer: u32, kind: char, ne0: i64) -> Attn {
        let made = self.attn.get(&layer).and_then(|v| {
            v.iter()
                .find(|(r, _)| if kind == 'k' { r.k == ne0 } else { r.v == ne0 })
        });
        match made {
            Some((_, a)) => a.clone(),
            None => self.attention(layer),
        }
    }

    fn decide_attention(&self, layer: u32) -> Attn {
        let n = self.n as i64;
        let recurrent_or_unknown = self.layer_has(layer, |b| {
            b.starts_with("ssm_")
                || b == "attn_gate"
                || (b.starts_with("attn_") && !KNOWN_ATTN.contains(&b))
        });
        if recurrent_or_unknown {
            return Attn::Mirrored;
        }
        let Some(Rows { q, k, v }) = self.rows(layer) else {
            return Attn::Mirrored;
        };
        if q <= 0 || k <= 0 || v <= 0 || q % k != 0 {
            return Attn::Mirrored;
        }
        // Columns of the output projection follow Q's rows; they must be whole blocks. Q rows
        // twice the output's columns hold a gate after each head's rows (Qwen3.5 and
        // Qwen3-Next fold it into Q): the rows of a head and its gate split together. Any
        // other difference is a layout this table does not describe.
        let out = self.get(layer, "attn_output");
        let q = match out.map(|o| o.ne[0]) {
            Some(cols) if cols == q => q,
            Some(cols) if 2 * cols == q => cols,
            Some(_) => return Attn::Mirrored,
            None => q,
        };
        if q % k != 0 {
            return Attn::Mirrored;
        }
        let n_gqa = q / k;
        let out_blck = out.map_or(256, |o| o.blck);
        let head_dim = self.head_dim_of(layer, q, k);
        let (units, granule) = match head_dim {
            Some(hd) if k % hd == 0 && q % hd == 0 => {
                let n_kv = k / hd;
                // libllama's granularity: whole groups of Q heads per KV head, rounded up to
                // whole blocks of the output projection's columns, the block first doubled
                // towards `perf_rows` while each device would still get a share of a group.
                let group = n_gqa * hd;
                let mut blck = out_blck;
                while blck < self.conventions.perf_rows && blck * (self.n as i64) < group {
                    blck *= 2;
                }
                (n_kv, lcm(group, blck) / group)
            }
            Some(_) => return Attn::Mirrored,
            // equal shares that could be whole heads: no model has heads of fewer than 16
            // rows, and every head size in use is a multiple of 16
            None if k % n == 0 && (k / n) % MIN_HEAD == 0 => (n, 1),
            None => return Attn::Mirrored,
        };
        if units < 2 || v % units != 0 {
            return Attn::Mirrored;
        }
        let Some(per_device) = distribute(units, granule, &self.weights, self.rotation(layer))
        else {
            return Attn::Mirrored;
        };
        let whole_blocks = per_device.iter().all(|u| (q / units * u) % out_blck == 0);
        if !whole_blocks {
            return Attn::Mirrored;
        }
        Attn::Split { units, per_device }
    }

    /// The head size of `layer` where a tensor tells it (per-head norms, sinks), else the
    /// caller's. A full-width Q norm means attention cannot be divided by heads at all.
    fn head_dim_of(&self, layer: u32, q: i64, k: i64) -> Option<i64> {
        if let Some(qn) = self.get(layer, "attn_q_norm") {
            if qn.ne[1] == 1 && qn.ne[0] < q {
                return Some(qn.ne[0]);
            }
            if qn.ne[1] == 1 && qn.ne[0] == q {
                // one norm over all heads: only a single head could be split this way
                return Some(q);
            }
        }
        if let Some(kn) = self.get(layer, "attn_k_norm") {
            if kn.ne[1] == 1 && kn.ne[0] <= k {
                return Some(kn.ne[0]);
            }
        }
        if let Some(s) = self.get(layer, "attn_sinks") {
            if s.ne[0] > 0 && q % s.ne[0] == 0 {
                return Some(q / s.ne[0]);
            }
        }
        self.head_dim
    }

    /// Checks a layer's attention split against the head size the graph shows (`hd`: rope's
    /// rows). Equal shares chosen without a known head size may cut heads; the error says
    /// which layer and how to give the head size instead.
    pub fn check_head_size(&mut self, layer: u32, hd: i64) -> Result<(), String> {
        if hd <= 0 {
            return Ok(());
        }
        let Attn::Split { units, per_device } = self.attention(layer) else {
            return Ok(());
        };
        let Some(k) = self
            .get(layer, "attn_k")
            .map(|k| k.ne[1])
            .or_else(|| self.qkv_segments(layer).map(|s| s[1]))
        else {
            return Ok(());
        };
        let shares: Vec<i64> = per_device.iter().map(|u| k / units * u).collect();
        if shares.iter().all(|s| s % hd == 0) {
            return Ok(());
        }
        Err(format!(
            "layer {layer}'s attention is split into K shares of {shares:?} rows, which cut its \
             heads of {hd} rows (the head size is not in the model's tensors): set \
             GGML_BACKEND_RS_TP_HEAD_DIM={hd}"
        ))
    }

    fn ffn(&mut self, layer: u32, axis: i32, segs: &[i64]) -> RawSplitState {
        let width = segs.first().copied().unwrap_or(0);
        let (g, rot) = match self.ffn_layout.get(&(layer, width)) {
            Some(&decided) => decided,
            None => {
                // The down projection's columns are split; its blocks bound every FFN split.
                let down = self
                    .tensors
                    .get(&format!("blk.{layer}.ffn_down.weight"))
                    .or_else(|| {
                        self.tensors
                            .get(&format!("blk.{layer}.ffn_down_exps.weight"))
                    });
                let g = lcm(down.map_or(256, |d| d.blck), self.conventions.perf_rows);
                let decided = (g, self.rotation(layer));
                if !self.peeking {
                    self.ffn_layout.insert((layer, width), decided);
                }
                decided
            }
        };
        let mut out = Vec::with_capacity(segs.len());
        for &e in segs {
            match distribute(e, g, &self.weights, rot) {
                Some(d) => out.push(d),
                None => return mirrored(),
            }
        }
        along(axis, &out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::AXIS_MIRRORED;

    const F32: i64 = 1;
    const Q4_0: i64 = 32;

    fn info(blck: i64, ne: &[i64]) -> Info {
        let mut a = [1; 4];
        a[..ne.len()].copy_from_slice(ne);
        Info { blck, ne: a }
    }

    fn shares(s: &RawSplitState, n: usize) -> Vec<Vec<i64>> {
        (0..s.n_segments as usize)
            .map(|i| s.ne[i * n..(i + 1) * n].to_vec())
            .collect()
    }

    /// A llama-shaped layer: n_embd, n_head, n_head_kv, head_dim, n_ff.
    fn llama(p: &mut NamePolicy, layers: u32, embd: i64, kv_rows: i64, ff: i64, blck: i64) {
        for il in 0..layers {
            let b = |s: &str| format!("blk.{il}.{s}.weight");
            p.record(&b("attn_norm"), info(F32, &[embd]));
            p.record(&b("attn_q"), info(blck, &[embd, embd]));
            p.record(&b("attn_k"), info(blck, &[embd, kv_rows]));
            p.record(&b("attn_v"), info(blck, &[embd, kv_rows]));
            p.record(&b("attn_output"), info(blck, &[embd, embd]));
            p.record(&b("ffn_up"), info(blck, &[embd, ff]));
            p.record(&b("ffn_gate"), info(blck, &[embd, ff]));
            p.record(&b("ffn_down"), info(blck, &[ff, embd]));
        }
        p.record("output.weight", info(blck, &[embd, 300]));
    }

    #[test]
    fn names_parse() {
        assert_eq!(
            parse("blk.12.attn_q.weight"),
            Name::Block {
                layer: 12,
                base: "attn_q",
                bias: false
            }
        );
        assert_eq!(
            parse("blk.0.ssm_a"),
            Name::Block {
                layer: 0,
                base: "ssm_a",
                bias: false
            }
        );
        assert_eq!(
            parse("cache_v_l3"),
            Name::Cache {
                kind: 'v',
                layer: 3
            }
        );
        assert_eq!(parse("output.bias"), Name::Output);
        assert_eq!(parse("token_embd.weight"), Name::Other);
        assert_eq!(parse("blk.x.attn_q.weight"), Name::Other);
    }

    #[test]
    fn a_peek_fixes_no_decision() {
        // an FFN sized before its down projection is seen: without ffn_down's blocks the
        // granule is 256 rows, and 256 rows go whole to one device
        let up = info(F32, &[64, 256]);
        let mut fixed = NamePolicy::new(2, None);
        fixed.record("blk.0.ffn_up.weight", up);
        assert_eq!(
            shares(&fixed.split("blk.0.ffn_up.weight", up), 2),
            vec![vec![0, 256]]
        );
        let mut p = NamePolicy::new(2, None);
        p.record("blk.0.ffn_up.weight", up);
        assert_eq!(
            shares(&p.peek("blk.0.ffn_up.weight", up), 2),
            vec![vec![0, 256]]
        );
        // ... the rest of the layer arrives, and the split is made on all of it
        llama(&mut p, 1, 64, 32, 256, F32);
        let split = p.split("blk.0.ffn_up.weight", up);
        assert_eq!(shares(&split, 2), vec![vec![128, 128]]);
        assert_eq!(
            shares(&p.peek("blk.0.ffn_up.weight", up), 2),
            shares(&split, 2)
        );
        let mut fixed_late = fixed;
        llama(&mut fixed_late, 1, 64, 32, 256, F32);
        assert_eq!(
            shares(&fixed_late.split("blk.0.ffn_up.weight", up), 2),
            vec![vec![0, 256]]
        );
    }

    #[test]
    fn a_weighted_policy_splits_heads_and_rows_by_its_shares() {
        // --tensor-split 3,1: 4 KV heads go 3 and 1, FFN rows 3/4 and 1/4 (whole 128-row
        // granules, ggml 0.26's conventions)
        let c = Conventions {
            perf_rows: 128,
            rotate_within_kind: true,
        };
        let mut p = NamePolicy::new(2, Some(64))
            .with_conventions(c)
            .with_weights(&[3, 1]);
        llama(&mut p, 2, 512, 256, 1024, F32);
        for layer in 0..2 {
            let k = p.split(
                &format!("blk.{layer}.attn_k.weight"),
                info(F32, &[512, 256]),
            );
            assert_eq!(shares(&k, 2), vec![vec![192, 64]], "layer {layer}");
            let up = p.split(
                &format!("blk.{layer}.ffn_up.weight"),
                info(F32, &[512, 1024]),
            );
            assert_eq!(shares(&up, 2), vec![vec![768, 256]], "layer {layer}");
        }
        // shares that do not match the devices are ignored
        let p = NamePolicy::new(2, None).with_weights(&[1, 2, 3]);
        assert_eq!(p.weights, vec![1, 1]);
    }

    #[test]
    fn distribute_is_libllamas_rounding() {
        let even = |n| vec![1; n];
        assert_eq!(distribute(8, 1, &even(3), 0), Some(vec![2, 3, 3]));
        assert_eq!(distribute(8, 1, &even(3), 1), Some(vec![3, 2, 3]));
        assert_eq!(distribute(256, 32, &even(3), 0), Some(vec![64, 96, 96]));
        assert_eq!(distribute(100, 32, &even(2), 0), Some(vec![32, 68]));
        assert_eq!(distribute(64, 128, &even(2), 1), Some(vec![64, 0]));
        assert_eq!(distribute(0, 1, &even(2), 0), Some(vec![0, 0]));
        // --tensor-split 3,1: each device keeps its share whatever the rotation; the
        // remainder goes to the last device in the rotated order
        assert_eq!(distribute(1024, 32, &[3, 1], 0), Some(vec![768, 256]));
        assert_eq!(distribute(1024, 32, &[3, 1], 1), Some(vec![768, 256]));
        assert_eq!(distribute(100, 32, &[3, 1], 0), Some(vec![64, 36]));
        assert_eq!(distribute(100, 1, &[3, 1], 1), Some(vec![75, 25]));
        // (a first share below the granule rounds to nothing, as libllama's does)
        assert_eq!(distribute(100, 32, &[3, 1], 1), Some(vec![100, 0]));
        assert_eq!(distribute(10, 1, &[1, 2, 2], 0), Some(vec![2, 4, 4]));
    }

    /// ggml 0.26's sizes: FFN rows in multiples of lcm(block, 128) (a 128-row FFN goes whole to
    /// the last device of two); attention's block doubles while each of the devices still gets
    /// a share of a group of Q rows (heads of 64, two per KV head: a group of 128 rows, block
    /// 64, one KV head per granule).
    #[test]
    fn perf_rows_round_ffn_and_attention_like_libllama_026() {
        let c = Conventions {
            perf_rows: 128,
            rotate_within_kind: true,
        };
        let mut p = NamePolicy::new(2, Some(64)).with_conventions(c);
        llama(&mut p, 1, 256, 128, 128, F32);
        let up = p.split("blk.0.ffn_up.weight", info(F32, &[256, 128]));
        assert_eq!(shares(&up, 2), vec![vec![0, 128]]);
        let mut p = NamePolicy::new(2, Some(64)).with_conventions(c);
        llama(&mut p, 1, 256, 128, 384, F32);
        let down = p.split("blk.0.ffn_down.weight", info(F32, &[384, 256]));
        assert_eq!(shares(&down, 2), vec![vec![128, 256]]);
        let k = p.split("blk.0.attn_k.weight", info(F32, &[256, 128]));
        assert_eq!(shares(&k, 2), vec![vec![64, 64]]);
        // the same shapes with whole blocks only: 64 rows of FFN per device
        let mut p = NamePolicy::new(2, Some(64));
        llama(&mut p, 1, 256, 128, 128, F32);
        let up = p.split("blk.0.ffn_up.weight", info(F32, &[256, 128]));
        assert_eq!(shares(&up, 2), vec![vec![64, 64]]);
    }

    /// ggml 0.26 rotates a layer's slices by the earlier layers of its kind: in LFM2's pattern
    /// (short convolution, attention, short convolution, attention) attention layers 1 and 3
    /// rotate as 0 and 1; by layer index they rotate as 1 and 1 (3 mod 2). 96 FFN rows in
    /// Q4_0 blocks of 32 over two devices: [32, 64], or [64, 32] rotated.
    #[test]
    fn rotation_counts_layers_of_the_same_kind() {
        let within_kind = Conventions {
            perf_rows: 1,
            rotate_within_kind: true,
        };
        for (c, rotated1, rotated3) in [
            (within_kind, false, true),
            (Conventions::BLOCKS, true, true),
        ] {
            let mut p = NamePolicy::new(2, Some(16)).with_conventions(c);
            llama(&mut p, 4, 64, 32, 96, Q4_0);
            for il in [0, 2] {
                p.record(
                    &format!("blk.{il}.shortconv.in_proj.weight"),
                    info(F32, &[64, 192]),
                );
            }
            let rotated = |p: &mut NamePolicy, il: u32| {
                let down = p.split(&format!("blk.{il}.ffn_down.weight"), info(Q4_0, &[96, 64]));
                shares(&down, 2)[0] == vec![64, 32]
            };
            assert_eq!(rotated(&mut p, 1), rotated1, "{c:?}");
            assert_eq!(rotated(&mut p, 3), rotated3, "{c:?}");
        }
    }

    /// Unknown head size, devices dividing K's rows: equal shares, Q/K/V/O/cache agree.
    #[test]
    fn gqa_without_head_size_splits_evenly() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 2, 64, 32, 128, F32);
        let q = p.split("blk.1.attn_q.weight", info(F32, &[64, 64]));
        assert_eq!((q.axis, shares(&q, 2)), (1, vec![vec![32, 32]]));
        let k = p.split("blk.1.attn_k.weight", info(F32, &[64, 32]));
        assert_eq!((k.axis, shares(&k, 2)), (1, vec![vec![16, 16]]));
        let o = p.split("blk.1.attn_output.weight", info(F32, &[64, 64]));
        assert_eq!((o.axis, shares(&o, 2)), (0, vec![vec![32, 32]]));
        let c = p.split("cache_v_l1", info(F32, &[32, 512]));
        assert_eq!((c.axis, shares(&c, 2)), (0, vec![vec![16, 16]]));
        let up = p.split("blk.1.ffn_up.weight", info(F32, &[64, 128]));
        assert_eq!((up.axis, shares(&up, 2)), (1, vec![vec![64, 64]]));
        let down = p.split("blk.1.ffn_down.weight", info(F32, &[128, 64]));
        assert_eq!((down.axis, shares(&down, 2)), (0, vec![vec![64, 64]]));
        let out = p.split("output.weight", info(F32, &[64, 300]));
        assert_eq!((out.axis, shares(&out, 2)), (1, vec![vec![150, 150]]));
        assert_eq!(
            p.split("blk.1.attn_norm.weight", info(F32, &[64])).axis,
            AXIS_MIRRORED
        );
        assert_eq!(
            p.split("token_embd.weight", info(F32, &[64, 300])).axis,
            AXIS_MIRRORED
        );
    }

    /// Known head size (a per-head K norm): whole KV heads, libllama's rotation by layer.
    #[test]
    fn head_size_from_a_norm_gives_whole_heads() {
        // 8 KV heads of 16 over 3 devices: {2,3,3} heads, rotated by the layer index.
        let mut p = NamePolicy::new(3, None);
        llama(&mut p, 2, 256, 128, 96, F32);
        for il in 0..2 {
            p.record(&format!("blk.{il}.attn_k_norm.weight"), info(F32, &[16]));
        }
        let k0 = p.split("blk.0.attn_k.weight", info(F32, &[256, 128]));
        assert_eq!(shares(&k0, 3), vec![vec![32, 48, 48]]);
        let k1 = p.split("blk.1.attn_k.weight", info(F32, &[256, 128]));
        assert_eq!(shares(&k1, 3), vec![vec![48, 32, 48]]);
        let q1 = p.split("blk.1.attn_q.weight", info(F32, &[256, 256]));
        assert_eq!(shares(&q1, 3), vec![vec![96, 64, 96]]);
        assert_eq!(
            p.split("blk.1.attn_k_norm.weight", info(F32, &[16])).axis,
            AXIS_MIRRORED
        );
    }

    #[test]
    fn one_kv_head_or_uneven_rows_stay_mirrored() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 16, 128, F32);
        p.record("blk.0.attn_k_norm.weight", info(F32, &[16]));
        assert_eq!(
            p.split("blk.0.attn_q.weight", info(F32, &[64, 64])).axis,
            AXIS_MIRRORED
        );
        assert_eq!(
            p.split("cache_k_l0", info(F32, &[16, 64])).axis,
            AXIS_MIRRORED
        );
        // the FFN is still split
        assert_eq!(
            p.split("blk.0.ffn_up.weight", info(F32, &[64, 128])).axis,
            1
        );

        let mut p = NamePolicy::new(3, None);
        llama(&mut p, 1, 64, 32, 96, F32);
        assert_eq!(
            p.split("blk.0.attn_k.weight", info(F32, &[64, 32])).axis,
            AXIS_MIRRORED
        );
    }

    /// No head size known: a share that cannot hold a whole head of 16 rows stays mirrored
    /// (one KV head of 16 over 2 devices; 6 heads of 16 over 4 devices: shares of 24 rows).
    #[test]
    fn shares_below_a_head_stay_mirrored() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 16, 128, F32);
        assert_eq!(
            p.split("blk.0.attn_k.weight", info(F32, &[64, 16])).axis,
            AXIS_MIRRORED
        );
        let mut p = NamePolicy::new(4, None);
        llama(&mut p, 1, 96, 96, 128, F32);
        assert_eq!(
            p.split("blk.0.attn_k.weight", info(F32, &[96, 96])).axis,
            AXIS_MIRRORED
        );
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 96, 96, 128, F32);
        assert_eq!(p.split("blk.0.attn_k.weight", info(F32, &[96, 96])).axis, 1);
    }

    /// 6 KV heads of 32 rows over 4 devices: equal shares of 48 rows cut heads, which the graph's
    /// head size reveals; with the head size given, whole heads {1, 2, 1, 2} fit.
    #[test]
    fn a_cut_head_is_reported_with_the_way_out() {
        let mut p = NamePolicy::new(4, None);
        llama(&mut p, 1, 192, 192, 128, F32);
        assert_eq!(
            p.split("blk.0.attn_k.weight", info(F32, &[192, 192])).axis,
            1
        );
        let e = p.check_head_size(0, 32).unwrap_err();
        assert!(e.contains("GGML_BACKEND_RS_TP_HEAD_DIM=32"), "{e}");
        assert!(p.check_head_size(0, 16).is_ok());
        let mut p = NamePolicy::new(4, Some(32));
        llama(&mut p, 1, 192, 192, 128, F32);
        let k = p.split("blk.0.attn_k.weight", info(F32, &[192, 192]));
        assert_eq!(shares(&k, 4), vec![vec![32, 64, 32, 64]]);
        assert!(p.check_head_size(0, 32).is_ok());
    }

    /// Q rows that are neither the output projection's columns nor twice as many (a gate
    /// after each head, see `gated_delta_net_layers_split_by_heads`) keep attention mirrored.
    #[test]
    fn other_q_layouts_stay_mirrored() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 32, 128, F32);
        p.record("blk.0.attn_q.weight", info(F32, &[64, 96]));
        assert_eq!(
            p.split("blk.0.attn_q.weight", info(F32, &[64, 96])).axis,
            AXIS_MIRRORED
        );
        assert_eq!(
            p.split("blk.0.attn_output.weight", info(F32, &[64, 64]))
                .axis,
            AXIS_MIRRORED
        );
    }

    #[test]
    fn recurrent_layers_keep_attention_mirrored() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 32, 128, F32);
        p.record("blk.0.ssm_a", info(F32, &[16]));
        assert_eq!(
            p.split("blk.0.attn_q.weight", info(F32, &[64, 64])).axis,
            AXIS_MIRRORED
        );
        assert_eq!(p.split("blk.0.ssm_a", info(F32, &[16])).axis, AXIS_MIRRORED);
    }

    #[test]
    fn quantized_shares_are_whole_blocks() {
        // Q4_0 FFN of 96 rows over 2 devices: 96 = 3 blocks, {32, 64}.
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 32, 96, Q4_0);
        let up = p.split("blk.0.ffn_up.weight", info(Q4_0, &[64, 96]));
        assert_eq!(shares(&up, 2), vec![vec![32, 64]]);
        // attention: output columns of 32 per device are whole blocks
        assert_eq!(
            p.split("blk.0.attn_output.weight", info(Q4_0, &[64, 64]))
                .axis,
            0
        );
    }

    #[test]
    fn fused_tensors_have_segments() {
        let mut p = NamePolicy::new(2, Some(16));
        p.record("blk.0.attn_qkv.weight", info(F32, &[64, 128]));
        p.record("blk.0.attn_output.weight", info(F32, &[64, 64]));
        let qkv = p.split("blk.0.attn_qkv.weight", info(F32, &[64, 128]));
        assert_eq!(
            shares(&qkv, 2),
            vec![vec![32, 32], vec![16, 16], vec![16, 16]]
        );
        p.record("blk.0.ffn_down_exps.weight", info(F32, &[32, 64, 4]));
        let gu = p.split("blk.0.ffn_gate_up_exps.weight", info(F32, &[64, 64, 4]));
        assert_eq!(shares(&gu, 2), vec![vec![16, 16], vec![16, 16]]);
        assert_eq!(
            p.split("blk.0.ffn_down_exps.bias", info(F32, &[64, 4]))
                .axis,
            AXIS_PARTIAL
        );
    }

    #[test]
    fn fused_gate_up_is_split_in_halves() {
        // Phi-3: gate and up rows in one ffn_up (and its bias), no ffn_gate; each half is
        // split like ffn_down's columns, in every layer (layer 1: the other rotation).
        for (layer, n) in [(0u32, 2usize), (1, 2), (0, 3)] {
            let mut p = NamePolicy::new(n, None);
            let b = |t: &str| format!("blk.{layer}.{t}");
            p.record(&b("ffn_up.weight"), info(F32, &[64, 384]));
            p.record(&b("ffn_up.bias"), info(F32, &[384]));
            p.record(&b("ffn_down.weight"), info(F32, &[192, 64]));
            let up = p.split(&b("ffn_up.weight"), info(F32, &[64, 384]));
            let down = p.split(&b("ffn_down.weight"), info(F32, &[192, 64]));
            let half = shares(&down, n).remove(0);
            assert_eq!(half.iter().sum::<i64>(), 192);
            assert_eq!(shares(&up, n), vec![half.clone(), half.clone()]);
            let bias = p.split(&b("ffn_up.bias"), info(F32, &[384]));
            assert_eq!(bias.axis, 0);
            assert_eq!(shares(&bias, n), vec![half.clone(), half]);
        }
        // Quantized: the halves are whole blocks of the down projection's type.
        let mut p = NamePolicy::new(2, None);
        p.record("blk.0.ffn_up.weight", info(Q4_0, &[64, 192]));
        p.record("blk.0.ffn_down.weight", info(Q4_0, &[96, 64]));
        let up = p.split("blk.0.ffn_up.weight", info(Q4_0, &[64, 192]));
        assert!(shares(&up, 2).iter().flatten().all(|s| s % 32 == 0));
        assert_eq!(shares(&up, 2).len(), 2);
    }

    #[test]
    fn separate_or_plain_ffn_up_is_one_segment() {
        // A gated FFN (ffn_gate present) and a plain one (GPT-2 style: up rows = down columns)
        // keep one segment, even where the rows happen to be twice the down's columns.
        let mut p = NamePolicy::new(2, None);
        p.record("blk.0.ffn_gate.weight", info(F32, &[64, 256]));
        p.record("blk.0.ffn_up.weight", info(F32, &[64, 256]));
        p.record("blk.0.ffn_down.weight", info(F32, &[128, 64]));
        let up = p.split("blk.0.ffn_up.weight", info(F32, &[64, 256]));
        assert_eq!(shares(&up, 2), vec![vec![128, 128]]);
        let mut p = NamePolicy::new(2, None);
        p.record("blk.0.ffn_up.weight", info(F32, &[64, 128]));
        p.record("blk.0.ffn_down.weight", info(F32, &[128, 64]));
        let up = p.split("blk.0.ffn_up.weight", info(F32, &[64, 128]));
        assert_eq!(shares(&up, 2), vec![vec![64, 64]]);
    }

    #[test]
    fn sinks_give_the_head_count() {
        // 4 Q heads of 16, 2 KV heads: sinks [4] -> head size 16.
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 32, 128, F32);
        p.record("blk.0.attn_sinks.weight", info(F32, &[4]));
        let s = p.split("blk.0.attn_sinks.weight", info(F32, &[4]));
        assert_eq!((s.axis, shares(&s, 2)), (0, vec![vec![2, 2]]));
    }

    /// A tensor that arrives after its layer was decided does not change the decision; another
    /// model with the same names and other shapes gets its own, and each model's KV cache
    /// follows its own.
    #[test]
    fn decisions_stay_per_shape() {
        let mut p = NamePolicy::new(2, None);
        llama(&mut p, 1, 64, 32, 128, F32);
        assert_eq!(p.split("blk.0.attn_k.weight", info(F32, &[64, 32])).axis, 1);
        // a per-head K norm of 32 arrives late (one KV head): the layer keeps its split
        p.record("blk.0.attn_k_norm.weight", info(F32, &[32]));
        let v = p.split("blk.0.attn_v.weight", info(F32, &[64, 32]));
        assert_eq!(shares(&v, 2), vec![vec![16, 16]]);
        // a second model: 4 KV heads of 16 rows under the same names
        let mut q = NamePolicy::new(2, None);
        llama(&mut q, 1, 64, 32, 128, F32);
        assert_eq!(q.split("blk.0.attn_k.weight", info(F32, &[64, 32])).axis, 1);
        q.record("blk.0.attn_q.weight", info(F32, &[64, 128]));
        q.record("blk.0.attn_k.weight", info(F32, &[64, 64]));
        q.record("blk.0.attn_v.weight", info(F32, &[64, 64]));
        q.record("blk.0.attn_output.weight", info(F32, &[128, 64]));
        let k2 = q.split("blk.0.attn_k.weight", info(F32, &[64, 64]));
        assert_eq!(shares(&k2, 2), vec![vec![32, 32]]);
        // each model's cache follows its own K rows
        assert_eq!(
            shares(&q.split("cache_k_l0", info(F32, &[32, 256])), 2),
            vec![vec![16, 16]]
        );
        assert_eq!(
            shares(&q.split("cache_k_l0", info(F32, &[64, 256])), 2),
            vec![vec![32, 32]]
        );
    }

    /// Qwen3.5's layers: a gated delta net (head size 16, 2 K heads, 4 V heads, conv kernel 4)
    /// and a full attention layer with a gate folded into Q (4 heads of 16, 2 KV heads).
    fn qwen35(p: &mut NamePolicy) {
        let b = |il: u32, s: &str| format!("blk.{il}.{s}.weight");
        p.record(&b(0, "attn_qkv"), info(F32, &[64, 128]));
        p.record(&b(0, "attn_gate"), info(F32, &[64, 64]));
        p.record(&b(0, "ssm_conv1d"), info(F32, &[4, 128]));
        p.record("blk.0.ssm_dt.bias", info(F32, &[4]));
        p.record("blk.0.ssm_a", info(F32, &[4]));
        p.record(&b(0, "ssm_alpha"), info(F32, &[64, 4]));
        p.record(&b(0, "ssm_beta"), info(F32, &[64, 4]));
        p.record(&b(0, "ssm_norm"), info(F32, &[16]));
        p.record(&b(0, "ssm_out"), info(F32, &[64, 64]));
        p.record(&b(1, "attn_q"), info(F32, &[64, 128]));
        p.record(&b(1, "attn_k"), info(F32, &[64, 32]));
        p.record(&b(1, "attn_v"), info(F32, &[64, 32]));
        p.record(&b(1, "attn_q_norm"), info(F32, &[16]));
        p.record(&b(1, "attn_k_norm"), info(F32, &[16]));
        p.record(&b(1, "attn_output"), info(F32, &[64, 64]));
    }

    #[test]
    fn gated_delta_net_layers_split_by_heads() {
        let mut p = NamePolicy::new(2, None);
        qwen35(&mut p);
        let sp = |p: &mut NamePolicy, name: &str, ne: &[i64]| {
            let s = p.split(name, info(F32, ne));
            (s.axis, shares(&s, 2))
        };
        let heads = |unit: i64, segs: usize| vec![vec![unit, unit]; segs];
        // Q, K and the two V groups: 16 channels (one K head) per device in each
        assert_eq!(
            sp(&mut p, "blk.0.attn_qkv.weight", &[64, 128]),
            (1, heads(16, 4))
        );
        assert_eq!(
            sp(&mut p, "blk.0.ssm_conv1d.weight", &[4, 128]),
            (1, heads(16, 4))
        );
        assert_eq!(
            sp(&mut p, "blk.0.attn_gate.weight", &[64, 64]),
            (1, heads(16, 2))
        );
        assert_eq!(
            sp(&mut p, "blk.0.ssm_out.weight", &[64, 64]),
            (0, heads(16, 2))
        );
        assert_eq!(
            sp(&mut p, "blk.0.ssm_alpha.weight", &[64, 4]),
            (1, heads(1, 2))
        );
        assert_eq!(sp(&mut p, "blk.0.ssm_dt.bias", &[4]), (0, heads(1, 2)));
        assert_eq!(sp(&mut p, "blk.0.ssm_a", &[4]), (0, heads(1, 2)));
        assert_eq!(sp(&mut p, "blk.0.ssm_norm.weight", &[16]).0, AXIS_MIRRORED);
        // conv state: 3 values per channel; recurrent state: 16 x 16 per V head
        assert_eq!(sp(&mut p, "cache_r_l0", &[384, 1]), (0, heads(48, 4)));
        assert_eq!(sp(&mut p, "cache_s_l0", &[1024, 1]), (0, heads(256, 2)));
        // the gated attention layer: Q's rows (each head's, then its gate's) follow the KV heads
        assert_eq!(
            sp(&mut p, "blk.1.attn_q.weight", &[64, 128]),
            (1, heads(64, 1))
        );
        assert_eq!(
            sp(&mut p, "blk.1.attn_output.weight", &[64, 64]),
            (0, heads(32, 1))
        );
        assert_eq!(
            sp(&mut p, "blk.1.attn_k.weight", &[64, 32]),
            (1, heads(16, 1))
        );
    }

    #[test]
    fn recurrent_layers_can_be_kept_whole() {
        let mut p = NamePolicy::new(2, None).mirroring_recurrent();
        qwen35(&mut p);
        assert!(!p.splits_recurrent(0));
        let qkv = p.split("blk.0.attn_qkv.weight", info(F32, &[64, 128]));
        assert_eq!(qkv.axis, AXIS_MIRRORED);
        // attention layers are split as before
        assert_eq!(p.split("blk.1.attn_k.weight", info(F32, &[64, 32])).axis, 1);
        let mut q = NamePolicy::new(2, None);
        qwen35(&mut q);
        assert!(q.splits_recurrent(0) && !q.splits_recurrent(1));
    }

    #[test]
    fn other_recurrent_layouts_stay_mirrored() {
        // Qwen3-Next's fused beta/alpha projection: not Qwen3.5's layout
        let mut p = NamePolicy::new(2, None);
        qwen35(&mut p);
        p.tensors.remove("blk.0.ssm_alpha.weight");
        p.tensors.remove("blk.0.ssm_beta.weight");
        p.record("blk.0.ssm_ba.weight", info(F32, &[64, 8]));
        let qkv = p.split("blk.0.attn_qkv.weight", info(F32, &[64, 128]));
        assert_eq!(qkv.axis, AXIS_MIRRORED);
        assert_eq!(
            p.split("cache_r_l0", info(F32, &[384, 1])).axis,
            AXIS_MIRRORED
        );
    }

    #[test]
    fn one_device_mirrors_everything() {
        let mut p = NamePolicy::new(1, None);
        llama(&mut p, 1, 64, 32, 128, F32);
        assert_eq!(
            p.split("blk.0.ffn_up.weight", info(F32, &[64, 128])).axis,
            AXIS_MIRRORED
        );
    }
}
