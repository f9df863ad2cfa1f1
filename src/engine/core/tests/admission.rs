//! Admission: which prompt goes next and when a dataset stops taking prompts (token budgets
//! counting answers in flight, sample caps, schedules, ids already done, shards, system
//! prompts, bad lines).

use super::*;
use crate::openrouter::Message;
use crate::store::prompts::shard_of;

fn ids(sent: &[Dispatch]) -> Vec<String> {
    sent.iter().map(|d| d.prompt_id.clone()).collect()
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// `n` prompt ids `p0`..`p{n-1}`.
fn many(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("p{i}")).collect()
}

/// One dataset `d0` over `prompts`, its book edited by `edit`.
fn one(top: &str, prompts: &[String], edit: impl FnOnce(&mut DatasetBook)) -> H {
    let cfg = config(top);
    let mut b = book("d0", &cfg);
    edit(&mut b);
    let refs: Vec<&str> = prompts.iter().map(String::as_str).collect();
    H::with_books(cfg, kimi(), vec![b], Source::ids(&[&refs]))
}

fn count_events(h: &H, needle: &str) -> usize {
    h.event_texts()
        .iter()
        .filter(|t| t.contains(needle))
        .count()
}

#[test]
fn expected_length_is_the_prior_until_a_whole_wave_has_finished() {
    struct Case {
        name: &'static str,
        max_tokens: u32,
        finished: u64,
        tokens: u64,
        in_flight: u64,
        expect: u64,
    }
    let cases = [
        Case {
            name: "nothing finished: prior capped at 2048",
            max_tokens: 16384,
            finished: 0,
            tokens: 0,
            in_flight: 0,
            expect: 2048,
        },
        Case {
            name: "nothing finished: prior is max_tokens below 2048",
            max_tokens: 512,
            finished: 0,
            tokens: 0,
            in_flight: 0,
            expect: 512,
        },
        Case {
            name: "10 short answers of 30 needed: the prior still holds",
            max_tokens: 16384,
            finished: 10,
            tokens: 1_000,
            in_flight: 0,
            expect: 2048,
        },
        Case {
            name: "early answers longer than the prior count at once",
            max_tokens: 16384,
            finished: 10,
            tokens: 50_000,
            in_flight: 0,
            expect: 5_000,
        },
        Case {
            name: "30 finished, few in flight: the observed mean",
            max_tokens: 16384,
            finished: 30,
            tokens: 3_000,
            in_flight: 5,
            expect: 100,
        },
        Case {
            name: "30 finished but 50 in flight: the wave is 50, prior holds",
            max_tokens: 16384,
            finished: 30,
            tokens: 3_000,
            in_flight: 50,
            expect: 2048,
        },
        Case {
            name: "50 finished, 50 in flight: the observed mean",
            max_tokens: 16384,
            finished: 50,
            tokens: 5_000,
            in_flight: 50,
            expect: 100,
        },
        Case {
            name: "a wave of empty answers still expects one token",
            max_tokens: 16384,
            finished: 30,
            tokens: 0,
            in_flight: 0,
            expect: 1,
        },
    ];
    for c in cases {
        let cfg = config(&format!("[request]\nmax_tokens = {}", c.max_tokens));
        let mut b = book("d0", &cfg);
        b.finished_here = c.finished;
        b.output_tokens_here = c.tokens;
        b.in_flight = c.in_flight;
        let h = H::with_books(cfg, kimi(), vec![b], Source::default());
        assert_eq!(
            h.core.admission.expected_output_tokens(0),
            c.expect,
            "{}",
            c.name
        );
    }
}

/// Answers in flight count at the prior (2048 here) against the output-token budget.
#[test]
fn token_budget_counts_answers_in_flight_at_their_expected_length() {
    let cases: [(&str, u64, u64, usize); 6] = [
        // (name, budget, tokens done before, requests sent at concurrency 10)
        ("a budget of one token still takes one prompt", 1, 0, 1),
        ("exactly one answer's worth", 2048, 0, 1),
        ("one token more than one answer", 2049, 0, 2),
        ("5000 tokens: three answers in flight", 5000, 0, 3),
        ("tokens already written count", 5000, 4000, 1),
        ("a budget already met takes nothing", 5000, 5000, 0),
    ];
    for (name, budget, written, want) in cases {
        let mut h = one("concurrency = 10", &many(20), |b| {
            b.budget = Some(budget);
            b.output_tokens = written;
        });
        let sent = h.dispatch();
        assert_eq!(sent.len(), want, "{name}: requests sent");
        assert_eq!(
            h.core.datasets()[0].in_flight,
            want as u64,
            "{name}: in flight"
        );
        // Nothing more is taken until something comes back.
        assert!(h.dispatch().is_empty(), "{name}: second dispatch");
    }
}

#[test]
fn a_dataset_takes_prompts_again_when_answers_come_in_shorter() {
    // A whole wave (30) finished at 1000 tokens each: the mean is 1000.
    let mut h = one("concurrency = 100", &many(40), |b| {
        b.budget = Some(40_000);
        b.finished_here = 30;
        b.output_tokens_here = 30_000;
        b.output_tokens = 30_000;
        b.done = 30;
    });
    let sent = h.dispatch();
    assert_eq!(
        sent.len(),
        10,
        "30000 written + 10 x 1000 expected fills 40000"
    );
    h.tick();
    assert!(h.core.datasets()[0].budget_reached, "budget reached");
    assert_eq!(count_events(&h, "d0: output-token budget reached"), 1);
    assert!(h.dispatch().is_empty(), "no prompt while the budget is met");

    // One answer comes in at 200 tokens: 30200 written, 9 x 974 expected, room again (not
    // sticky: the short answer made room, taken as the answer comes in).
    h.result(done(sent[0].key, None, 200, 0.001, "stop"));
    let more = h.dispatch();
    assert_eq!(
        more.len(),
        2,
        "30200 + 11 x 974 passes 40000, 30200 + 10 x 974 does not"
    );
    h.tick();
    assert!(h.core.datasets()[0].budget_reached, "met again");
    assert_eq!(
        count_events(&h, "output-token budget reached"),
        1,
        "the budget is said once"
    );
}

#[test]
fn max_samples_counts_done_in_flight_and_retries() {
    let cases: [(&str, u64, u64, usize); 4] = [
        // (name, cap, done by earlier runs, requests sent at concurrency 10)
        ("a fresh run sends up to the cap", 3, 0, 3),
        ("earlier answers count", 3, 2, 1),
        ("a cap already met sends nothing", 3, 3, 0),
        ("a cap above the prompts sends them all", 50, 0, 5),
    ];
    for (name, cap, earlier, want) in cases {
        let mut h = one("concurrency = 10", &many(5), |b| {
            b.max_samples = Some(cap);
            b.done = earlier;
        });
        assert_eq!(h.dispatch().len(), want, "{name}");
        if want == 0 {
            assert!(h.core.admission.dataset_finished(0), "{name}: finished");
            assert!(h.core.is_over(), "{name}: the run is over");
        }
    }

    // A retry waiting holds its place under the cap: no fresh prompt takes it.
    let mut h = one("concurrency = 10\nrouting = \"pinned\"", &many(5), |b| {
        b.max_samples = Some(3)
    });
    let sent = h.dispatch();
    assert_eq!(ids(&sent), names(&["p0", "p1", "p2"]));
    h.result(failed(sent[0].key, Some(0), http(500, None, "oops")));
    assert_eq!(h.core.datasets()[0].retries_pending, 1);
    assert!(
        h.dispatch().is_empty(),
        "the retry is not due and holds the slot"
    );
    h.at(120.0);
    let again = h.dispatch();
    assert_eq!(ids(&again), names(&["p0"]), "the retry, not p3");
    for d in sent[1..].iter().chain(&again) {
        h.result(done(d.key, d.pinned, 100, 0.001, "stop"));
    }
    assert_eq!(h.core.datasets()[0].done, 3);
    assert!(h.dispatch().is_empty(), "cap met with prompts left");
    assert!(h.core.is_over(), "the run ends at the cap");
}

#[test]
fn schedules_interleave_or_hold_the_line() {
    struct Case {
        name: &'static str,
        schedule: &'static str,
        first_cap: Option<u64>,
        want: &'static [&'static str],
    }
    let cases = [
        Case {
            name: "interleaved alternates",
            schedule: "interleaved",
            first_cap: None,
            want: &["a", "x", "b", "y", "c", "z"],
        },
        Case {
            name: "interleaved goes on with the other when one is capped",
            schedule: "interleaved",
            first_cap: Some(1),
            want: &["a", "x", "y", "z"],
        },
        Case {
            name: "sequential: a capped dataset with answers in flight holds the line",
            schedule: "sequential",
            first_cap: Some(2),
            want: &["a", "b"],
        },
    ];
    for c in cases {
        let cfg = config(&format!("concurrency = 6\nschedule = \"{}\"", c.schedule));
        let mut b0 = book("d0", &cfg);
        b0.max_samples = c.first_cap;
        let b1 = book("d1", &cfg);
        let mut h = H::with_books(
            cfg,
            kimi(),
            vec![b0, b1],
            Source::ids(&[&["a", "b", "c"], &["x", "y", "z"]]),
        );
        let sent = h.dispatch();
        assert_eq!(ids(&sent), names(c.want), "{}", c.name);
    }

    // In sequence, the next dataset starts once the first has nothing left in flight.
    let cfg = config("concurrency = 6\nschedule = \"sequential\"");
    let mut b0 = book("d0", &cfg);
    b0.max_samples = Some(2);
    let b1 = book("d1", &cfg);
    let mut h = H::with_books(
        cfg,
        kimi(),
        vec![b0, b1],
        Source::ids(&[&["a", "b", "c"], &["x", "y"]]),
    );
    let sent = h.dispatch();
    h.result(done(sent[0].key, None, 100, 0.001, "stop"));
    assert!(h.dispatch().is_empty(), "b still runs: d1 waits");
    h.result(done(sent[1].key, None, 100, 0.001, "stop"));
    assert_eq!(ids(&h.dispatch()), names(&["x", "y"]));
}

#[test]
fn sequential_holds_the_line_while_an_exhausted_dataset_still_runs() {
    let mut h = H::new(
        config("concurrency = 6\nschedule = \"sequential\""),
        kimi(),
        &[&["a", "b"], &["x", "y"]],
    );
    let sent = h.dispatch();
    assert_eq!(
        ids(&sent),
        names(&["a", "b"]),
        "d1 must wait while a and b are in flight"
    );
}

#[test]
fn ids_done_before_and_other_shards_are_skipped() {
    // Ids an earlier run finished or rejected.
    let mut h = one("concurrency = 10", &many(5), |b| {
        b.done_ids = ["p1", "p3"].iter().map(|s| s.to_string()).collect();
    });
    assert_eq!(ids(&h.dispatch()), names(&["p0", "p2", "p4"]), "done ids");

    // Two shards split the prompts between them, each id once.
    let all = many(20);
    let mut seen: Vec<String> = Vec::new();
    for k in 0..2u32 {
        let mut h = one("concurrency = 100", &all, |_| {});
        let cfg = h.core.config().clone();
        let books = h.core.datasets().to_vec();
        let now = h.now;
        h.core = Core::new(
            cfg,
            books,
            Arc::new(kimi()),
            Usd::ZERO,
            Some((k, 2)),
            "run".into(),
            &now,
        );
        let got = ids(&h.dispatch());
        let want: Vec<String> = all
            .iter()
            .filter(|id| shard_of(id, 2) == k)
            .cloned()
            .collect();
        assert_eq!(got, want, "shard {k} of 2");
        seen.extend(got);
    }
    seen.sort();
    let mut all_sorted = all.clone();
    all_sorted.sort();
    assert_eq!(seen, all_sorted, "the shards cover every prompt once");
}

#[test]
fn the_system_prompt_is_added_only_when_the_prompt_has_none() {
    let cfg = config("concurrency = 10");
    let mut b = book("d0", &cfg);
    b.system_prompt = Some("Answer briefly.".into());
    let own = Prompt {
        id: "own".into(),
        messages: vec![
            Message::system("You are a pirate."),
            Message::user("question own"),
        ],
        line: 2,
    };
    let src = Source(vec![[Ok(prompt("plain")), Ok(own)].into_iter().collect()]);
    let mut h = H::with_books(cfg, kimi(), vec![b], src);
    let sent = h.dispatch();
    let cases = [
        (
            "plain",
            vec![("system", "Answer briefly."), ("user", "question plain")],
        ),
        (
            "own",
            vec![("system", "You are a pirate."), ("user", "question own")],
        ),
    ];
    for (id, want) in cases {
        let d = sent.iter().find(|d| d.prompt_id == id).expect(id);
        let got: Vec<(&str, &str)> = d
            .request
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_str()))
            .collect();
        assert_eq!(got, want, "{id}");
    }
}

#[test]
fn bad_lines_become_one_input_reject_each() {
    let bad = |line: u64| {
        Err(PromptError {
            path: "a.jsonl".into(),
            line,
            message: "expected value".into(),
        })
    };
    let cases: [(&str, &[&str], usize); 2] = [
        ("two bad lines, two rejects", &[], 2),
        (
            "a line rejected by an earlier run is not rejected again",
            &["@line:2"],
            1,
        ),
    ];
    for (name, done_before, want) in cases {
        let cfg = config("concurrency = 10");
        let mut b = book("d0", &cfg);
        b.done_ids = done_before.iter().map(|s| s.to_string()).collect();
        let src = Source(vec![
            [Ok(prompt("a")), bad(2), Ok(prompt("b")), bad(4)]
                .into_iter()
                .collect(),
        ]);
        let mut h = H::with_books(cfg, kimi(), vec![b], src);
        let sent = h.dispatch();
        assert_eq!(ids(&sent), names(&["a", "b"]), "{name}: good lines go");
        assert_eq!(rejects(&h.other), vec!["input"; want], "{name}: rejects");
        assert_eq!(h.core.datasets()[0].rejected, want as u64, "{name}: count");
        for e in &h.other {
            if let Effect::Reject { dataset, record } = e {
                assert_eq!(*dataset, 0, "{name}");
                assert_eq!(record.attempts, 0, "{name}: never sent");
                assert_eq!(
                    record.id,
                    format!("@line:{}", record.line.expect("a line number")),
                    "{name}"
                );
                assert!(
                    record.error.contains("expected value"),
                    "{name}: {}",
                    record.error
                );
            }
        }
        assert!(h.dispatch().is_empty(), "{name}: nothing more");
        assert!(h.other.is_empty(), "{name}: each bad line once");
    }
}

#[test]
fn a_prompt_far_past_every_context_is_rejected_unsent() {
    // The test endpoints list a 262,144-token context: past twice that by the estimate
    // (characters / 4) nothing could serve it.
    let big = |id: &str, chars: usize| Prompt {
        id: id.into(),
        messages: vec![Message::user("x".repeat(chars))],
        line: 2,
    };
    // What is checked, the endpoints, the ids sent, the rejects' kinds.
    type Case = (
        &'static str,
        Vec<RunEndpoint>,
        &'static [&'static str],
        &'static [&'static str],
    );
    let cases: [Case; 3] = [
        (
            "listed contexts: the huge one is refused",
            kimi(),
            &["small", "near"],
            &["too-long"],
        ),
        (
            "an own server's context is unknown: all go",
            {
                let mut e = kimi();
                e[0].context_length = None;
                e
            },
            &["small", "near", "huge"],
            &[],
        ),
        (
            "a larger context somewhere: all go",
            {
                let mut e = kimi();
                e[1].context_length = Some(2_000_000);
                e
            },
            &["small", "near", "huge"],
            &[],
        ),
    ];
    for (name, endpoints, want_sent, want_rejects) in cases {
        let cfg = config("concurrency = 10");
        let b = book("d0", &cfg);
        let src = Source(vec![
            [
                Ok(prompt("small")),
                // 2 x 262,144 tokens exactly (four a message on top): the API's to judge; one more is not.
                Ok(big("near", 4 * 2 * 262_144 - 16)),
                Ok(big("huge", 4 * 2 * 262_144 - 12)),
            ]
            .into_iter()
            .collect(),
        ]);
        let mut h = H::with_books(cfg, endpoints, vec![b], src);
        let sent = h.dispatch();
        assert_eq!(ids(&sent), names(want_sent), "{name}: sent");
        assert_eq!(rejects(&h.other), names(want_rejects), "{name}: rejects");
        for e in &h.other {
            if let Effect::Reject { record, .. } = e {
                assert_eq!(record.id, "huge", "{name}");
                assert_eq!(record.attempts, 0, "{name}: never sent");
                assert!(
                    record.error.starts_with("line 2: about 524289 tokens")
                        && record.error.contains("(262144)"),
                    "{name}: {}",
                    record.error
                );
            }
        }
    }
}

#[test]
fn reaching_a_budget_is_said_once() {
    let cases: [(&str, Option<u64>, Option<u64>, &str); 2] = [
        (
            "sample cap",
            None,
            Some(2),
            "d0: sample cap reached; in-flight requests finish",
        ),
        (
            "token budget",
            Some(3000),
            None,
            "d0: output-token budget reached; in-flight requests finish",
        ),
    ];
    for (name, budget, cap, text) in cases {
        let mut h = one("concurrency = 10", &many(5), |b| {
            b.budget = budget;
            b.max_samples = cap;
        });
        assert_eq!(h.dispatch().len(), 2, "{name}");
        h.tick();
        h.at(1.0);
        h.tick();
        h.tick();
        assert_eq!(
            h.event_texts().iter().filter(|t| *t == text).count(),
            1,
            "{name}: {:?}",
            h.event_texts()
        );
        assert!(h.core.datasets()[0].budget_reached, "{name}");
    }
}

/// The tail (reliability-probe-5 P17): while a prompt is left to send there is none; once
/// every prompt is sent, the streams in flight are, each with what it is expected to stream
/// still as of the last tick (never under half an expected answer).
#[test]
fn the_tail_is_the_streams_in_flight_once_every_prompt_is_sent() {
    let routing = "routing = \"pinned\"\n[request]\nmax_tokens = 4000";
    let mut more = one(&format!("concurrency = 2\n{routing}"), &many(3), |_| {});
    assert_eq!(more.dispatch().len(), 2);
    assert!(
        more.core.tail_streams().is_none(),
        "a prompt is left to send"
    );

    let mut h = one(&format!("concurrency = 4\n{routing}"), &many(3), |_| {});
    let sent = h.dispatch();
    assert_eq!(sent.len(), 3);
    let per_token = sent[0].price_out.pico_per_token();
    // One stream 600 tokens along, one 1,900 along, one fresh; 2,048 expected of each (the
    // prior: nothing has finished).
    h.accrued.insert(sent[0].key, 600 * per_token);
    h.accrued.insert(sent[1].key, 1_900 * per_token);
    h.tick();
    let mut left: Vec<f64> = (h.core.tail_streams().expect("every prompt sent"))
        .iter()
        .map(|s| s.tokens_left)
        .collect();
    left.sort_by(f64::total_cmp);
    assert_eq!(left, [1_024.0, 1_448.0, 2_048.0]);
    // Nothing in flight: no tail, the run is over.
    for d in &sent {
        h.result(done(d.key, d.pinned, 100, 0.001, "stop"));
    }
    assert!(h.core.tail_streams().is_none());
}
