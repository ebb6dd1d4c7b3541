//! Transfers between host memory and tensor data: the strided form every 2D transfer takes,
//! and the pieces that move a byte range of a tensor split across devices.

use std::fmt;

use crate::rules::Layout;
use crate::split::DimSplit;

/// A strided transfer: `n_copies` blocks of `size` bytes; block `i` is at
/// `offset + i*stride_tensor` in the tensor and `i*stride_data` in host memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Strided {
    pub offset: usize,
    pub size: usize,
    pub n_copies: usize,
    pub stride_tensor: usize,
    pub stride_data: usize,
}

impl Strided {
    /// One past the last tensor byte touched, or `None` when that overflows.
    pub fn tensor_end(&self) -> Option<usize> {
        if self.n_copies == 0 || self.size == 0 {
            return Some(self.offset);
        }
        (self.n_copies - 1)
            .checked_mul(self.stride_tensor)?
            .checked_add(self.offset)?
            .checked_add(self.size)
    }

    /// Distance from the first to the last block's start in host memory, or `None` when
    /// that overflows.
    pub fn host_span(&self) -> Option<usize> {
        match self.n_copies {
            0 => Some(0),
            n => (n - 1).checked_mul(self.stride_data),
        }
    }

    /// Offsets (tensor, host) of block `i`. Only meaningful for blocks whose end was checked
    /// ([`Strided::tensor_end`], [`Strided::host_span`]).
    pub fn block(&self, i: usize) -> (usize, usize) {
        (self.offset + i * self.stride_tensor, i * self.stride_data)
    }
}

/// One strided copy between host memory and device `device`'s tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    pub device: usize,
    /// Offset from the start of the caller's host range.
    pub host_offset: usize,
    pub strided: Strided,
}

/// A split along dimension 0 whose extents are not whole quantization blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartialBlocks {
    pub count: i64,
    pub blck: i64,
}

impl fmt::Display for PartialBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} elements are not whole blocks of {}",
            self.count, self.blck
        )
    }
}

impl std::error::Error for PartialBlocks {}

/// The pieces that move bytes `[offset, offset+size)` of a contiguous tensor `t` split as `d`:
/// in host order, each byte of the range exactly once, each piece inside one device's slice.
/// Whole rows of the split dimension (`offset` and `size` multiples of its chunk) give one
/// strided piece per run of the split; other ranges are cut per chunk.
pub fn pieces(
    t: &Layout,
    d: &DimSplit,
    offset: usize,
    size: usize,
) -> Result<Vec<Piece>, PartialBlocks> {
    let bytes = |k: i64| -> Result<usize, PartialBlocks> {
        if d.axis == 0 {
            if k % t.blck != 0 {
                return Err(PartialBlocks {
                    count: k,
                    blck: t.blck,
                });
            }
            Ok((k / t.blck) as usize * t.nb[0])
        } else {
            Ok(k as usize * t.nb[d.axis])
        }
    };
    let chunk = bytes(t.ne[d.axis])?;
    let mut out = Vec::new();
    if size == 0 || chunk == 0 {
        return Ok(out);
    }
    let ivs = d.intervals();
    let chunk_of: Vec<usize> = (0..d.n)
        .map(|j| bytes(d.extent(j)))
        .collect::<Result<_, _>>()?;
    if offset % chunk == 0 && size % chunk == 0 {
        let c0 = offset / chunk;
        for iv in &ivs {
            let (hb, len, db) = (bytes(iv.host_start)?, bytes(iv.len)?, bytes(iv.dev_start)?);
            let cj = chunk_of[iv.device];
            out.push(Piece {
                device: iv.device,
                host_offset: hb,
                strided: Strided {
                    offset: c0 * cj + db,
                    size: len,
                    n_copies: size / chunk,
                    stride_tensor: cj,
                    stride_data: chunk,
                },
            });
        }
        return Ok(out);
    }
    let end = offset + size;
    for c in offset / chunk..=(end - 1) / chunk {
        for iv in &ivs {
            let (hb, len, db) = (bytes(iv.host_start)?, bytes(iv.len)?, bytes(iv.dev_start)?);
            let lo = (c * chunk + hb).max(offset);
            let hi = (c * chunk + hb + len).min(end);
            if lo >= hi {
                continue;
            }
            out.push(Piece {
                device: iv.device,
                host_offset: lo - offset,
                strided: Strided {
                    offset: c * chunk_of[iv.device] + db + (lo - c * chunk - hb),
                    size: hi - lo,
                    n_copies: 1,
                    stride_tensor: 0,
                    stride_data: 0,
                },
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::tests::f32_layout;

    fn s(offset: usize, size: usize, n_copies: usize, stride_tensor: usize) -> Strided {
        Strided {
            offset,
            size,
            n_copies,
            stride_tensor,
            stride_data: 0,
        }
    }

    #[test]
    fn tensor_end_covers_last_block() {
        assert_eq!(s(4, 8, 3, 16).tensor_end(), Some(4 + 2 * 16 + 8));
        assert_eq!(s(4, 8, 1, 1000).tensor_end(), Some(12));
    }

    #[test]
    fn empty_transfers_end_at_offset() {
        assert_eq!(s(7, 0, 5, 16).tensor_end(), Some(7));
        assert_eq!(s(7, 8, 0, 16).tensor_end(), Some(7));
    }

    #[test]
    fn overflowing_strides_are_rejected() {
        assert_eq!(s(0, 1, 3, usize::MAX / 2 + 1).tensor_end(), None);
        assert_eq!(s(usize::MAX, 1, 1, 0).tensor_end(), None);
        let mut h = s(0, 1, 3, 0);
        h.stride_data = usize::MAX / 2 + 1;
        assert_eq!(h.host_span(), None);
    }

    #[test]
    fn whole_tensor_pieces_are_strided() {
        let t = f32_layout([6, 3, 1, 1]);
        let p = pieces(&t, &DimSplit::single(0, vec![2, 4]), 0, 72).unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!(p[1].host_offset, 8);
        assert_eq!(p[1].strided.n_copies, 3);
        assert_eq!(p[1].strided.stride_tensor, 16);
        assert_eq!(p[1].strided.stride_data, 24);
    }

    #[test]
    fn unaligned_ranges_are_cut_per_row() {
        let t = f32_layout([6, 3, 1, 1]);
        // bytes 12..40: row 0 elements 3..6, row 1 elements 0..4
        let p = pieces(&t, &DimSplit::single(0, vec![2, 4]), 12, 28).unwrap();
        let got: Vec<(usize, usize, usize, usize)> = p
            .iter()
            .map(|p| (p.device, p.host_offset, p.strided.offset, p.strided.size))
            .collect();
        assert_eq!(got, vec![(1, 0, 4, 12), (0, 12, 8, 8), (1, 20, 16, 8)]);
    }

    #[test]
    fn quantized_rows_split_in_blocks() {
        // q8_0-like: 32 elements per 34-byte block, 64 columns, 2 rows
        let t = Layout {
            ne: [64, 2, 1, 1],
            nb: [34, 68, 136, 136],
            blck: 32,
        };
        let p = pieces(&t, &DimSplit::single(0, vec![32, 32]), 0, 136).unwrap();
        assert_eq!(p[1].host_offset, 34);
        assert_eq!(p[1].strided.size, 34);
        assert!(pieces(&t, &DimSplit::single(0, vec![16, 48]), 0, 136).is_err());
    }
}
