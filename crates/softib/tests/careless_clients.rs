//! Careless clients (issue 23, item 4): a thousand that connect, make objects and vanish —
//! closing, or dropping their connection in the middle of a request — while another client's
//! transfer runs. The transfer ends with every byte right, the daemon reclaims everything the
//! vanished clients made, and it still serves a new client.
//!
//! On the daemon's data path: a client there that unmaps memory under a region of its own
//! is answered with an error (the daemon's cross-memory attach fails); on the process path
//! the program's own engine touches that memory, and it faults as any library given the
//! pointer would (docs/dev/process-datapath.md).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use softib::embedded::EmbeddedDaemon;
use softib::{Context, Device, QpType, WcStatus};
use softib_proto::SOCKET_NAME;

mod common;
use common::{all, connect_regions, open_pair};

/// Every test of this binary runs on the daemon's data path (the variable is read when a
/// context opens; all tests set the same value).
fn daemon_path() {
    std::env::set_var("SOFTIB_DATAPATH", "daemon");
}

#[test]
fn a_thousand_clients_that_vanish_leave_nothing_behind_and_nobody_waiting() {
    daemon_path();
    let hca = EmbeddedDaemon::start().unwrap();
    hca.add_loopback_pair().unwrap();
    let dir = hca.dir().to_path_buf();

    // The good client: 64 KiB WRITEs, one at a time, checked, until the churn is over.
    let stop = Arc::new(AtomicBool::new(false));
    let good = {
        let (dir, stop) = (dir.clone(), stop.clone());
        std::thread::spawn(move || {
            let (a, b) = open_pair(&dir);
            let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
            let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
            const LEN: usize = 64 << 10;
            let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
            let (mr_a, mr_b) = (
                pd_a.register(&buf_a, all()).unwrap(),
                pd_b.register(&buf_b, all()).unwrap(),
            );
            let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
            let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
            let (_, eb) = connect_regions(&qp_a, &mr_a, &qp_b, &mr_b);
            let mut rounds = 0u32;
            while !stop.load(Ordering::Relaxed) || rounds == 0 {
                let data: Vec<u8> = (0..LEN as u32)
                    .map(|i| (i.wrapping_mul(131).wrapping_add(rounds)) as u8)
                    .collect();
                buf_a.write(0, &data);
                qp_a.write(&mr_a, 0, LEN, eb.addr, eb.rkey, u64::from(rounds))
                    .unwrap();
                let wcs = cq_a.poll_wait(1, Duration::from_secs(20)).unwrap();
                assert_eq!(wcs.len(), 1, "round {rounds}: no completion within 20 s");
                assert_eq!(wcs[0].status, WcStatus::Success, "round {rounds}");
                let mut got = vec![0u8; LEN];
                assert!(buf_b.read(0, &mut got));
                assert!(got == data, "round {rounds}: bytes differ");
                rounds += 1;
            }
            rounds
        })
    };

    for i in 0..1000u32 {
        match i % 4 {
            // Makes objects and closes.
            0 | 1 => {
                let d =
                    Device::open_at(&dir, Some(if i % 2 == 0 { "rxe0" } else { "rxe1" })).unwrap();
                let pd = d.alloc_pd().unwrap();
                let cq = d.create_cq(8).unwrap();
                let buf = d.alloc_buffer(4096).unwrap();
                let _mr = pd.register(&buf, all()).unwrap();
                let _qp = pd.create_qp(QpType::Rc, &cq, &cq, 4).unwrap();
            }
            // Says hello through the library, then its connection just drops.
            2 => drop(Context::open_at(&dir).unwrap()),
            // Vanishes in the middle of a request: half a length prefix, or a frame that
            // promises more bytes than it sends.
            _ => {
                let mut s = UnixStream::connect(dir.join(SOCKET_NAME)).unwrap();
                let partial: &[u8] = if i % 8 == 3 {
                    &[0x10, 0x00]
                } else {
                    &[0x40, 0x00, 0x00, 0x00, 0x01, 0x02]
                };
                s.write_all(partial).unwrap();
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = good.join().unwrap();
    eprintln!("{rounds} checked 64 KiB WRITEs beside 1000 vanishing clients");

    // Everything the vanished clients made is gone: only the newcomer is left, holding
    // nothing yet (the daemon reclaims a closed connection on its next turn).
    let mut c = Context::open_at(&dir).unwrap();
    let mut left = Vec::new();
    for _ in 0..100 {
        left = c.resources().unwrap();
        if left.len() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(
        left[0]
            .per_device
            .iter()
            .all(|(_, n)| n.iter().all(|&k| k == 0))
            && left[0].buffers == 0,
        "{left:?}"
    );
    // And it serves the newcomer.
    let d = Device::open_at(&dir, Some("rxe0")).unwrap();
    d.alloc_pd().unwrap();
}

/// A client registers its own memory (reached by cross-memory attach) and then unmaps it:
/// the operations that touch it fail with the spec's statuses — the peer's WRITE into it with
/// a remote operational error, its own SEND from it with a local protection error — and the
/// daemon goes on serving both.
#[test]
#[allow(unsafe_code)]
fn memory_unmapped_under_a_region_fails_the_operation_not_the_daemon() {
    use rustix::mm::{mmap_anonymous, munmap, MapFlags, ProtFlags};
    daemon_path();
    const LEN: usize = 64 << 10;
    let (_hca, a, b) = common::loopback_pair();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    // SAFETY: a fresh anonymous private mapping; nothing else refers to it.
    let p = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            LEN,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE,
        )
    }
    .unwrap();
    // SAFETY: the mapping is LEN bytes, readable and writable, and this slice is its only
    // reference; it lives only for the registration call (the region keeps the address,
    // not the reference).
    let victim = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), LEN) };
    let mr_b = pd_b.register_slice(victim, all()).unwrap();
    let buf_a = a.alloc_buffer(LEN).unwrap();
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    let (ea, eb) = connect_regions(&qp_a, &mr_a, &qp_b, &mr_b);
    // Mapped: a WRITE into it works.
    qp_a.write(&mr_a, 0, 4096, eb.addr, eb.rkey, 1).unwrap();
    let wcs = cq_a.poll_wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(wcs[0].status, WcStatus::Success);
    // The memory goes away under the region. Not munmap: the range could then be mapped
    // again at once by anything else in this process (the embedded daemon's threads, the
    // other test), and the "unmapped" region would read someone else's memory. An
    // inaccessible mapping in its place fails every access the same way (EFAULT) and keeps
    // the range reserved.
    // SAFETY: no reference into the mapping is alive (the slice was consumed above); what
    // still names it is the region's address, which is the point of the test. MAP_FIXED
    // replaces exactly the LEN bytes this test mapped.
    unsafe {
        mmap_anonymous(
            p,
            LEN,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::FIXED,
        )
    }
    .unwrap();
    qp_a.write(&mr_a, 0, 4096, eb.addr, eb.rkey, 2).unwrap();
    let wcs = cq_a.poll_wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(
        wcs.len(),
        1,
        "no completion for the WRITE into unmapped memory"
    );
    // The key, access and bounds were right; the memory itself failed: the responder NAKs
    // with a Remote Operational Error (not an access error).
    assert_eq!(wcs[0].status, WcStatus::RemOpErr, "{:?}", wcs[0]);
    // B's own SEND from the unmapped region, on a fresh pair (A's QP is in error now).
    let qp_a2 = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b2 = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    connect_regions(&qp_a2, &mr_a, &qp_b2, &mr_b);
    qp_a2.recv(&mr_a, 0, 4096, 3).unwrap();
    qp_b2.send(&mr_b, 0, 4096, None, 4).unwrap();
    let wcs = cq_b.poll_wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(
        wcs.len(),
        1,
        "no completion for the SEND from unmapped memory"
    );
    assert_eq!(wcs[0].status, WcStatus::LocProtErr, "{:?}", wcs[0]);
    let _ = ea;
    // The daemon lives and serves: a WRITE between shared buffers on a new pair.
    let buf_b = b.alloc_buffer(LEN).unwrap();
    let mr_b3 = pd_b.register(&buf_b, all()).unwrap();
    let qp_a3 = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b3 = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    let (_, eb3) = connect_regions(&qp_a3, &mr_a, &qp_b3, &mr_b3);
    buf_a.write(0, &[7u8; 4096]);
    qp_a3.write(&mr_a, 0, 4096, eb3.addr, eb3.rkey, 5).unwrap();
    let wcs = cq_a.poll_wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!(wcs[0].status, WcStatus::Success);
    let mut got = [0u8; 4096];
    assert!(buf_b.read(0, &mut got));
    assert_eq!(got, [7u8; 4096]);
    // SAFETY: the inaccessible mapping is this test's and nothing reads through it.
    unsafe { munmap(p, LEN) }.unwrap();
}
