//! The one reader of an output directory's JSONL files (`<dataset>.jsonl`,
//! `<dataset>.rejects.jsonl`, `spend.jsonl`): every line is read here, with one rule, by the
//! engine's start and resume, `harvest status --report` and `harvest estimate`. It never writes:
//! the only changes a directory ever gets outside the writer are in [`super::repair`], and only a
//! starting run makes them.
//!
//! The rule. The writer ends every line with `\n`, and a line becomes visible to a reader in
//! order, so:
//! - an **unterminated last line** is *torn*: a crash in the middle of a write, or a live run
//!   half-way through one. It is never read (whether or not it happens to parse); a resuming
//!   run cuts it, readers skip it.
//! - a **terminated line that does not parse** as its file's record, wherever it is (the last
//!   one included), is *damage*: something other than a crash changed the file. It is never cut
//!   and never skipped silently: a run refuses to start (`--repair` quarantines it), the report
//!   refuses to count, the estimate says how many it left out.
//! - a terminated line holding only whitespace carries nothing and is passed over (the writer
//!   never writes one, but an editor might).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use crate::domain::Usd;

use super::output::{OutputRecord, RejectRecord, SpendEntry, output_path, rejects_path};

/// Damaged lines kept per file for messages (the rest are counted): the first one is named,
/// a few more help to see a pattern, and a file of garbage must not fill memory.
const KEPT_DAMAGE: usize = 5;

/// The `attempt` of ledger lines rebuilt from the outputs (`--repair`), so that they can be
/// told apart from lines the engine booked as it went (`<run>-<n>`). A run then asks
/// `GET /generation` for each and writes an `adjustment` line with the same attempt once the
/// API has confirmed it (of the difference, often zero): a rebuilt line with such a line is
/// confirmed.
pub const REBUILT: &str = "rebuilt";

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What one line is, per the rule of the module doc.
#[derive(Debug, PartialEq)]
pub enum LineClass<T> {
    Good(T),
    Blank,
    /// Terminated but not a record: serde's reason.
    Damaged(String),
    /// No `\n` at the end (so the last line).
    Torn,
}

/// Classifies one line as read with `read_until(b'\n')` (its `\n` included when it has one).
pub fn classify<T: DeserializeOwned>(line: &[u8]) -> LineClass<T> {
    if line.last() != Some(&b'\n') {
        return LineClass::Torn;
    }
    if line.iter().all(u8::is_ascii_whitespace) {
        return LineClass::Blank;
    }
    match serde_json::from_slice::<T>(line) {
        Ok(v) => LineClass::Good(v),
        Err(e) => LineClass::Damaged(e.to_string()),
    }
}

/// A damaged line: where it is and what is wrong with it.
#[derive(Clone, Debug, PartialEq)]
pub struct Damage {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the line's first byte.
    pub offset: u64,
    pub error: String,
}

/// An unterminated last line: `len` bytes from `offset` to the end of the file as it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn {
    pub offset: u64,
    pub len: u64,
}

/// What a read of one file found, besides its records.
#[derive(Clone, Debug, Default)]
pub struct FileScan {
    pub path: PathBuf,
    pub exists: bool,
    /// Records read.
    pub good: u64,
    /// Damaged lines in all.
    pub damaged: u64,
    /// The first few of them.
    pub damage: Vec<Damage>,
    pub torn: Option<Torn>,
}

impl FileScan {
    /// "`path`:`line` (byte `offset`): `error`" for the first damaged line, and how many more.
    pub fn damage_text(&self) -> Option<String> {
        let first = self.damage.first()?;
        let more = match self.damaged - 1 {
            0 => String::new(),
            n => format!(
                " (and {n} more damaged line{})",
                if n == 1 { "" } else { "s" }
            ),
        };
        Some(format!(
            "{}:{} (byte {}): not a valid record: {}{more}",
            self.path.display(),
            first.line,
            first.offset,
            first.error
        ))
    }
}

/// Reads `input` line by line, calling `each` with every good record.
pub fn read_lines<T: DeserializeOwned>(
    path: &Path,
    input: impl BufRead,
    mut each: impl FnMut(T),
) -> Result<FileScan, ScanError> {
    let mut input = input;
    let mut scan = FileScan {
        path: path.to_path_buf(),
        exists: true,
        ..Default::default()
    };
    let mut buf = Vec::new();
    let (mut offset, mut number) = (0u64, 0u64);
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(|source| ScanError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if n == 0 {
            break;
        }
        number += 1;
        match classify::<T>(&buf) {
            LineClass::Good(v) => {
                scan.good += 1;
                each(v);
            }
            LineClass::Blank => {}
            LineClass::Damaged(error) => {
                scan.damaged += 1;
                if scan.damage.len() < KEPT_DAMAGE {
                    scan.damage.push(Damage {
                        line: number,
                        offset,
                        error,
                    });
                }
            }
            LineClass::Torn => {
                scan.torn = Some(Torn {
                    offset,
                    len: n as u64,
                })
            }
        }
        offset += n as u64;
    }
    Ok(scan)
}

/// Reads the file at `path` (a missing file is an empty one, with `exists` false).
pub fn read_file<T: DeserializeOwned>(
    path: &Path,
    each: impl FnMut(T),
) -> Result<FileScan, ScanError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileScan {
                path: path.to_path_buf(),
                ..Default::default()
            });
        }
        Err(source) => {
            return Err(ScanError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    read_lines(path, BufReader::with_capacity(1 << 20, file), each)
}

/// How an id ended in an earlier run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Answer,
    Reject,
}

/// What an existing output directory holds for one dataset.
#[derive(Clone, Debug, Default)]
pub struct ExistingDataset {
    /// Ids finished (output) or failed for good (rejects).
    pub done: HashMap<String, Ended>,
    /// Generation ids of the outputs.
    pub generation_ids: HashSet<String>,
    pub outputs: u64,
    /// Outputs cut at `max_tokens` while the model was still thinking (no answer).
    pub cut_thinking: u64,
    /// The largest `max_tokens` those were sent with (their `params`).
    pub cut_thinking_at: u64,
    pub rejects: u64,
    pub output_tokens: u64,
    pub prompt_tokens: u64,
    pub cost: Usd,
}

impl ExistingDataset {
    /// The answers and rejects of shard `k` of `n` (all of them unsharded): a shard's progress
    /// counts its own rows, not those of the shards beside it in the same files.
    pub fn ended_in(&self, shard: Option<(u32, u32)>) -> (u64, u64) {
        let Some(shard) = shard else {
            return (self.outputs, self.rejects);
        };
        let (mut answers, mut rejects) = (0, 0);
        for (id, ended) in &self.done {
            if crate::store::prompts::in_shard(id, shard) {
                match ended {
                    Ended::Answer => answers += 1,
                    Ended::Reject => rejects += 1,
                }
            }
        }
        (answers, rejects)
    }
}

/// One dataset's two files.
#[derive(Clone, Debug, Default)]
pub struct DatasetScan {
    pub name: String,
    pub existing: ExistingDataset,
    /// Cost of outputs whose `complete` ledger line is missing (a crash between the two
    /// writes): paid all the same.
    pub unbooked: Usd,
    pub outputs_file: FileScan,
    pub rejects_file: FileScan,
}

/// Reads the outputs and rejects of `dataset`; `completes` (from [`scan_ledger`]) tells which
/// outputs the ledger has booked. `each` sees every output record.
pub fn scan_dataset(
    dir: &Path,
    dataset: &str,
    completes: &HashSet<String>,
    mut each: impl FnMut(&OutputRecord),
) -> Result<DatasetScan, ScanError> {
    let mut ex = ExistingDataset::default();
    let mut unbooked = Usd::ZERO;
    let outputs_file = read_file(&output_path(dir, dataset), |r: OutputRecord| {
        each(&r);
        ex.outputs += 1;
        if r.cut_thinking {
            ex.cut_thinking += 1;
            let sent = r
                .params
                .get("max_tokens")
                .and_then(serde_json::Value::as_u64);
            ex.cut_thinking_at = ex.cut_thinking_at.max(sent.unwrap_or(0));
        }
        ex.output_tokens += r.usage.completion_tokens;
        ex.prompt_tokens += r.usage.prompt_tokens;
        ex.cost += r.cost_usd;
        if !completes.contains(&r.id) {
            // A negative cost is damage, not money back (reliability-probe-5 P3).
            unbooked += r.cost_usd.max(Usd::ZERO);
        }
        if let Some(g) = r.generation_id {
            ex.generation_ids.insert(g);
        }
        ex.done.insert(r.id, Ended::Answer);
    })?;
    let rejects_file = read_file(&rejects_path(dir, dataset), |r: RejectRecord| {
        ex.rejects += 1;
        ex.done.insert(r.id, Ended::Reject);
    })?;
    Ok(DatasetScan {
        name: dataset.to_string(),
        existing: ex,
        unbooked,
        outputs_file,
        rejects_file,
    })
}

/// A whole output directory, for the datasets of a config.
#[derive(Debug, Default)]
pub struct DirScan {
    pub ledger: LedgerScan,
    pub datasets: Vec<DatasetScan>,
    /// Rows (and their turns) whose answer's attempt is still open: a crash cut its
    /// `complete` line, and the start books it from the record.
    pub kept_open: Vec<KeptOpen>,
}

/// What keeps a run from starting in a directory until `--repair` deals with it.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// A file with damaged lines: its text (file, line, byte, serde's reason).
    Damaged { path: PathBuf, text: String },
    /// Outputs but no ledger (or an empty one): the spend of earlier runs is unknown, and the
    /// dollar cap would be counted from too little.
    LedgerMissing { path: PathBuf, outputs: u64 },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Damaged { text, .. } => f.write_str(text),
            Problem::LedgerMissing { path, outputs } => write!(
                f,
                "{} is missing or empty while the directory holds {outputs} outputs: what \
                 earlier runs spent is unknown",
                path.display()
            ),
        }
    }
}

impl DirScan {
    /// Generations a crash left open (`started`, never closed) whose answer is not among the
    /// outputs: what they cost must be asked of the API.
    pub fn orphans(&self) -> Vec<SpendEntry> {
        let answered = self.output_generations();
        self.ledger
            .open
            .iter()
            .filter(|e| {
                e.generation_id
                    .as_ref()
                    .is_some_and(|g| !answered.contains(g))
            })
            .cloned()
            .collect()
    }

    /// Every file read, ledger first.
    pub fn files(&self) -> impl Iterator<Item = &FileScan> {
        std::iter::once(&self.ledger.file).chain(
            self.datasets
                .iter()
                .flat_map(|d| [&d.outputs_file, &d.rejects_file]),
        )
    }

    pub fn outputs(&self) -> u64 {
        self.datasets.iter().map(|d| d.existing.outputs).sum()
    }

    /// Damaged files, and a missing ledger next to outputs.
    pub fn problems(&self) -> Vec<Problem> {
        let mut out: Vec<Problem> = self
            .files()
            .filter_map(|f| {
                f.damage_text().map(|text| Problem::Damaged {
                    path: f.path.clone(),
                    text,
                })
            })
            .collect();
        if self.ledger.entries == 0 && self.ledger.file.damaged == 0 && self.outputs() > 0 {
            out.push(Problem::LedgerMissing {
                path: self.ledger.file.path.clone(),
                outputs: self.outputs(),
            });
        }
        out
    }

    /// What earlier runs spent: the ledger, plus outputs it has not booked.
    pub fn carried(&self) -> Usd {
        let kept = self.datasets.iter().map(|d| d.unbooked).sum::<Usd>();
        // A kept answer whose record's cost was refused is looked up (it is an orphan), not
        // counted at what its row says.
        let refused = (self.refused_kept())
            .filter(|k| !self.ledger.completes.contains(&k.attempt.id))
            .map(|k| k.record.cost_usd.max(Usd::ZERO))
            .sum::<Usd>();
        self.ledger.total + kept - refused
    }

    /// Kept answers whose attempt is open and whose record's cost may not be booked
    /// ([`KeptOpen::cost`]): left to their look-up.
    pub fn refused_kept(&self) -> impl Iterator<Item = &KeptOpen> {
        self.kept_open.iter().filter(|k| k.cost().is_err())
    }

    /// The generations whose answers are kept in the outputs (booked, or to be booked from
    /// their records at the start), less those whose record's cost was refused: an open
    /// attempt among them needs no look-up.
    pub fn output_generations(&self) -> HashSet<&String> {
        let refused: HashSet<&String> = (self.refused_kept())
            .filter_map(|k| k.record.generation_id.as_ref())
            .collect();
        (self.datasets.iter())
            .flat_map(|d| d.existing.generation_ids.iter())
            .filter(|g| !refused.contains(g))
            .collect()
    }
}

/// Reads the ledger, then the files of `datasets`.
pub fn scan_dir(dir: &Path, datasets: &[String]) -> Result<DirScan, ScanError> {
    let ledger = scan_ledger(dir, |_| {})?;
    let mut kept = KeptMatcher::new(&ledger);
    let datasets = datasets
        .iter()
        .map(|d| scan_dataset(dir, d, &ledger.completes, |r| kept.row(d, r)))
        .collect::<Result<_, _>>()?;
    let kept_open = kept.found;
    Ok(DirScan {
        ledger,
        datasets,
        kept_open,
    })
}

mod kept;
mod ledger;
pub use ledger::{KeyBase, LedgerScan, STREAMS_KEPT, scan_ledger};
#[cfg(test)]
mod tests;

use kept::KeptMatcher;
pub use kept::KeptOpen;
