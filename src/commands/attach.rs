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

/// What `attach` does once its view has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterView {
    /// The run ended while it was watched: its summary and report.
    Summary,
    /// The viewer's own terminal went away: nobody is there to read.
    TerminalLost,
    /// The operator left the run going.
    Detached,
    /// The engine closed the connection while the run went on (it drops a viewer that reads
    /// nothing for a while, as a stopped or swamped terminal does): attach again.
    Reattach,
    /// The engine went away before its run ended (or ended the connection after a shutdown
    /// the operator asked for that never showed).
    WentAway,
}

/// How a view that ended so ends: the run `over`, the terminal `lost`, a shutdown
/// `requested`, the connection `closed` by the engine.
fn after_view(over: bool, lost: bool, requested: bool, closed: bool) -> AfterView {
    match (over, lost, requested, closed) {
        (true, ..) => AfterView::Summary,
        (_, true, ..) => AfterView::TerminalLost,
        (_, _, false, false) => AfterView::Detached,
        (_, _, _, true) => AfterView::Reattach,
        (_, _, true, false) => AfterView::WentAway,
    }
}

/// The most times one `attach` attaches again to a run that dropped it.
const REATTACH_LIMIT: u32 = 20;

pub async fn run(args: AttachArgs) -> anyhow::Result<u8> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("out"));
    if !std::io::stdout().is_terminal() {
        return Err(BadInput(format!(
            "attach draws a TUI and needs a terminal; `harvest status {}` prints the progress",
            dir.display()
        ))
        .into());
    }
    let mut conn = connect(&dir).await.map_err(connect_error)?;
    // The TUI owns the screen: this viewer's log lines go beside the engine's.
    let _log = crate::logging::to_file(&dir).ok();
    let mut said = None;
    let mut again = 0;
    let mut pid;
    loop {
        pid = conn.engine.pid;
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
                said: said.take(),
            }),
        )
        .await?;
        link.done.abort();
        let last = &exit.last;
        let over = matches!(last.state, RunState::Done | RunState::Stopped);
        let mut out = super::run::Out::default();
        let next = after_view(
            over,
            exit.lost.is_some(),
            exit.requested.is_some(),
            exit.closed,
        );
        match next {
            AfterView::Summary => {
                let mut text = crate::headless::summary(last);
                let names: Vec<String> = last.datasets.iter().map(|d| d.name.clone()).collect();
                if let Some(report) = crate::report::after_run(&dir, &names) {
                    text.push('\n');
                    text.push_str(&report.render());
                }
                out.write(&text);
                return Ok(exit::OK);
            }
            // The run goes on and nobody is there to read.
            AfterView::TerminalLost => return Ok(exit::OK),
            AfterView::Detached => {
                out.line(&format!(
                    "harvest: detached; the run goes on (pid {pid}). Again: harvest attach {}",
                    dir.display()
                ));
                return Ok(exit::OK);
            }
            AfterView::Reattach if again < REATTACH_LIMIT => match connect(&dir).await {
                Ok(c) => {
                    again += 1;
                    tracing::warn!(
                        "the run (pid {pid}) closed this view's connection while it went on: \
                         attached again ({again})"
                    );
                    said = Some(format!(
                        "attached again to the run of pid {pid}: it dropped this view, which \
                         read nothing for a while (a stopped or swamped terminal); q to leave"
                    ));
                    conn = c;
                }
                Err(e) => {
                    tracing::warn!("attaching again failed: {e}");
                    break;
                }
            },
            AfterView::Reattach | AfterView::WentAway => break,
        }
    }
    anyhow::bail!(
        "the run (pid {pid}) went away before it ended; see {}",
        dir.join("harvest.log").display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_that_ended_is_followed_by_what_its_end_says() {
        use AfterView::*;
        // (what, over, lost, requested, closed, then)
        let cases = [
            ("the run ended", true, false, false, true, Summary),
            ("the run ended as asked", true, false, true, true, Summary),
            (
                "the terminal went away",
                false,
                true,
                false,
                false,
                TerminalLost,
            ),
            ("q, then detach", false, false, false, false, Detached),
            (
                "dropped by the engine while the run goes on",
                false,
                false,
                false,
                true,
                Reattach,
            ),
            (
                "dropped while a drain it asked for goes on",
                false,
                false,
                true,
                true,
                Reattach,
            ),
            (
                "a shutdown asked that never showed",
                false,
                false,
                true,
                false,
                WentAway,
            ),
        ];
        for (what, over, lost, requested, closed, then) in cases {
            assert_eq!(after_view(over, lost, requested, closed), then, "{what}");
        }
    }
}
