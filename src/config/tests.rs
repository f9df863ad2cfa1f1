//! The config's tests: parsing, defaults, every error naming its file, line and key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::*;
use crate::domain::{Price, Quantization, Usd};
use crate::openrouter::request::Message;
use crate::policy::{PolicyConfig, PolicyMode};

const EXAMPLE: &str = include_str!("../../assets/config/example.toml");
const MINIMAL: &str = include_str!("../../assets/config/minimal.toml");
const ONE: &str = "[[dataset]]\nname = \"B3\"\nprompts = \"data/b3.jsonl\"\n";

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse_unchecked(text, Path::new("harvest.toml"))
}

#[test]
fn defaults() {
    let c = parse(ONE).expect("config");
    assert_eq!(c.model, "moonshotai/kimi-k2.5");
    assert_eq!(c.base_url, "https://openrouter.ai/api/v1");
    assert_eq!(c.api_key_env, "OPENROUTER_API_KEY");
    assert_eq!(c.output_dir, PathBuf::from("out"));
    assert_eq!((c.budget_usd, c.concurrency), (10.0, 256));
    assert_eq!(c.requests_per_second, None);
    assert_eq!(
        (c.routing, c.schedule, c.on_bad_line),
        (Routing::Openrouter, Schedule::Interleaved, OnBadLine::Error)
    );
    assert_eq!(c.request, RequestParams::default());
    assert_eq!(c.request.max_tokens, 16384);
    assert_eq!(c.timeouts.first_token(), Duration::from_secs(120));
    assert_eq!(c.timeouts.total(), Duration::from_secs(1800));
    assert_eq!(c.retry, RetryConfig::default());
    assert_eq!(c.retry.base_delay(), Duration::from_millis(500));
    assert_eq!(c.retry.on_length, OnLength::Keep);
    assert_eq!(
        (c.breaker.failures, c.breaker.cooldown()),
        (5, Duration::from_secs(60))
    );
    assert_eq!(c.policy, PolicyConfig::default());
    assert_eq!(c.datasets[0].prompts, PathBuf::from("data/b3.jsonl"));
    assert_eq!(c.datasets[0].output_token_budget, None);
    assert!(c.endpoints.is_empty());
    assert_eq!(c.budget(), Usd::from_pico(10 * Usd::PICO_PER_USD));
}

/// Bad configs, each followed by a `=> ` line: a fragment its error must contain.
const BAD: &str = r#"
budget = 1
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: unknown key `budget` in the top level (expected one of `model`, `base_url`
dataset = [{ name = "a", prompts = "a" }]
openrouter = false
=> harvest.toml:2: openrouter: is false, so at least one [[endpoint]] must serve the run
dataset = [{ name = "a", prompts = "a" }]
[policy]
min_probe_agreement = 90
=> harvest.toml:3: policy.min_probe_agreement: must be between 0 and 1, got 90
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 5
budget = 3
=> harvest.toml:4: unknown key `budget` in [request] (expected one of `max_tokens`
[[dataset]]
name = "a"
prompts = "a"
[[dataset]]
name = "b"
prompts = "b"
output_token_budget = "lots"
=> harvest.toml:7: dataset[1].output_token_budget: invalid type: string "lots", expected u64
dataset = [{ name = "a", prompts = "a" }, { name = "b", prompts = "b", max_samples = -1 }]
=> harvest.toml:1: dataset[1].max_samples: invalid value: integer `-1`, expected u64
[[dataset]]
prompts = "a"
=> harvest.toml:1: dataset[0].name: required key is missing
[[dataset]]
name = "a"
prompts = "a"
[[dataset]]
prompts = "b"
name = "a"
=> harvest.toml:6: dataset[1].name: duplicate dataset name `a` (also dataset[0])
dataset = [{ name = "b 3", prompts = "a" }]
=> harvest.toml:1: dataset[0].name: bad name "b 3": use only
model = "x"
=> harvest.toml: dataset: at least one [[dataset]] table is required
dataset = []
=> harvest.toml:1: dataset: at least one [[dataset]] table is required
dataset = [{ name = "a", prompts = "a" }]
concurrency = 0
=> harvest.toml:2: concurrency: must be between 1 and 100000
concurrency = 100001
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: concurrency: must be between 1 and 100000
budget_usd = 0
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: budget_usd: must be a number > 0, got 0
budget_usd = -5.0
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: budget_usd: must be a number > 0, got -5
budget_usd = 10.0
shard_budget_usd = 12.5
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:2: shard_budget_usd: is 12.5 USD, more than the whole job's budget_usd 10 USD
base_url = "openrouter.ai"
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: base_url: must be an http:// or https:// URL
routing = "fast"
dataset = [{ name = "a", prompts = "a" }]
=> harvest.toml:1: routing: unknown variant `fast`, expected `openrouter` or `pinned`
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 0
=> harvest.toml:3: request.max_tokens: must be > 0
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "high", budget = 3 }
=> harvest.toml:3: unknown key `budget` in [request.reasoning] (expected one of `effort`
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "high", max_tokens = 3 }
=> harvest.toml:3: request.reasoning: set `effort` or `max_tokens`, not both
dataset = [{ name = "a", prompts = "a" }]
[request]
reasoning = { effort = "hgih" }
=> harvest.toml:3: request.reasoning.effort: unknown variant `hgih`
dataset = [{ name = "a", prompts = "a" }]
[timeouts]
idle_s = 0.0
=> harvest.toml:3: timeouts.idle_s: must be a number > 0, got 0
[[dataset]]
name = "a"
prompts = "a"
[dataset.request]
temprature = 0.5
=> harvest.toml:5: unknown key `temprature` in dataset[0].request (expected one of
dataset = [{ name = "a", prompts = "a" }]
[policy]
mode = "strict"
=> harvest.toml:3: policy.mode: unknown variant `strict`, expected `faithful` or `any`
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "ftp://h"
model = "m"
=> harvest.toml:4: endpoint[0].base_url: must be an http:// or https:// URL, got "ftp://h"
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "http://h"
=> harvest.toml:2: endpoint[0].model: required key is missing
dataset = [{ name = "a", prompts = "a" }]
endpoint = [{ name = "x", base_url = "http://h", model = "m", price_out_per_m = -1.0 }]
=> harvest.toml:2: endpoint[0].price_out_per_m: must be >= 0, got -1
dataset = [{ name = "a", prompts = "a" }]
[[endpoint]]
name = "x"
base_url = "http://h"
model = "m"
[[endpoint]]
name = "x"
base_url = "http://h"
model = "m"
=> harvest.toml:7: endpoint[1].name: duplicate endpoint name `x` (also endpoint[0])
dataset = [{ name = "a", prompts = "a" }]
[request]
max_tokens = 5
[request]
=> harvest.toml:4: TOML syntax error: duplicate key at `request`
model =
=> harvest.toml:1: TOML syntax error:
"#;

#[test]
fn bad_configs_name_file_line_and_key() {
    let (mut text, mut cases) = (String::new(), 0);
    for line in BAD.trim_start().lines() {
        let Some(want) = line.strip_prefix("=> ") else {
            text.push_str(line);
            text.push('\n');
            continue;
        };
        let err = parse(&text).expect_err(&text).to_string();
        assert!(
            err.contains(want),
            "config:\n{text}error: {err}\nwanted: {want}"
        );
        text.clear();
        cases += 1;
    }
    assert_eq!(cases, 31);
}

#[test]
fn a_top_level_key_under_a_table_says_it_is_top_level() {
    // reliability-probe-5 P17: `on_bad_line` under [[dataset]] said "unknown key" alone.
    let cases = [
        (
            "[[dataset]]\nname = \"a\"\nprompts = \"a\"\non_bad_line = \"skip\"\n",
            "harvest.toml:4: unknown key `on_bad_line` in dataset[0] (expected one of",
            Some(
                "; `on_bad_line` is a top-level key: put it above the first [table] or \
                  [[dataset]] header, not in dataset[0])",
            ),
        ),
        (
            "dataset = [{ name = \"a\", prompts = \"a\" }]\n[request]\nbudget_usd = 3\n",
            "harvest.toml:3: unknown key `budget_usd` in [request]",
            Some("; `budget_usd` is a top-level key"),
        ),
        // Not a top-level key anywhere: no hint.
        (
            "[[dataset]]\nname = \"a\"\nprompts = \"a\"\nbudget = 3\n",
            "harvest.toml:4: unknown key `budget` in dataset[0]",
            None,
        ),
        // At the top level already: no hint.
        (
            "budget = 1\ndataset = [{ name = \"a\", prompts = \"a\" }]\n",
            "unknown key `budget` in the top level",
            None,
        ),
    ];
    for (text, want, hint) in cases {
        let err = parse(text).expect_err(text).to_string();
        assert!(err.contains(want), "{err}\nwanted: {want}");
        match hint {
            Some(h) => assert!(err.contains(h), "{err}\nwanted: {h}"),
            None => assert!(!err.contains("top-level key"), "{err}"),
        }
    }
}

#[test]
fn a_budget_beyond_the_dollar_counters_is_refused_with_the_limit() {
    let err = parse("budget_usd = 1e300\ndataset = [{ name = \"a\", prompts = \"a\" }]\n")
        .expect_err("too big")
        .to_string();
    assert!(
        err.contains("harvest.toml:1: budget_usd: must be at most 9000000 USD")
            && err.ends_with("got 1e300"),
        "{err}"
    );
    let c = parse("budget_usd = 9e6\ndataset = [{ name = \"a\", prompts = \"a\" }]\n")
        .expect("the limit itself");
    assert_eq!(c.budget().as_f64(), 9e6);
}

#[test]
fn dataset_names_cannot_collide_with_harvest_files_or_each_other() {
    let cases = [
        (
            "spend",
            "dataset[0].name: dataset name `spend` is the name of one of harvest's",
        ),
        (
            "Spend",
            "dataset[0].name: dataset name `Spend` is the name of one of harvest's",
        ),
        ("state", "own files"),
        ("manifest", "own files"),
        ("harvest", "own files"),
        ("probe", "own files"),
        ("a.rejects", "ends in .rejects"),
        ("a.REJECTS", "ends in .rejects"),
        ("a.jsonl.damaged", "ends in .damaged"),
        ("a.SUPERSEDED", "ends in .superseded"),
        (".hidden", "starts with a dot"),
    ];
    for (name, want) in cases {
        let text = format!("model = \"m\"\ndataset = [{{ name = \"{name}\", prompts = \"a\" }}]\n");
        let err = parse(&text).expect_err(name).to_string();
        assert!(err.starts_with("harvest.toml:2: "), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
    }
    let text = "[[dataset]]\nname = \"a\"\nprompts = \"a\"\n\
                    [[dataset]]\nname = \"A\"\nprompts = \"b\"\n";
    let err = parse(text).expect_err("case").to_string();
    assert!(
            err.contains("harvest.toml:5: dataset[1].name: dataset names `A` and `a` (dataset[0]) differ only by case"),
            "{err}"
        );
    for fine in ["spends", "a.rejects2", "rejects", "my-state", "a.b"] {
        let text = format!("dataset = [{{ name = \"{fine}\", prompts = \"a\" }}]\n");
        parse(&text).unwrap_or_else(|e| panic!("{fine}: {e}"));
    }
}

#[test]
fn prompt_files_must_exist_and_paths_resolve_against_the_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("harvest.toml");
    let err = Config::parse(ONE, &path).expect_err("missing prompts");
    assert_eq!(err.line(), Some(3));
    let msg = err.to_string();
    assert!(
        msg.contains("dataset[0].prompts: prompt file of dataset B3 not found"),
        "{msg}"
    );
    assert!(
        msg.contains(&dir.path().join("data/b3.jsonl").display().to_string()),
        "{msg}"
    );

    std::fs::create_dir(dir.path().join("data")).expect("mkdir");
    std::fs::write(dir.path().join("data/b3.jsonl"), "{\"prompt\":\"hi\"}\n").expect("write");
    std::fs::write(&path, format!("output_dir = \"/abs/out\"\n{ONE}")).expect("write");
    let c = Config::load(&path).expect("loads");
    assert_eq!(c.output_dir, PathBuf::from("/abs/out"));
    assert_eq!(c.datasets[0].prompts, dir.path().join("data/b3.jsonl"));
    assert_eq!(c.source, path);

    let c = Config::parse_unchecked(ONE, Path::new("/srv/run/harvest.toml")).expect("cfg");
    assert_eq!(c.output_dir, PathBuf::from("/srv/run/out"));
}

#[test]
fn unreadable_file() {
    let err = Config::load(Path::new("/nonexistent/harvest.toml")).expect_err("no file");
    assert_eq!(
        err.to_string(),
        "cannot read /nonexistent/harvest.toml: No such file or directory"
    );
}

#[test]
fn dataset_overrides_merge_into_request() {
    let text = r#"
[request]
max_tokens = 1000
temperature = 0.6
stop = ["</s>"]
reasoning = { effort = "high" }
extra = { chat_template_kwargs = { thinking = true }, keep = 1 }

[[dataset]]
name = "B3"
prompts = "b3.jsonl"
output_token_budget = 10_000_000
system_prompt = "Be brief."
request = { temperature = 1.0, seed = 7, reasoning = { max_tokens = 512, exclude = true }, extra = { chat_template_kwargs = { thinking = false } } }

[[dataset]]
name = "B4"
prompts = "b4.jsonl"
"#;
    let c = parse(text).expect("config");
    let r = c.request_for(&c.datasets[0]);
    assert_eq!(c.datasets[0].output_token_budget, Some(10_000_000));
    assert_eq!(c.datasets[0].system_prompt.as_deref(), Some("Be brief."));
    assert_eq!(
        (r.max_tokens, r.temperature, r.seed),
        (1000, Some(1.0), Some(7))
    );
    assert_eq!(r.stop, Some(vec!["</s>".to_string()]));
    let reasoning = r.reasoning.clone().expect("reasoning");
    assert_eq!((reasoning.effort, reasoning.max_tokens), (None, Some(512)));
    assert_eq!(reasoning.exclude, Some(true));
    assert_eq!(r.extra["chat_template_kwargs"]["thinking"], false);
    assert_eq!(r.extra["keep"], 1);
    assert_eq!(c.request_for(&c.datasets[1]), c.request);

    let body = serde_json::to_value(r.chat_request("m", vec![Message::user("hi")])).expect("json");
    assert_eq!(body["max_tokens"], 1000);
    assert_eq!(body["reasoning"]["max_tokens"], 512);
    assert_eq!(body["chat_template_kwargs"]["thinking"], false);
}

#[test]
fn example_config_is_the_kimi_run() {
    let c = parse(EXAMPLE).expect("example.toml");
    assert_eq!(c.model, "moonshotai/kimi-k2.5");
    assert_eq!((c.budget_usd, c.concurrency), (100.0, 2000));
    let names: Vec<&str> = c.datasets.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["B3", "B4", "B5", "B6", "B7", "B8"]);
    assert!(
        c.datasets
            .iter()
            .all(|d| d.output_token_budget == Some(10_000_000))
    );
    assert_eq!(c.policy.mode, PolicyMode::Faithful);
    assert_eq!(c.policy.native_quantization, Some(Quantization::Int4));
    assert_eq!(c.policy.exclude, ["fireworks"]);
    assert!(c.endpoints.is_empty());

    // The commented-out endpoint (lines `#key = ...`, no space after `#`) parses when enabled.
    let enabled: String = EXAMPLE
        .lines()
        .map(|l| match l.strip_prefix('#') {
            Some(rest) if !rest.starts_with([' ', '#']) && !rest.is_empty() => rest,
            _ => l,
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let c = parse(&enabled).expect("example.toml with the endpoint enabled");
    let e = &c.endpoints[0];
    assert_eq!((e.name.as_str(), e.concurrency), ("local-sglang", 64));
    assert_eq!(e.quantization, Quantization::Int4);
    assert_eq!((e.price_in(), e.price_out()), (Price::ZERO, Price::ZERO));
    assert_eq!(e.extra["chat_template_kwargs"]["thinking"], true);
}

#[test]
fn minimal_config_has_one_dataset() {
    let c = parse(MINIMAL).expect("minimal.toml");
    assert_eq!(c.datasets.len(), 1);
    assert_eq!(c.budget_usd, 10.0);
}

#[test]
fn endpoint_prices_convert_exactly() {
    let text = format!(
        "{ONE}[[endpoint]]\nname = \"vllm\"\nbase_url = \"https://h/v1\"\nmodel = \"m\"\nprice_in_per_m = 0.45\nprice_out_per_m = 2.2\nquantization = \"FP8\"\n"
    );
    let c = parse(&text).expect("config");
    let e = &c.endpoints[0];
    assert_eq!(e.price_out(), "0.0000022".parse::<Price>().expect("price"));
    assert_eq!(e.price_in().cost(1_000_000), Usd::from_f64(0.45));
    assert_eq!(e.quantization, Quantization::Fp8);
    assert_eq!(e.api_key_env, None);
}
