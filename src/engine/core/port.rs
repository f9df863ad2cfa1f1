//! The core's one port onto the driver's world: what it reads while it decides. In a run the
//! driver reads the prompt files and the workers' counters; a test hands in lists and
//! numbers. Everything else reaches the core as an [`Event`](super::Event).

use crate::store::prompts::{Prompt, PromptError};

/// What the workers' counters say now: money booked and accrued, and how many requests each
/// endpoint has in flight (the workers attribute OpenRouter-routed ones as the stream names
/// its provider).
#[derive(Clone, Debug, Default)]
pub(crate) struct Live {
    pub spent_pico: i64,
    pub accrued_pico: i64,
    pub endpoint_in_flight: Vec<u64>,
}

/// Where the core reads the driver's world.
pub(crate) trait Port {
    /// The next line of dataset `dataset`'s prompts (`None` at their end).
    fn next_prompt(&mut self, dataset: usize) -> Option<Result<Prompt, PromptError>>;
    /// The workers' counters now.
    fn live(&self) -> Live;
    /// What attempt `key` has streamed so far at its prices (its running cost), picodollars.
    fn accrued_pico(&self, key: u64) -> i64;
    /// The whole output tokens attempt `key` has received so far (what its running cost
    /// accrues by, at the price of the endpoint serving it, which the core may not know).
    fn streamed_tokens(&self, key: u64) -> u64;
}
