//! Kept answers whose attempt is still open: what a crash between an answer's record and its
//! `complete` line leaves (the writer puts the record on disk first). Found in the scan's own
//! pass over the outputs, so a start reads its rows once; `kept_booking::book_kept_answers` books
//! them from these, and from the turns file.

use std::collections::{HashMap, HashSet};

use crate::store::output::{OutputRecord, SpendEntry, Turn, TurnRecord};

use super::LedgerScan;

/// One kept answer whose attempt the ledger leaves open.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptOpen {
    /// The open attempt's `started` (or `dispatched`) line.
    pub attempt: SpendEntry,
    /// Where the answer came from and what it cost, as its record says.
    pub record: TurnRecord,
    /// Its text, reasoning and tool calls, for the empty rule.
    pub content: String,
    pub reasoning: Option<String>,
    pub calls: Vec<crate::openrouter::ToolCall>,
    /// When its record was written.
    pub at: String,
}

impl KeptOpen {
    /// The record's cost, if it may be booked: a row is text anyone with the directory can
    /// edit, so a cost below zero or above what the attempt could be billed is not taken
    /// (the attempt is looked up at `/generation` instead, as a crash's leftover is).
    pub(crate) fn cost(&self) -> Result<crate::domain::Usd, crate::booked_cost::CostRefused> {
        crate::booked_cost::check_usd(self.record.cost_usd, self.attempt.worst_usd)
    }
}

/// Matches records against the ledger's open attempts as the scan reads them.
pub(super) struct KeptMatcher<'a> {
    /// Open attempts by the generation they started (a rebuilt line already booked its
    /// answer, though its first attempt looks open).
    open: HashMap<&'a str, &'a SpendEntry>,
    /// Attempts that never named a generation (a server whose chunks carry no id), by dataset
    /// and prompt: a row without a generation whose id has no `complete` line was answered
    /// by one.
    nameless: HashMap<&'a str, HashMap<&'a str, &'a SpendEntry>>,
    completes: &'a HashSet<String>,
    pub(super) found: Vec<KeptOpen>,
}

impl<'a> KeptMatcher<'a> {
    pub(super) fn new(ledger: &'a LedgerScan) -> Self {
        let open = (ledger.open.iter())
            .filter_map(|e| Some((e.generation_id.as_deref()?, e)))
            .filter(|(g, _)| !ledger.rebuilt_generations.contains(*g))
            .collect();
        let mut nameless: HashMap<&str, HashMap<&str, &SpendEntry>> = HashMap::new();
        for e in &ledger.unknown {
            (nameless.entry(e.dataset.as_str()).or_default()).insert(e.id.as_str(), e);
        }
        KeptMatcher {
            open,
            nameless,
            completes: &ledger.completes,
            found: Vec::new(),
        }
    }

    fn found(&mut self, attempt: &SpendEntry, record: TurnRecord, m: &Turn, at: &str) {
        self.found.push(KeptOpen {
            attempt: attempt.clone(),
            record,
            content: m.content.clone(),
            reasoning: m.reasoning_content.clone(),
            calls: m.tool_calls.clone(),
            at: at.to_string(),
        });
    }

    /// A row of `dataset`: its one answer, or each turn of a regenerated conversation.
    pub(super) fn row(&mut self, dataset: &str, r: &OutputRecord) {
        if self.open.is_empty() && self.nameless.is_empty() {
            return;
        }
        let mut answers = (r.conversations.iter()).filter(|m| m.role == "assistant");
        if !r.turns.is_empty() {
            // Every assistant turn regenerated, first to last.
            for (t, m) in r.turns.iter().zip(answers) {
                if let Some(e) = t.generation_id.as_deref().and_then(|g| self.open.remove(g)) {
                    self.found(e, t.clone(), m, &r.created_at);
                }
            }
            return;
        }
        let Some(m) = answers.next_back() else { return };
        let attempt = match r.generation_id.as_deref() {
            Some(g) => self.open.remove(g),
            None if !self.completes.contains(&r.id) => {
                (self.nameless.get_mut(dataset)).and_then(|n| n.remove(r.id.as_str()))
            }
            None => None,
        };
        if let Some(e) = attempt {
            self.found(e, r.answer_record(), m, &r.created_at);
        }
    }
}
