//! A client asking for absurd sizes and for more than its share (issue 8, "registers absurd
//! sizes", "too many QPs/MRs"): each request gets a clear error, the daemon keeps serving,
//! its memory stays bounded, and another client still gets what it needs.
//!
//! One test in its own binary: it reads this process's resident memory (the daemon runs on a
//! thread of it), which other tests running beside it would disturb.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, AddressVector, Context, ErrorKind, QpCap, QpInitAttr, QpType};
use softib_proto::{self as proto, Request, Response};

/// This process's memory in bytes: `VmRSS` (resident) or `VmSize` (reserved).
fn memory(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// A client speaking the control protocol itself, so that it can ask as fast as the daemon
/// answers and hold objects without the library's rings and descriptors.
struct Raw(UnixStream);

impl Raw {
    fn connect(dir: &Path) -> Raw {
        let s = UnixStream::connect(dir.join(proto::SOCKET_NAME)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut raw = Raw(s);
        let r = raw.ask(&Request::Hello {
            version: proto::VERSION,
            pid: std::process::id(),
            program: "greedy".into(),
        });
        assert!(matches!(r, Response::Hello { .. }), "{r:?}");
        raw
    }

    fn ask(&mut self, req: &Request) -> Response {
        proto::send(&self.0, req, &[]).unwrap();
        proto::decode(&proto::recv_blocking(&mut self.0).unwrap()).unwrap()
    }

    /// Asks `make` until the daemon refuses; returns the handles it granted and the refusal.
    fn until_refused(
        &mut self,
        max: usize,
        make: impl Fn() -> Request,
    ) -> (Vec<u64>, ErrorKind, String) {
        let mut granted = Vec::new();
        for _ in 0..max {
            match self.ask(&make()) {
                Response::Error { kind, message } => return (granted, kind, message),
                Response::Handle(h) => granted.push(h),
                r => panic!("{r:?}"),
            }
        }
        panic!("granted {max} and never refused");
    }
}

fn refused(r: softib::Result<impl std::fmt::Debug>, needle: &str) {
    match r {
        Err(e) => {
            let e = e.to_string();
            assert!(e.contains(needle), "{e:?} does not say {needle:?}");
        }
        Ok(v) => panic!("granted: {v:?} (expected a refusal saying {needle:?})"),
    }
}

#[test]
fn absurd_sizes_and_more_than_a_share_are_refused_clearly_and_cost_the_daemon_nothing() {
    let hca = EmbeddedDaemon::start().unwrap();
    let port = 65100 + (std::process::id() % 400) as u16;
    hca.add_loopback_device("rxe0", "127.0.0.2", port).unwrap();
    let mut good = Context::open_at(hca.dir()).unwrap();
    let max_cqe = good.devices().unwrap()[0].attr.max_cqe;

    // Absurd sizes through the library: each refused, saying what is wrong.
    let pd = good.alloc_pd(0).unwrap();
    refused(good.create_cq(0, 0), "cqe must be 1..=max_cqe");
    refused(good.create_cq(0, u32::MAX), "cqe must be 1..=max_cqe");
    let buf = good.alloc_buffer(4096).unwrap();
    let rw = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE);
    refused(
        good.reg_mr(0, pd, &buf, 0, 1 << 40, rw),
        "is not inside buffer",
    );
    refused(
        good.reg_mr(0, pd, &buf, 4000, 200, rw),
        "is not inside buffer",
    );
    refused(good.reg_mr_process(0, pd, 0x1000, 0, rw), "is not a region");
    refused(
        good.reg_mr_process(0, pd, u64::MAX - 10, 100, rw),
        "is not a region",
    );
    refused(good.reg_mr_process(0, pd, 0x1000, 1 << 40, rw), "");
    refused(good.alloc_buffer(1 << 50), "");
    let cq = good.create_cq(0, max_cqe).unwrap();
    let init = |cap: QpCap| QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: false,
    };
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    for (bad, why) in [
        (
            QpCap {
                max_send_wr: u32::MAX,
                ..cap
            },
            "max_send_wr/max_recv_wr beyond max_qp_wr",
        ),
        (
            QpCap {
                max_recv_wr: u32::MAX,
                ..cap
            },
            "max_send_wr/max_recv_wr beyond max_qp_wr",
        ),
        (
            QpCap {
                max_send_sge: u32::MAX,
                ..cap
            },
            "beyond max_sge",
        ),
        (
            QpCap {
                max_inline_data: u32::MAX,
                ..cap
            },
            "max_inline_data",
        ),
    ] {
        refused(good.create_qp(0, init(bad)), why);
    }
    refused(
        good.create_srq(0, pd, u32::MAX, 1),
        "beyond the device's limits",
    );
    refused(good.create_srq(0, pd, 0, 1), "beyond the device's limits");
    // The largest legal depths are granted and cost nothing until used.
    let qp = good.create_qp(
        0,
        init(QpCap {
            max_send_wr: 1 << 14,
            max_recv_wr: 1 << 14,
            ..cap
        }),
    );
    assert!(qp.is_ok(), "{qp:?}");

    // A greedy client takes all it may: CQs of the largest depth, PDs, address handles.
    let before = (memory("VmRSS"), memory("VmSize"));
    let t0 = Instant::now();
    let mut greedy = Raw::connect(hca.dir());
    let (cqs, kind, why) = greedy.until_refused(1 << 16, || Request::CreateCq {
        dev: 0,
        cqe: max_cqe,
    });
    assert_eq!((kind, cqs.len()), (ErrorKind::Exhausted, 4096), "{why}");
    assert!(why.contains("a client may hold at most 4096 CQs"), "{why}");
    let grown = (
        memory("VmRSS").saturating_sub(before.0),
        memory("VmSize").saturating_sub(before.1),
    );
    let (pds, kind, why) = greedy.until_refused(1 << 17, || Request::AllocPd { dev: 0 });
    assert_eq!((kind, pds.len()), (ErrorKind::Exhausted, 16384), "{why}");
    assert!(why.contains("at most 16384 PDs"), "{why}");
    let av = AddressVector {
        port_num: 1,
        ..AddressVector::default()
    };
    let pd = pds[0] as u32;
    let (ahs, kind, why) = greedy.until_refused(1 << 16, || Request::CreateAh { dev: 0, pd, av });
    assert_eq!((kind, ahs.len()), (ErrorKind::Exhausted, 8192), "{why}");
    assert!(why.contains("at most 8192 AHs"), "{why}");
    println!(
        "a greedy client took 4096 CQs of the largest depth, 16384 PDs and 8192 AHs in {:.2} s; \
         the CQs grew this process (daemon and all) by {} KiB resident, {} KiB reserved",
        t0.elapsed().as_secs_f64(),
        grown.0 / 1024,
        grown.1 / 1024
    );
    // Were each CQ to reserve 4096 completions (~230 KiB), 4096 of them would be almost a
    // gigabyte of address space, which a daemon under strict overcommit could not get.
    assert!(
        grown.0 < 64 << 20,
        "4096 idle CQs took {} MiB",
        grown.0 >> 20
    );
    assert!(
        grown.1 < 256 << 20,
        "4096 idle CQs reserved {} MiB",
        grown.1 >> 20
    );

    // Its share left room for everyone else.
    let pd = good.alloc_pd(0).unwrap();
    let cq = good.create_cq(0, 64).unwrap();
    good.create_ah(0, pd, av).unwrap();
    good.destroy_cq(0, cq).unwrap();
    // It goes away: everything it held is reclaimed.
    drop(greedy);
    let t = Instant::now();
    loop {
        let clients = good.resources().unwrap();
        if clients.iter().all(|c| c.program != "greedy") {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{clients:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut again = Raw::connect(hca.dir());
    let (cqs, _, _) = again.until_refused(1 << 16, || Request::CreateCq { dev: 0, cqe: 1 });
    assert_eq!(cqs.len(), 4096, "the greedy client's CQs were freed");
}
