//! Verbs-level behaviour seen through a pair: shared receive queues and their limit event,
//! completion events (solicited or not), CQ overflow, and inline sends.

use softib_wire::Qpn;

use super::util::{pattern, Pair, BUF};
use crate::hca::VerbsError;
use crate::verbs::{
    AsyncEvent, QpState, QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WrOpcode,
};
use crate::SrqHandle;

// ---- shared receive queues -----------------------------------------------------------------------

/// Two RC connections A1-B1 and A2-B2 whose B ends receive from one SRQ holding `wqes`
/// receives of 4 KiB each (wr_id = 100 + i).
fn srq_pair(wqes: u64) -> (Pair, SrqHandle, [(Qpn, Qpn); 2]) {
    let mut p = Pair::new();
    let srq = p.b.hca.create_srq(p.b.pd, 16, 2).unwrap();
    for i in 0..wqes {
        let sge = p.b.sge(BUF + 0x1_0000 + i * 0x1000, 4096);
        p.b.hca
            .post_srq_recv(
                srq,
                RecvWr {
                    wr_id: 100 + i,
                    sg_list: vec![sge],
                },
            )
            .unwrap();
    }
    let mut conns = [(Qpn::new(0), Qpn::new(0)); 2];
    for c in &mut conns {
        let qa = p.a.create_qp(QpType::Rc);
        let qb = p.b.create_qp_with(QpType::Rc, |init| init.srq = Some(srq));
        p.connect_qps(qa, qb, QpType::Rc);
        *c = (qa, qb);
    }
    (p, srq, conns)
}

#[test]
fn two_qps_receive_from_one_srq_in_posting_order() {
    let (mut p, _srq, [(a1, b1), (a2, b2)]) = srq_pair(4);
    let data = pattern(31, 3000);
    p.a.fill(BUF, &data);
    let sge = p.a.sge(BUF, 3000);
    p.a.post(a1, 1, WrOpcode::Send, vec![sge]);
    p.drive();
    p.a.post(a2, 2, WrOpcode::SendWithImm(5), vec![sge]);
    p.drive();
    p.a.post(a1, 3, WrOpcode::Send, vec![p.a.sge(BUF, 10)]);
    p.drive();
    let wb = p.b.completions();
    assert_eq!(
        wb.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status, w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        vec![
            (100, b1, WcStatus::Success, 3000, None),
            (101, b2, WcStatus::Success, 3000, Some(5)),
            (102, b1, WcStatus::Success, 10, None),
        ]
    );
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 3000), data);
    assert_eq!(p.b.bytes(BUF + 0x1_1000, 3000), data);
    assert_eq!(p.b.hca.qp(b1).unwrap().recv_queue_len(), 0);
}

#[test]
fn srq_limit_event_fires_once_when_the_srq_drops_below_its_limit() {
    let (mut p, srq, [(a1, _), (a2, _)]) = srq_pair(5);
    p.b.hca.modify_srq(srq, 3).unwrap();
    let sge = p.a.sge(BUF, 8);
    // 5 -> 4 -> 3 WQEs: not below 3 yet.
    p.a.post(a1, 1, WrOpcode::Send, vec![sge]);
    p.a.post(a2, 2, WrOpcode::Send, vec![sge]);
    p.drive();
    assert!(p.b.events().is_empty());
    // 3 -> 2: below the limit, the event fires and disarms.
    p.a.post(a1, 3, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.events(), vec![AsyncEvent::SrqLimitReached(srq)]);
    p.a.post(a2, 4, WrOpcode::Send, vec![sge]);
    p.drive();
    assert!(p.b.events().is_empty(), "once, until armed again");
    assert_eq!(p.b.completions().len(), 4);
    // Armed again (limit 1, one WQE left), the next receive fires it once more.
    p.b.hca.modify_srq(srq, 1).unwrap();
    p.a.post(a1, 5, WrOpcode::Send, vec![sge]);
    p.drive();
    assert_eq!(p.b.events(), vec![AsyncEvent::SrqLimitReached(srq)]);
    assert!(p.b.hca.modify_srq(srq, 17).is_err(), "limit beyond max_wr");
}

#[test]
fn posting_to_a_qp_attached_to_an_srq_is_refused() {
    let (mut p, srq, [(_, b1), _]) = srq_pair(0);
    let sge = p.b.sge(BUF, 64);
    let e =
        p.b.hca
            .post_recv(
                b1,
                RecvWr {
                    wr_id: 1,
                    sg_list: vec![sge],
                },
            )
            .unwrap_err();
    assert!(matches!(e, VerbsError::Invalid(_)), "{e}");
    // The SRQ is in use: it cannot be destroyed under its QPs.
    assert!(matches!(p.b.hca.destroy_srq(srq), Err(VerbsError::Busy(_))));
}

#[test]
fn srq_without_wqes_answers_with_rnr_nak_until_one_is_posted() {
    let (mut p, srq, [(a1, b1), _]) = srq_pair(0);
    p.a.post(a1, 1, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    p.drive_for(crate::Duration::from_millis(5));
    assert!(
        p.b.hca
            .drops()
            .get(crate::counters::DropReason::RcRnrNakSent)
            >= 1
    );
    let sge = p.b.sge(BUF, 64);
    p.b.hca
        .post_srq_recv(
            srq,
            RecvWr {
                wr_id: 9,
                sg_list: vec![sge],
            },
        )
        .unwrap();
    p.drive();
    let wb = p.b.completions();
    assert_eq!((wb[0].wr_id, wb[0].qp_num), (9, b1));
    assert_eq!(p.a.completions()[0].status, WcStatus::Success);
}

#[test]
fn a_qp_on_an_srq_entering_error_raises_last_wqe_reached() {
    // IBA §11.6.3.1 (IBV_EVENT_QP_LAST_WQE_REACHED): a QP attached to an SRQ that enters the
    // error state reports that it will take no more WQEs from the SRQ, so the application
    // knows when it may destroy the QP.
    let (mut p, _srq, [(a1, b1), (_, b2)]) = srq_pair(3);
    // b1 fails as a responder (misaligned atomic); b2 is moved to ERR by the application.
    let remote = p.b.remote(BUF + 4);
    p.a.post(
        a1,
        1,
        WrOpcode::AtomicFetchAndAdd { remote, add: 1 },
        vec![p.a.sge(BUF, 8)],
    );
    p.drive();
    p.b.modify_state(b2, QpState::Err);
    assert_eq!(
        p.b.events(),
        vec![
            AsyncEvent::QpReqErr(b1),
            AsyncEvent::QpLastWqeReached(b1),
            AsyncEvent::QpLastWqeReached(b2)
        ]
    );
    // The SRQ's WQEs are not flushed with either QP.
    assert!(p.b.completions().is_empty());
}

// ---- completion events ----------------------------------------------------------------------------

fn events(p: &mut Pair, on_b: bool) -> usize {
    let side = if on_b { &mut p.b } else { &mut p.a };
    std::iter::from_fn(|| side.hca.poll_comp_event()).count()
}

#[test]
fn solicited_only_notification_fires_for_solicited_sends_and_errors() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    for i in 0..8 {
        p.b.post_recv(qb, i, BUF + i * 0x100, 64);
    }
    let cq = p.b.cq;
    let solicited = |p: &Pair, wr_id, opcode| SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::SOLICITED),
        ..p.a.wr(wr_id, opcode, vec![p.a.sge(BUF, 8)])
    };
    p.b.hca.req_notify_cq(cq, true).unwrap();
    // An unsolicited SEND completes without an event.
    p.a.post(qa, 1, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    p.drive();
    assert_eq!(p.b.completions().len(), 1);
    assert_eq!(events(&mut p, true), 0);
    // A solicited one fires it; the SE bit rides on the message's last packet only.
    let wr = solicited(&p, 2, WrOpcode::Send);
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    assert_eq!(p.b.hca.poll_comp_event(), Some(cq));
    assert!(p
        .decoded_log()
        .iter()
        .any(|l| l.from_a && l.t.bth.solicited));
    // The event disarmed the CQ: the next solicited SEND fires nothing until re-armed.
    let wr = solicited(&p, 3, WrOpcode::Send);
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    assert_eq!(events(&mut p, true), 0);
    // A solicited WRITE with immediate fires it too.
    p.b.hca.req_notify_cq(cq, true).unwrap();
    let remote = p.b.remote(BUF + 0x8000);
    let wr = solicited(&p, 4, WrOpcode::RdmaWriteWithImm(remote, 1));
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    assert_eq!(events(&mut p, true), 1);
    assert_eq!(p.b.completions().len(), 3);
    // Armed for solicited completions, an error completion fires it as well: B's QP goes to
    // ERR and its receives flush.
    p.b.hca.req_notify_cq(cq, true).unwrap();
    p.b.modify_state(qb, QpState::Err);
    assert_eq!(events(&mut p, true), 1);
    assert!(p
        .b
        .completions()
        .iter()
        .all(|w| w.status == WcStatus::WrFlushErr));
    // Send completions at A never fire a solicited-only event.
    assert_eq!(events(&mut p, false), 0);
}

#[test]
fn notification_for_any_completion_fires_once_per_arming() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF, 64);
    p.b.post_recv(qb, 2, BUF, 64);
    let (ca, cb) = (p.a.cq, p.b.cq);
    p.a.hca.req_notify_cq(ca, false).unwrap();
    p.b.hca.req_notify_cq(cb, false).unwrap();
    p.a.post(qa, 1, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    p.a.post(qa, 2, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    p.drive();
    // One event per side: the first completion fired it, the second found it disarmed.
    assert_eq!(p.a.hca.poll_comp_event(), Some(ca));
    assert_eq!(p.b.hca.poll_comp_event(), Some(cb));
    assert_eq!(events(&mut p, false) + events(&mut p, true), 0);
    assert_eq!(p.a.completions().len(), 2);
    assert_eq!(p.b.completions().len(), 2);
    // Without arming, nothing.
    p.a.post(
        qa,
        3,
        WrOpcode::RdmaWrite(p.b.remote(BUF)),
        vec![p.a.sge(BUF, 8)],
    );
    p.drive();
    assert_eq!(events(&mut p, false), 0);
}

// ---- CQ overflow --------------------------------------------------------------------------------

#[test]
fn cq_overflow_raises_cq_err_and_the_cq_takes_no_more_completions() {
    let mut p = Pair::new();
    let small = p.a.hca.create_cq(2).unwrap();
    let qa = p.a.create_qp_with(QpType::Rc, |init| {
        init.send_cq = small;
        init.recv_cq = small;
    });
    let qb = p.b.create_qp(QpType::Rc);
    p.connect_qps(qa, qb, QpType::Rc);
    for i in 0..4 {
        p.a.post(
            qa,
            i,
            WrOpcode::RdmaWrite(p.b.remote(BUF)),
            vec![p.a.sge(BUF, 8)],
        );
    }
    p.drive();
    assert_eq!(p.a.hca.cq_len(small), 2);
    // The CQ is in error, and so is the QP that completes into it (QP_FATAL), as hardware
    // does; each event once.
    assert_eq!(
        p.a.events(),
        vec![AsyncEvent::CqErr(small), AsyncEvent::QpFatal(qa)],
        "raised once"
    );
    assert_eq!(p.a.state(qa), QpState::Err);
    let polled: Vec<u64> = std::iter::from_fn(|| p.a.hca.poll_cq(small))
        .map(|w| w.wr_id)
        .collect();
    assert_eq!(polled, vec![0, 1], "what fitted is still there");
    // Even emptied, the CQ stays in error: later completions are lost, with no new event.
    p.a.post(
        qa,
        9,
        WrOpcode::RdmaWrite(p.b.remote(BUF)),
        vec![p.a.sge(BUF, 8)],
    );
    p.drive();
    assert_eq!(p.a.hca.cq_len(small), 0);
    assert!(p.a.events().is_empty());
}

#[test]
fn a_receive_cq_that_overflows_fails_its_qp_and_the_sender_runs_out_of_retries() {
    let mut p = Pair::new();
    let small = p.b.hca.create_cq(2).unwrap();
    let qa = p.a.create_qp(QpType::Rc);
    let qb = p.b.create_qp_with(QpType::Rc, |init| {
        init.send_cq = small;
        init.recv_cq = small;
    });
    p.connect_qps(qa, qb, QpType::Rc);
    for i in 0..6 {
        p.b.post_recv(qb, 100 + i, BUF + 64 * i, 64);
    }
    // B never polls: the third SEND's completion overflows its CQ.
    for i in 0..6 {
        p.a.post(qa, i, WrOpcode::Send, vec![p.a.sge(BUF, 8)]);
    }
    p.drive();
    assert_eq!(
        p.b.events(),
        vec![AsyncEvent::CqErr(small), AsyncEvent::QpFatal(qb)]
    );
    assert_eq!(p.b.state(qb), QpState::Err);
    let got: Vec<(u64, WcStatus)> =
        p.a.completions()
            .into_iter()
            .map(|w| (w.wr_id, w.status))
            .collect();
    // What B acknowledged before the overflow succeeded (its coalesced ACK may not have left
    // before the QP failed); the rest ran out of retries against a QP that answers no more
    // (the first error, then flushes).
    let ok = got.iter().take_while(|w| w.1 == WcStatus::Success).count();
    assert!(ok <= 2, "{got:?}");
    assert_eq!(got[ok], (ok as u64, WcStatus::RetryExcErr), "{got:?}");
    assert!(
        got[ok + 1..].iter().all(|w| w.1 == WcStatus::WrFlushErr),
        "{got:?}"
    );
    assert_eq!(got.len(), 6);
}

// ---- inline sends -------------------------------------------------------------------------------

#[test]
fn rc_inline_send_and_write_carry_the_data_given_at_post_time() {
    let mut p = Pair::new();
    let (qa, qb) = p.connect(QpType::Rc);
    p.b.post_recv(qb, 1, BUF + 0x1_0000, 4096);
    let inline = pattern(32, 256);
    let wr = SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::INLINE),
        inline_data: Some(inline.clone()),
        ..p.a.wr(1, WrOpcode::Send, vec![])
    };
    p.a.hca.post_send(qa, wr).unwrap();
    let wr = SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::INLINE),
        inline_data: Some(inline[..13].to_vec()),
        ..p.a
            .wr(2, WrOpcode::RdmaWrite(p.b.remote(BUF + 0x2_0000)), vec![])
    };
    p.a.hca.post_send(qa, wr).unwrap();
    p.drive();
    assert_eq!(p.b.bytes(BUF + 0x1_0000, 256), inline);
    assert_eq!(p.b.bytes(BUF + 0x2_0000, 13), inline[..13].to_vec());
    assert_eq!(p.b.completions()[0].byte_len, 256);
    assert_eq!(
        p.a.completions()
            .iter()
            .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::Send, 256),
            (2, WcStatus::Success, WcOpcode::RdmaWrite, 13)
        ]
    );
}

#[test]
fn inline_sends_the_verbs_refuse() {
    let mut p = Pair::new();
    let (qa, _qb) = p.connect(QpType::Rc);
    let inline = |p: &Pair, len: usize, opcode| SendWr {
        flags: SendFlags::SIGNALED.with(SendFlags::INLINE),
        inline_data: Some(vec![0; len]),
        ..p.a.wr(1, opcode, vec![])
    };
    let too_long = inline(&p, 257, WrOpcode::Send);
    let read = inline(&p, 8, WrOpcode::RdmaRead(p.b.remote(BUF)));
    let flag_without_data = SendWr {
        inline_data: None,
        ..inline(&p, 8, WrOpcode::Send)
    };
    let data_without_flag = SendWr {
        flags: SendFlags::SIGNALED,
        ..inline(&p, 8, WrOpcode::Send)
    };
    for wr in [too_long, read, flag_without_data, data_without_flag] {
        let e = p.a.hca.post_send(qa, wr).unwrap_err();
        assert!(matches!(e, VerbsError::Invalid(_)), "{e}");
    }
    assert_eq!(p.a.hca.qp(qa).unwrap().send_queue_len(), 0);
}
