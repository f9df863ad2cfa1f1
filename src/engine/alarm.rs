//! [`Alarm`]: a one-way signal every stream in flight waits on (a stop-now, the dollar cap),
//! cheap enough to look at on every wake-up of every stream.
//!
//! tokio_util's `CancellationToken` did this job before. Its future takes two mutexes on every
//! poll (the token's tree node, then the `Notify`'s waiter list), and at real provider pace each
//! stream is polled for every token or two: 1.9–2.5% of harvest's CPU in the real-pace profile
//! (BENCHMARKS.md, #36). An alarm is an atomic flag beside a `Notify`: a [`Watch`] touches the
//! waiter list only the first time it is polled and when the task polling it changes, and
//! otherwise reads one atomic.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use tokio::sync::Notify;

/// Raised once, never lowered; every [`Watch`] of it completes.
#[derive(Debug, Default)]
pub(crate) struct Alarm {
    raised: AtomicBool,
    notify: Notify,
}

impl Alarm {
    pub(crate) fn new() -> Alarm {
        Alarm::default()
    }

    /// Raises the alarm and wakes every task watching it (once: raising it again does nothing).
    pub(crate) fn raise(&self) {
        // SeqCst pairs with the watch's load after it registers: a watch that registered after
        // this store sees it; one that registered before is woken by `notify_waiters`.
        if !self.raised.swap(true, Ordering::SeqCst) {
            self.notify.notify_waiters();
        }
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.raised.load(Ordering::SeqCst)
    }

    /// A future that completes when the alarm is raised (at once if it already is).
    pub(crate) fn watch(&self) -> Watch<'_> {
        Watch {
            alarm: self,
            notified: Box::pin(self.notify.notified()),
            registered: None,
        }
    }
}

/// Completes when its [`Alarm`] is raised. Poll it as often as you like: while the same task
/// polls it, a poll reads one atomic.
pub(crate) struct Watch<'a> {
    alarm: &'a Alarm,
    /// Boxed so that the watch can move between polls (a `select!` in a loop keeps it outside).
    notified: Pin<Box<tokio::sync::futures::Notified<'a>>>,
    /// The waker `notified` was last polled with: a poll by the same task needs no new one.
    registered: Option<Waker>,
}

impl Future for Watch<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.alarm.is_raised() {
            return Poll::Ready(());
        }
        if self
            .registered
            .as_ref()
            .is_some_and(|w| w.will_wake(cx.waker()))
        {
            return Poll::Pending;
        }
        let this = &mut *self;
        if this.notified.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.registered = Some(cx.waker().clone());
        // Raised between the first look and the registration: the notification may have gone
        // before this waiter was in the list.
        if this.alarm.is_raised() {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);
    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counting() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (c.clone(), Waker::from(c))
    }

    #[test]
    fn a_watch_waits_until_the_alarm_is_raised_and_then_is_woken_once() {
        let alarm = Alarm::new();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut w = alarm.watch();
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        // Polled again by the same task: still waiting, nothing woken.
        assert!(Pin::new(&mut w).poll(&mut cx).is_pending());
        assert_eq!(count.0.load(Ordering::SeqCst), 0);
        alarm.raise();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        assert!(Pin::new(&mut w).poll(&mut cx).is_ready());
        // Raised twice: no second wake.
        alarm.raise();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_watch_made_after_the_alarm_went_off_is_ready_at_once() {
        let alarm = Alarm::new();
        alarm.raise();
        let (_, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut alarm.watch()).poll(&mut cx).is_ready());
    }

    #[test]
    fn a_watch_polled_by_a_new_task_wakes_that_task() {
        let alarm = Alarm::new();
        let (first, w1) = counting();
        let (second, w2) = counting();
        let mut w = alarm.watch();
        assert!(
            Pin::new(&mut w)
                .poll(&mut Context::from_waker(&w1))
                .is_pending()
        );
        assert!(
            Pin::new(&mut w)
                .poll(&mut Context::from_waker(&w2))
                .is_pending()
        );
        alarm.raise();
        assert_eq!(first.0.load(Ordering::SeqCst), 0);
        assert_eq!(second.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn every_watch_of_many_is_woken() {
        let alarm = Alarm::new();
        let (count, waker) = counting();
        let mut cx = Context::from_waker(&waker);
        let mut watches: Vec<_> = (0..100).map(|_| alarm.watch()).collect();
        for w in &mut watches {
            assert!(Pin::new(w).poll(&mut cx).is_pending());
        }
        alarm.raise();
        assert_eq!(count.0.load(Ordering::SeqCst), 100);
        assert!(
            watches
                .iter_mut()
                .all(|w| Pin::new(w).poll(&mut cx).is_ready())
        );
    }

    #[tokio::test]
    async fn a_task_waiting_on_a_watch_ends_when_another_raises_it() {
        let alarm = Arc::new(Alarm::new());
        let waiting = {
            let alarm = alarm.clone();
            tokio::spawn(async move { alarm.watch().await })
        };
        tokio::task::yield_now().await;
        alarm.raise();
        waiting.await.expect("the waiting task ends");
    }
}
