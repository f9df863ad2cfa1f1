//! The start's own tests (the runs themselves are the integration tests').

use super::check_open_files;

#[test]
fn a_run_needs_three_files_per_dataset_within_the_limit() {
    // (datasets, limit, refused)
    let cases = [
        (1, 1024, false),
        (298, 1024, false),
        (299, 1024, true),
        (10_000, 20_000, true),
        (10_000, 1 << 20, false),
    ];
    for (datasets, limit, refused) in cases {
        let got = check_open_files(datasets, limit);
        assert_eq!(
            got.is_err(),
            refused,
            "{datasets} datasets at {limit}: {got:?}"
        );
        if let Err(e) = got {
            let text = e.to_string();
            assert!(
                text.contains(&format!("above this process's limit of {limit}")),
                "{text}"
            );
            assert!(text.contains("ulimit -n"), "{text}");
        }
    }
}

#[test]
fn the_foreign_turns_note_is_one_line_with_single_spaces() {
    // reliability-probe-5 P17: a line break in the source left a run of 14 spaces.
    let d: crate::config::DatasetConfig =
        toml::from_str("name = \"d\"\nprompts = \"p.jsonl\"\n").expect("dataset");
    let counted = crate::store::prompts::PromptCount {
        valid: 2_000,
        with_assistant_turns: 198,
        ..Default::default()
    };
    let note = super::datasets::foreign_turns_note(&d, &counted).expect("a note");
    assert!(
        note.starts_with(
            "dataset d: 198 of 2,000 prompts carry assistant turns the model does not write \
             (turns = \"last\"): "
        ),
        "{note}"
    );
    assert!(!note.contains("  ") && !note.contains('\n'), "{note}");
}
