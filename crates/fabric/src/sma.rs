//! The `sma` module deals with the *subnet management agent* (IBA vol 1 §14.2) that every node,
//! CA or switch, runs behind QP0: it answers the subnet manager's SubnGet and SubnSet of the
//! node's management attributes, checks M_Keys, and walks directed-route SMPs through the node.
//!
//! # What it holds
//!
//! [`Sma`] is one node's management state: NodeInfo and NodeDescription; per port a PortInfo
//! (LID, LMC, MasterSMLID, CapabilityMask, PortState/PortPhysicalState, M_Key and its protect
//! bits, GID prefix, MTU, width and speed fields), a GUIDInfo table and a P_KeyTable; for a
//! switch also SwitchInfo, the LinearForwardingTable and the MulticastForwardingTable; and the SMInfo of an SM running on
//! the node, if one does.
//!
//! # What it answers ([`Sma::handle_smp`])
//!
//! | attribute | Get | Set | attribute modifier |
//! |---|---|---|---|
//! | NodeDescription | yes | no | — |
//! | NodeInfo | yes | no | — |
//! | SwitchInfo (switches) | yes | yes | — |
//! | GUIDInfo | yes | yes | block (8 GUIDs); entry 0 (the port GUID) is read-only |
//! | PortInfo | yes | yes | port; 0 = the arrival port on a CA, port 0 on a switch |
//! | P_KeyTable | yes | yes | block (32 P_Keys) in bits 0–15, port in bits 16–23 (switches) |
//! | LinearForwardingTable (switches) | yes | yes | block (64 LIDs) |
//! | MulticastForwardingTable (switches) | yes | yes | block (32 MLIDs) in bits 0–8, PortMask position (16 ports) in bits 28–31 |
//! | SL2VLMappingTable | yes | yes | switches: input port in bits 8–15, output port in bits 0–7 |
//! | VLArbitrationTable | yes | yes | block 1–4 in bits 16–31, port in bits 0–7 (switches) |
//! | MLNXExtendedPortInfo (0xFF90, Mellanox vendor ID) | yes | no | port (switches) |
//! | SMInfo (when softib's SM runs here) | yes | yes | Set: the SM control code 1–5 |
//!
//! SMInfo for an SM that holds the port's IsSM without telling the SMA its SMInfo (the real
//! opensm through the drop-in libibumad) is that SM's to answer: [`Sma::is_for_local_sm`].
//!
//! The MulticastForwardingTable holds MulticastFDBCap entries, MLID 0xC000 upward; a block
//! beyond them, a position beyond the switch's ports, or a Set naming a port the switch does
//! not have is an invalid value. SwitchInfo.MulticastFDBTop is stored as the SM sets it (above
//! 0xC000 + MulticastFDBCap − 1 is an invalid value); the switch enforces it only when port 0's
//! CapabilityMask has IsMulticastFDBTopSupported, as IBA §14.2.5.4 ties the field to that bit.
//!
//! Status codes (IBA §13.4.7 table 110): a BaseVersion or ClassVersion other than 1 gets "bad
//! version"; a request method other than Get and Set gets "method not supported"; an attribute
//! the node does not have, or Set of a read-only one, gets "method/attribute combination not
//! supported"; an attribute modifier or a Set value out of range gets "invalid attribute
//! value", and then nothing is changed (a Set is applied whole or not at all). Error responses
//! echo the request's data.
//!
//! # M_Key (IBA §14.2.4)
//!
//! The key that counts is the PortInfo.M_Key of the arrival port on a CA and of port 0 on a
//! switch. A stored key of 0, or an SMP carrying the stored key, passes. Otherwise, by
//! M_KeyProtectBits: 0 — Get succeeds; 1 — Get succeeds but PortInfo.M_Key reads as 0; 2 and
//! 3 — Get fails. Set (and every failed Get) is discarded without a response and counted in
//! PortInfo.M_KeyViolations and [`SmaCounters::m_key_violations`], and reported to the master
//! SM (PortInfo.MasterSMLID, when set) with a Bad M_Key trap: a LID-routed SubnTrap(Notice) of
//! trap number 256 naming the requester's LID, the method, attribute and M_Key it used
//! ([`Sma::poll_trap`]; IBA §14.2.4.3, §14.2.5.1). A switch whose port goes Down or comes up
//! to Init sends the master SM Trap 128, Link State Changed, the same way, and a port whose
//! CapabilityMask changes (an SM started or stopped on it) Trap 144, Local Changes. Not done:
//! resending a trap until the SM answers with TrapRepress (each is sent once).
//!
//! # Port states (IBA §14.2.5.6, §7.2)
//!
//! The physical link belongs to the link layer, which reports it with [`Sma::link_up`] and
//! [`Sma::link_down`]: a trained link is LinkUp with logical state Init, an untrained one
//! Polling/Down. Only the SM moves a port further, with PortInfo Set: Init → Armed → Active
//! (Armed only from Init, Active only from Armed); Down from any state; NoChange keeps the
//! state; anything else is an invalid value. A switch's port 0 is always LinkUp/Active (as
//! ibsim shows it). A Set of Down or Disabled asks the link layer to take the link down, which
//! [`Sma::poll_event`] reports.
//!
//! # Directed route (IBA §14.2.2, C14-9 … C14-13)
//!
//! [`Sma::process_dr`] is the SMI of this node for a directed-route SMP received on a port:
//! on the way out (D = 0) a switch records the arrival port in ReturnPath\[HopPointer\] and
//! forwards out of InitialPath\[HopPointer + 1\]; the node at HopPointer = HopCount is the
//! destination. On the way back (D = 1) each switch forwards out of ReturnPath\[HopPointer −
//! 1\]; HopPointer 1 reaches the requester. A CA never forwards. [`Sma::send_dr`] is the same
//! SMI for SMPs this node originates: a request of the local SM (HopPointer 0) or the SMA's
//! response (HopPointer = HopCount + 1). [`Sma::receive_smp`] puts the pieces together for a
//! received SMP and says what leaves the node. Only purely directed routes are walked (DrSLID
//! and DrDLID permissive, as opensm and the diagnostics send them); an SMP with a LID-routed
//! part is dropped with [`DrDrop::LidRoutedPart`].
//!
//! About 1,600 lines, one concept: the agent's Get/Set of every SMP attribute (IBA §14.2.5)
//! and the directed-route rules, which share the node's state; its tests are `sma/tests.rs`.

use std::collections::{BTreeMap, VecDeque};

use softib_wire::mad::attr::{
    capability_mask, GuidInfo, LinearForwardingTable, MulticastForwardingTable, NodeDescription,
    NodeInfo, NodeType, PKeyTable, PortInfo, PortPhysicalState, PortState, SmInfo, SmpAttribute,
    SwitchInfo,
};
use softib_wire::mad::smp::{self, DATA_LEN, MAX_HOPS};
use softib_wire::mad::{status, AttrId, Method};
use softib_wire::{Guid, Lid, Mtu, PKey};

use crate::switch::PortMask;
use crate::topology::{LinkRate, Node, NodeKind};

/// The highest unicast LID (IBA §4.1.3): LIDs above are multicast or permissive.
pub const MAX_UNICAST_LID: u16 = 0xBFFF;

/// What a node is built with: identity, capabilities and table sizes. The defaults of
/// [`SmaConfig::ca`] and [`SmaConfig::switch`] follow what real opensm saw on ibsim (golden
/// `B-stock`), except LinkWidthSupported (1X|4X instead of ibsim's every-width artefact).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmaConfig {
    /// CA or switch.
    pub node_type: NodeType,
    /// NumPorts (a switch's port 0 is not counted).
    pub num_ports: u8,
    /// NodeGUID (also every port GUID of a switch).
    pub node_guid: Guid,
    /// SystemImageGUID.
    pub system_image_guid: Guid,
    /// The NodeDescription text (truncated to 64 bytes).
    pub description: String,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// Revision.
    pub revision: u32,
    /// PartitionCap: P_Key entries of a CA port or a switch's port 0.
    pub partition_cap: u16,
    /// Switches: P_Key entries of each external port (SwitchInfo.PartitionEnforcementCap).
    pub partition_enforcement_cap: u16,
    /// GUIDCap: GUIDInfo entries per port (CA) or of port 0 (switch), at least 1.
    pub guid_cap: u8,
    /// PortInfo.CapabilityMask of CA ports and switch port 0 (the local SM adds IsSM with
    /// [`Sma::set_capability_mask`]).
    pub capability_mask: u32,
    /// MTUCap of every port.
    pub mtu_cap: Mtu,
    /// VLCap (PortInfo coding: 4 = VL0–7).
    pub vl_cap: u8,
    /// LinkWidthSupported of every physical port.
    pub link_width_supported: u8,
    /// LinkSpeedSupported of every physical port.
    pub link_speed_supported: u8,
    /// Switches: LinearFDBCap, the LFT entries supported.
    pub linear_fdb_cap: u16,
    /// Switches: MulticastFDBCap, the MFT entries supported (MLIDs 0xC000 upward).
    pub multicast_fdb_cap: u16,
    /// Switches: whether port 0 is an enhanced port 0.
    pub enhanced_port0: bool,
}

impl SmaConfig {
    /// A CA with `num_ports` ports; port GUIDs are `node_guid + port`.
    pub fn ca(num_ports: u8, node_guid: Guid) -> SmaConfig {
        SmaConfig {
            node_type: NodeType::Ca,
            num_ports,
            node_guid,
            system_image_guid: node_guid,
            description: String::new(),
            vendor_id: 0,
            device_id: 0,
            revision: 0,
            partition_cap: 64,
            partition_enforcement_cap: 0,
            guid_cap: 32,
            capability_mask: 0x0050_c048,
            mtu_cap: Mtu::Mtu2048,
            vl_cap: 4,
            link_width_supported: 0x03,
            link_speed_supported: 0x07,
            linear_fdb_cap: 0,
            multicast_fdb_cap: 0,
            enhanced_port0: false,
        }
    }

    /// A switch with `num_ports` external ports, every port GUID = `node_guid`.
    pub fn switch(num_ports: u8, node_guid: Guid) -> SmaConfig {
        SmaConfig {
            node_type: NodeType::Switch,
            partition_cap: 8,
            partition_enforcement_cap: 64,
            guid_cap: 1,
            capability_mask: 0x0000_c048,
            linear_fdb_cap: 0xC000,
            multicast_fdb_cap: 1024,
            ..SmaConfig::ca(num_ports, node_guid)
        }
    }

    /// The configuration of a topology node.
    pub fn from_node(node: &Node) -> SmaConfig {
        let mut c = match node.kind {
            NodeKind::Ca => SmaConfig::ca(node.num_ports, node.node_guid),
            NodeKind::Switch => SmaConfig::switch(node.num_ports, node.node_guid),
        };
        c.system_image_guid = node.system_image_guid;
        c.description = node.description.clone();
        c.vendor_id = node.vendor_id;
        c.device_id = node.device_id;
        c.enhanced_port0 = node.enhanced_port0;
        c
    }

    /// Whether this is a switch.
    pub fn is_switch(&self) -> bool {
        self.node_type == NodeType::Switch
    }

    /// The GUID of `port`: a CA's port N is `node_guid + N`; a switch's ports all have the
    /// node GUID. `None` for ports that do not exist (a CA has no port 0).
    pub fn port_guid(&self, port: u8) -> Option<Guid> {
        if self.is_switch() {
            (port <= self.num_ports).then_some(self.node_guid)
        } else {
            (1..=self.num_ports)
                .contains(&port)
                .then(|| Guid(self.node_guid.0.wrapping_add(u64::from(port))))
        }
    }
}

/// Why the SMI discarded a directed-route SMP (IBA §14.2.2.2 / §14.2.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DrDrop {
    /// The SMP is LID-routed (class 0x01), not directed-route.
    NotDirectedRoute,
    /// The SMP arrived on a port this node does not have (or port 0).
    BadIngressPort,
    /// HopCount is above 63 (C14-6).
    HopCountTooLarge,
    /// HopPointer is not where the route says it can be at this node (C14-9:1, :5; C14-13:1,
    /// :5).
    BadHopPointer,
    /// A CA was asked to forward (only switches relay, C14-9:2, C14-13:2).
    NotASwitch,
    /// The path names an egress port the node does not have (or port 0).
    BadEgressPort,
    /// The path names an egress port whose link is not up.
    EgressPortDown,
    /// On a CA, each port has its own SMI: an SMP can only leave through its own port.
    WrongEgressPort,
    /// DrSLID or DrDLID is not permissive: LID-routed parts are not implemented.
    LidRoutedPart,
}

impl DrDrop {
    /// Every reason, in declaration order.
    pub const ALL: [DrDrop; 9] = [
        DrDrop::NotDirectedRoute,
        DrDrop::BadIngressPort,
        DrDrop::HopCountTooLarge,
        DrDrop::BadHopPointer,
        DrDrop::NotASwitch,
        DrDrop::BadEgressPort,
        DrDrop::EgressPortDown,
        DrDrop::WrongEgressPort,
        DrDrop::LidRoutedPart,
    ];

    /// A short snake_case name for logs and counters.
    pub fn name(self) -> &'static str {
        match self {
            DrDrop::NotDirectedRoute => "not_directed_route",
            DrDrop::BadIngressPort => "bad_ingress_port",
            DrDrop::HopCountTooLarge => "hop_count_too_large",
            DrDrop::BadHopPointer => "bad_hop_pointer",
            DrDrop::NotASwitch => "not_a_switch",
            DrDrop::BadEgressPort => "bad_egress_port",
            DrDrop::EgressPortDown => "egress_port_down",
            DrDrop::WrongEgressPort => "wrong_egress_port",
            DrDrop::LidRoutedPart => "lid_routed_part",
        }
    }

    fn index(self) -> usize {
        DrDrop::ALL.iter().position(|&r| r == self).unwrap_or(0)
    }
}

/// What the SMI does with a directed-route SMP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DrAction {
    /// This node is where the SMP is going: a request (D = 0) goes to the SMA
    /// ([`Sma::handle_smp`]), a response (D = 1) to the SM on this node. The SMP carries the
    /// updated HopPointer and ReturnPath, which the response must keep.
    Deliver(smp::Repr),
    /// Send `smp` (HopPointer and ReturnPath updated) out of `out_port`.
    Forward {
        /// The egress port.
        out_port: u8,
        /// The SMP to send.
        smp: smp::Repr,
    },
    /// Discard the SMP.
    Drop(DrDrop),
}

/// An SMP leaving the node, with the LRH addresses to send it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The egress port (0 = a switch's own port 0: route it by the LFT).
    pub out_port: u8,
    /// LRH DLID: permissive for directed-route SMPs, the requester's LID for LID-routed
    /// responses.
    pub dlid: Lid,
    /// LRH SLID: permissive for directed-route SMPs, the port's LID for LID-routed responses.
    pub slid: Lid,
    /// The SMP.
    pub smp: smp::Repr,
}

/// What happened to an SMP given to [`Sma::receive_smp`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmiOutput {
    /// Send this SMP (forwarded, or the SMA's response).
    Send(Outgoing),
    /// A response for the SM running on this node.
    ToSm(smp::Repr),
    /// Nothing leaves: dropped (see the counters) or a request that gets no response.
    Nothing,
}

/// SMInfo control codes of a SubnSet(SMInfo) (IBA §14.4.1, the attribute modifier).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SmControl {
    /// 1: Handover.
    Handover,
    /// 2: Acknowledge.
    Acknowledge,
    /// 3: Disable.
    Disable,
    /// 4: Standby.
    Standby,
    /// 5: Discover.
    Discover,
}

impl SmControl {
    /// The control code of attribute modifier `m`.
    pub fn from_attr_mod(m: u32) -> Option<SmControl> {
        Some(match m {
            1 => SmControl::Handover,
            2 => SmControl::Acknowledge,
            3 => SmControl::Disable,
            4 => SmControl::Standby,
            5 => SmControl::Discover,
            _ => return None,
        })
    }

    /// The attribute modifier that says this control code.
    pub fn attr_mod(self) -> u32 {
        match self {
            SmControl::Handover => 1,
            SmControl::Acknowledge => 2,
            SmControl::Disable => 3,
            SmControl::Standby => 4,
            SmControl::Discover => 5,
        }
    }
}

/// Something the SMA asks of the rest of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmaEvent {
    /// The SM set the port Down or Disabled: the link layer should take the link down (and,
    /// unless Disabled, let it train again).
    LinkDown {
        /// The port.
        port: u8,
        /// Whether the link may train again (Down); `false` for Disabled, which stays down
        /// until the SM sets it Polling ([`SmaEvent::LinkEnabled`]).
        retrain: bool,
    },
    /// The SM set a Disabled port back to Polling: the link layer may train the link.
    LinkEnabled {
        /// The port.
        port: u8,
    },
    /// The SM set PortInfo.ClientReregister: the port's clients must re-register with the SA.
    ClientReregister {
        /// The port.
        port: u8,
    },
    /// A SubnSet(SMInfo) for the SM on this node (the SMA has answered it with the current
    /// SMInfo): the runtime hands it to that SM (`SubnetManager::handle_sm_info_set`).
    SmInfoSet {
        /// The port it arrived on.
        port: u8,
        /// What the requester asks.
        control: SmControl,
        /// The requester's SMInfo.
        from: SmInfo,
    },
}

/// Counters of the SMA: how many SMPs it saw and why it dropped or refused some.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SmaCounters {
    /// Requests given to [`Sma::handle_smp`].
    pub requests: u64,
    /// Responses produced (including error responses).
    pub responses: u64,
    /// SMPs discarded by the M_Key check.
    pub m_key_violations: u64,
    /// Responses with status "bad version".
    pub bad_version: u64,
    /// Responses with status "method" or "method/attribute" not supported.
    pub unsupported: u64,
    /// Responses with status "invalid attribute value".
    pub invalid_value: u64,
    /// SMPs the SMA ignores: responses, traps, TrapRepress, Send, wrong class, bad port.
    pub ignored: u64,
    /// Directed-route SMPs relayed out of another port.
    pub dr_forwarded: u64,
    /// Directed-route SMPs discarded, by [`DrDrop`] (indexed like [`DrDrop::ALL`]).
    pub dr_dropped: [u64; DrDrop::ALL.len()],
}

impl SmaCounters {
    /// Directed-route SMPs discarded for `reason`.
    pub fn dr_dropped(&self, reason: DrDrop) -> u64 {
        self.dr_dropped[reason.index()]
    }
}

#[derive(Debug, Clone)]
struct Port {
    info: PortInfo,
    /// GUIDInfo entries (CA ports and switch port 0; empty for switch external ports).
    guids: Vec<Guid>,
    pkeys: Vec<PKey>,
    /// Whether the link layer reports the cable trained (survives a Disabled state).
    link_trained: bool,
    /// When the M_Key lease ends (microseconds on the host's clock): started by a failed
    /// M_Key check, stopped by a matching key; at its end the protect bits go to 0.
    m_key_lease_until: Option<u64>,
    /// SL to VL mapping tables of this (output) port by input port (0 on a CA): 16 SLs of
    /// 4 bits; absent is all SLs on VL0.
    sl2vl: BTreeMap<u8, [u8; SL2VL_LEN]>,
    /// VLArbitrationTable blocks 1–4 (low 0–31, high 0–31, low 32–63, high 32–63): 32
    /// entries of VL (4 bits) and weight (8 bits); all zero weights until an SM sets them.
    vl_arb: [[u8; DATA_LEN]; 4],
}

/// Bytes of an SL2VLMappingTable (16 SLs × 4 bits).
const SL2VL_LEN: usize = 8;
/// Mellanox's vendor ID: its devices answer MLNXExtendedPortInfo.
const MELLANOX_VENDOR_ID: u32 = 0x0002C9;

#[derive(Debug, Clone)]
struct SwitchState {
    info: SwitchInfo,
    /// The egress port per LID, grown on demand; absent entries are "no route".
    lft: Vec<u8>,
    /// The PortMask per MLID (index = MLID − 0xC000), grown on demand; absent = no ports.
    mft: Vec<PortMask>,
}

/// How the M_Key check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyCheck {
    Pass,
    /// A Get at protect level 1 without the key: PortInfo.M_Key reads as 0.
    PassHidingKey,
    Fail,
}

/// One node's subnet management agent. See the module docs.
#[derive(Debug, Clone)]
pub struct Sma {
    config: SmaConfig,
    description: NodeDescription,
    /// Indexed by port number; a CA's entry 0 is an unused placeholder.
    ports: Vec<Port>,
    switch: Option<SwitchState>,
    sm_info: Option<SmInfo>,
    events: VecDeque<SmaEvent>,
    counters: SmaCounters,
    /// Traps to send, oldest first (at most [`MAX_PENDING_TRAPS`]).
    traps: VecDeque<Outgoing>,
    /// The TID of the last trap sent.
    trap_tid: u64,
    /// The LRH SLID of the SMP being handled (permissive for one from this node).
    requester: Lid,
    /// The host's clock as last given ([`Sma::handle_timeout`]), in microseconds.
    now_us: u64,
}

/// Traps kept for a link layer that does not send them.
const MAX_PENDING_TRAPS: usize = 16;

impl Sma {
    /// An SMA in power-on state: no LIDs, M_Key 0, every physical port Polling/Down until the
    /// link layer calls [`Sma::link_up`], P_KeyTable entry 0 = 0xFFFF (default partition).
    pub fn new(config: SmaConfig) -> Sma {
        let is_switch = config.is_switch();
        let ports = (0..=config.num_ports)
            .map(|p| {
                let mgmt = !is_switch || p == 0;
                let info = default_port_info(&config, p);
                let guids = if mgmt {
                    let mut g = vec![Guid(0); usize::from(config.guid_cap.max(1))];
                    g[0] = config.port_guid(p).unwrap_or_default();
                    g
                } else {
                    Vec::new()
                };
                let cap = if mgmt {
                    config.partition_cap
                } else {
                    config.partition_enforcement_cap
                };
                let mut pkeys = vec![PKey(0); usize::from(cap)];
                if let Some(first) = pkeys.first_mut() {
                    *first = PKey::DEFAULT;
                }
                Port {
                    info,
                    guids,
                    pkeys,
                    link_trained: false,
                    m_key_lease_until: None,
                    sl2vl: BTreeMap::new(),
                    vl_arb: [[0; DATA_LEN]; 4],
                }
            })
            .collect();
        let switch = is_switch.then(|| SwitchState {
            info: SwitchInfo {
                linear_fdb_cap: config.linear_fdb_cap,
                random_fdb_cap: 0,
                multicast_fdb_cap: config.multicast_fdb_cap,
                linear_fdb_top: 0,
                default_port: 0,
                default_multicast_primary_port: 0,
                default_multicast_not_primary_port: 0,
                life_time_value: 0,
                port_state_change: true,
                optimized_sl_to_vl_mapping_programming: 0,
                lids_per_port: 0,
                partition_enforcement_cap: config.partition_enforcement_cap,
                inbound_enforcement_cap: false,
                outbound_enforcement_cap: false,
                filter_raw_inbound_cap: true,
                filter_raw_outbound_cap: true,
                enhanced_port0: config.enhanced_port0,
                multicast_fdb_top: 0,
            },
            lft: Vec::new(),
            mft: Vec::new(),
        });
        Sma {
            description: NodeDescription::new(&config.description),
            config,
            ports,
            switch,
            sm_info: None,
            events: VecDeque::new(),
            counters: SmaCounters::default(),
            traps: VecDeque::new(),
            trap_tid: 0,
            requester: Lid::PERMISSIVE,
            now_us: 0,
        }
    }

    /// Time passed (`now_us`, microseconds on the host's clock, never going back): an M_Key
    /// lease that ran out clears its port's protect bits (IBA §14.2.4.2), so that a new SM
    /// can take over a subnet whose master went away with the key.
    pub fn handle_timeout(&mut self, now_us: u64) {
        self.now_us = self.now_us.max(now_us);
        for port in &mut self.ports {
            if port.m_key_lease_until.is_some_and(|t| t <= self.now_us) {
                port.m_key_lease_until = None;
                port.info.m_key_protect_bits = 0;
            }
        }
    }

    /// When [`Sma::handle_timeout`] next has something to do: the earliest lease's end.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.ports.iter().filter_map(|p| p.m_key_lease_until).min()
    }

    /// The SMA of a topology node.
    pub fn from_node(node: &Node) -> Sma {
        Sma::new(SmaConfig::from_node(node))
    }

    // --- Accessors --------------------------------------------------------------------------

    /// The configuration the node was built with.
    pub fn config(&self) -> &SmaConfig {
        &self.config
    }

    /// Whether this node is a switch.
    pub fn is_switch(&self) -> bool {
        self.switch.is_some()
    }

    /// NumPorts.
    pub fn num_ports(&self) -> u8 {
        self.config.num_ports
    }

    /// The counters.
    pub fn counters(&self) -> &SmaCounters {
        &self.counters
    }

    /// The NodeDescription.
    pub fn description(&self) -> &NodeDescription {
        &self.description
    }

    /// Replaces the NodeDescription (what `echo > node_desc` does on Linux).
    pub fn set_description(&mut self, text: &str) {
        self.description = NodeDescription::new(text);
    }

    /// NodeInfo as an SMP arriving on `in_port` reads it.
    pub fn node_info(&self, in_port: u8) -> NodeInfo {
        NodeInfo {
            base_version: 1,
            class_version: smp::CLASS_VERSION,
            node_type: self.config.node_type,
            num_ports: self.config.num_ports,
            system_image_guid: self.config.system_image_guid,
            node_guid: self.config.node_guid,
            port_guid: self.config.port_guid(in_port).unwrap_or_default(),
            partition_cap: self.config.partition_cap,
            device_id: self.config.device_id,
            revision: self.config.revision,
            local_port_num: in_port,
            vendor_id: self.config.vendor_id & 0x00FF_FFFF,
        }
    }

    /// The stored PortInfo of `port` (LocalPortNum as last served).
    pub fn port_info(&self, port: u8) -> Option<&PortInfo> {
        if self.is_port(port) {
            self.ports.get(usize::from(port)).map(|p| &p.info)
        } else {
            None
        }
    }

    /// PortState of `port`.
    pub fn port_state(&self, port: u8) -> Option<PortState> {
        self.port_info(port).map(|p| p.port_state)
    }

    /// The base LID and LMC that address this node through `port`: the port's own on a CA,
    /// port 0's on a switch.
    pub fn lid(&self, port: u8) -> Option<(Lid, u8)> {
        let info = self.port_info(self.key_port(port))?;
        Some((info.lid, info.lmc))
    }

    /// Whether `dlid` addresses this node on `port`: the permissive LID always does; otherwise
    /// a LID in base..base + 2^LMC of the port (of port 0 on a switch) once one is assigned.
    pub fn accepts_dlid(&self, port: u8, dlid: Lid) -> bool {
        if dlid == Lid::PERMISSIVE {
            return true;
        }
        match self.lid(port) {
            Some((base, lmc)) if base.0 != 0 => {
                let span = 1u32 << lmc.min(7);
                (u32::from(base.0)..u32::from(base.0) + span).contains(&u32::from(dlid.0))
            }
            _ => false,
        }
    }

    /// SwitchInfo (switches).
    pub fn switch_info(&self) -> Option<&SwitchInfo> {
        self.switch.as_ref().map(|s| &s.info)
    }

    /// The LFT entry of `lid` (switches): `None` when the LID is above LinearFDBTop or its
    /// entry is unset (0xFF). Port 0 is the switch itself.
    pub fn lft_port(&self, lid: Lid) -> Option<u8> {
        let sw = self.switch.as_ref()?;
        if lid.0 > sw.info.linear_fdb_top {
            return None;
        }
        match sw.lft.get(usize::from(lid.0)) {
            Some(&p) if p != LinearForwardingTable::NO_PORT => Some(p),
            _ => None,
        }
    }

    /// The MFT entry of multicast LID `mlid` (switches): the ports a packet to it leaves by
    /// (port 0 is the switch itself). Empty when `mlid` is not multicast, beyond
    /// MulticastFDBCap, unset, or above MulticastFDBTop where the switch enforces that.
    pub fn mft_ports(&self, mlid: Lid) -> PortMask {
        let Some(sw) = self.switch.as_ref() else {
            return PortMask::EMPTY;
        };
        if !mlid.is_multicast() {
            return PortMask::EMPTY;
        }
        let top_enforced = self.port_info(0).is_some_and(|i| {
            i.capability_mask & capability_mask::IS_MULTICAST_FDB_TOP_SUPPORTED != 0
        });
        if top_enforced && mlid.0 > sw.info.multicast_fdb_top {
            return PortMask::EMPTY;
        }
        let index = usize::from(mlid.0 - MulticastForwardingTable::MLID_BASE);
        sw.mft.get(index).copied().unwrap_or_default()
    }

    /// The GUIDInfo entries of `port` (a switch's port 0 only).
    pub fn guids(&self, port: u8) -> Option<&[Guid]> {
        self.ports
            .get(usize::from(port))
            .filter(|_| self.is_port(port))
            .map(|p| p.guids.as_slice())
    }

    /// The P_KeyTable of `port`.
    pub fn pkeys(&self, port: u8) -> Option<&[PKey]> {
        self.ports
            .get(usize::from(port))
            .filter(|_| self.is_port(port))
            .map(|p| p.pkeys.as_slice())
    }

    /// The SMInfo of the SM running on this node, if any.
    pub fn sm_info(&self) -> Option<&SmInfo> {
        self.sm_info.as_ref()
    }

    /// Installs (or removes) the SMInfo of an SM running on this node. Without one, SMInfo
    /// goes to the SM holding the port's IsSM ([`Sma::is_for_local_sm`]), else it is an
    /// unsupported attribute.
    pub fn set_sm_info(&mut self, info: Option<SmInfo>) {
        self.sm_info = info;
    }

    /// Sets PortInfo.CapabilityMask of `port` (a local SM sets IsSM on its port). A change
    /// is reported to the master SM by Trap 144, Local Changes (IBA §14.2.5.1 table 132:
    /// IsGeneric, Type 4 informational, DataDetails the port's LID and its new
    /// CapabilityMask, as opensm's `ntc_144`): opensm sweeps on it, and so meets an SM that
    /// just started or stopped there.
    pub fn set_capability_mask(&mut self, port: u8, mask: u32) {
        let Some(p) = self.port_mut(port) else {
            return;
        };
        if p.info.capability_mask == mask {
            return;
        }
        p.info.capability_mask = mask;
        let own = p.info.lid;
        let mut d = [0u8; DATA_LEN];
        d[0] = 0x80 | 4;
        d[3] = if self.is_switch() { 2 } else { 1 };
        d[4..6].copy_from_slice(&144u16.to_be_bytes());
        d[6..8].copy_from_slice(&own.0.to_be_bytes());
        d[12..14].copy_from_slice(&own.0.to_be_bytes());
        d[16..20].copy_from_slice(&mask.to_be_bytes());
        self.queue_trap(port, self.key_port(port), d);
    }

    /// The next pending event, oldest first.
    pub fn poll_event(&mut self) -> Option<SmaEvent> {
        self.events.pop_front()
    }

    /// The next trap to send to the master SM, LID-routed, oldest first.
    pub fn poll_trap(&mut self) -> Option<Outgoing> {
        self.traps.pop_front()
    }

    // --- The link layer's reports -----------------------------------------------------------

    /// The link of `port` trained at `rate`: PortPhysicalState LinkUp, PortState Init (from
    /// Down), the width and speed fields as ibsim sets them. Ignored for port 0 and for
    /// ports that do not exist; a Disabled port stays Disabled.
    pub fn link_up(&mut self, port: u8, rate: LinkRate) {
        if port == 0 || !self.is_port(port) {
            return;
        }
        let mtu_cap = self.config.mtu_cap;
        let changed = {
            let Some(p) = self.port_mut(port) else {
                return;
            };
            p.link_trained = true;
            if p.info.port_physical_state == PortPhysicalState::Disabled {
                return;
            }
            let i = &mut p.info;
            i.port_physical_state = PortPhysicalState::LinkUp;
            i.link_width_active = rate.width.bit();
            i.link_width_enabled = rate.width.enabled_mask() & i.link_width_supported;
            i.link_speed_active = rate.speed.speed_active();
            i.link_speed_ext_active = rate.speed.ext_speed_active();
            i.link_speed_enabled = rate.speed.enabled_mask() & i.link_speed_supported;
            i.neighbor_mtu = mtu_cap;
            let was = i.port_state;
            if matches!(i.port_state, PortState::Down) {
                i.port_state = PortState::Init;
            }
            was != i.port_state
        };
        if changed {
            self.note_port_state_change();
        }
    }

    /// The link of `port` went down: PortPhysicalState Polling (Disabled stays), PortState
    /// Down.
    pub fn link_down(&mut self, port: u8) {
        if port == 0 || !self.is_port(port) {
            return;
        }
        let changed = {
            let Some(p) = self.port_mut(port) else {
                return;
            };
            p.link_trained = false;
            let i = &mut p.info;
            if i.port_physical_state != PortPhysicalState::Disabled {
                i.port_physical_state = PortPhysicalState::Polling;
            }
            let was = i.port_state;
            i.port_state = PortState::Down;
            was != PortState::Down
        };
        if changed {
            self.note_port_state_change();
        }
    }

    /// Whether `port` can carry SMPs: its physical link is up (a switch's port 0 always is).
    pub fn link_is_up(&self, port: u8) -> bool {
        self.port_info(port)
            .is_some_and(|i| i.port_physical_state == PortPhysicalState::LinkUp)
    }

    /// A data packet arrived on an Armed port: IBA §7.2 moves it to Active. Returns whether
    /// the port now passes data (Active).
    pub fn note_data_received(&mut self, port: u8) -> bool {
        match self.port_mut(port) {
            Some(p) if p.info.port_state == PortState::Armed => {
                p.info.port_state = PortState::Active;
                true
            }
            Some(p) => p.info.port_state == PortState::Active,
            None => false,
        }
    }

    // --- The SMA ------------------------------------------------------------------------------

    /// Answers a SubnGet or SubnSet that arrived on `in_port` (for a switch, 0 = from its own
    /// SM). Returns the GetResp to send back, or `None` when the SMP gets no response: it is
    /// not a request (responses, traps, TrapRepress), it failed the M_Key check, or `in_port`
    /// is not a port of this node. Directed-route routing is [`Sma::process_dr`]'s job: give
    /// this the SMP it delivered, so the response keeps the route.
    pub fn handle_smp(&mut self, in_port: u8, request: &smp::Repr) -> Option<smp::Repr> {
        let h = &request.header;
        if !h.mgmt_class.is_smp()
            || h.method.is_response()
            || matches!(h.method, Method::Trap | Method::TrapRepress | Method::Send)
            || !self.is_port(in_port)
            || (!self.is_switch() && in_port == 0)
        {
            self.counters.ignored += 1;
            return None;
        }
        self.counters.requests += 1;
        if h.base_version != 1 || h.class_version != smp::CLASS_VERSION {
            return Some(self.respond(request, status::BAD_VERSION, request.data));
        }
        if !matches!(h.method, Method::Get | Method::Set) {
            return Some(self.respond(request, status::UNSUPPORTED_METHOD, request.data));
        }
        let check = self.check_m_key(in_port, request);
        if check == KeyCheck::Fail {
            return None;
        }
        let set = h.method == Method::Set;
        let result = match h.attr_id {
            AttrId::NODE_DESCRIPTION if !set => Ok(self.description.to_data()),
            AttrId::NODE_INFO if !set => Ok(self.node_info(in_port).to_data()),
            AttrId::PORT_INFO => self.port_info_attr(in_port, request, check),
            AttrId::SWITCH_INFO if self.is_switch() => self.switch_info_attr(request),
            AttrId::LINEAR_FORWARDING_TABLE if self.is_switch() => self.lft_attr(request),
            AttrId::MULTICAST_FORWARDING_TABLE if self.is_switch() => self.mft_attr(request),
            AttrId::GUID_INFO => self.guid_info_attr(in_port, request),
            AttrId::P_KEY_TABLE => self.pkey_table_attr(in_port, request),
            AttrId::SL_TO_VL_TABLE => self.sl2vl_attr(in_port, request),
            AttrId::VL_ARBITRATION_TABLE => self.vl_arb_attr(in_port, request),
            AttrId::MLNX_EXTENDED_PORT_INFO
                if !set && self.config.vendor_id & 0x00FF_FFFF == MELLANOX_VENDOR_ID =>
            {
                self.mlnx_ext_port_info_attr(in_port, request)
            }
            AttrId::SM_INFO if self.sm_info.is_some() => self.sm_info_attr(in_port, request),
            _ => Err(status::UNSUPPORTED_METHOD_ATTR),
        };
        Some(match result {
            Ok(data) => self.respond(request, status::SUCCESS, data),
            Err(code) => self.respond(request, code, request.data),
        })
    }

    /// Whether `request` is an SMInfo Get or Set for an SM that is not this SMA's: a program
    /// holding the IsSM file of `in_port` (the real opensm) without softib's `SetSm`. As the
    /// kernel's MAD layer hands an SMP its HCA does not consume to the agent registered for
    /// it, such a request goes to the local SM (`SmiOutput::ToSm`), which answers it itself
    /// (opensm's `osm_sminfo_rcv`); with no SM on the port [`Sma::handle_smp`] answers
    /// UnsupportedMethodAttr.
    pub fn is_for_local_sm(&self, in_port: u8, request: &smp::Repr) -> bool {
        let h = &request.header;
        h.attr_id == AttrId::SM_INFO
            && h.mgmt_class.is_smp()
            && matches!(h.method, Method::Get | Method::Set)
            && h.base_version == 1
            && h.class_version == smp::CLASS_VERSION
            && self.sm_info.is_none()
            && self.is_port(in_port)
            && self
                .port_info(self.key_port(in_port))
                .is_some_and(|p| p.capability_mask & capability_mask::IS_SM != 0)
    }

    fn respond(&mut self, request: &smp::Repr, code: u16, data: [u8; DATA_LEN]) -> smp::Repr {
        self.counters.responses += 1;
        match code {
            status::BAD_VERSION => self.counters.bad_version += 1,
            status::UNSUPPORTED_METHOD | status::UNSUPPORTED_METHOD_ATTR => {
                self.counters.unsupported += 1
            }
            status::INVALID_ATTR_VALUE => self.counters.invalid_value += 1,
            _ => {}
        }
        request.response(code, data)
    }

    /// Whether `port` is a port number of this node (0 only for switches).
    fn is_port(&self, port: u8) -> bool {
        port <= self.config.num_ports && (self.is_switch() || port != 0)
    }

    fn port_mut(&mut self, port: u8) -> Option<&mut Port> {
        if self.is_port(port) {
            self.ports.get_mut(usize::from(port))
        } else {
            None
        }
    }

    /// The port whose M_Key, LID and GUIDs stand for the node: port 0 on a switch, the port
    /// itself on a CA.
    fn key_port(&self, port: u8) -> u8 {
        if self.is_switch() {
            0
        } else {
            port
        }
    }

    /// A switch port's PortState went from Down to Init or back (IBA §14.2.5.4
    /// PortStateChange): SwitchInfo says so, and the master SM hears it at once by Trap 128,
    /// Link State Changed (§14.2.5.1 table 132: IsGeneric, Type 1 urgent, ProducerType 2
    /// switch, DataDetails the switch's LID, as opensm's `ntc_128`), on which it sweeps.
    fn note_port_state_change(&mut self) {
        let Some(sw) = self.switch.as_mut() else {
            return;
        };
        sw.info.port_state_change = true;
        let Some(own) = self.ports.first().map(|p| p.info.lid) else {
            return;
        };
        let mut d = [0u8; DATA_LEN];
        d[0] = 0x80 | 1;
        d[3] = 2;
        d[4..6].copy_from_slice(&128u16.to_be_bytes());
        d[6..8].copy_from_slice(&own.0.to_be_bytes());
        d[10..12].copy_from_slice(&own.0.to_be_bytes());
        self.queue_trap(0, 0, d);
    }

    /// IBA §14.2.4: see the module docs.
    fn check_m_key(&mut self, in_port: u8, request: &smp::Repr) -> KeyCheck {
        let key_port = self.key_port(in_port);
        let now_us = self.now_us;
        let Some(port) = self.port_mut(key_port) else {
            return KeyCheck::Fail;
        };
        let stored = port.info.m_key;
        if stored == 0 {
            return KeyCheck::Pass;
        }
        if request.m_key == stored {
            // The SM that holds the key is alive: its lease stops.
            port.m_key_lease_until = None;
            return KeyCheck::Pass;
        }
        let protect = port.info.m_key_protect_bits;
        match request.header.method {
            Method::Get if protect == 0 => KeyCheck::Pass,
            Method::Get if protect == 1 => KeyCheck::PassHidingKey,
            _ => {
                // A failed check starts the lease if it is not running (a period of 0:
                // never).
                let period = u64::from(port.info.m_key_lease_period);
                if period != 0 && port.m_key_lease_until.is_none() {
                    port.m_key_lease_until = Some(now_us + period * 1_000_000);
                }
                port.info.m_key_violations = port.info.m_key_violations.saturating_add(1);
                self.counters.m_key_violations += 1;
                self.bad_m_key_trap(in_port, key_port, request);
                KeyCheck::Fail
            }
        }
    }

    /// Queues Trap 256, Bad M_Key (IBA §14.2.5.1 table 133, as opensm's `ntc_256` lays it
    /// out), for the master SM of `key_port`, if the port knows one and supports traps.
    fn bad_m_key_trap(&mut self, in_port: u8, key_port: u8, request: &smp::Repr) {
        let Some(own) = self.ports.get(usize::from(key_port)).map(|p| p.info.lid) else {
            return;
        };
        let mut d = [0u8; DATA_LEN];
        // IsGeneric, Type 2 (security); ProducerType 1 (CA) or 2 (switch); TrapNumber 256.
        d[0] = 0x80 | 2;
        d[3] = if self.is_switch() { 2 } else { 1 };
        d[4..6].copy_from_slice(&256u16.to_be_bytes());
        d[6..8].copy_from_slice(&own.0.to_be_bytes());
        // DataDetails: the requester's LID, the DR SLID, method, attribute, modifier, M_Key.
        d[12..14].copy_from_slice(&self.requester.0.to_be_bytes());
        let dr_slid = request.dr.map_or(Lid(0), |dr| dr.dr_slid);
        d[14..16].copy_from_slice(&dr_slid.0.to_be_bytes());
        d[16] = u8::from(request.header.method);
        d[18..20].copy_from_slice(&request.header.attr_id.0.to_be_bytes());
        d[20..24].copy_from_slice(&request.header.attr_mod.to_be_bytes());
        d[24..32].copy_from_slice(&request.m_key.to_be_bytes());
        self.queue_trap(in_port, key_port, d);
    }

    /// Queues a SubnTrap(Notice) with `notice` for the master SM that the PortInfo of
    /// `key_port` names, if it names one, the port has a LID and supports traps: LID-routed,
    /// from a CA out of `in_port`, from a switch by its LFT.
    fn queue_trap(&mut self, in_port: u8, key_port: u8, notice: [u8; DATA_LEN]) {
        let Some(port) = self.ports.get(usize::from(key_port)) else {
            return;
        };
        let info = &port.info;
        if info.master_sm_lid.0 == 0
            || info.lid.0 == 0
            || info.capability_mask & capability_mask::IS_TRAP_SUPPORTED == 0
        {
            return;
        }
        let (sm, own, m_key) = (info.master_sm_lid, info.lid, info.m_key);
        self.trap_tid = self.trap_tid.wrapping_add(1);
        let smp = smp::Repr::new(
            Method::Trap,
            self.trap_tid,
            AttrId::NOTICE,
            0,
            m_key,
            None,
            notice,
        );
        let out_port = if self.is_switch() {
            self.lft_port(sm).unwrap_or(0)
        } else {
            in_port
        };
        if self.traps.len() >= MAX_PENDING_TRAPS {
            self.traps.pop_front();
        }
        self.traps.push_back(Outgoing {
            out_port,
            dlid: sm,
            slid: own,
            smp,
        });
    }

    /// The port a PortInfo attribute modifier names: on a CA 0 means the arrival port.
    fn port_info_target(&self, in_port: u8, attr_mod: u32) -> Option<u8> {
        // Bit 31 is SMSupportsExtendedSpeeds (IBA §14.2.5.6, as opensm sets it for ports whose
        // CapabilityMask says IsExtendedSpeedsSupported); bits 0-7 are the port.
        if attr_mod & 0x7fff_ff00 != 0 {
            return None;
        }
        let p = (attr_mod & 0xff) as u8;
        if self.is_switch() {
            (p <= self.config.num_ports).then_some(p)
        } else if p == 0 {
            Some(in_port)
        } else {
            (p <= self.config.num_ports).then_some(p)
        }
    }

    fn port_info_attr(
        &mut self,
        in_port: u8,
        request: &smp::Repr,
        check: KeyCheck,
    ) -> Result<[u8; DATA_LEN], u16> {
        let port = self
            .port_info_target(in_port, request.header.attr_mod)
            .ok_or(status::INVALID_ATTR_VALUE)?;
        if request.header.method == Method::Set {
            let new = PortInfo::parse(&request.data).map_err(|_| status::INVALID_ATTR_VALUE)?;
            self.set_port_info(port, &new)?;
        }
        let mut info = self
            .port_info(port)
            .copied()
            .ok_or(status::INVALID_ATTR_VALUE)?;
        info.local_port_num = in_port;
        if check == KeyCheck::PassHidingKey {
            info.m_key = 0;
        }
        Ok(info.to_data())
    }

    /// Applies a PortInfo Set to `port`, all or nothing.
    fn set_port_info(&mut self, port: u8, new: &PortInfo) -> Result<(), u16> {
        const INVALID: u16 = status::INVALID_ATTR_VALUE;
        let is_switch = self.is_switch();
        let switch_port0 = is_switch && port == 0;
        // LID, M_Key and friends belong to CA ports and a switch's port 0 (IBA §14.2.5.6).
        let addressed = !is_switch || port == 0;
        let vl_cap = self.config.vl_cap;
        let mtu_cap = u8::from(self.config.mtu_cap);
        let Some(p) = self.port_mut(port) else {
            return Err(INVALID);
        };
        let cur = p.info;
        let mut next = cur;
        let mut events = Vec::new();

        if addressed {
            let unicast = |lid: Lid| lid.0 <= MAX_UNICAST_LID;
            if !unicast(new.lid) || !unicast(new.master_sm_lid) {
                return Err(INVALID);
            }
            next.m_key = new.m_key;
            next.gid_prefix = new.gid_prefix;
            next.lid = new.lid;
            next.master_sm_lid = new.master_sm_lid;
            next.master_sm_sl = new.master_sm_sl;
            next.lmc = new.lmc;
            next.m_key_lease_period = new.m_key_lease_period;
            next.m_key_protect_bits = new.m_key_protect_bits;
            next.subnet_timeout = new.subnet_timeout;
            if new.client_reregister && !is_switch {
                events.push(SmaEvent::ClientReregister { port });
            }
        }

        if !switch_port0 {
            next.link_width_enabled = match new.link_width_enabled {
                0 => cur.link_width_enabled,
                0xFF => cur.link_width_supported,
                w if w & !cur.link_width_supported == 0 => w,
                _ => return Err(INVALID),
            };
            next.link_speed_enabled = match new.link_speed_enabled {
                0 => cur.link_speed_enabled,
                0xF => cur.link_speed_supported,
                s if s & !cur.link_speed_supported == 0 => s,
                _ => return Err(INVALID),
            };
            next.link_down_default_state = match new.link_down_default_state {
                0 => cur.link_down_default_state,
                s @ (1 | 2) => s,
                _ => return Err(INVALID),
            };
            let mtu = u8::from(new.neighbor_mtu);
            if !(1..=mtu_cap).contains(&mtu) {
                return Err(INVALID);
            }
            next.neighbor_mtu = new.neighbor_mtu;
            next.operational_vls = match new.operational_vls {
                0 => cur.operational_vls,
                v if v <= vl_cap => v,
                _ => return Err(INVALID),
            };
            next.vl_high_limit = new.vl_high_limit;
            next.hoq_life = new.hoq_life;
            next.vl_stall_count = new.vl_stall_count;
            next.partition_enforcement_inbound = new.partition_enforcement_inbound;
            next.partition_enforcement_outbound = new.partition_enforcement_outbound;
            next.filter_raw_inbound = new.filter_raw_inbound;
            next.filter_raw_outbound = new.filter_raw_outbound;
            next.local_phy_errors = new.local_phy_errors;
            next.overrun_errors = new.overrun_errors;

            // Physical state first: Disabled takes the port down whatever else is asked.
            match new.port_physical_state {
                PortPhysicalState::NoChange => {}
                PortPhysicalState::Disabled => {
                    next.port_physical_state = PortPhysicalState::Disabled;
                    next.port_state = PortState::Down;
                }
                PortPhysicalState::Polling => {
                    if cur.port_physical_state == PortPhysicalState::Disabled {
                        next.port_physical_state = PortPhysicalState::Polling;
                        events.push(SmaEvent::LinkEnabled { port });
                    }
                }
                _ => return Err(INVALID),
            }
            let phys_up = next.port_physical_state == PortPhysicalState::LinkUp;
            next.port_state =
                port_state_transition(next.port_state, new.port_state, phys_up).ok_or(INVALID)?;
            // Setting Down leaves the physical state to the link layer, which takes the link
            // down after this response has left (so the SM hears back) and retrains it. A
            // Disabled port sends nothing more, not even this response (as qib does).
            if next.port_state == PortState::Down && cur.port_state != PortState::Down {
                events.push(SmaEvent::LinkDown {
                    port,
                    retrain: next.port_physical_state != PortPhysicalState::Disabled,
                });
            }
        } else if !matches!(
            new.port_state,
            PortState::NoChange | PortState::Down | PortState::Armed | PortState::Active
        ) {
            return Err(INVALID);
        }
        next.m_key_violations = new.m_key_violations;
        next.p_key_violations = new.p_key_violations;
        next.q_key_violations = new.q_key_violations;

        p.info = next;
        self.events.extend(events);
        Ok(())
    }

    fn switch_info_attr(&mut self, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let sw = self
            .switch
            .as_mut()
            .ok_or(status::UNSUPPORTED_METHOD_ATTR)?;
        if request.header.method == Method::Set {
            let new = SwitchInfo::parse(&request.data).map_err(|_| status::INVALID_ATTR_VALUE)?;
            if u32::from(new.linear_fdb_top) >= u32::from(sw.info.linear_fdb_cap).max(1)
                || new.linear_fdb_top > MAX_UNICAST_LID
            {
                return Err(status::INVALID_ATTR_VALUE);
            }
            let mcast_end = u32::from(MulticastForwardingTable::MLID_BASE)
                + u32::from(sw.info.multicast_fdb_cap);
            if new.multicast_fdb_top >= MulticastForwardingTable::MLID_BASE
                && u32::from(new.multicast_fdb_top) >= mcast_end
            {
                return Err(status::INVALID_ATTR_VALUE);
            }
            let i = &mut sw.info;
            i.linear_fdb_top = new.linear_fdb_top;
            i.default_port = new.default_port;
            i.default_multicast_primary_port = new.default_multicast_primary_port;
            i.default_multicast_not_primary_port = new.default_multicast_not_primary_port;
            i.life_time_value = new.life_time_value;
            i.optimized_sl_to_vl_mapping_programming = new.optimized_sl_to_vl_mapping_programming;
            i.multicast_fdb_top = new.multicast_fdb_top;
            // PortStateChange is cleared by writing 1 (IBA §14.2.5.4).
            if new.port_state_change {
                i.port_state_change = false;
            }
        }
        Ok(sw.info.to_data())
    }

    fn lft_attr(&mut self, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let num_ports = self.config.num_ports;
        let sw = self
            .switch
            .as_mut()
            .ok_or(status::UNSUPPORTED_METHOD_ATTR)?;
        let per = LinearForwardingTable::ENTRIES_PER_BLOCK;
        let block =
            usize::try_from(request.header.attr_mod).map_err(|_| status::INVALID_ATTR_VALUE)?;
        let start = block.checked_mul(per).ok_or(status::INVALID_ATTR_VALUE)?;
        if start >= usize::from(sw.info.linear_fdb_cap) {
            return Err(status::INVALID_ATTR_VALUE);
        }
        if request.header.method == Method::Set {
            let new = LinearForwardingTable::parse(&request.data)
                .map_err(|_| status::INVALID_ATTR_VALUE)?;
            if new
                .ports
                .iter()
                .any(|&p| p != LinearForwardingTable::NO_PORT && p > num_ports)
            {
                return Err(status::INVALID_ATTR_VALUE);
            }
            if sw.lft.len() < start + per {
                sw.lft.resize(start + per, LinearForwardingTable::NO_PORT);
            }
            sw.lft[start..start + per].copy_from_slice(&new.ports);
        }
        let mut out = LinearForwardingTable::default();
        if let Some(stored) = sw.lft.get(start..start + per) {
            out.ports.copy_from_slice(stored);
        }
        Ok(out.to_data())
    }

    fn mft_attr(&mut self, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let num_ports = self.config.num_ports;
        let sw = self
            .switch
            .as_mut()
            .ok_or(status::UNSUPPORTED_METHOD_ATTR)?;
        let per = MulticastForwardingTable::ENTRIES_PER_BLOCK;
        let (block, position) = MulticastForwardingTable::from_attr_mod(request.header.attr_mod);
        let start = usize::from(block) * per;
        if start >= usize::from(sw.info.multicast_fdb_cap)
            || usize::from(position) * MulticastForwardingTable::PORTS_PER_MASK
                > usize::from(num_ports)
        {
            return Err(status::INVALID_ATTR_VALUE);
        }
        if request.header.method == Method::Set {
            let new = MulticastForwardingTable::parse(&request.data)
                .map_err(|_| status::INVALID_ATTR_VALUE)?;
            // Bits of ports the switch does not have must be clear.
            let first = u32::from(position) * 16;
            let valid: u16 = (0..16u32)
                .filter(|i| first + i <= u32::from(num_ports))
                .fold(0, |m, i| m | (1 << i));
            if new.port_masks.iter().any(|&m| m & !valid != 0) {
                return Err(status::INVALID_ATTR_VALUE);
            }
            let end = (start + per).min(usize::from(sw.info.multicast_fdb_cap));
            if sw.mft.len() < end {
                sw.mft.resize(end, PortMask::EMPTY);
            }
            for (entry, &m) in sw.mft[start..end].iter_mut().zip(new.port_masks.iter()) {
                entry.set_mask16(position, m);
            }
        }
        let mut out = MulticastForwardingTable::default();
        for (i, m) in out.port_masks.iter_mut().enumerate() {
            if let Some(entry) = sw.mft.get(start + i) {
                *m = entry.mask16(position);
            }
        }
        Ok(out.to_data())
    }

    fn guid_info_attr(&mut self, in_port: u8, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let port = self.key_port(in_port);
        let p = self.port_mut(port).ok_or(status::INVALID_ATTR_VALUE)?;
        let block =
            usize::try_from(request.header.attr_mod).map_err(|_| status::INVALID_ATTR_VALUE)?;
        let start = block.checked_mul(8).ok_or(status::INVALID_ATTR_VALUE)?;
        if start >= p.guids.len() {
            return Err(status::INVALID_ATTR_VALUE);
        }
        if request.header.method == Method::Set {
            let new = GuidInfo::parse(&request.data).map_err(|_| status::INVALID_ATTR_VALUE)?;
            for (i, g) in new.guids.iter().enumerate() {
                let at = start + i;
                // Entry 0 is the port GUID, which only the manufacturer sets.
                if at != 0 {
                    if let Some(slot) = p.guids.get_mut(at) {
                        *slot = *g;
                    }
                }
            }
        }
        let mut out = GuidInfo::default();
        for (i, slot) in out.guids.iter_mut().enumerate() {
            *slot = p.guids.get(start + i).copied().unwrap_or_default();
        }
        Ok(out.to_data())
    }

    fn pkey_table_attr(&mut self, in_port: u8, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let attr_mod = request.header.attr_mod;
        let block = (attr_mod & 0xFFFF) as usize;
        let port = if self.is_switch() {
            u8::try_from((attr_mod >> 16) & 0xFF).unwrap_or(u8::MAX)
        } else {
            in_port
        };
        if attr_mod >> 24 != 0 {
            return Err(status::INVALID_ATTR_VALUE);
        }
        let p = self.port_mut(port).ok_or(status::INVALID_ATTR_VALUE)?;
        let start = block * 32;
        if start >= p.pkeys.len() {
            return Err(status::INVALID_ATTR_VALUE);
        }
        if request.header.method == Method::Set {
            let new = PKeyTable::parse(&request.data).map_err(|_| status::INVALID_ATTR_VALUE)?;
            for (i, k) in new.pkeys.iter().enumerate() {
                if let Some(slot) = p.pkeys.get_mut(start + i) {
                    *slot = *k;
                }
            }
        }
        let mut out = PKeyTable::default();
        for (i, slot) in out.pkeys.iter_mut().enumerate() {
            *slot = p.pkeys.get(start + i).copied().unwrap_or_default();
        }
        Ok(out.to_data())
    }

    /// SL2VLMappingTable (IBA §14.2.5.8). On a switch the attribute modifier names the
    /// input port (bits 8–15) and output port (bits 0–7); on a CA it is the arrival port's.
    /// A Set mapping an SL to a VL beyond the port's VLCap (other than VL15, which drops)
    /// is an invalid value.
    fn sl2vl_attr(&mut self, in_port: u8, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let m = request.header.attr_mod;
        let (input, output) = if self.is_switch() {
            (((m >> 8) & 0xFF) as u8, (m & 0xFF) as u8)
        } else {
            (0, in_port)
        };
        if (self.is_switch() && (m >> 16 != 0 || !self.is_port(input)))
            || (output == 0 && self.is_switch() && input != 0)
        {
            return Err(status::INVALID_ATTR_VALUE);
        }
        // VLCap 1..=5: VL0, VL0–1, VL0–3, VL0–7, VL0–14.
        let vls = 1u8 << self.config.vl_cap.clamp(1, 5).saturating_sub(1);
        let p = self.port_mut(output).ok_or(status::INVALID_ATTR_VALUE)?;
        if request.header.method == Method::Set {
            let mut t = [0u8; SL2VL_LEN];
            t.copy_from_slice(&request.data[..SL2VL_LEN]);
            let bad = t
                .iter()
                .flat_map(|b| [b >> 4, b & 0x0F])
                .any(|vl| vl >= vls.min(15) && vl != 15);
            if bad {
                return Err(status::INVALID_ATTR_VALUE);
            }
            p.sl2vl.insert(input, t);
        }
        let mut out = [0u8; DATA_LEN];
        if let Some(t) = p.sl2vl.get(&input) {
            out[..SL2VL_LEN].copy_from_slice(t);
        }
        Ok(out)
    }

    /// VLArbitrationTable (IBA §14.2.5.9): block 1–4 in bits 16–31 of the attribute
    /// modifier, the port in bits 0–7 on a switch.
    fn vl_arb_attr(&mut self, in_port: u8, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let m = request.header.attr_mod;
        let block = (m >> 16) as usize;
        let port = if self.is_switch() {
            (m & 0xFF) as u8
        } else {
            in_port
        };
        if !(1..=4).contains(&block) {
            return Err(status::INVALID_ATTR_VALUE);
        }
        let p = self.port_mut(port).ok_or(status::INVALID_ATTR_VALUE)?;
        if request.header.method == Method::Set {
            p.vl_arb[block - 1] = request.data;
        }
        Ok(p.vl_arb[block - 1])
    }

    /// MLNXExtendedPortInfo (Mellanox's vendor attribute 0xFF90, port in the attribute
    /// modifier on a switch): StateChangeEnable and the FDR10 LinkSpeedSupported, Enabled
    /// and Active bits. softib's links run at the IBA speeds PortInfo gives, never FDR10, so
    /// every field is 0, as a QDR ConnectX-3 or SX6036 answers.
    fn mlnx_ext_port_info_attr(
        &mut self,
        in_port: u8,
        request: &smp::Repr,
    ) -> Result<[u8; DATA_LEN], u16> {
        let port = if self.is_switch() {
            (request.header.attr_mod & 0xFF) as u8
        } else {
            in_port
        };
        // opensm asks a switch's port 0 too.
        if !self.is_port(port) {
            return Err(status::INVALID_ATTR_VALUE);
        }
        Ok([0u8; DATA_LEN])
    }

    fn sm_info_attr(&mut self, in_port: u8, request: &smp::Repr) -> Result<[u8; DATA_LEN], u16> {
        let mut info = self.sm_info.ok_or(status::UNSUPPORTED_METHOD_ATTR)?;
        if request.header.method == Method::Set {
            let control = SmControl::from_attr_mod(request.header.attr_mod)
                .ok_or(status::INVALID_ATTR_VALUE)?;
            let from = SmInfo::parse(&request.data).map_err(|_| status::INVALID_ATTR_VALUE)?;
            self.events.push_back(SmaEvent::SmInfoSet {
                port: in_port,
                control,
                from,
            });
        }
        // SM_Key is only shown to a requester that passes the M_Key check (IBA §14.2.5.13):
        // one that gives the port's M_Key, or anyone while the M_Key is 0, which every key
        // matches (§14.2.4.1). opensm answers so (`smi_rcv_process_get_request`), and an
        // opensm ignores another SM whose SMInfo does not carry its own SM_Key.
        let stored = self
            .port_info(self.key_port(in_port))
            .map_or(0, |p| p.m_key);
        if stored != 0 && request.m_key != stored {
            info.sm_key = 0;
        }
        Ok(info.to_data())
    }

    // --- Directed route ---------------------------------------------------------------------

    fn dr_drop(&mut self, reason: DrDrop) -> DrAction {
        self.counters.dr_dropped[reason.index()] += 1;
        DrAction::Drop(reason)
    }

    /// Checks that `port` can be an egress of a directed route.
    fn dr_egress(&self, port: u8) -> Result<u8, DrDrop> {
        if port == 0 || port > self.config.num_ports {
            Err(DrDrop::BadEgressPort)
        } else if !self.link_is_up(port) {
            Err(DrDrop::EgressPortDown)
        } else {
            Ok(port)
        }
    }

    fn dr_forward(&mut self, out_port: Result<u8, DrDrop>, smp: smp::Repr) -> DrAction {
        match out_port {
            Ok(out_port) => {
                self.counters.dr_forwarded += 1;
                DrAction::Forward { out_port, smp }
            }
            Err(reason) => self.dr_drop(reason),
        }
    }

    /// The SMI's handling of a directed-route SMP received on `in_port` (IBA §14.2.2.2 and
    /// §14.2.2.4 receive rules; see the module docs).
    pub fn process_dr(&mut self, in_port: u8, received: &smp::Repr) -> DrAction {
        let Some(dr) = received.dr else {
            return self.dr_drop(DrDrop::NotDirectedRoute);
        };
        if in_port == 0 || in_port > self.config.num_ports {
            return self.dr_drop(DrDrop::BadIngressPort);
        }
        if dr.hop_cnt > MAX_HOPS {
            return self.dr_drop(DrDrop::HopCountTooLarge);
        }
        let is_switch = self.is_switch();
        let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
        let mut out = *received;
        let Some(d) = out.dr.as_mut() else {
            return self.dr_drop(DrDrop::NotDirectedRoute);
        };
        if !dr.direction_inbound {
            if cnt > 0 && ptr == 0 {
                // C14-9:1: the sender should have advanced the hop pointer.
                self.dr_drop(DrDrop::BadHopPointer)
            } else if ptr > 0 && ptr < cnt {
                // C14-9:2: an intermediate hop; only switches relay.
                if !is_switch {
                    return self.dr_drop(DrDrop::NotASwitch);
                }
                d.return_path[usize::from(ptr)] = in_port;
                let egress = self.dr_egress(d.initial_path[usize::from(ptr) + 1]);
                d.hop_ptr = ptr + 1;
                self.dr_forward(egress, out)
            } else if ptr == cnt {
                // C14-9:3: the end of the directed part.
                if dr.dr_dlid != Lid::PERMISSIVE {
                    return self.dr_drop(DrDrop::LidRoutedPart);
                }
                if cnt > 0 {
                    d.return_path[usize::from(ptr)] = in_port;
                }
                d.hop_ptr = ptr + 1;
                DrAction::Deliver(out)
            } else if u16::from(ptr) == u16::from(cnt) + 1 {
                // C14-9:4: already at the destination.
                DrAction::Deliver(out)
            } else {
                // C14-9:5.
                self.dr_drop(DrDrop::BadHopPointer)
            }
        } else if cnt > 0 && u16::from(ptr) == u16::from(cnt) + 1 {
            // C14-13:1: the responder should have stepped the hop pointer back.
            self.dr_drop(DrDrop::BadHopPointer)
        } else if (2..=cnt).contains(&ptr) {
            // C14-13:2: an intermediate hop on the way back.
            if !is_switch {
                return self.dr_drop(DrDrop::NotASwitch);
            }
            let egress = self.dr_egress(d.return_path[usize::from(ptr) - 1]);
            d.hop_ptr = ptr - 1;
            self.dr_forward(egress, out)
        } else if ptr == 1 {
            // C14-13:3: back at the requester.
            if dr.dr_slid != Lid::PERMISSIVE {
                return self.dr_drop(DrDrop::LidRoutedPart);
            }
            d.hop_ptr = 0;
            DrAction::Deliver(out)
        } else if ptr == 0 {
            // C14-13:4.
            DrAction::Deliver(out)
        } else {
            // C14-13:5.
            self.dr_drop(DrDrop::BadHopPointer)
        }
    }

    /// The SMI's handling of a directed-route SMP this node originates through `port` (IBA
    /// §14.2.2.1 and §14.2.2.3 send rules): a request of the local SM (D = 0, HopPointer 0) or
    /// the SMA's response (D = 1, HopPointer = HopCount + 1). On a CA each port has its own
    /// SMI, so the SMP must leave through `port`; a switch's SMI is port 0 and may use any
    /// port. A request with HopCount 0 (or its response) stays in the node: `Deliver`.
    pub fn send_dr(&mut self, port: u8, smp: &smp::Repr) -> DrAction {
        let Some(dr) = smp.dr else {
            return self.dr_drop(DrDrop::NotDirectedRoute);
        };
        if dr.hop_cnt > MAX_HOPS {
            return self.dr_drop(DrDrop::HopCountTooLarge);
        }
        let is_switch = self.is_switch();
        let (ptr, cnt) = (dr.hop_ptr, dr.hop_cnt);
        let mut out = *smp;
        let Some(d) = out.dr.as_mut() else {
            return self.dr_drop(DrDrop::NotDirectedRoute);
        };
        let own_port = |egress: u8| -> Result<u8, DrDrop> {
            if !is_switch && egress != port {
                Err(DrDrop::WrongEgressPort)
            } else {
                Ok(egress)
            }
        };
        if !dr.direction_inbound {
            if ptr != 0 {
                return self.dr_drop(DrDrop::BadHopPointer);
            }
            if dr.dr_slid != Lid::PERMISSIVE || dr.dr_dlid != Lid::PERMISSIVE {
                return self.dr_drop(DrDrop::LidRoutedPart);
            }
            d.hop_ptr = 1;
            if cnt == 0 {
                // C14-9:3 at the source: the local SMA.
                return DrAction::Deliver(out);
            }
            // C14-9:1.
            let egress = own_port(d.initial_path[1]).and_then(|p| self.dr_egress(p));
            self.dr_forward(egress, out)
        } else if cnt > 0 && u16::from(ptr) == u16::from(cnt) + 1 {
            // C14-13:1: the response starts back along ReturnPath.
            d.hop_ptr = cnt;
            let egress = own_port(d.return_path[usize::from(cnt)]).and_then(|p| self.dr_egress(p));
            self.dr_forward(egress, out)
        } else if cnt == 0 && ptr == 1 {
            // The response of a HopCount 0 request: back to the local SM.
            d.hop_ptr = 0;
            DrAction::Deliver(out)
        } else {
            self.dr_drop(DrDrop::BadHopPointer)
        }
    }

    /// An SMP received on `in_port` and addressed to this node's SMI (a directed-route SMP, or
    /// a LID-routed one whose LRH DLID this port accepts, see [`Sma::accepts_dlid`]); `slid` is
    /// its LRH SLID. Walks the directed route, lets the SMA answer requests meant for this node,
    /// and returns what leaves the node.
    pub fn receive_smp(&mut self, in_port: u8, slid: Lid, smp: &smp::Repr) -> SmiOutput {
        self.requester = slid;
        let out = self.receive_smp_from(in_port, slid, smp);
        self.requester = Lid::PERMISSIVE;
        out
    }

    /// The ends of a directed route's LID-routed parts at a switch (IBA §14.2.2.2 C14-9:1
    /// and §14.2.2.4 C14-13:3 with a DrSLID that is not the permissive LID): a request that
    /// came LID-routed from DrSLID starts its directed part here, and its response, back
    /// here, goes on LID-routed to DrSLID (by the LFT: `out_port` 0).
    fn lid_routed_part(&mut self, smp: &smp::Repr) -> Option<SmiOutput> {
        let dr = smp.dr?;
        if !self.is_switch()
            || dr.dr_slid == Lid::PERMISSIVE
            || dr.hop_cnt == 0
            || dr.hop_cnt > MAX_HOPS
        {
            return None;
        }
        let mut out = *smp;
        let d = out.dr.as_mut()?;
        if !dr.direction_inbound && dr.hop_ptr == 0 {
            d.hop_ptr = 1;
            let egress = self.dr_egress(d.initial_path[1]);
            Some(match self.dr_forward(egress, out) {
                DrAction::Forward { out_port, smp } => SmiOutput::Send(Outgoing {
                    out_port,
                    dlid: Lid::PERMISSIVE,
                    slid: Lid::PERMISSIVE,
                    smp,
                }),
                _ => SmiOutput::Nothing,
            })
        } else if dr.direction_inbound && dr.hop_ptr == 1 {
            d.hop_ptr = 0;
            let own = self.lid(0).map_or(Lid(0), |(lid, _)| lid);
            Some(SmiOutput::Send(Outgoing {
                out_port: 0,
                dlid: dr.dr_slid,
                slid: own,
                smp: out,
            }))
        } else {
            None
        }
    }

    fn receive_smp_from(&mut self, in_port: u8, slid: Lid, smp: &smp::Repr) -> SmiOutput {
        if let Some(out) = self.lid_routed_part(smp) {
            return out;
        }
        if smp.is_directed_route() {
            match self.process_dr(in_port, smp) {
                DrAction::Forward { out_port, smp } => SmiOutput::Send(Outgoing {
                    out_port,
                    dlid: Lid::PERMISSIVE,
                    slid: Lid::PERMISSIVE,
                    smp,
                }),
                DrAction::Drop(_) => SmiOutput::Nothing,
                DrAction::Deliver(delivered) => {
                    let inbound = delivered.dr.is_some_and(|d| d.direction_inbound);
                    if inbound
                        || delivered.header.method.is_response()
                        || self.is_for_local_sm(in_port, &delivered)
                    {
                        return SmiOutput::ToSm(delivered);
                    }
                    let Some(response) = self.handle_smp(in_port, &delivered) else {
                        return SmiOutput::Nothing;
                    };
                    match self.send_dr(in_port, &response) {
                        DrAction::Forward { out_port, smp } => SmiOutput::Send(Outgoing {
                            out_port,
                            dlid: Lid::PERMISSIVE,
                            slid: Lid::PERMISSIVE,
                            smp,
                        }),
                        DrAction::Deliver(smp) => SmiOutput::ToSm(smp),
                        DrAction::Drop(_) => SmiOutput::Nothing,
                    }
                }
            }
        } else if smp.header.method.is_response()
            || smp.header.method == Method::Trap
            || self.is_for_local_sm(in_port, smp)
        {
            // Responses, traps the SMAs of the subnet send this node's SM, and SMInfo
            // requests for it.
            SmiOutput::ToSm(*smp)
        } else {
            let Some(response) = self.handle_smp(in_port, smp) else {
                return SmiOutput::Nothing;
            };
            // LID-routed: back to the requester's LID. A CA answers through the arrival port;
            // a switch's SMA sits on port 0 and its response is routed by the LFT, except to a
            // requester without a LID (permissive or 0), which is the neighbour on in_port.
            let own = self.lid(in_port).map_or(Lid(0), |(lid, _)| lid);
            let out_port = if self.is_switch() && slid != Lid::PERMISSIVE && slid.0 != 0 {
                self.lft_port(slid).unwrap_or(in_port)
            } else {
                in_port
            };
            SmiOutput::Send(Outgoing {
                out_port,
                dlid: slid,
                slid: if own.0 == 0 { Lid::PERMISSIVE } else { own },
                smp: response,
            })
        }
    }
}

/// The PortState a SubnSet asking for `requested` leaves a port in `current` (IBA §14.2.5.6
/// table 149 and the link state machine of §7.2): `None` if the request is invalid.
///
/// * NoChange keeps the state; Down is always allowed;
/// * Armed only from Init (or Armed), Active only from Armed (or Active), both only on a
///   physically up link;
/// * Init (which only the link layer enters) and unknown codes are invalid.
pub fn port_state_transition(
    current: PortState,
    requested: PortState,
    phys_up: bool,
) -> Option<PortState> {
    match requested {
        PortState::NoChange => Some(current),
        PortState::Down => Some(PortState::Down),
        PortState::Armed if phys_up && matches!(current, PortState::Init | PortState::Armed) => {
            Some(PortState::Armed)
        }
        PortState::Active if phys_up && matches!(current, PortState::Armed | PortState::Active) => {
            Some(PortState::Active)
        }
        _ => None,
    }
}

/// The power-on PortInfo of `port`.
fn default_port_info(config: &SmaConfig, port: u8) -> PortInfo {
    let switch_port0 = config.is_switch() && port == 0;
    let addressed = !config.is_switch() || port == 0;
    PortInfo {
        m_key: 0,
        gid_prefix: 0,
        lid: Lid(0),
        master_sm_lid: Lid(0),
        capability_mask: if addressed { config.capability_mask } else { 0 },
        diag_code: 0,
        m_key_lease_period: 0,
        local_port_num: port,
        link_width_enabled: if switch_port0 {
            0x02
        } else {
            config.link_width_supported
        },
        link_width_supported: config.link_width_supported,
        link_width_active: 0x02,
        link_speed_supported: config.link_speed_supported,
        port_state: if switch_port0 {
            PortState::Active
        } else {
            PortState::Down
        },
        port_physical_state: if switch_port0 {
            PortPhysicalState::LinkUp
        } else {
            PortPhysicalState::Polling
        },
        link_down_default_state: 2,
        m_key_protect_bits: 0,
        lmc: 0,
        link_speed_active: 0x1,
        link_speed_enabled: if switch_port0 {
            0x1
        } else {
            config.link_speed_supported
        },
        neighbor_mtu: config.mtu_cap,
        master_sm_sl: 0,
        vl_cap: config.vl_cap,
        init_type: 0,
        vl_high_limit: 0,
        vl_arbitration_high_cap: 8,
        vl_arbitration_low_cap: 8,
        init_type_reply: 0,
        mtu_cap: config.mtu_cap,
        vl_stall_count: 7,
        hoq_life: 0,
        operational_vls: config.vl_cap,
        partition_enforcement_inbound: false,
        partition_enforcement_outbound: false,
        filter_raw_inbound: false,
        filter_raw_outbound: false,
        m_key_violations: 0,
        p_key_violations: 0,
        q_key_violations: 0,
        guid_cap: if addressed { config.guid_cap.max(1) } else { 0 },
        client_reregister: false,
        multicast_pkey_trap_suppression_enabled: 0,
        subnet_timeout: 0,
        resp_time_value: 0,
        local_phy_errors: 0,
        overrun_errors: 0,
        max_credit_hint: 0,
        link_round_trip_latency: 0,
        capability_mask2: 0,
        link_speed_ext_active: 0,
        link_speed_ext_supported: 0,
        link_speed_ext_enabled: 0,
    }
}

#[cfg(test)]
mod tests;
