//! Real processes: the fabric daemon (`softib fabric up`), opensm, the diagnostics and
//! perftest, each a `softib` process talking to the daemon over its control socket.
//!
//! Every test uses its own fabric directory and its own perftest TCP port, so they can run
//! in parallel. A failure prints the daemon's log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use softib_fabric::Topology;

mod common;
use common::{repo, stop, text, wait_status, Fabric, SEED_GOLDENS, SOFTIB};

/// The BW rows of a perftest table: (bytes, iterations, peak, average, msg rate).
fn bw_rows(out: &str) -> Vec<(u64, u64, f64, f64, f64)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() != 5 {
                return None;
            }
            Some((
                f[0].parse().ok()?,
                f[1].parse().ok()?,
                f[2].parse().ok()?,
                f[3].parse().ok()?,
                f[4].parse().ok()?,
            ))
        })
        .collect()
}

/// Runs a perftest server on `server` and its client on `client`; returns both outputs.
fn perftest(
    f: &Fabric,
    tool: &str,
    args: &[&str],
    server: &str,
    client: &str,
    port: u16,
) -> (String, String) {
    let p = port.to_string();
    let mut sargs = vec![tool];
    sargs.extend_from_slice(args);
    sargs.extend(["-p", &p]);
    let srv = Command::new(SOFTIB)
        .args(["fabric", "exec", server, "--dir"])
        .arg(&f.dir)
        .arg("--")
        .args(&sargs)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut cargs = sargs.clone();
    cargs.push("127.0.0.1");
    let c = f.exec(client, &cargs);
    let s = srv.wait_with_output().unwrap();
    assert!(
        c.status.success() && s.status.success(),
        "{tool} {args:?}: client {:?}\n{}{}\nserver {:?}\n{}{}\ndaemon log:\n{}",
        c.status,
        text(&c.stdout),
        text(&c.stderr),
        s.status,
        text(&s.stdout),
        text(&s.stderr),
        f.log()
    );
    (text(&s.stdout), text(&c.stdout))
}

#[test]
fn the_demo_runs_the_seed_scenario_end_to_end() {
    let out = Command::new(SOFTIB)
        .args(["demo", "--perftest-port", "18611"])
        .output()
        .unwrap();
    let o = text(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{o}\n{}",
        text(&out.stderr)
    );
    // Before the SM: Initializing, and the benchmark names the cause.
    let before_sm = o.split("Start opensm").next().unwrap();
    assert_eq!(before_sm.matches("State: Initializing").count(), 2, "{o}");
    // The benchmark's explanation goes to its stderr, which the demo passes through.
    let e = text(&out.stderr);
    assert!(
        e.contains("Port 2 of mlx4_0 is Initializing, not Active"),
        "{e}"
    );
    assert!(e.contains("no subnet manager has configured it"), "{e}");
    assert!(o.contains("Entering MASTER state"), "{o}");
    let after_sm = o.split("moved the ports to Active").nth(1).unwrap();
    assert!(after_sm.matches("State: Active").count() >= 2, "{o}");
    assert!(
        o.contains("Ca\t: 0xe41d2d0300b47e90 ports 2 \"test214 mlx4_0\""),
        "{o}"
    );
    assert!(
        o.contains("Ca\t: 0xe41d2d0300b47d00 ports 2 \"test213 mlx4_0\""),
        "{o}"
    );
    // UD -a: every power of two from 2 to the 2048-byte MTU, on both sides.
    assert!(o.contains(" Max msg size in UD is MTU 2048"), "{o}");
    let rows = bw_rows(&o);
    // The client's table, then the server's: each every power of two from 2 to 2048.
    let sweep: Vec<u64> = (1..=11).map(|p| 1u64 << p).collect();
    let ud: Vec<u64> = rows.iter().map(|r| r.0).take(22).collect();
    assert_eq!(ud, [sweep.clone(), sweep].concat(), "{o}");
    assert!(
        o.contains("RDMA_Write BW Test") && o.contains("RDMA_Write Latency Test"),
        "{o}"
    );
    assert!(
        rows.iter()
            .any(|r| r.0 == 65536 && r.1 == 5000 && r.3 > 0.0),
        "{o}"
    );
}

#[test]
fn switched_topology_comes_up_and_ibnetdiscover_matches_the_file() {
    let f = Fabric::up("topologies/topoB.net", "topob", &["--sm", "node1"]);
    f.wait_all_active(4, Duration::from_secs(20));
    let discovered = f.ok("node4", &["ibnetdiscover"]);
    let found =
        Topology::parse(&discovered).expect("ibnetdiscover output is a topology softib reads");
    let file =
        Topology::parse(&std::fs::read_to_string(repo("topologies/topoB.net")).unwrap()).unwrap();
    let guids = |t: &Topology| {
        let mut v: Vec<u64> = t.nodes().iter().map(|n| n.node_guid.0).collect();
        v.sort();
        v
    };
    assert_eq!(guids(&found), guids(&file), "{discovered}");
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
    let nodes = f.ok("node2", &["ibnodes"]);
    assert_eq!(nodes.lines().count(), 6, "{nodes}");
    // The switches' forwarding tables as infiniband-diags shows opensm's on ibsim.
    for lid in ["5", "6"] {
        let golden = repo(&format!(
            "crates/cli/tests/golden/B-stock/postsm-ibroute-{lid}.txt"
        ));
        let want = std::fs::read_to_string(golden).unwrap();
        assert_eq!(f.ok("node1", &["ibroute", lid]), want, "ibroute {lid}");
        // No port has joined a multicast group: empty MFTs, as on ibsim.
        let golden = repo(&format!(
            "crates/cli/tests/golden/B-stock/postsm-ibroute-M-{lid}.txt"
        ));
        let want = std::fs::read_to_string(golden).unwrap();
        assert_eq!(
            f.ok("node1", &["ibroute", "-M", lid]),
            want,
            "ibroute -M {lid}"
        );
    }
    // The IPoIB broadcast group the SM creates at start, as opensm's.
    let want =
        std::fs::read_to_string(repo("crates/cli/tests/golden/B-stock/postsm-saquery-g.txt"))
            .unwrap();
    assert_eq!(f.ok("node1", &["saquery", "-g"]), want);
    let members = f.ok("node3", &["saquery", "-m"]);
    assert!(
        members.starts_with("MCMemberRecord member dump:\n")
            && members.contains("Mlid....................0xC000\n"),
        "{members}"
    );
    assert_eq!(f.ok("node2", &["ibswitches"]).lines().count(), 2);
    let ibstat = f.ok("node3", &["ibstat"]);
    assert!(
        ibstat.contains("State: Active") && ibstat.contains("SM lid: 1"),
        "{ibstat}"
    );
    // Traffic through both switches: node1 (sw1) to node4 (sw2), RC send.
    let (_, client) = perftest(
        &f,
        "ib_send_bw",
        &["-n", "200", "-s", "8192"],
        "node4",
        "node1",
        18612,
    );
    let rows = bw_rows(&client);
    assert_eq!(rows.len(), 1, "{client}");
    assert_eq!((rows[0].0, rows[0].1), (8192, 200));
    assert!(rows[0].3 > 0.0);
}

#[test]
fn every_perftest_tool_runs_in_both_roles() {
    let f = Fabric::up("topologies/topoA.net", "perf", &["--sm", "test214:1"]);
    let t0 = Instant::now();
    while !f.status().contains("port 1 Active lid 2") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", f.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut port = 18620;
    for (tool, args) in [
        ("ib_write_bw", vec!["-n", "300"]),
        ("ib_read_bw", vec!["-n", "300", "-q", "2"]),
        ("ib_atomic_bw", vec!["-n", "300"]),
        ("ib_send_bw", vec!["-n", "300", "-c", "UC", "-s", "1024"]),
        ("ib_send_lat", vec!["-n", "200"]),
        ("ib_write_lat", vec!["-n", "200", "-s", "64"]),
        ("ib_read_lat", vec!["-n", "200"]),
        ("ib_atomic_lat", vec!["-n", "200", "-A", "CMP_AND_SWAP"]),
    ] {
        port += 1;
        let (server, client) = perftest(&f, tool, &args, "test214", "test213", port);
        assert!(
            client.contains("local address: LID 0x02"),
            "{tool}: {client}"
        );
        assert!(
            server.contains("remote address: LID 0x02"),
            "{tool}: {server}"
        );
        if tool.ends_with("_bw") {
            let rows = bw_rows(&client);
            assert_eq!(rows.len(), 1, "{tool}: {client}");
            let (bytes, iters, _, avg, rate) = rows[0];
            let n: u64 = args[1].parse().unwrap();
            let qps = if args.contains(&"-q") { 2 } else { 1 };
            assert_eq!(iters, n * qps, "{tool}: {client}");
            // MsgRate × size = average bandwidth (upstream's own identity).
            let from_rate = rate * 1e6 * bytes as f64 / f64::from(1 << 20);
            assert!(
                (from_rate - avg).abs() <= avg * 0.02 + 0.01,
                "{tool}: {client}"
            );
        } else {
            let row = client
                .lines()
                .find(|l| {
                    l.split_whitespace().count() == 9
                        && l.trim_start().starts_with(|c: char| c.is_ascii_digit())
                })
                .unwrap_or_else(|| panic!("{tool}: no latency row in\n{client}"));
            let v: Vec<f64> = row.split_whitespace().map(|x| x.parse().unwrap()).collect();
            // t_min <= t_typical <= t_max and t_min <= t_avg.
            assert!(
                v[2] <= v[4] && v[4] <= v[3] && v[2] <= v[5],
                "{tool}: {row}"
            );
        }
    }
}

#[test]
fn unsupported_flags_and_unknown_devices_are_refused_by_name() {
    let f = Fabric::up("topologies/topoA.net", "flags", &["--no-sm"]);
    let out = f.exec("test213", &["ib_write_bw", "-z"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("-z/--comm_rdma_cm"),
        "{}",
        text(&out.stderr)
    );
    let out = f.exec("test213", &["ib_write_bw", "-d", "mlx5_0"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("mlx5_0 not found"),
        "{}",
        text(&out.stderr)
    );
    let out = f.exec("test213", &["ibstat", "--bogus"]);
    assert!(
        text(&out.stderr).contains("--bogus"),
        "{}",
        text(&out.stderr)
    );
    // Before any SM: the port is Initializing and the tools say so.
    let s = f.ok("test213", &["ibstat", "mlx4_0", "1"]);
    assert!(s.contains("State: Initializing"), "{s}");
}

#[test]
fn bidirectional_duration_and_multi_qp_runs_report_consistent_numbers() {
    let f = Fabric::up("topologies/topoA.net", "modes", &["--sm", "test213:1"]);
    let t0 = Instant::now();
    while !f.status().contains("port 1 Active lid 2") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", f.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    // -N: no peak, and the average still spans the whole run (first post to last completion).
    let (_, with_peak) = perftest(
        &f,
        "ib_write_bw",
        &["-n", "500"],
        "test214",
        "test213",
        18672,
    );
    let (_, no_peak) = perftest(
        &f,
        "ib_write_bw",
        &["-N", "-n", "500"],
        "test214",
        "test213",
        18673,
    );
    let (a, b) = (bw_rows(&with_peak)[0], bw_rows(&no_peak)[0]);
    assert_eq!(b.2, 0.0, "{no_peak}");
    assert!(
        b.3 < a.3 * 5.0 && b.3 > a.3 / 5.0,
        "-N average {} vs {}",
        b.3,
        a.3
    );

    // --run_infinitely: a row per -D seconds until stopped (SIGTERM: a test runner started
    // in the background ignores SIGINT); the server then ends cleanly.
    let srv = Command::new(SOFTIB)
        .args(["fabric", "exec", "test214", "--dir"])
        .arg(&f.dir)
        .args([
            "--",
            "ib_write_bw",
            "-D",
            "1",
            "--run_infinitely",
            "-p",
            "18671",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let cli = Command::new(SOFTIB)
        .args(["fabric", "exec", "test213", "--dir"])
        .arg(&f.dir)
        .args([
            "--",
            "ib_write_bw",
            "-D",
            "1",
            "--run_infinitely",
            "-p",
            "18671",
        ])
        .arg("127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3500));
    if let Some(p) = rustix::process::Pid::from_raw(cli.id() as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
    }
    let c = cli.wait_with_output().unwrap();
    let s = srv.wait_with_output().unwrap();
    let rows = bw_rows(&text(&c.stdout));
    assert!(rows.len() >= 2, "{}{}", text(&c.stdout), text(&c.stderr));
    assert!(rows.iter().all(|r| r.1 > 0 && r.3 > 0.0), "{rows:?}");
    assert!(s.status.success(), "{}{}", text(&s.stdout), text(&s.stderr));

    // -b: each side sends and prints the sum of both directions: the same row on both.
    let (server, client) = perftest(
        &f,
        "ib_write_bw",
        &["-b", "-n", "300", "-s", "4096"],
        "test214",
        "test213",
        18641,
    );
    assert!(client.contains("Bidirectional BW Test"), "{client}");
    let (s, c) = (bw_rows(&server), bw_rows(&client));
    assert_eq!(s.len(), 1, "{server}");
    assert_eq!((c[0].0, c[0].1), (4096, 300));
    assert!(
        (s[0].3 - c[0].3).abs() < 0.01,
        "sums differ:\n{server}\n{client}"
    );
    // -D: a duration run counts what fit in the time.
    let (_, client) = perftest(
        &f,
        "ib_send_bw",
        &["-D", "1", "-s", "1024"],
        "test214",
        "test213",
        18642,
    );
    let c = bw_rows(&client);
    assert_eq!(c.len(), 1, "{client}");
    assert!(c[0].1 > 10, "{client}");
    assert_eq!(c[0].2, 0.0, "no peak in duration mode: {client}");
    // -q 4: iterations are per QP.
    let (_, client) = perftest(
        &f,
        "ib_send_bw",
        &["-q", "4", "-n", "100", "-c", "UD", "-s", "512"],
        "test214",
        "test213",
        18643,
    );
    let c = bw_rows(&client);
    assert_eq!((c[0].0, c[0].1), (512, 400), "{client}");
    assert!(c[0].2.is_finite() && c[0].2 >= c[0].3 * 0.5, "{client}");
}

#[test]
fn query_tools_print_what_infiniband_diags_prints_on_the_seed_fabric() {
    let f = Fabric::up("topologies/topoA.net", "golden", &["--sm", "test213:1"]);
    let t0 = Instant::now();
    while !f.status().contains("port 1 Active lid 2") {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", f.status());
        std::thread::sleep(Duration::from_millis(100));
    }
    for &(golden, cmd) in SEED_GOLDENS {
        let want = std::fs::read_to_string(repo("crates/cli/tests/golden").join(golden)).unwrap();
        let args: Vec<&str> = cmd.split(' ').collect();
        let got = f.ok("test213", &args);
        assert_eq!(got, want, "`{cmd}` differs from {golden}");
    }
    // Counters and the SA: values differ from ibsim's, the layout is the diags'.
    let pq = f.ok("test213", &["perfquery", "-x", "2", "1"]);
    assert!(
        pq.starts_with("# Port extended counters: Lid 2 port 1"),
        "{pq}"
    );
    let nr = f.ok("test214", &["saquery"]);
    assert_eq!(nr.matches("NodeRecord dump:").count(), 2, "{nr}");
    assert!(
        nr.contains("NodeDescription.........test214 mlx4_0"),
        "{nr}"
    );
    let pr = f.ok("test214", &["saquery", "-p"]);
    assert_eq!(pr.matches("PathRecord dump:").count(), 4, "{pr}");
    let sm = f.ok("test214", &["sminfo"]);
    assert!(
        sm.starts_with("sminfo: sm lid 1 sm guid 0xe41d2d0300b47d01, activity count"),
        "{sm}"
    );
    assert!(sm.ends_with("priority 0 state 3 SMINFO_MASTER\n"), "{sm}");
    // No SM on subnet 2: sminfo says so, as the real one fails its query.
    let out = f.exec("test213", &["sminfo", "-P", "2"]);
    assert_eq!(out.status.code(), Some(255));
    assert!(
        text(&out.stderr).contains("knows no SM"),
        "{}",
        text(&out.stderr)
    );
}

/// Starts `opensm -s 1` as `node` for the life of the returned child.
fn opensm(f: &Fabric, node: &str, guid: &str, extra: &[&str]) -> std::process::Child {
    let log = f.dir.join(format!("opensm-{node}.log"));
    Command::new(SOFTIB)
        .args(["fabric", "exec", node, "--dir"])
        .arg(&f.dir)
        .args(["--", "opensm", "-g", guid, "-s", "1", "-f"])
        .arg(&log)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn a_pulled_cable_is_swept_out_and_a_plugged_one_comes_back_with_its_lid() {
    let f = Fabric::up("topologies/topoB.net", "cable", &["--no-sm"]);
    let sm = opensm(&f, "node1", "0xe41d2d0300c00001", &[]);
    f.wait_all_active(4, Duration::from_secs(20));
    let before = f.status();
    let node3 = before
        .lines()
        .find(|l| l.starts_with("node3"))
        .unwrap()
        .to_string();
    let out = Command::new(SOFTIB)
        .args(["fabric", "cable", "node3:1", "pull", "--dir"])
        .arg(&f.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    wait_status(&f, "node3 to go down", Duration::from_secs(10), |s| {
        s.lines()
            .any(|l| l.starts_with("node3") && l.contains("port 1 Down"))
    });
    // The SM's sweeps see the switch port drop: the fabric now has 5 nodes.
    let t0 = Instant::now();
    loop {
        let nodes = f.ok("node1", &["ibnodes"]);
        if nodes.lines().count() == 5 && !nodes.contains("node3") {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{nodes}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = Command::new(SOFTIB)
        .args(["fabric", "cable", "node3:1", "plug", "--dir"])
        .arg(&f.dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let after = wait_status(
        &f,
        "node3 to come back Active",
        Duration::from_secs(15),
        |s| {
            s.lines()
                .any(|l| l.starts_with("node3") && l.contains("Active"))
        },
    );
    let again = after.lines().find(|l| l.starts_with("node3")).unwrap();
    assert_eq!(again, node3, "node3 came back with another LID or SM");
    // And traffic reaches it again through both switches.
    perftest(
        &f,
        "ib_write_bw",
        &["-n", "100", "-s", "4096"],
        "node3",
        "node1",
        18651,
    );
    stop(sm);
    let log = std::fs::read_to_string(f.dir.join("opensm-node1.log")).unwrap();
    // sw2's Trap 128 (or, had it been lost, a light sweep) told the SM of the change (the
    // pull and the plug may fall into one sweep), and a heavy sweep followed.
    assert!(
        log.contains("Received Generic Notice num:128 from LID:6")
            || log.contains("light sweep found a change"),
        "{log}"
    );
    assert!(log.matches("HEAVY SWEEP COMPLETE").count() >= 2, "{log}");
}

#[test]
fn two_sms_elect_one_master_and_the_standby_takes_over() {
    let f = Fabric::up("topologies/topoB.net", "elect", &["--no-sm"]);
    let sm1 = opensm(&f, "node1", "0xe41d2d0300c00001", &[]);
    let sm4 = opensm(&f, "node4", "0xe41d2d0300c00031", &[]);
    f.wait_all_active(4, Duration::from_secs(20));
    let master = |want: &str| {
        let t0 = Instant::now();
        loop {
            // While the master changes, the port may still point at the old SM's LID.
            let s = text(&f.exec("node2", &["sminfo"]).stdout);
            if s.contains(want) && s.contains("SMINFO_MASTER") {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "waiting for master {want}: {s}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    // Equal priority: the lower GUID wins.
    master("sm guid 0xe41d2d0300c00001");
    stop(sm1);
    // The standby notices the master is gone and takes over.
    master("sm guid 0xe41d2d0300c00031");
    stop(sm4);
}

#[test]
fn a_capture_of_an_ib_port_decodes_with_every_crc_valid() {
    let f = Fabric::up("topologies/topoA.net", "capture", &["--no-sm"]);
    let file = f.dir.join("test213.pcap");
    let cap = Command::new(SOFTIB)
        .args(["fabric", "exec", "test213", "--dir"])
        .arg(&f.dir)
        .args(["--", "softib", "capture", "mlx4_0", "-w"])
        .arg(&file)
        .args(["-c", "6", "--duration", "10"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // A directed-route sweep: SMPs out of port 1 and their responses.
    f.ok("test213", &["ibnodes", "-P", "1"]);
    let out = cap.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let decoded = Command::new(SOFTIB)
        .args(["pcap", "decode"])
        .arg(&file)
        .output()
        .unwrap();
    let d = text(&decoded.stdout);
    assert!(
        decoded.status.success(),
        "some packet failed its ICRC/VCRC:\n{d}"
    );
    assert!(
        d.contains("SubnGet(NodeInfo)") || d.contains("NodeInfo"),
        "{d}"
    );
    assert!(d.lines().count() >= 6, "{d}");
}

#[test]
fn lids_survive_an_sm_restart_on_a_fresh_fabric_through_guid2lid() {
    let cache = std::env::temp_dir().join(format!("softib-it-osmcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&cache);
    let sm_once = |f: &Fabric, node: &str, guid: &str| {
        let o = Command::new(SOFTIB)
            .args(["fabric", "exec", node, "--dir"])
            .arg(&f.dir)
            .args(["--", "opensm", "-o", "-s", "0", "-g", guid, "-f"])
            .arg(f.dir.join("osm.log"))
            .env("OSM_CACHE_DIR", &cache)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
    };
    let first = {
        let f = Fabric::up("topologies/topoB.net", "lids1", &["--no-sm"]);
        sm_once(&f, "node4", "0xe41d2d0300c00031");
        wait_status(&f, "Active", Duration::from_secs(10), |s| {
            s.matches(" Active ").count() == 4
        })
    };
    assert!(
        first.contains("node4        mlx4_0  port 1 Active lid 1"),
        "{first}"
    );
    // A new fabric (every port back to LID 0) and the SM on another node: the LIDs come from
    // the cache, not from the new SM's position.
    let f = Fabric::up("topologies/topoB.net", "lids2", &["--no-sm"]);
    sm_once(&f, "node1", "0xe41d2d0300c00001");
    let second = wait_status(&f, "Active", Duration::from_secs(10), |s| {
        s.matches(" Active ").count() == 4
    });
    let lids = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| l.starts_with("node"))
            .map(|l| l.split(" sm ").next().unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(lids(&first), lids(&second), "{first}\n{second}");
    let _ = std::fs::remove_dir_all(&cache);
}

#[test]
fn install_links_makes_every_tool_callable_by_its_name() {
    let dir = std::env::temp_dir().join(format!("softib-it-links-bin-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = Command::new(SOFTIB)
        .arg("install-links")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    for tool in [
        "ibstat",
        "ibv_devinfo",
        "opensm",
        "ib_send_bw",
        "ibnetdiscover",
    ] {
        assert!(dir.join(tool).exists(), "{tool}");
    }
    // Called through its link, the binary is that tool (its own flags and errors).
    let o = Command::new(dir.join("ib_send_bw"))
        .arg("--bogus-flag")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--bogus-flag"),
        "{}",
        text(&o.stderr)
    );
    // Running it again replaces its own links and leaves other files alone.
    std::fs::remove_file(dir.join("ibstat")).unwrap();
    std::fs::write(dir.join("ibstat"), "not ours").unwrap();
    let o = Command::new(SOFTIB)
        .arg("install-links")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        text(&o.stderr).contains("not a link; left alone"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("ibstat")).unwrap(),
        "not ours"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn switches_and_hosts_run_as_separate_processes_and_find_each_other() {
    let dir = std::env::temp_dir().join(format!("softib-it-split-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // 16 cable ends on fixed ports below the ephemeral range, apart for parallel test runs.
    let base = (12000 + (std::process::id() % 1000) * 20).to_string();
    let topo = repo("topologies/topoB.net");
    let spawn = |args: &[&str], name: &str| {
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).unwrap();
        let c = Command::new(SOFTIB)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        // `fabric down` (the Fabric's drop) stops every process with a pid file.
        std::fs::write(dir.join(format!("{name}.pid")), format!("{}\n", c.id())).unwrap();
        c
    };
    let t = topo.to_str().unwrap();
    let d = dir.to_str().unwrap();
    let mut children = Vec::new();
    for sw in ["sw1", "sw2"] {
        children.push(spawn(
            &["switch", t, sw, "--port-base", &base, "--dir", d],
            sw,
        ));
    }
    children.push(spawn(
        &[
            "fabric",
            "run",
            t,
            "--nodes",
            "node1,node2,node3,node4",
            "--port-base",
            &base,
            "--dir",
            d,
        ],
        "daemon",
    ));
    let f = Fabric { dir: dir.clone() };
    let t0 = Instant::now();
    while !(1..=4).all(|i| dir.join(format!("hosts/node{i}/softibd.sock")).exists()) {
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", f.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let sm = Command::new(SOFTIB)
        .args(["fabric", "exec", "node1", "--dir", d, "--"])
        .args(["opensm", "-g", "0xe41d2d0300c00001"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(dir.join("sm.pid"), format!("{}\n", sm.id())).unwrap();
    children.push(sm);
    f.wait_all_active(4, Duration::from_secs(30));
    let net = f.ok("node1", &["ibnetdiscover"]);
    assert!(
        net.contains("\"MF0;sw1:SX6036/U1\"") && net.contains("\"MF0;sw2:SX6036/U1\""),
        "{net}"
    );
    // Data crosses both switch processes.
    let (_, client) = perftest(&f, "ib_write_bw", &["-n", "300"], "node4", "node1", 18690);
    assert_eq!(bw_rows(&client).len(), 1, "{client}");
    // A switch name that is a CA, or not there, is refused by name.
    let out = Command::new(SOFTIB)
        .args(["switch", t, "node1", "--port-base", &base, "--dir", d])
        .output()
        .unwrap();
    assert!(
        !out.status.success() && text(&out.stderr).contains("node1 is a CA"),
        "{}",
        text(&out.stderr)
    );
    drop(f); // fabric down: stops them all
    for mut c in children {
        let _ = c.wait();
    }
}

/// `cmd` (softib's arguments) with its stdout a pipe whose reader is already gone, as
/// under `| head` once head has read its lines: exit status and stderr.
fn with_stdout_closed(cmd: &[&str]) -> (Option<i32>, String) {
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let out = Command::new(SOFTIB)
        .args(cmd)
        .stdout(std::process::Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (out.status.code(), text(&out.stderr))
}

#[test]
fn a_reader_that_goes_away_ends_a_listing_quietly() {
    // A fabric directory with a host whose daemon does not run: `status` lists it as
    // unreachable, with nobody to read the line.
    let dir = std::env::temp_dir().join(format!("softib-it-epipe-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("hosts/node1")).unwrap();
    let d = dir.to_str().unwrap();
    for cmd in [
        &["fabric", "status", "--dir", d][..],
        &["fabric", "gen", "--hosts", "504", "fat-tree"],
        &["env"],
        &["ib_send_bw", "--help"],
    ] {
        let (code, stderr) = with_stdout_closed(cmd);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "softib {cmd:?} with a closed stdout: {stderr}"
        );
        assert_eq!(code, Some(0), "softib {cmd:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fabric_up_returns_once_every_host_has_its_device_files() {
    // libibumad finds a host's CA in its sysfs-style tree: a tool started the moment
    // `fabric up` returns must find it on every host, the last one too.
    let out = Command::new(SOFTIB)
        .args(["fabric", "gen", "--hosts", "96", "fat-tree"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let work = std::env::temp_dir().join(format!("softib-it-ft96-topology-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let file = work.join("ft96.net");
    std::fs::write(&file, &out.stdout).unwrap();
    let f = Fabric::up(file.to_str().unwrap(), "ft96", &["--no-sm"]);
    let missing: Vec<String> = (1..=96)
        .map(|i| format!("host{i}"))
        .filter(|h| {
            !f.dir
                .join("hosts")
                .join(h)
                .join("sys/class/infiniband/mlx4_0/ports/1/state")
                .exists()
        })
        .collect();
    assert!(missing.is_empty(), "no device files yet: {missing:?}");
    drop(f);
    let _ = std::fs::remove_dir_all(&work);
}
