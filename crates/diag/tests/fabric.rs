//! `ibnetdiscover`, `ibnodes`, `iblinkinfo`, `ibaddr` against the golden captures.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

mod common;

use common::{golden, timestamp, topo_a, topo_b};
use softib_diag::fabric::{
    discovery_order, ibaddr_node, ibhosts, iblinkinfo, ibnetdiscover, ibnodes, ibnodes_json,
    ibswitches, IblinkinfoArgs, IbnetdiscoverArgs, NodeFilter,
};

fn topology(subnet: &softib_fabric::subnet::Subnet, args: IbnetdiscoverArgs, path: &str) {
    let want = golden(path);
    assert_eq!(
        ibnetdiscover(subnet, &args, &timestamp(&want)),
        want,
        "{path}"
    );
}

#[test]
fn topo_a_nodes() {
    let post = topo_a(1, true);
    assert_eq!(ibnodes(&post), golden("A-stock/postsm-test213-ibnodes.txt"));
    assert_eq!(ibhosts(&post), golden("A-stock/postsm-test213-ibhosts.txt"));
    assert_eq!(
        ibswitches(&post),
        golden("A-stock/postsm-test213-ibswitches.txt")
    );
    assert_eq!(
        ibnodes(&topo_a(1, false)),
        golden("A-stock/presm-test213-ibnodes.txt")
    );
    assert_eq!(
        ibnodes(&topo_a(2, true)),
        golden("A-patched/postsm-test213p2-ibnodes.txt")
    );
}

#[test]
fn topo_a_ibnetdiscover() {
    let post = topo_a(1, true);
    let d = IbnetdiscoverArgs::default();
    topology(&post, d, "A-stock/postsm-test213-ibnetdiscover.txt");
    topology(
        &topo_a(1, false),
        d,
        "A-stock/presm-test213-ibnetdiscover.txt",
    );
    topology(
        &topo_a(2, true),
        d,
        "A-patched/postsm-test213p2-ibnetdiscover.txt",
    );
    topology(
        &post,
        IbnetdiscoverArgs { group: true, ..d },
        "A-stock/postsm-ibnetdiscover-g.txt",
    );
    topology(
        &post,
        IbnetdiscoverArgs { ports: true, ..d },
        "A-stock/postsm-test213-ibnetdiscover-p.txt",
    );
    let list = |f| IbnetdiscoverArgs { list: Some(f), ..d };
    topology(
        &post,
        list(NodeFilter::All),
        "A-stock/postsm-ibnetdiscover-l.txt",
    );
    topology(
        &post,
        list(NodeFilter::Cas),
        "A-stock/postsm-ibnetdiscover-H.txt",
    );
    // Swept from test214: the sweeping node is listed last.
    let mut from214 = topo_a(1, true);
    from214.nodes.swap(0, 1);
    from214.links.clear();
    from214.add_link(
        softib_fabric::subnet::PortRef { node: 0, port: 1 },
        softib_fabric::subnet::PortRef { node: 1, port: 1 },
    );
    topology(&from214, d, "A-stock/postsm-test214-ibnetdiscover.txt");
}

#[test]
fn topo_a_iblinkinfo() {
    let d = IblinkinfoArgs::default();
    assert_eq!(
        iblinkinfo(&topo_a(1, true), &d),
        golden("A-stock/postsm-test213-iblinkinfo.txt")
    );
    assert_eq!(
        iblinkinfo(&topo_a(1, false), &d),
        golden("A-stock/presm-test213-iblinkinfo.txt")
    );
    assert_eq!(
        iblinkinfo(&topo_a(2, true), &d),
        golden("A-patched/postsm-test213p2-iblinkinfo.txt")
    );
    let line = IblinkinfoArgs { line: true, ..d };
    assert_eq!(
        iblinkinfo(&topo_a(1, true), &line),
        golden("A-stock/postsm-iblinkinfo-l.txt")
    );
    let hoq = IblinkinfoArgs {
        sw_settings: true,
        ..d
    };
    assert_eq!(
        iblinkinfo(&topo_a(1, true), &hoq),
        golden("A-stock/postsm-iblinkinfo-p.txt")
    );
}

#[test]
fn topo_a_ibaddr() {
    let post = topo_a(1, true);
    assert_eq!(
        ibaddr_node(&post.nodes[0], 1).unwrap(),
        golden("A-stock/postsm-test213-ibaddr.txt")
    );
    assert_eq!(
        ibaddr_node(&post.nodes[1], 1).unwrap(),
        golden("A-stock/postsm-ibaddr-2.txt")
    );
    let pre = topo_a(1, false);
    assert_eq!(
        ibaddr_node(&pre.nodes[0], 1).unwrap(),
        golden("A-stock/presm-test213-ibaddr.txt")
    );
    assert_eq!(ibaddr_node(&pre.nodes[0], 2), None);
}

#[test]
fn topo_b_order() {
    // libibnetdisc from node1: node1, sw1, node2, sw2, node3, node4.
    let s = topo_b(0);
    let names: Vec<&str> = discovery_order(&s)
        .iter()
        .map(|&i| s.nodes[i].description.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "node1 mlx4_0",
            "MF0;sw1:SX6036/U1",
            "node2 mlx4_0",
            "MF0;sw2:SX6036/U1",
            "node3 mlx4_0",
            "node4 mlx4_0"
        ]
    );
}

#[test]
fn topo_b_nodes() {
    let s = topo_b(0);
    assert_eq!(ibnodes(&s), golden("B-stock/postsm-node1-ibnodes.txt"));
    assert_eq!(ibhosts(&s), golden("B-stock/postsm-node1-ibhosts.txt"));
    assert_eq!(
        ibswitches(&s),
        golden("B-stock/postsm-node1-ibswitches.txt")
    );
    let json = ibnodes_json(&s);
    assert_eq!(json.as_array().unwrap().len(), 6);
    assert_eq!(json[0]["description"], "node4 mlx4_0");
    assert_eq!(json[5]["type"], "Switch");
    assert_eq!(json[5]["lid"], 5);
}

#[test]
fn topo_b_ibnetdiscover() {
    let s = topo_b(0);
    let d = IbnetdiscoverArgs::default();
    topology(&s, d, "B-stock/postsm-node1-ibnetdiscover.txt");
    topology(&topo_b(3), d, "B-stock/postsm-node4-ibnetdiscover.txt");
    topology(
        &s,
        IbnetdiscoverArgs { group: true, ..d },
        "B-stock/postsm-ibnetdiscover-g.txt",
    );
    topology(
        &s,
        IbnetdiscoverArgs { ports: true, ..d },
        "B-stock/postsm-node1-ibnetdiscover-p.txt",
    );
    let list = |f| IbnetdiscoverArgs { list: Some(f), ..d };
    topology(
        &s,
        list(NodeFilter::All),
        "B-stock/postsm-ibnetdiscover-l.txt",
    );
    topology(
        &s,
        list(NodeFilter::Cas),
        "B-stock/postsm-ibnetdiscover-H.txt",
    );
    topology(
        &s,
        list(NodeFilter::Switches),
        "B-stock/postsm-ibnetdiscover-S.txt",
    );
}

#[test]
fn topo_b_iblinkinfo() {
    let s = topo_b(0);
    let d = IblinkinfoArgs::default();
    assert_eq!(
        iblinkinfo(&s, &d),
        golden("B-stock/postsm-node1-iblinkinfo.txt")
    );
    assert_eq!(
        iblinkinfo(&s, &IblinkinfoArgs { line: true, ..d }),
        golden("B-stock/postsm-iblinkinfo-l.txt")
    );
    assert_eq!(
        iblinkinfo(
            &s,
            &IblinkinfoArgs {
                down_only: true,
                ..d
            }
        ),
        golden("B-stock/postsm-iblinkinfo-d.txt")
    );
    assert_eq!(
        iblinkinfo(
            &s,
            &IblinkinfoArgs {
                only: NodeFilter::Cas,
                ..d
            }
        ),
        golden("B-stock/postsm-iblinkinfo-cas-only.txt")
    );
    assert_eq!(
        iblinkinfo(
            &s,
            &IblinkinfoArgs {
                only: NodeFilter::Switches,
                ..d
            }
        ),
        golden("B-stock/postsm-iblinkinfo-switches-only.txt")
    );
    // -D 0,1 from node1 is sw1 (index 1 in this subnet).
    assert_eq!(
        iblinkinfo(&s, &IblinkinfoArgs { node: Some(1), ..d }),
        golden("B-stock/postsm-iblinkinfo-D-0_1.txt")
    );
}

#[test]
fn topo_b_ibaddr() {
    let s = topo_b(0);
    assert_eq!(
        ibaddr_node(&s.nodes[0], 1).unwrap(),
        golden("B-stock/postsm-ibaddr-1.txt")
    );
    assert_eq!(
        ibaddr_node(&s.nodes[1], 7).unwrap(),
        golden("B-stock/postsm-ibaddr-5.txt")
    );
}

#[test]
fn empty_and_odd_subnets_do_not_panic() {
    let empty = softib_fabric::subnet::Subnet::default();
    assert_eq!(
        ibnetdiscover(&empty, &IbnetdiscoverArgs::default(), "x"),
        ""
    );
    assert_eq!(
        iblinkinfo(
            &empty,
            &IblinkinfoArgs {
                node: Some(3),
                ..Default::default()
            }
        ),
        ""
    );
    assert_eq!(ibnodes(&empty), "");
    // A link to a node index that does not exist.
    let mut s = topo_a(1, true);
    s.add_link(
        softib_fabric::subnet::PortRef { node: 0, port: 2 },
        softib_fabric::subnet::PortRef { node: 9, port: 1 },
    );
    let _ = ibnetdiscover(
        &s,
        &IbnetdiscoverArgs {
            ports: true,
            ..Default::default()
        },
        "x",
    );
    let _ = ibnetdiscover(&s, &IbnetdiscoverArgs::default(), "x");
    let _ = iblinkinfo(&s, &IblinkinfoArgs::default());
}
