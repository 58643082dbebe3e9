//! Access control end to end, through the daemon with the verbs API: an RDMA WRITE or READ
//! with a bad R_Key, an address outside the peer's region, the key of a region in another PD,
//! of a region without the right, or of a deregistered region completes with "remote access
//! error", and neither side's buffer changes by a single byte. (The engine's own tests,
//! `crates/engine/src/tests/access.rs`, go through every operation and rule.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::{AccessFlags, QpType, WcOpcode, WcStatus};

mod common;
use common::{all, connect, loopback_pair};

const LEN: usize = 8192;

#[test]
fn rkey_and_address_violations_complete_with_remote_access_error_and_touch_no_memory() {
    let (_hca, a, b) = loopback_pair();
    let (pd_a, pd_b, pd_b2) = (
        a.alloc_pd().unwrap(),
        b.alloc_pd().unwrap(),
        b.alloc_pd().unwrap(),
    );
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let mr_b = pd_b.register(&buf_b, all()).unwrap();
    let other_pd = pd_b2.register(&buf_b, all()).unwrap();
    let read_only = pd_b.register(&buf_b, AccessFlags::REMOTE_READ).unwrap();
    let dead_rkey = {
        let mr = pd_b.register(&buf_b, all()).unwrap();
        mr.rkey()
    }; // deregistered here
    let (base, rkey) = (mr_b.addr(), mr_b.rkey());
    let pattern_a: Vec<u8> = (0..LEN).map(|i| (i * 13 % 251) as u8).collect();
    let pattern_b: Vec<u8> = (0..LEN).map(|i| (i * 29 % 241) as u8 ^ 0x5A).collect();
    buf_a.write(0, &pattern_a);
    buf_b.write(0, &pattern_b);

    type Case = (&'static str, bool, u64, u32);
    let cases: [Case; 8] = [
        ("WRITE with a bad R_Key", true, base, rkey ^ 0x100),
        ("READ with a bad R_Key", false, base, rkey ^ 0x100),
        (
            "WRITE running past the end",
            true,
            base + LEN as u64 - 32,
            rkey,
        ),
        ("WRITE before the start", true, base - 8, rkey),
        (
            "READ running past the end",
            false,
            base + LEN as u64 - 32,
            rkey,
        ),
        (
            "WRITE with the key of another PD's region",
            true,
            base,
            other_pd.rkey(),
        ),
        (
            "WRITE to a region without REMOTE_WRITE",
            true,
            base,
            read_only.rkey(),
        ),
        (
            "WRITE with a deregistered region's key",
            true,
            base,
            dead_rkey,
        ),
    ];
    for (i, (what, write, addr, key)) in cases.into_iter().enumerate() {
        // A fresh pair per case: the error moves both QPs to ERR.
        let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
        let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
        connect(&qp_a, &qp_b);
        let wr_id = 100 + i as u64;
        if write {
            qp_a.write(&mr_a, 256, 64, addr, key, wr_id).unwrap();
        } else {
            qp_a.read(&mr_a, 256, 64, addr, key, wr_id).unwrap();
        }
        let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
        assert_eq!(
            (wc.wr_id, wc.status),
            (wr_id, WcStatus::RemAccessErr),
            "{what}"
        );
        assert_eq!(wc.status.to_string(), "remote access error (10)", "{what}");
        let (mut now_a, mut now_b) = (vec![0u8; LEN], vec![0u8; LEN]);
        buf_a.read(0, &mut now_a);
        buf_b.read(0, &mut now_b);
        assert!(now_a == pattern_a, "{what}: A's buffer changed");
        assert!(now_b == pattern_b, "{what}: B's buffer changed");
    }
    // The same pair of buffers with a valid key and address works: the refusals were the
    // keys and addresses, not the setup.
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
    connect(&qp_a, &qp_b);
    qp_a.write(&mr_a, 256, 64, base + LEN as u64 - 64, rkey, 1)
        .unwrap();
    let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut tail = vec![0u8; 64];
    buf_b.read(LEN - 64, &mut tail);
    assert_eq!(tail, pattern_a[256..320]);
}
