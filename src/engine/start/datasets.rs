//! Each dataset at the start: its prompt file's count (the shard's share, bad lines and
//! duplicate ids refused or noted), what earlier runs finished, and the multi-turn rows they
//! left in progress.

use crate::config::{Config, DatasetConfig, OnBadLine, OnDuplicate, RequestParams};
use crate::store::prompts::{PromptCount, PromptReader};
use crate::store::scan::{DatasetScan, ExistingDataset};

use super::super::core::DatasetBook;
use super::super::supervisor::DatasetRun;
use super::super::{EngineError, RunOptions};

/// One dataset: its prompt file's count (the shard's share, bad lines and duplicate ids
/// refused or noted), and what earlier runs finished.
/// A dataset whose prompts carry assistant turns the model will not write (`turns = "last"`):
/// a trainer supervises every assistant turn of a row, so those rows would teach the drafter
/// another model's text; `turns = "all"` has the model write them (one request per turn).
pub(crate) fn foreign_turns_note(d: &DatasetConfig, counted: &PromptCount) -> Option<String> {
    let n = counted.with_assistant_turns;
    (n > 0 && d.turns == crate::config::Turns::Last).then(|| {
        format!(
            "dataset {}: {} of {} prompts carry assistant turns the model does not write \
             (turns = \"last\"): a trainer supervises every assistant turn of a row, so export \
             leaves those rows out; set turns = \"all\" to have the model write every turn (one \
             request per turn)",
            d.name,
            crate::domain::group_thousands(n),
            crate::domain::group_thousands(counted.valid),
        )
    })
}

pub(super) fn ready_dataset(
    cfg: &Config,
    opts: &RunOptions,
    d: &DatasetConfig,
    found: DatasetScan,
    counted: PromptCount,
    notes: &mut Vec<String>,
    sizes: &mut (u64, u64),
) -> Result<DatasetRun, EngineError> {
    // Every line the bytes hold, duplicates and other shards' included: a mean prompt's
    // size (reliability-probe-4 N12: divided by the unique prompts of one shard, 100 M
    // identical lines made one prompt of $202).
    sizes.0 += counted.bytes;
    sizes.1 += counted.valid + counted.invalid + counted.duplicates;
    check_prompts(cfg, d, &counted, notes)?;
    if counted.without_system > 0 && d.system_prompt.is_none() {
        // The provider then renders the model's own default system prompt, which the row does
        // not show, while a trainer's template may insert its own: the two contexts differ.
        notes.push(format!(
            "dataset {}: {} prompt{} without a system message and no system_prompt configured: \
             the provider applies the model's default system prompt, which the rows do not \
             record; set system_prompt to send (and record) one",
            d.name,
            crate::domain::group_thousands(counted.without_system),
            if counted.without_system == 1 { "" } else { "s" }
        ));
    }
    if let Some(note) = foreign_turns_note(d, &counted) {
        notes.push(note);
    }
    // In skip mode bad lines become rejects (of shard 0 only, when sharded).
    let skip = cfg.on_bad_line == OnBadLine::Skip;
    let bad = if skip && opts.shard.is_none_or(|(k, _)| k == 0) {
        counted.invalid
    } else {
        0
    };
    let total = bad + counted.in_shard;
    if total == 0 {
        return Err(EngineError::Input(format!(
            "dataset {}: {} holds no prompts{}",
            d.name,
            d.prompts.display(),
            if opts.shard.is_some() {
                " in this shard"
            } else {
                ""
            }
        )));
    }
    let reader = PromptReader::open_prescanned(&d.prompts, &d.fields(), &counted)
        .map_err(|e| EngineError::Input(e.to_string()))?;
    let max_tokens = cfg.request_for(d).max_tokens;
    // Earlier answers cut while thinking at this max_tokens (not at a lower one since raised).
    if u64::from(max_tokens) <= found.existing.cut_thinking_at
        && let Some(line) = crate::engine::core::cut_watch::earlier_cuts(
            &d.name,
            found.existing.cut_thinking,
            found.existing.outputs,
            max_tokens,
        )
    {
        notes.push(line);
    }
    Ok(dataset_run(
        d,
        cfg.request_for(d),
        reader,
        found.existing,
        (total, bad, opts.shard),
        counted.duplicates,
    ))
}

/// Refuses bad lines (unless `on_bad_line = "skip"`) and ids reused with other content (unless
/// `on_duplicate = "skip"`); notes the duplicates skipped.
pub(super) fn check_prompts(
    cfg: &Config,
    d: &DatasetConfig,
    counted: &PromptCount,
    notes: &mut Vec<String>,
) -> Result<(), EngineError> {
    if counted.invalid > 0 && cfg.on_bad_line == OnBadLine::Error {
        return Err(EngineError::Input(match &counted.first_error {
            Some(e) => format!(
                "{e} ({} bad lines in all; set on_bad_line = \"skip\" to reject them and go on)",
                counted.invalid
            ),
            None => format!("{}: {} bad lines", d.prompts.display(), counted.invalid),
        }));
    }
    // A misspelt id_field would give every prompt a content-hash id without a word, and the
    // fix would send every prompt again under its real id (reliability-probe-4 N8).
    if let Some(key) = &d.fields().id
        && counted.valid > 0
        && counted.ids_given == 0
    {
        return Err(EngineError::Input(format!(
            "{}: id_field = {key:?} names no field of any of its {} prompts: check its \
             spelling against the file's fields, or remove it to give each prompt an id \
             made from its content",
            d.prompts.display(),
            counted.valid
        )));
    }
    if let Some(dup) = counted.first_duplicates.iter().find(|x| x.differs)
        && cfg.on_duplicate == OnDuplicate::Error
    {
        return Err(EngineError::Input(format!(
            "{}:{}: id {:?} is already the id of line {} with other content ({} ids reused \
             with other content in all; an integer id and the same digits as a string are \
             one id). Give each prompt its own id, or set on_duplicate = \"skip\" to keep \
             the first",
            d.prompts.display(),
            dup.line,
            dup.id,
            dup.first_line,
            counted.differing
        )));
    }
    if counted.duplicates > 0 {
        let lines: Vec<String> = counted
            .first_duplicates
            .iter()
            .take(3)
            .map(|x| x.line.to_string())
            .collect();
        let note = format!(
            "dataset {}: {} duplicate ids skipped ({} with other content; first: lines {})",
            d.name,
            counted.duplicates,
            counted.differing,
            lines.join(", ")
        );
        tracing::warn!("{note}");
        notes.push(note);
    }
    Ok(())
}

/// Multi-turn rows earlier runs left in progress (the turns file): each dataset's book takes
/// its own, to continue them from their last finished turn. Rows finished since are dropped
/// from the file; a dataset no longer in the config keeps its rows there.
pub(super) fn resume_rows(
    dir: &std::path::Path,
    datasets: &mut [DatasetRun],
    notes: &mut Vec<String>,
    write: bool,
) -> Result<(), EngineError> {
    let finished = |d: &str, id: &str| {
        datasets
            .iter()
            .any(|r| r.book.name == d && r.book.done_ids.contains(id))
    };
    let mut loaded = crate::store::turns_file::load(dir, finished, write).map_err(|e| {
        EngineError::Input(format!(
            "cannot read {}: {e}",
            crate::store::turns_file::turns_path(dir).display()
        ))
    })?;
    let (mut rows, mut turns) = (0, 0);
    for r in datasets.iter_mut() {
        if r.book.turns != crate::config::Turns::All {
            continue;
        }
        if let Some(in_progress) = loaded.rows.remove(&r.book.name) {
            rows += in_progress.len();
            turns += in_progress.values().map(Vec::len).sum::<usize>();
            r.book.in_progress = in_progress;
        }
    }
    if rows > 0 {
        notes.push(format!(
            "{rows} multi-turn rows continue from their last finished turn ({turns} turns an \
             earlier run paid for, kept in {})",
            crate::store::turns_file::TURNS_FILE
        ));
    }
    if loaded.unreadable > 0 {
        notes.push(format!(
            "{}: {} unreadable lines left out (a torn tail after a crash costs at most one turn \
             each, generated again)",
            crate::store::turns_file::TURNS_FILE,
            loaded.unreadable
        ));
    }
    Ok(())
}

/// The dataset's book as the core keeps it, and its reader.
pub(super) fn dataset_run(
    d: &DatasetConfig,
    params: RequestParams,
    reader: PromptReader,
    existing: ExistingDataset,
    (total, bad_lines, shard): (u64, u64, Option<(u32, u32)>),
    duplicates: u64,
) -> DatasetRun {
    let (done, rejected) = existing.ended_in(shard);
    DatasetRun {
        book: DatasetBook {
            name: d.name.clone(),
            params,
            system_prompt: d.system_prompt.clone(),
            turns: d.turns,
            done_ids: existing.done.into_keys().collect(),
            total,
            done,
            rejected,
            output_tokens: existing.output_tokens,
            // From the ledger's lines of the dataset (`ready.rs`), not its answers' alone.
            spent: crate::domain::Usd::ZERO,
            budget: d.output_token_budget,
            max_samples: d.max_samples,
            duplicates,
            ..DatasetBook::default()
        },
        reader: Some(reader),
        bad_lines,
    }
}
