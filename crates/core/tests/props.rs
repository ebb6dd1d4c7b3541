//! Property tests of the core's arithmetic against brute-force references: every byte and
//! every index is followed one by one, from the split's definition, and compared with what the
//! closed-form code computes.
//!
//! * split arithmetic: the runs of a split (`DimSplit::intervals`) place every index of the
//!   split dimension exactly where the segment-by-segment definition puts it, maximally merged;
//!   `same_as` is equality of placement; C states round-trip and wrong totals are refused;
//! * transfer planning: `transfer::pieces` moves every byte of any range of a split tensor
//!   exactly once, from its host position to its position in the right device's slice, and no
//!   piece (a 2D transfer) reaches past the end of that slice;
//! * view mapping: whenever `rules::map_view` accepts a view of a split tensor (boxes of it,
//!   permuted, and views with arbitrary strides and offsets), each device's layout addresses,
//!   for every element of the view that device holds, the byte where the element lives in
//!   that device's slice, and the devices together hold every element once.

use ggml_backend_rs_core::rules::{self, DeviceLayout, Layout};
use ggml_backend_rs_core::split::{DimSplit, RawSplitState, Split, MAX_DEVICES, MAX_SEGMENTS};
use ggml_backend_rs_core::transfer::pieces;
use proptest::prelude::*;

/// Where index `h` of the split dimension lives, by the definition: segments in order, within
/// a segment devices in order, each device's pieces stored one after another.
fn place_by_definition(d: &DimSplit) -> Vec<(usize, i64)> {
    let mut out = Vec::new();
    let mut next = vec![0i64; d.n];
    for s in 0..d.n_segments() {
        for (j, pos) in next.iter_mut().enumerate() {
            for _ in 0..d.ne[s * d.n + j] {
                out.push((j, *pos));
                *pos += 1;
            }
        }
    }
    out
}

/// The same from the runs: `(device, index on the device)` of every index.
fn place_by_intervals(d: &DimSplit) -> Vec<(usize, i64)> {
    let mut out = vec![(usize::MAX, -1); d.total() as usize];
    for iv in d.intervals() {
        for k in 0..iv.len {
            let slot = &mut out[(iv.host_start + k) as usize];
            assert_eq!(
                *slot,
                (usize::MAX, -1),
                "index {} in two runs",
                iv.host_start + k
            );
            *slot = (iv.device, iv.dev_start + k);
        }
    }
    out
}

/// A split of `n` devices in `segs` segments; extents are multiples of `granule`.
fn dim_split(axis: usize, granule: i64) -> impl Strategy<Value = DimSplit> {
    (1usize..=5, 1usize..=4).prop_flat_map(move |(n, segs)| {
        proptest::collection::vec(0i64..=3, n * segs).prop_map(move |ne| DimSplit {
            axis,
            n,
            ne: ne.into_iter().map(|e| e * granule).collect(),
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn intervals_follow_the_definition(d in dim_split(1, 1)) {
        let by_def = place_by_definition(&d);
        prop_assert_eq!(place_by_intervals(&d), by_def.clone());
        // each device holds its extent, in order 0..extent
        for j in 0..d.n {
            let held: Vec<i64> = by_def.iter().filter(|p| p.0 == j).map(|p| p.1).collect();
            prop_assert_eq!(held.len() as i64, d.extent(j));
            prop_assert!(held.iter().enumerate().all(|(k, &p)| p == k as i64));
        }
        prop_assert_eq!(d.extents().iter().sum::<i64>(), d.total());
        // runs are maximal: none continues the previous one on the same device
        for w in d.intervals().windows(2) {
            prop_assert!(w[0].len > 0 && w[1].len > 0);
            let continues = w[0].device == w[1].device
                && w[0].dev_start + w[0].len == w[1].dev_start;
            prop_assert!(!continues, "runs {:?} and {:?} should be one", w[0], w[1]);
        }
    }

    #[test]
    fn same_as_is_equal_placement(a in dim_split(0, 1), b in dim_split(0, 1)) {
        let equal = place_by_definition(&a) == place_by_definition(&b);
        prop_assert_eq!(Split::Dim(a.clone()).same_as(&Split::Dim(b.clone())), equal);
        prop_assert!(Split::Dim(a.clone()).same_as(&Split::Dim(a)));
    }

    #[test]
    fn c_states_round_trip(d in dim_split(2, 1), wrong in 1i64..4) {
        let split = Split::Dim(d.clone());
        let raw = split.to_raw();
        let ne = [1, 1, d.total(), 1];
        prop_assert_eq!(Split::from_raw(&raw, ne, d.n, |_| 1), Ok(split));
        let bad = [1, 1, d.total() + wrong, 1];
        prop_assert!(Split::from_raw(&raw, bad, d.n, |_| 1).is_err());
    }

    #[test]
    fn any_c_state_is_checked(axis in -3i32..15, n_segments in 0u32..20, n in 1usize..=MAX_DEVICES,
                              ne in proptest::collection::vec(-2i64..6, MAX_SEGMENTS * MAX_DEVICES),
                              nr in proptest::array::uniform16(0u32..3),
                              dims in proptest::array::uniform4(0i64..40)) {
        let mut raw = RawSplitState { axis, ne: [0; MAX_SEGMENTS * MAX_DEVICES], nr, n_segments };
        raw.ne.copy_from_slice(&ne);
        // never a panic; an accepted dimension split is consistent with the tensor
        if let Ok(Split::Dim(d)) = Split::from_raw(&raw, dims, n, |a| if a == 0 { 2 } else { 1 }) {
            prop_assert_eq!(d.total(), dims[d.axis]);
            prop_assert!(d.ne.iter().all(|&e| e >= 0));
            prop_assert!(d.axis > 0 || d.ne.iter().all(|&e| e % 2 == 0));
            prop_assert_eq!(d.n, n);
        }
    }
}

/// A contiguous tensor: `units[k]` units along dimension k (blocks along dimension 0), each
/// unit of dimension 0 `unit_bytes` bytes.
fn contiguous(ne: [i64; 4], blck: i64, unit_bytes: usize) -> Layout {
    let mut nb = [unit_bytes; 4];
    nb[1] = unit_bytes * (ne[0] / blck) as usize;
    nb[2] = nb[1] * ne[1] as usize;
    nb[3] = nb[2] * ne[2] as usize;
    Layout { ne, nb, blck }
}

/// Unit counts per dimension (blocks along dimension 0).
fn units(t: &Layout) -> [usize; 4] {
    [
        (t.ne[0] / t.blck) as usize,
        t.ne[1] as usize,
        t.ne[2] as usize,
        t.ne[3] as usize,
    ]
}

/// `(device, byte in that device's slice)` of host byte `b` of contiguous tensor `t` split as `d`.
fn locate(t: &Layout, d: &DimSplit, devs: &[DeviceLayout], b: usize) -> (usize, usize) {
    let u = units(t);
    let within = b % t.nb[0];
    let mut rest = b / t.nb[0];
    let mut idx = [0usize; 4];
    for k in 0..4 {
        idx[k] = rest % u[k];
        rest /= u[k];
    }
    let unit = if d.axis == 0 { t.blck } else { 1 };
    let h = idx[d.axis] as i64 * unit;
    let iv = d
        .intervals()
        .into_iter()
        .find(|iv| iv.host_start <= h && h < iv.host_start + iv.len)
        .expect("every index is in a run");
    let mut dev_idx = idx;
    dev_idx[d.axis] = ((iv.dev_start + h - iv.host_start) / unit) as usize;
    let l = &devs[iv.device];
    let byte = (0..4).map(|k| dev_idx[k] * l.nb[k]).sum::<usize>() + within;
    (iv.device, byte)
}

/// Bytes of device `j`'s slice.
fn slice_bytes(t: &Layout, d: &DimSplit, j: usize) -> usize {
    let mut ne = t.ne;
    ne[d.axis] = d.extent(j);
    let u0 = (ne[0] / t.blck) as usize;
    u0 * t.nb[0] * (ne[1] * ne[2] * ne[3]) as usize
}

/// A tensor of up to 4 dimensions split along one of them, quantized (blocks of 4 elements
/// in 6 bytes) or f32, with a byte range inside it.
fn split_tensor() -> impl Strategy<Value = (Layout, DimSplit, usize, usize)> {
    (
        0usize..4,
        any::<bool>(),
        proptest::array::uniform4(1i64..=4),
    )
        .prop_flat_map(|(axis, quantized, dims)| {
            let (blck, unit_bytes) = if quantized { (4, 6) } else { (1, 4) };
            let granule = if axis == 0 { blck } else { 1 };
            dim_split(axis, granule).prop_flat_map(move |d| {
                let mut ne = dims;
                ne[0] *= blck;
                ne[axis] = d.total();
                let t = contiguous(ne, blck, unit_bytes);
                let total = t.nb[3] * ne[3] as usize;
                (Just(t), Just(d), 0..=total)
                    .prop_flat_map(move |(t, d, lo)| (Just(t), Just(d), Just(lo), 0..=total - lo))
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn pieces_move_every_byte_once((t, d, offset, size) in split_tensor()) {
        let n = d.n;
        let devs = rules::own_layouts(&t, &Split::Dim(d.clone()), n).unwrap();
        let ps = pieces(&t, &d, offset, size).unwrap();
        let mut seen = vec![None; size];
        for p in &ps {
            let end = p.strided.tensor_end().expect("no overflow");
            prop_assert!(end <= slice_bytes(&t, &d, p.device),
                "piece {:?} ends at {} past device {}'s {} bytes", p, end, p.device,
                slice_bytes(&t, &d, p.device));
            for c in 0..p.strided.n_copies {
                let (dev_off, host_off) = p.strided.block(c);
                for k in 0..p.strided.size {
                    let host = p.host_offset + host_off + k;
                    prop_assert!(host < size, "piece {:?} writes past the range", p);
                    prop_assert!(seen[host].is_none(), "host byte {} moved twice", host);
                    seen[host] = Some((p.device, dev_off + k));
                }
            }
        }
        for (i, got) in seen.iter().enumerate() {
            let want = locate(&t, &d, &devs, offset + i);
            prop_assert_eq!(*got, Some(want), "host byte {}", offset + i);
        }
    }
}

/// A view of a contiguous f32 tensor split along `axis`: a box `[start, start + len)` per
/// dimension, its dimensions possibly permuted.
fn split_view() -> impl Strategy<Value = (Layout, DimSplit, Layout, usize)> {
    (0usize..4, proptest::array::uniform4(1i64..=4))
        .prop_flat_map(|(axis, dims)| {
            dim_split(axis, 1).prop_flat_map(move |d| {
                let mut ne = dims;
                ne[axis] = d.total().max(1);
                let d = if d.total() == 0 {
                    // keep the base non-empty: one index on the last device
                    let mut d = d;
                    let last = d.ne.len() - 1;
                    d.ne[last] = 1;
                    d
                } else {
                    d
                };
                let base = contiguous(ne, 1, 4);
                let boxes = ne.map(|e| (0..e).prop_flat_map(move |s| (Just(s), 1..=e - s)));
                (
                    Just(base),
                    Just(d),
                    boxes,
                    Just([0usize, 1, 2, 3]).prop_shuffle(),
                )
            })
        })
        .prop_map(|(base, d, boxes, perm)| {
            let offs: usize = (0..4).map(|k| boxes[k].0 as usize * base.nb[k]).sum();
            let mut v = Layout {
                ne: [0; 4],
                nb: [0; 4],
                blck: 1,
            };
            for k in 0..4 {
                v.ne[k] = boxes[perm[k]].1;
                v.nb[k] = base.nb[perm[k]];
            }
            (base, d, v, offs)
        })
}

/// When `map_view` accepts view `v` at `offs` of `base` split as `d`: each element of the view
/// is, by the view's split and its device's layout, at the byte where the base's split puts it.
fn check_accepted_view(
    base: &Layout,
    d: &DimSplit,
    v: &Layout,
    offs: usize,
) -> Result<(), TestCaseError> {
    let n = d.n;
    let devs = rules::own_layouts(base, &Split::Dim(d.clone()), n).unwrap();
    let Ok((split, layouts)) = rules::map_view(base, &Split::Dim(d.clone()), v, offs, n) else {
        return Ok(());
    };
    let Split::Dim(vd) = split else {
        prop_assert!(false, "a view of a split tensor came back unsplit");
        unreachable!()
    };
    prop_assert_eq!(vd.total(), v.ne[vd.axis]);
    // every element of the view, by its indices
    let mut idx = [0i64; 4];
    for i3 in 0..v.ne[3] {
        for i2 in 0..v.ne[2] {
            for i1 in 0..v.ne[1] {
                for i0 in 0..v.ne[0] {
                    idx[0] = i0;
                    idx[1] = i1;
                    idx[2] = i2;
                    idx[3] = i3;
                    let host: usize =
                        offs + (0..4).map(|k| idx[k] as usize * v.nb[k]).sum::<usize>();
                    let want = locate(base, d, &devs, host);
                    // the view's split says which device holds this element, and where
                    let h = idx[vd.axis];
                    let iv = vd
                        .intervals()
                        .into_iter()
                        .find(|iv| iv.host_start <= h && h < iv.host_start + iv.len)
                        .expect("view index in a run");
                    let l = &layouts[iv.device];
                    let mut local = idx;
                    local[vd.axis] = iv.dev_start + h - iv.host_start;
                    prop_assert!(local[vd.axis] < l.ne[vd.axis]);
                    let byte = l.offs + (0..4).map(|k| local[k] as usize * l.nb[k]).sum::<usize>();
                    prop_assert_eq!(
                        (iv.device, byte),
                        want,
                        "view element {:?} (split {:?}, layouts {:?})",
                        idx,
                        vd,
                        layouts
                    );
                }
            }
        }
    }
    Ok(())
}

/// A view of a contiguous f32 tensor split along `axis` with arbitrary strides (whole
/// elements, 1 to 8 apart) and offset, inside the tensor: rows that start inside a step, steps
/// wider than rows, dimensions that walk the split dimension at other strides than the base's.
fn strided_view() -> impl Strategy<Value = (Layout, DimSplit, Layout, usize)> {
    strided_view_of(dim_split_any)
}

/// Like [`strided_view`], over splits whose segments repeat 2 or 3 times (a split dimension
/// merged with the one above it): views that are read one period at a time.
fn strided_view_of_repeats() -> impl Strategy<Value = (Layout, DimSplit, Layout, usize)> {
    strided_view_of(|axis| {
        (dim_split(axis, 1), 2usize..=3)
            .prop_map(|(d, r)| DimSplit {
                ne: d.ne.repeat(r),
                ..d
            })
            .boxed()
    })
}

fn dim_split_any(axis: usize) -> BoxedStrategy<DimSplit> {
    dim_split(axis, 1).boxed()
}

fn strided_view_of(
    split: fn(usize) -> BoxedStrategy<DimSplit>,
) -> impl Strategy<Value = (Layout, DimSplit, Layout, usize)> {
    (0usize..4, proptest::array::uniform4(1i64..=4))
        .prop_flat_map(move |(axis, dims)| split(axis).prop_map(move |d| (axis, dims, d)))
        .prop_filter("a non-empty base", |(_, _, d)| d.total() > 0)
        .prop_flat_map(|(axis, dims, d)| {
            let mut ne = dims;
            ne[axis] = d.total();
            let base = contiguous(ne, 1, 4);
            let total = base.nb[3] * ne[3] as usize;
            (
                Just(base),
                Just(d),
                proptest::array::uniform4(1i64..=3),
                proptest::array::uniform4(1usize..=8),
                0..total / 4,
            )
        })
        .prop_map(|(base, d, vne, steps, start)| {
            let total = base.nb[3] * base.ne[3] as usize;
            let mut v = Layout {
                ne: vne,
                nb: steps.map(|s| s * 4),
                blck: 1,
            };
            let span = |v: &Layout| {
                (0..4)
                    .map(|k| (v.ne[k] as usize - 1) * v.nb[k])
                    .sum::<usize>()
                    + 4
            };
            if span(&v) > total {
                v.ne = [1; 4];
            }
            let offs = (start * 4).min(total - span(&v)) / 4 * 4;
            (base, d, v, offs)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    #[test]
    fn accepted_views_address_every_element((base, d, v, offs) in split_view()) {
        check_accepted_view(&base, &d, &v, offs)?;
    }

    #[test]
    fn accepted_strided_views_address_every_element((base, d, v, offs) in strided_view()) {
        check_accepted_view(&base, &d, &v, offs)?;
    }

    #[test]
    fn accepted_views_of_repeating_splits_address_every_element(
        (base, d, v, offs) in strided_view_of_repeats()
    ) {
        check_accepted_view(&base, &d, &v, offs)?;
    }
}
