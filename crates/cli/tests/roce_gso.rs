//! RoCEv2 between two daemons in two network namespaces joined by a veth pair that cannot
//! segment (`gso_max_segs 1`): every UDP GSO run a daemon sends is cut into datagrams by the
//! kernel in software, which numbers their IPv4 Identifications 0, 1, 2, ... — and the ICRC
//! covers the Identification. A capture on the veth proves every datagram on the wire carries
//! the ICRC of its real headers (what the Linux rxe driver checks), and UC transfers — which do
//! not retransmit — prove the receiving daemon accepts every segment.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{all_icrcs_valid, interrupt, text, tshark, wait_until, Kill, SOFTIB};

/// Root with `ip` and tshark; in CI all of them are required.
fn can_run() -> bool {
    let ci = std::env::var_os("CI").is_some();
    let root = rustix::process::geteuid().is_root();
    let ip = Command::new("ip").arg("-V").output().is_ok();
    let tshark = Command::new("tshark").arg("-v").output().is_ok();
    if root && ip && tshark {
        return true;
    }
    assert!(!ci, "CI runs this as root with ip and tshark installed");
    eprintln!("SKIPPED: needs root, ip and tshark (root={root} ip={ip} tshark={tshark})");
    false
}

fn sh(args: &[&str]) -> Output {
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// Two namespaces and the veth between them; removed on drop.
struct Net {
    ns: [String; 2],
}

impl Net {
    fn new() -> Net {
        let id = std::process::id() % 100_000;
        let ns = [format!("sgso{id}a"), format!("sgso{id}b")];
        let dev = [format!("vg{id}a"), format!("vg{id}b")];
        let net = Net { ns: ns.clone() };
        for n in &ns {
            sh(&["ip", "netns", "add", n]);
        }
        sh(&[
            "ip", "link", "add", &dev[0], "netns", &ns[0], "type", "veth", "peer", "name", &dev[1],
            "netns", &ns[1],
        ]);
        for i in 0..2 {
            let addr = format!("10.213.0.{}/24", i + 1);
            sh(&["ip", "-n", &ns[i], "addr", "add", &addr, "dev", &dev[i]]);
            // No segmentation offload: the kernel cuts every GSO run itself, before the
            // capture point, numbering the Identifications.
            sh(&[
                "ip",
                "-n",
                &ns[i],
                "link",
                "set",
                &dev[i],
                "gso_max_segs",
                "1",
            ]);
            sh(&["ip", "-n", &ns[i], "link", "set", &dev[i], "up"]);
            sh(&["ip", "-n", &ns[i], "link", "set", "lo", "up"]);
        }
        net
    }

    fn dev(&self, i: usize) -> String {
        format!("vg{}{}", std::process::id() % 100_000, ["a", "b"][i])
    }

    /// `softib ARGS` in namespace `i` with runtime directory `dir`.
    fn softib(&self, i: usize, dir: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], SOFTIB])
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdin(Stdio::null());
        c
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

fn start_daemon(net: &Net, i: usize, dir: &Path) -> Kill {
    let d = Kill(
        net.softib(i, dir, &["daemon"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("softibd did not start", Duration::from_secs(10), || {
        net.softib(i, dir, &["ibv_devices"])
            .output()
            .unwrap()
            .status
            .success()
    });
    let addr = format!("10.213.0.{}", i + 1);
    let o = net
        .softib(
            i,
            dir,
            &[
                "link",
                "add",
                "rxe0",
                "type",
                "rxe",
                "netdev",
                &net.dev(i),
                "--addr",
                &addr,
            ],
        )
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    // The port follows the veth's operational state, which the kernel reports up a moment
    // after both ends are.
    let t0 = Instant::now();
    loop {
        let st = net.softib(i, dir, &["ibstat", "rxe0"]).output().unwrap();
        if text(&st.stdout).contains("State: Active") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "rxe0 did not become Active: {}",
            text(&st.stdout)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    d
}

/// Runs a server (namespace 1) and a client (namespace 0) of `tool` with `args`; both must
/// succeed within a minute.
fn pair(net: &Net, dirs: &[PathBuf; 2], tool: &str, args: &[&str]) {
    let mut sargs = vec![tool];
    sargs.extend_from_slice(args);
    let server = net
        .softib(1, &dirs[1], &sargs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(400));
    sargs.push("10.213.0.2");
    let client = net
        .softib(0, &dirs[0], &sargs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let wait = |c: Child| {
        let t0 = Instant::now();
        let mut c = c;
        loop {
            if c.try_wait().unwrap().is_some() {
                return c.wait_with_output().unwrap();
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = c.kill();
                let o = c.wait_with_output().unwrap();
                panic!(
                    "{tool} did not finish in 60 s:\n{}{}",
                    text(&o.stdout),
                    text(&o.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let c = wait(client);
    let s = wait(server);
    assert!(
        c.status.success() && s.status.success(),
        "{tool} {args:?}\nclient: {}{}\nserver: {}{}",
        text(&c.stdout),
        text(&c.stderr),
        text(&s.stdout),
        text(&s.stderr)
    );
}

#[test]
fn gso_runs_segmented_by_the_kernel_carry_valid_icrcs_and_are_all_accepted() {
    if !can_run() {
        return;
    }
    let net = Net::new();
    let base = std::env::temp_dir().join(format!("softib-gso-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dirs = [base.join("a"), base.join("b")];
    for d in &dirs {
        std::fs::create_dir_all(d).unwrap();
    }
    let _da = start_daemon(&net, 0, &dirs[0]);
    let _db = start_daemon(&net, 1, &dirs[1]);

    // Capture on B's end: what B receives and what B sends, both after segmentation.
    let pcap = base.join("veth.pcap");
    let dev_b = net.dev(1);
    let mut cap = tshark(
        &["ip", "netns", "exec", &net.ns[1], "tshark"],
        &dev_b,
        "udp port 4791",
        &pcap,
    )
    .expect("tshark did not start capturing in the namespace");

    // UC does not retransmit: a segment the receiver refused would stop the ping-pong. 16 KiB
    // messages are 16 packets at the veth's IB MTU of 1024.
    pair(
        &net,
        &dirs,
        "ibv_uc_pingpong",
        &["-d", "rxe0", "-g", "1", "-s", "16384", "-n", "50", "-c"],
    );
    // RC SEND both ways, and READ responses (sent by B) and WRITEs (sent by A) in 64 KiB runs.
    pair(
        &net,
        &dirs,
        "ibv_rc_pingpong",
        &["-d", "rxe0", "-g", "1", "-s", "65536", "-n", "20", "-c"],
    );
    pair(
        &net,
        &dirs,
        "ib_read_bw",
        &["-d", "rxe0", "-s", "65536", "-n", "50", "-p", "18730"],
    );
    pair(
        &net,
        &dirs,
        "ib_write_bw",
        &["-d", "rxe0", "-s", "65536", "-n", "50", "-p", "18731"],
    );
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&mut cap, "tshark");

    // Every datagram on the wire has the ICRC of its real headers...
    let packets = all_icrcs_valid(&pcap);
    // ... and the runs were cut by the kernel: Identifications other than 0 went out.
    let ids = Command::new("tshark")
        .args(["-r"])
        .arg(&pcap)
        .args(["-T", "fields", "-e", "ip.id"])
        .output()
        .unwrap();
    let ids = text(&ids.stdout);
    let nonzero = ids
        .lines()
        .filter(|l| !l.is_empty() && *l != "0x0000" && *l != "0")
        .count();
    eprintln!(
        "{packets} datagrams, {nonzero} with a nonzero IPv4 Identification, every ICRC valid"
    );
    assert!(packets > 1000, "{packets} datagrams captured");
    assert!(
        nonzero > packets / 2,
        "the GSO runs were not segmented as expected: {nonzero} of {packets} nonzero"
    );
    let _ = std::fs::remove_dir_all(&base);
}
