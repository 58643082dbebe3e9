//! The `roce` module deals with *one device's engine on a RoCEv2 link*: [`RoceCa`] turns the
//! engine's packets into UDP datagrams and received datagrams back into packets, sans-IO.
//!
//! # What a `RoceCa` decides, and what it leaves to its embedder
//!
//! It decides everything that is RoCEv2: where a packet goes (the IP address of its path's
//! destination GID, the peers' UDP port), the UDP source port rxe would use for its QP
//! ([`framing::rxe_source_port`]), the ICRC over the headers the kernel will write, sealed for
//! the IPv4 Identification a datagram's place in its GSO run will give it, which QPs talk to a
//! peer in this process (decided once per QP, when it gets its path at RTR), and which received
//! datagrams the engine never sees (counted by reason in [`RoceDrops`]).
//!
//! Its embedder — the daemon (`softib-hca`), a process's provider, the simulator, the test
//! [`crate::driver`] — owns the sockets (or the simulated network), the clock and the queues:
//! it gives `RoceCa` the room to build each datagram in, queues it (a
//! [`softib_net::TxQueue`] keyed by [`SrcKey`], whose runs are GSO sends), sends it, and hands
//! every received datagram to [`RoceCa::handle_datagram`].
//!
//! # Polling order (quinn's)
//!
//! 1. Inputs: [`RoceCa::handle_datagram`] for each received datagram, [`RoceCa::handle_timeout`]
//!    once the engine's deadline has passed (early or spurious calls are harmless).
//! 2. Commands: verbs on [`RoceCa::hca_mut`], except that a QP's attributes change through
//!    [`RoceCa::modify_qp`] (where the in-process decision is made); [`RoceCa::set_local_peers`]
//!    and [`RoceCa::set_trust_local`] whenever what they describe changes.
//! 3. Outputs: [`RoceCa::poll_transmit`] until it returns `None`. Each datagram it returns lies
//!    in one of the two rooms given; seal and queue it ([`RoceCa::commit`]), seal it
//!    ([`RoceCa::seal`]) to hold it back or copy it, or hand it to a local peer as it is, before
//!    the next call: the rooms are reused. Then send the queue, and ask
//!    [`RoceCa::poll_timeout`] for the next deadline.
//!
//! Time only comes in as `now`; nothing here reads a clock, opens a socket, blocks or spawns.

pub mod framing;
pub mod gsi;

#[cfg(test)]
mod tests;

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use softib_engine::hash::FixedState;
use softib_engine::verbs::{AsyncEvent, QpState, QpType};
use softib_engine::{AttrMask, Hca, Instant, Memory, QpAttr, RxMeta, Transmit, VerbsError};
use softib_net::TxQueue;
use softib_wire::crc::ICRC_LEN;
use softib_wire::mad::MAD_LEN;
use softib_wire::opcode::Transport;
use softib_wire::{Gid, Opcode, Psn, Qpn};

pub use gsi::GsiIn;

/// GMPs queued for QP1's agents (or to send) beyond this are dropped and counted.
const MAX_GSI_QUEUE: usize = 1024;

pub use framing::Senders;
use framing::{IdentPatch, RxError};

/// The length of a BTH, the shortest transport header.
const BTH_LEN: usize = softib_wire::bth::HEADER_LEN;

/// How a RoCEv2 device is addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceConfig {
    /// The device's address: the IP address it sends from and the UDP port it receives on
    /// (4791).
    pub addr: SocketAddr,
    /// The UDP port its peers receive on (4791; tests use another).
    pub peer_port: u16,
    /// Who may send to it: anyone (rxe and RoCE NICs too), or only softib where every
    /// datagram's run index reaches the receiver as sent (the simulator), see
    /// [`framing::Senders`].
    pub senders: Senders,
}

impl RoceConfig {
    /// A device at `addr` whose peers receive on the same port, taking datagrams from anyone.
    pub fn new(addr: SocketAddr) -> RoceConfig {
        RoceConfig {
            addr,
            peer_port: addr.port(),
            senders: Senders::Any,
        }
    }
}

/// What a queued datagram is keyed by: the UDP source port it leaves from (its socket), and
/// whether its sender said it goes in-process (kept for a local peer that takes it from the
/// queue, which passes it on as [`RxMeta::in_process`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrcKey {
    /// The UDP source port.
    pub port: u16,
    /// The packet goes in-process ([`Transmit::in_process`]).
    pub in_process: bool,
}

/// A datagram [`RoceCa::poll_transmit`] built, for its embedder to seal, queue or hand over.
///
/// Its [`RoceTransmit::datagram_len`] bytes lie at the start of the room `local` names: the engine's packet (BTH
/// through pad, or only its headers while [`Transmit::payload`] is set) followed by four zero
/// bytes, the room of the ICRC, which [`RoceCa::commit`] and [`RoceCa::seal`] fill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct RoceTransmit {
    /// What the engine built: its QPs, opcode and address vector, its length, and whether it
    /// goes in-process.
    pub packet: Transmit,
    /// Where it goes: the IP address of the path's destination GID, at the peers' UDP port.
    pub to: SocketAddr,
    /// The UDP source port: rxe's for the QP ([`framing::rxe_source_port`]). An embedder that
    /// cannot send from it puts the port it sends from here before sealing.
    pub src_port: u16,
    /// The destination is a peer the embedder declared local ([`RoceCa::set_local_peers`]): the
    /// datagram lies in the `local` room, else in the `wire` room.
    pub local: bool,
}

impl RoceTransmit {
    /// The datagram's length (its UDP payload): the packet and its ICRC.
    pub fn datagram_len(&self) -> usize {
        self.packet.len + ICRC_LEN
    }

    /// Its queue key.
    pub fn key(&self) -> SrcKey {
        SrcKey {
            port: self.src_port,
            in_process: self.packet.in_process,
        }
    }
}

/// A received datagram, as [`RoceCa::handle_datagram`] takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Incoming<'a> {
    /// The sender's address and UDP port.
    pub from: SocketAddr,
    /// Its index in a run the kernel coalesced (UDP GRO) or its sender queued (0 for one that
    /// came alone): the IPv4 Identification it most likely carried.
    pub index: u16,
    /// The UDP payload: BTH through ICRC — or, with `payload`, the headers and the ICRC's room.
    pub data: &'a [u8],
    /// Whether it carries its ICRC. Only a local peer with nothing between (no capture, no
    /// fault) hands datagrams over unsealed.
    pub sealed: bool,
    /// It came from an engine of this process, which said it goes in-process
    /// ([`Transmit::in_process`]).
    pub in_process: bool,
    /// The payload, when a local peer left it where it lies (then the datagram is unsealed).
    pub payload: Option<&'a [u8]>,
}

impl<'a> Incoming<'a> {
    /// A datagram from a socket: sealed, not in-process, whole.
    pub fn wire(from: SocketAddr, index: u16, data: &'a [u8]) -> Incoming<'a> {
        Incoming {
            from,
            index,
            data,
            sealed: true,
            in_process: false,
            payload: None,
        }
    }
}

/// Why a `RoceCa` dropped a datagram before the engine saw it, or a packet the engine built
/// before it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RoceDrop {
    /// Received: shorter than a BTH and an ICRC.
    TooShort,
    /// Received: the sender's address family is not the device's.
    AddressFamily,
    /// Received: a BTH opcode softib does not implement (RD, XRC, reserved): dropped before
    /// its ICRC is computed, as the engine would drop it after.
    UnsupportedOpcode,
    /// Received: the ICRC does not match (corruption; on IPv4 from softib-only senders, any
    /// Identification but the expected one).
    BadIcrc,
    /// To send: the path has no GRH, and RoCEv2 is routed by GID.
    NoGrh,
    /// To send: the path leads to another address family than the device's.
    TxAddressFamily,
    /// To send: the packet does not fit the room it was given.
    NoRoom,
    /// To send: a payload left in memory could not be read (its region went away).
    PayloadGone,
    /// Received on QP1: not a GMP (not a UD SEND_ONLY, not the GSI Q_Key, too short).
    GsiMalformed,
    /// Received on QP1, or to send from it: the queue was full (no agent reads).
    GsiQueueFull,
    /// Received: the engine's screen of the BTH refused it before its ICRC was computed
    /// (`Hca::screen`; the engine's drop counters say why: unknown QP, wrong transport, QP
    /// not receiving, P_Key, transport version).
    Screened,
}

impl RoceDrop {
    /// Every reason, in declaration order.
    pub const ALL: [RoceDrop; 11] = [
        RoceDrop::TooShort,
        RoceDrop::AddressFamily,
        RoceDrop::UnsupportedOpcode,
        RoceDrop::BadIcrc,
        RoceDrop::NoGrh,
        RoceDrop::TxAddressFamily,
        RoceDrop::NoRoom,
        RoceDrop::PayloadGone,
        RoceDrop::GsiMalformed,
        RoceDrop::GsiQueueFull,
        RoceDrop::Screened,
    ];

    /// A short snake_case name for logs and tools (`softib res`, `DeviceInfo::drops`), in the
    /// order of [`RoceDrop::ALL`].
    const NAMES: [&'static str; 11] = [
        "datagram_too_short",
        "address_family_mismatch",
        "unsupported_opcode",
        "bad_icrc",
        "tx_no_grh",
        "tx_address_family",
        "tx_no_room",
        "tx_payload_gone",
        "gsi_malformed",
        "gsi_queue_full",
        "screened",
    ];

    /// A short snake_case name for logs and tools.
    pub fn name(self) -> &'static str {
        RoceDrop::NAMES[self as usize]
    }
}

impl fmt::Display for RoceDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many datagrams and packets a `RoceCa` dropped, by reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceDrops([u64; RoceDrop::ALL.len()]);

impl Default for RoceDrops {
    fn default() -> RoceDrops {
        RoceDrops([0; RoceDrop::ALL.len()])
    }
}

impl RoceDrops {
    /// Counts `n` drops for `reason`.
    pub fn count(&mut self, reason: RoceDrop, n: u64) {
        self.0[reason as usize] += n;
    }

    /// How many drops for `reason`.
    pub fn get(&self, reason: RoceDrop) -> u64 {
        self.0[reason as usize]
    }

    /// Every reason with a nonzero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (RoceDrop, u64)> + '_ {
        RoceDrop::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }

    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// One device's engine on a RoCEv2 link, sans-IO (see the module docs).
pub struct RoceCa<M: Memory> {
    hca: Hca<M>,
    config: RoceConfig,
    /// The destinations the embedder declared to be engines of this process.
    local_peers: Vec<SocketAddr>,
    /// The QPs whose peer the embedder reaches locally whatever their path's address (a
    /// ring to another process's engine on the same daemon).
    local_qps: HashSet<Qpn, FixedState>,
    /// The UD destinations (device address, QP) the embedder reaches locally (a ring to the
    /// engine that holds the QP).
    local_ud: HashSet<(std::net::IpAddr, Qpn), FixedState>,
    /// Whether nothing between this device and a local peer could see or change a datagram.
    trust_local: bool,
    /// The RC QPs whose in-process flag was decided from their path, to decide again when the
    /// local peers change.
    decided: BTreeSet<Qpn>,
    ident: IdentPatch,
    /// Whether the last datagram went to a local peer: where the next one is built.
    last_local: bool,
    drops: RoceDrops,
    /// GMPs received on QP1, for the embedder's agents.
    gsi_in: VecDeque<GsiIn>,
    /// GMPs to send from QP1: destination GID, QP, MAD.
    gsi_out: VecDeque<(Gid, Qpn, [u8; MAD_LEN])>,
    gsi_psn: u32,
}

impl<M: Memory> RoceCa<M> {
    /// A device running `hca` (whose port 1 is the RoCE port), addressed as `config` says.
    pub fn new(hca: Hca<M>, config: RoceConfig) -> RoceCa<M> {
        RoceCa {
            hca,
            config,
            local_peers: Vec::new(),
            local_qps: HashSet::default(),
            local_ud: HashSet::default(),
            trust_local: false,
            decided: BTreeSet::new(),
            ident: IdentPatch::default(),
            last_local: false,
            drops: RoceDrops::default(),
            gsi_in: VecDeque::new(),
            gsi_out: VecDeque::new(),
            gsi_psn: 0,
        }
    }

    // ---- getters ------------------------------------------------------------------------

    /// The engine.
    pub fn hca(&self) -> &Hca<M> {
        &self.hca
    }

    /// The engine, for every verb but `modify_qp` (which goes through
    /// [`RoceCa::modify_qp`], so that a QP's new path is looked at).
    pub fn hca_mut(&mut self) -> &mut Hca<M> {
        &mut self.hca
    }

    /// How the device is addressed.
    pub fn config(&self) -> &RoceConfig {
        &self.config
    }

    /// What was dropped, by reason.
    pub fn drops(&self) -> &RoceDrops {
        &self.drops
    }

    /// Whether `to` is a peer the embedder declared local.
    pub fn is_local(&self, to: &SocketAddr) -> bool {
        self.local_peers.contains(to)
    }

    // ---- commands -----------------------------------------------------------------------

    /// `ibv_modify_qp`, and where an RC QP's peer is decided: when the QP gets a path (at RTR,
    /// or a new one later), it goes in-process ([`Hca::set_in_process`]) exactly when the
    /// path's destination is a local peer. Once per path: packets never change it.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        self.hca.modify_qp(qpn, attr, mask)?;
        let to_rtr = mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Rtr;
        if to_rtr || mask.contains(AttrMask::AV) {
            self.decide(qpn);
        } else if mask.contains(AttrMask::STATE) && attr.qp_state == QpState::Reset {
            self.decided.remove(&qpn);
            self.local_qps.remove(&qpn);
        }
        Ok(())
    }

    /// Declares which destinations are engines of this process (the devices of this daemon;
    /// the peers a process reaches through its shared-memory rings): datagrams for them come
    /// out with [`RoceTransmit::local`], and RC QPs whose path leads to one go in-process. A
    /// change decides again for every QP with a path; the same set again costs one comparison.
    pub fn set_local_peers<I>(&mut self, peers: I)
    where
        I: IntoIterator<Item = SocketAddr>,
        I::IntoIter: Clone,
    {
        let peers = peers.into_iter();
        if peers.clone().eq(self.local_peers.iter().copied()) {
            return;
        }
        self.local_peers = peers.collect();
        self.last_local = false;
        let qpns: Vec<Qpn> = self.decided.iter().copied().collect();
        for qpn in qpns {
            self.decide(qpn);
        }
    }

    /// Declares that QP `qpn`'s peer is (or is no longer) reached locally whatever its
    /// path's address says — a process engine with a ring to the peer's engine: its
    /// datagrams come out with [`RoceTransmit::local`] and, for RC, it goes in-process, as
    /// with a local peer ([`RoceCa::set_local_peers`]). Forgotten when the QP is reset or
    /// destroyed.
    pub fn set_qp_local(&mut self, qpn: Qpn, local: bool) {
        let changed = if local {
            self.local_qps.insert(qpn)
        } else {
            self.local_qps.remove(&qpn)
        };
        if changed && self.decided.contains(&qpn) {
            self.decide(qpn);
        }
    }

    /// Declares that UD datagrams to QP `dqpn` at device address `to` are (or are no
    /// longer) reached locally: they come out with [`RoceTransmit::local`], unsealed.
    pub fn set_ud_local(&mut self, to: std::net::IpAddr, dqpn: Qpn, local: bool) {
        if local {
            self.local_ud.insert((to, dqpn));
        } else {
            self.local_ud.remove(&(to, dqpn));
        }
    }

    /// Forgets every UD destination declared local ([`RoceCa::set_ud_local`]).
    pub fn clear_ud_local(&mut self) {
        self.local_ud.clear();
    }

    /// Says whether nothing between this device and its local peers (no capture, no fault)
    /// could see or change a datagram. Then an in-process payload is left where it lies for
    /// the embedder to hand over ([`Transmit::payload`]) and such datagrams need no ICRC;
    /// otherwise every packet comes out whole, for sealing.
    pub fn set_trust_local(&mut self, trust: bool) {
        self.trust_local = trust;
    }

    /// Counts drops the embedder saw for the device (a datagram its socket cut short).
    pub fn count_drop(&mut self, reason: RoceDrop, n: u64) {
        self.drops.count(reason, n);
    }

    /// Decides whether RC QP `qpn` goes in-process, from its path as it is now.
    fn decide(&mut self, qpn: Qpn) {
        let Some(qp) = self.hca.qp(qpn) else {
            self.decided.remove(&qpn);
            self.local_qps.remove(&qpn);
            return;
        };
        if qp.state == QpState::Reset {
            self.local_qps.remove(&qpn);
        }
        if qp.qp_type() != QpType::Rc || qp.state == QpState::Reset {
            self.decided.remove(&qpn);
            return;
        }
        let local = self.local_qps.contains(&qpn)
            || qp.attr.ah_attr.grh.is_some_and(|g| {
                let to = SocketAddr::new(framing::ip_of(&g.dgid), self.config.peer_port);
                self.local_peers.contains(&to)
            });
        self.hca.set_in_process(qpn, local);
        self.decided.insert(qpn);
    }

    // ---- inputs -------------------------------------------------------------------------

    /// A datagram arrived for this device: checked (length, opcode, ICRC — for the IPv4
    /// Identification its index names first) and, if it passes, handed to the engine. What
    /// fails is counted by reason and returned.
    pub fn handle_datagram(&mut self, now: Instant, d: &Incoming<'_>) -> Result<(), RoceDrop> {
        self.handle(now, d, None)
    }

    /// A datagram arrived on the socket of IPv4 multicast group `group` (which the kernel
    /// tells apart from the device's unicast traffic only by the socket): as
    /// [`RoceCa::handle_datagram`], with the group's MGID in the GRH the engine sees, so that
    /// it reaches the QPs attached to the group.
    pub fn handle_group_datagram(
        &mut self,
        now: Instant,
        d: &Incoming<'_>,
        group: std::net::Ipv4Addr,
    ) -> Result<(), RoceDrop> {
        self.handle(now, d, Some(group))
    }

    fn handle(
        &mut self,
        now: Instant,
        d: &Incoming<'_>,
        group: Option<std::net::Ipv4Addr>,
    ) -> Result<(), RoceDrop> {
        // The ICRC covers the destination address: the group's, for a group's datagram.
        let to = group.map_or(self.config.addr.ip(), IpAddr::V4);
        let mgid = group.map(framing::engine_mgid);
        let checked = self.check(d, to);
        let body = match checked {
            Ok(body) => body,
            Err(reason) => {
                self.drops.count(reason, 1);
                return Err(reason);
            }
        };
        if gsi::is_for_gsi(body) {
            return self.gsi_received(d.from, body);
        }
        // Only UD receives (and UD multicast) use the GRH area: RC and UC skip building it.
        let ud = Opcode(body[0]).transport() == Transport::Ud;
        let meta = RxMeta {
            grh: match (ud, mgid) {
                (true, Some(m)) => Some(framing::group_grh_area(d.from, m, d.data.len())),
                (true, None) => framing::grh_area(d.from, self.config.addr, d.data.len()),
                (false, _) => None,
            },
            // RoCE has no SL on the wire. A UD completion's SL says what the GRH area holds
            // instead, as ConnectX reports it (bit 3: a UDP header, bits 2:0: 1 IPv6, 2 IPv4),
            // and UCX reads it to find the destination GID.
            sl: match (ud, d.from) {
                (true, SocketAddr::V4(_)) => 0b1010,
                (true, SocketAddr::V6(_)) => 0b1001,
                (false, _) => 0,
            },
            in_process: d.in_process,
            ..RxMeta::default()
        };
        match d.payload {
            Some(p) => self.hca.handle_packet_parts(now, 1, &meta, body, p),
            None => self.hca.handle_packet(now, 1, &meta, body),
        }
        Ok(())
    }

    fn gsi_received(&mut self, from: SocketAddr, body: &[u8]) -> Result<(), RoceDrop> {
        let (src_qpn, mad) = gsi::parse(body).map_err(|_| {
            self.drops.count(RoceDrop::GsiMalformed, 1);
            RoceDrop::GsiMalformed
        })?;
        if self.gsi_in.len() >= MAX_GSI_QUEUE {
            self.drops.count(RoceDrop::GsiQueueFull, 1);
            return Err(RoceDrop::GsiQueueFull);
        }
        self.gsi_in.push_back(GsiIn { from, src_qpn, mad });
        Ok(())
    }

    /// Queues a GMP from QP1 to QP `dest_qpn` at `dgid` (sent by the next
    /// [`RoceCa::poll_transmit`]); false (and counted) when the queue is full.
    pub fn send_gmp(&mut self, dgid: Gid, dest_qpn: Qpn, mad: &[u8; MAD_LEN]) -> bool {
        if self.gsi_out.len() >= MAX_GSI_QUEUE {
            self.drops.count(RoceDrop::GsiQueueFull, 1);
            return false;
        }
        self.gsi_out.push_back((dgid, dest_qpn, *mad));
        true
    }

    /// The next GMP that arrived on QP1.
    pub fn poll_gmp(&mut self) -> Option<GsiIn> {
        self.gsi_in.pop_front()
    }

    /// Whether GMPs wait to be sent (the embedder should transmit).
    pub fn has_gmps_to_send(&self) -> bool {
        !self.gsi_out.is_empty()
    }

    /// Builds the next queued GMP as a datagram in the room its destination calls for.
    fn poll_gmp_transmit(&mut self, wire: &mut [u8], local: &mut [u8]) -> Option<RoceTransmit> {
        while let Some((dgid, dest_qpn, mad)) = self.gsi_out.pop_front() {
            let to = SocketAddr::new(framing::ip_of(&dgid), self.config.peer_port);
            let is_local = self.local_peers.contains(&to) && !local.is_empty();
            let room: &mut [u8] = if is_local { &mut *local } else { &mut *wire };
            self.gsi_psn = self.gsi_psn.wrapping_add(1);
            let Some(len) = gsi::build(room, dest_qpn, Psn::new(self.gsi_psn), &mad) else {
                self.drops.count(RoceDrop::NoRoom, 1);
                continue;
            };
            let Some(icrc) = room.get_mut(len..len + ICRC_LEN) else {
                self.drops.count(RoceDrop::NoRoom, 1);
                continue;
            };
            icrc.fill(0);
            self.last_local = is_local;
            let grh = softib_engine::GlobalRoute {
                dgid,
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            };
            let packet = Transmit {
                port: 1,
                av: softib_engine::AddressVector {
                    grh: Some(grh),
                    port_num: 1,
                    ..Default::default()
                },
                src_qpn: Qpn::GSI,
                dest_qpn,
                opcode: Opcode::UD_SEND_ONLY,
                len,
                payload: None,
                in_process: false,
            };
            let src_port = framing::rxe_source_port(true, 0, 1, dest_qpn.value());
            return Some(RoceTransmit {
                packet,
                to,
                src_port,
                local: is_local,
            });
        }
        None
    }

    /// The transport bytes of a datagram that passes, or why it does not: the cheap checks
    /// first — its length, address family, opcode, and the engine's screen of its BTH (a
    /// flood of junk costs no CRC) — the ICRC last.
    fn check<'d>(&mut self, d: &Incoming<'d>, to: IpAddr) -> Result<&'d [u8], RoceDrop> {
        if d.data.len() < BTH_LEN + ICRC_LEN {
            return Err(RoceDrop::TooShort);
        }
        if d.from.is_ipv4() != self.config.addr.is_ipv4() {
            return Err(RoceDrop::AddressFamily);
        }
        if Opcode(d.data[0]).info().is_none() {
            return Err(RoceDrop::UnsupportedOpcode);
        }
        if !gsi::is_for_gsi(d.data) && !self.hca.screen(1, d.data) {
            return Err(RoceDrop::Screened);
        }
        let body_len = d.data.len() - ICRC_LEN;
        if !d.sealed {
            // From a local peer with nothing between: nothing could have changed it.
            return Ok(&d.data[..body_len]);
        }
        framing::open_from(
            d.from,
            SocketAddr::new(to, self.config.addr.port()),
            d.data,
            d.index,
            self.config.senders,
        )
        .map_err(|e| match e {
            RxError::TooShort => RoceDrop::TooShort,
            RxError::AddressFamily => RoceDrop::AddressFamily,
            RxError::BadIcrc => RoceDrop::BadIcrc,
        })
    }

    /// Fires the engine's timers that are due (retransmissions, RNR waits, ACK coalescing).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.hca.handle_timeout(now);
    }

    // ---- outputs ------------------------------------------------------------------------

    /// Builds the engine's next packet as a datagram, in `local` when it goes to a local peer
    /// and in `wire` otherwise; `None` when the engine has nothing to send. Each room must
    /// hold [`softib_engine::IN_PROCESS_MAX_LEN`] bytes and the ICRC (`local` may be empty
    /// while no local peer is declared). The packet is built where the previous one went and
    /// copied over when it goes elsewhere. A packet that cannot go (no GRH, no room, its
    /// payload gone) is counted and skipped.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        wire: &mut [u8],
        local: &mut [u8],
    ) -> Option<RoceTransmit> {
        if let Some(t) = self.poll_gmp_transmit(wire, local) {
            return Some(t);
        }
        loop {
            let built_local = self.last_local && !local.is_empty();
            let room: &mut [u8] = if built_local { &mut *local } else { &mut *wire };
            let body_room = room.len().saturating_sub(ICRC_LEN);
            let mut packet = self.hca.poll_transmit(now, &mut room[..body_room])?;
            let Some(grh) = packet.av.grh else {
                self.drops.count(RoceDrop::NoGrh, 1);
                continue;
            };
            let to = SocketAddr::new(framing::ip_of(&grh.dgid), self.config.peer_port);
            let is_local = !local.is_empty()
                && (self.local_peers.contains(&to)
                    || self.local_qps.contains(&packet.src_qpn)
                    || (!self.local_ud.is_empty()
                        && packet.opcode.transport() == Transport::Ud
                        && self.local_ud.contains(&(to.ip(), packet.dest_qpn))));
            self.last_local = is_local;
            if is_local != built_local {
                let (from, into): (&[u8], &mut [u8]) = if built_local {
                    (&*local, &mut *wire)
                } else {
                    (&*wire, &mut *local)
                };
                let Some(at) = into.get_mut(..packet.len + ICRC_LEN) else {
                    self.drops.count(RoceDrop::NoRoom, 1);
                    continue;
                };
                at[..packet.len].copy_from_slice(&from[..packet.len]);
            }
            let room: &mut [u8] = if is_local { &mut *local } else { &mut *wire };
            // A payload left in memory stays there only for a local peer with nothing between,
            // which takes it as it lies; everything else travels whole.
            if packet.payload.is_some() && !(is_local && self.trust_local) {
                let body_room = room.len().saturating_sub(ICRC_LEN);
                if !self.hca.materialize(&mut packet, &mut room[..body_room]) {
                    self.drops.count(RoceDrop::PayloadGone, 1);
                    continue;
                }
            }
            let Some(icrc) = room.get_mut(packet.len..packet.len + ICRC_LEN) else {
                self.drops.count(RoceDrop::NoRoom, 1);
                continue;
            };
            icrc.fill(0);
            let ud = packet.opcode.transport() == Transport::Ud;
            let src_port = framing::rxe_source_port(
                ud,
                grh.flow_label,
                packet.src_qpn.value(),
                packet.dest_qpn.value(),
            );
            return Some(RoceTransmit {
                packet,
                to,
                src_port,
                local: is_local,
            });
        }
    }

    /// Appends the payload `t` left in memory to its headers in `room` (where it was built),
    /// for an embedder that cannot hand it over as it lies; false (and counted) when it cannot
    /// be read, and the datagram is then lost, as on a wire.
    pub fn materialize(&mut self, t: &mut RoceTransmit, room: &mut [u8]) -> bool {
        let body_room = room.len().saturating_sub(ICRC_LEN);
        if !self.hca.materialize(&mut t.packet, &mut room[..body_room]) {
            self.drops.count(RoceDrop::PayloadGone, 1);
            return false;
        }
        room[t.packet.len..t.packet.len + ICRC_LEN].fill(0);
        true
    }

    /// Seals `t`, whose bytes are at the start of `room`, for IPv4 Identification 0: for a
    /// datagram that goes alone, or is held back (a fault) and queued later with
    /// [`RoceCa::queue`]. False (and counted) when the path's address family is not the
    /// device's.
    pub fn seal(&mut self, t: &RoceTransmit, room: &mut [u8]) -> bool {
        let from = SocketAddr::new(self.config.addr.ip(), t.src_port);
        if framing::seal(from, t.to, room, t.packet.len).is_none() {
            self.drops.count(RoceDrop::TxAddressFamily, 1);
            return false;
        }
        true
    }

    /// Queues `t`, built in `queue`'s free room ([`TxQueue::space`]: the `wire` room), in the
    /// GSO run of its source port and destination when `gso`, and seals it for the IPv4
    /// Identification its place in that run gives it. Returns its index and its bytes (for a
    /// capture); `None` (and counted) when the path's address family is not the device's.
    pub fn commit<'q>(
        &mut self,
        queue: &'q mut TxQueue<SrcKey>,
        t: &RoceTransmit,
        gso: bool,
    ) -> Option<(u16, &'q mut [u8])> {
        let from = SocketAddr::new(self.config.addr.ip(), t.src_port);
        if from.is_ipv4() != t.to.is_ipv4() {
            self.drops.count(RoceDrop::TxAddressFamily, 1);
            return None;
        }
        let (index, stored) = queue.commit(t.key(), t.to, t.datagram_len(), gso);
        // Cannot fail: the families agree and the stored bytes end in the ICRC's room.
        let _ = framing::seal_for(from, t.to, stored, t.packet.len, index);
        Some((index, stored))
    }

    /// Queues a datagram sealed by [`RoceCa::seal`] (and perhaps held back or changed by a
    /// fault since) to leave from source key `key` for `to`, re-sealed for the Identification
    /// its place in its run gives it. Returns its index and its bytes (for a capture).
    pub fn queue<'q>(
        &mut self,
        queue: &'q mut TxQueue<SrcKey>,
        key: SrcKey,
        to: SocketAddr,
        frame: &[u8],
        gso: bool,
    ) -> (u16, &'q mut [u8]) {
        let (index, stored) = queue.push(key, to, frame, gso);
        if self.config.addr.is_ipv4() {
            self.ident.apply(stored, index);
        }
        (index, stored)
    }

    /// The engine's next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.hca.poll_timeout()
    }

    /// The engine's next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.hca.poll_event()
    }
}

impl<M: Memory> fmt::Debug for RoceCa<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoceCa")
            .field("config", &self.config)
            .field("local_peers", &self.local_peers)
            .field("trust_local", &self.trust_local)
            .field("drops", &self.drops)
            .finish_non_exhaustive()
    }
}
