//! The confirmation a key that lowers fidelity waits for: what it opens, and which keys
//! confirm (the same key again, or `y`); any other key cancels and nothing changes.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::Block;

use super::super::state::UiState;
use super::overlay;

pub(super) fn render(frame: &mut Frame, area: Rect, state: &UiState) {
    let Some(c) = &state.confirm else { return };
    let t = &state.theme;
    let again = match c.key {
        ' ' => "space".to_string(),
        k => k.to_string(),
    };
    let w = 66.min(area.width);
    let text = format!("{}.", capitalised(&c.opens));
    let mut lines: Vec<Line<'static>> = wrap(&text, usize::from(w.saturating_sub(2)))
        .into_iter()
        .map(|l| Line::styled(l, t.warn))
        .collect();
    lines.push(Line::raw(""));
    lines.push(Line::from(vec![
        Span::styled(format!(" {again} / y "), t.key),
        Span::raw(" confirm"),
    ]));
    lines.push(Line::from(vec![
        Span::styled(" any other key ", t.key),
        Span::raw(" cancel: nothing changes"),
    ]));
    overlay(
        frame,
        area,
        w,
        lines,
        Block::bordered()
            .border_style(t.border_focused)
            .title(Span::styled(c.title, t.title)),
        t.overlay,
    );
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

/// `text` in lines of at most `width` characters, broken between words (a word longer than
/// a line is cut across lines).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = vec![String::new()];
    for word in text.split(' ') {
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let line = lines.last_mut().expect("one line at least");
            let used = line.chars().count();
            let gap = usize::from(used > 0);
            if used + gap + word.len() <= width {
                if gap == 1 {
                    line.push(' ');
                }
                line.extend(word.iter());
                break;
            }
            if used == 0 {
                // Longer than a line: what fits, the rest on the next.
                let rest = word.split_off(width);
                line.extend(word.iter());
                word = rest;
            }
            lines.push(String::new());
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    #[test]
    fn wrap_breaks_between_words_and_cuts_what_is_longer_than_a_line() {
        assert_eq!(super::wrap("opens a b", 20), ["opens a b"]);
        assert_eq!(
            super::wrap("opens three endpoints", 12),
            ["opens three", "endpoints"]
        );
        assert_eq!(super::wrap("abcdefgh ij", 3), ["abc", "def", "gh", "ij"]);
    }
}
