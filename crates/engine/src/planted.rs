//! Planted bugs, for negative controls: a test plants one in the engines its thread drives to
//! show that the invariants catch it (`crates/sim/tests/invariants.rs`). This module exists only
//! with the `planted-bugs` feature, which only the simulator's tests enable: no build that
//! ships has the knob, or pays for it.

use std::cell::Cell;

/// A bug a test can plant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bug {
    /// The completer stops the local ACK timer where it should restart it: after an
    /// acknowledgement that leaves transmitted PSNs unacknowledged.
    AckTimerNotRearmed,
}

thread_local! {
    static PLANTED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Plants `bug` in every engine this thread drives, until the returned guard is dropped.
#[must_use = "the bug is removed when the guard is dropped"]
pub fn plant(bug: Bug) -> Planted {
    PLANTED.with(|p| p.set(Some(bug)));
    Planted(())
}

/// Removes the planted bug when dropped (also when the test panics).
#[derive(Debug)]
pub struct Planted(());

impl Drop for Planted {
    fn drop(&mut self) {
        PLANTED.with(|p| p.set(None));
    }
}

/// Whether `bug` is planted on this thread.
pub(crate) fn active(bug: Bug) -> bool {
    PLANTED.with(|p| p.get() == Some(bug))
}
