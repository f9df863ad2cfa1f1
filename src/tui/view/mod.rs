//! Pure drawing: [`render`] paints one frame from the [`UiState`] (its latest snapshot), reading
//! no clock and touching no terminal. The layout keeps the header, the providers and datasets
//! tables and the key footer at 80x24, and adds, as room allows, the event log and then the
//! throughput chart (so they are dropped in the reverse order as the terminal shrinks). On a
//! tall screen the event log takes the rows its events fill (up to a plenty) and the datasets
//! row with the chart grows, instead of the log showing rows of nothing.

mod chart;
mod confirm;
mod datasets;
mod events;
mod footer;
mod grid;
mod header;
mod help;
mod log;
mod providers;
mod quit;
pub(crate) mod text;
mod too_small;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};

use crate::engine::snapshot::Snapshot;

use super::state::UiState;

/// The smallest terminal the TUI draws its screen on; below it says how big it must be.
pub(crate) const MIN_WIDTH: u16 = 80;
pub(crate) const MIN_HEIGHT: u16 = 24;

/// Below this width the chart, when shown, goes under the datasets instead of beside them.
const SIDE_BY_SIDE_WIDTH: u16 = 140;
/// Width the datasets table keeps beside the chart.
const DATASETS_BESIDE_CHART: u16 = 90;
/// Rows of an event pane worth having (two lines); fewer and the last event folds into a
/// line under the header.
const EVENTS_MIN: u16 = 4;
/// Rows of a readable chart (two sparklines of two rows with their labels, and borders).
const CHART_MIN: u16 = 8;
/// The tallest the chart (and beside it the datasets table) grows; more room goes to events.
const CHART_TALL: u16 = 20;
/// Event rows that are plenty (borders included); more room than the events fill goes to the
/// chart first.
const EVENTS_PLENTY: u16 = 12;

/// Where each part goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    pub header: Rect,
    /// The latest event, under the header, when there is no room for the event pane.
    pub fold: Option<Rect>,
    pub providers: Rect,
    pub datasets: Rect,
    pub chart: Option<Rect>,
    pub events: Option<Rect>,
    pub footer: Rect,
}

/// Lays out a screen of at least [`MIN_WIDTH`] x [`MIN_HEIGHT`].
pub(crate) fn plan(area: Rect, s: &Snapshot) -> Plan {
    let n_ep = s.endpoints.len().min(1000) as u16;
    let n_ds = s.datasets.len().min(1000) as u16;
    let body = area.height.saturating_sub(2);
    // Borders and a header row around each table; at least one data row each.
    let ds_want = n_ds.max(1) + 3;
    let prov_want = n_ep.max(1) + 3;
    let ds_h = ds_want.min((body / 3).max(4));
    let prov_h = prov_want.min(body.saturating_sub(ds_h + 1)).max(4);
    let mut rest = body.saturating_sub(ds_h + prov_h);

    // The rows the events fill (with borders), a readable pane at least, a plenty at most.
    let ev_want = (s.events.len().min(100) as u16 + 2).clamp(EVENTS_MIN, EVENTS_PLENTY);
    let side = area.width >= SIDE_BY_SIDE_WIDTH;
    // The row that holds the datasets (and, side by side, the chart), and a chart row below.
    let mut ds_row = ds_h;
    let mut chart_row = 0;
    let mut chart = false;
    if side {
        let extra = CHART_MIN.saturating_sub(ds_h);
        if rest >= extra + EVENTS_MIN {
            chart = true;
            ds_row += extra;
            rest -= extra;
            let grow = rest
                .saturating_sub(ev_want)
                .min(CHART_TALL.saturating_sub(ds_row));
            ds_row += grow;
            rest -= grow;
        }
    } else if rest >= CHART_MIN + EVENTS_MIN {
        chart = true;
        chart_row = CHART_MIN;
        rest -= CHART_MIN;
        let grow = rest.saturating_sub(ev_want).min(CHART_TALL - CHART_MIN);
        chart_row += grow;
        rest -= grow;
    }
    let events = rest >= EVENTS_MIN;
    let (fold_h, events_h, prov_h) = if events {
        (0, rest, prov_h)
    } else {
        // The fold line, and whatever is left to the providers table.
        (1, 0, prov_h + rest.saturating_sub(1))
    };

    let [header, fold, prov, ds_area, chart_area, ev, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(fold_h),
        Constraint::Length(prov_h),
        Constraint::Length(ds_row),
        Constraint::Length(chart_row),
        Constraint::Length(events_h),
        Constraint::Fill(1),
    ])
    .areas(area);
    let footer = Rect {
        y: area.bottom().saturating_sub(1),
        height: 1,
        ..footer
    };
    let (datasets, chart_rect) = if chart && side {
        let left = (ds_area.width * 11 / 20).max(DATASETS_BESIDE_CHART);
        let [l, r] =
            Layout::horizontal([Constraint::Length(left), Constraint::Fill(1)]).areas(ds_area);
        (l, Some(r))
    } else if chart {
        (ds_area, Some(chart_area))
    } else {
        (ds_area, None)
    };
    Plan {
        header,
        fold: (fold_h > 0).then_some(fold),
        providers: prov,
        datasets,
        chart: chart_rect,
        events: events.then_some(ev),
        footer,
    }
}

/// Draws the whole screen (in ASCII alone where the locale takes no UTF-8).
pub fn render(frame: &mut Frame, state: &UiState) {
    render_views(frame, state);
    if state.theme.ascii {
        super::glyphs::asciify(frame.buffer_mut());
    }
}

/// The views over the screen.
fn render_views(frame: &mut Frame, state: &UiState) {
    let area = frame.area();
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        too_small::render(frame, area, state);
        confirm::render(frame, area, state);
        if state.quit_dialog {
            quit::render(frame, area, state);
        }
        return;
    }
    if let Some(log) = &state.log {
        log::render(frame, area, state, log);
        confirm::render(frame, area, state);
        if state.quit_dialog {
            quit::render(frame, area, state);
        }
        return;
    }
    let p = plan(area, &state.snapshot);
    let shows_model = header::render(frame, p.header, state);
    if let Some(r) = p.fold {
        events::render_fold(frame, r, state);
    }
    providers::render(frame, p.providers, state, !shows_model);
    datasets::render(frame, p.datasets, state);
    if let Some(r) = p.chart {
        chart::render(frame, r, state);
    }
    if let Some(r) = p.events {
        events::render(frame, r, state);
    }
    footer::render(frame, p.footer, state);
    if state.help {
        help::render(frame, area, state);
    }
    confirm::render(frame, area, state);
    if state.quit_dialog {
        quit::render(frame, area, state);
    }
}

/// A `w` x `h` rectangle centred in `area` (clipped to it).
/// Draws `lines` in a box `w` wide, centred over whatever is below (help, quit dialog).
fn overlay(
    frame: &mut Frame,
    area: Rect,
    w: u16,
    lines: Vec<ratatui::text::Line<'static>>,
    block: ratatui::widgets::Block<'static>,
    style: ratatui::style::Style,
) {
    use ratatui::widgets::{Clear, Paragraph, Wrap};
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = centered(area, w, h);
    frame.render_widget(Clear, r);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .style(style)
            .block(block),
        r,
    );
}

fn centered(area: Rect, w: u16, h: u16) -> Rect {
    let w = w.min(area.width);
    let h = h.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

#[cfg(test)]
mod ascii_tests;
#[cfg(test)]
mod fidelity_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod money_tests;
#[cfg(test)]
mod tests;

/// The engine loop's lag as the header shows it: in 5 ms steps (the jitter below that says
/// nothing, and would redraw an idle screen at every tick).
pub(crate) fn lag_shown(ms: f64) -> f64 {
    (ms / 5.0).round() * 5.0
}
