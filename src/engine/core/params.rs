//! A request's parameters against an endpoint's listing: the one rule that preflight (what it
//! tells the operator), routing (which endpoints may take a request) and dispatch (what a
//! pinned request sends) share, so that they cannot disagree (issue #35: preflight said
//! unlisted parameters were dropped, dispatch dropped four of them, and routing narrowed
//! requests to an endpoint OpenRouter then refused with a 404).
//!
//! OpenRouter's provider-selection docs: with `require_parameters`, only providers that support
//! every parameter in the request are used; `supported_parameters` in the endpoint listing
//! says which (docs/openrouter-routing-facts.md).

use crate::config::Routing;

/// The parameters a request sends (`ChatRequest::parameters_sent`) that an endpoint's listing
/// does not list. None when the listing says nothing (an own server, an older listing): then
/// nothing is known to be missing.
pub(crate) fn unlisted(sent: &[&'static str], listed: Option<&[String]>) -> Vec<&'static str> {
    let Some(listed) = listed else {
        return Vec::new();
    };
    sent.iter()
        .copied()
        .filter(|p| *p != "max_tokens" && !listed.iter().any(|l| l == p))
        .collect()
}

/// Whether an endpoint that does not list `unlisted` may take the request. A pinned request
/// goes without what its endpoint does not list (dispatch drops it), so any may; under
/// OpenRouter's routing with `require_parameters`, OpenRouter sends nothing to an endpoint
/// that does not list them all, so only one that lists everything may.
pub(crate) fn eligible(routing: Routing, require_parameters: bool, unlisted: &[&str]) -> bool {
    match routing {
        Routing::Pinned => true,
        Routing::Openrouter => !require_parameters || unlisted.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (sent, listing, unlisted)
    type Case<'a> = (&'a [&'static str], Option<&'a [String]>, &'a [&'a str]);

    #[test]
    fn what_an_endpoint_does_not_list_and_whether_it_may_take_the_request() {
        let listed = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<String>>();
        let moonshot = listed(&["max_tokens", "reasoning", "seed", "stop", "tools"]);
        let chutes = listed(&["max_tokens", "temperature", "top_p", "reasoning", "seed"]);
        let cases: [Case<'_>; 5] = [
            (
                &["max_tokens", "temperature"],
                Some(&moonshot),
                &["temperature"],
            ),
            (&["max_tokens", "temperature"], Some(&chutes), &[]),
            (
                &["max_tokens", "min_p", "repetition_penalty", "reasoning"],
                Some(&chutes),
                &["min_p", "repetition_penalty"],
            ),
            // max_tokens is always sent and never a reason to refuse.
            (&["max_tokens"], Some(&listed(&[])), &[]),
            // An own server lists nothing: nothing is known to be missing.
            (&["max_tokens", "temperature"], None, &[]),
        ];
        for (sent, listing, want) in cases {
            assert_eq!(unlisted(sent, listing), want, "{sent:?}");
        }
        // (routing, require_parameters, unlisted, eligible)
        let rules = [
            (Routing::Openrouter, true, &["temperature"][..], false),
            (Routing::Openrouter, true, &[][..], true),
            (Routing::Openrouter, false, &["temperature"][..], true),
            (Routing::Pinned, true, &["temperature"][..], true),
        ];
        for (routing, require, missing, want) in rules {
            assert_eq!(
                eligible(routing, require, missing),
                want,
                "{routing:?} {require}"
            );
        }
    }
}
