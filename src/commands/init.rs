//! `harvest init`: a starting `harvest.toml` for a real run, written from what is known now:
//! the model's endpoint listing judged by the default (faithful) policy, each prompt file
//! counted with its shape and field names found, and the estimate's verdict against the
//! budget. Every value carries a one-line reason, so the file teaches what it sets. It never
//! overwrites a file.

use super::stdout::out;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::BadInput;
use crate::cli::InitArgs;
use crate::commands::providers::ProvidersReport;
use crate::store::prompts::{FileKind, PromptCount, PromptFields};

/// What a prompt file was found to be.
#[derive(Clone, Debug)]
struct FoundFile {
    name: String,
    /// As written in the config: relative to the config's directory when it can be.
    path: String,
    kind: FileKind,
    fields: PromptFields,
    /// The fields the mapping was read from, for the comment.
    found: Vec<String>,
    count: PromptCount,
}

/// harvest's own field names: a row with one of them needs no mapping.
const OWN: [&str; 3] = ["prompt", "messages", "conversations"];
/// Names datasets give the prompt's text, in the order they are tried.
const PROMPT_NAMES: [&str; 7] = [
    "instruction",
    "question",
    "query",
    "problem",
    "input",
    "text",
    "content",
];
/// Names datasets give a list of turns.
const TURN_NAMES: [&str; 4] = ["dialog", "dialogue", "turns", "chat"];
/// Names datasets give the row's id.
const ID_NAMES: [&str; 5] = ["id", "uid", "_id", "sample_id", "question_id"];

/// The field names of a row as `harvest` should read them, and the fields they came from;
/// `None` when nothing in the row holds a prompt.
fn guess_fields(row: &Map<String, Value>) -> Option<(PromptFields, Vec<String>)> {
    let text = |k: &str| row.get(k).is_some_and(Value::is_string);
    let mut fields = PromptFields::default();
    let mut found = Vec::new();
    if !OWN
        .iter()
        .any(|k| row.get(*k).is_some_and(|v| !v.is_null()))
    {
        if let Some(k) = TURN_NAMES
            .iter()
            .find(|k| row.get(**k).is_some_and(Value::is_array))
        {
            fields.messages = Some(k.to_string());
        } else {
            let first = PROMPT_NAMES.iter().find(|k| text(k))?;
            fields.prompt.push(first.to_string());
            // Alpaca: the instruction's input goes with it.
            if *first == "instruction" && text("input") {
                fields.prompt.push("input".into());
            }
        }
        found.extend(fields.prompt.iter().chain(&fields.messages).cloned());
    }
    if text("system") {
        fields.system = Some("system".into());
        found.push("system".into());
    }
    if let Some(k) = ID_NAMES.iter().find(|k| row.contains_key(**k))
        && *k != "id"
    {
        fields.id = Some(k.to_string());
        found.push(k.to_string());
    }
    Some((fields, found))
}

/// A dataset name from a file name: its stem without `.jsonl`/`.gz`/`.zst`, in the characters a
/// dataset name may have, unique among `taken`.
fn dataset_name(path: &Path, taken: &[String]) -> String {
    let mut stem = path
        .file_name()
        .map(|f| f.to_string_lossy().to_string())
        .unwrap_or_default();
    for ext in [".gz", ".zst", ".jsonl", ".json", ".ndjson", ".parquet"] {
        if let Some(s) = stem.strip_suffix(ext) {
            stem = s.to_string();
        }
    }
    let mut name: String = stem
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with('.') {
        name.insert_str(0, "prompts");
    }
    // A name of harvest's own files (`spend`, `state`, ...) would collide with them.
    if crate::config::RESERVED_NAMES.contains(&name.to_ascii_lowercase().as_str()) {
        name.push_str("_prompts");
    }
    let mut unique = name.clone();
    let mut n = 2;
    while taken.iter().any(|t| t.eq_ignore_ascii_case(&unique)) {
        unique = format!("{name}-{n}");
        n += 1;
    }
    unique
}

/// Reads one prompt file: its shape, its field names, its count.
fn find(path: &Path, config_dir: &Path, taken: &[String]) -> anyhow::Result<FoundFile> {
    let shown = path.display();
    // A FIFO, a device or a socket would block the read or never end.
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
        && !m.is_dir()
    {
        return Err(BadInput(format!(
            "{shown} is not a regular file (a FIFO, a device or a socket): give a prompt file"
        ))
        .into());
    }
    let (kind, row) = crate::store::prompts::first_row(path)
        .map_err(|e| BadInput(format!("cannot read {shown}: {e}")))?;
    let row = row.ok_or_else(|| {
        BadInput(match kind {
            crate::store::prompts::FileKind::Parquet => {
                format!("{shown}: a Parquet file with no rows")
            }
            _ => format!(
                "{shown}: no JSON object in its first 1,000 lines: harvest reads JSONL, one \
                 object a line (plain, .gz or .zst), or Parquet"
            ),
        })
    })?;
    let (fields, found) = guess_fields(&row).ok_or_else(|| {
        let keys: Vec<&str> = row.keys().map(String::as_str).collect();
        BadInput(format!(
            "{shown}: its rows have no field harvest knows as the prompt (fields: {}); add \
             prompt_field = \"<the field>\" (or messages_field for a list of turns) to the \
             dataset by hand",
            keys.join(", ")
        ))
    })?;
    let count = crate::store::prompts::count_prompts_in_shard(path, &fields, None)
        .map_err(|e| BadInput(e.to_string()))?;
    // Relative to the config's directory when the file is under it, else absolute: a config
    // resolves its paths from its own directory, not from where `init` ran.
    let absolute = path.canonicalize().ok();
    let written = (absolute.as_deref())
        .and_then(|p| {
            let dir = config_dir.canonicalize().ok()?;
            p.strip_prefix(dir).ok().map(Path::to_path_buf)
        })
        .or(absolute.clone())
        .unwrap_or_else(|| path.to_path_buf());
    Ok(FoundFile {
        name: dataset_name(path, taken),
        path: written.display().to_string(),
        kind,
        fields,
        found,
        count,
    })
}

/// A TOML string.
fn q(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The config's text: every value with its reason.
fn render(args: &InitArgs, report: &ProvidersReport, files: &[FoundFile]) -> String {
    let mut t = String::new();
    let line = |t: &mut String, s: &str| {
        t.push_str(s);
        t.push('\n');
    };
    line(
        &mut t,
        &format!(
            "# harvest.toml for {}, written by `harvest init`. Check it with `harvest run --check`\n\
             # (sends nothing), see what it costs with `harvest estimate`, then `harvest run`.\n",
            args.model
        ),
    );
    line(&mut t, &format!("model = {}", q(&args.model)));
    if args.base_url != crate::openrouter::DEFAULT_BASE_URL {
        line(&mut t, &format!("base_url = {}", q(&args.base_url)));
    }
    line(
        &mut t,
        "# The variable that holds the key (never the key itself). Give the run a key of its own\n\
         # with a credit limit equal to budget_usd: OpenRouter then enforces the budget too.",
    );
    line(&mut t, &format!("api_key_env = {}", q(&args.api_key_env)));
    line(
        &mut t,
        "# The hard cap on spend, in dollars, across every run of this output directory.",
    );
    line(&mut t, &format!("budget_usd = {:?}", args.budget));
    line(
        &mut t,
        "# Streams at once. OpenRouter serves thousands; the account's in-flight budget is\n\
         # learned from its 402s, so this is a ceiling, not a promise.",
    );
    line(&mut t, "concurrency = 256");
    line(&mut t, "output_dir = \"out\"\n");
    line(&mut t, "[request]");
    line(
        &mut t,
        "# A thinking model spends its tokens thinking first: an answer cut at max_tokens while\n\
         # thinking has no text (kept as a truncated row). Room for the thinking and the answer.",
    );
    line(&mut t, "max_tokens = 16384\n");
    line(&mut t, "[policy]");
    let native = report.native_quantization.to_string();
    if report.native_known {
        line(
            &mut t,
            &format!("# The precision {} was released in.", args.model),
        );
        line(&mut t, &format!("native_quantization = {}", q(&native)));
    } else {
        line(
            &mut t,
            &format!(
                "# The precision {} was released in is not known to harvest: bf16 is assumed.\n\
                 # Set it, so that the policy keeps only endpoints that serve it faithfully.\n\
                 # native_quantization = \"bf16\"",
                args.model
            ),
        );
    }
    line(
        &mut t,
        "# faithful: the released precision or a lossless upcast; \"any\" allows everything.",
    );
    line(&mut t, "mode = \"faithful\"");
    line(
        &mut t,
        &format!(
            "# The listing now: {} of {} endpoints allowed, $ per million tokens in / out.",
            report.allowed,
            report.endpoints.len()
        ),
    );
    for e in &report.endpoints {
        let verdict = match &e.excluded {
            None => "allowed".to_string(),
            Some(why) => format!("excluded: {why}"),
        };
        // The listing is a server's text: a newline in it would end this comment and write
        // TOML (reliability-probe-4 N2). Tags and precisions are shown only as what they claim
        // to be; the rest on one line.
        let listed = format!(
            "#   {:<28} {:>6.2} / {:>6.2}  {:<8} {verdict}",
            listed_token(&e.tag),
            e.price_in_per_m,
            e.price_out_per_m,
            listed_token(e.quantization.as_str())
        );
        line(&mut t, &crate::printable::one_line(&listed));
    }
    for f in files {
        dataset(&mut t, f);
    }
    t
}

/// A tag or a precision of the listing as a comment shows it: the text when it is made of the
/// characters such names are made of (`chutes/int4`, `fp8`, `novita/fp8:free`), else `?`.
fn listed_token(s: &str) -> &str {
    if crate::domain::EndpointTag::is_plain(s) {
        s
    } else {
        "?"
    }
}

/// One `[[dataset]]` table: the file, what it holds, its field names.
fn dataset(t: &mut String, f: &FoundFile) {
    let line = |t: &mut String, s: &str| {
        t.push_str(s);
        t.push('\n');
    };
    line(t, "\n[[dataset]]");
    line(t, &format!("name = {}", q(&f.name)));
    let bad = match f.count.invalid {
        0 => String::new(),
        n => format!(", {n} bad lines (the first: {})", first_error(f)),
    };
    // Rows whose id an earlier row has are sent once: say so, or 40 rows read as 8 prompts.
    let bad = match f.count.duplicates {
        0 => bad,
        1 => format!("{bad}, 1 duplicate row (an id seen before: sent once)"),
        n => format!(
            "{bad}, {} duplicate rows (ids seen before: sent once)",
            crate::domain::group_thousands(n)
        ),
    };
    line(
        t,
        &format!(
            "prompts = {}  # {}, {} prompts{bad}",
            q(&f.path),
            f.kind.label(),
            crate::domain::group_thousands(f.count.valid)
        ),
    );
    // The prompt file's own field names, one line whatever they hold.
    let found = crate::printable::one_line(&f.found.join(", ")).into_owned();
    match f.fields.prompt.as_slice() {
        [] => {}
        [one] => line(t, &format!("prompt_field = {}  # found: {found}", q(one))),
        many => line(
            t,
            &format!(
                "prompt_field = [{}]  # joined by a blank line; found: {found}",
                many.iter().map(|m| q(m)).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
    for (key, value) in [
        ("messages_field", &f.fields.messages),
        ("system_field", &f.fields.system),
        ("id_field", &f.fields.id),
    ] {
        if let Some(v) = value {
            line(t, &format!("{key} = {}", q(v)));
        }
    }
    if f.count.with_assistant_turns > 0 {
        // A trainer supervises every assistant turn of a row: turns the model did not write
        // would be trained on as its own. "all" has it write each (one request a turn).
        line(
            t,
            &format!(
                "turns = \"all\"  # {} of {} prompts carry assistant turns: the model writes \
                 each of them (one request a turn); \"last\" answers only the last, and export \
                 leaves those rows out",
                crate::domain::group_thousands(f.count.with_assistant_turns),
                crate::domain::group_thousands(f.count.valid)
            ),
        );
    }
}

fn first_error(f: &FoundFile) -> String {
    f.count
        .first_error
        .as_ref()
        .map_or_else(String::new, |e| format!("line {}", e.line))
}

pub async fn run(args: InitArgs) -> anyhow::Result<()> {
    if args.out.exists() {
        return Err(BadInput(format!(
            "{} exists: harvest init never overwrites a file. Move it away, or write elsewhere \
             with --out",
            args.out.display()
        ))
        .into());
    }
    if !(args.budget.is_finite() && args.budget > 0.0) {
        return Err(BadInput(format!(
            "--budget must be a number of dollars > 0, got {}",
            args.budget
        ))
        .into());
    }
    if args.budget > crate::config::MAX_BUDGET_USD {
        return Err(BadInput(format!(
            "--budget must be at most {} USD, got {}",
            crate::config::MAX_BUDGET_USD,
            args.budget
        ))
        .into());
    }
    let config_dir = match args.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !config_dir.is_dir() {
        return Err(BadInput(format!(
            "{} is not a directory: --out must name a file in an existing directory",
            config_dir.display()
        ))
        .into());
    }
    let mut files: Vec<FoundFile> = Vec::new();
    for p in &args.prompts {
        let taken: Vec<String> = files.iter().map(|f| f.name.clone()).collect();
        files.push(find(p, &config_dir, &taken)?);
    }
    let client = crate::openrouter::OpenRouterClient::new(crate::openrouter::ClientOptions::new(
        args.base_url.clone(),
        crate::openrouter::ApiKey::from_env(&args.api_key_env),
    ))
    .map_err(|e| BadInput(e.to_string()))?;
    let listing = super::providers::fetch(&client, &args.model).await?;
    let policy = crate::policy::PolicyConfig::default();
    let report = super::providers::report(&args.model, &listing, &policy, None);
    let mut text = render(&args, &report, &files);
    // The estimate of the config as written: what it costs against the budget.
    if !files.is_empty() {
        let cfg = crate::config::Config::parse(&text, &args.out)
            .map_err(|e| anyhow::anyhow!("the config init wrote does not load (a bug): {e}"))?;
        let opts = super::estimate::EstimateOptions::default();
        match super::estimate::estimate_config(&cfg, &opts).await {
            Ok(est) => {
                let verdict = crate::estimate::render::verdict_text(&est);
                text.push_str("\n# The estimate now (`harvest estimate` for the whole table):\n");
                for l in verdict.lines() {
                    text.push_str(&format!("#   {l}\n"));
                }
            }
            Err(e) => text.push_str(&format!(
                "\n# No estimate: {}\n",
                crate::printable::one_line(&e.to_string())
            )),
        }
    } else {
        text.push_str(
            "\n# No prompt files were given: add a [[dataset]] with name and prompts, e.g.\n\
             # [[dataset]]\n# name = \"prompts\"\n# prompts = \"prompts.jsonl\"\n",
        );
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.out)
        .map_err(|e| BadInput(format!("cannot write {}: {e}", args.out.display())))?;
    std::io::Write::write_all(&mut f, text.as_bytes())
        .map_err(|e| BadInput(format!("cannot write {}: {e}", args.out.display())))?;
    out!("{}", crate::printable::printable(&text));
    eprintln!(
        "harvest: wrote {}; next: export {}=sk-or-..., then harvest run --check -c {}",
        args.out.display(),
        args.api_key_env,
        args.out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rows_fields_are_found_by_the_names_datasets_use() {
        let row = |v: Value| v.as_object().cloned().expect("object");
        // What is checked, the row, the prompt fields, the turns field, system, id.
        type Want = Option<(
            &'static [&'static str],
            Option<&'static str>,
            Option<&'static str>,
            Option<&'static str>,
        )>;
        let cases: Vec<(&str, Value, Want)> = vec![
            (
                "harvest's own shape",
                serde_json::json!({"id": 1, "prompt": "q"}),
                Some((&[], None, None, None)),
            ),
            (
                "Alpaca",
                serde_json::json!({"instruction": "i", "input": "", "output": "o"}),
                Some((&["instruction", "input"], None, None, None)),
            ),
            (
                "a question with its uid and system",
                serde_json::json!({"uid": "u", "question": "q", "system": "s"}),
                Some((&["question"], None, Some("system"), Some("uid"))),
            ),
            (
                "a list of turns",
                serde_json::json!({"dialog": [{"from": "human", "value": "hi"}]}),
                Some((&[], Some("dialog"), None, None)),
            ),
            (
                "messages with a system field",
                serde_json::json!({"messages": [], "system": "s"}),
                Some((&[], None, Some("system"), None)),
            ),
            (
                "nothing that holds a prompt",
                serde_json::json!({"a": 1, "b": [2]}),
                None,
            ),
        ];
        for (what, r, want) in cases {
            let got = guess_fields(&row(r)).map(|(f, _)| f);
            let want = want.map(|(p, m, s, i)| PromptFields {
                prompt: p.iter().map(|x| x.to_string()).collect(),
                messages: m.map(Into::into),
                system: s.map(Into::into),
                id: i.map(Into::into),
            });
            assert_eq!(got, want, "{what}");
        }
    }

    /// A listing whose fields carry newlines and TOML (reliability-probe-4 N2): the config
    /// written from it holds no table, no key and no line that the listing made.
    #[test]
    fn listing_text_never_becomes_config() {
        let injected =
            "fp8\n[[endpoint]]\nname = \"evil\"\nbase_url = \"http://127.0.0.1:18999/v1\"\n#";
        let body = serde_json::json!({"data": {"id": "moonshotai/kimi-k2.5", "endpoints": [
            {"provider_name": "Chutes", "tag": "chutes/int4", "quantization": "int4",
             "pricing": {"prompt": "0.0000006", "completion": "0.0000025"}},
            {"provider_name": "Venice", "tag": "venice", "quantization": injected,
             "pricing": {"prompt": "0.0000006", "completion": "0.0000025"}},
            {"provider_name": "Evil", "tag": "evil\r\n[request]\nmax_tokens = 1",
             "quantization": "int4\u{2028}x = 1",
             "pricing": {"prompt": "0.0000006", "completion": "0.0000025"}},
        ]}});
        let listing =
            crate::openrouter::catalog::ModelEndpoints::parse(body.to_string().as_bytes())
                .expect("listing");
        let report = crate::commands::providers::report(
            "moonshotai/kimi-k2.5",
            &listing,
            &crate::policy::PolicyConfig::default(),
            None,
        );
        let args = InitArgs {
            prompts: vec![],
            model: "moonshotai/kimi-k2.5".into(),
            budget: 10.0,
            base_url: crate::openrouter::DEFAULT_BASE_URL.into(),
            api_key_env: "OPENROUTER_API_KEY".into(),
            out: PathBuf::from("harvest.toml"),
        };
        let text = render(&args, &report, &[]);
        let table: toml::Table = text.parse().expect("the config parses");
        let mut keys: Vec<&String> = table.keys().collect();
        keys.sort();
        assert!(!table.contains_key("endpoint"), "{text}");
        assert_eq!(
            keys,
            [
                "api_key_env",
                "budget_usd",
                "concurrency",
                "model",
                "output_dir",
                "policy",
                "request"
            ],
            "{text}"
        );
        assert_eq!(
            table["request"].as_table().expect("request").len(),
            1,
            "{text}"
        );
        for l in text.lines() {
            assert!(!l.contains("evil") || l.starts_with('#'), "{l:?}");
        }
        assert!(text.contains("#   chutes/int4"), "{text}");
        assert!(
            text.lines()
                .any(|l| l.starts_with("#   venice") && l.contains(" ? ")),
            "{text}"
        );
    }

    /// A file of 40 rows of which 32 repeat an id reads as 8 prompts and says why; rows with
    /// assistant turns of their own get `turns = "all"` proposed, with what it costs (the
    /// newcomer review: "8 prompts" for 40 rows, no word on the dataset's own answers).
    #[test]
    fn a_dataset_says_its_duplicate_rows_and_proposes_every_turn_for_its_own_answers() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut text = String::new();
        for i in 0..40 {
            let id = i % 8;
            text.push_str(&format!(
                "{{\"id\": \"c{id}\", \"messages\": [{{\"role\": \"user\", \"content\": \"q{id}\"}}, \
                 {{\"role\": \"assistant\", \"content\": \"old\"}}, {{\"role\": \"user\", \"content\": \"more\"}}]}}\n"
            ));
        }
        let path = dir.path().join("chats.jsonl");
        std::fs::write(&path, text).expect("write");
        let f = find(&path, dir.path(), &[]).expect("found");
        let mut t = String::new();
        dataset(&mut t, &f);
        assert!(
            t.contains("8 prompts, 32 duplicate rows (ids seen before: sent once)"),
            "{t}"
        );
        let turns = (t.lines())
            .find(|l| l.starts_with("turns = "))
            .expect("a turns line");
        assert!(
            turns.starts_with("turns = \"all\"  # 8 of 8 prompts carry assistant turns"),
            "{turns}"
        );
        let table: toml::Table = t.parse().expect("the table parses");
        assert_eq!(table["dataset"][0]["turns"].as_str(), Some("all"));
        // A file of plain prompts gets neither.
        std::fs::write(&path, "{\"prompt\": \"a\"}\n{\"prompt\": \"b\"}\n").expect("write");
        let f = find(&path, dir.path(), &[]).expect("found");
        let mut t = String::new();
        dataset(&mut t, &f);
        assert!(!t.contains("duplicate") && !t.contains("turns ="), "{t}");
    }

    #[test]
    fn dataset_names_come_from_the_files_and_stay_unique() {
        let taken = ["alpaca".to_string()];
        let cases = [
            ("data/alpaca.jsonl.zst", &[][..], "alpaca"),
            (
                "train-00000-of-00001.parquet",
                &[][..],
                "train-00000-of-00001",
            ),
            ("data/alpaca.jsonl.gz", &taken[..], "alpaca-2"),
            ("b3 math (v2).jsonl", &[][..], "b3_math__v2_"),
            (".jsonl", &[][..], "prompts"),
            // Names of harvest's own files, in any case.
            ("spend.jsonl", &[][..], "spend_prompts"),
            ("State.jsonl.zst", &[][..], "State_prompts"),
            ("harvest.parquet", &[][..], "harvest_prompts"),
        ];
        for (path, taken, want) in cases {
            assert_eq!(dataset_name(Path::new(path), taken), want, "{path}");
        }
    }
}
