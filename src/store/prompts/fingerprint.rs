//! The prompt file's lines as the count read them, as one hash per block of 64 KiB: the
//! run's reader hashes the same lines and compares each block as it passes its end. A file
//! rewritten in place while a run reads it (a generator's `>`: truncated, then written again,
//! often longer than before) differs within a block, and the run stops there rather than send
//! the new file's prompts under the count's ids (reliability-probe-4 N5; a file cut shorter is
//! caught at its end, `PromptReader::ended_early`). Lines appended after the counted bytes are
//! not read, so an append changes nothing here.

use std::hash::Hasher;

/// Lines are hashed in blocks that end after the line that reaches each multiple of this: a
/// rewrite is found within about this much of the file (a few hundred prompts), and a 10 GB
/// file's fingerprint is 1.3 MB.
const BLOCK: u64 = 1 << 16;

/// The count's hashes, one per block, the last for the bytes after the last full block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint {
    blocks: Vec<u64>,
}

/// A running hash of lines in blocks: it makes a [`Fingerprint`] (the count) or checks one
/// (the run).
#[derive(Default)]
pub(super) struct Blocks {
    hasher: std::hash::DefaultHasher,
    /// Bytes hashed so far, and the block being hashed.
    bytes: u64,
    block: usize,
    made: Vec<u64>,
}

impl Blocks {
    /// Adds a line's bytes; at a block's end, the block's hash is made (`check`: compared with
    /// the count's). Returns the byte offset where a block differs from the count's.
    pub(super) fn line(&mut self, line: &[u8], check: Option<&Fingerprint>) -> Option<u64> {
        self.hasher.write(line);
        self.bytes += line.len() as u64;
        if self.bytes < (self.block as u64 + 1) * BLOCK {
            return None;
        }
        self.end_block(check)
    }

    /// The last block (at the end of the file).
    pub(super) fn finish(&mut self, check: Option<&Fingerprint>) -> Option<u64> {
        self.end_block(check)
    }

    fn end_block(&mut self, check: Option<&Fingerprint>) -> Option<u64> {
        let hash = std::mem::take(&mut self.hasher).finish();
        let at = self.block;
        self.block += 1;
        match check {
            Some(f) if f.blocks.get(at).is_some_and(|&h| h != hash) => Some(self.bytes),
            Some(_) => None,
            None => {
                self.made.push(hash);
                None
            }
        }
    }

    pub(super) fn fingerprint(self) -> Fingerprint {
        Fingerprint { blocks: self.made }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(seed: u8, n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                format!(
                    "{{\"id\": \"p{i}\", \"prompt\": \"{seed} {}\"}}\n",
                    "x".repeat(i % 300)
                )
                .into_bytes()
            })
            .collect()
    }

    #[test]
    fn the_same_lines_pass_and_a_rewrite_is_found_in_its_block() {
        let count = |ls: &[Vec<u8>]| {
            let mut b = Blocks::default();
            for l in ls {
                b.line(l, None);
            }
            b.finish(None);
            b.fingerprint()
        };
        let run = |ls: &[Vec<u8>], f: &Fingerprint| -> Option<u64> {
            let mut b = Blocks::default();
            for l in ls {
                if let Some(at) = b.line(l, Some(f)) {
                    return Some(at);
                }
            }
            b.finish(Some(f))
        };
        let a = lines(1, 20_000);
        let f = count(&a);
        assert!(f.blocks.len() > 3, "{} blocks", f.blocks.len());
        assert_eq!(run(&a, &f), None, "the same lines");
        // One line changed near the end: found at the end of its block.
        let mut b = a.clone();
        b[19_990] = b"{\"id\": \"p19990\", \"prompt\": \"other\"}\n".to_vec();
        assert!(run(&b, &f).is_some());
        // Another generation of the file: found in the first block.
        let at = run(&lines(2, 20_000), &f).expect("differs");
        assert!(at <= BLOCK + 400, "{at}");
    }
}
