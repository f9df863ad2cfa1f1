//! Answer quality per endpoint during a run: an endpoint whose answers are much shorter or
//! longer than the others', cut at max_tokens much more often, or empty much more often is
//! worth the operator's eye (a broken deployment, a different model, a quantization gone
//! wrong), even when its quantization looks fine. Pure: the supervisor feeds it the snapshot's
//! endpoint rows and turns what it finds into events, once per endpoint and kind.

use super::snapshot::EndpointSnap;

/// Answers an endpoint needs before it is compared, and how many other endpoints must have as
/// many (a median of one is no yardstick).
pub(crate) const MIN_DONE: u64 = 30;
const MIN_PEERS: usize = 2;

/// What deviates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Deviation {
    Short,
    Long,
    Truncated,
    Empty,
}

/// One finding, with the sentence for the event log.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Finding {
    pub tag: String,
    pub kind: Deviation,
    pub text: String,
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// Endpoints that stand out from the median of the others (each compared with the rest):
/// mean output length under half or over twice theirs; truncation 20 points above theirs;
/// empty answers over 5% and three times theirs.
pub(crate) fn deviations(endpoints: &[EndpointSnap]) -> Vec<Finding> {
    let ready: Vec<&EndpointSnap> = endpoints.iter().filter(|e| e.done >= MIN_DONE).collect();
    if ready.len() < MIN_PEERS + 1 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for (i, e) in ready.iter().enumerate() {
        let others = || ready.iter().enumerate().filter(move |(j, _)| *j != i);
        let others_of = |f: &dyn Fn(&EndpointSnap) -> Option<f64>| {
            median(others().filter_map(|(_, o)| f(o)).collect())
        };
        if let (Some(mine), Some(theirs)) = (
            e.mean_output_tokens,
            others_of(&|o: &EndpointSnap| o.mean_output_tokens),
        ) && theirs > 0.0
        {
            let ratio = mine / theirs;
            let kind = if ratio < 0.5 {
                Some(Deviation::Short)
            } else if ratio > 2.0 {
                Some(Deviation::Long)
            } else {
                None
            };
            if let Some(kind) = kind {
                out.push(Finding {
                    tag: e.tag.clone(),
                    kind,
                    text: format!(
                        "quality: {} answers average {mine:.0} tokens, the others {theirs:.0} (x{ratio:.2})",
                        e.tag
                    ),
                });
            }
        }
        if let (Some(mine), Some(theirs)) = (
            e.truncation_rate,
            others_of(&|o: &EndpointSnap| o.truncation_rate),
        ) && mine > theirs + 0.20
        {
            out.push(Finding {
                tag: e.tag.clone(),
                kind: Deviation::Truncated,
                text: format!(
                    "quality: {} cuts {:.0}% of answers at max_tokens, the others {:.0}%",
                    e.tag,
                    mine * 100.0,
                    theirs * 100.0
                ),
            });
        }
        if let (Some(mine), Some(theirs)) =
            (e.empty_rate, others_of(&|o: &EndpointSnap| o.empty_rate))
            && mine > 0.05
            && mine > 3.0 * theirs
        {
            out.push(Finding {
                tag: e.tag.clone(),
                kind: Deviation::Empty,
                text: format!(
                    "quality: {} answers empty {:.1}% of the time, the others {:.1}%",
                    e.tag,
                    mine * 100.0,
                    theirs * 100.0
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(tag: &str, done: u64, mean: f64, trunc: f64, empty: f64) -> EndpointSnap {
        let mut e = crate::tui::testkit::endpoint(
            "P",
            tag,
            "int4",
            crate::policy::Fidelity::Native,
            0.5,
            2.0,
            0,
            99.0,
        );
        e.done = done;
        e.mean_output_tokens = Some(mean);
        e.truncation_rate = Some(trunc);
        e.empty_rate = Some(empty);
        e
    }

    #[test]
    fn an_endpoint_far_from_the_others_is_found_once_per_kind() {
        let eps = vec![
            ep("a", 100, 1700.0, 0.02, 0.0),
            ep("b", 100, 1650.0, 0.03, 0.01),
            ep("c", 100, 1800.0, 0.02, 0.0),
            ep("short", 100, 400.0, 0.30, 0.12),
            ep("young", 5, 10.0, 1.0, 1.0),
        ];
        let f = deviations(&eps);
        let kinds: Vec<(&str, Deviation)> = f.iter().map(|x| (x.tag.as_str(), x.kind)).collect();
        assert_eq!(
            kinds,
            vec![
                ("short", Deviation::Short),
                ("short", Deviation::Truncated),
                ("short", Deviation::Empty)
            ]
        );
        assert!(f[0].text.contains("400 tokens"), "{}", f[0].text);
    }

    #[test]
    fn too_few_comparable_endpoints_say_nothing() {
        let eps = vec![
            ep("a", 100, 1700.0, 0.0, 0.0),
            ep("b", 100, 100.0, 0.9, 0.5),
        ];
        assert!(deviations(&eps).is_empty());
    }
}
