//! One process engine: a device's `softib_engine::Hca` over this process's memory, driven by
//! `softib_link::RoceCa`, with its own UDP sockets — the member of the device's steering group
//! it receives on, and the per-QP source sockets it sends from (rxe's source ports, as the
//! daemon sends).
//!
//! `Station::turn` is one pass of the polling order `RoceCa` asks for: what the sockets hold,
//! then the timers that are due, then everything the engine has to send, sent at once
//! (sendmmsg, GSO runs). Post and poll call it inline; the progress thread calls it when
//! something arrives or a timer is due.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Instant as StdInstant;

use softib_engine::hash::FixedState;
use softib_engine::{Hca, Instant, Memory, IN_PROCESS_MAX_LEN};
use softib_link::roce::framing;
use softib_link::{Incoming, RoceCa, SrcKey};
use softib_net::fault::Faults;
use softib_net::ring::PacketRing;
use softib_net::{RxBatch, TxQueue, UdpLink};
use softib_wire::Qpn;

use super::groups::Groups;
use super::memory::LocalMemory;
use super::notify::Notifications;
use super::oversight::{capture_into, Dest, LinkDrops, Oversight};
use super::peers::Peers;

/// The most per-QP source sockets an engine opens; QPs beyond send from the member socket.
const MAX_SOURCE_SOCKETS: usize = 256;

/// A turn sends at once once this much is queued (see the daemon's `TX_FLUSH_BYTES`).
const TX_FLUSH_BYTES: usize = 1 << 18;

/// How often an application thread's poll reads the socket while the engine has rings to
/// peers ([`Station::app_turn`]).
const APP_SOCKET_EVERY: u32 = 16;

/// The most asynchronous events kept for a program that does not ask for them (the oldest
/// go first, as a full event queue of an HCA overwrites).
const MAX_EVENTS: usize = 4096;

/// The room each datagram is built in (`RoceCa::poll_transmit`).
const ROOM: usize = IN_PROCESS_MAX_LEN + softib_wire::crc::ICRC_LEN;

/// A process engine and its sockets.
pub(crate) struct Station {
    pub ca: RoceCa<LocalMemory>,
    /// The member of the device's reuseport group: everything for this engine's QPNs.
    link: UdpLink,
    src_links: BTreeMap<u16, UdpLink>,
    src_refused: BTreeSet<u16>,
    tx: TxQueue<SrcKey>,
    rx: Box<RxBatch>,
    origin: StdInstant,
    /// QPNs of this engine's blocks no QP has.
    pub free_qpns: Vec<Qpn>,
    next_region: u64,
    /// The first QPN of each of this engine's blocks.
    pub blocks: BTreeSet<u32>,
    /// Where datagrams steered here for other QPNs go to the daemon (`SteerJoin`).
    hand_on: PacketRing,
    /// Where the daemon puts datagrams for this engine's QPNs that reached it while the
    /// steering group changed (`OpenEvents`).
    pub inbound: PacketRing,
    /// A record taken from `inbound`.
    inbound_buf: Vec<u8>,
    /// Rings to other processes' engines on this daemon.
    pub peers: Peers,
    /// The UD destinations (device address, QP) the daemon was asked about
    /// (`Engine::post_send`): each is asked once, until the rings change.
    pub ud_asked: std::collections::HashSet<(std::net::IpAddr, Qpn), FixedState>,
    /// Where datagrams for those peers are built.
    local_room: Box<[u8]>,
    /// Application threads' turns, counted ([`Station::app_turn`]).
    app_turns: u32,
    /// CQs armed on completion channels, signalled after every turn.
    pub notify: Notifications,
    /// The engine's asynchronous events, taken from it after every turn, until the program
    /// asks for them ([`Station::take_events`]); the eventfd `async_fd` watches, added to
    /// when one comes.
    events: std::collections::VecDeque<softib_engine::verbs::AsyncEvent>,
    pub async_bell: Option<std::os::fd::OwnedFd>,
    /// Datagrams the kernel would not take; datagrams handed on, and those the full hand-on
    /// ring could not take (lost, as on a congested wire).
    pub tx_dropped: u64,
    pub handed_on: u64,
    pub hand_on_full: u64,
    /// Datagrams the socket cut short, and the kernel's count of those it dropped for a full
    /// receive buffer (`SO_RXQ_OVFL`).
    rx_truncated: u64,
    rx_overflow: u64,
    /// The device's faults and capture as the daemon set them, and the counters it reads.
    pub oversight: Oversight,
    /// The multicast groups its UD QPs are attached to.
    pub groups: Groups,
    /// The engine's event channel (set once it is open).
    pub daemon_events: Option<super::DaemonEvents>,
    /// Who looks at the rings now: the progress thread while it spins, an application
    /// thread during its poll's turn. While anyone looks, peers need not write the doorbell
    /// (which would wake the progress thread for what the poller takes itself).
    progress_looking: bool,
    app_looking: bool,
    /// When the last post was done, and until when datagrams a streaming poster left in the
    /// send queue may wait there ([`Station::send_now`]).
    last_send: Option<Instant>,
    flush_due: Option<Instant>,
}

/// Posts closer together than this are a stream: each leaves its datagrams in the send queue
/// for the next (or for a poll, a turn of the progress thread, or [`FLUSH_DELAY`]), so that a
/// program that posts one work request per `ibv_post_send` sends a window with one `sendmmsg`
/// — one system call per post cost a small-message sender nine tenths of its rate. A post
/// after a pause sends at once: a ping-pong waits for nothing. `SOFTIB_STREAM_GAP_US` sets
/// it (0: every post sends at once).
const STREAM_GAP: softib_engine::Duration = softib_engine::Duration::from_micros(4);

/// [`STREAM_GAP`], or `SOFTIB_STREAM_GAP_US`, read once per process.
fn stream_gap() -> softib_engine::Duration {
    static GAP: std::sync::OnceLock<softib_engine::Duration> = std::sync::OnceLock::new();
    *GAP.get_or_init(|| {
        std::env::var("SOFTIB_STREAM_GAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(STREAM_GAP, softib_engine::Duration::from_micros)
    })
}

/// The longest a streaming poster's datagrams wait in the send queue when nothing else sends
/// them first (the progress thread's timer).
const FLUSH_DELAY: softib_engine::Duration = softib_engine::Duration::from_micros(20);

/// The most turns of its rings a peer that is gone gets (each takes up to 256 records of every
/// peer): enough for a whole ring of small records.
const MAX_GONE_DRAINS: usize = 64;

impl Station {
    /// An engine running `hca` on the member socket `member` of the group at `addr`.
    pub fn new(
        hca: Hca<LocalMemory>,
        member: UdpSocket,
        addr: SocketAddr,
        hand_on: PacketRing,
    ) -> io::Result<Station> {
        let link = UdpLink::from_socket(member, true)?;
        if let std::net::IpAddr::V4(v4) = addr.ip() {
            // UD sends to a group leave by the device's interface.
            let _ = softib_net::mcast::send_from(link.socket(), v4);
        }
        let mut ca = RoceCa::new(hca, softib_link::RoceConfig::new(addr));
        // Between two engines' rings nothing can see or change a packet while the link is
        // clean (`transmit` says so every time): payloads stay where they lie until the ring.
        ca.set_trust_local(true);
        Ok(Station {
            ca,
            link,
            src_links: BTreeMap::new(),
            src_refused: BTreeSet::new(),
            tx: TxQueue::new(),
            rx: Box::new(RxBatch::new()),
            origin: StdInstant::now(),
            free_qpns: Vec::new(),
            next_region: 1,
            blocks: BTreeSet::new(),
            hand_on,
            inbound: PacketRing::create("softib-inbound", softib_proto::INBOUND_RING_BYTES)?,
            inbound_buf: Vec::new(),
            peers: Peers::default(),
            ud_asked: std::collections::HashSet::default(),
            local_room: vec![0u8; ROOM].into_boxed_slice(),
            app_turns: 0,
            notify: Notifications::default(),
            events: std::collections::VecDeque::new(),
            async_bell: None,
            tx_dropped: 0,
            handed_on: 0,
            hand_on_full: 0,
            rx_truncated: 0,
            rx_overflow: 0,
            oversight: Oversight::new()?,
            groups: Groups::new(addr)?,
            daemon_events: None,
            progress_looking: false,
            app_looking: false,
            last_send: None,
            flush_due: None,
        })
    }

    /// The progress thread starts or stops looking at the rings (it spins, or goes to
    /// sleep); returns whether a ring holds a record nobody looks for now (which a thread
    /// about to sleep takes first: its producer may have seen the flag set and not rung).
    pub fn progress_looks(&mut self, on: bool) -> bool {
        self.progress_looking = on;
        self.say_looking()
    }

    /// An application thread starts or stops looking at the rings (a poll's turn, under the
    /// lock); returns whether a ring holds a record, as [`Station::progress_looks`].
    pub fn app_looks(&mut self, on: bool) -> bool {
        self.app_looking = on;
        self.say_looking()
    }

    /// Tells every ring whether anyone looks (each ring is written only when its flag
    /// changes, so a ring that came since is told too); returns whether records wait that
    /// nobody will look for (one who still looks takes them).
    fn say_looking(&mut self) -> bool {
        let looking = self.progress_looking || self.app_looking;
        let waiting = self.peers.set_polling(looking);
        waiting && !looking
    }

    /// The member socket (what the progress thread waits on).
    pub fn socket(&self) -> &UdpSocket {
        self.link.socket()
    }

    /// The engine's clock.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.origin.elapsed().as_micros() as u64)
    }

    /// The OS time of an engine deadline.
    pub fn std_time(&self, t: Instant) -> StdInstant {
        self.origin + std::time::Duration::from_micros(t.as_micros())
    }

    /// A new region id.
    pub fn new_region(&mut self) -> softib_engine::RegionId {
        let r = softib_engine::RegionId(self.next_region);
        self.next_region += 1;
        r
    }

    /// Receives what waits, fires due timers, sends what the engine has; returns whether
    /// anything arrived or left.
    pub fn turn(&mut self) -> bool {
        let got = self.receive();
        let now = self.now();
        self.ca.handle_timeout(now);
        let sent = self.transmit(now);
        self.after_turn();
        self.publish();
        got || sent
    }

    /// Writes the counters the daemon reads (when they changed).
    pub fn publish(&mut self) {
        let extra = LinkDrops {
            rx_truncated: self.rx_truncated,
            rx_overflow: self.rx_overflow,
            tx_refused: self.tx_dropped,
            hand_on_full: self.hand_on_full,
            ring_lost: self.peers.lost,
        };
        self.oversight.publish(&self.ca, &extra);
    }

    /// When the engine next needs a turn: its own deadline, or a datagram the faults hold
    /// back falling due. The engine's deadline comes apart too (what a post compares with).
    pub fn next_wakeup(&self) -> (Option<Instant>, Option<StdInstant>) {
        let engine = self.deadline();
        let at = engine.map(|t| self.std_time(t));
        let held = self.oversight.faults.next_deadline();
        let at = match (at, held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (engine, at)
    }

    /// A turn on an application thread's poll: as [`Station::turn`], except that while the
    /// engine has rings to peers the socket is read only every [`APP_SOCKET_EVERY`]th time —
    /// a busy poller would otherwise make a system call per empty poll for a socket that
    /// carries little, which the progress thread wakes for anyway.
    pub fn app_turn(&mut self) -> bool {
        self.app_turns = self.app_turns.wrapping_add(1);
        if self.peers.is_empty() || self.app_turns % APP_SOCKET_EVERY == 0 {
            return self.turn();
        }
        let got = self.receive_rings();
        let now = self.now();
        self.ca.handle_timeout(now);
        let sent = self.transmit(now);
        self.after_turn();
        got || sent
    }

    /// Sends what the engine has to send (after a post); a streaming poster's datagrams may
    /// wait in the send queue a moment for the next post's ([`STREAM_GAP`]).
    pub fn send_now(&mut self) {
        let now = self.now();
        let streaming = self
            .last_send
            .is_some_and(|t| now.saturating_since(t) < stream_gap());
        let _ = self.transmit_deferring(now, streaming);
        self.after_turn();
        // The gap that counts is the program's between two posts, not a post's own sending.
        self.last_send = Some(self.now());
    }

    /// Sends what a streaming poster left in the send queue (the engine is going away).
    pub fn flush_pending(&mut self) {
        self.flush();
    }

    /// When the engine next needs a turn: its own deadline, or a streaming poster's
    /// datagrams falling due.
    pub fn deadline(&self) -> Option<Instant> {
        match (self.ca.poll_timeout(), self.flush_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// What follows every turn: armed CQs that hold a completion signalled, asynchronous
    /// events taken from the engine (and `async_fd` told).
    pub fn after_turn(&mut self) {
        self.notify.signal(self.ca.hca());
        let mut new = false;
        while let Some(e) = self.ca.poll_event() {
            if matches!(
                e,
                softib_engine::verbs::AsyncEvent::PortActive(_)
                    | softib_engine::verbs::AsyncEvent::PortErr(_)
            ) {
                // The daemon's engine raises the port's events for every client, as on the
                // daemon path; this engine's port only follows (`Event::Port`).
                continue;
            }
            if self.events.len() >= MAX_EVENTS {
                self.events.pop_front();
            }
            self.events.push_back(e);
            new = true;
        }
        if let (true, Some(bell)) = (new, &self.async_bell) {
            let _ = rustix::io::write(bell, &1u64.to_ne_bytes());
        }
    }

    /// The asynchronous events since last asked, oldest first.
    pub fn take_events(&mut self) -> Vec<softib_engine::verbs::AsyncEvent> {
        self.after_turn();
        self.events.drain(..).collect()
    }

    fn receive(&mut self) -> bool {
        let mut got = self.receive_rings();
        got |= self.receive_inbound();
        got |= self.receive_socket();
        if !self.groups.is_empty() {
            got |= self.receive_groups();
        }
        got
    }

    /// What the daemon forwarded: datagrams for this engine's QPNs that reached the wrong
    /// socket while the steering group changed.
    fn receive_inbound(&mut self) -> bool {
        let mut got = false;
        let now = self.now();
        let local = self.link.local_addr();
        for _ in 0..256 {
            let index = match self.inbound.pop(&mut self.inbound_buf) {
                Ok(Some(tag)) => tag as u16,
                Ok(None) | Err(_) => break,
            };
            let Some((from, data)) = softib_proto::parse_hand_on(&self.inbound_buf) else {
                break;
            };
            got = true;
            if self.oversight.capture.is_some() {
                let ident = if from.is_ipv4() { index } else { 0 };
                self.oversight
                    .capture(framing::datagram(from, local, data, ident));
            }
            let _ = self
                .ca
                .handle_datagram(now, &Incoming::wire(from, index, data));
        }
        got
    }

    fn receive_groups(&mut self) -> bool {
        let now = self.now();
        let (ca, oversight) = (&mut self.ca, &mut self.oversight);
        let port = self.link.local_addr().port();
        self.groups.receive(|group, from, data| {
            if oversight.capture.is_some() {
                let to = SocketAddr::new(group.into(), port);
                oversight.capture(framing::datagram(from, to, data, 0));
            }
            let _ = ca.handle_group_datagram(now, &Incoming::wire(from, 0, data), group);
        })
    }

    /// A peer engine is gone (`RingGone`): what it put into its ring before it went is taken
    /// first, as packets already on a wire arrive after their sender dies — a ping-pong's
    /// last acknowledgement among them — and then its rings are dropped.
    pub fn peer_gone(&mut self, id: u64) {
        for _ in 0..MAX_GONE_DRAINS {
            if !self.receive_rings() {
                break;
            }
        }
        self.peers.gone(id);
    }

    fn receive_rings(&mut self) -> bool {
        let now = self.now();
        let local = self.link.local_addr();
        let (ca, oversight) = (&mut self.ca, &mut self.oversight);
        self.peers.receive(|from, data, payload, sealing| {
            if oversight.capture.is_some() && !sealing.captured {
                oversight.capture(if sealing.sealed {
                    framing::datagram(from, local, data, 0)
                } else {
                    framing::wire_datagram(from, local, data, payload, 0)
                });
            }
            let d = Incoming {
                from,
                index: 0,
                data,
                sealed: sealing.sealed,
                in_process: true,
                payload,
            };
            let _ = ca.handle_datagram(now, &d);
        })
    }

    fn receive_socket(&mut self) -> bool {
        let mut got = false;
        // At most 16 calls, so that a flood cannot keep a poller inside forever.
        for _ in 0..16 {
            match self.link.recv_batch(&mut self.rx) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            self.rx_truncated += self.rx.malformed() as u64;
            if let Some(n) = self.rx.overflows() {
                self.rx_overflow = self.rx_overflow.max(u64::from(n));
            }
            let now = self.now();
            let local = self.link.local_addr();
            for dg in self.rx.datagrams() {
                got = true;
                if !in_blocks(&self.blocks, dg.data) {
                    // Steered here while the group changed: the daemon's (or another
                    // process's), handed on.
                    let from = softib_proto::hand_on_addr(dg.from);
                    match self.hand_on.push(u32::from(dg.index), &[&from, dg.data]) {
                        Ok(true) => self.handed_on += 1,
                        Ok(false) | Err(_) => self.hand_on_full += 1,
                    }
                    continue;
                }
                if self.oversight.capture.is_some() {
                    let ident = if dg.from.is_ipv4() { dg.index } else { 0 };
                    self.oversight
                        .capture(framing::datagram(dg.from, local, dg.data, ident));
                }
                let _ = self
                    .ca
                    .handle_datagram(now, &Incoming::wire(dg.from, dg.index, dg.data));
            }
        }
        got
    }

    /// Sends what the engine has; returns whether there was anything.
    fn transmit(&mut self, now: Instant) -> bool {
        self.transmit_deferring(now, false)
    }

    /// [`Station::transmit`]; with `defer`, what the send queue holds (less than a flush's
    /// worth) waits for a later one, until [`FLUSH_DELAY`] from the first that waited.
    fn transmit_deferring(&mut self, now: Instant, defer: bool) -> bool {
        let mut sent = false;
        let ip = self.link.local_addr().ip();
        let clean = self.oversight.is_clean();
        self.ca.set_trust_local(clean);
        if !clean {
            self.release_held();
        }
        while let Some(mut t) =
            self.ca
                .poll_transmit(now, self.tx.space(ROOM), &mut self.local_room)
        {
            sent = true;
            if t.local && !clean {
                // Whole (the link copied the payload in) in the local room: sealed, through
                // the faults, then into the ring.
                let from = SocketAddr::new(ip, t.src_port);
                if self.ca.seal(&t, &mut self.local_room) {
                    let dest = Dest::Ring {
                        to: t.to,
                        dqpn: t.packet.dest_qpn,
                        from,
                    };
                    self.through_faults(dest, t.datagram_len());
                }
                continue;
            }
            if t.local {
                // The payload (left where it lies: nothing is between two engines' rings)
                // goes from the application's memory straight into the ring.
                let from = SocketAddr::new(ip, t.src_port);
                let head = &self.local_room[..t.datagram_len()];
                let payload = t.packet.payload;
                let memory = self.ca.hca_mut().memory_mut();
                let len = payload.map_or(0, |p| p.len as usize);
                let at = payload.and_then(|p| memory.payload_ref(p.region, p.addr, len));
                self.peers.send(
                    t.to.ip(),
                    t.packet.dest_qpn,
                    from,
                    head,
                    (len, at),
                    |into| payload.is_none_or(|p| memory.read(p.region, p.addr, into).is_ok()),
                );
                continue;
            }
            t.src_port = self.source_socket(t.src_port);
            if clean {
                let gso = self.src_links.get(&t.src_port).unwrap_or(&self.link).gso();
                let _ = self.ca.commit(&mut self.tx, &t, gso);
            } else {
                // Through the faults (which may hold, repeat or change it), from a copy.
                let len = t.datagram_len();
                self.local_room[..len].copy_from_slice(&self.tx.space(ROOM)[..len]);
                if self.ca.seal(&t, &mut self.local_room) {
                    self.through_faults(Dest::Wire(t.key(), t.to), len);
                }
            }
            if self.tx.bytes() >= TX_FLUSH_BYTES {
                self.flush();
            }
        }
        let due = self.flush_due.is_some_and(|d| now >= d);
        if defer && !due && !self.tx.is_empty() {
            self.flush_due.get_or_insert(now + FLUSH_DELAY);
        } else {
            self.flush();
        }
        // Packets that wait for room in a peer's ring keep the engine turning.
        self.peers.flush() || sent
    }

    /// The faults, where what they let through goes, and the local room (where `transmit`
    /// builds a datagram for them), borrowed apart.
    fn faults_and_outlets(&mut self) -> (&mut Faults<Dest>, Outlets<'_>, &[u8]) {
        let Station {
            ca,
            link,
            src_links,
            tx,
            peers,
            oversight,
            local_room,
            ..
        } = self;
        let Oversight {
            faults,
            capture,
            capture_lost,
            ..
        } = oversight;
        let out = Outlets {
            ca,
            link,
            src_links,
            tx,
            peers,
            capture,
            capture_lost,
        };
        (faults, out, local_room)
    }

    /// Passes the sealed datagram at the start of the local room through the faults to
    /// `dest`.
    fn through_faults(&mut self, dest: Dest, len: usize) {
        let (faults, mut out, room) = self.faults_and_outlets();
        let _ = faults.apply(StdInstant::now(), dest, &room[..len], |d, f| {
            out.deliver(d, f);
            Ok::<(), ()>(())
        });
    }

    /// Sends the datagrams the faults held back whose time has come.
    fn release_held(&mut self) {
        let (faults, mut out, _) = self.faults_and_outlets();
        let _ = faults.poll(StdInstant::now(), |d, f| {
            out.deliver(d, f);
            Ok::<(), ()>(())
        });
    }

    fn flush(&mut self) {
        self.flush_due = None;
        if self.tx.is_empty() {
            return;
        }
        let main = self.link.local_addr().port();
        let (link, srcs) = (&self.link, &self.src_links);
        let out = self.tx.flush(|key| {
            if key.port == main {
                Some(link)
            } else {
                srcs.get(&key.port)
            }
        });
        self.tx_dropped += out.dropped;
    }

    /// The source port a packet meant for `want` leaves from: a socket bound to it (made on
    /// first use), else the member socket's.
    fn source_socket(&mut self, want: u16) -> u16 {
        let main = self.link.local_addr();
        if want == main.port() || self.src_links.contains_key(&want) {
            return want;
        }
        if self.src_refused.contains(&want) || self.src_links.len() >= MAX_SOURCE_SOCKETS {
            return main.port();
        }
        match UdpLink::bind(SocketAddr::new(main.ip(), want)) {
            Ok(l) => {
                if let std::net::IpAddr::V4(v4) = main.ip() {
                    let _ = softib_net::mcast::send_from(l.socket(), v4);
                }
                self.src_links.insert(want, l);
                want
            }
            Err(_) => {
                self.src_refused.insert(want);
                main.port()
            }
        }
    }
}

/// Where a sealed datagram the faults let through goes: the send queue or a peer's ring, and
/// the capture on the way.
struct Outlets<'a> {
    ca: &'a mut RoceCa<LocalMemory>,
    link: &'a UdpLink,
    src_links: &'a BTreeMap<u16, UdpLink>,
    tx: &'a mut TxQueue<SrcKey>,
    peers: &'a mut Peers,
    capture: &'a Option<PacketRing>,
    capture_lost: &'a mut u64,
}

impl Outlets<'_> {
    fn deliver(&mut self, dest: Dest, frame: &[u8]) {
        match dest {
            Dest::Wire(key, to) => {
                let gso = self.src_links.get(&key.port).unwrap_or(self.link).gso();
                let (index, stored) = self.ca.queue(self.tx, key, to, frame, gso);
                if self.capture.is_some() {
                    let from = SocketAddr::new(self.link.local_addr().ip(), key.port);
                    let index = if from.is_ipv4() { index } else { 0 };
                    let packet = framing::datagram(from, to, stored, index);
                    capture_into(self.capture, self.capture_lost, packet);
                }
            }
            Dest::Ring { to, dqpn, from } => {
                if self.capture.is_some() {
                    let packet = framing::datagram(from, to, frame, 0);
                    capture_into(self.capture, self.capture_lost, packet);
                }
                self.peers
                    .send_sealed(to.ip(), dqpn, from, frame, self.capture.is_some());
            }
        }
    }
}

/// Whether the datagram's DestQP lies in one of this engine's QPN blocks (a datagram too
/// short for a BTH is the engine's to count).
fn in_blocks(blocks: &BTreeSet<u32>, data: &[u8]) -> bool {
    let Some(b) = data.get(5..8) else {
        return true;
    };
    let qpn = u32::from_be_bytes([0, b[0], b[1], b[2]]);
    blocks.contains(&(qpn & !(softib_engine::QPN_BLOCK - 1)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use softib_engine::HcaConfig;

    #[test]
    fn a_datagram_for_a_qpn_outside_the_blocks_is_handed_on_whole() {
        let member = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = member.local_addr().unwrap();
        let ring = PacketRing::create("softib-unit-hand-on", 4096).unwrap();
        let daemon_side =
            PacketRing::from_fd(ring.fd().try_clone_to_owned().unwrap(), 4096).unwrap();
        let hca = Hca::new(HcaConfig::with_seed(1), LocalMemory::default());
        let mut st = Station::new(hca, member, addr, ring).unwrap();
        st.blocks.insert(0x4000);
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        // A BTH (RC SEND ONLY) to QP 0x9001 and to QP 0x4001 (in the block, no such QP).
        let bth = |qpn: u32| {
            let mut b = vec![
                0x04u8, 0, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 1, 0xaa, 0xbb, 0, 0,
            ];
            b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
            b
        };
        tx.send_to(&bth(0x9001), addr).unwrap();
        tx.send_to(&bth(0x4001), addr).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(st.turn());
        assert_eq!(st.handed_on, 1);
        let mut rec = Vec::new();
        assert_eq!(daemon_side.pop(&mut rec).unwrap(), Some(0));
        let (from, data) = softib_proto::parse_hand_on(&rec).unwrap();
        assert_eq!(from, tx.local_addr().unwrap());
        assert_eq!(data, bth(0x9001));
        assert_eq!(
            daemon_side.pop(&mut rec).unwrap(),
            None,
            "its own went to the engine"
        );
    }

    /// A peer engine that goes (`RingGone`) may have left records in its ring, a ping-pong's
    /// last acknowledgement among them: they reach the engine before the ring is dropped.
    #[test]
    fn what_a_peer_put_into_its_ring_before_it_went_is_taken() {
        let member = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = member.local_addr().unwrap();
        let hand_on = PacketRing::create("softib-unit-hand-on", 4096).unwrap();
        let hca = Hca::new(HcaConfig::with_seed(1), LocalMemory::default());
        let mut st = Station::new(hca, member, addr, hand_on).unwrap();
        let bytes = softib_proto::PEER_RING_BYTES;
        let (to_us, to_peer) = (
            PacketRing::create("t", bytes).unwrap(),
            PacketRing::create("t", bytes).unwrap(),
        );
        let fd = |r: &PacketRing| r.fd().try_clone_to_owned().unwrap();
        let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::empty()).unwrap();
        let peer: SocketAddr = "127.0.0.3:4791".parse().unwrap();
        st.peers
            .add(
                7,
                peer,
                std::process::id(),
                &[0x4000],
                [fd(&to_us), fd(&to_peer), bell],
            )
            .unwrap();
        // The peer's last record: a whole datagram (headers only, tag = their length).
        let head = [
            0x11u8, 0, 0xff, 0xff, 0, 0, 0x20, 0x40, 0, 0, 0, 1, 0, 0, 0, 0,
        ];
        let from = softib_proto::hand_on_addr("127.0.0.3:50000".parse().unwrap());
        assert!(to_us.push(head.len() as u32, &[&from, &head]).unwrap());
        st.peer_gone(7);
        assert_eq!(st.peers.received, 1, "the record was taken");
        assert_eq!(st.peers.len(), 0, "and the rings dropped");
    }
}
