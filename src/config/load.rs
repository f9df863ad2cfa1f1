//! Reading a config: the file, the TOML with every error pointing into it, paths resolved
//! against the file's directory, then the checks (`validate.rs`).

use std::path::Path;
use std::time::Duration;

use toml::de::DeTable;

use crate::domain::Usd;

use super::*;

impl Config {
    /// Reads, parses and checks `path`, prompt files included.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text` as if read from `path`: relative paths resolve against its directory, and
    /// every prompt file must exist.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::parse_inner(text, path, true)
    }

    /// [`Config::parse`] without the prompt-file existence check (sample configs, `providers`).
    pub fn parse_unchecked(text: &str, path: &Path) -> Result<Config, ConfigError> {
        Self::parse_inner(text, path, false)
    }

    pub(super) fn parse_inner(
        text: &str,
        path: &Path,
        check_files: bool,
    ) -> Result<Config, ConfigError> {
        let doc = DeTable::parse(text).map_err(|e| {
            let (line, snippet) = match e.span() {
                Some(s) => (Some(line_of(text, s.start)), text.get(s).unwrap_or("")),
                None => (None, ""),
            };
            let mut message = e.message().to_string();
            if !snippet.is_empty() && snippet.len() <= 40 && !snippet.contains('\n') {
                message.push_str(&format!(" at `{snippet}`"));
            }
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                message,
            }
        })?;
        let spans = Spans::new(doc.get_ref());
        let check = Check {
            file: path,
            text,
            spans: &spans,
        };
        let mut config: Config = toml::from_str(text).map_err(|e| check.toml_error(&e))?;
        let base = path.parent().unwrap_or(Path::new(""));
        config.source = path.to_path_buf();
        config.output_dir = base.join(&config.output_dir);
        if let Some(ca) = &mut config.ca_cert {
            *ca = base.join(&*ca);
        }
        for d in &mut config.datasets {
            d.prompts = base.join(&d.prompts);
        }
        config.validate(&check, check_files)?;
        // A fixed max_price rules endpoints out where the listing shows it ("auto" never does).
        if let Some(MaxPriceSetting::Fixed(m)) = &config.provider.max_price {
            config.policy.guards.max_price = Some(m.clone());
        }
        Ok(config)
    }

    /// How often to refresh the endpoint listing, if at all.
    pub fn catalog_refresh(&self) -> Option<Duration> {
        (self.openrouter && self.catalog_refresh_s > 0.0 && self.catalog_refresh_s.is_finite())
            .then(|| Duration::from_secs_f64(self.catalog_refresh_s))
    }

    /// The dollar cap.
    pub fn budget(&self) -> Usd {
        Usd::from_f64(self.budget_usd)
    }

    /// `[request]` with `dataset`'s overrides applied.
    pub fn request_for(&self, dataset: &DatasetConfig) -> RequestParams {
        let (b, o) = (&self.request, &dataset.request);
        let mut extra = b.extra.clone();
        extra.extend(o.extra.clone());
        RequestParams {
            max_tokens: o.max_tokens.unwrap_or(b.max_tokens),
            temperature: o.temperature.or(b.temperature),
            top_p: o.top_p.or(b.top_p),
            top_k: o.top_k.or(b.top_k),
            min_p: o.min_p.or(b.min_p),
            seed: o.seed.or(b.seed),
            stop: o.stop.clone().or_else(|| b.stop.clone()),
            presence_penalty: o.presence_penalty.or(b.presence_penalty),
            frequency_penalty: o.frequency_penalty.or(b.frequency_penalty),
            repetition_penalty: o.repetition_penalty.or(b.repetition_penalty),
            reasoning: o.reasoning.clone().or_else(|| b.reasoning.clone()),
            extra,
        }
    }
}
