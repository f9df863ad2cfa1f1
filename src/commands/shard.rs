//! A run as one shard of a job: K and N from `--shard K/N` or, with `--shard auto`, from the
//! environment of the scheduler that started it (a Kubernetes Indexed Job, a Slurm job array);
//! and what being a shard changes in the config: its own output directory, its share of the
//! budget, its own key. Sharding by a stable hash of the id needs no coordinator: each shard
//! sends the ids that hash to it, whatever machine it runs on.

use std::path::{Path, PathBuf};

use super::job::Around;
use crate::config::Config;
use crate::domain::Usd;
use crate::store::prompts::parse_shard;

/// The environment variables `--shard auto` reads, in the order they are tried.
pub(crate) const SCHEDULER_VARS: &str = "JOB_COMPLETION_INDEX (a Kubernetes Indexed Job, with \
     --shards N or HARVEST_SHARDS), or SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT (a Slurm job \
     array; SLURM_ARRAY_TASK_MIN when the array does not start at 0)";

/// Shard K of N from `spec`: `K/N`, or `auto` from the scheduler's environment (`env` reads a
/// variable). `shards` is `--shards N`, for a Kubernetes Job whose completions count no
/// variable carries.
pub(crate) fn shard_from(
    spec: &str,
    shards: Option<u32>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(u32, u32), String> {
    if spec != "auto" {
        return parse_shard(spec);
    }
    let number = |var: &str| -> Result<Option<u32>, String> {
        match env(var) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<u32>()
                .map(Some)
                .map_err(|_| format!("--shard auto: {var}={v:?} is not a whole number")),
        }
    };
    let from_env_n = || -> Result<Option<u32>, String> {
        match shards {
            Some(n) => Ok(Some(n)),
            None => number("HARVEST_SHARDS"),
        }
    };
    let (k, n, source) = if let Some(k) = number("JOB_COMPLETION_INDEX")? {
        let n = from_env_n()?.ok_or_else(|| {
            "--shard auto: JOB_COMPLETION_INDEX is set but not how many shards there are: pass \
             --shards N (the Job's completions) or set HARVEST_SHARDS"
                .to_string()
        })?;
        (k, n, "JOB_COMPLETION_INDEX")
    } else if let Some(id) = number("SLURM_ARRAY_TASK_ID")? {
        let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
        // Two counts that disagree split the ids two ways: some shards would send ids that
        // others also send, and some ids no shard would send.
        let n = match (from_env_n()?, number("SLURM_ARRAY_TASK_COUNT")?) {
            (Some(n), Some(slurm)) if n != slurm => {
                let given = if shards.is_some() {
                    "--shards"
                } else {
                    "HARVEST_SHARDS"
                };
                return Err(format!(
                    "--shard auto: {given} says {n} shards but SLURM_ARRAY_TASK_COUNT says \
                     {slurm}: the shards would split the ids two ways. Make them agree, or \
                     drop {given}"
                ));
            }
            (Some(n), _) | (None, Some(n)) => n,
            (None, None) => {
                return Err("--shard auto: SLURM_ARRAY_TASK_ID is set but \
                            SLURM_ARRAY_TASK_COUNT is not: pass --shards N"
                    .to_string());
            }
        };
        let k = id.checked_sub(min).ok_or_else(|| {
            format!("--shard auto: SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}")
        })?;
        (k, n, "SLURM_ARRAY_TASK_ID")
    } else {
        return Err(format!(
            "--shard auto: no scheduler's shard index in the environment: set {SCHEDULER_VARS}, \
             or give --shard K/N"
        ));
    };
    parse_shard(&format!("{k}/{n}")).map_err(|e| format!("{e} (from {source})"))
}

/// The output directory of shard `k` of `n` under the config's `output_dir`.
pub(crate) fn shard_dir(output_dir: &Path, (k, n): (u32, u32)) -> PathBuf {
    output_dir.join(format!("shard-{k}-of-{n}"))
}

/// Makes `cfg` the config of shard `(k, n)`: its own output directory (`dir`, or
/// `output_dir/shard-K-of-N`), its budget (`shard_budget_usd`, or its share of `budget_usd`),
/// its key (`{shard}` in `api_key_env` becomes K). Returns what it did, to say at the start.
pub(crate) fn apply(cfg: &mut Config, (k, n): (u32, u32), dir: Option<&Path>) -> Vec<String> {
    let mut notes = Vec::new();
    cfg.output_dir = match dir {
        Some(d) => d.to_path_buf(),
        None => shard_dir(&cfg.output_dir, (k, n)),
    };
    let job = cfg.budget_usd;
    let (budget, why) = match cfg.shard_budget_usd {
        Some(b) => (b, "shard_budget_usd".to_string()),
        None => (
            job / f64::from(n),
            format!("1/{n} of the job's budget_usd ${job:.2}"),
        ),
    };
    cfg.budget_usd = budget;
    notes.push(format!(
        "shard {k}/{n}: budget ${budget:.2} ({why}); outputs in {}",
        cfg.output_dir.display()
    ));
    if cfg.api_key_env.contains("{shard}") {
        cfg.api_key_env = cfg.api_key_env.replace("{shard}", &k.to_string());
        notes.push(format!(
            "shard {k}/{n}: the key from {} (its own credit limit enforces this shard's budget \
             at OpenRouter too)",
            cfg.api_key_env
        ));
    }
    notes
}

/// Keeps shard `(k, n)`'s budget within what the job's other shards left of the job's
/// `budget_usd` (`job`): their ledgers, as found beside it, count (reliability-probe-4 N6:
/// shards whose budgets add up past the job's would spend past it). Refused when nothing is
/// left; a note when the budget shrinks.
pub(crate) fn within_job(
    cfg: &mut Config,
    (k, n): (u32, u32),
    job: f64,
    around: &Around,
) -> Result<Vec<String>, String> {
    if around.siblings == 0 {
        return Ok(Vec::new());
    }
    let left = Usd::from_f64(job).saturating_sub(around.siblings_spent);
    if left <= Usd::ZERO {
        return Err(format!(
            "shard {k}/{n}: the job's budget_usd ${job:.2} is spent: its other {} shards were \
             billed {}. Raise budget_usd to go on",
            around.siblings, around.siblings_spent
        ));
    }
    if left.as_f64() >= cfg.budget_usd {
        return Ok(Vec::new());
    }
    cfg.budget_usd = left.as_f64();
    Ok(vec![format!(
        "shard {k}/{n}: budget {left}: what the job's budget_usd ${job:.2} leaves after its other \
         {} shards' {}",
        around.siblings, around.siblings_spent
    )])
}

/// A config whose key variable names `{shard}` needs a shard to fill it.
pub(crate) fn needs_shard(cfg: &Config) -> Result<(), String> {
    if cfg.api_key_env.contains("{shard}") {
        return Err(format!(
            "api_key_env {:?} names {{shard}}: run with --shard K/N or --shard auto, or name one \
             variable",
            cfg.api_key_env
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_comes_from_the_flag_or_the_schedulers_environment() {
        // What is checked, the spec, --shards, the environment, the shard or the error's start.
        type Case = (
            &'static str,
            &'static str,
            Option<u32>,
            &'static [(&'static str, &'static str)],
            Result<(u32, u32), &'static str>,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("given", "2/4", None, &[], Ok((2, 4))),
            ("a Kubernetes Indexed Job with --shards", "auto", Some(3), &[("JOB_COMPLETION_INDEX", "1")], Ok((1, 3))),
            ("a Kubernetes Indexed Job with HARVEST_SHARDS", "auto", None, &[("JOB_COMPLETION_INDEX", "0"), ("HARVEST_SHARDS", "2")], Ok((0, 2))),
            ("a Kubernetes Job without a count", "auto", None, &[("JOB_COMPLETION_INDEX", "1")], Err("--shard auto: JOB_COMPLETION_INDEX is set but not how many")),
            ("a Slurm array from 0", "auto", None, &[("SLURM_ARRAY_TASK_ID", "2"), ("SLURM_ARRAY_TASK_COUNT", "3")], Ok((2, 3))),
            ("a Slurm array from 1", "auto", None, &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_MIN", "1"), ("SLURM_ARRAY_TASK_COUNT", "3")], Ok((0, 3))),
            ("an index past the count", "auto", None, &[("SLURM_ARRAY_TASK_ID", "3"), ("SLURM_ARRAY_TASK_COUNT", "3")], Err("--shard 3/3: k must be in 0..n")),
            ("a Slurm array and HARVEST_SHARDS that agree", "auto", None, &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "3"), ("HARVEST_SHARDS", "3")], Ok((1, 3))),
            ("a Slurm array and HARVEST_SHARDS that disagree", "auto", None, &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "3"), ("HARVEST_SHARDS", "4")], Err("--shard auto: HARVEST_SHARDS says 4 shards but SLURM_ARRAY_TASK_COUNT says 3")),
            ("a Slurm array and --shards that disagree", "auto", Some(2), &[("SLURM_ARRAY_TASK_ID", "1"), ("SLURM_ARRAY_TASK_COUNT", "3")], Err("--shard auto: --shards says 2 shards but SLURM_ARRAY_TASK_COUNT says 3")),
            ("a variable that is not a number", "auto", Some(2), &[("JOB_COMPLETION_INDEX", "one")], Err("--shard auto: JOB_COMPLETION_INDEX=\"one\" is not")),
            ("no scheduler", "auto", Some(2), &[], Err("--shard auto: no scheduler's shard index")),
        ];
        for (what, spec, shards, env, want) in cases {
            let env = |var: &str| {
                env.iter()
                    .find(|(k, _)| *k == var)
                    .map(|(_, v)| v.to_string())
            };
            match (shard_from(spec, *shards, &env), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, *want, "{what}"),
                (Err(e), Err(start)) => assert!(e.starts_with(start), "{what}: {e}"),
                (got, _) => panic!("{what}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_shard_takes_its_own_directory_budget_and_key() {
        let cfg = |extra: &str| {
            Config::parse_unchecked(
                &format!(
                    "budget_usd = 90.0\noutput_dir = \"out\"\n{extra}\n[[dataset]]\nname = \"a\"\n\
                     prompts = \"a.jsonl\"\n"
                ),
                Path::new("/job/harvest.toml"),
            )
            .expect("config")
        };
        let mut c = cfg("");
        let notes = apply(&mut c, (1, 3), None);
        assert_eq!(c.output_dir, Path::new("/job/out/shard-1-of-3"));
        assert_eq!(c.budget_usd, 30.0);
        assert_eq!(
            notes,
            [
                "shard 1/3: budget $30.00 (1/3 of the job's budget_usd $90.00); outputs in /job/out/shard-1-of-3"
            ]
        );
        let mut c = cfg("shard_budget_usd = 40.0\napi_key_env = \"KEY_{shard}\"");
        assert!(needs_shard(&c).is_err());
        let notes = apply(&mut c, (2, 3), Some(Path::new("/scratch/s2")));
        assert_eq!(c.output_dir, Path::new("/scratch/s2"));
        assert_eq!((c.budget_usd, c.api_key_env.as_str()), (40.0, "KEY_2"));
        assert!(
            notes[0].contains("budget $40.00 (shard_budget_usd)"),
            "{notes:?}"
        );
        assert!(
            notes[1].starts_with("shard 2/3: the key from KEY_2"),
            "{notes:?}"
        );
        assert!(needs_shard(&cfg("")).is_ok());
    }

    #[test]
    fn a_shard_spends_no_more_than_its_siblings_left_of_the_job() {
        let around = |usd: f64, siblings: usize| Around {
            siblings_spent: Usd::from_f64(usd),
            siblings,
        };
        let cfg = |budget: f64| {
            let mut c = Config::parse_unchecked(
                "output_dir = \"out\"\n[[dataset]]\nname = \"a\"\nprompts = \"a.jsonl\"\n",
                Path::new("/job/harvest.toml"),
            )
            .expect("config");
            c.budget_usd = budget;
            c
        };
        // (what, the shard's budget, the job's, the siblings' spend and count, the budget after
        // or the error's start)
        type Case = (
            &'static str,
            f64,
            f64,
            f64,
            usize,
            Result<f64, &'static str>,
        );
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("no siblings", 40.0, 90.0, 0.0, 0, Ok(40.0)),
            ("the default share always fits", 30.0, 90.0, 60.0, 2, Ok(30.0)),
            ("shard budgets that add up past the job's", 40.0, 90.0, 80.0, 2, Ok(10.0)),
            ("the siblings spent it all", 40.0, 90.0, 90.0, 2, Err("shard 2/3: the job's budget_usd $90.00 is spent")),
        ];
        for (what, budget, job, spent, siblings, want) in cases {
            let mut c = cfg(*budget);
            match (
                within_job(&mut c, (2, 3), *job, &around(*spent, *siblings)),
                want,
            ) {
                (Ok(notes), Ok(after)) => {
                    assert_eq!(c.budget_usd, *after, "{what}");
                    assert_eq!(notes.is_empty(), after == budget, "{what}: {notes:?}");
                }
                (Err(e), Err(start)) => assert!(e.starts_with(start), "{what}: {e}"),
                (got, _) => panic!("{what}: {got:?}"),
            }
        }
    }
}
