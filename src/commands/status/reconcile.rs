//! `harvest status DIR --reconcile`: what a crashed or drained run left open, looked up at the
//! run's own API (its manifest's base URL and key variable unless flags or `-c` say otherwise)
//! and booked as the next start would, without starting a run.

use std::path::{Path, PathBuf};

use super::super::BadInput;
use super::super::stdout::outln;
use crate::cli::StatusArgs;
use crate::config::Config;
use crate::domain::Usd;
use crate::engine::{Manifest, manifest_path};
use crate::openrouter::{ApiKey, ClientOptions, OpenRouterClient};
use crate::store::output::SpendEntry;

/// `--reconcile`: books what a crashed run left open, as the next start would, and says what.
pub(super) async fn reconcile(dir: &Path, args: &StatusArgs) -> anyhow::Result<()> {
    use crate::engine::reconcile::{LookedUp, Settle, Until, look_up, settle};
    /// Every open id is asked, and those unknown asked again, for at most this long.
    const RECONCILE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);
    use crate::store::output::SpendKind;
    use futures::StreamExt;

    if !dir.is_dir() {
        return Err(BadInput(format!("{} is not a directory", dir.display())).into());
    }
    // A live run settles its own leftovers; two writers of one ledger would double-book.
    let _lock = crate::store::lock::lock_dir(dir).map_err(|e| BadInput(e.to_string()))?;
    let names = crate::report::dataset_names(dir).map_err(|e| BadInput(e.to_string()))?;
    let scan = crate::store::scan::scan_dir(dir, &names).map_err(|e| BadInput(e.to_string()))?;
    if let Some(p) = scan.problems().first() {
        return Err(BadInput(format!("{p}; `harvest run --repair` deals with it first")).into());
    }
    let api = api_for(dir, args)?;
    let (key_env, key_from) = (api.key_env.0.as_str(), api.key_env.1);
    let mut opts = ClientOptions::new(api.base_url.0.clone(), ApiKey::from_env(key_env));
    opts.ca_certs.extend(api.ca_cert);
    let client = OpenRouterClient::new(opts).map_err(|e| BadInput(e.to_string()))?;
    // As shown to people (a password in it is `***`): the client moves into the look-ups.
    let url = client.base_url().into_owned();
    let leftovers = crate::engine::core::settle::Leftovers::from_scan(&scan);
    let nothing_open = leftovers.to_look_up().next().is_none();
    if !nothing_open && [api.base_url.1, key_from].iter().any(|s| s.is_the_runs()) {
        // Not what the flags say: the operator sees which API is asked, and with which key.
        eprintln!(
            "harvest: asking {} ({}) with the key in {} ({})",
            crate::printable::printable(&url),
            api.base_url.1.said(),
            crate::printable::printable(key_env),
            key_from.said()
        );
    }
    if !nothing_open && !client.has_key() {
        return Err(BadInput(crate::engine::missing_key(key_env)).into());
    }
    let now = chrono::Utc::now();
    let close = |open: SpendEntry, kind: SpendKind, usd: Usd, estimated: bool| {
        open.closed_as(kind, usd, estimated, crate::domain::rfc3339(now))
    };
    let mut lines = Vec::new();
    let (mut found, mut waiting, mut total) = (0u64, 0u64, Usd::ZERO);
    // What the API cannot tell about is left open, not booked at a guess: a guess booked here
    // would never be trued up (the next run starts from it), and the API billed most of those
    // at nothing (reliability-probe-3 D3: +136% and +350% against the bill). The next run
    // books them and trues the ledger up against the key's usage.
    let (mut left, mut left_usd) = (0u64, Usd::ZERO);
    // `/generation` figures that cannot be bills (`booked_cost`), named below.
    let mut refused: Vec<String> = Vec::new();
    let (mut confirmed, mut confirmed_delta) = (0u64, Usd::ZERO);
    // Ids no ask of which reached the API (refused, DNS, TLS, timed out), and the last reason:
    // not "too recent", which only an API that answered can say.
    let (mut unreached, mut unreached_why) = (0u64, String::new());
    let items = (leftovers.to_look_up().cloned())
        .filter_map(|e| Some((e.generation_id.clone()?, e)))
        .collect();
    let mut answers = std::pin::pin!(look_up(client, items, Until::Deadline(RECONCILE_DEADLINE)));
    while let Some(answer) = answers.next().await {
        let LookedUp::Done {
            entry,
            cost,
            unreached: not_reached,
            ..
        } = answer
        else {
            continue;
        };
        if let Some(why) = not_reached {
            unreached += 1;
            unreached_why = why;
            continue;
        }
        if entry.kind == SpendKind::Cancelled {
            // A stream a run closed: the API's cost is an adjustment of its estimate (a line
            // even when it was right, marking it confirmed); unknown for good, it stays as
            // booked, confirmed; unknown but recent, ask again later.
            // Only the API's own figure is booked here: what a close unknown for good costs
            // depends on the run's budget mode and what it learnt of the endpoint, so the
            // next run books it.
            let actual = match settle(&entry, cost, now) {
                Settle::Found(c) => c,
                Settle::Refused(why) => {
                    refused.push(format!(
                        "{}: {why}",
                        entry.generation_id.as_deref().unwrap_or("?")
                    ));
                    waiting += 1;
                    continue;
                }
                Settle::Wait | Settle::Lost => {
                    waiting += 1;
                    continue;
                }
            };
            confirmed += 1;
            confirmed_delta += actual - entry.usd;
            lines.push(SpendEntry {
                at: crate::domain::rfc3339(now),
                kind: SpendKind::Adjustment,
                usd: actual - entry.usd,
                estimated: false,
                error: None,
                ..entry
            });
            continue;
        }
        match settle(&entry, cost, now) {
            Settle::Found(usd) => {
                found += 1;
                total += usd;
                lines.push(close(entry, SpendKind::Recovered, usd, false));
            }
            Settle::Lost => {
                left += 1;
                left_usd += entry.expected_usd.unwrap_or_default();
            }
            Settle::Wait => waiting += 1,
            Settle::Refused(why) => {
                refused.push(format!(
                    "{}: {why}",
                    entry.generation_id.as_deref().unwrap_or("?")
                ));
                waiting += 1;
            }
        }
    }
    for e in &scan.ledger.unknown {
        left += 1;
        left_usd += e.expected_usd.unwrap_or_default();
    }
    crate::store::output::append_spend(dir, &lines)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", dir.join("spend.jsonl").display()))?;
    let mut said = format!(
        "{}: {found} generations found at the API, booked at their cost: {:.6} USD booked in all",
        dir.display(),
        total.as_f64()
    );
    if confirmed > 0 {
        said.push_str(&format!(
            "; {confirmed} streams a run closed confirmed ({:+.6} USD against their estimates)",
            confirmed_delta.as_f64()
        ));
    }
    if left > 0 {
        said.push_str(&format!(
            "; {left} attempts the API cannot tell about (sent but never answered, or unknown \
             for {} min) left open at an expected {:.6} USD: the next `harvest run` books them \
             and trues the ledger up against the key's usage",
            crate::engine::reconcile::UNKNOWN_AFTER.as_secs() / 60,
            left_usd.as_f64()
        ));
    }
    if waiting > 0 {
        said.push_str(&format!(
            "; {waiting} still unknown and too recent to give up on: ask again later"
        ));
    }
    if !refused.is_empty() {
        said.push_str(&format!(
            "; {} figures from /generation refused as damage and not booked (left open): {}",
            refused.len(),
            refused.join(", ")
        ));
    }
    let said_something = found + confirmed + left + waiting > 0 || !refused.is_empty();
    if unreached == 0 || said_something {
        outln!("{}", crate::printable::printable(&said));
    }
    if unreached > 0 {
        return Err(anyhow::anyhow!(
            "the API at {url} ({}) could not be reached: {unreached_why}. {unreached} open \
             generations were not looked up and stay open: check the URL and the network (or \
             name the API with --base-url), then ask again",
            api.base_url.1.said()
        ));
    }
    Ok(())
}

/// Where a setting of `--reconcile` came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// The command line.
    Flag,
    /// The output directory's manifest: what the run itself used.
    Manifest,
    /// `-c FILE`, for a directory whose manifest predates the recording.
    Config,
    /// OpenRouter's, with the key in OPENROUTER_API_KEY.
    Default,
}

impl Source {
    /// Taken from the run rather than from the command line: said on stderr.
    fn is_the_runs(self) -> bool {
        matches!(self, Source::Manifest | Source::Config)
    }

    fn said(self) -> &'static str {
        match self {
            Source::Flag => "given on the command line",
            Source::Manifest => "the run's, from its manifest",
            Source::Config => "the config's",
            Source::Default => "the default",
        }
    }
}

/// The first of the flag's, the manifest's and the config's values that is set, else the
/// default, and where it came from: a run is asked about at its own API unless the operator
/// names another.
fn first_set<'a>(
    flag: Option<&'a str>,
    manifest: Option<&'a str>,
    config: Option<&'a str>,
    default: &'a str,
) -> (&'a str, Source) {
    [
        (flag, Source::Flag),
        (manifest, Source::Manifest),
        (config, Source::Config),
    ]
    .into_iter()
    .find_map(|(v, from)| Some((v?, from)))
    .unwrap_or((default, Source::Default))
}

/// The API `--reconcile` asks.
struct Api {
    base_url: (String, Source),
    /// The name of the variable the key is read from.
    key_env: (String, Source),
    /// The config's `ca_cert`, when one is given.
    ca_cert: Option<PathBuf>,
}

/// The API and key variable for `dir`: the flags', else those the run recorded in its
/// manifest, else `-c`'s config's, else OpenRouter's.
fn api_for(dir: &Path, args: &StatusArgs) -> Result<Api, BadInput> {
    let manifest = if args.base_url.is_some() && args.api_key_env.is_some() {
        None
    } else {
        let path = manifest_path(dir);
        match std::fs::read_to_string(&path) {
            Ok(text) => Some(serde_json::from_str::<Manifest>(&text).map_err(|e| {
                BadInput(format!("{}: not a harvest manifest: {e}", path.display()))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(BadInput(format!("cannot read {}: {e}", path.display()))),
        }
    };
    let config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| BadInput(format!("cannot read {}: {e}", path.display())))?;
            // Its prompt files are not needed here (they may have moved since).
            Some(Config::parse_unchecked(&text, path).map_err(|e| BadInput(e.to_string()))?)
        }
        None => None,
    };
    let m = manifest.as_ref();
    let c = config.as_ref();
    let pick = |flag: &Option<String>, from_m: Option<&str>, from_c: Option<&str>, default| {
        let (v, from) = first_set(flag.as_deref(), from_m, from_c, default);
        (v.to_string(), from)
    };
    Ok(Api {
        base_url: pick(
            &args.base_url,
            m.and_then(|m| m.base_url.as_deref()),
            c.map(|c| c.base_url.as_str()),
            crate::openrouter::DEFAULT_BASE_URL,
        ),
        key_env: pick(
            &args.api_key_env,
            m.and_then(|m| m.api_key_env.as_deref()),
            c.map(|c| c.api_key_env.as_str()),
            "OPENROUTER_API_KEY",
        ),
        ca_cert: c.and_then(|c| c.ca_cert.clone()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--reconcile` asks the flags' API first, then the one the run recorded, then the
    /// config's, then OpenRouter's; each setting on its own.
    #[test]
    fn reconcile_asks_the_flags_then_the_runs_then_the_configs_api() {
        use Source::*;
        let d = "https://openrouter.ai/api/v1";
        let (f, m, c) = (Some("flag"), Some("manifest"), Some("config"));
        let cases = [
            ((f, m, c), ("flag", Flag)),
            ((f, None, None), ("flag", Flag)),
            ((None, m, c), ("manifest", Manifest)),
            ((None, m, None), ("manifest", Manifest)),
            ((None, None, c), ("config", Config)),
            ((f, None, c), ("flag", Flag)),
            ((None, None, None), (d, Default)),
        ];
        for ((flag, manifest, config), want) in cases {
            assert_eq!(
                first_set(flag, manifest, config, d),
                want,
                "{flag:?} {manifest:?} {config:?}"
            );
        }
        assert!(Manifest.is_the_runs() && Config.is_the_runs());
        assert!(!Flag.is_the_runs() && !Default.is_the_runs());
    }

    /// The manifest's API and key variable are used where no flag names them (one flag given
    /// keeps the other from the manifest); `-c` fills in for a manifest without them.
    #[test]
    fn reconcile_reads_the_api_from_the_manifest_then_the_config() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path();
        let args = |base: Option<&str>, config: Option<PathBuf>| StatusArgs {
            dirs: vec![d.to_path_buf()],
            json: false,
            report: false,
            reconcile: true,
            base_url: base.map(Into::into),
            api_key_env: None,
            config,
        };
        let got = |a: &StatusArgs| {
            let api = api_for(d, a).expect("api");
            (api.base_url, api.key_env)
        };
        let s = |v: &str, from| (v.to_string(), from);
        // No manifest, no config: OpenRouter's, as before.
        assert_eq!(
            got(&args(None, None)),
            (
                s(crate::openrouter::DEFAULT_BASE_URL, Source::Default),
                s("OPENROUTER_API_KEY", Source::Default)
            )
        );
        let config = d.join("harvest.toml");
        std::fs::write(
            &config,
            "base_url = \"http://127.0.0.1:7/api/v1\"\napi_key_env = \"CONFIG_KEY\"\n\
             [[dataset]]\nname = \"A\"\nprompts = \"gone.jsonl\"\n",
        )
        .expect("config");
        assert_eq!(
            got(&args(None, Some(config.clone()))),
            (
                s("http://127.0.0.1:7/api/v1", Source::Config),
                s("CONFIG_KEY", Source::Config)
            )
        );
        std::fs::write(
            manifest_path(d),
            r#"{"model": "m", "params": {}, "created_at": "", "harvest_version": "",
                "base_url": "http://127.0.0.1:8/api/v1", "api_key_env": "RUN_KEY"}"#,
        )
        .expect("manifest");
        assert_eq!(
            got(&args(None, Some(config))),
            (
                s("http://127.0.0.1:8/api/v1", Source::Manifest),
                s("RUN_KEY", Source::Manifest)
            )
        );
        assert_eq!(
            got(&args(Some("http://127.0.0.1:9/api/v1"), None)),
            (
                s("http://127.0.0.1:9/api/v1", Source::Flag),
                s("RUN_KEY", Source::Manifest)
            )
        );
        // A damaged manifest is said, not passed over for OpenRouter's API.
        std::fs::write(manifest_path(d), "{\"model\": ").expect("damaged");
        let err = api_for(d, &args(None, None)).err().expect("refused");
        assert!(err.0.contains("not a harvest manifest"), "{}", err.0);
    }
}
