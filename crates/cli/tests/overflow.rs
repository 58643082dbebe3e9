//! A receiving daemon that cannot keep up: its UDP receive buffer overflows. The kernel drops
//! what does not fit; the daemon reports the kernel's count (`rcvbuf_overflow`, from
//! `SO_RXQ_OVFL`: one per datagram or GSO run it could not queue), UD loses those datagrams,
//! and RC gets its data through by retransmission.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use softib::{AccessFlags, Context, DataPath, Device, Mtu, QpType, WcStatus};

mod common;
use common::{roce_daemon, signal};

fn drops(dir: &Path, reason: &str) -> u64 {
    let devs = Context::open_at(dir).unwrap().devices().unwrap();
    devs[0]
        .drops
        .iter()
        .find(|(r, _)| r == reason)
        .map_or(0, |(_, n)| *n)
}

#[test]
fn a_full_receive_buffer_drops_ud_datagrams_counted_and_rc_recovers() {
    let base: PathBuf = std::env::temp_dir().join(format!("softib-ovfl-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (dir_a, dir_b) = (base.join("a"), base.join("b"));
    std::fs::create_dir_all(&dir_a).unwrap();
    std::fs::create_dir_all(&dir_b).unwrap();
    let _da = roce_daemon(&dir_a, "127.0.0.92");
    let db = roce_daemon(&dir_b, "127.0.0.93");

    const N: usize = 12_000;
    // A full IB MTU each: 49 MB against a 32 MiB receive buffer (16 MiB asked, doubled).
    const UD_LEN: usize = 4096;
    const RC_LEN: usize = 256 * 1024;
    let (a, b) = (
        // The daemon's data path: stopping B's daemon stops B's engine.
        Device::open_on(&dir_a, Some("rxe0"), DataPath::Daemon).unwrap(),
        Device::open_on(&dir_b, Some("rxe0"), DataPath::Daemon).unwrap(),
    );
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16_384).unwrap(), b.create_cq(16_384).unwrap());
    let rw = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE);
    let (buf_a, buf_b) = (
        a.alloc_buffer(RC_LEN + UD_LEN).unwrap(),
        b.alloc_buffer(RC_LEN + 40 + UD_LEN).unwrap(),
    );
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, rw).unwrap(),
        pd_b.register(&buf_b, rw).unwrap(),
    );
    let (ud_a, ud_b) = (
        pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, N as u32).unwrap(),
        pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, N as u32).unwrap(),
    );
    let (rc_a, rc_b) = (
        pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap(),
        pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap(),
    );
    let eb_ud = ud_b.endpoint().unwrap();
    ud_a.connect(&eb_ud, Mtu::Mtu1024).unwrap();
    ud_b.connect(&ud_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    let eb_rc = rc_b.endpoint_with(Some(&mr_b)).unwrap();
    rc_a.connect(&eb_rc, Mtu::Mtu4096).unwrap();
    rc_b.connect(&rc_a.endpoint().unwrap(), Mtu::Mtu4096)
        .unwrap();
    // Every UD datagram has a receive waiting (all into one slot: only their count matters).
    for i in 0..N {
        ud_b.recv(&mr_b, RC_LEN, 40 + UD_LEN, i as u64).unwrap();
    }
    let data: Vec<u8> = (0..RC_LEN).map(|i| (i * 7 % 253) as u8).collect();
    buf_a.write(0, &data);
    let ah = ud_a.address_handle(&eb_ud).unwrap();

    // B stops reading (its daemon is stopped): the flood fills its socket's buffer and
    // overflows it; the RC WRITE's packets that come after are dropped too.
    signal(&db.0, rustix::process::Signal::STOP);
    for i in 0..N {
        ud_a.send_to(&mr_a, RC_LEN, UD_LEN, &ah, eb_ud.qpn, i as u64)
            .unwrap();
    }
    let mut sent = 0;
    let t0 = Instant::now();
    while sent < N {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "{sent} of {N} UD sends"
        );
        for wc in cq_a.poll_wait(256, Duration::from_millis(100)).unwrap() {
            assert_eq!(wc.status, WcStatus::Success);
            sent += 1;
        }
    }
    rc_a.write(&mr_a, 0, RC_LEN, eb_rc.addr, eb_rc.rkey, 1 << 40)
        .unwrap();
    std::thread::sleep(Duration::from_millis(30));
    signal(&db.0, rustix::process::Signal::CONT);

    // RC: retransmitted until it is through, every byte right.
    let wc = cq_a.wait(Duration::from_secs(20)).unwrap();
    assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, 1 << 40));
    let mut got = vec![0u8; RC_LEN];
    buf_b.read(0, &mut got);
    assert!(got == data, "the RC WRITE's data differs");

    // UD: what was not received was dropped by the kernel, and counted.
    let mut received = 0;
    let mut quiet = Instant::now();
    while quiet.elapsed() < Duration::from_millis(500) {
        let wcs = cq_b.poll_wait(256, Duration::from_millis(100)).unwrap();
        if !wcs.is_empty() {
            quiet = Instant::now();
        }
        for wc in wcs {
            assert_eq!(wc.status, WcStatus::Success);
            received += 1;
        }
    }
    let overflow = drops(&dir_b, "rcvbuf_overflow");
    eprintln!(
        "UD: {received} of {N} received; the daemon counted {overflow} receive-buffer overflows \
         (a datagram or a GSO run each, UD and RC)"
    );
    assert!(received < N, "the receive buffer never overflowed");
    // The kernel counts what it could not queue: a datagram, or a whole GSO run of up to 64
    // (on loopback a run reaches a GRO socket in one piece).
    let lost = (N - received) as u64;
    assert!(
        overflow > 0 && overflow <= lost + 64 && lost <= overflow * 64,
        "{lost} UD datagrams lost, {overflow} overflows counted"
    );
    let _ = std::fs::remove_dir_all(&base);
}
