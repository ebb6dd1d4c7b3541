//! How much memory a tensor-parallel device can offer, and the unit it counts every byte in
//! ([`Shares`]), so that a planner such as llama.cpp's `--fit`, which adds a device's buffer and
//! tensor sizes and compares the sum with its free memory, plans what the members can hold.
//!
//! A split gives member `j` the share `p_j / Σp` of every split tensor. Other tensors (mirrored
//! weights, and the compute buffers, which every member lays out in full) cost each member a
//! whole copy. One figure cannot be exact for both kinds on every member, so the device counts
//! in the bytes of a *reference share* `u`: a tensor's figure is the largest of its parts
//! scaled to `u` (`part_j · u / p_j`), so member `j` holds at most `max(1, p_j / u)` times the
//! figure of anything, slice or copy. A physical device listed more than once (`CUDA0,CUDA0`)
//! holds all of its entries' parts from one pool, and the device offers the smallest of
//! `free_pool / Σ max(1, p_j / u)` over its pools: each half of one GPU offers half of it.
//!
//! The reference is the largest share for which that offer still places the most slices the
//! members can hold: slices are then counted exactly on the member that fills first, and whole
//! copies as cheaply as the split allows. For an even split it is simply a byte on each member,
//! and the device offers its smallest member's free memory.
//!
//! The unit follows from ggml: its allocator requires a compute tensor to take at least its
//! bytes and no more than the tensor it is computed in place of (ggml 0.26 asserts both), so a
//! compute buffer's figure is what one member holds of it, and the rest must be counted alike.

/// One entry of a tensor-parallel device's device list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What identifies the physical device: entries with the same key share one pool.
    pub physical: String,
    /// Its free and total memory, as the device reports them (bytes).
    pub free: u64,
    pub total: u64,
}

/// The shares of a split and the reference share its device counts bytes in (see the module
/// documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shares {
    p: Vec<u64>,
    unit: u64,
}

impl Shares {
    /// An even split over `n` members: a byte on each member.
    pub fn even(n: usize) -> Shares {
        Shares {
            p: vec![1; n],
            unit: 1,
        }
    }

    /// The shares `weights` (each at least 1: a member with no share holds nothing, which a
    /// tensor-parallel device does not list), counted in the reference share that suits the
    /// members `entries` (their total memory; one per weight) best.
    pub fn plan(weights: &[u64], entries: &[Entry]) -> Shares {
        let p: Vec<u64> = weights.iter().map(|&w| w.max(1)).collect();
        let mut candidates = p.clone();
        candidates.sort_unstable();
        candidates.dedup();
        let Some(&smallest) = candidates.first() else {
            return Shares { p, unit: 1 };
        };
        // The slices a reference lets the device place: its offer in units of `u`, times
        // Σp / u. The smallest share places the most (every slice is then exact); of the
        // references that do as well, the largest counts whole copies the cheapest.
        let total_p: u128 = p.iter().map(|&w| w as u128).sum();
        let slices = |unit: u64| {
            let s = Shares { p: p.clone(), unit };
            s.placeable(entries).1 as u128 * total_p / unit as u128
        };
        let best = slices(smallest);
        let unit = candidates
            .iter()
            .rev()
            .copied()
            .find(|&u| slices(u) >= best)
            .unwrap_or(smallest);
        Shares { p, unit }
    }

    pub fn weights(&self) -> &[u64] {
        &self.p
    }

    /// The (free, total) bytes the device offers over `entries` (one per member, in order):
    /// per physical device, its memory over the sum of its members' factors; the smallest.
    /// (0, 0) when there is nothing to place on.
    pub fn placeable(&self, entries: &[Entry]) -> (u64, u64) {
        let unit = self.unit as u128;
        // one pool per physical device: its memory once, the factors of all its entries (in
        // units of 1/unit)
        let mut pools: Vec<(&str, u64, u64, u128)> = Vec::new();
        for (e, &w) in entries.iter().zip(&self.p) {
            let factor = self.factor(w);
            match pools.iter_mut().find(|p| p.0 == e.physical) {
                Some(p) => p.3 += factor,
                None => pools.push((&e.physical, e.free, e.total, factor)),
            }
        }
        let offer = |mem: fn(&(&str, u64, u64, u128)) -> u64| {
            pools
                .iter()
                .map(|p| mem(p) as u128 * unit / p.3)
                .min()
                .map_or(0, |s| u64::try_from(s).unwrap_or(u64::MAX))
        };
        (offer(|p| p.1), offer(|p| p.2))
    }

    /// What a member of share `p` holds at most per byte of figure, in units of 1 / `unit`.
    fn factor(&self, p: u64) -> u128 {
        self.unit.max(p) as u128
    }

    /// The figure of a tensor whose part on member `j` takes `parts[j]` bytes there, each part
    /// padded to `align`: the largest part scaled to the reference share (a part of a larger share
    /// by `u / p_j`), rounded up to `align`.
    pub fn size(&self, parts: &[usize], align: usize) -> usize {
        let a = align.max(1) as u128;
        let scaled = parts
            .iter()
            .zip(&self.p)
            .map(|(&s, &p)| {
                ((s as u128).div_ceil(a) * a * self.unit as u128).div_ceil(self.factor(p))
            })
            .max()
            .unwrap_or(0);
        usize::try_from(scaled.div_ceil(a) * a).unwrap_or(usize::MAX)
    }

    /// The figure of a buffer whose members hold `totals` bytes.
    pub fn span(&self, totals: &[usize]) -> usize {
        totals
            .iter()
            .zip(&self.p)
            .map(|(&t, &p)| (t as u128 * self.unit as u128).div_ceil(self.factor(p)))
            .max()
            .map_or(0, |s| usize::try_from(s).unwrap_or(usize::MAX))
    }
}

/// What a buffer's slices take on each physical device, against the memory each had free when
/// the buffer began: weights are placed only once all of them are known, and this lets a load
/// that cannot be placed fail while its tensors arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Room {
    /// Per physical device: its free memory and what the slices so far take.
    pools: Vec<(u64, u64)>,
    /// Each member's pool.
    member_pool: Vec<usize>,
}

/// A slice that does not fit: its member, and how much its pool would hold against its room.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shortfall {
    pub member: usize,
    pub need: u64,
    pub free: u64,
}

impl Room {
    /// The room of `entries` (one per member, as they report their memory now).
    pub fn new(entries: &[Entry]) -> Room {
        let mut keys: Vec<&str> = Vec::new();
        let mut pools = Vec::new();
        let member_pool = entries
            .iter()
            .map(|e| match keys.iter().position(|k| *k == e.physical) {
                Some(i) => i,
                None => {
                    keys.push(&e.physical);
                    pools.push((e.free, 0));
                    pools.len() - 1
                }
            })
            .collect();
        Room { pools, member_pool }
    }

    /// Takes a tensor whose slice on member `j` is `parts[j]` bytes; when a pool would hold
    /// more than it has free, takes nothing and says which member (its first) overflows.
    pub fn take(&mut self, parts: &[u64]) -> Result<(), Shortfall> {
        let mut need: Vec<u64> = self.pools.iter().map(|p| p.1).collect();
        for (&pool, &part) in self.member_pool.iter().zip(parts) {
            need[pool] = need[pool].saturating_add(part);
        }
        if let Some(pool) = (0..need.len()).find(|&p| need[p] > self.pools[p].0) {
            let member = self
                .member_pool
                .iter()
                .position(|&p| p == pool)
                .unwrap_or(0);
            return Err(Shortfall {
                member,
                need: need[pool],
                free: self.pools[pool].0,
            });
        }
        for (p, n) in self.pools.iter_mut().zip(need) {
            p.1 = n;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(physical: &str, free: u64, total: u64) -> Entry {
        Entry {
            physical: physical.into(),
            free,
            total,
        }
    }

    fn offer(weights: &[u64], entries: &[Entry]) -> (u64, u64) {
        Shares::plan(weights, entries).placeable(entries)
    }

    #[test]
    fn an_even_split_offers_the_smallest_free_memory() {
        let gib = 1 << 30;
        let two = [e("a", 10 * gib, 16 * gib), e("b", 6 * gib, 16 * gib)];
        assert_eq!(offer(&[1, 1], &two), (6 * gib, 16 * gib));
        assert_eq!(Shares::even(2).placeable(&two), (6 * gib, 16 * gib));
        let three = [e("a", 9, 10), e("b", 9, 10), e("c", 3, 10)];
        assert_eq!(offer(&[1, 1, 1], &three), (3, 10));
    }

    #[test]
    fn one_physical_device_listed_twice_offers_half_of_it_to_each_entry() {
        let h200 = 143_000_000_000;
        let twice = [e("cuda0", h200, h200), e("cuda0", h200, h200)];
        assert_eq!(offer(&[1, 1], &twice), (h200 / 2, h200 / 2));
        // two entries on one device next to a second device: the first holds 2 of 3 parts
        let three = [e("a", 80, 100), e("a", 80, 100), e("b", 100, 100)];
        assert_eq!(offer(&[1, 1, 1], &three), (40, 50));
    }

    #[test]
    fn a_weighted_split_counts_in_the_share_that_fills_first() {
        // 3:1 over two devices of 100: the first fills first; bytes of the larger share, so a
        // slice counts what the first holds and the offer is its memory
        let equal = [e("a", 100, 100), e("b", 100, 100)];
        let s = Shares::plan(&[3, 1], &equal);
        assert_eq!(s.placeable(&equal), (100, 100));
        assert_eq!(s.size(&[768, 256], 256), 768);
        assert_eq!(s.size(&[1024, 1024], 256), 1024);
        assert_eq!(s.span(&[300, 100]), 300);
        // 3:1 with the small device taking the small share: both fill at once, and bytes of
        // the small share place every slice the devices hold
        let small_second = [e("a", 300, 300), e("b", 100, 100)];
        let s = Shares::plan(&[3, 1], &small_second);
        assert_eq!(s.placeable(&small_second), (100, 100));
        assert_eq!(s.size(&[768, 256], 256), 256);
        // ... and 3:1 onto a device a quarter the size: the small one fills first
        let tiny_second = [e("a", 100, 100), e("b", 25, 25)];
        let s = Shares::plan(&[3, 1], &tiny_second);
        assert_eq!(s.placeable(&tiny_second), (25, 25));
        assert_eq!(s.size(&[75, 25], 1), 25);
    }

    #[test]
    fn the_reference_places_the_most_slices_the_members_hold() {
        // the slices a split can place: Σp times the smallest free_pool / Σ_pool p
        let cases: [(&[u64], &[Entry]); 5] = [
            (&[3, 1], &[e("a", 100, 100), e("b", 100, 100)]),
            (&[3, 1], &[e("a", 100, 100), e("b", 10, 10)]),
            (
                &[1, 2, 5],
                &[e("a", 50, 50), e("b", 70, 70), e("c", 90, 90)],
            ),
            (
                &[2, 2, 1],
                &[
                    e("a", 9 << 30, 9 << 30),
                    e("a", 9 << 30, 9 << 30),
                    e("b", 4 << 30, 4 << 30),
                ],
            ),
            (
                &[1, 4],
                &[e("a", 1 << 40, 1 << 40), e("b", 1 << 40, 1 << 40)],
            ),
        ];
        for (weights, entries) in cases {
            let s = Shares::plan(weights, entries);
            let most = entries
                .iter()
                .map(|x| {
                    let pool: u64 = entries
                        .iter()
                        .zip(weights)
                        .filter(|(y, _)| y.physical == x.physical)
                        .map(|(_, &w)| w)
                        .sum();
                    x.total as f64 / pool as f64
                })
                .fold(f64::INFINITY, f64::min)
                * weights.iter().sum::<u64>() as f64;
            // a model of M bytes split by the shares has the figure M · u / Σp
            let placed =
                s.placeable(entries).1 as f64 * weights.iter().sum::<u64>() as f64 / s.unit as f64;
            assert!(
                placed <= most + 1.0 && placed >= most * 0.999,
                "{weights:?}: {placed} of {most}"
            );
        }
    }

    #[test]
    fn a_room_takes_slices_until_a_physical_device_is_full() {
        let mut room = Room::new(&[e("a", 100, 100), e("a", 100, 100), e("b", 60, 60)]);
        // a GPU listed twice holds both of its members' slices
        assert_eq!(room.take(&[30, 30, 30]), Ok(()));
        assert_eq!(
            room.take(&[25, 25, 10]),
            Err(Shortfall {
                member: 0,
                need: 110,
                free: 100
            })
        );
        // what failed was not taken
        assert_eq!(room.take(&[20, 20, 30]), Ok(()));
        assert_eq!(
            room.take(&[0, 0, 1]),
            Err(Shortfall {
                member: 2,
                need: 61,
                free: 60
            })
        );
    }

    #[test]
    fn nothing_to_place_on() {
        assert_eq!(Shares::even(0).placeable(&[]), (0, 0));
        assert_eq!(offer(&[], &[]), (0, 0));
        let huge = [e("a", u64::MAX, u64::MAX), e("b", u64::MAX, u64::MAX)];
        assert_eq!(offer(&[1, 1], &huge), (u64::MAX, u64::MAX));
    }

    #[test]
    fn an_even_split_counts_what_each_member_holds() {
        let even = Shares::even(2);
        // a slice of 1000 bytes per member, padded to 256
        assert_eq!(even.size(&[1000, 1000], 256), 1024);
        // a mirrored tensor of 1 MiB: 1 MiB
        assert_eq!(even.size(&[1 << 20, 1 << 20], 256), 1 << 20);
        assert_eq!(even.size(&[0, 0], 256), 0);
        // an uneven slice: the larger part
        assert_eq!(even.size(&[800, 200], 64), 832);
        assert_eq!(even.span(&[300, 500]), 500);
    }

    #[test]
    fn every_member_holds_at_most_its_factor_times_the_figure() {
        let mem = |n: usize| vec![e("x", 1000, 1000); n];
        for weights in [&[1u64, 1][..], &[3, 1], &[1, 2, 5], &[7]] {
            for entries in [
                mem(weights.len()),
                (0..weights.len())
                    .map(|j| e(&j.to_string(), 1000, 1000))
                    .collect(),
            ] {
                let s = Shares::plan(weights, &entries);
                for parts in [
                    [1usize, 1, 1],
                    [1000, 3, 77],
                    [4096, 4096, 4096],
                    [5000, 0, 12],
                ] {
                    let parts = &parts[..weights.len()];
                    let size = s.size(parts, 128);
                    assert_eq!(size % 128, 0);
                    for (j, &part) in parts.iter().enumerate() {
                        let factor = (weights[j] as usize).max(s.unit as usize);
                        assert!(
                            part * (s.unit as usize) <= size * factor,
                            "{weights:?} {parts:?}"
                        );
                    }
                }
            }
        }
    }
}
