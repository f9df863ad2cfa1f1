//! `harvest status [DIR]`: the state file of a running or finished run, for a second shell;
//! `--report`: the end-of-run report built from the output directory.

use std::path::PathBuf;

use crate::cli::StatusArgs;
use crate::engine::{Snapshot, state_path};
use crate::headless;
use crate::report::Report;

use super::BadInput;

pub fn run(args: StatusArgs) -> anyhow::Result<()> {
    let dir = args.dir.unwrap_or_else(|| PathBuf::from("out"));
    if args.report {
        if !dir.is_dir() {
            return Err(BadInput(format!("{} is not a directory", dir.display())).into());
        }
        let report = Report::from_dir(&dir, None).map_err(|e| BadInput(e.to_string()))?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&report)?);
        } else {
            print!("{}", report.render());
        }
        return Ok(());
    }
    let path = state_path(&dir);
    let text = std::fs::read_to_string(&path).map_err(|e| {
        BadInput(format!(
            "no run state at {}: {e} (is {} a harvest output directory?)",
            path.display(),
            dir.display()
        ))
    })?;
    let snap: Snapshot = serde_json::from_str(&text)
        .map_err(|e| BadInput(format!("{}: not a harvest state file: {e}", path.display())))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
    } else {
        print!("{}", headless::summary(&snap));
    }
    Ok(())
}
