//! How the simulator picks endpoints for a request, after OpenRouter's `provider` object:
//! filters (only, ignore, quantizations, max_price, require_parameters, max_tokens), then order,
//! sort or price-weighted load balancing, and whether fallbacks are allowed.

use rand::Rng;

use crate::domain::{EndpointTag, Price};
use crate::openrouter::{ChatRequest, ProviderPreferences, ProviderSort};

use super::table::{SimBehaviour, SimEndpoint};

/// A slug matches an endpoint by its full tag, by its base provider slug (`deepinfra` matches
/// `deepinfra/turbo`), or by display name.
pub(crate) fn slug_matches(slug: &str, ep: &SimEndpoint) -> bool {
    EndpointTag::reached_by(ep.tag.as_str(), slug)
        || slug.trim().eq_ignore_ascii_case(&ep.provider_name)
}

/// Why the candidate list came out empty, in OpenRouter's `excluded_by` vocabulary.
#[derive(Debug, PartialEq)]
pub(crate) struct NoEndpoints {
    pub excluded_by: Vec<&'static str>,
}

fn price_per_m(p: Price) -> f64 {
    use rust_decimal::prelude::ToPrimitive;
    p.usd_per_million().to_f64().unwrap_or(f64::MAX)
}

/// The endpoints to try, in order. The first is the primary choice; the rest are fallbacks
/// (empty when fallbacks are off and the primary is pinned).
pub(crate) fn candidates(
    endpoints: &[SimEndpoint],
    behaviours: &[SimBehaviour],
    req: &ChatRequest,
    rng: &mut impl Rng,
) -> Result<Vec<usize>, NoEndpoints> {
    let mut prefs = req.provider.clone().unwrap_or_default();
    // A model variant is a sort where the request sets none (`:floor` price, `:nitro`
    // throughput); `order` replaces it (model-variants docs).
    if prefs.sort.is_none() && prefs.order.is_none() {
        prefs.sort = match crate::openrouter::split_variant(&req.model).1 {
            Some("floor") => Some(ProviderSort::Price),
            Some("nitro") => Some(ProviderSort::Throughput),
            _ => None,
        };
    }
    let sent = req.parameters_sent();
    // Why each endpoint was filtered out, if it was.
    let mut reason: Vec<Option<&'static str>> = vec![None; endpoints.len()];
    let mut keep: Vec<usize> = Vec::new();
    for (i, ep) in endpoints.iter().enumerate() {
        reason[i] = exclusion(ep, &behaviours[i], &prefs, &sent, req);
        if reason[i].is_none() {
            keep.push(i);
        }
    }
    let collect = |pick: &dyn Fn(usize) -> bool| {
        let mut why: Vec<&'static str> = Vec::new();
        for (i, r) in reason.iter().enumerate() {
            if let Some(r) = r.filter(|_| pick(i))
                && !why.contains(&r)
            {
                why.push(r);
            }
        }
        why
    };
    if keep.is_empty() {
        return Err(NoEndpoints {
            excluded_by: collect(&|_| true),
        });
    }
    let ordered = order(endpoints, behaviours, &prefs, keep, rng);
    if !ordered.is_empty() {
        return Ok(ordered);
    }
    // Pinned without fallbacks, and the pinned endpoints were all filtered out: say why.
    let pinned = |i: usize| {
        prefs
            .order
            .iter()
            .flatten()
            .any(|s| slug_matches(s, &endpoints[i]))
    };
    let mut why = collect(&pinned);
    if why.is_empty() {
        why.push("allowed_providers");
    }
    Err(NoEndpoints { excluded_by: why })
}

fn exclusion(
    ep: &SimEndpoint,
    b: &SimBehaviour,
    prefs: &ProviderPreferences,
    sent: &[&str],
    req: &ChatRequest,
) -> Option<&'static str> {
    if b.down {
        return Some("unavailable");
    }
    if let Some(only) = &prefs.only
        && !only.iter().any(|s| slug_matches(s, ep))
    {
        return Some("allowed_providers");
    }
    if let Some(ignore) = &prefs.ignore
        && ignore.iter().any(|s| slug_matches(s, ep))
    {
        return Some("ignored_providers");
    }
    if let Some(qs) = &prefs.quantizations
        && !qs.iter().any(|q| ep.quantization.matches_filter(q))
    {
        return Some("quantization");
    }
    if let Some(mp) = &prefs.max_price {
        let over_in = mp
            .prompt
            .is_some_and(|m| price_per_m(ep.price_in) > m + 1e-12);
        let over_out = mp
            .completion
            .is_some_and(|m| price_per_m(ep.price_out) > m + 1e-12);
        if over_in || over_out {
            return Some("max_price");
        }
    }
    // Data policy: "deny" keeps providers that store or train on data out; `zdr` keeps all
    // but Zero Data Retention endpoints out (provider-selection docs, the ZDR guide).
    if prefs.data_collection.as_deref() == Some("deny") && b.collects_data {
        return Some("data_policy:training");
    }
    if prefs.zdr == Some(true) && !b.zdr {
        return Some("data_policy:zdr");
    }
    if prefs.require_parameters == Some(true)
        && !sent
            .iter()
            .all(|p| ep.supported_parameters.iter().any(|s| s == p))
    {
        return Some("require_parameters");
    }
    if ep
        .max_completion_tokens
        .is_some_and(|m| u64::from(req.max_tokens) > m)
    {
        return Some("max_tokens");
    }
    None
}

fn order(
    endpoints: &[SimEndpoint],
    behaviours: &[SimBehaviour],
    prefs: &ProviderPreferences,
    mut keep: Vec<usize>,
    rng: &mut impl Rng,
) -> Vec<usize> {
    let fallbacks = prefs.allow_fallbacks != Some(false);
    match prefs.sort {
        Some(ProviderSort::Price) | Some(ProviderSort::Exacto) => keep.sort_by(|&a, &b| {
            let pa = (endpoints[a].price_out, endpoints[a].price_in);
            let pb = (endpoints[b].price_out, endpoints[b].price_in);
            pa.cmp(&pb)
        }),
        Some(ProviderSort::Throughput) => keep.sort_by(|&a, &b| {
            behaviours[b]
                .tokens_per_s
                .total_cmp(&behaviours[a].tokens_per_s)
        }),
        Some(ProviderSort::Latency) => {
            keep.sort_by(|&a, &b| behaviours[a].ttft_ms.total_cmp(&behaviours[b].ttft_ms))
        }
        None => weighted_shuffle(endpoints, &mut keep, rng),
    }
    let Some(order) = prefs.order.as_ref().filter(|o| !o.is_empty()) else {
        return keep;
    };
    let mut out = Vec::with_capacity(keep.len());
    for slug in order {
        for &i in &keep {
            if slug_matches(slug, &endpoints[i]) && !out.contains(&i) {
                out.push(i);
            }
        }
    }
    if fallbacks {
        for &i in &keep {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    out
}

/// OpenRouter's default: among healthy endpoints, pick weighted by 1/price² (output price).
fn weighted_shuffle(endpoints: &[SimEndpoint], keep: &mut Vec<usize>, rng: &mut impl Rng) {
    let mut pool: Vec<(usize, f64)> = keep
        .iter()
        .map(|&i| {
            let p = price_per_m(endpoints[i].price_out).max(1e-6);
            (i, 1.0 / (p * p))
        })
        .collect();
    keep.clear();
    while !pool.is_empty() {
        let total: f64 = pool.iter().map(|(_, w)| w).sum();
        let mut u = rng.random::<f64>() * total;
        let mut pick = pool.len() - 1;
        for (j, (_, w)) in pool.iter().enumerate() {
            if u < *w {
                pick = j;
                break;
            }
            u -= w;
        }
        keep.push(pool.swap_remove(pick).0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Quantization;
    use crate::openrouter::Message;
    use crate::sim::table::ProviderTable;
    use rand::SeedableRng;
    use rand::rngs::SmallRng;

    fn setup() -> (Vec<SimEndpoint>, Vec<SimBehaviour>) {
        let t = ProviderTable::kimi_k25();
        let b = t.endpoints.iter().map(|e| e.behaviour.clone()).collect();
        (t.endpoints, b)
    }

    fn tags(eps: &[SimEndpoint], idx: &[usize]) -> Vec<String> {
        idx.iter().map(|&i| eps[i].tag.to_string()).collect()
    }

    fn req(p: ProviderPreferences) -> ChatRequest {
        ChatRequest::new("moonshotai/kimi-k2.5", vec![Message::user("hi")], 100).with_provider(p)
    }

    #[test]
    fn pinned_without_fallbacks_is_one_endpoint() {
        let (eps, b) = setup();
        let mut rng = SmallRng::seed_from_u64(1);
        let c = candidates(
            &eps,
            &b,
            &req(ProviderPreferences::pinned("chutes/int4")),
            &mut rng,
        )
        .expect("some");
        assert_eq!(tags(&eps, &c), vec!["chutes/int4"]);
    }

    #[test]
    fn fp4_filter_matches_the_family_and_nothing_else() {
        let (eps, b) = setup();
        let mut rng = SmallRng::seed_from_u64(1);
        let p = ProviderPreferences {
            quantizations: Some(vec![Quantization::Fp4]),
            ..Default::default()
        };
        let c = candidates(&eps, &b, &req(p), &mut rng).expect("some");
        assert_eq!(tags(&eps, &c), vec!["baseten/fp4"]);
        let p = ProviderPreferences {
            quantizations: Some(vec![Quantization::Fp8]),
            ..Default::default()
        };
        let e = candidates(&eps, &b, &req(p), &mut rng).expect_err("none");
        assert_eq!(e.excluded_by, vec!["quantization"]);
    }

    #[test]
    fn only_ignore_order_and_sort() {
        let (eps, b) = setup();
        let mut rng = SmallRng::seed_from_u64(3);
        let p = ProviderPreferences {
            only: Some(vec![
                "chutes".into(),
                "siliconflow/int4".into(),
                "venice".into(),
            ]),
            ignore: Some(vec!["venice".into()]),
            sort: Some(ProviderSort::Price),
            ..Default::default()
        };
        let c = candidates(&eps, &b, &req(p), &mut rng).expect("some");
        assert_eq!(tags(&eps, &c), vec!["chutes/int4", "siliconflow/int4"]);
        let p = ProviderPreferences {
            order: Some(vec!["venice".into()]),
            ..Default::default()
        };
        let c = candidates(&eps, &b, &req(p), &mut rng).expect("some");
        assert_eq!(c.len(), 11);
        assert_eq!(eps[c[0]].tag.as_str(), "venice");
    }

    #[test]
    fn max_price_and_max_tokens_and_parameters() {
        let (eps, b) = setup();
        let mut rng = SmallRng::seed_from_u64(3);
        let p = ProviderPreferences {
            max_price: Some(crate::openrouter::request::MaxPrice {
                completion: Some(2.25),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut c = candidates(&eps, &b, &req(p), &mut rng).expect("some");
        c.sort();
        let mut t = tags(&eps, &c);
        t.sort();
        assert_eq!(t, vec!["chutes/int4", "deepinfra", "siliconflow/int4"]);
        // Venice caps completions at 32768.
        let mut r = req(ProviderPreferences::pinned("venice"));
        r.max_tokens = 40_000;
        assert_eq!(
            candidates(&eps, &b, &r, &mut rng)
                .expect_err("none")
                .excluded_by,
            vec!["max_tokens"]
        );
        // Moonshot's own endpoint does not list temperature.
        let mut r = req(ProviderPreferences::pinned("moonshotai/int4"));
        r.temperature = Some(0.6);
        assert_eq!(
            candidates(&eps, &b, &r, &mut rng)
                .expect_err("none")
                .excluded_by,
            vec!["require_parameters"]
        );
    }

    #[test]
    fn default_routing_prefers_cheap_endpoints() {
        let (eps, b) = setup();
        let mut rng = SmallRng::seed_from_u64(11);
        let r = ChatRequest::new("m", vec![Message::user("x")], 10);
        let mut first = std::collections::HashMap::<String, u32>::new();
        for _ in 0..3000 {
            let c = candidates(&eps, &b, &r, &mut rng).expect("some");
            *first.entry(eps[c[0]].tag.to_string()).or_default() += 1;
        }
        assert!(first["chutes/int4"] > first["venice"] * 2, "{first:?}");
    }
}
