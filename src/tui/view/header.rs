//! The header line: model, run state and elapsed time, in flight vs limit, the spend split into
//! what it is (booked in the ledger, streaming in flight) against the budget and its mode, a
//! gauge, the projection (where the spend is expected to end) and, while stopping or in the
//! budget's last stretch, the worst case still possible; a warning while many answers are cut
//! while thinking; the ETA (while draining: when the last request in flight is expected to
//! end). Parts give way as the width shrinks: the brand, then the model (the providers title
//! takes it), long labels and the gauge, then the projection, the last stretch, the budget
//! mode, the reason, the worst case and the clock; state, in flight, the spend and the ETA
//! always stay.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;

use crate::config::BudgetMode;
use crate::domain::{Usd, clock, duration};
use crate::engine::snapshot::RunState;

use super::super::state::UiState;
use super::text::{bar, count};

#[derive(Clone, Copy)]
struct Opts {
    /// The client's own health: event-loop lag.
    health: bool,
    brand: bool,
    model: bool,
    reason: bool,
    /// Long labels (`in flight`, `booked`, `streaming`, `last stretch`) rather than short.
    long: bool,
    /// Gauge cells (0: none).
    gauge: u16,
    /// Blanks between parts.
    sep: usize,
    /// The projection, the budget's last stretch, the budget mode, the worst case, the
    /// elapsed time: shed about in that order (the worst case late: while stopping it is the
    /// figure that matters), so that the ETA always stays.
    proj: bool,
    stretch: bool,
    worst: bool,
    mode: bool,
    clock: bool,
}

const FULL: Opts = Opts {
    health: true,
    brand: true,
    model: true,
    reason: true,
    long: true,
    gauge: 20,
    sep: 2,
    proj: true,
    stretch: true,
    worst: true,
    mode: true,
    clock: true,
};

/// The narrowest form that still has everything but the model, the brand and the gauge.
const NARROW: Opts = Opts {
    health: false,
    brand: false,
    model: false,
    long: false,
    gauge: 0,
    sep: 1,
    ..FULL
};

/// The narrow form without the projection, the last stretch, the budget mode and the reason.
const BARE: Opts = Opts {
    proj: false,
    stretch: false,
    mode: false,
    reason: false,
    ..NARROW
};

/// From the richest header to the barest.
const TRIES: [Opts; 17] = [
    FULL,
    Opts {
        health: false,
        ..FULL
    },
    Opts {
        health: false,
        gauge: 12,
        ..FULL
    },
    Opts {
        health: false,
        brand: false,
        gauge: 12,
        ..FULL
    },
    // The labels say what each figure is: they go after the model (the providers title
    // shows it) and after the gauge has narrowed.
    Opts {
        long: true,
        gauge: 12,
        sep: 2,
        ..NARROW
    },
    Opts {
        long: true,
        gauge: 8,
        ..NARROW
    },
    Opts {
        gauge: 12,
        sep: 2,
        ..NARROW
    },
    Opts { gauge: 8, ..NARROW },
    Opts { gauge: 5, ..NARROW },
    NARROW,
    Opts {
        proj: false,
        ..NARROW
    },
    Opts {
        proj: false,
        stretch: false,
        ..NARROW
    },
    Opts {
        proj: false,
        stretch: false,
        mode: false,
        ..NARROW
    },
    // The last figures: the elapsed time gives way to the worst case (while a run stops it
    // is what matters), then the worst case to it, then both.
    BARE,
    Opts {
        clock: false,
        ..BARE
    },
    Opts {
        worst: false,
        ..BARE
    },
    Opts {
        clock: false,
        worst: false,
        ..BARE
    },
];

/// Draws the header; returns whether it shows the model (else the providers title does).
pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) -> bool {
    let last = TRIES[TRIES.len() - 1];
    let (opts, line) = TRIES
        .iter()
        .map(|o| (*o, line(state, *o)))
        .find(|(_, l)| l.width() <= usize::from(area.width))
        .unwrap_or_else(|| (last, line(state, last)));
    frame.render_widget(Paragraph::new(line), area);
    opts.model
}

fn line(state: &UiState, o: Opts) -> Line<'static> {
    let s = &state.snapshot;
    let t = &state.theme;
    let mut spans: Vec<Span<'static>> = Vec::new();
    let sep = || Span::raw(" ".repeat(o.sep));
    if o.brand {
        spans.push(Span::styled(" harvest", t.title));
        spans.push(sep());
    }
    if o.model {
        spans.push(Span::styled(s.model.clone(), t.bold));
        spans.push(sep());
    }
    spans.push(Span::styled(
        format!(" {} ", s.state.label()),
        t.run_state(s.state),
    ));
    if o.clock {
        spans.push(Span::raw(format!(" {}", clock(s.elapsed_s))));
    }
    if o.reason
        && let Some(r) = &s.reason
    {
        spans.push(Span::styled(format!(" ({r})"), t.warn));
    }
    if o.reason
        && let Some(share) = s.cut_thinking_share
    {
        // max_tokens is below what the model thinks: the operator should raise it.
        let text = if o.long {
            format!(
                " cut while thinking {:.0}%: raise max_tokens",
                share * 100.0
            )
        } else {
            format!(" cut thinking {:.0}%", share * 100.0)
        };
        spans.push(Span::styled(text, t.warn));
    }
    spans.push(sep());
    spans.push(Span::styled(
        if o.long { "in flight " } else { "fly " },
        t.dim,
    ));
    spans.push(Span::raw(format!(
        "{}/{}",
        count(s.in_flight),
        count(u64::from(s.concurrency_limit))
    )));
    if let Some(b) = &s.inflight_budget {
        // Why fewer streams run than the limit: the account's budget, learned.
        spans.push(Span::styled(format!(" ({b})"), t.warn));
    }
    spans.push(sep());
    spans.extend(money(state, o));
    if o.gauge > 0 {
        spans.push(Span::raw(" "));
        spans.extend(budget_gauge(state, o.gauge));
    }
    if o.proj
        && let Some(p) = s.projected
    {
        spans.push(Span::styled(" proj ", t.dim));
        spans.push(Span::raw(usd(p)));
    }
    if o.worst
        && let Some(w) = s.worst_case
    {
        // The most the spend can still come to: its own figure, not the projection's.
        let style = if w > s.budget { t.warn } else { t.dim };
        spans.push(Span::styled(" worst ", style));
        spans.push(Span::raw(usd(w)));
    }
    if o.stretch
        && let Some(last) = s.last_stretch_s
    {
        // Worst-case reservations hold requests back: why the run slows near the budget.
        let label = if o.long { " last stretch " } else { " last " };
        spans.push(Span::styled(label, t.warn));
        spans.push(Span::raw(duration(last)));
        let sent = s.stretch_stoppable + s.stretch_worst;
        if o.long && sent > 0 {
            // Which share went where a close stops the bill (their expectation reserved).
            let pct = s.stretch_stoppable * 100 / sent;
            spans.push(Span::styled(format!(" {pct}% stoppable"), t.dim));
        }
    }
    spans.push(sep());
    spans.extend(time_left(state, o.long));
    if o.health {
        // Tells a slow provider from a slow client: how late the engine's own loop runs.
        spans.push(sep());
        spans.push(Span::styled("client lag ", t.dim));
        let lag = super::lag_shown(s.loop_lag_ms);
        let style = if lag >= 100.0 { t.warn } else { t.dim };
        let shown = if lag < 5.0 {
            "<5ms".to_string()
        } else {
            format!("{lag:.0}ms")
        };
        spans.push(Span::styled(shown, style));
    }
    Line::from(spans)
}

/// A dollar figure as the header shows it: cents (`<$0.01` for less than a cent but not
/// nothing), thousands grouped.
fn usd(u: Usd) -> String {
    if u == Usd::ZERO {
        "$0.00".into()
    } else {
        super::text::money(u)
    }
}

/// The spend, split into what it is: booked (the ledger), streaming (accrued by the streams
/// in flight, not in the ledger yet), against the budget and its mode (`hard`: never past it;
/// `expected`: streams billed anyway may run past it). The budget reads `$100` short.
fn money(state: &UiState, o: Opts) -> Vec<Span<'static>> {
    let (s, t) = (&state.snapshot, &state.theme);
    let (booked, streaming) = if o.long {
        ("booked ", " streaming ")
    } else {
        ("bk ", " strm ")
    };
    let budget = if o.long || s.budget.pico() % Usd::from_f64(1.0).pico() != 0 {
        usd(s.budget)
    } else {
        format!("${}", count(s.budget.as_f64().round() as u64))
    };
    let mut v = vec![
        Span::styled(booked, t.dim),
        Span::raw(usd(s.booked)),
        Span::styled(streaming, t.dim),
        Span::raw(usd(s.streaming())),
        Span::styled(if o.long { " of " } else { " /" }, t.dim),
        Span::raw(budget),
    ];
    if o.mode {
        let mode = match s.budget_mode {
            BudgetMode::Hard => " hard",
            BudgetMode::Expected => " expected",
        };
        v.push(Span::styled(mode, t.dim));
    }
    v
}

/// The spend against the budget as a bar `width` cells wide, with the projection marked: red
/// from 90% spent, amber when the projection reaches the budget.
fn budget_gauge(state: &UiState, width: u16) -> Vec<Span<'static>> {
    let (s, t) = (&state.snapshot, &state.theme);
    let budget = s.budget.as_f64();
    let ratio = if budget > 0.0 {
        s.spent_with_accrued().as_f64() / budget
    } else {
        0.0
    };
    let proj = s
        .projected
        .filter(|_| budget > 0.0)
        .map(|p| p.as_f64() / budget);
    let fill = if ratio >= 0.9 {
        t.bad
    } else if proj.is_some_and(|p| p >= 0.99) {
        t.warn
    } else {
        t.gauge_filled
    };
    bar(ratio, proj, width, fill, t.gauge_empty)
}

/// The time left: the drain's own progress (when the last request in flight is expected to
/// end), or the run's ETA (in the tail, said to be the last streams': `(tail: 4 streams)`, or
/// `(tail 4)` short).
fn time_left(state: &UiState, long: bool) -> [Span<'static>; 2] {
    let (s, t) = (&state.snapshot, &state.theme);
    if s.state == RunState::Draining {
        let left = match s.drain_left_s {
            _ if s.in_flight == 0 => "done".to_string(),
            Some(left) if left < 1.0 => "any moment".to_string(),
            Some(left) => format!("~{}", duration(left)),
            // Unknown, but the grace closes what is left by then.
            None => match s.drain_grace_left_s {
                Some(g) => format!("≤{}", duration(g)),
                None => "-".into(),
            },
        };
        return [Span::styled("drain ", t.dim), Span::raw(left)];
    }
    let mut eta = match s.eta_s {
        Some(e) if !state.finished() && s.eta_at_budget => format!("{} (budget)", duration(e)),
        Some(e) if !state.finished() => duration(e),
        _ => "-".into(),
    };
    if s.tail_streams > 0 && !state.finished() {
        // Every prompt sent: the time is the last streams' (slow ones make it long).
        let n = s.tail_streams;
        let streams = if n == 1 { "stream" } else { "streams" };
        eta.push_str(&if long {
            format!(" (tail: {} {streams})", count(n))
        } else {
            format!(" (tail {})", count(n))
        });
    }
    [Span::styled("ETA ", t.dim), Span::raw(eta)]
}
