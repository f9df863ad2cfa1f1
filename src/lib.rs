//! harvest: LLM training data at scale through OpenRouter or any OpenAI-compatible server.
//!
//! The library holds everything; `main.rs` only parses the command line and maps errors to exit
//! codes. The engine never touches the terminal; the TUI renders snapshots of engine state.
//!
//! The face is curated: a module is `pub` only when `main.rs`, the integration tests or the
//! benches reach into it, and everything else is `pub(crate)`. With `unreachable_pub` on, an item
//! no one outside can see cannot claim to be public, so the compiler finds dead code.

#![warn(unreachable_pub)]

pub(crate) mod account;
pub(crate) mod answer_shape;
pub(crate) mod booked_cost;
pub mod cli;
pub mod close_reading;
pub mod commands;
pub mod config;
pub mod domain;
pub mod engine;
pub mod estimate;
pub mod export;
pub mod hardening;
pub(crate) mod headless;
mod layers;
pub mod logging;
pub mod openrouter;
pub(crate) mod policy;
pub(crate) mod pricing;
pub mod printable;
pub mod probe;
pub mod remote;
pub mod report;
pub mod runtime;
pub mod sim;
pub mod store;
pub mod tui;

/// Raises this process's soft open-files limit to its hard limit: 2,000 concurrent streams need
/// 2,000 sockets (4,000 when the simulator runs in the same process), above the common default
/// of 1,024. Returns the limit now in force.
pub fn raise_open_files_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => n,
        Err(e) => {
            tracing::warn!("could not raise the open-files limit: {e}");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(0, |(soft, _)| soft)
        }
    }
}
