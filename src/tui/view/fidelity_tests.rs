//! What a person sees when a key would lower fidelity: the confirmation naming what opens
//! (nothing sent, the table unchanged behind it), and the mark a row included against the
//! policy keeps in its why column.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::super::state::UiState;
use super::super::testkit::{kimi_snapshot, state_with};
use super::super::update::{Msg, update};
use super::render;

fn screen(st: &UiState, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, st)).expect("draw");
    let b = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            let row: String = (0..w).map(|x| b[(x, y)].symbol()).collect();
            row.trim_end().to_string() + "\n"
        })
        .collect()
}

fn key(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}

fn line_with<'a>(s: &'a str, needle: &str) -> &'a str {
    s.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{s}"))
}

#[test]
fn a_asks_naming_what_opens_and_nothing_changes_until_confirmed() {
    let mut st = state_with(kimi_snapshot());
    assert_eq!(update(&mut st, key('a')), vec![]);
    let s = screen(&st, 80, 24);
    insta::assert_snapshot!("confirm_any_80x24", s);
    assert!(s.contains("Any quantization?"), "{s}");
    assert!(
        s.contains("Opens 3 endpoints of unknown quantization: Together, Novita,")
            && s.contains("Venice."),
        "{s}"
    );
    assert!(line_with(&s, "a / y").contains("confirm"));
    assert!(line_with(&s, "any other key").contains("cancel: nothing changes"));
    // Behind it, the table is as it was.
    assert!(line_with(&s, "Providers").contains("5 of 11 allowed"));
    // Any other key: the dialog goes, nothing was sent.
    assert_eq!(update(&mut st, key('q')), vec![]);
    let s = screen(&st, 80, 24);
    assert!(
        !s.contains("Any quantization?") && !s.contains("Quit harvest?"),
        "{s}"
    );
    assert!(s.contains("cancelled: nothing changed"), "{s}");
}

#[test]
fn space_on_a_row_the_policy_excludes_asks_naming_the_row_and_why() {
    let mut st = state_with(kimi_snapshot());
    st.selected = Some("baseten/fp4".into());
    assert_eq!(update(&mut st, key(' ')), vec![]);
    let s = screen(&st, 100, 30);
    assert!(s.contains("Lower fidelity?"), "{s}");
    assert!(
        s.contains("Opens BaseTen (policy: fp4 re-quantized)."),
        "{s}"
    );
    assert!(line_with(&s, "space / y").contains("confirm"), "{s}");
}

/// DeepInfra (unknown quantization) serves because the operator included it: its why column
/// says so, whole on a wide screen, shortened to the mark and the reason at 80 columns.
#[test]
fn a_row_included_against_the_policy_keeps_its_mark() {
    let st = state_with(kimi_snapshot());
    let wide = screen(&st, 160, 48);
    assert!(
        line_with(&wide, "DeepInfra").contains("operator: in (policy: unknown quant)"),
        "{wide}"
    );
    let narrow = screen(&st, 80, 24);
    let row = line_with(&narrow, "DeepInfra");
    assert!(
        row.contains("[x]") && row.contains("in: unknown qua"),
        "{row}"
    );
    // Resting behind its breaker too: both said (shortened when the column is narrower).
    let mut s = kimi_snapshot();
    let d = (s.endpoints.iter_mut())
        .find(|e| e.tag == "deepinfra")
        .expect("deepinfra");
    d.off = Some(crate::engine::reason::OffReason::Breaker { secs: 12 });
    let st = state_with(s);
    let widest = screen(&st, 220, 48);
    assert!(
        line_with(&widest, "DeepInfra")
            .contains("breaker 12s; operator: in (policy: unknown quant)"),
        "{widest}"
    );
    let wide = screen(&st, 160, 48);
    assert!(
        line_with(&wide, "DeepInfra").contains("breaker 12s; in (unknown quant)"),
        "{wide}"
    );
}
