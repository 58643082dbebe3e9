//! The responder (IBA §9.7.5.2, rxe's `rxe_resp.c`): checks each incoming request (PSN,
//! opcode sequence, resources, length, R_Key), executes it (places SEND and WRITE data, reads
//! memory for READ, performs atomics once), completes receive WQEs, and answers (ACK, NAK,
//! READ responses, atomic ACKs) — for RC; UC and UD drop instead of answering.
//!
//! Outcomes follow the spec's error classes: a PSN ahead of the expected one gets one PSN
//! sequence error NAK (class B); a duplicate is re-acknowledged or replayed, never executed
//! again (C9-105 for SEND/WRITE, responder resources for READ and atomics); no receive WQE
//! gets an RNR NAK (class B); invalid requests, access violations and operational errors get
//! the matching NAK and move the QP to the error state (classes C to G).

use std::collections::VecDeque;

use softib_wire::aeth::{NakCode, Syndrome};
use softib_wire::opcode::Kind;
use softib_wire::packet::{pad_for, TransportRepr};
use softib_wire::{AethRepr, AtomicAckEthRepr, BthRepr, Opcode, Position, Psn};

use super::requester::{packets, rnr_syndrome};
use super::{ActiveRecv, Qp};
use crate::counters::DropReason;
use crate::invariant::{ensure, Broken};
use crate::memory::{AtomicOp, Memory, RegionId};
use crate::res::{Resources, ScatterError};
use crate::time::Instant;
use crate::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RecvWr, WcOpcode, WcStatus, WorkCompletion,
};
use crate::{PayloadRef, RxMeta, Transmit};

/// A message being received.
#[derive(Debug, Clone)]
pub(crate) enum InMessage {
    /// A SEND filling a receive WQE.
    Send(ActiveRecv),
    /// An RDMA WRITE: where the next byte goes and how many remain.
    Write {
        region: Option<RegionId>,
        va: u64,
        left: u32,
        total: u32,
    },
}

/// What the responder keeps of a READ or atomic to answer its duplicates (responder
/// resources, bounded by max_dest_rd_atomic).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resource {
    Read { first: Psn, npkts: u32 },
    Atomic { psn: Psn, orig: u64 },
}

/// A response waiting to be sent, in PSN order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response {
    /// ACK or NAK.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
    },
    /// READ response packets still to send, `seg` bytes each but the last.
    Read {
        psn: Psn,
        region: Option<RegionId>,
        va: u64,
        left: u32,
        started: bool,
        msn: u32,
        seg: u32,
    },
    /// The answer to an atomic.
    Atomic { psn: Psn, orig: u64, msn: u32 },
}

/// Why an RDMA WRITE packet could not be placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteFault {
    /// The R_Key check failed (key, PD, REMOTE_WRITE, bounds).
    Access,
    /// The packet does not fit the message (too long, a short LAST, no RETH, no WRITE open).
    Length,
    /// The memory could not be reached.
    Memory,
}

/// Responder state.
#[derive(Debug, Clone, Default)]
pub(crate) struct Responder {
    /// The PSN expected next.
    pub epsn: Psn,
    /// Message sequence number: messages completed (24 bits).
    pub msn: u32,
    /// The message being received.
    pub cur: Option<InMessage>,
    /// A PSN sequence error NAK was sent for the current gap (send it only once).
    pub nak_sent: bool,
    /// READ/atomic history for duplicates.
    pub resources: VecDeque<Resource>,
    /// Responses to send.
    pub outputs: VecDeque<Response>,
    /// UC: dropping packets until the next FIRST or ONLY.
    pub uc_dropping: bool,
}

impl Responder {
    /// Queues a response. A queued plain ACK that has not gone out yet is replaced by a later
    /// ACK or NAK (either acknowledges everything before its PSN); NAKs are never replaced.
    fn push(&mut self, r: Response) {
        let queued_plain_ack = matches!(
            self.outputs.back(),
            Some(Response::Ack {
                syndrome: Syndrome::Ack { .. },
                ..
            })
        );
        if matches!(r, Response::Ack { .. }) && queued_plain_ack {
            self.outputs.pop_back();
        }
        self.outputs.push_back(r);
    }

    fn ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let msn = self.msn;
        self.push(Response::Ack { psn, syndrome, msn });
    }

    /// An RC request is accepted: `next` is expected next. A resource that falls out of the
    /// valid region behind it (IBA §9.7.1) can answer no legal duplicate any more — the
    /// requester retries only within it — and after the 24-bit wrap its PSNs would alias new
    /// ones: it is forgotten. Resources are in PSN order, so only the oldest can be out.
    #[inline]
    fn accept(&mut self, next: Psn) {
        self.epsn = next;
        while let Some(r) = self.resources.front() {
            if r.first().diff(next) < 0 {
                break;
            }
            self.resources.pop_front();
        }
    }

    /// Keeps at most `max_dest_rd_atomic` resources (at least one), dropping the oldest.
    pub(crate) fn limit_resources(&mut self, max_dest_rd_atomic: u8) {
        let cap = usize::from(max_dest_rd_atomic.max(1));
        while self.resources.len() > cap {
            self.resources.pop_front();
        }
    }
}

impl Resource {
    /// Its first PSN and how many PSNs it covers.
    #[inline]
    fn psns(&self) -> (Psn, u32) {
        match *self {
            Resource::Read { first, npkts } => (first, npkts),
            Resource::Atomic { psn, .. } => (psn, 1),
        }
    }

    #[inline]
    fn first(&self) -> Psn {
        self.psns().0
    }
}

const ACK: Syndrome = Syndrome::ACK_UNLIMITED_CREDIT;

impl Qp {
    /// Takes a receive WQE from the SRQ or the receive queue.
    fn take_recv<M: Memory>(&mut self, res: &mut Resources<M>) -> Option<ActiveRecv> {
        match self.init.srq {
            Some(srq) => res.srq_pop(srq).map(|wr| ActiveRecv {
                wr,
                offset: 0,
                from_srq: true,
            }),
            None => self.rq.pop_front().map(|wr| ActiveRecv {
                wr,
                offset: 0,
                from_srq: false,
            }),
        }
    }

    /// Whether a receive WQE is available.
    fn has_recv<M: Memory>(&self, res: &Resources<M>) -> bool {
        match self.init.srq {
            Some(srq) => res.srqs.get(&srq).is_some_and(|q| !q.wqes.is_empty()),
            None => !self.rq.is_empty(),
        }
    }

    /// Returns an unused receive WQE to the head of its queue (UC drops a message).
    fn untake_recv<M: Memory>(&mut self, r: ActiveRecv, res: &mut Resources<M>) {
        match (r.from_srq, self.init.srq) {
            (true, Some(srq)) => res.srq_unpop(srq, r.wr),
            _ => self.rq.push_front(r.wr),
        }
    }

    fn recv_completion(
        &self,
        wr: &RecvWr,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
    ) -> WorkCompletion {
        WorkCompletion {
            wr_id: wr.wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: self.qpn,
            src_qp: self.attr.dest_qp_num,
            grh: false,
            slid: self.attr.ah_attr.dlid,
            sl: self.attr.ah_attr.sl,
            pkey_index: self.attr.pkey_index,
        }
    }

    /// Handles a request packet addressed to this QP.
    pub(crate) fn responder_handle<M: Memory>(
        &mut self,
        now: Instant,
        res: &mut Resources<M>,
        meta: &RxMeta,
        t: &TransportRepr,
        payload: &[u8],
    ) {
        let _ = now;
        match self.qp_type() {
            QpType::Rc => self.rc_request(res, t, payload, meta.in_process),
            QpType::Uc => self.uc_request(res, t, payload),
            QpType::Ud => self.ud_request(res, meta, t, payload),
        }
    }

    /// Sends `code` as a NAK for `psn`, then moves the QP to the error state once it is out.
    fn nak_and_fail<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        psn: Psn,
        code: NakCode,
        event: AsyncEvent,
    ) {
        let msn = self.resp.msn;
        let nak = Response::Ack {
            psn,
            syndrome: Syndrome::Nak(code),
            msn,
        };
        res.events.push_back(event);
        self.enter_error(res, Some(nak));
    }

    fn rc_request<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        t: &TransportRepr,
        payload: &[u8],
        in_process: bool,
    ) {
        let psn = t.bth.psn;
        let Some(info) = t.bth.opcode.info() else {
            return;
        };
        let d = psn.diff(self.resp.epsn);
        if d > 0 {
            res.drop_packet(DropReason::RcOutOfSequence);
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                let epsn = self.resp.epsn;
                self.resp
                    .ack(epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return;
        }
        if d < 0 {
            let seg = read_segment(self.mtu(res), in_process);
            self.rc_duplicate(res, t, info.kind, seg);
            return;
        }
        self.resp.nak_sent = false;
        let qpn = self.qpn;
        let mtu = self.mtu(res) as usize;
        let pos = info.position;

        // Opcode sequence (IBA §9.7.5.2.3, class C: NAK invalid request).
        let in_send = matches!(self.resp.cur, Some(InMessage::Send(_)));
        let in_write = matches!(self.resp.cur, Some(InMessage::Write { .. }));
        let continues = matches!(pos, Position::Middle | Position::Last);
        let sequence_ok = match info.kind {
            Kind::Send => in_send == continues && !in_write,
            Kind::RdmaWrite => in_write == continues && !in_send,
            _ => !in_send && !in_write,
        };
        // Packet payload lengths: FIRST and MIDDLE carry exactly one MTU. A requester of
        // this process (see `Hca::set_in_process`) may send larger segments; where each
        // packet's bytes go is counted from the payloads, so any segmentation it chose lands
        // right.
        let length_ok = match pos {
            _ if in_process => payload.len() <= crate::IN_PROCESS_SEGMENT as usize,
            Position::First | Position::Middle if info.has_payload => payload.len() == mtu,
            _ => payload.len() <= mtu,
        };
        let access = self.attr.qp_access_flags;
        let access_ok = match info.kind {
            Kind::RdmaWrite => access.contains(AccessFlags::REMOTE_WRITE),
            Kind::RdmaReadRequest => access.contains(AccessFlags::REMOTE_READ),
            Kind::Atomic => access.contains(AccessFlags::REMOTE_ATOMIC),
            _ => true,
        };
        if !sequence_ok || !length_ok || !access_ok {
            self.nak_and_fail(res, psn, NakCode::InvalidRequest, AsyncEvent::QpReqErr(qpn));
            return;
        }
        // Receive WQE for SEND FIRST/ONLY and for any packet with immediate data that ends a
        // WRITE: none means RNR NAK, and nothing of the packet is executed (class B).
        let needs_recv = (info.kind == Kind::Send && pos.starts_message())
            || (info.kind == Kind::RdmaWrite && info.has_immediate);
        if needs_recv && !self.has_recv(res) {
            res.drop_packet(DropReason::RcRnrNakSent);
            let timer = self.attr.min_rnr_timer;
            self.resp.ack(psn, rnr_syndrome(timer));
            // The requester resends from this PSN after the RNR timer: what follows it is
            // dropped without a sequence-error NAK, which would cut the wait short.
            self.resp.nak_sent = true;
            return;
        }
        match info.kind {
            Kind::Send => self.rc_send(res, t, pos, payload),
            Kind::RdmaWrite => self.rc_write(res, t, pos, payload),
            Kind::RdmaReadRequest => self.rc_read(res, t, read_segment(mtu as u32, in_process)),
            Kind::Atomic => self.rc_atomic(res, t),
            _ => res.drop_packet(DropReason::WrongTransport),
        }
    }

    /// A duplicate request; a READ is replayed in segments of `seg` bytes.
    fn rc_duplicate<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        t: &TransportRepr,
        kind: Kind,
        seg: u32,
    ) {
        res.drop_packet(DropReason::RcDuplicate);
        let psn = t.bth.psn;
        match kind {
            // C9-105: a duplicate SEND or WRITE is acknowledged again, never re-executed.
            Kind::Send | Kind::RdmaWrite => {
                let last = self.resp.epsn.sub(1);
                self.resp.ack(last, ACK);
            }
            Kind::RdmaReadRequest => {
                let found = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Read { first, npkts } if psn.in_window(first, npkts) => Some(()),
                    _ => None,
                });
                let Some(reth) = t.reth else { return };
                if found.is_none() {
                    res.drop_packet(DropReason::RcDuplicateUnknown);
                    return;
                }
                // Replay from the PSN asked for, over the range the retried request names.
                match res.mrs.check(
                    reth.rkey.0,
                    self.init.pd,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_READ,
                ) {
                    Ok(region) => {
                        let msn = self.resp.msn;
                        self.resp.push(Response::Read {
                            psn,
                            region,
                            va: reth.va,
                            left: reth.dma_len,
                            started: false,
                            msn,
                            seg,
                        });
                    }
                    Err(_) => res.drop_packet(DropReason::RcDuplicateUnknown),
                }
            }
            Kind::Atomic => {
                let orig = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                match orig {
                    Some(orig) => {
                        let msn = self.resp.msn;
                        self.resp.push(Response::Atomic { psn, orig, msn });
                    }
                    None => res.drop_packet(DropReason::RcDuplicateUnknown),
                }
            }
            _ => {}
        }
    }

    fn rc_send<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        t: &TransportRepr,
        pos: Position,
        payload: &[u8],
    ) {
        let psn = t.bth.psn;
        let qpn = self.qpn;
        if pos.starts_message() {
            let Some(r) = self.take_recv(res) else { return };
            self.resp.cur = Some(InMessage::Send(r));
        }
        let Some(InMessage::Send(mut r)) = self.resp.cur.take() else {
            return;
        };
        match res.scatter(self.init.pd, &r.wr.sg_list, u64::from(r.offset), payload) {
            Ok(()) => {}
            Err(e) => {
                let (status, code) = match e {
                    ScatterError::TooLong => (WcStatus::LocLenErr, NakCode::InvalidRequest),
                    ScatterError::Protection => {
                        (WcStatus::LocProtErr, NakCode::RemoteOperationalError)
                    }
                };
                let wc = self.recv_completion(&r.wr, status, WcOpcode::Recv, r.offset);
                res.complete(self.init.recv_cq, wc, false);
                self.nak_and_fail(res, psn, code, AsyncEvent::QpReqErr(qpn));
                return;
            }
        }
        r.offset += payload.len() as u32;
        self.resp.accept(psn.next());
        if pos.ends_message() {
            let mut wc = self.recv_completion(&r.wr, WcStatus::Success, WcOpcode::Recv, r.offset);
            wc.imm_data = t.immdt.map(|i| i.data);
            if let Some(ieth) = t.ieth {
                // SEND with invalidate: the region must be ours to invalidate. If not, the
                // request is invalid; the receive WQE stays with the message so that entering
                // the error state flushes it (it must not vanish).
                match res.mrs.get(ieth.rkey.0) {
                    Some(mr) if mr.pd == self.init.pd => {
                        res.mrs.remove(ieth.rkey.0);
                        wc.invalidated_rkey = Some(ieth.rkey.0);
                    }
                    _ => {
                        self.resp.cur = Some(InMessage::Send(r));
                        self.nak_and_fail(
                            res,
                            psn,
                            NakCode::InvalidRequest,
                            AsyncEvent::QpReqErr(qpn),
                        );
                        return;
                    }
                }
            }
            self.resp.msn = (self.resp.msn + 1) & 0x00FF_FFFF;
            res.complete(self.init.recv_cq, wc, t.bth.solicited);
        } else {
            self.resp.cur = Some(InMessage::Send(r));
        }
        if t.bth.ack_req {
            self.resp.ack(psn, ACK);
        }
    }

    /// Places one RDMA WRITE packet: the R_Key check on FIRST/ONLY, the length rules, the
    /// memory write, and on LAST/ONLY the receive completion of a WRITE with immediate. Shared
    /// by RC and UC, which differ only in what a fault becomes (a NAK, or a silent drop).
    fn place_write<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        t: &TransportRepr,
        pos: Position,
        payload: &[u8],
    ) -> Result<(), WriteFault> {
        if pos.starts_message() {
            let reth = t.reth.ok_or(WriteFault::Length)?;
            let region = res
                .mrs
                .check(
                    reth.rkey.0,
                    self.init.pd,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessFlags::REMOTE_WRITE,
                )
                .map_err(|_| WriteFault::Access)?;
            self.resp.cur = Some(InMessage::Write {
                region,
                va: reth.va,
                left: reth.dma_len,
                total: reth.dma_len,
            });
        }
        let Some(InMessage::Write {
            region,
            va,
            left,
            total,
        }) = self.resp.cur.take()
        else {
            return Err(WriteFault::Length);
        };
        let n = payload.len() as u32;
        if n > left || (pos.ends_message() && n != left) {
            return Err(WriteFault::Length);
        }
        if let (Some(region), true) = (region, n > 0) {
            res.mem
                .write(region, va, payload)
                .map_err(|_| WriteFault::Memory)?;
        }
        if pos.ends_message() {
            if let Some(imm) = t.immdt {
                if let Some(r) = self.take_recv(res) {
                    let mut wc = self.recv_completion(
                        &r.wr,
                        WcStatus::Success,
                        WcOpcode::RecvRdmaWithImm,
                        total,
                    );
                    wc.imm_data = Some(imm.data);
                    res.complete(self.init.recv_cq, wc, t.bth.solicited);
                }
            }
        } else {
            self.resp.cur = Some(InMessage::Write {
                region,
                va: va + u64::from(n),
                left: left - n,
                total,
            });
        }
        Ok(())
    }

    fn rc_write<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        t: &TransportRepr,
        pos: Position,
        payload: &[u8],
    ) {
        let psn = t.bth.psn;
        let qpn = self.qpn;
        if let Err(fault) = self.place_write(res, t, pos, payload) {
            let (code, event) = match fault {
                WriteFault::Access => (NakCode::RemoteAccessError, AsyncEvent::QpAccessErr(qpn)),
                WriteFault::Length => (NakCode::InvalidRequest, AsyncEvent::QpReqErr(qpn)),
                WriteFault::Memory => (NakCode::RemoteOperationalError, AsyncEvent::QpReqErr(qpn)),
            };
            self.nak_and_fail(res, psn, code, event);
            return;
        }
        self.resp.accept(psn.next());
        if pos.ends_message() {
            self.resp.msn = (self.resp.msn + 1) & 0x00FF_FFFF;
        }
        if t.bth.ack_req {
            self.resp.ack(psn, ACK);
        }
    }

    fn remember(&mut self, r: Resource) {
        let cap = usize::from(self.attr.max_dest_rd_atomic.max(1));
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    /// A READ request, answered in segments of `seg` bytes.
    fn rc_read<M: Memory>(&mut self, res: &mut Resources<M>, t: &TransportRepr, seg: u32) {
        let psn = t.bth.psn;
        let qpn = self.qpn;
        let Some(reth) = t.reth else { return };
        let region = match res.mrs.check(
            reth.rkey.0,
            self.init.pd,
            reth.va,
            u64::from(reth.dma_len),
            AccessFlags::REMOTE_READ,
        ) {
            Ok(region) => region,
            Err(_) => {
                self.nak_and_fail(
                    res,
                    psn,
                    NakCode::RemoteAccessError,
                    AsyncEvent::QpAccessErr(qpn),
                );
                return;
            }
        };
        let npkts = packets(reth.dma_len, seg);
        self.remember(Resource::Read { first: psn, npkts });
        // C9-148: the MSN counts the READ when its request is accepted.
        self.resp.msn = (self.resp.msn + 1) & 0x00FF_FFFF;
        let msn = self.resp.msn;
        self.resp.push(Response::Read {
            psn,
            region,
            va: reth.va,
            left: reth.dma_len,
            started: false,
            msn,
            seg,
        });
        self.resp.accept(psn.add(npkts));
    }

    fn rc_atomic<M: Memory>(&mut self, res: &mut Resources<M>, t: &TransportRepr) {
        let psn = t.bth.psn;
        let qpn = self.qpn;
        let Some(a) = t.atomic_eth else { return };
        if a.va % 8 != 0 {
            self.nak_and_fail(res, psn, NakCode::InvalidRequest, AsyncEvent::QpReqErr(qpn));
            return;
        }
        let region =
            match res
                .mrs
                .check(a.rkey.0, self.init.pd, a.va, 8, AccessFlags::REMOTE_ATOMIC)
            {
                Ok(Some(region)) => region,
                _ => {
                    self.nak_and_fail(
                        res,
                        psn,
                        NakCode::RemoteAccessError,
                        AsyncEvent::QpAccessErr(qpn),
                    );
                    return;
                }
            };
        let op = if t.bth.opcode.operation() == softib_wire::Operation::CompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let Ok(orig) = res.mem.atomic(region, a.va, op) else {
            self.nak_and_fail(
                res,
                psn,
                NakCode::RemoteOperationalError,
                AsyncEvent::QpReqErr(qpn),
            );
            return;
        };
        self.remember(Resource::Atomic { psn, orig });
        self.resp.msn = (self.resp.msn + 1) & 0x00FF_FFFF;
        let msn = self.resp.msn;
        self.resp.push(Response::Atomic { psn, orig, msn });
        self.resp.accept(psn.next());
    }

    /// UC (IBA §9.8): no acknowledgements; a PSN gap or any error drops the rest of the message.
    fn uc_request<M: Memory>(&mut self, res: &mut Resources<M>, t: &TransportRepr, payload: &[u8]) {
        let psn = t.bth.psn;
        let Some(info) = t.bth.opcode.info() else {
            return;
        };
        let pos = info.position;
        let mtu = self.mtu(res) as usize;
        if psn != self.resp.epsn || (self.resp.cur.is_some() && pos.starts_message()) {
            if self.resp.cur.is_some() || !pos.starts_message() {
                res.drop_packet(DropReason::UcSequenceGap);
            }
            self.uc_abandon(res);
        }
        self.resp.epsn = psn.next();
        if !pos.starts_message() && self.resp.cur.is_none() {
            if !self.resp.uc_dropping {
                res.drop_packet(DropReason::UcSequenceGap);
            }
            self.resp.uc_dropping = true;
            return;
        }
        let length_ok = match pos {
            Position::First | Position::Middle => payload.len() == mtu,
            _ => payload.len() <= mtu,
        };
        let access_ok = info.kind != Kind::RdmaWrite
            || self
                .attr
                .qp_access_flags
                .contains(AccessFlags::REMOTE_WRITE);
        if !length_ok || !access_ok {
            res.drop_packet(DropReason::UcInvalidRequest);
            self.uc_abandon(res);
            self.resp.uc_dropping = true;
            return;
        }
        // A MIDDLE or LAST of another kind than the message in progress is an invalid request:
        // drop the message (its receive WQE goes back for the next one).
        let continues_other_kind = !pos.starts_message()
            && !matches!(
                (&self.resp.cur, info.kind),
                (Some(InMessage::Send(_)), Kind::Send)
                    | (Some(InMessage::Write { .. }), Kind::RdmaWrite)
            );
        if continues_other_kind {
            res.drop_packet(DropReason::UcInvalidRequest);
            self.uc_abandon(res);
            self.resp.uc_dropping = true;
            return;
        }
        self.resp.uc_dropping = false;
        match info.kind {
            Kind::Send => {
                if pos.starts_message() {
                    match self.take_recv(res) {
                        Some(r) => self.resp.cur = Some(InMessage::Send(r)),
                        None => {
                            res.drop_packet(DropReason::UcNoReceive);
                            self.resp.uc_dropping = true;
                            return;
                        }
                    }
                }
                let Some(InMessage::Send(mut r)) = self.resp.cur.take() else {
                    return;
                };
                if res
                    .scatter(self.init.pd, &r.wr.sg_list, u64::from(r.offset), payload)
                    .is_err()
                {
                    res.drop_packet(DropReason::UcInvalidRequest);
                    self.untake_recv(r, res);
                    self.resp.uc_dropping = true;
                    return;
                }
                r.offset += payload.len() as u32;
                if pos.ends_message() {
                    let mut wc =
                        self.recv_completion(&r.wr, WcStatus::Success, WcOpcode::Recv, r.offset);
                    wc.imm_data = t.immdt.map(|i| i.data);
                    res.complete(self.init.recv_cq, wc, t.bth.solicited);
                } else {
                    self.resp.cur = Some(InMessage::Send(r));
                }
            }
            Kind::RdmaWrite => {
                if info.has_immediate && !self.has_recv(res) {
                    res.drop_packet(DropReason::UcNoReceive);
                    self.uc_abandon(res);
                    return;
                }
                if self.place_write(res, t, pos, payload).is_err() {
                    res.drop_packet(DropReason::UcInvalidRequest);
                    self.resp.uc_dropping = true;
                }
            }
            _ => res.drop_packet(DropReason::WrongTransport),
        }
    }

    /// UC: forget the message in progress; a receive WQE it held goes back for the next one.
    fn uc_abandon<M: Memory>(&mut self, res: &mut Resources<M>) {
        if let Some(InMessage::Send(mut r)) = self.resp.cur.take() {
            r.offset = 0;
            self.untake_recv(r, res);
        }
    }

    /// UD (IBA §9.8.2, §10.2.4): Q_Key check, one packet per message, the GRH area first.
    fn ud_request<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        meta: &RxMeta,
        t: &TransportRepr,
        payload: &[u8],
    ) {
        let Some(deth) = t.deth else { return };
        if deth.qkey.0 != self.attr.qkey {
            res.drop_packet(DropReason::QKeyMismatch);
            if let Some(c) = res.counters_mut(self.attr.port_num) {
                c.qkey_violations += 1;
            }
            return;
        }
        let Some(r) = self.take_recv(res) else {
            res.drop_packet(DropReason::UdNoReceive);
            return;
        };
        let grh = meta.grh.unwrap_or([0; 40]);
        let pd = self.init.pd;
        let written = res
            .scatter(pd, &r.wr.sg_list, 0, &grh)
            .and_then(|()| res.scatter(pd, &r.wr.sg_list, 40, payload));
        let status = match written {
            Ok(()) => WcStatus::Success,
            Err(ScatterError::TooLong) => {
                res.drop_packet(DropReason::UdTooLong);
                WcStatus::LocLenErr
            }
            Err(ScatterError::Protection) => WcStatus::LocProtErr,
        };
        let mut wc = self.recv_completion(&r.wr, status, WcOpcode::Recv, 40 + payload.len() as u32);
        wc.imm_data = t.immdt.map(|i| i.data);
        wc.src_qp = deth.src_qpn;
        wc.slid = meta.slid;
        wc.sl = meta.sl;
        wc.grh = meta.grh.is_some();
        res.complete(self.init.recv_cq, wc, t.bth.solicited);
    }

    /// Whether responses are waiting.
    pub(crate) fn responder_ready(&self) -> bool {
        !self.resp.outputs.is_empty()
    }

    /// Builds the next response packet into `buf`.
    pub(crate) fn responder_poll<M: Memory>(
        &mut self,
        res: &mut Resources<M>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let mtu = self.mtu(res);
        let pkey = res.pkey(self.attr.port_num, self.attr.pkey_index);
        let r = self.resp.outputs.front_mut()?;
        let mut bth = BthRepr {
            opcode: Opcode::RC_ACKNOWLEDGE,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qpn: self.attr.dest_qp_num,
            ack_req: false,
            psn: Psn::new(0),
        };
        let mut read_from = None;
        // Large segments go to a requester of this process, which asked for them: they
        // travel in-process whether or not this QP is marked yet.
        let mut large = false;
        let (t, n, done) = match r {
            Response::Ack { psn, syndrome, msn } => {
                bth.psn = *psn;
                let mut t = TransportRepr::new(bth);
                t.aeth = Some(AethRepr {
                    syndrome: *syndrome,
                    msn: *msn,
                });
                (t, 0, true)
            }
            Response::Atomic { psn, orig, msn } => {
                bth.psn = *psn;
                bth.opcode = Opcode::RC_ATOMIC_ACKNOWLEDGE;
                let mut t = TransportRepr::new(bth);
                t.aeth = Some(AethRepr {
                    syndrome: ACK,
                    msn: *msn,
                });
                t.atomic_ack_eth = Some(AtomicAckEthRepr { orig: *orig });
                (t, 0, true)
            }
            Response::Read {
                psn,
                region,
                va,
                left,
                started,
                msn,
                seg,
            } => {
                large = *seg > mtu;
                let n = (*left).min(*seg);
                let last = *left <= *seg;
                let op = match (*started, last) {
                    (false, true) => softib_wire::Operation::RdmaReadResponseOnly,
                    (false, false) => softib_wire::Operation::RdmaReadResponseFirst,
                    (true, true) => softib_wire::Operation::RdmaReadResponseLast,
                    (true, false) => softib_wire::Operation::RdmaReadResponseMiddle,
                };
                bth.opcode = Opcode::new(softib_wire::Transport::Rc, op);
                bth.psn = *psn;
                bth.pad_count = pad_for(n as usize);
                let mut t = TransportRepr::new(bth);
                // READ responses FIRST, LAST and ONLY carry an AETH; MIDDLE does not.
                if !*started || last {
                    t.aeth = Some(AethRepr {
                        syndrome: ACK,
                        msn: *msn,
                    });
                }
                if n > 0 {
                    read_from = region.map(|r| (r, *va));
                }
                *psn = psn.next();
                *va += u64::from(n);
                *left -= n;
                *started = true;
                (t, n as usize, last)
            }
        };
        if done {
            self.resp.outputs.pop_front();
        }
        let hlen = t.header_len();
        t.emit(buf);
        // To a requester of this process, the data stays where it is until the requester
        // places it (one copy instead of two).
        let by_ref = read_from
            .filter(|_| self.in_process || large)
            .map(|(region, addr)| PayloadRef {
                region,
                addr,
                len: n as u32,
            });
        if by_ref.is_some() {
            if let Some(c) = res.counters_mut(self.attr.port_num) {
                c.xmit_pkts += 1;
                c.xmit_data_words += (hlen + n + usize::from(pad_for(n)) + 4) as u64 / 4;
            }
            if self.state == QpState::Err && self.resp.outputs.is_empty() {
                self.resp.cur = None;
            }
            return Some(Transmit {
                port: self.attr.port_num,
                av: self.attr.ah_attr,
                src_qpn: self.qpn,
                dest_qpn: t.bth.dest_qpn,
                opcode: t.bth.opcode,
                len: hlen,
                payload: by_ref,
                in_process: true,
            });
        }
        if let Some((region, va)) = read_from {
            if res.mem.read(region, va, &mut buf[hlen..hlen + n]).is_err() {
                // The memory went away under a READ: answer with a remote operational error.
                let psn = t.bth.psn;
                let qpn = self.qpn;
                self.nak_and_fail(
                    res,
                    psn,
                    NakCode::RemoteOperationalError,
                    AsyncEvent::QpReqErr(qpn),
                );
                return None;
            }
        }
        let pad = usize::from(pad_for(n));
        buf[hlen + n..hlen + n + pad].fill(0);
        let len = hlen + n + pad;
        if let Some(c) = res.counters_mut(self.attr.port_num) {
            c.xmit_pkts += 1;
            c.xmit_data_words += (len as u64 + 4) / 4;
        }
        if self.state == QpState::Err && self.resp.outputs.is_empty() {
            self.resp.cur = None;
        }
        Some(Transmit {
            port: self.attr.port_num,
            av: self.attr.ah_attr,
            src_qpn: self.qpn,
            dest_qpn: t.bth.dest_qpn,
            opcode: t.bth.opcode,
            len,
            payload: None,
            in_process: self.in_process || large,
        })
    }
}

impl Qp {
    /// The responder's invariants: the MSN is a 24-bit count; UC and UD keep no resources and
    /// queue no responses; an RC responder's READ/atomic resources are at most
    /// `max_dest_rd_atomic`, in PSN order and behind ePSN within the valid region, and what it
    /// queues names PSNs at or behind ePSN and MSNs no newer than its own; a QP that has not
    /// reached RTR has received nothing, and one in ERR keeps nothing but its final NAK.
    pub(crate) fn check_responder(&self) -> Result<(), Broken> {
        use crate::invariant::{behind, PSN_WINDOW};
        let r = &self.resp;
        ensure!(
            r.msn <= Psn::MAX,
            "the MSN is a 24-bit count (the AETH's MSN field)",
            "MSN {:#x}",
            r.msn
        );
        match self.state {
            QpState::Reset | QpState::Init => ensure!(
                r.resources.is_empty() && r.outputs.is_empty() && r.cur.is_none(),
                "a QP that has not reached RTR has received nothing",
                "{} resources, {} responses queued, message in progress: {}",
                r.resources.len(),
                r.outputs.len(),
                r.cur.is_some()
            ),
            QpState::Err => ensure!(
                r.resources.is_empty()
                    && r.outputs.len() <= 1
                    && r.outputs.iter().all(|o| matches!(
                        o,
                        Response::Ack {
                            syndrome: Syndrome::Nak(_),
                            ..
                        }
                    )),
                "a responder in ERR keeps no resources and queues nothing but its final NAK",
                "{} resources, responses queued: {:?}",
                r.resources.len(),
                r.outputs
            ),
            _ => {}
        }
        match &r.cur {
            Some(InMessage::Write { left, total, .. }) => ensure!(
                left <= total,
                "an RDMA WRITE in progress has no more bytes left than it announced",
                "{left} of {total} bytes left"
            ),
            Some(InMessage::Send(recv)) => ensure!(
                recv.from_srq == self.init.srq.is_some(),
                "a SEND in progress fills a receive WQE from where the QP takes them (its SRQ or its receive queue)",
                "from the SRQ: {}, the QP has an SRQ: {}",
                recv.from_srq,
                self.init.srq.is_some()
            ),
            None => {}
        }
        if self.qp_type() != QpType::Rc {
            ensure!(
                r.resources.is_empty() && r.outputs.is_empty(),
                "UC and UD are unacknowledged (IBA §9.8): no responder resources, no responses",
                "{} resources, {} responses queued",
                r.resources.len(),
                r.outputs.len()
            );
            ensure!(
                self.qp_type() != QpType::Ud || r.cur.is_none(),
                "a UD message is one packet: none is ever in progress",
                "a message in progress"
            );
            ensure!(
                !r.uc_dropping || r.cur.is_none(),
                "a UC responder dropping packets until the next FIRST or ONLY has no message in progress",
                "dropping with a message in progress"
            );
            return Ok(());
        }
        let cap = usize::from(self.attr.max_dest_rd_atomic.max(1));
        ensure!(
            r.resources.len() <= cap,
            "an RC responder keeps at most max_dest_rd_atomic READ/atomic resources",
            "{} resources, max_dest_rd_atomic {}",
            r.resources.len(),
            self.attr.max_dest_rd_atomic
        );
        // Oldest first: each resource lies wholly behind ePSN, within the valid region, and
        // after the one before it.
        let mut older_end: Option<u32> = None;
        for res in &r.resources {
            let (first, n) = res.psns();
            let back = behind(first, r.epsn);
            ensure!(
                n >= 1 && n <= back && back <= PSN_WINDOW,
                "a responder resource lies wholly behind ePSN, within the valid region (IBA §9.7.1)",
                "{res:?} with ePSN {}",
                r.epsn
            );
            if let Some(end) = older_end {
                ensure!(
                    back <= end,
                    "responder resources are in PSN order and do not overlap",
                    "{res:?} starts before the one remembered before it ends; resources {:?}",
                    r.resources
                );
            }
            older_end = Some(back - n);
        }
        for out in &r.outputs {
            let (psn, msn) = match *out {
                Response::Ack { psn, msn, .. } => (Some((psn, 0)), msn),
                Response::Atomic { psn, msn, .. } => (Some((psn, 1)), msn),
                // A replayed READ's range is the retried request's, so its PSNs are the
                // peer's choice: only its MSN is the responder's.
                Response::Read { msn, .. } => (None, msn),
            };
            ensure!(
                msn <= Psn::MAX && r.msn.wrapping_sub(msn) & Psn::MAX <= PSN_WINDOW,
                "a queued response carries an MSN no newer than the responder's",
                "{out:?} with MSN {}",
                r.msn
            );
            if let (Some((psn, min_behind)), false) = (psn, self.state == QpState::Err) {
                let back = behind(psn, r.epsn);
                ensure!(
                    (min_behind..=PSN_WINDOW).contains(&back),
                    "a queued ACK or NAK names a PSN at or behind ePSN, an atomic response one behind it, within the valid region",
                    "{out:?} with ePSN {}",
                    r.epsn
                );
            }
        }
        Ok(())
    }
}

/// The segment a READ's responses go in: the path MTU, or the large in-process segment when
/// the request came in-process — which its requester does exactly when it sized the READ so
/// (see `requester_poll`).
fn read_segment(mtu: u32, in_process: bool) -> u32 {
    if in_process {
        crate::IN_PROCESS_SEGMENT
    } else {
        mtu
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::{QpCap, QpInitAttr};
    use crate::{CqHandle, PdHandle};
    use softib_wire::Qpn;

    /// A QP of `qp_type` in RTS whose responder expects PSN 1000, with two READ/atomic
    /// resources allowed.
    fn responder(qp_type: QpType) -> Qp {
        let mut qp = Qp::new(
            Qpn::new(0x42),
            QpInitAttr {
                qp_type,
                pd: PdHandle(1),
                send_cq: CqHandle(1),
                recv_cq: CqHandle(1),
                srq: None,
                cap: QpCap::default(),
                sq_sig_all: true,
            },
        );
        qp.state = QpState::Rts;
        qp.attr.max_dest_rd_atomic = 2;
        qp.resp.epsn = Psn::new(1000);
        qp
    }

    fn read_at(first: u32, npkts: u32) -> Resource {
        Resource::Read {
            first: Psn::new(first),
            npkts,
        }
    }

    fn broken(qp: &Qp) -> Option<&'static str> {
        qp.check_responder().err().map(|b| b.invariant)
    }

    #[test]
    fn each_responder_rule_catches_the_state_that_breaks_it() {
        let mut qp = responder(QpType::Rc);
        qp.resp.resources.extend([read_at(990, 4), read_at(994, 6)]);
        qp.resp.ack(Psn::new(999), ACK);
        assert_eq!(
            broken(&qp),
            None,
            "a READ ending at ePSN, an ACK just behind it"
        );
        qp.resp.resources.push_back(read_at(996, 1));
        assert_eq!(
            broken(&qp),
            Some("an RC responder keeps at most max_dest_rd_atomic READ/atomic resources")
        );
        qp.resp.resources.pop_front();
        assert_eq!(
            broken(&qp),
            Some("responder resources are in PSN order and do not overlap")
        );
        qp.resp.resources = [read_at(998, 4)].into();
        assert_eq!(
            broken(&qp),
            Some("a responder resource lies wholly behind ePSN, within the valid region (IBA §9.7.1)")
        );
        qp.resp.resources.clear();
        qp.resp.ack(Psn::new(1001), ACK);
        assert_eq!(
            broken(&qp),
            Some("a queued ACK or NAK names a PSN at or behind ePSN, an atomic response one behind it, within the valid region")
        );
        qp = responder(QpType::Uc);
        qp.resp.resources.push_back(read_at(990, 1));
        assert_eq!(
            broken(&qp),
            Some("UC and UD are unacknowledged (IBA §9.8): no responder resources, no responses")
        );
        qp = responder(QpType::Rc);
        qp.state = QpState::Err;
        qp.resp.ack(Psn::new(999), ACK);
        assert_eq!(
            broken(&qp),
            Some("a responder in ERR keeps no resources and queues nothing but its final NAK")
        );
    }

    #[test]
    fn a_resource_the_valid_region_has_passed_is_forgotten() {
        // A READ at PSN 10 (3 PSNs) and an atomic at 13; then 2^23 - 3 more PSNs of WRITEs.
        let mut r = Responder::default();
        r.resources.push_back(Resource::Read {
            first: Psn::new(10),
            npkts: 3,
        });
        r.resources.push_back(Resource::Atomic {
            psn: Psn::new(13),
            orig: 0,
        });
        r.accept(Psn::new(14));
        assert_eq!(r.resources.len(), 2);
        // Exactly 2^23 behind: a duplicate of PSN 10 is still possible.
        r.accept(Psn::new(10 + (1 << 23)));
        assert_eq!(r.resources.len(), 2);
        // One more: PSN 10 would now be ahead of ePSN, and after the wrap alias a new one.
        r.accept(Psn::new(11 + (1 << 23)));
        assert_eq!(r.resources.len(), 1);
        r.accept(Psn::new(14 + (1 << 23)));
        assert!(r.resources.is_empty());
    }
}
