//! What harvest keeps on disk: prompt readers, the output/rejects/ledger writer, the one reader
//! of an output directory (`scan`), the only changes made to it outside the writer (`repair`),
//! the lock that keeps one run per directory (`lock`), and the state needed to resume.

pub mod lock;
pub mod output;
pub mod prompts;
pub mod repair;
pub mod scan;
