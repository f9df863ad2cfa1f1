//! The TUI's update tests: every key and command as state in, state and effects out.

use crossterm::event::{KeyCode, KeyModifiers};

use super::super::state::STATUS_TTL;
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

/// PgUp and PgDn move the selection by the rows the focused table shows, clamped at its ends:
/// on a 24-row screen the providers table shows a few of the 11 rows, on a 60-row one all.
#[test]
fn page_keys_move_by_the_rows_on_screen() {
    let mut st = state_with(kimi_snapshot());
    let at = |st: &UiState| {
        order(st)
            .iter()
            .position(|t| Some(t) == st.selected.as_ref())
    };
    for (w, h) in [(80u16, 24u16), (120, 30), (200, 60)] {
        update(&mut st, Msg::Resize(w, h));
        update(&mut st, key('g'));
        let page = table_page(&st) as usize;
        assert!(page >= 1, "{w}x{h}");
        update(&mut st, code(KeyCode::PageDown));
        assert_eq!(at(&st), Some(page.min(10)), "{w}x{h}: a page on");
        update(&mut st, code(KeyCode::PageDown));
        assert_eq!(
            at(&st),
            Some((2 * page).min(10)),
            "{w}x{h}: another, clamped"
        );
        update(&mut st, code(KeyCode::PageUp));
        assert_eq!(
            at(&st),
            Some((2 * page).min(10).saturating_sub(page)),
            "{w}x{h}: a page back"
        );
        update(&mut st, code(KeyCode::PageUp));
        assert_eq!(at(&st), Some(0), "{w}x{h}: clamped at the first row");
    }
    // The page is the table's rows on screen: of 30 endpoints, fewer on a short screen than
    // on a tall one.
    let mut st = state_with(super::super::testkit::busy_snapshot());
    update(&mut st, Msg::Resize(80, 24));
    let short = table_page(&st);
    update(&mut st, Msg::Resize(200, 60));
    let tall = table_page(&st);
    assert!(short < tall, "{short} {tall}");
}

/// `/` filters the providers table by tag or provider name as it is typed (any case);
/// Backspace takes back, Enter keeps it while keys act again, Esc clears it. The selection
/// stays on a shown row, and `q` typed into the filter is a letter, not the quit dialog.
#[test]
fn slash_filters_the_providers_as_typed() {
    let mut st = state_with(kimi_snapshot());
    update(&mut st, key('G'));
    assert_eq!(st.selected.as_deref(), Some("venice"));
    update(&mut st, key('/'));
    for c in "INT4".chars() {
        update(&mut st, key(c));
    }
    assert_eq!(
        order(&st),
        [
            "chutes/int4",
            "siliconflow/int4",
            "atlas-cloud/int4",
            "parasail/int4",
            "moonshotai/int4"
        ],
        "rows whose tag holds int4, any case"
    );
    assert_eq!(
        st.selected.as_deref(),
        Some("chutes/int4"),
        "the selection moves to a shown row"
    );
    update(&mut st, code(KeyCode::Down));
    assert_eq!(
        st.selected.as_deref(),
        Some("siliconflow/int4"),
        "arrows move"
    );
    update(&mut st, key('q'));
    assert!(!st.quit_dialog, "q is typed, not the quit dialog");
    assert!(order(&st).is_empty(), "int4q matches nothing");
    update(&mut st, code(KeyCode::Backspace));
    assert_eq!(order(&st).len(), 5, "taken back");
    update(&mut st, code(KeyCode::Enter));
    assert_eq!(
        st.filter.as_ref().map(|f| (f.text.as_str(), f.typing)),
        Some(("INT4", false)),
        "kept"
    );
    // Nothing was shown a moment ago: the selection is the first shown row again.
    update(&mut st, key('j'));
    assert_eq!(
        st.selected.as_deref(),
        Some("siliconflow/int4"),
        "keys act again, among the shown rows"
    );
    update(&mut st, code(KeyCode::Esc));
    assert_eq!(st.filter, None, "Esc clears it");
    assert_eq!(order(&st), BY_PRICE, "every row again");
    assert_eq!(st.selected.as_deref(), Some("siliconflow/int4"), "kept");
    // By the provider's name too; an empty filter kept is none.
    update(&mut st, key('/'));
    for c in "moon".chars() {
        update(&mut st, key(c));
    }
    assert_eq!(order(&st), ["moonshotai/int4"]);
    for _ in 0..4 {
        update(&mut st, code(KeyCode::Backspace));
    }
    update(&mut st, code(KeyCode::Enter));
    assert_eq!(st.filter, None);
}

/// Space makes the row the opposite of what the viewer sees, absolutely: a second viewer's
/// press at the same time asks for the same, not for an undo. (Including a row the policy
/// excludes asks first: `fidelity_tests.rs`; here it is confirmed by a second space.)
#[test]
fn space_sets_the_endpoint_of_the_selected_row_to_the_opposite_of_what_is_seen() {
    let mut st = state_with(kimi_snapshot());
    for (row, tag) in BY_PRICE.iter().enumerate() {
        update(&mut st, key('g'));
        for _ in 0..row {
            update(&mut st, key('j'));
        }
        let e = (st.snapshot.endpoints.iter())
            .find(|e| e.tag == *tag)
            .expect("row");
        let seen = e.included;
        let asks = !seen && e.policy_off.as_ref().is_some_and(|x| x.is_fidelity());
        let mut sent = update(&mut st, key(' '));
        if asks {
            assert_eq!(sent, vec![], "row {row} asks first");
            sent = update(&mut st, key(' '));
        }
        assert_eq!(
            sent,
            send(Command::SetEndpoint {
                tag: tag.to_string(),
                allowed: Some(!seen)
            }),
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
    update(&mut st, key('y'));
    assert_eq!(
        st.status.as_ref().map(|s| s.text.as_str()),
        Some("included against the policy (from the next request); space excludes it")
    );
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
    // With help open a key closes it and acts on nothing behind it.
    update(&mut st, key('?'));
    assert_eq!(update(&mut st, key('p')), vec![]);
    assert!(!st.help);
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

fn event(at_s: f64, text: &str) -> crate::engine::snapshot::EventLine {
    crate::engine::snapshot::EventLine {
        at_s,
        text: text.into(),
    }
}

/// The snapshot carries the last events only; the view keeps every one it has seen, and counts
/// those it never saw (before it began, or more between two snapshots than one carries).
#[test]
fn the_view_keeps_every_event_it_has_seen_and_counts_the_ones_it_missed() {
    let mut st = with_state(|s| {
        s.events = vec![event(1.0, "e3"), event(2.0, "e4")];
        s.events_total = 4;
    });
    let texts =
        |st: &UiState| -> Vec<String> { st.history.lines.iter().map(|e| e.text.clone()).collect() };
    assert_eq!(
        (texts(&st), st.history.missed),
        (vec!["e3".into(), "e4".into()], 2)
    );
    // (what, the snapshot's last events, its total, the history after, missed after)
    type Case = (&'static str, Vec<&'static str>, u64, Vec<&'static str>, u64);
    let cases: Vec<Case> = vec![
        ("nothing new", vec!["e3", "e4"], 4, vec!["e3", "e4"], 2),
        ("one new", vec!["e4", "e5"], 5, vec!["e3", "e4", "e5"], 2),
        (
            "four new, two carried",
            vec!["e8", "e9"],
            9,
            vec!["e3", "e4", "e5", "e8", "e9"],
            4,
        ),
    ];
    for (what, last, total, want, missed) in cases {
        let mut snap = (*st.snapshot).clone();
        snap.events = last.iter().map(|t| event(9.0, t)).collect();
        snap.events_total = total;
        update(&mut st, Msg::Snapshot(Arc::new(snap)));
        assert_eq!(texts(&st), want, "{what}");
        assert_eq!(st.history.missed, missed, "{what}");
    }
}

/// `l` opens the full-screen log; its keys scroll it and show one endpoint's events; any way
/// out closes it, and Ctrl-C still reaches the quit dialog.
#[test]
fn the_log_opens_scrolls_filters_and_closes() {
    let mut st = with_state(|_| {});
    st.size = (100, 30);
    update(&mut st, key('l'));
    assert_eq!(st.log, Some(Default::default()), "open, at its end");
    let back = |st: &UiState| st.log.as_ref().map(|l| l.back);
    // (key, rows back after)
    let keys = [
        (code(KeyCode::Up), 1),
        (key('k'), 2),
        (code(KeyCode::Down), 1),
        (code(KeyCode::PageUp), 28),
        (code(KeyCode::PageDown), 1),
        (key('G'), 0),
        (key('g'), usize::MAX),
        (code(KeyCode::End), 0),
    ];
    for (k, want) in keys {
        update(&mut st, k);
        assert_eq!(back(&st), Some(want));
    }
    // The selected row (the first, Chutes) alone, and all again.
    update(&mut st, key('e'));
    let only = st.log.as_ref().and_then(|l| l.only.clone());
    assert_eq!(only, Some(("chutes/int4".into(), "Chutes".into())));
    update(&mut st, key('e'));
    assert_eq!(st.log.as_ref().and_then(|l| l.only.clone()), None);
    // Keys of the main screen do nothing here: space does not toggle a row.
    let before = st.snapshot.clone();
    assert!(update(&mut st, key('p')).is_empty(), "p does not pause");
    assert!(Arc::ptr_eq(&before, &st.snapshot));
    update(&mut st, code(KeyCode::Esc));
    assert_eq!(st.log, None, "Esc closes it");
    update(&mut st, key('l'));
    update(&mut st, key('l'));
    assert_eq!(st.log, None, "l again closes it");
    update(&mut st, key('l'));
    update(&mut st, ctrl_c());
    assert!(
        st.log.is_none() && st.quit_dialog,
        "Ctrl-C: the quit dialog"
    );
}

/// With the help open any key closes it and does nothing behind it (a key that acted on a row
/// the help box hides surprised an operator); Ctrl-C still reaches the quit dialog.
#[test]
fn any_key_closes_the_help_and_acts_on_nothing_behind_it() {
    // (key, what it would have done behind the help)
    let keys = [
        (key('p'), "pause"),
        (key(' '), "exclude the selected row"),
        (key('+'), "raise concurrency"),
        (key('q'), "open the quit dialog"),
        (key('?'), "nothing: it is the help's own key"),
    ];
    for (k, behind) in keys {
        let mut st = with_state(|_| {});
        let selected = st.selected.clone();
        update(&mut st, key('?'));
        assert!(st.help, "? opens the help");
        let fx = update(&mut st, k);
        assert!(fx.is_empty(), "nothing sent ({behind})");
        assert!(!st.help, "any key closes the help ({behind})");
        assert!(!st.quit_dialog && st.confirm.is_none(), "{behind}");
        assert_eq!(st.selected, selected, "{behind}");
    }
    let mut st = with_state(|_| {});
    update(&mut st, key('?'));
    update(&mut st, ctrl_c());
    assert!(st.quit_dialog, "Ctrl-C: the quit dialog");
}

/// Below the smallest screen the rows cannot be seen, so only `q` (and Ctrl-C) act: a key
/// that moved the selection or toggled a row would act on what the operator cannot see.
#[test]
fn below_the_smallest_screen_only_q_acts() {
    let mut st = with_state(|_| {});
    update(&mut st, Msg::Resize(60, 20));
    let selected = st.selected.clone();
    for k in [
        key('j'),
        key(' '),
        key('p'),
        key('a'),
        key('+'),
        key('l'),
        key('?'),
    ] {
        assert!(update(&mut st, k).is_empty());
    }
    assert_eq!(st.selected, selected, "the selection stayed");
    assert!(!st.help && st.log.is_none() && st.confirm.is_none());
    update(&mut st, key('q'));
    assert!(st.quit_dialog, "q opens the quit dialog");
    // Back at full size, keys act again.
    update(&mut st, code(KeyCode::Esc));
    update(&mut st, Msg::Resize(80, 24));
    update(&mut st, key('j'));
    assert_ne!(st.selected, selected, "j moves the selection");
}
