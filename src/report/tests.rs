//! The report built from hand-made output directories: rows per dataset and endpoint, the
//! spend check, a live run's torn tail, damage refused.

use super::*;
use crate::store::output::{RecordUsage, Turn};

fn record(id: &str, tag: &str, out: u64, ttft: u64, latency: u64, finish: &str) -> OutputRecord {
    OutputRecord {
        id: id.into(),
        conversations: vec![Turn {
            role: "assistant".into(),
            content: "x".into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
        }],
        provider: tag.into(),
        endpoint_tag: Some(tag.into()),
        quantization: None,
        model: "m".into(),
        finish_reason: finish.into(),
        native_finish_reason: None,
        truncated: finish == "length",
        cut_thinking: false,
        cost_estimated: false,
        usage: RecordUsage {
            prompt_tokens: 10,
            completion_tokens: out,
            reasoning_tokens: 0,
            source: "reported".into(),
            ..RecordUsage::default()
        },
        cost_usd: Usd::from_pico(out as i64 * 1000),
        ttft_ms: Some(ttft),
        latency_ms: latency,
        attempts: 1,
        created_at: "2026-11-30T00:00:00Z".into(),
        generation_id: None,
        params: serde_json::Value::Null,
        inline_think: false,
        turns: Vec::new(),
    }
}

fn spend(
    dataset: &str,
    tag: Option<&str>,
    kind: SpendKind,
    pico: i64,
    error: Option<&str>,
) -> SpendEntry {
    SpendEntry {
        endpoint: tag.map(str::to_string),
        usd: Usd::from_pico(pico),
        error: error.map(str::to_string),
        ..SpendEntry::new(kind, "2026-11-30T00:00:00Z".into(), "x", dataset)
    }
}

fn write(dir: &Path, name: &str, lines: &[String]) {
    let mut t = lines.join("\n");
    t.push('\n');
    std::fs::write(dir.join(name), t).expect("write");
}

#[test]
fn regenerated_turns_count_at_their_endpoints_and_inline_thinking_is_counted() {
    use crate::store::output::TurnRecord;
    let d = tempfile::tempdir().expect("tmp");
    let turn = |tag: &str, out: u64, inline: bool| TurnRecord {
        provider: tag.into(),
        endpoint_tag: Some(tag.into()),
        finish_reason: "stop".into(),
        usage: RecordUsage {
            prompt_tokens: 10,
            completion_tokens: out,
            reasoning_tokens: 0,
            source: "reported".into(),
            ..RecordUsage::default()
        },
        cost_usd: Usd::from_pico(out as i64),
        attempts: 1,
        generation_id: None,
        ttft_ms: Some(100),
        latency_ms: 1100,
        inline_think: inline,
        cost_estimated: false,
    };
    // A row of two turns: its first at own/bf16 (thinking inline), its last at chutes.
    let mut two = record("a0", "chutes/int4", 300, 100, 1100, "stop");
    two.turns = vec![turn("own/bf16", 100, true), turn("chutes/int4", 200, false)];
    let mut single = record("a1", "own/bf16", 50, 100, 1100, "stop");
    single.inline_think = true;
    let lines = [two, single].map(|r| serde_json::to_string(&r).expect("json"));
    write(d.path(), "B1.jsonl", &lines);
    let r = Report::from_dir(d.path(), None).expect("report");
    let row = |tag: &str| {
        r.rows
            .iter()
            .find(|x| x.endpoint == tag)
            .expect(tag)
            .clone()
    };
    let (own, chutes) = (row("own/bf16"), row("chutes/int4"));
    // (rows, answers, output tokens, answers with inline thinking)
    assert_eq!(
        (
            own.prompts,
            own.answers,
            own.output_tokens,
            own.inline_think
        ),
        (1, 2, 150, 2)
    );
    assert_eq!(
        (
            chutes.prompts,
            chutes.answers,
            chutes.output_tokens,
            chutes.inline_think
        ),
        (1, 1, 200, 0)
    );
    assert_eq!((r.total.prompts, r.total.answers), (2, 3));
    assert!(r.render().contains("think-inline×2"), "{}", r.render());
}

#[test]
fn rows_with_nothing_in_them_are_left_out() {
    let d = tempfile::tempdir().expect("tmp");
    let rec =
        serde_json::to_string(&record("a", "chutes/int4", 10, 100, 1000, "stop")).expect("json");
    write(d.path(), "B1.jsonl", &[rec]);
    // OpenRouter routing: the dispatched line names no endpoint and costs nothing.
    let ledger = [
        spend("B1", None, SpendKind::Dispatched, 0, None),
        spend("B1", Some("chutes/int4"), SpendKind::Complete, 10_000, None),
    ]
    .map(|e| serde_json::to_string(&e).expect("json"));
    write(d.path(), "spend.jsonl", &ledger);
    let r = Report::from_dir(d.path(), None).expect("report");
    let eps: Vec<&str> = r.rows.iter().map(|x| x.endpoint.as_str()).collect();
    assert_eq!(eps, ["chutes/int4"]);
    assert!(!r.render().contains(UNRESOLVED), "{}", r.render());
}

#[test]
fn rows_percentiles_speed_errors_and_spend() {
    let d = tempfile::tempdir().expect("tmp");
    let recs: Vec<String> = (0..20)
        .map(|i| {
            let r = record(
                &format!("a{i}"),
                "chutes/int4",
                101,
                100 * (i + 1),
                100 * (i + 1) + 1000,
                if i < 5 { "length" } else { "stop" },
            );
            serde_json::to_string(&r).expect("json")
        })
        .chain(std::iter::once(
            serde_json::to_string(&record("b0", "moonshotai/int4", 11, 50, 150, "stop"))
                .expect("json"),
        ))
        .collect();
    write(d.path(), "B1.jsonl", &recs);
    let mut ledger: Vec<String> = (0..20)
        .map(|_| {
            serde_json::to_string(&spend(
                "B1",
                Some("chutes/int4"),
                SpendKind::Complete,
                101_000,
                None,
            ))
            .expect("json")
        })
        .collect();
    ledger.push(
        serde_json::to_string(&spend(
            "B1",
            Some("moonshotai/int4"),
            SpendKind::Complete,
            11_000,
            None,
        ))
        .expect("json"),
    );
    ledger.push(
        serde_json::to_string(&spend(
            "B1",
            Some("chutes/int4"),
            SpendKind::Failed,
            0,
            Some("429"),
        ))
        .expect("json"),
    );
    ledger.push(
        serde_json::to_string(&spend(
            "B1",
            Some("chutes/int4"),
            SpendKind::Cancelled,
            7,
            Some("timeout"),
        ))
        .expect("json"),
    );
    ledger.push(
        serde_json::to_string(&spend("B1", None, SpendKind::Failed, 0, Some("5xx"))).expect("json"),
    );
    write(d.path(), "spend.jsonl", &ledger);

    let r = Report::from_dir(d.path(), None).expect("report");
    assert_eq!(r.schema, SCHEMA);
    let chutes = r
        .rows
        .iter()
        .find(|x| x.endpoint == "chutes/int4")
        .expect("row");
    assert_eq!((chutes.prompts, chutes.output_tokens), (20, 2020));
    assert_eq!(chutes.usd, Usd::from_pico(20 * 101_000 + 7));
    // TTFTs 100..2000 ms: nearest-rank p50 is the 10th, p95 the 19th.
    assert_eq!(
        (chutes.ttft_p50_ms, chutes.ttft_p95_ms),
        (Some(1000), Some(1900))
    );
    // 100 tokens after the first in 1 s each.
    assert_eq!(chutes.tok_per_s, Some(100.0));
    assert_eq!(chutes.truncation_rate, Some(0.25));
    assert_eq!(chutes.errors.get("429"), Some(&1));
    assert_eq!(chutes.errors.get("timeout"), Some(&1));
    let unresolved = r
        .rows
        .iter()
        .find(|x| x.endpoint == UNRESOLVED)
        .expect("row");
    assert_eq!(unresolved.errors.get("5xx"), Some(&1));
    assert_eq!(r.datasets.len(), 1);
    assert_eq!(r.datasets[0].prompts, 21);
    assert_eq!(r.total.output_tokens, 2020 + 11);
    assert_eq!(r.spend.ledger, Usd::from_pico(20 * 101_000 + 11_000 + 7));
    assert_eq!(r.spend.answers, r.spend.records);
    assert_eq!(r.spend.closed, Usd::from_pico(7));
    let text = r.render();
    assert!(text.contains("chutes/int4"), "{text}");
    assert!(text.contains("429×1 timeout×1"), "{text}");
    assert!(text.contains("25.0%"), "{text}");
}

#[test]
fn a_torn_last_line_is_skipped_and_a_bad_middle_line_named() {
    let d = tempfile::tempdir().expect("tmp");
    let good = serde_json::to_string(&record("a", "t", 5, 1, 2, "stop")).expect("json");
    std::fs::write(
        d.path().join("B1.jsonl"),
        format!("{good}\n{{\"id\":\"b\",\"conv"),
    )
    .expect("write");
    let r = Report::from_dir(d.path(), None).expect("torn tail is fine");
    assert_eq!(r.total.prompts, 1);
    std::fs::write(d.path().join("B1.jsonl"), format!("{{oops\n{good}\n")).expect("write");
    let e = Report::from_dir(d.path(), None).expect_err("bad line");
    assert!(e.to_string().contains("B1.jsonl: line 1"), "{e}");
}
