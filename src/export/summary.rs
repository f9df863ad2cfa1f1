//! The export's printed summary: one line per dataset (success, error, skipped, not yet run,
//! prompts), then what a trainer should know of each: duplicates across directories,
//! exploded rows, foreign turns, reasoning a template drops, rows' lengths, missing system
//! turns, the prompt file's bad lines, damaged lines.

use std::path::Path;

use super::Counts;

/// The printed table: one line per dataset.
pub fn render(counts: &[Counts], to: &Path) -> String {
    use crate::domain::group_thousands as g;
    let mut out = format!(
        "{:<16} {:>9} {:>9} {:>9} {:>11} {:>9}\n",
        "dataset", "success", "error", "skipped", "not yet run", "prompts"
    );
    let opt = |v: Option<u64>| v.map_or("-".to_string(), g);
    for c in counts {
        out.push_str(&format!(
            "{:<16} {:>9} {:>9} {:>9} {:>11} {:>9}\n",
            c.dataset,
            g(c.success),
            g(c.error),
            g(c.skipped),
            opt(c.not_run),
            opt(c.prompts)
        ));
        if c.duplicates > 0 {
            out.push_str(&format!(
                "  {}: {} rows of ids already exported from an earlier directory left out (a \
                 shard present twice?)\n",
                c.dataset,
                g(c.duplicates)
            ));
        }
        for (n, what) in [
            (
                c.foreign_skipped,
                "left out, as a trainer would supervise those turns (the reason is in \
                 <dataset>.skipped.ndjson): turns = \"all\" has the model write every turn, \
                 --foreign-turns context keeps them as context",
            ),
            (
                c.foreign_context,
                "written with them as context (--foreign-turns context): train with SpecForge's \
                 data.train_only_last_turn: true, not with speculators, which supervises every \
                 assistant turn",
            ),
        ] {
            if n > 0 {
                out.push_str(&format!(
                    "  {}: {} rows hold assistant turns from the prompt file, not the model's: \
                     {what}\n",
                    c.dataset,
                    g(n)
                ));
            }
        }
        if c.success_rows != c.success {
            out.push_str(&format!(
                "  {}: {} success rows, one per assistant turn (--explode-turns)\n",
                c.dataset,
                g(c.success_rows)
            ));
        }
        if c.reasoning_dropped > 0 {
            out.push_str(&format!(
                "  {}: the chat template drops the last answer's reasoning in {} of {} rows ({}): \
                 the trainer would never see the thinking. Moonshot's Kimi templates render the \
                 last answer as history; the built-in kimi-k2.5-final-turn / \
                 kimi-k2-thinking-final-turn keep it (docs/export-and-trainers.md)\n",
                c.dataset,
                g(c.reasoning_dropped),
                g(c.rendered),
                c.dropped_ids.join(", ")
            ));
        }
        if let Some(name) = c.keeps_reasoning {
            out.push_str(&format!(
                "  {}: {} rows hold reasoning a trainer drops when it renders them through the \
                 model's own chat template (Moonshot's Kimi templates render the last answer \
                 without its thinking). For SpecForge: harvest export ... --format text \
                 --explode-turns --chat-template {name}; for speculators: serve vLLM with \
                 --chat-template FILE from `harvest template print {name} > FILE`\n",
                c.dataset,
                g(c.lossy_for_trainer)
            ));
        }
        if let Some(line) = c.lengths.line(&c.dataset) {
            out.push_str(&line);
            out.push('\n');
        }
        if c.without_system > 0 && c.rendered > 0 {
            out.push_str(&format!(
                "  {}: {} rows have no system turn: SpecForge adds its chat template's system \
                 prompt to them (kimi-k2-thinking: \"You are a helpful assistant.\"), which this \
                 rendering and the provider did not have; --system-prompt TEXT writes one into \
                 the rows so all three agree\n",
                c.dataset,
                g(c.without_system)
            ));
        }
        if c.bad_lines > 0 {
            out.push_str(&format!(
                "  {}: {} bad line(s) of the prompt file, rejected by the run (on_bad_line = \
                 \"skip\"), are error rows too, in {}.error.ndjson; they are no prompts, so the \
                 columns above leave them out\n",
                c.dataset,
                g(c.bad_lines),
                c.dataset
            ));
        }
        if c.unreadable > 0 {
            out.push_str(&format!(
                "  {}: {} damaged line(s) of the output directory were not exported (harvest run --repair)\n",
                c.dataset, c.unreadable
            ));
        }
    }
    out.push_str(&format!(
        "written to {}: <dataset>.jsonl (training rows), <dataset>.error.ndjson, \
         <dataset>.skipped.ndjson\n",
        to.display()
    ));
    out
}
