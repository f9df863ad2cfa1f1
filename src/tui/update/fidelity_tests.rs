//! Fidelity is never lowered by one key: key in, state and commands out.

use crossterm::event::{KeyCode, KeyModifiers};

use super::super::testkit::{kimi_snapshot, state_with};
use super::*;
use crate::policy::{Exclusion, PolicyMode};

fn key(c: char) -> Msg {
    Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE))
}
fn code(c: KeyCode) -> Msg {
    Msg::Key(KeyEvent::new(c, KeyModifiers::NONE))
}
fn send(c: Command) -> Vec<UiEffect> {
    vec![UiEffect::Send(c)]
}
fn include(tag: &str) -> Vec<UiEffect> {
    send(Command::SetEndpoint {
        tag: tag.into(),
        allowed: Some(true),
    })
}
fn status(st: &UiState) -> &str {
    st.status.as_ref().map_or("", |s| s.text.as_str())
}
/// The state with `tag` selected (the default sort).
fn at(tag: &str) -> UiState {
    let mut st = state_with(kimi_snapshot());
    st.selected = Some(tag.into());
    st
}

const ANY_OPENS: &str = "opens 3 endpoints of unknown quantization: Together, Novita, Venice";

/// `a` and space on a row the policy excludes send nothing until confirmed by the same key or
/// `y`; any other key cancels, and does nothing else (`j` does not move the selection).
#[test]
fn keys_that_lower_fidelity_wait_for_their_confirmation() {
    let any = send(Command::Preset(PolicyMode::Any));
    // (row selected, keys, effects of each key, a confirmation open after the last, selected)
    type Case = (
        &'static str,
        Vec<Msg>,
        Vec<Vec<UiEffect>>,
        bool,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "chutes/int4",
            vec![key('a')],
            vec![vec![]],
            true,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key('a')],
            vec![vec![], any.clone()],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key('y')],
            vec![vec![], any.clone()],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key('Y')],
            vec![vec![], any.clone()],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key('j')],
            vec![vec![], vec![]],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), code(KeyCode::Esc)],
            vec![vec![], vec![]],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key(' ')],
            vec![vec![], vec![]],
            false,
            "chutes/int4",
        ),
        (
            "chutes/int4",
            vec![key('a'), key('f')],
            vec![vec![], vec![]],
            false,
            "chutes/int4",
        ),
        // Cancelled, then asked again and confirmed.
        (
            "chutes/int4",
            vec![key('a'), key('n'), key('a'), key('a')],
            vec![vec![], vec![], vec![], any.clone()],
            false,
            "chutes/int4",
        ),
        // Venice: the policy excludes it (unknown quantization).
        ("venice", vec![key(' ')], vec![vec![]], true, "venice"),
        (
            "venice",
            vec![key(' '), key(' ')],
            vec![vec![], include("venice")],
            false,
            "venice",
        ),
        (
            "venice",
            vec![key(' '), key('y')],
            vec![vec![], include("venice")],
            false,
            "venice",
        ),
        (
            "venice",
            vec![key(' '), key('a')],
            vec![vec![], vec![]],
            false,
            "venice",
        ),
        (
            "venice",
            vec![key(' '), key('k')],
            vec![vec![], vec![]],
            false,
            "venice",
        ),
        // Fireworks: excluded by the operator, and by the policy too: it asks.
        ("fireworks", vec![key(' ')], vec![vec![]], true, "fireworks"),
        // Raising fidelity acts at once: excluding a row, the faithful policy.
        (
            "deepinfra",
            vec![key(' ')],
            vec![send(Command::SetEndpoint {
                tag: "deepinfra".into(),
                allowed: Some(false),
            })],
            false,
            "deepinfra",
        ),
        (
            "chutes/int4",
            vec![key('f')],
            vec![send(Command::Preset(PolicyMode::Faithful))],
            false,
            "chutes/int4",
        ),
    ];
    for (i, (row, keys, want, open, selected)) in cases.into_iter().enumerate() {
        let mut st = at(row);
        for (n, (k, w)) in keys.into_iter().zip(want).enumerate() {
            assert_eq!(update(&mut st, k), w, "case {i}, key {n}");
        }
        assert_eq!(st.confirm.is_some(), open, "case {i}");
        assert_eq!(st.selected.as_deref(), Some(selected), "case {i}");
    }
}

/// What the confirmation names: what `a` opens (the operator's own exclusion, Fireworks, is
/// not among them, nor BaseTen, down under any policy), or the row and why the policy
/// excludes it; a cancel says nothing changed.
#[test]
fn the_confirmation_names_what_opens() {
    let mut st = at("chutes/int4");
    update(&mut st, key('a'));
    let c = st.confirm.clone().expect("asks");
    assert_eq!((c.key, c.opens.as_str()), ('a', ANY_OPENS));
    assert_eq!(c.command, Command::Preset(PolicyMode::Any));
    update(&mut st, key('x'));
    assert_eq!(status(&st), "cancelled: nothing changed");

    let mut st = at("baseten/fp4");
    update(&mut st, key(' '));
    let c = st.confirm.clone().expect("asks");
    assert_eq!(
        (c.key, c.opens.as_str()),
        (' ', "opens BaseTen (policy: fp4 re-quantized)")
    );

    // Mixed reasons are grouped; an endpoint of a provider listed twice goes by its tag.
    let mut s = kimi_snapshot();
    s.any_opens = vec!["together".into(), "baseten/fp4".into(), "venice".into()];
    let mut dup = s.endpoints[0].clone();
    dup.tag = "together/int4".into();
    dup.provider = "Together".into();
    s.endpoints.push(dup);
    let mut st = state_with(s);
    update(&mut st, key('a'));
    assert_eq!(
        st.confirm.map(|c| c.opens).as_deref(),
        Some(
            "opens 3 endpoints: 2 of unknown quantization (together, Venice); \
             1 re-quantized (BaseTen (fp4))"
        )
    );

    // Nothing to open now still asks: endpoints listed later may be of any quantization.
    let mut s = kimi_snapshot();
    s.any_opens.clear();
    let mut st = state_with(s);
    update(&mut st, key('a'));
    assert!(
        st.confirm
            .is_some_and(|c| c.opens.starts_with("opens no endpoint now"))
    );
}

/// `a` under `any` already, or once the run is over, asks nothing and sends nothing; a run
/// that ends while a key waits drops it; Ctrl-C drops it and opens the quit dialog.
#[test]
fn nothing_to_ask_or_nothing_left_to_steer() {
    let mut s = kimi_snapshot();
    s.policy_mode = PolicyMode::Any;
    s.any_opens.clear();
    let mut st = state_with(s);
    assert_eq!(update(&mut st, key('a')), vec![]);
    assert!(st.confirm.is_none());
    assert_eq!(status(&st), "the policy is any quantization already");

    let mut s = kimi_snapshot();
    s.state = RunState::Done;
    let mut st = state_with(s);
    assert_eq!(update(&mut st, key('a')), vec![]);
    assert!(st.confirm.is_none());

    let mut st = at("venice");
    update(&mut st, key(' '));
    let mut over = kimi_snapshot();
    over.state = RunState::Stopped;
    update(&mut st, Msg::Snapshot(Arc::new(over)));
    assert!(st.confirm.is_none());
    assert_eq!(update(&mut st, key(' ')), vec![], "nothing left to confirm");

    let mut st = at("chutes/int4");
    update(&mut st, key('a'));
    let ctrl_c = Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert_eq!(update(&mut st, ctrl_c), vec![]);
    assert!(st.confirm.is_none() && st.quit_dialog);
}

/// A row the operator excluded that the policy allows comes back at once, and so does one the
/// policy excludes for another reason than fidelity (the config's exclude list, the API's
/// uptime): including it lowers nothing.
#[test]
fn including_what_lowers_no_fidelity_acts_at_once() {
    for x in [Exclusion::Operator, Exclusion::Down("uptime 29.8%".into())] {
        let mut s = kimi_snapshot();
        let chutes = (s.endpoints.iter_mut())
            .find(|e| e.tag == "chutes/int4")
            .expect("chutes");
        chutes.included = false;
        chutes.allowed = false;
        chutes.policy_off = Some(x.clone());
        chutes.off = Some(crate::engine::reason::OffReason::Policy { exclusion: x });
        let mut st = state_with(s);
        st.selected = Some("chutes/int4".into());
        assert_eq!(update(&mut st, key(' ')), include("chutes/int4"));
        assert!(st.confirm.is_none());
    }
    let mut s = kimi_snapshot();
    let chutes = (s.endpoints.iter_mut())
        .find(|e| e.tag == "chutes/int4")
        .expect("chutes");
    chutes.operator = Some(false);
    chutes.included = false;
    chutes.allowed = false;
    chutes.off = Some(crate::engine::reason::OffReason::Operator);
    assert_eq!(chutes.policy_off, None::<Exclusion>);
    let mut st = state_with(s);
    st.selected = Some("chutes/int4".into());
    assert_eq!(update(&mut st, key(' ')), include("chutes/int4"));
    assert!(st.confirm.is_none());
}
