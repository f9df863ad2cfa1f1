//! Which parts of harvest may use which. The engine (its pure core and the driver that runs
//! it) sits above the parts it drives: the store (outputs, ledger, scans), the wire client
//! (`openrouter`), the simulator and the config. Those never reach up into the engine, so a
//! rule about money or answers has one home, in the engine, and the store only reads and
//! appends (issue #52: the store's start booking once imported the core's answer rule, the
//! one import upward, and made a file circle). Checked on the source: a `use` of
//! `crate::engine` below it fails here.

#![cfg(test)]

use std::path::{Path, PathBuf};

/// The parts below the engine, as folders of `src/`.
const BELOW_THE_ENGINE: [&str; 4] = ["store", "openrouter", "sim", "config"];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, into: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, into);
        } else if path.extension().is_some_and(|x| x == "rs") {
            into.push(path);
        }
    }
}

#[test]
fn nothing_below_the_engine_uses_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for part in BELOW_THE_ENGINE {
        sources(&src.join(part), &mut files);
    }
    assert!(
        files.len() > 40,
        "the parts' files were found: {}",
        files.len()
    );
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains("crate::engine") || code.contains("super::engine") {
                let at = f.strip_prefix(&src).unwrap_or(f);
                found.push(format!("src/{}:{}: {}", at.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the store, the wire client, the simulator and the config use nothing of the \
         engine's: {found:#?}"
    );
}
