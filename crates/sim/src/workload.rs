//! The `workload` module deals with *what the applications do*: QP pairs (RC, UC, UD) between
//! random HCAs, each end posting a planned, randomized list of work requests — SEND,
//! SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ, ATOMIC_CMP_AND_SWP and
//! ATOMIC_FETCH_AND_ADD (READ and atomics on RC only) — of 0 bytes to several MTUs, signaled
//! or not, inline or gathered from up to four SGEs; receives posted when the peer posts a
//! message (sometimes late, to cause RNR NAKs or UC/UD drops); and, now and then, one end moved
//! to ERR, the other after it, both taken through RESET and reconnected with fresh PSNs.
//!
//! Every work request has its own bytes: a source slot, a destination slot, a receive slot,
//! an atomic result slot, all disjoint, so the oracle's model of memory is exact. Slots are
//! planned before the run and live in two memory regions per QP end (local and remote
//! access), registered as sub-ranges of the HCA's memory with unregistered guard bytes around
//! them.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use softib_engine::verbs::{
    AccessFlags, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest, WcOpcode,
    WrOpcode,
};
use softib_engine::{
    AddressVector, AhHandle, AttrMask, Duration, GlobalRoute, Instant, QpAttr, QpCap, QpInitAttr,
    VerbsError,
};
use softib_wire::{Psn, Qpn, RKey};

use crate::oracle::{EndInfo, Oracle, RecvRecord, SendRecord};
use crate::rng::SimRng;
use crate::swarm::{Config, START};
use crate::world::{World, BASE};

/// How many connections (epochs) a QP pair may go through; each epoch has its own atomic word.
pub(crate) const MAX_EPOCHS: u32 = 8;
/// The Q_Key of every UD QP.
const QKEY: u32 = 0x1111_1111;
/// Receive queue depth.
const RQ_DEPTH: u32 = 1024;
/// The largest inline send.
const MAX_INLINE: u32 = 256;
/// How long a post refused for a full queue waits before it is tried again.
const BACKOFF: Duration = Duration::from_micros(100);

/// A verbs operation the workload posts (libibverbs names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpKind {
    /// SEND.
    Send,
    /// SEND_WITH_IMM.
    SendWithImm,
    /// RDMA_WRITE.
    RdmaWrite,
    /// RDMA_WRITE_WITH_IMM.
    RdmaWriteWithImm,
    /// RDMA_READ (RC).
    RdmaRead,
    /// ATOMIC_CMP_AND_SWP (RC).
    AtomicCmpAndSwp,
    /// ATOMIC_FETCH_AND_ADD (RC).
    AtomicFetchAndAdd,
}

impl OpKind {
    /// Every operation, in the order of [`crate::Config::op_weights`].
    pub const ALL: [OpKind; 7] = [
        OpKind::Send,
        OpKind::SendWithImm,
        OpKind::RdmaWrite,
        OpKind::RdmaWriteWithImm,
        OpKind::RdmaRead,
        OpKind::AtomicCmpAndSwp,
        OpKind::AtomicFetchAndAdd,
    ];

    /// Whether the transport offers it.
    pub fn allowed_on(self, t: QpType) -> bool {
        match t {
            QpType::Rc => true,
            QpType::Uc => matches!(
                self,
                OpKind::Send | OpKind::SendWithImm | OpKind::RdmaWrite | OpKind::RdmaWriteWithImm
            ),
            QpType::Ud => matches!(self, OpKind::Send | OpKind::SendWithImm),
        }
    }

    /// Whether it consumes a receive WQE at the responder.
    pub fn consumes_recv(self) -> bool {
        matches!(
            self,
            OpKind::Send | OpKind::SendWithImm | OpKind::RdmaWriteWithImm
        )
    }

    /// Whether it is an atomic.
    pub fn is_atomic(self) -> bool {
        matches!(self, OpKind::AtomicCmpAndSwp | OpKind::AtomicFetchAndAdd)
    }

    /// Whether it carries immediate data.
    pub fn has_imm(self) -> bool {
        matches!(self, OpKind::SendWithImm | OpKind::RdmaWriteWithImm)
    }

    /// Whether it writes the responder's memory through an R_Key.
    pub fn is_write(self) -> bool {
        matches!(self, OpKind::RdmaWrite | OpKind::RdmaWriteWithImm)
    }

    /// Whether its data lands in the responder's receive buffer.
    pub fn is_send(self) -> bool {
        matches!(self, OpKind::Send | OpKind::SendWithImm)
    }

    /// The completion opcode of its send completion.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            OpKind::Send | OpKind::SendWithImm => WcOpcode::Send,
            OpKind::RdmaWrite | OpKind::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            OpKind::RdmaRead => WcOpcode::RdmaRead,
            OpKind::AtomicCmpAndSwp => WcOpcode::CompSwap,
            OpKind::AtomicFetchAndAdd => WcOpcode::FetchAdd,
        }
    }
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpKind::Send => "SEND",
            OpKind::SendWithImm => "SEND_WITH_IMM",
            OpKind::RdmaWrite => "RDMA_WRITE",
            OpKind::RdmaWriteWithImm => "RDMA_WRITE_WITH_IMM",
            OpKind::RdmaRead => "RDMA_READ",
            OpKind::AtomicCmpAndSwp => "ATOMIC_CMP_AND_SWP",
            OpKind::AtomicFetchAndAdd => "ATOMIC_FETCH_AND_ADD",
        })
    }
}

/// A work request as planned before the run.
#[derive(Debug, Clone)]
struct PlannedWr {
    due: Instant,
    kind: OpKind,
    len: u32,
    signaled: bool,
    inline: bool,
    fence: bool,
    solicited: bool,
    nsge: u32,
    imm: u32,
    /// CMP_AND_SWP: compare with the value the word should hold (rather than a random one).
    cmp_hit: bool,
    compare: u64,
    swap_add: u64,
    /// Send data, READ destination or atomic result slot (this end's memory).
    local: u64,
    /// WRITE target or READ source (the peer's memory); atomics choose their word when posted.
    remote: u64,
    /// The receive slot this message gets at the peer, when it consumes one.
    recv_slot: Option<(u64, u32)>,
}

/// A receive to post.
#[derive(Debug, Clone, Copy)]
struct PendingRecv {
    due: Instant,
    epoch: u32,
    addr: u64,
    len: u32,
}

/// One end of a QP pair.
#[derive(Debug)]
struct End {
    pair: usize,
    side: usize,
    node: usize,
    peer: usize,
    qp_type: QpType,
    qpn: Qpn,
    ah: Option<AhHandle>,
    lkey: u32,
    rkey: u32,
    sq_sig_all: bool,
    plan: VecDeque<PlannedWr>,
    pending_recvs: VecDeque<PendingRecv>,
    epoch: u32,
    /// Messages that consume a receive, posted in this epoch while the QP could send.
    consuming: u32,
    /// Receives posted in this epoch.
    recv_index: u32,
    next_send_seq: u32,
    next_recv_seq: u32,
    state: QpState,
    /// The atomic words the peer targets, one per epoch.
    atomic_words: u64,
    /// The value this end's next atomic expects to find, if every atomic posted in this epoch
    /// executes.
    shadow: Option<u64>,
}

impl End {
    fn name(&self) -> String {
        format!(
            "hca{} QP {} (pair {} {} {})",
            self.node + 1,
            self.qpn,
            self.pair,
            if self.side == 0 { "a" } else { "b" },
            self.qp_type
        )
    }
}

/// What the workload does at a given time besides posting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Move one end of a pair to ERR.
    Disrupt(usize),
    /// Move the other end of a pair to ERR too.
    ErrPeer(usize),
    /// Reset both ends and reconnect them.
    Reconnect(usize),
}

/// A bump allocator over one HCA's memory, leaving guard bytes between ranges.
#[derive(Debug, Clone, Copy)]
struct Alloc {
    next: u64,
}

impl Alloc {
    fn gap(&mut self, rng: &mut SimRng, lo: u64, hi: u64) {
        self.next += rng.range(lo, hi);
    }
    fn take(&mut self, len: u64, align: u64) -> u64 {
        self.next = self.next.div_ceil(align) * align;
        let a = BASE + self.next;
        self.next += len;
        a
    }
}

/// Memory regions of one end, registered at setup.
#[derive(Debug, Clone, Copy)]
struct Regions {
    local: (u64, u64),
    remote: (u64, u64),
}

/// The workload of a run.
pub(crate) struct Workload {
    rng: SimRng,
    ends: Vec<End>,
    regions: Vec<Regions>,
    mem_len: Vec<usize>,
    actions: BTreeMap<(Instant, u64), Action>,
    action_seq: u64,
    reconnecting: Vec<bool>,
    liveness: bool,
    cfg: Config,
    /// Counters for the run's statistics.
    pub(crate) reconnects: u64,
}

fn mtu_bytes(cfg: &Config) -> u32 {
    cfg.mtu.bytes().unwrap_or(256) as u32
}

impl Workload {
    /// Plans the whole workload of `cfg`: every work request, its slots, the memory layout.
    pub(crate) fn plan(cfg: &Config, mut rng: SimRng) -> Workload {
        let mtu = mtu_bytes(cfg);
        let safety = cfg.safety.as_micros();
        // 1. The work requests of every end, without addresses.
        let mut plans: Vec<Vec<PlannedWr>> = Vec::new();
        for (p, pc) in cfg.pairs.iter().enumerate() {
            for side in 0..2 {
                let e = 2 * p + side;
                let weights: Vec<u32> = OpKind::ALL
                    .iter()
                    .zip(cfg.op_weights)
                    .map(|(k, w)| if k.allowed_on(pc.qp_type) { w } else { 0 })
                    .collect();
                let any = weights.iter().any(|&w| w > 0);
                let bursty = rng.chance(0.3);
                let centers: Vec<u64> = (0..rng.range(1, 4))
                    .map(|_| rng.below(safety * 7 / 10))
                    .collect();
                let mut v = Vec::with_capacity(pc.ops[side]);
                for i in 0..pc.ops[side] {
                    let kind = if any {
                        OpKind::ALL[rng.weighted(&weights)]
                    } else {
                        OpKind::Send
                    };
                    let len = if kind.is_atomic() {
                        8
                    } else if pc.qp_type == QpType::Ud {
                        rng.range(0, u64::from(pc.max_len)) as u32
                    } else {
                        match rng.below(10) {
                            0..=3 => rng.range(0, 32) as u32,
                            4..=6 => rng.range(0, u64::from(mtu)) as u32,
                            _ => rng.range(0, u64::from(pc.max_len)) as u32,
                        }
                    };
                    let offset = if bursty {
                        rng.pick(&centers) + rng.below(50)
                    } else {
                        rng.below(safety * 7 / 10)
                    };
                    let signaled = pc.sq_sig_all[side] || rng.chance(cfg.signal_prob);
                    let inline = !kind.is_atomic()
                        && kind != OpKind::RdmaRead
                        && len <= MAX_INLINE
                        && rng.chance(cfg.inline_prob);
                    let nsge = if kind.is_atomic() {
                        1
                    } else {
                        rng.range(if len == 0 { 0 } else { 1 }, 4) as u32
                    };
                    v.push(PlannedWr {
                        due: START + Duration::from_micros(offset),
                        kind,
                        len,
                        signaled,
                        inline,
                        fence: rng.chance(0.05),
                        solicited: rng.chance(0.1),
                        nsge,
                        imm: ((e as u32) << 16) | i as u32,
                        cmp_hit: rng.chance(0.5),
                        compare: rng.u64(),
                        swap_add: rng.u64() >> rng.below(60),
                        local: 0,
                        remote: 0,
                        recv_slot: None,
                    });
                }
                // Stable: equal due times keep their planned order.
                v.sort_by_key(|w| w.due);
                plans.push(v);
            }
        }

        // 2. Memory: for each end, a local region (send data, READ destinations, atomic
        // results, receive slots for the peer's messages) and a remote region (WRITE targets
        // for the peer, the READ source, the atomic words), with guard bytes around each.
        let mut allocs = vec![Alloc { next: 0 }; cfg.hcas];
        let mut regions = Vec::with_capacity(plans.len());
        let mut read_src = vec![(0u64, 0u64); plans.len()];
        let mut atomic_words = vec![0u64; plans.len()];
        for e in 0..plans.len() {
            let (p, side) = (e / 2, e % 2);
            let pc = &cfg.pairs[p];
            let node = pc.hca[side];
            let peer = e ^ 1;
            let a = &mut allocs[node];
            a.gap(&mut rng, 8, 64);
            let lstart = a.take(0, 8);
            for w in plans[e].iter_mut() {
                a.gap(&mut rng, 0, 8);
                w.local = match w.kind {
                    k if k.is_atomic() => a.take(8, 8),
                    _ => a.take(u64::from(w.len), 1),
                };
            }
            let recv_len = |w: &PlannedWr, rng: &mut SimRng| match pc.qp_type {
                QpType::Rc => w.len + rng.range(0, 16) as u32,
                QpType::Uc => pc.max_len,
                QpType::Ud => 40 + pc.max_len,
            };
            for i in 0..plans[peer].len() {
                if plans[peer][i].kind.consumes_recv() {
                    let len = recv_len(&plans[peer][i], &mut rng);
                    let a = &mut allocs[node];
                    a.gap(&mut rng, 0, 8);
                    plans[peer][i].recv_slot = Some((a.take(u64::from(len), 1), len));
                }
            }
            let a = &mut allocs[node];
            a.gap(&mut rng, 0, 8);
            let lend = a.take(0, 1);
            a.gap(&mut rng, 8, 64);
            let rstart = a.take(0, 8);
            for i in 0..plans[peer].len() {
                if plans[peer][i].kind.is_write() {
                    let a = &mut allocs[node];
                    a.gap(&mut rng, 0, 8);
                    plans[peer][i].remote = a.take(u64::from(plans[peer][i].len), 1);
                }
            }
            let src_len = plans[peer]
                .iter()
                .filter(|w| w.kind == OpKind::RdmaRead)
                .map(|w| u64::from(w.len))
                .max()
                .unwrap_or(0)
                .max(8);
            let a = &mut allocs[node];
            a.gap(&mut rng, 0, 8);
            read_src[e] = (a.take(src_len, 1), src_len);
            a.gap(&mut rng, 0, 8);
            atomic_words[e] = a.take(8 * u64::from(MAX_EPOCHS), 8);
            a.gap(&mut rng, 0, 8);
            let rend = a.take(0, 1);
            regions.push(Regions {
                local: (lstart, lend - lstart),
                remote: (rstart, rend - rstart),
            });
        }
        for e in 0..plans.len() {
            let (src, src_len) = read_src[e ^ 1];
            for w in plans[e].iter_mut() {
                if w.kind == OpKind::RdmaRead {
                    w.remote = src + rng.below(src_len - u64::from(w.len) + 1);
                }
            }
        }
        let mem_len = allocs
            .iter()
            .map(|a| (a.next + rng.range(8, 64)) as usize)
            .collect();

        let mut ends = Vec::with_capacity(plans.len());
        for (e, plan) in plans.into_iter().enumerate() {
            let (p, side) = (e / 2, e % 2);
            let pc = &cfg.pairs[p];
            ends.push(End {
                pair: p,
                side,
                node: pc.hca[side],
                peer: e ^ 1,
                qp_type: pc.qp_type,
                qpn: Qpn::new(0),
                ah: None,
                lkey: 0,
                rkey: 0,
                sq_sig_all: pc.sq_sig_all[side],
                plan: plan.into(),
                pending_recvs: VecDeque::new(),
                epoch: 0,
                consuming: 0,
                recv_index: 0,
                next_send_seq: 0,
                next_recv_seq: 0,
                state: QpState::Reset,
                atomic_words: atomic_words[e],
                shadow: None,
            });
        }
        let mut actions = BTreeMap::new();
        let mut action_seq = 0;
        for (p, pc) in cfg.pairs.iter().enumerate() {
            for &d in &pc.disruptions {
                action_seq += 1;
                actions.insert((START + d, action_seq), Action::Disrupt(p));
            }
        }
        Workload {
            rng,
            ends,
            regions,
            mem_len,
            actions,
            action_seq,
            reconnecting: vec![false; cfg.pairs.len()],
            liveness: false,
            cfg: cfg.clone(),
            reconnects: 0,
        }
    }

    /// How many bytes of memory each HCA needs.
    pub(crate) fn mem_len(&self) -> &[usize] {
        &self.mem_len
    }

    /// Registers the regions, creates and connects every QP, and tells the oracle.
    pub(crate) fn setup(&mut self, world: &mut World, oracle: &mut Oracle) -> Result<(), String> {
        let local = AccessFlags::LOCAL_WRITE;
        let remote = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ)
            .with(AccessFlags::REMOTE_ATOMIC);
        for e in 0..self.ends.len() {
            let r = self.regions[e];
            let end = &self.ends[e];
            let node = &mut world.nodes[end.node];
            let (pd, send_cq, recv_cq) = (node.pd, node.send_cq, node.recv_cq);
            let err = |what: &str, x: VerbsError| format!("sim: setup of {what} failed: {x}");
            let lkey = node
                .hca_mut()
                .reg_mr(pd, r.local.0, r.local.1, local, crate::world::REGION)
                .map_err(|x| err("the local MR", x))?;
            let rkey = node
                .hca_mut()
                .reg_mr(pd, r.remote.0, r.remote.1, remote, crate::world::REGION)
                .map_err(|x| err("the remote MR", x))?;
            let qpn = node
                .hca_mut()
                .create_qp(QpInitAttr {
                    qp_type: end.qp_type,
                    pd,
                    send_cq,
                    recv_cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: self.cfg.max_send_wr,
                        max_recv_wr: RQ_DEPTH,
                        max_send_sge: 4,
                        max_recv_sge: 4,
                        max_inline_data: MAX_INLINE,
                    },
                    sq_sig_all: end.sq_sig_all,
                })
                .map_err(|x| err("a QP", x))?;
            oracle.add_mr(end.node, r.local.0, r.local.1);
            oracle.add_mr(end.node, r.remote.0, r.remote.1);
            let end = &mut self.ends[e];
            end.lkey = lkey;
            end.rkey = rkey;
            end.qpn = qpn;
        }
        for e in 0..self.ends.len() {
            let peer = self.ends[e].peer;
            let peer_node = self.ends[peer].node;
            let end = &self.ends[e];
            oracle.add_end(EndInfo {
                node: end.node,
                qpn: end.qpn,
                qp_type: end.qp_type,
                pair: end.pair,
                peer,
                peer_node,
            });
            if end.qp_type == QpType::Ud {
                let av = path_to(&world.nodes[peer_node]);
                let node = &mut world.nodes[end.node];
                let pd = node.pd;
                let ah = node
                    .hca_mut()
                    .create_ah(pd, av)
                    .map_err(|x| format!("sim: setup of an AH failed: {x}"))?;
                self.ends[e].ah = Some(ah);
            }
        }
        for p in 0..self.cfg.pairs.len() {
            self.connect(p, world)?;
        }
        Ok(())
    }

    /// Brings both ends of pair `p` from RESET to RTS with fresh PSNs.
    fn connect(&mut self, p: usize, world: &mut World) -> Result<(), String> {
        let psn = [
            Psn::new(self.rng.below(1 << 24) as u32),
            Psn::new(self.rng.below(1 << 24) as u32),
        ];
        for side in 0..2 {
            let e = 2 * p + side;
            self.bring_up(e, world, psn[1 - side], psn[side])?;
        }
        Ok(())
    }

    fn bring_up(
        &mut self,
        e: usize,
        world: &mut World,
        rq_psn: Psn,
        sq_psn: Psn,
    ) -> Result<(), String> {
        let cfg = &self.cfg;
        let end = &self.ends[e];
        let peer = &self.ends[end.peer];
        let path = path_to(&world.nodes[peer.node]);
        let t = end.qp_type;
        let access = match t {
            QpType::Rc => AccessFlags::LOCAL_WRITE
                .with(AccessFlags::REMOTE_WRITE)
                .with(AccessFlags::REMOTE_READ)
                .with(AccessFlags::REMOTE_ATOMIC),
            _ => AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE),
        };
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: access,
            port_num: 1,
            pkey_index: 0,
            qkey: QKEY,
            path_mtu: cfg.mtu,
            dest_qp_num: peer.qpn,
            rq_psn,
            sq_psn,
            max_dest_rd_atomic: cfg.max_rd_atomic,
            max_rd_atomic: cfg.max_rd_atomic,
            min_rnr_timer: cfg.min_rnr_timer,
            timeout: cfg.timeout,
            retry_cnt: cfg.retry_cnt,
            rnr_retry: cfg.rnr_retry,
            ah_attr: path,
            ..QpAttr::default()
        };
        let m = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT);
        let (init, rtr, rts) = match t {
            QpType::Ud => (
                m.with(AttrMask::QKEY),
                AttrMask::STATE,
                AttrMask::STATE.with(AttrMask::SQ_PSN),
            ),
            QpType::Uc => (
                m.with(AttrMask::ACCESS_FLAGS),
                AttrMask::STATE
                    .with(AttrMask::AV)
                    .with(AttrMask::PATH_MTU)
                    .with(AttrMask::DEST_QPN)
                    .with(AttrMask::RQ_PSN),
                AttrMask::STATE.with(AttrMask::SQ_PSN),
            ),
            QpType::Rc => (
                m.with(AttrMask::ACCESS_FLAGS),
                AttrMask::STATE
                    .with(AttrMask::AV)
                    .with(AttrMask::PATH_MTU)
                    .with(AttrMask::DEST_QPN)
                    .with(AttrMask::RQ_PSN)
                    .with(AttrMask::MAX_DEST_RD_ATOMIC)
                    .with(AttrMask::MIN_RNR_TIMER),
                AttrMask::STATE
                    .with(AttrMask::SQ_PSN)
                    .with(AttrMask::TIMEOUT)
                    .with(AttrMask::RETRY_CNT)
                    .with(AttrMask::RNR_RETRY)
                    .with(AttrMask::MAX_QP_RD_ATOMIC),
            ),
        };
        let name = end.name();
        let qpn = end.qpn;
        // Through the link, which decides at RTR from the path whether the QP's peer is in
        // this process (with `in_process`, every HCA is).
        let ca = &mut world.nodes[end.node].ca;
        for (to, mask) in [
            (QpState::Init, init),
            (QpState::Rtr, rtr),
            (QpState::Rts, rts),
        ] {
            attr.qp_state = to;
            ca.modify_qp(qpn, &attr, mask)
                .map_err(|x| format!("sim: {name} could not move to {to}: {x}"))?;
        }
        let now = world.now;
        let epoch = self.ends[e].epoch;
        world.log.push(
            now,
            format_args!(
                "{name} RESET -> INIT -> RTR -> RTS epoch {epoch} sq_psn {sq_psn} rq_psn {rq_psn}"
            ),
        );
        self.ends[e].state = QpState::Rts;
        Ok(())
    }

    /// Moves end `e` to ERR on the workload's behalf.
    fn set_err(
        &mut self,
        e: usize,
        world: &mut World,
        oracle: &mut Oracle,
        why: &str,
    ) -> Result<(), String> {
        let end = &mut self.ends[e];
        let ca = &mut world.nodes[end.node].ca;
        let state = ca.hca().qp(end.qpn).map(|q| q.state);
        if state != Some(QpState::Err) {
            let attr = QpAttr {
                qp_state: QpState::Err,
                ..QpAttr::default()
            };
            ca.modify_qp(end.qpn, &attr, AttrMask::STATE)
                .map_err(|x| format!("sim: {} could not move to ERR: {x}", end.name()))?;
            world.log.push(
                world.now,
                format_args!(
                    "{} {} -> ERR (workload: {why})",
                    end.name(),
                    state.map_or(String::from("?"), |s| s.to_string())
                ),
            );
            end.state = QpState::Err;
            oracle.entered_err(e, true);
        }
        Ok(())
    }

    /// Resets both ends of pair `p` and reconnects them in a new epoch.
    fn reconnect(
        &mut self,
        p: usize,
        world: &mut World,
        oracle: &mut Oracle,
    ) -> Result<(), String> {
        for side in 0..2 {
            let e = 2 * p + side;
            self.set_err(e, world, oracle, "reconnect")?;
            let end = &mut self.ends[e];
            let attr = QpAttr {
                qp_state: QpState::Reset,
                ..QpAttr::default()
            };
            world.nodes[end.node]
                .ca
                .modify_qp(end.qpn, &attr, AttrMask::STATE)
                .map_err(|x| format!("sim: {} could not move to RESET: {x}", end.name()))?;
            end.state = QpState::Reset;
            end.epoch += 1;
            end.consuming = 0;
            end.recv_index = 0;
            end.shadow = None;
            end.pending_recvs.retain(|r| r.epoch == end.epoch);
            oracle.new_epoch(e);
        }
        self.reconnects += 1;
        self.connect(p, world)
    }

    fn schedule(&mut self, at: Instant, a: Action) {
        self.action_seq += 1;
        self.actions.insert((at, self.action_seq), a);
    }

    fn ack_timeout_us(&self) -> u64 {
        self.cfg.ack_timeout().as_micros()
    }

    fn run_action(
        &mut self,
        a: Action,
        world: &mut World,
        oracle: &mut Oracle,
    ) -> Result<(), String> {
        let now = world.now;
        match a {
            Action::Disrupt(p) => {
                let (ea, eb) = (2 * p, 2 * p + 1);
                if self.liveness
                    || self.reconnecting[p]
                    || self.ends[ea].epoch + 1 >= MAX_EPOCHS
                    || self.ends[ea].state != QpState::Rts
                    || self.ends[eb].state != QpState::Rts
                {
                    return Ok(());
                }
                let e = 2 * p + self.rng.below(2) as usize;
                self.set_err(e, world, oracle, "disruption")?;
                self.reconnecting[p] = true;
                let d = self.rng.range(0, 3 * self.ack_timeout_us());
                self.schedule(now + Duration::from_micros(d), Action::ErrPeer(p));
            }
            Action::ErrPeer(p) => {
                for side in 0..2 {
                    self.set_err(2 * p + side, world, oracle, "peer in ERR")?;
                }
                let quiet = self.cfg.delay.max_lifetime().as_micros() + self.rng.range(1, 100);
                self.schedule(now + Duration::from_micros(quiet), Action::Reconnect(p));
            }
            Action::Reconnect(p) => {
                self.reconnect(p, world, oracle)?;
                self.reconnecting[p] = false;
            }
        }
        Ok(())
    }

    /// Splits `[addr, addr + len)` into `n` scatter/gather elements.
    fn sges(&mut self, addr: u64, len: u32, n: u32, lkey: u32) -> Vec<Sge> {
        if n == 0 {
            return Vec::new();
        }
        let mut cuts: Vec<u32> = (1..n)
            .map(|_| self.rng.range(0, u64::from(len)) as u32)
            .collect();
        cuts.push(0);
        cuts.push(len);
        cuts.sort_unstable();
        cuts.windows(2)
            .map(|w| Sge {
                addr: addr + u64::from(w[0]),
                length: w[1] - w[0],
                lkey,
            })
            .collect()
    }

    /// Posts the next planned work request of end `e`. Returns false if it must wait.
    fn post_next(
        &mut self,
        e: usize,
        world: &mut World,
        oracle: &mut Oracle,
    ) -> Result<bool, String> {
        let now = world.now;
        let Some(w) = self.ends[e].plan.front().cloned() else {
            return Ok(true);
        };
        let peer = self.ends[e].peer;
        let (peer_qpn, peer_rkey, peer_node, peer_words) = {
            let p = &self.ends[peer];
            (p.qpn, p.rkey, p.node, p.atomic_words)
        };
        let end = &self.ends[e];
        let node = end.node;
        let state = world.nodes[node]
            .hca()
            .qp(end.qpn)
            .map_or(QpState::Reset, |q| q.state);
        let epoch = end.epoch;
        let can_send = matches!(state, QpState::Rts | QpState::Sqd);
        let rkey = RKey(peer_rkey);
        let mut remote = w.remote;
        let mut compare = w.compare;
        let mut atomic_before = None;
        if w.kind.is_atomic() {
            remote = peer_words + 8 * u64::from(epoch);
            let cur = match self.ends[e].shadow {
                Some(v) => v,
                None => {
                    let off = (remote - BASE) as usize;
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&world.nodes[peer_node].initial[off..off + 8]);
                    u64::from_le_bytes(b)
                }
            };
            if w.cmp_hit {
                compare = cur;
            }
            atomic_before = Some(cur);
        }
        let opcode = match w.kind {
            OpKind::Send => WrOpcode::Send,
            OpKind::SendWithImm => WrOpcode::SendWithImm(w.imm),
            OpKind::RdmaWrite => WrOpcode::RdmaWrite(RemoteAddr { addr: remote, rkey }),
            OpKind::RdmaWriteWithImm => {
                WrOpcode::RdmaWriteWithImm(RemoteAddr { addr: remote, rkey }, w.imm)
            }
            OpKind::RdmaRead => WrOpcode::RdmaRead(RemoteAddr { addr: remote, rkey }),
            OpKind::AtomicCmpAndSwp => WrOpcode::AtomicCmpAndSwp {
                remote: RemoteAddr { addr: remote, rkey },
                compare,
                swap: w.swap_add,
            },
            OpKind::AtomicFetchAndAdd => WrOpcode::AtomicFetchAndAdd {
                remote: RemoteAddr { addr: remote, rkey },
                add: w.swap_add,
            },
        };
        let mut flags = SendFlags::default();
        if w.signaled {
            flags = flags.with(SendFlags::SIGNALED);
        }
        if w.fence {
            flags = flags.with(SendFlags::FENCE);
        }
        if w.solicited {
            flags = flags.with(SendFlags::SOLICITED);
        }
        let seq = end.next_send_seq;
        let wr_id = (e as u64) << 32 | u64::from(seq);
        let lkey = end.lkey;
        let ud = end.ah.map(|ah| UdDest {
            ah,
            remote_qpn: peer_qpn,
            remote_qkey: QKEY,
        });
        let (sg_list, inline_data) = if w.inline {
            flags = flags.with(SendFlags::INLINE);
            let off = (w.local - BASE) as usize;
            let data = world.nodes[node].initial[off..off + w.len as usize].to_vec();
            (Vec::new(), Some(data))
        } else {
            (self.sges(w.local, w.len, w.nsge, lkey), None)
        };
        let wr = SendWr {
            wr_id,
            opcode,
            sg_list,
            flags,
            inline_data,
            ud,
        };
        match world.nodes[node].hca_mut().post_send(self.ends[e].qpn, wr) {
            Ok(()) => {}
            Err(VerbsError::Exhausted(_)) => return Ok(false),
            Err(x) => {
                return Err(format!(
                    "{} refused a valid {} of {} bytes in {state}: {x}",
                    self.ends[e].name(),
                    w.kind,
                    w.len
                ))
            }
        }
        let end = &mut self.ends[e];
        end.plan.pop_front();
        end.next_send_seq += 1;
        let consuming_index = if can_send && w.kind.consumes_recv() {
            end.consuming += 1;
            Some(end.consuming - 1)
        } else {
            None
        };
        if can_send {
            if let Some(before) = atomic_before {
                let after = match w.kind {
                    OpKind::AtomicCmpAndSwp if before == compare => w.swap_add,
                    OpKind::AtomicCmpAndSwp => before,
                    _ => before.wrapping_add(w.swap_add),
                };
                end.shadow = Some(after);
            }
        }
        oracle.posted_send(
            e,
            SendRecord {
                wr_id,
                seq,
                kind: w.kind,
                len: w.len,
                signaled: w.signaled || end.sq_sig_all,
                epoch,
                posted_at: now,
                transmittable: can_send,
                consuming_index,
                local: w.local,
                remote,
                imm: w.imm,
                compare,
                swap_add: w.swap_add,
                completion: None,
                completions: 0,
            },
        );
        // The receive the message will need at the peer: now, or late.
        if let (Some(_), Some((addr, len))) = (consuming_index, w.recv_slot) {
            let late = !self.liveness && self.rng.chance(self.cfg.late_recv_prob);
            let mut due = now;
            if late {
                due += Duration::from_micros(
                    self.rng.range(1, self.cfg.late_recv_max.as_micros().max(1)),
                );
                oracle.late_recv(peer);
            }
            let p = &mut self.ends[peer];
            if let Some(last) = p.pending_recvs.back() {
                due = due.max(last.due);
            }
            p.pending_recvs.push_back(PendingRecv {
                due,
                epoch,
                addr,
                len,
            });
        }
        Ok(true)
    }

    /// Posts the next pending receive of end `e`. Returns false if it must wait.
    fn post_recv_next(
        &mut self,
        e: usize,
        world: &mut World,
        oracle: &mut Oracle,
    ) -> Result<bool, String> {
        let Some(r) = self.ends[e].pending_recvs.front().copied() else {
            return Ok(true);
        };
        let end = &self.ends[e];
        if end.qp_type == QpType::Rc && r.epoch != end.epoch {
            self.ends[e].pending_recvs.pop_front();
            return Ok(true);
        }
        let nsge = self.rng.range(1, 4) as u32;
        let lkey = end.lkey;
        let sg_list = self.sges(r.addr, r.len, nsge, lkey);
        let end = &self.ends[e];
        let seq = end.next_recv_seq;
        let wr_id = (e as u64) << 32 | 1 << 31 | u64::from(seq);
        let state = world.nodes[end.node]
            .hca()
            .qp(end.qpn)
            .map_or(QpState::Reset, |q| q.state);
        match world.nodes[end.node]
            .hca_mut()
            .post_recv(end.qpn, RecvWr { wr_id, sg_list })
        {
            Ok(()) => {}
            Err(VerbsError::Exhausted(_)) => {
                oracle.late_recv(e);
                return Ok(false);
            }
            Err(x) => {
                return Err(format!(
                    "{} refused a valid receive in {state}: {x}",
                    end.name()
                ))
            }
        }
        let end = &mut self.ends[e];
        end.pending_recvs.pop_front();
        end.next_recv_seq += 1;
        end.recv_index += 1;
        oracle.posted_recv(
            e,
            RecvRecord {
                wr_id,
                seq,
                epoch: end.epoch,
                index: end.recv_index - 1,
                addr: r.addr,
                len: r.len,
                completion: None,
                completions: 0,
            },
        );
        Ok(true)
    }

    /// Does everything due at `world.now`: actions, then posts.
    pub(crate) fn act(&mut self, world: &mut World, oracle: &mut Oracle) -> Result<(), String> {
        let now = world.now;
        while let Some((&(t, s), &a)) = self.actions.iter().next() {
            if t > now {
                break;
            }
            self.actions.remove(&(t, s));
            self.run_action(a, world, oracle)?;
        }
        for e in 0..self.ends.len() {
            while self.ends[e].plan.front().is_some_and(|w| w.due <= now) {
                if !self.post_next(e, world, oracle)? {
                    if let Some(w) = self.ends[e].plan.front_mut() {
                        w.due = now + BACKOFF;
                    }
                    break;
                }
            }
            while self.ends[e]
                .pending_recvs
                .front()
                .is_some_and(|r| r.due <= now)
            {
                if !self.post_recv_next(e, world, oracle)? {
                    if let Some(r) = self.ends[e].pending_recvs.front_mut() {
                        r.due = now + BACKOFF;
                    }
                    break;
                }
            }
        }
        Ok(())
    }

    /// Notices QPs the engine moved (to ERR or SQE), logs them, tells the oracle, and in the
    /// safety phase schedules the reconnection of the pair.
    pub(crate) fn observe(&mut self, world: &mut World, oracle: &mut Oracle) -> Result<(), String> {
        for e in 0..self.ends.len() {
            let end = &self.ends[e];
            let state = world.nodes[end.node]
                .hca()
                .qp(end.qpn)
                .map_or(QpState::Reset, |q| q.state);
            if state == end.state {
                continue;
            }
            let line = format!("{} {} -> {state} (engine)", end.name(), end.state);
            world.log.push(world.now, &line);
            if !matches!(state, QpState::Err | QpState::Sqe) {
                return Err(format!(
                    "{line}: a QP may leave {} only by modify_qp or to ERR/SQE",
                    end.state
                ));
            }
            let p = end.pair;
            let epoch = end.epoch;
            self.ends[e].state = state;
            oracle.entered_err(e, false);
            if !self.liveness && !self.reconnecting[p] && epoch + 1 < MAX_EPOCHS {
                self.reconnecting[p] = true;
                let d = self.rng.range(0, self.ack_timeout_us());
                self.schedule(world.now + Duration::from_micros(d), Action::ErrPeer(p));
            }
        }
        Ok(())
    }

    /// The next time the workload has something to do.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        let a = self.actions.keys().next().map(|&(t, _)| t);
        self.ends
            .iter()
            .flat_map(|e| {
                [
                    e.plan.front().map(|w| w.due),
                    e.pending_recvs.front().map(|r| r.due),
                ]
            })
            .flatten()
            .chain(a)
            .min()
    }

    /// The network has healed: receives are posted at once from now on, nothing is disrupted
    /// and failed pairs stay failed.
    pub(crate) fn start_liveness(&mut self, now: Instant) {
        self.liveness = true;
        for e in &mut self.ends {
            for r in &mut e.pending_recvs {
                r.due = r.due.min(now);
            }
        }
        let disrupts: Vec<(Instant, u64)> = self
            .actions
            .iter()
            .filter(|(_, a)| matches!(a, Action::Disrupt(_)))
            .map(|(&k, _)| k)
            .collect();
        for k in disrupts {
            self.actions.remove(&k);
        }
    }

    /// Whether everything planned has been posted, every action run, and every surviving
    /// queue drained.
    pub(crate) fn done(&self, world: &World) -> bool {
        if !self.actions.is_empty() {
            return false;
        }
        for e in &self.ends {
            if !e.plan.is_empty() {
                return false;
            }
            let stale = |r: &PendingRecv| e.qp_type == QpType::Rc && r.epoch != e.epoch;
            if !e.pending_recvs.iter().all(stale) {
                return false;
            }
            let Some(qp) = world.nodes[e.node].hca().qp(e.qpn) else {
                return false;
            };
            if qp.state != QpState::Err && qp.send_queue_len() > 0 {
                return false;
            }
        }
        true
    }

    /// What is left to do, for a liveness failure.
    pub(crate) fn outstanding(&self, world: &World) -> Vec<String> {
        let mut v = Vec::new();
        for e in &self.ends {
            let qp = world.nodes[e.node].hca().qp(e.qpn);
            let sq = qp.map_or(0, |q| q.send_queue_len());
            let st = qp.map_or(QpState::Reset, |q| q.state);
            if !e.plan.is_empty() || sq > 0 || !e.pending_recvs.is_empty() {
                v.push(format!(
                    "{} in {st}: {} WRs not posted, {sq} in the send queue, {} receives not posted, {} receives posted",
                    e.name(),
                    e.plan.len(),
                    e.pending_recvs.len(),
                    qp.map_or(0, |q| q.recv_queue_len())
                ));
            }
        }
        if !self.actions.is_empty() {
            v.push(format!("{} workload actions pending", self.actions.len()));
        }
        v
    }
}

/// The path to `node`'s port: by GID, as RoCEv2 routes (the LID rides along unused).
fn path_to(node: &crate::world::Node) -> AddressVector {
    AddressVector {
        dlid: node.lid,
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: node.gid(),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        }),
        ..AddressVector::default()
    }
}
