//! The checks after parsing: values in range, names that do not collide with harvest's own
//! files, URLs, prompt files that exist; each error names the key and its line.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::domain::Price;
use crate::openrouter::request::Reasoning;

use super::*;

impl Config {
    pub(super) fn validate(&self, c: &Check<'_>, check_files: bool) -> Result<(), ConfigError> {
        c.ensure(!self.model.trim().is_empty(), "model", "must not be empty")?;
        c.ensure(
            !self.api_key_env.trim().is_empty(),
            "api_key_env",
            "must not be empty",
        )?;
        http_url(c, "base_url", &self.base_url)?;
        if check_files && let Some(ca) = &self.ca_cert {
            let read = crate::openrouter::roots::read(ca);
            c.ensure(read.is_ok(), "ca_cert", read.err().unwrap_or_default())?;
        }
        positive(c, "budget_usd", self.budget_usd)?;
        // Money is integer picodollars in an i64 (at most ~9.22M USD): a larger budget would be
        // clamped silently, and sums near the limit would overflow.
        let msg = format!(
            "must be at most {MAX_BUDGET_USD} USD (the most harvest's dollar counters hold with \
             room to spare), got {}",
            shown(self.budget_usd)
        );
        c.ensure(self.budget_usd <= MAX_BUDGET_USD, "budget_usd", msg)?;
        if let Some(b) = self.shard_budget_usd {
            positive(c, "shard_budget_usd", b)?;
            let msg = format!("must be at most {MAX_BUDGET_USD} USD, got {}", shown(b));
            c.ensure(b <= MAX_BUDGET_USD, "shard_budget_usd", msg)?;
            // A shard's budget is a part of the job's: one larger than the whole would let one
            // shard spend past what the operator allowed for all of them.
            let msg = format!(
                "is {} USD, more than the whole job's budget_usd {} USD: a shard's budget is a \
                 part of the job's",
                shown(b),
                shown(self.budget_usd)
            );
            c.ensure(b <= self.budget_usd, "shard_budget_usd", msg)?;
        }
        let conc_ok = (1..=100_000).contains(&self.concurrency);
        c.ensure(conc_ok, "concurrency", "must be between 1 and 100000")?;
        for (tag, cap) in &self.endpoint_concurrency {
            c.ensure(
                *cap > 0,
                format!("endpoint_concurrency.{tag}"),
                "must be at least 1",
            )?;
        }
        if let Some(rps) = self.requests_per_second {
            positive(c, "requests_per_second", rps)?;
        }
        let r = &self.request;
        check_request(c, "request", Some(r.max_tokens), &r.reasoning)?;
        no_provider_in_extra(c, "request", &r.extra)?;
        let t = &self.timeouts;
        positive(c, "timeouts.connect_s", t.connect_s)?;
        positive(c, "timeouts.first_token_s", t.first_token_s)?;
        positive(c, "timeouts.idle_s", t.idle_s)?;
        positive(c, "timeouts.total_s", t.total_s)?;
        let attempts_ok = self.retry.max_attempts > 0;
        c.ensure(attempts_ok, "retry.max_attempts", "must be at least 1")?;
        positive(c, "retry.max_delay_s", self.retry.max_delay_s)?;
        let failures_ok = self.breaker.failures > 0;
        c.ensure(failures_ok, "breaker.failures", "must be at least 1")?;
        positive(c, "breaker.cooldown_s", self.breaker.cooldown_s)?;

        self.validate_datasets(c, check_files)?;
        if let Some(a) = self.policy.min_probe_agreement {
            let ok = (0.0..=1.0).contains(&a);
            c.ensure(
                ok,
                "policy.min_probe_agreement",
                format!("must be between 0 and 1, got {a}"),
            )?;
        }
        self.validate_endpoints(c)?;
        Ok(())
    }

    /// The datasets: names that are files of their own, budgets, requests, prompt files.
    fn validate_datasets(&self, c: &Check<'_>, check_files: bool) -> Result<(), ConfigError> {
        let msg = "at least one [[dataset]] table is required";
        c.ensure(!self.datasets.is_empty(), "dataset", msg)?;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, d) in self.datasets.iter().enumerate() {
            let key = |field: &str| format!("dataset[{i}].{field}");
            let name_ok = !d.name.is_empty()
                && (d.name.chars()).all(|ch| ch.is_ascii_alphanumeric() || ".-_".contains(ch));
            let msg = format!("bad name {:?}: use only A-Z a-z 0-9 . _ -", d.name);
            c.ensure(name_ok, key("name"), msg)?;
            if let Some(why) = reserved_name(&d.name) {
                let msg = format!(
                    "dataset name `{}` {why}: its files would mix with harvest's own in the \
                     output directory. Choose another name",
                    d.name
                );
                return Err(c.err(key("name"), msg));
            }
            if let Some(first) = seen.insert(&d.name, i) {
                let msg = format!(
                    "duplicate dataset name `{}` (also dataset[{first}])",
                    d.name
                );
                return Err(c.err(key("name"), msg));
            }
            // On a case-insensitive filesystem (macOS, Windows) `A.jsonl` and `a.jsonl` are one.
            if let Some((j, other)) = self.datasets[..i]
                .iter()
                .enumerate()
                .find(|(_, o)| o.name != d.name && o.name.eq_ignore_ascii_case(&d.name))
            {
                let msg = format!(
                    "dataset names `{}` and `{}` (dataset[{j}]) differ only by case: on a \
                     case-insensitive filesystem they would share files",
                    d.name, other.name
                );
                return Err(c.err(key("name"), msg));
            }
            let budget_ok = d.output_token_budget != Some(0);
            c.ensure(budget_ok, key("output_token_budget"), "must be > 0")?;
            c.ensure(d.max_samples != Some(0), key("max_samples"), "must be > 0")?;
            let fields = d.fields();
            let named = [
                ("messages_field", d.messages_field.as_deref()),
                ("system_field", d.system_field.as_deref()),
                ("id_field", d.id_field.as_deref()),
            ];
            for (field, name) in named {
                let msg = "must name a field (a non-empty string)";
                c.ensure(name.is_none_or(|n| !n.is_empty()), key(field), msg)?;
            }
            let prompt_ok = d.prompt_field.is_none()
                || (!fields.prompt.is_empty() && fields.prompt.iter().all(|n| !n.is_empty()));
            let msg = "must name a field, or a list of fields, each a non-empty string";
            c.ensure(prompt_ok, key("prompt_field"), msg)?;
            let o = &d.request;
            check_request(c, &key("request"), o.max_tokens, &o.reasoning)?;
            no_provider_in_extra(c, &key("request"), &o.extra)?;
            let exists = !check_files || d.prompts.is_file();
            let msg = format!(
                "prompt file of dataset {} not found: {}",
                d.name,
                d.prompts.display()
            );
            c.ensure(exists, key("prompts"), msg)?;
        }
        Ok(())
    }

    /// The own servers: unique names, URLs, models, prices, concurrency.
    fn validate_endpoints(&self, c: &Check<'_>) -> Result<(), ConfigError> {
        c.ensure(
            self.openrouter || !self.endpoints.is_empty(),
            "openrouter",
            "is false, so at least one [[endpoint]] must serve the run",
        )?;
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let key = |field: &str| format!("endpoint[{i}].{field}");
            c.ensure(!e.name.trim().is_empty(), key("name"), "must not be empty")?;
            if let Some(first) = seen.insert(&e.name, i) {
                let msg = format!(
                    "duplicate endpoint name `{}` (also endpoint[{first}])",
                    e.name
                );
                return Err(c.err(key("name"), msg));
            }
            http_url(c, &key("base_url"), &e.base_url)?;
            c.ensure(
                !e.model.trim().is_empty(),
                key("model"),
                "must not be empty",
            )?;
            for (field, v) in [
                ("price_in_per_m", e.price_in_per_m),
                ("price_out_per_m", e.price_out_per_m),
            ] {
                let ok = v.is_finite() && v >= 0.0 && Price::per_million_f64(v).is_some();
                c.ensure(ok, key(field), format!("must be >= 0, got {}", shown(v)))?;
            }
            c.ensure(e.concurrency > 0, key("concurrency"), "must be at least 1")?;
        }
        Ok(())
    }
}

/// The largest `budget_usd`.
pub const MAX_BUDGET_USD: f64 = 9_000_000.0;

/// Names harvest gives its own files in an output directory (`spend.jsonl`, `state.json`,
/// `manifest.json`, `harvest.log`, `probe.json`, `<dataset>.rejects.jsonl`,
/// `<file>.damaged`, `<dataset>.superseded.jsonl`, `.harvest.lock`): a dataset may not take
/// them, in any case.
pub const RESERVED_NAMES: [&str; 5] = ["spend", "state", "manifest", "harvest", "probe"];

/// Why a dataset name would collide with harvest's own files, if it would.
pub(super) fn reserved_name(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if RESERVED_NAMES.contains(&lower.as_str()) {
        Some("is the name of one of harvest's own files")
    } else if lower.ends_with(".rejects") {
        Some("ends in .rejects, the suffix of a dataset's rejects file")
    } else if lower.ends_with(".damaged") {
        Some("ends in .damaged, the suffix of the files --repair moves damaged lines to")
    } else if lower.ends_with(".superseded") {
        Some("ends in .superseded, the suffix of the files --retry-* moves superseded lines to")
    } else if name.starts_with('.') {
        Some("starts with a dot, kept for harvest's hidden files")
    } else {
        None
    }
}

pub(super) fn positive(c: &Check<'_>, key: &str, v: f64) -> Result<(), ConfigError> {
    let ok = v.is_finite() && v > 0.0;
    c.ensure(ok, key, format!("must be a number > 0, got {}", shown(v)))
}

/// A number as an error shows it: `1e300`, not its 300 digits (reliability-probe-4 N12).
pub(super) fn shown(v: f64) -> String {
    if v.is_finite() && v.abs() >= 1e15 {
        format!("{v:e}")
    } else {
        v.to_string()
    }
}

pub(super) fn http_url(c: &Check<'_>, key: &str, url: &str) -> Result<(), ConfigError> {
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    let ok = host.is_some_and(|h| !h.is_empty());
    c.ensure(
        ok,
        key,
        format!("must be an http:// or https:// URL, got {url:?}"),
    )
}

pub(super) fn check_request(
    c: &Check<'_>,
    table: &str,
    max_tokens: Option<u32>,
    reasoning: &Option<Reasoning>,
) -> Result<(), ConfigError> {
    c.ensure(
        max_tokens != Some(0),
        format!("{table}.max_tokens"),
        "must be > 0",
    )?;
    let both = reasoning
        .as_ref()
        .is_some_and(|r| r.effort.is_some() && r.max_tokens.is_some());
    let msg = "set `effort` or `max_tokens`, not both";
    c.ensure(!both, format!("{table}.reasoning"), msg)
}

/// `extra.provider` would send a second `provider` object beside the one harvest builds.
pub(super) fn no_provider_in_extra(
    c: &Check<'_>,
    table: &str,
    extra: &Map<String, Value>,
) -> Result<(), ConfigError> {
    let msg = "harvest builds the provider object (only, ignore, order from the policy): set \
               data_collection, zdr, enforce_distillable_text, sort, max_price and \
               preferred_* in the [provider] table instead";
    c.ensure(
        !extra.contains_key("provider"),
        format!("{table}.extra.provider"),
        msg,
    )
}

/// What errors need to point into the file.
pub(super) struct Check<'a> {
    pub(super) file: &'a Path,
    pub(super) text: &'a str,
    pub(super) spans: &'a Spans,
}

impl Check<'_> {
    pub(super) fn ensure(
        &self,
        ok: bool,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Result<(), ConfigError> {
        if ok {
            Ok(())
        } else {
            Err(self.err(key, message))
        }
    }

    pub(super) fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let key = key.into();
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line: self.spans.offset_of(&key).map(|o| line_of(self.text, o)),
            key,
            message: message.into(),
        }
    }

    /// Names the key of a deserializer error (serde's messages say "field"; operators say "key").
    pub(super) fn toml_error(&self, e: &toml::de::Error) -> ConfigError {
        let offset = e.span().map(|s| s.start);
        let line = offset.map(|o| line_of(self.text, o));
        let at = offset
            .and_then(|o| self.spans.path_at(o))
            .unwrap_or("")
            .to_string();
        let msg = e.message();
        if let Some((name, expected)) = msg
            .strip_prefix("unknown field `")
            .and_then(|rest| rest.split_once("`, "))
        {
            let table = &at[..parent_len(&at).unwrap_or(0)];
            let table = if table.is_empty() {
                "the top level".to_string()
            } else if table.contains('[') {
                table.to_string()
            } else {
                format!("[{table}]")
            };
            // A top-level key put under a table (reliability-probe-5 P17: `on_bad_line` under
            // [[dataset]]): say where it goes, as TOML gives every key after a table header to
            // that table.
            let hint = if table != "the top level" && top_level_keys().iter().any(|k| k == name) {
                format!(
                    "; `{name}` is a top-level key: put it above the first [table] or \
                     [[dataset]] header, not in {table}"
                )
            } else {
                String::new()
            };
            return ConfigError::UnknownKey {
                path: self.file.to_path_buf(),
                line,
                name: name.to_string(),
                table,
                expected: format!("{expected}{hint}"),
            };
        }
        let (key, message) = match msg.strip_prefix("missing field `") {
            Some(rest) => {
                let name = rest.trim_end_matches('`');
                let key = if at.is_empty() {
                    name.to_string()
                } else {
                    format!("{at}.{name}")
                };
                (key, "required key is missing".to_string())
            }
            None => (at, msg.to_string()),
        };
        ConfigError::Invalid {
            path: self.file.to_path_buf(),
            line,
            key,
            message,
        }
    }
}

/// The keys of the file's top level, as serde lists them when it meets one it does not know.
fn top_level_keys() -> Vec<String> {
    let Err(e) = toml::from_str::<super::Config>("\"@not a key\" = 0") else {
        return Vec::new();
    };
    let msg = e.message();
    let Some(expected) = msg.split_once("expected one of ").map(|(_, l)| l) else {
        return Vec::new();
    };
    (expected.split(", "))
        .map(|k| k.trim_matches('`').to_string())
        .collect()
}
