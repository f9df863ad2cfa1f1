//! Progress lines and the end-of-run summary, from the same [`Snapshot`] the TUI draws, so the
//! numbers agree everywhere.

use crate::domain::{Tokens, clock, duration, group_thousands};
use crate::engine::snapshot::{DatasetState, Snapshot};

/// One progress line.
/// The events logged since a follower had seen `seen` of them, one line each with the run's
/// clock; returns them and the new count. Events older than the snapshot's window are skipped.
pub(crate) fn new_events(s: &Snapshot, seen: u64) -> (Vec<String>, u64) {
    let fresh = s.events_total.saturating_sub(seen) as usize;
    let lines = s.events[s.events.len().saturating_sub(fresh)..]
        .iter()
        .map(|e| format!("[{}] {}", clock(e.at_s), e.text))
        .collect();
    (lines, s.events_total)
}

pub(crate) fn progress_line(s: &Snapshot) -> String {
    let errors: u64 = s.endpoints.iter().map(|e| e.errors).sum();
    let mut line = format!(
        "[{}] {:<8} done {}/{}",
        clock(s.elapsed_s),
        s.state.label(),
        group_thousands(s.done),
        group_thousands(s.total)
    );
    if s.rejected > 0 {
        line.push_str(&format!(" +{} rej", group_thousands(s.rejected)));
    }
    line.push_str(&format!(
        "  in flight {}/{}  {} tok/s  {:.2}/{:.2} USD",
        group_thousands(s.in_flight),
        group_thousands(u64::from(s.concurrency_limit)),
        group_thousands(s.tok_per_s.round() as u64),
        s.spent_with_accrued().as_f64(),
        s.budget.as_f64()
    ));
    if let Some(b) = &s.inflight_budget {
        line.push_str(&format!("  ({b})"));
    }
    if let Some(p) = s.projected {
        line.push_str(&format!(" (proj {:.2})", p.as_f64()));
    }
    if let Some(w) = s.worst_case {
        line.push_str(&format!(" (worst {:.2})", w.as_f64()));
    }
    if let Some(eta) = s.eta_s {
        let at = if s.eta_at_budget { " (budget)" } else { "" };
        line.push_str(&format!("  ETA {}{at}", duration(eta)));
    }
    if s.tail_streams > 0 {
        // Every prompt sent: the ETA (or its absence, stalled) is the last streams'.
        let n = s.tail_streams;
        let streams = if n == 1 { "stream" } else { "streams" };
        line.push_str(&format!("  (tail: {} {streams})", group_thousands(n)));
    }
    if let Some(last) = s.last_stretch_s {
        line.push_str(&format!(
            "  budget last stretch {} ({})",
            duration(last),
            stretch_shares(s)
        ));
    }
    if let Some(share) = s.cut_thinking_share {
        line.push_str(&format!(
            "  cut while thinking {:.0}% (raise max_tokens)",
            share * 100.0
        ));
    }
    if let Some(d) = drain_progress(s) {
        line.push_str(&format!("  {d}"));
    }
    if errors > 0 || s.retries > 0 {
        line.push_str(&format!("  errors {errors} retries {}", s.retries));
    }
    line
}

/// A drain's own progress, while the run drains: requests left and when the last is expected
/// to end (`drain: 120 left, the last in ~45s`). `None` when the run is not draining.
pub(crate) fn drain_progress(s: &Snapshot) -> Option<String> {
    if s.state != crate::engine::snapshot::RunState::Draining {
        return None;
    }
    let left = group_thousands(s.in_flight);
    Some(match s.drain_left_s {
        _ if s.in_flight == 0 => "drain: nothing left in flight".to_string(),
        Some(t) if t < 1.0 => format!("drain: {left} left, due any moment"),
        Some(t) => format!("drain: {left} left, the last in ~{}", duration(t)),
        None => match s.drain_grace_left_s {
            Some(g) => format!(
                "drain: {left} left, when unknown; the grace closes them in {}",
                duration(g)
            ),
            None => format!("drain: {left} left"),
        },
    })
}

/// The end-of-run (or `harvest status`) summary.
pub(crate) fn summary(s: &Snapshot) -> String {
    summary_of(s, false)
}

/// The summary; `live` when the run's engine answered on its control socket: it settles the
/// open look-ups itself, as the API answers them (`harvest status` of a live run).
pub(crate) fn summary_of(s: &Snapshot, live: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{}  {}  {} after {}{}\n",
        s.model,
        s.routing,
        s.state.label(),
        duration(s.elapsed_s),
        s.reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    ));
    out.push_str(&format!(
        "prompts: {} done, {} rejected, {} total; {} retries\n",
        group_thousands(s.done),
        group_thousands(s.rejected),
        group_thousands(s.total),
        group_thousands(s.retries)
    ));
    out.push_str(&format!(
        "spend: {:.4} USD of {:.2} (ledger; {:.4} carried over from earlier runs)",
        s.spent.as_f64(),
        s.budget.as_f64(),
        s.carried_over.as_f64()
    ));
    if s.spent > s.budget {
        out.push_str(&format!(
            "; over budget by {:.4}",
            (s.spent - s.budget).as_f64()
        ));
        if s.carried_over >= s.budget {
            // Not this run's doing: it sent nothing past the budget.
            out.push_str(", spent before this run");
        }
    }
    out.push('\n');
    if s.open_look_ups.count > 0 {
        out.push_str(&format!(
            "open look-ups: {} streams closed or left in flight that /generation has not \
             confirmed, expected {:.4} USD more than the ledger holds until the API says what \
             they cost: {}\n",
            group_thousands(s.open_look_ups.count),
            s.open_look_ups.expected.as_f64(),
            if live {
                "the live run is settling them as the API answers"
            } else {
                "the next `harvest run` or `harvest status DIR --reconcile` settles them"
            }
        ));
    }
    if let Some(last) = s.last_stretch_s {
        out.push_str(&format!(
            "budget: the last stretch took the final {} of the run: {}\n",
            duration(last),
            stretch_shares(s)
        ));
    }
    if let (Some(a), Some(b)) = (s.key_usage_start, s.key_usage_now) {
        out.push_str(&format!(
            "API key usage: {:.4} USD this run ({a:.4} -> {b:.4})\n",
            b - a
        ));
    }
    out.push_str("dataset      done / total    rej   output tokens          spent  state\n");
    for d in &s.datasets {
        let budget = d
            .output_token_budget
            .map(|b| format!(" / {}", Tokens(b)))
            .unwrap_or_default();
        out.push_str(&format!(
            "{:<10} {:>7} / {:<7} {:>5}   {:>20} {:>10.4}  {}\n",
            d.name,
            group_thousands(d.done),
            group_thousands(d.total),
            group_thousands(d.rejected),
            format!("{}{budget}", Tokens(d.output_tokens)),
            d.spent.as_f64(),
            match d.state {
                DatasetState::Queued => "queued",
                DatasetState::Running => "running",
                DatasetState::BudgetReached => "budget reached",
                DatasetState::Draining => "draining",
                DatasetState::Stopped => "stopped",
                DatasetState::Done => "done",
            }
        ));
    }
    let used: Vec<_> = s
        .endpoints
        .iter()
        .filter(|e| e.done > 0 || e.errors > 0)
        .collect();
    if !used.is_empty() {
        out.push_str("endpoint            done  errors  ttft p50  mean out  trunc       spent\n");
        for e in used {
            out.push_str(&format!(
                "{:<18} {:>5} {:>7}  {:>8}  {:>8}  {:>5}  {:>10.4}\n",
                e.tag,
                group_thousands(e.done),
                match &e.top_error {
                    Some((k, _)) => format!("{} {k}", e.errors),
                    None => e.errors.to_string(),
                },
                e.ttft_p50_ms.map_or("-".into(), |t| format!("{t} ms")),
                e.mean_output_tokens
                    .map_or("-".into(), |m| format!("{m:.0}")),
                e.truncation_rate
                    .map_or("-".into(), |t| format!("{:.1}%", t * 100.0)),
                e.spent.as_f64()
            ));
        }
    }
    out
}

/// Where the last stretch's requests went: where a close stops the bill (their expectation
/// reserved), or with their worst case reserved.
fn stretch_shares(s: &Snapshot) -> String {
    format!(
        "{} sent where a close stops the bill, {} at worst case",
        s.stretch_stoppable, s.stretch_worst
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_events_prints_each_event_once_and_skips_what_scrolled_away() {
        let mut s = crate::tui::testkit::kimi_snapshot();
        let shown = s.events.len() as u64;
        let (all, seen) = new_events(&s, 0);
        assert_eq!((all.len() as u64, seen), (shown, shown));
        assert!(all[0].starts_with("[00:"), "{all:?}");
        assert_eq!(new_events(&s, seen).0, Vec::<String>::new());
        // Two more events: only they are new.
        s.events.remove(0);
        s.events.remove(0);
        for (at_s, text) in [(800.0, "first new"), (801.0, "second new")] {
            s.events.push(crate::engine::snapshot::EventLine {
                at_s,
                text: text.into(),
            });
        }
        s.events_total += 2;
        let (fresh, seen2) = new_events(&s, seen);
        assert_eq!(fresh, vec!["[00:13:20] first new", "[00:13:21] second new"]);
        assert_eq!(seen2, shown + 2);
        // A follower far behind gets what the window still holds.
        s.events_total += 1_000;
        assert_eq!(new_events(&s, seen).0.len(), s.events.len());
    }

    #[test]
    fn a_drain_line_says_when_its_last_request_ends_or_when_the_grace_closes_it() {
        // (expected time left, grace left, in flight, the line)
        #[rustfmt::skip]
        let cases = [
            (Some(45.0), Some(28.0), 120, "drain: 120 left, the last in ~45s"),
            (Some(0.5), None, 3, "drain: 3 left, due any moment"),
            (None, Some(28.0), 7, "drain: 7 left, when unknown; the grace closes them in 28s"),
            (None, None, 7, "drain: 7 left"),
            (None, Some(3.0), 0, "drain: nothing left in flight"),
        ];
        for (left, grace, in_flight, want) in cases {
            let mut s = crate::tui::testkit::kimi_snapshot();
            s.state = crate::engine::snapshot::RunState::Draining;
            s.in_flight = in_flight;
            s.drain_left_s = left;
            s.drain_grace_left_s = grace;
            assert_eq!(drain_progress(&s).as_deref(), Some(want));
        }
        let mut s = crate::tui::testkit::kimi_snapshot();
        s.state = crate::engine::snapshot::RunState::Running;
        assert_eq!(drain_progress(&s), None, "not draining");
    }

    #[test]
    fn open_look_ups_of_a_live_run_are_the_live_runs_to_settle() {
        // reliability-probe-5 P17: `status` of a live run sent the operator to `harvest run`
        // or `--reconcile` while the run was settling them.
        let line = |live: bool| {
            let mut s = crate::tui::testkit::kimi_snapshot();
            s.open_look_ups.count = 122;
            s.open_look_ups.expected = crate::domain::Usd::from_f64(0.5);
            summary_of(&s, live)
                .lines()
                .find(|l| l.starts_with("open look-ups:"))
                .expect("an open look-ups line")
                .to_string()
        };
        let ended = line(false);
        assert!(
            ended.ends_with(
                "the next `harvest run` or `harvest status DIR --reconcile` settles them"
            ),
            "{ended}"
        );
        let live = line(true);
        assert!(
            live.starts_with("open look-ups: 122 streams")
                && live.ends_with("the live run is settling them as the API answers"),
            "{live}"
        );
        assert!(!live.contains("--reconcile"), "{live}");
    }

    #[test]
    fn the_summary_says_whose_spend_passed_the_budget() {
        let line = |spent: f64, budget: f64, carried: f64| {
            let mut s = crate::tui::testkit::kimi_snapshot();
            s.spent = crate::domain::Usd::from_f64(spent);
            s.budget = crate::domain::Usd::from_f64(budget);
            s.carried_over = crate::domain::Usd::from_f64(carried);
            summary(&s)
                .lines()
                .find(|l| l.starts_with("spend:"))
                .expect("a spend line")
                .to_string()
        };
        #[rustfmt::skip]
        let cases = [
            ((8.0, 10.0, 2.0), "spend: 8.0000 USD of 10.00 (ledger; 2.0000 carried over from earlier runs)"),
            ((10.5, 10.0, 2.0), "spend: 10.5000 USD of 10.00 (ledger; 2.0000 carried over from earlier runs); over budget by 0.5000"),
            ((49.0, 20.0, 49.0), "spend: 49.0000 USD of 20.00 (ledger; 49.0000 carried over from earlier runs); over budget by 29.0000, spent before this run"),
        ];
        for ((spent, budget, carried), want) in cases {
            assert_eq!(line(spent, budget, carried), want);
        }
    }
}
