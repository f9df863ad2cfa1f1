//! The API key: a newtype that never shows its value in Debug, Display, logs or errors.

use std::fmt;

/// A bearer token. The only way to read it is [`ApiKey::expose`], used when building the
/// `Authorization` header and when scrubbing error text that might echo it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// `None` for an empty or whitespace-only value, so "set but empty" reads as "no key".
    pub fn new(value: impl Into<String>) -> Option<Self> {
        let v = value.into();
        let t = v.trim();
        if t.is_empty() {
            None
        } else {
            Some(ApiKey(t.to_string()))
        }
    }

    /// Reads the key from the named environment variable.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var).ok().and_then(ApiKey::new)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Redacts the key from `text`, for messages built from server bodies: the whole key, any
    /// fragment of it of [`MIN_FRAGMENT`] characters or more (a server may quote it cut, as in
    /// `sk-or-v1-SECRETKEYTE...ST123456`), and anything shaped like an OpenRouter key.
    pub fn scrub(&self, text: &str) -> String {
        redact(text, Some(&self.0))
    }
}

/// Fragments of the key this long or longer are redacted: shorter ones are too likely to be
/// ordinary text (8 random key characters occur by chance about never).
pub const MIN_FRAGMENT: usize = 8;

const MARK: &[u8] = b"[redacted]";
const KEY_PREFIX: &[u8] = b"sk-or-";

fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The length of the longest prefix of `text` that occurs anywhere in `key`.
fn longest_fragment(text: &[u8], key: &[u8]) -> usize {
    (0..key.len())
        .map(|s| {
            text.iter()
                .zip(&key[s..])
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Redacts from `text` anything shaped like an OpenRouter key (`sk-or-` and the key characters
/// after it) and, given the key, every fragment of it of [`MIN_FRAGMENT`] characters or more
/// (the whole key when shorter, from 4 characters).
pub fn redact(text: &str, key: Option<&str>) -> String {
    let key = key.map(str::as_bytes).filter(|k| k.len() >= 4);
    let min = key.map_or(usize::MAX, |k| k.len().min(MIN_FRAGMENT));
    let t = text.as_bytes();
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(KEY_PREFIX) {
            let end = i + KEY_PREFIX.len();
            let n = t[end..].iter().take_while(|b| key_char(**b)).count();
            if n > 0 {
                out.extend_from_slice(MARK);
                i = end + n;
                continue;
            }
        }
        if let Some(k) = key {
            let n = longest_fragment(&t[i..], k);
            if n >= min {
                out.extend_from_slice(MARK);
                i += n;
                continue;
            }
        }
        out.push(t[i]);
        i += 1;
    }
    // Cuts fall on ASCII key bytes; a non-ASCII key could split a character, hence lossy.
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([redacted])")
    }
}

impl fmt::Display for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_shows_itself() {
        let k = ApiKey::new("sk-or-v1-secret123456").expect("key");
        assert!(!format!("{k:?}").contains("secret"));
        assert!(!format!("{k}").contains("secret"));
        assert!(!format!("{:?}", Some(&k)).contains("secret"));
        assert_eq!(
            k.scrub("bad key sk-or-v1-secret123456!"),
            "bad key [redacted]!"
        );
        assert!(ApiKey::new("   ").is_none());
    }

    #[test]
    fn redacts_fragments_and_key_shapes() {
        let k = ApiKey::new("sk-or-v1-SECRETKEYTEST123456").expect("key");
        let cases = [
            // The split quote: both halves go.
            (
                "Invalid key sk-or-v1-SECRETKEYTE...ST123456.",
                "Invalid key [redacted]...[redacted].",
            ),
            // A fragment of 8 or more characters, without the prefix.
            (
                "token SECRETKEY was refused",
                "token [redacted] was refused",
            ),
            ("tail ...ST123456", "tail ...[redacted]"),
            ("EYTEST12", "[redacted]"),
            // Shorter fragments are ordinary text.
            ("ST12345 and SECRET", "ST12345 and SECRET"),
            // Another key's shape, even one we do not hold.
            (
                "key sk-or-v1-0123abcdef is another's",
                "key [redacted] is another's",
            ),
            ("quoted \"sk-or-xyz\"", "quoted \"[redacted]\""),
            // Not a key: the prefix alone.
            ("sk-or- is a prefix", "sk-or- is a prefix"),
            ("no secret here", "no secret here"),
            ("émoji ✓ SECRETKEYTEST123456 ✓", "émoji ✓ [redacted] ✓"),
        ];
        for (text, want) in cases {
            assert_eq!(k.scrub(text), want, "{text}");
        }
        // Without a key, shapes only.
        assert_eq!(
            redact("a sk-or-v1-abc b SECRETKEY", None),
            "a [redacted] b SECRETKEY"
        );
        // A short key is redacted whole, not by fragments.
        let short = ApiKey::new("abcdef").expect("key");
        assert_eq!(short.scrub("x abcdef y abcde"), "x [redacted] y abcde");
    }
}
