//! The prompt files' marks in the output directory's manifest (`store/prompts/prefix.rs`):
//! each dataset's file is checked against the mark an earlier start recorded (the lines that
//! start counted must still be the file's first lines; lines appended since are this run's to
//! send), and a run records the marks of the files it counted. Within a run the reader checks
//! the file against its own count (`store/prompts/fingerprint.rs`); this covers the time
//! between two runs (reliability-probe-5 P10).

use std::path::Path;

use crate::config::DatasetConfig;
use crate::store::prompts::{MarkCheck, PromptCount, PromptMark};

use super::super::{EngineError, PromptMarks};

/// Refuses dataset `d`'s prompt file when its lines that an earlier start counted (`earlier`)
/// have changed, unless `force` (then a note says so) or the directory holds nothing of the
/// dataset yet (nothing to mix with).
pub(super) fn check(
    dir: &Path,
    d: &DatasetConfig,
    earlier: Option<&PromptMark>,
    counted: &PromptCount,
    force: bool,
) -> Result<Option<String>, EngineError> {
    let Some(mark) = earlier else {
        return Ok(None);
    };
    let MarkCheck::Changed(why) = mark.check(&counted.prefix) else {
        return Ok(None);
    };
    if !super::super::holds_records(dir, std::iter::once(&d.name)) {
        return Ok(None);
    }
    let path = d.prompts.display().to_string();
    let was = if mark.path == path {
        String::new()
    } else {
        format!(" (that run counted {})", mark.path)
    };
    if force {
        return Ok(Some(format!(
            "dataset {}: {path} changed since an earlier run in {}{was}: {why}; taken as it \
             is now (--force)",
            d.name,
            dir.display()
        )));
    }
    Err(EngineError::Input(format!(
        "dataset {}: {path} changed since an earlier run in {}{was}: {why}. A run would \
         answer the file as it is now beside that run's answers, under the same ids, in \
         one dataset. Restore the file (lines appended to it are fine), or write the new \
         prompts to another output_dir; --force takes the file as it is now. Nothing was sent",
        d.name,
        dir.display()
    )))
}

/// Records `now` (the marks of the files this start counted) in `dir`'s manifest, beside
/// those of datasets the config no longer names.
pub(super) fn record(dir: &Path, now: PromptMarks) -> Result<(), EngineError> {
    let path = super::super::manifest_path(dir);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| EngineError::Input(format!("cannot read {}: {e}", path.display())))?;
    let mut m: super::super::Manifest = serde_json::from_str(&text).map_err(|e| {
        EngineError::Input(format!("{}: not a harvest manifest: {e}", path.display()))
    })?;
    let mut marks = m.prompt_files.clone().unwrap_or_default();
    marks.extend(now);
    if m.prompt_files.as_ref() == Some(&marks) {
        return Ok(());
    }
    m.prompt_files = Some(marks);
    super::super::write_manifest(dir, &m)
}
