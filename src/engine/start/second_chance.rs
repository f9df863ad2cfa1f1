//! `--retry-rejects` and `--retry-truncated`: the lines chosen for a second chance move to the
//! superseded files before the run, shard by shard.

use super::super::{EngineError, RunOptions};

/// A run whose policy allows no endpoint at all would wait forever: say so now.
/// `--retry-rejects` and `--retry-truncated`: the chosen rejects and cut answers of the shard
/// move to the superseded files (see `store::supersede`), their prompts are pending again, and
/// the directory is read again. First, whatever an earlier such run superseded and never
/// replaced (it crashed) is current again.
pub(super) fn second_chance(
    dir: &std::path::Path,
    names: &[String],
    opts: &RunOptions,
    scan: crate::store::scan::DirScan,
    notes: &mut Vec<String>,
) -> Result<crate::store::scan::DirScan, EngineError> {
    use crate::store::output::{OutputRecord, RejectRecord, output_path, rejects_path};
    use crate::store::supersede::{supersede, superseded_path};
    let failed = |e: crate::store::repair::RepairError| EngineError::Startup(e.to_string());
    let restored = restore_superseded(dir, names).map_err(failed)?;
    notes.extend(restored);
    if opts.retry_rejects.is_none() && !opts.retry_truncated {
        return if notes.is_empty() {
            Ok(scan)
        } else {
            crate::store::scan::scan_dir(dir, names).map_err(|e| EngineError::Input(e.to_string()))
        };
    }
    // Only the shard's own lines: another shard's answers are its business (D4).
    let mine = |id: &str| {
        opts.shard
            .is_none_or(|(k, n)| crate::store::prompts::shard_of(id, n) == k)
    };
    for name in names {
        if let Some(kinds) = &opts.retry_rejects {
            let path = rejects_path(dir, name);
            let n = supersede::<RejectRecord>(&path, |r| {
                mine(&r.id) && (kinds.is_empty() || kinds.iter().any(|k| k == &r.error_kind))
            })
            .map_err(failed)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} rejected prompt{} sent again (the rejects moved to {}; \
                     back if the run ends without a new outcome)",
                    if n == 1 { "" } else { "s" },
                    superseded_path(&path).display()
                ));
            }
        }
        if opts.retry_truncated {
            let path = output_path(dir, name);
            let n = supersede::<OutputRecord>(&path, |r| {
                mine(&r.id) && (r.truncated || r.finish_reason == "length")
            })
            .map_err(failed)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} answer{} cut at max_tokens sent again (moved to {}; \
                     back if the run ends without a new answer)",
                    if n == 1 { "" } else { "s" },
                    superseded_path(&path).display()
                ));
            }
        }
    }
    crate::store::scan::scan_dir(dir, names).map_err(|e| EngineError::Input(e.to_string()))
}

/// Superseded answers and rejects whose ids have no current outcome, back in the current files
/// (a `--retry-*` run that stopped or crashed before buying them again): one note per file.
pub(crate) fn restore_superseded(
    dir: &std::path::Path,
    names: &[String],
) -> Result<Vec<String>, crate::store::repair::RepairError> {
    use crate::store::output::{output_path, rejects_path};
    use crate::store::supersede::restore_unanswered;
    let mut notes = Vec::new();
    for name in names {
        let (out, rej) = (output_path(dir, name), rejects_path(dir, name));
        for (path, other, what) in [(&out, &rej, "answer"), (&rej, &out, "reject")] {
            let n = restore_unanswered(path, other)?;
            if n > 0 {
                notes.push(format!(
                    "dataset {name}: {n} superseded {what}{} with no new outcome made current \
                     again",
                    if n == 1 { "" } else { "s" }
                ));
            }
        }
    }
    Ok(notes)
}
