//! Whole-fabric tests on the in-memory fabric: directed-route walks, discovery of every node by
//! BFS using only SMPs (the core of an SM's heavy sweep), then LIDs, LFTs and port states set
//! by SMPs, and LID-routed traffic through the switches. The expected LIDs and LFTs are what
//! real opensm (minhop) produced on ibsim for topology B (`../shared/golden/ibsim/README.md`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use softib_fabric::testing::{data_packet, Hop, Outcome, TestFabric};
use softib_fabric::topology::{Endpoint, Topology};
use softib_wire::mad::attr::{
    LinearForwardingTable, NodeInfo, NodeType, PortInfo, PortPhysicalState, PortState,
    SmpAttribute, SwitchInfo,
};
use softib_wire::mad::{smp, status, AttrId, Method};
use softib_wire::{Guid, Lid};

const TOPO_A: &str = include_str!("data/topoA.net");
const TOPO_B: &str = include_str!("data/topoB.net");

fn fabric(text: &str) -> TestFabric {
    TestFabric::new(Topology::parse(text).unwrap())
}

fn idx(f: &TestFabric, id: &str) -> usize {
    f.topology().node_index(id).unwrap()
}

#[test]
fn dr_node_info_from_node1_to_node4_and_back() {
    let mut f = fabric(TOPO_B);
    let (node1, sw1, sw2, node4) = (
        idx(&f, "node1"),
        idx(&f, "sw1"),
        idx(&f, "sw2"),
        idx(&f, "node4"),
    );
    let req = smp::Repr::dr_get(0x1001, AttrId::NODE_INFO, 0, 0, &[1, 35, 2]).unwrap();
    let resp = f.send_dr(node1, 1, &req).expect("a response");
    assert_eq!(resp.header.method, Method::GetResp);
    assert_eq!(resp.header.status, status::SUCCESS);
    let ni = NodeInfo::parse(&resp.data).unwrap();
    assert_eq!(ni.node_guid, Guid(0xe41d2d0300c00030));
    assert_eq!(ni.port_guid, Guid(0xe41d2d0300c00031));
    assert_eq!(ni.local_port_num, 1);
    let dr = resp.dr.unwrap();
    assert!(dr.direction_inbound);
    assert_eq!(dr.hop_cnt, 3);
    assert_eq!(dr.hop_ptr, 0, "the SM receives it with HopPointer 0");
    assert_eq!(dr.path(), &[1, 35, 2]);
    assert_eq!(dr.return_ports(), &[1, 35, 1]);
    // Every arrival, with the D bit and HopPointer it carried.
    let hop = |node, in_port, inbound, ptr| Hop {
        node,
        in_port,
        dr: Some((inbound, ptr)),
    };
    assert_eq!(
        f.trace(),
        &[
            hop(sw1, 1, false, 1),
            hop(sw2, 35, false, 2),
            hop(node4, 1, false, 3),
            hop(sw2, 2, true, 3),
            hop(sw1, 35, true, 2),
            hop(node1, 1, true, 1),
        ]
    );
    // The parallel inter-switch link works as well, and a Get of the switch in between.
    let req = smp::Repr::dr_get(0x1002, AttrId::NODE_INFO, 0, 0, &[1, 36, 2]).unwrap();
    let ni = NodeInfo::parse(&f.send_dr(node1, 1, &req).unwrap().data).unwrap();
    assert_eq!(ni.node_guid, Guid(0xe41d2d0300c00030));
    let req = smp::Repr::dr_get(0x1003, AttrId::NODE_INFO, 0, 0, &[1, 36]).unwrap();
    let ni = NodeInfo::parse(&f.send_dr(node1, 1, &req).unwrap().data).unwrap();
    assert_eq!(
        (ni.node_guid, ni.local_port_num),
        (Guid(0x7cfe900300a0b1c0), 36)
    );
    // HopCount 0: the SM's own node.
    let req = smp::Repr::dr_get(0x1004, AttrId::NODE_INFO, 0, 0, &[]).unwrap();
    let ni = NodeInfo::parse(&f.send_dr(node1, 1, &req).unwrap().data).unwrap();
    assert_eq!(ni.node_guid, Guid(0xe41d2d0300c00000));
    assert!(f.trace().is_empty());
}

#[test]
fn dr_walks_that_cannot_finish() {
    let mut f = fabric(TOPO_B);
    let (node1, sw1, node4) = (idx(&f, "node1"), idx(&f, "sw1"), idx(&f, "node4"));
    // Port 3 of sw1 has no cable: the switch drops it.
    let req = smp::Repr::dr_get(1, AttrId::NODE_INFO, 0, 0, &[1, 3]).unwrap();
    assert_eq!(f.send_dr(node1, 1, &req), None);
    assert_eq!(f.trace().len(), 1);
    assert_eq!(f.trace()[0].node, sw1);
    // Through a CA: node4 is not a switch and does not relay.
    let req = smp::Repr::dr_get(2, AttrId::NODE_INFO, 0, 0, &[1, 35, 2, 1]).unwrap();
    assert_eq!(f.send_dr(node1, 1, &req), None);
    assert_eq!(f.trace().last().unwrap().node, node4);
    assert_eq!(
        f.sma(node4)
            .counters()
            .dr_dropped(softib_fabric::DrDrop::NotASwitch),
        1
    );
    // A CA's SM can only send through its own port.
    let req = smp::Repr::dr_get(3, AttrId::NODE_INFO, 0, 0, &[2]).unwrap();
    assert_eq!(f.send_dr(node1, 1, &req), None);
}

// ---- A miniature SM, using nothing but SMPs ------------------------------------------------

/// What the sweep found about one node.
#[derive(Debug, Clone)]
struct Found {
    info: NodeInfo,
    /// The directed route from the SM to it.
    path: Vec<u8>,
    /// The port the route arrives on.
    arrival: u8,
}

#[derive(Debug, Default)]
struct Sweep {
    nodes: Vec<Found>,
    by_guid: BTreeMap<Guid, usize>,
    /// Cables as ((node, port), (node, port)), smaller end first.
    links: BTreeSet<((usize, u8), (usize, u8))>,
}

struct MiniSm {
    node: usize,
    port: u8,
    tid: u64,
}

impl MiniSm {
    fn get(&mut self, f: &mut TestFabric, path: &[u8], attr: AttrId, attr_mod: u32) -> [u8; 64] {
        self.tid += 1;
        let req = smp::Repr::dr_get(self.tid, attr, attr_mod, 0, path).unwrap();
        let resp = f.send_dr(self.node, self.port, &req).expect("a response");
        assert_eq!(resp.header.status, status::SUCCESS, "{attr} via {path:?}");
        resp.data
    }

    fn set<A: SmpAttribute>(
        &mut self,
        f: &mut TestFabric,
        path: &[u8],
        attr: &A,
        attr_mod: u32,
    ) -> [u8; 64] {
        self.tid += 1;
        let req =
            smp::Repr::dr_set(self.tid, A::ATTR_ID, attr_mod, 0, path, attr.to_data()).unwrap();
        let resp = f.send_dr(self.node, self.port, &req).expect("a response");
        assert_eq!(
            resp.header.status,
            status::SUCCESS,
            "Set {:?} via {path:?}",
            A::ATTR_ID
        );
        resp.data
    }

    /// BFS over directed routes, as opensm's heavy sweep does: NodeInfo of each new route's
    /// end; for a switch, PortInfo of every port, and a new route through each port whose
    /// link is up.
    fn discover(&mut self, f: &mut TestFabric) -> Sweep {
        let mut sweep = Sweep::default();
        // (route, the (node, port) it leaves the previous node by)
        type Route = (Vec<u8>, Option<(usize, u8)>);
        let mut queue: VecDeque<Route> = VecDeque::new();
        queue.push_back((Vec::new(), None));
        while let Some((path, parent)) = queue.pop_front() {
            let info = NodeInfo::parse(&self.get(f, &path, AttrId::NODE_INFO, 0)).unwrap();
            let arrival = if path.is_empty() {
                self.port
            } else {
                info.local_port_num
            };
            let (me, new) = match sweep.by_guid.get(&info.node_guid) {
                Some(&i) => (i, false),
                None => {
                    sweep.nodes.push(Found {
                        info,
                        path: path.clone(),
                        arrival,
                    });
                    sweep.by_guid.insert(info.node_guid, sweep.nodes.len() - 1);
                    (sweep.nodes.len() - 1, true)
                }
            };
            if let Some(p) = parent {
                let a = p.min((me, arrival));
                let b = p.max((me, arrival));
                sweep.links.insert((a, b));
            }
            if !new {
                continue;
            }
            let ports: Vec<u8> = match info.node_type {
                NodeType::Switch => (1..=info.num_ports)
                    .filter(|&p| p != arrival || path.is_empty())
                    .collect(),
                _ if path.is_empty() => vec![self.port],
                _ => Vec::new(),
            };
            for p in ports {
                let pi =
                    PortInfo::parse(&self.get(f, &path, AttrId::PORT_INFO, u32::from(p))).unwrap();
                if pi.port_physical_state == PortPhysicalState::LinkUp {
                    let mut next = path.clone();
                    next.push(p);
                    queue.push_back((next, Some((me, p))));
                }
            }
        }
        sweep
    }
}

/// The key opensm sorts ports by when it hands out LIDs: the GUID's bytes in network order
/// read as a little-endian number.
fn lid_order_key(guid: Guid) -> u64 {
    u64::from_le_bytes(guid.0.to_be_bytes())
}

/// What the mini SM configured.
struct Configured {
    sweep: Sweep,
    /// LID of each found node (CAs: their one discovered port; switches: port 0).
    lids: BTreeMap<usize, u16>,
}

/// Discovers, assigns LIDs (SM port 1, then opensm's order), routes min-hop with opensm's
/// balancing (LIDs ascending, least-used port, then lowest port), programs SwitchInfo and LFTs,
/// and brings every port through Armed to Active — all with directed-route SMPs.
fn bring_up(f: &mut TestFabric, sm_node: usize, sm_port: u8) -> Configured {
    let mut sm = MiniSm {
        node: sm_node,
        port: sm_port,
        tid: 0,
    };
    let sweep = sm.discover(f);
    let sm_index = 0; // the SM's own node is found first
    let mut order: Vec<usize> = (0..sweep.nodes.len()).filter(|&i| i != sm_index).collect();
    order.sort_by_key(|&i| lid_order_key(sweep.nodes[i].info.port_guid));
    let lids: BTreeMap<usize, u16> = std::iter::once(sm_index)
        .chain(order)
        .enumerate()
        .map(|(n, i)| (i, n as u16 + 1))
        .collect();

    // PortInfo: LID, SM LID, subnet prefix.
    for (&i, &lid) in &lids {
        let n = sweep.nodes[i].clone();
        let port = if n.info.node_type == NodeType::Switch {
            0
        } else {
            n.arrival
        };
        let mut pi =
            PortInfo::parse(&sm.get(f, &n.path, AttrId::PORT_INFO, u32::from(port))).unwrap();
        pi.lid = Lid(lid);
        pi.master_sm_lid = Lid(1);
        pi.gid_prefix = 0xfe80_0000_0000_0000;
        pi.port_state = PortState::NoChange;
        pi.port_physical_state = PortPhysicalState::NoChange;
        let got = PortInfo::parse(&sm.set(f, &n.path, &pi, u32::from(port))).unwrap();
        assert_eq!(got.lid, Lid(lid));
    }

    // Min-hop routes between switches.
    let is_switch = |i: usize| sweep.nodes[i].info.node_type == NodeType::Switch;
    let mut neighbours: BTreeMap<usize, Vec<(u8, usize, u8)>> = BTreeMap::new();
    for &((a, pa), (b, pb)) in &sweep.links {
        neighbours.entry(a).or_default().push((pa, b, pb));
        neighbours.entry(b).or_default().push((pb, a, pa));
    }
    let switches: Vec<usize> = (0..sweep.nodes.len()).filter(|&i| is_switch(i)).collect();
    let hops_from = |s: usize| -> BTreeMap<usize, u32> {
        let mut dist = BTreeMap::from([(s, 0u32)]);
        let mut q = VecDeque::from([s]);
        while let Some(x) = q.pop_front() {
            for &(_, y, _) in neighbours.get(&x).into_iter().flatten() {
                if is_switch(y) && !dist.contains_key(&y) {
                    dist.insert(y, dist[&x] + 1);
                    q.push_back(y);
                }
            }
        }
        dist
    };
    // The switch each LID's owner hangs off (itself for a switch).
    let home = |i: usize| -> usize {
        if is_switch(i) {
            i
        } else {
            neighbours[&i][0].1
        }
    };
    let max_lid = *lids.values().max().unwrap();
    for &s in &switches {
        let dist: BTreeMap<usize, BTreeMap<usize, u32>> =
            switches.iter().map(|&t| (t, hops_from(t))).collect();
        let mut used: BTreeMap<u8, u32> = BTreeMap::new();
        let mut lft = vec![LinearForwardingTable::NO_PORT; usize::from(max_lid) + 1];
        let mut by_lid: Vec<(u16, usize)> = lids.iter().map(|(&i, &l)| (l, i)).collect();
        by_lid.sort();
        for (lid, owner) in by_lid {
            let port = if owner == s {
                0
            } else if let Some(&(p, _, _)) = neighbours[&s].iter().find(|&&(_, y, _)| y == owner) {
                p
            } else {
                let target = home(owner);
                let best = neighbours[&s]
                    .iter()
                    .filter(|&&(_, y, _)| is_switch(y))
                    .map(|&(p, y, _)| (dist[&target][&y], p))
                    .min_by_key(|&(d, _)| d)
                    .unwrap()
                    .0;
                neighbours[&s]
                    .iter()
                    .filter(|&&(_, y, _)| is_switch(y) && dist[&target][&y] == best)
                    .map(|&(p, _, _)| p)
                    .min_by_key(|p| (used.get(p).copied().unwrap_or(0), *p))
                    .unwrap()
            };
            *used.entry(port).or_default() += 1;
            lft[usize::from(lid)] = port;
        }
        let path = sweep.nodes[s].path.clone();
        let mut si = SwitchInfo::parse(&sm.get(f, &path, AttrId::SWITCH_INFO, 0)).unwrap();
        si.linear_fdb_top = max_lid;
        si.life_time_value = 18;
        sm.set(f, &path, &si, 0);
        for (block, chunk) in lft.chunks(64).enumerate() {
            let mut b = LinearForwardingTable::default();
            b.ports[..chunk.len()].copy_from_slice(chunk);
            sm.set(f, &path, &b, block as u32);
        }
    }

    // Armed, then Active: CA ports and every switch port with a trained link.
    for state in [PortState::Armed, PortState::Active] {
        for i in 0..sweep.nodes.len() {
            let n = sweep.nodes[i].clone();
            let ports: Vec<u8> = if is_switch(i) {
                neighbours
                    .get(&i)
                    .into_iter()
                    .flatten()
                    .map(|&(p, _, _)| p)
                    .collect()
            } else {
                vec![n.arrival]
            };
            for p in ports {
                let mut pi =
                    PortInfo::parse(&sm.get(f, &n.path, AttrId::PORT_INFO, u32::from(p))).unwrap();
                pi.port_state = state;
                pi.port_physical_state = PortPhysicalState::NoChange;
                let got = PortInfo::parse(&sm.set(f, &n.path, &pi, u32::from(p))).unwrap();
                assert_eq!(got.port_state, state);
            }
        }
    }
    Configured { sweep, lids }
}

/// The topology's node index of a found node.
fn topo_index(f: &TestFabric, c: &Configured, found: usize) -> usize {
    f.topology()
        .node_by_guid(c.sweep.nodes[found].info.node_guid)
        .unwrap()
}

#[test]
fn bfs_discovery_finds_every_node_and_cable_of_topo_b() {
    let mut f = fabric(TOPO_B);
    let node1 = idx(&f, "node1");
    let mut sm = MiniSm {
        node: node1,
        port: 1,
        tid: 0,
    };
    let sweep = sm.discover(&mut f);
    let found: BTreeSet<Guid> = sweep.by_guid.keys().copied().collect();
    let all: BTreeSet<Guid> = f.topology().nodes().iter().map(|n| n.node_guid).collect();
    assert_eq!(found, all);
    // The cables, as the topology lists them.
    let to_topo = |(i, p): (usize, u8)| Endpoint {
        node: f
            .topology()
            .node_by_guid(sweep.nodes[i].info.node_guid)
            .unwrap(),
        port: p,
    };
    let found_links: BTreeSet<(Endpoint, Endpoint)> = sweep
        .links
        .iter()
        .map(|&(a, b)| {
            let (x, y) = (to_topo(a), to_topo(b));
            (x.min(y), x.max(y))
        })
        .collect();
    let topo_links: BTreeSet<(Endpoint, Endpoint)> =
        f.topology().links().map(|l| (l.a, l.b)).collect();
    assert_eq!(found_links, topo_links);
    // Both switches were found with 36 ports, the CAs with their descriptions' GUIDs.
    let sw = sweep
        .nodes
        .iter()
        .filter(|n| n.info.node_type == NodeType::Switch)
        .count();
    assert_eq!(sw, 2);
    assert_eq!(sweep.nodes[0].info.node_guid, Guid(0xe41d2d0300c00000));
}

#[test]
fn smp_configured_topo_b_matches_opensm_and_forwards() {
    let mut f = fabric(TOPO_B);
    let node1 = idx(&f, "node1");
    // Before the SM: every cabled CA port is Init.
    for id in ["node1", "node2", "node3", "node4"] {
        assert_eq!(f.sma(idx(&f, id)).port_state(1), Some(PortState::Init));
    }
    let c = bring_up(&mut f, node1, 1);
    // LIDs as opensm assigned them: node1..4 = 1..4, sw1 = 5, sw2 = 6.
    let lid_of = |f: &TestFabric, id: &str| -> u16 {
        let i = c
            .lids
            .keys()
            .find(|&&n| topo_index(f, &c, n) == idx(f, id))
            .unwrap();
        c.lids[i]
    };
    for (id, lid) in [
        ("node1", 1),
        ("node2", 2),
        ("node3", 3),
        ("node4", 4),
        ("sw1", 5),
        ("sw2", 6),
    ] {
        assert_eq!(lid_of(&f, id), lid, "{id}");
    }
    for (id, port) in [("node1", 1), ("sw1", 0)] {
        let (lid, _) = f.sma(idx(&f, id)).lid(port).unwrap();
        assert_eq!(lid, Lid(lid_of(&f, id)));
    }
    // The LFTs are the ones minhop computed (golden ibroute-5 / ibroute-6).
    let lft = |f: &TestFabric, id: &str| -> Vec<Option<u8>> {
        let s = f.switch(idx(f, id)).unwrap();
        (1..=6).map(|l| s.sma().lft_port(Lid(l))).collect()
    };
    let p = |v: [u8; 6]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
    assert_eq!(lft(&f, "sw1"), p([1, 2, 35, 36, 0, 35]));
    assert_eq!(lft(&f, "sw2"), p([35, 36, 1, 2, 35, 0]));
    assert_eq!(
        f.switch(idx(&f, "sw1")).unwrap().sma().lft_port(Lid(7)),
        None
    );
    // Every port Active now.
    for id in ["node1", "node2", "node3", "node4"] {
        assert_eq!(f.sma(idx(&f, id)).port_state(1), Some(PortState::Active));
    }
    for p in [1, 2, 35, 36] {
        assert_eq!(f.sma(idx(&f, "sw2")).port_state(p), Some(PortState::Active));
    }

    // LID-routed data between every pair of hosts arrives at the right one.
    let hosts = ["node1", "node2", "node3", "node4"];
    for src in hosts {
        for dst in hosts {
            if src == dst {
                continue;
            }
            let (s, d) = (idx(&f, src), idx(&f, dst));
            let before = f.ca(d).unwrap().inbox().len();
            let pkt = data_packet(
                Lid(lid_of(&f, src)),
                Lid(lid_of(&f, dst)),
                0x20,
                src.as_bytes(),
            );
            let (at, outcome) = f.send_packet(s, 1, pkt.clone());
            assert_eq!(
                (at, outcome),
                (d, Outcome::Delivered { port: 1 }),
                "{src} -> {dst}"
            );
            let inbox = f.ca(d).unwrap().inbox();
            assert_eq!(inbox.len(), before + 1);
            assert_eq!(inbox.last().unwrap().packet, pkt, "delivered unchanged");
        }
    }
    // node1 -> node3 crosses sw1 port 35, node2 -> node4 port 36 (golden ibtracert).
    let pkt = data_packet(Lid(1), Lid(3), 0x20, b"x");
    f.send_packet(node1, 1, pkt);
    let path: Vec<(usize, u8)> = f.trace().iter().map(|h| (h.node, h.in_port)).collect();
    assert_eq!(
        path,
        [
            (idx(&f, "sw1"), 1),
            (idx(&f, "sw2"), 35),
            (idx(&f, "node3"), 1)
        ]
    );
    let pkt = data_packet(Lid(2), Lid(4), 0x20, b"x");
    f.send_packet(idx(&f, "node2"), 1, pkt);
    assert_eq!(
        f.trace()[1],
        Hop {
            node: idx(&f, "sw2"),
            in_port: 36,
            dr: None
        }
    );
    // To a switch's LID: its port 0.
    let (at, outcome) = f.send_packet(node1, 1, data_packet(Lid(1), Lid(6), 0x20, b"x"));
    assert_eq!((at, outcome), (idx(&f, "sw2"), Outcome::Local));
    // To a LID nobody has: dropped by the first switch, counted.
    let (at, outcome) = f.send_packet(node1, 1, data_packet(Lid(1), Lid(9), 0x20, b"x"));
    assert_eq!(
        (at, outcome),
        (idx(&f, "sw1"), Outcome::Dropped("no_route"))
    );
    let sw1 = f.switch(idx(&f, "sw1")).unwrap();
    assert_eq!(sw1.counters(1).unwrap().rcv_switch_relay_errors, 1);
    assert!(sw1.counters(35).unwrap().xmit_pkts > 0);

    // Now that LIDs exist, LID-routed SMPs work too (smpquery nodeinfo 4, 6).
    let req = smp::Repr::lid_get(0x77, AttrId::NODE_INFO, 0, 0);
    let resp = f
        .send_lid_routed(node1, 1, Lid(4), &req)
        .expect("a response");
    let ni = NodeInfo::parse(&resp.data).unwrap();
    assert_eq!(ni.node_guid, Guid(0xe41d2d0300c00030));
    let resp = f
        .send_lid_routed(node1, 1, Lid(6), &req)
        .expect("a response");
    let ni = NodeInfo::parse(&resp.data).unwrap();
    assert_eq!(
        (ni.node_guid, ni.local_port_num),
        (Guid(0x7cfe900300a0b1c0), 35)
    );
}

#[test]
fn port_set_down_retrains_to_init() {
    let mut f = fabric(TOPO_B);
    let node1 = idx(&f, "node1");
    bring_up(&mut f, node1, 1);
    let node3 = idx(&f, "node3");
    // The SM sets node3's port Down (ibportstate reset): the link retrains to Init on both ends.
    let mut sm = MiniSm {
        node: node1,
        port: 1,
        tid: 100,
    };
    let mut pi = PortInfo::parse(&sm.get(&mut f, &[1, 35, 1], AttrId::PORT_INFO, 1)).unwrap();
    pi.port_state = PortState::Down;
    pi.port_physical_state = PortPhysicalState::NoChange;
    sm.set(&mut f, &[1, 35, 1], &pi, 1);
    assert_eq!(f.sma(node3).port_state(1), Some(PortState::Init));
    assert_eq!(f.sma(idx(&f, "sw2")).port_state(1), Some(PortState::Init));
    assert!(
        f.switch(idx(&f, "sw2"))
            .unwrap()
            .sma()
            .switch_info()
            .unwrap()
            .port_state_change
    );
    // Data to node3 now stops at sw2.
    let (at, outcome) = f.send_packet(node1, 1, data_packet(Lid(1), Lid(3), 0x20, b"x"));
    assert_eq!(
        (at, outcome),
        (idx(&f, "sw2"), Outcome::Dropped("egress_not_active"))
    );
}

#[test]
fn topo_a_is_two_subnets() {
    for port in [1u8, 2] {
        let mut f = fabric(TOPO_A);
        let test213 = idx(&f, "test213");
        let c = bring_up(&mut f, test213, port);
        assert_eq!(c.sweep.nodes.len(), 2);
        assert_eq!(c.sweep.links.len(), 1);
        // The SM's port is LID 1, the peer's port on the same cable LID 2.
        assert_eq!(f.sma(test213).lid(port), Some((Lid(1), 0)));
        assert_eq!(f.sma(idx(&f, "test214")).lid(port), Some((Lid(2), 0)));
        let other = 3 - port;
        assert_eq!(f.sma(test213).lid(other), Some((Lid(0), 0)));
        assert_eq!(f.sma(test213).port_state(other), Some(PortState::Init));
        let (at, outcome) = f.send_packet(test213, port, data_packet(Lid(1), Lid(2), 0x20, b"x"));
        assert_eq!(
            (at, outcome),
            (idx(&f, "test214"), Outcome::Delivered { port })
        );
    }
}

#[test]
fn fat_tree_of_40_hosts_comes_up_and_routes_all_pairs() {
    let t = Topology::fat_tree(40).unwrap();
    let mut f = TestFabric::new(t);
    let host1 = idx(&f, "host1");
    let c = bring_up(&mut f, host1, 1);
    assert_eq!(c.sweep.nodes.len(), f.topology().nodes().len());
    assert_eq!(c.sweep.links.len(), f.topology().link_count());
    let hosts: Vec<(usize, u16)> = c
        .lids
        .iter()
        .filter(|(&i, _)| c.sweep.nodes[i].info.node_type == NodeType::Ca)
        .map(|(&i, &l)| (topo_index(&f, &c, i), l))
        .collect();
    assert_eq!(hosts.len(), 40);
    for &(s, sl) in &hosts {
        for &(d, dl) in &hosts {
            if s != d {
                let (at, outcome) = f.send_packet(s, 1, data_packet(Lid(sl), Lid(dl), 0x20, b"ft"));
                assert_eq!((at, outcome), (d, Outcome::Delivered { port: 1 }));
                assert!(f.trace().len() <= 4, "leaf, spine, leaf, host at most");
            }
        }
    }
}
