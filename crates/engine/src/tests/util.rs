//! A two-HCA test bench in quinn-proto's style: two engines, a virtual clock, one queue per
//! direction, and knobs to drop, delay, duplicate and reorder packets.

use std::collections::VecDeque;

use softib_wire::{Gid, Mtu, Psn, Qpn, RKey};

use crate::memory::{RegionId, VecMemory};
use crate::qp::requester::MAX_TRANSPORT_LEN;
use crate::qp::{AddressVector, AttrMask, GlobalRoute, QpAttr, QpCap, QpInitAttr};
use crate::verbs::{
    AccessFlags, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest,
    WorkCompletion, WrOpcode,
};
use crate::{CqHandle, Duration, Hca, HcaConfig, Instant, PdHandle, RxMeta};

/// One side of the bench.
pub struct Side {
    pub hca: Hca<VecMemory>,
    pub pd: PdHandle,
    pub cq: CqHandle,
    /// A 1 MiB buffer at 0x10_0000 with every access right; its key.
    pub buf_key: u32,
}

pub const BUF: u64 = 0x10_0000;
pub const BUF_LEN: usize = 1 << 20;

impl Side {
    fn new(seed: u64) -> Side {
        let mut cfg = HcaConfig::with_seed(seed);
        cfg.ports[0].gids = vec![Gid::from_ipv4([127, 0, 0, (seed % 200) as u8 + 1])];
        let mut mem = VecMemory::new();
        mem.add(RegionId(1), BUF, BUF_LEN);
        let mut hca = Hca::new(cfg, mem);
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(4096).unwrap();
        let all = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ)
            .with(AccessFlags::REMOTE_ATOMIC);
        let buf_key = hca
            .reg_mr(pd, BUF, BUF_LEN as u64, all, RegionId(1))
            .unwrap();
        Side {
            hca,
            pd,
            cq,
            buf_key,
        }
    }

    pub fn bytes(&self, addr: u64, len: usize) -> Vec<u8> {
        let at = (addr - BUF) as usize;
        self.hca.memory().bytes(RegionId(1)).unwrap()[at..at + len].to_vec()
    }

    pub fn fill(&mut self, addr: u64, data: &[u8]) {
        let at = (addr - BUF) as usize;
        self.hca.memory_mut().bytes_mut(RegionId(1)).unwrap()[at..at + data.len()]
            .copy_from_slice(data);
    }

    pub fn sge(&self, addr: u64, len: u32) -> Sge {
        Sge {
            addr,
            length: len,
            lkey: self.buf_key,
        }
    }

    pub fn remote(&self, addr: u64) -> RemoteAddr {
        RemoteAddr {
            addr,
            rkey: RKey(self.buf_key),
        }
    }

    pub fn completions(&mut self) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        while let Some(wc) = self.hca.poll_cq(self.cq) {
            v.push(wc);
        }
        v
    }

    pub fn create_qp(&mut self, qp_type: QpType) -> Qpn {
        self.create_qp_sig(qp_type, true)
    }

    pub fn create_qp_sig(&mut self, qp_type: QpType, sq_sig_all: bool) -> Qpn {
        self.hca
            .create_qp(QpInitAttr {
                qp_type,
                pd: self.pd,
                send_cq: self.cq,
                recv_cq: self.cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 1024,
                    max_recv_wr: 1024,
                    max_send_sge: 4,
                    max_recv_sge: 4,
                    max_inline_data: 256,
                },
                sq_sig_all,
            })
            .unwrap()
    }

    pub fn post_recv(&mut self, qpn: Qpn, wr_id: u64, addr: u64, len: u32) {
        let sge = self.sge(addr, len);
        self.hca
            .post_recv(
                qpn,
                RecvWr {
                    wr_id,
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }

    pub fn post(&mut self, qpn: Qpn, wr_id: u64, opcode: WrOpcode, sg: Vec<Sge>) {
        self.hca
            .post_send(
                qpn,
                SendWr {
                    wr_id,
                    opcode,
                    sg_list: sg,
                    flags: SendFlags::SIGNALED,
                    inline_data: None,
                    ud: None,
                },
            )
            .unwrap();
    }

    pub fn post_ud(&mut self, qpn: Qpn, wr_id: u64, dest: UdDest, sg: Vec<Sge>) {
        self.hca
            .post_send(
                qpn,
                SendWr {
                    wr_id,
                    opcode: WrOpcode::Send,
                    sg_list: sg,
                    flags: SendFlags::SIGNALED,
                    inline_data: None,
                    ud: Some(dest),
                },
            )
            .unwrap();
    }
}

/// Decides whether to drop a packet: (sent by A?, bytes).
pub type DropRule = Box<dyn FnMut(bool, &[u8]) -> bool>;

/// A packet in flight.
#[derive(Clone)]
struct InFlight {
    at: Instant,
    to_b: bool,
    bytes: Vec<u8>,
    /// For a packet sent with its payload in memory (an in-process QP): its header length
    /// and payload length. It travels whole (so that faults and the log see it) and is
    /// handed to the receiver in two parts, as a link of one process does.
    split: Option<(usize, usize)>,
    /// The sender said the packet goes in-process (`Transmit::in_process`): the receiver is
    /// told so when `Pair::rx_meta` allows it, as a link tells it.
    in_process: bool,
}

/// Two HCAs joined by a lossless, in-order wire with a fixed latency, plus fault knobs.
pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
    pub latency: Duration,
    wire: VecDeque<InFlight>,
    /// Drop the next N packets sent by A (resp. B).
    pub drop_from_a: usize,
    pub drop_from_b: usize,
    /// Drop every packet whose (direction, nth) matches this predicate.
    pub drop_if: Option<DropRule>,
    /// Duplicate every packet.
    pub duplicate: bool,
    /// Packets sent so far, per direction.
    pub sent_a: usize,
    pub sent_b: usize,
    /// Every packet seen, in order: (from A?, bytes).
    pub log: Vec<(bool, Vec<u8>)>,
    /// Whether `connect` creates QPs that signal every WR.
    pub sig_all: bool,
    /// What the wire tells the receiver beyond the bytes (a GRH, say).
    pub rx_meta: RxMeta,
    /// Packets sent with their payload left in memory, per direction (A's, B's).
    pub by_ref: (usize, usize),
}

impl Pair {
    pub fn new() -> Pair {
        Pair {
            a: Side::new(1),
            b: Side::new(2),
            now: Instant::from_micros(1_000_000),
            latency: Duration::from_micros(5),
            wire: VecDeque::new(),
            drop_from_a: 0,
            drop_from_b: 0,
            drop_if: None,
            duplicate: false,
            sent_a: 0,
            sent_b: 0,
            log: Vec::new(),
            sig_all: true,
            rx_meta: RxMeta::default(),
            by_ref: (0, 0),
        }
    }

    fn transmit_all(&mut self) {
        let mut buf = vec![0u8; crate::IN_PROCESS_MAX_LEN.max(MAX_TRANSPORT_LEN)];
        for from_a in [true, false] {
            loop {
                let side = if from_a { &mut self.a } else { &mut self.b };
                let Some(mut tx) = side.hca.poll_transmit(self.now, &mut buf) else {
                    break;
                };
                let split = tx.payload.map(|p| (tx.len, p.len as usize));
                if split.is_some() {
                    if from_a {
                        self.by_ref.0 += 1;
                    } else {
                        self.by_ref.1 += 1;
                    }
                }
                assert!(side.hca.materialize(&mut tx, &mut buf));
                let bytes = buf[..tx.len].to_vec();
                self.log.push((from_a, bytes.clone()));
                let drop = if from_a {
                    self.sent_a += 1;
                    if self.drop_from_a > 0 {
                        self.drop_from_a -= 1;
                        true
                    } else {
                        false
                    }
                } else {
                    self.sent_b += 1;
                    if self.drop_from_b > 0 {
                        self.drop_from_b -= 1;
                        true
                    } else {
                        false
                    }
                };
                let drop = drop || self.drop_if.as_mut().is_some_and(|f| f(from_a, &bytes));
                if drop {
                    continue;
                }
                let pkt = InFlight {
                    at: self.now + self.latency,
                    to_b: from_a,
                    bytes,
                    split,
                    in_process: tx.in_process,
                };
                if self.duplicate {
                    self.wire.push_back(pkt.clone());
                }
                self.wire.push_back(pkt);
            }
        }
    }

    /// Runs until nothing is in flight and no timer is due within `horizon`; returns the
    /// number of steps. Panics on livelock (more than 100_000 steps).
    pub fn drive_for(&mut self, horizon: Duration) -> usize {
        let end = self.now + horizon;
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps < 100_000, "livelock");
            self.transmit_all();
            let next_arrival = self.wire.front().map(|p| p.at);
            let next_timer = [self.a.hca.poll_timeout(), self.b.hca.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            let next = match (next_arrival, next_timer) {
                (Some(a), Some(t)) => a.min(t),
                (a, t) => match a.or(t) {
                    Some(x) => x,
                    None => return steps,
                },
            };
            if next > end {
                self.now = end;
                return steps;
            }
            self.now = self.now.max(next);
            while let Some(p) = self.wire.front() {
                if p.at > self.now {
                    break;
                }
                let p = self.wire.pop_front().unwrap();
                let side = if p.to_b { &mut self.b } else { &mut self.a };
                p.hand_to(&mut side.hca, self.now, &self.rx_meta);
            }
            self.a.hca.handle_timeout(self.now);
            self.b.hca.handle_timeout(self.now);
        }
    }

    /// Runs until quiet (up to 60 s of virtual time).
    pub fn drive(&mut self) -> usize {
        self.drive_for(Duration::from_millis(60_000))
    }

    /// Connects an RC (or UC) QP on each side; returns (qp on A, qp on B).
    pub fn connect(&mut self, qp_type: QpType) -> (Qpn, Qpn) {
        let qa = self.a.create_qp_sig(qp_type, self.sig_all);
        let qb = self.b.create_qp_sig(qp_type, self.sig_all);
        let (pa, pb) = (Psn::new(0xFF_FFF0), Psn::new(100));
        bring_up(&mut self.a.hca, qa, qp_type, qb, pb, pa);
        bring_up(&mut self.b.hca, qb, qp_type, qa, pa, pb);
        (qa, qb)
    }

    /// A UD QP on each side with Q_Key 0x11111111 and an AH on each side towards the other.
    pub fn ud(&mut self) -> (Qpn, Qpn, UdDest, UdDest) {
        let qa = self.a.create_qp(QpType::Ud);
        let qb = self.b.create_qp(QpType::Ud);
        for (side, qpn) in [(&mut self.a, qa), (&mut self.b, qb)] {
            let hca = &mut side.hca;
            let mut attr = QpAttr {
                qp_state: QpState::Init,
                qkey: 0x1111_1111,
                port_num: 1,
                ..QpAttr::default()
            };
            hca.modify_qp(
                qpn,
                &attr,
                AttrMask::STATE
                    .with(AttrMask::PKEY_INDEX)
                    .with(AttrMask::PORT)
                    .with(AttrMask::QKEY),
            )
            .unwrap();
            attr.qp_state = QpState::Rtr;
            hca.modify_qp(qpn, &attr, AttrMask::STATE).unwrap();
            attr.qp_state = QpState::Rts;
            attr.sq_psn = Psn::new(7);
            hca.modify_qp(qpn, &attr, AttrMask::STATE.with(AttrMask::SQ_PSN))
                .unwrap();
        }
        let av = AddressVector {
            port_num: 1,
            ..AddressVector::default()
        };
        let ah_a = self.a.hca.create_ah(self.a.pd, av).unwrap();
        let ah_b = self.b.hca.create_ah(self.b.pd, av).unwrap();
        let to_b = UdDest {
            ah: ah_a,
            remote_qpn: qb,
            remote_qkey: 0x1111_1111,
        };
        let to_a = UdDest {
            ah: ah_b,
            remote_qpn: qa,
            remote_qkey: 0x1111_1111,
        };
        (qa, qb, to_b, to_a)
    }
}

/// The usual RESET → INIT → RTR → RTS sequence, as perftest does it.
pub fn bring_up(
    hca: &mut Hca<VecMemory>,
    qpn: Qpn,
    qp_type: QpType,
    remote: Qpn,
    rq_psn: Psn,
    sq_psn: Psn,
) {
    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ)
        .with(AccessFlags::REMOTE_ATOMIC);
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: if qp_type == QpType::Uc {
            AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE)
        } else {
            all
        },
        port_num: 1,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: remote,
        rq_psn,
        sq_psn,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ah_attr: AddressVector {
            port_num: 1,
            grh: Some(GlobalRoute {
                dgid: Gid::default(),
                flow_label: 0,
                sgid_index: 0,
                hop_limit: 64,
                traffic_class: 0,
            }),
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    hca.modify_qp(
        qpn,
        &attr,
        AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT)
            .with(AttrMask::ACCESS_FLAGS),
    )
    .unwrap();
    attr.qp_state = QpState::Rtr;
    let mut rtr = AttrMask::STATE
        .with(AttrMask::AV)
        .with(AttrMask::PATH_MTU)
        .with(AttrMask::DEST_QPN)
        .with(AttrMask::RQ_PSN);
    if qp_type == QpType::Rc {
        rtr = rtr
            .with(AttrMask::MAX_DEST_RD_ATOMIC)
            .with(AttrMask::MIN_RNR_TIMER);
    }
    hca.modify_qp(qpn, &attr, rtr).unwrap();
    attr.qp_state = QpState::Rts;
    let mut rts = AttrMask::STATE.with(AttrMask::SQ_PSN);
    if qp_type == QpType::Rc {
        rts = rts
            .with(AttrMask::TIMEOUT)
            .with(AttrMask::RETRY_CNT)
            .with(AttrMask::RNR_RETRY)
            .with(AttrMask::MAX_QP_RD_ATOMIC);
    }
    hca.modify_qp(qpn, &attr, rts).unwrap();
}

/// A deterministic pattern of `len` bytes.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ---- Helpers for the scenario modules (rc, uc_ud, verbs) ------------------------------------

/// Every access right (what `Side::new` registers its buffer with).
pub const ALL_ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .with(AccessFlags::REMOTE_WRITE)
    .with(AccessFlags::REMOTE_READ)
    .with(AccessFlags::REMOTE_ATOMIC);

impl Side {
    /// A side like `Side::new(seed)`, with `config` changed first (transport tuning, limits).
    fn configured(seed: u64, config: impl FnOnce(&mut HcaConfig)) -> Side {
        let mut cfg = HcaConfig::with_seed(seed);
        cfg.ports[0].gids = vec![Gid::from_ipv4([127, 0, 0, (seed % 200) as u8 + 1])];
        config(&mut cfg);
        let mut mem = VecMemory::new();
        mem.add(RegionId(1), BUF, BUF_LEN);
        let mut hca = Hca::new(cfg, mem);
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(4096).unwrap();
        let buf_key = hca
            .reg_mr(pd, BUF, BUF_LEN as u64, ALL_ACCESS, RegionId(1))
            .unwrap();
        Side {
            hca,
            pd,
            cq,
            buf_key,
        }
    }

    /// A signaled send WR without inline data or UD destination: the template tests change
    /// with struct-update syntax.
    pub fn wr(&self, wr_id: u64, opcode: WrOpcode, sg_list: Vec<Sge>) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }
    }

    /// Posts a receive WR with any scatter list.
    pub fn post_recv_sges(&mut self, qpn: Qpn, wr_id: u64, sg_list: Vec<Sge>) {
        self.hca.post_recv(qpn, RecvWr { wr_id, sg_list }).unwrap();
    }

    /// Creates a QP like `create_qp`, with `init` changed first (an SRQ, other CQs, sizes).
    pub fn create_qp_with(&mut self, qp_type: QpType, init: impl FnOnce(&mut QpInitAttr)) -> Qpn {
        let mut attr = QpInitAttr {
            qp_type,
            pd: self.pd,
            send_cq: self.cq,
            recv_cq: self.cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1024,
                max_recv_wr: 1024,
                max_send_sge: 4,
                max_recv_sge: 4,
                max_inline_data: 256,
            },
            sq_sig_all: true,
        };
        init(&mut attr);
        self.hca.create_qp(attr).unwrap()
    }

    /// The state of a QP.
    pub fn state(&self, qpn: Qpn) -> QpState {
        self.hca.qp(qpn).unwrap().state
    }

    /// Every pending asynchronous event.
    pub fn events(&mut self) -> Vec<crate::verbs::AsyncEvent> {
        std::iter::from_fn(|| self.hca.poll_event()).collect()
    }

    /// Moves a QP to `to` with nothing but the state in the mask (ERR, RESET, SQD, ...).
    pub fn modify_state(&mut self, qpn: Qpn, to: QpState) {
        let (mut attr, _) = self.hca.query_qp(qpn).unwrap();
        attr.qp_state = to;
        self.hca.modify_qp(qpn, &attr, AttrMask::STATE).unwrap();
    }
}

impl Pair {
    /// A pair whose HCAs are built from a changed configuration (both sides alike).
    pub fn with_config(config: impl Fn(&mut HcaConfig)) -> Pair {
        let mut p = Pair::new();
        p.a = Side::configured(1, &config);
        p.b = Side::configured(2, &config);
        p
    }

    /// Brings up two existing QPs towards each other, with `connect`'s PSNs (A's requests
    /// start at 0xFFFFF0 and wrap, B's at 100).
    pub fn connect_qps(&mut self, qa: Qpn, qb: Qpn, qp_type: QpType) {
        let (pa, pb) = (Psn::new(0xFF_FFF0), Psn::new(100));
        bring_up(&mut self.a.hca, qa, qp_type, qb, pb, pa);
        bring_up(&mut self.b.hca, qb, qp_type, qa, pa, pb);
    }

    /// Polls both sides' transmit queues once, putting what they send on the wire (nothing
    /// is delivered): a test may then reorder or copy packets in flight before `drive`.
    pub fn transmit(&mut self) {
        self.transmit_all();
    }

    /// The packets on the wire, oldest first: (towards B?, bytes).
    pub fn in_flight(&self) -> Vec<(bool, Vec<u8>)> {
        self.wire
            .iter()
            .map(|p| (p.to_b, p.bytes.clone()))
            .collect()
    }

    /// Swaps the payloads of two packets on the wire (their arrival times stay): the one that
    /// was sent later now arrives first.
    pub fn swap_in_flight(&mut self, i: usize, j: usize) {
        let (pi, pj) = (self.wire[i].clone(), self.wire[j].clone());
        self.wire[i] = InFlight { at: pi.at, ..pj };
        self.wire[j] = InFlight { at: pj.at, ..pi };
    }

    /// Copies packet `i` on the wire: the copy arrives right after it.
    pub fn duplicate_in_flight(&mut self, i: usize) {
        let copy = self.wire[i].clone();
        self.wire.insert(i + 1, copy);
    }

    /// Runs for a short while (much less than the local ACK timeout): what is in flight
    /// arrives and is answered, no retransmission timer fires.
    pub fn drive_briefly(&mut self) -> usize {
        self.drive_for(Duration::from_millis(1))
    }
}

/// One packet of the log, decoded.
#[derive(Debug, Clone, Copy)]
pub struct Logged {
    /// Sent by A.
    pub from_a: bool,
    /// Its transport headers.
    pub t: softib_wire::packet::TransportRepr,
    /// Its payload length (without pad).
    pub payload_len: usize,
}

impl Logged {
    /// The operation of its opcode.
    pub fn op(&self) -> softib_wire::Operation {
        self.t.bth.opcode.operation()
    }
    /// Its PSN.
    pub fn psn(&self) -> Psn {
        self.t.bth.psn
    }
    /// The AETH syndrome, if it carries one.
    pub fn syndrome(&self) -> Option<softib_wire::Syndrome> {
        self.t.aeth.map(|a| a.syndrome)
    }
}

impl Pair {
    /// Every packet sent so far (including dropped ones), decoded.
    pub fn decoded_log(&self) -> Vec<Logged> {
        self.log
            .iter()
            .map(|(from_a, bytes)| {
                let (t, payload) = softib_wire::packet::parse_body(bytes).unwrap();
                Logged {
                    from_a: *from_a,
                    t,
                    payload_len: payload.len(),
                }
            })
            .collect()
    }

    /// Delivers every packet now in flight (time moves to the last arrival) without
    /// transmitting anything: with `transmit`, it lets a test step the exchange by hand.
    pub fn deliver(&mut self) {
        while let Some(p) = self.wire.pop_front() {
            self.now = self.now.max(p.at);
            let side = if p.to_b { &mut self.b } else { &mut self.a };
            p.hand_to(&mut side.hca, self.now, &self.rx_meta);
        }
    }
}

impl InFlight {
    fn hand_to(&self, hca: &mut Hca<VecMemory>, now: Instant, meta: &RxMeta) {
        let meta = &RxMeta {
            in_process: meta.in_process && self.in_process,
            ..*meta
        };
        match self.split {
            Some((h, n)) => {
                hca.handle_packet_parts(now, 1, meta, &self.bytes[..h], &self.bytes[h..h + n])
            }
            None => hca.handle_packet(now, 1, meta, &self.bytes),
        }
    }
}

/// `bring_up`'s sequence, stopped at `to` (RESET, INIT, RTR or RTS): the per-state fixtures
/// start from here.
pub fn bring_up_to(
    hca: &mut Hca<VecMemory>,
    qpn: Qpn,
    qp_type: QpType,
    remote: Qpn,
    (rq_psn, sq_psn): (Psn, Psn),
    to: QpState,
) {
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: ALL_ACCESS,
        port_num: 1,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: remote,
        rq_psn,
        sq_psn,
        max_dest_rd_atomic: 16,
        max_rd_atomic: 16,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    attr.ah_attr.port_num = 1;
    let steps = [
        (
            QpState::Init,
            AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        ),
        (
            QpState::Rtr,
            AttrMask::STATE
                .with(AttrMask::AV)
                .with(AttrMask::PATH_MTU)
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
        ),
        (
            QpState::Rts,
            AttrMask::STATE
                .with(AttrMask::SQ_PSN)
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
        ),
    ];
    assert_eq!(qp_type, QpType::Rc, "the per-state fixtures are RC");
    for (state, mask) in steps {
        if state > to {
            break;
        }
        attr.qp_state = state;
        hca.modify_qp(qpn, &attr, mask).unwrap();
    }
}
