//! The counting pass over a prompt file and the reader opened from it: duplicates counted
//! (by id, by content, as runs of copies), the prescanned reader that skips them by line
//! number, and a file that grows or is cut after the count.

use super::*;

#[test]
fn duplicates_are_counted_not_yielded() {
    let mut text = String::from("{\"id\":\"a\",\"prompt\":\"x\"}\n{\"prompt\":\"hi\"}\n");
    text.push_str("{\"id\":\"a\",\"prompt\":\"y\"}\n{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}\n");
    for i in 0..1_100 {
        text.push_str(&format!("{{\"id\":{},\"prompt\":\"p\"}}\n", i % 50));
    }
    let mut r = reader(&text);
    let yielded: Vec<_> = r.by_ref().map(|p| p.expect("ok").id).collect();
    assert_eq!(yielded.len(), 2 + 50);
    assert_eq!(r.duplicate_count(), 2 + 1_050);
    assert_eq!(r.duplicates().len(), 1_000);
    let first: Vec<_> = r.duplicates()[..3]
        .iter()
        .map(|d| (d.id.as_str(), d.line, d.first_line))
        .collect();
    let want = [("a", 3, 1), ("h660db281bfb80118", 4, 2), ("0", 55, 5)];
    assert_eq!(first, want);
}

#[test]
fn a_prescanned_reader_skips_the_same_duplicates_without_keeping_ids() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    let mut text = String::new();
    for i in 0..300 {
        text.push_str(&format!("{{\"id\":\"{}\",\"prompt\":\"p\"}}\n", i % 120));
        if i % 97 == 0 {
            text.push_str("not json\n");
        }
    }
    std::fs::write(&path, &text).expect("write");
    let count = count_prompts(&path).expect("count");
    assert_eq!(
        (count.valid, count.duplicates, count.invalid),
        (120, 180, 4)
    );
    assert_eq!(count.duplicate_lines.len(), 180);
    let ids = |r: PromptReader| -> Vec<String> { r.flatten().map(|p| p.id).collect() };
    let plain = ids(PromptReader::open(&path).expect("open"));
    let mut pre =
        PromptReader::open_prescanned(&path, &PromptFields::default(), &count).expect("open");
    let fast: Vec<String> = pre.by_ref().flatten().map(|p| p.id).collect();
    assert_eq!(fast, plain);
    assert_eq!(pre.duplicate_count(), 180);
    assert!(pre.seen.is_empty(), "no id kept");
}

#[test]
fn copies_of_one_line_are_counted_as_runs_without_parsing_each() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    let a = r#"{"id":"a","prompt":"one"}"#;
    let a_other = r#"{"id":"a","prompt":"another"}"#;
    let b = r#"{"id":"b","prompt":"two"}"#;
    // 5,000 copies of `a`, a bad line and a blank one among them, `b`, then `a` again; then
    // `a` under another prompt 3,000 times (a duplicate id whose content differs).
    let mut text = String::new();
    for i in 0..5_000 {
        text.push_str(a);
        text.push('\n');
        if i == 2_000 {
            text.push_str("not json\n\n");
        }
    }
    text.push_str(&format!("{b}\n{a}\n"));
    for _ in 0..3_000 {
        text.push_str(a_other);
        text.push('\n');
    }
    std::fs::write(&path, &text).expect("write");
    let count = count_prompts(&path).expect("count");
    assert_eq!(
        (
            count.valid,
            count.invalid,
            count.duplicates,
            count.differing
        ),
        (2, 1, 4_999 + 1 + 3_000, 3_000)
    );
    assert_eq!(count.duplicate_lines.len(), 8_000);
    // Lines 2..=2001, 2004..=5002 (after the bad and the blank line), then 5004..=8004 (`b` is
    // line 5,003).
    assert_eq!(
        count.duplicate_lines.runs(),
        3,
        "{:?}",
        count.duplicate_lines
    );
    assert_eq!(count.first_duplicates.len(), 1_000);
    assert!(
        count
            .first_duplicates
            .iter()
            .all(|d| d.id == "a" && d.first_line == 1 && !d.differs)
    );
    // The same as a reader that parses every line, and the prescanned one skips them.
    let plain: Vec<_> = PromptReader::open(&path).expect("open").collect();
    let mut slow = PromptReader::open(&path).expect("open");
    slow.by_ref().for_each(drop);
    assert_eq!(slow.duplicate_count(), count.duplicates);
    let pre: Vec<_> = PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
        .expect("open")
        .collect();
    let ids = |v: &[Result<Prompt, PromptError>]| -> Vec<(String, u64)> {
        v.iter().flatten().map(|p| (p.id.clone(), p.line)).collect()
    };
    assert_eq!(ids(&pre), ids(&plain));
    assert_eq!(ids(&pre), [("a".to_string(), 1), ("b".to_string(), 5_003)]);
}

#[test]
fn duplicate_ids_are_told_apart_by_content() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    // (name, second line, counted duplicates, of which with other content)
    let cases = [
        ("a copied line", r#"{"id":"7","prompt":"seven"}"#, 1, 0),
        (
            "an integer id and the same digits as a string",
            r#"{"id":7,"prompt":"seven"}"#,
            1,
            0,
        ),
        (
            "the same id, another prompt",
            r#"{"id":"7","prompt":"eight"}"#,
            1,
            1,
        ),
        (
            "7 and \"7\" with other prompts",
            r#"{"id":7,"prompt":"eight"}"#,
            1,
            1,
        ),
        ("another id", r#"{"id":"8","prompt":"seven"}"#, 0, 0),
    ];
    for (name, second, dups, differing) in cases {
        std::fs::write(
            &path,
            format!("{{\"id\":\"7\",\"prompt\":\"seven\"}}\n{second}\n"),
        )
        .expect("write");
        let c = count_prompts(&path).expect("count");
        assert_eq!((c.duplicates, c.differing), (dups, differing), "{name}");
        if dups > 0 {
            let d = &c.first_duplicates[0];
            assert_eq!(
                (d.line, d.first_line, d.differs),
                (2, 1, differing == 1),
                "{name}"
            );
        }
    }
}

#[test]
fn a_file_grown_after_the_count_is_read_as_it_was() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    let cases: [(&str, &str, Vec<&str>); 3] = [
        (
            "new ids, a reused id and a bad line appended",
            "{\"id\":\"x\",\"prompt\":\"late\"}\n{\"id\":\"a\",\"prompt\":\"again\"}\nnot json\n",
            vec!["a", "b"],
        ),
        (
            "an appended line without its newline yet",
            "{\"id\":\"y\"",
            vec!["a", "b"],
        ),
        ("nothing appended", "", vec!["a", "b"]),
    ];
    for (name, appended, want) in cases {
        std::fs::write(
            &path,
            "{\"id\":\"a\",\"prompt\":\"p\"}\n{\"id\":\"b\",\"prompt\":\"q\"}\n",
        )
        .expect("write");
        let count = count_prompts(&path).expect("count");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .expect("open");
        std::io::Write::write_all(&mut f, appended.as_bytes()).expect("append");
        let items: Vec<Result<Prompt, PromptError>> =
            PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
                .expect("open")
                .collect();
        assert!(items.iter().all(Result::is_ok), "{name}: no bad line read");
        let ids: Vec<String> = items.into_iter().flatten().map(|p| p.id).collect();
        assert_eq!(ids, want, "{name}");
    }
}

/// A file cut after the count (a generator's `>` while a run reads it): the run's reader ends
/// with a read failure naming the change, not with a bad line or a clean end; a file that grew
/// is read to where the count stopped, as before.
#[test]
fn a_file_cut_after_the_count_is_a_read_failure_not_a_bad_line() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    let text: String = (0..100)
        .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"question {i}\"}}\n"))
        .collect();
    std::fs::write(&path, &text).expect("write");
    let count = count_prompts(&path).expect("count");
    assert_eq!(count.valid, 100);
    // Cut mid-line, at a tenth.
    std::fs::write(&path, &text[..text.len() / 10]).expect("cut");
    let items: Vec<_> = PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
        .expect("open")
        .collect();
    let last = items
        .last()
        .expect("items")
        .as_ref()
        .expect_err("a failure");
    assert!(last.is_io(), "{last}");
    assert!(
        last.message.contains("the file changed since the start"),
        "{last}"
    );
    assert!(
        items[..items.len() - 1].iter().all(Result::is_ok),
        "no bad line before it"
    );
    // Grown instead: read to where the count stopped, no failure.
    std::fs::write(
        &path,
        format!("{text}{{\"id\": \"new\", \"prompt\": \"x\"}}\n"),
    )
    .expect("grow");
    let items: Vec<_> = PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
        .expect("open")
        .collect();
    assert_eq!(items.len(), 100);
    assert!(items.iter().all(Result::is_ok));
}

/// A file rewritten in place after the count, as long as before or longer (a generator's `>`
/// that writes another file of prompts): the run's reader stops with a read failure naming the
/// change within the block where the lines differ, instead of sending the new prompts under
/// the ids the count saw (reliability-probe-4 N5: DONE, exit 0, rows from both files).
#[test]
fn a_file_rewritten_after_the_count_is_a_read_failure() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("p.jsonl");
    let file = |seed: u32, n: usize| -> String {
        (0..n)
            .map(|i| format!("{{\"id\": \"p{i}\", \"prompt\": \"question {i} of run {seed}\"}}\n"))
            .collect()
    };
    // Many blocks, so that the change is found before the end.
    let text = file(14, 60_000);
    std::fs::write(&path, &text).expect("write");
    let count = count_prompts(&path).expect("count");
    assert!(count.bytes > 1 << 20, "{} bytes", count.bytes);
    for (name, new) in [("longer", file(99, 60_000)), ("as long", file(41, 60_000))] {
        std::fs::write(&path, &new).expect("rewrite");
        let items: Vec<_> = PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
            .expect("open")
            .collect();
        let last = items.last().expect("items").as_ref().expect_err(name);
        assert!(last.is_io(), "{name}: {last}");
        assert!(
            last.message.contains("the file changed since the start"),
            "{name}: {last}"
        );
        assert!(
            items.len() < 20_000,
            "{name}: stopped in the first block, at {}",
            items.len()
        );
    }
    // The same lines written again: read as before.
    std::fs::write(&path, &text).expect("same");
    let items: Vec<_> = PromptReader::open_prescanned(&path, &PromptFields::default(), &count)
        .expect("open")
        .collect();
    assert_eq!(items.len(), 60_000);
    assert!(items.iter().all(Result::is_ok));
}
