//! The terminal UI: watches the engine's [`Snapshot`](crate::engine::Snapshot)s and turns keys
//! into [`Command`](crate::engine::control::Command)s.
//!
//! - [`run`]: the only code that touches the terminal and the channels ([`run_tui`]);
//!   [`thread`]: a run's TUI on a thread of its own, so that a key never waits for the
//!   engine's read pause.
//! - [`update`]: the pure reducer `update(state, msg) -> effects`; [`state`] holds what it
//!   changes; [`keymap`] maps keys to actions and lists the hints.
//! - [`view`]: pure drawing of one frame from the state; [`theme`]: 16 ANSI colours, or none
//!   under `NO_COLOR`; [`glyphs`]: UTF-8, or ASCII alone where the locale takes no UTF-8.

pub(crate) mod glyphs;
pub(crate) mod keymap;
pub(crate) mod run;
pub(crate) mod sort;
pub(crate) mod state;
pub(crate) mod theme;
pub(crate) mod thread;
pub mod update;
pub(crate) mod view;

/// Snapshot fixtures for the view tests and the frame benchmark.
#[doc(hidden)]
pub mod testkit;

pub use run::{Remote, TuiExit, run_tui};
pub use state::UiState;
pub use theme::Theme;
pub(crate) use thread::spawn_tui;
pub use update::{Msg, UiEffect, update};
pub use view::render;
