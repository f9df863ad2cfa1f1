//! What harvest keeps on disk: prompt readers, the output/rejects/ledger writer, and the state
//! needed to resume.

pub mod output;
pub mod prompts;
