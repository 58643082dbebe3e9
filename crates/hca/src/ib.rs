//! An HCA on the emulated InfiniBand link: the transport engine and the subnet management
//! agent composed over native IB framing (`softib_link::ib`: LRH, optional GRH, ICRC, VCRC),
//! with QP0/QP1 delivered to local agents.
//!
//! [`IbCa`] is still sans-IO: frames come in with [`IbCa::handle_frame`] and go out through
//! [`IbCa::poll_frame`]; the host loop ([`crate::host`]) moves them over cables. What happens to
//! a frame that arrives on a port:
//!
//! 1. `ib::open`: LRH parsed, VCRC and ICRC checked — a bad one is counted and dropped — and
//!    sorted by who it is for;
//! 2. VL15: an SMP for the SMI ([`Sma::receive_smp`]): answered, forwarded, or a response
//!    handed to the local SM ([`MadIn`]);
//! 3. otherwise the port must be Active (an Armed port becomes Active on its first data packet,
//!    IBA §7.2) and the DLID must be the port's (the SMA knows both): DestQP 1 is a GMP for
//!    QP1's agents (SA requests to the SM, responses to whoever asked), anything else goes to
//!    the engine.

use std::collections::VecDeque;

use softib_engine::{Hca, HcaConfig, Instant, Memory, PortAttr, RxMeta};
use softib_fabric::smp_packet::{self, MadAddress};
use softib_fabric::{LinkRate, LinkSpeed, LinkWidth, Node, Sma, SmaConfig, SmaEvent, SmiOutput};
use softib_link::ib::{self, FrameKind, IbDrop, HEADROOM};
use softib_proto::MadQp;
use softib_wire::lrh::Repr as LrhRepr;
use softib_wire::mad::attr::SmpAttribute;
use softib_wire::mad::attr::{PortPhysicalState, PortState};
use softib_wire::mad::{smp, AttrId, MAD_LEN};
use softib_wire::{Gid, Guid, Lid, Mtu, PKey, QKey, Qpn};

/// What an HCA says about itself (ibstat's CA block, NodeInfo, NodeDescription).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The device name (`mlx4_0`).
    pub name: String,
    /// NodeDescription (`test213 mlx4_0`; at most 64 bytes are served).
    pub description: String,
    /// Firmware version text.
    pub fw_ver: String,
    /// Hardware version (NodeInfo revision; ibstat prints it in hex).
    pub hw_ver: u32,
    /// NodeGUID; port N's GUID is `node_guid + N`.
    pub node_guid: Guid,
    /// SystemImageGUID.
    pub sys_image_guid: Guid,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// DeviceID; ibstat's "CA type" is `MT<device id in decimal>` for Mellanox parts.
    pub device_id: u16,
    /// Number of ports.
    pub num_ports: u8,
    /// The rate every cable trains to.
    pub rate: LinkRate,
}

impl Identity {
    /// The identity of a CA of a topology file: device `mlx4_0` with firmware 2.42.5000 and
    /// hardware version 0xa1 (a ConnectX-3, as in the seed), 4X QDR.
    pub fn from_node(node: &Node, rate: Option<LinkRate>) -> Identity {
        Identity {
            name: "mlx4_0".into(),
            description: node.description.clone(),
            fw_ver: "2.42.5000".into(),
            hw_ver: 0xa1,
            node_guid: node.node_guid,
            sys_image_guid: node.system_image_guid,
            vendor_id: node.vendor_id,
            device_id: node.device_id,
            num_ports: node.num_ports,
            rate: rate.unwrap_or(LinkRate {
                width: LinkWidth::X4,
                speed: LinkSpeed::Qdr,
            }),
        }
    }

    /// The CA type ibstat prints.
    pub fn ca_type(&self) -> String {
        if self.device_id == 0 {
            "softib".into()
        } else {
            format!("MT{}", self.device_id)
        }
    }

    /// The GUID of `port`.
    pub fn port_guid(&self, port: u8) -> Guid {
        Guid(self.node_guid.0.wrapping_add(u64::from(port)))
    }
}

/// A MAD for the node's local agents (the SM, SA clients, diagnostics).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MadIn {
    /// The port it arrived on.
    pub port: u8,
    /// QP0 or QP1.
    pub qp: MadQp,
    /// The sender's LID (permissive for directed-route SMPs).
    pub slid: Lid,
    /// The sender's QP.
    pub src_qpn: Qpn,
    /// The sender's GID: from the GRH, or (RoCE) its address.
    pub sgid: Option<softib_wire::Gid>,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// Why the node dropped a frame, by name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbStats {
    /// Frames too short or with an unparseable LRH/GRH.
    pub rx_malformed: u64,
    /// VCRC or ICRC wrong.
    pub rx_bad_crc: u64,
    /// Data packets on a port that is not Active.
    pub rx_port_not_active: u64,
    /// Data packets for a DLID that is not the port's.
    pub rx_dlid_mismatch: u64,
    /// VL15 packets that are not SMPs.
    pub rx_bad_smp: u64,
    /// QP1 packets that are not well-formed MADs.
    pub rx_bad_gmp: u64,
    /// Data packets sent.
    pub tx_frames: u64,
}

/// Q_Key of QP1 (IBA §10.2.5 well-known Q_Key).
const GSI_QKEY: QKey = QKey::GSI;

/// An HCA with native IB ports.
pub struct IbCa<M: Memory> {
    id: Identity,
    hca: Hca<M>,
    sma: Sma,
    out: VecDeque<(u8, Vec<u8>)>,
    mads: VecDeque<MadIn>,
    /// What the engine was last told per port: (active, LID, SM LID).
    synced: Vec<(bool, Lid, Lid)>,
    subnet_prefix: u64,
    stats: IbStats,
}

impl<M: Memory> IbCa<M> {
    /// A CA with every port Down (cables not yet trained).
    pub fn new(id: Identity, seed: u64, memory: M) -> IbCa<M> {
        let mut sma_config = SmaConfig::ca(id.num_ports, id.node_guid);
        sma_config.system_image_guid = id.sys_image_guid;
        sma_config.description = id.description.clone();
        sma_config.vendor_id = id.vendor_id;
        sma_config.device_id = id.device_id;
        sma_config.revision = id.hw_ver;
        let sma = Sma::new(sma_config);
        let mut config = HcaConfig::with_seed(seed);
        config.device.node_guid = id.node_guid;
        config.device.sys_image_guid = id.sys_image_guid;
        config.device.vendor_id = id.vendor_id;
        config.device.vendor_part_id = u32::from(id.device_id);
        config.device.hw_ver = id.hw_ver;
        config.device.fw_ver = id.fw_ver.clone();
        let subnet_prefix = 0xfe80_0000_0000_0000;
        config.ports = (1..=id.num_ports)
            .map(|p| PortAttr {
                max_mtu: Mtu::Mtu2048,
                active_mtu: Mtu::Mtu2048,
                lid: Lid(0),
                gids: vec![gid(subnet_prefix, id.port_guid(p))],
                pkeys: vec![PKey::DEFAULT],
                active: false,
            })
            .collect();
        IbCa {
            hca: Hca::new(config, memory),
            sma,
            out: VecDeque::new(),
            mads: VecDeque::new(),
            synced: vec![(false, Lid(0), Lid(0)); usize::from(id.num_ports)],
            subnet_prefix,
            stats: IbStats::default(),
            id,
        }
    }

    /// The identity.
    pub fn identity(&self) -> &Identity {
        &self.id
    }

    /// The transport engine (verbs).
    pub fn hca(&self) -> &Hca<M> {
        &self.hca
    }

    /// The transport engine (verbs), mutable.
    pub fn hca_mut(&mut self) -> &mut Hca<M> {
        &mut self.hca
    }

    /// The SMA.
    pub fn sma(&self) -> &Sma {
        &self.sma
    }

    /// The SMA, mutable (the local SM sets SMInfo and IsSM through it).
    pub fn sma_mut(&mut self) -> &mut Sma {
        &mut self.sma
    }

    /// Drop and traffic counters.
    pub fn stats(&self) -> IbStats {
        self.stats
    }

    /// The cable of `port` trained.
    pub fn link_up(&mut self, port: u8) {
        self.sma.link_up(port, self.id.rate);
        self.sync_ports();
    }

    /// The cable of `port` lost its peer.
    pub fn link_down(&mut self, port: u8) {
        self.sma.link_down(port);
        self.sync_ports();
    }

    /// Events the SMA raised for the link layer (the SM set a port Down or Disabled). A
    /// SubnSet(SMInfo) for softib's SM on this node, which the SMA answered, goes to that SM
    /// as the SMP it was (its agent receives SMPs of the port), for it to act on.
    pub fn poll_sma_event(&mut self) -> Option<SmaEvent> {
        loop {
            match self.sma.poll_event()? {
                SmaEvent::SmInfoSet {
                    port,
                    control,
                    from,
                } => {
                    let smp = smp::Repr::lid_set(
                        0,
                        AttrId::SM_INFO,
                        control.attr_mod(),
                        0,
                        from.to_data(),
                    );
                    self.deliver_smp(port, Lid::PERMISSIVE, &smp);
                }
                e => return Some(e),
            }
        }
    }

    /// The port's state as the SMA holds it.
    pub fn port_state(&self, port: u8) -> (PortState, PortPhysicalState) {
        self.sma
            .port_info(port)
            .map_or((PortState::Down, PortPhysicalState::Disabled), |i| {
                (i.port_state, i.port_physical_state)
            })
    }

    /// Pushes the SMA's view of each port (LID, SM LID, Active) into the engine, so that verbs
    /// (`ibv_query_port`) and the transport agree with what the SM configured.
    fn sync_ports(&mut self) {
        for port in 1..=self.id.num_ports {
            let Some(info) = self.sma.port_info(port) else {
                continue;
            };
            let now = (
                info.port_state == PortState::Active,
                info.lid,
                info.master_sm_lid,
            );
            let idx = usize::from(port - 1);
            // The P_Key table the SM wrote is the one the transport checks packets against:
            // without it the engine's default table would admit every partition.
            let pkeys = self.sma.pkeys(port).unwrap_or_default();
            let pkeys_changed = self
                .hca
                .port(port)
                .is_some_and(|a| a.pkeys.as_slice() != pkeys);
            if self.synced[idx] == now && !pkeys_changed {
                continue;
            }
            let pkeys = pkeys.to_vec();
            self.synced[idx] = now;
            if let Some(attr) = self.hca.port(port).cloned() {
                let prefix = info.gid_prefix;
                if prefix != 0 {
                    self.subnet_prefix = prefix;
                }
                let _ = self.hca.set_port_attr(
                    port,
                    PortAttr {
                        lid: info.lid,
                        active: now.0,
                        gids: vec![gid(self.subnet_prefix, self.id.port_guid(port))],
                        pkeys,
                        ..attr
                    },
                );
            }
        }
    }

    /// A frame (LRH through VCRC) arrived on `port`.
    pub fn handle_frame(&mut self, now: Instant, port: u8, frame: &[u8]) {
        let f = match ib::open(frame) {
            Ok(f) => f,
            Err(IbDrop::Malformed) => {
                self.stats.rx_malformed += 1;
                return;
            }
            Err(IbDrop::BadCrc) => {
                self.stats.rx_bad_crc += 1;
                return;
            }
        };
        match f.kind {
            FrameKind::Smp => {
                self.handle_vl15(port, &f.lrh, frame);
                self.send_traps();
            }
            FrameKind::Gmp => self.handle_data(now, port, &f.lrh, frame, None),
            FrameKind::Data { meta, body } => {
                self.handle_data(now, port, &f.lrh, frame, Some((meta, body)))
            }
        }
        self.sync_ports();
    }

    fn handle_vl15(&mut self, port: u8, lrh: &LrhRepr, frame: &[u8]) {
        let Ok(p) = smp_packet::parse(frame) else {
            self.stats.rx_bad_smp += 1;
            return;
        };
        if !self.sma.accepts_dlid(port, lrh.dlid) {
            self.stats.rx_dlid_mismatch += 1;
            return;
        }
        match self.sma.receive_smp(port, lrh.slid, &p.smp) {
            SmiOutput::Send(o) => self
                .out
                .push_back((o.out_port, smp_packet::emit(o.dlid, o.slid, &o.smp))),
            SmiOutput::ToSm(smp) => self.deliver_smp(port, lrh.slid, &smp),
            SmiOutput::Nothing => {}
        }
    }

    /// Sends the traps the SMA raised (a Bad M_Key trap to the master SM).
    fn send_traps(&mut self) {
        while let Some(t) = self.sma.poll_trap() {
            self.out
                .push_back((t.out_port, smp_packet::emit(t.dlid, t.slid, &t.smp)));
        }
    }

    fn deliver_smp(&mut self, port: u8, slid: Lid, smp: &smp::Repr) {
        let mut mad = [0u8; MAD_LEN];
        smp.emit(&mut smp::Packet::new_unchecked(&mut mad[..]));
        self.mads.push_back(MadIn {
            port,
            qp: MadQp::Smi,
            slid,
            src_qpn: Qpn::SMI,
            sgid: None,
            mad,
        });
    }

    /// A frame on a data VL: for QP1's agents (`data` is `None`: a GMP) or the engine, once
    /// the port and the DLID let it in.
    fn handle_data(
        &mut self,
        now: Instant,
        port: u8,
        lrh: &LrhRepr,
        frame: &[u8],
        data: Option<(RxMeta, &[u8])>,
    ) {
        if !self.sma.note_data_received(port) {
            self.stats.rx_port_not_active += 1;
            return;
        }
        // A multicast DLID goes to the engine, which delivers it to the QPs attached to the
        // group (or drops and counts it).
        let ours = lrh.dlid.is_multicast() || self.sma.accepts_dlid(port, lrh.dlid);
        if lrh.dlid == Lid::PERMISSIVE || !ours {
            self.stats.rx_dlid_mismatch += 1;
            return;
        }
        let Some((meta, body)) = data else {
            // QP1: the frame is a whole UD MAD packet; parse it as such.
            let Ok(m) = smp_packet::parse_mad(frame) else {
                self.stats.rx_bad_gmp += 1;
                return;
            };
            if m.addr.qkey != GSI_QKEY {
                self.stats.rx_bad_gmp += 1;
                return;
            }
            self.mads.push_back(MadIn {
                port,
                qp: MadQp::Gsi,
                slid: lrh.slid,
                src_qpn: m.addr.src_qpn,
                sgid: None,
                mad: m.mad,
            });
            return;
        };
        self.hca.handle_packet(now, port, &meta, body);
    }

    /// Sends an SMP from the local SM out of `port`: directed-route when `dlid` is `None`
    /// (the SMI routes it from hop 0), LID-routed to `dlid` otherwise.
    pub fn send_smp(&mut self, port: u8, dlid: Option<Lid>, smp: &smp::Repr) {
        self.send_smp_to(port, dlid, smp);
        self.send_traps();
    }

    fn send_smp_to(&mut self, port: u8, dlid: Option<Lid>, smp: &smp::Repr) {
        match dlid {
            None => match self.sma.send_dr(port, smp) {
                softib_fabric::DrAction::Forward { out_port, smp } => self.out.push_back((
                    out_port,
                    smp_packet::emit(Lid::PERMISSIVE, Lid::PERMISSIVE, &smp),
                )),
                softib_fabric::DrAction::Deliver(local) => {
                    // Hop count 0: an agent asking its own node's SMA, or the local SM's
                    // answer to such a request (SMInfo: `Sma::is_for_local_sm`).
                    if local.header.method.is_response() || self.sma.is_for_local_sm(port, &local) {
                        self.deliver_smp(port, Lid::PERMISSIVE, &local);
                    } else if let Some(response) = self.sma.handle_smp(port, &local) {
                        if let softib_fabric::DrAction::Deliver(r) =
                            self.sma.send_dr(port, &response)
                        {
                            self.deliver_smp(port, Lid::PERMISSIVE, &r);
                        }
                    }
                    self.sync_ports();
                }
                softib_fabric::DrAction::Drop(_) => {}
            },
            Some(dlid) => {
                let slid = self.sma.lid(port).map_or(Lid(0), |(l, _)| l);
                if dlid == slid {
                    if smp.header.method.is_response() || self.sma.is_for_local_sm(port, smp) {
                        self.deliver_smp(port, slid, smp);
                    } else if let Some(response) = self.sma.handle_smp(port, smp) {
                        self.deliver_smp(port, slid, &response);
                    }
                    self.sync_ports();
                } else {
                    self.out
                        .push_back((port, smp_packet::emit(dlid, slid, smp)));
                }
            }
        }
    }

    /// Sends a GMP from a local agent out of `port` to QP `dest_qpn` at `dlid`.
    pub fn send_gmp(&mut self, port: u8, dlid: Lid, dest_qpn: Qpn, mad: &[u8; MAD_LEN]) {
        let slid = self.sma.lid(port).map_or(Lid(0), |(l, _)| l);
        let addr = MadAddress {
            vl: 0,
            sl: 0,
            dlid,
            slid,
            dest_qpn,
            src_qpn: Qpn::GSI,
            qkey: GSI_QKEY,
        };
        if dlid == slid && dlid != Lid(0) {
            // To ourselves (an SA query on the SM's own node): loop back without a cable.
            self.mads.push_back(MadIn {
                port,
                qp: MadQp::Gsi,
                slid,
                src_qpn: Qpn::GSI,
                sgid: None,
                mad: *mad,
            });
            return;
        }
        if self.port_state(port).0 != PortState::Active {
            self.stats.rx_port_not_active += 1;
            return;
        }
        self.out.push_back((port, smp_packet::emit_mad(&addr, mad)));
    }

    /// The next MAD for a local agent.
    pub fn poll_mad(&mut self) -> Option<MadIn> {
        self.mads.pop_front()
    }

    /// Time passed: retransmissions and timers of the engine, M_Key leases of the SMA.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.hca.handle_timeout(now);
        self.sma.handle_timeout(now.as_micros());
    }

    /// The next deadline of the engine or the SMA.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let lease = self.sma.poll_timeout().map(Instant::from_micros);
        match (self.hca.poll_timeout(), lease) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next frame to send: management first, then the engine's packets wrapped in LRH
    /// (and GRH), ICRC and VCRC. Returns the port and the frame's length in `buf`.
    pub fn poll_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<(u8, usize)> {
        if let Some((port, frame)) = self.out.pop_front() {
            let n = frame.len().min(buf.len());
            buf[..n].copy_from_slice(&frame[..n]);
            return Some((port, n));
        }
        loop {
            let t = self.hca.poll_transmit(now, &mut buf[HEADROOM..])?;
            let slid = self.sma.lid(t.port).map_or(Lid(0), |(l, _)| l);
            let sgid =
                t.av.grh
                    .and_then(|g| {
                        let port = self.hca.port(t.port)?;
                        port.gids.get(usize::from(g.sgid_index)).copied()
                    })
                    .unwrap_or(Gid([0; 16]));
            if let Some(len) = ib::seal(buf, &t, slid, sgid) {
                self.stats.tx_frames += 1;
                return Some((t.port, len));
            }
        }
    }
}

/// A port GID: the subnet prefix and the port GUID.
pub fn gid(prefix: u64, guid: Guid) -> Gid {
    let mut g = [0u8; 16];
    g[..8].copy_from_slice(&prefix.to_be_bytes());
    g[8..].copy_from_slice(&guid.0.to_be_bytes());
    Gid(g)
}
