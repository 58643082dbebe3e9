//! The devices a host's daemon runs: HCAs on emulated IB cables, and RoCEv2 devices on an IP
//! address (`softib link add NAME type rxe netdev IFACE`).
//!
//! Both are an engine over shared memory with a link; what differs is the framing (LRH/VCRC
//! and the SMA on IB; IP/UDP with the ICRC over the kernel's headers on RoCEv2), how a port
//! becomes Active (the SM on IB; the interface's operational state on RoCE), and QP0/QP1,
//! which only IB ports have.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::rc::Rc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use serde::{Deserialize, Serialize};
use softib_engine::{Hca, HcaConfig, Instant, PortAttr, RxMeta};
use softib_fabric::SmaEvent;
use softib_net::cable::{Cable, CableEvent, CableRecv};
use softib_net::fault::{FaultSpec, FaultStats, Faults};
use softib_net::pcap::{PcapWriter, LINKTYPE_INFINIBAND, LINKTYPE_RAW};
use softib_net::shm::SharedRegion;
use softib_net::{RxBatch, TxQueue, UdpLink};
use softib_wire::{Gid, Guid, Lid, Mtu};

use crate::ib::{IbCa, MadIn};
use crate::proto::{DeviceInfo, PortInfo};
use crate::roce;
use crate::shm_memory::ShmMemory;
use softib_wire::crc::ICRC_LEN;

/// A RoCEv2 device as `softib link add` configures it (and as the daemon persists it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Device name (`rxe0`).
    pub name: String,
    /// The network interface it is bound to (`eth0`, `lo`).
    pub netdev: String,
    /// The address it sends from and listens on.
    pub addr: IpAddr,
    /// The UDP port (4791 unless a test needs another).
    pub udp_port: u16,
}

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
}

/// A RoCEv2 device.
pub(crate) struct RoceDev {
    pub config: LinkConfig,
    pub hca: Hca<ShmMemory>,
    pub link: UdpLink,
    pub ready: bool,
    /// Whether the interface is up (the port is Active).
    pub up: bool,
    next_check: StdInstant,
    /// Datagrams dropped for a bad ICRC or a short length.
    pub rx_bad: u64,
    /// What the kernel dropped because the socket's receive buffer was full, as it counts it
    /// (`SO_RXQ_OVFL`: a datagram, or a whole GSO run of up to 64, counts once). RC recovers
    /// them by retransmission; UD loses them, as on a congested wire.
    pub rx_overflow: u64,
    /// Packets the engine built that could not be sent (no GRH, unreachable).
    pub tx_dropped: u64,
    /// Injected faults on egress, per (source key — the UDP source port and whether the
    /// packet goes in-process —, destination).
    pub faults: Faults<(SrcKey, SocketAddr)>,
    /// `softib capture`: every datagram sent or received, with its IP and UDP headers.
    pub capture: Option<PcapWriter>,
    /// Sockets bound to the UDP source ports rxe derives per QP (see [`rxe_source_port`]);
    /// everything is received on `link` (destination port 4791).
    src_links: std::collections::BTreeMap<u16, UdpLink>,
    /// Source ports that could not be bound (taken, or too many sockets): sent from `link`.
    src_refused: std::collections::BTreeSet<u16>,
    /// A turn's datagrams, by source key, sent together at its end (`softib_net::batch`).
    tx: TxQueue<SrcKey>,
    /// Re-seals datagrams for the IPv4 Identification their place in a GSO run gives them.
    ident: roce::IdentPatch,
    /// Receive slots (made on first use: 1 MiB).
    rx: Option<Box<RxBatch>>,
    /// Whether the last packet sent was for a device of this daemon (where to build the next).
    last_local: bool,
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

/// The UDP source port the Linux rxe driver (6.1) uses for a packet of QP `lqpn`: for a
/// connected QP the port `rdma_get_udp_sport` derives from the path's flow label, or from the
/// two QP numbers (`udp_source_port`); for UD, 0xC000 plus the 14-bit `hash_32` of the QPN it
/// gives every QP at creation. Checked against the source ports in rxe's own captures.
pub fn rxe_source_port(ud: bool, flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    if ud {
        const GOLDEN_RATIO_32: u32 = 0x61C8_8647;
        0xC000 | ((lqpn.wrapping_mul(GOLDEN_RATIO_32) >> 18) & 0x3FFF) as u16
    } else {
        roce::udp_source_port(flow_label, lqpn, rqpn)
    }
}

/// Frames on cables whose both ends live in this process, by the receiving end's address.
///
/// A fabric daemon hosts many nodes; a frame from one of its cable ends to another is handed
/// over here instead of through the kernel's UDP stack. The cable itself is unchanged — its
/// beacons still travel over UDP, so training, link state and a pulled cable behave exactly as
/// across processes — only the frames skip two system calls each.
#[derive(Debug, Default)]
pub struct Switchboard {
    queues: std::collections::BTreeMap<SocketAddr, std::collections::VecDeque<Vec<u8>>>,
    pending: usize,
    /// RoCEv2 datagrams between this process's own RoCE devices.
    pub roce: LocalRoce,
}

/// RoCEv2 datagrams between the RoCE devices of one daemon, handed over in-process.
///
/// Two QPs on devices of the same daemon (the intra-host case: `rxe0` and `rxe1` on `lo`, or
/// two QPs of one device) would otherwise cross the kernel's UDP stack twice per datagram
/// (send, then receive) and wait for the loop to wake on the socket. Here a device's queued
/// datagrams for an address of this daemon go straight to that device's inbound queue, which
/// it takes at its next receive, as if from its socket: the same ICRC check, capture, counters
/// and faults (faults act before the queue). Nothing is allocated in the steady state.
#[derive(Debug, Default)]
pub struct LocalRoce {
    /// The devices' addresses (refreshed every turn).
    ends: Vec<SocketAddr>,
    /// The waiting datagrams' bytes, one after another; the first `used` are taken by them.
    /// A sender builds its next packet right after them ([`LocalRoce::space`]), so a
    /// datagram for a local device is never copied between its making and its receipt.
    data: Vec<u8>,
    used: usize,
    items: Vec<LocalItem>,
    pending: usize,
}

/// A payload handed over as it lies: `len` bytes at `off` of a client's shared buffer.
#[derive(Debug, Clone)]
pub struct LocalPayload {
    map: Rc<SharedRegion>,
    off: usize,
    len: usize,
}

impl LocalPayload {
    fn bytes(&self) -> &[u8] {
        // In bounds: `ShmMemory::borrow` checked it against this mapping.
        self.map
            .as_slice()
            .get(self.off..self.off + self.len)
            .unwrap_or(&[])
    }
}

/// A datagram waiting in [`LocalRoce`].
#[derive(Debug, Clone)]
struct LocalItem {
    from: SocketAddr,
    to: SocketAddr,
    /// Its index in its GSO run (the IPv4 Identification it is sealed for).
    index: u16,
    off: usize,
    len: usize,
    /// Whether it carries its ICRC (see `RoceDev::trust_local`).
    sealed: bool,
    /// Its sender said it goes in-process (`Transmit::in_process`), which the receiving
    /// engine is told ([`RxMeta::in_process`]).
    in_process: bool,
    /// The payload, when it was left where it lies (the bytes are then the headers and
    /// room for the ICRC, and it is unsealed).
    payload: Option<LocalPayload>,
    taken: bool,
}

/// Bytes of waiting datagrams past which the arena is compacted even though some still wait.
const LOCAL_COMPACT_BYTES: usize = 8 << 20;

impl LocalRoce {
    /// The addresses of this process's RoCE devices; what waited for an address that is gone
    /// is lost, as datagrams to a vanished host.
    pub fn set_ends<I: Iterator<Item = SocketAddr> + Clone>(&mut self, ends: I) {
        if ends.clone().eq(self.ends.iter().copied()) {
            return;
        }
        self.ends = ends.collect();
        for it in self.items.iter_mut().filter(|i| !i.taken) {
            if !self.ends.contains(&it.to) {
                it.taken = true;
                self.pending -= 1;
            }
        }
        self.tidy();
    }

    /// Whether `to` is a device of this process.
    pub fn is_local(&self, to: &SocketAddr) -> bool {
        self.ends.contains(to)
    }

    /// Room for the next datagram, `n` bytes after the waiting ones: build it here, then
    /// [`LocalRoce::commit_parts`] it (or leave it: the room is reused).
    pub fn space(&mut self, n: usize) -> &mut [u8] {
        if self.data.len() < self.used + n {
            self.data.resize(self.used + n, 0);
        }
        &mut self.data[self.used..self.used + n]
    }

    /// Queues the `len` bytes built in [`LocalRoce::space`] for the device at `to`; with a
    /// `payload`, they are its headers (and room for the ICRC) and the payload stays where it
    /// lies: the receiving device copies it from there (one copy in all).
    #[allow(clippy::too_many_arguments)]
    pub fn commit_parts(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        index: u16,
        len: usize,
        sealed: bool,
        in_process: bool,
        payload: Option<LocalPayload>,
    ) {
        if !self.is_local(&to) || self.data.len() < self.used + len {
            return;
        }
        self.items.push(LocalItem {
            from,
            to,
            index,
            off: self.used,
            len,
            sealed,
            in_process,
            payload,
            taken: false,
        });
        self.used += len;
        self.pending += 1;
    }

    /// Queues a copy of `bytes` for the device at `to`; `sealed`: it carries its ICRC.
    pub fn deliver(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        index: u16,
        bytes: &[u8],
        sealed: bool,
        in_process: bool,
    ) {
        if self.is_local(&to) {
            self.space(bytes.len()).copy_from_slice(bytes);
            self.commit_parts(from, to, index, bytes.len(), sealed, in_process, None);
        }
    }

    /// Hands what waits for the device at `at` to `take` (sender, index, bytes, sealed,
    /// in-process, and the payload when it was left where it lies), in order.
    pub fn drain(
        &mut self,
        at: SocketAddr,
        mut take: impl FnMut(SocketAddr, u16, &[u8], bool, bool, Option<&[u8]>),
    ) {
        if self.pending == 0 {
            return;
        }
        let mut n = 0;
        for it in self.items.iter_mut().filter(|i| !i.taken && i.to == at) {
            take(
                it.from,
                it.index,
                &self.data[it.off..it.off + it.len],
                it.sealed,
                it.in_process,
                it.payload.as_ref().map(LocalPayload::bytes),
            );
            it.taken = true;
            // The mapping is released now, not when the arena is next tidied.
            it.payload = None;
            n += 1;
        }
        self.pending -= n;
        self.tidy();
    }

    /// Frees the room of taken datagrams: all of it once nothing waits (the usual case, every
    /// turn), else by moving the waiting ones to the front once they hold too much.
    fn tidy(&mut self) {
        if self.pending == 0 {
            self.items.clear();
            self.used = 0;
        } else if self.used > LOCAL_COMPACT_BYTES {
            let mut to = 0;
            self.items.retain(|i| !i.taken);
            for it in self.items.iter_mut() {
                self.data.copy_within(it.off..it.off + it.len, to);
                it.off = to;
                to += it.len;
            }
            self.used = to;
        }
    }
}

impl Switchboard {
    /// Makes `addr` (a cable end of this process) reachable in-process.
    pub fn register(&mut self, addr: SocketAddr) {
        self.queues.entry(addr).or_default();
    }

    /// Sends `frame` on `cable`: in-process when the peer end is here, else over UDP.
    pub fn send(&mut self, cable: &mut Cable, frame: &[u8]) -> io::Result<()> {
        match self.queues.get_mut(&cable.peer_addr()) {
            Some(q) if cable.state() == softib_net::cable::PhysState::LinkUp => {
                q.push_back(frame.to_vec());
                self.pending += 1;
                Ok(())
            }
            // Not up: the cable counts and drops it, as it would any frame.
            _ => cable.send(frame),
        }
    }

    /// The frames waiting for the cable end at `local`.
    pub fn take(&mut self, local: SocketAddr) -> std::collections::VecDeque<Vec<u8>> {
        match self.queues.get_mut(&local) {
            Some(q) if !q.is_empty() => {
                self.pending -= q.len();
                std::mem::take(q)
            }
            _ => std::collections::VecDeque::new(),
        }
    }

    /// Whether frames are waiting anywhere.
    pub fn is_busy(&self) -> bool {
        self.pending > 0 || self.roce.pending > 0
    }
}

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

    pub fn hca_mut(&mut self) -> &mut Hca<ShmMemory> {
        match self {
            Device::Ib(d) => d.ca.hca_mut(),
            Device::Roce(d) => &mut d.hca,
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

    /// The next MAD for local agents (IB only).
    pub fn poll_mad(&mut self) -> Option<MadIn> {
        match self {
            Device::Ib(d) => d.ca.poll_mad(),
            Device::Roce(_) => None,
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
            Device::Roce(d) => (d.hca.poll_timeout(), Some(d.next_check)),
        }
    }

    /// Hands each socket to wait on to `f`, with an index [`Device::mark_ready`] understands.
    pub fn each_socket<'a>(&'a self, mut f: impl FnMut(usize, &'a UdpSocket)) {
        match self {
            Device::Ib(d) => {
                for (p, c) in d.cables.iter().enumerate() {
                    if let Some(c) = c {
                        f(p, c.socket());
                    }
                }
            }
            Device::Roce(d) => f(0, d.link.socket()),
        }
    }

    pub fn mark_ready(&mut self, index: usize) {
        match self {
            Device::Ib(d) => {
                if let Some(r) = d.ready.get_mut(index) {
                    *r = true;
                }
            }
            Device::Roce(d) => d.ready = true,
        }
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
            events.extend(cable.poll(std_now));
            for frame in sb.take(cable.local_addr()) {
                if cable.state() == softib_net::cable::PhysState::LinkUp {
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
        SmaEvent::LinkDown { port } => {
            if let Some(Some(c)) = cables.get_mut(usize::from(port)) {
                c.set_enabled(false, now);
                c.set_enabled(true, now);
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

/// What the host knows about a network interface.
#[derive(Debug, Clone)]
pub struct Netdev {
    /// Up (or "unknown", as `lo` reports): the RoCE port is Active.
    pub up: bool,
    /// The MAC address (zeros for `lo`).
    pub mac: [u8; 6],
    /// The interface MTU.
    pub mtu: u32,
}

/// Reads an interface's state from sysfs; an error names the interface that does not exist.
pub fn netdev(name: &str) -> io::Result<Netdev> {
    let base = std::path::Path::new("/sys/class/net").join(name);
    if name.contains('/') || !base.exists() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no network interface {name} (see `ip link`)"),
        ));
    }
    let read = |f: &str| std::fs::read_to_string(base.join(f)).unwrap_or_default();
    let oper = read("operstate");
    let oper = oper.trim();
    let mut mac = [0u8; 6];
    for (i, part) in read("address").trim().split(':').take(6).enumerate() {
        mac[i] = u8::from_str_radix(part, 16).unwrap_or(0);
    }
    Ok(Netdev {
        up: oper == "up" || oper == "unknown",
        mac,
        mtu: read("mtu").trim().parse().unwrap_or(1500),
    })
}

/// Whether interface `name` is operationally up (one read of its `operstate`: what the
/// periodic check of a RoCE port needs, cheaply). An interface that is gone is down.
pub fn netdev_up(name: &str) -> bool {
    if name.contains('/') {
        return false;
    }
    let path = std::path::Path::new("/sys/class/net")
        .join(name)
        .join("operstate");
    std::fs::read_to_string(path).is_ok_and(|s| matches!(s.trim(), "up" | "unknown"))
}

/// The EUI-64 from a MAC (the universal/local bit flipped), as rxe makes its GUID.
pub fn eui64(mac: [u8; 6]) -> Guid {
    let b = [
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ];
    Guid(u64::from_be_bytes(b))
}

/// The largest IB MTU that fits an Ethernet MTU after IP, UDP, BTH and ICRC (rxe's
/// `eth_mtu_int_to_enum`: 1500 → 1024, 9000 → 4096).
pub fn ib_mtu_for(eth_mtu: u32) -> Mtu {
    let room = eth_mtu.saturating_sub(20 + 8 + 12 + 4 + 28);
    match room {
        r if r >= 4096 => Mtu::Mtu4096,
        r if r >= 2048 => Mtu::Mtu2048,
        r if r >= 1024 => Mtu::Mtu1024,
        r if r >= 512 => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// Queues one RoCEv2 datagram (sealed for IPv4 Identification 0) to leave from `local`, seals
/// it for the Identification its place in a GSO run will give it, and captures it.
#[allow(clippy::too_many_arguments)]
fn queue_datagram(
    tx: &mut TxQueue<SrcKey>,
    ident: &mut roce::IdentPatch,
    cap: &mut Option<PcapWriter>,
    gso: bool,
    local: SocketAddr,
    in_process: bool,
    to: SocketAddr,
    frame: &[u8],
) {
    let key = SrcKey {
        port: local.port(),
        in_process,
    };
    let (index, stored) = tx.push(key, to, frame, gso);
    finish_datagram(ident, cap, local, to, index, stored);
}

/// Seals a queued datagram for the IPv4 Identification its place (`index`) in a GSO run will
/// give it, and captures it.
fn finish_datagram(
    ident: &mut roce::IdentPatch,
    cap: &mut Option<PcapWriter>,
    local: SocketAddr,
    to: SocketAddr,
    index: u16,
    stored: &mut [u8],
) {
    let index = if local.is_ipv4() { index } else { 0 };
    ident.apply(stored, index);
    if cap.is_some() {
        if let Some(d) = roce::datagram(local, to, stored, index) {
            capture(cap, &d);
        }
    }
}

/// What a queued datagram is keyed by: the source port it leaves from (its socket), and
/// whether its sender said it goes in-process (kept for a device of this daemon that takes
/// it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrcKey {
    port: u16,
    in_process: bool,
}

/// A device's view of [`LocalRoce`] when it sends: from its address, by source port.
struct FromAddr<'a> {
    local: &'a mut LocalRoce,
    ip: IpAddr,
    /// Whether the datagrams for local devices carry their ICRC.
    sealed: bool,
}

impl softib_net::batch::Loopback<SrcKey> for FromAddr<'_> {
    fn is_local(&self, to: &SocketAddr) -> bool {
        self.local.is_local(to)
    }

    fn deliver(&mut self, key: SrcKey, to: SocketAddr, index: u16, bytes: &[u8]) {
        self.local.deliver(
            SocketAddr::new(self.ip, key.port),
            to,
            index,
            bytes,
            self.sealed,
            key.in_process,
        );
    }
}

/// What a RoCE device does with a datagram it received (from its socket or in-process).
struct RxPath<'a> {
    hca: &'a mut Hca<ShmMemory>,
    capture: &'a mut Option<PcapWriter>,
    rx_bad: &'a mut u64,
    name: &'a str,
    local: SocketAddr,
    now: Instant,
}

impl RxPath<'_> {
    /// Captures, checks the ICRC (for the IPv4 Identification `index` first: its place in a
    /// GSO run) and hands the packet to the engine; returns whether it was taken.
    /// `in_process`: it came from a device of this daemon, with its payload apart when
    /// `payload` is set (then `data` is the headers and room for the ICRC, unsealed).
    fn accept(
        &mut self,
        from: SocketAddr,
        index: u16,
        data: &[u8],
        sealed: bool,
        in_process: bool,
        payload: Option<&[u8]>,
    ) -> bool {
        let index = if from.is_ipv4() { index } else { 0 };
        if self.capture.is_some() {
            let d = if sealed {
                roce::datagram(from, self.local, data, index)
            } else {
                // What the wire would have carried.
                let mut c = data.to_vec();
                if let Some(p) = payload {
                    let at = c.len().saturating_sub(ICRC_LEN);
                    let pad = usize::from(softib_wire::packet::pad_for(p.len()));
                    c.splice(at..at, p.iter().copied().chain(std::iter::repeat_n(0, pad)));
                }
                let body = c.len().saturating_sub(ICRC_LEN);
                roce::seal(from, self.local, &mut c, body);
                roce::IdentPatch::default().apply(&mut c, index);
                roce::datagram(from, self.local, &c, index)
            };
            if let Some(d) = d {
                capture(self.capture, &d);
            }
        }
        let checked = if sealed {
            roce::open_hinted(from, self.local, data, index)
        } else {
            // In-process from a device of this daemon with no fault or capture in between:
            // nothing could have changed it.
            data.get(..data.len().saturating_sub(ICRC_LEN))
                .filter(|b| b.len() >= 12)
                .ok_or(roce::RxError::TooShort)
        };
        match checked {
            Ok(body) => {
                // Only UD receives (and UD multicast) use the GRH area: RC and UC skip
                // building it (the opcode's top three bits name the transport).
                let ud = body.first().is_some_and(|b| b >> 5 == 0b011);
                let meta = RxMeta {
                    grh: if ud {
                        roce::grh_area(from, self.local, data.len())
                    } else {
                        None
                    },
                    // RoCE has no SL on the wire. A UD completion's SL says what the GRH
                    // area holds instead, as ConnectX reports it (bit 3: a UDP header, bits
                    // 2:0: 1 IPv6, 2 IPv4) and UCX reads it to find the destination GID.
                    sl: match (ud, from) {
                        (true, SocketAddr::V4(_)) => 0b1010,
                        (true, SocketAddr::V6(_)) => 0b1001,
                        (false, _) => 0,
                    },
                    in_process,
                    ..RxMeta::default()
                };
                match payload {
                    Some(p) => self.hca.handle_packet_parts(self.now, 1, &meta, body, p),
                    None => self.hca.handle_packet(self.now, 1, &meta, body),
                }
                true
            }
            Err(e) => {
                *self.rx_bad += 1;
                if std::env::var_os("SOFTIB_DEBUG").is_some() {
                    eprintln!("{}: dropped a datagram from {from}: {e:?}", self.name);
                }
                false
            }
        }
    }
}

impl RoceDev {
    /// A RoCEv2 device on `config`'s address; fails with a message naming what is wrong.
    pub fn new(config: LinkConfig, seed: u64) -> io::Result<RoceDev> {
        let nd = netdev(&config.netdev)?;
        let local = SocketAddr::new(config.addr, config.udp_port);
        let link = UdpLink::bind_with(local, true).map_err(|e| {
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
        let guid = if nd.mac == [0; 6] {
            let ip = match config.addr {
                IpAddr::V4(a) => a.octets().to_vec(),
                IpAddr::V6(a) => a.octets().to_vec(),
            };
            let n = ip.len();
            eui64([0, 0, 0, ip[n - 3], ip[n - 2], ip[n - 1]])
        } else {
            eui64(nd.mac)
        };
        let mut hc = HcaConfig::with_seed(seed);
        hc.device.node_guid = guid;
        hc.device.sys_image_guid = guid;
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        link_local[8..].copy_from_slice(&guid.0.to_be_bytes());
        hc.ports = vec![PortAttr {
            max_mtu: Mtu::Mtu4096,
            active_mtu: ib_mtu_for(nd.mtu),
            lid: Lid(0),
            gids: vec![Gid(link_local), roce::gid_of(config.addr)],
            pkeys: vec![softib_wire::PKey::DEFAULT],
            active: nd.up,
        }];
        Ok(RoceDev {
            hca: Hca::new(hc, ShmMemory::new()),
            link,
            ready: true,
            up: nd.up,
            next_check: StdInstant::now() + OPERSTATE_EVERY,
            rx_bad: 0,
            rx_overflow: 0,
            tx_dropped: 0,
            faults: Faults::default(),
            capture: None,
            src_links: std::collections::BTreeMap::new(),
            src_refused: std::collections::BTreeSet::new(),
            tx: TxQueue::new(),
            ident: roce::IdentPatch::default(),
            rx: None,
            last_local: false,
            config,
        })
    }

    fn local(&self) -> SocketAddr {
        self.link.local_addr()
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
                let _ = self.hca.set_port_active(1, up);
            }
        }
        let mut busy = false;
        let local = self.local();
        let mut rx = RxPath {
            hca: &mut self.hca,
            capture: &mut self.capture,
            rx_bad: &mut self.rx_bad,
            name: &self.config.name,
            local,
            now,
        };
        // From this daemon's other devices (or this one) first: they were sent earlier.
        local_in.drain(local, |from, index, data, sealed, in_process, payload| {
            busy |= rx.accept(from, index, data, sealed, in_process, payload)
        });
        if self.ready {
            self.ready = false;
            let batch = self.rx.get_or_insert_with(|| Box::new(RxBatch::new()));
            // At most 16 calls a turn, so that sending and the clients get their turn too.
            for call in 0..16 {
                if self.link.recv_batch(batch)? == 0 {
                    break;
                }
                // Cut short (larger than a slot) or not from an IP address.
                *rx.rx_bad += batch.malformed() as u64;
                if let Some(n) = batch.overflows() {
                    self.rx_overflow = self.rx_overflow.max(u64::from(n));
                }
                for dg in batch.datagrams() {
                    busy |= rx.accept(dg.from, dg.index, dg.data, true, false, None);
                }
                if call == 15 {
                    self.ready = true;
                    busy = true;
                }
            }
        }
        self.hca.handle_timeout(now);
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
                sealed: !self.trust_local(),
            },
        );
        self.tx_dropped += out.dropped;
    }

    /// Queues what the engine has to send (and delayed frames whose time has come); returns
    /// whether more may be waiting.
    fn queue_transmit(&mut self, now: Instant, buf: &mut [u8], local_out: &mut LocalRoce) -> bool {
        let local = self.local();
        let (link, srcs, tx, ident, cap) = (
            &self.link,
            &self.src_links,
            &mut self.tx,
            &mut self.ident,
            &mut self.capture,
        );
        let _ = self
            .faults
            .poll(StdInstant::now(), |(key, to), frame| -> Result<(), ()> {
                let from = SocketAddr::new(local.ip(), key.port);
                let gso = srcs.get(&key.port).unwrap_or(link).gso();
                queue_datagram(tx, ident, cap, gso, from, key.in_process, to, frame);
                Ok(())
            });
        let mut sent = 0;
        let trust_local = self.trust_local();
        let faults_idle = self.faults.is_idle();
        let fault_now = StdInstant::now();
        let room = buf.len();
        // Each packet is built where it will most likely wait — in the in-process queue's free
        // room when the previous one was for a device of this daemon, else in the send
        // queue's — so that it is queued where it lies; a wrong guess costs one copy.
        loop {
            let built_local = self.last_local;
            let t = if built_local {
                self.hca.poll_transmit(now, local_out.space(room))
            } else {
                self.hca.poll_transmit(now, self.tx.space(room))
            };
            let Some(mut t) = t else { break };
            let Some(grh) = t.av.grh else {
                // RoCE is routed by GID: an address vector without a GRH goes nowhere.
                self.tx_dropped += 1;
                if std::env::var_os("SOFTIB_DEBUG").is_some() {
                    eprintln!(
                        "{}: a packet without a GRH cannot be routed",
                        self.config.name
                    );
                }
                continue;
            };
            let dst = SocketAddr::new(roce::ip_of(&grh.dgid), self.config.udp_port);
            self.last_local = local_out.is_local(&dst);
            let straight = trust_local && self.last_local;
            if t.in_process != self.last_local {
                // The engine learns where an RC QP's packets really go (it ignores this for
                // UC and UD): to a device of this daemon, its later messages go in large
                // segments and its payloads by reference.
                let rc = {
                    let pkt: &[u8] = if built_local {
                        local_out.space(room)
                    } else {
                        self.tx.space(room)
                    };
                    pkt[0] >> 5 == 0
                };
                if rc {
                    self.hca.set_in_process(t.src_qpn, self.last_local);
                }
            }
            // A payload left in memory is handed over as it lies to a device of this daemon
            // when nothing stands between (the receiving device copies it from the sender's
            // buffer into its own client's: one copy in all); otherwise it is carried whole.
            let mut handed = None;
            if let Some(p) = t.payload {
                if straight {
                    handed = self
                        .hca
                        .memory()
                        .borrow(p.region, p.addr, p.len as usize)
                        .map(|(map, off)| LocalPayload {
                            map,
                            off,
                            len: p.len as usize,
                        });
                }
                if handed.is_none() {
                    let at: &mut [u8] = if built_local {
                        local_out.space(room)
                    } else {
                        self.tx.space(room)
                    };
                    if !self.hca.materialize(&mut t, at) {
                        self.tx_dropped += 1;
                        continue;
                    }
                }
            }
            let (op, rq) = {
                let pkt: &[u8] = if built_local {
                    local_out.space(room)
                } else {
                    self.tx.space(room)
                };
                (pkt[0], [0, pkt[5], pkt[6], pkt[7]])
            };
            // The QP's own source port, as rxe sends from (the BTH says UD or not, and to
            // which QP).
            let ud = t.len >= 8 && op & 0xE0 == 0x60;
            let want = rxe_source_port(
                ud,
                grh.flow_label,
                t.src_qpn.value(),
                u32::from_be_bytes(rq),
            );
            let port = self.source_socket(want);
            let local = SocketAddr::new(self.local().ip(), port);
            let unsealed = t.len + ICRC_LEN;
            if unsealed > room {
                self.tx_dropped += 1;
                continue;
            }
            if straight {
                // Unsealed (see `trust_local`; the receiver knows not to check): no fault or
                // capture stands between, so the ICRC would buy nothing.
                if built_local {
                    local_out.space(room)[t.len..unsealed].fill(0);
                    local_out.commit_parts(local, dst, 0, unsealed, false, t.in_process, handed);
                } else {
                    let pkt = self.tx.space(room);
                    pkt[t.len..unsealed].fill(0);
                    local_out.space(unsealed).copy_from_slice(&pkt[..unsealed]);
                    local_out.commit_parts(local, dst, 0, unsealed, false, t.in_process, handed);
                }
            } else if !built_local && faults_idle {
                // Sealed and queued where it lies.
                let Some(len) = roce::seal(local, dst, self.tx.space(room), t.len) else {
                    self.tx_dropped += 1;
                    continue;
                };
                let gso = self.src_links.get(&port).unwrap_or(&self.link).gso();
                let key = SrcKey {
                    port,
                    in_process: t.in_process,
                };
                let (index, stored) = self.tx.commit(key, dst, len, gso);
                finish_datagram(
                    &mut self.ident,
                    &mut self.capture,
                    local,
                    dst,
                    index,
                    stored,
                );
            } else {
                // Through the faults (which may hold, repeat or change it), from a copy.
                let pkt: &mut [u8] = if built_local {
                    local_out.space(room)
                } else {
                    buf[..unsealed].copy_from_slice(&self.tx.space(room)[..unsealed]);
                    &mut buf[..]
                };
                let Some(len) = roce::seal(local, dst, pkt, t.len) else {
                    self.tx_dropped += 1;
                    continue;
                };
                let frame = &pkt[..len];
                let (link, srcs, tx, ident, cap) = (
                    &self.link,
                    &self.src_links,
                    &mut self.tx,
                    &mut self.ident,
                    &mut self.capture,
                );
                let gso = srcs.get(&port).unwrap_or(link).gso();
                let key = SrcKey {
                    port,
                    in_process: t.in_process,
                };
                let _ = self.faults.apply(
                    fault_now,
                    (key, dst),
                    frame,
                    |(key, to), frame| -> Result<(), ()> {
                        queue_datagram(tx, ident, cap, gso, local, key.in_process, to, frame);
                        Ok(())
                    },
                );
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
        let attr = self.hca.port(1);
        let guid = self.hca.device().node_guid;
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
            attr: self.hca.device().clone(),
            ports: vec![PortInfo {
                number: 1,
                state: if self.up { 4 } else { 1 },
                phys_state: if self.up { 5 } else { 3 },
                rate: 10,
                width: 1,
                speed: 8,
                lid: Lid(0),
                lmc: 0,
                sm_lid: Lid(0),
                capability_mask: 0x0001_0000,
                port_guid: guid,
                link_layer_ib: false,
                max_mtu: attr.map_or(Mtu::Mtu4096, |a| a.max_mtu),
                active_mtu: attr.map_or(Mtu::Mtu1024, |a| a.active_mtu),
                gids: attr.map_or_else(Vec::new, |a| a.gids.clone()),
            }],
            drops: {
                let mut d = drops(&self.hca);
                // Datagrams that never reached the engine: too short, or a bad ICRC.
                if self.rx_bad > 0 {
                    d.push(("bad_datagram".to_string(), self.rx_bad));
                }
                if self.rx_overflow > 0 {
                    d.push(("rcvbuf_overflow".to_string(), self.rx_overflow));
                }
                d
            },
            verbs: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_handed_over_as_it_lies_reaches_the_receiver_and_is_released_there() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        );
        let mut l = LocalRoce::default();
        l.set_ends([a, b].into_iter());
        let mut map = SharedRegion::create("softib-test-payload", 4096).unwrap();
        map.as_mut_slice()[100..105].copy_from_slice(b"hello");
        let map = Rc::new(map);
        l.space(16)[..4].copy_from_slice(b"hdr!");
        let payload = LocalPayload {
            map: Rc::clone(&map),
            off: 100,
            len: 5,
        };
        l.commit_parts(a, b, 0, 4, false, true, Some(payload));
        assert_eq!(Rc::strong_count(&map), 2);
        let mut got = Vec::new();
        l.drain(b, |_, _, d, sealed, in_process, p| {
            got.push((d.to_vec(), sealed, in_process, p.map(<[u8]>::to_vec)))
        });
        assert_eq!(
            got,
            [(b"hdr!".to_vec(), false, true, Some(b"hello".to_vec()))]
        );
        // The mapping is let go as soon as the receiver has taken the payload.
        assert_eq!(Rc::strong_count(&map), 1);
    }

    #[test]
    fn local_datagrams_wait_for_their_device_in_order_and_their_room_is_reused() {
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
            "127.0.0.9:4791".parse().unwrap(),
        );
        let mut l = LocalRoce::default();
        l.set_ends([a, b].into_iter());
        assert!(l.is_local(&a) && !l.is_local(&c));
        // Built in place and committed, or copied in; one for an unknown address is dropped.
        l.space(64)[..3].copy_from_slice(b"one");
        l.commit_parts(a, b, 0, 3, false, false, None);
        l.deliver(b, a, 1, b"two", true, false);
        l.deliver(a, b, 2, b"three", true, false);
        l.deliver(a, c, 0, b"lost", true, false);
        assert_eq!(l.pending, 3);
        let mut got = Vec::new();
        l.drain(b, |from, i, d, sealed, _, _| {
            got.push((from, i, d.to_vec(), sealed))
        });
        assert_eq!(
            got,
            [
                (a, 0, b"one".to_vec(), false),
                (a, 2, b"three".to_vec(), true)
            ]
        );
        assert_eq!((l.pending, l.used), (1, 11));
        // Once nothing waits, all the room is free again.
        l.drain(a, |_, _, d, _, _, _| assert_eq!(d, b"two"));
        assert_eq!((l.pending, l.used, l.items.len()), (0, 0, 0));
        // A device that goes away loses what waited for it.
        l.deliver(a, b, 0, b"x", true, false);
        l.set_ends([a].into_iter());
        assert_eq!((l.pending, l.used), (0, 0));
        // Past the compaction size, waiting datagrams move to the front.
        l.set_ends([a, b].into_iter());
        let big = vec![7u8; LOCAL_COMPACT_BYTES / 2 + 1];
        l.deliver(a, b, 0, &big, true, false);
        l.deliver(a, b, 0, &big, true, false);
        l.deliver(b, a, 0, b"keep", true, false);
        l.drain(b, |_, _, _, _, _, _| {});
        assert_eq!((l.pending, l.used), (1, 4));
        l.drain(a, |_, _, d, _, _, _| assert_eq!(d, b"keep"));
    }

    #[test]
    fn source_ports_are_the_ones_rxe_sends_from() {
        // ../shared/captures/rxe: ibv_rc_pingpong between QPs 0x1b and 0x1b went from port
        // 49881 both ways; ibv_ud_pingpong's QP 0x1c sent from 60539.
        assert_eq!(rxe_source_port(false, 0, 0x1b, 0x1b), 49881);
        assert_eq!(rxe_source_port(true, 0, 0x1c, 0x1c), 60539);
        for q in [1u32, 0x1c, 0xff_ffff] {
            assert!(rxe_source_port(true, 0, q, 0) >= 0xC000);
        }
    }
}
