//! `cargo bench -p softib-engine`: the RC message rate of two engines joined in memory, with no
//! faults: 8-byte SENDs (each receive reposted), 4 KiB RDMA WRITEs and 64 KiB RDMA WRITEs, and
//! 64 KiB RDMA READs.
//!
//! No benchmark framework. Each row keeps `DEPTH` WRs outstanding (every WR signaled, as
//! perftest's bandwidth tests with `--cq-mod 1`), warms up, then runs for `MEASURE` and prints
//! messages/s, payload MB/s (10^6 bytes) and packets/s (requests and acknowledgements both).
//! Packets go from one engine's `poll_transmit` straight into the other's `handle_packet`
//! through one reused buffer, so the numbers are the engines' cost alone; path MTU 4096.
//!
//! The engine is meant not to allocate per packet on its steady path. A counting global
//! allocator measures that: the last columns give allocations per message made inside engine
//! calls, and those the harness makes building WRs (the verbs API takes an owned `Vec<Sge>`
//! per WR), and the breakdown below the table says which engine call allocated.

// The counting allocator is the only unsafe code: `GlobalAlloc` is an unsafe trait, and this
// file is a benchmark binary, outside the engine's `forbid(unsafe_code)`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::error::Error;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use softib_engine::qp::requester::MAX_TRANSPORT_LEN;
use softib_engine::verbs::{
    AccessFlags, QpState, QpType, RecvWr, RemoteAddr, SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};
use softib_engine::{
    AddressVector, AttrMask, CqHandle, GlobalRoute, Hca, HcaConfig, Instant, QpAttr, QpCap,
    QpInitAttr, RegionId, RxMeta, VecMemory,
};
use softib_wire::{Gid, Mtu, Psn, Qpn, RKey};

/// How long each row warms up before it is timed.
const WARM_UP: StdDuration = StdDuration::from_millis(100);
/// How long each row is timed.
const MEASURE: StdDuration = StdDuration::from_millis(500);
/// WRs kept outstanding (perftest's default tx depth is 128).
const DEPTH: usize = 128;
/// Each side's registered buffer.
const BUF: u64 = 0x10_0000;
const BUF_LEN: usize = 4 << 20;

/// Counts every allocation (and reallocation) the process makes.
struct CountingAlloc;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, which upholds the
// `GlobalAlloc` contract; the only addition is a relaxed atomic increment, which neither
// allocates nor unwinds.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's guarantees for `layout` are passed on as they are.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` through this allocator with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

type Result<T> = std::result::Result<T, Box<dyn Error>>;

/// Which engine call (or the harness) made allocations.
#[derive(Debug, Default, Clone, Copy)]
struct AllocSites {
    post_send: u64,
    post_recv: u64,
    poll_transmit: u64,
    handle_packet: u64,
    handle_timeout: u64,
    poll_cq: u64,
    /// Building WRs (their `Vec<Sge>`), outside the engine.
    harness: u64,
}

impl AllocSites {
    fn engine(&self) -> u64 {
        self.post_send
            + self.post_recv
            + self.poll_transmit
            + self.handle_packet
            + self.handle_timeout
            + self.poll_cq
    }
}

/// Runs `f`, adding the allocations it made to `counter`.
fn counted<T>(counter: &mut u64, f: impl FnOnce() -> T) -> T {
    let before = allocs();
    let out = f();
    *counter += allocs() - before;
    out
}

/// One engine with its PD, CQ, buffer and RC QP.
struct Side {
    hca: Hca<VecMemory>,
    cq: CqHandle,
    key: u32,
    qpn: Qpn,
}

impl Side {
    fn new(seed: u64) -> Result<Side> {
        let mut cfg = HcaConfig::with_seed(seed);
        cfg.ports[0].gids = vec![Gid::from_ipv4([127, 0, 0, seed as u8])];
        let mut mem = VecMemory::new();
        mem.add(RegionId(1), BUF, BUF_LEN);
        let mut hca = Hca::new(cfg, mem);
        let pd = hca.alloc_pd()?;
        let cq = hca.create_cq(4 * DEPTH as u32)?;
        let all = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ);
        let key = hca.reg_mr(pd, BUF, BUF_LEN as u64, all, RegionId(1))?;
        let qpn = hca.create_qp(QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 2 * DEPTH as u32,
                max_recv_wr: 2 * DEPTH as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        })?;
        Ok(Side { hca, cq, key, qpn })
    }

    /// RESET -> INIT -> RTR -> RTS towards `remote`.
    fn connect(&mut self, remote: Qpn, rq_psn: Psn, sq_psn: Psn) -> Result<()> {
        let mut attr = QpAttr {
            qp_state: QpState::Init,
            qp_access_flags: AccessFlags::LOCAL_WRITE
                .with(AccessFlags::REMOTE_WRITE)
                .with(AccessFlags::REMOTE_READ),
            port_num: 1,
            path_mtu: Mtu::Mtu4096,
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
        let qpn = self.qpn;
        self.hca.modify_qp(
            qpn,
            &attr,
            AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        )?;
        attr.qp_state = QpState::Rtr;
        self.hca.modify_qp(
            qpn,
            &attr,
            AttrMask::STATE
                .with(AttrMask::AV)
                .with(AttrMask::PATH_MTU)
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
        )?;
        attr.qp_state = QpState::Rts;
        self.hca.modify_qp(
            qpn,
            &attr,
            AttrMask::STATE
                .with(AttrMask::SQ_PSN)
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
        )?;
        Ok(())
    }
}

/// What a row sends.
#[derive(Debug, Clone, Copy)]
enum Workload {
    /// SENDs of this many bytes; B reposts each receive.
    Send(u32),
    /// RDMA WRITEs of this many bytes.
    Write(u32),
    /// RDMA READs of this many bytes.
    Read(u32),
}

impl Workload {
    fn len(self) -> u32 {
        match self {
            Workload::Send(n) | Workload::Write(n) | Workload::Read(n) => n,
        }
    }
}

/// Two connected engines and the state of a run.
struct Bench {
    a: Side,
    b: Side,
    now: Instant,
    buf: Vec<u8>,
    meta: RxMeta,
    workload: Workload,
    /// The slot the next WR uses (data rotates through the buffer).
    next_slot: u64,
    msgs: u64,
    pkts: u64,
    sites: AllocSites,
}

impl Bench {
    fn new(workload: Workload) -> Result<Bench> {
        let mut a = Side::new(1)?;
        let mut b = Side::new(2)?;
        let (pa, pb) = (Psn::new(0xFF_FF00), Psn::new(100));
        a.connect(b.qpn, pb, pa)?;
        b.connect(a.qpn, pa, pb)?;
        let mut bench = Bench {
            a,
            b,
            now: Instant::from_micros(1_000_000),
            buf: vec![0; MAX_TRANSPORT_LEN],
            meta: RxMeta::default(),
            workload,
            next_slot: 0,
            msgs: 0,
            pkts: 0,
            sites: AllocSites::default(),
        };
        if let Workload::Send(len) = workload {
            for i in 0..2 * DEPTH as u64 {
                bench.post_recv(i, len)?;
            }
        }
        for _ in 0..DEPTH {
            bench.post_send()?;
        }
        Ok(bench)
    }

    fn slot_addr(&mut self) -> u64 {
        let len = u64::from(self.workload.len()).max(64);
        let slots = BUF_LEN as u64 / len;
        let addr = BUF + (self.next_slot % slots) * len;
        self.next_slot += 1;
        addr
    }

    fn post_send(&mut self) -> Result<()> {
        let addr = self.slot_addr();
        let len = self.workload.len();
        let lkey = self.a.key;
        let opcode = match self.workload {
            Workload::Send(_) => WrOpcode::Send,
            Workload::Write(_) => WrOpcode::RdmaWrite(RemoteAddr {
                addr,
                rkey: RKey(self.b.key),
            }),
            Workload::Read(_) => WrOpcode::RdmaRead(RemoteAddr {
                addr,
                rkey: RKey(self.b.key),
            }),
        };
        let wr = counted(&mut self.sites.harness, || SendWr {
            wr_id: addr,
            opcode,
            sg_list: vec![Sge {
                addr,
                length: len,
                lkey,
            }],
            flags: SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        });
        let (hca, qpn) = (&mut self.a.hca, self.a.qpn);
        counted(&mut self.sites.post_send, || hca.post_send(qpn, wr))?;
        Ok(())
    }

    fn post_recv(&mut self, wr_id: u64, len: u32) -> Result<()> {
        let addr = BUF + (wr_id % (2 * DEPTH as u64)) * u64::from(len.max(64));
        let lkey = self.b.key;
        let wr = counted(&mut self.sites.harness, || RecvWr {
            wr_id,
            sg_list: vec![Sge {
                addr,
                length: len,
                lkey,
            }],
        });
        let (hca, qpn) = (&mut self.b.hca, self.b.qpn);
        counted(&mut self.sites.post_recv, || hca.post_recv(qpn, wr))?;
        Ok(())
    }

    /// Moves packets both ways until neither side has one to send, then retires completions
    /// and tops the send (and receive) queues up again.
    fn step(&mut self) -> Result<()> {
        let now = self.now;
        loop {
            let mut moved = 0;
            for a_to_b in [true, false] {
                let (from, to) = if a_to_b {
                    (&mut self.a.hca, &mut self.b.hca)
                } else {
                    (&mut self.b.hca, &mut self.a.hca)
                };
                loop {
                    let buf = &mut self.buf;
                    let Some(tx) = counted(&mut self.sites.poll_transmit, || {
                        from.poll_transmit(now, buf)
                    }) else {
                        break;
                    };
                    let bytes = &self.buf[..tx.len];
                    let meta = &self.meta;
                    counted(&mut self.sites.handle_packet, || {
                        to.handle_packet(now, 1, meta, black_box(bytes))
                    });
                    moved += 1;
                }
            }
            self.pkts += moved;
            if moved == 0 {
                break;
            }
        }
        let (a, b) = (&mut self.a.hca, &mut self.b.hca);
        counted(&mut self.sites.handle_timeout, || {
            a.handle_timeout(now);
            b.handle_timeout(now);
        });
        loop {
            let (hca, cq) = (&mut self.b.hca, self.b.cq);
            let Some(wc) = counted(&mut self.sites.poll_cq, || hca.poll_cq(cq)) else {
                break;
            };
            if wc.status != WcStatus::Success {
                return Err(format!("receive failed: {}", wc.status).into());
            }
            self.post_recv(wc.wr_id, self.workload.len())?;
        }
        loop {
            let (hca, cq) = (&mut self.a.hca, self.a.cq);
            let Some(wc) = counted(&mut self.sites.poll_cq, || hca.poll_cq(cq)) else {
                break;
            };
            if wc.status != WcStatus::Success {
                return Err(format!("send failed: {}", wc.status).into());
            }
            self.msgs += 1;
            self.post_send()?;
        }
        // Virtual time moves on a little each round, as it would between driver wakeups.
        self.now += softib_engine::Duration::from_micros(1);
        Ok(())
    }

    /// Runs for `how_long`; returns (messages, packets, allocation sites) of that span.
    fn run(&mut self, how_long: StdDuration) -> Result<(u64, u64, AllocSites, StdDuration)> {
        let (msgs, pkts) = (self.msgs, self.pkts);
        self.sites = AllocSites::default();
        let start = StdInstant::now();
        let mut elapsed = StdDuration::ZERO;
        while elapsed < how_long {
            for _ in 0..64 {
                self.step()?;
            }
            elapsed = start.elapsed();
        }
        Ok((self.msgs - msgs, self.pkts - pkts, self.sites, elapsed))
    }
}

fn main() -> Result<()> {
    println!(
        "softib-engine RC message rate: two engines in memory, path MTU 4096, {DEPTH} WRs \
         outstanding, every WR signaled; {} ms per row after {} ms of warm-up\n",
        MEASURE.as_millis(),
        WARM_UP.as_millis()
    );
    println!(
        "{:<18} {:>12} {:>10} {:>12} {:>9} {:>12} {:>12}",
        "workload", "msgs/s", "MB/s", "pkts/s", "pkts/msg", "allocs/msg", "harness/msg"
    );
    let rows = [
        ("SEND 8 B", Workload::Send(8)),
        ("RDMA WRITE 4 KiB", Workload::Write(4096)),
        ("RDMA WRITE 64 KiB", Workload::Write(64 * 1024)),
        // Not asked for, but the READ path is where the completer could allocate.
        ("RDMA READ 64 KiB", Workload::Read(64 * 1024)),
    ];
    let mut breakdown = Vec::new();
    for (name, workload) in rows {
        let mut bench = Bench::new(workload)?;
        bench.run(WARM_UP)?;
        let (msgs, pkts, sites, elapsed) = bench.run(MEASURE)?;
        let secs = elapsed.as_secs_f64();
        let per_msg = |n: u64| n as f64 / msgs.max(1) as f64;
        println!(
            "{:<18} {:>12.0} {:>10.1} {:>12.0} {:>9.2} {:>12.3} {:>12.3}",
            name,
            msgs as f64 / secs,
            msgs as f64 * f64::from(workload.len()) / secs / 1e6,
            pkts as f64 / secs,
            per_msg(pkts),
            per_msg(sites.engine()),
            per_msg(sites.harness),
        );
        breakdown.push((name, msgs, sites));
    }
    println!("\nengine allocations per message, by call:");
    println!(
        "{:<18} {:>10} {:>10} {:>14} {:>14} {:>15} {:>8}",
        "workload",
        "post_send",
        "post_recv",
        "poll_transmit",
        "handle_packet",
        "handle_timeout",
        "poll_cq"
    );
    for (name, msgs, s) in breakdown {
        let m = msgs.max(1) as f64;
        println!(
            "{:<18} {:>10.3} {:>10.3} {:>14.3} {:>14.3} {:>15.3} {:>8.3}",
            name,
            s.post_send as f64 / m,
            s.post_recv as f64 / m,
            s.poll_transmit as f64 / m,
            s.handle_packet as f64 / m,
            s.handle_timeout as f64 / m,
            s.poll_cq as f64 / m,
        );
    }
    Ok(())
}
