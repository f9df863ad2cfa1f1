//! Crash worlds (issue #52 item 3): harvest's process dies at a seeded moment, and a fresh core
//! starts from what the disk holds, as a real start does. The first process writes its lines as
//! the driver and the writer do (a `dispatched` line before a request leaves, a `started` line
//! at its first chunk, an answer's row before its `complete` line) into a real directory; the
//! crash cuts the step it falls in after a seeded number of effects, tearing the line being
//! written where the world says. The world closes the streams the dead process held (billed as
//! each provider bills a dropped connection). The next start runs the store's own
//! `repair::prepare` and scan, the core's settling ([`Leftovers`], `Core::opening`,
//! `Core::landing`) with the real look-up pacing (`look_ups::Plan`) against a `/generation`
//! that lags, and the key's checkpoints and true-up through the core's door
//! (`Event::KeyUsage`). The checks then read the disk: every id ended once, the ledger is the bill, the hard budget held, across both processes.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use super::super::super::settle::{Asked, KeyMoment, Leftovers};
use super::super::*;
use super::flight::Time;
use super::run::Run;
use crate::engine::look_ups::{Answer, Plan, Until};
use crate::store::output::{
    OutputRecord, RejectRecord, SpendEntry, ledger_path, output_path, rejects_path,
};

/// The dataset's name in every world.
pub(super) const DATASET: &str = "a";

/// The output directory a crash world writes, as the writer lays it out.
pub(super) struct Disk {
    dir: tempfile::TempDir,
    ledger: std::fs::File,
    outputs: std::fs::File,
    rejects: std::fs::File,
    /// A line was torn: the process that wrote it is dead, and nothing more is written.
    torn: bool,
}

impl Disk {
    pub(super) fn new() -> Disk {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let open = |p: &Path| {
            (std::fs::OpenOptions::new().create(true).append(true))
                .open(p)
                .expect("a file in the temporary directory")
        };
        Disk {
            ledger: open(&ledger_path(dir.path())),
            outputs: open(&output_path(dir.path(), DATASET)),
            rejects: open(&rejects_path(dir.path(), DATASET)),
            torn: false,
            dir,
        }
    }

    /// The next start has cut the torn line: its process writes on.
    fn reopened(mut self) -> Disk {
        self.torn = false;
        self
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Appends `line` to the file it goes to; `torn`: only that share of its bytes, with no
    /// end of line (the kill came mid-write).
    pub(super) fn write(&mut self, line: &Line, torn: Option<f64>) {
        assert!(
            !self.torn,
            "a write after the torn line (the harness wrote for a dead process)"
        );
        self.torn = torn.is_some();
        let (file, text) = match line {
            Line::Spend(e) => (&mut self.ledger, serde_json::to_string(e)),
            Line::Output(r) => (&mut self.outputs, serde_json::to_string(r)),
            Line::Reject(r) => (&mut self.rejects, serde_json::to_string(r)),
        };
        let mut bytes = text.expect("a line serialises").into_bytes();
        match torn {
            Some(share) => bytes.truncate(((bytes.len() as f64 * share) as usize).max(1)),
            None => bytes.push(b'\n'),
        }
        file.write_all(&bytes)
            .expect("a write to the temporary directory");
    }
}

/// A line the driver's writer puts on disk.
pub(super) enum Line<'a> {
    Spend(&'a SpendEntry),
    Output(&'a OutputRecord),
    Reject(&'a RejectRecord),
}

/// What the next start settles with the API beside its new work: the look-ups of what the
/// crash left, paced as the driver paces them.
pub(super) struct Settling {
    plan: Plan,
    /// When the look-ups began, virtual seconds.
    began: f64,
}

impl Settling {
    /// When the plan may ask again, virtual seconds (`None`: nothing left to ask).
    pub(super) fn next_at(&self, t: f64) -> Option<f64> {
        let now = Duration::from_secs_f64((t - self.began).max(0.0));
        (self.plan.wake(now)).map(|w| self.began + w.as_secs_f64())
    }
}

impl Run {
    /// The process dies now: the world closes what it had open (a dropped connection is a
    /// close), and what it was settling with the API stays for the next start.
    pub(super) fn die(&mut self) {
        *self.out.seen.entry("crash").or_default() += 1;
        if self.process > 1 {
            *self
                .out
                .seen
                .entry("crash in a start's booking")
                .or_default() += 1;
        }
        if self.core.stopping().is_some() {
            *self.out.seen.entry("crash while stopping").or_default() += 1;
        }
        for key in self.keys_in_order() {
            let Some(f) = self.take(key) else { continue };
            let stops = self.world.truth[f.serving].stops_billing_at(self.t);
            self.out.bill_pico += f.billed_if_closed(self.t, stops);
            let g = self.generation(key);
            self.billed.insert(g, f.bill_if_closed(self.t, stops));
        }
        self.lookup_due.clear();
    }

    /// The next start, `restart_after_s` after the crash: the store readies the directory and
    /// scans it as `harvest run` does, and a fresh core starts from what it holds.
    pub(super) fn restart(mut self) -> Run {
        let crash = self.crash().cloned().expect("a crash world");
        // What the process that died had settled of what an earlier one left.
        self.count_settlings();
        let disk = self.disk.take().expect("a crash world's disk");
        let dir = disk.path().to_path_buf();
        let names = [DATASET.to_string()];
        // What the crash left before the start touches it: kept answers whose `complete` line
        // it cut.
        if let Ok(before) = crate::store::scan::scan_dir(&dir, &names) {
            let kept = before.kept_open.len() as u64;
            *self.out.seen.entry("kept answer booked").or_default() += kept;
        }
        let prepared = crate::store::repair::prepare(&dir, &names, false, true)
            .unwrap_or_else(|e| panic!("seed {}: the next start refused: {e}", self.world.seed));
        let scan = prepared.scan;
        let t = self.t + crash.restart_after_s;
        let cfg = self.world.config();
        let existing = &scan.datasets[0].existing;
        let book = DatasetBook {
            name: DATASET.into(),
            params: cfg.request.clone(),
            total: self.world.prompts as u64,
            done_ids: existing.done.keys().cloned().collect(),
            done: existing.outputs,
            rejected: existing.rejects,
            output_tokens: existing.output_tokens,
            spent: (scan.ledger.by_dataset.get(DATASET).copied()).unwrap_or_default(),
            ..DatasetBook::default()
        };
        let carried = scan.carried();
        let left = Leftovers::from_scan(&scan);
        // Requests sent that never started: booked as lost attempts at the start.
        *self.out.seen.entry("crash estimate").or_default() += left.never_started() as u64;
        let clock = self.t0.after(Duration::from_secs_f64(t));
        let core = Core::new(
            cfg,
            vec![book],
            Arc::new(self.world.endpoints.clone()),
            carried,
            None,
            format!("sim{}", self.process + 1),
            &clock,
        )
        .with_drain_grace(Duration::from_secs_f64(self.world.drain_grace_s))
        .with_carried_by_endpoint(&scan.ledger.by_endpoint)
        .with_closes_before(&scan.ledger.closes, clock.wall)
        .with_streams_before(&scan.ledger.streamed)
        .with_key_base(scan.ledger.key_base)
        // The key's usage when it starts: the world's bill so far.
        .with_key_at_start(Some(Usd::from_pico(self.out.bill_pico).as_f64()))
        .with_leftovers(left);
        let mut next = Run::new(&self.world, core, self.t0, self.process + 1);
        (next.t, next.began) = (t, t);
        next.disk = Some(disk.reopened());
        next.spent = carried.pico();
        next.billed = std::mem::take(&mut self.billed);
        next.out = std::mem::take(&mut self.out);
        next.hasher = std::mem::take(&mut self.hasher);
        // The operator's actions before the restart were made to the process that died.
        next.op.next = (self.world.ops.iter())
            .take_while(|(at, _)| *at < t)
            .count();
        next
    }

    /// The start's settling of what the crash left, before its first request (the driver's
    /// `begin`): the key's checkpoint, the estimates booked, the holds, the look-ups begun,
    /// all through the core's door.
    pub(super) fn open_leftovers(&mut self) {
        self.step(Event::Open { can_look_up: true });
    }

    /// The look-ups the core asked for what earlier runs left: paced as the driver's are.
    pub(super) fn ask_about_leftovers(&mut self, items: Vec<(String, SpendEntry)>) {
        let wall = self.clock().wall;
        let items = (items.into_iter())
            .map(|(g, e)| {
                let age = crate::engine::reconcile::age(&e, wall);
                (g, e, age)
            })
            .collect();
        self.settling = Some(Settling {
            plan: Plan::new(items, Until::AgedOut),
            began: self.t,
        });
    }

    /// Asks what the plan lets it ask now; each answer lands at once, through the core's door.
    pub(super) fn ask_leftovers(&mut self) {
        let Some(mut s) = self.settling.take() else {
            return;
        };
        let now = Duration::from_secs_f64((self.t - s.began).max(0.0));
        while let Some(item) = s.plan.next(now) {
            let answer = match self.billed.get(&item.id) {
                Some(b) if self.t >= b.visible_at + self.lag() => {
                    Answer::Cost(Usd::from_pico(b.pico).as_f64(), Some(b.tokens))
                }
                _ => Answer::NotYet,
            };
            for landed in s.plan.answered(item, answer, now) {
                self.step(Event::LookedUp {
                    of: Asked::Leftovers,
                    answer: Box::new(landed),
                });
            }
        }
        self.settling = Some(s);
    }

    /// What this process's core settled of what earlier runs left, for the coverage count.
    pub(super) fn count_settlings(&mut self) {
        let c = self.core.recovery_counts();
        for (what, n) in [
            ("crash found", c.found),
            ("crash lost", c.lost),
            ("crash close", c.closed_confirmed),
        ] {
            *self.out.seen.entry(what).or_default() += n as u64;
        }
        if c.confirmed > 0 {
            self.out
                .broken
                .push("a rebuilt line in a world without --repair".into());
        }
    }

    /// The end of the next start: its look-ups run to their end (those a real run leaves open
    /// when its work is over, the start after it or `status --reconcile` books as these are),
    /// then the key's true-up against the world's bill, as the driver's `settle_with_key`.
    pub(super) fn settle_at_end(&mut self) {
        let mut guard = 0;
        while let Some(at) = (self.settling.as_ref()).and_then(|s| s.next_at(self.t)) {
            guard += 1;
            if guard > 10_000 {
                self.out
                    .broken
                    .push("the look-ups of a crash never ended".into());
                break;
            }
            self.t = self.t.max(at);
            self.ask_leftovers();
            // The look-ups of this run's own closes land too.
            while let Some(std::cmp::Reverse((Time(at), _, i))) = self.lookup_due.peek().copied() {
                if at > self.t {
                    break;
                }
                self.lookup_due.pop();
                self.look_up(i);
            }
        }
        while let Some(std::cmp::Reverse((Time(at), _, i))) = self.lookup_due.pop() {
            self.t = self.t.max(at);
            self.look_up(i);
        }
        // As the driver's `finish_leftovers`: all in (when any were asked).
        if self.settling.take().is_some() {
            self.step(Event::LeftoversEnded { all_in: true });
        }
        if !self.crashed {
            self.count_settlings();
        }
        let said = self.core.events().len();
        self.key_usage(KeyMoment::End {
            look_ups_out: 0,
            stopping_now: false,
        });
        if self.core.look_ups_left() == 0 {
            // A stream closed before its first chunk where a close may be billed in full holds
            // the true-up back for `UNKNOWN_AFTER` (its provider may still be answering): the
            // end of a later run trues up, that long after, against the same base and
            // estimates a fresh scan of the directory gives.
            self.t += crate::engine::reconcile::UNKNOWN_AFTER.as_secs_f64();
            self.key_usage(KeyMoment::End {
                look_ups_out: 0,
                stopping_now: false,
            });
        }
        let unexplained = (self.core.events().iter().skip(said))
            .find(|e| e.text.contains("more than crash estimates explain"));
        if let Some(e) = unexplained {
            self.out.broken.push(e.text.clone());
        }
    }

    /// `GET /key` as the driver asks it: the key's usage (the world's bill so far) and the
    /// live spend, through the core's door.
    pub(super) fn key_usage(&mut self, moment: KeyMoment) {
        self.step(Event::KeyUsage {
            usage: Usd::from_pico(self.out.bill_pico).as_f64(),
            spent: Usd::from_pico(self.spent),
            moment,
        });
    }

    /// The checks of a crash world, from what is on disk once both processes are done: every
    /// id in one place, the ledger's total the world's bill.
    pub(super) fn check_disk(&mut self) {
        let Some(disk) = self.disk.as_ref() else {
            return;
        };
        let dir = disk.path().to_path_buf();
        let names = [DATASET.to_string()];
        let scan = match crate::store::scan::scan_dir(&dir, &names) {
            Ok(s) => s,
            Err(e) => {
                return self
                    .out
                    .broken
                    .push(format!("the directory does not scan: {e}"));
            }
        };
        for p in scan.problems() {
            self.out.broken.push(format!("the directory left: {p}"));
        }
        let mut ends: std::collections::HashMap<String, u32> = Default::default();
        let read = |path: &Path, ends: &mut std::collections::HashMap<String, u32>| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            for l in text.lines() {
                let v: serde_json::Value = serde_json::from_str(l).expect("a whole line");
                let id = v["id"].as_str().unwrap_or_default().to_string();
                *ends.entry(id).or_default() += 1;
            }
        };
        read(&output_path(&dir, DATASET), &mut ends);
        read(&rejects_path(&dir, DATASET), &mut ends);
        self.ends = ends;
        self.out.answered = scan.datasets[0].existing.outputs;
        self.out.ledger_pico = scan.ledger.total.pico();
    }

    /// The world's `/generation` lag: a second, or the crash world's.
    pub(super) fn lag(&self) -> f64 {
        self.world.crashes.first().map_or(1.0, |c| c.lag_s)
    }
}

/// A calm hard-budget world of `seed` whose providers all bill a dropped stream in full at
/// `tokens_per_s` (whatever their listings say), with `streams` at once over `prompts` of
/// `mean_len` tokens on average, that crashes once, near `near_budget` of the budget, and
/// starts again a second later with `/generation` two minutes behind.
fn billed_in_full_crash(
    seed: u64,
    (streams, prompts, max_tokens, mean_len): (u32, usize, u32, f64),
    tokens_per_s: f64,
    near_budget: f64,
) -> super::world::World {
    let mut w = super::world::World::calm(seed, crate::config::BudgetMode::Hard);
    (w.concurrency, w.prompts, w.max_tokens, w.mean_len) = (streams, prompts, max_tokens, mean_len);
    for b in &mut w.truth {
        (b.stops_billing, b.tokens_per_s, b.capacity) = (false, tokens_per_s, None);
    }
    w.crashes = vec![super::world::Crash {
        at: f64::MAX,
        near_budget: Some(near_budget),
        in_step: None,
        cut: 0,
        after_a_row: false,
        torn: None,
        restart_after_s: 1.0,
        lag_s: 120.0,
    }];
    w
}

/// A crash near the hard budget with long streams open where a close is billed in full, the
/// next start a second later and `/generation` two minutes behind (reliability-probe-5 P2's
/// shape): the providers go on generating what the dead process opened, and the next start
/// must hold their worst cases until their look-ups land, or its new streams take the same
/// room and the bill passes the budget.
#[test]
fn a_crash_near_the_hard_budget_holds_what_it_left_until_the_bills_are_known() {
    // Streams last a minute or two.
    let mut w = billed_in_full_crash(11, (50, 600, 4096, 2000.0), 25.0, 0.85);
    w.budget_usd = w.prompts as f64 * w.mean_len * 3e-6 * 0.5;
    let o = super::run::run(&w);
    eprintln!(
        "billed {} of {}, {:?}",
        Usd::from_pico(o.bill_pico),
        w.budget_usd,
        o.seen
    );
    assert_eq!(o.seen.get("crash"), Some(&1), "{:?}", o.seen);
    assert!(
        o.seen.get("crash found").copied().unwrap_or(0) > 5,
        "the crash left streams to look up: {:?}",
        o.seen
    );
    assert!(o.broken.is_empty(), "{:?}", o.broken);
}

/// A crash halfway to a hard budget whose providers bill a dropped stream in full (and are
/// known to), the next start at once and `/generation` two minutes behind
/// (`scripts/crash-restart.sh`'s shape): the next start holds what the crash left, settles it
/// as the bills come, and then spends the budget (over 90% of it billed, never past it).
/// The rule that waits for bills asked again has its own table test
/// (`settle::a_start_waits_for_bills_asked_again_only_where_they_may_make_room`).
#[test]
fn a_start_after_a_crash_settles_what_it_left_and_spends_the_budget() {
    let mut w = billed_in_full_crash(5, (40, 2000, 8192, 600.0), 40.0, 0.5);
    // Known to bill a close in full (as `cancel_stops_billing = []` says): every stream holds
    // its worst case, and nothing is sent to check a close.
    for e in &mut w.endpoints {
        e.cancel_stops_billing = false;
    }
    // Room for the crash's worst cases and a little more: about 40 worst cases of $0.025.
    w.budget_usd = 1.2;
    let o = super::run::run(&w);
    let share = o.bill_pico as f64 / Usd::from_f64(w.budget_usd).pico() as f64;
    eprintln!("billed {share:.3} of the budget, {:?}", o.seen);
    assert_eq!(o.seen.get("crash"), Some(&1), "{:?}", o.seen);
    assert!(o.broken.is_empty(), "{:?}", o.broken);
    assert!(
        share > 0.9,
        "the next start stopped with {:.0}% of the budget billed",
        share * 100.0
    );
}
