//! The control socket against a real engine and the simulator, spoken raw as another client
//! would: the hello and its version check, viewers counted apart from one-off clients, a
//! command a viewer may not send, a viewer's command acting and named in the event log, and a
//! viewer that never reads: it gets the latest snapshot only, is dropped, and the run does not
//! wait for it.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{config, fast_sim, set_speed, setup, start_engine, write_prompts};
use harvest::engine::RunState;
use harvest::remote::server::{WRITE_TIMEOUT, serve};
use harvest::remote::wire::{ClientMsg, EngineMsg, Role, VERSION, decode, encode};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

struct Raw {
    r: BufReader<tokio::net::unix::OwnedReadHalf>,
    w: tokio::net::unix::OwnedWriteHalf,
}

impl Raw {
    async fn connect(out: &Path) -> Raw {
        let s = UnixStream::connect(harvest::remote::socket_path(out))
            .await
            .expect("the engine listens");
        let (r, w) = s.into_split();
        Raw {
            r: BufReader::new(r),
            w,
        }
    }

    async fn send(&mut self, msg: &ClientMsg) {
        self.w.write_all(&encode(msg)).await.expect("write");
    }

    async fn send_raw(&mut self, line: &str) {
        self.w.write_all(line.as_bytes()).await.expect("write");
    }

    /// The next message, within 10 s; `None` at the end of the stream.
    async fn next(&mut self) -> Option<EngineMsg> {
        let mut line = String::new();
        let n = tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut line))
            .await
            .expect("a message within 10 s")
            .expect("read");
        (n > 0).then(|| decode(line.trim_end().as_bytes()).expect("a control message"))
    }

    async fn hello(out: &Path, role: Role) -> (Raw, u32) {
        let mut c = Raw::connect(out).await;
        let viewers = match c.next().await {
            Some(EngineMsg::Hello {
                version, viewers, ..
            }) => {
                assert_eq!(version, VERSION);
                viewers
            }
            other => panic!("expected a hello, got {other:?}"),
        };
        c.send(&ClientMsg::Hello {
            version: VERSION,
            role,
        })
        .await;
        match c.next().await {
            Some(EngineMsg::Snapshot { .. }) => {}
            other => panic!("expected a snapshot, got {other:?}"),
        }
        (c, viewers)
    }
}

fn job(s: &crate::common::Setup, base: &str, n: usize) -> harvest::config::Config {
    let p = write_prompts(&s.dir, "x", n);
    let body = format!(
        "budget_usd = 100.0\nconcurrency = 20\n[request]\nmax_tokens = 400\n\
         [[dataset]]\nname = \"X\"\nprompts = \"{}\"\n",
        p.display()
    );
    config(s, base, &body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wire_checks_versions_counts_viewers_and_refuses_what_a_viewer_may_not_send() {
    let s = setup();
    let sim = fast_sim(150.0).await;
    set_speed(&sim, 0.2);
    let h = start_engine(job(&s, &sim.base_url(), 400), 50).await;
    let server = serve(&s.out, h.commands.clone(), h.snapshots.clone()).expect("serves");

    // Another version is refused, naming both.
    let mut c = Raw::connect(&s.out).await;
    assert!(matches!(c.next().await, Some(EngineMsg::Hello { .. })));
    c.send_raw("{\"type\":\"hello\",\"version\":99,\"role\":\"viewer\"}\n")
        .await;
    match c.next().await {
        Some(EngineMsg::Refused { reason }) => {
            assert!(
                reason.contains("version 1") && reason.contains("99"),
                "{reason}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(c.next().await, None, "then closed");

    // A viewer is counted; a one-off control client is not.
    let (mut v, before) = Raw::hello(&s.out, Role::Viewer).await;
    assert_eq!(before, 0);
    let (_ctl, seen) = Raw::hello(&s.out, Role::Control).await;
    assert_eq!(seen, 1, "one viewer attached");
    let (_v2, seen) = Raw::hello(&s.out, Role::Viewer).await;
    assert_eq!(seen, 1, "the control client is not a viewer");

    // What the engine's own terminal sends is not a viewer's to send.
    v.send_raw("{\"type\":\"command\",\"command\":\"output_lost\"}\n")
        .await;
    // A line that is no message gets a reason too, and the connection stays.
    v.send_raw("pause please\n").await;
    let mut rejected = Vec::new();
    while rejected.len() < 2 {
        match v.next().await {
            Some(EngineMsg::Rejected { reason }) => rejected.push(reason),
            Some(EngineMsg::Snapshot { snapshot }) => {
                assert_ne!(snapshot.state, RunState::Draining, "output_lost acted")
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(rejected[0].contains("OutputLost"), "{rejected:?}");
    assert!(
        rejected[1].contains("not a harvest control message"),
        "{rejected:?}"
    );

    // A viewer's command acts, and the event log names the viewer by its pid.
    v.send(&ClientMsg::Command {
        command: harvest::engine::Command::Pause,
    })
    .await;
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "the pause never showed");
        if let Some(EngineMsg::Snapshot { snapshot }) = v.next().await
            && snapshot.state == RunState::Paused
        {
            let said = snapshot
                .events
                .iter()
                .any(|e| e.text == format!("paused by operator (pid {me}): no new requests"));
            assert!(said, "{:?}", snapshot.events);
            break;
        }
    }
    v.send(&ClientMsg::Command {
        command: harvest::engine::Command::Shutdown(harvest::engine::ShutdownMode::Now),
    })
    .await;
    let summary = tokio::time::timeout(Duration::from_secs(60), h.finish())
        .await
        .expect("bounded")
        .expect("finishes");
    assert_eq!(summary.state, RunState::Stopped);
    // The viewer gets the last snapshot, then the end of the stream.
    let mut last = None;
    while let Some(m) = v.next().await {
        if let EngineMsg::Snapshot { snapshot } = m {
            last = Some(snapshot.state);
        }
    }
    assert_eq!(last, Some(RunState::Stopped));
    server.close(Duration::from_secs(2)).await;
    assert!(!harvest::remote::socket_path(&s.out).exists(), "removed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_that_never_reads_is_dropped_and_the_run_does_not_wait() {
    let s = setup();
    let sim = fast_sim(150.0).await;
    // A run of about 20 s: the stuck viewer's socket buffer fills within a few seconds, and
    // its write timeout passes well before the end.
    set_speed(&sim, 0.1);
    let h = start_engine(job(&s, &sim.base_url(), 900), 50).await;
    let server = serve(&s.out, h.commands.clone(), h.snapshots.clone()).expect("serves");
    let mut stuck = Raw::connect(&s.out).await;
    assert!(matches!(stuck.next().await, Some(EngineMsg::Hello { .. })));
    stuck
        .send(&ClientMsg::Hello {
            version: VERSION,
            role: Role::Viewer,
        })
        .await;
    // It reads nothing from here on, while the run goes on and snapshots keep changing.
    let summary = tokio::time::timeout(Duration::from_secs(120), h.finish())
        .await
        .expect("the run ends with a stuck viewer attached")
        .expect("finishes");
    assert_eq!(summary.state, RunState::Done);
    assert_eq!(summary.snapshot.done, 900);
    assert!(
        summary.snapshot.elapsed_s > (WRITE_TIMEOUT * 2).as_secs_f64(),
        "the run outlasted the write timeout: {}",
        summary.snapshot.elapsed_s
    );
    // What was queued for it: the latest snapshots at most five a second, until the socket's
    // buffer was full; then the engine dropped it, before the run's end (its last snapshot is
    // not the finished run's).
    let (mut snapshots, mut last) = (0, None);
    while let Some(m) = stuck.next().await {
        if let EngineMsg::Snapshot { snapshot } = m {
            snapshots += 1;
            last = Some(snapshot);
        }
    }
    let last = last.expect("some snapshots reached it");
    assert_ne!(last.state, RunState::Done, "dropped before the end");
    assert!(last.done < 900, "dropped before the end: {}", last.done);
    let most = (summary.snapshot.elapsed_s * 5.0) as usize + 2;
    assert!(snapshots <= most, "{snapshots} snapshots, at most {most}");
    server.close(Duration::from_secs(2)).await;
}

/// A flood of connections cannot take the run's file descriptors: past 64 open at once, a new
/// one is refused at once, naming why; once they close, connections are served again
/// (reliability probe 3, D10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_cap_are_refused_at_once() {
    let s = setup();
    let sim = fast_sim(150.0).await;
    set_speed(&sim, 0.2);
    let h = start_engine(job(&s, &sim.base_url(), 400), 50).await;
    let server = serve(&s.out, h.commands.clone(), h.snapshots.clone()).expect("serves");
    let mut open = Vec::new();
    for _ in 0..64 {
        let mut c = Raw::connect(&s.out).await;
        assert!(matches!(c.next().await, Some(EngineMsg::Hello { .. })));
        open.push(c);
    }
    let mut extra = Raw::connect(&s.out).await;
    match extra.next().await {
        Some(EngineMsg::Refused { reason }) => {
            assert!(
                reason.contains("64 connections are open already"),
                "{reason}"
            )
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    drop(open);
    // The closed connections' tasks end; then a new one is served (bounded wait).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut c = Raw::connect(&s.out).await;
        match c.next().await {
            Some(EngineMsg::Hello { .. }) => break,
            _ => assert!(
                Instant::now() < deadline,
                "still refused after the others closed"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (mut ctl, _) = Raw::hello(&s.out, Role::Control).await;
    ctl.send(&ClientMsg::Command {
        command: harvest::engine::Command::Shutdown(harvest::engine::ShutdownMode::Now),
    })
    .await;
    tokio::time::timeout(Duration::from_secs(60), h.finish())
        .await
        .expect("bounded")
        .expect("finishes");
    server.close(Duration::from_secs(2)).await;
    sim.stop().await;
}
