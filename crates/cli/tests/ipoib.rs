//! IPoIB end to end: a fabric with a network namespace per host (`fabric up --netns`), an
//! `ib0` on each host (`softib ipoib add`), addresses set with `ip`, then `ping` and a TCP
//! transfer with a checksum across the softib fabric — back to back and through switches —
//! and a pulled cable that stops the ping until the SM has swept the port back; and the same
//! through switches when Debian's opensm is the SM (its SA serves the joins), with Debian's
//! perftest across it.
//!
//! Needs root (namespaces, TUN), `ip`, `ping` and `python3`; without them the tests say so and
//! pass, except under `CI=true`, where a missing requirement fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
mod dropin;
use common::{text, wait_status, Fabric, SOFTIB};

fn can_run() -> bool {
    let root = rustix::process::geteuid().is_root();
    let tun = std::path::Path::new("/dev/net/tun").exists();
    let tools = ["ip", "ping", "python3"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if root && tun && tools {
        return true;
    }
    let why = format!("root: {root}, /dev/net/tun: {tun}, ip/ping/python3: {tools}");
    assert!(
        std::env::var_os("CI").is_none(),
        "IPoIB tests cannot run under CI ({why})"
    );
    eprintln!("skipping: IPoIB tests need root, TUN, ip, ping and python3 ({why})");
    false
}

/// Adds `ib0` on each `(host, address)` and brings it up.
fn ib0(f: &Fabric, hosts: &[(&str, &str)]) {
    for (h, addr) in hosts {
        let out = f.ok(
            h,
            &[
                "softib", "ipoib", "add", "ib0", "--dev", "mlx4_0", "--port", "1",
            ],
        );
        assert!(out.contains("ib0: IPoIB on mlx4_0 port 1"), "{out}");
        f.ok(h, &["ip", "addr", "add", addr, "dev", "ib0"]);
        f.ok(h, &["ip", "link", "set", "ib0", "up"]);
    }
}

/// `ib0` on topoB's node1 … node4 with the addresses `NET.1` … `NET.4`.
fn ib0_on_topo_b(f: &Fabric, net: &str) {
    let hosts: Vec<(String, String)> = (1..=4)
        .map(|i| (format!("node{i}"), format!("{net}.{i}/24")))
        .collect();
    let pairs: Vec<(&str, &str)> = hosts
        .iter()
        .map(|(h, a)| (h.as_str(), a.as_str()))
        .collect();
    ib0(f, &pairs);
}

fn ping(f: &Fabric, from: &str, to: &str, count: u32) -> bool {
    let out = f.exec(
        from,
        &["ping", "-c", &count.to_string(), "-W", "2", "-i", "0.2", to],
    );
    out.status.success()
}

fn ping_until(f: &Fabric, from: &str, to: &str, timeout: Duration) {
    let t0 = Instant::now();
    while !ping(f, from, to, 1) {
        let show = f.exec(from, &["softib", "ipoib", "show"]);
        assert!(
            t0.elapsed() < timeout,
            "{from} cannot ping {to} after {timeout:?}:\n{}\n{}\n{}",
            text(&show.stdout),
            f.status(),
            f.log()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A TCP transfer of `len` pseudo-random bytes from `from` to `to_addr` (a server on `to`),
/// checked by SHA-256 on both ends.
fn tcp_transfer(f: &Fabric, from: &str, to: &str, to_addr: &str, len: usize) {
    let server = format!(
        "import socket,hashlib\n\
         s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n\
         s.bind(('{to_addr}',5201)); s.listen(1); s.settimeout(30)\n\
         c,_=s.accept(); c.settimeout(30); h=hashlib.sha256(); n=0\n\
         while True:\n    b=c.recv(65536)\n    if not b: break\n    h.update(b); n+=len(b)\n\
         print(n, h.hexdigest())\n"
    );
    let client = format!(
        "import socket,hashlib,random\n\
         random.seed(7); d=random.randbytes({len})\n\
         s=socket.create_connection(('{to_addr}',5201),timeout=30); s.sendall(d); s.close()\n\
         print(len(d), hashlib.sha256(d).hexdigest())\n"
    );
    let srv = Command::new(SOFTIB)
        .args(["fabric", "exec", to, "--dir"])
        .arg(&f.dir)
        .args(["--", "python3", "-c", &server])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The server listens within a moment; the client retries its connect meanwhile.
    let t0 = Instant::now();
    let sent = loop {
        std::thread::sleep(Duration::from_millis(300));
        let out = f.exec(from, &["python3", "-c", &client]);
        if out.status.success() {
            break text(&out.stdout);
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "TCP client failed: {}",
            text(&out.stderr)
        );
    };
    let got = srv.wait_with_output().unwrap();
    assert!(got.status.success(), "TCP server: {}", text(&got.stderr));
    assert_eq!(text(&got.stdout).trim(), sent.trim(), "bytes differ");
    assert!(sent.starts_with(&format!("{len} ")), "{sent}");
}

#[test]
fn ping_and_tcp_across_a_back_to_back_fabric_and_a_pulled_cable() {
    if !can_run() {
        return;
    }
    // The SM runs on port 1's subnet only: ib0 lives there.
    let f = Fabric::up("topologies/topoA.net", "ipoib-a", &["--netns"]);
    wait_status(
        &f,
        "port 1 Active on both hosts",
        Duration::from_secs(20),
        |s| s.matches("port 1 Active").count() == 2,
    );
    ib0(
        &f,
        &[("test213", "192.168.0.2/24"), ("test214", "192.168.0.3/24")],
    );
    ping_until(&f, "test213", "192.168.0.3", Duration::from_secs(20));
    assert!(ping(&f, "test214", "192.168.0.2", 3), "ping back");
    tcp_transfer(&f, "test213", "test214", "192.168.0.3", 4 << 20);

    // The hosts really are apart: without the fabric, no route.
    let show = f.ok("test213", &["softib", "ipoib", "show"]);
    assert!(show.contains("ib0: mlx4_0 port 1 pkey 0xffff up"), "{show}");

    // Pull test214's cable: the ping fails; plug it back: the SM sweeps the port Active and
    // the ping works again.
    let cable = |action: &str| {
        let out = Command::new(SOFTIB)
            .args(["fabric", "cable", "test214:1", action, "--dir"])
            .arg(&f.dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    };
    cable("pull");
    wait_status(&f, "test214 port 1 down", Duration::from_secs(10), |s| {
        s.lines()
            .any(|l| l.starts_with("test214") && !l.contains("port 1 Active"))
    });
    assert!(
        !ping(&f, "test213", "192.168.0.3", 2),
        "ping through a pulled cable"
    );
    cable("plug");
    ping_until(&f, "test213", "192.168.0.3", Duration::from_secs(30));
}

#[test]
fn ping_and_tcp_through_switches() {
    if !can_run() {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "ipoib-b", &["--netns"]);
    f.wait_all_active(4, Duration::from_secs(30));
    ib0_on_topo_b(&f, "10.9.0");
    for to in 2..=4 {
        ping_until(
            &f,
            "node1",
            &format!("10.9.0.{to}"),
            Duration::from_secs(20),
        );
    }
    tcp_transfer(&f, "node4", "node1", "10.9.0.1", 1 << 20);
}

#[test]
fn ping_tcp_and_debians_perftest_through_switches_the_real_opensm_manages() {
    if !can_run()
        || !dropin::have("/usr/sbin/opensm", "opensm")
        || !dropin::have("/usr/sbin/saquery", "infiniband-diags")
        || !dropin::have("/usr/bin/ib_send_bw", "perftest")
    {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "ipoib-osm", &["--netns", "--no-sm"]);
    // Debian's opensm on node1, through the drop-in libibumad.so.3: its SA serves the
    // broadcast group's joins (MCMemberRecord) and the PathRecords of ib0's neighbours.
    let _sm = common::Kill(
        Command::new(SOFTIB)
            .args(["fabric", "exec", "node1", "--dir"])
            .arg(&f.dir)
            .args(["--", "/usr/sbin/opensm", "-g", "0xe41d2d0300c00001", "-f"])
            .arg(f.dir.join("real-opensm.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    f.wait_all_active(4, Duration::from_secs(30));
    ib0_on_topo_b(&f, "10.8.0");
    for to in 2..=4 {
        ping_until(
            &f,
            "node1",
            &format!("10.8.0.{to}"),
            Duration::from_secs(30),
        );
    }
    tcp_transfer(&f, "node4", "node1", "10.8.0.1", 1 << 20);
    // Each ib0 a full member of opensm's broadcast group (shown with the SM_Key, as opensm
    // hides other ports' memberships from untrusted queries), and the group's MFT entry on
    // both switches reaches their two hosts and the other switch.
    let members = f.ok("node2", &["/usr/sbin/saquery", "--smkey", "1", "-m"]);
    for gid in ["c0:1\n", "c0:11\n", "c0:21\n", "c0:31\n"] {
        assert!(
            members.contains(&format!("PortGid.................fe80::e41d:2d03:{gid}")),
            "{gid} not a member:\n{members}"
        );
    }
    assert_eq!(
        members.matches("ScopeState..............0x21").count(),
        4,
        "{members}"
    );
    for sw in ["5", "6"] {
        let mft = f.ok("node2", &["/usr/sbin/ibroute", "-M", sw]);
        assert!(
            mft.contains("0xc000        x x                                                                 x   \n"),
            "ibroute -M {sw}:\n{mft}"
        );
    }
    // Debian's perftest through the drop-in libibverbs.so.1, its exchange over ib0: node4
    // (under sw2) to node1 (under sw1), LIDs the real opensm gave.
    let srv = Command::new(SOFTIB)
        .args(["fabric", "exec", "node1", "--dir"])
        .arg(&f.dir)
        .args(["--", "/usr/bin/ib_send_bw", "-n", "100", "-p", "18701"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(300));
        let out = f.exec(
            "node4",
            &[
                "/usr/bin/ib_send_bw",
                "-n",
                "100",
                "-p",
                "18701",
                "10.8.0.1",
            ],
        );
        if out.status.success() || t0.elapsed() > Duration::from_secs(20) {
            break out;
        }
    };
    let server = srv.wait_with_output().unwrap();
    let said = text(&client.stdout);
    assert!(
        client.status.success() && server.status.success(),
        "ib_send_bw: {said}{}\nserver: {}{}",
        text(&client.stderr),
        text(&server.stdout),
        text(&server.stderr)
    );
    assert!(
        said.contains(" local address: LID 0x04 ")
            && said.contains(" remote address: LID 0x01 ")
            && said.contains(" 65536      100 "),
        "{said}"
    );
}
