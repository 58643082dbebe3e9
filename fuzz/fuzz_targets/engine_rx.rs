//! The packet input of `softib-engine`: one HCA with live QPs of every type, driven by a
//! sequence of steps the fuzzer's bytes choose, with the engine's invariants checked after
//! every step.
//!
//! The HCA (fixed seed) has six QPs, all in one protection domain:
//!
//! | # | QP | state | notes |
//! |---|---|---|---|
//! | 0 | RC | RTS | MTU 256, receives posted, a SEND (2 packets), WRITE, READ (3 responses), CmpSwap, FetchAdd and 0-byte SEND with immediate outstanding towards QP 4 (SQ PSNs wrap at 0xFFFFFF) |
//! | 1 | RC | RTR | MTU 512, P_Key index 1 (0x8001), no atomic access, receives posted |
//! | 2 | UC | RTS | MTU 256, connected to itself, receives posted, a SEND and a WRITE with immediate sent |
//! | 3 | UD | RTS | Q_Key 0x11111111, receives posted (one too small, one without LOCAL_WRITE), a SEND to itself |
//! | 4 | RC | RTS | attached to an SRQ, connected to QP 0 (a loopback pair), a SEND outstanding |
//! | 5 | RC | RTS | no remote access, limited P_Key (index 2, 0x0001), timeout 9 µs, no retries, unsignaled WRs, peer absent |
//!
//! Memory: three `VecMemory` regions filled with a pattern, holding ten regions registered with
//! different rights (all, write, read-only, local write, atomics, an overlapping read-only one,
//! none, one in a second PD, one registered longer than its backing, one deregistered), with
//! unregistered guard bytes between them.
//!
//! Steps (one selector byte each): deliver raw bytes; deliver a packet built from fuzzer fields
//! (destination among the live QPNs, opcode mostly of the QP's transport, PSN near the
//! responder's expected one for requests or at a PSN the QP really sent for responses, keys and
//! addresses among the registered regions); deliver a packet the engine sent earlier (the
//! "wire": QP 0 ↔ QP 4, QP 2 and QP 3 talk to themselves), possibly mutated or duplicated;
//! drain `poll_transmit` onto the wire; pump the wire (transmit and deliver, several rounds);
//! advance time and `handle_timeout`; post send, receive or SRQ work requests; modify a QP
//! (ERR, SQD, back to RTS, or RESET and up again). The selector ranges: 0x00-0x1F raw (then a
//! meta byte, a little-endian u16 length and the bytes: what `seed_corpus.py` writes),
//! 0x20-0x5F built, 0x60-0x7F wire, 0x80-0x8F transmit, 0x90-0x9F pump, 0xA0-0xBF time,
//! 0xC0-0xDF post send, 0xE0-0xEF post receive, 0xF0-0xFF modify. At the end of the input the
//! transmit queue is drained and checked once more.
//!
//! After every step the completion queues and async events are drained and checked:
//!
//! * nothing panics (overflow checks included in the default build);
//! * no byte the engine may not write changes: every byte outside the regions of the QPs' PD
//!   that grant LOCAL_WRITE and were registered when the step began keeps its value;
//! * every completion names a WR that was posted to that QP's send queue, receive queue or SRQ
//!   and has not completed yet; send completions come in posting order (only unsignaled WRs may
//!   be passed over), receive completions in posting order; a successful receive reports no more
//!   bytes than its buffers hold; no CQ overflows (the queues are bounded so that it cannot);
//! * every packet `poll_transmit` writes fits `MAX_TRANSPORT_LEN`, parses with
//!   `packet::parse_body` with exactly the ETHs its opcode calls for, carries at most one MTU of
//!   payload, and its opcode's transport is the sending QP's type;
//! * a QP in ERR sends nothing but its final NAK, at most once;
//! * `poll_transmit` returns `None` within 10,000 packets;
//! * after `handle_timeout(now)`, `poll_timeout()` is `None` or later than `now`;
//! * the engine's own invariants hold (`Hca::check_invariants`: the requester's, completer's
//!   and responder's rules of every QP, the timer set and the transmit schedule).
//!
//! With `ENGINE_RX_DEBUG` set the target prints a summary of each input, with `ENGINE_RX_TRACE`
//! every packet delivered and sent and every completion (stderr).
#![no_main]

use std::collections::VecDeque;
use std::sync::OnceLock;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use softib_engine::qp::requester::MAX_TRANSPORT_LEN;
use softib_engine::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, UdDest,
    WcOpcode, WcStatus, WorkCompletion, WrOpcode,
};
use softib_engine::{
    AddressVector, AhHandle, AttrMask, CqHandle, Duration, Hca, HcaConfig, Instant, PortAttr,
    QpAttr, QpCap, QpInitAttr, RegionId, RxMeta, SrqHandle, VecMemory,
};
use softib_wire::aeth::{NakCode, Syndrome};
use softib_wire::opcode::Kind;
use softib_wire::packet::{pad_for, parse_body, TransportRepr};
use softib_wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, IethRepr, ImmDtRepr,
    Mtu, Opcode, PKey, Position, Psn, QKey, Qpn, RKey, RethRepr, Transport,
};

/// The HCA's seed (QPNs and key bits follow from it; `seed_corpus.py` mirrors the derivation).
const SEED: u64 = 0x5EED_F022;
/// Where the clock starts (µs).
const T0: u64 = 1_000_000;
/// Steps per input.
const MAX_STEPS: usize = 512;
/// `poll_transmit` must return `None` within this many packets.
const MAX_TX_PER_DRAIN: usize = 10_000;
/// Packets kept on the wire; older ones are lost.
const WIRE_CAP: usize = 64;
/// Request packets remembered per QP (what responses can match).
const REQS_KEPT: usize = 16;
/// Capacity of each CQ: more than all queues together can hold, so none overflows when polled
/// after every step.
const CQ_CAP: u32 = 256;
const SQ_CAP: u32 = 16;
const RQ_CAP: u32 = 16;
const SRQ_CAP: u32 = 32;
const QKEY: u32 = 0x1111_1111;
const UD_QP: usize = 3;
const PKEYS: [u16; 3] = [0xFFFF, 0x8001, 0x0001];

const LW: AccessFlags = AccessFlags::LOCAL_WRITE;
const RW: AccessFlags = AccessFlags::REMOTE_WRITE;
const RR: AccessFlags = AccessFlags::REMOTE_READ;
const RA: AccessFlags = AccessFlags::REMOTE_ATOMIC;
const ALL: AccessFlags = LW.with(RW).with(RR).with(RA);

/// The backing regions: (id, base address, bytes).
const REGIONS: [(RegionId, u64, usize); 3] = [
    (RegionId(1), 0x1000_0000, 0x1800),
    (RegionId(2), 0x2000_0000, 0x400),
    (RegionId(3), 0x3000_0000, 0x200),
];

/// A registered region: backing region index, offset, length, rights, in the second PD,
/// deregistered right after registration.
struct MrSpec {
    region: usize,
    off: u64,
    len: u64,
    access: AccessFlags,
    other_pd: bool,
    dereg: bool,
}

const fn mr(region: usize, off: u64, len: u64, access: AccessFlags) -> MrSpec {
    MrSpec {
        region,
        off,
        len,
        access,
        other_pd: false,
        dereg: false,
    }
}

// Indices into MRS.
const M_ALL: usize = 0;
const M_RW: usize = 1;
const M_RO: usize = 2;
const M_LW: usize = 3;
const M_ATOM: usize = 4;
const M_NONE: usize = 6;
const M_PD2: usize = 7;
const M_SHORT: usize = 8;

/// Registered in this order (keys are `(index + 1) << 8 | 8 random bits`).
const MRS: [MrSpec; 10] = [
    mr(0, 0x100, 0x800, ALL),
    mr(0, 0xA00, 0x200, LW.with(RW)),
    mr(0, 0xC80, 0x200, RR),
    mr(0, 0xF00, 0x400, LW),
    mr(0, 0x1380, 0x100, LW.with(RA)),
    // Overlaps the end of M_ALL and covers the guard bytes after it, read-only.
    mr(0, 0x700, 0x300, RR),
    mr(0, 0x1500, 0x200, AccessFlags::NONE),
    MrSpec {
        other_pd: true,
        ..mr(1, 0x80, 0x300, ALL)
    },
    // Registered for 0x400 bytes; only 0x200 are backed (the embedder's memory went away).
    mr(2, 0, 0x400, ALL),
    MrSpec {
        dereg: true,
        ..mr(0, 0x100, 0x100, ALL)
    },
];

#[derive(Clone, Copy)]
enum Dest {
    Qp(usize),
    Fake(u32),
}

struct Spec {
    ty: QpType,
    srq: bool,
    sig_all: bool,
    to: QpState,
    mtu: Mtu,
    access: AccessFlags,
    dest: Dest,
    rq_psn: u32,
    sq_psn: u32,
    timeout: u8,
    retry: u8,
    rnr_retry: u8,
    max_rd: u8,
    max_dest_rd: u8,
    min_rnr: u8,
    pkey_index: u16,
}

const RC0: Spec = Spec {
    ty: QpType::Rc,
    srq: false,
    sig_all: true,
    to: QpState::Rts,
    mtu: Mtu::Mtu256,
    access: ALL,
    dest: Dest::Qp(4),
    rq_psn: 0x00_0100,
    sq_psn: 0xFF_FFF8,
    timeout: 10,
    retry: 3,
    rnr_retry: 3,
    max_rd: 4,
    max_dest_rd: 4,
    min_rnr: 1,
    pkey_index: 0,
};

const SPECS: [Spec; 6] = [
    RC0,
    Spec {
        to: QpState::Rtr,
        mtu: Mtu::Mtu512,
        access: LW.with(RW).with(RR),
        dest: Dest::Fake(0x0A_BCDE),
        rq_psn: 0x7F_FFFE,
        sq_psn: 0,
        timeout: 14,
        retry: 7,
        rnr_retry: 7,
        max_rd: 2,
        max_dest_rd: 2,
        min_rnr: 12,
        pkey_index: 1,
        ..RC0
    },
    Spec {
        ty: QpType::Uc,
        access: LW.with(RW),
        dest: Dest::Qp(2),
        rq_psn: 0x500,
        sq_psn: 0x500,
        ..RC0
    },
    Spec {
        ty: QpType::Ud,
        mtu: Mtu::Mtu1024,
        access: AccessFlags::NONE,
        dest: Dest::Fake(0),
        rq_psn: 0,
        sq_psn: 7,
        ..RC0
    },
    Spec {
        srq: true,
        dest: Dest::Qp(0),
        rq_psn: 0xFF_FFF8,
        sq_psn: 0x100,
        timeout: 12,
        retry: 7,
        rnr_retry: 7,
        max_rd: 16,
        max_dest_rd: 16,
        min_rnr: 3,
        ..RC0
    },
    Spec {
        sig_all: false,
        access: AccessFlags::NONE,
        dest: Dest::Fake(0x00_ABCD),
        rq_psn: 0x12_3456,
        sq_psn: 0x80_0000,
        timeout: 1,
        retry: 0,
        rnr_retry: 0,
        max_rd: 1,
        max_dest_rd: 1,
        min_rnr: 31,
        pkey_index: 2,
        ..RC0
    },
];
const NQP: usize = SPECS.len();

/// A request packet a QP sent: what a response to it looks like.
#[derive(Clone, Copy)]
struct ReqRec {
    psn: Psn,
    kind: Kind,
    /// READ: response packets; otherwise 1.
    npkts: u32,
    /// READ: bytes asked for.
    dma_len: u32,
}

struct QpRt {
    qpn: Qpn,
    mtu: u32,
    /// The P_Key a packet to this QP carries to pass the partition check.
    rx_pkey: PKey,
    /// The PSN the QP's responder expects next, as far as the harness can tell.
    hint: Psn,
    reqs: VecDeque<ReqRec>,
    /// Packets sent while in ERR since the last RESET.
    err_sent: u32,
    /// Send WRs posted and not completed: (wr_id, signaled).
    sends: VecDeque<(u64, bool)>,
    /// Receive WRs posted and not completed: (wr_id, bytes of buffer).
    recvs: VecDeque<(u64, u64)>,
}

struct Bench {
    hca: Hca<VecMemory>,
    now: Instant,
    scq: CqHandle,
    rcq: CqHandle,
    srq: SrqHandle,
    srq_wrs: Vec<(u64, u64)>,
    ahs: [AhHandle; 3],
    keys: [u32; MRS.len()],
    qps: Vec<QpRt>,
    wire: VecDeque<Vec<u8>>,
    next_wr: u64,
    shadow: Vec<Vec<u8>>,
    /// Per backing region, the ranges of bytes the engine may not write during the current
    /// step.
    guarded: Vec<Vec<(usize, usize)>>,
    /// Which keys were registered when `guarded` was computed.
    registered: Option<[bool; MRS.len()]>,
    buf: Vec<u8>,
    /// For the debug summary: completion statuses and async events seen.
    seen: std::collections::BTreeSet<String>,
}

/// `ENGINE_RX_DEBUG` set: a summary of each input on stderr.
fn debug() -> bool {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var_os("ENGINE_RX_DEBUG").is_some())
}

/// `ENGINE_RX_TRACE` set: every packet delivered and sent, and every completion, on stderr.
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("ENGINE_RX_TRACE").is_some())
}

/// One line about a transport body, for the trace.
fn describe(body: &[u8]) -> String {
    match parse_body(body) {
        Ok((t, payload)) => {
            let mut s = format!(
                "{} dest {} psn {} pkey 0x{:04x} {}B",
                t.bth.opcode,
                t.bth.dest_qpn,
                t.bth.psn,
                t.bth.pkey.0,
                payload.len()
            );
            if let Some(r) = t.reth {
                s += &format!(
                    " reth(va 0x{:x} rkey 0x{:x} len {})",
                    r.va, r.rkey.0, r.dma_len
                );
            }
            if let Some(a) = t.aeth {
                s += &format!(" aeth({} msn {})", a.syndrome, a.msn);
            }
            if let Some(i) = t.ieth {
                s += &format!(" ieth(rkey 0x{:x})", i.rkey.0);
            }
            if let Some(a) = t.atomic_eth {
                s += &format!(" atomic(va 0x{:x} rkey 0x{:x})", a.va, a.rkey.0);
            }
            s
        }
        Err(e) => format!("{} bytes that do not parse: {e}", body.len()),
    }
}

fn fill_byte(region: usize, i: usize) -> u8 {
    (i as u8)
        .wrapping_mul(131)
        .wrapping_add(7 + region as u8 * 50)
}

/// The 8 bytes at `off` of backing region `region` as they were filled (native order).
fn initial_u64(region: usize, off: u64) -> u64 {
    u64::from_le_bytes(std::array::from_fn(|i| {
        fill_byte(region, (off as usize).wrapping_add(i))
    }))
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn transport_of(ty: QpType) -> Transport {
    match ty {
        QpType::Rc => Transport::Rc,
        QpType::Uc => Transport::Uc,
        QpType::Ud => Transport::Ud,
    }
}

const RC_OPS: [u8; 23] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17,
];
const UC_OPS: [u8; 12] = [
    0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A, 0x2B,
];
const UD_OPS: [u8; 2] = [0x64, 0x65];
/// Every opcode softib implements, CNP included.
const KNOWN_OPS: [u8; 38] = [
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x0E, 0x0F,
    0x10, 0x11, 0x12, 0x13, 0x14, 0x16, 0x17, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2A, 0x2B, 0x64, 0x65, 0x81,
];

fn ops_for(ty: QpType) -> &'static [u8] {
    match ty {
        QpType::Rc => &RC_OPS,
        QpType::Uc => &UC_OPS,
        QpType::Ud => &UD_OPS,
    }
}

impl Bench {
    fn new() -> Bench {
        let mut cfg = HcaConfig::with_seed(SEED);
        cfg.ports[0].pkeys = PKEYS.iter().map(|&p| PKey(p)).collect();
        cfg.ports[0].active_mtu = Mtu::Mtu1024;
        cfg.ports.push(PortAttr {
            active: false,
            ..PortAttr::default()
        });
        let mut mem = VecMemory::new();
        for (r, &(id, base, len)) in REGIONS.iter().enumerate() {
            mem.add(id, base, len);
            let bytes = mem.bytes_mut(id).expect("region just added");
            for (i, b) in bytes.iter_mut().enumerate() {
                *b = fill_byte(r, i);
            }
        }
        let mut hca = Hca::new(cfg, mem);
        let pd = hca.alloc_pd().expect("alloc_pd");
        let pd2 = hca.alloc_pd().expect("alloc_pd");
        let mut keys = [0u32; MRS.len()];
        for (k, m) in keys.iter_mut().zip(MRS.iter()) {
            let (id, base, _) = REGIONS[m.region];
            let p = if m.other_pd { pd2 } else { pd };
            *k = hca
                .reg_mr(p, base + m.off, m.len, m.access, id)
                .expect("reg_mr");
            if m.dereg {
                hca.dereg_mr(*k).expect("dereg_mr");
            }
        }
        let scq = hca.create_cq(CQ_CAP).expect("create_cq");
        let rcq = hca.create_cq(CQ_CAP).expect("create_cq");
        let srq = hca.create_srq(pd, SRQ_CAP, 2).expect("create_srq");
        let av = AddressVector {
            port_num: 1,
            ..AddressVector::default()
        };
        let ahs = [
            hca.create_ah(pd, av).expect("create_ah"),
            hca.create_ah(pd2, av).expect("create_ah"),
            AhHandle(0xDEAD),
        ];
        let mut qps = Vec::with_capacity(NQP);
        for s in &SPECS {
            let qpn = hca
                .create_qp(QpInitAttr {
                    qp_type: s.ty,
                    pd,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq: s.srq.then_some(srq),
                    cap: QpCap {
                        max_send_wr: SQ_CAP,
                        max_recv_wr: RQ_CAP,
                        max_send_sge: 2,
                        max_recv_sge: 2,
                        max_inline_data: 64,
                    },
                    sq_sig_all: s.sig_all,
                })
                .expect("create_qp");
            let own = PKEYS[usize::from(s.pkey_index)];
            qps.push(QpRt {
                qpn,
                mtu: s.mtu.bytes().unwrap_or(256) as u32,
                rx_pkey: PKey(own | 0x8000),
                hint: Psn::new(s.rq_psn),
                reqs: VecDeque::new(),
                err_sent: 0,
                sends: VecDeque::new(),
                recvs: VecDeque::new(),
            });
        }
        let mut b = Bench {
            hca,
            now: Instant::from_micros(T0),
            scq,
            rcq,
            srq,
            srq_wrs: Vec::new(),
            ahs,
            keys,
            qps,
            wire: VecDeque::new(),
            next_wr: 1,
            shadow: REGIONS.iter().map(|&(_, _, len)| vec![0; len]).collect(),
            guarded: vec![Vec::new(); REGIONS.len()],
            registered: None,
            buf: vec![0; MAX_TRANSPORT_LEN],
            seen: std::collections::BTreeSet::new(),
        };
        for i in 0..NQP {
            b.bring_up(i);
        }
        b.initial_work();
        b.snapshot();
        b.begin_step();
        b.transmit();
        b.end_step();
        b
    }

    fn qpn_of(&self, d: Dest) -> Qpn {
        match d {
            Dest::Qp(i) => self.qps[i].qpn,
            Dest::Fake(n) => Qpn::new(n),
        }
    }

    /// RESET → INIT → RTR (→ RTS), with the masks each type needs.
    fn bring_up(&mut self, i: usize) {
        let s = &SPECS[i];
        let qpn = self.qps[i].qpn;
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: s.access,
            pkey_index: s.pkey_index,
            port_num: 1,
            qkey: QKEY,
            path_mtu: s.mtu,
            dest_qp_num: self.qpn_of(s.dest),
            rq_psn: Psn::new(s.rq_psn),
            sq_psn: Psn::new(s.sq_psn),
            max_rd_atomic: s.max_rd,
            max_dest_rd_atomic: s.max_dest_rd,
            min_rnr_timer: s.min_rnr,
            timeout: s.timeout,
            retry_cnt: s.retry,
            rnr_retry: s.rnr_retry,
            ah_attr: AddressVector {
                port_num: 1,
                ..AddressVector::default()
            },
            ..QpAttr::default()
        };
        let base = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT);
        let (init, rtr, rts) = match s.ty {
            QpType::Ud => (
                base.with(AttrMask::QKEY),
                AttrMask::STATE,
                AttrMask::STATE.with(AttrMask::SQ_PSN),
            ),
            QpType::Uc => (
                base.with(AttrMask::ACCESS_FLAGS),
                AttrMask::STATE
                    .with(AttrMask::AV)
                    .with(AttrMask::PATH_MTU)
                    .with(AttrMask::DEST_QPN)
                    .with(AttrMask::RQ_PSN),
                AttrMask::STATE.with(AttrMask::SQ_PSN),
            ),
            QpType::Rc => (
                base.with(AttrMask::ACCESS_FLAGS),
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
        self.hca.modify_qp(qpn, &attr, init).expect("RESET->INIT");
        attr.qp_state = QpState::Rtr;
        self.hca.modify_qp(qpn, &attr, rtr).expect("INIT->RTR");
        if s.to == QpState::Rts {
            attr.qp_state = QpState::Rts;
            self.hca.modify_qp(qpn, &attr, rts).expect("RTR->RTS");
        }
    }

    fn sge(&self, m: usize, off: u64, length: u32) -> Sge {
        let (_, base, _) = REGIONS[MRS[m].region];
        Sge {
            addr: base + MRS[m].off + off,
            length,
            lkey: self.keys[m],
        }
    }

    fn remote(&self, m: usize, off: u64) -> RemoteAddr {
        let (_, base, _) = REGIONS[MRS[m].region];
        RemoteAddr {
            addr: base + MRS[m].off + off,
            rkey: RKey(self.keys[m]),
        }
    }

    fn wr_id(&mut self) -> u64 {
        let id = self.next_wr;
        self.next_wr += 1;
        id
    }

    /// Posts a receive to QP `i` (or the SRQ for `i == NQP`); tracks it if accepted.
    fn post_recv(&mut self, i: usize, sg_list: Vec<Sge>) {
        let wr_id = self.wr_id();
        let cap: u64 = sg_list.iter().map(|s| u64::from(s.length)).sum();
        let wr = RecvWr { wr_id, sg_list };
        if i == NQP {
            if self.hca.post_srq_recv(self.srq, wr).is_ok() {
                self.srq_wrs.push((wr_id, cap));
            }
        } else if self.hca.post_recv(self.qps[i].qpn, wr).is_ok() {
            self.qps[i].recvs.push_back((wr_id, cap));
        }
    }

    /// Posts a send WR to QP `i`; tracks it if accepted.
    fn post_send(&mut self, i: usize, mut wr: SendWr) {
        wr.wr_id = self.wr_id();
        let signaled = SPECS[i].sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let id = wr.wr_id;
        if self.hca.post_send(self.qps[i].qpn, wr).is_ok() {
            self.qps[i].sends.push_back((id, signaled));
        }
    }

    fn send_wr(opcode: WrOpcode, sg_list: Vec<Sge>) -> SendWr {
        SendWr {
            wr_id: 0,
            opcode,
            sg_list,
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }
    }

    /// The receives and sends every input starts with.
    fn initial_work(&mut self) {
        let recvs: [(usize, Vec<Sge>); 22] = [
            (0, vec![self.sge(M_ALL, 0x400, 0x300)]),
            (
                0,
                vec![self.sge(M_LW, 0, 0x40), self.sge(M_LW, 0x100, 0x200)],
            ),
            (0, vec![self.sge(M_ALL, 0x500, 0x20)]),
            (0, vec![self.sge(M_NONE, 0, 0x100)]),
            (
                1,
                vec![self.sge(M_RW, 0, 0x200), self.sge(M_LW, 0x200, 0x200)],
            ),
            (1, vec![self.sge(M_ALL, 0x600, 0x100)]),
            (1, vec![self.sge(M_LW, 0x200, 0x100)]),
            (2, vec![self.sge(M_ALL, 0x680, 0x180)]),
            (2, vec![self.sge(M_LW, 0x300, 0x80)]),
            (2, vec![self.sge(M_RW, 0x100, 0x100)]),
            (3, vec![self.sge(M_LW, 0, 0x140)]),
            (3, vec![self.sge(M_ALL, 0x700, 0x40)]),
            (3, vec![self.sge(M_RO, 0, 0x100)]),
            (3, vec![self.sge(M_LW, 0x140, 0x2C0)]),
            (5, vec![self.sge(M_ALL, 0x7C0, 0x30)]),
            (NQP, vec![self.sge(M_LW, 0, 0x300)]),
            (NQP, vec![self.sge(M_ALL, 0, 0x40)]),
            (
                NQP,
                vec![self.sge(M_ALL, 0x80, 0x100), self.sge(M_RW, 0x180, 0x80)],
            ),
            (NQP, vec![self.sge(M_SHORT, 0x100, 0x200)]),
            (NQP, vec![self.sge(M_LW, 0x200, 0x200)]),
            (NQP, vec![self.sge(M_PD2, 0, 0x100)]),
            (NQP, vec![self.sge(M_ALL, 0x200, 0x200)]),
        ];
        for (i, sg) in recvs {
            self.post_recv(i, sg);
        }
        // QP 0 → QP 4: PSNs 0xFFFFF8..=0x000000.
        let sends = [
            (0, WrOpcode::Send, vec![self.sge(M_ALL, 0, 300)]),
            (
                0,
                WrOpcode::RdmaWrite(self.remote(M_ALL, 0x600)),
                vec![self.sge(M_ALL, 0x100, 100)],
            ),
            (
                0,
                WrOpcode::RdmaRead(self.remote(M_ALL, 0)),
                vec![self.sge(M_LW, 0, 600)],
            ),
            (
                0,
                WrOpcode::AtomicCmpAndSwp {
                    remote: self.remote(M_ATOM, 0),
                    // What the memory holds there, so that the swap happens.
                    compare: initial_u64(0, MRS[M_ATOM].off),
                    swap: 0x0123_4567_89AB_CDEF,
                },
                vec![self.sge(M_ALL, 0x7F0, 8)],
            ),
            (
                0,
                WrOpcode::AtomicFetchAndAdd {
                    remote: self.remote(M_ATOM, 8),
                    add: 5,
                },
                vec![self.sge(M_LW, 0x3F8, 8)],
            ),
            (0, WrOpcode::SendWithImm(0x1234), vec![]),
            (4, WrOpcode::Send, vec![self.sge(M_ALL, 0x300, 20)]),
            (2, WrOpcode::Send, vec![self.sge(M_ALL, 0, 300)]),
            (
                2,
                WrOpcode::RdmaWriteWithImm(self.remote(M_RW, 0), 0xABCD),
                vec![self.sge(M_ALL, 0x40, 50)],
            ),
            (
                5,
                WrOpcode::RdmaRead(self.remote(M_ALL, 0)),
                vec![self.sge(M_LW, 0x380, 64)],
            ),
        ];
        for (i, op, sg) in sends {
            self.post_send(i, Bench::send_wr(op, sg));
        }
        let unsignaled = SendWr {
            flags: SendFlags(0),
            ..Bench::send_wr(WrOpcode::Send, vec![self.sge(M_ALL, 0, 10)])
        };
        self.post_send(5, unsignaled);
        let ud = SendWr {
            ud: Some(UdDest {
                ah: self.ahs[0],
                remote_qpn: self.qps[UD_QP].qpn,
                remote_qkey: QKEY,
            }),
            ..Bench::send_wr(WrOpcode::Send, vec![self.sge(M_ALL, 0x200, 100)])
        };
        self.post_send(UD_QP, ud);
    }

    fn qp_index(&self, qpn: Qpn) -> Option<usize> {
        self.qps.iter().position(|q| q.qpn == qpn)
    }

    // ---- the invariants ---------------------------------------------------------------------

    fn snapshot(&mut self) {
        for (r, &(id, _, _)) in REGIONS.iter().enumerate() {
            let bytes = self.hca.memory().bytes(id).expect("region");
            self.shadow[r].copy_from_slice(bytes);
        }
    }

    /// Records which bytes the engine may write during the step that begins: those of the
    /// regions of the QPs' PD that grant LOCAL_WRITE and are registered now.
    fn begin_step(&mut self) {
        let mut now = [false; MRS.len()];
        for (n, &k) in now.iter_mut().zip(self.keys.iter()) {
            *n = self.hca.mr(k).is_some();
        }
        if self.registered == Some(now) {
            return;
        }
        self.registered = Some(now);
        for (r, &(_, _, len)) in REGIONS.iter().enumerate() {
            let mut writable = vec![false; len];
            for (m, spec) in MRS.iter().enumerate() {
                if now[m] && spec.region == r && !spec.other_pd && spec.access.contains(LW) {
                    let start = (spec.off as usize).min(len);
                    let end = ((spec.off + spec.len) as usize).min(len);
                    writable[start..end].fill(true);
                }
            }
            let g = &mut self.guarded[r];
            g.clear();
            let mut i = 0;
            while i < len {
                let run = writable[i..]
                    .iter()
                    .take_while(|&&w| w == writable[i])
                    .count();
                if !writable[i] {
                    g.push((i, i + run));
                }
                i += run;
            }
        }
    }

    /// Drains events and CQs and checks memory: what every step ends with.
    fn end_step(&mut self) {
        while let Some(ev) = self.hca.poll_event() {
            if let AsyncEvent::CqErr(cq) = ev {
                panic!("CQ {cq} overflowed although it is polled after every step");
            }
            if debug() {
                let name = format!("{ev:?}");
                self.seen
                    .insert(name[..name.find('(').unwrap_or(name.len())].to_string());
            }
        }
        while let Some(wc) = self.hca.poll_cq(self.scq) {
            if trace() {
                eprintln!(
                    "  send wc {} {:?} {:?} on {}",
                    wc.wr_id, wc.status, wc.opcode, wc.qp_num
                );
            }
            self.check_send_wc(&wc);
            if debug() {
                self.seen
                    .insert(format!("send:{:?}:{:?}", wc.opcode, wc.status));
            }
        }
        while let Some(wc) = self.hca.poll_cq(self.rcq) {
            if trace() {
                eprintln!(
                    "  recv wc {} {:?} {:?} on {}",
                    wc.wr_id, wc.status, wc.opcode, wc.qp_num
                );
            }
            self.check_recv_wc(&wc);
            if debug() {
                self.seen
                    .insert(format!("recv:{:?}:{:?}", wc.opcode, wc.status));
            }
        }
        for (r, &(id, base, _)) in REGIONS.iter().enumerate() {
            let bytes = self.hca.memory().bytes(id).expect("region");
            let shadow = &mut self.shadow[r];
            if bytes == shadow.as_slice() {
                continue;
            }
            for &(start, end) in &self.guarded[r] {
                if bytes[start..end] == shadow[start..end] {
                    continue;
                }
                let i = (start..end)
                    .find(|&i| bytes[i] != shadow[i])
                    .expect("the ranges differ");
                panic!(
                    "byte at 0x{:x} (region {}, offset 0x{i:x}) changed from 0x{:02x} to \
                     0x{:02x}, outside every region registered with LOCAL_WRITE in the QPs' PD",
                    base + i as u64,
                    id.0,
                    shadow[i],
                    bytes[i]
                );
            }
            shadow.copy_from_slice(bytes);
        }
        if let Err(v) = self.hca.check_invariants() {
            panic!("{v}");
        }
    }

    fn check_send_wc(&mut self, wc: &WorkCompletion) {
        let Some(i) = self.qp_index(wc.qp_num) else {
            panic!("send completion for unknown QP {}: {wc:?}", wc.qp_num);
        };
        let q = &mut self.qps[i].sends;
        let Some(pos) = q.iter().position(|&(id, _)| id == wc.wr_id) else {
            panic!(
                "send completion of wr_id {} on QP {i} ({}): never posted there, or completed twice: {wc:?}",
                wc.wr_id, wc.qp_num
            );
        };
        if let Some(&(id, _)) = q.iter().take(pos).find(|&&(_, signaled)| signaled) {
            panic!(
                "send completion of wr_id {} on QP {i} before the signaled wr_id {id} posted earlier: {wc:?}",
                wc.wr_id
            );
        }
        // The unsignaled WRs before it were retired without a completion.
        q.drain(..=pos);
    }

    fn check_recv_wc(&mut self, wc: &WorkCompletion) {
        let Some(i) = self.qp_index(wc.qp_num) else {
            panic!("receive completion for unknown QP {}: {wc:?}", wc.qp_num);
        };
        let cap = if SPECS[i].srq {
            let Some(pos) = self.srq_wrs.iter().position(|&(id, _)| id == wc.wr_id) else {
                panic!(
                    "receive completion of wr_id {} on QP {i}: never posted to its SRQ, or completed twice: {wc:?}",
                    wc.wr_id
                );
            };
            self.srq_wrs.remove(pos).1
        } else {
            let q = &mut self.qps[i].recvs;
            match q.iter().position(|&(id, _)| id == wc.wr_id) {
                Some(0) => q.pop_front().map_or(0, |(_, c)| c),
                Some(_) => panic!(
                    "receive completion of wr_id {} on QP {i} before wr_id {} posted earlier: {wc:?}",
                    wc.wr_id, q[0].0
                ),
                None => panic!(
                    "receive completion of wr_id {} on QP {i}: never posted there, or completed twice: {wc:?}",
                    wc.wr_id
                ),
            }
        };
        if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
            assert!(
                u64::from(wc.byte_len) <= cap,
                "receive of {} bytes into buffers of {cap}: {wc:?}",
                wc.byte_len
            );
        }
    }

    /// Checks one packet `poll_transmit` wrote, keeps what later responses need, and puts it on
    /// the wire.
    fn on_transmit(&mut self, tx: softib_engine::Transmit) {
        assert!(
            tx.len <= MAX_TRANSPORT_LEN,
            "packet of {} bytes from QP {}",
            tx.len,
            tx.src_qpn
        );
        let bytes = self.buf[..tx.len].to_vec();
        if trace() {
            eprintln!(
                "  {} tx from {}: {}",
                self.now,
                tx.src_qpn,
                describe(&bytes)
            );
        }
        let (t, payload) = parse_body(&bytes).unwrap_or_else(|e| {
            panic!(
                "QP {} sent a packet that does not parse: {e}\n{bytes:02x?}",
                tx.src_qpn
            )
        });
        if let Err(e) = t.check_headers() {
            panic!("QP {} sent {}: {e}", tx.src_qpn, t.bth.opcode);
        }
        let Some(i) = self.qp_index(tx.src_qpn) else {
            panic!("packet from unknown QP {}", tx.src_qpn);
        };
        let qp = self.hca.qp(tx.src_qpn).expect("live QP");
        let (state, ty) = (qp.state, qp.qp_type());
        assert_eq!(
            t.bth.opcode.transport(),
            transport_of(ty),
            "{ty} QP {} sent {}",
            tx.src_qpn,
            t.bth.opcode
        );
        let mtu = if ty == QpType::Ud {
            1024
        } else {
            self.qps[i].mtu as usize
        };
        assert!(
            payload.len() <= mtu,
            "QP {} sent {} bytes of payload at MTU {mtu}",
            tx.src_qpn,
            payload.len()
        );
        let info = t.bth.opcode.info().expect("check_headers passed");
        let rt = &mut self.qps[i];
        if state == QpState::Err {
            let nak = info.kind == Kind::Acknowledge
                && matches!(t.aeth.map(|a| a.syndrome), Some(Syndrome::Nak(_)));
            assert!(
                nak,
                "QP {i} ({}) in ERR sent {} (PSN {}), not a NAK",
                tx.src_qpn, t.bth.opcode, t.bth.psn
            );
            rt.err_sent += 1;
            assert!(
                rt.err_sent <= 1,
                "QP {i} ({}) in ERR sent a second NAK",
                tx.src_qpn
            );
        }
        let psn = t.bth.psn;
        match info.kind {
            k if k.is_request() => {
                let (npkts, dma_len) = match (k, t.reth) {
                    (Kind::RdmaReadRequest, Some(r)) => {
                        (r.dma_len.div_ceil(rt.mtu).clamp(1, 64), r.dma_len)
                    }
                    _ => (1, 0),
                };
                if rt.reqs.len() == REQS_KEPT {
                    rt.reqs.pop_front();
                }
                rt.reqs.push_back(ReqRec {
                    psn,
                    kind: k,
                    npkts,
                    dma_len,
                });
            }
            Kind::Acknowledge => match t.aeth.map(|a| a.syndrome) {
                Some(Syndrome::Ack { .. }) => rt.hint = psn.next(),
                Some(Syndrome::RnrNak { .. } | Syndrome::Nak(NakCode::PsnSequenceError)) => {
                    rt.hint = psn
                }
                _ => {}
            },
            Kind::RdmaReadResponse | Kind::AtomicAcknowledge
                if psn.next().diff(rt.hint) > 0
                    && matches!(info.position, Position::Last | Position::Only) =>
            {
                rt.hint = psn.next();
            }
            _ => {}
        }
        if self.wire.len() == WIRE_CAP {
            self.wire.pop_front();
        }
        self.wire.push_back(bytes);
    }

    /// Calls `poll_transmit` until it returns `None`.
    fn transmit(&mut self) {
        let mut n = 0;
        while let Some(tx) = self.hca.poll_transmit(self.now, &mut self.buf) {
            n += 1;
            assert!(
                n <= MAX_TX_PER_DRAIN,
                "poll_transmit still sending after {MAX_TX_PER_DRAIN} packets"
            );
            self.on_transmit(tx);
        }
    }

    fn deliver(&mut self, port: u8, meta: &RxMeta, body: &[u8]) {
        if trace() {
            eprintln!("  {} rx port {port}: {}", self.now, describe(body));
        }
        self.hca.handle_packet(self.now, port, meta, body);
    }

    // ---- choices ----------------------------------------------------------------------------

    /// A key: mostly one of the table's (the deregistered one included), sometimes 0 or any.
    fn pick_key(&self, u: &mut Unstructured<'_>) -> Result<(u32, Option<usize>)> {
        let b: u8 = u.arbitrary()?;
        Ok(match b {
            0..=0xEF => {
                let m = usize::from(b) % MRS.len();
                (self.keys[m], Some(m))
            }
            0xF0..=0xF7 => (0, None),
            _ => (u.arbitrary()?, None),
        })
    }

    /// An address for the region of `m`: mostly inside, sometimes at or past an edge, or any.
    fn pick_addr(&self, u: &mut Unstructured<'_>, m: Option<usize>) -> Result<u64> {
        let (base, len) = match m {
            Some(m) => {
                let (_, rbase, _) = REGIONS[MRS[m].region];
                (rbase + MRS[m].off, MRS[m].len)
            }
            None => (REGIONS[0].1, REGIONS[0].2 as u64),
        };
        let b: u8 = u.arbitrary()?;
        Ok(match b {
            0..=0xBF => base + u64::from(u.arbitrary::<u16>()?) % len,
            0xC0..=0xDF => (base + len).wrapping_sub(u64::from(b & 0x0F)),
            0xE0..=0xEF => base.wrapping_sub(u64::from(b & 0x0F)),
            _ => u.arbitrary()?,
        })
    }

    fn pick_qpn(&self, u: &mut Unstructured<'_>) -> Result<Qpn> {
        let b: u8 = u.arbitrary()?;
        Ok(match b {
            0..=0xEF => self.qps[usize::from(b) % NQP].qpn,
            0xF0..=0xF3 => Qpn::new(1),
            0xF4..=0xF7 => Qpn::MULTICAST,
            _ => Qpn::new(u.arbitrary()?),
        })
    }

    fn pick_sges(&self, u: &mut Unstructured<'_>) -> Result<Vec<Sge>> {
        let n = u.int_in_range(0..=2u8)?;
        let mut v = Vec::new();
        for _ in 0..n {
            let (lkey, m) = self.pick_key(u)?;
            let addr = self.pick_addr(u, m)?;
            let length = u32::from(u.arbitrary::<u16>()? % 0x700);
            v.push(Sge { addr, length, lkey });
        }
        Ok(v)
    }

    // ---- steps ------------------------------------------------------------------------------

    fn step(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let sel: u8 = u.arbitrary()?;
        match sel {
            0x00..=0x1F => self.step_raw(u),
            0x20..=0x5F => self.step_structured(u),
            0x60..=0x7F => self.step_wire(u),
            0x80..=0x8F => {
                self.transmit();
                Ok(())
            }
            0x90..=0x9F => self.step_pump(u),
            0xA0..=0xBF => self.step_time(u),
            0xC0..=0xDF => self.step_post_send(u),
            0xE0..=0xEF => self.step_post_recv(u),
            _ => self.step_modify(u),
        }
    }

    /// Raw bytes: a meta byte (bits 0-1 port: 0 and 1 → 1, 2 → 2, 3 → 0; bit 2 a GRH; bits
    /// 4-7 the SL), a little-endian length, the bytes.
    fn step_raw(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let meta_byte: u8 = u.arbitrary()?;
        let len = usize::from(u.arbitrary::<u16>()? % 0x1200);
        let bytes = u.bytes(len)?;
        let meta = RxMeta {
            slid: softib_wire::Lid(u16::from(meta_byte)),
            sl: meta_byte >> 4,
            grh: (meta_byte & 4 != 0).then_some([meta_byte; 40]),
            in_process: false,
        };
        let port = match meta_byte & 3 {
            0 | 1 => 1,
            2 => 2,
            _ => 0,
        };
        self.deliver(port, &meta, bytes);
        Ok(())
    }

    /// A packet built from fields, aimed at a live QP.
    fn step_structured(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let qi = u.choose_index(NQP)?;
        let ty = SPECS[qi].ty;
        let mode: u8 = u.arbitrary()?;
        let opcode = match mode & 3 {
            0..=2 => {
                let ops = ops_for(ty);
                Opcode(ops[usize::from(u.arbitrary::<u8>()?) % ops.len()])
            }
            _ if mode & 4 == 0 => {
                Opcode(KNOWN_OPS[usize::from(u.arbitrary::<u8>()?) % KNOWN_OPS.len()])
            }
            _ => Opcode(u.arbitrary()?),
        };
        let quirks: u8 = if mode & 0x80 != 0 { u.arbitrary()? } else { 0 };
        let info = opcode.info();
        let rt = &self.qps[qi];
        let mtu = if ty == QpType::Ud { 1024 } else { rt.mtu };

        // PSN: the expected one for requests; one the QP sent for responses.
        let mut read = None;
        let mut psn = rt.hint;
        if let Some(i) = info.filter(|i| !i.kind.is_request() && i.kind != Kind::Cnp) {
            if !rt.reqs.is_empty() {
                let r = rt.reqs[usize::from(u.arbitrary::<u8>()?) % rt.reqs.len()];
                let k = if i.kind == Kind::RdmaReadResponse && r.kind == Kind::RdmaReadRequest {
                    let k = u32::from(u.arbitrary::<u8>()?) % r.npkts;
                    read = Some((r, k));
                    k
                } else {
                    0
                };
                psn = r.psn.add(k);
            }
        }
        let d: u8 = u.arbitrary()?;
        psn = match d {
            0..=0xBF => psn,
            0xC0..=0xFE => psn.add(u32::from(d % 8)).sub(4),
            0xFF => Psn::new(u.arbitrary()?),
        };

        let flags: u8 = u.arbitrary()?;
        let pkey = match flags >> 6 {
            0 | 1 => rt.rx_pkey,
            2 => PKey(0x7FFF),
            _ => PKey(u.arbitrary()?),
        };
        let dest_qpn = if quirks & 4 != 0 {
            self.pick_qpn(u)?
        } else {
            rt.qpn
        };

        // Payload length: one MTU in FIRST/MIDDLE, what is left of a READ, or any.
        let has_payload = info.is_some_and(|i| i.has_payload) != (quirks & 0x10 != 0);
        let len = if has_payload {
            let lm: u8 = u.arbitrary()?;
            let pos = info.map_or(Position::Only, |i| i.position);
            match lm {
                0..=0x9F => match (read, pos) {
                    (Some((r, k)), _) => (r.dma_len.saturating_sub(k * mtu)).min(mtu) as usize,
                    (None, Position::First | Position::Middle) => mtu as usize,
                    _ => usize::from(lm) % (mtu as usize + 1),
                },
                0xA0..=0xDF => usize::from(u.arbitrary::<u16>()?) % (mtu as usize + 1),
                0xE0..=0xEF => 0,
                _ => usize::from(u.arbitrary::<u16>()? % 4200),
            }
        } else {
            0
        };

        // ETHs: the opcode's set, one of them toggled on a quirk.
        let h = info.map(|i| i.headers);
        let has = |set: softib_wire::HeaderSet| h.is_some_and(|h| h.contains(set));
        use softib_wire::HeaderSet as H;
        let mut want = [
            has(H::DETH),
            has(H::RETH),
            has(H::ATOMIC_ETH),
            has(H::AETH),
            has(H::ATOMIC_ACK_ETH),
            has(H::IMMDT),
            has(H::IETH),
            has(H::CNP),
        ];
        if quirks & 1 != 0 {
            want[usize::from(quirks >> 5)] ^= true;
        }
        let mut t = TransportRepr::new(BthRepr {
            opcode,
            solicited: flags & 1 != 0,
            mig_req: flags & 4 != 0,
            pad_count: 0,
            tver: u8::from(flags & 0x20 != 0),
            pkey,
            fecn: flags & 8 != 0,
            becn: flags & 0x10 != 0,
            dest_qpn,
            ack_req: flags & 2 == 0,
            psn,
        });
        if want[0] {
            let g: u8 = u.arbitrary()?;
            t.deth = Some(DethRepr {
                qkey: QKey(if g & 1 == 0 { QKEY } else { u.arbitrary()? }),
                src_qpn: self.pick_qpn(u)?,
            });
        }
        let mut read_len = None;
        if want[1] {
            let (key, m) = self.pick_key(u)?;
            let va = self.pick_addr(u, m)?;
            let dm: u8 = u.arbitrary()?;
            let is_read = info.is_some_and(|i| i.kind == Kind::RdmaReadRequest);
            let dma_len = match dm {
                0..=0xBF if is_read => u32::from(dm) * 8,
                0..=0xBF => match info.map_or(Position::Only, |i| i.position) {
                    Position::First => mtu * (2 + u32::from(dm % 3)),
                    _ => len as u32,
                },
                0xC0..=0xFE => u32::from(u.arbitrary::<u16>()? % 0x900),
                0xFF => u.arbitrary()?,
            };
            if is_read {
                read_len = Some(dma_len);
            }
            t.reth = Some(RethRepr {
                va,
                rkey: RKey(key),
                dma_len,
            });
        }
        if want[2] {
            let (key, m) = self.pick_key(u)?;
            let va = self.pick_addr(u, m)?;
            let g: u8 = u.arbitrary()?;
            t.atomic_eth = Some(AtomicEthRepr {
                va: if g & 1 == 0 { va & !7 } else { va },
                rkey: RKey(key),
                swap_add: u.arbitrary()?,
                compare: if g & 2 == 0 {
                    initial_u64(0, (va & !7).wrapping_sub(REGIONS[0].1))
                } else {
                    u.arbitrary()?
                },
            });
        }
        if want[3] {
            let s: u8 = u.arbitrary()?;
            let syndrome = match s {
                0..=0x9F => Syndrome::ACK_UNLIMITED_CREDIT,
                0xA0..=0xBF => Syndrome::RnrNak { timer: s & 0x1F },
                0xC0..=0xDF => Syndrome::Nak(NakCode::from(s % 5)),
                _ => Syndrome::from(u.arbitrary::<u8>()?),
            };
            let msn: u8 = u.arbitrary()?;
            t.aeth = Some(AethRepr {
                syndrome,
                msn: u32::from(msn),
            });
        }
        if want[4] {
            t.atomic_ack_eth = Some(AtomicAckEthRepr {
                orig: u.arbitrary()?,
            });
        }
        if want[5] {
            t.immdt = Some(ImmDtRepr {
                data: u.arbitrary()?,
            });
        }
        if want[6] {
            let (key, _) = self.pick_key(u)?;
            t.ieth = Some(IethRepr { rkey: RKey(key) });
        }
        if want[7] {
            t.cnp = Some(CnpRepr);
        }
        let pad = pad_for(len);
        t.bth.pad_count = if quirks & 2 != 0 { (pad + 1) & 3 } else { pad };
        let hlen = t.header_len();
        let mut body = vec![0u8; hlen + len + usize::from(pad)];
        t.emit(&mut body);
        let fill: u8 = if has_payload { u.arbitrary()? } else { 0 };
        body[hlen..hlen + len].copy_from_slice(&pattern(fill, len));
        if quirks & 8 != 0 {
            let cut = 1 + usize::from(u.arbitrary::<u8>()? % 8);
            body.truncate(body.len().saturating_sub(cut));
        }
        let meta = RxMeta {
            slid: softib_wire::Lid(7),
            sl: 0,
            grh: (quirks & 0x20 != 0).then_some([0x60; 40]),
            in_process: false,
        };
        let port = if quirks & 0x40 != 0 { 2 } else { 1 };
        self.deliver(port, &meta, &body);

        // Follow the responder's expected PSN.
        let rt = &mut self.qps[qi];
        if let Some(i) = info.filter(|i| i.kind.is_request()) {
            match ty {
                QpType::Uc if dest_qpn == rt.qpn => rt.hint = psn.next(),
                QpType::Rc if dest_qpn == rt.qpn && psn == rt.hint => {
                    rt.hint = match (i.kind, read_len) {
                        (Kind::RdmaReadRequest, Some(l)) => psn.add(l.div_ceil(mtu).max(1)),
                        _ => psn.next(),
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Delivers a packet from the wire: as sent, or with a bit flipped, another destination, a
    /// nearby PSN or the last word cut; sometimes leaving it on the wire to arrive again.
    fn step_wire(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        if self.wire.is_empty() {
            return Ok(());
        }
        let i = u.choose_index(self.wire.len())?;
        let m: u8 = u.arbitrary()?;
        let mut bytes = if m & 0xC0 == 0xC0 {
            self.wire[i].clone()
        } else {
            self.wire.remove(i).expect("index in range")
        };
        match m & 0x3F {
            0x30..=0x33 if !bytes.is_empty() => {
                let at = usize::from(u.arbitrary::<u16>()?) % bytes.len();
                bytes[at] ^= 1 << (m & 7);
            }
            0x34..=0x37 if bytes.len() >= 12 => {
                let q = self.pick_qpn(u)?.value().to_be_bytes();
                bytes[5..8].copy_from_slice(&q[1..]);
            }
            0x38..=0x3B if bytes.len() >= 12 => {
                let p = u32::from_be_bytes([0, bytes[9], bytes[10], bytes[11]]);
                let p = Psn::new(p)
                    .add(u32::from(m & 3))
                    .sub(2)
                    .value()
                    .to_be_bytes();
                bytes[9..12].copy_from_slice(&p[1..]);
            }
            0x3C..=0x3F => {
                let n = bytes.len().saturating_sub(4);
                bytes.truncate(n);
            }
            _ => {}
        }
        self.deliver(1, &RxMeta::default(), &bytes);
        Ok(())
    }

    /// Transmit, deliver everything on the wire, repeat.
    fn step_pump(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let rounds = 1 + u.arbitrary::<u8>()? % 8;
        for _ in 0..rounds {
            self.transmit();
            if self.wire.is_empty() {
                break;
            }
            let pkts: Vec<Vec<u8>> = self.wire.drain(..).collect();
            for p in pkts {
                self.deliver(1, &RxMeta::default(), &p);
            }
        }
        self.transmit();
        Ok(())
    }

    fn step_time(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let m: u8 = u.arbitrary()?;
        let next = self.hca.poll_timeout();
        let now = self.now;
        self.now = match m % 5 {
            0 => now + Duration::from_micros(u64::from(u.arbitrary::<u8>()?)),
            1 => now + Duration::from_micros(u64::from(u.arbitrary::<u16>()?)),
            2 => next.map_or(now, |t| t.max(now)),
            3 => next.map_or(now, |t| {
                Instant::from_micros(t.as_micros().saturating_sub(1)).max(now)
            }),
            _ => now + Duration::from_micros(u64::from(u.arbitrary::<u32>()? % 20_000_000)),
        };
        self.hca.handle_timeout(self.now);
        if let Some(t) = self.hca.poll_timeout() {
            assert!(
                t > self.now,
                "after handle_timeout({}) the next deadline is {t}: a due timer was left armed",
                self.now
            );
        }
        Ok(())
    }

    fn step_post_send(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let qi = u.choose_index(NQP)?;
        let sel: u8 = u.arbitrary()?;
        let flags = SendFlags(u32::from(u.arbitrary::<u8>()? & 0x0F));
        let mut remote = || -> Result<RemoteAddr> {
            let (key, m) = self.pick_key(u)?;
            Ok(RemoteAddr {
                addr: self.pick_addr(u, m)?,
                rkey: RKey(key),
            })
        };
        let opcode = match sel % 8 {
            0 => WrOpcode::Send,
            1 => WrOpcode::SendWithImm(0x5151_0000 | u32::from(sel)),
            2 => WrOpcode::SendWithInv(remote()?.rkey),
            3 => WrOpcode::RdmaWrite(remote()?),
            4 => WrOpcode::RdmaWriteWithImm(remote()?, 0x7777),
            5 => WrOpcode::RdmaRead(remote()?),
            6 => WrOpcode::AtomicCmpAndSwp {
                remote: remote()?,
                compare: 0,
                swap: 0xFFFF,
            },
            _ => WrOpcode::AtomicFetchAndAdd {
                remote: remote()?,
                add: 1,
            },
        };
        let (sg_list, inline_data) = if flags.contains(SendFlags::INLINE) {
            let n = usize::from(u.arbitrary::<u8>()? % 80);
            (Vec::new(), Some(pattern(sel, n)))
        } else if opcode.is_read_or_atomic()
            && sel & 0x40 == 0
            && !matches!(opcode, WrOpcode::RdmaRead(_))
        {
            let (lkey, m) = self.pick_key(u)?;
            let addr = self.pick_addr(u, m)? & !7;
            (
                vec![Sge {
                    addr,
                    length: 8,
                    lkey,
                }],
                None,
            )
        } else {
            (self.pick_sges(u)?, None)
        };
        let ud = if SPECS[qi].ty == QpType::Ud || sel & 0x80 != 0 {
            let g: u8 = u.arbitrary()?;
            Some(UdDest {
                ah: self.ahs[usize::from(g) % 3],
                remote_qpn: self.pick_qpn(u)?,
                remote_qkey: match g >> 6 {
                    0 | 1 => QKEY,
                    2 => 0x8000_0000,
                    _ => u.arbitrary()?,
                },
            })
        } else {
            None
        };
        self.post_send(
            qi,
            SendWr {
                wr_id: 0,
                opcode,
                sg_list,
                flags,
                inline_data,
                ud,
            },
        );
        Ok(())
    }

    fn step_post_recv(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let i = u.choose_index(NQP + 1)?;
        let sg = self.pick_sges(u)?;
        self.post_recv(i, sg);
        Ok(())
    }

    /// ERR, SQD, RTS (from SQD or SQE), or RESET and up again.
    fn step_modify(&mut self, u: &mut Unstructured<'_>) -> Result<()> {
        let qi = u.choose_index(NQP)?;
        let a: u8 = u.arbitrary()?;
        let qpn = self.qps[qi].qpn;
        let to = match a % 4 {
            0 => QpState::Err,
            1 => QpState::Sqd,
            2 => QpState::Rts,
            _ => QpState::Reset,
        };
        let attr = QpAttr {
            qp_state: to,
            ..QpAttr::default()
        };
        if self.hca.modify_qp(qpn, &attr, AttrMask::STATE).is_ok() && to == QpState::Reset {
            // RESET discards every WR without a completion.
            let rt = &mut self.qps[qi];
            rt.sends.clear();
            rt.recvs.clear();
            rt.reqs.clear();
            rt.err_sent = 0;
            rt.hint = Psn::new(SPECS[qi].rq_psn);
            self.bring_up(qi);
        }
        Ok(())
    }

    fn summary(&self, steps: usize) {
        let drops: Vec<String> = self
            .hca
            .drops()
            .nonzero()
            .map(|(r, n)| format!("{}={n}", r.name()))
            .collect();
        let states: Vec<String> = self
            .qps
            .iter()
            .map(|q| {
                self.hca
                    .qp(q.qpn)
                    .map_or("?".into(), |qp| format!("{}", qp.state))
            })
            .collect();
        let c = self.hca.counters(1).expect("port 1");
        let qpns: Vec<String> = self.qps.iter().map(|q| q.qpn.to_string()).collect();
        let keys: Vec<String> = self.keys.iter().map(|k| format!("0x{k:x}")).collect();
        eprintln!(
            "engine_rx: QPNs [{}] keys [{}]\n  {steps} steps, rx {} tx {}, states [{}], drops [{}], \
             wire {}\n  seen [{}]",
            qpns.join(" "),
            keys.join(" "),
            c.rcv_pkts,
            c.xmit_pkts,
            states.join(" "),
            drops.join(" "),
            self.wire.len(),
            self.seen.iter().cloned().collect::<Vec<_>>().join(" ")
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bench::new();
    let mut u = Unstructured::new(data);
    let mut steps = 0;
    while steps < MAX_STEPS && !u.is_empty() {
        steps += 1;
        b.begin_step();
        let r = b.step(&mut u);
        b.end_step();
        if r.is_err() {
            break;
        }
    }
    b.begin_step();
    b.transmit();
    b.end_step();
    if debug() {
        b.summary(steps);
    }
});
