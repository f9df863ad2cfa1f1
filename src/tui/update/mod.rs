//! The TUI's reducer: a message (key, snapshot, resize) changes the [`UiState`] and returns
//! effects for the driver to run. Pure: no I/O, no clock, no channels.

use std::sync::Arc;

use crossterm::event::KeyEvent;

use crate::domain::group_thousands;
use crate::engine::control::{Command, ShutdownMode};
use crate::engine::snapshot::{RunState, Snapshot};

use super::keymap::{self, Action, Mode};
use super::state::{Pane, UiState};

mod fidelity;
mod log;

/// What happened.
#[derive(Clone, Debug)]
pub enum Msg {
    Key(KeyEvent),
    Snapshot(Arc<Snapshot>),
    Resize(u16, u16),
}

/// What the driver must do.
#[derive(Clone, Debug, PartialEq)]
pub enum UiEffect {
    /// Send a command to the engine.
    Send(Command),
    /// Leave the TUI.
    Quit,
}

/// Whether the terminal is below the smallest screen the TUI draws (a size not known yet,
/// before the first resize, is not).
fn too_small((w, h): (u16, u16)) -> bool {
    (w, h) != (0, 0) && (w < super::view::MIN_WIDTH || h < super::view::MIN_HEIGHT)
}

/// The concurrency step of `+` and `-`: 10% of the limit, at least 1.
pub fn concurrency_step(limit: u32) -> u32 {
    (limit / 10).max(1)
}

pub fn update(state: &mut UiState, msg: Msg) -> Vec<UiEffect> {
    match msg {
        Msg::Snapshot(s) => {
            state.history.read(&s);
            state.snapshot = s;
            state.fix_selection();
            if state.finished() {
                // Nothing to steer any more: a key waiting for its confirmation is dropped.
                state.confirm = None;
            }
            if let Some(st) = &mut state.status {
                st.ttl = st.ttl.saturating_sub(1);
                if st.ttl == 0 {
                    state.status = None;
                }
            }
            if state.shutdown.is_some() && state.finished() {
                return vec![UiEffect::Quit];
            }
            Vec::new()
        }
        Msg::Resize(w, h) => {
            state.size = (w, h);
            Vec::new()
        }
        Msg::Key(k) => {
            let mode = match &state.confirm {
                _ if state.quit_dialog => Mode::QuitDialog,
                Some(c) => Mode::Confirm(c.key),
                None if state.help => Mode::Help,
                None if too_small(state.size) => Mode::TooSmall,
                None if state.log.is_some() => Mode::Log,
                None if state.filter.as_ref().is_some_and(|f| f.typing) => Mode::Filter,
                None => Mode::Normal,
            };
            match keymap::action(k, mode) {
                Some(a) => act(state, a),
                None => Vec::new(),
            }
        }
    }
}

fn act(state: &mut UiState, a: Action) -> Vec<UiEffect> {
    if state.log.is_some() {
        return log::act(state, a);
    }
    match a {
        Action::Log => log::open(state),
        Action::OnlySelected => Vec::new(),
        Action::Filter | Action::Type(_) | Action::Erase | Action::KeepFilter => filter(state, a),
        Action::PageUp => move_by(state, -table_page(state)),
        Action::PageDown => move_by(state, table_page(state)),
        Action::Up => move_by(state, -1),
        Action::Down => move_by(state, 1),
        Action::First => move_by(state, i64::MIN),
        Action::Last => move_by(state, i64::MAX),
        Action::SwitchPane => {
            state.focus = match state.focus {
                Pane::Providers => Pane::Datasets,
                Pane::Datasets => Pane::Providers,
            };
            Vec::new()
        }
        Action::SortNext | Action::SortReverse | Action::SortLeft | Action::SortRight => {
            let column = match a {
                Action::SortNext => Some(state.sort.column.next()),
                Action::SortLeft => Some(state.sort.column.step(-1)),
                Action::SortRight => Some(state.sort.column.step(1)),
                _ => None,
            };
            match column {
                Some(c) => {
                    state.sort.column = c;
                    state.sort.dir = c.natural();
                }
                None => state.sort.dir = state.sort.dir.flip(),
            }
            state.set_status(format!(
                "sorted by {} {}",
                state.sort.column.label(),
                state.sort.dir.arrow()
            ));
            Vec::new()
        }
        Action::Help => {
            state.help = !state.help;
            Vec::new()
        }
        Action::Back => {
            if state.quit_dialog {
                state.quit_dialog = false;
            } else if state.help {
                state.help = false;
            } else if state.filter.take().is_some() {
                state.fix_selection();
            }
            Vec::new()
        }
        Action::Toggle => fidelity::toggle(state),
        Action::PresetFaithful => fidelity::faithful(state),
        Action::PresetAny => fidelity::ask_any(state),
        Action::Confirm => fidelity::confirm(state),
        Action::Cancel => fidelity::cancel(state),
        Action::PauseResume => pause_resume(state),
        Action::MoreConcurrency => concurrency(state, true),
        Action::LessConcurrency => concurrency(state, false),
        Action::Quit | Action::Interrupt => {
            // Ctrl-C while a key waits for its confirmation: that is dropped, the dialog opens.
            fidelity::cancel(state);
            quit(state, a == Action::Interrupt)
        }
        Action::Drain => shutdown(state, ShutdownMode::Drain),
        Action::StopNow => shutdown(state, ShutdownMode::Now),
        Action::Detach => {
            if state.attached.is_some() {
                state.quit_dialog = false;
                vec![UiEffect::Quit]
            } else {
                Vec::new()
            }
        }
    }
}

/// Pauses a running run, resumes a paused one.
fn pause_resume(state: &mut UiState) -> Vec<UiEffect> {
    match state.snapshot.state {
        RunState::Running | RunState::Starting => {
            state.set_status("pausing: no new requests; in-flight ones finish");
            vec![UiEffect::Send(Command::Pause)]
        }
        RunState::Paused => {
            state.set_status("resuming");
            vec![UiEffect::Send(Command::Resume)]
        }
        other => {
            state.set_status(format!(
                "{}: nothing to pause",
                other.label().to_lowercase()
            ));
            Vec::new()
        }
    }
}

/// One step more or fewer concurrent requests, never below 1.
fn concurrency(state: &mut UiState, more: bool) -> Vec<UiEffect> {
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    let limit = state.snapshot.concurrency_limit;
    let step = concurrency_step(limit);
    let delta = if more {
        i64::from(step)
    } else {
        -i64::from(step.min(limit.saturating_sub(1)))
    };
    if delta == 0 {
        state.set_status("concurrency is at its minimum (1)");
        return Vec::new();
    }
    let target = (i64::from(limit) + delta).max(1) as u64;
    state.set_status(format!(
        "concurrency {} -> {}",
        group_thousands(u64::from(limit)),
        group_thousands(target)
    ));
    vec![UiEffect::Send(Command::AdjustConcurrency(delta))]
}

/// `q` or Ctrl-C: the quit dialog, or, with it open, Ctrl-C again stops now and `q` closes it.
/// A finished run just quits.
fn quit(state: &mut UiState, interrupt: bool) -> Vec<UiEffect> {
    if state.quit_dialog {
        // Ctrl-C again: stop now, as a second interrupt does headless.
        return if interrupt {
            shutdown(state, ShutdownMode::Now)
        } else {
            state.quit_dialog = false;
            Vec::new()
        };
    }
    if state.finished() {
        return vec![UiEffect::Quit];
    }
    state.help = false;
    state.quit_dialog = true;
    Vec::new()
}

fn shutdown(state: &mut UiState, mode: ShutdownMode) -> Vec<UiEffect> {
    state.quit_dialog = false;
    if state.finished() {
        return vec![UiEffect::Quit];
    }
    if state.shutdown == Some(mode) {
        return Vec::new();
    }
    state.shutdown = Some(mode);
    let in_flight = group_thousands(state.snapshot.in_flight);
    state.set_status(match mode {
        ShutdownMode::Drain => {
            format!("draining: {in_flight} in flight finish, then save and exit (q, n: stop now)")
        }
        ShutdownMode::Now => format!("stopping now: cancelling {in_flight} in flight, saving"),
    });
    vec![UiEffect::Send(Command::Shutdown(mode))]
}

/// Moves the selection of the focused pane by `delta` rows, clamped to the table.
/// The providers' filter: `/` starts typing it (where it was), characters and Backspace edit
/// it, Enter keeps it (an empty one is none). The selection stays on a shown row.
fn filter(state: &mut UiState, a: Action) -> Vec<UiEffect> {
    let f = state.filter.get_or_insert_with(Default::default);
    match a {
        Action::Filter => {
            f.typing = true;
            state.focus = Pane::Providers;
        }
        Action::Type(c) => f.text.push(c),
        Action::Erase => {
            f.text.pop();
        }
        Action::KeepFilter => {
            f.typing = false;
            if f.text.is_empty() {
                state.filter = None;
            }
        }
        _ => {}
    }
    state.fix_selection();
    Vec::new()
}

/// Rows a page moves in the focused table: its rows on screen (its height less its borders
/// and header), at least one.
fn table_page(state: &UiState) -> i64 {
    let (w, h) = state.size;
    let plan = super::view::plan(ratatui::layout::Rect::new(0, 0, w, h), &state.snapshot);
    let table = match state.focus {
        Pane::Providers => plan.providers,
        Pane::Datasets => plan.datasets,
    };
    i64::from(table.height.saturating_sub(3)).max(1)
}

fn move_by(state: &mut UiState, delta: i64) -> Vec<UiEffect> {
    let clamp = |cur: Option<usize>, len: usize| -> Option<usize> {
        if len == 0 {
            return None;
        }
        let cur = cur.unwrap_or(0) as i64;
        Some(cur.saturating_add(delta).clamp(0, len as i64 - 1) as usize)
    };
    match state.focus {
        Pane::Providers => {
            let order = state.endpoints();
            let row = clamp(state.selected_row(), order.len());
            state.selected = row.map(|r| order[r].tag.clone());
        }
        Pane::Datasets => {
            let ds = &state.snapshot.datasets;
            let row = clamp(state.selected_dataset_row(), ds.len());
            state.selected_dataset = row.map(|r| ds[r].name.clone());
        }
    }
    Vec::new()
}

/// Whether a new snapshot changes what the screen shows. The engine publishes one every tick;
/// in an idle run they differ only in digits the screen does not show (the clock's fraction of
/// a second, rates decaying in their fourth digit), and those are not worth a frame. Numbers
/// are compared at the clock's second and three significant digits, the rest exactly (still
/// far cheaper than rendering).
pub fn shows_change(old: &Snapshot, new: &Snapshot) -> bool {
    as_shown(old) != as_shown(new)
}

fn sig3(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let scale = 10f64.powi(2 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

/// The snapshot with its numbers at the precision the screen shows.
fn as_shown(s: &Snapshot) -> Snapshot {
    let mut s = s.clone();
    s.elapsed_s = s.elapsed_s.floor();
    s.loop_lag_ms = crate::tui::view::lag_shown(s.loop_lag_ms);
    // The run's current rates are drawn from `history` (one point every few seconds), not
    // from these, which decay a little at every tick of an idle run.
    s.tok_per_s = 0.0;
    s.usd_per_min = 0.0;
    s.eta_s = s.eta_s.map(f64::floor);
    for d in &mut s.datasets {
        d.tok_per_s = sig3(d.tok_per_s);
        d.eta_s = d.eta_s.map(f64::floor);
    }
    for e in &mut s.endpoints {
        e.tok_per_s = sig3(e.tok_per_s);
        e.mean_output_tokens = e.mean_output_tokens.map(sig3);
        e.truncation_rate = e.truncation_rate.map(sig3);
        e.uptime_30m = e.uptime_30m.map(sig3);
    }
    s
}

#[cfg(test)]
mod fidelity_tests;
#[cfg(test)]
mod sort_tests;
#[cfg(test)]
mod tests;
