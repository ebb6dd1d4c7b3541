//! Results that pack two tensors into one.
//!
//! `GATED_DELTA_NET` returns a `[S·H, tokens·seqs + S·seqs]` tensor: first its output, one row
//! of `S` values per head for each token, then the new recurrent states, `S·S` values per head
//! for each sequence. libllama reads the two parts through views. Split by heads, the result
//! is split along dimension 0 (`S` values per head), and each device computes its heads: its
//! slice holds its output rows, then its heads' states. The output part is a split tensor
//! like any other, but the states are not rows of the result: head `h`'s state is `S·S`
//! consecutive values, so in the host tensor the states are `[S·S·H, seqs]` split along
//! dimension 0. Each part is mapped through its own layout.

use crate::rules::{self, DeviceLayout, Layout, RuleError};
use crate::split::{DimSplit, Split};
use crate::transfer::{self, PartialBlocks, Piece};

/// How a packed result is laid out: `s` values per head, `out_rows` output rows before the
/// states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packed {
    pub s: i64,
    pub out_rows: i64,
}

/// One part of a packed tensor: its layout and split, and where it starts in the host
/// tensor and in each device's slice.
struct Part {
    layout: Layout,
    split: DimSplit,
    host_start: usize,
    dev_start: Vec<usize>,
}

impl Part {
    fn host_end(&self) -> usize {
        self.host_start + self.layout.nb[3] * self.layout.ne[3] as usize
    }
}

impl Packed {
    /// The packing of a `GATED_DELTA_NET` result whose v operand has shape `v_ne`
    /// (`[S, H, tokens, seqs]`).
    pub fn gated_delta_net(v_ne: [i64; 4]) -> Packed {
        Packed {
            s: v_ne[0],
            out_rows: v_ne[2] * v_ne[3],
        }
    }

    /// The output part, then the states part, of tensor `t` split as `d`.
    fn parts(&self, t: &Layout, d: &DimSplit) -> Result<[Part; 2], RuleError> {
        let state_rows = t.ne[1] - self.out_rows;
        let laid_out = t.is_contiguous()
            && t.blck == 1
            && d.axis == 0
            && t.ne[2] == 1
            && t.ne[3] == 1
            && self.s > 0
            && state_rows >= 0
            && state_rows % self.s == 0;
        if !laid_out {
            return Err(RuleError::PackedLayout);
        }
        let elem = t.nb[0];
        let dense = |ne: [i64; 4]| {
            let mut nb = [elem; 4];
            for k in 1..4 {
                nb[k] = nb[k - 1] * ne[k - 1] as usize;
            }
            Layout { ne, nb, blck: 1 }
        };
        let out = dense([t.ne[0], self.out_rows, 1, 1]);
        let states = dense([t.ne[0] * self.s, state_rows / self.s, 1, 1]);
        let out_bytes = out.nb[2];
        let out_bytes_of = |j: usize| d.extent(j) as usize * elem * self.out_rows as usize;
        Ok([
            Part {
                layout: out,
                split: d.clone(),
                host_start: 0,
                dev_start: vec![0; d.n],
            },
            Part {
                layout: states,
                split: d.widened(0, self.s),
                host_start: out_bytes,
                dev_start: (0..d.n).map(out_bytes_of).collect(),
            },
        ])
    }
}

/// [`rules::map_view`] for a view `v` at byte `offs` of packed tensor `base` split as `split`:
/// the view must lie within one part.
pub fn map_view(
    packed: Packed,
    base: &Layout,
    split: &Split,
    v: &Layout,
    offs: usize,
    n: usize,
) -> Result<(Split, Vec<DeviceLayout>), RuleError> {
    let Split::Dim(d) = split else {
        return rules::map_view(base, split, v, offs, n);
    };
    let end = offs + view_span(v, base.nb[0]);
    for part in packed.parts(base, d)? {
        if offs >= part.host_start && end <= part.host_end() {
            let (s, mut layouts) = rules::map_view(
                &part.layout,
                &Split::Dim(part.split.clone()),
                v,
                offs - part.host_start,
                n,
            )?;
            for (l, start) in layouts.iter_mut().zip(&part.dev_start) {
                l.offs += start;
            }
            return Ok((s, layouts));
        }
    }
    Err(RuleError::PackedViewStraddles)
}

/// Bytes from a view's first element to the end of its last (elements of `elem` bytes; 0 for
/// an empty view).
fn view_span(v: &Layout, elem: usize) -> usize {
    if v.ne.iter().any(|&e| e <= 0) {
        return 0;
    }
    let last: usize = (0..4).map(|k| (v.ne[k] as usize - 1) * v.nb[k]).sum();
    last + elem
}

/// [`transfer::pieces`] for bytes `[offset, offset+size)` of packed tensor `t` split as `d`.
pub fn pieces(
    packed: Packed,
    t: &Layout,
    d: &DimSplit,
    offset: usize,
    size: usize,
) -> Result<Vec<Piece>, PackedTransferError> {
    let end = offset + size;
    let mut out = Vec::new();
    for part in packed
        .parts(t, d)
        .map_err(|_| PackedTransferError::Layout)?
    {
        let lo = offset.max(part.host_start);
        let hi = end.min(part.host_end());
        if lo >= hi {
            continue;
        }
        let ps = transfer::pieces(&part.layout, &part.split, lo - part.host_start, hi - lo)
            .map_err(PackedTransferError::Blocks)?;
        out.extend(ps.into_iter().map(|mut p| {
            p.host_offset += lo - offset;
            p.strided.offset += part.dev_start[p.device];
            p
        }));
    }
    Ok(out)
}

/// Why the pieces of a packed tensor could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackedTransferError {
    Layout,
    Blocks(PartialBlocks),
}

impl std::fmt::Display for PackedTransferError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PackedTransferError::Layout => RuleError::PackedLayout.fmt(f),
            PackedTransferError::Blocks(b) => b.fmt(f),
        }
    }
}

impl std::error::Error for PackedTransferError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tests::f32_layout;

    /// S = 2, H = 3 heads split {1, 2}, 2 tokens of one sequence: a [6, 2 + 2] result.
    fn result() -> (Packed, Layout, DimSplit) {
        let p = Packed::gated_delta_net([2, 3, 2, 1]);
        (p, f32_layout([6, 4, 1, 1]), DimSplit::single(0, vec![2, 4]))
    }

    /// Where host element `i` of the packed result lives: (device, element in its slice), by
    /// the definition in the module comment.
    fn place(i: usize) -> (usize, usize) {
        let (s, h_of) = (2usize, [0usize, 1, 1]);
        let local = |h: usize| if h == 0 { 0 } else { h - 1 };
        let heads = [1usize, 2];
        let out_elems = 6 * 2;
        if i < out_elems {
            let (row, col) = (i / 6, i % 6);
            let (h, x) = (col / s, col % s);
            let j = h_of[h];
            (j, row * heads[j] * s + local(h) * s + x)
        } else {
            let k = i - out_elems;
            let (h, x) = (k / (s * s), k % (s * s));
            let j = h_of[h];
            (j, heads[j] * s * 2 + local(h) * s * s + x)
        }
    }

    #[test]
    fn transfers_follow_the_packing() {
        let (p, t, d) = result();
        for (offset, size) in [(0, 96), (8, 80), (40, 40), (48, 48), (52, 12)] {
            let ps = pieces(p, &t, &d, offset, size).unwrap();
            let mut seen = vec![None; size];
            for piece in &ps {
                for c in 0..piece.strided.n_copies {
                    let (dev, host) = piece.strided.block(c);
                    for b in 0..piece.strided.size {
                        let h = piece.host_offset + host + b;
                        assert!(seen[h].is_none(), "byte {h} twice");
                        seen[h] = Some((piece.device, dev + b));
                    }
                }
            }
            for (b, got) in seen.iter().enumerate() {
                let (j, e) = place((offset + b) / 4);
                assert_eq!(
                    *got,
                    Some((j, e * 4 + (offset + b) % 4)),
                    "byte {}",
                    offset + b
                );
            }
        }
    }

    #[test]
    fn views_of_each_part() {
        let (p, t, d) = result();
        // the output as [S, H, tokens, seqs]
        let out = Layout {
            ne: [2, 3, 2, 1],
            nb: [4, 8, 24, 48],
            blck: 1,
        };
        let (s, l) = map_view(p, &t, &Split::Dim(d.clone()), &out, 0, 2).unwrap();
        assert_eq!(s, Split::dim(1, vec![1, 2]));
        assert_eq!((l[1].offs, l[1].nb[2]), (0, 16));
        // the states as [S, S, H, seqs], after the 48 bytes of output
        let st = Layout {
            ne: [2, 2, 3, 1],
            nb: [4, 8, 16, 48],
            blck: 1,
        };
        let (s, l) = map_view(p, &t, &Split::Dim(d.clone()), &st, 48, 2).unwrap();
        assert_eq!(s, Split::dim(2, vec![1, 2]));
        // device 1's output is 2 tokens of 2 heads of 2 values: its states start at byte 32
        assert_eq!((l[0].offs, l[1].offs), (16, 32));
        assert_eq!(l[1].nb[3], 32);
        // a view across both parts is refused
        let across = Layout {
            ne: [6, 2, 1, 1],
            nb: [4, 24, 48, 48],
            blck: 1,
        };
        assert_eq!(
            map_view(p, &t, &Split::Dim(d), &across, 24, 2),
            Err(RuleError::PackedViewStraddles)
        );
    }

    #[test]
    fn other_layouts_are_refused() {
        let (p, _, d) = result();
        assert!(pieces(p, &f32_layout([6, 5, 1, 1]), &d, 0, 4).is_err());
        let by_rows = DimSplit::single(1, vec![2, 2]);
        assert!(pieces(p, &f32_layout([6, 4, 1, 1]), &by_rows, 0, 4).is_err());
    }
}
