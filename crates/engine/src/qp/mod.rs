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
mod send_queue;

use std::collections::VecDeque;

use softib_wire::Qpn;

use crate::time::Instant;
use crate::verbs::{QpState, QpType, RecvWr, WcStatus};

use crate::{CqHandle, PdHandle, SrqHandle};
pub(crate) use send_queue::{SendQueue, SendWqe};

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

impl QpCap {
    /// What a QP created for these sizes gets, as rxe gives it (`rxe_qp_init_req`): a send
    /// WQE holds `max_send_sge` SGEs of 16 bytes or `max_inline_data` bytes, whichever is
    /// more, and each of the two is raised to what the WQE holds. Programs count on it:
    /// rdma-core's rdma_xclient asks for no inline data and one SGE, then sends 16 bytes
    /// inline.
    pub fn as_created(self) -> QpCap {
        const SGE_LEN: u32 = 16;
        let wqe = self
            .max_send_sge
            .saturating_mul(SGE_LEN)
            .max(self.max_inline_data);
        QpCap {
            max_send_sge: self.max_send_sge.max(wqe / SGE_LEN),
            max_inline_data: wqe,
            ..self
        }
    }
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
            init: QpInitAttr {
                cap: init.cap.as_created(),
                ..init
            },
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
        self.sq.len()
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
        self.sq.flush_in_order();
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
        self.sq.flush_unfinished();
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

    /// Checks the QP's invariants — its own, then the requester's, the completer's and the
    /// responder's (see `crate::invariant`).
    pub(crate) fn check_invariants(
        &self,
        transport: &crate::config::TransportConfig,
    ) -> Result<(), crate::invariant::InvariantViolation> {
        use crate::invariant::InvariantViolation;
        let v = |role| move |b| InvariantViolation::new(self, role, b);
        self.check_queues().map_err(v("queue pair"))?;
        self.check_requester(transport.max_unacked_psns)
            .map_err(v("requester"))?;
        self.check_completer().map_err(v("completer"))?;
        self.check_responder().map_err(v("responder"))?;
        Ok(())
    }

    /// The QP's own invariants: send work only where it can run, receive queues within
    /// their limits and flushed in ERR.
    fn check_queues(&self) -> Result<(), crate::invariant::Broken> {
        use crate::invariant::ensure;
        ensure!(
            self.sq.len() == 0 || matches!(self.state, QpState::Rts | QpState::Sqd),
            "only a QP in RTS or SQD holds send WQEs (posting needs RTS or SQD; ERR and SQE flush them at once)",
            "{} send WQEs",
            self.sq.len()
        );
        match self.init.srq {
            Some(_) => ensure!(
                self.rq.is_empty(),
                "a QP that receives from an SRQ has no receive WQEs of its own",
                "{} receive WQEs",
                self.rq.len()
            ),
            None => ensure!(
                self.rq.len() <= self.init.cap.max_recv_wr as usize,
                "the receive queue holds at most max_recv_wr WQEs (post_recv refuses more)",
                "{} receive WQEs, max_recv_wr {}",
                self.rq.len(),
                self.init.cap.max_recv_wr
            ),
        }
        ensure!(
            self.state != QpState::Err || self.rq.is_empty(),
            "a QP in ERR flushes every receive WQE at once",
            "{} receive WQEs",
            self.rq.len()
        );
        Ok(())
    }

    /// The send queue and the responder in one line, for an invariant's report.
    pub(crate) fn state_summary(&self) -> String {
        use std::fmt::Write;
        const SHOWN: usize = 12;
        let sq = &self.sq;
        let mut s = format!(
            "send queue {{ next_psn {}, retransmit_at {:?}, rnr_until {:?}, cwnd {:?}, search from {}, {} WQEs:",
            sq.next_psn(),
            sq.retransmit_at(),
            sq.rnr_until(),
            sq.cwnd(),
            sq.sent_prefix(),
            sq.len()
        );
        for w in sq.iter().take(SHOWN) {
            let _ = write!(s, " [{:?}", w.wr().opcode.wc_opcode());
            if let Some(first) = w.first_psn() {
                let _ = write!(
                    s,
                    " PSN {first}+{} sent {} acked {}",
                    w.npkts(),
                    w.sent(),
                    w.acked()
                );
            }
            if let Some(status) = w.status() {
                let _ = write!(s, " {status}");
            }
            s.push(']');
        }
        if sq.len() > SHOWN {
            let _ = write!(s, " ...");
        }
        let r = &self.resp;
        let _ = write!(
            s,
            " }}, responder {{ ePSN {}, MSN {}, resources {:?}, {} responses queued, message in progress: {}, receive WQEs {} }}",
            r.epsn,
            r.msn,
            r.resources,
            r.outputs.len(),
            r.cur.is_some(),
            self.rq.len()
        );
        s
    }

    /// The earliest timer of this QP.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.sq.deadline()
    }
}
