//! What a bad config file is: one error type, each variant naming the file, the line and the
//! key, all exit code 2.

use std::io;
use std::path::{Path, PathBuf};

/// A bad or unreadable config file. Every variant maps to exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}: {}", path.display(), io_reason(source))]
    Read { path: PathBuf, source: io::Error },
    #[error("{}: TOML syntax error: {message}", loc(path, line))]
    Syntax {
        path: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{}: unknown key `{name}` in {table} ({expected})", loc(path, line))]
    UnknownKey {
        path: PathBuf,
        line: Option<usize>,
        name: String,
        /// Where it was found: `the top level`, `[request]`, `dataset[1].request`.
        table: String,
        /// The keys the table takes, and where this one belongs when it is a top-level key
        /// (`…; on_bad_line is a top-level key: …`).
        expected: String,
    },
    /// A wrong type or value, a missing required key, or a failed check after parsing.
    #[error("{}: {key}: {message}", loc(path, line))]
    Invalid {
        path: PathBuf,
        line: Option<usize>,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The 1-based line the error points at, when the file has one for it.
    pub fn line(&self) -> Option<usize> {
        match self {
            ConfigError::Read { .. } => None,
            ConfigError::Syntax { line, .. }
            | ConfigError::UnknownKey { line, .. }
            | ConfigError::Invalid { line, .. } => *line,
        }
    }
}

pub(super) fn loc(path: &Path, line: &Option<usize>) -> String {
    match line {
        Some(l) => format!("{}:{l}", path.display()),
        None => path.display().to_string(),
    }
}

/// `No such file or directory`, without the `(os error 2)` suffix meant for programmers.
pub(super) fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
