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

    /// Replaces every occurrence of the key in `text`, for messages built from server bodies.
    pub fn scrub(&self, text: &str) -> String {
        if self.0.len() < 4 {
            return text.to_string();
        }
        text.replace(&self.0, "[redacted]")
    }
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
}
