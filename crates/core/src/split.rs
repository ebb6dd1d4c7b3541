//! Split states: how one tensor is distributed over the `n` devices of a meta device.
//!
//! Pure data and arithmetic. The state a split-state callback writes (C's
//! `ggml_backend_meta_split_state`, whose layout [`RawSplitState`] repeats) becomes a [`Split`]
//! only through [`Split::from_raw`], which checks it; [`Split::to_raw`] is the way back.

use std::fmt;

/// Most devices one meta device may have (`GGML_BACKEND_META_MAX_DEVICES`).
pub const MAX_DEVICES: usize = 16;

/// Most segments one split may have (`ne` of the C struct holds 16 × 16 extents).
pub const MAX_SEGMENTS: usize = 16;

/// The axis values of C's `enum ggml_backend_meta_split_axis` that are not dimensions.
pub const AXIS_MIRRORED: i32 = 10;
pub const AXIS_PARTIAL: i32 = 11;
pub const AXIS_NONE: i32 = 98;
pub const AXIS_UNKNOWN: i32 = 99;

/// Where the values of a tensor live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Split {
    /// Every device holds all values.
    Mirrored,
    /// Every device holds a summand; the value is the sum over devices.
    Partial,
    /// Each device holds a slice along dimension `axis`.
    Dim(DimSplit),
}

/// A split along one dimension. `ne[s * n + j]` is the extent of segment `s` on device `j`;
/// in host order the dimension reads segment 0 (device 0, 1, ..), segment 1 (device 0, 1, ..), ..
/// and each device stores its pieces of every segment one after another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimSplit {
    pub axis: usize,
    pub n: usize,
    pub ne: Vec<i64>,
}

/// One contiguous run of indices along the split dimension that lives on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interval {
    pub device: usize,
    /// First index in the full (host) tensor.
    pub host_start: i64,
    /// First index in the device's slice.
    pub dev_start: i64,
    pub len: i64,
}

impl DimSplit {
    /// One segment: device `j` holds `extents[j]` indices.
    pub fn single(axis: usize, extents: Vec<i64>) -> DimSplit {
        DimSplit {
            axis,
            n: extents.len(),
            ne: extents,
        }
    }

    pub fn n_segments(&self) -> usize {
        self.ne.len() / self.n.max(1)
    }

    /// The fewest leading segments that the split repeats to the end (all of them when it
    /// does not repeat): `ne` is those segments' extents, `n_segments / period` times.
    pub fn period(&self) -> usize {
        let segs = self.n_segments();
        let n = self.n.max(1);
        (1..=segs)
            .filter(|p| segs % p == 0)
            .find(|&p| self.ne.chunks(p * n).all(|c| c == &self.ne[..p * n]))
            .unwrap_or(segs)
    }

    /// The first `segments` segments, on their own.
    pub fn first_segments(&self, segments: usize) -> DimSplit {
        DimSplit {
            axis: self.axis,
            n: self.n,
            ne: self.ne[..segments * self.n.max(1)].to_vec(),
        }
    }

    /// Indices of the split dimension that device `j` holds, over all segments.
    pub fn extent(&self, j: usize) -> i64 {
        (0..self.n_segments())
            .map(|s| self.ne[s * self.n + j])
            .sum()
    }

    pub fn extents(&self) -> Vec<i64> {
        (0..self.n).map(|j| self.extent(j)).collect()
    }

    pub fn total(&self) -> i64 {
        self.ne.iter().sum()
    }

    /// The runs of the split dimension in host order: empty ones skipped, and runs that
    /// continue each other on the same device (across segments) merged. This is the split's
    /// placement: two splits place values alike exactly when their runs are equal.
    pub fn intervals(&self) -> Vec<Interval> {
        let mut out: Vec<Interval> = Vec::with_capacity(self.ne.len());
        let mut host = 0;
        let mut dev = vec![0i64; self.n];
        for s in 0..self.n_segments() {
            for (j, dev_start) in dev.iter_mut().enumerate() {
                let len = self.ne[s * self.n + j];
                if len > 0 {
                    match out.last_mut() {
                        Some(last)
                            if last.device == j
                                && last.host_start + last.len == host
                                && last.dev_start + last.len == *dev_start =>
                        {
                            last.len += len
                        }
                        _ => out.push(Interval {
                            device: j,
                            host_start: host,
                            dev_start: *dev_start,
                            len,
                        }),
                    }
                }
                host += len;
                *dev_start += len;
            }
        }
        out
    }

    /// The same placement along `axis` when each index of this split's dimension becomes
    /// `factor` consecutive indices there (heads becoming their rows, a result row of `S_v`
    /// values per head): every extent times `factor`, segments kept.
    pub fn widened(&self, axis: usize, factor: i64) -> DimSplit {
        DimSplit {
            axis,
            n: self.n,
            ne: self.ne.iter().map(|&e| e * factor).collect(),
        }
    }

    /// Whether every index is on the same device at the same position as in `other`, whatever
    /// the two splits' axes (a head split of q against the split of its sinks' rows).
    pub fn places_like(&self, other: &DimSplit) -> bool {
        self.intervals() == other.intervals()
    }

    /// The device holding host index `i` of the split dimension, and its position there.
    pub fn locate(&self, i: i64) -> Option<(usize, i64)> {
        self.intervals()
            .into_iter()
            .find(|iv| iv.host_start <= i && i < iv.host_start + iv.len)
            .map(|iv| (iv.device, iv.dev_start + i - iv.host_start))
    }
}

impl Split {
    pub fn dim(axis: usize, extents: Vec<i64>) -> Split {
        Split::Dim(DimSplit::single(axis, extents))
    }

    pub fn as_dim(&self) -> Option<&DimSplit> {
        match self {
            Split::Dim(d) => Some(d),
            _ => None,
        }
    }

    /// Same placement of values: same kind, and for dimension splits the same axis with every
    /// index on the same device at the same position (segment boundaries that do not move
    /// values do not matter). Element-wise combination needs exactly this.
    pub fn same_as(&self, other: &Split) -> bool {
        match (self, other) {
            // equal splits place alike; only different segmentations need the intervals
            (Split::Dim(a), Split::Dim(b)) => a.axis == b.axis && (a == b || a.places_like(b)),
            (a, b) => a == b,
        }
    }

    /// Short text for messages: `MIRRORED`, `PARTIAL`, `AXIS_1{32,0,32}`.
    pub fn describe(&self) -> String {
        match self {
            Split::Mirrored => "MIRRORED".into(),
            Split::Partial => "PARTIAL".into(),
            Split::Dim(d) => {
                let e: Vec<String> = d.extents().iter().map(|x| x.to_string()).collect();
                let seg = if d.n_segments() > 1 {
                    format!(" in {} segments", d.n_segments())
                } else {
                    String::new()
                };
                format!("AXIS_{}{{{}}}{seg}", d.axis, e.join(","))
            }
        }
    }

    /// Converts a state received from C (a split-state callback) for a tensor whose
    /// dimensions are `ne`, on `n` devices; `granule(axis)` is the granularity of extents
    /// along that axis (the block size of quantized types along dimension 0).
    pub fn from_raw(
        c: &RawSplitState,
        ne: [i64; 4],
        n: usize,
        granule: impl Fn(usize) -> i64,
    ) -> Result<Split, StateError> {
        match c.axis {
            AXIS_MIRRORED => Ok(Split::Mirrored),
            AXIS_PARTIAL => Ok(Split::Partial),
            a @ 0..=3 => {
                let axis = a as usize;
                let n_seg = c.n_segments.max(1) as usize;
                if n_seg > MAX_SEGMENTS || n_seg * n > c.ne.len() {
                    return Err(StateError::TooManySegments {
                        segments: n_seg,
                        devices: n,
                    });
                }
                // Segment s repeats nr[s] times: spelled out, one segment per repetition.
                let mut ext = Vec::with_capacity(n_seg * n);
                for s in 0..n_seg {
                    let repeats = c.nr[s];
                    if repeats == 0 {
                        return Err(StateError::ZeroRepeat { segment: s });
                    }
                    for _ in 0..repeats {
                        ext.extend_from_slice(&c.ne[s * n..(s + 1) * n]);
                    }
                }
                if let Some(&bad) = ext.iter().find(|&&e| e < 0) {
                    return Err(StateError::NegativeExtent(bad));
                }
                let g = granule(axis).max(1);
                if let Some(&bad) = ext.iter().find(|&&e| e % g != 0) {
                    return Err(StateError::NotWholeGranules {
                        extent: bad,
                        granule: g,
                    });
                }
                // Summed with overflow checked: extents from C may be anything, and a sum that
                // wrapped around to the tensor's extent would pass for a split.
                let total = ext.iter().try_fold(0i64, |sum, &e| sum.checked_add(e));
                if total != Some(ne[axis]) {
                    return Err(StateError::WrongTotal {
                        total,
                        expected: ne[axis],
                        axis,
                    });
                }
                Ok(Split::Dim(DimSplit { axis, n, ne: ext }))
            }
            other => Err(StateError::InvalidAxis(other)),
        }
    }

    /// The state as C receives it (`ggml_backend_meta_get_split_state`): consecutive equal
    /// segments written once with their repeat count.
    pub fn to_raw(&self) -> RawSplitState {
        let mut out = RawSplitState::mirrored();
        match self {
            Split::Mirrored => {}
            Split::Partial => out.axis = AXIS_PARTIAL,
            Split::Dim(d) => {
                out.axis = d.axis as i32;
                let n = d.n.max(1);
                let mut segments: Vec<(&[i64], u32)> = Vec::new();
                for seg in d.ne.chunks(n) {
                    match segments.last_mut() {
                        Some((last, repeats)) if *last == seg => *repeats += 1,
                        _ => segments.push((seg, 1)),
                    }
                }
                // A split from C or from the rules has at most MAX_SEGMENTS distinct runs.
                assert!(segments.len() <= MAX_SEGMENTS, "too many segments for C");
                for (s, (seg, repeats)) in segments.iter().enumerate() {
                    out.ne[s * n..(s + 1) * n].copy_from_slice(seg);
                    out.nr[s] = *repeats;
                }
                out.n_segments = segments.len() as u32;
            }
        }
        out
    }
}

/// Why a split state from C was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    TooManySegments {
        segments: usize,
        devices: usize,
    },
    NegativeExtent(i64),
    NotWholeGranules {
        extent: i64,
        granule: i64,
    },
    /// `total`: None when the extents' sum overflows.
    WrongTotal {
        total: Option<i64>,
        expected: i64,
        axis: usize,
    },
    InvalidAxis(i32),
    ZeroRepeat {
        segment: usize,
    },
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::TooManySegments { segments, devices } => {
                write!(f, "{segments} segments over {devices} devices do not fit")
            }
            StateError::NegativeExtent(e) => write!(f, "negative extent {e}"),
            StateError::NotWholeGranules { extent, granule } => {
                write!(f, "extent {extent} is not a multiple of {granule}")
            }
            StateError::WrongTotal {
                total: Some(total),
                expected,
                axis,
            } => write!(
                f,
                "extents add up to {total} but the tensor has {expected} along axis {axis}"
            ),
            StateError::WrongTotal {
                total: None,
                expected,
                axis,
            } => write!(
                f,
                "extents add up to more than 2^63 but the tensor has {expected} along axis {axis}"
            ),
            StateError::InvalidAxis(a) => write!(f, "invalid split axis {a}"),
            StateError::ZeroRepeat { segment } => {
                write!(f, "segment {segment} repeats 0 times")
            }
        }
    }
}

impl std::error::Error for StateError {}

/// The contents of C's `ggml_backend_meta_split_state`, whatever the ggml version's layout,
/// with the axis as a plain integer: a callback may write any value, and only valid ones may
/// become a [`Split`]. Segment `s` holds `ne[s * n + j]` on device `j` and repeats `nr[s]`
/// times (ggml versions without repeats count each segment once).
#[derive(Clone, Copy, Debug)]
pub struct RawSplitState {
    pub axis: i32,
    pub ne: [i64; MAX_SEGMENTS * MAX_DEVICES],
    pub nr: [u32; MAX_SEGMENTS],
    pub n_segments: u32,
}

impl RawSplitState {
    /// MIRRORED, with one segment counted once.
    pub const fn mirrored() -> RawSplitState {
        RawSplitState {
            axis: AXIS_MIRRORED,
            ne: [0; MAX_SEGMENTS * MAX_DEVICES],
            nr: [1; MAX_SEGMENTS],
            n_segments: 1,
        }
    }

    /// The segments over `n` devices spelled out, each repetition its own segment (the form
    /// of ggml versions without repeat counts); `None` when they are more than C can hold.
    pub fn expanded(&self, n: usize) -> Option<RawSplitState> {
        let n = n.max(1);
        let mut out = RawSplitState {
            n_segments: 0,
            ..*self
        };
        let mut k = 0;
        for s in 0..(self.n_segments as usize).min(MAX_SEGMENTS) {
            for _ in 0..self.nr[s] {
                if k >= MAX_SEGMENTS {
                    return None;
                }
                out.ne[k * n..(k + 1) * n].copy_from_slice(&self.ne[s * n..(s + 1) * n]);
                out.nr[k] = 1;
                k += 1;
            }
        }
        out.n_segments = k as u32;
        Some(out)
    }
}

/// The name of a split axis (`ggml_backend_meta_split_axis_name`).
pub fn axis_name(axis: i32) -> Option<&'static std::ffi::CStr> {
    Some(match axis {
        0 => c"0",
        1 => c"1",
        2 => c"2",
        3 => c"3",
        AXIS_MIRRORED => c"MIRRORED",
        AXIS_PARTIAL => c"PARTIAL",
        AXIS_NONE => c"NONE",
        AXIS_UNKNOWN => c"UNKNOWN",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn extents_whose_sum_overflows_are_refused_not_wrapped() {
        // i64::MAX + 3 + (2^63 - 2) wraps to 6 + ... : refused whatever it wraps to.
        let mut c = RawSplitState::mirrored();
        c.axis = 0;
        c.n_segments = 1;
        c.ne[0] = i64::MAX;
        c.ne[1] = i64::MAX;
        c.ne[2] = 4;
        let wrapped = i64::MAX.wrapping_add(i64::MAX).wrapping_add(4);
        let e = Split::from_raw(&c, [wrapped, 1, 1, 1], 3, |_| 1).unwrap_err();
        assert_eq!(
            e,
            StateError::WrongTotal {
                total: None,
                expected: wrapped,
                axis: 0
            }
        );
        assert!(e.to_string().contains("more than 2^63"), "{e}");
    }

    use super::*;

    fn raw(axis: i32, ne: &[i64], n_segments: u32) -> RawSplitState {
        let mut r = RawSplitState {
            axis,
            n_segments,
            ..RawSplitState::mirrored()
        };
        r.ne[..ne.len()].copy_from_slice(ne);
        r
    }

    #[test]
    fn intervals_follow_segments_then_devices() {
        // fused QKV: segments {Q 4, K 2, V 2} over 2 devices, Q {2,2}, K {1,1}, V {1,1}
        let d = DimSplit {
            axis: 1,
            n: 2,
            ne: vec![2, 2, 1, 1, 1, 1],
        };
        assert_eq!(d.extents(), vec![4, 4]);
        let iv = d.intervals();
        assert_eq!(iv.len(), 6);
        assert_eq!(
            iv[2],
            Interval {
                device: 0,
                host_start: 4,
                dev_start: 2,
                len: 1
            }
        );
        assert_eq!(
            iv[5],
            Interval {
                device: 1,
                host_start: 7,
                dev_start: 3,
                len: 1
            }
        );
    }

    #[test]
    fn empty_slices_have_no_interval() {
        let d = DimSplit::single(0, vec![0, 32, 32]);
        let iv = d.intervals();
        assert_eq!(iv.len(), 2);
        assert_eq!(iv[0].device, 1);
        assert_eq!(iv[0].host_start, 0);
    }

    #[test]
    fn callback_states_are_validated() {
        let ne = [64, 8, 1, 1];
        let ok = Split::from_raw(&raw(1, &[3, 5], 1), ne, 2, |_| 1).unwrap();
        assert_eq!(ok, Split::dim(1, vec![3, 5]));
        assert!(Split::from_raw(&raw(1, &[3, 4], 1), ne, 2, |_| 1).is_err());
        assert!(Split::from_raw(&raw(0, &[16, 48], 1), ne, 2, |_| 32).is_err());
        assert!(Split::from_raw(&raw(0, &[32, 32], 1), ne, 2, |_| 32).is_ok());
        assert!(Split::from_raw(&raw(7, &[], 1), ne, 2, |_| 1).is_err());
        assert!(Split::from_raw(&raw(1, &[-1, 9], 1), ne, 2, |_| 1).is_err());
        assert_eq!(
            Split::from_raw(&raw(11, &[], 1), ne, 2, |_| 1).unwrap(),
            Split::Partial
        );
    }

    #[test]
    fn equality_is_placement() {
        // segments {1,2} and {3,4}: device 0 holds host 0 and 3..6, device 1 holds 1..3 and 6..10
        let a = Split::Dim(DimSplit {
            axis: 0,
            n: 2,
            ne: vec![1, 2, 3, 4],
        });
        // same extents per device, different placement
        assert!(!a.same_as(&Split::dim(0, vec![4, 6])));
        // a segment boundary that moves nothing: {2,0} then {2,6} places like {4,6}
        let b = Split::Dim(DimSplit {
            axis: 0,
            n: 2,
            ne: vec![2, 0, 2, 6],
        });
        assert!(b.same_as(&Split::dim(0, vec![4, 6])));
        assert!(a.same_as(&a.clone()));
        assert!(!a.same_as(&Split::dim(1, vec![4, 6])));
        assert!(!Split::Mirrored.same_as(&Split::Partial));
    }

    #[test]
    fn runs_continuing_on_one_device_merge() {
        // device 1 holds nothing: device 0's Q, K and V pieces are one run
        let d = DimSplit {
            axis: 1,
            n: 2,
            ne: vec![4, 0, 2, 0, 2, 0],
        };
        assert_eq!(d.intervals().len(), 1);
        assert_eq!(d.intervals()[0].len, 8);
    }

    #[test]
    fn c_round_trip() {
        let a = Split::Dim(DimSplit {
            axis: 2,
            n: 3,
            ne: vec![1, 2, 3, 4, 5, 6],
        });
        let c = a.to_raw();
        assert_eq!(c.n_segments, 2);
        assert_eq!(c.axis, 2);
        let r = raw(2, &c.ne[..6], 2);
        assert_eq!(Split::from_raw(&r, [1, 1, 21, 1], 3, |_| 1).unwrap(), a);
    }

    #[test]
    fn repeated_segments_are_spelled_out() {
        // fused QKV as {q, 1}, {kv, 2}: Q 8 rows, K and V 4 rows each, over 2 devices
        let mut r = raw(1, &[4, 4, 2, 2], 2);
        r.nr[1] = 2;
        let s = Split::from_raw(&r, [16, 16, 1, 1], 2, |_| 1).unwrap();
        assert_eq!(
            s,
            Split::Dim(DimSplit {
                axis: 1,
                n: 2,
                ne: vec![4, 4, 2, 2, 2, 2],
            })
        );
        // back to C: the repeat is found again, and spelled out for versions without repeats
        let c = s.to_raw();
        assert_eq!((c.n_segments, c.nr[0], c.nr[1]), (2, 1, 2));
        assert_eq!(&c.ne[..4], &[4, 4, 2, 2]);
        let e = c.expanded(2).unwrap();
        assert_eq!(e.n_segments, 3);
        assert_eq!(&e.ne[..6], &[4, 4, 2, 2, 2, 2]);
        assert_eq!(&e.nr[..3], &[1, 1, 1]);
        // a repeat of 0 is refused, not read as "once"
        r.nr[1] = 0;
        assert_eq!(
            Split::from_raw(&r, [16, 16, 1, 1], 2, |_| 1),
            Err(StateError::ZeroRepeat { segment: 1 })
        );
        // more repetitions than C's segments can hold spelled out
        let mut big = raw(0, &[1, 1], 1);
        big.nr[0] = 17;
        assert!(big.expanded(2).is_none());
    }
}
