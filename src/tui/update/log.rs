//! The full-screen log's keys: open it, scroll it (the view clamps what it cannot show), show
//! only the selected endpoint's events, close it.

use super::super::keymap::Action;
use super::super::state::{LogView, UiState};
use super::UiEffect;

/// Rows a page moves: the log's height less its borders and hint line, at least one.
fn page(state: &UiState) -> usize {
    usize::from(state.size.1.saturating_sub(3)).max(1)
}

pub(super) fn open(state: &mut UiState) -> Vec<UiEffect> {
    state.log = Some(LogView::default());
    state.help = false;
    Vec::new()
}

pub(super) fn act(state: &mut UiState, a: Action) -> Vec<UiEffect> {
    let page = page(state);
    let only = (state.endpoints().into_iter())
        .find(|e| Some(&e.tag) == state.selected.as_ref())
        .map(|e| (e.tag.clone(), e.provider.clone()));
    let Some(log) = state.log.as_mut() else {
        return Vec::new();
    };
    match a {
        Action::Up => log.back = log.back.saturating_add(1),
        Action::Down => log.back = log.back.saturating_sub(1),
        Action::PageUp => log.back = log.back.saturating_add(page),
        Action::PageDown => log.back = log.back.saturating_sub(page),
        // The view clamps it to the oldest line.
        Action::First => log.back = usize::MAX,
        Action::Last => log.back = 0,
        Action::OnlySelected => {
            log.only = if log.only.is_some() { None } else { only };
            log.back = 0;
        }
        Action::Back => state.log = None,
        // Ctrl-C still reaches the quit dialog.
        Action::Interrupt => {
            state.log = None;
            return super::act(state, a);
        }
        _ => {}
    }
    Vec::new()
}
