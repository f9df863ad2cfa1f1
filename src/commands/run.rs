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
        },
    ))
}

fn engine_error(e: EngineError) -> anyhow::Error {
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
    let commands = handle.commands.clone();
    let mut snaps = handle.snapshots.clone();
    let every = Duration::from_secs_f64(args.progress_every.max(0.2));
    let grace = Duration::from_secs_f64(args.drain_grace_s.max(0.0));
    let mut interrupted = false;
    let mut progress = tokio::time::interval(every);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut grace_timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    println!("harvest: run started; outputs in {}", out_dir.display());
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
                        grace.as_secs()
                    );
                    let _ = commands.send(Command::Shutdown(ShutdownMode::Drain)).await;
                    grace_timer = Some(Box::pin(tokio::time::sleep(grace)));
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
    print!("{}", headless::summary(&summary.snapshot));
    if summary.overshoot > crate::domain::Usd::ZERO {
        println!(
            "overshoot: {:.6} USD past the budget (tokens in transit when the cap hit)",
            summary.overshoot.as_f64()
        );
    }
    Ok(if summary.failed {
        exit::FAILURE
    } else if interrupted {
        exit::INTERRUPTED
    } else {
        exit::OK
    })
}
