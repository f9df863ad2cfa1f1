//! The side file of multi-turn rows in progress, `turns.jsonl` (`turns = "all"`): each
//! assistant turn the model finished before its row was whole, one line each, so that a run
//! stopped mid-row (a crash, a drain, the dollar budget) does not throw away the turns it paid
//! for: the next run continues each row from its last finished turn (reliability probe 3,
//! D14). A row's line in its dataset's outputs, once written, supersedes its turns here.
//!
//! The file is a cache of paid work, not a record of money (the ledger is): a line that does
//! not parse (a torn tail after `kill -9`) costs at most one turn generated again. At start the
//! file is read once and rewritten without what no longer serves (finished rows, damage,
//! turns superseded by a newer chain).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

pub(crate) use super::output::{TURNS_FILE, TurnLine, turns_path};

/// Rows in progress of one dataset: id → its finished turns, in order from the first.
pub(crate) type InProgress = HashMap<String, Vec<TurnLine>>;

/// What the start read of the file.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    /// By dataset name.
    pub rows: HashMap<String, InProgress>,
    /// Lines left out: of finished rows, superseded, out of order, or unreadable.
    pub dropped: usize,
    /// Lines that did not parse.
    pub unreadable: usize,
}

impl Loaded {
    /// Rows and turns kept.
    pub(crate) fn counts(&self) -> (usize, usize) {
        let rows = self.rows.values().map(HashMap::len).sum();
        let turns = self
            .rows
            .values()
            .flat_map(|m| m.values())
            .map(Vec::len)
            .sum();
        (rows, turns)
    }
}

/// Reads `dir`'s turns file (none: nothing in progress), keeping for each row not `finished`
/// the chain of turns from its first: a turn numbered `k` replaces the chain from `k` on (a
/// later run generated it again), a turn past the chain's end is left out. When anything was
/// left out, the file is rewritten with what was kept (a temporary file renamed over it).
/// `rewrite`: false for `run --check`, which changes nothing.
pub(crate) fn load(
    dir: &Path,
    finished: impl Fn(&str, &str) -> bool,
    rewrite: bool,
) -> std::io::Result<Loaded> {
    let path = turns_path(dir);
    let file = match super::no_follow(std::fs::OpenOptions::new().read(true)).open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(e),
    };
    let mut loaded = Loaded::default();
    let mut lines = 0usize;
    for line in BufReader::new(file).split(b'\n') {
        let line = line?;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        lines += 1;
        let Ok(t) = serde_json::from_slice::<TurnLine>(&line) else {
            loaded.unreadable += 1;
            continue;
        };
        if finished(&t.dataset, &t.id) {
            continue;
        }
        let chain = (loaded.rows.entry(t.dataset.clone()).or_default())
            .entry(t.id.clone())
            .or_default();
        if t.turn <= chain.len() {
            chain.truncate(t.turn);
            chain.push(t);
        }
    }
    loaded.rows.retain(|_, rows| {
        rows.retain(|_, chain| !chain.is_empty());
        !rows.is_empty()
    });
    let (_, kept) = loaded.counts();
    loaded.dropped = lines - kept;
    if loaded.dropped > 0 && rewrite {
        rewrite_kept(&path, &loaded)?;
    }
    Ok(loaded)
}

/// Writes the kept turns to a temporary file and renames it over `path`.
fn rewrite_kept(path: &Path, loaded: &Loaded) -> std::io::Result<()> {
    let tmp = path.with_file_name(format!(".{TURNS_FILE}.tmp"));
    {
        let f = super::create_replacement(&tmp)?;
        let mut w = BufWriter::new(f);
        for t in loaded.rows.values().flat_map(|m| m.values()).flatten() {
            serde_json::to_writer(&mut w, t).map_err(std::io::Error::other)?;
            w.write_all(b"\n")?;
        }
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::output::TurnRecord;

    fn line(dataset: &str, id: &str, turn: usize, content: &str) -> String {
        let t = TurnLine {
            dataset: dataset.into(),
            id: id.into(),
            turn,
            conversation: "h0".into(),
            content: content.into(),
            reasoning_content: Some("thought".into()),
            record: TurnRecord {
                provider: "Chutes".into(),
                endpoint_tag: Some("chutes/int4".into()),
                finish_reason: "stop".into(),
                usage: Default::default(),
                cost_usd: crate::domain::Usd::from_f64(0.001),
                attempts: 1,
                generation_id: Some(format!("gen-{id}-{turn}")),
                ttft_ms: None,
                latency_ms: 10,
                inline_think: false,
                cost_estimated: false,
            },
        };
        serde_json::to_string(&t).expect("json") + "\n"
    }

    fn contents(l: &Loaded, d: &str, id: &str) -> Vec<String> {
        l.rows
            .get(d)
            .and_then(|m| m.get(id))
            .map_or(Vec::new(), |c| {
                c.iter().map(|t| t.content.clone()).collect()
            })
    }

    #[test]
    fn chains_of_unfinished_rows_are_kept_and_the_rest_rewritten_away() {
        let dir = tempfile::tempdir().expect("tmp");
        let text = [
            line("A", "r1", 0, "r1 first"),
            line("A", "r2", 0, "r2 first"),
            line("A", "r1", 1, "r1 second"),
            // Finished since: its output line supersedes these.
            line("A", "done", 0, "x"),
            line("A", "done", 1, "y"),
            // A later run generated r2's first turn again: the newer chain wins.
            line("A", "r2", 0, "r2 first again"),
            // Past the end of its chain (turn 1 is missing): left out.
            line("B", "r3", 2, "r3 third"),
            line("B", "r4", 0, "r4 first"),
            // A torn tail after kill -9.
            "{\"dataset\":\"B\",\"id\":\"r4\",\"tu".to_string(),
        ]
        .concat();
        std::fs::write(turns_path(dir.path()), text).expect("write");
        let loaded = load(dir.path(), |_, id| id == "done", true).expect("load");
        assert_eq!(contents(&loaded, "A", "r1"), ["r1 first", "r1 second"]);
        assert_eq!(contents(&loaded, "A", "r2"), ["r2 first again"]);
        assert!(contents(&loaded, "A", "done").is_empty());
        assert!(contents(&loaded, "B", "r3").is_empty());
        assert_eq!(contents(&loaded, "B", "r4"), ["r4 first"]);
        assert_eq!(loaded.counts(), (3, 4));
        assert_eq!((loaded.dropped, loaded.unreadable), (5, 1));
        // The file now holds exactly what was kept; a second read drops nothing.
        let again = load(dir.path(), |_, id| id == "done", true).expect("again");
        assert_eq!((again.counts(), again.dropped), ((3, 4), 0));
        assert_eq!(contents(&again, "A", "r1"), ["r1 first", "r1 second"]);
    }

    #[test]
    fn no_file_is_nothing_in_progress() {
        let dir = tempfile::tempdir().expect("tmp");
        let loaded = load(dir.path(), |_, _| false, true).expect("load");
        assert_eq!((loaded.counts(), loaded.dropped), ((0, 0), 0));
        assert!(!turns_path(dir.path()).exists());
    }
}
