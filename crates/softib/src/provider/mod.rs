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
mod groups;
mod memory;
mod notify;
mod oversight;
pub(crate) mod pause;
mod peers;
mod progress;

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
use crate::{
    AccessFlags, DeviceInfo, Error, Gid, Lid, MrKeys, Qpn, RecvWr, Result, SendWr, WorkCompletion,
};
use engine::Station;
use memory::LocalMemory;
use progress::{progress, progress_spin, read_daemon_events, DaemonEvents};
use softib_link::roce::framing;

/// The hand-on ring's record bytes: datagrams steered here for QPNs not this engine's wait
/// there for the daemon's next turn.
const HAND_ON_BYTES: usize = 1 << 18;

/// What a process engine's links carried and lost ([`crate::Context::process_counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    /// Other processes' engines this one has rings to.
    pub peers: u64,
    /// Packets put into peers' rings.
    pub ring_sent: u64,
    /// Packets taken from peers' rings.
    pub ring_received: u64,
    /// Doorbells written to peers: records put into a ring while its reader was not looking.
    pub ring_bells: u64,
    /// Packets for a peer lost (its ring and backlog full, or the peer gone).
    pub ring_lost: u64,
    /// Payloads sent by reference (the peer read them from this process's memory).
    pub by_reference: u64,
    /// Payloads read from a peer's memory.
    pub read_by_reference: u64,
    /// Rings a peer broke (the pair was dropped).
    pub rings_broken: u64,
    /// Datagrams the kernel would not take.
    pub tx_dropped: u64,
    /// Datagrams steered here for another's QPN, handed on to the daemon.
    pub handed_on: u64,
    /// Datagrams the full hand-on ring could not take.
    pub hand_on_full: u64,
}

/// Whether RC QPs may reach other processes' engines through rings (`SOFTIB_PEER_RINGS=0`
/// keeps every packet on the kernel's path, for comparison and tests).
fn rings_wanted() -> bool {
    // Read once: it is asked on every UD post.
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var("SOFTIB_PEER_RINGS").map_or(true, |v| v != "0"))
}

/// The most UD destinations an engine asks the daemon about; beyond, UD goes through the
/// kernel (a program that sends to thousands of QPs gains little from rings).
const MAX_UD_ASKED: usize = 4096;

/// An application thread counted while it is in a poll (waiting for a completion, or turning
/// the engine).
struct Counted<'a>(&'a std::sync::atomic::AtomicU32);

impl<'a> Counted<'a> {
    fn new(count: &'a std::sync::atomic::AtomicU32) -> Counted<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A non-blocking eventfd.
fn eventfd() -> std::io::Result<OwnedFd> {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .map_err(std::io::Error::from)
}

/// Where a session's RoCE devices run their engines (`SOFTIB_DATAPATH`, or
/// [`crate::Context::open_on`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataPath {
    /// In softibd (`SOFTIB_DATAPATH=daemon`).
    Daemon,
    /// In this process, or an error where the engine cannot start (`SOFTIB_DATAPATH=process`).
    Process,
    /// In this process where the engine starts, else in softibd (`SOFTIB_DATAPATH=auto`, and
    /// the default).
    PreferProcess,
}

/// What the data path is when `SOFTIB_DATAPATH` is unset: the engine in the process where it
/// starts (RoCE devices), as a real provider drives its NIC.
const DEFAULT_DATAPATH: DataPath = DataPath::PreferProcess;

/// The data path this process asked for (`SOFTIB_DATAPATH`).
pub fn wanted() -> Result<DataPath> {
    match std::env::var("SOFTIB_DATAPATH").as_deref() {
        Ok("process") => Ok(DataPath::Process),
        Ok("daemon") => Ok(DataPath::Daemon),
        Ok("auto") => Ok(DataPath::PreferProcess),
        Ok("") | Err(std::env::VarError::NotPresent) => Ok(DEFAULT_DATAPATH),
        Ok(other) => Err(Error::Refused {
            kind: ErrorKind::Invalid,
            message: format!(
                "SOFTIB_DATAPATH={other}: unknown data path (process: the engine in this \
                 process; daemon: the engine in softibd; auto: in this process where it \
                 starts, else in softibd)"
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
    /// A timerfd the progress thread sleeps on too, set by application threads to an earlier
    /// deadline than `sleeping_until` (`Engine::after_command`), and when it is set for
    /// (engine microseconds; `u64::MAX`: unset since the progress thread last slept).
    timer: OwnedFd,
    timer_at: AtomicU64,
    /// The engine's member socket, which application threads waiting for a completion
    /// sleep on (with the kick, which peers write, and `app_bell`).
    socket: OwnedFd,
    /// Written by the progress thread after a turn that did something while application
    /// threads wait for a completion (`app_waiting` of them): what it did may have been
    /// their completion.
    app_bell: OwnedFd,
    app_waiting: std::sync::atomic::AtomicU32,
    /// Application threads inside a poll that run the engine's turns themselves (not those
    /// asleep in one): while any does, the progress thread leaves them the turns the socket
    /// or a timer would wake it for ([`SOCKET_DEFER`]).
    app_turning: std::sync::atomic::AtomicU32,
    /// The engine's multicast groups' epoll set, which the progress thread sleeps on too.
    groups: OwnedFd,
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
        self.lock().flush_pending();
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
        let kick = eventfd()?;
        let socket = station.socket().as_fd().try_clone_to_owned()?;
        let groups = station.groups.fd().try_clone_to_owned()?;
        let shared = Arc::new(Shared {
            station: Mutex::new(station),
            kick,
            stop: AtomicBool::new(false),
            sleeping_until: AtomicU64::new(u64::MAX),
            timer: rustix::time::timerfd_create(
                rustix::time::TimerfdClockId::Monotonic,
                rustix::time::TimerfdFlags::CLOEXEC | rustix::time::TimerfdFlags::NONBLOCK,
            )
            .map_err(std::io::Error::from)?,
            timer_at: AtomicU64::new(u64::MAX),
            socket,
            app_bell: eventfd()?,
            app_waiting: std::sync::atomic::AtomicU32::new(0),
            app_turning: std::sync::atomic::AtomicU32::new(0),
            groups,
        });
        // The event channel: the daemon pushes rings to other processes' engines on it, and
        // the device's faults and capture; those engines write the kick when they put packets
        // into a ring to this one. The counter page goes with it.
        let (events, daemons_end) = std::os::unix::net::UnixStream::pair()?;
        events.set_nonblocking(true)?;
        {
            let st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
            let page = st.oversight.page();
            conn.call_with_fds(
                &Request::OpenEvents {
                    dev,
                    counters: page.len() as u32,
                },
                &[
                    daemons_end.as_fd(),
                    shared.kick.as_fd(),
                    page.fd(),
                    st.inbound.fd(),
                ],
            )?;
        }
        drop(daemons_end);
        let events_fd = events.as_fd().try_clone_to_owned()?;
        {
            let mut st = shared.station.lock().unwrap_or_else(|p| p.into_inner());
            st.daemon_events = Some(DaemonEvents {
                stream: events,
                reader: softib_proto::FrameReader::default(),
            });
            // The device's faults and capture as they are now were pushed before the answer:
            // taken before the first packet leaves.
            read_daemon_events(&mut st);
        }
        pause::register(&shared);
        let for_thread = Arc::clone(&shared);
        let control = conn.socket().try_clone_to_owned()?;
        let thread = std::thread::Builder::new()
            .name(format!("softib-progress-{dev}"))
            .spawn(move || progress(&for_thread, control, events_fd))?;
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

    /// After a command that may have armed a timer: when the engine's deadline is now
    /// earlier than the one the progress thread sleeps until, sets the progress thread's
    /// timer to it — a system call on this thread, where a kick would wake the progress
    /// thread now, on every post of a ping-pong, for a deadline milliseconds away.
    fn after_command(&self, st: &Station) {
        let Some(t) = st.deadline() else {
            return;
        };
        let s = &self.shared;
        let at = t.as_micros();
        if at >= s.sleeping_until.load(Ordering::Acquire)
            || at >= s.timer_at.load(Ordering::Acquire)
        {
            return;
        }
        s.timer_at.store(at, Ordering::Release);
        let after = Duration::from_micros(t.saturating_since(st.now()).as_micros());
        let spec = rustix::time::Itimerspec {
            it_interval: timespec(Duration::ZERO),
            // A deadline already passed still sets the timer (zero would disarm it).
            it_value: timespec(after.max(Duration::from_nanos(1))),
        };
        if rustix::time::timerfd_settime(&s.timer, rustix::time::TimerfdTimerFlags::empty(), &spec)
            .is_err()
        {
            s.kick();
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
        if map.is_none() {
            check_own_region(addr, len)?;
        }
        if let Some((map, base)) = &map {
            let inside = addr
                .checked_sub(*base)
                .and_then(|off| off.checked_add(len as u64))
                .is_some_and(|end| end <= map.len() as u64);
            if !inside {
                return Err(Error::Refused {
                    kind: ErrorKind::Invalid,
                    message: format!(
                        "the region [{addr:#x}, +{len}) is not inside buffer ([{base:#x}, +{}))",
                        map.len()
                    ),
                });
            }
        }
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
        {
            let mut st = self.lock();
            st.ca.hca_mut().destroy_cq(cq).map_err(refused)?;
            st.notify.forget_cq(cq);
        }
        self.disown(conn, ProcessObject::Cq(cq.0))
    }

    /// `ibv_req_notify_cq`: `channel` is signalled once `cq` holds a completion (at once if
    /// it holds one now, as on the daemon path).
    pub(crate) fn req_notify_cq(&self, cq: CqHandle, channel: &crate::CompChannel) -> Result<()> {
        let mut st = self.lock();
        if !st.ca.hca().has_cq(cq) {
            return Err(refused(VerbsError::NotFound("CQ")));
        }
        st.notify.arm(cq, channel.handle, channel.fd.as_fd())?;
        let Station { ca, notify, .. } = &mut *st;
        notify.signal(ca.hca());
        Ok(())
    }

    /// Whether a CQ of this engine is armed on channel `handle`.
    pub(crate) fn channel_in_use(&self, handle: u64) -> bool {
        self.lock().notify.in_use(handle)
    }

    /// Forgets channel `handle` (being destroyed).
    pub(crate) fn forget_channel(&self, handle: u64) {
        self.lock().notify.forget_channel(handle);
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

    pub(crate) fn modify_qp(
        &self,
        conn: &mut Conn,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<()> {
        if mask.contains(AttrMask::STATE) && attr.qp_state == softib_engine::verbs::QpState::Rtr {
            self.ring_to(conn, qpn, attr);
        }
        let mut st = self.lock();
        st.ca.modify_qp(qpn, attr, mask).map_err(refused)?;
        // A transition may have queued packets (flushes) or armed a timer.
        st.send_now();
        self.after_command(&st);
        Ok(())
    }

    /// Before connected (RC or UC) QP `qpn` goes to RTR with `attr`'s path: when its peer is
    /// another process's engine on this daemon, its packets go through a ring to it (the
    /// daemon makes one on the first such path between the two; RC in in-process segments,
    /// UC at the path MTU). Anything else — a peer elsewhere, the daemon's own QP, a daemon
    /// that answers otherwise — leaves the QP on the kernel's path, which is always correct.
    fn ring_to(&self, conn: &mut Conn, qpn: Qpn, attr: &QpAttr) {
        let Some(grh) = attr.ah_attr.grh.filter(|_| rings_wanted()) else {
            return;
        };
        let dqpn = attr.dest_qp_num;
        let peer_ip = softib_link::roce::framing::ip_of(&grh.dgid);
        {
            let mut st = self.lock();
            let connected = st.ca.hca().qp(qpn).is_some_and(|q| {
                matches!(
                    q.qp_type(),
                    softib_engine::verbs::QpType::Rc | softib_engine::verbs::QpType::Uc
                )
            });
            if !connected {
                return;
            }
            if st.peers.reaches(peer_ip, dqpn) {
                st.ca.set_qp_local(qpn, true);
                return;
            }
        }
        if self.ask_ring(conn, grh.dgid, dqpn) {
            self.lock().ca.set_qp_local(qpn, true);
        }
    }

    /// Before UD WRs go out: every destination (device address, QP) of theirs the daemon was
    /// not asked about yet is asked about once ([`Engine::ask_ring`]); those another
    /// process's engine on this daemon holds are reached through a ring from then on. A
    /// destination asked about while the rings change is asked about again later. Only the
    /// destinations to ask about leave the lock (none, but on a first send).
    fn ud_rings_to_ask(st: &mut Station, wrs: &[SendWr]) -> Vec<(softib_wire::Gid, Qpn)> {
        let mut ask = Vec::new();
        if !rings_wanted() {
            return ask;
        }
        for ud in wrs.iter().filter_map(|w| w.ud.as_ref()) {
            let Some(grh) = st.ca.hca().ah_av(ud.ah).and_then(|av| av.grh) else {
                continue;
            };
            let key = (softib_link::roce::framing::ip_of(&grh.dgid), ud.remote_qpn);
            if ud.remote_qpn == Qpn::MULTICAST
                || st.ud_asked.contains(&key)
                || st.ud_asked.len() >= MAX_UD_ASKED
            {
                continue;
            }
            st.ud_asked.insert(key);
            ask.push((grh.dgid, ud.remote_qpn));
        }
        ask
    }

    /// Asks the daemon for rings to the engine that holds QP `dqpn` at `dgid`, and takes them
    /// if it has some: whether that QP is reached through a ring now.
    fn ask_ring(&self, conn: &mut Conn, dgid: softib_wire::Gid, dqpn: Qpn) -> bool {
        let peer_ip = softib_link::roce::framing::ip_of(&dgid);
        let req = Request::RingTo {
            dev: self.dev,
            dgid,
            dqpn,
        };
        let (resp, fds) = match conn.call_receiving_fds(&req, &[]) {
            Ok(r) => r,
            Err(e) => {
                log(format_args!("no ring to QP {dqpn} at {peer_ip}: {e}"));
                return false;
            }
        };
        let mut st = self.lock();
        match resp {
            Response::Ring {
                id,
                peer,
                peer_blocks,
                peer_pid,
                fresh,
            } => {
                if fresh {
                    let Ok(fds) = <[OwnedFd; 3]>::try_from(fds) else {
                        log(format_args!(
                            "QP {dqpn}: the daemon's rings came without three descriptors"
                        ));
                        return false;
                    };
                    if let Err(e) = st.peers.add(id, peer, peer_pid, &peer_blocks, fds) {
                        log(format_args!(
                            "QP {dqpn}: cannot map the rings to {peer}: {e}"
                        ));
                        return false;
                    }
                } else {
                    if !st.peers.has(id) {
                        // The other engine asked first: the daemon pushed this pair's rings
                        // on the event channel before it answered, and the progress thread
                        // may not have taken them yet.
                        read_daemon_events(&mut st);
                    }
                    st.peers.route(id, peer, &peer_blocks);
                }
                st.peers.reaches(peer_ip, dqpn)
            }
            Response::NoRing(why) => {
                log(format_args!("no ring to QP {dqpn}: {why}"));
                false
            }
            _ => false,
        }
    }

    pub(crate) fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        self.lock().ca.hca().query_qp(qpn).map_err(refused)
    }

    pub(crate) fn destroy_qp(&self, conn: &mut Conn, qpn: Qpn) -> Result<()> {
        {
            let mut st = self.lock();
            st.ca.hca_mut().destroy_qp(qpn).map_err(refused)?;
            st.ca.set_qp_local(qpn, false);
            // Its multicast groups (the engine detached it with the QP).
            st.groups.leave(|_| true, qpn);
            st.free_qpns.push(qpn);
        }
        self.disown(conn, ProcessObject::Qp(qpn))
    }

    /// `ibv_attach_mcast`: UD QP `qpn` receives multicast group `gid` — on RoCE an IPv4
    /// group's GID (`::ffff:a.b.c.d`, as rdma_cm makes it), which this engine joins on the
    /// device's interface, as the daemon does for its own QPs.
    pub(crate) fn attach_mcast(&self, qpn: Qpn, gid: Gid, lid: Lid) -> Result<()> {
        let Some(group) = framing::ipv4_group(&gid) else {
            return Err(Error::Refused {
                kind: ErrorKind::Invalid,
                message: format!(
                    "multicast group {gid} is not an IPv4 group's GID (::ffff:a.b.c.d): on the \
                     process data path a RoCE device joins IPv4 groups only \
                     (SOFTIB_DATAPATH=daemon files other GIDs in the daemon's engine)"
                ),
            });
        };
        let mut st = self.lock();
        st.groups.join(group, qpn).map_err(|e| Error::Refused {
            kind: ErrorKind::Invalid,
            message: format!("ibv_attach_mcast: {e}"),
        })?;
        if let Err(e) = st
            .ca
            .hca_mut()
            .attach_mcast(qpn, framing::engine_mgid(group), lid)
        {
            st.groups.leave(|g| g == group, qpn);
            return Err(refused(e));
        }
        Ok(())
    }

    /// `ibv_detach_mcast`.
    pub(crate) fn detach_mcast(&self, qpn: Qpn, gid: Gid) -> Result<()> {
        let mut st = self.lock();
        let mgid = framing::ipv4_group(&gid).map_or(gid, framing::engine_mgid);
        st.ca.hca_mut().detach_mcast(qpn, mgid).map_err(refused)?;
        if let Some(group) = framing::ipv4_group(&gid) {
            st.groups.leave(|g| g == group, qpn);
        }
        Ok(())
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
        // An empty list is checked too: a handle that names nothing is refused, as the
        // daemon refuses it.
        if !st.ca.hca().has_srq(srq) {
            return Err(refused(VerbsError::NotFound("SRQ")));
        }
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
    pub(crate) fn post_send(&self, conn: &mut Conn, qpn: Qpn, wrs: Vec<SendWr>) -> Result<()> {
        let mut st = self.lock();
        let ask = Self::ud_rings_to_ask(&mut st, &wrs);
        if !ask.is_empty() {
            // The daemon is asked without the engine's lock (the progress thread runs on).
            drop(st);
            for (dgid, dqpn) in ask {
                if self.ask_ring(conn, dgid, dqpn) {
                    let ip = softib_link::roce::framing::ip_of(&dgid);
                    self.lock().ca.set_ud_local(ip, dqpn, true);
                }
            }
            st = self.lock();
        }
        let mut r = Ok(());
        // Looking at the rings meanwhile: a reply to what this thread sent a moment ago (the
        // ACK of a ping-pong's last message) often comes during the post, and its sender
        // need not ring for it — this thread takes it before it leaves.
        st.app_looks(true);
        for (i, wr) in wrs.into_iter().enumerate() {
            if let Err(e) = st.ca.hca_mut().post_send(qpn, wr) {
                r = Err(at_wr("send WR", i, e));
                break;
            }
        }
        st.send_now();
        if st.app_looks(false) {
            st.app_turn();
        }
        self.after_command(&st);
        r
    }

    pub(crate) fn post_recv(&self, qpn: Qpn, wrs: Vec<RecvWr>) -> Result<()> {
        let mut st = self.lock();
        if st.ca.hca().qp(qpn).is_none() {
            return Err(refused(VerbsError::NotFound("QP")));
        }
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
        if wait.is_zero() {
            return self.poll_cq_once(cq, max);
        }
        let start = StdInstant::now();
        let until = start + wait;
        let spin = progress_spin().min(wait);
        let mut out = Vec::new();
        // Counted before the first look, so that a turn of the progress thread after it rings
        // the bell (see `progress`).
        let _waiting = (!wait.is_zero()).then(|| Counted::new(&self.shared.app_waiting));
        let _turning = Counted::new(&self.shared.app_turning);
        // This thread looks at the rings from its first turn until it returns or sleeps
        // (also while it yields between turns): peers' packets meanwhile ring no doorbell.
        loop {
            let (now, next) = {
                let mut st = self.lock();
                st.app_looks(true);
                st.app_turn();
                while out.len() < max as usize {
                    match st.ca.hca_mut().poll_cq(cq) {
                        Some(wc) => out.push(wc),
                        None => break,
                    }
                }
                let now = StdInstant::now();
                let spinning = now < start + spin;
                let missing = out.is_empty() && !st.ca.hca().has_cq(cq);
                if missing || !out.is_empty() || now >= until {
                    let left = st.app_looks(false);
                    drop(st);
                    self.hand_over(left);
                    if missing {
                        // A CQ that does not exist is refused rather than waited on.
                        return Err(refused(VerbsError::NotFound("CQ")));
                    }
                    return Ok(out);
                }
                if !spinning && st.app_looks(false) {
                    // Came while this thread looked, so nobody rang: taken before it sleeps.
                    continue;
                }
                (now, st.ca.poll_timeout().map(|t| st.std_time(t)))
            };
            if now < start + spin {
                // The completion is often microseconds away (a peer's reply through a ring):
                // look again rather than pay a wakeup, letting others run meanwhile.
                if now >= start + APP_PURE_SPIN {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            let wake = next.map_or(until, |t| t.min(until));
            self.shared.app_turning.fetch_sub(1, Ordering::SeqCst);
            self.wait_readable(wake.saturating_duration_since(now));
            self.shared.app_turning.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// `ibv_poll_cq` as a C program calls it, in its own loop: one turn and what the CQ holds,
    /// without reading the clock (a look costs a few hundred nanoseconds, and two clock reads
    /// were a tenth of it).
    fn poll_cq_once(&self, cq: CqHandle, max: u32) -> Result<Vec<WorkCompletion>> {
        let _turning = Counted::new(&self.shared.app_turning);
        let mut out = Vec::new();
        let mut st = self.lock();
        st.app_looks(true);
        st.app_turn();
        while out.len() < max as usize {
            match st.ca.hca_mut().poll_cq(cq) {
                Some(wc) => out.push(wc),
                None => break,
            }
        }
        let missing = out.is_empty() && !st.ca.hca().has_cq(cq);
        let left = st.app_looks(false);
        drop(st);
        self.hand_over(left);
        if missing {
            // A CQ that does not exist is refused rather than waited on.
            return Err(refused(VerbsError::NotFound("CQ")));
        }
        Ok(out)
    }

    /// A poll leaving with records in the rings that came while it looked (their producers
    /// saw it looking and rang no doorbell) wakes the progress thread for them.
    fn hand_over(&self, left: bool) {
        if left {
            self.shared.kick();
        }
    }

    /// Sleeps until the engine's socket is readable, a peer wrote the kick, the progress
    /// thread did something (`app_bell`), or `d` has passed. The kick is the progress
    /// thread's to drain: this thread only wakes on it.
    fn wait_readable(&self, d: Duration) {
        use rustix::event::{PollFd, PollFlags};
        let s = &self.shared;
        let mut pfd = [
            PollFd::new(&s.socket, PollFlags::IN),
            PollFd::new(&s.kick, PollFlags::IN),
            PollFd::new(&s.app_bell, PollFlags::IN),
        ];
        let _ = rustix::event::poll(&mut pfd, Some(&timespec(d)));
        if pfd[2].revents().contains(PollFlags::IN) {
            let _ = rustix::io::read(&s.app_bell, &mut [0u8; 8]);
        }
    }

    /// What the engine's links carried and lost.
    pub(crate) fn counters(&self) -> ProcessCounters {
        let st = self.lock();
        ProcessCounters {
            peers: st.peers.len() as u64,
            ring_sent: st.peers.sent,
            ring_received: st.peers.received,
            ring_bells: st.peers.bells,
            ring_lost: st.peers.lost,
            by_reference: st.peers.by_reference,
            read_by_reference: st.peers.read_by_reference,
            rings_broken: st.peers.broken,
            tx_dropped: st.tx_dropped,
            handed_on: st.handed_on,
            hand_on_full: st.hand_on_full,
        }
    }

    /// The engine's asynchronous events (device `dev`'s).
    pub(crate) fn async_events(&self) -> Vec<softib_engine::verbs::AsyncEvent> {
        self.lock().take_events()
    }

    /// The eventfd `async_fd` watches: added to when the engine raises an event.
    pub(crate) fn set_async_bell(&self, bell: OwnedFd) {
        self.lock().async_bell = Some(bell);
    }
}

/// What the daemon checks of a region of the process's own memory, checked here: it is one
/// (not empty, not past the end of the address space), and both its ends can be read now —
/// by cross-memory attach into this process, so that a bad address is a refusal, not a
/// fault.
fn check_own_region(addr: u64, len: usize) -> Result<()> {
    let invalid = |message: String| Error::Refused {
        kind: ErrorKind::Invalid,
        message,
    };
    let len64 = len as u64;
    if len == 0 || addr.checked_add(len64).is_none() {
        return Err(invalid(format!(
            "a region of {len} bytes at {addr:#x} is not a region"
        )));
    }
    let me = softib_net::procmem::ProcessMemory::new(std::process::id())
        .map_err(|e| invalid(format!("cannot tell which process this is: {e}")))?;
    let mut probe = [0u8; 1];
    me.read(addr, &mut probe)
        .and_then(|()| me.read(addr + len64 - 1, &mut probe))
        .map_err(|e| {
            invalid(format!(
                "cannot reach [{addr:#x}, +{len}) of this process: {e}"
            ))
        })
}

/// A line for whoever debugs the process path (`SOFTIB_LOG`).
fn log(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("SOFTIB_LOG").is_some() {
        eprintln!("softib[{}]: {what}", std::process::id());
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

/// How long an application thread's poll looks again without yielding, before it yields
/// between looks: a ping-pong's reply through a ring comes within microseconds when the peer
/// runs, and a yield hands the core to a spinning progress thread for its whole turn
/// (docs/performance.md: 8 B `ib_send_lat` through rings 4–6 µs with a yield per look,
/// 1.3–2.5 µs with this). Beyond it the poll yields, so that a peer or progress thread that
/// shares this core gets it.
const APP_PURE_SPIN: Duration = Duration::from_micros(5);

/// `d` as poll(2)'s timeout.
fn timespec(d: Duration) -> rustix::event::Timespec {
    rustix::event::Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(d.subsec_nanos()),
    }
}
