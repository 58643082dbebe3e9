//! A hostile client on a live daemon's control socket: raw garbage, truncated frames, huge
//! length prefixes, a wrong protocol version, requests before `Hello`, descriptors nobody
//! claims, and well-formed requests naming handles, devices and ports that do not exist or
//! values beyond their fields. Each gets an error response or its connection closed; none
//! stops the daemon, and a normal client opened before keeps working, as does one opened
//! after (ARCHITECTURE.md: "a request, however malformed, gets an error response or closes
//! that client's connection; it never stops the loop").
//!
//! `fabric_host.rs` has the smoke version of this (two garbage frames); this is the full list.
//! `write_control_seeds` (ignored) writes the frames of a normal session as seeds for the
//! `control_proto` fuzz target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use softib_engine::verbs::{
    AccessFlags, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, WrOpcode,
};
use softib_engine::{AddressVector, AttrMask, CqHandle, PdHandle, QpAttr, QpInitAttr};
use softib_hca::host::host_dir;
use softib_net::fault::FaultSpec;
use softib_proto::{self as proto, ErrorKind, Request, Response, MAX_FRAME, MAX_PENDING_FDS};
use softib_wire::{Gid, Lid, Mtu, Psn, Qpn};

const HOST: &str = "test213";

mod common;
use common::{start_topology, Running, TOPO_A};

fn socket(r: &Running) -> PathBuf {
    host_dir(&r.dir, HOST).join("softibd.sock")
}

fn start(name: &str) -> Running {
    start_topology(TOPO_A, name, 7)
}

fn connect(path: &Path) -> UnixStream {
    let s = UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// The next response, or `None` when the daemon closed the connection.
fn response(s: &mut UnixStream) -> Option<Response> {
    match proto::recv_blocking(s) {
        Ok(body) => Some(proto::decode(&body).expect("the daemon's responses decode")),
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => None,
        Err(e) => panic!("no response and no close: {e}"),
    }
}

fn ask(s: &mut UnixStream, req: &Request) -> Response {
    proto::send(s, req, &[]).unwrap();
    response(s).unwrap_or_else(|| panic!("connection closed after {req:?}"))
}

fn error_kind(r: &Response) -> Option<ErrorKind> {
    match r {
        Response::Error { kind, .. } => Some(*kind),
        _ => None,
    }
}

fn hello(s: &mut UnixStream) {
    let r = ask(
        s,
        &Request::Hello {
            version: proto::VERSION,
            pid: 1,
            program: "hostile".into(),
        },
    );
    assert!(matches!(r, Response::Hello { .. }), "{r:?}");
}

/// Reads until the daemon closes the connection, answering nothing more that is not an
/// error: returns the errors it sent first.
fn until_closed(s: &mut UnixStream) -> Vec<Response> {
    let mut seen = Vec::new();
    while let Some(r) = response(s) {
        assert!(error_kind(&r).is_some(), "{r:?}");
        seen.push(r);
        assert!(seen.len() < 100_000, "the daemon never closed");
    }
    seen
}

/// A normal client gets real work done: devices, a PD, a buffer with an MR, a CQ and a QP.
fn normal_client_works(d: &Running, c: &mut softib::Context) {
    assert!(d.alive(), "the daemon thread is running");
    let devs = c.devices().unwrap();
    assert_eq!(devs[0].ports.len(), 2);
    let pd = c.alloc_pd(0).unwrap();
    let buf = c.alloc_buffer(4096).unwrap();
    c.reg_mr(0, pd, &buf, 0, 4096, softib::AccessFlags::LOCAL_WRITE)
        .unwrap();
    let cq = c.create_cq(0, 16).unwrap();
    c.create_qp(0, rc_init(pd, cq)).unwrap();
}

fn rc_init(pd: PdHandle, cq: CqHandle) -> QpInitAttr {
    common::qp_init(QpType::Rc, pd, cq, 16, true)
}

/// A deterministic byte stream (xorshift).
/// A PD, a CQ of 64 and an RC QP of this raw client's own.
fn own_objects(s: &mut UnixStream) -> (PdHandle, CqHandle, Qpn) {
    let pd = match ask(s, &Request::AllocPd { dev: 0 }) {
        Response::Handle(h) => PdHandle(u32::try_from(h).unwrap()),
        r => panic!("{r:?}"),
    };
    let cq = match ask(s, &Request::CreateCq { dev: 0, cqe: 64 }) {
        Response::Handle(h) => CqHandle(u32::try_from(h).unwrap()),
        r => panic!("{r:?}"),
    };
    let qpn = match ask(
        s,
        &Request::CreateQp {
            dev: 0,
            init: rc_init(pd, cq),
        },
    ) {
        Response::Qp(q) => q,
        r => panic!("{r:?}"),
    };
    (pd, cq, qpn)
}

fn junk(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn leb128(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// The frame of `req` with the (unique) postcard encoding of `from` replaced by `to`: a way
/// to send values no constructor makes (a PSN or QPN beyond 24 bits).
fn patched(req: &Request, from: u64, to: u64) -> Vec<u8> {
    let frame = proto::encode(req).unwrap();
    let body = &frame[4..];
    let (f, t) = (leb128(from), leb128(to));
    let at: Vec<usize> = (0..=body.len() - f.len())
        .filter(|&i| body[i..i + f.len()] == f[..])
        .collect();
    assert_eq!(at.len(), 1, "the marker {from:#x} occurs once");
    let body = [&body[..at[0]], &t[..], &body[at[0] + f.len()..]].concat();
    let mut out = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

#[test]
fn malformed_requests_never_stop_the_daemon() {
    let d = start("hostile");
    // A normal client, open through everything that follows.
    let mut before = softib::Context::open_at(&host_dir(&d.dir, HOST)).unwrap();
    normal_client_works(&d, &mut before);

    // Raw garbage: whatever it means as frames, the daemon answers errors and closes.
    for seed in 1..=8 {
        let mut s = connect(&socket(&d));
        let _ = s.write_all(&junk(seed, 64 * 1024));
        let _ = s.shutdown(std::net::Shutdown::Write);
        until_closed(&mut s);
    }
    // Garbage inside well-framed messages: one "malformed" error per frame, the connection
    // stays usable and Hello still works after.
    let mut s = connect(&socket(&d));
    for seed in 1..=32u64 {
        let body = junk(seed, (seed as usize * 7) % 300);
        let mut frame = u32::try_from(body.len()).unwrap().to_le_bytes().to_vec();
        frame.extend_from_slice(&body);
        s.write_all(&frame).unwrap();
        let r = response(&mut s).expect("an answer, not a close");
        assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    }
    hello(&mut s);

    // A truncated frame, then the client goes away.
    let mut s = connect(&socket(&d));
    s.write_all(&[100, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
        .unwrap();
    drop(s);
    // A truncated frame that stays open while others are served.
    let mut stalled = connect(&socket(&d));
    stalled.write_all(&[200, 0, 0, 0, 1, 2, 3]).unwrap();
    // A length prefix without a single body byte.
    let mut stalled2 = connect(&socket(&d));
    stalled2.write_all(&[8, 0]).unwrap();
    normal_client_works(&d, &mut before);

    // Huge length prefixes: refused as soon as the prefix is complete, then closed.
    for len in [u32::MAX, 0x8000_0000, u32::try_from(MAX_FRAME + 1).unwrap()] {
        let mut s = connect(&socket(&d));
        s.write_all(&len.to_le_bytes()).unwrap();
        let errors = until_closed(&mut s);
        assert_eq!(errors.len(), 1, "{len:#x}");
        assert_eq!(error_kind(&errors[0]), Some(ErrorKind::Protocol));
    }
    // The largest frame allowed, full of junk: buffered, found malformed, answered.
    let mut s = connect(&socket(&d));
    let mut big = u32::try_from(MAX_FRAME).unwrap().to_le_bytes().to_vec();
    big.extend_from_slice(&junk(99, MAX_FRAME));
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&big).is_ok())
    };
    let r = response(&mut s).expect("an answer to the largest frame");
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    assert!(writer.join().unwrap());
    hello(&mut s);

    // A wrong protocol version is refused naming both; the right one then works.
    let mut s = connect(&socket(&d));
    let r = ask(
        &mut s,
        &Request::Hello {
            version: proto::VERSION + 1,
            pid: 1,
            program: "future".into(),
        },
    );
    let Response::Error { kind, message } = r else {
        panic!("a wrong version was accepted: {r:?}");
    };
    assert_eq!(kind, ErrorKind::Protocol);
    assert!(
        message.contains(&proto::VERSION.to_string())
            && message.contains(&(proto::VERSION + 1).to_string()),
        "{message}"
    );
    // Requests before Hello are refused, not served.
    let r = ask(&mut s, &Request::AllocPd { dev: 0 });
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    let r = ask(&mut s, &Request::Resources);
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    hello(&mut s);
    let r = ask(
        &mut s,
        &Request::Hello {
            version: proto::VERSION,
            pid: 1,
            program: "twice".into(),
        },
    );
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");

    // Descriptors nobody claims: the connection is closed before they pile up.
    let mut s = connect(&socket(&d));
    hello(&mut s);
    let region = softib_net::shm::SharedRegion::create("hostile", 4096).unwrap();
    let fds = [region.fd(), region.fd(), region.fd(), region.fd()];
    let mut closed = false;
    for _ in 0..=MAX_PENDING_FDS {
        // One junk byte per message (a descriptor needs a byte to travel with).
        if softib_net::fdpass::send(&s, &[0], &fds).is_err() {
            closed = true;
            break;
        }
    }
    if !closed {
        // The zero bytes make empty frames, each answered as malformed; then the close.
        until_closed(&mut s);
    }
    // AttachBuffer without its memfd, and with a length past the memfd's.
    let mut s = connect(&socket(&d));
    hello(&mut s);
    let r = ask(&mut s, &Request::AttachBuffer { len: 4096, addr: 0 });
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    proto::send(
        &s,
        &Request::AttachBuffer {
            len: u64::MAX,
            addr: 0,
        },
        &[region.fd().as_fd()],
    )
    .unwrap();
    let r = response(&mut s).unwrap();
    assert!(error_kind(&r).is_some(), "{r:?}");

    out_of_range_handles(&d);
    normal_client_works(&d, &mut before);
    drop((stalled, stalled2));
    let mut after = softib::Context::open_at(&host_dir(&d.dir, HOST)).unwrap();
    normal_client_works(&d, &mut after);
}

/// Descriptors a client passes for the daemon to signal (a completion channel, the wakeup of
/// a sleeping poll) may be anything: here the write ends of full, blocking pipes. The daemon
/// signals them when a completion comes and must not wait for room in them.
#[test]
fn full_pipes_for_eventfds_do_not_block_the_daemon() {
    let d = start("hostile-pipes");
    let mut s = connect(&socket(&d));
    hello(&mut s);
    let full_pipe = || {
        let (r, w) = rustix::pipe::pipe().unwrap();
        let mut n = 0;
        rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::NONBLOCK).unwrap();
        while rustix::io::write(&w, &[0u8; 4096]).is_ok() {
            n += 1;
            assert!(n < 100_000, "the pipe never filled");
        }
        // Blocking again, as a hostile client would leave it.
        rustix::fs::fcntl_setfl(&w, rustix::fs::OFlags::empty()).unwrap();
        (r, w)
    };
    let (_r1, channel_pipe) = full_pipe();
    let (_r2, wakeup_pipe) = full_pipe();
    proto::send(&s, &Request::CreateCompChannel, &[channel_pipe.as_fd()]).unwrap();
    let channel = match response(&mut s).unwrap() {
        Response::Handle(h) => h,
        r => panic!("{r:?}"),
    };
    proto::send(&s, &Request::AttachWakeup, &[wakeup_pipe.as_fd()]).unwrap();
    assert!(matches!(response(&mut s).unwrap(), Response::Ok));
    let (_, cq, qpn) = own_objects(&mut s);
    // A completion ring whose consumer flag says "asleep": the daemon signals the wakeup.
    let ring = softib_net::ring::Ring::create("hostile", 64, proto::CQ_RING_SLOT_LEN).unwrap();
    proto::send(
        &s,
        &Request::AttachCqRing {
            dev: 0,
            cq: cq.0,
            slots: 64,
        },
        &[ring.fd()],
    )
    .unwrap();
    assert!(matches!(response(&mut s).unwrap(), Response::Ok));
    let r = ask(
        &mut s,
        &Request::ReqNotifyCq {
            dev: 0,
            cq: cq.0,
            channel,
        },
    );
    assert!(matches!(r, Response::Ok), "{r:?}");
    // INIT, a receive, then ERROR: the receive completes (flushed), which signals both.
    let to = |state| QpAttr {
        qp_state: state,
        port_num: 1,
        ..QpAttr::default()
    };
    let r = ask(
        &mut s,
        &Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(to(QpState::Init)),
            mask: AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        },
    );
    assert!(matches!(r, Response::Ok), "{r:?}");
    let r = ask(
        &mut s,
        &Request::PostRecv {
            dev: 0,
            qpn,
            wrs: vec![RecvWr {
                wr_id: 7,
                sg_list: Vec::new(),
            }],
        },
    );
    assert!(!matches!(r, Response::Error { .. }), "{r:?}");
    let r = ask(
        &mut s,
        &Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(to(QpState::Err)),
            mask: AttrMask::STATE,
        },
    );
    assert!(matches!(r, Response::Ok), "{r:?}");
    // The completion reaches the ring, and the daemon still answers everyone.
    let mut out = Vec::new();
    let t0 = std::time::Instant::now();
    while !ring.pop(&mut out).unwrap() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the flushed receive never reached the completion ring"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = ask(&mut s, &Request::Resources);
    assert!(!matches!(r, Response::Error { .. }), "{r:?}");
    let mut other = softib::Context::open_at(&host_dir(&d.dir, HOST)).unwrap();
    normal_client_works(&d, &mut other);
}

/// Well-formed requests after Hello whose handles, devices, ports or values are not valid.
fn out_of_range_handles(d: &Running) {
    let mut s = connect(&socket(d));
    hello(&mut s);
    let mad = vec![0u8; 256];
    let nothing = Qpn::new(0xFF_FFFE);
    let bad: Vec<Request> = vec![
        Request::AllocPd { dev: u32::MAX },
        Request::DeallocPd {
            dev: 0,
            pd: u32::MAX,
        },
        Request::DetachBuffer { buffer: u64::MAX },
        Request::RegMr {
            dev: 0,
            pd: 12345,
            buffer: 1,
            addr: 0,
            len: 4096,
            access: AccessFlags::LOCAL_WRITE,
        },
        Request::DeregMr {
            dev: 0,
            lkey: 0xDEAD_BEEF,
        },
        Request::CreateCq {
            dev: 0,
            cqe: u32::MAX,
        },
        Request::CreateCq { dev: 0, cqe: 0 },
        Request::DestroyCq { dev: 0, cq: 77 },
        Request::CreateQp {
            dev: 0,
            init: rc_init(PdHandle(4242), CqHandle(4242)),
        },
        Request::ModifyQp {
            dev: 0,
            qpn: nothing,
            attr: Box::default(),
            mask: AttrMask::STATE,
        },
        Request::QueryQp {
            dev: 0,
            qpn: nothing,
        },
        Request::DestroyQp {
            dev: 0,
            qpn: Qpn::new(0),
        },
        Request::CreateAh {
            dev: 0,
            pd: 999,
            av: AddressVector::default(),
        },
        Request::DestroyAh { dev: 0, ah: 999 },
        Request::PostSend {
            dev: 0,
            qpn: nothing,
            wrs: vec![],
        },
        Request::PostRecv {
            dev: 0,
            qpn: Qpn::new(1),
            wrs: vec![],
        },
        Request::PollCq {
            dev: 0,
            cq: 99,
            max: u32::MAX,
            wait_us: u32::MAX,
        },
        Request::OpenMad {
            dev: 0,
            port: 0,
            sm: false,
        },
        Request::OpenMad {
            dev: 0,
            port: 255,
            sm: true,
        },
        Request::OpenMad {
            dev: 9,
            port: 1,
            sm: false,
        },
        Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: None,
            mad: vec![1, 2, 3],
        },
        Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: Some(Lid(1)),
            mad: mad.clone(),
        },
        Request::SendGmp {
            dev: 0,
            port: 1,
            dlid: Lid(1),
            dest_qpn: Qpn::new(1),
            mad: vec![0; 300],
        },
        Request::SendGmp {
            dev: 0,
            port: 2,
            dlid: Lid(1),
            dest_qpn: Qpn::new(1),
            mad,
        },
        Request::SetPortEnabled {
            dev: 0,
            port: 200,
            enabled: false,
        },
        Request::SetPortEnabled {
            dev: 5,
            port: 1,
            enabled: false,
        },
        Request::SetFaults {
            dev: 0,
            port: 200,
            spec: FaultSpec::default(),
        },
        Request::Faults { dev: 77 },
        Request::Capture {
            dev: 0,
            path: Some("relative.pcap".into()),
        },
        Request::Capture {
            dev: 0,
            path: Some("/nonexistent-softib-dir/x.pcap".into()),
        },
        Request::CaptureCount { dev: 3 },
        Request::LinkDel {
            name: "nonesuch".into(),
        },
        Request::LinkDel {
            name: "mlx4_0".into(),
        },
        Request::SetSm {
            dev: 0,
            port: 1,
            sm_info: Some(vec![0; 64]),
        },
        Request::AttachMcast {
            dev: 0,
            qpn: nothing,
            gid: Gid::default(),
            lid: Lid(0xC000),
        },
        Request::DetachMcast {
            dev: 0,
            qpn: nothing,
            gid: Gid::default(),
        },
        Request::DestroyCompChannel { channel: 5 },
        Request::ReqNotifyCq {
            dev: 0,
            cq: 5,
            channel: 5,
        },
        Request::CreateCompChannel,
    ];
    for req in &bad {
        let r = ask(&mut s, req);
        assert!(error_kind(&r).is_some(), "{req:?} was accepted: {r:?}");
    }
    // A SetFaults no parser would make (a delay of u64::MAX seconds) does not even decode.
    let huge = Request::SetFaults {
        dev: 0,
        port: 1,
        spec: FaultSpec {
            delay: Duration::from_secs(0x0012_3456_789A),
            ..FaultSpec::default()
        },
    };
    s.write_all(&patched(&huge, 0x0012_3456_789A, u64::MAX))
        .unwrap();
    let r = response(&mut s).unwrap();
    assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");

    // The client's own objects with values beyond their fields.
    let (_, cq, qpn) = own_objects(&mut s);
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: AccessFlags(u32::MAX),
        ..QpAttr::default()
    };
    let r = ask(
        &mut s,
        &Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(init),
            mask: AttrMask(u32::MAX),
        },
    );
    assert!(error_kind(&r).is_some(), "{r:?}");
    let init = QpAttr {
        qp_access_flags: AccessFlags::REMOTE_WRITE,
        ..init
    };
    let r = ask(
        &mut s,
        &Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(init),
            mask: AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        },
    );
    assert!(matches!(r, Response::Ok), "{r:?}");
    // A QPN and PSNs beyond their 24 bits do not decode (no constructor makes them; a
    // patched frame does).
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: Qpn::new(0xAB_CDEF),
        rq_psn: Psn::new(0x12_3456),
        max_dest_rd_atomic: 255,
        min_rnr_timer: 255,
        ah_attr: AddressVector {
            dlid: Lid(0xFFFF),
            sl: 255,
            port_num: 1,
            ..AddressVector::default()
        },
        ..QpAttr::default()
    };
    let req = Request::ModifyQp {
        dev: 0,
        qpn,
        attr: Box::new(rtr),
        mask: AttrMask::STATE
            .with(AttrMask::AV)
            .with(AttrMask::PATH_MTU)
            .with(AttrMask::DEST_QPN)
            .with(AttrMask::RQ_PSN)
            .with(AttrMask::MAX_DEST_RD_ATOMIC)
            .with(AttrMask::MIN_RNR_TIMER),
    };
    for marker in [0xAB_CDEF, 0x12_3456] {
        s.write_all(&patched(&req, marker, u64::from(u32::MAX)))
            .unwrap();
        let r = response(&mut s).expect("an answer to a value beyond 24 bits");
        assert_eq!(error_kind(&r), Some(ErrorKind::Protocol), "{r:?}");
    }
    // The same request as sent, with out-of-range SL, rates and counts, is answered.
    let r = ask(&mut s, &req);
    assert!(matches!(r, Response::Ok | Response::Error { .. }), "{r:?}");
    // Work requests with keys, addresses and lengths that name nothing.
    let wr = |opcode| SendWr {
        wr_id: u64::MAX,
        opcode,
        sg_list: vec![Sge {
            addr: u64::MAX - 7,
            length: u32::MAX,
            lkey: 0xFFFF_FFFF,
        }],
        flags: SendFlags(u32::MAX),
        inline_data: Some(vec![0; 64 * 1024]),
        ud: None,
    };
    let remote = softib_engine::verbs::RemoteAddr {
        addr: u64::MAX,
        rkey: softib_wire::RKey(u32::MAX),
    };
    let r = ask(
        &mut s,
        &Request::PostSend {
            dev: 0,
            qpn,
            wrs: vec![
                wr(WrOpcode::RdmaWrite(remote)),
                wr(WrOpcode::Send),
                wr(WrOpcode::AtomicFetchAndAdd { remote, add: 1 }),
            ],
        },
    );
    assert!(matches!(r, Response::Posted { .. }), "{r:?}");
    let huge = Sge {
        addr: u64::MAX,
        length: u32::MAX,
        lkey: 1,
    };
    let r = ask(
        &mut s,
        &Request::PostRecv {
            dev: 0,
            qpn,
            wrs: vec![
                RecvWr {
                    wr_id: 1,
                    sg_list: vec![huge; 1000],
                },
                RecvWr {
                    wr_id: 2,
                    sg_list: vec![huge, huge],
                },
            ],
        },
    );
    assert!(matches!(r, Response::Posted { .. }), "{r:?}");
    let r = ask(
        &mut s,
        &Request::PollCq {
            dev: 0,
            cq: cq.0,
            max: u32::MAX,
            wait_us: 0,
        },
    );
    assert!(matches!(r, Response::Completions(_)), "{r:?}");
    // A client that goes away mid-session is reclaimed.
    drop(s);
}

/// Writes the frames of a normal session (as the `softib` library sends them) to
/// `$SOFTIB_SEED_DIR`, one file each and one with them all: seeds for the `control_proto`
/// fuzz target.
#[test]
#[ignore = "writes fuzz seeds; run by hand (see fuzz/README.md)"]
fn write_control_seeds() {
    let dir = PathBuf::from(std::env::var_os("SOFTIB_SEED_DIR").expect("SOFTIB_SEED_DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let pd = PdHandle(1);
    let cq = CqHandle(1);
    let qpn = Qpn::new(0x11);
    let sge = Sge {
        addr: 0x7f00_0000_1000,
        length: 4096,
        lkey: 0x1234,
    };
    let remote = softib_engine::verbs::RemoteAddr {
        addr: 0x7f00_0000_2000,
        rkey: softib_wire::RKey(0x5678),
    };
    let signaled = |opcode| SendWr {
        wr_id: 7,
        opcode,
        sg_list: vec![sge],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
    };
    let session = vec![
        Request::Hello {
            version: proto::VERSION,
            pid: 4242,
            program: "ib_write_bw".into(),
        },
        Request::ListDevices,
        Request::AllocPd { dev: 0 },
        Request::AttachBuffer {
            len: 1 << 20,
            addr: 0x7f00_0000_0000,
        },
        Request::RegMr {
            dev: 0,
            pd: 1,
            buffer: 1,
            addr: 0x7f00_0000_0000,
            len: 1 << 20,
            access: AccessFlags::LOCAL_WRITE
                .with(AccessFlags::REMOTE_WRITE)
                .with(AccessFlags::REMOTE_READ),
        },
        Request::CreateCq { dev: 0, cqe: 128 },
        Request::CreateQp {
            dev: 0,
            init: rc_init(pd, cq),
        },
        Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qp_access_flags: AccessFlags::REMOTE_WRITE,
                ..QpAttr::default()
            }),
            mask: AttrMask::STATE
                .with(AttrMask::PKEY_INDEX)
                .with(AttrMask::PORT)
                .with(AttrMask::ACCESS_FLAGS),
        },
        Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(QpAttr {
                qp_state: QpState::Rtr,
                path_mtu: Mtu::Mtu1024,
                dest_qp_num: Qpn::new(0x12),
                rq_psn: Psn::new(100),
                max_dest_rd_atomic: 4,
                min_rnr_timer: 12,
                ah_attr: AddressVector {
                    dlid: Lid(2),
                    port_num: 1,
                    ..AddressVector::default()
                },
                ..QpAttr::default()
            }),
            mask: AttrMask::STATE
                .with(AttrMask::AV)
                .with(AttrMask::PATH_MTU)
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
        },
        Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(QpAttr {
                qp_state: QpState::Rts,
                sq_psn: Psn::new(100),
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 4,
                ..QpAttr::default()
            }),
            mask: AttrMask::STATE
                .with(AttrMask::SQ_PSN)
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
        },
        Request::QueryQp { dev: 0, qpn },
        Request::PostRecv {
            dev: 0,
            qpn,
            wrs: vec![RecvWr {
                wr_id: 1,
                sg_list: vec![sge],
            }],
        },
        Request::PostSend {
            dev: 0,
            qpn,
            wrs: vec![
                signaled(WrOpcode::RdmaWrite(remote)),
                signaled(WrOpcode::Send),
                signaled(WrOpcode::RdmaRead(remote)),
                signaled(WrOpcode::AtomicCmpAndSwp {
                    remote,
                    compare: 1,
                    swap: 2,
                }),
            ],
        },
        Request::PollCq {
            dev: 0,
            cq: 1,
            max: 16,
            wait_us: 1000,
        },
        Request::CreateAh {
            dev: 0,
            pd: 1,
            av: AddressVector {
                dlid: Lid(3),
                port_num: 1,
                ..AddressVector::default()
            },
        },
        Request::OpenMad {
            dev: 0,
            port: 1,
            sm: true,
        },
        Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: None,
            mad: vec![0; 256],
        },
        Request::RecvMads {
            max: 64,
            wait_us: 50_000,
        },
        Request::SetFaults {
            dev: 0,
            port: 1,
            spec: FaultSpec::parse(&["loss", "10%", "dup", "5%", "delay", "2ms"]).unwrap(),
        },
        Request::Faults { dev: 0 },
        Request::Resources,
        Request::DestroyQp { dev: 0, qpn },
        Request::DestroyCq { dev: 0, cq: 1 },
        Request::DeregMr {
            dev: 0,
            lkey: 0x1234,
        },
        Request::DetachBuffer { buffer: 1 },
        Request::DeallocPd { dev: 0, pd: 1 },
    ];
    let mut all = Vec::new();
    for (i, req) in session.iter().enumerate() {
        let frame = proto::encode(req).unwrap();
        // The target decodes the input as one message and also as a sequence of messages.
        std::fs::write(dir.join(format!("session-{i:02}")), &frame[4..]).unwrap();
        all.extend_from_slice(&frame[4..]);
    }
    std::fs::write(dir.join("session-all"), &all).unwrap();
    for (i, resp) in [
        Response::Ok,
        Response::Mr {
            lkey: 0x1234,
            rkey: 0x1234,
        },
        Response::Completions(vec![]),
        Response::Posted {
            posted: 1,
            error: Some("queue full".into()),
        },
    ]
    .iter()
    .enumerate()
    {
        std::fs::write(
            dir.join(format!("response-{i:02}")),
            &proto::encode(resp).unwrap()[4..],
        )
        .unwrap();
    }
}
