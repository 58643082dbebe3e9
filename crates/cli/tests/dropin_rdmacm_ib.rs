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

use common::{wait_status, Fabric};
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
        f.ok(
            h,
            &[
                "softib", "ipoib", "add", "ib0", "--dev", "mlx4_0", "--port", "1",
            ],
        );
        f.ok(h, &["ip", "addr", "add", addr, "dev", "ib0"]);
        f.ok(h, &["ip", "link", "set", "ib0", "up"]);
    }
    f
}

/// Runs `server` on `s_node`, then `client` on `c_node` until it no longer hears that nobody
/// listens (rdma_cm clients do not retry a REJ, and the server may not listen yet), for at
/// most 30 s; waits for both. Both must have loaded softib's librdmacm.
fn pair(f: &Fabric, s_node: &str, server: &[&str], c_node: &str, client: &[&str]) -> (Done, Done) {
    let s = Run::on_fabric(&f.dir, s_node, server);
    let t0 = Instant::now();
    let c = loop {
        std::thread::sleep(Duration::from_millis(300));
        let c = Run::on_fabric(&f.dir, c_node, client).wait();
        let said = format!("{}{}", c.stdout, c.stderr);
        // REJ InvalidServiceID (8); for UD, SIDR_REP "unsupported ServiceID" (1).
        let nobody = said.contains("REJECTED; error: 8")
            || said.contains("REJECTED, error 8")
            || said.contains("REJECTED, error: 8")
            || said.contains("UNREACHABLE, error: 1")
            || said.contains("rdma_connect: Connection refused");
        if c.status.success() || !nobody || t0.elapsed() > Duration::from_secs(30) {
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

fn complete(d: &Done) {
    assert!(
        d.stdout.contains("test complete") && d.stdout.contains("return status 0"),
        "{}:\n{}\n{}",
        d.what,
        d.stdout,
        d.stderr
    );
}

/// rping, ucmatose (8 connections), udaddy (SIDR) and perftest's `ib_send_bw -R` between the
/// two hosts of a back-to-back fabric; a destination nobody has is an ADDR_ERROR that says
/// why, after the program's timeout.
#[test]
fn rdmacm_utils_and_perftest_connect_over_the_ib_fabric() {
    if !can_run() || !have("rping", "rdmacm-utils") || !have("ib_send_bw", "perftest") {
        return;
    }
    let (a, b) = ("test213", "test214");
    let f = fabric_with_ib0(
        "topologies/topoA.net",
        "rdmacm-ib-a",
        &[(a, "192.168.30.2/24"), (b, "192.168.30.3/24")],
    );
    let to = "192.168.30.3";

    let (s, c) = pair(
        &f,
        b,
        &[
            "/usr/bin/rping",
            "-s",
            "-v",
            "-a",
            to,
            "-p",
            "7471",
            "-C",
            "100",
        ],
        a,
        &[
            "/usr/bin/rping",
            "-c",
            "-v",
            "-a",
            to,
            "-p",
            "7471",
            "-C",
            "100",
        ],
    );
    for d in [&s, &c] {
        let pings = d.stdout.matches("ping data: rdma-ping-").count();
        assert_eq!(pings, 100, "{}:\n{}\n{}", d.what, d.stdout, d.stderr);
    }

    let (s, c) = pair(
        &f,
        b,
        &["/usr/bin/ucmatose", "-b", to, "-p", "7472", "-c", "8"],
        a,
        &["/usr/bin/ucmatose", "-s", to, "-p", "7472", "-c", "8"],
    );
    complete(&s);
    complete(&c);
    assert!(s.stdout.contains("disconnected"), "{}", s.stdout);

    let (s, c) = pair(
        &f,
        b,
        &["/usr/bin/udaddy", "-b", to],
        a,
        &["/usr/bin/udaddy", "-s", to],
    );
    for d in [&s, &c] {
        complete(d);
        assert!(d.stdout.contains("data transfers complete"), "{}", d.stdout);
    }

    let (s, c) = pair(
        &f,
        b,
        &[
            "/usr/bin/ib_send_bw",
            "-R",
            "-d",
            "mlx4_0",
            "-p",
            "7474",
            "-n",
            "500",
        ],
        a,
        &[
            "/usr/bin/ib_send_bw",
            "-R",
            "-d",
            "mlx4_0",
            "-p",
            "7474",
            "-n",
            "500",
            to,
        ],
    );
    for d in [&s, &c] {
        assert!(
            d.stdout.contains("Data ex. method : rdma_cm")
                && d.stdout.contains("Link type       : IB"),
            "{}:\n{}\n{}",
            d.what,
            d.stdout,
            d.stderr
        );
    }
    let r = dropin::perftest_result(&c.stdout).unwrap_or_default();
    assert!(
        r.len() >= 2 && r[1] == 500.0,
        "{}: no result\n{}",
        c.what,
        c.stdout
    );

    // Nobody has 192.168.30.9: IPoIB ARP goes unanswered, and rping hears ADDR_ERROR after
    // its 2 s timeout, with softib saying what it waited for.
    let t0 = Instant::now();
    let c = Run::on_fabric(
        &f.dir,
        a,
        &[
            "/usr/bin/rping",
            "-c",
            "-a",
            "192.168.30.9",
            "-p",
            "7475",
            "-C",
            "1",
        ],
    )
    .wait();
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
/// the MLID in the switches' tables and the sender's 10 datagrams reach the receiver's QP.
#[test]
fn mckey_joins_a_group_through_the_sa() {
    if !can_run() || !have("mckey", "rdmacm-utils") {
        return;
    }
    let (a, b) = ("test213", "test214");
    let f = fabric_with_ib0(
        "topologies/topoA.net",
        "rdmacm-ib-mc",
        &[(a, "192.168.31.2/24"), (b, "192.168.31.3/24")],
    );
    let group = "239.77.0.9";
    let receiver = Run::on_fabric(
        &f.dir,
        b,
        &[
            "/usr/bin/mckey",
            "-m",
            group,
            "-b",
            "192.168.31.3",
            "-C",
            "10",
        ],
    );
    // The receiver's QP must be attached before the sender sends: mckey's sender does not
    // wait. The SA knows the group once the receiver joined.
    let t0 = Instant::now();
    loop {
        let out = f.exec(b, &["softib", "saquery", "-g"]);
        let said = common::text(&out.stdout);
        if said.contains("ff12:4001:ffff::f4d:9")
            || said.contains("ff12:4001:ffff:0000:0000:0000:0f4d:0009")
        {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the receiver did not join in 20 s; saquery -g:\n{said}\n{}",
            common::text(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let sender = Run::on_fabric(
        &f.dir,
        a,
        &[
            "/usr/bin/mckey",
            "-m",
            group,
            "-b",
            "192.168.31.2",
            "-s",
            "-C",
            "10",
        ],
    )
    .wait();
    let receiver = receiver.wait();
    for d in [&sender, &receiver] {
        d.ok();
        d.loaded_ours_lib("librdmacm.so.1");
        complete(d);
        assert!(
            d.stdout.contains("joined dgid: ff12:4001:ffff::f4d:9"),
            "{}",
            d.stdout
        );
    }
    assert!(
        receiver.stdout.contains("data transfers complete"),
        "{}",
        receiver.stdout
    );
}

/// Through switches (topoB): rping and ucmatose from node1 to node4, whose path the SA
/// routes across the fabric's switches.
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
    let to = "10.31.0.4";
    let (s, c) = pair(
        &f,
        "node4",
        &[
            "/usr/bin/rping",
            "-s",
            "-v",
            "-a",
            to,
            "-p",
            "7476",
            "-C",
            "20",
        ],
        "node1",
        &[
            "/usr/bin/rping",
            "-c",
            "-v",
            "-a",
            to,
            "-p",
            "7476",
            "-C",
            "20",
        ],
    );
    for d in [&s, &c] {
        assert_eq!(
            d.stdout.matches("ping data: rdma-ping-").count(),
            20,
            "{}",
            d.stdout
        );
    }
    let (s, c) = pair(
        &f,
        "node4",
        &["/usr/bin/ucmatose", "-b", to, "-p", "7477", "-c", "2"],
        "node1",
        &["/usr/bin/ucmatose", "-s", to, "-p", "7477", "-c", "2"],
    );
    complete(&s);
    complete(&c);
}
