//! Keys to actions, and the key hints the footer and the help overlay show (one table, so
//! what is shown is what works).

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// What a key asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Up,
    Down,
    First,
    Last,
    /// Include or exclude the selected endpoint.
    Toggle,
    PresetFaithful,
    PresetAny,
    SortNext,
    SortReverse,
    /// `<` `>`: sort by the column left or right of the one sorted by.
    SortLeft,
    SortRight,
    PauseResume,
    MoreConcurrency,
    LessConcurrency,
    SwitchPane,
    Help,
    /// `q`: the quit dialog.
    Quit,
    /// Ctrl-C: the quit dialog, or stop now when the dialog is already open.
    Interrupt,
    /// Esc: close what is open.
    Back,
    /// In the quit dialog.
    Drain,
    StopNow,
    /// In the quit dialog of an attached viewer: close this view, the run goes on.
    Detach,
    /// While a key that lowers fidelity waits: the same key again, or `y`.
    Confirm,
    /// While a key that lowers fidelity waits: any other key (it does nothing else).
    Cancel,
    /// `l`: the full-screen log.
    Log,
    /// A page back, a page on (the focused table's rows on screen; in the log, its lines).
    PageUp,
    PageDown,
    /// In the log: only the events of the selected endpoint, or all again.
    OnlySelected,
    /// `/`: type a filter of the providers table.
    Filter,
    /// While the filter is typed: a character of it, the last one taken back, done.
    Type(char),
    Erase,
    KeepFilter,
}

/// Which keys are live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Normal,
    /// The quit dialog is open: only its own keys act.
    QuitDialog,
    /// A key that lowers fidelity (this one) waits for its confirmation.
    Confirm(char),
    /// The full-screen log is open: its keys scroll and filter it, and any way out closes it.
    Log,
    /// The providers' filter is being typed: characters go into it, Enter keeps it, Esc
    /// clears it; the arrows still move.
    Filter,
    /// The help is open: any key closes it, and does nothing behind it.
    Help,
    /// The terminal is below the smallest screen: only `q` (and Esc) act, since the rows other
    /// keys would act on cannot be seen.
    TooSmall,
}

/// The action of a key press, if any. Releases (kitty protocol, Windows) act on nothing.
pub(crate) fn action(key: KeyEvent, mode: Mode) -> Option<Action> {
    if key.kind == KeyEventKind::Release {
        return None;
    }
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c' | 'C')) {
        return Some(Action::Interrupt);
    }
    if let Mode::Confirm(again) = mode {
        return Some(match key.code {
            KeyCode::Char(c) if !ctrl && (c == again || c == 'y' || c == 'Y') => Action::Confirm,
            _ => Action::Cancel,
        });
    }
    if ctrl {
        return None;
    }
    match mode {
        Mode::Confirm(_) => None,
        Mode::QuitDialog => match key.code {
            KeyCode::Char('d' | 'D') => Some(Action::Drain),
            KeyCode::Char('n' | 'N') => Some(Action::StopNow),
            KeyCode::Char('x' | 'X') => Some(Action::Detach),
            KeyCode::Esc | KeyCode::Char('q') => Some(Action::Back),
            _ => None,
        },
        Mode::Help => Some(Action::Back),
        Mode::TooSmall => match key.code {
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Esc => Some(Action::Back),
            _ => None,
        },
        Mode::Log => match key.code {
            KeyCode::Up | KeyCode::Char('k') => Some(Action::Up),
            KeyCode::Down | KeyCode::Char('j') => Some(Action::Down),
            KeyCode::PageUp | KeyCode::Char('b') => Some(Action::PageUp),
            KeyCode::PageDown | KeyCode::Char(' ') => Some(Action::PageDown),
            KeyCode::Home | KeyCode::Char('g') => Some(Action::First),
            KeyCode::End | KeyCode::Char('G') => Some(Action::Last),
            KeyCode::Char('e') => Some(Action::OnlySelected),
            KeyCode::Esc | KeyCode::Char('l' | 'q') => Some(Action::Back),
            _ => None,
        },
        Mode::Filter => match key.code {
            KeyCode::Char(c) => Some(Action::Type(c)),
            KeyCode::Backspace => Some(Action::Erase),
            KeyCode::Enter => Some(Action::KeepFilter),
            KeyCode::Esc => Some(Action::Back),
            KeyCode::Up => Some(Action::Up),
            KeyCode::Down => Some(Action::Down),
            KeyCode::PageUp => Some(Action::PageUp),
            KeyCode::PageDown => Some(Action::PageDown),
            _ => None,
        },
        Mode::Normal => match key.code {
            KeyCode::Char('/') => Some(Action::Filter),
            KeyCode::Up | KeyCode::Char('k') => Some(Action::Up),
            KeyCode::Down | KeyCode::Char('j') => Some(Action::Down),
            KeyCode::Home | KeyCode::Char('g') => Some(Action::First),
            KeyCode::End | KeyCode::Char('G') => Some(Action::Last),
            KeyCode::PageUp => Some(Action::PageUp),
            KeyCode::PageDown => Some(Action::PageDown),
            KeyCode::Char(' ') => Some(Action::Toggle),
            KeyCode::Char('f') => Some(Action::PresetFaithful),
            KeyCode::Char('a') => Some(Action::PresetAny),
            KeyCode::Char('s') => Some(Action::SortNext),
            KeyCode::Char('S') => Some(Action::SortReverse),
            KeyCode::Char('<') => Some(Action::SortLeft),
            KeyCode::Char('>') => Some(Action::SortRight),
            KeyCode::Char('p') => Some(Action::PauseResume),
            KeyCode::Char('+' | '=') => Some(Action::MoreConcurrency),
            KeyCode::Char('-' | '_') => Some(Action::LessConcurrency),
            KeyCode::Tab | KeyCode::BackTab => Some(Action::SwitchPane),
            KeyCode::Char('l') => Some(Action::Log),
            KeyCode::Char('?') | KeyCode::F(1) => Some(Action::Help),
            KeyCode::Char('q') => Some(Action::Quit),
            KeyCode::Esc => Some(Action::Back),
            _ => None,
        },
    }
}

/// One entry of the footer and of the help overlay.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyHint {
    /// Keys as the footer shows them on a wide, a medium and an 80-column terminal.
    pub keys: [&'static str; 3],
    /// What they do, in the same three widths.
    pub labels: [&'static str; 3],
    /// Keys and meaning for the help overlay.
    pub help_keys: &'static str,
    pub help: &'static str,
}

/// The footer's keys, in order. An entry whose narrow form is empty is folded into the one
/// before it on narrow terminals.
pub(crate) const HINTS: &[KeyHint] = &[
    KeyHint {
        keys: ["↑↓/jk", "↑↓", "jk"],
        labels: ["move", "move", "move"],
        help_keys: "↑ ↓  j k  g G",
        help: "move the selection (PgUp PgDn a page, g G first / last)",
    },
    KeyHint {
        keys: ["space", "space", "space"],
        labels: ["include/exclude", "incl/excl", "incl"],
        help_keys: "space",
        help: "include/exclude the endpoint (against the policy: asks)",
    },
    KeyHint {
        keys: ["f", "f", "f/a"],
        labels: ["faithful", "faithful", "preset"],
        help_keys: "f",
        help: "policy faithful: native precision; keeps your exclusions",
    },
    KeyHint {
        keys: ["a", "a", ""],
        labels: ["any", "any", ""],
        help_keys: "a",
        help: "policy any quantization: names what opens, asks first",
    },
    KeyHint {
        keys: ["s", "s", "s"],
        labels: ["sort", "sort", "sort"],
        help_keys: "s S < >",
        help: "sort by the next column / reverse / column left, right",
    },
    KeyHint {
        keys: ["p", "p", "p"],
        labels: ["pause", "pause", "pause"],
        help_keys: "p",
        help: "pause or resume dispatch (in-flight requests go on)",
    },
    KeyHint {
        keys: ["+/-", "+/-", "+/-"],
        labels: ["concurrency", "conc", "conc"],
        help_keys: "+  -",
        help: "concurrency limit up / down by 10% (at least 1)",
    },
    KeyHint {
        keys: ["tab", "tab", "tab"],
        labels: ["pane", "pane", ""],
        help_keys: "tab",
        help: "switch pane: providers / datasets",
    },
    KeyHint {
        keys: ["/", "", ""],
        labels: ["filter", "", ""],
        help_keys: "/",
        help: "filter providers by tag or name (Enter keeps, Esc clears)",
    },
    KeyHint {
        keys: ["l", "l", ""],
        labels: ["log", "log", ""],
        help_keys: "l",
        help: "the whole event log: PgUp PgDn g G scroll, e one endpoint",
    },
    KeyHint {
        keys: ["?", "?", "?"],
        labels: ["help", "help", "help"],
        help_keys: "?",
        help: "this help (any key closes it)",
    },
    KeyHint {
        keys: ["q", "q", "q"],
        labels: ["quit", "quit", "quit"],
        help_keys: "q  Ctrl-C",
        help: "quit: drain (finish in-flight) or stop now; both save",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_by_mode() {
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        let cases = [
            (key(KeyCode::Char('j')), Mode::Normal, Some(Action::Down)),
            (key(KeyCode::Down), Mode::Normal, Some(Action::Down)),
            (key(KeyCode::Char('k')), Mode::Normal, Some(Action::Up)),
            (key(KeyCode::Up), Mode::Normal, Some(Action::Up)),
            (key(KeyCode::Char(' ')), Mode::Normal, Some(Action::Toggle)),
            (key(KeyCode::Char('q')), Mode::Normal, Some(Action::Quit)),
            (ctrl_c, Mode::Normal, Some(Action::Interrupt)),
            (ctrl_c, Mode::QuitDialog, Some(Action::Interrupt)),
            (
                key(KeyCode::Char('d')),
                Mode::QuitDialog,
                Some(Action::Drain),
            ),
            (
                key(KeyCode::Char('n')),
                Mode::QuitDialog,
                Some(Action::StopNow),
            ),
            (key(KeyCode::Esc), Mode::QuitDialog, Some(Action::Back)),
            // The dialog swallows everything else.
            (key(KeyCode::Char(' ')), Mode::QuitDialog, None),
            // A key that lowers fidelity: itself again or y confirms, anything else cancels.
            (
                key(KeyCode::Char('a')),
                Mode::Confirm('a'),
                Some(Action::Confirm),
            ),
            (
                key(KeyCode::Char('y')),
                Mode::Confirm('a'),
                Some(Action::Confirm),
            ),
            (
                key(KeyCode::Char('Y')),
                Mode::Confirm(' '),
                Some(Action::Confirm),
            ),
            (
                key(KeyCode::Char(' ')),
                Mode::Confirm(' '),
                Some(Action::Confirm),
            ),
            (
                key(KeyCode::Char(' ')),
                Mode::Confirm('a'),
                Some(Action::Cancel),
            ),
            (
                key(KeyCode::Char('A')),
                Mode::Confirm('a'),
                Some(Action::Cancel),
            ),
            (
                key(KeyCode::Char('j')),
                Mode::Confirm('a'),
                Some(Action::Cancel),
            ),
            (
                key(KeyCode::Enter),
                Mode::Confirm('a'),
                Some(Action::Cancel),
            ),
            (key(KeyCode::Esc), Mode::Confirm(' '), Some(Action::Cancel)),
            (ctrl_c, Mode::Confirm('a'), Some(Action::Interrupt)),
            (
                KeyEvent::new(KeyCode::Char('a'), KeyModifiers::CONTROL),
                Mode::Confirm('a'),
                Some(Action::Cancel),
            ),
            (key(KeyCode::Char('d')), Mode::Normal, None),
            (key(KeyCode::Char('x')), Mode::Normal, None),
        ];
        for (k, mode, want) in cases {
            assert_eq!(action(k, mode), want, "{k:?} in {mode:?}");
        }
        let mut release = key(KeyCode::Char('j'));
        release.kind = KeyEventKind::Release;
        assert_eq!(action(release, Mode::Normal), None);
    }
}
