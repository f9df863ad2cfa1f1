//! The quit dialog: drain (finish in-flight, save, exit) or stop now (cancel, save, exit).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use crate::engine::control::ShutdownMode;

use super::super::state::UiState;
use super::overlay;
use super::text::count;

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let s = &state.snapshot;
    let draining = state.shutdown == Some(ShutdownMode::Drain);
    let mut lines = vec![
        Line::raw(if draining {
            format!(
                "Draining: {} requests in flight still to finish.",
                count(s.in_flight)
            )
        } else {
            format!(
                "{} requests in flight, {} spent.",
                count(s.in_flight),
                s.spent_with_accrued()
            )
        }),
        Line::raw(""),
    ];
    let option = |k: &str, v: &str| {
        Line::from(vec![
            Span::styled(format!(" {k:<4} "), t.key),
            Span::raw(v.to_string()),
        ])
    };
    if let Some(pid) = state.attached {
        lines.push(option(
            "x",
            &format!("detach: close this view; the run (pid {pid}) goes on"),
        ));
    }
    if !draining {
        lines.push(option("d", "drain: finish in-flight requests, save, exit"));
    }
    lines.push(option(
        "n",
        "stop now: cancel in-flight requests, save, exit",
    ));
    lines.push(option("Esc", "keep running"));
    let w = if state.attached.is_some() { 62 } else { 56 }.min(area.width);
    overlay(
        frame,
        area,
        w,
        lines,
        Block::bordered()
            .border_style(t.border_focused)
            .title(Span::styled(
                if state.attached.is_some() {
                    " Leave this view? "
                } else {
                    " Quit harvest? "
                },
                t.title,
            )),
        t.overlay,
    );
}
