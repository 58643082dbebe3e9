//! A whole fabric in one daemon: hosts with their control sockets, cables on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use softib_fabric::Topology;
use softib_hca::host::{host_dir, Daemon};

const TOPO_A: &str = include_str!("../../../topologies/topoA.net");

struct Running {
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start(topo: &str, name: &str) -> Running {
    let dir = std::env::temp_dir().join(format!("softib-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let stop = Arc::new(AtomicBool::new(false));
    let topology = Topology::parse(topo).unwrap();
    let (d2, s2) = (dir.clone(), stop.clone());
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mut daemon =
            Daemon::from_topology(&topology, &d2, "127.0.0.1".parse().unwrap(), 7).unwrap();
        tx.send(()).unwrap();
        daemon.run(&s2).unwrap();
    });
    rx.recv_timeout(Duration::from_secs(10))
        .expect("daemon started");
    Running {
        dir,
        stop,
        thread: Some(thread),
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ctx(dir: &Path, host: &str) -> softib::Context {
    softib::Context::open_at(&host_dir(dir, host)).unwrap()
}

#[test]
fn back_to_back_ports_train_to_initializing_without_an_sm() {
    let f = start(TOPO_A, "train");
    let mut a = ctx(&f.dir, "test213");
    let mut b = ctx(&f.dir, "test214");
    assert_eq!(a.host(), "test213");
    wait_for(
        "both ports of both hosts LinkUp/Init",
        Duration::from_secs(5),
        || {
            [&mut a, &mut b].into_iter().all(|c| {
                let d = c.devices().unwrap();
                d[0].ports.iter().all(|p| p.phys_state == 5 && p.state == 2)
            })
        },
    );
    let d = a.devices().unwrap();
    assert_eq!(d[0].name, "mlx4_0");
    assert_eq!(d[0].ca_type, "MT4099");
    assert_eq!(d[0].ports.len(), 2);
    assert_eq!(d[0].ports[0].rate, 40);
    assert_eq!(d[0].ports[0].lid.0, 0);
}

#[test]
fn a_client_cannot_use_another_clients_objects_and_bad_requests_get_errors() {
    let f = start(TOPO_A, "own");
    let mut a = ctx(&f.dir, "test213");
    let mut b = ctx(&f.dir, "test213");
    let pd = a.alloc_pd(0).unwrap();
    let cq = a.create_cq(0, 16).unwrap();
    let err = b.create_cq(1, 16).unwrap_err().to_string();
    assert!(err.contains("no device 1"), "{err}");
    let err = b.destroy_cq(0, cq).unwrap_err().to_string();
    assert!(err.contains("belongs to this client"), "{err}");
    let err = b.dealloc_pd(0, pd).unwrap_err().to_string();
    assert!(err.contains("belongs to this client"), "{err}");
    // Garbage on the socket: the daemon answers with an error and keeps serving others.
    {
        use std::io::Write;
        let mut raw = std::os::unix::net::UnixStream::connect(
            host_dir(&f.dir, "test213").join("softibd.sock"),
        )
        .unwrap();
        raw.write_all(&[5, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff])
            .unwrap();
        raw.write_all(&[0xff, 0xff, 0xff, 0x7f]).unwrap();
    }
    // When `a` goes away its objects are reclaimed; the daemon still serves `b`.
    drop(a);
    let _ = b.devices().unwrap();
    let buf = b.alloc_buffer(4096).unwrap();
    let pd = b.alloc_pd(0).unwrap();
    let err = b
        .reg_mr(0, pd, &buf, 4000, 200, softib::AccessFlags::LOCAL_WRITE)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not inside buffer"), "{err}");
    b.reg_mr(0, pd, &buf, 0, 4096, softib::AccessFlags::LOCAL_WRITE)
        .unwrap();
}
