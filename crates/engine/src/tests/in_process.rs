//! QPs whose peer is an engine of the same process (`Hca::set_in_process`): RC SENDs and
//! WRITEs go in `IN_PROCESS_SEGMENT`-byte packets with their payload left in memory, READ
//! responses too (a READ asks for them when it starts), and the receiver takes packets in two
//! parts. The bench
//! materializes every such packet (so drops, duplicates and the log see it whole) and hands
//! it over in parts, as the daemon does.

use softib_wire::Operation;

use super::util::{pattern, Pair, BUF};
use crate::verbs::{QpType, RemoteAddr, WcOpcode, WcStatus, WrOpcode};
use crate::{AttrMask, IN_PROCESS_SEGMENT};

/// A pair of connected RC QPs, both marked in-process, and receivers told so.
fn in_process_pair() -> (Pair, softib_wire::Qpn, softib_wire::Qpn) {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.a.hca.set_in_process(qa, true);
    p.b.hca.set_in_process(qb, true);
    p.rx_meta.in_process = true;
    (p, qa, qb)
}

fn requests(p: &Pair) -> Vec<(Operation, usize)> {
    p.decoded_log()
        .iter()
        .filter(|l| l.from_a)
        .map(|l| (l.op(), l.payload_len))
        .collect()
}

/// Fills `len` bytes of B at `BUF + 0x2_0000` and posts a READ of them into A at
/// `BUF + 0x6_0000`; returns the bytes.
fn post_read(p: &mut Pair, qa: softib_wire::Qpn, wr_id: u64, len: u32) -> Vec<u8> {
    let data = pattern(wr_id as u8, len as usize);
    p.b.fill(BUF + 0x2_0000, &data);
    let sge = p.a.sge(BUF + 0x6_0000, len);
    let src = p.b.remote(BUF + 0x2_0000);
    p.a.post(qa, wr_id, WrOpcode::RdmaRead(src), vec![sge]);
    data
}

/// Runs until quiet and checks that the READ `post_read` posted completed with `data`.
fn check_read(p: &mut Pair, wr_id: u64, data: &[u8]) {
    p.drive();
    let wa = p.a.completions();
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode, wa[0].byte_len),
        (
            wr_id,
            WcStatus::Success,
            WcOpcode::RdmaRead,
            data.len() as u32
        )
    );
    assert_eq!(p.a.bytes(BUF + 0x6_0000, data.len()), data);
}

#[test]
fn a_write_between_in_process_qps_goes_in_large_segments() {
    let (mut p, qa, _qb) = in_process_pair();
    let len = 200_000u32;
    let data = pattern(3, len as usize);
    p.a.fill(BUF, &data);
    let sge = p.a.sge(BUF, len);
    let dst = p.b.remote(BUF + 0x4_0000);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(dst), vec![sge]);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x4_0000, len as usize), data);
    let wa = p.a.completions();
    assert_eq!(wa.len(), 1);
    assert_eq!(wa[0].status, WcStatus::Success);
    let seg = IN_PROCESS_SEGMENT as usize;
    assert_eq!(
        requests(&p),
        vec![
            (Operation::RdmaWriteFirst, seg),
            (Operation::RdmaWriteMiddle, seg),
            (Operation::RdmaWriteMiddle, seg),
            (Operation::RdmaWriteLast, len as usize - 3 * seg),
        ]
    );
    assert_eq!(p.by_ref, (4, 0), "every payload left in A's memory");
}

#[test]
fn a_send_from_several_sges_into_several_lands_whole() {
    let (mut p, qa, qb) = in_process_pair();
    // The sender's message spans two SGEs: the segment that crosses them is gathered into
    // the packet, the others stay in memory.
    let (l1, l2) = (70_000u32, 50_000u32);
    let data = pattern(5, (l1 + l2) as usize);
    p.a.fill(BUF, &data[..l1 as usize]);
    p.a.fill(BUF + 0x8_0000, &data[l1 as usize..]);
    let sges = vec![p.a.sge(BUF, l1), p.a.sge(BUF + 0x8_0000, l2)];
    let r1 = p.b.sge(BUF, 30_000);
    let r2 = p.b.sge(BUF + 0x4_0000, 100_000);
    p.b.post_recv_sges(qb, 9, vec![r1, r2]);
    p.a.post(qa, 1, WrOpcode::SendWithImm(77), sges);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].status, wb[0].byte_len, wb[0].imm_data),
        (WcStatus::Success, l1 + l2, Some(77))
    );
    let mut got = p.b.bytes(BUF, 30_000);
    got.extend(p.b.bytes(BUF + 0x4_0000, (l1 + l2) as usize - 30_000));
    assert_eq!(got, data);
    // 61,440 bytes from the first SGE, then 8,560 + 50,000 gathered across both.
    assert_eq!(requests(&p).len(), 2);
    assert_eq!(p.by_ref, (1, 0));
}

#[test]
fn a_read_from_an_in_process_peer_comes_in_large_segments() {
    let (mut p, qa, _qb) = in_process_pair();
    let len = 150_000u32;
    let data = post_read(&mut p, qa, 4, len);
    check_read(&mut p, 4, &data);
    // The request asked for large segments; the responses' payloads stay in B's memory.
    let seg = IN_PROCESS_SEGMENT as usize;
    let responses: Vec<_> = p
        .decoded_log()
        .iter()
        .filter(|l| !l.from_a)
        .map(|l| (l.op(), l.payload_len))
        .collect();
    assert_eq!(
        responses,
        vec![
            (Operation::RdmaReadResponseFirst, seg),
            (Operation::RdmaReadResponseMiddle, seg),
            (Operation::RdmaReadResponseLast, len as usize - 2 * seg),
        ]
    );
    assert_eq!(p.by_ref, (0, 3));
}

#[test]
fn a_read_started_before_the_mark_keeps_the_path_mtu() {
    // The READ is sized when it starts: marked in-process only after its request went out
    // (as a link marks a QP when it first sees where its packets go), it is answered, and
    // retried, at the path MTU (bring_up's is 1024).
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.rx_meta.in_process = true;
    let data = post_read(&mut p, qa, 5, 20_000);
    p.transmit();
    p.a.hca.set_in_process(qa, true);
    p.b.hca.set_in_process(qb, true);
    // The first responses are lost: the retried request must ask for the path MTU too.
    p.drop_from_b = 3;
    check_read(&mut p, 5, &data);
    assert!(p
        .decoded_log()
        .iter()
        .filter(|l| !l.from_a)
        .all(|l| l.payload_len <= 1024));
    // ...and a READ started now goes in large segments.
    let before = p.log.len();
    let data = post_read(&mut p, qa, 6, 20_000);
    check_read(&mut p, 6, &data);
    let large = p.decoded_log()[before..]
        .iter()
        .filter(|l| !l.from_a)
        .count();
    assert_eq!(large, 1, "20,000 bytes in one in-process segment");
}

#[test]
fn large_segments_survive_loss_and_duplication() {
    let (mut p, qa, qb) = in_process_pair();
    let mut expect = Vec::new();
    for i in 0..6u64 {
        let len = 90_000 + 10_000 * i as u32;
        let data = pattern(i as u8, len as usize);
        let at = BUF + 0x2_0000 * (i % 3);
        p.a.fill(at, &data[..]);
        let sge = p.a.sge(at, len);
        if i % 2 == 0 {
            p.b.post_recv(qb, i, BUF + 0x8_0000, len);
            p.a.post(qa, i, WrOpcode::Send, vec![sge]);
        } else {
            let dst = p.b.remote(BUF + 0x8_0000);
            p.a.post(qa, i, WrOpcode::RdmaWrite(dst), vec![sge]);
        }
        // Every third request packet lost, everything duplicated.
        let mut n = 0;
        p.drop_if = Some(Box::new(move |from_a, _| {
            n += 1;
            from_a && n % 3 == 0
        }));
        p.duplicate = true;
        p.drive();
        assert_eq!(p.b.bytes(BUF + 0x8_0000, len as usize), data, "message {i}");
        expect.push(i);
    }
    let done: Vec<u64> =
        p.a.completions()
            .iter()
            .filter(|w| w.status == WcStatus::Success)
            .map(|w| w.wr_id)
            .collect();
    assert_eq!(done, expect);
}

#[test]
fn a_receiver_not_told_in_process_refuses_large_segments() {
    let (mut p, qa, _qb) = in_process_pair();
    p.rx_meta.in_process = false;
    let sge = p.a.sge(BUF, 100_000);
    let dst = p.b.remote(BUF + 0x4_0000);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(dst), vec![sge]);
    p.drive();
    // IBA's length rule holds on a wire: B answers with a NAK (invalid request).
    let wa = p.a.completions();
    assert_eq!(wa[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn a_new_path_clears_the_mark() {
    let (mut p, qa, _qb) = in_process_pair();
    // Through SQD to RTS with a new path: the link has to say again where it leads.
    p.a.modify_state(qa, crate::verbs::QpState::Sqd);
    let (attr, _) = p.a.hca.query_qp(qa).unwrap();
    p.a.hca.modify_qp(qa, &attr, AttrMask::AV).unwrap();
    p.a.modify_state(qa, crate::verbs::QpState::Rts);
    let sge = p.a.sge(BUF, 5000);
    let dst: RemoteAddr = p.b.remote(BUF);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(dst), vec![sge]);
    p.drive();
    assert_eq!(requests(&p).len(), 5, "segments of the path MTU again");
}
