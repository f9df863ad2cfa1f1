//! What the operator (TUI, signals, tests, viewers on the control socket) can tell a running
//! engine. Commands are serde types: they cross the control socket as they are (`remote::wire`).

use serde::{Deserialize, Serialize};

use crate::policy::PolicyMode;

/// How to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShutdownMode {
    /// Stop dispatching, let in-flight requests finish and be saved, then exit.
    Drain,
    /// Cancel in-flight requests, save what is finished, exit.
    Now,
}

/// Another process that steers the run through the control socket (`harvest attach`,
/// `harvest stop`), named by the pid the kernel gave for its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Viewer {
    pub pid: u32,
}

impl std::fmt::Display for Viewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "operator (pid {})", self.pid)
    }
}

/// A command to the supervisor. Each applies to the next request dispatched.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Command {
    Pause,
    Resume,
    SetConcurrency(u32),
    /// Adds (or removes, when negative) to the concurrency limit.
    AdjustConcurrency(i64),
    /// Include (`Some(true)`), exclude (`Some(false)`) or hand back to the policy (`None`) one
    /// endpoint, by tag.
    SetEndpoint {
        tag: String,
        allowed: Option<bool>,
    },
    /// Flips the endpoint between allowed and not (an operator choice). Relative, so two
    /// viewers flipping one row at once undo each other: the TUI sends [`Command::SetEndpoint`]
    /// with what its viewer saw; this stays for the viewers of earlier releases on the wire.
    ToggleEndpoint(String),
    /// Switches the quantization policy. The operator's per-endpoint choices stay, but for
    /// inclusions of endpoints the faithful policy excludes when switching to it (it restores
    /// the faithful set). The TUI asks before it sends `any`.
    Preset(PolicyMode),
    Shutdown(ShutdownMode),
    /// The terminal or the output stream went away (SIGHUP, a closed pipe, a vanished pty):
    /// drain, as for an operator's drain, but say why.
    OutputLost,
    /// SIGTERM, from the scheduler whose job this is (or from `kill`): drain, as for an
    /// operator's drain, but say whose stop it is; the run exits 75 to be run again.
    SchedulerStop(super::reason::Scheduler),
    /// A command from a viewer on the control socket: the event log names who gave it. Only
    /// the engine's socket server wraps commands so (a viewer cannot send one itself).
    By(Viewer, Box<Command>),
}

impl Command {
    /// A stop-now, whoever sent it.
    pub fn is_stop_now(&self) -> bool {
        match self {
            Command::Shutdown(ShutdownMode::Now) => true,
            Command::By(_, c) => c.is_stop_now(),
            _ => false,
        }
    }

    /// Whether a viewer on the control socket may send it: not `OutputLost` (the engine's own
    /// terminal) nor `SchedulerStop` (its own process's signal) nor `By` (the server attributes, a viewer cannot claim to be another).
    pub fn from_viewer_allowed(&self) -> bool {
        !matches!(
            self,
            Command::OutputLost | Command::SchedulerStop(_) | Command::By(..)
        )
    }
}
