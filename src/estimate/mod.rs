//! What the work a config has left will cost and take (`harvest estimate`). Pure: the facts
//! (prompts still to send and their size, outputs already written, the endpoints with their
//! prices and the policy's verdict) go in, an [`Estimate`] comes out. Gathering the facts from
//! files and the API is `commands::estimate`'s job.
//!
//! Money is exact: per-token [`Price`]s times token counts, rounded once to the picodollar; the
//! price-weighted mix is a decimal weighted sum. Times are floats (they are estimates anyway).
//! Every figure that rests on an assumption says so in [`Estimate::assumptions`].

mod assumptions;
mod compute;
mod model;
pub(crate) mod render;
#[cfg(test)]
mod tests;

use assumptions::*;
pub use compute::{estimate, mix_weights};
pub use model::*;

/// Version of the JSON document; bumped when a field changes meaning or goes away.
pub const SCHEMA: u32 = 1;
/// Per-stream tokens per second when nothing better is known.
pub const DEFAULT_STREAM_TPS: f64 = 20.0;
/// Finished outputs an endpoint needs before its observed speed is trusted.
pub const MIN_SPEED_SAMPLES: u64 = 10;
/// Above this share of non-ASCII characters, characters / 4 underestimates tokens noticeably.
const NON_ASCII_WARNING: f64 = 0.10;
/// Below this many outputs, the observed mean is flagged as an early (short-leaning) one.
const FEW_OUTPUTS: u64 = 100;
