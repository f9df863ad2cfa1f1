//! What a request costs at an endpoint, as its listing prices it: the per-token prompt and
//! completion prices, the per-request fee, the cache-read price for prompt tokens read from the
//! provider's cache, conditional `overrides` (past a prompt length, or in a daily UTC window)
//! and the `discount`. One formula for the engine's reservations and accrual, `estimate` and
//! the simulator's bill; the API's `usage.cost` stays the judge (the engine compares the two
//! and says when they part).
//!
//! From the API reference (`PublicEndpoint.pricing`, docs/openrouter-routing-facts.md §6):
//! an override "applies when the total prompt tokens of a request are strictly greater than"
//! its `min_prompt_tokens`, and "while the current UTC time is inside the half-open window
//! [utc_start, utc_end), which may wrap past midnight"; "when multiple entries apply, later
//! entries win per key. Price keys absent from an entry inherit the base price". `discount`:
//! "the price is multiplied by (1 - discount)", for every priced unit. Whether the listed
//! prices already include the discount is not documented; harvest reads the docs' words (and
//! so does the simulator), and the price check says if the real bill disagrees.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::domain::{Price, Usd};

/// One conditional price entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Override {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_prompt_tokens: Option<u64>,
    /// `HHMM` clock numbers: `100` is 01:00.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_start: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc_end: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Price>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_cache_read: Option<Price>,
}

impl Override {
    /// Whether every condition it sets holds for a prompt of `prompt_tokens` at `hhmm` UTC.
    fn applies(&self, prompt_tokens: u64, hhmm: u16) -> bool {
        let long_enough = self.min_prompt_tokens.is_none_or(|m| prompt_tokens > m);
        let in_window = match (self.utc_start, self.utc_end) {
            (Some(s), Some(e)) if s <= e => s <= hhmm && hhmm < e,
            // Wraps past midnight.
            (Some(s), Some(e)) => hhmm >= s || hhmm < e,
            (Some(s), None) => hhmm >= s,
            (None, Some(e)) => hhmm < e,
            (None, None) => true,
        };
        long_enough && in_window
    }
}

/// An endpoint's prices.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tariff {
    pub prompt: Price,
    pub completion: Price,
    /// Per request.
    pub request: Price,
    /// Per prompt token read from the cache; the prompt price when not listed.
    pub cache_read: Option<Price>,
    /// 0 to 1.
    pub discount: Decimal,
    pub overrides: Vec<Override>,
}

/// The prices that apply to one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rates {
    pub prompt: Price,
    pub completion: Price,
    pub cache_read: Price,
    pub request: Usd,
}

/// Tokens of one request, as `usage` reports them (`cached` is part of `prompt`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TokenUse {
    pub prompt: u64,
    pub cached: u64,
    pub completion: u64,
}

/// `p` × (1 − discount).
fn discounted(p: Price, keep: Decimal) -> Price {
    Price::per_token(p.usd_per_token() * keep)
}

impl Tariff {
    /// Plain per-token prices (an own server's, a test's).
    pub fn flat(prompt: Price, completion: Price) -> Tariff {
        Tariff {
            prompt,
            completion,
            ..Tariff::default()
        }
    }

    fn keep(&self) -> Decimal {
        (Decimal::ONE - self.discount.clamp(Decimal::ZERO, Decimal::ONE)).max(Decimal::ZERO)
    }

    /// The prices for a prompt of `prompt_tokens` sent at `hhmm` UTC.
    pub fn rates(&self, prompt_tokens: u64, hhmm: u16) -> Rates {
        let (mut p, mut c, mut r) = (self.prompt, self.completion, self.cache_read);
        for o in self
            .overrides
            .iter()
            .filter(|o| o.applies(prompt_tokens, hhmm))
        {
            p = o.prompt.unwrap_or(p);
            c = o.completion.unwrap_or(c);
            r = o.input_cache_read.or(r);
        }
        let keep = self.keep();
        Rates {
            prompt: discounted(p, keep),
            completion: discounted(c, keep),
            cache_read: discounted(r.unwrap_or(p), keep),
            request: Usd::from_decimal(self.request.usd_per_token() * keep),
        }
    }

    /// What a request costs: prompt tokens not read from the cache at the prompt price, cached
    /// ones at the cache-read price, completion tokens (reasoning included) at the completion
    /// price, plus the request fee; exact, then rounded once to the picodollar.
    pub fn cost(&self, t: TokenUse, hhmm: u16) -> Usd {
        let r = self.rates(t.prompt, hhmm);
        let cached = t.cached.min(t.prompt);
        let sum = r.prompt.usd_per_token() * Decimal::from(t.prompt - cached)
            + r.cache_read.usd_per_token() * Decimal::from(cached)
            + r.completion.usd_per_token() * Decimal::from(t.completion);
        Usd::from_decimal(sum) + r.request
    }

    /// The highest prompt and completion prices it can charge under any condition (after the
    /// discount): what `max_price = "auto"` must let through.
    pub fn top(&self) -> (Price, Price) {
        let keep = self.keep();
        let p = (self.overrides.iter().filter_map(|o| o.prompt)).fold(self.prompt, Price::max);
        let c =
            (self.overrides.iter().filter_map(|o| o.completion)).fold(self.completion, Price::max);
        (discounted(p, keep), discounted(c, keep))
    }
}

/// `HHMM` of a UTC time, as overrides write it.
pub(crate) fn hhmm(t: &chrono::DateTime<chrono::Utc>) -> u16 {
    use chrono::Timelike;
    (t.hour() * 100 + t.minute()) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    fn per_m(x: &str) -> Price {
        Price::per_million(Decimal::from_str(x).expect("decimal"))
    }

    fn tariff() -> Tariff {
        Tariff {
            prompt: per_m("0.5"),
            completion: per_m("2.5"),
            request: Price::ZERO,
            cache_read: Some(per_m("0.125")),
            discount: Decimal::ZERO,
            overrides: vec![
                // Long context: dearer prompt and completion.
                Override {
                    min_prompt_tokens: Some(128_000),
                    prompt: Some(per_m("1.0")),
                    completion: Some(per_m("5.0")),
                    ..Override::default()
                },
                // Off-peak, wrapping midnight: half the completion price.
                Override {
                    utc_start: Some(2200),
                    utc_end: Some(600),
                    completion: Some(per_m("1.25")),
                    ..Override::default()
                },
            ],
        }
    }

    #[test]
    fn overrides_apply_by_prompt_length_and_window_later_entries_winning() {
        let t = tariff();
        // (prompt tokens, HHMM, prompt $/M, completion $/M)
        let cases = [
            (1_000, 1200, "0.5", "2.5"),
            (128_000, 1200, "0.5", "2.5"), // strictly greater
            (128_001, 1200, "1", "5"),
            (1_000, 2200, "0.5", "1.25"), // the window starts inclusive
            (1_000, 559, "0.5", "1.25"),
            (1_000, 600, "0.5", "2.5"),  // and ends exclusive
            (200_000, 300, "1", "1.25"), // both: the later entry wins its keys
        ];
        for (tokens, at, p, c) in cases {
            let r = t.rates(tokens, at);
            assert_eq!(
                (r.prompt, r.completion),
                (per_m(p), per_m(c)),
                "{tokens} at {at}"
            );
        }
        assert_eq!(t.top(), (per_m("1.0"), per_m("5.0")));
    }

    #[test]
    fn cost_prices_cached_tokens_the_fee_and_the_discount() {
        let mut t = tariff();
        let use_ = TokenUse {
            prompt: 1_000,
            cached: 600,
            completion: 2_000,
        };
        // 400 × 0.5 + 600 × 0.125 + 2000 × 2.5 per M = 200 + 75 + 5000 µ$.
        assert_eq!(t.cost(use_, 1200), Usd::from_f64(0.005275));
        t.request = Price::per_token(Decimal::from_str("0.001").expect("fee"));
        t.discount = Decimal::from_str("0.2").expect("discount");
        // Everything × 0.8, the fee too.
        assert_eq!(t.cost(use_, 1200), Usd::from_f64(0.8 * 0.005275 + 0.0008));
        // Without a cache-read price cached tokens cost the prompt price.
        t.cache_read = None;
        t.discount = Decimal::ZERO;
        t.request = Price::ZERO;
        assert_eq!(t.cost(use_, 1200), Usd::from_f64(0.0055));
        assert_eq!(hhmm(&"2026-12-01T07:45:00Z".parse().expect("time")), 745);
    }
}
