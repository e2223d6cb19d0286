//! Warnings and infos a query collects besides its value, as Prometheus annotates results.
//!
//! Its own file so the function kernels (`native`, `histogram`) can annotate without knowing
//! the evaluator.

use std::cell::RefCell;

/// Warnings and infos collected during evaluation, without duplicates, in first-seen order.
/// Shared by reference during evaluation, hence the interior mutability.
#[derive(Debug, Default)]
pub(crate) struct Annotations {
    warnings: RefCell<Vec<String>>,
    infos: RefCell<Vec<String>>,
}

impl Annotations {
    pub(crate) fn warn(&self, m: String) {
        let mut w = self.warnings.borrow_mut();
        if !w.contains(&m) {
            w.push(m);
        }
    }

    pub(crate) fn info(&self, m: String) {
        let mut i = self.infos.borrow_mut();
        if !i.contains(&m) {
            i.push(m);
        }
    }

    /// The warnings and the infos.
    pub(crate) fn into_lists(self) -> (Vec<String>, Vec<String>) {
        (self.warnings.into_inner(), self.infos.into_inner())
    }
}
