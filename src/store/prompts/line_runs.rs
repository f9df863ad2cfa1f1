//! A set of line numbers, ascending, held as runs of consecutive lines: the duplicate lines a
//! count finds, which a run then skips by number. A file of 100 million copies of one line is
//! one run (16 bytes), not 100 million numbers (800 MB; reliability-probe-4 N4).

/// Line numbers, added in ascending order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LineRuns {
    /// `(first, last)` of each run, inclusive, ascending and apart.
    runs: Vec<(u64, u64)>,
    len: u64,
}

impl LineRuns {
    /// Adds `line`, which must come after every line added before (a smaller one is ignored:
    /// the count reads a file once, forward).
    pub fn push(&mut self, line: u64) {
        match self.runs.last_mut() {
            Some((_, last)) if line <= *last => return,
            Some((_, last)) if line == *last + 1 => *last = line,
            _ => self.runs.push((line, line)),
        }
        self.len += 1;
    }

    /// How many lines.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many runs are held (what the set costs in memory).
    pub fn runs(&self) -> usize {
        self.runs.len()
    }

    /// Whether `line` is in the set, for lines asked in ascending order: `at` is the caller's
    /// place in the runs, kept between calls, so a whole file is walked once.
    pub fn holds(&self, line: u64, at: &mut usize) -> bool {
        while self.runs.get(*at).is_some_and(|&(_, last)| last < line) {
            *at += 1;
        }
        self.runs.get(*at).is_some_and(|&(first, _)| first <= line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_lines_are_one_run_and_are_found_walking_forward() {
        let mut s = LineRuns::default();
        for l in [3, 4, 5, 9, 11, 12, 12, 2] {
            s.push(l);
        }
        assert_eq!(
            (s.len(), s.runs()),
            (6, 3),
            "a repeat and a step back add nothing"
        );
        let mut at = 0;
        let held: Vec<u64> = (1..=14).filter(|&l| s.holds(l, &mut at)).collect();
        assert_eq!(held, [3, 4, 5, 9, 11, 12]);
        let mut many = LineRuns::default();
        (2..=1_000_000).for_each(|l| many.push(l));
        assert_eq!((many.len(), many.runs()), (999_999, 1));
    }
}
