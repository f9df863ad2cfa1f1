//! `harvest export`: the output directory as training files (see `crate::export`).

use std::collections::HashMap;

use crate::cli::ExportArgs;
use crate::config::Config;
use crate::export::{Options, export, render};

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
    };
    let counts = export(&args.dir, &names, &prompts, &args.to, &opts)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&counts)?);
    } else {
        print!("{}", render(&counts, &args.to));
    }
    Ok(())
}
