//! `harvest probe [MODEL] [-c harvest.toml]`: canaries that tell which endpoints serve the real
//! model (see [`crate::probe`]). The cost is estimated and capped before anything is sent, and
//! what was spent is booked in the output directory's ledger, so a run there counts it.

use super::stdout::{out, outln};
use std::path::PathBuf;

use crate::cli::ProbeArgs;
use crate::config::Config;
use crate::openrouter::{ApiKey, ClientOptions, OpenRouterClient};
use crate::policy::{Fidelity, PolicyConfig};
use crate::probe::{self, ProbeSettings, Target};

use super::BadInput;

pub async fn run(args: ProbeArgs) -> anyhow::Result<()> {
    let cfg = match &args.config {
        Some(path) => Some(Config::load(path).map_err(|e| BadInput(e.to_string()))?),
        None => None,
    };
    crate::store::share_with_group(cfg.as_ref().is_some_and(|c| c.group_readable));
    let model = match (&args.model, &cfg) {
        (Some(m), _) => m.clone(),
        (None, Some(c)) => c.model.clone(),
        (None, None) => return Err(BadInput("name a MODEL or give a config (-c)".into()).into()),
    };
    let client = match &cfg {
        Some(c) => crate::engine::client_for(c, None).map_err(super::run::engine_error)?,
        None => OpenRouterClient::new(ClientOptions::new(
            args.base_url.clone(),
            ApiKey::from_env(&args.api_key_env),
        ))
        .map_err(|e| BadInput(e.to_string()))?,
    };
    let policy = cfg.as_ref().map(|c| c.policy.clone()).unwrap_or_default();
    let use_openrouter = cfg.as_ref().is_none_or(|c| c.openrouter);
    if use_openrouter && !client.has_key() {
        let var = cfg.as_ref().map_or(&args.api_key_env, |c| &c.api_key_env);
        return Err(BadInput(crate::engine::missing_key(var)).into());
    }
    // The probe books its spend in the output directory's ledger: not while a run owns it.
    let dir = cfg
        .as_ref()
        .map(|c| c.output_dir.clone())
        .unwrap_or_else(|| PathBuf::from("out"));
    crate::engine::create_output_dir(&dir).map_err(super::run::engine_error)?;
    let _lock = crate::store::lock::lock_dir(&dir).map_err(|e| BadInput(e.to_string()))?;

    let listing = if use_openrouter {
        super::providers::fetch(&client, &model).await?
    } else {
        crate::openrouter::ModelEndpoints::default()
    };
    let preferred = native_cheapest_first(&policy, &model, &listing);
    let mut targets = targets(cfg.as_ref(), &listing, &client, &model)?;
    let reference =
        probe::choose_reference(&model, &targets, args.reference.as_deref(), &preferred)
            .map_err(|e| BadInput(e.to_string()))?;
    if !args.only.is_empty() {
        let unknown: Vec<&String> = args
            .only
            .iter()
            .filter(|o| !targets.iter().any(|t| &&t.tag == o))
            .collect();
        if !unknown.is_empty() {
            return Err(BadInput(format!(
                "--only: no endpoint tagged {unknown:?} for {model}"
            ))
            .into());
        }
        targets.retain(|t| args.only.contains(&t.tag) || reference.as_ref() == Some(&t.tag));
    }

    let settings = ProbeSettings {
        prompts: usize::from(args.prompts),
        max_tokens: args.max_tokens,
        seed: args.seed,
        concurrency: args.concurrency.max(1),
        ..Default::default()
    };
    let cancel_settings = probe::cancel::CancelSettings::default();
    let cancel_cost = match args.cancel {
        true => probe::cancel::estimate_cost(&targets, &cancel_settings),
        false => crate::domain::Usd::ZERO,
    };
    let estimate = probe::estimate_cost(&targets, &settings) + cancel_cost;
    eprintln!(
        "probing {} endpoints of {model} with {} prompts each (max_tokens {}){}: at most {:.6} USD",
        targets.len(),
        settings.prompts,
        settings.max_tokens,
        if args.cancel {
            format!(
                " and one stream each closed after {} tokens (max_tokens {})",
                cancel_settings.close_after, cancel_settings.max_tokens
            )
        } else {
            String::new()
        },
        estimate.as_f64()
    );
    if estimate.as_f64() > args.max_usd {
        return Err(BadInput(format!(
            "the probe could cost {:.4} USD, above --max-usd {:.4}: raise it, or lower --prompts/--max-tokens, or use --only",
            estimate.as_f64(),
            args.max_usd
        ))
        .into());
    }
    let (mut report, mut spend) = probe::run(&model, &targets, reference, &settings)
        .await
        .map_err(|e| BadInput(e.to_string()))?;
    let mut stops = None;
    if args.cancel {
        eprintln!("closing one stream at each endpoint, then looking each up at /generation ...");
        report.cancel = probe::cancel::measure(&targets, &report.endpoints, &cancel_settings).await;
        spend.extend(probe::cancel::spend_lines(
            &report.cancel,
            &targets,
            &cancel_settings,
            &report.created_at,
        ));
        report.cost += report.cancel.iter().map(|f| f.cost).sum();
        let existing = cfg.as_ref().and_then(|c| c.cancel_stops_billing.as_deref());
        stops = Some(probe::cancel::stops_list(
            &report.cancel,
            &targets,
            existing,
        ));
    }

    let path = args
        .out
        .clone()
        .unwrap_or_else(|| dir.join(probe::FILE_NAME));
    report.save(&path, &dir, &spend)?;
    if let (Some(stops), Some(path)) = (&stops, args.config.as_ref().filter(|_| args.write_config))
    {
        let note = stops.note(&report.created_at[..10.min(report.created_at.len())]);
        crate::config::set_cancel_stops_billing(path, &stops.list, &note)
            .map_err(|e| BadInput(e.to_string()))?;
        eprintln!("wrote cancel_stops_billing into {}", path.display());
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    out!("{}", crate::printable::printable(&report.render()));
    if let Some(stops) = &stops {
        let list = &stops.list;
        out!(
            "{}",
            crate::printable::printable(&probe::cancel::render(&report.cancel))
        );
        let quoted: Vec<String> = list.iter().map(|t| format!("{t:?}")).collect();
        outln!(
            "cancel_stops_billing = [{}]   # the config line{}",
            quoted.join(", "),
            if args.write_config {
                ", written"
            } else {
                ": --write-config writes it"
            }
        );
        for (tag, why) in &stops.not_measured {
            outln!(
                "{}",
                crate::printable::printable(&format!(
                    "  left out, not measured: {tag} ({why}); taken to bill a close in full \
                     (the hard budget reserves its streams' worst case): probe it again, or \
                     drop the list to let the run check it for itself"
                ))
            );
        }
    }
    outln!(
        "saved to {}; spend booked in {}",
        path.display(),
        crate::store::output::ledger_path(&dir).display()
    );
    if policy_hint(&policy) {
        outln!(
            "to leave out endpoints that drift, set [policy] min_probe_agreement (e.g. 0.9) and \
             run from the same output_dir"
        );
    }
    Ok(())
}

/// The listed endpoints the policy allows at native precision, cheapest first: the reference
/// falls back to the first of them.
fn native_cheapest_first(
    policy: &PolicyConfig,
    model: &str,
    listing: &crate::openrouter::ModelEndpoints,
) -> Vec<String> {
    let (native, _) = policy.native_for(model);
    let mut native_first: Vec<(crate::domain::Price, String)> = listing
        .endpoints
        .iter()
        .filter(|&e| {
            policy.fidelity(&native, &e.quantization) == Fidelity::Native
                && policy.judge(&native, e, None).is_none()
        })
        .map(|e| (e.pricing.completion, e.tag.to_string()))
        .collect();
    native_first.sort();
    native_first.into_iter().map(|(_, t)| t).collect()
}

/// Every endpoint a run would have: the listing's (the probe is how one learns about
/// undisclosed ones), then the config's own servers, each with the client that reaches it.
fn targets(
    cfg: Option<&Config>,
    listing: &crate::openrouter::ModelEndpoints,
    client: &OpenRouterClient,
    model: &str,
) -> anyhow::Result<Vec<Target>> {
    let (pool, mut own_clients) = match cfg {
        Some(c) => (
            crate::engine::pool::build(c, listing),
            crate::engine::pool::own_clients(c).map_err(super::run::engine_error)?,
        ),
        None => (
            listing
                .endpoints
                .iter()
                .map(|e| crate::engine::pool::listed(None, e))
                .collect(),
            Default::default(),
        ),
    };
    Ok(pool
        .into_iter()
        .map(|e| {
            let own = e
                .custom
                .and_then(|c| Some((own_clients.remove(&e.tag)?, c.model)));
            let (client, model, via_openrouter) = match own {
                Some((own_client, own_model)) => (own_client, own_model, false),
                None => (client.clone(), model.to_string(), true),
            };
            Target {
                tag: e.tag,
                provider: e.provider,
                quantization: e.quantization,
                price_in: e.price_in,
                price_out: e.price_out,
                client,
                model,
                via_openrouter,
                supported_parameters: e.supported_parameters,
            }
        })
        .collect())
}

fn policy_hint(p: &PolicyConfig) -> bool {
    p.min_probe_agreement.is_none()
}
