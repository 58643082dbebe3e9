//! Access control (issue 8, item 2): every way a request may be refused — a bad R_Key, an
//! address outside the region, a right the region or the QP does not grant, a region of
//! another PD, a deregistered region, a responder QP in a state that takes no requests, a
//! Q_Key (or a controlled Q_Key the sender may not use) or P_Key that does not match — gives
//! what the spec says (the NAK, the completion status, the drop counter) and leaves the
//! memory of *both* sides byte-for-byte as it was: the whole 1 MiB of B's buffer, not just the
//! bytes addressed, and A's buffer (a READ or atomic that fails returns nothing into it).
//!
//! `rc.rs` (`nak_remote_access_error_for_bad_keys_bounds_and_rights`,
//! `nak_invalid_request_for_a_write_the_qp_does_not_allow`), `mod.rs`
//! (`remote_access_error_leaves_memory_untouched`) and `uc_ud.rs` (Q_Key and P_Key drops)
//! cover single cases with their aftermath; here each violation is checked against the whole
//! memory and every operation it applies to.

use softib_wire::aeth::NakCode;
use softib_wire::{PKey, Psn, Qpn, RKey, Syndrome};

use super::util::{bring_up, bring_up_to, pattern, Pair, BUF, BUF_LEN};
use crate::counters::DropReason;
use crate::memory::RegionId;
use crate::verbs::{AccessFlags, QpState, QpType, RemoteAddr, SendWr, UdDest, WcStatus, WrOpcode};
use crate::{AttrMask, PortAttr};

/// B's second region: 4 KiB inside B's buffer, registered per case with the rights it tests.
const MR2: u64 = BUF + 0x4_0000;
const MR2_LEN: u64 = 0x1000;

/// Both buffers filled with distinct patterns.
fn fill(p: &mut Pair) {
    p.a.fill(BUF, &pattern(0x3C, BUF_LEN));
    p.b.fill(BUF, &pattern(0xA5, BUF_LEN));
}

/// All of A's and B's buffer.
fn memory(p: &Pair) -> (Vec<u8>, Vec<u8>) {
    (
        p.a.hca.memory().bytes(RegionId(1)).unwrap().to_vec(),
        p.b.hca.memory().bytes(RegionId(1)).unwrap().to_vec(),
    )
}

/// The NAKs B sent.
fn naks(p: &Pair) -> Vec<Syndrome> {
    p.decoded_log()
        .iter()
        .filter(|l| !l.from_a)
        .filter_map(|l| l.syndrome())
        .filter(|s| s.kind() != "ack")
        .collect()
}

/// The operations a remote address is used by, all at `remote`, 64 bytes (8 for atomics)
/// from and to A's buffer.
fn every_op(p: &Pair, remote: RemoteAddr) -> Vec<(&'static str, SendWr)> {
    let sge = |n| p.a.sge(BUF + 0x100, n);
    vec![
        (
            "WRITE",
            p.a.wr(1, WrOpcode::RdmaWrite(remote), vec![sge(64)]),
        ),
        (
            "WRITE with immediate",
            p.a.wr(1, WrOpcode::RdmaWriteWithImm(remote, 7), vec![sge(64)]),
        ),
        ("READ", p.a.wr(1, WrOpcode::RdmaRead(remote), vec![sge(64)])),
        (
            "compare and swap",
            p.a.wr(
                1,
                WrOpcode::AtomicCmpAndSwp {
                    remote,
                    compare: 0,
                    swap: u64::MAX,
                },
                vec![sge(8)],
            ),
        ),
        (
            "fetch and add",
            p.a.wr(
                1,
                WrOpcode::AtomicFetchAndAdd { remote, add: 1 },
                vec![sge(8)],
            ),
        ),
    ]
}

/// Runs `wr` from a fresh RC pair after `prepare` (which may register regions on B and
/// returns the remote address to use), with a receive posted at B (WRITE with immediate
/// consumes one); checks the whole memory of both sides is unchanged and that A's completion,
/// B's NAK and both QPs' states are those of a responder error with `status`/`nak`.
fn refused(
    what: &str,
    only: &[&str],
    prepare: impl Fn(&mut Pair, Qpn) -> RemoteAddr,
    status: WcStatus,
    nak: NakCode,
) {
    let probe = Pair::new();
    let ops = every_op(
        &probe,
        RemoteAddr {
            addr: 0,
            rkey: RKey(0),
        },
    );
    for i in 0..ops.len() {
        let mut p = Pair::new();
        let (qa, qb) = p.connect(QpType::Rc);
        let remote = prepare(&mut p, qb);
        let (op, wr) = every_op(&p, remote).swap_remove(i);
        if !only.is_empty() && !only.contains(&op) {
            continue;
        }
        p.b.post_recv(qb, 9, BUF + 0x8_0000, 256);
        fill(&mut p);
        let before = memory(&p);
        p.a.hca.post_send(qa, wr).unwrap();
        p.drive();
        let case = format!("{what}: {op}");
        assert!(memory(&p) == before, "{case}: memory changed");
        let wcs: Vec<_> =
            p.a.completions()
                .iter()
                .map(|w| (w.wr_id, w.status))
                .collect();
        assert_eq!(wcs, vec![(1, status)], "{case}");
        assert_eq!(naks(&p), vec![Syndrome::Nak(nak)], "{case}");
        assert_eq!(p.b.state(qb), QpState::Err, "{case}");
        assert_eq!(p.a.state(qa), QpState::Err, "{case}");
        // B's receive is flushed, never filled.
        let wcs: Vec<_> =
            p.b.completions()
                .iter()
                .map(|w| (w.wr_id, w.status))
                .collect();
        assert_eq!(wcs, vec![(9, WcStatus::WrFlushErr)], "{case}");
    }
}

/// Registers B's second region with `access` and returns its key.
fn mr2(p: &mut Pair, access: AccessFlags) -> u32 {
    p.b.hca
        .reg_mr(p.b.pd, MR2, MR2_LEN, access, RegionId(1))
        .unwrap()
}

fn all_remote() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ)
        .with(AccessFlags::REMOTE_ATOMIC)
}

#[test]
fn an_invalid_rkey_is_a_remote_access_error_for_every_operation() {
    for flip in [0x1, 0x100, 0x8000_0000] {
        refused(
            &format!("R_Key ^ {flip:#x}"),
            &[],
            move |p, _| RemoteAddr {
                addr: BUF,
                rkey: RKey(p.b.buf_key ^ flip),
            },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
        );
    }
    refused(
        "R_Key 0",
        &[],
        |_, _| RemoteAddr {
            addr: BUF,
            rkey: RKey(0),
        },
        WcStatus::RemAccessErr,
        NakCode::RemoteAccessError,
    );
}

#[test]
fn an_address_outside_the_region_is_a_remote_access_error() {
    // The region is MR2 (4 KiB in the middle of B's buffer, every right): the bytes around
    // it are B's memory too (and registered by B's first MR), yet not this key's.
    // 64-byte WRITEs and READs, 8-byte atomics.
    const LONG: &[&str] = &["WRITE", "WRITE with immediate", "READ"];
    type Case = (&'static str, &'static [&'static str], fn(u64) -> u64);
    let cases: [Case; 4] = [
        ("just before the region", &[], |start| start - 8),
        ("running past the end", LONG, |start| start + MR2_LEN - 32),
        ("just past the end", &[], |start| start + MR2_LEN),
        ("wrapping around 2^64", &[], |_| u64::MAX - 7),
    ];
    for (what, only, addr) in cases {
        refused(
            what,
            only,
            move |p, _| RemoteAddr {
                addr: addr(MR2),
                rkey: RKey(mr2(p, all_remote())),
            },
            WcStatus::RemAccessErr,
            NakCode::RemoteAccessError,
        );
    }
}

#[test]
fn a_right_the_region_does_not_grant_is_a_remote_access_error() {
    // LOCAL_WRITE only: no remote operation at all.
    refused(
        "MR with LOCAL_WRITE only",
        &[],
        |p, _| RemoteAddr {
            addr: MR2,
            rkey: RKey(mr2(p, AccessFlags::LOCAL_WRITE)),
        },
        WcStatus::RemAccessErr,
        NakCode::RemoteAccessError,
    );
    // Each remote right alone: the other operations are refused (checked one by one).
    type Case = (&'static str, AccessFlags, &'static [&'static str]);
    let cases: [Case; 3] = [
        (
            "REMOTE_READ only",
            AccessFlags::REMOTE_READ,
            &[
                "WRITE",
                "WRITE with immediate",
                "compare and swap",
                "fetch and add",
            ],
        ),
        (
            "REMOTE_WRITE only",
            AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE),
            &["READ", "compare and swap", "fetch and add"],
        ),
        (
            "REMOTE_ATOMIC only",
            AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_ATOMIC),
            &["WRITE", "WRITE with immediate", "READ"],
        ),
    ];
    for (what, access, denied) in cases {
        let probe = Pair::new();
        for (i, (op, _)) in every_op(
            &probe,
            RemoteAddr {
                addr: 0,
                rkey: RKey(0),
            },
        )
        .into_iter()
        .enumerate()
        {
            let mut p = Pair::new();
            let (qa, qb) = p.connect(QpType::Rc);
            let remote = RemoteAddr {
                addr: MR2,
                rkey: RKey(mr2(&mut p, access)),
            };
            let wr = every_op(&p, remote).swap_remove(i).1;
            p.b.post_recv(qb, 9, BUF + 0x8_0000, 256);
            fill(&mut p);
            let before = memory(&p);
            p.a.hca.post_send(qa, wr).unwrap();
            p.drive();
            let status = p.a.completions()[0].status;
            if denied.contains(&op) {
                assert_eq!(status, WcStatus::RemAccessErr, "{what}: {op}");
                assert!(memory(&p) == before, "{what}: {op}: memory changed");
                assert_eq!(
                    naks(&p),
                    vec![Syndrome::Nak(NakCode::RemoteAccessError)],
                    "{what}: {op}"
                );
            } else {
                assert_eq!(status, WcStatus::Success, "{what}: {op} is granted");
            }
        }
    }
}

#[test]
fn a_right_the_qp_does_not_grant_is_an_invalid_request() {
    // B's QP allows no remote access at all (its MR allows everything): class C, NAK invalid
    // request, REM_INV_REQ_ERR at A: the QP's access flags are checked before the region's.
    refused(
        "QP without remote rights",
        &[],
        |p, qb| {
            let (mut attr, _) = p.b.hca.query_qp(qb).unwrap();
            attr.qp_access_flags = AccessFlags::LOCAL_WRITE;
            p.b.hca
                .modify_qp(qb, &attr, AttrMask::ACCESS_FLAGS)
                .unwrap();
            p.b.remote(BUF)
        },
        WcStatus::RemInvReqErr,
        NakCode::InvalidRequest,
    );
}

#[test]
fn a_region_of_another_pd_is_a_remote_access_error() {
    refused(
        "MR in B's second PD",
        &[],
        |p, _| {
            let pd2 = p.b.hca.alloc_pd().unwrap();
            let key =
                p.b.hca
                    .reg_mr(pd2, MR2, MR2_LEN, all_remote(), RegionId(1))
                    .unwrap();
            RemoteAddr {
                addr: MR2,
                rkey: RKey(key),
            }
        },
        WcStatus::RemAccessErr,
        NakCode::RemoteAccessError,
    );
}

#[test]
fn a_deregistered_region_is_a_remote_access_error() {
    refused(
        "deregistered MR",
        &[],
        |p, _| {
            let key = mr2(p, all_remote());
            p.b.hca.dereg_mr(key).unwrap();
            RemoteAddr {
                addr: MR2,
                rkey: RKey(key),
            }
        },
        WcStatus::RemAccessErr,
        NakCode::RemoteAccessError,
    );
}

#[test]
fn a_responder_qp_that_takes_no_requests_touches_no_memory() {
    // B's QP in RESET or INIT drops every request silently (the QP states of IBA §10.3.1),
    // counted; A retries until it gives up. In ERR B sends at most one NAK.
    for state in [QpState::Reset, QpState::Init, QpState::Err] {
        let probe = Pair::new();
        let n = every_op(
            &probe,
            RemoteAddr {
                addr: 0,
                rkey: RKey(0),
            },
        )
        .len();
        for i in 0..n {
            let mut p = Pair::new();
            let qa = p.a.create_qp(QpType::Rc);
            let qb = p.b.create_qp(QpType::Rc);
            let (pa, pb) = (Psn::new(0xFF_FFF0), Psn::new(100));
            bring_up(&mut p.a.hca, qa, QpType::Rc, qb, pb, pa);
            let to = if state == QpState::Err {
                QpState::Rts
            } else {
                state
            };
            bring_up_to(&mut p.b.hca, qb, QpType::Rc, qa, (pa, pb), to);
            if state == QpState::Err {
                p.b.modify_state(qb, QpState::Err);
            }
            let (op, wr) = every_op(&p, p.b.remote(BUF)).swap_remove(i);
            fill(&mut p);
            let before = memory(&p);
            p.a.hca.post_send(qa, wr).unwrap();
            p.drive();
            let case = format!("B in {state:?}: {op}");
            assert!(memory(&p) == before, "{case}: memory changed");
            let status = p.a.completions()[0].status;
            assert_ne!(status, WcStatus::Success, "{case}");
            if state == QpState::Err {
                assert!(naks(&p).len() <= 1, "{case}");
            } else {
                assert_eq!(status, WcStatus::RetryExcErr, "{case}");
                assert!(naks(&p).is_empty(), "{case}");
                assert!(
                    p.b.hca.drops().get(DropReason::QpNotReceiving) > 0,
                    "{case}"
                );
            }
        }
    }
}

#[test]
fn a_qkey_mismatch_is_dropped_counted_and_writes_nothing() {
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    p.b.post_recv(qb, 1, BUF + 0x1000, 256);
    fill(&mut p);
    let before = memory(&p);
    let sge = p.a.sge(BUF, 64);
    for qkey in [0x1111_1110, 0x0111_1111, 0] {
        let wrong = UdDest {
            remote_qkey: qkey,
            ..to_b
        };
        p.a.post_ud(qa, 1, wrong, vec![sge]);
        p.drive();
    }
    assert!(memory(&p) == before, "memory changed");
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::QKeyMismatch), 3);
    assert_eq!(p.b.hca.counters(1).unwrap().qkey_violations, 3);
    // The receive is still there for a matching Q_Key.
    p.a.post_ud(qa, 2, to_b, vec![sge]);
    p.drive();
    assert_eq!(p.b.completions()[0].status, WcStatus::Success);
}

#[test]
fn a_controlled_qkey_cannot_be_forged_from_a_work_request() {
    // IBA §10.2.4: a Q_Key with the high-order bit set is controlled; a consumer
    // without the privilege cannot send it — a WR asking for one sends the QP's own Q_Key.
    // B's UD QP takes only the controlled key 0x8000_0001; A's WR names it: dropped.
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    let (mut attr, _) = p.b.hca.query_qp(qb).unwrap();
    attr.qkey = 0x8000_0001;
    p.b.hca.modify_qp(qb, &attr, AttrMask::QKEY).unwrap();
    p.b.post_recv(qb, 1, BUF + 0x1000, 256);
    fill(&mut p);
    let before = memory(&p);
    let forged = UdDest {
        remote_qkey: 0x8000_0001,
        ..to_b
    };
    p.a.post_ud(qa, 1, forged, vec![p.a.sge(BUF, 64)]);
    p.drive();
    let sent: Vec<u32> = p
        .decoded_log()
        .iter()
        .filter(|l| l.from_a)
        .map(|l| l.t.deth.unwrap().qkey.0)
        .collect();
    assert_eq!(sent, vec![0x1111_1111], "A's own Q_Key went on the wire");
    assert!(memory(&p) == before, "memory changed");
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::QKeyMismatch), 1);
}

fn set_pkeys(p: &mut Pair, on_b: bool, pkeys: Vec<PKey>) {
    let side = if on_b { &mut p.b } else { &mut p.a };
    let attr = PortAttr {
        pkeys,
        ..side.hca.port(1).unwrap().clone()
    };
    side.hca.set_port_attr(1, attr).unwrap();
}

#[test]
fn a_pkey_mismatch_is_dropped_counted_and_writes_nothing() {
    // RC: B is in partition 0x0002 only (full member); A sends with 0xFFFF. Every request is
    // dropped and counted (no NAK; IBA §10.9.3); A's retries run out.
    let probe = Pair::new();
    let n = every_op(
        &probe,
        RemoteAddr {
            addr: 0,
            rkey: RKey(0),
        },
    )
    .len();
    for i in 0..n {
        let mut p = Pair::new();
        set_pkeys(&mut p, true, vec![PKey(0x8002)]);
        let (qa, qb) = p.connect(QpType::Rc);
        p.b.post_recv(qb, 9, BUF + 0x8_0000, 256);
        let (op, wr) = every_op(&p, p.b.remote(BUF)).swap_remove(i);
        fill(&mut p);
        let before = memory(&p);
        p.a.hca.post_send(qa, wr).unwrap();
        p.drive();
        assert!(memory(&p) == before, "{op}: memory changed");
        assert_eq!(p.a.completions()[0].status, WcStatus::RetryExcErr, "{op}");
        assert!(naks(&p).is_empty(), "{op}");
        assert!(p.b.completions().is_empty(), "{op}");
        assert!(p.b.hca.drops().get(DropReason::PKeyMismatch) > 0, "{op}");
        assert_eq!(p.b.state(qb), QpState::Rts, "{op}: no QP error");
    }
    // Partition membership: two limited members of the same partition cannot talk (UD).
    let mut p = Pair::new();
    set_pkeys(&mut p, false, vec![PKey(0x0002)]);
    set_pkeys(&mut p, true, vec![PKey(0x0002)]);
    let (qa, qb, to_b, _) = p.ud();
    p.b.post_recv(qb, 1, BUF + 0x1000, 256);
    fill(&mut p);
    let before = memory(&p);
    p.a.post_ud(qa, 1, to_b, vec![p.a.sge(BUF, 64)]);
    p.drive();
    assert!(memory(&p) == before, "limited to limited: memory changed");
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::PKeyMismatch), 1);
    assert_eq!(p.b.hca.counters(1).unwrap().pkey_violations, 1);
}

#[test]
fn partition_membership_matrix() {
    // IBA §10.9.1.2, §10.9.3: a packet is accepted when its P_Key and the receiving QP's are
    // of the same partition and at least one of them is a full member. Both directions of UD
    // datagrams, and an RC SEND and WRITE, for each pair of memberships.
    const FULL: PKey = PKey(0x8002);
    const LIMITED: PKey = PKey(0x0002);
    const OTHER: PKey = PKey(0x8003);
    for (a, b, accepted) in [
        (FULL, FULL, true),
        (FULL, LIMITED, true),
        (LIMITED, FULL, true),
        (LIMITED, LIMITED, false),
        (OTHER, FULL, false),
        (FULL, OTHER, false),
    ] {
        let case = format!("{:#06x} <-> {:#06x}", a.0, b.0);
        let mut p = Pair::new();
        set_pkeys(&mut p, false, vec![a]);
        set_pkeys(&mut p, true, vec![b]);
        let (qa, qb, to_b, to_a) = p.ud();
        p.a.post_recv(qa, 1, BUF + 0x1000, 256);
        p.b.post_recv(qb, 1, BUF + 0x1000, 256);
        fill(&mut p);
        let before = memory(&p);
        p.a.post_ud(qa, 2, to_b, vec![p.a.sge(BUF, 64)]);
        p.b.post_ud(qb, 2, to_a, vec![p.b.sge(BUF, 64)]);
        p.drive();
        for (side, name) in [(&mut p.a, "A"), (&mut p.b, "B")] {
            let received = side
                .completions()
                .iter()
                .filter(|w| w.wr_id == 1 && w.status == WcStatus::Success)
                .count();
            let dropped = side.hca.drops().get(DropReason::PKeyMismatch);
            let violations = side.hca.counters(1).unwrap().pkey_violations;
            let want = if accepted { (1, 0, 0) } else { (0, 1, 1) };
            assert_eq!((received, dropped, violations), want, "UD {case}: {name}");
        }
        if !accepted {
            assert!(memory(&p) == before, "UD {case}: memory changed");
        }

        // RC, A to B: a SEND and a WRITE.
        let mut p = Pair::new();
        set_pkeys(&mut p, false, vec![a]);
        set_pkeys(&mut p, true, vec![b]);
        let (qa, qb) = p.connect(QpType::Rc);
        p.b.post_recv(qb, 1, BUF + 0x1000, 256);
        fill(&mut p);
        let before = memory(&p);
        p.a.post(qa, 2, WrOpcode::Send, vec![p.a.sge(BUF, 64)]);
        p.a.post(
            qa,
            3,
            WrOpcode::RdmaWrite(p.b.remote(BUF + 0x2000)),
            vec![p.a.sge(BUF, 64)],
        );
        p.drive();
        let got: Vec<WcStatus> = p.a.completions().iter().map(|w| w.status).collect();
        if accepted {
            assert_eq!(got, [WcStatus::Success; 2], "RC {case}");
            assert_eq!(p.b.bytes(BUF + 0x2000, 64), p.a.bytes(BUF, 64), "RC {case}");
        } else {
            assert_eq!(
                got,
                [WcStatus::RetryExcErr, WcStatus::WrFlushErr],
                "RC {case}"
            );
            assert!(memory(&p) == before, "RC {case}: memory changed");
            assert!(
                p.b.hca.drops().get(DropReason::PKeyMismatch) > 0,
                "RC {case}"
            );
        }
    }
}
