//! `harvest attach [DIR]`: the TUI of a run started elsewhere (`run --detach`, or a run in
//! another terminal), fed over the control socket of its output directory. Every key works as
//! in a foreground run; `q` also offers to detach, leaving the run going. When the run ends
//! while attached, its summary and report are printed as a foreground run prints them.

use std::io::IsTerminal;
use std::path::PathBuf;

use crate::cli::AttachArgs;
use crate::engine::snapshot::RunState;
use crate::remote::client::{ConnectError, connect};
use crate::remote::wire::Role;

use super::{BadInput, exit};

/// A connection error as the operator should see it: no live run is their input (exit 2).
pub fn connect_error(e: ConnectError) -> anyhow::Error {
    match e {
        ConnectError::NotLive { .. } => BadInput(format!(
            "{e}. `harvest status` shows how a finished run ended; `harvest run --detach` \
             starts one"
        ))
        .into(),
        other => anyhow::anyhow!(other),
    }
}

pub async fn run(args: AttachArgs) -> anyhow::Result<u8> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("out"));
    if !std::io::stdout().is_terminal() {
        return Err(BadInput(format!(
            "attach draws a TUI and needs a terminal; `harvest status {}` prints the progress",
            dir.display()
        ))
        .into());
    }
    let conn = connect(&dir).await.map_err(connect_error)?;
    // The TUI owns the screen: this viewer's log lines go beside the engine's.
    let _log = crate::logging::to_file(&dir).ok();
    let pid = conn.engine.pid;
    let others = conn.engine.viewers;
    let link = conn.start(Role::Viewer).await.map_err(connect_error)?;
    tracing::info!("attached to pid {pid}");
    let exit = crate::tui::run_tui(
        link.commands,
        link.snapshots,
        Some(crate::tui::Remote {
            pid,
            others,
            notices: link.notices,
        }),
    )
    .await?;
    link.done.abort();
    let last = &exit.last;
    let over = matches!(last.state, RunState::Done | RunState::Stopped);
    let mut out = super::run::Out::default();
    if over {
        let mut text = crate::headless::summary(last);
        let names: Vec<String> = last.datasets.iter().map(|d| d.name.clone()).collect();
        if let Some(report) = crate::report::after_run(&dir, &names) {
            text.push('\n');
            text.push_str(&report.render());
        }
        out.write(&text);
        return Ok(exit::OK);
    }
    if exit.lost.is_some() {
        // The viewer's terminal went away; the run goes on and nobody is there to read.
        return Ok(exit::OK);
    }
    // Not the engine closing the connection: the operator detached.
    if exit.requested.is_none() && !exit.closed {
        out.line(&format!(
            "harvest: detached; the run goes on (pid {pid}). Again: harvest attach {}",
            dir.display()
        ));
        return Ok(exit::OK);
    }
    anyhow::bail!(
        "the run (pid {pid}) went away before it ended; see {}",
        dir.join("harvest.log").display()
    )
}
