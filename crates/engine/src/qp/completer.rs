//! The completer (IBA §9.7.5.1–9.7.6, rxe's `rxe_comp.c`): matches acknowledgements, NAKs,
//! READ responses and atomic acknowledgements to send WQEs, retransmits on timeout, sequence
//! error and RNR NAK (go-back-N), and retires WQEs in order with their completions.

use softib_wire::aeth::{NakCode, Syndrome};
use softib_wire::opcode::Kind;
use softib_wire::packet::TransportRepr;
use softib_wire::{Position, Psn};

use super::Qp;
use crate::counters::DropReason;
use crate::invariant::{ensure, Broken};
use crate::memory::Memory;
use crate::res::Resources;
use crate::time::Instant;
use crate::verbs::{QpState, QpType, SendFlags, WcStatus, WorkCompletion};

use super::requester::{position, rnr_wait};

/// `vendor_err` values that say why an error completion happened (softib's own codes).
pub mod vendor_err {
    /// The responder answered with a NAK (the low byte holds the AETH syndrome).
    pub const NAK: u32 = 0x100;
    /// Retries exhausted after local ACK timeouts.
    pub const TIMEOUT: u32 = 0x200;
    /// Retries exhausted after PSN sequence errors or lost READ responses.
    pub const SEQUENCE: u32 = 0x300;
    /// A response of the wrong kind or length.
    pub const BAD_RESPONSE: u32 = 0x400;
    /// The payload of a request could not be read from local memory when its packet left
    /// (the memory under the region went away after the checks).
    pub const LOCAL_READ: u32 = 0x500;
}

impl Qp {
    /// Handles a response packet (ACK, NAK, READ response, atomic ACK) for this QP's requester.
    pub(crate) fn completer_handle<M: Memory>(
        &mut self,
        now: Instant,
        res: &mut Resources<M>,
        t: &TransportRepr,
        payload: &[u8],
    ) {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            res.drop_packet(DropReason::QpNotReceiving);
            return;
        }
        let psn = t.bth.psn;
        // A response beyond every PSN handed out is a ghost; one before everything unacknowledged
        // is stale. (Not "beyond what is sent now": after a rewind, responses to what was sent
        // before it still count.)
        if psn.diff(self.sq.next_psn()) >= 0
            || self.sq.oldest_unacked().is_none_or(|u| psn.diff(u) < 0)
        {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        }
        let Some(info) = t.bth.opcode.info() else {
            res.drop_packet(DropReason::UnsupportedOpcode);
            return;
        };
        let before = self.sq.progress_mark();
        match info.kind {
            Kind::Acknowledge => {
                let Some(aeth) = t.aeth else { return };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => self.ack_through(psn, res),
                    Syndrome::RnrNak { timer } => {
                        self.ack_through(psn.sub(1), res);
                        if self.state != QpState::Rts && self.state != QpState::Sqd {
                            return;
                        }
                        let infinite = self.attr.rnr_retry == 7;
                        if !self.sq.use_rnr_retry(infinite) {
                            self.fail_at(
                                psn,
                                WcStatus::RnrRetryExcErr,
                                vendor_err::NAK | u32::from(u8::from(aeth.syndrome)),
                                res,
                            );
                            return;
                        }
                        self.sq.rewind(psn);
                        self.sq.start_rnr_wait(now + rnr_wait(timer));
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        self.ack_through(psn.sub(1), res);
                        if self.state != QpState::Rts && self.state != QpState::Sqd {
                            return;
                        }
                        self.retry_from(psn, vendor_err::SEQUENCE, res);
                    }
                    Syndrome::Nak(code) => {
                        self.ack_through(psn.sub(1), res);
                        let status = match code {
                            NakCode::InvalidRequest => WcStatus::RemInvReqErr,
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::InvalidRdRequest => WcStatus::RemInvRdReqErr,
                            _ => WcStatus::RemOpErr,
                        };
                        self.fail_at(
                            psn,
                            status,
                            vendor_err::NAK | u32::from(u8::from(aeth.syndrome)),
                            res,
                        );
                        return;
                    }
                    Syndrome::Reserved(_) => {
                        res.drop_packet(DropReason::Malformed);
                        return;
                    }
                }
            }
            Kind::RdmaReadResponse => self.read_response(psn, t, info.position, payload, res),
            Kind::AtomicAcknowledge => self.atomic_ack(psn, t, res),
            _ => {
                res.drop_packet(DropReason::WrongTransport);
                return;
            }
        }
        if self.state == QpState::Err {
            return;
        }
        if self.sq.progress_mark() != before {
            // Forward progress resets the retry counters (IBA §9.7.6.1.3) and restarts the timer.
            self.sq
                .reset_retries(self.attr.retry_cnt, self.attr.rnr_retry);
            self.sq.on_progress(res.transport.max_unacked_psns);
        }
        self.retire(res);
        self.sq.rearm_retransmit(now, self.attr.timeout);
    }

    /// Every PSN up to and including `psn` is acknowledged (an ACK, or implied by a NAK or a
    /// response); an unfinished READ or atomic it passes is retried (the implied NAK).
    fn ack_through<M: Memory>(&mut self, psn: Psn, res: &mut Resources<M>) {
        if let Some(at) = self.sq.ack_through(psn) {
            self.retry_from(at, vendor_err::SEQUENCE, res);
        }
    }

    /// Go-back-N from `psn`, counting one retry; fails the WQE when retries are exhausted.
    fn retry_from<M: Memory>(&mut self, psn: Psn, why: u32, res: &mut Resources<M>) {
        if !self.sq.use_retry() {
            self.fail_at(psn, WcStatus::RetryExcErr, why, res);
            return;
        }
        self.sq.on_loss(res.transport.max_unacked_psns);
        self.sq.rewind(psn);
    }

    /// Completes the WQE holding `psn` with an error and moves the QP to the error state.
    fn fail_at<M: Memory>(
        &mut self,
        psn: Psn,
        status: WcStatus,
        vendor: u32,
        res: &mut Resources<M>,
    ) {
        let i = self
            .sq
            .iter()
            .position(|w| {
                w.status().is_none()
                    && (w.contains(psn) || w.first_psn().is_none_or(|f| psn.diff(f) < 0))
            })
            .or_else(|| self.sq.iter().position(|w| w.status().is_none()));
        match i {
            Some(i) => self.fail_wqe(i, status, vendor, res),
            None => self.enter_error(res, None),
        }
    }

    /// The payload of request packet `psn` could not be read from local memory: its WQE
    /// completes with a local protection error, as a requester's gather does.
    pub(crate) fn local_read_failed<M: Memory>(&mut self, psn: Psn, res: &mut Resources<M>) {
        self.fail_at(psn, WcStatus::LocProtErr, vendor_err::LOCAL_READ, res);
    }

    /// Completes WQE `i` with an error status and moves the QP to the error state (RC) or
    /// send queue error state (UC, UD), flushing what follows.
    pub(crate) fn fail_wqe<M: Memory>(
        &mut self,
        i: usize,
        status: WcStatus,
        vendor: u32,
        res: &mut Resources<M>,
    ) {
        self.sq.finish(i, status, vendor);
        match self.qp_type() {
            crate::verbs::QpType::Rc => self.enter_error(res, None),
            _ => self.enter_sq_error(res),
        }
    }

    fn read_response<M: Memory>(
        &mut self,
        psn: Psn,
        t: &TransportRepr,
        pos: Position,
        payload: &[u8],
        res: &mut Resources<M>,
    ) {
        // A response implicitly acknowledges every earlier PSN.
        self.ack_through(psn.sub(1), res);
        if self.state == QpState::Err {
            return;
        }
        let pd = self.init.pd;
        let Some(i) = self
            .sq
            .iter()
            .position(|w| w.status().is_none() && w.contains(psn))
        else {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        };
        let w = self.sq.wqe(i);
        if !w.is_read() {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        }
        let Some(first) = w.first_psn() else { return };
        let k = psn.diff(first) as u32;
        if k != w.acked() {
            // A gap: an earlier response was lost. Drop; the timer or a retry recovers.
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        }
        // After a partial retry the responses may belong to the original response message or
        // to the one the retry asked for: both are correct data at this PSN.
        let retried = position(k - w.read_restart(), w.npkts() - w.read_restart());
        let original = position(k, w.npkts());
        // Each response carries the READ's segment: the path MTU, or the large in-process
        // segment the READ asked for (see `requester_poll`).
        let seg = w.seg().max(1);
        let offset = u64::from(k) * u64::from(seg);
        let len = u64::from(w.len());
        let want = (len - offset.min(len)).min(u64::from(seg)) as usize;
        if (pos != retried && pos != original)
            || payload.len() != want
            || (pos != Position::Middle && t.aeth.is_none())
        {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        }
        // `res` and the QP are separate borrows: no copy of the SGE list per packet.
        if let Err(e) = res.scatter(pd, &self.sq.wqe(i).wr().sg_list, offset, payload) {
            let status = match e {
                crate::res::ScatterError::TooLong => WcStatus::LocLenErr,
                crate::res::ScatterError::Protection => WcStatus::LocProtErr,
            };
            self.fail_wqe(i, status, 0, res);
            return;
        }
        self.sq.record_read_response(i);
    }

    fn atomic_ack<M: Memory>(&mut self, psn: Psn, t: &TransportRepr, res: &mut Resources<M>) {
        self.ack_through(psn.sub(1), res);
        if self.state == QpState::Err {
            return;
        }
        let pd = self.init.pd;
        let Some(i) = self
            .sq
            .iter()
            .position(|w| w.status().is_none() && w.contains(psn))
        else {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        };
        let (Some(ack), true) = (t.atomic_ack_eth, self.sq.wqe(i).is_atomic()) else {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        };
        if let Err(e) = res.scatter(pd, &self.sq.wqe(i).wr().sg_list, 0, &ack.orig.to_le_bytes()) {
            let status = match e {
                crate::res::ScatterError::TooLong => WcStatus::LocLenErr,
                crate::res::ScatterError::Protection => WcStatus::LocProtErr,
            };
            self.fail_wqe(i, status, 0, res);
            return;
        }
        self.sq.record_atomic_ack(i);
    }

    /// The local ACK timer or the RNR timer fired.
    pub(crate) fn completer_timeout<M: Memory>(&mut self, now: Instant, res: &mut Resources<M>) {
        if self.sq.rnr_wait_over(now) {
            // The requester may resend from where the RNR NAK rewound it. PSNs before that
            // may still be unacknowledged (the NAK's implied acknowledgement stops at a READ
            // whose responses were still missing, and a later ACK can be lost): the ACK timer,
            // stopped while the RNR wait ran, must run again, or a requester its window holds
            // back waits forever (simulator seed 300898).
            self.sq.resume_retransmit(now, self.attr.timeout);
        }
        if self.sq.retransmit_due(now) {
            if let Some(una) = self.sq.una() {
                if !self.sq.use_retry() {
                    self.fail_at(una, WcStatus::RetryExcErr, vendor_err::TIMEOUT, res);
                    return;
                }
                self.sq.on_loss(res.transport.max_unacked_psns);
                self.sq.rewind(una);
            }
        }
    }

    /// The completer's invariants: finished WQEs are retired at once and in order, a WQE with
    /// every PSN acknowledged is finished, and the timers run exactly when work is
    /// outstanding — the local ACK timer while transmitted PSNs are unacknowledged (unless
    /// the timeout is infinite or an RNR wait holds the requester back), the RNR timer only
    /// during an RNR wait, neither on a QP that cannot send.
    pub(crate) fn check_completer(&self) -> Result<(), Broken> {
        let sq = &self.sq;
        if let Some(w) = sq.iter().next() {
            ensure!(
                w.status().is_none(),
                "finished WQEs are retired at once, in posting order: the oldest is unfinished",
                "the oldest WQE has status {:?}",
                w.status()
            );
        }
        // Whether transmitted PSNs are unacknowledged (`SendQueue::has_outstanding`, found
        // in the same pass). UC and UD are unacknowledged: what they sent is never outstanding.
        let mut outstanding = false;
        for (i, w) in sq.iter().enumerate() {
            if w.status().is_none() && w.first_psn().is_some() {
                ensure!(
                    w.acked() < w.npkts(),
                    "a WQE whose every PSN is acknowledged (or answered) is finished",
                    "WQE {i}: acked {} of npkts {}, no status",
                    w.acked(),
                    w.npkts()
                );
                ensure!(
                    w.sent() <= w.sent_max() && w.sent_max() <= w.npkts(),
                    "what an acknowledgement may reach (the most PSNs ever sent) is at least what is sent now, at most the WQE",
                    "WQE {i}: sent {}, most ever sent {}, npkts {}",
                    w.sent(),
                    w.sent_max(),
                    w.npkts()
                );
                outstanding |= w.acked() < w.sent();
            }
        }
        let outstanding = outstanding && self.qp_type() == QpType::Rc;
        let retransmit_at = sq.retransmit_at();
        let rnr_until = sq.rnr_until();
        if retransmit_at.is_some() || rnr_until.is_some() {
            ensure!(
                self.qp_type() == QpType::Rc && matches!(self.state, QpState::Rts | QpState::Sqd),
                "only an RC QP in RTS or SQD runs the local ACK or RNR timer",
                "retransmit_at {retransmit_at:?}, rnr_until {rnr_until:?}"
            );
        }
        ensure!(
            retransmit_at.is_none() || outstanding,
            "the local ACK timer runs only while transmitted PSNs are unacknowledged",
            "retransmit_at {retransmit_at:?} with nothing outstanding"
        );
        ensure!(
            rnr_until.is_none() || retransmit_at.is_none(),
            "an RNR wait stops the local ACK timer (it runs again when the wait ends)",
            "rnr_until {rnr_until:?}, retransmit_at {retransmit_at:?}"
        );
        // What the timer times is the oldest transmitted, unacknowledged PSN (`una`). There is
        // none to time while a WQE before every outstanding one has PSNs to send again (a
        // rewind held back by an unanswered READ leaves that): the requester sends those
        // first, and sending starts the timer.
        let una = if outstanding { sq.una() } else { None };
        let finite = crate::time::Duration::local_ack_timeout(self.attr.timeout).is_some();
        if let (Some(una), None, true) = (una, rnr_until, finite) {
            ensure!(
                retransmit_at.is_some(),
                "while a transmitted PSN awaits its acknowledgement and no RNR wait runs, the local ACK timer runs",
                "PSN {una} unacknowledged, timeout {}, no timer",
                self.attr.timeout
            );
        }
        Ok(())
    }

    /// Retires finished WQEs from the head of the send queue, in order, with their
    /// completions: successful ones only if signaled, errors always (IBA §10.7.3.1).
    pub(crate) fn retire<M: Memory>(&mut self, res: &mut Resources<M>) {
        while let Some(w) = self.sq.pop_finished() {
            let Some(status) = w.status() else { break };
            let signaled = w.signaled() || w.wr().flags.contains(SendFlags::SIGNALED);
            if status != WcStatus::Success || signaled {
                let wc = WorkCompletion {
                    wr_id: w.wr().wr_id,
                    status,
                    opcode: w.wr().opcode.wc_opcode(),
                    vendor_err: w.vendor_err(),
                    byte_len: w.len(),
                    imm_data: None,
                    invalidated_rkey: None,
                    qp_num: self.qpn,
                    src_qp: self.qpn,
                    grh: false,
                    slid: softib_wire::Lid(0),
                    sl: 0,
                    pkey_index: self.attr.pkey_index,
                };
                res.complete(self.init.send_cq, wc, false);
            }
        }
    }
}
