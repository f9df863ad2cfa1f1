//! Python's idea of whitespace in chat templates: `str.strip()`, `lstrip()`, `rstrip()` and
//! Jinja's `trim` filter (which calls `strip`) drop what `str.isspace()` calls whitespace.
//! That is Unicode's White_Space plus the separators U+001C..U+001F, which Rust's `trim` keeps:
//! a row with a file separator at the edge of its text rendered unlike Python before
//! (research/trainer-review.md, row `e-ctrl`). Every other string method is minijinja-contrib's.

use std::borrow::Cow;

use minijinja::value::{Value, ValueKind, from_args};
use minijinja::{Error, State};

/// `str.isspace()` for one character.
fn python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

#[derive(Clone, Copy)]
enum Side {
    Both,
    Start,
    End,
}

fn strip<'a>(s: &'a str, chars: Option<&str>, side: Side) -> &'a str {
    let set: Vec<char> = chars.map(|c| c.chars().collect()).unwrap_or_default();
    let drop = |c: char| match chars {
        Some(_) => set.contains(&c),
        None => python_space(c),
    };
    match side {
        Side::Both => s.trim_matches(drop),
        Side::Start => s.trim_start_matches(drop),
        Side::End => s.trim_end_matches(drop),
    }
}

/// `s.strip()` as Python does it.
pub(crate) fn python_trim(s: &str) -> &str {
    strip(s, None, Side::Both)
}

/// The `trim` filter, as Jinja2's `do_trim(value, chars=None)`.
pub(super) fn trim(value: Cow<'_, str>, chars: Option<Cow<'_, str>>) -> String {
    strip(&value, chars.as_deref(), Side::Both).to_string()
}

/// Methods called on values that minijinja does not know: `strip` and its kin with Python's
/// whitespace, everything else as minijinja-contrib's `pycompat` does it.
pub(super) fn unknown_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let side = match method {
        "strip" => Some(Side::Both),
        "lstrip" => Some(Side::Start),
        "rstrip" => Some(Side::End),
        _ => None,
    };
    if let (Some(side), ValueKind::String, Some(s)) = (side, value.kind(), value.as_str()) {
        let (chars,): (Option<&str>,) = from_args(args)?;
        return Ok(Value::from(strip(s, chars, side)));
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_what_python_strips() {
        // Each expected value is Python 3.11's `s.strip()` / `lstrip()` / `rstrip()`.
        let s = "\u{1c}\u{1f} \t\n\u{a0}\u{85}\u{2028}\u{3000}x y\u{1d}\u{1e}\u{b}\u{c}";
        assert_eq!(strip(s, None, Side::Both), "x y");
        assert_eq!(strip(s, None, Side::Start), "x y\u{1d}\u{1e}\u{b}\u{c}");
        assert_eq!(
            strip(s, None, Side::End),
            "\u{1c}\u{1f} \t\n\u{a0}\u{85}\u{2028}\u{3000}x y"
        );
        // Not whitespace to Python either: zero-width space, BOM, U+001B.
        assert_eq!(
            strip("\u{200b}x\u{feff}", None, Side::Both),
            "\u{200b}x\u{feff}"
        );
        assert_eq!(strip("\u{1b}x", None, Side::Both), "\u{1b}x");
        assert_eq!(strip("xxhixy", Some("xy"), Side::Both), "hi");
        assert_eq!(trim(" \u{1f}a\u{1c} ".into(), None), "a");
    }

    #[test]
    fn templates_strip_as_python_and_keep_other_methods() {
        let mut env = minijinja::Environment::new();
        env.set_unknown_method_callback(unknown_method);
        env.add_filter("trim", trim);
        let out = env
            .render_str(
                "[{{ s.strip() }}|{{ s.lstrip() }}|{{ s|trim }}|{{ t.strip('-') }}|{{ t.upper() }}|{{ t.replace('-', '+') }}]",
                minijinja::context! { s => "\u{1c} a \u{1f}", t => "-b-" },
            )
            .expect("renders");
        assert_eq!(out, "[a|a \u{1f}|a|b|-B-|+b+]");
    }
}
