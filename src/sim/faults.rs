//! Fault mixes of simulated providers: the probability, per request, of each way a real
//! provider fails, and the draw that picks what happens to one request.

use rand::Rng;
use serde::{Deserialize, Serialize};

/// Per-request probabilities (0..1). Pre-stream faults answer with an HTTP error; stream
/// faults happen after the 200 and some tokens.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultMix {
    /// 429 with `Retry-After` (upstream rate limit).
    pub rate_limit: f64,
    /// 502 "Provider returned error".
    pub server_error: f64,
    /// An error chunk (`finish_reason: error`) after some tokens, HTTP status still 200.
    pub mid_stream: f64,
    /// The stream stops sending (keep-alives neither) and hangs until the client gives up.
    pub stall: f64,
    /// The connection is cut mid-body.
    pub reset: f64,
    /// First token ten times later than usual.
    pub slow_start: f64,
    /// A 200 with no content at all (finish `stop`, zero tokens).
    pub empty: f64,
    /// The body ends cleanly mid-stream: no finish reason, no usage, no `[DONE]`.
    pub truncate: f64,
    /// Seconds sent in `Retry-After` with 429s.
    pub retry_after_s: f64,
}

/// What happens to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    RateLimit,
    ServerError,
    MidStream,
    Stall,
    Reset,
    Empty,
    Truncate,
}

impl Fault {
    pub fn is_pre_stream(self) -> bool {
        matches!(self, Fault::RateLimit | Fault::ServerError)
    }
}

impl FaultMix {
    const NAMES: [&'static str; 9] = [
        "rate_limit",
        "server_error",
        "mid_stream",
        "stall",
        "reset",
        "slow_start",
        "empty",
        "truncate",
        "retry_after_s",
    ];

    fn slot(&mut self, name: &str) -> Option<&mut f64> {
        Some(match name {
            "rate_limit" => &mut self.rate_limit,
            "server_error" => &mut self.server_error,
            "mid_stream" => &mut self.mid_stream,
            "stall" => &mut self.stall,
            "reset" => &mut self.reset,
            "slow_start" => &mut self.slow_start,
            "empty" => &mut self.empty,
            "truncate" => &mut self.truncate,
            "retry_after_s" => &mut self.retry_after_s,
            _ => return None,
        })
    }

    /// Applies `name=value,name=value` (the `--faults` flag) on top of this mix.
    pub fn apply_spec(&mut self, spec: &str) -> Result<(), String> {
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, value) = part
                .split_once('=')
                .ok_or_else(|| format!("fault {part:?} must be name=value"))?;
            let v: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("fault {name}: {value:?} is not a number"))?;
            let slot = self.slot(name.trim()).ok_or_else(|| {
                format!("unknown fault {name:?}; known: {}", Self::NAMES.join(", "))
            })?;
            *slot = v;
        }
        self.validate()
    }

    pub fn validate(&self) -> Result<(), String> {
        let probs = [
            ("rate_limit", self.rate_limit),
            ("server_error", self.server_error),
            ("mid_stream", self.mid_stream),
            ("stall", self.stall),
            ("reset", self.reset),
            ("slow_start", self.slow_start),
            ("empty", self.empty),
            ("truncate", self.truncate),
        ];
        for (n, p) in probs {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("fault {n} must be a probability in 0..1, got {p}"));
            }
        }
        let total: f64 = probs
            .iter()
            .filter(|(n, _)| *n != "slow_start")
            .map(|(_, p)| p)
            .sum();
        if total > 1.0 + 1e-9 {
            return Err(format!(
                "fault probabilities (besides slow_start) add up to {total:.3} > 1"
            ));
        }
        if self.retry_after_s.is_nan() || self.retry_after_s < 0.0 {
            return Err("retry_after_s must be >= 0".into());
        }
        Ok(())
    }

    /// Draws the fault of one request (at most one; slow start is drawn apart).
    pub fn draw(&self, rng: &mut impl Rng) -> Fault {
        let u: f64 = rng.random();
        let mut acc = 0.0;
        for (p, f) in [
            (self.rate_limit, Fault::RateLimit),
            (self.server_error, Fault::ServerError),
            (self.mid_stream, Fault::MidStream),
            (self.stall, Fault::Stall),
            (self.reset, Fault::Reset),
            (self.empty, Fault::Empty),
            (self.truncate, Fault::Truncate),
        ] {
            acc += p;
            if u < acc {
                return f;
            }
        }
        Fault::None
    }

    pub fn draw_slow_start(&self, rng: &mut impl Rng) -> bool {
        self.slow_start > 0.0 && rng.random::<f64>() < self.slow_start
    }

    pub fn none() -> Self {
        FaultMix::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    #[test]
    fn spec_parsing_and_validation() {
        let mut m = FaultMix::none();
        m.apply_spec("rate_limit=0.1, reset=0.05,retry_after_s=3")
            .expect("ok");
        assert_eq!((m.rate_limit, m.reset, m.retry_after_s), (0.1, 0.05, 3.0));
        assert!(
            m.apply_spec("bogus=1")
                .expect_err("unknown")
                .contains("unknown fault")
        );
        assert!(m.apply_spec("stall=x").is_err());
        assert!(m.apply_spec("stall=1.5").is_err());
        let mut m = FaultMix::none();
        assert!(m.apply_spec("mid_stream=0.6,reset=0.6").is_err());
    }

    #[test]
    fn draws_follow_the_mix() {
        let mut m = FaultMix::none();
        m.apply_spec("rate_limit=0.2,mid_stream=0.1").expect("ok");
        let mut rng = SmallRng::seed_from_u64(7);
        let n = 20_000;
        let mut rl = 0;
        let mut mid = 0;
        for _ in 0..n {
            match m.draw(&mut rng) {
                Fault::RateLimit => rl += 1,
                Fault::MidStream => mid += 1,
                Fault::None => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!((rl as f64 / n as f64 - 0.2).abs() < 0.02);
        assert!((mid as f64 / n as f64 - 0.1).abs() < 0.02);
        assert_eq!(FaultMix::none().draw(&mut rng), Fault::None);
    }
}
