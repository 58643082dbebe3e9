//! `softib-cm` — the InfiniBand Communication Manager (IBA vol 1 chapter 12) as a sans-IO
//! state machine.
//!
//! [`Cm`] is the CM of one port as one agent sees it: it keeps the connections that agent
//! makes (active side, [`Cm::connect`]) and accepts (passive side, [`Cm::listen`] and
//! [`Cm::accept`]), and speaks the chapter's protocol for them: REQ → REP → RTU to set up,
//! MRA for "more time", REJ with a reason, DREQ → DREP to tear down, TimeWait, and SIDR for
//! UD services. It never touches a socket or a clock, as the engine does not:
//!
//! - inputs: [`Cm::handle_mad`]`(now, from, mad)` for each CM MAD that arrives, the
//!   consumer's calls (`connect`, `accept`, `reject`, `ready_to_use`, `disconnect`, ...),
//!   and [`Cm::handle_timeout`]`(now)`;
//! - outputs: [`Cm::poll_transmit`] (MADs to send, each to the address it came from or the
//!   connection's peer), [`Cm::poll_event`] (what the consumer must hear: a connection
//!   request, the peer's REP, established, rejected with its reason, timed out,
//!   disconnected), [`Cm::poll_timeout`] (when to call `handle_timeout` next).
//!
//! `now` is a [`Duration`] since an arbitrary origin; `A` is whatever names a peer for the
//! caller (a GID and QPN 1 on RoCE, a LID on IB): the machine only compares and returns it.
//!
//! The machine follows IBA §12.9's state diagram where it matters on a lossy fabric:
//! every request (REQ, REP, DREQ, SIDR_REQ) is retransmitted after the peer's CM response
//! timeout until `max_cm_retries` is spent, then the connection fails with a REJ (reason
//! Timeout) and an event; a duplicate REQ gets the REP again (or an MRA while the consumer
//! decides); a duplicate REP gets the RTU again; a duplicate DREQ gets the DREP again (from
//! TimeWait); a REQ from a QP that is connected here already is rejected as a stale
//! connection; a REQ for a service nobody listens on is rejected at once (InvalidServiceID);
//! a REQ beyond a listener's backlog is rejected with NoResources; a REQ no QP could take is
//! rejected naming the field (InvalidTransportType, InvalidMTU). Malformed MADs (not 256
//! bytes, another ClassVersion or method, an attribute that is no message, LAP and APR
//! included) are dropped and counted ([`Counters`]); a message for an unknown connection is
//! answered the way the spec says (REJ InvalidCommID for a REP, DREP for a DREQ) or dropped,
//! and counted.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod rdma_cm;
mod receive;

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub use softib_wire::mad::cm::{
    self as msg, CmaAddrs, CmaHeader, Drep, Dreq, Message, MessageKind, Mra, Path, PortSpace, Rej,
    RejectReason, Rep, Req, Rtu, SidrRep, SidrReq, SidrStatus, TransportService,
};
use softib_wire::mad::cm::{private_len, ARI_LEN};
use softib_wire::mad::MAD_LEN;
use softib_wire::psn::Psn;
use softib_wire::types::{Guid, PKey, QKey, Qpn};

/// A local communication ID: names one connection of this [`Cm`] (and a SIDR request).
pub type CommId = u32;

/// A CM timeout exponent as the messages carry it: 4.096 µs × 2^`exp`.
pub fn cm_timeout(exp: u8) -> Duration {
    Duration::from_nanos(4096u64 << exp.min(31))
}

/// The machine's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// This CA's GUID, sent in REQ and REP.
    pub local_ca_guid: Guid,
    /// Where communication IDs start (a random value, so that a restarted agent does not
    /// reuse the IDs of its previous life).
    pub first_comm_id: u32,
    /// How long this side takes to answer, the exponent sent in REQs (rdma_cm: 20).
    pub response_timeout: u8,
    /// Retries of each request this side sends (rdma_cm: 15).
    pub max_cm_retries: u8,
    /// How long a connection stays in TimeWait, answering duplicate DREQs.
    pub time_wait: Duration,
    /// The service timeout an MRA asks for (exponent).
    pub mra_service_timeout: u8,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            local_ca_guid: Guid(0),
            first_comm_id: 1,
            response_timeout: 20,
            max_cm_retries: 15,
            time_wait: Duration::from_millis(500),
            mra_service_timeout: 20,
        }
    }
}

/// What the active side puts in its REQ.
#[derive(Debug, Clone, Copy)]
pub struct ConnectParams {
    /// The service to reach ([`msg::service_id`]).
    pub service_id: u64,
    /// The QP to connect.
    pub local_qpn: Qpn,
    /// Its first PSN.
    pub starting_psn: Psn,
    /// RDMA read/atomic responder resources offered.
    pub responder_resources: u8,
    /// RDMA read/atomic operations outstanding at once.
    pub initiator_depth: u8,
    /// RC or UC.
    pub transport: TransportService,
    /// The partition.
    pub pkey: PKey,
    /// Path MTU code.
    pub path_mtu: u8,
    /// Transport retry count.
    pub retry_count: u8,
    /// RNR retry count.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// The path.
    pub primary: Path,
    /// Private data (rdma_cm's header first, for the IP port spaces).
    pub private_data: [u8; private_len::REQ],
}

/// What the passive side puts in its REP.
#[derive(Debug, Clone, Copy)]
pub struct AcceptParams {
    /// The QP that takes the connection.
    pub local_qpn: Qpn,
    /// Its first PSN.
    pub starting_psn: Psn,
    /// RDMA read/atomic responder resources offered.
    pub responder_resources: u8,
    /// RDMA read/atomic operations outstanding at once.
    pub initiator_depth: u8,
    /// RNR retry count the requester should use.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ.
    pub srq: bool,
    /// Private data.
    pub private_data: [u8; private_len::REP],
}

/// What the consumer must hear.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a MAD's worth; events are moved out one at a time
pub enum Event<A> {
    /// A REQ for a service this side listens on: [`Cm::accept`] or [`Cm::reject`] it.
    ConnectRequest {
        /// The connection it would be.
        id: CommId,
        /// Who sent it.
        from: A,
        /// The REQ.
        req: Req,
    },
    /// Active side: the responder's REP. Ready the QP (RTR, RTS) and call
    /// [`Cm::ready_to_use`], or [`Cm::reject`].
    Reply {
        /// The connection.
        id: CommId,
        /// The REP.
        rep: Rep,
    },
    /// The connection is established (RTU sent on the active side, received on the passive
    /// side, or [`Cm::establish`]).
    Established {
        /// The connection.
        id: CommId,
    },
    /// The peer rejected the connection.
    Rejected {
        /// The connection.
        id: CommId,
        /// Why.
        reason: RejectReason,
        /// The REJ's private data.
        private_data: [u8; private_len::REJ],
    },
    /// No answer after every retry: the connection attempt (REQ or REP) failed; a REJ with
    /// reason Timeout has been sent.
    TimedOut {
        /// The connection.
        id: CommId,
        /// Whether it was this side's REQ (active) or REP (passive) that went unanswered.
        active: bool,
    },
    /// The connection is released: the peer's DREQ arrived (and was answered), or this
    /// side's DREQ was answered or went unanswered through every retry.
    Disconnected {
        /// The connection.
        id: CommId,
    },
    /// The connection left TimeWait; its ID is forgotten.
    TimeWaitExit {
        /// The connection.
        id: CommId,
    },
    /// A SIDR_REQ for a service this side listens on: answer with [`Cm::sidr_reply`].
    SidrRequest {
        /// The request's handle here.
        id: CommId,
        /// Who sent it.
        from: A,
        /// The request.
        req: SidrReq,
    },
    /// The answer to this side's SIDR_REQ.
    SidrReply {
        /// The request.
        id: CommId,
        /// The answer.
        rep: SidrRep,
    },
    /// This side's SIDR_REQ went unanswered through every retry.
    SidrTimedOut {
        /// The request.
        id: CommId,
    },
}

/// Why a consumer call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No connection (or listener) by that ID.
    NotFound,
    /// The connection is not in a state where that call means anything.
    WrongState,
    /// Something listens on the service ID already.
    InUse,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Error::NotFound => "no such CM connection or listener",
            Error::WrongState => "the CM connection is not in a state that allows this",
            Error::InUse => "the service ID is listened on already",
        })
    }
}

impl std::error::Error for Error {}

/// What the machine dropped or answered on its own, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// MADs that did not parse as CM messages (wrong length, class version, method,
    /// attribute, or a field out of range).
    pub malformed: u64,
    /// Messages naming a communication ID this side does not have (or from the wrong peer).
    pub unknown_comm_id: u64,
    /// Messages that do not fit the connection's state (counted, then dropped).
    pub wrong_state: u64,
    /// Duplicate REQs (answered with the REP or an MRA).
    pub duplicate_req: u64,
    /// Duplicate REPs (answered with the RTU again).
    pub duplicate_rep: u64,
    /// Duplicate DREQs (answered with the DREP again).
    pub duplicate_dreq: u64,
    /// REQs for services nobody listens on (rejected: InvalidServiceID).
    pub no_listener: u64,
    /// REQs beyond a listener's backlog (rejected: NoResources).
    pub backlog_full: u64,
    /// REQs from a QP connected here already (rejected: StaleConnection).
    pub stale: u64,
    /// REQs asking for what no QP can be (rejected: InvalidTransportType for a transport
    /// other than RC and UC, InvalidMTU for a path MTU code outside 256–4096 bytes).
    pub invalid_req: u64,
    /// Requests sent again after a timeout.
    pub retransmits: u64,
    /// Connection attempts and DREQs given up after every retry.
    pub timeouts: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: the REQ was MRA'd; waiting longer for REP.
    RepWait,
    /// Active: REP received; the consumer readies its QP.
    RepRcvd,
    /// Passive: REQ received; the consumer decides.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Both: established.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Released; duplicate DREQs are answered until the deadline.
    TimeWait,
}

#[derive(Debug, Clone, Copy)]
struct Retx {
    deadline: Duration,
    interval: Duration,
    left: u8,
}

#[derive(Debug, Clone)]
struct Conn<A> {
    peer: A,
    state: State,
    active: bool,
    remote_comm_id: u32,
    remote_ca_guid: Guid,
    remote_qpn: Qpn,
    local_qpn: Qpn,
    /// The listener whose backlog this connection counts against (passive, ReqRcvd).
    listener: Option<u64>,
    /// How long the peer takes to answer, and how often to retry what we send it.
    peer_timeout: Duration,
    peer_retries: u8,
    /// The last message sent, for retransmission and for answering duplicates.
    last: Option<[u8; MAD_LEN]>,
    retx: Option<Retx>,
    time_wait_until: Option<Duration>,
}

#[derive(Debug, Clone, Copy)]
struct Listener {
    backlog: usize,
    pending: usize,
}

#[derive(Debug, Clone)]
struct SidrOut<A> {
    peer: A,
    mad: [u8; MAD_LEN],
    retx: Retx,
}

/// The Communication Manager of one agent on one port. See the crate documentation.
#[derive(Debug)]
pub struct Cm<A> {
    config: Config,
    next_comm_id: u32,
    next_tid: u64,
    conns: BTreeMap<CommId, Conn<A>>,
    listeners: BTreeMap<u64, Listener>,
    sidr_out: BTreeMap<CommId, SidrOut<A>>,
    /// SIDR requests the consumer has not answered: handle → (peer, request ID, service).
    sidr_in: BTreeMap<CommId, (A, u32, u64)>,
    transmit: VecDeque<(A, [u8; MAD_LEN])>,
    events: VecDeque<Event<A>>,
    counters: Counters,
}

impl<A: Copy + Ord + std::fmt::Debug> Cm<A> {
    /// A CM with no connections and no listeners.
    pub fn new(config: Config) -> Cm<A> {
        Cm {
            next_comm_id: config.first_comm_id.max(1),
            next_tid: u64::from(config.first_comm_id) << 32,
            config,
            conns: BTreeMap::new(),
            listeners: BTreeMap::new(),
            sidr_out: BTreeMap::new(),
            sidr_in: BTreeMap::new(),
            transmit: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// What was dropped or answered on the machine's own, so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// How many connections (in any state, TimeWait included) the machine holds.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Whether connection `id` is established.
    pub fn is_established(&self, id: CommId) -> bool {
        self.conns
            .get(&id)
            .is_some_and(|c| c.state == State::Established)
    }

    /// Whether MADs wait to be sent.
    pub fn has_transmit(&self) -> bool {
        !self.transmit.is_empty()
    }

    /// The next MAD to send, and to whom.
    pub fn poll_transmit(&mut self) -> Option<(A, [u8; MAD_LEN])> {
        self.transmit.pop_front()
    }

    /// The next event for the consumer.
    pub fn poll_event(&mut self) -> Option<Event<A>> {
        self.events.pop_front()
    }

    /// When [`Cm::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Duration> {
        let conns = self
            .conns
            .values()
            .filter_map(|c| c.retx.map(|r| r.deadline).or(c.time_wait_until));
        let sidr = self.sidr_out.values().map(|s| s.retx.deadline);
        conns.chain(sidr).min()
    }

    /// Listens for REQs (and SIDR_REQs) to `service_id`, with at most `backlog` requests
    /// waiting for the consumer's answer at a time.
    pub fn listen(&mut self, service_id: u64, backlog: usize) -> Result<(), Error> {
        if self.listeners.contains_key(&service_id) {
            return Err(Error::InUse);
        }
        self.listeners.insert(
            service_id,
            Listener {
                backlog: backlog.max(1),
                pending: 0,
            },
        );
        Ok(())
    }

    /// Stops listening on `service_id`; requests already delivered stay.
    pub fn unlisten(&mut self, service_id: u64) -> Result<(), Error> {
        self.listeners
            .remove(&service_id)
            .map(|_| ())
            .ok_or(Error::NotFound)
    }

    fn alloc_comm_id(&mut self) -> CommId {
        loop {
            let id = self.next_comm_id;
            self.next_comm_id = self.next_comm_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id)
                && !self.sidr_out.contains_key(&id)
                && !self.sidr_in.contains_key(&id)
            {
                return id;
            }
        }
    }

    fn send(&mut self, to: A, m: &Message) -> [u8; MAD_LEN] {
        let tid = self.next_tid;
        self.next_tid = self.next_tid.wrapping_add(1);
        let mad = m.emit(tid);
        self.transmit.push_back((to, mad));
        mad
    }

    fn retx(&self, now: Duration, interval: Duration, left: u8) -> Option<Retx> {
        Some(Retx {
            deadline: now + interval,
            interval,
            left,
        })
    }

    /// Active side: sends a REQ to `to`. The answer comes as [`Event::Reply`],
    /// [`Event::Rejected`] or [`Event::TimedOut`].
    pub fn connect(&mut self, now: Duration, to: A, p: &ConnectParams) -> CommId {
        let id = self.alloc_comm_id();
        let req = Req {
            local_comm_id: id,
            vendor_id: 0,
            service_id: p.service_id,
            local_ca_guid: self.config.local_ca_guid,
            local_qkey: QKey(0),
            local_qpn: p.local_qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: self.config.response_timeout,
            transport_service: p.transport,
            end_to_end_flow_control: true,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: self.config.response_timeout,
            retry_count: p.retry_count,
            pkey: p.pkey,
            path_mtu: p.path_mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: self.config.max_cm_retries,
            srq: p.srq,
            extended_transport: 0,
            primary: p.primary,
            alternate: Path::default(),
            private_data: p.private_data,
        };
        let mad = self.send(to, &Message::Req(req));
        let interval = cm_timeout(self.config.response_timeout);
        let retx = self.retx(now, interval, self.config.max_cm_retries);
        self.conns.insert(
            id,
            Conn {
                peer: to,
                state: State::ReqSent,
                active: true,
                remote_comm_id: 0,
                remote_ca_guid: Guid(0),
                remote_qpn: Qpn::new(0),
                local_qpn: p.local_qpn,
                listener: None,
                peer_timeout: interval,
                peer_retries: self.config.max_cm_retries,
                last: Some(mad),
                retx,
                time_wait_until: None,
            },
        );
        id
    }

    fn conn_mut(&mut self, id: CommId) -> Result<&mut Conn<A>, Error> {
        self.conns.get_mut(&id).ok_or(Error::NotFound)
    }

    /// Passive side: answers connection request `id` with a REP.
    pub fn accept(&mut self, now: Duration, id: CommId, p: &AcceptParams) -> Result<(), Error> {
        let guid = self.config.local_ca_guid;
        let c = self.conn_mut(id)?;
        if c.state != State::ReqRcvd {
            return Err(Error::WrongState);
        }
        let rep = Rep {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            local_qkey: QKey(0),
            local_qpn: p.local_qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            target_ack_delay: 0,
            failover_accepted: 1,
            end_to_end_flow_control: true,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            vendor_id: 0,
            local_ca_guid: guid,
            private_data: p.private_data,
        };
        c.local_qpn = p.local_qpn;
        let (peer, interval, left, listener) =
            (c.peer, c.peer_timeout, c.peer_retries, c.listener.take());
        self.release_backlog(listener);
        let mad = self.send(peer, &Message::Rep(rep));
        let retx = self.retx(now, interval, left);
        let c = self.conn_mut(id)?;
        c.state = State::RepSent;
        c.last = Some(mad);
        c.retx = retx;
        Ok(())
    }

    /// Released: duplicate DREQs are answered until `config.time_wait` has passed.
    fn enter_time_wait(&mut self, now: Duration, id: CommId) {
        let until = now + self.config.time_wait;
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = State::TimeWait;
            c.retx = None;
            c.time_wait_until = Some(until);
        }
    }

    fn release_backlog(&mut self, listener: Option<u64>) {
        if let Some(l) = listener.and_then(|s| self.listeners.get_mut(&s)) {
            l.pending = l.pending.saturating_sub(1);
        }
    }

    /// Rejects connection `id`: a request this side received (passive, before accepting)
    /// or the REP it received (active, before the RTU). The connection is forgotten.
    pub fn reject(
        &mut self,
        id: CommId,
        reason: RejectReason,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or(Error::NotFound)?;
        let kind = match c.state {
            State::ReqRcvd => MessageKind::Req,
            State::RepRcvd => MessageKind::Rep,
            _ => return Err(Error::WrongState),
        };
        let mut pd = [0u8; private_len::REJ];
        let n = private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&private_data[..n]);
        let rej = Rej {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            message_rejected: kind,
            rejected_info_len: 0,
            reason,
            ari: [0; ARI_LEN],
            private_data: pd,
        };
        let (peer, listener) = (c.peer, c.listener);
        self.send(peer, &Message::Rej(rej));
        self.release_backlog(listener);
        self.conns.remove(&id);
        Ok(())
    }

    /// Active side: the QP is ready (RTS); sends the RTU. The connection is established.
    pub fn ready_to_use(&mut self, id: CommId, private_data: &[u8]) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or(Error::NotFound)?;
        if c.state != State::RepRcvd {
            return Err(Error::WrongState);
        }
        let mut pd = [0u8; private_len::RTU];
        let n = private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&private_data[..n]);
        let rtu = Rtu {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            private_data: pd,
        };
        let peer = c.peer;
        let mad = self.send(peer, &Message::Rtu(rtu));
        let c = self.conn_mut(id)?;
        c.state = State::Established;
        c.last = Some(mad);
        c.retx = None;
        self.events.push_back(Event::Established { id });
        Ok(())
    }

    /// Passive side: the QP has received traffic before the RTU (IBA §12.9.7.3, the
    /// "communication established" event): the connection is established.
    pub fn establish(&mut self, id: CommId) -> Result<(), Error> {
        let c = self.conn_mut(id)?;
        match c.state {
            State::RepSent => {
                c.state = State::Established;
                c.retx = None;
                self.events.push_back(Event::Established { id });
                Ok(())
            }
            State::Established => Ok(()),
            _ => Err(Error::WrongState),
        }
    }

    /// Sends a DREQ for established connection `id`; [`Event::Disconnected`] follows when
    /// the DREP comes (or every retry went unanswered).
    pub fn disconnect(
        &mut self,
        now: Duration,
        id: CommId,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let c = self.conns.get(&id).ok_or(Error::NotFound)?;
        if c.state != State::Established {
            return Err(Error::WrongState);
        }
        let mut pd = [0u8; private_len::DREQ];
        let n = private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&private_data[..n]);
        let dreq = Dreq {
            local_comm_id: id,
            remote_comm_id: c.remote_comm_id,
            remote_qpn: c.remote_qpn,
            private_data: pd,
        };
        let (peer, interval, left) = (c.peer, c.peer_timeout, c.peer_retries);
        let mad = self.send(peer, &Message::Dreq(dreq));
        let retx = self.retx(now, interval, left);
        let c = self.conn_mut(id)?;
        c.state = State::DreqSent;
        c.last = Some(mad);
        c.retx = retx;
        Ok(())
    }

    /// Forgets connection `id` at once, whatever its state (the consumer destroyed it). A
    /// connection still being set up is rejected (ConsumerDefined, as rdma_cm does); an
    /// established one gets a DREQ, sent once.
    pub fn destroy(&mut self, id: CommId) {
        let Some(c) = self.conns.get(&id).cloned() else {
            self.sidr_out.remove(&id);
            self.sidr_in.remove(&id);
            return;
        };
        match c.state {
            State::ReqSent | State::RepWait | State::RepSent => {
                let kind = if c.state == State::RepSent {
                    MessageKind::Rep
                } else {
                    MessageKind::Req
                };
                let rej = Rej::new(id, c.remote_comm_id, kind, RejectReason::ConsumerDefined);
                self.send(c.peer, &Message::Rej(rej));
            }
            State::ReqRcvd | State::RepRcvd => {
                let _ = self.reject(id, RejectReason::ConsumerDefined, &[]);
            }
            State::Established => {
                let dreq = Dreq {
                    local_comm_id: id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    private_data: [0; private_len::DREQ],
                };
                self.send(c.peer, &Message::Dreq(dreq));
            }
            State::DreqSent | State::TimeWait => {}
        }
        self.release_backlog(c.listener);
        self.conns.remove(&id);
    }

    /// Sends a SIDR_REQ for `service_id` to `to`; [`Event::SidrReply`] or
    /// [`Event::SidrTimedOut`] follows.
    pub fn sidr_request(
        &mut self,
        now: Duration,
        to: A,
        service_id: u64,
        pkey: PKey,
        private_data: &[u8; private_len::SIDR_REQ],
    ) -> CommId {
        let id = self.alloc_comm_id();
        let req = SidrReq {
            request_id: id,
            pkey,
            service_id,
            private_data: *private_data,
        };
        let mad = self.send(to, &Message::SidrReq(req));
        let interval = cm_timeout(self.config.response_timeout);
        let retx = Retx {
            deadline: now + interval,
            interval,
            left: self.config.max_cm_retries,
        };
        self.sidr_out.insert(
            id,
            SidrOut {
                peer: to,
                mad,
                retx,
            },
        );
        id
    }

    /// Answers SIDR request `id` ([`Event::SidrRequest`]).
    pub fn sidr_reply(
        &mut self,
        id: CommId,
        status: SidrStatus,
        qpn: Qpn,
        qkey: QKey,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let (peer, request_id, service_id) = self.sidr_in.remove(&id).ok_or(Error::NotFound)?;
        let mut pd = [0u8; private_len::SIDR_REP];
        let n = private_data.len().min(pd.len());
        pd[..n].copy_from_slice(&private_data[..n]);
        let rep = SidrRep {
            request_id,
            status,
            info_len: 0,
            vendor_id: 0,
            qpn,
            service_id,
            qkey,
            info: [0; ARI_LEN],
            private_data: pd,
        };
        self.send(peer, &Message::SidrRep(rep));
        Ok(())
    }

    /// Time has passed: retransmits what went unanswered, gives up what has no retries
    /// left, and ends TimeWaits.
    pub fn handle_timeout(&mut self, now: Duration) {
        let due: Vec<CommId> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                c.retx.is_some_and(|r| r.deadline <= now)
                    || c.time_wait_until.is_some_and(|t| t <= now)
            })
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            if c.state == State::TimeWait {
                self.conns.remove(&id);
                self.events.push_back(Event::TimeWaitExit { id });
                continue;
            }
            let Some(r) = c.retx.as_mut() else {
                continue;
            };
            if r.left > 0 {
                r.left -= 1;
                r.deadline = now + r.interval;
                if let Some(m) = c.last {
                    self.transmit.push_back((c.peer, m));
                }
                self.counters.retransmits += 1;
                continue;
            }
            self.counters.timeouts += 1;
            let (peer, remote, state) = (c.peer, c.remote_comm_id, c.state);
            match state {
                State::DreqSent => {
                    self.enter_time_wait(now, id);
                    self.events.push_back(Event::Disconnected { id });
                }
                _ => {
                    let kind = if state == State::RepSent {
                        MessageKind::Rep
                    } else {
                        MessageKind::Req
                    };
                    let rej = Rej::new(id, remote, kind, RejectReason::Timeout);
                    self.send(peer, &Message::Rej(rej));
                    self.conns.remove(&id);
                    self.events.push_back(Event::TimedOut {
                        id,
                        active: state != State::RepSent,
                    });
                }
            }
        }
        let due: Vec<CommId> = self
            .sidr_out
            .iter()
            .filter(|(_, s)| s.retx.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(s) = self.sidr_out.get_mut(&id) else {
                continue;
            };
            if s.retx.left > 0 {
                s.retx.left -= 1;
                s.retx.deadline = now + s.retx.interval;
                let (peer, mad) = (s.peer, s.mad);
                self.transmit.push_back((peer, mad));
                self.counters.retransmits += 1;
            } else {
                self.sidr_out.remove(&id);
                self.counters.timeouts += 1;
                self.events.push_back(Event::SidrTimedOut { id });
            }
        }
    }
}

#[cfg(test)]
mod tests;
