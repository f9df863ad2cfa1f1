//! Styles of the TUI. Two palettes: the 16 basic ANSI colours (readable on any terminal and in
//! any theme the user picked for those 16) and, when `NO_COLOR` is set, modifiers only (bold,
//! dim, reversed, underline). Colour only ever repeats what a mark or a word already says.

use ratatui::style::{Color, Modifier, Style};

use crate::engine::snapshot::RunState;
use crate::policy::Fidelity;

/// Every style the views use, by meaning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Theme {
    /// Whether colours are in use (false under `NO_COLOR`).
    pub color: bool,
    /// Whether the screen is drawn in ASCII alone (the locale takes no UTF-8:
    /// [`super::glyphs`]).
    pub ascii: bool,
    pub text: Style,
    pub dim: Style,
    pub bold: Style,
    pub title: Style,
    pub border: Style,
    pub border_focused: Style,
    pub header_row: Style,
    /// The sorted column's header.
    pub sort_column: Style,
    /// The selected row of the focused table.
    pub selected: Style,
    /// The selected row of a table that is not focused.
    pub selected_unfocused: Style,
    pub good: Style,
    pub warn: Style,
    pub bad: Style,
    pub gauge_filled: Style,
    pub gauge_empty: Style,
    pub key: Style,
    pub status: Style,
    pub overlay: Style,
    pub spark_tokens: Style,
    pub spark_money: Style,
    state_running: Style,
    state_paused: Style,
    state_stopping: Style,
    state_stopped: Style,
    state_done: Style,
}

impl Theme {
    /// Colours unless `NO_COLOR` is set to a non-empty value (<https://no-color.org>); ASCII
    /// alone unless the locale takes UTF-8.
    pub fn from_env() -> Self {
        Theme {
            ascii: !super::glyphs::utf8_from_env(),
            ..Self::from_no_color(std::env::var_os("NO_COLOR").as_deref())
        }
    }

    /// The choice [`Theme::from_env`] makes, for a given value of `NO_COLOR`.
    pub fn from_no_color(value: Option<&std::ffi::OsStr>) -> Self {
        match value {
            Some(v) if !v.is_empty() => Self::mono(),
            _ => Self::ansi16(),
        }
    }

    /// The 16 basic ANSI colours, named (never RGB or 256-colour indices).
    pub fn ansi16() -> Self {
        let plain = Style::new();
        let bold = plain.add_modifier(Modifier::BOLD);
        Theme {
            color: true,
            ascii: false,
            text: plain,
            dim: plain.fg(Color::DarkGray),
            bold,
            title: bold.fg(Color::Cyan),
            border: plain.fg(Color::DarkGray),
            border_focused: plain.fg(Color::Cyan),
            header_row: bold.add_modifier(Modifier::UNDERLINED),
            sort_column: bold.fg(Color::Cyan).add_modifier(Modifier::UNDERLINED),
            selected: plain.add_modifier(Modifier::REVERSED),
            selected_unfocused: bold,
            good: plain.fg(Color::Green),
            warn: plain.fg(Color::Yellow),
            bad: bold.fg(Color::Red),
            gauge_filled: plain.fg(Color::Green),
            gauge_empty: plain.fg(Color::DarkGray),
            key: bold.fg(Color::Cyan),
            status: bold.fg(Color::Black).bg(Color::Yellow),
            overlay: plain,
            spark_tokens: plain.fg(Color::Green),
            spark_money: plain.fg(Color::Yellow),
            state_running: bold.fg(Color::Black).bg(Color::Green),
            state_paused: bold.fg(Color::Black).bg(Color::Yellow),
            state_stopping: bold.fg(Color::Black).bg(Color::Yellow),
            state_stopped: bold.fg(Color::White).bg(Color::Red),
            state_done: bold.fg(Color::Black).bg(Color::Cyan),
        }
    }

    /// No colours at all: emphasis by modifiers alone.
    pub fn mono() -> Self {
        let plain = Style::new();
        let bold = plain.add_modifier(Modifier::BOLD);
        let dim = plain.add_modifier(Modifier::DIM);
        let reversed = bold.add_modifier(Modifier::REVERSED);
        Theme {
            color: false,
            ascii: false,
            text: plain,
            dim,
            bold,
            title: bold,
            border: plain,
            border_focused: bold,
            header_row: bold.add_modifier(Modifier::UNDERLINED),
            sort_column: bold.add_modifier(Modifier::UNDERLINED | Modifier::ITALIC),
            selected: plain.add_modifier(Modifier::REVERSED),
            selected_unfocused: bold,
            good: plain,
            warn: bold,
            bad: bold,
            gauge_filled: plain,
            gauge_empty: dim,
            key: bold,
            status: reversed,
            overlay: plain,
            spark_tokens: plain,
            spark_money: plain,
            state_running: reversed,
            state_paused: reversed,
            state_stopping: reversed,
            state_stopped: reversed,
            state_done: reversed,
        }
    }

    /// The badge of a run state (the label itself says which).
    pub fn run_state(&self, s: RunState) -> Style {
        match s {
            RunState::Starting | RunState::Running => self.state_running,
            RunState::Paused => self.state_paused,
            RunState::Draining => self.state_stopping,
            RunState::Stopped => self.state_stopped,
            RunState::Done => self.state_done,
        }
    }

    /// The quantization mark's style (`*` native, `+` upcast, `!` re-quantized, `?` unknown).
    pub fn fidelity(&self, f: Fidelity) -> Style {
        match f {
            Fidelity::Native | Fidelity::Wider => self.good,
            Fidelity::Requantized => self.bad,
            Fidelity::Unknown => self.warn,
        }
    }

    /// Every style, for checks that the palette keeps its promises.
    pub fn all_styles(&self) -> Vec<Style> {
        vec![
            self.text,
            self.dim,
            self.bold,
            self.title,
            self.border,
            self.border_focused,
            self.header_row,
            self.sort_column,
            self.selected,
            self.selected_unfocused,
            self.good,
            self.warn,
            self.bad,
            self.gauge_filled,
            self.gauge_empty,
            self.key,
            self.status,
            self.overlay,
            self.spark_tokens,
            self.spark_money,
            self.state_running,
            self.state_paused,
            self.state_stopping,
            self.state_stopped,
            self.state_done,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn no_color_means_modifiers_only() {
        for v in ["1", "true", "0", "anything"] {
            let t = Theme::from_no_color(Some(OsStr::new(v)));
            assert!(!t.color, "NO_COLOR={v}");
            for s in t.all_styles() {
                assert_eq!(s.fg, None, "{s:?}");
                assert_eq!(s.bg, None, "{s:?}");
            }
        }
        // Empty or unset: colours.
        assert!(Theme::from_no_color(Some(OsStr::new(""))).color);
        assert!(Theme::from_no_color(None).color);
    }

    #[test]
    fn colours_are_the_basic_sixteen() {
        let basic = [
            Color::Black,
            Color::Red,
            Color::Green,
            Color::Yellow,
            Color::Blue,
            Color::Magenta,
            Color::Cyan,
            Color::Gray,
            Color::DarkGray,
            Color::LightRed,
            Color::LightGreen,
            Color::LightYellow,
            Color::LightBlue,
            Color::LightMagenta,
            Color::LightCyan,
            Color::White,
        ];
        for s in Theme::ansi16().all_styles() {
            for c in [s.fg, s.bg].into_iter().flatten() {
                assert!(
                    basic.contains(&c),
                    "{c:?} is not one of the 16 ANSI colours"
                );
            }
        }
    }
}
