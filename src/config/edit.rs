//! Edits of an operator's harvest.toml that harvest makes itself (`probe --cancel
//! --write-config`): one key set, the rest of the file kept as written (comments, order,
//! spacing), through `toml_edit`. The value is a TOML value, never text spliced into the file,
//! and the new file is loaded as a config before it replaces the old one (written beside it
//! under a fresh name, then renamed: a crash leaves one or the other).
//!
//! The file stays the operator's (reliability-probe-5 P8): a symlink is written through to its
//! target, the mode, owner and group are kept (a file harvest could not give back to its owner
//! is refused, as is a read-only one), and so are a byte-order mark and CRLF line endings. The
//! list is merged, not replaced: entries already there keep their place and comments, and the
//! operator's comment lines above the key stay (harvest's own earlier note is replaced).

use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why the config could not be edited.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: not TOML: {detail}")]
    Parse { path: String, detail: String },
    #[error("{path}: the edited config does not load: {detail}")]
    Invalid { path: String, detail: String },
    #[error("{path}: {why}; nothing was changed (the list is printed above: add it by hand)")]
    Refused { path: String, why: String },
}

/// What begins each comment line harvest writes above the key: the lines an edit replaces.
const OWN_NOTE: &str = "# harvest probe --cancel";

/// The byte-order mark some editors put first.
const BOM: &str = "\u{feff}";

/// Sets the top-level `cancel_stops_billing` of the config at `path` so that it holds exactly
/// `list`, keeping the entries already there (in place, with their comments) and adding the
/// others at the end, with `note` (harvest's own lines, each written as a comment) above it.
pub fn set_cancel_stops_billing(
    path: &Path,
    list: &[String],
    note: &[String],
) -> Result<(), EditError> {
    let shown = path.display().to_string();
    let io = |source| EditError::Io {
        path: shown.clone(),
        source,
    };
    // A link is written through: the file the operator keeps (in dotfiles, say) is the one
    // that changes, and the link stays a link.
    let target = std::fs::canonicalize(path).map_err(io)?;
    let meta = std::fs::metadata(&target).map_err(io)?;
    let refuse = |why: String| EditError::Refused {
        path: shown.clone(),
        why,
    };
    if !meta.is_file() {
        return Err(refuse("not a regular file".into()));
    }
    if meta.permissions().readonly()
        || rustix::fs::access(&target, rustix::fs::Access::WRITE_OK).is_err()
    {
        return Err(refuse(format!(
            "read-only (mode {:o}): harvest does not replace a file it may not write",
            meta.mode() & 0o7777
        )));
    }
    let raw = std::fs::read_to_string(&target).map_err(io)?;
    let bom = raw.starts_with(BOM);
    let body = raw.strip_prefix(BOM).unwrap_or(&raw);
    let crlf = body.contains("\r\n");
    let mut doc: toml_edit::DocumentMut =
        body.parse()
            .map_err(|e: toml_edit::TomlError| EditError::Parse {
                path: shown.clone(),
                detail: e.to_string(),
            })?;
    set_list(&mut doc, list, note);
    let mut text = doc.to_string();
    // Loaded as a config (as if at `path`: relative prompt paths resolve as they will) before
    // it replaces anything.
    if let Err(e) = super::Config::parse(&text, path) {
        return Err(EditError::Invalid {
            path: shown,
            detail: e.to_string(),
        });
    }
    if crlf {
        text = text.replace("\r\n", "\n").replace('\n', "\r\n");
    }
    if bom {
        text.insert_str(0, BOM);
    }
    replace_file(&target, &meta, text.as_bytes()).map_err(|e| match e {
        Replace::Io(e) => io(e),
        Replace::Owner(why) => refuse(why),
    })
}

/// The key set to `list` in `doc`: merged into an array already there, the note's lines put
/// in place of harvest's earlier ones below the operator's own comments.
fn set_list(doc: &mut toml_edit::DocumentMut, list: &[String], note: &[String]) {
    let existing = doc
        .get_mut("cancel_stops_billing")
        .and_then(toml_edit::Item::as_array_mut);
    match existing {
        Some(array) => merge(array, list),
        None => {
            let mut array = toml_edit::Array::new();
            for tag in list {
                array.push(tag.as_str());
            }
            doc["cancel_stops_billing"] = toml_edit::value(array);
        }
    }
    if let Some(mut key) = doc.as_table_mut().key_mut("cancel_stops_billing") {
        let before = (key.leaf_decor().prefix())
            .and_then(|p| p.as_str())
            .unwrap_or("")
            .to_string();
        // The operator's lines stay; harvest's own earlier note (and the blank run after it)
        // is replaced. Each note line is harvest's text, kept to one line all the same.
        let mut prefix: String = (before.split_inclusive('\n'))
            .filter(|l| !l.trim_start().starts_with(OWN_NOTE))
            .collect();
        if !prefix.is_empty() && !prefix.ends_with('\n') {
            prefix.push('\n');
        }
        for line in note {
            let line = line.replace(['\n', '\r'], " ");
            prefix.push_str(&format!("{OWN_NOTE}: {line}\n"));
        }
        key.leaf_decor_mut().set_prefix(prefix);
    }
}

/// `array` made to hold exactly `list`: the entries it has keep their place and comments, the
/// others are added at the end laid out as its last entry is, and a removed entry's own
/// comments go with it while the comment on the line before it (its predecessor's) stays.
fn merge(array: &mut toml_edit::Array, list: &[String]) {
    let have: Vec<String> = (array.iter())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    // The layout of an entry on its own line (or after a space), without its comments.
    let layout = (array.iter().last())
        .and_then(|v| v.decor().prefix()?.as_str().map(str::to_string))
        .map_or(" ".to_string(), |p| match p.rfind('\n') {
            Some(i) if p[i..].trim().is_empty() => p[i..].to_string(),
            _ => " ".to_string(),
        });
    for tag in list.iter().filter(|t| !have.contains(t)) {
        let mut v = toml_edit::Value::from(tag.as_str());
        v.decor_mut().set_prefix(layout.clone());
        array.push_formatted(v);
    }
    // A prefix's first line is the comment after the entry before it (on that entry's line).
    let first_line = |p: &str| {
        p.find('\n')
            .map(|i| (p[..=i].to_string(), p[i + 1..].to_string()))
    };
    let mut i = 0;
    while i < array.len() {
        let keep = (array.get(i).and_then(toml_edit::Value::as_str))
            .is_some_and(|t| list.iter().any(|l| l == t));
        if keep {
            i += 1;
            continue;
        }
        let gone = array.remove(i);
        let gone_prefix = gone.decor().prefix().and_then(|p| p.as_str()).unwrap_or("");
        let Some((before, _)) = first_line(gone_prefix) else {
            // One line: the next entry takes the removed one's spacing (none when first).
            if let Some(next) = array.get_mut(i) {
                next.decor_mut().set_prefix(gone_prefix.to_string());
            }
            continue;
        };
        // What followed the removed entry now follows its predecessor's comment.
        match array.get_mut(i) {
            Some(next) => {
                let p = (next.decor().prefix().and_then(|p| p.as_str()))
                    .unwrap_or("")
                    .to_string();
                let rest = first_line(&p).map_or(p.clone(), |(_, rest)| rest);
                next.decor_mut().set_prefix(before + &rest);
            }
            None => {
                let t = array.trailing().as_str().unwrap_or("").to_string();
                let rest = first_line(&t).map_or(t.clone(), |(_, rest)| rest);
                array.set_trailing(before + &rest);
            }
        }
    }
}

enum Replace {
    Io(std::io::Error),
    Owner(String),
}

/// Writes `bytes` beside `target` with its mode, owner and group, then renames it over
/// `target`.
fn replace_file(target: &Path, meta: &std::fs::Metadata, bytes: &[u8]) -> Result<(), Replace> {
    let dir = target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = target
        .file_name()
        .map_or("harvest.toml".into(), |n| n.to_string_lossy());
    let tmp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .map_err(Replace::Io)?;
        f.set_permissions(meta.permissions()).map_err(Replace::Io)?;
        let (uid, gid) = (meta.uid(), meta.gid());
        let mine = std::fs::metadata(&tmp).map_err(Replace::Io)?;
        if (mine.uid(), mine.gid()) != (uid, gid) {
            rustix::fs::fchown(
                &f,
                Some(rustix::fs::Uid::from_raw(uid)),
                Some(rustix::fs::Gid::from_raw(gid)),
            )
            .map_err(|e| {
                Replace::Owner(format!(
                    "owned by uid {uid} gid {gid}, and harvest could not give the edited file \
                     the same owner ({e})"
                ))
            })?;
            // chown clears the set-id bits: the mode once more.
            f.set_permissions(meta.permissions()).map_err(Replace::Io)?;
        }
        f.write_all(bytes).map_err(Replace::Io)?;
        f.sync_all().map_err(Replace::Io)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Replace::Io(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn project() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("p.jsonl"), "{\"prompt\": \"q\"}\n").expect("prompts");
        let path = dir.path().join("harvest.toml");
        (dir, path)
    }

    fn list(tags: &[&str]) -> Vec<String> {
        tags.iter().map(|t| t.to_string()).collect()
    }

    #[test]
    fn the_list_is_set_and_the_rest_of_the_file_kept() {
        let (dir, path) = project();
        let before = "# my job\nmodel = \"moonshotai/kimi-k2.5\"  # the target\nbudget_usd = 5.0\n\
                      cancel_stops_billing = [\"old\"]\n\n[request]\nmax_tokens = 100 # short\n\n\
                      [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
        std::fs::write(&path, before).expect("write");
        let tags = list(&["chutes/int4", "novita/int4"]);
        set_cancel_stops_billing(&path, &tags, &["measured".into()]).expect("set");
        let after = std::fs::read_to_string(&path).expect("read");
        assert!(after.contains("# my job\n"), "{after}");
        assert!(
            after.contains("model = \"moonshotai/kimi-k2.5\"  # the target\n"),
            "{after}"
        );
        assert!(after.contains("max_tokens = 100 # short\n"), "{after}");
        assert!(
            after.contains(
                "# harvest probe --cancel: measured\ncancel_stops_billing = [\"chutes/int4\", \"novita/int4\"]\n"
            ),
            "{after}"
        );
        let cfg = crate::config::Config::load(&path).expect("loads");
        assert_eq!(cfg.cancel_stops_billing, Some(tags));
        // Added where there was none: before the first table, where a top-level key belongs.
        let plain = "model = \"m\"\n[request]\nmax_tokens = 5\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
        std::fs::write(&path, plain).expect("write");
        set_cancel_stops_billing(&path, &list(&["a/b"]), &["n".into()]).expect("set");
        let cfg = crate::config::Config::load(&path).expect("loads");
        assert_eq!(cfg.cancel_stops_billing, Some(list(&["a/b"])));
        assert_eq!(cfg.request.max_tokens, 5);
        // A config that does not parse is left as it was.
        std::fs::write(&path, "model = \n").expect("write");
        assert!(set_cancel_stops_billing(&path, &[], &[]).is_err());
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "model = \n");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            2,
            "no temp file left"
        );
    }

    /// reliability-probe-5 P8: the operator's comments above the key and inside the array
    /// stay, entries stay in place, harvest's earlier note is replaced (not stacked), and the
    /// file's BOM and CRLF line endings are kept.
    #[test]
    fn the_operators_comments_entries_and_encoding_stay() {
        let (_dir, path) = project();
        let before = "\u{feff}model = \"m\"\r\n# my own note\r\n# second line\r\n\
                      cancel_stops_billing = [\r\n  \"fireworks\", # checked by hand\r\n  \"chutes/int4\",\r\n]\r\n\
                      [[dataset]]\r\nname = \"A\"\r\nprompts = \"p.jsonl\"\r\n";
        std::fs::write(&path, before).expect("write");
        let tags = list(&["fireworks", "novita/int4"]);
        set_cancel_stops_billing(&path, &tags, &["first".into()]).expect("set");
        set_cancel_stops_billing(&path, &tags, &["second".into(), "more".into()]).expect("again");
        let after = std::fs::read_to_string(&path).expect("read");
        assert!(after.starts_with('\u{feff}'), "the BOM kept: {after:?}");
        assert!(
            !after.replace("\r\n", "").contains('\n'),
            "every line ends in CRLF: {after:?}"
        );
        assert!(
            after.contains("# my own note\r\n# second line\r\n# harvest probe --cancel: second\r\n# harvest probe --cancel: more\r\ncancel_stops_billing"),
            "{after:?}"
        );
        assert!(
            !after.contains("first"),
            "the earlier note replaced: {after:?}"
        );
        assert!(
            after.contains("\"fireworks\", # checked by hand"),
            "{after:?}"
        );
        assert!(!after.contains("chutes/int4"), "{after:?}");
        let cfg = crate::config::Config::parse(after.trim_start_matches('\u{feff}'), &path)
            .expect("loads");
        assert_eq!(cfg.cancel_stops_billing, Some(tags));
    }

    /// A symlinked config is written through to its target; a read-only one is refused and
    /// left as it was; mode (and, as root, owner) stay.
    #[test]
    fn the_file_stays_the_operators() {
        let (dir, real) = project();
        let text = "model = \"m\"\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
        std::fs::write(&real, text).expect("write");
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&real, &link).expect("link");
        set_cancel_stops_billing(&link, &list(&["a/b"]), &[]).expect("through the link");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("meta")
                .file_type()
                .is_symlink(),
            "the link stays a link"
        );
        assert!(
            std::fs::read_to_string(&real)
                .expect("read")
                .contains("a/b")
        );
        let mode = std::fs::metadata(&real).expect("meta").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o640);
        // Read-only: refused, unchanged.
        std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o444)).expect("chmod");
        let before = std::fs::read(&real).expect("read");
        let err = set_cancel_stops_billing(&real, &list(&["c/d"]), &[]).expect_err("read-only");
        assert!(err.to_string().contains("read-only (mode 444)"), "{err}");
        assert_eq!(std::fs::read(&real).expect("read"), before);
        // Another user's file (when the test may hand one over: as root) keeps its owner.
        if rustix::process::geteuid().is_root() {
            std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o644)).expect("chmod");
            std::os::unix::fs::chown(&real, Some(65534), Some(65534)).expect("chown");
            set_cancel_stops_billing(&real, &list(&["c/d"]), &[]).expect("set");
            let m = std::fs::metadata(&real).expect("meta");
            assert_eq!(
                (m.uid(), m.gid(), m.permissions().mode() & 0o7777),
                (65534, 65534, 0o644)
            );
        }
    }
}
