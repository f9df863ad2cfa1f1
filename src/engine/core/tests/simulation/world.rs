//! The seeded world: what each endpoint really does, the job, the account and the operator's
//! actions at seeded times, and how an attempt ends (its fate).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::super::*;
use crate::config::BudgetMode;

/// What an endpoint of the world really does (harvest knows only its listing).
#[derive(Clone, Debug)]
pub(super) struct Behaviour {
    pub(super) ttft_s: f64,
    pub(super) tokens_per_s: f64,
    pub(super) p429: f64,
    pub(super) p5xx: f64,
    /// Streams cut after some tokens: a reset (billed like a close) or an error finish (free,
    /// OpenRouter's zero completion insurance); and 200s with nothing in them (free).
    pub(super) p_reset: f64,
    pub(super) p_mid: f64,
    pub(super) p_empty: f64,
    /// Closing a stream stops the bill here (the truth, which may differ from the docs).
    pub(super) stops_billing: bool,
    /// From this time on, closes are billed in full after all (a provider that changed after
    /// the run checked it: reliability-probe-5 P16), if it does in this world.
    pub(super) bills_closes_from: Option<f64>,
    /// Streams it takes at once before it answers 429 (the simulator table's capacity); under
    /// OpenRouter's routing a request falls through to the next candidate first, as
    /// `harvest sim` does.
    pub(super) capacity: Option<u32>,
    /// Tokens one SSE event carries on average (the simulator's `tokens_per_event`): recorded
    /// OpenRouter streams carry 2.7 at the median, Kimi K2.5's providers 4.1 to 4.4 over a
    /// stream, Google's 6.5 (issue #51).
    pub(super) tokens_per_event: f64,
    /// Seconds the provider goes on decoding after a close before it notices, where a close
    /// stops the bill: those tokens are billed (the simulator's `close_notice_ms`; no page
    /// documents how fast a provider stops).
    pub(super) notice_s: f64,
}

impl Behaviour {
    /// Whether a close at time `t` stops the bill.
    pub(super) fn stops_billing_at(&self, t: f64) -> bool {
        self.stops_billing && self.bills_closes_from.is_none_or(|from| t < from)
    }
}

/// One seeded world and the job run in it.
#[derive(Clone, Debug)]
pub(super) struct World {
    pub(super) seed: u64,
    pub(super) mode: BudgetMode,
    pub(super) concurrency: u32,
    pub(super) prompts: usize,
    pub(super) max_tokens: u32,
    /// Mean answer length, tokens (lengths are log-normal with the simulator table's spread,
    /// as `harvest sim` draws them, capped at `max_tokens`).
    pub(super) mean_len: f64,
    pub(super) budget_usd: f64,
    pub(super) routing: &'static str,
    /// When the account's privacy settings change so that every request meets a 404
    /// `privacy_restricted` (OpenRouter's availability error), if they do in this world.
    pub(super) account_closes_at: Option<f64>,
    /// The requests' temperature, when the job sets one (Moonshot's listing does not list it).
    pub(super) temperature: Option<f64>,
    /// The requests' `repetition_penalty`, which no endpoint of the table lists (pinned worlds
    /// only: under OpenRouter's routing with `require_parameters` preflight refuses the job).
    pub(super) repetition_penalty: Option<f64>,
    /// The operator's actions, at seeded times in time order.
    pub(super) ops: Vec<(f64, Op)>,
    /// The account's in-flight spending budget (OpenRouter's 402 past it), USD, if it binds.
    pub(super) account_usd: Option<f64>,
    /// When the key is revoked (every request meets a 401), if it is in this world.
    pub(super) key_revoked_at: Option<f64>,
    /// `[retry] learn_inflight_budget` (on unless a scenario turns it off).
    pub(super) learn_inflight_budget: bool,
    /// `requests_per_second`, when a scenario sets one.
    pub(super) requests_per_second: Option<f64>,
    /// How long a drain lets what is in flight finish (`--drain-grace-s`), seconds.
    pub(super) drain_grace_s: f64,
    /// The simulator's own table (`harvest sim`'s Kimi K2.5 providers): the listing harvest
    /// reads, and what OpenRouter's routing (`sim::routing::candidates`) picks from.
    pub(super) table: crate::sim::ProviderTable,
    pub(super) endpoints: Vec<RunEndpoint>,
    pub(super) truth: Vec<Behaviour>,
    /// When each of harvest's processes dies and how the next starts, if it does in this
    /// world: the first process dies by the first, the next start by the second.
    pub(super) crashes: Vec<Crash>,
}

/// A crash of harvest's process (`kill -9`, a lost node) and the next start in the same
/// directory: what was on disk stays, torn where a write was cut; the streams it had open
/// are closed by their dropped connections; the next start settles what it finds.
#[derive(Clone, Debug)]
pub(super) struct Crash {
    /// When the process dies, virtual seconds from its start, or (`near_budget`) once the bill
    /// and what is streaming come to that share of the budget, or (`in_step`) in its n-th step
    /// (a start's booking of what an earlier crash left is its first steps), whichever comes
    /// first. Near the budget, the holds of what a crash left are all that keeps the next
    /// start inside it.
    pub(super) at: f64,
    pub(super) near_budget: Option<f64>,
    pub(super) in_step: Option<u32>,
    /// Of the effects of the step it dies in, how many are performed first (modulo their
    /// number and one): a kill between an answer's row and its ledger line, mid-drain, or
    /// during a start's booking falls where the seed says.
    pub(super) cut: u32,
    /// It dies in the first step past `at` that keeps an answer, right after the answer's row
    /// and before its `complete` line (the kill the writer's order exists for).
    pub(super) after_a_row: bool,
    /// The share of the bytes of the line being written when it died that reached the disk
    /// (`None`: it died between lines).
    pub(super) torn: Option<f64>,
    /// Seconds from the crash to the next start.
    pub(super) restart_after_s: f64,
    /// Seconds from a provider's end of a generation until `GET /generation` knows it.
    pub(super) lag_s: f64,
}

impl World {
    /// The world of `seed`: Kimi K2.5's faithful endpoints at prices, paces and fault rates
    /// drawn from the seed, a job of 10 to 2,000 streams, a budget the job reaches.
    pub(super) fn from_seed(seed: u64, mode: BudgetMode) -> World {
        let mut r = SmallRng::seed_from_u64(seed);
        // The draws added after the first worlds come from a stream of their own, so that a
        // seed keeps the world it had (its pace, prices, size) when the world grows.
        let mut r2 = SmallRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x0B5E);
        let mut table = crate::sim::ProviderTable::kimi_k25();
        let mut endpoints = Vec::new();
        let mut truth = Vec::new();
        for e in &mut table.endpoints {
            // The table's pace, scaled by the seed (providers' days differ).
            e.behaviour.ttft_ms *= r.random_range(0.5..2.0);
            e.behaviour.tokens_per_s *= r.random_range(0.5..2.0);
            let listed: crate::openrouter::Endpoint =
                serde_json::from_value(e.wire.clone()).expect("the table's listing");
            endpoints.push(crate::engine::pool::listed(None, &listed));
            truth.push(Behaviour {
                ttft_s: e.behaviour.ttft_ms / 1000.0,
                tokens_per_s: e.behaviour.tokens_per_s,
                // Some days a provider is busy: most of its requests meet a 429.
                p429: [0.0, 0.0, 0.05, 0.5][r.random_range(0..4)],
                p5xx: if r.random_bool(0.3) { 0.03 } else { 0.0 },
                p_reset: if r2.random_bool(0.3) { 0.02 } else { 0.0 },
                p_mid: if r2.random_bool(0.3) { 0.02 } else { 0.0 },
                p_empty: if r2.random_bool(0.2) { 0.02 } else { 0.0 },
                // One world in five, an endpoint documented to stop the bill at a close
                // bills it in full all the same (its listing still says it stops).
                stops_billing: e.behaviour.cancel_stops_billing && !r2.random_bool(0.2),
                bills_closes_from: None,
                capacity: e.behaviour.capacity,
                tokens_per_event: 1.0,
                notice_s: 0.0,
            });
        }
        // The wire each endpoint streams on (issue #51 item 5): tokens an event as recorded
        // streams carry them, and how late a close is noticed.
        let mut r5 = SmallRng::seed_from_u64(seed.wrapping_mul(0xBF58_476D_1CE4_E5B9) ^ 0x7E5);
        for b in &mut truth {
            b.tokens_per_event = [1.0, 1.0, 2.7, 4.2, 4.4, 6.5, 8.0][r5.random_range(0..7)];
            b.notice_s = [0.0, 0.05, 0.2, 0.5, 1.0, 2.0][r5.random_range(0..6)];
        }
        // Most worlds are small (many seeds a second); one in ten runs 2,000 streams.
        let sizes: &[u32] = &[10, 10, 20, 50, 50, 100, 200, 200, 500, 2000];
        let concurrency = sizes[r.random_range(0..sizes.len())];
        let prompts = (concurrency as usize * r.random_range(2..5)).max(40);
        let max_tokens = *[1024u32, 4096, 16384]
            .get(r.random_range(0..3))
            .unwrap_or(&4096);
        let mean_len = r.random_range(0.1..0.5) * f64::from(max_tokens.min(4096));
        // A budget the job reaches: a share of what all its prompts would cost.
        let whole = prompts as f64 * mean_len * 3e-6;
        let budget_usd = whole * r.random_range(0.3..0.8);
        let routing = if r.random_bool(0.7) {
            "openrouter"
        } else {
            "pinned"
        };
        let account_closes_at = r.random_bool(0.25).then(|| r.random_range(2.0..30.0));
        let temperature = r.random_bool(0.5).then_some(0.6);
        let repetition_penalty = (routing == "pinned" && r.random_bool(0.5)).then_some(1.05);
        let ops = World::ops_of(&mut r2, concurrency, endpoints.len());
        // OpenRouter's estimate of a request is its prompt and max_tokens at the serving price
        // (~$3/M out): a budget of a share of the streams' worst cases binds.
        let account_usd = r2.random_bool(0.15).then(|| {
            f64::from(concurrency) * f64::from(max_tokens) * 3e-6 * r2.random_range(0.2..0.7)
        });
        let key_revoked_at = r2.random_bool(0.05).then(|| r2.random_range(2.0..20.0));
        // Draws added later still come from a stream of their own (see `r2`).
        let mut r3 = SmallRng::seed_from_u64(seed.wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x6EAC);
        let drain_grace_s = [2.0, 5.0, 10.0, 30.0][r3.random_range(0..4)];
        let mut r4 = SmallRng::seed_from_u64(seed.wrapping_mul(0xA24B_AED4_963E_E407) ^ 0xC4A5);
        // One world in four crashes; `/generation` lags up to two minutes behind the
        // provider's end (the docs give no figure: a 404 for a moment after a generation
        // ends, `look_ups.rs`), and the next start comes at once, minutes later, or after
        // the look-ups' 15 minutes have passed for what the crash left.
        let mut crashes = Vec::new();
        if r4.random_bool(0.25) {
            let lag_s = [1.0, 5.0, 30.0, 120.0][r4.random_range(0..4)];
            crashes.push(Crash {
                at: r4.random_range(0.5..30.0),
                near_budget: r4.random_bool(0.5).then(|| r4.random_range(0.5..0.98)),
                in_step: None,
                cut: r4.random(),
                after_a_row: r4.random_bool(0.5),
                torn: r4.random_bool(0.5).then(|| r4.random_range(0.05..0.95)),
                restart_after_s: [1.0, 1.0, 10.0, 120.0, 1_200.0][r4.random_range(0..5)],
                lag_s,
            });
            // One in three, the next start dies too, while it books and holds what the first
            // left (its first few steps).
            if r4.random_bool(1.0 / 3.0) {
                crashes.push(Crash {
                    at: f64::MAX,
                    near_budget: None,
                    in_step: Some(r4.random_range(0..6)),
                    cut: r4.random(),
                    after_a_row: false,
                    torn: r4.random_bool(0.5).then(|| r4.random_range(0.05..0.95)),
                    restart_after_s: [1.0, 60.0][r4.random_range(0..2)],
                    lag_s,
                });
            }
        }
        World {
            seed,
            mode,
            concurrency,
            prompts,
            max_tokens,
            mean_len,
            budget_usd,
            routing,
            account_closes_at,
            temperature,
            repetition_penalty,
            ops,
            account_usd,
            key_revoked_at,
            learn_inflight_budget: true,
            requests_per_second: None,
            drain_grace_s,
            table,
            endpoints,
            truth,
            crashes,
        }
    }

    /// The operator's actions in a world: in about half, a few of pause and resume, a new
    /// concurrency, an endpoint excluded and handed back; in one in eight, a drain or a stop
    /// now at the end.
    pub(super) fn ops_of(r: &mut SmallRng, concurrency: u32, endpoints: usize) -> Vec<(f64, Op)> {
        let mut ops: Vec<(f64, Op)> = Vec::new();
        if r.random_bool(0.5) {
            for _ in 0..r.random_range(1..4) {
                let at = r.random_range(0.5..40.0);
                let back = at + r.random_range(0.5..10.0);
                match r.random_range(0..3) {
                    0 => ops.extend([(at, Op::Pause), (back, Op::Resume)]),
                    1 => {
                        let n = (f64::from(concurrency) * r.random_range(0.1..2.0)).max(1.0);
                        ops.push((at, Op::Concurrency(n as u32)));
                    }
                    _ => {
                        let i = r.random_range(0..endpoints);
                        ops.extend([(at, Op::Exclude(i)), (back, Op::Include(i))]);
                    }
                }
            }
        }
        match r.random_range(0..16) {
            0 => ops.push((r.random_range(1.0..30.0), Op::Drain)),
            1 => ops.push((r.random_range(1.0..30.0), Op::StopNow)),
            _ => {}
        }
        ops.sort_by(|a, b| a.0.total_cmp(&b.0));
        ops
    }

    pub(super) fn config(&self) -> Config {
        let mode = match self.mode {
            BudgetMode::Hard => "hard",
            BudgetMode::Expected => "expected",
        };
        let temperature = self
            .temperature
            .map_or(String::new(), |t| format!("temperature = {t}\n"))
            + &self
                .repetition_penalty
                .map_or(String::new(), |p| format!("repetition_penalty = {p}\n"));
        let rps = self
            .requests_per_second
            .map_or(String::new(), |r| format!("requests_per_second = {r}\n"));
        config_documented(&format!(
            "budget_usd = {}\nbudget_mode = \"{mode}\"\nconcurrency = {}\nrouting = \"{}\"\n\
             {rps}[request]\nmax_tokens = {}\n{temperature}[retry]\nbase_delay_ms = 200\n\
             max_delay_s = 2.0\nlearn_inflight_budget = {}\n[policy]\n\
             native_quantization = \"int4\"",
            self.budget_usd,
            self.concurrency,
            self.routing,
            self.max_tokens,
            self.learn_inflight_budget
        ))
    }

    /// The world of `seed` with no faults, no account switches, no operator, and closes billed
    /// as documented: the pace and prices of the seed, for a scenario to set what it is about.
    pub(super) fn calm(seed: u64, mode: BudgetMode) -> World {
        let mut w = World::from_seed(seed, mode);
        for (b, e) in w.truth.iter_mut().zip(&w.endpoints) {
            (b.p429, b.p5xx, b.p_reset, b.p_mid, b.p_empty) = (0.0, 0.0, 0.0, 0.0, 0.0);
            // Closes billed as documented.
            b.stops_billing = e.cancel_stops_billing;
        }
        w.ops.clear();
        (w.account_closes_at, w.account_usd, w.key_revoked_at) = (None, None, None);
        (w.temperature, w.repetition_penalty) = (None, None);
        w.crashes.clear();
        w
    }

    /// The index of the endpoint tagged `tag`.
    pub(super) fn index(&self, tag: &str) -> usize {
        (self.endpoints.iter())
            .position(|e| e.tag == tag)
            .unwrap_or_else(|| panic!("no endpoint {tag}"))
    }
}

/// What the operator does at a seeded time (in the TUI or over the control socket).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Op {
    Pause,
    Resume,
    Concurrency(u32),
    /// Excludes endpoint `i` (space on its row), or hands it back to the policy.
    Exclude(usize),
    Include(usize),
    Drain,
    StopNow,
}

impl Op {
    pub(super) fn command(&self, w: &World) -> crate::engine::control::Command {
        use crate::engine::control::{Command, ShutdownMode};
        match self {
            Op::Pause => Command::Pause,
            Op::Resume => Command::Resume,
            Op::Concurrency(n) => Command::SetConcurrency(*n),
            Op::Exclude(i) | Op::Include(i) => Command::SetEndpoint {
                tag: w.endpoints[*i].tag.clone(),
                allowed: (*self == Op::Exclude(*i)).then_some(false),
            },
            Op::Drain => Command::Shutdown(ShutdownMode::Drain),
            Op::StopNow => Command::Shutdown(ShutdownMode::Now),
        }
    }
}

/// How an attempt of the world ends.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Fate {
    Answer,
    RateLimited,
    ServerError,
    /// The account's settings exclude every endpoint (sent after they changed).
    AccountClosed,
    /// OpenRouter found no endpoint for the request's `provider` object (a 404 with
    /// `excluded_by`): harvest sent what no endpoint it allowed could take.
    NoEndpoints(Vec<&'static str>),
    /// The stream breaks after `at` tokens (a reset): billed like a close.
    Reset {
        at: u64,
    },
    /// An error chunk after `at` tokens (finish_reason `error`): free.
    MidStream {
        at: u64,
    },
    /// A 200 with no content and no reasoning: free.
    Empty,
    /// The account's in-flight spending budget is full: 402 with a Retry-After.
    AccountBusy,
    /// The key was revoked: 401.
    KeyRevoked,
}

impl Fate {
    /// Its kind, for the coverage count.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Fate::Answer => "answer",
            Fate::RateLimited => "429",
            Fate::ServerError => "5xx",
            Fate::AccountClosed => "privacy 404",
            Fate::NoEndpoints(_) => "no endpoints 404",
            Fate::Reset { .. } => "reset",
            Fate::MidStream { .. } => "mid-stream error",
            Fate::Empty => "empty",
            Fate::AccountBusy => "in-flight 402",
            Fate::KeyRevoked => "401",
        }
    }

    /// Tokens it streams before it ends, of an answer of `len`.
    pub(super) fn streams(&self, len: u64) -> u64 {
        match self {
            Fate::Answer => len,
            Fate::Reset { at } | Fate::MidStream { at } => *at,
            _ => 0,
        }
    }
}
