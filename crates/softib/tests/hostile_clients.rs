//! Hostile and crashing clients on a live daemon (issue 8, item 3): one that never polls its
//! CQ until it overflows, one that floods the daemon with doorbells and requests, one killed
//! with SIGKILL in the middle of RDMA traffic. Each time another client's transfer on the same
//! daemon runs to the end with every byte right, and the bad client's peer gets the
//! completions hardware would give. Speeds are printed, never asserted (the machine is shared).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, Context, Device, Endpoint, Mtu, QpType, WcStatus, WorkCompletion};
use softib_engine::verbs::AsyncEvent;
use softib_proto::{self as proto, Request, Response};

mod common;
use common::{all, connect, connect_regions, open_pair};

/// An embedded HCA with `rxe0` (127.0.0.2) and `rxe1` (127.0.0.3) on a port of their own.
fn two_devices() -> EmbeddedDaemon {
    let hca = EmbeddedDaemon::start().unwrap();
    hca.add_loopback_pair().unwrap();
    hca
}

/// A well-behaved client pair (two sessions of their own) writes `len` bytes from rxe0 to
/// rxe1 in 64 KiB RDMA WRITEs, eight in flight, and checks every byte; returns how long it
/// took.
fn good_transfer(dir: &Path, len: usize) -> Duration {
    let (a, b) = open_pair(dir);
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(len).unwrap(), b.alloc_buffer(len).unwrap());
    let (mr_a, mr_b) = (
        pd_a.register(&buf_a, all()).unwrap(),
        pd_b.register(&buf_b, all()).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 32).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 32).unwrap();
    let (_, eb) = connect_regions(&qp_a, &mr_a, &qp_b, &mr_b);
    let data: Vec<u8> = (0..len as u32).map(|i| (i * 131 % 251) as u8).collect();
    buf_a.write(0, &data);
    const CHUNK: usize = 64 << 10;
    let n = len / CHUNK;
    let t0 = Instant::now();
    let (mut posted, mut done) = (0, 0);
    while done < n {
        while posted < n && posted - done < 8 {
            let off = posted * CHUNK;
            qp_a.write(
                &mr_a,
                off,
                CHUNK,
                eb.addr + off as u64,
                eb.rkey,
                posted as u64,
            )
            .unwrap();
            posted += 1;
        }
        let wc = cq_a.wait(Duration::from_secs(30)).unwrap();
        assert_eq!((wc.status, wc.wr_id), (WcStatus::Success, done as u64));
        done += 1;
    }
    let took = t0.elapsed();
    let mut got = vec![0u8; len];
    buf_b.read(0, &mut got);
    assert!(got == data, "the good client's bytes differ");
    took
}

fn mib_per_s(len: usize, t: Duration) -> f64 {
    len as f64 / (1 << 20) as f64 / t.as_secs_f64()
}

/// Waits on `cq` until `n` completions arrived (or panics after `limit`).
fn collect(cq: &softib::CompletionQueue, n: usize, limit: Duration) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let t0 = Instant::now();
    while got.len() < n {
        assert!(t0.elapsed() < limit, "{} of {n} completions", got.len());
        got.extend(cq.poll_wait(64, Duration::from_millis(100)).unwrap());
    }
    got
}

/// What a peer sees when the QP it talks to stops answering: what was acknowledged succeeds,
/// then the first WR still outstanding fails with retries exceeded and the rest are flushed,
/// in order, each once.
fn assert_retry_exceeded_then_flushed(wcs: &[WorkCompletion]) {
    let ok = wcs
        .iter()
        .take_while(|w| w.status == WcStatus::Success)
        .count();
    assert!(ok < wcs.len(), "all {} WRs succeeded", wcs.len());
    assert_eq!(wcs[ok].status, WcStatus::RetryExcErr, "{:?}", &wcs[ok..]);
    assert!(
        wcs[ok + 1..]
            .iter()
            .all(|w| w.status == WcStatus::WrFlushErr),
        "{:?}",
        &wcs[ok..]
    );
    let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(
        ids,
        (0..wcs.len() as u64).collect::<Vec<_>>(),
        "in order, each once"
    );
}

#[test]
fn a_client_that_never_polls_overflows_its_own_cq_and_nobody_elses() {
    let hca = two_devices();
    const LEN: usize = 8 << 20;
    let alone = good_transfer(hca.dir(), LEN);

    // The hostile client on rxe1: a CQ of 8, 256 receives posted, never polled. Its peer, a
    // client of its own on rxe0, sends it 256 messages.
    let (p, h) = open_pair(hca.dir());
    let (pd_p, pd_h) = (p.alloc_pd().unwrap(), h.alloc_pd().unwrap());
    let (cq_p, cq_h) = (p.create_cq(512).unwrap(), h.create_cq(8).unwrap());
    let (buf_p, buf_h) = (
        p.alloc_buffer(4096).unwrap(),
        h.alloc_buffer(64 * 256).unwrap(),
    );
    let (mr_p, mr_h) = (
        pd_p.register(&buf_p, all()).unwrap(),
        pd_h.register(&buf_h, all()).unwrap(),
    );
    let qp_p = pd_p.create_qp(QpType::Rc, &cq_p, &cq_p, 256).unwrap();
    let qp_h = pd_h.create_qp(QpType::Rc, &cq_h, &cq_h, 256).unwrap();
    qp_p.connect(&qp_h.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    qp_h.connect(&qp_p.endpoint().unwrap(), Mtu::Mtu1024)
        .unwrap();
    for i in 0..256 {
        qp_h.recv(&mr_h, 64 * i, 64, i as u64).unwrap();
    }

    // The good pair transfers while the hostile client's CQ overflows.
    let dir = hca.dir().to_path_buf();
    let good = std::thread::spawn(move || good_transfer(&dir, LEN));
    for i in 0..256 {
        qp_p.send(&mr_p, 0, 64, None, i).unwrap();
    }
    let wcs = collect(&cq_p, 256, Duration::from_secs(20));
    let during = good.join().unwrap();

    // The peer: what the hostile QP acknowledged before its CQ overflowed succeeded (at most
    // what its CQ and completion ring hold), then retries ran out against a QP in error.
    assert_retry_exceeded_then_flushed(&wcs);
    let ok = wcs.iter().filter(|w| w.status == WcStatus::Success).count();
    assert!(ok <= 16, "{ok} succeeded");
    // The hostile client: CQ_ERR on its CQ, QP_FATAL on its QP, as from hardware.
    let t0 = Instant::now();
    let mut events = Vec::new();
    while events.len() < 2 && t0.elapsed() < Duration::from_secs(5) {
        events.extend(h.async_events().unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        matches!(events[..], [AsyncEvent::CqErr(_), AsyncEvent::QpFatal(q)] if q == qp_h.qpn()),
        "{events:?}"
    );
    // What fitted is still there to poll; nothing more arrives.
    let held = cq_h.poll(64).unwrap();
    assert!(
        held.len() <= 16 && held.iter().all(|w| w.status == WcStatus::Success),
        "{held:?}"
    );
    assert!(
        p.async_events().unwrap().is_empty(),
        "the peer's QP is fine"
    );
    println!(
        "good transfer of {} MiB: alone {:.1} MiB/s, beside a CQ overflowing {:.1} MiB/s; \
         the overflowing client's peer: {ok} sends succeeded, then retries exceeded",
        LEN >> 20,
        mib_per_s(LEN, alone),
        mib_per_s(LEN, during)
    );
}

/// A client that rings its submission ring's doorbell (an eventfd the daemon polls) as fast
/// as it can, with nothing in the ring; returns how many times it rang.
fn ring_doorbells(dir: &Path, stop: Arc<AtomicBool>) -> u64 {
    let s = UnixStream::connect(dir.join(proto::SOCKET_NAME)).unwrap();
    let mut s2 = s.try_clone().unwrap();
    proto::send(
        &s,
        &Request::Hello {
            version: proto::VERSION,
            pid: std::process::id(),
            program: "doorbells".into(),
        },
        &[],
    )
    .unwrap();
    proto::recv_blocking(&mut s2).unwrap();
    let ring = softib_net::ring::Ring::create("flood", 1, proto::SUBMIT_SLOT_LEN).unwrap();
    let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    {
        use std::os::fd::AsFd;
        proto::send(
            &s,
            &Request::AttachSubmitRing { slots: 1 },
            &[ring.fd(), bell.as_fd()],
        )
        .unwrap();
    }
    let r: Response = proto::decode(&proto::recv_blocking(&mut s2).unwrap()).unwrap();
    assert!(matches!(r, Response::Ok), "{r:?}");
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        rustix::io::write(&bell, &1u64.to_ne_bytes()).unwrap();
        n += 1;
    }
    n
}

/// A client that sends no-op requests (ListDevices) back to back without waiting for the
/// answers, reading them on another thread; returns how many were answered.
fn flood_requests(dir: &Path, stop: Arc<AtomicBool>) -> u64 {
    let mut s = UnixStream::connect(dir.join(proto::SOCKET_NAME)).unwrap();
    let hello = Request::Hello {
        version: proto::VERSION,
        pid: std::process::id(),
        program: "requests".into(),
    };
    proto::send(&s, &hello, &[]).unwrap();
    proto::recv_blocking(&mut s).unwrap();
    let answered = Arc::new(AtomicU64::new(0));
    let reader = {
        let mut s = s.try_clone().unwrap();
        let answered = answered.clone();
        std::thread::spawn(move || {
            while proto::recv_blocking(&mut s).is_ok() {
                answered.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let frame = proto::encode(&Request::ListDevices).unwrap();
    let batch: Vec<u8> = frame
        .iter()
        .copied()
        .cycle()
        .take(frame.len() * 64)
        .collect();
    while !stop.load(Ordering::Relaxed) {
        if s.write_all(&batch).is_err() {
            break;
        }
    }
    // Hang up without waiting for the answers still due.
    let _ = s.shutdown(std::net::Shutdown::Both);
    let _ = reader.join();
    answered.load(Ordering::Relaxed)
}

#[test]
fn a_flood_of_doorbells_and_requests_does_not_starve_another_clients_transfer() {
    let hca = two_devices();
    const LEN: usize = 8 << 20;
    let alone = good_transfer(hca.dir(), LEN);
    let stop = Arc::new(AtomicBool::new(false));
    let bells = {
        let (dir, stop) = (hca.dir().to_path_buf(), stop.clone());
        std::thread::spawn(move || ring_doorbells(&dir, stop))
    };
    let requests = {
        let (dir, stop) = (hca.dir().to_path_buf(), stop.clone());
        std::thread::spawn(move || flood_requests(&dir, stop))
    };
    std::thread::sleep(Duration::from_millis(100));
    let during = good_transfer(hca.dir(), LEN);
    // A bound far above a loaded machine's time for 8 MiB (under a second here) and far below
    // what the flood did to it when the daemon served a client's whole buffer of requests in
    // one turn (42 s).
    // On a machine loaded enough to slow the transfer alone, the bound grows with it.
    let bound = (alone * 40).max(Duration::from_secs(15));
    assert!(during < bound, "{during:?} (alone {alone:?})");
    stop.store(true, Ordering::Relaxed);
    let (bells, requests) = (bells.join().unwrap(), requests.join().unwrap());
    assert!(
        bells > 1000 && requests > 1000,
        "{bells} doorbells, {requests} requests"
    );
    // The daemon still serves.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    assert_eq!(ctx.devices().unwrap().len(), 2);
    println!(
        "good transfer of {} MiB: alone {:.1} MiB/s, beside {bells} doorbells and {requests} \
         answered requests {:.1} MiB/s ({:.2} s)",
        LEN >> 20,
        mib_per_s(LEN, alone),
        mib_per_s(LEN, during),
        during.as_secs_f64()
    );
}

/// The program [`a_client_killed_mid_rdma_leaves_its_peer_error_completions_and_nothing_else`]
/// kills: a client on rxe1 that connects an RC QP to the test's and then writes to it without
/// end. Runs only when that test starts it (with `SOFTIB_KILLED_CHILD_DIR` set).
#[test]
#[ignore = "started by a_client_killed_mid_rdma_leaves_its_peer_error_completions_and_nothing_else"]
fn killed_child() {
    let Some(dir) = std::env::var_os("SOFTIB_KILLED_CHILD_DIR") else {
        return;
    };
    let b = Device::open_at(Path::new(&dir), Some("rxe1")).unwrap();
    let pd = b.alloc_pd().unwrap();
    let cq = b.create_cq(64).unwrap();
    let buf = b.alloc_buffer(1 << 20).unwrap();
    let mr = pd.register(&buf, all()).unwrap();
    let qp = pd.create_qp(QpType::Rc, &cq, &cq, 32).unwrap();
    let me = qp.endpoint_with(Some(&mr)).unwrap();
    println!("ENDPOINT {}", serde_json::to_string(&me).unwrap());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    let peer: Endpoint = serde_json::from_str(line.trim()).unwrap();
    qp.connect(&peer, Mtu::Mtu1024).unwrap();
    println!("READY");
    let mut i = 0u64;
    loop {
        qp.write(&mr, 0, 4096, peer.addr, peer.rkey, i).unwrap();
        let _ = cq.wait(Duration::from_secs(5));
        i += 1;
    }
}

#[test]
fn a_client_killed_mid_rdma_leaves_its_peer_error_completions_and_nothing_else() {
    let hca = two_devices();
    let a = Device::open_at(hca.dir(), Some("rxe0")).unwrap();
    let pd = a.alloc_pd().unwrap();
    let cq = a.create_cq(256).unwrap();
    let buf = a.alloc_buffer(1 << 20).unwrap();
    let mr = pd.register(&buf, all()).unwrap();
    let qp = pd.create_qp(QpType::Rc, &cq, &cq, 128).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_child", "--ignored", "--nocapture"])
        .env("SOFTIB_KILLED_CHILD_DIR", hca.dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let child_pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let peer: Endpoint = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
        if let Some(json) = line.trim().strip_prefix("ENDPOINT ") {
            break serde_json::from_str(json).unwrap();
        }
    };
    let me = qp.endpoint_with(Some(&mr)).unwrap();
    writeln!(
        child.stdin.as_mut().unwrap(),
        "{}",
        serde_json::to_string(&me).unwrap()
    )
    .unwrap();
    qp.connect(&peer, Mtu::Mtu1024).unwrap();
    while line.trim() != "READY" {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "the child ended");
    }

    // RDMA both ways: the child writes to us; we write to and read from it, 64 in flight.
    let mut posted = 0u64;
    let mut wcs = Vec::new();
    let post = |i: u64| {
        let off = (i as usize % 64) * 4096;
        if i % 2 == 0 {
            qp.write(&mr, off, 4096, peer.addr + off as u64, peer.rkey, i)
        } else {
            qp.read(&mr, off, 4096, peer.addr + off as u64, peer.rkey, i)
        }
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        while posted - (wcs.len() as u64) < 64 {
            post(posted).unwrap();
            posted += 1;
        }
        wcs.extend(cq.poll_wait(64, Duration::from_millis(10)).unwrap());
    }
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    let before = wcs.len();
    // SIGKILL. Its QP lives in the daemon, which answers for it until it learns the process
    // is gone (as an HCA does until the kernel destroys a dead process's QPs), so we keep 64
    // WRs in flight until the first fails.
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    while wcs.iter().all(|w| w.status == WcStatus::Success) {
        assert!(killed.elapsed() < Duration::from_secs(20), "no error");
        while posted - (wcs.len() as u64) < 64 {
            post(posted).unwrap();
            posted += 1;
        }
        wcs.extend(cq.poll_wait(64, Duration::from_millis(10)).unwrap());
    }
    let failed_after = killed.elapsed();
    wcs.extend(collect(
        &cq,
        posted as usize - wcs.len(),
        Duration::from_secs(20),
    ));
    assert_retry_exceeded_then_flushed(&wcs);

    // Everything the killed client owned is reclaimed.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    let t = Instant::now();
    while ctx.resources().unwrap().iter().any(|c| c.pid == child_pid) {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the killed client's objects remain"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And the daemon serves on.
    let after = good_transfer(hca.dir(), 1 << 20);
    println!(
        "killed mid-RDMA after {before} completions: the peer's first error (retries exceeded, \
         then {} flushed) {:.2} s later; a 1 MiB transfer after it took {:.3} s",
        wcs.iter()
            .filter(|w| w.status == WcStatus::WrFlushErr)
            .count(),
        failed_after.as_secs_f64(),
        after.as_secs_f64()
    );
}

/// Run as another user by [`the_control_socket_keeps_other_users_out`]: connects to the
/// socket in `SOFTIB_OTHER_USER_SOCKET` and prints what happened.
#[test]
#[ignore = "started by the_control_socket_keeps_other_users_out"]
fn other_user_child() {
    let Some(path) = std::env::var_os("SOFTIB_OTHER_USER_SOCKET") else {
        return;
    };
    let mut s = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e) => {
            println!("RESULT connect: {:?}", e.kind());
            return;
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hello = Request::Hello {
        version: proto::VERSION,
        pid: std::process::id(),
        program: "intruder".into(),
    };
    let _ = proto::send(&s, &hello, &[]);
    match proto::recv_blocking(&mut s).map(|f| proto::decode::<proto::Response>(&f)) {
        Ok(Ok(proto::Response::Error { kind, message })) => {
            println!("RESULT refused: {kind:?}: {message}");
        }
        Ok(_) => println!("RESULT served"),
        Err(e) => println!("RESULT closed: {:?}", e.kind()),
    }
}

#[test]
fn the_control_socket_keeps_other_users_out() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let hca = EmbeddedDaemon::start().unwrap();
    let sock = hca.dir().join(proto::SOCKET_NAME);
    let mode = std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the socket is its user's alone");
    if !rustix::process::geteuid().is_root() {
        println!("not root: cannot try as another user; checked the socket's mode only");
        return;
    }
    let as_nobody = || {
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "other_user_child", "--ignored", "--nocapture"])
            .env("SOFTIB_OTHER_USER_SOCKET", &sock)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .map(str::to_owned)
            .unwrap_or_else(|| format!("no result: {text}"))
    };
    // The mode keeps another user out...
    assert_eq!(as_nobody(), "connect: PermissionDenied");
    // ... and were it loosened (bind creates the socket with the umask's mode before the
    // daemon narrows it), the daemon still serves no one but its user: the intruder's Hello
    // is answered with why and what to do, and nothing more.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let r = as_nobody();
    assert!(
        r.starts_with("refused: Permission: permission denied: uid 65534"),
        "{r}"
    );
    assert!(r.contains("--allow-users 65534"), "{r}");
    // Its own user is served as ever.
    let mut ctx = Context::open_at(hca.dir()).unwrap();
    assert!(ctx.devices().unwrap().is_empty());
}

#[test]
fn a_client_cannot_reach_another_clients_memory_through_its_keys() {
    let hca = two_devices();
    // The victim, a client of its own on rxe0, holds a secret in a registered buffer.
    let victim = Device::open_at(hca.dir(), Some("rxe0")).unwrap();
    let vpd = victim.alloc_pd().unwrap();
    let vbuf = victim.alloc_buffer(4096).unwrap();
    let vmr = vpd.register(&vbuf, AccessFlags::LOCAL_WRITE).unwrap();
    let secret = [0x5Au8; 64];
    vbuf.write(0, &secret);
    // The attacker on rxe0 and its accomplice on rxe1 learn the victim's address and L_Key
    // (they are small numbers) and put them in their own work requests.
    let (x, y) = open_pair(hca.dir());
    let (pd_x, pd_y) = (x.alloc_pd().unwrap(), y.alloc_pd().unwrap());
    let (cq_x, cq_y) = (x.create_cq(16).unwrap(), y.create_cq(16).unwrap());
    let (buf_x, buf_y) = (x.alloc_buffer(4096).unwrap(), y.alloc_buffer(4096).unwrap());
    let (mr_x, mr_y) = (
        pd_x.register(&buf_x, all()).unwrap(),
        pd_y.register(&buf_y, all()).unwrap(),
    );
    let qp_x = pd_x.create_qp(QpType::Rc, &cq_x, &cq_x, 16).unwrap();
    let qp_y = pd_y.create_qp(QpType::Rc, &cq_y, &cq_y, 16).unwrap();
    let (ex, ey) = (
        qp_x.endpoint_with(Some(&mr_x)).unwrap(),
        qp_y.endpoint_with(Some(&mr_y)).unwrap(),
    );
    qp_x.connect(&ey, Mtu::Mtu1024).unwrap();
    qp_y.connect(&ex, Mtu::Mtu1024).unwrap();
    let stolen = softib::Sge {
        addr: vmr.addr(),
        length: 64,
        lkey: vmr.lkey(),
    };
    // Read it out: a SEND gathering from the victim's region fails locally; nothing leaves.
    qp_y.recv(&mr_y, 0, 256, 1).unwrap();
    qp_x.post_send(vec![softib::SendWr {
        wr_id: 2,
        opcode: softib::WrOpcode::Send,
        sg_list: vec![stolen],
        flags: softib::SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
    }])
    .unwrap();
    let wc = cq_x.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::LocProtErr));
    let mut at_y = [0u8; 64];
    buf_y.read(0, &mut at_y);
    assert_ne!(at_y, secret, "the secret reached the accomplice");
    // Write into it: a receive scattering into the victim's region fails; its bytes stay.
    let qp_x2 = pd_x.create_qp(QpType::Rc, &cq_x, &cq_x, 16).unwrap();
    let qp_y2 = pd_y.create_qp(QpType::Rc, &cq_y, &cq_y, 16).unwrap();
    connect(&qp_x2, &qp_y2);
    qp_x2
        .post_recv(vec![softib::RecvWr {
            wr_id: 3,
            sg_list: vec![stolen],
        }])
        .unwrap();
    buf_y.write(0, &[0xEE; 64]);
    qp_y2.send(&mr_y, 0, 64, None, 4).unwrap();
    // The receive fails (local protection), and the sender hears so (a NAK: remote operational
    // error), as on hardware.
    let wc = cq_x.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::LocProtErr));
    let wc = cq_y.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::RemOpErr));
    let mut now = [0u8; 64];
    vbuf.read(0, &mut now);
    assert_eq!(now, secret, "the victim's memory changed");
    // The victim's key as an R_Key is no better (through a fresh pair: each failure above put
    // the failing QP in error, as hardware does): the region is of another PD and grants no
    // remote access.
    let qp_x3 = pd_x.create_qp(QpType::Rc, &cq_x, &cq_x, 16).unwrap();
    let qp_y3 = pd_y.create_qp(QpType::Rc, &cq_y, &cq_y, 16).unwrap();
    connect(&qp_x3, &qp_y3);
    qp_y3
        .write(&mr_y, 0, 64, vmr.addr(), vmr.rkey(), 5)
        .unwrap();
    let wc = cq_y.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::RemAccessErr));
    vbuf.read(0, &mut now);
    assert_eq!(now, secret, "the victim's memory changed");
}
