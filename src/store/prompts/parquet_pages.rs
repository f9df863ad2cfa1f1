//! The page headers of a Parquet file, read before any page is: a row of a prompt file is
//! one page's value at least, and the parquet crate decompresses and decodes a whole page
//! before it yields a row. A 33 KB file whose one page holds a 1 GB string took 5.26 GB to
//! refuse (reliability-probe-4 N4). The crate does not expose page headers, so this walks
//! them itself: each is a Thrift compact-protocol struct (parquet-format's `PageHeader`,
//! <https://github.com/apache/parquet-format/blob/master/src/main/thrift/parquet.thrift>;
//! the encoding: <https://github.com/apache/thrift/blob/master/doc/specs/thrift-compact-protocol.md>)
//! at the start of each page of each column chunk, followed by the page's compressed bytes.

use std::io::{BufReader, Read, Seek, SeekFrom};

/// The most one page may hold, uncompressed: writers default to 1 MiB pages (pyarrow, Spark,
/// polars), so this refuses only pages no prompt file needs.
pub(super) const MAX_PAGE_BYTES: u64 = 256 << 20;

/// One page as its header says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PageSize {
    pub uncompressed: u64,
    pub compressed: u64,
    /// The values it holds (nulls included); 0 when the header does not say (an index page).
    pub values: u64,
}

/// Why a page is refused.
pub(super) fn too_large(p: PageSize, max_row: u64) -> Option<String> {
    if p.uncompressed > MAX_PAGE_BYTES {
        return Some(format!(
            "a page of {} bytes uncompressed ({} value{}), more than the {} MiB harvest reads \
             at once: rewrite the file with smaller pages (pyarrow: write_table(..., \
             data_page_size=1 << 20))",
            p.uncompressed,
            p.values,
            if p.values == 1 { "" } else { "s" },
            MAX_PAGE_BYTES >> 20
        ));
    }
    if p.values > 0 && p.uncompressed / p.values > max_row {
        return Some(format!(
            "a page of {} bytes uncompressed holds {} value{}: one is longer than {} MiB, and \
             no prompt a model takes is",
            p.uncompressed,
            p.values,
            if p.values == 1 { "" } else { "s" },
            max_row >> 20
        ));
    }
    None
}

/// Walks the pages of the column chunk at `start..start + len` of `file`, calling `each` with
/// each page's sizes; stops at the first `Err` it returns.
pub(super) fn walk_chunk<R: Read + Seek>(
    file: &mut BufReader<R>,
    start: u64,
    len: u64,
    each: &mut dyn FnMut(PageSize) -> Result<(), String>,
) -> std::io::Result<Result<(), String>> {
    let end = start.saturating_add(len);
    let mut at = start;
    while at < end {
        file.seek(SeekFrom::Start(at))?;
        let mut counted = Counted { inner: file, n: 0 };
        let page = read_page_header(&mut counted)?;
        let header_len = counted.n;
        if let Err(why) = each(page) {
            return Ok(Err(why));
        }
        at = at
            .saturating_add(header_len)
            .saturating_add(page.compressed.max(1));
    }
    if at != end {
        return Err(bad("and its page run past the end of their column chunk"));
    }
    Ok(Ok(()))
}

/// Counts the bytes read through it.
struct Counted<'a, R> {
    inner: &'a mut R,
    n: u64,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.n += n as u64;
        Ok(n)
    }
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("not a readable Parquet file: a page header {what}"),
    )
}

/// Compact-protocol field types.
const BOOL_TRUE: u8 = 1;
const BOOL_FALSE: u8 = 2;
const BYTE: u8 = 3;
const I16: u8 = 4;
const I32: u8 = 5;
const I64: u8 = 6;
const DOUBLE: u8 = 7;
const BINARY: u8 = 8;
const LIST: u8 = 9;
const SET: u8 = 10;
const MAP: u8 = 11;
const STRUCT: u8 = 12;
const UUID: u8 = 13;

/// Nesting deeper than this is no page header.
const MAX_DEPTH: u32 = 16;

fn byte(r: &mut dyn Read) -> std::io::Result<u8> {
    let mut b = [0u8];
    r.read_exact(&mut b).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => bad("runs past the end of the file"),
        _ => e,
    })?;
    Ok(b[0])
}

fn varint(r: &mut dyn Read) -> std::io::Result<u64> {
    let mut v = 0u64;
    for shift in (0..70).step_by(7) {
        let b = byte(r)?;
        v |= u64::from(b & 0x7f) << shift.min(63);
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(bad("has a number longer than ten bytes"))
}

fn zigzag(r: &mut dyn Read) -> std::io::Result<i64> {
    let v = varint(r)?;
    Ok((v >> 1) as i64 ^ -((v & 1) as i64))
}

/// Reads one struct's fields: `on_field` is given each field's id and type, and says whether
/// it read the value; the values it did not read are skipped.
fn read_struct(
    r: &mut dyn Read,
    depth: u32,
    on_field: &mut dyn FnMut(&mut dyn Read, i16, u8) -> std::io::Result<bool>,
) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(bad("nests too deep"));
    }
    let mut id: i16 = 0;
    loop {
        let head = byte(r)?;
        let kind = head & 0x0f;
        if kind == 0 {
            return Ok(());
        }
        let delta = head >> 4;
        id = if delta == 0 {
            i16::try_from(zigzag(r)?).map_err(|_| bad("has a field id out of range"))?
        } else {
            id.saturating_add(i16::from(delta))
        };
        if !on_field(r, id, kind)? {
            skip(r, kind, depth + 1)?;
        }
    }
}

/// Skips one value of compact type `kind`.
fn skip(r: &mut dyn Read, kind: u8, depth: u32) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(bad("nests too deep"));
    }
    match kind {
        BOOL_TRUE | BOOL_FALSE => {}
        BYTE => {
            byte(r)?;
        }
        I16 | I32 | I64 => {
            varint(r)?;
        }
        DOUBLE => {
            for _ in 0..8 {
                byte(r)?;
            }
        }
        UUID => {
            for _ in 0..16 {
                byte(r)?;
            }
        }
        BINARY => {
            let len = varint(r)?;
            // Skipped, never held: a header may claim any length.
            let copied = std::io::copy(&mut r.take(len), &mut std::io::sink())?;
            if copied < len {
                return Err(bad("runs past the end of the file"));
            }
        }
        LIST | SET => {
            let head = byte(r)?;
            let size = match head >> 4 {
                15 => varint(r)?,
                n => u64::from(n),
            };
            let elem = head & 0x0f;
            for _ in 0..size {
                if elem == BOOL_TRUE || elem == BOOL_FALSE {
                    byte(r)?;
                } else {
                    skip(r, elem, depth + 1)?;
                }
            }
        }
        MAP => {
            let size = varint(r)?;
            if size > 0 {
                let kinds = byte(r)?;
                for _ in 0..size {
                    skip(r, kinds >> 4, depth + 1)?;
                    skip(r, kinds & 0x0f, depth + 1)?;
                }
            }
        }
        STRUCT => read_struct(r, depth, &mut |_, _, _| Ok(false))?,
        _ => return Err(bad("has a field of an unknown type")),
    }
    Ok(())
}

/// A `PageHeader`: field 2 `uncompressed_page_size`, 3 `compressed_page_size`; the values
/// are field 1 of `data_page_header` (5), `dictionary_page_header` (7) or
/// `data_page_header_v2` (8).
fn read_page_header(r: &mut dyn Read) -> std::io::Result<PageSize> {
    let (mut uncompressed, mut compressed, mut values) = (None, None, 0u64);
    read_struct(r, 0, &mut |r, id, kind| match (id, kind) {
        (2, I32) | (3, I32) => {
            let v = u64::try_from(zigzag(r)?).map_err(|_| bad("has a negative page size"))?;
            if id == 2 {
                uncompressed = Some(v);
            } else {
                compressed = Some(v);
            }
            Ok(true)
        }
        (5 | 7 | 8, STRUCT) => {
            read_struct(r, 1, &mut |r, id, kind| {
                if (id, kind) == (1, I32) {
                    values = u64::try_from(zigzag(r)?).unwrap_or(0);
                    return Ok(true);
                }
                Ok(false)
            })?;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    match (uncompressed, compressed) {
        (Some(uncompressed), Some(compressed)) => Ok(PageSize {
            uncompressed,
            compressed,
            values,
        }),
        _ => Err(bad("names no page size")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_is_refused_when_it_is_too_large_or_its_values_are() {
        let mb = 1u64 << 20;
        let p = |uncompressed, values| PageSize {
            uncompressed,
            compressed: 1,
            values,
        };
        // (what, the page, refused with)
        #[rustfmt::skip]
        let cases: &[(&str, PageSize, Option<&str>)] = &[
            ("a writer's usual page", p(mb, 2_000), None),
            ("a large page of many rows", p(200 * mb, 100_000), None),
            ("a page past the cap", p(300 * mb, 100_000), Some("more than the 256 MiB")),
            ("one value of 20 MiB", p(20 * mb, 1), Some("one is longer than 16 MiB")),
            ("a dictionary-less index page", p(mb, 0), None),
        ];
        for (what, page, want) in cases {
            let got = too_large(*page, 16 * mb);
            match (got, want) {
                (None, None) => {}
                (Some(g), Some(w)) => assert!(g.contains(w), "{what}: {g}"),
                (g, _) => panic!("{what}: {g:?}"),
            }
        }
    }

    /// A file as the parquet crate writes it (dictionary pages, data pages of several
    /// values, snappy): every chunk's pages are walked to its exact end, with the sizes the
    /// crate's own reader finds.
    #[test]
    fn the_pages_of_a_written_file_are_walked_to_the_end_of_each_chunk() {
        use parquet::data_type::{ByteArray, ByteArrayType};
        use parquet::file::reader::{FileReader, SerializedFileReader};
        use std::sync::Arc;
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("p.parquet");
        let schema = Arc::new(
            parquet::schema::parser::parse_message_type(
                "message m { OPTIONAL BYTE_ARRAY prompt (UTF8); OPTIONAL BYTE_ARRAY id (UTF8); }",
            )
            .expect("schema"),
        );
        let props = Arc::new(
            parquet::file::properties::WriterProperties::builder()
                .set_compression(parquet::basic::Compression::SNAPPY)
                .set_data_page_size_limit(4 << 10)
                .set_write_batch_size(32)
                .set_column_dictionary_enabled(
                    parquet::schema::types::ColumnPath::from("id"),
                    false,
                )
                .set_max_row_group_size(500)
                .build(),
        );
        let file = std::fs::File::create(&path).expect("create");
        let mut w =
            parquet::file::writer::SerializedFileWriter::new(file, schema, props).expect("writer");
        for g in 0..3 {
            let mut rg = w.next_row_group().expect("group");
            for c in 0..2 {
                let mut col = rg.next_column().expect("column").expect("a column");
                let values: Vec<ByteArray> = (0..500)
                    .map(|i| {
                        ByteArray::from(format!("{c} row {g}-{i} {}", "x".repeat(i % 50)).as_str())
                    })
                    .collect();
                col.typed::<ByteArrayType>()
                    .write_batch(&values, Some(&[1; 500]), None)
                    .expect("write");
                col.close().expect("close");
            }
            rg.close().expect("close group");
        }
        w.close().expect("close");
        let reader =
            SerializedFileReader::new(std::fs::File::open(&path).expect("open")).expect("reader");
        let mut file = BufReader::new(std::fs::File::open(&path).expect("open"));
        for group in reader.metadata().row_groups() {
            for column in group.columns() {
                let start = column
                    .dictionary_page_offset()
                    .unwrap_or(column.data_page_offset());
                let mut pages = Vec::new();
                walk_chunk(
                    &mut file,
                    start as u64,
                    column.compressed_size() as u64,
                    &mut |p| {
                        pages.push(p);
                        Ok(())
                    },
                )
                .expect("walked")
                .expect("no page refused");
                let dictionary = column.dictionary_page_offset().is_some();
                // `prompt`: a dictionary page and its indices; `id`: plain pages of 4 KiB.
                assert_eq!(dictionary, column.column_path().string() == "prompt");
                assert!(dictionary || pages.len() > 3, "{pages:?}");
                let uncompressed: u64 = pages.iter().map(|p| p.uncompressed).sum();
                assert!(uncompressed > 0 && uncompressed < column.uncompressed_size() as u64);
                let values: u64 = pages
                    .iter()
                    .skip(usize::from(dictionary))
                    .map(|p| p.values)
                    .sum();
                assert_eq!(values, 500, "the data pages' values are the rows");
            }
        }
    }

    #[test]
    fn hostile_headers_end_in_an_error_not_a_hang_or_an_allocation() {
        // (what, the bytes)
        let cases: &[(&str, Vec<u8>)] = &[
            ("empty", vec![]),
            (
                "a binary field claiming 1 TB",
                vec![0x18, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20],
            ),
            (
                "endless varint",
                vec![
                    0x15, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                ],
            ),
            ("deep nesting", vec![0x1c; 64]),
            ("no sizes", vec![0x00]),
        ];
        for (what, bytes) in cases {
            let got = read_page_header(&mut std::io::Cursor::new(bytes));
            assert!(got.is_err(), "{what}: {got:?}");
        }
    }
}
