//! The providers table: one row per endpoint with the include mark, what the API lists (tag,
//! quantization with its fidelity mark, prices, status, uptime), what we observed (in flight,
//! done, errors and their main kind, tok/s, TTFT p50, mean output length, truncation, spend)
//! and why the endpoint is off. Columns drop as the width shrinks: TTFT, length and truncation
//! first, then $/M in, then the rest of what is not needed at 80 columns.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use crate::engine::reason::OffReason;
use crate::engine::snapshot::EndpointSnap;
use crate::policy::{Exclusion, Fidelity};

use super::super::sort::SortColumn;
use super::super::state::{Pane, UiState, included};
use super::super::theme::Theme;
use super::grid::{self, Row};
use super::text::{
    ColSpec, MUST, clean, clean_cut, count, fit, money, rate, shown, truncate, width,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Col {
    Mark,
    Provider,
    Tag,
    Quant,
    PriceIn,
    PriceOut,
    Api,
    Up,
    Fly,
    Done,
    Err,
    TokS,
    Ttft,
    Len,
    Trunc,
    Spent,
    Why,
}

/// Every column, in enum order (`Col as usize` indexes it).
const COLS: [Col; 17] = [
    Col::Mark,
    Col::Provider,
    Col::Tag,
    Col::Quant,
    Col::PriceIn,
    Col::PriceOut,
    Col::Api,
    Col::Up,
    Col::Fly,
    Col::Done,
    Col::Err,
    Col::TokS,
    Col::Ttft,
    Col::Len,
    Col::Trunc,
    Col::Spent,
    Col::Why,
];
// `Col as usize` indexes a row's texts: the order above must be the enum's.
const _: () = {
    let mut i = 0;
    while i < COLS.len() {
        assert!(COLS[i] as usize == i);
        i += 1;
    }
};

impl Col {
    fn header(self) -> &'static str {
        match self {
            Col::Mark => "",
            Col::Provider => "provider",
            Col::Tag => "tag",
            Col::Quant => "quant",
            Col::PriceIn => "$/M in",
            Col::PriceOut => "$/M out",
            Col::Api => "api",
            Col::Up => "up30m",
            Col::Fly => "fly",
            Col::Done => "done",
            Col::Err => "err",
            Col::TokS => "tok/s",
            Col::Ttft => "ttft50",
            Col::Len => "len",
            Col::Trunc => "trunc",
            Col::Spent => "spent",
            Col::Why => "why idle",
        }
    }

    fn right(self) -> bool {
        !matches!(
            self,
            Col::Mark | Col::Provider | Col::Tag | Col::Quant | Col::Why | Col::Err
        )
    }

    /// Drop order: lowest first.
    fn keep(self) -> u8 {
        match self {
            Col::Mark
            | Col::Provider
            | Col::Quant
            | Col::PriceOut
            | Col::Up
            | Col::TokS
            | Col::Spent => MUST,
            Col::Why => 90,
            Col::Err => 85,
            Col::Done => 80,
            Col::Fly => 75,
            Col::Api => 70,
            Col::Tag => 65,
            Col::PriceIn => 60,
            Col::Trunc => 50,
            Col::Len => 45,
            Col::Ttft => 40,
        }
    }

    fn sort(self) -> Option<SortColumn> {
        match self {
            Col::Provider => Some(SortColumn::Provider),
            Col::Tag => Some(SortColumn::Tag),
            Col::Quant => Some(SortColumn::Quant),
            Col::PriceIn => Some(SortColumn::PriceIn),
            Col::PriceOut => Some(SortColumn::PriceOut),
            Col::Up => Some(SortColumn::Up),
            Col::Fly => Some(SortColumn::Fly),
            Col::Done => Some(SortColumn::Done),
            Col::Err => Some(SortColumn::Errors),
            Col::TokS => Some(SortColumn::TokPerS),
            Col::Ttft => Some(SortColumn::Ttft),
            Col::Len => Some(SortColumn::Len),
            Col::Trunc => Some(SortColumn::Trunc),
            Col::Spent => Some(SortColumn::Spent),
            Col::Mark | Col::Api | Col::Why => None,
        }
    }
}

/// The widest a column of listing text grows, however long what the server wrote (a real
/// provider name, tag or quantization is well inside): a 10,000-character name would
/// otherwise take the table's whole width from every other column.
const PROVIDER_MAX: u16 = 24;
const TAG_MAX: u16 = 32;
const QUANT_MAX: u16 = 10;
const WHY_MAX: u16 = 80;

/// The endpoint's quantization as listed, cleaned and cut, padded to `quant_w` cells.
fn quant(e: &EndpointSnap, quant_w: u16) -> String {
    let q = clean_cut(&e.quantization, QUANT_MAX);
    let pad = usize::from(quant_w.saturating_sub(width(&q)));
    format!("{q}{}", " ".repeat(pad))
}

/// The text of a cell before it is fitted (also what its width is measured on). What the
/// listing wrote is [`clean`]ed and cut to its column's widest.
fn text(c: Col, e: &EndpointSnap, quant_w: u16) -> String {
    let dash = || "-".to_string();
    match c {
        Col::Mark => format!("  {}", if included(e) { "[x]" } else { "[ ]" }),
        Col::Provider => clean_cut(&e.provider, PROVIDER_MAX),
        Col::Tag => clean_cut(&e.tag, TAG_MAX),
        Col::Quant => format!("{} {}", quant(e, quant_w), e.fidelity.mark()),
        Col::PriceIn => format!("{:.2}", e.price_in_per_m),
        Col::PriceOut => format!("{:.2}", e.price_out_per_m),
        Col::Api => match e.status {
            Some(0) => "ok".into(),
            Some(n) => n.to_string(),
            None => dash(),
        },
        Col::Up => e.uptime_30m.map_or_else(dash, |u| format!("{u:.1}%")),
        Col::Fly => count(e.in_flight),
        Col::Done => count(e.done),
        Col::Err => match (&e.top_error, e.errors) {
            (_, 0) => dash(),
            (Some((kind, _)), n) => format!("{} {kind}", count(n)),
            (None, n) => count(n),
        },
        Col::TokS => rate(e.tok_per_s),
        Col::Ttft => e
            .ttft_p50_ms
            .map_or_else(dash, |ms| format!("{:.1}s", ms as f64 / 1000.0)),
        Col::Len => e
            .mean_output_tokens
            .map_or_else(dash, |m| count(m.round() as u64)),
        Col::Trunc => e
            .truncation_rate
            .map_or_else(dash, |t| format!("{:.1}%", t * 100.0)),
        Col::Spent => money(e.spent),
        // A re-quantization's reason quotes the listing.
        Col::Why => clean_cut(&why(e), WHY_MAX),
    }
}

/// Why the endpoint is off, and the mark of an inclusion against the policy (it stays while
/// the row serves: `operator: in (policy: unknown quant)`).
/// Why the row serves nothing: it is off (and why), or it may serve and gets nothing (and
/// why); and the mark of an inclusion against the policy.
fn why(e: &EndpointSnap) -> String {
    let off = (e.off.as_ref().map(ToString::to_string))
        .or_else(|| e.idle.as_ref().map(ToString::to_string));
    let over = override_of(e).map(|x| format!("operator: in ({x})"));
    match (off, over) {
        (Some(o), Some(v)) => format!("{o}; {v}"),
        (o, v) => o.or(v).unwrap_or_default(),
    }
}

/// The policy's reason, when the operator included the endpoint against it.
fn override_of(e: &EndpointSnap) -> Option<String> {
    let x = e.policy_off.as_ref().filter(|_| e.operator == Some(true))?;
    Some(super::text::policy_words(x))
}

/// A reason that fits `w`: whole, else without its `policy: ` / `down: ` prefix (the rest
/// still says what is wrong; the mark of an inclusion against the policy becomes `in (...)`),
/// else cut with `…`.
pub(super) fn fit_reason(reason: &str, w: u16) -> String {
    if width(reason) <= w {
        return reason.to_string();
    }
    let short = reason
        .strip_prefix("policy: ")
        .or_else(|| reason.strip_prefix("down: "))
        .unwrap_or(reason)
        .replace("operator: in (", "in (")
        .replace("(policy: ", "(")
        .replace("(down: ", "(");
    // The mark alone, one cell narrower still: `in: unknown quant`.
    let short = match short.strip_prefix("in (").and_then(|r| r.strip_suffix(')')) {
        Some(why) if width(&short) > w => format!("in: {why}"),
        _ => short,
    };
    truncate(&short, w)
}

fn why_style(t: &Theme, why: Option<&OffReason>) -> Style {
    match why {
        Some(OffReason::Policy {
            exclusion: Exclusion::Down(_),
        })
        | Some(OffReason::Gone) => t.bad,
        Some(
            OffReason::Breaker { .. } | OffReason::BreakerProbing | OffReason::RateLimited { .. },
        ) => t.warn,
        _ => t.text,
    }
}

/// The cell of column `c`, from its text `raw` ([`text`]).
fn cell(
    c: Col,
    e: &EndpointSnap,
    raw: String,
    w: u16,
    quant_w: u16,
    selected: bool,
    t: &Theme,
) -> Line<'static> {
    let line = match c {
        Col::Mark => {
            let sel = if selected { ">" } else { " " };
            let mark = if included(e) { "[x]" } else { "[ ]" };
            Line::from(vec![
                Span::styled(sel, t.bold),
                Span::raw(" "),
                Span::raw(mark),
            ])
        }
        Col::Quant => {
            let mark_style = t.fidelity(e.fidelity);
            let q = format!("{} ", quant(e, quant_w));
            let q_style = match e.fidelity {
                Fidelity::Requantized | Fidelity::Unknown => mark_style,
                _ => t.text,
            };
            Line::from(vec![
                Span::styled(truncate(&q, w.saturating_sub(1)), q_style),
                Span::styled(e.fidelity.mark(), mark_style.patch(t.bold)),
            ])
        }
        Col::Err => {
            let s = if width(&raw) > w {
                count(e.errors)
            } else {
                raw
            };
            let style = if e.errors > 0 { t.warn } else { t.text };
            Line::styled(s, style)
        }
        Col::Api => {
            let style = match e.status {
                Some(0) | None => t.text,
                Some(_) => t.bad,
            };
            Line::styled(raw, style)
        }
        Col::Up => {
            let style = match e.uptime_30m {
                Some(u) if u < 50.0 => t.bad,
                Some(u) if u < 90.0 => t.warn,
                _ => t.text,
            };
            Line::styled(raw, style)
        }
        Col::Why => {
            let style = match e.off {
                // Serving against the policy: the mark stands out.
                None if override_of(e).is_some() => t.warn,
                // Allowed and idle: the operator may want to act on it.
                None if e.idle.is_some() => t.warn,
                _ => why_style(t, e.off.as_ref()),
            };
            Line::styled(fit_reason(&raw, w), style)
        }
        _ => Line::raw(truncate(&raw, w)),
    };
    if c.right() {
        line.right_aligned()
    } else {
        line
    }
}

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState, with_model: bool) {
    let t = &state.theme;
    let order = state.endpoints();
    let focused = state.focus == Pane::Providers;
    let room = usize::from(area.width.saturating_sub(2));
    let block = Block::bordered()
        .border_style(if focused { t.border_focused } else { t.border })
        .title(title(state, with_model, room));
    let inner = block.inner(area);

    let quant_w = order
        .iter()
        .map(|e| width(&clean_cut(&e.quantization, QUANT_MAX)))
        .max()
        .unwrap_or(4);
    // Each cell's text, formatted once: measured for the widths, then drawn.
    let texts: Vec<Vec<String>> = order
        .iter()
        .map(|e| COLS.iter().map(|&c| text(c, e, quant_w)).collect())
        .collect();
    let widths = fit(&col_specs(&order, &texts), inner.width, 1);
    let shown: Vec<(Col, u16)> = shown(&COLS, &widths);
    let header = header_row(&shown, state);

    // Scroll so the selected row is visible.
    let visible = usize::from(inner.height.saturating_sub(1));
    let sel = state.selected_row().unwrap_or(0);
    let offset = if visible == 0 {
        0
    } else {
        sel.saturating_sub(visible - 1)
    };
    let rows: Vec<Row> = order
        .iter()
        .zip(texts)
        .skip(offset)
        .take(visible)
        .map(|(e, mut row_texts)| {
            let selected = state.selected.as_deref() == Some(e.tag.as_str());
            let mut style = if included(e) { t.text } else { t.dim };
            if selected {
                style = style.patch(if focused {
                    t.selected
                } else {
                    t.selected_unfocused
                });
            }
            Row {
                style,
                cells: shown
                    .iter()
                    .map(|(c, w)| {
                        let raw = std::mem::take(&mut row_texts[*c as usize]);
                        cell(*c, e, raw, *w, quant_w, selected, t)
                    })
                    .collect(),
            }
        })
        .collect();
    let hidden = order.len().saturating_sub(offset + rows.len());
    let mut block = block;
    // The `spent` column sums to the header's booked figure with this.
    let elsewhere = state.snapshot.booked_no_endpoint;
    if let Some(l) = super::text::booked_elsewhere(elsewhere, "endpoint", t.dim) {
        block = block.title_bottom(l);
    }
    if offset > 0 || hidden > 0 {
        let mut parts = Vec::new();
        if offset > 0 {
            parts.push(format!("↑ {offset} more"));
        }
        if hidden > 0 {
            parts.push(format!("↓ {hidden} more"));
        }
        block = block
            .title_bottom(Line::styled(format!(" {} ", parts.join("  ")), t.dim).right_aligned());
    }
    frame.render_widget(block, area);
    let widths: Vec<u16> = shown.iter().map(|(_, w)| *w).collect();
    grid::table(frame.buffer_mut(), inner, &widths, &header, &rows);
}

/// The pane's title: the model (when asked), how many endpoints are allowed, the policy in force
/// and the sort, dropping the policy and then the sort when `room` is too narrow.
fn title(state: &UiState, with_model: bool, room: usize) -> Line<'static> {
    let t = &state.theme;
    let s = &state.snapshot;
    let allowed = s.endpoints.iter().filter(|e| e.allowed).count();
    // The policy in force, as the engine states it (older state files: inferred from marks).
    let native_span = if s.policy.is_empty() {
        s.endpoints
            .iter()
            .find(|e| e.fidelity == Fidelity::Native)
            .map(|e| {
                let q = clean_cut(&e.quantization, QUANT_MAX);
                Span::styled(format!(" native {q} "), t.dim)
            })
    } else {
        Some(Span::styled(
            format!(" policy: {} ", clean(&s.policy)),
            t.dim,
        ))
    };
    let sort = Span::styled(
        format!(
            " sort: {} {} ",
            state.sort.column.label(),
            state.sort.dir.arrow()
        ),
        t.dim,
    );
    let title = |with_native: bool, with_sort: bool| {
        let mut v = vec![Span::styled(" Providers ", t.title)];
        if with_model {
            v.push(Span::styled(format!(" {} ", clean(&s.model)), t.bold));
        }
        v.push(Span::raw(format!(
            " {} of {} allowed ",
            allowed,
            s.endpoints.len()
        )));
        if let Some(f) = &state.filter {
            let cursor = if f.typing { "_" } else { "" };
            v.push(Span::styled(
                format!(
                    " /{}{cursor} {} shown ",
                    clean(&f.text),
                    state.endpoints().len()
                ),
                t.bold,
            ));
        }
        if with_native && let Some(n) = &native_span {
            v.push(n.clone());
        }
        if with_sort {
            v.push(sort.clone());
        }
        Line::from(v)
    };
    [(true, true), (false, true), (false, false)]
        .into_iter()
        .map(|(n, so)| title(n, so))
        .find(|l| l.width() <= room)
        .unwrap_or_else(|| title(false, false))
}

/// How wide each column wants to be, and how far it may shrink, given its cells' `texts`.
fn col_specs(order: &[&EndpointSnap], texts: &[Vec<String>]) -> Vec<ColSpec> {
    COLS.iter()
        .enumerate()
        .map(|(ci, &c)| {
            let want = texts
                .iter()
                .map(|row| width(&row[ci]))
                .chain([width(c.header())])
                .max()
                .unwrap_or(1);
            let min = match c {
                Col::Provider => want.min(10),
                Col::Tag => want.min(10),
                Col::Why => want.min(16),
                Col::Err => want.min(3),
                _ => want,
            };
            // The error count is whole without its kind.
            let whole = if c == Col::Err {
                order
                    .iter()
                    .map(|e| width(&count(e.errors)))
                    .chain([width(c.header())])
                    .max()
                    .unwrap_or(3)
            } else {
                want
            };
            ColSpec {
                min: min.min(whole),
                want,
                whole,
                keep: c.keep(),
                flex: c == Col::Why,
            }
        })
        .collect()
}

/// The header row, the sort column marked.
fn header_row(shown: &[(Col, u16)], state: &UiState) -> Row<'static> {
    let t = &state.theme;
    Row {
        style: Style::default(),
        cells: shown
            .iter()
            .map(|(c, w)| {
                let style = if c.sort() == Some(state.sort.column) {
                    t.sort_column
                } else {
                    t.header_row
                };
                let l = Line::styled(truncate(c.header(), *w), style);
                if c.right() { l.right_aligned() } else { l }
            })
            .collect(),
    }
}
