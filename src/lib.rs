//! harvest: LLM training data at scale through OpenRouter or any OpenAI-compatible server.
//!
//! The library holds everything; `main.rs` only parses the command line and maps errors to exit
//! codes. The engine never touches the terminal; the TUI renders snapshots of engine state.

pub mod cli;
pub mod commands;
pub mod domain;
pub mod engine;
pub mod openrouter;
pub mod sim;
