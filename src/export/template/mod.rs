//! Seeing the training text: exported rows rendered through a model's Hugging Face chat
//! template (the Jinja `chat_template` of its `tokenizer_config.json`, or a `.jinja` file), as
//! `transformers`' `apply_chat_template(messages, add_generation_prompt=False)` would render
//! them, so the operator sees where the reasoning and the system turn land before the trainer
//! extracts hidden states. Rendered with minijinja under the options transformers uses
//! (`trim_blocks`, `lstrip_blocks`, loop controls), Python's string methods, and transformers'
//! own `tojson`; maps keep their keys in the order the row has them, as Python's dicts do.

pub(crate) mod builtin;
mod file;
mod keys;
mod pystr;
mod tojson;

pub use keys::Keys;
pub(crate) use pystr::python_trim;

use std::path::{Path, PathBuf};

use minijinja::value::Serde;
use minijinja::{Environment, Error, ErrorKind, context};
use serde_json::Value;

/// A template that cannot be read, compiled or rendered; says the file, and the line or the
/// row.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Bad { path: PathBuf, msg: String },
    #[error("{path}: rendering row {id}: {msg}")]
    Render {
        path: PathBuf,
        id: String,
        msg: String,
        /// What failed, without what is particular to the row (`line 3: out of fuel`): two
        /// rows that fail with the same cause fail the same way.
        cause: String,
        /// It ran out of fuel or wrote past its cap: the rendering cost its whole allowance
        /// (half a second of CPU) before it failed.
        runaway: bool,
    },
    /// The template's text (or its tokens, or a `--template-kwarg`) holds an API key.
    #[error(
        "{path}: it holds the value of {var}, the API key: refused, so that no training row \
         carries the key (is it a copy of the environment, or a link to one?)"
    )]
    HoldsKey { path: PathBuf, var: String },
    /// A rendering wrote an API key: the export stops, whatever the other rows do.
    #[error(
        "{path}: rendering row {id} wrote the value of {var}, the API key: the export is \
         stopped, so that no training row carries the key"
    )]
    RendersKey {
        path: PathBuf,
        id: String,
        var: String,
    },
}

impl TemplateError {
    /// The cause of a rendering's failure, the same for every row that fails the same way.
    pub fn cause(&self) -> Option<&str> {
        match self {
            TemplateError::Render { cause, .. } => Some(cause),
            _ => None,
        }
    }

    /// The rendering ran away (out of fuel, or past its output cap).
    pub fn is_runaway(&self) -> bool {
        matches!(self, TemplateError::Render { runaway: true, .. })
    }

    /// The rendering wrote an API key: no row of the export may be written after it.
    pub fn renders_key(&self) -> bool {
        matches!(self, TemplateError::RendersKey { .. })
    }
}

/// A compiled chat template with the special tokens its file gave.
pub struct ChatTemplate {
    env: Environment<'static>,
    path: PathBuf,
    bos_token: String,
    eos_token: String,
    /// Extra variables, as `apply_chat_template(..., **kwargs)` passes them (`thinking`).
    kwargs: serde_json::Map<String, Value>,
    /// Keys no rendering may write (see `keys`).
    keys: Keys,
}

/// Variables the renderer sets itself; a template keyword argument may not name them.
const RESERVED: [&str; 5] = [
    "messages",
    "add_generation_prompt",
    "tools",
    "bos_token",
    "eos_token",
];

/// The name of the template inside the environment.
const NAME: &str = "chat_template";

/// What one rendering may do: minijinja charges one fuel per instruction and per 64 bytes it
/// makes, so this is 20 million steps or about 1.3 GB of text. A real template on a 50 MB row
/// takes a few million; a loop of 10^10 steps or a string doubled 40 times stops in a second
/// with an error instead of hanging or exhausting memory (reliability-probe-3 D11).
const FUEL: u64 = 20_000_000;

/// What one rendering may write: 1 MiB, and 8 bytes for each byte of the row (its messages
/// and tools as JSON). A chat template adds a few tokens a turn; a filter such as
/// `tojson(indent=300000)` is charged no fuel for what it makes and wrote 2.4 GB for 113 rows
/// (reliability-probe-4 D11).
fn output_cap(row_bytes: usize) -> usize {
    (1 << 20) + row_bytes.saturating_mul(8)
}

/// A special token as `tokenizer_config.json` writes it: a string, or `{"content": ...}`.
fn token(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(o)) => o
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// `(template text, bos, eos)` of a file: a `tokenizer_config.json` (its `chat_template`, a
/// string or a list of named templates, of which `default`), or the template itself.
fn parse_file(path: &Path, text: String) -> Result<(String, String, String), TemplateError> {
    let bad = |msg: String| TemplateError::Bad {
        path: path.to_path_buf(),
        msg,
    };
    if !text.trim_start().starts_with('{') || text.trim_start().starts_with("{%") {
        return Ok((text, String::new(), String::new()));
    }
    let Ok(Value::Object(cfg)) = serde_json::from_str::<Value>(&text) else {
        // A template may well start with `{{`: JSON it is not, so it is the template.
        return Ok((text, String::new(), String::new()));
    };
    let template = match cfg.get("chat_template") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(named)) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template").and_then(Value::as_str))
            .ok_or_else(|| bad("chat_template: no template named \"default\" in the list".into()))?
            .to_string(),
        Some(_) => {
            return Err(bad(
                "chat_template: not a string or a list of templates".into()
            ));
        }
        None => {
            return Err(bad(
                "no chat_template field (give the model's tokenizer_config.json or its \
                 chat_template.jinja)"
                    .into(),
            ));
        }
    };
    Ok((
        template,
        token(cfg.get("bos_token")),
        token(cfg.get("eos_token")),
    ))
}

/// `raise_exception(msg)`, which chat templates call on input they refuse.
fn raise_exception(msg: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(format)`, which some templates call to date their system prompt.
fn strftime_now(format: String) -> String {
    chrono::Local::now().format(&format).to_string()
}

impl ChatTemplate {
    /// Reads and compiles the template in `path`, or the built-in template of that name when
    /// no such file exists.
    pub fn load(path: &Path) -> Result<ChatTemplate, TemplateError> {
        let text = match file::read(path)? {
            file::Found::Text(text) => text,
            file::Found::Missing(source) => {
                let name = path.to_str().unwrap_or_default();
                if let Some(b) = builtin::find(name) {
                    return Self::compile(path, b.text.to_string(), String::new(), String::new());
                }
                return Err(TemplateError::Read {
                    path: path.to_path_buf(),
                    source: std::io::Error::new(
                        source.kind(),
                        format!(
                            "{source} (and no built-in template has that name: {})",
                            builtin::names()
                        ),
                    ),
                });
            }
        };
        let (source, bos_token, eos_token) = parse_file(path, text)?;
        Self::compile(path, source, bos_token, eos_token)
    }

    fn compile(
        path: &Path,
        source: String,
        bos_token: String,
        eos_token: String,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        // As transformers compiles chat templates.
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(|e| TemplateError::Bad {
                    path: path.to_path_buf(),
                    msg: e.to_string(),
                })?,
        );
        env.set_fuel(Some(FUEL));
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(pystr::unknown_method);
        env.add_filter("trim", pystr::trim);
        env.add_filter("tojson", tojson::tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source)
            .map_err(|e| TemplateError::Bad {
                path: path.to_path_buf(),
                msg: describe(&e),
            })?;
        Ok(ChatTemplate {
            env,
            path: path.to_path_buf(),
            bos_token,
            eos_token,
            kwargs: serde_json::Map::new(),
            keys: Keys::default(),
        })
    }

    /// Template options as `KEY=JSON` (`thinking=true`), passed to every rendering.
    pub fn with_kwargs(mut self, pairs: &[String]) -> Result<ChatTemplate, TemplateError> {
        for pair in pairs {
            let bad = |msg: String| TemplateError::Bad {
                path: self.path.clone(),
                msg: format!("--template-kwarg {pair}: {msg}"),
            };
            let (key, json) = pair
                .split_once('=')
                .ok_or_else(|| bad("expected KEY=JSON, e.g. thinking=true".into()))?;
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(bad(format!("{key:?} is not a template variable name")));
            }
            if RESERVED.contains(&key) {
                return Err(bad(format!("{key} is set by harvest itself")));
            }
            let value: Value = serde_json::from_str(json).map_err(|e| {
                bad(format!(
                    "the value is not JSON ({e}); a string needs quotes: {key}='\"text\"'"
                ))
            })?;
            self.kwargs.insert(key.to_string(), value);
        }
        Ok(self)
    }

    /// Refuses the template when its text, its special tokens or its options hold one of
    /// `keys`, and makes a rendering that writes one fail with [`TemplateError::RendersKey`]
    /// (see `keys` for why refused rather than scrubbed).
    pub fn refusing_keys(mut self, keys: Keys) -> Result<ChatTemplate, TemplateError> {
        let source = (self.env.get_template(NAME))
            .map(|t| t.source().to_string())
            .unwrap_or_default();
        let kwargs = Value::Object(self.kwargs.clone()).to_string();
        for text in [&source, &self.bos_token, &self.eos_token, &kwargs] {
            if let Some(var) = keys.found_in(text) {
                return Err(TemplateError::HoldsKey {
                    path: self.path.clone(),
                    var: var.to_string(),
                });
            }
        }
        self.keys = keys;
        Ok(self)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The training text of one row: `messages` is `[{role, content, reasoning_content?}]`.
    pub fn render(&self, id: &str, messages: &Value) -> Result<String, TemplateError> {
        self.render_with_tools(id, messages, &Value::Null)
    }

    /// The training text of one row offered `tools` (a list of function schemas, or null), as
    /// `apply_chat_template(messages, tools=...)` renders it.
    pub fn render_with_tools(
        &self,
        id: &str,
        messages: &Value,
        tools: &Value,
    ) -> Result<String, TemplateError> {
        let fail = |e: Error| TemplateError::Render {
            path: self.path.clone(),
            id: id.to_string(),
            msg: describe(&e),
            cause: match e.line() {
                Some(n) => format!("line {n}: {}", e.kind()),
                None => e.kind().to_string(),
            },
            runaway: e.kind() == ErrorKind::OutOfFuel,
        };
        let t = self.env.get_template(NAME).map_err(fail)?;
        let text = t
            .render(context! {
                messages => Serde(messages),
                add_generation_prompt => false,
                bos_token => &self.bos_token,
                eos_token => &self.eos_token,
                tools => Serde(tools),
                ..minijinja::value::Value::from(Serde(&self.kwargs))
            })
            .map_err(fail)?;
        let row_bytes = messages.to_string().len() + tools.to_string().len();
        let cap = output_cap(row_bytes);
        if text.len() > cap {
            return Err(TemplateError::Render {
                path: self.path.clone(),
                id: id.to_string(),
                msg: format!(
                    "it wrote {} bytes for a row of {row_bytes}, more than the {cap} a chat \
                     template may (1 MiB and 8 bytes a byte of the row)",
                    text.len()
                ),
                cause: "wrote more than a chat template may".to_string(),
                runaway: true,
            });
        }
        // Its text holds none (`refusing_keys`): a row brought it, or the template built it
        // from pieces. Either way, not into training.
        if let Some(var) = self.keys.found_in(&text) {
            return Err(TemplateError::RendersKey {
                path: self.path.clone(),
                id: id.to_string(),
                var: var.to_string(),
            });
        }
        Ok(text)
    }
}

/// A template error with its line, without the engine's own name for the template.
fn describe(e: &Error) -> String {
    let what = match e.detail() {
        Some(d) => format!("{}: {d}", e.kind()),
        None => e.kind().to_string(),
    };
    match e.line() {
        Some(n) => format!("line {n}: {what}"),
        None => what,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn a_tokenizer_config_or_a_bare_template_renders_with_its_tokens_and_python_methods() {
        let dir = tempfile::tempdir().expect("tmp");
        let body = "{{ bos_token }}{% for m in messages %}[{{ m.role.upper() }}]\n\
                    {{ m.content.strip() }}{% if m.reasoning_content is defined %} \
                    ({{ m.reasoning_content }}){% endif %}\n{% endfor %}{{ eos_token }}";
        let cfg = json!({"bos_token": {"content": "<s>"}, "eos_token": "</s>",
                         "chat_template": [{"name": "tool_use", "template": "x"},
                                           {"name": "default", "template": body}]});
        let messages = json!([{"role": "user", "content": " hi "},
                              {"role": "assistant", "content": "yo", "reasoning_content": "r"}]);
        let from_cfg = write(dir.path(), "tokenizer_config.json", &cfg.to_string());
        let t = ChatTemplate::load(&from_cfg).expect("loads");
        assert_eq!(
            t.render("a", &messages).expect("renders"),
            // trim_blocks: the newline after `{% endif %}` goes, as in transformers.
            "<s>[USER]\nhi[ASSISTANT]\nyo (r)</s>"
        );
        // The same template as a file of its own: no special tokens.
        let bare = write(dir.path(), "chat_template.jinja", body);
        let t = ChatTemplate::load(&bare).expect("loads");
        assert_eq!(
            t.render("a", &messages).expect("renders"),
            "[USER]\nhi[ASSISTANT]\nyo (r)"
        );
    }

    #[test]
    fn errors_name_the_file_and_the_line_or_the_row() {
        let dir = tempfile::tempdir().expect("tmp");
        let cases: Vec<(&str, &str, &str)> = vec![
            (
                "broken.jinja",
                "line one\n{% for m in messages %}",
                "broken.jinja: line ",
            ),
            (
                "no_field.json",
                r#"{"bos_token": "<s>"}"#,
                "no_field.json: no chat_template field",
            ),
            (
                "unnamed.json",
                r#"{"chat_template": [{"name": "tool_use", "template": "x"}]}"#,
                "no template named \"default\"",
            ),
        ];
        for (name, text, want) in cases {
            let p = write(dir.path(), name, text);
            let err = ChatTemplate::load(&p).err().expect("refused").to_string();
            assert!(err.contains(want), "{name}: {err}");
        }
        let p = write(
            dir.path(),
            "strict.jinja",
            "{% if messages[0].role != 'system' %}{{ raise_exception('a system turn first') }}{% endif %}",
        );
        let t = ChatTemplate::load(&p).expect("loads");
        let err = t
            .render("row-7", &json!([{"role": "user", "content": "q"}]))
            .expect_err("refused")
            .to_string();
        assert!(err.contains("rendering row row-7"), "{err}");
        assert!(err.contains("a system turn first"), "{err}");
        // A FIFO (or a directory) is refused at once, not opened and waited on.
        let fifo = dir.path().join("t.jinja");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let err = ChatTemplate::load(&fifo)
                .err()
                .expect("refused")
                .to_string();
            assert!(err.contains("not a regular file"), "{err}");
        }
        let err = ChatTemplate::load(dir.path())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    /// A filter that writes far more than the row (reliability-probe-4 D11: `tojson` with a
    /// huge indent wrote 2.4 GB for 113 rows) fails the row; a real rendering is a few tokens
    /// a turn more than the row.
    #[test]
    fn a_rendering_may_write_only_so_much_more_than_its_row() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = write(
            dir.path(),
            "indent.jinja",
            "{{ messages|tojson(indent=300000) }}",
        );
        let t = ChatTemplate::load(&p).expect("compiles");
        let err = t
            .render(
                "r",
                &json!([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]),
            )
            .expect_err("capped");
        assert_eq!(err.cause(), Some("wrote more than a chat template may"));
        assert!(err.to_string().contains("more than the"), "{err}");
        let p = write(
            dir.path(),
            "plain.jinja",
            "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}",
        );
        let t = ChatTemplate::load(&p).expect("compiles");
        let long = "word ".repeat(300_000);
        let text = t
            .render("r", &json!([{"role": "user", "content": long}]))
            .expect("a long row renders");
        assert!(text.len() > 1 << 20);
    }

    /// A template that holds the key (the probe's `/proc/self/environ`, copied to a file as
    /// `env > chat_template.jinja` would) is refused, naming the file and the variable; one
    /// that renders the key from a row fails that rendering. Neither message holds the key.
    #[test]
    fn a_template_that_would_render_the_key_is_refused() {
        const KEY: &str = "sk-or-v1-0123456789abcdef0123456789abcdef";
        let dir = tempfile::tempdir().expect("tmp");
        let keys = || {
            let env = [("OR_TEST_KEY", KEY), ("PATH", "/usr/bin:/bin")];
            Keys::from_vars(
                &["OR_TEST_KEY".into()],
                env.map(|(n, v)| (n.into(), v.into())),
            )
        };
        let environ = write(
            dir.path(),
            "chat_template.jinja",
            &format!("HOME=/root\nOR_TEST_KEY={KEY}\nPATH=/usr/bin:/bin\n"),
        );
        let err = ChatTemplate::load(&environ)
            .expect("a static text compiles")
            .refusing_keys(keys())
            .err()
            .expect("refused")
            .to_string();
        assert!(err.contains("chat_template.jinja"), "{err}");
        assert!(
            err.contains("the value of OR_TEST_KEY, the API key"),
            "{err}"
        );
        assert!(!err.contains(KEY), "{err}");
        // In a tokenizer_config.json's special token, or an option given on the command line.
        let cfg = write(
            dir.path(),
            "tokenizer_config.json",
            &json!({"chat_template": "{{ bos_token }}", "bos_token": KEY}).to_string(),
        );
        let t = ChatTemplate::load(&cfg).expect("loads");
        assert!(t.refusing_keys(keys()).is_err());
        let plain = write(dir.path(), "plain.jinja", "{{ messages[0].content }}");
        let kwarg = format!("k=\"{KEY}\"");
        let t = ChatTemplate::load(&plain).expect("loads");
        let t = t.with_kwargs(&[kwarg]).expect("kwarg");
        assert!(t.refusing_keys(keys()).is_err());
        // A rendering that writes the key, from a row, fails as the export's stopper.
        let t = ChatTemplate::load(&plain)
            .expect("loads")
            .refusing_keys(keys())
            .expect("holds no key");
        let row = json!([{"role": "user", "content": format!("my key is {KEY}")}]);
        let err = t.render("row-3", &row).expect_err("refused");
        assert!(err.renders_key(), "{err}");
        let said = err.to_string();
        assert!(
            said.contains("rendering row row-3 wrote the value of OR_TEST_KEY"),
            "{said}"
        );
        assert!(!said.contains(KEY), "{said}");
        // Other rows render.
        let ok = t.render("row-4", &json!([{"role": "user", "content": "hi"}]));
        assert_eq!(ok.expect("renders"), "hi");
    }

    /// Templates that would never end, or would take all memory, stop with an error.
    #[test]
    fn runaway_templates_stop_on_their_fuel() {
        let dir = tempfile::tempdir().expect("tmp");
        let cases = [
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
            "{% set ns = namespace(s='xxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
        ];
        for (i, text) in cases.iter().enumerate() {
            let p = write(dir.path(), &format!("t{i}.jinja"), text);
            let t = ChatTemplate::load(&p).expect("compiles");
            let err = t
                .render("r", &json!([{"role": "user", "content": "q"}]))
                .expect_err("stopped")
                .to_string();
            assert!(err.contains("fuel"), "{err}");
        }
    }
}
