//! Pair scenarios: two engines on a virtual wire, every operation on every transport, with
//! loss, duplication and peer errors. Named after the spec's compliance statements where
//! there is one.

mod util;

use softib_wire::packet::parse_body;
use softib_wire::{Opcode, Operation, RKey};

use crate::counters::DropReason;
use crate::verbs::{QpState, QpType, RemoteAddr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode};
use crate::Duration;
use util::{pattern, Pair, BUF};

fn opcode_of(bytes: &[u8]) -> Opcode {
    parse_body(bytes)
        .map(|(t, _)| t.bth.opcode)
        .unwrap_or(Opcode(0xFF))
}

fn is_op(bytes: &[u8], op: Operation) -> bool {
    opcode_of(bytes).operation() == op
}

// ---- RC: every operation --------------------------------------------------------------------

#[test]
fn rc_send_multi_packet_with_psn_wrap() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(1, 20_000); // 20 packets at MTU 1024; A's PSNs start at 0xFFFFF0 and wrap
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 77, BUF + 0x8_0000, 32_768);
    let sge = p.a.sge(BUF, data.len() as u32);
    p.a.post(qa, 5, WrOpcode::Send, vec![sge]);
    p.drive();
    let wa = p.a.completions();
    let wb = p.b.completions();
    assert_eq!(wa.len(), 1);
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode),
        (5, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len),
        (77, WcStatus::Success, 20_000)
    );
    assert_eq!(p.b.bytes(BUF + 0x8_0000, data.len()), data);
    // AckReq only on the last packet (fewer than 64 packets): one ACK comes back.
    let acks = p
        .log
        .iter()
        .filter(|(from_a, b)| !from_a && is_op(b, Operation::Acknowledge))
        .count();
    assert_eq!(acks, 1);
}

#[test]
fn rc_write_read_and_write_with_immediate() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(2, 5000);
    p.a.fill(BUF, &data);
    let remote = p.b.remote(BUF + 0x1000);
    let sge = p.a.sge(BUF, 5000);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(remote), vec![sge]);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1000, 5000), data);
    assert!(
        p.b.completions().is_empty(),
        "a plain WRITE consumes no receive"
    );
    // READ it back into another place.
    let sge = p.a.sge(BUF + 0x4_0000, 5000);
    p.a.post(qa, 2, WrOpcode::RdmaRead(remote), vec![sge]);
    p.drive();
    assert_eq!(p.a.bytes(BUF + 0x4_0000, 5000), data);
    let wa = p.a.completions();
    assert_eq!(
        wa.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaRead)
        ]
    );
    // WRITE with immediate consumes a receive and reports the immediate and the length.
    p.b.post_recv(qb, 9, BUF + 0x9_0000, 64);
    let sge = p.a.sge(BUF, 100);
    p.a.post(
        qa,
        3,
        WrOpcode::RdmaWriteWithImm(p.b.remote(BUF + 0x2_0000), 0xC0FFEE),
        vec![sge],
    );
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb.len(), 1);
    assert_eq!(wb[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wb[0].imm_data, Some(0xC0FFEE));
    assert_eq!(wb[0].byte_len, 100);
    assert_eq!(p.b.bytes(BUF + 0x2_0000, 100), data[..100].to_vec());
}

#[test]
fn rc_atomics_return_the_original_value() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.b.fill(BUF + 0x100, &40u64.to_le_bytes());
    let remote = p.b.remote(BUF + 0x100);
    let sge = p.a.sge(BUF + 0x10, 8);
    p.a.post(
        qa,
        1,
        WrOpcode::AtomicFetchAndAdd { remote, add: 2 },
        vec![sge],
    );
    p.drive();
    assert_eq!(p.a.bytes(BUF + 0x10, 8), 40u64.to_le_bytes());
    assert_eq!(p.b.bytes(BUF + 0x100, 8), 42u64.to_le_bytes());
    let sge = p.a.sge(BUF + 0x18, 8);
    p.a.post(
        qa,
        2,
        WrOpcode::AtomicCmpAndSwp {
            remote,
            compare: 42,
            swap: 7,
        },
        vec![sge],
    );
    let sge = p.a.sge(BUF + 0x20, 8);
    p.a.post(
        qa,
        3,
        WrOpcode::AtomicCmpAndSwp {
            remote,
            compare: 42,
            swap: 9,
        },
        vec![sge],
    );
    p.drive();
    assert_eq!(p.a.bytes(BUF + 0x18, 8), 42u64.to_le_bytes());
    assert_eq!(
        p.a.bytes(BUF + 0x20, 8),
        7u64.to_le_bytes(),
        "second CAS sees the first's swap"
    );
    assert_eq!(p.b.bytes(BUF + 0x100, 8), 7u64.to_le_bytes());
    let ops: Vec<_> =
        p.a.completions()
            .iter()
            .map(|w| (w.opcode, w.status))
            .collect();
    assert_eq!(
        ops,
        vec![
            (WcOpcode::FetchAdd, WcStatus::Success),
            (WcOpcode::CompSwap, WcStatus::Success),
            (WcOpcode::CompSwap, WcStatus::Success)
        ]
    );
}

#[test]
fn rc_send_with_invalidate_revokes_the_key() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let key = p.b.buf_key;
    p.b.post_recv(qb, 1, BUF, 64);
    let sge = p.a.sge(BUF, 16);
    p.a.post(qa, 1, WrOpcode::SendWithInv(RKey(key)), vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb[0].invalidated_rkey, Some(key));
    assert!(p.b.hca.mr(key).is_none());
}

// ---- RC: reliability --------------------------------------------------------------------------

#[test]
fn c9_105_duplicate_send_is_reacked_not_reexecuted() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF, 64);
    p.b.post_recv(qb, 2, BUF + 64, 64);
    // Lose B's ACK: A times out and sends the SEND again.
    p.drop_from_b = 1;
    let sge = p.a.sge(BUF, 32);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb.len(), 1, "the duplicate consumed no second receive");
    assert_eq!(p.a.completions().len(), 1);
    assert_eq!(p.b.hca.drops().get(DropReason::RcDuplicate), 1);
    let sends = p
        .log
        .iter()
        .filter(|(from_a, b)| *from_a && is_op(b, Operation::SendOnly))
        .count();
    assert_eq!(sends, 2);
}

#[test]
fn lost_middle_packet_triggers_one_sequence_nak_and_go_back_n() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(3, 10 * 1024);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x8_0000, 16 * 1024);
    // Drop A's second packet: B sees the third ahead of sequence.
    let mut n = 0;
    p.drop_if = Some(Box::new(move |from_a, _| {
        if from_a {
            n += 1;
            n == 2
        } else {
            false
        }
    }));
    let start = p.now;
    let sge = p.a.sge(BUF, data.len() as u32);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x8_0000, data.len()), data);
    let naks = p
        .log
        .iter()
        .filter(|(from_a, b)| {
            !from_a
                && parse_body(b)
                    .is_ok_and(|(t, _)| t.aeth.is_some_and(|a| a.syndrome.kind() == "nak"))
        })
        .count();
    assert_eq!(naks, 1, "one PSN sequence error NAK for the gap");
    let wa = p.a.completions();
    assert_eq!(wa[0].status, WcStatus::Success);
    // Recovered by the NAK, long before the 67 ms local ACK timeout.
    assert!(
        p.now.saturating_since(start) < Duration::from_millis(60),
        "took {}",
        p.now.saturating_since(start)
    );
}

#[test]
fn lost_request_recovers_by_local_ack_timeout() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF, 64);
    p.drop_from_a = 1;
    let start = p.now;
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.completions().len(), 1);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    // timeout 14: 4.096 µs × 2^14 ≈ 67.1 ms.
    assert!(p.now.saturating_since(start) >= Duration::from_micros(67_108));
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.b.fill(BUF + 0x100, &1u64.to_le_bytes());
    p.drop_from_b = 1; // the atomic ACK is lost; A retries the FetchAdd
    let remote = p.b.remote(BUF + 0x100);
    let sge = p.a.sge(BUF, 8);
    p.a.post(
        qa,
        1,
        WrOpcode::AtomicFetchAndAdd { remote, add: 10 },
        vec![sge],
    );
    p.drive();
    assert_eq!(
        p.b.bytes(BUF + 0x100, 8),
        11u64.to_le_bytes(),
        "executed exactly once"
    );
    assert_eq!(
        p.a.bytes(BUF, 8),
        1u64.to_le_bytes(),
        "the replayed ACK carries the original value"
    );
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    let fadds = p
        .log
        .iter()
        .filter(|(from_a, b)| *from_a && is_op(b, Operation::FetchAdd))
        .count();
    assert_eq!(fadds, 2);
}

#[test]
fn lost_read_response_is_retried_for_the_missing_part() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let data = pattern(4, 4096 + 100);
    p.b.fill(BUF + 0x2000, &data);
    // Lose B's third READ response (of five).
    let mut n = 0;
    p.drop_if = Some(Box::new(move |from_a, b| {
        if !from_a && opcode_of(b).operation() == Operation::RdmaReadResponseMiddle {
            n += 1;
            n == 2
        } else {
            false
        }
    }));
    let remote = p.b.remote(BUF + 0x2000);
    let sge = p.a.sge(BUF, data.len() as u32);
    p.a.post(qa, 1, WrOpcode::RdmaRead(remote), vec![sge]);
    p.drive();
    assert_eq!(p.a.bytes(BUF, data.len()), data);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    let reads: Vec<u32> = p
        .log
        .iter()
        .filter(|(from_a, b)| *from_a && is_op(b, Operation::RdmaReadRequest))
        .map(|(_, b)| parse_body(b).unwrap().0.reth.unwrap().dma_len)
        .collect();
    assert_eq!(
        reads,
        vec![4196, 4196 - 2048],
        "the retry asks only for what was missing"
    );
}

#[test]
fn every_packet_duplicated_delivers_exactly_once() {
    let mut p = Pair::new();
    p.duplicate = true;
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(5, 3000);
    p.a.fill(BUF, &data);
    p.b.fill(BUF + 0x300, &5u64.to_le_bytes());
    for i in 0..4 {
        p.b.post_recv(qb, i, BUF + 0x1_0000 + i * 0x1000, 4096);
    }
    for i in 0..3 {
        let sge = p.a.sge(BUF, 3000);
        p.a.post(qa, i, WrOpcode::Send, vec![sge]);
    }
    let sge = p.a.sge(BUF + 0x8000, 8);
    p.a.post(
        qa,
        10,
        WrOpcode::AtomicFetchAndAdd {
            remote: p.b.remote(BUF + 0x300),
            add: 1,
        },
        vec![sge],
    );
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb.len(), 3);
    for i in 0..3 {
        assert_eq!(p.b.bytes(BUF + 0x1_0000 + i * 0x1000, 3000), data);
    }
    assert_eq!(p.b.bytes(BUF + 0x300, 8), 6u64.to_le_bytes());
    let wa = p.a.completions();
    assert_eq!(
        wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 10]
    );
}

#[test]
fn rnr_nak_then_receive_posted() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive_for(Duration::from_millis(5));
    assert!(p.a.completions().is_empty());
    assert!(p.b.hca.drops().get(DropReason::RcRnrNakSent) >= 1);
    p.b.post_recv(qb, 1, BUF, 64);
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    assert_eq!(p.b.completions().len(), 1);
}

#[test]
fn rnr_retry_exhausted() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    // rnr_retry 1: one retry, then RNR_RETRY_EXC_ERR.
    let (mut attr, _) = p.a.hca.query_qp(qa).unwrap();
    attr.rnr_retry = 1;
    // RTS -> RTS cannot change rnr_retry; go through SQD -> SQD (RC allows RNR_RETRY there).
    attr.qp_state = QpState::Sqd;
    p.a.hca
        .modify_qp(qa, &attr, crate::AttrMask::STATE)
        .unwrap();
    p.a.hca
        .modify_qp(qa, &attr, crate::AttrMask::RNR_RETRY)
        .unwrap();
    attr.qp_state = QpState::Rts;
    p.a.hca
        .modify_qp(qa, &attr, crate::AttrMask::STATE)
        .unwrap();
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 2, WrOpcode::Send, vec![sge]);
    p.drive();
    let wa = p.a.completions();
    assert_eq!(
        wa.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::RnrRetryExcErr, WcStatus::WrFlushErr]
    );
    assert_eq!(p.a.hca.qp(qa).unwrap().state, QpState::Err);
}

#[test]
fn retry_exhausted_when_the_peer_is_gone() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.drop_from_a = usize::MAX;
    let start = p.now;
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(p.b.remote(BUF)), vec![sge]);
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 2, WrOpcode::RdmaWrite(p.b.remote(BUF)), vec![sge]);
    p.drive();
    let wa = p.a.completions();
    assert_eq!(
        wa.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]
    );
    // The first send plus retry_cnt = 7 retries, one local ACK timeout apart.
    assert_eq!(
        p.sent_a,
        2 + 7 * 2,
        "first try of both WRs, then 7 go-back-N rounds of both"
    );
    assert!(p.now.saturating_since(start) >= Duration::from_micros(8 * 67_108));
}

#[test]
fn remote_access_error_leaves_memory_untouched() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let before = p.b.bytes(BUF, 64);
    p.a.fill(BUF, &[0xAB; 64]);
    let bad = RemoteAddr {
        addr: BUF,
        rkey: RKey(p.b.buf_key ^ 0x100),
    };
    let sge = p.a.sge(BUF, 64);
    p.a.post(qa, 1, WrOpcode::RdmaWrite(bad), vec![sge]);
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::RemAccessErr);
    assert_eq!(p.b.bytes(BUF, 64), before);
    assert_eq!(p.b.hca.qp(qb).unwrap().state, QpState::Err);
    assert_eq!(p.a.hca.qp(qa).unwrap().state, QpState::Err);
    // Out of bounds is an access error too.
    let mut p = Pair::new();
    let (qa, _) = p.connect(QpType::Rc);
    let sge = p.a.sge(BUF, 64);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + util::BUF_LEN as u64 - 32)),
        vec![sge],
    );
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::RemAccessErr);
}

#[test]
fn receive_too_small_is_a_local_length_error_and_invalid_request() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF, 16);
    let sge = p.a.sge(BUF, 64);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.completions()[0].status, WcStatus::LocLenErr);
    assert_eq!(p.a.completions()[0].status, WcStatus::RemInvReqErr);
}

#[test]
fn bad_local_key_is_a_protection_error() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let mut sge = p.a.sge(BUF, 8);
    sge.lkey ^= 0x100;
    p.a.post(qa, 1, WrOpcode::RdmaWrite(p.b.remote(BUF)), vec![sge]);
    p.drive();
    let wa = p.a.completions();
    assert_eq!(wa[0].status, WcStatus::LocProtErr);
    assert_eq!(p.sent_a, 0, "nothing went on the wire");
}

#[test]
fn unsignaled_wrs_complete_silently_and_errors_always_report() {
    let mut p = Pair::new();
    p.sig_all = false;
    let (qa, _qb) = p.connect(QpType::Rc);
    let unsignaled = |p: &Pair, wr_id, rkey| SendWr {
        wr_id,
        opcode: WrOpcode::RdmaWrite(RemoteAddr { addr: BUF, rkey }),
        sg_list: vec![p.a.sge(BUF, 8)],
        flags: SendFlags::default(),
        inline_data: None,
        ud: None,
    };
    let good = RKey(p.b.buf_key);
    let wr = unsignaled(&p, 1, good);
    p.a.hca.post_send(qa, wr).unwrap();
    let mut signaled = unsignaled(&p, 2, good);
    signaled.flags = SendFlags::SIGNALED;
    p.a.hca.post_send(qa, signaled).unwrap();
    p.drive();
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        vec![2]
    );
    // IBA §10.7.3.1: an error completes even an unsignaled WR.
    let wr = unsignaled(&p, 3, RKey(good.0 ^ 0x100));
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    let wa = p.a.completions();
    assert_eq!((wa[0].wr_id, wa[0].status), (3, WcStatus::RemAccessErr));
}

#[test]
fn post_send_in_init_is_refused_with_the_reason() {
    let mut p = Pair::new();
    let qa = p.a.create_qp(QpType::Rc);
    let e =
        p.a.hca
            .post_send(
                qa,
                SendWr {
                    wr_id: 1,
                    opcode: WrOpcode::Send,
                    sg_list: vec![],
                    flags: SendFlags::default(),
                    inline_data: None,
                    ud: None,
                },
            )
            .unwrap_err();
    assert!(e.to_string().contains("RESET"), "{e}");
}

#[test]
fn entering_error_flushes_in_order() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.a.post_recv(qa, 100, BUF, 64);
    p.a.post_recv(qa, 101, BUF, 64);
    let (mut attr, _) = p.a.hca.query_qp(qa).unwrap();
    attr.qp_state = QpState::Err;
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    p.a.hca
        .modify_qp(qa, &attr, crate::AttrMask::STATE)
        .unwrap();
    let wa = p.a.completions();
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (1, WcStatus::WrFlushErr),
            (100, WcStatus::WrFlushErr),
            (101, WcStatus::WrFlushErr)
        ]
    );
}

// ---- UC ----------------------------------------------------------------------------------------

#[test]
fn uc_send_and_write() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    let data = pattern(6, 2500);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    let sge = p.a.sge(BUF, 2500);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    let sge = p.a.sge(BUF, 2500);
    p.a.post(
        qa,
        2,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x2_0000)),
        vec![sge],
    );
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 2500), data);
    assert_eq!(p.b.bytes(BUF + 0x2_0000, 2500), data);
    assert_eq!(p.a.completions().len(), 2);
    assert!(
        p.log.iter().all(|(from_a, _)| *from_a),
        "UC sends no acknowledgements"
    );
}

#[test]
fn uc_gap_drops_the_rest_of_the_message_and_the_next_one_arrives() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Uc);
    let data = pattern(7, 3000);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    p.b.post_recv(qb, 2, BUF + 0x2_0000, 4096);
    p.drop_from_a = 0;
    let mut n = 0;
    p.drop_if = Some(Box::new(move |_, _| {
        n += 1;
        n == 2
    }));
    for i in 0..2 {
        let sge = p.a.sge(BUF, 3000);
        p.a.post(qa, i, WrOpcode::Send, vec![sge]);
    }
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.len(),
        1,
        "the first message was lost, the second arrived"
    );
    assert_eq!(
        wb[0].wr_id, 1,
        "into the first receive WQE, which the lost message gave back"
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data);
    assert!(p.b.hca.drops().get(DropReason::UcSequenceGap) >= 1);
    assert_eq!(p.a.completions().len(), 2, "UC sends complete when sent");
}

// ---- UD ----------------------------------------------------------------------------------------

#[test]
fn ud_send_places_the_grh_area_first() {
    let mut p = Pair::new();
    let (qa, qb, to_b, _) = p.ud();
    let data = pattern(8, 1000);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 2048);
    let sge = p.a.sge(BUF, 1000);
    p.a.post_ud(qa, 1, to_b, vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 1040);
    assert_eq!(wb[0].src_qp, qa);
    assert_eq!(p.b.bytes(BUF + 0x1_0000 + 40, 1000), data);
}

#[test]
fn ud_without_receive_or_with_wrong_qkey_is_dropped_and_counted() {
    let mut p = Pair::new();
    let (qa, qb, mut to_b, _) = p.ud();
    let sge = p.a.sge(BUF, 10);
    p.a.post_ud(qa, 1, to_b, vec![sge]);
    p.drive();
    assert_eq!(p.b.hca.drops().get(DropReason::UdNoReceive), 1);
    assert_eq!(
        p.a.completions()[0].status,
        WcStatus::Success,
        "UD sends complete when sent"
    );
    p.b.post_recv(qb, 1, BUF, 64);
    to_b.remote_qkey = 0x2222;
    p.a.post_ud(qa, 2, to_b, vec![sge]);
    p.drive();
    assert_eq!(p.b.hca.drops().get(DropReason::QKeyMismatch), 1);
    assert!(p.b.completions().is_empty());
}

#[test]
fn ud_message_larger_than_the_mtu_fails_locally() {
    let mut p = Pair::new();
    let (qa, _qb, to_b, _) = p.ud();
    let sge = p.a.sge(BUF, 4097);
    p.a.post_ud(qa, 1, to_b, vec![sge]);
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::LocLenErr);
    assert_eq!(p.sent_a, 0);
    assert_eq!(p.a.hca.qp(qa).unwrap().state, QpState::Sqe);
}

mod access;
mod in_process;
mod rc;
mod states;
mod uc_ud;
mod verbs;
