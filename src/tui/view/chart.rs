//! Throughput and spend over time: two sparklines (output tok/s, $/min) over the latest
//! history points, one column per point, each with its current and peak value in words.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Sparkline};

use crate::domain::duration;
use crate::engine::snapshot::HistoryPoint;

use super::super::state::UiState;
use super::text::{grouped_f64, rate};

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let h = &state.snapshot.history;
    let outer = Block::bordered().border_style(t.border);
    let inner = outer.inner(area);
    let n = usize::from(inner.width).min(h.len());
    let points: &[HistoryPoint] = &h[h.len() - n..];
    let span = match (points.first(), points.last()) {
        (Some(a), Some(b)) if b.at_s > a.at_s => format!(", last {}", duration(b.at_s - a.at_s)),
        _ => String::new(),
    };
    let outer = outer.title(Line::from(vec![
        Span::styled(" Output tok/s and $/min", t.title),
        Span::styled(format!("{span} "), t.dim),
    ]));
    frame.render_widget(outer, area);
    if points.is_empty() {
        frame.render_widget(Paragraph::new(Line::styled("no history yet", t.dim)), inner);
        return;
    }
    let [top, bottom] = Layout::vertical([Constraint::Fill(1), Constraint::Fill(1)]).areas(inner);
    let tok: Vec<u64> = points
        .iter()
        .map(|p| p.tok_per_s.max(0.0).round() as u64)
        .collect();
    let tok_now = points.last().map_or(0.0, |p| p.tok_per_s);
    let tok_peak = points.iter().map(|p| p.tok_per_s).fold(0.0, f64::max);
    series(
        frame,
        top,
        "tok/s",
        format!("now {}  peak {}", rate(tok_now), rate(tok_peak)),
        &tok,
        t.spark_tokens,
        t.dim,
    );
    // Milli-dollars per minute, so that cents show as bars.
    let usd: Vec<u64> = points
        .iter()
        .map(|p| (p.usd_per_min.max(0.0) * 1000.0).round() as u64)
        .collect();
    let usd_now = points.last().map_or(0.0, |p| p.usd_per_min);
    let usd_peak = points.iter().map(|p| p.usd_per_min).fold(0.0, f64::max);
    series(
        frame,
        bottom,
        "$/min",
        format!(
            "now ${}  peak ${}",
            grouped_f64(usd_now, 2),
            grouped_f64(usd_peak, 2)
        ),
        &usd,
        t.spark_money,
        t.dim,
    );
}

fn series(
    frame: &mut Frame,
    area: Rect,
    name: &str,
    figures: String,
    data: &[u64],
    style: Style,
    dim: Style,
) {
    if area.height == 0 {
        return;
    }
    let [label, spark] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    frame.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(format!("{name} "), style),
            Span::styled(figures, dim),
        ])),
        label,
    );
    let max = data.iter().copied().max().unwrap_or(0).max(1);
    frame.render_widget(Sparkline::default().data(data).max(max).style(style), spark);
}
