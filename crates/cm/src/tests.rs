use super::*;
use proptest::prelude::*;

const SERVICE: u64 = 0x0106_1C06;
const A: u8 = 1;
const B: u8 = 2;

fn config(first: u32) -> Config {
    Config {
        local_ca_guid: Guid(u64::from(first)),
        first_comm_id: first,
        response_timeout: 14, // 67 ms
        max_cm_retries: 15,
        time_wait: Duration::from_millis(100),
        mra_service_timeout: 16,
    }
}

fn connect_params(qpn: u32) -> ConnectParams {
    ConnectParams {
        service_id: SERVICE,
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(100),
        responder_resources: 1,
        initiator_depth: 1,
        transport: TransportService::Rc,
        pkey: PKey(0xFFFF),
        path_mtu: 3,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        primary: Path::default(),
        private_data: [0x11; private_len::REQ],
    }
}

fn accept_params(qpn: u32) -> AcceptParams {
    AcceptParams {
        local_qpn: Qpn::new(qpn),
        starting_psn: Psn::new(200),
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        srq: false,
        private_data: [0x22; private_len::REP],
    }
}

/// What kind of message a MAD is.
fn kind(mad: &[u8]) -> &'static str {
    Message::parse(mad).map_or("?", |(_, m)| m.name())
}

fn drain<A: Copy + Ord + std::fmt::Debug>(cm: &mut Cm<A>) -> Vec<(A, [u8; MAD_LEN])> {
    std::iter::from_fn(|| cm.poll_transmit()).collect()
}

fn events(cm: &mut Cm<u8>) -> Vec<Event<u8>> {
    std::iter::from_fn(|| cm.poll_event()).collect()
}

#[test]
fn req_rep_rtu_then_dreq_drep() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(100)), Cm::new(config(500)));
    b.listen(SERVICE, 8).expect("listen");
    let id_a = a.connect(t, B, &connect_params(17));
    let out = drain(&mut a);
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0, kind(&out[0].1)), (B, "REQ"));
    b.handle_mad(t, A, &out[0].1);
    let ev = events(&mut b);
    let Some(Event::ConnectRequest {
        id: id_b,
        from,
        req,
    }) = ev.first().cloned()
    else {
        panic!("expected a connect request, got {ev:?}");
    };
    assert_eq!(
        (from, req.local_qpn, req.private_data[0]),
        (A, Qpn::new(17), 0x11)
    );
    b.accept(t, id_b, &accept_params(33)).expect("accept");
    let rep = drain(&mut b);
    assert_eq!(kind(&rep[0].1), "REP");
    a.handle_mad(t, B, &rep[0].1);
    let ev = events(&mut a);
    let Some(Event::Reply { id, rep: r }) = ev.first().cloned() else {
        panic!("expected a reply, got {ev:?}");
    };
    assert_eq!(
        (id, r.local_qpn, r.private_data[0]),
        (id_a, Qpn::new(33), 0x22)
    );
    a.ready_to_use(id_a, &[]).expect("rtu");
    assert_eq!(events(&mut a), vec![Event::Established { id: id_a }]);
    let rtu = drain(&mut a);
    assert_eq!(kind(&rtu[0].1), "RTU");
    b.handle_mad(t, A, &rtu[0].1);
    assert_eq!(events(&mut b), vec![Event::Established { id: id_b }]);
    assert!(a.is_established(id_a) && b.is_established(id_b));
    assert_eq!(a.poll_timeout(), None, "nothing left to retransmit");

    a.disconnect(t, id_a, &[]).expect("disconnect");
    let dreq = drain(&mut a);
    assert_eq!(kind(&dreq[0].1), "DREQ");
    b.handle_mad(t, A, &dreq[0].1);
    assert_eq!(events(&mut b), vec![Event::Disconnected { id: id_b }]);
    let drep = drain(&mut b);
    assert_eq!(kind(&drep[0].1), "DREP");
    // A duplicate DREQ in TimeWait gets the DREP again.
    b.handle_mad(t, A, &dreq[0].1);
    assert_eq!(kind(&drain(&mut b)[0].1), "DREP");
    assert_eq!(b.counters().duplicate_dreq, 1);
    a.handle_mad(t, B, &drep[0].1);
    assert_eq!(events(&mut a), vec![Event::Disconnected { id: id_a }]);
    let later = t + Duration::from_millis(200);
    a.handle_timeout(later);
    b.handle_timeout(later);
    assert_eq!(events(&mut a), vec![Event::TimeWaitExit { id: id_a }]);
    assert_eq!(events(&mut b), vec![Event::TimeWaitExit { id: id_b }]);
    assert_eq!((a.connections(), b.connections()), (0, 0));
}

#[test]
fn a_req_nobody_listens_for_is_rejected_at_once() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(1)), Cm::<u8>::new(config(2)));
    let id = a.connect(t, B, &connect_params(17));
    let req = drain(&mut a);
    b.handle_mad(t, A, &req[0].1);
    let rej = drain(&mut b);
    assert_eq!(kind(&rej[0].1), "REJ");
    assert_eq!(b.counters().no_listener, 1);
    a.handle_mad(t, B, &rej[0].1);
    let ev = events(&mut a);
    assert!(
        matches!(ev[..], [Event::Rejected { id: i, reason: RejectReason::InvalidServiceId, .. }] if i == id),
        "{ev:?}"
    );
    assert_eq!(a.connections(), 0);
}

#[test]
fn a_consumer_reject_carries_its_reason_and_private_data() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(1)), Cm::new(config(2)));
    b.listen(SERVICE, 1).expect("listen");
    let id = a.connect(t, B, &connect_params(17));
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    let Some(Event::ConnectRequest { id: pid, .. }) = b.poll_event() else {
        panic!("no request");
    };
    b.reject(pid, RejectReason::ConsumerDefined, b"go away")
        .expect("reject");
    a.handle_mad(t, B, &drain(&mut b)[0].1);
    match a.poll_event() {
        Some(Event::Rejected {
            id: i,
            reason: RejectReason::ConsumerDefined,
            private_data,
        }) => {
            assert_eq!(i, id);
            assert_eq!(&private_data[..7], b"go away");
        }
        other => panic!("expected a reject, got {other:?}"),
    }
    // The backlog slot is free again: another REQ is delivered.
    a.connect(t, B, &connect_params(18));
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    assert!(matches!(b.poll_event(), Some(Event::ConnectRequest { .. })));
}

#[test]
fn lost_req_rep_and_rtu_are_recovered() {
    let mut t = Duration::ZERO;
    let step = cm_timeout(14) + Duration::from_millis(1);
    let (mut a, mut b) = (Cm::new(config(1)), Cm::new(config(9)));
    b.listen(SERVICE, 4).expect("listen");
    let id_a = a.connect(t, B, &connect_params(17));
    drain(&mut a); // the REQ is lost
    t += step;
    a.handle_timeout(t);
    let req = drain(&mut a);
    assert_eq!(kind(&req[0].1), "REQ");
    assert_eq!(a.counters().retransmits, 1);
    b.handle_mad(t, A, &req[0].1);
    let Some(Event::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!("no request");
    };
    // A duplicate REQ while the consumer decides gets an MRA, which makes A wait longer.
    b.handle_mad(t, A, &req[0].1);
    let mra = drain(&mut b);
    assert_eq!(kind(&mra[0].1), "MRA");
    assert_eq!(b.counters().duplicate_req, 1);
    a.handle_mad(t, B, &mra[0].1);
    let waits = a.poll_timeout().expect("a timer");
    assert!(
        waits > t + cm_timeout(16),
        "the MRA's service timeout is added"
    );
    b.accept(t, id_b, &accept_params(33)).expect("accept");
    drain(&mut b); // the REP is lost
    t += step;
    b.handle_timeout(t);
    let rep = drain(&mut b);
    assert_eq!(kind(&rep[0].1), "REP");
    // The duplicate REQ now gets the REP.
    b.handle_mad(t, A, &req[0].1);
    assert_eq!(kind(&drain(&mut b)[0].1), "REP");
    a.handle_mad(t, B, &rep[0].1);
    assert!(matches!(a.poll_event(), Some(Event::Reply { .. })));
    a.ready_to_use(id_a, &[]).expect("rtu");
    drain(&mut a); // the RTU is lost
    t += step;
    b.handle_timeout(t);
    let rep = drain(&mut b);
    assert_eq!(kind(&rep[0].1), "REP");
    a.handle_mad(t, B, &rep[0].1);
    let rtu = drain(&mut a);
    assert_eq!(kind(&rtu[0].1), "RTU");
    assert_eq!(a.counters().duplicate_rep, 1);
    b.handle_mad(t, A, &rtu[0].1);
    assert!(b.is_established(id_b));
    assert!(a.is_established(id_a));
}

#[test]
fn an_unanswered_req_times_out_with_a_rej() {
    let mut t = Duration::ZERO;
    let mut a = Cm::<u8>::new(config(1));
    let id = a.connect(t, B, &connect_params(17));
    let mut reqs = drain(&mut a).len();
    for _ in 0..20 {
        t = a.poll_timeout().unwrap_or(t);
        a.handle_timeout(t);
        reqs += drain(&mut a)
            .iter()
            .filter(|(_, m)| kind(m) == "REQ")
            .count();
    }
    assert_eq!(reqs, 1 + 15, "the first REQ and max_cm_retries more");
    assert_eq!(events(&mut a), vec![Event::TimedOut { id, active: true }]);
    assert_eq!(a.connections(), 0);
    assert_eq!(a.poll_timeout(), None);
}

#[test]
fn the_backlog_bounds_pending_requests_and_the_rest_get_no_resources() {
    let t = Duration::ZERO;
    let mut b = Cm::<u8>::new(config(1));
    b.listen(SERVICE, 2).expect("listen");
    let mut rejected = 0;
    for n in 0..10u8 {
        let mut a = Cm::new(config(u32::from(n) * 100 + 1000));
        a.connect(t, B, &connect_params(17));
        b.handle_mad(t, 10 + n, &drain(&mut a)[0].1);
        for (_, m) in drain(&mut b) {
            if let Ok((_, Message::Rej(r))) = Message::parse(&m) {
                assert_eq!(r.reason, RejectReason::NoResources);
                rejected += 1;
            }
        }
    }
    assert_eq!(rejected, 8);
    assert_eq!(b.counters().backlog_full, 8);
    assert_eq!(events(&mut b).len(), 2);
}

#[test]
fn a_req_from_a_qp_connected_here_is_stale() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(1)), Cm::new(config(9)));
    b.listen(SERVICE, 4).expect("listen");
    let id = a.connect(t, B, &connect_params(17));
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    let Some(Event::ConnectRequest { id: pid, .. }) = b.poll_event() else {
        panic!("no request");
    };
    b.accept(t, pid, &accept_params(33)).expect("accept");
    a.handle_mad(t, B, &drain(&mut b)[0].1);
    a.ready_to_use(id, &[]).expect("rtu");
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    assert!(b.is_established(pid));
    // The same QP asks again under a new communication ID (its side was reset).
    let mut a2 = Cm::new(Config {
        first_comm_id: 77,
        ..config(1)
    });
    let _ = a2.connect(t, B, &connect_params(17));
    b.handle_mad(t, A, &drain(&mut a2)[0].1);
    let out = drain(&mut b);
    assert!(matches!(
        Message::parse(&out[0].1),
        Ok((
            _,
            Message::Rej(Rej {
                reason: RejectReason::StaleConn,
                ..
            })
        ))
    ));
    assert_eq!(b.counters().stale, 1);
}

/// Every kind of bad input, one at a time, at a machine with an established connection: what
/// is no CM message (wrong length, ClassVersion, method, an attribute that is no message or
/// one softib does not take — LAP, APR —, a REJ whose ARI length overflows) is dropped and
/// counted as malformed; a message that names a connection this side does not have, or
/// names one from the wrong peer, is dropped and counted, except what the spec answers (a
/// REP with REJ InvalidCommID, a DREQ with a DREP); a REQ no QP could take is rejected with
/// the reason naming the field. The consumer hears nothing, and the connection is untouched.
#[test]
fn bad_cm_mads_are_dropped_or_answered_per_the_spec_and_counted() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(1)), Cm::new(config(500)));
    b.listen(SERVICE, 8).expect("listen");
    let id_a = a.connect(t, B, &connect_params(17));
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    let Some(Event::ConnectRequest { id: id_b, .. }) = b.poll_event() else {
        panic!("no request");
    };
    b.accept(t, id_b, &accept_params(33)).expect("accept");
    a.handle_mad(t, B, &drain(&mut b)[0].1);
    a.poll_event();
    a.ready_to_use(id_a, &[]).expect("rtu");
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    assert!(b.is_established(id_b));
    events(&mut b);

    let rtu = |local, remote| {
        Message::Rtu(Rtu {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; private_len::RTU],
        })
        .emit(7)
    };
    let with = |mut m: [u8; MAD_LEN], at: usize, v: &[u8]| {
        m[at..at + v.len()].copy_from_slice(v);
        m
    };
    let rej = Message::Rej(Rej::new(9, 99, MessageKind::Rep, RejectReason::Timeout)).emit(8);
    let malformed: Vec<(&str, Vec<u8>)> = vec![
        ("shorter than a MAD", rtu(id_a, id_b)[..255].to_vec()),
        ("longer than a MAD", [&rtu(id_a, id_b)[..], &[0]].concat()),
        ("ClassVersion 1", with(rtu(id_a, id_b), 2, &[1]).to_vec()),
        ("method Get", with(rtu(id_a, id_b), 3, &[0x01]).to_vec()),
        ("LAP", with(rtu(id_a, id_b), 16, &[0x00, 0x19]).to_vec()),
        ("APR", with(rtu(id_a, id_b), 16, &[0x00, 0x1A]).to_vec()),
        (
            "attribute 0x0030",
            with(rtu(id_a, id_b), 16, &[0x00, 0x30]).to_vec(),
        ),
        ("REJ ARI length 127", with(rej, 24 + 9, &[0xFE]).to_vec()),
    ];
    for (n, (what, mad)) in malformed.iter().enumerate() {
        b.handle_mad(t, A, mad);
        assert_eq!(b.counters().malformed, n as u64 + 1, "{what}");
        assert!(drain(&mut b).is_empty(), "{what} was answered");
    }

    // Communication IDs this side does not have.
    let unknown = 0x0BAD;
    let dropped = [
        ("RTU", rtu(unknown, unknown)),
        (
            "MRA",
            Message::Mra(Mra {
                local_comm_id: unknown,
                remote_comm_id: unknown,
                message_mraed: MessageKind::Rep,
                service_timeout: 10,
                private_data: [0; private_len::MRA],
            })
            .emit(9),
        ),
        (
            "REJ",
            Message::Rej(Rej::new(
                unknown,
                unknown,
                MessageKind::Rep,
                RejectReason::Timeout,
            ))
            .emit(10),
        ),
        (
            "DREP",
            Message::Drep(Drep {
                local_comm_id: unknown,
                remote_comm_id: unknown,
                private_data: [0; private_len::DREP],
            })
            .emit(11),
        ),
        // The connection's own ID, from another peer.
        ("RTU from another peer", rtu(id_a, id_b)),
    ];
    for (n, (what, mad)) in dropped.iter().enumerate() {
        let from = if what.contains("another") { 3 } else { A };
        b.handle_mad(t, from, mad);
        assert_eq!(b.counters().unknown_comm_id, n as u64 + 1, "{what}");
        assert!(drain(&mut b).is_empty(), "{what} was answered");
    }
    // A REP for no connection of ours: REJ InvalidCommID (IBA §12.6.5), naming its sender's ID.
    let rep = Rep {
        local_comm_id: 0x51,
        remote_comm_id: unknown,
        local_qpn: Qpn::new(5),
        ..Rep::default()
    };
    b.handle_mad(t, A, &Message::Rep(rep).emit(12));
    let out = drain(&mut b);
    assert!(
        matches!(
            Message::parse(&out[0].1),
            Ok((
                _,
                Message::Rej(Rej {
                    reason: RejectReason::InvalidCommId,
                    remote_comm_id: 0x51,
                    ..
                })
            ))
        ),
        "{:?}",
        out.iter().map(|m| kind(&m.1)).collect::<Vec<_>>()
    );
    // A DREQ for no connection of ours (or naming another QP): a DREP (IBA §12.9.8.4).
    for (what, remote, qpn) in [("unknown ID", unknown, 17), ("another QP", id_b, 18)] {
        let dreq = Message::Dreq(Dreq {
            local_comm_id: id_a,
            remote_comm_id: remote,
            remote_qpn: Qpn::new(qpn),
            private_data: [0; private_len::DREQ],
        })
        .emit(13);
        b.handle_mad(t, A, &dreq);
        assert_eq!(kind(&drain(&mut b)[0].1), "DREP", "{what}");
    }
    assert_eq!(b.counters().unknown_comm_id, dropped.len() as u64 + 3);

    // REQs no QP could take: rejected, naming the field.
    for (what, transport, mtu, reason) in [
        (
            "RD",
            TransportService::Rd,
            3,
            RejectReason::InvalidTransportType,
        ),
        (
            "transport 3",
            TransportService::Unknown(3),
            3,
            RejectReason::InvalidTransportType,
        ),
        (
            "MTU code 0",
            TransportService::Rc,
            0,
            RejectReason::InvalidMtu,
        ),
        (
            "MTU code 7",
            TransportService::Uc,
            7,
            RejectReason::InvalidMtu,
        ),
    ] {
        let mut c = Cm::<u8>::new(config(900));
        c.connect(
            t,
            B,
            &ConnectParams {
                transport,
                path_mtu: mtu,
                ..connect_params(40)
            },
        );
        b.handle_mad(t, 4, &drain(&mut c)[0].1);
        let out = drain(&mut b);
        assert!(
            matches!(
                Message::parse(&out[0].1),
                Ok((_, Message::Rej(Rej { reason: r, .. }))) if r == reason
            ),
            "{what}"
        );
    }
    assert_eq!(b.counters().invalid_req, 4);

    assert!(events(&mut b).is_empty(), "the consumer heard of bad input");
    assert!(b.is_established(id_b), "bad input touched the connection");
    assert_eq!(b.connections(), 1);
}

#[test]
fn sidr_request_and_reply() {
    let t = Duration::ZERO;
    let (mut a, mut b) = (Cm::new(config(1)), Cm::new(config(9)));
    let svc = msg::service_id(PortSpace::Udp, 7174);
    // Nobody listens: answered at once.
    let id = a.sidr_request(t, B, svc, PKey(0xFFFF), &[0; private_len::SIDR_REQ]);
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    a.handle_mad(t, B, &drain(&mut b)[0].1);
    assert!(matches!(
        a.poll_event(),
        Some(Event::SidrReply { id: i, rep }) if i == id && rep.status == SidrStatus::UnsupportedServiceId
    ));
    b.listen(svc, 1).expect("listen");
    let id = a.sidr_request(t, B, svc, PKey(0xFFFF), &[0; private_len::SIDR_REQ]);
    b.handle_mad(t, A, &drain(&mut a)[0].1);
    let Some(Event::SidrRequest { id: h, .. }) = b.poll_event() else {
        panic!("no SIDR request");
    };
    b.sidr_reply(h, SidrStatus::Ok, Qpn::new(44), QKey(0x0111_1C06), &[])
        .expect("reply");
    a.handle_mad(t, B, &drain(&mut b)[0].1);
    assert!(matches!(
        a.poll_event(),
        Some(Event::SidrReply { id: i, rep }) if i == id && rep.qpn == Qpn::new(44)
    ));
}

proptest! {
    /// Whatever bytes arrive, the machine answers without panicking.
    #[test]
    fn arbitrary_mads_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300), attr in 0x10u16..0x1B) {
        let mut cm = Cm::<u8>::new(config(1));
        cm.listen(SERVICE, 2).expect("listen");
        let mut mad = b.clone();
        if mad.len() >= 24 {
            mad[1] = 0x07;
            mad[2] = 2;
            mad[3] = 0x03;
            mad[16..18].copy_from_slice(&attr.to_be_bytes());
        }
        cm.handle_mad(Duration::ZERO, A, &b);
        cm.handle_mad(Duration::ZERO, A, &mad);
        cm.handle_timeout(Duration::from_secs(100));
        while cm.poll_event().is_some() || cm.poll_transmit().is_some() {}
    }
}

/// A flood of REQs from peers that never answer: the listener's backlog bounds what it
/// holds (the rest get REJ NoResources at once), the consumer's accepts free the backlog,
/// and a legitimate client that connects during the flood is established. The flood's
/// REPs are retried and then time out, leaving nothing behind.
#[test]
fn a_listener_under_a_req_flood_still_serves_a_legitimate_connect() {
    const FLOOD: u16 = 500;
    const BACKLOG: usize = 8;
    let mut t = Duration::ZERO;
    let mut server = Cm::<u16>::new(config(1));
    server.listen(SERVICE, BACKLOG).expect("listen");
    let mut flooders: Vec<Cm<u16>> = Vec::new();
    let mut legit = Cm::<u16>::new(config(900_000));
    const LEGIT: u16 = 60_000;
    const SERVER: u16 = 0;
    let mut no_resources = 0u32;
    let mut legit_id = None;
    let mut server_established = 0;
    for n in 0..FLOOD {
        let mut f = Cm::new(config(u32::from(n) * 1000 + 10_000));
        f.connect(t, SERVER, &connect_params(17));
        for (_, m) in drain(&mut f) {
            server.handle_mad(t, 1 + n, &m);
        }
        flooders.push(f);
        // Halfway through the flood, the legitimate client connects.
        if n == FLOOD / 2 {
            legit_id = Some(legit.connect(t, SERVER, &connect_params(99)));
            for (_, m) in drain(&mut legit) {
                server.handle_mad(t, LEGIT, &m);
            }
        }
        // The consumer accepts what it hears (rdma_cm programs do), one turn at a time.
        while let Some(e) = server.poll_event() {
            if let Event::ConnectRequest { id, .. } = e {
                server.accept(t, id, &accept_params(500)).expect("accept");
            }
        }
        for (to, m) in drain(&mut server) {
            match Message::parse(&m) {
                Ok((_, Message::Rej(r))) => {
                    assert_eq!(r.reason, RejectReason::NoResources);
                    assert_ne!(to, LEGIT, "the legitimate client was turned away");
                    no_resources += 1;
                }
                // The flood never answers; the legitimate client does.
                _ if to == LEGIT => legit.handle_mad(t, SERVER, &m),
                _ => {}
            }
        }
        while let Some(e) = legit.poll_event() {
            if let Event::Reply { id, .. } = e {
                legit.ready_to_use(id, &[]).expect("rtu");
            }
        }
        for (_, m) in drain(&mut legit) {
            server.handle_mad(t, LEGIT, &m);
        }
        while let Some(e) = server.poll_event() {
            if matches!(e, Event::Established { .. }) {
                server_established += 1;
            }
        }
    }
    let legit_id = legit_id.expect("connected");
    assert!(legit.is_established(legit_id));
    assert_eq!(server_established, 1);
    // Accepts drain the backlog as fast as the flood fills it, so nothing is turned away
    // here; a consumer that does not accept is what the backlog test covers.
    assert_eq!(no_resources, 0);
    assert_eq!(server.connections(), usize::from(FLOOD) + 1);
    // The flood's REPs go unanswered: retried, then given up (REJ Timeout), until only the
    // legitimate connection remains.
    while let Some(next) = server.poll_timeout() {
        t = next;
        server.handle_timeout(t);
        drain(&mut server);
        while server.poll_event().is_some() {}
    }
    assert_eq!(server.connections(), 1);
    assert!(server.counters().retransmits >= u64::from(FLOOD));
}

/// The same flood at a consumer that is slow to accept: the backlog holds BACKLOG requests,
/// every REQ beyond it gets REJ NoResources at once (no state kept for it), and once the
/// consumer catches up a legitimate client connects.
#[test]
fn a_flood_beyond_the_backlog_is_rejected_with_no_resources_and_leaves_no_state() {
    const FLOOD: u16 = 300;
    const BACKLOG: usize = 8;
    let t = Duration::ZERO;
    let mut server = Cm::<u16>::new(config(1));
    server.listen(SERVICE, BACKLOG).expect("listen");
    let mut no_resources = 0;
    for n in 0..FLOOD {
        let mut f = Cm::new(config(u32::from(n) * 1000 + 10_000));
        f.connect(t, 0, &connect_params(17));
        for (_, m) in drain(&mut f) {
            server.handle_mad(t, 1 + n, &m);
        }
        for (_, m) in drain(&mut server) {
            if let Ok((_, Message::Rej(r))) = Message::parse(&m) {
                assert_eq!(r.reason, RejectReason::NoResources);
                no_resources += 1;
            }
        }
    }
    assert_eq!(no_resources, u32::from(FLOOD) - BACKLOG as u32);
    assert_eq!(server.connections(), BACKLOG);
    // Only that listener's backlog is full: another service of the same CM still takes a REQ.
    const OTHER: u64 = SERVICE + 1;
    server.listen(OTHER, 1).expect("listen");
    let mut other = Cm::<u16>::new(config(800_000));
    other.connect(
        t,
        0,
        &ConnectParams {
            service_id: OTHER,
            ..connect_params(98)
        },
    );
    for (_, m) in drain(&mut other) {
        server.handle_mad(t, 50_000, &m);
    }
    assert!(
        drain(&mut server).is_empty(),
        "the other service's REQ was rejected"
    );
    assert_eq!(server.connections(), BACKLOG + 1);
    // The consumer rejects the flood it now hears, which frees the backlog.
    while let Some(e) = server.poll_event() {
        if let Event::ConnectRequest { id, req, .. } = e {
            if req.service_id == OTHER {
                continue;
            }
            server
                .reject(id, RejectReason::ConsumerDefined, &[])
                .expect("reject");
        }
    }
    drain(&mut server);
    let mut legit = Cm::<u16>::new(config(900_000));
    let id = legit.connect(t, 0, &connect_params(99));
    for (_, m) in drain(&mut legit) {
        server.handle_mad(t, 60_000, &m);
    }
    let Some(Event::ConnectRequest { id: sid, .. }) = server.poll_event() else {
        panic!("the legitimate REQ was not heard");
    };
    server.accept(t, sid, &accept_params(500)).expect("accept");
    for (_, m) in drain(&mut server) {
        legit.handle_mad(t, 0, &m);
    }
    assert!(matches!(legit.poll_event(), Some(Event::Reply { .. })));
    legit.ready_to_use(id, &[]).expect("rtu");
    assert!(legit.is_established(id));
}
