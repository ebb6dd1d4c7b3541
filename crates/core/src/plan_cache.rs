//! How many graph plans a meta backend keeps.
//!
//! A plan is costly to build (splits derived, device graphs made, AllReduce memory allocated)
//! and cheap to keep, and a step computes one graph per scheduler split on the meta device:
//! one for a model that runs whole on it, one per layer and more when some op runs elsewhere in
//! every layer. The cache keeps the most recently used plans up to a capacity. It starts small
//! and doubles, up to a limit, when a graph comes back whose plan it dropped for room at this
//! capacity: the graphs of one step did not fit, and every step would plan them all again.

use std::collections::VecDeque;

/// The capacity a cache starts with.
pub const INITIAL: usize = 32;
/// The capacity it never grows past (a step of more graphs than this plans some again).
pub const LIMIT: usize = 1024;
/// How many dropped graphs it remembers (a step of more graphs than this never grows it).
const HISTORY: usize = 4 * LIMIT;

/// The capacity of one backend's plan cache and the graphs it dropped lately.
#[derive(Debug)]
pub struct Capacity {
    cap: usize,
    /// Keys of the graphs whose plans were dropped for room at this capacity, oldest first
    /// (at most `HISTORY`).
    dropped: VecDeque<u64>,
}

impl Default for Capacity {
    fn default() -> Self {
        Capacity {
            cap: INITIAL,
            dropped: VecDeque::new(),
        }
    }
}

impl Capacity {
    /// How many plans the cache keeps now.
    pub fn get(&self) -> usize {
        self.cap
    }

    /// Records that the plan of the graph `key` was dropped to make room.
    pub fn dropped(&mut self, key: u64) {
        if self.dropped.len() == HISTORY {
            self.dropped.pop_front();
        }
        self.dropped.push_back(key);
    }

    /// Records that a plan is built for the graph `key`; returns the new capacity when it grows
    /// (the graph's plan was dropped for room at the capacity before).
    pub fn building(&mut self, key: u64) -> Option<usize> {
        if self.cap >= LIMIT || !self.dropped.contains(&key) {
            return None;
        }
        self.cap = (self.cap * 2).min(LIMIT);
        self.dropped.clear();
        Some(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A least-recently-used cache of graph keys governed by a [`Capacity`].
    #[derive(Default)]
    struct Lru {
        keys: Vec<u64>,
        c: Capacity,
    }

    impl Lru {
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
        let mut lru = Lru::default();
        assert_eq!(lru.run(20, 10), 20);
        assert_eq!(lru.c.get(), INITIAL);
    }

    #[test]
    fn a_step_of_more_graphs_grows_it_until_they_fit() {
        let mut lru = Lru::default();
        // 100 graphs a step: each step finds its first graph dropped and doubles the capacity
        // (32 -> 64 -> 128); from the fourth step on nothing is planned again
        lru.run(100, 3);
        assert_eq!(lru.c.get(), 128);
        assert_eq!(lru.run(100, 5), 0);
    }

    #[test]
    fn the_capacity_stops_at_the_limit() {
        let mut lru = Lru::default();
        lru.run(3000, 8);
        assert_eq!(lru.c.get(), LIMIT);
        // a step of 1000 graphs fits now: each is planned once
        assert_eq!(lru.run(1000, 4), 1000);
    }

    #[test]
    fn graphs_that_never_return_do_not_grow_it() {
        let mut c = Capacity::default();
        // every plan built for a graph never seen before (new addresses every step, say)
        for k in 0..5000 {
            c.dropped(k);
            assert_eq!(c.building(k + 1_000_000), None);
        }
        assert_eq!(c.get(), INITIAL);
    }
}
