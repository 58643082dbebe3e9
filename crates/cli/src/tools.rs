//! The InfiniBand tools people know — `ibstat`, `ibv_devinfo`, `ibnodes`, `ibnetdiscover`,
//! `opensm`, ... — over a softib host's daemon. Each is a thin shell: arguments in, the
//! `softib` API and the sans-IO machines of `softib-fabric` in the middle, `softib-diag`'s
//! formatting out.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use softib::{Context, DeviceInfo, MadQp};
use softib_diag::device::{DeviceView, GidEntry, GidType, IbstatArgs, LinkLayer, PortView};
use softib_fabric::discover::{Discovery, DiscoveryConfig};
use softib_fabric::subnet::Subnet;
use softib_wire::mad::attr::{NodeType, PortPhysicalState, PortState};
use softib_wire::mad::{smp, MAD_LEN};

use crate::exit;

/// Converts the daemon's view of a device into what the formatters print: the values
/// `softib::verbs_attr` computes, which the drop-in libibverbs returns too.
pub fn device_view(d: &DeviceInfo) -> DeviceView {
    let v = softib::verbs_attr::device_attr(d);
    let attrs = softib_diag::device::DeviceAttrs {
        fw_ver: v.fw_ver,
        vendor_id: v.vendor_id,
        vendor_part_id: v.vendor_part_id,
        hw_ver: v.hw_ver,
        phys_port_cnt: v.phys_port_cnt,
        max_mr_size: v.max_mr_size,
        page_size_cap: v.page_size_cap,
        max_qp: v.max_qp,
        max_qp_wr: v.max_qp_wr,
        device_cap_flags: v.device_cap_flags,
        device_cap_flags_ex: u64::from(v.device_cap_flags),
        max_sge: v.max_sge,
        max_sge_rd: v.max_sge_rd,
        max_cq: v.max_cq,
        max_cqe: v.max_cqe,
        max_mr: v.max_mr,
        max_pd: v.max_pd,
        max_qp_rd_atom: v.max_qp_rd_atom,
        max_res_rd_atom: v.max_res_rd_atom,
        max_qp_init_rd_atom: v.max_qp_init_rd_atom,
        atomic_cap: v.atomic_cap,
        max_mw: v.max_mw,
        max_mcast_grp: v.max_mcast_grp,
        max_mcast_qp_attach: v.max_mcast_qp_attach,
        max_total_mcast_qp_attach: v.max_total_mcast_qp_attach,
        max_ah: v.max_ah,
        max_srq: v.max_srq,
        max_srq_wr: v.max_srq_wr,
        max_srq_sge: v.max_srq_sge,
        max_pkeys: v.max_pkeys,
        local_ca_ack_delay: v.local_ca_ack_delay,
        num_comp_vectors: v.num_comp_vectors,
        ..Default::default()
    };
    DeviceView {
        name: d.name.clone(),
        node_type: NodeType::Ca,
        ca_type: d.ca_type.clone(),
        fw_ver: d.fw_ver.clone(),
        // sysfs hw_rev is empty for rxe (no hardware) and the revision in hex otherwise.
        hw_rev: if d.ca_type.is_empty() {
            String::new()
        } else {
            format!("{:x}", d.hw_ver)
        },
        node_guid: d.node_guid,
        sys_image_guid: d.sys_image_guid,
        attrs,
        ports: d
            .ports
            .iter()
            .filter_map(|p| Some((p, softib::verbs_attr::port_attr(d, p.number)?)))
            .map(|(p, a)| PortView {
                number: p.number,
                state: PortState::from(a.state),
                phys_state: PortPhysicalState::from(a.phys_state),
                active_width: a.active_width,
                active_speed: a.active_speed,
                lid: a.lid,
                lmc: a.lmc,
                sm_lid: a.sm_lid,
                sm_sl: a.sm_sl,
                capability_mask: a.port_cap_flags,
                capability_mask2: a.port_cap_flags2,
                port_guid: p.port_guid,
                link_layer: if a.link_layer_ib {
                    LinkLayer::InfiniBand
                } else {
                    LinkLayer::Ethernet
                },
                max_mtu: a.max_mtu,
                active_mtu: a.active_mtu,
                max_msg_sz: a.max_msg_sz,
                max_vl_num: a.max_vl_num,
                bad_pkey_cntr: a.bad_pkey_cntr,
                qkey_viol_cntr: a.qkey_viol_cntr,
                pkey_tbl_len: a.pkey_tbl_len,
                gid_tbl_len: a.gid_tbl_len,
                subnet_timeout: a.subnet_timeout,
                init_type_reply: a.init_type_reply,
                gids: p
                    .gids
                    .iter()
                    .enumerate()
                    .map(|(i, g)| GidEntry {
                        index: i as u16,
                        gid: *g,
                        gid_type: match softib::verbs_attr::gid_type(p) {
                            softib::verbs_attr::GidType::IbRoceV1 => GidType::IbRoceV1,
                            softib::verbs_attr::GidType::RoceV2 => GidType::RoceV2,
                        },
                    })
                    .collect(),
                ..PortView::default()
            })
            .collect(),
    }
}

fn devices() -> Result<Vec<DeviceView>> {
    let mut ctx = Context::open()?;
    Ok(ctx.devices()?.iter().map(device_view).collect())
}

/// Pulls the value of a flag that takes one (`-d mlx4_0`, `-dmlx4_0`, `--ib-dev=x`).
struct Flags {
    args: Vec<String>,
}

impl Flags {
    fn new(args: &[String]) -> Flags {
        Flags {
            args: args.to_vec(),
        }
    }

    fn take_switch(&mut self, names: &[&str]) -> bool {
        let before = self.args.len();
        self.args.retain(|a| !names.contains(&a.as_str()));
        before != self.args.len()
    }

    fn take_value(&mut self, names: &[&str]) -> Result<Option<String>> {
        let mut i = 0;
        while i < self.args.len() {
            let a = self.args[i].clone();
            for n in names {
                if a == *n {
                    if i + 1 >= self.args.len() {
                        bail!("option {n} needs a value");
                    }
                    let v = self.args.remove(i + 1);
                    self.args.remove(i);
                    return Ok(Some(v));
                }
                if n.starts_with("--") {
                    if let Some(v) = a.strip_prefix(&format!("{n}=")) {
                        let v = v.to_string();
                        self.args.remove(i);
                        return Ok(Some(v));
                    }
                } else if a.len() > n.len() && a.starts_with(n) {
                    let v = a[n.len()..].to_string();
                    self.args.remove(i);
                    return Ok(Some(v));
                }
            }
            i += 1;
        }
        Ok(None)
    }

    /// What is left must be positional; an unknown flag is refused by name.
    fn positional(self, tool: &str) -> Result<Vec<String>> {
        if let Some(f) = self.args.iter().find(|a| a.starts_with('-') && a.len() > 1) {
            bail!("{tool}: option {f} is not supported by softib's {tool}");
        }
        Ok(self.args)
    }
}

fn print(text: &str) -> Result<u8> {
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(exit::OK)
}

fn diag_result(r: Result<String, softib_diag::device::DiagError>, tool: &str) -> Result<u8> {
    match r {
        Ok(t) => print(&t),
        Err(e) => {
            eprintln!("{tool}: {e}");
            Ok(exit::FAILED)
        }
    }
}

/// `ibstat [-l] [-s] [-p] [--json] [ca_name] [portnum]`.
pub fn ibstat(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let list = f.take_switch(&["-l", "--list_of_cas"]);
    let short = f.take_switch(&["-s", "--short"]);
    let port_guids = f.take_switch(&["-p", "--port_list"]);
    let json = f.take_switch(&["--json"]);
    let pos = f.positional("ibstat")?;
    let port = match pos.get(1) {
        Some(p) => Some(
            p.parse()
                .map_err(|_| anyhow!("ibstat: bad port number {p}"))?,
        ),
        None => None,
    };
    let a = IbstatArgs {
        list,
        short,
        port_guids,
        device: pos.first().cloned(),
        port,
    };
    let devs = devices()?;
    if json {
        let v = softib_diag::device::ibstat_json(&devs, &a).map_err(|e| anyhow!("{e}"))?;
        return print(&format!("{}\n", serde_json::to_string_pretty(&v)?));
    }
    diag_result(softib_diag::device::ibstat(&devs, &a), "ibstat")
}

/// `ibstatus [devname[:port]]...`.
pub fn ibstatus(args: &[String]) -> Result<u8> {
    let pos = Flags::new(args).positional("ibstatus")?;
    let targets = pos
        .iter()
        .map(|t| match t.split_once(':') {
            Some((d, p)) => Ok((d.to_string(), Some(p.parse()?))),
            None => Ok((t.clone(), None)),
        })
        .collect::<Result<Vec<_>, std::num::ParseIntError>>()
        .map_err(|e| anyhow!("ibstatus: bad port: {e}"))?;
    diag_result(
        softib_diag::device::ibstatus(&devices()?, &targets),
        "ibstatus",
    )
}

/// `ibv_devices`.
pub fn ibv_devices(args: &[String]) -> Result<u8> {
    Flags::new(args).positional("ibv_devices")?;
    print(&softib_diag::device::ibv_devices(&devices()?))
}

/// `ibv_devinfo [-d dev] [-i port] [-v] [-l]`.
pub fn ibv_devinfo(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let verbose = f.take_switch(&["-v", "--verbose"]);
    let list = f.take_switch(&["-l", "--list"]);
    let dev = f.take_value(&["-d", "--ib-dev"])?;
    let port = match f.take_value(&["-i", "--ib-port"])? {
        Some(p) => Some(
            p.parse()
                .map_err(|_| anyhow!("ibv_devinfo: bad port {p}"))?,
        ),
        None => None,
    };
    f.positional("ibv_devinfo")?;
    let devs = devices()?;
    if list {
        return print(&softib_diag::device::ibv_devinfo_list(&devs));
    }
    diag_result(
        softib_diag::device::ibv_devinfo(&devs, verbose, dev.as_deref(), port),
        "ibv_devinfo",
    )
}

// ---- Management datagrams through the daemon --------------------------------------------

/// A sans-IO machine that speaks SMPs (the SM, a discovery crawl).
pub trait SmpMachine {
    /// The next SMP to send.
    fn poll_transmit(&mut self) -> Option<smp::Repr>;
    /// A response arrived.
    fn handle_response(&mut self, now: Duration, response: &smp::Repr);
    /// Time passed.
    fn handle_timeout(&mut self, now: Duration);
    /// The next deadline.
    fn poll_timeout(&self) -> Option<Duration>;
}

impl SmpMachine for Discovery {
    fn poll_transmit(&mut self) -> Option<smp::Repr> {
        Discovery::poll_transmit(self)
    }
    fn handle_response(&mut self, now: Duration, response: &smp::Repr) {
        Discovery::handle_response(self, now, response);
    }
    fn handle_timeout(&mut self, now: Duration) {
        Discovery::handle_timeout(self, now)
    }
    fn poll_timeout(&self) -> Option<Duration> {
        Discovery::poll_timeout(self)
    }
}

/// Sends what the machine has, waits for responses or its next deadline (at most `max_wait`),
/// and feeds them in. Returns the GMPs that arrived meanwhile (for the SM's SA).
pub fn smp_round(
    ctx: &mut Context,
    port: u8,
    m: &mut dyn SmpMachine,
    origin: Instant,
    max_wait: Duration,
) -> Result<Vec<softib::Mad>> {
    let now = origin.elapsed();
    m.handle_timeout(now);
    while let Some(s) = m.poll_transmit() {
        let mut b = [0u8; MAD_LEN];
        s.emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        ctx.send_smp(0, port, None, &b)?;
    }
    let wait = m
        .poll_timeout()
        .map_or(max_wait, |t| t.saturating_sub(origin.elapsed()))
        .min(max_wait);
    let mut gmps = Vec::new();
    for mad in ctx.recv_mads(256, wait)? {
        match mad.qp {
            MadQp::Smi => {
                if let Ok(r) = smp::Repr::parse(&smp::Packet::new_unchecked(&mad.mad[..])) {
                    m.handle_response(origin.elapsed(), &r);
                }
            }
            MadQp::Gsi => gmps.push(mad),
        }
    }
    Ok(gmps)
}

/// The local port tools use: `-P N`, else the first port whose link is up.
fn pick_port(ctx: &mut Context, want: Option<u8>) -> Result<u8> {
    let devs = ctx.devices()?;
    let d = devs
        .first()
        .ok_or_else(|| anyhow!("this host has no devices"))?;
    if let Some(p) = want {
        if d.ports.iter().any(|q| q.number == p) {
            return Ok(p);
        }
        bail!("{} has no port {p}", d.name);
    }
    Ok(d.ports
        .iter()
        .find(|p| p.phys_state == 5)
        .or(d.ports.first())
        .map_or(1, |p| p.number))
}

/// Discovers the subnet behind `port` by a directed-route sweep.
pub fn discover(ctx: &mut Context, port: u8, timeout: Duration) -> Result<Subnet> {
    ctx.open_mad(0, port, false)?;
    let mut d = Discovery::new(
        DiscoveryConfig {
            local_port: port,
            ..DiscoveryConfig::default()
        },
        u64::from(std::process::id()) << 32,
    );
    let origin = Instant::now();
    while !d.is_done() {
        if origin.elapsed() > timeout {
            bail!(
                "the directed-route sweep from port {port} did not finish in {timeout:?} \
                 ({} nodes found so far)",
                d.result().nodes.len()
            );
        }
        smp_round(ctx, port, &mut d, origin, Duration::from_millis(50))?;
    }
    for f in d.failures() {
        eprintln!(
            "ibwarn: no answer to {} (modifier {}) via directed route {:?}",
            softib_wire::mad::attr_name(softib_wire::mad::MgmtClass::SubnDirectedRoute, f.attr_id)
                .unwrap_or("an attribute"),
            f.attr_mod,
            f.path
        );
    }
    Ok(d.into_result())
}

fn port_flag(f: &mut Flags) -> Result<Option<u8>> {
    f.take_switch(&["-C"]);
    Ok(match f.take_value(&["-P", "--Port"])? {
        Some(p) => Some(p.parse().map_err(|_| anyhow!("bad port {p}"))?),
        None => None,
    })
}

/// `ibnodes`, `ibhosts`, `ibswitches`, `ibnetdiscover`, `iblinkinfo`.
pub fn fabric_tool(tool: &str, args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let json = f.take_switch(&["--json"]);
    let mut nd = softib_diag::fabric::IbnetdiscoverArgs::default();
    let mut li = softib_diag::fabric::IblinkinfoArgs::default();
    if tool == "ibnetdiscover" {
        if f.take_switch(&["-l", "--list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::All);
        }
        if f.take_switch(&["-H", "--Hca_list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::Cas);
        }
        if f.take_switch(&["-S", "--Switch_list"]) {
            nd.list = Some(softib_diag::fabric::NodeFilter::Switches);
        }
        nd.group = f.take_switch(&["-g", "--grouping"]);
        nd.ports = f.take_switch(&["-p", "--ports"]);
    }
    if tool == "iblinkinfo" {
        li.line = f.take_switch(&["-l", "--line"]);
        li.down_only = f.take_switch(&["-d", "--down"]);
    }
    let pos = f.positional(tool)?;
    let mut ctx = Context::open()?;
    let port = pick_port(&mut ctx, port)?;
    let subnet = discover(&mut ctx, port, Duration::from_secs(20))?;
    let text = match tool {
        "ibnodes" if json => format!(
            "{}\n",
            serde_json::to_string_pretty(&softib_diag::fabric::ibnodes_json(&subnet))?
        ),
        "ibnodes" => softib_diag::fabric::ibnodes(&subnet),
        "ibhosts" => softib_diag::fabric::ibhosts(&subnet),
        "ibswitches" => softib_diag::fabric::ibswitches(&subnet),
        "iblinkinfo" => softib_diag::fabric::iblinkinfo(&subnet, &li),
        _ => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let text =
                softib_diag::fabric::ibnetdiscover(&subnet, &nd, &softib_diag::ctime_utc(now));
            if let Some(file) = pos.first() {
                std::fs::write(file, &text).with_context(|| format!("writing {file}"))?;
                return Ok(exit::OK);
            }
            text
        }
    };
    print(&text)
}

// ---- opensm ----------------------------------------------------------------------------

struct SmMachine<'a>(&'a mut softib_fabric::sm::SubnetManager);

impl SmpMachine for SmMachine<'_> {
    fn poll_transmit(&mut self) -> Option<smp::Repr> {
        self.0.poll_transmit()
    }
    fn handle_response(&mut self, now: Duration, response: &smp::Repr) {
        self.0.handle_response(now, response)
    }
    fn handle_timeout(&mut self, now: Duration) {
        self.0.handle_timeout(now)
    }
    fn poll_timeout(&self) -> Option<Duration> {
        self.0.poll_timeout()
    }
}

/// `opensm [-g GUID] [-p PRIO] [-s SEC] [-f LOG] [-e] [-B] [-R minhop|updn] [-o]`.
pub fn opensm(args: &[String]) -> Result<u8> {
    let mut f = Flags::new(args);
    let guid = f.take_value(&["-g", "--guid"])?;
    let priority: u8 = match f.take_value(&["-p", "--priority"])? {
        Some(p) => p
            .parse()
            .ok()
            .filter(|&p: &u8| p <= 15)
            .ok_or_else(|| anyhow!("opensm: -p takes a priority 0..15, not {p}"))?,
        None => 0,
    };
    let sweep: u64 = match f.take_value(&["-s", "--sweep"])? {
        Some(s) => s
            .parse()
            .map_err(|_| anyhow!("opensm: -s takes seconds, not {s}"))?,
        None => 10,
    };
    let log_file = f.take_value(&["-f", "--log_file"])?;
    // opensm.conf's max_wire_smps: SMPs in flight at once. opensm's default is 4; softib's is
    // 16, because an SMP's round trip through soft cables is longer than through hardware
    // (a 504-host fat tree comes up in ~4 s instead of ~7 s).
    let wire_smps: usize =
        match f.take_value(&["--max_wire_smps"])? {
            Some(n) => n.parse().ok().filter(|&n: &usize| n > 0).ok_or_else(|| {
                anyhow!("opensm: --max_wire_smps takes a positive count, not {n}")
            })?,
            None => 16,
        };
    let erase = f.take_switch(&["-e", "--erase_log_file"]);
    let background = f.take_switch(&["-B", "--daemon"]);
    let once = f.take_switch(&["-o", "--once"]);
    f.take_switch(&["-V", "--verbose"]);
    let routing = match f.take_value(&["-R", "--routing_engine"])?.as_deref() {
        None | Some("minhop") => softib_fabric::sm::Routing::MinHop,
        Some("updn") => softib_fabric::sm::Routing::UpDown,
        Some(other) => bail!("opensm: routing engine {other} is not supported (minhop, updn)"),
    };
    f.positional("opensm")?;

    if background {
        // -B: detach. The child runs the same command line without -B.
        let mut child_args = vec!["opensm".to_string()];
        child_args.extend(
            args.iter()
                .filter(|a| *a != "-B" && *a != "--daemon")
                .cloned(),
        );
        let log = std::env::temp_dir().join(format!("softib-opensm-{}.out", std::process::id()));
        let child = crate::fabric::spawn_detached(&child_args, &log, &[])?;
        println!("opensm: running in the background, pid {}", child.id());
        return Ok(exit::OK);
    }

    let mut ctx = Context::open()?;
    let devs = ctx.devices()?;
    let dev = devs
        .first()
        .ok_or_else(|| anyhow!("opensm: this host has no devices"))?;
    let port = match &guid {
        Some(g) => {
            let want = parse_guid(g)?;
            dev.ports
                .iter()
                .find(|p| p.port_guid.0 == want)
                .map(|p| p.number)
                .ok_or_else(|| {
                    anyhow!(
                        "opensm: no local port has GUID {g} (ports: {})",
                        dev.ports
                            .iter()
                            .map(|p| format!("0x{:016x}", p.port_guid.0))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?
        }
        None => pick_port(&mut ctx, None)?,
    };
    let port_guid = dev
        .ports
        .iter()
        .find(|p| p.number == port)
        .map_or(0, |p| p.port_guid.0);
    let log_path = log_file.unwrap_or_else(|| "/var/log/opensm.log".into());
    let mut log = open_log(&log_path, erase)?;
    println!("-------------------------------------------------");
    println!("OpenSM 3.3.23 (softib)");
    println!("Command Line Arguments:");
    println!(" Guid <0x{port_guid:016x}>");
    if priority != 0 {
        println!(" Priority = {priority}");
    }
    if erase {
        println!(" Creating new log file");
    }
    println!(" sweep interval = {sweep}");
    println!(" Log File: {log_path}");
    println!("-------------------------------------------------");
    println!("OpenSM 3.3.23 (softib)\n");
    let _ = std::io::stdout().flush();

    ctx.open_mad(0, port, true)?;
    let config = softib_fabric::sm::SmConfig {
        max_wire_smps: wire_smps,
        port_guid: softib::Guid(port_guid),
        priority,
        sweep_interval: (sweep > 0).then(|| Duration::from_secs(sweep)),
        routing,
        ..softib_fabric::sm::SmConfig::default()
    };
    // opensm keeps the LIDs it gave in OSM_CACHE_DIR/guid2lid, so that a restarted SM gives
    // every port the LID it had.
    let cache_dir = std::env::var_os("OSM_CACHE_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/var/cache/opensm".into());
    let guid2lid_file = cache_dir.join("guid2lid");
    let mut config = config;
    config.guid2lid = read_guid2lid(&guid2lid_file);
    let mut saved = config.guid2lid.clone();
    let mut sm = softib_fabric::sm::SubnetManager::new(config, port);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    log_line(&mut log, 0x80, "OpenSM 3.3.23 (softib)");
    log_line(
        &mut log,
        0x02,
        &format!("osm_opensm_bind: Setting IS_SM on port 0x{port_guid:016x}"),
    );
    let origin = Instant::now();
    let mut announced = None;
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let info = sm.sm_info();
        let data = softib_wire::mad::attr::SmpAttribute::to_data(&info);
        let mut bytes = [0u8; 64];
        bytes.copy_from_slice(&data[..64]);
        if announced != Some(bytes) {
            ctx.set_sm(0, port, Some(bytes))?;
            announced = Some(bytes);
        }
        let gmps = smp_round(
            &mut ctx,
            port,
            &mut SmMachine(&mut sm),
            origin,
            Duration::from_millis(50),
        )?;
        for g in gmps {
            if let Some(resp) = sm.handle_sa(g.slid, &g.mad) {
                // A table larger than one MAD comes as several RMPP segments, in order.
                for seg in resp.chunks_exact(MAD_LEN) {
                    if let Ok(b) = <[u8; MAD_LEN]>::try_from(seg) {
                        ctx.send_gmp(0, port, g.slid, g.src_qpn, &b)?;
                    }
                }
            }
        }
        while let Some(l) = sm.poll_log() {
            log_line(&mut log, l.level.0, &l.text);
        }
        if sm.is_subnet_up() && *sm.guid2lid() != saved {
            saved = sm.guid2lid().clone();
            if let Err(e) = write_guid2lid(&guid2lid_file, &saved) {
                log_line(
                    &mut log,
                    0x01,
                    &format!("ERR: cannot write {}: {e}", guid2lid_file.display()),
                );
            }
        }
        while let Some(c) = sm.poll_console() {
            println!("{c}\n");
            let _ = std::io::stdout().flush();
        }
        if once && sm.is_subnet_up() {
            break;
        }
    }
    let _ = ctx.set_sm(0, port, None);
    log_line(&mut log, 0x80, "Exiting SM");
    println!("Exiting SM");
    Ok(exit::OK)
}

/// opensm's guid2lid file: `0x<guid> 0x<min lid> 0x<max lid>` per line.
fn read_guid2lid(path: &std::path::Path) -> std::collections::BTreeMap<softib::Guid, softib::Lid> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let g = u64::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
            let lid = u16::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?;
            Some((softib::Guid(g), softib::Lid(lid)))
        })
        .collect()
}

fn write_guid2lid(
    path: &std::path::Path,
    map: &std::collections::BTreeMap<softib::Guid, softib::Lid>,
) -> std::io::Result<()> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d)?;
    }
    let text: String = map
        .iter()
        .map(|(g, l)| format!("0x{:016x} 0x{:04x} 0x{:04x}\n", g.0, l.0, l.0))
        .collect();
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(tmp, path)
}

fn parse_guid(s: &str) -> Result<u64> {
    let t = s.trim_start_matches("0x").trim_start_matches("0X");
    u64::from_str_radix(t, 16)
        .map_err(|_| anyhow!("bad GUID {s} (expected hex, e.g. 0xe41d2d0300b47d01)"))
}

fn open_log(path: &str, erase: bool) -> Result<std::fs::File> {
    let mut o = std::fs::OpenOptions::new();
    o.create(true);
    if erase {
        o.write(true).truncate(true);
    } else {
        o.append(true);
    }
    o.open(path)
        .with_context(|| format!("opening the log file {path} (choose another with -f)"))
}

fn log_line(log: &mut std::fs::File, level: u8, text: &str) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let stamp = softib_diag::ctime_utc(now.as_secs() as i64);
    // ctime: "Sun Nov 29 23:40:23 2026" → opensm's "Nov 29 23:40:23".
    let short = stamp.get(4..19).unwrap_or(&stamp);
    let _ = writeln!(
        log,
        "{short} {:06} [{:08X}] 0x{level:02x} -> {text}",
        now.subsec_micros(),
        std::process::id()
    );
}

// ---- Queries: smpquery, perfquery, saquery, sminfo, ibaddr ------------------------------

/// Where an SMP goes: LID-routed, or directed-route along a path (`-D 0,1,3`).
#[derive(Debug, Clone)]
enum SmpDest {
    Lid(softib::Lid),
    Dr(Vec<u8>),
}

/// A MAD agent on one port that asks and waits for the answer.
struct Agent {
    ctx: Context,
    port: u8,
    tid: u64,
}

/// How long one MAD waits for its answer, and how often it is sent.
const MAD_TIMEOUT: Duration = Duration::from_millis(500);
const MAD_RETRIES: u32 = 3;

impl Agent {
    fn open(port: Option<u8>) -> Result<Agent> {
        let mut ctx = Context::open()?;
        let port = pick_port(&mut ctx, port)?;
        ctx.open_mad(0, port, false)?;
        Ok(Agent {
            ctx,
            port,
            tid: u64::from(std::process::id()) << 32,
        })
    }

    fn next_tid(&mut self) -> u64 {
        self.tid += 1;
        self.tid
    }

    fn local_port(&mut self) -> Result<softib::PortInfo> {
        let port = self.port;
        self.ctx
            .devices()?
            .into_iter()
            .flat_map(|d| d.ports)
            .find(|p| p.number == port)
            .ok_or_else(|| anyhow!("no port {port}"))
    }

    /// SubnGet of `attr` at `dest`; the response or an error naming what did not answer.
    fn smp_get(
        &mut self,
        dest: &SmpDest,
        attr: softib_wire::mad::AttrId,
        modifier: u32,
    ) -> Result<smp::Repr> {
        for _ in 0..MAD_RETRIES {
            let tid = self.next_tid();
            let (req, dlid) = match dest {
                SmpDest::Lid(l) => (smp::Repr::lid_get(tid, attr, modifier, 0), Some(*l)),
                SmpDest::Dr(path) => (
                    smp::Repr::dr_get(tid, attr, modifier, 0, path)
                        .map_err(|e| anyhow!("bad directed route {path:?}: {e}"))?,
                    None,
                ),
            };
            let mut b = [0u8; MAD_LEN];
            req.emit(&mut smp::Packet::new_unchecked(&mut b[..]));
            self.ctx.send_smp(0, self.port, dlid, &b)?;
            let t0 = Instant::now();
            while t0.elapsed() < MAD_TIMEOUT {
                for m in self
                    .ctx
                    .recv_mads(16, MAD_TIMEOUT.saturating_sub(t0.elapsed()))?
                {
                    if let Ok(r) = smp::Repr::parse(&smp::Packet::new_unchecked(&m.mad[..])) {
                        if r.header.tid == tid {
                            if r.header.status & 0x7fff != 0 {
                                bail!("the SMA answered with MAD status 0x{:04x}", r.header.status);
                            }
                            return Ok(r);
                        }
                    }
                }
            }
        }
        bail!(
            "no answer to SubnGet({}) from {} after {MAD_RETRIES} tries of {MAD_TIMEOUT:?} \
             (is the port Active and the LID assigned?)",
            softib_wire::mad::attr_name(softib_wire::mad::MgmtClass::SubnLid, attr).unwrap_or("?"),
            match dest {
                SmpDest::Lid(l) => format!("LID {}", l.0),
                SmpDest::Dr(p) => format!("DR path {p:?}"),
            }
        )
    }

    /// Sends a GMP to QP1 at `dlid` and collects its response (all RMPP segments).
    fn gmp(
        &mut self,
        dlid: softib::Lid,
        build: impl Fn(u64) -> [u8; MAD_LEN],
    ) -> Result<Vec<[u8; MAD_LEN]>> {
        for _ in 0..MAD_RETRIES {
            let tid = self.next_tid();
            let req = build(tid);
            self.ctx
                .send_gmp(0, self.port, dlid, softib::Qpn::new(1), &req)?;
            let t0 = Instant::now();
            // SA responses may come as RMPP segments, duplicated or out of order on a faulty
            // link: complete once segments 1..=LAST are all there.
            let mut rmpp = softib_fabric::rmpp::Reassembly::new();
            while t0.elapsed() < MAD_TIMEOUT {
                for m in self
                    .ctx
                    .recv_mads(64, MAD_TIMEOUT.saturating_sub(t0.elapsed()))?
                {
                    let Ok(b) = <[u8; MAD_LEN]>::try_from(m.mad.as_slice()) else {
                        continue;
                    };
                    let Ok(h) = softib_wire::mad::Repr::parse(
                        &softib_wire::mad::Packet::new_unchecked(&b[..]),
                    ) else {
                        continue;
                    };
                    if h.tid != tid {
                        continue;
                    }
                    if h.mgmt_class != softib_wire::mad::MgmtClass::SubnAdm {
                        return Ok(vec![b]);
                    }
                    rmpp.add(&b);
                    if let Some(segs) = rmpp.segments() {
                        return Ok(segs);
                    }
                }
            }
        }
        bail!(
            "no answer from LID {} after {MAD_RETRIES} tries of {MAD_TIMEOUT:?}",
            dlid.0
        )
    }
}

fn parse_dest(arg: &str, dr: bool) -> Result<SmpDest> {
    if dr {
        let path: Result<Vec<u8>, _> = arg.split(',').map(|h| h.trim().parse::<u8>()).collect();
        let path = path.map_err(|_| anyhow!("bad directed route {arg} (e.g. 0,1,3)"))?;
        // The first hop of a -D path is 0: the local node.
        Ok(SmpDest::Dr(path.into_iter().skip(1).collect()))
    } else {
        let lid = if let Some(h) = arg.strip_prefix("0x") {
            u16::from_str_radix(h, 16)
        } else {
            arg.parse()
        }
        .map_err(|_| anyhow!("bad LID {arg}"))?;
        Ok(SmpDest::Lid(softib::Lid(lid)))
    }
}

/// `smpquery [-D] [-P port] nodeinfo|portinfo|nodedesc|switchinfo|pkeys <lid|path> [port]`.
pub fn smpquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{
        NodeDescription, NodeInfo, PKeyTable, PortInfo as Pi, SwitchInfo,
    };
    use softib_wire::mad::AttrId;
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let dr = f.take_switch(&["-D", "--Direct"]);
    let pos = f.positional("smpquery")?;
    let (Some(op), Some(target)) = (pos.first(), pos.get(1)) else {
        bail!("usage: smpquery [-D] [-P port] nodeinfo|portinfo|nodedesc|switchinfo|pkeys <lid|dr_path> [port]");
    };
    let dest = parse_dest(target, dr)?;
    let portid = match &dest {
        SmpDest::Lid(l) => softib_diag::smp::portid_lid(*l),
        SmpDest::Dr(p) => softib_diag::smp::portid_dr(p),
    };
    let qport: Option<u8> = pos
        .get(2)
        .map(|p| p.parse())
        .transpose()
        .map_err(|_| anyhow!("bad port number"))?;
    let mut a = Agent::open(port)?;
    let text = match op.as_str() {
        "nodeinfo" | "NI" => {
            let r = a.smp_get(&dest, AttrId::NODE_INFO, 0)?;
            softib_diag::smp::smpquery_nodeinfo(&portid, &NodeInfo::parse(&r.data).map_err(|e| anyhow!("{e}"))?)
        }
        "nodedesc" | "ND" => {
            let r = a.smp_get(&dest, AttrId::NODE_DESCRIPTION, 0)?;
            softib_diag::smp::smpquery_nodedesc(&NodeDescription::parse(&r.data).map_err(|e| anyhow!("{e}"))?)
        }
        "portinfo" | "PI" => {
            let p = qport.unwrap_or(0);
            let r = a.smp_get(&dest, AttrId::PORT_INFO, u32::from(p))?;
            let pi = Pi::parse(&r.data).map_err(|e| anyhow!("{e}"))?;
            let shown = if p == 0 { pi.local_port_num } else { p };
            softib_diag::smp::smpquery_portinfo(&portid, shown, &pi)
        }
        "switchinfo" | "SI" => {
            let r = a.smp_get(&dest, AttrId::SWITCH_INFO, 0)?;
            softib_diag::smp::smpquery_switchinfo(&portid, &SwitchInfo::parse(&r.data).map_err(|e| anyhow!("{e}"))?)
        }
        "pkeys" | "PK" => {
            let ni = NodeInfo::parse(&a.smp_get(&dest, AttrId::NODE_INFO, 0)?.data).map_err(|e| anyhow!("{e}"))?;
            let r = a.smp_get(&dest, AttrId::P_KEY_TABLE, 0)?;
            let t = PKeyTable::parse(&r.data).map_err(|e| anyhow!("{e}"))?;
            softib_diag::smp::smpquery_pkeys(&t.pkeys, ni.partition_cap)
        }
        other => bail!("smpquery: operation {other} is not supported (nodeinfo, portinfo, nodedesc, switchinfo, pkeys)"),
    };
    print(&text)
}

/// `perfquery [-x] [-P port] [lid [port]]`: PortCounters from a port's PMA.
pub fn perfquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::perf::{self, PortCounters, PortCountersExtended};
    use softib_wire::mad::{AttrId, Method};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let ext = f.take_switch(&["-x", "--extended"]);
    let pos = f.positional("perfquery")?;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    let dlid = match pos.first() {
        Some(l) => match parse_dest(l, false)? {
            SmpDest::Lid(l) => l,
            SmpDest::Dr(_) => me.lid,
        },
        None => me.lid,
    };
    if dlid.0 == 0 {
        bail!(
            "perfquery: port {} has no LID (state {}): the PMA is reached by LID once an SM has configured the port",
            me.number,
            me.state_name()
        );
    }
    let qport: u8 = match pos.get(1) {
        Some(p) => p.parse().map_err(|_| anyhow!("bad port number {p}"))?,
        None => me.number,
    };
    let attr = if ext {
        AttrId::PORT_COUNTERS_EXTENDED
    } else {
        AttrId::PORT_COUNTERS
    };
    let resp = a.gmp(dlid, |tid| {
        let mut data = [0u8; 64];
        data[1] = qport;
        let req = perf::Repr::request(Method::Get, tid, attr, 0, &data);
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut perf::Packet::new_unchecked(&mut b[..]));
        b
    })?;
    let r = resp.first().ok_or_else(|| anyhow!("empty response"))?;
    let p = perf::Repr::parse(&perf::Packet::new_unchecked(&r[..])).map_err(|e| anyhow!("{e}"))?;
    let portid = softib_diag::smp::portid_lid(dlid);
    let cap = perf::capability_mask::EXT_WIDTH_SUPPORTED;
    let text = if ext {
        let pc = PortCountersExtended::parse(p.data).map_err(|e| anyhow!("{e}"))?;
        softib_diag::smp::perfquery_extended(&portid, qport, cap, 0, &pc)
    } else {
        let pc = PortCounters::parse(p.data).map_err(|e| anyhow!("{e}"))?;
        softib_diag::smp::perfquery(&portid, qport, cap, &pc)
    };
    print(&text)
}

/// `saquery [-P port] [NR|PIR|PR|MCMR|-p|-g|-m]`: records from the SA (NodeRecords by
/// default).
pub fn saquery(args: &[String]) -> Result<u8> {
    use softib_wire::mad::sa;
    use softib_wire::mad::{AttrId, Method};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let path = f.take_switch(&["-p", "--path-record"]);
    let groups = f.take_switch(&["-g", "--mgroups"]);
    let members = f.take_switch(&["-m", "--mlist"]);
    let pos = f.positional("saquery")?;
    if groups || members || pos.first().is_some_and(|p| p == "MCMR") {
        let view = match (groups, members) {
            (true, _) => McView::Groups,
            (_, true) => McView::Members,
            _ => McView::Records,
        };
        return saquery_multicast(port, view);
    }
    let what = match (path, pos.first().map(String::as_str)) {
        (true, _) | (_, Some("PR")) => AttrId::PATH_RECORD,
        (_, Some("PIR")) => AttrId::PORT_INFO_RECORD,
        (_, None | Some("NR") | Some("-N")) => AttrId::NODE_RECORD,
        (_, Some(other)) => bail!("saquery: query {other} is not supported (NR, PIR, PR)"),
    };
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        bail!(
            "saquery: port {} knows no SM (SM lid 0, state {}): start opensm on this subnet first",
            me.number,
            me.state_name()
        );
    }
    let segs = a.gmp(me.sm_lid, |tid| {
        let req = sa::Repr::request(Method::GetTable, tid, what, 0, &[]);
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        b
    })?;
    let mut rmpp = softib_fabric::rmpp::Reassembly::new();
    for s in &segs {
        rmpp.add(s);
    }
    let table = rmpp
        .table()
        .ok_or_else(|| anyhow!("saquery: the SA's answer is not a whole RMPP transfer"))?;
    if table.status != 0 {
        bail!(
            "saquery: the SA answered with status 0x{:04x}",
            table.status
        );
    }
    let records: Vec<&[u8]> = table.records().collect();
    let text = if what == AttrId::NODE_RECORD {
        softib_diag::smp::saquery_node_records(records.iter().copied())
    } else if what == AttrId::PATH_RECORD {
        softib_diag::smp::saquery_path_records(records.iter().copied())
    } else {
        let recs: Vec<sa::PortInfoRecord> = records
            .iter()
            .filter_map(|r| sa::PortInfoRecord::parse(r).ok())
            .collect();
        softib_diag::smp::saquery_portinfo_records(&recs)
    };
    print(&text)
}

/// How `saquery` shows MCMemberRecords.
#[derive(Clone, Copy, PartialEq, Eq)]
enum McView {
    /// `MCMR`: every field.
    Records,
    /// `-g`: one block per group.
    Groups,
    /// `-m`: members, with their nodes' descriptions.
    Members,
}

/// The records of an SA GetTable of `attr` (template all zero, ComponentMask 0).
fn sa_table(
    a: &mut Agent,
    sm_lid: softib::Lid,
    attr: softib_wire::mad::AttrId,
) -> Result<Vec<Vec<u8>>> {
    use softib_wire::mad::{sa, Method};
    let segs = a.gmp(sm_lid, |tid| {
        let req = sa::Repr::request(Method::GetTable, tid, attr, 0, &[]);
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        b
    })?;
    let first = sa::Packet::new_unchecked(&segs[0][..]);
    let status = first.header().status();
    if status != 0 {
        bail!("saquery: the SA answered with status 0x{status:04x}");
    }
    let stride = usize::from(first.attr_offset()) * 8;
    let mut payload: Vec<u8> = segs
        .iter()
        .flat_map(|s| sa::Packet::new_unchecked(&s[..]).data().to_vec())
        .collect();
    // PayloadLength of the first segment counts 20 header bytes per segment plus the records.
    payload.truncate((first.rmpp_data2() as usize).saturating_sub(20 * segs.len()));
    if stride == 0 {
        return Ok(Vec::new());
    }
    Ok(payload.chunks_exact(stride).map(<[u8]>::to_vec).collect())
}

/// `saquery MCMR`, `saquery -g`, `saquery -m`: the multicast groups and their members.
fn saquery_multicast(port: Option<u8>, view: McView) -> Result<u8> {
    use softib_wire::mad::sa::{McMemberRecord, NodeRecord};
    use softib_wire::mad::AttrId;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        bail!(
            "saquery: port {} knows no SM (SM lid 0, state {}): start opensm on this subnet first",
            me.number,
            me.state_name()
        );
    }
    let records: Vec<McMemberRecord> = sa_table(&mut a, me.sm_lid, AttrId::MC_MEMBER_RECORD)?
        .iter()
        .filter_map(|r| McMemberRecord::parse(r).ok())
        .collect();
    let text = match view {
        McView::Records => softib_diag::smp::saquery_mcmember_records(&records),
        McView::Groups => softib_diag::smp::saquery_mcmember_groups(&records),
        McView::Members => {
            let nodes: Vec<NodeRecord> = sa_table(&mut a, me.sm_lid, AttrId::NODE_RECORD)?
                .iter()
                .filter_map(|r| NodeRecord::parse(r).ok())
                .collect();
            softib_diag::smp::saquery_mcmember_members(&records, &nodes)
        }
    };
    print(&text)
}

/// `ibroute -M`: the MFT of a switch, every MLID up to MulticastFDBCap (or MulticastFDBTop
/// when the switch sets one), read block by block and PortMask position by position.
fn ibroute_multicast(
    a: &mut Agent,
    dest: &SmpDest,
    lid_text: &str,
    ni: &softib_wire::mad::attr::NodeInfo,
    si: &softib_wire::mad::attr::SwitchInfo,
    description: &str,
) -> Result<u8> {
    use softib_wire::mad::attr::MulticastForwardingTable as Mft;
    use softib_wire::mad::AttrId;
    let first = Mft::MLID_BASE;
    let mut last = u32::from(first) + u32::from(si.multicast_fdb_cap);
    last = last.saturating_sub(1).min(0xFFFE);
    let top = u32::from(si.multicast_fdb_top);
    if top != 0 && top < last && top >= u32::from(first) - 1 {
        last = top;
    }
    let last = u16::try_from(last).unwrap_or(0xFFFE);
    let chunks = (u16::from(ni.num_ports) + 16) / 16;
    let mut entries: Vec<(u16, Vec<u8>)> = Vec::new();
    if last >= first {
        for block in 0..=(last - first) / 32 {
            let mut masks = vec![[0u16; 32]; usize::from(chunks)];
            for (j, m) in masks.iter_mut().enumerate() {
                let r = a.smp_get(
                    dest,
                    AttrId::MULTICAST_FORWARDING_TABLE,
                    Mft::attr_mod(block, j as u8),
                )?;
                *m = Mft::parse(&r.data).map_err(|e| anyhow!("{e}"))?.port_masks;
            }
            // `i` is the entry within the block: it picks the MLID and the same entry in each
            // position's masks.
            #[allow(clippy::needless_range_loop)]
            for i in 0..32usize {
                let mlid = Mft::mlid(block, i).0;
                if mlid > last {
                    break;
                }
                let ports: Vec<u8> = (0..=ni.num_ports)
                    .filter(|&p| masks[usize::from(p / 16)][i] & (1 << (p % 16)) != 0)
                    .collect();
                entries.push((mlid, ports));
            }
        }
    }
    print(&softib_diag::smp::ibroute_multicast(
        lid_text,
        ni.node_guid.0,
        description,
        first,
        last,
        ni.num_ports,
        &entries,
    ))
}

/// `sminfo [-P port]`: the master SM's SMInfo.
pub fn sminfo(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{SmInfo, SmState};
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    f.positional("sminfo")?;
    let mut a = Agent::open(port)?;
    let me = a.local_port()?;
    if me.sm_lid.0 == 0 {
        eprintln!(
            "sminfo: iberror: failed: query (port {} knows no SM: SM lid 0, state {})",
            me.number,
            me.state_name()
        );
        return Ok(255);
    }
    let r = a.smp_get(
        &SmpDest::Lid(me.sm_lid),
        softib_wire::mad::AttrId::SM_INFO,
        0,
    )?;
    let i = SmInfo::parse(&r.data).map_err(|e| anyhow!("{e}"))?;
    let (n, name) = match i.sm_state {
        SmState::NotActive => (0, "SMINFO_NOTACTIVE"),
        SmState::Discovering => (1, "SMINFO_DISCOVERING"),
        SmState::Standby => (2, "SMINFO_STANDBY"),
        SmState::Master => (3, "SMINFO_MASTER"),
        SmState::Unknown(v) => (v, "UNKNOWN"),
    };
    print(&format!(
        "sminfo: sm lid {} sm guid 0x{:016x}, activity count {} priority {} state {n} {name}\n",
        me.sm_lid.0, i.guid.0, i.act_count, i.priority
    ))
}

/// `ibaddr [-P port] [lid]`: GID and LID range of a port.
pub fn ibaddr(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{NodeInfo, PortInfo as Pi};
    use softib_wire::mad::AttrId;
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let pos = f.positional("ibaddr")?;
    let mut a = Agent::open(port)?;
    let dest = match pos.first() {
        Some(l) => parse_dest(l, false)?,
        None => SmpDest::Dr(Vec::new()),
    };
    let ni = NodeInfo::parse(&a.smp_get(&dest, AttrId::NODE_INFO, 0)?.data)
        .map_err(|e| anyhow!("{e}"))?;
    let pi =
        Pi::parse(&a.smp_get(&dest, AttrId::PORT_INFO, 0)?.data).map_err(|e| anyhow!("{e}"))?;
    print(&softib_diag::fabric::ibaddr(
        pi.gid_prefix,
        ni.port_guid,
        pi.lid,
        pi.lmc,
    ))
}

/// `ibroute [-P port] [-M] <switch lid>`: the switch's unicast forwarding table, with what
/// each LID reaches; with `-M` its multicast forwarding table.
pub fn ibroute(args: &[String]) -> Result<u8> {
    use softib_wire::mad::attr::{NodeDescription, NodeInfo, NodeType, SwitchInfo};
    use softib_wire::mad::AttrId;
    let mut f = Flags::new(args);
    let port = port_flag(&mut f)?;
    let multicast = f.take_switch(&["-M", "--Multicast"]);
    let all = f.take_switch(&["-a", "--all"]);
    let dr = f.take_switch(&["-D", "--Direct"]);
    let pos = f.positional("ibroute")?;
    let Some(target) = pos.first() else {
        bail!("usage: ibroute [-a] [-D] [-P port] <switch lid | dr path>");
    };
    let dest = parse_dest(target, dr)?;
    let mut a = Agent::open(port)?;
    let ni = NodeInfo::parse(&a.smp_get(&dest, AttrId::NODE_INFO, 0)?.data)
        .map_err(|e| anyhow!("{e}"))?;
    if ni.node_type != NodeType::Switch {
        eprintln!("ibroute: iberror: failed: dump tables: not a switch");
        return Ok(255);
    }
    let si = SwitchInfo::parse(&a.smp_get(&dest, AttrId::SWITCH_INFO, 0)?.data)
        .map_err(|e| anyhow!("{e}"))?;
    let nd = NodeDescription::parse(&a.smp_get(&dest, AttrId::NODE_DESCRIPTION, 0)?.data)
        .map_err(|e| anyhow!("{e}"))?;
    let name = |d: &NodeDescription| {
        let end = d.raw.iter().position(|&b| b == 0).unwrap_or(d.raw.len());
        String::from_utf8_lossy(&d.raw[..end]).into_owned()
    };
    let top = si.linear_fdb_top;
    let lid_text = match &dest {
        SmpDest::Lid(l) => format!("Lid {}", l.0),
        SmpDest::Dr(p) => softib_diag::smp::portid_dr(p),
    };
    if multicast {
        return ibroute_multicast(&mut a, &dest, &lid_text, &ni, &si, &name(&nd));
    }
    let mut out = format!(
        "Unicast lids [0x0-0x{top:x}] of switch {lid_text} guid 0x{:016x} ({}):\n  Lid  Out   Destination\n       Port     Info \n",
        ni.node_guid.0,
        name(&nd)
    );
    let mut valid = 0;
    let mut block_data = None;
    for lid in 0..=top {
        let block = u32::from(lid / 64);
        if block_data.as_ref().is_none_or(|(b, _)| *b != block) {
            let r = a.smp_get(&dest, AttrId::LINEAR_FORWARDING_TABLE, block)?;
            block_data = Some((block, r.data));
        }
        let Some((_, data)) = &block_data else {
            continue;
        };
        let out_port = data[usize::from(lid % 64)];
        if out_port == 0xff || lid == 0 {
            continue;
        }
        // What the LID reaches: its node, asked by LID.
        let info = match a.smp_get(&SmpDest::Lid(softib::Lid(lid)), AttrId::NODE_INFO, 0) {
            Ok(r) => {
                let n = NodeInfo::parse(&r.data).map_err(|e| anyhow!("{e}"))?;
                let d = a
                    .smp_get(&SmpDest::Lid(softib::Lid(lid)), AttrId::NODE_DESCRIPTION, 0)
                    .ok()
                    .and_then(|r| NodeDescription::parse(&r.data).ok())
                    .map(|d| name(&d))
                    .unwrap_or_default();
                let kind = match n.node_type {
                    NodeType::Switch => "Switch",
                    NodeType::Ca => "Channel Adapter",
                    NodeType::Router => "Router",
                    _ => "Unknown",
                };
                format!("({kind} portguid 0x{:016x}: '{d}')", n.port_guid.0)
            }
            Err(_) if all => "(unreachable)".to_string(),
            Err(_) => continue,
        };
        out.push_str(&format!("0x{lid:04x} {out_port:03} : {info}\n"));
        valid += 1;
    }
    out.push_str(&format!("{valid} valid lids dumped \n"));
    print(&out)
}

#[cfg(test)]
mod device_view_tests {
    use super::*;
    use softib::{Gid, Guid, Lid, Mtu, PortInfo, VerbsAttr, VerbsPortAttr};

    /// What the rdma-core backend reads from the kernel's rxe in the qemu guest (its
    /// `ibv_query_device`, `ibv_query_port` and `ibv_context`), as a `DeviceInfo`.
    fn rxe_through_rdma_core() -> DeviceInfo {
        let guid = Guid(0x98ae_96ff_fecb_c0f2);
        let attr = softib::DeviceAttr {
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            hw_ver: 0,
            fw_ver: String::new(),
            max_mr_size: u64::MAX,
            max_qp: 1_048_560,
            max_qp_wr: 1_048_576,
            max_sge: 32,
            max_cq: 1_048_576,
            max_cqe: 32_767,
            max_mr: 524_287,
            max_pd: 1_048_576,
            max_qp_rd_atom: 128,
            max_qp_init_rd_atom: 128,
            max_srq: 917_503,
            max_srq_wr: 1_048_576,
            max_ah: 32_767,
            max_msg_sz: 0x80_0000,
            phys_port_cnt: 1,
            ..softib::DeviceAttr::default()
        };
        let mut gid0 = [0u8; 16];
        gid0[0] = 0xfe;
        gid0[1] = 0x80;
        gid0[8..].copy_from_slice(&guid.0.to_be_bytes());
        let mut gid1 = [0u8; 16];
        gid1[10] = 0xff;
        gid1[11] = 0xff;
        gid1[12..].copy_from_slice(&[10, 77, 0, 1]);
        DeviceInfo {
            name: "rxe0".into(),
            ca_type: String::new(),
            description: String::new(),
            fw_ver: String::new(),
            hw_ver: 0,
            node_guid: guid,
            sys_image_guid: guid,
            vendor_id: 0xff_ffff,
            vendor_part_id: 0,
            attr,
            ports: vec![PortInfo {
                number: 1,
                state: 4,
                phys_state: 5,
                rate: 10,
                width: 1,
                speed: 8,
                lid: Lid(0),
                lmc: 0,
                sm_lid: Lid(0),
                capability_mask: 0x0001_0000,
                port_guid: guid,
                link_layer_ib: false,
                max_mtu: Mtu::Mtu4096,
                active_mtu: Mtu::Mtu1024,
                gids: vec![Gid(gid0), Gid(gid1)],
            }],
            drops: Vec::new(),
            verbs: Some(VerbsAttr {
                device_cap_flags: 0x0122_3c76,
                page_size_cap: 0xffff_f000,
                max_sge_rd: 32,
                max_res_rd_atom: 258_048,
                atomic_cap: 1,
                max_mw: 524_287,
                max_mcast_grp: 8192,
                max_mcast_qp_attach: 56,
                max_total_mcast_qp_attach: 458_752,
                max_ah: 32_767,
                max_srq_sge: 27,
                max_pkeys: 64,
                local_ca_ack_delay: 15,
                num_comp_vectors: 2,
                ports: vec![VerbsPortAttr {
                    max_msg_sz: 0x80_0000,
                    max_vl_num: 1,
                    pkey_tbl_len: 1,
                    gid_tbl_len: 1024,
                    subnet_timeout: 0,
                }],
            }),
        }
    }

    #[test]
    fn a_real_devices_verbs_attributes_print_as_rdma_cores_ibv_devinfo_does() {
        let golden = include_str!("../../diag/tests/golden/rxe/ibv_devinfo_v_rxe0.txt");
        // The golden is the command, its output and its exit status.
        let want: String = golden
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with("[exit"))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = softib_diag::device::ibv_devinfo(
            &[device_view(&rxe_through_rdma_core())],
            true,
            Some("rxe0"),
            None,
        )
        .unwrap();
        assert_eq!(got.trim_end(), want.trim_end());
    }
}
