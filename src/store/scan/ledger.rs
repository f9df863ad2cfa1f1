//! The spend ledger as the scan reads it (`spend.jsonl`, by the rule of the module above):
//! what it has booked, by id and by kind; the attempts left open (never started, started and
//! never closed, closed and not confirmed); the rebuilt lines and their confirmations; the
//! key's last settled checkpoint; the completed streams the wire learners start from.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::domain::Usd;

use super::super::output::{SpendEntry, SpendKind, ledger_path};
use super::{FileScan, REBUILT, ScanError, read_file};

/// What the spend ledger holds, classified once for everyone.
#[derive(Debug, Default)]
pub struct LedgerScan {
    pub file: FileScan,
    pub total: Usd,
    pub entries: u64,
    /// Prompt ids with a `complete` line.
    pub completes: HashSet<String>,
    /// `started` attempts with no closing line: in flight, or what a crash left open, with a
    /// generation id to look up.
    pub open: Vec<SpendEntry>,
    /// `dispatched` attempts with neither a `started` nor a closing line: in flight before any
    /// answer, or left by a crash with nothing to look up.
    pub unknown: Vec<SpendEntry>,
    /// The last quiet key checkpoint and the estimated bookings since: what a key true-up
    /// starts from.
    pub key_base: Option<KeyBase>,
    /// `complete` lines that `--repair` rebuilt from the outputs (attempt
    /// [`REBUILT`]) and that no look-up has confirmed yet: a run asks
    /// `GET /generation` for each, beside its new work.
    pub rebuilt: Vec<SpendEntry>,
    /// Every generation a rebuilt line booked, confirmed or not: a rebuilt line does not close
    /// the attempt that streamed it, which may still look open.
    pub rebuilt_generations: HashSet<String>,
    /// Streams a run closed (`cancelled` lines, booked at its estimate) that no look-up has
    /// confirmed yet (no `adjustment` line of their attempt): the end of that run did not
    /// hear from `GET /generation` in time, and where closing does not stop the bill the
    /// provider may have gone on generating. The next start holds money for them and asks
    /// again; each carries its `dispatched` line's expected cost.
    pub closed_unconfirmed: Vec<SpendEntry>,
    /// The dollars of the lines naming each endpoint tag, and each dataset: where the money
    /// went, so that a run's tables start from what its ledger holds.
    pub by_endpoint: HashMap<String, Usd>,
    pub by_dataset: HashMap<String, Usd>,
    /// What the bills of the streams closed at each endpoint tag said of their closes (the
    /// `close` of `adjustment` lines): what a new start carries.
    pub closes: HashMap<String, crate::close_reading::ClosesSeen>,
    /// What the latest completed streams at each endpoint tag carried (the `streamed` of
    /// `complete` lines), oldest first, at most [`STREAMS_KEPT`] a tag: what a new start learns
    /// its wire from before its own streams complete.
    pub streamed: HashMap<String, std::collections::VecDeque<crate::store::output::Streamed>>,
}

/// Completed streams kept per endpoint by the scan: as many as the run's learners of the wire
/// keep (`engine::core::wire_rate`).
pub const STREAMS_KEPT: usize = 32;

/// The base of a key true-up: the last moment key and ledger were both known to be settled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeyBase {
    pub checkpoint: crate::store::output::KeyCheckpoint,
    /// `unknown` bookings (crash estimates) since that checkpoint.
    pub estimated: Usd,
    pub estimated_lines: u64,
}

impl LedgerScan {
    /// Attempts not closed (open or unknown).
    pub fn open_attempts(&self) -> u64 {
        (self.open.len() + self.unknown.len()) as u64
    }
}

/// Reads the spend ledger; `each` sees every entry.
pub fn scan_ledger(dir: &Path, mut each: impl FnMut(&SpendEntry)) -> Result<LedgerScan, ScanError> {
    let mut scan = LedgerScan::default();
    let mut dispatched: HashMap<String, SpendEntry> = HashMap::new();
    let mut started: HashMap<String, SpendEntry> = HashMap::new();
    let mut closed: HashSet<String> = HashSet::new();
    let mut rebuilt: HashMap<String, SpendEntry> = HashMap::new();
    let mut confirmed: HashSet<String> = HashSet::new();
    let mut unconfirmed: HashMap<String, SpendEntry> = HashMap::new();
    scan.file = read_file(&ledger_path(dir), |e: SpendEntry| {
        each(&e);
        scan.total += e.usd;
        scan.entries += 1;
        if e.usd != Usd::ZERO {
            if let Some(t) = &e.endpoint {
                *scan.by_endpoint.entry(t.clone()).or_default() += e.usd;
            }
            *scan.by_dataset.entry(e.dataset.clone()).or_default() += e.usd;
        }
        match (e.kind, e.checkpoint) {
            (SpendKind::KeyUsage, Some(c)) if c.quiet => {
                scan.key_base = Some(KeyBase {
                    checkpoint: c,
                    estimated: Usd::ZERO,
                    estimated_lines: 0,
                });
            }
            (SpendKind::Unknown, _) => {
                if let Some(b) = scan.key_base.as_mut() {
                    b.estimated += e.usd;
                    b.estimated_lines += 1;
                }
            }
            _ => {}
        }
        if e.kind == SpendKind::Complete {
            scan.completes.insert(e.id.clone());
        }
        if let (SpendKind::Complete, Some(w), Some(t)) = (e.kind, e.streamed, &e.endpoint) {
            let kept = scan.streamed.entry(t.clone()).or_default();
            if kept.len() == STREAMS_KEPT {
                kept.pop_front();
            }
            kept.push_back(w);
        }
        if let (SpendKind::Adjustment, Some(c), Some(t)) = (e.kind, e.close, &e.endpoint) {
            (scan.closes.entry(t.clone()).or_default()).add(c, &e.at, e.found_after_ms);
        }
        if e.attempt.as_deref() == Some(REBUILT) {
            if let (SpendKind::Complete, Some(g)) = (e.kind, &e.generation_id) {
                scan.rebuilt_generations.insert(g.clone());
            }
            match e.kind {
                SpendKind::Complete if e.generation_id.is_some() => {
                    rebuilt.insert(e.id.clone(), e.clone());
                }
                SpendKind::Adjustment => {
                    confirmed.insert(e.id.clone());
                }
                _ => {}
            }
        }
        // Only attempts not yet closed are kept: a line's attempt is dispatched, then started,
        // then closed, in that order (one writer), so a close drops what was kept for it.
        // Keeping every attempt's lines until the end took ~1 KB an attempt (1.9 GB for the
        // end-of-run report of a million requests).
        let Some(a) = e.attempt.clone() else { return };
        if e.kind == SpendKind::Adjustment {
            unconfirmed.remove(&a);
        }
        match e.kind {
            SpendKind::Dispatched => {
                if closed.contains(&a) {
                    return;
                }
                match started.get_mut(&a) {
                    // Out of order: the start came first; keep what the request was expected
                    // to cost.
                    Some(s) => {
                        s.expected_usd = s.expected_usd.or(e.expected_usd);
                        s.worst_usd = s.worst_usd.or(e.worst_usd);
                    }
                    None => {
                        dispatched.insert(a, e);
                    }
                }
            }
            SpendKind::Started => {
                if closed.contains(&a) {
                    return;
                }
                let mut e = e;
                if let Some(d) = dispatched.remove(&a) {
                    e.expected_usd = e.expected_usd.or(d.expected_usd);
                    e.worst_usd = e.worst_usd.or(d.worst_usd);
                }
                started.insert(a, e);
            }
            SpendKind::Complete
            | SpendKind::Cancelled
            | SpendKind::Failed
            | SpendKind::Recovered
            | SpendKind::Unknown => {
                let open = (dispatched.remove(&a).map(|d| (d.expected_usd, d.worst_usd)))
                    .or(started.remove(&a).map(|s| (s.expected_usd, s.worst_usd)));
                let was_open = open.is_some();
                if e.kind == SpendKind::Cancelled && e.estimated && e.generation_id.is_some() {
                    let mut e = e;
                    let (expected, worst) = open.unwrap_or_default();
                    e.expected_usd = e.expected_usd.or(expected);
                    e.worst_usd = e.worst_usd.or(worst);
                    unconfirmed.insert(a.clone(), e);
                }
                // A close with nothing open before it (out of order, or a second close):
                // remembered, so that a later dispatched or started line stays closed.
                if !was_open {
                    closed.insert(a);
                }
            }
            // A closed stream still unknown when its run stopped asking, reckoned again:
            // what a look-up may still add is read from the last reckoning.
            SpendKind::Reckoned => {
                if let (Some(u), Some(x)) = (unconfirmed.get_mut(&a), e.expected_usd) {
                    u.expected_usd = Some(x);
                }
            }
            SpendKind::Adjustment | SpendKind::Other | SpendKind::KeyUsage => {}
        }
    })?;
    scan.rebuilt = rebuilt
        .into_iter()
        .filter(|(id, _)| !confirmed.contains(id))
        .map(|(_, e)| e)
        .collect();
    // What is left is open: dispatched and never started (unknown to us whether the API
    // saw it), or started and never closed (the API has it; its cost carries the expected
    // cost of its `dispatched` line, booked when the API never learns of it).
    scan.unknown = dispatched.into_values().collect();
    scan.open = started.into_values().collect();
    scan.closed_unconfirmed = unconfirmed.into_values().collect();
    Ok(scan)
}
