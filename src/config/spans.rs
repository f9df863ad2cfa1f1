//! Where each key and value sits in the text (by key path, `dataset[1].name`), so that errors
//! found after parsing can name their line.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

/// Where keys and values sit in the text, by key path (`dataset[1].name`): the deserializer's
/// errors carry only a byte span, and checks after parsing only a path.
pub(super) struct Spans(Vec<SpanEntry>);

pub(super) struct SpanEntry {
    path: String,
    /// `None` for array elements.
    key: Option<Range<usize>>,
    value: Range<usize>,
}

impl Spans {
    pub(super) fn new(doc: &DeTable<'_>) -> Self {
        let mut out = Vec::new();
        walk_table(doc, "", &mut out);
        Spans(out)
    }

    /// The path of the key at `offset`, else of the innermost value around it.
    pub(super) fn path_at(&self, offset: usize) -> Option<&str> {
        let within = |r: &Range<usize>| r.start <= offset && offset < r.end.max(r.start + 1);
        if let Some(e) = self.0.iter().find(|e| e.key.as_ref().is_some_and(within)) {
            return Some(&e.path);
        }
        let mut best: Option<&SpanEntry> = None;
        for e in self.0.iter().filter(|e| within(&e.value)) {
            // `<=`: on equal spans (a `[[table]]` header and its element) the deeper one wins.
            if best.is_none_or(|b| e.value.len() <= b.value.len()) {
                best = Some(e);
            }
        }
        best.map(|e| e.path.as_str())
    }

    /// Where `path`'s key is, or its nearest ancestor's when the key is not in the file.
    pub(super) fn offset_of(&self, path: &str) -> Option<usize> {
        let mut p = path;
        loop {
            if let Some(e) = self.0.iter().find(|e| e.path == p) {
                return Some(e.key.as_ref().unwrap_or(&e.value).start);
            }
            p = &p[..parent_len(p)?];
        }
    }
}

/// Length of the parent path: `dataset[1].name` → `dataset[1]` → `dataset` → none.
pub(super) fn parent_len(path: &str) -> Option<usize> {
    path.rfind(['.', '['])
}

pub(super) fn walk_table(t: &DeTable<'_>, prefix: &str, out: &mut Vec<SpanEntry>) {
    for (k, v) in t.iter() {
        let path = if prefix.is_empty() {
            k.get_ref().to_string()
        } else {
            format!("{prefix}.{}", k.get_ref())
        };
        out.push(SpanEntry {
            path: path.clone(),
            key: Some(k.span()),
            value: v.span(),
        });
        walk_value(v.get_ref(), &path, out);
    }
}

pub(super) fn walk_value(v: &DeValue<'_>, path: &str, out: &mut Vec<SpanEntry>) {
    match v {
        DeValue::Table(t) => walk_table(t, path, out),
        DeValue::Array(a) => {
            for (i, e) in a.iter().enumerate() {
                let p = format!("{path}[{i}]");
                out.push(SpanEntry {
                    path: p.clone(),
                    key: None,
                    value: e.span(),
                });
                walk_value(e.get_ref(), &p, out);
            }
        }
        _ => {}
    }
}

pub(super) fn line_of(text: &str, offset: usize) -> usize {
    let end = offset.min(text.len());
    text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}
