//! Settling with the API the money an earlier run left open, as pure decisions: what a start
//! books at once, holds and looks up ([`Leftovers`], [`Core::opening`](super::Core)), and how
//! each look-up's answer is booked ([`Landing`]; a closed stream still unknown reckoned again,
//! `reckon`), and the key's checkpoints and true-up of
//! crash estimates ([`KeyAccount`]). The driver performs them with its GETs to
//! `/generation`; the seeded simulation's crash worlds run the same decisions against a disk a
//! crash left (issue #52). This run's own closed streams are asked about and settled the same
//! way ([`Closes`]).

mod closes;
mod key;
mod landing;
mod leftovers;
mod reckon;

pub(crate) use closes::{Closes, LookUpsEnd};
pub(crate) use key::{KeyAccount, KeyMoment};
pub(crate) use landing::Landing;
pub(crate) use leftovers::Leftovers;
