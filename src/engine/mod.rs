//! The engine: everything that decides and runs requests. No terminal imports here.

pub mod policy;
