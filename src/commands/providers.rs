//! `harvest providers MODEL`: the endpoint table of a model (price, quantization, context,
//! status, uptime), sorted by output price, with what the policy would do with each endpoint.

use super::stdout::{out, outln};
use serde::Serialize;

use crate::domain::Quantization;
use crate::openrouter::{Endpoint, ModelEndpoints};
use crate::policy::{Exclusion, Fidelity, PolicyConfig};
use crate::probe::ProbeReport;

/// One row of the table.
#[derive(Clone, Debug, Serialize)]
pub struct ProviderRow {
    pub provider: String,
    pub tag: String,
    pub quantization: Quantization,
    pub fidelity: Fidelity,
    /// USD per million tokens.
    pub price_in_per_m: f64,
    pub price_out_per_m: f64,
    /// Exact API strings (USD per token).
    pub pricing: PricingStrings,
    pub context_length: Option<u64>,
    pub max_completion_tokens: Option<u64>,
    pub status: Option<i64>,
    pub uptime_30m: Option<f64>,
    pub latency_p50_30m: Option<f64>,
    pub throughput_p50_30m: Option<f64>,
    pub allowed: bool,
    pub excluded: Option<Exclusion>,
    /// From a probe result: similarity to the reference (1 = identical) and exact-match rate.
    pub probe_similarity: Option<f64>,
    pub probe_exact: Option<f64>,
    /// False when the endpoint could not be asked for greedy decoding (its score is shown in
    /// parentheses and not used by the policy).
    pub probe_greedy: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct PricingStrings {
    pub prompt: String,
    pub completion: String,
}

/// The `--json` document.
#[derive(Clone, Debug, Serialize)]
pub struct ProvidersReport {
    pub model: String,
    pub native_quantization: Quantization,
    /// False when the released precision was assumed (not configured and not known).
    pub native_known: bool,
    pub policy: PolicyConfig,
    /// The reference endpoint of the probe result shown, when one was given.
    pub probe_reference: Option<String>,
    pub allowed: usize,
    pub endpoints: Vec<ProviderRow>,
}

fn row(
    e: &Endpoint,
    native: &Quantization,
    policy: &PolicyConfig,
    probe: Option<&ProbeReport>,
) -> ProviderRow {
    let scored = probe.and_then(|p| p.endpoints.iter().find(|s| s.tag == e.tag.as_str()));
    let excluded = policy.judge(
        native,
        e,
        scored.filter(|s| s.greedy).and_then(|s| s.similarity),
    );
    ProviderRow {
        provider: e.provider_name.clone(),
        tag: e.tag.to_string(),
        quantization: e.quantization.clone(),
        fidelity: policy.fidelity(native, &e.quantization),
        price_in_per_m: e.pricing.prompt.usd_per_million_f64(),
        price_out_per_m: e.pricing.completion.usd_per_million_f64(),
        pricing: PricingStrings {
            prompt: e.pricing.prompt.usd_per_token().normalize().to_string(),
            completion: e.pricing.completion.usd_per_token().normalize().to_string(),
        },
        context_length: e.context_length,
        max_completion_tokens: e.max_completion_tokens,
        status: e.status,
        uptime_30m: e.uptime_last_30m,
        latency_p50_30m: e.latency_last_30m.and_then(|p| p.p50),
        throughput_p50_30m: e.throughput_last_30m.and_then(|p| p.p50),
        allowed: excluded.is_none(),
        excluded,
        probe_similarity: scored.and_then(|s| s.similarity),
        probe_exact: scored.and_then(|s| s.exact_match_rate),
        probe_greedy: scored.is_none_or(|s| s.greedy),
    }
}

/// Builds the report: rows sorted by output price, then input price, then tag.
pub fn report(
    model: &str,
    listing: &ModelEndpoints,
    policy: &PolicyConfig,
    probe: Option<&ProbeReport>,
) -> ProvidersReport {
    let (native, native_known) = policy.native_for(model);
    let mut rows: Vec<ProviderRow> = listing
        .endpoints
        .iter()
        .map(|e| row(e, &native, policy, probe))
        .collect();
    rows.sort_by(|a, b| {
        a.price_out_per_m
            .total_cmp(&b.price_out_per_m)
            .then(a.price_in_per_m.total_cmp(&b.price_in_per_m))
            .then_with(|| a.tag.cmp(&b.tag))
    });
    ProvidersReport {
        model: model.to_string(),
        allowed: rows.iter().filter(|r| r.allowed).count(),
        native_quantization: native,
        native_known,
        policy: policy.clone(),
        probe_reference: probe.map(|p| p.reference.clone().unwrap_or_else(|| "majority".into())),
        endpoints: rows,
    }
}

fn k(n: Option<u64>) -> String {
    match n {
        None => "-".into(),
        Some(n) if n >= 1000 => format!("{}k", n / 1000),
        Some(n) => n.to_string(),
    }
}

/// The human table.
pub fn render_text(r: &ProvidersReport) -> String {
    let header = [
        "provider", "tag", "quant", "$/M in", "$/M out", "context", "max out", "status", "up 30m",
        "probe", "allowed",
    ];
    let mut table: Vec<[String; 11]> = Vec::new();
    for e in &r.endpoints {
        table.push([
            e.provider.clone(),
            e.tag.clone(),
            format!("{} {}", e.quantization, e.fidelity.mark()),
            format!("{:.2}", e.price_in_per_m),
            format!("{:.2}", e.price_out_per_m),
            k(e.context_length),
            k(e.max_completion_tokens),
            e.status.map_or("-".into(), |s| s.to_string()),
            e.uptime_30m.map_or("-".into(), |u| format!("{u:.1}%")),
            match (e.probe_similarity, e.probe_greedy) {
                (None, _) => "-".into(),
                (Some(s), true) => format!("{s:.2}"),
                (Some(s), false) => format!("({s:.2})"),
            },
            match &e.excluded {
                None => "yes".into(),
                Some(x) => format!("no: {x}"),
            },
        ]);
    }
    let mut width = header.map(str::len);
    for row in &table {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    // Numbers are right-aligned, text left-aligned.
    let right = [
        false, false, false, true, true, true, true, true, true, true, false,
    ];
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if right[i] {
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&" ".repeat(pad));
                }
            }
        }
        s.push('\n');
        s
    };
    let mut out = format!(
        "{}: {} endpoints, {} allowed by policy {} (native {}{})\n",
        r.model,
        r.endpoints.len(),
        r.allowed,
        match r.policy.mode {
            crate::policy::PolicyMode::Faithful => "faithful",
            crate::policy::PolicyMode::Any => "any",
        },
        r.native_quantization,
        if r.native_known {
            ""
        } else {
            ", assumed: set policy.native_quantization"
        }
    );
    out.push_str(&line(&header.map(String::from)));
    for row in &table {
        out.push_str(&line(row));
    }
    out.push_str("quant: * native precision  + lossless upcast  ! re-quantized  ? undisclosed\n");
    if let Some(r) = &r.probe_reference {
        out.push_str(&format!(
            "probe: word-level similarity of greedy answers to {r}'s (1.00 = identical; \
             in parentheses: no temperature, sampled)\n"
        ));
    }
    out
}

impl From<&crate::cli::PolicyArgs> for PolicyConfig {
    fn from(a: &crate::cli::PolicyArgs) -> Self {
        PolicyConfig {
            native_quantization: a.native.clone(),
            mode: a.mode.into(),
            include: a.include.clone(),
            exclude: a.exclude.clone(),
            allow_unknown: a.allow_unknown,
            min_probe_agreement: a.min_probe_agreement,
            ..Default::default()
        }
    }
}

/// Fetches the listing, with a wrong model id reported as bad input.
pub async fn fetch(
    client: &crate::openrouter::OpenRouterClient,
    model: &str,
) -> anyhow::Result<ModelEndpoints> {
    use crate::openrouter::ApiError;
    match client.endpoints(model).await {
        Ok(l) => Ok(l),
        Err(ApiError::Invalid(m)) => Err(super::BadInput(m).into()),
        Err(
            e @ ApiError::Http {
                status: 400 | 404, ..
            },
        ) => Err(super::BadInput(format!(
            "model {model:?} not found at {}: {e}",
            client.base_url()
        ))
        .into()),
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "listing the endpoints of {model} at {}",
            client.base_url()
        ))),
    }
}

pub async fn run(args: crate::cli::ProvidersArgs) -> anyhow::Result<()> {
    use crate::openrouter::{ApiKey, ClientOptions, OpenRouterClient};
    let key = ApiKey::from_env(&args.api_key_env);
    let client = OpenRouterClient::new(ClientOptions::new(args.base_url.clone(), key))
        .map_err(|e| super::BadInput(e.to_string()))?;
    let listing = fetch(&client, &args.model).await?;
    let probe = match &args.probe {
        Some(p) => Some(ProbeReport::load(p).map_err(|e| super::BadInput(e.to_string()))?),
        None => None,
    };
    // What `[provider]` would rule out in a run.
    let mut policy = PolicyConfig::from(&args.policy);
    policy.guards.max_price = args.max_price.clone();
    if args.zdr {
        let zdr = (client.zdr_tags(&args.model).await)
            .map_err(|e| anyhow::anyhow!("reading the ZDR endpoint list: {e}"))?;
        policy.guards.zdr_tags = Some(zdr);
    }
    let r = report(&args.model, &listing, &policy, probe.as_ref());
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        out!("{}", crate::printable::printable(&render_text(&r)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::ProviderTable;

    fn listing() -> ModelEndpoints {
        let t = ProviderTable::kimi_k25();
        let body = serde_json::json!({"data": {"id": t.model_id,
            "endpoints": t.endpoints.iter().map(|e| e.wire.clone()).collect::<Vec<_>>()}});
        ModelEndpoints::parse(body.to_string().as_bytes()).expect("parse")
    }

    #[test]
    fn default_policy_on_kimi() {
        let r = report(
            "moonshotai/kimi-k2.5",
            &listing(),
            &PolicyConfig::default(),
            None,
        );
        assert_eq!(r.endpoints.len(), 11);
        assert_eq!(r.endpoints[0].tag, "chutes/int4");
        assert_eq!(r.endpoints[10].tag, "venice");
        let allowed: Vec<&str> = r
            .endpoints
            .iter()
            .filter(|e| e.allowed)
            .map(|e| e.tag.as_str())
            .collect();
        assert_eq!(
            allowed,
            vec![
                "chutes/int4",
                "siliconflow/int4",
                "atlas-cloud/int4",
                "parasail/int4",
                "moonshotai/int4"
            ]
        );
        let bt = r
            .endpoints
            .iter()
            .find(|e| e.tag == "baseten/fp4")
            .expect("bt");
        assert_eq!(bt.excluded, Some(Exclusion::Requantized("fp4".into())));
        let text = render_text(&r);
        assert!(text.starts_with(
            "moonshotai/kimi-k2.5: 11 endpoints, 5 allowed by policy faithful (native int4)"
        ));
        assert!(text.contains("no: policy: unknown quant"), "{text}");
        let chutes = text.lines().find(|l| l.starts_with("Chutes")).expect("row");
        assert!(
            chutes.contains("int4 *")
                && chutes.contains("2.20")
                && chutes.contains("99.1%")
                && chutes.ends_with("yes"),
            "{chutes}"
        );
        let json = serde_json::to_value(&r).expect("json");
        assert_eq!(json["endpoints"][0]["pricing"]["completion"], "0.0000022");
        assert_eq!(json["endpoints"][0]["price_out_per_m"], 2.2);
        assert_eq!(
            json["endpoints"][6]["excluded"]["kind"],
            "unknown_quantization"
        );
    }
}
