//! RC scenarios beyond the basics in `tests/mod.rs`: immediate data, scatter/gather lists and
//! zero-length messages, fences and `max_rd_atomic`, the PSN window and AckReq spacing, NAK
//! codes and what they leave behind, PSN wrap in READ responses, and packets reordered or
//! duplicated per operation.

use softib_wire::aeth::NakCode;
use softib_wire::{Operation, Psn, Qpn, RKey, Syndrome};

use super::util::{pattern, Logged, Pair, BUF, BUF_LEN};
use crate::counters::DropReason;
use crate::memory::RegionId;
use crate::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RemoteAddr, SendFlags, SendWr, WcOpcode, WcStatus,
    WrOpcode,
};
use crate::{AttrMask, Duration};

/// The local ACK timeout of `bring_up`'s QPs (timeout 14: 4.096 µs × 2^14).
const ACK_TIMEOUT: Duration = Duration::from_micros(67_109);

fn from_a(log: &[Logged]) -> impl Iterator<Item = &Logged> {
    log.iter().filter(|l| l.from_a)
}

fn naks(log: &[Logged]) -> Vec<Syndrome> {
    log.iter()
        .filter(|l| !l.from_a)
        .filter_map(Logged::syndrome)
        .filter(|s| s.kind() != "ack")
        .collect()
}

/// Moves A's RC QP through SQD to change attributes RTS -> RTS does not accept
/// (`max_rd_atomic`, `retry_cnt`, `rnr_retry`), then back to RTS.
fn modify_in_sqd(p: &mut Pair, qpn: Qpn, change: impl Fn(&mut crate::QpAttr), mask: AttrMask) {
    let side = &mut p.a;
    side.modify_state(qpn, QpState::Sqd);
    let (mut attr, _) = side.hca.query_qp(qpn).unwrap();
    change(&mut attr);
    side.hca.modify_qp(qpn, &attr, mask).unwrap();
    side.modify_state(qpn, QpState::Rts);
}

// ---- immediate data, scatter/gather, zero length ---------------------------------------------

#[test]
fn rc_send_with_immediate_reports_it_in_the_receive_completion() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(11, 3000);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 7, BUF + 0x1_0000, 4096);
    let sge = p.a.sge(BUF, 3000);
    p.a.post(qa, 1, WrOpcode::SendWithImm(0xDEAD_BEEF), vec![sge]);
    // A one-packet SEND with immediate too.
    p.b.post_recv(qb, 8, BUF + 0x2_0000, 64);
    let sge = p.a.sge(BUF, 10);
    p.a.post(qa, 2, WrOpcode::SendWithImm(42), vec![sge]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        vec![
            (
                7,
                WcStatus::Success,
                WcOpcode::Recv,
                3000,
                Some(0xDEAD_BEEF)
            ),
            (8, WcStatus::Success, WcOpcode::Recv, 10, Some(42)),
        ]
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data);
    // The immediate rides only on the packet that ends the message.
    let ops: Vec<_> = from_a(&p.decoded_log())
        .map(|l| (l.op(), l.t.immdt.map(|i| i.data)))
        .collect();
    assert_eq!(
        ops,
        vec![
            (Operation::SendFirst, None),
            (Operation::SendMiddle, None),
            (Operation::SendLastWithImmediate, Some(0xDEAD_BEEF)),
            (Operation::SendOnlyWithImmediate, Some(42)),
        ]
    );
    let wa = p.a.completions();
    assert!(wa.iter().all(|w| w.status == WcStatus::Success
        && w.opcode == WcOpcode::Send
        && w.imm_data.is_none()));
}

#[test]
fn rc_scatter_gather_lists_with_zero_length_sges_on_both_sides() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(12, 3000);
    // The message is gathered from three pieces in a scrambled order, with two empty SGEs.
    p.a.fill(BUF + 0x3000, &data[..100]);
    p.a.fill(BUF + 0x1000, &data[100..2000]);
    p.a.fill(BUF + 0x5000, &data[2000..]);
    let gather = vec![
        p.a.sge(BUF + 0x3000, 100),
        p.a.sge(BUF + 0x9000, 0),
        p.a.sge(BUF + 0x1000, 1900),
        p.a.sge(BUF + 0x5000, 1000),
    ];
    // ... and scattered into four pieces at B, starting with an empty one; the last has room
    // to spare.
    let scatter = vec![
        p.b.sge(BUF + 0x7000, 0),
        p.b.sge(BUF + 0x2000, 1500),
        p.b.sge(BUF + 0x4000, 1),
        p.b.sge(BUF + 0x8000, 2000),
    ];
    p.b.post_recv_sges(qb, 1, scatter);
    p.a.post(qa, 1, WrOpcode::Send, gather.clone());
    p.drive();
    let wb = p.b.completions();
    assert_eq!((wb[0].status, wb[0].byte_len), (WcStatus::Success, 3000));
    assert_eq!(p.b.bytes(BUF + 0x2000, 1500), data[..1500].to_vec());
    assert_eq!(p.b.bytes(BUF + 0x4000, 1), data[1500..1501].to_vec());
    assert_eq!(p.b.bytes(BUF + 0x8000, 1499), data[1501..].to_vec());
    assert_eq!(
        p.b.bytes(BUF + 0x8000 + 1499, 1),
        vec![0],
        "nothing beyond the message"
    );

    // The same list gathers an RDMA WRITE, and a READ scatters into several SGEs.
    p.a.post(
        qa,
        2,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x6_0000)),
        gather,
    );
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x6_0000, 3000), data);
    let read_into = vec![
        p.a.sge(BUF + 0x2_0000, 1),
        p.a.sge(BUF + 0x2_1000, 0),
        p.a.sge(BUF + 0x2_2000, 2999),
    ];
    p.a.post(
        qa,
        3,
        WrOpcode::RdmaRead(p.b.remote(BUF + 0x6_0000)),
        read_into,
    );
    p.drive();
    assert_eq!(p.a.bytes(BUF + 0x2_0000, 1), data[..1].to_vec());
    assert_eq!(p.a.bytes(BUF + 0x2_2000, 2999), data[1..].to_vec());
    let wa = p.a.completions();
    assert_eq!(
        wa.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, 3000),
            (2, WcStatus::Success, 3000),
            (3, WcStatus::Success, 3000)
        ]
    );
}

#[test]
fn c9_88_zero_length_send_write_and_read_need_no_valid_key() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.fill(BUF, &[0x5A; 16]);
    p.b.post_recv(qb, 1, BUF + 0x100, 64);
    p.b.post_recv_sges(qb, 2, vec![]);
    p.b.post_recv(qb, 3, BUF + 0x200, 64);
    p.a.post(qa, 1, WrOpcode::Send, vec![]);
    // A zero-length SEND fits a receive with no SGE at all.
    p.a.post(qa, 2, WrOpcode::SendWithImm(5), vec![]);
    // C9-88 (as rxe cites it): a zero-length RDMA operation needs no valid R_Key or address;
    // neither the WRITE nor the READ touches memory.
    let nowhere = RemoteAddr {
        addr: 0xdead_0000,
        rkey: RKey(0xBAD),
    };
    p.a.post(qa, 3, WrOpcode::RdmaWrite(nowhere), vec![]);
    p.a.post(qa, 4, WrOpcode::RdmaRead(nowhere), vec![]);
    p.a.post(qa, 5, WrOpcode::RdmaWriteWithImm(nowhere, 6), vec![]);
    p.drive();
    let wa = p.a.completions();
    assert_eq!(
        wa.iter()
            .map(|w| (w.wr_id, w.status, w.byte_len))
            .collect::<Vec<_>>(),
        (1..=5)
            .map(|i| (i, WcStatus::Success, 0))
            .collect::<Vec<_>>()
    );
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::Recv, 0, None),
            (2, WcStatus::Success, WcOpcode::Recv, 0, Some(5)),
            (3, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0, Some(6)),
        ]
    );
    assert_eq!(p.b.bytes(BUF, 16), vec![0x5A; 16]);
    // One packet each, with no payload; the READ is answered by an empty READ response ONLY.
    let log = p.decoded_log();
    let ops: Vec<_> = log
        .iter()
        .map(|l| (l.from_a, l.op(), l.payload_len))
        .collect();
    assert!(ops.contains(&(true, Operation::SendOnly, 0)));
    assert!(ops.contains(&(true, Operation::RdmaWriteOnly, 0)));
    assert!(ops.contains(&(false, Operation::RdmaReadResponseOnly, 0)));
    assert!(log.iter().filter_map(|l| l.t.reth).all(|r| r.dma_len == 0));
    assert_eq!(p.a.state(qa), QpState::Rts);
}

// ---- fences and max_rd_atomic -------------------------------------------------------------------

/// Where in the log the first packet of `op` from A (or B) is.
fn position_of(log: &[Logged], from_a: bool, op: Operation) -> Option<usize> {
    log.iter().position(|l| l.from_a == from_a && l.op() == op)
}

#[test]
fn fenced_wr_waits_until_the_read_before_it_completes() {
    for fence in [false, true] {
        let mut p = Pair::new();
        let (qa, qb) = p.connect(QpType::Rc);
        p.b.post_recv(qb, 1, BUF, 64);
        let sge = p.a.sge(BUF + 0x1000, 3000);
        p.a.post(
            qa,
            1,
            WrOpcode::RdmaRead(p.b.remote(BUF + 0x8000)),
            vec![sge],
        );
        let flags = if fence {
            SendFlags::SIGNALED.with(SendFlags::FENCE)
        } else {
            SendFlags::SIGNALED
        };
        let sge = p.a.sge(BUF, 8);
        let wr = SendWr {
            flags,
            ..p.a.wr(2, WrOpcode::Send, vec![sge])
        };
        p.a.hca.post_send(qa, wr).unwrap();
        p.drive();
        let log = p.decoded_log();
        let send = position_of(&log, true, Operation::SendOnly).unwrap();
        let last_response = position_of(&log, false, Operation::RdmaReadResponseLast).unwrap();
        if fence {
            assert!(
                send > last_response,
                "the fenced SEND left only after the READ's data had all arrived"
            );
        } else {
            assert_eq!(
                send, 1,
                "unfenced, the SEND follows the READ request at once"
            );
        }
        assert_eq!(
            p.a.completions()
                .iter()
                .map(|w| w.status)
                .collect::<Vec<_>>(),
            vec![WcStatus::Success; 2]
        );
    }
}

#[test]
fn fence_also_waits_for_an_atomic_but_not_for_writes() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let sge = p.a.sge(BUF, 8);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x100)),
        vec![sge],
    );
    let sge = p.a.sge(BUF + 8, 8);
    let fenced_write = |p: &Pair, wr_id, sge| SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::FENCE),
        ..p.a.wr(
            wr_id,
            WrOpcode::RdmaWrite(p.b.remote(BUF + 0x200)),
            vec![sge],
        )
    };
    // Behind a plain WRITE, a fence waits for nothing.
    let wr = fenced_write(&p, 2, sge);
    p.a.hca.post_send(qa, wr).unwrap();
    let sge = p.a.sge(BUF + 16, 8);
    p.a.post(
        qa,
        3,
        WrOpcode::AtomicFetchAndAdd {
            remote: p.b.remote(BUF + 0x300),
            add: 1,
        },
        vec![sge],
    );
    let sge = p.a.sge(BUF + 8, 8);
    let wr = fenced_write(&p, 4, sge);
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    let log = p.decoded_log();
    let ops: Vec<_> = log.iter().map(|l| (l.from_a, l.op())).collect();
    assert_eq!(
        ops,
        vec![
            (true, Operation::RdmaWriteOnly),
            (true, Operation::RdmaWriteOnly),
            (true, Operation::FetchAdd),
            (false, Operation::Acknowledge),
            (false, Operation::AtomicAcknowledge),
            (true, Operation::RdmaWriteOnly),
            (false, Operation::Acknowledge),
        ]
    );
}

#[test]
fn max_rd_atomic_one_keeps_a_single_read_or_atomic_outstanding() {
    for max_rd_atomic in [1u8, 2] {
        let mut p = Pair::new();
        let (qa, _qb) = p.connect(QpType::Rc);
        modify_in_sqd(
            &mut p,
            qa,
            |a| a.max_rd_atomic = max_rd_atomic,
            AttrMask::MAX_QP_RD_ATOMIC,
        );
        for i in 0..3u64 {
            let sge = p.a.sge(BUF + i * 0x1000, 2048);
            p.a.post(
                qa,
                i,
                WrOpcode::RdmaRead(p.b.remote(BUF + 0x8000)),
                vec![sge],
            );
        }
        let sge = p.a.sge(BUF + 0x9000, 8);
        p.a.post(
            qa,
            3,
            WrOpcode::AtomicFetchAndAdd {
                remote: p.b.remote(BUF + 0x100),
                add: 1,
            },
            vec![sge],
        );
        p.drive();
        // Walk the log: a request opens one, the response that ends it closes one.
        let mut outstanding = 0;
        let mut most = 0;
        for l in p.decoded_log() {
            match (l.from_a, l.op()) {
                (true, Operation::RdmaReadRequest | Operation::FetchAdd) => {
                    outstanding += 1;
                    most = most.max(outstanding);
                }
                (false, Operation::RdmaReadResponseLast | Operation::AtomicAcknowledge) => {
                    outstanding -= 1
                }
                _ => {}
            }
        }
        assert_eq!(most, max_rd_atomic, "max_rd_atomic {max_rd_atomic}");
        assert_eq!(
            p.a.completions()
                .iter()
                .map(|w| w.status)
                .collect::<Vec<_>>(),
            vec![WcStatus::Success; 4]
        );
    }
}

// ---- the PSN window and AckReq spacing ----------------------------------------------------------

#[test]
fn ack_req_every_max_pkt_per_ack_packets_and_on_the_last() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let len = 200 * 1024; // 200 packets at MTU 1024
    let data = pattern(13, len);
    p.a.fill(BUF, &data);
    let sge = p.a.sge(BUF, len as u32);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x8_0000)),
        vec![sge],
    );
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x8_0000, len), data);
    let log = p.decoded_log();
    let first = Psn::new(0xFF_FFF0);
    let ack_req: Vec<i32> = from_a(&log)
        .filter(|l| l.t.bth.ack_req)
        .map(|l| l.psn().diff(first))
        .collect();
    // rxe's RXE_MAX_PKT_PER_ACK = 64: packets 64, 128 and 192 of the message, and its last.
    assert_eq!(ack_req, vec![63, 127, 191, 199]);
    assert_eq!(from_a(&log).count(), 200, "no retransmission");
    // The responder answers only packets that ask; ACKs it has not sent yet when a later
    // one is due are coalesced into the later one (here the whole 128-PSN window arrives at
    // once, so the ACK of 63 gives way to the ACK of 127).
    let acks: Vec<i32> = log
        .iter()
        .filter(|l| !l.from_a)
        .map(|l| l.psn().diff(first))
        .collect();
    assert!(acks.iter().all(|a| ack_req.contains(a)), "{acks:?}");
    assert_eq!(acks, vec![127, 199]);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
}

#[test]
fn no_more_than_the_window_in_flight_when_acks_are_lost_and_the_window_halves_on_loss() {
    for window in [128u32, 16] {
        let mut p = Pair::with_config(|c| c.transport.max_unacked_psns = window);
        let (qa, _qb) = p.connect(QpType::Rc);
        // Every ACK is lost.
        p.drop_if = Some(Box::new(|from_a, _| !from_a));
        let sge = p.a.sge(BUF, 300 * 1024);
        p.a.post(
            qa,
            1,
            WrOpcode::RdmaWrite(p.b.remote(BUF + 0x8_0000)),
            vec![sge],
        );
        p.drive_briefly();
        assert_eq!(p.sent_a, window as usize, "window {window}");
        let psns: Vec<i32> = from_a(&p.decoded_log())
            .map(|l| l.psn().diff(Psn::new(0xFF_FFF0)))
            .collect();
        assert_eq!(psns, (0..window as i32).collect::<Vec<_>>());
        // One local ACK timeout later go-back-N resends from the first unacknowledged PSN,
        // with the congestion window halved by the loss: half the window, no further.
        p.drive_for(ACK_TIMEOUT);
        let half = window as usize / 2;
        assert_eq!(p.sent_a, window as usize + half);
        let again: Vec<i32> = from_a(&p.decoded_log())
            .skip(window as usize)
            .map(|l| l.psn().diff(Psn::new(0xFF_FFF0)))
            .collect();
        assert_eq!(again, psns[..half]);
        assert!(p.a.completions().is_empty());
    }
}

#[test]
fn a_window_smaller_than_the_ack_interval_does_not_wait_for_the_timer() {
    // With only 16 PSNs allowed in flight but AckReq every 64 packets, the packet that fills
    // the window must ask for an ACK, or the requester stalls until its local ACK timeout.
    let mut p = Pair::with_config(|c| {
        c.transport.max_unacked_psns = 16;
        c.transport.max_pkt_per_ack = 64;
    });
    let (qa, _qb) = p.connect(QpType::Rc);
    let len = 100 * 1024;
    let data = pattern(14, len);
    p.a.fill(BUF, &data);
    let sge = p.a.sge(BUF, len as u32);
    let start = p.now;
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x8_0000)),
        vec![sge],
    );
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x8_0000, len), data);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    assert_eq!(p.sent_a, 100, "no retransmission");
    assert!(
        p.now.saturating_since(start) < ACK_TIMEOUT,
        "took {}",
        p.now.saturating_since(start)
    );
    // In flight never exceeded the window: every AckReq'd PSN is at most 16 after the
    // previous one.
    let log = p.decoded_log();
    let asked: Vec<i32> = from_a(&log)
        .filter(|l| l.t.bth.ack_req)
        .map(|l| l.psn().diff(Psn::new(0xFF_FFF0)))
        .collect();
    assert!(asked.windows(2).all(|w| w[1] - w[0] <= 16), "{asked:?}");
    assert_eq!(asked.last(), Some(&99));
}

#[test]
fn an_ack_that_comes_after_the_timeout_acknowledges_what_was_sent_before_the_rewind() {
    // A round trip longer than the local ACK timeout (a receiver whose socket holds a
    // flood's backlog delays every packet): the timer fires, the requester goes back to the
    // first unacknowledged PSN with half the window, and then the ACK of the whole first
    // window arrives. It acknowledges every PSN it names that was transmitted (IBA
    // §9.7.5.1.1), the ones sent before the rewind too: the WRITE completes then, and only
    // what the rewind had already resent is sent twice. Counting only what had been sent
    // again since the rewind made the requester resend everything the responder had.
    let mut p = Pair::new();
    p.latency = Duration::from_micros(50_000);
    let (qa, _qb) = p.connect(QpType::Rc);
    let len = 128 * 1024; // the whole PSN window at MTU 1024
    let data = pattern(15, len);
    p.a.fill(BUF, &data);
    let sge = p.a.sge(BUF, len as u32);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x8_0000)),
        vec![sge],
    );
    // The timeout (67 ms) resends the first half of the window; the ACK of all 128 PSNs
    // comes back at 100 ms.
    p.drive_for(Duration::from_micros(100_001));
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success)],
        "the ACK of the first window completes the WRITE"
    );
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x8_0000, len), data);
    assert_eq!(
        p.sent_a,
        128 + 64,
        "only what the timeout resent is sent twice"
    );
    assert_eq!(p.b.hca.drops().get(DropReason::RcDuplicate), 64);
}

// ---- NAK codes, completion statuses, states and async events -------------------------------------

/// What a responder error leaves behind.
#[derive(Debug, PartialEq, Eq)]
struct Aftermath {
    /// A's completions: (wr_id, status).
    a_wcs: Vec<(u64, WcStatus)>,
    /// The NAKs B sent.
    naks: Vec<Syndrome>,
    a_state: QpState,
    b_state: QpState,
    a_events: Vec<AsyncEvent>,
    b_events: Vec<AsyncEvent>,
}

/// Runs `wr` (wr_id 1) followed by a harmless WRITE (wr_id 2) from A, after `prepare` (whose
/// result `wr` gets) set B up; returns what happened and B's QPN.
fn aftermath<T>(
    prepare: impl FnOnce(&mut Pair, Qpn) -> T,
    wr: impl FnOnce(&Pair, T) -> SendWr,
) -> (Aftermath, Qpn) {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let prepared = prepare(&mut p, qb);
    let wr = wr(&p, prepared);
    p.a.hca.post_send(qa, wr).unwrap();
    let sge = p.a.sge(BUF, 8);
    p.a.post(
        qa,
        2,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x100)),
        vec![sge],
    );
    p.drive();
    let log = p.decoded_log();
    let a = Aftermath {
        a_wcs: p
            .a
            .completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect(),
        naks: naks(&log),
        a_state: p.a.state(qa),
        b_state: p.b.state(qb),
        a_events: p.a.events(),
        b_events: p.b.events(),
    };
    (a, qb)
}

fn expect(status: WcStatus, code: NakCode, event: AsyncEvent) -> Aftermath {
    Aftermath {
        a_wcs: vec![(1, status), (2, WcStatus::WrFlushErr)],
        naks: vec![Syndrome::Nak(code)],
        a_state: QpState::Err,
        b_state: QpState::Err,
        a_events: vec![],
        b_events: vec![event],
    }
}

#[test]
fn nak_invalid_request_for_a_write_the_qp_does_not_allow() {
    // B's QP grants remote READ but not remote WRITE: the request itself is invalid for this
    // QP (class C), NAK invalid request -> REM_INV_REQ_ERR, and the responder's QP raises
    // IBV_EVENT_QP_REQ_ERR.
    let (got, qb) = aftermath(
        |p, qb| {
            let (mut attr, _) = p.b.hca.query_qp(qb).unwrap();
            attr.qp_access_flags = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_READ);
            p.b.hca
                .modify_qp(qb, &attr, AttrMask::ACCESS_FLAGS)
                .unwrap();
        },
        |p, ()| {
            let sge = p.a.sge(BUF, 64);
            p.a.wr(1, WrOpcode::RdmaWrite(p.b.remote(BUF + 0x1000)), vec![sge])
        },
    );
    assert_eq!(
        got,
        expect(
            WcStatus::RemInvReqErr,
            NakCode::InvalidRequest,
            AsyncEvent::QpReqErr(qb)
        )
    );
}

#[test]
fn nak_invalid_request_for_a_misaligned_atomic() {
    let (got, qb) = aftermath(
        |_, _| {},
        |p, ()| {
            let sge = p.a.sge(BUF, 8);
            let remote = p.b.remote(BUF + 0x104);
            p.a.wr(1, WrOpcode::AtomicFetchAndAdd { remote, add: 1 }, vec![sge])
        },
    );
    assert_eq!(
        got,
        expect(
            WcStatus::RemInvReqErr,
            NakCode::InvalidRequest,
            AsyncEvent::QpReqErr(qb)
        )
    );
}

#[test]
fn nak_remote_access_error_for_bad_keys_bounds_and_rights() {
    // An MR at B with LOCAL_WRITE and REMOTE_WRITE only: no READ, no atomics.
    let write_only = |p: &mut Pair| {
        p.b.hca
            .reg_mr(
                p.b.pd,
                BUF,
                0x1000,
                AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE),
                RegionId(1),
            )
            .unwrap()
    };
    type Case = (&'static str, bool, fn(&Pair, u32) -> SendWr);
    let cases: [Case; 5] = [
        ("READ with a bad R_Key", false, |p, _| {
            let bad = RemoteAddr {
                addr: BUF,
                rkey: RKey(p.b.buf_key ^ 0x100),
            };
            p.a.wr(1, WrOpcode::RdmaRead(bad), vec![p.a.sge(BUF, 64)])
        }),
        ("READ beyond the region", false, |p, _| {
            let end = p.b.remote(BUF + BUF_LEN as u64 - 8);
            p.a.wr(1, WrOpcode::RdmaRead(end), vec![p.a.sge(BUF, 64)])
        }),
        ("READ from an MR without REMOTE_READ", true, |p, key| {
            let r = RemoteAddr {
                addr: BUF,
                rkey: RKey(key),
            };
            p.a.wr(1, WrOpcode::RdmaRead(r), vec![p.a.sge(BUF, 64)])
        }),
        ("atomic on an MR without REMOTE_ATOMIC", true, |p, key| {
            let remote = RemoteAddr {
                addr: BUF + 0x10,
                rkey: RKey(key),
            };
            p.a.wr(
                1,
                WrOpcode::AtomicCmpAndSwp {
                    remote,
                    compare: 0,
                    swap: 1,
                },
                vec![p.a.sge(BUF, 8)],
            )
        }),
        ("multi-packet WRITE running off the end", false, |p, _| {
            let end = p.b.remote(BUF + BUF_LEN as u64 - 2048);
            p.a.wr(1, WrOpcode::RdmaWrite(end), vec![p.a.sge(BUF, 3000)])
        }),
    ];
    for (what, needs_mr, wr) in cases {
        let (got, qb) = aftermath(|p, _| if needs_mr { write_only(p) } else { 0 }, wr);
        assert_eq!(
            got,
            expect(
                WcStatus::RemAccessErr,
                NakCode::RemoteAccessError,
                AsyncEvent::QpAccessErr(qb)
            ),
            "{what}"
        );
    }
}

#[test]
fn responder_in_error_flushes_its_receives() {
    // After a class C error the responder's QP is in ERR: its posted receives flush, and so
    // does a receive posted afterwards.
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 50, BUF, 64);
    let remote = p.b.remote(BUF + 0x104);
    let sge = p.a.sge(BUF, 8);
    p.a.post(
        qa,
        1,
        WrOpcode::AtomicFetchAndAdd { remote, add: 1 },
        vec![sge],
    );
    p.drive();
    p.b.post_recv(qb, 51, BUF, 64);
    assert_eq!(
        p.b.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(50, WcStatus::WrFlushErr), (51, WcStatus::WrFlushErr)]
    );
}

// ---- PSN wrap in READ responses --------------------------------------------------------------

#[test]
fn read_responses_wrap_the_psn_and_a_lost_one_is_retried_across_the_wrap() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let len = 30 * 1024; // 30 responses: PSNs 0xFFFFF0 ..= 0x00000D
    let data = pattern(15, len);
    p.b.fill(BUF + 0x4_0000, &data);
    // Lose the response with PSN 2, after the wrap, once.
    let mut lost = false;
    p.drop_if = Some(Box::new(move |from_a, b| {
        let psn = softib_wire::packet::parse_body(b).unwrap().0.bth.psn;
        if !from_a && psn == Psn::new(2) && !lost {
            lost = true;
            return true;
        }
        false
    }));
    let sge = p.a.sge(BUF, len as u32);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaRead(p.b.remote(BUF + 0x4_0000)),
        vec![sge],
    );
    p.drive();
    assert_eq!(p.a.bytes(BUF, len), data);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    let log = p.decoded_log();
    let requests: Vec<(Psn, u64, u32)> = from_a(&log)
        .filter(|l| l.op() == Operation::RdmaReadRequest)
        .map(|l| {
            let r = l.t.reth.unwrap();
            (l.psn(), r.va - (BUF + 0x4_0000), r.dma_len)
        })
        .collect();
    // The retry starts at the lost PSN, 18 packets in, and asks for the rest.
    assert_eq!(
        requests,
        vec![
            (Psn::new(0xFF_FFF0), 0, len as u32),
            (Psn::new(2), 18 * 1024, 12 * 1024)
        ]
    );
    let first_round: Vec<Psn> = log
        .iter()
        .filter(|l| !l.from_a)
        .take(30)
        .map(Logged::psn)
        .collect();
    assert_eq!(
        first_round,
        (0..30)
            .map(|i| Psn::new(0xFF_FFF0).add(i))
            .collect::<Vec<_>>()
    );
    // The next WQE's PSNs follow the READ's reserved range.
    let sge = p.a.sge(BUF, 8);
    p.a.post(qa, 2, WrOpcode::RdmaWrite(p.b.remote(BUF)), vec![sge]);
    p.drive();
    let last = p
        .decoded_log()
        .into_iter()
        .rev()
        .find(|l| l.from_a)
        .unwrap();
    assert_eq!(last.psn(), Psn::new(0x0E));
}

// ---- reordering and duplication, per operation ------------------------------------------------

/// A three-packet message from A whose second and third packets arrive swapped.
fn swap_second_and_third(p: &mut Pair) {
    p.transmit();
    let wire = p.in_flight();
    assert!(wire.len() >= 3 && wire.iter().all(|(to_b, _)| *to_b));
    p.swap_in_flight(1, 2);
}

#[test]
fn rc_send_with_swapped_packets_is_delivered_once() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(16, 3000);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    p.b.post_recv(qb, 2, BUF + 0x2_0000, 4096);
    let sge = p.a.sge(BUF, 3000);
    p.a.post(qa, 1, WrOpcode::Send, vec![sge]);
    swap_second_and_third(&mut p);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data);
    let wb = p.b.completions();
    assert_eq!(wb.len(), 1);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (1, 3000));
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    assert_eq!(
        naks(&p.decoded_log()),
        vec![Syndrome::Nak(NakCode::PsnSequenceError)]
    );
    assert_eq!(p.b.hca.drops().get(DropReason::RcOutOfSequence), 1);
}

#[test]
fn rc_write_with_swapped_packets_is_placed_once() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    let data = pattern(17, 3000);
    p.a.fill(BUF, &data);
    p.b.post_recv(qb, 1, BUF, 64);
    let sge = p.a.sge(BUF, 3000);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWriteWithImm(p.b.remote(BUF + 0x1_0000), 9),
        vec![sge],
    );
    swap_second_and_third(&mut p);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data);
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.opcode, w.imm_data))
            .collect::<Vec<_>>(),
        vec![(WcOpcode::RecvRdmaWithImm, Some(9))]
    );
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
}

#[test]
fn rc_read_with_swapped_responses_completes_with_the_right_data() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let data = pattern(18, 3000);
    p.b.fill(BUF + 0x1_0000, &data);
    let sge = p.a.sge(BUF, 3000);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaRead(p.b.remote(BUF + 0x1_0000)),
        vec![sge],
    );
    p.transmit();
    p.deliver();
    p.transmit();
    assert_eq!(p.in_flight().len(), 3);
    p.swap_in_flight(0, 1); // MIDDLE before FIRST
    p.drive();
    assert_eq!(p.a.bytes(BUF, 3000), data);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    // The out-of-order response was dropped and the READ retried for what was missing.
    let requests: Vec<u32> = from_a(&p.decoded_log())
        .filter_map(|l| l.t.reth.map(|r| r.dma_len))
        .collect();
    assert_eq!(requests, vec![3000, 3000 - 1024]);
}

#[test]
fn rc_atomic_acks_swapped_complete_both_without_reexecution() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.b.fill(BUF + 0x100, &10u64.to_le_bytes());
    let remote = p.b.remote(BUF + 0x100);
    for (i, add) in [(1u64, 1u64), (2, 100)] {
        let sge = p.a.sge(BUF + i * 8, 8);
        p.a.post(
            qa,
            i,
            WrOpcode::AtomicFetchAndAdd { remote, add },
            vec![sge],
        );
    }
    p.transmit();
    p.deliver();
    p.transmit();
    assert_eq!(p.in_flight().len(), 2);
    p.swap_in_flight(0, 1);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x100, 8), 111u64.to_le_bytes());
    assert_eq!(p.a.bytes(BUF + 8, 8), 10u64.to_le_bytes());
    assert_eq!(p.a.bytes(BUF + 16, 8), 11u64.to_le_bytes());
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

#[test]
fn c9_105_duplicate_write_is_reacked_not_rewritten() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    p.a.fill(BUF, &[1; 32]);
    p.drop_from_b = 1; // the ACK is lost; A retransmits the WRITE after its timeout
    let sge = p.a.sge(BUF, 32);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x1000)),
        vec![sge],
    );
    p.drive_briefly();
    assert_eq!(p.b.bytes(BUF + 0x1000, 32), vec![1; 32]);
    // The application at B reuses the buffer before the duplicate arrives.
    p.b.fill(BUF + 0x1000, &[2; 32]);
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1000, 32), vec![2; 32]);
    assert_eq!(p.b.hca.drops().get(DropReason::RcDuplicate), 1);
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
}

#[test]
fn duplicated_read_request_is_replayed_and_completes_once() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let data = pattern(19, 2500);
    p.b.fill(BUF + 0x1_0000, &data);
    let sge = p.a.sge(BUF, 2500);
    p.a.post(
        qa,
        1,
        WrOpcode::RdmaRead(p.b.remote(BUF + 0x1_0000)),
        vec![sge],
    );
    p.transmit();
    p.duplicate_in_flight(0);
    p.drive();
    assert_eq!(p.a.bytes(BUF, 2500), data);
    assert_eq!(p.a.completions().len(), 1);
    assert_eq!(p.b.hca.drops().get(DropReason::RcDuplicate), 1);
    let responses = p.decoded_log().iter().filter(|l| !l.from_a).count();
    assert_eq!(responses, 6, "three responses, replayed once");
    assert!(p.a.hca.drops().get(DropReason::RcUnexpectedResponse) >= 3);
}

#[test]
fn every_packet_duplicated_per_operation_executes_once() {
    type Op = (&'static str, fn(&mut Pair, Qpn, Qpn));
    let ops: [Op; 4] = [
        ("WRITE", |p, qa, _| {
            let sge = p.a.sge(BUF, 3000);
            p.a.post(
                qa,
                1,
                WrOpcode::RdmaWrite(p.b.remote(BUF + 0x1_0000)),
                vec![sge],
            );
        }),
        ("WRITE with immediate", |p, qa, qb| {
            p.b.post_recv(qb, 1, BUF, 64);
            p.b.post_recv(qb, 2, BUF, 64);
            let sge = p.a.sge(BUF, 3000);
            let remote = p.b.remote(BUF + 0x1_0000);
            p.a.post(qa, 1, WrOpcode::RdmaWriteWithImm(remote, 3), vec![sge]);
        }),
        ("READ", |p, qa, _| {
            let sge = p.a.sge(BUF + 0x1_0000, 3000);
            p.a.post(
                qa,
                1,
                WrOpcode::RdmaRead(p.b.remote(BUF + 0x2_0000)),
                vec![sge],
            );
        }),
        ("SEND with immediate", |p, qa, qb| {
            p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
            p.b.post_recv(qb, 2, BUF, 64);
            let sge = p.a.sge(BUF, 3000);
            p.a.post(qa, 1, WrOpcode::SendWithImm(3), vec![sge]);
        }),
    ];
    for (what, post) in ops {
        let mut p = Pair::new();
        p.duplicate = true;
        let (qa, qb) = p.connect(QpType::Rc);
        let data = pattern(20, 3000);
        p.a.fill(BUF, &data);
        p.b.fill(BUF + 0x2_0000, &data);
        post(&mut p, qa, qb);
        p.drive();
        if what == "READ" {
            assert_eq!(p.a.bytes(BUF + 0x1_0000, 3000), data, "{what}");
        } else {
            assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data, "{what}");
        }
        let wa = p.a.completions();
        assert_eq!(wa.len(), 1, "{what}");
        assert_eq!(wa[0].status, WcStatus::Success, "{what}");
        let wb = p.b.completions();
        let expected_receives = usize::from(what.contains("immediate"));
        assert_eq!(
            wb.len(),
            expected_receives,
            "{what}: one receive consumed at most"
        );
        assert!(wb.iter().all(|w| w.wr_id == 1 && w.imm_data == Some(3)));
        assert_eq!(p.a.state(qa), QpState::Rts, "{what}");
        assert_eq!(p.b.state(qb), QpState::Rts, "{what}");
    }
}
