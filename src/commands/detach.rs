//! `harvest run --detach`: a run that outlives its terminal.
//!
//! The command starts itself again as a background process (`--detached-child`) in its own
//! session, with no terminal: stdin from /dev/null, stderr appended to the run's log, stdout a
//! pipe back to the foreground process. The background process starts the run exactly as a
//! foreground run does ([`super::run::start`]: config, log, lock, key, preflight) and reports
//! one line on that pipe: ready with its pid, or failed with the message and exit code a
//! foreground run would have given. The foreground process prints it and exits with that
//! code; on ready it prints how to attach, stop and follow the run, and exits 0. From then on
//! the background process writes nothing to stdout: it is watched through its control socket.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use crate::cli::RunArgs;
use crate::engine;

use super::run::{Started, close_control, engine_error, follow};
use super::signals::{Signals, Stopper};
use super::{BadInput, exit};

/// The background process's one line to the foreground one.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Report {
    Ready {
        pid: u32,
        output_dir: String,
        /// What the start changed in the output directory (repairs, a cut torn tail).
        notes: Vec<String>,
        /// Why the control socket could not be served, when it could not: the run is live,
        /// but `attach` and `stop` cannot reach it (a signal can).
        #[serde(default)]
        no_control: Option<String>,
    },
    Failed {
        message: String,
        code: u8,
    },
}

/// The foreground side: checks the config, starts the background process, relays its report.
pub async fn spawn(args: &RunArgs) -> anyhow::Result<u8> {
    // A config error says so here, before anything starts (the background process checks
    // again; the outcome is the same).
    let (cfg, _) = super::run::load(args)?;
    engine::create_output_dir(&cfg.output_dir).map_err(engine_error)?;
    let log_path = cfg.output_dir.join("harvest.log");
    let log = crate::store::no_follow(std::fs::OpenOptions::new().create(true).append(true))
        .open(&log_path)
        .map_err(|e| BadInput(format!("cannot write the log {}: {e}", log_path.display())))?;
    let exe = std::env::current_exe()
        .map_err(|e| anyhow::anyhow!("cannot find harvest's own executable: {e}"))?;
    let mut child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .arg("--detached-child")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .spawn()
        .map_err(|e| anyhow::anyhow!("cannot start the background process: {e}"))?;
    let Some(stdout) = child.stdout.take() else {
        anyhow::bail!("the background process has no pipe to report on");
    };
    // Blocking reads of a pipe: the start takes seconds at most (the preflight's timeouts).
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await?;
    let report = line
        .ok()
        .and_then(|l| serde_json::from_str::<Report>(l.trim()).ok());
    match report {
        Some(Report::Ready {
            pid,
            output_dir,
            notes,
            no_control,
        }) => {
            // Not through `stdout`: a write error here does not fail the command, since the
            // run is started and its exit code must say so (a retry would meet its lock).
            let mut out = std::io::stdout().lock();
            for note in notes {
                let _ = writeln!(std::io::stderr(), "harvest: {note}");
            }
            if let Some(why) = no_control {
                // Live and holding the lock, but deaf to attach and stop: say how to reach it.
                let _ = writeln!(
                    std::io::stderr(),
                    "harvest: the run started in the background (pid {pid}) without its control \
                     socket ({why}): `harvest attach` and `harvest stop` cannot reach it.\n  \
                     progress: harvest status {output_dir}\n  \
                     drain:    kill -TERM {pid}    (twice: stop at once)\n  \
                     log:      {}",
                    log_path.display()
                );
                drop(child);
                return Ok(exit::OK);
            }
            let _ = writeln!(
                out,
                "harvest: run started in the background (pid {pid}); outputs in {output_dir}\n  \
                 watch and steer: harvest attach {output_dir}\n  \
                 progress:        harvest status {output_dir}\n  \
                 drain:           harvest stop {output_dir}    (--now: stop at once)\n  \
                 log:             {}",
                log_path.display()
            );
            // The background process lives on; it is not this process's child to wait for.
            drop(child);
            Ok(exit::OK)
        }
        Some(Report::Failed { message, code }) => {
            let _ = child.wait();
            let _ = writeln!(std::io::stderr(), "harvest: {message}");
            Ok(code)
        }
        None => {
            let status = child.wait();
            anyhow::bail!(
                "the background process ended before the run started ({}); see {}",
                status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                log_path.display()
            )
        }
    }
}

/// Writes the report line; the foreground process may be gone (killed): ignored then.
fn report(r: &Report) {
    let mut line = serde_json::to_string(r).unwrap_or_default();
    line.push('\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
}

/// The background side: its own session, the run's start, the report, then the run to its
/// end (SIGTERM or SIGINT drain, a second one stops now; SIGHUP is ignored). The summary goes
/// to the log; the exit code is the foreground run's.
pub async fn background(args: &RunArgs) -> anyhow::Result<u8> {
    // Out of the terminal's session: its hangup and its Ctrl-C do not reach this process.
    // It fails only if this process leads a group, which a fresh child does not.
    if let Err(e) = rustix::process::setsid() {
        tracing::warn!("setsid failed: {e}");
    }
    let Started {
        handle,
        log: _log,
        watch,
    } = match super::run::start(args).await {
        Ok(s) => s,
        Err(e) => {
            let code = super::exit_code(&e);
            report(&Report::Failed {
                message: super::error_text(&e),
                code,
            });
            return Ok(code);
        }
    };
    let (control, no_control) = match crate::remote::server::serve(
        handle.output_dir(),
        handle.commands.clone(),
        handle.snapshots.clone(),
    ) {
        Ok(s) => (Some(s), None),
        Err(e) => {
            tracing::warn!("no control socket: {e}");
            (None, Some(e.to_string()))
        }
    };
    report(&Report::Ready {
        pid: std::process::id(),
        output_dir: handle.output_dir().display().to_string(),
        notes: handle.start_notes.clone(),
        no_control,
    });
    tracing::info!("detached run started (pid {})", std::process::id());
    let mut stopper = Stopper::default();
    let mut signals = Signals::detached();
    let mut out = super::run::Out::gone();
    follow(&handle, watch, &mut out, false, &mut stopper, &mut signals).await;
    let summary = handle.finish().await.map_err(engine_error)?;
    close_control(control).await;
    tracing::info!(
        "detached run ended:\n{}",
        super::run::summary_text(&summary)
    );
    Ok(super::signals::exit_code(&summary, stopper.by))
}
