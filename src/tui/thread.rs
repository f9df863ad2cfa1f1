//! The TUI on a thread of its own, with a runtime of its own that never pauses.
//!
//! A busy run's thread pauses before it sleeps so that the streams' tokens pile up and are read
//! in one wake-up (`crate::runtime`). Were the TUI on that thread, a key would wait for the
//! pause and the pause would be bounded by what a person notices. On its own thread a key is
//! answered on screen at once, whatever the engine's thread does; a command it sends reaches
//! the engine within one pause, and a snapshot reaches the screen within one pause and a frame.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use crate::engine::control::Command;
use crate::engine::snapshot::Snapshot;

use super::run::{TuiExit, run_tui};

/// The TUI of a run in this process, started on its own thread.
pub(crate) fn spawn_tui(
    commands: mpsc::Sender<Command>,
    snapshots: watch::Receiver<Arc<Snapshot>>,
) -> io::Result<OwnThread<io::Result<TuiExit>>> {
    OwnThread::spawn("harvest-tui", move || run_tui(commands, snapshots, None))
}

/// A future running on a thread of its own until it ends or is stopped. Dropping this stops it
/// too, without waiting.
pub(crate) struct OwnThread<T> {
    /// What the future returned; `None` when it was stopped. Closed without a value when the
    /// thread panicked. Taken once it has answered.
    result: Option<oneshot::Receiver<Option<T>>>,
    stop: Option<oneshot::Sender<()>>,
}

/// The thread's runtime, shut down without waiting wherever it is dropped: if the thread
/// cannot be started, it is dropped on the caller's thread, inside the caller's runtime, where
/// a plain drop would panic (tokio does not block in an async context).
struct Background(Option<tokio::runtime::Runtime>);

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl<T: Send + 'static> OwnThread<T> {
    /// Starts `make()`'s future on a new thread named `name`, on a one-thread runtime built
    /// here (so that failing to build it is an error to the caller, not to the thread).
    pub(crate) fn spawn<F, Fut>(name: &str, make: F) -> io::Result<Self>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T>,
    {
        let rt = Background(Some(crate::runtime::current_thread(None)?));
        let (done, result) = oneshot::channel();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let Some(runtime) = &rt.0 else { return };
                let out = runtime.block_on(async move {
                    let fut = make();
                    tokio::select! {
                        t = fut => Some(t),
                        // A stop, or the handle dropped.
                        _ = stopped => None,
                    }
                });
                // The future, and whatever it held (the terminal), is gone before this is
                // sent: a caller that has the result may print on the normal screen.
                let _ = done.send(out);
            })?;
        Ok(OwnThread {
            result: Some(result),
            stop: Some(stop),
        })
    }

    /// What the future returned, once it ends; cancel-safe (for a `select!` loop). An error
    /// says the thread panicked. Once it has answered, it answers `None` at once.
    pub(crate) async fn ended(&mut self) -> Result<Option<T>, Panicked> {
        let Some(result) = self.result.as_mut() else {
            return Ok(None);
        };
        let answer = result.await.map_err(|_| Panicked);
        self.result = None;
        answer
    }

    /// Stops the future and waits until it is dropped: `None`, or what it returned if it had
    /// ended and [`OwnThread::ended`] has not taken it.
    pub(crate) async fn stop(mut self) -> Result<Option<T>, Panicked> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.ended().await
    }
}

/// The thread ended without a result: its future panicked (the panic hook has printed why and,
/// for the TUI, restored the terminal).
#[derive(Debug, thiserror::Error)]
#[error("its thread panicked")]
pub(crate) struct Panicked;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// Sets its flag when dropped.
    struct DropFlag(Arc<AtomicBool>);
    impl Drop for DropFlag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn what_the_future_returns_comes_back() {
        let mut t = OwnThread::spawn("test", || async { 7 }).expect("spawned");
        assert_eq!(t.ended().await.expect("no panic"), Some(7));
    }

    #[tokio::test]
    async fn once_it_has_answered_it_answers_none() {
        let mut t = OwnThread::spawn("test", || async { 7 }).expect("spawned");
        assert_eq!(t.ended().await.expect("no panic"), Some(7));
        assert_eq!(t.ended().await.expect("no panic"), None);
        assert_eq!(t.stop().await.expect("no panic"), None);
    }

    #[tokio::test]
    async fn a_stop_drops_the_future_before_it_says_so() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let t = OwnThread::spawn("test", move || async move {
            let _held = flag;
            std::future::pending::<u32>().await
        })
        .expect("spawned");
        assert_eq!(t.stop().await.expect("no panic"), None);
        assert!(
            dropped.load(Ordering::SeqCst),
            "the future was dropped first"
        );
    }

    #[tokio::test]
    async fn a_panic_on_the_thread_is_an_error_not_a_hang() {
        let mut t = OwnThread::spawn("test", || async {
            if true {
                panic!("the TUI's own bug (this panic is the test's)");
            }
            1
        })
        .expect("spawned");
        assert!(t.ended().await.is_err());
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_the_future() {
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = DropFlag(dropped.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let t = OwnThread::spawn("test", move || async move {
            let _held = (flag, tx);
            std::future::pending::<()>().await
        })
        .expect("spawned");
        drop(t);
        // The sender is dropped with the future: the receiver sees it closed.
        assert!(rx.await.is_err());
        assert!(dropped.load(Ordering::SeqCst));
    }
}
