//! The run's signals and what each means, and the exit code a run ends with. SIGINT is the
//! operator's (Ctrl-C: drain, again to stop now; exit 130). SIGTERM is the scheduler's whose job
//! the run is (Slurm before `--time` runs out, a preemption or `scancel`; Kubernetes before it
//! kills a pod; `kill`): drain, again to stop now, and exit 75 so that the scheduler runs it
//! again and it resumes (deploy/). SIGHUP is the terminal's loss (drain, exit 129).

use std::time::Duration;

use tokio::sync::mpsc;

use crate::engine::{self, Command, Scheduler, ShutdownMode, StopReason};

use super::exit;

/// A signal the run acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Sig {
    /// SIGINT (Ctrl-C): drain, a second one stops now.
    Interrupt,
    /// SIGTERM: the scheduler's stop (Slurm, Kubernetes, `kill`): drain, a second one stops
    /// now; exit 75.
    Terminate,
    /// SIGHUP: the terminal went away; drain and exit 129.
    Hangup,
}

/// The run's signal listeners, created once for its whole life: a signal that arrives between
/// two turns of the watching loop is queued, never missed.
pub(super) struct Signals {
    #[cfg(unix)]
    listeners: Option<[tokio::signal::unix::Signal; 3]>,
    /// A detached run has no terminal to lose: SIGHUP is logged and ignored.
    ignore_hangup: bool,
}

impl Signals {
    pub(super) fn detached() -> Signals {
        Signals {
            ignore_hangup: true,
            ..Signals::new()
        }
    }

    pub(super) fn new() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listeners = (|| {
                Some([
                    signal(SignalKind::interrupt()).ok()?,
                    signal(SignalKind::terminate()).ok()?,
                    signal(SignalKind::hangup()).ok()?,
                ])
            })();
            if listeners.is_none() {
                tracing::warn!("cannot listen for signals: Ctrl-C ends the process at once");
            }
            Signals {
                listeners,
                ignore_hangup: false,
            }
        }
        #[cfg(not(unix))]
        Signals {
            ignore_hangup: false,
        }
    }

    pub(super) async fn recv(&mut self) -> Sig {
        #[cfg(unix)]
        {
            let Some([int, term, hup]) = self.listeners.as_mut() else {
                return std::future::pending().await;
            };
            loop {
                tokio::select! {
                    _ = int.recv() => return Sig::Interrupt,
                    _ = term.recv() => return Sig::Terminate,
                    _ = hup.recv() => {
                        if !self.ignore_hangup {
                            return Sig::Hangup;
                        }
                        tracing::info!("SIGHUP ignored: a detached run has no terminal to lose");
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
            Sig::Interrupt
        }
    }
}

/// Who stopped the run from outside the engine, first: the exit code follows it when the
/// engine's own reason does not say (the run was already stopping for another reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Interruption {
    /// Ctrl-C (or a SIGINT from elsewhere), the TUI's quit.
    Operator,
    /// SIGTERM.
    Scheduler,
}

/// What the watcher did to the run, for the exit code. The drain's grace is the engine's
/// (every drain is bounded by it, whoever asked): the watcher only asks.
#[derive(Default)]
pub(super) struct Stopper {
    /// The first signal that stopped the run.
    pub(super) by: Option<Interruption>,
    now_sent: bool,
}

impl Stopper {
    /// What to tell the engine for `sig`, and the line to say on stderr, given the signals
    /// before it: the first SIGINT drains as the operator's, the first SIGTERM as `scheduler`'s
    /// stop, a second of either stops now (once), SIGHUP drains as a lost terminal.
    pub(super) fn decide(
        &mut self,
        sig: Sig,
        scheduler: Scheduler,
        grace: Duration,
    ) -> (Option<Command>, Option<String>) {
        let grace = grace.as_secs();
        match sig {
            Sig::Hangup => (Some(Command::OutputLost), None),
            Sig::Interrupt | Sig::Terminate if self.by.is_some() => {
                if std::mem::replace(&mut self.now_sent, true) {
                    return (None, None);
                }
                let line = "harvest: second signal: stopping now".to_string();
                (Some(Command::Shutdown(ShutdownMode::Now)), Some(line))
            }
            Sig::Interrupt => {
                self.by = Some(Interruption::Operator);
                let line = format!(
                    "harvest: interrupted: finishing in-flight requests (up to {grace}s; again \
                     to stop now)"
                );
                (Some(Command::Shutdown(ShutdownMode::Drain)), Some(line))
            }
            Sig::Terminate => {
                self.by = Some(Interruption::Scheduler);
                let reason = StopReason::SchedulerStop { by: scheduler };
                let line = format!(
                    "harvest: {reason}: finishing in-flight requests (up to {grace}s; again to \
                     stop now), then exit {}",
                    exit::RESUMABLE
                );
                (Some(Command::SchedulerStop(scheduler)), Some(line))
            }
        }
    }

    /// A drain (or, asked twice, a stop now) for `sig`.
    pub(super) async fn on_signal(
        &mut self,
        sig: Sig,
        commands: &mpsc::Sender<Command>,
        grace: Duration,
    ) {
        let scheduler = Scheduler::from_env(&|v| std::env::var(v).ok());
        let (command, line) = self.decide(sig, scheduler, grace);
        if sig == Sig::Hangup {
            tracing::warn!("the terminal or the output went away: draining the run");
        }
        if let Some(line) = line {
            eprintln_quiet(&line);
        }
        if let Some(c) = command {
            let _ = commands.send(c).await;
        }
    }

    /// The terminal or the output went away: drain within the grace period.
    pub(super) async fn lost(&mut self, commands: &mpsc::Sender<Command>) {
        self.on_signal(Sig::Hangup, commands, Duration::ZERO).await;
    }
}

/// A line on stderr, unless stderr is gone too.
pub(super) fn eprintln_quiet(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{text}");
}

/// The exit code of a run that ended, from the engine's reason and, when that does not say,
/// from who stopped it ([`Stopper::by`]): 2 when a prompt file changed under it, 1 when the API
/// or harvest stopped it (bad key, no credit, a failed write), 129 when the terminal or the
/// output went away, 130 when the operator stopped it, 75 when a scheduler's SIGTERM stopped it
/// before it was done (run it again to resume), else 0 (done, or the budget reached).
pub(super) fn exit_code(summary: &engine::RunSummary, by: Option<Interruption>) -> u8 {
    match &summary.reason {
        Some(r) if r.is_input() => exit::BAD_INPUT,
        _ if summary.failed => exit::FAILURE,
        Some(StopReason::OutputLost) => exit::HANGUP,
        Some(r) if r.is_operator() => exit::INTERRUPTED,
        Some(r) if r.is_scheduler() => exit::RESUMABLE,
        // Stopping already (the budget) or done when the signal came: what a scheduler's
        // rerun would find is the same, so it is not asked for; the operator's Ctrl-C is said.
        _ => match by {
            Some(Interruption::Operator) => exit::INTERRUPTED,
            Some(Interruption::Scheduler) | None => exit::OK,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::RunSummary;

    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn the_scheduler_is_the_one_whose_variables_the_process_has() {
        let cases: [(&[(&str, &str)], Scheduler); 5] = [
            (&[("SLURM_JOB_ID", "17")], Scheduler::Slurm),
            (
                &[("KUBERNETES_SERVICE_HOST", "10.0.0.1")],
                Scheduler::Kubernetes,
            ),
            // A Slurm job on a node that also runs pods is Slurm's.
            (
                &[
                    ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
                    ("SLURM_JOB_ID", "17"),
                ],
                Scheduler::Slurm,
            ),
            (&[("SLURM_JOB_ID", "")], Scheduler::Unknown),
            (&[], Scheduler::Unknown),
        ];
        for (vars, want) in cases {
            let env = |v: &str| {
                (vars.iter())
                    .find(|(k, _)| *k == v)
                    .map(|(_, x)| x.to_string())
            };
            assert_eq!(Scheduler::from_env(&env), want, "{vars:?}");
        }
    }

    /// Each signal in turn, from a fresh run: what the engine is told and what is said.
    #[test]
    fn signals_become_a_drain_labelled_by_who_sent_them_and_a_second_stops_now() {
        let drain_by = |s| Some(Command::SchedulerStop(s));
        let now = Some(Command::Shutdown(ShutdownMode::Now));
        // (signals in turn, the scheduler, what the engine is told for each, who stopped the
        // run, what the first line says)
        type Case = (
            Vec<Sig>,
            Scheduler,
            Vec<Option<Command>>,
            Option<Interruption>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                vec![Sig::Terminate],
                Scheduler::Slurm,
                vec![drain_by(Scheduler::Slurm)],
                Some(Interruption::Scheduler),
                "harvest: scheduler stop: SIGTERM from Slurm, resumes when resubmitted: \
                 finishing in-flight requests (up to 30s; again to stop now), then exit 75",
            ),
            (
                vec![Sig::Terminate],
                Scheduler::Kubernetes,
                vec![drain_by(Scheduler::Kubernetes)],
                Some(Interruption::Scheduler),
                "from Kubernetes",
            ),
            (
                vec![Sig::Terminate],
                Scheduler::Unknown,
                vec![drain_by(Scheduler::Unknown)],
                Some(Interruption::Scheduler),
                "harvest: scheduler stop: SIGTERM, resumes when run again",
            ),
            (
                vec![Sig::Interrupt],
                Scheduler::Slurm,
                vec![Some(Command::Shutdown(ShutdownMode::Drain))],
                Some(Interruption::Operator),
                "harvest: interrupted: finishing in-flight requests (up to 30s; again to stop now)",
            ),
            // Slurm's SIGTERM at --time itself, after its warning: stop now, once; the stop
            // stays the scheduler's.
            (
                vec![Sig::Terminate, Sig::Terminate, Sig::Terminate],
                Scheduler::Slurm,
                vec![drain_by(Scheduler::Slurm), now.clone(), None],
                Some(Interruption::Scheduler),
                "",
            ),
            (
                vec![Sig::Interrupt, Sig::Terminate],
                Scheduler::Slurm,
                vec![Some(Command::Shutdown(ShutdownMode::Drain)), now],
                Some(Interruption::Operator),
                "",
            ),
            (
                vec![Sig::Hangup],
                Scheduler::Slurm,
                vec![Some(Command::OutputLost)],
                None,
                "",
            ),
        ];
        for (sigs, scheduler, want, by, first_line) in cases {
            let mut stopper = Stopper::default();
            let got: Vec<(Option<Command>, Option<String>)> = (sigs.iter())
                .map(|s| stopper.decide(*s, scheduler, GRACE))
                .collect();
            let commands: Vec<Option<Command>> = got.iter().map(|(c, _)| c.clone()).collect();
            assert_eq!(commands, want, "{sigs:?} under {scheduler:?}");
            assert_eq!(stopper.by, by, "{sigs:?}");
            let said = got[0].1.clone().unwrap_or_default();
            assert!(said.contains(first_line), "{sigs:?}: {said}");
        }
    }

    fn ended(reason: Option<StopReason>, failed: bool) -> RunSummary {
        RunSummary {
            state: engine::RunState::Stopped,
            reason,
            failed,
            stopped_now: false,
            snapshot: crate::tui::testkit::kimi_snapshot(),
            overshoot: crate::domain::Usd::ZERO,
            output_dir: Default::default(),
            datasets: Vec::new(),
            restored: Vec::new(),
        }
    }

    #[test]
    fn a_schedulers_stop_exits_75_and_the_operators_130() {
        use Interruption::{Operator, Scheduler as Sched};
        let slurm = || {
            Some(StopReason::SchedulerStop {
                by: Scheduler::Slurm,
            })
        };
        let cases = [
            (slurm(), false, Some(Sched), exit::RESUMABLE),
            (slurm(), false, None, exit::RESUMABLE),
            (
                Some(StopReason::SchedulerStop {
                    by: Scheduler::Unknown,
                }),
                false,
                Some(Sched),
                75,
            ),
            (Some(StopReason::OperatorDrain), false, Some(Operator), 130),
            // The operator drained first (`harvest stop`), Slurm's signal came after.
            (Some(StopReason::OperatorDrain), false, Some(Sched), 130),
            (Some(StopReason::OperatorStopNow), false, None, 130),
            (Some(StopReason::OutputLost), false, Some(Sched), 129),
            // Stopping at the budget when SIGTERM came: a rerun would stop there too.
            (Some(StopReason::DollarBudget), false, Some(Sched), 0),
            (Some(StopReason::DollarBudget), false, Some(Operator), 130),
            // Done when the signal came.
            (None, false, Some(Sched), 0),
            (None, false, None, 0),
            (
                Some(StopReason::Internal {
                    detail: "disk full".into(),
                }),
                true,
                Some(Sched),
                1,
            ),
            (
                Some(StopReason::InputChanged {
                    detail: "p.jsonl".into(),
                }),
                false,
                Some(Sched),
                2,
            ),
        ];
        for (reason, failed, by, code) in cases {
            let summary = ended(reason.clone(), failed);
            assert_eq!(exit_code(&summary, by), code, "{reason:?} by {by:?}");
        }
    }
}
