//! A scheduler's stop (SIGTERM: Slurm before `--time` runs out, Kubernetes before it kills a
//! pod): a drain like the operator's, bounded by the same grace, but labelled as the
//! scheduler's, and kept so by the stop-now of its second signal (the exit code, 75, reads it).

use super::*;
use crate::engine::reason::{Scheduler, StopReason};
use crate::engine::{Command, ShutdownMode};

#[test]
fn a_schedulers_stop_drains_and_keeps_its_label() {
    let sched = |by| StopReason::SchedulerStop { by };
    let drain = || Command::Shutdown(ShutdownMode::Drain);
    let now = || Command::Shutdown(ShutdownMode::Now);
    // (name, commands, the reason the run stops for, streams closed)
    let cases: Vec<(&str, Vec<Command>, StopReason, usize)> = vec![
        (
            "SIGTERM under Slurm",
            vec![Command::SchedulerStop(Scheduler::Slurm)],
            sched(Scheduler::Slurm),
            0,
        ),
        (
            "SIGTERM twice: Slurm's warning, then its limit",
            vec![
                Command::SchedulerStop(Scheduler::Slurm),
                Command::SchedulerStop(Scheduler::Slurm),
                now(),
            ],
            sched(Scheduler::Slurm),
            1,
        ),
        (
            "the operator drained first",
            vec![drain(), Command::SchedulerStop(Scheduler::Kubernetes)],
            StopReason::OperatorDrain,
            0,
        ),
        (
            "the scheduler first, the operator's drain after",
            vec![Command::SchedulerStop(Scheduler::Unknown), drain()],
            sched(Scheduler::Unknown),
            0,
        ),
    ];
    for (name, cmds, reason, cancels) in cases {
        let mut h = H::new(config(""), kimi(), &[&["a", "b", "c", "d", "e"]]);
        let sent = h.dispatch();
        let closed: usize = (cmds.into_iter())
            .map(|c| {
                (h.command(c).iter())
                    .filter(|e| matches!(e, Effect::CancelInFlight))
                    .count()
            })
            .sum();
        assert_eq!(h.core.stopping(), Some(&reason), "{name}");
        assert_eq!(closed, cancels, "{name}: CancelInFlight");
        assert!(!h.core.failed(), "{name}: no failure");
        assert!(h.dispatch().is_empty(), "{name}: no new request");
        let said = h.event_texts();
        assert!(
            said.contains(&format!("stopping: {reason}")),
            "{name}: {said:?}"
        );
        for d in &sent {
            h.result(done(d.key, None, 100, 0.001, "stop"));
        }
        assert!(h.core.is_over(), "{name}: over once the answers are in");
        assert_eq!(h.core.datasets()[0].done, 4, "{name}: answers kept");
    }
    // The process's own signal: no viewer on the control socket may send it.
    assert!(!Command::SchedulerStop(Scheduler::Slurm).from_viewer_allowed());
}

/// The drain's grace bounds a scheduler's drain as every other: at its end what is in flight
/// is closed, within Slurm's warning and the pod's grace (tests/it/deploy.rs).
#[test]
fn a_schedulers_drain_ends_at_its_grace() {
    let mut h = H::new(config(""), kimi(), &[&["a", "b", "c"]]);
    h.core = h.core.with_drain_grace(Duration::from_secs(12));
    assert!(!h.dispatch().is_empty());
    h.at(2.0).command(Command::SchedulerStop(Scheduler::Slurm));
    let closes = |e: Vec<Effect>| e.iter().any(|e| matches!(e, Effect::CancelInFlight));
    assert!(!closes(h.at(13.9).tick()), "within the grace");
    assert!(closes(h.at(14.0).tick()), "at the grace's end");
    assert_eq!(
        h.core.stopping(),
        Some(&StopReason::SchedulerStop {
            by: Scheduler::Slurm
        })
    );
}
