//! The `topology` module deals with *fabric descriptions*: which nodes exist, what their GUIDs
//! are, and which port is cabled to which.
//!
//! The text format is the one `ibnetdiscover` prints and `ibsim` reads (infiniband-diags
//! `man/common/sec_topology-file.rst`; ibsim's simplified form). A file is a list of lines:
//!
//! ```text
//! devid=0xc738                      settings (see below)
//! switchguid=0x7cfe900300a0b0c0
//! Switch 36 "sw1"  # "MF0;sw1:SX6036/U1" enhanced port 0 lid 0 lmc 0
//! [1]  "node1"[1](e41d2d0300c00001)   # "node1 mlx4_0" lid 0 4xQDR
//! [35] "sw2"[35]                      # lid 0 4xQDR
//!                                   a blank line ends the node's record
//! caguid=0xe41d2d0300c00000
//! Ca 1 "node1"  # "node1 mlx4_0"
//! [1](e41d2d0300c00001) "sw1"[1]      # lid 0 lmc 0 "MF0;sw1:SX6036/U1" lid 0 4xQDR
//! ```
//!
//! * A node record starts with `Switch|Ca|Hca <nports> "<id>"`, optionally followed by
//!   `# "<NodeDescription>"` and, for switches, `enhanced port 0` or `base port 0`, `lid N`,
//!   `lmc N`. The description defaults to the id, a switch's port 0 to base.
//! * Port lines follow, each starting with `[`: `[<port>](<guid>) "<remote id>"[<remote
//!   port>](<guid>)`, optional `w=<width mask>` `s=<speed mask>`, and a comment whose
//!   `<W>x<SPEED>` word (`4xQDR`) is the link rate. The parenthesised GUIDs are ignored, as
//!   ibsim ignores them. Without a rate the link is 4X SDR (or the sticky `width=`/`speed=`).
//! * The record ends at the first line that does not start with `[` or `#`.
//! * GUIDs are *allocated*, never taken from ids (ibsim's rules): `caguid=`/`hcaguids=` and
//!   `switchguid=` set the next GUID to hand out, absolute or `+N` relative. A CA's node GUID is
//!   the running CA base, its port N GUID is base + N, and the base then advances by nports + 1;
//!   a switch takes one GUID (node GUID = every port's GUID) and the switch base advances by 1.
//!   Defaults: switches from 0x100000, CAs from 0x200000. `vendid=` and `sysimgguid=` apply to
//!   the next node only (defaults: 0 and the node GUID); `devid=`, `width=` and `speed=` stay
//!   until changed.
//! * `#` lines are comments (they do not end a record); blank lines end a record.
//!
//! Every link must be listed at both ends and the ends must agree; an inconsistency is a
//! [`ParseError`] naming the line and what is wrong. Parsing never panics, whatever the text.
//!
//! Not supported (each is a clear error): routers (`Rt`), `include`, `do`, `module=`, `@`
//! alias lines — they need file access or features the fabric does not have.
//!
//! [`Topology::fat_tree`] generates a two-level fat tree, and [`Topology::to_ibnetdiscover`]
//! writes any topology back in this format (the parser reads it back to an equal topology).

use std::collections::BTreeMap;
use std::fmt;

use softib_wire::mad::attr::{link_speed, link_width};
use softib_wire::{Guid, Lid};

/// The first switch GUID ibsim allocates when no `switchguid=` is given.
pub const DEFAULT_SWITCH_GUID_BASE: u64 = 0x10_0000;
/// The first CA GUID ibsim allocates when no `caguid=` is given.
pub const DEFAULT_CA_GUID_BASE: u64 = 0x20_0000;
/// The most ports a node can have (port numbers 1..=254; 255 is reserved).
pub const MAX_PORTS: u8 = 254;

/// What a node is. Routers are not modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeKind {
    /// A channel adapter (HCA): `Ca` or `Hca` in the file.
    Ca,
    /// A switch.
    Switch,
}

impl NodeKind {
    /// The keyword the writer uses ("Ca", "Switch").
    pub fn keyword(self) -> &'static str {
        match self {
            NodeKind::Ca => "Ca",
            NodeKind::Switch => "Switch",
        }
    }
}

/// A link width (IBA §14.2.5.6 LinkWidth*), in spec order of the PortInfo bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkWidth {
    /// 1X.
    X1,
    /// 4X.
    X4,
    /// 8X.
    X8,
    /// 12X.
    X12,
    /// 2X.
    X2,
}

impl LinkWidth {
    /// Every width, in PortInfo bit order.
    pub const ALL: [LinkWidth; 5] = [
        LinkWidth::X1,
        LinkWidth::X4,
        LinkWidth::X8,
        LinkWidth::X12,
        LinkWidth::X2,
    ];

    /// The number of lanes.
    pub fn lanes(self) -> u8 {
        match self {
            LinkWidth::X1 => 1,
            LinkWidth::X2 => 2,
            LinkWidth::X4 => 4,
            LinkWidth::X8 => 8,
            LinkWidth::X12 => 12,
        }
    }

    /// The width with `lanes` lanes.
    pub fn from_lanes(lanes: u32) -> Option<LinkWidth> {
        LinkWidth::ALL
            .into_iter()
            .find(|w| u32::from(w.lanes()) == lanes)
    }

    /// The PortInfo LinkWidthActive bit.
    pub fn bit(self) -> u8 {
        match self {
            LinkWidth::X1 => link_width::W1X,
            LinkWidth::X4 => link_width::W4X,
            LinkWidth::X8 => link_width::W8X,
            LinkWidth::X12 => link_width::W12X,
            LinkWidth::X2 => link_width::W2X,
        }
    }

    /// The widest width whose bit is set in a LinkWidth mask.
    pub fn widest_in_mask(mask: u8) -> Option<LinkWidth> {
        LinkWidth::ALL
            .into_iter()
            .filter(|w| mask & w.bit() != 0)
            .max_by_key(|w| w.lanes())
    }

    /// LinkWidthEnabled for a link trained at this width, as ibsim sets it: 1X and this width.
    pub fn enabled_mask(self) -> u8 {
        link_width::W1X | self.bit()
    }
}

impl fmt::Display for LinkWidth {
    /// "1X", "4X", ... as iblinkinfo prints widths.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}X", self.lanes())
    }
}

/// A per-lane signalling rate (IBA §14.2.5.6 LinkSpeed* and LinkSpeedExt*), slowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LinkSpeed {
    /// 2.5 Gb/s.
    Sdr,
    /// 5.0 Gb/s.
    Ddr,
    /// 10.0 Gb/s.
    Qdr,
    /// 10.3125 Gb/s (a vendor extension; PortInfo shows QDR).
    Fdr10,
    /// 14.0625 Gb/s (LinkSpeedExt).
    Fdr,
    /// 25.78125 Gb/s (LinkSpeedExt).
    Edr,
    /// 53.125 Gb/s (LinkSpeedExt).
    Hdr,
}

impl LinkSpeed {
    /// Every speed, slowest first.
    pub const ALL: [LinkSpeed; 7] = [
        LinkSpeed::Sdr,
        LinkSpeed::Ddr,
        LinkSpeed::Qdr,
        LinkSpeed::Fdr10,
        LinkSpeed::Fdr,
        LinkSpeed::Edr,
        LinkSpeed::Hdr,
    ];

    /// The name ibnetdiscover prints ("SDR", "QDR", "FDR10", ...).
    pub fn name(self) -> &'static str {
        match self {
            LinkSpeed::Sdr => "SDR",
            LinkSpeed::Ddr => "DDR",
            LinkSpeed::Qdr => "QDR",
            LinkSpeed::Fdr10 => "FDR10",
            LinkSpeed::Fdr => "FDR",
            LinkSpeed::Edr => "EDR",
            LinkSpeed::Hdr => "HDR",
        }
    }

    /// The speed named `name` (case-sensitive, as printed).
    pub fn from_name(name: &str) -> Option<LinkSpeed> {
        LinkSpeed::ALL.into_iter().find(|s| s.name() == name)
    }

    /// PortInfo LinkSpeedActive for this speed (0 when the speed is an extended one).
    pub fn speed_active(self) -> u8 {
        match self {
            LinkSpeed::Sdr => link_speed::SDR,
            LinkSpeed::Ddr => link_speed::DDR,
            LinkSpeed::Qdr | LinkSpeed::Fdr10 => link_speed::QDR,
            LinkSpeed::Fdr | LinkSpeed::Edr | LinkSpeed::Hdr => 0,
        }
    }

    /// PortInfo LinkSpeedExtActive for this speed (0 for SDR/DDR/QDR/FDR10).
    pub fn ext_speed_active(self) -> u8 {
        match self {
            LinkSpeed::Fdr => link_speed::EXT_FDR,
            LinkSpeed::Edr => link_speed::EXT_EDR,
            LinkSpeed::Hdr => link_speed::EXT_HDR,
            _ => 0,
        }
    }

    /// LinkSpeedEnabled for a link trained at this speed, as ibsim sets it: every classic
    /// speed up to this one (QDR -> SDR|DDR|QDR).
    pub fn enabled_mask(self) -> u8 {
        match self {
            LinkSpeed::Sdr => link_speed::SDR,
            LinkSpeed::Ddr => link_speed::SDR | link_speed::DDR,
            _ => link_speed::SDR | link_speed::DDR | link_speed::QDR,
        }
    }

    /// The fastest classic speed whose bit is set in a LinkSpeed mask.
    pub fn fastest_in_mask(mask: u8) -> Option<LinkSpeed> {
        [LinkSpeed::Qdr, LinkSpeed::Ddr, LinkSpeed::Sdr]
            .into_iter()
            .find(|s| mask & s.speed_active() != 0)
    }

    /// The fastest extended speed whose bit is set in a LinkSpeedExt mask.
    pub fn fastest_in_ext_mask(mask: u8) -> Option<LinkSpeed> {
        [LinkSpeed::Hdr, LinkSpeed::Edr, LinkSpeed::Fdr]
            .into_iter()
            .find(|s| mask & s.ext_speed_active() != 0)
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The width and speed a link trains to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LinkRate {
    /// The width.
    pub width: LinkWidth,
    /// The per-lane speed.
    pub speed: LinkSpeed,
}

impl LinkRate {
    /// 4X QDR, the rate of the seed topologies.
    pub const QDR_4X: LinkRate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Qdr,
    };

    /// What ibsim gives a link with no rate: 4X SDR.
    pub const DEFAULT: LinkRate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Sdr,
    };

    /// Parses `4xQDR` (ibnetdiscover's connection type word). `None` if it is not one.
    pub fn parse(word: &str) -> Option<LinkRate> {
        let (lanes, speed) = word.split_once('x')?;
        if lanes.is_empty() || !lanes.bytes().all(|b| b.is_ascii_digit()) || lanes.len() > 2 {
            return None;
        }
        Some(LinkRate {
            width: LinkWidth::from_lanes(lanes.parse().ok()?)?,
            speed: LinkSpeed::from_name(speed)?,
        })
    }
}

impl fmt::Display for LinkRate {
    /// `4xQDR`, as ibnetdiscover prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}", self.width.lanes(), self.speed)
    }
}

/// One node of a topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Switch or CA.
    pub kind: NodeKind,
    /// The id the file names it by (`"sw1"`, `"H-e41d2d0300c00000"`).
    pub id: String,
    /// The NodeDescription (at most 64 bytes are served by the SMA).
    pub description: String,
    /// NumPorts: physical ports, 1..=254 (a switch's port 0 is not counted).
    pub num_ports: u8,
    /// NodeGUID.
    pub node_guid: Guid,
    /// SystemImageGUID.
    pub system_image_guid: Guid,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID.
    pub device_id: u16,
    /// Switches: whether port 0 is an enhanced port 0 (false = base port 0). False for CAs.
    pub enhanced_port0: bool,
    /// The `lid N` of a switch header (informational; the SM assigns LIDs). 0 for CAs.
    pub lid: Lid,
    /// The `lmc N` of a switch header (informational). 0 for CAs.
    pub lmc: u8,
}

impl Node {
    /// A CA with `num_ports` ports: port GUIDs are `node_guid + port`, the system image GUID is
    /// the node GUID, vendor and device id 0, description = id.
    pub fn ca(id: &str, num_ports: u8, node_guid: Guid) -> Node {
        Node {
            kind: NodeKind::Ca,
            id: id.to_string(),
            description: id.to_string(),
            num_ports,
            node_guid,
            system_image_guid: node_guid,
            vendor_id: 0,
            device_id: 0,
            enhanced_port0: false,
            lid: Lid(0),
            lmc: 0,
        }
    }

    /// A switch with `num_ports` external ports, base port 0, otherwise like [`Node::ca`].
    pub fn switch(id: &str, num_ports: u8, node_guid: Guid) -> Node {
        Node {
            kind: NodeKind::Switch,
            ..Node::ca(id, num_ports, node_guid)
        }
    }

    /// Whether the node is a switch.
    pub fn is_switch(&self) -> bool {
        self.kind == NodeKind::Switch
    }

    /// The GUID of port `port`: a CA's ports 1..=N have `node_guid + N`; every port of a switch
    /// (0..=N) has the node GUID (the switch's port 0 GUID). `None` for a port that does not
    /// exist (a CA has no port 0).
    pub fn port_guid(&self, port: u8) -> Option<Guid> {
        match self.kind {
            NodeKind::Switch if port <= self.num_ports => Some(self.node_guid),
            NodeKind::Ca if (1..=self.num_ports).contains(&port) => {
                Some(Guid(self.node_guid.0.wrapping_add(u64::from(port))))
            }
            _ => None,
        }
    }

    /// Every GUID the node owns (node GUID and port GUIDs), ascending.
    fn owned_guids(&self) -> Vec<Guid> {
        let mut guids = vec![self.node_guid];
        if self.kind == NodeKind::Ca {
            guids.extend((1..=self.num_ports).filter_map(|p| self.port_guid(p)));
        }
        guids
    }
}

/// One end of a link: a node (its index in [`Topology::nodes`]) and a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Endpoint {
    /// The node's index in [`Topology::nodes`].
    pub node: usize,
    /// The port number (1..=num_ports).
    pub port: u8,
}

/// A cable between two ports. `a` is always the smaller endpoint (by node index, then port).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Link {
    /// The smaller endpoint.
    pub a: Endpoint,
    /// The larger endpoint.
    pub b: Endpoint,
    /// The rate the link trains to.
    pub rate: LinkRate,
}

impl Link {
    /// The other end of the link, seen from `end` (`None` if `end` is not on this link).
    pub fn other(&self, end: Endpoint) -> Option<Endpoint> {
        if end == self.a {
            Some(self.b)
        } else if end == self.b {
            Some(self.a)
        } else {
            None
        }
    }
}

/// Why a node or link could not be added to a [`Topology`] (or a fat tree not built).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// The id is empty or holds a `"` or a line break (the format cannot write it).
    BadId(String),
    /// The description holds a `"` or a line break.
    BadDescription(String),
    /// Another node already has this id.
    DuplicateId(String),
    /// The port count is 0 or above 254.
    BadPortCount(u8),
    /// The VendorID does not fit 24 bits.
    BadVendorId(u32),
    /// A CA's port GUIDs would run past 2^64.
    GuidOverflow(String),
    /// A GUID of the new node is already owned by another node.
    DuplicateGuid {
        /// The GUID.
        guid: Guid,
        /// The node that owns it.
        owner: String,
        /// The node that wanted it.
        node: String,
    },
    /// There is no node with this index.
    NoSuchNode(usize),
    /// The node has no such port (ports are 1..=num_ports).
    NoSuchPort {
        /// The node's id.
        node: String,
        /// The port asked for.
        port: u8,
    },
    /// A port was cabled to itself.
    SelfLink {
        /// The node's id.
        node: String,
        /// The port.
        port: u8,
    },
    /// The port already has a cable.
    PortInUse {
        /// The node's id.
        node: String,
        /// The port.
        port: u8,
    },
    /// A fat tree of this many hosts cannot be built from 36-port switches in two levels.
    BadFatTreeSize(usize),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::BadId(id) => {
                write!(f, "node id {id:?} is empty or holds a quote or line break")
            }
            BuildError::BadDescription(d) => {
                write!(f, "node description {d:?} holds a quote or line break")
            }
            BuildError::DuplicateId(id) => write!(f, "a node \"{id}\" is already defined"),
            BuildError::BadPortCount(n) => {
                write!(f, "a node must have 1 to {MAX_PORTS} ports, not {n}")
            }
            BuildError::BadVendorId(v) => write!(f, "vendor id {v:#x} does not fit 24 bits"),
            BuildError::GuidOverflow(id) => {
                write!(f, "the GUIDs of \"{id}\" run past 0xffffffffffffffff")
            }
            BuildError::DuplicateGuid { guid, owner, node } => write!(
                f,
                "GUID {guid} of \"{node}\" is already used by \"{owner}\""
            ),
            BuildError::NoSuchNode(i) => write!(f, "there is no node number {i}"),
            BuildError::NoSuchPort { node, port } => {
                write!(f, "\"{node}\" has no port {port}")
            }
            BuildError::SelfLink { node, port } => {
                write!(f, "\"{node}\" port {port} is cabled to itself")
            }
            BuildError::PortInUse { node, port } => {
                write!(f, "\"{node}\" port {port} is already cabled")
            }
            BuildError::BadFatTreeSize(n) => write!(
                f,
                "a two-level fat tree of 36-port switches holds 1 to 648 hosts, not {n}"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a topology text could not be parsed: the 1-based line and what is wrong there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong, as a lowercase sentence fragment.
    pub message: String,
}

impl ParseError {
    fn new(line: usize, message: impl Into<String>) -> ParseError {
        ParseError {
            line,
            message: message.into(),
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for ParseError {}

/// A fabric: nodes and the cables between their ports.
///
/// Nodes keep the order they were added (the file's order); links are kept sorted by their
/// smaller endpoint, so two topologies with the same nodes and cables compare equal however
/// the cables were listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    nodes: Vec<Node>,
    by_id: BTreeMap<String, usize>,
    guids: BTreeMap<Guid, usize>,
    /// Keyed by the link's smaller endpoint.
    links: BTreeMap<Endpoint, Link>,
    /// Both directions.
    peers: BTreeMap<Endpoint, Endpoint>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Topology {
        Topology::default()
    }

    /// The nodes, in the order they were added.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node with index `index`.
    pub fn node(&self, index: usize) -> Option<&Node> {
        self.nodes.get(index)
    }

    /// The index of the node with id `id`.
    pub fn node_index(&self, id: &str) -> Option<usize> {
        self.by_id.get(id).copied()
    }

    /// The node with id `id`.
    pub fn node_by_id(&self, id: &str) -> Option<&Node> {
        self.node_index(id).and_then(|i| self.nodes.get(i))
    }

    /// The node owning `guid` (as node GUID or port GUID).
    pub fn node_by_guid(&self, guid: Guid) -> Option<usize> {
        self.guids.get(&guid).copied()
    }

    /// The links, sorted by their smaller endpoint.
    pub fn links(&self) -> impl Iterator<Item = &Link> + '_ {
        self.links.values()
    }

    /// The number of links.
    pub fn link_count(&self) -> usize {
        self.links.len()
    }

    /// The port at the other end of the cable plugged into `end`.
    pub fn peer(&self, end: Endpoint) -> Option<Endpoint> {
        self.peers.get(&end).copied()
    }

    /// The link plugged into `end`.
    pub fn link_at(&self, end: Endpoint) -> Option<&Link> {
        let peer = self.peer(end)?;
        self.links.get(&end.min(peer))
    }

    /// Adds a node and returns its index. Fails if the id is taken or unwritable, the port
    /// count is out of range, or one of its GUIDs is already owned by another node.
    pub fn add_node(&mut self, node: Node) -> Result<usize, BuildError> {
        if node.id.is_empty() || node.id.contains(['"', '\n', '\r']) {
            return Err(BuildError::BadId(node.id));
        }
        if node.description.contains(['"', '\n', '\r']) {
            return Err(BuildError::BadDescription(node.description));
        }
        if self.by_id.contains_key(&node.id) {
            return Err(BuildError::DuplicateId(node.id));
        }
        if node.num_ports == 0 || node.num_ports > MAX_PORTS {
            return Err(BuildError::BadPortCount(node.num_ports));
        }
        if node.vendor_id > 0x00FF_FFFF {
            return Err(BuildError::BadVendorId(node.vendor_id));
        }
        if node.kind == NodeKind::Ca
            && node
                .node_guid
                .0
                .checked_add(u64::from(node.num_ports))
                .is_none()
        {
            return Err(BuildError::GuidOverflow(node.id));
        }
        let owned = node.owned_guids();
        for guid in &owned {
            if let Some(&owner) = self.guids.get(guid) {
                return Err(BuildError::DuplicateGuid {
                    guid: *guid,
                    owner: self.nodes[owner].id.clone(),
                    node: node.id,
                });
            }
        }
        let index = self.nodes.len();
        for guid in owned {
            self.guids.insert(guid, index);
        }
        self.by_id.insert(node.id.clone(), index);
        self.nodes.push(node);
        Ok(index)
    }

    fn check_port(&self, end: Endpoint) -> Result<&Node, BuildError> {
        let node = self
            .nodes
            .get(end.node)
            .ok_or(BuildError::NoSuchNode(end.node))?;
        if end.port == 0 || end.port > node.num_ports {
            return Err(BuildError::NoSuchPort {
                node: node.id.clone(),
                port: end.port,
            });
        }
        if self.peers.contains_key(&end) {
            return Err(BuildError::PortInUse {
                node: node.id.clone(),
                port: end.port,
            });
        }
        Ok(node)
    }

    /// Cables port `x` to port `y` at `rate`.
    pub fn connect(&mut self, x: Endpoint, y: Endpoint, rate: LinkRate) -> Result<(), BuildError> {
        let node = self.check_port(x)?;
        if x == y {
            return Err(BuildError::SelfLink {
                node: node.id.clone(),
                port: x.port,
            });
        }
        self.check_port(y)?;
        let (a, b) = if x < y { (x, y) } else { (y, x) };
        self.links.insert(a, Link { a, b, rate });
        self.peers.insert(a, b);
        self.peers.insert(b, a);
        Ok(())
    }

    /// A two-level fat tree of 36-port switches for `hosts` single-port HCAs (1..=648).
    ///
    /// Each leaf switch takes up to 18 hosts on ports 1..=18 and has 18 uplinks on ports
    /// 19..=36; there are `ceil(hosts / 18)` leaves. The number of spines S is the smallest
    /// divisor of 18 that gives every spine at most 36 ports: each leaf has 18 / S parallel
    /// cables to each spine. 504 hosts give 28 leaves and 18 spines (46 switches), the fabric
    /// the design's scale figure refers to. Ids are `leaf<i>`, `spine<i>`, `host<i>` (from 1);
    /// GUIDs come from ibsim's default bases in that order; links are 4X QDR; switches look
    /// like SX6036 (vendor 0x2c9, device 0xc738, enhanced port 0), HCAs like ConnectX-3
    /// (device 0x1003).
    pub fn fat_tree(hosts: usize) -> Result<Topology, BuildError> {
        const DOWN: usize = 18;
        const UP: usize = 18;
        if hosts == 0 || hosts > 36 * DOWN {
            return Err(BuildError::BadFatTreeSize(hosts));
        }
        let leaves = hosts.div_ceil(DOWN);
        let spines = [1usize, 2, 3, 6, 9, 18]
            .into_iter()
            .find(|s| leaves * (UP / s) <= 36)
            .ok_or(BuildError::BadFatTreeSize(hosts))?;
        let per_pair = UP / spines;

        let mut t = Topology::new();
        let mut sw_guid = DEFAULT_SWITCH_GUID_BASE;
        let mut ca_guid = DEFAULT_CA_GUID_BASE;
        let mut switch = |t: &mut Topology, id: String| -> Result<usize, BuildError> {
            let mut n = Node::switch(&id, 36, Guid(sw_guid));
            n.vendor_id = 0x02c9;
            n.device_id = 0xc738;
            n.enhanced_port0 = true;
            sw_guid += 1;
            t.add_node(n)
        };
        let leaf_idx = (1..=leaves)
            .map(|i| switch(&mut t, format!("leaf{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let spine_idx = (1..=spines)
            .map(|i| switch(&mut t, format!("spine{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        for h in 0..hosts {
            let id = format!("host{}", h + 1);
            let mut n = Node::ca(&id, 1, Guid(ca_guid));
            n.description = format!("{id} HCA-1");
            n.vendor_id = 0x02c9;
            n.device_id = 0x1003;
            ca_guid += 2;
            let host = t.add_node(n)?;
            t.connect(
                Endpoint {
                    node: host,
                    port: 1,
                },
                Endpoint {
                    node: leaf_idx[h / DOWN],
                    port: (h % DOWN + 1) as u8,
                },
                LinkRate::QDR_4X,
            )?;
        }
        for (i, &leaf) in leaf_idx.iter().enumerate() {
            for j in 0..UP {
                let spine = spine_idx[j / per_pair];
                t.connect(
                    Endpoint {
                        node: leaf,
                        port: (DOWN + j + 1) as u8,
                    },
                    Endpoint {
                        node: spine,
                        port: (i * per_pair + j % per_pair + 1) as u8,
                    },
                    LinkRate::QDR_4X,
                )?;
            }
        }
        Ok(t)
    }

    /// Parses a topology in the ibnetdiscover / ibsim format (see the module docs).
    pub fn parse(text: &str) -> Result<Topology, ParseError> {
        Parser::default().run(text)
    }

    /// The topology in ibnetdiscover's format: every node with `vendid=`, `devid=`,
    /// `sysimgguid=` and `caguid=`/`switchguid=` lines, so [`Topology::parse`] gives back an
    /// equal topology. Remote LIDs are printed as the switch header LIDs (0 for CAs).
    pub fn to_ibnetdiscover(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::from("#\n# Topology file: written by softib\n#\n");
        for (me, node) in self.nodes.iter().enumerate() {
            let _ = writeln!(out);
            let _ = writeln!(out, "vendid={:#x}", node.vendor_id);
            let _ = writeln!(out, "devid={:#x}", node.device_id);
            let _ = writeln!(out, "sysimgguid={:#018x}", node.system_image_guid.0);
            match node.kind {
                NodeKind::Switch => {
                    let _ = writeln!(
                        out,
                        "switchguid={:#018x}({:016x})",
                        node.node_guid.0, node.node_guid.0
                    );
                    let _ = writeln!(
                        out,
                        "Switch\t{} \"{}\"\t\t# \"{}\" {} port 0 lid {} lmc {}",
                        node.num_ports,
                        node.id,
                        node.description,
                        if node.enhanced_port0 {
                            "enhanced"
                        } else {
                            "base"
                        },
                        node.lid,
                        node.lmc
                    );
                }
                NodeKind::Ca => {
                    let _ = writeln!(out, "caguid={:#018x}", node.node_guid.0);
                    let _ = writeln!(
                        out,
                        "Ca\t{} \"{}\"\t\t# \"{}\"",
                        node.num_ports, node.id, node.description
                    );
                }
            }
            for port in 1..=node.num_ports {
                let end = Endpoint { node: me, port };
                let (Some(peer), Some(link)) = (self.peer(end), self.link_at(end)) else {
                    continue;
                };
                let remote = &self.nodes[peer.node];
                let remote_guid = match remote.kind {
                    NodeKind::Ca => remote
                        .port_guid(peer.port)
                        .map(|g| format!("({:016x})", g.0))
                        .unwrap_or_default(),
                    NodeKind::Switch => String::new(),
                };
                match node.kind {
                    NodeKind::Switch => {
                        let _ = writeln!(
                            out,
                            "[{port}]\t\"{}\"[{}]{remote_guid} \t\t# \"{}\" lid {} {}",
                            remote.id, peer.port, remote.description, remote.lid, link.rate
                        );
                    }
                    NodeKind::Ca => {
                        let _ = writeln!(
                            out,
                            "[{port}]({:016x}) \t\"{}\"[{}]{remote_guid}\t\t# lid 0 lmc 0 \"{}\" lid {} {}",
                            node.port_guid(port).map_or(0, |g| g.0),
                            remote.id,
                            peer.port,
                            remote.description,
                            remote.lid,
                            link.rate
                        );
                    }
                }
            }
        }
        out
    }
}

impl fmt::Display for Topology {
    /// The ibnetdiscover text ([`Topology::to_ibnetdiscover`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_ibnetdiscover())
    }
}

impl core::str::FromStr for Topology {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Topology, ParseError> {
        Topology::parse(s)
    }
}

mod parse;
use parse::Parser;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TOPO_A: &str = include_str!("../../tests/data/topoA.net");
    const TOPO_B: &str = include_str!("../../tests/data/topoB.net");
    const TOPO_B_DISCOVERED: &str = include_str!("../../tests/data/topoB-ibnetdiscover.txt");

    fn ep(t: &Topology, id: &str, port: u8) -> Endpoint {
        Endpoint {
            node: t.node_index(id).unwrap(),
            port,
        }
    }

    fn linked(t: &Topology, x: (&str, u8), y: (&str, u8)) -> LinkRate {
        let a = ep(t, x.0, x.1);
        let b = ep(t, y.0, y.1);
        assert_eq!(t.peer(a), Some(b), "{x:?} -> {y:?}");
        assert_eq!(t.peer(b), Some(a), "{y:?} -> {x:?}");
        t.link_at(a).unwrap().rate
    }

    #[test]
    fn topo_a_nodes_guids_links() {
        let t = Topology::parse(TOPO_A).unwrap();
        assert_eq!(t.nodes().len(), 2);
        let a = t.node_by_id("test213").unwrap();
        assert_eq!(a.kind, NodeKind::Ca);
        assert_eq!(a.num_ports, 2);
        assert_eq!(a.description, "test213 mlx4_0");
        assert_eq!(a.node_guid, Guid(0xe41d2d0300b47d00));
        assert_eq!(a.port_guid(1), Some(Guid(0xe41d2d0300b47d01)));
        assert_eq!(a.port_guid(2), Some(Guid(0xe41d2d0300b47d02)));
        assert_eq!(a.port_guid(0), None);
        assert_eq!(a.port_guid(3), None);
        assert_eq!(a.system_image_guid, Guid(0xe41d2d0300b47d03));
        assert_eq!((a.vendor_id, a.device_id), (0x02c9, 0x1003));
        let b = t.node_by_id("test214").unwrap();
        assert_eq!(b.node_guid, Guid(0xe41d2d0300b47e90));
        assert_eq!(b.port_guid(1), Some(Guid(0xe41d2d0300b47e91)));
        assert_eq!(b.port_guid(2), Some(Guid(0xe41d2d0300b47e92)));
        assert_eq!(b.system_image_guid, Guid(0xe41d2d0300b47e93));
        assert_eq!(t.link_count(), 2);
        assert_eq!(linked(&t, ("test213", 1), ("test214", 1)), LinkRate::QDR_4X);
        assert_eq!(linked(&t, ("test213", 2), ("test214", 2)), LinkRate::QDR_4X);
        assert_eq!(
            t.node_by_guid(Guid(0xe41d2d0300b47e92)),
            t.node_index("test214")
        );
    }

    #[test]
    fn topo_b_nodes_guids_links() {
        let t = Topology::parse(TOPO_B).unwrap();
        let ids: Vec<&str> = t.nodes().iter().map(|n| n.id.as_str()).collect();
        assert_eq!(ids, ["sw1", "sw2", "node1", "node2", "node3", "node4"]);
        for (id, guid, desc) in [
            ("sw1", 0x7cfe900300a0b0c0u64, "MF0;sw1:SX6036/U1"),
            ("sw2", 0x7cfe900300a0b1c0, "MF0;sw2:SX6036/U1"),
        ] {
            let s = t.node_by_id(id).unwrap();
            assert!(s.is_switch());
            assert_eq!(s.num_ports, 36);
            assert_eq!(s.node_guid, Guid(guid));
            assert_eq!(s.system_image_guid, Guid(guid));
            assert_eq!(s.port_guid(0), Some(Guid(guid)));
            assert_eq!(s.port_guid(36), Some(Guid(guid)));
            assert_eq!(s.description, desc);
            assert!(s.enhanced_port0);
            assert_eq!((s.vendor_id, s.device_id), (0x02c9, 0xc738));
        }
        for (i, id) in ["node1", "node2", "node3", "node4"].into_iter().enumerate() {
            let n = t.node_by_id(id).unwrap();
            let base = 0xe41d2d0300c00000u64 + 0x10 * i as u64;
            assert_eq!(n.kind, NodeKind::Ca);
            assert_eq!(n.num_ports, 1);
            assert_eq!(n.node_guid, Guid(base));
            assert_eq!(n.port_guid(1), Some(Guid(base + 1)));
            assert_eq!(n.system_image_guid, Guid(base + 3));
            assert_eq!(n.description, format!("{id} mlx4_0"));
            assert_eq!((n.vendor_id, n.device_id), (0x02c9, 0x1003));
        }
        assert_eq!(t.link_count(), 6);
        for (x, y) in [
            (("sw1", 1), ("node1", 1)),
            (("sw1", 2), ("node2", 1)),
            (("sw1", 35), ("sw2", 35)),
            (("sw1", 36), ("sw2", 36)),
            (("sw2", 1), ("node3", 1)),
            (("sw2", 2), ("node4", 1)),
        ] {
            assert_eq!(linked(&t, x, y), LinkRate::QDR_4X);
        }
        assert_eq!(t.peer(ep(&t, "sw1", 3)), None);
    }

    #[test]
    fn real_ibnetdiscover_output_of_topo_b() {
        // What ibnetdiscover printed on ibsim running topoB (golden B-stock): ids are
        // S-/H-<guid>, GUIDs come from the switchguid=/caguid= lines.
        let d = Topology::parse(TOPO_B_DISCOVERED).unwrap();
        let b = Topology::parse(TOPO_B).unwrap();
        assert_eq!(d.nodes().len(), b.nodes().len());
        assert_eq!(d.link_count(), b.link_count());
        let s = d.node_by_id("S-7cfe900300a0b0c0").unwrap();
        assert_eq!(s.lid, Lid(5));
        for n in b.nodes() {
            let i = d.node_by_guid(n.node_guid).unwrap();
            let m = &d.nodes()[i];
            assert_eq!(
                (
                    m.kind,
                    m.num_ports,
                    m.system_image_guid,
                    m.vendor_id,
                    m.device_id
                ),
                (
                    n.kind,
                    n.num_ports,
                    n.system_image_guid,
                    n.vendor_id,
                    n.device_id
                )
            );
            assert_eq!(m.description, n.description);
            assert_eq!(m.enhanced_port0, n.enhanced_port0);
        }
        // The same cables, node by node via GUIDs.
        for l in b.links() {
            let g = |e: Endpoint| d.node_by_guid(b.nodes()[e.node].node_guid).unwrap();
            let a = Endpoint {
                node: g(l.a),
                port: l.a.port,
            };
            let z = Endpoint {
                node: g(l.b),
                port: l.b.port,
            };
            assert_eq!(d.peer(a), Some(z));
            assert_eq!(d.link_at(a).unwrap().rate, l.rate);
        }
    }

    #[test]
    fn defaults_and_allocation_rules() {
        let text = "\
Switch 8 \"s1\"
[1] \"h1\"[1]
[2] \"h2\"[2] w=0x2 s=0x4

Switch 4 \"s2\" # \"second\" lid 7 lmc 1
Hca 2 \"h1\"
[1] \"s1\"[1]

vendid=0x119f
sysimgguid=0xabc
devid=0x1234
caguid=+0x100
Ca 2 \"h2\"
[2] \"s1\"[2] # lid 3 4xQDR

Ca 1 \"h3\"
";
        let t = Topology::parse(text).unwrap();
        let s1 = t.node_by_id("s1").unwrap();
        assert_eq!(s1.node_guid, Guid(DEFAULT_SWITCH_GUID_BASE));
        assert_eq!(s1.description, "s1");
        assert!(!s1.enhanced_port0);
        let s2 = t.node_by_id("s2").unwrap();
        assert_eq!(s2.node_guid, Guid(DEFAULT_SWITCH_GUID_BASE + 1));
        assert_eq!(
            (s2.description.as_str(), s2.lid, s2.lmc),
            ("second", Lid(7), 1)
        );
        let h1 = t.node_by_id("h1").unwrap();
        assert_eq!(h1.node_guid, Guid(DEFAULT_CA_GUID_BASE));
        assert_eq!(h1.system_image_guid, h1.node_guid);
        assert_eq!((h1.vendor_id, h1.device_id), (0, 0));
        let h2 = t.node_by_id("h2").unwrap();
        // h1 took 3 GUIDs, then +0x100.
        assert_eq!(h2.node_guid, Guid(DEFAULT_CA_GUID_BASE + 3 + 0x100));
        assert_eq!(h2.system_image_guid, Guid(0xabc));
        assert_eq!((h2.vendor_id, h2.device_id), (0x119f, 0x1234));
        let h3 = t.node_by_id("h3").unwrap();
        assert_eq!(h3.node_guid, Guid(h2.node_guid.0 + 3));
        // vendid and sysimgguid were for h2 only; devid is sticky.
        assert_eq!((h3.vendor_id, h3.device_id), (0, 0x1234));
        assert_eq!(h3.system_image_guid, h3.node_guid);
        assert_eq!(linked(&t, ("s1", 1), ("h1", 1)), LinkRate::DEFAULT);
        assert_eq!(linked(&t, ("s1", 2), ("h2", 2)), LinkRate::QDR_4X);
    }

    #[test]
    fn sticky_width_and_speed() {
        let text =
            "width=2\nspeed=4\nSwitch 2 \"a\"\n[1] \"b\"[1]\n\nSwitch 2 \"b\"\n[1] \"a\"[1]\n";
        let t = Topology::parse(text).unwrap();
        assert_eq!(linked(&t, ("a", 1), ("b", 1)), LinkRate::QDR_4X);
    }

    fn err(text: &str) -> ParseError {
        Topology::parse(text).unwrap_err()
    }

    #[test]
    fn malformed_inputs_name_the_line() {
        let cases: &[(&str, usize, &str)] = &[
            ("Switch x \"a\"\n", 1, "port count"),
            ("Switch 0 \"a\"\n", 1, "port count"),
            ("Switch 255 \"a\"\n", 1, "port count"),
            ("Switch 4 a\n", 1, "quoted node id"),
            ("Switch 4 \"a\n", 1, "closing"),
            ("\n[1] \"b\"[1]\n", 2, "outside a node record"),
            ("Ca 1 \"a\"\n\n[1] \"b\"[1]\n", 3, "outside a node record"),
            ("Ca 1 \"a\"\n[2] \"b\"[1]\n", 2, "beyond the 1 ports"),
            ("Ca 1 \"a\"\n[0] \"b\"[1]\n", 2, "not a port number"),
            ("Ca 1 \"a\"\n[1] \"b\"\n", 2, "remote port"),
            ("Ca 1 \"a\"\n[1] b[1]\n", 2, "quoted id"),
            ("Ca 1 \"a\"\n[1] \"b\"[1] junk\n", 2, "unexpected \"junk\""),
            ("Ca 1 \"a\"\n[1] \"b\"[1] # 4xQXR\n", 2, "unknown link rate"),
            ("Ca 1 \"a\"\n[1] \"b\"[1]\n", 2, "unknown node \"b\""),
            (
                "Ca 1 \"a\"\n[1] \"b\"[1]\n[1] \"b\"[1]\n",
                3,
                "already listed on line 2",
            ),
            ("Ca 1 \"a\"\nCa 1 \"a\"\n", 2, "already defined"),
            ("Ca 1 \"a\"\n[1] \"b\"[2]\n\nCa 1 \"b\"\n", 2, "no port 2"),
            (
                "Ca 1 \"a\"\n[1] \"b\"[1]\n\nCa 1 \"b\"\n",
                2,
                "\"b\" lists no port 1",
            ),
            (
                "Ca 1 \"a\"\n[1] \"s\"[1]\n\nSwitch 2 \"s\"\n[1] \"a\"[1]\n[2] \"s\"[1]\n",
                6,
                "line 5 says",
            ),
            (
                "Ca 1 \"a\"\n[1] \"s\"[1] # 4xQDR\n\nSwitch 2 \"s\"\n[1] \"a\"[1] # 4xFDR\n",
                2,
                "disagree on the link speed: QDR here, FDR on line 5",
            ),
            (
                "Ca 1 \"a\"\n[1] \"s\"[1] # 1xQDR\n\nSwitch 2 \"s\"\n[1] \"a\"[1] # 4xQDR\n",
                2,
                "disagree on the link width",
            ),
            ("Switch 2 \"s\"\n[1] \"s\"[1]\n", 2, "cabled to itself"),
            ("caguid=zz\n", 1, "not a number"),
            ("vendid=0x1000000\n", 1, "24 bits"),
            ("devid=0x10000\n", 1, "16 bits"),
            ("frobnicate=1\n", 1, "unknown setting"),
            ("hello world\n", 1, "expected a node record"),
            ("Rt 2 \"r\"\n", 1, "router"),
            ("include \"x.net\"\n", 1, "not supported"),
            ("Ca 1 \"a\"\n@1 x\n", 2, "alias"),
            (
                "Switch 4 \"a\" # \"d\" enhanced port 1\n",
                1,
                "enhanced port 0",
            ),
            ("Switch 4 \"a\" # lid x\n", 1, "lid \"x\""),
            ("Switch 4 \"a\" # lmc 9\n", 1, "lmc 9"),
            ("Switch 4 \"a\" extra\n", 1, "after the node id"),
            (
                "caguid=0x10\nCa 1 \"a\"\ncaguid=0x10\nCa 1 \"b\"\n",
                4,
                "already used by \"a\"",
            ),
            ("caguid=0xffffffffffffffff\nCa 1 \"a\"\n", 2, "2^64"),
            ("Ca 1 \"a\"\n[1] \"b\"[1] w=3x\n", 2, "bad w= value"),
            ("Ca 1 \"a\"\n[1] \"b\"[1] q=1\n", 2, "unknown port option"),
        ];
        for &(text, line, what) in cases {
            let e = err(text);
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(what), "{text:?}: {e}");
            assert!(e.to_string().starts_with(&format!("line {line}: ")));
        }
    }

    #[test]
    fn comments_blank_lines_and_crlf() {
        let text = "# header\r\n\r\nCa 1 \"a\"\r\n# inside\r\n[1] \"b\"[1]\r\n\r\nCa 1 \"b\"\r\n[1] \"a\"[1]\r\n";
        let t = Topology::parse(text).unwrap();
        assert_eq!(t.link_count(), 1);
        assert!(Topology::parse("").unwrap().nodes().is_empty());
        assert!(Topology::parse("# only\n\n").unwrap().nodes().is_empty());
    }

    #[test]
    fn rate_words() {
        assert_eq!(LinkRate::parse("4xQDR"), Some(LinkRate::QDR_4X));
        assert_eq!(
            LinkRate::parse("12xFDR10"),
            Some(LinkRate {
                width: LinkWidth::X12,
                speed: LinkSpeed::Fdr10
            })
        );
        assert_eq!(LinkRate::parse("3xQDR"), None);
        assert_eq!(LinkRate::parse("4xqdr"), None);
        assert_eq!(LinkRate::QDR_4X.to_string(), "4xQDR");
        assert!(
            parse::looks_like_rate("4xQRD")
                && !parse::looks_like_rate("0x12")
                && !parse::looks_like_rate("lid")
        );
        assert_eq!(LinkWidth::widest_in_mask(0x03), Some(LinkWidth::X4));
        assert_eq!(LinkSpeed::fastest_in_mask(0x07), Some(LinkSpeed::Qdr));
        assert_eq!(LinkSpeed::Qdr.enabled_mask(), 0x7);
        assert_eq!(LinkWidth::X4.enabled_mask(), 0x3);
        assert_eq!(LinkWidth::X4.to_string(), "4X");
    }

    fn roundtrip(t: &Topology) {
        let text = t.to_ibnetdiscover();
        let back = Topology::parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(&back, t, "{text}");
    }

    #[test]
    fn writer_roundtrips_the_seed_topologies() {
        roundtrip(&Topology::parse(TOPO_A).unwrap());
        roundtrip(&Topology::parse(TOPO_B).unwrap());
        roundtrip(&Topology::parse(TOPO_B_DISCOVERED).unwrap());
    }

    #[test]
    fn writer_output_looks_like_ibnetdiscover() {
        let text = Topology::parse(TOPO_B).unwrap().to_ibnetdiscover();
        assert!(text.contains(
            "switchguid=0x7cfe900300a0b0c0(7cfe900300a0b0c0)\nSwitch\t36 \"sw1\"\t\t# \"MF0;sw1:SX6036/U1\" enhanced port 0 lid 0 lmc 0\n"
        ));
        assert!(text
            .contains("[1]\t\"node1\"[1](e41d2d0300c00001) \t\t# \"node1 mlx4_0\" lid 0 4xQDR\n"));
        assert!(text.contains("[35]\t\"sw2\"[35] \t\t# \"MF0;sw2:SX6036/U1\" lid 0 4xQDR\n"));
        assert!(text.contains(
            "caguid=0xe41d2d0300c00000\nCa\t1 \"node1\"\t\t# \"node1 mlx4_0\"\n[1](e41d2d0300c00001) \t\"sw1\"[1]\t\t# lid 0 lmc 0 \"MF0;sw1:SX6036/U1\" lid 0 4xQDR\n"
        ));
    }

    #[test]
    fn fat_tree_shapes() {
        let t = Topology::fat_tree(504).unwrap();
        let switches = t.nodes().iter().filter(|n| n.is_switch()).count();
        assert_eq!(switches, 46);
        assert_eq!(t.nodes().len(), 504 + 46);
        assert_eq!(t.link_count(), 504 + 28 * 18);
        // Every leaf reaches every spine once.
        let leaf = t.node_index("leaf28").unwrap();
        for j in 0..18u8 {
            let peer = t
                .peer(Endpoint {
                    node: leaf,
                    port: 19 + j,
                })
                .unwrap();
            assert_eq!(t.nodes()[peer.node].id, format!("spine{}", j + 1));
            assert_eq!(peer.port, 28);
        }
        let h = t.node_index("host504").unwrap();
        let up = t.peer(Endpoint { node: h, port: 1 }).unwrap();
        assert_eq!((t.nodes()[up.node].id.as_str(), up.port), ("leaf28", 18));

        let small = Topology::fat_tree(20).unwrap();
        // 2 leaves, 1 spine with 18 cables from each.
        assert_eq!(small.nodes().iter().filter(|n| n.is_switch()).count(), 3);
        assert_eq!(small.link_count(), 20 + 36);
        let one = Topology::fat_tree(1).unwrap();
        assert_eq!(one.link_count(), 1 + 18);
        assert!(Topology::fat_tree(648).is_ok());
        assert_eq!(
            Topology::fat_tree(649).unwrap_err(),
            BuildError::BadFatTreeSize(649)
        );
        assert!(Topology::fat_tree(0).is_err());
        roundtrip(&small);
        roundtrip(&t);
    }

    #[test]
    fn builder_rejects_bad_input() {
        let mut t = Topology::new();
        let a = t.add_node(Node::ca("a", 2, Guid(0x10))).unwrap();
        assert_eq!(
            t.add_node(Node::ca("a", 1, Guid(0x100))),
            Err(BuildError::DuplicateId("a".into()))
        );
        assert!(matches!(
            t.add_node(Node::ca("b", 1, Guid(0x12))),
            Err(BuildError::DuplicateGuid {
                guid: Guid(0x12),
                ..
            })
        ));
        assert!(matches!(
            t.add_node(Node::ca("q\"", 1, Guid(0x100))),
            Err(BuildError::BadId(_))
        ));
        assert!(matches!(
            t.add_node(Node::ca("", 1, Guid(0x100))),
            Err(BuildError::BadId(_))
        ));
        assert_eq!(
            t.add_node(Node::switch("s", 0, Guid(0x100))),
            Err(BuildError::BadPortCount(0))
        );
        let s = t.add_node(Node::switch("s", 4, Guid(0x100))).unwrap();
        let e = |node, port| Endpoint { node, port };
        assert!(matches!(
            t.connect(e(a, 3), e(s, 1), LinkRate::QDR_4X),
            Err(BuildError::NoSuchPort { port: 3, .. })
        ));
        assert!(matches!(
            t.connect(e(s, 1), e(s, 1), LinkRate::QDR_4X),
            Err(BuildError::SelfLink { .. })
        ));
        t.connect(e(s, 2), e(a, 1), LinkRate::QDR_4X).unwrap();
        assert!(matches!(
            t.connect(e(a, 1), e(s, 3), LinkRate::QDR_4X),
            Err(BuildError::PortInUse { .. })
        ));
        assert_eq!(
            t.connect(e(9, 1), e(s, 3), LinkRate::QDR_4X),
            Err(BuildError::NoSuchNode(9))
        );
        // A switch may loop two of its own ports.
        t.connect(e(s, 3), e(s, 4), LinkRate::QDR_4X).unwrap();
        let l = t.link_at(e(s, 2)).unwrap();
        assert_eq!((l.a, l.b), (e(a, 1), e(s, 2)));
        assert_eq!(l.other(e(a, 1)), Some(e(s, 2)));
        roundtrip(&t);
    }

    /// Fragments that make the token soup reach deep into the parser.
    fn fragment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("Switch".to_string()),
            Just("Ca".to_string()),
            Just("Hca".to_string()),
            Just("\"a\"".to_string()),
            Just("\"b\"".to_string()),
            Just("[1]".to_string()),
            Just("[2]".to_string()),
            Just("[300]".to_string()),
            Just("(e41d)".to_string()),
            Just("#".to_string()),
            Just("4xQDR".to_string()),
            Just("12xFOO".to_string()),
            Just("enhanced port 0".to_string()),
            Just("lid 3".to_string()),
            Just("lmc".to_string()),
            Just("caguid=+1".to_string()),
            Just("switchguid=0xffffffffffffffff".to_string()),
            Just("w=2".to_string()),
            Just("\n".to_string()),
            Just(" ".to_string()),
            Just("\"".to_string()),
            "[0-9]{1,3}".prop_map(|s| s),
            "\\PC{0,4}".prop_map(|s| s),
        ]
    }

    proptest! {
        #[test]
        fn parse_never_panics(text in "\\PC{0,400}") {
            let _ = Topology::parse(&text);
        }

        #[test]
        fn parse_token_soup_never_panics(parts in proptest::collection::vec(fragment(), 0..60)) {
            let text = parts.join(" ");
            if let Ok(t) = Topology::parse(&text) {
                // Whatever parses also round-trips through the writer.
                let back = Topology::parse(&t.to_ibnetdiscover());
                prop_assert_eq!(back, Ok(t));
            }
        }

        #[test]
        fn random_topologies_roundtrip(
            ports in proptest::collection::vec(1u8..6, 1..8),
            switches in proptest::collection::vec(any::<bool>(), 8),
            cables in proptest::collection::vec((0usize..8, 1u8..6, 0usize..8, 1u8..6, 0usize..7), 0..20),
        ) {
            let mut t = Topology::new();
            for (i, &n) in ports.iter().enumerate() {
                let id = format!("n{i}");
                let node = if switches[i] {
                    let mut s = Node::switch(&id, n, Guid(0x1000 + i as u64));
                    s.enhanced_port0 = i % 2 == 0;
                    s
                } else {
                    Node::ca(&id, n, Guid(0x10_0000 + 0x100 * i as u64))
                };
                t.add_node(node).unwrap();
            }
            for (a, pa, b, pb, s) in cables {
                let rate = LinkRate { width: LinkWidth::ALL[s % 5], speed: LinkSpeed::ALL[s] };
                let _ = t.connect(Endpoint { node: a, port: pa }, Endpoint { node: b, port: pb }, rate);
            }
            let text = t.to_ibnetdiscover();
            prop_assert_eq!(Topology::parse(&text), Ok(t));
        }
    }
}
