//! The screen in a locale without UTF-8: every cell a person's terminal receives is ASCII, the
//! budget gauge and the borders still read (`#`, `+`), and text from elsewhere (a provider's
//! message in CJK) is marked rather than sent as bytes the terminal cannot show.

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::engine::snapshot::{EventLine, Snapshot};

use super::super::testkit::{busy_snapshot, state_with};
use super::render;

/// The screen's cells as rows, drawn at `w` x `h` with the theme's ASCII choice `ascii`.
fn cells(s: &Snapshot, ascii: bool, help: bool, w: u16, h: u16) -> Vec<String> {
    let mut st = state_with(s.clone());
    st.theme.ascii = ascii;
    st.help = help;
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, &st)).expect("draw");
    let b = t.backend().buffer().clone();
    (0..h)
        .map(|y| (0..w).map(|x| b[(x, y)].symbol()).collect())
        .collect()
}

#[test]
fn a_locale_without_utf8_gets_ascii_alone() {
    let mut s = busy_snapshot();
    s.events.push(EventLine {
        at_s: 12.0,
        text: "provider said: 服务器繁忙 (busy)".into(),
    });
    for (w, h, help) in [
        (120, 40, false),
        (200, 60, false),
        (100, 30, true),
        (60, 16, false),
    ] {
        if w >= 100 {
            let utf8 = cells(&s, false, help, w, h);
            assert!(
                utf8.iter().any(|row| !row.is_ascii()),
                "{w}x{h}: the UTF-8 screen draws more than ASCII (the test can fail)"
            );
        }
        let ascii = cells(&s, true, help, w, h);
        for (y, row) in ascii.iter().enumerate() {
            assert!(row.is_ascii(), "{w}x{h} row {y}: {row}");
            assert_eq!(
                row.len(),
                usize::from(w),
                "{w}x{h} row {y}: one cell, one byte"
            );
        }
        if w >= 100 {
            let all = ascii.join("\n");
            assert!(
                all.contains('+') && all.contains('|'),
                "{w}x{h}: borders drawn"
            );
            assert!(all.contains("##"), "{w}x{h}: the budget gauge's spent part");
        }
    }
}
