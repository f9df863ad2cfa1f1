//! What the TUI remembers between frames: the latest snapshot, the selection (by endpoint tag,
//! so it stays on the same row when the order changes), sort, focus, overlays and a transient
//! status message. Plain data; [`super::update`] changes it, the views read it.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::engine::control::{Command, ShutdownMode};
use crate::engine::snapshot::{EndpointSnap, EventLine, RunState, Snapshot};

use super::sort::{Sort, sorted_endpoints};
use super::theme::Theme;

/// The pane that arrows act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    Providers,
    Datasets,
}

/// A transient line in the footer: what a key did, or why it could not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub text: String,
    /// Snapshots left before it clears (the engine publishes ~5 a second).
    pub ttl: u8,
}

/// A key that would lower fidelity (`a`, or space on a row the policy excludes), held until
/// the operator confirms it: nothing is sent before.
#[derive(Clone, Debug, PartialEq)]
pub struct Confirm {
    /// The key that asked: pressed again (or `y`), it confirms; any other key cancels.
    pub key: char,
    /// The dialog's title.
    pub title: &'static str,
    /// What it opens, in words (`opens 3 endpoints of unknown quantization: ...`).
    pub opens: String,
    /// What is sent once confirmed.
    pub command: Command,
}

/// Snapshots a status message stays for (about three seconds).
pub(crate) const STATUS_TTL: u8 = 15;

/// The events a view keeps for its full-screen log: hours of a busy run (a few hundred bytes
/// each), beyond which the oldest go (and are counted as missed).
pub(crate) const HISTORY_CAP: usize = 20_000;

/// The run's events as this view has seen them: each snapshot carries only the last ones (a
/// screen's worth), the full-screen log shows them all. Events logged before this view began,
/// or between two snapshots past what one carries, are counted as `missed` (`harvest.log` in
/// the output directory has every one).
#[derive(Clone, Debug, Default)]
pub struct EventHistory {
    pub lines: VecDeque<EventLine>,
    pub missed: u64,
    /// The snapshot's `events_total` when last read.
    seen: u64,
}

impl EventHistory {
    /// Takes the events of `s` this view has not seen yet.
    pub fn read(&mut self, s: &Snapshot) {
        // A snapshot of an older run (or none yet) counts from zero again.
        let total = s.events_total.max(s.events.len() as u64);
        if total < self.seen {
            self.seen = 0;
        }
        let new = total - self.seen;
        let carried = (new as usize).min(s.events.len());
        self.missed += new - carried as u64;
        self.lines
            .extend(s.events[s.events.len() - carried..].iter().cloned());
        while self.lines.len() > HISTORY_CAP {
            self.lines.pop_front();
            self.missed += 1;
        }
        self.seen = total;
    }
}

/// The full-screen log, while open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogView {
    /// Rows scrolled back from the newest (0: the newest line is at the bottom).
    pub back: usize,
    /// Only the events that name this endpoint (its tag or provider), when set.
    pub only: Option<(String, String)>,
}

#[derive(Clone, Debug)]
pub struct UiState {
    pub snapshot: Arc<Snapshot>,
    pub theme: Theme,
    /// Selected endpoint, by tag.
    pub selected: Option<String>,
    /// Selected dataset, by name.
    pub selected_dataset: Option<String>,
    pub sort: Sort,
    pub focus: Pane,
    pub help: bool,
    pub quit_dialog: bool,
    /// A key that lowers fidelity, waiting for its confirmation.
    pub confirm: Option<Confirm>,
    /// The shutdown the operator asked for, once sent.
    pub shutdown: Option<ShutdownMode>,
    pub status: Option<Status>,
    /// Last known terminal size (columns, rows).
    pub size: (u16, u16),
    /// The engine's pid when this TUI is a viewer attached over the control socket (`q`
    /// then offers to detach, leaving the run going).
    pub attached: Option<u32>,
    /// Every event this view has seen, for the full-screen log.
    pub history: EventHistory,
    /// The full-screen log (`l`), while open.
    pub log: Option<LogView>,
    /// The providers table's filter (`/`), while set.
    pub filter: Option<Filter>,
}

/// The providers table's filter: only rows whose tag or provider holds `text`, in any case.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    /// Keys type into it, until Enter keeps it or Esc clears it.
    pub typing: bool,
}

impl Filter {
    /// Whether `e`'s row is shown.
    fn shows(&self, e: &EndpointSnap) -> bool {
        let needle = self.text.to_lowercase();
        e.tag.to_lowercase().contains(&needle) || e.provider.to_lowercase().contains(&needle)
    }
}

impl UiState {
    pub fn new(snapshot: Arc<Snapshot>, theme: Theme) -> Self {
        let mut s = UiState {
            snapshot,
            theme,
            selected: None,
            selected_dataset: None,
            sort: Sort::default(),
            focus: Pane::Providers,
            help: false,
            quit_dialog: false,
            confirm: None,
            shutdown: None,
            status: None,
            size: (0, 0),
            attached: None,
            history: EventHistory::default(),
            log: None,
            filter: None,
        };
        s.history.read(&s.snapshot.clone());
        s.fix_selection();
        s
    }

    /// The endpoints in table order, those the filter shows.
    pub fn endpoints(&self) -> Vec<&EndpointSnap> {
        let mut rows = sorted_endpoints(&self.snapshot, self.sort);
        if let Some(f) = &self.filter {
            rows.retain(|e| f.shows(e));
        }
        rows
    }

    /// Row of the selected endpoint in table order.
    pub fn selected_row(&self) -> Option<usize> {
        let tag = self.selected.as_deref()?;
        self.endpoints().iter().position(|e| e.tag == tag)
    }

    pub fn selected_dataset_row(&self) -> Option<usize> {
        let name = self.selected_dataset.as_deref()?;
        self.snapshot.datasets.iter().position(|d| d.name == name)
    }

    /// Keeps the selections on rows that exist: the same tag if it is still listed, else the
    /// first row.
    pub fn fix_selection(&mut self) {
        let keep = self
            .selected
            .as_deref()
            .is_some_and(|t| self.endpoints().iter().any(|e| e.tag == t));
        if !keep {
            self.selected = self.endpoints().first().map(|e| e.tag.clone());
        }
        let keep = self
            .selected_dataset
            .as_deref()
            .is_some_and(|n| self.snapshot.datasets.iter().any(|d| d.name == n));
        if !keep {
            self.selected_dataset = self.snapshot.datasets.first().map(|d| d.name.clone());
        }
    }

    pub fn set_status(&mut self, text: impl Into<String>) {
        self.status = Some(Status {
            text: text.into(),
            ttl: STATUS_TTL,
        });
    }

    /// Whether the run is over (nothing left to steer).
    pub fn finished(&self) -> bool {
        matches!(self.snapshot.state, RunState::Stopped | RunState::Done)
    }
}

/// Whether the operator and the policy let the endpoint serve, health aside: an open breaker
/// or a 429 wait keeps the mark `[x]` (the why-off column says it is resting). The engine
/// decides it; space flips exactly this.
pub(crate) fn included(e: &EndpointSnap) -> bool {
    e.included
}
