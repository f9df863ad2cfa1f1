//! Time to build and draw one TUI frame of a busy run (30 endpoints, 8 datasets, full chart and
//! event log) to ratatui's TestBackend, at 200x50 and 80x24. Prints the median of 7 batches.
//! Then the frames an idle (paused) run asks for in 10 s: the real engine against the
//! simulator publishes a snapshot every 200 ms, and the TUI draws only those that change the
//! screen (`shows_change`).
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

/// Snapshots and frames of a paused run over 10 s.
fn idle_frames() -> (u64, u64) {
    use harvest::engine::{self, Command, RunOptions};
    use harvest::openrouter::ApiKey;
    use harvest::sim::{self, SimConfig};
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let sim = sim::start(SimConfig::fast_no_faults(), 0)
            .await
            .expect("sim");
        let dir = tempfile::tempdir().expect("tmp");
        let prompts: String = (0..200)
            .map(|i| format!("{{\"prompt\": \"q{i}\"}}\n"))
            .collect();
        std::fs::write(dir.path().join("p.jsonl"), prompts).expect("prompts");
        let cfg_path = dir.path().join("harvest.toml");
        std::fs::write(
            &cfg_path,
            format!(
                "base_url = \"{}\"\noutput_dir = \"out\"\nconcurrency = 4\n\
                 [[dataset]]\nname = \"idle\"\nprompts = \"p.jsonl\"\n",
                sim.base_url()
            ),
        )
        .expect("config");
        let cfg = harvest::config::Config::load(&cfg_path).expect("config");
        let opts = RunOptions {
            api_key: ApiKey::new("sk-or-v1-bench"),
            ..Default::default()
        };
        let h = engine::start(cfg, opts).await.expect("engine");
        h.commands.send(Command::Pause).await.expect("pause");
        // Let what was in flight finish and the 10-second rates fall to zero, then watch.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let mut snaps = h.snapshots.clone();
        let mut last = snaps.borrow_and_update().clone();
        let (mut seen, mut drawn) = (0u64, 0u64);
        let end = tokio::time::Instant::now() + Duration::from_secs(10);
        while let Ok(Ok(())) = tokio::time::timeout_at(end, snaps.changed()).await {
            let s = snaps.borrow_and_update().clone();
            seen += 1;
            if harvest::tui::update::shows_change(&last, &s) {
                drawn += 1;
            }
            last = s;
        }
        let _ = h
            .commands
            .send(Command::Shutdown(harvest::engine::ShutdownMode::Now))
            .await;
        let _ = h.finish().await;
        sim.stop().await;
        (seen, drawn)
    })
}

fn main() {
    for (w, h) in [(200u16, 50u16), (80, 24)] {
        let d = per_frame(w, h);
        println!(
            "tui frame {w}x{h}: {:.1} us per frame (busy snapshot, median of 7 x 300 frames)",
            d.as_secs_f64() * 1e6
        );
    }
    let (seen, drawn) = idle_frames();
    println!(
        "idle run (paused), 10 s: {seen} snapshots published, {drawn} frames drawn \
         (the clock's second; every snapshot would be {seen})"
    );
}
