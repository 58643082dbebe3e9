//! What the drop-in tests share: two softib hosts on loopback (a daemon each, one RoCE device
//! `rxe0` on 127.0.0.2 and 127.0.0.3), started once per test binary and stopped when it
//! exits; running an unmodified program on one of them through `softib run`, with proof
//! that it loaded softib's libibverbs.so.1 (the dynamic loader's own log); peer programs that
//! may be missing (skipped with a message, except under `CI=true`).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub const SOFTIB: &str = env!("CARGO_BIN_EXE_softib");

/// How long any one program may run.
pub const BOUND: Duration = Duration::from_secs(90);

/// Builds `tests/dropin/NAME.c` into `dir/NAME`, linked with `-lLIB` for each of `libs`
/// against the libraries `softib install-libs` writes into `dir/lib`, as a program built on a
/// machine with only softib would be. Its path.
pub fn build_c(dir: &Path, name: &str, libs: &[&str]) -> String {
    let lib_dir = dir.join("lib");
    let o = Command::new(SOFTIB)
        .arg("install-libs")
        .arg(&lib_dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "install-libs: {}", text(&o.stderr));
    let exe = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/dropin/{name}.c"));
    let o = Command::new("cc")
        .args(["-Wall", "-Werror", "-O1", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-L")
        .arg(&lib_dir)
        .args(libs.iter().map(|l| format!("-l{l}")))
        .arg("-lpthread")
        .output()
        .unwrap();
    assert!(o.status.success(), "cc {name}.c: {}", text(&o.stderr));
    exe.to_string_lossy().into_owned()
}

/// A host: its runtime directory and its device's address.
pub struct Host {
    pub dir: PathBuf,
    pub addr: &'static str,
    /// The network namespace it runs in (its programs too), if not this process's.
    pub netns: Option<String>,
    /// Keeps the daemon's watchdog alive: when this process exits, the pipe closes and the
    /// watchdog stops the daemon.
    _watch: Child,
}

/// The two hosts of this test binary.
pub struct Hosts {
    pub a: Host,
    pub b: Host,
    pub udp_port: u16,
}

static HOSTS: OnceLock<Hosts> = OnceLock::new();

/// The two hosts, started on first use.
pub fn hosts() -> &'static Hosts {
    HOSTS.get_or_init(|| {
        let pid = std::process::id();
        let udp_port = 20000 + (pid % 20000) as u16;
        let a = start_host("a", "127.0.0.2", udp_port);
        let b = start_host("b", "127.0.0.3", udp_port);
        Hosts { a, b, udp_port }
    })
}

/// A host of its own beside the two shared ones (same UDP port, so they reach it): for a test
/// that watches what happens on a port, where the other tests' traffic must not reach.
#[allow(dead_code)]
pub fn private_host(name: &str, addr: &'static str) -> Host {
    start_host(name, addr, hosts().udp_port)
}

fn start_host(name: &str, addr: &'static str, udp_port: u16) -> Host {
    start_host_on(name, addr, "lo", Some(udp_port), None)
}

/// A daemon with one RoCE device `rxe0` on `netdev` with `addr` (and its UDP port, if not
/// 4791), inside network namespace `netns` if given.
fn start_host_on(
    name: &str,
    addr: &'static str,
    netdev: &str,
    udp_port: Option<u16>,
    netns: Option<&str>,
) -> Host {
    let dir = std::env::temp_dir().join(format!("softib-dropin-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let in_ns = |c: &mut Command| {
        if let Some(ns) = netns {
            c.args(["netns", "exec", ns]);
        }
    };
    // The daemon lives as long as the watchdog's stdin, which only this process holds.
    let mut watch = Command::new(if netns.is_some() { "ip" } else { "sh" });
    in_ns(&mut watch);
    if netns.is_some() {
        watch.arg("sh");
    }
    let watch = watch
        .arg("-c")
        .arg(r#""$0" daemon </dev/null >"$1/softibd.log" 2>&1 & d=$!; read _; kill $d; wait $d"#)
        .arg(SOFTIB)
        .arg(&dir)
        .env("SOFTIB_RUNTIME_DIR", &dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !dir.join("softibd.sock").exists() || softib::Context::open_at(&dir).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "softibd in {} did not start:\n{}",
            dir.display(),
            std::fs::read_to_string(dir.join("softibd.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut add = Command::new(if netns.is_some() { "ip" } else { SOFTIB });
    in_ns(&mut add);
    if netns.is_some() {
        add.arg(SOFTIB);
    }
    add.args([
        "link", "add", "rxe0", "type", "rxe", "netdev", netdev, "--addr", addr,
    ]);
    if let Some(p) = udp_port {
        add.args(["--udp-port", &p.to_string()]);
    }
    let out = add.env("SOFTIB_RUNTIME_DIR", &dir).output().unwrap();
    assert!(out.status.success(), "link add: {}", text(&out.stderr));
    Host {
        dir,
        addr,
        netns: netns.map(str::to_string),
        _watch: watch,
    }
}

/// Two hosts, each in a network namespace of this test binary's own, joined by a veth pair
/// (10.77.0.1 in the first, 10.77.0.2 in the second), each with its device on its end:
/// for programs that want their RDMA device's address on a network interface (libfabric's
/// verbs provider lists interfaces), and for IP multicast, which may not leave loopback
/// otherwise. The namespaces are removed when this process exits. `None` (said once, and a
/// failure under `CI=true`) when this process may not make namespaces (needs root and `ip`).
pub fn netns_hosts() -> Option<&'static NetnsHosts> {
    static NS: OnceLock<Option<NetnsHosts>> = OnceLock::new();
    NS.get_or_init(|| {
        let root = rustix::process::geteuid().is_root();
        if !root || which("ip").is_none() {
            assert!(
                std::env::var_os("CI").is_none_or(|v| v != "true"),
                "the netns tests need root and ip (iproute2) under CI=true"
            );
            eprintln!("skipped: the netns tests need root and ip (root: {root})");
            return None;
        }
        let pid = std::process::id();
        let (na, nb) = (format!("softib-t{pid}a"), format!("softib-t{pid}b"));
        let (va, vb) = (
            format!("sib{}a", pid % 100_000),
            format!("sib{}b", pid % 100_000),
        );
        let ip = |args: &[&str]| {
            let o = Command::new("ip").args(args).output().unwrap();
            assert!(o.status.success(), "ip {args:?}: {}", text(&o.stderr));
        };
        ip(&["netns", "add", &na]);
        ip(&["netns", "add", &nb]);
        // Removed when this process exits: the remover waits on a pipe only it holds.
        let remover = Command::new("sh")
            .arg("-c")
            .arg(r#"read _; ip netns del "$0"; ip netns del "$1""#)
            .args([&na, &nb])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        ip(&[
            "-n", &na, "link", "add", &va, "type", "veth", "peer", "name", &vb, "netns", &nb,
        ]);
        for (ns, dev, addr) in [(&na, &va, "10.77.0.1/24"), (&nb, &vb, "10.77.0.2/24")] {
            ip(&["-n", ns, "link", "set", "lo", "up"]);
            ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
            ip(&["-n", ns, "link", "set", dev, "up"]);
        }
        let a = start_host_on("nsa", "10.77.0.1", &va, None, Some(&na));
        let b = start_host_on("nsb", "10.77.0.2", &vb, None, Some(&nb));
        // A fresh veth pair takes a moment to be up, and the ports follow their interfaces:
        // programs that look for an active port (libfabric's verbs provider) start after.
        for h in [&a, &b] {
            let t0 = Instant::now();
            while !port_active(h) {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "the port of {} did not become active",
                    h.dir.display()
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(NetnsHosts {
            a,
            b,
            _remover: remover,
        })
    })
    .as_ref()
}

/// Whether port 1 of the host's device is Active (state 4).
fn port_active(h: &Host) -> bool {
    softib::Context::open_at(&h.dir)
        .and_then(|mut c| c.devices())
        .is_ok_and(|d| {
            d.first()
                .and_then(|d| d.ports.first())
                .is_some_and(|p| p.state == 4)
        })
}

/// See [`netns_hosts`].
pub struct NetnsHosts {
    pub a: Host,
    pub b: Host,
    _remover: Child,
}

impl Host {
    /// The daemon's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("softibd.log")).unwrap_or_default()
    }
}

/// `readelf ARGS FILE`'s output.
pub fn readelf(args: &[&str], file: &Path) -> String {
    let o = Command::new("readelf")
        .args(args)
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "readelf {args:?} {}", file.display());
    text(&o.stdout)
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A TCP port for one out-of-band exchange (perftest's, the pingpongs', UCX's), different
/// for every call of this process and unlikely to be another process's.
pub fn port() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let base = 30000 + (std::process::id() % 400) as u16 * 80;
    base + NEXT.fetch_add(1, Ordering::Relaxed) % 80
}

/// Whether `prog` is installed; if not, says why the test does nothing — or, under
/// `CI=true` (where .ci/run installs it), fails.
pub fn have(prog: &str, package: &str) -> bool {
    let found = which(prog).is_some();
    if !found {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "{prog} is missing under CI=true: .ci/run installs {package}"
        );
        eprintln!("skipped: {prog} is not installed (apt-get install {package})");
    }
    found
}

pub fn which(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Path::new(prog).exists().then(|| PathBuf::from(prog));
    }
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(prog))
            .find(|f| f.is_file())
    })
}

/// A program run on a host through `softib run`, whose dynamic loader logs the libraries it
/// initialises (LD_DEBUG=libs, into a file of its own).
pub struct Run {
    child: Option<Child>,
    what: String,
    debug: PathBuf,
    started: Instant,
}

/// What a finished run printed.
pub struct Done {
    pub what: String,
    pub status: std::process::ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// The loader's log.
    pub loader: String,
}

impl Run {
    /// Starts `args` on `host`, with `env` set.
    pub fn start(host: &Host, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut c = match &host.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(SOFTIB);
                c
            }
            None => Command::new(SOFTIB),
        };
        c.args(["run", "--host"])
            .arg(&host.dir)
            .arg("--")
            .args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        let what = format!("{args:?} on {}", host.dir.display());
        Run::logged(c, what, &host.dir.join("ld"))
    }

    /// Starts `args` on host `node` of the fabric in `dir` (`softib fabric exec`, which puts
    /// the drop-ins first on its library path and enters the node's network namespace).
    pub fn on_fabric(dir: &Path, node: &str, args: &[&str]) -> Run {
        let mut c = Command::new(SOFTIB);
        c.args(["fabric", "exec", node, "--dir"])
            .arg(dir)
            .arg("--")
            .args(args);
        Run::logged(
            c,
            format!("{args:?} on {node}"),
            &dir.join(format!("ld-{node}")),
        )
    }

    /// Spawns `c` with its output collected and the loader's log in files named after
    /// `debug` (one per run).
    fn logged(mut c: Command, what: String, debug: &Path) -> Run {
        static N: AtomicU16 = AtomicU16::new(0);
        let mut debug = debug.as_os_str().to_os_string();
        debug.push(format!("-{}", N.fetch_add(1, Ordering::Relaxed)));
        let debug = PathBuf::from(debug);
        let child = c
            .env("LD_DEBUG", "libs")
            .env("LD_DEBUG_OUTPUT", &debug)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Run {
            child: Some(child),
            what,
            debug,
            started: Instant::now(),
        }
    }

    /// Starts softib's own tool `args` (`ib_write_bw ...`) on `host`.
    pub fn start_own(host: &Host, args: &[&str]) -> Run {
        let child = Command::new(SOFTIB)
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", &host.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Run {
            child: Some(child),
            what: format!("softib {args:?} on {}", host.dir.display()),
            debug: host.dir.join("ld-own"),
            started: Instant::now(),
        }
    }

    /// The program's process ID (`softib run` execs it).
    #[allow(dead_code)]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Waits (at most [`BOUND`] since it started) and collects what it printed.
    pub fn wait(mut self) -> Done {
        let mut child = self.child.take().unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut err = child.stderr.take().unwrap();
        let o = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = out.read_to_end(&mut s);
            s
        });
        let e = std::thread::spawn(move || {
            let mut s = Vec::new();
            let _ = err.read_to_end(&mut s);
            s
        });
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if self.started.elapsed() > BOUND {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not finish in {BOUND:?}; it printed:\n{}\n{}",
                    self.what,
                    text(&o.join().unwrap()),
                    text(&e.join().unwrap())
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let loader = loader_log(&self.debug);
        Done {
            what: self.what.clone(),
            status,
            stdout: text(&o.join().unwrap()),
            stderr: text(&e.join().unwrap()),
            loader,
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The loader logs of a run (one file per process it became, `PATH.PID`).
fn loader_log(prefix: &Path) -> String {
    let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name()) else {
        return String::new();
    };
    let name = name.to_string_lossy().into_owned() + ".";
    let mut all = String::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(&name) {
            all.push_str(&std::fs::read_to_string(e.path()).unwrap_or_default());
            let _ = std::fs::remove_file(e.path());
        }
    }
    all
}

/// softib's library as the loader names it once found (`softib run`'s directory of links).
pub fn our_library() -> PathBuf {
    Path::new(SOFTIB)
        .parent()
        .unwrap()
        .join("softib-lib/libibverbs.so.1")
}

impl Done {
    /// Asserts an rdmacm-utils program (ucmatose, udaddy, mckey) said it completed cleanly.
    pub fn completed(&self) -> &Done {
        assert!(
            self.stdout.contains("test complete") && self.stdout.contains("return status 0"),
            "{}:\n{}\n{}",
            self.what,
            self.stdout,
            self.stderr
        );
        self
    }

    /// Whether the program (an rdma_cm client) was told that nobody listens where it
    /// connected: REJ InvalidServiceID (8), or for UD a SIDR_REP "unsupported ServiceID" (1).
    /// rdma_cm clients do not retry it; a test whose server may not listen yet does.
    pub fn heard_nobody_listens(&self) -> bool {
        let said = format!("{}{}", self.stdout, self.stderr);
        said.contains("REJECTED; error: 8")
            || said.contains("REJECTED, error 8")
            || said.contains("REJECTED, error: 8")
            || said.contains("UNREACHABLE, error: 1")
            || said.contains("rdma_connect: Connection refused")
    }

    /// Asserts the program initialised softib's library `soname` (from `softib run`'s
    /// directory of links) and no other library of that name.
    pub fn loaded_ours_lib(&self, soname: &str) -> &Done {
        let ours = our_library().with_file_name(soname);
        let init = format!("calling init: {}", ours.display());
        assert!(
            self.loader.contains(&init),
            "{} did not load softib's {soname} ({}); the loader said:\n{}",
            self.what,
            ours.display(),
            self.loader
                .lines()
                .filter(|l| l.contains("calling init"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let suffix = format!("/{soname}");
        let others: Vec<&str> = self
            .loader
            .lines()
            .filter(|l| l.contains("calling init:") && l.trim_end().ends_with(&suffix))
            .filter(|l| !l.contains(&init))
            .collect();
        assert!(
            others.is_empty(),
            "{} also initialised another {soname}: {others:?}",
            self.what
        );
        self
    }

    /// Asserts the program exited 0 and initialised softib's libibverbs (not the system's).
    pub fn ok(&self) -> &Done {
        assert!(
            self.status.success(),
            "{} failed ({:?}):\n{}\n{}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self.loaded_ours()
    }

    /// Asserts the program initialised softib's libibverbs.so.1 and no other.
    pub fn loaded_ours(&self) -> &Done {
        self.loaded_ours_lib("libibverbs.so.1")
    }
}

/// Runs a client/server pair of `prog` between host B (server) and host A (client): the
/// server gets `server_args`, the client `client_args` and B's address last.
pub fn pair(server_args: &[&str], client_args: &[&str], env: &[(&str, &str)]) -> (Done, Done) {
    let h = hosts();
    let server = Run::start(&h.b, server_args, env);
    // The server listens before the client connects; clients of perftest, the pingpongs and
    // UCX retry or fail fast, so give it a moment and retry a refused connection once.
    std::thread::sleep(Duration::from_millis(300));
    let mut ca: Vec<&str> = client_args.to_vec();
    ca.push("127.0.0.1");
    let client = Run::start(&h.a, &ca, env).wait();
    let server = server.wait();
    (server, client)
}

/// Runs a pair where each side is either the Debian program through `softib run`
/// (`upstream`) or softib's own tool: server on host B, client on host A.
pub fn mixed_pair(server_upstream: bool, client_upstream: bool, args: &[&str]) -> (Done, Done) {
    let h = hosts();
    let start = |host: &Host, upstream: bool, a: &[&str]| {
        if upstream {
            Run::start(host, a, &[])
        } else {
            Run::start_own(host, a)
        }
    };
    let server = start(&h.b, server_upstream, args);
    std::thread::sleep(Duration::from_millis(300));
    let mut ca: Vec<&str> = args.to_vec();
    ca.push("127.0.0.1");
    let client = start(&h.a, client_upstream, &ca).wait();
    (server.wait(), client)
}

/// Checks a perftest run over rdma_cm (`-R`): both sides said so, and the client reported a
/// result of `iters` iterations (bandwidth tools print theirs on both sides, latency tools on
/// the client).
pub fn rdma_cm_perftest_ran(s: &Done, c: &Done, iters: f64) {
    for d in [s, c] {
        assert!(
            d.stdout.contains("Data ex. method : rdma_cm"),
            "{}:\n{}\n{}",
            d.what,
            d.stdout,
            d.stderr
        );
    }
    let r = perftest_result(&c.stdout).unwrap_or_default();
    assert!(
        r.len() >= 2 && r[1] == iters,
        "{}: no result\n{}\n{}",
        c.what,
        c.stdout,
        c.stderr
    );
}

/// The numbers of a perftest result line (`#bytes #iterations ...`), for the last size.
pub fn perftest_result(out: &str) -> Option<Vec<f64>> {
    out.lines()
        .rev()
        .filter(|l| {
            let t = l.trim_start();
            t.chars().next().is_some_and(|c| c.is_ascii_digit())
        })
        .filter_map(|l| {
            let v: Vec<f64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            (v.len() >= 3).then_some(v)
        })
        .next()
}
