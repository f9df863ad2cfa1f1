//! What harvest keeps on disk: prompt readers, the output/rejects/ledger writer, the one reader
//! of an output directory (`scan`), the only changes made to it outside the writer (`repair`),
//! the lock that keeps one run per directory (`lock`), the probe's result file (`probe_file`),
//! the second chance of rejects and cut answers (`supersede`),
//! and the state needed to resume.

pub mod lock;
pub mod output;
pub mod prescan;
pub mod probe_file;
pub mod prompts;
pub mod repair;
pub mod scan;
pub mod supersede;
