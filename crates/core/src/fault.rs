//! Faults injected on purpose, for the tests of paths that only a failing device reaches (a
//! GPU's kernel launch refused, a CUDA graph capture the driver will not end).
//!
//! A specification lists rules `POINT:N` (the Nth time the program passes POINT, counted from
//! 1, fails) or `POINT:N+` (that time and every later one), separated by commas, e.g.
//! `allreduce:3,capture_end:1`. The edge names its points and counts its passes through an
//! [`Injector`].

use std::collections::HashMap;

/// One rule of a specification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub point: String,
    /// The first pass that fails (from 1).
    pub nth: u64,
    /// Whether every pass after it fails too.
    pub and_later: bool,
}

/// Reads a specification; `points` are the points the caller knows. An error says what is wrong.
pub fn parse(spec: &str, points: &[&str]) -> Result<Vec<Rule>, String> {
    spec.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|item| {
            let item = item.trim();
            let (point, count) = item
                .split_once(':')
                .ok_or_else(|| format!("`{item}` is not POINT:N or POINT:N+"))?;
            if !points.contains(&point) {
                return Err(format!(
                    "unknown point `{point}` (known: {})",
                    points.join(", ")
                ));
            }
            let (count, and_later) = match count.strip_suffix('+') {
                Some(c) => (c, true),
                None => (count, false),
            };
            let nth: u64 = count
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("`{item}`: N must be a whole number from 1"))?;
            Ok(Rule {
                point: point.to_owned(),
                nth,
                and_later,
            })
        })
        .collect()
}

/// Counts the passes through each point and says which fail.
#[derive(Debug, Default)]
pub struct Injector {
    rules: Vec<Rule>,
    passes: HashMap<String, u64>,
}

impl Injector {
    pub fn new(rules: Vec<Rule>) -> Injector {
        Injector {
            rules,
            passes: HashMap::new(),
        }
    }

    /// Counts a pass through `point`; returns its number when a rule makes it fail.
    pub fn pass(&mut self, point: &str) -> Option<u64> {
        if !self.rules.iter().any(|r| r.point == point) {
            return None;
        }
        let n = self.passes.entry(point.to_owned()).or_insert(0);
        *n += 1;
        let n = *n;
        self.rules
            .iter()
            .any(|r| r.point == point && (n == r.nth || (r.and_later && n > r.nth)))
            .then_some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POINTS: &[&str] = &["allreduce", "capture_end"];

    #[test]
    fn rules_are_read_and_checked() {
        let r = parse("allreduce:3, capture_end:1+", POINTS).unwrap();
        assert_eq!(
            r,
            vec![
                Rule {
                    point: "allreduce".into(),
                    nth: 3,
                    and_later: false
                },
                Rule {
                    point: "capture_end".into(),
                    nth: 1,
                    and_later: true
                },
            ]
        );
        assert!(parse("", POINTS).unwrap().is_empty());
        for (bad, says) in [
            ("allreduce", "is not POINT:N"),
            ("launch:1", "unknown point `launch`"),
            ("allreduce:0", "N must be a whole number from 1"),
            ("allreduce:x+", "N must be a whole number from 1"),
        ] {
            let e = parse(bad, POINTS).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn the_nth_pass_fails_and_with_plus_every_later_one() {
        let mut i = Injector::new(parse("allreduce:2,capture_end:2+", POINTS).unwrap());
        let a: Vec<_> = (0..4).map(|_| i.pass("allreduce")).collect();
        assert_eq!(a, [None, Some(2), None, None]);
        let c: Vec<_> = (0..4).map(|_| i.pass("capture_end")).collect();
        assert_eq!(c, [None, Some(2), Some(3), Some(4)]);
        assert_eq!(i.pass("other"), None);
    }
}
