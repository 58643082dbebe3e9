//! The owned verbs objects over an embedded HCA: RC write, send/receive, read and UD, and the
//! objects released when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, Context, Device, Mtu, QpType, WcOpcode, WcStatus};

mod common;
use common::{connect_regions, open_pair, open_pair_in_daemon};

/// An embedded HCA with `rxe0` (127.0.0.2) and `rxe1` (127.0.0.3) on a port of their own.
fn two_devices() -> EmbeddedDaemon {
    let hca = EmbeddedDaemon::start().unwrap();
    hca.add_loopback_pair().unwrap();
    hca
}

#[test]
fn rc_write_send_and_read_between_two_devices_then_everything_is_released() {
    let hca = two_devices();
    {
        let (a, b) = open_pair(hca.dir());
        assert!(!a.info().ports[0].link_layer_ib);
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
        let (buf_a, buf_b) = (a.alloc_buffer(8192).unwrap(), b.alloc_buffer(8192).unwrap());
        let all = AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ);
        let (mr_a, mr_b) = (
            pd_a.register(&buf_a, all).unwrap(),
            pd_b.register(&buf_b, all).unwrap(),
        );
        let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
        let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
        let (ea, eb) = (
            qp_a.endpoint_with(Some(&mr_a)).unwrap(),
            qp_b.endpoint_with(Some(&mr_b)).unwrap(),
        );
        // Endpoints cross processes as JSON (or anything serde speaks).
        let eb: softib::Endpoint =
            serde_json::from_str(&serde_json::to_string(&eb).unwrap()).unwrap();
        qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
        qp_b.connect(&ea, Mtu::Mtu1024).unwrap();

        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        buf_a.write(0, &data);
        qp_a.write(&mr_a, 0, data.len(), eb.addr + 100, eb.rkey, 1)
            .unwrap();
        let wc = cq_a.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; data.len()];
        buf_b.read(100, &mut got);
        assert_eq!(got, data);

        // READ it back into another place of A.
        qp_a.read(&mr_a, 6000, 1000, eb.addr + 100, eb.rkey, 2)
            .unwrap();
        let wc = cq_a.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::Success, WcOpcode::RdmaRead)
        );
        let mut back = vec![0u8; 1000];
        buf_a.read(6000, &mut back);
        assert_eq!(back, data[..1000]);

        qp_b.recv(&mr_b, 7000, 1000, 9).unwrap();
        qp_a.send(&mr_a, 0, 64, None, 3).unwrap();
        let wc = cq_b.wait(Duration::from_secs(5)).unwrap();
        assert_eq!(
            (wc.status, wc.opcode, wc.byte_len, wc.wr_id),
            (WcStatus::Success, WcOpcode::Recv, 64, 9)
        );
        // A wait with nothing to wait for says so.
        let e = cq_b
            .wait(Duration::from_millis(50))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no completion"), "{e}");
    }
    // Everything above was dropped: the daemon holds nothing for this process.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    let me = std::process::id();
    for c in ctx.resources().unwrap() {
        if c.pid == me {
            assert!(
                c.per_device.iter().all(|(_, n)| n.iter().all(|&x| x == 0)),
                "{c:?}"
            );
        }
    }
}

#[test]
fn ud_send_reaches_the_peer_with_the_grh_area_in_front() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 16).unwrap();
    let eb = qp_b.endpoint().unwrap();
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    qp_b.recv(&mr_b, 0, 40 + 256, 1).unwrap();
    buf_a.write(0, b"datagram");
    qp_a.send(&mr_a, 0, 8, Some(&eb), 5).unwrap();
    let wc = cq_b.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp),
        (WcStatus::Success, 48, qp_a.qpn())
    );
    let mut got = [0u8; 8];
    buf_b.read(40, &mut got);
    assert_eq!(&got, b"datagram");
    let e = qp_a.send(&mr_a, 0, 8, None, 6).unwrap_err().to_string();
    assert!(e.contains("needs the peer's endpoint"), "{e}");
}

#[test]
fn a_completion_channel_becomes_readable_when_an_armed_cq_gets_a_completion() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 16).unwrap();
    let eb = qp_b.endpoint().unwrap();
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    let channel = b.create_comp_channel().unwrap();
    cq_b.req_notify(&channel).unwrap();
    assert_eq!(
        channel.get_events(Some(Duration::from_millis(50))).unwrap(),
        0,
        "no completion yet, no event"
    );
    qp_b.recv(&mr_b, 0, 40 + 256, 1).unwrap();
    qp_a.send(&mr_a, 0, 8, Some(&eb), 5).unwrap();
    assert!(channel.get_events(Some(Duration::from_secs(5))).unwrap() >= 1);
    assert_eq!(cq_b.poll(4).unwrap().len(), 1);
    // One-shot: without arming again, the next completion raises no event.
    qp_b.recv(&mr_b, 0, 40 + 256, 2).unwrap();
    qp_a.send(&mr_a, 0, 8, Some(&eb), 6).unwrap();
    cq_b.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(channel.try_get_events().unwrap(), None);
}

#[test]
fn completions_beyond_a_full_ring_are_not_stranded() {
    let hca = two_devices();
    let (a, b) = open_pair_in_daemon(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    // Four slots in B's completion ring; eight completions arrive before B polls.
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(4).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 16).unwrap();
    let eb = qp_b.endpoint().unwrap();
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    for i in 0..8 {
        qp_b.recv(&mr_b, 0, 40 + 64, i).unwrap();
    }
    for i in 0..8 {
        qp_a.send(&mr_a, 0, 8, Some(&eb), 100 + i).unwrap();
        cq_a.wait(Duration::from_secs(5)).unwrap();
    }
    // Let every datagram land (the ring fills; the rest waits in the daemon's CQ).
    std::thread::sleep(Duration::from_millis(200));
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 8 && t0.elapsed() < Duration::from_secs(2) {
        got.extend(
            cq_b.poll_wait(16, Duration::from_millis(100))
                .unwrap()
                .into_iter()
                .map(|w| w.wr_id),
        );
    }
    assert_eq!(got, (0..8).collect::<Vec<u64>>(), "in order, none stranded");
}

#[test]
fn memory_of_the_program_itself_is_registered_and_reached_by_cross_memory_attach() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let buf_a = a.alloc_buffer(8192).unwrap();
    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ)
        .with(AccessFlags::REMOTE_ATOMIC);
    let mr_a = pd_a.register(&buf_a, all).unwrap();
    // B's memory is a plain Vec, with a counter for the atomic at its start.
    let mut plain = vec![0u8; 6000];
    plain[..8].copy_from_slice(&40u64.to_ne_bytes());
    plain[5000..5005].copy_from_slice(b"hello");
    {
        let mr_b = pd_b.register_slice(&mut plain, all).unwrap();
        assert!(mr_b.buffer().is_none());
        let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
        let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
        let (_, eb) = connect_regions(&qp_a, &mr_a, &qp_b, &mr_b);
        // WRITE 3000 bytes into the Vec, READ its "hello" back, FETCH_ADD its counter.
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 % 251) as u8).collect();
        buf_a.write(0, &data);
        qp_a.write(&mr_a, 0, data.len(), eb.addr + 100, eb.rkey, 1)
            .unwrap();
        assert_eq!(
            cq_a.wait(Duration::from_secs(5)).unwrap().status,
            WcStatus::Success
        );
        qp_a.read(&mr_a, 4000, 5, eb.addr + 5000, eb.rkey, 2)
            .unwrap();
        assert_eq!(
            cq_a.wait(Duration::from_secs(5)).unwrap().status,
            WcStatus::Success
        );
        let mut got = [0u8; 5];
        buf_a.read(4000, &mut got);
        assert_eq!(&got, b"hello");
        qp_a.post_send(vec![softib::SendWr {
            wr_id: 3,
            opcode: softib::WrOpcode::AtomicFetchAndAdd {
                remote: softib::RemoteAddr {
                    addr: eb.addr,
                    rkey: softib::RKey(eb.rkey),
                },
                add: 2,
            },
            sg_list: vec![mr_a.sge(6000, 8)],
            flags: softib::SendFlags::SIGNALED,
            inline_data: None,
            ud: None,
        }])
        .unwrap();
        assert_eq!(
            cq_a.wait(Duration::from_secs(5)).unwrap().status,
            WcStatus::Success
        );
        let mut old = [0u8; 8];
        buf_a.read(6000, &mut old);
        assert_eq!(u64::from_ne_bytes(old), 40);
        // The region (and the QPs) go; the Vec is ours again.
    }
    let data: Vec<u8> = (0..3000u32).map(|i| (i * 13 % 251) as u8).collect();
    assert_eq!(&plain[100..3100], &data[..]);
    assert_eq!(u64::from_ne_bytes(plain[..8].try_into().unwrap()), 42);
    // An address nothing is mapped at is refused when registering, not later.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    let pd = ctx.alloc_pd(0).unwrap();
    let e = ctx
        .reg_mr_process(0, pd, 0x10, 4096, AccessFlags::LOCAL_WRITE)
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot reach"), "{e}");
}

#[test]
fn posting_through_the_submission_ring_still_fails_at_once_as_the_verb_does() {
    let hca = two_devices();
    let (a, b) = open_pair_in_daemon(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 16).unwrap();
    let eb = qp_b.endpoint().unwrap();
    // Before RTS a send is refused by the daemon, with the reason.
    let e = qp_a
        .send(&mr_a, 0, 8, Some(&eb), 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("RTS"), "{e}");
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    for i in 0..16 {
        qp_b.recv(&mr_b, 0, 40 + 64, i).unwrap();
    }
    // The receive queue is full: the seventeenth receive fails at once.
    let e = qp_b.recv(&mr_b, 0, 40 + 64, 99).unwrap_err().to_string();
    assert!(e.contains("receive queue"), "{e}");
    // Sixteen sends fill the send queue; the next fails until completions are polled.
    for i in 0..16 {
        qp_a.send(&mr_a, 0, 8, Some(&eb), 100 + i).unwrap();
    }
    let e = qp_a
        .send(&mr_a, 0, 8, Some(&eb), 200)
        .unwrap_err()
        .to_string();
    assert!(e.contains("send queue"), "{e}");
    let mut done = 0;
    let t0 = std::time::Instant::now();
    while done < 16 && t0.elapsed() < Duration::from_secs(5) {
        done += cq_a
            .poll_wait(16, Duration::from_millis(100))
            .unwrap()
            .len();
    }
    assert_eq!(done, 16);
    qp_a.send(&mr_a, 0, 8, Some(&eb), 201).unwrap();
    // Every datagram arrived, in order.
    let mut got = Vec::new();
    while got.len() < 16 && t0.elapsed() < Duration::from_secs(5) {
        got.extend(
            cq_b.poll_wait(16, Duration::from_millis(100))
                .unwrap()
                .into_iter()
                .map(|w| w.wr_id),
        );
    }
    assert_eq!(got, (0..16).collect::<Vec<u64>>());
}

#[test]
fn two_qps_take_their_receives_from_one_shared_receive_queue() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let srq = pd_b.create_srq(8).unwrap();
    let (a1, a2) = (
        pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap(),
        pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap(),
    );
    let (b1, b2) = (
        pd_b.create_qp_with_srq(QpType::Rc, &cq_b, &cq_b, &srq, 8)
            .unwrap(),
        pd_b.create_qp_with_srq(QpType::Rc, &cq_b, &cq_b, &srq, 8)
            .unwrap(),
    );
    for (x, y) in [(&a1, &b1), (&a2, &b2)] {
        x.connect(&y.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
        y.connect(&x.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
    }
    // A receive posted to a QP on an SRQ is refused with the reason.
    let e = b1.recv(&mr_b, 0, 64, 1).unwrap_err().to_string();
    assert!(e.contains("SRQ"), "{e}");
    srq.recv(&mr_b, 0, 64, 10).unwrap();
    srq.recv(&mr_b, 64, 64, 11).unwrap();
    buf_a.write(0, b"one");
    buf_a.write(8, b"two");
    a1.send(&mr_a, 0, 3, None, 1).unwrap();
    a2.send(&mr_a, 8, 3, None, 2).unwrap();
    let mut got = Vec::new();
    let t0 = std::time::Instant::now();
    while got.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        got.extend(
            cq_b.poll_wait(4, Duration::from_millis(100))
                .unwrap()
                .into_iter()
                .map(|w| (w.qp_num, w.wr_id)),
        );
    }
    // Each message took one of the SRQ's receives, whichever QP it came on.
    let mut qps: Vec<_> = got.iter().map(|g| g.0).collect();
    let mut ids: Vec<_> = got.iter().map(|g| g.1).collect();
    qps.sort();
    ids.sort();
    let mut want_qps = vec![b1.qpn(), b2.qpn()];
    want_qps.sort();
    assert_eq!((qps, ids), (want_qps, vec![10, 11]));
    // Another client cannot use this client's SRQ: its handle names nothing there.
    let mut other = Context::open_at(hca.dir()).unwrap();
    let e = other
        .post_srq_recv(1, softib::SrqHandle(0), vec![])
        .unwrap_err()
        .to_string();
    assert!(e.contains("SRQ"), "{e}");
}

#[test]
fn ud_sends_to_one_peer_share_one_address_handle_and_owned_handles_send_too() {
    let hca = two_devices();
    let (a, b) = open_pair(hca.dir());
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, AccessFlags::LOCAL_WRITE).unwrap(),
        pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 32).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 32).unwrap();
    let eb = qp_b.endpoint().unwrap();
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    for i in 0..20 {
        qp_b.recv(&mr_b, 0, 40 + 64, i).unwrap();
    }
    for i in 0..10 {
        qp_a.send(&mr_a, 0, 8, Some(&eb), i).unwrap();
        cq_a.wait(Duration::from_secs(5)).unwrap();
    }
    let ah = qp_a.address_handle(&eb).unwrap();
    for i in 10..20 {
        qp_a.send_to(&mr_a, 0, 8, &ah, eb.qpn, i).unwrap();
        cq_a.wait(Duration::from_secs(5)).unwrap();
    }
    let mut got = 0;
    let t0 = std::time::Instant::now();
    while got < 20 && t0.elapsed() < Duration::from_secs(5) {
        got += cq_b
            .poll_wait(32, Duration::from_millis(100))
            .unwrap()
            .len();
    }
    assert_eq!(got, 20);
    // Ten sends through `send` made one AH; the owned one is the second.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    let ahs: u32 = ctx
        .resources()
        .unwrap()
        .iter()
        .flat_map(|c| c.per_device.iter().map(|(_, n)| n[4]))
        .sum();
    assert_eq!(ahs, 2);
    drop(ah);
    let ahs: u32 = ctx
        .resources()
        .unwrap()
        .iter()
        .flat_map(|c| c.per_device.iter().map(|(_, n)| n[4]))
        .sum();
    assert_eq!(ahs, 1, "a dropped AddressHandle is destroyed");
}

#[test]
fn another_clients_address_handle_is_refused_on_the_ring_too() {
    let hca = two_devices();
    let (a, b) = open_pair_in_daemon(hca.dir());
    // A second client on rxe0.
    let rogue = Device::open_on(hca.dir(), Some("rxe0"), softib::DataPath::Daemon).unwrap();
    let (pd_a, pd_b, pd_r) = (
        a.alloc_pd().unwrap(),
        b.alloc_pd().unwrap(),
        rogue.alloc_pd().unwrap(),
    );
    let (cq_a, cq_b, cq_r) = (
        a.create_cq(16).unwrap(),
        b.create_cq(16).unwrap(),
        rogue.create_cq(16).unwrap(),
    );
    let (buf_b, buf_r) = (
        b.alloc_buffer(4096).unwrap(),
        rogue.alloc_buffer(4096).unwrap(),
    );
    let mr_b = pd_b.register(&buf_b, AccessFlags::LOCAL_WRITE).unwrap();
    let mr_r = pd_r.register(&buf_r, AccessFlags::LOCAL_WRITE).unwrap();
    let qp_a = pd_a.create_qp(QpType::Ud, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Ud, &cq_b, &cq_b, 16).unwrap();
    let qp_r = pd_r.create_qp(QpType::Ud, &cq_r, &cq_r, 16).unwrap();
    let eb = qp_b.endpoint().unwrap();
    for q in [&qp_a, &qp_r] {
        q.connect(&eb, Mtu::Mtu1024).unwrap();
    }
    qp_b.connect(&qp_a.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    qp_b.recv(&mr_b, 0, 40 + 64, 1).unwrap();
    // The first client's AH, used by the second: the daemon refuses the WR.
    let ah = qp_a.address_handle(&eb).unwrap();
    qp_r.post_send(vec![softib::SendWr {
        wr_id: 7,
        opcode: softib::WrOpcode::Send,
        sg_list: vec![mr_r.sge(0, 8)],
        flags: softib::SendFlags::SIGNALED,
        inline_data: None,
        ud: Some(softib::UdDest {
            ah: ah.handle(),
            remote_qpn: eb.qpn,
            remote_qkey: softib::UD_QKEY,
        }),
    }])
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        cq_r.poll(4).unwrap().is_empty(),
        "the refused WR did not run"
    );
    assert!(cq_b.poll(4).unwrap().is_empty(), "nothing reached the peer");
}
