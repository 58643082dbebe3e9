//! Two RoCE devices of one daemon (`rxe0` 127.0.0.82 and `rxe1` 127.0.0.83 on `lo`): their
//! datagrams are handed over in-process and never reach the kernel (a tshark capture on `lo`
//! sees none), yet `softib capture` on the receiving device still records every datagram with
//! the ICRC the wire would have carried.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

mod common;
use common::{all_icrcs_valid, interrupt, text, tshark, wait_until, Kill, SOFTIB};

fn softib(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(SOFTIB);
    c.args(args)
        .env("SOFTIB_RUNTIME_DIR", dir)
        .stdin(Stdio::null());
    c
}

fn ok(dir: &Path, args: &[&str]) -> Output {
    let o = softib(dir, args).output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// A daemon in a directory of its own with `rxe0` and `rxe1` on `lo` at `addrs` (addresses
/// of the test's own, so that other tests' RoCE traffic on lo is not counted).
fn two_devices(name: &str, addrs: [&str; 2]) -> (std::path::PathBuf, Kill) {
    let dir = std::env::temp_dir().join(format!("softib-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let daemon = Kill(
        softib(&dir, &["daemon"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("softibd did not start", Duration::from_secs(10), || {
        softib(&dir, &["ibv_devices"])
            .output()
            .unwrap()
            .status
            .success()
    });
    for (dev, addr) in ["rxe0", "rxe1"].into_iter().zip(addrs) {
        ok(
            &dir,
            &[
                "link", "add", dev, "type", "rxe", "netdev", "lo", "--addr", addr,
            ],
        );
    }
    (dir, daemon)
}

/// Runs `tool` between the two devices (server on rxe1), with `env` set in both when given;
/// returns the client's output.
fn pair(dir: &Path, tool: &str, args: &[&str], port: &str, env: &[(&str, &str)]) -> String {
    pair_envs(dir, tool, args, port, env, env)
}

/// [`pair`] with `server_env` set in the server and `client_env` in the client.
fn pair_envs(
    dir: &Path,
    tool: &str,
    args: &[&str],
    port: &str,
    server_env: &[(&str, &str)],
    client_env: &[(&str, &str)],
) -> String {
    let server = softib(dir, &[&[tool, "-d", "rxe1", "-p", port], args].concat())
        .envs(server_env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let c = softib(
        dir,
        &[&[tool, "-d", "rxe0", "-p", port], args, &["127.0.0.1"]].concat(),
    )
    .envs(client_env.iter().copied())
    .output()
    .unwrap();
    let s = server.wait_with_output().unwrap();
    assert!(
        c.status.success() && s.status.success(),
        "{tool} with {server_env:?} (server), {client_env:?} (client): {}{}\n{}{}",
        text(&c.stdout),
        text(&c.stderr),
        text(&s.stdout),
        text(&s.stderr)
    );
    text(&c.stdout)
}

#[test]
fn datagrams_between_devices_of_one_daemon_skip_the_kernel_and_are_still_captured_sealed() {
    let ci = std::env::var_os("CI").is_some();
    let (dir, _daemon) = two_devices("local", ["127.0.0.82", "127.0.0.83"]);
    let lo_file = dir.join("lo.pcap");
    let lo = tshark(&["tshark"], "lo", "udp and host 127.0.0.82", &lo_file);
    if lo.is_none() {
        assert!(!ci, "tshark cannot capture on lo; CI must be able to");
        eprintln!("SKIPPED the lo check: tshark cannot capture on lo here");
    }
    let dev_file = dir.join("rxe1.pcap");
    let cap = Kill(
        softib(&dir, &["capture", "rxe1", "-w"])
            .arg(&dev_file)
            .args(["--duration", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(300));

    for (tool, tcp) in [("ib_write_bw", "18741"), ("ib_read_bw", "18742")] {
        pair(&dir, tool, &["-s", "65536", "-n", "20"], tcp, &[]);
    }
    // Stop the device capture: on SIGINT it stops the daemon's capture, which flushes it.
    let mut cap = cap;
    interrupt(&mut cap, "softib capture");
    if let Some(mut lo) = lo {
        interrupt(&mut lo, "tshark");
        let seen = Command::new("tshark")
            .arg("-r")
            .arg(&lo_file)
            .output()
            .unwrap();
        let n = text(&seen.stdout).lines().count();
        assert_eq!(n, 0, "RoCE datagrams crossed lo:\n{}", text(&seen.stdout));
    }
    let good = all_icrcs_valid(&dev_file);
    // 20 WRITEs of 64 KiB between in-process QPs are two packets each (61,440 and 4,096
    // bytes; the first WRITE may go at lo's IB MTU 4096, before the QP is known to be
    // in-process), captured whole although their payloads were handed over in place; 20
    // READs of 64 KiB are two responses each, the same way (the first READ may be answered
    // at the MTU, 16 responses), which rxe1 captures as it sends them; then requests and
    // acknowledgements; a loaded machine adds retransmissions (up to 192 seen at load
    // average 4). At the MTU throughout it would be some 400.
    eprintln!("{good} datagrams captured, every ICRC valid");
    assert!((100..=260).contains(&good), "{good} datagrams captured");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The library's data path has a way around each of its shared-memory parts, for an older
/// daemon or to compare (`SOFTIB_WAKEUP=0`: a poll that sleeps parks a request in the
/// daemon; `SOFTIB_SUBMIT_RING=0`: work requests go as requests; `SOFTIB_CQ_RING=0`:
/// completions come by request). Each still carries a whole perftest run.
#[test]
fn each_data_path_fallback_carries_a_whole_run() {
    let (dir, _daemon) = two_devices("fallback", ["127.0.0.84", "127.0.0.85"]);
    for (i, knob) in ["SOFTIB_WAKEUP", "SOFTIB_SUBMIT_RING", "SOFTIB_CQ_RING"]
        .into_iter()
        .enumerate()
    {
        let port = format!("{}", 18751 + i);
        let out = pair(
            &dir,
            "ib_send_bw",
            &["-s", "4096", "-n", "3000"],
            &port,
            &[(knob, "0")],
        );
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with("4096"))
            .unwrap_or_else(|| panic!("no result row with {knob}=0:\n{out}"));
        assert_eq!(
            row.split_whitespace().nth(1),
            Some("3000"),
            "{knob}=0: {row}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The process data path (`SOFTIB_DATAPATH=process`): each perftest process runs its
/// device's engine itself and sends and receives its own datagrams (the daemon steers them);
/// every test of the suite runs to the end with the counts it asked for.
#[test]
fn perftest_runs_on_the_process_data_path() {
    let (dir, _daemon) = two_devices("process", ["127.0.0.86", "127.0.0.87"]);
    let env = &[("SOFTIB_DATAPATH", "process")];
    for (i, (tool, size, n)) in [
        ("ib_write_bw", "65536", "200"),
        ("ib_read_bw", "65536", "200"),
        ("ib_send_bw", "4096", "2000"),
        ("ib_atomic_bw", "8", "500"),
        ("ib_send_lat", "8", "500"),
        ("ib_write_lat", "8", "500"),
        ("ib_read_lat", "8", "500"),
    ]
    .into_iter()
    .enumerate()
    {
        let port = format!("{}", 18761 + i);
        // The process path is correct but not yet fast: on a loaded machine a latency test
        // can take longer than perftest's 15 s for a step (issue 22's note), so this test
        // gives each step a minute; speed is bench/run.sh's to measure.
        let out = pair(
            &dir,
            tool,
            &["-s", size, "-n", n, "--timeout", "60"],
            &port,
            env,
        );
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(size))
            .unwrap_or_else(|| panic!("{tool}: no result row:\n{out}"));
        assert_eq!(row.split_whitespace().nth(1), Some(n), "{tool}: {row}");
    }
    // One end on each path: the daemon sends to a device with process engines through the
    // kernel (which steers), not in-process.
    for (i, (server, client)) in [("daemon", "process"), ("process", "daemon")]
        .into_iter()
        .enumerate()
    {
        let port = format!("{}", 18781 + i);
        let (s_env, c_env) = (("SOFTIB_DATAPATH", server), ("SOFTIB_DATAPATH", client));
        let args = ["-s", "65536", "-n", "100"];
        pair_envs(&dir, "ib_write_bw", &args, &port, &[s_env], &[c_env]);
    }
    // Both on the process path with the rings between their engines turned off: RC goes
    // through the kernel, steered to each process's socket.
    let kernel = &[("SOFTIB_DATAPATH", "process"), ("SOFTIB_PEER_RINGS", "0")];
    for (i, (tool, size, n)) in [("ib_write_bw", "65536", "200"), ("ib_send_lat", "8", "500")]
        .into_iter()
        .enumerate()
    {
        let port = format!("{}", 18783 + i);
        let out = pair(
            &dir,
            tool,
            &["-s", size, "-n", n, "--timeout", "60"],
            &port,
            kernel,
        );
        let row = out
            .lines()
            .find(|l| l.trim_start().starts_with(size))
            .unwrap_or_else(|| panic!("{tool} without rings: no result row:\n{out}"));
        assert_eq!(row.split_whitespace().nth(1), Some(n), "{tool}: {row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A process killed mid-transfer on the process path: its peer's WRITEs are no longer
/// acknowledged and fail with retries exceeded, as with a dead node; the daemon reclaims
/// what the dead process held.
#[test]
fn a_killed_process_leaves_its_peer_with_retries_exceeded() {
    let (dir, _daemon) = two_devices("process-kill", ["127.0.0.88", "127.0.0.89"]);
    let spawn = |args: &[&str]| {
        softib(&dir, args)
            .env("SOFTIB_DATAPATH", "process")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut server = Kill(spawn(&[
        "ib_write_bw",
        "-d",
        "rxe1",
        "-n",
        "100000000",
        "-p",
        "18771",
    ]));
    std::thread::sleep(Duration::from_millis(300));
    let client = spawn(&[
        "ib_write_bw",
        "-d",
        "rxe0",
        "-n",
        "100000000",
        "-p",
        "18771",
        "127.0.0.1",
    ]);
    wait_until("both processes hold a QP", Duration::from_secs(10), || {
        let r = text(&ok(&dir, &["res"]).stdout);
        r.contains("0: rxe0: pd 1 cq 1 qp 1") && r.contains("1: rxe1: pd 1 cq 1 qp 1")
    });
    std::thread::sleep(Duration::from_millis(300));
    let _ = server.0.kill();
    let _ = server.0.wait();
    let c = client.wait_with_output().unwrap();
    let err = text(&c.stderr);
    assert!(!c.status.success(), "the client did not notice");
    assert!(err.contains("Failed status 12"), "{err}{}", text(&c.stdout));
    wait_until(
        "the dead process reclaimed",
        Duration::from_secs(10),
        || {
            let r = text(&ok(&dir, &["res"]).stdout);
            r.contains("1: rxe1: pd 0 cq 0 qp 0")
        },
    );
    let _ = std::fs::remove_dir_all(&dir);
}
