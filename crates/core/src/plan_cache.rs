//! How many graph plans a meta backend keeps.
//!
//! A plan is costly to build (splits derived, device graphs made, AllReduce memory allocated),
//! and a step computes one graph per scheduler split on the meta device:
//! one for a model that runs whole on it, one per layer and more when some op runs elsewhere in
//! every layer. The cache keeps the most recently used plans up to a capacity. It starts small
//! and doubles, up to a limit, when a graph comes back whose plan it dropped for room at this
//! capacity: the graphs of one step did not fit, and every step would plan them all again.
//! Keeping a plan costs host memory for its graphs and, on the AllReduce paths that copy
//! partial sums (copies, direct reads), device memory for its largest cut on every device; the
//! plans of our CUDA kernel hold none.

use std::collections::VecDeque;

/// The capacity a meta backend's cache starts with.
pub const INITIAL: usize = 32;
/// The capacity it never grows past (a step of more graphs than this plans some again).
pub const LIMIT: usize = 1024;

/// The capacity of one backend's plan cache and the graphs it dropped lately.
#[derive(Debug)]
pub struct Capacity {
    cap: usize,
    limit: usize,
    /// Keys of the graphs whose plans were dropped for room at this capacity, oldest first;
    /// at most 4 × `limit` (a step of more graphs than that never grows the cache).
    dropped: VecDeque<u64>,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity::new(INITIAL, LIMIT)
    }
}

impl Capacity {
    /// A capacity of `initial` plans that grows up to `limit`.
    pub fn new(initial: usize, limit: usize) -> Capacity {
        Capacity {
            cap: initial.max(1),
            limit: limit.max(initial),
            dropped: VecDeque::new(),
        }
    }

    /// How many plans the cache keeps now.
    pub fn get(&self) -> usize {
        self.cap
    }

    /// Records that the plan of the graph `key` was dropped to make room.
    pub fn dropped(&mut self, key: u64) {
        if self.dropped.len() == 4 * self.limit {
            self.dropped.pop_front();
        }
        self.dropped.push_back(key);
    }

    /// Records that a plan is built for the graph `key`; returns the new capacity when it grows
    /// (the graph's plan was dropped for room at the capacity before).
    pub fn building(&mut self, key: u64) -> Option<usize> {
        if self.cap >= self.limit || !self.dropped.contains(&key) {
            return None;
        }
        self.cap = (self.cap * 2).min(self.limit);
        self.dropped.clear();
        Some(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A least-recently-used cache of graph keys governed by a [`Capacity`] (small numbers:
    /// the policy is the same at any scale, and miri runs these tests too).
    struct Lru {
        keys: Vec<u64>,
        c: Capacity,
    }

    impl Lru {
        /// Starts at 4 plans, grows to at most 32.
        fn new() -> Lru {
            Lru {
                keys: Vec::new(),
                c: Capacity::new(4, 32),
            }
        }

        /// Runs `steps` steps of graphs `0..graphs`; returns how many plans were built.
        fn run(&mut self, graphs: u64, steps: usize) -> usize {
            let mut built = 0;
            for _ in 0..steps {
                for g in 0..graphs {
                    if let Some(i) = self.keys.iter().position(|&k| k == g) {
                        self.keys.remove(i);
                    } else {
                        if self.keys.len() >= self.c.get() {
                            self.c.dropped(self.keys.remove(0));
                        }
                        self.c.building(g);
                        built += 1;
                    }
                    self.keys.push(g);
                }
            }
            built
        }
    }

    #[test]
    fn a_step_that_fits_never_grows_the_cache() {
        let mut lru = Lru::new();
        assert_eq!(lru.run(3, 10), 3);
        assert_eq!(lru.c.get(), 4);
    }

    #[test]
    fn a_step_of_more_graphs_grows_it_until_they_fit() {
        let mut lru = Lru::new();
        // 13 graphs a step: the second step finds graph 0 dropped (4 -> 8), then graph 10
        // (8 -> 16); the third plans the 3 graphs dropped before that again; then none
        assert_eq!(lru.run(13, 1), 13);
        assert_eq!(lru.c.get(), 4);
        assert_eq!(lru.run(13, 1), 13);
        assert_eq!(lru.c.get(), 16);
        assert_eq!(lru.run(13, 1), 3);
        assert_eq!(lru.run(13, 5), 0);
    }

    #[test]
    fn the_capacity_stops_at_the_limit() {
        let mut lru = Lru::new();
        lru.run(100, 5);
        assert_eq!(lru.c.get(), 32);
        // a step of 20 graphs fits now: each is planned once
        assert_eq!(lru.run(20, 4), 20);
    }

    #[test]
    fn graphs_that_never_return_do_not_grow_it() {
        let mut c = Capacity::new(4, 32);
        // every plan built for a graph never seen before (new addresses every step, say)
        for k in 0..300 {
            c.dropped(k);
            assert_eq!(c.building(k + 1_000_000), None);
        }
        assert_eq!(c.get(), 4);
    }

    #[test]
    fn a_meta_backend_starts_at_32_and_stops_at_1024() {
        let mut c = Capacity::default();
        assert_eq!(c.get(), INITIAL);
        for k in 0.. {
            c.dropped(k);
            if c.building(k).is_none() {
                break;
            }
        }
        assert_eq!(c.get(), LIMIT);
    }
}
