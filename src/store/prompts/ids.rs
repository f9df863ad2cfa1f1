//! Prompt ids and shards: FNV-1a over the conversation for an id a line does not give, over the
//! id for its shard. Both are persisted in output files: never change them.

use crate::openrouter::Message;

/// FNV-1a 64-bit offset basis. Ids and shards derived from it are persisted in output files, so
/// it must never change (the simulator uses the same hash for its per-prompt seeds).
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
/// FNV-1a 64-bit prime.
pub(super) const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a 64 over `bytes`, continuing from `h` (start with [`FNV_OFFSET`]).
pub fn fnv1a(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The id of a prompt without an explicit `id`: `h` followed by 16 lowercase hex digits of the
/// FNV-1a 64-bit hash (offset basis `0xcbf29ce484222325`, prime `0x100000001b3`) of, for each
/// message in order, its role bytes, a `0x00` byte, its content bytes (UTF-8) and a `0x01` byte.
/// The messages are those sent (after trailing assistant turns are dropped), so formats denoting
/// the same conversation get the same id. This rule is persisted in outputs: never change it.
pub fn content_id(messages: &[Message]) -> String {
    format!("h{:016x}", content_hash(messages))
}

/// The hash behind [`content_id`].
pub fn content_hash(messages: &[Message]) -> u64 {
    let mut h = FNV_OFFSET;
    for m in messages {
        h = fnv1a(m.role.as_bytes(), h);
        h = fnv1a(&[0], h);
        h = fnv1a(m.content.as_bytes(), h);
        h = fnv1a(&[1], h);
    }
    h
}

/// The shard (in `0..n`) of a prompt id for `--shard k/n`: the FNV-1a 64-bit hash of the id's UTF-8
/// bytes, folded to 32 bits by xoring its high and low halves (FNV's low bits alone mix poorly),
/// modulo `n`. Stable across versions and machines. `n == 0` is treated as `n == 1`.
pub fn shard_of(id: &str, n: u32) -> u32 {
    let h = fnv1a(id.as_bytes(), FNV_OFFSET);
    let folded = ((h >> 32) ^ (h & 0xffff_ffff)) as u32;
    folded % n.max(1)
}

/// Whether a finished id belongs to shard `k` of `n`: its prompt's shard, and for the reject of
/// a bad line (`@line:N`, which has no id of its own) shard 0, which rejects it once.
pub fn in_shard(id: &str, (k, n): (u32, u32)) -> bool {
    if id.starts_with(BAD_LINE_ID) {
        return k == 0;
    }
    shard_of(id, n) == k
}

/// The id prefix of a bad line's reject: `@line:` and the line number.
pub const BAD_LINE_ID: &str = "@line:";

/// Parses `--shard k/n` with a 0-based `k`: `0 <= k < n`.
pub fn parse_shard(s: &str) -> Result<(u32, u32), String> {
    let parsed = s
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse::<u32>().ok()?, n.trim().parse::<u32>().ok()?)));
    let Some((k, n)) = parsed else {
        return Err(format!(
            "--shard {s}: expected k/n with 0-based k, e.g. 0/4"
        ));
    };
    if n == 0 {
        return Err(format!("--shard {s}: n must be at least 1"));
    }
    if k >= n {
        return Err(format!("--shard {s}: k must be in 0..n (0-based)"));
    }
    Ok((k, n))
}
