//! The control socket's cost per snapshot: encoding one snapshot of a busy run with 100
//! endpoints (8 datasets, 50 events, 360 history points) as the wire's JSON line, and, for the
//! choice of format, as MessagePack (rmp-serde, field names kept as JSON keeps them); the
//! bytes of each, and decoding the JSON line back. Medians of 7 batches.
//!
//! `cargo bench --bench wire`

use std::sync::Arc;
use std::time::{Duration, Instant};

use harvest::engine::Snapshot;
use harvest::remote::wire::{self, EngineMsg};
use harvest::tui::testkit::busy_snapshot;

fn snapshot_of(endpoints: usize) -> Snapshot {
    let mut s = busy_snapshot();
    let base = s.endpoints.clone();
    let mut i = 0;
    while s.endpoints.len() < endpoints {
        let mut e = base[i % base.len()].clone();
        e.tag = format!("{}/x{i}", e.tag);
        e.done += i as u64;
        s.endpoints.push(e);
        i += 1;
    }
    s
}

fn median(mut f: impl FnMut()) -> Duration {
    let n = 200u32;
    let mut batches: Vec<Duration> = (0..7)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..n {
                f();
            }
            t.elapsed() / n
        })
        .collect();
    batches.sort();
    batches[3]
}

fn main() {
    for endpoints in [11, 100] {
        let msg = EngineMsg::Snapshot {
            snapshot: Arc::new(snapshot_of(endpoints)),
        };
        let line = wire::encode(&msg);
        let packed = rmp_serde::to_vec_named(&msg).expect("msgpack");
        let json = median(|| {
            std::hint::black_box(wire::encode(std::hint::black_box(&msg)));
        });
        let mp = median(|| {
            std::hint::black_box(rmp_serde::to_vec_named(std::hint::black_box(&msg)).ok());
        });
        let decode = median(|| {
            std::hint::black_box(wire::decode::<EngineMsg>(&line[..line.len() - 1]).ok());
        });
        // Five snapshots a second per viewer: the share of one core it costs.
        let share = json.as_secs_f64() * 5.0 * 100.0;
        println!(
            "{endpoints:>3} endpoints: JSON encode {:>7.1} us, {:>6} bytes | MessagePack encode \
             {:>7.1} us, {:>6} bytes | JSON decode {:>7.1} us | 5/s per viewer = {share:.3}% \
             of a core",
            json.as_secs_f64() * 1e6,
            line.len(),
            mp.as_secs_f64() * 1e6,
            packed.len(),
            decode.as_secs_f64() * 1e6,
        );
    }
}
