//! `softib demo`: the seed scenario, end to end, on this machine.
//!
//! Two hosts, test213 and test214, each with a dual-port ConnectX-3 (`mlx4_0`, MT4099), cabled
//! back to back port 1 ↔ port 1 and port 2 ↔ port 2: two subnets. Their ports train and sit in
//! Initializing; a benchmark explains why it cannot run; `opensm` is started on each subnet;
//! the ports go Active; `ibnodes` lists both CAs; `ib_send_bw -a -c UD` runs across port 2,
//! then RC `ib_write_bw` and `ib_write_lat`; as root, `ib0` and `ib1` come up on both hosts
//! (IPoIB, each host in a network namespace) and ping across both subnets. Everything runs under a temporary directory and
//! is stopped and removed at the end, also when a step fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use softib_hca::host::{host_dir, SOCKET_NAME};

use crate::exit;

/// The seed's topology (also `topologies/topoA.net`).
const TOPO_A: &str = include_str!("../../../topologies/topoA.net");

/// Arguments of `softib demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the fabric running at the end (stop it with `softib fabric down --dir DIR`).
    #[arg(long)]
    keep: bool,
    /// The TCP port of perftest's out-of-band exchange.
    #[arg(long, default_value_t = 18515)]
    perftest_port: u16,
}

struct Demo {
    dir: PathBuf,
    exe: PathBuf,
    children: Vec<Child>,
    keep: bool,
    /// Every step ran (a kept fabric's stop hint was printed).
    finished: bool,
}

impl Drop for Demo {
    fn drop(&mut self) {
        if self.keep {
            if !self.finished {
                eprintln!(
                    "softib demo: the fabric keeps running (--keep); stop it with \
                     `softib fabric down --dir {}`",
                    self.dir.display()
                );
            }
            return;
        }
        // SMs and servers first, the fabric daemon (the first child) last.
        for c in self.children.iter_mut().rev() {
            if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(3) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for (_, ns) in crate::fabric::read_netns(&self.dir) {
            let _ = crate::fabric::ip(&["netns", "del", &ns]);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Bold and dim only on a terminal; plain text in logs and pipes.
fn style(code: &str, text: &str) -> String {
    use std::io::IsTerminal;
    if std::io::stdout().is_terminal() {
        format!("\x1b[{code}m{text}\x1b[0m")
    } else {
        text.to_string()
    }
}

fn banner(text: &str) {
    note!("\n{}", style("1", &format!("== {text}")));
}

fn prompt(host: &str) -> String {
    style("2", &format!("[{host}]$"))
}

impl Demo {
    fn host(&self, name: &str) -> PathBuf {
        host_dir(&self.dir, name)
    }

    fn command(&self, host: &str, tool: &str, args: &[&str]) -> Command {
        let mut c = Command::new(&self.exe);
        c.arg(tool)
            .args(args)
            .env("SOFTIB_RUNTIME_DIR", self.host(host))
            .env("OSM_CACHE_DIR", &self.dir)
            .current_dir(&self.dir);
        c
    }

    /// Runs a tool as `host`, echoing the command line like a shell session; returns its
    /// exit code.
    fn run(&self, host: &str, tool: &str, args: &[&str]) -> Result<i32> {
        note!("{} {tool} {}", prompt(host), args.join(" "));
        let status = self
            .command(host, tool, args)
            .status()
            .with_context(|| format!("running {tool} on {host}"))?;
        Ok(status.code().unwrap_or(-1))
    }

    fn must(&self, host: &str, tool: &str, args: &[&str]) -> Result<()> {
        let code = self.run(host, tool, args)?;
        if code != 0 {
            bail!("{tool} on {host} failed (exit code {code})");
        }
        Ok(())
    }

    /// Starts a tool in the background (its output to a file under the demo directory).
    fn spawn(&mut self, host: &str, tool: &str, args: &[&str], log: &str) -> Result<usize> {
        let out = std::fs::File::create(self.dir.join(log))?;
        let child = self
            .command(host, tool, args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {tool} on {host}"))?;
        self.children.push(child);
        Ok(self.children.len() - 1)
    }

    /// Client on test213 against a server on test214, both with `args`; prints both.
    fn perftest(&mut self, tool: &str, args: &[&str], port: u16) -> Result<()> {
        let port = port.to_string();
        let mut sargs: Vec<&str> = args.to_vec();
        sargs.extend(["-p", &port]);
        let log = format!("{tool}-server.txt");
        note!("{} {tool} {} &", prompt("test214"), args.join(" "));
        let idx = self.spawn("test214", tool, &sargs, &log)?;
        // The server listens once it has checked its port; give it the moment it needs.
        std::thread::sleep(Duration::from_millis(300));
        let mut cargs = sargs.clone();
        cargs.push("127.0.0.1");
        note!("{} {tool} {} 127.0.0.1", prompt("test213"), args.join(" "));
        let code = self
            .command("test213", tool, &cargs)
            .status()
            .with_context(|| format!("running {tool}"))?
            .code()
            .unwrap_or(-1);
        let t0 = Instant::now();
        let server = &mut self.children[idx];
        let scode = loop {
            if let Some(s) = server.try_wait()? {
                break s.code().unwrap_or(-1);
            }
            if t0.elapsed() > Duration::from_secs(20) {
                let _ = server.kill();
                break -1;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        note!("{}", style("2", "(server output on test214:)"));
        note_part!(
            "{}",
            std::fs::read_to_string(self.dir.join(&log)).unwrap_or_default()
        );
        if code != 0 || scode != 0 {
            bail!("{tool}: client exit code {code}, server exit code {scode}");
        }
        Ok(())
    }

    /// Runs `cmd` as `host` inside the host's network namespace (`softib` is this binary).
    fn must_ns(&self, host: &str, cmd: &[&str]) -> Result<()> {
        note!("{} {}", prompt(host), cmd.join(" "));
        let ns = crate::fabric::netns_name(&self.dir, host);
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &ns]);
        match cmd.split_first() {
            Some((&"softib", rest)) => c.arg(&self.exe).args(rest),
            Some((prog, rest)) => c.arg(prog).args(rest),
            None => bail!("no command"),
        };
        let status = c
            .env("SOFTIB_RUNTIME_DIR", self.host(host))
            .status()
            .with_context(|| format!("running {} on {host}", cmd.join(" ")))?;
        if !status.success() {
            bail!("{} on {host} failed ({status})", cmd.join(" "));
        }
        Ok(())
    }

    /// The seed's IP interfaces: ib0 on port 1 and ib1 on port 2 of each host, each host in a
    /// network namespace of its own so that its addresses are its own, then ping across each
    /// subnet.
    fn ipoib(&mut self) -> Result<()> {
        let root = rustix::process::geteuid().is_root();
        let tun = Path::new("/dev/net/tun").exists();
        let ip = Command::new("ip").arg("-V").output().is_ok();
        if !(root && tun && ip) {
            banner(
                "IP over InfiniBand: skipped (it needs root for network namespaces and TUN \
                 devices, and iproute2's `ip`); run `sudo softib demo` to see it",
            );
            return Ok(());
        }
        banner("IP over InfiniBand, as in the seed: ib0 (port 1) and ib1 (port 2) on each host, each host in its own network namespace");
        let hosts = ["test213".to_string(), "test214".to_string()];
        crate::fabric::create_netns(&self.dir, &hosts)?;
        for (host, last) in [("test213", 2), ("test214", 3)] {
            for (ifname, port, subnet) in [("ib0", "1", 0), ("ib1", "2", 1)] {
                self.must_ns(
                    host,
                    &[
                        "softib", "ipoib", "add", ifname, "--dev", "mlx4_0", "--port", port,
                    ],
                )?;
                let addr = format!("192.168.{subnet}.{last}/24");
                self.must_ns(host, &["ip", "addr", "add", &addr, "dev", ifname])?;
                self.must_ns(host, &["ip", "link", "set", ifname, "up"])?;
            }
        }
        self.must_ns("test213", &["ip", "-brief", "addr", "show"])?;
        let ping = Command::new("sh")
            .args(["-c", "command -v ping"])
            .output()
            .is_ok_and(|o| o.status.success());
        if !ping {
            note!(
                "{}",
                style(
                    "2",
                    "(`ping` is not installed — apt-get install iputils-ping — so no ping)"
                )
            );
            return Ok(());
        }
        // The first packet waits for IPoIB ARP and an SA PathRecord; -w bounds the whole run.
        self.must_ns(
            "test213",
            &["ping", "-c", "3", "-i", "0.2", "-w", "10", "192.168.0.3"],
        )?;
        self.must_ns(
            "test213",
            &["ping", "-c", "3", "-i", "0.2", "-w", "10", "192.168.1.3"],
        )?;
        self.must_ns("test214", &["softib", "ipoib", "show"])?;
        Ok(())
    }

    fn wait_active(&self, timeout: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let mut all = true;
            for h in ["test213", "test214"] {
                let mut ctx = softib::Context::open_at(&self.host(h))?;
                for d in ctx.devices()? {
                    all &= d.ports.iter().all(|p| p.state == 4);
                }
            }
            if all {
                return Ok(());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "the ports did not become Active within {timeout:?}; see the SM logs in {}",
                    self.dir.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn wait_for_socket(path: &Path, timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    while !path.exists() {
        if t0.elapsed() > timeout {
            bail!(
                "the fabric daemon did not create {} within {timeout:?}",
                path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs the demo.
pub fn run(args: &DemoArgs) -> Result<u8> {
    let t_start = Instant::now();
    let dir = std::env::temp_dir().join(format!("softib-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut demo = Demo {
        dir: dir.clone(),
        exe: std::env::current_exe().context("finding the softib executable")?,
        children: Vec::new(),
        keep: args.keep,
        finished: false,
    };
    let topo = dir.join("topoA.net");
    std::fs::write(&topo, TOPO_A)?;

    banner("Two hosts, test213 and test214, each with a dual-port MT4099 (mlx4_0), cabled back to back: port 1 <-> port 1, port 2 <-> port 2");
    note_part!(
        "{}",
        TOPO_A
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n")
    );
    note!();
    let topo_s = topo.display().to_string();
    let dir_s = dir.display().to_string();
    note!(
        "{} softib fabric run {topo_s} --dir {dir_s} &",
        style("2", "$")
    );
    let log = std::fs::File::create(dir.join("daemon.log"))?;
    let daemon = Command::new(&demo.exe)
        .args(["fabric", "run", &topo_s, "--dir", &dir_s])
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the fabric daemon")?;
    // Written at once, so that `fabric down` finds the daemon of a kept fabric even when a
    // step below fails.
    std::fs::write(dir.join("daemon.pid"), format!("{}\n", daemon.id()))?;
    demo.children.push(daemon);
    for h in ["test213", "test214"] {
        wait_for_socket(&demo.host(h).join(SOCKET_NAME), Duration::from_secs(10))?;
    }
    // Cables train within a few beacon periods.
    std::thread::sleep(Duration::from_millis(300));

    banner("The links are up, but no subnet manager runs: both ports sit in Initializing");
    demo.must("test213", "ibstat", &[])?;

    banner("So a benchmark cannot run yet — and says why, instead of waiting 120 seconds");
    let code = demo.run(
        "test213",
        "ib_send_bw",
        &["-a", "-c", "UD", "-d", "mlx4_0", "-i", "2", "127.0.0.1"],
    )?;
    note!("{}", style("2", &format!("(exit code {code})")));

    banner("Start opensm on each subnet (port 1 and port 2 of test213)");
    for (guid, n) in [("0xe41d2d0300b47d01", 1), ("0xe41d2d0300b47d02", 2)] {
        let logf = format!("{dir_s}/opensm-{n}.log");
        note!("{} opensm -g {guid} -f {logf} &", prompt("test213"));
        let i = demo.spawn(
            "test213",
            "opensm",
            &["-g", guid, "-f", &logf],
            &format!("opensm-{n}.stdout"),
        )?;
        let pid = demo.children[i].id();
        std::fs::write(dir.join(format!("sm-{n}.pid")), format!("{pid}\n"))?;
    }
    demo.wait_active(Duration::from_secs(20))?;
    for n in [1, 2] {
        note_part!(
            "{}",
            std::fs::read_to_string(dir.join(format!("opensm-{n}.stdout"))).unwrap_or_default()
        );
    }

    banner("The SM swept each subnet, assigned LIDs and moved the ports to Active");
    demo.must("test213", "ibstat", &[])?;
    demo.must("test213", "ibnodes", &[])?;

    banner("The seed's benchmark across port 2: UD send bandwidth over every size up to the MTU");
    let p = args.perftest_port;
    demo.perftest(
        "ib_send_bw",
        &["-a", "-c", "UD", "-d", "mlx4_0", "-i", "2"],
        p,
    )?;

    banner("RC RDMA write bandwidth and latency across port 1");
    demo.perftest("ib_write_bw", &["-d", "mlx4_0", "-i", "1"], p)?;
    demo.perftest("ib_write_lat", &["-d", "mlx4_0", "-i", "1"], p)?;

    demo.ipoib()?;

    if args.keep {
        note!(
            "\nThe fabric keeps running: `softib fabric exec test213 --dir {dir_s} -- ibstat`; \
             stop it with `softib fabric down --dir {dir_s}`."
        );
    }
    demo.finished = true;
    banner(&format!("Done in {:.1} s", t_start.elapsed().as_secs_f64()));
    Ok(exit::OK)
}
