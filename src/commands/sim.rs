//! `harvest sim`: the simulator alone, until Ctrl-C.

use super::stdout::outln;
use anyhow::Context;

use crate::cli::SimArgs;
use crate::sim::{self, FaultMix, ProviderTable, SimConfig};

use super::BadInput;

/// Builds the simulator configuration from the flags.
pub fn config(args: &SimArgs) -> anyhow::Result<SimConfig> {
    let table = match &args.providers {
        Some(p) => ProviderTable::load(p).map_err(|e| BadInput(e.to_string()))?,
        None => ProviderTable::kimi_k25(),
    };
    if !(args.speed_scale >= 0.0 && args.speed_scale.is_finite()) {
        return Err(BadInput(format!(
            "--speed-scale must be a number >= 0, got {}",
            args.speed_scale
        ))
        .into());
    }
    let mut cfg = SimConfig::new(table);
    cfg.seed = args.seed;
    cfg.speed_scale = args.speed_scale;
    cfg.billing_log = args.billing_log.clone();
    cfg.key_limit_usd = args.key_limit;
    cfg.api_key = args.require_key.clone();
    cfg.log_bodies = args.log_bodies;
    cfg.generation_header = !args.no_generation_header;
    cfg.tls = args.tls;
    cfg.h2_max_streams = args.h2_max_streams.max(1);
    if let Some(dir) = &args.replay {
        cfg.replay = Some(std::sync::Arc::new(
            sim::replay::Replay::load(dir).map_err(BadInput)?,
        ));
    }
    if let Some(usd) = args.inflight_budget {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !(ok(usd) && usd > 0.0 && ok(args.inflight_recent_s) && ok(args.inflight_retry_after_s))
        {
            return Err(BadInput(
                "--inflight-budget must be > 0, --inflight-recent-s and --inflight-retry-after-s >= 0"
                    .into(),
            )
            .into());
        }
        cfg.inflight_budget = Some(sim::InFlightBudget {
            usd,
            recent: std::time::Duration::from_secs_f64(args.inflight_recent_s),
            retry_after_s: args.inflight_retry_after_s,
        });
    }
    if args.no_faults {
        for e in &mut cfg.table.endpoints {
            e.behaviour.faults = FaultMix::none();
        }
    }
    if let Some(spec) = &args.faults {
        cfg.apply_faults_to_all(spec)
            .map_err(|e| BadInput(format!("--faults: {e}")))?;
    }
    if let Some(t) = args.tokens_per_event {
        for e in &mut cfg.table.endpoints {
            e.behaviour.tokens_per_event = t;
        }
    }
    if let Some(ms) = args.close_notice_ms {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(BadInput(format!(
                "--close-notice-ms must be a number of milliseconds >= 0, got {ms}"
            ))
            .into());
        }
        for e in &mut cfg.table.endpoints {
            e.behaviour.close_notice_ms = ms;
        }
    }
    Ok(cfg)
}

pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let cfg = config(&args)?;
    let model = cfg.table.model_id.clone();
    let n = cfg.table.endpoints.len();
    let replaying = cfg.replay.as_ref().map(|r| r.len());
    let handle = sim::start(cfg, args.port)
        .await
        .context("starting the simulator")?;
    outln!(
        "harvest simulator: {model} at {n} endpoints on {}  (speed scale {}, seed {})",
        handle.base_url(),
        args.speed_scale,
        args.seed
    );
    if let (Some(bodies), Some(dir)) = (replaying, &args.replay) {
        outln!(
            "chat completions: {bodies} recorded responses from {}, in turn, each billed at its \
             own usage.cost",
            dir.display()
        );
    }
    if let Some(pem) = &handle.ca_pem {
        let path = args.ca_out.clone().unwrap_or_else(|| {
            std::env::temp_dir().join(format!("harvest-sim-{}-ca.pem", handle.addr.port()))
        });
        std::fs::write(&path, pem).map_err(|e| {
            BadInput(format!(
                "cannot write the certificate authority to {}: {e}",
                path.display()
            ))
        })?;
        outln!(
            "HTTPS (HTTP/2 and HTTP/1.1 by ALPN); trust its authority: export SSL_CERT_FILE={}",
            path.display()
        );
    }
    outln!(
        "try: harvest providers {model} --base-url {}   control: GET/POST http://{}/sim/state|control",
        handle.base_url(),
        handle.addr
    );
    let token = handle.shutdown_token();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {
            eprintln!("stopping (billed {})", handle.state.billed_total());
            handle.stop().await;
        }
        _ = token.cancelled() => {}
    }
    Ok(())
}
