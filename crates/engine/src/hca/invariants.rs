//! The HCA's invariants (see `crate::invariant`): every QP's, and those of the HCA's own
//! bookkeeping — the timer set holds, per QP, a time no later than its earliest deadline
//! (and nothing else), and every QP marked scheduled is in the transmit schedule.

use softib_wire::Qpn;

use super::Hca;
use crate::invariant::{Broken, InvariantViolation};
use crate::memory::Memory;
use crate::qp::Qp;

impl<M: Memory> Hca<M> {
    /// Checks every invariant of every QP and of the HCA's timer set and transmit schedule;
    /// returns the first that is broken (of the lowest-numbered QP that breaks one). What it
    /// reports is a bug in the engine. The simulator calls it after every step of a run;
    /// debug builds check each QP an input or command touched as they go (and panic),
    /// release builds of the daemon never check.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        // The table's order first, which costs nothing; QPN order to report.
        if self.qps.keys().any(|&qpn| self.check_qp(qpn).is_err()) {
            for qpn in self.qpns() {
                self.check_qp(qpn)?;
            }
        }
        for &(t, qpn) in &self.timers {
            let Some(qp) = self.qps.get(&qpn) else {
                // It would fire for nothing and keep an idle HCA awake.
                return Err(InvariantViolation {
                    qpn,
                    qp: None,
                    role: "HCA",
                    invariant: "the timer set holds times only for QPs that exist",
                    detail: format!("{t} for a QP that was destroyed"),
                    state: String::from("none"),
                });
            };
            check_hca(
                qp,
                qp.armed == Some(t),
                "the timer set holds one time per QP, the one the QP was armed with",
                || {
                    format!(
                        "the set holds {t} for it, the QP was armed at {:?}",
                        qp.armed
                    )
                },
            )?;
        }
        // The schedule is short between turns (`poll_transmit` empties it): a scan is cheap.
        for (&qpn, qp) in &self.qps {
            check_hca(
                qp,
                !qp.scheduled || self.schedule.contains(&qpn),
                "a QP marked scheduled is in the transmit schedule",
                || String::from("marked scheduled, not in the schedule"),
            )?;
        }
        Ok(())
    }

    /// Checks one QP's invariants and its entry in the timer set.
    pub(super) fn check_qp(&self, qpn: Qpn) -> Result<(), InvariantViolation> {
        let Some(qp) = self.qps.get(&qpn) else {
            return Ok(());
        };
        qp.check_invariants(&self.res.transport)?;
        let ok = match (qp.deadline(), qp.armed) {
            (None, None) => true,
            (Some(deadline), Some(armed)) => {
                armed <= deadline && self.timers.contains(&(armed, qpn))
            }
            _ => false,
        };
        check_hca(
            qp,
            ok,
            "the timer set holds, per QP with a deadline, a time no later than it (and none for a QP without)",
            || {
                format!(
                    "deadline {:?}, armed {:?}, in the set: {}",
                    qp.deadline(),
                    qp.armed,
                    qp.armed.is_some_and(|a| self.timers.contains(&(a, qpn)))
                )
            },
        )
    }

    /// In a debug build, checks a QP an input or command just touched, and panics if an
    /// invariant is broken (a bug in the engine: the report says which rule and the state).
    pub(super) fn debug_check_qp(&self, qpn: Qpn) {
        if cfg!(debug_assertions) {
            if let Err(v) = self.check_qp(qpn) {
                panic!("softib-engine: {v}");
            }
        }
    }
}

/// The HCA's own rule about `qp`, as an [`InvariantViolation`] when it does not hold.
fn check_hca(
    qp: &Qp,
    ok: bool,
    invariant: &'static str,
    detail: impl FnOnce() -> String,
) -> Result<(), InvariantViolation> {
    if ok {
        return Ok(());
    }
    Err(InvariantViolation::new(
        qp,
        "HCA",
        Broken {
            invariant,
            detail: detail(),
        },
    ))
}
