//! The requester (IBA §9.7, rxe's `rxe_req.c`): turns send WQEs into request packets —
//! segmentation by MTU, opcode and PSN choice, AckReq, the PSN window, fences and the
//! `max_rd_atomic` limit — for RC, UC and UD.
//!
//! It reads the send queue and moves only its own position (which WQEs started, what is
//! sent) through the queue's methods; acknowledgements, retries and retirement are the
//! completer's.

use softib_wire::aeth::{self, Syndrome};
use softib_wire::opcode::{Operation, Transport};
use softib_wire::packet::{pad_for, TransportRepr};
use softib_wire::{
    AtomicEthRepr, BthRepr, DethRepr, IethRepr, ImmDtRepr, Opcode, Position, QKey, RethRepr,
};

use super::{Qp, SendWqe};
use crate::invariant::{ensure, Broken};
use crate::memory::Memory;
use crate::res::Resources;
use crate::time::{Duration, Instant};
use crate::verbs::{QpState, QpType, WcStatus, WrOpcode};
use crate::Transmit;

/// The bytes a transport packet can take at most: BTH, the largest ETH set, a 4096-byte
/// payload and its pad. Buffers given to `poll_transmit` must be at least this long.
pub const MAX_TRANSPORT_LEN: usize = 12 + 28 + 16 + 4 + 4096 + 3;

/// The position of packet `k` of `n` in its message.
pub(crate) fn position(k: u32, n: u32) -> Position {
    match (k, n) {
        (_, 1) => Position::Only,
        (0, _) => Position::First,
        (k, n) if k + 1 == n => Position::Last,
        _ => Position::Middle,
    }
}

/// The number of packets of an `len`-byte message at `mtu` (a zero-length message is one).
pub(crate) fn packets(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

fn transport_of(t: QpType) -> Transport {
    match t {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

/// The opcode of packet `pos` of a WR.
fn opcode_for(t: QpType, op: &WrOpcode, pos: Position) -> Opcode {
    use Operation as O;
    use Position as P;
    let operation = match op {
        WrOpcode::Send => match pos {
            P::First => O::SendFirst,
            P::Middle => O::SendMiddle,
            P::Last => O::SendLast,
            P::Only => O::SendOnly,
        },
        WrOpcode::SendWithImm(_) => match pos {
            P::First => O::SendFirst,
            P::Middle => O::SendMiddle,
            P::Last => O::SendLastWithImmediate,
            P::Only => O::SendOnlyWithImmediate,
        },
        WrOpcode::SendWithInv(_) => match pos {
            P::First => O::SendFirst,
            P::Middle => O::SendMiddle,
            P::Last => O::SendLastWithInvalidate,
            P::Only => O::SendOnlyWithInvalidate,
        },
        WrOpcode::RdmaWrite(_) => match pos {
            P::First => O::RdmaWriteFirst,
            P::Middle => O::RdmaWriteMiddle,
            P::Last => O::RdmaWriteLast,
            P::Only => O::RdmaWriteOnly,
        },
        WrOpcode::RdmaWriteWithImm(..) => match pos {
            P::First => O::RdmaWriteFirst,
            P::Middle => O::RdmaWriteMiddle,
            P::Last => O::RdmaWriteLastWithImmediate,
            P::Only => O::RdmaWriteOnlyWithImmediate,
        },
        WrOpcode::RdmaRead(_) => O::RdmaReadRequest,
        WrOpcode::AtomicCmpAndSwp { .. } => O::CompareSwap,
        WrOpcode::AtomicFetchAndAdd { .. } => O::FetchAdd,
    };
    Opcode::new(transport_of(t), operation)
}

impl Qp {
    /// The MTU the requester segments by: the path MTU on connected QPs, the port's active
    /// MTU on UD.
    pub(crate) fn mtu<M>(&self, res: &Resources<M>) -> u32 {
        let m = match self.qp_type() {
            QpType::Ud => res
                .port(self.attr.port_num)
                .map_or(self.attr.path_mtu, |p| p.active_mtu),
            _ => self.attr.path_mtu,
        };
        m.bytes().unwrap_or(256) as u32
    }

    /// Index of the next WQE with request packets to send, and whether it may go now.
    fn next_sendable(&self, now: Instant, res: &Resources<impl Memory>) -> Option<usize> {
        if !matches!(self.state, QpState::Rts | QpState::Sqd) {
            return None;
        }
        if self.sq.rnr_until().is_some_and(|t| t > now) {
            return None;
        }
        // The first WQE with a packet to send: every one before it is finished, or sent and
        // waiting for its acknowledgement or response.
        let i = self.sq.first_to_send()?;
        let w = self.sq.wqe(i);
        if w.first_psn().is_none() {
            if self.state == QpState::Sqd {
                return None;
            }
            let fenced = w.wr().flags.contains(crate::verbs::SendFlags::FENCE);
            if fenced || w.is_read_or_atomic() {
                // READs and atomics sent and not yet answered: a fence waits for them, and
                // at most `max_rd_atomic` may be outstanding.
                let rd_outstanding = self
                    .sq
                    .iter()
                    .take(i)
                    .filter(|e| e.status().is_none() && e.is_read_or_atomic())
                    .count() as u32;
                let max_rd = u32::from(self.attr.max_rd_atomic.max(1));
                if (fenced && rd_outstanding > 0)
                    || (w.is_read_or_atomic() && rd_outstanding >= max_rd)
                {
                    return None;
                }
            }
        }
        if self.qp_type() == QpType::Rc {
            // Only RC has a window.
            let next = w
                .first_psn()
                .map_or(self.sq.next_psn(), |f| f.add(w.sent()));
            if let Some(una) = self.sq.una() {
                let inflight = next.diff(una);
                let window = self.sq.window(res.transport.max_unacked_psns);
                if inflight >= 0 && inflight as u32 >= window {
                    return None;
                }
            }
        }
        Some(i)
    }

    /// Whether the requester has a packet to send now.
    pub(crate) fn requester_ready(&self, now: Instant, res: &Resources<impl Memory>) -> bool {
        self.next_sendable(now, res).is_some()
    }

    /// Validates a WQE the first time it starts: L_Keys of the SGEs and, for UD, the address
    /// handle. Returns the error status to complete it with.
    fn validate_start(&self, w: &SendWqe, res: &Resources<impl Memory>) -> Result<(), WcStatus> {
        use crate::verbs::AccessFlags;
        let pd = self.init.pd;
        let need = if w.is_read_or_atomic() {
            AccessFlags::LOCAL_WRITE
        } else {
            AccessFlags::NONE
        };
        if w.wr().inline_data.is_none() {
            res.check_sges(pd, &w.wr().sg_list, need)
                .map_err(|_| WcStatus::LocProtErr)?;
        }
        if self.qp_type() == QpType::Ud && w.len() > self.mtu(res) {
            // C10-93.1.1 lets an HCA drop such a message silently (rxe does); softib reports it.
            return Err(WcStatus::LocLenErr);
        }
        if let Some(ud) = &w.wr().ud {
            match res.ahs.get(&ud.ah) {
                Some(ah) if ah.pd == pd => {}
                _ => return Err(WcStatus::LocQpOpErr),
            }
        }
        Ok(())
    }

    /// Builds the next request packet into `buf` (at least [`MAX_TRANSPORT_LEN`] bytes).
    pub(crate) fn requester_poll<M: Memory>(
        &mut self,
        now: Instant,
        res: &mut Resources<M>,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let i = self.next_sendable(now, res)?;
        let mtu = self.mtu(res);
        if self.sq.wqe(i).first_psn().is_none() {
            if let Err(status) = self.validate_start(self.sq.wqe(i), res) {
                self.fail_wqe(i, status, 0, res);
                return None;
            }
            let w = self.sq.wqe(i);
            // To a peer in this process an RC SEND or WRITE goes in large segments (its
            // responder is told the packets are in-process), and a READ asks for its response
            // in them: its request goes in-process exactly when it does (see below).
            let seg = if self.in_process && !w.is_atomic() && buf.len() >= crate::IN_PROCESS_MAX_LEN
            {
                crate::IN_PROCESS_SEGMENT
            } else {
                mtu
            };
            let npkts = if w.is_atomic() {
                1
            } else {
                packets(w.len(), seg)
            };
            self.sq.start(i, seg, npkts);
        }
        self.sq.end_rnr_wait();
        let qp_type = self.qp_type();
        let pkey = res.pkey(self.attr.port_num, self.attr.pkey_index);
        let own_qkey = self.attr.qkey;
        let dest_qpn = self.attr.dest_qp_num;
        let qpn = self.qpn;
        let pd = self.init.pd;
        let ack_every = res.transport.max_pkt_per_ack.max(1);
        let mut in_process = self.in_process;
        let window = self.sq.window(res.transport.max_unacked_psns);
        let una = self.sq.una();
        let w = self.sq.wqe(i);
        let first = w.first_psn().unwrap_or_default();
        let k = w.sent();
        let psn = first.add(k);
        // READ requests and atomics are one packet without payload.
        let (pos, offset, n) = if w.is_read_or_atomic() {
            (Position::Only, 0u64, 0u32)
        } else {
            let seg = w.seg().max(1);
            let off = u64::from(k) * u64::from(seg);
            let n = (u64::from(w.len()) - off).min(u64::from(seg)) as u32;
            (position(k, w.npkts()), off, n)
        };
        let opcode = opcode_for(qp_type, &w.wr().opcode, pos);
        let mut t = TransportRepr::new(BthRepr {
            opcode,
            solicited: pos.ends_message()
                && w.wr().flags.contains(crate::verbs::SendFlags::SOLICITED),
            mig_req: false,
            pad_count: pad_for(n as usize),
            tver: 0,
            pkey,
            fecn: false,
            becn: false,
            dest_qpn: match &w.wr().ud {
                Some(ud) => ud.remote_qpn,
                None => dest_qpn,
            },
            // AckReq asks the responder to acknowledge (IBA §9.7.5.1; rxe sets it on the last
            // packet of a message and every RXE_MAX_PKT_PER_ACK packets). It is also set on the
            // packet that fills the PSN window: the requester sends nothing more until an ACK
            // comes, and a responder ACKs only packets that ask, so without it a window smaller
            // than `max_pkt_per_ack` stalled until the local ACK timeout and go-back-N.
            ack_req: qp_type == QpType::Rc
                && (pos.ends_message()
                    || (k + 1) % ack_every == 0
                    || psn.diff(una.unwrap_or(psn)) + 1 >= window as i32),
            psn,
        });
        match &w.wr().opcode {
            WrOpcode::RdmaWrite(r) | WrOpcode::RdmaWriteWithImm(r, _) if pos.starts_message() => {
                t.reth = Some(RethRepr {
                    va: r.addr,
                    rkey: r.rkey,
                    dma_len: w.len(),
                });
            }
            WrOpcode::RdmaRead(r) => {
                // A READ request goes in-process exactly when the READ was sized for large
                // response segments: that is how its responder learns the segment size, which
                // stays the one chosen when the READ started, however the QP is marked since.
                in_process = w.seg() > mtu;
                // A retried READ asks only for what has not arrived (IBA §9.7.5.2.4).
                let done = u64::from(w.acked()) * u64::from(w.seg().max(1));
                let done = done.min(u64::from(w.len()));
                t.bth.psn = first.add(w.acked());
                t.reth = Some(RethRepr {
                    va: r.addr.wrapping_add(done),
                    rkey: r.rkey,
                    dma_len: w.len() - done as u32,
                });
            }
            WrOpcode::AtomicCmpAndSwp {
                remote,
                compare,
                swap,
            } => {
                t.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: *swap,
                    compare: *compare,
                });
            }
            WrOpcode::AtomicFetchAndAdd { remote, add } => {
                t.atomic_eth = Some(AtomicEthRepr {
                    va: remote.addr,
                    rkey: remote.rkey,
                    swap_add: *add,
                    compare: 0,
                });
            }
            _ => {}
        }
        if pos.ends_message() {
            match &w.wr().opcode {
                WrOpcode::SendWithImm(imm) | WrOpcode::RdmaWriteWithImm(_, imm) => {
                    t.immdt = Some(ImmDtRepr { data: *imm });
                }
                WrOpcode::SendWithInv(rkey) => t.ieth = Some(IethRepr { rkey: *rkey }),
                _ => {}
            }
        }
        if let Some(ud) = &w.wr().ud {
            let qkey = if ud.remote_qkey & 0x8000_0000 != 0 {
                own_qkey
            } else {
                ud.remote_qkey
            };
            t.deth = Some(DethRepr {
                qkey: QKey(qkey),
                src_qpn: qpn,
            });
        }
        let hlen = t.header_len();
        let pad = usize::from(pad_for(n as usize));
        // The payload stays in memory when the peer is in this process and it lies in one
        // SGE: the peer's engine copies it from there into its own memory.
        let by_ref = match &w.wr().inline_data {
            None if n > 0 && in_process => match res.payload_ref(pd, &w.wr().sg_list, offset, n) {
                Ok(r) => r,
                Err(status) => {
                    self.fail_wqe(i, status, 0, res);
                    return None;
                }
            },
            _ => None,
        };
        let len = if by_ref.is_some() {
            hlen
        } else {
            hlen + n as usize + pad
        };
        if buf.len() < len {
            // Only a link that gave a smaller buffer than it promised gets here.
            self.fail_wqe(i, WcStatus::LocLenErr, 0, res);
            return None;
        }
        t.emit(buf);
        let body = &mut buf[hlen..if by_ref.is_some() {
            hlen
        } else {
            hlen + n as usize
        }];
        let gathered = match &w.wr().inline_data {
            _ if by_ref.is_some() => Ok(()),
            Some(data) => {
                let start = offset as usize;
                match data.get(start..start + n as usize) {
                    Some(src) => {
                        body.copy_from_slice(src);
                        Ok(())
                    }
                    None => Err(WcStatus::LocLenErr),
                }
            }
            None if n > 0 => res.gather(pd, &w.wr().sg_list, offset, body),
            None => Ok(()),
        };
        if let Err(status) = gathered {
            self.fail_wqe(i, status, 0, res);
            return None;
        }
        if by_ref.is_none() {
            buf[hlen + n as usize..len].fill(0);
        }

        let av = match &w.wr().ud {
            Some(ud) => res.ahs.get(&ud.ah).map(|a| a.av).unwrap_or_default(),
            None => self.attr.ah_attr,
        };
        let finished = self.sq.record_sent(i);
        match qp_type {
            QpType::Rc => self.sq.arm_retransmit(now, self.attr.timeout),
            QpType::Uc | QpType::Ud => {
                if finished {
                    self.sq.finish(i, WcStatus::Success, 0);
                    self.retire(res);
                }
            }
        }
        if let Some(c) = res.counters_mut(self.attr.port_num) {
            c.xmit_pkts += 1;
            c.xmit_data_words += (hlen + n as usize + pad + 4) as u64 / 4;
        }
        Some(Transmit {
            port: self.attr.port_num,
            av,
            src_qpn: qpn,
            dest_qpn: t.bth.dest_qpn,
            opcode,
            len,
            payload: by_ref,
            in_process,
        })
    }
}

impl Qp {
    /// The requester's invariants: WQEs start in posting order and take consecutive PSNs up
    /// to `next_psn`, no more than the valid region of them is outstanding, each WQE's
    /// position is within its PSNs, the search cache agrees with the queue, and the
    /// congestion window stays within its bounds.
    pub(crate) fn check_requester(&self, max_unacked_psns: u32) -> Result<(), Broken> {
        let sq = &self.sq;
        let qp_type = self.qp_type();
        ensure!(
            sq.len() <= self.init.cap.max_send_wr as usize,
            "the send queue holds at most max_send_wr WQEs (post_send refuses more)",
            "{} WQEs, max_send_wr {}",
            sq.len(),
            self.init.cap.max_send_wr
        );
        let prefix = sq.sent_prefix();
        ensure!(
            prefix <= sq.len(),
            "the requester's search starts within the send queue",
            "search starts at WQE {prefix} of {}",
            sq.len()
        );
        // One pass, oldest first. The PSN the next started WQE must begin at, once one has.
        let mut chain: Option<softib_wire::Psn> = None;
        let mut unstarted = None;
        for (i, w) in sq.iter().enumerate() {
            if i < prefix {
                ensure!(
                    w.status().is_some() || (w.first_psn().is_some() && w.sent() >= w.npkts()),
                    "every WQE before the requester's search start is finished or wholly sent",
                    "search starts at WQE {prefix}; WQE {i} has sent {} of {}",
                    w.sent(),
                    w.npkts()
                );
            }
            let Some(first) = w.first_psn() else {
                ensure!(
                    w.npkts() == 0 && w.sent() == 0 && w.acked() == 0,
                    "a WQE that has not started holds no PSNs",
                    "WQE {i} has no first PSN but npkts {} sent {} acked {}",
                    w.npkts(),
                    w.sent(),
                    w.acked()
                );
                unstarted.get_or_insert(i);
                continue;
            };
            ensure!(
                unstarted.is_none(),
                "WQEs start in posting order",
                "WQE {i} started at PSN {first} after WQE {} that has not",
                unstarted.unwrap_or_default()
            );
            if let Some(expected) = chain {
                ensure!(
                    first == expected,
                    "started WQEs take consecutive PSNs",
                    "WQE {i} starts at PSN {first}; the WQE before it ends before {expected}"
                );
            }
            chain = Some(first.add(w.npkts()));
            // IBA §9.8: UC and UD are unacknowledged; a WQE completes when its last packet
            // is sent, so only the oldest one can have started.
            ensure!(
                qp_type == QpType::Rc || (i == 0 && w.acked() == 0),
                "UC and UD acknowledge nothing and send one WQE at a time",
                "WQE {i} started, acked {}",
                w.acked()
            );
            ensure!(
                w.npkts() >= 1 && w.seg() >= 1 && (!w.is_atomic() || w.npkts() == 1),
                "a started WQE occupies at least one PSN (an atomic exactly one) in segments of at least a byte",
                "WQE {i}: npkts {} seg {}",
                w.npkts(),
                w.seg()
            );
            ensure!(
                w.sent() <= w.npkts() && w.acked() <= w.npkts(),
                "a WQE's sent and acknowledged PSNs are among its own",
                "WQE {i}: sent {} acked {} of npkts {}",
                w.sent(),
                w.acked(),
                w.npkts()
            );
            if w.status().is_some() {
                continue;
            }
            if w.is_read() {
                // The request asks for every response not yet received (IBA §9.7.5.2.4): it is
                // out (`sent` covers all the READ's PSNs), or it is to be sent again — and
                // responses to the earlier request may still arrive meanwhile.
                ensure!(
                    w.sent() == w.npkts() || w.sent() <= w.acked(),
                    "an unfinished READ's request is out, or is to be sent again from its first missing response",
                    "WQE {i}: sent {} acked {} of npkts {}",
                    w.sent(),
                    w.acked(),
                    w.npkts()
                );
            } else {
                ensure!(
                    w.acked() <= w.sent(),
                    "only PSNs that were sent are acknowledged",
                    "WQE {i}: sent {} acked {} of npkts {}",
                    w.sent(),
                    w.acked(),
                    w.npkts()
                );
            }
        }
        if let Some(end) = chain {
            ensure!(
                end == sq.next_psn(),
                "the newest started WQE ends where the next one will start (next_psn)",
                "it ends before PSN {end}, next_psn is {}",
                sq.next_psn()
            );
        }
        if let Some(oldest) = sq.oldest_unacked() {
            let outstanding = crate::invariant::behind(oldest, sq.next_psn());
            ensure!(
                outstanding <= crate::invariant::PSN_WINDOW,
                "at most 2^23 PSNs are outstanding, so that the responder tells duplicates from new requests (IBA §9.7.1, the valid region)",
                "{outstanding} PSNs from the oldest unacknowledged, {oldest}, to next_psn {}",
                sq.next_psn()
            );
        }
        if let Some(c) = sq.cwnd() {
            ensure!(
                qp_type == QpType::Rc,
                "only RC has a congestion window (its losses shrink it)",
                "cwnd {c}"
            );
            let floor = super::send_queue::MIN_CWND.min(max_unacked_psns);
            ensure!(
                (floor..=max_unacked_psns).contains(&c),
                "the congestion window stays between its floor and the PSN window",
                "cwnd {c}, floor {floor}, max_unacked_psns {max_unacked_psns}"
            );
        }
        Ok(())
    }
}

/// The RNR NAK syndrome this QP's responder sends.
pub(crate) fn rnr_syndrome(min_rnr_timer: u8) -> Syndrome {
    Syndrome::RnrNak {
        timer: min_rnr_timer & 0x1F,
    }
}

/// How long an RNR NAK with `timer` asks the requester to wait.
pub(crate) fn rnr_wait(timer: u8) -> Duration {
    Duration::from_micros(u64::from(aeth::rnr_timer_usec(timer)))
}
