//! Split states as a split-state callback (C) hands them to the meta device, on arbitrary
//! values: `Split::from_raw` accepts or refuses each, never panics; an accepted split converts
//! back (`to_raw`) to a state that converts to the same split, spells out (`expanded`) within
//! bounds, and gives per-device layouts of a dense tensor (`own_layouts`) or a typed error.

#![no_main]

use ggml_backend_rs_core::rules::{own_layouts, Layout};
use ggml_backend_rs_core::split::{RawSplitState, Split};
use libfuzzer_sys::fuzz_target;

mod bytes;
use bytes::Bytes;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let n = 1 + b.u8() as usize % 16;
    let ne = [b.extent(), b.extent(), b.extent(), b.extent()];
    let granule = 1 + (b.u8() % 64) as i64;
    let mut raw = RawSplitState::mirrored();
    raw.axis = match b.u8() % 6 {
        k @ 0..=3 => k as i32,
        4 => 10,
        _ => b.i32(),
    };
    raw.n_segments = b.u8() as u32 % 20;
    for r in raw.nr.iter_mut() {
        *r = b.u8() as u32 % 4;
    }
    for e in raw.ne.iter_mut().take(n * 17) {
        *e = b.small_i64();
    }
    let g = |axis: usize| if axis == 0 { granule } else { 1 };
    let Ok(split) = Split::from_raw(&raw, ne, n, g) else {
        return;
    };
    let back = split.to_raw();
    let again = Split::from_raw(&back, ne, n, g).expect("a split's own state converts back");
    assert!(
        again.same_as(&split),
        "{} vs {}",
        again.describe(),
        split.describe()
    );
    let _ = back.expanded(n);
    let dense = Layout {
        ne,
        nb: {
            let mut nb = [4usize; 4];
            for k in 1..4 {
                nb[k] = nb[k - 1].saturating_mul(ne[k - 1].max(1) as usize);
            }
            nb
        },
        blck: 1,
    };
    if let Ok(layouts) = own_layouts(&dense, &split, n) {
        assert_eq!(layouts.len(), n);
    }
});
