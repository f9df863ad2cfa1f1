//! The key footer (the widest form of the hints that fits), or the transient status message
//! when a key just did something.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::engine::snapshot::RunState;

use super::super::keymap::HINTS;
use super::super::state::UiState;
use super::super::theme::Theme;
use super::text::truncate;

/// The hints in form `form` (0 wide, 1 medium, 2 narrow).
fn hints(form: usize, paused: bool, t: &Theme) -> Line<'static> {
    let mut spans = vec![Span::raw(" ")];
    for h in HINTS {
        let (k, mut label) = (h.keys[form], h.labels[form]);
        if k.is_empty() {
            continue;
        }
        if paused && label == "pause" {
            label = "resume";
        }
        if spans.len() > 1 {
            spans.push(Span::raw("  "));
        }
        spans.push(Span::styled(k, t.key));
        if !label.is_empty() {
            spans.push(Span::raw(format!(" {label}")));
        }
    }
    Line::from(spans)
}

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let paused = state.snapshot.state == RunState::Paused;
    let status = state.status.as_ref().map(|s| s.text.as_str());
    let w = usize::from(area.width);
    // Hints with the status message after them, in the widest form that fits.
    for form in 0..3 {
        let mut line = hints(form, paused, t);
        if let Some(st) = status {
            line.push_span(Span::raw("   "));
            line.push_span(Span::styled(format!(" {st} "), t.status));
        }
        if line.width() <= w {
            frame.render_widget(Paragraph::new(line), area);
            return;
        }
    }
    // No room for both: the message alone (it is short-lived).
    let line = match status {
        Some(st) => Line::from(vec![
            Span::raw(" "),
            Span::styled(
                truncate(&format!(" {st} "), area.width.saturating_sub(1)),
                t.status,
            ),
        ]),
        None => hints(2, paused, t),
    };
    frame.render_widget(Paragraph::new(line), area);
}
