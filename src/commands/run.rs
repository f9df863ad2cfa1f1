//! `harvest run`: the main job. The TUI when stdout is a terminal, progress lines otherwise,
//! or, with `--detach`, in the background (`commands::detach`). Every run serves the control
//! socket of its output directory (`harvest attach`, `stop`, `status`). SIGINT/SIGTERM drain
//! in-flight requests up to a grace period, then stop; a second signal stops at once. State is
//! saved either way.

use std::time::Duration;

use crate::cli::RunArgs;
use crate::config::Config;
use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::{self, EngineError, RunOptions, RunState, Snapshot};
use crate::headless;

use super::BadInput;
use super::signals::{Interruption, Sig, Signals, Stopper, eprintln_quiet, exit_code};

/// Loads the config and the options of a run, as bad input when they are wrong.
pub fn load(args: &RunArgs) -> anyhow::Result<(Config, RunOptions)> {
    let mut cfg = Config::load(&args.config).map_err(|e| BadInput(e.to_string()))?;
    crate::store::share_with_group(cfg.group_readable);
    let env = |var: &str| std::env::var(var).ok();
    let shard = args
        .shard
        .as_deref()
        .map(|spec| super::shard::shard_from(spec, args.shards, &env))
        .transpose()
        .map_err(BadInput)?;
    let (parent, job_budget) = (cfg.output_dir.clone(), cfg.budget_usd);
    let mut notes = match shard {
        Some(s) => super::shard::apply(&mut cfg, s, args.shard_dir.as_deref()),
        None => {
            super::shard::needs_shard(&cfg).map_err(BadInput)?;
            Vec::new()
        }
    };
    let around = super::job::check_run_into(&parent, &cfg.output_dir, shard).map_err(BadInput)?;
    if let Some((k, n)) = shard {
        notes.extend(
            super::shard::within_job(&mut cfg, (k, n), job_budget, &around).map_err(BadInput)?,
        );
    }
    if !args.detached_child {
        for n in notes {
            eprintln!("harvest: {n}");
        }
    }
    if let Some(kinds) = &args.retry_rejects {
        check_reject_kinds(kinds).map_err(BadInput)?;
    }
    Ok((
        cfg,
        RunOptions {
            shard,
            force: args.force,
            tick: None,
            api_key: None,
            repair: args.repair,
            retry_rejects: args.retry_rejects.clone(),
            retry_truncated: args.retry_truncated,
            scan_progress: None,
            drain_grace: Some(Duration::from_secs_f64(args.drain_grace_s.max(0.0))),
        },
    ))
}

/// `--retry-rejects=KINDS` names kinds a reject can have: a typo would retry nothing, silently.
fn check_reject_kinds(kinds: &[String]) -> Result<(), String> {
    let known = crate::engine::core::reject_kinds();
    match kinds.iter().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(format!(
            "--retry-rejects={}: {k:?} is not a kind of reject; the kinds are {}",
            kinds.join(","),
            known.join(", ")
        )),
        None => Ok(()),
    }
}

pub fn engine_error(e: EngineError) -> anyhow::Error {
    match e {
        EngineError::Input(m) => BadInput(m).into(),
        EngineError::Startup(m) => anyhow::anyhow!(m),
    }
}

/// Standard output that may go away (a pipe into `head`, a closed terminal): a failed write
/// marks it lost instead of panicking, and nothing more is written to it.
#[derive(Default)]
pub struct Out {
    lost: bool,
}

impl Out {
    /// An output already gone (a detached run writes nothing to stdout).
    pub fn gone() -> Out {
        Out { lost: true }
    }

    /// Writes `text` (and flushes); false once the output is gone.
    pub fn write(&mut self, text: &str) -> bool {
        use std::io::Write;
        if self.lost {
            return false;
        }
        let mut out = std::io::stdout().lock();
        // Server text (errors, provider names) is in these lines: no escape sequences.
        let text = crate::printable::printable(text);
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            self.lost = true;
            // A full disk, unlike a closed pipe, fails the command (`stdout::failure`), and
            // main.rs says so on stderr: logged at info (a run's log file), not warn (stderr).
            super::stdout::note_failure(&e);
            // Only a run drains on it (see `Stopper::lost`); `stop` and `attach` merely go quiet.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                tracing::warn!("standard output is gone: nothing more is printed there");
            } else {
                tracing::info!("standard output failed ({e}): nothing more is printed there");
            }
        }
        !self.lost
    }

    pub fn line(&mut self, text: &str) -> bool {
        self.write(&format!("{text}\n"))
    }

    pub fn is_lost(&self) -> bool {
        self.lost
    }
}

/// How a run is watched.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    pub progress_every: Duration,
    pub drain_grace: Duration,
}

fn is_over(snaps: &watch::Receiver<Arc<Snapshot>>) -> bool {
    matches!(snaps.borrow().state, RunState::Done | RunState::Stopped)
}

/// Follows a run to its end: progress lines (unless `out` is gone or `progress` is off),
/// signals (Ctrl-C and SIGTERM drain, twice stop now; SIGHUP drains). The engine ends a drain
/// at its grace period.
pub(super) async fn follow(
    handle: &engine::EngineHandle,
    w: Watch,
    out: &mut Out,
    progress: bool,
    stopper: &mut Stopper,
    signals: &mut Signals,
) -> u64 {
    let commands = handle.commands.clone();
    let mut snaps = handle.snapshots.clone();
    let mut tick = tokio::time::interval(w.progress_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut seen = 0;
    while !is_over(&snaps) {
        tokio::select! {
            _ = tick.tick(), if progress && !out.is_lost() => {
                let s = snaps.borrow_and_update().clone();
                let (events, total) = headless::new_events(&s, seen);
                seen = total;
                let ok = events.iter().all(|e| out.line(e)) && out.line(&headless::progress_line(&s));
                if !ok {
                    stopper.lost(&commands).await;
                }
            }
            sig = signals.recv() => stopper.on_signal(sig, &commands, w.drain_grace).await,
            r = snaps.changed() => if r.is_err() { break },
        }
    }
    seen
}

/// Watches a started engine with progress lines until it ends; SIGINT/SIGTERM drain (then stop
/// after the grace period, or at a second signal), SIGHUP or a closed stdout drain too. Prints
/// the summary while stdout is there; returns the exit code.
pub async fn drive_headless(handle: engine::EngineHandle, w: Watch) -> anyhow::Result<u8> {
    let control = serve_control(&handle);
    let mut out = Out::default();
    let mut stopper = Stopper::default();
    let mut signals = Signals::new();
    let seen = follow(&handle, w, &mut out, true, &mut stopper, &mut signals).await;
    let summary = handle.finish().await.map_err(engine_error)?;
    close_control(control).await;
    // The events of the run's last moments (look-ups, reconciliation, the key's count).
    for e in headless::new_events(&summary.snapshot, seen).0 {
        out.line(&e);
    }
    out.write(&summary_text(&summary));
    Ok(exit_code(&summary, stopper.by))
}

/// The end-of-run summary and report, as printed on the normal screen.
pub fn summary_text(summary: &engine::RunSummary) -> String {
    let mut text = headless::summary(&summary.snapshot);
    for line in &summary.restored {
        text.push_str(line);
        text.push('\n');
    }
    if let Some(report) = crate::report::after_run(&summary.output_dir, &summary.datasets) {
        text.push('\n');
        text.push_str(&report.render());
    }
    if summary.overshoot > crate::domain::Usd::ZERO {
        text.push_str(&format!(
            "overshoot: {:.6} USD past the budget (tokens in transit when the cap hit, and \
             generations at providers that bill them anyway)\n",
            summary.overshoot.as_f64()
        ));
    }
    text
}

/// Watches a started engine in the TUI; SIGTERM drains and SIGHUP drains as a lost terminal.
/// When the terminal goes away (SIGHUP, or reading or drawing fails) the run drains to its end
/// without a screen. Prints the summary on the normal screen after the TUI has given the
/// terminal back, when there is one; returns the exit code.
pub async fn drive_tui(handle: engine::EngineHandle, w: Watch) -> anyhow::Result<u8> {
    let control = serve_control(&handle);
    let mut stopper = Stopper::default();
    let mut signals = Signals::new();
    let commands = handle.commands.clone();
    // The TUI runs on its own thread (tui::thread: a key never waits for this thread's read
    // pause) until the run ends or the operator quits; signals meanwhile. On SIGHUP it is
    // stopped, and waited for: its terminal is given back before anything prints.
    let end = match crate::tui::spawn_tui(commands.clone(), handle.snapshots.clone()) {
        Err(e) => TuiEnd::Exit(Err(e)),
        Ok(mut tui) => loop {
            tokio::select! {
                ended = tui.ended() => break tui_end(ended, &handle),
                sig = signals.recv() => {
                    // Ctrl-C is a key in raw mode; a SIGINT from elsewhere drains like SIGTERM.
                    stopper.on_signal(sig, &commands, w.drain_grace).await;
                    if sig == Sig::Hangup {
                        let _ = tui.stop().await;
                        break TuiEnd::Exit(Ok(crate::tui::TuiExit::lost(
                            handle.snapshots.borrow().clone(),
                            "SIGHUP",
                        )));
                    }
                }
            }
        },
    };
    let mut out = Out::default();
    let mut progress = false;
    let requested = match end {
        TuiEnd::Exit(Ok(e)) => {
            if let Some(why) = &e.lost {
                tracing::warn!("the terminal went away ({why}): draining without a screen");
                stopper.lost(&commands).await;
                out.lost = true;
            }
            e.requested.is_some()
        }
        TuiEnd::Exit(Err(e)) => {
            tracing::error!("the terminal failed ({e}): draining without a screen");
            stopper.lost(&commands).await;
            out.lost = true;
            false
        }
        TuiEnd::Panicked => {
            // The panic hook gave the terminal back and printed why; the terminal works, so the
            // run goes on as a headless one does, with progress lines and signals.
            tracing::error!("the TUI panicked: the run goes on with progress lines");
            eprintln_quiet(
                "harvest: the TUI failed (a bug: the message above and harvest.log say where); \
                 the run goes on here with progress lines (Ctrl-C drains it)",
            );
            progress = true;
            false
        }
    };
    let _ = follow(&handle, w, &mut out, progress, &mut stopper, &mut signals).await;
    let summary = handle.finish().await.map_err(engine_error)?;
    close_control(control).await;
    out.write(&summary_text(&summary));
    let by = (stopper.by).or(requested.then_some(Interruption::Operator));
    Ok(exit_code(&summary, by))
}

/// How a run's TUI ended.
enum TuiEnd {
    /// It returned (or could not start): see [`crate::tui::TuiExit`].
    Exit(std::io::Result<crate::tui::TuiExit>),
    /// Its thread panicked; the panic hook restored the terminal.
    Panicked,
}

/// What the TUI's thread ended with.
fn tui_end(
    ended: Result<Option<std::io::Result<crate::tui::TuiExit>>, crate::tui::thread::Panicked>,
    handle: &engine::EngineHandle,
) -> TuiEnd {
    match ended {
        Ok(Some(exit)) => TuiEnd::Exit(exit),
        // Only a stop ends it without a result, and only SIGHUP stops it.
        Ok(None) => TuiEnd::Exit(Ok(crate::tui::TuiExit::lost(
            handle.snapshots.borrow().clone(),
            "stopped",
        ))),
        Err(crate::tui::thread::Panicked) => TuiEnd::Panicked,
    }
}

/// Serves the run's control socket (`harvest attach`, `stop`, `status` from other shells). A
/// run without one still runs: the failure is logged and said once on stderr.
pub(super) fn serve_control(
    handle: &engine::EngineHandle,
) -> Option<crate::remote::server::ControlServer> {
    match crate::remote::server::serve(
        handle.output_dir(),
        handle.commands.clone(),
        handle.snapshots.clone(),
    ) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!("no control socket: {e}");
            eprintln_quiet(&format!(
                "harvest: no control socket ({e}): `harvest attach` and `harvest stop` cannot \
                 reach this run"
            ));
            None
        }
    }
}

/// Lets viewers take the run's last snapshot, then removes the socket.
pub(super) async fn close_control(control: Option<crate::remote::server::ControlServer>) {
    if let Some(c) = control {
        c.close(Duration::from_secs(2)).await;
    }
}

/// Whether to draw the TUI: stdout is a terminal and progress lines were not asked for.
pub fn use_tui(headless: bool) -> bool {
    use std::io::IsTerminal;
    !headless && std::io::stdout().is_terminal()
}

/// A started run: the engine, its log (kept until the end), how it is watched.
pub(super) struct Started {
    pub handle: engine::EngineHandle,
    pub log: tracing_appender::non_blocking::WorkerGuard,
    pub watch: Watch,
}

/// Everything a run does before it is watched: the config, the log, the engine's start (the
/// output directory's lock, the key, the preflight). A detached run's background process does
/// exactly this too, so it fails with the same messages and exit codes.
pub(super) async fn start(args: &RunArgs) -> anyhow::Result<Started> {
    let (cfg, opts) = load(args)?;
    let out_dir = cfg.output_dir.clone();
    let log_path = out_dir.join("harvest.log");
    let (dir_was, log_was) = (out_dir.exists(), log_path.exists());
    let log = crate::logging::to_file(&out_dir).map_err(|e| {
        BadInput(format!(
            "cannot write the log in {}: {e}",
            out_dir.display()
        ))
    })?;
    let progress = Arc::new(crate::store::prescan::ScanProgress::default());
    let opts = RunOptions {
        scan_progress: Some(progress.clone()),
        ..opts
    };
    let line = super::scan_line::ScanLine::start(progress);
    let started = engine::start(cfg, opts).await;
    drop(line);
    let handle = match started {
        Ok(h) => h,
        Err(e) => {
            // A start refused writes nothing, as its message says: not even the log this run
            // opened (reliability-probe-4 N12), nor the directory it made for it.
            drop(log);
            if !log_was {
                let _ = std::fs::remove_file(&log_path);
            }
            if !dir_was {
                // The directory this start made: its lock and manifest go with it (what else
                // is in it stays, and so does the directory).
                let _ = std::fs::remove_file(crate::engine::manifest_path(&out_dir));
                let _ = std::fs::remove_file(out_dir.join(crate::store::lock::FILE_NAME));
                let _ = std::fs::remove_dir(&out_dir);
            }
            return Err(engine_error(e));
        }
    };
    let watch = Watch {
        progress_every: Duration::from_secs_f64(args.progress_every.max(0.2)),
        drain_grace: Duration::from_secs_f64(args.drain_grace_s.max(0.0)),
    };
    Ok(Started { handle, log, watch })
}

/// `harvest run --check`: what the run's start checks, with its messages and exit codes;
/// prints what the run would do. Writes nothing (no log in the output directory either).
pub async fn check(args: &RunArgs) -> anyhow::Result<()> {
    let (cfg, opts) = load(args)?;
    let dir = cfg.output_dir.clone();
    let model = cfg.model.clone();
    let r = engine::check(cfg, opts).await.map_err(engine_error)?;
    let mut out = Out::default();
    for note in &r.notes {
        out.line(&format!("harvest: {note}"));
    }
    for d in &r.datasets {
        out.line(&check_dataset_line(d));
    }
    let (allowed, listed) = r.endpoints;
    out.line(&format!(
        "{model}: {allowed} of {listed} endpoints allowed by the policy"
    ));
    if let Some(k) = &r.key {
        let limit = k
            .limit
            .map_or("no limit".to_string(), |l| format!("limit {l:.2} USD"));
        out.line(&format!("key: usage {:.2} USD, {limit}", k.usage));
    }
    out.line(&format!(
        "check passed: `harvest run` would start in {}; nothing was sent or written",
        dir.display()
    ));
    Ok(())
}

/// What `run --check` says of one dataset. A bad line skip mode rejects is not a prompt to
/// send: it is said apart (reliability-probe-5 P17).
fn check_dataset_line(d: &engine::CheckDataset) -> String {
    let n = crate::domain::group_thousands;
    let mut line = format!(
        "dataset {}: {} prompts, {} to send ({} finished or rejected by earlier runs)",
        d.name,
        n(d.prompts),
        n(d.to_send),
        n(d.finished),
    );
    if d.bad_lines > 0 {
        line.push_str(&format!(
            "; {} bad line{} rejected as input, never sent (on_bad_line = \"skip\"{})",
            n(d.bad_lines),
            if d.bad_lines == 1 { "" } else { "s" },
            if d.bad_lines_rejected > 0 {
                format!(", {} of them by earlier runs", n(d.bad_lines_rejected))
            } else {
                String::new()
            }
        ));
    }
    line
}

/// Runs the job in the foreground (`--detach` is `detach.rs`'s); returns the exit code.
pub async fn run(args: RunArgs) -> anyhow::Result<u8> {
    let Started {
        handle,
        log: _log,
        watch: w,
    } = start(&args).await?;
    let out_dir = handle.output_dir().to_path_buf();
    for note in &handle.start_notes {
        eprintln_quiet(&format!("harvest: {note}"));
    }
    if use_tui(args.headless) {
        return drive_tui(handle, w).await;
    }
    Out::default().line(&format!(
        "harvest: run started; outputs in {}",
        out_dir.display()
    ));
    drive_headless(handle, w).await
}
