//! The daemon's event loop: simulated hosts (an HCA each, with its control socket) and soft
//! switches, joined by cables.
//!
//! One process can host a whole fabric — as ibsim does — while every node keeps its own ports,
//! cables (real UDP associations, which may cross machines) and agents. Each host has a runtime
//! directory holding `softibd.sock`; applications and tools of that host connect there.
//!
//! The loop is single-threaded: wait on every socket with `poll(2)` until something is
//! readable or the next timer is due, then receive frames into nodes, serve control requests,
//! fire timers, and send what the nodes have to send.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use softib_engine::verbs::AsyncEvent;
use softib_engine::{AhHandle, CqHandle, Instant, PdHandle, RegionId, VerbsError};
use softib_fabric::{Node, Switch, SwitchAction};
use softib_net::cable::{Cable, CableEvent, CableRecv};
use softib_net::shm::SharedRegion;
use softib_net::UdpLink;
use softib_wire::mad::attr::{capability_mask, SmInfo};
use softib_wire::mad::{self, smp, MAD_LEN};
use softib_wire::Qpn;

use crate::device::{Device, IbDev};
use crate::ib::{IbCa, Identity, MadIn, MadQp};
use crate::proto::{
    self, ErrorKind, FrameReader, Mad, Request, Response, CQ_RING_SLOTS_MAX, CQ_RING_SLOT_LEN,
};
use crate::shm_memory::ShmMemory;

/// One end of a cable: which port, this end's address, the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CableSpec {
    /// The port it is plugged into.
    pub port: u8,
    /// This end's UDP address.
    pub local: SocketAddr,
    /// The other end's UDP address.
    pub peer: SocketAddr,
}

/// A simulated host: one HCA and the directory of its control socket.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Host name (`test213`).
    pub name: String,
    /// Runtime directory; the control socket is `dir/softibd.sock`.
    pub dir: PathBuf,
    /// The HCA.
    pub identity: Identity,
    /// Its cables.
    pub cables: Vec<CableSpec>,
    /// Seed of the engine's random choices (QPNs, keys).
    pub seed: u64,
}

/// A soft switch.
#[derive(Debug, Clone)]
pub struct SwitchSpec {
    /// The switch as the topology describes it.
    pub node: Node,
    /// Its cables.
    pub cables: Vec<CableSpec>,
}

/// The name of the control socket in a runtime directory.
pub const SOCKET_NAME: &str = "softibd.sock";

/// Per-client limits: a client that needs more gets a clear error, and one client cannot
/// exhaust the HCA for everyone else.
const MAX_QPS_PER_CLIENT: usize = 16 * 1024;
const MAX_MRS_PER_CLIENT: usize = 16 * 1024;
const MAX_BUFFERS_PER_CLIENT: usize = 1024;
/// A quarter of the device's CQ table (`max_cq`), as QPs are a quarter of `max_qp`: at the
/// device's size, one client could take every CQ and leave none to anyone else.
const MAX_CQS_PER_CLIENT: usize = 4 * 1024;
/// PDs and address handles had no limit of their own: one client could fill the device's
/// tables (`max_pd`, `max_ah`). A quarter of each, too.
const MAX_PDS_PER_CLIENT: usize = 16 * 1024;
const MAX_AHS_PER_CLIENT: usize = 8 * 1024;
/// The most requests of one client served in one turn of the loop. A client that writes
/// requests back to back without waiting for the answers had its whole buffer — a million
/// small requests — served in one turn, and every other client and packet waited seconds for
/// it; a flood of them slowed another client's 8 MiB transfer from 38 MiB/s to 0.2.
const MAX_REQUESTS_PER_TURN: usize = 64;
/// MADs queued for an agent that does not read them are dropped beyond this.
const MAX_QUEUED_MADS: usize = 4096;

/// What a client owns; everything here is reclaimed when it goes away.
#[derive(Debug, Default)]
struct Owned {
    pds: BTreeSet<(u32, u32)>,
    cqs: BTreeSet<(u32, u32)>,
    qps: BTreeSet<(u32, Qpn)>,
    ahs: BTreeSet<(u32, u32)>,
    srqs: BTreeSet<(u32, u32)>,
    /// (device, MR L_Key) → its region id.
    mrs: BTreeMap<(u32, u32), RegionId>,
    /// Buffer id → (mapping, address in the client).
    buffers: BTreeMap<u64, (Rc<SharedRegion>, u64)>,
}

/// A request that waits (PollCq, RecvMads with a wait).
#[derive(Debug, Clone, Copy)]
enum Parked {
    PollCq {
        dev: u32,
        cq: u32,
        max: u32,
        until: StdInstant,
    },
    RecvMads {
        max: u32,
        until: StdInstant,
    },
}

struct Client {
    stream: UnixStream,
    reader: FrameReader,
    hello: bool,
    pid: u32,
    program: String,
    owned: Owned,
    parked: Option<Parked>,
    /// Ports this client is a MAD agent on: (device, port, is the SM).
    agents: Vec<(u32, u8, bool)>,
    mads: VecDeque<Mad>,
    /// Completion channels (eventfds the client passed), by handle.
    channels: BTreeMap<u64, OwnedFd>,
    /// Armed CQs: (device, CQ) → the channel to signal.
    armed: BTreeMap<(u32, u32), u64>,
    /// Completion rings: (device, CQ) → the ring the daemon moves that CQ's completions into,
    /// which the client polls without a request.
    cq_rings: BTreeMap<(u32, u32), softib_net::ring::Ring>,
    /// A ring broke (the client scribbled on it): the client is dropped.
    broken: bool,
    /// The submission ring and its doorbell, once the client attached them.
    submit: Option<(softib_net::ring::Ring, OwnedFd)>,
    /// The eventfd that wakes the client when it sleeps for a completion
    /// ([`Request::AttachWakeup`]).
    wakeup: Option<OwnedFd>,
    /// Ring entries the engine refused although the library had checked them (their WRs
    /// are lost; counted and logged, as a device reports an asynchronous error).
    submit_errors: u64,
    /// Asynchronous events of its objects and of the ports, not yet asked for (the newest
    /// [`MAX_ASYNC_EVENTS`]).
    events: VecDeque<(u32, AsyncEvent)>,
    /// The eventfd signalled when an event is queued ([`Request::AttachAsyncEvents`]).
    events_fd: Option<OwnedFd>,
}

/// The most asynchronous events kept for a client that does not ask for them.
const MAX_ASYNC_EVENTS: usize = 1024;

struct HostRt {
    name: String,
    dir: PathBuf,
    devs: Vec<Device>,
    listener: UnixListener,
    clients: BTreeMap<u64, Client>,
    next_client: u64,
    next_region: u64,
    next_buffer: u64,
    unclaimed_mads: u64,
    /// Who sent each outstanding MAD request, so that its response goes back to that agent
    /// only: (port, TID) → client.
    tid_owner: BTreeMap<(u32, u8, u64), u64>,
    /// Where RoCE devices are persisted (`None` for simulated hosts of a fabric).
    links_file: Option<PathBuf>,
    seed: u64,
    /// Readiness from the last `poll(2)` of the listener and the clients (devices keep
    /// their own).
    listener_ready: bool,
    ready_clients: BTreeSet<u64>,
    /// The devices as sysfs-style files in the runtime directory, and when they are next
    /// brought up to date.
    sysfs: crate::sysfs::SysfsTree,
    sysfs_due: StdInstant,
    sysfs_failed: bool,
}

/// How often the sysfs-style files follow the devices.
const SYSFS_EVERY: StdDuration = StdDuration::from_secs(1);

/// Outstanding requests remembered per host; beyond this the oldest are forgotten (their
/// responses then go to every agent on the port, which filter by TID).
const MAX_TIDS: usize = 64 * 1024;

struct SwitchRt {
    sw: Switch,
    cables: Vec<Option<Cable>>,
    /// Readiness of each port's cable from the last `poll(2)`.
    ready: Vec<bool>,
}

/// What a polled descriptor belongs to.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Wake,
    Listener(usize),
    HostDev(usize, usize, usize),
    Client(usize, u64),
    SwitchCable(usize, usize),
    Doorbell(usize, u64),
}

/// Which nodes of a topology a daemon runs, and how cable ends find each other.
#[derive(Debug, Clone)]
pub enum CablePlan {
    /// Every node, in this process; cable ends on ephemeral UDP ports.
    AllHere,
    /// Only `nodes` (their ids); every cable end of the topology on UDP port `port_base` plus
    /// its index in the file's link order (`a` end, then `b` end), so processes that run other
    /// parts of the same topology with the same base reach each other.
    Fixed {
        /// The node ids run here.
        nodes: BTreeSet<String>,
        /// The first UDP port.
        port_base: u16,
    },
}

/// How long the loop keeps looking for work after its last busy turn before it sleeps.
const DAEMON_SPIN: StdDuration = StdDuration::from_micros(50);

/// The daemon: hosts and switches and the loop that drives them.
pub struct Daemon {
    hosts: Vec<HostRt>,
    switches: Vec<SwitchRt>,
    /// In-process delivery between this daemon's own cable ends.
    sb: crate::device::Switchboard,
    origin: StdInstant,
    buf: Vec<u8>,
    /// An eventfd in the poll set: [`Waker::wake`] ends a sleep at once.
    wake: Arc<std::os::fd::OwnedFd>,
    /// `wait`'s scratch, kept between turns: what each polled descriptor is, which are ready.
    slots: Vec<Slot>,
    ready: Vec<usize>,
}

/// Wakes a [`Daemon`]'s loop from another thread — after setting its stop flag, so that it
/// stops at once instead of at the end of an idle sleep (up to a second).
#[derive(Debug, Clone)]
pub struct Waker(Arc<std::os::fd::OwnedFd>);

impl Waker {
    /// Ends the loop's current or next sleep.
    pub fn wake(&self) {
        let _ = rustix::io::write(&*self.0, &1u64.to_ne_bytes());
    }
}

/// A daemon running its loop on a thread of its own (tests, the `softib` crate's embedded
/// mode): stopped and joined when dropped.
#[derive(Debug)]
pub struct DaemonThread {
    stop: Arc<AtomicBool>,
    waker: Waker,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DaemonThread {
    /// Builds a daemon with `build` on a new thread (a daemon stays on the thread it was made
    /// on) and runs it there; fails with `build`'s error, or when it takes over 10 seconds.
    pub fn spawn(
        build: impl FnOnce() -> io::Result<Daemon> + Send + 'static,
    ) -> io::Result<DaemonThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread =
            std::thread::Builder::new()
                .name("softibd".into())
                .spawn(move || match build() {
                    Ok(mut daemon) => {
                        let _ = tx.send(Ok(daemon.waker()));
                        if let Err(e) = daemon.run(&s) {
                            eprintln!("softibd (thread): the loop stopped: {e}");
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                })?;
        match rx.recv_timeout(StdDuration::from_secs(10)) {
            Ok(Ok(waker)) => Ok(DaemonThread {
                stop,
                waker,
                thread: Some(thread),
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the daemon thread did not start within 10 s",
            )),
        }
    }

    /// Whether its loop still runs.
    pub fn is_running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }
}

impl Drop for DaemonThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The loop may sleep up to a second when idle.
        self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A node's cables before they are cables: (port, bound socket, peer address).
type BoundLinks = Vec<(u8, UdpLink, SocketAddr)>;

fn bind_cables(specs: &[CableSpec]) -> io::Result<BoundLinks> {
    specs
        .iter()
        .map(|c| {
            let link = UdpLink::bind(c.local).map_err(|e| {
                io::Error::new(e.kind(), format!("binding cable end {}: {e}", c.local))
            })?;
            Ok((c.port, link, c.peer))
        })
        .collect()
}

fn make_cables(
    links: BoundLinks,
    num_ports: u8,
    now: StdInstant,
) -> io::Result<Vec<Option<Cable>>> {
    let mut cables: Vec<Option<Cable>> = (0..=num_ports).map(|_| None).collect();
    for (port, link, peer) in links {
        let slot = cables
            .get_mut(usize::from(port))
            .filter(|_| port != 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cable on port {port} of a node with {num_ports} ports"),
                )
            })?;
        *slot = Some(Cable::new(link, peer, now));
    }
    Ok(cables)
}

/// Binds the control socket in `dir`, refusing when a live daemon serves it already and
/// reusing the name when a dead one left it behind.
fn bind_listener(dir: &std::path::Path) -> io::Result<UnixListener> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
    let sock = dir.join(SOCKET_NAME);
    if sock.exists() {
        if UnixStream::connect(&sock).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "a daemon already serves {} (stop it first, e.g. `softib fabric down`)",
                    sock.display()
                ),
            ));
        }
        let _ = std::fs::remove_file(&sock);
    }
    let listener = UnixListener::bind(&sock)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", sock.display())))?;
    // Only this user (and root) may talk to the HCA: its clients can reach registered memory.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o700));
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Where `softib fabric up` puts the hosts of a topology: `dir/hosts/<node id>`.
pub fn host_dir(dir: &std::path::Path, id: &str) -> PathBuf {
    dir.join("hosts").join(id)
}

impl Daemon {
    /// Builds every node, binds every cable and control socket.
    pub fn new(hosts: Vec<HostSpec>, switches: Vec<SwitchSpec>) -> io::Result<Daemon> {
        let hosts = hosts
            .into_iter()
            .map(|h| {
                let links = bind_cables(&h.cables)?;
                Ok((h, links))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let switches = switches
            .into_iter()
            .map(|s| {
                let links = bind_cables(&s.cables)?;
                Ok((s, links))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Daemon::build(hosts, switches)
    }

    /// Every node of `topology` in this process: CAs as hosts under `dir/hosts/<id>`, switches,
    /// and every link a cable between two UDP sockets on `ip` (ports chosen by the kernel).
    pub fn from_topology(
        topology: &softib_fabric::Topology,
        dir: &std::path::Path,
        ip: std::net::IpAddr,
        seed: u64,
    ) -> io::Result<Daemon> {
        Daemon::from_topology_part(topology, dir, ip, seed, &CablePlan::AllHere)
    }

    /// Like [`Daemon::from_topology`], for the nodes `plan` says run here. With
    /// [`CablePlan::Fixed`], every cable end of the topology has a known UDP port (the base
    /// plus its place in the file's link order), so that the other nodes can run in other
    /// processes — `softib switch` runs one switch so — and still find each other.
    pub fn from_topology_part(
        topology: &softib_fabric::Topology,
        dir: &std::path::Path,
        ip: std::net::IpAddr,
        seed: u64,
        plan: &CablePlan,
    ) -> io::Result<Daemon> {
        let here = |node: usize| match plan {
            CablePlan::AllHere => true,
            CablePlan::Fixed { nodes, .. } => topology
                .nodes()
                .get(node)
                .is_some_and(|n| nodes.contains(&n.id)),
        };
        // Each end's address: bound now (ephemeral) when all run here, else fixed.
        let mut ends: BTreeMap<(usize, u8), UdpLink> = BTreeMap::new();
        let mut addr_of: BTreeMap<(usize, u8), SocketAddr> = BTreeMap::new();
        let mut k = 0u32;
        for l in topology.links() {
            for e in [l.a, l.b] {
                let fixed = match plan {
                    CablePlan::AllHere => None,
                    CablePlan::Fixed { port_base, .. } => {
                        let port = u16::try_from(u32::from(*port_base) + k).map_err(|_| {
                            io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!(
                                    "UDP port base {port_base} leaves no room for the \
                                     topology's {} cable ends",
                                    2 * topology.link_count()
                                ),
                            )
                        })?;
                        Some(SocketAddr::new(ip, port))
                    }
                };
                k += 1;
                if here(e.node) {
                    let link = UdpLink::bind(fixed.unwrap_or(SocketAddr::new(ip, 0)))?;
                    addr_of.insert((e.node, e.port), link.local_addr());
                    ends.insert((e.node, e.port), link);
                } else if let Some(a) = fixed {
                    addr_of.insert((e.node, e.port), a);
                }
            }
        }
        let mut links_of = |node: usize| -> BoundLinks {
            let mut v = Vec::new();
            for l in topology.links() {
                for (me, peer) in [(l.a, l.b), (l.b, l.a)] {
                    if me.node != node {
                        continue;
                    }
                    if let (Some(link), Some(&paddr)) = (
                        ends.remove(&(me.node, me.port)),
                        addr_of.get(&(peer.node, peer.port)),
                    ) {
                        v.push((me.port, link, paddr));
                    }
                }
            }
            v
        };
        let mut hosts = Vec::new();
        let mut switches = Vec::new();
        for (i, node) in topology.nodes().iter().enumerate() {
            if !here(i) {
                continue;
            }
            let links = links_of(i);
            if node.is_switch() {
                switches.push((
                    SwitchSpec {
                        node: node.clone(),
                        cables: Vec::new(),
                    },
                    links,
                ));
            } else {
                let rate = topology
                    .links()
                    .find(|l| l.a.node == i || l.b.node == i)
                    .map(|l| l.rate);
                hosts.push((
                    HostSpec {
                        name: node.id.clone(),
                        dir: host_dir(dir, &node.id),
                        identity: Identity::from_node(node, rate),
                        cables: Vec::new(),
                        seed: seed ^ node.node_guid.0,
                    },
                    links,
                ));
            }
        }
        Daemon::build(hosts, switches)
    }

    /// The daemon of a real host: no IB fabric, RoCE devices from `dir/links.json` (what
    /// earlier `softib link add` commands configured). A device that cannot come back (its
    /// interface or address is gone) is reported and left out, not fatal.
    pub fn single_host(
        name: &str,
        dir: &std::path::Path,
        seed: u64,
    ) -> io::Result<(Daemon, Vec<String>)> {
        let mut d = Daemon::build(Vec::new(), Vec::new())?;
        let listener = bind_listener(dir)?;
        let links_file = dir.join("links.json");
        let mut warnings = Vec::new();
        let mut devs = Vec::new();
        if let Ok(text) = std::fs::read_to_string(&links_file) {
            match serde_json::from_str::<Vec<crate::device::LinkConfig>>(&text) {
                Ok(links) => {
                    for (i, l) in links.into_iter().enumerate() {
                        let name = l.name.clone();
                        match crate::device::RoceDev::new(l, seed ^ i as u64) {
                            Ok(r) => devs.push(Device::Roce(Box::new(r))),
                            Err(e) => warnings.push(format!("link {name} not restored: {e}")),
                        }
                    }
                }
                Err(e) => warnings.push(format!(
                    "{} is not readable ({e}); starting without links",
                    links_file.display()
                )),
            }
        }
        d.hosts.push(HostRt {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            devs,
            listener,
            clients: BTreeMap::new(),
            next_client: 1,
            next_region: 1,
            next_buffer: 1,
            unclaimed_mads: 0,
            tid_owner: BTreeMap::new(),
            links_file: Some(links_file),
            seed,
            listener_ready: true,
            ready_clients: BTreeSet::new(),
            sysfs: crate::sysfs::SysfsTree::new(dir),
            sysfs_due: StdInstant::now(),
            sysfs_failed: false,
        });
        Ok((d, warnings))
    }

    fn build(
        hosts: Vec<(HostSpec, BoundLinks)>,
        switches: Vec<(SwitchSpec, BoundLinks)>,
    ) -> io::Result<Daemon> {
        let now = StdInstant::now();
        let mut hrt = Vec::new();
        for (h, links) in hosts {
            std::fs::create_dir_all(&h.dir).map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", h.dir.display()))
            })?;
            let listener = bind_listener(&h.dir)?;
            let num_ports = h.identity.num_ports;
            let cables = make_cables(links, num_ports, now)?;
            let ib = IbDev {
                ca: IbCa::new(h.identity, h.seed, ShmMemory::new()),
                ready: vec![true; cables.len()],
                faults: (0..cables.len()).map(|_| Default::default()).collect(),
                capture: None,
                cables,
            };
            let sysfs = crate::sysfs::SysfsTree::new(&h.dir);
            hrt.push(HostRt {
                name: h.name,
                dir: h.dir,
                devs: vec![Device::Ib(Box::new(ib))],
                listener,
                clients: BTreeMap::new(),
                next_client: 1,
                next_region: 1,
                next_buffer: 1,
                unclaimed_mads: 0,
                tid_owner: BTreeMap::new(),
                links_file: None,
                seed: h.seed,
                listener_ready: true,
                ready_clients: BTreeSet::new(),
                sysfs,
                sysfs_due: StdInstant::now(),
                sysfs_failed: false,
            });
        }
        let mut srt = Vec::new();
        for (s, links) in switches {
            let sw = Switch::from_node(&s.node).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("node {} is not a switch", s.node.id),
                )
            })?;
            let cables = make_cables(links, s.node.num_ports, now)?;
            let ready = vec![true; cables.len()];
            srt.push(SwitchRt { sw, cables, ready });
        }
        let mut sb = crate::device::Switchboard::default();
        for h in &hrt {
            for d in &h.devs {
                if let Device::Ib(ib) = d {
                    for c in ib.cables.iter().flatten() {
                        sb.register(c.local_addr());
                    }
                }
            }
        }
        for s in &srt {
            for c in s.cables.iter().flatten() {
                sb.register(c.local_addr());
            }
        }
        Ok(Daemon {
            hosts: hrt,
            switches: srt,
            sb,
            origin: now,
            // Room for any packet the engines build: an in-process QP's are up to 60 KiB.
            buf: vec![0u8; (softib_engine::IN_PROCESS_MAX_LEN + 64).max(16 * 1024)],
            wake: Arc::new(rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
            )?),
            slots: Vec::new(),
            ready: Vec::new(),
        })
    }

    /// A handle that wakes this daemon's loop from another thread.
    pub fn waker(&self) -> Waker {
        Waker(self.wake.clone())
    }

    fn now(&self) -> Instant {
        Instant::from_micros(self.origin.elapsed().as_micros() as u64)
    }

    /// Runs until `stop` is set.
    pub fn run(&mut self, stop: &Arc<AtomicBool>) -> io::Result<()> {
        let mut busy = true;
        let mut last_busy = StdInstant::now();
        let spin = std::env::var("SOFTIB_DAEMON_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DAEMON_SPIN, StdDuration::from_micros);
        while !stop.load(Ordering::Relaxed) {
            let timeout = if busy {
                last_busy = StdInstant::now();
                StdDuration::ZERO
            } else if last_busy.elapsed() < spin {
                // Work tends to come in bursts (a reply, the next message): look again soon
                // rather than sleep and pay a wakeup, but let others run meanwhile.
                std::thread::yield_now();
                StdDuration::ZERO
            } else {
                // Signals (the stop flag) interrupt the wait; everything else that is due
                // has a deadline in `next_wait`.
                self.next_wait().min(StdDuration::from_secs(1))
            };
            // While the loop keeps turning, clients need not ring a doorbell after a post:
            // the next turn drains their rings anyway. Before it may sleep it says so in every
            // ring and then looks at them once more (a post that skipped the doorbell just
            // before is seen here; one after it rings).
            let polling = timeout.is_zero();
            let waiting = self.set_rings_polling(polling);
            let timeout = if waiting { StdDuration::ZERO } else { timeout };
            self.wait(timeout)?;
            busy = self.step()?;
        }
        for h in &self.hosts {
            let _ = std::fs::remove_file(h.dir.join(SOCKET_NAME));
        }
        Ok(())
    }

    /// Tells every client's submission ring whether this loop is polling it (see
    /// [`softib_net::ring::Ring::set_polling`]); when it is not, returns whether a ring holds
    /// posts already (so the loop must not sleep). A broken ring is left to the turn that
    /// drains it.
    fn set_rings_polling(&self, polling: bool) -> bool {
        let mut waiting = false;
        for c in self.hosts.iter().flat_map(|h| h.clients.values()) {
            if let Some((ring, _)) = &c.submit {
                if ring.set_polling(polling).is_ok() && !polling {
                    waiting |= !ring.is_empty().unwrap_or(true);
                }
            }
        }
        waiting
    }

    /// One round of work; returns whether there may be more to do right away.
    pub fn step(&mut self) -> io::Result<bool> {
        let mut busy = false;
        let std_now = StdInstant::now();
        let now = self.now();
        // Datagrams between this daemon's RoCE devices are handed over in-process.
        self.sb.roce.set_ends(
            self.hosts
                .iter()
                .flat_map(|h| h.devs.iter())
                .filter_map(Device::roce_addr),
        );
        for hi in 0..self.hosts.len() {
            busy |= self.step_host(hi, std_now, now)?;
        }
        for si in 0..self.switches.len() {
            busy |= self.step_switch(si, std_now)?;
        }
        Ok(busy || self.sb.is_busy())
    }

    fn step_host(&mut self, hi: usize, std_now: StdInstant, now: Instant) -> io::Result<bool> {
        let buf = &mut self.buf;
        let h = &mut self.hosts[hi];
        let mut busy = false;
        // Receives the clients posted go to the QPs before this turn's packets arrive.
        h.drain_submissions();
        for d in &mut h.devs {
            busy |= d.receive(std_now, now, buf, &mut self.sb)?;
        }
        // Control sockets.
        if h.listener_ready {
            h.listener_ready = false;
            h.accept()?;
        }
        busy |= h.serve_clients(now);
        if std_now >= h.sysfs_due {
            h.sync_sysfs(std_now);
        }
        // MADs for agents.
        for d in 0..h.devs.len() {
            while let Some(m) = h.devs[d].poll_mad() {
                h.dispatch_mad(d as u32, m);
            }
        }
        h.finish_parked(std_now);
        let now = self_now(&self.origin);
        for d in &mut h.devs {
            busy |= d.transmit(now, buf, &mut self.sb)?;
        }
        // Send completions made while transmitting reach the rings now, and a request parked
        // waiting for one is answered now, not when the loop next wakes (a client that posts
        // through its ring and then waits has its wait parked before the transmit).
        h.finish_parked(StdInstant::now());
        Ok(busy)
    }

    fn step_switch(&mut self, si: usize, std_now: StdInstant) -> io::Result<bool> {
        let buf = &mut self.buf;
        let s = &mut self.switches[si];
        let mut busy = false;
        for port in 1..s.cables.len() {
            let mut events = Vec::new();
            let mut frames: Vec<(u8, Vec<u8>)> = Vec::new();
            if let Some(cable) = s.cables[port].as_mut() {
                events.extend(cable.poll(std_now));
                for frame in self.sb.take(cable.local_addr()) {
                    if cable.state() != softib_net::cable::PhysState::LinkUp {
                        continue;
                    }
                    busy = true;
                    match s.sw.handle_packet(port as u8, &frame) {
                        SwitchAction::Forward { out_port } => frames.push((out_port, frame)),
                        SwitchAction::Replicate { out_ports } => {
                            for out in out_ports.iter() {
                                frames.push((out, frame.clone()));
                            }
                        }
                        SwitchAction::Transmit { out_port, packet } => {
                            frames.push((out_port, packet))
                        }
                        SwitchAction::Local | SwitchAction::ToSm(_) | SwitchAction::Drop(_) => {}
                    }
                }
                let ready = std::mem::replace(&mut s.ready[port], false);
                for _ in 0..if ready { 256 } else { 0 } {
                    match cable.recv(std_now, buf)? {
                        CableRecv::Empty => break,
                        CableRecv::Consumed(e) => events.extend(e),
                        CableRecv::Frame(n) => {
                            busy = true;
                            match s.sw.handle_packet(port as u8, &buf[..n]) {
                                SwitchAction::Forward { out_port } => {
                                    frames.push((out_port, buf[..n].to_vec()))
                                }
                                SwitchAction::Replicate { out_ports } => {
                                    for out in out_ports.iter() {
                                        frames.push((out, buf[..n].to_vec()));
                                    }
                                }
                                SwitchAction::Transmit { out_port, packet } => {
                                    frames.push((out_port, packet))
                                }
                                // No SM or GMP agents run inside soft switches.
                                SwitchAction::Local
                                | SwitchAction::ToSm(_)
                                | SwitchAction::Drop(_) => {}
                            }
                        }
                    }
                }
            }
            for e in events {
                match e {
                    CableEvent::Up => {
                        let rate = softib_fabric::LinkRate {
                            width: softib_fabric::LinkWidth::X4,
                            speed: softib_fabric::LinkSpeed::Qdr,
                        };
                        s.sw.sma_mut().link_up(port as u8, rate)
                    }
                    CableEvent::Down => s.sw.sma_mut().link_down(port as u8),
                }
            }
            for (out, frame) in frames {
                if let Some(Some(c)) = s.cables.get_mut(usize::from(out)) {
                    self.sb.send(c, &frame)?;
                }
            }
        }
        while let Some(e) = s.sw.sma_mut().poll_event() {
            crate::device::apply_sma_event(&mut s.cables, e, std_now);
        }
        Ok(busy)
    }

    /// How long the loop may sleep: until the earliest cable, engine or parked deadline.
    fn next_wait(&self) -> StdDuration {
        let std_now = StdInstant::now();
        let now = self.now();
        let mut wait = StdDuration::from_secs(1);
        let mut consider = |t: StdInstant| {
            wait = wait.min(t.saturating_duration_since(std_now));
        };
        for h in &self.hosts {
            for d in &h.devs {
                let (engine, link) = d.deadlines();
                if let Some(t) = link {
                    consider(t);
                }
                if let Some(t) = engine {
                    consider(
                        std_now + StdDuration::from_micros(t.saturating_since(now).as_micros()),
                    );
                }
            }
            for c in h.clients.values() {
                match c.parked {
                    Some(Parked::PollCq { until, .. } | Parked::RecvMads { until, .. }) => {
                        consider(until)
                    }
                    None => {}
                }
            }
        }
        for s in &self.switches {
            for c in s.cables.iter().flatten() {
                if let Some(t) = c.next_deadline() {
                    consider(t);
                }
            }
        }
        wait
    }

    /// Sleeps until a socket is readable or `timeout` passes, and records which are.
    fn wait(&mut self, timeout: StdDuration) -> io::Result<()> {
        // Kept between turns (no allocation per turn but the poll set's own).
        let mut slots = std::mem::take(&mut self.slots);
        let mut ready = std::mem::take(&mut self.ready);
        slots.clear();
        ready.clear();
        {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(slots.capacity().max(8));
            fds.push(PollFd::new(&*self.wake, PollFlags::IN));
            slots.push(Slot::Wake);
            for (hi, h) in self.hosts.iter().enumerate() {
                fds.push(PollFd::new(&h.listener, PollFlags::IN));
                slots.push(Slot::Listener(hi));
                for (di, d) in h.devs.iter().enumerate() {
                    d.each_socket(|k, sock| {
                        fds.push(PollFd::new(sock, PollFlags::IN));
                        slots.push(Slot::HostDev(hi, di, k));
                    });
                }
                for (id, c) in &h.clients {
                    fds.push(PollFd::new(&c.stream, PollFlags::IN));
                    slots.push(Slot::Client(hi, *id));
                    if let Some((_, bell)) = &c.submit {
                        fds.push(PollFd::new(bell, PollFlags::IN));
                        slots.push(Slot::Doorbell(hi, *id));
                    }
                }
            }
            for (si, s) in self.switches.iter().enumerate() {
                for (p, c) in s.cables.iter().enumerate() {
                    if let Some(c) = c {
                        fds.push(PollFd::new(c.socket(), PollFlags::IN));
                        slots.push(Slot::SwitchCable(si, p));
                    }
                }
            }
            let ts = Timespec {
                tv_sec: timeout.as_secs() as i64,
                tv_nsec: i64::from(timeout.subsec_nanos()),
            };
            match poll(&mut fds, Some(&ts)) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    self.slots = slots;
                    self.ready = ready;
                    return Err(e.into());
                }
            }
            ready.extend(
                fds.iter()
                    .enumerate()
                    .filter(|(_, f)| !f.revents().is_empty())
                    .map(|(i, _)| i),
            );
        }
        for &i in &ready {
            match slots[i] {
                Slot::Wake => {
                    let mut b = [0u8; 8];
                    let _ = rustix::io::read(&*self.wake, &mut b);
                }
                Slot::Listener(h) => self.hosts[h].listener_ready = true,
                Slot::HostDev(h, d, k) => self.hosts[h].devs[d].mark_ready(k),
                Slot::Client(h, id) => {
                    self.hosts[h].ready_clients.insert(id);
                }
                Slot::SwitchCable(s, p) => self.switches[s].ready[p] = true,
                Slot::Doorbell(h, id) => {
                    if let Some((_, bell)) = self.hosts[h]
                        .clients
                        .get(&id)
                        .and_then(|c| c.submit.as_ref())
                    {
                        // Reset the eventfd; the ring itself is drained every turn.
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(bell, &mut b);
                    }
                }
            }
        }
        self.slots = slots;
        self.ready = ready;
        Ok(())
    }
}

fn self_now(origin: &StdInstant) -> Instant {
    Instant::from_micros(origin.elapsed().as_micros() as u64)
}

fn verbs_error(e: VerbsError) -> Response {
    let kind = match e {
        VerbsError::NotFound(_) => ErrorKind::NotFound,
        VerbsError::Invalid(_) | VerbsError::ModifyQp(_) => ErrorKind::Invalid,
        VerbsError::Exhausted(_) => ErrorKind::Exhausted,
        VerbsError::Busy(_) => ErrorKind::Busy,
        VerbsError::WrongState { .. } => ErrorKind::WrongState,
        _ => ErrorKind::Invalid,
    };
    Response::Error {
        kind,
        message: e.to_string(),
    }
}

fn err(kind: ErrorKind, message: impl Into<String>) -> Response {
    Response::Error {
        kind,
        message: message.into(),
    }
}

impl HostRt {
    fn accept(&mut self) -> io::Result<()> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // The socket's mode keeps other users out, but only once it is set (bind
                    // creates it with the umask's) and only as long as nobody loosens it: the
                    // kernel's word on who connected is checked as well.
                    let me = rustix::process::geteuid();
                    match rustix::net::sockopt::socket_peercred(&stream) {
                        Ok(c) if c.uid == me || c.uid.is_root() => {}
                        peer => {
                            let uid = peer.map_or(-1, |c| i64::from(c.uid.as_raw()));
                            eprintln!(
                                "softibd[{}]: refused a connection from uid {uid}: this daemon \
                                 serves uid {} (and root) only",
                                self.name,
                                me.as_raw()
                            );
                            continue;
                        }
                    }
                    stream.set_nonblocking(true)?;
                    let id = self.next_client;
                    self.next_client += 1;
                    self.clients.insert(
                        id,
                        Client {
                            stream,
                            reader: FrameReader::default(),
                            hello: false,
                            pid: 0,
                            program: String::new(),
                            owned: Owned::default(),
                            parked: None,
                            agents: Vec::new(),
                            mads: VecDeque::new(),
                            channels: BTreeMap::new(),
                            armed: BTreeMap::new(),
                            cq_rings: BTreeMap::new(),
                            broken: false,
                            submit: None,
                            wakeup: None,
                            submit_errors: 0,
                            events: VecDeque::new(),
                            events_fd: None,
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Executes what waits in the clients' submission rings.
    /// Brings the sysfs-style files up to date (see [`crate::sysfs`]); a failure is said
    /// once and the files are left as they are.
    fn sync_sysfs(&mut self, now: StdInstant) {
        self.sysfs_due = now + SYSFS_EVERY;
        let infos: Vec<_> = self.devs.iter().map(Device::info).collect();
        if let Err(e) = self.sysfs.sync(&infos) {
            if !self.sysfs_failed {
                eprintln!(
                    "softibd[{}]: cannot write the device files under {}: {e}",
                    self.name,
                    self.dir.join("sys").display()
                );
                self.sysfs_failed = true;
            }
        }
    }

    fn drain_submissions(&mut self) {
        let ids: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.submit.is_some())
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.drain_submit(id);
        }
    }

    fn drain_submit(&mut self, id: u64) {
        let Some(c) = self.clients.get_mut(&id) else {
            return;
        };
        let Some((ring, _)) = &c.submit else {
            return;
        };
        let mut buf = Vec::new();
        loop {
            match ring.pop(&mut buf) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    c.broken = true;
                    return;
                }
            }
            let Ok(op) = postcard::from_bytes::<proto::Submit>(&buf) else {
                c.broken = true;
                return;
            };
            let (dev, post) = match op {
                proto::Submit::Send { dev, qpn, wr } => (dev, Post::Send(qpn, wr)),
                proto::Submit::Recv { dev, qpn, wr } => (dev, Post::Recv(qpn, wr)),
            };
            let qpn = post.target();
            let result = match self.devs.get_mut(dev as usize).map(Device::hca_mut) {
                Some(hca) => post_owned(hca, &c.owned, dev, post),
                None => Err(format!("no device {dev}")),
            };
            if let Err(e) = result {
                c.submit_errors += 1;
                if c.submit_errors == 1 {
                    eprintln!(
                        "softibd[{}]: {} (pid {}): a work request from its submission ring \
                         for QP {qpn} was refused: {e}",
                        self.name, c.program, c.pid
                    );
                }
            }
        }
    }

    /// Serves the requests that arrived, at most [`MAX_REQUESTS_PER_TURN`] per client; returns
    /// whether some wait for the next turn.
    fn serve_clients(&mut self, _now: Instant) -> bool {
        self.drain_submissions();
        let ready = std::mem::take(&mut self.ready_clients);
        // Ready sockets, and clients whose requests wait in their buffer behind a parked one.
        let ids: Vec<u64> = self
            .clients
            .iter()
            .filter(|(id, c)| ready.contains(id) || (c.parked.is_none() && c.reader.has_data()))
            .map(|(id, _)| *id)
            .collect();
        let mut more = false;
        for id in ids {
            let alive = match self.clients.get_mut(&id) {
                Some(c) if ready.contains(&id) => c.reader.fill(&c.stream).unwrap_or(false),
                Some(_) => true,
                None => continue,
            };
            let mut served = 0;
            while let Some(c) = self.clients.get_mut(&id) {
                if c.parked.is_some() {
                    break;
                }
                if served == MAX_REQUESTS_PER_TURN {
                    more = true;
                    break;
                }
                served += 1;
                let frame = match c.reader.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(msg) => {
                        let _ = proto::send(&c.stream, &err(ErrorKind::Protocol, msg), &[]);
                        self.drop_client(id);
                        break;
                    }
                };
                // Work the client posted through its ring comes before what it asks now.
                self.drain_submit(id);
                let response = match proto::decode::<Request>(&frame) {
                    Ok(req) => self.handle(id, req),
                    Err(msg) => Some(err(ErrorKind::Protocol, msg)),
                };
                if let Some(r) = response {
                    self.reply(id, &r);
                }
            }
            // A client that hung up after its requests has the rest served first (its socket
            // stays readable at end of stream, so the next turn comes back here).
            if !alive && served < MAX_REQUESTS_PER_TURN {
                self.drop_client(id);
            }
        }
        more
    }

    fn reply(&mut self, id: u64, r: &Response) {
        let failed = match self.clients.get(&id) {
            Some(c) => proto::send(&c.stream, r, &[]).is_err(),
            None => false,
        };
        if failed {
            self.drop_client(id);
        }
    }

    /// The client went away: reclaim everything it owned, as the kernel does when a process
    /// holding uverbs objects exits. Its QPs are destroyed; their peers see what a peer of a
    /// dead process sees on real hardware (no more responses: retries exhausted).
    fn drop_client(&mut self, id: u64) {
        let Some(c) = self.clients.remove(&id) else {
            return;
        };
        for (d, qpn) in &c.owned.qps {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.destroy_qp(*qpn);
            }
        }
        for (d, srq) in &c.owned.srqs {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.destroy_srq(softib_engine::SrqHandle(*srq));
            }
        }
        for (d, ah) in &c.owned.ahs {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.destroy_ah(AhHandle(*ah));
            }
        }
        for ((d, lkey), region) in &c.owned.mrs {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.dereg_mr(*lkey);
                h.memory_mut().remove(*region);
            }
        }
        for (d, cq) in &c.owned.cqs {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.destroy_cq(CqHandle(*cq));
            }
        }
        for (d, pd) in &c.owned.pds {
            if let Some(h) = self.devs.get_mut(*d as usize).map(Device::hca_mut) {
                let _ = h.dealloc_pd(PdHandle(*pd));
            }
        }
        for (dev, port, sm) in &c.agents {
            if *sm {
                self.set_sm(*dev, *port, None);
            }
        }
        self.tid_owner.retain(|_, owner| *owner != id);
        tracing_free_log(&self.name, c.pid, &c.program);
    }

    /// Persists the RoCE devices, so a restarted daemon brings them back.
    fn save_links(&self) {
        let Some(path) = &self.links_file else {
            return;
        };
        let links: Vec<&crate::device::LinkConfig> = self
            .devs
            .iter()
            .filter_map(|d| match d {
                Device::Roce(r) => Some(&r.config),
                Device::Ib(_) => None,
            })
            .collect();
        let text = serde_json::to_string_pretty(&links).unwrap_or_default();
        let tmp = path.with_extension("tmp");
        // Write then rename: a crash never leaves a half-written configuration.
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }

    fn set_sm(&mut self, dev: u32, port: u8, info: Option<SmInfo>) {
        let Some(ib) = self.devs.get_mut(dev as usize).and_then(Device::ib) else {
            return;
        };
        let sma = ib.ca.sma_mut();
        let mask = sma.port_info(port).map_or(0, |p| p.capability_mask);
        let mask = if info.is_some() {
            mask | capability_mask::IS_SM
        } else {
            mask & !capability_mask::IS_SM
        };
        sma.set_capability_mask(port, mask);
        sma.set_sm_info(info);
    }

    /// Serves one request; `None` when it waits (parked) and will be answered later.
    fn handle(&mut self, id: u64, req: Request) -> Option<Response> {
        let c = self.clients.get_mut(&id)?;
        if !c.hello {
            return Some(match req {
                Request::Hello {
                    version,
                    pid,
                    program,
                } if version == proto::VERSION => {
                    c.hello = true;
                    c.pid = pid;
                    c.program = program;
                    Response::Hello {
                        version: proto::VERSION,
                        pid: std::process::id(),
                        host: self.name.clone(),
                    }
                }
                Request::Hello { version, .. } => err(
                    ErrorKind::Protocol,
                    format!(
                        "this softibd speaks control protocol {}, the client {version}: \
                         use a softib library and daemon of the same release",
                        proto::VERSION
                    ),
                ),
                _ => err(ErrorKind::Protocol, "the first request must be Hello"),
            });
        }
        let ndev = self.devs.len();
        // The device a request names, or an error naming what exists.
        macro_rules! dev {
            ($dev:expr) => {
                match self.devs.get_mut($dev as usize) {
                    Some(d) => d,
                    None => {
                        return Some(err(
                            ErrorKind::NotFound,
                            format!("no device {} (this host has {ndev})", $dev),
                        ))
                    }
                }
            };
        }
        // The IB device a MAD request names.
        macro_rules! ib {
            ($dev:expr) => {
                match dev!($dev).ib() {
                    Some(ib) => ib,
                    None => {
                        return Some(err(
                            ErrorKind::Invalid,
                            format!(
                                "device {} is a RoCE device: it has no subnet management (QP0/QP1)",
                                $dev
                            ),
                        ))
                    }
                }
            };
        }
        macro_rules! owned {
            ($set:ident, $dev:expr, $key:expr, $what:literal) => {
                if !c.owned.$set.contains(&($dev, $key)) {
                    return Some(err(
                        ErrorKind::NotFound,
                        format!(
                            "no {} {} on device {} belongs to this client",
                            $what, $key, $dev
                        ),
                    ));
                }
            };
        }
        let r = match req {
            Request::Hello { .. } => err(ErrorKind::Protocol, "Hello was already sent"),
            Request::ListDevices => {
                return Some(Response::Devices(
                    self.devs.iter().map(Device::info).collect(),
                ))
            }
            Request::AttachBuffer { len, addr } => {
                if c.owned.buffers.len() >= MAX_BUFFERS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may attach at most {MAX_BUFFERS_PER_CLIENT} buffers"),
                    ));
                }
                let Some(fd) = c.reader.fds.pop() else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "AttachBuffer arrived without its memfd",
                    ));
                };
                let Ok(len) = usize::try_from(len) else {
                    return Some(err(ErrorKind::Invalid, "buffer length does not fit"));
                };
                match SharedRegion::from_fd(fd, len) {
                    Ok(map) => {
                        let b = self.next_buffer;
                        self.next_buffer += 1;
                        c.owned.buffers.insert(b, (Rc::new(map), addr));
                        Response::Handle(b)
                    }
                    Err(e) => err(ErrorKind::Invalid, format!("cannot map the buffer: {e}")),
                }
            }
            Request::DetachBuffer { buffer } => match c.owned.buffers.get(&buffer) {
                Some((map, _)) if Rc::strong_count(map) > 1 => {
                    err(ErrorKind::Busy, "memory regions still use this buffer")
                }
                Some(_) => {
                    c.owned.buffers.remove(&buffer);
                    Response::Ok
                }
                None => err(ErrorKind::NotFound, format!("no buffer {buffer}")),
            },
            Request::AllocPd { dev } => {
                let hca = dev!(dev).hca_mut();
                if c.owned.pds.len() >= MAX_PDS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may allocate at most {MAX_PDS_PER_CLIENT} PDs"),
                    ));
                }
                match hca.alloc_pd() {
                    Ok(pd) => {
                        c.owned.pds.insert((dev, pd.0));
                        Response::Handle(u64::from(pd.0))
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::DeallocPd { dev, pd } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, pd, "PD");
                match hca.dealloc_pd(PdHandle(pd)) {
                    Ok(()) => {
                        c.owned.pds.remove(&(dev, pd));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::RegMr {
                dev,
                pd,
                buffer,
                addr,
                len,
                access,
            } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, pd, "PD");
                if c.owned.mrs.len() >= MAX_MRS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may register at most {MAX_MRS_PER_CLIENT} MRs"),
                    ));
                }
                let Some((map, base)) = c.owned.buffers.get(&buffer) else {
                    return Some(err(ErrorKind::NotFound, format!("no buffer {buffer}")));
                };
                let inside = addr
                    .checked_sub(*base)
                    .and_then(|off| off.checked_add(len))
                    .is_some_and(|end| end <= map.len() as u64);
                if !inside {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!(
                            "the region [{addr:#x}, +{len}) is not inside buffer {buffer} \
                             ([{base:#x}, +{}))",
                            map.len()
                        ),
                    ));
                }
                let region = RegionId(self.next_region);
                self.next_region += 1;
                match hca.reg_mr(PdHandle(pd), addr, len, access, region) {
                    Ok(key) => {
                        hca.memory_mut().add(region, *base, Rc::clone(map));
                        c.owned.mrs.insert((dev, key), region);
                        Response::Mr {
                            lkey: key,
                            rkey: key,
                        }
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::DeregMr { dev, lkey } => {
                let hca = dev!(dev).hca_mut();
                let Some(&region) = c.owned.mrs.get(&(dev, lkey)) else {
                    return Some(err(ErrorKind::NotFound, format!("no MR {lkey:#x}")));
                };
                match hca.dereg_mr(lkey) {
                    Ok(_) => {
                        hca.memory_mut().remove(region);
                        c.owned.mrs.remove(&(dev, lkey));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::CreateCq { dev, cqe } => {
                let hca = dev!(dev).hca_mut();
                if c.owned.cqs.len() >= MAX_CQS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may create at most {MAX_CQS_PER_CLIENT} CQs"),
                    ));
                }
                match hca.create_cq(cqe) {
                    Ok(cq) => {
                        c.owned.cqs.insert((dev, cq.0));
                        Response::Handle(u64::from(cq.0))
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::DestroyCq { dev, cq } => {
                let hca = dev!(dev).hca_mut();
                owned!(cqs, dev, cq, "CQ");
                match hca.destroy_cq(CqHandle(cq)) {
                    Ok(()) => {
                        c.owned.cqs.remove(&(dev, cq));
                        c.armed.remove(&(dev, cq));
                        c.cq_rings.remove(&(dev, cq));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::CreateQp { dev, init } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, init.pd.0, "PD");
                owned!(cqs, dev, init.send_cq.0, "CQ");
                owned!(cqs, dev, init.recv_cq.0, "CQ");
                if let Some(srq) = init.srq {
                    owned!(srqs, dev, srq.0, "SRQ");
                }
                if c.owned.qps.len() >= MAX_QPS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may create at most {MAX_QPS_PER_CLIENT} QPs"),
                    ));
                }
                match hca.create_qp(init) {
                    Ok(qpn) => {
                        c.owned.qps.insert((dev, qpn));
                        Response::Qp(qpn)
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::ModifyQp {
                dev,
                qpn,
                attr,
                mask,
            } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                match hca.modify_qp(qpn, &attr, mask) {
                    Ok(()) => Response::Ok,
                    Err(e) => verbs_error(e),
                }
            }
            Request::QueryQp { dev, qpn } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                match hca.query_qp(qpn) {
                    Ok((a, i)) => Response::QpAttr(Box::new(a), i),
                    Err(e) => verbs_error(e),
                }
            }
            Request::DestroyQp { dev, qpn } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                match hca.destroy_qp(qpn) {
                    Ok(()) => {
                        c.owned.qps.remove(&(dev, qpn));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::CreateAh { dev, pd, av } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, pd, "PD");
                if c.owned.ahs.len() >= MAX_AHS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may create at most {MAX_AHS_PER_CLIENT} AHs"),
                    ));
                }
                match hca.create_ah(PdHandle(pd), av) {
                    Ok(ah) => {
                        c.owned.ahs.insert((dev, ah.0));
                        Response::Handle(u64::from(ah.0))
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::DestroyAh { dev, ah } => {
                let hca = dev!(dev).hca_mut();
                owned!(ahs, dev, ah, "AH");
                match hca.destroy_ah(AhHandle(ah)) {
                    Ok(()) => {
                        c.owned.ahs.remove(&(dev, ah));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::PostSend { dev, qpn, wrs } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                post_list(wrs, |wr| {
                    post_owned(hca, &c.owned, dev, Post::Send(qpn, wr))
                })
            }
            Request::PostRecv { dev, qpn, wrs } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                post_list(wrs, |wr| {
                    post_owned(hca, &c.owned, dev, Post::Recv(qpn, wr))
                })
            }
            Request::PollCq {
                dev,
                cq,
                max,
                wait_us,
            } => {
                let hca = dev!(dev).hca_mut();
                owned!(cqs, dev, cq, "CQ");
                if let Some(ring) = c.cq_rings.get(&(dev, cq)) {
                    // Completions travel in the ring; this request only waits for one.
                    if feed_ring(hca, cq, ring).is_err() {
                        return Some(err(ErrorKind::Protocol, "the completion ring is broken"));
                    }
                    if ring.is_empty() == Ok(true) && wait_us > 0 {
                        c.parked = Some(Parked::PollCq {
                            dev,
                            cq,
                            max,
                            until: StdInstant::now() + StdDuration::from_micros(u64::from(wait_us)),
                        });
                        return None;
                    }
                    return Some(Response::Completions(Vec::new()));
                }
                if hca.cq_len(CqHandle(cq)) == 0 && wait_us > 0 {
                    c.parked = Some(Parked::PollCq {
                        dev,
                        cq,
                        max,
                        until: StdInstant::now() + StdDuration::from_micros(u64::from(wait_us)),
                    });
                    return None;
                }
                Response::Completions(drain_cq(hca, cq, max))
            }
            Request::OpenMad { dev, port, sm } => {
                let ports = ib!(dev).ca.identity().num_ports;
                if port == 0 || port > ports {
                    return Some(err(ErrorKind::NotFound, format!("no port {port}")));
                }
                if sm
                    && self
                        .clients
                        .values()
                        .any(|o| o.agents.iter().any(|&(d, p, s)| d == dev && p == port && s))
                {
                    return Some(err(
                        ErrorKind::Busy,
                        format!("an SM already runs on port {port} of this host"),
                    ));
                }
                let c = self.clients.get_mut(&id)?;
                c.agents.push((dev, port, sm));
                Response::Ok
            }
            Request::SendSmp {
                dev,
                port,
                dlid,
                mad,
            } => {
                let parsed = <[u8; MAD_LEN]>::try_from(mad.as_slice())
                    .ok()
                    .and_then(|b| smp::Repr::parse(&smp::Packet::new_unchecked(&b[..])).ok());
                let Some(s) = parsed else {
                    return Some(err(ErrorKind::Invalid, "not a 256-byte SMP"));
                };
                if !c.agents.iter().any(|&(d, p, _)| d == dev && p == port) {
                    return Some(err(
                        ErrorKind::Protocol,
                        format!("open port {port} as a MAD agent first (OpenMad)"),
                    ));
                }
                if !s.header.method.is_response() {
                    self.note_tid(dev, port, s.header.tid, id);
                }
                ib!(dev).ca.send_smp(port, dlid, &s);
                Response::Ok
            }
            Request::SendGmp {
                dev,
                port,
                dlid,
                dest_qpn,
                mad,
            } => {
                let Ok(m) = <[u8; MAD_LEN]>::try_from(mad.as_slice()) else {
                    return Some(err(ErrorKind::Invalid, "a GMP is 256 bytes"));
                };
                if !c.agents.iter().any(|&(d, p, _)| d == dev && p == port) {
                    return Some(err(
                        ErrorKind::Protocol,
                        format!("open port {port} as a MAD agent first (OpenMad)"),
                    ));
                }
                if let Ok(h) = mad::Repr::parse(&mad::Packet::new_unchecked(&m[..])) {
                    if !h.method.is_response() {
                        self.note_tid(dev, port, h.tid, id);
                    }
                }
                ib!(dev).ca.send_gmp(port, dlid, dest_qpn, &m);
                Response::Ok
            }
            Request::RecvMads { max, wait_us } => {
                if c.mads.is_empty() && wait_us > 0 {
                    c.parked = Some(Parked::RecvMads {
                        max,
                        until: StdInstant::now() + StdDuration::from_micros(u64::from(wait_us)),
                    });
                    return None;
                }
                let n = c.mads.len().min(max as usize);
                Response::Mads(c.mads.drain(..n).collect())
            }
            Request::SetPortEnabled { dev, port, enabled } => {
                if ib!(dev).set_port_enabled(port, enabled) {
                    Response::Ok
                } else {
                    err(
                        ErrorKind::NotFound,
                        format!("port {port} has no cable to pull or plug"),
                    )
                }
            }
            Request::SetFaults { dev, port, spec } => {
                if dev!(dev).set_faults(port, spec) {
                    Response::Ok
                } else {
                    err(
                        ErrorKind::NotFound,
                        format!("device {dev} has no port {port}"),
                    )
                }
            }
            Request::Faults { dev } => Response::Faults(dev!(dev).faults()),
            Request::Capture { dev, path } => {
                let path = path.map(PathBuf::from);
                if path.as_ref().is_some_and(|p| !p.is_absolute()) {
                    return Some(err(
                        ErrorKind::Invalid,
                        "the capture file must be an absolute path (the daemon writes it)",
                    ));
                }
                match dev!(dev).set_capture(path.as_deref()) {
                    Ok(n) => Response::Handle(n),
                    Err(e) => err(ErrorKind::Invalid, format!("capture: {e}")),
                }
            }
            Request::CaptureCount { dev } => Response::Handle(dev!(dev).captured().unwrap_or(0)),
            Request::Resources => {
                let ndev = self.devs.len() as u32;
                let list = self
                    .clients
                    .values()
                    .filter(|c| c.hello)
                    .map(|c| {
                        let count = |d: u32| {
                            [
                                c.owned.pds.iter().filter(|k| k.0 == d).count() as u32,
                                c.owned.cqs.iter().filter(|k| k.0 == d).count() as u32,
                                c.owned.qps.iter().filter(|k| k.0 == d).count() as u32,
                                c.owned.mrs.keys().filter(|k| k.0 == d).count() as u32,
                                c.owned.ahs.iter().filter(|k| k.0 == d).count() as u32,
                            ]
                        };
                        proto::ClientResources {
                            pid: c.pid,
                            program: c.program.clone(),
                            per_device: (0..ndev).map(|d| (d, count(d))).collect(),
                            buffers: c.owned.buffers.len() as u32,
                        }
                    })
                    .collect();
                Response::Resources(list)
            }
            Request::LinkAdd(config) => {
                if self.devs.iter().any(|d| d.name() == config.name) {
                    return Some(err(
                        ErrorKind::Busy,
                        format!("a device named {} exists already", config.name),
                    ));
                }
                if config.name.is_empty()
                    || config.name.len() > 63
                    || !config
                        .name
                        .chars()
                        .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '-')
                {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!(
                            "device name {:?}: use 1 to 63 letters, digits, '_' or '-'",
                            config.name
                        ),
                    ));
                }
                let seed = self.seed ^ (self.devs.len() as u64).wrapping_mul(0x9e37_79b9);
                match crate::device::RoceDev::new(config, seed) {
                    Ok(d) => {
                        self.devs.push(Device::Roce(Box::new(d)));
                        self.save_links();
                        Response::Ok
                    }
                    Err(e) => err(ErrorKind::Invalid, e.to_string()),
                }
            }
            Request::LinkDel { name } => {
                let Some(at) = self.devs.iter().position(|d| d.name() == name) else {
                    return Some(err(ErrorKind::NotFound, format!("no device {name}")));
                };
                if !matches!(self.devs[at], Device::Roce(_)) {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!(
                            "{name} is an IB HCA of the fabric; only RoCE links can be deleted"
                        ),
                    ));
                }
                if at + 1 != self.devs.len() {
                    // Device indexes are how clients name devices: only the last may go while
                    // the daemon runs (the others are gone after a restart).
                    return Some(err(
                        ErrorKind::Busy,
                        format!(
                            "{name} is not the last device; delete the devices added after it                              first, or restart the daemon after `link del`"
                        ),
                    ));
                }
                let users = self.clients.values().any(|c| {
                    let d = at as u32;
                    c.owned.pds.iter().any(|(x, _)| *x == d)
                        || c.owned.qps.iter().any(|(x, _)| *x == d)
                });
                if users {
                    return Some(err(
                        ErrorKind::Busy,
                        format!("{name} is in use by a client (its PDs or QPs exist)"),
                    ));
                }
                self.devs.remove(at);
                self.save_links();
                Response::Ok
            }
            Request::LinkShow => Response::Links(
                self.devs
                    .iter()
                    .filter_map(|d| match d {
                        Device::Roce(r) => Some((r.config.clone(), r.up)),
                        Device::Ib(_) => None,
                    })
                    .collect(),
            ),
            Request::SetSm { dev, port, sm_info } => {
                if !c.agents.iter().any(|&(d, p, s)| d == dev && p == port && s) {
                    return Some(err(
                        ErrorKind::Protocol,
                        format!("open port {port} as the SM first (OpenMad with sm)"),
                    ));
                }
                let info = match sm_info {
                    Some(bytes) => match SmInfo::parse(&bytes) {
                        Ok(i) => Some(i),
                        Err(e) => return Some(err(ErrorKind::Invalid, format!("SMInfo: {e}"))),
                    },
                    None => None,
                };
                self.set_sm(dev, port, info);
                Response::Ok
            }
            Request::AttachMcast { dev, qpn, gid, lid } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                match hca.attach_mcast(qpn, gid, lid) {
                    Ok(()) => Response::Ok,
                    Err(e) => verbs_error(e),
                }
            }
            Request::DetachMcast { dev, qpn, gid } => {
                let hca = dev!(dev).hca_mut();
                owned!(qps, dev, qpn, "QP");
                match hca.detach_mcast(qpn, gid) {
                    Ok(()) => Response::Ok,
                    Err(e) => verbs_error(e),
                }
            }
            Request::RegMrProcess {
                dev,
                pd,
                addr,
                len,
                access,
            } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, pd, "PD");
                if c.owned.mrs.len() >= MAX_MRS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        format!("a client may register at most {MAX_MRS_PER_CLIENT} MRs"),
                    ));
                }
                if len == 0 || addr.checked_add(len).is_none() {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!("a region of {len} bytes at {addr:#x} is not a region"),
                    ));
                }
                // Who the client is comes from the kernel, not from its Hello.
                let mem = match softib_net::procmem::ProcessMemory::of_peer(&c.stream) {
                    Ok(m) => m,
                    Err(e) => {
                        return Some(err(
                            ErrorKind::Invalid,
                            format!("cannot tell which process the client is: {e}"),
                        ))
                    }
                };
                // Touch both ends now, so a refusal comes back here and not as a failed
                // RDMA operation later.
                let mut probe = [0u8; 1];
                if let Err(e) = mem
                    .read(addr, &mut probe)
                    .and_then(|()| mem.read(addr + len - 1, &mut probe))
                {
                    let hint = if e.raw_os_error() == Some(1) {
                        " (EPERM: the daemon may not attach to this process — run both as \
                         the same user with prctl(PR_SET_PTRACER) or \
                         /proc/sys/kernel/yama/ptrace_scope 0, or register a buffer from \
                         alloc_buffer instead)"
                    } else {
                        ""
                    };
                    return Some(err(
                        ErrorKind::Invalid,
                        format!(
                            "cannot reach [{addr:#x}, +{len}) of pid {}: {e}{hint}",
                            mem.pid()
                        ),
                    ));
                }
                let region = RegionId(self.next_region);
                self.next_region += 1;
                match hca.reg_mr(PdHandle(pd), addr, len, access, region) {
                    Ok(key) => {
                        hca.memory_mut().add_process(region, mem);
                        c.owned.mrs.insert((dev, key), region);
                        Response::Mr {
                            lkey: key,
                            rkey: key,
                        }
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::CreateSrq {
                dev,
                pd,
                max_wr,
                max_sge,
            } => {
                let hca = dev!(dev).hca_mut();
                owned!(pds, dev, pd, "PD");
                if c.owned.srqs.len() >= MAX_CQS_PER_CLIENT {
                    return Some(err(ErrorKind::Exhausted, "too many SRQs for one client"));
                }
                match hca.create_srq(PdHandle(pd), max_wr, max_sge) {
                    Ok(srq) => {
                        c.owned.srqs.insert((dev, srq.0));
                        Response::Handle(u64::from(srq.0))
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::ModifySrq { dev, srq, limit } => {
                let hca = dev!(dev).hca_mut();
                owned!(srqs, dev, srq, "SRQ");
                match hca.modify_srq(softib_engine::SrqHandle(srq), limit) {
                    Ok(()) => Response::Ok,
                    Err(e) => verbs_error(e),
                }
            }
            Request::DestroySrq { dev, srq } => {
                let hca = dev!(dev).hca_mut();
                owned!(srqs, dev, srq, "SRQ");
                match hca.destroy_srq(softib_engine::SrqHandle(srq)) {
                    Ok(()) => {
                        c.owned.srqs.remove(&(dev, srq));
                        Response::Ok
                    }
                    Err(e) => verbs_error(e),
                }
            }
            Request::PostSrqRecv { dev, srq, wrs } => {
                let hca = dev!(dev).hca_mut();
                owned!(srqs, dev, srq, "SRQ");
                post_list(wrs, |wr| {
                    post_owned(hca, &c.owned, dev, Post::SrqRecv(srq, wr))
                })
            }
            Request::AttachSubmitRing { slots } => {
                let (Some(bell), Some(fd)) = (c.reader.fds.pop(), c.reader.fds.pop()) else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "AttachSubmitRing arrived without its memfd and doorbell",
                    ));
                };
                if c.submit.is_some() {
                    return Some(err(
                        ErrorKind::Busy,
                        "a submission ring is attached already",
                    ));
                }
                if slots == 0 || slots > proto::SUBMIT_SLOTS_MAX {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!(
                            "a submission ring has 1 to {} slots",
                            proto::SUBMIT_SLOTS_MAX
                        ),
                    ));
                }
                // The client holds the doorbell too and could drain it between the daemon's
                // poll and its read: a blocking read would then hang the daemon.
                let bell = match nonblocking(bell) {
                    Ok(bell) => bell,
                    Err(e) => return Some(err(ErrorKind::Invalid, e)),
                };
                match softib_net::ring::Ring::from_fd(fd, slots, proto::SUBMIT_SLOT_LEN) {
                    Ok(ring) => {
                        c.submit = Some((ring, bell));
                        Response::Ok
                    }
                    Err(e) => err(ErrorKind::Invalid, format!("cannot map the ring: {e}")),
                }
            }
            Request::AttachCqRing { dev, cq, slots } => {
                let _ = dev!(dev);
                owned!(cqs, dev, cq, "CQ");
                let Some(fd) = c.reader.fds.pop() else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "AttachCqRing arrived without its memfd",
                    ));
                };
                if slots == 0 || slots > CQ_RING_SLOTS_MAX as u32 {
                    return Some(err(
                        ErrorKind::Invalid,
                        format!("a completion ring has 1 to {CQ_RING_SLOTS_MAX} slots"),
                    ));
                }
                match softib_net::ring::Ring::from_fd(fd, slots, CQ_RING_SLOT_LEN) {
                    Ok(ring) => {
                        c.cq_rings.insert((dev, cq), ring);
                        Response::Ok
                    }
                    Err(e) => err(ErrorKind::Invalid, format!("cannot map the ring: {e}")),
                }
            }
            Request::CreateCompChannel => {
                if c.channels.len() >= MAX_CQS_PER_CLIENT {
                    return Some(err(
                        ErrorKind::Exhausted,
                        "too many completion channels for one client",
                    ));
                }
                let Some(fd) = c.reader.fds.pop() else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "CreateCompChannel arrived without its eventfd",
                    ));
                };
                let fd = match nonblocking(fd) {
                    Ok(fd) => fd,
                    Err(e) => return Some(err(ErrorKind::Invalid, e)),
                };
                let h = c.channels.keys().next_back().map_or(1, |k| k + 1);
                c.channels.insert(h, fd);
                Response::Handle(h)
            }
            Request::DestroyCompChannel { channel } => {
                if c.armed.values().any(|&ch| ch == channel) {
                    return Some(err(
                        ErrorKind::Busy,
                        "a CQ is still armed on this completion channel",
                    ));
                }
                match c.channels.remove(&channel) {
                    Some(_) => Response::Ok,
                    None => err(
                        ErrorKind::NotFound,
                        format!("no completion channel {channel} belongs to this client"),
                    ),
                }
            }
            Request::ReqNotifyCq { dev, cq, channel } => {
                let _ = dev!(dev);
                owned!(cqs, dev, cq, "CQ");
                if !c.channels.contains_key(&channel) {
                    return Some(err(
                        ErrorKind::NotFound,
                        format!("no completion channel {channel} belongs to this client"),
                    ));
                }
                c.armed.insert((dev, cq), channel);
                Response::Ok
            }
            Request::AsyncEvents => Response::AsyncEvents(c.events.drain(..).collect()),
            Request::AttachAsyncEvents => {
                let Some(fd) = c.reader.fds.pop() else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "AttachAsyncEvents arrived without its eventfd",
                    ));
                };
                match nonblocking(fd) {
                    Ok(fd) => {
                        if !c.events.is_empty() {
                            let _ = rustix::io::write(&fd, &1u64.to_ne_bytes());
                        }
                        c.events_fd = Some(fd);
                        Response::Ok
                    }
                    Err(e) => err(ErrorKind::Invalid, e),
                }
            }
            Request::AttachWakeup => {
                let Some(fd) = c.reader.fds.pop() else {
                    return Some(err(
                        ErrorKind::Protocol,
                        "AttachWakeup arrived without its eventfd",
                    ));
                };
                match nonblocking(fd) {
                    Ok(fd) => {
                        c.wakeup = Some(fd);
                        Response::Ok
                    }
                    Err(e) => err(ErrorKind::Invalid, e),
                }
            }
        };
        Some(r)
    }

    fn note_tid(&mut self, dev: u32, port: u8, tid: u64, client: u64) {
        if self.tid_owner.len() >= MAX_TIDS {
            self.tid_owner.clear();
        }
        self.tid_owner.insert((dev, port, tid), client);
    }

    /// Hands a received MAD to the agents that want it: a response to the agent that asked,
    /// SMP and SA requests to the SM.
    fn dispatch_mad(&mut self, dev: u32, m: MadIn) {
        let header = mad::Repr::parse(&mad::Packet::new_unchecked(&m.mad[..])).ok();
        let is_response = header.is_some_and(|h| h.method.is_response());
        let class = header.map(|h| h.mgmt_class);
        if let Some(h) = header.filter(|_| is_response) {
            if let Some(owner) = self.tid_owner.remove(&(dev, m.port, h.tid)) {
                if let Some(c) = self.clients.get_mut(&owner) {
                    if c.mads.len() < MAX_QUEUED_MADS {
                        c.mads.push_back(Mad {
                            dev,
                            port: m.port,
                            qp: m.qp,
                            slid: m.slid,
                            src_qpn: m.src_qpn,
                            mad: m.mad.to_vec(),
                        });
                    }
                    return;
                }
            }
        }
        if m.qp == MadQp::Gsi && !is_response && class == Some(mad::MgmtClass::PerfMgt) {
            self.answer_pma(dev, &m);
            return;
        }
        let to_sm_only =
            m.qp == MadQp::Smi || (!is_response && class == Some(mad::MgmtClass::SubnAdm));
        let msg = Mad {
            dev,
            port: m.port,
            qp: m.qp,
            slid: m.slid,
            src_qpn: m.src_qpn,
            mad: m.mad.to_vec(),
        };
        let mut claimed = false;
        for c in self.clients.values_mut() {
            let wants = c
                .agents
                .iter()
                .any(|&(d, p, sm)| d == dev && p == m.port && (sm || !to_sm_only));
            if wants && c.mads.len() < MAX_QUEUED_MADS {
                c.mads.push_back(msg.clone());
                claimed = true;
            }
        }
        if !claimed {
            self.unclaimed_mads += 1;
        }
    }

    /// The performance management agent (PMA, IBA §16.1) on QP1: PortCounters.
    fn answer_pma(&mut self, dev: u32, m: &MadIn) {
        let Some(ib) = self.devs.get_mut(dev as usize).and_then(Device::ib) else {
            return;
        };
        if let Some(resp) = crate::pma::answer(&ib.ca, m.port, &m.mad) {
            ib.ca.send_gmp(m.port, m.slid, m.src_qpn, &resp);
        }
    }

    /// Moves completions from the engine's CQs into the clients' completion rings (as far as
    /// the rings have room; the rest waits in the engine's CQ, which overflows as a CQ does).
    /// A client that sleeps waiting for them is woken, once a turn.
    fn feed_rings(&mut self) {
        let mut broken = Vec::new();
        for (id, c) in &mut self.clients {
            let mut wake = false;
            for (&(dev, cq), ring) in &c.cq_rings {
                let Some(hca) = self.devs.get_mut(dev as usize).map(Device::hca_mut) else {
                    continue;
                };
                match feed_ring(hca, cq, ring) {
                    Ok(fed) => {
                        wake |= fed && c.wakeup.is_some() && ring.wants_wakeup() == Ok(true);
                    }
                    Err(_) => {
                        broken.push(*id);
                        break;
                    }
                }
            }
            if let (true, Some(fd)) = (wake, &c.wakeup) {
                // An eventfd adds to its counter; a full counter is readable already.
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
        }
        for id in broken {
            if let Some(c) = self.clients.get_mut(&id) {
                c.broken = true;
            }
        }
    }

    /// Hands each engine's asynchronous events to the client owning the object they name
    /// (port events to every client). They used to stay in the engine, unread and unbounded.
    fn route_events(&mut self) {
        for (dev, d) in self.devs.iter_mut().enumerate() {
            let dev = dev as u32;
            while let Some(e) = d.hca_mut().poll_event() {
                let owns = |o: &Owned| match e {
                    AsyncEvent::CqErr(cq) => o.cqs.contains(&(dev, cq.0)),
                    AsyncEvent::SrqLimitReached(srq) => o.srqs.contains(&(dev, srq.0)),
                    AsyncEvent::QpFatal(q)
                    | AsyncEvent::QpReqErr(q)
                    | AsyncEvent::QpAccessErr(q)
                    | AsyncEvent::SqDrained(q)
                    | AsyncEvent::QpLastWqeReached(q) => o.qps.contains(&(dev, q)),
                    AsyncEvent::PortActive(_) | AsyncEvent::PortErr(_) => true,
                };
                for c in self.clients.values_mut().filter(|c| owns(&c.owned)) {
                    if c.events.len() >= MAX_ASYNC_EVENTS {
                        c.events.pop_front();
                    }
                    c.events.push_back((dev, e));
                    if let Some(fd) = &c.events_fd {
                        // An eventfd adds to its counter; a full counter is readable already.
                        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                    }
                }
            }
        }
    }

    /// Answers parked requests whose condition came true or whose wait ran out.
    fn finish_parked(&mut self, now: StdInstant) {
        self.feed_rings();
        self.route_events();
        // Called twice a turn: nothing is allocated unless a client broke its ring.
        if self.clients.values().any(|c| c.broken) {
            let broken: Vec<u64> = self
                .clients
                .iter()
                .filter(|(_, c)| c.broken)
                .map(|(id, _)| *id)
                .collect();
            for id in broken {
                eprintln!(
                    "softibd[{}]: client {id} broke its completion ring; dropped",
                    self.name
                );
                self.drop_client(id);
            }
        }
        let mut next = self.clients.keys().next().copied();
        while let Some(id) = next {
            next = self
                .clients
                .range((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
                .next()
                .map(|(k, _)| *k);
            let Some(c) = self.clients.get_mut(&id) else {
                continue;
            };
            if !c.armed.is_empty() {
                let devs = &mut self.devs;
                let channels = &c.channels;
                let rings = &c.cq_rings;
                c.armed.retain(|&(dev, cq), ch| {
                    let in_ring = rings
                        .get(&(dev, cq))
                        .is_some_and(|r| r.is_empty() == Ok(false));
                    let ready = in_ring
                        || devs
                            .get_mut(dev as usize)
                            .map(Device::hca_mut)
                            .is_some_and(|h| h.cq_len(CqHandle(cq)) > 0);
                    if ready {
                        if let Some(fd) = channels.get(ch) {
                            // An eventfd adds the 8-byte value to its counter; a full
                            // counter (EAGAIN) is already readable, which is all we need.
                            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                        }
                    }
                    !ready
                });
            }
            let response = match c.parked {
                Some(Parked::PollCq {
                    dev,
                    cq,
                    max,
                    until,
                }) => match self.devs.get_mut(dev as usize).map(Device::hca_mut) {
                    // A ring CQ's completions are in its ring: the answer only wakes the client.
                    Some(_) if c.cq_rings.contains_key(&(dev, cq)) => c
                        .cq_rings
                        .get(&(dev, cq))
                        .filter(|r| r.is_empty() != Ok(true) || now >= until)
                        .map(|_| Response::Completions(Vec::new())),
                    Some(hca) if hca.cq_len(CqHandle(cq)) > 0 || now >= until => {
                        Some(Response::Completions(drain_cq(hca, cq, max)))
                    }
                    Some(_) => None,
                    // The device went away while the client waited.
                    None => Some(Response::Completions(Vec::new())),
                },
                Some(Parked::RecvMads { max, until }) => {
                    if !c.mads.is_empty() || now >= until {
                        let n = c.mads.len().min(max as usize);
                        Some(Response::Mads(c.mads.drain(..n).collect()))
                    } else {
                        None
                    }
                }
                None => None,
            };
            if let Some(r) = response {
                c.parked = None;
                self.reply(id, &r);
            }
        }
    }
}

/// A file descriptor a client passed for the daemon to signal, made non-blocking: the
/// daemon's thread must never wait on a client's file (a pipe passed for an eventfd would
/// otherwise block it once full).
fn nonblocking(fd: OwnedFd) -> Result<OwnedFd, String> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    fcntl_getfl(&fd)
        .and_then(|fl| fcntl_setfl(&fd, fl | OFlags::NONBLOCK))
        .map_err(|e| format!("the file descriptor passed cannot be made non-blocking: {e}"))?;
    Ok(fd)
}

/// Moves `cq`'s completions into `ring` while it has room; whether it moved any.
fn feed_ring(
    hca: &mut softib_engine::Hca<ShmMemory>,
    cq: u32,
    ring: &softib_net::ring::Ring,
) -> Result<bool, softib_net::ring::RingError> {
    if hca.cq_len(CqHandle(cq)) == 0 {
        return Ok(false);
    }
    let room = ring.capacity().saturating_sub(ring.len()?);
    // Two bytes of each slot hold the length.
    let mut buf = [0u8; CQ_RING_SLOT_LEN - 2];
    let mut fed = false;
    for _ in 0..room {
        let Some(wc) = hca.poll_cq(CqHandle(cq)) else {
            break;
        };
        // A WorkCompletion encodes in well under a slot; postcard refuses rather than
        // truncates, and a refused one is lost loudly rather than silently.
        let Ok(bytes) = postcard::to_slice(&wc, &mut buf) else {
            eprintln!("softibd: a completion did not fit a ring slot: {wc:?}");
            continue;
        };
        if !ring.push(bytes)? {
            break;
        }
        fed = true;
    }
    Ok(fed)
}

/// One work request to post.
enum Post {
    Send(Qpn, softib_engine::verbs::SendWr),
    Recv(Qpn, softib_engine::verbs::RecvWr),
    SrqRecv(u32, softib_engine::verbs::RecvWr),
}

impl Post {
    /// The QPN (or SRQ handle) it goes to, for messages.
    fn target(&self) -> u32 {
        match self {
            Post::Send(q, _) | Post::Recv(q, _) => q.value(),
            Post::SrqRecv(s, _) => *s,
        }
    }
}

/// Posts one WR for a client whose objects are `owned`: the single place where both a
/// `PostSend`/`PostRecv`/`PostSrqRecv` request and an entry of the submission ring are checked
/// (the queue, and a UD WR's address handle, must be the client's own) and executed.
fn post_owned(
    hca: &mut softib_engine::Hca<ShmMemory>,
    owned: &Owned,
    dev: u32,
    post: Post,
) -> Result<(), String> {
    match post {
        Post::Send(qpn, wr) => {
            if !owned.qps.contains(&(dev, qpn)) {
                return Err(format!(
                    "no QP {qpn} on device {dev} belongs to this client"
                ));
            }
            if let Some(ud) = &wr.ud {
                if !owned.ahs.contains(&(dev, ud.ah.0)) {
                    return Err(format!("no AH {} belongs to this client", ud.ah.0));
                }
            }
            hca.post_send(qpn, wr)
        }
        Post::Recv(qpn, wr) => {
            if !owned.qps.contains(&(dev, qpn)) {
                return Err(format!(
                    "no QP {qpn} on device {dev} belongs to this client"
                ));
            }
            hca.post_recv(qpn, wr)
        }
        Post::SrqRecv(srq, wr) => {
            if !owned.srqs.contains(&(dev, srq)) {
                return Err(format!(
                    "no SRQ {srq} on device {dev} belongs to this client"
                ));
            }
            hca.post_srq_recv(softib_engine::SrqHandle(srq), wr)
        }
    }
    .map_err(|e| e.to_string())
}

/// Posts a list in order, stopping at the first WR that fails (the verbs' `bad_wr`).
fn post_list<W>(wrs: Vec<W>, mut post: impl FnMut(W) -> Result<(), String>) -> Response {
    let mut posted = 0;
    for wr in wrs {
        if let Err(error) = post(wr) {
            return Response::Posted {
                posted,
                error: Some(error),
            };
        }
        posted += 1;
    }
    Response::Posted {
        posted,
        error: None,
    }
}

fn drain_cq(
    hca: &mut softib_engine::Hca<ShmMemory>,
    cq: u32,
    max: u32,
) -> Vec<softib_engine::verbs::WorkCompletion> {
    let mut v = Vec::new();
    while v.len() < max as usize {
        match hca.poll_cq(CqHandle(cq)) {
            Some(wc) => v.push(wc),
            None => break,
        }
    }
    v
}

fn tracing_free_log(host: &str, pid: u32, program: &str) {
    if std::env::var_os("SOFTIB_LOG").is_some() {
        eprintln!("softibd[{host}]: client {program} (pid {pid}) gone; its resources reclaimed");
    }
}
