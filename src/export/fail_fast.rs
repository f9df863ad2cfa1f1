//! When an export stops for its template: one that fails its first rows the same way, having
//! rendered none, would fail every row; one that runs away (out of fuel, past its output cap)
//! on a few rows costs half a second on each of thousands. Both stop the export with exit 2.

use super::template;

/// A template that fails this many rows the same way before it renders one is stopped.
pub(super) const FAIL_FAST_ROWS: u32 = 5;

/// A template that runs away on this many rows (rendered ones or not) is stopped.
pub(super) const RUNAWAY_ROWS: u32 = 5;

/// The first renderings of an export: whether the template fails every row the same way.
#[derive(Default)]
pub(super) struct FirstRenderings {
    /// A rendering succeeded: the template works, and the rows that fail are the rows' own.
    pub(super) rendered_one: bool,
    /// The first failure, and how many failed with its cause since.
    pub(super) first: Option<template::TemplateError>,
    pub(super) same: u32,
    /// Renderings that ran away, and the first of them.
    pub(super) runaways: u32,
    pub(super) first_runaway: Option<template::TemplateError>,
}

impl FirstRenderings {
    /// Notes one answer's renderings; true when the export should stop.
    pub(super) fn note(&mut self, rendered: u64, failure: Option<template::TemplateError>) -> bool {
        if rendered > 0 {
            self.rendered_one = true;
        }
        // A runaway costs the same whether other rows render: counted across the export.
        let failure = match failure {
            Some(e) if e.is_runaway() => {
                self.runaways += 1;
                if self.first_runaway.is_none() {
                    self.first_runaway = Some(e);
                }
                return self.runaways >= RUNAWAY_ROWS;
            }
            other => other,
        };
        if self.rendered_one {
            return false;
        }
        let Some(e) = failure else {
            return false;
        };
        match &self.first {
            Some(first) if first.cause() != e.cause() => return false,
            Some(_) => {}
            None => self.first = Some(e),
        }
        self.same += 1;
        self.same >= FAIL_FAST_ROWS
    }
}
