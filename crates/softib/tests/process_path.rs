//! The process data path (`SOFTIB_DATAPATH=process`): each context's RoCE device runs its
//! engine in this process, with its own socket in the device's steering group. Two contexts on
//! `rxe0` and `rxe1` of one embedded daemon — two clients, as two processes would be —
//! exchange RC SENDs, WRITEs, READs and atomics, and UD SENDs, through the rings the daemon
//! gives their engines, every byte checked; the daemon hands out their
//! QPNs and keys and shows what they own; a peer that goes away leaves its partner with
//! retry-exceeded. (The kernel's path for RC is the perftest tests' `SOFTIB_PEER_RINGS=0`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use softib::{
    AccessFlags, CompletionQueue, Context, Device, QpType, RemoteAddr, SendFlags, SendWr, WcOpcode,
    WcStatus, WrOpcode,
};
use softib_engine::QPN_BLOCK;

mod common;
use common::{all, connect, loopback_pair, with_pair, Pair};

/// Every test of this binary runs on the process path (the variable is read when a context
/// opens; all tests set the same value).
fn process_path() {
    std::env::set_var("SOFTIB_DATAPATH", "process");
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

fn done(cq: &CompletionQueue, wr_id: u64, opcode: WcOpcode) -> u32 {
    let wc = cq.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, opcode),
        "{wc:?}"
    );
    wc.byte_len
}

#[test]
fn rc_send_write_read_and_atomics_move_every_byte() {
    process_path();
    let (hca, a, b) = loopback_pair();
    const LEN: usize = 256 * 1024;
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let access = all().with(AccessFlags::REMOTE_ATOMIC);
    let mr_a = pd_a.register(&buf_a, access).unwrap();
    let mr_b = pd_b.register(&buf_b, access).unwrap();
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
    connect(&qp_a, &qp_b);

    // The daemon numbered them from blocks, and counts what each engine holds.
    // (The daemon's own engine numbers from 0x10..0x1010 up; blocks start at 0x2000 or above.)
    for q in [qp_a.qpn(), qp_b.qpn()] {
        assert_eq!(q.value() % QPN_BLOCK, 0, "the first QPN of a block: {q}");
        assert!(q.value() >= 0x2000, "{q}");
    }
    let res = Context::open_at(hca.dir()).unwrap().resources().unwrap();
    let held: Vec<_> = res
        .iter()
        .flat_map(|r| r.per_device.iter().copied())
        .filter(|(_, c)| *c == [1, 1, 1, 1, 0])
        .map(|(d, _)| d)
        .collect();
    assert_eq!(held, [0, 1], "{res:?}");

    // Their QPs reach each other through rings: nothing sent yet. A asked for them; B hears
    // of them on its event channel, which its progress thread reads when it gets to it.
    let t0 = std::time::Instant::now();
    let (ca, cb) = loop {
        let (ca, cb) = (
            a.process_counters().unwrap().expect("a process engine"),
            b.process_counters().unwrap().expect("a process engine"),
        );
        if cb.peers == 1 || t0.elapsed() > Duration::from_secs(5) {
            break (ca, cb);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!((ca.peers, cb.peers), (1, 1), "{ca:?} {cb:?}");

    // SEND: many MTU-sized packets and an odd tail.
    let data = pattern(1, 70_001);
    buf_a.write(0, &data);
    qp_b.recv(&mr_b, 0, LEN, 1).unwrap();
    qp_a.send(&mr_a, 0, data.len(), None, 2).unwrap();
    done(&cq_a, 2, WcOpcode::Send);
    assert_eq!(done(&cq_b, 1, WcOpcode::Recv) as usize, data.len());
    let mut got = vec![0u8; data.len()];
    buf_b.read(0, &mut got);
    assert!(got == data, "SEND");

    // WRITE into B (no thread of B polls: its progress thread answers).
    let data = pattern(2, 100_003);
    buf_a.write(1000, &data);
    qp_a.write(&mr_a, 1000, data.len(), mr_b.addr() + 5, mr_b.rkey(), 3)
        .unwrap();
    done(&cq_a, 3, WcOpcode::RdmaWrite);
    let mut got = vec![0u8; data.len()];
    buf_b.read(5, &mut got);
    assert!(got == data, "WRITE");
    // In in-process segments through the ring: two for 100,003 bytes (the SEND's too), and
    // B's acknowledgements back.
    let (ca, cb) = (
        a.process_counters().unwrap().unwrap(),
        b.process_counters().unwrap().unwrap(),
    );
    assert!((2..=8).contains(&ca.ring_sent), "{ca:?}");
    assert_eq!(cb.ring_received, ca.ring_sent, "{cb:?}");
    assert!(ca.ring_received >= 2, "acknowledgements: {ca:?}");
    assert_eq!((ca.ring_lost, cb.ring_lost), (0, 0));
    // The segments' payloads went by reference: B read them from A's buffer.
    assert!(ca.by_reference >= 2, "{ca:?}");
    assert_eq!(cb.read_by_reference, ca.by_reference, "{cb:?}");

    // READ from B.
    let data = pattern(3, 65_537);
    buf_b.write(131_072, &data);
    qp_a.read(&mr_a, 7, data.len(), mr_b.addr() + 131_072, mr_b.rkey(), 4)
        .unwrap();
    done(&cq_a, 4, WcOpcode::RdmaRead);
    let mut got = vec![0u8; data.len()];
    buf_a.read(7, &mut got);
    assert!(got == data, "READ");

    // Atomics on an aligned word of B.
    let at = 200_000u64;
    buf_b.write(at as usize, &40u64.to_ne_bytes());
    let atomic = |opcode, wr_id| SendWr {
        wr_id,
        opcode,
        sg_list: vec![mr_a.sge(8, 8)],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
    };
    let remote = RemoteAddr {
        addr: mr_b.addr() + at,
        rkey: softib::RKey(mr_b.rkey()),
    };
    qp_a.post_send(vec![atomic(
        WrOpcode::AtomicFetchAndAdd { remote, add: 2 },
        5,
    )])
    .unwrap();
    done(&cq_a, 5, WcOpcode::FetchAdd);
    qp_a.post_send(vec![atomic(
        WrOpcode::AtomicCmpAndSwp {
            remote,
            compare: 42,
            swap: 7,
        },
        6,
    )])
    .unwrap();
    done(&cq_a, 6, WcOpcode::CompSwap);
    let mut word = [0u8; 8];
    buf_a.read(8, &mut word);
    assert_eq!(u64::from_ne_bytes(word), 42, "the value compared");
    buf_b.read(at as usize, &mut word);
    assert_eq!(u64::from_ne_bytes(word), 7, "swapped after the add");

    // A READ with a key that is not B's region's is refused by B's responder.
    qp_a.read(&mr_a, 0, 16, mr_b.addr(), mr_b.rkey() ^ 0x100, 7)
        .unwrap();
    let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(wc.status, WcStatus::RemAccessErr, "{wc:?}");
}

#[test]
fn ud_sends_arrive_whole() {
    process_path();
    with_pair(QpType::Ud, |p| {
        let Pair {
            a,
            b,
            buf_a,
            buf_b,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
            qp_a,
            qp_b,
        } = *p;
        let eb = qp_b.endpoint().unwrap();
        for i in 0..8u64 {
            let data = pattern(i as u8, 100 + 100 * i as usize);
            buf_a.write(0, &data);
            // The receive buffer begins with the 40-byte GRH area.
            qp_b.recv(mr_b, 0, 4096, 100 + i).unwrap();
            qp_a.send(mr_a, 0, data.len(), Some(&eb), i).unwrap();
            done(cq_a, i, WcOpcode::Send);
            assert_eq!(
                done(cq_b, 100 + i, WcOpcode::Recv) as usize,
                40 + data.len()
            );
            let mut got = vec![0u8; data.len()];
            buf_b.read(40, &mut got);
            assert!(got == data, "UD SEND {i}");
        }
        // Through the ring between the two engines: the daemon was asked once, at the first
        // send to B's QP.
        let (ca, cb) = (
            a.process_counters().unwrap().unwrap(),
            b.process_counters().unwrap().unwrap(),
        );
        assert_eq!(
            (ca.peers, ca.ring_sent, cb.ring_received),
            (1, 8, 8),
            "{ca:?} {cb:?}"
        );
    });
}

/// UC between two engines of one host goes through their rings too (at the path MTU: UC has
/// no in-process segments), SENDs and WRITEs with every byte right.
#[test]
fn uc_sends_and_writes_go_through_the_rings() {
    process_path();
    with_pair(QpType::Uc, |p| {
        let (buf_a, buf_b, mr_a, mr_b) = (p.buf_a, p.buf_b, p.mr_a, p.mr_b);
        let (qp_a, qp_b, cq_a, cq_b) = (p.qp_a, p.qp_b, p.cq_a, p.cq_b);
        // SEND: five packets at MTU 1024.
        let data = pattern(9, 4_500);
        buf_a.write(0, &data);
        qp_b.recv(mr_b, 0, 8192, 1).unwrap();
        qp_a.send(mr_a, 0, data.len(), None, 2).unwrap();
        done(cq_a, 2, WcOpcode::Send);
        assert_eq!(done(cq_b, 1, WcOpcode::Recv) as usize, data.len());
        let mut got = vec![0u8; data.len()];
        buf_b.read(0, &mut got);
        assert!(got == data, "UC SEND");
        // WRITE: three packets into B, which no thread of B polls for.
        let data = pattern(10, 3_000);
        buf_a.write(5_000, &data);
        qp_a.write(mr_a, 5_000, data.len(), mr_b.addr() + 4_999, mr_b.rkey(), 3)
            .unwrap();
        done(cq_a, 3, WcOpcode::RdmaWrite);
        let t0 = std::time::Instant::now();
        let mut got = vec![0u8; data.len()];
        loop {
            buf_b.read(4_999, &mut got);
            if got == data || t0.elapsed() > Duration::from_secs(10) {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(got == data, "UC WRITE");
        let (ca, cb) = (
            p.a.process_counters().unwrap().unwrap(),
            p.b.process_counters().unwrap().unwrap(),
        );
        assert_eq!((ca.peers, cb.peers), (1, 1), "{ca:?} {cb:?}");
        assert_eq!(ca.ring_sent, 8, "five SEND and three WRITE packets: {ca:?}");
        assert_eq!(cb.ring_received, 8, "{cb:?}");
        assert_eq!((ca.ring_lost, cb.ring_lost), (0, 0));
    });
}

/// UD multicast on the process path: each engine joins the IPv4 group its QP attaches to
/// (on its device's interface, as the daemon does for its own), and a datagram a third QP
/// sends to the group reaches both attached QPs, in two engines; a QP that detached gets no
/// more.
#[test]
fn ud_multicast_reaches_the_qps_of_every_engine_attached() {
    process_path();
    with_pair(QpType::Ud, |p| {
        let group = softib::Gid::from_ipv4([239, 70, 0, 1]);
        let mlid = softib::Lid(0xc001);
        if let Err(e) = p.qp_a.attach_mcast(group, mlid) {
            // Only a machine whose loopback takes no multicast (CI's does).
            assert!(std::env::var_os("CI").is_none(), "{e}");
            eprintln!("skipped: {e}");
            return;
        }
        p.qp_b.attach_mcast(group, mlid).unwrap();
        let pd = p.a.alloc_pd().unwrap();
        let cq = p.a.create_cq(16).unwrap();
        let buf = p.a.alloc_buffer(4096).unwrap();
        let mr = pd.register(&buf, all()).unwrap();
        let sender = pd.create_qp(QpType::Ud, &cq, &cq, 16).unwrap();
        sender
            .connect(&p.qp_b.endpoint().unwrap(), softib::Mtu::Mtu1024)
            .unwrap();
        let to = softib::Endpoint {
            qpn: softib::Qpn::new(0xff_ffff),
            gid: group,
            ..p.qp_b.endpoint().unwrap()
        };
        let ah = sender.address_handle(&to).unwrap();
        let data = pattern(9, 200);
        buf.write(0, &data);
        p.qp_a.recv(p.mr_a, 0, 4096, 1).unwrap();
        p.qp_b.recv(p.mr_b, 0, 4096, 2).unwrap();
        sender.send_to(&mr, 0, data.len(), &ah, to.qpn, 3).unwrap();
        done(&cq, 3, WcOpcode::Send);
        for (cq, buf, wr_id) in [(p.cq_a, p.buf_a, 1), (p.cq_b, p.buf_b, 2)] {
            assert_eq!(done(cq, wr_id, WcOpcode::Recv) as usize, 40 + data.len());
            let mut got = vec![0u8; data.len()];
            buf.read(40, &mut got);
            assert!(got == data, "the datagram QP {wr_id} got differs");
        }
        // B detaches: the next datagram reaches A's QP only.
        p.qp_b.detach_mcast(group).unwrap();
        p.qp_a.recv(p.mr_a, 0, 4096, 4).unwrap();
        p.qp_b.recv(p.mr_b, 0, 4096, 5).unwrap();
        sender.send_to(&mr, 0, data.len(), &ah, to.qpn, 6).unwrap();
        done(&cq, 6, WcOpcode::Send);
        done(p.cq_a, 4, WcOpcode::Recv);
        assert!(
            p.cq_b
                .poll_wait(1, Duration::from_millis(300))
                .unwrap()
                .is_empty(),
            "a detached QP got a datagram of its group"
        );
    });
}

#[test]
fn completion_channels_are_signalled_by_the_engine_itself() {
    process_path();
    with_pair(QpType::Rc, |p| {
        let Pair {
            b,
            cq_a,
            cq_b,
            mr_a,
            mr_b,
            qp_a,
            qp_b,
            ..
        } = *p;
        let ch = b.create_comp_channel().unwrap();
        let short = Some(Duration::from_millis(200));
        let long = Some(Duration::from_secs(10));

        // Armed while empty: nothing until a completion comes, which only B's progress thread
        // can make (no thread of B is in the library while this one waits on the channel).
        cq_b.req_notify(&ch).unwrap();
        assert_eq!(ch.get_events(short).unwrap(), 0, "no completion yet");
        qp_b.recv(mr_b, 0, 4096, 1).unwrap();
        qp_a.send(mr_a, 0, 100, None, 2).unwrap();
        assert_eq!(ch.get_events(long).unwrap(), 1, "the receive's completion");
        // One-shot: the next completion signals nothing until the CQ is armed again.
        qp_b.recv(mr_b, 0, 4096, 3).unwrap();
        qp_a.send(mr_a, 0, 100, None, 4).unwrap();
        done(cq_a, 2, WcOpcode::Send);
        done(cq_a, 4, WcOpcode::Send);
        assert_eq!(ch.get_events(short).unwrap(), 0, "disarmed after one event");
        // Armed while it holds completions: signalled at once, as on the daemon path.
        cq_b.req_notify(&ch).unwrap();
        assert_eq!(ch.try_get_events().unwrap(), Some(1));
        done(cq_b, 1, WcOpcode::Recv);
        done(cq_b, 3, WcOpcode::Recv);

        // A channel with a CQ armed on it cannot be destroyed; one without can.
        cq_b.req_notify(&ch).unwrap();
        let err = b.destroy_comp_channel(ch).unwrap_err();
        assert!(err.to_string().contains("still armed"), "{err}");
        b.destroy_comp_channel(b.create_comp_channel().unwrap())
            .unwrap();
    });
}

#[test]
fn a_peer_that_goes_away_leaves_retry_exceeded() {
    process_path();
    let (hca, a, b) = loopback_pair();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let buf_a = a.alloc_buffer(4096).unwrap();
    let buf_b = b.alloc_buffer(4096).unwrap();
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let mr_b = pd_b.register(&buf_b, all()).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 4).unwrap();
    // A gives up quickly: local ACK timeout 10 (4 ms), 2 retries.
    use softib::typed::{InitAttr, RtrAttr, RtsAttr};
    let eb = qp_b.endpoint_with(Some(&mr_b)).unwrap();
    let qp_a = pd_a.create_qp_typed(QpType::Rc, &cq_a, &cq_a, 4).unwrap();
    let ea = qp_a.endpoint().unwrap();
    let qp_a = qp_a
        .init(&InitAttr::default())
        .map_err(|e| e.error)
        .unwrap()
        .ready_to_receive(&RtrAttr::connect(&eb, softib::Mtu::Mtu1024))
        .map_err(|e| e.error)
        .unwrap()
        .ready_to_send(&RtsAttr {
            timeout: 10,
            retry_cnt: 2,
            ..RtsAttr::default()
        })
        .map_err(|e| e.error)
        .unwrap()
        .into_untyped();
    qp_b.connect(&ea, softib::Mtu::Mtu1024).unwrap();
    let qpn_b = qp_b.qpn();
    // B's process goes: its objects and engine with it (the daemon quarantines its QPNs).
    drop((qp_b, mr_b, cq_b, pd_b, b));
    qp_a.write(&mr_a, 0, 64, eb.addr, eb.rkey, 9).unwrap();
    let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::RetryExcErr), "{wc:?}");
    // Its QPN is not handed out again while quarantined: a new process gets another block.
    let c = Device::open_at(hca.dir(), Some("rxe1")).unwrap();
    let pd_c = c.alloc_pd().unwrap();
    let cq_c = c.create_cq(4).unwrap();
    let qp_c = pd_c.create_qp(QpType::Rc, &cq_c, &cq_c, 4).unwrap();
    assert_ne!(
        qp_c.qpn().value() / QPN_BLOCK,
        qpn_b.value() / QPN_BLOCK,
        "a quarantined block was handed out"
    );
}

#[test]
fn when_the_daemon_goes_the_qps_flush_and_control_verbs_say_so() {
    process_path();
    let (hca, a, b) = loopback_pair();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(4096).unwrap(), b.alloc_buffer(4096).unwrap());
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let mr_b = pd_b.register(&buf_b, all()).unwrap();
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 4).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 4).unwrap();
    connect(&qp_a, &qp_b);
    qp_b.recv(&mr_b, 0, 64, 1).unwrap();
    qp_a.recv(&mr_a, 0, 64, 2).unwrap();
    drop(hca);
    let wc = cq_b.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::WrFlushErr), "{wc:?}");
    let wc = cq_a.wait(Duration::from_secs(10)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr), "{wc:?}");
    let Err(e) = a.alloc_pd() else {
        panic!("a PD without a daemon");
    };
    assert!(matches!(e, softib::Error::DaemonGone { .. }), "{e}");
}

/// The IPv4 RoCEv2 datagrams of a pcap (LINKTYPE_RAW) whose ICRC holds, and how many there
/// are in all.
fn sealed_datagrams(file: &std::path::Path) -> (usize, usize) {
    use softib_link::roce::framing::{open_from, Senders};
    let bytes = std::fs::read(file).unwrap();
    let (mut at, mut good, mut all) = (24, 0, 0);
    while at + 16 <= bytes.len() {
        let len = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()) as usize;
        let p = &bytes[at + 16..at + 16 + len];
        at += 16 + len;
        all += 1;
        let ihl = usize::from(p[0] & 0x0f) * 4;
        let ip = |o: usize| std::net::Ipv4Addr::new(p[o], p[o + 1], p[o + 2], p[o + 3]);
        let port = |o: usize| u16::from_be_bytes([p[ihl + o], p[ihl + o + 1]]);
        let src = std::net::SocketAddr::new(ip(12).into(), port(0));
        let dst = std::net::SocketAddr::new(ip(16).into(), port(2));
        let ident = u16::from_be_bytes([p[4], p[5]]);
        if open_from(src, dst, &p[ihl + 8..], ident, Senders::Softib).is_ok() {
            good += 1;
        }
    }
    (good, all)
}

/// The device's faults, capture and counters cover its process engines: a capture started
/// before the engines exist reaches them when they open their event channels, faults set
/// while they run reach them at once; A's engine applies rxe0's faults to what it puts into
/// the ring (sealed, so B's engine catches the corrupted ones by their ICRC), the daemon's
/// fault and drop counters add the engines' up (and keep them after the engines went), and
/// the capture holds every datagram of both directions, each with a valid ICRC.
#[test]
fn the_devices_faults_capture_and_counters_cover_its_process_engines() {
    process_path();
    let (hca, a, b) = loopback_pair();
    let mut ctl = Context::open_at(hca.dir()).unwrap();
    let file = hca.dir().join("rxe1.pcap");
    ctl.capture(1, Some(&file)).unwrap();
    let bad_icrc = |ctl: &mut Context| {
        ctl.devices().unwrap()[1]
            .drops
            .iter()
            .find(|(r, _)| r == "bad_icrc")
            .map_or(0, |(_, n)| *n)
    };
    let seen = {
        let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
        let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
        const LEN: usize = 4096;
        const ROUNDS: u8 = 64;
        let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
        let mr_a = pd_a.register(&buf_a, all()).unwrap();
        let mr_b = pd_b.register(&buf_b, all()).unwrap();
        let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16).unwrap();
        let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16).unwrap();
        let (_, eb) = common::connect_regions(&qp_a, &mr_a, &qp_b, &mr_b);
        let spec = softib::FaultSpec {
            loss: 0.1,
            corrupt: 0.1,
            seed: 11,
            ..Default::default()
        };
        ctl.set_faults(0, 0, spec).unwrap();
        for round in 0..ROUNDS {
            let data = pattern(round, LEN);
            buf_a.write(0, &data);
            qp_a.write(&mr_a, 0, LEN, eb.addr, eb.rkey, u64::from(round))
                .unwrap();
            let wc = cq_a.wait(Duration::from_secs(20)).unwrap();
            assert_eq!((wc.wr_id, wc.status), (u64::from(round), WcStatus::Success));
            let mut got = vec![0u8; LEN];
            buf_b.read(0, &mut got);
            assert!(got == data, "round {round}: the WRITE's bytes differ");
        }
        let stats = ctl.faults(0).unwrap()[0].2;
        assert!(stats.lost > 0 && stats.corrupted > 0, "{stats:?}");
        // B's engine publishes its counters after its turns: give it one.
        let t0 = std::time::Instant::now();
        while bad_icrc(&mut ctl) == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "no bad ICRC counted on rxe1"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let seen = bad_icrc(&mut ctl);
        ctl.set_faults(0, 0, softib::FaultSpec::default()).unwrap();
        let packets = ctl.capture(1, None).unwrap();
        let (good, all) = sealed_datagrams(&file);
        assert_eq!(all as u64, packets);
        // The WRITEs (one in-process segment each, between two engines' rings) and their
        // ACKs at the least, more with the retransmissions; the corrupted ones were captured
        // as they arrived, failing their ICRC.
        assert!(
            good >= 2 * usize::from(ROUNDS),
            "{good} of {all} captured datagrams sealed"
        );
        assert!(
            all - good <= stats.corrupted as usize,
            "{good} of {all} sealed"
        );
        seen
    };
    // The engines went with their objects; what they counted stays the device's.
    drop((a, b));
    let t0 = std::time::Instant::now();
    while ctl.devices().unwrap()[1].drops.is_empty() || bad_icrc(&mut ctl) < seen {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "rxe1 forgot its drops"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
