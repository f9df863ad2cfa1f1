//! Whole screens drawn on ratatui's `TestBackend` from the Kimi fixture: insta snapshots of the
//! text, plus the checks a person would make by eye.

use std::sync::Arc;

use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;

use crate::engine::snapshot::{DatasetState, RunState};

use super::super::state::UiState;
use super::super::testkit::{kimi_snapshot, state_with};
use super::super::theme::Theme;
use super::super::update::{Msg, update};
use super::render;

fn draw(state: &UiState, w: u16, h: u16) -> Buffer {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, state)).expect("draw");
    t.backend().buffer().clone()
}

/// The screen as text, one line per row, trailing blanks trimmed.
fn text(b: &Buffer) -> String {
    let mut out = String::new();
    for y in 0..b.area.height {
        let row: String = (0..b.area.width).map(|x| b[(x, y)].symbol()).collect();
        out.push_str(row.trim_end());
        out.push('\n');
    }
    out
}

fn line_with<'a>(screen: &'a str, needle: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{screen}"))
}

/// Position of the first cell of `needle` on the screen.
fn find(b: &Buffer, needle: &str) -> (u16, u16) {
    let screen = text(b);
    for (y, l) in screen.lines().enumerate() {
        if let Some(byte) = l.find(needle) {
            return (l[..byte].chars().count() as u16, y as u16);
        }
    }
    panic!("{needle:?} not on screen:\n{screen}");
}

#[test]
fn screen_80x24() {
    let st = state_with(kimi_snapshot());
    let b = draw(&st, 80, 24);
    let s = text(&b);
    insta::assert_snapshot!("screen_80x24", s);

    // Header: state, elapsed, in flight, spend (booked, streaming) vs budget, ETA; the
    // projection gives way at 80 columns (`money_tests.rs` has the rest).
    let header = s.lines().next().unwrap_or_default();
    for want in [
        "RUNNING",
        "00:12:41",
        "1,984/2,000",
        "bk $40.90 strm $0.37 /$100 hard",
        "ETA 20m00s",
    ] {
        assert!(header.contains(want), "header lacks {want:?}: {header}");
    }
    // The model moved to the providers title.
    assert!(line_with(&s, "Providers").contains("moonshotai/kimi-k2.5"));
    // The latest event folds under the header.
    assert!(
        s.lines()
            .nth(1)
            .unwrap_or_default()
            .contains("concurrency set to 2000")
    );

    // Providers: include mark, price, quantization mark, uptime, tok/s, spend, why idle.
    let chutes = line_with(&s, "Chutes");
    for want in ["[x]", "int4", "*", "2.20", "99.1%", "9,840", "$11.92"] {
        assert!(chutes.contains(want), "Chutes row lacks {want:?}: {chutes}");
    }
    assert!(chutes.contains('>'), "the first row is selected: {chutes}");
    let baseten = line_with(&s, "BaseTen");
    for want in ["[ ]", "fp4", "!", "2.50", "29.8%", "fp4 re-quantized"] {
        assert!(
            baseten.contains(want),
            "BaseTen row lacks {want:?}: {baseten}"
        );
    }
    let fireworks = line_with(&s, "Fireworks");
    assert!(fireworks.contains("[ ]") && fireworks.contains("unknown ?"));
    assert!(fireworks.contains("operator"), "{fireworks}");
    let parasail = line_with(&s, "Parasail");
    assert!(
        parasail.contains("[x]") && parasail.contains("breaker 38s"),
        "{parasail}"
    );
    assert!(
        line_with(&s, "DeepInfra").contains("[x]"),
        "the operator included it"
    );
    assert_eq!(
        s.matches("[x]").count() + s.matches("[ ]").count(),
        11,
        "all 11 endpoints"
    );
    // Dropped first at 80 columns: TTFT, length, truncation and $/M in.
    for gone in ["ttft50", "trunc", "$/M in"] {
        assert!(!s.contains(gone), "{gone} should be dropped at 80x24");
    }

    // Datasets: prompts (+ rejected), tokens vs budget, tok/s, dollars, ETA, state.
    let b3 = line_with(&s, "B3");
    for want in [
        "6,210/6,666 +12 rej",
        "█",
        "9.1M/10M",
        "8,120",
        "$20.10",
        "1m50s",
        "running",
    ] {
        assert!(b3.contains(want), "B3 row lacks {want:?}: {b3}");
    }
    let b5 = line_with(&s, "B5");
    assert!(
        b5.contains("0/6,800") && b5.contains("0/10M") && b5.contains("queued"),
        "{b5}"
    );

    // Footer.
    let footer = s.lines().last().unwrap_or_default();
    for want in ["space", "incl", "sort", "pause", "+/-", "? help", "q quit"] {
        assert!(footer.contains(want), "footer lacks {want:?}: {footer}");
    }
    // No line is wider than the screen (nothing wraps or spills).
    assert!(s.lines().all(|l| l.chars().count() <= 80));
}

#[test]
fn screen_160x48() {
    let st = state_with(kimi_snapshot());
    let b = draw(&st, 160, 48);
    let s = text(&b);
    insta::assert_snapshot!("screen_160x48", s);
    let header = s.lines().next().unwrap_or_default();
    assert!(header.contains("moonshotai/kimi-k2.5") && header.contains("harvest"));
    // Every column, every reason in full.
    let hdr = line_with(&s, "provider");
    for col in [
        "tag", "quant", "$/M in", "$/M out", "api", "up30m", "fly", "done", "err", "tok/s",
        "ttft50", "len", "trunc", "spent", "why idle",
    ] {
        assert!(hdr.contains(col), "no {col:?} column: {hdr}");
    }
    let chutes = line_with(&s, "Chutes");
    for want in [
        "chutes/int4",
        "0.45",
        "2.20",
        "ok",
        "412",
        "3,120",
        "12 429",
        "0.9s",
        "1,702",
        "1.2%",
    ] {
        assert!(chutes.contains(want), "Chutes row lacks {want:?}: {chutes}");
    }
    let baseten = line_with(&s, "BaseTen");
    assert!(
        baseten.contains("policy: fp4 re-quantized") && baseten.contains("-5"),
        "{baseten}"
    );
    assert!(line_with(&s, "Venice").contains("policy: unknown quant"));
    assert!(line_with(&s, "Parasail").contains("21 5xx"));
    // Chart and events.
    assert!(s.contains("Output tok/s and $/min"));
    assert!(line_with(&s, "tok/s now").contains("peak"));
    assert!(line_with(&s, "$/min now").contains("peak"));
    assert!(s.contains("Events"));
    assert!(s.contains("breaker opened: parasail/int4"));
    assert!(s.contains("operator excluded fireworks"));
}

#[test]
fn screen_100x30_keeps_events_drops_chart() {
    let st = state_with(kimi_snapshot());
    let s = text(&draw(&st, 100, 30));
    insta::assert_snapshot!("screen_100x30", s);
    assert!(s.contains("Events"));
    assert!(!s.contains("Output tok/s"));
}

#[test]
fn too_small_says_how_big_it_must_be() {
    let st = state_with(kimi_snapshot());
    for (w, h) in [(60, 20), (79, 24), (80, 23)] {
        let s = text(&draw(&st, w, h));
        assert!(
            s.contains("harvest needs at least 80x24")
                && s.contains(&format!("this one is {w}x{h}")),
            "{w}x{h}:\n{s}"
        );
    }
    insta::assert_snapshot!("too_small_60x20", text(&draw(&st, 60, 20)));
}

#[test]
fn help_and_quit_overlays() {
    let mut st = state_with(kimi_snapshot());
    update(
        &mut st,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char('?'),
        )),
    );
    let s = text(&draw(&st, 80, 24));
    insta::assert_snapshot!("help_80x24", s);
    assert!(s.contains("re-quantized") && s.contains("drain"));
    let mut st = state_with(kimi_snapshot());
    update(
        &mut st,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::Char('q'),
        )),
    );
    let s = text(&draw(&st, 80, 24));
    insta::assert_snapshot!("quit_80x24", s);
    assert!(s.contains("d    drain") && s.contains("n    stop now") && s.contains("Esc"));
}

#[test]
fn finished_and_paused_states_read_right() {
    let mut snap = kimi_snapshot();
    snap.state = RunState::Stopped;
    snap.reason = Some(crate::engine::StopReason::DollarBudget);
    snap.in_flight = 0;
    for d in &mut snap.datasets {
        d.state = DatasetState::BudgetReached;
    }
    let st = state_with(snap);
    let s = text(&draw(&st, 120, 30));
    let header = s.lines().next().unwrap_or_default();
    assert!(
        header.contains("STOPPED") && header.contains("(dollar budget reached)"),
        "{header}"
    );
    assert!(header.contains("ETA -"), "{header}");
    assert!(line_with(&s, "B4").contains("budget reached"), "{s}");

    let mut snap = kimi_snapshot();
    snap.state = RunState::Paused;
    let st = state_with(snap);
    let s = text(&draw(&st, 80, 24));
    assert!(s.lines().next().unwrap_or_default().contains("PAUSED"));
    assert!(s.lines().last().unwrap_or_default().contains("p resume"));
}

#[test]
fn many_endpoints_scroll_to_the_selection() {
    let mut snap = kimi_snapshot();
    let base = snap.endpoints.clone();
    for i in 0..3 {
        for e in &base {
            let mut e = e.clone();
            e.tag = format!("{}-{i}", e.tag);
            e.price_out_per_m += 10.0 * f64::from(i + 1);
            snap.endpoints.push(e);
        }
    }
    let mut st = state_with(snap);
    update(
        &mut st,
        Msg::Key(crossterm::event::KeyEvent::from(
            crossterm::event::KeyCode::End,
        )),
    );
    let s = text(&draw(&st, 80, 24));
    // The last row (the priciest Venice copy) is visible and selected; the rest is counted.
    let selected = line_with(&s, "> [");
    assert!(
        selected.contains("Venice") && selected.contains("33.75"),
        "{s}"
    );
    assert!(s.contains("more"), "{s}");
    assert!(s.lines().all(|l| l.chars().count() <= 80));
}

#[test]
fn no_color_draws_no_colour_and_colour_only_repeats_marks() {
    let mono = UiState::new(Arc::new(kimi_snapshot()), Theme::mono());
    let colored = state_with(kimi_snapshot());
    for (w, h) in [(80, 24), (160, 48)] {
        let b = draw(&mono, w, h);
        for c in b.content() {
            assert_eq!(
                (c.fg, c.bg),
                (Color::Reset, Color::Reset),
                "{c:?} at {w}x{h}"
            );
        }
        // Same text either way: colour never carries meaning alone.
        assert_eq!(text(&b), text(&draw(&colored, w, h)));
    }
    // In colour, the re-quantized mark is red and the unknown one yellow.
    let b = draw(&colored, 80, 24);
    let (_, y) = find(&b, "BaseTen");
    let row: Vec<_> = (0..80).map(|x| &b[(x, y)]).collect();
    let bang = row.iter().find(|c| c.symbol() == "!").expect("a ! mark");
    assert_eq!(bang.fg, Color::Red);
    let (_, y) = find(&b, "Venice");
    let q = (0..80)
        .map(|x| &b[(x, y)])
        .find(|c| c.symbol() == "?")
        .expect("a ? mark");
    assert_eq!(q.fg, Color::Yellow);
}

#[test]
fn a_draining_run_says_draining_per_dataset_with_no_dataset_eta() {
    let mut snap = kimi_snapshot();
    snap.state = RunState::Draining;
    for d in &mut snap.datasets {
        if d.in_flight > 0 {
            d.state = DatasetState::Draining;
            d.eta_s = None;
        }
    }
    let st = state_with(snap);
    let s = text(&draw(&st, 160, 48));
    let b3 = line_with(&s, "B3");
    assert!(b3.contains("draining"), "{b3}");
    assert!(!b3.contains("running"), "{b3}");
}

/// On a tall screen the event pane takes the rows its events fill (a readable pane at least),
/// and the room left goes to the datasets row and its chart, up to their tallest; only then
/// do events get more. (w, h, events in the snapshot) -> (event pane rows, datasets/chart
/// rows beside each other, or the chart's rows under the datasets).
#[test]
fn the_event_pane_shrinks_to_its_events_and_the_chart_grows() {
    use super::plan;
    use ratatui::layout::Rect;
    let cases: [(u16, u16, usize, u16, u16); 6] = [
        // The reported case: 160x48 with a handful of events: no longer 18 empty rows.
        (160, 48, 5, 12, 20),
        (160, 48, 0, 12, 20),
        // A shorter wide screen: events keep what they hold, the chart takes the rest.
        (160, 40, 5, 7, 17),
        (160, 40, 30, 12, 12),
        // Narrow: the chart under the datasets grows the same way.
        (100, 50, 3, 8, 20),
        (100, 50, 40, 12, 16),
    ];
    for (w, h, n_events, want_events, want_chart) in cases {
        let mut s = kimi_snapshot();
        let last = s.events.last().cloned().expect("fixture has events");
        s.events = (0..n_events).map(|_| last.clone()).collect();
        let p = plan(Rect::new(0, 0, w, h), &s);
        let events = p.events.map_or(0, |r| r.height);
        let chart = p.chart.map_or(0, |r| r.height);
        assert_eq!(
            (events, chart),
            (want_events, want_chart),
            "{w}x{h} with {n_events} events: {p:?}"
        );
        // Nothing overlaps and the footer stays the last row.
        assert_eq!(p.footer.y, h - 1);
        if let Some(e) = p.events {
            assert!(e.bottom() <= p.footer.y, "{p:?}");
        }
    }
}

/// A viewer attached to a run elsewhere: `q` offers to detach (the run goes on) besides
/// drain and stop now, and `x` leaves without sending anything to the engine.
#[test]
fn an_attached_viewer_can_detach_from_the_quit_dialog() {
    use super::super::update::UiEffect;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let key = |c: char| Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    let mut st = state_with(kimi_snapshot());
    st.attached = Some(4242);
    update(&mut st, key('q'));
    let s = text(&draw(&st, 100, 30));
    assert!(s.contains("Leave this view?"), "{s}");
    let detach = line_with(&s, "detach");
    assert!(
        detach.contains(" x ") && detach.contains("pid 4242") && detach.contains("goes on"),
        "{detach}"
    );
    assert!(line_with(&s, "drain:").contains(" d "));
    assert!(line_with(&s, "stop now").contains(" n "));
    assert_eq!(update(&mut st, key('x')), vec![UiEffect::Quit]);
    assert_eq!(st.shutdown, None, "detaching asks nothing of the engine");
    // Not attached: the dialog has no detach, and `x` does nothing.
    let mut local = state_with(kimi_snapshot());
    update(&mut local, key('q'));
    let s = text(&draw(&local, 100, 30));
    assert!(s.contains("Quit harvest?") && !s.contains("detach"), "{s}");
    assert_eq!(update(&mut local, key('x')), Vec::new());
    assert!(local.quit_dialog, "still open");
}

/// While draining, the header shows the drain's own progress where the ETA was: when the last
/// request in flight is expected to end, or, when that is unknown, when the grace closes it.
#[test]
fn a_draining_header_shows_when_the_last_request_is_due() {
    // (expected time left, grace left, in flight, what the header says)
    let cases = [
        (Some(95.0), None, 120, "drain ~1m35s"),
        (Some(0.4), Some(20.0), 3, "drain any moment"),
        (None, None, 7, "drain -"),
        (None, Some(28.0), 7, "drain ≤28s"),
        (Some(10.0), None, 0, "drain done"),
    ];
    for (left, grace, in_flight, want) in cases {
        let mut snap = kimi_snapshot();
        snap.state = RunState::Draining;
        snap.in_flight = in_flight;
        snap.drain_left_s = left;
        snap.drain_grace_left_s = grace;
        let st = state_with(snap);
        let s = text(&draw(&st, 160, 48));
        let header = s.lines().next().unwrap_or_default();
        assert!(header.contains(want), "{want:?} not in {header}");
        assert!(!header.contains("ETA"), "{header}");
    }
}

/// A run that will stop at its dollar budget before its work is done says when, and says it
/// is the budget's time.
#[test]
fn the_header_says_when_the_budget_will_stop_the_run() {
    let mut snap = kimi_snapshot();
    snap.eta_s = Some(240.0);
    snap.eta_at_budget = true;
    let s = text(&draw(&state_with(snap), 160, 30));
    let header = s.lines().next().unwrap_or_default();
    assert!(header.contains("ETA 4m00s (budget)"), "{header}");
}

/// In the tail (every prompt sent), the header says the ETA is the last streams', and says so
/// when they stall and no ETA can be reckoned; at 80 columns too, where the projection gives
/// way to it.
#[test]
fn the_header_says_when_the_last_streams_are_the_tail() {
    for (eta, n, long, short) in [
        (
            Some(425.0),
            4,
            "ETA 7m05s (tail: 4 streams)",
            "ETA 7m05s (tail 4)",
        ),
        (None, 1, "ETA - (tail: 1 stream)", "ETA - (tail 1)"),
    ] {
        let mut snap = kimi_snapshot();
        snap.in_flight = n;
        snap.eta_s = eta;
        snap.tail_streams = n;
        snap.projected = Some(crate::domain::Usd::from_f64(41.28));
        for (w, want) in [(80, short), (160, long)] {
            let s = text(&draw(&state_with(snap.clone()), w, 30));
            let header = s.lines().next().unwrap_or_default();
            assert!(header.contains(want), "{w}: {want:?} not in {header}");
            assert_eq!(header.contains("proj $41.28"), w > 80, "{w}: {header}");
        }
    }
}

/// An allowed endpoint that gets nothing says why in its row, in full where the screen is
/// wide and cut to its column at 80 (issue #53 item 3: Moonshot AI, `[x]` and 99.9% up, got no
/// request in 10 minutes with a blank reason).
#[test]
fn an_allowed_endpoint_that_gets_nothing_says_why() {
    let mut snap = kimi_snapshot();
    let m = (snap.endpoints.iter_mut())
        .find(|e| e.provider == "Moonshot AI")
        .expect("Moonshot's row");
    m.idle = Some(crate::engine::reason::IdleReason::Unlisted {
        params: vec!["temperature".into()],
    });
    let st = state_with(snap);
    let wide = text(&draw(&st, 160, 48));
    let row = line_with(&wide, "Moonshot AI");
    assert!(
        row.contains("[x]") && row.contains("no temperature (require_parameters)"),
        "{row}"
    );
    let narrow = text(&draw(&st, 80, 24));
    let row = line_with(&narrow, "Moonshot AI");
    assert!(row.contains("no temperat"), "{row}");
}

/// An event longer than the pane is cut there with `…`; the full-screen log shows all of it,
/// wrapped, and `e` keeps only the events that name the selected endpoint.
#[test]
fn the_full_log_shows_the_whole_text_the_pane_cut() {
    use crate::engine::snapshot::EventLine;
    let long = "parasail/int4: 5 checked closes billed past what was received (first at 12:03:55, \
                the last at 12:09:41): closing a stream there does not stop its bill, so under \
                the hard budget its requests reserve their worst case from now on (END)";
    let mut snap = kimi_snapshot();
    snap.events.push(EventLine {
        at_s: 801.0,
        text: long.into(),
    });
    snap.events_total += 1;
    let mut st = state_with(snap);
    let main = text(&draw(&st, 100, 30));
    let cut = line_with(&main, "parasail/int4: 5 checked");
    assert!(
        cut.contains('…') && !cut.contains("(END)"),
        "the pane cuts it: {cut}"
    );
    st.log = Some(Default::default());
    let log = text(&draw(&st, 100, 30));
    // The wrapped rows, joined, hold every word of the event.
    let joined: Vec<&str> = (log.lines())
        .skip_while(|l| !l.contains("parasail/int4: 5 checked"))
        .take_while(|l| !l.contains("Esc back"))
        .flat_map(|l| l.trim_matches(|c| c == '│' || c == ' ').split_whitespace())
        .collect();
    let words: Vec<&str> = long.split_whitespace().collect();
    assert!(
        joined.windows(words.len()).any(|w| w == words.as_slice()),
        "every word, in order:\n{log}"
    );
    assert!(log.contains("Events: 6"), "{log}");
    assert!(log.lines().all(|l| l.chars().count() <= 100));
    // Only the events naming the selected endpoint (Chutes selected: none of these do; then
    // parasail/int4).
    st.log = Some(crate::tui::state::LogView {
        back: 0,
        only: Some(("parasail/int4".into(), "Parasail".into())),
    });
    let only = text(&draw(&st, 100, 30));
    assert!(
        only.contains("Events naming parasail/int4: 2 of 6"),
        "{only}"
    );
    assert!(!only.contains("concurrency set to 2000"), "{only}");
}

/// A filter shows in the providers' title (with a cursor while it is typed) and how many rows
/// it shows; the rows it hides are not drawn.
#[test]
fn the_providers_filter_is_shown_in_the_title() {
    let mut st = state_with(kimi_snapshot());
    st.filter = Some(super::super::state::Filter {
        text: "int4".into(),
        typing: true,
    });
    st.fix_selection();
    let s = text(&draw(&st, 160, 48));
    let title = line_with(&s, "Providers");
    assert!(title.contains("/int4_ 5 shown"), "{title}");
    assert!(s.contains("parasail/int4") && !s.contains("venice"), "{s}");
    st.filter.as_mut().expect("set").typing = false;
    let s = text(&draw(&st, 160, 48));
    assert!(line_with(&s, "Providers").contains("/int4 5 shown"), "{s}");
}
