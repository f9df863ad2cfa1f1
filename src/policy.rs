//! The provider policy: which endpoints may serve requests, and why the others may not. Pure:
//! a function of the endpoint's listing, the operator's lists and the quantization policy.
//! Runtime health (circuit breakers) is layered on top by the engine.

use serde::{Deserialize, Serialize};

use crate::domain::{EndpointTag, Price, Quantization};

/// How strict the quantization policy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum PolicyMode {
    /// The model's released precision, or a lossless 16/32-bit float upcast of it; re-quantized
    /// and undisclosed (`unknown`) endpoints are excluded.
    #[default]
    Faithful,
    /// Every quantization.
    Any,
}

/// The policy settings (the `[policy]` table of the config).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// The model's released precision; `None` means look it up in [`known_native_precision`].
    pub native_quantization: Option<Quantization>,
    pub mode: PolicyMode,
    /// Endpoint tags (or base provider slugs) always allowed, whatever their quantization.
    pub include: Vec<String>,
    /// Endpoint tags (or base provider slugs) never used.
    pub exclude: Vec<String>,
    /// Quantizations allowed on top of the mode's choice.
    pub allow_quantizations: Vec<Quantization>,
    /// Quantizations never allowed.
    pub deny_quantizations: Vec<Quantization>,
    /// Allow endpoints whose quantization is unknown (in faithful mode).
    pub allow_unknown: bool,
    /// Endpoints whose API-reported 30-minute uptime is below this percentage count as down.
    pub min_uptime_30m: f64,
    /// Let OpenRouter fall back to endpoints outside the allowed set (never by default: the
    /// point of the policy is that nothing else serves).
    pub allow_fallbacks: bool,
    /// Endpoints whose answers agree with the reference's less than this (probe similarity,
    /// 0 to 1) are left out, when a probe result is there (`harvest probe`).
    pub min_probe_agreement: Option<f64>,
    /// What `[provider]` rules out (set from the config and the ZDR listing, not a key).
    #[serde(skip)]
    pub guards: ProviderGuards,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            native_quantization: None,
            mode: PolicyMode::Faithful,
            include: Vec::new(),
            exclude: Vec::new(),
            allow_quantizations: Vec::new(),
            deny_quantizations: Vec::new(),
            allow_unknown: false,
            min_uptime_30m: 50.0,
            allow_fallbacks: false,
            min_probe_agreement: None,
            guards: ProviderGuards::default(),
        }
    }
}

/// Released precision of models we know (research/openrouter-api.md §10). Kimi K2.5, K2-Thinking
/// and later ship INT4 from quantization-aware training; the original K2 Instruct shipped FP8.
pub(crate) fn known_native_precision(model: &str) -> Option<Quantization> {
    let m = model.to_ascii_lowercase();
    let m = m.split(':').next().unwrap_or(&m);
    if m.starts_with("moonshotai/kimi-k2.5")
        || m.starts_with("moonshotai/kimi-k2.6")
        || m.starts_with("moonshotai/kimi-k2.7")
        || m.starts_with("moonshotai/kimi-k2-thinking")
    {
        Some(Quantization::Int4)
    } else if m.starts_with("moonshotai/kimi-k2")
        || m.starts_with("deepseek/deepseek-v3")
        || m.starts_with("deepseek/deepseek-r1")
    {
        Some(Quantization::Fp8)
    } else if m.starts_with("openai/gpt-oss") {
        Some(Quantization::Mxfp4)
    } else {
        None
    }
}

/// Why an endpoint may not serve.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum Exclusion {
    /// The operator excluded it by name: the config's `[policy] exclude`, or `--exclude`.
    Operator,
    /// Its quantization is not the model's released precision.
    Requantized(String),
    /// Its quantization is not disclosed.
    UnknownQuantization,
    /// The quantization is on the deny list.
    Denied(String),
    /// The API reports it down (uptime below the threshold).
    Down(String),
    /// Its probe answers drift from the reference's (agreement, threshold).
    Probe(String),
    /// Dearer than `[provider] max_price` (OpenRouter would refuse to route there).
    MaxPrice(String),
    /// Not listed at `GET /endpoints/zdr` while `[provider] zdr = true`.
    NotZdr,
}

impl Exclusion {
    /// Whether it is about what the endpoint serves (its precision, or answers that drift
    /// from the reference's), so that overriding it lowers the data's fidelity; not about the
    /// operator's list, its uptime or OpenRouter's own filters.
    pub fn is_fidelity(&self) -> bool {
        matches!(
            self,
            Exclusion::Requantized(_)
                | Exclusion::UnknownQuantization
                | Exclusion::Denied(_)
                | Exclusion::Probe(_)
        )
    }
}

impl std::fmt::Display for Exclusion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exclusion::Operator => f.write_str("operator"),
            Exclusion::Requantized(q) => write!(f, "policy: {q} re-quantized"),
            Exclusion::UnknownQuantization => f.write_str("policy: unknown quant"),
            Exclusion::Denied(q) => write!(f, "policy: {q} denied"),
            Exclusion::Down(why) => write!(f, "down: {why}"),
            Exclusion::Probe(why) => write!(f, "probe: {why}"),
            Exclusion::MaxPrice(why) => write!(f, "max_price: {why}"),
            Exclusion::NotZdr => f.write_str("zdr: not a ZDR endpoint"),
        }
    }
}

/// How an endpoint's quantization relates to the model's released precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fidelity {
    /// Exactly the released precision (`*` in tables).
    Native,
    /// A lossless float upcast (bf16/fp16/fp32) of it.
    Wider,
    /// Converted to another low-precision format (`!`).
    Requantized,
    /// Not disclosed (`?`).
    Unknown,
}

impl Fidelity {
    pub fn mark(self) -> &'static str {
        match self {
            Fidelity::Native => "*",
            Fidelity::Wider => "+",
            Fidelity::Requantized => "!",
            Fidelity::Unknown => "?",
        }
    }
}

/// What the policy needs to know about an endpoint.
#[derive(Clone, Debug)]
pub struct EndpointFacts<'a> {
    pub tag: &'a str,
    pub provider_name: &'a str,
    pub quantization: &'a Quantization,
    pub uptime_30m: Option<f64>,
    /// Input and output prices, when known (for `[provider] max_price`).
    pub prices: Option<(Price, Price)>,
}

/// What `[provider]` rules out that the listing lets us see: a fixed `max_price`, and with
/// `zdr = true` the endpoints `GET /endpoints/zdr` does not list. (`data_collection` and
/// `enforce_distillable_text` are not in any listing: OpenRouter applies them unseen.)
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProviderGuards {
    pub max_price: Option<crate::openrouter::MaxPrice>,
    /// Lowercased tags of the model's ZDR endpoints; `None` when ZDR is not asked for.
    pub zdr_tags: Option<std::collections::HashSet<String>>,
}

impl ProviderGuards {
    fn exclusion(&self, e: &EndpointFacts<'_>) -> Option<Exclusion> {
        if let (Some(m), Some((pin, pout))) = (&self.max_price, e.prices) {
            let (i, o) = (pin.usd_per_million_f64(), pout.usd_per_million_f64());
            // A hair of slack for the decimal-to-float trip.
            let over = |price: f64, cap: Option<f64>| cap.is_some_and(|c| price > c + 1e-9);
            if over(i, m.prompt) || over(o, m.completion) {
                return Some(Exclusion::MaxPrice(format!("${i}/${o} per M")));
            }
        }
        if let Some(z) = &self.zdr_tags
            && !z.contains(&e.tag.to_ascii_lowercase())
        {
            return Some(Exclusion::NotZdr);
        }
        None
    }
}

/// Anything the policy can judge: an endpoint of the listing, or one of the run's pool.
pub trait Judged {
    fn facts(&self) -> EndpointFacts<'_>;
}

impl Judged for crate::openrouter::Endpoint {
    fn facts(&self) -> EndpointFacts<'_> {
        EndpointFacts {
            tag: self.tag.as_str(),
            provider_name: &self.provider_name,
            quantization: &self.quantization,
            uptime_30m: self.uptime_last_30m,
            prices: Some((self.pricing.prompt, self.pricing.completion)),
        }
    }
}

/// A slug in an include/exclude list names an endpoint by full tag, base provider slug or
/// display name (case-insensitive), as OpenRouter's routing does.
pub(crate) fn list_matches(list: &[String], tag: &str, provider_name: &str) -> bool {
    list.iter().any(|s| {
        let s = s.trim();
        s.eq_ignore_ascii_case(tag)
            || s.eq_ignore_ascii_case(EndpointTag::base_of(tag))
            || s.eq_ignore_ascii_case(provider_name)
    })
}

impl PolicyConfig {
    /// The released precision for `model`: configured, known, or assumed bf16.
    pub fn native_for(&self, model: &str) -> (Quantization, bool) {
        match (&self.native_quantization, known_native_precision(model)) {
            (Some(q), _) => (q.clone(), true),
            (None, Some(q)) => (q, true),
            (None, None) => (Quantization::Bf16, false),
        }
    }

    pub fn fidelity(&self, native: &Quantization, q: &Quantization) -> Fidelity {
        if q == native {
            return Fidelity::Native;
        }
        match q {
            Quantization::Unknown | Quantization::Other(_) => Fidelity::Unknown,
            Quantization::Bf16 | Quantization::Fp16 | Quantization::Fp32
                if native.bits().is_some_and(|b| b <= 16) =>
            {
                Fidelity::Wider
            }
            _ => Fidelity::Requantized,
        }
    }

    /// `None` when the endpoint may serve, else the first reason it may not, in the order an
    /// operator thinks of them: their own exclusion, the quantization policy, health.
    pub fn verdict(&self, native: &Quantization, e: &EndpointFacts<'_>) -> Option<Exclusion> {
        if list_matches(&self.exclude, e.tag, e.provider_name) {
            return Some(Exclusion::Operator);
        }
        let included = list_matches(&self.include, e.tag, e.provider_name);
        if !included {
            if self
                .deny_quantizations
                .iter()
                .any(|d| e.quantization.matches_filter(d))
            {
                return Some(Exclusion::Denied(e.quantization.to_string()));
            }
            let allowed_extra = self
                .allow_quantizations
                .iter()
                .any(|a| e.quantization.matches_filter(a));
            if self.mode == PolicyMode::Faithful && !allowed_extra {
                match self.fidelity(native, e.quantization) {
                    Fidelity::Native | Fidelity::Wider => {}
                    Fidelity::Unknown if self.allow_unknown => {}
                    Fidelity::Unknown => return Some(Exclusion::UnknownQuantization),
                    Fidelity::Requantized => {
                        return Some(Exclusion::Requantized(e.quantization.to_string()));
                    }
                }
            }
        }
        // OpenRouter enforces these whatever the operator included.
        if let Some(x) = self.guards.exclusion(e) {
            return Some(x);
        }
        if let Some(u) = e.uptime_30m
            && u < self.min_uptime_30m
        {
            return Some(Exclusion::Down(format!("uptime {u:.1}%")));
        }
        None
    }

    /// The one call every command makes: the verdict on `e`, with the probe's agreement for it
    /// when a probe scored it.
    pub fn judge(
        &self,
        native: &Quantization,
        e: &impl Judged,
        agreement: Option<f64>,
    ) -> Option<Exclusion> {
        self.verdict_with_probe(native, &e.facts(), agreement)
    }

    /// [`PolicyConfig::verdict`], then the probe: an endpoint the probe found drifting from
    /// the reference (agreement below `min_probe_agreement`) is out unless the operator
    /// included it by name. Endpoints the probe did not score are judged as before.
    pub fn verdict_with_probe(
        &self,
        native: &Quantization,
        e: &EndpointFacts<'_>,
        agreement: Option<f64>,
    ) -> Option<Exclusion> {
        if let Some(x) = self.verdict(native, e) {
            return Some(x);
        }
        match (self.min_probe_agreement, agreement) {
            (Some(min), Some(a))
                if a < min && !list_matches(&self.include, e.tag, e.provider_name) =>
            {
                Some(Exclusion::Probe(format!("agreement {a:.2} < {min:.2}")))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(tag: &'a EndpointTag, q: &'a Quantization, up: f64) -> EndpointFacts<'a> {
        EndpointFacts {
            tag: tag.as_str(),
            provider_name: "X",
            quantization: q,
            uptime_30m: Some(up),
            prices: None,
        }
    }

    #[test]
    fn faithful_kimi_allows_int4_and_upcasts_only() {
        let p = PolicyConfig::default();
        let (native, known) = p.native_for("moonshotai/kimi-k2.5");
        assert!(known);
        assert_eq!(native, Quantization::Int4);
        let t = EndpointTag::new("x/y");
        let cases = [
            (Quantization::Int4, None),
            (Quantization::Bf16, None),
            (
                Quantization::Fp8,
                Some(Exclusion::Requantized("fp8".into())),
            ),
            (
                Quantization::Nvfp4,
                Some(Exclusion::Requantized("nvfp4".into())),
            ),
            (Quantization::Unknown, Some(Exclusion::UnknownQuantization)),
        ];
        for (q, want) in cases {
            assert_eq!(p.verdict(&native, &facts(&t, &q, 99.0)), want, "{q}");
        }
    }

    #[test]
    fn operator_lists_and_health() {
        let mut p = PolicyConfig {
            exclude: vec!["fireworks".into()],
            include: vec!["deepinfra".into()],
            ..Default::default()
        };
        let native = Quantization::Int4;
        let unk = Quantization::Unknown;
        let fw = EndpointTag::new("fireworks");
        let di = EndpointTag::new("deepinfra/turbo");
        assert_eq!(
            p.verdict(&native, &facts(&fw, &unk, 99.0)),
            Some(Exclusion::Operator)
        );
        assert_eq!(p.verdict(&native, &facts(&di, &unk, 99.0)), None);
        let bt = EndpointTag::new("baseten/fp4");
        let fp4 = Quantization::Fp4;
        p.mode = PolicyMode::Any;
        assert_eq!(
            p.verdict(&native, &facts(&bt, &fp4, 29.8)),
            Some(Exclusion::Down("uptime 29.8%".into()))
        );
        p.deny_quantizations = vec![Quantization::Fp4];
        assert_eq!(
            p.verdict(&native, &facts(&bt, &Quantization::Mxfp4, 99.0)),
            Some(Exclusion::Denied("mxfp4".into()))
        );
    }

    #[test]
    fn unknown_model_assumes_bf16() {
        let p = PolicyConfig::default();
        assert_eq!(p.native_for("acme/new-model"), (Quantization::Bf16, false));
        assert_eq!(p.native_for("moonshotai/kimi-k2-0905").0, Quantization::Fp8);
    }
}
