//! Which endpoint served an answer when OpenRouter names only the provider: a provider may
//! have several endpoints of one model (two quantizations, a long-context tier), and the
//! provider name alone fits all of them. The bill tells them apart: the answer's `usage.cost`
//! against what each candidate's tariff makes of the same usage. Pure: the worker gives the
//! candidates' listed costs, this picks.

/// The candidate whose listed cost for the answer is closest to what was billed; the first on
/// a tie (the order the request offered them in). `None` without candidates.
pub(crate) fn by_bill(listed: &[(usize, i64)], billed_pico: i64) -> Option<usize> {
    listed
        .iter()
        .min_by_key(|(_, cost)| cost.abs_diff(billed_pico))
        .map(|&(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Candidates as (endpoint, listed pico), the billed pico, the endpoint picked.
    type Case<'a> = (&'a [(usize, i64)], i64, Option<usize>);

    #[test]
    fn the_tariff_nearest_the_bill_served_it() {
        let cases: [Case; 5] = [
            (&[], 100, None),
            (&[(3, 100)], 5_000, Some(3)),
            // fp8 at 2x the int4 price: billed at the int4 price.
            (&[(1, 2_000), (4, 1_000)], 1_010, Some(4)),
            (&[(1, 2_000), (4, 1_000)], 1_990, Some(1)),
            // Equally far: the first offered.
            (&[(1, 2_000), (4, 1_000)], 1_500, Some(1)),
        ];
        for (listed, billed, want) in cases {
            assert_eq!(by_bill(listed, billed), want, "{listed:?} {billed}");
        }
    }
}
