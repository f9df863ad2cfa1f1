//! The money a person reads in the header, drawn on `TestBackend`: the spend split into booked
//! (the ledger) and streaming, against the budget and its mode; the projection; the worst case
//! while stopping or in the last stretch; and at 80 columns the ETA kept whole, the projection
//! and the last stretch shed first. The providers' and datasets' columns sum to the booked
//! figure, and what names no endpoint or dataset is said under them.

use ratatui::Terminal;
use ratatui::backend::TestBackend;

use crate::config::BudgetMode;
use crate::domain::Usd;
use crate::engine::StopReason;
use crate::engine::snapshot::{RunState, Snapshot};

use super::super::testkit::{kimi_snapshot, state_with};
use super::render;

/// The screen as text, one line per row, trailing blanks trimmed.
fn screen(s: &Snapshot, w: u16, h: u16) -> Vec<String> {
    let st = state_with(s.clone());
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, &st)).expect("draw");
    let b = t.backend().buffer().clone();
    (0..h)
        .map(|y| {
            let row: String = (0..w).map(|x| b[(x, y)].symbol()).collect();
            row.trim_end().to_string()
        })
        .collect()
}

fn header(s: &Snapshot, w: u16) -> String {
    screen(s, w, 24).swap_remove(0)
}

fn usd(x: f64) -> Usd {
    Usd::from_f64(x)
}

fn has_all(line: &str, want: &[&str]) {
    for w in want {
        assert!(line.contains(w), "{w:?} not in {line:?}");
    }
}

fn has_none(line: &str, gone: &[&str]) {
    for g in gone {
        assert!(!line.contains(g), "{g:?} in {line:?}");
    }
}

/// Twelve minutes in: $40.90 booked, $0.37 streaming, of $100 under the hard budget.
#[test]
fn the_header_splits_the_spend_into_booked_and_streaming_with_the_budget_mode() {
    let s = kimi_snapshot();
    let wide = header(&s, 120);
    has_all(
        &wide,
        &[
            "RUNNING",
            "in flight 1,984/2,000",
            "booked $40.90 streaming $0.37 of $100.00 hard",
            "proj $86.10",
            "ETA 20m00s",
        ],
    );
    has_none(&wide, &["worst", "$41.27"]);
    // At 80 columns: short labels, the budget in whole dollars, the projection shed.
    let narrow = header(&s, 80);
    has_all(
        &narrow,
        &[
            "RUNNING",
            "00:12:41",
            "fly 1,984/2,000",
            "bk $40.90 strm $0.37 /$100 hard",
            "ETA 20m00s",
        ],
    );
    has_none(&narrow, &["proj"]);
    // The other mode says so.
    let mut s = kimi_snapshot();
    s.budget_mode = BudgetMode::Expected;
    assert!(
        header(&s, 160).contains("of $100.00 expected"),
        "{}",
        header(&s, 160)
    );
    assert!(
        header(&s, 100).contains("/$100 expected"),
        "{}",
        header(&s, 100)
    );
}

/// The last stretch of a $100 budget with 2,000 streams, the budget's ETA in 4m48s: at 80x24
/// the header sheds the projection, the last stretch and the worst case, never the ETA
/// (`ETA 4m48s (budget` was cut at 80 columns); at 120 it has room for all of them.
#[test]
fn at_80x24_in_the_last_stretch_of_2000_streams_the_header_keeps_the_eta() {
    let mut s = kimi_snapshot();
    s.in_flight = 2_000;
    s.concurrency_limit = 2_000;
    s.spent = usd(93.41);
    s.accrued = usd(2.85);
    s.booked = usd(93.10);
    s.projected = Some(usd(100.0));
    s.worst_case = Some(usd(99.87));
    s.last_stretch_s = Some(48.0);
    s.stretch_stoppable = 1_200;
    s.stretch_worst = 800;
    s.eta_s = Some(288.0);
    s.eta_at_budget = true;
    let narrow = header(&s, 80);
    assert!(narrow.chars().count() <= 80);
    assert!(narrow.ends_with("ETA 4m48s (budget)"), "{narrow:?}");
    has_all(
        &narrow,
        &["RUNNING", "fly 2,000/2,000", "bk $93.10 strm $3.16"],
    );
    has_none(&narrow, &["proj", "last", "stoppable"]);
    let wide = header(&s, 120);
    has_all(
        &wide,
        &[
            "bk $93.10 strm $3.16 /$100 hard",
            "proj $100.00",
            "worst $99.87",
            "last 48s",
            "ETA 4m48s (budget)",
        ],
    );
    let widest = header(&s, 200);
    has_all(
        &widest,
        &[
            "booked $93.10 streaming $3.16 of $100.00",
            "last stretch 48s 60% stoppable",
        ],
    );
}

/// Stopped at the cap and draining: the worst case still possible is its own figure, kept at
/// 80 columns (the elapsed time gives way to it) beside the drain's time left.
#[test]
fn a_drain_at_the_cap_shows_the_worst_case_beside_the_projection() {
    let mut s = kimi_snapshot();
    s.state = RunState::Draining;
    s.reason = Some(StopReason::DollarBudget);
    s.in_flight = 2_000;
    s.spent = usd(97.02);
    s.accrued = usd(2.40);
    s.booked = usd(96.50);
    s.projected = Some(usd(99.10));
    s.worst_case = Some(usd(101.35));
    s.drain_left_s = Some(95.0);
    let wide = header(&s, 160);
    has_all(
        &wide,
        &[
            "DRAINING",
            "(dollar budget reached)",
            "booked $96.50 streaming $2.92 of $100.00 hard",
            "proj $99.10",
            "worst $101.35",
            "drain ~1m35s",
        ],
    );
    let narrow = header(&s, 80);
    has_all(&narrow, &["DRAINING", "worst $101.35", "drain ~1m35s"]);
    has_none(&narrow, &["proj", "00:12:41"]);
}

/// The providers' `spent` and the datasets' sum to the booked figure; what names no endpoint
/// (or no dataset) is said under its table, so that the sum can be made by eye.
#[test]
fn the_spent_columns_sum_to_the_booked_figure_and_the_rest_is_said() {
    let s = kimi_snapshot();
    let providers: Usd = s.endpoints.iter().map(|e| e.spent).sum();
    let datasets: Usd = s.datasets.iter().map(|d| d.spent).sum();
    assert_eq!((providers, datasets), (s.booked, s.booked));
    let text = screen(&s, 120, 40).join("\n");
    assert!(!text.contains("at no endpoint"), "{text}");
    let mut s = kimi_snapshot();
    s.booked += usd(0.12);
    s.booked_no_endpoint = usd(0.12);
    s.booked_no_dataset = usd(0.12);
    let text = screen(&s, 120, 40).join("\n");
    assert!(text.contains("+ $0.12 booked at no endpoint"), "{text}");
    assert!(text.contains("+ $0.12 booked at no dataset"), "{text}");
}
