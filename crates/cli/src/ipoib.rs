//! `softib ipoib add|del|show`: IP over InfiniBand (RFC 4391/4392, datagram mode) on a softib
//! IB port, as a Linux TUN interface.
//!
//! Like the kernel's `ib_ipoib`, IPoIB here is an upper-layer protocol on top of verbs: one
//! process per interface (`softib ipoib run`, started detached by `add`) owns a TUN device and a
//! UD QP on the port. It joins the partition's IPv4 broadcast group through the SA
//! (MCMemberRecord Set), attaches the QP to it, resolves neighbours with IPoIB ARP (20-byte
//! hardware addresses: flags and QPN, then the port GID) and their paths with SA PathRecord
//! queries, and carries IPv4 packets behind the 4-byte IPoIB encapsulation header. The TUN device
//! is layer 3 (the kernel does no ARP on it), so this process answers and asks ARP itself.
//!
//! What is not here: connected mode (RFC 4755; datagram mode only), IPv6 (dropped and counted),
//! IP multicast groups other than the broadcast group (IPv4 multicast is sent to the broadcast
//! group), and routing through a gateway (every destination is treated as on-link).

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use clap::{Args, Subcommand};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use serde::{Deserialize, Serialize};
use softib::{
    AccessFlags, AddressVector, AhHandle, AttrMask, Buffer, CompChannel, Context, CqHandle, Gid,
    Lid, MrKeys, PdHandle, QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr, SendFlags,
    SendWr, Sge, UdDest, WcOpcode, WcStatus, WrOpcode,
};
use softib_net::tun::{IfConfig, Tun};
use softib_wire::mad::sa::{self, McMemberRecord, PathRecord};
use softib_wire::mad::{AttrId, Method, MAD_LEN};

use crate::exit;

/// `softib ipoib ...`.
#[derive(Debug, Subcommand)]
pub enum IpoibCommand {
    /// Create an IPoIB interface on an IB port (a TUN device; set its address with `ip`).
    Add(IfArgs),
    /// Remove an IPoIB interface.
    Del {
        /// The interface (e.g. ib0).
        ifname: String,
    },
    /// Show the IPoIB interfaces of this host.
    Show {
        /// As JSON.
        #[arg(short, long)]
        json: bool,
    },
    /// Run an interface in the foreground (what `add` starts).
    #[command(hide = true)]
    Run(IfArgs),
}

/// Which interface on which port.
#[derive(Debug, Clone, Args)]
pub struct IfArgs {
    /// The interface name (e.g. ib0).
    pub ifname: String,
    /// The device (e.g. mlx4_0).
    #[arg(long, value_name = "DEV")]
    pub dev: String,
    /// The port.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub port: u8,
    /// The partition (P_Key), e.g. 0xffff or 0x8001.
    #[arg(long, value_name = "P", default_value = "0xffff", value_parser = parse_pkey)]
    pub pkey: u16,
}

fn parse_pkey(s: &str) -> std::result::Result<u16, String> {
    let v = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u16::from_str_radix(h, 16),
        None => s.parse(),
    };
    v.map_err(|_| format!("{s}: a P_Key is a 16-bit number such as 0xffff"))
}

/// What `show` prints, as the running interface writes it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IfState {
    /// Interface name.
    pub ifname: String,
    /// Device.
    pub dev: String,
    /// Port.
    pub port: u8,
    /// P_Key.
    pub pkey: u16,
    /// The process that runs it.
    pub pid: u32,
    /// "up" (joined, carrying traffic), "port down", "joining", ...
    pub state: String,
    /// The hardware address: QPN and port GID, as `ip link` shows an IPoIB address.
    pub hwaddr: String,
    /// The broadcast group's MLID (0 until joined).
    pub mlid: u16,
    /// Packets and drops.
    pub counters: Counters,
}

/// Packet counters of an interface.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Counters {
    /// IP packets sent to the fabric.
    pub tx_packets: u64,
    /// IP packets received from the fabric.
    pub rx_packets: u64,
    /// ARP messages sent.
    pub arp_tx: u64,
    /// ARP messages received.
    pub arp_rx: u64,
    /// Dropped: the port was not Active or not joined.
    pub drop_port_down: u64,
    /// Dropped: no neighbour answered ARP in time.
    pub drop_unresolved: u64,
    /// Dropped: not IPv4 (IPv6 is not carried).
    pub drop_not_ipv4: u64,
    /// Dropped: no send slot free.
    pub drop_tx_full: u64,
    /// Dropped: malformed packets from the fabric.
    pub drop_malformed: u64,
}

/// Runs `softib ipoib ...`.
pub fn run(cmd: IpoibCommand) -> Result<u8> {
    match cmd {
        IpoibCommand::Add(a) => add(&a),
        IpoibCommand::Del { ifname } => del(&ifname),
        IpoibCommand::Show { json } => show(json),
        IpoibCommand::Run(a) => {
            let mut i = Ipoib::open(&a)?;
            i.run()?;
            Ok(exit::OK)
        }
    }
}

fn state_dir() -> PathBuf {
    softib::runtime_dir().join("ipoib")
}

fn state_path(ifname: &str) -> PathBuf {
    state_dir().join(format!("{ifname}.json"))
}

fn read_state(path: &Path) -> Option<IfState> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

fn alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

fn add(a: &IfArgs) -> Result<u8> {
    if let Some(s) = read_state(&state_path(&a.ifname)) {
        if alive(s.pid) {
            bail!(
                "{} already exists (pid {}); remove it with `softib ipoib del {}`",
                a.ifname,
                s.pid,
                a.ifname
            );
        }
    }
    std::fs::create_dir_all(state_dir())
        .with_context(|| format!("creating {}", state_dir().display()))?;
    let log = state_dir().join(format!("{}.log", a.ifname));
    let mut child = crate::fabric::spawn_detached(
        &[
            "ipoib".into(),
            "run".into(),
            a.ifname.clone(),
            "--dev".into(),
            a.dev.clone(),
            "--port".into(),
            a.port.to_string(),
            "--pkey".into(),
            format!("0x{:04x}", a.pkey),
        ],
        &log,
        &[],
    )?;
    // Ready when the interface exists and the process has said so.
    let t0 = Instant::now();
    let timeout = Duration::from_secs(10);
    loop {
        if let Some(s) = read_state(&state_path(&a.ifname)) {
            if s.pid == child.id() {
                println!(
                    "{}: IPoIB on {} port {} (P_Key 0x{:04x}), {}, pid {}",
                    s.ifname, s.dev, s.port, s.pkey, s.state, s.pid
                );
                return Ok(exit::OK);
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            bail!(
                "the IPoIB process for {} exited ({status}):\n{}",
                a.ifname,
                text.trim()
            );
        }
        if t0.elapsed() > timeout {
            bail!(
                "waited {timeout:?} for {} to come up; see {}",
                a.ifname,
                log.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn del(ifname: &str) -> Result<u8> {
    let path = state_path(ifname);
    let Some(s) = read_state(&path) else {
        bail!("no IPoIB interface {ifname} on this host (see `softib ipoib show`)");
    };
    if alive(s.pid) {
        if let Some(p) = rustix::process::Pid::from_raw(s.pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        let t0 = Instant::now();
        while alive(s.pid) && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(s.pid) {
            if let Some(p) = rustix::process::Pid::from_raw(s.pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            eprintln!("{ifname}: pid {} did not stop within 5 s; killed", s.pid);
        }
    }
    let _ = std::fs::remove_file(&path);
    println!("{ifname}: removed");
    Ok(exit::OK)
}

fn show(json: bool) -> Result<u8> {
    let mut all = Vec::new();
    if let Ok(rd) = std::fs::read_dir(state_dir()) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.path().extension().is_some_and(|x| x == "json") {
                if let Some(mut s) = read_state(&e.path()) {
                    if !alive(s.pid) {
                        s.state = "gone (process exited)".into();
                    }
                    all.push(s);
                }
            }
        }
    }
    all.sort_by(|a, b| a.ifname.cmp(&b.ifname));
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(exit::OK);
    }
    for s in &all {
        println!(
            "{}: {} port {} pkey 0x{:04x} {} mlid 0x{:04x} pid {}\n    link/infiniband {}\n    tx {} rx {} arp tx/rx {}/{} dropped: port down {}, unresolved {}, not IPv4 {}, tx full {}, malformed {}",
            s.ifname,
            s.dev,
            s.port,
            s.pkey,
            s.state,
            s.mlid,
            s.pid,
            s.hwaddr,
            s.counters.tx_packets,
            s.counters.rx_packets,
            s.counters.arp_tx,
            s.counters.arp_rx,
            s.counters.drop_port_down,
            s.counters.drop_unresolved,
            s.counters.drop_not_ipv4,
            s.counters.drop_tx_full,
            s.counters.drop_malformed,
        );
    }
    if all.is_empty() {
        println!("no IPoIB interfaces (add one with `softib ipoib add ib0 --dev DEV --port N`)");
    }
    Ok(exit::OK)
}

// ---- the datagram-mode interface ---------------------------------------------------------------

/// The IPoIB encapsulation header: EtherType and 16 reserved bits (RFC 4391 §6).
const ENCAP_LEN: usize = 4;
/// A UD receive buffer starts with the 40-byte GRH area.
const GRH_LEN: usize = 40;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_ARP: u16 = 0x0806;
/// ARP hardware type for InfiniBand (RFC 4391 §9.1.1).
const ARPHRD_INFINIBAND: u16 = 32;
/// The IPoIB hardware address: 1 byte of flags, the 3-byte QPN, the 16-byte GID.
const HW_LEN: usize = 20;
const ARP_LEN: usize = 8 + 2 * (HW_LEN + 4);
/// Receive and send slots.
const N_RECV: usize = 128;
const N_SEND: usize = 128;
/// A slot holds the GRH area, the encapsulation header and the largest IB MTU (4096).
const SLOT: usize = 4160;
/// Packets held per destination while ARP resolves it.
const MAX_QUEUED: usize = 8;
/// How long a neighbour may stay unresolved before its packets are dropped.
const ARP_TIMEOUT: Duration = Duration::from_secs(3);
const ARP_RETRY: Duration = Duration::from_millis(500);
/// How often the membership is renewed.
const REJOIN: Duration = Duration::from_secs(15);
/// The SA answers within this (per try; three tries).
const SA_TIMEOUT: Duration = Duration::from_millis(500);

/// The broadcast group as joined.
#[derive(Debug, Clone, Copy)]
struct Group {
    mgid: Gid,
    mlid: Lid,
    qkey: u32,
    sl: u8,
    mtu_bytes: usize,
}

struct Neighbour {
    /// Resolved: the remote QPN and the AH of its path.
    dest: Option<(Qpn, AhHandle)>,
    gid: Option<Gid>,
    queued: VecDeque<Vec<u8>>,
    asked: Option<Instant>,
    first_asked: Option<Instant>,
}

struct Ipoib {
    args: IfArgs,
    ctx: Context,
    dev: u32,
    tun: Tun,
    ifc: IfConfig,
    pd: PdHandle,
    cq: CqHandle,
    channel: CompChannel,
    qp: Option<Qpn>,
    buf: Buffer,
    mr: MrKeys,
    free_send: Vec<usize>,
    /// Present while the port is Active and the group joined.
    group: Option<(Group, AhHandle)>,
    own_gid: Gid,
    own_lid: Lid,
    sm_lid: Lid,
    pkey_index: u16,
    neighbours: BTreeMap<Ipv4Addr, Neighbour>,
    counters: Counters,
    tid: u64,
    state: String,
    last_check: Option<Instant>,
    last_join: Option<Instant>,
    last_written: Option<String>,
    /// Sends prepared but not posted yet: posted together, one request per batch.
    pending: Vec<SendWr>,
    /// The interface's IPv4 address and netmask, and when they were read.
    addr: (Option<(Ipv4Addr, Ipv4Addr)>, Option<Instant>),
}

impl Ipoib {
    fn open(a: &IfArgs) -> Result<Ipoib> {
        let mut ctx = Context::open()?;
        let dev = ctx.device_index(&a.dev)?;
        let info = ctx
            .devices()?
            .into_iter()
            .nth(dev as usize)
            .ok_or_else(|| anyhow!("no device {}", a.dev))?;
        let port = info
            .ports
            .iter()
            .find(|p| p.number == a.port)
            .ok_or_else(|| anyhow!("{} has no port {}", a.dev, a.port))?;
        if !port.link_layer_ib {
            bail!(
                "{} port {} is RoCE (Ethernet): IPoIB runs on InfiniBand ports; on RoCE use the \
                 Ethernet interface itself",
                a.dev,
                a.port
            );
        }
        // The port's P_Key table holds the default partition only (the SM configures no
        // others), so that is the one partition an interface can use.
        if a.pkey | 0x8000 != 0xffff {
            bail!(
                "P_Key 0x{:04x}: only the default partition (0xffff) is configured on softib \
                 ports; leave out --pkey",
                a.pkey
            );
        }
        let pkey_index = 0;
        let tun = Tun::create(&a.ifname)?;
        let ifc = IfConfig::new()?;
        let pd = ctx.alloc_pd(dev)?;
        let cq = ctx.create_cq(dev, (N_RECV + N_SEND) as u32)?;
        let channel = ctx.create_comp_channel()?;
        let buf = ctx.alloc_buffer((N_RECV + N_SEND) * SLOT)?;
        let mr = ctx.reg_mr(dev, pd, &buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        ctx.open_mad(dev, a.port, false)?;
        let mut i = Ipoib {
            args: a.clone(),
            ctx,
            dev,
            tun,
            ifc,
            pd,
            cq,
            channel,
            qp: None,
            buf,
            mr,
            free_send: (N_RECV..N_RECV + N_SEND).collect(),
            group: None,
            own_gid: Gid([0; 16]),
            own_lid: Lid(0),
            sm_lid: Lid(0),
            pkey_index,
            neighbours: BTreeMap::new(),
            counters: Counters::default(),
            tid: u64::from(std::process::id()) << 32 | 0x1b00_0000,
            state: "port down".into(),
            last_check: None,
            last_join: None,
            last_written: None,
            pending: Vec::new(),
            addr: (None, None),
        };
        // The interface MTU before the port is up: the IB MTU of the port's maximum.
        let mtu = port.active_mtu.bytes().unwrap_or(2048) - ENCAP_LEN;
        let _ = i.ifc.set_mtu(&a.ifname, mtu as u32);
        i.write_state();
        Ok(i)
    }

    fn run(&mut self) -> Result<()> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
            signal_hook::flag::register(sig, stop.clone())?;
        }
        let mut pkt = vec![0u8; 65536];
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            self.check_port()?;
            let (tun_ready, chan_ready) = {
                let mut fds = [
                    PollFd::new(&self.tun, PollFlags::IN),
                    PollFd::new(&self.channel, PollFlags::IN),
                ];
                let ts = Timespec {
                    tv_sec: 0,
                    tv_nsec: 200_000_000,
                };
                match poll(&mut fds, Some(&ts)) {
                    Ok(_) => {}
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(e) => return Err(e.into()),
                }
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            };
            if chan_ready {
                let _ = self.channel.try_get_events()?;
            }
            if tun_ready {
                for _ in 0..64 {
                    match self.tun.recv(&mut pkt) {
                        Ok(n) => self.outgoing(&pkt[..n])?,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(e).context("reading the TUN device"),
                    }
                }
                self.flush()?;
            }
            self.drain_cq()?;
            self.expire_neighbours();
            self.flush()?;
        }
        let _ = std::fs::remove_file(state_path(&self.args.ifname));
        Ok(())
    }

    // ---- port state, group membership -----------------------------------------------------

    fn check_port(&mut self) -> Result<()> {
        let now = Instant::now();
        if self
            .last_check
            .is_some_and(|t| now.duration_since(t) < Duration::from_millis(500))
        {
            return Ok(());
        }
        self.last_check = Some(now);
        let port = self
            .ctx
            .devices()?
            .into_iter()
            .nth(self.dev as usize)
            .and_then(|d| d.ports.into_iter().find(|p| p.number == self.args.port))
            .ok_or_else(|| anyhow!("the device went away"))?;
        let active = port.state == 4;
        let moved = port.lid != self.own_lid || port.sm_lid != self.sm_lid;
        if self.group.is_some() && (!active || moved) {
            self.leave();
        }
        self.own_lid = port.lid;
        self.sm_lid = port.sm_lid;
        self.own_gid = port.gids.first().copied().unwrap_or(Gid([0; 16]));
        if active && self.group.is_none() {
            self.state = "joining".into();
            match self.join() {
                Ok(()) => self.state = "up".into(),
                Err(e) => {
                    self.state = format!("joining: {e:#}");
                }
            }
        } else if !active {
            self.state = "port down".into();
        } else if self.last_join.is_some_and(|t| t.elapsed() > REJOIN) {
            // An SM that restarted on the same port has forgotten the membership and says
            // nothing (no ClientReregister); joining again is harmless when it has not.
            if let Err(e) = self.rejoin() {
                self.state = format!("rejoining: {e:#}");
            } else {
                self.state = "up".into();
            }
        }
        self.write_state();
        Ok(())
    }

    fn leave(&mut self) {
        if let (Some((g, ah)), Some(qp)) = (self.group.take(), self.qp) {
            let _ = self.ctx.detach_mcast(self.dev, qp, g.mgid);
            let _ = self.ctx.destroy_ah(self.dev, ah);
        }
        // Paths may have changed: resolve every neighbour again.
        for (_, n) in std::mem::take(&mut self.neighbours) {
            if let Some((_, ah)) = n.dest {
                let _ = self.ctx.destroy_ah(self.dev, ah);
            }
        }
    }

    fn next_tid(&mut self) -> u64 {
        self.tid += 1;
        self.tid
    }

    /// Sends an SA request and waits for its response (with retries).
    fn sa_call(&mut self, method: Method, attr: AttrId, comp: u64, data: &[u8]) -> Result<Vec<u8>> {
        for _ in 0..3 {
            let tid = self.next_tid();
            let req = sa::Repr::request(method, tid, attr, comp, data);
            let mut b = [0u8; MAD_LEN];
            req.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
            self.ctx
                .send_gmp(self.dev, self.args.port, self.sm_lid, Qpn::new(1), &b)?;
            let t0 = Instant::now();
            while t0.elapsed() < SA_TIMEOUT {
                for m in self
                    .ctx
                    .recv_mads(16, SA_TIMEOUT.saturating_sub(t0.elapsed()))?
                {
                    let p = sa::Packet::new_unchecked(&m.mad[..]);
                    let Ok(r) = sa::Repr::parse(&p) else {
                        continue;
                    };
                    if r.header.tid != tid {
                        continue;
                    }
                    if r.header.status & 0x7fff != 0 {
                        bail!(
                            "the SA answered {:?} of attribute 0x{:04x} with MAD status 0x{:04x}",
                            method,
                            attr.0,
                            r.header.status
                        );
                    }
                    return Ok(r.data.to_vec());
                }
            }
        }
        bail!(
            "the SA (LID {}) did not answer in 3 tries of {SA_TIMEOUT:?} (is an SM running?)",
            self.sm_lid.0
        )
    }

    /// Joins the broadcast group again (SubnAdmSet of the same membership).
    fn rejoin(&mut self) -> Result<()> {
        self.last_join = Some(Instant::now());
        let got = self.join_sa()?;
        match self.group {
            Some((g, _)) if g.mlid == got.mlid => Ok(()),
            // The group moved (a new SM numbered it differently): attach anew.
            _ => {
                self.leave();
                self.join()
            }
        }
    }

    /// SubnAdmSet(MCMemberRecord): this port a full member of the broadcast group.
    fn join_sa(&mut self) -> Result<McMemberRecord> {
        let rec = McMemberRecord {
            mgid: sa::ipoib_broadcast_mgid(softib_wire::PKey(self.args.pkey)),
            port_gid: self.own_gid,
            join_state: sa::join_state::FULL_MEMBER,
            ..McMemberRecord::default()
        };
        let mut data = [0u8; McMemberRecord::LEN];
        rec.emit(&mut data);
        let resp = self.sa_call(
            Method::Set,
            AttrId::MC_MEMBER_RECORD,
            sa::mcmember_comp::JOIN,
            &data,
        )?;
        McMemberRecord::parse(&resp).map_err(|e| anyhow!("MCMemberRecord: {e}"))
    }

    /// Joins the broadcast group as a full member and attaches the QP (created on the first
    /// join, with the group's Q_Key).
    fn join(&mut self) -> Result<()> {
        self.last_join = Some(Instant::now());
        let mgid = sa::ipoib_broadcast_mgid(softib_wire::PKey(self.args.pkey));
        let got = self.join_sa()?;
        let g = Group {
            mgid,
            mlid: got.mlid,
            qkey: got.q_key.0,
            sl: got.sl,
            mtu_bytes: got.mtu.bytes().unwrap_or(2048),
        };
        if self.qp.is_none() {
            self.qp = Some(self.create_qp(g.qkey)?);
        }
        let qp = self.qp.ok_or_else(|| anyhow!("no QP"))?;
        self.ctx.attach_mcast(self.dev, qp, g.mgid, g.mlid)?;
        let ah = self.ctx.create_ah(
            self.dev,
            self.pd,
            AddressVector {
                dlid: g.mlid,
                sl: g.sl,
                src_path_bits: 0,
                static_rate: 0,
                grh: Some(softib::GlobalRoute {
                    dgid: g.mgid,
                    flow_label: 0,
                    sgid_index: 0,
                    hop_limit: 1,
                    traffic_class: 0,
                }),
                port_num: self.args.port,
            },
        )?;
        let _ = self
            .ifc
            .set_mtu(&self.args.ifname, (g.mtu_bytes - ENCAP_LEN) as u32);
        self.group = Some((g, ah));
        Ok(())
    }

    fn create_qp(&mut self, qkey: u32) -> Result<Qpn> {
        let qpn = self.ctx.create_qp(
            self.dev,
            QpInitAttr {
                qp_type: QpType::Ud,
                pd: self.pd,
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: N_SEND as u32,
                    max_recv_wr: N_RECV as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        )?;
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            pkey_index: self.pkey_index,
            port_num: self.args.port,
            qkey,
            ..QpAttr::default()
        };
        self.ctx.modify_qp(
            self.dev,
            qpn,
            &attr,
            AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::QKEY),
        )?;
        attr.qp_state = QpState::Rtr;
        self.ctx.modify_qp(self.dev, qpn, &attr, AttrMask::STATE)?;
        attr.qp_state = QpState::Rts;
        self.ctx
            .modify_qp(self.dev, qpn, &attr, AttrMask::STATE.with(AttrMask::SQ_PSN))?;
        let wrs = (0..N_RECV).map(|s| self.recv_wr(s)).collect();
        self.ctx.post_recv(self.dev, qpn, wrs)?;
        self.ctx.req_notify_cq(self.dev, self.cq, &self.channel)?;
        Ok(qpn)
    }

    fn recv_wr(&self, slot: usize) -> RecvWr {
        RecvWr {
            wr_id: slot as u64,
            sg_list: vec![Sge {
                addr: self.mr.addr + (slot * SLOT) as u64,
                length: SLOT as u32,
                lkey: self.mr.lkey,
            }],
        }
    }

    fn hwaddr(&self) -> [u8; HW_LEN] {
        let mut h = [0u8; HW_LEN];
        let qpn = self.qp.map_or(0, Qpn::value);
        h[1..4].copy_from_slice(&qpn.to_be_bytes()[1..]);
        h[4..].copy_from_slice(&self.own_gid.0);
        h
    }

    // ---- sending ------------------------------------------------------------------------------

    fn outgoing(&mut self, pkt: &[u8]) -> Result<()> {
        if pkt.first().map(|b| b >> 4) != Some(4) || pkt.len() < 20 {
            self.counters.drop_not_ipv4 += 1;
            return Ok(());
        }
        let Some((g, bcast_ah)) = self.group else {
            self.counters.drop_port_down += 1;
            return Ok(());
        };
        let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
        if self.is_broadcast(dst) {
            self.send(ETHERTYPE_IPV4, pkt, bcast_ah, Qpn::MULTICAST, g.qkey)?;
            return Ok(());
        }
        let n = self.neighbours.entry(dst).or_insert_with(|| Neighbour {
            dest: None,
            gid: None,
            queued: VecDeque::new(),
            asked: None,
            first_asked: None,
        });
        if let Some((qpn, ah)) = n.dest {
            return self.send(ETHERTYPE_IPV4, pkt, ah, qpn, g.qkey);
        }
        if n.queued.len() >= MAX_QUEUED {
            n.queued.pop_front();
            self.counters.drop_unresolved += 1;
        }
        n.queued.push_back(pkt.to_vec());
        let due = n.asked.is_none_or(|t| t.elapsed() >= ARP_RETRY);
        if due {
            self.arp_request(dst)?;
        }
        Ok(())
    }

    /// The interface's address and netmask, read again when older than half a second (the
    /// user sets them with `ip addr` at any time).
    fn if_addr(&mut self) -> Option<(Ipv4Addr, Ipv4Addr)> {
        if self
            .addr
            .1
            .is_none_or(|t| t.elapsed() > Duration::from_millis(500))
        {
            self.addr = (
                self.ifc.ipv4(&self.args.ifname).ok().flatten(),
                Some(Instant::now()),
            );
        }
        self.addr.0
    }

    fn is_broadcast(&mut self, dst: Ipv4Addr) -> bool {
        if dst.is_broadcast() || dst.is_multicast() {
            return true;
        }
        match self.if_addr() {
            Some((addr, mask)) => {
                let host = !u32::from(mask);
                host != 0 && u32::from(dst) & host == host && {
                    u32::from(dst) & u32::from(mask) == u32::from(addr) & u32::from(mask)
                }
            }
            None => false,
        }
    }

    fn send(
        &mut self,
        ethertype: u16,
        payload: &[u8],
        ah: AhHandle,
        qpn: Qpn,
        qkey: u32,
    ) -> Result<()> {
        if self.qp.is_none() {
            self.counters.drop_port_down += 1;
            return Ok(());
        }
        if self.free_send.is_empty() {
            self.drain_cq()?;
        }
        let Some(slot) = self.free_send.pop() else {
            self.counters.drop_tx_full += 1;
            return Ok(());
        };
        let len = ENCAP_LEN + payload.len();
        if len > SLOT {
            self.free_send.push(slot);
            self.counters.drop_malformed += 1;
            return Ok(());
        }
        let mut frame = Vec::with_capacity(len);
        frame.extend_from_slice(&ethertype.to_be_bytes());
        frame.extend_from_slice(&[0, 0]);
        frame.extend_from_slice(payload);
        self.buf.write(slot * SLOT, &frame);
        let wr = SendWr {
            wr_id: slot as u64,
            opcode: WrOpcode::Send,
            sg_list: vec![Sge {
                addr: self.mr.addr + (slot * SLOT) as u64,
                length: len as u32,
                lkey: self.mr.lkey,
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: Some(UdDest {
                ah,
                remote_qpn: qpn,
                remote_qkey: qkey,
            }),
        };
        self.pending.push(wr);
        if self.pending.len() >= 32 {
            self.flush()?;
        }
        if ethertype == ETHERTYPE_IPV4 {
            self.counters.tx_packets += 1;
        } else {
            self.counters.arp_tx += 1;
        }
        Ok(())
    }

    /// Posts the prepared sends in one request.
    fn flush(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let wrs = std::mem::take(&mut self.pending);
        let Some(qp) = self.qp else {
            self.free_send.extend(wrs.iter().map(|w| w.wr_id as usize));
            return Ok(());
        };
        let slots: Vec<usize> = wrs.iter().map(|w| w.wr_id as usize).collect();
        if let Err(e) = self.ctx.post_send(self.dev, qp, wrs) {
            self.free_send.extend(slots);
            return Err(e.into());
        }
        Ok(())
    }

    fn arp(&mut self, op: u16, target_hw: [u8; HW_LEN], target_ip: Ipv4Addr) -> Option<Vec<u8>> {
        let (addr, _) = self.if_addr()?;
        let mut a = Vec::with_capacity(ARP_LEN);
        a.extend_from_slice(&ARPHRD_INFINIBAND.to_be_bytes());
        a.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        a.push(HW_LEN as u8);
        a.push(4);
        a.extend_from_slice(&op.to_be_bytes());
        a.extend_from_slice(&self.hwaddr());
        a.extend_from_slice(&addr.octets());
        a.extend_from_slice(&target_hw);
        a.extend_from_slice(&target_ip.octets());
        Some(a)
    }

    fn arp_request(&mut self, ip: Ipv4Addr) -> Result<()> {
        let Some((g, ah)) = self.group else {
            return Ok(());
        };
        let Some(req) = self.arp(1, [0; HW_LEN], ip) else {
            // No address on the interface yet: nothing to ask with.
            return Ok(());
        };
        if let Some(n) = self.neighbours.get_mut(&ip) {
            let now = Instant::now();
            n.asked = Some(now);
            n.first_asked.get_or_insert(now);
        }
        self.send(ETHERTYPE_ARP, &req, ah, Qpn::MULTICAST, g.qkey)
    }

    fn expire_neighbours(&mut self) {
        let mut retry = Vec::new();
        let mut dropped = 0;
        for (ip, n) in &mut self.neighbours {
            if n.dest.is_some() {
                continue;
            }
            if n.first_asked.is_some_and(|t| t.elapsed() > ARP_TIMEOUT) {
                dropped += n.queued.len() as u64;
                n.queued.clear();
                n.first_asked = None;
                n.asked = None;
            } else if !n.queued.is_empty() && n.asked.is_some_and(|t| t.elapsed() >= ARP_RETRY) {
                retry.push(*ip);
            }
        }
        self.counters.drop_unresolved += dropped;
        for ip in retry {
            let _ = self.arp_request(ip);
        }
    }

    // ---- receiving ----------------------------------------------------------------------------

    fn drain_cq(&mut self) -> Result<()> {
        let Some(qp) = self.qp else {
            return Ok(());
        };
        let mut repost = Vec::new();
        loop {
            let wcs = self.ctx.poll_cq(self.dev, self.cq, 64, Duration::ZERO)?;
            if wcs.is_empty() {
                // Arm, then look once more: a completion may have come in between.
                self.ctx.req_notify_cq(self.dev, self.cq, &self.channel)?;
                let more = self.ctx.poll_cq(self.dev, self.cq, 64, Duration::ZERO)?;
                if more.is_empty() {
                    break;
                }
                self.completions(more, &mut repost)?;
                continue;
            }
            self.completions(wcs, &mut repost)?;
        }
        if !repost.is_empty() {
            let wrs = repost.into_iter().map(|s| self.recv_wr(s)).collect();
            self.ctx.post_recv(self.dev, qp, wrs)?;
        }
        Ok(())
    }

    fn completions(
        &mut self,
        wcs: Vec<softib::WorkCompletion>,
        repost: &mut Vec<usize>,
    ) -> Result<()> {
        for wc in wcs {
            let slot = wc.wr_id as usize;
            match wc.opcode {
                WcOpcode::Recv => {
                    if wc.status == WcStatus::Success {
                        let mut data = vec![0u8; wc.byte_len as usize];
                        self.buf.read(slot * SLOT, &mut data);
                        self.incoming(&data, wc.src_qp)?;
                    }
                    if wc.status != WcStatus::WrFlushErr {
                        repost.push(slot);
                    }
                }
                _ => {
                    if (N_RECV..N_RECV + N_SEND).contains(&slot) {
                        self.free_send.push(slot);
                    }
                }
            }
        }
        Ok(())
    }

    fn incoming(&mut self, data: &[u8], src_qp: Qpn) -> Result<()> {
        let Some(frame) = data.get(GRH_LEN..).filter(|f| f.len() >= ENCAP_LEN) else {
            self.counters.drop_malformed += 1;
            return Ok(());
        };
        let sgid = {
            let mut g = [0u8; 16];
            g.copy_from_slice(&data[8..24]);
            Gid(g)
        };
        if Some(src_qp) == self.qp && sgid == self.own_gid {
            return Ok(()); // our own broadcast, looped back by a switch
        }
        let ethertype = u16::from_be_bytes([frame[0], frame[1]]);
        let payload = &frame[ENCAP_LEN..];
        match ethertype {
            ETHERTYPE_IPV4 => {
                self.counters.rx_packets += 1;
                if let Err(e) = self.tun.send(payload) {
                    // The interface is down (`ip link set ib0 down`): the kernel refuses.
                    if e.raw_os_error() != Some(libc_eio()) {
                        return Err(e).context("writing to the TUN device");
                    }
                }
            }
            ETHERTYPE_ARP => {
                self.counters.arp_rx += 1;
                self.incoming_arp(payload)?;
            }
            _ => self.counters.drop_malformed += 1,
        }
        Ok(())
    }

    fn incoming_arp(&mut self, a: &[u8]) -> Result<()> {
        if a.len() < ARP_LEN
            || u16::from_be_bytes([a[0], a[1]]) != ARPHRD_INFINIBAND
            || u16::from_be_bytes([a[2], a[3]]) != ETHERTYPE_IPV4
            || usize::from(a[4]) != HW_LEN
            || a[5] != 4
        {
            self.counters.drop_malformed += 1;
            return Ok(());
        }
        let op = u16::from_be_bytes([a[6], a[7]]);
        let mut sha = [0u8; HW_LEN];
        sha.copy_from_slice(&a[8..8 + HW_LEN]);
        let spa = Ipv4Addr::new(a[28], a[29], a[30], a[31]);
        let tpa = Ipv4Addr::new(a[52], a[53], a[54], a[55]);
        let ours = self.if_addr().map(|(ip, _)| ip);
        let for_us = ours == Some(tpa);
        // RFC 826: update a neighbour we know; learn the sender when the message is for us.
        if self.neighbours.contains_key(&spa) || for_us {
            self.learn(spa, sha)?;
        }
        if op == 1 && for_us {
            if let Some((qpn, ah)) = self.neighbours.get(&spa).and_then(|n| n.dest) {
                if let Some(reply) = self.arp(2, sha, spa) {
                    let qkey = self.group.map_or(0, |(g, _)| g.qkey);
                    self.send(ETHERTYPE_ARP, &reply, ah, qpn, qkey)?;
                }
            }
        }
        Ok(())
    }

    /// Records `ip` at hardware address `hw`: resolves the path to its GID through the SA and
    /// sends what waited for it.
    fn learn(&mut self, ip: Ipv4Addr, hw: [u8; HW_LEN]) -> Result<()> {
        let qpn = Qpn::new(u32::from_be_bytes([0, hw[1], hw[2], hw[3]]));
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&hw[4..]);
        let gid = Gid(gid);
        if let Some(n) = self.neighbours.get(&ip) {
            if n.gid == Some(gid) && n.dest.is_some_and(|(q, _)| q == qpn) {
                return Ok(());
            }
        }
        let path = match self.path_to(gid) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{}: no path to {ip} ({gid:?}): {e:#}", self.args.ifname);
                return Ok(());
            }
        };
        let ah = self.ctx.create_ah(
            self.dev,
            self.pd,
            AddressVector {
                dlid: path.dlid,
                sl: path.sl,
                src_path_bits: 0,
                static_rate: 0,
                grh: None,
                port_num: self.args.port,
            },
        )?;
        let n = self.neighbours.entry(ip).or_insert_with(|| Neighbour {
            dest: None,
            gid: None,
            queued: VecDeque::new(),
            asked: None,
            first_asked: None,
        });
        if let Some((_, old)) = n.dest.replace((qpn, ah)) {
            let _ = self.ctx.destroy_ah(self.dev, old);
        }
        n.gid = Some(gid);
        n.first_asked = None;
        let queued: Vec<Vec<u8>> = n.queued.drain(..).collect();
        let qkey = self.group.map_or(0, |(g, _)| g.qkey);
        for p in queued {
            self.send(ETHERTYPE_IPV4, &p, ah, qpn, qkey)?;
        }
        Ok(())
    }

    fn path_to(&mut self, dgid: Gid) -> Result<PathRecord> {
        let mut t = PathRecord::parse(&[0u8; PathRecord::LEN])
            .map_err(|e| anyhow!("PathRecord template: {e}"))?;
        t.sgid = self.own_gid;
        t.dgid = dgid;
        t.numb_path = 1;
        let mut data = [0u8; PathRecord::LEN];
        t.emit(&mut data);
        let comp = sa::path_comp::SGID | sa::path_comp::DGID | sa::path_comp::NUMB_PATH;
        let resp = self.sa_call(Method::Get, AttrId::PATH_RECORD, comp, &data)?;
        PathRecord::parse(&resp).map_err(|e| anyhow!("PathRecord: {e}"))
    }

    fn write_state(&mut self) {
        let s = IfState {
            ifname: self.args.ifname.clone(),
            dev: self.args.dev.clone(),
            port: self.args.port,
            pkey: self.args.pkey,
            pid: std::process::id(),
            state: self.state.clone(),
            hwaddr: self
                .hwaddr()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":"),
            mlid: self.group.map_or(0, |(g, _)| g.mlid.0),
            counters: self.counters,
        };
        let Ok(text) = serde_json::to_string_pretty(&s) else {
            return;
        };
        if self.last_written.as_ref() == Some(&text) {
            return;
        }
        let _ = std::fs::create_dir_all(state_dir());
        let path = state_path(&self.args.ifname);
        let tmp = path.with_extension("json.tmp");
        if std::fs::write(&tmp, &text).is_ok() && std::fs::rename(&tmp, &path).is_ok() {
            self.last_written = Some(text);
        }
    }
}

fn libc_eio() -> i32 {
    5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkeys_parse_in_hex_or_decimal() {
        assert_eq!(parse_pkey("0xffff"), Ok(0xffff));
        assert_eq!(parse_pkey("32769"), Ok(0x8001));
        assert!(parse_pkey("0x1ffff").is_err());
    }
}
