//! The event log (newest first, stamped with run time like the header's clock), and its
//! folded form: the latest event on one line under the header when there is no room for the
//! pane.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use crate::domain::clock;
use crate::engine::snapshot::EventLine;

use super::super::state::UiState;
use super::super::theme::Theme;
use super::text::clean_cut;

fn event_line(e: &EventLine, w: u16, t: &Theme) -> Line<'static> {
    let stamp = clock(e.at_s);
    let room = w.saturating_sub(stamp.len() as u16 + 2);
    Line::from(vec![
        Span::styled(stamp, t.dim),
        Span::raw("  "),
        // Events quote tags and servers' errors.
        Span::raw(clean_cut(&e.text, room)),
    ])
}

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let block = Block::bordered()
        .border_style(t.border)
        .title(Span::styled(" Events ", t.title));
    let inner = block.inner(area);
    let lines: Vec<Line> = state
        .snapshot
        .events
        .iter()
        .rev()
        .take(usize::from(inner.height))
        .map(|e| event_line(e, inner.width, t))
        .collect();
    let lines = if lines.is_empty() {
        vec![Line::styled("no events yet", t.dim)]
    } else {
        lines
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

pub(super) fn render_fold(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let Some(e) = state.snapshot.events.last() else {
        return;
    };
    let inner = Rect {
        x: area.x + 1,
        width: area.width.saturating_sub(1),
        ..area
    };
    frame.render_widget(Paragraph::new(event_line(e, inner.width, t)), inner);
}
