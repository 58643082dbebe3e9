//! Queue pairs: state, queues, and the three transport roles.
//!
//! A QP owns its send queue ([`SendQueue`], worked by the [`requester`] and retired by the
//! [`completer`]) and its responder state ([`responder`]). The roles never set each other's
//! flags: the completer tells the send queue what was acknowledged ("acked through PSN n",
//! "rewind to PSN n", "wait for the RNR timer until t") through methods on [`SendQueue`], and
//! the requester reads only the send queue.

pub mod attr;
pub mod completer;
pub mod requester;
pub mod responder;

use std::collections::VecDeque;

use softib_wire::{Psn, Qpn};

use crate::time::Instant;
use crate::verbs::{QpState, QpType, RecvWr, SendWr, WcStatus, WrOpcode};
use crate::{CqHandle, PdHandle, SrqHandle};

pub use attr::{AddressVector, AttrMask, GlobalRoute, ModifyQpError, QpAttr};

/// The sizes a QP was created with (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpCap {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Largest inline send.
    pub max_inline_data: u32,
}

/// How a QP is created (`struct ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpInitAttr {
    /// The transport.
    pub qp_type: QpType,
    /// The protection domain.
    pub pd: PdHandle,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// The shared receive queue, if receives come from one.
    pub srq: Option<SrqHandle>,
    /// Queue sizes.
    pub cap: QpCap,
    /// Whether every send WR generates a completion (otherwise only `SIGNALED` ones).
    pub sq_sig_all: bool,
}

/// One send work queue element and its progress.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    pub wr: SendWr,
    /// Message length: bytes sent, or bytes to read, or 8 for atomics.
    pub len: u32,
    /// Whether a successful completion is reported.
    pub signaled: bool,
    /// The first PSN, once assigned (when the WQE first starts transmitting).
    pub first_psn: Option<Psn>,
    /// How many PSNs the WQE occupies: request packets, or READ response packets.
    pub npkts: u32,
    /// The payload bytes per request packet, fixed when the WQE starts: the path MTU, or
    /// [`crate::IN_PROCESS_SEGMENT`] for an RC SEND or WRITE of an in-process QP.
    pub seg: u32,
    /// How many of its PSNs have been transmitted (READ: `npkts` once the request is out).
    pub sent: u32,
    /// How many of its PSNs are acknowledged (READ: response packets received in order).
    pub acked: u32,
    /// READ: the packet index at which the current response message starts (0, or where a
    /// retried READ asked the responder to resume).
    pub read_restart: u32,
    /// The completion status once the WQE is finished.
    pub status: Option<WcStatus>,
    /// Extra detail for an error completion (`vendor_err`).
    pub vendor_err: u32,
}

impl SendWqe {
    pub fn is_read_or_atomic(&self) -> bool {
        self.wr.opcode.is_read_or_atomic()
    }
    pub fn is_read(&self) -> bool {
        matches!(self.wr.opcode, WrOpcode::RdmaRead(_))
    }
    /// Whether `psn` is one of the WQE's PSNs.
    pub fn contains(&self, psn: Psn) -> bool {
        self.first_psn.is_some_and(|f| psn.in_window(f, self.npkts))
    }
}

/// The send queue and the requester's position in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendQueue {
    /// Posted WQEs not yet retired, oldest first.
    pub wqes: VecDeque<SendWqe>,
    /// The PSN the next not-yet-started WQE gets.
    pub next_psn: Psn,
    /// Retries left for timeouts and sequence errors.
    pub retry_left: u8,
    /// RNR retries left (ignored when the QP's rnr_retry is 7, "infinite").
    pub rnr_retry_left: u8,
    /// Until when an RNR NAK holds the requester back.
    pub rnr_until: Option<Instant>,
    /// When the local ACK timeout fires, while PSNs are outstanding.
    pub retransmit_at: Option<Instant>,
    /// How many WQEs have been retired (a progress measure).
    pub completed_count: u64,
    /// Acknowledged packets and completed WQEs, counted as the completer records them: what
    /// tells it that a response made forward progress without scanning the queue.
    pub progress: u64,
    /// SQD was entered with work in progress: the SQ Drained event is still due.
    pub drain_pending: bool,
    /// How many WQEs at the head are finished or have every packet sent, as the requester
    /// last found them: where its search for the next packet starts, instead of at the
    /// head of up to `max_send_wr` WQEs in flight (it was 14% of a busy daemon). Only a
    /// rewind (go-back-N) makes such a WQE sendable again, and resets it; retiring one
    /// lowers it.
    pub sent_prefix: std::cell::Cell<usize>,
    /// The congestion window in packets (`None`: the full PSN window). A soft HCA's "wire"
    /// is a socket buffer that overflows when many QPs send at once; go-back-N then resends
    /// everything in flight, which overflows it again. Halving the window on each loss and
    /// growing it by one per acknowledgement that makes progress (AIMD, as TCP and RoCE's
    /// DCQCN do in spirit) lets the aggregate settle below what the receiver drains.
    pub cwnd: Option<u32>,
}

/// The smallest congestion window.
pub(crate) const MIN_CWND: u32 = 2;

impl SendQueue {
    /// The window the requester may fill: the congestion window within the PSN window.
    pub fn window(&self, max: u32) -> u32 {
        self.cwnd.map_or(max, |c| c.min(max)).max(1)
    }

    /// A loss: halve the window.
    pub fn on_loss(&mut self, max: u32) {
        self.cwnd = Some((self.window(max) / 2).max(MIN_CWND.min(max)));
    }

    /// Progress: widen the window by one, up to the PSN window (then no limit is kept).
    pub fn on_progress(&mut self, max: u32) {
        if let Some(c) = self.cwnd {
            self.cwnd = (c + 1 < max).then_some(c + 1);
        }
    }

    /// The oldest PSN that is transmitted but not acknowledged, if any.
    pub fn una(&self) -> Option<Psn> {
        for w in &self.wqes {
            let first = w.first_psn?;
            if w.status.is_some() {
                continue;
            }
            if w.acked < w.sent {
                return Some(first.add(w.acked));
            }
            if w.acked < w.npkts {
                return None;
            }
        }
        None
    }

    /// Whether a WQE has started and not finished: what SQD waits for before the SQ is
    /// drained (a WQE partly sent, even with every sent PSN acknowledged, is still going).
    pub fn in_progress(&self) -> bool {
        self.wqes
            .iter()
            .any(|w| w.status.is_none() && w.first_psn.is_some())
    }

    /// Whether any transmitted PSN is unacknowledged.
    pub fn has_outstanding(&self) -> bool {
        self.wqes
            .iter()
            .any(|w| w.status.is_none() && w.first_psn.is_some() && w.acked < w.sent)
    }
}

/// A receive WQE in use by a SEND message in progress.
#[derive(Debug, Clone)]
pub(crate) struct ActiveRecv {
    pub wr: RecvWr,
    /// Bytes of the message placed so far.
    pub offset: u32,
    /// Whether the WQE came from the SRQ (so it is not flushed with the QP).
    pub from_srq: bool,
}

/// A queue pair.
#[derive(Debug, Clone)]
pub struct Qp {
    /// The QP number.
    pub qpn: Qpn,
    /// Creation attributes.
    pub init: QpInitAttr,
    /// Current state.
    pub state: QpState,
    /// Current attributes.
    pub attr: QpAttr,
    pub(crate) sq: SendQueue,
    pub(crate) rq: VecDeque<RecvWr>,
    pub(crate) resp: responder::Responder,
    /// Whether the QP is in the HCA's transmit schedule.
    pub(crate) scheduled: bool,
    /// The deadline the HCA's timer set holds for this QP.
    pub(crate) armed: Option<Instant>,
    /// The link said the peer is an engine of this process (`Hca::set_in_process`): RC
    /// SENDs and WRITEs go in large segments, and payloads by reference.
    pub(crate) in_process: bool,
}

impl Qp {
    pub(crate) fn new(qpn: Qpn, init: QpInitAttr) -> Qp {
        Qp {
            qpn,
            init,
            state: QpState::Reset,
            attr: QpAttr::default(),
            sq: SendQueue::default(),
            rq: VecDeque::new(),
            resp: responder::Responder::default(),
            scheduled: false,
            armed: None,
            in_process: false,
        }
    }

    /// The QP's transport.
    pub fn qp_type(&self) -> QpType {
        self.init.qp_type
    }

    /// Posted send WQEs not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.sq.wqes.len()
    }

    /// Posted receive WQEs not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.rq.len()
    }

    /// Moves the QP to the error state (IBA §10.3.1): every outstanding send and receive WQE
    /// completes with `WR_FLUSH_ERR` (a WQE that already has an error status keeps it), timers
    /// stop, and nothing more is sent — except `final_nak`, the NAK that reports why a
    /// responder failed, which still goes out.
    pub(crate) fn enter_error<M: crate::memory::Memory>(
        &mut self,
        res: &mut crate::res::Resources<M>,
        final_nak: Option<responder::Response>,
    ) {
        self.state = QpState::Err;
        // Completions come in order: after the first error every later WQE is flushed, even
        // one whose data already arrived (a READ answered after an earlier atomic failed).
        let mut failed = false;
        for w in self.sq.wqes.iter_mut() {
            match w.status {
                None => w.status = Some(WcStatus::WrFlushErr),
                Some(WcStatus::Success) if failed => w.status = Some(WcStatus::WrFlushErr),
                Some(WcStatus::Success) => {}
                Some(_) => failed = true,
            }
            if w.status == Some(WcStatus::WrFlushErr) {
                failed = true;
            }
        }
        self.retire(res);
        self.flush_receives(res);
        // IBA §11.6.3.1, Last WQE Reached (IBV_EVENT_QP_LAST_WQE_REACHED): a QP attached to an
        // SRQ that enters the error state will take no more WQEs from the SRQ (the one it was
        // filling has just been flushed); the application waits for this before destroying
        // it. Nothing raised it before.
        if self.init.srq.is_some() {
            res.events
                .push_back(crate::verbs::AsyncEvent::QpLastWqeReached(self.qpn));
        }
        self.sq.retransmit_at = None;
        self.sq.rnr_until = None;
        self.resp.outputs.clear();
        self.resp.resources.clear();
        if let Some(nak) = final_nak {
            self.resp.outputs.push_back(nak);
        }
    }

    /// Completes every receive WQE of the QP (and one a SEND was filling) with a flush error.
    pub(crate) fn flush_receives<M: crate::memory::Memory>(
        &mut self,
        res: &mut crate::res::Resources<M>,
    ) {
        let mut flushed: Vec<RecvWr> = Vec::new();
        if let Some(responder::InMessage::Send(r)) = self.resp.cur.take() {
            flushed.push(r.wr);
        }
        flushed.extend(self.rq.drain(..));
        for wr in flushed {
            let wc = crate::verbs::WorkCompletion {
                wr_id: wr.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: crate::verbs::WcOpcode::Recv,
                vendor_err: 0,
                byte_len: 0,
                imm_data: None,
                invalidated_rkey: None,
                qp_num: self.qpn,
                src_qp: Qpn::new(0),
                grh: false,
                slid: softib_wire::Lid(0),
                sl: 0,
                pkey_index: self.attr.pkey_index,
            };
            res.complete(self.init.recv_cq, wc, false);
        }
    }

    /// UC/UD: a send error moves only the send queue to the error state (SQE, IBA §10.3.1);
    /// the failed WQE and every later one complete, receives go on.
    pub(crate) fn enter_sq_error<M: crate::memory::Memory>(
        &mut self,
        res: &mut crate::res::Resources<M>,
    ) {
        self.state = QpState::Sqe;
        for w in self.sq.wqes.iter_mut() {
            if w.status.is_none() {
                w.status = Some(WcStatus::WrFlushErr);
            }
        }
        self.retire(res);
    }

    /// Resets every queue and counter (the RESET state).
    pub(crate) fn reset(&mut self) {
        self.sq = SendQueue::default();
        self.rq.clear();
        self.resp = responder::Responder::default();
        // A new connection may lead elsewhere: the link marks it again when it sees where.
        self.in_process = false;
    }

    /// The earliest timer of this QP.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match (self.sq.retransmit_at, self.sq.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}
