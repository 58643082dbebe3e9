//! What a directed-route sweep found: the subnet as the SM and the diagnostics see it.
//!
//! One model for everyone who walks a fabric with SMPs — the subnet manager's heavy sweep, and
//! the diagnostics (`ibnetdiscover`, `ibnodes`, `iblinkinfo`, ...) — so that each concept lives
//! in one place. Nodes are identified by their index in [`Subnet::nodes`], in the order the
//! sweep found them (the sweeping node first).

use softib_wire::mad::attr::{NodeInfo, NodeType, PortInfo, SwitchInfo};
use softib_wire::{Guid, Lid};

use crate::topology::{Endpoint, LinkRate, LinkSpeed, LinkWidth, Node, NodeKind, Topology};

/// One port of a found node: a node index and a port number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PortRef {
    /// Index into [`Subnet::nodes`].
    pub node: usize,
    /// Port number (0 is a switch's management port).
    pub port: u8,
}

/// A cable the sweep crossed. `a` is the smaller end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SubnetLink {
    /// The smaller end (by node index, then port).
    pub a: PortRef,
    /// The larger end.
    pub b: PortRef,
}

/// One node as read by SMPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubnetNode {
    /// NodeInfo as returned through the port the sweep entered by (`local_port_num` and
    /// `port_guid` are those of that port).
    pub info: NodeInfo,
    /// NodeDescription, trailing NULs removed.
    pub description: String,
    /// The directed-route initial path from the sweeping port to this node (hops after hop 0;
    /// empty for the sweeping node itself).
    pub dr_path: Vec<u8>,
    /// PortInfo by port number, `0..=num_ports`; `None` where not read (a CA's port 0, or a port
    /// the sweep did not query).
    pub ports: Vec<Option<PortInfo>>,
    /// SwitchInfo of a switch.
    pub switch_info: Option<SwitchInfo>,
}

impl SubnetNode {
    /// Whether the node is a switch.
    pub fn is_switch(&self) -> bool {
        self.info.node_type == NodeType::Switch
    }

    /// PortInfo of `port`, if read.
    pub fn port(&self, port: u8) -> Option<&PortInfo> {
        self.ports.get(usize::from(port)).and_then(Option::as_ref)
    }

    /// The GUID of `port`: a switch's ports all carry the node's port-0 GUID; a CA's port GUID
    /// is only known for the port the sweep entered by, others are `node_guid + port` by the
    /// usual (ibsim, mlx4) convention — `None` if that does not hold and it was not read.
    pub fn port_guid(&self, port: u8) -> Option<Guid> {
        if self.is_switch() || port == self.info.local_port_num {
            return Some(self.info.port_guid);
        }
        (1..=self.info.num_ports)
            .contains(&port)
            .then(|| Guid(self.info.node_guid.0.wrapping_add(u64::from(port))))
    }

    /// The LID of `port` (a switch's ports share port 0's LID).
    pub fn lid(&self, port: u8) -> Lid {
        let port = if self.is_switch() { 0 } else { port };
        self.port(port).map_or(Lid(0), |p| p.lid)
    }
}

/// The subnet a sweep found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Subnet {
    /// Nodes in discovery order; the sweeping node is first.
    pub nodes: Vec<SubnetNode>,
    /// Cables, sorted.
    pub links: Vec<SubnetLink>,
}

impl Subnet {
    /// The node with this node GUID.
    pub fn node_by_guid(&self, guid: Guid) -> Option<usize> {
        self.nodes.iter().position(|n| n.info.node_guid == guid)
    }

    /// The node one of whose ports has port GUID `guid`.
    pub fn node_by_port_guid(&self, guid: Guid) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| (0..=n.info.num_ports).any(|p| n.port_guid(p) == Some(guid)))
    }

    /// The node owning LID `lid` (a switch's LID, or any CA port's).
    pub fn node_by_lid(&self, lid: Lid) -> Option<PortRef> {
        self.nodes.iter().enumerate().find_map(|(i, n)| {
            if n.is_switch() {
                (n.lid(0) == lid && lid != Lid(0)).then_some(PortRef { node: i, port: 0 })
            } else {
                (1..=n.info.num_ports)
                    .find(|&p| n.lid(p) == lid && lid != Lid(0))
                    .map(|port| PortRef { node: i, port })
            }
        })
    }

    /// The port at the other end of the cable plugged into `end`.
    pub fn peer(&self, end: PortRef) -> Option<PortRef> {
        self.links.iter().find_map(|l| {
            if l.a == end {
                Some(l.b)
            } else if l.b == end {
                Some(l.a)
            } else {
                None
            }
        })
    }

    /// Adds a cable (idempotent: the same cable seen from its other end is not added twice).
    pub fn add_link(&mut self, x: PortRef, y: PortRef) {
        let (a, b) = if x <= y { (x, y) } else { (y, x) };
        let link = SubnetLink { a, b };
        if let Err(at) = self.links.binary_search(&link) {
            self.links.insert(at, link);
        }
    }

    /// The subnet as a [`Topology`] (what `ibnetdiscover` prints and `softib fabric up`
    /// accepts). Node ids are `S-<guid>` / `H-<guid>` as ibnetdiscover names them; link rates
    /// come from the PortInfo of the ports when read (4xSDR otherwise).
    pub fn to_topology(&self) -> Topology {
        let mut topo = Topology::new();
        let mut index = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let (kind, prefix) = if n.is_switch() {
                (NodeKind::Switch, 'S')
            } else {
                (NodeKind::Ca, 'H')
            };
            let node = Node {
                kind,
                id: format!("{prefix}-{:016x}", n.info.node_guid.0),
                description: n.description.clone(),
                num_ports: n.info.num_ports,
                node_guid: n.info.node_guid,
                system_image_guid: n.info.system_image_guid,
                vendor_id: n.info.vendor_id,
                device_id: n.info.device_id,
                enhanced_port0: false,
                lid: if n.is_switch() { n.lid(0) } else { Lid(0) },
                lmc: 0,
            };
            // A Subnet built by a sweep never holds one GUID twice; if a hand-built one does,
            // the duplicate is left out rather than failing the whole conversion.
            index.push(topo.add_node(node).ok());
        }
        for l in &self.links {
            let (Some(Some(a)), Some(Some(b))) = (index.get(l.a.node), index.get(l.b.node)) else {
                continue;
            };
            let rate = self.nodes[l.a.node]
                .port(l.a.port)
                .and_then(rate_of)
                .unwrap_or(LinkRate {
                    width: LinkWidth::X4,
                    speed: LinkSpeed::Sdr,
                });
            let _ = topo.connect(
                Endpoint {
                    node: *a,
                    port: l.a.port,
                },
                Endpoint {
                    node: *b,
                    port: l.b.port,
                },
                rate,
            );
        }
        topo
    }
}

/// The active rate of a port, from its PortInfo.
pub fn rate_of(p: &PortInfo) -> Option<LinkRate> {
    let width = LinkWidth::widest_in_mask(p.link_width_active)?;
    let speed = LinkSpeed::fastest_in_ext_mask(p.link_speed_ext_active)
        .or_else(|| LinkSpeed::fastest_in_mask(p.link_speed_active))?;
    Some(LinkRate { width, speed })
}
