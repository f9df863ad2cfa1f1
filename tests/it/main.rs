//! The integration tests, in one binary (the crate is linked once, and tests of every file run
//! side by side): the binary and the engine against the simulator over loopback, failure
//! modes included, recorded real responses, the TUI in tmux, and (in `peers/`, ignored unless
//! asked for) real llama-server, mitmproxy and Python Jinja2 peers. Shared helpers are in
//! `common/`.

mod common;

mod account;
mod billing_faults;
mod budget_cap;
mod cli;
mod connection_reuse;
mod control_socket;
mod deploy;
mod detach;
mod engine_run;
mod estimate;
mod export;
mod hangup;
mod hardening;
mod help_docs;
mod init;
mod integrity;
mod key_redaction;
mod money;
mod peers;
mod pricing;
mod probe;
mod prompt_files;
mod recorded_replay;
mod resume;
mod routing;
mod run_cli;
mod second_chance;
mod shards;
mod sigterm;
mod sim_client;
mod slurm;
mod stream_fixtures;
mod systematic;
mod tls;
mod tui_reasons;
mod tui_tmux;
mod turns;
