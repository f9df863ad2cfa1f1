//! The `?` overlay: every key (from the same table as the footer), what the marks mean, and
//! the header's money.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Padding};

use super::super::keymap::HINTS;
use super::super::state::UiState;
use super::overlay;

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let key_w = HINTS
        .iter()
        .map(|h| h.help_keys.chars().count())
        .max()
        .unwrap_or(8);
    let mut lines: Vec<Line> = vec![Line::styled("Keys (each acts at once)", t.title)];
    for h in HINTS {
        lines.push(Line::from(vec![
            Span::styled(format!(" {:<key_w$}  ", h.help_keys), t.key),
            Span::raw(h.help),
        ]));
    }
    let legend: [(&str, &str); 8] = [
        (
            "booked strm",
            "spend in the ledger + streamed by requests in flight",
        ),
        (
            "proj worst",
            "where the spend should end / the most it can still reach",
        ),
        (
            "hard",
            "budget mode (expected: streams billed anyway may pass it)",
        ),
        ("[x] [ ]", "included / excluded (by you or by the policy)"),
        (
            "* + ! ?",
            "native precision, lossless upcast, re-quantized, unknown",
        ),
        (
            "why idle",
            "off: operator, policy, down, breaker; idle: no <param>",
        ),
        ("█ ▒ ░", "spent, projected, rest of the budget"),
        (
            "err",
            "failed attempts and their main kind (429, 5xx, mid...)",
        ),
    ];
    // A blank line before the marks where the screen has the row for it (at 80x24 it has not,
    // and the last mark would be cut).
    let rows = lines.len() + 1 + legend.len() + 2;
    if rows < usize::from(area.height) {
        lines.push(Line::raw(""));
    }
    lines.push(Line::styled("Marks", t.title));
    for (k, v) in legend {
        lines.push(Line::from(vec![
            Span::styled(format!(" {k:<key_w$}  "), t.bold),
            Span::raw(v),
        ]));
    }
    let content = lines.iter().map(Line::width).max().unwrap_or(40) as u16;
    let w = (content + 4).min(area.width.saturating_sub(2));
    overlay(
        frame,
        area,
        w,
        lines,
        Block::bordered()
            .padding(Padding::horizontal(1))
            .border_style(t.border_focused)
            .title(Span::styled(" Help ", t.title))
            .title_bottom(Line::styled(" any key closes ", t.dim).right_aligned()),
        t.overlay,
    );
}
