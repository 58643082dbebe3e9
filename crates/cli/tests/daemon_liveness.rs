//! A daemon that stops answering is noticed and named: a client waiting on it — for a
//! completion, for the answer to a control verb, or spinning on its CQ as a C program does
//! through the drop-in — says within seconds that softibd stopped answering, with its state,
//! instead of waiting forever. On the daemon's data path, where a poll waits on the daemon
//! (a process engine's poll does not: `process_path.rs` shows its control verbs naming a
//! stopped daemon while its data path goes on).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::process::Signal;
use softib::{Context, DataPath, Error};

mod common;
use common::{roce_daemon, signal, Kill, SOFTIB};

#[test]
fn a_stopped_daemon_is_named_to_waiting_and_spinning_clients() {
    let dir = std::env::temp_dir().join(format!("softib-alive-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = roce_daemon(&dir, "127.0.0.94");
    let mut ctx = Context::open_on(&dir, DataPath::Daemon).unwrap();
    let cq = ctx.create_cq(0, 16).unwrap();
    // Alive: a wait that finds nothing just ends, however long the daemon sleeps meanwhile.
    let t0 = Instant::now();
    assert!(ctx
        .poll_cq(0, cq, 1, Duration::from_secs(7))
        .unwrap()
        .is_empty());
    assert!(t0.elapsed() >= Duration::from_secs(7));

    // A second program that will spin on its CQ without waiting (the drop-in's ibv_poll_cq).
    let mut spinner = Context::open_on(&dir, DataPath::Daemon).unwrap();
    let spin_cq = spinner.create_cq(0, 16).unwrap();

    signal(&d.0, Signal::STOP);
    let named = |e: &Error| {
        matches!(e, Error::DaemonUnresponsive { .. })
            && e.to_string().contains(&format!(
                "softibd (pid {}) has stopped answering (state: stopped)",
                d.0.id()
            ))
    };
    // A wait for a completion.
    let t0 = Instant::now();
    let e = ctx.poll_cq(0, cq, 1, Duration::from_secs(60)).unwrap_err();
    eprintln!(
        "a waiting poll named the stopped daemon after {:?}",
        t0.elapsed()
    );
    assert!(named(&e), "{e}");
    assert!(e.to_string().contains("kill -CONT"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    // A control verb.
    let t0 = Instant::now();
    let e = ctx.alloc_pd(0).unwrap_err();
    assert!(named(&e), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    // The spinner.
    let t0 = Instant::now();
    let mut out = Vec::new();
    let e = loop {
        match spinner.poll_cq_nowait(0, spin_cq, 1, &mut out) {
            Ok(_) => assert!(t0.elapsed() < Duration::from_secs(9), "still spinning"),
            Err(e) => break e,
        }
    };
    assert!(named(&e), "{e}");
    // A program starting now: its Hello waits on the stopped daemon, and opening says so.
    let t0 = Instant::now();
    let e = Context::open_at(&dir).unwrap_err();
    assert!(named(&e), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(9), "{:?}", t0.elapsed());
    signal(&d.0, Signal::CONT);
    // Resumed: a new session works.
    let mut again = Context::open_on(&dir, DataPath::Daemon).unwrap();
    again.alloc_pd(0).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Debian's `ib_write_bw`, unmodified, on the drop-in and the daemon's data path: the daemon
/// is stopped during the run, and the client, which spins on `ibv_poll_cq`, exits non-zero
/// naming the stopped daemon. (On the process data path the transfer goes on without the
/// daemon, as it should: `process_path.rs`.)
#[test]
fn an_unmodified_perftest_stops_and_names_a_stopped_daemon() {
    if !Path::new("/usr/bin/ib_write_bw").exists() {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "/usr/bin/ib_write_bw is missing under CI=true: .ci/run installs perftest"
        );
        eprintln!("skipped: Debian's perftest is not installed (apt-get install perftest)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("softib-alive-pt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = roce_daemon(&dir, "127.0.0.95");
    let port = (20000 + std::process::id() % 20000).to_string();
    let run = |extra: &[&str]| {
        let mut c = Command::new(SOFTIB);
        c.args(["run", "--host"])
            .arg(&dir)
            .env("SOFTIB_DATAPATH", "daemon")
            .args([
                "--",
                "/usr/bin/ib_write_bw",
                "-d",
                "rxe0",
                "-D",
                "60",
                "-p",
                &port,
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Kill(c.spawn().unwrap())
    };
    let server = run(&[]);
    std::thread::sleep(Duration::from_millis(500));
    let client = run(&["127.0.0.1"]);
    // Let the transfer start, then stop the HCA.
    std::thread::sleep(Duration::from_secs(3));
    signal(&d.0, Signal::STOP);
    let t0 = Instant::now();
    let out = finish(client, Duration::from_secs(20));
    let elapsed = t0.elapsed();
    eprintln!("ib_write_bw stopped {elapsed:?} after its daemon");
    signal(&d.0, Signal::CONT);
    drop(server);
    let Some(out) = out else {
        panic!("ib_write_bw still ran 20 s after its daemon stopped");
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "softibd (pid {}) has stopped answering (state: stopped)",
            d.0.id()
        )),
        "{err}"
    );
    assert!(elapsed < Duration::from_secs(12), "{elapsed:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// What `k` printed and how it exited, once it exits within `timeout`.
fn finish(mut k: Kill, timeout: Duration) -> Option<std::process::Output> {
    use std::io::Read;
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = k.0.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    if let Some(mut o) = k.0.stdout.take() {
        o.read_to_end(&mut stdout).unwrap();
    }
    if let Some(mut e) = k.0.stderr.take() {
        e.read_to_end(&mut stderr).unwrap();
    }
    Some(std::process::Output {
        status,
        stdout,
        stderr,
    })
}
