//! `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` as real processes: on the
//! emulated IB fabric (`softib fabric up`) and between two RoCE devices of `softib daemon`.
//!
//! Each test uses its own directory and its own TCP ports (18700-18720), so they run in
//! parallel with each other and with the other test files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SOFTIB: &str = env!("CARGO_BIN_EXE_softib");

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fabric brought up for one test and taken down when it ends.
struct Fabric {
    dir: PathBuf,
}

impl Fabric {
    fn up(topology: &str, name: &str, extra: &[&str]) -> Fabric {
        let dir = std::env::temp_dir().join(format!("softib-it-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(SOFTIB)
            .args(["fabric", "up"])
            .arg(repo(topology))
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .output()
            .unwrap();
        let f = Fabric { dir };
        assert!(
            out.status.success(),
            "fabric up failed: {}\n{}",
            text(&out.stderr),
            f.log()
        );
        f
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn command(&self, node: &str, cmd: &[&str]) -> Command {
        let mut c = Command::new(SOFTIB);
        c.args(["fabric", "exec", node, "--dir"])
            .arg(&self.dir)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null());
        c
    }

    fn exec(&self, node: &str, cmd: &[&str]) -> Output {
        self.command(node, cmd).output().unwrap()
    }

    fn status(&self) -> String {
        let out = Command::new(SOFTIB)
            .args(["fabric", "status", "--dir"])
            .arg(&self.dir)
            .output()
            .unwrap();
        text(&out.stdout)
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        let _ = Command::new(SOFTIB)
            .args(["fabric", "down", "--dir"])
            .arg(&self.dir)
            .output();
    }
}

/// What one side printed: its local and remote address lines and the two result lines.
#[derive(Debug)]
struct Report {
    local: Addr,
    remote: Addr,
    bytes: u64,
    iters: u64,
    mbits: f64,
    usec_per_iter: f64,
}

#[derive(Debug, PartialEq)]
struct Addr {
    lid: u32,
    qpn: u32,
    psn: u32,
    gid: String,
}

/// Parses `LID 0x0001, QPN 0x000123, PSN 0x4a5b6c, GID ::` (UD's local line has `: GID`).
fn addr(line: &str) -> Addr {
    let rest = line.split("LID 0x").nth(1).unwrap();
    let hex = |s: &str| u32::from_str_radix(s, 16).unwrap();
    let lid = hex(&rest[..4]);
    let qpn = hex(&rest.split("QPN 0x").nth(1).unwrap()[..6]);
    let psn = hex(&rest.split("PSN 0x").nth(1).unwrap()[..6]);
    let gid = rest.split(" GID ").nth(1).unwrap().to_string();
    Addr { lid, qpn, psn, gid }
}

fn report(out: &str) -> Report {
    let line = |prefix: &str| {
        out.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{out}"))
    };
    // "8192000 bytes in 0.05 seconds = 1310.72 Mbit/sec"
    let b: Vec<&str> = out
        .lines()
        .find(|l| l.contains(" bytes in "))
        .unwrap_or_else(|| panic!("no bytes line in:\n{out}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        (b[1], b[2], b[4], b[5], b[7]),
        ("bytes", "in", "seconds", "=", "Mbit/sec")
    );
    // "1000 iters in 0.05 seconds = 50.00 usec/iter"
    let i: Vec<&str> = out
        .lines()
        .find(|l| l.contains(" iters in "))
        .unwrap_or_else(|| panic!("no iters line in:\n{out}"))
        .split_whitespace()
        .collect();
    assert_eq!((i[1], i[4], i[7]), ("iters", "seconds", "usec/iter"));
    Report {
        local: addr(line("  local address:  ")),
        remote: addr(line("  remote address: ")),
        bytes: b[0].parse().unwrap(),
        iters: i[0].parse().unwrap(),
        mbits: b[6].parse().unwrap(),
        usec_per_iter: i[6].parse().unwrap(),
    }
}

/// Both sides exited 0, agree on each other's addresses, and moved `size * iters * 2` bytes.
fn check_pair(server: &Output, client: &Output, what: &str, size: u64, iters: u64) {
    let (s, c) = (text(&server.stdout), text(&client.stdout));
    assert!(
        server.status.success() && client.status.success(),
        "{what}: server {:?}\n{s}{}\nclient {:?}\n{c}{}",
        server.status,
        text(&server.stderr),
        client.status,
        text(&client.stderr)
    );
    assert!(!s.contains("invalid data"), "{what}: {s}");
    let (rs, rc) = (report(&s), report(&c));
    assert_eq!(
        rs.local, rc.remote,
        "{what}: the client saw the server's address"
    );
    assert_eq!(
        rc.local, rs.remote,
        "{what}: the server saw the client's address"
    );
    for r in [&rs, &rc] {
        assert_eq!(
            (r.bytes, r.iters),
            (size * iters * 2, iters),
            "{what}: {r:?}"
        );
        assert!(r.mbits > 0.0 && r.usec_per_iter > 0.0, "{what}: {r:?}");
    }
}

#[test]
fn rc_uc_and_ud_pingpong_across_an_ib_fabric() {
    let f = Fabric::up("topologies/topoA.net", "pingpong", &["--sm", "test213:1"]);
    let t0 = Instant::now();
    while !f.status().contains("port 1 Active lid 2") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "{}\n{}",
            f.status(),
            f.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let iters = 200u64;
    let n = iters.to_string();
    for (tool, size, port) in [
        ("ibv_rc_pingpong", 5000u64, 18700u16),
        ("ibv_uc_pingpong", 3000, 18701),
        // UD messages fit one MTU (2048 on this fabric).
        ("ibv_ud_pingpong", 2000, 18702),
    ] {
        let (s, p) = (size.to_string(), port.to_string());
        let args = ["-c", "-s", &s, "-n", &n, "-p", &p, "--timeout", "10"];
        let mut sargs = vec![tool];
        sargs.extend(args);
        let server = f
            .command("test214", &sargs)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The client retries a refused connection, so no sleep is needed for correctness.
        let mut cargs = sargs.clone();
        cargs.push("127.0.0.1");
        let client = f.exec("test213", &cargs);
        let server = server.wait_with_output().unwrap();
        check_pair(&server, &client, tool, size, iters);
        let c = text(&client.stdout);
        let local = c.lines().next().unwrap();
        assert!(
            local.starts_with("  local address:  LID 0x0001, QPN 0x"),
            "{c}"
        );
        if tool == "ibv_ud_pingpong" {
            assert!(local.contains(": GID ::"), "UD's own punctuation: {c}");
        } else {
            assert!(local.ends_with(", GID ::"), "{c}");
        }
    }

    // Where upstream would wait forever or do something else, softib says why.
    let out = f.exec("test213", &["ibv_rc_pingpong", "-i", "2", "-p", "18703"]);
    assert_eq!(out.status.code(), Some(1));
    let e = text(&out.stderr);
    assert!(
        e.contains("Couldn't get local LID")
            && e.contains("Port 2 of mlx4_0 is Initializing, not Active")
            && e.contains("no subnet manager"),
        "{e}"
    );
    let out = f.exec("test213", &["ibv_ud_pingpong", "-s", "4096"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("Requested size larger than port MTU (2048)"),
        "{}",
        text(&out.stderr)
    );
    for flag in ["-o", "-O", "-P", "-t", "-j", "-N", "--odp"] {
        let out = f.exec("test213", &["ibv_rc_pingpong", flag]);
        assert_eq!(out.status.code(), Some(1), "{flag}");
        let e = text(&out.stderr);
        assert!(
            e.contains(&format!("{flag} is not supported by softib")),
            "{e}"
        );
    }
    let out = f.exec("test213", &["ibv_ud_pingpong", "-m", "1024"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("invalid option -- 'm'"));
    assert!(text(&out.stdout).starts_with("Usage:"));
    let out = f.exec("test213", &["ibv_rc_pingpong", "-d", "mlx5_0"]);
    assert!(
        text(&out.stderr).contains("IB device mlx5_0 not found"),
        "{}",
        text(&out.stderr)
    );
    let out = f.exec(
        "test213",
        &[
            "ibv_rc_pingpong",
            "-p",
            "18704",
            "--timeout",
            "0.5",
            "127.0.0.1",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("Couldn't connect to 127.0.0.1:18704"),
        "{}",
        text(&out.stderr)
    );
    // Sizes that disagree: the RC receiver's buffer is too small, and both sides name it.
    let server = f
        .command(
            "test214",
            &[
                "ibv_rc_pingpong",
                "-s",
                "1024",
                "-n",
                "5",
                "-p",
                "18705",
                "--timeout",
                "5",
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = f.exec(
        "test213",
        &[
            "ibv_rc_pingpong",
            "-s",
            "4096",
            "-n",
            "5",
            "-p",
            "18705",
            "--timeout",
            "5",
            "127.0.0.1",
        ],
    );
    let server = server.wait_with_output().unwrap();
    assert_eq!(
        (server.status.code(), client.status.code()),
        (Some(1), Some(1))
    );
    let (se, ce) = (text(&server.stderr), text(&client.stderr));
    assert!(
        se.contains("Failed status local length error (1) for wr_id 1"),
        "{se}"
    );
    assert!(ce.contains("for wr_id 2") && ce.contains("same -s"), "{ce}");
}

/// `softib daemon` with its runtime directory, stopped when dropped.
struct Daemon {
    dir: PathBuf,
    child: Option<Child>,
}

impl Daemon {
    fn start(dir: &Path) -> Daemon {
        let child = Command::new(SOFTIB)
            .arg("daemon")
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let d = Daemon {
            dir: dir.to_path_buf(),
            child: Some(child),
        };
        let t0 = Instant::now();
        while d.command(&["ibv_devices"]).output().unwrap().status.code() != Some(0) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "softibd did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(SOFTIB);
        c.args(args)
            .env("SOFTIB_RUNTIME_DIR", &self.dir)
            .stdin(Stdio::null());
        c
    }

    fn ok(&self, args: &[&str]) {
        let o = self.command(args).output().unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn rc_pingpong_between_two_roce_devices() {
    let dir = std::env::temp_dir().join(format!("softib-it-pp-roce-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // A UDP port of its own, away from the other tests' (daemon_links uses 20000-39999).
    let udp = (40000 + std::process::id() % 20000).to_string();
    let d = Daemon::start(&dir);
    for (name, addr) in [("rxe0", "127.0.0.2"), ("rxe1", "127.0.0.3")] {
        d.ok(&[
            "link",
            "add",
            name,
            "type",
            "rxe",
            "netdev",
            "lo",
            "--addr",
            addr,
            "--udp-port",
            &udp,
        ]);
    }
    let args = [
        "ibv_rc_pingpong",
        "-c",
        "-s",
        "8192",
        "-n",
        "100",
        "-p",
        "18710",
    ];
    let server = d
        .command(&[&args[..], &["-d", "rxe1"]].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let client = d
        .command(&[&args[..], &["-d", "rxe0", "127.0.0.1"]].concat())
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    check_pair(&server, &client, "RoCE rc", 8192, 100);
    let (s, c) = (text(&server.stdout), text(&client.stdout));
    // Without -g, the GID of the device's address, announced on stderr.
    assert_eq!(report(&c).local.gid, "::ffff:127.0.0.2", "{c}");
    assert_eq!(report(&s).local.gid, "::ffff:127.0.0.3", "{s}");
    assert_eq!(report(&c).local.lid, 0, "RoCE ports have no LID: {c}");
    assert!(
        text(&client.stderr).contains("rxe0 is RoCE: using GID index 1"),
        "{}",
        text(&client.stderr)
    );
}
