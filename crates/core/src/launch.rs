//! How the kernel launches of our CUDA AllReduce share one AllReduce among the GPUs of a meta
//! device. Every GPU that holds one of its devices launches the kernel once; each launch reads
//! the partial sums of all devices (through peer access) and writes the results:
//!
//! * **one-shot**: every launch sums all units and writes only the devices on its own GPU.
//!   Remote traffic is reads only, and there is one kernel on the critical path: the choice for
//!   small tensors (decode), where latency rules.
//! * **two-shot**: the units are shared out in contiguous ranges and every launch writes its
//!   range to every device: each GPU reads and sums `1/g` of the data. The choice for large
//!   tensors (prompt processing), where bandwidth rules.
//!
//! With one GPU (a meta device over `CUDA0,CUDA0`) both are the same single launch. A unit is
//! an element, or a row when the kernel normalises rows. Every launch sums in
//! [`crate::exchange::reference_expr`] order, so every device gets the same bits whichever
//! launch wrote it.

/// One kernel launch: on GPU `gpu` (an index into the meta device's distinct GPUs), units
/// `begin..end`, writing the results of the devices in `writes` (those on `gpu` first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    pub gpu: usize,
    pub begin: u64,
    pub end: u64,
    pub writes: Vec<usize>,
}

/// How an AllReduce's work is shared (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shot {
    One,
    Two,
}

impl Shot {
    /// One-shot up to `one_shot_max` bytes per partial, two-shot above.
    pub fn for_size(bytes: usize, one_shot_max: usize) -> Shot {
        if bytes <= one_shot_max {
            Shot::One
        } else {
            Shot::Two
        }
    }
}

/// The launches of one AllReduce of `units` units over devices on GPUs `gpu_of` (device `k`
/// lives on GPU `gpu_of[k]`; GPUs are numbered from 0 without gaps).
pub fn launches(gpu_of: &[usize], units: u64, shot: Shot) -> Vec<Launch> {
    let gpus = gpu_of.iter().max().map_or(0, |&g| g + 1);
    (0..gpus)
        .map(|g| {
            let local = (0..gpu_of.len()).filter(|&k| gpu_of[k] == g);
            match shot {
                Shot::One => Launch {
                    gpu: g,
                    begin: 0,
                    end: units,
                    writes: local.collect(),
                },
                Shot::Two => {
                    let share = |i: usize| units * i as u64 / gpus as u64;
                    let remote = (0..gpu_of.len()).filter(|&k| gpu_of[k] != g);
                    Launch {
                        gpu: g,
                        begin: share(g),
                        end: share(g + 1),
                        writes: local.chain(remote).collect(),
                    }
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exchange::reference_sum;

    /// Device-to-GPU maps for `n` devices: all on one GPU, each on its own, pairs, and
    /// interleaved over two GPUs.
    fn layouts(n: usize) -> Vec<Vec<usize>> {
        vec![
            vec![0; n],
            (0..n).collect(),
            (0..n).map(|k| k / 2).collect(),
            (0..n).map(|k| k % 2).collect(),
        ]
    }

    /// Runs the launches over pseudo-random partials as the kernel does and returns every
    /// device's result.
    fn simulate(gpu_of: &[usize], units: u64, shot: Shot) -> Vec<Vec<Option<f32>>> {
        let n = gpu_of.len();
        let mut seed = 0x9e37_79b9_u32;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            (seed as f32 / u32::MAX as f32) * 2.0 - 1.0
        };
        let partials: Vec<Vec<f32>> = (0..n)
            .map(|_| (0..units).map(|_| next()).collect())
            .collect();
        let mut out = vec![vec![None; units as usize]; n];
        for l in launches(gpu_of, units, shot) {
            for u in l.begin..l.end {
                let parts: Vec<f32> = partials.iter().map(|p| p[u as usize]).collect();
                let s = reference_sum(&parts).expect("n > 0");
                for &k in &l.writes {
                    assert!(
                        out[k][u as usize].is_none(),
                        "unit {u} of device {k} written twice"
                    );
                    out[k][u as usize] = Some(s);
                }
            }
        }
        for u in 0..units as usize {
            let parts: Vec<f32> = partials.iter().map(|p| p[u]).collect();
            let want = reference_sum(&parts).expect("n > 0").to_bits();
            for (k, o) in out.iter().enumerate() {
                assert_eq!(o[u].map(f32::to_bits), Some(want), "unit {u} of device {k}");
            }
        }
        out
    }

    #[test]
    fn every_device_gets_every_unit_once_with_the_reference_bits_for_2_to_8_devices() {
        // (under miri, which checks each operation and runs ~1000x slower, fewer units)
        let many = if cfg!(miri) { 16 } else { 4096 };
        let most_devices = if cfg!(miri) { 3 } else { 8 };
        for n in 2..=most_devices {
            for gpu_of in layouts(n) {
                for shot in [Shot::One, Shot::Two] {
                    for units in [0, 1, 7, many] {
                        simulate(&gpu_of, units, shot);
                    }
                }
            }
        }
    }

    #[test]
    fn one_shot_writes_only_local_devices_two_shot_shares_the_units() {
        for n in 2..=8 {
            for gpu_of in layouts(n) {
                let gpus = gpu_of.iter().max().unwrap() + 1;
                let one = launches(&gpu_of, 100, Shot::One);
                let two = launches(&gpu_of, 100, Shot::Two);
                assert_eq!((one.len(), two.len()), (gpus, gpus));
                for l in &one {
                    assert_eq!((l.begin, l.end), (0, 100));
                    assert!(!l.writes.is_empty());
                    assert!(l.writes.iter().all(|&k| gpu_of[k] == l.gpu));
                }
                let mut at = 0;
                for l in &two {
                    assert_eq!(l.begin, at, "ranges follow each other");
                    at = l.end;
                    assert_eq!(l.writes.len(), n);
                    assert_eq!(gpu_of[l.writes[0]], l.gpu, "a local device first");
                }
                assert_eq!(at, 100);
            }
        }
        // one GPU: the same single launch either way
        assert_eq!(
            launches(&[0, 0], 9, Shot::One),
            launches(&[0, 0], 9, Shot::Two)
        );
        assert_eq!(Shot::for_size(16384, 262144), Shot::One);
        assert_eq!(Shot::for_size(262145, 262144), Shot::Two);
    }
}
