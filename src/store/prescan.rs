//! The start of a run's one pass over its prompt files (counts, the shard's share, bad lines,
//! duplicate ids), run on every core across files, with the bytes read so far shared for a
//! progress line (files of millions of prompts take seconds).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::prompts::{PromptCount, PromptError, PromptFields, count_prompts_checking};

/// How far the pass is: read by the scanning threads, shown by whoever watches.
#[derive(Debug, Default)]
pub struct ScanProgress {
    /// Bytes of all the files, known before the pass starts.
    pub total_bytes: AtomicU64,
    pub read_bytes: AtomicU64,
    pub files: AtomicUsize,
    pub files_done: AtomicUsize,
}

impl ScanProgress {
    /// `(read, total)` bytes so far.
    pub fn bytes(&self) -> (u64, u64) {
        (
            self.read_bytes.load(Ordering::Relaxed),
            self.total_bytes.load(Ordering::Relaxed),
        )
    }
}

/// A file to count: its path, its rows' field names, and the length an earlier run's count
/// read of it (from the manifest), at which its hash is kept too.
pub(crate) type ToCount = (PathBuf, PromptFields, Option<u64>);

/// Counts every file, as many at once as there are cores (at most one thread a file). The
/// results are in the order of `paths`, each file's own error in its place.
pub(crate) fn count_all(
    paths: &[ToCount],
    shard: Option<(u32, u32)>,
    progress: &ScanProgress,
) -> Vec<Result<PromptCount, PromptError>> {
    let count = |(p, f, earlier): &ToCount| {
        count_prompts_checking(p, f, shard, &progress.read_bytes, *earlier)
    };
    let total: u64 = paths
        .iter()
        .filter_map(|(p, _, _)| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    progress.total_bytes.store(total, Ordering::Relaxed);
    progress.files.store(paths.len(), Ordering::Relaxed);
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(paths.len());
    if threads <= 1 {
        return paths
            .iter()
            .map(|one| {
                let r = count(one);
                progress.files_done.fetch_add(1, Ordering::Relaxed);
                r
            })
            .collect();
    }
    // Files handed out one at a time, so a big file and many small ones still share the cores.
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<Result<PromptCount, PromptError>>> =
        (0..paths.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(one) = paths.get(i) else { break };
                        mine.push((i, count(one)));
                        progress.files_done.fetch_add(1, Ordering::Relaxed);
                    }
                    mine
                })
            })
            .collect();
        for w in workers {
            // A scanning thread that panicked leaves its files unset; they are counted again
            // below on this thread, so the panic surfaces where it belongs.
            if let Ok(mine) = w.join() {
                for (i, r) in mine {
                    results[i] = Some(r);
                }
            }
        }
    });
    results
        .into_iter()
        .zip(paths)
        .map(|(r, one)| r.unwrap_or_else(|| count(one)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::prompts::count_prompts_in_shard;

    #[test]
    fn counts_every_file_in_order_as_one_at_a_time_would() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut paths = Vec::new();
        for (f, n) in [(0, 5), (1, 300), (2, 1), (3, 4_500)].iter().copied() {
            let p = dir.path().join(format!("p{f}.jsonl"));
            let mut body: String = (0..n)
                .map(|i| format!("{{\"id\": \"{f}-{i}\", \"prompt\": \"q{i}\"}}\n"))
                .collect();
            // A duplicate and a bad line in one file.
            if f == 1 {
                body.push_str("{\"id\": \"1-0\", \"prompt\": \"other\"}\nnot json\n");
            }
            std::fs::write(&p, body).expect("write");
            paths.push((p, PromptFields::default(), None));
        }
        paths.push((
            dir.path().join("missing.jsonl"),
            PromptFields::default(),
            None,
        ));
        let progress = ScanProgress::default();
        let all = count_all(&paths, Some((1, 3)), &progress);
        assert_eq!(all.len(), 5);
        for ((p, f, _), r) in paths.iter().zip(&all).take(4) {
            let one = count_prompts_in_shard(p, f, Some((1, 3))).expect("alone");
            let r = r.as_ref().expect("counted");
            assert_eq!(
                (r.valid, r.invalid, r.duplicates, r.in_shard, r.bytes),
                (
                    one.valid,
                    one.invalid,
                    one.duplicates,
                    one.in_shard,
                    one.bytes
                ),
                "{}",
                p.display()
            );
        }
        assert_eq!(
            all[1].as_ref().map(|c| (c.duplicates, c.invalid)).ok(),
            Some((1, 1))
        );
        assert!(
            all[4].is_err(),
            "the missing file's own error, in its place"
        );
        let (read, total) = progress.bytes();
        let on_disk: u64 = paths
            .iter()
            .filter_map(|(p, _, _)| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        assert_eq!((read, total), (on_disk, on_disk));
        assert_eq!(progress.files_done.load(Ordering::Relaxed), 5);
    }
}
