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
