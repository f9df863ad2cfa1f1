//! The providers table's order: which column it is sorted by and which way, and the order of
//! the endpoints it gives. `s` cycles the figures an operator sorts by most, `S` reverses,
//! and `<` `>` choose any column of the table, left or right of the one sorted by (btop's and
//! bottom's way of choosing a column, without a menu). A column an endpoint has no figure in
//! (no TTFT yet) sorts after those that have one, whichever way.

use std::cmp::Ordering;

use crate::engine::snapshot::{EndpointSnap, Snapshot};

/// The columns the providers table sorts by, in the table's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortColumn {
    Provider,
    Tag,
    Quant,
    PriceIn,
    PriceOut,
    Up,
    Fly,
    Done,
    Errors,
    TokPerS,
    Ttft,
    Len,
    Trunc,
    Spent,
}

impl SortColumn {
    /// Every column, in the table's order: what `<` and `>` step through.
    pub const ALL: [SortColumn; 14] = [
        SortColumn::Provider,
        SortColumn::Tag,
        SortColumn::Quant,
        SortColumn::PriceIn,
        SortColumn::PriceOut,
        SortColumn::Up,
        SortColumn::Fly,
        SortColumn::Done,
        SortColumn::Errors,
        SortColumn::TokPerS,
        SortColumn::Ttft,
        SortColumn::Len,
        SortColumn::Trunc,
        SortColumn::Spent,
    ];

    /// What `s` cycles through, in this order: price, name, then the run's own figures.
    pub const QUICK: [SortColumn; 6] = [
        SortColumn::PriceOut,
        SortColumn::Provider,
        SortColumn::TokPerS,
        SortColumn::Spent,
        SortColumn::Errors,
        SortColumn::Done,
    ];

    /// The next of the quick cycle (from a column outside it, its first).
    pub fn next(self) -> SortColumn {
        match Self::QUICK.iter().position(|c| *c == self) {
            Some(i) => Self::QUICK[(i + 1) % Self::QUICK.len()],
            None => Self::QUICK[0],
        }
    }

    /// The column `by` places right (left when negative) of this one in the table, wrapping.
    pub fn step(self, by: i32) -> SortColumn {
        let n = Self::ALL.len() as i32;
        let i = Self::ALL.iter().position(|c| *c == self).unwrap_or(0) as i32;
        Self::ALL[(i + by).rem_euclid(n) as usize]
    }

    /// The direction a column is first sorted in: A-Z, cheapest and quickest to answer first;
    /// biggest first for the other observed figures.
    pub fn natural(self) -> SortDir {
        match self {
            SortColumn::Provider
            | SortColumn::Tag
            | SortColumn::Quant
            | SortColumn::PriceIn
            | SortColumn::PriceOut
            | SortColumn::Ttft => SortDir::Asc,
            _ => SortDir::Desc,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            SortColumn::Provider => "provider",
            SortColumn::Tag => "tag",
            SortColumn::Quant => "quant",
            SortColumn::PriceIn => "$/M in",
            SortColumn::PriceOut => "$/M out",
            SortColumn::Up => "up30m",
            SortColumn::Fly => "fly",
            SortColumn::Done => "done",
            SortColumn::Errors => "errors",
            SortColumn::TokPerS => "tok/s",
            SortColumn::Ttft => "ttft50",
            SortColumn::Len => "len",
            SortColumn::Trunc => "trunc",
            SortColumn::Spent => "spent",
        }
    }

    /// An endpoint's value in this column.
    fn key(self, e: &EndpointSnap) -> Key<'_> {
        let text = |t: &str| Key::Text(t.to_lowercase());
        let num = |v: f64| Key::Num(Some(v));
        let some = |v: Option<f64>| Key::Num(v.filter(|v| v.is_finite()));
        match self {
            SortColumn::Provider => text(&e.provider),
            SortColumn::Tag => Key::Tag(&e.tag),
            SortColumn::Quant => text(&e.quantization),
            SortColumn::PriceIn => num(e.price_in_per_m),
            SortColumn::PriceOut => num(e.price_out_per_m),
            SortColumn::Up => some(e.uptime_30m),
            SortColumn::Fly => num(e.in_flight as f64),
            SortColumn::Done => num(e.done as f64),
            SortColumn::Errors => num(e.errors as f64),
            SortColumn::TokPerS => num(e.tok_per_s),
            SortColumn::Ttft => some(e.ttft_p50_ms.map(|t| t as f64)),
            SortColumn::Len => some(e.mean_output_tokens),
            SortColumn::Trunc => some(e.truncation_rate),
            SortColumn::Spent => num(e.spent.as_f64()),
        }
    }
}

/// A value to order by: text, or a figure that may be missing.
enum Key<'a> {
    Text(String),
    Tag(&'a str),
    Num(Option<f64>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortDir {
    Asc,
    Desc,
}

impl SortDir {
    pub fn flip(self) -> SortDir {
        match self {
            SortDir::Asc => SortDir::Desc,
            SortDir::Desc => SortDir::Asc,
        }
    }

    pub fn arrow(self) -> &'static str {
        match self {
            SortDir::Asc => "↑",
            SortDir::Desc => "↓",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub column: SortColumn,
    pub dir: SortDir,
}

impl Default for Sort {
    fn default() -> Self {
        Sort {
            column: SortColumn::PriceOut,
            dir: SortDir::Asc,
        }
    }
}

/// The endpoints in the order of `sort`: a missing figure after every present one, either
/// way; ties by the tag, so the order is stable between snapshots.
pub(crate) fn sorted_endpoints(s: &Snapshot, sort: Sort) -> Vec<&EndpointSnap> {
    let mut v: Vec<&EndpointSnap> = s.endpoints.iter().collect();
    let way = |o: Ordering| match sort.dir {
        SortDir::Asc => o,
        SortDir::Desc => o.reverse(),
    };
    v.sort_by(|a, b| {
        let o = match (sort.column.key(a), sort.column.key(b)) {
            (Key::Text(x), Key::Text(y)) => way(x.cmp(&y)),
            (Key::Tag(x), Key::Tag(y)) => way(x.cmp(y)),
            (Key::Num(Some(x)), Key::Num(Some(y))) => way(x.total_cmp(&y)),
            (Key::Num(Some(_)), Key::Num(None)) => Ordering::Less,
            (Key::Num(None), Key::Num(Some(_))) => Ordering::Greater,
            _ => Ordering::Equal,
        };
        // The output price's ties go by the input price, as the price is read.
        let o = match sort.column {
            SortColumn::PriceOut => o.then(way(a.price_in_per_m.total_cmp(&b.price_in_per_m))),
            _ => o,
        };
        o.then(a.tag.cmp(&b.tag))
    });
    v
}
