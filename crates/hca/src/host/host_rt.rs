//! One host of the daemon: its devices, its control socket and its clients, and its turn of
//! the loop.
//!
//! A turn: the clients' submission rings are drained into the engines, the devices receive,
//! new clients are accepted and requests served, MADs go to their agents, and the devices
//! transmit; before and after the transmit, what the engines produced reaches the clients
//! (`deliver_to_clients`: completions into rings, asynchronous events to their owners,
//! completion channels signalled, parked requests answered).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Instant as StdInstant;

use softib_engine::{Instant, RegionId};
use softib_proto::{self as proto, ErrorKind, FrameReader, Request, Response};

use super::admission::Access;
use super::client::Client;
use super::event_loop::engine_now;
use super::handlers::{self, refused, Refused};
use super::mads::TidOwners;
use super::quarantine::Quarantine;
use super::{events, mads, parked, rings};
use crate::device::{Device, IbDev};
use crate::switchboard::Switchboard;

/// The most requests of one client served in one turn of the loop. A client that writes
/// requests back to back without waiting for the answers had its whole buffer — a million
/// small requests — served in one turn, and every other client and packet waited seconds for
/// it; a flood of them slowed another client's 8 MiB transfer from 38 MiB/s to 0.2.
const MAX_REQUESTS_PER_TURN: usize = 64;

/// What the control handlers work on besides the client that asks: the host's devices and
/// what names new objects.
pub(super) struct Host {
    /// Host name (`test213`), in Hello and in messages.
    pub name: String,
    /// Its HCAs; clients name them by index.
    pub devs: Vec<Device>,
    next_region: u64,
    next_buffer: u64,
    /// Who sent each outstanding MAD request.
    pub tids: TidOwners,
    /// Which agent each CM MAD is for.
    pub cm: super::cm_routes::CmRoutes,
    /// MADs no agent wanted.
    pub unclaimed_mads: u64,
    /// Where RoCE devices are persisted (`None` for simulated hosts of a fabric).
    pub links_file: Option<PathBuf>,
    /// Seed of the engines' random choices; a RoCE device added later derives its own.
    pub seed: u64,
    /// The ports' IsSM files (`umad_get_issm_path`; `None` without a runtime directory).
    pub issm: Option<crate::issm::IssmFiles>,
    /// QPN blocks and keys of clients that went, until they may be handed out again.
    pub quarantine: Quarantine,
    /// Rings between process engines of this host's clients.
    pub peer_rings: super::peer_rings::PeerRings,
    /// What the process engines of clients that went counted.
    pub departed: super::oversight::Departed,
    /// Who may use the HCA and who may manage it.
    pub admission: super::admission::Admission,
}

impl Host {
    /// Sets or clears IsSM on the ports whose IsSM file a program opened or closed.
    pub fn poll_issm(&mut self) {
        let Some(issm) = &mut self.issm else {
            return;
        };
        let infos: Vec<_> = self.devs.iter().map(Device::info).collect();
        let ports = crate::issm::IssmFiles::ib_ports(&infos);
        for (dev, port, held) in issm.poll(&ports) {
            if let Some(ib) = self.devs.get_mut(dev as usize).and_then(Device::ib) {
                mads::set_is_sm(ib, port, held);
            }
        }
    }

    pub fn new(name: String, devs: Vec<Device>, links_file: Option<PathBuf>, seed: u64) -> Host {
        Host {
            name,
            devs,
            next_region: 1,
            next_buffer: 1,
            tids: TidOwners::default(),
            cm: Default::default(),
            unclaimed_mads: 0,
            issm: None,
            links_file,
            seed,
            quarantine: Quarantine::default(),
            peer_rings: Default::default(),
            departed: Default::default(),
            admission: super::admission::Admission::owner_only(),
        }
    }

    /// The device a request names, or an error naming what exists.
    pub fn dev(&mut self, dev: u32) -> Result<&mut Device, Refused> {
        let n = self.devs.len();
        self.devs.get_mut(dev as usize).ok_or_else(|| {
            refused(
                ErrorKind::NotFound,
                format!("no device {dev} (this host has {n})"),
            )
        })
    }

    /// The IB device a MAD request names.
    pub fn ib(&mut self, dev: u32) -> Result<&mut IbDev, Refused> {
        self.dev(dev)?.ib().ok_or_else(|| {
            refused(
                ErrorKind::Invalid,
                format!("device {dev} is a RoCE device: it has no subnet management (QP0/QP1)"),
            )
        })
    }

    /// A new id for a registered region's memory.
    pub fn new_region(&mut self) -> RegionId {
        let r = RegionId(self.next_region);
        self.next_region += 1;
        r
    }

    /// A new id for an attached buffer.
    pub fn new_buffer(&mut self) -> u64 {
        let b = self.next_buffer;
        self.next_buffer += 1;
        b
    }
}

/// A client's connection: the socket and what has been read from it.
pub(super) struct Conn {
    pub stream: UnixStream,
    pub reader: FrameReader,
}

/// A host and its control socket.
pub(super) struct HostRt {
    pub host: Host,
    /// Runtime directory, holding the control socket.
    pub dir: PathBuf,
    pub listener: UnixListener,
    /// The clients' sessions and their connections, under the same ids.
    pub clients: BTreeMap<u64, Client>,
    pub conns: BTreeMap<u64, Conn>,
    next_client: u64,
    /// Readiness from the last `poll(2)` of the listener and the clients (devices keep
    /// their own).
    pub listener_ready: bool,
    pub ready_clients: BTreeSet<u64>,
    /// The devices as sysfs-style files in the runtime directory, and when they are next
    /// brought up to date.
    sysfs: crate::sysfs::SysfsTree,
    sysfs_due: StdInstant,
    sysfs_failed: bool,
    /// The devices' [`Device::port_digest`]s when the files were last written.
    sysfs_ports: u64,
    /// When the IsSM files are next looked at.
    issm_due: StdInstant,
    /// Connections refused (a user not admitted), rate-limited in the log.
    refusals: crate::ratelog::RateLog,
}

/// How often the IsSM files are looked at: often while a client is an SM agent (opensm opens
/// its port's file right after registering, and sweeps at once — the SMAs must say IsSM by
/// the time it reads its own PortInfo), else as often as sysfs.
const ISSM_EVERY_WITH_SM: std::time::Duration = std::time::Duration::from_millis(5);

/// How often the sysfs-style files follow the devices.
const SYSFS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl HostRt {
    pub fn new(mut host: Host, dir: PathBuf, listener: UnixListener) -> HostRt {
        host.issm = Some(crate::issm::IssmFiles::new(&dir));
        HostRt {
            host,
            sysfs: crate::sysfs::SysfsTree::new(&dir),
            issm_due: StdInstant::now(),
            refusals: crate::ratelog::RateLog::new(),
            sysfs_due: StdInstant::now(),
            sysfs_failed: false,
            sysfs_ports: 0,
            dir,
            listener,
            clients: BTreeMap::new(),
            conns: BTreeMap::new(),
            next_client: 1,
            listener_ready: true,
            ready_clients: BTreeSet::new(),
        }
    }

    /// This host's turn; returns whether there may be more to do right away.
    pub fn step(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        origin: &StdInstant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        let mut busy = false;
        // Receives the clients posted go to the QPs before this turn's packets arrive.
        self.drain_submissions();
        rings::drain_hand_on(&mut self.host, &mut self.clients, now);
        super::oversight::drain(&mut self.host, &mut self.clients);
        super::oversight::tell_ports(&self.host, &mut self.clients);
        for d in &mut self.host.devs {
            busy |= d.receive(std_now, now, buf, sb)?;
        }
        rings::forward_to_owners(&mut self.host, &mut self.clients);
        if self.listener_ready {
            self.listener_ready = false;
            self.accept()?;
        }
        busy |= self.serve_clients();
        if std_now >= self.issm_due {
            self.poll_issm(std_now);
        }
        self.host
            .quarantine
            .release_due(std_now, &mut self.host.devs);
        if std_now >= self.sysfs_due || self.ports_digest() != self.sysfs_ports {
            self.sync_sysfs(std_now);
        }
        for d in 0..self.host.devs.len() {
            while let Some(m) = self.host.devs[d].poll_mad() {
                mads::dispatch_mad(&mut self.host, &mut self.clients, d as u32, m);
            }
        }
        mads::expire_held(&mut self.host, std_now);
        self.deliver_to_clients(std_now);
        let now = engine_now(origin);
        for d in &mut self.host.devs {
            busy |= d.transmit(now, buf, sb)?;
        }
        // Send completions made while transmitting reach the rings now, and a request parked
        // waiting for one is answered now, not when the loop next wakes (a client that posts
        // through its ring and then waits has its wait parked before the transmit).
        self.deliver_to_clients(StdInstant::now());
        Ok(busy)
    }

    /// Sets or clears IsSM on the ports whose IsSM file a program opened or closed.
    fn poll_issm(&mut self, now: StdInstant) {
        let sm_agent = self.clients.values().any(|c| c.agents.iter().any(|a| a.sm));
        self.issm_due = now
            + if sm_agent {
                ISSM_EVERY_WITH_SM
            } else {
                SYSFS_EVERY
            };
        self.host.poll_issm();
    }

    /// What the SM changes in every device's ports, folded into one number.
    fn ports_digest(&self) -> u64 {
        self.host
            .devs
            .iter()
            .fold(0, |h, d| h.rotate_left(7) ^ d.port_digest())
    }

    /// Brings the sysfs-style files up to date (see [`crate::sysfs`]); a failure is said
    /// once and the files are left as they are.
    fn sync_sysfs(&mut self, now: StdInstant) {
        self.sysfs_due = now + SYSFS_EVERY;
        self.sysfs_ports = self.ports_digest();
        let infos: Vec<_> = self.host.devs.iter().map(Device::info).collect();
        if let Err(e) = self.sysfs.sync(&infos) {
            if !self.sysfs_failed {
                eprintln!(
                    "softibd[{}]: cannot write the device files under {}: {e}",
                    self.host.name,
                    self.dir.join("sys").display()
                );
                self.sysfs_failed = true;
            }
        }
    }

    fn accept(&mut self) -> io::Result<()> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    // The socket's mode keeps other users out, but only once it is set (bind
                    // creates it with the umask's), only as long as nobody loosens it, and not
                    // when other users are admitted: the kernel's word on who connected
                    // decides. One not admitted is told why in answer to its Hello, then sent
                    // away.
                    let Ok(cred) = softib_net::peer::peer_cred(&stream) else {
                        continue;
                    };
                    let access = self.host.admission.access(&cred);
                    if let Access::Refused(_) = access {
                        let name = &self.host.name;
                        self.refusals.say(|| {
                            format!(
                                "softibd[{name}]: refused a connection from uid {} (pid {}): \
                                 not admitted",
                                cred.uid, cred.pid
                            )
                        });
                    }
                    stream.set_nonblocking(true)?;
                    let id = self.next_client;
                    self.next_client += 1;
                    let mut client = Client::new(id, cred.pid);
                    client.uid = cred.uid;
                    client.access = access;
                    self.clients.insert(id, client);
                    self.conns.insert(
                        id,
                        Conn {
                            stream,
                            reader: FrameReader::default(),
                        },
                    );
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Executes what waits in the clients' submission rings.
    fn drain_submissions(&mut self) {
        for c in self.clients.values_mut() {
            if c.submit.is_some() {
                rings::drain_submit(&mut self.host, c);
            }
        }
    }

    /// Serves the requests that arrived, at most [`MAX_REQUESTS_PER_TURN`] per client; returns
    /// whether some wait for the next turn.
    fn serve_clients(&mut self) -> bool {
        self.drain_submissions();
        let ready = std::mem::take(&mut self.ready_clients);
        // Ready sockets, and clients whose requests wait in their buffer behind a parked one.
        let ids: Vec<u64> = self
            .conns
            .iter()
            .filter(|(id, conn)| {
                ready.contains(id)
                    || (conn.reader.has_data()
                        && self.clients.get(id).is_some_and(|c| c.parked.is_none()))
            })
            .map(|(id, _)| *id)
            .collect();
        let mut more = false;
        for id in ids {
            let alive = match self.conns.get_mut(&id) {
                Some(c) if ready.contains(&id) => c.reader.fill(&c.stream).unwrap_or(false),
                Some(_) => true,
                None => continue,
            };
            let mut served = 0;
            while let (Some(c), Some(conn)) = (self.clients.get_mut(&id), self.conns.get_mut(&id)) {
                if c.parked.is_some() {
                    break;
                }
                if served == MAX_REQUESTS_PER_TURN {
                    more = true;
                    break;
                }
                served += 1;
                let frame = match conn.reader.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(msg) => {
                        let _ = proto::send(&conn.stream, &handlers::protocol_error(msg), &[]);
                        self.drop_client(id);
                        break;
                    }
                };
                // Work the client posted through its ring comes before what it asks now.
                if c.submit.is_some() {
                    rings::drain_submit(&mut self.host, c);
                }
                let response = match proto::decode::<Request>(&frame) {
                    Ok(req) => handlers::handle(
                        &mut self.host,
                        &mut self.clients,
                        id,
                        &mut conn.reader.fds,
                        req,
                    ),
                    Err(msg) => Some(handlers::protocol_error(msg)),
                };
                if let Some(r) = response {
                    self.reply(id, &r);
                }
                // A client not admitted got its refusal; it gets nothing more.
                if self
                    .clients
                    .get(&id)
                    .is_some_and(|c| matches!(c.access, Access::Refused(_)))
                {
                    self.drop_client(id);
                    break;
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
        use std::os::fd::AsFd;
        let fds = self
            .clients
            .get_mut(&id)
            .map(|c| std::mem::take(&mut c.reply_fds))
            .unwrap_or_default();
        let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
        let failed = match self.conns.get(&id) {
            Some(c) => proto::send(&c.stream, r, &borrowed).is_err(),
            None => false,
        };
        drop(borrowed);
        drop(fds);
        if failed {
            self.drop_client(id);
        }
    }

    /// The client went away (or is sent away): its connection closes and what it owned is
    /// reclaimed.
    fn drop_client(&mut self, id: u64) {
        self.conns.remove(&id);
        if let Some(c) = self.clients.remove(&id) {
            c.reclaim(&mut self.host);
        }
    }

    /// What the engines produced reaches the clients: completions move into completion
    /// rings (and wake a client sleeping for them), asynchronous events go to the clients
    /// owning their objects, a client that broke a ring is dropped, completion channels of
    /// armed CQs are signalled, and parked requests whose condition came true (or whose wait
    /// ran out by `now`) are answered.
    fn deliver_to_clients(&mut self, now: StdInstant) {
        rings::feed_rings(&mut self.clients, &mut self.host.devs);
        events::route_events(&mut self.clients, &mut self.host.devs);
        self.drop_broken_clients();
        events::signal_armed_cqs(&mut self.clients, &mut self.host.devs);
        self.answer_parked(now);
    }

    /// Drops the clients that broke a ring. Runs twice a turn: nothing is allocated unless a
    /// client broke one.
    fn drop_broken_clients(&mut self) {
        if !self.clients.values().any(|c| c.broken) {
            return;
        }
        let broken: Vec<u64> = self
            .clients
            .iter()
            .filter(|(_, c)| c.broken)
            .map(|(id, _)| *id)
            .collect();
        for id in broken {
            eprintln!(
                "softibd[{}]: client {id} broke its completion ring; dropped",
                self.host.name
            );
            self.drop_client(id);
        }
    }

    /// Answers the parked requests that can be answered (a reply that fails drops its client,
    /// so the ids are walked in order rather than the map borrowed).
    fn answer_parked(&mut self, now: StdInstant) {
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
            if let Some(r) = parked::answer(c, &mut self.host.devs, now) {
                self.reply(id, &r);
            }
        }
    }
}
