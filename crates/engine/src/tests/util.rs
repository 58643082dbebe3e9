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
        }
    }

    fn transmit_all(&mut self) {
        let mut buf = vec![0u8; MAX_TRANSPORT_LEN];
        for from_a in [true, false] {
            loop {
                let side = if from_a { &mut self.a } else { &mut self.b };
                let Some(tx) = side.hca.poll_transmit(self.now, &mut buf) else {
                    break;
                };
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
                side.hca
                    .handle_packet(self.now, 1, &RxMeta::default(), &p.bytes);
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
