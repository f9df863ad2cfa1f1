//! A Parquet file's rows as JSON object lines, so that a dataset as the Hugging Face Hub ships it
//! is read by the same reader as JSONL: the same formats, field names, ids, duplicates and
//! errors, a row's line number being its row number from 1. Columns become the row's fields by
//! their names (a string column a string, a list of structs a list of objects, a null a null).

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::reader::RowIter;
use parquet::record::{Field, Row};

/// Reads a Parquet file's rows, one JSON line each, as bytes.
pub(super) struct ParquetLines {
    rows: RowIter<'static>,
    line: Vec<u8>,
    at: usize,
    /// The file's bytes read, as the share of its rows read (for a progress line).
    read: Arc<AtomicU64>,
    file_len: u64,
    rows_total: u64,
    rows_done: u64,
}

impl ParquetLines {
    pub(super) fn open(path: &Path, read: Arc<AtomicU64>) -> std::io::Result<ParquetLines> {
        let file = File::open(path)?;
        let file_len = file.metadata()?.len();
        let reader = SerializedFileReader::new(file).map_err(invalid)?;
        refuse_large_pages(path, reader.metadata())?;
        let rows_total = u64::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
        Ok(ParquetLines {
            rows: RowIter::from_file_into(Box::new(reader)),
            line: Vec::new(),
            at: 0,
            read,
            file_len,
            rows_total,
            rows_done: 0,
        })
    }
}

/// Reads every page header before any page: a page too large for a prompt file, or holding a
/// value longer than a prompt line may be, is refused before it is decompressed
/// (reliability-probe-4 N4; see [`super::parquet_pages`]).
fn refuse_large_pages(
    path: &Path,
    meta: &parquet::file::metadata::ParquetMetaData,
) -> std::io::Result<()> {
    let mut file = std::io::BufReader::with_capacity(1 << 14, File::open(path)?);
    let mut first_row = 0u64;
    for (g, group) in meta.row_groups().iter().enumerate() {
        for column in group.columns() {
            let start = column
                .dictionary_page_offset()
                .unwrap_or(column.data_page_offset());
            let (Ok(start), Ok(len)) = (
                u64::try_from(start),
                u64::try_from(column.compressed_size()),
            ) else {
                return Err(invalid(format!(
                    "row group {g}, column {}: a negative offset or size",
                    column.column_path()
                )));
            };
            let max_row = super::line::MAX_LINE_BYTES as u64;
            let walked = super::parquet_pages::walk_chunk(&mut file, start, len, &mut |page| {
                super::parquet_pages::too_large(page, max_row).map_or(Ok(()), Err)
            })?;
            if let Err(why) = walked {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "row group {g} (rows from {}), column {}: {why}",
                        first_row + 1,
                        column.column_path()
                    ),
                ));
            }
        }
        first_row += u64::try_from(group.num_rows()).unwrap_or(0);
    }
    Ok(())
}

/// A row as a JSON object, its binary columns (BYTE_ARRAY without a String annotation, as Hive,
/// Impala and older Spark write strings; Spark reads them with `binaryAsString`) as their text
/// when it is UTF-8: `to_json_value` gives them base64, which was sent and paid for as the
/// prompt (reliability-probe-4 N7). A value that is not UTF-8 becomes an object saying so,
/// which a prompt, message or id field refuses, naming the row and the field.
fn row_json(row: &Row) -> serde_json::Value {
    serde_json::Value::Object(
        row.get_column_iter()
            .map(|(name, field)| (name.clone(), field_json(field)))
            .collect(),
    )
}

fn field_json(field: &Field) -> serde_json::Value {
    match field {
        Field::Bytes(b) => match std::str::from_utf8(b.data()) {
            Ok(text) => serde_json::Value::String(text.to_string()),
            Err(_) => serde_json::json!({
                "binary": format!("{} bytes that are not UTF-8 text", b.data().len())
            }),
        },
        Field::Group(row) => row_json(row),
        Field::ListInternal(list) => {
            serde_json::Value::Array(list.elements().iter().map(field_json).collect())
        }
        other => other.to_json_value(),
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "not a readable Parquet file: {}",
            at_most(&e.to_string(), 300)
        ),
    )
}

/// `text` cut to `max` characters, saying how long it was: the parquet crate's UTF-8 error
/// prints the whole value as a list of decimal bytes (2.3 KB for a 700-byte value,
/// reliability-probe-4 N12).
fn at_most(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_string(),
        Some((cut, _)) => format!(
            "{}... ({} characters in all)",
            &text[..cut],
            text.chars().count()
        ),
    }
}

impl Read for ParquetLines {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at == self.line.len() {
            let Some(row) = self.rows.next() else {
                return Ok(0);
            };
            let row = row.map_err(invalid)?;
            self.line.clear();
            self.at = 0;
            serde_json::to_writer(&mut self.line, &row_json(&row))
                .map_err(std::io::Error::other)?;
            self.line.push(b'\n');
            // The share of the file read so far, as the share of its rows.
            let before = self.share();
            self.rows_done += 1;
            self.read
                .fetch_add(self.share().saturating_sub(before), Ordering::Relaxed);
        }
        let n = out.len().min(self.line.len() - self.at);
        out[..n].copy_from_slice(&self.line[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl ParquetLines {
    fn share(&self) -> u64 {
        if self.rows_total == 0 {
            return 0;
        }
        (u128::from(self.file_len) * u128::from(self.rows_done) / u128::from(self.rows_total))
            as u64
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_long_error_is_cut_and_says_how_long_it_was() {
        let bytes: Vec<String> = (0..700).map(|i| (i % 256).to_string()).collect();
        let long = format!("invalid utf-8 sequence: [{}]", bytes.join(", "));
        let cut = super::at_most(&long, 300);
        assert!(cut.len() < 340 && cut.ends_with(&format!("({} characters in all)", long.len())));
        assert_eq!(super::at_most("short", 300), "short");
    }
}
