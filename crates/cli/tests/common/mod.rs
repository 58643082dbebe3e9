//! What the integration tests share: a fabric brought up for one test (`softib fabric up`)
//! and taken down when it ends, and small helpers.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod junk;
pub mod rc_pair;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const SOFTIB: &str = env!("CARGO_BIN_EXE_softib");

/// `softib daemon` on runtime directory `dir` with one RoCE device, `rxe0` on lo at `addr`,
/// once it answers; killed when the test lets go of it.
pub fn roce_daemon(dir: &Path, addr: &str) -> Kill {
    let d = Kill(
        Command::new(SOFTIB)
            .arg("daemon")
            .env("SOFTIB_RUNTIME_DIR", dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("softibd did not start", Duration::from_secs(10), || {
        softib::Context::open_at(dir).is_ok()
    });
    let o = Command::new(SOFTIB)
        .args([
            "link", "add", "rxe0", "type", "rxe", "netdev", "lo", "--addr", addr,
        ])
        .env("SOFTIB_RUNTIME_DIR", dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    d
}

pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

/// The real infiniband-diags' outputs on ibsim for the seed fabric (topoA, opensm on test213
/// port 1), as (golden file in `crates/cli/tests/golden`, command run on test213).
pub const SEED_GOLDENS: &[(&str, &str)] = &[
    ("postsm-smpquery-nodeinfo-1.txt", "smpquery nodeinfo 1"),
    ("postsm-smpquery-nodeinfo-2.txt", "smpquery nodeinfo 2"),
    ("postsm-smpquery-nodedesc-1.txt", "smpquery nodedesc 1"),
    (
        "postsm-test213-smpquery-D-nodeinfo-0.txt",
        "smpquery -D nodeinfo 0",
    ),
    ("postsm-smpquery-pkeys-1.txt", "smpquery pkeys 1 1"),
    ("postsm-test213-ibaddr.txt", "ibaddr"),
    ("postsm-ibaddr-2.txt", "ibaddr 2"),
    ("postsm-test213-ibnodes.txt", "ibnodes -P 1"),
];

/// A fabric brought up for one test and taken down when it ends.
pub struct Fabric {
    pub dir: PathBuf,
}

impl Fabric {
    pub fn up(topology: &str, name: &str, extra: &[&str]) -> Fabric {
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

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    pub fn exec(&self, node: &str, cmd: &[&str]) -> Output {
        Command::new(SOFTIB)
            .args(["fabric", "exec", node, "--dir"])
            .arg(&self.dir)
            .arg("--")
            .args(cmd)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    pub fn ok(&self, node: &str, cmd: &[&str]) -> String {
        let out = self.exec(node, cmd);
        assert!(
            out.status.success(),
            "{cmd:?} on {node} failed ({:?}):\n{}\n{}\ndaemon log:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.log()
        );
        text(&out.stdout)
    }

    pub fn status(&self) -> String {
        let out = Command::new(SOFTIB)
            .args(["fabric", "status", "--dir"])
            .arg(&self.dir)
            .output()
            .unwrap();
        text(&out.stdout)
    }

    pub fn wait_all_active(&self, hosts: usize, timeout: Duration) {
        let t0 = Instant::now();
        loop {
            let s = self.status();
            let active = s.matches(" Active ").count();
            if active >= hosts && !s.contains("Initializing") {
                return;
            }
            assert!(
                t0.elapsed() < timeout,
                "ports not Active after {timeout:?}:\n{s}\ndaemon log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
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

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn stop(mut c: std::process::Child) {
    if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
    }
    let _ = c.wait();
}

pub fn wait_status(f: &Fabric, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
    let t0 = Instant::now();
    loop {
        let s = f.status();
        if ok(&s) {
            return s;
        }
        assert!(
            t0.elapsed() < timeout,
            "waited {timeout:?} for {what}:\n{s}\n{}",
            f.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A child process killed (and reaped) when the test lets go of it.
pub struct Kill(pub std::process::Child);

impl Drop for Kill {
    fn drop(&mut self) {
        signal(&self.0, rustix::process::Signal::CONT);
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends `sig` to `c`.
pub fn signal(c: &std::process::Child, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

/// Interrupts `c` (SIGINT: captures flush and stop) and waits up to 10 s for it to exit.
pub fn interrupt(c: &mut Kill, what: &str) {
    signal(&c.0, rustix::process::Signal::INT);
    let t0 = Instant::now();
    while c.0.try_wait().unwrap().is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "{what} did not stop on SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// tshark capturing `iface` with capture filter `filter` into a pcap file, started by `cmd`
/// (`tshark` itself, or `ip netns exec NS tshark`), once it says it captures; `None` where it
/// cannot (no tshark, no rights) within 20 s.
pub fn tshark(cmd: &[&str], iface: &str, filter: &str, file: &Path) -> Option<Kill> {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(cmd[0])
        .args(&cmd[1..])
        .args(["-i", iface, "-F", "pcap", "-q", "-f", filter, "-w"])
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let err = child.stderr.take()?;
    let child = Kill(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("Capture started") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(20)).ok()?;
    Some(child)
}

/// `softib pcap decode FILE`: the lines with a valid ICRC, or a panic that shows the first
/// lines that are not.
pub fn all_icrcs_valid(file: &Path) -> usize {
    let decoded = Command::new(SOFTIB)
        .args(["pcap", "decode"])
        .arg(file)
        .output()
        .unwrap();
    let d = text(&decoded.stdout);
    assert!(
        decoded.status.success(),
        "a datagram in {} failed its ICRC:\n{}",
        file.display(),
        d.lines()
            .filter(|l| !l.ends_with("icrc=ok"))
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    d.lines().filter(|l| l.ends_with("icrc=ok")).count()
}

/// Polls `ready` every 20 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ready() {
        assert!(t0.elapsed() < timeout, "{what} (waited {timeout:?})");
        std::thread::sleep(Duration::from_millis(20));
    }
}
