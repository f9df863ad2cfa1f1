//! Logging setup: `tracing` to a file in the run's output directory (the terminal belongs to
//! the TUI or to progress lines), or to stderr for the small commands. `HARVEST_LOG` is an
//! `EnvFilter` (default `info` to a file, `warn` to stderr).

use std::path::Path;

use tracing_subscriber::EnvFilter;

fn filter(default: &str) -> EnvFilter {
    EnvFilter::try_from_env("HARVEST_LOG").unwrap_or_else(|_| EnvFilter::new(default))
}

/// Logs to stderr (small commands).
pub fn to_stderr() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter("warn"))
        .with_writer(std::io::stderr)
        .with_target(false)
        // Colour codes only for a person at a terminal, not into a file or a pipe
        // (reliability-probe-4 N12).
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Logs to `<dir>/harvest.log` (appending) through a background writer; keep the guard alive
/// until the end of the run so that the last lines are written.
pub fn to_file(dir: &Path) -> std::io::Result<tracing_appender::non_blocking::WorkerGuard> {
    // `create_dir_all` on a file says only "File exists".
    if dir.exists() && !dir.is_dir() {
        return Err(std::io::Error::other(format!(
            "output_dir {} is a file, not a directory",
            dir.display()
        )));
    }
    crate::store::create_private_dir(dir)?;
    let file = crate::store::no_follow(std::fs::OpenOptions::new().create(true).append(true))
        .open(dir.join("harvest.log"))?;
    let (writer, guard) = tracing_appender::non_blocking(file);
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter("info"))
        .with_writer(writer)
        .with_ansi(false)
        .try_init();
    Ok(guard)
}
