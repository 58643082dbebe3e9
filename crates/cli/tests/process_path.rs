//! The process data path (`SOFTIB_DATAPATH=process`) under floods and stopped daemons (issue
//! 23, items 1 and 2): the engines run in this process, each with its own socket in its
//! device's steering group, and RC WRITEs between two of them (on two daemons, so that their
//! datagrams cross the kernel) are checked byte for byte.
//! - A junk flood at the target device's port, aimed at the live QP (so that the kernel steers
//!   it to this process's socket, not the daemon's): the process's engine screens it as the
//!   daemon's does, and the transfer goes on.
//! - Both daemons stopped: the data path is this process's, WRITEs go on; a control verb that
//!   needs the daemon names it within seconds instead of waiting forever.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use softib::{AccessFlags, Device, Error, MemoryRegion, Mtu, ProtectionDomain, QpType, WcStatus};

mod common;
use common::junk::{drops, flood};
use common::{roce_daemon, signal, Kill};

const LEN: usize = 64 << 10;
const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .with(AccessFlags::REMOTE_WRITE)
    .with(AccessFlags::REMOTE_READ);

/// What a test gets from [`rc_pair`].
struct Pair<'a> {
    daemons: (&'a Kill, &'a Kill),
    dirs: (&'a Path, &'a Path),
    /// The target device's address and its RC QP's number (the flood's aim).
    target: SocketAddr,
    target_qpn: u32,
    pd_a: &'a ProtectionDomain,
    buf_a: &'a softib::Buffer,
    /// Posts one checked 64 KiB WRITE (round `n`) and waits for it: Ok once its bytes are
    /// right, or the status it failed with. A WRITE that neither completes nor fails in 60 s
    /// fails the test.
    write: &'a dyn Fn(u32) -> Result<(), WcStatus>,
}

/// Two daemons with a RoCE device each at `ips`, and an RC connection between engines of this
/// process on them; runs `body` with it.
fn rc_pair(name: &str, ips: (&str, &str), body: impl FnOnce(&Pair<'_>)) {
    // Every test of this binary runs on the process path (read when a context opens).
    std::env::set_var("SOFTIB_DATAPATH", "process");
    let base = std::env::temp_dir().join(format!("softib-{name}-{}", std::process::id()));
    let (dir_a, dir_b): (PathBuf, PathBuf) = (base.join("a"), base.join("b"));
    for d in [&dir_a, &dir_b] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let da = roce_daemon(&dir_a, ips.0);
    let db = roce_daemon(&dir_b, ips.1);
    let a = Device::open_at(&dir_a, Some("rxe0")).unwrap();
    let b = Device::open_at(&dir_b, Some("rxe0")).unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let (mr_a, mr_b): (MemoryRegion<'_>, MemoryRegion<'_>) = (
        pd_a.register(&buf_a, ALL).unwrap(),
        pd_b.register(&buf_b, ALL).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    let (ea, eb) = (
        qp_a.endpoint_with(Some(&mr_a)).unwrap(),
        qp_b.endpoint_with(Some(&mr_b)).unwrap(),
    );
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&ea, Mtu::Mtu1024).unwrap();
    let write = |round: u32| -> Result<(), WcStatus> {
        let data: Vec<u8> = (0..LEN as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(round) >> 9) as u8)
            .collect();
        buf_a.write(0, &data);
        qp_a.write(&mr_a, 0, LEN, eb.addr, eb.rkey, u64::from(round))
            .unwrap();
        let wcs = cq_a.poll_wait(1, Duration::from_secs(60)).unwrap();
        assert_eq!(wcs.len(), 1, "round {round}: no completion in 60 s");
        if wcs[0].status != WcStatus::Success {
            return Err(wcs[0].status);
        }
        let mut got = vec![0u8; LEN];
        assert!(buf_b.read(0, &mut got));
        assert!(got == data, "round {round}: the bytes differ");
        Ok(())
    };
    body(&Pair {
        daemons: (&da, &db),
        dirs: (&dir_a, &dir_b),
        target: SocketAddr::new(ips.1.parse().unwrap(), 4791),
        target_qpn: eb.qpn.value(),
        pd_a: &pd_a,
        buf_a: &buf_a,
        write: &write,
    });
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn a_junk_flood_steered_to_a_process_engine_leaves_its_transfer_right() {
    rc_pair("pflood", ("127.0.0.177", "127.0.0.178"), |p| {
        (p.write)(1).expect("the transfer fails without a flood");
        // Paced as the daemon path's test is (what a debug build absorbs on a loaded
        // machine): every WRITE right. Then as fast as one thread sends: a WRITE may fail,
        // but only with RETRY_EXC_ERR (its packets lost in a full socket), never wrong data,
        // a crash or a hang.
        let mut round = 1;
        for (rate, name) in [(Some(10_000), "paced"), (None, "unpaced")] {
            let stop = Arc::new(AtomicBool::new(false));
            let sent = Arc::new(AtomicU64::new(0));
            let flooder = {
                let (stop, sent, to, qpn) = (stop.clone(), sent.clone(), p.target, p.target_qpn);
                std::thread::spawn(move || flood(to, qpn, rate, stop, sent))
            };
            let t0 = Instant::now();
            let mut ok = 0;
            let outcome = loop {
                if t0.elapsed() > Duration::from_secs(2) {
                    break Ok(());
                }
                round += 1;
                match (p.write)(round) {
                    Ok(()) => ok += 1,
                    Err(s) => break Err(s),
                }
            };
            let rate_sent = sent.load(Ordering::Relaxed) as f64 / t0.elapsed().as_secs_f64();
            stop.store(true, Ordering::Relaxed);
            flooder.join().unwrap();
            eprintln!(
                "{name} flood on the process path: {rate_sent:.0} datagrams/s, {ok} checked \
                 64 KiB WRITEs, then {outcome:?}"
            );
            match (rate, outcome) {
                (_, Ok(())) | (None, Err(WcStatus::RetryExcErr)) => {}
                (_, Err(s)) => panic!("{name}: the transfer failed with {s:?}"),
            }
            assert!(ok > 0 || rate.is_none(), "{name}: no WRITE completed");
        }
        // The junk for QPNs no process owns went to the daemon, which counted it; the
        // process's engine screened the rest (its counters are not reported yet).
        let d = drops(p.dirs.1);
        eprintln!("the target daemon's drops: {d:?}");
        assert!(d.get("unknown_qp").copied().unwrap_or(0) > 0, "{d:?}");
    });
}

#[test]
fn a_stopped_daemon_is_named_to_control_verbs_while_the_process_data_path_goes_on() {
    rc_pair("palive", ("127.0.0.175", "127.0.0.176"), |p| {
        (p.write)(1).unwrap();
        let (da, db) = p.daemons;
        signal(&da.0, Signal::STOP);
        signal(&db.0, Signal::STOP);
        // The data path is this process's: WRITEs go on with both daemons stopped.
        let t0 = Instant::now();
        for round in 2..12 {
            (p.write)(round).unwrap();
        }
        eprintln!(
            "10 checked 64 KiB WRITEs with both daemons stopped in {:?}",
            t0.elapsed()
        );
        // Registering memory needs the daemon (it hands out the keys): it is named within
        // seconds, with its state.
        let t0 = Instant::now();
        let e = p.pd_a.register(p.buf_a, ALL).map(|_| ()).unwrap_err();
        let waited = t0.elapsed();
        eprintln!("a control verb named the stopped daemon after {waited:?}");
        assert!(
            matches!(e, Error::DaemonUnresponsive { .. })
                && e.to_string().contains(&format!(
                    "softibd (pid {}) has stopped answering (state: stopped)",
                    da.0.id()
                )),
            "{e}"
        );
        assert!(waited < Duration::from_secs(9), "{waited:?}");
        signal(&da.0, Signal::CONT);
        signal(&db.0, Signal::CONT);
        // Resumed: a new session on the daemon works, and so does the data path.
        let again = Device::open_at(p.dirs.0, Some("rxe0")).unwrap();
        again.alloc_pd().unwrap();
        (p.write)(12).unwrap();
    });
}
