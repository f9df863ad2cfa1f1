//! The pages and `--help` in step (issue #54 item 2): every flag a harvest command takes is
//! named on some page (README.md or docs/), and every `--flag` a page names is one harvest
//! takes, or one of the other tools the pages show (cargo, Slurm, vLLM, SpecForge...), listed
//! here by name. A new flag with no page, or a page naming a flag harvest dropped, fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use clap::CommandFactory;

/// Flags of other programs the pages show in their commands, and what each belongs to.
const OTHER_TOOLS: &[(&str, &str)] = &[
    ("--array", "sbatch"),
    ("--ignored", "cargo test"),
    ("--lib", "cargo test"),
    ("--locked", "cargo"),
    ("--release", "cargo"),
    ("--requeue", "sbatch"),
    ("--skip", "cargo test"),
    ("--test", "cargo test"),
    ("--test-threads", "cargo test"),
    ("--time", "sbatch"),
    ("--bench", "cargo bench"),
    ("--data", "speculators' prepare_data.py"),
    ("--data-path", "SpecForge's validate_regenerated_data.py"),
    ("--deadline-s", "scripts/bench.sh"),
    (
        "--expect-reasoning",
        "SpecForge's validate_regenerated_data.py",
    ),
    ("--export", "sbatch"),
    ("--floor", "scripts/bench.sh"),
    ("--from-env-file", "kubectl create secret"),
    ("--keep", "scripts/bench.sh"),
    ("--mean", "scripts/bench.sh"),
    ("--n", "scripts/bench.sh"),
    ("--path", "cargo install"),
    ("--profile", "cargo build"),
    ("--reasoning-parser", "vllm serve"),
    ("--rss-tolerance-pct", "scripts/bench.sh"),
    ("--sigma", "scripts/bench.sh"),
    ("--state-tolerance-pct", "scripts/bench.sh"),
    (
        "--strict-think-markers",
        "SpecForge's validate_regenerated_data.py",
    ),
    ("--tokens-per-s", "scripts/cap-overshoot.sh"),
];

/// Every long flag of every harvest command (`--help` and `--version` aside), with the
/// commands that take it.
fn cli_flags() -> BTreeMap<String, BTreeSet<String>> {
    fn walk(cmd: &clap::Command, path: &str, out: &mut BTreeMap<String, BTreeSet<String>>) {
        for a in cmd.get_arguments() {
            if let Some(long) = a.get_long()
                && !matches!(long, "help" | "version")
                && !a.is_hide_set()
            {
                let at = out.entry(format!("--{long}")).or_default();
                at.insert(path.to_string());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&harvest::cli::Cli::command(), "harvest", &mut out);
    out
}

/// The pages a user reads, by name, and their text.
fn pages() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = vec![root.join("README.md")];
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    (paths.into_iter())
        .map(|p| {
            let name = p.strip_prefix(root).unwrap_or(&p).display().to_string();
            (name, std::fs::read_to_string(&p).expect("a page"))
        })
        .collect()
}

/// The `--flag`s a text names: two dashes after a character that is not part of a word or a
/// dash, then a lower-case letter, then letters, digits and dashes (a table's `---|---` rule
/// and a Markdown `--` dash are not flags).
fn flags_named(text: &str) -> BTreeSet<String> {
    let b = text.as_bytes();
    let mut out = BTreeSet::new();
    for i in 0..b.len().saturating_sub(2) {
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'-');
        if !(before_ok && b[i] == b'-' && b[i + 1] == b'-' && b[i + 2].is_ascii_lowercase()) {
            continue;
        }
        let end = (i + 2..b.len())
            .find(|&j| !(b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-'))
            .unwrap_or(b.len());
        // `--retry-*` names a family of flags, not one.
        if b.get(end) == Some(&b'*') {
            continue;
        }
        out.insert(text[i..end].trim_end_matches('-').to_string());
    }
    out
}

#[test]
fn the_flags_each_page_names_are_the_flags_harvest_takes() {
    let cli = cli_flags();
    let pages = pages();
    let mut named: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (page, text) in &pages {
        for f in flags_named(text) {
            named.entry(f).or_default().insert(page.clone());
        }
    }
    // Every command takes --help and --version, as every tool does.
    let other: BTreeSet<&str> = (OTHER_TOOLS.iter().map(|(f, _)| *f))
        .chain(["--help", "--version"])
        .collect();
    let unnamed: Vec<String> = (cli.iter())
        .filter(|(f, _)| !named.contains_key(*f))
        .map(|(f, cmds)| {
            format!(
                "{f} ({})",
                cmds.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let unknown: Vec<String> = (named.iter())
        .filter(|(f, _)| !cli.contains_key(*f) && !other.contains(f.as_str()))
        .map(|(f, at)| {
            format!(
                "{f} ({})",
                at.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        unnamed.is_empty() && unknown.is_empty(),
        "flags harvest takes that no page names: {unnamed:?}\nflags pages name that harvest \
         does not take (nor OTHER_TOOLS lists): {unknown:?}"
    );
    // Each listed flag of another tool is still shown somewhere: the list does not grow stale.
    let stale: Vec<&str> = (OTHER_TOOLS.iter().map(|(f, _)| *f))
        .filter(|f| !named.contains_key(*f))
        .collect();
    assert!(
        stale.is_empty(),
        "OTHER_TOOLS lists flags no page shows: {stale:?}"
    );
}

#[test]
fn a_flag_is_read_from_a_text_as_a_person_reads_it() {
    let named = flags_named(
        "run `harvest run --detach` or --out=dir; a rule |---|---| and a dash -- here, \
         x--y no, (--budget-mode) yes, --Upper no, --retry-* no",
    );
    let want: BTreeSet<String> = ["--detach", "--out", "--budget-mode"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(named, want);
}
