//! The core stays pure: no `async`, no clock, no file or socket, nothing of the driver's (its
//! workers, clients or shared atomics). Checked on the source, so a change that slips I/O, a
//! clock read or a driver's handle into a decision fails here.

const SOURCES: [(&str, &str); 41] = [
    ("mod.rs", include_str!("../mod.rs")),
    ("failure.rs", include_str!("../failure.rs")),
    ("row.rs", include_str!("../row.rs")),
    ("journal.rs", include_str!("../journal.rs")),
    ("events.rs", include_str!("../events.rs")),
    ("port.rs", include_str!("../port.rs")),
    ("attempt.rs", include_str!("../attempt.rs")),
    ("account.rs", include_str!("../account.rs")),
    ("admission.rs", include_str!("../admission.rs")),
    ("answer_lengths.rs", include_str!("../answer_lengths.rs")),
    ("budget.rs", include_str!("../budget.rs")),
    ("cancel_billing.rs", include_str!("../cancel_billing.rs")),
    ("close_read.rs", include_str!("../close_read.rs")),
    ("cancel_check.rs", include_str!("../cancel_check.rs")),
    ("control.rs", include_str!("../control.rs")),
    ("dispatch.rs", include_str!("../dispatch.rs")),
    ("outcome.rs", include_str!("../outcome.rs")),
    ("fleet.rs", include_str!("../fleet.rs")),
    ("routing.rs", include_str!("../routing.rs")),
    ("systematic.rs", include_str!("../systematic.rs")),
    ("think.rs", include_str!("../think.rs")),
    ("turns.rs", include_str!("../turns.rs")),
    ("cut_watch.rs", include_str!("../cut_watch.rs")),
    ("verdict.rs", include_str!("../verdict.rs")),
    ("wire_rate.rs", include_str!("../wire_rate.rs")),
    ("close_transit.rs", include_str!("../close_transit.rs")),
    ("late_stop.rs", include_str!("../late_stop.rs")),
    ("reserve.rs", include_str!("../reserve.rs")),
    ("attribution.rs", include_str!("../attribution.rs")),
    ("attempt_money.rs", include_str!("../attempt_money.rs")),
    ("context.rs", include_str!("../context.rs")),
    ("params.rs", include_str!("../params.rs")),
    ("books.rs", include_str!("../books.rs")),
    ("held_bills.rs", include_str!("../held_bills.rs")),
    ("settle/mod.rs", include_str!("../settle/mod.rs")),
    ("settle/closes.rs", include_str!("../settle/closes.rs")),
    ("settle/key.rs", include_str!("../settle/key.rs")),
    ("settle/landing.rs", include_str!("../settle/landing.rs")),
    (
        "settle/leftovers.rs",
        include_str!("../settle/leftovers.rs"),
    ),
    ("settle/reckon.rs", include_str!("../settle/reckon.rs")),
    ("settle/recovery.rs", include_str!("../settle/recovery.rs")),
];

/// I/O, clocks and waiting; and what belongs to the driver (the workers, their clients, the
/// atomics they share): the core gets its readings through its `Port`.
const FORBIDDEN: [&str; 15] = [
    "async ",
    ".await",
    "Instant::now",
    "SystemTime",
    "Utc::now",
    "Clock::now",
    "std::fs",
    "std::net",
    "std::io",
    "tokio::",
    "reqwest",
    "thread::sleep",
    "worker::",
    "OpenRouterClient",
    "Atomic",
];

#[test]
fn the_core_does_no_io_reads_no_clock_and_awaits_nothing() {
    let mut found = Vec::new();
    for (file, text) in SOURCES {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for f in FORBIDDEN {
                if code.contains(f) {
                    found.push(format!("core/{file}:{}: {f}", n + 1));
                }
            }
        }
    }
    assert!(found.is_empty(), "the core must stay pure: {found:#?}");
}

#[test]
fn every_core_file_is_checked() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine/core");
    let files = |sub: &str| -> Vec<String> {
        std::fs::read_dir(dir.join(sub))
            .expect("core dir")
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".rs"))
            .map(|n| format!("{sub}{n}"))
            .collect()
    };
    // The core's files and its sub-rooms' (`settle/`); its tests are not the core.
    let mut on_disk = files("");
    on_disk.extend(files("settle/"));
    on_disk.sort();
    let mut checked: Vec<String> = SOURCES.iter().map(|(f, _)| f.to_string()).collect();
    checked.sort();
    assert_eq!(on_disk, checked, "add new core files to SOURCES");
}
