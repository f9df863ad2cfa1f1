//! A second chance: rejects (`--retry-rejects`) and answers cut at `max_tokens`
//! (`--retry-truncated`) are moved out of the current files into `<file stem>.superseded.jsonl`
//! so that their prompts are pending again; the new outcome is then the one current entry of
//! the id. No reader of the output directory reads a `.superseded` file as current.
//!
//! Crash safety: the picked lines are appended to the superseded file and synced first, then
//! the kept lines replace the original atomically (a temporary file renamed over it). A crash
//! in between leaves a line in both (the next `--retry-*` moves it again; the archive may hold
//! it twice), never in neither; after the rename, the prompt is pending, and any later run
//! (with the flag or not) sends it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

use super::repair::RepairError;
use super::scan::{self, LineClass};

/// `A.jsonl` → `A.superseded.jsonl`; `A.rejects.jsonl` → `A.rejects.superseded.jsonl`.
pub fn superseded_path(path: &Path) -> PathBuf {
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
pub fn supersede<T: DeserializeOwned>(
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
    let mut kept = BufWriter::with_capacity(1 << 20, File::create(&tmp).map_err(io(&tmp))?);
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
                    OpenOptions::new()
                        .create(true)
                        .append(true)
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
}
