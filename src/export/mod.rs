//! `harvest export`: an output directory's answers as a trainer takes them. Per dataset,
//! `<dataset>.jsonl` (rows that pass SpecForge's gate, in the chosen format),
//! `<dataset>.error.ndjson` (rejected prompts, and rows that fail the gate, each with the
//! reason) and `<dataset>.skipped.ndjson` (rows left out by a filter: cut at `max_tokens`, a
//! think marker, no reasoning), as SpecForge's own regeneration script splits its output. The
//! rejected rows are not `.jsonl`: a trainer pointed at the directory (speculators' `--data
//! DIR`, `load_dataset("json", data_dir=...)`) reads every `*.json`/`*.jsonl` under it.
//! Reads the output directory through the one read-only reader (`store::scan`), so it works
//! while a run writes (it takes complete lines only) and never changes it.

mod answer;
use answer::answer_rows;
mod fail_fast;
use fail_fast::{FirstRenderings, RUNAWAY_ROWS};
mod lengths;
mod rows;
mod summary;
pub mod template;
pub use summary::render;
pub(crate) mod validate;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::{Value, json};

use crate::store::output::{OutputRecord, RejectRecord, output_path, rejects_path};
use crate::store::scan;

use template::ChatTemplate;

/// The shape of a success row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `{id, conversations: [{role, content, reasoning_content}], status: "success"}`: what
    /// SpecForge's loader and validator and speculators' `prepare_data` read.
    Specforge,
    /// `{id, conversations: [{from, value}]}` (`system`, `human`, `gpt`); no reasoning field.
    Sharegpt,
    /// `{id, messages: [{role, content, reasoning_content}]}` (OpenAI chat shape; no EAGLE-3
    /// trainer reads it).
    Openai,
    /// `{id, text}`: the row rendered through `--chat-template`, for SpecForge's
    /// `data.is_preformatted: true`.
    Text,
}

/// What goes where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    pub format: Format,
    /// Flat scalar columns of where each answer came from (provider, tokens, cost ...).
    pub with_provenance: bool,
    /// Keep answers cut at `max_tokens` (default: skipped).
    pub keep_truncated: bool,
    /// Skip answers without reasoning (SpecForge's `--expect-reasoning`).
    pub require_reasoning: bool,
    /// Keep answers with `<think>`/`</think>` in them (default: skipped, as
    /// `--strict-think-markers` would fail them).
    pub keep_think_markers: bool,
    /// A system turn for rows that have none (to match a training template's default).
    pub system_prompt: Option<String>,
    /// Success rows (as written: exploded, in the format) to keep aside as [`Sample`]s for
    /// `--show`, first rows first.
    pub samples: usize,
    /// One success row per assistant turn (`<id>#<k>`, k from 1), each ending at that turn
    /// with its reasoning, earlier answers without theirs: every turn's target trained under
    /// last-turn-only loss masking (SpecForge's `train_only_last_turn`).
    pub explode_turns: bool,
    /// What becomes of a row whose prompt carried assistant turns the model did not write.
    pub foreign_turns: ForeignTurns,
    /// The trainer's `max_length` in tokens: rows longer are counted (and, with
    /// `skip_longer`, left out).
    pub max_length: Option<u64>,
    pub skip_longer: bool,
}

/// Rows whose conversation holds assistant turns from the prompt file (`turns = "last"`):
/// text the target model never wrote. A trainer supervises every assistant turn of a row
/// (SpecForge's parser, speculators' one row per turn), so by default they are left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ForeignTurns {
    /// Left out, with the reason in `<dataset>.skipped.ndjson`.
    #[default]
    Skip,
    /// Written with those turns as context, each row (exploded: each part) ending at an
    /// answer the model wrote: for a trainer that supervises only a row's last turn
    /// (SpecForge's `data.train_only_last_turn: true`). speculators supervises them all.
    Context,
}

/// A success row as written, through the chat template.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub dataset: String,
    pub id: String,
    pub messages: usize,
    /// The training text the template makes of the row.
    pub text: String,
    /// The last answer has reasoning and the text does not hold it.
    pub reasoning_dropped: bool,
}

/// What an export did: the accounting per dataset, and the samples asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exported {
    pub counts: Vec<Counts>,
    pub samples: Vec<Sample>,
}

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error(transparent)]
    Scan(#[from] scan::ScanError),
    #[error("{0}")]
    Template(#[from] template::TemplateError),
    #[error("--format text renders every row through a chat template: give --chat-template")]
    NoTemplate,
    /// The template failed the same way on the first rows it rendered, and on none it
    /// succeeded: it would fail on every row, each at the cost of its fuel.
    #[error(
        "the chat template failed the same way on the first {rows} rows it rendered, and \
         rendered none: stopped, as it would fail on every row. The first: {first}"
    )]
    TemplateFailsEveryRow {
        rows: u32,
        first: template::TemplateError,
    },
    /// The template ran away (out of fuel, or past its output cap) on this many rows: each
    /// costs its whole allowance, so an export of many such rows would take hours.
    #[error(
        "the chat template ran away on {rows} rows (out of fuel or past its output cap, each \
         costing half a second): stopped, as a template that loops on some rows would on \
         thousands. The first: {first}"
    )]
    TemplateRunsAway {
        rows: u32,
        first: template::TemplateError,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ExportError + '_ {
    move |source| ExportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// One dataset's accounting: success + error + skipped + not yet run = the prompt file's count.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub dataset: String,
    pub success: u64,
    /// Rows in the success file: `success`, or more with `--explode-turns`.
    pub success_rows: u64,
    pub error: u64,
    pub skipped: u64,
    /// Prompts with no answer and no reject yet (known when the prompt count is).
    pub not_run: Option<u64>,
    /// The prompt file's prompts, when known (`-c harvest.toml`).
    pub prompts: Option<u64>,
    /// Lines of the output directory that could not be read (damage): not exported.
    pub unreadable: u64,
    /// The prompt file's bad lines a run rejected (`on_bad_line = "skip"`, ids `@line:N`):
    /// error rows, but no prompts, so not in `error` (which, with the others, adds up to the
    /// prompt count).
    pub bad_lines: u64,
    /// Success rows rendered through the chat template (all of them, when one is given).
    pub rendered: u64,
    /// Of those, rows whose last answer has reasoning the rendered text does not hold: the
    /// template drops it (Moonshot's Kimi templates do, for a conversation's last answer).
    pub reasoning_dropped: u64,
    /// The first few of those rows' ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped_ids: Vec<String>,
    /// Success rows without a system turn, when the trainer renders them itself (`specforge`,
    /// `sharegpt`): SpecForge inserts its template's own system prompt into those, which the
    /// rendering here (and the provider at generation) did not have.
    pub without_system: u64,
    /// Rows of an id already exported from an earlier directory (shards exported as one job,
    /// one of them present twice): left out, so that the union holds each id once.
    pub duplicates: u64,
    /// Rows left out for holding assistant turns the model did not write.
    pub foreign_skipped: u64,
    /// Rows written with such turns as context (`--foreign-turns context`).
    pub foreign_context: u64,
    /// Success rows with reasoning, of a model whose own chat template drops the last
    /// answer's reasoning, exported for a trainer to render (no `--chat-template`): the
    /// built-in template that keeps it, and how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keeps_reasoning: Option<&'static str>,
    pub lossy_for_trainer: u64,
    /// The success rows' lengths in tokens (and of those left out for their length).
    pub lengths: lengths::Lengths,
}

/// How many ids of rows whose reasoning the template drops are named.
const NAMED: usize = 5;

/// A dataset's three files: success, error, skipped. The success file alone is `.jsonl`, so
/// no dataset's rejected rows can take another's name (datasets `a` and `a_error` clashed).
pub fn file_names(dataset: &str) -> [String; 3] {
    [
        format!("{dataset}.jsonl"),
        format!("{dataset}.error.ndjson"),
        format!("{dataset}.skipped.ndjson"),
    ]
}

/// Three files written beside each other and moved into place together at the end.
struct Sink {
    files: Vec<(PathBuf, PathBuf, std::io::BufWriter<std::fs::File>)>,
}

impl Sink {
    fn new(to: &Path, dataset: &str) -> Result<Sink, ExportError> {
        let mut files = Vec::new();
        for name in file_names(dataset) {
            let path = to.join(&name);
            let tmp = to.join(format!(".{name}.tmp"));
            let f = crate::store::create_replacement(&tmp).map_err(io(&tmp))?;
            files.push((path, tmp, std::io::BufWriter::new(f)));
        }
        Ok(Sink { files })
    }

    fn write(&mut self, which: usize, row: &Value) -> Result<(), ExportError> {
        let (_, tmp, w) = &mut self.files[which];
        serde_json::to_writer(&mut *w, row).map_err(|e| io(tmp)(std::io::Error::other(e)))?;
        w.write_all(b"\n").map_err(io(tmp))
    }

    fn finish(self) -> Result<(), ExportError> {
        for (path, tmp, w) in self.files {
            let f = w.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
            f.sync_all().map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))?;
        }
        Ok(())
    }
}

const SUCCESS: usize = 0;
const ERROR: usize = 1;
const SKIPPED: usize = 2;
/// The reject of a prompt file's bad line: an error row, counted apart.
const BAD_LINE: usize = 3;

/// Exports the datasets `names` of `dir` into `to`; `prompts` gives each dataset's prompt
/// count when known. With a chat template, every success row is rendered through it as
/// written: the `text` format's text, the samples, and the count of rows whose reasoning it
/// drops; a row it refuses is an error row. Returns the accounting per dataset.
pub fn export(
    dir: &Path,
    names: &[String],
    prompts: &HashMap<String, u64>,
    to: &Path,
    o: &Options,
    template: Option<&ChatTemplate>,
) -> Result<Exported, ExportError> {
    export_all(&[dir], names, prompts, to, o, template)
}

/// [`export`] of several output directories as one: the shards of a job. Each dataset's rows
/// are read directory after directory into one set of files; an id met again in a later
/// directory (a shard present twice) is counted as a duplicate and left out.
pub fn export_all(
    dirs: &[&Path],
    names: &[String],
    prompts: &HashMap<String, u64>,
    to: &Path,
    o: &Options,
    template: Option<&ChatTemplate>,
) -> Result<Exported, ExportError> {
    if o.format == Format::Text && template.is_none() {
        return Err(ExportError::NoTemplate);
    }
    std::fs::create_dir_all(to).map_err(io(to))?;
    let mut samples = Vec::new();
    let mut all = Vec::new();
    for name in names {
        let job = Job {
            dirs,
            to,
            o,
            template,
        };
        let mut c = export_dataset(&job, name, &mut samples)?;
        c.prompts = prompts.get(name).copied();
        c.not_run = c
            .prompts
            .map(|p| p.saturating_sub(c.success + c.error + c.skipped));
        all.push(c);
    }
    Ok(Exported {
        counts: all,
        samples,
    })
}

/// What every dataset of one export shares.
struct Job<'a> {
    dirs: &'a [&'a Path],
    to: &'a Path,
    o: &'a Options,
    template: Option<&'a ChatTemplate>,
}

/// Exports one dataset's answers and rejects; adds to `samples` up to the number asked.
fn export_dataset(job: &Job, name: &str, samples: &mut Vec<Sample>) -> Result<Counts, ExportError> {
    let o = job.o;
    let mut sink = Sink::new(job.to, name)?;
    let mut c = Counts {
        dataset: name.to_string(),
        ..Counts::default()
    };
    let mut failed: Option<ExportError> = None;
    // One prompt's outcome: counted once, written as one row (or, exploded, several).
    let mut keep = |sink: &mut Sink, which: usize, rows: &[Value], c: &mut Counts| {
        if failed.is_some() {
            return;
        }
        match which {
            SUCCESS => {
                c.success += 1;
                c.success_rows += rows.len() as u64;
            }
            ERROR => c.error += 1,
            BAD_LINE => c.bad_lines += 1,
            _ => c.skipped += 1,
        }
        let file = if which == BAD_LINE { ERROR } else { which };
        for row in rows {
            if let Err(e) = sink.write(file, row) {
                failed = Some(e);
                return;
            }
        }
    };
    // Across directories, each id once (one directory needs no memory of ids).
    let mut seen: Option<std::collections::HashSet<String>> =
        (job.dirs.len() > 1).then(Default::default);
    let mut first_time = |id: &str, c: &mut Counts| {
        let again = seen.as_mut().is_some_and(|s| !s.insert(id.to_string()));
        c.duplicates += u64::from(again);
        !again
    };
    let mut firsts = FirstRenderings::default();
    let mut stopped: Option<ExportError> = None;
    let mut all_lengths: Vec<u64> = Vec::new();
    for dir in job.dirs {
        let outputs = scan::read_file(&output_path(dir, name), |r: OutputRecord| {
            if stopped.is_some() || !first_time(&r.id, &mut c) {
                return;
            }
            let room = o.samples.saturating_sub(samples.len());
            // Rows the trainer will render through the model's own template, which drops the
            // reasoning this row holds (Moonshot's Kimi templates): the built-in that keeps it.
            let better = (job.template.is_none())
                .then(|| template::builtin::for_model(&r.model))
                .flatten()
                .filter(|_| {
                    r.conversations.iter().any(|t| {
                        t.role == "assistant"
                            && t.reasoning_content
                                .as_deref()
                                .is_some_and(|x| !x.trim().is_empty())
                    })
                });
            let mut a = answer_rows(job, name, r, room);
            if let Some(e) = a.template_failure.take_if(|e| e.renders_key()) {
                stopped = Some(ExportError::Template(e));
                return;
            }
            if firsts.note(a.rendered, a.template_failure.take()) {
                stopped = Some(match firsts.first_runaway.take() {
                    Some(first) if firsts.runaways >= RUNAWAY_ROWS => {
                        ExportError::TemplateRunsAway {
                            rows: firsts.runaways,
                            first,
                        }
                    }
                    _ => ExportError::TemplateFailsEveryRow {
                        rows: firsts.same,
                        first: firsts.first.take().expect("a first failure"),
                    },
                });
                return;
            }
            if a.foreign && a.which == SUCCESS {
                c.foreign_context += 1;
            } else if a.foreign {
                c.foreign_skipped += 1;
            }
            all_lengths.append(&mut a.lengths);
            if a.which == SUCCESS
                && let Some(b) = better
            {
                c.keeps_reasoning = Some(b.name);
                c.lossy_for_trainer += 1;
            }
            if a.which == SUCCESS {
                c.without_system += u64::from(a.without_system);
                c.rendered += a.rendered;
                c.reasoning_dropped += a.dropped.len() as u64;
                let room = NAMED.saturating_sub(c.dropped_ids.len());
                c.dropped_ids.extend(a.dropped.into_iter().take(room));
                samples.extend(a.shown);
            }
            keep(&mut sink, a.which, &a.rows, &mut c);
        })?;
        let rejects = scan::read_file(&rejects_path(dir, name), |r: RejectRecord| {
            if first_time(&r.id, &mut c) {
                let bad_line = r.id.starts_with(crate::store::prompts::BAD_LINE_ID);
                let which = if bad_line { BAD_LINE } else { ERROR };
                keep(&mut sink, which, &[reject_row(&r)], &mut c);
            }
        })?;
        c.unreadable += outputs.damaged + rejects.damaged;
    }
    if let Some(e) = stopped.or(failed) {
        return Err(e);
    }
    sink.finish()?;
    c.lengths = lengths::Lengths::of(all_lengths, o.max_length, o.skip_longer);
    Ok(c)
}

/// A final reject as an error row: why, after how many attempts, and its cause's fields.
fn reject_row(r: &RejectRecord) -> Value {
    let mut row = json!({"id": r.id, "status": "error",
                         "reason": format!("rejected after {} attempt{}: {}", r.attempts,
                                           if r.attempts == 1 { "" } else { "s" }, r.error),
                         "error_kind": r.error_kind, "line": r.line});
    if let (Some(row), Ok(serde_json::Value::Object(cause))) =
        (row.as_object_mut(), serde_json::to_value(&r.cause))
    {
        row.extend(cause);
    }
    row
}

#[cfg(test)]
mod tests;
