//! The process's CM agent: the host's devices (their GIDs, which are their IP addresses on
//! RoCE), every `rdma_cm_id` and event channel the program made, the CM machine
//! ([`softib_cm::Cm`]) for all of them, and the thread that feeds it.
//!
//! One lock ([`with`]) guards it all. Calls from the program take it, change the machine
//! (which queues MADs) and return; the thread ([`run`]) sleeps in `poll(2)` on two eventfds
//! until the machine's next timer: the one the daemon signals when it queues a MAD for the
//! agent (`AttachMadWakeup`), and the one [`with`] signals when a call queued a MAD, a
//! listen, or an earlier timer. Awake, it takes the MADs without waiting, takes the lock,
//! hands them and the time to the machine, turns the machine's events into rdma_cm events
//! (moving QPs through RTR and RTS on the way, as the kernel's rdma_cm does), and sends what
//! the machine queued. An idle process's thread does not wake up at all.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_int;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

use softib_cm::{Cm, CommId, Config, Rep, Req};
use softib_verbs_abi::rdma_cm::{RdmaCmEvent, RdmaCmId, RdmaEventChannel};
use softib_verbs_abi::IbvContext;
use softib_wire::{Gid, Lid, Qpn};

/// MADs taken from the daemon per request.
const BATCH: u32 = 64;

/// A peer CM: the device it is reached from and where on that device's port.
pub type Peer = (u32, At);

/// Where a peer CM is on the fabric: by its GID on RoCE (QP1's MADs carry a GRH to it), by
/// its LID on an InfiniBand port (LRH-routed inside the subnet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum At {
    /// A RoCE peer.
    Gid(Gid),
    /// An InfiniBand peer.
    Lid(Lid),
}

/// One of the host's devices.
pub struct Dev {
    /// The daemon's device index.
    pub index: u32,
    /// Its name (`rxe0`), as libibverbs lists it.
    pub name: String,
    /// Port 1's GIDs: on RoCE the IPv6 link-local address and the IPv4-mapped address; on
    /// InfiniBand the port GID.
    pub gids: Vec<Gid>,
    /// Port 1 is an InfiniBand port (a host of an emulated fabric): addresses are IPoIB's,
    /// routes the SA's ([`crate::fabric`]).
    pub ib: bool,
    /// Port 1's active MTU (the `ibv_mtu` code).
    pub mtu: u8,
    /// RDMA reads and atomics a QP may answer at once (`max_qp_rd_atom`).
    pub max_rd_atom: u8,
    /// RDMA reads and atomics a QP may have outstanding (`max_qp_init_rd_atom`).
    pub max_init_rd_atom: u8,
    /// The program's context on it, opened on first use through libibverbs.
    pub ctx: *mut IbvContext,
    /// The PD every id on the device carries (`id->pd`, as rdma-core's librdmacm gives
    /// one per device), allocated on first use and kept for the life of the process.
    pub pd: *mut softib_verbs_abi::IbvPd,
}

impl Dev {
    /// The GID table index of `gid`.
    pub fn gid_index(&self, gid: &Gid) -> Option<u8> {
        self.gids
            .iter()
            .position(|g| g == gid)
            .and_then(|i| u8::try_from(i).ok())
    }
}

/// What this library keeps about one `rdma_cm_id` besides the C struct.
pub struct IdState {
    /// The C struct (leaked box, freed by `rdma_destroy_id`).
    pub c: *mut RdmaCmId,
    /// Its port space (`RDMA_PS_TCP`, ...).
    pub ps: c_int,
    /// The device it is bound to.
    pub dev: Option<usize>,
    /// Its local and remote addresses.
    pub src: Option<SocketAddr>,
    /// The remote address.
    pub dst: Option<SocketAddr>,
    /// Its connection in the CM machine.
    pub comm: Option<CommId>,
    /// The service it listens on.
    pub listening: Option<u64>,
    /// Passive: the REQ it came from.
    pub req: Option<Box<Req>>,
    /// Active: the peer's REP.
    pub rep: Option<Box<Rep>>,
    /// The peer CM.
    pub peer: Option<Peer>,
    /// On an InfiniBand port: the port GID, the peer's, and the path between them.
    pub ib: Option<crate::fabric::IbRoute>,
    /// The Starting PSN of its REQ or REP: the PSN its QP receives from first (`qp::rtr_attr`).
    pub psn: u32,
    /// What `rdma_connect`/`rdma_accept` asked for.
    pub responder_resources: u8,
    /// See `responder_resources`.
    pub initiator_depth: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// `RDMA_OPTION_ID_TOS`.
    pub tos: u8,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT` (the QP's local ACK timeout exponent).
    pub ack_timeout: u8,
    /// CQs and channels the library made for the id (`rdma_create_qp` without CQs,
    /// `rdma_create_ep`).
    pub own_cqs: bool,
    /// Made without an event channel: calls wait for their events (`sync`), on a channel
    /// of the id's own.
    pub sync: bool,
    /// An endpoint listener's QP attributes and PD, for each request's id.
    pub ep_qp: Option<(crate::sync::SavedAttr, *mut softib_verbs_abi::IbvPd)>,
    /// The multicast groups it joined.
    pub mcast: Vec<crate::mcast::Joined>,
}

impl IdState {
    /// This side's GID: the port GID on InfiniBand, the source address's on RoCE.
    pub fn sgid(&self) -> Gid {
        match (&self.ib, self.src) {
            (Some(r), _) => r.sgid,
            (None, Some(src)) => gid_of(src.ip()),
            (None, None) => Gid::default(),
        }
    }

    /// The peer's GID, once the address is resolved.
    pub fn dgid(&self) -> Gid {
        match (&self.ib, self.peer) {
            (Some(r), _) => r.dgid,
            (None, Some((_, At::Gid(g)))) => g,
            _ => Gid::default(),
        }
    }

    /// The LID-routed path of an id on an InfiniBand port, once it has one.
    pub fn ib_path(&self) -> Option<crate::fabric::IbPath> {
        self.ib.and_then(|r| r.path)
    }
}

/// An event channel: a pipe whose read end programs poll, one byte per queued event.
pub struct Channel {
    /// The C struct (leaked box).
    pub c: *mut RdmaEventChannel,
    /// The pipe's write end.
    pub wfd: c_int,
    /// Events not yet taken by `rdma_get_cm_event`.
    pub queue: VecDeque<*mut EventBox>,
}

/// An event as handed out: the C struct first, then the private data it points into.
#[repr(C)]
pub struct EventBox {
    /// What the program reads.
    pub ev: RdmaCmEvent,
    /// The private data `ev.param` points to.
    pub private_data: [u8; 256],
}

/// The whole state.
pub struct State {
    /// The CM machine for every connection of the process.
    pub cm: Cm<Peer>,
    /// The host's devices.
    pub devs: Vec<Dev>,
    /// Every id, by its C struct's address.
    pub ids: BTreeMap<usize, IdState>,
    /// Connections to ids.
    pub by_comm: BTreeMap<CommId, usize>,
    /// Services listened on to the listening id.
    pub listeners: BTreeMap<u64, usize>,
    /// Every channel, by its C struct's address.
    pub channels: BTreeMap<usize, Channel>,
    /// The next ephemeral port to try.
    pub next_port: u16,
    /// Whether the thread holds MADs it took from the machine and has not sent yet.
    sending: bool,
    /// Listens (device, ServiceID, on) for the thread to tell the daemon (`CmListen`).
    pub listens: VecDeque<(u32, u64, bool)>,
    /// ServiceIDs the daemon refused to route here (another process listens on them).
    pub refused_listens: Vec<u64>,
    origin: Instant,
    /// Signalled by [`with`] when a call gave the thread work (MADs, listens, a timer).
    kick: OwnedFd,
}

// SAFETY: the raw pointers are to objects this library made (ids, channels, events) or the
// program's verbs objects, which libibverbs lets any thread use; they are only followed
// while the lock is held, and the thread is the only other user.
unsafe impl Send for State {}

static STATE: Mutex<Option<State>> = Mutex::new(None);

impl State {
    /// The machine's clock.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// The id at `c`, or EINVAL.
    pub fn id(&mut self, c: *mut RdmaCmId) -> Result<&mut IdState, c_int> {
        self.ids.get_mut(&(c as usize)).ok_or(libc::EINVAL)
    }

    /// The device whose GID table holds `ip`'s GID (RoCE), or whose port runs the IPoIB
    /// interface that has address `ip` (InfiniBand), with that interface.
    pub fn dev_of_ip(&self, ip: IpAddr) -> Option<usize> {
        self.dev_and_ipoib_of(ip).map(|(d, _)| d)
    }

    /// As [`State::dev_of_ip`], with the IPoIB interface on an InfiniBand device.
    pub fn dev_and_ipoib_of(&self, ip: IpAddr) -> Option<(usize, Option<crate::fabric::Local>)> {
        let gid = gid_of(ip);
        if let Some(d) = self
            .devs
            .iter()
            .position(|d| !d.ib && d.gids.contains(&gid))
        {
            return Some((d, None));
        }
        let IpAddr::V4(v4) = ip.to_canonical() else {
            return None;
        };
        if !self.devs.iter().any(|d| d.ib) {
            return None;
        }
        let local = crate::fabric::local_of(v4)?;
        let d = self
            .devs
            .iter()
            .position(|d| d.ib && d.name == local.dev && local.port == 1)?;
        Some((d, Some(local)))
    }

    /// The device with daemon index `index`.
    pub fn dev_by_index(&self, index: u32) -> Option<&Dev> {
        self.devs.iter().find(|d| d.index == index)
    }

    /// A port for an id that bound to port 0.
    pub fn ephemeral_port(&mut self, ps: c_int) -> u16 {
        loop {
            let p = self.next_port;
            self.next_port = if p >= 60999 { 32768 } else { p + 1 };
            let taken = self
                .ids
                .values()
                .any(|i| i.ps == ps && i.src.is_some_and(|s| s.port() == p));
            if !taken {
                return p;
            }
        }
    }

    /// Queues `ev` on `channel` and makes its fd readable.
    pub fn post(&mut self, channel: *mut RdmaEventChannel, ev: Box<EventBox>) {
        let Some(ch) = self.channels.get_mut(&(channel as usize)) else {
            // The channel went away: nobody can take the event.
            return;
        };
        ch.queue.push_back(Box::into_raw(ev));
        let byte = 1u8;
        // SAFETY: `wfd` is the write end of the channel's pipe, open while the channel is;
        // one byte from a live local.
        let _ = unsafe { libc::write(ch.wfd, (&byte as *const u8).cast(), 1) };
    }
}

/// The RoCEv2 GID of an IP address (IPv4-mapped for IPv4).
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => Gid::from_ipv4(v4.octets()),
        IpAddr::V6(v6) => Gid(v6.octets()),
    }
}

/// Runs `f` on the state, starting the agent on first use. Errors are errno values.
pub fn with<R>(f: impl FnOnce(&mut State) -> Result<R, c_int>) -> Result<R, c_int> {
    let mut guard = lock();
    if guard.is_none() {
        *guard = Some(start()?);
    }
    let Some(s) = guard.as_mut() else {
        return Err(libc::ENODEV);
    };
    let timer = s.cm.poll_timeout();
    let r = f(s);
    let earlier = match (s.cm.poll_timeout(), timer) {
        (Some(t), Some(before)) => t < before,
        (t, _) => t.is_some() && timer.is_none(),
    };
    if s.cm.has_transmit() || !s.listens.is_empty() || earlier {
        s.kick();
    }
    r
}

impl State {
    /// Wakes the thread.
    fn kick(&self) {
        // An eventfd write fails only when the counter would overflow, and then the thread
        // has a wakeup pending anyway.
        let _ = rustix::io::write(&self.kick, &1u64.to_ne_bytes());
    }
}

fn lock() -> MutexGuard<'static, Option<State>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Opens the daemon twice — once to list the devices, once as the CM agent the thread owns
/// — and starts the thread.
fn start() -> Result<State, c_int> {
    let mut ctx = softib::Context::open()
        .map_err(|e| crate::refused("rdma_cm", &e.to_string(), libc::ENODEV))?;
    let infos = ctx
        .devices()
        .map_err(|e| crate::refused("rdma_cm", &e.to_string(), libc::ENODEV))?;
    let mut devs = Vec::new();
    for (i, d) in infos.iter().enumerate() {
        let Some(p) = d.ports.first() else { continue };
        devs.push(Dev {
            index: i as u32,
            name: d.name.clone(),
            gids: p.gids.clone(),
            ib: p.link_layer_ib,
            mtu: u8::from(p.active_mtu),
            max_rd_atom: d.attr.max_qp_rd_atom,
            max_init_rd_atom: d.attr.max_qp_init_rd_atom,
            ctx: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
        });
    }
    if devs.is_empty() {
        return Err(crate::refused(
            "rdma_cm",
            "the softib host has no devices (add one: softib link add ...)",
            libc::ENODEV,
        ));
    }
    let mut agent = softib::Context::open()
        .map_err(|e| crate::refused("rdma_cm", &e.to_string(), libc::ENODEV))?;
    for d in &devs {
        agent.open_mad(d.index, 1, false).map_err(|e| {
            crate::refused(
                "rdma_cm",
                &format!("cannot be the CM agent of {}: {e}", d.name),
                libc::ENODEV,
            )
        })?;
    }
    let guid = infos.first().map(|d| d.node_guid).unwrap_or_default();
    // A restarted program must not reuse the communication IDs of its previous life.
    let seed = std::process::id()
        .wrapping_mul(2_654_435_761)
        .wrapping_add(Instant::now().elapsed().subsec_nanos());
    let cm = Cm::new(Config {
        local_ca_guid: guid,
        first_comm_id: seed | 1,
        ..Config::default()
    });
    let flags = EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK;
    let mad_wake = eventfd(0, flags).map_err(|e| e.raw_os_error())?;
    let kick = eventfd(0, flags).map_err(|e| e.raw_os_error())?;
    let thread_kick = kick
        .try_clone()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    agent.attach_mad_wakeup(mad_wake.as_fd()).map_err(|e| {
        crate::refused(
            "rdma_cm",
            &format!("cannot be woken for CM MADs: {e}"),
            libc::ENODEV,
        )
    })?;
    // SAFETY: `at_exit` is a function of this library that takes no arguments; glibc runs
    // it at `exit` (or when the library is unloaded, as it registers it for this object).
    if unsafe { libc::atexit(at_exit) } != 0 {
        eprintln!("softib: rdma_cm: cannot tear down connections at exit (atexit failed)");
    }
    std::thread::Builder::new()
        .name("softib-rdmacm".into())
        .spawn(move || run(agent, mad_wake, thread_kick))
        .map_err(|_| libc::EAGAIN)?;
    Ok(State {
        cm,
        devs,
        ids: BTreeMap::new(),
        by_comm: BTreeMap::new(),
        listeners: BTreeMap::new(),
        channels: BTreeMap::new(),
        next_port: 32768 + (seed % 20000) as u16,
        sending: false,
        listens: VecDeque::new(),
        refused_listens: Vec::new(),
        origin: Instant::now(),
        kick,
    })
}

/// The agent's thread: MADs in, time, events, MADs out, for the life of the process.
fn run(mut agent: softib::Context, mad_wake: OwnedFd, kick: OwnedFd) {
    let mut warned = false;
    let mut timer: Option<Duration> = None;
    loop {
        sleep(&mad_wake, &kick, timer);
        let mads = match take_mads(&mut agent) {
            Ok(m) => m,
            Err(e) => {
                if !warned {
                    eprintln!("softib: rdma_cm: the CM agent lost the daemon: {e}");
                    warned = true;
                }
                // Nothing will signal the eventfd again; the machine's timers still run
                // (and fail the connections that wait for the peer).
                std::thread::sleep(Duration::from_millis(200));
                Vec::new()
            }
        };
        let out = {
            let mut guard = lock();
            let Some(st) = guard.as_mut() else { continue };
            let now = st.now();
            for m in &mads {
                if m.mad.get(1) != Some(&0x07) {
                    continue;
                }
                let ib = st.dev_by_index(m.dev).is_some_and(|d| d.ib);
                let from = match (ib, m.sgid) {
                    (true, _) => At::Lid(m.slid),
                    (false, Some(gid)) => At::Gid(gid),
                    (false, None) => continue,
                };
                st.cm.handle_mad(now, (m.dev, from), &m.mad);
            }
            st.cm.handle_timeout(now);
            while let Some(ev) = st.cm.poll_event() {
                crate::cm_event::on_cm_event(st, ev);
            }
            let out = std::iter::from_fn(|| st.cm.poll_transmit()).collect::<Vec<_>>();
            let listens: Vec<_> = st.listens.drain(..).collect();
            st.sending = !out.is_empty() || !listens.is_empty();
            timer = st.cm.poll_timeout().map(|t| t.saturating_sub(st.now()));
            (out, listens)
        };
        let (out, listens) = out;
        for (dev, svc, on) in listens {
            if let Err(e) = agent.cm_listen(dev, svc, on) {
                eprintln!("softib: rdma_cm: listening on service 0x{svc:016x}: {e}");
                if let Some(st) = lock().as_mut() {
                    st.refused_listens.push(svc);
                }
            }
        }
        if out.is_empty() {
            if let Some(st) = lock().as_mut() {
                st.sending = false;
            }
            continue;
        }
        for ((dev, at), mad) in out {
            let sent = match at {
                At::Gid(gid) => agent.send_gmp_gid(dev, 1, gid, Qpn::GSI, &mad),
                At::Lid(lid) => agent.send_gmp(dev, 1, lid, Qpn::GSI, &mad),
            };
            if let Err(e) = sent {
                eprintln!("softib: rdma_cm: sending a CM MAD: {e}");
            }
        }
        if let Some(st) = lock().as_mut() {
            st.sending = false;
        }
    }
}

/// Sleeps until the daemon queued a MAD, a call kicked, or `timer` ran out (forever when
/// there is no timer), and clears both eventfds.
fn sleep(mad_wake: &OwnedFd, kick: &OwnedFd, timer: Option<Duration>) {
    let mut fds = [
        PollFd::new(mad_wake, PollFlags::IN),
        PollFd::new(kick, PollFlags::IN),
    ];
    let timeout = timer.map(|t| {
        // Round up: a wakeup a little before the deadline would find nothing due.
        let t = t + Duration::from_micros(999);
        Timespec {
            tv_sec: t.as_secs().min(i64::MAX as u64) as i64,
            tv_nsec: i64::from(t.subsec_millis()) * 1_000_000,
        }
    });
    // EINTR only ends the sleep early: the loop looks at everything again.
    let _ = poll(&mut fds, timeout.as_ref());
    let mut counter = [0u8; 8];
    let _ = rustix::io::read(mad_wake, &mut counter);
    let _ = rustix::io::read(kick, &mut counter);
}

/// Everything the daemon queued for the agent, without waiting.
fn take_mads(agent: &mut softib::Context) -> softib::Result<Vec<softib::Mad>> {
    let mut all = Vec::new();
    loop {
        let mads = agent.recv_mads(BATCH, Duration::ZERO)?;
        let n = mads.len();
        all.extend(mads);
        if n < BATCH as usize {
            return Ok(all);
        }
    }
}

/// Waits (at most [`FLUSH_WAIT`]) until the thread has sent every MAD the machine queued:
/// for the calls after which a program may exit at once (`rdma_disconnect`,
/// `rdma_destroy_id`, `rdma_reject`), whose DREQ or REJ must not die with it.
pub fn flush() {
    let t0 = Instant::now();
    while t0.elapsed() < FLUSH_WAIT {
        let pending = lock()
            .as_ref()
            .is_some_and(|st| st.sending || st.cm.has_transmit() || !st.listens.is_empty());
        if !pending {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// How long [`flush`] waits for the thread (woken by the call that queued the MADs).
const FLUSH_WAIT: Duration = Duration::from_millis(500);

/// Events the machine made during a program's call are turned into rdma_cm events at once
/// (a REJ for a port nobody listens on locally, ...): the thread would do it when it wakes;
/// this keeps the order the program sees the same as the machine's.
pub fn drain_events(st: &mut State) {
    while let Some(ev) = st.cm.poll_event() {
        crate::cm_event::on_cm_event(st, ev);
    }
}

/// How long [`at_exit`] tries to take the lock from a thread that holds it.
const EXIT_LOCK_WAIT: Duration = Duration::from_millis(200);

/// At `exit`: every connection the program did not tear down is, as the kernel's rdma_cm
/// does when a process's last reference to `/dev/infiniband/rdma_cm` closes — a DREQ for
/// an established one, a REJ for one being set up — and the MADs are sent before the
/// process goes (perftest's ib_atomic_lat server returns from main without
/// `rdma_disconnect`; without this its client's DREQ would wait through every retry).
extern "C" fn at_exit() {
    let t0 = Instant::now();
    let mut guard = loop {
        match STATE.try_lock() {
            Ok(g) => break g,
            Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
            // Another thread holds it: wait a little, but never hang the exit.
            Err(std::sync::TryLockError::WouldBlock) if t0.elapsed() < EXIT_LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return,
        }
    };
    let Some(st) = guard.as_mut() else { return };
    let conns: Vec<CommId> = st.by_comm.keys().copied().collect();
    for comm in conns {
        st.cm.destroy(comm);
        st.by_comm.remove(&comm);
    }
    let queued = st.cm.has_transmit();
    if queued {
        st.kick();
    }
    drop(guard);
    if queued {
        flush();
    }
}
