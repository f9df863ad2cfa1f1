//! What harvest's own work costs per streamed event (issue #36, item 3): the SSE framing and
//! the chunk's JSON parse into the accumulator, on real OpenRouter bytes (the recorded Kimi K2.5
//! stream of `tests/fixtures/recorded`, reasoning then answer, one token per event), fed one
//! event per read as at real pace. Prints CPU nanoseconds per event (this thread's CPU clock,
//! so a busy machine moves the figures less than a wall clock would), the median of 7 rounds.
//!
//! ```text
//! cargo bench --bench stream_parse
//! ```

use std::hint::black_box;
use std::time::Duration;

use harvest::openrouter::StreamAccumulator;
use harvest::openrouter::sse::SseDecoder;

/// The recorded stream, one event (with its blank line) per entry.
fn recorded_events() -> Vec<Vec<u8>> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/recorded/kimi_k25_modelrun_reasoning_answer.sse"
    );
    let text = std::fs::read_to_string(path).expect("the recorded stream");
    text.split_inclusive("\n\n")
        .map(|e| e.as_bytes().to_vec())
        .collect()
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// CPU nanoseconds per event over `streams` passes of `events`, framing only or framing and
/// parse.
fn round(events: &[Vec<u8>], streams: usize, parse: bool) -> f64 {
    let start = thread_cpu();
    let mut n = 0u64;
    for _ in 0..streams {
        let mut sse = SseDecoder::new();
        let mut acc = StreamAccumulator::new(true);
        for e in events {
            sse.push(e);
            while let Some(data) = sse.next_event() {
                let data = data.expect("UTF-8");
                n += 1;
                if parse {
                    black_box(acc.feed(data).expect("a chunk"));
                } else {
                    black_box(data);
                }
            }
        }
        if parse {
            black_box(acc.finish(None, Duration::ZERO).expect("a completion"));
        }
    }
    (thread_cpu() - start).as_nanos() as f64 / n as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let events = recorded_events();
    let streams = 2_000;
    round(&events, 200, true);
    let sse: Vec<f64> = (0..7).map(|_| round(&events, streams, false)).collect();
    let both: Vec<f64> = (0..7).map(|_| round(&events, streams, true)).collect();
    let (sse, both) = (median(sse), median(both));
    println!(
        "stream_parse: {} events a stream ({} bytes), {streams} streams a round, median of 7",
        events.len(),
        events.iter().map(Vec::len).sum::<usize>()
    );
    println!("  SSE framing:          {sse:7.0} ns per event");
    println!("  framing + JSON parse: {both:7.0} ns per event");
    println!("  the parse alone:      {:7.0} ns per event", both - sse);
}
