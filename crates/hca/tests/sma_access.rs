//! Subnet management access control through a real daemon (issue 8, item 2): the master SM
//! protects a port with an M_Key; SubnSet(PortInfo) from a port that is not the master's and
//! does not know the key is discarded without a response, changes nothing and is counted in
//! PortInfo.M_KeyViolations (IBA §14.2.4); the master, with the key, still configures it.
//! All through the MAD client API applications use (`Context::open_mad`/`send_smp`/
//! `recv_mads`) on the emulated fabric of topology A (test213 ⇄ test214, port 1 ⇄ port 1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use softib::{
    AccessFlags, AddressVector, AhHandle, AttrMask, Context, CqHandle, QpAttr, QpState, QpType,
    Qpn, RecvWr, SendFlags, SendWr, Sge, UdDest, WcStatus, WrOpcode,
};
use softib_hca::host::host_dir;
use softib_wire::mad::attr::{
    PKeyTable, PortInfo, PortPhysicalState, PortState, SmInfo, SmState, SmpAttribute,
};
use softib_wire::mad::{smp, status, AttrId};
use softib_wire::{Guid, Lid, PKey};

mod common;
use common::{start_topology, Agent, Running, TOPO_A};

fn start(name: &str) -> Running {
    start_topology(TOPO_A, name, 11)
}

/// PortInfo as read, with the states left alone (what an SM sends to change other fields).
fn unchanged_states(mut pi: PortInfo) -> PortInfo {
    pi.port_state = PortState::NoChange;
    pi.port_physical_state = PortPhysicalState::NoChange;
    pi
}

#[test]
fn an_m_key_protected_port_refuses_and_counts_a_set_from_a_port_that_is_not_the_master() {
    let f = start("mkey");
    // The master SM on test213 port 1 reaches test214's port 1 one hop away; the rogue runs
    // on test214 itself and asks its own port's SMA (hop count 0).
    let mut master = Agent::open(&f, "test213", true);
    let mut rogue = Agent::open(&f, "test214", false);
    const TARGET: &[u8] = &[1];
    const LOCAL: &[u8] = &[];
    let t0 = Instant::now();
    let pi = loop {
        if let Some((status::SUCCESS, pi)) = master.get_port_info(TARGET, 0) {
            break pi;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the link never trained"
        );
    };
    assert_eq!((pi.m_key, pi.m_key_violations), (0, 0));
    // The master's own port gets LID 0x20, so that traps LID-routed to it arrive.
    let (_, own) = master.get_port_info(LOCAL, 0).unwrap();
    let mut set = unchanged_states(own);
    set.lid = Lid(0x20);
    assert_eq!(master.set_port_info(LOCAL, 0, &set), Some(status::SUCCESS));

    // The master assigns LID 0x21 and protects the port: M_Key K, protect bits 2 (a Get
    // without the key fails too).
    const K: u64 = 0x5EC0_0000_0000_0001;
    let mut set = unchanged_states(pi);
    set.lid = Lid(0x21);
    set.master_sm_lid = Lid(0x20);
    set.m_key = K;
    set.m_key_protect_bits = 2;
    assert_eq!(master.set_port_info(TARGET, 0, &set), Some(status::SUCCESS));

    // The rogue: a Set without the key, one with a wrong key, and a Get, from a port that is
    // not the master's. No response to any (IBA §14.2.4.1: discarded)...
    let mut evil = unchanged_states(pi);
    evil.lid = Lid(0x66);
    evil.m_key = 0xBAD;
    evil.m_key_protect_bits = 0;
    let wait = Duration::from_millis(300);
    let tid = rogue.next_tid();
    for key in [0, 0xBAD, K ^ 1] {
        let tid = rogue.next_tid();
        let req = smp::Repr::dr_set(tid, AttrId::PORT_INFO, 0, key, LOCAL, evil.to_data()).unwrap();
        assert!(
            rogue.ask(req, wait).is_none(),
            "a Set with M_Key {key:#x} was answered"
        );
    }
    let req = smp::Repr::dr_get(tid, AttrId::PORT_INFO, 0, 0, LOCAL).unwrap();
    assert!(
        rogue.ask(req, wait).is_none(),
        "a Get without the key was answered"
    );

    // ... nothing changed, and each was counted in M_KeyViolations.
    let (st, now) = master
        .get_port_info(TARGET, K)
        .expect("the master still reaches it");
    assert_eq!(st, status::SUCCESS);
    assert_eq!(
        (
            now.lid,
            now.m_key,
            now.m_key_protect_bits,
            now.m_key_violations
        ),
        (Lid(0x21), K, 2, 4),
        "{now:?}"
    );
    // And each was reported to the master SM with a Bad M_Key trap (IBA §14.2.4.3): Trap 256
    // from LID 0x21 naming the requester (permissive: hop 0 on that node), the method, the
    // attribute and the M_Key it tried.
    let t0 = Instant::now();
    while master.traps.len() < 4 && t0.elapsed() < Duration::from_secs(2) {
        let _ = master.get_port_info(TARGET, K);
    }
    let seen: Vec<(u16, u16, u16, u8, u16, u64)> = master
        .traps
        .iter()
        .map(|t| {
            let d = &t.data;
            let be16 = |i: usize| u16::from_be_bytes([d[i], d[i + 1]]);
            let key = u64::from_be_bytes(d[24..32].try_into().unwrap());
            (t.header.attr_id.0, be16(4), be16(6), d[16], be16(18), key)
        })
        .collect();
    let notice = AttrId::NOTICE.0;
    let pi_id = AttrId::PORT_INFO.0;
    assert_eq!(
        seen,
        [
            (notice, 256, 0x21, 2, pi_id, 0),
            (notice, 256, 0x21, 2, pi_id, 0xBAD),
            (notice, 256, 0x21, 2, pi_id, K ^ 1),
            (notice, 256, 0x21, 1, pi_id, 0),
        ]
    );
    assert!(master.traps.iter().all(|t| t.data[12..14] == [0xFF, 0xFF]));

    // The verbs view agrees: the port's LID is the master's.
    let port = Context::open_at(&host_dir(&f.dir, "test214"))
        .unwrap()
        .devices()
        .unwrap()[0]
        .ports[0]
        .clone();
    assert_eq!(port.lid, Lid(0x21));

    // The master, with the key, still configures the port (and may lift the protection).
    let mut lift = unchanged_states(now);
    lift.lid = Lid(0x22);
    lift.m_key = 0;
    lift.m_key_protect_bits = 0;
    assert_eq!(
        master.set_port_info(TARGET, K, &lift),
        Some(status::SUCCESS)
    );
    let (_, after) = rogue.get_port_info(LOCAL, 0).expect("unprotected again");
    assert_eq!((after.lid, after.m_key), (Lid(0x22), 0));

    // An SM Set of SMInfo from a port that is not an SM: test214 tells the master on test213
    // to disable itself (IBA §14.4.1 SMInfo control). It is answered with the master's
    // SMInfo (its SM_Key too: the port's M_Key is 0, which every requester's matches), and
    // the master stays master: the daemon acts on no SMInfo Set.
    let info = SmInfo {
        guid: Guid(0xe41d_2d03_00b4_7d01),
        sm_key: 0x5EC7_0000_0000_0007,
        act_count: 1,
        priority: 1,
        sm_state: SmState::Master,
    };
    master.ctx.set_sm(0, 1, Some(info.to_data())).unwrap();
    let disable = SmInfo {
        sm_key: 0,
        sm_state: SmState::NotActive,
        ..info
    };
    let tid = rogue.next_tid();
    let req = smp::Repr::dr_set(tid, AttrId::SM_INFO, 3, 0, TARGET, disable.to_data()).unwrap();
    let r = rogue.ask(req, Duration::from_secs(1)).expect("answered");
    let got = SmInfo::parse(&r.data).unwrap();
    assert_eq!(
        (got.sm_key, got.sm_state, got.guid),
        (info.sm_key, SmState::Master, info.guid)
    );
    let tid = master.next_tid();
    let req = smp::Repr::dr_get(tid, AttrId::SM_INFO, 0, 0, LOCAL).unwrap();
    let r = master.ask(req, Duration::from_secs(1)).unwrap();
    assert_eq!(SmInfo::parse(&r.data).unwrap().sm_state, SmState::Master);
}

#[test]
fn an_m_key_lease_runs_out_when_the_master_goes_silent_and_not_while_it_speaks() {
    let f = start("mkey-lease");
    let mut master = Agent::open(&f, "test213", true);
    let mut rogue = Agent::open(&f, "test214", false);
    const TARGET: &[u8] = &[1];
    const LOCAL: &[u8] = &[];
    let t0 = Instant::now();
    let pi = loop {
        if let Some((status::SUCCESS, pi)) = master.get_port_info(TARGET, 0) {
            break pi;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the link never trained"
        );
    };
    // Protected (a Get without the key fails), with a lease of 1 s.
    const K: u64 = 0x1EA5_E000_0000_0001;
    let mut set = unchanged_states(pi);
    set.m_key = K;
    set.m_key_protect_bits = 2;
    set.m_key_lease_period = 1;
    assert_eq!(master.set_port_info(TARGET, 0, &set), Some(status::SUCCESS));
    let wait = Duration::from_millis(300);
    let rogue_get = |rogue: &mut Agent| {
        let tid = rogue.next_tid();
        let req = smp::Repr::dr_get(tid, AttrId::PORT_INFO, 0, 0, LOCAL).unwrap();
        rogue.ask(req, wait)
    };
    // Refused; the lease starts. The master keeps speaking with the key every 300 ms for
    // 2 s: each time the lease stops, so the protection holds (a refusal restarts it).
    assert!(rogue_get(&mut rogue).is_none(), "answered without the key");
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        assert_eq!(
            master.get_port_info(TARGET, K).map(|r| r.0),
            Some(status::SUCCESS)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert!(
        rogue_get(&mut rogue).is_none(),
        "the lease ran out while the master spoke with the key"
    );
    // The master goes silent: 1 s after the refusal, the protect bits are 0 and a Get
    // without the key is answered (showing the key: protect level 0 hides nothing)...
    std::thread::sleep(Duration::from_millis(1500));
    let r = rogue_get(&mut rogue).expect("the lease did not run out");
    assert_eq!(r.header.status, status::SUCCESS);
    let now = PortInfo::parse(&r.data).unwrap();
    assert_eq!((now.m_key, now.m_key_protect_bits), (K, 0), "{now:?}");
    // ... but a Set without the key is still refused and changes nothing.
    let mut evil = unchanged_states(now);
    evil.lid = Lid(0x66);
    let tid = rogue.next_tid();
    let req = smp::Repr::dr_set(tid, AttrId::PORT_INFO, 0, 0, LOCAL, evil.to_data()).unwrap();
    assert!(
        rogue.ask(req, wait).is_none(),
        "a Set without the key was answered"
    );
    let (_, after) = master.get_port_info(TARGET, K).unwrap();
    assert_ne!(after.lid, Lid(0x66));
}

/// A UD QP on port 1 of `ctx`'s device with P_Key index `pkey_index`, a receive posted, and an
/// address handle to `peer_lid`: (QPN, CQ, AH, send SGE).
fn ud_qp(
    ctx: &mut Context,
    buf: &softib::Buffer,
    pkey_index: u16,
    peer_lid: Lid,
) -> (Qpn, CqHandle, AhHandle, Sge) {
    let pd = ctx.alloc_pd(0).unwrap();
    let cq = ctx.create_cq(0, 16).unwrap();
    let mr = ctx
        .reg_mr(0, pd, buf, 0, buf.len(), AccessFlags::LOCAL_WRITE)
        .unwrap();
    let qpn = ctx
        .create_qp(0, common::qp_init(QpType::Ud, pd, cq, 16, true))
        .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index,
        port_num: 1,
        qkey: QKEY,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT)
        .with(AttrMask::QKEY);
    ctx.modify_qp(0, qpn, &init, mask).unwrap();
    for qp_state in [QpState::Rtr, QpState::Rts] {
        let a = QpAttr {
            qp_state,
            ..QpAttr::default()
        };
        let mask = if qp_state == QpState::Rts {
            AttrMask::STATE.with(AttrMask::SQ_PSN)
        } else {
            AttrMask::STATE
        };
        ctx.modify_qp(0, qpn, &a, mask).unwrap();
    }
    let sge = Sge {
        addr: mr.addr,
        length: 64,
        lkey: mr.lkey,
    };
    ctx.post_recv(
        0,
        qpn,
        vec![RecvWr {
            wr_id: 1,
            sg_list: vec![Sge {
                addr: mr.addr + 1024,
                length: 256,
                lkey: mr.lkey,
            }],
        }],
    )
    .unwrap();
    let av = AddressVector {
        dlid: peer_lid,
        port_num: 1,
        ..AddressVector::default()
    };
    let ah = ctx.create_ah(0, pd, av).unwrap();
    (qpn, cq, ah, sge)
}

/// An RC QP on port 1 of `ctx`'s device with P_Key index `pkey_index` and remote WRITE
/// allowed, in INIT: (QPN, CQ, the keys of `buf`).
fn rc_qp(
    ctx: &mut Context,
    buf: &softib::Buffer,
    pkey_index: u16,
) -> (Qpn, CqHandle, softib::MrKeys) {
    let pd = ctx.alloc_pd(0).unwrap();
    let cq = ctx.create_cq(0, 16).unwrap();
    let access = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE);
    let mr = ctx.reg_mr(0, pd, buf, 0, buf.len(), access).unwrap();
    let qpn = ctx
        .create_qp(0, common::qp_init(QpType::Rc, pd, cq, 16, true))
        .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index,
        port_num: 1,
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT)
        .with(AttrMask::ACCESS_FLAGS);
    ctx.modify_qp(0, qpn, &init, mask).unwrap();
    (qpn, cq, mr)
}

/// Brings RC QP `qpn` to RTS towards QP `remote` at `peer_lid`, with a short local ACK
/// timeout (timeout 8: about 1 ms) and two retries, so that a partition that drops its
/// packets fails it quickly with RETRY_EXC_ERR.
fn rc_connect(ctx: &mut Context, qpn: Qpn, remote: Qpn, peer_lid: Lid) {
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: softib::Mtu::Mtu1024,
        dest_qp_num: remote,
        rq_psn: softib::Psn::new(100),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 1,
        ah_attr: AddressVector {
            dlid: peer_lid,
            port_num: 1,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE
        .with(AttrMask::AV)
        .with(AttrMask::PATH_MTU)
        .with(AttrMask::DEST_QPN)
        .with(AttrMask::RQ_PSN)
        .with(AttrMask::MAX_DEST_RD_ATOMIC)
        .with(AttrMask::MIN_RNR_TIMER);
    ctx.modify_qp(0, qpn, &rtr, mask).unwrap();
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: softib::Psn::new(100),
        timeout: 8,
        retry_cnt: 2,
        rnr_retry: 0,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let mask = AttrMask::STATE
        .with(AttrMask::SQ_PSN)
        .with(AttrMask::TIMEOUT)
        .with(AttrMask::RETRY_CNT)
        .with(AttrMask::RNR_RETRY)
        .with(AttrMask::MAX_QP_RD_ATOMIC);
    ctx.modify_qp(0, qpn, &rts, mask).unwrap();
}

const QKEY: u32 = 0x1111_1111;

fn pkey_drops(ctx: &mut Context) -> u64 {
    let dev = ctx.devices().unwrap().remove(0);
    dev.drops
        .iter()
        .find(|(r, _)| r == "pkey_mismatch")
        .map_or(0, |(_, n)| *n)
}

#[test]
fn partitions_the_sm_writes_are_enforced_on_the_data_path() {
    let f = start("pkeys");
    let mut master = Agent::open(&f, "test213", true);
    const TARGET: &[u8] = &[1];
    const LOCAL: &[u8] = &[];
    let t0 = Instant::now();
    while !matches!(master.get_port_info(TARGET, 0), Some((status::SUCCESS, _))) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the link never trained"
        );
    }
    // As an SM does: LIDs 1 and 2, this SM's LID, Armed, then Active; then the P_Key tables:
    // the default partition, 0x0002 as a full and as a limited member, and 0x0003.
    let table = {
        let mut t = PKeyTable {
            pkeys: [PKey(0); 32],
        };
        t.pkeys[..4].copy_from_slice(&[PKey(0xFFFF), PKey(0x8002), PKey(0x0002), PKey(0x8003)]);
        t
    };
    for (path, lid) in [(LOCAL, 1), (TARGET, 2)] {
        let (_, pi) = master.get_port_info(path, 0).unwrap();
        let mut set = unchanged_states(pi);
        set.lid = Lid(lid);
        set.master_sm_lid = Lid(1);
        assert_eq!(master.set_port_info(path, 0, &set), Some(status::SUCCESS));
        for state in [PortState::Armed, PortState::Active] {
            let (_, pi) = master.get_port_info(path, 0).unwrap();
            let mut set = unchanged_states(pi);
            set.port_state = state;
            assert_eq!(master.set_port_info(path, 0, &set), Some(status::SUCCESS));
        }
        let tid = master.next_tid();
        let req = smp::Repr::dr_set(tid, AttrId::P_KEY_TABLE, 0, 0, path, table.to_data()).unwrap();
        let r = master.ask(req, Duration::from_secs(1)).unwrap();
        assert_eq!(r.header.status, status::SUCCESS);
    }
    let mut a = Context::open_at(&host_dir(&f.dir, "test213")).unwrap();
    let mut b = Context::open_at(&host_dir(&f.dir, "test214")).unwrap();
    for c in [&mut a, &mut b] {
        let t0 = Instant::now();
        while c.devices().unwrap()[0].ports[0].state != 4 {
            assert!(t0.elapsed() < Duration::from_secs(5), "port 1 never Active");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    // IBA §10.9.1.2: same partition and at least one full member.
    const CASES: [(u16, u16, bool); 6] = [
        (1, 1, true),  // full ↔ full
        (1, 2, true),  // full → limited
        (2, 1, true),  // limited → full
        (2, 2, false), // limited ↔ limited
        (1, 3, false), // another partition
        (0, 1, false), // the default partition to a member of 0x0002
    ];
    for (ia, ib, accepted) in CASES {
        let case = format!("P_Key index {ia} to {ib}");
        let (qa, cq_a, ah_a, sge) = ud_qp(&mut a, &buf_a, ia, Lid(2));
        let (qb, cq_b, _, _) = ud_qp(&mut b, &buf_b, ib, Lid(1));
        let dropped_before = pkey_drops(&mut b);
        buf_b.write(1024 + 40, &[0u8; 8]);
        buf_a.write(0, b"in-or-out");
        a.post_send(
            0,
            qa,
            vec![SendWr {
                wr_id: 7,
                opcode: WrOpcode::Send,
                sg_list: vec![Sge { length: 8, ..sge }],
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: Some(UdDest {
                    ah: ah_a,
                    remote_qpn: qb,
                    remote_qkey: QKEY,
                }),
            }],
        )
        .unwrap();
        let sent = a.poll_cq(0, cq_a, 1, Duration::from_secs(5)).unwrap();
        assert_eq!(sent[0].status, WcStatus::Success, "{case}");
        let wait = Duration::from_millis(if accepted { 5000 } else { 300 });
        let got = b.poll_cq(0, cq_b, 1, wait).unwrap_or_default();
        let mut landed = [0u8; 8];
        buf_b.read(1024 + 40, &mut landed);
        let dropped = pkey_drops(&mut b) - dropped_before;
        if accepted {
            assert_eq!(got.len(), 1, "{case}: not delivered");
            assert_eq!(
                (got[0].status, &landed),
                (WcStatus::Success, b"in-or-ou"),
                "{case}"
            );
            assert_eq!(dropped, 0, "{case}");
        } else {
            assert!(got.is_empty(), "{case}: delivered {got:?}");
            assert_eq!((dropped, landed), (1, [0u8; 8]), "{case}");
        }
    }

    // The same matrix for RC (IBA §10.9.3: each end checks the other's packets against its
    // own partition): A's QP uses P_Key index `ia`, B's `ib`, and A WRITEs 8 bytes into B's
    // buffer. Where the partition lets them through, the WRITE completes and the bytes land;
    // where it does not, B drops every request (counted as `pkey_mismatch`, nothing written)
    // and A's retries run out: RETRY_EXC_ERR, never a hang and never the data.
    for (ia, ib, accepted) in CASES {
        let case = format!("RC, P_Key index {ia} to {ib}");
        let (qa, cq_a, mr_a) = rc_qp(&mut a, &buf_a, ia);
        let (qb, _cq_b, mr_b) = rc_qp(&mut b, &buf_b, ib);
        rc_connect(&mut a, qa, qb, Lid(2));
        rc_connect(&mut b, qb, qa, Lid(1));
        let dropped_before = pkey_drops(&mut b);
        buf_b.write(2048, &[0u8; 8]);
        buf_a.write(0, b"rc-in-or");
        a.post_send(
            0,
            qa,
            vec![SendWr {
                wr_id: 9,
                opcode: WrOpcode::RdmaWrite(softib::RemoteAddr {
                    addr: mr_b.addr + 2048,
                    rkey: softib::RKey(mr_b.rkey),
                }),
                sg_list: vec![Sge {
                    addr: mr_a.addr,
                    length: 8,
                    lkey: mr_a.lkey,
                }],
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: None,
            }],
        )
        .unwrap();
        // Three tries of about a millisecond each when dropped; far less than this either way.
        let done = a.poll_cq(0, cq_a, 1, Duration::from_secs(10)).unwrap();
        assert_eq!(
            done.len(),
            1,
            "{case}: the WRITE neither completed nor failed"
        );
        let mut landed = [0u8; 8];
        buf_b.read(2048, &mut landed);
        let dropped = pkey_drops(&mut b) - dropped_before;
        if accepted {
            assert_eq!(
                (done[0].status, &landed, dropped),
                (WcStatus::Success, b"rc-in-or", 0),
                "{case}"
            );
        } else {
            assert_eq!(
                (done[0].status, landed),
                (WcStatus::RetryExcErr, [0u8; 8]),
                "{case}"
            );
            // The first try and its two retries, each dropped at B.
            assert_eq!(dropped, 3, "{case}");
        }
    }
}
