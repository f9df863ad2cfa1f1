//! Opening a prompt file as lines: plain JSONL, or JSONL compressed with gzip (`.jsonl.gz`) or
//! Zstandard (`.jsonl.zst`), as large corpora ship. The kind is told by the file's first
//! bytes (its magic number), not its name, so a misnamed file is still read right. Dekind
//! streams: nothing is held beyond the buffers.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// How a prompt file is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    Jsonl,
    Gzip,
    Zstd,
    Parquet,
}

impl FileKind {
    /// By the file's first bytes: gzip `1f 8b`, Zstandard frame `28 b5 2f fd`, Parquet `PAR1`.
    pub fn sniff(head: &[u8]) -> FileKind {
        match head {
            [0x1f, 0x8b, ..] => FileKind::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => FileKind::Zstd,
            [b'P', b'A', b'R', b'1', ..] => FileKind::Parquet,
            _ => FileKind::Jsonl,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            FileKind::Jsonl => "JSONL",
            FileKind::Gzip => "gzip-compressed JSONL",
            FileKind::Zstd => "Zstandard-compressed JSONL",
            FileKind::Parquet => "Parquet",
        }
    }
}

/// A reader that adds the bytes read through it to a shared count: the file's own bytes, so a
/// progress line over compressed files goes by their size on disk.
struct Counted<R> {
    inner: R,
    read: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// The lines of `path`, decompressed as its first bytes say, and the count of the file's own
/// bytes read so far.
pub(super) fn open_lines(
    path: &Path,
) -> std::io::Result<(Box<dyn BufRead + Send>, Arc<AtomicU64>, FileKind)> {
    let mut file = BufReader::with_capacity(1 << 16, File::open(path)?);
    let kind = FileKind::sniff(file.fill_buf()?);
    let read = Arc::new(AtomicU64::new(0));
    let raw = BufReader::with_capacity(
        1 << 16,
        Counted {
            inner: file,
            read: read.clone(),
        },
    );
    let lines: Box<dyn BufRead + Send> = match kind {
        FileKind::Jsonl => Box::new(raw),
        FileKind::Gzip => Box::new(BufReader::with_capacity(
            1 << 16,
            // Multi-member: `cat a.gz b.gz` and pigz's output are one stream of lines.
            flate2::bufread::MultiGzDecoder::new(raw),
        )),
        // Parquet reads its footer first and its column chunks where they are: not a stream.
        FileKind::Parquet => {
            drop(raw);
            Box::new(BufReader::with_capacity(
                1 << 16,
                super::parquet_lines::ParquetLines::open(path, read.clone())?,
            ))
        }
        // Every frame in turn: pzstd's output and concatenated files are one stream too.
        FileKind::Zstd => Box::new(BufReader::with_capacity(
            1 << 16,
            zstd::stream::read::Decoder::with_buffer(raw)?,
        )),
    };
    Ok((lines, read, kind))
}

/// The first row of `path` that is a JSON object (blank and bad lines before it passed over),
/// and how the file is stored: what `harvest init` reads to tell a file's shape.
pub fn first_row(
    path: &Path,
) -> std::io::Result<(FileKind, Option<serde_json::Map<String, serde_json::Value>>)> {
    let (mut lines, _, kind) = open_lines(path)?;
    let mut buf = Vec::new();
    for _ in 0..1_000 {
        buf.clear();
        let (n, over) =
            super::line::read_capped_line(&mut *lines, &mut buf, super::line::MAX_LINE_BYTES)?;
        if n == 0 {
            break;
        }
        if over {
            continue;
        }
        if let Ok(serde_json::Value::Object(row)) = serde_json::from_slice(buf.trim_ascii()) {
            return Ok((kind, Some(row)));
        }
    }
    Ok((kind, None))
}
