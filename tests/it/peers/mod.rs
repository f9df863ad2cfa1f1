//! Tests against third-party peers that `scripts/peers.sh install` builds or fetches into
//! `~/.cache/harvest-peers` (about 15 minutes the first time on 2 cores, then reused): llama.cpp's
//! `llama-server` with a real tiny model and mitmproxy (`llama_server`), and Python's Jinja2 for
//! the chat templates (`templates`).
//!
//! Every test here is `#[ignore]`d with that reason, so a plain `cargo test --locked` lists it
//! as ignored instead of passing it unchecked. `cargo test --locked --test it -- --ignored
//! peers::` runs them (`.ci/run` does, after installing the peers); run, a test whose peer is
//! missing fails and names it.

mod llama_server;
mod templates;
