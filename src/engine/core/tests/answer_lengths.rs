//! The life table of answer lengths: what a stream closed at `d` tokens is expected to run on
//! for, with the streams still running counted as at least as long as they have streamed.

use crate::engine::core::answer_lengths::AnswerLengths;

/// `n` answers of an exponential length of mean `mean`, at evenly spaced quantiles (no RNG).
fn exponential(n: u32, mean: f64) -> Vec<u64> {
    (0..n)
        .map(|k| (-mean * (1.0 - (f64::from(k) + 0.5) / f64::from(n)).ln()).round() as u64)
        .collect()
}

fn table(max_tokens: u32, ended: &[u64], closed: &[u64]) -> AnswerLengths {
    let mut t = AnswerLengths::new(max_tokens);
    for &e in ended {
        t.ended(e);
    }
    for &c in closed {
        t.closed(c);
    }
    t
}

fn within(got: u64, want: f64, share: f64) -> bool {
    (got as f64 - want).abs() <= want * share
}

#[test]
fn nothing_is_said_before_an_answer_ends_and_nothing_runs_past_max_tokens() {
    let empty = table(4096, &[], &[300, 900]);
    assert_eq!(empty.rest_after(200, [500, 700]), None);
    let t = table(4096, &[1000, 2000], &[]);
    assert_eq!(t.rest_after(4096, []), Some(0));
    assert_eq!(t.rest_after(9000, []), Some(0));
}

#[test]
fn a_memoryless_length_runs_on_for_its_mean_whatever_a_stream_has_streamed() {
    // Exponential answers of mean 800: a stream has as much left at 3,000 tokens as at 0.
    let t = table(8192, &exponential(4000, 800.0), &[]);
    for d in [0, 1000, 3000] {
        let rest = t.rest_after(d, []).expect("answers have ended");
        assert!(within(rest, 800.0, 0.06), "at {d}: {rest}");
    }
}

#[test]
fn answers_of_one_length_leave_what_is_left_of_it() {
    // Every answer is 1,000 tokens (a bin is 32 wide at 4,096: known to within it).
    let t = table(4096, &[1000; 200], &[]);
    let rest = t.rest_after(500, []).expect("answers have ended");
    assert!(rest.abs_diff(500) <= 32, "{rest}");
    // Every answer runs to `max_tokens` (cut): a stream at 4,000 has 96 left.
    let cut = table(4096, &[4096; 50], &[]);
    let rest = cut.rest_after(4000, []).expect("answers have ended");
    assert!(rest.abs_diff(96) <= 32, "{rest}");
}

#[test]
fn the_long_answers_still_running_are_not_taken_for_the_short_ones_that_ended() {
    // Early in a run only the short answers have ended: of exponential answers of mean 800,
    // those above 1,500 tokens are still streaming, at 1,500. The answers that ended average
    // about 528; a stream closed at 1,500 still has 800 to go (what the API bills where a close
    // is billed in full). The running streams are what say so.
    let all = exponential(4000, 800.0);
    let (ended, running): (Vec<u64>, Vec<u64>) = all.iter().partition(|&&l| l < 1500);
    let mean_ended = ended.iter().sum::<u64>() as f64 / ended.len() as f64;
    assert!(
        within(mean_ended.round() as u64, 528.0, 0.02),
        "{mean_ended}"
    );
    let t = table(8192, &ended, &[]);
    let rest = t
        .rest_after(1500, running.iter().map(|_| 1500))
        .expect("answers have ended");
    assert!(within(rest, 800.0, 0.10), "{rest}");
    // The same streams closed (at 1,500) rather than running say the same.
    let closed = table(8192, &ended, &vec![1500; running.len()]);
    assert_eq!(closed.rest_after(1500, []), Some(rest));
    // Without them the table knows only the short answers and says far less.
    let short = t.rest_after(1500, []).expect("answers have ended");
    assert!(short < 400, "{short}");
}

/// A stream closed where the close is billed in full, at a stop, expects what is left of an
/// answer as long as it already was: the streams still running say the answers run longer
/// than the short ones that ended first.
#[test]
fn a_close_at_a_stop_expects_the_rest_the_running_streams_show() {
    use crate::engine::core::tests::*;
    use crate::store::output::SpendKind;
    // Moonshot bills a closed stream in full; 20 streams, max_tokens 4096.
    let top = "budget_mode = \"expected\"\nconcurrency = 20\nrouting = \"pinned\"\n\
               [request]\nmax_tokens = 4096\n[policy]\nexclude = [\"chutes\", \"together\"]";
    let ids: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let cases = [
        // (what, tokens the running streams have streamed, the least and most rest expected)
        (
            "the others still running at 3,000 tokens: a long rest",
            3000,
            700,
            2000,
        ),
        (
            "the others just begun: the ended answers say a short one",
            0,
            0,
            300,
        ),
    ];
    for (what, running_at, least, most) in cases {
        let mut h = H::new(config(top), kimi(), &[&ids]);
        let sent = h.dispatch();
        assert_eq!(sent.len(), 20, "{what}");
        let e = sent[0].pinned;
        let cost =
            |d: &Dispatch, n: u64| d.price_in.cost(d.prompt_tokens) + d.fee + d.price_out.cost(n);
        // Ten short answers end (100 to 1,000 tokens); the rest stream on.
        for (i, d) in sent[..10].iter().enumerate() {
            let n = 100 * (i as u64 + 1);
            h.result(done(d.key, e, n, cost(d, n).as_f64(), "stop"));
        }
        // What they have received is what the table reads (their running cost is at the
        // price of an endpoint the core may not know).
        for d in &sent[10..] {
            h.accrued.insert(d.key, cost(d, running_at).pico());
            h.tokens.insert(d.key, running_at);
        }
        h.tick();
        // The stop closes one at 1,500 tokens.
        let d = &sent[10];
        let booked = cost(d, 1500);
        let effects = h.result(cancelled(d.key, e, 1500, booked.as_f64()));
        let line = line_of(&effects, SpendKind::Cancelled).expect("a closed line");
        let rest = line.expected_usd.expect("its expectation").pico() - line.usd.pico();
        let tokens = rest / d.price_out.pico_per_token();
        assert!(
            (least..=most).contains(&tokens),
            "{what}: {tokens} tokens expected past the close"
        );
    }
}

/// What a closed stream goes on to be billed is priced where it was served: OpenRouter routed
/// it over a set and it was dispatched at the set's dearest price, but the stream named its
/// endpoint (at the simulator's endpoints 3.00 against 2.24 to 2.50 USD/M: a quarter of
/// `status`'s open amount). Unnamed, the dispatch's price stands.
#[test]
fn a_closed_streams_rest_is_priced_at_the_endpoint_that_served_it() {
    use crate::engine::core::tests::*;
    use crate::store::output::SpendKind;
    // Two endpoints that bill a close in full, at 2.00 and 3.00 USD/M out; OpenRouter routes.
    let mut cheap = ep("cheap/int4", "Cheap", "int4", 0.50, 2.00);
    let mut dear = ep("dear/int4", "Dear", "int4", 0.50, 3.00);
    cheap.cancel_stops_billing = false;
    dear.cancel_stops_billing = false;
    let top = "budget_mode = \"expected\"\n[request]\nmax_tokens = 4096";
    // (what, the endpoint the stream named, USD per million its rest is priced at)
    let cases = [
        ("named the cheaper endpoint: its price", Some(0), 2.00),
        ("named the dearer: its price", Some(1), 3.00),
        ("named none: the dispatch's, the set's dearest", None, 3.00),
    ];
    for (what, named, per_million) in cases {
        let mut h = H::new(config(top), vec![cheap.clone(), dear.clone()], &[&["a"]]);
        let sent = h.dispatch();
        assert_eq!(sent.len(), 1, "{what}");
        let d = &sent[0];
        assert_eq!(d.pinned, None, "{what}: routed");
        assert_eq!(d.over.len(), 2, "{what}: over both");
        // No answer has ended: the rest is the request's expectation, in tokens.
        let booked = d.price_in.cost(d.prompt_tokens) + d.fee + d.price_out.cost(100);
        let effects = h.result(cancelled(d.key, named, 100, booked.as_f64()));
        let line = line_of(&effects, SpendKind::Cancelled).expect("a closed line");
        let rest = line.expected_usd.expect("its expectation").pico() - line.usd.pico();
        let tokens = h.core.admission.expected_output_tokens(0);
        let price = crate::domain::Price::per_million_f64(per_million).expect("a price");
        assert_eq!(rest, price.cost(tokens).pico(), "{what}");
    }
}
