//! The lengths of exported rows in tokens, as the provider counted them (the prompt as it was
//! sent and the answer: what the trainer tokenizes, give or take the template's few marks),
//! and the trainer's `max_length` against them. SpecForge cuts a longer row on the right: a
//! Kimi row is mostly reasoning, so the cut row trains on thinking with no answer (the
//! trainer issue: 132 of 461 demo rows past README's 2,048).

use serde::Serialize;

use crate::store::output::OutputRecord;

/// The length of each success row of `r`, in the order the rows are written: one for a whole
/// row, one per answer of the model when exploded (`parts`), each the request that wrote its
/// answer (its prompt and its completion).
pub(super) fn of_rows(r: &OutputRecord, parts: usize) -> Vec<u64> {
    let whole = |u: &crate::store::output::RecordUsage| u.prompt_tokens + u.completion_tokens;
    match r.turns.as_slice() {
        // turns = "last": one request, the whole row.
        [] => vec![whole(&r.usage); parts],
        // turns = "all": each turn's request holds the history before it.
        turns if parts == turns.len() => turns.iter().map(|t| whole(&t.usage)).collect(),
        turns => vec![turns.last().map_or(whole(&r.usage), |t| whole(&t.usage)); parts],
    }
}

/// One dataset's row lengths: the distribution, and how many pass `--max-length`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Lengths {
    pub rows: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
    /// `--max-length`, when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_length: Option<u64>,
    /// Rows longer than it (written, or left out with `--skip-longer`).
    pub longer: u64,
    /// `--skip-longer`: those rows were left out.
    pub longer_left_out: bool,
}

impl Lengths {
    /// The distribution of `all` (the lengths of the rows written and of those left out for
    /// their length), with `longer` counted against `max_length`.
    pub(super) fn of(mut all: Vec<u64>, max_length: Option<u64>, skip_longer: bool) -> Lengths {
        all.sort_unstable();
        let at = |q: f64| -> u64 {
            if all.is_empty() {
                return 0;
            }
            // Nearest rank: the smallest length with at least q of the rows at or below it.
            let rank = ((q * all.len() as f64).ceil() as usize).clamp(1, all.len());
            all[rank - 1]
        };
        Lengths {
            rows: all.len() as u64,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            max: all.last().copied().unwrap_or(0),
            max_length,
            longer: max_length.map_or(0, |m| all.iter().filter(|&&l| l > m).count() as u64),
            longer_left_out: skip_longer && max_length.is_some(),
        }
    }

    /// The summary's line for dataset `name`, when it has rows.
    pub(super) fn line(&self, name: &str) -> Option<String> {
        use crate::domain::group_thousands as g;
        if self.rows == 0 {
            return None;
        }
        let mut s = format!(
            "  {name}: row lengths in tokens (as the provider counted them): p50 {}, p90 {}, p99 \
             {}, max {}",
            g(self.p50),
            g(self.p90),
            g(self.p99),
            g(self.max)
        );
        match self.max_length {
            None => s.push_str(
                "; a trainer cuts longer rows than its max_length on the right (the answer \
                 first): set it above p99, or --max-length N to count them",
            ),
            Some(m) if self.longer == 0 => s.push_str(&format!("; none longer than {}", g(m))),
            Some(m) => {
                s.push_str(&format!(
                    "; {} of {} longer than --max-length {}",
                    g(self.longer),
                    g(self.rows),
                    g(m)
                ));
                s.push_str(if self.longer_left_out {
                    ", left out (--skip-longer)"
                } else {
                    ": a trainer with that max_length cuts them on the right, training on \
                     reasoning with no answer; --skip-longer leaves them out"
                });
            }
        }
        Some(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank_and_longer_rows_are_counted() {
        // (lengths, max_length) -> (p50, p90, p99, max, longer)
        type Want = (u64, u64, u64, u64, u64);
        let cases: [(Vec<u64>, Option<u64>, Want); 4] = [
            (vec![], Some(10), (0, 0, 0, 0, 0)),
            (vec![7], None, (7, 7, 7, 7, 0)),
            ((1..=100).rev().collect(), Some(90), (50, 90, 99, 100, 10)),
            (vec![5, 5, 5, 4000], Some(2048), (5, 4000, 4000, 4000, 1)),
        ];
        for (all, max, (p50, p90, p99, top, longer)) in cases {
            let l = Lengths::of(all.clone(), max, false);
            assert_eq!(
                (l.p50, l.p90, l.p99, l.max, l.longer),
                (p50, p90, p99, top, longer),
                "{all:?}"
            );
        }
    }

    #[test]
    fn the_line_says_what_the_trainer_will_do_with_the_longer_rows() {
        let all: Vec<u64> = (1..=10).map(|i| i * 1000).collect();
        let l = Lengths::of(all.clone(), Some(2048), false);
        let said = l.line("A").expect("a line");
        assert!(
            said.contains("p50 5,000, p90 9,000, p99 10,000, max 10,000"),
            "{said}"
        );
        assert!(
            said.contains("8 of 10 longer than --max-length 2,048"),
            "{said}"
        );
        assert!(said.contains("--skip-longer leaves them out"), "{said}");
        let skipped = Lengths::of(all, Some(2048), true)
            .line("A")
            .expect("a line");
        assert!(skipped.ends_with("left out (--skip-longer)"), "{skipped}");
        let none = Lengths::of(vec![10, 20], None, false)
            .line("A")
            .expect("a line");
        assert!(none.contains("set it above p99"), "{none}");
        assert_eq!(Lengths::default().line("A"), None);
    }
}
