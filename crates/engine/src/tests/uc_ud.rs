//! UC and UD scenarios: immediate data, inline data, scatter lists, PSN wrap on UC, and the
//! Q_Key and P_Key rules.

use softib_wire::{Operation, PKey, Psn};

use super::util::{pattern, Pair, BUF};
use crate::counters::DropReason;
use crate::verbs::{QpState, QpType, SendFlags, SendWr, UdDest, WcOpcode, WcStatus, WrOpcode};
use crate::{AttrMask, PortAttr};

// ---- UC ------------------------------------------------------------------------------------------

#[test]
fn uc_send_and_write_with_immediate() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    let data = pattern(21, 2500);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    p.b.post_recv(qb, 2, BUF, 64);
    let sge = p.a.sge(BUF, 2500);
    p.a.post(qa, 1, WrOpcode::SendWithImm(0x1234_5678), vec![sge]);
    let remote = p.b.remote(BUF + 0x2_0000);
    p.a.post(qa, 2, WrOpcode::RdmaWriteWithImm(remote, 77), vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        vec![
            (
                1,
                WcStatus::Success,
                WcOpcode::Recv,
                2500,
                Some(0x1234_5678)
            ),
            (
                2,
                WcStatus::Success,
                WcOpcode::RecvRdmaWithImm,
                2500,
                Some(77)
            ),
        ]
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 2500), data);
    assert_eq!(p.b.bytes(BUF + 0x2_0000, 2500), data);
    let ops: Vec<_> = p.decoded_log().iter().map(|l| l.op()).collect();
    assert_eq!(
        ops,
        vec![
            Operation::SendFirst,
            Operation::SendMiddle,
            Operation::SendLastWithImmediate,
            Operation::RdmaWriteFirst,
            Operation::RdmaWriteMiddle,
            Operation::RdmaWriteLastWithImmediate,
        ]
    );
}

#[test]
fn uc_multi_packet_messages_wrap_the_psn() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    // A's PSNs start at 0xFFFFF0: the 20-packet SEND crosses the wrap.
    let data = pattern(22, 20 * 1024);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 32 * 1024);
    p.b.post_recv(qb, 2, BUF + 0x2_0000, 32 * 1024);
    p.b.post_recv(qb, 3, BUF + 0x3_0000, 32 * 1024);
    let sge = p.a.sge(BUF, data.len() as u32);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1_0000, data.len()), data);
    let psns: Vec<Psn> = p.decoded_log().iter().map(|l| l.psn()).collect();
    assert_eq!(
        psns,
        (0..20)
            .map(|i| Psn::new(0xFF_FFF0).add(i))
            .collect::<Vec<_>>()
    );
    // The next message, after the wrap, loses a packet: it is dropped as a whole, and the
    // one after it arrives in the receive WQE the lost one gave back.
    let lost = Psn::new(0xFF_FFF0).add(20 + 3);
    p.drop_if = Some(Box::new(move |_, b| {
        softib_wire::packet::parse_body(b).unwrap().0.bth.psn == lost
    }));
    p.a.post(qa, 2, WrOpcode::Send, vec![sge]);
    p.a.post(qa, 3, WrOpcode::Send, vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, 20 * 1024),
            (2, WcStatus::Success, 20 * 1024)
        ]
    );
    assert_eq!(p.b.bytes(BUF + 0x2_0000, data.len()), data);
    assert!(p.b.hca.drops().get(DropReason::UcSequenceGap) >= 1);
    assert_eq!(p.a.completions().len(), 3, "UC sends complete when sent");
}

#[test]
fn uc_write_with_immediate_without_a_receive_is_dropped_alone() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    let data = pattern(26, 3000);
    p.a.fill(BUF, &data);
    // No receive for the immediate: the message is dropped (its data may already be in place,
    // UC cannot take it back), and it must not spoil the next message.
    let remote = p.b.remote(BUF + 0x1_0000);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWriteWithImm(remote, 1),
        vec![p.a.sge(BUF, 3000)],
    );
    p.drive();
    assert_eq!(p.b.hca.drops().get(DropReason::UcNoReceive), 1);
    p.b.post_recv(qb, 1, BUF + 0x2_0000, 4096);
    p.a.post(qa, 2, WrOpcode::Send, vec![p.a.sge(BUF, 3000)]);
    p.drive();
    assert_eq!(p.b.completions()[0].byte_len, 3000);
    assert_eq!(p.b.bytes(BUF + 0x2_0000, 3000), data);
    assert_eq!(
        p.b.hca.drops().total(),
        1,
        "nothing else dropped: {}",
        p.b.hca.drops()
    );
}

#[test]
fn uc_inline_send_ignores_the_sg_list() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    let inline = pattern(23, 200);
    let wr = SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::INLINE),
        inline_data: Some(inline.clone()),
        // A bogus SGE: inline data never reads it.
        ..p.a.wr(
            1,
            WrOpcode::SendWithImm(3),
            vec![p.a.sge(0xdead_0000, 5000)],
        )
    };
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        (wb[0].status, wb[0].byte_len, wb[0].imm_data),
        (WcStatus::Success, 200, Some(3))
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 200), inline);
}

// ---- UD ------------------------------------------------------------------------------------------

#[test]
fn ud_send_with_immediate_and_inline_data() {
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    let data = pattern(24, 300);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 2048);
    p.b.post_recv(qb, 2, BUF + 0x2_0000, 2048);
    let sge = p.a.sge(BUF, 300);
    let wr = SendWr {
        ud: Some(to_b),
        ..p.a.wr(1, WrOpcode::SendWithImm(0xFEED), vec![sge])
    };
    p.a.hca.post_send(qa, wr).unwrap();
    let wr = SendWr {
        ud: Some(to_b),
        flags: SendFlags::SIGNALED.with(SendFlags::INLINE),
        inline_data: Some(data[..100].to_vec()),
        ..p.a.wr(2, WrOpcode::Send, vec![])
    };
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len, w.imm_data, w.src_qp))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, 340, Some(0xFEED), qa),
            (2, WcStatus::Success, 140, None, qa)
        ]
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000 + 40, 300), data);
    assert_eq!(p.b.bytes(BUF + 0x2_0000 + 40, 100), data[..100].to_vec());
    let ops: Vec<_> = p.decoded_log().iter().map(|l| l.t.bth.opcode).collect();
    assert_eq!(
        ops,
        vec![
            softib_wire::Opcode(0x65), // UD SEND_ONLY_WITH_IMMEDIATE
            softib_wire::Opcode(0x64), // UD SEND_ONLY
        ]
    );
}

#[test]
fn ud_receive_with_the_grh_in_its_own_sge() {
    // The usual UD receive: a 40-byte SGE for the GRH area, the payload in a second one.
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    let data = pattern(25, 500);
    p.a.fill(BUF, &data);
    let sges = vec![
        p.b.sge(BUF + 0x1_0000, 40),
        p.b.sge(BUF + 0x2_0000, 0),
        p.b.sge(BUF + 0x3_0000, 1000),
    ];
    p.b.post_recv_sges(qb, 1, sges);
    let sge = p.a.sge(BUF, 500);
    p.a.post_ud(qa, 1, to_b, vec![sge]);
    p.drive();
    assert_eq!(p.b.completions()[0].byte_len, 540);
    assert_eq!(p.b.bytes(BUF + 0x3_0000, 500), data);
}

#[test]
fn ud_remote_qkey_with_bit_31_uses_the_senders_own_qkey() {
    // IBA §10.2.4: a WR's Q_Key with the high-order bit set means "use the QP's own Q_Key".
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    p.b.post_recv(qb, 1, BUF, 64);
    p.b.post_recv(qb, 2, BUF, 64);
    let controlled = UdDest {
        remote_qkey: 0x8000_0000,
        ..to_b
    };
    let sge = p.a.sge(BUF, 8);
    p.a.post_ud(qa, 1, controlled, vec![sge]);
    p.drive();
    let deths: Vec<u32> = p
        .decoded_log()
        .iter()
        .map(|l| l.t.deth.unwrap().qkey.0)
        .collect();
    assert_eq!(deths, vec![0x1111_1111], "A's own Q_Key went on the wire");
    assert_eq!(p.b.completions()[0].status, WcStatus::Success);
    // Change A's own Q_Key (UD allows it RTS -> RTS): the same WR now carries the new key
    // and B drops it, counting a Q_Key violation.
    let (mut attr, _) = p.a.hca.query_qp(qa).unwrap();
    attr.qkey = 0x2222_2222;
    p.a.hca.modify_qp(qa, &attr, AttrMask::QKEY).unwrap();
    p.a.post_ud(qa, 2, controlled, vec![sge]);
    p.drive();
    assert_eq!(
        p.decoded_log().last().unwrap().t.deth.unwrap().qkey.0,
        0x2222_2222
    );
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::QKeyMismatch), 1);
    assert_eq!(p.b.hca.counters(1).unwrap().qkey_violations, 1);
    // An explicit Q_Key without bit 31 is used as given.
    let (mut attr, _) = p.b.hca.query_qp(qb).unwrap();
    attr.qkey = 0x0000_0042;
    p.b.hca.modify_qp(qb, &attr, AttrMask::QKEY).unwrap();
    let explicit = UdDest {
        remote_qkey: 0x0000_0042,
        ..to_b
    };
    p.a.post_ud(qa, 3, explicit, vec![sge]);
    p.drive();
    assert_eq!(p.b.completions()[0].wr_id, 2);
}

/// Replaces port 1's P_Key table on one side.
fn set_pkeys(p: &mut Pair, on_b: bool, pkeys: Vec<PKey>) {
    let side = if on_b { &mut p.b } else { &mut p.a };
    let attr = PortAttr {
        pkeys,
        ..side.hca.port(1).unwrap().clone()
    };
    side.hca.set_port_attr(1, attr).unwrap();
}

#[test]
fn pkey_mismatch_is_dropped_and_counted() {
    // IBA §10.9.3: the BTH P_Key must match the receiving QP's partition (the low 15 bits),
    // and at least one side must be a full member.
    type Case = (&'static str, u16, u16, bool);
    let cases: [Case; 5] = [
        ("same key", 0xFFFF, 0xFFFF, true),
        ("other partition", 0xFFFF, 0x8002, false),
        ("full sender, limited receiver", 0x8002, 0x0002, true),
        ("limited sender, full receiver", 0x0002, 0x8002, true),
        ("both limited", 0x0002, 0x0002, false),
    ];
    for (what, a_key, b_key, delivered) in cases {
        let mut p = Pair::new();
        set_pkeys(&mut p, false, vec![PKey(a_key)]);
        set_pkeys(&mut p, true, vec![PKey(b_key)]);
        let (qa, qb, to_b, _) = p.ud();
        p.b.post_recv(qb, 1, BUF, 64);
        let sge = p.a.sge(BUF, 8);
        p.a.post_ud(qa, 1, to_b, vec![sge]);
        p.drive();
        assert_eq!(p.decoded_log()[0].t.bth.pkey, PKey(a_key), "{what}");
        let n = p.b.completions().len();
        let drops = p.b.hca.drops().get(DropReason::PKeyMismatch);
        let violations = p.b.hca.counters(1).unwrap().pkey_violations;
        if delivered {
            assert_eq!((n, drops, violations), (1, 0, 0), "{what}");
        } else {
            assert_eq!((n, drops, violations), (0, 1, 1), "{what}");
        }
    }
}

#[test]
fn rc_pkey_mismatch_is_dropped_until_the_requester_gives_up() {
    let mut p = Pair::new();
    set_pkeys(&mut p, true, vec![PKey(0x8002)]);
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF, 64);
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::RetryExcErr);
    assert_eq!(p.b.hca.drops().get(DropReason::PKeyMismatch), 8);
    assert_eq!(p.b.hca.counters(1).unwrap().pkey_violations, 8);
    assert!(p.b.completions().is_empty());
    assert_eq!(
        p.b.state(qb),
        QpState::Rts,
        "a P_Key violation is no QP error"
    );
}

// ---- UD multicast ----------------------------------------------------------------------------

#[test]
fn ud_multicast_reaches_every_attached_qp_and_only_those() {
    use softib_wire::{Gid, Lid, Qpn};
    let mut p = Pair::new();
    let (qa, qb, mut to_group, _) = p.ud();
    let qb2 = p.ud().1;
    let outsider = p.ud().1;
    let mgid = Gid([
        0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF,
    ]);
    for q in [qb, qb2] {
        p.b.hca.attach_mcast(q, mgid, Lid(0xC000)).unwrap();
    }
    // Attaching twice is allowed; RC QPs and unicast GIDs are refused.
    p.b.hca.attach_mcast(qb, mgid, Lid(0xC000)).unwrap();
    let (rc, _) = p.connect(QpType::Rc);
    assert!(p.a.hca.attach_mcast(rc, mgid, Lid(0xC000)).is_err());
    assert!(p.b.hca.attach_mcast(qb, Gid([0; 16]), Lid(0xC000)).is_err());
    for (i, q) in [qb, qb2, outsider].into_iter().enumerate() {
        p.b.post_recv(q, i as u64, BUF + 0x1_0000 * (i as u64 + 1), 2048);
    }
    let mut grh = [0u8; 40];
    grh[24..].copy_from_slice(&mgid.0);
    p.rx_meta.grh = Some(grh);
    to_group.remote_qpn = Qpn::MULTICAST;
    let sge = p.a.sge(BUF, 100);
    p.a.post_ud(qa, 1, to_group, vec![sge]);
    p.drive();
    let mut got: Vec<u64> = p.b.completions().iter().map(|w| w.wr_id).collect();
    got.sort();
    assert_eq!(got, vec![0, 1], "both members, once each; not the outsider");

    // Another group's packet, or one without a GRH, is dropped and counted.
    p.rx_meta.grh = None;
    p.a.post_ud(qa, 2, to_group, vec![sge]);
    p.drive();
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::Multicast), 1);

    // A detached QP, and a destroyed one, no longer receive.
    p.rx_meta.grh = Some(grh);
    p.b.hca.detach_mcast(qb, mgid).unwrap();
    assert!(p.b.hca.detach_mcast(qb, mgid).is_err());
    p.b.hca.destroy_qp(qb2).unwrap();
    p.a.post_ud(qa, 3, to_group, vec![sge]);
    p.drive();
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.drops().get(DropReason::Multicast), 2);
}
