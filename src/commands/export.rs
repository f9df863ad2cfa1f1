//! `harvest export`: the output directory as training files (see `crate::export`).

use std::collections::HashMap;

use crate::cli::ExportArgs;
use crate::config::Config;
use crate::export::template::ChatTemplate;
use crate::export::{Options, Sample, export, render};

use super::BadInput;

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        return Err(BadInput(format!("{}: not an output directory", args.dir.display())).into());
    }
    let (names, prompts) = match &args.config {
        Some(path) => {
            let cfg = Config::load(path).map_err(|e| BadInput(e.to_string()))?;
            let mut prompts = HashMap::new();
            for d in &cfg.datasets {
                let counted = crate::store::prompts::count_prompts_in_shard(&d.prompts, None)
                    .map_err(|e| BadInput(e.to_string()))?;
                prompts.insert(d.name.clone(), counted.in_shard);
            }
            (
                cfg.datasets.iter().map(|d| d.name.clone()).collect(),
                prompts,
            )
        }
        None => (
            crate::report::dataset_names(&args.dir).map_err(|e| BadInput(e.to_string()))?,
            HashMap::new(),
        ),
    };
    let opts = Options {
        format: args.format,
        with_provenance: args.with_provenance,
        keep_truncated: args.keep_truncated,
        require_reasoning: args.require_reasoning,
        keep_think_markers: args.keep_think_markers,
        system_prompt: args.system_prompt.clone(),
        samples: args.show.unwrap_or(0),
        explode_turns: args.explode_turns,
    };
    // A template that does not compile is refused before anything is written.
    let template = match &args.chat_template {
        Some(path) => Some(ChatTemplate::load(path).map_err(|e| BadInput(e.to_string()))?),
        None => None,
    };
    let exported = export(&args.dir, &names, &prompts, &args.to, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&exported.counts)?);
        return Ok(());
    }
    if let Some(t) = &template {
        print!("{}", show(t, &exported.samples)?);
    }
    print!("{}", render(&exported.counts, &args.to));
    Ok(())
}

/// The samples as the trainer's template renders them, each under a heading line.
fn show(t: &ChatTemplate, samples: &[Sample]) -> anyhow::Result<String> {
    let mut out = String::new();
    if samples.is_empty() {
        out.push_str("no success rows to show\n\n");
    }
    for s in samples {
        let turns = s.messages.as_array().map_or(0, Vec::len);
        let text = t
            .render(&s.id, &s.messages)
            .map_err(|e| BadInput(e.to_string()))?;
        out.push_str(&format!(
            "── {} · {} · {turns} messages ──\n{text}\n\n",
            s.dataset, s.id
        ));
    }
    Ok(out)
}
