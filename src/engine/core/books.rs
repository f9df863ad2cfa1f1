//! Where the ledger's money went: every line the core writes adds its dollars to the endpoint
//! it names (here) and to its dataset's book (`Core::ledger`), and earlier runs' lines start
//! them. So the providers' `spent` column, the datasets' and what names neither sum to the
//! ledger's total, the header's booked figure, whatever ended a stream: an answer, a close, a
//! failure after tokens, a look-up's adjustment, a crash's leftover.

use std::collections::HashMap;

use crate::domain::Usd;

/// The ledger's dollars, attributed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Books {
    /// Everything the ledger holds: earlier runs' lines and every line written since.
    total: Usd,
    /// By endpoint index (as the fleet's; an endpoint the listing adds later starts at zero).
    by_endpoint: Vec<Usd>,
    /// Lines naming no endpoint of the run's table (a stream that failed or was closed before
    /// it named one, a crash's estimates, the key's true-up), and earlier runs' spend at
    /// endpoints the run does not list.
    no_endpoint: Usd,
    /// Lines naming no dataset of the run (the key's true-up), and earlier runs' spend not in
    /// a dataset's book at the start.
    no_dataset: Usd,
}

impl Books {
    /// The books at the start: `carried` is what earlier runs spent, `in_datasets` the part of
    /// it the datasets' books start with. None of it is at an endpoint until
    /// [`Books::carry_by_tag`] says where.
    pub(crate) fn new(carried: Usd, in_datasets: Usd) -> Books {
        Books {
            total: carried,
            by_endpoint: Vec::new(),
            no_endpoint: carried,
            no_dataset: carried - in_datasets,
        }
    }

    /// Earlier runs' spend by endpoint tag: each of `tags` (the fleet's, by index) takes its
    /// own from what named no endpoint; a tag listed twice, at its first index (where
    /// [`Books::book`] puts a line naming it).
    pub(crate) fn carry_by_tag<'a>(
        &mut self,
        tags: impl Iterator<Item = &'a str>,
        by_tag: &HashMap<String, Usd>,
    ) {
        let mut seen = std::collections::HashSet::new();
        for (i, tag) in tags.enumerate() {
            if !seen.insert(tag) {
                continue;
            }
            if let Some(&usd) = by_tag.get(tag) {
                self.add_at(i, usd);
                self.no_endpoint = self.no_endpoint - usd;
            }
        }
    }

    /// A ledger line of `usd` at endpoint `endpoint` (when it names one of the table), of a
    /// dataset of the run or not.
    pub(crate) fn book(&mut self, endpoint: Option<usize>, in_dataset: bool, usd: Usd) {
        self.total += usd;
        match endpoint {
            Some(i) => self.add_at(i, usd),
            None => self.no_endpoint += usd,
        }
        if !in_dataset {
            self.no_dataset += usd;
        }
    }

    fn add_at(&mut self, i: usize, usd: Usd) {
        if self.by_endpoint.len() <= i {
            self.by_endpoint.resize(i + 1, Usd::ZERO);
        }
        self.by_endpoint[i] += usd;
    }

    /// What the ledger holds.
    pub(crate) fn total(&self) -> Usd {
        self.total
    }

    /// What the ledger holds at endpoint `i`.
    pub(crate) fn at(&self, i: usize) -> Usd {
        self.by_endpoint.get(i).copied().unwrap_or(Usd::ZERO)
    }

    pub(crate) fn no_endpoint(&self) -> Usd {
        self.no_endpoint
    }

    pub(crate) fn no_dataset(&self) -> Usd {
        self.no_dataset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(x: f64) -> Usd {
        Usd::from_f64(x)
    }

    /// Whatever is booked where, the endpoints and what names none sum to the total, and so
    /// do the datasets and what names none.
    #[test]
    fn the_parts_always_sum_to_the_total() {
        let by_tag: HashMap<String, Usd> = [
            ("chutes/int4".to_string(), usd(1.5)),
            ("gone".to_string(), usd(0.25)),
        ]
        .into();
        // Earlier runs spent 2.00: 1.50 at Chutes, 0.25 at an endpoint not listed now, 0.25
        // at none; 1.75 of it in the datasets' books.
        let mut b = Books::new(usd(2.0), usd(1.75));
        b.carry_by_tag(
            ["together", "chutes/int4", "chutes/int4"].into_iter(),
            &by_tag,
        );
        assert_eq!(
            (b.at(0), b.at(1), b.at(2)),
            (Usd::ZERO, usd(1.5), Usd::ZERO)
        );
        b.book(Some(0), true, usd(0.40));
        b.book(Some(5), true, usd(0.10));
        b.book(None, true, usd(0.05));
        b.book(None, false, usd(-0.02));
        b.book(Some(1), true, usd(-0.30));
        assert_eq!(b.total(), usd(2.23));
        let endpoints: Usd = (0..8).map(|i| b.at(i)).sum();
        assert_eq!(endpoints + b.no_endpoint(), b.total());
        assert_eq!(b.no_endpoint(), usd(0.5 + 0.05 - 0.02));
        // The datasets hold 1.75 + 0.40 + 0.10 + 0.05 - 0.30.
        assert_eq!(usd(2.0) + b.no_dataset(), b.total());
    }
}
