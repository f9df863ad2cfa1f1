//! The terminal UI (being written).
