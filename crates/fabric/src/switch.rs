//! The `switch` module deals with the *soft switch's data plane* (IBA vol 1 §18.2): a native
//! IB packet that arrives on a port leaves by the port the LinearForwardingTable names for its
//! DLID, and management packets (VL15) addressed to the switch go to its SMA.
//!
//! For each packet [`Switch::handle_packet`]:
//!
//! 1. checks the ingress port (it exists and its link is up), the LRH length against the bytes
//!    and the VCRC — a failure counts PortRcvErrors;
//! 2. counts PortRcvPkts and PortRcvData (LRH through ICRC, in 4-byte words);
//! 3. on VL15: a packet whose DLID is permissive or the switch's own (port 0's LID range) goes
//!    to the SMI ([`Sma::receive_smp`]), which forwards directed-route SMPs, answers requests and
//!    hands responses to an SM on the switch; any other VL15 packet is LID-routed by the LFT.
//!    SMPs flow in every logical state from Init on;
//! 4. otherwise (data): the ingress port must be Active — or Armed, which a data packet turns
//!    Active (IBA §7.2) — the DLID must be unicast and not 0, and the LFT must hold a port for
//!    it (LID ≤ LinearFDBTop, entry ≠ 255): else the packet is dropped and counted in
//!    PortRcvSwitchRelayErrors. Entry 0 means the switch itself: a GMP to its QP1 is
//!    answered by its GSI (the PMA, `pma`, for PerfMgt; UNSUPPORTED_METHOD_ATTR for a Get or
//!    Set of any other class), anything else is [`SwitchAction::Local`].
//!    A packet goes back out of its ingress port only when the LFT says so. The egress port must
//!    be Active, else PortXmitDiscards;
//! 5. a data packet whose DLID is multicast (0xC000..=0xFFFE) is replicated (IBA §18.2.4.2):
//!    it leaves by every port of the MulticastForwardingTable entry of its MLID except the port
//!    it arrived on (and port 0, the switch itself, which has no multicast consumer); an egress
//!    port that is not Active counts PortXmitDiscards and is skipped. No entry: dropped as
//!    [`SwitchDrop::Multicast`] and counted in PortRcvSwitchRelayErrors; an entry with no other
//!    Active port: [`SwitchDrop::MulticastNoEgress`] (the normal fate of a packet from the only
//!    member on a branch, not an error counter);
//! 6. counts PortXmitPkts and PortXmitData on each egress port.
//!
//! Data packets are not copied: [`SwitchAction::Forward`] and [`SwitchAction::Replicate`] tell
//! the caller to send the bytes it gave. Only SMPs the switch rewrites or answers are new bytes.
//! Not done: SL-to-VL mapping, partition enforcement, flow control and credits.

use softib_wire::crc::{self, VCRC_LEN};
use softib_wire::mad::{self, smp, MgmtClass};
use softib_wire::{Lid, LrhPacket, LrhRepr, QKey, Qpn};

use crate::sma::{DrAction, Outgoing, Sma, SmaConfig, SmiOutput};
use crate::smp_packet;
use crate::topology::Node;

/// A set of switch ports 0..=255, as the MulticastForwardingTable holds one per MLID (IBA
/// §14.2.5.12) and [`SwitchAction::Replicate`] names the egress ports of a multicast packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PortMask([u64; 4]);

impl PortMask {
    /// The empty set.
    pub const EMPTY: PortMask = PortMask([0; 4]);

    /// The set of `ports`.
    pub fn from_ports(ports: impl IntoIterator<Item = u8>) -> PortMask {
        let mut m = PortMask::EMPTY;
        for p in ports {
            m.insert(p);
        }
        m
    }

    /// Adds `port`.
    pub fn insert(&mut self, port: u8) {
        self.0[usize::from(port / 64)] |= 1u64 << (port % 64);
    }

    /// Removes `port`.
    pub fn remove(&mut self, port: u8) {
        self.0[usize::from(port / 64)] &= !(1u64 << (port % 64));
    }

    /// Whether `port` is in the set.
    pub fn contains(&self, port: u8) -> bool {
        self.0[usize::from(port / 64)] & (1u64 << (port % 64)) != 0
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    /// The number of ports in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The ports, ascending.
    pub fn iter(&self) -> impl Iterator<Item = u8> + '_ {
        (0..=255u8).filter(move |&p| self.contains(p))
    }

    /// The 16-bit PortMask of MFT position `position` (ports `16 * position ..`).
    pub fn mask16(&self, position: u8) -> u16 {
        let bit = usize::from(position & 0x0F) * 16;
        (self.0[bit / 64] >> (bit % 64)) as u16
    }

    /// Replaces the ports of MFT position `position` by the 16-bit PortMask `mask`.
    pub fn set_mask16(&mut self, position: u8, mask: u16) {
        let bit = usize::from(position & 0x0F) * 16;
        let w = &mut self.0[bit / 64];
        *w = (*w & !(0xFFFFu64 << (bit % 64))) | (u64::from(mask) << (bit % 64));
    }
}

/// IBA PortCounters (§16.1.3.5) of one switch port, kept with 64 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// PortXmitData: octets sent (LRH through ICRC) divided by 4.
    pub xmit_data: u64,
    /// PortRcvData: octets received (LRH through ICRC) divided by 4.
    pub rcv_data: u64,
    /// PortXmitPkts.
    pub xmit_pkts: u64,
    /// PortRcvPkts.
    pub rcv_pkts: u64,
    /// PortRcvErrors: packets received with a bad length or VCRC.
    pub rcv_errors: u64,
    /// PortRcvSwitchRelayErrors: packets received that could not be forwarded (no route,
    /// bad DLID).
    pub rcv_switch_relay_errors: u64,
    /// PortXmitDiscards: packets that could not leave this port (not Active, link down).
    pub xmit_discards: u64,
}

macro_rules! switch_drops {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, )+) => {
        /// Why the switch dropped a packet.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum SwitchDrop {
            $( $(#[$doc])* $name, )+
        }

        impl SwitchDrop {
            /// Every reason, in declaration order.
            pub const ALL: &'static [SwitchDrop] = &[$(SwitchDrop::$name),+];

            /// A short snake_case name for logs and tools.
            pub fn name(self) -> &'static str {
                match self { $( SwitchDrop::$name => $text, )+ }
            }

            fn index(self) -> usize {
                SwitchDrop::ALL.iter().position(|&r| r == self).unwrap_or(0)
            }
        }
    };
}

switch_drops! {
    /// The ingress port does not exist.
    BadIngressPort => "bad_ingress_port",
    /// The ingress port's link is not up.
    IngressLinkDown => "ingress_link_down",
    /// The LRH is truncated or its PktLen disagrees with the bytes.
    Malformed => "malformed",
    /// The VCRC does not match.
    BadVcrc => "bad_vcrc",
    /// A VL15 packet for the switch that is not a valid SMP (or has a bad ICRC).
    NotAnSmp => "not_an_smp",
    /// The SMI or SMA consumed the SMP without sending anything (directed-route rules, M_Key).
    SmpConsumed => "smp_consumed",
    /// A data packet arrived on a port that is not Armed or Active.
    IngressNotActive => "ingress_not_active",
    /// The DLID is 0, or permissive on a data VL.
    BadDlid => "bad_dlid",
    /// The DLID is multicast and the MFT holds no port for it (or it is a VL15 packet).
    Multicast => "multicast",
    /// The MFT entry of the MLID names no Active port but the ingress port.
    MulticastNoEgress => "multicast_no_egress",
    /// The LFT holds no port for the DLID (above LinearFDBTop, or 255).
    NoRoute => "no_route",
    /// The egress port is not Active (data) or its link is not up (VL15).
    EgressNotActive => "egress_not_active",
    /// A GMP for the switch that gets no response (a response, not parseable).
    GmpConsumed => "gmp_consumed",
}

/// What to do with a packet the switch received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchAction {
    /// Send the received bytes, unchanged, out of `out_port`.
    Forward {
        /// The egress port.
        out_port: u8,
    },
    /// Send `packet` (an SMP the switch relayed or answered) out of `out_port`.
    Transmit {
        /// The egress port.
        out_port: u8,
        /// The whole packet, LRH through VCRC.
        packet: Vec<u8>,
    },
    /// Send the received bytes, unchanged, out of each port of `out_ports` (a multicast
    /// packet; never the ingress port, never port 0).
    Replicate {
        /// The egress ports.
        out_ports: PortMask,
    },
    /// A data packet for the switch itself (its LFT entry is port 0), e.g. a GMP for a
    /// management agent; the caller decides.
    Local,
    /// An SMP response for the SM running on this switch (boxed: SMPs are large and this is
    /// the rare case).
    ToSm(Box<smp::Repr>),
    /// The packet was dropped.
    Drop(SwitchDrop),
}

/// A soft switch: its SMA (which holds the LFT) and its data plane.
#[derive(Debug, Clone)]
pub struct Switch {
    sma: Sma,
    counters: Vec<PortCounters>,
    drops: Vec<u64>,
}

impl Switch {
    /// A switch built from `config`; `None` if the configuration is not a switch's.
    pub fn new(config: SmaConfig) -> Option<Switch> {
        if !config.is_switch() {
            return None;
        }
        let ports = usize::from(config.num_ports) + 1;
        Some(Switch {
            sma: Sma::new(config),
            counters: vec![PortCounters::default(); ports],
            drops: vec![0; SwitchDrop::ALL.len()],
        })
    }

    /// The switch of a topology node; `None` for a CA.
    pub fn from_node(node: &Node) -> Option<Switch> {
        Switch::new(SmaConfig::from_node(node))
    }

    /// The switch's SMA.
    pub fn sma(&self) -> &Sma {
        &self.sma
    }

    /// The switch's SMA, mutable (the link layer reports links through it).
    pub fn sma_mut(&mut self) -> &mut Sma {
        &mut self.sma
    }

    /// The counters of `port` (0..=NumPorts).
    pub fn counters(&self, port: u8) -> Option<&PortCounters> {
        self.counters.get(usize::from(port))
    }

    /// Packets dropped for `reason`.
    pub fn dropped(&self, reason: SwitchDrop) -> u64 {
        self.drops[reason.index()]
    }

    fn drop_packet(&mut self, reason: SwitchDrop) -> SwitchAction {
        self.drops[reason.index()] += 1;
        SwitchAction::Drop(reason)
    }

    fn port_counters(&mut self, port: u8) -> &mut PortCounters {
        let i = usize::from(port).min(self.counters.len() - 1);
        &mut self.counters[i]
    }

    fn count_xmit(&mut self, port: u8, words: u16) {
        let c = self.port_counters(port);
        c.xmit_pkts += 1;
        c.xmit_data += u64::from(words);
    }

    /// Handles a packet (LRH through VCRC) that arrived on `in_port`. See the module docs.
    pub fn handle_packet(&mut self, in_port: u8, packet: &[u8]) -> SwitchAction {
        if in_port == 0 || in_port > self.sma.num_ports() {
            return self.drop_packet(SwitchDrop::BadIngressPort);
        }
        if !self.sma.link_is_up(in_port) {
            return self.drop_packet(SwitchDrop::IngressLinkDown);
        }
        let Ok(lrh) = LrhRepr::parse(&LrhPacket::new_unchecked(packet)) else {
            self.port_counters(in_port).rcv_errors += 1;
            return self.drop_packet(SwitchDrop::Malformed);
        };
        let words = lrh.pkt_len;
        let body_len = usize::from(words) * 4;
        if body_len + VCRC_LEN != packet.len() || body_len < softib_wire::lrh::HEADER_LEN {
            self.port_counters(in_port).rcv_errors += 1;
            return self.drop_packet(SwitchDrop::Malformed);
        }
        let vcrc = u16::from_le_bytes([packet[body_len], packet[body_len + 1]]);
        if crc::vcrc(&packet[..body_len]) != vcrc {
            self.port_counters(in_port).rcv_errors += 1;
            return self.drop_packet(SwitchDrop::BadVcrc);
        }
        {
            let c = self.port_counters(in_port);
            c.rcv_pkts += 1;
            c.rcv_data += u64::from(words);
        }
        if lrh.vl == smp_packet::VL15 {
            self.handle_vl15(in_port, &lrh, packet)
        } else {
            self.handle_data(in_port, &lrh, packet)
        }
    }

    fn handle_vl15(&mut self, in_port: u8, lrh: &LrhRepr, packet: &[u8]) -> SwitchAction {
        if lrh.dlid != Lid::PERMISSIVE && !self.sma.accepts_dlid(0, lrh.dlid) {
            // A LID-routed SMP passing through: relay by the LFT, in any state from Init on.
            return match self.route(lrh.dlid) {
                Ok(0) => self.drop_packet(SwitchDrop::NotAnSmp),
                Ok(out_port) if self.sma.link_is_up(out_port) => {
                    self.count_xmit(out_port, lrh.pkt_len);
                    SwitchAction::Forward { out_port }
                }
                Ok(out_port) => {
                    self.port_counters(out_port).xmit_discards += 1;
                    self.drop_packet(SwitchDrop::EgressNotActive)
                }
                Err(reason) => {
                    self.port_counters(in_port).rcv_switch_relay_errors += 1;
                    self.drop_packet(reason)
                }
            };
        }
        let Ok(parsed) = smp_packet::parse(packet) else {
            return self.drop_packet(SwitchDrop::NotAnSmp);
        };
        match self.sma.receive_smp(in_port, lrh.slid, &parsed.smp) {
            SmiOutput::Send(out) => self.transmit(out),
            SmiOutput::ToSm(smp) => SwitchAction::ToSm(Box::new(smp)),
            SmiOutput::Nothing => self.drop_packet(SwitchDrop::SmpConsumed),
        }
    }

    fn transmit(&mut self, out: Outgoing) -> SwitchAction {
        let out_port = if out.out_port == 0 {
            // A LID-routed response from port 0: the LFT decides.
            match self.sma.lft_port(out.dlid) {
                Some(p) if p != 0 => p,
                _ => return self.drop_packet(SwitchDrop::NoRoute),
            }
        } else {
            out.out_port
        };
        if !self.sma.link_is_up(out_port) {
            self.port_counters(out_port).xmit_discards += 1;
            return self.drop_packet(SwitchDrop::EgressNotActive);
        }
        let packet = smp_packet::emit(out.dlid, out.slid, &out.smp);
        self.count_xmit(out_port, ((packet.len() - VCRC_LEN) / 4) as u16);
        SwitchAction::Transmit { out_port, packet }
    }

    /// The LFT's egress port for a unicast `dlid`.
    fn route(&self, dlid: Lid) -> Result<u8, SwitchDrop> {
        if dlid.0 == 0 || dlid == Lid::PERMISSIVE {
            Err(SwitchDrop::BadDlid)
        } else if dlid.is_multicast() {
            Err(SwitchDrop::Multicast)
        } else {
            self.sma.lft_port(dlid).ok_or(SwitchDrop::NoRoute)
        }
    }

    fn handle_data(&mut self, in_port: u8, lrh: &LrhRepr, packet: &[u8]) -> SwitchAction {
        if !self.sma.note_data_received(in_port) {
            return self.drop_packet(SwitchDrop::IngressNotActive);
        }
        if lrh.dlid.is_multicast() {
            return self.replicate(in_port, lrh);
        }
        match self.route(lrh.dlid) {
            Err(reason) => {
                self.port_counters(in_port).rcv_switch_relay_errors += 1;
                self.drop_packet(reason)
            }
            Ok(0) => self.local_gmp(packet),
            Ok(out_port) => {
                if self.sma.port_state(out_port) != Some(softib_wire::mad::attr::PortState::Active)
                {
                    self.port_counters(out_port).xmit_discards += 1;
                    return self.drop_packet(SwitchDrop::EgressNotActive);
                }
                self.count_xmit(out_port, lrh.pkt_len);
                SwitchAction::Forward { out_port }
            }
        }
    }

    /// A data packet for the switch itself: a GMP to QP1 gets its answer from the switch's
    /// GSI — the PMA's for PerfMgt; for a Get or Set of a class no agent here serves,
    /// UNSUPPORTED_METHOD_ATTR (what the kernel's MAD layer answers for an agent nobody
    /// registered). Anything else is [`SwitchAction::Local`].
    fn local_gmp(&mut self, packet: &[u8]) -> SwitchAction {
        let Ok(p) = smp_packet::parse_mad(packet) else {
            return SwitchAction::Local;
        };
        if p.addr.dest_qpn != Qpn::GSI {
            return SwitchAction::Local;
        }
        let response = if p.mad[1] == u8::from(MgmtClass::PerfMgt) {
            pma::answer(&mut self.counters, &p.mad)
        } else {
            mad::unmatched_response(&p.mad)
        };
        let Some(response) = response else {
            return self.drop_packet(SwitchDrop::GmpConsumed);
        };
        let to = p.addr.slid;
        let out_port = match self.route(to) {
            Ok(0) | Err(_) => {
                return self.drop_packet(SwitchDrop::NoRoute);
            }
            Ok(port) => port,
        };
        if !self.sma.link_is_up(out_port) {
            self.port_counters(out_port).xmit_discards += 1;
            return self.drop_packet(SwitchDrop::EgressNotActive);
        }
        let packet = smp_packet::emit_mad(
            &smp_packet::MadAddress {
                vl: p.addr.vl,
                sl: p.addr.sl,
                dlid: to,
                slid: p.addr.dlid,
                dest_qpn: p.addr.src_qpn,
                src_qpn: Qpn::GSI,
                qkey: QKey::GSI,
            },
            &response,
        );
        self.count_xmit(out_port, ((packet.len() - VCRC_LEN) / 4) as u16);
        SwitchAction::Transmit { out_port, packet }
    }

    /// A multicast data packet: every Active port of the MLID's MFT entry but the ingress port.
    fn replicate(&mut self, in_port: u8, lrh: &LrhRepr) -> SwitchAction {
        let entry = self.sma.mft_ports(lrh.dlid);
        if entry.is_empty() {
            self.port_counters(in_port).rcv_switch_relay_errors += 1;
            return self.drop_packet(SwitchDrop::Multicast);
        }
        let mut out_ports = PortMask::EMPTY;
        for p in entry.iter() {
            if p == 0 || p == in_port || p > self.sma.num_ports() {
                continue;
            }
            if self.sma.port_state(p) != Some(softib_wire::mad::attr::PortState::Active) {
                self.port_counters(p).xmit_discards += 1;
                continue;
            }
            out_ports.insert(p);
        }
        if out_ports.is_empty() {
            return self.drop_packet(SwitchDrop::MulticastNoEgress);
        }
        for p in out_ports.iter() {
            self.count_xmit(p, lrh.pkt_len);
        }
        SwitchAction::Replicate { out_ports }
    }

    /// The next trap the switch's SMA raised (Trap 128 when a port went down or came up), as
    /// a packet to transmit LID-routed to the master SM; `None` when there is none.
    pub fn poll_trap(&mut self) -> Option<SwitchAction> {
        let trap = self.sma.poll_trap()?;
        Some(self.transmit(trap))
    }

    /// Sends a directed-route SMP from the SM running on this switch (its port 0): returns the
    /// packet to transmit, or `ToSm` with the answer when the route has no hops (the switch's
    /// own SMA answers it).
    pub fn send_smp(&mut self, smp: &smp::Repr) -> SwitchAction {
        match self.sma.send_dr(0, smp) {
            DrAction::Forward { out_port, smp } => self.transmit(Outgoing {
                out_port,
                dlid: Lid::PERMISSIVE,
                slid: Lid::PERMISSIVE,
                smp,
            }),
            DrAction::Deliver(request) => {
                let Some(response) = self.sma.handle_smp(0, &request) else {
                    return self.drop_packet(SwitchDrop::SmpConsumed);
                };
                match self.sma.send_dr(0, &response) {
                    DrAction::Deliver(r) => SwitchAction::ToSm(Box::new(r)),
                    _ => self.drop_packet(SwitchDrop::SmpConsumed),
                }
            }
            DrAction::Drop(_) => self.drop_packet(SwitchDrop::SmpConsumed),
        }
    }
}

mod pma;

#[cfg(test)]
mod tests;
