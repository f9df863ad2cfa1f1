//! `harvest stop [DIR] [--now]`: drains (or stops at once) a live run from any shell, through
//! the control socket of its output directory, and follows the drain to its end: requests
//! left and the longest expected remaining time, every two seconds, then the run's summary.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::StopArgs;
use crate::engine::snapshot::RunState;
use crate::engine::{Command, ShutdownMode};
use crate::remote::client::connect;
use crate::remote::wire::Role;

use super::attach::connect_error;
use super::exit;
use super::run::Out;

pub async fn run(args: StopArgs) -> anyhow::Result<u8> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("out"));
    let conn = connect(&dir).await.map_err(connect_error)?;
    let pid = conn.engine.pid;
    let mut link = conn.start(Role::Control).await.map_err(connect_error)?;
    let mode = if args.now {
        ShutdownMode::Now
    } else {
        ShutdownMode::Drain
    };
    link.commands
        .send(Command::Shutdown(mode))
        .await
        .map_err(|_| anyhow::anyhow!("the run (pid {pid}) closed the connection"))?;
    let mut out = Out::default();
    out.line(&format!(
        "harvest: {} the run of pid {pid} in {}",
        match mode {
            ShutdownMode::Drain => "draining",
            ShutdownMode::Now => "stopping now",
        },
        dir.display()
    ));
    if args.no_wait {
        // Give the line time to leave before the connection closes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        return Ok(exit::OK);
    }
    let mut snaps = link.snapshots.clone();
    let mut every = tokio::time::interval(Duration::from_secs(2));
    every.tick().await;
    loop {
        tokio::select! {
            changed = snaps.changed() => if changed.is_err() { break },
            Some(reason) = link.notices.recv() => {
                anyhow::bail!("the run (pid {pid}) did not take the order: {reason}");
            }
            _ = every.tick() => {
                let s = snaps.borrow().clone();
                out.line(&crate::headless::progress_line(&s));
            }
        }
        if matches!(snaps.borrow().state, RunState::Done | RunState::Stopped) {
            break;
        }
    }
    let last = snaps.borrow().clone();
    if matches!(last.state, RunState::Done | RunState::Stopped) {
        out.write(&crate::headless::summary(&last));
        Ok(exit::OK)
    } else {
        anyhow::bail!(
            "the run (pid {pid}) went away before it ended; see {}",
            dir.join("harvest.log").display()
        )
    }
}
