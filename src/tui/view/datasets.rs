//! The datasets table, one line each: prompts done/total (+ rejected), output tokens vs budget
//! as a bar and in figures, tok/s, dollars, ETA and state.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use crate::domain::duration;
use crate::engine::snapshot::{DatasetSnap, DatasetState};

use super::super::state::{Pane, UiState};
use super::super::theme::Theme;
use super::grid::{self, Row};
use super::text::{ColSpec, MUST, bar, count, fit, money, rate, shown, tokens, truncate, width};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Name,
    Prompts,
    Gauge,
    Tokens,
    TokS,
    Spent,
    Eta,
    State,
}

const COLS: [Col; 8] = [
    Col::Name,
    Col::Prompts,
    Col::Gauge,
    Col::Tokens,
    Col::TokS,
    Col::Spent,
    Col::Eta,
    Col::State,
];

impl Col {
    fn header(self) -> &'static str {
        match self {
            Col::Name => "  dataset",
            Col::Prompts => "prompts done/total",
            Col::Gauge => "output tokens vs budget",
            Col::Tokens => "",
            Col::TokS => "tok/s",
            Col::Spent => "spent",
            Col::Eta => "ETA",
            Col::State => "state",
        }
    }

    fn right(self) -> bool {
        matches!(
            self,
            Col::Prompts | Col::Tokens | Col::TokS | Col::Spent | Col::Eta
        )
    }

    fn keep(self) -> u8 {
        match self {
            Col::TokS => 80,
            _ => MUST,
        }
    }
}

fn state_label(s: DatasetState) -> &'static str {
    match s {
        DatasetState::Queued => "queued",
        DatasetState::Running => "running",
        DatasetState::BudgetReached => "budget reached",
        DatasetState::Draining => "draining",
        DatasetState::Stopped => "stopped",
        DatasetState::Done => "done",
    }
}

fn text(c: Col, d: &DatasetSnap) -> String {
    match c {
        Col::Name => format!("  {}", d.name),
        Col::Prompts => {
            let mut s = done_total(d);
            if let Some(r) = rejected(d) {
                s.push_str(&r);
            }
            s
        }
        Col::Gauge => String::new(),
        Col::Tokens => match d.output_token_budget {
            Some(b) => format!("{}/{}", tokens(d.output_tokens), tokens(b)),
            None => tokens(d.output_tokens),
        },
        Col::TokS => rate(d.tok_per_s),
        Col::Spent => money(d.spent),
        Col::Eta => match (d.state, d.eta_s) {
            (DatasetState::Running | DatasetState::Queued, Some(e)) => duration(e),
            _ => "-".into(),
        },
        Col::State => state_label(d.state).into(),
    }
}

fn done_total(d: &DatasetSnap) -> String {
    format!("{}/{}", count(d.done), count(d.total))
}

/// Rejects, and lines skipped as duplicate ids, when there are any.
fn rejected(d: &DatasetSnap) -> Option<String> {
    let mut s = String::new();
    if d.rejected > 0 {
        s.push_str(&format!(" +{} rej", count(d.rejected)));
    }
    if d.duplicates > 0 {
        s.push_str(&format!(" {} dup", count(d.duplicates)));
    }
    (!s.is_empty()).then_some(s)
}

/// How far the dataset is: output tokens against the budget, else prompts against the total.
fn ratio(d: &DatasetSnap) -> f64 {
    match d.output_token_budget {
        Some(b) if b > 0 => d.output_tokens as f64 / b as f64,
        _ if d.total > 0 => (d.done + d.rejected) as f64 / d.total as f64,
        _ => 0.0,
    }
}

fn cell(c: Col, d: &DatasetSnap, w: u16, selected: bool, t: &Theme) -> Line<'static> {
    let line = match c {
        Col::Name => Line::from(vec![
            Span::styled(if selected { ">" } else { " " }, t.bold),
            Span::raw(" "),
            Span::styled(truncate(&d.name, w.saturating_sub(2)), t.bold),
        ]),
        Col::Prompts => {
            let base = done_total(d);
            match rejected(d) {
                // Rejects only when they fit whole (a right-aligned line is cut on the left).
                Some(r) if width(&base) + width(&r) <= w => {
                    Line::from(vec![Span::raw(base), Span::styled(r, t.warn)])
                }
                _ => Line::raw(truncate(&base, w)),
            }
        }
        Col::Gauge => {
            let filled = if d.state == DatasetState::Queued {
                t.gauge_empty
            } else {
                t.gauge_filled
            };
            Line::from(bar(ratio(d), None, w, filled, t.gauge_empty))
        }
        Col::State => {
            let style = match d.state {
                DatasetState::Queued => t.dim,
                DatasetState::Running | DatasetState::Draining => t.good,
                DatasetState::BudgetReached | DatasetState::Stopped | DatasetState::Done => t.bold,
            };
            let label = state_label(d.state);
            let label = if width(label) > w && d.state == DatasetState::BudgetReached {
                "budget"
            } else {
                label
            };
            Line::styled(truncate(label, w), style)
        }
        _ => Line::raw(truncate(&text(c, d), w)),
    };
    if c.right() {
        line.right_aligned()
    } else {
        line
    }
}

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let t = &state.theme;
    let s = &state.snapshot;
    let focused = state.focus == Pane::Datasets;
    let done: u64 = s.datasets.iter().map(|d| d.done).sum();
    let block = Block::bordered()
        .border_style(if focused { t.border_focused } else { t.border })
        .title(Line::from(vec![
            Span::styled(" Datasets ", t.title),
            Span::raw(format!(" {}/{} prompts ", count(done), count(s.total))),
        ]));
    let inner = block.inner(area);
    let specs: Vec<ColSpec> = COLS
        .iter()
        .map(|&c| {
            let want = s
                .datasets
                .iter()
                .map(|d| width(&text(c, d)))
                .chain([width(c.header())])
                .max()
                .unwrap_or(1);
            let min = match c {
                Col::Gauge => 6,
                Col::Prompts => s
                    .datasets
                    .iter()
                    .map(|d| width(&done_total(d)))
                    .max()
                    .unwrap_or(3),
                Col::State => want.min(6),
                Col::Name => want.min(6),
                _ => want,
            };
            ColSpec {
                min,
                want,
                whole: want,
                keep: c.keep(),
                flex: c == Col::Gauge,
            }
        })
        .collect();
    let widths = fit(&specs, inner.width, 1);
    let shown: Vec<(Col, u16)> = shown(&COLS, &widths);
    let header = Row {
        style: Style::default(),
        cells: shown
            .iter()
            .map(|(c, w)| {
                let label = if *c == Col::Gauge {
                    ["output tokens vs budget", "output tokens", "tokens"]
                        .into_iter()
                        .find(|h| width(h) <= *w)
                        .unwrap_or("")
                } else {
                    c.header()
                };
                let l = Line::styled(truncate(label, *w), t.header_row);
                if c.right() { l.right_aligned() } else { l }
            })
            .collect(),
    };
    let visible = usize::from(inner.height.saturating_sub(1));
    let sel = state.selected_dataset_row().unwrap_or(0);
    let offset = if visible == 0 {
        0
    } else {
        sel.saturating_sub(visible - 1)
    };
    let rows: Vec<Row> = s
        .datasets
        .iter()
        .skip(offset)
        .take(visible)
        .map(|d| {
            let selected = state.selected_dataset.as_deref() == Some(d.name.as_str());
            let mut style = if d.state == DatasetState::Queued {
                t.dim
            } else {
                t.text
            };
            if selected && focused {
                style = style.patch(t.selected);
            }
            Row {
                style,
                cells: shown
                    .iter()
                    .map(|(c, w)| cell(*c, d, *w, selected && focused, t))
                    .collect(),
            }
        })
        .collect();
    let hidden = s.datasets.len().saturating_sub(offset + rows.len());
    let mut block = block;
    if let Some(l) = super::text::booked_elsewhere(s.booked_no_dataset, "dataset", t.dim) {
        block = block.title_bottom(l);
    }
    if offset > 0 || hidden > 0 {
        block = block.title_bottom(
            Line::styled(format!(" ↑ {offset}  ↓ {hidden} more "), t.dim).right_aligned(),
        );
    }
    frame.render_widget(block, area);
    let widths: Vec<u16> = shown.iter().map(|(_, w)| *w).collect();
    grid::table(frame.buffer_mut(), inner, &widths, &header, &rows);
}
