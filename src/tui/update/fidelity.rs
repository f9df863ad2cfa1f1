//! Fidelity is never lowered by one key: `a` (the `any` policy) and space on a row the policy
//! excludes for its fidelity ask first, naming what they open, and send nothing until the
//! same key (or `y`) confirms; any other key cancels. Raising it (`f`, excluding a row) acts
//! at once. Pure, as the rest of the reducer.

use crate::engine::control::Command;
use crate::engine::snapshot::{EndpointSnap, Snapshot};
use crate::policy::{Exclusion, PolicyMode};

use super::super::state::{Confirm, Pane, UiState, included};
use super::super::view::text::policy_words;
use super::UiEffect;

/// `f`: the faithful policy, at once (it raises fidelity; the engine keeps the operator's
/// exclusions and undoes their inclusions against it).
pub(super) fn faithful(state: &mut UiState) -> Vec<UiEffect> {
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    state.set_status("policy: faithful (native precision only); your exclusions kept");
    vec![UiEffect::Send(Command::Preset(PolicyMode::Faithful))]
}

/// `a`: asks before the `any` policy, naming the endpoints it opens.
pub(super) fn ask_any(state: &mut UiState) -> Vec<UiEffect> {
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    if state.snapshot.policy_mode == PolicyMode::Any {
        state.set_status("the policy is any quantization already");
        return Vec::new();
    }
    state.confirm = Some(Confirm {
        key: 'a',
        title: " Any quantization? ",
        opens: any_opens(&state.snapshot),
        command: Command::Preset(PolicyMode::Any),
    });
    Vec::new()
}

/// Space on the selected row: excludes an included row at once, includes an excluded one at
/// once unless the policy excludes it for its fidelity (its precision, its probe): then it
/// asks first. (Against the config's own exclude list or the API's uptime it acts at once:
/// that lowers nothing; the row's mark says it is in against the policy either way.)
pub(super) fn toggle(state: &mut UiState) -> Vec<UiEffect> {
    if state.focus != Pane::Providers {
        state.set_status("space includes/excludes providers: tab to the providers pane");
        return Vec::new();
    }
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    let Some(e) = state
        .selected
        .as_deref()
        .and_then(|t| state.snapshot.endpoints.iter().find(|e| e.tag == t))
    else {
        return Vec::new();
    };
    let tag = e.tag.clone();
    // What the viewer saw, made so: absolute, so that two viewers pressing space on one row
    // at once both get what they asked for, not each other's undo (issue #35).
    let command = Command::SetEndpoint {
        tag: tag.clone(),
        allowed: Some(!included(e)),
    };
    if !included(e)
        && let Some(x) = e.policy_off.as_ref().filter(|x| x.is_fidelity())
    {
        state.confirm = Some(Confirm {
            key: ' ',
            title: " Lower fidelity? ",
            opens: format!("opens {} ({})", name(&state.snapshot, e), policy_words(x)),
            command,
        });
        return Vec::new();
    }
    let verb = if included(e) {
        "excluding"
    } else {
        "including"
    };
    state.set_status(format!("{verb} {tag} (from the next request)"));
    vec![UiEffect::Send(command)]
}

/// The waiting key confirmed: its command goes.
pub(super) fn confirm(state: &mut UiState) -> Vec<UiEffect> {
    let Some(c) = state.confirm.take() else {
        return Vec::new();
    };
    if state.finished() {
        state.set_status("the run is over");
        return Vec::new();
    }
    state.set_status(match &c.command {
        Command::Preset(_) => "policy: any quantization (from the next request); f goes back",
        _ => "included against the policy (from the next request); space excludes it",
    });
    vec![UiEffect::Send(c.command)]
}

/// Any other key: the waiting one is dropped, nothing changes.
pub(super) fn cancel(state: &mut UiState) -> Vec<UiEffect> {
    if state.confirm.take().is_some() {
        state.set_status("cancelled: nothing changed");
    }
    Vec::new()
}

/// What the `any` policy opens, grouped by why the policy in force excludes each:
/// `opens 3 endpoints of unknown quantization: Together, Novita, Venice`.
fn any_opens(s: &Snapshot) -> String {
    let opens: Vec<&EndpointSnap> = (s.any_opens.iter())
        .filter_map(|t| s.endpoints.iter().find(|e| &e.tag == t))
        .collect();
    if opens.is_empty() {
        return "opens no endpoint now; endpoints listed later may be of any quantization".into();
    }
    // In the order the policy's reasons first appear.
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for e in &opens {
        let why = e.policy_off.as_ref().map_or("", |x| group_words(x));
        let name = match &e.policy_off {
            Some(Exclusion::Requantized(q)) => format!("{} ({q})", name(s, e)),
            _ => name(s, e),
        };
        match groups.iter_mut().find(|(w, _)| w == why) {
            Some((_, names)) => names.push(name),
            None => groups.push((why.to_string(), vec![name])),
        }
    }
    let n = opens.len();
    let endpoints = if n == 1 { "endpoint" } else { "endpoints" };
    if let [(why, names)] = &groups[..] {
        return format!("opens {n} {endpoints} {why}: {}", names.join(", "));
    }
    let parts: Vec<String> = (groups.iter())
        .map(|(why, names)| format!("{} {why} ({})", names.len(), names.join(", ")))
        .collect();
    format!("opens {n} {endpoints}: {}", parts.join("; "))
}

/// Why the policy excludes a group of endpoints, as a phrase after their count.
fn group_words(x: &Exclusion) -> &'static str {
    match x {
        Exclusion::UnknownQuantization => "of unknown quantization",
        Exclusion::Requantized(_) => "re-quantized",
        _ => "the policy excludes",
    }
}

/// An endpoint by its provider's name, or by its tag where the provider has several.
fn name(s: &Snapshot, e: &EndpointSnap) -> String {
    let shared = s
        .endpoints
        .iter()
        .filter(|o| o.provider == e.provider)
        .count()
        > 1;
    crate::tui::view::text::clean(if shared { &e.tag } else { &e.provider }).into_owned()
}
