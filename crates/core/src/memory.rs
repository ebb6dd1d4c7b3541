//! How much memory a tensor-parallel device can offer: not the sum of its devices', but the
//! largest model whose every slice fits the device it goes to.
//!
//! A split gives device `i` the share `w_i / Σw` of every split tensor. A model of `S` bytes
//! then needs `S · w_i / Σw` on device `i`, so the largest that fits is `min_i free_i · Σw / w_i`:
//! for an even split over `n` devices, `n · min(free_i)`. A physical device listed more than once
//! (`CUDA0,CUDA0`) holds all of its entries' shares from one pool: its entries count as one with
//! the sum of their weights, so two halves of one GPU offer that GPU's memory once. Mirrored
//! tensors (norms, embeddings) take a full copy on every device and are not counted: the figure
//! is what the split can place, which is what a planner such as llama.cpp's `--fit` multiplies
//! by.

/// One entry of a tensor-parallel device's device list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// What identifies the physical device: entries with the same key share one pool.
    pub physical: String,
    /// Its free and total memory, as the device reports them (bytes).
    pub free: u64,
    pub total: u64,
    /// Its share of each split tensor, relative to the other entries' (an even split: all 1).
    pub weight: u64,
}

/// The (free, total) bytes a split over `entries` can place; (0, 0) for no entries or no
/// weight.
pub fn placeable(entries: &[Entry]) -> (u64, u64) {
    let sum: u128 = entries.iter().map(|e| e.weight as u128).sum();
    if sum == 0 {
        return (0, 0);
    }
    // one pool per physical device: its memory once, the weights of all its entries
    let mut pools: Vec<(&str, u64, u64, u128)> = Vec::new();
    for e in entries {
        match pools.iter_mut().find(|p| p.0 == e.physical) {
            Some(p) => p.3 += e.weight as u128,
            None => pools.push((&e.physical, e.free, e.total, e.weight as u128)),
        }
    }
    let fit = |mem: fn(&(&str, u64, u64, u128)) -> u64| {
        pools
            .iter()
            .filter(|p| p.3 > 0)
            .map(|p| mem(p) as u128 * sum / p.3)
            .min()
            .map_or(0, |s| u64::try_from(s).unwrap_or(u64::MAX))
    };
    (fit(|p| p.1), fit(|p| p.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(physical: &str, free: u64, total: u64, weight: u64) -> Entry {
        Entry {
            physical: physical.into(),
            free,
            total,
            weight,
        }
    }

    #[test]
    fn an_even_split_offers_the_smallest_free_memory_times_the_devices() {
        let gib = 1 << 30;
        assert_eq!(
            placeable(&[e("a", 10 * gib, 16 * gib, 1), e("b", 6 * gib, 16 * gib, 1)]),
            (12 * gib, 32 * gib)
        );
        assert_eq!(
            placeable(&[e("a", 9, 10, 1), e("b", 9, 10, 1), e("c", 3, 10, 1)]),
            (9, 30)
        );
    }

    #[test]
    fn one_physical_device_listed_twice_offers_its_memory_once() {
        let h200 = 143_000_000_000;
        assert_eq!(
            placeable(&[e("cuda0", h200, h200, 1), e("cuda0", h200, h200, 1)]),
            (h200, h200)
        );
        // two halves of one device next to a second device: the first holds 2 of 3 shares
        assert_eq!(
            placeable(&[e("a", 80, 100, 1), e("a", 80, 100, 1), e("b", 100, 100, 1)]),
            (120, 150)
        );
    }

    #[test]
    fn a_weighted_split_is_bounded_by_the_device_its_share_fills_first() {
        // 3:1 over two devices of 100: the first fills at 133, the second at 400
        assert_eq!(
            placeable(&[e("a", 100, 100, 3), e("b", 100, 100, 1)]),
            (133, 133)
        );
        // 3:1 with the small device taking the small share: both fill at 400
        assert_eq!(
            placeable(&[e("a", 300, 300, 3), e("b", 100, 100, 1)]),
            (400, 400)
        );
        // a device with no share limits nothing
        assert_eq!(placeable(&[e("a", 50, 60, 1), e("b", 0, 0, 0)]), (50, 60));
    }

    #[test]
    fn nothing_to_place_on() {
        assert_eq!(placeable(&[]), (0, 0));
        assert_eq!(placeable(&[e("a", 5, 5, 0)]), (0, 0));
        assert_eq!(
            placeable(&[e("a", u64::MAX, u64::MAX, 1), e("b", u64::MAX, u64::MAX, 1)]),
            (u64::MAX, u64::MAX)
        );
    }
}
