//! The TUI's reducer: a message (key, snapshot, resize) changes the [`UiState`] and returns
//! effects for the driver to run. Pure: no I/O, no clock, no channels.

use std::sync::Arc;

use crossterm::event::KeyEvent;

use crate::domain::group_thousands;
use crate::engine::control::{Command, ShutdownMode};
use crate::engine::snapshot::{RunState, Snapshot};
use crate::policy::PolicyMode;

use super::keymap::{self, Action, Mode};
use super::state::{Pane, UiState, included};

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

/// The concurrency step of `+` and `-`: 10% of the limit, at least 1.
pub fn concurrency_step(limit: u32) -> u32 {
    (limit / 10).max(1)
}

pub fn update(state: &mut UiState, msg: Msg) -> Vec<UiEffect> {
    match msg {
        Msg::Snapshot(s) => {
            state.snapshot = s;
            state.fix_selection();
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
            let mode = if state.quit_dialog {
                Mode::QuitDialog
            } else {
                Mode::Normal
            };
            match keymap::action(k, mode) {
                Some(a) => act(state, a),
                None => Vec::new(),
            }
        }
    }
}

fn act(state: &mut UiState, a: Action) -> Vec<UiEffect> {
    match a {
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
        Action::SortNext => {
            let c = state.sort.column.next();
            state.sort.column = c;
            state.sort.dir = c.natural();
            state.set_status(format!(
                "sorted by {} {}",
                c.label(),
                state.sort.dir.arrow()
            ));
            Vec::new()
        }
        Action::SortReverse => {
            state.sort.dir = state.sort.dir.flip();
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
            } else {
                state.help = false;
            }
            Vec::new()
        }
        Action::Toggle => toggle(state),
        Action::PresetFaithful | Action::PresetAny => {
            if state.finished() {
                state.set_status("the run is over");
                return Vec::new();
            }
            let (mode, text) = if a == Action::PresetFaithful {
                (
                    PolicyMode::Faithful,
                    "policy: faithful (native precision only); your choices cleared",
                )
            } else {
                (
                    PolicyMode::Any,
                    "policy: any quantization; your choices cleared",
                )
            };
            state.set_status(text);
            vec![UiEffect::Send(Command::Preset(mode))]
        }
        Action::PauseResume => match state.snapshot.state {
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
        },
        Action::MoreConcurrency | Action::LessConcurrency => {
            if state.finished() {
                state.set_status("the run is over");
                return Vec::new();
            }
            let limit = state.snapshot.concurrency_limit;
            let step = concurrency_step(limit);
            let delta = if a == Action::MoreConcurrency {
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
        Action::Quit | Action::Interrupt => {
            if state.quit_dialog {
                // Ctrl-C again: stop now, as a second interrupt does headless.
                return if a == Action::Interrupt {
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

fn toggle(state: &mut UiState) -> Vec<UiEffect> {
    if state.focus != Pane::Providers {
        state.set_status("space includes/excludes providers: tab to the providers pane");
        return Vec::new();
    }
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    let Some(e) = state
        .selected
        .as_deref()
        .and_then(|t| state.snapshot.endpoints.iter().find(|e| e.tag == t))
    else {
        return Vec::new();
    };
    let tag = e.tag.clone();
    let verb = if included(e) {
        "excluding"
    } else {
        "including"
    };
    state.set_status(format!("{verb} {tag} (from the next request)"));
    vec![UiEffect::Send(Command::ToggleEndpoint(tag))]
}

/// Moves the selection of the focused pane by `delta` rows, clamped to the table.
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
mod tests {
    use crossterm::event::{KeyCode, KeyModifiers};

    use super::super::state::{STATUS_TTL, SortColumn, SortDir};
    use super::super::testkit::{kimi_snapshot, state_with};
    use super::*;

    fn key(c: char) -> Msg {
        Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
    }
    fn code(c: KeyCode) -> Msg {
        Msg::Key(KeyEvent::new(c, KeyModifiers::NONE))
    }
    fn ctrl_c() -> Msg {
        Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL))
    }
    fn send(c: Command) -> Vec<UiEffect> {
        vec![UiEffect::Send(c)]
    }
    fn with_state(f: impl FnOnce(&mut Snapshot)) -> UiState {
        let mut s = kimi_snapshot();
        f(&mut s);
        state_with(s)
    }
    fn order(st: &UiState) -> Vec<String> {
        st.endpoints().iter().map(|e| e.tag.clone()).collect()
    }

    /// By $/M out, then $/M in, then tag.
    const BY_PRICE: [&str; 11] = [
        "chutes/int4",
        "deepinfra",
        "siliconflow/int4",
        "atlas-cloud/int4",
        "baseten/fp4",
        "parasail/int4",
        "together",
        "novita",
        "fireworks",
        "moonshotai/int4",
        "venice",
    ];

    #[test]
    fn default_order_is_cheapest_output_first() {
        let st = state_with(kimi_snapshot());
        assert_eq!(order(&st), BY_PRICE);
        assert_eq!(st.selected.as_deref(), Some("chutes/int4"));
    }

    #[test]
    fn moves_clamp_at_both_ends() {
        let mut st = state_with(kimi_snapshot());
        let cases: [(Msg, &str); 10] = [
            (key('k'), "chutes/int4"),
            (code(KeyCode::Up), "chutes/int4"),
            (key('j'), "deepinfra"),
            (code(KeyCode::Down), "siliconflow/int4"),
            (key('k'), "deepinfra"),
            (key('G'), "venice"),
            (key('j'), "venice"),
            (code(KeyCode::Down), "venice"),
            (code(KeyCode::Up), "moonshotai/int4"),
            (code(KeyCode::Home), "chutes/int4"),
        ];
        for (i, (msg, want)) in cases.into_iter().enumerate() {
            assert_eq!(update(&mut st, msg), vec![], "case {i}");
            assert_eq!(st.selected.as_deref(), Some(want), "case {i}");
        }
    }

    #[test]
    fn space_toggles_the_endpoint_of_the_selected_row() {
        let mut st = state_with(kimi_snapshot());
        for (row, tag) in BY_PRICE.iter().enumerate() {
            update(&mut st, key('g'));
            for _ in 0..row {
                update(&mut st, key('j'));
            }
            assert_eq!(
                update(&mut st, key(' ')),
                send(Command::ToggleEndpoint(tag.to_string())),
                "row {row}"
            );
        }
        // The status line says which way it goes.
        update(&mut st, key('g'));
        update(&mut st, key(' '));
        assert_eq!(
            st.status.as_ref().map(|s| s.text.as_str()),
            Some("excluding chutes/int4 (from the next request)")
        );
        update(&mut st, key('G'));
        update(&mut st, key(' '));
        assert_eq!(
            st.status.as_ref().map(|s| s.text.as_str()),
            Some("including venice (from the next request)")
        );
    }

    #[test]
    fn s_cycles_the_sort_column_and_s_shift_reverses() {
        let mut st = state_with(kimi_snapshot());
        let cycle = [
            (SortColumn::Provider, SortDir::Asc),
            (SortColumn::TokPerS, SortDir::Desc),
            (SortColumn::Spent, SortDir::Desc),
            (SortColumn::Errors, SortDir::Desc),
            (SortColumn::Done, SortDir::Desc),
            (SortColumn::PriceOut, SortDir::Asc),
        ];
        for (col, dir) in cycle {
            assert_eq!(update(&mut st, key('s')), vec![]);
            assert_eq!((st.sort.column, st.sort.dir), (col, dir));
        }
        update(&mut st, key('S'));
        assert_eq!(st.sort.dir, SortDir::Desc);
        assert_eq!(order(&st)[0], "venice");
    }

    #[test]
    fn selection_follows_its_tag_across_re_sorts_and_snapshots() {
        let mut st = state_with(kimi_snapshot());
        for _ in 0..5 {
            update(&mut st, key('j'));
        }
        assert_eq!(st.selected.as_deref(), Some("parasail/int4"));
        assert_eq!(st.selected_row(), Some(5));
        update(&mut st, key('s')); // provider A-Z
        assert_eq!(st.selected.as_deref(), Some("parasail/int4"));
        assert_eq!(st.selected_row(), Some(7));
        update(&mut st, key('j'));
        assert_eq!(st.selected.as_deref(), Some("siliconflow/int4"));
        // By tok/s, then a snapshot in which SiliconFlow becomes the slowest: same endpoint.
        update(&mut st, key('s'));
        assert_eq!(st.selected_row(), Some(1));
        let mut s = kimi_snapshot();
        for e in &mut s.endpoints {
            if e.tag == "siliconflow/int4" {
                e.tok_per_s = 0.0;
            }
        }
        update(&mut st, Msg::Snapshot(Arc::new(s.clone())));
        assert_eq!(st.selected.as_deref(), Some("siliconflow/int4"));
        assert_ne!(st.selected_row(), Some(1));
        // An endpoint that disappears hands the selection to the first row.
        s.endpoints.retain(|e| e.tag != "siliconflow/int4");
        update(&mut st, Msg::Snapshot(Arc::new(s)));
        assert_eq!(st.selected.as_deref(), Some("chutes/int4"));
    }

    #[test]
    fn p_pauses_a_running_run_and_resumes_a_paused_one() {
        let cases = [
            (RunState::Running, send(Command::Pause)),
            (RunState::Starting, send(Command::Pause)),
            (RunState::Paused, send(Command::Resume)),
            (RunState::Draining, vec![]),
            (RunState::Done, vec![]),
        ];
        for (run, want) in cases {
            let mut st = with_state(|s| s.state = run);
            assert_eq!(update(&mut st, key('p')), want, "{run:?}");
            assert!(st.status.is_some(), "{run:?}: the key says what it did");
        }
    }

    #[test]
    fn plus_and_minus_step_by_a_tenth_of_the_limit() {
        let cases = [
            (2_000, '+', send(Command::AdjustConcurrency(200))),
            (2_000, '-', send(Command::AdjustConcurrency(-200))),
            (2_000, '=', send(Command::AdjustConcurrency(200))),
            (64, '+', send(Command::AdjustConcurrency(6))),
            (5, '+', send(Command::AdjustConcurrency(1))),
            (5, '-', send(Command::AdjustConcurrency(-1))),
            (1, '+', send(Command::AdjustConcurrency(1))),
            (1, '-', vec![]),
        ];
        for (limit, k, want) in cases {
            let mut st = with_state(|s| s.concurrency_limit = limit);
            assert_eq!(update(&mut st, key(k)), want, "{k} at {limit}");
        }
        assert_eq!(concurrency_step(15), 1);
    }

    #[test]
    fn presets() {
        let mut st = state_with(kimi_snapshot());
        assert_eq!(
            update(&mut st, key('f')),
            send(Command::Preset(PolicyMode::Faithful))
        );
        assert_eq!(
            update(&mut st, key('a')),
            send(Command::Preset(PolicyMode::Any))
        );
    }

    #[test]
    fn quit_dialog_drain_stop_now_and_cancel() {
        let drain = send(Command::Shutdown(ShutdownMode::Drain));
        let now = send(Command::Shutdown(ShutdownMode::Now));
        // (keys, effects of the last key, dialog open after, shutdown asked)
        type Case = (Vec<Msg>, Vec<UiEffect>, bool, Option<ShutdownMode>);
        let cases: Vec<Case> = vec![
            (vec![key('q')], vec![], true, None),
            (
                vec![key('q'), key('d')],
                drain.clone(),
                false,
                Some(ShutdownMode::Drain),
            ),
            (
                vec![key('q'), key('n')],
                now.clone(),
                false,
                Some(ShutdownMode::Now),
            ),
            (vec![key('q'), code(KeyCode::Esc)], vec![], false, None),
            (vec![key('q'), key('q')], vec![], false, None),
            // The dialog swallows other keys.
            (vec![key('q'), key(' ')], vec![], true, None),
            (vec![key('q'), key('p')], vec![], true, None),
            (vec![ctrl_c()], vec![], true, None),
            // A second Ctrl-C stops now, as a second signal does headless.
            (
                vec![ctrl_c(), ctrl_c()],
                now.clone(),
                false,
                Some(ShutdownMode::Now),
            ),
            // Draining, then stop now after all.
            (
                vec![key('q'), key('d'), key('q'), key('n')],
                now,
                false,
                Some(ShutdownMode::Now),
            ),
            // d outside the dialog does nothing.
            (vec![key('d')], vec![], false, None),
        ];
        for (i, (keys, want, open, asked)) in cases.into_iter().enumerate() {
            let mut st = state_with(kimi_snapshot());
            let mut last = vec![];
            for k in keys {
                last = update(&mut st, k);
            }
            assert_eq!(last, want, "case {i}");
            assert_eq!(st.quit_dialog, open, "case {i}");
            assert_eq!(st.shutdown, asked, "case {i}");
        }
    }

    #[test]
    fn after_a_shutdown_it_quits_once_the_run_has_stopped() {
        let mut st = state_with(kimi_snapshot());
        update(&mut st, key('q'));
        update(&mut st, key('d'));
        let mut s = kimi_snapshot();
        s.state = RunState::Draining;
        assert_eq!(update(&mut st, Msg::Snapshot(Arc::new(s.clone()))), vec![]);
        s.state = RunState::Stopped;
        assert_eq!(
            update(&mut st, Msg::Snapshot(Arc::new(s))),
            vec![UiEffect::Quit]
        );
        // A run that finishes on its own stays on screen until q.
        let mut st = state_with(kimi_snapshot());
        let mut s = kimi_snapshot();
        s.state = RunState::Done;
        assert_eq!(update(&mut st, Msg::Snapshot(Arc::new(s))), vec![]);
        assert_eq!(update(&mut st, key('q')), vec![UiEffect::Quit]);
    }

    #[test]
    fn help_toggles() {
        let mut st = state_with(kimi_snapshot());
        let cases = [
            (key('?'), true),
            (key('?'), false),
            (key('?'), true),
            (code(KeyCode::Esc), false),
        ];
        for (msg, open) in cases {
            assert_eq!(update(&mut st, msg), vec![]);
            assert_eq!(st.help, open);
        }
        // Keys act at once with help open.
        update(&mut st, key('?'));
        assert_eq!(update(&mut st, key('p')), send(Command::Pause));
    }

    #[test]
    fn tab_moves_the_arrows_to_the_datasets() {
        let mut st = state_with(kimi_snapshot());
        assert_eq!(st.selected_dataset.as_deref(), Some("B3"));
        update(&mut st, code(KeyCode::Tab));
        assert_eq!(st.focus, Pane::Datasets);
        update(&mut st, key('j'));
        update(&mut st, key('j'));
        update(&mut st, key('j'));
        assert_eq!(st.selected_dataset.as_deref(), Some("B5"));
        assert_eq!(st.selected.as_deref(), Some("chutes/int4"));
        // Space is for providers only.
        assert_eq!(update(&mut st, key(' ')), vec![]);
        update(&mut st, code(KeyCode::BackTab));
        assert_eq!(st.focus, Pane::Providers);
    }

    #[test]
    fn status_messages_fade_after_some_snapshots() {
        let mut st = state_with(kimi_snapshot());
        update(&mut st, key('s'));
        assert!(st.status.is_some());
        for _ in 0..STATUS_TTL {
            update(&mut st, Msg::Snapshot(Arc::new(kimi_snapshot())));
        }
        assert_eq!(st.status, None);
        assert_eq!(update(&mut st, Msg::Resize(100, 30)), vec![]);
        assert_eq!(st.size, (100, 30));
    }

    #[test]
    fn only_snapshots_that_change_the_screen_draw_a_frame() {
        let base = crate::tui::testkit::kimi_snapshot();
        // Two ticks of an idle run: the clock's fraction of a second, the loop lag's jitter
        // and a rate's fourth digit differ; nothing the screen shows does.
        let mut a = base.clone();
        a.elapsed_s = base.elapsed_s.floor() + 0.1;
        a.loop_lag_ms = 1.2;
        a.endpoints[0].tok_per_s = 1234.1;
        let mut b = base.clone();
        b.elapsed_s = base.elapsed_s.floor() + 0.4;
        b.loop_lag_ms = 1.7;
        b.endpoints[0].tok_per_s = 1234.4;
        assert!(!shows_change(&a, &b));
        let mut c = b.clone();
        c.elapsed_s += 1.0;
        assert!(shows_change(&b, &c), "the clock's second moved");
        let mut d = b.clone();
        d.done += 1;
        assert!(shows_change(&b, &d));
        let mut e = b.clone();
        e.endpoints[0].in_flight += 1;
        assert!(shows_change(&b, &e));
    }
}
