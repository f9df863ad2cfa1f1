//! The full-screen log (`l`, as k9s' log view): every event this view has seen, oldest at the
//! top, each wrapped to the screen (the pane cuts them to a line), scrolled by the operator,
//! optionally only those that name the selected endpoint; a line above says what it holds and
//! what it does not (events before this view began are in `harvest.log`).

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::domain::clock;
use crate::engine::snapshot::EventLine;

use super::super::state::{LogView, UiState};
use super::text::{clean, truncate, wrap};

/// The rows of the events `shown`, each stamped and wrapped to `w` (continuations indented
/// under the text).
fn rows(shown: &[&EventLine], w: u16) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for e in shown {
        let stamp = clock(e.at_s);
        let indent = stamp.len() as u16 + 2;
        let text = clean(&e.text);
        for (i, part) in wrap(&text, w.saturating_sub(indent))
            .into_iter()
            .enumerate()
        {
            let stamp = (i == 0).then(|| stamp.clone());
            out.push((stamp, part));
        }
    }
    out
}

/// Whether `e` names the endpoint `only` (its tag or its provider).
fn names(e: &EventLine, only: Option<&(String, String)>) -> bool {
    only.is_none_or(|(tag, provider)| {
        e.text.contains(tag.as_str()) || e.text.contains(provider.as_str())
    })
}

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState, log: &LogView) {
    let t = &state.theme;
    frame.render_widget(Clear, area);
    let h = &state.history;
    let shown: Vec<&EventLine> = (h.lines.iter())
        .filter(|e| names(e, log.only.as_ref()))
        .collect();
    let which = match &log.only {
        Some((tag, _)) => format!(
            " Events naming {tag}: {} of {} ",
            shown.len(),
            h.lines.len()
        ),
        None => format!(" Events: {} ", h.lines.len()),
    };
    let block = Block::bordered()
        .border_style(t.border)
        .title(Span::styled(which, t.title));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    if inner.height == 0 || inner.width == 0 {
        return;
    }
    // The last row says what the log holds and its keys.
    let body = Rect {
        height: inner.height - 1,
        ..inner
    };
    let all = rows(&shown, body.width);
    let fits = usize::from(body.height);
    let back = log.back.min(all.len().saturating_sub(fits));
    let end = all.len() - back;
    let start = end.saturating_sub(fits);
    let lines: Vec<Line> = all[start..end]
        .iter()
        .map(|(stamp, text)| {
            let stamp = match stamp {
                Some(s) => Span::styled(format!("{s}  "), t.dim),
                None => Span::raw(" ".repeat(clock(0.0).len() + 2)),
            };
            Line::from(vec![stamp, Span::raw(text.clone())])
        })
        .collect();
    let lines = if lines.is_empty() {
        vec![Line::styled("no events", t.dim)]
    } else {
        lines
    };
    frame.render_widget(Paragraph::new(lines), body);
    let missed = match h.missed {
        0 => String::new(),
        n => format!("{n} earlier events in harvest.log  "),
    };
    let place = if back == 0 {
        "end".to_string()
    } else {
        format!("{back} rows up")
    };
    let hint = format!(
        "{missed}{place}  ↑↓ PgUp PgDn g G scroll  e {}  Esc back",
        if log.only.is_some() {
            "all"
        } else {
            "this endpoint"
        }
    );
    let foot = Rect {
        y: inner.bottom() - 1,
        height: 1,
        ..inner
    };
    frame.render_widget(
        Paragraph::new(Line::styled(truncate(&hint, foot.width), t.dim)),
        foot,
    );
}
