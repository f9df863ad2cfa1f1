//! Standard output for the commands that print a result (`status`, `estimate`, `providers`,
//! `init`, `probe`, `sim`, `template`): a reader that closes the pipe early
//! (`harvest status | head -c 1`) ends the printing quietly. Rust ignores SIGPIPE and `print!`
//! panics on the broken pipe (a backtrace and exit 101 in about half of the runs); here the
//! first failed write marks the output gone and the rest is dropped, and the command exits as
//! it would have (the trainer issue's pipes item; reliability-probe-4 N12). Any other write
//! error (a full disk, `> /dev/full`, an I/O error) is kept, and the process exits 1 with it
//! (`failure`, read by main.rs): `harvest template print X > X.jinja && vllm ...` must not go on
//! with an empty file (reliability-probe-5 P12). `run`'s progress lines have their own
//! (`run::Out`), which also drains the run when its output goes, and notes its errors here.

use std::io::Write;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Standard output went away: nothing more is written to it.
static GONE: AtomicBool = AtomicBool::new(false);

/// The first write error of standard output other than a closed pipe.
static FAILED: OnceLock<String> = OnceLock::new();

/// Notes a failed write of standard output: a closed pipe is the reader's choice and stays
/// quiet; any other error makes the process exit 1 (see [`failure`]).
pub(crate) fn note_failure(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return;
    }
    let _ = FAILED.set(format!("cannot write standard output: {e}"));
}

/// Why standard output could not be written, when it failed other than by a closed pipe:
/// what was printed is incomplete, so the command fails (exit 1) whatever it did.
pub fn failure() -> Option<&'static str> {
    FAILED.get().map(String::as_str)
}

/// Writes `text` to standard output and flushes it, unless the output is gone.
pub(crate) fn write(text: &str) {
    if GONE.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        GONE.store(true, Ordering::Relaxed);
        note_failure(&e);
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
