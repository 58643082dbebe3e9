//! The MAD agent: management datagrams as transactions, over [`Context`]'s MAD interface.
//!
//! A management application — a diagnostic asking an SMA for NodeInfo, `saquery` or IPoIB
//! asking the SA for records, `perfquery` asking a PMA for counters — sends a request and
//! waits for its answer. Between the two sits what the kernel's MAD layer does for a umad
//! agent, in one place: a TransactionID per request (the agent's upper 32 bits), the answer
//! matched to its request by TID, the request sent again when its answer is late and given up
//! after the last try with an error naming what was asked of whom ([`MadError::TimedOut`]),
//! duplicate and stray responses dropped, and an SA answer's RMPP segments reassembled in any
//! order ([`rmpp`]).
//!
//! Two layers, as elsewhere in softib: [`Transactions`] is that machinery sans-IO (time in,
//! MADs in and out, finished transactions out), and [`MadAgent`] drives it over a
//! [`MadTransport`] — a [`Context`] in production, a fake in tests — blocking its caller until
//! the answer or the error. Machines with transactions of their own (the SM's sweeps in
//! `softib-fabric`) use the agent untracked: [`MadAgent::send`], [`MadAgent::recv`],
//! [`MadAgent::respond`] (an SA answer, as the RMPP segments the SA built).

pub mod rmpp;
mod transactions;

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use softib_wire::mad::attr::SmpAttribute;
use softib_wire::mad::{self, smp, AttrId, Method, MgmtClass, MAD_LEN};

use crate::{Context, Lid, Mad, MadQp, Qpn};

pub use transactions::{Counters, Event, Received, TimedOut, Transactions};

/// How many MADs one receive asks the transport for.
const RECV_BATCH: u32 = 256;
/// MADs that arrived for no transaction, kept for [`MadAgent::recv`]; beyond this the
/// oldest are dropped.
const BACKLOG: usize = 1024;

/// Where a LID-routed or directed-route SMP goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmpDest {
    /// LID-routed (class 0x01) to this LID.
    Lid(Lid),
    /// Directed-route (class 0x81) along these egress ports, hop 0 (the local node) left out.
    Route(Vec<u8>),
}

/// Where a MAD goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MadDest {
    /// An SMP, to the SMA on QP0.
    Smp(SmpDest),
    /// A GMP to QP `qpn` (QP1 for the SA, PMA, ...) at `lid`.
    Gmp {
        /// Destination LID.
        lid: Lid,
        /// Destination QP.
        qpn: Qpn,
    },
}

impl MadDest {
    /// A GMP to the GSI (QP1) at `lid`.
    pub fn gsi(lid: Lid) -> MadDest {
        MadDest::Gmp {
            lid,
            qpn: Qpn::new(1),
        }
    }
}

impl fmt::Display for MadDest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MadDest::Smp(SmpDest::Lid(l)) => write!(f, "LID {}", l.0),
            MadDest::Smp(SmpDest::Route(p)) => write!(f, "DR path {p:?}"),
            MadDest::Gmp { lid, qpn } if qpn.value() == 1 => write!(f, "LID {}", lid.0),
            MadDest::Gmp { lid, qpn } => write!(f, "LID {} QP {}", lid.0, qpn.value()),
        }
    }
}

/// How long one send waits for its answer, and how many sends a request gets (umad's
/// `timeout_ms`, and its `retries` + 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Per send.
    pub timeout: Duration,
    /// Sends in all (at least one).
    pub tries: u32,
}

impl Default for RetryPolicy {
    /// What infiniband-diags' tools use: 3 tries of 500 ms.
    fn default() -> RetryPolicy {
        RetryPolicy {
            timeout: Duration::from_millis(500),
            tries: 3,
        }
    }
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    qp: MadQp,
    slid: Lid,
    src_qpn: Qpn,
    first: [u8; MAD_LEN],
    /// RMPP segments 2, 3, ... (empty for an answer in one MAD).
    more: Vec<[u8; MAD_LEN]>,
}

impl Response {
    /// The answer in `segments` (at least one), the first of which came as `from`.
    fn new(from: &Mad, segments: Vec<[u8; MAD_LEN]>) -> Option<Response> {
        let mut it = segments.into_iter();
        let first = it.next()?;
        Some(Response {
            qp: from.qp,
            slid: from.slid,
            src_qpn: from.src_qpn,
            first,
            more: it.collect(),
        })
    }

    /// The answer (its first RMPP segment).
    pub fn mad(&self) -> &[u8; MAD_LEN] {
        &self.first
    }

    /// Every segment, in order (one for an answer in one MAD).
    pub fn segments(&self) -> impl Iterator<Item = &[u8; MAD_LEN]> + '_ {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// The MAD status, without the D bit of a directed-route SMP.
    pub fn status(&self) -> u16 {
        let p = mad::Packet::new_unchecked(&self.first[..]);
        if p.mgmt_class() == MgmtClass::SubnDirectedRoute {
            p.status() & !mad::status::DIRECTION
        } else {
            p.status()
        }
    }

    /// The responder's LID.
    pub fn slid(&self) -> Lid {
        self.slid
    }

    /// The responder's QP.
    pub fn src_qpn(&self) -> Qpn {
        self.src_qpn
    }

    /// QP0 or QP1.
    pub fn qp(&self) -> MadQp {
        self.qp
    }

    /// An SA answer's records, reassembled from its segments.
    pub fn table(&self) -> Option<rmpp::Table> {
        let mut r = rmpp::Reassembly::new();
        for s in self.segments() {
            r.add(s);
        }
        r.table()
    }
}

/// What went wrong with a MAD.
#[derive(Debug, thiserror::Error)]
pub enum MadError {
    /// The transport (the daemon connection) failed.
    #[error(transparent)]
    Transport(#[from] crate::Error),
    /// No answer after every try.
    #[error("no answer to {request} from {dest} after {tries} tries of {timeout:?}{}", hint(*class))]
    TimedOut {
        /// What was asked, e.g. `SubnGet(NodeInfo)`.
        request: String,
        /// Of whom.
        dest: MadDest,
        /// Sends.
        tries: u32,
        /// Per send.
        timeout: Duration,
        /// The request's management class.
        class: MgmtClass,
    },
    /// The answer carries an error status.
    #[error("{} at {dest} answered {request} with MAD status 0x{status:04x}", responder(*class))]
    Status {
        /// What was asked.
        request: String,
        /// Of whom.
        dest: MadDest,
        /// The status (without a directed-route SMP's D bit).
        status: u16,
        /// The request's management class.
        class: MgmtClass,
    },
    /// The request cannot be sent as it is.
    #[error("{0}")]
    Invalid(String),
}

fn hint(class: MgmtClass) -> &'static str {
    match class {
        MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute => {
            " (is the port Active and the LID assigned?)"
        }
        MgmtClass::SubnAdm => " (is an SM running?)",
        _ => "",
    }
}

fn responder(class: MgmtClass) -> &'static str {
    match class {
        MgmtClass::SubnLid | MgmtClass::SubnDirectedRoute => "the SMA",
        MgmtClass::SubnAdm => "the SA",
        MgmtClass::PerfMgt => "the PMA",
        _ => "the agent",
    }
}

/// A MAD named as a person would: `SubnGet(NodeInfo)`, `PerfGet(PortCounters, modifier 3)`.
fn describe(mad: &[u8; MAD_LEN]) -> String {
    let Ok(h) = mad::Repr::parse(&mad::Packet::new_unchecked(&mad[..])) else {
        return "a MAD".into();
    };
    let attr = h.attr_name().map_or_else(
        || format!("attribute 0x{:04x}", h.attr_id.0),
        str::to_string,
    );
    let modifier = if h.attr_mod == 0 {
        String::new()
    } else {
        format!(", modifier {}", h.attr_mod)
    };
    format!("{}({attr}{modifier})", h.method_name())
}

/// How a [`MadAgent`] reaches the fabric: [`Context`]'s MAD requests, or a fake in tests.
pub trait MadTransport {
    /// Sends one MAD out of `port` of device `dev`.
    fn send(&mut self, dev: u32, port: u8, to: &MadDest, mad: &[u8; MAD_LEN]) -> crate::Result<()>;

    /// Receives up to `max` MADs for this agent, waiting up to `wait` for the first.
    fn receive(&mut self, max: u32, wait: Duration) -> crate::Result<Vec<Mad>>;
}

impl MadTransport for Context {
    fn send(&mut self, dev: u32, port: u8, to: &MadDest, mad: &[u8; MAD_LEN]) -> crate::Result<()> {
        match to {
            MadDest::Smp(SmpDest::Lid(l)) => self.send_smp(dev, port, Some(*l), mad),
            MadDest::Smp(SmpDest::Route(_)) => self.send_smp(dev, port, None, mad),
            MadDest::Gmp { lid, qpn } => self.send_gmp(dev, port, *lid, *qpn, mad),
        }
    }

    fn receive(&mut self, max: u32, wait: Duration) -> crate::Result<Vec<Mad>> {
        self.recv_mads(max, wait)
    }
}

/// A MAD agent on one port: requests that wait for their answers, and untracked sends and
/// receives for machines that keep their own transactions.
#[derive(Debug)]
pub struct MadAgent {
    dev: u32,
    port: u8,
    policy: RetryPolicy,
    tx: Transactions,
    origin: Instant,
    /// MADs that arrived for no transaction of this agent, for [`MadAgent::recv`].
    backlog: VecDeque<Mad>,
    dropped: u64,
}

impl MadAgent {
    /// Opens `port` of device `dev` as a MAD agent on `ctx`; its TIDs carry the process id in
    /// their upper 32 bits.
    pub fn open(ctx: &mut Context, dev: u32, port: u8) -> crate::Result<MadAgent> {
        ctx.open_mad(dev, port, false)?;
        Ok(MadAgent::new(dev, port, std::process::id()))
    }

    /// Opens `port` as the subnet manager's agent: it also receives SMP responses to the SM's
    /// own SMPs and the SA requests of the subnet (one per port).
    pub fn open_sm(ctx: &mut Context, dev: u32, port: u8) -> crate::Result<MadAgent> {
        ctx.open_mad(dev, port, true)?;
        Ok(MadAgent::new(dev, port, std::process::id()))
    }

    /// An agent on a transport whose port is already open, with `hi_tid` as the upper 32 bits
    /// of its TIDs.
    pub fn new(dev: u32, port: u8, hi_tid: u32) -> MadAgent {
        MadAgent {
            dev,
            port,
            policy: RetryPolicy::default(),
            tx: Transactions::new(hi_tid),
            origin: Instant::now(),
            backlog: VecDeque::new(),
            dropped: 0,
        }
    }

    /// The same agent with another timeout and number of tries.
    pub fn with_policy(mut self, policy: RetryPolicy) -> MadAgent {
        self.policy = policy;
        self
    }

    /// The device index.
    pub fn dev(&self) -> u32 {
        self.dev
    }

    /// The port.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// What the transaction layer dropped (duplicates, strays) and resent.
    pub fn counters(&self) -> Counters {
        self.tx.counters()
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Sends `mad` (a request; its TID is set here) to `dest` and waits for the answer,
    /// sending it again after each timeout, until the policy's tries are used up.
    pub fn request<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        dest: MadDest,
        mad: [u8; MAD_LEN],
    ) -> Result<Response, MadError> {
        let tid = self.tx.start(dest, mad, self.policy, None)?;
        let r = self.wait_for(t, tid);
        if r.is_err() {
            self.tx.cancel(tid);
        }
        r
    }

    fn wait_for<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        tid: u64,
    ) -> Result<Response, MadError> {
        loop {
            self.tx.handle_timeout(self.now());
            while let Some(e) = self.tx.poll_event() {
                match e {
                    Event::Answered { tid: id, response } if id == tid => return Ok(response),
                    Event::TimedOut(out) if out.tid == tid => return Err(out.into()),
                    // Only one transaction is outstanding at a time here.
                    _ => {}
                }
            }
            while let Some((dest, m)) = self.tx.poll_transmit(self.now()) {
                t.send(self.dev, self.port, &dest, &m)?;
            }
            let wait = self
                .tx
                .poll_timeout()
                .map_or(Duration::ZERO, |d| d.saturating_sub(self.now()));
            for m in t.receive(RECV_BATCH, wait)? {
                if let Received::Request | Received::Stray = self.tx.handle_mad(&m) {
                    self.keep(m);
                }
            }
        }
    }

    fn keep(&mut self, m: Mad) {
        if self.backlog.len() >= BACKLOG {
            self.backlog.pop_front();
            self.dropped += 1;
        }
        self.backlog.push_back(m);
    }

    /// SubnGet of `attr` (with `attr_mod`) at `dest`: the answer, or an error naming what did
    /// not answer or with which status.
    pub fn smp_get<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        dest: &SmpDest,
        attr: AttrId,
        attr_mod: u32,
    ) -> Result<smp::Repr, MadError> {
        let req = match dest {
            SmpDest::Lid(_) => smp::Repr::lid_get(0, attr, attr_mod, 0),
            SmpDest::Route(path) => smp::Repr::dr_get(0, attr, attr_mod, 0, path)
                .map_err(|e| MadError::Invalid(format!("bad directed route {path:?}: {e}")))?,
        };
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        let dest = MadDest::Smp(dest.clone());
        let r = self.request(t, dest.clone(), b)?;
        check_status(&b, &dest, &r)?;
        smp::Repr::parse(&smp::Packet::new_unchecked(&r.mad()[..]))
            .map_err(|e| MadError::Invalid(format!("the SMA at {dest} answered a bad SMP: {e}")))
    }

    /// SubnGet of the attribute `A` (NodeInfo, PortInfo, ...) at `dest`, parsed.
    pub fn get<A: SmpAttribute, T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        dest: &SmpDest,
        attr_mod: u32,
    ) -> Result<A, MadError> {
        let r = self.smp_get(t, dest, A::ATTR_ID, attr_mod)?;
        A::from_data(&r.data).map_err(|e| {
            MadError::Invalid(format!(
                "the SMA at {} answered a bad {}: {e}",
                MadDest::Smp(dest.clone()),
                mad::attr_name(MgmtClass::SubnLid, A::ATTR_ID).unwrap_or("attribute")
            ))
        })
    }

    /// An SA query (`method` Get, Set, GetTable, ... of `attr`, the template `record` selected
    /// by `comp_mask`) to the SA at `sa_lid`: the answer, every RMPP segment of it, or an
    /// error naming what did not answer or with which status.
    pub fn sa_query<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        sa_lid: Lid,
        method: Method,
        attr: AttrId,
        comp_mask: u64,
        record: &[u8],
    ) -> Result<Response, MadError> {
        let req = mad::sa::Repr::request(method, 0, attr, comp_mask, record);
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut mad::sa::Packet::new_unchecked(&mut b[..]));
        let dest = MadDest::gsi(sa_lid);
        let r = self.request(t, dest.clone(), b)?;
        check_status(&b, &dest, &r)?;
        Ok(r)
    }

    /// Sends a MAD untracked: a response, or a request whose answer the caller matches itself
    /// (the SM's sweeps keep their own transactions).
    pub fn send<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        dest: &MadDest,
        mad: &[u8; MAD_LEN],
    ) -> Result<(), MadError> {
        Ok(t.send(self.dev, self.port, dest, mad)?)
    }

    /// Sends the answer in `segments` (one MAD, or the RMPP segments an SA built, back to
    /// back) to the sender of the request `to`.
    pub fn respond<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        to: &Mad,
        segments: &[u8],
    ) -> Result<(), MadError> {
        if segments.is_empty() || segments.len() % MAD_LEN != 0 {
            return Err(MadError::Invalid(format!(
                "an answer is whole MADs of {MAD_LEN} bytes, not {} bytes",
                segments.len()
            )));
        }
        let dest = MadDest::Gmp {
            lid: to.slid,
            qpn: to.src_qpn,
        };
        for seg in segments.chunks_exact(MAD_LEN) {
            if let Ok(b) = <[u8; MAD_LEN]>::try_from(seg) {
                t.send(self.dev, self.port, &dest, &b)?;
            }
        }
        Ok(())
    }

    /// The MADs that belong to no request of this agent — requests to it, responses to
    /// transactions kept elsewhere — waiting up to `wait` when none is there yet. Copies of
    /// answers this agent already took are not among them.
    pub fn recv<T: MadTransport + ?Sized>(
        &mut self,
        t: &mut T,
        wait: Duration,
    ) -> Result<Vec<Mad>, MadError> {
        let wait = if self.backlog.is_empty() {
            wait
        } else {
            Duration::ZERO
        };
        for m in t.receive(RECV_BATCH, wait)? {
            match self.tx.handle_mad(&m) {
                Received::Request | Received::Stray => self.keep(m),
                Received::Answered(_)
                | Received::Segment(_)
                | Received::Duplicate(_)
                | Received::Malformed => {}
            }
        }
        Ok(self.backlog.drain(..).collect())
    }
}

/// The answer's status, as an error naming the request when it is not success.
fn check_status(request: &[u8; MAD_LEN], dest: &MadDest, r: &Response) -> Result<(), MadError> {
    let status = r.status();
    if status == mad::status::SUCCESS {
        return Ok(());
    }
    let class = mad::Packet::new_unchecked(&request[..]).mgmt_class();
    Err(MadError::Status {
        request: describe(request),
        dest: dest.clone(),
        status,
        class,
    })
}

#[cfg(test)]
mod tests;
