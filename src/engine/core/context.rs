//! Whether a prompt can fit any endpoint's context at all. A prompt estimated far past the
//! largest context the model's endpoints list is rejected as `too-long` before it is sent:
//! the API refuses it anyway, and uploading it first costs the time and memory of the upload
//! (reliability-probe-3 D16: a 100 MB prompt line, 25 M tokens by the estimate against a
//! 262 k context, was sent and refused with a 413).

/// How far past the largest context the estimate must be before a prompt is refused without
/// asking. The estimate (characters / 4, see `estimate_prompt_tokens`) is close for prose and
/// code in the tokenizers these models use (3–5 characters a token), but a text of long runs
/// of one character can take fewer tokens than it says: a prompt is refused only when it would
/// need twice the characters per token any such text has, so none that fits is refused.
pub(crate) const MARGIN: u64 = 2;

/// The largest context of `contexts` when `estimate` (prompt tokens) is more than
/// [`MARGIN`] times it; `None` when it may fit, and when any endpoint's context is unknown
/// (an operator's own server lists none) or there are no endpoints: nothing to judge by.
pub(crate) fn beyond_every_context(
    estimate: u64,
    contexts: impl IntoIterator<Item = Option<u64>>,
) -> Option<u64> {
    let mut largest: Option<u64> = None;
    for c in contexts {
        let c = c?;
        largest = Some(largest.map_or(c, |l| l.max(c)));
    }
    let largest = largest.filter(|&l| l > 0)?;
    (estimate > largest.saturating_mul(MARGIN)).then_some(largest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What is checked, the estimate, the endpoints' contexts, the context named (refused).
    type Case = (&'static str, u64, &'static [Option<u64>], Option<u64>);

    #[test]
    fn a_prompt_is_refused_unsent_only_far_past_the_largest_context() {
        const K: u64 = 262_144;
        #[rustfmt::skip]
        let cases: &[Case] = &[
            ("a short prompt fits",                    1_000,        &[Some(K)],             None),
            ("at the context: the API decides",        K,            &[Some(K)],             None),
            ("twice the context: still the API's",     2 * K,        &[Some(K)],             None),
            ("past twice the context: refused",        2 * K + 1,    &[Some(K)],             Some(K)),
            ("the 100 MB line of the probe",           25_000_000,   &[Some(K)],             Some(K)),
            ("the largest context counts",             3 * K,        &[Some(K), Some(4 * K)], None),
            ("past every one: the largest is named",   9 * K,        &[Some(4 * K), Some(K)], Some(4 * K)),
            ("an own server's context is unknown",     25_000_000,   &[Some(K), None],       None),
            ("no endpoints: nothing to judge by",      25_000_000,   &[],                    None),
            ("a listed context of 0 says nothing",     25_000_000,   &[Some(0)],             None),
        ];
        for (what, estimate, contexts, want) in cases {
            assert_eq!(
                beyond_every_context(*estimate, contexts.iter().copied()),
                *want,
                "{what}"
            );
        }
    }
}
