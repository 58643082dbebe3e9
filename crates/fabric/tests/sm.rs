//! The subnet manager and SA on the in-memory fabric: convergence to what real opensm gave on
//! ibsim (LIDs, LFTs, port states; golden `B-stock`, `A-patched`), lost SMPs, cables pulled
//! and restored, elections between two SMs, LIDs kept across restarts, and SA queries.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use softib_fabric::sm::{LogLevel, Routing, SmConfig, SubnetManager};
use softib_fabric::sma::SmaEvent;
use softib_fabric::testing::{data_packet, Outcome, TestFabric};
use softib_fabric::topology::{Endpoint, LinkRate, LinkSpeed, LinkWidth, Node, Topology};
use softib_wire::mad::attr::{capability_mask, PortState, SmState};
use softib_wire::mad::sa::{
    self, ipoib_broadcast_mgid, join_state, mcmember_comp, node_comp, path_comp, port_info_comp,
    McMemberRecord, NodeRecord, PathRecord, PortInfoRecord,
};
use softib_wire::mad::{smp, status, AttrId, Method, MAD_LEN};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey, QKey};

const TOPO_A: &str = include_str!("data/topoA.net");
const TOPO_B: &str = include_str!("data/topoB.net");

fn fabric(text: &str) -> TestFabric {
    TestFabric::new(Topology::parse(text).unwrap())
}

fn idx(f: &TestFabric, id: &str) -> usize {
    f.topology().node_index(id).unwrap()
}

/// An SM on a CA port of the fabric.
struct Host {
    node: usize,
    port: u8,
    sm: SubnetManager,
    /// The SM process is gone (its SMA no longer answers SMInfo).
    dead: bool,
    /// How many of the fabric's SMA events this host has looked at.
    events_seen: usize,
}

fn host(f: &mut TestFabric, id: &str, port: u8, mut config: SmConfig) -> Host {
    let node = idx(f, id);
    let guid = f.topology().nodes()[node].port_guid(port).unwrap();
    config.port_guid = guid;
    // What the runtime does when opensm binds: IsSM on its port.
    let mask = f.sma(node).port_info(port).unwrap().capability_mask;
    f.sma_mut(node)
        .set_capability_mask(port, mask | capability_mask::IS_SM);
    let sm = SubnetManager::new(config, port);
    f.sma_mut(node).set_sm_info(Some(sm.sm_info()));
    Host {
        node,
        port,
        sm,
        dead: false,
        events_seen: f.events().len(),
    }
}

fn quiet() -> SmConfig {
    SmConfig {
        sweep_interval: None,
        ..SmConfig::default()
    }
}

/// Drives SMs over the fabric until `until` (simulated time) or nothing is left to do.
/// `lose(n)` says whether the n-th SMP sent is lost: 0 = delivered, 1 = the request is lost,
/// 2 = the response is lost.
fn run(
    f: &mut TestFabric,
    hosts: &mut [Host],
    now: &mut Duration,
    until: Duration,
    lose: &mut dyn FnMut(u64) -> u8,
) {
    let mut sent = 0u64;
    for _ in 0..1_000_000 {
        // Transmit everything that is ready.
        loop {
            let mut any = false;
            for h in hosts.iter_mut().filter(|h| !h.dead) {
                f.sma_mut(h.node).set_sm_info(Some(h.sm.sm_info()));
                while let Some(out) = h.sm.poll_transmit() {
                    any = true;
                    sent += 1;
                    let fate = lose(sent);
                    if fate == 1 {
                        continue;
                    }
                    let resp = f.send_dr(h.node, h.port, &out);
                    if let (Some(r), 0) = (resp, fate) {
                        h.sm.handle_response(*now, &r);
                    }
                    f.sma_mut(h.node).set_sm_info(Some(h.sm.sm_info()));
                }
            }
            // What the runtime does with a SubnSet(SMInfo) the SMA of an SM's node answered:
            // the SM acts on it.
            for h in hosts.iter_mut().filter(|h| !h.dead) {
                while let Some(&(node, e)) = f.events().get(h.events_seen) {
                    h.events_seen += 1;
                    if let (true, SmaEvent::SmInfoSet { control, from, .. }) = (node == h.node, e) {
                        any = true;
                        h.sm.handle_sm_info_set(*now, control, from);
                        f.sma_mut(h.node).set_sm_info(Some(h.sm.sm_info()));
                    }
                }
            }
            if !any {
                break;
            }
        }
        let next = hosts
            .iter()
            .filter(|h| !h.dead)
            .filter_map(|h| h.sm.poll_timeout())
            .min();
        match next {
            Some(t) if t <= until => {
                *now = (*now).max(t);
                for h in hosts.iter_mut().filter(|h| !h.dead) {
                    h.sm.handle_timeout(*now);
                }
            }
            _ => {
                *now = (*now).max(until);
                return;
            }
        }
    }
    panic!("the SMs never settled");
}

fn no_loss() -> impl FnMut(u64) -> u8 {
    |_| 0
}

fn converge(f: &mut TestFabric, hosts: &mut [Host]) {
    let mut now = Duration::ZERO;
    run(
        f,
        hosts,
        &mut now,
        Duration::from_secs(3600),
        &mut no_loss(),
    );
}

fn lid(f: &TestFabric, id: &str, port: u8) -> u16 {
    f.sma(idx(f, id)).lid(port).unwrap().0 .0
}

fn lft(f: &TestFabric, id: &str, lids: std::ops::RangeInclusive<u16>) -> Vec<Option<u8>> {
    let s = f.switch(idx(f, id)).unwrap();
    lids.map(|l| s.sma().lft_port(Lid(l))).collect()
}

fn ports(v: &[u8]) -> Vec<Option<u8>> {
    v.iter().map(|&p| Some(p)).collect()
}

/// Every cabled port of the fabric is Active.
fn all_cabled_active(f: &TestFabric) -> bool {
    f.topology().links().all(|l| {
        [l.a, l.b]
            .iter()
            .all(|e| f.sma(e.node).port_state(e.port) == Some(PortState::Active))
    })
}

/// Data between every pair of CA ports with LIDs arrives.
fn all_pairs_deliver(f: &mut TestFabric) {
    let cas: Vec<(usize, u8, Lid)> = f
        .topology()
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.is_switch())
        .flat_map(|(i, n)| (1..=n.num_ports).map(move |p| (i, p)))
        .filter_map(|(i, p)| {
            let (l, _) = f.sma(i).lid(p)?;
            (l != Lid(0)).then_some((i, p, l))
        })
        .collect();
    for &(s, sp, sl) in &cas {
        for &(d, dp, dl) in &cas {
            if (s, sp) == (d, dp) {
                continue;
            }
            let (at, outcome) = f.send_packet(s, sp, data_packet(sl, dl, 0x20, b"sm"));
            assert_eq!(
                (at, outcome),
                (d, Outcome::Delivered { port: dp }),
                "{sl:?} -> {dl:?}"
            );
        }
    }
}

fn logs(sm: &mut SubnetManager) -> Vec<(LogLevel, String)> {
    std::iter::from_fn(|| sm.poll_log())
        .map(|l| (l.level, l.text))
        .collect()
}

fn console(sm: &mut SubnetManager) -> Vec<String> {
    std::iter::from_fn(|| sm.poll_console()).collect()
}

// ---- Convergence ---------------------------------------------------------------------------

#[test]
fn topo_b_converges_to_what_opensm_gave() {
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    converge(&mut f, &mut hosts);
    let sm = &mut hosts[0].sm;
    assert_eq!(sm.state(), SmState::Master);
    assert!(sm.is_subnet_up());
    // Golden B-stock LIDS.txt / guid2lid.
    for (id, port, l) in [
        ("node1", 1, 1),
        ("node2", 1, 2),
        ("node3", 1, 3),
        ("node4", 1, 4),
        ("sw1", 0, 5),
        ("sw2", 0, 6),
    ] {
        assert_eq!(lid(&f, id, port), l, "{id}");
    }
    let g2l: BTreeMap<u64, u16> = sm.guid2lid().iter().map(|(g, l)| (g.0, l.0)).collect();
    assert_eq!(
        g2l,
        BTreeMap::from([
            (0xe41d2d0300c00001, 1),
            (0xe41d2d0300c00011, 2),
            (0xe41d2d0300c00021, 3),
            (0xe41d2d0300c00031, 4),
            (0x7cfe900300a0b0c0, 5),
            (0x7cfe900300a0b1c0, 6),
        ])
    );
    // Golden ibroute-5 / ibroute-6 (minhop).
    assert_eq!(
        lft(&f, "sw1", 1..=7),
        [ports(&[1, 2, 35, 36, 0, 35]), vec![None]].concat()
    );
    assert_eq!(lft(&f, "sw2", 1..=6), ports(&[35, 36, 1, 2, 35, 0]));
    let si = f
        .switch(idx(&f, "sw1"))
        .unwrap()
        .sma()
        .switch_info()
        .unwrap();
    assert_eq!(si.linear_fdb_top, 6);
    assert!(!si.port_state_change, "cleared by the SM");
    assert!(all_cabled_active(&f));
    // PortInfo of a CA as opensm leaves it: SM LID 1, the subnet prefix.
    let pi = f.sma(idx(&f, "node3")).port_info(1).unwrap();
    assert_eq!(pi.master_sm_lid, Lid(1));
    assert_eq!(pi.gid_prefix, 0xfe80_0000_0000_0000);
    all_pairs_deliver(&mut f);
    // stdout and the log, as opensm.
    let sm = &mut hosts[0].sm;
    assert_eq!(
        console(sm),
        ["Entering DISCOVERING state", "Entering MASTER state"]
    );
    let log = logs(sm);
    let texts: Vec<&str> = log.iter().map(|(_, t)| t.as_str()).collect();
    let order = [
        "Entering DISCOVERING state",
        "INITIATING HEAVY SWEEP",
        "HEAVY SWEEP COMPLETE",
        "Entering MASTER state",
        "SM LID ASSIGNMENT COMPLETE - STARTING SUBNET LID CONFIG",
        "LID ASSIGNMENT COMPLETE - STARTING SWITCH TABLE CONFIG",
        "osm_ucast_mgr_process: minhop tables configured on all switches",
        "SWITCHES CONFIGURED FOR UNICAST",
        "LINKS PORTS CONFIGURED - SET LINKS TO ARMED STATE",
        "LINKS ARMED - SET LINKS TO ACTIVE STATE",
        "SUBNET UP",
    ];
    let mut at = 0;
    for want in order {
        at += texts[at..]
            .iter()
            .position(|t| *t == want)
            .unwrap_or_else(|| panic!("{want:?} missing or out of order in {texts:#?}"));
    }
    assert!(log.contains(&(LogLevel::INFO, "SUBNET UP".to_string())));
    assert!(log.iter().all(|(l, _)| *l != LogLevel::ERROR), "{log:#?}");
    assert!(texts.contains(&"link_mgr_process_node: Node 0x7cfe900300a0b1c0 going to ACTIVE"));
}

#[test]
fn topo_a_is_two_subnets_with_one_sm_each() {
    let mut f = fabric(TOPO_A);
    let mut hosts = [
        host(&mut f, "test213", 1, quiet()),
        host(&mut f, "test213", 2, quiet()),
    ];
    converge(&mut f, &mut hosts);
    for h in &hosts {
        assert_eq!(h.sm.state(), SmState::Master);
        assert_eq!(h.sm.subnet().nodes.len(), 2);
        assert_eq!(h.sm.subnet().links.len(), 1);
    }
    // Golden A-stock / A-patched: both subnets use LIDs 1 and 2.
    for port in [1, 2] {
        assert_eq!(lid(&f, "test213", port), 1);
        assert_eq!(lid(&f, "test214", port), 2);
        for id in ["test213", "test214"] {
            assert_eq!(f.sma(idx(&f, id)).port_state(port), Some(PortState::Active));
        }
    }
    let (at, outcome) = f.send_packet(
        idx(&f, "test213"),
        2,
        data_packet(Lid(1), Lid(2), 0x20, b"x"),
    );
    assert_eq!(
        (at, outcome),
        (idx(&f, "test214"), Outcome::Delivered { port: 2 })
    );
}

#[test]
fn fat_tree_of_100_hosts_comes_up_and_routes_all_pairs() {
    let mut f = TestFabric::new(Topology::fat_tree(100).unwrap());
    let mut hosts = [host(&mut f, "host1", 1, quiet())];
    converge(&mut f, &mut hosts);
    assert_eq!(hosts[0].sm.subnet().nodes.len(), f.topology().nodes().len());
    assert!(all_cabled_active(&f));
    assert_eq!(lid(&f, "host1", 1), 1);
    all_pairs_deliver(&mut f);
    // Min-hop spreads the hosts of another leaf over the spines.
    let leaf1 = f.switch(idx(&f, "leaf1")).unwrap();
    let up: BTreeSet<u8> = (1..=hosts[0].sm.guid2lid().len() as u16)
        .filter_map(|l| leaf1.sma().lft_port(Lid(l)))
        .filter(|&p| p > 18)
        .collect();
    assert!(up.len() > 3, "{up:?}");
}

/// The channel dependency graph of the programmed LFTs (links as (node, port) → (node, port),
/// a dependency where a packet for some LID comes in on one link and leaves on the next) has
/// no cycle: the routing cannot deadlock.
fn routes_are_deadlock_free(f: &TestFabric) -> bool {
    let t = f.topology();
    let lids: Vec<Lid> = (0..t.nodes().len())
        .flat_map(|i| {
            let n = &t.nodes()[i];
            let ps: Vec<u8> = if n.is_switch() {
                vec![0]
            } else {
                (1..=n.num_ports).collect()
            };
            ps.into_iter()
                .filter_map(move |p| f.sma(i).lid(p).map(|(l, _)| l))
        })
        .filter(|l| *l != Lid(0))
        .collect();
    // Edges of the CDG between directed switch-to-switch links.
    let mut deps: BTreeMap<(Endpoint, Endpoint), BTreeSet<(Endpoint, Endpoint)>> = BTreeMap::new();
    for &l in &lids {
        for link in t.links() {
            for (from, to) in [(link.a, link.b), (link.b, link.a)] {
                let Some(sw) = f.switch(to.node) else {
                    continue;
                };
                // Only links that packets for l cross: out of a switch by its LFT.
                let Some(prev) = f.switch(from.node) else {
                    continue;
                };
                if prev.sma().lft_port(l) != Some(from.port) {
                    continue;
                }
                let Some(out) = sw.sma().lft_port(l) else {
                    continue;
                };
                if out == 0 || out == to.port {
                    continue;
                }
                let here = Endpoint {
                    node: to.node,
                    port: out,
                };
                let Some(next) = t.peer(here) else { continue };
                if f.switch(next.node).is_some() {
                    deps.entry((from, to)).or_default().insert((here, next));
                }
            }
        }
    }
    // Depth-first search for a cycle.
    let mut state: BTreeMap<(Endpoint, Endpoint), u8> = BTreeMap::new();
    fn visit(
        v: (Endpoint, Endpoint),
        deps: &BTreeMap<(Endpoint, Endpoint), BTreeSet<(Endpoint, Endpoint)>>,
        state: &mut BTreeMap<(Endpoint, Endpoint), u8>,
    ) -> bool {
        match state.get(&v) {
            Some(1) => return false,
            Some(_) => return true,
            None => {}
        }
        state.insert(v, 1);
        for &w in deps.get(&v).into_iter().flatten() {
            if !visit(w, deps, state) {
                return false;
            }
        }
        state.insert(v, 2);
        true
    }
    let keys: Vec<_> = deps.keys().copied().collect();
    keys.into_iter().all(|v| visit(v, &deps, &mut state))
}

/// A ring of `n` switches, each with two hosts.
fn ring(n: usize) -> Topology {
    let mut t = Topology::new();
    let rate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Qdr,
    };
    let sws: Vec<usize> = (0..n)
        .map(|i| {
            t.add_node(Node::switch(&format!("sw{i}"), 8, Guid(0x1000 + i as u64)))
                .unwrap()
        })
        .collect();
    for i in 0..n {
        let j = (i + 1) % n;
        t.connect(
            Endpoint {
                node: sws[i],
                port: 1,
            },
            Endpoint {
                node: sws[j],
                port: 2,
            },
            rate,
        )
        .unwrap();
        for h in 0..2u8 {
            let id = format!("h{i}_{h}");
            let ca = t
                .add_node(Node::ca(
                    &id,
                    1,
                    Guid(0x20_0000 + 0x10 * (2 * i as u64 + u64::from(h))),
                ))
                .unwrap();
            t.connect(
                Endpoint { node: ca, port: 1 },
                Endpoint {
                    node: sws[i],
                    port: 3 + h,
                },
                rate,
            )
            .unwrap();
        }
    }
    t
}

#[test]
fn updn_is_deadlock_free_where_minhop_is_not() {
    let mut f = TestFabric::new(ring(5));
    let mut hosts = [host(&mut f, "h0_0", 1, quiet())];
    converge(&mut f, &mut hosts);
    all_pairs_deliver(&mut f);
    assert!(
        !routes_are_deadlock_free(&f),
        "min-hop on a ring has a cycle"
    );

    let mut f = TestFabric::new(ring(5));
    let config = SmConfig {
        routing: Routing::UpDown,
        ..quiet()
    };
    let mut hosts = [host(&mut f, "h0_0", 1, config)];
    converge(&mut f, &mut hosts);
    assert!(all_cabled_active(&f));
    all_pairs_deliver(&mut f);
    assert!(routes_are_deadlock_free(&f));
    let log = logs(&mut hosts[0].sm);
    assert!(log
        .iter()
        .any(|(_, t)| t == "osm_ucast_mgr_process: updn tables configured on all switches"));
}

#[test]
fn updn_on_a_fat_tree_uses_every_spine() {
    let mut f = TestFabric::new(Topology::fat_tree(40).unwrap());
    let config = SmConfig {
        routing: Routing::UpDown,
        ..quiet()
    };
    let mut hosts = [host(&mut f, "host1", 1, config)];
    converge(&mut f, &mut hosts);
    all_pairs_deliver(&mut f);
    assert!(routes_are_deadlock_free(&f));
    let leaf1 = f.switch(idx(&f, "leaf1")).unwrap();
    let up: BTreeSet<u8> = (1..=60)
        .filter_map(|l| leaf1.sma().lft_port(Lid(l)))
        .filter(|&p| p > 18)
        .collect();
    assert!(up.len() > 1, "{up:?}");
}

// ---- Faults ---------------------------------------------------------------------------------

#[test]
fn lost_smps_are_retried_and_the_subnet_still_converges() {
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    let mut now = Duration::ZERO;
    // Lose about one request in 7 and one response in 9, deterministically.
    let mut lose = |n: u64| match (n * 2_654_435_761) % 63 {
        0..=8 => 1,
        9..=15 => 2,
        _ => 0,
    };
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(3600),
        &mut lose,
    );
    assert!(
        hosts[0].sm.is_subnet_up(),
        "{:?} {:#?}",
        hosts[0].sm.poll_timeout(),
        logs(&mut hosts[0].sm)
    );
    assert!(now > Duration::ZERO, "retries took time");
    assert_eq!(lft(&f, "sw1", 1..=6), ports(&[1, 2, 35, 36, 0, 35]));
    assert_eq!(lft(&f, "sw2", 1..=6), ports(&[35, 36, 1, 2, 35, 0]));
    assert!(all_cabled_active(&f));
    let mut f = TestFabric::new(Topology::fat_tree(40).unwrap());
    let mut hosts = [host(&mut f, "host1", 1, quiet())];
    let mut now = Duration::ZERO;
    let mut lose = |n: u64| u8::from(n % 13 == 5) + u8::from(n % 17 == 3) * 2;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(3600),
        &mut lose,
    );
    assert!(all_cabled_active(&f));
    all_pairs_deliver(&mut f);
}

#[test]
fn a_route_that_never_answers_is_given_up_and_logged() {
    // Every SMP to node4 (route 1, 35, 2) is lost.
    let node4 = [1u8, 35, 2];
    let mut f = fabric(TOPO_B);
    let mut sm = SubnetManager::new(
        SmConfig {
            port_guid: Guid(0xe41d2d0300c00001),
            ..quiet()
        },
        1,
    );
    let node1 = idx(&f, "node1");
    let mut now = Duration::ZERO;
    for _ in 0..10_000 {
        while let Some(out) = sm.poll_transmit() {
            let to_node4 = out.dr.unwrap().path().starts_with(&node4);
            if to_node4 {
                continue;
            }
            if let Some(r) = f.send_dr(node1, 1, &out) {
                sm.handle_response(now, &r);
            }
        }
        match sm.poll_timeout() {
            Some(t) => {
                now = now.max(t);
                sm.handle_timeout(now);
            }
            None => break,
        }
    }
    assert!(sm.is_subnet_up());
    assert_eq!(sm.subnet().nodes.len(), 5, "node4 was given up");
    // 200 ms, 3 retries: given up after 4 sends.
    assert!(now >= Duration::from_millis(800));
    let log = logs(&mut sm);
    assert!(
        log.iter().any(|(l, t)| *l == LogLevel::ERROR
            && t.contains("no answer to NodeInfo")
            && t.contains("[1, 35, 2]")),
        "{log:#?}"
    );
    assert_eq!(
        f.sma(idx(&f, "node3")).port_state(1),
        Some(PortState::Active)
    );
}

#[test]
fn a_pulled_cable_is_noticed_by_a_light_sweep_and_routed_around() {
    let mut f = fabric(TOPO_B);
    let config = SmConfig {
        sweep_interval: Some(Duration::from_secs(10)),
        ..SmConfig::default()
    };
    let mut hosts = [host(&mut f, "node1", 1, config)];
    let mut now = Duration::ZERO;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(5),
        &mut no_loss(),
    );
    assert!(hosts[0].sm.is_subnet_up());
    assert_eq!(lft(&f, "sw1", 3..=3), ports(&[35]));
    let _ = logs(&mut hosts[0].sm);
    // Light sweeps with nothing changed do nothing.
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(25),
        &mut no_loss(),
    );
    assert!(!logs(&mut hosts[0].sm)
        .iter()
        .any(|(_, t)| t == "INITIATING HEAVY SWEEP"));

    // Pull the ISL on port 35.
    let (sw1, sw2) = (idx(&f, "sw1"), idx(&f, "sw2"));
    f.sma_mut(sw1).link_down(35);
    f.sma_mut(sw2).link_down(35);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(36),
        &mut no_loss(),
    );
    let log = logs(&mut hosts[0].sm);
    assert!(
        log.iter().any(|(_, t)| t.contains("PortStateChange")),
        "{log:#?}"
    );
    assert!(log.iter().any(|(_, t)| t == "SUBNET UP"));
    assert_eq!(lft(&f, "sw1", 1..=6), ports(&[1, 2, 36, 36, 0, 36]));
    assert_eq!(lft(&f, "sw2", 1..=6), ports(&[36, 36, 1, 2, 36, 0]));
    all_pairs_deliver(&mut f);

    // Pull node3: its LID is no longer routed.
    let node3 = idx(&f, "node3");
    f.sma_mut(node3).link_down(1);
    f.sma_mut(sw2).link_down(1);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(46),
        &mut no_loss(),
    );
    assert_eq!(hosts[0].sm.subnet().nodes.len(), 5);
    assert_eq!(lft(&f, "sw1", 3..=3), vec![None]);

    // Plug both back: node3 gets LID 3 again, Active; the ISLs are balanced again.
    let rate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Qdr,
    };
    f.sma_mut(node3).link_up(1, rate);
    f.sma_mut(sw2).link_up(1, rate);
    f.sma_mut(sw1).link_up(35, rate);
    f.sma_mut(sw2).link_up(35, rate);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(56),
        &mut no_loss(),
    );
    assert_eq!(lid(&f, "node3", 1), 3);
    assert!(all_cabled_active(&f));
    assert_eq!(lft(&f, "sw1", 1..=6), ports(&[1, 2, 35, 36, 0, 35]));
    all_pairs_deliver(&mut f);
}

// ---- Election -------------------------------------------------------------------------------

#[test]
fn two_sms_lower_guid_wins_at_equal_priority() {
    let mut f = fabric(TOPO_B);
    let mut hosts = [
        host(&mut f, "node4", 1, quiet()),
        host(&mut f, "node1", 1, quiet()),
    ];
    let mut now = Duration::ZERO;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(30),
        &mut no_loss(),
    );
    assert_eq!(
        hosts[1].sm.state(),
        SmState::Master,
        "node1 has the lower GUID"
    );
    assert_eq!(hosts[0].sm.state(), SmState::Standby);
    assert_eq!(
        console(&mut hosts[0].sm).last().unwrap(),
        "Entering STANDBY state"
    );
    // The master's LIDs: its own port first.
    assert_eq!(lid(&f, "node1", 1), 1);
    assert!(all_cabled_active(&f));
    assert_eq!(
        f.sma(idx(&f, "node4")).port_info(1).unwrap().master_sm_lid,
        Lid(1)
    );

    // The master goes away: the standby notices at its next poll and takes over.
    hosts[1].dead = true;
    f.sma_mut(hosts[1].node).set_sm_info(None);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(60),
        &mut no_loss(),
    );
    assert_eq!(hosts[0].sm.state(), SmState::Master);
    assert_eq!(
        console(&mut hosts[0].sm),
        ["Entering DISCOVERING state", "Entering MASTER state"]
    );
    // LIDs stay (the ports keep theirs), the SM LID moves to node4's.
    assert_eq!(lid(&f, "node1", 1), 1);
    assert_eq!(lid(&f, "node4", 1), 4);
    assert_eq!(
        f.sma(idx(&f, "node2")).port_info(1).unwrap().master_sm_lid,
        Lid(4)
    );
}

#[test]
fn two_sms_higher_priority_wins() {
    let mut f = fabric(TOPO_B);
    let high = SmConfig {
        priority: 5,
        ..quiet()
    };
    let mut hosts = [
        host(&mut f, "node1", 1, quiet()),
        host(&mut f, "node4", 1, high),
    ];
    let mut now = Duration::ZERO;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(30),
        &mut no_loss(),
    );
    assert_eq!(hosts[1].sm.state(), SmState::Master);
    assert_eq!(hosts[0].sm.state(), SmState::Standby);
    assert_eq!(hosts[1].sm.sm_info().priority, 5);
    node4s_sm_runs_the_subnet(&mut f);
}

/// Every cabled port Active, node2's port naming node4's as its SM's, data between every pair.
fn node4s_sm_runs_the_subnet(f: &mut TestFabric) {
    assert!(all_cabled_active(f));
    assert_eq!(
        f.sma(idx(f, "node2")).port_info(1).unwrap().master_sm_lid,
        Lid(lid(f, "node4", 1))
    );
    all_pairs_deliver(f);
}

#[test]
fn a_higher_sm_that_finds_a_lower_master_stands_by_until_it_is_handed_over() {
    let mut f = fabric(TOPO_B);
    let light = SmConfig {
        sweep_interval: Some(Duration::from_secs(10)),
        ..SmConfig::default()
    };
    let mut hosts = vec![host(&mut f, "node1", 1, light.clone())];
    let mut now = Duration::ZERO;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(5),
        &mut no_loss(),
    );
    assert!(hosts[0].sm.is_subnet_up());
    let _ = console(&mut hosts[0].sm);
    // A higher SM starts on node4 of the running subnet. It finds node1 master and stands
    // by instead of configuring the subnet beside it (C14-60.2.1); node1's next light sweep
    // sees node4's IsSM, its election finds the higher SM in Standby and hands over, and
    // node4 takes the subnet at once on the HANDOVER, not when a poll of its own finds node1
    // no longer master.
    let high = SmConfig {
        priority: 5,
        ..light
    };
    hosts.push(host(&mut f, "node4", 1, high));
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(40),
        &mut no_loss(),
    );
    assert_eq!(
        console(&mut hosts[1].sm),
        [
            "Entering DISCOVERING state",
            "Entering STANDBY state",
            "Entering MASTER state"
        ]
    );
    let log = logs(&mut hosts[1].sm);
    assert!(
        log.iter()
            .any(|(_, t)| t == "Received SubnSet(SMInfo) Handover from SM 0xe41d2d0300c00001"),
        "{log:#?}"
    );
    assert_eq!(console(&mut hosts[0].sm), ["Entering STANDBY state"]);
    assert!(hosts[1].sm.is_subnet_up());
    node4s_sm_runs_the_subnet(&mut f);
}

#[test]
fn sm_info_sets_the_sender_may_not_send_are_ignored() {
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    converge(&mut f, &mut hosts);
    assert_eq!(hosts[0].sm.state(), SmState::Master);
    let _ = logs(&mut hosts[0].sm);
    // HANDOVER from an SM that is not master is not legal (opensm: ERR 2F04).
    let standby = softib_wire::mad::attr::SmInfo {
        guid: Guid(0x99),
        sm_key: 1,
        act_count: 0,
        priority: 9,
        sm_state: SmState::Standby,
    };
    hosts[0].sm.handle_sm_info_set(
        Duration::from_secs(3600),
        softib_fabric::sma::SmControl::Handover,
        standby,
    );
    assert_eq!(hosts[0].sm.state(), SmState::Master);
    assert!(logs(&mut hosts[0].sm)
        .iter()
        .any(|(l, t)| *l == LogLevel::ERROR && t.starts_with("ERR 2F04")));
}

// ---- LIDs across restarts ------------------------------------------------------------------

#[test]
fn guid2lid_keeps_lids_across_restarts() {
    // A guid2lid from an earlier run with other LIDs than a fresh start would give.
    let node3 = Guid(0xe41d2d0300c00021);
    let sw1 = Guid(0x7cfe900300a0b0c0);
    let config = SmConfig {
        guid2lid: BTreeMap::from([(node3, Lid(10)), (sw1, Lid(20))]),
        ..quiet()
    };
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, config)];
    converge(&mut f, &mut hosts);
    let lids = |f: &TestFabric| {
        [
            ("node1", 1),
            ("node2", 1),
            ("node3", 1),
            ("node4", 1),
            ("sw1", 0),
            ("sw2", 0),
        ]
        .map(|(id, p)| lid(f, id, p))
    };
    assert_eq!(lids(&f), [1, 2, 10, 3, 20, 4]);
    all_pairs_deliver(&mut f);
    let saved = hosts[0].sm.guid2lid().clone();

    // Restart on a fabric that lost its LIDs (power cycle): the saved guid2lid gives them back.
    let mut f2 = fabric(TOPO_B);
    let mut hosts = [host(
        &mut f2,
        "node1",
        1,
        SmConfig {
            guid2lid: saved,
            ..quiet()
        },
    )];
    converge(&mut f2, &mut hosts);
    assert_eq!(lids(&f2), [1, 2, 10, 3, 20, 4]);

    // Restart without guid2lid on the configured fabric: the ports keep the LIDs they have.
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    converge(&mut f, &mut hosts);
    assert_eq!(lids(&f), [1, 2, 10, 3, 20, 4]);
    assert_eq!(hosts[0].sm.guid2lid().get(&node3), Some(&Lid(10)));
    all_pairs_deliver(&mut f);
}

// ---- SA -------------------------------------------------------------------------------------

fn sa_up() -> (TestFabric, SubnetManager) {
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    converge(&mut f, &mut hosts);
    let [h] = hosts;
    (f, h.sm)
}

fn query(method: Method, attr: AttrId, comp_mask: u64, record: &[u8]) -> Vec<u8> {
    let req = sa::Repr::request(method, 0x1234, attr, comp_mask, record);
    let mut buf = vec![0u8; MAD_LEN];
    req.emit(&mut sa::Packet::new_unchecked(&mut buf[..]));
    buf
}

/// Status, and the records of a response (RMPP segments reassembled).
fn records(resp: &[u8]) -> (u16, Vec<Vec<u8>>) {
    assert_eq!(resp.len() % MAD_LEN, 0);
    let mut payload = Vec::new();
    let mut status = 0;
    let mut offset = 0;
    let segments = resp.len() / MAD_LEN;
    for (i, mad) in resp.chunks(MAD_LEN).enumerate() {
        let r = sa::Repr::parse(&sa::Packet::new_checked(mad).unwrap()).unwrap();
        assert_eq!(r.header.tid, 0x1234);
        status = r.header.status;
        offset = r.attr_offset;
        if segments > 1 {
            assert!(r.rmpp.is_active());
            assert_eq!(r.rmpp.data1 as usize, i + 1);
            let last = i + 1 == segments;
            assert_eq!(r.rmpp.flags & sa::rmpp_flags::LAST != 0, last);
            if last {
                let len = r.rmpp.data2 as usize - 20;
                payload.extend_from_slice(&r.data[..len]);
                continue;
            }
        }
        payload.extend_from_slice(r.data);
    }
    let n = if segments > 1 {
        payload.len() / (usize::from(offset) * 8)
    } else {
        // A single MAD: the payload length says how many records (GetTableResp), else one.
        let r = sa::Repr::parse(&sa::Packet::new_checked(&resp[..MAD_LEN]).unwrap()).unwrap();
        if r.header.method == Method::GetTableResp {
            (r.rmpp.data2 as usize - 20) / (usize::from(offset) * 8).max(1)
        } else {
            usize::from(status == 0)
        }
    };
    let recs = sa::records(&payload, offset)
        .take(n)
        .map(<[u8]>::to_vec)
        .collect();
    (status, recs)
}

#[test]
fn sa_node_records() {
    let (_f, mut sm) = sa_up();
    let zero = [0u8; NodeRecord::LEN];
    let resp = sm
        .handle_sa(
            Lid(3),
            &query(Method::GetTable, AttrId::NODE_RECORD, 0, &zero),
        )
        .unwrap();
    assert!(resp.len() > MAD_LEN, "six NodeRecords need RMPP");
    let (st, recs) = records(&resp);
    assert_eq!(st, status::SUCCESS);
    let lids: BTreeSet<u16> = recs
        .iter()
        .map(|r| NodeRecord::parse(r).unwrap().lid.0)
        .collect();
    assert_eq!(lids, BTreeSet::from([1, 2, 3, 4, 5, 6]));
    // Get by LID (saquery 3).
    let mut t = NodeRecord::parse(&recs[0]).unwrap();
    t.lid = Lid(3);
    let mut b = [0u8; NodeRecord::LEN];
    t.emit(&mut b);
    let resp = sm
        .handle_sa(
            Lid(1),
            &query(Method::Get, AttrId::NODE_RECORD, node_comp::LID, &b),
        )
        .unwrap();
    assert_eq!(resp.len(), MAD_LEN);
    let (st, recs) = records(&resp);
    assert_eq!(st, status::SUCCESS);
    let nr = NodeRecord::parse(&recs[0]).unwrap();
    assert_eq!(nr.node_info.port_guid, Guid(0xe41d2d0300c00021));
    assert_eq!(nr.node_description.text(), "node3 mlx4_0");
    // Get that matches several: ERR_TOO_MANY_RECORDS; none: ERR_NO_RECORDS.
    let resp = sm
        .handle_sa(Lid(1), &query(Method::Get, AttrId::NODE_RECORD, 0, &zero))
        .unwrap();
    assert_eq!(records(&resp).0, sa::STATUS_TOO_MANY_RECORDS);
    t.lid = Lid(99);
    t.emit(&mut b);
    let resp = sm
        .handle_sa(
            Lid(1),
            &query(Method::Get, AttrId::NODE_RECORD, node_comp::LID, &b),
        )
        .unwrap();
    assert_eq!(records(&resp).0, sa::STATUS_NO_RECORDS);
}

#[test]
fn sa_path_records_match_opensm() {
    let (_f, mut sm) = sa_up();
    let mut t = PathRecord::parse(&[0u8; 64]).unwrap();
    t.slid = Lid(1);
    t.dlid = Lid(3);
    let mut b = [0u8; 64];
    t.emit(&mut b);
    let resp = sm
        .handle_sa(
            Lid(1),
            &query(
                Method::GetTable,
                AttrId::PATH_RECORD,
                path_comp::SLID | path_comp::DLID,
                &b,
            ),
        )
        .unwrap();
    let (st, recs) = records(&resp);
    assert_eq!(st, status::SUCCESS);
    assert_eq!(recs.len(), 1);
    // Golden B-stock/postsm-saquery-src-to-dst-1-3.txt, byte for byte where it prints.
    let raw = &recs[0];
    assert_eq!(raw[49], 0x80, "num_path_revers");
    assert_eq!(&raw[50..52], &[0xff, 0xff], "pkey");
    assert_eq!(raw[54], 0x84, "mtu");
    assert_eq!(raw[55], 0x87, "rate");
    assert_eq!(raw[56], 0x92, "pkt_life");
    let pr = PathRecord::parse(raw).unwrap();
    let prefix = 0xfe80_0000_0000_0000;
    assert_eq!(
        pr.sgid,
        Gid::from_prefix_guid(prefix, Guid(0xe41d2d0300c00001))
    );
    assert_eq!(
        pr.dgid,
        Gid::from_prefix_guid(prefix, Guid(0xe41d2d0300c00021))
    );
    assert_eq!(pr.mtu, Mtu::Mtu2048);
    // By GIDs (what rdma_cm sends), as a Get.
    let mut t = PathRecord::parse(&[0u8; 64]).unwrap();
    t.sgid = pr.sgid;
    t.dgid = pr.dgid;
    t.numb_path = 1;
    t.emit(&mut b);
    let mask = path_comp::SGID | path_comp::DGID | path_comp::NUMB_PATH;
    let (st, recs) = records(
        &sm.handle_sa(Lid(1), &query(Method::Get, AttrId::PATH_RECORD, mask, &b))
            .unwrap(),
    );
    assert_eq!(st, status::SUCCESS);
    assert_eq!(PathRecord::parse(&recs[0]).unwrap().dlid, Lid(3));
    // A port's path to itself: PacketLifeTime 0 (golden: pkt_life 0x80).
    let mut t = PathRecord::parse(&[0u8; 64]).unwrap();
    t.slid = Lid(1);
    t.dlid = Lid(1);
    t.emit(&mut b);
    let (_, recs) = records(
        &sm.handle_sa(
            Lid(1),
            &query(
                Method::GetTable,
                AttrId::PATH_RECORD,
                path_comp::SLID | path_comp::DLID,
                &b,
            ),
        )
        .unwrap(),
    );
    assert_eq!(recs[0][56], 0x80);
    // Every pair (saquery PR): 6 end ports.
    let (st, recs) = records(
        &sm.handle_sa(
            Lid(1),
            &query(Method::GetTable, AttrId::PATH_RECORD, 0, &[0u8; 64]),
        )
        .unwrap(),
    );
    assert_eq!(st, status::SUCCESS);
    assert_eq!(recs.len(), 36);
    // An MTU larger than the path can carry: no path.
    let mut t = PathRecord::parse(&[0u8; 64]).unwrap();
    t.slid = Lid(1);
    t.dlid = Lid(3);
    t.mtu = Mtu::Mtu4096;
    t.emit(&mut b);
    let mask = path_comp::SLID | path_comp::DLID | path_comp::MTU | path_comp::MTU_SELECTOR;
    let (st, recs) = records(
        &sm.handle_sa(
            Lid(1),
            &query(Method::GetTable, AttrId::PATH_RECORD, mask, &b),
        )
        .unwrap(),
    );
    assert_eq!((st, recs.len()), (status::SUCCESS, 0));
    // A GID of another subnet.
    let mut t = PathRecord::parse(&[0u8; 64]).unwrap();
    t.dgid = Gid::from_prefix_guid(0xfec0_0000_0000_0000, Guid(1));
    t.emit(&mut b);
    let resp = sm
        .handle_sa(
            Lid(1),
            &query(Method::GetTable, AttrId::PATH_RECORD, path_comp::DGID, &b),
        )
        .unwrap();
    assert_eq!(records(&resp).0, sa::STATUS_INVALID_GID);
}

#[test]
fn sa_port_info_sm_info_class_port_info() {
    let (_f, mut sm) = sa_up();
    let (st, recs) = records(
        &sm.handle_sa(
            Lid(1),
            &query(
                Method::GetTable,
                AttrId::PORT_INFO_RECORD,
                0,
                &[0u8; PortInfoRecord::LEN],
            ),
        )
        .unwrap(),
    );
    assert_eq!(st, status::SUCCESS);
    assert_eq!(recs.len(), 6, "golden saquery PIR: one per end port");
    // saquery -s: the ports with IsSM.
    let mut t = PortInfoRecord::parse(&recs[0]).unwrap();
    t.port_info.capability_mask = capability_mask::IS_SM;
    let mut b = [0u8; PortInfoRecord::LEN];
    t.emit(&mut b);
    let (_, sms) = records(
        &sm.handle_sa(
            Lid(1),
            &query(
                Method::GetTable,
                AttrId::PORT_INFO_RECORD,
                port_info_comp::CAPABILITY_MASK,
                &b,
            ),
        )
        .unwrap(),
    );
    assert_eq!(sms.len(), 1);
    assert_eq!(PortInfoRecord::parse(&sms[0]).unwrap().endport_lid, Lid(1));
    // SMInfoRecord (saquery SMIR).
    let (st, recs) = records(
        &sm.handle_sa(
            Lid(1),
            &query(Method::GetTable, AttrId::SM_INFO_RECORD, 0, &[]),
        )
        .unwrap(),
    );
    assert_eq!(st, status::SUCCESS);
    assert_eq!(&recs[0][..2], &[0, 1]);
    assert_eq!(recs[0][24] & 0x0F, 3, "Master");
    // ClassPortInfo (saquery -c).
    let resp = sm
        .handle_sa(Lid(1), &query(Method::Get, AttrId::CLASS_PORT_INFO, 0, &[]))
        .unwrap();
    let r = sa::Repr::parse(&sa::Packet::new_checked(&resp[..]).unwrap()).unwrap();
    assert_eq!(r.header.method, Method::GetResp);
    assert_eq!(r.data[1], 2, "class version");
}

#[test]
fn sa_errors_and_garbage() {
    let (_f, mut sm) = sa_up();
    let status_of = |resp: Vec<u8>| {
        sa::Repr::parse(&sa::Packet::new_checked(&resp[..]).unwrap())
            .unwrap()
            .header
            .status
    };
    // LinkRecord is not served.
    let resp = sm
        .handle_sa(
            Lid(1),
            &query(Method::GetTable, AttrId::LINK_RECORD, 0, &[]),
        )
        .unwrap();
    assert_eq!(status_of(resp), status::UNSUPPORTED_METHOD_ATTR);
    // Set is not a method the SA serves here.
    let resp = sm
        .handle_sa(Lid(1), &query(Method::Set, AttrId::NODE_RECORD, 0, &[]))
        .unwrap();
    assert_eq!(status_of(resp), status::UNSUPPORTED_METHOD);
    // ClassVersion 1.
    let mut q = query(Method::Get, AttrId::NODE_RECORD, 0, &[]);
    q[2] = 1;
    assert_eq!(
        status_of(sm.handle_sa(Lid(1), &q).unwrap()),
        status::BAD_VERSION
    );
    // Too short, a response, another class: no answer.
    assert_eq!(sm.handle_sa(Lid(1), &q[..100]), None);
    let mut resp = query(Method::GetResp, AttrId::NODE_RECORD, 0, &[]);
    assert_eq!(sm.handle_sa(Lid(1), &resp), None);
    resp[1] = 0x04;
    resp[3] = 0x01;
    assert_eq!(sm.handle_sa(Lid(1), &resp), None);
    // Random bytes never panic.
    let mut x = 0x1234_5678_9abc_def0u64;
    for _ in 0..2000 {
        let mut buf = [0u8; MAD_LEN];
        for b in buf.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        // Keep it an SA request often enough to reach the record code.
        if x % 2 == 0 {
            buf[0] = 1;
            buf[1] = 0x03;
            buf[2] = 2;
            buf[3] = [0x01, 0x12][(x >> 8) as usize % 2];
            buf[16] = 0;
            buf[17] = [0x11, 0x12, 0x35, 0x18, 0x01][(x >> 16) as usize % 5];
        }
        let _ = sm.handle_sa(Lid(1), &buf);
    }
    // Unknown TIDs to the SM are counted, not fatal.
    let bogus = smp::Repr::dr_get(0xdead, AttrId::NODE_INFO, 0, 0, &[]).unwrap();
    sm.handle_response(Duration::from_secs(1), &bogus.response(0, [0; 64]));
    assert_eq!(sm.unknown_tids(), 1);
}

// ---- Multicast ------------------------------------------------------------------------------

/// The port GID of a CA port of topology B (subnet prefix fe80::).
fn port_gid(f: &TestFabric, id: &str) -> Gid {
    let guid = f.topology().nodes()[idx(f, id)].port_guid(1).unwrap();
    Gid::from_prefix_guid(0xfe80_0000_0000_0000, guid)
}

/// An MCMemberRecord request (Set = join, Delete = leave) from CA `id`'s port 1 for `rec`,
/// answered by the SM: (status, the record of the answer).
fn mcmember(
    f: &TestFabric,
    sm: &mut SubnetManager,
    id: &str,
    method: Method,
    mask: u64,
    rec: &McMemberRecord,
) -> (u16, Option<McMemberRecord>) {
    let mut b = [0u8; McMemberRecord::LEN];
    rec.emit(&mut b);
    let slid = Lid(lid(f, id, 1));
    let resp = sm
        .handle_sa(slid, &query(method, AttrId::MC_MEMBER_RECORD, mask, &b))
        .unwrap();
    assert_eq!(resp.len(), MAD_LEN);
    let r = sa::Repr::parse(&sa::Packet::new_checked(&resp[..]).unwrap()).unwrap();
    assert_eq!(r.header.tid, 0x1234);
    assert_eq!(Some(r.header.method), method.response());
    let rec = (r.header.status == status::SUCCESS).then(|| McMemberRecord::parse(r.data).unwrap());
    (r.header.status, rec)
}

/// A join of the IPoIB broadcast group as the Linux IPoIB driver sends it: MGID, PortGID,
/// JoinState (FullMember), plus Q_Key, P_Key, SL, FlowLabel, TClass, the creation components.
fn broadcast_join(f: &TestFabric, id: &str) -> McMemberRecord {
    McMemberRecord {
        mgid: ipoib_broadcast_mgid(PKey::DEFAULT),
        port_gid: port_gid(f, id),
        q_key: QKey(0x0b1b),
        pkey: PKey::DEFAULT,
        join_state: join_state::FULL_MEMBER,
        ..McMemberRecord::default()
    }
}

/// Where copies of a multicast packet from CA `from` (port 1) to `mlid` ended: the CAs that
/// received one, by name (sorted), and whether anything else happened (loops, losses).
fn multicast_from(f: &mut TestFabric, from: &str, mlid: u16) -> (Vec<String>, Vec<Outcome>) {
    let slid = Lid(lid(f, from, 1));
    let ends = f.send_multicast(
        idx(f, from),
        1,
        data_packet(slid, Lid(mlid), 0xFF_FFFF, b"mcast"),
    );
    let mut got = Vec::new();
    let mut other = Vec::new();
    for (node, outcome) in ends {
        match outcome {
            Outcome::Delivered { port: 1 } => got.push(f.topology().nodes()[node].id.clone()),
            o => other.push(o),
        }
    }
    got.sort();
    (got, other)
}

/// The MFT entry of `mlid` on switch `id`, as the switch holds it.
fn mft(f: &TestFabric, id: &str, mlid: u16) -> Vec<u8> {
    f.switch(idx(f, id))
        .unwrap()
        .sma()
        .mft_ports(Lid(mlid))
        .iter()
        .collect()
}

#[test]
fn multicast_groups_and_forwarding_on_topo_b() {
    let mut f = fabric(TOPO_B);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    let mut now = Duration::ZERO;
    let settle = |f: &mut TestFabric, hosts: &mut [Host], now: &mut Duration| {
        let until = *now + Duration::from_secs(60);
        run(f, hosts, now, until, &mut no_loss());
    };
    settle(&mut f, &mut hosts, &mut now);
    assert!(hosts[0].sm.is_subnet_up());
    let log = logs(&mut hosts[0].sm);
    let texts: Vec<&str> = log.iter().map(|(_, t)| t.as_str()).collect();
    let unicast = texts
        .iter()
        .position(|t| *t == "SWITCHES CONFIGURED FOR UNICAST");
    let multicast = texts
        .iter()
        .position(|t| *t == "SWITCHES CONFIGURED FOR MULTICAST");
    assert!(unicast.is_some() && unicast < multicast, "{texts:#?}");
    assert!(
        texts.contains(&"mcast_mgr_build_spanning_tree: MLID 0xC000 has 0 members - nothing to do")
    );

    // saquery -m: the pre-created broadcast group as opensm shows it (golden
    // A-stock/postsm-saquery-MCMR.txt), no members, and no MFT entry anywhere.
    let zero = [0u8; McMemberRecord::LEN];
    let resp = hosts[0]
        .sm
        .handle_sa(
            Lid(3),
            &query(Method::GetTable, AttrId::MC_MEMBER_RECORD, 0, &zero),
        )
        .unwrap();
    let (st, recs) = records(&resp);
    assert_eq!((st, recs.len()), (status::SUCCESS, 1));
    let bytes = &recs[0];
    assert_eq!(
        &bytes[..16],
        &[0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]
    );
    assert_eq!(
        &bytes[32..44],
        &[0, 0, 0x0b, 0x1b, 0xc0, 0x00, 0x84, 0, 0xff, 0xff, 0x83, 0x92]
    );
    assert_eq!(bytes[48], 0x20);
    assert!(mft(&f, "sw1", 0xC000).is_empty() && mft(&f, "sw2", 0xC000).is_empty());

    // node1 and node3 join: answered with the group's record; the MFTs follow.
    for id in ["node1", "node3"] {
        let (st, rec) = mcmember(
            &f,
            &mut hosts[0].sm,
            id,
            Method::Set,
            mcmember_comp::CREATE,
            &broadcast_join(&f, id),
        );
        assert_eq!(st, status::SUCCESS);
        let rec = rec.unwrap();
        assert_eq!(
            (rec.mlid, rec.q_key, rec.mtu, rec.rate),
            (Lid(0xC000), QKey(0xb1b), Mtu::Mtu2048, 3)
        );
        assert_eq!(
            (rec.pkey, rec.sl, rec.packet_life_time),
            (PKey::DEFAULT, 0, 18)
        );
        assert_eq!((rec.port_gid, rec.join_state), (port_gid(&f, id), 1));
    }
    settle(&mut f, &mut hosts, &mut now);
    // One of the two parallel ISLs carries the group (the tree has no loop).
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 35]);
    assert_eq!(mft(&f, "sw2", 0xC000), [1, 35]);
    assert_eq!(
        multicast_from(&mut f, "node1", 0xC000),
        (vec!["node3".to_string()], vec![])
    );
    assert_eq!(
        multicast_from(&mut f, "node3", 0xC000),
        (vec!["node1".to_string()], vec![])
    );

    // All four: each member's packet reaches every other member exactly once.
    for id in ["node2", "node4"] {
        let join = McMemberRecord {
            port_gid: port_gid(&f, id),
            mgid: ipoib_broadcast_mgid(PKey::DEFAULT),
            join_state: join_state::FULL_MEMBER,
            ..McMemberRecord::default()
        };
        let (st, _) = mcmember(
            &f,
            &mut hosts[0].sm,
            id,
            Method::Set,
            mcmember_comp::JOIN,
            &join,
        );
        assert_eq!(st, status::SUCCESS);
    }
    settle(&mut f, &mut hosts, &mut now);
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 2, 35]);
    assert_eq!(mft(&f, "sw2", 0xC000), [1, 2, 35]);
    let all = ["node1", "node2", "node3", "node4"];
    for from in all {
        let want: Vec<String> = all
            .iter()
            .filter(|&&n| n != from)
            .map(|n| n.to_string())
            .collect();
        assert_eq!(
            multicast_from(&mut f, from, 0xC000),
            (want, vec![]),
            "from {from}"
        );
    }
    // A trusted GetTable (the SM's SM_Key... 0 here, so untrusted) still gives one group
    // record; with PortGID, that member's.
    let mut t = broadcast_join(&f, "node4");
    t.join_state = 0;
    let mut b = [0u8; McMemberRecord::LEN];
    t.emit(&mut b);
    let resp = hosts[0]
        .sm
        .handle_sa(
            Lid(3),
            &query(
                Method::Get,
                AttrId::MC_MEMBER_RECORD,
                mcmember_comp::MGID | mcmember_comp::PORT_GID,
                &b,
            ),
        )
        .unwrap();
    let (st, recs) = records(&resp);
    assert_eq!((st, recs.len()), (status::SUCCESS, 1));
    let r = McMemberRecord::parse(&recs[0]).unwrap();
    assert_eq!((r.port_gid, r.join_state), (port_gid(&f, "node4"), 1));

    // node4 leaves: sw2 no longer sends to port 2.
    let (st, rec) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node4",
        Method::Delete,
        mcmember_comp::JOIN,
        &broadcast_join(&f, "node4"),
    );
    assert_eq!((st, rec.map(|r| r.join_state)), (status::SUCCESS, Some(0)));
    settle(&mut f, &mut hosts, &mut now);
    assert_eq!(mft(&f, "sw2", 0xC000), [1, 35]);
    assert_eq!(
        multicast_from(&mut f, "node2", 0xC000).0,
        ["node1", "node3"]
    );
    // Leaving again is invalid.
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node4",
        Method::Delete,
        mcmember_comp::JOIN,
        &broadcast_join(&f, "node4"),
    );
    assert_eq!(st, sa::STATUS_REQ_INVALID);

    // A new group: created by a join with the creation components, MLID 0xC001.
    let mgid = Gid([
        0xff, 0x12, 0x60, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1,
    ]);
    let mut create = broadcast_join(&f, "node2");
    create.mgid = mgid;
    create.q_key = QKey(0x1234);
    // Without Q_Key, P_Key, SL, FlowLabel, TClass it cannot be created.
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Set,
        mcmember_comp::JOIN,
        &create,
    );
    assert_eq!(st, sa::STATUS_INSUFFICIENT_COMPONENTS);
    // Nor by a non-full member.
    let mut send_only = create;
    send_only.join_state = join_state::SEND_ONLY_NON_MEMBER;
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Set,
        mcmember_comp::CREATE,
        &send_only,
    );
    assert_eq!(st, sa::STATUS_REQ_INVALID);
    let (st, rec) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Set,
        mcmember_comp::CREATE,
        &create,
    );
    assert_eq!(st, status::SUCCESS);
    let rec = rec.unwrap();
    // MTU and rate: the joining port's (2048, 40 Gb/s), as opensm gives when not asked.
    assert_eq!(
        (rec.mlid, rec.q_key, rec.mtu, rec.rate),
        (Lid(0xC001), QKey(0x1234), Mtu::Mtu2048, 7)
    );
    // A join that does not match the group's Q_Key.
    let mut wrong = create;
    wrong.port_gid = port_gid(&f, "node4");
    wrong.q_key = QKey(0x9999);
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node4",
        Method::Set,
        mcmember_comp::CREATE,
        &wrong,
    );
    assert_eq!(st, sa::STATUS_REQ_INVALID);
    // JoinState 0, and a PortGID outside the subnet prefix.
    let mut zero_state = create;
    zero_state.join_state = 0;
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Set,
        mcmember_comp::CREATE,
        &zero_state,
    );
    assert_eq!(st, sa::STATUS_REQ_INVALID);
    let mut foreign = create;
    foreign.port_gid = Gid::from_prefix_guid(0xfe80_0000_0000_0001, Guid(0x1));
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Set,
        mcmember_comp::CREATE,
        &foreign,
    );
    assert_eq!(st, sa::STATUS_INVALID_GID);
    // node3 joins as a non-member (receives only).
    let mut nm = create;
    nm.port_gid = port_gid(&f, "node3");
    nm.join_state = join_state::NON_MEMBER;
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node3",
        Method::Set,
        mcmember_comp::JOIN,
        &nm,
    );
    assert_eq!(st, status::SUCCESS);
    settle(&mut f, &mut hosts, &mut now);
    assert_eq!(mft(&f, "sw1", 0xC001), [2, 35]);
    assert_eq!(mft(&f, "sw2", 0xC001), [1, 35]);
    assert_eq!(multicast_from(&mut f, "node2", 0xC001).0, ["node3"]);
    // The broadcast group is untouched.
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 2, 35]);

    // The last full member leaves: the group is gone (with its non-member), MLID freed.
    let (st, _) = mcmember(
        &f,
        &mut hosts[0].sm,
        "node2",
        Method::Delete,
        mcmember_comp::JOIN,
        &create,
    );
    assert_eq!(st, status::SUCCESS);
    assert!(hosts[0].sm.mc_groups().get(&mgid).is_none());
    settle(&mut f, &mut hosts, &mut now);
    assert!(mft(&f, "sw1", 0xC001).is_empty() && mft(&f, "sw2", 0xC001).is_empty());
    let resp = hosts[0]
        .sm
        .handle_sa(
            Lid(3),
            &query(Method::GetTable, AttrId::MC_MEMBER_RECORD, 0, &zero),
        )
        .unwrap();
    assert_eq!(records(&resp).1.len(), 1);

    // Everyone leaves the broadcast group: it stays (pre-created), with no MFT entries.
    for id in ["node1", "node2", "node3"] {
        let (st, _) = mcmember(
            &f,
            &mut hosts[0].sm,
            id,
            Method::Delete,
            mcmember_comp::JOIN,
            &broadcast_join(&f, id),
        );
        assert_eq!(st, status::SUCCESS, "{id}");
    }
    settle(&mut f, &mut hosts, &mut now);
    assert!(hosts[0]
        .sm
        .mc_groups()
        .get(&ipoib_broadcast_mgid(PKey::DEFAULT))
        .is_some());
    assert!(mft(&f, "sw1", 0xC000).is_empty() && mft(&f, "sw2", 0xC000).is_empty());
    let (others, _) = multicast_from(&mut f, "node1", 0xC000);
    assert!(others.is_empty());
    assert!(logs(&mut hosts[0].sm)
        .iter()
        .all(|(l, _)| *l != LogLevel::ERROR));
}

#[test]
fn multicast_tree_follows_a_pulled_cable() {
    let mut f = fabric(TOPO_B);
    let config = SmConfig {
        sweep_interval: Some(Duration::from_secs(10)),
        ..SmConfig::default()
    };
    let mut hosts = [host(&mut f, "node1", 1, config)];
    let mut now = Duration::ZERO;
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(5),
        &mut no_loss(),
    );
    for id in ["node1", "node2", "node3", "node4"] {
        let (st, _) = mcmember(
            &f,
            &mut hosts[0].sm,
            id,
            Method::Set,
            mcmember_comp::CREATE,
            &broadcast_join(&f, id),
        );
        assert_eq!(st, status::SUCCESS);
    }
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(6),
        &mut no_loss(),
    );
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 2, 35]);
    // Pull the ISL on port 35: after the sweeps the tree crosses port 36.
    let (sw1, sw2) = (idx(&f, "sw1"), idx(&f, "sw2"));
    f.sma_mut(sw1).link_down(35);
    f.sma_mut(sw2).link_down(35);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(30),
        &mut no_loss(),
    );
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 2, 36]);
    assert_eq!(mft(&f, "sw2", 0xC000), [1, 2, 36]);
    let all = ["node1", "node2", "node3", "node4"];
    for from in all {
        let want: Vec<String> = all
            .iter()
            .filter(|&&n| n != from)
            .map(|n| n.to_string())
            .collect();
        assert_eq!(
            multicast_from(&mut f, from, 0xC000),
            (want, vec![]),
            "from {from}"
        );
    }
    // Plug it back: port 35 again.
    let rate = LinkRate {
        width: LinkWidth::X4,
        speed: LinkSpeed::Qdr,
    };
    f.sma_mut(sw1).link_up(35, rate);
    f.sma_mut(sw2).link_up(35, rate);
    run(
        &mut f,
        &mut hosts,
        &mut now,
        Duration::from_secs(50),
        &mut no_loss(),
    );
    assert_eq!(mft(&f, "sw1", 0xC000), [1, 2, 35]);
    assert_eq!(
        multicast_from(&mut f, "node4", 0xC000).0,
        ["node1", "node2", "node3"]
    );
}

#[test]
fn multicast_on_a_ring_of_switches_reaches_each_member_once() {
    // Five switches in a cycle: flooding along every cable would loop forever.
    let mut f = TestFabric::new(ring(5));
    let mut hosts = [host(&mut f, "h0_0", 1, quiet())];
    converge(&mut f, &mut hosts);
    let cas: Vec<String> = f
        .topology()
        .nodes()
        .iter()
        .filter(|n| !n.is_switch())
        .map(|n| n.id.clone())
        .collect();
    // Every host but h2_1 joins; h2_1 sends without being a member and is not on the tree.
    let members: Vec<&String> = cas.iter().filter(|id| *id != "h2_1").collect();
    for id in &members {
        let rec = McMemberRecord {
            mgid: ipoib_broadcast_mgid(PKey::DEFAULT),
            port_gid: Gid::from_prefix_guid(
                0xfe80_0000_0000_0000,
                f.topology().nodes()[idx(&f, id)].port_guid(1).unwrap(),
            ),
            join_state: join_state::FULL_MEMBER,
            ..McMemberRecord::default()
        };
        let (st, _) = mcmember(
            &f,
            &mut hosts[0].sm,
            id,
            Method::Set,
            mcmember_comp::JOIN,
            &rec,
        );
        assert_eq!(st, status::SUCCESS, "{id}");
    }
    converge(&mut f, &mut hosts);
    for from in &members {
        let mut want: Vec<String> = members
            .iter()
            .filter(|m| **m != *from)
            .map(|m| m.to_string())
            .collect();
        want.sort();
        let (got, other) = multicast_from(&mut f, from, 0xC000);
        assert_eq!(got, want, "from {from}");
        // Copies end only at members; nothing loops or falls off a cable.
        assert!(
            other
                .iter()
                .all(|o| matches!(o, Outcome::Dropped("multicast_no_egress"))),
            "from {from}: {other:?}"
        );
    }
    // The tree leaves exactly one ring cable unused: some switch sends to only one ISL.
    let isl_ports = |id: &str| {
        mft(&f, id, 0xC000)
            .into_iter()
            .filter(|p| *p == 1 || *p == 2)
            .count()
    };
    let total: usize = (0..5).map(|i| isl_ports(&format!("sw{i}"))).sum();
    assert_eq!(total, 8, "4 tree cables, each counted at both ends");
}

#[test]
fn a_previous_sms_mft_entries_are_overwritten() {
    use softib_wire::mad::attr::{MulticastForwardingTable, SmpAttribute};
    let mut f = fabric(TOPO_B);
    // What an SM before this one left in sw1: 0xC000 to ports 2 and 36 (position 2 holds
    // ports 32..=47), 0xC001 to port 1.
    let sw1 = idx(&f, "sw1");
    for (position, masks) in [
        (0u8, [(0usize, 1u16 << 2), (1, 1 << 1)]),
        (2, [(0, 1 << 4), (1, 0)]),
    ] {
        let mut t = MulticastForwardingTable::default();
        for (i, m) in masks {
            t.port_masks[i] = m;
        }
        let req = smp::Repr::lid_set(
            1,
            AttrId::MULTICAST_FORWARDING_TABLE,
            MulticastForwardingTable::attr_mod(0, position),
            0,
            t.to_data(),
        );
        let resp = f.sma_mut(sw1).handle_smp(0, &req).unwrap();
        assert_eq!(resp.header.status, status::SUCCESS);
    }
    assert_eq!(mft(&f, "sw1", 0xC000), [2, 36]);
    let mut hosts = [host(&mut f, "node1", 1, quiet())];
    converge(&mut f, &mut hosts);
    assert!(mft(&f, "sw1", 0xC000).is_empty() && mft(&f, "sw1", 0xC001).is_empty());
    // The second sweep writes nothing new.
    hosts[0].sm.request_sweep();
    converge(&mut f, &mut hosts);
    assert!(mft(&f, "sw1", 0xC000).is_empty());
}
