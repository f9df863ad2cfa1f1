//! `harvest demo`: the whole experience with no key and no network. Starts the OpenRouter
//! simulator in-process on 127.0.0.1 with the Kimi K2.5 provider table, writes the demo
//! datasets from `assets/demo/` into an output directory, and runs the demo job (three
//! datasets, token budgets and a $2 dollar budget reached in a couple of minutes) through the
//! real engine: the TUI when stdout is a terminal, progress lines otherwise.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::cli::DemoArgs;
use crate::config::Config;
use crate::engine::{self, RunOptions};
use crate::openrouter::ApiKey;
use crate::sim::{self, ProviderTable, SimConfig};

use super::providers::{render_text, report};
use super::run::{Out, Watch, drive_headless, drive_tui, engine_error, use_tui};

const CONFIG: &str = include_str!("../../assets/demo/harvest.toml");
const PROMPTS: [(&str, &str); 3] = [
    ("b3.jsonl", include_str!("../../assets/demo/b3.jsonl")),
    ("b4.jsonl", include_str!("../../assets/demo/b4.jsonl")),
    ("b5.jsonl", include_str!("../../assets/demo/b5.jsonl")),
];

fn default_dir() -> PathBuf {
    std::env::temp_dir().join(format!(
        "harvest-demo-{}",
        chrono::Local::now().format("%Y%m%d-%H%M%S")
    ))
}

pub async fn run(args: DemoArgs) -> anyhow::Result<u8> {
    let dir = args.out.clone().unwrap_or_else(default_dir);
    let prompts = dir.join("prompts");
    std::fs::create_dir_all(&prompts).with_context(|| format!("creating {}", prompts.display()))?;
    for (name, text) in PROMPTS {
        std::fs::write(prompts.join(name), text)
            .with_context(|| format!("writing {}", prompts.join(name).display()))?;
    }
    let _log = crate::logging::to_file(&dir)
        .with_context(|| format!("opening the log in {}", dir.display()))?;

    let mut sim_cfg = SimConfig::new(ProviderTable::kimi_k25());
    sim_cfg.seed = args.seed;
    sim_cfg.speed_scale = args.speed_scale.max(0.0);
    let sim = sim::start(sim_cfg, 0)
        .await
        .context("starting the simulator")?;

    // The outputs go into DIR itself, beside the demo's prompts, config and log.
    let mut text = format!(
        "base_url = \"{}\"\noutput_dir = \".\"\n{CONFIG}",
        sim.base_url()
    );
    if let Some(b) = args.budget {
        text = text.replace("budget_usd = 2.0", &format!("budget_usd = {b}"));
    }
    let cfg_path = dir.join("harvest.toml");
    std::fs::write(&cfg_path, &text).with_context(|| format!("writing {}", cfg_path.display()))?;
    let cfg = Config::load(&cfg_path).map_err(|e| anyhow::anyhow!("demo config: {e}"))?;
    let out = cfg.output_dir.clone();

    let opts = RunOptions {
        api_key: ApiKey::new("sk-or-v1-harvest-demo-not-a-real-key"),
        ..Default::default()
    };
    let handle = engine::start(cfg.clone(), opts)
        .await
        .map_err(engine_error)?;
    let w = Watch {
        progress_every: Duration::from_secs_f64(args.progress_every.max(0.2)),
        drain_grace: Duration::from_secs(30),
    };
    let mut say = Out::default();
    if use_tui(args.headless) {
        let code = drive_tui(handle, w).await?;
        say.line(&format!("outputs: {}", out.display()));
        sim.stop().await;
        return Ok(code);
    }
    say.line(&format!(
        "harvest demo: simulator at {}, outputs in {}",
        sim.base_url(),
        out.display()
    ));
    // What the policy does with the simulated providers, as `harvest providers` shows it.
    let client = engine::client_for(&cfg, ApiKey::new("sk-or-v1-harvest-demo-not-a-real-key"))
        .map_err(engine_error)?;
    if let Ok(listing) = client.endpoints(&cfg.model).await {
        say.write(&render_text(&report(
            &cfg.model,
            &listing,
            &cfg.policy,
            None,
        )));
    }
    let code = drive_headless(handle, w).await?;
    say.line(&format!("outputs: {}", out.display()));
    sim.stop().await;
    Ok(code)
}
