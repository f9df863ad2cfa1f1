//! The core run in virtual time against a seeded world (issue #35, first slice): no sockets,
//! no threads, no sleeps. A world is endpoints with prices, time to first token, decode speed,
//! 429s and 5xx, and whether closing a stream really stops its bill; the harness plays the
//! driver and the workers (spawn, accrue, the dollar cap, closes, look-ups) through the core's
//! one door, and checks after every run that every id ends in one place, that the ledger equals
//! the world's bill and that the hard budget holds. The shape follows FoundationDB's simulation
//! testing and TigerBeetle's VOPR: a failing seed prints the line that replays it.
//!
//! Not turmoil or madsim: they simulate sockets and tokio tasks, and the core has neither; its
//! door is a plain function of an event and a time, so the world is driven directly.
//!
//! The money the workers keep (running cost, held worst cases, the cap) follows the same pure
//! rules the worker calls (`attempt_money::{hold_released, cap_reached, close_at_cap}`).
//!
//! One world in four crashes (`crash.rs`): its first process writes a real output directory
//! as the driver does, dies at a seeded moment, and a fresh core starts from what the store
//! reads there, settling what the crash left through the core's own decisions; the checks then
//! read the disk across both processes.
//!
//! `HARVEST_SIM_SEEDS=N` runs N worlds instead of the fixed set; `HARVEST_SIM_SEED=S` replays
//! one (`cargo test --lib simulation -- --nocapture` prints what it did).

mod crash;
mod flight;
mod run;
mod scenarios;
mod world;

use crate::config::BudgetMode;
use crate::domain::Usd;
use run::{Outcome, run};
use world::World;

/// The fixed set of seeds `cargo test --lib` runs, or `HARVEST_SIM_SEEDS` of them, or the one
/// `HARVEST_SIM_SEED` names.
fn seeds(fixed: u64) -> Vec<u64> {
    if let Some(s) = std::env::var("HARVEST_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("HARVEST_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(fixed);
    (1..=n).collect()
}

/// Runs every world, on as many threads as the machine has (each run is its own: the same
/// seed gives the same run whatever thread takes it); outcomes in the worlds' order.
fn run_all(worlds: &[World]) -> Vec<Outcome> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::with_capacity(worlds.len()));
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(8));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(w) = worlds.get(i) else { break };
                    let o = run(w);
                    done.lock().expect("no run panicked").push((i, o));
                }
            });
        }
    });
    let mut done = done.into_inner().expect("no run panicked");
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, o)| o).collect()
}

/// The worlds of `seeds` in both budget modes, as `sim_figures` and the promise test run them.
fn both_modes(seeds: &[u64]) -> Vec<World> {
    (seeds.iter())
        .flat_map(|&s| [BudgetMode::Hard, BudgetMode::Expected].map(|m| World::from_seed(s, m)))
        .collect()
}

/// Every world of the fixed set (250 seeds, 500 runs), in both budget modes: ids end once, the
/// ledger is the bill, the hard budget holds, no request goes where no endpoint takes it, no
/// prompt is rejected for the account.
#[test]
fn seeded_worlds_keep_every_promise() {
    let worlds = both_modes(&seeds(250));
    let outcomes = run_all(&worlds);
    let mut failures = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for o in &outcomes {
        for (k, n) in &o.seen {
            *seen.entry(*k).or_insert(0u64) += n;
        }
    }
    eprintln!("the worlds covered: {seen:?}");
    if std::env::var("HARVEST_SIM_SEED").is_err() {
        // The fixed set meets every fault, account switch and operator action the world has.
        for k in [
            "answer",
            "429",
            "5xx",
            "privacy 404",
            "reset",
            "mid-stream error",
            "empty",
            "in-flight 402",
            "401",
            "pause",
            "concurrency",
            "exclude",
            "drain",
            "stop now",
            "dollar cap",
            // A stream closed before its first chunk (no generation to look up), and a close
            // still unknown when the end stops asking, reckoned again.
            "closed before its first chunk",
            "close reckoned at the end",
            // Crash worlds (`crash.rs`): a process died, torn lines were cut, kept answers
            // booked from their rows, what it left found at `/generation` or estimated and
            // trued up against the key.
            "crash",
            "crash in a start's booking",
            "torn line",
            "kept answer booked",
            "crash found",
            "crash close",
            "crash estimate",
            "key true-up",
        ] {
            assert!(
                seen.get(k).copied().unwrap_or(0) > 0,
                "no world met {k}: {seen:?}"
            );
        }
    }
    for (w, o) in worlds.iter().zip(&outcomes) {
        let (seed, mode) = (w.seed, w.mode);
        if std::env::var("HARVEST_SIM_SEED").is_ok() {
            eprintln!(
                "seed {seed} {mode:?}: {} streams, {} prompts, max_tokens {}, {} routing, \
                 budget {:.4}, account closes at {:?}: {} answered, {} rejected, {} \
                 requests, billed {}, ledger {}, budget reached at {:.1} s, ended at {:.1} \
                 s, peak {} in flight",
                w.concurrency,
                w.prompts,
                w.max_tokens,
                w.routing,
                w.budget_usd,
                w.account_closes_at,
                o.answered,
                o.rejected,
                o.requests,
                Usd::from_pico(o.bill_pico),
                Usd::from_pico(o.ledger_pico),
                o.to_budget_s,
                o.end_s,
                o.peak_in_flight
            );
        }
        if !o.broken.is_empty() {
            failures.push(format!(
                "HARVEST_SIM_SEED={seed} ({mode:?}, {} streams, {} prompts, {} routing): {}",
                w.concurrency,
                w.prompts,
                w.routing,
                o.broken.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} worlds broke a promise; replay one with `HARVEST_SIM_SEED=<seed> cargo test --lib \
         seeded_worlds`:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// One world's run as `sim_figures` reports it.
#[derive(Clone, Copy)]
struct Figures {
    to_budget_s: f64,
    billed_share: f64,
    requests_per_answer: f64,
    usd_per_answer: f64,
    answered: f64,
    billed_usd: f64,
}

/// Figures, not a check: each world of the fixed set (or `HARVEST_SIM_SEEDS`) in both budget
/// modes, side by side: the hard mode's time to the budget against the expected mode's, what
/// each billed against the budget, requests per answer and dollars per answer. Run with
/// `cargo test --lib sim_figures -- --ignored --nocapture`.
#[test]
#[ignore = "prints figures; run by hand"]
fn sim_figures() {
    let mut ratios = Vec::new();
    let mut rows = Vec::new();
    let seeds: Vec<u64> = seeds(250)
        .into_iter()
        .filter(|&s| {
            World::from_seed(s, BudgetMode::Hard)
                .account_closes_at
                .is_none()
        })
        .collect();
    let worlds = both_modes(&seeds);
    let outcomes = run_all(&worlds);
    for pair in worlds.chunks(2).zip(outcomes.chunks(2)) {
        let one: Vec<Figures> = (pair.0.iter().zip(pair.1))
            .map(|(w, o)| {
                let budget = Usd::from_f64(w.budget_usd).pico() as f64;
                Figures {
                    to_budget_s: o.to_budget_s,
                    billed_share: o.bill_pico as f64 / budget,
                    requests_per_answer: o.requests as f64 / o.answered.max(1) as f64,
                    usd_per_answer: o.bill_pico as f64 / 1e12 / o.answered.max(1) as f64,
                    answered: o.answered as f64,
                    billed_usd: o.bill_pico as f64 / 1e12,
                }
            })
            .collect();
        if let [h, e] = one[..] {
            ratios.push(h.to_budget_s / e.to_budget_s.max(1e-9));
            rows.push([h, e]);
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let pick = |mode: usize, f: fn(&Figures) -> f64| {
        rows.iter().map(|r| f(&r[mode])).collect::<Vec<f64>>()
    };
    eprintln!("worlds: {}", rows.len());
    eprintln!(
        "time to the budget, hard / expected: median {:.2}, max {:.2}",
        median(ratios.clone()),
        max(&ratios)
    );
    eprintln!(
        "billed / budget: hard median {:.4} max {:.4}; expected median {:.4} max {:.4}",
        median(pick(0, |f| f.billed_share)),
        max(&pick(0, |f| f.billed_share)),
        median(pick(1, |f| f.billed_share)),
        max(&pick(1, |f| f.billed_share))
    );
    eprintln!(
        "requests per answer: hard {:.3}, expected {:.3}; $ per answer: hard {:.6}, expected {:.6}",
        median(pick(0, |f| f.requests_per_answer)),
        median(pick(1, |f| f.requests_per_answer)),
        median(pick(0, |f| f.usd_per_answer)),
        median(pick(1, |f| f.usd_per_answer))
    );
    // Over all worlds at once: what a dollar bought, and the time the hard mode took in all
    // against the expected mode's (a few large worlds weigh as they would in a real run).
    let sum = |mode: usize, f: fn(&Figures) -> f64| pick(mode, f).iter().sum::<f64>();
    eprintln!(
        "all worlds: $ per answer hard {:.6}, expected {:.6}; time to the budget hard / \
         expected {:.2}",
        sum(0, |f| f.billed_usd) / sum(0, |f| f.answered).max(1.0),
        sum(1, |f| f.billed_usd) / sum(1, |f| f.answered).max(1.0),
        sum(0, |f| f.to_budget_s) / sum(1, |f| f.to_budget_s).max(1e-9)
    );
}

#[test]
fn the_same_seed_runs_the_same_way() {
    for seed in [3, 17, 42] {
        let w = World::from_seed(seed, BudgetMode::Hard);
        let (a, b) = (run(&w), run(&w));
        assert_eq!(a.trace, b.trace, "seed {seed}");
        assert_eq!(a.bill_pico, b.bill_pico, "seed {seed}");
    }
}

/// Figures, not a check: the seed's run scaled down (issue #34's shape, as
/// `scripts/seed-shape.sh` runs it against the real binary) in calm worlds of several seeds:
/// Kimi K2.5's faithful endpoints under OpenRouter's routing, 2,000 streams, `max_tokens`
/// 16,384, answers of 1,700 tokens on average, and budgets the expected mode spends in one to
/// a few minutes. For each: the time to within 0.5% of the budget in both modes, what was
/// billed against the budget, the answers kept, what each cost and how often the dollar cap
/// tripped. Its ratios are the binary's (12 worlds: 2.85× at $20, 1.54× at $60;
/// `scripts/seed-shape.sh` at fda4eeb: 2.8× and 1.52×): a rule is measured here first. Run
/// with `cargo test --lib seed_shape_figures -- --ignored --nocapture` (`HARVEST_SIM_SEEDS=N`
/// for N worlds a budget, `HARVEST_SIM_BUDGETS=20,60,100` for the budgets in dollars).
#[test]
#[ignore = "prints figures; run by hand"]
fn seed_shape_figures() {
    let seeds = seeds(6);
    let budgets: Vec<f64> = std::env::var("HARVEST_SIM_BUDGETS")
        .ok()
        .map(|v| v.split(',').filter_map(|b| b.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![20.0, 60.0]);
    for budget in budgets {
        let worlds: Vec<World> = (seeds.iter())
            .flat_map(|&s| {
                [BudgetMode::Hard, BudgetMode::Expected].map(|m| {
                    let mut w = World::calm(s, m);
                    (w.concurrency, w.prompts, w.max_tokens) = (2000, 40_000, 16_384);
                    (w.mean_len, w.budget_usd, w.routing) = (1700.0, budget, "openrouter");
                    w
                })
            })
            .collect();
        let outcomes = run_all(&worlds);
        let mut ratios = Vec::new();
        for (w, o) in worlds.chunks(2).zip(outcomes.chunks(2)) {
            let b = Usd::from_f64(budget).pico() as f64;
            let line = |o: &Outcome| {
                format!(
                    "{:6.1} s, billed {:.4}, {:6} answers, {:.6} $/answer, {} trips",
                    o.to_budget_s,
                    o.bill_pico as f64 / b,
                    o.answered,
                    o.bill_pico as f64 / 1e12 / o.answered.max(1) as f64,
                    o.seen.get("dollar cap").copied().unwrap_or(0)
                )
            };
            let ratio = o[0].to_budget_s / o[1].to_budget_s.max(1e-9);
            ratios.push(ratio);
            eprintln!(
                "${budget} seed {:3}: hard {} | expected {} | hard/expected {ratio:.2}",
                w[0].seed,
                line(&o[0]),
                line(&o[1])
            );
            if std::env::var("HARVEST_SIM_SEED").is_ok() {
                // Where the streams were, a line every ten seconds: stoppable endpoints (where
                // a close stops the bill, as documented) against the rest, and the bill.
                for (mode, o) in ["hard", "expected"].iter().zip(o) {
                    for (t, open, bill, reserved) in &o.samples {
                        let (mut stop, mut rest) = (0, 0);
                        for (e, n) in w[0].endpoints.iter().zip(open) {
                            *(if e.cancel_stops_billing {
                                &mut stop
                            } else {
                                &mut rest
                            }) += n;
                        }
                        eprintln!(
                            "  {mode} {t:6.1} s: {stop:5} stoppable {rest:5} others, billed {:.3}, \
                             reserved {:.3}",
                            *bill as f64 / b,
                            *reserved as f64 / b
                        );
                    }
                }
            }
            for o in o {
                assert!(o.broken.is_empty(), "{:?}", o.broken);
            }
        }
        ratios.sort_by(f64::total_cmp);
        let total = |m: usize, f: fn(&Outcome) -> f64| -> f64 {
            outcomes.iter().skip(m).step_by(2).map(f).sum()
        };
        eprintln!(
            "${budget}: hard / expected median {:.2}, max {:.2}; all worlds {:.2}; answers \
             hard {} expected {}",
            ratios[ratios.len() / 2],
            ratios[ratios.len() - 1],
            total(0, |o| o.to_budget_s) / total(1, |o| o.to_budget_s),
            total(0, |o| o.answered as f64),
            total(1, |o| o.answered as f64)
        );
    }
}
