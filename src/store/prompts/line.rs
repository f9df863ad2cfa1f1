//! One line of a prompt file, read with a cap on what is held of it.

use std::io::BufRead;

/// The most of a prompt line harvest holds: Kimi K2.5's 262,144-token context is about 1 MB
/// of text, and JSON escapes, a system prompt and earlier turns may make a line a few times
/// that. A longer line is no prompt a model takes: it is refused as it is read, before it is
/// held (reliability-probe-4 N4: one 3 GB line in a 101 KB `.zst` aborted the start).
pub(super) const MAX_LINE_BYTES: usize = 16 << 20;

/// Reads one line (with its `\n`) into `buf`, keeping at most `max` bytes of it: returns the
/// bytes the line took in the file (0 at the end) and whether it was longer than `max` (then
/// `buf` holds its first `max` bytes and the rest was passed over unheld).
pub(super) fn read_capped_line(
    r: &mut dyn BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<(usize, bool)> {
    let (mut total, mut over) = (0, false);
    loop {
        let (done, used) = {
            let avail = match r.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if avail.is_empty() {
                return Ok((total, over));
            }
            let (piece, done) = match avail.iter().position(|&b| b == b'\n') {
                Some(i) => (&avail[..=i], true),
                None => (avail, false),
            };
            let room = max.saturating_sub(buf.len());
            if piece.len() > room {
                over = true;
            }
            buf.extend_from_slice(&piece[..piece.len().min(room)]);
            (done, piece.len())
        };
        r.consume(used);
        total += used;
        if done {
            return Ok((total, over));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};
    #[test]
    fn a_line_is_held_only_up_to_the_cap() {
        // (text, cap) => (bytes the line took, over the cap, what is held), line by line.
        let text = b"abc\nabcdefgh\n\nxyz";
        let mut r = BufReader::with_capacity(3, Cursor::new(text.to_vec()));
        let mut got = Vec::new();
        loop {
            let mut buf = Vec::new();
            let (n, over) = read_capped_line(&mut r, &mut buf, 5).expect("read");
            if n == 0 {
                break;
            }
            got.push((n, over, String::from_utf8(buf).expect("utf-8")));
        }
        let want = [
            (4, false, "abc\n"),
            (9, true, "abcde"),
            (1, false, "\n"),
            (3, false, "xyz"),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|&(n, o, s)| (n, o, s.to_string()))
            .collect();
        assert_eq!(got, want);
    }

    /// A line longer than any prompt is a bad line named by its number, refused as it is read
    /// without being held; the lines after it are read as usual.
    #[test]
    fn a_line_longer_than_any_prompt_is_a_bad_line() {
        let huge = "x".repeat(MAX_LINE_BYTES + 10);
        let text = format!(
            "{{\"id\":\"a\",\"prompt\":\"q\"}}\n{{\"id\":\"b\",\"prompt\":\"{huge}\"}}\n{{\"id\":\"c\",\"prompt\":\"r\"}}\n"
        );
        let got: Vec<_> =
            super::super::PromptReader::new(Cursor::new(text.into_bytes()), "data/b3.jsonl".into())
                .collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().expect("a").id, "a");
        let e = got[1].as_ref().expect_err("b").to_string();
        assert!(
            e.starts_with("data/b3.jsonl:2: longer than 16 MiB (")
                && e.ends_with("no prompt a model takes"),
            "{e}"
        );
        assert_eq!(got[2].as_ref().expect("c").id, "c");
    }
}
