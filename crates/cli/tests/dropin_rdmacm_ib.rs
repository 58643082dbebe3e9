//! Debian's unmodified rdma_cm programs on the emulated InfiniBand fabric, through softib's
//! librdmacm.so.1 and libibverbs.so.1 (`softib fabric exec`): the hosts of `softib fabric up
//! --netns` each get an `ib0` (`softib ipoib add`), the programs are given its IPoIB
//! addresses, and the library resolves them as the kernel's rdma_cm does on an IB port — the
//! destination's GID from IPoIB ARP, the route from an SA PathRecord — and runs the CM on QP1
//! of the IB ports (LRH-routed GMPs, through switches on topoB); mckey's group is joined
//! through the SA.
//!
//! Needs root (namespaces, TUN) and `ip`; without them the tests say so and pass, except
//! under `CI=true`, where a missing requirement fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dropin;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{text, wait_status, wait_until, Fabric};
use dropin::{have, Done, Run};

fn can_run() -> bool {
    let root = rustix::process::geteuid().is_root();
    let tun = std::path::Path::new("/dev/net/tun").exists();
    let ip = Command::new("sh")
        .args(["-c", "command -v ip"])
        .output()
        .is_ok_and(|o| o.status.success());
    if root && tun && ip {
        return true;
    }
    let why = format!("root: {root}, /dev/net/tun: {tun}, ip: {ip}");
    assert!(
        std::env::var_os("CI").is_none_or(|v| v != "true"),
        "rdma_cm over the IB fabric cannot run under CI=true ({why})"
    );
    eprintln!("skipping: rdma_cm on the IB fabric needs root, TUN and ip ({why})");
    false
}

/// A fabric with `ib0` up on each `(host, address/prefix)`, and every host's port Active.
fn fabric_with_ib0(topology: &str, name: &str, hosts: &[(&str, &str)]) -> Fabric {
    let f = Fabric::up(topology, name, &["--netns"]);
    wait_status(
        &f,
        "port 1 Active on every host",
        Duration::from_secs(30),
        |s| s.matches("port 1 Active").count() >= hosts.len() && !s.contains("port 1 Init"),
    );
    for (h, addr) in hosts {
        f.ok(h, &words("softib ipoib add ib0 --dev mlx4_0 --port 1"));
        f.ok(h, &["ip", "addr", "add", addr, "dev", "ib0"]);
        f.ok(h, &words("ip link set ib0 up"));
    }
    // An interface carries ARP once it has joined the broadcast group through the SA.
    for (h, _) in hosts {
        wait_until(&format!("{h}'s ib0 up"), Duration::from_secs(30), || {
            std::thread::sleep(Duration::from_millis(100));
            f.ok(h, &words("softib ipoib show")).contains(" up mlid")
        });
    }
    f
}

/// topoA's two hosts back to back, `ib0` on NET.2 (test213) and NET.3 (test214).
fn back_to_back(name: &str, net: &str) -> Fabric {
    let (a, b) = (format!("{net}.2/24"), format!("{net}.3/24"));
    fabric_with_ib0(
        "topologies/topoA.net",
        name,
        &[("test213", &a), ("test214", &b)],
    )
}

fn words(line: &str) -> Vec<&str> {
    line.split_whitespace().collect()
}

/// Starts the command line `line` on `node`.
fn start(f: &Fabric, node: &str, line: &str) -> Run {
    Run::on_fabric(&f.dir, node, &words(line))
}

/// Runs `server` on `s_node`, then `client` on `c_node` until it no longer hears that nobody
/// listens (rdma_cm clients do not retry a REJ, and the server may not listen yet), for at
/// most 30 s; waits for both, which must have succeeded on softib's librdmacm.
fn pair(f: &Fabric, s_node: &str, server: &str, c_node: &str, client: &str) -> (Done, Done) {
    let s = start(f, s_node, server);
    let t0 = Instant::now();
    let c = loop {
        std::thread::sleep(Duration::from_millis(300));
        let c = start(f, c_node, client).wait();
        if c.status.success() || !c.heard_nobody_listens() || t0.elapsed() > Duration::from_secs(30)
        {
            break c;
        }
    };
    let s = s.wait();
    for d in [&s, &c] {
        d.ok();
        d.loaded_ours_lib("librdmacm.so.1");
    }
    (s, c)
}

/// `rping -v -C n` between the two nodes: every ping verified on both sides.
fn rping(f: &Fabric, server: &str, client: &str, to: &str, port: u16, n: usize) {
    let opts = format!("-v -a {to} -p {port} -C {n}");
    let (s, c) = pair(
        f,
        server,
        &format!("/usr/bin/rping -s {opts}"),
        client,
        &format!("/usr/bin/rping -c {opts}"),
    );
    for d in [&s, &c] {
        let pings = d.stdout.matches("ping data: rdma-ping-").count();
        assert_eq!(pings, n, "{}:\n{}\n{}", d.what, d.stdout, d.stderr);
    }
}

/// `ucmatose -c n`: n connections, their transfers and disconnections.
fn ucmatose(f: &Fabric, server: &str, client: &str, to: &str, port: u16, n: usize) {
    let (s, c) = pair(
        f,
        server,
        &format!("/usr/bin/ucmatose -b {to} -p {port} -c {n}"),
        client,
        &format!("/usr/bin/ucmatose -s {to} -p {port} -c {n}"),
    );
    s.completed();
    c.completed();
    assert!(s.stdout.contains("disconnected"), "{}", s.stdout);
}

/// rping, ucmatose (8 connections), udaddy (SIDR), rdma_server/rdma_client and perftest's
/// `ib_send_bw -R` between the two hosts of a back-to-back fabric; a destination nobody has is an ADDR_ERROR that says
/// why, after the program's timeout.
#[test]
fn rdmacm_utils_and_perftest_connect_over_the_ib_fabric() {
    if !can_run() || !have("rping", "rdmacm-utils") || !have("ib_send_bw", "perftest") {
        return;
    }
    let (a, b) = ("test213", "test214");
    let f = back_to_back("rdmacm-ib-a", "192.168.30");
    let to = "192.168.30.3";
    rping(&f, b, a, to, 7471, 100);
    ucmatose(&f, b, a, to, 7472, 8);

    let (s, c) = pair(
        &f,
        b,
        &format!("/usr/bin/udaddy -b {to}"),
        a,
        &format!("/usr/bin/udaddy -s {to}"),
    );
    for d in [&s, &c] {
        d.completed();
        assert!(d.stdout.contains("data transfers complete"), "{}", d.stdout);
    }

    // Synchronous ids and endpoints (rdma_getaddrinfo, rdma_create_ep).
    let (s, c) = pair(
        &f,
        b,
        &format!("/usr/bin/rdma_server -s {to} -p 7473"),
        a,
        &format!("/usr/bin/rdma_client -s {to} -p 7473"),
    );
    for d in [&s, &c] {
        assert!(d.stdout.contains("end 0"), "{}:\n{}", d.what, d.stdout);
    }

    let bw = "/usr/bin/ib_send_bw -R -d mlx4_0 -p 7474 -n 500";
    let (s, c) = pair(&f, b, bw, a, &format!("{bw} {to}"));
    dropin::rdma_cm_perftest_ran(&s, &c, 500.0);
    for d in [&s, &c] {
        assert!(d.stdout.contains("Link type       : IB"), "{}", d.stdout);
    }

    // Nobody has 192.168.30.9: IPoIB ARP goes unanswered, and rping hears ADDR_ERROR after
    // its 2 s timeout, with softib saying what it waited for.
    let t0 = Instant::now();
    let c = start(&f, a, "/usr/bin/rping -c -a 192.168.30.9 -p 7475 -C 1").wait();
    assert!(!c.status.success(), "{}: {}", c.what, c.stdout);
    let said = format!("{}{}", c.stdout, c.stderr);
    assert!(
        said.contains("RDMA_CM_EVENT_ADDR_ERROR") && said.contains("did not answer IPoIB ARP"),
        "{said}"
    );
    assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
}

/// mckey: both ends join 239.77.0.9 through the SA (an MCMemberRecord creating the group,
/// MGID ff12:4001:ffff::f4d:9 by the kernel's mapping with rdma_cm's signature); the SM puts
/// the MLID in the forwarding tables and the sender's 10 datagrams reach the receiver's QP.
/// When both have left, the SA has deleted the group.
#[test]
fn mckey_joins_a_group_through_the_sa() {
    if !can_run() || !have("mckey", "rdmacm-utils") {
        return;
    }
    let (a, b) = ("test213", "test214");
    let f = back_to_back("rdmacm-ib-mc", "192.168.31");
    let mgid = "ff12:4001:ffff::f4d:9";
    // Asked every 200 ms at most: each question is a process on the host.
    let groups = || {
        std::thread::sleep(Duration::from_millis(200));
        text(&f.exec(b, &words("softib saquery -g")).stdout)
    };
    let receiver = start(&f, b, "/usr/bin/mckey -m 239.77.0.9 -b 192.168.31.3 -C 10");
    // mckey's sender does not wait for receivers: it starts once the receiver has joined.
    wait_until(
        "the receiver's join at the SA",
        Duration::from_secs(20),
        || groups().contains(mgid),
    );
    let sender = start(
        &f,
        a,
        "/usr/bin/mckey -m 239.77.0.9 -b 192.168.31.2 -s -C 10",
    )
    .wait();
    let receiver = receiver.wait();
    for d in [&sender, &receiver] {
        d.ok();
        d.loaded_ours_lib("librdmacm.so.1");
        d.completed();
        assert!(
            d.stdout.contains(&format!("joined dgid: {mgid}")),
            "{}",
            d.stdout
        );
    }
    assert!(
        receiver.stdout.contains("data transfers complete"),
        "{}",
        receiver.stdout
    );
    wait_until(
        "the SA to delete the group",
        Duration::from_secs(10),
        || !groups().contains(mgid),
    );
}

/// Through switches (topoB): rping and ucmatose from node1 to node4, whose path the SA routes
/// across the fabric's switches.
#[test]
fn rping_and_ucmatose_through_switches() {
    if !can_run() || !have("rping", "rdmacm-utils") {
        return;
    }
    let hosts = [
        ("node1", "10.31.0.1/24"),
        ("node2", "10.31.0.2/24"),
        ("node3", "10.31.0.3/24"),
        ("node4", "10.31.0.4/24"),
    ];
    let f = fabric_with_ib0("topologies/topoB.net", "rdmacm-ib-b", &hosts);
    rping(&f, "node4", "node1", "10.31.0.4", 7476, 20);
    ucmatose(&f, "node4", "node1", "10.31.0.4", 7477, 2);
}
