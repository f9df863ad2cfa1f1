//! What the operator (TUI, signals, tests) can tell a running engine.

use crate::policy::PolicyMode;

/// How to stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// Stop dispatching, let in-flight requests finish and be saved, then exit.
    Drain,
    /// Cancel in-flight requests, save what is finished, exit.
    Now,
}

/// A command to the supervisor. Each applies to the next request dispatched.
#[derive(Clone, Debug, PartialEq)]
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
    /// Flips the endpoint between allowed and not (an operator choice).
    ToggleEndpoint(String),
    /// Switches the quantization policy and clears the operator's per-endpoint choices.
    Preset(PolicyMode),
    Shutdown(ShutdownMode),
    /// The terminal or the output stream went away (SIGHUP, a closed pipe, a vanished pty):
    /// drain, as for an operator's drain, but say why.
    OutputLost,
}
