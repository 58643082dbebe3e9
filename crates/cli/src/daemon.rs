//! `softib daemon` (softibd, the HCA of this host) and `softib link add|show|del` (RoCEv2
//! devices, as `rdma link` manages rxe).

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Subcommand};
use softib::LinkConfig;
use softib_hca::host::{Admission, Daemon, SOCKET_NAME};

use crate::exit;

/// `softib daemon`.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Run in the background (logs to DIR/softibd.log).
    #[arg(long)]
    detach: bool,
    /// Write the daemon's process id here [default with --detach: DIR/softibd.pid].
    #[arg(long, value_name = "FILE")]
    pidfile: Option<PathBuf>,
    /// Give these users verbs too (names or uids, comma-separated); managing the HCA —
    /// faults, capture, ports, links, the SM, SMP Sets — stays with this user and root.
    #[arg(long, value_name = "USER,...", value_delimiter = ',')]
    allow_users: Vec<String>,
    /// Give the members of this group verbs too (a name or gid).
    #[arg(long, value_name = "GROUP")]
    allow_group: Vec<String>,
}

/// Who `softib daemon` admits besides its user and root.
fn admission(a: &DaemonArgs) -> Result<Admission> {
    use nix::unistd::{Group, User};
    let mut adm = Admission::owner_only();
    for u in &a.allow_users {
        let uid = id_or_name(u, "--allow-users", "user", |n| {
            User::from_name(n).map(|u| u.map(|u| u.uid.as_raw()))
        })?;
        adm.users.insert(uid);
    }
    for g in &a.allow_group {
        let gid = id_or_name(g, "--allow-group", "group", |n| {
            Group::from_name(n).map(|g| g.map(|g| g.gid.as_raw()))
        })?;
        adm.groups.insert(gid);
    }
    Ok(adm)
}

/// `word` as a numeric id, or the id of the `what` (user, group) it names.
fn id_or_name(
    word: &str,
    flag: &str,
    what: &str,
    lookup: impl FnOnce(&str) -> nix::Result<Option<u32>>,
) -> Result<u32> {
    if let Ok(id) = word.parse::<u32>() {
        return Ok(id);
    }
    lookup(word)
        .with_context(|| format!("looking up {what} {word}"))?
        .ok_or_else(|| anyhow!("{flag}: there is no {what} {word} on this host"))
}

/// `softib link ...`.
#[derive(Debug, Subcommand)]
pub enum LinkCommand {
    /// Add a RoCEv2 device: `softib link add rxe0 type rxe netdev eth0 [--addr IP]`.
    Add(LinkAddArgs),
    /// List the RoCE devices.
    Show {
        /// JSON, like `rdma -j link show`.
        #[arg(long, short = 'j')]
        json: bool,
    },
    /// Remove a RoCE device.
    Del {
        /// Its name.
        name: String,
    },
    /// Inject faults on a device's egress: `softib link set rxe0 fault loss 1% dup 0.5%`
    /// (`DEV/PORT` for one port of an IB device; `fault none` clears).
    Set {
        /// DEV or DEV/PORT.
        dev: String,
        /// `fault` and the faults: loss P, dup P, reorder P, corrupt P, delay D, seed N, none.
        #[arg(num_args = 1.., required = true, allow_hyphen_values = true)]
        words: Vec<String>,
    },
    /// Show the faults of a device's ports and what they did.
    Faults {
        /// The device.
        dev: String,
    },
}

/// `softib capture DEV [-w FILE] [-c COUNT] [--duration SEC]`.
#[derive(Debug, Args)]
pub struct CaptureArgs {
    /// The device (`mlx4_0`, `rxe0`).
    dev: String,
    /// The pcap file [default: DEV.pcap].
    #[arg(short = 'w', value_name = "FILE")]
    file: Option<PathBuf>,
    /// Stop after this many packets.
    #[arg(short = 'c', value_name = "COUNT")]
    count: Option<u64>,
    /// Stop after this many seconds [default: until Ctrl-C].
    #[arg(long, value_name = "SEC")]
    duration: Option<f64>,
}

/// Runs `softib capture`.
pub fn capture(a: &CaptureArgs) -> Result<u8> {
    let mut ctx = softib::Context::open()?;
    let dev = ctx.device_index(&a.dev)?;
    let file = a
        .file
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("{}.pcap", a.dev)));
    let file = if file.is_absolute() {
        file
    } else {
        std::env::current_dir()?.join(file)
    };
    ctx.capture(dev, Some(&file))?;
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    eprintln!("softib capture: {} -> {}", a.dev, file.display());
    let t0 = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(50));
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            break;
        }
        if a.duration.is_some_and(|d| t0.elapsed().as_secs_f64() >= d) {
            break;
        }
        if let Some(c) = a.count {
            if ctx.captured(dev)? >= c {
                break;
            }
        }
    }
    let n = ctx.capture(dev, None)?;
    eprintln!("{n} packets captured");
    Ok(exit::OK)
}

/// `softib link add NAME type rxe netdev IFACE [--addr IP] [--udp-port N]`.
#[derive(Debug, Args)]
pub struct LinkAddArgs {
    /// The device name (rxe0).
    name: String,
    /// `type rxe netdev IFACE`, as `rdma link add` takes it.
    #[arg(num_args = 4, value_names = ["type", "TYPE", "netdev", "IFACE"], required = true)]
    words: Vec<String>,
    /// The address to use [default: the interface's first IPv4 address].
    #[arg(long, value_name = "IP")]
    addr: Option<IpAddr>,
    /// The UDP port [default: 4791, RoCEv2's].
    #[arg(long, value_name = "N", default_value_t = 4791)]
    udp_port: u16,
}

/// Runs softibd.
pub fn daemon(a: &DaemonArgs) -> Result<u8> {
    let admission = admission(a)?;
    let dir = softib::runtime_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    if a.detach {
        let mut args = vec!["daemon".to_string()];
        for u in &a.allow_users {
            args.extend(["--allow-users".into(), u.clone()]);
        }
        for g in &a.allow_group {
            args.extend(["--allow-group".into(), g.clone()]);
        }
        let pidfile = a.pidfile.clone().unwrap_or_else(|| dir.join("softibd.pid"));
        args.extend(["--pidfile".into(), pidfile.display().to_string()]);
        let child = crate::fabric::spawn_detached(&args, &dir.join("softibd.log"), &[])?;
        let pid = child.id();
        // Started means the control socket answers.
        let t0 = Instant::now();
        loop {
            if softib::Context::open_at(&dir).is_ok() {
                break;
            }
            if t0.elapsed() > Duration::from_secs(10) {
                let log = std::fs::read_to_string(dir.join("softibd.log")).unwrap_or_default();
                bail!("softibd (pid {pid}) did not start within 10 s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        note!(
            "softibd running, pid {pid}, runtime directory {}",
            dir.display()
        );
        return Ok(exit::OK);
    }
    let host = rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64);
    let (mut d, warnings) = Daemon::single_host(&host, &dir, seed)
        .with_context(|| format!("starting softibd in {}", dir.display()))?;
    for w in warnings {
        eprintln!("softibd: {w}");
    }
    if admission.admits_others() {
        let users: Vec<String> = admission.users.iter().map(u32::to_string).collect();
        let groups: Vec<String> = admission.groups.iter().map(u32::to_string).collect();
        eprintln!(
            "softibd: verbs also for uid [{}] and gid [{}]; management for uid {} and root only",
            users.join(","),
            groups.join(","),
            admission.owner
        );
    }
    d.set_admission(admission)
        .with_context(|| format!("admitting users to {}", dir.display()))?;
    if let Some(p) = &a.pidfile {
        std::fs::write(p, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    eprintln!(
        "softibd: serving {} ({})",
        dir.join(SOCKET_NAME).display(),
        host
    );
    d.run(&stop)?;
    if let Some(p) = &a.pidfile {
        let _ = std::fs::remove_file(p);
    }
    eprintln!("softibd: stopped");
    Ok(exit::OK)
}

/// The first IPv4 address of an interface (else its first IPv6 address).
fn address_of(iface: &str) -> Result<IpAddr> {
    let addrs = nix::ifaddrs::getifaddrs().context("listing interface addresses")?;
    let mut v6 = None;
    for a in addrs.filter(|a| a.interface_name == iface) {
        let Some(sa) = a.address else { continue };
        if let Some(v4) = sa.as_sockaddr_in() {
            return Ok(IpAddr::V4(v4.ip()));
        }
        if let Some(s6) = sa.as_sockaddr_in6() {
            v6.get_or_insert(IpAddr::V6(s6.ip()));
        }
    }
    v6.ok_or_else(|| anyhow!("interface {iface} has no IP address (give one with --addr)"))
}

/// Runs `softib link ...`.
pub fn link(cmd: LinkCommand) -> Result<u8> {
    let mut ctx = softib::Context::open()?;
    match cmd {
        LinkCommand::Add(a) => {
            if a.words[0] != "type" || a.words[2] != "netdev" {
                bail!(
                    "usage: softib link add NAME type rxe netdev IFACE [--addr IP] [--udp-port N]"
                );
            }
            if a.words[1] != "rxe" {
                bail!(
                    "link type {} is not supported: softib adds RoCEv2 devices (type rxe)",
                    a.words[1]
                );
            }
            let netdev = a.words[3].clone();
            softib_net::netdev::netdev(&netdev)?;
            let addr = match a.addr {
                Some(ip) => ip,
                None => address_of(&netdev)?,
            };
            ctx.link_add(LinkConfig {
                name: a.name,
                netdev,
                addr,
                udp_port: a.udp_port,
            })?;
            Ok(exit::OK)
        }
        LinkCommand::Del { name } => {
            ctx.link_del(&name)?;
            Ok(exit::OK)
        }
        LinkCommand::Set { dev, words } => {
            let (name, port) = match dev.split_once('/') {
                Some((n, p)) => (
                    n.to_string(),
                    p.parse::<u8>()
                        .map_err(|_| anyhow!("{dev}: the port after '/' must be a number"))?,
                ),
                None => (dev.clone(), 0),
            };
            let Some(("fault", spec)) = words.split_first().map(|(k, r)| (k.as_str(), r)) else {
                bail!("usage: softib link set DEV[/PORT] fault loss 1% dup 0.5% reorder 1% corrupt 0.1% delay 5ms | fault loss=10%,dup=0.1,reorder=10%,delay=500,corrupt=1% | fault off");
            };
            let spec = softib::FaultSpec::parse(spec).map_err(|e| anyhow!("{e}"))?;
            let idx = ctx.device_index(&name)?;
            ctx.set_faults(idx, port, spec)?;
            Ok(exit::OK)
        }
        LinkCommand::Faults { dev } => {
            let idx = ctx.device_index(&dev)?;
            for (port, spec, st) in ctx.faults(idx)? {
                outln!(
                    "link {dev}/{port} fault {spec}  lost {} duplicated {} reordered {} corrupted {} delayed {}",
                    st.lost, st.duplicated, st.reordered, st.corrupted, st.delayed
                )?;
            }
            Ok(exit::OK)
        }
        LinkCommand::Show { json } => {
            let links = ctx.links()?;
            // The live faults of each link's port, as `softib link set ... fault` set them.
            let mut faults = std::collections::BTreeMap::new();
            for (c, _) in &links {
                if let Ok(idx) = ctx.device_index(&c.name) {
                    if let Some((_, spec, _)) = ctx
                        .faults(idx)?
                        .into_iter()
                        .find(|(_, spec, _)| !spec.is_none())
                    {
                        faults.insert(c.name.clone(), spec.to_string());
                    }
                }
            }
            let mut out = std::io::stdout().lock();
            if json {
                let v: Vec<serde_json::Value> = links
                    .iter()
                    .map(|(c, up)| {
                        serde_json::json!({
                            "ifname": format!("{}/1", c.name),
                            "ifindex": 0,
                            "port": 1,
                            "state": if *up { "ACTIVE" } else { "DOWN" },
                            "physical_state": if *up { "LINK_UP" } else { "DISABLED" },
                            "netdev": c.netdev,
                            "addr": c.addr.to_string(),
                            "udp_port": c.udp_port,
                            "fault": faults.get(&c.name).cloned().unwrap_or_else(|| "none".into()),
                        })
                    })
                    .collect();
                writeln!(out, "{}", serde_json::to_string(&v)?)?;
            } else {
                // `rdma link show`'s layout, with softib's address and port appended.
                for (c, up) in links {
                    let fault = faults
                        .get(&c.name)
                        .map(|f| format!("fault {f} "))
                        .unwrap_or_default();
                    writeln!(
                        out,
                        "link {}/1 state {} physical_state {} netdev {} addr {} udp_port {} {fault}",
                        c.name,
                        if up { "ACTIVE" } else { "DOWN" },
                        if up { "LINK_UP" } else { "DISABLED" },
                        c.netdev,
                        c.addr,
                        c.udp_port
                    )?;
                }
            }
            Ok(exit::OK)
        }
    }
}

/// `softib res [-v]`: objects per device, like `rdma res show` (with `-v`, per process).
pub fn res(verbose: bool) -> Result<u8> {
    let mut ctx = softib::Context::open()?;
    let devs = ctx.devices()?;
    let mine = std::process::id();
    let list: Vec<softib::ClientResources> = ctx
        .resources()?
        .into_iter()
        .filter(|c| c.pid != mine)
        .collect();
    let mut out = std::io::stdout().lock();
    for (i, d) in devs.iter().enumerate() {
        let mut t = [0u32; 5];
        let mut ctxs = 0;
        for c in &list {
            if let Some((_, n)) = c.per_device.iter().find(|(dev, _)| *dev == i as u32) {
                for k in 0..5 {
                    t[k] += n[k];
                }
                if n.iter().any(|&x| x > 0) {
                    ctxs += 1;
                }
            }
        }
        writeln!(
            out,
            "{i}: {}: pd {} cq {} qp {} cm_id 0 mr {} ctx {ctxs} srq 0 ",
            d.name, t[0], t[1], t[2], t[3]
        )?;
    }
    if verbose {
        for c in &list {
            for (dev, n) in &c.per_device {
                if n.iter().any(|&x| x > 0) {
                    let name = devs.get(*dev as usize).map_or("?", |d| d.name.as_str());
                    writeln!(
                        out,
                        "  pid {} comm {} dev {name}: pd {} cq {} qp {} mr {} ah {} buffers {}",
                        c.pid, c.program, n[0], n[1], n[2], n[3], n[4], c.buffers
                    )?;
                }
            }
        }
    }
    Ok(exit::OK)
}
