//! Time to build and draw one TUI frame of a busy run (30 endpoints, 8 datasets, full chart and
//! event log) to ratatui's TestBackend, at 200x50 and 80x24. Prints the median of 7 batches.
//!
//! `cargo bench --bench tui_frame`

use std::time::{Duration, Instant};

use harvest::tui::testkit::{busy_snapshot, state_with};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn per_frame(w: u16, h: u16) -> Duration {
    let state = state_with(busy_snapshot());
    let mut term = Terminal::new(TestBackend::new(w, h)).expect("backend");
    let n = 300u32;
    let mut batches: Vec<Duration> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                term.draw(|f| harvest::tui::render(f, &state))
                    .expect("draw");
            }
            t.elapsed() / n
        })
        .collect();
    batches.sort();
    batches[3]
}

fn main() {
    for (w, h) in [(200u16, 50u16), (80, 24)] {
        let d = per_frame(w, h);
        println!(
            "tui frame {w}x{h}: {:.1} us per frame (busy snapshot, median of 7 x 300 frames)",
            d.as_secs_f64() * 1e6
        );
    }
}
