//! Parquet prompt files for tests, in the two shapes the Hugging Face Hub ships prompt datasets
//! in: flat string columns (`instruction`, `input`, ...) and a chat column
//! (`messages: list<struct<role, content>>`, the 3-level LIST pyarrow writes). Written with the
//! parquet crate's own writer, snappy-compressed as pyarrow writes by default.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;

fn props() -> Arc<WriterProperties> {
    Arc::new(
        WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_size(64)
            .build(),
    )
}

/// Optional string columns `columns`, one row per entry of `rows` (`None`: null).
pub fn write_text(path: &Path, columns: &[&str], rows: &[Vec<Option<String>>]) {
    let rows: Vec<Vec<Option<Vec<u8>>>> = rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| v.clone().map(String::into_bytes))
                .collect()
        })
        .collect();
    write_byte_arrays(path, columns, &rows, "(UTF8)");
}

/// Optional plain BYTE_ARRAY columns, with no String annotation (as Hive, Impala and older
/// Spark write strings): any bytes.
pub fn write_binary(path: &Path, columns: &[&str], rows: &[Vec<Option<Vec<u8>>>]) {
    write_byte_arrays(path, columns, rows, "");
}

fn write_byte_arrays(
    path: &Path,
    columns: &[&str],
    rows: &[Vec<Option<Vec<u8>>>],
    annotation: &str,
) {
    let schema = format!(
        "message schema {{ {} }}",
        columns
            .iter()
            .map(|c| format!("OPTIONAL BYTE_ARRAY {c} {annotation};"))
            .collect::<String>()
    );
    let schema = Arc::new(parse_message_type(&schema).expect("schema"));
    let file = std::fs::File::create(path).expect("create");
    let mut w = SerializedFileWriter::new(file, schema, props()).expect("writer");
    for group in rows.chunks(64) {
        let mut rg = w.next_row_group().expect("row group");
        for c in 0..columns.len() {
            let mut col = rg.next_column().expect("column").expect("a column");
            let values: Vec<ByteArray> = group
                .iter()
                .filter_map(|r| r[c].clone().map(ByteArray::from))
                .collect();
            let defs: Vec<i16> = group.iter().map(|r| i16::from(r[c].is_some())).collect();
            col.typed::<ByteArrayType>()
                .write_batch(&values, Some(&defs), None)
                .expect("write");
            col.close().expect("close column");
        }
        rg.close().expect("close row group");
    }
    w.close().expect("close file");
}

/// An `id` string column and a `messages` chat column: `(id, [(role, content)])` per row.
pub fn write_chat(path: &Path, rows: &[(String, Vec<(String, String)>)]) {
    let schema = "message schema {
        OPTIONAL BYTE_ARRAY id (UTF8);
        OPTIONAL group messages (LIST) {
            REPEATED group list {
                OPTIONAL group element {
                    OPTIONAL BYTE_ARRAY content (UTF8);
                    OPTIONAL BYTE_ARRAY role (UTF8);
                }
            }
        }
    }";
    let schema = Arc::new(parse_message_type(schema).expect("schema"));
    let file = std::fs::File::create(path).expect("create");
    let mut w = SerializedFileWriter::new(file, schema, props()).expect("writer");
    for group in rows.chunks(64) {
        let mut rg = w.next_row_group().expect("row group");
        // id: defined in every row.
        let mut col = rg.next_column().expect("column").expect("id");
        let ids: Vec<ByteArray> = group
            .iter()
            .map(|(id, _)| ByteArray::from(id.as_str()))
            .collect();
        col.typed::<ByteArrayType>()
            .write_batch(&ids, Some(&vec![1; group.len()]), None)
            .expect("ids");
        col.close().expect("close");
        // messages.list.element.content, then .role: every element defined (level 4), the
        // first of a row at repetition 0, the rest at 1.
        for field in [1usize, 0] {
            let mut col = rg.next_column().expect("column").expect("a message field");
            let mut values = Vec::new();
            let (mut defs, mut reps) = (Vec::new(), Vec::new());
            for (_, turns) in group {
                for (i, t) in turns.iter().enumerate() {
                    let v = if field == 0 { &t.0 } else { &t.1 };
                    values.push(ByteArray::from(v.as_str()));
                    defs.push(4);
                    reps.push(i16::from(i > 0));
                }
            }
            col.typed::<ByteArrayType>()
                .write_batch(&values, Some(&defs), Some(&reps))
                .expect("messages");
            col.close().expect("close");
        }
        rg.close().expect("close row group");
    }
    w.close().expect("close file");
}
