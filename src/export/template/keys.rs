//! The API keys a chat template must not put into a training row. A template's text is copied
//! into every row it renders, so a template that holds the key (a copy of the environment,
//! `env > chat_template.jinja`, or a file linked to one) leaks it into the training set, which
//! is shared far more widely than the key (reliability-probe-5 P7).
//!
//! Such a template is refused, not scrubbed: one that holds the key is a copy of something
//! else (the environment, with its other secrets and paths), never a real chat template, and
//! rows rendered through it with the key cut out would still be wrong as training text. The
//! error names the template and the variable, never the value.

use std::ffi::OsString;

use crate::openrouter::ApiKey;

/// Keys by the variable that holds them.
#[derive(Default)]
pub struct Keys(Vec<(String, ApiKey)>);

impl Keys {
    /// The values of the variables `vars` that are set. A name with `{shard}` in it (a sharded
    /// job's `OPENROUTER_API_KEY_{shard}`) stands for every set variable it matches with
    /// digits there.
    pub fn from_env(vars: &[String]) -> Keys {
        Keys::from_vars(vars, std::env::vars_os())
    }

    /// [`Keys::from_env`] of the environment `env`.
    pub(crate) fn from_vars(
        vars: &[String],
        env: impl IntoIterator<Item = (OsString, OsString)>,
    ) -> Keys {
        let env: Vec<(String, ApiKey)> = (env.into_iter())
            .filter_map(|(name, value)| {
                Some((
                    name.into_string().ok()?,
                    ApiKey::new(value.into_string().ok()?)?,
                ))
            })
            .collect();
        let mut keys: Vec<(String, ApiKey)> = Vec::new();
        for (name, key) in env {
            let named = vars.iter().any(|var| match var.split_once("{shard}") {
                None => *var == name,
                Some((head, tail)) => (name.strip_prefix(head))
                    .and_then(|rest| rest.strip_suffix(tail))
                    .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit())),
            });
            if named {
                keys.push((name, key));
            }
        }
        Keys(keys)
    }

    /// The variable whose key `text` holds, if any: the whole value, as written. Not its
    /// fragments: training text is long, and eight characters of a key in gigabytes of answers
    /// are to be expected by chance.
    pub(super) fn found_in(&self, text: &str) -> Option<&str> {
        (self.0.iter())
            .find(|(_, key)| text.contains(key.expose()))
            .map(|(var, _)| var.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sharded_name_stands_for_each_shards_variable() {
        let env = [
            ("HARVEST_KEYS_TEST_0", "sk-or-v1-zero0000"),
            ("HARVEST_KEYS_TEST_12", "sk-or-v1-twelve12"),
            ("HARVEST_KEYS_TEST_X", "sk-or-v1-notashard"),
            ("HARVEST_KEYS_PLAIN", "sk-or-v1-plainkey"),
            ("HARVEST_KEYS_EMPTY", "  "),
        ]
        .map(|(n, v)| (OsString::from(n), OsString::from(v)));
        let vars = [
            "HARVEST_KEYS_TEST_{shard}".to_string(),
            "HARVEST_KEYS_PLAIN".into(),
            "HARVEST_KEYS_EMPTY".into(),
            "HARVEST_KEYS_UNSET".into(),
        ];
        let keys = Keys::from_vars(&vars, env);
        assert_eq!(keys.0.len(), 3, "set, non-empty and named");
        assert_eq!(
            keys.found_in("a sk-or-v1-twelve12 b"),
            Some("HARVEST_KEYS_TEST_12")
        );
        assert_eq!(
            keys.found_in("sk-or-v1-zero0000"),
            Some("HARVEST_KEYS_TEST_0")
        );
        assert_eq!(
            keys.found_in("sk-or-v1-plainkey"),
            Some("HARVEST_KEYS_PLAIN")
        );
        assert_eq!(keys.found_in("sk-or-v1-notashard"), None);
        assert_eq!(keys.found_in("sk-or-v1-twelve1"), None, "the whole value");
    }
}
