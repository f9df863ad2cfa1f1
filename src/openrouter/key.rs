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
pub(crate) const MIN_FRAGMENT: usize = 8;

const MARK: &[u8] = b"[redacted]";
const KEY_PREFIX: &[u8] = b"sk-or-";

fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// The length of the longest prefix of `text` that occurs anywhere in `form`.
fn longest_fragment(text: &[u8], form: &[u8]) -> usize {
    (0..form.len())
        .map(|s| {
            text.iter()
                .zip(&form[s..])
                .take_while(|(a, b)| a == b)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Fragments of the key's base64 forms this long or longer are redacted (random base64 text
/// matches 12 characters of them about never).
const MIN_B64_FRAGMENT: usize = 12;

/// The key's base64 forms as they appear inside a longer encoded text (`Bearer <key>`, a
/// `user:<key>` of basic auth, a JSON echo of the headers): at each of the three byte
/// alignments, in the standard and the URL-safe alphabet, without the characters at either end
/// that also depend on the bytes around the key.
fn base64_forms(key: &[u8]) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let mut forms = Vec::new();
    for pad in 0..3usize {
        let mut bytes = vec![0u8; pad];
        bytes.extend_from_slice(key);
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let text = engine.encode(&bytes).into_bytes();
            // The first characters carry the padding bytes; the last, what follows the key.
            let start = (pad * 4).div_ceil(3);
            let end = text.len().saturating_sub(2);
            if end > start + MIN_B64_FRAGMENT {
                forms.push(text[start..end].to_vec());
            }
        }
    }
    forms.sort();
    forms.dedup();
    forms
}

/// One way the key may be written in server text, and how much of it is redacted.
struct Form {
    /// Lower-cased when `any_case`.
    text: Vec<u8>,
    /// A match this long or longer is redacted.
    min: usize,
    /// Letters match in either case (a key upper-cased, hex in either case): matched against
    /// the lower-cased text.
    any_case: bool,
    /// Every `min` bytes of `text`: a position of the text whose next `min` bytes are none of
    /// these starts no match, which is most positions, found by one look-up instead of a walk
    /// over the whole form (the forms are about 30 times the key; walking them all made a
    /// 64 KiB body five times slower to scrub).
    starts: std::collections::HashSet<Vec<u8>>,
}

impl Form {
    fn new(text: Vec<u8>, min: usize, any_case: bool) -> Form {
        let text = if any_case {
            text.to_ascii_lowercase()
        } else {
            text
        };
        let starts = text.windows(min).map(<[u8]>::to_vec).collect();
        Form {
            text,
            min,
            any_case,
            starts,
        }
    }

    /// How many bytes of `text` from its start are a fragment of this form long enough to be
    /// redacted (`lower`: the same text lower-cased), or 0.
    fn matched(&self, text: &[u8], lower: &[u8]) -> usize {
        let t = if self.any_case { lower } else { text };
        match t.get(..self.min) {
            Some(start) if self.starts.contains(start) => longest_fragment(t, &self.text),
            _ => 0,
        }
    }
}

/// Every form of the key a server echoing it may write (reliability-probe-5 P14): as it is
/// and reversed, in hex, `%XX`-escaped and `\u00XX`-escaped (also with the backslash itself
/// escaped, as that text is inside a JSON string), each in any letter case and cut to any
/// fragment of [`MIN_FRAGMENT`] key bytes; and base64 (see [`base64_forms`]), whose case
/// carries the bytes.
fn forms(key: &[u8]) -> Vec<Form> {
    let min = key.len().min(MIN_FRAGMENT);
    let per_byte = |each: &dyn Fn(u8) -> String| -> Vec<u8> {
        key.iter().flat_map(|&b| each(b).into_bytes()).collect()
    };
    let mut forms = vec![
        Form::new(key.to_vec(), min, true),
        Form::new(key.iter().rev().copied().collect(), min, true),
        Form::new(per_byte(&|b| format!("{b:02x}")), 2 * min, true),
        Form::new(per_byte(&|b| format!("%{b:02x}")), 3 * min, true),
    ];
    // `\u` escapes stand for characters, not bytes: only an ASCII key is one escape a byte.
    if key.is_ascii() {
        forms.push(Form::new(
            per_byte(&|b| format!("\\u{b:04x}")),
            6 * min,
            true,
        ));
        forms.push(Form::new(
            per_byte(&|b| format!("\\\\u{b:04x}")),
            7 * min,
            true,
        ));
    }
    forms.extend(
        (base64_forms(key).into_iter()).map(|text| Form::new(text, MIN_B64_FRAGMENT, false)),
    );
    forms
}

/// Redacts from `text` anything shaped like an OpenRouter key (`sk-or-` in any case and the
/// key characters after it) and, given the key, every fragment of one of its [`forms`] as long
/// as that form's minimum: [`MIN_FRAGMENT`] characters of it (the whole key when shorter, from
/// 4 characters) as written, reversed, hex-, `%`- or `\u`-escaped, in any case, and
/// [`MIN_B64_FRAGMENT`] of its base64 forms (a server that echoes the `Authorization` header
/// encoded).
pub(crate) fn redact(text: &str, key: Option<&str>) -> String {
    let key = key.map(str::as_bytes).filter(|k| k.len() >= 4);
    let forms = key.map(forms).unwrap_or_default();
    let t = text.as_bytes();
    let lower = t.to_ascii_lowercase();
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if (t.get(i..i + KEY_PREFIX.len())).is_some_and(|p| p.eq_ignore_ascii_case(KEY_PREFIX)) {
            let end = i + KEY_PREFIX.len();
            let n = t[end..].iter().take_while(|b| key_char(**b)).count();
            if n > 0 {
                out.extend_from_slice(MARK);
                i = end + n;
                continue;
            }
        }
        let n = (forms.iter())
            .map(|f| f.matched(&t[i..], &lower[i..]))
            .max()
            .unwrap_or(0);
        if n > 0 {
            out.extend_from_slice(MARK);
            i += n;
            continue;
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

#[cfg(test)]
mod base64_tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};

    use super::redact;

    const KEY: &str = "sk-or-v1-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab";

    #[test]
    fn the_key_encoded_in_base64_is_redacted_at_every_alignment() {
        // (what the server encoded, the alphabet)
        let echoed = [
            format!("Bearer {KEY}"),
            KEY.to_string(),
            format!("user:{KEY}"),
            format!("{{\"authorization\":\"Bearer {KEY}\"}}"),
            format!("ab{KEY}cd"),
        ];
        for plain in &echoed {
            for (alphabet, encoded) in [
                ("standard", STANDARD.encode(plain)),
                ("url-safe", URL_SAFE.encode(plain)),
            ] {
                let text = format!("unauthorized: header was {encoded} (rejected)");
                let out = redact(&text, Some(KEY));
                assert!(out.contains("[redacted]"), "{alphabet} {plain}: {out}");
                // No 12 characters of the key's own stretch of the encoding survive.
                let at = plain.find(KEY).expect("key inside");
                let from = (at * 4).div_ceil(3) + 1;
                let to = (at + KEY.len()) * 4 / 3 - 1;
                let key_part = &encoded.as_bytes()[from..to];
                let left = (key_part.windows(12))
                    .filter(|w| out.as_bytes().windows(12).any(|o| o == *w))
                    .count();
                assert_eq!(left, 0, "{alphabet} {plain}: {out}");
                assert!(out.starts_with("unauthorized: header was "), "{out}");
                assert!(out.ends_with(" (rejected)"), "{out}");
            }
        }
    }

    #[test]
    fn other_base64_is_left_alone() {
        let other = STANDARD.encode("Bearer sk-or-v1-ffffeeeeddddccccbbbbaaaa99998888777766665555");
        let text = format!("token {other} and aGVsbG8gd29ybGQ= as sent");
        assert_eq!(redact(&text, Some(KEY)), text);
    }
}
