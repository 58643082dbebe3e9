//! The drop-in libibumad.so.3 under Debian's unmodified infiniband-diags (through the real
//! libibmad and libibnetdisc) and opensm (through libosmvendor): its symbols and their
//! versions, every consumer binding to it under BIND_NOW, and the real tools on softib
//! fabrics — byte for byte what they print on ibsim where the team's goldens have it, and
//! what the topology file says elsewhere.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod dropin;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{repo, stop, text, wait_status, Fabric, SEED_GOLDENS, SOFTIB};
use dropin::{build_c, have, readelf};
use softib_fabric::Topology;

/// The directory `softib run` puts first on a program's library path (made on first use).
fn lib_dir() -> PathBuf {
    let out = Command::new(SOFTIB)
        .args(["run", "--no-dev", "--", "true"])
        .output()
        .unwrap();
    assert!(out.status.success(), "softib run: {}", text(&out.stderr));
    Path::new(SOFTIB).parent().unwrap().join("softib-lib")
}

#[test]
fn the_library_exports_its_table_and_every_consumer_binds_to_it() {
    if !have("/usr/bin/readelf", "binutils") || !have("/usr/sbin/smpquery", "infiniband-diags") {
        return;
    }
    let dir = lib_dir();
    let lib = std::fs::canonicalize(dir.join("libibumad.so.3")).unwrap();
    let d = readelf(&["-d"], &lib);
    assert!(d.contains("Library soname: [libibumad.so.3]"), "{d}");
    assert!(d.contains("BIND_NOW"), "{d}");
    let table: BTreeSet<String> = std::fs::read_to_string(repo("crates/umad/exports.txt"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("IBUMAD"))
        .map(|l| {
            let mut f = l.split_whitespace();
            let node = f.next().unwrap();
            format!("{}@@{node}", f.next().unwrap())
        })
        .collect();
    let defined: BTreeSet<String> = readelf(&["--dyn-syms", "-W"], &lib)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 8 && f[6] != "UND" && f[4] == "GLOBAL" && f[7].contains("@@"))
                .then(|| f[7].to_string())
                .filter(|s| !s.starts_with("IBUMAD"))
        })
        .collect();
    assert_eq!(
        defined, table,
        "the library's symbols are not exports.txt's"
    );
    // rdma-core's own has exactly these (39 symbols): nothing missing, nothing extra.
    let real = Path::new("/usr/lib/x86_64-linux-gnu/libibumad.so.3");
    if real.exists() {
        let theirs: BTreeSet<String> = readelf(&["--dyn-syms", "-W"], real)
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 8 && f[6] != "UND" && f[7].starts_with("umad_"))
                    .then(|| f[7].to_string())
            })
            .collect();
        assert_eq!(defined, theirs);
    }
    // Every consumer loads with ours under BIND_NOW: no symbol or version missing.
    let mut consumers: Vec<&str> = vec![
        "/usr/sbin/ibstat",
        "/usr/sbin/ibnetdiscover",
        "/usr/sbin/smpquery",
        "/usr/sbin/perfquery",
        "/usr/sbin/saquery",
        "/usr/sbin/sminfo",
        "/usr/sbin/ibping",
        "/usr/sbin/iblinkinfo",
        "/usr/sbin/ibroute",
        "/usr/lib/x86_64-linux-gnu/libibmad.so.5",
        "/usr/lib/x86_64-linux-gnu/libibnetdisc.so.5",
    ];
    for optional in [
        "/usr/sbin/opensm",
        "/usr/lib/x86_64-linux-gnu/libosmvendor.so.5",
        "/usr/bin/ib_send_bw",
    ] {
        if Path::new(optional).exists() {
            consumers.push(optional);
        }
    }
    for c in consumers {
        let out = Command::new("ldd")
            .arg("-r")
            .arg(c)
            .env("LD_LIBRARY_PATH", &dir)
            .env("LD_BIND_NOW", "1")
            .output()
            .unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "ldd -r {c}:\n{all}");
        assert!(
            !all.contains("undefined symbol") && !all.contains("not found"),
            "{c} does not bind to softib's libibumad.so.3:\n{all}"
        );
        let line = all
            .lines()
            .find(|l| l.trim_start().starts_with("libibumad.so.3 =>"))
            .unwrap_or_else(|| panic!("{c} does not load libibumad.so.3:\n{all}"));
        assert!(line.contains(&*dir.to_string_lossy()), "{c}: {line}");
    }
}

/// Runs Debian's tool `cmd[0]` (in /usr/sbin) with its arguments on `node`.
fn real(f: &Fabric, node: &str, cmd: &str) -> String {
    let mut args: Vec<String> = cmd.split(' ').map(String::from).collect();
    args[0] = format!("/usr/sbin/{}", args[0]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    f.ok(node, &args)
}

/// Waits until each node's sysfs tree (which the daemon rewrites once a second, and which
/// libibumad reads for the port's LID and SM LID) says its port knows the SM at LID 1.
fn wait_sysfs(f: &Fabric, nodes: &[&str]) {
    for node in nodes {
        let t0 = Instant::now();
        loop {
            let out = f.exec(node, &["/usr/sbin/ibstat"]);
            if text(&out.stdout).contains("SM lid: 1\n") {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "{node}'s ibstat never showed the SM:\n{}{}",
                text(&out.stdout),
                text(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn the_real_diagnostics_print_on_the_seed_fabric_what_they_print_on_ibsim() {
    if !have("/usr/sbin/smpquery", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoA.net", "umad-a", &["--sm", "test213:1"]);
    seed_fabric_as_on_ibsim(&f);
}

#[test]
fn the_real_opensm_brings_the_seed_fabric_up_as_on_ibsim() {
    if !have("/usr/sbin/smpquery", "infiniband-diags") || !have("/usr/sbin/opensm", "opensm") {
        return;
    }
    let f = Fabric::up("topologies/topoA.net", "umad-a-osm", &["--no-sm"]);
    // On port 1's subnet, as the goldens were made on ibsim.
    let _sm = real_opensm(&f, "test213", "0xe41d2d0300b47d01");
    seed_fabric_as_on_ibsim(&f);
}

/// What the real diagnostics print on topoA once an SM runs on test213's port 1: what they
/// print on ibsim after the real opensm there (the seed goldens), and what the file says.
fn seed_fabric_as_on_ibsim(f: &Fabric) {
    let t0 = Instant::now();
    while !f.status().contains("port 1 Active lid 2") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", f.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_sysfs(f, &["test213", "test214"]);
    for &(golden, cmd) in SEED_GOLDENS {
        let want = std::fs::read_to_string(repo("crates/cli/tests/golden").join(golden)).unwrap();
        assert_eq!(
            real(f, "test213", cmd),
            want,
            "Debian's `{cmd}` on softib differs from its output on ibsim ({golden})"
        );
    }
    // ibstat reads the CA through umad_get_ca: the host's device as the fabric made it.
    let ibstat = real(f, "test214", "ibstat");
    for want in [
        "CA 'mlx4_0'",
        "Number of ports: 2",
        "Node GUID: 0xe41d2d0300b47e90",
        "State: Active",
        "Base lid: 2",
        "SM lid: 1",
        "Port GUID: 0xe41d2d0300b47e91",
        "Link layer: InfiniBand",
    ] {
        assert!(ibstat.contains(want), "{want:?} not in:\n{ibstat}");
    }
    // Port 2's subnet has no SM: Initializing, no LID.
    assert!(ibstat.contains("State: Initializing"), "{ibstat}");
    let sm = real(f, "test214", "sminfo");
    assert!(
        sm.starts_with("sminfo: sm lid 1 sm guid 0xe41d2d0300b47d01, activity count"),
        "{sm}"
    );
    // PortCounters from the PMA on QP1, and a PathRecord table reassembled from RMPP.
    let pq = real(f, "test213", "perfquery 2 1");
    assert!(pq.starts_with("# Port counters: Lid 2 port 1"), "{pq}");
    let pr = real(f, "test214", "saquery -p");
    assert_eq!(pr.matches("PathRecord dump:").count(), 4, "{pr}");
    let nr = real(f, "test214", "saquery");
    assert_eq!(nr.matches("NodeRecord dump:").count(), 2, "{nr}");
}

/// `ibroute` and `ibroute -M` of topoB's two switches and `saquery -g`, run on `node`, are
/// what the real tools print on ibsim after the real opensm (`crates/cli/tests/golden/B-stock`).
fn tables_as_on_ibsim(f: &Fabric, node: &str, sm_log: &str) {
    for lid in ["5", "6"] {
        for (flag, name) in [("", ""), ("-M ", "M-")] {
            let golden = repo(&format!(
                "crates/cli/tests/golden/B-stock/postsm-ibroute-{name}{lid}.txt"
            ));
            let want = std::fs::read_to_string(golden).unwrap();
            assert_eq!(
                real(f, node, &format!("ibroute {flag}{lid}")),
                want,
                "ibroute {flag}{lid}\n{sm_log}"
            );
        }
    }
    let golden = repo("crates/cli/tests/golden/B-stock/postsm-saquery-g.txt");
    let want = std::fs::read_to_string(golden).unwrap();
    assert_eq!(real(f, node, "saquery -g"), want, "{sm_log}");
}

#[test]
fn the_real_diagnostics_find_the_switched_fabric_the_file_describes() {
    if !have("/usr/sbin/ibnetdiscover", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-b", &["--sm", "node1"]);
    f.wait_all_active(4, Duration::from_secs(20));
    wait_sysfs(&f, &["node1", "node2", "node4"]);
    let discovered = real(&f, "node4", "ibnetdiscover");
    let found = Topology::parse(&discovered).expect("ibnetdiscover's output is a topology");
    let file =
        Topology::parse(&std::fs::read_to_string(repo("topologies/topoB.net")).unwrap()).unwrap();
    let links = |t: &Topology| {
        let mut v: Vec<((u64, u8), (u64, u8))> = t
            .links()
            .map(|l| {
                let a = (t.nodes()[l.a.node].node_guid.0, l.a.port);
                let b = (t.nodes()[l.b.node].node_guid.0, l.b.port);
                (a.min(b), a.max(b))
            })
            .collect();
        v.sort();
        v
    };
    assert_eq!(links(&found), links(&file), "{discovered}");
    // The switches' forwarding tables exactly as the same tool shows opensm's on ibsim.
    tables_as_on_ibsim(&f, "node1", "");
    // Every link once from each end, Active at 4X QDR.
    let links = real(&f, "node2", "iblinkinfo");
    assert_eq!(
        links
            .matches("==( 4X          10.0 Gbps Active/  LinkUp)==>")
            .count(),
        4 + 2 * 2 + 4,
        "{links}"
    );
    let hosts = real(&f, "node2", "ibhosts");
    assert_eq!(hosts.lines().count(), 4, "{hosts}");
    let switches = real(&f, "node2", "ibswitches");
    assert_eq!(switches.lines().count(), 2, "{switches}");
    // The route from node2 to node4 crosses both switches.
    let trace = real(&f, "node2", "ibtracert 2 4");
    assert!(
        trace.contains("lid 5-5 \"MF0;sw1:SX6036/U1\"")
            && trace.contains("lid 6-6 \"MF0;sw2:SX6036/U1\"")
            && trace.ends_with("To ca {0xe41d2d0300c00030} portnum 1 lid 4-4 \"node4 mlx4_0\"\n"),
        "{trace}"
    );
    // A switch's PMA (port 0, for every port): the counters of sw1's port to sw2, which the
    // SMPs above crossed; cleared by -x -r; and ibqueryerrors reads every port of the fabric.
    let count = |pq: &str, name: &str| -> u64 {
        pq.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim_start_matches('.').parse().unwrap())
            .unwrap_or_else(|| panic!("no {name} in:\n{pq}"))
    };
    let pq = real(&f, "node2", "perfquery 5 35");
    assert!(
        pq.starts_with("# Port counters: Lid 5 port 35 (CapMask: 0x300)\n")
            && count(&pq, "PortXmitPkts:") > 0,
        "{pq}"
    );
    let all = real(&f, "node2", "perfquery -x -a 5");
    assert!(
        all.contains("PortSelect:......................255\n"),
        "{all}"
    );
    real(&f, "node2", "perfquery -x -r 5 35");
    let pq = real(&f, "node2", "perfquery -x 5 35");
    assert_eq!(count(&pq, "PortXmitData:"), 0, "{pq}");
    let errors = real(&f, "node2", "ibqueryerrors");
    assert!(
        errors.contains("## Summary: 6 nodes checked, 0 bad nodes found\n")
            && errors
                .contains("##          76 ports checked, 0 ports have errors beyond threshold\n"),
        "{errors}"
    );
}

#[test]
fn a_query_nobody_answers_times_out_and_ibping_reaches_its_server() {
    if !have("/usr/sbin/ibping", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-ping", &["--sm", "node1"]);
    f.wait_all_active(4, Duration::from_secs(20));
    wait_sysfs(&f, &["node2", "node3"]);
    // No LID 99: libibmad's retries each time out (ETIMEDOUT from the library), and the tool
    // says the query failed instead of hanging.
    let t0 = Instant::now();
    let out = f.exec(
        "node2",
        &["/usr/sbin/smpquery", "-t", "200", "nodeinfo", "99"],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(255), "{said}");
    assert!(said.contains("_do_madrpc failed; dport (Lid 99)"), "{said}");
    assert!(t0.elapsed() < Duration::from_secs(30));
    // A request of a class no agent on node3 registered (ibping's, with no server there yet)
    // is answered at once with UNSUPPORTED_METHOD_ATTR, as by the kernel's MAD layer.
    let out = f.exec("node2", &["/usr/sbin/ibping", "-d", "-c", "1", "3"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("MAD completed with error status 0xc; dport (Lid 3)")
            && !said.contains("_do_madrpc failed"),
        "{said}"
    );
    // A vendor-class agent (ibping's, with its OUI) answers requests; the client's
    // responses come back to it by TID.
    let mut server = Command::new(SOFTIB)
        .args(["fabric", "exec", "node3", "--dir"])
        .arg(&f.dir)
        .args(["--", "/usr/sbin/ibping", "-S"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pongs = String::new();
    for _ in 0..50 {
        let out = f.exec("node2", &["/usr/sbin/ibping", "-c", "3", "3"]);
        pongs = text(&out.stdout);
        if out.status.success() && pongs.matches("Pong from").count() == 3 {
            break;
        }
        // The server may not have registered yet (a ping before it did is answered
        // UNSUPPORTED by the daemon, and ibping counts it lost).
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(pongs.matches("Pong from").count(), 3, "{pongs}");
    assert!(
        pongs.contains("3 packets transmitted, 3 received, 0% packet loss"),
        "{pongs}"
    );
}

/// A program killed when the test ends, however it ends.
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Debian's opensm as `node`'s SM, logging into the fabric's directory, until stopped.
fn real_opensm(f: &Fabric, node: &str, guid: &str) -> Killed {
    opensm_with(
        f,
        node,
        "/usr/sbin/opensm",
        &["-g", guid],
        "real-opensm.log",
    )
}

/// `program` (Debian's opensm or softib's) on `node` with `args`, logging to `log` in the
/// fabric's directory, until stopped.
fn opensm_with(f: &Fabric, node: &str, program: &str, args: &[&str], log: &str) -> Killed {
    let c = Command::new(SOFTIB)
        .args(["fabric", "exec", node, "--dir"])
        .arg(&f.dir)
        .args(["--", program])
        .args(args)
        .arg("-f")
        .arg(f.dir.join(log))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Killed(Some(c))
}

/// softib's `ib_send_bw` of `iters` 64 KiB messages from `client` to a server on
/// `server` (TCP `port` on loopback for the exchange): the client's output.
fn send_bw(f: &Fabric, server: &str, client: &str, iters: &str, port: &str) -> String {
    let srv = Command::new(SOFTIB)
        .args(["fabric", "exec", server, "--dir"])
        .arg(&f.dir)
        .args(["--", "ib_send_bw", "-n", iters, "-p", port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = f.exec(
        client,
        &["ib_send_bw", "-n", iters, "-p", port, "127.0.0.1"],
    );
    let s = srv.wait_with_output().unwrap();
    assert!(
        c.status.success() && s.status.success(),
        "ib_send_bw: {}{}\n{}{}",
        text(&c.stdout),
        text(&c.stderr),
        text(&s.stdout),
        text(&s.stderr)
    );
    text(&c.stdout)
}

#[test]
fn the_real_opensm_brings_a_fabric_up_and_programs_what_it_programs_on_ibsim() {
    if !have("/usr/sbin/opensm", "opensm") || !have("/usr/sbin/ibroute", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-osm", &["--no-sm"]);
    let mut sm = real_opensm(&f, "node1", "0xe41d2d0300c00001");
    f.wait_all_active(4, Duration::from_secs(30));
    wait_sysfs(&f, &["node1", "node3"]);
    let log = || std::fs::read_to_string(f.dir.join("real-opensm.log")).unwrap_or_default();
    // The switches' unicast and multicast tables exactly as the same opensm programs them on
    // ibsim, read back by the same ibroute; its SA's IPoIB broadcast group as there.
    tables_as_on_ibsim(&f, "node3", &log());
    // PathRecords for every pair of the six LIDs (a GetTable answer sent as RMPP segments by
    // this library in opensm's process and reassembled by it in saquery's), and its own port
    // IsSM through the issm file.
    let pr = real(&f, "node2", "saquery -p");
    assert_eq!(pr.matches("PathRecord dump:").count(), 36, "{pr}");
    let issm = real(&f, "node4", "saquery -s");
    assert!(
        issm.starts_with("IsSM ports\nPortInfoRecord dump:\n\t\tEndPortLid..............1\n"),
        "{issm}\nopensm's log:\n{}",
        log()
    );
    let ibstat = real(&f, "node1", "ibstat");
    assert!(ibstat.contains("Capability mask: 0x0050c04a"), "{ibstat}");
    // softib's perftest across the fabric the real opensm manages: node4 (sw2) to node1 (sw1).
    let out = send_bw(&f, "node1", "node4", "200", "18631");
    assert!(out.contains(" 65536      200 "), "{out}");
    // A second opensm on the same port is refused its SMP agents (as the kernel refuses a
    // second agent for the same class and methods) and says so, instead of fighting the
    // first.
    let out = f.exec(
        "node1",
        &[
            "/usr/sbin/opensm",
            "-g",
            "0xe41d2d0300c00001",
            "-f",
            "/dev/null",
        ],
    );
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("an SM already runs on port 1 of this host")
            && said.contains("Perhaps another instance of OpenSM is already running"),
        "{said}"
    );
    // When it stops (SIGTERM: opensm cancels its receiver thread, which sleeps in
    // umad_recv, and joins it), its port no longer says IsSM.
    let t0 = Instant::now();
    stop(sm.0.take().unwrap());
    assert!(
        t0.elapsed() < Duration::from_secs(20),
        "opensm took long to stop"
    );
    let t0 = Instant::now();
    while real(&f, "node1", "ibstat").contains("Capability mask: 0x0050c04a") {
        assert!(t0.elapsed() < Duration::from_secs(10), "IsSM stayed set");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How `sminfo` names softib's SM on topoB's node4.
const SOFTIB_SM: &str = "sm guid 0xe41d2d0300c00031,";

/// `sminfo` on `node` (of the SM its port knows, or of `lid`) once it says `want`.
fn wait_sminfo(f: &Fabric, node: &str, lid: Option<&str>, want: &str, logs: &[&str]) -> String {
    let mut cmd = vec!["/usr/sbin/sminfo"];
    cmd.extend(lid);
    let t0 = Instant::now();
    loop {
        let out = f.exec(node, &cmd);
        let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        if said.contains(want) {
            return said;
        }
        if t0.elapsed() > Duration::from_secs(40) {
            let logs: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(f.dir.join(l)).unwrap_or_default())
                .collect();
            panic!(
                "{cmd:?} never said {want:?}; last:\n{said}\n{}",
                logs.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_real_opensm_and_softibs_sm_elect_hand_over_and_fail_over() {
    if !have("/usr/sbin/opensm", "opensm") || !have("/usr/sbin/sminfo", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-elect", &["--no-sm"]);
    const REAL_SM: &str = "sm guid 0xe41d2d0300c00001,";
    let logs = ["softib-sm.log", "real-opensm.log", "daemon.log"];
    // softib's SM (priority 0, light sweeps every 2 s) on node4 is master; its own port
    // has LID 1.
    let _softib_sm = opensm_with(&f, "node4", SOFTIB, &["opensm", "-s", "2"], logs[0]);
    f.wait_all_active(4, Duration::from_secs(30));
    let said = wait_sminfo(&f, "node2", None, "state 3 SMINFO_MASTER", &logs);
    assert!(
        said.starts_with(&format!("sminfo: sm lid 1 {SOFTIB_SM}")),
        "{said}"
    );
    // Debian's opensm with priority 3 on node1: it finds a master and stands by (the
    // master's SMInfo, sm_key and all, answered by softib's SMA); the master's next light
    // sweep sees node1's IsSM, its election finds the higher SM in Standby and hands the
    // subnet over (SubnSet(SMInfo) HANDOVER, which the SMA passes to opensm), and opensm
    // becomes master. SMInfo of opensm's port is opensm's own answer.
    let mut real = opensm_with(
        &f,
        "node1",
        "/usr/sbin/opensm",
        &["-g", "0xe41d2d0300c00001", "-p", "3"],
        logs[1],
    );
    let said = wait_sminfo(&f, "node2", None, "priority 3 state 3 SMINFO_MASTER", &logs);
    assert!(said.contains(REAL_SM), "{said}");
    let real_log = std::fs::read_to_string(f.dir.join(logs[1])).unwrap();
    let standby = real_log.find("Entering STANDBY state");
    let master = real_log.find("Entering MASTER state");
    assert!(
        standby.is_some() && master > standby,
        "opensm did not stand by first and then take the handover:\n{real_log}"
    );
    let said = wait_sminfo(
        &f,
        "node3",
        Some("1"),
        "priority 0 state 2 SMINFO_STANDBY",
        &logs,
    );
    assert!(said.contains(SOFTIB_SM), "{said}");
    // The real master stops: the standby's poll goes unanswered and it takes over.
    stop(real.0.take().unwrap());
    let said = wait_sminfo(&f, "node2", None, "priority 0 state 3 SMINFO_MASTER", &logs);
    assert!(said.contains(SOFTIB_SM), "{said}");
}

#[test]
fn the_real_opensm_hands_the_subnet_over_to_a_higher_softib_sm() {
    if !have("/usr/sbin/opensm", "opensm") || !have("/usr/sbin/sminfo", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-handover", &["--no-sm"]);
    let logs = ["real-opensm.log", "softib-sm.log", "daemon.log"];
    // Debian's opensm (priority 0, light sweeps every 2 s) on node1 brings the subnet up.
    let mut real = opensm_with(
        &f,
        "node1",
        "/usr/sbin/opensm",
        &["-g", "0xe41d2d0300c00001", "-s", "2"],
        logs[0],
    );
    f.wait_all_active(4, Duration::from_secs(30));
    wait_sminfo(&f, "node2", None, "priority 0 state 3 SMINFO_MASTER", &logs);
    // softib's SM with priority 5 starts on node4: it finds the master and stands by; its
    // port's IsSM reaches opensm as Trap 144 from node4's SMA, opensm's sweep finds the
    // higher SM in Standby and hands over (SubnSet(SMInfo) HANDOVER, which the SMA passes
    // to softib's SM), and softib's SM becomes master on it.
    let _softib = opensm_with(
        &f,
        "node4",
        SOFTIB,
        &["opensm", "-p", "5", "-s", "2"],
        logs[1],
    );
    let said = wait_sminfo(&f, "node2", None, "priority 5 state 3 SMINFO_MASTER", &logs);
    assert!(said.contains(SOFTIB_SM), "{said}");
    let said = wait_sminfo(
        &f,
        "node3",
        Some("1"),
        "priority 0 state 2 SMINFO_STANDBY",
        &logs,
    );
    assert!(said.contains("sm guid 0xe41d2d0300c00001,"), "{said}");
    let ours = std::fs::read_to_string(f.dir.join(logs[1])).unwrap();
    let at = |what: &str| ours.find(what);
    assert!(
        at("Entering STANDBY state")
            < at("Received SubnSet(SMInfo) Handover from SM 0xe41d2d0300c00001")
            && at("Received SubnSet(SMInfo) Handover").is_some()
            && at("Received SubnSet(SMInfo) Handover") < at("Entering MASTER state")
            && ours.matches("Entering DISCOVERING state").count() == 1,
        "softib's SM did not stand by and then take the handover:\n{ours}"
    );
    // opensm writes its log out when it stops.
    stop(real.0.take().unwrap());
    let theirs = std::fs::read_to_string(f.dir.join(logs[0])).unwrap();
    assert!(
        theirs.contains("num:144 (CapabilityMask")
            && theirs.contains("Producer:1 (Channel Adapter) from LID:4"),
        "opensm heard no Trap 144 from node4:\n{theirs}"
    );
}

#[test]
fn the_real_diagnostics_read_and_change_a_fabric_the_real_opensm_runs() {
    if !have("/usr/sbin/opensm", "opensm") || !have("/usr/sbin/dump_fts", "infiniband-diags") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-diags", &["--no-sm"]);
    // Light sweeps every 2 s, so that the port ibportstate enables again is brought back.
    let _sm = opensm_with(
        &f,
        "node1",
        "/usr/sbin/opensm",
        &["-g", "0xe41d2d0300c00001", "-s", "2"],
        "real-opensm.log",
    );
    f.wait_all_active(4, Duration::from_secs(30));
    wait_sysfs(&f, &["node1", "node2", "node3"]);
    // dump_fts walks the fabric (MLNXExtendedPortInfo of every Mellanox port answered, so
    // libibnetdisc has nothing to complain about) and prints each switch's LFT as opensm
    // programmed it: sw1 reaches node1 and node2 directly, the others through port 35/36.
    let out = f.exec("node2", &["/usr/sbin/dump_fts"]);
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "{}",
        text(&out.stderr)
    );
    let fts = text(&out.stdout);
    assert_eq!(fts.matches("6 valid lids dumped").count(), 2, "{fts}");
    for want in [
        "0x0001 001 : (Channel Adapter portguid 0xe41d2d0300c00001: 'node1 mlx4_0')",
        "0x0002 002 : (Channel Adapter portguid 0xe41d2d0300c00011: 'node2 mlx4_0')",
        "0x0005 000 : (Switch portguid 0x7cfe900300a0b0c0: 'MF0;sw1:SX6036/U1')",
    ] {
        assert!(fts.contains(want), "{want:?} not in:\n{fts}");
    }
    // SL2VL (every SL on VL0 until an SM maps them) and the VL arbitration tables at the
    // capacities PortInfo gives; on a switch, one row per input port.
    let sl2vl = real(&f, "node2", "smpquery sl2vl 2");
    assert!(
        sl2vl
            .ends_with("ports: in  0, out  0: | 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0| 0|\n"),
        "{sl2vl}"
    );
    let sw = real(&f, "node2", "smpquery sl2vl 5 1");
    assert_eq!(sw.matches("ports: in ").count(), 37, "{sw}");
    let vlarb = real(&f, "node2", "smpquery vlarb 5 1");
    assert!(
        vlarb.starts_with("# VLArbitration tables: Lid 5 port 1 LowCap 8 HighCap 8\n"),
        "{vlarb}"
    );
    // The SA of the real opensm: a LinkRecord from each end of the 6 cables, both switches'
    // SwitchInfo, its own SMInfo.
    let lr = real(&f, "node3", "saquery LR");
    assert_eq!(lr.matches("LinkRecord dump:").count(), 12, "{lr}");
    let swir = real(&f, "node3", "saquery SWIR");
    assert_eq!(swir.matches("SwitchInfoRecord dump:").count(), 2, "{swir}");
    let smir = real(&f, "node3", "saquery SMIR");
    assert!(
        smir.contains("GUID..................0xe41d2d0300c00001"),
        "{smir}"
    );
    // PMA counters: data sent by softib's ib_send_bw from node4 shows in node4's
    // PortXmitData; perfquery -x -r clears them (PerfSet with CounterSelect), and the PMA's
    // own MADs are not data.
    send_bw(&f, "node1", "node4", "50", "18632");
    let xmit = |pq: &str| -> u64 {
        pq.lines()
            .find_map(|l| l.strip_prefix("PortXmitData:"))
            .map(|v| v.trim_start_matches('.').parse().unwrap())
            .unwrap_or_else(|| panic!("no PortXmitData in:\n{pq}"))
    };
    let before = real(&f, "node2", "perfquery -x 4 1");
    assert!(xmit(&before) > 50 * 65536 / 4, "{before}");
    real(&f, "node2", "perfquery -x -r 4 1");
    assert_eq!(xmit(&real(&f, "node2", "perfquery -x 4 1")), 0);
    assert_eq!(xmit(&real(&f, "node2", "perfquery 4 1")), 0);
    // ibportstate disables sw1's port to node2: node2's link goes down with it; enabled
    // again, the link trains and the real opensm's next sweep makes it Active.
    let port = real(&f, "node1", "ibportstate 5 2 disable");
    assert!(
        port.contains("PhysLinkState:...................Disabled"),
        "{port}"
    );
    wait_status(&f, "node2's port down", Duration::from_secs(20), |s| {
        s.contains("node2        mlx4_0  port 1 Down")
    });
    let port = real(&f, "node1", "ibportstate 5 2 enable");
    assert!(
        port.contains("PhysLinkState:...................Polling"),
        "{port}"
    );
    wait_status(
        &f,
        "node2's port Active again",
        Duration::from_secs(30),
        |s| s.contains("node2        mlx4_0  port 1 Active"),
    );
    // The query of a switch port reads its peer too, by a directed route that starts
    // LID-routed at the switch (DrSLID node1's LID).
    let port = real(&f, "node1", "ibportstate 5 2");
    let peer = port
        .split("Peer PortInfo:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{port}"));
    assert!(
        port.contains("LinkState:.......................Active")
            && port.contains("# MLNX ext Port info: Lid 5 port 2\n")
            && peer.starts_with("# Port info: Lid 5 DR path slid 1; dlid 65535; 0,2 port 1\n")
            && peer.contains("Lid:.............................2\n"),
        "{port}"
    );
}

/// Every host reaches every other through the LFTs `dump_fts` (run on `node`) shows:
/// walking from each host's switch by the table's port and the topology's cables, each
/// destination LID ends at the host the table names for it, in at most `max_hops` switches.
fn every_pair_routed(f: &Fabric, node: &str, t: &Topology, max_hops: usize) -> Result<(), String> {
    let out = f.exec(node, &["/usr/sbin/dump_fts"]);
    let fts = text(&out.stdout);
    if !out.status.success() {
        return Err(format!("dump_fts: {}{fts}", text(&out.stderr)));
    }
    // Switch description → (LID → out port); LID → the CA description it belongs to.
    let mut lfts: std::collections::BTreeMap<String, std::collections::BTreeMap<u16, u8>> =
        Default::default();
    let mut hosts: std::collections::BTreeMap<u16, String> = Default::default();
    let mut current = None;
    for line in fts.lines() {
        if line.starts_with("Unicast lids") {
            let name = line
                .rsplit_once(" (")
                .map(|(_, n)| n.trim_end_matches("):"));
            current = name.map(str::to_string);
            lfts.entry(current.clone().unwrap()).or_default();
        } else if let (Some(sw), Some(lid)) = (&current, line.strip_prefix("0x")) {
            let lid = u16::from_str_radix(&lid[..4], 16).unwrap();
            let port: u8 = line[7..10].parse().unwrap();
            lfts.get_mut(sw).unwrap().insert(lid, port);
            if let Some(ca) = line.split("Channel Adapter portguid ").nth(1) {
                let name = ca.split_once(": '").unwrap().1.trim_end_matches("')");
                hosts.insert(lid, name.to_string());
            }
        }
    }
    let nodes = t.nodes();
    let hosts_in_file = nodes.iter().filter(|n| n.id.starts_with("host")).count();
    if lfts.len() != nodes.len() - hosts_in_file || hosts.len() != hosts_in_file {
        return Err(format!("not every switch or host in:\n{fts}"));
    }
    let peer = |name: &str, port: u8| -> Option<(String, u8)> {
        t.links().find_map(|l| {
            let end = |e: softib_fabric::Endpoint| (nodes[e.node].description.clone(), e.port);
            let (a, b) = (end(l.a), end(l.b));
            if (a.0.as_str(), a.1) == (name, port) {
                Some(b)
            } else if (b.0.as_str(), b.1) == (name, port) {
                Some(a)
            } else {
                None
            }
        })
    };
    for src in hosts.values() {
        let (first, _) = peer(src, 1).ok_or(format!("{src} is not cabled"))?;
        for (&dlid, dst) in hosts.iter().filter(|(_, d)| *d != src) {
            let mut at = first.clone();
            let mut hops = 0;
            loop {
                let port = lfts.get(&at).and_then(|t| t.get(&dlid)).copied();
                let Some((n, _)) = port.and_then(|p| peer(&at, p)) else {
                    return Err(format!(
                        "{src} → {dst} (LID {dlid}): {at} has no way on ({port:?})\n{fts}"
                    ));
                };
                hops += 1;
                if &n == dst {
                    break;
                }
                if !lfts.contains_key(&n) || hops >= max_hops {
                    return Err(format!(
                        "{src} → {dst} (LID {dlid}) reaches {n} after {hops} switches\n{fts}"
                    ));
                }
                at = n;
            }
        }
    }
    Ok(())
}

#[test]
fn the_real_opensm_routes_a_fat_tree_with_ftree_and_updn() {
    if !have("/usr/sbin/opensm", "opensm") || !have("/usr/sbin/dump_fts", "infiniband-diags") {
        return;
    }
    // `softib fabric gen --hosts 24 fat-tree`: two leaves of 12 hosts under one spine.
    let dir = std::env::temp_dir().join(format!("softib-it-ft24-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ft24.net");
    let out = Command::new(SOFTIB)
        .args(["fabric", "gen", "--hosts", "24", "fat-tree"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(&file, &out.stdout).unwrap();
    let t = Topology::parse(&text(&out.stdout)).unwrap();
    for engine in ["ftree", "updn"] {
        // A fabric of its own each: tables another run left behind prove nothing.
        let f = Fabric::up(
            file.to_str().unwrap(),
            &format!("umad-{engine}"),
            &["--no-sm"],
        );
        let log = format!("opensm-{engine}.log");
        let mut sm = opensm_with(
            &f,
            "host1",
            "/usr/sbin/opensm",
            // VERBOSE too: the log then says which engine built the tables.
            &["-g", "0x0000000000200001", "-R", engine, "-D", "0x07"],
            &log,
        );
        f.wait_all_active(24, Duration::from_secs(60));
        let t0 = Instant::now();
        while let Err(e) = every_pair_routed(&f, "host5", &t, 3) {
            assert!(t0.elapsed() < Duration::from_secs(30), "-R {engine}: {e}");
            std::thread::sleep(Duration::from_millis(500));
        }
        // opensm writes its log out when it stops: the engine ran, did not fall back to
        // minhop, and the subnet came up.
        stop(sm.0.take().unwrap());
        let sm_log = std::fs::read_to_string(f.dir.join(&log)).unwrap();
        assert!(
            sm_log.contains(&format!(
                "building routing with '{engine}' routing algorithm"
            )) && !sm_log.contains("building routing with 'minhop'")
                && sm_log.contains("SUBNET UP"),
            "{sm_log}"
        );
        if let Err(e) = every_pair_routed(&f, "host5", &t, 3) {
            panic!("-R {engine}, after SUBNET UP: {e}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `softib fabric cable END ACTION` on the fabric `f`.
fn cable(f: &Fabric, end: &str, action: &str) {
    let out = Command::new(SOFTIB)
        .args(["fabric", "cable", end, action, "--dir"])
        .arg(&f.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

#[test]
fn a_cable_pulled_and_put_back_is_trapped_and_the_real_opensm_sweeps_on_it() {
    if !have("/usr/sbin/opensm", "opensm") {
        return;
    }
    let f = Fabric::up("topologies/topoB.net", "umad-trap", &["--no-sm"]);
    // -s 0: no periodic sweeps at all. Only the switches' traps can make opensm look again.
    let mut sm = opensm_with(
        &f,
        "node1",
        "/usr/sbin/opensm",
        &["-g", "0xe41d2d0300c00001", "-s", "0"],
        "real-opensm.log",
    );
    f.wait_all_active(4, Duration::from_secs(30));
    cable(&f, "node3:1", "pull");
    wait_status(&f, "node3's port down", Duration::from_secs(20), |s| {
        s.contains("node3        mlx4_0  port 1 Down")
    });
    cable(&f, "node3:1", "plug");
    // The link trains to Init; sw2's Trap 128 makes opensm sweep and bring it Active.
    wait_status(
        &f,
        "node3's port Active again",
        Duration::from_secs(30),
        |s| s.contains("node3        mlx4_0  port 1 Active lid 3 sm 1"),
    );
    stop(sm.0.take().unwrap());
    let log = std::fs::read_to_string(f.dir.join("real-opensm.log")).unwrap();
    assert!(
        log.contains(
            "Received Generic Notice type:1 num:128 (Link state change) Producer:2 (Switch) from LID:6"
        ),
        "{log}"
    );
}

#[test]
fn a_wrong_mad_gets_the_specs_status_and_an_agent_that_never_reads_blocks_nobody() {
    if !have("/usr/include/infiniband/umad.h", "libibumad-dev")
        || !have("/usr/sbin/smpquery", "infiniband-diags")
        || !have("cc", "gcc")
    {
        return;
    }
    let work = std::env::temp_dir().join(format!("softib-it-madstatus-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let exe = build_c(&work, "mad_status", &["ibumad"]);
    let f = Fabric::up("topologies/topoB.net", "umad-bad", &["--sm", "node1"]);
    f.wait_all_active(4, Duration::from_secs(20));
    wait_sysfs(&f, &["node4"]);
    // Through the library, each wrong MAD to an SMA, a PMA (of a CA and of a switch) and
    // softib's SA is answered with the status IBA §13.4.7 (table 110) gives it, at once: none times
    // out, and a MAD shorter than its header never leaves (EINVAL, as the kernel's umad).
    let said = f.ok("node4", &[&exe, "probe", "2", "5", "1"]);
    let want = "smp-nodeinfo status 0x0000
smp-base-version status 0x0004
smp-class-version status 0x0004
smp-method status 0x0008
smp-attribute status 0x000c
pma-ca-counters status 0x0000
pma-ca-class-version status 0x0004
pma-ca-attribute status 0x000c
pma-ca-method status 0x0008
pma-switch-counters status 0x0000
pma-switch-class-version status 0x0004
pma-switch-attribute status 0x000c
pma-switch-method status 0x0008
sa-noderecord status 0x0400
sa-class-version status 0x0004
sa-attribute status 0x000c
sa-method status 0x0008
short refused 22
";
    assert_eq!(said, want);
    // An agent that asks 5000 times and never reads an answer (more than the daemon keeps
    // for one client): tools on the same host and port are answered all the same.
    let mut flood = Killed(Some(
        Command::new(SOFTIB)
            .args(["fabric", "exec", "node4", "--dir"])
            .arg(&f.dir)
            .args(["--", &exe, "flood", "1", "5000"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let mut line = String::new();
    {
        use std::io::BufRead;
        let out = flood.0.as_mut().unwrap().stdout.take().unwrap();
        std::io::BufReader::new(out).read_line(&mut line).unwrap();
    }
    assert_eq!(line, "sent 5000\n");
    let pq = real(&f, "node4", "perfquery 1 1");
    assert!(pq.starts_with("# Port counters: Lid 1 port 1"), "{pq}");
    let ni = real(&f, "node4", "smpquery nodeinfo 5");
    assert!(
        ni.contains("NodeType:........................Switch"),
        "{ni}"
    );
    // The flooder is still there, and ends well when its input closes.
    let mut c = flood.0.take().unwrap();
    assert!(c.try_wait().unwrap().is_none(), "the flooder died");
    drop(c.stdin.take());
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the flooder did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&work);
}
