//! Engine invariants in TigerBeetle's manner: each transport role states what must hold of its
//! own state after every step — not what a test expects to see, but what the protocol and the
//! code's own data structures require (a PSN chain without gaps, a timer running exactly when
//! work is outstanding, responder resources behind ePSN) — and a broken one is reported with
//! the rule, the values that break it and the QP's whole state.
//!
//! The rules live beside the state they constrain: `Qp::check_requester` (requester.rs),
//! `Qp::check_completer` (completer.rs), `Qp::check_responder` (responder.rs), the queue-pair
//! ones in `Qp::check_invariants` (qp/mod.rs) and the HCA's timer set and transmit schedule
//! in `hca/invariants.rs`. [`crate::Hca::check_invariants`] checks them all; a debug build
//! checks every QP an input or command touched, after it (and panics: a broken invariant is
//! a bug), and the simulator checks the whole HCA after every step of a run, in any build.
//! A release build of the daemon checks nothing.

use core::fmt;

use softib_wire::{Psn, Qpn};

use crate::verbs::{QpState, QpType};

/// Half the PSN space, 2^23: the *valid region* (IBA §9.7.1). A send queue never has more
/// PSNs outstanding than this (its requests, and the responses its READs expect), so that a
/// responder can tell a duplicate (behind ePSN, within 2^23) from a request ahead of it.
pub(crate) const PSN_WINDOW: u32 = 1 << 23;

/// How far `psn` lies behind `later`, going forward from `psn` (0 when they are equal; more
/// than [`PSN_WINDOW`] when `psn` is really ahead).
pub(crate) fn behind(psn: Psn, later: Psn) -> u32 {
    later.value().wrapping_sub(psn.value()) & Psn::MAX
}

/// A rule that does not hold: the rule, and the values that break it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Broken {
    pub invariant: &'static str,
    pub detail: String,
}

/// `ensure!(condition, "the rule", "format", args...)`: returns a [`Broken`] from the
/// enclosing function when the condition is false (the detail is formatted only then).
macro_rules! ensure {
    ($cond:expr, $invariant:expr, $($detail:tt)+) => {
        if !$cond {
            return Err($crate::invariant::Broken {
                invariant: $invariant,
                detail: format!($($detail)+),
            });
        }
    };
}
pub(crate) use ensure;

/// A broken engine invariant: the QP, which role's rule, the values that break it and the
/// QP's state. It is a bug in the engine, never a fault of the peer or the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The QP whose state breaks the rule.
    pub qpn: Qpn,
    /// Its transport and state (`None`: the HCA holds something for a QP that does not exist).
    pub qp: Option<(QpType, QpState)>,
    /// Whose rule: `requester`, `completer`, `responder`, `queue pair` or `HCA`.
    pub role: &'static str,
    /// The rule, as a sentence.
    pub invariant: &'static str,
    /// The values that break it.
    pub detail: String,
    /// The QP's send queue and responder, in short.
    pub state: String,
}

impl InvariantViolation {
    pub(crate) fn new(qp: &crate::qp::Qp, role: &'static str, b: Broken) -> InvariantViolation {
        InvariantViolation {
            qpn: qp.qpn,
            qp: Some((qp.qp_type(), qp.state)),
            role,
            invariant: b.invariant,
            detail: b.detail,
            state: qp.state_summary(),
        }
    }
}

impl fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "QP {} ", self.qpn)?;
        match self.qp {
            Some((qp_type, state)) => write!(f, "({qp_type} in {state})")?,
            None => f.write_str("(destroyed)")?,
        }
        write!(
            f,
            ": {} invariant broken: {} ({}); state: {}",
            self.role, self.invariant, self.detail, self.state
        )
    }
}

impl std::error::Error for InvariantViolation {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behind_counts_forward_across_the_wrap() {
        assert_eq!(behind(Psn::new(5), Psn::new(5)), 0);
        assert_eq!(behind(Psn::new(Psn::MAX), Psn::new(1)), 2);
        assert_eq!(behind(Psn::new(1), Psn::new(0)), Psn::MAX);
        assert_eq!(behind(Psn::new(0), Psn::new(PSN_WINDOW)), PSN_WINDOW);
    }
}
