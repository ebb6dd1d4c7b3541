//! The view and reshape mapping of the safe core on arbitrary shapes, strides, offsets and
//! splits: `map_view` and `map_reshape` return a split with one layout per device or a typed
//! error, never panic.

#![no_main]

use ggml_backend_rs_core::rules::{map_reshape, map_view, Layout};
use ggml_backend_rs_core::split::{DimSplit, Split};
use libfuzzer_sys::fuzz_target;

mod bytes;
use bytes::Bytes;

/// A layout as ggml makes them: rows of whole blocks (ggml refuses a row that cuts one), any
/// strides above.
fn layout(b: &mut Bytes) -> Layout {
    let blck = [1, 32, 256][b.u8() as usize % 3];
    let mut ne = [b.extent(), b.extent(), b.extent(), b.extent()];
    ne[0] -= ne[0] % blck;
    let mut nb = [0usize; 4];
    nb[0] = [1usize, 2, 4, 18, 34][b.u8() as usize % 5];
    for k in 1..4 {
        nb[k] = if b.u8().is_multiple_of(4) {
            b.u32() as usize
        } else {
            let rows = if k == 1 {
                (ne[0] / blck).max(1)
            } else {
                ne[k - 1].max(1)
            };
            nb[k - 1].saturating_mul(rows as usize)
        };
    }
    Layout { ne, nb, blck }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let n = 1 + b.u8() as usize % 8;
    let base = layout(&mut b);
    let split = match b.u8() % 4 {
        0 => Split::Mirrored,
        1 => Split::Partial,
        _ => {
            // a split as the core makes them (Split::from_raw checks C's): extents that add up
            // to the base's extent, cut at arbitrary points
            let axis = b.u8() as usize % 4;
            let segments = 1 + b.u8() as usize % 3;
            let total = base.ne[axis];
            let mut cuts: Vec<i64> = (1..segments * n)
                .map(|_| {
                    if total > 0 {
                        i64::from(b.u16()) % (total + 1)
                    } else {
                        0
                    }
                })
                .collect();
            cuts.push(0);
            cuts.push(total);
            cuts.sort_unstable();
            Split::Dim(DimSplit {
                axis,
                n,
                ne: cuts.windows(2).map(|w| w[1] - w[0]).collect(),
            })
        }
    };
    let view = layout(&mut b);
    let offs = b.u32() as usize;
    if let Ok((s, layouts)) = map_view(&base, &split, &view, offs, n) {
        assert_eq!(layouts.len(), n, "{}", s.describe());
    }
    let dst = [b.extent(), b.extent(), b.extent(), b.extent()];
    let _ = map_reshape(base.ne, &split, dst, n);
});
