//! The completer (IBA §9.7.5.1–9.7.6, rxe's `rxe_comp.c`): matches acknowledgements, NAKs,
//! READ responses and atomic acknowledgements to send WQEs, retransmits on timeout, sequence
//! error and RNR NAK (go-back-N), and retires WQEs in order with their completions.

use softib_wire::aeth::{NakCode, Syndrome};
use softib_wire::opcode::Kind;
use softib_wire::packet::TransportRepr;
use softib_wire::{Position, Psn};

use super::Qp;
use crate::counters::DropReason;
use crate::memory::Memory;
use crate::res::Resources;
use crate::time::{Duration, Instant};
use crate::verbs::{QpState, SendFlags, WcStatus, WorkCompletion};

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
}

impl Qp {
    /// The oldest PSN not yet acknowledged (the first unfinished WQE's next unacknowledged
    /// PSN), whether or not a rewind has taken the requester back before it.
    fn oldest_unacked(&self) -> Option<Psn> {
        let w = self.sq.wqes.iter().find(|w| w.status.is_none())?;
        w.first_psn.map(|f| f.add(w.acked))
    }

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
        if psn.diff(self.sq.next_psn) >= 0 || self.oldest_unacked().is_none_or(|u| psn.diff(u) < 0)
        {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        }
        let Some(info) = t.bth.opcode.info() else {
            res.drop_packet(DropReason::UnsupportedOpcode);
            return;
        };
        let before = self.progress_mark();
        match info.kind {
            Kind::Acknowledge => {
                let Some(aeth) = t.aeth else { return };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => self.ack_through(psn, now, res),
                    Syndrome::RnrNak { timer } => {
                        self.ack_through(psn.sub(1), now, res);
                        if self.state != QpState::Rts && self.state != QpState::Sqd {
                            return;
                        }
                        let infinite = self.attr.rnr_retry == 7;
                        if !infinite && self.sq.rnr_retry_left == 0 {
                            self.fail_at(
                                psn,
                                WcStatus::RnrRetryExcErr,
                                vendor_err::NAK | u32::from(u8::from(aeth.syndrome)),
                                res,
                            );
                            return;
                        }
                        if !infinite {
                            self.sq.rnr_retry_left -= 1;
                        }
                        self.rewind(psn);
                        self.sq.rnr_until = Some(now + rnr_wait(timer));
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        self.ack_through(psn.sub(1), now, res);
                        if self.state != QpState::Rts && self.state != QpState::Sqd {
                            return;
                        }
                        self.retry_from(psn, vendor_err::SEQUENCE, res);
                    }
                    Syndrome::Nak(code) => {
                        self.ack_through(psn.sub(1), now, res);
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
            Kind::RdmaReadResponse => self.read_response(psn, t, info.position, payload, now, res),
            Kind::AtomicAcknowledge => self.atomic_ack(psn, t, now, res),
            _ => {
                res.drop_packet(DropReason::WrongTransport);
                return;
            }
        }
        if self.state == QpState::Err {
            return;
        }
        if self.progress_mark() != before {
            // Forward progress resets the retry counters (IBA §9.7.6.1.3) and restarts the timer.
            self.sq.retry_left = self.attr.retry_cnt;
            self.sq.rnr_retry_left = self.attr.rnr_retry;
            self.sq.on_progress(res.transport.max_unacked_psns);
        }
        self.retire(res);
        self.rearm_retransmit(now);
    }

    /// A number that grows whenever an acknowledgement makes progress: every packet newly
    /// acknowledged and every WQE newly completed counts (it used to be summed over the whole
    /// send queue per response, linear in its depth).
    fn progress_mark(&self) -> u64 {
        self.sq.progress + self.sq.completed_count
    }

    /// Restarts the local ACK timer while PSNs are outstanding, stops it otherwise.
    fn rearm_retransmit(&mut self, now: Instant) {
        self.sq.retransmit_at = if self.sq.has_outstanding() && self.sq.rnr_until.is_none() {
            Duration::local_ack_timeout(self.attr.timeout).map(|d| now + d)
        } else {
            None
        };
    }

    /// Every PSN up to and including `psn` is acknowledged (an ACK, or implied by a NAK or a
    /// response). READs and atomics complete only with their data: an acknowledgement that
    /// passes an unfinished one means its responses were lost, so it is retried (IBA
    /// §9.7.5.1.2, "implied NAK").
    fn ack_through<M: Memory>(&mut self, psn: Psn, _now: Instant, res: &mut Resources<M>) {
        let mut retry_at = None;
        for w in self.sq.wqes.iter_mut() {
            if w.status.is_some() {
                continue;
            }
            let Some(first) = w.first_psn else { break };
            if psn.diff(first) < 0 {
                break;
            }
            let last = first.add(w.npkts - 1);
            if w.is_read_or_atomic() {
                // Only while its request is out: after a rewind, further (duplicate)
                // acknowledgements must not cost another retry each.
                if psn.diff(last) >= 0 && w.acked < w.npkts && w.sent == w.npkts {
                    retry_at = Some(first.add(w.acked));
                }
                break;
            }
            let n = (psn.diff(first) + 1).min(w.npkts as i32) as u32;
            let n = n.min(w.sent);
            if n > w.acked {
                self.sq.progress += u64::from(n - w.acked);
                w.acked = n;
            }
            if w.acked == w.npkts {
                w.status = Some(WcStatus::Success);
                self.sq.progress += 1;
            }
            if psn.diff(last) < 0 {
                break;
            }
        }
        if let Some(at) = retry_at {
            self.retry_from(at, vendor_err::SEQUENCE, res);
        }
    }

    /// Go-back-N from `psn`, counting one retry; fails the WQE when retries are exhausted.
    fn retry_from<M: Memory>(&mut self, psn: Psn, why: u32, res: &mut Resources<M>) {
        if self.sq.retry_left == 0 {
            self.fail_at(psn, WcStatus::RetryExcErr, why, res);
            return;
        }
        self.sq.retry_left -= 1;
        self.sq.on_loss(res.transport.max_unacked_psns);
        self.rewind(psn);
    }

    /// Moves the requester back so that the next packet sent has PSN `psn`.
    pub(crate) fn rewind(&mut self, psn: Psn) {
        self.sq.sent_prefix.set(0);
        let mut found = false;
        for w in self.sq.wqes.iter_mut() {
            if w.status.is_some() {
                continue;
            }
            let Some(first) = w.first_psn else { break };
            if !found {
                if w.contains(psn) {
                    found = true;
                    w.sent = if w.is_read_or_atomic() {
                        w.acked
                    } else {
                        (psn.diff(first) as u32).max(w.acked)
                    };
                } else if psn.diff(first) < 0 {
                    found = true;
                    w.sent = w.acked;
                }
            } else {
                w.sent = w.acked;
            }
        }
        self.sq.retransmit_at = None;
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
            .wqes
            .iter()
            .position(|w| {
                w.status.is_none()
                    && (w.contains(psn) || w.first_psn.is_none_or(|f| psn.diff(f) < 0))
            })
            .or_else(|| self.sq.wqes.iter().position(|w| w.status.is_none()));
        match i {
            Some(i) => self.fail_wqe(i, status, vendor, res),
            None => self.enter_error(res, None),
        }
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
        if let Some(w) = self.sq.wqes.get_mut(i) {
            w.status = Some(status);
            w.vendor_err = vendor;
        }
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
        now: Instant,
        res: &mut Resources<M>,
    ) {
        // A response implicitly acknowledges every earlier PSN.
        self.ack_through(psn.sub(1), now, res);
        if self.state == QpState::Err {
            return;
        }
        let pd = self.init.pd;
        let Some(i) = self
            .sq
            .wqes
            .iter()
            .position(|w| w.status.is_none() && w.contains(psn))
        else {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        };
        let w = &self.sq.wqes[i];
        if !w.is_read() {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        }
        let Some(first) = w.first_psn else { return };
        let k = psn.diff(first) as u32;
        if k != w.acked {
            // A gap: an earlier response was lost. Drop; the timer or a retry recovers.
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        }
        // After a partial retry the responses may belong to the original response message or
        // to the one the retry asked for: both are correct data at this PSN.
        let retried = position(k - w.read_restart, w.npkts - w.read_restart);
        let original = position(k, w.npkts);
        // Each response carries the READ's segment: the path MTU, or the large in-process
        // segment the READ asked for (see `requester_poll`).
        let seg = w.seg.max(1);
        let offset = u64::from(k) * u64::from(seg);
        let want = (u64::from(w.len) - offset.min(u64::from(w.len))).min(u64::from(seg)) as usize;
        if (pos != retried && pos != original)
            || payload.len() != want
            || (pos != Position::Middle && t.aeth.is_none())
        {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        }
        // `res` and the QP are separate borrows: no copy of the SGE list per packet.
        if let Err(e) = res.scatter(pd, &self.sq.wqes[i].wr.sg_list, offset, payload) {
            let status = match e {
                crate::res::ScatterError::TooLong => WcStatus::LocLenErr,
                crate::res::ScatterError::Protection => WcStatus::LocProtErr,
            };
            self.fail_wqe(i, status, 0, res);
            return;
        }
        let w = &mut self.sq.wqes[i];
        w.acked += 1;
        self.sq.progress += 1;
        if w.acked == w.npkts {
            w.status = Some(WcStatus::Success);
            self.sq.progress += 1;
        }
    }

    fn atomic_ack<M: Memory>(
        &mut self,
        psn: Psn,
        t: &TransportRepr,
        now: Instant,
        res: &mut Resources<M>,
    ) {
        self.ack_through(psn.sub(1), now, res);
        if self.state == QpState::Err {
            return;
        }
        let pd = self.init.pd;
        let Some(i) = self
            .sq
            .wqes
            .iter()
            .position(|w| w.status.is_none() && w.contains(psn))
        else {
            res.drop_packet(DropReason::RcUnexpectedResponse);
            return;
        };
        let (Some(ack), true) = (
            t.atomic_ack_eth,
            self.sq.wqes[i].is_read_or_atomic() && !self.sq.wqes[i].is_read(),
        ) else {
            self.fail_wqe(i, WcStatus::BadRespErr, vendor_err::BAD_RESPONSE, res);
            return;
        };
        if let Err(e) = res.scatter(pd, &self.sq.wqes[i].wr.sg_list, 0, &ack.orig.to_le_bytes()) {
            let status = match e {
                crate::res::ScatterError::TooLong => WcStatus::LocLenErr,
                crate::res::ScatterError::Protection => WcStatus::LocProtErr,
            };
            self.fail_wqe(i, status, 0, res);
            return;
        }
        let w = &mut self.sq.wqes[i];
        w.acked = 1;
        w.status = Some(WcStatus::Success);
        self.sq.progress += 2;
    }

    /// The local ACK timer or the RNR timer fired.
    pub(crate) fn completer_timeout<M: Memory>(&mut self, now: Instant, res: &mut Resources<M>) {
        if self.sq.rnr_until.is_some_and(|t| t <= now) {
            // The requester may resend from where the RNR NAK rewound it. PSNs before that
            // may still be unacknowledged (the NAK's implied acknowledgement stops at a READ
            // whose responses were still missing, and a later ACK can be lost): the ACK timer,
            // stopped while the RNR wait ran, must run again, or a requester its window holds
            // back waits forever (simulator seed 300898).
            self.sq.rnr_until = None;
            if self.sq.retransmit_at.is_none() {
                self.rearm_retransmit(now);
            }
        }
        if self.sq.retransmit_at.is_some_and(|t| t <= now) {
            self.sq.retransmit_at = None;
            if let Some(una) = self.sq.una() {
                if self.sq.retry_left == 0 {
                    self.fail_at(una, WcStatus::RetryExcErr, vendor_err::TIMEOUT, res);
                    return;
                }
                self.sq.retry_left -= 1;
                self.sq.on_loss(res.transport.max_unacked_psns);
                self.rewind(una);
            }
        }
    }

    /// Retires finished WQEs from the head of the send queue, in order, with their
    /// completions: successful ones only if signaled, errors always (IBA §10.7.3.1).
    pub(crate) fn retire<M: Memory>(&mut self, res: &mut Resources<M>) {
        while let Some(w) = self.sq.wqes.front() {
            let Some(status) = w.status else { break };
            let Some(w) = self.sq.wqes.pop_front() else {
                break;
            };
            let prefix = &self.sq.sent_prefix;
            prefix.set(prefix.get().saturating_sub(1));
            self.sq.completed_count += 1;
            let signaled = w.signaled || w.wr.flags.contains(SendFlags::SIGNALED);
            if status != WcStatus::Success || signaled {
                let wc = WorkCompletion {
                    wr_id: w.wr.wr_id,
                    status,
                    opcode: w.wr.opcode.wc_opcode(),
                    vendor_err: w.vendor_err,
                    byte_len: w.len,
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
