//! `harvest export`: the output directory as training files (see `crate::export`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::cli::ExportArgs;
use crate::config::Config;
use crate::export::template::{ChatTemplate, Keys};
use crate::export::{Counts, Exported, Options, Sample, export_all, file_names, render};

use super::BadInput;

/// The key variable of a run whose config does not name one (`api_key_env`'s default).
const DEFAULT_KEY_VAR: &str = "OPENROUTER_API_KEY";
use super::run::Out;

pub fn run(args: ExportArgs) -> anyhow::Result<()> {
    let job = super::job::shard_dirs(&args.dirs);
    let dirs = job.clone().unwrap_or_else(|| args.dirs.clone());
    for dir in &dirs {
        if !dir.is_dir() {
            return Err(BadInput(format!("{}: not an output directory", dir.display())).into());
        }
        refuse_output_dir(dir, &args.to)?;
    }
    if let Some(job) = &job {
        refuse_mixed_job(job)?;
    }
    // The key variables a template may not render: the run's (the config's, its endpoints'),
    // and the default one, which an export without the config cannot tell from the run's.
    let mut key_vars = vec![DEFAULT_KEY_VAR.to_string()];
    let (names, prompts, prompt_files) = match &args.config {
        Some(path) => {
            let cfg = Config::load(path).map_err(|e| BadInput(e.to_string()))?;
            key_vars.push(cfg.api_key_env.clone());
            key_vars.extend(cfg.endpoints.iter().filter_map(|e| e.api_key_env.clone()));
            let mut prompts = HashMap::new();
            for d in &cfg.datasets {
                let counted =
                    crate::store::prompts::count_prompts_in_shard(&d.prompts, &d.fields(), None)
                        .map_err(|e| BadInput(e.to_string()))?;
                prompts.insert(d.name.clone(), counted.in_shard);
            }
            (
                cfg.datasets.iter().map(|d| d.name.clone()).collect(),
                prompts,
                cfg.datasets.iter().map(|d| d.prompts.clone()).collect(),
            )
        }
        None => (dataset_names(&dirs)?, HashMap::new(), Vec::new()),
    };
    refuse_overwriting_inputs(&args.to, &names, &prompt_files)?;
    let opts = Options {
        format: args.format,
        with_provenance: args.with_provenance,
        keep_truncated: args.keep_truncated,
        require_reasoning: args.require_reasoning,
        keep_think_markers: args.keep_think_markers,
        system_prompt: args.system_prompt.clone(),
        samples: args.show.unwrap_or(0),
        explode_turns: args.explode_turns,
        foreign_turns: args.foreign_turns,
        max_length: args.max_length,
        skip_longer: args.skip_longer,
    };
    // A template that does not compile is refused before anything is written.
    let template = match &args.chat_template {
        Some(path) => Some(
            ChatTemplate::load(path)
                .and_then(|t| t.with_kwargs(&args.template_kwarg))
                .and_then(|t| t.refusing_keys(Keys::from_env(&key_vars)))
                .map_err(|e| BadInput(e.to_string()))?,
        ),
        None => None,
    };
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    let exported = export_all(&dirs, &names, &prompts, &args.to, &opts, template.as_ref())
        .map_err(|e| match e {
            // The template is what the user gave: a bad input, as a template that does not
            // compile is.
            e @ (crate::export::ExportError::TemplateFailsEveryRow { .. }
            | crate::export::ExportError::TemplateRunsAway { .. }
            | crate::export::ExportError::Template(_)) => {
                anyhow::Error::from(BadInput(e.to_string()))
            }
            e => e.into(),
        })?;
    // A pipe into `head` may close: the files are written by now, so stop printing quietly.
    let mut out = Out::default();
    if args.json {
        out.line(&serde_json::to_string_pretty(&json_report(&exported))?);
        return nothing_exported(&exported.counts);
    }
    if args.show.is_some() {
        let text = show(&exported.samples);
        // Into a file or a pipe the renderings go exactly as the text file holds them (to be
        // diffed against Python's); at a terminal their control characters go, as every
        // printed text's do (an escape sequence in an answer would drive the terminal).
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            out.write(&text);
        } else {
            super::stdout::write(&text);
        }
    }
    out.write(&render(&exported.counts, &args.to));
    out.write(&stale_files(&args.to, &names));
    nothing_exported(&exported.counts)
}

/// An export that wrote no success row from answers it had is a failure a script must see
/// (a template or a filter that refuses every row), not exit 0 with an empty training set.
fn nothing_exported(counts: &[Counts]) -> anyhow::Result<()> {
    let success: u64 = counts.iter().map(|c| c.success).sum();
    let refused: u64 = counts.iter().map(|c| c.error + c.skipped).sum();
    if success == 0 && refused > 0 {
        anyhow::bail!(
            "no row was exported: all {refused} were errors or skipped (their reasons are in \
             the .error.ndjson and .skipped.ndjson files)"
        );
    }
    Ok(())
}

/// Refuses to write a job's shards as one training set when they are not one job: a shard of
/// another split, model or parameters, or one shard in two directories (its rows twice)
/// would be merged without a word (reliability-probe-4 N9). Directories that are no shards
/// at all are several runs, exported together as asked.
fn refuse_mixed_job(dirs: &[PathBuf]) -> Result<(), BadInput> {
    let view = super::job::assemble(&super::job::read(dirs).map_err(BadInput)?);
    if view.of.is_none() {
        return Ok(());
    }
    let mut why: Vec<String> = view
        .other_config
        .iter()
        .map(|(dir, why)| format!("{dir}: {why}"))
        .collect();
    why.extend(view.damaged.iter().map(|d| {
        format!(
            "{}: a damaged manifest, so whether its rows are of this job is unknown",
            d.said()
        )
    }));
    why.extend(view.duplicated.iter().map(|s| {
        format!("shard {s} is in more than one directory: its rows would be written twice")
    }));
    if why.is_empty() {
        return Ok(());
    }
    Err(BadInput(format!(
        "these directories are not one job, so their rows would mix:\n  {}\nExport the \
         directories of one job by naming them (harvest export DIR... --to ...); `harvest \
         status` on them shows the job",
        why.join("\n  ")
    )))
}

/// The datasets of every directory, in the order first met.
fn dataset_names(dirs: &[PathBuf]) -> Result<Vec<String>, BadInput> {
    let mut names: Vec<String> = Vec::new();
    for dir in dirs {
        for n in crate::report::dataset_names(dir).map_err(|e| BadInput(e.to_string()))? {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    Ok(names)
}

/// Refuses a `--to` that is, or is inside, a run's output directory (the source, or one with
/// harvest's lock file or manifest): the training files would
/// be renamed over the run's records (`<dataset>.jsonl`), and a live run would go on writing
/// to the unlinked file (reliability-probe-3 D1: 299 of 300 paid answers lost).
fn refuse_output_dir(dir: &Path, to: &Path) -> Result<(), BadInput> {
    let source = dir
        .canonicalize()
        .map_err(|e| BadInput(format!("{}: {e}", dir.display())))?;
    // `to` may not exist yet: its nearest existing ancestor decides, symlinks resolved.
    let mut at = Some(to);
    let existing = loop {
        match at {
            Some(p) if p.as_os_str().is_empty() => break std::env::current_dir().ok(),
            Some(p) => match p.canonicalize() {
                Ok(c) => break Some(c),
                Err(_) => at = p.parent(),
            },
            None => break std::env::current_dir().ok(),
        }
    };
    let Some(existing) = existing else {
        return Ok(());
    };
    // Harvest's own marks: the lock file every run and probe leaves, or its manifest (a file
    // named manifest.json alone proves nothing).
    let is_output = |p: &Path| {
        p == source
            || p.join(crate::store::lock::FILE_NAME).exists()
            || std::fs::read_to_string(crate::engine::manifest_path(p))
                .is_ok_and(|t| t.contains("\"harvest_version\""))
    };
    match existing.ancestors().find(|p| is_output(p)) {
        Some(run) => Err(BadInput(format!(
            "--to {}: {} is a run's output directory; the export would overwrite its records \
             (<dataset>.jsonl). Export next to it instead, e.g. --to {}",
            to.display(),
            run.display(),
            run.with_file_name(format!(
                "{}-train",
                run.file_name().and_then(|n| n.to_str()).unwrap_or("out")
            ))
            .display()
        ))),
        None => Ok(()),
    }
}

/// Refuses a `--to` where an export would replace a file it did not write
/// (reliability-probe-5 P4: `--to data` renamed 26 training rows over the dataset's 30-prompt
/// file `data/a.jsonl`, and nothing noticed). A dataset's file there may be replaced only when
/// it is an earlier export's: the three files an export writes together
/// ([`file_names`]) are all there. A configured prompt file is never replaced, whatever lies
/// beside it.
fn refuse_overwriting_inputs(
    to: &Path,
    names: &[String],
    prompt_files: &[PathBuf],
) -> Result<(), BadInput> {
    let prompts: Vec<PathBuf> = (prompt_files.iter())
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    for name in names {
        let files = file_names(name).map(|f| to.join(f));
        for path in &files {
            let Ok(real) = path.canonicalize() else {
                continue;
            };
            if prompts.contains(&real) {
                return Err(BadInput(format!(
                    "--to {}: {} is a prompt file of the config; the export would replace it \
                     with training rows. Export into another directory, e.g. --to {}",
                    to.display(),
                    path.display(),
                    to.join("train").display()
                )));
            }
        }
        let [rows, errors, skipped] = &files;
        let exported_before = errors.is_file() && skipped.is_file();
        if rows.exists() && !exported_before {
            return Err(BadInput(format!(
                "--to {}: {} exists and is not an earlier export's (no {} and {} beside it); \
                 the export would replace it. Export into another directory, or move the file \
                 away first",
                to.display(),
                rows.display(),
                file_names(name)[1],
                file_names(name)[2]
            )));
        }
    }
    Ok(())
}

/// `--json`: the accounting, and the samples when `--show` asked for them.
fn json_report(e: &Exported) -> serde_json::Value {
    #[derive(serde::Serialize)]
    struct Report<'a> {
        datasets: &'a [Counts],
        #[serde(skip_serializing_if = "<[Sample]>::is_empty")]
        samples: &'a [Sample],
    }
    serde_json::json!(Report {
        datasets: &e.counts,
        samples: &e.samples,
    })
}

/// The samples as the trainer's template renders them, each under a heading line.
fn show(samples: &[Sample]) -> String {
    let mut out = String::new();
    if samples.is_empty() {
        out.push_str("no success rows to show\n\n");
    }
    for s in samples {
        let flag = if s.reasoning_dropped {
            " · reasoning dropped by the template"
        } else {
            ""
        };
        out.push_str(&format!(
            "── {} · {} · {} messages{flag} ──\n{}\n\n",
            s.dataset, s.id, s.messages, s.text
        ));
    }
    out
}

/// An older export's `<dataset>_error.jsonl` / `_skipped.jsonl` in the same directory: a
/// directory loader would read them as training rows.
fn stale_files(to: &Path, names: &[String]) -> String {
    let ours: Vec<String> = names.iter().flat_map(|n| file_names(n)).collect();
    let stale: Vec<String> = names
        .iter()
        .flat_map(|n| [format!("{n}_error.jsonl"), format!("{n}_skipped.jsonl")])
        .filter(|f| !ours.contains(f) && to.join(f).is_file())
        .collect();
    if stale.is_empty() {
        return String::new();
    }
    format!(
        "{} in {} are an older export's rejected rows (now .error.ndjson / .skipped.ndjson): \
         remove them before pointing a trainer at the directory\n",
        stale.join(", "),
        to.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// reliability-probe-5 P17: a job with a shard whose manifest is damaged is refused with
    /// the manifest's path and the parse error, not "cannot be read (below)" with nothing below.
    #[test]
    fn a_job_with_a_damaged_manifest_is_refused_naming_it() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dirs = super::super::job::tests::job_with_a_damaged_manifest(tmp.path());
        let e = refuse_mixed_job(&dirs)
            .expect_err("a shard of unknown config")
            .0;
        let path = crate::engine::manifest_path(&dirs[1]).display().to_string();
        assert!(
            e.contains(&format!("{path}: expected value at line 1 column 1")),
            "{e}"
        );
        assert!(!e.contains("(below)"), "{e}");
    }

    /// reliability-probe-5 P4: an export never replaces a prompt file, nor any
    /// `<dataset>.jsonl` an earlier export did not write; an earlier export's files it does.
    #[test]
    fn an_export_replaces_only_its_own_earlier_files() {
        let root = tempfile::tempdir().expect("tmp");
        let data = root.path().join("data");
        std::fs::create_dir(&data).expect("data");
        let names = ["a".to_string()];
        // Nothing there yet: fine.
        refuse_overwriting_inputs(&data, &names, &[]).expect("an empty directory");
        // The dataset's prompt file, named by the config: refused, even beside an export's
        // other two files.
        let prompts = data.join("a.jsonl");
        std::fs::write(&prompts, "{\"prompt\": \"q\"}\n").expect("prompts");
        let err = refuse_overwriting_inputs(&data, &names, std::slice::from_ref(&prompts))
            .expect_err("the prompt file");
        assert!(
            err.0.contains("is a prompt file of the config"),
            "{}",
            err.0
        );
        // Without the config: a file an export did not write is refused all the same.
        let err = refuse_overwriting_inputs(&data, &names, &[]).expect_err("not an export's");
        assert!(err.0.contains("is not an earlier export's"), "{}", err.0);
        // Another directory's path to the same file (a symlink) is the same file.
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&data, &link).expect("link");
        assert!(refuse_overwriting_inputs(&link, &names, std::slice::from_ref(&prompts)).is_err());
        // An earlier export's three files are replaced.
        let train = root.path().join("train");
        std::fs::create_dir(&train).expect("train");
        for f in file_names("a") {
            std::fs::write(train.join(f), "").expect("file");
        }
        refuse_overwriting_inputs(&train, &names, std::slice::from_ref(&prompts))
            .expect("an earlier export");
        std::fs::write(data.join("a.error.ndjson"), "").expect("e");
        std::fs::write(data.join("a.skipped.ndjson"), "").expect("s");
        assert!(
            refuse_overwriting_inputs(&data, &names, std::slice::from_ref(&prompts)).is_err(),
            "a prompt file stays refused beside an export's files"
        );
    }

    /// Only harvest's own marks make a directory a run's: a project's unrelated manifest.json
    /// does not.
    #[test]
    fn a_run_directory_is_known_by_harvests_own_marks() {
        let root = tempfile::tempdir().expect("tmp");
        let src = root.path().join("out");
        std::fs::create_dir(&src).expect("out");
        let project = root.path().join("project");
        std::fs::create_dir(&project).expect("project");
        std::fs::write(project.join("manifest.json"), r#"{"name": "web app"}"#).expect("m");
        refuse_output_dir(&src, &project.join("train")).expect("not a run's directory");
        std::fs::write(
            project.join("manifest.json"),
            r#"{"model": "m", "harvest_version": "0.1.0"}"#,
        )
        .expect("m");
        assert!(refuse_output_dir(&src, &project.join("train")).is_err());
        std::fs::remove_file(project.join("manifest.json")).expect("rm");
        std::fs::write(project.join(crate::store::lock::FILE_NAME), "").expect("lock");
        assert!(refuse_output_dir(&src, &project).is_err());
        assert!(
            refuse_output_dir(&src, &src.join("x")).is_err(),
            "the source itself"
        );
    }

    #[test]
    fn an_export_with_answers_and_no_success_row_fails() {
        let counts = |success, error, skipped| Counts {
            success,
            error,
            skipped,
            ..Counts::default()
        };
        // (what, the datasets' success, error and skipped, fails)
        type Case = (&'static str, &'static [(u64, u64, u64)], bool);
        let cases: &[Case] = &[
            ("rows exported", &[(3, 1, 1)], false),
            (
                "one dataset of two exported",
                &[(0, 2, 0), (1, 0, 0)],
                false,
            ),
            ("every row refused", &[(0, 2, 3)], true),
            ("nothing run yet", &[(0, 0, 0)], false),
        ];
        for (what, datasets, fails) in cases {
            let c: Vec<Counts> = datasets.iter().map(|&(s, e, k)| counts(s, e, k)).collect();
            assert_eq!(nothing_exported(&c).is_err(), *fails, "{what}");
        }
    }
}
