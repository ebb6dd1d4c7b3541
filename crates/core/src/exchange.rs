//! Which partial sums move where in an AllReduce built from copies and adds, as plain data:
//! [`schedule`] gives the stages for `n` devices, [`reference_sum`] the summation order every
//! AllReduce path of the meta backend follows, so that all paths (copies, our CUDA kernel) give
//! the same bits on every device.
//!
//! * `n` a power of two: recursive doubling (butterfly). In stage `s` every device `j` receives
//!   the running sum of its partner `j ^ 2^s` and adds it to its own: `log2 n` stages, no device
//!   does more work than another, and the sum is the balanced pairwise tree
//!   `((p0 + p1) + (p2 + p3)) + ...` on every device (IEEE addition commutes, so both partners
//!   of a pair compute the same bits).
//! * other `n`: one stage; every device receives the other `n - 1` partials and adds all `n` in
//!   device order `((p0 + p1) + p2) + ...`. (A butterfly over a non-power of two loses summands.)
//!
//! A stage's semantics, which the executor realises with ggml events: every copy of the stage
//! reads its source's value as the previous stage left it, and every add of the stage runs
//! after all copies of the stage have completed.

/// Where a value lives on one device: its own reduction target, or a scratch slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loc {
    Own,
    Slot(usize),
}

/// The target of device `from` copied into scratch slot `slot` of device `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub from: usize,
    pub to: usize,
    pub slot: usize,
}

/// On device `dev`: `dst = a + b`, in place (`dst` is `a` or `b`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Add {
    pub dev: usize,
    pub dst: Loc,
    pub a: Loc,
    pub b: Loc,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stage {
    pub transfers: Vec<Transfer>,
    /// Per device, in execution order.
    pub adds: Vec<Add>,
}

impl Stage {
    /// The devices that receive in this stage from device `from`.
    pub fn receivers_of(&self, from: usize) -> impl Iterator<Item = usize> + '_ {
        self.transfers
            .iter()
            .filter(move |t| t.from == from)
            .map(|t| t.to)
    }
    pub fn adds_on(&self, dev: usize) -> impl Iterator<Item = &Add> + '_ {
        self.adds.iter().filter(move |a| a.dev == dev)
    }
}

/// Scratch slots each device needs for one AllReduce over `n` devices.
pub fn slots(n: usize) -> usize {
    match n {
        0 | 1 => 0,
        _ if n.is_power_of_two() => n.trailing_zeros() as usize,
        _ => n - 1,
    }
}

/// The stages of an AllReduce over `n` devices (none for `n <= 1`).
pub fn schedule(n: usize) -> Vec<Stage> {
    if n <= 1 {
        return Vec::new();
    }
    if n.is_power_of_two() {
        return (0..slots(n))
            .map(|s| Stage {
                transfers: (0..n)
                    .map(|j| Transfer {
                        from: j ^ (1 << s),
                        to: j,
                        slot: s,
                    })
                    .collect(),
                adds: (0..n)
                    .map(|j| Add {
                        dev: j,
                        dst: Loc::Own,
                        a: Loc::Own,
                        b: Loc::Slot(s),
                    })
                    .collect(),
            })
            .collect();
    }
    // Device j keeps partial i (i != j) in slot i (i < j) or i - 1 (i > j).
    let slot_of = |j: usize, i: usize| if i < j { i } else { i - 1 };
    let loc = |j: usize, i: usize| {
        if i == j {
            Loc::Own
        } else {
            Loc::Slot(slot_of(j, i))
        }
    };
    let mut stage = Stage::default();
    for j in 0..n {
        for i in (0..n).filter(|&i| i != j) {
            stage.transfers.push(Transfer {
                from: i,
                to: j,
                slot: slot_of(j, i),
            });
        }
        // The running sum of p0..p(i-1) lives in the slot of p0 until p_j joins it, then in
        // the target (devices 0 and 1 hold their own partial among the first two summands).
        let mut acc = loc(j, 0);
        for i in 1..n {
            let x = loc(j, i);
            let dst = if i >= j { Loc::Own } else { acc };
            stage.adds.push(Add {
                dev: j,
                dst,
                a: acc,
                b: x,
            });
            acc = dst;
        }
    }
    vec![stage]
}

/// The sum of `parts` in the order every AllReduce path uses for `parts.len()` devices.
pub fn reference_sum<T: Copy + std::ops::Add<Output = T>>(parts: &[T]) -> Option<T> {
    let (&first, rest) = parts.split_first()?;
    if parts.len().is_power_of_two() {
        let mut level: Vec<T> = parts.to_vec();
        while level.len() > 1 {
            level = level.chunks(2).map(|p| p[0] + p[1]).collect();
        }
        return Some(level[0]);
    }
    Some(rest.iter().fold(first, |acc, &x| acc + x))
}

/// The same order as an expression over the partial names `p0 .. p(n-1)`, for code generators:
/// calls `add(a, b)` with operand expressions and returns the root expression.
pub fn reference_expr<E: Clone>(leaves: Vec<E>, mut add: impl FnMut(E, E) -> E) -> Option<E> {
    if leaves.is_empty() {
        return None;
    }
    if leaves.len().is_power_of_two() {
        let mut level = leaves;
        while level.len() > 1 {
            let mut next = Vec::with_capacity(level.len() / 2);
            let mut it = level.into_iter();
            while let (Some(a), Some(b)) = (it.next(), it.next()) {
                next.push(add(a, b));
            }
            level = next;
        }
        return level.pop();
    }
    let mut it = leaves.into_iter();
    let first = it.next()?;
    Some(it.fold(first, add))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `schedule(n)` on values: per device its own value and its slots.
    fn simulate(n: usize, parts: &[f32]) -> Vec<f32> {
        let k = slots(n);
        let mut own: Vec<f32> = parts.to_vec();
        let mut slot = vec![vec![f32::NAN; k]; n];
        for stage in schedule(n) {
            // copies read the values the previous stage left
            let snapshot = own.clone();
            for t in &stage.transfers {
                assert!(t.slot < k, "slot {} out of range for n = {n}", t.slot);
                assert_ne!(t.from, t.to);
                slot[t.to][t.slot] = snapshot[t.from];
            }
            for a in &stage.adds {
                assert!(a.dst == a.a || a.dst == a.b, "adds are in place: {a:?}");
                let get = |own: &Vec<f32>, slot: &Vec<Vec<f32>>, l: Loc| match l {
                    Loc::Own => own[a.dev],
                    Loc::Slot(s) => slot[a.dev][s],
                };
                let v = get(&own, &slot, a.a) + get(&own, &slot, a.b);
                match a.dst {
                    Loc::Own => own[a.dev] = v,
                    Loc::Slot(s) => slot[a.dev][s] = v,
                }
            }
        }
        own
    }

    /// splitmix64: deterministic test values of mixed sign and magnitude.
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let mant = (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                mant * 2f32.powi(((z >> 8) % 40) as i32 - 20)
            })
            .collect()
    }

    #[test]
    fn every_device_gets_the_reference_sum_bit_for_bit() {
        // (under miri, which checks each operation and runs ~1000x slower, a few seeds)
        let seeds = if cfg!(miri) { 3 } else { 200 };
        for n in 1..=16 {
            for seed in 0..seeds {
                let parts = values(seed * 31 + n as u64, n);
                let want = reference_sum(&parts).unwrap();
                for (j, got) in simulate(n, &parts).into_iter().enumerate() {
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "n = {n}, device {j}, parts {parts:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn no_summand_is_lost_or_doubled() {
        // With powers of two as partials, every device must see each exactly once.
        for n in 1..=16 {
            let parts: Vec<f64> = (0..n).map(|i| (1u64 << i) as f64).collect();
            let want = ((1u64 << n) - 1) as f64;
            assert_eq!(reference_sum(&parts), Some(want));
            let f: Vec<f32> = parts.iter().map(|&x| x as f32).collect();
            for got in simulate(n, &f) {
                assert_eq!(got as f64, want, "n = {n}");
            }
        }
    }

    #[test]
    fn expression_order_matches_reference_sum() {
        for n in 1..=16 {
            let names: Vec<String> = (0..n).map(|i| format!("p{i}")).collect();
            let expr = reference_expr(names, |a, b| format!("({a}+{b})")).unwrap();
            let parts = values(n as u64, n);
            // evaluate the expression string over the parts
            fn eval(s: &str, parts: &[f32]) -> (f32, usize) {
                let b = s.as_bytes();
                if b[0] == b'(' {
                    let (l, used_l) = eval(&s[1..], parts);
                    let (r, used_r) = eval(&s[2 + used_l..], parts);
                    (l + r, used_l + used_r + 3)
                } else {
                    let len = s[1..].bytes().take_while(u8::is_ascii_digit).count();
                    let i: usize = s[1..1 + len].parse().unwrap();
                    (parts[i], len + 1)
                }
            }
            let (v, used) = eval(&expr, &parts);
            assert_eq!(used, expr.len());
            assert_eq!(
                v.to_bits(),
                reference_sum(&parts).unwrap().to_bits(),
                "{expr}"
            );
        }
    }

    #[test]
    fn butterfly_stages_are_balanced() {
        for n in [2usize, 4, 8, 16] {
            let st = schedule(n);
            assert_eq!(st.len(), n.trailing_zeros() as usize);
            for s in &st {
                for j in 0..n {
                    assert_eq!(s.receivers_of(j).count(), 1);
                    assert_eq!(s.adds_on(j).count(), 1);
                }
            }
        }
        let st = schedule(3);
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].transfers.len(), 6);
        assert!(schedule(1).is_empty() && schedule(0).is_empty());
    }
}
