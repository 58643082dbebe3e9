//! Per-state fixtures in smoltcp's style (`socket_listen()`, `socket_established()`, ...): A's
//! RC QP is in RTS and B's QP is left in one state; each section tests what a QP in that state
//! does with packets and with posted work.

use softib_wire::{Psn, Qpn};

use super::util::{bring_up_to, Pair, BUF};
use crate::counters::DropReason;
use crate::hca::VerbsError;
use crate::verbs::{QpState, QpType, SendWr, WcStatus, WrOpcode};
use crate::{AttrMask, Duration, QpAttr};

/// A's QP in RTS towards B's QP, which is brought only as far as `state`.
fn pair_with_b_in(state: QpState) -> (Pair, Qpn, Qpn) {
    let mut p = Pair::new();
    let qa = p.a.create_qp(QpType::Rc);
    let qb = p.b.create_qp(QpType::Rc);
    let (pa, pb) = (Psn::new(0xFF_FFF0), Psn::new(100));
    bring_up_to(&mut p.a.hca, qa, QpType::Rc, qb, (pb, pa), QpState::Rts);
    bring_up_to(&mut p.b.hca, qb, QpType::Rc, qa, (pa, pb), state);
    assert_eq!(p.b.state(qb), state);
    (p, qa, qb)
}

fn qp_reset() -> (Pair, Qpn, Qpn) {
    pair_with_b_in(QpState::Reset)
}

fn qp_init() -> (Pair, Qpn, Qpn) {
    pair_with_b_in(QpState::Init)
}

fn qp_rtr() -> (Pair, Qpn, Qpn) {
    pair_with_b_in(QpState::Rtr)
}

fn qp_rts() -> (Pair, Qpn, Qpn) {
    pair_with_b_in(QpState::Rts)
}

/// Both QPs connected, then B's moved to ERR.
fn qp_err() -> (Pair, Qpn, Qpn) {
    let (mut p, qa, qb) = qp_rts();
    p.b.modify_state(qb, QpState::Err);
    (p, qa, qb)
}

fn send_wr(p: &Pair, on_a: bool, wr_id: u64) -> SendWr {
    let side = if on_a { &p.a } else { &p.b };
    side.wr(wr_id, WrOpcode::Send, vec![side.sge(BUF, 8)])
}

/// A sends one SEND to B and the pair runs for `horizon`.
fn a_sends(p: &mut Pair, qa: Qpn, horizon: Duration) {
    let wr = send_wr(p, true, 1);
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive_for(horizon);
}

// ---- RESET ----------------------------------------------------------------------------------------

#[test]
fn reset_drops_packets_and_refuses_posted_work() {
    let (mut p, qa, qb) = qp_reset();
    a_sends(&mut p, qa, Duration::from_millis(1));
    assert_eq!(p.b.hca.drops().get(DropReason::QpNotReceiving), 1);
    assert!(
        p.decoded_log().iter().all(|l| l.from_a),
        "B answers nothing"
    );
    let wr = send_wr(&p, false, 1);
    assert!(matches!(
        p.b.hca.post_send(qb, wr),
        Err(VerbsError::WrongState {
            state: QpState::Reset,
            ..
        })
    ));
    let e = p.b.hca.post_recv(
        qb,
        crate::verbs::RecvWr {
            wr_id: 1,
            sg_list: vec![],
        },
    );
    assert!(matches!(e, Err(VerbsError::WrongState { .. })));
    // A gets no answer and gives up after retry_cnt retries.
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::RetryExcErr);
    assert_eq!(p.b.hca.drops().get(DropReason::QpNotReceiving), 8);
}

// ---- INIT -----------------------------------------------------------------------------------------

#[test]
fn init_takes_receives_but_drops_packets() {
    let (mut p, qa, qb) = qp_init();
    p.b.post_recv(qb, 1, BUF, 64);
    a_sends(&mut p, qa, Duration::from_millis(1));
    assert_eq!(p.b.hca.drops().get(DropReason::QpNotReceiving), 1);
    assert!(p.b.completions().is_empty());
    assert_eq!(p.b.hca.qp(qb).unwrap().recv_queue_len(), 1);
    let wr = send_wr(&p, false, 1);
    assert!(matches!(
        p.b.hca.post_send(qb, wr),
        Err(VerbsError::WrongState {
            state: QpState::Init,
            ..
        })
    ));
}

// ---- RTR ------------------------------------------------------------------------------------------

#[test]
fn rtr_receives_and_acknowledges_but_cannot_send() {
    let (mut p, qa, qb) = qp_rtr();
    p.b.post_recv(qb, 1, BUF, 64);
    a_sends(&mut p, qa, Duration::from_millis(1));
    assert_eq!(p.b.completions()[0].status, WcStatus::Success);
    assert_eq!(
        p.a.completions()[0].status,
        WcStatus::Success,
        "B's ACK came back"
    );
    let wr = send_wr(&p, false, 1);
    assert!(matches!(
        p.b.hca.post_send(qb, wr),
        Err(VerbsError::WrongState {
            state: QpState::Rtr,
            ..
        })
    ));
    // RTR answers READs too: the responder is complete in RTR.
    p.b.fill(BUF + 0x100, &[7; 16]);
    p.a.post(
        qa,
        2,
        WrOpcode::RdmaRead(p.b.remote(BUF + 0x100)),
        vec![p.a.sge(BUF + 0x200, 16)],
    );
    p.drive();
    assert_eq!(p.a.bytes(BUF + 0x200, 16), vec![7; 16]);
}

// ---- RTS ------------------------------------------------------------------------------------------

#[test]
fn rts_sends_both_ways() {
    let (mut p, qa, qb) = qp_rts();
    p.a.post_recv(qa, 1, BUF, 64);
    p.b.post_recv(qb, 1, BUF, 64);
    a_sends(&mut p, qa, Duration::from_millis(1));
    let wr = send_wr(&p, false, 2);
    p.b.hca.post_send(qb, wr).unwrap();
    p.drive();
    assert_eq!(p.a.completions().len(), 2, "A's send and its receive");
    assert_eq!(p.b.completions().len(), 2, "B's receive and its send");
}

// ---- SQD ------------------------------------------------------------------------------------------

/// A's QP moved to SQD while a three-packet SEND is on the wire (B in RTS with a receive).
fn qp_sqd() -> (Pair, Qpn, Qpn) {
    let (mut p, qa, qb) = qp_rts();
    p.b.post_recv(qb, 1, BUF + 0x1000, 4096);
    p.b.post_recv(qb, 2, BUF + 0x2000, 4096);
    p.a.post(qa, 1, WrOpcode::Send, vec![p.a.sge(BUF, 3000)]);
    p.transmit();
    assert_eq!(p.in_flight().len(), 3);
    p.a.modify_state(qa, QpState::Sqd);
    (p, qa, qb)
}

#[test]
fn sqd_finishes_what_it_started_then_raises_sq_drained_once() {
    let (mut p, qa, _qb) = qp_sqd();
    assert!(
        p.a.events().is_empty(),
        "not drained while packets are unacknowledged"
    );
    // Work posted in SQD waits.
    p.a.post(qa, 2, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    p.drive();
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::Success)]
    );
    // IBA §10.3.1 (SQD): the affiliated SQ Drained event follows the last outstanding
    // response.
    assert_eq!(p.a.events(), vec![crate::verbs::AsyncEvent::SqDrained(qa)]);
    assert_eq!(p.sent_a, 3);
    // Back to RTS, the waiting WR goes.
    p.a.modify_state(qa, QpState::Rts);
    p.drive();
    assert_eq!(p.a.completions()[0].wr_id, 2);
    assert_eq!(p.b.completions().len(), 2);
    assert!(p.a.events().is_empty());
}

#[test]
fn sqd_with_nothing_outstanding_is_drained_at_once() {
    let (mut p, qa, _qb) = qp_rts();
    p.a.modify_state(qa, QpState::Sqd);
    assert_eq!(p.a.events(), vec![crate::verbs::AsyncEvent::SqDrained(qa)]);
    p.drive();
    assert!(p.a.events().is_empty());
}

/// SQD -> SQD with only `attr`'s `mask` attributes.
fn sqd_modify(p: &mut Pair, on_a: bool, qpn: Qpn, attr: QpAttr, mask: AttrMask) {
    let side = if on_a { &mut p.a } else { &mut p.b };
    let attr = QpAttr {
        qp_state: QpState::Sqd,
        ..attr
    };
    side.hca
        .modify_qp(qpn, &attr, AttrMask::STATE.with(mask))
        .unwrap();
}

#[test]
fn sqd_making_an_infinite_ack_timeout_finite_starts_the_ack_timer() {
    // A's local ACK timeout is infinite (0) while a SEND is lost: nothing times it out. In
    // SQD the timeout becomes finite; the outstanding SEND must then time out and go again
    // (not wait with a stopped timer for some later packet or acknowledgement).
    let (mut p, qa, qb) = qp_rts();
    p.a.modify_state(qa, QpState::Sqd);
    let infinite = QpAttr {
        timeout: 0,
        ..QpAttr::default()
    };
    sqd_modify(&mut p, true, qa, infinite, AttrMask::TIMEOUT);
    p.a.modify_state(qa, QpState::Rts);
    p.a.events();
    p.b.post_recv(qb, 1, BUF + 0x1000, 64);
    p.drop_from_a = 1;
    a_sends(&mut p, qa, Duration::from_millis(100));
    assert_eq!(
        p.a.hca.poll_timeout(),
        None,
        "an infinite timeout arms nothing"
    );
    assert!(p.a.completions().is_empty());
    p.a.modify_state(qa, QpState::Sqd);
    let finite = QpAttr {
        timeout: 10,
        ..QpAttr::default()
    };
    sqd_modify(&mut p, true, qa, finite, AttrMask::TIMEOUT);
    assert!(p.a.hca.poll_timeout().is_some(), "the ACK timer runs");
    p.drive();
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
    assert_eq!(p.b.completions()[0].status, WcStatus::Success);
    assert_eq!(p.sent_a, 2, "the lost SEND and its retransmission");
}

#[test]
fn sqd_lowering_max_dest_rd_atomic_forgets_the_oldest_responder_resources() {
    // B answers four READs (four responder resources), then in SQD may keep only one.
    let (mut p, qa, qb) = qp_rts();
    for i in 0..4u64 {
        let remote = p.b.remote(BUF + 0x100 * i);
        p.a.post(
            qa,
            i,
            WrOpcode::RdmaRead(remote),
            vec![p.a.sge(BUF + 0x1000, 8)],
        );
    }
    p.drive();
    assert_eq!(p.a.completions().len(), 4);
    let resources = |p: &Pair| p.b.hca.qp(qb).unwrap().resp.resources.len();
    assert_eq!(resources(&p), 4);
    p.b.modify_state(qb, QpState::Sqd);
    let one = QpAttr {
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    };
    sqd_modify(&mut p, false, qb, one, AttrMask::MAX_DEST_RD_ATOMIC);
    assert_eq!(resources(&p), 1);
    assert_eq!(p.b.hca.check_invariants(), Ok(()));
}

// ---- ERR ------------------------------------------------------------------------------------------

#[test]
fn err_drops_packets_and_sends_nothing() {
    let (mut p, qa, qb) = qp_err();
    a_sends(&mut p, qa, Duration::from_millis(1));
    assert_eq!(p.b.hca.drops().get(DropReason::QpNotReceiving), 1);
    // Work posted in ERR completes at once with a flush error and sends nothing.
    let wr = send_wr(&p, false, 7);
    p.b.hca.post_send(qb, wr).unwrap();
    p.b.post_recv(qb, 8, BUF, 64);
    p.drive_for(Duration::from_millis(1));
    assert_eq!(
        p.b.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(7, WcStatus::WrFlushErr), (8, WcStatus::WrFlushErr)]
    );
    assert!(p.decoded_log().iter().all(|l| l.from_a));
}

#[test]
fn a_requester_moved_to_err_stops_retransmitting() {
    // B never answers (RESET): A has two SENDs outstanding and its local ACK timer armed.
    // Moved to ERR, A flushes them and sends nothing more, however long we wait.
    let (mut p, qa, _qb) = qp_reset();
    a_sends(&mut p, qa, Duration::from_millis(1));
    let wr = send_wr(&p, true, 2);
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive_for(Duration::from_millis(1));
    let sent = p.sent_a;
    p.a.modify_state(qa, QpState::Err);
    assert_eq!(p.a.hca.poll_timeout(), None, "no timer left");
    p.drive();
    assert_eq!(p.sent_a, sent);
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
}

#[test]
fn responder_in_err_sends_only_its_final_nak() {
    let (mut p, qa, qb) = qp_rts();
    // A misaligned atomic, followed by more requests in the same burst.
    let remote = p.b.remote(BUF + 4);
    p.a.post(
        qa,
        1,
        WrOpcode::AtomicFetchAndAdd { remote, add: 1 },
        vec![p.a.sge(BUF, 8)],
    );
    for i in 2..5 {
        p.a.post(
            qa,
            i,
            WrOpcode::RdmaWrite(p.b.remote(BUF)),
            vec![p.a.sge(BUF, 8)],
        );
    }
    p.drive();
    assert_eq!(p.b.state(qb), QpState::Err);
    let from_b: Vec<_> = p.decoded_log().into_iter().filter(|l| !l.from_a).collect();
    assert_eq!(from_b.len(), 1);
    assert_eq!(from_b[0].syndrome().unwrap().kind(), "nak");
    assert_eq!(p.b.hca.drops().get(DropReason::QpNotReceiving), 3);
}

// ---- back through RESET -----------------------------------------------------------------------------

#[test]
fn reset_then_reconnect_works_again() {
    let (mut p, qa, qb) = qp_rts();
    // Break the connection with a remote access error: both QPs end in ERR.
    let bad = crate::verbs::RemoteAddr {
        addr: BUF,
        rkey: softib_wire::RKey(p.b.buf_key ^ 0x100),
    };
    p.a.post(qa, 1, WrOpcode::RdmaWrite(bad), vec![p.a.sge(BUF, 8)]);
    p.b.post_recv(qb, 50, BUF, 64);
    p.drive();
    assert_eq!((p.a.state(qa), p.b.state(qb)), (QpState::Err, QpState::Err));
    p.a.completions();
    p.b.completions();
    p.a.events();
    p.b.events();
    // RESET discards everything; the same QPs come up again with fresh PSNs.
    p.a.modify_state(qa, QpState::Reset);
    p.b.modify_state(qb, QpState::Reset);
    assert_eq!(p.a.hca.qp(qa).unwrap().send_queue_len(), 0);
    let (pa, pb) = (Psn::new(0x12_3456), Psn::new(0xFF_FFFE));
    bring_up_to(&mut p.a.hca, qa, QpType::Rc, qb, (pb, pa), QpState::Rts);
    bring_up_to(&mut p.b.hca, qb, QpType::Rc, qa, (pa, pb), QpState::Rts);
    p.b.post_recv(qb, 51, BUF + 0x1000, 4096);
    p.a.fill(BUF, &[9; 3000]);
    p.a.post(qa, 2, WrOpcode::Send, vec![p.a.sge(BUF, 3000)]);
    p.a.post(
        qa,
        3,
        WrOpcode::RdmaWrite(p.b.remote(BUF + 0x8000)),
        vec![p.a.sge(BUF, 100)],
    );
    p.b.post(
        qb,
        4,
        WrOpcode::RdmaRead(p.a.remote(BUF)),
        vec![p.b.sge(BUF + 0x9000, 2000)],
    );
    p.drive();
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(2, WcStatus::Success), (3, WcStatus::Success)]
    );
    assert_eq!(
        p.b.completions()
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![(51, WcStatus::Success), (4, WcStatus::Success)]
    );
    assert_eq!(p.b.bytes(BUF + 0x1000, 3000), vec![9; 3000]);
    assert_eq!(p.b.bytes(BUF + 0x9000, 2000), vec![9; 2000]);
    let first_new = p
        .decoded_log()
        .into_iter()
        .find(|l| l.from_a && l.op() == softib_wire::Operation::SendFirst)
        .unwrap();
    assert_eq!(first_new.psn(), pa, "the new SQ PSN is used");
    assert!(p.a.events().is_empty() && p.b.events().is_empty());
}
