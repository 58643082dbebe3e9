//! `softib fabric up|run|exec|status|down|gen`: whole fabrics from a topology file on this
//! machine.
//!
//! `up` starts one daemon process (`softib fabric run`, detached, logging to `DIR/daemon.log`)
//! that hosts every HCA and switch of the topology — each host with its own runtime directory
//! `DIR/hosts/<id>` — and, unless `--no-sm`, an SM on one CA port. `exec NODE -- CMD` runs a
//! command as that host (its `SOFTIB_RUNTIME_DIR`); `down` stops what `up` started.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Subcommand};
use softib_fabric::Topology;
use softib_hca::host::{host_dir, CablePlan, Daemon, SOCKET_NAME};

use crate::exit;

/// `softib fabric ...`.
#[derive(Debug, Subcommand)]
pub enum FabricCommand {
    /// Start every HCA and switch of a topology (and an SM) in the background.
    Up(UpArgs),
    /// Run the fabric daemon in the foreground (what `up` starts).
    Run(RunArgs),
    /// Run a command as one host of the fabric (with its devices).
    Exec(ExecArgs),
    /// Show the hosts of the fabric and their port states.
    Status(DirArgs),
    /// Stop everything `up` started and remove its directory.
    Down(DirArgs),
    /// Write a topology file.
    Gen(GenArgs),
    /// Pull out or plug in the cable of a host's port.
    Cable(CableArgs),
}

/// `softib fabric cable`.
#[derive(Debug, Args)]
pub struct CableArgs {
    /// The host and port: NODE:PORT (e.g. node3:1).
    pub end: String,
    /// What to do with the cable.
    #[arg(value_parser = ["pull", "plug"])]
    pub action: String,
    #[command(flatten)]
    pub dir: DirArgs,
}

/// Where a fabric lives.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// The fabric's directory [default: $SOFTIB_FABRIC_DIR, else <runtime dir>/fabric].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `softib fabric up`.
#[derive(Debug, Args)]
pub struct UpArgs {
    /// The topology (ibnetdiscover / ibsim format).
    pub topology: PathBuf,
    #[command(flatten)]
    pub dir: DirArgs,
    /// Where the SM runs: a CA and port [default: the first CA port in the file].
    #[arg(long, value_name = "NODE[:PORT]", conflicts_with = "no_sm")]
    pub sm: Option<String>,
    /// Start no SM: ports stay Initializing until one runs.
    #[arg(long)]
    pub no_sm: bool,
    /// Give every host a network namespace of its own (needs root), so that each host's IP
    /// interfaces (`softib ipoib add ib0 ...`) are its own; `exec` runs commands inside it.
    #[arg(long)]
    pub netns: bool,
}

/// `softib fabric run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The topology.
    pub topology: PathBuf,
    #[command(flatten)]
    pub dir: DirArgs,
    /// Run only these nodes (ids, comma-separated); the others run in other processes started
    /// with the same topology and --port-base.
    #[arg(
        long,
        value_delimiter = ',',
        requires = "port_base",
        value_name = "NODE,..."
    )]
    pub nodes: Vec<String>,
    /// Cable ends on fixed UDP ports from this one (in the file's link order), so that the
    /// parts of a fabric run in different processes find each other.
    #[arg(long, value_name = "PORT")]
    pub port_base: Option<u16>,
}

/// `softib switch`: one switch of a topology as a process of its own.
#[derive(Debug, Args)]
pub struct SwitchArgs {
    /// The topology (ibnetdiscover / ibsim format) that names the switch, its ports and its
    /// cables.
    pub topology: PathBuf,
    /// The switch (its id in the topology, e.g. sw1).
    pub node: String,
    /// Cable ends on fixed UDP ports from this one; run the rest of the fabric with
    /// `softib fabric run FILE --nodes ... --port-base` and the same base.
    #[arg(long, value_name = "PORT")]
    pub port_base: u16,
    #[command(flatten)]
    pub dir: DirArgs,
}

/// `softib fabric exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The host (node id in the topology, e.g. test213).
    pub node: String,
    #[command(flatten)]
    pub dir: DirArgs,
    /// The command and its arguments (softib tools by their names: ibstat, opensm, ...).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// `softib fabric gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// Kind of topology.
    #[arg(value_parser = ["fat-tree"])]
    pub kind: String,
    /// Number of hosts.
    #[arg(long, value_name = "N")]
    pub hosts: usize,
}

/// The default fabric directory.
pub fn default_dir() -> PathBuf {
    std::env::var_os("SOFTIB_FABRIC_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| softib::runtime_dir().join("fabric"))
}

fn dir_of(d: &DirArgs) -> PathBuf {
    d.dir.clone().unwrap_or_else(default_dir)
}

/// Runs `softib fabric ...`.
pub fn run(cmd: FabricCommand) -> Result<u8> {
    match cmd {
        FabricCommand::Up(a) => up(&a),
        FabricCommand::Run(a) => {
            let plan = match a.port_base {
                None => CablePlan::AllHere,
                Some(port_base) => CablePlan::Fixed {
                    nodes: a.nodes.iter().cloned().collect(),
                    port_base,
                },
            };
            run_daemon(&a.topology, &dir_of(&a.dir), &plan)
        }
        FabricCommand::Exec(a) => exec(&a),
        FabricCommand::Status(d) => status(&dir_of(&d)),
        FabricCommand::Down(d) => down(&dir_of(&d)),
        FabricCommand::Cable(c) => {
            let (node, port) = parse_node_port(&c.end)?;
            let dir = dir_of(&c.dir);
            let mut ctx = softib::Context::open_at(&host_dir(&dir, &node))
                .with_context(|| format!("host {node} of the fabric at {}", dir.display()))?;
            ctx.set_port_enabled(0, port, c.action == "plug")?;
            note!(
                "{node} port {port}: cable {}",
                if c.action == "plug" {
                    "plugged in"
                } else {
                    "pulled out"
                }
            );
            Ok(exit::OK)
        }
        FabricCommand::Gen(g) => {
            let t = Topology::fat_tree(g.hosts).map_err(|e| anyhow!("{e}"))?;
            std::io::stdout().write_all(t.to_string().as_bytes())?;
            Ok(exit::OK)
        }
    }
}

fn read_topology(path: &Path) -> Result<Topology> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading topology {}", path.display()))?;
    Topology::parse(&text).map_err(|e| anyhow!("{}: {e}", path.display()))
}

/// `softib switch FILE NODE --port-base P`.
pub fn switch(a: &SwitchArgs) -> Result<u8> {
    let topo = read_topology(&a.topology)?;
    match topo.node_index(&a.node).map(|i| &topo.nodes()[i]) {
        Some(n) if n.is_switch() => {}
        Some(_) => bail!(
            "{} is a CA in {}; run hosts with `softib fabric run FILE --nodes {} --port-base {}`",
            a.node,
            a.topology.display(),
            a.node,
            a.port_base
        ),
        None => bail!("no node {} in {}", a.node, a.topology.display()),
    }
    let plan = CablePlan::Fixed {
        nodes: [a.node.clone()].into_iter().collect(),
        port_base: a.port_base,
    };
    run_daemon(&a.topology, &dir_of(&a.dir), &plan)
}

fn run_daemon(topology: &Path, dir: &Path, plan: &CablePlan) -> Result<u8> {
    let topo = read_topology(topology)?;
    if let CablePlan::Fixed { nodes, .. } = plan {
        for n in nodes {
            if topo.node_index(n).is_none() {
                bail!("--nodes {n}: no such node in {}", topology.display());
            }
        }
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut daemon = Daemon::from_topology_part(&topo, dir, "127.0.0.1".parse()?, seed(), plan)
        .with_context(|| format!("starting the fabric of {}", topology.display()))?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    eprintln!(
        "softibd: fabric {} up: {} nodes, {} cables, directory {}",
        topology.display(),
        topo.nodes().len(),
        topo.link_count(),
        dir.display()
    );
    daemon.run(&stop)?;
    eprintln!("softibd: stopped");
    Ok(exit::OK)
}

fn seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}

fn pid_alive(pid: i32) -> bool {
    rustix::process::Pid::from_raw(pid)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Starts `softib ARGS...` detached (own session, output to `log`), returns its pid.
pub fn spawn_detached(
    args: &[String],
    log: &Path,
    env: &[(&str, &Path)],
) -> Result<std::process::Child> {
    let exe = std::env::current_exe().context("finding the softib executable")?;
    let out = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out.try_clone()?)
        .stderr(out);
    for (k, v) in env {
        cmd.env(k, v);
    }
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    cmd.spawn().context("starting a softib process")
}

fn up(a: &UpArgs) -> Result<u8> {
    let dir = dir_of(&a.dir);
    let topo = read_topology(&a.topology)?;
    if let Some(pid) = read_pid(&dir.join("daemon.pid")) {
        if pid_alive(pid) {
            bail!(
                "a fabric already runs in {} (pid {pid}); stop it with `softib fabric down --dir {}`",
                dir.display(),
                dir.display()
            );
        }
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let topo_path = std::fs::canonicalize(&a.topology)?;
    std::fs::write(dir.join("topology.net"), topo.to_string())?;
    let pid = spawn_detached(
        &[
            "fabric".into(),
            "run".into(),
            topo_path.display().to_string(),
            "--dir".into(),
            dir.display().to_string(),
        ],
        &dir.join("daemon.log"),
        &[],
    )?
    .id();
    std::fs::write(dir.join("daemon.pid"), format!("{pid}\n"))?;
    let hosts: Vec<String> = topo
        .nodes()
        .iter()
        .filter(|n| !n.is_switch())
        .map(|n| n.id.clone())
        .collect();
    wait_for_hosts(&dir, &hosts, pid as i32)?;
    if a.netns {
        create_netns(&dir, &hosts)?;
    }
    note!(
        "fabric up: {} hosts, {} switches, {} cables in {} (daemon pid {pid})",
        hosts.len(),
        topo.nodes().len() - hosts.len(),
        topo.link_count(),
        dir.display()
    );
    if !a.no_sm {
        let (node, port) = match &a.sm {
            Some(s) => parse_node_port(s)?,
            None => {
                let first = hosts
                    .first()
                    .ok_or_else(|| anyhow!("the topology has no CA to run an SM on"))?;
                (first.clone(), 1)
            }
        };
        let idx = topo
            .node_index(&node)
            .ok_or_else(|| anyhow!("--sm {node}: no such node in the topology"))?;
        let guid = topo.nodes()[idx]
            .port_guid(port)
            .ok_or_else(|| anyhow!("--sm {node}:{port}: no such port"))?;
        let sm_pid = start_sm(&dir, &node, guid.0, &[])?.id();
        note!(
            "opensm started on {node} port {port} (guid 0x{:016x}, pid {sm_pid})",
            guid.0
        );
    }
    Ok(exit::OK)
}

/// The network namespace of `host` in the fabric at `dir`: unique per fabric directory, so
/// that two fabrics on one machine do not share names.
pub fn netns_name(dir: &Path, host: &str) -> String {
    // FNV-1a of the directory: short and stable.
    let mut h: u32 = 0x811c_9dc5;
    for b in dir.as_os_str().as_encoded_bytes() {
        h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
    }
    format!("sib{:04x}-{host}", h & 0xffff)
}

/// The hosts of the fabric at `dir` that have namespaces: host → namespace.
pub fn read_netns(dir: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(dir.join("netns"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(h, n)| (h.to_string(), n.to_string()))
        .collect()
}

pub fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running `ip` (iproute2 is needed for --netns)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

pub fn create_netns(dir: &Path, hosts: &[String]) -> Result<()> {
    let mut lines = String::new();
    for h in hosts {
        let name = netns_name(dir, h);
        // A namespace left behind by a fabric that was not taken down goes first.
        let _ = ip(&["netns", "del", &name]);
        ip(&["netns", "add", &name]).context("--netns needs root (CAP_SYS_ADMIN)")?;
        ip(&["-n", &name, "link", "set", "lo", "up"])?;
        lines.push_str(&format!("{h} {name}\n"));
        std::fs::write(dir.join("netns"), &lines)?;
    }
    Ok(())
}

/// Starts `opensm -g GUID` as `node` in the background; its pid goes to `DIR/sm-<guid>.pid`.
pub fn start_sm(
    dir: &Path,
    node: &str,
    guid: u64,
    extra: &[String],
) -> Result<std::process::Child> {
    let hdir = host_dir(dir, node);
    let mut args = vec![
        "opensm".to_string(),
        "-g".into(),
        format!("0x{guid:016x}"),
        "-f".into(),
        dir.join(format!("opensm-{guid:016x}.log"))
            .display()
            .to_string(),
    ];
    args.extend(extra.iter().cloned());
    let child = spawn_detached(
        &args,
        &dir.join(format!("opensm-{guid:016x}.stdout")),
        &[("SOFTIB_RUNTIME_DIR", &hdir), ("OSM_CACHE_DIR", dir)],
    )?;
    std::fs::write(
        dir.join(format!("sm-{guid:016x}.pid")),
        format!("{}\n", child.id()),
    )?;
    Ok(child)
}

fn parse_node_port(s: &str) -> Result<(String, u8)> {
    match s.rsplit_once(':') {
        Some((n, p)) => Ok((
            n.to_string(),
            p.parse()
                .map_err(|_| anyhow!("{s}: the port after ':' must be a number"))?,
        )),
        None => Ok((s.to_string(), 1)),
    }
}

/// Waits until every host of the fabric has its control socket and its sysfs-style tree (the
/// daemon writes the trees in its first turn; libibumad finds no CA without them, so a tool
/// started right after `fabric up` would fail). `abi_version` is written after a host's
/// device files.
fn wait_for_hosts(dir: &Path, hosts: &[String], pid: i32) -> Result<()> {
    let t0 = Instant::now();
    let timeout = Duration::from_secs(30);
    let ready = |h: &String| {
        let d = host_dir(dir, h);
        d.join(SOCKET_NAME).exists() && d.join("sys/class/infiniband_verbs/abi_version").exists()
    };
    loop {
        let missing: Vec<&String> = hosts.iter().filter(|h| !ready(h)).collect();
        if missing.is_empty() {
            return Ok(());
        }
        if !pid_alive(pid) {
            let log = std::fs::read_to_string(dir.join("daemon.log")).unwrap_or_default();
            bail!("the fabric daemon exited during start-up:\n{log}");
        }
        if t0.elapsed() > timeout {
            bail!(
                "waited {timeout:?} for the control sockets and device files of {} host(s) \
                 (e.g. {}); see {}",
                missing.len(),
                missing[0],
                dir.join("daemon.log").display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The softib tools that `fabric exec` runs from this binary when they are not on PATH.
pub const TOOLS: &[&str] = &[
    "ibstat",
    "ibstatus",
    "ibv_devices",
    "ibv_devinfo",
    "ibnodes",
    "ibhosts",
    "ibswitches",
    "ibnetdiscover",
    "iblinkinfo",
    "smpquery",
    "perfquery",
    "saquery",
    "sminfo",
    "ibaddr",
    "ibroute",
    "opensm",
    "ibv_rc_pingpong",
    "ibv_uc_pingpong",
    "ibv_ud_pingpong",
    "ib_send_bw",
    "ib_send_lat",
    "ib_write_bw",
    "ib_write_lat",
    "ib_read_bw",
    "ib_read_lat",
    "ib_atomic_bw",
    "ib_atomic_lat",
];

fn exec(a: &ExecArgs) -> Result<u8> {
    let dir = dir_of(&a.dir);
    let hdir = host_dir(&dir, &a.node);
    if !hdir.join(SOCKET_NAME).exists() {
        bail!(
            "no host {} in the fabric at {} (is it up? `softib fabric status --dir {}`)",
            a.node,
            dir.display(),
            dir.display()
        );
    }
    let (prog, rest) = a
        .command
        .split_first()
        .ok_or_else(|| anyhow!("no command given after --"))?;
    let ns = read_netns(&dir)
        .into_iter()
        .find(|(h, _)| *h == a.node)
        .map(|(_, n)| n);
    let (exe, first): (std::ffi::OsString, Option<&str>) =
        if TOOLS.contains(&prog.as_str()) || prog == "softib" || prog == "ipoib" {
            (
                std::env::current_exe()?.into_os_string(),
                (prog != "softib").then_some(prog.as_str()),
            )
        } else {
            (prog.into(), None)
        };
    // In a host with a namespace of its own, `ip netns exec` enters it and runs the command.
    let mut cmd = match &ns {
        Some(n) => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", n]).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    if let Some(f) = first {
        cmd.arg(f);
    }
    cmd.args(rest).env("SOFTIB_RUNTIME_DIR", &hdir);
    if first.is_none() && prog != "softib" {
        // Any other program runs on the host's HCA through softib's libibverbs.
        match crate::dropin::lib_dir() {
            Ok(d) => {
                cmd.env("LD_LIBRARY_PATH", crate::dropin::library_path(&d));
                crate::dropin::device_files(&hdir, "softib fabric exec");
            }
            Err(e) => eprintln!("softib fabric exec: {e:#}; {prog} runs without it"),
        }
    }
    // An SM run as a host of this fabric keeps its guid2lid with the fabric.
    if std::env::var_os("OSM_CACHE_DIR").is_none() {
        cmd.env("OSM_CACHE_DIR", &dir);
    }
    // Become the command (exec), so that signals, exit status and the process tree are the
    // command's own: `kill` of what `fabric exec` started stops the tool itself.
    use std::os::unix::process::CommandExt;
    let e = cmd.exec();
    Err(anyhow!("running {prog} as {}: {e}", a.node))
}

fn status(dir: &Path) -> Result<u8> {
    let hosts_dir = dir.join("hosts");
    let mut hosts: Vec<String> = std::fs::read_dir(&hosts_dir)
        .with_context(|| {
            format!(
                "no fabric at {} (start one with `softib fabric up`)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    hosts.sort();
    let pid = read_pid(&dir.join("daemon.pid"));
    match pid {
        Some(p) if pid_alive(p) => outln!("fabric daemon: pid {p}, directory {}", dir.display())?,
        _ => outln!("fabric daemon: not running, directory {}", dir.display())?,
    }
    for h in hosts {
        match softib::Context::open_at(&host_dir(dir, &h)) {
            Ok(mut ctx) => {
                for d in ctx.devices()? {
                    let ports: Vec<String> = d
                        .ports
                        .iter()
                        .map(|p| {
                            format!(
                                "port {} {} lid {} sm {}",
                                p.number,
                                p.state_name(),
                                p.lid.0,
                                p.sm_lid.0
                            )
                        })
                        .collect();
                    outln!("{h:<12} {}  {}", d.name, ports.join(", "))?;
                }
            }
            Err(e) => outln!("{h:<12} unreachable: {e}")?,
        }
    }
    Ok(exit::OK)
}

fn down(dir: &Path) -> Result<u8> {
    if !dir.exists() {
        note!("no fabric at {}", dir.display());
        return Ok(exit::OK);
    }
    let mut pids = Vec::new();
    for e in std::fs::read_dir(dir)?.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".pid") {
            if let Some(p) = read_pid(&e.path()) {
                pids.push((name, p));
            }
        }
    }
    // SMs first, the daemon last, so no SM logs a lost fabric on its way out.
    pids.sort_by_key(|(n, _)| n == "daemon.pid");
    for (name, pid) in &pids {
        if let Some(p) = rustix::process::Pid::from_raw(*pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        let t0 = Instant::now();
        while pid_alive(*pid) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if pid_alive(*pid) {
            if let Some(p) = rustix::process::Pid::from_raw(*pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            eprintln!("{name}: pid {pid} did not stop within 5 s; killed");
        }
    }
    for (_, ns) in read_netns(dir) {
        if let Err(e) = ip(&["netns", "del", &ns]) {
            eprintln!("{e:#}");
        }
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    note!(
        "fabric down: {} process(es) stopped, {} removed",
        pids.len(),
        dir.display()
    );
    Ok(exit::OK)
}
