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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::process::Signal;
use softib::{AccessFlags, Device, Error, WcStatus};

mod common;
use common::junk::{drops, flood};
use common::rc_pair::rc_pair;
use common::signal;

const LEN: usize = 64 << 10;
const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .with(AccessFlags::REMOTE_WRITE)
    .with(AccessFlags::REMOTE_READ);

/// Every test of this binary runs on the process path (read when a context opens).
fn process_path() {
    std::env::set_var("SOFTIB_DATAPATH", "process");
}

#[test]
fn a_junk_flood_steered_to_a_process_engine_leaves_its_transfer_right() {
    process_path();
    rc_pair("pflood", ("127.0.0.177", "127.0.0.178"), LEN, |p| {
        (p.write)(1).expect("the transfer fails without a flood");
        // Paced at a rate a debug build absorbs even on a machine loaded beyond its cores
        // (at 10,000/s, the daemon path test's rate, a run at load average 10 lost its QP to
        // retries exceeded): every WRITE right. Then as fast as one thread sends: a WRITE may fail,
        // but only with RETRY_EXC_ERR (its packets lost in a full socket), never wrong data,
        // a crash or a hang.
        let mut round = 1;
        for (rate, name) in [(Some(3_000), "paced"), (None, "unpaced")] {
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
    process_path();
    rc_pair("palive", ("127.0.0.175", "127.0.0.176"), LEN, |p| {
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
