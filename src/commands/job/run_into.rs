//! Whether a run may go into an output directory, given the job around it: a directory of a
//! job's shards, shards of another count beside it, a whole run's records in the parent of a
//! shard's own directory; and what the job's other shards were billed, for its budget.

use std::path::Path;

use super::*;
use crate::domain::Usd;
use crate::engine::{Manifest, manifest_path};

/// What a run must respect of the job around it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Around {
    /// What the job's other shards (of the same N, in `parent`) were billed.
    pub(crate) siblings_spent: Usd,
    /// How many other shards that is.
    pub(crate) siblings: usize,
}

/// Checks that a run into `own` (as `shard`, or the whole job when `None`; `parent` is the
/// config's `output_dir`, where `--shard` puts its directories) stays one job with what is
/// already there (reliability-probe-4 N6):
/// - a run into a directory that holds a job's shard directories, and is none of them, would
///   buy every prompt again with a fresh budget: refused;
/// - a shard of N beside shards of another N splits the ids another way, and sends again
///   what the others answered: refused;
/// - a shard into its own directory under a `parent` that holds a run's records (a run
///   without `--shard`, the other direction, reliability-probe-5 P5) sends again what that
///   run answered, which its directory does not see: refused (a shard run into `parent`
///   itself, `--shard-dir`, sees them and is not);
/// - the other shards' ledgers are counted, for the job's budget.
pub(crate) fn check_run_into(
    parent: &Path,
    own: &Path,
    shard: Option<(u32, u32)>,
) -> Result<Around, String> {
    if let Some(dirs) = shard_dirs(&[own.to_path_buf()]) {
        let names: Vec<String> = dirs
            .iter()
            .filter_map(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .collect();
        let more = if names.len() > 3 { ", ..." } else { "" };
        // The job's N, as its first shard directory names it (`shard-K-of-N`).
        let of = names
            .first()
            .and_then(|n| n.rsplit_once("-of-"))
            .map_or("N", |(_, n)| n);
        return Err(format!(
            "{} holds the shard directories of a job ({}{more}), and is none of them: a run \
             here would send every prompt again with a budget of its own. Run one of its shards \
             (--shard K/{of}, or --shard auto), see the job with `harvest status {}`, or give \
             another output_dir",
            own.display(),
            names[..names.len().min(3)].join(", "),
            own.display()
        ));
    }
    let mut around = Around {
        siblings_spent: Usd::ZERO,
        siblings: 0,
    };
    let Some((k, n)) = shard else {
        return Ok(around);
    };
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    };
    if !same(parent, own)
        && let Some((theirs, files)) = run_records(parent)
    {
        let (whose, instead) = match theirs {
            None => (
                "a run without --shard".to_string(),
                format!(
                    "Run the job there without --shard (it resumes where it stopped; \
                     --shard {k}/{n} --shard-dir {} runs this shard's ids in it)",
                    parent.display()
                ),
            ),
            Some(s) => (
                format!("a run of shard {s}"),
                format!("Run shard {s} there"),
            ),
        };
        return Err(format!(
            "{} holds the records of {whose} ({files}): --shard {k}/{n} into {} would send \
             again the ids that run answered, with a budget of its own, and neither run would \
             see the other's spend. {instead}, or give another output_dir for a new job",
            parent.display(),
            own.display(),
        ));
    }
    let Some(dirs) = shard_dirs(&[parent.to_path_buf()]) else {
        return Ok(around);
    };
    for f in read(&dirs)? {
        let Some((sk, sn)) = f
            .manifest
            .as_ref()
            .and_then(|m| m.shard.as_deref())
            .and_then(parse)
        else {
            continue;
        };
        if sn != n {
            return Err(format!(
                "{} holds shard {sk}/{sn} of this job: --shard {k}/{n} would split the ids \
                 another way and send again what those shards answered. Run the job's shards \
                 as --shard K/{sn}, or give another output_dir for a new job",
                f.dir.display()
            ));
        }
        if sk != k && !same(&f.dir, own) {
            around.siblings_spent += f.spent;
            around.siblings += 1;
        }
    }
    Ok(around)
}

/// Which files show that a run wrote in `dir`, with the shard its manifest names (`None`: a
/// run without `--shard`): a non-empty ledger, or a non-empty answers or rejects file of a
/// dataset its manifest names. A manifest alone (a start refused before any request) holds
/// nothing to buy again.
fn run_records(dir: &Path) -> Option<(Option<String>, String)> {
    use crate::store::output::{ledger_path, output_path, rejects_path};
    let written = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    let manifest: Option<Manifest> = std::fs::read_to_string(manifest_path(dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let mut files: Vec<PathBuf> = vec![ledger_path(dir)];
    let mut datasets: Vec<&String> = manifest.iter().flat_map(|m| m.params.keys()).collect();
    datasets.sort();
    for d in datasets {
        files.extend([output_path(dir, d), rejects_path(dir, d)]);
    }
    let files: Vec<String> = (files.iter())
        .filter(|p| written(p))
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    if files.is_empty() {
        return None;
    }
    let shard = manifest.and_then(|m| m.shard);
    Some((shard, files.join(", ")))
}
