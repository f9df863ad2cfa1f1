//! `harvest run`: the main job. Headless for now (progress lines on stdout); the TUI takes
//! over when stdout is a terminal once it lands. SIGINT/SIGTERM drain in-flight requests up to
//! a grace period, then stop; a second signal stops at once. State is saved either way.

use std::time::Duration;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::engine::{self, Command, EngineError, RunOptions, RunState, ShutdownMode};
use crate::headless;
use crate::store::prompts::parse_shard;

use super::{BadInput, exit};

/// Loads the config and the options of a run, as bad input when they are wrong.
pub fn load(args: &RunArgs) -> anyhow::Result<(Config, RunOptions)> {
    let cfg = Config::load(&args.config).map_err(|e| BadInput(e.to_string()))?;
    let shard = args
        .shard
        .as_deref()
        .map(parse_shard)
        .transpose()
        .map_err(BadInput)?;
    Ok((
        cfg,
        RunOptions {
            shard,
            force: args.force,
            tick: None,
            api_key: None,
            repair: args.repair,
        },
    ))
}

pub fn engine_error(e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Input(m) => BadInput(m).into(),
        EngineError::Startup(m) => anyhow::anyhow!(m),
    }
}

async fn signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// How a run is watched.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    pub progress_every: Duration,
    pub drain_grace: Duration,
}

/// Watches a started engine with progress lines until it ends; SIGINT/SIGTERM drain (then stop
/// after the grace period, or at a second signal). Prints the summary; returns the exit code.
pub async fn drive_headless(handle: engine::EngineHandle, w: Watch) -> anyhow::Result<u8> {
    let commands = handle.commands.clone();
    let mut snaps = handle.snapshots.clone();
    let mut interrupted = false;
    let mut progress = tokio::time::interval(w.progress_every);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut grace_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        tokio::select! {
            _ = progress.tick() => {
                let s = snaps.borrow_and_update().clone();
                println!("{}", headless::progress_line(&s));
            }
            _ = signal() => {
                if interrupted {
                    eprintln!("harvest: second signal: stopping now");
                    let _ = commands.send(Command::Shutdown(ShutdownMode::Now)).await;
                } else {
                    interrupted = true;
                    eprintln!(
                        "harvest: interrupted: finishing in-flight requests (up to {}s; again to stop now)",
                        w.drain_grace.as_secs()
                    );
                    let _ = commands.send(Command::Shutdown(ShutdownMode::Drain)).await;
                    grace_timer = Some(Box::pin(tokio::time::sleep(w.drain_grace)));
                }
            }
            _ = async { if let Some(t) = grace_timer.as_mut() { t.await } else { std::future::pending().await } } => {
                eprintln!("harvest: drain grace period over: stopping now");
                let _ = commands.send(Command::Shutdown(ShutdownMode::Now)).await;
                grace_timer = None;
            }
            r = snaps.changed() => {
                if r.is_err() { break; }
                let state = snaps.borrow().state;
                if matches!(state, RunState::Done | RunState::Stopped) { break; }
            }
        }
    }
    let summary = handle.finish().await.map_err(engine_error)?;
    print_summary(&summary);
    Ok(exit_code(&summary, interrupted))
}

/// The end-of-run summary on the normal screen.
pub fn print_summary(summary: &engine::RunSummary) {
    print!("{}", headless::summary(&summary.snapshot));
    if let Some(report) = crate::report::after_run(&summary.output_dir, &summary.datasets) {
        println!();
        print!("{}", report.render());
    }
    if summary.overshoot > crate::domain::Usd::ZERO {
        println!(
            "overshoot: {:.6} USD past the budget (tokens in transit when the cap hit, and \
             generations at providers that bill them anyway)",
            summary.overshoot.as_f64()
        );
    }
}

/// 1 when the API stopped the run (bad key, no credit), 130 when the operator did, else 0.
pub fn exit_code(summary: &engine::RunSummary, interrupted: bool) -> u8 {
    if summary.failed {
        exit::FAILURE
    } else if interrupted
        || summary
            .reason
            .as_deref()
            .is_some_and(|r| r.starts_with("operator"))
    {
        exit::INTERRUPTED
    } else {
        exit::OK
    }
}

/// Watches a started engine in the TUI; SIGTERM and SIGHUP drain. Prints the summary on the
/// normal screen after the TUI has given the terminal back; returns the exit code.
pub async fn drive_tui(handle: engine::EngineHandle) -> anyhow::Result<u8> {
    let commands = handle.commands.clone();
    let signals = tokio::spawn({
        let commands = commands.clone();
        async move {
            terminate_or_hangup().await;
            let _ = commands.send(Command::Shutdown(ShutdownMode::Drain)).await;
        }
    });
    let exit = crate::tui::run_tui(commands, handle.snapshots.clone())
        .await
        .map_err(|e| anyhow::anyhow!("the terminal failed: {e}"))?;
    signals.abort();
    let summary = handle.finish().await.map_err(engine_error)?;
    print_summary(&summary);
    Ok(exit_code(&summary, exit.requested.is_some()))
}

async fn terminate_or_hangup() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::hangup()),
        ) else {
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = hup.recv() => {}
        }
    }
    #[cfg(not(unix))]
    std::future::pending::<()>().await
}

/// Whether to draw the TUI: stdout is a terminal and progress lines were not asked for.
pub fn use_tui(headless: bool) -> bool {
    use std::io::IsTerminal;
    !headless && std::io::stdout().is_terminal()
}

/// Runs the job; returns the exit code.
pub async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let (cfg, opts) = load(&args)?;
    let out_dir = cfg.output_dir.clone();
    let _log = crate::logging::to_file(&out_dir).map_err(|e| {
        BadInput(format!(
            "cannot write the log in {}: {e}",
            out_dir.display()
        ))
    })?;
    let handle = engine::start(cfg, opts).await.map_err(engine_error)?;
    for note in &handle.start_notes {
        eprintln!("harvest: {note}");
    }
    if use_tui(args.headless) {
        return drive_tui(handle).await;
    }
    println!("harvest: run started; outputs in {}", out_dir.display());
    drive_headless(
        handle,
        Watch {
            progress_every: Duration::from_secs_f64(args.progress_every.max(0.2)),
            drain_grace: Duration::from_secs_f64(args.drain_grace_s.max(0.0)),
        },
    )
    .await
}
