//! The one writer of a run's files: a thread that takes lines from a bounded queue and appends
//! them to `<dataset>.jsonl`, `<dataset>.rejects.jsonl`, `turns.jsonl` and `spend.jsonl`, in
//! small batches whose order on disk a crash can always be booked from (see `write_batches`),
//! and fsyncs at most every second: a crash or `kill -9` loses at most what was still in the
//! queue, never a line already handed to the OS.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use super::output::{
    OutputRecord, RejectRecord, SpendEntry, TurnLine, ledger_path, output_path, rejects_path,
    turns_path,
};

enum Op {
    Output(usize, String),
    Reject(usize, String),
    Spend(String),
    /// A ledger line whose sender waits until it is handed to the OS: an attempt's
    /// `dispatched` line, before its request may leave.
    SpendHanded(String, oneshot::Sender<()>),
    /// A kept answer's `complete` line: on disk after the records queued before it.
    BookKept(String),
    Turn(String),
    Flush(oneshot::Sender<std::io::Result<()>>),
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("the output writer has stopped (a write failed earlier: see the log)")]
    WriterGone,
    #[error("writing outputs failed: {0}")]
    Write(std::io::Error),
    #[error("cannot serialise a record: {0}")]
    Serialise(String),
}

/// Handle to the writer thread. Cloneable; sends wait when the queue is full (back-pressure on
/// workers, never unbounded memory).
#[derive(Clone)]
pub struct Writer {
    tx: mpsc::Sender<Op>,
}

/// The writer's files: each buffered, and the raw handles it syncs. Generic so that a test can
/// watch what reaches the OS, write by write.
struct Files<W: Durable = File> {
    outputs: Vec<BufWriter<W>>,
    rejects: Vec<BufWriter<W>>,
    ledger: BufWriter<W>,
    /// Finished turns of multi-turn rows in progress (`turns_file`).
    turns: BufWriter<W>,
    raw: Vec<W>,
}

/// A file the writer can sync to the disk.
trait Durable: Write {
    fn sync(&self) -> std::io::Result<()>;
}

impl Durable for File {
    fn sync(&self) -> std::io::Result<()> {
        self.sync_data()
    }
}

fn open_append(path: &Path) -> Result<File, StoreError> {
    super::no_follow(OpenOptions::new().create(true).append(true))
        .open(path)
        .map_err(|source| StoreError::Open {
            path: path.display().to_string(),
            source,
        })
}

impl Writer {
    /// Opens (appending) the files of `datasets` in `dir` and starts the writer thread.
    pub fn start(dir: &Path, datasets: &[String]) -> Result<(Writer, WriterThread), StoreError> {
        super::create_private_dir(dir).map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source,
        })?;
        let mut raw = Vec::new();
        let mut outputs = Vec::new();
        let mut rejects = Vec::new();
        for d in datasets {
            let o = open_append(&output_path(dir, d))?;
            let r = open_append(&rejects_path(dir, d))?;
            raw.push(o.try_clone().map_err(StoreError::Write)?);
            raw.push(r.try_clone().map_err(StoreError::Write)?);
            outputs.push(BufWriter::with_capacity(256 * 1024, o));
            rejects.push(BufWriter::new(r));
        }
        let l = open_append(&ledger_path(dir))?;
        raw.push(l.try_clone().map_err(StoreError::Write)?);
        let t = open_append(&turns_path(dir))?;
        raw.push(t.try_clone().map_err(StoreError::Write)?);
        let files = Files {
            outputs,
            rejects,
            ledger: BufWriter::new(l),
            turns: BufWriter::new(t),
            raw,
        };
        let (tx, rx) = mpsc::channel(4096);
        let handle = std::thread::Builder::new()
            .name("harvest-writer".into())
            .spawn(move || {
                // The cause (a full disk, say) is said at once, at ERROR: the run only sees
                // that the writer stopped.
                let done = run(files, rx);
                if let Err(e) = &done {
                    tracing::error!("writing outputs failed: {e}");
                }
                done
            })
            .map_err(StoreError::Write)?;
        Ok((Writer { tx }, WriterThread(Some(handle))))
    }

    async fn send(&self, op: Op) -> Result<(), StoreError> {
        self.tx.send(op).await.map_err(|_| StoreError::WriterGone)
    }

    pub async fn output(&self, dataset: usize, rec: &OutputRecord) -> Result<(), StoreError> {
        let line = jsonl(rec)?;
        self.send(Op::Output(dataset, line)).await
    }

    pub async fn reject(&self, dataset: usize, rec: &RejectRecord) -> Result<(), StoreError> {
        let line = jsonl(rec)?;
        self.send(Op::Reject(dataset, line)).await
    }

    pub async fn spend(&self, e: &SpendEntry) -> Result<(), StoreError> {
        let line = jsonl(e)?;
        self.send(Op::Spend(line)).await
    }

    /// An attempt's `dispatched` line: the answer says when it is handed to the OS, after which
    /// a crash (even `kill -9`) cannot lose it. Its request must not leave before: a `kill -9`
    /// while the line was still queued left a request the API billed and no line a later start
    /// could book it from (CI of stop 66, `detach::a_detached_run_outlives_its_viewers…`).
    pub async fn spend_handed(&self, e: &SpendEntry) -> Result<oneshot::Receiver<()>, StoreError> {
        let line = jsonl(e)?;
        let (tx, rx) = oneshot::channel();
        self.send(Op::SpendHanded(line, tx)).await?;
        Ok(rx)
    }

    /// A kept answer's `complete` line, which reaches the disk after the records sent before it
    /// (its row or turn): a crash between them leaves an answer the next start books from its
    /// record (`kept_booking::book_kept_answers`).
    pub async fn book_kept(&self, e: &SpendEntry) -> Result<(), StoreError> {
        let line = jsonl(e)?;
        self.send(Op::BookKept(line)).await
    }

    /// A finished turn of a multi-turn row in progress, for the next run to continue from.
    pub async fn turn(&self, t: &TurnLine) -> Result<(), StoreError> {
        let line = jsonl(t)?;
        self.send(Op::Turn(line)).await
    }

    /// Waits until everything sent so far is written, flushed and synced.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.send(Op::Flush(tx)).await?;
        rx.await
            .map_err(|_| StoreError::WriterGone)?
            .map_err(StoreError::Write)
    }
}

/// `v` as one line of JSONL, its `\n` included: the writer hands each line to the OS in one
/// piece, so a crash never leaves a whole record without its end of line.
fn jsonl(v: &impl Serialize) -> Result<String, StoreError> {
    let mut line = serde_json::to_string(v).map_err(|e| StoreError::Serialise(e.to_string()))?;
    line.push('\n');
    Ok(line)
}

/// Joins the writer thread when dropped (after every `Writer` handle is gone).
pub struct WriterThread(Option<std::thread::JoinHandle<std::io::Result<()>>>);

impl WriterThread {
    /// Waits for the thread to finish its queue. Call after dropping every `Writer`.
    pub fn join(mut self) -> std::io::Result<()> {
        match self.0.take() {
            Some(h) => h
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("writer thread panicked"))),
            None => Ok(()),
        }
    }
}

impl Drop for WriterThread {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            let _ = h.join();
        }
    }
}

fn run(mut f: Files, mut rx: mpsc::Receiver<Op>) -> std::io::Result<()> {
    // fsync (for power loss) happens on a thread of its own once a second, so that it never
    // holds up writes: a line handed to the OS survives `kill -9` whatever the disk does.
    let (stop_sync, sync_rx) = std::sync::mpsc::channel::<()>();
    let sync_files: Vec<File> = f.raw.iter().filter_map(|x| x.try_clone().ok()).collect();
    let syncer = std::thread::Builder::new()
        .name("harvest-fsync".into())
        .spawn(move || {
            use std::sync::mpsc::RecvTimeoutError;
            loop {
                match sync_rx.recv_timeout(Duration::from_secs(1)) {
                    Err(RecvTimeoutError::Timeout) => {}
                    _ => return,
                }
                for file in &sync_files {
                    if let Err(e) = file.sync_data() {
                        tracing::warn!("fsync of outputs failed: {e}");
                    }
                }
            }
        })?;
    let written = write_batches(&mut f, &mut rx);
    drop(stop_sync);
    let _ = syncer.join();
    if written.is_err() {
        // What a failed write left buffered stays off the disk: flushed by the drop, a record
        // could land without the ledger line it must follow.
        f.discard();
    }
    written
}

impl<W: Durable> Files<W> {
    /// Drops what the buffers hold without writing it.
    fn discard(self) {
        for w in (self.outputs.into_iter())
            .chain(self.rejects)
            .chain([self.ledger, self.turns])
        {
            let _ = w.into_parts();
        }
    }
}

/// Writes what the queue brings until every sender is gone, then flushes and syncs.
fn write_batches<W: Durable>(f: &mut Files<W>, rx: &mut mpsc::Receiver<Op>) -> std::io::Result<()> {
    // Each line comes with its `\n`: one `write_all`, so a line longer than the buffer goes
    // to the OS whole.
    let write_line = |w: &mut BufWriter<W>, line: &str| w.write_all(line.as_bytes());
    // What reaches the OS, batch by batch: the ledger's lines, then the records (rows, rejects,
    // turns), then the kept answers' `complete` lines. So an attempt's `started` line and a
    // reject's own line are on disk before the record they go with, and a kept answer's row or
    // turn before its `complete` line (a kill between them leaves a kept answer whose attempt
    // is open, which the next start books from the record). However many answers a batch
    // holds, it takes two writes of the ledger and one of each record file it touched (more
    // only when a buffer fills).
    let flush_records = |f: &mut Files<W>| -> std::io::Result<()> {
        for w in f.outputs.iter_mut().chain(f.rejects.iter_mut()) {
            w.flush()?;
        }
        f.turns.flush()
    };
    // A record that would spill its buffer to the OS mid-batch sends the ledger's lines first.
    let write_record = |ledger: &mut BufWriter<W>, w: &mut BufWriter<W>, line: &str| {
        if w.buffer().len() + line.len() > w.capacity() {
            ledger.flush()?;
        }
        write_line(w, line)
    };
    // The batch's kept answers' `complete` lines, held off the ledger's buffer (which may spill
    // at any time) until the records are flushed.
    let mut after: Vec<u8> = Vec::new();
    while let Some(first) = rx.blocking_recv() {
        let mut op = Some(first);
        let mut waiters = Vec::new();
        let mut handed = Vec::new();
        // Drain what is queued now: one batch, then one flush to the OS.
        while let Some(o) = op.take() {
            match o {
                Op::Output(d, line) => write_record(&mut f.ledger, &mut f.outputs[d], &line)?,
                Op::Reject(d, line) => write_record(&mut f.ledger, &mut f.rejects[d], &line)?,
                Op::Turn(line) => write_record(&mut f.ledger, &mut f.turns, &line)?,
                Op::Spend(line) => write_line(&mut f.ledger, &line)?,
                Op::SpendHanded(line, tx) => {
                    write_line(&mut f.ledger, &line)?;
                    handed.push(tx);
                }
                Op::BookKept(line) => after.extend_from_slice(line.as_bytes()),
                Op::Flush(w) => waiters.push(w),
            }
            op = rx.try_recv().ok();
        }
        f.ledger.flush()?;
        for tx in handed {
            // Its attempt may have been given up meanwhile: nobody waits then.
            let _ = tx.send(());
        }
        flush_records(f)?;
        if !after.is_empty() {
            f.ledger.write_all(&after)?;
            f.ledger.flush()?;
            after.clear();
        }
        if !waiters.is_empty() {
            for file in &f.raw {
                file.sync()?;
            }
        }
        for w in waiters {
            let _ = w.send(Ok(()));
        }
    }
    for w in f.outputs.iter_mut().chain(f.rejects.iter_mut()) {
        w.flush()?;
    }
    f.turns.flush()?;
    f.ledger.flush()?;
    for file in &f.raw {
        file.sync()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Usd;
    use crate::store::output::FailureCause;
    use crate::store::output::tests::rec;

    /// What reached the OS, write by write, across the writer's files.
    #[derive(Clone, Default)]
    struct Os(std::sync::Arc<std::sync::Mutex<Vec<(&'static str, String)>>>);

    struct Watched(&'static str, Os);

    impl Write for Watched {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let text = String::from_utf8_lossy(b).into_owned();
            self.1.0.lock().expect("the log").push((self.0, text));
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Durable for Watched {
        fn sync(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The writer's files, each buffered over what `make` gives for its name.
    fn files<W: Durable>(make: impl Fn(&'static str) -> BufWriter<W>) -> Files<W> {
        Files {
            outputs: vec![make("rows")],
            rejects: vec![make("rejects")],
            ledger: make("ledger"),
            turns: make("turns"),
            raw: Vec::new(),
        }
    }

    /// A `dispatched` line handed with [`Writer::spend_handed`] is answered once it is with the
    /// OS, and never when its write failed: its request must not leave before a kill can no
    /// longer lose it.
    #[test]
    fn a_handed_line_is_answered_only_once_the_os_has_it() {
        let os = Os::default();
        let mut f = files(|name| BufWriter::with_capacity(1 << 16, Watched(name, os.clone())));
        let (tx, mut rx) = mpsc::channel(8);
        let (handed, mut answer) = oneshot::channel();
        tx.try_send(Op::SpendHanded("dispatched 1\n".into(), handed))
            .map_err(|_| ())
            .expect("room");
        drop(tx);
        write_batches(&mut f, &mut rx).expect("written");
        assert_eq!(answer.try_recv(), Ok(()));
        let writes = os.0.lock().expect("the log").clone();
        assert!(
            writes
                .iter()
                .any(|(n, t)| *n == "ledger" && t == "dispatched 1\n")
        );

        // A ledger the OS refuses: no answer (the sender is dropped with the failed batch).
        struct Refused;
        impl Write for Refused {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl Durable for Refused {
            fn sync(&self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut f = files(|_| BufWriter::with_capacity(1 << 16, Refused));
        let (tx, mut rx) = mpsc::channel(8);
        let (handed, mut answer) = oneshot::channel();
        tx.try_send(Op::SpendHanded("dispatched 2\n".into(), handed))
            .map_err(|_| ())
            .expect("room");
        drop(tx);
        assert!(write_batches(&mut f, &mut rx).is_err());
        assert!(
            answer.try_recv().is_err(),
            "no answer for a line the OS refused"
        );
    }

    /// The order a kill must never break, whatever the buffers' sizes (one batch, buffers that
    /// spill mid-batch, lines longer than a buffer): an attempt's `started` line reaches the OS
    /// before its row or turn, a reject's line before its reject, a kept answer's row or turn
    /// before its `complete` line; each line in one write, once.
    #[test]
    fn what_a_kill_may_find_on_disk_is_always_in_the_order_a_start_can_book() {
        for capacity in [1 << 16, 300, 40] {
            let os = Os::default();
            let mut f = files(|name| BufWriter::with_capacity(capacity, Watched(name, os.clone())));
            let (tx, mut rx) = mpsc::channel(256);
            let line = |s: String| s + "\n";
            let mut must = Vec::new();
            for i in 0..12 {
                let pad = "x".repeat(i * 7);
                let (started, complete) = (format!("started {i}"), format!("complete {i}"));
                let send = |op: Op| tx.try_send(op).map_err(|_| ()).expect("room");
                send(Op::Spend(line(format!("dispatched {i}"))));
                send(Op::Spend(line(started.clone())));
                match i % 3 {
                    0 => {
                        let row = format!("row {i} {pad}");
                        send(Op::Output(0, line(row.clone())));
                        send(Op::BookKept(line(complete.clone())));
                        must.extend([(started, row.clone()), (row, complete)]);
                    }
                    1 => {
                        let turn = format!("turn {i} {pad}");
                        send(Op::Turn(line(turn.clone())));
                        send(Op::BookKept(line(complete.clone())));
                        must.extend([(started, turn.clone()), (turn, complete)]);
                    }
                    _ => {
                        let reject = format!("reject {i} {pad}");
                        send(Op::Spend(line(complete.clone())));
                        send(Op::Reject(0, line(reject.clone())));
                        must.extend([(started, reject.clone()), (complete, reject)]);
                    }
                }
            }
            drop(tx);
            write_batches(&mut f, &mut rx).expect("written");
            let writes = os.0.lock().expect("the log").clone();
            // Which write each line went out in: whole, and once.
            let at = |text: &str| -> usize {
                let hits: Vec<usize> = (writes.iter().enumerate())
                    .filter(|(_, (_, w))| w.lines().any(|l| l == text))
                    .map(|(k, _)| k)
                    .collect();
                assert_eq!(hits.len(), 1, "{text:?} at capacity {capacity}: {writes:?}");
                hits[0]
            };
            for (first, then) in &must {
                assert!(
                    at(first) < at(then),
                    "{first:?} after {then:?} at capacity {capacity}: {writes:?}"
                );
            }
            if capacity == 1 << 16 {
                let names: Vec<&str> = writes.iter().map(|(n, _)| *n).collect();
                assert_eq!(names, ["ledger", "rows", "rejects", "turns", "ledger"]);
            }
        }
    }

    #[tokio::test]
    async fn writes_then_resumes_and_repairs_a_torn_tail() {
        let dir = tempfile::tempdir().expect("tmp");
        let (w, thread) = Writer::start(dir.path(), &["B3".into()]).expect("start");
        for i in 0..100 {
            w.output(0, &rec(&format!("p{i}"), 1000))
                .await
                .expect("write");
        }
        w.reject(
            0,
            &RejectRecord {
                id: "bad".into(),
                line: Some(3),
                error: "HTTP 400".into(),
                error_kind: "400".into(),
                attempts: 1,
                created_at: "x".into(),
                cause: FailureCause::default(),
            },
        )
        .await
        .expect("reject");
        w.flush().await.expect("flush");
        drop(w);
        thread.join().expect("join");
        // A crash tore the last line.
        let p = output_path(dir.path(), "B3");
        let mut f = OpenOptions::new().append(true).open(&p).expect("open");
        f.write_all(b"{\"id\":\"p100\",\"conv").expect("write");
        drop(f);
        let names = ["B3".to_string()];
        let torn = crate::store::scan::scan_dir(dir.path(), &names)
            .expect("scan")
            .datasets[0]
            .outputs_file
            .torn
            .expect("torn");
        // (No ledger in this test: `repair::prepare` would refuse it, so the cut is done here.)
        crate::store::repair::cut_torn_tail(&p, torn).expect("cut");
        let found = crate::store::scan::scan_dir(dir.path(), &names).expect("scan");
        let ex = &found.datasets[0].existing;
        assert_eq!(ex.outputs, 100);
        assert_eq!(ex.rejects, 1);
        assert_eq!(ex.done.len(), 101);
        assert_eq!(ex.output_tokens, 700);
        assert_eq!(ex.cost, Usd::from_pico(100_000));
        assert_eq!(torn.len, 18);
        let text = std::fs::read_to_string(&p).expect("read");
        assert!(text.ends_with("}\n"));
        assert_eq!(text.lines().count(), 100);
        // Every line is a full record with provenance.
        let first: OutputRecord =
            serde_json::from_str(text.lines().next().expect("line")).expect("record");
        assert_eq!(first, rec("p0", 1000));
    }
}
