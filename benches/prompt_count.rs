//! What a run's start costs on each kind of prompt file: 6 datasets of 40,000 prompts each as
//! plain JSONL, as Zstandard-compressed JSONL and as Parquet (snappy, as pyarrow writes it),
//! read by the start's counting pass (`count_prompts`: every row parsed, ids hashed for
//! duplicates) and by the run's reading pass (`PromptReader`: every prompt built). Side by side
//! in one run, medians of 3; the ratios are what to read on a shared machine.
//!
//! `cargo bench --bench prompt_count`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use harvest::store::prompts::{PromptReader, count_prompts};

#[path = "../tests/it/common/parquet.rs"]
#[allow(dead_code)]
mod parquet;

const DATASETS: usize = 6;
const PROMPTS: usize = 40_000;

/// A prompt of about 600 characters, different for every `i` (a tiny LCG picks the words).
fn text(i: usize) -> String {
    const WORDS: [&str; 16] = [
        "explain",
        "the",
        "proof",
        "of",
        "a",
        "theorem",
        "about",
        "graphs",
        "with",
        "code",
        "in",
        "rust",
        "and",
        "python",
        "step",
        "carefully",
    ];
    let mut x = (i as u64)
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut s = format!("Task {i}: ");
    while s.len() < 600 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        s.push_str(WORDS[(x >> 60) as usize]);
        s.push(' ');
    }
    s
}

/// The three kinds of each dataset, written once into `dir`.
fn write_files(dir: &Path) -> [(&'static str, Vec<PathBuf>); 3] {
    let (mut jsonl, mut zst, mut pq) = (Vec::new(), Vec::new(), Vec::new());
    for d in 0..DATASETS {
        let rows: Vec<(String, String)> = (0..PROMPTS)
            .map(|i| (format!("b{d}-{i}"), text(d * PROMPTS + i)))
            .collect();
        let body: String = rows
            .iter()
            .map(|(id, t)| format!("{}\n", serde_json::json!({"id": id, "prompt": t})))
            .collect();
        let p = dir.join(format!("b{d}.jsonl"));
        std::fs::write(&p, &body).expect("jsonl");
        jsonl.push(p);
        let p = dir.join(format!("b{d}.jsonl.zst"));
        std::fs::write(
            &p,
            zstd::stream::encode_all(body.as_bytes(), 3).expect("zst"),
        )
        .expect("zst");
        zst.push(p);
        let p = dir.join(format!("b{d}.parquet"));
        let table: Vec<Vec<Option<String>>> = rows
            .into_iter()
            .map(|(id, t)| vec![Some(id), Some(t)])
            .collect();
        parquet::write_text(&p, &["id", "prompt"], &table);
        pq.push(p);
    }
    [("JSONL", jsonl), ("JSONL .zst", zst), ("Parquet", pq)]
}

fn median_of_3(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..3)
        .map(|_| {
            let t0 = Instant::now();
            f();
            t0.elapsed()
        })
        .collect();
    t.sort();
    t[1]
}

fn main() {
    let dir = tempfile::tempdir().expect("tmp");
    let kinds = write_files(dir.path());
    println!(
        "{DATASETS} datasets x {PROMPTS} prompts (~600 characters each), one core, medians of 3"
    );
    println!(
        "{:<12} {:>10} {:>12} {:>10} {:>12} {:>8}",
        "kind", "MB on disk", "count pass", "vs JSONL", "read pass", "vs JSONL"
    );
    let mut base: Option<(Duration, Duration)> = None;
    for (kind, files) in &kinds {
        let bytes: u64 = files
            .iter()
            .map(|f| std::fs::metadata(f).expect("meta").len())
            .sum();
        let count = median_of_3(|| {
            for f in files {
                let c = count_prompts(f).expect("count");
                assert_eq!(c.valid, PROMPTS as u64);
            }
        });
        let read = median_of_3(|| {
            for f in files {
                let n = PromptReader::open(f)
                    .expect("open")
                    .filter(Result::is_ok)
                    .count();
                assert_eq!(n, PROMPTS);
            }
        });
        let (bc, br) = *base.get_or_insert((count, read));
        println!(
            "{kind:<12} {:>10.1} {:>10.0}ms {:>9.2}x {:>10.0}ms {:>7.2}x",
            bytes as f64 / 1e6,
            count.as_secs_f64() * 1e3,
            count.as_secs_f64() / bc.as_secs_f64(),
            read.as_secs_f64() * 1e3,
            read.as_secs_f64() / br.as_secs_f64(),
        );
    }
}
