//! A second chance: rejects (`--retry-rejects`) and answers cut at `max_tokens`
//! (`--retry-truncated`) are moved out of the current files into `<file stem>.superseded.jsonl`
//! so that their prompts are pending again; the new outcome is then the one current entry of
//! the id. No reader of the output directory reads a `.superseded` file as current.
//!
//! Crash safety: the picked lines are appended to the superseded file and synced first, then
//! the kept lines replace the original atomically (a temporary file renamed over it). A crash
//! in between leaves a line in both (the next `--retry-*` moves it again; the archive may hold
//! it twice), never in neither.
//!
//! A paid outcome is never left without a current line: when the run that superseded it ends
//! without a new one (a budget stop, Ctrl-C, a systematic stop), and at every start (after a
//! crash), [`restore_unanswered`] puts the latest superseded line of each id that has no current
//! outcome back (reliability-probe-3 D4: a budget stop left 22 of 300 answers current).

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::repair::RepairError;
use super::scan::{self, LineClass};

/// `A.jsonl` → `A.superseded.jsonl`; `A.rejects.jsonl` → `A.rejects.superseded.jsonl`.
pub(crate) fn superseded_path(path: &Path) -> PathBuf {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let stem = name.strip_suffix(".jsonl").unwrap_or(name);
    path.with_file_name(format!("{stem}.superseded.jsonl"))
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> RepairError + '_ {
    move |source| RepairError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Moves each line of `path` (read as `T`) that `pick` chooses to the superseded file, keeping
/// every other byte (damaged and torn lines included) in place. Returns how many moved.
pub(crate) fn supersede<T: DeserializeOwned>(
    path: &Path,
    mut pick: impl FnMut(&T) -> bool,
) -> Result<u64, RepairError> {
    let src = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(path)(e)),
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.supersede.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("file")
    ));
    let mut input = BufReader::with_capacity(1 << 20, src);
    let mut kept =
        BufWriter::with_capacity(1 << 20, super::create_replacement(&tmp).map_err(io(&tmp))?);
    let spath = superseded_path(path);
    let mut moved_to: Option<BufWriter<File>> = None;
    let mut moved = 0u64;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = input.read_until(b'\n', &mut buf).map_err(io(path))?;
        if n == 0 {
            break;
        }
        let chosen = match scan::classify::<T>(&buf) {
            LineClass::Good(v) => pick(&v),
            _ => false,
        };
        if chosen {
            let w = match moved_to.as_mut() {
                Some(w) => w,
                None => moved_to.insert(BufWriter::new(
                    super::no_follow(OpenOptions::new().create(true).append(true))
                        .open(&spath)
                        .map_err(io(&spath))?,
                )),
            };
            w.write_all(&buf).map_err(io(&spath))?;
            moved += 1;
        } else {
            kept.write_all(&buf).map_err(io(&tmp))?;
        }
    }
    if moved == 0 {
        drop(kept);
        let _ = std::fs::remove_file(&tmp);
        return Ok(0);
    }
    if let Some(w) = moved_to {
        let f = w.into_inner().map_err(|e| io(&spath)(e.into_error()))?;
        f.sync_all().map_err(io(&spath))?;
    }
    super::repair::replace_with(kept, &tmp, path)?;
    Ok(moved)
}

/// Just the id of a line.
#[derive(serde::Deserialize)]
struct IdOnly {
    id: String,
}

/// The ids of the good lines of `path` (none when it does not exist).
fn ids_of(path: &Path) -> Result<std::collections::HashSet<String>, RepairError> {
    let mut ids = std::collections::HashSet::new();
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ids),
        Err(e) => return Err(io(path)(e)),
    };
    let mut input = BufReader::with_capacity(1 << 20, f);
    let mut buf = Vec::new();
    while input.read_until(b'\n', &mut buf).map_err(io(path))? > 0 {
        if let LineClass::Good(r) = scan::classify::<IdOnly>(&buf) {
            ids.insert(r.id);
        }
        buf.clear();
    }
    Ok(ids)
}

/// Puts back into `path` the latest superseded line of every id that has no current line in
/// `path` nor in `other` (the dataset's other file: its rejects for its outputs, and the
/// reverse): appended, then synced. Returns how many came back.
pub(crate) fn restore_unanswered(path: &Path, other: &Path) -> Result<u64, RepairError> {
    let spath = superseded_path(path);
    let archive = match File::open(&spath) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io(&spath)(e)),
    };
    let mut current = ids_of(path)?;
    current.extend(ids_of(other)?);
    // The latest line of each id without a current outcome, in archive order.
    let mut latest: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut input = BufReader::with_capacity(1 << 20, archive);
    let mut buf = Vec::new();
    while input.read_until(b'\n', &mut buf).map_err(io(&spath))? > 0 {
        if let LineClass::Good(r) = scan::classify::<IdOnly>(&buf)
            && !current.contains(&r.id)
        {
            latest.insert(r.id, lines.len());
            lines.push(std::mem::take(&mut buf));
        }
        buf.clear();
    }
    if latest.is_empty() {
        return Ok(0);
    }
    let mut keep: Vec<usize> = latest.into_values().collect();
    keep.sort_unstable();
    let mut out = BufWriter::new(
        super::no_follow(OpenOptions::new().create(true).append(true))
            .open(path)
            .map_err(io(path))?,
    );
    for &i in &keep {
        out.write_all(&lines[i]).map_err(io(path))?;
    }
    let f = out.into_inner().map_err(|e| io(path)(e.into_error()))?;
    f.sync_all().map_err(io(path))?;
    Ok(keep.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Row {
        id: String,
    }

    #[test]
    fn picked_lines_move_and_every_other_byte_stays() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("A.rejects.jsonl");
        std::fs::write(
            &p,
            "{\"id\":\"a\"}\nnot json\n{\"id\":\"b\"}\n{\"id\":\"c\"}\n{\"id\"",
        )
        .expect("write");
        let n = supersede::<Row>(&p, |r| r.id != "b").expect("supersede");
        assert_eq!(n, 2);
        assert_eq!(
            std::fs::read_to_string(&p).expect("read"),
            "not json\n{\"id\":\"b\"}\n{\"id\""
        );
        let s = dir.path().join("A.rejects.superseded.jsonl");
        assert_eq!(superseded_path(&p), s);
        assert_eq!(
            std::fs::read_to_string(&s).expect("read"),
            "{\"id\":\"a\"}\n{\"id\":\"c\"}\n"
        );
        // Again: nothing left to move, nothing changes; a missing file is nothing to move.
        assert_eq!(supersede::<Row>(&p, |r| r.id != "b").expect("again"), 0);
        assert_eq!(
            supersede::<Row>(&dir.path().join("none.jsonl"), |_| true).expect("none"),
            0
        );
        assert_eq!(
            superseded_path(Path::new("out/A.jsonl")),
            Path::new("out/A.superseded.jsonl")
        );
    }

    /// A retry that bought nothing leaves the old outcome current again; one that bought a new
    /// answer (or a new reject, in the other file) leaves the archive alone.
    #[test]
    fn unanswered_ids_come_back_latest_line_first_bought_ones_stay_archived() {
        let dir = tempfile::tempdir().expect("tmp");
        let out = dir.path().join("A.jsonl");
        let rejects = dir.path().join("A.rejects.jsonl");
        std::fs::write(&out, "{\"id\":\"kept\"}\n{\"id\":\"new\",\"v\":2}\n").expect("write");
        std::fs::write(&rejects, "{\"id\":\"now-rejected\"}\n").expect("write");
        std::fs::write(
            superseded_path(&out),
            "{\"id\":\"lost\",\"v\":1}\n{\"id\":\"new\",\"v\":1}\n{\"id\":\"lost\",\"v\":2}\n\
             {\"id\":\"now-rejected\"}\nnot json\n{\"id\":\"also-lost\"}\n",
        )
        .expect("archive");
        assert_eq!(restore_unanswered(&out, &rejects).expect("restore"), 2);
        assert_eq!(
            std::fs::read_to_string(&out).expect("read"),
            "{\"id\":\"kept\"}\n{\"id\":\"new\",\"v\":2}\n{\"id\":\"lost\",\"v\":2}\n{\"id\":\"also-lost\"}\n"
        );
        // Again: every id is current, nothing moves; no archive, nothing to do.
        assert_eq!(restore_unanswered(&out, &rejects).expect("again"), 0);
        assert_eq!(restore_unanswered(&rejects, &out).expect("none"), 0);
    }
}
