//! Completion queues (IBA §11.4.2): a bounded queue of work completions. Overflow puts the CQ
//! in error and raises the CQ error async event (IBA §11.6.3.1), as hardware does.

use std::collections::VecDeque;

use crate::verbs::WorkCompletion;

/// A completion queue.
#[derive(Debug, Clone)]
pub struct Cq {
    entries: VecDeque<WorkCompletion>,
    capacity: usize,
    overflowed: bool,
    /// `Some(solicited_only)` when `req_notify_cq` armed the CQ.
    armed: Option<bool>,
}

/// What pushing a completion did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Queued.
    Queued {
        /// The CQ was armed and this completion fires a completion event.
        notify: bool,
    },
    /// The CQ just overflowed: the completion is lost and the CQ is in error.
    Overflowed,
    /// The CQ was already in error; the completion is lost.
    InError,
}

impl Cq {
    /// A CQ holding at most `capacity` completions. Its storage grows with what it holds: a
    /// deep CQ that is never used costs nothing (reserving the depth up front would let one
    /// client's share of CQs at the largest depth reserve 800 MB of the daemon's memory).
    pub fn new(capacity: usize) -> Cq {
        Cq {
            entries: VecDeque::new(),
            capacity,
            overflowed: false,
            armed: None,
        }
    }

    /// Adds a completion. `solicited` says whether it is a receive of a solicited message.
    pub fn push(&mut self, wc: WorkCompletion, solicited: bool) -> Pushed {
        if self.overflowed {
            return Pushed::InError;
        }
        if self.entries.len() >= self.capacity {
            self.overflowed = true;
            return Pushed::Overflowed;
        }
        self.entries.push_back(wc);
        let notify = match self.armed {
            Some(solicited_only) => {
                let fire =
                    !solicited_only || solicited || wc.status != crate::verbs::WcStatus::Success;
                if fire {
                    self.armed = None;
                }
                fire
            }
            None => false,
        };
        Pushed::Queued { notify }
    }

    /// Takes the oldest completion.
    pub fn pop(&mut self) -> Option<WorkCompletion> {
        self.entries.pop_front()
    }

    /// Arms the CQ: the next completion (or the next solicited one) fires a completion event.
    pub fn req_notify(&mut self, solicited_only: bool) {
        self.armed = Some(solicited_only);
    }

    /// The number of completions waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no completion waits.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether the CQ overflowed.
    pub fn is_in_error(&self) -> bool {
        self.overflowed
    }

    /// The capacity.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}
