//! The estimate as text: the dataset, endpoint and totals tables, what was left out and why,
//! the verdict, wrapped to the terminal's usual width.

use crate::config::Routing;
use crate::domain::{Tokens, Usd, group_thousands};

use super::*;

/// Width the text output keeps to.
const WIDTH: usize = 100;

/// Columns padded to their widest cell; `right[i]` right-aligns column `i`.
pub(super) fn table(header: &[&str], rows: &[Vec<String>], right: &[bool]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, c) in width.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: &[String]| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = " ".repeat(width[i].saturating_sub(c.chars().count()));
            if i > 0 {
                s.push_str("  ");
            }
            if right.get(i).copied().unwrap_or(false) {
                s.push_str(&pad);
                s.push_str(c);
            } else {
                s.push_str(c);
                if i + 1 < cells.len() {
                    s.push_str(&pad);
                }
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&header.iter().map(|h| h.to_string()).collect::<Vec<_>>());
    for row in rows {
        out.push_str(&line(row));
    }
    out
}

/// `text` wrapped at [`WIDTH`], the first line after `first`, the others after `rest` (each
/// followed by a space when not empty).
pub(super) fn wrap(text: &str, first: &str, rest: &str) -> String {
    let mut out = String::new();
    let mut line = first.to_string();
    let mut words = 0;
    for word in text.split_whitespace() {
        if words > 0 && line.chars().count() + 1 + word.chars().count() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_string();
            words = 0;
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        words += 1;
    }
    out.push_str(&line);
    out.push('\n');
    out
}

pub(super) fn dataset_table(e: &Estimate) -> String {
    let header = [
        "dataset",
        "done",
        "left",
        "to send",
        "input",
        "output",
        "out/prompt",
        "cheapest",
        "mix",
        "dearest",
    ];
    let rows: Vec<Vec<String>> = (e.datasets.iter())
        .map(|d| {
            vec![
                d.name.clone(),
                group_thousands(d.done),
                group_thousands(d.prompts_remaining),
                group_thousands(d.prompts_to_send),
                Tokens(d.input_tokens).to_string(),
                Tokens(d.output_tokens).to_string(),
                format!(
                    "{} {}",
                    group_thousands(d.mean_output_tokens.round() as u64),
                    d.output_basis.label()
                ),
                d.cost_usd.cheapest.to_string(),
                d.cost_usd.mix.to_string(),
                d.cost_usd.dearest.to_string(),
            ]
        })
        .collect();
    let right = [false, true, true, true, true, true, true, true, true, true];
    table(&header, &rows, &right)
}

pub(super) fn endpoint_table(e: &Estimate) -> String {
    let header = [
        "endpoint", "quant", "$/M in", "$/M out", "share", "tok/s", "speed", "cost", "time",
    ];
    let rows: Vec<Vec<String>> = (e.endpoints.iter())
        .map(|r| {
            vec![
                r.tag.clone(),
                format!("{} {}", r.quantization, r.fidelity.mark()),
                format!("{:.2}", r.price_in_per_m),
                format!("{:.2}", r.price_out_per_m),
                format!("{:.1}%", r.mix_share * 100.0),
                format!("{:.1}", r.stream_tok_per_s),
                r.speed_source.label().to_string(),
                r.cost_usd.to_string(),
                crate::domain::duration(r.time_s),
            ]
        })
        .collect();
    let right = [false, false, true, true, true, true, false, true, true];
    table(&header, &rows, &right)
}

pub(super) fn totals_table(e: &Estimate) -> String {
    let t = &e.totals;
    let mix_label = format!("{} endpoints", e.endpoints.len());
    let rows: Vec<Vec<String>> = [
        ("cheapest", &t.cheapest, t.cheapest.endpoint.as_deref()),
        ("mix", &t.mix, Some(mix_label.as_str())),
        ("dearest", &t.dearest, t.dearest.endpoint.as_deref()),
    ]
    .into_iter()
    .map(|(name, p, who)| {
        vec![
            name.to_string(),
            who.unwrap_or("-").to_string(),
            p.cost_usd.to_string(),
            crate::domain::duration(p.time_s),
        ]
    })
    .collect();
    table(
        &["", "served by", "cost", "time"],
        &rows,
        &[false, false, true, true],
    )
}

/// `deepinfra, together (policy: unknown quant); baseten/fp4 (policy: fp4 re-quantized)`.
pub(super) fn excluded_by_reason(e: &Estimate) -> String {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for x in &e.excluded {
        match groups.iter_mut().find(|(r, _)| *r == x.reason) {
            Some((_, tags)) => tags.push(&x.tag),
            None => groups.push((&x.reason, vec![&x.tag])),
        }
    }
    let parts: Vec<String> = (groups.iter())
        .map(|(reason, tags)| format!("{} ({reason})", tags.join(", ")))
        .collect();
    parts.join("; ")
}

pub(super) fn abs(u: Usd) -> Usd {
    Usd::from_pico(u.pico().saturating_abs())
}

/// `7,326 of 10,000 prompts (44.0M of 60.0M output tokens) fit, short by $36.50`.
pub(super) fn partial(f: &Fit, e: &Estimate) -> String {
    format!(
        "{} of {} prompts ({} of {} output tokens) fit, short by {}",
        group_thousands(f.prompts_that_fit),
        group_thousands(e.totals.prompts),
        Tokens(f.output_tokens_that_fit),
        Tokens(e.totals.output_tokens),
        abs(f.headroom_usd)
    )
}

pub(crate) fn verdict_text(e: &Estimate) -> String {
    let v = &e.verdict;
    let head = format!(
        "budget {} - {} spent = {} available: ",
        v.budget_usd, v.spent_usd, v.available_usd
    );
    let body = match v.status {
        VerdictStatus::NothingLeft => "nothing left to send".to_string(),
        VerdictStatus::Fits => format!(
            "fits, {} headroom at the mix ({} at the dearest)",
            v.mix.headroom_usd, v.dearest.headroom_usd
        ),
        VerdictStatus::FitsAtMix => format!(
            "fits at the mix ({} headroom), not at the dearest (short by {})",
            v.mix.headroom_usd,
            abs(v.dearest.headroom_usd)
        ),
        VerdictStatus::FitsAtCheapest => format!(
            "fits only at the cheapest ({} headroom); at the mix {}",
            v.cheapest.headroom_usd,
            partial(&v.mix, e)
        ),
        VerdictStatus::OverBudget => format!(
            "over budget; at the cheapest {}; at the mix {}",
            partial(&v.cheapest, e),
            partial(&v.mix, e)
        ),
    };
    wrap(&format!("{head}{body}"), "", " ")
}

/// The human report, within 100 columns (a long dataset or endpoint name can widen a table).
pub(crate) fn render_text(e: &Estimate) -> String {
    let mut out = format!(
        "{}: the remaining work of {} dataset{}\nrouting {}, policy {}, concurrency {}\n\n",
        e.model,
        e.datasets.len(),
        if e.datasets.len() == 1 { "" } else { "s" },
        match e.routing {
            Routing::Openrouter => "openrouter",
            Routing::Pinned => "pinned",
        },
        e.policy,
        e.concurrency
    );
    out.push_str(&dataset_table(e));
    out.push('\n');
    out.push_str(&endpoint_table(e));
    if !e.excluded.is_empty() {
        out.push_str(&wrap(&excluded_by_reason(e), "excluded:", " "));
    }
    out.push_str("quant: * native precision  + lossless upcast  ! re-quantized  ? undisclosed\n\n");
    let t = &e.totals;
    out.push_str(&format!(
        "remaining: {} prompts, {} input tokens (estimated), {} output tokens\n",
        group_thousands(t.prompts),
        Tokens(t.input_tokens),
        Tokens(t.output_tokens)
    ));
    out.push_str(&totals_table(e));
    out.push_str(&verdict_text(e));
    if let Some(a) = &e.account {
        out.push_str("\nthe key and the account:\n");
        for n in &a.notes {
            out.push_str(&wrap(n, "  -", "   "));
        }
    }
    out.push_str("\nassumptions:\n");
    for a in &e.assumptions {
        out.push_str(&wrap(a, "  -", "   "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_keeps_to_the_width() {
        let text = "word ".repeat(60);
        let w = wrap(&text, "  -", "   ");
        assert!(w.lines().count() > 2);
        assert!(w.lines().all(|l| l.chars().count() <= WIDTH), "{w}");
        assert!(w.starts_with("  - word"));
        assert!(w.lines().skip(1).all(|l| l.starts_with("    word")));
    }
}
