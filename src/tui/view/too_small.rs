//! What the screen says when the terminal is smaller than the layout needs.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Paragraph, Wrap};

use super::super::state::UiState;
use super::{MIN_HEIGHT, MIN_WIDTH, centered};

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let s = &state.snapshot;
    let lines = vec![
        Line::styled("Terminal too small", t.bold).centered(),
        Line::raw(format!(
            "harvest needs at least {MIN_WIDTH}x{MIN_HEIGHT}; this one is {}x{}.",
            area.width, area.height
        ))
        .centered(),
        Line::raw("Enlarge the window (q quits).").centered(),
        Line::raw(""),
        Line::styled(
            format!(
                "{} {}  {}/{}",
                s.state.label(),
                crate::domain::clock(s.elapsed_s),
                s.spent_with_accrued(),
                s.budget
            ),
            t.dim,
        )
        .centered(),
    ];
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, area.width, h);
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: true }), r);
}
