//! The provider: the data path in this process (`SOFTIB_DATAPATH=process`).
//!
//! For each RoCE device a session uses, an [`Engine`] — the same `softib_engine::Hca` the
//! daemon runs, over this process's memory ([`memory`]), with its own sockets ([`engine`]) —
//! holds the session's PDs, MRs, CQs, QPs, SRQs and AHs on that device. The daemon stays the
//! HCA's identity: it hands out the QPNs (blocks of `softib_engine::QPN_BLOCK`) and memory
//! keys, so they are unique on the device; it is told what the engine made (`softib res`); it
//! binds the engine's socket into the device's SO_REUSEPORT group and steers the engine's
//! QPNs to it; and when the session ends it quarantines the QPNs and keys.
//!
//! Post and poll run the engine inline, on the caller's thread, under the engine's lock. A
//! progress thread per engine runs what arrives and the timers that fall due while no
//! application thread is inside (the target of a WRITE never calls the library): it sleeps in
//! `poll(2)` on the engine's socket and a kick eventfd until the engine's next deadline, and
//! a post that makes the deadline earlier kicks it. Idle, nothing runs.
//!
//! Emulated IB devices keep the daemon path: every packet of an IB port passes the daemon's
//! cable anyway.

mod engine;
mod memory;

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant as StdInstant};

use softib_engine::{
    AddressVector, AhHandle, AttrMask, CqHandle, Hca, HcaConfig, PdHandle, PortAttr, QpAttr,
    QpInitAttr, SrqHandle, VerbsError,
};
use softib_net::ring::PacketRing;
use softib_net::shm::SharedRegion;
use softib_proto::{ErrorKind, ProcessObject, Request, Response};

use crate::daemon::Conn;
use crate::{AccessFlags, DeviceInfo, Error, MrKeys, Qpn, RecvWr, Result, SendWr, WorkCompletion};
use engine::Station;
use memory::LocalMemory;

/// The hand-on ring's record bytes: datagrams steered here for QPNs not this engine's wait
/// there for the daemon's next turn.
const HAND_ON_BYTES: usize = 1 << 18;

/// Whether this process asked for the process data path (`SOFTIB_DATAPATH=process`).
pub(crate) fn wanted() -> Result<bool> {
    match std::env::var("SOFTIB_DATAPATH").as_deref() {
        Ok("process") => Ok(true),
        Ok("daemon") | Ok("") | Err(std::env::VarError::NotPresent) => Ok(false),
        Ok(other) => Err(Error::Refused {
            kind: ErrorKind::Invalid,
            message: format!(
                "SOFTIB_DATAPATH={other}: unknown data path (process: the engine in this \
                 process; daemon: the engine in softibd)"
            ),
        }),
        Err(e) => Err(Error::Refused {
            kind: ErrorKind::Invalid,
            message: format!("SOFTIB_DATAPATH: {e}"),
        }),
    }
}

/// A verbs error of the process engine, as the daemon would have answered it.
fn refused(e: VerbsError) -> Error {
    let kind = match e {
        VerbsError::NotFound(_) => ErrorKind::NotFound,
        VerbsError::Exhausted(_) => ErrorKind::Exhausted,
        VerbsError::Busy(_) => ErrorKind::Busy,
        VerbsError::WrongState { .. } => ErrorKind::WrongState,
        _ => ErrorKind::Invalid,
    };
    Error::Refused {
        kind,
        message: e.to_string(),
    }
}

/// What the engine and its progress thread share.
struct Shared {
    station: Mutex<Station>,
    /// Written to end the progress thread's sleep (a stop, or an earlier deadline).
    kick: OwnedFd,
    stop: AtomicBool,
    /// When the progress thread sleeps until, in engine microseconds (`u64::MAX`: no timer).
    sleeping_until: AtomicU64,
}

impl Shared {
    fn kick(&self) {
        let _ = rustix::io::write(&self.kick, &1u64.to_ne_bytes());
    }
}

/// One device's process engine and its progress thread.
pub(crate) struct Engine {
    dev: u32,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("dev", &self.dev).finish()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.kick();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Engine {
    /// Starts the engine of device `dev` (described by `info`): joins the device's steering
    /// group and starts the progress thread.
    pub(crate) fn start(conn: &mut Conn, dev: u32, info: &DeviceInfo) -> Result<Engine> {
        let port = info
            .ports
            .first()
            .ok_or(Error::Unexpected("a device without ports"))?;
        let mut config = HcaConfig::with_seed(
            u64::from(std::process::id()) << 32
                ^ u64::from(dev)
                ^ StdInstant::now().elapsed().as_nanos() as u64,
        );
        config.device = info.attr.clone();
        config.ports = vec![PortAttr {
            max_mtu: port.max_mtu,
            active_mtu: port.active_mtu,
            lid: port.lid,
            gids: port.gids.clone(),
            pkeys: vec![softib_wire::PKey::DEFAULT],
            active: port.state == 4,
        }];
        let hca = Hca::new(config, LocalMemory::default());
        let hand_on = PacketRing::create("softib-hand-on", HAND_ON_BYTES)?;
        let join = Request::SteerJoin {
            dev,
            hand_on: HAND_ON_BYTES as u32,
        };
        let (resp, mut fds) = conn.call_receiving_fds(&join, &[hand_on.fd()])?;
        let Response::Steered { addr, .. } = resp else {
            return Err(Error::Unexpected("not Steered"));
        };
        let member = fds
            .pop()
            .ok_or(Error::Unexpected("Steered without its socket"))?;
        let station = Station::new(hca, std::net::UdpSocket::from(member), addr, hand_on)?;
        let kick = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(std::io::Error::from)?;
        let shared = Arc::new(Shared {
            station: Mutex::new(station),
            kick,
            stop: AtomicBool::new(false),
            sleeping_until: AtomicU64::new(u64::MAX),
        });
        let for_thread = Arc::clone(&shared);
        let control = conn.socket().try_clone_to_owned()?;
        let thread = std::thread::Builder::new()
            .name(format!("softib-progress-{dev}"))
            .spawn(move || progress(&for_thread, control))?;
        Ok(Engine {
            dev,
            shared,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Station> {
        // A poisoned lock means a panic on another thread inside the engine: its state is as
        // that panic left it, which the engine's own checks judge from here on.
        self.shared
            .station
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// After a command that may have armed a timer: wakes the progress thread when the
    /// engine's deadline is now earlier than the one it sleeps until.
    fn after_command(&self, st: &Station) {
        if let Some(t) = st.ca.poll_timeout() {
            if t.as_micros() < self.shared.sleeping_until.load(Ordering::Acquire) {
                self.shared.kick();
            }
        }
    }

    /// Tells the daemon of `object`; undoes `undo` in the engine if it refuses.
    fn own(
        &self,
        conn: &mut Conn,
        object: ProcessObject,
        undo: impl FnOnce(&mut Station),
    ) -> Result<()> {
        let r = conn.ok(&Request::Own {
            dev: self.dev,
            object,
        });
        if r.is_err() {
            undo(&mut self.lock());
        }
        r
    }

    fn disown(&self, conn: &mut Conn, object: ProcessObject) -> Result<()> {
        conn.ok(&Request::Disown {
            dev: self.dev,
            object,
        })
    }

    pub(crate) fn alloc_pd(&self, conn: &mut Conn) -> Result<PdHandle> {
        let pd = self.lock().ca.hca_mut().alloc_pd().map_err(refused)?;
        self.own(conn, ProcessObject::Pd(pd.0), |s| {
            let _ = s.ca.hca_mut().dealloc_pd(pd);
        })?;
        Ok(pd)
    }

    pub(crate) fn dealloc_pd(&self, conn: &mut Conn, pd: PdHandle) -> Result<()> {
        self.lock().ca.hca_mut().dealloc_pd(pd).map_err(refused)?;
        self.disown(conn, ProcessObject::Pd(pd.0))
    }

    /// `ibv_reg_mr` of a buffer (`map`: the provider's own mapping of it, which the
    /// application has at `base`) or, with `map` `None`, of this process's memory.
    pub(crate) fn reg_mr(
        &self,
        conn: &mut Conn,
        pd: PdHandle,
        map: Option<(SharedRegion, u64)>,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        let key = match conn.call(&Request::AllocMrKey { dev: self.dev })? {
            Response::MrKey(k) => k,
            _ => return Err(Error::Unexpected("not a key")),
        };
        let done = {
            let mut st = self.lock();
            let region = st.new_region();
            match map {
                Some((map, base)) => st.ca.hca_mut().memory_mut().add_mapped(region, base, map),
                None => st
                    .ca
                    .hca_mut()
                    .memory_mut()
                    .add_own(region, addr, len as u64),
            }
            let r = st
                .ca
                .hca_mut()
                .reg_mr_keyed(pd, addr, len as u64, access, region, key);
            if r.is_err() {
                st.ca.hca_mut().memory_mut().remove(region);
            }
            r
        };
        if let Err(e) = done {
            let _ = conn.ok(&Request::FreeMrKey { dev: self.dev, key });
            return Err(refused(e));
        }
        Ok(MrKeys {
            lkey: key,
            rkey: key,
            addr,
            len: len as u64,
        })
    }

    pub(crate) fn dereg_mr(&self, conn: &mut Conn, key: u32) -> Result<()> {
        {
            let mut st = self.lock();
            let mr = st.ca.hca_mut().dereg_mr(key).map_err(refused)?;
            st.ca.hca_mut().memory_mut().remove(mr.region);
        }
        conn.ok(&Request::FreeMrKey { dev: self.dev, key })
    }

    pub(crate) fn create_cq(&self, conn: &mut Conn, cqe: u32) -> Result<CqHandle> {
        let cq = self.lock().ca.hca_mut().create_cq(cqe).map_err(refused)?;
        self.own(conn, ProcessObject::Cq(cq.0), |s| {
            let _ = s.ca.hca_mut().destroy_cq(cq);
        })?;
        Ok(cq)
    }

    pub(crate) fn destroy_cq(&self, conn: &mut Conn, cq: CqHandle) -> Result<()> {
        self.lock().ca.hca_mut().destroy_cq(cq).map_err(refused)?;
        self.disown(conn, ProcessObject::Cq(cq.0))
    }

    pub(crate) fn create_qp(&self, conn: &mut Conn, init: QpInitAttr) -> Result<Qpn> {
        let spare = self.lock().free_qpns.pop();
        let qpn = match spare {
            Some(q) => q,
            None => {
                let (first, count) = match conn.call(&Request::AllocQpnBlock { dev: self.dev })? {
                    Response::QpnBlock { first, count } => (first, count),
                    _ => return Err(Error::Unexpected("not a QPN block")),
                };
                let mut st = self.lock();
                st.blocks.insert(first.value());
                // Handed out lowest first.
                st.free_qpns
                    .extend((1..count).rev().map(|i| Qpn::new(first.value() + i)));
                first
            }
        };
        let made = self.lock().ca.hca_mut().create_qp_numbered(init, qpn);
        if let Err(e) = made {
            self.lock().free_qpns.push(qpn);
            return Err(refused(e));
        }
        self.own(conn, ProcessObject::Qp(qpn), |s| {
            let _ = s.ca.hca_mut().destroy_qp(qpn);
            s.free_qpns.push(qpn);
        })?;
        Ok(qpn)
    }

    pub(crate) fn modify_qp(&self, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        let mut st = self.lock();
        st.ca.modify_qp(qpn, attr, mask).map_err(refused)?;
        // A transition may have queued packets (flushes) or armed a timer.
        st.send_now();
        self.after_command(&st);
        Ok(())
    }

    pub(crate) fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        self.lock().ca.hca().query_qp(qpn).map_err(refused)
    }

    pub(crate) fn destroy_qp(&self, conn: &mut Conn, qpn: Qpn) -> Result<()> {
        {
            let mut st = self.lock();
            st.ca.hca_mut().destroy_qp(qpn).map_err(refused)?;
            st.free_qpns.push(qpn);
        }
        self.disown(conn, ProcessObject::Qp(qpn))
    }

    pub(crate) fn create_srq(
        &self,
        conn: &mut Conn,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqHandle> {
        let srq = self
            .lock()
            .ca
            .hca_mut()
            .create_srq(pd, max_wr, max_sge)
            .map_err(refused)?;
        self.own(conn, ProcessObject::Srq(srq.0), |s| {
            let _ = s.ca.hca_mut().destroy_srq(srq);
        })?;
        Ok(srq)
    }

    pub(crate) fn modify_srq(&self, srq: SrqHandle, limit: u32) -> Result<()> {
        self.lock()
            .ca
            .hca_mut()
            .modify_srq(srq, limit)
            .map_err(refused)
    }

    pub(crate) fn destroy_srq(&self, conn: &mut Conn, srq: SrqHandle) -> Result<()> {
        self.lock().ca.hca_mut().destroy_srq(srq).map_err(refused)?;
        self.disown(conn, ProcessObject::Srq(srq.0))
    }

    pub(crate) fn post_srq_recv(&self, srq: SrqHandle, wrs: Vec<RecvWr>) -> Result<()> {
        let mut st = self.lock();
        for (i, wr) in wrs.into_iter().enumerate() {
            st.ca
                .hca_mut()
                .post_srq_recv(srq, wr)
                .map_err(|e| at_wr("receive", i, e))?;
        }
        Ok(())
    }

    pub(crate) fn create_ah(
        &self,
        conn: &mut Conn,
        pd: PdHandle,
        av: AddressVector,
    ) -> Result<AhHandle> {
        let ah = self
            .lock()
            .ca
            .hca_mut()
            .create_ah(pd, av)
            .map_err(refused)?;
        self.own(conn, ProcessObject::Ah(ah.0), |s| {
            let _ = s.ca.hca_mut().destroy_ah(ah);
        })?;
        Ok(ah)
    }

    pub(crate) fn destroy_ah(&self, conn: &mut Conn, ah: AhHandle) -> Result<()> {
        self.lock().ca.hca_mut().destroy_ah(ah).map_err(refused)?;
        self.disown(conn, ProcessObject::Ah(ah.0))
    }

    /// `ibv_post_send`: the WRs go into the engine and their packets out at once.
    pub(crate) fn post_send(&self, qpn: Qpn, wrs: Vec<SendWr>) -> Result<()> {
        let mut st = self.lock();
        let mut r = Ok(());
        for (i, wr) in wrs.into_iter().enumerate() {
            if let Err(e) = st.ca.hca_mut().post_send(qpn, wr) {
                r = Err(at_wr("send WR", i, e));
                break;
            }
        }
        st.send_now();
        self.after_command(&st);
        r
    }

    pub(crate) fn post_recv(&self, qpn: Qpn, wrs: Vec<RecvWr>) -> Result<()> {
        let mut st = self.lock();
        for (i, wr) in wrs.into_iter().enumerate() {
            st.ca
                .hca_mut()
                .post_recv(qpn, wr)
                .map_err(|e| at_wr("receive WR", i, e))?;
        }
        Ok(())
    }

    /// `ibv_poll_cq`: runs the engine inline, then takes up to `max` completions; with a
    /// nonzero `wait`, sleeps on the engine's socket (up to its next deadline) until one
    /// comes or `wait` is over.
    pub(crate) fn poll_cq(
        &self,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        let until = StdInstant::now() + wait;
        let mut out = Vec::new();
        loop {
            let next = {
                let mut st = self.lock();
                st.turn();
                while out.len() < max as usize {
                    match st.ca.hca_mut().poll_cq(cq) {
                        Some(wc) => out.push(wc),
                        None => break,
                    }
                }
                if out.is_empty() && !st.ca.hca().has_cq(cq) {
                    // A CQ that does not exist is refused rather than waited on.
                    return Err(refused(VerbsError::NotFound("CQ")));
                }
                st.ca.poll_timeout().map(|t| st.std_time(t))
            };
            let now = StdInstant::now();
            if !out.is_empty() || now >= until {
                return Ok(out);
            }
            let wake = next.map_or(until, |t| t.min(until));
            self.wait_readable(wake.saturating_duration_since(now));
        }
    }

    /// Sleeps until the engine's socket is readable or `d` has passed.
    fn wait_readable(&self, d: Duration) {
        let fd = {
            let st = self.lock();
            st.socket().as_fd().try_clone_to_owned()
        };
        let Ok(fd) = fd else {
            std::thread::sleep(d.min(Duration::from_millis(1)));
            return;
        };
        let mut pfd = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let _ = rustix::event::poll(&mut pfd, Some(&timespec(d)));
    }

    /// The engine's asynchronous events (device `dev`'s).
    pub(crate) fn async_events(&self) -> Vec<softib_engine::verbs::AsyncEvent> {
        let mut st = self.lock();
        std::iter::from_fn(|| st.ca.poll_event()).collect()
    }
}

fn at_wr(what: &str, i: usize, e: VerbsError) -> Error {
    let Error::Refused { kind, message } = refused(e) else {
        return refused(e);
    };
    Error::Refused {
        kind,
        message: format!("{what} {i} of the list: {message}"),
    }
}

/// The progress thread: sleeps on the socket and the kick until the engine's deadline, then
/// runs a turn — what arrived, the due timers, what is to send. It also watches the control
/// connection (`control`): when the daemon goes (stopped, restarted, killed), the HCA's
/// identity goes with it — QPN and key uniqueness, steering — so every QP moves to the error
/// state, its outstanding work completing with IBV_WC_WR_FLUSH_ERR, as on a device that was
/// removed; control verbs then fail with `DaemonGone`.
fn progress(shared: &Shared, control: OwnedFd) {
    let mut control = Some(control);
    let socket = {
        let st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
        st.socket().as_fd().try_clone_to_owned()
    };
    let Ok(socket) = socket else {
        return;
    };
    let mut drain = [0u8; 8];
    while !shared.stop.load(Ordering::Acquire) {
        let wait = {
            let st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
            match st.ca.poll_timeout() {
                Some(t) => {
                    shared
                        .sleeping_until
                        .store(t.as_micros(), Ordering::Release);
                    let at = st.std_time(t);
                    Some(at.saturating_duration_since(StdInstant::now()))
                }
                None => {
                    shared.sleeping_until.store(u64::MAX, Ordering::Release);
                    None
                }
            }
        };
        let timeout = wait.map(timespec);
        use rustix::event::{PollFd, PollFlags};
        let mut pfd = [
            PollFd::new(&socket, PollFlags::IN),
            PollFd::new(&shared.kick, PollFlags::IN),
            // Only the peer's hang-up, never the answers the application thread reads.
            PollFd::new(control.as_ref().unwrap_or(&shared.kick), PollFlags::RDHUP),
        ];
        let n = if control.is_some() { 3 } else { 2 };
        let _ = rustix::event::poll(&mut pfd[..n], timeout.as_ref());
        if pfd[1].revents().contains(PollFlags::IN) {
            let _ = rustix::io::read(&shared.kick, &mut drain);
        }
        let gone = n == 3
            && pfd[2]
                .revents()
                .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR);
        if shared.stop.load(Ordering::Acquire) {
            break;
        }
        let mut st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
        if gone {
            control = None;
            fail_all(&mut st);
        }
        st.turn();
    }
}

/// Moves every QP to the error state (the daemon is gone).
fn fail_all(st: &mut Station) {
    let qpns: Vec<Qpn> = st.ca.hca().qpns().collect();
    let err = QpAttr {
        qp_state: softib_engine::verbs::QpState::Err,
        ..QpAttr::default()
    };
    for qpn in qpns {
        let _ = st.ca.modify_qp(qpn, &err, AttrMask::STATE);
    }
}

/// `d` as poll(2)'s timeout.
fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}
