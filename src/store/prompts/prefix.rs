//! A prompt file's lines as a run read them, as one hash kept across runs: the output
//! directory's manifest records it ([`PromptMark`]), and the next start's count checks that
//! the lines that run read are still the file's first lines. A file rewritten between two runs
//! (same ids, new text) would otherwise be taken as it is, and one dataset would hold answers
//! to two files under one set of ids (reliability-probe-5 P10). Lines appended since are
//! the next run's to read, as within a run.
//!
//! Not the within-run check ([`super::fingerprint`]): that one keeps a hash per 64 KiB block
//! (1.3 MB for a 10 GB file, too much for a manifest) made with std's hasher, whose output
//! may change between Rust releases. This one is XXH64 (a published algorithm, seed 0) over
//! the line bytes the count read (decompressed ones, for a compressed file), and the count
//! also keeps its value at the earlier run's length, so that a file that only grew is
//! checked on the bytes that run read.

use std::hash::Hasher;

use twox_hash::XxHash64;

/// What an output directory's manifest records of a dataset's prompt file: the lines the
/// run's count read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PromptMark {
    /// The file as the config named it, for messages (a file moved with its lines unchanged
    /// is the same file).
    pub path: String,
    /// The bytes of lines read, and how many lines they hold.
    pub bytes: u64,
    pub lines: u64,
    /// XXH64 (seed 0) of those bytes, as 16 hex digits.
    pub xxh64: String,
}

/// The count's hash of the lines it read, and its value at an earlier run's length.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixRead {
    pub bytes: u64,
    pub lines: u64,
    pub hash: u64,
    /// At the earlier run's length, when the count was asked to check one and the file
    /// reaches it.
    pub at_earlier: Option<AtEarlier>,
}

/// The count at the earlier run's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtEarlier {
    pub hash: u64,
    /// The line that reaches the length was longer than a line ending past it: the earlier
    /// run's last line (read with no line ending) has more text on it now.
    pub line_extended: bool,
}

/// How the file now stands against a [`PromptMark`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MarkCheck {
    /// The lines the earlier run read, and `appended` bytes after them.
    Kept { appended: u64 },
    /// Not those lines: what differs, for the operator.
    Changed(String),
}

impl PromptMark {
    /// The mark of a count of the file at `path`.
    pub fn of(path: &str, read: &PrefixRead) -> Self {
        PromptMark {
            path: path.to_string(),
            bytes: read.bytes,
            lines: read.lines,
            xxh64: format!("{:016x}", read.hash),
        }
    }

    /// Whether a count (asked to check at `self.bytes`) read the lines this mark records.
    pub fn check(&self, now: &PrefixRead) -> MarkCheck {
        let read_before = format!(
            "the {} line{} ({} bytes) that run counted",
            crate::domain::group_thousands(self.lines),
            if self.lines == 1 { "" } else { "s" },
            crate::domain::group_thousands(self.bytes)
        );
        if now.bytes < self.bytes {
            return MarkCheck::Changed(format!(
                "it is shorter than {read_before}: {} bytes of lines now",
                crate::domain::group_thousands(now.bytes)
            ));
        }
        let Some(at) = now.at_earlier else {
            return MarkCheck::Changed(format!("{read_before} could not be checked"));
        };
        if format!("{:016x}", at.hash) != self.xxh64 {
            return MarkCheck::Changed(format!(
                "{read_before} are not its first lines now (same ids with new text, or other \
                 lines)"
            ));
        }
        if at.line_extended {
            return MarkCheck::Changed(format!(
                "the last of {read_before} (it had no line ending) has more text on it now"
            ));
        }
        MarkCheck::Kept {
            appended: now.bytes - self.bytes,
        }
    }
}

/// A running XXH64 of the lines read, keeping its value at `check_at`.
#[derive(Default)]
pub(super) struct Prefix {
    hasher: XxHash64,
    bytes: u64,
    lines: u64,
    check_at: Option<u64>,
    at_check: Option<AtEarlier>,
}

impl Prefix {
    /// A hash that also keeps its value at `check_at` bytes (an earlier run's length).
    pub(super) fn checking(check_at: Option<u64>) -> Self {
        Prefix {
            check_at,
            ..Default::default()
        }
    }

    /// Adds a line: `held` its bytes as read (with its line ending), `took` the bytes it took
    /// in the file (more than `held` for a line past the cap, whose rest is not held: that
    /// line is refused whatever its rest says, so its held bytes stand for it).
    pub(super) fn line(&mut self, held: &[u8], took: u64) {
        let start = self.bytes;
        self.lines += 1;
        self.bytes += took;
        match self.check_at {
            Some(at) if at == start && self.at_check.is_none() => {
                self.at_check = Some(AtEarlier {
                    hash: self.hasher.finish(),
                    line_extended: false,
                });
            }
            Some(at) if start < at && at <= self.bytes => {
                // The earlier run's length ends at this line's end, or inside it (its last line
                // had no line ending then): the rest must be no more than a line ending.
                let k = usize::try_from(at - start).unwrap_or(usize::MAX);
                let k = k.min(held.len());
                self.hasher.write(&held[..k]);
                let rest = &held[k..];
                let extended = took - (at - start) != rest.len() as u64
                    || !matches!(rest, b"" | b"\n" | b"\r\n");
                self.at_check = Some(AtEarlier {
                    hash: self.hasher.finish(),
                    line_extended: extended,
                });
                self.hasher.write(rest);
                return;
            }
            _ => {}
        }
        self.hasher.write(held);
    }

    /// The hash of every line read; and at the earlier run's length (the end of the file
    /// may be it).
    pub(super) fn finish(&self) -> PrefixRead {
        let at_earlier = self.at_check.or_else(|| {
            (self.check_at == Some(self.bytes)).then(|| AtEarlier {
                hash: self.hasher.finish(),
                line_extended: false,
            })
        });
        PrefixRead {
            bytes: self.bytes,
            lines: self.lines,
            hash: self.hasher.finish(),
            at_earlier,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The count of `text` line by line (as the reader splits it), checking at `at`.
    fn read(text: &str, at: Option<u64>) -> PrefixRead {
        let mut p = Prefix::checking(at);
        for l in text.split_inclusive('\n') {
            p.line(l.as_bytes(), l.len() as u64);
        }
        p.finish()
    }

    #[test]
    fn a_file_that_only_grew_keeps_its_mark_and_a_changed_one_does_not() {
        let first = "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"y\"}\n";
        let mark = PromptMark::of("p.jsonl", &read(first, None));
        assert_eq!((mark.bytes, mark.lines), (first.len() as u64, 2));
        // XXH64 is fixed: the value is pinned, as manifests keep it.
        assert_eq!(
            PromptMark::of("p", &read("abc", None)).xxh64,
            "44bc2cf5ad770999"
        );
        let check = |now: &str| mark.check(&read(now, Some(mark.bytes)));
        // (the file now, what the check says)
        let appended = "{\"id\":\"c\",\"prompt\":\"z\"}\n";
        let cases: Vec<(String, Result<u64, &str>)> = vec![
            (first.to_string(), Ok(0)),
            (format!("{first}{appended}"), Ok(appended.len() as u64)),
            (
                first.replace("\"y\"", "\"Y\""),
                Err("are not its first lines now"),
            ),
            (
                first[..30].to_string(),
                Err("it is shorter than the 2 lines"),
            ),
            (
                format!("{appended}{first}"),
                Err("are not its first lines now"),
            ),
        ];
        for (now, want) in cases {
            match (check(&now), want) {
                (MarkCheck::Kept { appended }, Ok(n)) => assert_eq!(appended, n, "{now}"),
                (MarkCheck::Changed(why), Err(part)) => assert!(why.contains(part), "{why}"),
                (got, _) => panic!("{now:?}: {got:?}"),
            }
        }
        // A last line with no line ending: a line ending after it keeps the line; more text
        // on it does not.
        let open = "{\"id\":\"a\",\"prompt\":\"x\"}\n{\"id\":\"b\",\"prompt\":\"y\"}";
        let mark = PromptMark::of("p.jsonl", &read(open, None));
        let check = |now: &str| mark.check(&read(now, Some(mark.bytes)));
        assert_eq!(
            check(&format!("{open}\n{appended}")),
            MarkCheck::Kept {
                appended: 1 + appended.len() as u64
            }
        );
        assert_eq!(
            check(&format!("{open}\r\n")),
            MarkCheck::Kept { appended: 2 }
        );
        assert!(
            matches!(check(&format!("{open}{appended}")), MarkCheck::Changed(why)
                if why.contains("has more text on it now")),
        );
    }
}
