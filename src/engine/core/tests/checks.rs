//! Which endpoints' checks the log announces (issue #53 item 3): the hard budget doubts every
//! documented stopper, but says so only of those the run may use; one the operator includes
//! later is named when its first check leaves.

use super::*;
use crate::engine::Command;

fn says(h: &H, needle: &str) -> bool {
    h.event_texts().iter().any(|t| t.contains(needle))
}

#[test]
fn checks_are_announced_only_for_endpoints_the_run_may_use() {
    let cfg = config_documented(
        "budget_usd = 0.25\nconcurrency = 10\nrouting = \"pinned\"\n[policy]\nexclude = [\"together\", \"moonshotai\", \"baseten\", \"novita\"]",
    );
    let ids: Vec<String> = (0..60).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let mut h = H::new(cfg, kimi(), &[&refs]);
    let first = h.dispatch();
    assert!(says(
        &h,
        "checking that closing a stream stops chutes/int4's bill"
    ));
    for excluded in ["together/int4", "novita"] {
        let i = h.index(excluded);
        assert!(
            !h.core.endpoints()[i].cancel_stops_billing,
            "{excluded} is doubted all the same"
        );
        assert!(
            !says(
                &h,
                &format!("checking that closing a stream stops {excluded}'s")
            ),
            "{excluded} is not used: {:#?}",
            h.event_texts()
        );
    }
    // The operator takes Chutes out and Novita in: Novita's checks go, and the first names it.
    h.command(Command::ToggleEndpoint("chutes/int4".into()));
    h.command(Command::ToggleEndpoint("novita".into()));
    let novita = h.index("novita");
    for x in &first {
        h.result(done(x.key, x.pinned, 500, 0.001, "stop"));
    }
    let sent: Vec<Dispatch> = (0..20)
        .flat_map(|_| {
            let d = h.dispatch();
            for x in &d {
                h.result(done(x.key, x.pinned, 500, 0.001, "stop"));
            }
            d
        })
        .collect();
    assert!(
        sent.iter().any(|d| d.check && d.pinned == Some(novita)),
        "a check goes to Novita once included"
    );
    assert!(says(
        &h,
        "checking that closing a stream stops novita's bill"
    ));
}
