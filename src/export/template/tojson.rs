//! The `tojson` filter as transformers registers it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`.
//! minijinja's own escapes `< > & '` for HTML, sorts keys and refuses `separators`, so tool
//! schemas and tool-call arguments (Kimi, Qwen3, Llama templates) would render unlike the text
//! the trainer tokenizes. Same signature as transformers' (`chat_template_utils.py`):
//! `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Error, ErrorKind};

/// How `json.dumps` lays the text out.
struct Layout {
    ensure_ascii: bool,
    /// `None`: one line; `Some(s)`: a newline and `s` once per level before each item.
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The filter: `x | tojson`, `x | tojson(indent=4)`, `x | tojson(separators=(',', ':'))`.
pub(super) fn tojson(value: &Value, positional: &[Value], kwargs: Kwargs) -> Result<String, Error> {
    const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
    if positional.len() > NAMES.len() {
        return Err(invalid("tojson() takes at most 4 arguments"));
    }
    let arg = |i: usize| -> Result<Option<Value>, Error> {
        let by_name: Option<Value> = kwargs.get(NAMES[i])?;
        Ok(match (positional.get(i), by_name) {
            (Some(_), Some(_)) => {
                return Err(invalid(format!(
                    "tojson() got multiple values for argument '{}'",
                    NAMES[i]
                )));
            }
            (Some(v), None) => Some(v.clone()),
            (None, v) => v,
        })
        .map(|v| v.filter(|v| !v.is_none() && !v.is_undefined()))
    };
    let ensure_ascii = arg(0)?.is_some_and(|v| v.is_true());
    let indent = match arg(1)? {
        None => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_string()),
        Some(v) => {
            let n = v
                .as_i64()
                .ok_or_else(|| invalid("tojson(): indent must be an integer or a string"))?;
            Some(" ".repeat(n.max(0) as usize))
        }
    };
    let (item_sep, key_sep) = match arg(2)? {
        Some(v) => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or(",").to_string(),
                    b.as_str().unwrap_or(":").to_string(),
                ),
                _ => return Err(invalid("tojson(): separators must be two strings")),
            }
        }
        // Python's defaults: no space before a newline when indenting.
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let sort_keys = arg(3)?.is_some_and(|v| v.is_true());
    kwargs.assert_all_used()?;
    let layout = Layout {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    write_value(&mut out, value, &layout, 0)?;
    Ok(out)
}

fn write_value(out: &mut String, v: &Value, l: &Layout, depth: usize) -> Result<(), Error> {
    match v.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number(v)),
        ValueKind::String => write_str(out, v.as_str().unwrap_or(""), l.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            write_items(out, l, depth, '[', ']', &items, |out, item, depth| {
                write_value(out, item, l, depth)
            })?;
        }
        ValueKind::Map => {
            let mut pairs: Vec<(String, Value)> = Vec::new();
            for key in v.try_iter()? {
                let item = v.get_item(&key)?;
                pairs.push((key_text(&key)?, item));
            }
            if l.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_items(out, l, depth, '{', '}', &pairs, |out, (k, item), depth| {
                write_str(out, k, l.ensure_ascii);
                out.push_str(&l.key_sep);
                write_value(out, item, l, depth)
            })?;
        }
        ValueKind::Undefined => {
            return Err(invalid(
                "tojson(): an undefined value is not JSON serializable",
            ));
        }
        other => {
            return Err(invalid(format!(
                "tojson(): a value of type {other} is not JSON serializable"
            )));
        }
    }
    Ok(())
}

/// `[a, b]` or, indented, one item per line; empty containers stay `[]`/`{}` as in Python.
fn write_items<T>(
    out: &mut String,
    l: &Layout,
    depth: usize,
    open: char,
    close: char,
    items: &[T],
    mut each: impl FnMut(&mut String, &T, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if items.is_empty() {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(unit) = &l.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(unit);
            }
        }
    };
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(&l.item_sep);
        }
        newline(out, depth + 1);
        each(out, item, depth + 1)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// A key as Python converts it: strings as they are, numbers, booleans and None as JSON.
fn key_text(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or("").to_string()),
        ValueKind::Number => Ok(number(key)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        other => Err(invalid(format!(
            "tojson(): keys must be str, int, float, bool or None, not {other}"
        ))),
    }
}

/// An integer as it is; a float as Python's `repr` writes it (`1.0`, `1e-05`, `1e+16`).
fn number(v: &Value) -> String {
    if v.is_integer() {
        return v.to_string();
    }
    match f64::try_from(v.clone()) {
        Ok(f) => python_float(f),
        Err(_) => v.to_string(),
    }
}

fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Rust's `{:e}` gives the shortest round-tripping digits, as Python's repr does; only the
    // layout differs. Python writes fixed notation for exponents -5 < e < 16.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let sign = if negative { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let point = exp + 1;
        let body = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let (head, tail) = digits.split_at(1);
        let frac = if tail.is_empty() {
            String::new()
        } else {
            format!(".{tail}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{head}{frac}e{esign}{:02}", exp.abs())
    }
}

/// A JSON string as Python's encoder writes it: `\" \\ \n \r \t \b \f` by name, other
/// control characters as `\u00XX`; non-ASCII as it is, or as `\uXXXX` (surrogate pairs
/// above the BMP) with `ensure_ascii`.
fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;
    use serde_json::json;

    fn render(template: &str, x: serde_json::Value) -> String {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(
            template,
            minijinja::context! { x => minijinja::value::Value::from(minijinja::value::Serde(&x)) },
        )
        .expect("renders")
    }

    /// Each expected text is what Python 3.11's `json.dumps` printed for the same call.
    #[test]
    fn renders_as_python_json_dumps() {
        let msg = json!({"role": "user", "content": "<q> & 'x' é \u{1f600}\n\u{1c}", "n": [1, 2.5, 1e-5, 1e16, true, null], "e": {}, "l": []});
        let cases = [
            (
                "{{ x|tojson }}",
                r#"{"role": "user", "content": "<q> & 'x' é 😀\n\u001c", "n": [1, 2.5, 1e-05, 1e+16, true, null], "e": {}, "l": []}"#,
            ),
            (
                "{{ x|tojson(separators=(',', ':')) }}",
                r#"{"role":"user","content":"<q> & 'x' é 😀\n\u001c","n":[1,2.5,1e-05,1e+16,true,null],"e":{},"l":[]}"#,
            ),
            (
                "{{ x|tojson(sort_keys=true) }}",
                r#"{"content": "<q> & 'x' é 😀\n\u001c", "e": {}, "l": [], "n": [1, 2.5, 1e-05, 1e+16, true, null], "role": "user"}"#,
            ),
            (
                "{{ x|tojson(ensure_ascii=true, separators=(',', ':')) }}",
                r#"{"role":"user","content":"<q> & 'x' \u00e9 \ud83d\ude00\n\u001c","n":[1,2.5,1e-05,1e+16,true,null],"e":{},"l":[]}"#,
            ),
        ];
        for (template, want) in cases {
            assert_eq!(render(template, msg.clone()), want, "{template}");
        }
        assert_eq!(
            render(
                "{{ x|tojson(indent=2) }}",
                json!({"a": [1, {"b": null}], "c": {}})
            ),
            "{\n  \"a\": [\n    1,\n    {\n      \"b\": null\n    }\n  ],\n  \"c\": {}\n}"
        );
    }

    #[test]
    fn floats_as_python_repr() {
        let cases = [
            (1.0, "1.0"),
            (0.1, "0.1"),
            (-2.5, "-2.5"),
            (123456789.0, "123456789.0"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-0.0, "-0.0"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float(f), want, "{f}");
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        for t in [
            "{{ x|tojson(separators=',') }}",
            "{{ x|tojson(colour=1) }}",
            "{{ x|tojson(false, indent=2, ensure_ascii=true) }}",
            "{{ y|tojson }}",
        ] {
            assert!(
                env.render_str(t, minijinja::context! { x => 1 }).is_err(),
                "{t}"
            );
        }
    }
}
