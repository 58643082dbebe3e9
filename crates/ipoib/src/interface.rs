//! One IPoIB interface in datagram mode: the TUN device, the UD QP that carries its packets,
//! the broadcast group it joins and the neighbours it resolves, forwarded both ways by
//! [`Interface::run`].
//!
//! Outgoing, a packet read from the TUN device goes to the broadcast group (a broadcast or
//! multicast destination) or to its neighbour: the remote QPN from the neighbour's IPoIB ARP
//! answer and an address handle from the SA's PathRecord to its GID. Until a neighbour is
//! resolved its packets wait (a few per neighbour, for [`ARP_TIMEOUT`]) while ARP asks again
//! every [`ARP_RETRY`]. Incoming, a receive completion is IPv4 for the TUN device or ARP to
//! answer and learn from. The port is checked twice a second: the group is left when the port
//! goes down or its LID or SM moves, joined (the QP attached) when it is Active, and the
//! membership renewed every [`REJOIN`].

use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use softib::mad::MadAgent;
use softib::{
    AccessFlags, AddressVector, AhHandle, AttrMask, Buffer, CompChannel, Context, CqHandle, Gid,
    Lid, MrKeys, PdHandle, QpAttr, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr, SendFlags,
    SendWr, Sge, UdDest, WcOpcode, WcStatus, WrOpcode,
};
use softib_net::tun::{IfConfig, Tun};
use softib_wire::mad::sa;
use softib_wire::PKey;

use crate::encap::{
    self, Arp, HwAddr, Received, ARP_REPLY, ARP_REQUEST, ENCAP_LEN, ETHERTYPE_ARP, ETHERTYPE_IPV4,
    HW_LEN,
};
use crate::state::{self, Counters, IfState};
use crate::Error;

/// Receive and send slots.
const N_RECV: usize = 128;
const N_SEND: usize = 128;
/// A slot holds the GRH area, the encapsulation header and the largest IB MTU (4096).
const SLOT: usize = 4160;
/// Packets held per destination while ARP resolves it.
const MAX_QUEUED: usize = 8;
/// How long a neighbour may stay unresolved before its packets are dropped.
pub const ARP_TIMEOUT: Duration = Duration::from_secs(3);
/// How often an unanswered ARP request is sent again.
pub const ARP_RETRY: Duration = Duration::from_millis(500);
/// How often the membership is renewed.
pub const REJOIN: Duration = Duration::from_secs(15);
/// Sends posted together in one request.
const POST_BATCH: usize = 32;
/// What RESET → INIT sets on a UD QP: its P_Key index, port and Q_Key.
const UD_INIT: AttrMask = AttrMask::STATE
    .with(AttrMask::PKEY_INDEX)
    .with(AttrMask::PORT)
    .with(AttrMask::QKEY);

/// Which interface on which port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The interface name (e.g. ib0).
    pub ifname: String,
    /// The device (e.g. mlx4_0).
    pub dev: String,
    /// The port.
    pub port: u8,
    /// The partition (P_Key).
    pub pkey: u16,
}

/// The broadcast group as joined.
#[derive(Debug, Clone, Copy)]
struct Group {
    mgid: Gid,
    mlid: Lid,
    qkey: u32,
    sl: u8,
    mtu_bytes: usize,
}

#[derive(Debug, Default)]
struct Neighbour {
    /// Resolved: the remote QPN and the AH of its path.
    dest: Option<(Qpn, AhHandle)>,
    gid: Option<Gid>,
    queued: VecDeque<Vec<u8>>,
    asked: Option<Instant>,
    first_asked: Option<Instant>,
}

/// A running IPoIB interface.
pub struct Interface {
    settings: Settings,
    ctx: Context,
    mad: MadAgent,
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
    state: String,
    last_check: Option<Instant>,
    last_join: Option<Instant>,
    last_written: Option<String>,
    /// Sends prepared but not posted yet: posted together, one request per batch.
    pending: Vec<SendWr>,
    /// The interface's IPv4 address and netmask, and when they were read.
    addr: (Option<(Ipv4Addr, Ipv4Addr)>, Option<Instant>),
}

fn io_error(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |error| Error::Io { what, error }
}

impl Interface {
    /// Creates the interface: checks the port, makes the TUN device, the verbs resources and
    /// the MAD agent, and writes the first state ("port down" until the port is checked).
    pub fn open(s: &Settings) -> Result<Interface, Error> {
        let mut ctx = Context::open()?;
        let dev = ctx.device_index(&s.dev)?;
        let info = ctx
            .devices()?
            .into_iter()
            .nth(dev as usize)
            .ok_or_else(|| Error::Setup(format!("no device {}", s.dev)))?;
        let port = info
            .ports
            .iter()
            .find(|p| p.number == s.port)
            .ok_or_else(|| Error::Setup(format!("{} has no port {}", s.dev, s.port)))?;
        if !port.link_layer_ib {
            return Err(Error::Setup(format!(
                "{} port {} is RoCE (Ethernet): IPoIB runs on InfiniBand ports; on RoCE use the \
                 Ethernet interface itself",
                s.dev, s.port
            )));
        }
        // The port's P_Key table holds the default partition only (the SM configures no
        // others), so that is the one partition an interface can use.
        if s.pkey | 0x8000 != 0xffff {
            return Err(Error::Setup(format!(
                "P_Key 0x{:04x}: only the default partition (0xffff) is configured on softib \
                 ports; leave out --pkey",
                s.pkey
            )));
        }
        let pkey_index = 0;
        let tun = Tun::create(&s.ifname)
            .map_err(io_error(format!("creating the TUN device {}", s.ifname)))?;
        let ifc = IfConfig::new().map_err(io_error("opening the interface control socket"))?;
        let pd = ctx.alloc_pd(dev)?;
        let cq = ctx.create_cq(dev, (N_RECV + N_SEND) as u32)?;
        let channel = ctx.create_comp_channel()?;
        let buf = ctx.alloc_buffer((N_RECV + N_SEND) * SLOT)?;
        let mr = ctx.reg_mr(dev, pd, &buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)?;
        let mad = MadAgent::open(&mut ctx, dev, s.port)?;
        let mut i = Interface {
            settings: s.clone(),
            ctx,
            mad,
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
            state: "port down".into(),
            last_check: None,
            last_join: None,
            last_written: None,
            pending: Vec::new(),
            addr: (None, None),
        };
        // The interface MTU before the port is up: the IB MTU of the port's maximum.
        let mtu = port.active_mtu.bytes().unwrap_or(2048) - ENCAP_LEN;
        let _ = i.ifc.set_mtu(&s.ifname, mtu as u32);
        i.write_state();
        Ok(i)
    }

    /// Forwards between the TUN device and the fabric until `stop` is set; then removes the
    /// state file.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), Error> {
        let mut pkt = vec![0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
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
                    Err(e) => {
                        return Err(Error::Io {
                            what: "waiting for the TUN device and the completion channel".into(),
                            error: e.into(),
                        })
                    }
                }
                (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
            };
            if chan_ready {
                self.channel
                    .try_get_events()
                    .map_err(io_error("reading the completion channel"))?;
            }
            if tun_ready {
                for _ in 0..64 {
                    match self.tun.recv(&mut pkt) {
                        Ok(n) => self.outgoing(&pkt[..n])?,
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => return Err(io_error("reading the TUN device")(e)),
                    }
                }
                self.flush()?;
            }
            self.drain_cq()?;
            self.expire_neighbours();
            self.flush()?;
        }
        let _ = std::fs::remove_file(state::path(&self.settings.ifname));
        Ok(())
    }

    // ---- port state, group membership -----------------------------------------------------

    fn check_port(&mut self) -> Result<(), Error> {
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
            .and_then(|d| d.ports.into_iter().find(|p| p.number == self.settings.port))
            .ok_or_else(|| Error::Setup("the device went away".into()))?;
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
                Err(e) => self.state = format!("joining: {e}"),
            }
        } else if !active {
            self.state = "port down".into();
        } else if self.last_join.is_some_and(|t| t.elapsed() > REJOIN) {
            // An SM that restarted on the same port has forgotten the membership and says
            // nothing (no ClientReregister); joining again is harmless when it has not.
            if let Err(e) = self.rejoin() {
                self.state = format!("rejoining: {e}");
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

    /// Joins the broadcast group again (SubnAdmSet of the same membership).
    fn rejoin(&mut self) -> Result<(), Error> {
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

    fn join_sa(&mut self) -> Result<sa::McMemberRecord, Error> {
        crate::sa::join_broadcast(
            &mut self.mad,
            &mut self.ctx,
            self.sm_lid,
            PKey(self.settings.pkey),
            self.own_gid,
        )
    }

    /// Joins the broadcast group as a full member and attaches the QP (created on the first
    /// join, with the group's Q_Key).
    fn join(&mut self) -> Result<(), Error> {
        self.last_join = Some(Instant::now());
        let mgid = sa::ipoib_broadcast_mgid(PKey(self.settings.pkey));
        let got = self.join_sa()?;
        let g = Group {
            mgid,
            mlid: got.mlid,
            qkey: got.q_key.0,
            sl: got.sl,
            mtu_bytes: got.mtu.bytes().unwrap_or(2048),
        };
        let qp = match self.qp {
            Some(qp) => qp,
            None => {
                let qp = self.create_qp(g.qkey)?;
                self.qp = Some(qp);
                qp
            }
        };
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
                port_num: self.settings.port,
            },
        )?;
        let _ = self
            .ifc
            .set_mtu(&self.settings.ifname, (g.mtu_bytes - ENCAP_LEN) as u32);
        self.group = Some((g, ah));
        Ok(())
    }

    fn create_qp(&mut self, qkey: u32) -> Result<Qpn, Error> {
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
            port_num: self.settings.port,
            qkey,
            ..QpAttr::default()
        };
        self.ctx.modify_qp(self.dev, qpn, &attr, UD_INIT)?;
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

    fn hwaddr(&self) -> HwAddr {
        HwAddr::new(self.qp.unwrap_or(Qpn::new(0)), self.own_gid)
    }

    // ---- sending ------------------------------------------------------------------------------

    fn outgoing(&mut self, pkt: &[u8]) -> Result<(), Error> {
        let Some(dst) = encap::ipv4_destination(pkt) else {
            self.counters.drop_not_ipv4 += 1;
            return Ok(());
        };
        let Some((g, bcast_ah)) = self.group else {
            self.counters.drop_port_down += 1;
            return Ok(());
        };
        let ifaddr = self.if_addr();
        if encap::is_broadcast(dst, ifaddr) {
            return self.send(ETHERTYPE_IPV4, pkt, bcast_ah, Qpn::MULTICAST, g.qkey);
        }
        let n = self.neighbours.entry(dst).or_default();
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
                self.ifc.ipv4(&self.settings.ifname).ok().flatten(),
                Some(Instant::now()),
            );
        }
        self.addr.0
    }

    fn send(
        &mut self,
        ethertype: u16,
        payload: &[u8],
        ah: AhHandle,
        qpn: Qpn,
        qkey: u32,
    ) -> Result<(), Error> {
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
        self.buf
            .write(slot * SLOT, &encap::encapsulate(ethertype, payload));
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
        if self.pending.len() >= POST_BATCH {
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
    fn flush(&mut self) -> Result<(), Error> {
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

    /// An ARP message from this interface (`None` while it has no IPv4 address to speak for).
    fn arp(&mut self, op: u16, tha: HwAddr, tpa: Ipv4Addr) -> Option<Vec<u8>> {
        let (spa, _) = self.if_addr()?;
        Some(
            Arp {
                op,
                sha: self.hwaddr(),
                spa,
                tha,
                tpa,
            }
            .emit(),
        )
    }

    fn arp_request(&mut self, ip: Ipv4Addr) -> Result<(), Error> {
        let Some((g, ah)) = self.group else {
            return Ok(());
        };
        let Some(req) = self.arp(ARP_REQUEST, HwAddr([0; HW_LEN]), ip) else {
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

    fn drain_cq(&mut self) -> Result<(), Error> {
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
    ) -> Result<(), Error> {
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

    fn incoming(&mut self, data: &[u8], src_qp: Qpn) -> Result<(), Error> {
        let Some(r) = Received::parse(data) else {
            self.counters.drop_malformed += 1;
            return Ok(());
        };
        if Some(src_qp) == self.qp && r.sgid == self.own_gid {
            return Ok(()); // our own broadcast, looped back by a switch
        }
        match r.ethertype {
            ETHERTYPE_IPV4 => {
                self.counters.rx_packets += 1;
                if let Err(e) = self.tun.send(r.payload) {
                    // The interface is down (`ip link set ib0 down`): the kernel refuses.
                    if e.raw_os_error() != Some(rustix::io::Errno::IO.raw_os_error()) {
                        return Err(io_error("writing to the TUN device")(e));
                    }
                }
            }
            ETHERTYPE_ARP => {
                self.counters.arp_rx += 1;
                self.incoming_arp(r.payload)?;
            }
            _ => self.counters.drop_malformed += 1,
        }
        Ok(())
    }

    fn incoming_arp(&mut self, a: &[u8]) -> Result<(), Error> {
        let Some(arp) = Arp::parse(a) else {
            self.counters.drop_malformed += 1;
            return Ok(());
        };
        let ours = self.if_addr().map(|(ip, _)| ip);
        let for_us = ours == Some(arp.tpa);
        // RFC 826: update a neighbour we know; learn the sender when the message is for us.
        if self.neighbours.contains_key(&arp.spa) || for_us {
            self.learn(arp.spa, arp.sha)?;
        }
        if arp.op == ARP_REQUEST && for_us {
            if let Some((qpn, ah)) = self.neighbours.get(&arp.spa).and_then(|n| n.dest) {
                if let Some(reply) = self.arp(ARP_REPLY, arp.sha, arp.spa) {
                    let qkey = self.group.map_or(0, |(g, _)| g.qkey);
                    self.send(ETHERTYPE_ARP, &reply, ah, qpn, qkey)?;
                }
            }
        }
        Ok(())
    }

    /// Records `ip` at hardware address `hw`: resolves the path to its GID through the SA and
    /// sends what waited for it.
    fn learn(&mut self, ip: Ipv4Addr, hw: HwAddr) -> Result<(), Error> {
        let (qpn, gid) = (hw.qpn(), hw.gid());
        if let Some(n) = self.neighbours.get(&ip) {
            if n.gid == Some(gid) && n.dest.is_some_and(|(q, _)| q == qpn) {
                return Ok(());
            }
        }
        let path = match crate::sa::path_to(
            &mut self.mad,
            &mut self.ctx,
            self.sm_lid,
            self.own_gid,
            gid,
        ) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("{}: no path to {ip} ({gid:?}): {e}", self.settings.ifname);
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
                port_num: self.settings.port,
            },
        )?;
        let n = self.neighbours.entry(ip).or_default();
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
        // Whoever waits for this neighbour (rdma_resolve_addr) reads it from the state now,
        // not at the next port check.
        self.write_state();
        Ok(())
    }

    fn write_state(&mut self) {
        let s = IfState {
            ifname: self.settings.ifname.clone(),
            dev: self.settings.dev.clone(),
            port: self.settings.port,
            pkey: self.settings.pkey,
            pid: std::process::id(),
            state: self.state.clone(),
            hwaddr: self.hwaddr().to_string(),
            mlid: self.group.map_or(0, |(g, _)| g.mlid.0),
            counters: self.counters,
            neighbours: self
                .neighbours
                .iter()
                .filter_map(|(ip, n)| {
                    let ((qpn, _), gid) = (n.dest?, n.gid?);
                    Some(state::Neighbour {
                        ip: *ip,
                        lladdr: HwAddr::new(qpn, gid).to_string(),
                    })
                })
                .collect(),
        };
        let Ok(text) = serde_json::to_string_pretty(&s) else {
            return;
        };
        if self.last_written.as_ref() == Some(&text) {
            return;
        }
        if state::store(&self.settings.ifname, &text).is_ok() {
            self.last_written = Some(text);
        }
    }
}
