//! The run loop: perftest's tests over the `softib` verbs API.
//!
//! The order of steps — out-of-band connect, versions, system data, MTU, parameter
//! negotiation, resources, key exchange per QP, QPs to RTS, address lines, barrier, the runs,
//! the report exchange — is upstream's, so that either side can be upstream perftest.
//!
//! Where upstream waits (120 s, then "Did not get Message for 120 Seconds"), softib checks
//! first and says why: the port is not Active (no SM), the peer's port is not, a completion
//! failed (with the status named), or no progress for `--timeout` seconds, with what the HCA
//! dropped and why.

mod bw;
mod lat;

use std::io::Write;
use std::time::{Duration, Instant};

use softib::{
    AccessFlags, AddressVector, AttrMask, Context, CqHandle, DeviceInfo, Gid, GlobalRoute, MrKeys,
    Mtu, PdHandle, PortInfo, Psn, QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RKey, RecvWr,
    RemoteAddr, SendFlags, SendWr, Sge, UdDest, WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};

use crate::args::{AtomicType, Connection, Mode, Parsed, PerftestArgs, Test};
use crate::exchange::{
    self, Dest, Exchange, ExchangeListener, NegotiateParams, Negotiation, PeerVersion, Role,
    SysData, SOFTIB_PERFTEST_VERSION,
};
use crate::port::StallWatch;
use crate::report::{
    self, address_lines, BannerInfo, BannerStyle, BwResult, BwUnit, LatResult, LinkLayer, Side,
};

/// Bytes of the GRH area that starts every UD receive buffer.
const GRH_AREA: u64 = 40;

/// A failure with the explanation the user reads.
#[derive(Debug)]
pub struct RunError(pub String);

impl<E: std::fmt::Display> From<E> for RunError {
    fn from(e: E) -> RunError {
        RunError(e.to_string())
    }
}

type Result<T> = std::result::Result<T, RunError>;

fn fail<T>(msg: impl Into<String>) -> Result<T> {
    Err(RunError(msg.into()))
}

/// Runs `ib_<test>_<mode>` with `argv` (argv[0] is the program name). Returns the exit code.
pub fn main(test: Test, mode: Mode, argv: &[String]) -> u8 {
    let args = match PerftestArgs::parse_from(test, mode, argv) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help(text)) | Ok(Parsed::Version(text)) => {
            out!("{text}");
            return 0;
        }
        Err(e) => {
            eprintln!(" {e}");
            return 1;
        }
    };
    match run(*args) {
        Ok(()) => 0,
        Err(RunError(msg)) => {
            let _ = std::io::stdout().flush();
            eprintln!("{msg}");
            1
        }
    }
}

/// The local half of the benchmark: device, memory, queues.
struct Local {
    ctx: Context,
    /// The device's index on this host (what every verb names it by).
    dev: u32,
    info: DeviceInfo,
    port: PortInfo,
    pd: PdHandle,
    cq: CqHandle,
    qps: Vec<Qpn>,
    buf: softib::Buffer,
    mr: MrKeys,
    /// Offset of the area the peer writes into / reads from (and receives land in).
    recv_off: u64,
    /// UD: an address handle per remote QP.
    ahs: Vec<softib::AhHandle>,
    /// UD: the Q_Key of this side's QPs and of the peer's (perftest's, or with `-R`
    /// rdma_cm's, which both sides' QPs then have).
    qkey: u32,
    timeout: Duration,
    server: bool,
    /// Completions polled while waiting for the other kind.
    held: Vec<WorkCompletion>,
}

fn mtu_from_bytes(b: u64) -> Mtu {
    match b {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

fn mtu_bytes(m: Mtu) -> u64 {
    match m {
        Mtu::Mtu256 => 256,
        Mtu::Mtu512 => 512,
        Mtu::Mtu1024 => 1024,
        Mtu::Mtu2048 => 2048,
        _ => 4096,
    }
}

fn run(mut args: PerftestArgs) -> Result<()> {
    for n in &args.notices {
        outln!("{n}");
    }
    let mut ctx = Context::open()?;
    let devs = ctx.devices()?;
    let dev_index = match &args.ib_dev {
        Some(name) => devs.iter().position(|d| &d.name == name).ok_or_else(|| {
            RunError(format!(
                " IB device {name} not found (this host has: {})",
                devs.iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?,
        None if devs.is_empty() => return fail(" No IB devices found"),
        None => 0,
    };
    let dev = devs[dev_index].clone();
    let port = dev
        .ports
        .iter()
        .find(|p| p.number == args.ib_port)
        .cloned()
        .ok_or_else(|| {
            RunError(format!(
                " {} has no port {} (it has {})",
                dev.name,
                args.ib_port,
                dev.ports.len()
            ))
        })?;
    if port.state != 4 {
        return fail(format!(
            " {}",
            port.why_not_active(&dev.name).unwrap_or_default()
        ));
    }
    if !port.link_layer_ib && args.gid_index.is_none() {
        // RoCE needs a GID: the device's own address.
        let pick = crate::port::roce_gid_index(&port);
        outln!(" (softib) RoCE: using GID index {pick}, the device's address (-x chooses another)");
        args.gid_index = Some(pick);
    }
    let local_mtu = args
        .mtu
        .map(u64::from)
        .unwrap_or_else(|| mtu_bytes(port.active_mtu))
        .min(mtu_bytes(port.active_mtu));
    let server = args.is_server();

    // Out-of-band connection: TCP, or with -R a QP the CM connects.
    let mut link = None;
    let mut ex = if args.rdma_cm {
        if port.link_layer_ib {
            return fail(
                " -R on softib speaks rdma_cm's RoCE addressing (IP addresses are GIDs); this \
                 port is on an IB fabric: run without -R, or on a RoCE device",
            );
        }
        if server {
            outln!("{}", report::WAITING_FOR_CLIENT.trim_start_matches('\n'));
            let _ = std::io::stdout().flush();
        }
        let setup = crate::rdma_cm::Setup {
            dev: dev_index as u32,
            node_guid: dev.node_guid,
            gids: &port.gids,
            gid_index: args.gid_index.unwrap_or(0),
            port: args.ib_port,
            mtu: exchange::mtu_enum(local_mtu as u32).unwrap_or(3),
            rd_atomic_max: dev.attr.max_qp_rd_atom,
            cm_port: args.port,
            server: args.server.as_deref(),
            num_qps: args.num_qps.max(1) as usize,
            ack_timeout: args.qp_timeout,
            timeout: args.timeout,
            ud: args.connection == Connection::Ud,
        };
        let (l, comm) = crate::rdma_cm::Link::establish(&setup)?;
        let peer = l.peer();
        link = Some(l);
        let role = if server { Role::Server } else { Role::Client };
        Exchange::over_messages(Box::new(comm), peer, role, args.timeout)
    } else if server {
        outln!("{}", report::WAITING_FOR_CLIENT.trim_start_matches('\n'));
        let _ = std::io::stdout().flush();
        let l = ExchangeListener::bind(std::net::SocketAddr::from(([0, 0, 0, 0], args.port)))?;
        l.accept(None, args.timeout)?
    } else {
        let host = args.server.clone().unwrap_or_default();
        Exchange::connect(&host, args.port, args.timeout)?
    };
    let mine = PeerVersion::new(SOFTIB_PERFTEST_VERSION);
    let remote = ex.exchange_versions(SOFTIB_PERFTEST_VERSION)?;
    if let Some(link) = link.as_mut() {
        // The peer's first message: it has the exchange's connection.
        link.confirm()?;
    }
    let sys = ex.exchange_sys_data(&remote, SysData::default())?;
    let mtu_enum = exchange::mtu_enum(local_mtu as u32).unwrap_or(4);
    let mtu_enum = ex.exchange_mtu(&remote, mtu_enum)?;
    let mtu = exchange::mtu_bytes(mtu_enum).map_or(local_mtu, u64::from);
    for n in args.apply_mtu(mtu)? {
        outln!("{n}");
    }
    let format = Negotiation::between(&mine, &remote);
    let max_rd = i32::from(dev.attr.max_qp_rd_atom);
    let params = NegotiateParams::from_args(&args, format, max_rd);
    if let Some(remote_rd) = ex.negotiate(format, &params)? {
        if let Some(o) = args.out_reads {
            if i64::from(o) > i64::from(remote_rd) {
                outln!(" out_reads is greater than remote max_qp_rd_atom, setting to {remote_rd}");
                args.out_reads = Some(remote_rd.max(1) as u32);
            }
        }
    }
    let out_reads = args
        .out_reads
        .unwrap_or(u32::from(dev.attr.max_qp_rd_atom.min(16)));
    let inline = args.inline_size.unwrap_or(0);

    let sizes = args.sizes(mtu);
    let max_size = message_area(
        sizes.iter().copied().max().unwrap_or(args.size),
        sys.cycle_buffer,
    );
    let mut l = Local::new(ctx, dev_index as u32, dev, port, &args, max_size, inline)?;

    // Key exchange, once per QP.
    let mut psn_seed = std::process::id().wrapping_mul(2_654_435_761);
    let dests: Vec<Dest> = l
        .qps
        .iter()
        .map(|q| {
            psn_seed = psn_seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
            Dest {
                lid: l.port.lid.0,
                out_reads,
                qpn: q.value(),
                psn: psn_seed & 0x00ff_ffff,
                rkey: l.mr.rkey,
                vaddr: l.buf.addr() + l.recv_off,
                srqn: 0,
                gid: args
                    .gid_index
                    .and_then(|i| l.port.gids.get(usize::from(i)))
                    .map(|g| g.0),
            }
        })
        .collect();
    if let Some(link) = link.as_mut() {
        // create_rdma_cm_connection: a hand shake, the test QPs' connections, a hand shake.
        let sync = Dest::default();
        ex.hand_shake(&sync)?;
        l.connect_cm(link, &args, mtu, &dests, out_reads)?;
        ex.hand_shake(&sync)?;
        link.confirm()?;
    }
    let banner = BannerInfo::new(
        BannerStyle::V6,
        &args,
        &l.info.name,
        mtu,
        if l.port.link_layer_ib {
            LinkLayer::Ib
        } else {
            LinkLayer::Ethernet
        },
        inline,
        out_reads,
    );
    out!("{}", banner.render());
    let mut remotes = Vec::new();
    for d in &dests {
        remotes.push(ex.hand_shake(d)?);
    }
    if link.is_none() {
        l.connect(&args, mtu, &dests, &remotes, out_reads)?;
    }
    for d in &dests {
        out!("{}", address_lines(Side::Local, args.test, d));
    }
    let mut remotes2 = Vec::new();
    for d in &dests {
        remotes2.push(ex.hand_shake(d)?);
    }
    for r in &remotes2 {
        out!("{}", address_lines(Side::Remote, args.test, r));
    }
    ex.hand_shake(&dests[0])?;
    let unit = if args.report_gbits {
        BwUnit::Gbit
    } else {
        BwUnit::MiB
    };
    match args.mode {
        Mode::Bw => out!("{}", report::bw_table_header(BannerStyle::V6, unit)),
        Mode::Lat => out!("{}", report::lat_table_header()),
    }
    let _ = std::io::stdout().flush();
    let mut json = Vec::new();
    // A unidirectional write/read/atomic BW test: the server only waits for the client's
    // report, once; the client sends its last report after all sizes.
    let one_way_rdma = args.mode == Mode::Bw && args.test != Test::Send && !args.duplex;
    let sizes = if one_way_rdma && args.is_server() {
        sizes[..sizes.len().min(1)].to_vec()
    } else {
        sizes
    };
    let mut last_report = None;
    for &size in &sizes {
        args.size = size;
        match args.mode {
            Mode::Bw => {
                let row = l.bw(&args, size, &remotes, &mut ex, &dests[0], unit, &remote)?;
                if let Some(r) = row {
                    json.push(report::bw_json(&banner, &r, None));
                    last_report = Some(r);
                }
            }
            Mode::Lat => {
                if let Some(stats) = l.lat(&args, size, &remotes, &mut ex, &dests[0])? {
                    out!("{}", stats.row());
                    json.push(stats.json(&banner));
                }
            }
        }
        let _ = std::io::stdout().flush();
    }
    out!("{}", report::RESULT_LINE);
    if one_way_rdma && !args.is_server() {
        ex.hand_shake(&dests[0])?;
        ex.exchange_bw_reports(&remote, &last_report.unwrap_or_default())?;
    }
    if args.out_json && !json.is_empty() {
        let v = serde_json::json!({ "test_info": banner.json_test_info(), "results": json });
        let text = serde_json::to_string_pretty(&v)?;
        std::fs::write(&args.out_json_file, text)
            .map_err(|e| RunError(format!(" cannot write {}: {e}", args.out_json_file)))?;
    }
    // Upstream's ib_write_lat ends without the closing hand shake (6.06 and 6.x alike); a
    // --run_infinitely run ends only when the peer has gone.
    let infinite = args.test_method == crate::args::TestMethod::Infinitely;
    let write_lat = args.mode == Mode::Lat && args.test == Test::Write;
    if !write_lat && !infinite {
        ex.close(&dests[0])?;
    }
    if let Some(link) = link {
        link.finish();
    }
    Ok(())
}

/// How many bytes each side's message area needs for messages of up to `max_size` bytes.
///
/// Upstream's sender moves its remote address by the message size rounded up to a cache line
/// after every atomic, and after every write or read no longer than half of `cycle_buffer`
/// (the larger page size of the two sides, from `check_sys_data`), wrapping within
/// `cycle_buffer`: the area a peer targets must cover that much (perftest 6.06's
/// `ib_atomic_bw` client walks 64 bytes at a time through 4096).
fn message_area(max_size: u64, cycle_buffer: i32) -> u64 {
    let cycle = u64::try_from(cycle_buffer)
        .unwrap_or(0)
        .clamp(4096, 1 << 20);
    max_size.max(8).max(cycle)
}

impl Local {
    fn new(
        mut ctx: Context,
        dev_index: u32,
        dev_info: DeviceInfo,
        port: PortInfo,
        args: &PerftestArgs,
        max_size: u64,
        inline: u32,
    ) -> Result<Local> {
        // Two areas: what this side sends from / reads into, and what the peer writes into or
        // reads from (UD receives land here too, after their 40-byte GRH area).
        let area = (max_size + GRH_AREA).div_ceil(64) * 64;
        let len = usize::try_from(area * 2)?;
        let dev = dev_index;
        let buf = ctx.alloc_buffer(len)?;
        let pd = ctx.alloc_pd(dev)?;
        let access = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ)
            .with(AccessFlags::REMOTE_ATOMIC);
        let mr = ctx.reg_mr(dev, pd, &buf, 0, len, access)?;
        let depth = (args.tx_depth + args.rx_depth) * args.num_qps.max(1);
        let cq = ctx.create_cq(dev, depth.max(16)).map_err(|e| {
            RunError(format!(
                " Couldn't create CQ of {} entries ((TX depth {} + RX depth {}) x {} QPs): {e}; \
                 lower -t, -r or -q",
                depth.max(16),
                args.tx_depth,
                args.rx_depth,
                args.num_qps.max(1)
            ))
        })?;
        let qkey = if args.rdma_cm {
            softib_cm::rdma_cm::UDP_QKEY
        } else {
            softib::UD_QKEY
        };
        let qp_type = match args.connection {
            Connection::Rc => QpType::Rc,
            Connection::Uc => QpType::Uc,
            Connection::Ud => QpType::Ud,
        };
        let mut qps = Vec::new();
        for _ in 0..args.num_qps.max(1) {
            let qpn = ctx.create_qp(
                dev,
                QpInitAttr {
                    qp_type,
                    pd,
                    send_cq: cq,
                    recv_cq: cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: args.tx_depth.max(1),
                        max_recv_wr: args.rx_depth.max(1),
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: inline,
                    },
                    sq_sig_all: false,
                },
            )?;
            let remote = AccessFlags::REMOTE_WRITE
                .with(AccessFlags::REMOTE_READ)
                .with(AccessFlags::REMOTE_ATOMIC);
            let (mut a, mask) = crate::port::init_attr(qp_type == QpType::Ud, args.ib_port, remote);
            a.qkey = qkey;
            ctx.modify_qp(dev, qpn, &a, mask)?;
            qps.push(qpn);
        }
        Ok(Local {
            ctx,
            dev: dev_index,
            info: dev_info,
            port,
            pd,
            cq,
            qps,
            buf,
            mr,
            recv_off: area,
            ahs: Vec::new(),
            qkey,
            timeout: args.timeout,
            server: args.is_server(),
            held: Vec::new(),
        })
    }

    fn av(&self, args: &PerftestArgs, r: &Dest) -> AddressVector {
        AddressVector {
            dlid: softib::Lid(r.lid),
            sl: args.sl,
            src_path_bits: 0,
            static_rate: 0,
            grh: r.gid.map(|g| GlobalRoute {
                dgid: Gid(g),
                flow_label: 0,
                sgid_index: args.gid_index.unwrap_or(0),
                hop_limit: 64,
                traffic_class: 0,
            }),
            port_num: args.ib_port,
        }
    }

    /// INIT → RTR → RTS (`ctx_connect`).
    fn connect(
        &mut self,
        args: &PerftestArgs,
        mtu: u64,
        mine: &[Dest],
        remotes: &[Dest],
        out_reads: u32,
    ) -> Result<()> {
        for (i, &qpn) in self.qps.clone().iter().enumerate() {
            let (Some(m), Some(r)) = (mine.get(i), remotes.get(i)) else {
                return fail(" the peer sent fewer QP keys than this side has QPs (-q must match)");
            };
            if args.connection == Connection::Ud {
                self.ready_ud(qpn, m.psn)?;
                let ah = self.ctx.create_ah(self.dev, self.pd, self.av(args, r))?;
                self.ahs.push(ah);
                continue;
            }
            let rd = u8::try_from(out_reads.clamp(1, 255)).unwrap_or(16);
            let c = crate::port::ConnectedQp {
                reliable: args.connection == Connection::Rc,
                mtu: mtu_from_bytes(mtu),
                remote_qpn: Qpn::new(r.qpn),
                remote_psn: Psn::new(r.psn),
                local_psn: Psn::new(m.psn),
                av: self.av(args, r),
                max_dest_rd_atomic: rd,
                max_rd_atomic: rd,
                timeout: args.qp_timeout,
                retry_cnt: 7,
                rnr_retry: 7,
            };
            crate::port::ready_connected(&mut self.ctx, self.dev, qpn, &c)?;
        }
        Ok(())
    }

    /// UD: INIT → RTR → RTS.
    fn ready_ud(&mut self, qpn: Qpn, psn: u32) -> Result<()> {
        let rtr = QpAttr {
            qp_state: QpState::Rtr,
            ..QpAttr::default()
        };
        self.ctx.modify_qp(self.dev, qpn, &rtr, AttrMask::STATE)?;
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: Psn::new(psn),
            ..QpAttr::default()
        };
        self.ctx
            .modify_qp(self.dev, qpn, &rts, AttrMask::STATE.with(AttrMask::SQ_PSN))?;
        Ok(())
    }

    /// `-R -c UD`: resolves every QP with SIDR (`rdma_connect` / `rdma_accept` on RDMA_PS_UDP
    /// ids) and makes the address handle to the peer. A latency or bidirectional test also
    /// needs the server to send: its client then sends its QPN in a SEND with immediate
    /// (upstream's `send_qp_num_for_ah`) into the receive the server posted before its
    /// SIDR_REP.
    fn connect_cm_ud(
        &mut self,
        link: &mut crate::rdma_cm::Link,
        args: &PerftestArgs,
        mine: &[Dest],
    ) -> Result<()> {
        /// The wr_id of the QPN message, apart from the test's.
        const ANNOUNCE: u64 = u64::MAX - 1;
        let announce = args.mode == Mode::Lat || args.duplex;
        for (&qpn, m) in self.qps.clone().iter().zip(mine) {
            self.ready_ud(qpn, m.psn)?;
            let recv = self.recv_wr(ANNOUNCE, 4, true);
            let (ctx, dev, server) = (&mut self.ctx, self.dev, self.server);
            let peer = link.connect_ud(qpn, || {
                if announce && server {
                    ctx.post_recv(dev, qpn, vec![recv])?;
                }
                Ok(())
            })?;
            let ah = self
                .ctx
                .create_ah(self.dev, self.pd, link.av_to(peer.gid))?;
            self.ahs.push(ah);
            if !announce {
                continue;
            }
            if server {
                let wc = self.wait_wr(ANNOUNCE, "the client's QPN message (-R, UD)")?;
                if wc.imm_data.is_none() {
                    return fail(" -R: the client's QPN message came without immediate data");
                }
            } else {
                let Some(remote_qpn) = peer.qpn else {
                    return fail(" -R: the SIDR_REP named no QP");
                };
                self.buf.write(0, &qpn.value().to_ne_bytes());
                let wr = SendWr {
                    wr_id: ANNOUNCE,
                    opcode: WrOpcode::SendWithImm(qpn.value()),
                    sg_list: vec![self.send_sge(4)],
                    flags: SendFlags::default().with(SendFlags::SIGNALED),
                    inline_data: None,
                    ud: Some(UdDest {
                        ah,
                        remote_qpn,
                        remote_qkey: peer.qkey,
                    }),
                };
                self.ctx.post_send(self.dev, qpn, vec![wr])?;
                self.wait_wr(ANNOUNCE, "the send of this side's QPN (-R, UD)")?;
            }
        }
        if self.server {
            link.accepted_all();
        }
        Ok(())
    }

    /// Waits `--timeout` for the completion of work request `id`.
    fn wait_wr(&mut self, id: u64, what: &str) -> Result<WorkCompletion> {
        let deadline = Instant::now() + self.timeout;
        let side = if self.server { "server" } else { "client" };
        while Instant::now() < deadline {
            let wait = deadline.saturating_duration_since(Instant::now());
            for wc in self.poll(wait.min(Duration::from_millis(100)), side)? {
                if wc.wr_id == id {
                    return Ok(wc);
                }
                self.held.push(wc);
            }
        }
        fail(format!(
            " No completion for {what} within {} s",
            self.timeout.as_secs()
        ))
    }

    /// `-R`: connects every QP with the CM (`create_rdma_cm_connection`): the client
    /// sends a REQ per QP, the server takes a request per QP; each QP is readied for its
    /// peer's before the REP (server) or the RTU (client). The read and atomic tests offer
    /// `out_reads` reads/atomics, the others none, as upstream's `conn_param`.
    fn connect_cm(
        &mut self,
        link: &mut crate::rdma_cm::Link,
        args: &PerftestArgs,
        mtu: u64,
        mine: &[Dest],
        out_reads: u32,
    ) -> Result<()> {
        if args.connection == Connection::Ud {
            return self.connect_cm_ud(link, args, mine);
        }
        let rd = if args.test.is_read_like() {
            u8::try_from(out_reads).unwrap_or(u8::MAX)
        } else {
            0
        };
        let code = exchange::mtu_enum(mtu as u32).unwrap_or(3);
        for (&qpn, m) in self.qps.iter().zip(mine) {
            let end = link.end(qpn, m.psn, rd, code);
            let (ctx, dev) = (&mut self.ctx, self.dev);
            let deadline = Some(Instant::now() + self.timeout);
            link.connect_qp(&end, deadline, |c| {
                crate::port::ready_connected(ctx, dev, qpn, c)
            })?;
        }
        if self.server {
            link.accepted_all();
        }
        Ok(())
    }

    fn send_sge(&self, size: u64) -> Sge {
        Sge {
            addr: self.buf.addr(),
            length: size as u32,
            lkey: self.mr.lkey,
        }
    }

    fn recv_wr(&self, id: u64, size: u64, ud: bool) -> RecvWr {
        RecvWr {
            wr_id: id,
            sg_list: vec![Sge {
                addr: self.buf.addr() + self.recv_off,
                length: (size + if ud { GRH_AREA } else { 0 }) as u32,
                lkey: self.mr.lkey,
            }],
        }
    }

    fn work_request(
        &self,
        args: &PerftestArgs,
        size: u64,
        q: usize,
        r: &Dest,
        id: u64,
        signaled: bool,
    ) -> SendWr {
        let remote = RemoteAddr {
            addr: r.vaddr,
            rkey: RKey(r.rkey),
        };
        let opcode = match args.test {
            Test::Send => WrOpcode::Send,
            Test::Write => WrOpcode::RdmaWrite(remote),
            Test::Read => WrOpcode::RdmaRead(remote),
            Test::Atomic => match args.atomic_type {
                AtomicType::FetchAndAdd => WrOpcode::AtomicFetchAndAdd { remote, add: 1 },
                AtomicType::CmpAndSwap => WrOpcode::AtomicCmpAndSwp {
                    remote,
                    compare: 0,
                    swap: 0,
                },
            },
        };
        let size = if args.test == Test::Atomic { 8 } else { size };
        let mut flags = SendFlags::default();
        if signaled {
            flags = flags.with(SendFlags::SIGNALED);
        }
        SendWr {
            wr_id: id,
            opcode,
            sg_list: vec![self.send_sge(size)],
            flags,
            inline_data: None,
            ud: self.ahs.get(q).map(|&ah| UdDest {
                ah,
                remote_qpn: Qpn::new(r.qpn),
                remote_qkey: self.qkey,
            }),
        }
    }

    /// Polls completions, failing on an error completion with upstream's message and what
    /// the status means.
    fn poll(&mut self, wait: Duration, side: &str) -> Result<Vec<WorkCompletion>> {
        let wcs = self.ctx.poll_cq(self.dev, self.cq, 256, wait)?;
        if let Some(bad) = wcs.iter().find(|w| w.status != WcStatus::Success) {
            let mut msg = format!(
                " Completion with error at {side}:\n Failed status {}: wr_id {} syndrom 0x{:x}\n \
                 ({}: {})",
                wc_code(bad.status),
                bad.wr_id,
                bad.vendor_err,
                bad.status,
                explain_status(bad.status)
            );
            // A peer that stopped answering: what this side's port can tell about why.
            if matches!(bad.status, WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr) {
                msg.push_str(&self.findings(None));
            }
            return fail(msg);
        }
        Ok(wcs)
    }

    /// What to say when nothing happened for `--timeout`.
    fn stalled(&mut self, watch: &StallWatch, what: &str, done: u64, need: u64) -> RunError {
        let mut msg = format!(
            " No progress for {} s while {what}: {done} of {need} done.",
            self.timeout.as_secs()
        );
        msg.push_str(&self.findings(Some(watch)));
        RunError(msg)
    }

    /// What the HCA can say about a transfer that stopped: the port's state, the faults set
    /// on it, what it dropped. With the `watch` of a run that stood still, the drops counted
    /// while it did, and a word when there were none; without, the drops since the device
    /// started.
    fn findings(&mut self, watch: Option<&StallWatch>) -> String {
        let mut msg = String::new();
        let (dev, port) = (self.info.name.clone(), self.port.number);
        let stall = match watch {
            Some(w) => w.diagnose(&mut self.ctx, &dev, port),
            None => crate::port::diagnose(&mut self.ctx, &dev, port),
        };
        match stall {
            Ok(Some(stall)) => {
                if let Some(why) = &stall.port_down {
                    msg.push_str(&format!("\n {why}"));
                }
                if let Some((spec, stats)) = &stall.faults {
                    msg.push_str(&format!(
                        "\n Faults are set on port {} of {}: {spec} (so far lost {}, duplicated \
                         {}, reordered {}, corrupted {}, delayed {}); `softib link set {} fault \
                         none` removes them.",
                        self.port.number,
                        self.info.name,
                        stats.lost,
                        stats.duplicated,
                        stats.reordered,
                        stats.corrupted,
                        stats.delayed,
                        self.info.name
                    ));
                }
                let span = stall.drops_span();
                if stall.relevant_drops().is_empty() {
                    if watch.is_some() {
                        msg.push_str(&format!(
                            "\n This HCA dropped nothing{span}: the peer did not send (is it \
                             running, is its port Active?)."
                        ));
                    }
                } else {
                    msg.push_str(&format!("\n This HCA dropped packets{span}:"));
                    for (r, n) in stall.relevant_drops() {
                        msg.push_str(&format!(" {r}={n}"));
                    }
                    if stall.dropped("ud_no_receive") || stall.dropped("uc_no_receive") {
                        msg.push_str(
                            "\n Messages arrived when no receive was posted (UD/UC drop them, \
                             nothing retransmits): raise -r, or use RC.",
                        );
                    }
                    if stall.dropped("qkey_mismatch") {
                        msg.push_str("\n Q_Key mismatch: both sides must use the same Q_Key.");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => msg.push_str(&format!("\n (could not ask the HCA why: {e})")),
        }
        msg
    }
}

/// The numeric `ibv_wc_status` value upstream prints.
fn wc_code(s: WcStatus) -> u32 {
    s as u32
}

/// What an error status means in practice.
fn explain_status(s: WcStatus) -> &'static str {
    match s {
        WcStatus::RetryExcErr => {
            "the peer stopped acknowledging: its process or port is gone, or packets are lost"
        }
        WcStatus::RnrRetryExcErr => "the peer never posted a receive in time",
        WcStatus::RemAccessErr => "the peer refused the access (rkey, address or permissions)",
        WcStatus::RemInvReqErr => "the peer found the request invalid (length or opcode)",
        WcStatus::WrFlushErr => "the QP is in the error state; earlier work failed",
        WcStatus::LocProtErr => "a local buffer failed its L_Key check",
        _ => "see ibv_wc_status_str",
    }
}

/// Whether a completion is of a receive.
fn is_receive(op: WcOpcode) -> bool {
    matches!(op, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm)
}

#[cfg(test)]
mod message_area_tests {
    use super::message_area;

    #[test]
    fn the_area_covers_the_peers_address_cycle() {
        // An 8-byte atomic test still exposes a whole cycle buffer (a page).
        assert_eq!(message_area(8, 4096), 4096);
        assert_eq!(message_area(8, 65536), 65536);
        // Big messages need their own size; absurd or missing peer values are clamped.
        assert_eq!(message_area(1 << 20, 4096), 1 << 20);
        assert_eq!(message_area(8, -1), 4096);
        assert_eq!(message_area(8, i32::MAX), 1 << 20);
    }
}
