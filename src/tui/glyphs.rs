//! What the screen may draw: UTF-8, or ASCII alone when the locale says the terminal takes no
//! UTF-8 (`LC_ALL`, else `LC_CTYPE`, else `LANG`, as POSIX orders them; none set is the C
//! locale). Under ASCII, every frame is drawn as usual and then each cell that holds anything
//! else is given its ASCII stand-in (borders `+ - |`, the budget gauge `# = .`, sparkline bars
//! by height, arrows `^ v`): one pass at the end of a frame rather than a second set of symbols
//! in every view. Started under `LC_ALL=C`, harvest drew 48 of 48 lines in UTF-8, and a client
//! without UTF-8 showed the gauges and sparklines as rows of `_` (issue #53).

use ratatui::buffer::Buffer;

/// Whether the locale the environment names takes UTF-8: the first of `LC_ALL`, `LC_CTYPE`
/// and `LANG` that is set and not empty decides (`en_US.UTF-8`, `C.utf8`: yes; `C`, `POSIX`,
/// `en_US.ISO-8859-1`: no); none set is the C locale.
pub(crate) fn utf8_locale(
    lc_all: Option<&str>,
    lc_ctype: Option<&str>,
    lang: Option<&str>,
) -> bool {
    let locale = [lc_all, lc_ctype, lang]
        .into_iter()
        .flatten()
        .find(|v| !v.is_empty());
    locale.is_some_and(|l| {
        let l = l.to_ascii_lowercase();
        l.contains("utf-8") || l.contains("utf8")
    })
}

/// [`utf8_locale`] of this process's environment.
pub(crate) fn utf8_from_env() -> bool {
    let var = |k: &str| std::env::var(k).ok();
    utf8_locale(
        var("LC_ALL").as_deref(),
        var("LC_CTYPE").as_deref(),
        var("LANG").as_deref(),
    )
}

/// Gives every cell of `buf` that holds more than ASCII its ASCII stand-in.
pub(crate) fn asciify(buf: &mut Buffer) {
    for cell in &mut buf.content {
        let sym = cell.symbol();
        if sym.is_empty() {
            // The cell a wide character covered: its stand-in is one cell wide, so this one
            // is drawn again (an empty symbol would print nothing and shift the rest).
            cell.set_symbol(" ");
        } else if !sym.is_ascii() {
            let ascii = stand_in(sym);
            cell.set_symbol(ascii);
        }
    }
}

/// The ASCII a symbol is drawn as.
fn stand_in(sym: &str) -> &'static str {
    let Some(c) = sym.chars().next() else {
        return " ";
    };
    match c {
        // Box drawing: corners and joins, horizontal, vertical.
        '┌' | '┐' | '└' | '┘' | '├' | '┤' | '┬' | '┴' | '┼' | '╭' | '╮' | '╯' | '╰' | '╔' | '╗'
        | '╚' | '╝' | '╠' | '╣' | '╦' | '╩' | '╬' | '┏' | '┓' | '┗' | '┛' => {
            "+"
        }
        '─' | '━' | '═' | '╌' | '┄' => "-",
        '│' | '┃' | '║' | '╎' | '┆' => "|",
        // The budget gauge: spent, projected, the rest.
        '█' | '▉' | '▊' | '▋' => "#",
        '▓' | '▒' => "=",
        '░' => ".",
        // Sparkline and chart bars, by height.
        '▁' | '▂' => "_",
        '▃' | '▄' => ".",
        '▅' | '▆' => ":",
        '▇' | '▌' | '▍' | '▎' | '▏' | '▐' => "|",
        '•' | '·' | '●' => "*",
        '↑' | '▲' => "^",
        '↓' | '▼' => "v",
        '→' | '▶' => ">",
        '←' | '◀' => "<",
        '…' => "~",
        '≤' => "<",
        '≥' => ">",
        '×' => "x",
        '–' | '—' => "-",
        '‘' | '’' => "'",
        '“' | '”' => "\"",
        // Braille chart dots: a mark where any dot is set.
        '\u{2801}'..='\u{28FF}' => ".",
        '\u{2800}' => " ",
        // Text from prompts, endpoints' messages or names: a mark that something is there.
        _ => "?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_says_whether_the_terminal_takes_utf8() {
        // (what, LC_ALL, LC_CTYPE, LANG, UTF-8)
        type Case<'a> = (
            &'a str,
            Option<&'a str>,
            Option<&'a str>,
            Option<&'a str>,
            bool,
        );
        let cases: [Case; 9] = [
            ("LANG in UTF-8", None, None, Some("en_US.UTF-8"), true),
            ("lower case, no dash", None, None, Some("C.utf8"), true),
            ("the C locale", Some("C"), None, Some("en_US.UTF-8"), false),
            ("POSIX", None, Some("POSIX"), None, false),
            ("Latin-1", None, None, Some("de_DE.ISO-8859-1"), false),
            ("LC_CTYPE over LANG", None, Some("C.UTF-8"), Some("C"), true),
            (
                "LC_ALL over both",
                Some("en_GB.UTF-8"),
                Some("C"),
                Some("C"),
                true,
            ),
            ("empty is unset", Some(""), None, Some("en_US.UTF-8"), true),
            ("nothing set: the C locale", None, None, None, false),
        ];
        for (what, all, ctype, lang, want) in cases {
            assert_eq!(utf8_locale(all, ctype, lang), want, "{what}");
        }
    }

    #[test]
    fn every_stand_in_is_one_ascii_cell() {
        for c in [
            '┌', '─', '│', '█', '▒', '░', '▁', '▇', '↑', '↓', '…', '≤', '漢', '⣿', 'é',
        ] {
            let s = stand_in(c.encode_utf8(&mut [0; 4]));
            assert!(s.len() == 1 && s.is_ascii(), "{c}: {s:?}");
        }
    }
}
