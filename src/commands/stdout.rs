//! Standard output for the commands that print a result (`status`, `estimate`, `providers`,
//! `init`, `probe`, `sim`): a reader that closes the pipe early (`harvest status | head -c 1`)
//! ends the printing quietly. Rust ignores SIGPIPE and `print!` panics on the broken pipe (a
//! backtrace and exit 101 in about half of the runs); here the first failed write marks the
//! output gone and the rest is dropped, and the command exits as it would have (the trainer
//! issue's pipes item; reliability-probe-4 N12). `run`'s progress lines have their own
//! (`run::Out`), which also drains the run when its output goes.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output went away: nothing more is written to it.
static GONE: AtomicBool = AtomicBool::new(false);

/// Writes `text` to standard output and flushes it, unless the output is gone.
pub(crate) fn write(text: &str) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        GONE.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            tracing::warn!("standard output failed: {e}");
        }
    }
}

/// `print!` that ends quietly on a closed pipe.
macro_rules! out {
    ($($t:tt)*) => { $crate::commands::stdout::write(&format!($($t)*)) };
}

/// `println!` that ends quietly on a closed pipe.
macro_rules! outln {
    ($($t:tt)*) => { $crate::commands::stdout::write(&format!("{}\n", format_args!($($t)*))) };
}

pub(crate) use {out, outln};
