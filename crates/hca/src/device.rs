//! The devices a host's daemon runs: HCAs on emulated IB cables, and RoCEv2 devices on an IP
//! address (`softib link add NAME type rxe netdev IFACE`).
//!
//! Both are an engine over shared memory with a sans-IO link adapter (`IbCa`: native framing
//! and the SMA; `softib_link::RoceCa`: RoCEv2 framing, the ICRC, source ports, the in-process
//! decision); what lives here is what those cannot have: the sockets (cables, per-QP UDP
//! source sockets), the send queue and its flush, live faults, captures, and the port's link
//! state (the SM on IB; the interface's operational state on RoCE).

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use softib_engine::{AttrMask, Hca, HcaConfig, Instant, PortAttr, QpAttr, VerbsError};
use softib_fabric::SmaEvent;
use softib_link::framing;
use softib_link::{Incoming, RoceCa, RoceConfig, RoceTransmit, SrcKey};
use softib_net::cable::{Cable, CableEvent, CableRecv};
use softib_net::fault::{FaultSpec, FaultStats, Faults};
use softib_net::netdev::{eui64, netdev, netdev_up};
use softib_net::pcap::{PcapWriter, LINKTYPE_INFINIBAND, LINKTYPE_RAW};
use softib_net::{RxBatch, TxQueue, UdpLink};
use softib_proto::{DeviceInfo, LinkConfig, PortInfo};
use softib_wire::{Gid, Guid, Lid, Mtu, Qpn};

use crate::ib::{IbCa, MadIn};
use crate::ratelog::RateLog;
use crate::shm_memory::ShmMemory;
use crate::steering::SteerGroup;
use crate::switchboard::{LocalPayload, LocalRoce, Switchboard};

/// An HCA on IB cables.
pub(crate) struct IbDev {
    pub ca: IbCa<ShmMemory>,
    pub cables: Vec<Option<Cable>>,
    /// Readiness of each port's cable from the last `poll(2)`.
    pub ready: Vec<bool>,
    /// Injected faults on each port's egress.
    pub faults: Vec<Faults>,
    /// `softib capture`: every frame sent or received on any port.
    pub capture: Option<PcapWriter>,
    /// Where the PMA's counters were last cleared (`perfquery -r`).
    pub pma: crate::pma::PmaBaselines,
}

/// A RoCEv2 device: its `RoceCa` (the engine and the RoCEv2 framing) and the sockets, faults,
/// capture and send queue around it.
pub(crate) struct RoceDev {
    pub config: LinkConfig,
    pub ca: RoceCa<ShmMemory>,
    pub link: UdpLink,
    pub ready: bool,
    /// Whether the interface is up (the port is Active).
    pub up: bool,
    next_check: StdInstant,
    /// Datagrams the socket cut short (larger than a receive slot) or that came from an address
    /// that is not IP.
    rx_truncated: u64,
    /// What the kernel dropped because the socket's receive buffer was full, as it counts it
    /// (`SO_RXQ_OVFL`: a datagram, or a whole GSO run of up to 64, counts once). RC recovers
    /// them by retransmission; UD loses them, as on a congested wire.
    pub rx_overflow: u64,
    /// Datagrams the kernel would not take (a full socket buffer, an unreachable destination).
    pub tx_dropped: u64,
    /// Injected faults on egress, per (source key — the UDP source port and whether the
    /// packet goes in-process —, destination).
    pub faults: Faults<(SrcKey, SocketAddr)>,
    /// `softib capture`: every datagram sent or received, with its IP and UDP headers.
    pub capture: Option<PcapWriter>,
    /// Sockets bound to the UDP source ports rxe derives per QP
    /// ([`framing::rxe_source_port`]); everything is received on `link` (destination port 4791).
    src_links: std::collections::BTreeMap<u16, UdpLink>,
    /// Source ports that could not be bound (taken, or too many sockets): sent from `link`.
    src_refused: std::collections::BTreeSet<u16>,
    /// A turn's datagrams, by source key, sent together at its end (`softib_net::batch`).
    tx: TxQueue<SrcKey>,
    /// Receive slots (made on first use: 1 MiB).
    rx: Option<Box<RxBatch>>,
    /// The processes whose own engines receive on the device's address (`link` is member 0).
    pub steer: SteerGroup,
    /// Datagrams for another process's QPNs that reached the wrong socket while the group
    /// changed (handed on by a process, or received on `link`), waiting for the host to put
    /// them into their owner's inbound ring ([`Device::take_forwards`]).
    forwards: std::collections::VecDeque<Forward>,
    /// Such datagrams lost: too many waiting, or their owner could not take them.
    pub handed_on_lost: u64,
    /// The IPv4 multicast groups QPs of the device are attached to: a socket each, bound to
    /// the group's address and joined on the device's interface (the kernel tells a
    /// group's datagrams apart only by the socket that receives them).
    groups: Vec<Group>,
}

/// A datagram for process `owner`'s engine that reached the daemon.
#[derive(Debug)]
pub struct Forward {
    /// The client whose engine holds the DestQP.
    pub owner: u64,
    /// Its sender.
    pub from: SocketAddr,
    /// Its index in its GRO run (the IPv4 Identification its ICRC was sealed for).
    pub index: u16,
    /// The UDP payload, sealed.
    pub data: Vec<u8>,
}

/// The most datagrams waiting to be forwarded on one device.
const MAX_FORWARDS: usize = 4096;

/// The DestQP of a RoCEv2 UDP payload (its BTH), if it is long enough.
fn dest_qpn(data: &[u8]) -> Option<u32> {
    data.get(5..8)
        .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

/// Where a device keeps the datagrams it forwards, and counts those it loses.
struct Forwarding<'a> {
    steer: &'a SteerGroup,
    queue: &'a mut std::collections::VecDeque<Forward>,
    lost: &'a mut u64,
}

impl Forwarding<'_> {
    /// Queues a datagram for the process that owns its DestQP, if one does (else false: the
    /// daemon's engine takes it). `from_owner` when that process handed it on itself: its
    /// engine does not hold the QPN (a block it just gave back), so it is lost.
    fn forward(
        &mut self,
        from: SocketAddr,
        index: u16,
        data: &[u8],
        from_owner: Option<u64>,
    ) -> bool {
        let Some(owner) = dest_qpn(data).and_then(|q| self.steer.owner_of(q)) else {
            return false;
        };
        if Some(owner) == from_owner || self.queue.len() >= MAX_FORWARDS {
            *self.lost += 1;
        } else {
            self.queue.push_back(Forward {
                owner,
                from,
                index,
                data: data.to_vec(),
            });
        }
        true
    }
}

impl RoceDev {
    fn forwarding(&mut self) -> Forwarding<'_> {
        Forwarding {
            steer: &self.steer,
            queue: &mut self.forwards,
            lost: &mut self.handed_on_lost,
        }
    }
}

/// One IPv4 multicast group a RoCE device receives.
struct Group {
    addr: std::net::Ipv4Addr,
    socket: UdpSocket,
    ready: bool,
    /// The QPs attached to it: the last to go (detached or destroyed) closes the socket.
    members: std::collections::BTreeSet<Qpn>,
}

/// Bytes queued in a turn after which they are sent at once rather than at the turn's end.
/// Small enough that the kernel copies them out of the send queue while they are still in
/// this core's L2 cache: on a machine whose DRAM copies at 6 GB/s, 1 MiB here held inter-host
/// 64 KiB WRITEs at MTU 9000 to 1.1–1.5 GB/s and 256 KiB gives 1.4–2.2 GB/s (MTU 1500, bound
/// per packet, is the same either way; on a machine with twice the memory bandwidth the two
/// were level).
const TX_FLUSH_BYTES: usize = 1 << 18;

/// The most per-QP source sockets a device opens; QPs beyond share the device's own port.
const MAX_SOURCE_SOCKETS: usize = 512;

/// One device of a host.
pub(crate) enum Device {
    Ib(Box<IbDev>),
    Roce(Box<RoceDev>),
}

/// How often a RoCE device looks at its interface's state.
const OPERSTATE_EVERY: StdDuration = StdDuration::from_millis(500);

impl Device {
    pub fn name(&self) -> &str {
        match self {
            Device::Ib(d) => &d.ca.identity().name,
            Device::Roce(d) => &d.config.name,
        }
    }

    /// The engine, for every verb but `modify_qp` ([`Device::modify_qp`]).
    pub fn hca_mut(&mut self) -> &mut Hca<ShmMemory> {
        match self {
            Device::Ib(d) => d.ca.hca_mut(),
            Device::Roce(d) => d.ca.hca_mut(),
        }
    }

    /// `ibv_modify_qp`: on RoCE through the `RoceCa`, which decides from the QP's new path
    /// whether its peer is a device of this daemon.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        match self {
            Device::Ib(d) => d.ca.hca_mut().modify_qp(qpn, attr, mask),
            Device::Roce(d) => d.ca.modify_qp(qpn, attr, mask),
        }
    }

    /// Tells a RoCE device which addresses are devices of this daemon (`LocalRoce`'s ends).
    pub fn set_local_peers(&mut self, peers: &[SocketAddr]) {
        if let Device::Roce(d) = self {
            d.ca.set_local_peers(peers.iter().copied());
        }
    }

    /// A datagram a client's engine received and handed on (not for its QPs): to this
    /// device's engine when no client owns its DestQP, else counted as lost.
    pub fn take_handed_on(
        &mut self,
        now: Instant,
        by: u64,
        from: SocketAddr,
        index: u16,
        data: &[u8],
    ) {
        let Device::Roce(d) = self else {
            return;
        };
        if d.forwarding().forward(from, index, data, Some(by)) {
            return;
        }
        let local = d.local();
        let w = Incoming::wire(from, index, data);
        accept(&mut d.ca, &mut d.capture, &d.config.name, local, now, &w);
    }

    /// The datagrams waiting for their owners' engines (see [`Forward`]).
    pub fn take_forwards(&mut self) -> std::collections::VecDeque<Forward> {
        match self {
            Device::Ib(_) => Default::default(),
            Device::Roce(d) => std::mem::take(&mut d.forwards),
        }
    }

    /// Counts a forwarded datagram its owner could not take.
    pub fn forward_lost(&mut self) {
        if let Device::Roce(d) = self {
            d.handed_on_lost += 1;
        }
    }

    /// Whether processes' own engines hold QPs of this device (they joined its steering
    /// group).
    pub fn has_process_engines(&self) -> bool {
        match self {
            Device::Ib(_) => false,
            Device::Roce(d) => d.steer.has_members(),
        }
    }

    /// A RoCE device's steering group and the socket that is its member 0.
    pub fn steering(&mut self) -> Option<(&mut SteerGroup, &UdpSocket)> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some((&mut d.steer, d.link.socket())),
        }
    }

    pub fn ib(&mut self) -> Option<&mut IbDev> {
        match self {
            Device::Ib(d) => Some(d),
            Device::Roce(_) => None,
        }
    }

    /// Receives and handles what its sockets have (only those reported ready), runs the link
    /// state machines. Returns whether more may be waiting.
    pub fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        match self {
            Device::Ib(d) => d.receive(std_now, now, buf, sb),
            Device::Roce(d) => d.receive(std_now, now, &mut sb.roce),
        }
    }

    /// Sends what the engine (and on IB the SMA) has to send.
    pub fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        match self {
            Device::Ib(d) => d.transmit(now, buf, sb),
            Device::Roce(d) => d.transmit(now, buf, &mut sb.roce),
        }
    }

    /// The address a RoCE device receives on.
    pub fn roce_addr(&self) -> Option<SocketAddr> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(d.local()),
        }
    }

    /// The next MAD for local agents: on IB from QP0 and QP1, on RoCE from QP1 (the CM's
    /// GMPs, with the sender's address as its GID).
    pub fn poll_mad(&mut self) -> Option<MadIn> {
        match self {
            Device::Ib(d) => d.ca.poll_mad(),
            Device::Roce(d) => d.ca.poll_gmp().map(|g| MadIn {
                port: 1,
                qp: softib_proto::MadQp::Gsi,
                slid: softib_wire::Lid(0),
                src_qpn: g.src_qpn,
                sgid: Some(framing::gid_of(g.from.ip())),
                mad: g.mad,
            }),
        }
    }

    /// The RoCE device's link, for QP1's GMPs.
    pub fn roce(&mut self) -> Option<&mut RoceCa<ShmMemory>> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(&mut d.ca),
        }
    }

    /// The engine's (and the links') next deadline, in the engine's time and the OS's.
    pub fn deadlines(&self) -> (Option<Instant>, Option<StdInstant>) {
        match self {
            Device::Ib(d) => (
                d.ca.poll_timeout(),
                d.cables
                    .iter()
                    .flatten()
                    .filter_map(Cable::next_deadline)
                    .min(),
            ),
            Device::Roce(d) => (d.ca.poll_timeout(), Some(d.next_check)),
        }
    }

    /// Hands each socket to wait on to `f`, with an index [`Device::mark_ready`] understands.
    /// Calls `f` with each socket the loop waits on: its index for [`Device::mark_ready`],
    /// the socket, and for a cable the address of its far end.
    pub fn each_socket<'a>(&'a self, mut f: impl FnMut(usize, &'a UdpSocket, Option<SocketAddr>)) {
        match self {
            Device::Ib(d) => {
                for (p, c) in d.cables.iter().enumerate() {
                    if let Some(c) = c {
                        f(p, c.socket(), Some(c.peer_addr()));
                    }
                }
            }
            Device::Roce(d) => {
                f(0, d.link.socket(), None);
                for (i, g) in d.groups.iter().enumerate() {
                    f(1 + i, &g.socket, None);
                }
            }
        }
    }

    pub fn mark_ready(&mut self, index: usize) {
        match self {
            Device::Ib(d) => {
                if let Some(r) = d.ready.get_mut(index) {
                    *r = true;
                }
            }
            Device::Roce(d) => match index.checked_sub(1) {
                None => d.ready = true,
                Some(i) => {
                    if let Some(g) = d.groups.get_mut(i) {
                        g.ready = true;
                    }
                }
            },
        }
    }

    /// A QP of this device attaches to multicast group `mgid`: the MGID the engine files it
    /// under. On RoCE an IPv4 group's GID (`::ffff:a.b.c.d`, as rdma_cm makes it) has the
    /// device join the group on its interface ([`framing::engine_mgid`]); any other GID is
    /// the engine's as it is.
    pub fn join_group(&mut self, mgid: Gid, qpn: Qpn) -> io::Result<Gid> {
        let Device::Roce(d) = self else {
            return Ok(mgid);
        };
        let Some(group) = framing::ipv4_group(&mgid) else {
            return Ok(mgid);
        };
        d.join_group(group, qpn)?;
        Ok(framing::engine_mgid(group))
    }

    /// QP `qpn` detached from `mgid` ([`Device::join_group`]'s counterpart).
    pub fn leave_group(&mut self, mgid: Gid, qpn: Qpn) {
        if let (Device::Roce(d), Some(group)) = (self, framing::ipv4_group(&mgid)) {
            d.leave_groups(|g| g == group, qpn);
        }
    }

    /// QP `qpn` is gone: it leaves every group it was attached to.
    pub fn forget_qp(&mut self, qpn: Qpn) {
        if let Device::Roce(d) = self {
            d.leave_groups(|_| true, qpn);
        }
    }

    /// The MGID the engine files group `mgid` under ([`Device::join_group`]).
    pub fn group_mgid(&self, mgid: Gid) -> Gid {
        match (self, framing::ipv4_group(&mgid)) {
            (Device::Roce(_), Some(group)) => framing::engine_mgid(group),
            _ => mgid,
        }
    }

    /// A digest of what the SM changes in the ports' sysfs files (state, LID, LMC, SM LID,
    /// CapabilityMask): when it changes, the files follow at once instead of at their next
    /// periodic update, as the kernel's follow a PortInfo Set (libibumad reads the SM LID
    /// there, so `saquery` right after SUBNET UP finds the SA, and `ibstat` the state). RoCE
    /// ports change only with their interface, which the periodic update follows.
    pub fn port_digest(&self) -> u64 {
        let Device::Ib(d) = self else {
            return 0;
        };
        let sma = d.ca.sma();
        (1..=sma.num_ports()).filter_map(|p| sma.port_info(p)).fold(
            0xcbf2_9ce4_8422_2325,
            |h, i| {
                [
                    u64::from(u8::from(i.port_state)),
                    u64::from(u8::from(i.port_physical_state)),
                    u64::from(i.lid.0),
                    u64::from(i.master_sm_lid.0),
                    u64::from(i.capability_mask),
                    u64::from(i.lmc),
                ]
                .iter()
                .fold(h, |h, v| (h ^ v).wrapping_mul(0x0100_0000_01b3))
            },
        )
    }

    pub fn info(&self) -> DeviceInfo {
        match self {
            Device::Ib(d) => d.info(),
            Device::Roce(d) => d.info(),
        }
    }

    /// Sets the faults of `port` (0: every port); false if there is no such port.
    pub fn set_faults(&mut self, port: u8, spec: FaultSpec) -> bool {
        match self {
            Device::Ib(d) => {
                if port == 0 {
                    d.faults.iter_mut().for_each(|f| *f = Faults::new(spec));
                    true
                } else if let Some(f) = d.faults.get_mut(usize::from(port)) {
                    *f = Faults::new(spec);
                    true
                } else {
                    false
                }
            }
            Device::Roce(d) if port <= 1 => {
                d.faults = Faults::new(spec);
                true
            }
            Device::Roce(_) => false,
        }
    }

    /// The faults in force and what they did, per port.
    pub fn faults(&self) -> Vec<(u8, FaultSpec, FaultStats)> {
        match self {
            Device::Ib(d) => d
                .faults
                .iter()
                .enumerate()
                .skip(1)
                .map(|(p, f)| (p as u8, f.spec(), f.stats()))
                .collect(),
            Device::Roce(d) => vec![(1, d.faults.spec(), d.faults.stats())],
        }
    }

    /// Starts (`Some(path)`) or stops a capture; returns the packets of the capture stopped.
    pub fn set_capture(&mut self, path: Option<&std::path::Path>) -> io::Result<u64> {
        let (slot, linktype) = match self {
            Device::Ib(d) => (&mut d.capture, LINKTYPE_INFINIBAND),
            Device::Roce(d) => (&mut d.capture, LINKTYPE_RAW),
        };
        let done = match slot.take() {
            Some(mut w) => {
                w.flush()?;
                w.packets()
            }
            None => 0,
        };
        if let Some(p) = path {
            *slot = Some(PcapWriter::create(p, linktype)?);
        }
        Ok(done)
    }

    /// Whether a RoCE device's port is up (an IB device's ports say so in their PortInfo).
    pub fn roce_up(&self) -> Option<bool> {
        match self {
            Device::Ib(_) => None,
            Device::Roce(d) => Some(d.up),
        }
    }

    /// The faults set on a RoCE device's egress (the default for an IB device, whose ports
    /// have their own: [`Device::faults`]).
    pub fn roce_faults(&self) -> FaultSpec {
        match self {
            Device::Ib(_) => FaultSpec::default(),
            Device::Roce(d) => d.faults.spec(),
        }
    }

    /// Writes a packet a process engine on this device captured (seen at `at`) to the
    /// running capture.
    pub fn capture_from_engine(&mut self, at: std::time::SystemTime, packet: &[u8]) {
        let slot = match self {
            Device::Ib(d) => &mut d.capture,
            Device::Roce(d) => &mut d.capture,
        };
        if let Some(w) = slot {
            if w.write_at(at, packet).is_err() {
                *slot = None;
            }
        }
    }

    /// Packets captured so far by a running capture.
    pub fn captured(&mut self) -> Option<u64> {
        let w = match self {
            Device::Ib(d) => d.capture.as_mut(),
            Device::Roce(d) => d.capture.as_mut(),
        }?;
        let _ = w.flush();
        Some(w.packets())
    }
}

/// Writes a frame to a running capture; a capture that fails to write is stopped (and the
/// traffic goes on).
fn capture(slot: &mut Option<PcapWriter>, frame: &[u8]) {
    if let Some(w) = slot {
        if w.write(frame).is_err() {
            *slot = None;
        }
    }
}

impl IbDev {
    fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        buf: &mut [u8],
        sb: &mut Switchboard,
    ) -> io::Result<bool> {
        let mut busy = false;
        for pi in 1..self.cables.len() {
            let Some(cable) = self.cables[pi].as_mut() else {
                continue;
            };
            let port = pi as u8;
            let mut events = Vec::new();
            for frame in sb.take(cable.local_addr()) {
                if cable.heard_frame() {
                    busy = true;
                    capture(&mut self.capture, &frame);
                    self.ca.handle_frame(now, port, &frame);
                }
            }
            if self.ready[pi] {
                // Drained unless the batch limit stops us first (then: still ready).
                self.ready[pi] = false;
                for i in 0..256 {
                    match cable.recv(std_now, buf)? {
                        CableRecv::Empty => break,
                        CableRecv::Consumed(e) => events.extend(e),
                        CableRecv::Frame(n) => {
                            busy = true;
                            capture(&mut self.capture, &buf[..n]);
                            self.ca.handle_frame(now, port, &buf[..n]);
                        }
                    }
                    if i == 255 {
                        self.ready[pi] = true;
                        busy = true;
                    }
                }
            }
            // The peer's silence is judged after what it sent has been read (a long turn leaves
            // its beacons waiting in the socket, not missing).
            events.extend(cable.poll(std_now));
            for e in events {
                match e {
                    CableEvent::Up => self.ca.link_up(port),
                    CableEvent::Down => self.ca.link_down(port),
                }
            }
        }
        while let Some(e) = self.ca.poll_sma_event() {
            apply_sma_event(&mut self.cables, e, std_now);
        }
        self.ca.handle_timeout(now);
        Ok(busy)
    }

    fn transmit(&mut self, now: Instant, buf: &mut [u8], sb: &mut Switchboard) -> io::Result<bool> {
        let std_now = StdInstant::now();
        for (p, f) in self.faults.iter_mut().enumerate() {
            if let Some(Some(c)) = self.cables.get_mut(p) {
                let cap = &mut self.capture;
                f.poll(std_now, |(), frame| {
                    capture(cap, frame);
                    sb.send(c, frame)
                })?;
            }
        }
        let mut sent = 0;
        while let Some((port, len)) = self.ca.poll_frame(now, buf) {
            let p = usize::from(port);
            if let (Some(Some(c)), Some(f)) = (self.cables.get_mut(p), self.faults.get_mut(p)) {
                let cap = &mut self.capture;
                f.apply(std_now, (), &buf[..len], |(), frame| {
                    capture(cap, frame);
                    sb.send(c, frame)
                })?;
            }
            sent += 1;
            if sent >= 1024 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Pulls out or plugs in the cable of `port`.
    pub fn set_port_enabled(&mut self, port: u8, enabled: bool) -> bool {
        let Some(Some(cable)) = self.cables.get_mut(usize::from(port)) else {
            return false;
        };
        if cable.set_enabled(enabled, StdInstant::now()) == Some(CableEvent::Down) {
            self.ca.link_down(port);
        }
        true
    }

    fn info(&self) -> DeviceInfo {
        let id = self.ca.identity();
        let hca = self.ca.hca();
        let ports = (1..=id.num_ports)
            .map(|p| {
                let info = self.ca.sma().port_info(p);
                let attr = hca.port(p);
                PortInfo {
                    number: p,
                    state: info.map_or(1, |i| u8::from(i.port_state)),
                    phys_state: info.map_or(3, |i| u8::from(i.port_physical_state)),
                    rate: info.map_or(0, port_rate),
                    width: info.map_or(0, |i| i.link_width_active),
                    speed: info.map_or(0, |i| i.link_speed_active),
                    lid: info.map_or(Lid(0), |i| i.lid),
                    lmc: info.map_or(0, |i| i.lmc),
                    sm_lid: info.map_or(Lid(0), |i| i.master_sm_lid),
                    capability_mask: info.map_or(0, |i| i.capability_mask),
                    port_guid: id.port_guid(p),
                    link_layer_ib: true,
                    max_mtu: attr.map_or(Mtu::Mtu2048, |a| a.max_mtu),
                    active_mtu: attr.map_or(Mtu::Mtu2048, |a| a.active_mtu),
                    gids: attr.map_or_else(Vec::new, |a| a.gids.clone()),
                }
            })
            .collect();
        DeviceInfo {
            name: id.name.clone(),
            ca_type: id.ca_type(),
            description: id.description.clone(),
            fw_ver: id.fw_ver.clone(),
            hw_ver: id.hw_ver,
            node_guid: id.node_guid,
            sys_image_guid: id.sys_image_guid,
            vendor_id: id.vendor_id,
            vendor_part_id: u32::from(id.device_id),
            attr: hca.device().clone(),
            ports,
            drops: drops(hca),
            verbs: None,
        }
    }
}

fn drops(hca: &Hca<ShmMemory>) -> Vec<(String, u64)> {
    hca.drops()
        .nonzero()
        .map(|(r, n)| (r.name().to_string(), n))
        .collect()
}

/// The SM moved a port Down (retrain) or Disabled/enabled it: act on the cable.
pub(crate) fn apply_sma_event(cables: &mut [Option<Cable>], e: SmaEvent, now: StdInstant) {
    match e {
        SmaEvent::LinkDown { port, retrain } => {
            // The cable's far end stops hearing this one and goes down too; a Disabled
            // port stays silent until the SM enables it.
            if let Some(Some(c)) = cables.get_mut(usize::from(port)) {
                c.set_enabled(false, now);
                if retrain {
                    c.set_enabled(true, now);
                }
            }
        }
        SmaEvent::LinkEnabled { port } => {
            if let Some(Some(c)) = cables.get_mut(usize::from(port)) {
                c.set_enabled(true, now);
            }
        }
        SmaEvent::ClientReregister { .. } | SmaEvent::SmInfoSet { .. } => {}
    }
}

/// Gb/s of a port's active width × speed, as ibstat's "Rate".
pub fn port_rate(i: &softib_wire::mad::attr::PortInfo) -> u32 {
    let lanes = match i.link_width_active {
        1 => 1,
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 0,
    };
    let per_lane = match i.link_speed_active {
        1 => 2.5,
        2 => 5.0,
        4 => 10.0,
        _ => 0.0,
    };
    (f64::from(lanes) * per_lane) as u32
}

// ---- RoCEv2 ------------------------------------------------------------------------------

/// A device's view of [`LocalRoce`] when it flushes its queue: from its address, by source
/// port.
struct FromAddr<'a> {
    local: &'a mut LocalRoce,
    ip: IpAddr,
}

impl softib_net::batch::Loopback<SrcKey> for FromAddr<'_> {
    fn is_local(&self, to: &SocketAddr) -> bool {
        self.local.is_local(to)
    }

    fn deliver(&mut self, key: SrcKey, to: SocketAddr, index: u16, bytes: &[u8]) {
        // Whatever went through the queue was sealed: the receiver checks it.
        self.local.deliver(
            SocketAddr::new(self.ip, key.port),
            to,
            index,
            bytes,
            true,
            key.in_process,
        );
    }
}

impl RoceDev {
    /// A RoCEv2 device on `config`'s address; fails with a message naming what is wrong.
    pub fn new(config: LinkConfig, seed: u64) -> io::Result<RoceDev> {
        let nd = netdev(&config.netdev)?;
        let local = SocketAddr::new(config.addr, config.udp_port);
        let link = UdpLink::bind_reuseport_with(local, true).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "{}: cannot use {local} ({e}); is the address on {} and the port free?",
                    config.name, config.netdev
                ),
            )
        })?;
        // rxe takes its GUID from the MAC; interfaces without one (lo) get the address mixed
        // in, so that two devices on one interface still differ.
        let guid = Guid(if nd.mac == [0; 6] {
            let ip = match config.addr {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            let n = ip.len();
            eui64([0, 0, 0, ip[n - 3], ip[n - 2], ip[n - 1]])
        } else {
            eui64(nd.mac)
        });
        let mut hc = HcaConfig::with_seed(seed);
        hc.device.node_guid = guid;
        hc.device.sys_image_guid = guid;
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        link_local[8..].copy_from_slice(&guid.0.to_be_bytes());
        hc.ports = vec![PortAttr {
            max_mtu: Mtu::Mtu4096,
            active_mtu: framing::ib_mtu_for(nd.mtu),
            lid: Lid(0),
            gids: vec![Gid(link_local), framing::gid_of(config.addr)],
            pkeys: vec![softib_wire::PKey::DEFAULT],
            active: nd.up,
        }];
        let ca = RoceCa::new(
            Hca::new(hc, ShmMemory::new()),
            RoceConfig::new(link.local_addr()),
        );
        let steer = SteerGroup::new(link.local_addr());
        Ok(RoceDev {
            ca,
            link,
            ready: true,
            up: nd.up,
            next_check: StdInstant::now() + OPERSTATE_EVERY,
            rx_truncated: 0,
            rx_overflow: 0,
            tx_dropped: 0,
            faults: Faults::default(),
            capture: None,
            src_links: std::collections::BTreeMap::new(),
            src_refused: std::collections::BTreeSet::new(),
            tx: TxQueue::new(),
            rx: None,
            steer,
            forwards: Default::default(),
            handed_on_lost: 0,
            groups: Vec::new(),
            config,
        })
    }

    fn local(&self) -> SocketAddr {
        self.link.local_addr()
    }

    /// Receives IPv4 multicast group `group` for QP `qpn` (one more member if it does
    /// already): a socket bound to the group and the device's port, a member on the device's
    /// interface.
    fn join_group(&mut self, group: std::net::Ipv4Addr, qpn: Qpn) -> io::Result<()> {
        if let Some(g) = self.groups.iter_mut().find(|g| g.addr == group) {
            g.members.insert(qpn);
            return Ok(());
        }
        let IpAddr::V4(local) = self.config.addr else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "{}: IPv4 multicast group {group} on a device with an IPv6 address",
                    self.config.name
                ),
            ));
        };
        let named = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", self.config.name));
        softib_net::mcast::send_from(self.link.socket(), local).map_err(named)?;
        let socket = softib_net::mcast::join(group, self.local().port(), local).map_err(named)?;
        self.groups.push(Group {
            addr: group,
            socket,
            ready: true,
            members: std::collections::BTreeSet::from([qpn]),
        });
        Ok(())
    }

    /// QP `qpn` leaves the groups `which` picks; a group's last member closes its socket
    /// (leaving the group).
    fn leave_groups(&mut self, which: impl Fn(std::net::Ipv4Addr) -> bool, qpn: Qpn) {
        for g in self.groups.iter_mut().filter(|g| which(g.addr)) {
            g.members.remove(&qpn);
        }
        self.groups.retain(|g| !g.members.is_empty());
    }

    /// The datagrams of the groups whose sockets are readable, to the engine.
    fn receive_groups(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let mut buf = [0u8; 9216];
        for g in &mut self.groups {
            if !std::mem::take(&mut g.ready) {
                continue;
            }
            // A bounded number a turn, as the device's own socket gets.
            for _ in 0..64 {
                match g.socket.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let d = Incoming::wire(from, 0, &buf[..n]);
                        let _ = self.ca.handle_group_datagram(now, &d, g.addr);
                        busy = true;
                    }
                    Err(_) => break,
                }
            }
        }
        busy
    }

    fn receive(
        &mut self,
        std_now: StdInstant,
        now: Instant,
        local_in: &mut LocalRoce,
    ) -> io::Result<bool> {
        if std_now >= self.next_check {
            self.next_check = std_now + OPERSTATE_EVERY;
            // The port follows the interface, as rxe's does (netdev events).
            let up = netdev_up(&self.config.netdev);
            if up != self.up {
                self.up = up;
                let _ = self.ca.hca_mut().set_port_active(1, up);
            }
        }
        let mut busy = false;
        let local = self.local();
        let (ca, capture, name) = (&mut self.ca, &mut self.capture, &self.config.name);
        // From this daemon's other devices (or this one) first: they were sent earlier.
        local_in.drain(local, |from, index, data, sealed, in_process, payload| {
            let d = Incoming {
                from,
                index,
                data,
                sealed,
                in_process,
                payload,
            };
            busy |= accept(ca, capture, name, local, now, &d);
        });
        if self.ready {
            self.ready = false;
            let batch = self.rx.get_or_insert_with(|| Box::new(RxBatch::new()));
            // At most 16 calls a turn, so that sending and the clients get their turn too.
            for call in 0..16 {
                if self.link.recv_batch(batch)? == 0 {
                    break;
                }
                self.rx_truncated += batch.malformed() as u64;
                if let Some(n) = batch.overflows() {
                    self.rx_overflow = self.rx_overflow.max(u64::from(n));
                }
                let steered = self.steer.has_members();
                let mut fwd = Forwarding {
                    steer: &self.steer,
                    queue: &mut self.forwards,
                    lost: &mut self.handed_on_lost,
                };
                for dg in batch.datagrams() {
                    // Steered here while the group changed: for a process's engine.
                    if steered && fwd.forward(dg.from, dg.index, dg.data, None) {
                        continue;
                    }
                    let d = Incoming::wire(dg.from, dg.index, dg.data);
                    busy |= accept(&mut self.ca, &mut self.capture, name, local, now, &d);
                }
                if call == 15 {
                    self.ready = true;
                    busy = true;
                }
            }
        }
        busy |= self.receive_groups(now);
        self.ca.handle_timeout(now);
        Ok(busy)
    }

    fn transmit(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        local_out: &mut LocalRoce,
    ) -> io::Result<bool> {
        let more = self.queue_transmit(now, buf, local_out);
        self.flush(local_out);
        Ok(more)
    }

    /// Sends what is queued — to this daemon's own devices in-process, to others through the
    /// kernel; what the kernel would not take is lost, as on a wire.
    fn flush(&mut self, local_out: &mut LocalRoce) {
        let me = self.link.local_addr();
        let (link, srcs) = (&self.link, &self.src_links);
        let out = self.tx.flush_or_deliver(
            |key| {
                if key.port == me.port() {
                    Some(link)
                } else {
                    srcs.get(&key.port)
                }
            },
            &mut FromAddr {
                local: local_out,
                ip: me.ip(),
            },
        );
        self.tx_dropped += out.dropped;
    }

    /// Queues what the engine has to send (and delayed frames whose time has come); returns
    /// whether more may be waiting. Each datagram is built where it will most likely wait —
    /// the in-process queue's free room or the send queue's ([`RoceCa::poll_transmit`]) — so
    /// that it is queued where it lies.
    fn queue_transmit(&mut self, now: Instant, buf: &mut [u8], local_out: &mut LocalRoce) -> bool {
        self.release_held();
        let trust_local = self.trust_local();
        self.ca.set_trust_local(trust_local);
        let faults_idle = self.faults.is_idle();
        let room = buf.len();
        let mut sent = 0;
        while let Some(mut t) =
            self.ca
                .poll_transmit(now, self.tx.space(room), local_out.space(room))
        {
            t.src_port = self.source_socket(t.src_port);
            if t.local && trust_local {
                self.hand_over(t, room, local_out);
            } else if !t.local && faults_idle {
                // Sealed where it lies, for its place in its GSO run.
                let gso = self.gso(t.src_port);
                let from = SocketAddr::new(self.local().ip(), t.src_port);
                if let Some((index, stored)) = self.ca.commit(&mut self.tx, &t, gso) {
                    capture_sent(&mut self.capture, from, t.to, index, stored);
                }
            } else {
                // Through the faults (which may hold, repeat or change it), from a copy.
                let pkt: &mut [u8] = if t.local {
                    local_out.space(room)
                } else {
                    buf[..t.datagram_len()]
                        .copy_from_slice(&self.tx.space(room)[..t.datagram_len()]);
                    &mut buf[..]
                };
                if self.ca.seal(&t, pkt) {
                    self.apply_faults(&t, &pkt[..t.datagram_len()]);
                }
            }
            if self.tx.bytes() >= TX_FLUSH_BYTES {
                self.flush(local_out);
            }
            sent += 1;
            if sent >= 1024 {
                return true;
            }
        }
        false
    }

    /// Hands a datagram for a device of this daemon over unsealed, where it was built (see
    /// [`RoceDev::trust_local`]; the receiver knows not to check). A payload left in memory
    /// goes as the mapping of the client's buffer it lies in when it lies in one (the
    /// receiving device copies it from there into its own client's: one copy in all), else
    /// whole.
    fn hand_over(&mut self, mut t: RoceTransmit, room: usize, local_out: &mut LocalRoce) {
        let mut handed = None;
        if let Some(p) = t.packet.payload {
            handed = self
                .ca
                .hca()
                .memory()
                .borrow(p.region, p.addr, p.len as usize)
                .map(|(map, off)| LocalPayload {
                    map,
                    off,
                    len: p.len as usize,
                });
            if handed.is_none() && !self.ca.materialize(&mut t, local_out.space(room)) {
                return;
            }
        }
        let from = SocketAddr::new(self.local().ip(), t.src_port);
        let in_process = t.packet.in_process;
        local_out.commit_parts(from, t.to, 0, t.datagram_len(), false, in_process, handed);
    }

    /// Passes a sealed datagram through the device's faults into the send queue.
    fn apply_faults(&mut self, t: &RoceTransmit, frame: &[u8]) {
        let gso = self.gso(t.src_port);
        let ip = self.local().ip();
        let (ca, tx, cap) = (&mut self.ca, &mut self.tx, &mut self.capture);
        let _ = self.faults.apply(
            StdInstant::now(),
            (t.key(), t.to),
            frame,
            |(key, to), frame| -> Result<(), ()> {
                let (index, stored) = ca.queue(tx, key, to, frame, gso);
                capture_sent(cap, SocketAddr::new(ip, key.port), to, index, stored);
                Ok(())
            },
        );
    }

    /// Queues the datagrams the faults held back whose time has come.
    fn release_held(&mut self) {
        let ip = self.local().ip();
        let (link, srcs) = (&self.link, &self.src_links);
        let (ca, tx, cap) = (&mut self.ca, &mut self.tx, &mut self.capture);
        let _ = self
            .faults
            .poll(StdInstant::now(), |(key, to), frame| -> Result<(), ()> {
                let gso = srcs.get(&key.port).unwrap_or(link).gso();
                let (index, stored) = ca.queue(tx, key, to, frame, gso);
                capture_sent(cap, SocketAddr::new(ip, key.port), to, index, stored);
                Ok(())
            });
    }

    /// Whether the socket of source port `port` sends GSO runs.
    fn gso(&self, port: u16) -> bool {
        self.src_links.get(&port).unwrap_or(&self.link).gso()
    }

    /// Whether datagrams for this daemon's own devices may go unsealed: nothing between here
    /// and the receiving device — no capture, no fault — could see or change them, so the
    /// ICRC (two CRC passes per packet, a fifth of the daemon's time in intra-host runs)
    /// would protect nothing.
    fn trust_local(&self) -> bool {
        self.capture.is_none() && self.faults.is_idle()
    }

    /// The port a packet meant to leave from `want` really leaves from: a socket bound to it
    /// (made on first use), or the device's own port when it cannot be had.
    fn source_socket(&mut self, want: u16) -> u16 {
        let main = self.local().port();
        if want == main || self.src_links.contains_key(&want) {
            return want;
        }
        if self.src_refused.contains(&want) || self.src_links.len() >= MAX_SOURCE_SOCKETS {
            return main;
        }
        match UdpLink::bind(SocketAddr::new(self.local().ip(), want)) {
            Ok(l) => {
                self.src_links.insert(want, l);
                want
            }
            Err(_) => {
                self.src_refused.insert(want);
                main
            }
        }
    }

    fn info(&self) -> DeviceInfo {
        let hca = self.ca.hca();
        let attr = hca.port(1);
        let guid = hca.device().node_guid;
        DeviceInfo {
            name: self.config.name.clone(),
            ca_type: String::new(),
            description: format!("{} {}", self.config.name, self.config.netdev),
            fw_ver: String::new(),
            hw_ver: 0,
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            attr: hca.device().clone(),
            ports: vec![PortInfo::roce(
                guid,
                self.up,
                attr.map_or(Mtu::Mtu4096, |a| a.max_mtu),
                attr.map_or(Mtu::Mtu1024, |a| a.active_mtu),
                attr.map_or_else(Vec::new, |a| a.gids.clone()),
            )],
            drops: {
                let mut d = drops(hca);
                // Datagrams that never reached the engine, by reason.
                d.extend(
                    self.ca
                        .drops()
                        .nonzero()
                        .map(|(r, n)| (r.name().to_string(), n)),
                );
                if self.rx_truncated > 0 {
                    d.push(("datagram_truncated".to_string(), self.rx_truncated));
                }
                if self.rx_overflow > 0 {
                    d.push(("rcvbuf_overflow".to_string(), self.rx_overflow));
                }
                if self.tx_dropped > 0 {
                    d.push(("tx_refused".to_string(), self.tx_dropped));
                }
                if self.handed_on_lost > 0 {
                    d.push(("handed_on_lost".to_string(), self.handed_on_lost));
                }
                d
            },
            verbs: None,
        }
    }
}

/// Captures a received datagram (a device of this daemon's unsealed one as the wire would
/// have carried it) and hands it to the device's `RoceCa`; returns whether the engine took it.
fn accept(
    ca: &mut RoceCa<ShmMemory>,
    capture: &mut Option<PcapWriter>,
    name: &str,
    local: SocketAddr,
    now: Instant,
    d: &Incoming<'_>,
) -> bool {
    if capture.is_some() {
        let ident = if d.from.is_ipv4() { d.index } else { 0 };
        let frame = if d.sealed {
            framing::datagram(d.from, local, d.data, ident)
        } else {
            framing::wire_datagram(d.from, local, d.data, d.payload, ident)
        };
        if let Some(f) = frame {
            self::capture(capture, &f);
        }
    }
    match ca.handle_datagram(now, d) {
        Ok(()) => true,
        Err(e) => {
            // Asked once, not per datagram (a flood is many), and rate-limited: a flood must
            // not become a flood of log lines.
            static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            static DROPS_LOG: std::sync::Mutex<RateLog> = std::sync::Mutex::new(RateLog::new());
            if *DEBUG.get_or_init(|| std::env::var_os("SOFTIB_DEBUG").is_some()) {
                if let Ok(mut log) = DROPS_LOG.lock() {
                    log.say(|| format!("{name}: dropped a datagram from {}: {e}", d.from));
                }
            }
            false
        }
    }
}

/// Captures a queued datagram with the IPv4 Identification its place (`index`) in its GSO run
/// gives it.
fn capture_sent(
    cap: &mut Option<PcapWriter>,
    from: SocketAddr,
    to: SocketAddr,
    index: u16,
    stored: &[u8],
) {
    if cap.is_some() {
        let index = if from.is_ipv4() { index } else { 0 };
        if let Some(d) = framing::datagram(from, to, stored, index) {
            capture(cap, &d);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A BTH-sized UDP payload for DestQP `qpn`.
    fn bth(qpn: u32) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    #[test]
    fn a_datagram_for_a_process_qpn_goes_to_its_owner_unless_the_owner_handed_it_on() {
        let device = softib_net::steer::bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut steer = SteerGroup::new(device.local_addr().unwrap());
        let (_member, _) = steer.join(7, &device).unwrap();
        steer.add_block(7, 0x1000, &device).unwrap();
        let (mut queue, mut lost) = (std::collections::VecDeque::new(), 0);
        let mut f = Forwarding {
            steer: &steer,
            queue: &mut queue,
            lost: &mut lost,
        };
        let from: SocketAddr = "127.0.0.9:5000".parse().unwrap();
        // Received on the daemon's socket, or handed on by another engine: to the owner.
        assert!(f.forward(from, 3, &bth(0x1001), None));
        assert!(f.forward(from, 0, &bth(0x1002), Some(8)));
        // Handed on by the owner itself (it gave the QPN back): lost.
        assert!(f.forward(from, 0, &bth(0x1003), Some(7)));
        // Nobody's (the daemon's QPs, QP1, quarantined QPNs): the daemon's engine takes it.
        assert!(!f.forward(from, 0, &bth(0x2000), None));
        assert!(!f.forward(from, 0, &[0u8; 4], None));
        let got: Vec<_> = queue
            .iter()
            .map(|f| (f.owner, f.index, f.data.len()))
            .collect();
        assert_eq!(got, [(7, 3, 12), (7, 0, 12)]);
        assert_eq!(lost, 1);
    }
}
