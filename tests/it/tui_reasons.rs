//! What a person sees in the providers table agrees with what the engine does, for an endpoint
//! the config excludes: the real engine against the simulator, its snapshot drawn by the real
//! TUI to a test terminal, the space bar pressed through the TUI's own update.
//!
//! Before the engine typed its reasons, a `[policy] exclude = ["chutes"]` row showed `[x]`
//! (included) with "operator" as its reason, and space said "excluding" while the engine
//! included it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use harvest::engine::{Command, OffReason, ShutdownMode, Snapshot};
use harvest::tui::{Msg, Theme, UiEffect, UiState, render, update};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

fn screen(state: &UiState) -> String {
    let mut t = Terminal::new(TestBackend::new(160, 48)).expect("test terminal");
    t.draw(|f| render(f, state)).expect("draw");
    let b = t.backend().buffer().clone();
    (0..b.area.height)
        .map(|y| {
            let row: String = (0..b.area.width).map(|x| b[(x, y)].symbol()).collect();
            row.trim_end().to_string() + "\n"
        })
        .collect()
}

fn row<'a>(screen: &'a str, tag: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.contains(tag))
        .unwrap_or_else(|| panic!("no row for {tag}:\n{screen}"))
}

fn marks(screen: &str) -> usize {
    screen.lines().filter(|l| l.contains("[x]")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_exclude_reads_excluded_and_space_includes_it() {
    let s = setup();
    let sim = paced_sim(0.05, 200.0).await;
    let p = write_prompts(&s.dir, "x", 400);
    let body = format!(
        "budget_usd = 5.0\nconcurrency = 8\n[policy]\nexclude = [\"chutes\"]\n\
         [[dataset]]\nname = \"X\"\nprompts = \"{}\"\n",
        p.display()
    );
    let handle = start_engine(config(&s, &sim.base_url(), &body), 50).await;
    let snaps = handle.snapshots.clone();
    let mut state = UiState::new(snaps.borrow().clone(), Theme::mono());
    let s1 = screen(&state);
    let chutes = row(&s1, "chutes/int4");
    assert!(
        chutes.contains("[ ]"),
        "excluded in config, so not marked: {chutes}"
    );
    assert!(chutes.contains("config exclude"), "says why: {chutes}");
    let snap: Arc<Snapshot> = snaps.borrow().clone();
    let allowed = snap.endpoints.iter().filter(|e| e.allowed).count();
    assert!(
        s1.contains(&format!("{allowed} of {} allowed", snap.endpoints.len())),
        "{s1}"
    );
    assert_eq!(
        marks(&s1),
        allowed,
        "every allowed row is marked, no other:\n{s1}"
    );

    // Space on the Chutes row: the status line says "including", the engine includes it.
    state.selected = Some("chutes/int4".into());
    let fx = update(
        &mut state,
        Msg::Key(KeyEvent::new(KeyCode::Char(' '), KeyModifiers::NONE)),
    );
    let cmd = match fx.as_slice() {
        [
            UiEffect::Send(
                c @ Command::SetEndpoint {
                    allowed: Some(true),
                    ..
                },
            ),
        ] => c.clone(),
        other => panic!("space on an excluded row sends an include: {other:?}"),
    };
    let status = state
        .status
        .as_ref()
        .map(|s| s.text.clone())
        .unwrap_or_default();
    assert!(status.starts_with("including chutes/int4"), "{status}");
    handle
        .commands
        .send(cmd)
        .await
        .expect("engine takes commands");
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let snap = snaps.borrow().clone();
        let c = snap
            .endpoints
            .iter()
            .find(|e| e.tag == "chutes/int4")
            .cloned();
        if c.as_ref().is_some_and(|c| c.included && c.off.is_none()) {
            break snap;
        }
        assert!(
            Instant::now() < deadline,
            "the engine never included chutes: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    update(&mut state, Msg::Snapshot(after.clone()));
    let s2 = screen(&state);
    assert!(row(&s2, "chutes/int4").contains("[x]"), "{s2}");
    assert_eq!(
        marks(&s2),
        after.endpoints.iter().filter(|e| e.allowed).count(),
        "{s2}"
    );
    // And back: the operator's exclusion reads "operator".
    handle
        .commands
        .send(Command::ToggleEndpoint("chutes/int4".into()))
        .await
        .expect("engine takes commands");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let snap = snaps.borrow().clone();
        let c = snap
            .endpoints
            .iter()
            .find(|e| e.tag == "chutes/int4")
            .cloned();
        if c.as_ref()
            .is_some_and(|c| c.off == Some(OffReason::Operator) && !c.included)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the engine never excluded chutes: {c:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    handle
        .commands
        .send(Command::Shutdown(ShutdownMode::Now))
        .await
        .expect("engine takes commands");
    let summary = handle.finish().await.expect("engine finishes");
    assert_eq!(
        summary.reason,
        Some(harvest::engine::StopReason::OperatorStopNow)
    );
    sim.stop().await;
}
