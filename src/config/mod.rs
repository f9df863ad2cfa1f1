//! The `harvest.toml` configuration (SPEC §2): what to run, against which servers, under which
//! budgets. Every key has a default except `[[dataset]]`; unknown keys are errors. Errors name the
//! file, the 1-based line and the key path (`dataset[1].output_token_budget`, indices from 0).

mod edit;
mod error;
mod load;
mod provider;
mod request;
mod schema;
mod spans;
mod validate;

pub use edit::{EditError, set_cancel_stops_billing};
pub use error::ConfigError;
pub use provider::{AutoWord, DataCollection, MaxPriceSetting, ProviderConfig};
pub use request::*;
pub use schema::*;
use spans::*;
use validate::*;
pub use validate::{MAX_BUDGET_USD, RESERVED_NAMES};

#[cfg(test)]
mod tests;
