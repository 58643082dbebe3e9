//! Queue pairs with their state in their type (`softib::typed`) over an embedded HCA: the
//! transitions one at a time, a refused transition giving the QP back, draining through ERROR
//! and reuse after RESET.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::embedded::EmbeddedDaemon;
use softib::typed::{InitAttr, RtrAttr, RtsAttr};
use softib::{AccessFlags, Mtu, QpState, QpType, WcOpcode, WcStatus};

mod common;
use common::open_pair;

/// An embedded HCA with `rxe0` (127.0.0.2) and `rxe1` (127.0.0.3) on a port of their own.
fn two_devices() -> EmbeddedDaemon {
    let hca = EmbeddedDaemon::start().unwrap();
    hca.add_loopback_pair().unwrap();
    hca
}

const WAIT: Duration = Duration::from_secs(5);

#[test]
fn rc_qps_step_through_their_states_and_a_refused_step_gives_the_qp_back() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(8192).unwrap(), b.alloc_buffer(8192).unwrap());
    let rw = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE);
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, rw).unwrap(),
        pd_b.register(&buf_b, rw).unwrap(),
    );

    let qa = pd_a.create_qp_typed(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
    assert_eq!(qa.state().unwrap(), QpState::Reset);
    let qb = pd_b.create_qp_typed(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
    let qa = qa.init(&InitAttr::default()).unwrap();
    let qb = qb.init(&InitAttr::default()).unwrap();
    // A receive posted in INIT is taken once the QP is connected.
    qb.recv(&mr_b, 4096, 256, 77).unwrap();
    let (ea, eb) = (
        qa.endpoint_with(Some(&mr_a)).unwrap(),
        qb.endpoint_with(Some(&mr_b)).unwrap(),
    );

    // RTR without a peer is refused; the QP comes back, still in INIT, and goes on.
    let refused = qa.ready_to_receive(&RtrAttr::datagram()).unwrap_err();
    assert!(refused.to_string().contains("needs the peer"), "{refused}");
    let qa = refused.qp;
    assert_eq!(qa.state().unwrap(), QpState::Init);
    let qa = qa
        .ready_to_receive(&RtrAttr::connect(&eb, Mtu::Mtu1024))
        .unwrap();
    assert_eq!(qa.state().unwrap(), QpState::Rtr);
    let qa = qa.ready_to_send(&RtsAttr::default()).unwrap();
    let qb = qb
        .ready_to_receive(&RtrAttr::connect(&ea, Mtu::Mtu1024))
        .unwrap()
        .ready_to_send(&RtsAttr::default())
        .unwrap();
    assert_eq!(qa.state().unwrap(), QpState::Rts);

    buf_a.write(0, b"typed write");
    qa.write(&mr_a, 0, 11, eb.addr + 8, eb.rkey, 1).unwrap();
    let wc = cq_a.wait(WAIT).unwrap();
    assert_eq!(
        (wc.status, wc.opcode),
        (WcStatus::Success, WcOpcode::RdmaWrite)
    );
    let mut got = [0u8; 11];
    buf_b.read(8, &mut got);
    assert_eq!(&got, b"typed write");

    qa.send(&mr_a, 0, 11, 2).unwrap();
    let wc = cq_a.wait(WAIT).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    let wc = cq_b.wait(WAIT).unwrap();
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len),
        (WcStatus::Success, 77, 11)
    );

    // ERROR flushes what is posted; RESET then INIT makes the QP usable again.
    qb.recv(&mr_b, 0, 64, 78).unwrap();
    let qb = qb.into_error().unwrap();
    let wc = cq_b.wait(WAIT).unwrap();
    assert_eq!((wc.status, wc.wr_id), (WcStatus::WrFlushErr, 78));
    assert_eq!(qb.state().unwrap(), QpState::Err);
    let qb = qb.reset().unwrap().init(&InitAttr::default()).unwrap();
    assert_eq!(qb.state().unwrap(), QpState::Init);
    drop(qa);
    drop(qb);
}

#[test]
fn ud_qps_need_no_peer_to_become_ready() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let ready = |pd: &softib::ProtectionDomain, cq| {
        pd.create_qp_typed(QpType::Ud, cq, cq, 16)
            .unwrap()
            .init(&InitAttr::default())
            .unwrap()
            .ready_to_receive(&RtrAttr::datagram())
            .unwrap()
            .ready_to_send(&RtsAttr::default())
            .unwrap()
    };
    let (qa, qb) = (ready(&pd_a, &cq_a), ready(&pd_b, &cq_b));
    // A UD receive holds the 40-byte GRH area first.
    qb.recv(&mr_b, 0, 40 + 100, 5).unwrap();
    buf_a.write(0, b"datagram");
    qa.send_to_endpoint(&mr_a, 0, 8, &qb.endpoint().unwrap(), 6)
        .unwrap();
    assert_eq!(cq_a.wait(WAIT).unwrap().status, WcStatus::Success);
    let wc = cq_b.wait(WAIT).unwrap();
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 40 + 8));
    let mut got = [0u8; 8];
    buf_b.read(40, &mut got);
    assert_eq!(&got, b"datagram");
}
