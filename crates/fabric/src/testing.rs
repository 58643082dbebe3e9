//! The `testing` module is an in-memory fabric for tests: every node of a [`Topology`] gets
//! its SMA (CAs) or a [`Switch`], every cable is trained at its rate, and packets — real bytes,
//! LRH through VCRC — move from port to peer port in FIFO order until nothing is in flight.
//!
//! It is deliberately simple: no loss, no time but the deadlines a machine driven by
//! [`TestFabric::drive`] asks for, one packet at a time (a multicast packet a
//! switch replicates becomes several, followed to their ends by [`TestFabric::send_multicast`]). The deterministic
//! simulator (`softib-sim`) is where faults and timing live; this is for checking that the
//! agents and the switch data plane fit together (directed-route walks, discovery by BFS,
//! forwarding after the LFTs are programmed).
//!
//! The link layer's part is played here too: when an SMA asks for a link to go down
//! ([`SmaEvent::LinkDown`]), both ends go down and, unless the port was Disabled, train again.

use std::collections::VecDeque;
use std::time::Duration;

use softib_wire::bth::Repr as BthRepr;
use softib_wire::deth::Repr as DethRepr;
use softib_wire::mad::attr::PortPhysicalState;
use softib_wire::mad::smp;
use softib_wire::packet::{IbPacketRepr, TransportRepr};
use softib_wire::{Lid, Lnh, LrhPacket, LrhRepr, Opcode, PKey, Psn, QKey, Qpn};

use crate::machine::SmpMachine;
use crate::sma::{DrAction, Sma, SmaEvent, SmiOutput};
use crate::smp_packet;
use crate::switch::{Switch, SwitchAction};
use crate::topology::{Endpoint, NodeKind, Topology};

/// A packet a CA accepted (a data packet for one of its LIDs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The port it arrived on.
    pub port: u8,
    /// The packet, LRH through VCRC.
    pub packet: Vec<u8>,
}

/// A CA of the test fabric: its SMA and what it received.
#[derive(Debug, Clone)]
pub struct CaNode {
    sma: Sma,
    inbox: Vec<Received>,
}

impl CaNode {
    /// The CA's SMA.
    pub fn sma(&self) -> &Sma {
        &self.sma
    }

    /// The data packets the CA accepted, oldest first.
    pub fn inbox(&self) -> &[Received] {
        &self.inbox
    }

    fn handle_packet(&mut self, in_port: u8, packet: Vec<u8>) -> Step {
        if !self.sma.link_is_up(in_port) {
            return Step::End(Outcome::Dropped("ingress_link_down"));
        }
        let Ok(lrh) = LrhRepr::parse(&LrhPacket::new_unchecked(&packet[..])) else {
            return Step::End(Outcome::Dropped("malformed"));
        };
        if lrh.vl == smp_packet::VL15 {
            let Ok(p) = smp_packet::parse(&packet) else {
                return Step::End(Outcome::Dropped("not_an_smp"));
            };
            if !self.sma.accepts_dlid(in_port, lrh.dlid) {
                return Step::End(Outcome::Dropped("dlid_not_ours"));
            }
            match self.sma.receive_smp(in_port, lrh.slid, &p.smp) {
                SmiOutput::Send(out) => Step::Send {
                    out_port: out.out_port,
                    packet: smp_packet::emit(out.dlid, out.slid, &out.smp),
                },
                SmiOutput::ToSm(smp) => Step::End(Outcome::ToSm(Box::new(smp))),
                SmiOutput::Nothing => Step::End(Outcome::Dropped("smp_consumed")),
            }
        } else {
            if !self.sma.note_data_received(in_port) {
                return Step::End(Outcome::Dropped("port_not_active"));
            }
            // Multicast: the port takes every packet to an MLID (the HCA's QP attachments
            // decide who gets it; that is not modelled here).
            if !lrh.dlid.is_multicast()
                && (lrh.dlid == Lid::PERMISSIVE || !self.sma.accepts_dlid(in_port, lrh.dlid))
            {
                return Step::End(Outcome::Dropped("dlid_not_ours"));
            }
            self.inbox.push(Received {
                port: in_port,
                packet,
            });
            Step::End(Outcome::Delivered { port: in_port })
        }
    }
}

/// A node of the test fabric.
#[derive(Debug, Clone)]
pub enum FabricNode {
    /// A CA.
    Ca(CaNode),
    /// A switch.
    Switch(Switch),
}

impl FabricNode {
    /// The node's SMA.
    pub fn sma(&self) -> &Sma {
        match self {
            FabricNode::Ca(ca) => &ca.sma,
            FabricNode::Switch(sw) => sw.sma(),
        }
    }

    fn sma_mut(&mut self) -> &mut Sma {
        match self {
            FabricNode::Ca(ca) => &mut ca.sma,
            FabricNode::Switch(sw) => sw.sma_mut(),
        }
    }
}

/// How a packet's journey ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A CA accepted the data packet on `port`.
    Delivered {
        /// The port.
        port: u8,
    },
    /// The packet reached the SM of the node (an SMP response).
    ToSm(Box<smp::Repr>),
    /// A switch's LFT sent the packet to the switch itself.
    Local,
    /// The node dropped it, for the named reason.
    Dropped(&'static str),
    /// It was sent out of a port with no cable, or whose link is not up.
    Lost,
    /// The walk went on for more than [`TestFabric::MAX_STEPS`] steps (a routing loop).
    Looped,
}

/// One packet arrival, recorded for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hop {
    /// The node it arrived at.
    pub node: usize,
    /// The port it arrived on.
    pub in_port: u8,
    /// For a directed-route SMP: the D bit and HopPointer on arrival.
    pub dr: Option<(bool, u8)>,
}

enum Step {
    Send { out_port: u8, packet: Vec<u8> },
    SendMany { out_ports: Vec<u8>, packet: Vec<u8> },
    End(Outcome),
}

/// An in-memory fabric of SMAs and switches, wired as a topology says.
#[derive(Debug, Clone)]
pub struct TestFabric {
    topology: Topology,
    nodes: Vec<FabricNode>,
    trace: Vec<Hop>,
    events: Vec<(usize, SmaEvent)>,
}

impl TestFabric {
    /// The most packet arrivals one send may cause before it counts as a loop.
    pub const MAX_STEPS: usize = 10_000;

    /// Builds the nodes of `topology` and trains every cable at its rate.
    pub fn new(topology: Topology) -> TestFabric {
        let mut nodes: Vec<FabricNode> = topology
            .nodes()
            .iter()
            .map(|n| match n.kind {
                NodeKind::Ca => FabricNode::Ca(CaNode {
                    sma: Sma::from_node(n),
                    inbox: Vec::new(),
                }),
                NodeKind::Switch => match Switch::from_node(n) {
                    Some(sw) => FabricNode::Switch(sw),
                    None => FabricNode::Ca(CaNode {
                        sma: Sma::from_node(n),
                        inbox: Vec::new(),
                    }),
                },
            })
            .collect();
        for link in topology.links() {
            nodes[link.a.node].sma_mut().link_up(link.a.port, link.rate);
            nodes[link.b.node].sma_mut().link_up(link.b.port, link.rate);
        }
        TestFabric {
            topology,
            nodes,
            trace: Vec::new(),
            events: Vec::new(),
        }
    }

    /// The topology.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The nodes, in topology order.
    pub fn nodes(&self) -> &[FabricNode] {
        &self.nodes
    }

    /// The SMA of node `node`.
    pub fn sma(&self, node: usize) -> &Sma {
        self.nodes[node].sma()
    }

    /// The SMA of node `node`, mutable.
    pub fn sma_mut(&mut self, node: usize) -> &mut Sma {
        self.nodes[node].sma_mut()
    }

    /// Node `node` if it is a switch.
    pub fn switch(&self, node: usize) -> Option<&Switch> {
        match &self.nodes[node] {
            FabricNode::Switch(sw) => Some(sw),
            FabricNode::Ca(_) => None,
        }
    }

    /// Node `node` if it is a CA.
    pub fn ca(&self, node: usize) -> Option<&CaNode> {
        match &self.nodes[node] {
            FabricNode::Ca(ca) => Some(ca),
            FabricNode::Switch(_) => None,
        }
    }

    /// Every arrival of the last send, in order.
    pub fn trace(&self) -> &[Hop] {
        &self.trace
    }

    /// Every event an SMA raised so far, with its node.
    pub fn events(&self) -> &[(usize, SmaEvent)] {
        &self.events
    }

    /// Sends a directed-route SMP from the SM on `node`, bound to `port` (a CA port; ignored
    /// for a switch, whose SM sits on port 0), and returns the response that comes back to
    /// that SM, if one does.
    pub fn send_dr(&mut self, node: usize, port: u8, request: &smp::Repr) -> Option<smp::Repr> {
        self.trace.clear();
        let first = match &mut self.nodes[node] {
            FabricNode::Switch(sw) => match sw.send_smp(request) {
                SwitchAction::Transmit { out_port, packet } => (out_port, packet),
                SwitchAction::ToSm(r) => return Some(*r),
                _ => return None,
            },
            FabricNode::Ca(ca) => match ca.sma.send_dr(port, request) {
                DrAction::Forward { out_port, smp } => (
                    out_port,
                    smp_packet::emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &smp),
                ),
                DrAction::Deliver(local) => {
                    let response = ca.sma.handle_smp(port, &local)?;
                    return match ca.sma.send_dr(port, &response) {
                        DrAction::Deliver(r) => Some(r),
                        _ => None,
                    };
                }
                DrAction::Drop(_) => return None,
            },
        };
        self.apply_events(node);
        let (at, outcome) = self.run(node, first.0, first.1);
        match outcome {
            Outcome::ToSm(r) if at == node && r.header.tid == request.header.tid => Some(*r),
            _ => None,
        }
    }

    /// Drives `machine` (a [`Discovery`](crate::Discovery), a
    /// [`SubnetManager`](crate::SubnetManager)) as the runtime would from the SM on `node`'s
    /// `port`: every SMP it hands out is sent ([`TestFabric::send_dr`]) and answered at once,
    /// and time jumps to its next deadline, from zero until it has nothing left to wait for or
    /// its next deadline lies past `until`. Returns the time reached.
    pub fn drive(
        &mut self,
        node: usize,
        port: u8,
        machine: &mut dyn SmpMachine,
        until: Duration,
    ) -> Duration {
        let mut now = Duration::ZERO;
        loop {
            machine.handle_timeout(now);
            while let Some(out) = machine.poll_transmit() {
                if let Some(r) = self.send_dr(node, port, &out) {
                    machine.handle_response(now, &r);
                }
            }
            match machine.poll_timeout() {
                Some(t) if t <= until => now = now.max(t),
                _ => return now,
            }
        }
    }

    /// Sends a LID-routed SMP from the SM on CA `node`, port `port`, to `dlid`, with the port's
    /// LID as SLID, and returns the response that comes back, if one does.
    pub fn send_lid_routed(
        &mut self,
        node: usize,
        port: u8,
        dlid: Lid,
        request: &smp::Repr,
    ) -> Option<smp::Repr> {
        self.trace.clear();
        let slid = self.sma(node).lid(port).map_or(Lid(0), |(l, _)| l);
        let packet = smp_packet::emit(dlid, slid, request);
        let (at, outcome) = self.run(node, port, packet);
        match outcome {
            Outcome::ToSm(r) if at == node && r.header.tid == request.header.tid => Some(*r),
            _ => None,
        }
    }

    /// Sends `packet` out of port `port` of `node` and follows it; returns the node where its
    /// journey ended and how.
    pub fn send_packet(&mut self, node: usize, port: u8, packet: Vec<u8>) -> (usize, Outcome) {
        self.trace.clear();
        self.run(node, port, packet)
    }

    /// Sends `packet` out of port `port` of `node` and follows every copy the switches make
    /// of it (multicast); returns where and how each copy's journey ended, in the order they
    /// ended. A unicast packet gives one entry, as [`TestFabric::send_packet`].
    pub fn send_multicast(
        &mut self,
        node: usize,
        port: u8,
        packet: Vec<u8>,
    ) -> Vec<(usize, Outcome)> {
        self.trace.clear();
        self.run_all(node, port, packet, false)
    }

    /// Moves `packet`, leaving `node` by `out_port`, through the fabric until it ends.
    fn run(&mut self, node: usize, out_port: u8, packet: Vec<u8>) -> (usize, Outcome) {
        self.run_all(node, out_port, packet, true)
            .into_iter()
            .next()
            .unwrap_or((node, Outcome::Lost))
    }

    /// Moves `packet` and its copies through the fabric; stops at the first end if `first`.
    fn run_all(
        &mut self,
        node: usize,
        out_port: u8,
        packet: Vec<u8>,
        first: bool,
    ) -> Vec<(usize, Outcome)> {
        let mut ends = Vec::new();
        let mut queue = VecDeque::new();
        match self.wire(node, out_port) {
            Some(end) => queue.push_back((end, packet)),
            None => return vec![(node, Outcome::Lost)],
        }
        let mut steps = 0;
        while let Some((at, packet)) = queue.pop_front() {
            steps += 1;
            if steps > Self::MAX_STEPS {
                ends.push((at.node, Outcome::Looped));
                return ends;
            }
            let dr = smp_packet::parse(&packet)
                .ok()
                .and_then(|p| p.smp.dr)
                .map(|d| (d.direction_inbound, d.hop_ptr));
            self.trace.push(Hop {
                node: at.node,
                in_port: at.port,
                dr,
            });
            let step = match &mut self.nodes[at.node] {
                FabricNode::Ca(ca) => ca.handle_packet(at.port, packet),
                FabricNode::Switch(sw) => match sw.handle_packet(at.port, &packet) {
                    SwitchAction::Forward { out_port } => Step::Send { out_port, packet },
                    SwitchAction::Replicate { out_ports } => Step::SendMany {
                        out_ports: out_ports.iter().collect(),
                        packet,
                    },
                    SwitchAction::Transmit { out_port, packet } => Step::Send { out_port, packet },
                    SwitchAction::Local => Step::End(Outcome::Local),
                    SwitchAction::ToSm(smp) => Step::End(Outcome::ToSm(smp)),
                    SwitchAction::Drop(reason) => Step::End(Outcome::Dropped(reason.name())),
                },
            };
            self.apply_events(at.node);
            let end = |ends: &mut Vec<(usize, Outcome)>, e: (usize, Outcome)| {
                ends.push(e);
                first
            };
            match step {
                Step::Send { out_port, packet } => match self.wire(at.node, out_port) {
                    Some(peer) => queue.push_back((peer, packet)),
                    None => {
                        if end(&mut ends, (at.node, Outcome::Lost)) {
                            return ends;
                        }
                    }
                },
                Step::SendMany { out_ports, packet } => {
                    for out_port in out_ports {
                        match self.wire(at.node, out_port) {
                            Some(peer) => queue.push_back((peer, packet.clone())),
                            None => {
                                if end(&mut ends, (at.node, Outcome::Lost)) {
                                    return ends;
                                }
                            }
                        }
                    }
                }
                Step::End(outcome) => {
                    if end(&mut ends, (at.node, outcome)) {
                        return ends;
                    }
                }
            }
        }
        if ends.is_empty() {
            ends.push((node, Outcome::Lost));
        }
        ends
    }

    /// The far end of the cable on `node`'s `port`, if there is one and both ends are up.
    fn wire(&self, node: usize, port: u8) -> Option<Endpoint> {
        let here = Endpoint { node, port };
        let peer = self.topology.peer(here)?;
        (self.sma(node).link_is_up(port) && self.sma(peer.node).link_is_up(peer.port))
            .then_some(peer)
    }

    /// Plays the link layer for the events node `node`'s SMA raised.
    fn apply_events(&mut self, node: usize) {
        while let Some(event) = self.nodes[node].sma_mut().poll_event() {
            self.events.push((node, event));
            let port = match event {
                SmaEvent::LinkDown { port, .. } | SmaEvent::LinkEnabled { port } => port,
                _ => continue,
            };
            let here = Endpoint { node, port };
            let (Some(peer), Some(rate)) = (
                self.topology.peer(here),
                self.topology.link_at(here).map(|l| l.rate),
            ) else {
                continue;
            };
            let disabled = |f: &TestFabric, e: Endpoint| {
                f.sma(e.node)
                    .port_info(e.port)
                    .is_some_and(|i| i.port_physical_state == PortPhysicalState::Disabled)
            };
            if let SmaEvent::LinkDown { .. } = event {
                self.nodes[peer.node].sma_mut().link_down(peer.port);
            }
            if !disabled(self, here) && !disabled(self, peer) {
                self.nodes[node].sma_mut().link_up(port, rate);
                self.nodes[peer.node].sma_mut().link_up(peer.port, rate);
            }
        }
    }
}

/// A UD SEND_ONLY data packet from `slid` to `dlid` (VL 0, SL 0, QP `dest_qpn`, Q_Key
/// 0x11111111) carrying `payload`, with ICRC and VCRC: test traffic for the switches.
pub fn data_packet(slid: Lid, dlid: Lid, dest_qpn: u32, payload: &[u8]) -> Vec<u8> {
    let mut transport = TransportRepr::new(BthRepr {
        opcode: Opcode::UD_SEND_ONLY,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qpn: Qpn::new(dest_qpn),
        ack_req: false,
        psn: Psn::new(0),
    });
    transport.deth = Some(DethRepr {
        qkey: QKey(0x1111_1111),
        src_qpn: Qpn::new(2),
    });
    let packet = IbPacketRepr {
        lrh: LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid,
            pkt_len: 0,
            slid,
        },
        grh: None,
        transport,
        payload,
    };
    let mut out = vec![0u8; packet.buffer_len()];
    packet.emit(&mut out);
    out
}
