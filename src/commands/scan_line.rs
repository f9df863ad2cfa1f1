//! The progress line of the prompt files' count at a run's start: files of millions of
//! prompts take seconds to read, and nothing else is on the screen yet (the TUI starts after).

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::store::prescan::ScanProgress;

/// Nothing is shown for a count shorter than this.
const QUIET: Duration = Duration::from_millis(500);

/// Prints the count's progress on stderr until dropped: rewritten in place on a terminal
/// (4 times a second), a plain line every 5 s otherwise.
pub(super) struct ScanLine {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ScanLine {
    pub(super) fn start(progress: Arc<ScanProgress>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        // A thread, not a task: the count runs on the runtime's only thread.
        let thread = std::thread::Builder::new()
            .name("scan-line".into())
            .spawn(move || watch(&progress, &flag))
            .ok();
        ScanLine { stop, thread }
    }
}

impl Drop for ScanLine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn watch(progress: &ScanProgress, stop: &AtomicBool) {
    let tty = std::io::stderr().is_terminal();
    let every = if tty {
        Duration::from_millis(250)
    } else {
        Duration::from_secs(5)
    };
    let started = Instant::now();
    std::thread::park_timeout(QUIET);
    let mut shown = false;
    while !stop.load(Ordering::Relaxed) {
        // Done counting: the start goes on (catalog, key, preflight) with nothing to show here.
        let files = progress.files.load(Ordering::Relaxed);
        if files > 0 && progress.files_done.load(Ordering::Relaxed) >= files {
            break;
        }
        let line = describe(progress, started.elapsed());
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        shown = true;
        std::thread::park_timeout(every);
    }
    if shown && tty {
        let _ = write!(std::io::stderr(), "\r\x1b[2K");
    }
}

/// `harvest: counting prompts: 1,234 MB of 3,800 MB (32%), 2 of 6 files, 4 s`; before the
/// count, what earlier runs left is read (a resume's answers and ledger: seconds for 100,000
/// rows), and the line says that.
pub(super) fn describe(progress: &ScanProgress, elapsed: Duration) -> String {
    if progress.files.load(Ordering::Relaxed) == 0 {
        return format!(
            "harvest: reading what earlier runs left in the output directory, {} s",
            elapsed.as_secs()
        );
    }
    let (read, total) = progress.bytes();
    let pct = (read * 100).checked_div(total).unwrap_or(0).min(100);
    format!(
        "harvest: counting prompts: {} of {} ({pct}%), {} of {} files, {} s",
        crate::domain::megabytes(read),
        crate::domain::megabytes(total),
        progress.files_done.load(Ordering::Relaxed),
        progress.files.load(Ordering::Relaxed),
        elapsed.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_how_far_the_count_is() {
        let p = ScanProgress::default();
        p.total_bytes.store(3_800_000_000, Ordering::Relaxed);
        p.read_bytes.store(1_234_000_000, Ordering::Relaxed);
        p.files.store(6, Ordering::Relaxed);
        p.files_done.store(2, Ordering::Relaxed);
        assert_eq!(
            describe(&p, Duration::from_millis(4_700)),
            "harvest: counting prompts: 1,234 MB of 3,800 MB (32%), 2 of 6 files, 4 s"
        );
        // Empty files: no division by zero.
        let empty = ScanProgress::default();
        empty.files.store(1, Ordering::Relaxed);
        assert_eq!(
            describe(&empty, Duration::ZERO),
            "harvest: counting prompts: 0 MB of 0 MB (0%), 0 of 1 files, 0 s"
        );
        // Before the count: the output directory is read (a resume's answers, the ledger).
        assert_eq!(
            describe(&ScanProgress::default(), Duration::from_secs(12)),
            "harvest: reading what earlier runs left in the output directory, 12 s"
        );
    }
}
