//! `-R`: perftest's QPs connected with the InfiniBand CM, as upstream perftest connects them
//! with librdmacm — so that softib's own tools and an unmodified `ib_send_bw -R` (on
//! softib's librdmacm, or the kernel's rdma_cm) connect to each other.
//!
//! Upstream's `-R` (perftest 4.5 / 6.06, `perftest_communication.c`) makes two kinds of
//! connection, all to rdma_cm's ServiceID of port `-p` in RDMA_PS_TCP:
//!
//! 1. the exchange's own: one RC QP (`create_comm_struct`, `rdma_client_connect` /
//!    `rdma_server_connect`) over which every message of the exchange travels as one SEND
//!    ([`CommQp`], the [`MessageCarrier`] under [`crate::exchange::Exchange`]);
//! 2. then, between two hand shakes, one connection per test QP
//!    (`create_rdma_cm_connection`); the server's listener takes them all. With `-c UD` the
//!    test QPs are resolved with SIDR instead (RDMA_PS_UDP: SIDR_REQ, and a SIDR_REP naming
//!    the server's QP and rdma_cm's Q_Key); a latency or bidirectional test's client then
//!    sends its QPN to the server in a SEND with immediate (`send_qp_num_for_ah`).
//!
//! Each is REQ → REP → RTU on QP1, with rdma_cm's private-data header in the REQ
//! ([`softib_cm::rdma_cm`]), the REQ offering `-o` reads/atomics for the read and atomic
//! tests (0 otherwise), retry and RNR retry 7. The passive side readies its QP (RTR, RTS)
//! before its REP, the active side on the REP before its RTU, as rdma_cm does. At the end the
//! client sends a DREQ for each test connection and waits for the DREPs; softib's tools tear
//! down every connection they made, on either side, and wait a bounded time for the answers.
//!
//! [`CmAgent`] is the process's CM: softib-cm's machine fed with the MADs the daemon routes
//! to this process (`CmListen`, and the communication IDs it sent), and with the time, by
//! the thread that waits for a CM step. There is no thread of its own: between the steps
//! the CM has only duplicates to answer, which the peer retries. The server does not wait
//! for RTUs (upstream's does not wait for ESTABLISHED either): the client's next message
//! over the exchange shows it has its connections, and the server's CM takes them as
//! established then ([`CmAgent::confirm`]), so a lost RTU costs nothing.
//!
//! softib's `-R` speaks rdma_cm's RoCE addressing: the device's IPv4 address is its GID
//! (IPv4-mapped), the route is the GRH. An IB (fabric) port refuses `-R` with a message.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::time::{Duration, Instant};

use softib::{
    AccessFlags, AddressVector, Context, CqHandle, Gid, GlobalRoute, Guid, Lid, MrKeys, Mtu,
    PdHandle, Psn, QpCap, QpInitAttr, QpType, Qpn, RecvWr, SendFlags, SendWr, Sge, WcOpcode,
    WcStatus, WorkCompletion, WrOpcode,
};
use softib_cm::{
    msg, AcceptParams, Cm, CommId, Config, ConnectParams, Event, Path, PortSpace, RejectReason,
    Rep, Req, SidrStatus, TransportService,
};
use softib_wire::mad::cm::private_len;
use softib_wire::QKey;

use crate::exchange::MessageCarrier;
use crate::port::ConnectedQp;

/// MADs taken from the daemon per call.
const BATCH: u32 = 64;
/// The longest a wait sleeps in the daemon at once, so that CM timers run on time.
const SLICE: Duration = Duration::from_millis(50);
/// How long a client waits before trying again after the server said nobody listens yet
/// (upstream's client retries every 100 ms).
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// How long teardown waits for the peer's DREPs.
const TEARDOWN_WAIT: Duration = Duration::from_secs(3);
/// Bytes of each message slot of the exchange's QP (the largest message, perftest 6.29's
/// negotiation block, is 312 bytes).
const SLOT: usize = 4096;
/// Receives kept posted on the exchange's QP.
const RECV_SLOTS: usize = 4;
/// The wr_id of the exchange's sends (upstream `SYNC_SPEC_ID`); receives are slot numbers.
const SEND_ID: u64 = 5 << 32;

type Result<T> = std::result::Result<T, String>;

/// What the CM connects between two hosts, from this side: addresses and GIDs.
#[derive(Debug, Clone, Copy)]
pub struct Route {
    /// This side's address (the port is ephemeral on the client, `-p` on the server).
    pub src: SocketAddr,
    /// The peer's (the server's `-p` on the client).
    pub dst: SocketAddr,
    /// This side's GID.
    pub sgid: Gid,
    /// The GID index `sgid` is at.
    pub sgid_index: u8,
    /// The peer's GID (its IPv4-mapped address).
    pub dgid: Gid,
    /// The HCA port.
    pub port: u8,
}

/// This side's half of one connection: its QP, the PSN it starts with, and what it offers.
#[derive(Debug, Clone, Copy)]
pub struct QpEnd {
    /// The QP.
    pub qpn: Qpn,
    /// Its first PSN.
    pub psn: u32,
    /// Reads/atomics it will have outstanding (`-o` for read and atomic tests, else 0):
    /// what upstream puts in both `responder_resources` and `initiator_depth`.
    pub rd_atomic: u8,
    /// Reads/atomics the device answers at once (`max_qp_rd_atom`).
    pub rd_atomic_max: u8,
    /// Path MTU (`ibv_mtu` code) this side can use.
    pub mtu: u8,
    /// The local ACK timeout exponent (`-u`).
    pub ack_timeout: u8,
}

/// A connection the CM set up.
#[derive(Debug, Clone, Copy)]
pub struct Connected {
    /// The connection in the CM.
    pub comm: CommId,
    /// The peer's address as rdma_cm's header names it (the server's on the client).
    pub peer: SocketAddr,
}

/// A UD peer as SIDR names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdPeer {
    /// Its GID.
    pub gid: Gid,
    /// Its QP: the SIDR_REP's on the client; on the server the client sends it in a
    /// message of its own (upstream's `send_qp_num_for_ah`) when the test needs it.
    pub qpn: Option<Qpn>,
    /// The Q_Key to send to it with.
    pub qkey: u32,
}

/// The process's CM on one device. See the module documentation.
pub struct CmAgent {
    ctx: Context,
    dev: u32,
    cm: Cm<Gid>,
    origin: Instant,
    /// Events taken while waiting for another connection's.
    stash: VecDeque<Event<Gid>>,
    listening: Vec<u64>,
    /// Connections to tear down at the end.
    conns: Vec<CommId>,
}

impl CmAgent {
    /// Becomes the CM agent of port 1 of device `dev` (CM MADs travel on QP1 of port 1).
    pub fn open(dev: u32, node_guid: Guid) -> Result<CmAgent> {
        let mut ctx = Context::open().map_err(|e| format!(" -R: {e}"))?;
        ctx.open_mad(dev, 1, false).map_err(|e| {
            format!(" -R: cannot be the CM agent of the device (its MAD interface): {e}")
        })?;
        // A restarted run must not reuse the communication IDs of the last.
        let seed = std::process::id().wrapping_mul(2_654_435_761) ^ clock_nanos();
        let cm = Cm::new(Config {
            local_ca_guid: node_guid,
            first_comm_id: seed | 1,
            ..Config::default()
        });
        Ok(CmAgent {
            ctx,
            dev,
            cm,
            origin: Instant::now(),
            stash: VecDeque::new(),
            listening: Vec::new(),
            conns: Vec::new(),
        })
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Sends every MAD the machine queued.
    fn flush(&mut self) -> Result<()> {
        while let Some((gid, mad)) = self.cm.poll_transmit() {
            self.ctx
                .send_gmp_gid(self.dev, 1, gid, Qpn::GSI, &mad)
                .map_err(|e| format!(" -R: cannot send a CM message: {e}"))?;
        }
        Ok(())
    }

    /// Listens on rdma_cm's ServiceID of `port` in port space `ps` (RDMA_PS_TCP for RC,
    /// RDMA_PS_UDP for UD's SIDR) for `backlog` requests.
    pub fn listen(&mut self, ps: PortSpace, port: u16, backlog: usize) -> Result<()> {
        let svc = msg::service_id(ps, port);
        self.cm
            .listen(svc, backlog)
            .map_err(|e| format!(" -R: cannot listen on port {port}: {e}"))?;
        self.ctx.cm_listen(self.dev, svc, true).map_err(|e| {
            format!(" -R: cannot listen on rdma_cm port {port} (is another server on it? choose another -p): {e}")
        })?;
        self.listening.push(svc);
        Ok(())
    }

    /// Stops listening (upstream destroys its listening id once it has its connections).
    pub fn unlisten(&mut self) {
        for svc in std::mem::take(&mut self.listening) {
            let _ = self.cm.unlisten(svc);
            let _ = self.ctx.cm_listen(self.dev, svc, false);
        }
    }

    /// Feeds the machine what the daemon has for it (waiting at most `wait` for the first
    /// MAD) and the time, and sends what it answers.
    fn pump(&mut self, wait: Duration) -> Result<()> {
        self.flush()?;
        let wait = match self.cm.poll_timeout() {
            Some(t) => wait.min(t.saturating_sub(self.now())),
            None => wait,
        };
        let mads = self
            .ctx
            .recv_mads(BATCH, wait.min(SLICE))
            .map_err(|e| format!(" -R: the CM lost the daemon: {e}"))?;
        let now = self.now();
        for m in &mads {
            // Only CM MADs (class 0x07) with the sender's GID (always there on RoCE).
            if m.mad.get(1) == Some(&0x07) {
                if let Some(gid) = m.sgid {
                    self.cm.handle_mad(now, gid, &m.mad);
                }
            }
        }
        self.cm.handle_timeout(self.now());
        while let Some(ev) = self.cm.poll_event() {
            self.stash.push_back(ev);
        }
        self.flush()
    }

    /// Waits for the first event `want` picks (stashing the others), until `deadline`
    /// (`None`: no limit, as upstream's server waits for its client). `what` says in the
    /// error what was waited for.
    fn wait_for<T>(
        &mut self,
        deadline: Option<Instant>,
        what: &str,
        mut want: impl FnMut(&Event<Gid>) -> Option<T>,
    ) -> Result<T> {
        loop {
            if let Some(i) = self.stash.iter().position(|e| want(e).is_some()) {
                let ev = self.stash.remove(i);
                if let Some(t) = ev.as_ref().and_then(&mut want) {
                    return Ok(t);
                }
            }
            let left = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(what.to_string());
                    }
                    left
                }
                None => SLICE,
            };
            self.pump(left)?;
        }
    }

    /// Active side: connects `end` over `route` (REQ, then the REP, then the QP is readied
    /// with `ready` and the RTU goes). A server that does not listen yet (REJ
    /// InvalidServiceID) is asked again until `deadline`.
    pub fn connect(
        &mut self,
        route: &Route,
        end: &QpEnd,
        deadline: Instant,
        mut ready: impl FnMut(&ConnectedQp) -> std::result::Result<(), crate::port::ReadyError>,
    ) -> Result<Connected> {
        let params = connect_params(route, end);
        let server = route.dst;
        let rejected = |reason: RejectReason| {
            format!(
                " -R: the rdma_cm server at {server} rejected the connection: {} (REJ reason {}){}",
                reason_text(reason),
                u16::from(reason),
                if reason == RejectReason::InvalidServiceId {
                    "; is a server running with the same -p? raise --timeout to wait longer"
                } else {
                    ""
                }
            )
        };
        // Whether the server said nobody listens (and is being asked again).
        let mut refused = false;
        loop {
            let now = self.now();
            let comm = self.cm.connect(now, route.dgid, &params);
            let what = format!(
                " -R: no answer from the rdma_cm server at {server} (REQ for QP {:#x}) by the deadline; is it running with the same -p? raise --timeout to wait longer",
                end.qpn.value()
            );
            let ev = self.wait_for(Some(deadline), &what, |e| match e {
                Event::Reply { id, .. }
                | Event::Rejected { id, .. }
                | Event::TimedOut { id, .. }
                    if *id == comm =>
                {
                    Some(e.clone())
                }
                _ => None,
            });
            let ev = match ev {
                Ok(ev) => ev,
                Err(_) if refused => return Err(rejected(RejectReason::InvalidServiceId)),
                Err(e) => return Err(e),
            };
            match ev {
                Event::Reply { rep, .. } => {
                    let c = active_qp(route, end, &rep);
                    if let Err(e) = ready(&c) {
                        let _ = self.cm.reject(comm, RejectReason::ConsumerDefined, &[]);
                        self.flush()?;
                        return Err(format!(" -R: cannot ready QP {:#x} for the server's QP {:#x}: {e}", end.qpn.value(), rep.local_qpn.value()));
                    }
                    self.cm
                        .ready_to_use(comm, &[])
                        .map_err(|e| format!(" -R: cannot send the RTU: {e}"))?;
                    self.flush()?;
                    self.conns.push(comm);
                    return Ok(Connected {
                        comm,
                        peer: server,
                    });
                }
                Event::Rejected { reason, .. }
                    if reason == RejectReason::InvalidServiceId
                        && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    // The server does not listen yet: upstream's listens a moment after the
                    // hand shake that lets the client go on.
                    refused = true;
                    std::thread::sleep(RETRY_PAUSE);
                }
                Event::Rejected { reason, .. } => return Err(rejected(reason)),
                _ => {
                    return Err(format!(
                        " -R: the rdma_cm server at {server} did not answer the REQ through every CM retry"
                    ))
                }
            }
        }
    }

    /// Passive side: takes the next connection request (waiting until `deadline`, `None`:
    /// without limit), readies the QP `end` names for it with `ready`, and answers with a
    /// REP. The RTU is not waited for, as upstream's server does not wait for ESTABLISHED:
    /// [`CmAgent::confirm`] settles the connections once the client has shown it has them.
    pub fn accept(
        &mut self,
        route_of: impl Fn(&Req, Gid) -> Result<(Route, QpEnd)>,
        deadline: Option<Instant>,
        mut ready: impl FnMut(&ConnectedQp) -> std::result::Result<(), crate::port::ReadyError>,
    ) -> Result<Connected> {
        let what = " -R: no rdma_cm client connected by the deadline; start the client with this host's device address and the same -p, or raise --timeout";
        let (id, from, req) = self.wait_for(deadline, what, |e| match e {
            Event::ConnectRequest { id, from, req } => Some((*id, *from, *req)),
            _ => None,
        })?;
        let refuse = |agent: &mut CmAgent, why: String| {
            let _ = agent.cm.reject(id, RejectReason::ConsumerDefined, &[]);
            let _ = agent.flush();
            Err(why)
        };
        if req.transport_service != TransportService::Rc {
            return refuse(
                self,
                format!(
                    " -R: the client asked for a {:?} connection; softib's perftest -R connects RC",
                    req.transport_service
                ),
            );
        }
        let (route, end) = match route_of(&req, from) {
            Ok(x) => x,
            Err(e) => return refuse(self, e),
        };
        let peer = softib_cm::rdma_cm::request_addrs(&req.private_data)
            .map_or(route.dst, |(peer, _)| peer);
        let (c, p) = passive_qp(&route, &end, &req);
        if let Err(e) = ready(&c) {
            return refuse(
                self,
                format!(
                    " -R: cannot ready QP {:#x} for the client's QP {:#x}: {e}",
                    end.qpn.value(),
                    req.local_qpn.value()
                ),
            );
        }
        let now = self.now();
        self.cm
            .accept(now, id, &p)
            .map_err(|e| format!(" -R: cannot answer the connection request: {e}"))?;
        self.flush()?;
        self.conns.push(id);
        Ok(Connected { comm: id, peer })
    }

    /// The peer has shown over the exchange that it holds every connection so far (its
    /// message came after its RTUs): each connection still waiting for its RTU here is
    /// established, as IBA's passive side is on the first traffic after its REP (a lost RTU
    /// then costs nothing, and the REP is not retried into a REJ). A connection the peer
    /// gave up meanwhile is an error.
    pub fn confirm(&mut self) -> Result<()> {
        self.pump(Duration::ZERO)?;
        let conns = self.conns.clone();
        for e in &self.stash {
            match *e {
                Event::Rejected { id, reason, .. } if conns.contains(&id) => {
                    return Err(format!(
                        " -R: the rdma_cm peer gave a connection up: {} (REJ reason {})",
                        reason_text(reason),
                        u16::from(reason)
                    ))
                }
                Event::TimedOut { id, .. } if conns.contains(&id) => {
                    return Err(" -R: the CM gave a connection up (no answer from the peer)".into())
                }
                _ => {}
            }
        }
        for &c in &conns {
            // Already established connections say Ok too; only the CM's state changes.
            let _ = self.cm.establish(c);
        }
        self.stash
            .retain(|e| !matches!(e, Event::Established { .. }));
        Ok(())
    }

    /// Active side, UD (`rdma_connect` on an RDMA_PS_UDP id): a SIDR_REQ for the
    /// destination port's service, answered with the server's QPN and Q_Key. A server that
    /// does not serve it yet is asked again until `deadline`.
    pub fn resolve_ud(&mut self, route: &Route, qpn: Qpn, deadline: Instant) -> Result<UdPeer> {
        let mut private_data = [0u8; private_len::SIDR_REQ];
        softib_cm::rdma_cm::private_data(route.src, route.dst, &[], &mut private_data);
        let svc = msg::service_id(PortSpace::Udp, route.dst.port());
        let server = route.dst;
        let mut refused = false;
        loop {
            let now = self.now();
            let id = self.cm.sidr_request(
                now,
                route.dgid,
                svc,
                softib_wire::PKey::DEFAULT,
                &private_data,
            );
            let what = format!(
                " -R: no answer from the rdma_cm server at {server} (SIDR_REQ for UD QP {:#x}) by the deadline; is it running with the same -p and -c UD? raise --timeout to wait longer",
                qpn.value()
            );
            let ev = self.wait_for(Some(deadline), &what, |e| match e {
                Event::SidrReply { id: x, rep } if *x == id => Some(Ok(*rep)),
                Event::SidrTimedOut { id: x } if *x == id => Some(Err(())),
                _ => None,
            });
            let unserved = || {
                format!(
                    " -R: the rdma_cm server at {server} serves no UD service on that port (SIDR_REP status 1); is a server running with the same -p and -c UD? raise --timeout to wait longer"
                )
            };
            match ev {
                Ok(Ok(rep)) if rep.status == SidrStatus::Ok => {
                    return Ok(UdPeer {
                        gid: route.dgid,
                        qpn: Some(rep.qpn),
                        qkey: rep.qkey.0,
                    })
                }
                Ok(Ok(rep))
                    if rep.status == SidrStatus::UnsupportedServiceId
                        && Instant::now() + RETRY_PAUSE < deadline =>
                {
                    refused = true;
                    std::thread::sleep(RETRY_PAUSE);
                }
                Ok(Ok(rep)) if rep.status == SidrStatus::UnsupportedServiceId => {
                    return Err(unserved())
                }
                Ok(Ok(rep)) => {
                    return Err(format!(
                        " -R: the rdma_cm server at {server} refused the UD service (SIDR_REP status {})",
                        u8::from(rep.status)
                    ))
                }
                Ok(Err(())) => {
                    return Err(format!(
                        " -R: the rdma_cm server at {server} did not answer the SIDR_REQ through every CM retry"
                    ))
                }
                Err(_) if refused => return Err(unserved()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Passive side, UD: the next SIDR_REQ (waiting until `deadline`); `before_reply` runs
    /// before the SIDR_REP names QP `qpn` and rdma_cm's Q_Key (it posts the receive the
    /// client's QPN comes to, as upstream's server does).
    pub fn answer_ud(
        &mut self,
        qpn: Qpn,
        deadline: Instant,
        before_reply: impl FnOnce() -> softib::Result<()>,
    ) -> Result<UdPeer> {
        let what = " -R: no rdma_cm client asked for a UD QP (SIDR_REQ) by the deadline; is it running with -c UD?";
        let (id, from) = self.wait_for(Some(deadline), what, |e| match e {
            Event::SidrRequest { id, from, .. } => Some((*id, *from)),
            _ => None,
        })?;
        let qkey = softib_cm::rdma_cm::UDP_QKEY;
        if let Err(e) = before_reply() {
            let _ = self
                .cm
                .sidr_reply(id, SidrStatus::NoQp, Qpn::new(0), QKey(0), &[]);
            let _ = self.flush();
            return Err(format!(
                " -R: cannot make UD QP {:#x} ready: {e}",
                qpn.value()
            ));
        }
        self.cm
            .sidr_reply(id, SidrStatus::Ok, qpn, QKey(qkey), &[])
            .map_err(|e| format!(" -R: cannot answer the SIDR_REQ: {e}"))?;
        self.flush()?;
        Ok(UdPeer {
            gid: from,
            qpn: None,
            qkey,
        })
    }

    /// Tears every connection down (DREQ; the peer's own DREQ is answered) and waits a
    /// bounded time for the peer's answers. Returns the connections left unanswered.
    pub fn disconnect_all(&mut self) -> usize {
        let mut open: Vec<CommId> = std::mem::take(&mut self.conns);
        // The peer may have disconnected first: those are done.
        self.stash.retain(|e| match e {
            Event::Disconnected { id } => {
                open.retain(|c| c != id);
                false
            }
            _ => true,
        });
        let now = self.now();
        for &c in &open {
            let _ = self.cm.disconnect(now, c, &[]);
        }
        let deadline = Instant::now() + TEARDOWN_WAIT;
        while !open.is_empty() && Instant::now() < deadline {
            if self.pump(SLICE).is_err() {
                break;
            }
            self.stash.retain(|e| match e {
                Event::Disconnected { id } => {
                    open.retain(|c| c != id);
                    false
                }
                _ => true,
            });
        }
        for &c in &open {
            self.cm.destroy(c);
        }
        let _ = self.flush();
        open.len()
    }
}

/// The REQ of `end` over `route`, as rdma_cm's (`rdma_connect` with perftest's
/// `conn_param`): RC, retry and RNR retry 7, `rd_atomic` offered both ways, rdma_cm's header
/// in the private data, to the ServiceID of the destination port in RDMA_PS_TCP.
fn connect_params(route: &Route, end: &QpEnd) -> ConnectParams {
    let mut private_data = [0u8; private_len::REQ];
    softib_cm::rdma_cm::private_data(route.src, route.dst, &[], &mut private_data);
    ConnectParams {
        service_id: msg::service_id(PortSpace::Tcp, route.dst.port()),
        local_qpn: end.qpn,
        starting_psn: Psn::new(end.psn),
        responder_resources: end.rd_atomic,
        initiator_depth: end.rd_atomic,
        transport: TransportService::Rc,
        pkey: softib_wire::PKey::DEFAULT,
        path_mtu: end.mtu,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        primary: Path {
            local_gid: route.sgid,
            remote_gid: route.dgid,
            hop_limit: 64,
            local_ack_timeout: end.ack_timeout,
            ..Path::default()
        },
        private_data,
    }
}

/// A REQ's or REP's Starting PSN is the PSN its sender receives from first, and so the one its
/// receiver sends from, as the kernel's CM reads it (`cm_req_handler` and `cm_rep_handler`
/// take it as the QP's `sq_psn`; `ib_send_cm_req` and `ib_send_cm_rep` keep their own as
/// `rq_psn`): each side's QP receives from the PSN it sent and sends from its peer's.
///
/// The active side's QP from the peer's REP: its QPN and PSN, as many reads/atomics
/// outstanding as the peer answers (and this side asked for), as many answered as the peer
/// will have outstanding (within the device's limit), and the peer's RNR retry count.
fn active_qp(route: &Route, end: &QpEnd, rep: &Rep) -> ConnectedQp {
    ConnectedQp {
        reliable: true,
        mtu: mtu_of(end.mtu),
        remote_qpn: rep.local_qpn,
        remote_psn: Psn::new(end.psn),
        local_psn: rep.starting_psn,
        av: av(route),
        max_dest_rd_atomic: rep.initiator_depth.min(end.rd_atomic_max),
        max_rd_atomic: rep.responder_resources.min(end.rd_atomic),
        timeout: end.ack_timeout,
        retry_cnt: 7,
        rnr_retry: rep.rnr_retry_count,
    }
}

/// The passive side's QP from the peer's REQ (the smaller MTU, the requester's retry and
/// RNR retry counts, reads/atomics as in [`active_qp`] mirrored), and the REP that tells the
/// requester what this side took.
fn passive_qp(route: &Route, end: &QpEnd, req: &Req) -> (ConnectedQp, AcceptParams) {
    let c = ConnectedQp {
        reliable: true,
        mtu: mtu_of(end.mtu.min(req.path_mtu)),
        remote_qpn: req.local_qpn,
        remote_psn: Psn::new(end.psn),
        local_psn: req.starting_psn,
        av: av(route),
        max_dest_rd_atomic: req.initiator_depth.min(end.rd_atomic_max),
        max_rd_atomic: req.responder_resources.min(end.rd_atomic),
        timeout: end.ack_timeout.max(req.primary.local_ack_timeout),
        retry_cnt: req.retry_count,
        rnr_retry: req.rnr_retry_count,
    };
    let rep = AcceptParams {
        local_qpn: end.qpn,
        starting_psn: Psn::new(end.psn),
        responder_resources: c.max_dest_rd_atomic,
        initiator_depth: c.max_rd_atomic,
        rnr_retry_count: 7,
        srq: false,
        private_data: [0; private_len::REP],
    };
    (c, rep)
}

/// What a REJ reason means, in a few words.
fn reason_text(r: RejectReason) -> &'static str {
    match r {
        RejectReason::InvalidServiceId => "nobody listens on that port",
        RejectReason::ConsumerDefined => "the program refused it",
        RejectReason::NoResources => "no resources (the listener's backlog is full)",
        RejectReason::Timeout => "the CM timed out",
        RejectReason::StaleConn => "a stale connection",
        _ => "see the REJ reason code (IBA table 106)",
    }
}

/// The `Mtu` of an `ibv_mtu` code.
fn mtu_of(code: u8) -> Mtu {
    match code {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

/// The route to the peer: on RoCE, a GRH to its GID.
fn av(route: &Route) -> AddressVector {
    AddressVector {
        dlid: Lid(0),
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        grh: Some(GlobalRoute {
            dgid: route.dgid,
            flow_label: 0,
            sgid_index: route.sgid_index,
            hop_limit: 64,
            traffic_class: 0,
        }),
        port_num: route.port,
    }
}

/// This side's address: the IPv4 address its GID `sgid` is (`-R` speaks rdma_cm's RoCE
/// addressing), with `port`.
pub fn local_addr(sgid: Gid, port: u16) -> Result<SocketAddr> {
    sgid.to_ipv4()
        .map(|ip| SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port))
        .ok_or_else(|| {
            format!(
                " -R needs a RoCE port with an IPv4 address (rdma_cm addresses it by IP); GID {sgid:?} is not one: choose another with -x, or run without -R"
            )
        })
}

/// The server's address for a client: `host`'s first IPv4 address, with `port`.
pub fn server_addr(host: &str, port: u16) -> Result<SocketAddr> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!(" -R: cannot resolve {host:?}: {e}"))?;
    addrs.into_iter().find(SocketAddr::is_ipv4).ok_or_else(|| {
        format!(" -R: {host:?} has no IPv4 address (perftest's rdma_cm connects over IPv4)")
    })
}

/// The exchange's own QP (`create_comm_struct`'s): an RC QP on a context of its own, over
/// which every message of the exchange is one SEND into one of the peer's posted receives.
pub struct CommQp {
    ctx: Context,
    dev: u32,
    cq: CqHandle,
    qpn: Qpn,
    buf: softib::Buffer,
    mr: MrKeys,
    timeout: Duration,
    /// Receive completions taken while waiting for a send's.
    held: VecDeque<WorkCompletion>,
    /// The CM, fed while this waits: the peer's retransmitted REQ, REP or RTU and its DREQs
    /// are answered during the exchange, which is when the CM has work.
    cm: Option<Rc<RefCell<CmAgent>>>,
    _pd: PdHandle,
}

impl CommQp {
    /// An RC QP in INIT on port `port` of device `dev`.
    pub fn new(dev: u32, port: u8, timeout: Duration) -> Result<CommQp> {
        let e = |what: &str, err: softib::Error| {
            format!(" -R: cannot make the exchange's QP ({what}): {err}")
        };
        let mut ctx = Context::open().map_err(|x| e("open", x))?;
        let len = SLOT * (RECV_SLOTS + 1);
        let buf = ctx.alloc_buffer(len).map_err(|x| e("buffer", x))?;
        let pd = ctx.alloc_pd(dev).map_err(|x| e("PD", x))?;
        let mr = ctx
            .reg_mr(dev, pd, &buf, 0, len, AccessFlags::LOCAL_WRITE)
            .map_err(|x| e("MR", x))?;
        let cq = ctx
            .create_cq(dev, (RECV_SLOTS + 4) as u32)
            .map_err(|x| e("CQ", x))?;
        let qpn = ctx
            .create_qp(
                dev,
                QpInitAttr {
                    qp_type: QpType::Rc,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: 2,
                        max_recv_wr: RECV_SLOTS as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: false,
                },
            )
            .map_err(|x| e("QP", x))?;
        let (a, mask) = crate::port::init_attr(false, port, AccessFlags::LOCAL_WRITE);
        ctx.modify_qp(dev, qpn, &a, mask)
            .map_err(|x| e("INIT", x))?;
        let mut q = CommQp {
            ctx,
            dev,
            cq,
            qpn,
            buf,
            mr,
            timeout,
            held: VecDeque::new(),
            cm: None,
            _pd: pd,
        };
        for slot in 0..RECV_SLOTS {
            q.post_recv(slot)
                .map_err(|x| format!(" -R: cannot post the exchange's receives: {x}"))?;
        }
        Ok(q)
    }

    /// The QP.
    pub fn qpn(&self) -> Qpn {
        self.qpn
    }

    /// RTR and RTS (the CM's `ready` step).
    pub fn ready(&mut self, c: &ConnectedQp) -> std::result::Result<(), crate::port::ReadyError> {
        crate::port::ready_connected(&mut self.ctx, self.dev, self.qpn, c)
    }

    fn post_recv(&mut self, slot: usize) -> io::Result<()> {
        let wr = RecvWr {
            wr_id: slot as u64,
            sg_list: vec![Sge {
                addr: self.buf.addr() + ((slot + 1) * SLOT) as u64,
                length: SLOT as u32,
                lkey: self.mr.lkey,
            }],
        };
        self.ctx
            .post_recv(self.dev, self.qpn, vec![wr])
            .map_err(io::Error::other)
    }

    /// The next completion, or `TimedOut`; a failed one breaks the connection.
    fn next_wc(&mut self, deadline: Instant, what: &str) -> io::Result<WorkCompletion> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, what.to_string()));
            }
            // (Not while a CM step runs: that step feeds the CM itself.)
            if let Some(mut cm) = self.cm.as_ref().and_then(|c| c.try_borrow_mut().ok()) {
                cm.pump(Duration::ZERO).map_err(io::Error::other)?;
            }
            let wcs = self
                .ctx
                .poll_cq(self.dev, self.cq, 1, left.min(SLICE))
                .map_err(io::Error::other)?;
            if let Some(wc) = wcs.into_iter().next() {
                if wc.status != WcStatus::Success {
                    return Err(io::Error::new(
                        io::ErrorKind::ConnectionReset,
                        format!("the exchange's QP completed with {}", wc.status),
                    ));
                }
                return Ok(wc);
            }
        }
    }
}

impl MessageCarrier for CommQp {
    fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.len() > SLOT {
            return Err(io::Error::other(format!(
                "a {}-byte message is larger than the exchange's {SLOT}",
                data.len()
            )));
        }
        if !self.buf.write(0, data) {
            return Err(io::Error::other("cannot write the exchange's buffer"));
        }
        let wr = SendWr {
            wr_id: SEND_ID,
            opcode: WrOpcode::Send,
            sg_list: vec![Sge {
                addr: self.buf.addr(),
                length: data.len() as u32,
                lkey: self.mr.lkey,
            }],
            flags: SendFlags::default().with(SendFlags::SIGNALED),
            inline_data: None,
            ud: None,
        };
        self.ctx
            .post_send(self.dev, self.qpn, vec![wr])
            .map_err(io::Error::other)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let wc = self.next_wc(deadline, "the peer's ACK of an exchange message")?;
            if wc.wr_id == SEND_ID && wc.opcode == WcOpcode::Send {
                return Ok(());
            }
            self.held.push_back(wc);
        }
    }

    fn recv(&mut self, len: usize) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + self.timeout;
        let wc = match self.held.pop_front() {
            Some(wc) => wc,
            None => loop {
                let wc = self.next_wc(deadline, "an exchange message")?;
                if wc.wr_id != SEND_ID {
                    break wc;
                }
            },
        };
        let slot = wc.wr_id as usize;
        if slot >= RECV_SLOTS {
            return Err(io::Error::other(format!("unexpected completion {wc:?}")));
        }
        let got = wc.byte_len as usize;
        let mut out = vec![0u8; len.min(got)];
        let read = self.buf.read((slot + 1) * SLOT, &mut out);
        self.post_recv(slot)?;
        if !read {
            return Err(io::Error::other("cannot read the exchange's buffer"));
        }
        if got < len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a {got}-byte message where {len} bytes were expected (the peer runs other options or another perftest version)"),
            ));
        }
        Ok(out)
    }
}

/// perftest's `-R` connection from one side: the CM agent, this side's addresses, and the
/// role. [`Link::establish`] connects the exchange's QP; [`Link::connect_qp`] each test QP;
/// [`Link::finish`] tears all down.
pub struct Link {
    /// Shared with the exchange's QP, which feeds it while it waits for a message.
    agent: Rc<RefCell<CmAgent>>,
    /// This side's address and GID; on the client also the server's.
    route: Route,
    server: bool,
    timeout: Duration,
    rd_atomic_max: u8,
    ack_timeout: u8,
}

/// What [`Link::establish`] needs to know of the device and the command line.
pub struct Setup<'a> {
    /// The daemon's index of the device.
    pub dev: u32,
    /// Its node GUID (sent in REQ and REP).
    pub node_guid: Guid,
    /// The port's GIDs.
    pub gids: &'a [Gid],
    /// The GID index the test uses (`-x`, or the device's address on RoCE).
    pub gid_index: u8,
    /// The HCA port (`-i`).
    pub port: u8,
    /// The port's active MTU (`ibv_mtu` code).
    pub mtu: u8,
    /// The device's `max_qp_rd_atom`.
    pub rd_atomic_max: u8,
    /// `-p`.
    pub cm_port: u16,
    /// The server's address, on the client.
    pub server: Option<&'a str>,
    /// Test QPs (`-q`).
    pub num_qps: usize,
    /// `-u`.
    pub ack_timeout: u8,
    /// `--timeout`.
    pub timeout: Duration,
    /// `-c UD`: the test QPs are resolved with SIDR (RDMA_PS_UDP).
    pub ud: bool,
}

/// The wall clock's nanoseconds: what differs between two runs of the same process id.
fn clock_nanos() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
}

/// A first PSN, different for every connection of every run.
pub fn fresh_psn(salt: u32) -> u32 {
    let t = clock_nanos() ^ std::process::id().rotate_left(11);
    (t.wrapping_add(salt).wrapping_mul(2_654_435_761) >> 8) & 0xff_ffff
}

impl Link {
    /// Connects the exchange's QP (the server waits for its client without limit, as
    /// upstream's does) and returns the link and the QP, the carrier of the exchange.
    pub fn establish(s: &Setup<'_>) -> Result<(Link, CommQp)> {
        let sgid = *s
            .gids
            .get(usize::from(s.gid_index))
            .ok_or_else(|| format!(" -R: the port has no GID at index {} (-x)", s.gid_index))?;
        let server = s.server.is_none();
        // The client's port is ephemeral, as rdma_cm's is for an unbound id.
        let src_port = if server {
            s.cm_port
        } else {
            32768 + (fresh_psn(1) % 28000) as u16
        };
        let src = local_addr(sgid, src_port)?;
        let (dst, dgid) = match s.server {
            Some(host) => {
                let dst = server_addr(host, s.cm_port)?;
                let IpAddr::V4(v4) = dst.ip() else {
                    return Err(format!(" -R: {dst} is not an IPv4 address"));
                };
                (dst, Gid::from_ipv4(v4.octets()))
            }
            // The server learns its client from each request.
            None => (src, sgid),
        };
        let route = Route {
            src,
            dst,
            sgid,
            sgid_index: s.gid_index,
            dgid,
            port: s.port,
        };
        let agent = CmAgent::open(s.dev, s.node_guid)?;
        let mut comm = CommQp::new(s.dev, s.port, s.timeout)?;
        let agent = Rc::new(RefCell::new(agent));
        comm.cm = Some(agent.clone());
        let mut link = Link {
            agent,
            route,
            server,
            timeout: s.timeout,
            rd_atomic_max: s.rd_atomic_max,
            ack_timeout: s.ack_timeout,
        };
        if server {
            // One listener for every connection of the run: the exchange's, then the test
            // QPs' (the client asks for those only after a hand shake over the first).
            link.agent
                .borrow_mut()
                .listen(PortSpace::Tcp, s.cm_port, 1 + s.num_qps)?;
            if s.ud {
                link.agent
                    .borrow_mut()
                    .listen(PortSpace::Udp, s.cm_port, s.num_qps)?;
            }
        }
        let end = link.end(comm.qpn(), fresh_psn(comm.qpn().value()), 0, s.mtu);
        let c = link.connect_qp(&end, None, |c| comm.ready(c))?;
        if server {
            link.route.dst = c.peer;
        }
        Ok((link, comm))
    }

    /// The peer's address (on the server: the client's, from the exchange's connection).
    pub fn peer(&self) -> SocketAddr {
        self.route.dst
    }

    /// This side's half of a connection of QP `qpn` starting at `psn`, offering
    /// `rd_atomic` reads/atomics, on a path of MTU code `mtu`.
    pub fn end(&self, qpn: Qpn, psn: u32, rd_atomic: u8, mtu: u8) -> QpEnd {
        QpEnd {
            qpn,
            psn,
            rd_atomic,
            rd_atomic_max: self.rd_atomic_max,
            mtu,
            ack_timeout: self.ack_timeout,
        }
    }

    /// Connects QP `end`: the client sends the REQ, the server takes the next request
    /// (waiting until `deadline`; `None`: the first, without limit). `ready` moves the QP to
    /// RTR and RTS.
    pub fn connect_qp(
        &mut self,
        end: &QpEnd,
        deadline: Option<Instant>,
        ready: impl FnMut(&ConnectedQp) -> std::result::Result<(), crate::port::ReadyError>,
    ) -> Result<Connected> {
        let bounded = Instant::now() + self.timeout;
        if !self.server {
            return self
                .agent
                .borrow_mut()
                .connect(&self.route, end, bounded, ready);
        }
        let ours = self.route;
        let end = *end;
        let c = self.agent.borrow_mut().accept(
            move |req, from| {
                let dst = softib_cm::rdma_cm::request_addrs(&req.private_data)
                    .map_or(ours.dst, |(peer, _)| peer);
                let route = Route {
                    dst,
                    dgid: from,
                    ..ours
                };
                Ok((route, end))
            },
            deadline,
            ready,
        )?;
        Ok(c)
    }

    /// `-c UD`: resolves UD QP `qpn` (the client sends a SIDR_REQ; the server answers the
    /// next, after `before_reply`). Waits `--timeout`.
    pub fn connect_ud(
        &mut self,
        qpn: Qpn,
        before_reply: impl FnOnce() -> softib::Result<()>,
    ) -> Result<UdPeer> {
        let deadline = Instant::now() + self.timeout;
        if self.server {
            self.agent
                .borrow_mut()
                .answer_ud(qpn, deadline, before_reply)
        } else {
            self.agent
                .borrow_mut()
                .resolve_ud(&self.route, qpn, deadline)
        }
    }

    /// The address vector to the peer `gid` from this side's GID.
    pub fn av_to(&self, gid: Gid) -> AddressVector {
        av(&Route {
            dgid: gid,
            ..self.route
        })
    }

    /// The peer's message after the connections so far has come: see
    /// [`CmAgent::confirm`].
    pub fn confirm(&mut self) -> Result<()> {
        self.agent.borrow_mut().confirm()
    }

    /// The server has taken all its test QPs' connections: it stops listening (upstream
    /// destroys its listening id).
    pub fn accepted_all(&mut self) {
        self.agent.borrow_mut().unlisten();
    }

    /// Tears every connection down (DREQ, or answering the peer's) and waits a bounded time
    /// for the peer; says on stderr what went unanswered.
    pub fn finish(self) {
        self.agent.borrow_mut().unlisten();
        let left = self.agent.borrow_mut().disconnect_all();
        if left > 0 {
            eprintln!(
                " -R: {left} rdma_cm connection(s) to {} had no answer to their DREQ within {} s; left to the peer's CM",
                self.route.dst,
                TEARDOWN_WAIT.as_secs()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn gid(last: u8) -> Gid {
        Gid::from_ipv4([10, 0, 0, last])
    }

    fn route(from: u8, to: u8, port: u16) -> Route {
        Route {
            src: SocketAddr::from(([10, 0, 0, from], 40000)),
            dst: SocketAddr::from(([10, 0, 0, to], port)),
            sgid: gid(from),
            sgid_index: 1,
            dgid: gid(to),
            port: 1,
        }
    }

    fn end(qpn: u32, psn: u32, rd_atomic: u8, rd_atomic_max: u8, mtu: u8) -> QpEnd {
        QpEnd {
            qpn: Qpn::new(qpn),
            psn,
            rd_atomic,
            rd_atomic_max,
            mtu,
            ack_timeout: 14,
        }
    }

    /// Carries every queued MAD of `from` to `to`.
    fn deliver(from: &mut Cm<Gid>, from_gid: Gid, to: &mut Cm<Gid>) {
        while let Some((_, mad)) = from.poll_transmit() {
            to.handle_mad(Duration::ZERO, from_gid, &mad);
        }
    }

    /// The client's REQ and the server's REP, through two CM machines, leave each QP
    /// pointed at the other's with the same PSNs, the smaller MTU, and reads/atomics that
    /// fit: what one side has outstanding the other answers.
    #[test]
    fn both_sides_ready_their_qps_for_each_other() {
        let mut a = Cm::<Gid>::new(Config::default());
        let mut b = Cm::<Gid>::new(Config {
            first_comm_id: 1000,
            ..Config::default()
        });
        b.listen(msg::service_id(PortSpace::Tcp, 18515), 2).unwrap();
        let (ra, rb) = (route(2, 3, 18515), route(3, 2, 18515));
        // ib_read_bw: the client asks for 16, the server's device answers up to 128 and it
        // asks for 128 itself.
        let (ea, eb) = (end(0x11, 0xabc, 16, 128, 5), end(0x22, 0xdef, 128, 128, 3));
        let comm = a.connect(Duration::ZERO, gid(3), &connect_params(&ra, &ea));
        deliver(&mut a, gid(2), &mut b);
        let Some(Event::ConnectRequest { id, from, req }) = b.poll_event() else {
            panic!("no request")
        };
        assert_eq!(from, gid(2));
        assert_eq!(
            softib_cm::rdma_cm::request_addrs(&req.private_data),
            Some((ra.src, ra.dst.ip()))
        );
        let (qb, rep) = passive_qp(&rb, &eb, &req);
        b.accept(Duration::ZERO, id, &rep).unwrap();
        deliver(&mut b, gid(3), &mut a);
        let Some(Event::Reply { id: got, rep }) = a.poll_event() else {
            panic!("no reply")
        };
        assert_eq!(got, comm);
        let qa = active_qp(&ra, &ea, &rep);
        a.ready_to_use(comm, &[]).unwrap();
        deliver(&mut a, gid(2), &mut b);
        assert!(a.is_established(comm) && b.is_established(id));
        // Each QP receives from the Starting PSN its side sent and sends from its peer's, as
        // the kernel's CM has it: what one sends from is what the other receives from.
        assert_eq!((qa.remote_qpn, qa.remote_psn), (eb.qpn, Psn::new(ea.psn)));
        assert_eq!((qb.remote_qpn, qb.remote_psn), (ea.qpn, Psn::new(eb.psn)));
        assert_eq!(
            (qa.local_psn, qb.local_psn),
            (Psn::new(eb.psn), Psn::new(ea.psn))
        );
        assert_ne!(ea.psn, eb.psn, "the test tells the two apart");
        assert_eq!((qa.mtu, qb.mtu), (Mtu::Mtu4096, Mtu::Mtu1024));
        assert_eq!(qa.max_rd_atomic, 16);
        assert!(qb.max_dest_rd_atomic >= qa.max_rd_atomic);
        assert!(qa.max_dest_rd_atomic >= qb.max_rd_atomic);
        assert_eq!((qa.rnr_retry, qb.rnr_retry, qb.retry_cnt), (7, 7, 7));
        assert_eq!(qa.av.grh.unwrap().dgid, gid(3));
        assert_eq!(qb.av.grh.unwrap().dgid, gid(2));
    }

    /// A write test offers no reads or atomics either way.
    #[test]
    fn a_write_test_offers_no_reads() {
        let (ra, rb) = (route(2, 3, 1), route(3, 2, 1));
        let p = connect_params(&ra, &end(1, 1, 0, 128, 5));
        assert_eq!((p.responder_resources, p.initiator_depth), (0, 0));
        assert_eq!(p.service_id, msg::service_id(PortSpace::Tcp, 1));
        let mut a = Cm::<Gid>::new(Config::default());
        a.connect(Duration::ZERO, gid(3), &p);
        let (_, mad) = a.poll_transmit().unwrap();
        let Ok((_, softib_cm::Message::Req(req))) = softib_cm::Message::parse(&mad) else {
            panic!("not a REQ")
        };
        let (qb, rep) = passive_qp(&rb, &end(2, 2, 0, 128, 5), &req);
        assert_eq!((qb.max_rd_atomic, rep.initiator_depth), (0, 0));
        assert_eq!((qb.max_dest_rd_atomic, rep.responder_resources), (0, 0));
    }

    #[test]
    fn addresses_and_words() {
        assert_eq!(
            local_addr(gid(7), 5).unwrap(),
            SocketAddr::from(([10, 0, 0, 7], 5))
        );
        let e = local_addr(
            Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            5,
        )
        .unwrap_err();
        assert!(e.contains("IPv4") && e.contains("-x"), "{e}");
        assert_eq!(
            server_addr("127.0.0.3", 18515).unwrap(),
            SocketAddr::from(([127, 0, 0, 3], 18515))
        );
        assert!(server_addr("::1", 1).unwrap_err().contains("IPv4"));
        assert_eq!(
            reason_text(RejectReason::InvalidServiceId),
            "nobody listens on that port"
        );
        assert_eq!(mtu_of(1), Mtu::Mtu256);
        assert_eq!(mtu_of(5), Mtu::Mtu4096);
        for salt in 0..64 {
            assert!(fresh_psn(salt) <= 0xff_ffff);
        }
    }
}
