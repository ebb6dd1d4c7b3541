//! How split states propagate: the memory layout of each device's slice (per-device shapes,
//! strides and view offsets) and the per-op rules that say which split an op's result has
//! given its sources' splits — or that the combination cannot be computed device by device.
//!
//! Pure functions over plain data ([`Layout`], [`Split`], [`Op`]); the root crate's
//! `meta::buffer` feeds them from ggml tensors. Errors are [`RuleError`] values; the caller
//! names the tensor and aborts with the error's message.

use std::fmt;

use crate::op::Op;
use crate::split::{DimSplit, Split};

/// Why a split cannot be laid out, mapped through a view, or carried through an op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleError {
    /// `count` elements along dimension 0 are not whole quantization blocks of `blck`.
    PartialBlocks { count: i64, blck: i64 },
    /// A split tensor that owns its memory is not contiguous.
    NotContiguous,
    /// The source of a split view is not contiguous.
    ViewSourceNotContiguous,
    /// A view cuts a quantization block.
    ViewCutsBlock,
    /// No dimension of the view walks its source's split dimension, and none has extent 1.
    ViewDoesNotWalk,
    /// The view's rows (`span` bytes) overlap its steps of `step` bytes.
    ViewRowsOverlap { span: usize, step: usize },
    /// View dimension `dim` (stride `stride`) does not step whole slices of `chunk` bytes.
    ViewStrideNotWhole {
        dim: usize,
        stride: usize,
        chunk: usize,
    },
    /// A device slice boundary (at byte `byte`) falls inside a row of the view.
    BoundaryInsideRow { byte: usize },
    /// The view takes two separate pieces of one device's slice.
    ViewTwoPieces,
    /// The view reaches outside its source's split dimension.
    ViewOutside,
    /// Source `i`, which the op needs, is missing.
    MissingSource(usize),
    /// No rule computes the op device by device for these sources (slot, split).
    Unsupported { sources: Vec<(usize, Split)> },
    /// An operand (`what`) that must be mirrored is split.
    NotMirrored { what: &'static str, split: Split },
    /// A row-wise op whose source is split along dimension 0.
    RowsSplit,
    /// A non-linear op applied to a partial sum.
    NotLinear,
    /// soft_max with its rows split along dimension 0.
    SoftMaxRowsSplit,
    /// soft_max of a partial sum.
    SoftMaxPartial,
    /// soft_max with ALiBi over a head split (the slope depends on the global head index).
    SoftMaxAlibi,
    /// soft_max sinks that do not follow the heads.
    SoftMaxSinks { sinks: Split, input: Split },
    /// rope over anything but a head split.
    Rope(Split),
    /// PAD along the split dimension.
    Padding,
    /// A view op reached the op rules (view ops are mapped by memory layout).
    ViewOpHasNoRule,
    /// A slice of `extent` of `from` indices does not map to a whole part of `to`.
    NotWholePart { extent: i64, from: i64, to: i64 },
    /// A mirrored operand that is not broadcast along the split dimension.
    CannotBroadcast { a: Split, b: Split },
    /// Two operands whose splits an element-wise op cannot combine.
    CannotCombine { a: Split, b: Split },
    /// GLU without a source.
    GluSource,
    /// GLU of one fused source whose gate and up halves are not split alike.
    GluHalves(Split),
    /// A contraction split into different slices for the weight and the input.
    ContractionDiffers { weight: Split, input: Split },
    /// Batched matmul operands split into different heads.
    BatchedHeads,
    /// No rule for this matmul.
    MatMul { weight: Split, input: Split },
    /// flash_attn_ext without q, k and v.
    FlashAttnSources,
    /// q, k and v split into different heads.
    FlashAttnHeads { q: Split, k: Split, v: Split },
    /// Attention sinks that do not follow q's heads.
    Sinks(Split),
    /// q, k and v not split by heads.
    FlashAttnNotHeads { q: Split, k: Split, v: Split },
    /// flash_attn_ext with ALiBi over a head split (the slopes follow the head's index).
    FlashAttnAlibi,
    /// flash_attn_ext over a head split with a mask per head (dimension 2).
    FlashAttnMaskHeads,
    /// ssm_conv's input channels (dimension 1) not placed like its kernel's.
    SsmConvChannels { input: Split, kernel: Split },
    /// A gated_delta_net operand (`what`) not split by v's heads.
    DeltaNetHeads {
        what: &'static str,
        split: Split,
        v: Split,
    },
    /// gated_delta_net's k not split like its q.
    DeltaNetKeys { q: Split, k: Split },
    /// gated_delta_net: some device's v head would read a q/k head it does not hold.
    DeltaNetGroups { qk: Split, v: Split },
    /// A packed result (gated_delta_net's output and states) split other than by heads, or
    /// not shaped as its op makes it.
    PackedLayout,
    /// A view that reaches across both parts of a packed result.
    PackedViewStraddles,
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use RuleError::*;
        match self {
            PartialBlocks { count, blck } => write!(
                f,
                "{count} elements along dimension 0 are not whole blocks of {blck}"
            ),
            NotContiguous => f.write_str("a split tensor that owns its memory must be contiguous"),
            ViewSourceNotContiguous => {
                f.write_str("the view source of a split view must be contiguous")
            }
            ViewCutsBlock => f.write_str("the view cuts a quantization block"),
            ViewDoesNotWalk => f.write_str("the view does not walk its source's split dimension"),
            ViewRowsOverlap { span, step } => write!(
                f,
                "the view's rows ({span} bytes) overlap its steps of {step} bytes"
            ),
            ViewStrideNotWhole { dim, stride, chunk } => write!(
                f,
                "view dimension {dim} (stride {stride}) does not step whole slices of {chunk} bytes"
            ),
            BoundaryInsideRow { byte } => write!(
                f,
                "a device slice boundary (byte {byte}) falls inside a row of the view"
            ),
            ViewTwoPieces => {
                f.write_str("the view takes two separate pieces of one device's slice")
            }
            ViewOutside => f.write_str("the view reaches outside its source's split dimension"),
            MissingSource(i) => write!(f, "source {i} missing"),
            Unsupported { sources } => {
                f.write_str("no rule computes this op device by device for sources [")?;
                for (k, (i, split)) in sources.iter().enumerate() {
                    let sep = if k == 0 { "" } else { ", " };
                    write!(f, "{sep}src{i} {}", split.describe())?;
                }
                f.write_str("]")
            }
            NotMirrored { what, split } => {
                write!(f, "the {what} must be mirrored, not {}", split.describe())
            }
            RowsSplit => {
                f.write_str("the op needs whole rows, but its source is split along dimension 0")
            }
            NotLinear => f.write_str("the op is not linear; its source is a partial sum"),
            SoftMaxRowsSplit => {
                f.write_str("soft_max needs whole rows, but its source is split along dimension 0")
            }
            SoftMaxPartial => f.write_str("soft_max of a partial sum"),
            SoftMaxAlibi => f.write_str("soft_max with ALiBi over a head split"),
            SoftMaxSinks { sinks, input } => write!(
                f,
                "soft_max sinks split as {} do not follow the heads of {}",
                sinks.describe(),
                input.describe()
            ),
            Rope(split) => write!(
                f,
                "rope needs whole rows and all tokens on each device, not {}",
                split.describe()
            ),
            Padding => f.write_str("padding along the split dimension"),
            ViewOpHasNoRule => f.write_str("internal: view ops are mapped by memory layout"),
            NotWholePart { extent, from, to } => write!(
                f,
                "a slice of {extent} of {from} indices does not map to a whole part of {to}"
            ),
            CannotBroadcast { a, b } => write!(
                f,
                "cannot combine {} with {} (a mirrored operand must be broadcast along the split \
                 dimension)",
                a.describe(),
                b.describe()
            ),
            CannotCombine { a, b } => write!(
                f,
                "cannot combine {} with {} in this op",
                a.describe(),
                b.describe()
            ),
            GluSource => f.write_str("glu needs a source"),
            GluHalves(split) => write!(
                f,
                "glu of one fused source needs its gate and up halves split alike (two equal \
                 segments), not {}",
                split.describe()
            ),
            ContractionDiffers { weight, input } => write!(
                f,
                "contraction slices differ: weight {} vs input {}",
                weight.describe(),
                input.describe()
            ),
            BatchedHeads => f.write_str("batched matmul operands are split into different heads"),
            MatMul { weight, input } => write!(
                f,
                "no rule for a matmul of weight {} with input {}",
                weight.describe(),
                input.describe()
            ),
            FlashAttnSources => f.write_str("flash_attn_ext needs q, k and v"),
            FlashAttnAlibi => f.write_str("flash_attn_ext with ALiBi over a head split"),
            FlashAttnMaskHeads => {
                f.write_str("flash_attn_ext over a head split with a mask per head")
            }
            FlashAttnHeads { q, k, v } => write!(
                f,
                "q, k and v are split into different heads ({}, {}, {})",
                q.describe(),
                k.describe(),
                v.describe()
            ),
            Sinks(split) => write!(
                f,
                "attention sinks must follow q's heads, not {}",
                split.describe()
            ),
            FlashAttnNotHeads { q, k, v } => write!(
                f,
                "flash_attn_ext needs q, k and v split by heads (dimension 2), got {}, {}, {}",
                q.describe(),
                k.describe(),
                v.describe()
            ),
            SsmConvChannels { input, kernel } => write!(
                f,
                "ssm_conv needs its input's channels (dimension 1) placed like its kernel's, not \
                 {} and {}",
                input.describe(),
                kernel.describe()
            ),
            DeltaNetHeads { what, split, v } => write!(
                f,
                "gated_delta_net's {what} must be split by v's heads ({}), not {}",
                v.describe(),
                split.describe()
            ),
            DeltaNetKeys { q, k } => write!(
                f,
                "gated_delta_net's k must be split like its q ({}), not {}",
                q.describe(),
                k.describe()
            ),
            DeltaNetGroups { qk, v } => write!(
                f,
                "gated_delta_net: with q/k heads {} and v heads {}, a device would need a q/k \
                 head it does not hold (v head h reads q/k head h mod the number of q/k heads)",
                qk.describe(),
                v.describe()
            ),
            PackedLayout => f.write_str(
                "a gated_delta_net result can only be split by heads (dimension 0), as its op \
                 lays it out",
            ),
            PackedViewStraddles => f.write_str(
                "the view reaches across both the output and the states of a gated_delta_net \
                 result",
            ),
        }
    }
}

impl std::error::Error for RuleError {}

/// Shape and byte strides of a tensor, with the block size of its type (elements per
/// `nb[0]` bytes: 1 except for quantized types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub ne: [i64; 4],
    pub nb: [usize; 4],
    pub blck: i64,
}

impl Layout {
    /// Dense row-major layout with element size 1: the logical element order, used to map a
    /// split through ops that copy elements in order (CONT, CPY, DUP).
    pub fn logical(ne: [i64; 4]) -> Layout {
        let mut nb = [1usize; 4];
        for k in 1..4 {
            nb[k] = nb[k - 1] * ne[k - 1].max(0) as usize;
        }
        Layout { ne, nb, blck: 1 }
    }

    /// Dense, in ggml's sense: rows of whole blocks (`nb[0]` bytes per block), then each
    /// dimension right after the previous one (dimensions of extent 1 may have any stride).
    /// A layout whose size does not fit in memory is not.
    pub fn is_contiguous(&self) -> bool {
        if self.blck <= 0 || self.ne[0] % self.blck != 0 || self.ne.iter().any(|&e| e < 0) {
            return false;
        }
        let Some(mut expect) = self.nb[0].checked_mul((self.ne[0] / self.blck) as usize) else {
            return false;
        };
        for k in 1..4 {
            if self.ne[k] != 1 && self.nb[k] != expect {
                return false;
            }
            let Some(next) = expect.checked_mul(self.ne[k] as usize) else {
                return false;
            };
            expect = next;
        }
        true
    }

    /// Bytes taken by `count` indices along `axis` (whole blocks along dimension 0).
    fn bytes(&self, axis: usize, count: i64) -> Result<usize, RuleError> {
        if axis == 0 {
            if count % self.blck != 0 {
                return Err(RuleError::PartialBlocks {
                    count,
                    blck: self.blck,
                });
            }
            Ok((count / self.blck) as usize * self.nb[0])
        } else {
            Ok(count as usize * self.nb[axis])
        }
    }
}

/// How one device's tensor is laid out: shape, strides and (for views) the byte offset of
/// its first element in the device's copy of the view source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceLayout {
    pub ne: [i64; 4],
    pub nb: [usize; 4],
    pub offs: usize,
}

/// Per-device layouts of a tensor that owns its memory (not a view), split as `split`.
pub fn own_layouts(t: &Layout, split: &Split, n: usize) -> Result<Vec<DeviceLayout>, RuleError> {
    let Split::Dim(d) = split else {
        return Ok(vec![
            DeviceLayout {
                ne: t.ne,
                nb: t.nb,
                offs: 0
            };
            n
        ]);
    };
    if !t.is_contiguous() {
        return Err(RuleError::NotContiguous);
    }
    let chunk = t.bytes(d.axis, t.ne[d.axis])?;
    (0..n)
        .map(|j| {
            let ext = d.extent(j);
            let chunk_j = t.bytes(d.axis, ext)?;
            let mut ne = t.ne;
            ne[d.axis] = ext;
            let mut nb = t.nb;
            for (k, stride) in nb.iter_mut().enumerate().skip(d.axis + 1) {
                *stride = scale(t.nb[k], chunk, chunk_j);
            }
            Ok(DeviceLayout { ne, nb, offs: 0 })
        })
        .collect()
}

/// `stride` counted in chunks of `chunk` bytes, re-expressed in chunks of `chunk_j` bytes.
fn scale(stride: usize, chunk: usize, chunk_j: usize) -> usize {
    stride.checked_div(chunk).map_or(0, |c| c * chunk_j)
}

/// The split and per-device layouts of a view `v` at byte offset `offs` into `base`, which
/// is split as `split`. The view's split axis is the dimension that walks across the base's
/// split dimension; each device's part of the view may take several runs of its slice (one
/// per segment the view reaches) as long as they follow each other in the device's memory
/// at the view's step, so that it is one strided view there.
pub fn map_view(
    base: &Layout,
    split: &Split,
    v: &Layout,
    offs: usize,
    n: usize,
) -> Result<(Split, Vec<DeviceLayout>), RuleError> {
    let Split::Dim(d) = split else {
        let same = DeviceLayout {
            ne: v.ne,
            nb: v.nb,
            offs,
        };
        return Ok((split.clone(), vec![same; n]));
    };
    if !base.is_contiguous() {
        return Err(RuleError::ViewSourceNotContiguous);
    }
    let whole = map_view_in_periods(base, d, v, offs, n);
    // A split whose segments repeat (a reshape that merged the split dimension with the
    // ones above it: every token's heads) is also read one period at a time, as if the
    // repeats were a dimension of their own, so that a view can take that dimension apart
    // again. Tried second: it places values alike, but may pick another walking dimension.
    let period = d.period();
    if whole.is_err() && period < d.n_segments() {
        if let Ok(mapped) = map_view_in_periods(base, &d.first_segments(period), v, offs, n) {
            return Ok(mapped);
        }
    }
    whole
}

/// [`map_view`] over a source whose split dimension is read in chunks that `d` splits: the
/// whole dimension, or one period of a repeating split (the repeats are further chunks).
fn map_view_in_periods(
    base: &Layout,
    d: &DimSplit,
    v: &Layout,
    offs: usize,
    n: usize,
) -> Result<(Split, Vec<DeviceLayout>), RuleError> {
    let chunk = base.bytes(d.axis, d.total())?.max(1);
    let chunk_of = |j: usize| base.bytes(d.axis, d.extent(j));
    let c0 = offs / chunk;
    let w = offs % chunk;

    // The view's dimension with the largest stride below one chunk walks the split dimension.
    let e = (0..4)
        .filter(|&k| v.ne[k] > 1 && v.nb[k] < chunk)
        .max_by_key(|&k| (v.nb[k], std::cmp::Reverse(k)));
    // `rows` counts steps of `step` bytes: elements, or blocks when dimension 0 walks.
    let (e, step, rows, unit) = match e {
        Some(0) if v.ne[0] % v.blck != 0 => {
            return Err(RuleError::ViewCutsBlock);
        }
        Some(e) => {
            let unit = if e == 0 { v.blck } else { 1 };
            (e, v.nb[e], v.ne[e] / unit, unit)
        }
        // Nothing walks the split dimension: the view sits in one row of it, and one of its
        // dimensions of extent 1 becomes the split axis.
        None => match (0..4).find(|&k| v.ne[k] == 1) {
            Some(k) => (k, usize::MAX, 1, 1),
            None => return Err(RuleError::ViewDoesNotWalk),
        },
    };
    // A row of the view: everything below the walking dimension, `span` bytes from its first
    // byte. It must fit within one step, so that each step's bytes can lie on one device.
    let span: usize = (0..4)
        .filter(|&k| k != e && v.ne[k] > 1 && v.nb[k] < chunk)
        .map(|k| {
            let units = if k == 0 { v.ne[0] / v.blck } else { v.ne[k] };
            (units.max(1) as usize - 1).saturating_mul(v.nb[k])
        })
        .sum::<usize>()
        + base.nb[0];
    if step != usize::MAX && span > step {
        return Err(RuleError::ViewRowsOverlap { span, step });
    }
    for k in 0..4 {
        if v.ne[k] > 1 && v.nb[k] >= chunk && v.nb[k] % chunk != 0 {
            return Err(RuleError::ViewStrideNotWhole {
                dim: k,
                stride: v.nb[k],
                chunk,
            });
        }
    }

    // The view's rows on each device, in host order: one piece per run of the source that
    // the view reaches. A device may hold several pieces (a view over all the segments of a
    // fused projection); they must follow each other in the device's slice, so that the
    // device's part of the view is one strided run there.
    // A walking dimension may run on past the chunk it starts in (a reshape that merges the
    // split dimension with the one above it): chunk `k` from there holds the rows whose first
    // byte falls in it, placed as in the first, `k` device chunks further.
    let mut pieces: Vec<Piece> = Vec::new();
    let mut end_of = vec![None::<usize>; n]; // byte after the last row placed on device j

    // (a view whose bytes, a chunk further, the address space cannot hold reaches outside
    // any source; the sums below stay within that)
    let last_byte = match step {
        usize::MAX => Some(w),
        _ => (rows.max(1) as usize - 1)
            .checked_mul(step)
            .and_then(|b| b.checked_add(w)),
    }
    .filter(|b| b.checked_add(chunk).is_some())
    .ok_or(RuleError::ViewOutside)?;
    let intervals = d.intervals();
    for k in 0..=last_byte / chunk {
        for iv in &intervals {
            let hb = k * chunk + base.bytes(d.axis, iv.host_start)?;
            let he = k * chunk + base.bytes(d.axis, iv.host_start + iv.len)?;
            let db = base.bytes(d.axis, iv.dev_start)?;
            // rows i (0..rows) whose first byte w + i*step falls in [hb, he)
            let row_of = |b: usize| -> i64 {
                if b <= w {
                    0
                } else if step == usize::MAX {
                    1
                } else {
                    (b - w).div_ceil(step) as i64
                }
            };
            let lo = row_of(hb).min(rows);
            let hi = row_of(he).min(rows);
            // a slice boundary must not cut a row: it lies at a row's start or between rows
            for b in [hb, he] {
                if b > w && step != usize::MAX {
                    let (row, into) = ((b - w) / step, (b - w) % step);
                    if (row as i64) < rows && into != 0 && into < span {
                        return Err(RuleError::BoundaryInsideRow { byte: b });
                    }
                }
            }
            if lo >= hi {
                continue;
            }
            let j = iv.device;
            let row_step = if step == usize::MAX { 0 } else { step };
            let dev_byte = k * chunk_of(j)? + db + (w + lo as usize * row_step - hb);
            if end_of[j].is_some_and(|end| end != dev_byte) {
                return Err(RuleError::ViewTwoPieces);
            }
            end_of[j] = Some(dev_byte + (hi - lo) as usize * row_step);
            pieces.push(Piece {
                device: j,
                rows: hi - lo,
                dev_byte,
            });
        }
    }
    let mut extents = vec![0i64; n];
    let mut first_byte = vec![None::<usize>; n];
    for p in &pieces {
        extents[p.device] += p.rows;
        first_byte[p.device].get_or_insert(p.dev_byte);
    }
    if extents.iter().sum::<i64>() != rows {
        return Err(RuleError::ViewOutside);
    }

    let mut layouts = Vec::with_capacity(n);
    for j in 0..n {
        let chunk_j = chunk_of(j)?;
        let mut ne = v.ne;
        ne[e] = extents[j] * unit;
        let nb = v.nb.map(|s| {
            if s >= chunk {
                scale(s, chunk, chunk_j)
            } else {
                s
            }
        });
        layouts.push(DeviceLayout {
            ne,
            nb,
            offs: c0 * chunk_j + first_byte[j].unwrap_or(0),
        });
    }
    Ok((in_host_order(e, n, &pieces, unit), layouts))
}

/// Rows of a view that lie in one run of its source, on one device.
struct Piece {
    device: usize,
    rows: i64,
    /// Where the first row starts in the device's chunk of the source.
    dev_byte: usize,
}

/// The split along view dimension `axis` whose runs are `pieces` (in host order) of `unit`
/// indices per row. Pieces on ascending devices share a segment; a piece on a device not
/// above the one before it (a view that crosses a segment boundary of its source, e.g. the K
/// and V parts of a fused QKV result, or all of them) starts a new segment, so that the split
/// places every index where it is.
fn in_host_order(axis: usize, n: usize, pieces: &[Piece], unit: i64) -> Split {
    let mut ne = vec![0i64; n];
    let mut last = None;
    for p in pieces {
        if last.is_some_and(|l| p.device <= l) {
            ne.extend(std::iter::repeat_n(0, n));
        }
        let seg = ne.len() - n;
        ne[seg + p.device] = p.rows * unit;
        last = Some(p.device);
    }
    Split::Dim(DimSplit { axis, n, ne })
}

/// The split of the result of an op that writes its source's elements in order into a
/// tensor of shape `dst` (CONT, CPY, DUP, RESHAPE of a copy).
pub fn map_reshape(
    src_ne: [i64; 4],
    split: &Split,
    dst_ne: [i64; 4],
    n: usize,
) -> Result<Split, RuleError> {
    map_view(
        &Layout::logical(src_ne),
        split,
        &Layout::logical(dst_ne),
        0,
        n,
    )
    .map(|(s, _)| s)
}

/// What an op's rule needs to know about one source.
#[derive(Clone, Debug)]
pub struct Src {
    /// The split consumers see (a reduced matmul result reads as mirrored).
    pub split: Split,
    pub ne: [i64; 4],
}

/// The result of an op's rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Derived {
    pub split: Split,
    /// The result holds per-device partial sums that the meta backend sums (AllReduce) right
    /// after computing it; consumers see it mirrored.
    pub reduce: bool,
    /// Mirrored sources (slot, split) of which each device reads only the slice this split
    /// gives it: the op combines a whole tensor (e.g. the result of an op that another
    /// backend computed) with split ones. Each slice is one run of indices, so it is a view of
    /// the device's whole copy.
    pub sliced: Vec<(usize, DimSplit)>,
}

impl Derived {
    fn plain(split: Split) -> Result<Derived, RuleError> {
        Ok(Derived {
            split,
            reduce: false,
            sliced: Vec::new(),
        })
    }

    fn slicing(split: Split, slot: usize, slice: DimSplit) -> Result<Derived, RuleError> {
        Ok(Derived {
            split,
            reduce: false,
            sliced: vec![(slot, slice)],
        })
    }
}

/// `want` as the slices each device takes of mirrored source `s`: when `s` spans the whole
/// split dimension and each device's part is one run (a view of its copy).
fn slice_of(s: &Src, want: &DimSplit) -> Option<DimSplit> {
    if s.split != Split::Mirrored || s.ne[want.axis] != want.total() {
        return None;
    }
    let runs = want.intervals();
    let one_run_each = runs
        .iter()
        .enumerate()
        .all(|(k, iv)| runs[..k].iter().all(|o| o.device != iv.device));
    one_run_each.then(|| want.clone())
}

/// The split of `op`'s result with shape `ne` given its sources `srcs` (index = source slot).
pub fn derive(
    op: Op,
    op_params: &[i32; 16],
    ne: [i64; 4],
    srcs: &[Option<Src>],
    n: usize,
) -> Result<Derived, RuleError> {
    let s = |i: usize| srcs.get(i).and_then(|s| s.as_ref());
    let need = |i: usize| s(i).ok_or(RuleError::MissingSource(i));
    match op {
        Op::None => Derived::plain(Split::Mirrored),

        // Element-wise with broadcasting.
        Op::Add | Op::Sub | Op::Mul | Op::Div => {
            let (a, b) = (need(0)?, need(1)?);
            binary(op, a, b, ne)
        }
        Op::AddId => {
            // (rows, bias per expert, expert ids)
            let (a, b, ids) = (need(0)?, need(1)?, need(2)?);
            mirrored(ids, "expert ids")?;
            match (&a.split, &b.split) {
                (Split::Dim(x), Split::Dim(_)) if x.axis == 0 && a.split.same_as(&b.split) => {
                    Derived::plain(a.split.clone())
                }
                (Split::Mirrored, Split::Mirrored) => Derived::plain(Split::Mirrored),
                // A partial bias added to a reduced matmul result: only valid before the
                // reduction, which the meta backend checks when it places the AllReduce.
                (Split::Mirrored, Split::Partial) => Derived::plain(Split::Mirrored),
                _ => Err(unsupported(srcs)),
            }
        }

        // Element-wise, any common split; partial sums only through linear ops.
        Op::Sqr
        | Op::Sqrt
        | Op::Log
        | Op::Sin
        | Op::Cos
        | Op::Clamp
        | Op::LeakyRelu
        | Op::Unary
        | Op::Fill
        | Op::SiluBack => same_split(srcs, ne, false),
        Op::Scale => {
            // x*s + b is linear only without the bias
            let bias = f32::from_bits(op_params[1] as u32);
            same_split(srcs, ne, bias == 0.0)
        }
        Op::Glu => glu(srcs, ne),

        // Reductions and normalisations along rows: the row must be whole on each device.
        Op::Norm
        | Op::RmsNorm
        | Op::L2Norm
        | Op::SumRows
        | Op::Mean
        | Op::Argmax
        | Op::Argsort
        | Op::TopK
        | Op::Cumsum => {
            let a = need(0)?;
            match &a.split {
                Split::Dim(d) if d.axis == 0 => Err(RuleError::RowsSplit),
                Split::Partial => Err(RuleError::NotLinear),
                Split::Dim(d) => Derived::plain(carry(d, d.axis, a.ne, ne)?),
                Split::Mirrored => Derived::plain(Split::Mirrored),
            }
        }

        Op::SoftMax => {
            let a = need(0)?;
            if let Split::Dim(d) = &a.split {
                if d.axis == 0 {
                    return Err(RuleError::SoftMaxRowsSplit);
                }
            }
            if matches!(a.split, Split::Partial) {
                return Err(RuleError::SoftMaxPartial);
            }
            if let Some(mask) = s(1) {
                broadcast_ok(&a.split, mask)?;
            }
            // [kv, tokens, heads, ..]: ALiBi slopes and sinks are per head, so a head split
            // needs sinks split alike and no ALiBi (its slope depends on the global head index)
            let max_bias = f32::from_bits(op_params[1] as u32);
            if let Split::Dim(d) = &a.split {
                if d.axis >= 2 && max_bias != 0.0 {
                    return Err(RuleError::SoftMaxAlibi);
                }
            }
            if let Some(sinks) = s(2) {
                let ok = match (&a.split, &sinks.split) {
                    (Split::Mirrored, Split::Mirrored) => true,
                    (Split::Dim(x), Split::Dim(y)) => {
                        x.axis == 2 && y.axis == 0 && x.places_like(y)
                    }
                    _ => false,
                };
                if !ok {
                    return Err(RuleError::SoftMaxSinks {
                        sinks: sinks.split.clone(),
                        input: a.split.clone(),
                    });
                }
            }
            Derived::plain(a.split.clone())
        }

        Op::MulMat | Op::MulMatId => {
            let (w, x) = (need(0)?, need(1)?);
            if op == Op::MulMatId {
                mirrored(need(2)?, "expert ids")?;
            }
            mul_mat(w, x, ne, op == Op::MulMatId)
        }

        Op::Rope => {
            let a = need(0)?;
            mirrored(need(1)?, "positions")?;
            if let Some(f) = s(2) {
                mirrored(f, "frequency factors")?;
            }
            // [head_dim, heads, tokens, ..]: rows rotate whole, and positions follow tokens, so
            // only a head split (or none) works with mirrored positions
            match &a.split {
                Split::Mirrored => Derived::plain(Split::Mirrored),
                Split::Dim(d) if d.axis == 1 => Derived::plain(a.split.clone()),
                // a single head on one device: its rows split as all-or-nothing
                _ if whole_rows_as(&a.split, a.ne, 1).is_some() => Derived::plain(a.split.clone()),
                other => Err(RuleError::Rope(other.clone())),
            }
        }

        Op::GetRows => {
            let (table, ids) = (need(0)?, need(1)?);
            mirrored(ids, "row ids")?;
            match &table.split {
                Split::Dim(d) if d.axis == 0 => Derived::plain(table.split.clone()),
                Split::Mirrored => Derived::plain(Split::Mirrored),
                _ => Err(unsupported(srcs)),
            }
        }

        Op::SetRows => {
            // (rows to write, row ids, destination); the result is the destination.
            let (rows, ids, dst) = (need(0)?, need(1)?, need(2)?);
            mirrored(ids, "row ids")?;
            match (&rows.split, &dst.split) {
                (Split::Dim(a), Split::Dim(_)) if a.axis == 0 && rows.split.same_as(&dst.split) => {
                    Derived::plain(dst.split.clone())
                }
                (Split::Mirrored, Split::Mirrored) => Derived::plain(Split::Mirrored),
                // whole rows (computed by another backend, e.g. a layer's K and V where its
                // attention weights stay on the CPU) into a cache split along its rows: each
                // device writes its slice of every row
                (Split::Mirrored, Split::Dim(d)) if d.axis == 0 => match slice_of(rows, d) {
                    Some(slice) => Derived::slicing(dst.split.clone(), 0, slice),
                    None => Err(unsupported(srcs)),
                },
                _ => Err(unsupported(srcs)),
            }
        }

        Op::Cpy | Op::Cont | Op::Dup => {
            let a = need(0)?;
            match &a.split {
                Split::Dim(_) => Derived::plain(map_reshape(a.ne, &a.split, ne, n)?),
                other => Derived::plain(other.clone()),
            }
        }

        Op::Repeat => {
            let a = need(0)?;
            match &a.split {
                Split::Mirrored => Derived::plain(Split::Mirrored),
                Split::Dim(d) if a.ne[d.axis] == ne[d.axis] => Derived::plain(a.split.clone()),
                _ => Err(unsupported(srcs)),
            }
        }

        Op::Concat => {
            let dim = op_params[0] as usize;
            let (a, b) = (need(0)?, need(1)?);
            match (&a.split, &b.split) {
                (Split::Mirrored, Split::Mirrored) => Derived::plain(Split::Mirrored),
                (Split::Dim(x), Split::Dim(_)) if x.axis != dim && a.split.same_as(&b.split) => {
                    Derived::plain(a.split.clone())
                }
                // one whole operand: each device concatenates its slice of it
                (Split::Dim(x), Split::Mirrored) if x.axis != dim => match slice_of(b, x) {
                    Some(slice) => Derived::slicing(a.split.clone(), 1, slice),
                    None => Err(unsupported(srcs)),
                },
                (Split::Mirrored, Split::Dim(y)) if y.axis != dim => match slice_of(a, y) {
                    Some(slice) => Derived::slicing(b.split.clone(), 0, slice),
                    None => Err(unsupported(srcs)),
                },
                _ => Err(unsupported(srcs)),
            }
        }

        Op::Pad => {
            let a = need(0)?;
            if let Split::Dim(d) = &a.split {
                if op_params[2 * d.axis] != 0 || op_params[2 * d.axis + 1] != 0 {
                    return Err(RuleError::Padding);
                }
            }
            Derived::plain(a.split.clone())
        }

        Op::FlashAttnExt => flash_attn(op_params, srcs),

        Op::SsmConv => {
            // (input [d_conv - 1 + tokens, channels, seqs], kernel [d_conv, channels])
            // → [channels, tokens, seqs]: each channel convolves on its own
            let (x, c) = (need(0)?, need(1)?);
            match (&x.split, &c.split) {
                (Split::Mirrored, Split::Mirrored) => Derived::plain(Split::Mirrored),
                (Split::Dim(a), Split::Dim(b))
                    if a.axis == 1 && b.axis == 1 && a.places_like(b) =>
                {
                    Derived::plain(Split::Dim(DimSplit {
                        axis: 0,
                        ..a.clone()
                    }))
                }
                _ => Err(RuleError::SsmConvChannels {
                    input: x.split.clone(),
                    kernel: c.split.clone(),
                }),
            }
        }

        Op::GatedDeltaNet => gated_delta_net(srcs),

        // View ops are mapped from their view source's memory, not by a rule.
        Op::View | Op::Reshape | Op::Permute | Op::Transpose => Err(RuleError::ViewOpHasNoRule),

        // Everything else must see the same values on every device.
        _ => {
            let all_mirrored = srcs.iter().flatten().all(|x| x.split == Split::Mirrored);
            if all_mirrored {
                Derived::plain(Split::Mirrored)
            } else {
                Err(unsupported(srcs))
            }
        }
    }
}

fn unsupported(srcs: &[Option<Src>]) -> RuleError {
    RuleError::Unsupported {
        sources: srcs
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i, s.split.clone())))
            .collect(),
    }
}

fn mirrored(s: &Src, what: &'static str) -> Result<(), RuleError> {
    if s.split == Split::Mirrored {
        Ok(())
    } else {
        Err(RuleError::NotMirrored {
            what,
            split: s.split.clone(),
        })
    }
}

/// `d` along `axis` of a result that has `to` indices there where the source had `from`
/// (GLU halving rows, a batched product with more heads than its weight): the same
/// placement, every extent scaled exactly.
fn rescaled(d: &DimSplit, axis: usize, from: i64, to: i64) -> Result<DimSplit, RuleError> {
    let ne =
        d.ne.iter()
            .map(|&e| {
                if from == 0 || (e * to) % from != 0 {
                    Err(RuleError::NotWholePart {
                        extent: e,
                        from,
                        to,
                    })
                } else {
                    Ok(e * to / from)
                }
            })
            .collect::<Result<Vec<i64>, RuleError>>()?;
    Ok(DimSplit { axis, n: d.n, ne })
}

/// `d` carried to a result whose split axis is `axis` with `ne_out[axis]` indices: the same
/// placement (a fused QKV result keeps its Q/K/V segments for the views that cut it apart),
/// scaled when the size changes.
fn carry(d: &DimSplit, axis: usize, ne_in: [i64; 4], ne_out: [i64; 4]) -> Result<Split, RuleError> {
    rescaled(d, axis, ne_in[d.axis], ne_out[axis]).map(Split::Dim)
}

/// `b` may be combined with `a`'s split: same split, or mirrored and broadcast along a's axis.
fn broadcast_ok(a: &Split, b: &Src) -> Result<(), RuleError> {
    match (a, &b.split) {
        (_, Split::Mirrored) if matches!(a, Split::Mirrored) => Ok(()),
        (Split::Dim(d), Split::Mirrored) if b.ne[d.axis] == 1 => Ok(()),
        (x, y) if x.same_as(y) => Ok(()),
        _ => Err(RuleError::CannotBroadcast {
            a: a.clone(),
            b: b.split.clone(),
        }),
    }
}

fn binary(op: Op, a: &Src, b: &Src, ne: [i64; 4]) -> Result<Derived, RuleError> {
    use Split::{Mirrored, Partial};
    match (&a.split, &b.split) {
        (Mirrored, Mirrored) => Derived::plain(Mirrored),
        // linear in the partial operand(s): a sum of sums, or a sum scaled by full values
        (Partial, Partial) if matches!(op, Op::Add | Op::Sub) => Derived::plain(Partial),
        (Partial, Mirrored) if !matches!(op, Op::Add | Op::Sub) => Derived::plain(Partial),
        (Mirrored, Partial) if op == Op::Mul => Derived::plain(Partial),
        (Split::Dim(d), _) => match broadcast_ok(&a.split, b) {
            Ok(()) => Derived::plain(carry(d, d.axis, a.ne, ne)?),
            Err(e) => match slice_of(b, d) {
                Some(slice) => Derived::slicing(carry(d, d.axis, a.ne, ne)?, 1, slice),
                None => Err(e),
            },
        },
        (Mirrored, Split::Dim(d)) => match slice_of(a, d) {
            Some(slice) => Derived::slicing(carry(d, d.axis, b.ne, ne)?, 0, slice),
            None => Err(RuleError::CannotCombine {
                a: a.split.clone(),
                b: b.split.clone(),
            }),
        },
        _ => Err(RuleError::CannotCombine {
            a: a.split.clone(),
            b: b.split.clone(),
        }),
    }
}

/// Element-wise ops whose present sources all share one split. Partial sums pass only
/// through linear ops (`linear`): applied to each summand, they give the op of the sum.
fn same_split(srcs: &[Option<Src>], ne: [i64; 4], linear: bool) -> Result<Derived, RuleError> {
    let mut it = srcs.iter().flatten();
    let Some(first) = it.next() else {
        return Derived::plain(Split::Mirrored);
    };
    for other in it {
        if !first.split.same_as(&other.split) {
            broadcast_ok(&first.split, other)?;
        }
    }
    match &first.split {
        Split::Partial if !linear => Err(RuleError::NotLinear),
        Split::Dim(d) => Derived::plain(carry(d, d.axis, first.ne, ne)?),
        other => Derived::plain(other.clone()),
    }
}

/// GLU: with two sources, element-wise; with one, each row is [gate | up] (or swapped) and
/// the result takes half of it, so a row split must give every device the same number of
/// gate and up columns, as two segments (libllama's fused `ffn_gate_up` weights).
fn glu(srcs: &[Option<Src>], ne: [i64; 4]) -> Result<Derived, RuleError> {
    let single = srcs.get(1).is_none_or(|s| s.is_none());
    let a = srcs
        .first()
        .and_then(|s| s.as_ref())
        .ok_or(RuleError::GluSource)?;
    match &a.split {
        Split::Dim(d) if single && d.axis == 0 => {
            let halves_match = d.n_segments() == 2 && (0..d.n).all(|j| d.ne[j] == d.ne[d.n + j]);
            if !halves_match {
                return Err(RuleError::GluHalves(a.split.clone()));
            }
            Derived::plain(Split::dim(0, d.ne[..d.n].to_vec()))
        }
        _ => same_split(srcs, ne, false),
    }
}

/// `w` (ne = [k, m, ...]) times `x` (ne = [k, t, ...]) gives [m, t, ...].
fn mul_mat(w: &Src, x: &Src, ne: [i64; 4], is_id: bool) -> Result<Derived, RuleError> {
    use Split::*;
    match (&w.split, &x.split) {
        (Mirrored, Mirrored) => Derived::plain(Mirrored),
        // output rows split with the weight's rows
        (Dim(a), Mirrored) if a.axis == 1 => Derived::plain(carry(a, 0, w.ne, ne)?),
        // tokens (columns) split
        (Mirrored, Dim(b)) if b.axis == 1 && !is_id => Derived::plain(carry(b, 1, x.ne, ne)?),
        // contraction split: every device holds a partial sum, reduced right after
        (Dim(a), Dim(b)) if a.axis == 0 && b.axis == 0 => {
            if !a.places_like(b) {
                return Err(RuleError::ContractionDiffers {
                    weight: w.split.clone(),
                    input: x.split.clone(),
                });
            }
            Ok(Derived {
                split: Mirrored,
                reduce: true,
                sliced: Vec::new(),
            })
        }
        // batched (per head) products: both split along the same batch dimension
        (Dim(a), Dim(b)) if a.axis >= 2 && a.axis == b.axis && !is_id => {
            // x's batch i uses w's batch i / ratio: each device must hold, for its batches
            // of w, exactly the batches of x that use them, in order
            let (wa, xa) = (w.ne[a.axis], x.ne[a.axis]);
            let ratio = if wa > 0 && xa % wa == 0 { xa / wa } else { 0 };
            if ratio == 0 || !a.widened(a.axis, ratio).places_like(b) {
                return Err(RuleError::BatchedHeads);
            }
            Derived::plain(carry(b, b.axis, x.ne, ne)?)
        }
        (Mirrored, Partial) | (Partial, Mirrored) => Derived::plain(Partial),
        // contraction split with a whole input: each device multiplies its columns of the
        // weight with its rows of the input
        (Dim(a), Mirrored) if a.axis == 0 => match slice_of(x, a) {
            Some(slice) => Ok(Derived {
                split: Mirrored,
                reduce: true,
                sliced: vec![(1, slice)],
            }),
            None => Err(RuleError::MatMul {
                weight: w.split.clone(),
                input: x.split.clone(),
            }),
        },
        _ => Err(RuleError::MatMul {
            weight: w.split.clone(),
            input: x.split.clone(),
        }),
    }
}

/// A split along dimension 0 in which every device holds all of its `ne[0]` or nothing, for a
/// tensor whose dimension `axis` has extent 1: the same placement as a split of `axis` with
/// extents 1 and 0 (e.g. a model's single KV head, placed on one device). Returns that split.
fn whole_rows_as(split: &Split, ne: [i64; 4], axis: usize) -> Option<Split> {
    let Split::Dim(d) = split else { return None };
    let extents = d.extents();
    let whole =
        d.axis == 0 && ne[axis] == 1 && ne[0] > 0 && extents.iter().all(|&x| x == 0 || x == ne[0]);
    whole.then(|| Split::dim(axis, extents.iter().map(|&x| i64::from(x > 0)).collect()))
}

/// q [d, t, h, s], k and v [d, kv, h_kv, s], mask, sinks [h] → result [d_v, h, t, s].
fn flash_attn(op_params: &[i32; 16], srcs: &[Option<Src>]) -> Result<Derived, RuleError> {
    let get = |i: usize| srcs.get(i).and_then(|s| s.as_ref());
    let (q, k, v) = match (get(0), get(1), get(2)) {
        (Some(q), Some(k), Some(v)) => (q, k, v),
        _ => return Err(RuleError::FlashAttnSources),
    };
    if let Some(m) = get(3) {
        mirrored(m, "attention mask")?;
    }
    // K and V with a single head on one device are split along their rows, all or nothing:
    // the same placement as that head (axis 2) on that device.
    let by_heads = |x: &Src| whole_rows_as(&x.split, x.ne, 2).unwrap_or_else(|| x.split.clone());
    let (ks, vs) = (by_heads(k), by_heads(v));
    // over a head split each device numbers its heads from 0: ALiBi's slopes (op_params[1],
    // max_bias) and a mask per head would be another head's
    let whole = [&q.split, &ks, &vs].iter().all(|s| **s == Split::Mirrored);
    if !whole && f32::from_bits(op_params[1] as u32) != 0.0 {
        return Err(RuleError::FlashAttnAlibi);
    }
    if !whole && get(3).is_some_and(|m| m.ne[2] > 1) {
        return Err(RuleError::FlashAttnMaskHeads);
    }
    match (&q.split, &ks, &vs) {
        (Split::Mirrored, Split::Mirrored, Split::Mirrored) => {
            if let Some(s) = get(4) {
                mirrored(s, "attention sinks")?;
            }
            Derived::plain(Split::Mirrored)
        }
        (Split::Dim(DimSplit { axis: 2, .. }) | Split::Mirrored, Split::Dim(b), Split::Dim(c))
            if b.axis == 2 && c.axis == 2 =>
        {
            let heads = || RuleError::FlashAttnHeads {
                q: q.split.clone(),
                k: k.split.clone(),
                v: v.split.clone(),
            };
            let group = if k.ne[2] > 0 && q.ne[2] % k.ne[2] == 0 {
                q.ne[2] / k.ne[2]
            } else {
                0
            };
            if group == 0 || !b.places_like(c) {
                return Err(heads());
            }
            // q's head h reads K/V head h / group: each device must hold the q heads of its
            // K/V heads, in order. A whole q (computed by another backend: a layer whose
            // attention weights stay on the CPU, its K/V cache split by heads) is read so.
            let want = b.widened(2, group);
            let (split, mut sliced) = match &q.split {
                Split::Dim(a) if a.places_like(&want) => (a.clone(), Vec::new()),
                Split::Mirrored => (
                    want.clone(),
                    vec![(0, slice_of(q, &want).ok_or_else(heads)?)],
                ),
                _ => return Err(heads()),
            };
            if let Some(sinks) = get(4) {
                match &sinks.split {
                    Split::Dim(sd) if sd.axis == 0 && sd.places_like(&split) => {}
                    // whole sinks with a whole q: sliced alike
                    Split::Mirrored if q.split == Split::Mirrored => {
                        let rows = DimSplit {
                            axis: 0,
                            ..want.clone()
                        };
                        match slice_of(sinks, &rows) {
                            Some(slice) => sliced.push((4, slice)),
                            None => return Err(RuleError::Sinks(sinks.split.clone())),
                        }
                    }
                    other => return Err(RuleError::Sinks(other.clone())),
                }
            }
            Ok(Derived {
                split: Split::Dim(DimSplit { axis: 1, ..split }),
                reduce: false,
                sliced,
            })
        }
        _ => Err(RuleError::FlashAttnNotHeads {
            q: q.split.clone(),
            k: k.split.clone(),
            v: v.split.clone(),
        }),
    }
}

/// q, k [S, H_k, tokens, seqs], v [S, H, tokens, seqs], gate [1 or S, H, ..], beta [1, H, ..],
/// state [S, S, H, seqs] (ggml 0.13: [S·S·H, K, seqs]) → [S·H, tokens·seqs + K·S·seqs]: the
/// output rows, then the new states
/// (see [`crate::packed`]). Each v head is computed on its own from its q/k head (head
/// h mod H_k), its gate, beta and state, so a head split works when every device holds, for
/// each of its v heads, that head's q/k head at the local position the kernel will read.
fn gated_delta_net(srcs: &[Option<Src>]) -> Result<Derived, RuleError> {
    let get = |i: usize| {
        srcs.get(i)
            .and_then(|s| s.as_ref())
            .ok_or(RuleError::MissingSource(i))
    };
    let (q, k, v, g, b, st) = (get(0)?, get(1)?, get(2)?, get(3)?, get(4)?, get(5)?);
    let all = [q, k, v, g, b, st];
    if all.iter().all(|x| x.split == Split::Mirrored) {
        return Derived::plain(Split::Mirrored);
    }
    let by_heads = |what: &'static str, x: &Src, axis: usize| match &x.split {
        Split::Dim(d) if d.axis == axis => Ok(d.clone()),
        other => Err(RuleError::DeltaNetHeads {
            what,
            split: other.clone(),
            v: v.split.clone(),
        }),
    };
    let vd = by_heads("v", v, 1)?;
    let qd = by_heads("q", q, 1)?;
    // the state holds S·S values per head: [S, S, H, seqs], split by heads (dimension 2), or,
    // as ggml 0.13 takes it, flattened to [S·S·H, K, seqs] and split along dimension 0
    let s = v.ne[0];
    let (state_axis, per_head) = if st.ne[0] == s { (2, 1) } else { (0, s * s) };
    let per_head_values = vd.widened(0, per_head);
    for (what, x, axis, like) in [
        ("gate", g, 1, &vd),
        ("beta", b, 1, &vd),
        ("state", st, state_axis, &per_head_values),
    ] {
        if !by_heads(what, x, axis)?.places_like(like) {
            return Err(RuleError::DeltaNetHeads {
                what,
                split: x.split.clone(),
                v: v.split.clone(),
            });
        }
    }
    if !k.split.same_as(&q.split) {
        return Err(RuleError::DeltaNetKeys {
            q: q.split.clone(),
            k: k.split.clone(),
        });
    }
    let (h_k, h) = (q.ne[1], v.ne[1]);
    let groups_ok = h_k > 0
        && h % h_k == 0
        && (0..h).all(|head| {
            let (Some((dv, lv)), Some((dk, lk))) = (vd.locate(head), qd.locate(head % h_k)) else {
                return false;
            };
            let local_k = qd.extent(dk);
            dv == dk && local_k > 0 && lk == lv % local_k
        });
    if !groups_ok {
        return Err(RuleError::DeltaNetGroups {
            qk: q.split.clone(),
            v: v.split.clone(),
        });
    }
    // a result row holds S values per head
    Derived::plain(Split::Dim(vd.widened(0, v.ne[0])))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A dense F32 tensor's layout.
    pub(crate) fn f32_layout(ne: [i64; 4]) -> Layout {
        let mut l = Layout::logical(ne);
        for x in l.nb.iter_mut() {
            *x *= 4;
        }
        l
    }

    #[test]
    fn own_layout_scales_outer_strides() {
        let t = f32_layout([64, 5, 1, 1]);
        let l = own_layouts(&t, &Split::dim(0, vec![16, 48]), 2).unwrap();
        assert_eq!(l[0].ne, [16, 5, 1, 1]);
        assert_eq!(l[0].nb, [4, 64, 320, 320]);
        assert_eq!(l[1].nb[1], 192);
    }

    #[test]
    fn reshape_of_rows_into_heads() {
        // [64, 5] split {32, 32} on dim 0 → [16, 4, 5]: heads (dim 1) {2, 2}
        let s = map_reshape(
            [64, 5, 1, 1],
            &Split::dim(0, vec![32, 32]),
            [16, 4, 5, 1],
            2,
        )
        .unwrap();
        assert_eq!(s, Split::dim(1, vec![2, 2]));
        // and back
        let s = map_reshape([16, 4, 5, 1], &Split::dim(1, vec![1, 3]), [64, 5, 1, 1], 2).unwrap();
        assert_eq!(s, Split::dim(0, vec![16, 48]));
        // a split that cuts a head in two cannot become a head split
        assert!(map_reshape([64, 5, 1, 1], &Split::dim(0, vec![8, 56]), [16, 4, 5, 1], 2).is_err());
    }

    /// Found by the property test `accepted_views_address_every_element`: a view that crosses a
    /// segment boundary of its source was given a one-segment split in device order, which put
    /// its first index on device 0 although device 1 holds it.
    #[test]
    fn a_view_across_segments_keeps_its_placement() {
        // 10 rows over 3 devices in two segments: {1, 2, 1} then {2, 1, 3}; the view takes
        // rows 2..6, i.e. device 1's rows 1..2 of segment 0, device 2's row 0, then device 0's
        // rows 1..3 of segment 1 (host rows 4 and 5)
        let base = f32_layout([4, 10, 1, 1]);
        let d = Split::Dim(DimSplit {
            axis: 1,
            n: 3,
            ne: vec![1, 2, 1, 2, 1, 3],
        });
        let v = Layout {
            ne: [4, 4, 1, 1],
            nb: base.nb,
            blck: 1,
        };
        let (split, layouts) = map_view(&base, &d, &v, 2 * 16, 3).unwrap();
        assert_eq!(
            split,
            Split::Dim(DimSplit {
                axis: 1,
                n: 3,
                ne: vec![0, 1, 1, 2, 0, 0],
            })
        );
        // device 0 holds its rows 1 and 2 (host rows 4, 5), device 1 its row 1, device 2 row 0
        assert_eq!(layouts[0].offs, 16);
        assert_eq!(layouts[1].offs, 16);
        assert_eq!(layouts[2].offs, 0);
    }

    /// Found by the fuzz target `view_mapping` (its corpus keeps the input): a view whose
    /// rows times its step overflow the address space overflowed the arithmetic (a panic in
    /// builds with overflow checks, a wrong mapping without) instead of being refused.
    #[test]
    fn a_view_beyond_the_address_space_is_outside() {
        let base = f32_layout([4, 1, 1, 1]);
        let v = Layout {
            ne: [1, 1 << 62, 1, 1],
            nb: [4, 8, 8, 8],
            blck: 1,
        };
        let r = map_view(&base, &Split::dim(0, vec![2, 2]), &v, 0, 2);
        assert_eq!(r.map(|(s, _)| s), Err(RuleError::ViewOutside));
    }

    #[test]
    fn permuted_view_finds_the_head_dimension() {
        // base [64, 5] (4 heads of 16, 5 tokens) split {32,32}; view [16, 5, 4] = permute(0,2,1)
        let base = f32_layout([64, 5, 1, 1]);
        let v = Layout {
            ne: [16, 5, 4, 1],
            nb: [4, 256, 64, 1280],
            blck: 1,
        };
        let (s, l) = map_view(&base, &Split::dim(0, vec![32, 32]), &v, 0, 2).unwrap();
        assert_eq!(s, Split::dim(2, vec![2, 2]));
        assert_eq!(l[1].ne, [16, 5, 2, 1]);
        assert_eq!(l[1].nb, [4, 128, 64, 640]);
        assert_eq!(l[1].offs, 0);
    }

    #[test]
    fn view_of_one_segment() {
        // fused qkv [8 (q 4, k 2, v 2), 3 tokens], segments over 2 devices: q {2,2}, k {1,1}, v {1,1}
        let base = f32_layout([8, 3, 1, 1]);
        let split = Split::Dim(DimSplit {
            axis: 0,
            n: 2,
            ne: vec![2, 2, 1, 1, 1, 1],
        });
        // the k part: [2, 3] at element 4 with row stride 8 elements
        let v = Layout {
            ne: [2, 3, 1, 1],
            nb: [4, 32, 96, 96],
            blck: 1,
        };
        let (s, l) = map_view(&base, &split, &v, 16, 2).unwrap();
        assert_eq!(s, Split::dim(0, vec![1, 1]));
        // device rows are [q q k v] = 4 elements; k sits at element 2 on both devices
        assert_eq!(l[0].offs, 8);
        assert_eq!(l[1].offs, 8);
        assert_eq!(l[0].nb[1], 16);
    }

    #[test]
    fn view_at_a_later_chunk_scales_the_offset() {
        // cache [32, 10] split {16, 16}; a view of rows 4.. of the cache
        let base = f32_layout([32, 10, 1, 1]);
        let v = Layout {
            ne: [32, 6, 1, 1],
            nb: [4, 128, 768, 768],
            blck: 1,
        };
        let (s, l) = map_view(&base, &Split::dim(0, vec![16, 16]), &v, 4 * 128, 2).unwrap();
        assert_eq!(s, Split::dim(0, vec![16, 16]));
        assert_eq!(l[1].offs, 4 * 64);
        assert_eq!(l[1].nb[1], 64);
    }

    #[test]
    fn quantized_rows_walk_in_blocks() {
        // q8_0-like [64, 10] (34-byte blocks of 32) split {32, 32}: a full 2D view of it
        let base = Layout {
            ne: [64, 10, 1, 1],
            nb: [34, 68, 680, 680],
            blck: 32,
        };
        let (s, l) = map_view(&base, &Split::dim(0, vec![32, 32]), &base, 0, 2).unwrap();
        assert_eq!(s, Split::dim(0, vec![32, 32]));
        assert_eq!(l[1].ne, [32, 10, 1, 1]);
        assert_eq!(l[1].nb[1], 34);
        assert_eq!(l[1].offs, 0);
    }

    #[test]
    fn overlapping_rows_are_refused() {
        // rows of 8 floats stepping by 4 floats over a split source
        let base = f32_layout([64, 1, 1, 1]);
        let v = Layout {
            ne: [8, 14, 1, 1],
            nb: [4, 16, 224, 224],
            blck: 1,
        };
        assert!(map_view(&base, &Split::dim(0, vec![32, 32]), &v, 0, 2).is_err());
    }

    #[test]
    fn zero_slices_map_to_zero_extents() {
        let base = f32_layout([64, 5, 1, 1]);
        let v = Layout {
            ne: [16, 4, 5, 1],
            nb: [4, 64, 256, 1280],
            blck: 1,
        };
        let (s, _) = map_view(&base, &Split::dim(0, vec![0, 32, 32]), &v, 0, 3).unwrap();
        assert_eq!(s, Split::dim(1, vec![0, 2, 2]));
    }

    /// Qwen3.5's fused projection over 2 devices: segments q {2,2}, k {2,2}, v0 {2,2}, v1 {2,2}.
    fn fused() -> Split {
        Split::Dim(DimSplit {
            axis: 0,
            n: 2,
            ne: vec![2, 2, 2, 2, 2, 2, 2, 2],
        })
    }

    #[test]
    fn a_view_of_all_segments_keeps_them() {
        // the conv state [16 channels, 3 sequences] as a whole: each device's four pieces
        // follow each other in its slice, so its part of the view is one run there
        let base = f32_layout([16, 3, 1, 1]);
        let (s, l) = map_view(&base, &fused(), &base, 0, 2).unwrap();
        assert!(s.same_as(&fused()));
        assert_eq!(s.as_dim().unwrap().n_segments(), 4);
        assert_eq!((l[1].ne, l[1].nb[1], l[1].offs), ([8, 3, 1, 1], 32, 0));
        // reshaped to [2 per channel, 8 channels, 3]: channels in the same segments, halved
        let s = map_reshape([16, 3, 1, 1], &fused(), [2, 8, 3, 1], 2).unwrap();
        assert!(s.same_as(&Split::Dim(DimSplit {
            axis: 1,
            n: 2,
            ne: vec![1; 8]
        })));
        // v alone (two segments): device 0 holds v0's first half and v1's first half
        let v = Layout {
            ne: [8, 3, 1, 1],
            nb: [4, 64, 192, 192],
            blck: 1,
        };
        let (s, l) = map_view(&base, &fused(), &v, 32, 2).unwrap();
        assert_eq!(s.as_dim().unwrap().ne, vec![2, 2, 2, 2]);
        assert_eq!((l[0].offs, l[1].offs), (16, 16));
    }

    #[test]
    fn pieces_apart_on_one_device_are_read_one_period_at_a_time() {
        // q and v0 without k: device 0's pieces have its k piece between them, so they are
        // not one run of its slice; but the segments repeat, and per period (4 channels,
        // 2 per device) the view takes device 0's part of periods 0 and 2: a strided view
        let base = f32_layout([16, 1, 1, 1]);
        let gap = Layout {
            ne: [2, 2, 1, 1],
            nb: [4, 32, 64, 64],
            blck: 1,
        };
        let (s, l) = map_view(&base, &fused(), &gap, 0, 2).unwrap();
        assert_eq!(s, Split::dim(0, vec![2, 0]));
        assert_eq!(
            (l[0].ne, l[0].nb, l[0].offs),
            ([2, 2, 1, 1], [4, 16, 32, 32], 0)
        );
        // without repeats there is no period to read by: refused
        let uneven = Split::Dim(DimSplit {
            axis: 0,
            n: 2,
            ne: vec![2, 2, 2, 2, 2, 2, 3, 1],
        });
        assert_eq!(
            map_view(&base, &uneven, &gap, 0, 2),
            Err(RuleError::ViewTwoPieces)
        );
    }

    #[test]
    fn heads_merged_with_tokens_and_taken_apart_again() {
        // q [16 per head, 4 heads, 3 tokens] split by heads {2, 2}, reshaped to [16, 12] (a
        // rotation of every head's row, libllama 0.26 with a quantized KV cache): each token's
        // heads are a segment, every device holds its heads of every token in order
        let q = [16, 4, 3, 1];
        let heads = Split::dim(1, vec![2, 2]);
        let merged = map_reshape(q, &heads, [16, 12, 1, 1], 2).unwrap();
        let d = merged.as_dim().unwrap();
        assert_eq!((d.axis, d.n_segments(), d.extents()), (1, 3, vec![6, 6]));
        assert_eq!(d.period(), 1);
        let (_, l) = map_view(&f32_layout(q), &heads, &f32_layout([16, 12, 1, 1]), 0, 2).unwrap();
        assert_eq!((l[1].ne, l[1].nb), ([16, 6, 1, 1], [4, 64, 384, 384]));
        // and back to [16, 4, 3]: split by heads again, each device's rows per token
        let back = map_reshape([16, 12, 1, 1], &merged, q, 2).unwrap();
        assert!(back.same_as(&heads));
        let (_, l) = map_view(&f32_layout([16, 12, 1, 1]), &merged, &f32_layout(q), 0, 2).unwrap();
        assert_eq!((l[0].ne, l[0].nb), ([16, 2, 3, 1], [4, 64, 128, 384]));
    }

    #[test]
    fn a_transposed_view_walks_the_split_rows() {
        // [8 channels, 5 tokens] split {3, 5}, transposed to [5 tokens, 8 channels]
        let base = f32_layout([8, 5, 1, 1]);
        let t = Layout {
            ne: [5, 8, 1, 1],
            nb: [32, 4, 160, 160],
            blck: 1,
        };
        let (s, l) = map_view(&base, &Split::dim(0, vec![3, 5]), &t, 0, 2).unwrap();
        assert_eq!(s, Split::dim(1, vec![3, 5]));
        assert_eq!((l[0].ne, l[0].nb[0], l[0].nb[1]), ([5, 3, 1, 1], 12, 4));
    }

    #[test]
    fn rows_that_start_inside_a_step_may_end_at_a_boundary() {
        // conv input [6 = 2 states + 4 tokens, 4 channels] split {2, 2} by channels; the last
        // 2 values of each channel: the view's rows end where device 1's channels begin
        let base = f32_layout([6, 4, 1, 1]);
        let last = Layout {
            ne: [2, 4, 1, 1],
            nb: [4, 24, 96, 96],
            blck: 1,
        };
        let (s, l) = map_view(&base, &Split::dim(1, vec![2, 2]), &last, 16, 2).unwrap();
        assert_eq!(s, Split::dim(1, vec![2, 2]));
        assert_eq!((l[0].offs, l[1].offs), (16, 16));
        // rows of 3 values starting at value 4 cross into the next channel's first value
        let across = Layout {
            ne: [3, 3, 1, 1],
            nb: [4, 24, 96, 96],
            blck: 1,
        };
        assert!(matches!(
            map_view(&base, &Split::dim(1, vec![2, 2]), &across, 16, 2),
            Err(RuleError::BoundaryInsideRow { byte: 48 })
        ));
    }

    fn src(split: Split, ne: [i64; 4]) -> Option<Src> {
        Some(Src { split, ne })
    }

    #[test]
    fn matmul_rules() {
        let p = [0; 16];
        let w1 = src(Split::dim(1, vec![40, 56]), [64, 96, 1, 1]);
        let x = src(Split::Mirrored, [64, 5, 1, 1]);
        let r = derive(Op::MulMat, &p, [96, 5, 1, 1], &[w1, x], 2).unwrap();
        assert_eq!(r.split, Split::dim(0, vec![40, 56]));
        let w0 = src(Split::dim(0, vec![40, 56]), [96, 64, 1, 1]);
        let h = src(Split::dim(0, vec![40, 56]), [96, 5, 1, 1]);
        let r = derive(Op::MulMat, &p, [64, 5, 1, 1], &[w0.clone(), h], 2).unwrap();
        assert!(r.reduce);
        let bad = src(Split::dim(0, vec![48, 48]), [96, 5, 1, 1]);
        assert!(derive(Op::MulMat, &p, [64, 5, 1, 1], &[w0.clone(), bad], 2).is_err());
        // a whole input: each device takes its rows of it
        let xm = src(Split::Mirrored, [96, 5, 1, 1]);
        let r = derive(Op::MulMat, &p, [64, 5, 1, 1], &[w0, xm.clone()], 2).unwrap();
        assert!(r.reduce);
        assert_eq!(r.sliced, vec![(1, DimSplit::single(0, vec![40, 56]))]);
        // not when a device's columns are two runs: its rows would not be one view
        let two_runs = src(
            Split::Dim(DimSplit {
                axis: 0,
                n: 2,
                ne: vec![20, 28, 20, 28],
            }),
            [96, 64, 1, 1],
        );
        assert!(derive(Op::MulMat, &p, [64, 5, 1, 1], &[two_runs, xm], 2).is_err());
    }

    #[test]
    fn row_ops_refuse_split_rows() {
        let p = [0; 16];
        let a = src(Split::dim(0, vec![32, 32]), [64, 5, 1, 1]);
        assert!(derive(Op::RmsNorm, &p, [64, 5, 1, 1], std::slice::from_ref(&a), 2).is_err());
        assert!(derive(Op::SoftMax, &p, [64, 5, 1, 1], &[a], 2).is_err());
        let h = src(Split::dim(1, vec![1, 3]), [16, 4, 5, 1]);
        assert_eq!(
            derive(Op::RmsNorm, &p, [16, 4, 5, 1], &[h], 2)
                .unwrap()
                .split,
            Split::dim(1, vec![1, 3])
        );
    }

    #[test]
    fn broadcast_rules() {
        let p = [0; 16];
        let a = src(Split::dim(1, vec![1, 3]), [16, 4, 5, 1]);
        let bias = src(Split::Mirrored, [16, 1, 1, 1]);
        assert!(derive(Op::Mul, &p, [16, 4, 5, 1], &[a.clone(), bias], 2).is_ok());
        // a whole operand of the same shape: each device adds its slice of it
        let full = src(Split::Mirrored, [16, 4, 5, 1]);
        let heads = DimSplit::single(1, vec![1, 3]);
        for (srcs, slot) in [
            ([a.clone(), full.clone()], 1),
            ([full.clone(), a.clone()], 0),
        ] {
            let r = derive(Op::Add, &p, [16, 4, 5, 1], &srcs, 2).unwrap();
            assert_eq!(r.split, Split::Dim(heads.clone()));
            assert_eq!(r.sliced, vec![(slot, heads.clone())]);
        }
        // a whole operand that neither spans the split dimension nor is broadcast along it
        let part = src(Split::Mirrored, [16, 2, 5, 1]);
        assert!(matches!(
            derive(Op::Add, &p, [16, 4, 5, 1], &[a, part], 2),
            Err(RuleError::CannotBroadcast { .. })
        ));
        assert_eq!(
            derive(Op::Add, &p, [16, 4, 5, 1], &[full.clone(), full], 2)
                .unwrap()
                .split,
            Split::Mirrored
        );
    }

    #[test]
    fn contractions_need_the_same_placement() {
        // equal extents per device, but device 0 holds indices 0..2 and 4..6 of the weight's
        // columns while the input's first device holds 0..4
        let p = [0; 16];
        let w = src(
            Split::Dim(DimSplit {
                axis: 0,
                n: 2,
                ne: vec![2, 2, 2, 2],
            }),
            [8, 4, 1, 1],
        );
        let x = src(Split::dim(0, vec![4, 4]), [8, 5, 1, 1]);
        assert!(matches!(
            derive(Op::MulMat, &p, [4, 5, 1, 1], &[w.clone(), x], 2),
            Err(RuleError::ContractionDiffers { .. })
        ));
        let x = src(w.clone().unwrap().split, [8, 5, 1, 1]);
        assert!(
            derive(Op::MulMat, &p, [4, 5, 1, 1], &[w, x], 2)
                .unwrap()
                .reduce
        );
    }

    #[test]
    fn flash_attn_takes_heads_of_a_whole_q() {
        // q [D=16, T=3, H=4] whole; K/V [16, kv 8, 2 heads] split one head each (GQA 2:1)
        let p = [0; 16];
        let q = src(Split::Mirrored, [16, 3, 4, 1]);
        let kv = src(Split::dim(2, vec![1, 1]), [16, 8, 2, 1]);
        let mask = src(Split::Mirrored, [8, 3, 1, 1]);
        let r = derive(
            Op::FlashAttnExt,
            &p,
            [16, 4, 3, 1],
            &[q.clone(), kv.clone(), kv.clone(), mask.clone()],
            2,
        )
        .unwrap();
        assert_eq!(r.split, Split::dim(1, vec![2, 2]));
        assert_eq!(r.sliced, vec![(0, DimSplit::single(2, vec![2, 2]))]);
        // whole sinks, one per q head: sliced alike
        let sinks = src(Split::Mirrored, [4, 1, 1, 1]);
        let r = derive(
            Op::FlashAttnExt,
            &p,
            [16, 4, 3, 1],
            &[q.clone(), kv.clone(), kv.clone(), mask.clone(), sinks],
            2,
        )
        .unwrap();
        assert_eq!(r.sliced.len(), 2);
        assert_eq!(r.sliced[1], (4, DimSplit::single(0, vec![2, 2])));
        // K and V split differently: refused
        let v = src(Split::dim(2, vec![2, 0]), [16, 8, 2, 1]);
        assert!(derive(
            Op::FlashAttnExt,
            &p,
            [16, 4, 3, 1],
            &[q.clone(), kv.clone(), v, mask.clone()],
            2
        )
        .is_err());
        // ALiBi (max_bias, op_params[1]) or a mask per head: every device would take the
        // slopes or mask rows of heads 0.. of its own
        let mut alibi = p;
        alibi[1] = 8.0f32.to_bits() as i32;
        assert_eq!(
            derive(
                Op::FlashAttnExt,
                &alibi,
                [16, 4, 3, 1],
                &[q.clone(), kv.clone(), kv.clone(), mask],
                2
            ),
            Err(RuleError::FlashAttnAlibi)
        );
        let per_head = src(Split::Mirrored, [8, 3, 4, 1]);
        assert_eq!(
            derive(
                Op::FlashAttnExt,
                &p,
                [16, 4, 3, 1],
                &[q.clone(), kv.clone(), kv, per_head.clone()],
                2
            ),
            Err(RuleError::FlashAttnMaskHeads)
        );
        // all whole: both are fine
        let whole = src(Split::Mirrored, [16, 8, 2, 1]);
        assert!(derive(
            Op::FlashAttnExt,
            &alibi,
            [16, 4, 3, 1],
            &[q, whole.clone(), whole, per_head],
            2
        )
        .is_ok());
    }

    #[test]
    fn set_rows_writes_slices_of_whole_rows() {
        // K of 3 tokens [32, 3] (whole) into a cache [32, 8] split {16, 16} along its rows
        let p = [0; 16];
        let rows = src(Split::Mirrored, [32, 3, 1, 1]);
        let ids = src(Split::Mirrored, [3, 1, 1, 1]);
        let cache = src(Split::dim(0, vec![16, 16]), [32, 8, 1, 1]);
        let r = derive(
            Op::SetRows,
            &p,
            [32, 8, 1, 1],
            &[rows, ids.clone(), cache.clone()],
            2,
        )
        .unwrap();
        assert_eq!(r.split, Split::dim(0, vec![16, 16]));
        assert_eq!(r.sliced, vec![(0, DimSplit::single(0, vec![16, 16]))]);
        // rows of another length are not the cache's rows
        let short = src(Split::Mirrored, [16, 3, 1, 1]);
        assert!(matches!(
            derive(
                Op::SetRows,
                &p,
                [32, 8, 1, 1],
                &[short, ids.clone(), cache],
                2
            ),
            Err(RuleError::Unsupported { .. })
        ));
        // a cache split across its rows: the row ids would pick rows on other devices
        let rows = src(Split::Mirrored, [32, 3, 1, 1]);
        let by_rows = src(Split::dim(1, vec![4, 4]), [32, 8, 1, 1]);
        assert!(derive(Op::SetRows, &p, [32, 8, 1, 1], &[rows, ids, by_rows], 2).is_err());
    }

    #[test]
    fn concat_takes_slices_of_a_whole_operand() {
        // conv state [3, 8 channels] (whole) ++ tokens [5, 8 channels] split {3, 5} by channel,
        // along dimension 0 (op_params[0])
        let p = [0; 16];
        let state = src(Split::Mirrored, [3, 8, 1, 1]);
        let x = src(Split::dim(1, vec![3, 5]), [5, 8, 1, 1]);
        let r = derive(Op::Concat, &p, [8, 8, 1, 1], &[state.clone(), x], 2).unwrap();
        assert_eq!(r.split, Split::dim(1, vec![3, 5]));
        assert_eq!(r.sliced, vec![(0, DimSplit::single(1, vec![3, 5]))]);
        // channels in two runs per device (segments): no single view per device
        let segmented = src(
            Split::Dim(DimSplit {
                axis: 1,
                n: 2,
                ne: vec![2, 2, 2, 2],
            }),
            [5, 8, 1, 1],
        );
        assert!(matches!(
            derive(Op::Concat, &p, [8, 8, 1, 1], &[state, segmented], 2),
            Err(RuleError::Unsupported { .. })
        ));
    }

    #[test]
    fn ssm_conv_by_channels() {
        let p = [0; 16];
        let channels = Split::Dim(DimSplit {
            axis: 1,
            n: 2,
            ne: vec![1, 3, 2, 2],
        });
        let x = src(channels.clone(), [3 + 5, 8, 1, 1]);
        let c = src(channels, [4, 8, 1, 1]);
        let r = derive(Op::SsmConv, &p, [8, 5, 1, 1], &[x.clone(), c], 2).unwrap();
        assert_eq!(r.split.as_dim().unwrap().ne, vec![1, 3, 2, 2]);
        assert_eq!(r.split.as_dim().unwrap().axis, 0);
        let other = src(Split::dim(1, vec![4, 4]), [4, 8, 1, 1]);
        assert!(matches!(
            derive(Op::SsmConv, &p, [8, 5, 1, 1], &[x, other], 2),
            Err(RuleError::SsmConvChannels { .. })
        ));
    }

    /// gated_delta_net's sources: S = 4, 2 q/k heads, 4 v heads, 3 tokens, 1 sequence;
    /// q/k split `qk`, every per-v-head operand split by heads with extents `vh` (2 devices).
    fn gdn_srcs(qk: Split, vh: &[i64]) -> Vec<Option<Src>> {
        let heads = |axis: usize| {
            Split::Dim(DimSplit {
                axis,
                n: 2,
                ne: vh.to_vec(),
            })
        };
        vec![
            src(qk.clone(), [4, 2, 3, 1]),
            src(qk, [4, 2, 3, 1]),
            src(heads(1), [4, 4, 3, 1]),
            src(heads(1), [1, 4, 3, 1]),
            src(heads(1), [1, 4, 3, 1]),
            src(heads(2), [4, 4, 4, 1]),
        ]
    }

    #[test]
    fn gated_delta_net_by_heads() {
        let p = [0; 16];
        let ne = [16, 3 + 4, 1, 1];
        // Qwen3.5's pattern: v head h reads q/k head h mod 2; device 0 holds q/k head 0 and
        // v heads 0 and 2 (two segments), device 1 the others
        let ok = gdn_srcs(Split::dim(1, vec![1, 1]), &[1, 1, 1, 1]);
        let r = derive(Op::GatedDeltaNet, &p, ne, &ok, 2).unwrap();
        // a result row holds 4 values per head
        assert_eq!(r.split.as_dim().unwrap().ne, vec![4, 4, 4, 4]);
        // v heads 0, 1 on device 0 would read q/k heads 0 and 1, but it holds only head 0
        let grouped = gdn_srcs(Split::dim(1, vec![1, 1]), &[2, 2]);
        assert!(matches!(
            derive(Op::GatedDeltaNet, &p, ne, &grouped, 2),
            Err(RuleError::DeltaNetGroups { .. })
        ));
        // a state not split like v
        let mut bad = ok.clone();
        bad[5] = src(Split::Mirrored, [4, 4, 4, 1]);
        assert!(matches!(
            derive(Op::GatedDeltaNet, &p, ne, &bad, 2),
            Err(RuleError::DeltaNetHeads { what: "state", .. })
        ));
        // ggml 0.13's flattened state [S·S·H, K, seqs]: v's head segments in blocks of S·S = 16
        let two = |axis: usize, ne: Vec<i64>| Split::Dim(DimSplit { axis, n: 2, ne });
        let mut flat = ok.clone();
        flat[5] = src(two(0, vec![16, 16, 16, 16]), [64, 2, 1, 1]);
        assert_eq!(derive(Op::GatedDeltaNet, &p, ne, &flat, 2).unwrap(), r);
        // split in blocks of S values, not S·S: heads torn apart
        flat[5] = src(two(0, vec![4, 4, 4, 4]), [64, 2, 1, 1]);
        assert!(matches!(
            derive(Op::GatedDeltaNet, &p, ne, &flat, 2),
            Err(RuleError::DeltaNetHeads { what: "state", .. })
        ));
        // split along the snapshot slots
        flat[5] = src(two(1, vec![1, 1]), [64, 2, 1, 1]);
        assert!(matches!(
            derive(Op::GatedDeltaNet, &p, ne, &flat, 2),
            Err(RuleError::DeltaNetHeads { what: "state", .. })
        ));
        let mirrored: Vec<Option<Src>> = ok
            .iter()
            .map(|s| {
                s.as_ref().map(|s| Src {
                    split: Split::Mirrored,
                    ne: s.ne,
                })
            })
            .collect();
        assert_eq!(
            derive(Op::GatedDeltaNet, &p, ne, &mirrored, 2)
                .unwrap()
                .split,
            Split::Mirrored
        );
    }

    #[test]
    fn flash_attention_by_heads() {
        let p = [0; 16];
        let q = src(Split::dim(2, vec![2, 2]), [16, 5, 4, 1]);
        let k = src(Split::dim(2, vec![1, 1]), [16, 8, 2, 1]);
        let m = src(Split::Mirrored, [8, 5, 1, 1]);
        let r = derive(
            Op::FlashAttnExt,
            &p,
            [16, 4, 5, 1],
            &[q.clone(), k.clone(), k.clone(), m],
            2,
        )
        .unwrap();
        assert_eq!(r.split, Split::dim(1, vec![2, 2]));
        let k_bad = src(Split::dim(2, vec![2, 0]), [16, 8, 2, 1]);
        assert!(derive(
            Op::FlashAttnExt,
            &p,
            [16, 4, 5, 1],
            &[q, k_bad.clone(), k_bad],
            2
        )
        .is_err());
    }
}
