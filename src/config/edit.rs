//! Edits of an operator's harvest.toml that harvest makes itself (`probe --cancel
//! --write-config`): one key set, the rest of the file kept as written (comments, order,
//! spacing), through `toml_edit`. The value is a TOML value, never text spliced into the file,
//! and the new file is loaded as a config before it replaces the old one (written beside it
//! under a fresh name, then renamed: a crash leaves one or the other).

use std::io::Write;
use std::path::Path;

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
}

/// Sets the top-level `cancel_stops_billing` of the config at `path` to `list`, with a comment
/// saying where it came from.
pub fn set_cancel_stops_billing(path: &Path, list: &[String], note: &str) -> Result<(), EditError> {
    let shown = path.display().to_string();
    let io = |source| EditError::Io {
        path: shown.clone(),
        source,
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let mut doc: toml_edit::DocumentMut =
        text.parse()
            .map_err(|e: toml_edit::TomlError| EditError::Parse {
                path: shown.clone(),
                detail: e.to_string(),
            })?;
    let mut array = toml_edit::Array::new();
    for tag in list {
        array.push(tag.as_str());
    }
    doc["cancel_stops_billing"] = toml_edit::value(array);
    if let Some(mut key) = doc.as_table_mut().key_mut("cancel_stops_billing") {
        // One comment line: `note` is harvest's own text, kept to one line all the same.
        let note = note.replace(['\n', '\r'], " ");
        key.leaf_decor_mut().set_prefix(format!("# {note}\n"));
    }
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map_or("harvest.toml".into(), |n| n.to_string_lossy());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        if let Ok(m) = std::fs::metadata(path) {
            f.set_permissions(m.permissions())?;
        }
        f.write_all(doc.to_string().as_bytes())?;
        f.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    if let Err(e) = super::Config::load(&tmp) {
        let _ = std::fs::remove_file(&tmp);
        return Err(EditError::Invalid {
            path: shown,
            detail: e.to_string(),
        });
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_set_and_the_rest_of_the_file_kept() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("harvest.toml");
        let before = "# my job\nmodel = \"moonshotai/kimi-k2.5\"  # the target\nbudget_usd = 5.0\n\
                      cancel_stops_billing = [\"old\"]\n\n[request]\nmax_tokens = 100 # short\n\n\
                      [[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
        std::fs::write(&path, before).expect("write");
        std::fs::write(dir.path().join("p.jsonl"), "{\"prompt\": \"q\"}\n").expect("prompts");
        let list = vec!["chutes/int4".to_string(), "novita/int4".to_string()];
        set_cancel_stops_billing(&path, &list, "measured by harvest probe --cancel").expect("set");
        let after = std::fs::read_to_string(&path).expect("read");
        assert!(after.contains("# my job\n"), "{after}");
        assert!(
            after.contains("model = \"moonshotai/kimi-k2.5\"  # the target\n"),
            "{after}"
        );
        assert!(after.contains("max_tokens = 100 # short\n"), "{after}");
        assert!(
            after.contains(
                "# measured by harvest probe --cancel\ncancel_stops_billing = [\"chutes/int4\", \"novita/int4\"]\n"
            ),
            "{after}"
        );
        let cfg = crate::config::Config::load(&path).expect("loads");
        assert_eq!(cfg.cancel_stops_billing, Some(list));
        // Added where there was none: before the first table, where a top-level key belongs.
        let plain = "model = \"m\"\n[request]\nmax_tokens = 5\n[[dataset]]\nname = \"A\"\nprompts = \"p.jsonl\"\n";
        std::fs::write(&path, plain).expect("write");
        set_cancel_stops_billing(&path, &["a/b".into()], "n").expect("set");
        let cfg = crate::config::Config::load(&path).expect("loads");
        assert_eq!(cfg.cancel_stops_billing, Some(vec!["a/b".to_string()]));
        assert_eq!(cfg.request.max_tokens, 5);
        // A config that does not parse is left as it was.
        std::fs::write(&path, "model = \n").expect("write");
        assert!(set_cancel_stops_billing(&path, &[], "n").is_err());
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "model = \n");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            2,
            "no temp file left"
        );
    }
}
