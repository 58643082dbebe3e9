//! Fabric diagnostics over a swept [`Subnet`]: `ibnetdiscover` (default, `-l`/`-H`/`-S`, `-g`,
//! `-p`), `ibnodes`/`ibhosts`/`ibswitches`, `iblinkinfo` (default, `-l`, `-p`, `-d`,
//! `--switches-only`/`--cas-only`, one node) and `ibaddr`.
//!
//! # Order and visibility, as libibnetdisc has them
//!
//! The real tools print what libibnetdisc built, and its data structures decide the order:
//! every node is pushed at the *head* of its lists when created, so lists run in reverse
//! discovery order (switches before CAs in `ibnetdiscover`, mixed in `iblinkinfo`). Creation
//! order is a breadth-first walk from the sweeping port: switches are explored through all
//! their ports in ascending order, the sweeping CA only through its own port, other CAs not at
//! all. [`discovery_order`] recomputes that walk from the subnet's links, so the output does not
//! depend on the order a crawler happened to store nodes in (only `nodes[0]`, the sweeping node,
//! matters).
//!
//! For the same reason a CA port is listed only if libibnetdisc would have read it: the port
//! the node was entered by, or a port cabled to a switch (which the walk crosses). A CA's other
//! ports stay invisible even when a crawler read them, exactly like `ibnetdiscover` on
//! hardware.

use core::fmt::Write as _;

use serde_json::{json, Value};
use softib_fabric::subnet::{PortRef, Subnet, SubnetNode};
use softib_wire::mad::attr::{capability_mask, NodeType, PortInfo, PortState};
use softib_wire::{Gid, Guid, Lid};

use crate::fmt::inet_ntop6;

/// libibnetdisc's node creation order: indices into `subnet.nodes`, the sweeping node first.
/// Nodes the walk cannot reach (a hand-built subnet may hold some) follow in `nodes` order.
pub fn discovery_order(subnet: &Subnet) -> Vec<usize> {
    let n = subnet.nodes.len();
    let mut seen = vec![false; n];
    let mut order = Vec::with_capacity(n);
    if n > 0 {
        seen[0] = true;
        order.push(0);
    }
    let mut next = 0;
    while next < order.len() {
        let at = order[next];
        next += 1;
        let node = &subnet.nodes[at];
        let ports: Vec<u8> = if node.is_switch() {
            (1..=node.info.num_ports).collect()
        } else if at == 0 {
            vec![node.info.local_port_num]
        } else {
            Vec::new()
        };
        for port in ports {
            if let Some(peer) = subnet.peer(PortRef { node: at, port }) {
                if let Some(flag) = seen.get_mut(peer.node) {
                    if !*flag {
                        *flag = true;
                        order.push(peer.node);
                    }
                }
            }
        }
    }
    order.extend((0..n).filter(|&i| !seen[i]));
    order
}

/// Whether libibnetdisc holds `port` of `node` (see the module documentation).
fn visible(subnet: &Subnet, node: usize, port: u8) -> bool {
    let Some(n) = subnet.nodes.get(node) else {
        return false;
    };
    if port == 0 || n.port(port).is_none() {
        return false;
    }
    if n.is_switch() || port == n.info.local_port_num {
        return true;
    }
    subnet
        .peer(PortRef { node, port })
        .and_then(|p| subnet.nodes.get(p.node))
        .is_some_and(SubnetNode::is_switch)
}

/// The other end of the cable in `port` of `node`.
fn remote(subnet: &Subnet, node: usize, port: u8) -> Option<PortRef> {
    subnet
        .peer(PortRef { node, port })
        .filter(|p| p.node < subnet.nodes.len())
}

fn node_at(subnet: &Subnet, i: usize) -> &SubnetNode {
    &subnet.nodes[i]
}

/// The capability mask that governs a port's extended speeds: a switch's port 0, a CA's own.
fn cap_mask(node: &SubnetNode, port: u8) -> u32 {
    let p = if node.is_switch() { 0 } else { port };
    node.port(p).map_or(0, |i| i.capability_mask)
}

/// The LID other tools show for the node behind `r`: a switch's port-0 LID, a CA port's own.
fn lid_of(subnet: &Subnet, r: PortRef) -> u16 {
    node_at(subnet, r.node).lid(r.port).0
}

fn node_name(n: &SubnetNode) -> String {
    let prefix = match n.info.node_type {
        NodeType::Switch => 'S',
        NodeType::Router => 'R',
        _ => 'H',
    };
    format!("\"{prefix}-{:016x}\"", n.info.node_guid.0)
}

fn port_guid(n: &SubnetNode, port: u8) -> u64 {
    n.port_guid(port).map_or(0, |g| g.0)
}

fn width_compat(w: u8) -> &'static str {
    match w {
        1 => "1x",
        2 => "4x",
        4 => "8x",
        8 => "12x",
        16 => "2x",
        _ => "??",
    }
}

fn speed_compat(node: &SubnetNode, port: u8, info: &PortInfo) -> &'static str {
    let espeed = if cap_mask(node, port) & capability_mask::IS_EXTENDED_SPEEDS_SUPPORTED != 0 {
        info.link_speed_ext_active
    } else {
        0
    };
    match espeed {
        0 => match info.link_speed_active {
            1 => "SDR",
            2 => "DDR",
            4 => "QDR",
            _ => "???",
        },
        1 => "FDR",
        2 => "EDR",
        4 => "HDR",
        8 => "NDR",
        _ => "???",
    }
}

/// Which node types an `ibnetdiscover` list or an `iblinkinfo` run covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeFilter {
    /// Every node.
    #[default]
    All,
    /// Channel adapters only (`-H`, `--cas-only`).
    Cas,
    /// Switches only (`-S`, `--switches-only`).
    Switches,
}

impl NodeFilter {
    fn keeps(self, n: &SubnetNode) -> bool {
        match self {
            NodeFilter::All => true,
            NodeFilter::Cas => n.info.node_type == NodeType::Ca,
            NodeFilter::Switches => n.is_switch(),
        }
    }
}

/// The options of `ibnetdiscover` this module renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IbnetdiscoverArgs {
    /// `-l` (all), `-H` (CAs) or `-S` (switches): one line per node instead of the topology.
    pub list: Option<NodeFilter>,
    /// `-g`: group by chassis (softib has no chassis: everything is "Non-Chassis Nodes").
    pub group: bool,
    /// `-p`: the ports report.
    pub ports: bool,
}

/// Nodes of one type in list order (reverse discovery).
fn type_list(subnet: &Subnet, order: &[usize], pred: impl Fn(&SubnetNode) -> bool) -> Vec<usize> {
    order
        .iter()
        .rev()
        .copied()
        .filter(|&i| pred(node_at(subnet, i)))
        .collect()
}

/// `ibnetdiscover`. `generated_on` is the `ctime()` text of the header (without newline), e.g.
/// from [`ctime_utc`](crate::ctime_utc); it is not used by the list and ports variants.
pub fn ibnetdiscover(subnet: &Subnet, args: &IbnetdiscoverArgs, generated_on: &str) -> String {
    let order = discovery_order(subnet);
    let mut out = String::new();
    if let Some(filter) = args.list {
        // `-l` lists the CA list, then the switch list, then the router list.
        let cas = type_list(subnet, &order, |n| n.info.node_type == NodeType::Ca);
        let switches = type_list(subnet, &order, SubnetNode::is_switch);
        let others = type_list(subnet, &order, |n| {
            !n.is_switch() && n.info.node_type != NodeType::Ca
        });
        for i in cas.into_iter().chain(switches).chain(others) {
            let n = node_at(subnet, i);
            if !filter.keeps(n) {
                continue;
            }
            let ty = match n.info.node_type {
                NodeType::Switch => "Switch",
                NodeType::Ca => "Ca",
                NodeType::Router => "Router",
                NodeType::Unknown(_) => "???",
            };
            let _ = writeln!(
                out,
                "{ty}\t : 0x{:016x} ports {} devid 0x{:x} vendid 0x{:x} \"{}\"",
                n.info.node_guid.0,
                n.info.num_ports,
                n.info.device_id,
                n.info.vendor_id,
                n.description
            );
        }
        return out;
    }
    if args.ports {
        ports_report(subnet, &order, &mut out);
        return out;
    }
    let Some(from) = subnet.nodes.first() else {
        return out;
    };
    let _ = write!(
        out,
        "#\n# Topology file: generated on {generated_on}\n#\n# Initiated from node {:016x} port {:016x}\n",
        from.info.node_guid.0, from.info.port_guid.0
    );
    if args.group {
        out.push_str("\nNon-Chassis Nodes\n");
    }
    for i in type_list(subnet, &order, SubnetNode::is_switch) {
        out_switch(subnet, i, args.group, &mut out);
    }
    for i in type_list(subnet, &order, |n| n.info.node_type == NodeType::Ca) {
        out_ca(subnet, i, &mut out);
    }
    for i in type_list(subnet, &order, |n| {
        !n.is_switch() && n.info.node_type != NodeType::Ca
    }) {
        out_ca(subnet, i, &mut out);
    }
    out
}

fn out_ids(n: &SubnetNode, out: &mut String) {
    let _ = write!(
        out,
        "\nvendid=0x{:x}\ndevid=0x{:x}\n",
        n.info.vendor_id, n.info.device_id
    );
    if n.info.system_image_guid.0 != 0 {
        let _ = writeln!(out, "sysimgguid=0x{:x}", n.info.system_image_guid.0);
    }
}

fn out_switch(subnet: &Subnet, i: usize, group: bool, out: &mut String) {
    let n = node_at(subnet, i);
    out_ids(n, out);
    let _ = write!(
        out,
        "switchguid=0x{:x}({:x})",
        n.info.node_guid.0, n.info.port_guid.0
    );
    if group {
        out.push_str("\t# ");
    }
    out.push('\n');
    let enhanced = n.switch_info.is_some_and(|s| s.enhanced_port0);
    let _ = writeln!(
        out,
        "Switch\t{} {}\t\t# \"{}\" {} port 0 lid {} lmc {}",
        n.info.num_ports,
        node_name(n),
        n.description,
        if enhanced { "enhanced" } else { "base" },
        n.lid(0).0,
        n.port(0).map_or(0, |p| p.lmc)
    );
    for p in 1..=n.info.num_ports {
        let (Some(info), Some(r)) = (n.port(p), remote(subnet, i, p)) else {
            continue;
        };
        let rn = node_at(subnet, r.node);
        let _ = write!(out, "[{p}]\t{}[{}]", node_name(rn), r.port);
        if !rn.is_switch() {
            let _ = write!(out, "({:x}) ", port_guid(rn, r.port));
        }
        let _ = writeln!(
            out,
            "\t\t# \"{}\" lid {} {}{}",
            rn.description,
            lid_of(subnet, r),
            width_compat(info.link_width_active),
            speed_compat(n, p, info)
        );
    }
}

fn out_ca(subnet: &Subnet, i: usize, out: &mut String) {
    let n = node_at(subnet, i);
    out_ids(n, out);
    let (lower, upper) = match n.info.node_type {
        NodeType::Ca => ("ca", "Ca"),
        NodeType::Router => ("rt", "Rt"),
        _ => ("???", "???"),
    };
    let _ = writeln!(out, "{lower}guid=0x{:x}", n.info.node_guid.0);
    let _ = writeln!(
        out,
        "{upper}\t{} {}\t\t# \"{}\"",
        n.info.num_ports,
        node_name(n),
        n.description
    );
    for p in 1..=n.info.num_ports {
        if !visible(subnet, i, p) {
            continue;
        }
        let (Some(info), Some(r)) = (n.port(p), remote(subnet, i, p)) else {
            continue;
        };
        let rn = node_at(subnet, r.node);
        let _ = write!(
            out,
            "[{p}]({:x}) \t{}[{}]",
            port_guid(n, p),
            node_name(rn),
            r.port
        );
        if !rn.is_switch() {
            let _ = write!(out, " ({:x}) ", port_guid(rn, r.port));
        }
        let _ = writeln!(
            out,
            "\t\t# lid {} lmc {} \"{}\" lid {} {}{}",
            n.lid(p).0,
            info.lmc,
            rn.description,
            lid_of(subnet, r),
            width_compat(info.link_width_active),
            speed_compat(n, p, info)
        );
    }
}

fn ports_report(subnet: &Subnet, order: &[usize], out: &mut String) {
    let kind = |n: &SubnetNode| match n.info.node_type {
        NodeType::Switch => "SW",
        NodeType::Ca => "CA",
        NodeType::Router => "RT",
        NodeType::Unknown(_) => "??",
    };
    for i in order.iter().rev().copied() {
        let n = node_at(subnet, i);
        for p in (1..=n.info.num_ports).rev() {
            if !visible(subnet, i, p) {
                continue;
            }
            let Some(info) = n.port(p) else { continue };
            let _ = write!(
                out,
                "{:>2} {:5} {:2} 0x{:016x} {} {}",
                kind(n),
                n.lid(p).0,
                p,
                port_guid(n, p),
                width_compat(info.link_width_active),
                speed_compat(n, p, info)
            );
            match remote(subnet, i, p) {
                Some(r) => {
                    let rn = node_at(subnet, r.node);
                    let _ = writeln!(
                        out,
                        " - {:>2} {:5} {:2} 0x{:016x} ( '{}' - '{}' )",
                        kind(rn),
                        lid_of(subnet, r),
                        r.port,
                        port_guid(rn, r.port),
                        n.description,
                        rn.description
                    );
                }
                None => {
                    let _ = writeln!(out, "{:36}'{}'", "", n.description);
                }
            }
        }
    }
}

/// `ibhosts`: one line per CA, in `ibnetdiscover` order.
pub fn ibhosts(subnet: &Subnet) -> String {
    let order = discovery_order(subnet);
    let mut out = String::new();
    for i in type_list(subnet, &order, |n| n.info.node_type == NodeType::Ca) {
        let n = node_at(subnet, i);
        let _ = writeln!(
            out,
            "Ca\t: 0x{:016x} ports {} \"{}\"",
            n.info.node_guid.0, n.info.num_ports, n.description
        );
    }
    out
}

/// `ibswitches`: one line per switch, in `ibnetdiscover` order.
pub fn ibswitches(subnet: &Subnet) -> String {
    let order = discovery_order(subnet);
    let mut out = String::new();
    for i in type_list(subnet, &order, SubnetNode::is_switch) {
        let n = node_at(subnet, i);
        let enhanced = n.switch_info.is_some_and(|s| s.enhanced_port0);
        let _ = writeln!(
            out,
            "Switch\t: 0x{:016x} ports {} \"{}\" {} port 0 lid {} lmc {}",
            n.info.node_guid.0,
            n.info.num_ports,
            n.description,
            if enhanced { "enhanced" } else { "base" },
            n.lid(0).0,
            n.port(0).map_or(0, |p| p.lmc)
        );
    }
    out
}

/// `ibnodes`: `ibhosts` then `ibswitches`.
pub fn ibnodes(subnet: &Subnet) -> String {
    let mut out = ibhosts(subnet);
    out.push_str(&ibswitches(subnet));
    out
}

/// `ibnodes --json` (a softib extension): the same nodes in the same order, as a JSON array.
pub fn ibnodes_json(subnet: &Subnet) -> Value {
    let order = discovery_order(subnet);
    let cas = type_list(subnet, &order, |n| n.info.node_type == NodeType::Ca);
    let switches = type_list(subnet, &order, SubnetNode::is_switch);
    let nodes = cas.into_iter().chain(switches).map(|i| {
        let n = node_at(subnet, i);
        let mut v = json!({
            "type": if n.is_switch() { "Switch" } else { "Ca" },
            "node_guid": format!("0x{:016x}", n.info.node_guid.0),
            "ports": n.info.num_ports,
            "description": n.description,
            "device_id": format!("0x{:x}", n.info.device_id),
            "vendor_id": format!("0x{:x}", n.info.vendor_id),
        });
        if n.is_switch() {
            v["enhanced_port0"] = Value::from(n.switch_info.is_some_and(|s| s.enhanced_port0));
            v["lid"] = Value::from(n.lid(0).0);
            v["lmc"] = Value::from(n.port(0).map_or(0, |p| p.lmc));
        } else {
            v["port_lids"] = Value::Array(
                (1..=n.info.num_ports)
                    .filter(|&p| visible(subnet, i, p))
                    .map(|p| json!({"port": p, "lid": n.lid(p).0}))
                    .collect(),
            );
        }
        v
    });
    Value::Array(nodes.collect())
}

/// The options of `iblinkinfo` this module renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IblinkinfoArgs {
    /// `-l`: one line per port, with GUIDs.
    pub line: bool,
    /// `-d`: only ports that are Down.
    pub down_only: bool,
    /// `-p`: add HOQ life and VL stall count.
    pub sw_settings: bool,
    /// `--switches-only` / `--cas-only`.
    pub only: NodeFilter,
    /// `-D <path>` / `-S <guid>`: only this node (an index into `subnet.nodes`, resolved by
    /// the caller).
    pub node: Option<usize>,
}

fn linkwidth(w: u8) -> String {
    match w {
        1 => "1X".into(),
        2 => "4X".into(),
        4 => "8X".into(),
        8 => "12X".into(),
        16 => "2X".into(),
        other => format!("undefined ({other})"),
    }
}

fn linkspeed(s: u8) -> String {
    match s {
        1 => "2.5 Gbps".into(),
        2 => "5.0 Gbps".into(),
        4 => "10.0 Gbps".into(),
        other => format!("undefined ({other})"),
    }
}

fn linkspeed_ext(s: u8) -> String {
    match s {
        0 => "No Extended Speed".into(),
        1 => "14.0625 Gbps".into(),
        2 => "25.78125 Gbps".into(),
        4 => "53.125 Gbps".into(),
        8 => "106.25 Gbps".into(),
        other => format!("undefined ({other})"),
    }
}

/// libibmad's `mad_dump_portstate` names.
pub(crate) fn portstate(s: PortState) -> String {
    match u8::from(s) {
        0 => "NoChange".into(),
        1 => "Down".into(),
        2 => "Initialize".into(),
        3 => "Armed".into(),
        4 => "Active".into(),
        other => format!("?({other})"),
    }
}

/// libibmad's `mad_dump_physportstate` names.
pub(crate) fn physstate(s: softib_wire::mad::attr::PortPhysicalState) -> String {
    match u8::from(s) {
        0 => "NoChange".into(),
        1 => "Sleep".into(),
        2 => "Polling".into(),
        3 => "Disabled".into(),
        4 => "PortConfigurationTraining".into(),
        5 => "LinkUp".into(),
        6 => "LinkErrorRecovery".into(),
        7 => "PhyTest".into(),
        other => format!("?({other})"),
    }
}

/// The highest bit of a width mask, in get_max_width's preference (12X, 8X, 4X, 2X, 1X).
fn max_width(mask: u8) -> u8 {
    if mask & 8 != 0 {
        8
    } else if mask & 4 != 0 {
        4
    } else if mask & 2 != 0 {
        2
    } else if mask & 0x10 != 0 {
        0x10
    } else {
        1
    }
}

/// The highest bit of a speed mask (get_max).
fn max_speed(mask: u8) -> u8 {
    (0..8)
        .rev()
        .map(|b| 1u8 << b)
        .find(|b| mask & b != 0)
        .unwrap_or(1)
}

/// ibdiag_common's `get_max_msg`: "Could be ..." when both ends support more than is active.
fn max_msg(subnet: &Subnet, node: usize, port: u8, r: PortRef) -> (String, String) {
    let (n, rn) = (node_at(subnet, node), node_at(subnet, r.node));
    let (Some(a), Some(b)) = (n.port(port), rn.port(r.port)) else {
        return (String::new(), String::new());
    };
    let mut width_msg = String::new();
    let w = max_width(a.link_width_supported & b.link_width_supported);
    if w & a.link_width_active == 0 {
        width_msg = format!("Could be {}", linkwidth(w));
    }
    let ext = capability_mask::IS_EXTENDED_SPEEDS_SUPPORTED;
    let mut speed_msg = String::new();
    if cap_mask(n, port) & ext != 0
        && cap_mask(rn, r.port) & ext != 0
        && a.link_speed_ext_supported != 0
        && b.link_speed_ext_supported != 0
    {
        let s = max_speed(a.link_speed_ext_supported & b.link_speed_ext_supported);
        if s & a.link_speed_ext_active == 0 {
            speed_msg = format!("Could be {}", linkspeed_ext(s));
        }
    } else {
        let s = max_speed(a.link_speed_supported & b.link_speed_supported);
        if s & a.link_speed_active == 0 {
            speed_msg = format!("Could be {}", linkspeed(s));
        }
    }
    (width_msg, speed_msg)
}

fn linkinfo_port(
    subnet: &Subnet,
    i: usize,
    p: u8,
    info: &PortInfo,
    args: &IblinkinfoArgs,
    out: &mut String,
) {
    let n = node_at(subnet, i);
    let down = info.port_state == PortState::Down;
    let mut link = if !down {
        let espeed = if cap_mask(n, p) & capability_mask::IS_EXTENDED_SPEEDS_SUPPORTED != 0 {
            info.link_speed_ext_active
        } else {
            0
        };
        let speed = if espeed == 0 {
            linkspeed(info.link_speed_active)
        } else {
            linkspeed_ext(espeed)
        };
        format!(
            "({:>3} {:>18} {:>6}/{:>8})",
            linkwidth(info.link_width_active),
            speed,
            portstate(info.port_state),
            physstate(info.port_physical_state)
        )
    } else {
        format!(
            "(              {:>6}/{:>8})",
            portstate(info.port_state),
            physstate(info.port_physical_state)
        )
    };
    if args.sw_settings && !down {
        let _ = write!(
            link,
            " (HOQ:{} VL_Stall:{})",
            info.hoq_life, info.vl_stall_count
        );
    }
    let remote_str = match remote(subnet, i, p) {
        Some(r) => {
            let rn = node_at(subnet, r.node);
            let (wm, sm) = max_msg(subnet, i, p, r);
            let guid = if args.line {
                format!("0x{:016x} ", port_guid(rn, r.port))
            } else {
                String::new()
            };
            format!(
                "{guid}{:6} {:4}[  ] \"{}\" ({wm} {sm})",
                lid_of(subnet, r),
                r.port,
                rn.description
            )
        }
        None if down => "           [  ] \"\" ( )".into(),
        None => "    \"Port not available\"".into(),
    };
    if args.line {
        let _ = write!(out, "0x{:016x} \"{:>30}\" ", port_guid(n, p), n.description);
    } else {
        out.push_str("      ");
    }
    if !n.is_switch() && !args.line {
        let _ = write!(out, "0x{:016x} ", port_guid(n, p));
    }
    let _ = writeln!(
        out,
        "{:6} {:4}[  ] =={link}==>  {remote_str}",
        n.lid(p).0,
        p
    );
}

/// `iblinkinfo`.
pub fn iblinkinfo(subnet: &Subnet, args: &IblinkinfoArgs) -> String {
    let order = discovery_order(subnet);
    let mut out = String::new();
    let nodes: Vec<usize> = match args.node {
        Some(i) if i < subnet.nodes.len() => vec![i],
        Some(_) => Vec::new(),
        None => order.iter().rev().copied().collect(),
    };
    for i in nodes {
        let n = node_at(subnet, i);
        if !args.only.keeps(n) {
            continue;
        }
        let mut header = false;
        for p in 1..=n.info.num_ports {
            if !visible(subnet, i, p) {
                continue;
            }
            let Some(info) = n.port(p) else { continue };
            if args.down_only && info.port_state != PortState::Down {
                continue;
            }
            if !header && !args.line {
                if n.is_switch() {
                    let _ = writeln!(out, "Switch: 0x{:016x} {}:", port_guid(n, 0), n.description);
                } else {
                    let ty = if n.info.node_type == NodeType::Ca {
                        "CA"
                    } else {
                        "Router"
                    };
                    let _ = writeln!(out, "{ty}: {}:", n.description);
                }
            }
            header = true;
            linkinfo_port(subnet, i, p, info, args, &mut out);
        }
    }
    out
}

/// `ibaddr` for a port: its GID (GidPrefix from PortInfo + port GUID) and LID range.
pub fn ibaddr(gid_prefix: u64, port_guid: Guid, lid: Lid, lmc: u8) -> String {
    let gid = Gid::from_prefix_guid(gid_prefix, port_guid);
    let end = u32::from(lid.0) + (1u32 << lmc.min(7)) - 1;
    format!(
        "GID {} LID start 0x{:x} end 0x{:x}\n",
        inet_ntop6(&gid.0),
        lid.0,
        end
    )
}

/// `ibaddr` for `port` of a swept node (a switch answers for port 0), `None` if its PortInfo
/// was not read.
pub fn ibaddr_node(node: &SubnetNode, port: u8) -> Option<String> {
    let port = if node.is_switch() { 0 } else { port };
    let info = node.port(port)?;
    Some(ibaddr(
        info.gid_prefix,
        node.port_guid(port)?,
        info.lid,
        info.lmc,
    ))
}
