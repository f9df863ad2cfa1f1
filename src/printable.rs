//! Text made safe for a terminal the TUI does not own: headless lines, the end-of-run summary,
//! `status`, `providers`, `estimate`, `probe` and error messages print server-controlled text
//! (error messages, provider names). An escape sequence in it would set the terminal's title,
//! clear the screen, forge lines or, where OSC 52 is honoured, write the clipboard
//! (reliability-probe-3 D8). Control characters go, but the newline and the tab that lay out
//! the text; the TUI strips them itself (`tui/view/grid.rs`).

use std::borrow::Cow;

fn unsafe_char(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `s` without its control characters (C0, DEL, C1: the escape sequences' starts and
/// carriage returns), newlines and tabs kept.
pub fn printable(s: &str) -> Cow<'_, str> {
    if s.chars().any(unsafe_char) {
        Cow::Owned(s.chars().filter(|&c| !unsafe_char(c)).collect())
    } else {
        Cow::Borrowed(s)
    }
}

/// Breaks a line: a control character (newline, carriage return and tab among them) or a
/// Unicode line or paragraph separator.
fn breaks_a_line(c: char) -> bool {
    c.is_control() || c == '\u{2028}' || c == '\u{2029}'
}

/// `s` as one line: every control character (newlines, carriage returns and tabs too) and
/// line separator becomes a space. For text a server sent that lands inside a line of ours: an
/// error message in a progress line, a listing field in a config comment. A newline kept there
/// forges a line of headless output, or ends a TOML comment and writes a table
/// (reliability-probe-4 N2: an injected `[[endpoint]]` received the key).
pub fn one_line(s: &str) -> Cow<'_, str> {
    if s.chars().any(breaks_a_line) {
        Cow::Owned(
            s.chars()
                .map(|c| if breaks_a_line(c) { ' ' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_keeps_no_line_break_of_any_kind() {
        let cases = [
            ("plain", "plain"),
            (
                "fp8\n[[endpoint]]\nname = \"evil\"",
                "fp8 [[endpoint]] name = \"evil\"",
            ),
            ("a\r\nb\tc", "a  b c"),
            ("esc \u{1b}[2J", "esc  [2J"),
            ("ls \u{2028} ps \u{2029} nel \u{85}", "ls   ps   nel  "),
            ("é 中文", "é 中文"),
        ];
        for (raw, shown) in cases {
            assert_eq!(one_line(raw), shown, "{raw:?}");
        }
        assert!(matches!(one_line("clean"), Cow::Borrowed(_)));
    }

    #[test]
    fn escape_sequences_lose_their_teeth_and_layout_stays() {
        let cases = [
            ("plain line\n\ttabbed\n", "plain line\n\ttabbed\n"),
            (
                "bad \u{1b}]0;PWNED-TITLE\u{7} \u{1b}[2J end\r\nFAKE LINE",
                "bad ]0;PWNED-TITLE [2J end\nFAKE LINE",
            ),
            ("c1 \u{9b}31m csi, del \u{7f}", "c1 31m csi, del "),
            ("é 😀 中文", "é 😀 中文"),
        ];
        for (raw, shown) in cases {
            assert_eq!(printable(raw), shown, "{raw:?}");
        }
        assert!(matches!(printable("clean"), Cow::Borrowed(_)));
    }
}
