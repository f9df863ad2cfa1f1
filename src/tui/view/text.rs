//! Small text helpers shared by the views: fitting columns to a width, truncating with `…`,
//! and the number formats of the tables.

use std::borrow::Cow;

use ratatui::style::Style;
use ratatui::text::{Line, Span};

use crate::domain::{Usd, group_thousands};

/// Display width of a string in terminal cells (wide characters count two).
pub(crate) fn width(s: &str) -> u16 {
    Span::raw(s).width().min(usize::from(u16::MAX)) as u16
}

fn char_width(c: char) -> usize {
    let mut b = [0; 4];
    Span::raw(&*c.encode_utf8(&mut b)).width()
}

/// Characters that change how a terminal lays out what follows, or that it may draw at
/// another width than the buffer counts: bidi embeddings, overrides and isolates (U+202E
/// reverses the rest of the line), zero-width spaces and joiners (a terminal that does not
/// join a ZWJ sequence draws each emoji, 6 cells where the buffer counts 2), the soft hyphen,
/// variation selectors, the byte-order mark, tags. Unicode's format characters, mostly.
fn format_char(c: char) -> bool {
    matches!(
        c,
        '\u{AD}'
            | '\u{34F}'
            | '\u{61C}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFF9}'..='\u{FFFB}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// Combining marks kept on one character: enough for any script's accents, not a pile of
/// hundreds drawn into one cell.
const MARKS_KEPT: usize = 2;

/// Text a server wrote (a listing's names and quantization, an error) as a cell may show it:
/// controls and line separators (tabs, backspaces, escapes) as spaces, [`format_char`]s
/// dropped, at most [`MARKS_KEPT`] combining marks on a character and none on nothing. Then
/// each character is as wide as the buffer counts it, in any terminal.
pub(crate) fn clean(s: &str) -> Cow<'_, str> {
    if s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    // Marks on the last character; `None` before the first.
    let mut marks: Option<usize> = None;
    for c in s.chars() {
        if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            out.push(' ');
            marks = Some(0);
        } else if format_char(c) {
            // Dropped.
        } else if char_width(c) == 0 {
            if let Some(n) = marks.as_mut()
                && *n < MARKS_KEPT
            {
                out.push(c);
                *n += 1;
            }
        } else {
            out.push(c);
            marks = Some(0);
        }
    }
    Cow::Owned(out)
}

/// [`clean`], cut to `w` cells.
pub(crate) fn clean_cut(s: &str, w: u16) -> String {
    truncate(&clean(s), w)
}

/// `s` in lines of at most `w` cells, broken at spaces where it can be (a word longer than a
/// line is broken where the line ends). Nothing is lost: the lines joined by spaces are `s`
/// with its runs of spaces at the breaks taken out.
pub(crate) fn wrap(s: &str, w: u16) -> Vec<String> {
    let w = usize::from(w.max(1));
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut used = 0;
    for word in s.split(' ').filter(|x| !x.is_empty()) {
        let ww = Span::raw(word).width();
        if used > 0 && used + 1 + ww <= w {
            line.push(' ');
            line.push_str(word);
            used += 1 + ww;
            continue;
        }
        if used > 0 {
            lines.push(std::mem::take(&mut line));
            used = 0;
        }
        for c in word.chars() {
            let cw = char_width(c);
            if used + cw > w && used > 0 {
                lines.push(std::mem::take(&mut line));
                used = 0;
            }
            line.push(c);
            used += cw;
        }
    }
    if used > 0 || lines.is_empty() {
        lines.push(line);
    }
    lines
}

/// `s` cut to `w` cells, ending in `…` when cut.
pub(crate) fn truncate(s: &str, w: u16) -> String {
    let w = usize::from(w);
    if Span::raw(s).width() <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut out = String::new();
    let mut used = 0;
    for c in s.chars() {
        let cw = char_width(c);
        if used + cw > w - 1 {
            break;
        }
        out.push(c);
        used += cw;
    }
    out.push('…');
    out
}

/// One column of a table whose columns come and go with the width.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ColSpec {
    /// Narrowest useful width.
    pub min: u16,
    /// Width of the widest content (and header).
    pub want: u16,
    /// Width at which the column says all it must (`want`, or less when the rest is a bonus,
    /// like the error kind after the count): what the drop decisions count.
    pub whole: u16,
    /// Higher is kept longer; `MUST` is never dropped.
    pub keep: u8,
    /// Takes whatever width is left over.
    pub flex: bool,
}

pub(crate) const MUST: u8 = u8::MAX;

/// Which columns fit in `width` (with `gap` cells between columns) and how wide each is:
/// `None` for a dropped column. Columns are dropped lowest `keep` first until the others fit
/// whole (whole columns read better than more columns cut short); only when the columns that
/// must stay do not fit whole are they narrowed toward their `min`. The width left is handed
/// out in `keep` order up to each column's `want`, then all of the rest to the flex columns.
/// The columns `fit` kept, with their widths.
pub(crate) fn shown<C: Copy>(cols: &[C], widths: &[Option<u16>]) -> Vec<(C, u16)> {
    cols.iter()
        .zip(widths)
        .filter_map(|(c, w)| w.map(|w| (*c, w)))
        .collect()
}

pub(crate) fn fit(cols: &[ColSpec], width: u16, gap: u16) -> Vec<Option<u16>> {
    let mut shown = vec![true; cols.len()];
    // Width of the shown columns, each whole (flex columns at `min`) or all at `min`.
    let total = |shown: &[bool], whole: bool| -> u32 {
        let n = shown.iter().filter(|s| **s).count() as u32;
        let sum: u32 = cols
            .iter()
            .zip(shown)
            .filter(|(_, s)| **s)
            .map(|(c, _)| u32::from(if whole && !c.flex { c.whole } else { c.min }))
            .sum();
        sum + u32::from(gap) * n.saturating_sub(1)
    };
    let must_whole = {
        let musts: Vec<bool> = cols.iter().map(|c| c.keep == MUST).collect();
        total(&musts, true) <= u32::from(width)
    };
    while total(&shown, must_whole) > u32::from(width) {
        let victim = cols
            .iter()
            .enumerate()
            .filter(|(i, c)| shown[*i] && c.keep != MUST)
            .min_by_key(|(i, c)| (c.keep, std::cmp::Reverse(*i)))
            .map(|(i, _)| i);
        match victim {
            Some(i) => shown[i] = false,
            None => break,
        }
    }
    let mut extra = u32::from(width).saturating_sub(total(&shown, false));
    let mut widths: Vec<Option<u16>> = cols
        .iter()
        .zip(&shown)
        .map(|(c, s)| s.then_some(c.min))
        .collect();
    // Flex columns wait until the others have what they want, then take all that is left.
    let mut order: Vec<usize> = (0..cols.len())
        .filter(|i| shown[*i] && !cols[*i].flex)
        .collect();
    order.sort_by_key(|i| (std::cmp::Reverse(cols[*i].keep), *i));
    for i in order {
        if let Some(w) = widths[i].as_mut() {
            let add = u32::from(cols[i].want.saturating_sub(*w)).min(extra);
            *w += add as u16;
            extra -= add;
        }
    }
    let flex: Vec<usize> = (0..cols.len())
        .filter(|i| shown[*i] && cols[*i].flex)
        .collect();
    if !flex.is_empty() {
        let each = extra / flex.len() as u32;
        let mut rem = extra % flex.len() as u32;
        for i in flex {
            if let Some(w) = widths[i].as_mut() {
                let add = each + u32::from(rem > 0);
                rem = rem.saturating_sub(1);
                *w = w.saturating_add(add.min(u32::from(u16::MAX)) as u16);
            }
        }
    }
    widths
}

/// `$11.92`; `<$0.01` for dust; `-` for nothing.
pub(crate) fn money(u: Usd) -> String {
    let v = u.as_f64();
    if u == Usd::ZERO {
        "-".into()
    } else if v.abs() < 0.01 {
        "<$0.01".into()
    } else {
        format!("${}", grouped_f64(v, 2))
    }
}

/// `1,234.56`.
pub(crate) fn grouped_f64(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let int = int
        .parse::<u64>()
        .map(group_thousands)
        .unwrap_or_else(|_| int.to_string());
    let sign = if v < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    }
}

/// A whole count with thousands separators.
pub(crate) fn count(n: u64) -> String {
    group_thousands(n)
}

/// A rate rounded to a whole number, `-` when zero.
pub(crate) fn rate(v: f64) -> String {
    if !v.is_finite() || v <= 0.0 {
        "-".into()
    } else {
        group_thousands(v.round() as u64)
    }
}

/// Compact token count: `950`, `12.3k`, `9.1M`.
pub(crate) fn tokens(n: u64) -> String {
    if n >= 1_000_000 {
        let m = n as f64 / 1e6;
        if m >= 100.0 || (m.fract() < 0.05 && m >= 10.0) {
            format!("{m:.0}M")
        } else {
            format!("{m:.1}M")
        }
    } else if n >= 10_000 {
        format!("{:.0}k", n as f64 / 1e3)
    } else if n >= 1_000 {
        format!("{:.1}k", n as f64 / 1e3)
    } else {
        n.to_string()
    }
}

/// Why the policy excludes an endpoint, as its row says it (`policy: unknown quant`, `config
/// exclude`).
pub(crate) fn policy_words(x: &crate::policy::Exclusion) -> String {
    crate::engine::reason::OffReason::Policy {
        exclusion: x.clone(),
    }
    .to_string()
}

/// Under a table whose `spent` column sums to the header's booked figure but for `usd` booked
/// on lines naming none of its rows (`what`: endpoint, dataset): that figure, said; nothing
/// when it is nothing.
pub(crate) fn booked_elsewhere(usd: Usd, what: &str, style: Style) -> Option<Line<'static>> {
    if usd == Usd::ZERO {
        return None;
    }
    let (sign, abs) = if usd < Usd::ZERO {
        ("-", Usd::ZERO - usd)
    } else {
        ("+", usd)
    };
    Some(Line::styled(
        format!(" {sign} {} booked at no {what} ", money(abs)),
        style,
    ))
}

/// A text bar `width` cells wide: `█` done, `▒` expected (e.g. projected), `░` the rest.
/// The characters differ, so the bar reads without colour.
pub(crate) fn bar(
    ratio: f64,
    expected: Option<f64>,
    width: u16,
    filled: Style,
    empty: Style,
) -> Vec<Span<'static>> {
    let w = usize::from(width);
    let cells = |r: f64| -> usize {
        let r = if r.is_finite() {
            r.clamp(0.0, 1.0)
        } else {
            0.0
        };
        ((r * w as f64).round() as usize).min(w)
    };
    let done = cells(ratio);
    let exp = expected.map_or(done, cells).max(done);
    let mut spans = Vec::with_capacity(3);
    if done > 0 {
        spans.push(Span::styled("█".repeat(done), filled));
    }
    if exp > done {
        spans.push(Span::styled("▒".repeat(exp - done), empty));
    }
    if w > exp {
        spans.push(Span::styled("░".repeat(w - exp), empty));
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping_breaks_at_spaces_and_keeps_every_word() {
        // (what, text, width, lines)
        let cases: [(&str, &str, u16, &[&str]); 6] = [
            ("fits", "a closed stream", 20, &["a closed stream"]),
            ("at a space", "a closed stream", 8, &["a closed", "stream"]),
            (
                "a word longer than a line",
                "gen-0123456789",
                5,
                &["gen-0", "12345", "6789"],
            ),
            ("runs of spaces at a break go", "ab   cd", 3, &["ab", "cd"]),
            (
                "wide characters count two",
                "深度求索 x",
                4,
                &["深度", "求索", "x"],
            ),
            ("nothing: one empty line", "", 10, &[""]),
        ];
        for (what, text, w, want) in cases {
            let got = wrap(text, w);
            assert_eq!(got, want, "{what}");
            assert!(got.iter().all(|l| width(l) <= w), "{what}: within {w}");
        }
    }

    #[test]
    fn truncation_and_formats() {
        assert_eq!(truncate("SiliconFlow", 9), "SiliconF…");
        assert_eq!(truncate("Chutes", 9), "Chutes");
        assert_eq!(truncate("abc", 0), "");
        // Wide characters take two cells.
        assert_eq!(width("深度求索"), 8);
        assert_eq!(truncate("深度求索", 6), "深度…");
        assert_eq!(money(Usd::from_f64(11.924)), "$11.92");
        assert_eq!(money(Usd::from_f64(1234.5)), "$1,234.50");
        assert_eq!(money(Usd::from_f64(0.004)), "<$0.01");
        assert_eq!(money(Usd::ZERO), "-");
        assert_eq!(tokens(9_100_000), "9.1M");
        assert_eq!(tokens(10_000_000), "10M");
        assert_eq!(tokens(12_345), "12k");
        assert_eq!(tokens(1_234), "1.2k");
        assert_eq!(rate(9840.4), "9,840");
        assert_eq!(rate(0.0), "-");
    }

    #[test]
    fn clean_leaves_what_moves_the_line_or_misleads_its_width_out() {
        let cases = [
            ("Chutes", "Chutes"),
            ("tab\there\u{8}bs\u{1b}[2J", "tab here bs [2J"),
            ("a\u{202E}live\u{2066}x\u{2069}", "alivex"),
            ("z\u{200B}w\u{FEFF}s\u{AD}p", "zwsp"),
            ("\u{1F468}\u{200D}\u{1F469}", "\u{1F468}\u{1F469}"),
            ("\u{2764}\u{FE0F}", "\u{2764}"),
            ("e\u{301}\u{301}\u{301}\u{301}x", "e\u{301}\u{301}x"),
            ("\u{301}lone", "lone"),
            ("ls\u{2028}ps", "ls ps"),
            ("深度 é", "深度 é"),
        ];
        for (raw, shown) in cases {
            assert_eq!(clean(raw), shown, "{raw:?}");
        }
        assert!(matches!(clean("plain ascii"), Cow::Borrowed(_)));
        assert_eq!(clean_cut(&"A".repeat(10_000), 5), "AAAA…");
    }

    #[test]
    fn fit_drops_lowest_keep_first_and_fills_flex() {
        let c = |min, want, keep, flex| ColSpec {
            min,
            want,
            whole: want,
            keep,
            flex,
        };
        let cols = [
            c(5, 5, MUST, false),
            c(4, 8, 10, false),
            c(6, 6, 5, false),
            c(4, 20, 20, true),
        ];
        // 5+8+6+20 + 3 gaps = 42.
        assert_eq!(fit(&cols, 50, 1), vec![Some(5), Some(8), Some(6), Some(28)]);
        // Too narrow for all minimums (5+4+6+4+3 = 22): the keep-5 column goes first; the
        // fixed column grows before the flex one.
        assert_eq!(fit(&cols, 20, 1), vec![Some(5), Some(8), None, Some(5)]);
        // Whole columns over more columns cut short: the keep-10 column goes too, though
        // it would fit at its minimum.
        assert_eq!(fit(&cols, 17, 1), vec![Some(5), None, None, Some(11)]);
        assert_eq!(fit(&cols, 3, 1), vec![Some(5), None, None, None]);
    }
}
