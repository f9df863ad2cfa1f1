//! The report as text: per dataset and endpoint tables, the totals, the rejects by cause, and
//! the spend reconciliation, as `harvest status --report` and the end of a run print them.

use crate::domain::{Tokens, Usd, group_thousands};

use super::*;

impl Report {
    /// The text form, about 110 columns wide.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            "{:<10} {:<24} {:>7} {:>13} {:>11} {:>7} {:>6} {:>6} {:>6}  errors, notes\n",
            "dataset",
            "endpoint",
            "prompts",
            "output tok",
            "USD",
            "tok/s",
            "ttft50",
            "ttft95",
            "trunc"
        ));
        for (i, d) in self.datasets.iter().enumerate() {
            let mine: Vec<&Row> = self
                .rows
                .iter()
                .filter(|r| r.dataset == d.dataset)
                .collect();
            for r in &mine {
                out.push_str(&row_line(r));
            }
            // The dataset's own row: its sum over several endpoints, or the notes only it
            // carries (rejects and duplicate ids belong to no endpoint), even with one.
            if mine.len() > 1 || d.rejected > 0 || d.duplicates > 0 {
                out.push_str(&row_line(d));
            }
            if i + 1 < self.datasets.len() {
                out.push('\n');
            }
        }
        if self.datasets.len() > 1 {
            out.push_str(&row_line(&self.total));
        }
        let s = &self.spend;
        spend_lines(s, &mut out);
        for c in self.reject_causes.iter().take(CAUSES_SHOWN) {
            let said: Vec<&str> = [
                &c.cause.provider_name,
                &c.cause.error_type,
                &c.cause.upstream,
            ]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
            out.push_str(&format!(
                "rejected: {} {}{}\n",
                group_thousands(c.rejects),
                c.kind,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", said.join(": "))
                }
            ));
        }
        if self.reject_causes.len() > CAUSES_SHOWN {
            out.push_str(&format!(
                "rejected: {} more causes (status --json lists them all)\n",
                self.reject_causes.len() - CAUSES_SHOWN
            ));
        }
        if let (Some(api), Some(ours)) = (s.api_usage_delta_usd, s.run_spent) {
            out.push_str(&format!(
                "API key usage over the last run: {api:.6} USD; harvest counted {:.6} ({:+.6}; \
                 the key's figure includes any other use of the key)\n",
                ours.as_f64(),
                ours.as_f64() - api
            ));
        }
        out
    }
}

pub(super) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// One row of the table: a (dataset, endpoint) pair, a dataset's sum, or the total.
fn row_line(r: &Row) -> String {
    let opt = |v: Option<u64>| v.map(|v| format!("{v}")).unwrap_or_else(|| "-".into());
    let mut errors: Vec<String> = r
        .errors
        .iter()
        .map(|(k, n)| format!("{k}×{}", group_thousands(*n)))
        .collect();
    if r.rejected > 0 {
        errors.push(format!("rejected×{}", group_thousands(r.rejected)));
    }
    if r.duplicates > 0 {
        errors.push(format!("duplicate-ids×{}", group_thousands(r.duplicates)));
    }
    if r.inline_think > 0 {
        errors.push(format!("think-inline×{}", group_thousands(r.inline_think)));
    }
    if r.cut_thinking > 0 {
        errors.push(format!("cut-thinking×{}", group_thousands(r.cut_thinking)));
    }
    format!(
        "{:<10} {:<24} {:>7} {:>13} {:>11.4} {:>7} {:>6} {:>6} {:>6}  {}\n",
        truncate(&r.dataset, 10),
        truncate(&r.endpoint, 24),
        group_thousands(r.prompts),
        Tokens(r.output_tokens).to_string(),
        r.usd.as_f64(),
        r.tok_per_s
            .map(|v| format!("{v:.1}"))
            .unwrap_or_else(|| "-".into()),
        opt(r.ttft_p50_ms),
        opt(r.ttft_p95_ms),
        r.truncation_rate
            .map(|v| format!("{:.1}%", v * 100.0))
            .unwrap_or_else(|| "-".into()),
        if errors.is_empty() {
            "-".to_string()
        } else {
            errors.join(" ")
        }
    )
}

/// The spend check: the ledger by kind, the answers not kept, records against the ledger.
fn spend_lines(s: &SpendCheck, out: &mut String) {
    out.push_str(&format!(
        "spend: ledger {:.6} USD = answers {:.6} + closed/failed {:.6} + adjustments {:.6} \
         ({:.6} of it estimated)\n",
        s.ledger.as_f64(),
        s.answers.as_f64(),
        s.closed.as_f64(),
        s.adjustments.as_f64(),
        s.estimated.as_f64()
    ));
    let not_kept = s.answers - s.answers_kept;
    if not_kept > Usd::ZERO {
        out.push_str(&format!(
            "answers: {:.6} USD kept in records, {:.6} paid for answers not kept (empty \
             answers retried, answers rejected)\n",
            s.answers_kept.as_f64(),
            not_kept.as_f64()
        ));
    }
    // Like with like: the records against the ledger lines of the answers they hold.
    if s.records != s.answers_kept {
        out.push_str(&format!(
            "records: {:.6} USD, their answers in the ledger {:.6}: {:+.6} apart (a row \
             without its ledger line, or a ledger line without its row)\n",
            s.records.as_f64(),
            s.answers_kept.as_f64(),
            (s.records - s.answers_kept).as_f64()
        ));
    }
}
