//! What the daemon tests share: a daemon on a thread of the test, with a runtime directory of
//! its own, stopped and cleaned up when the test lets go of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use softib_fabric::Topology;
use softib_hca::host::{Daemon, DaemonThread};

pub const TOPO_A: &str = include_str!("../../../../topologies/topoA.net");

/// A daemon running for one test.
pub struct Running {
    pub dir: PathBuf,
    daemon: Option<DaemonThread>,
}

impl Running {
    /// Whether its loop still runs (a request must never stop it).
    pub fn alive(&self) -> bool {
        self.daemon.as_ref().is_some_and(DaemonThread::is_running)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.daemon.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn test_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("softib-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Every node of `topology` in one daemon, cables on loopback.
pub fn start_topology(topology: &str, name: &str, seed: u64) -> Running {
    let dir = test_dir(name);
    let topology = Topology::parse(topology).unwrap();
    let d = dir.clone();
    let daemon = DaemonThread::spawn(move || {
        Daemon::from_topology(&topology, &d, "127.0.0.1".parse().unwrap(), seed)
    })
    .expect("daemon started");
    Running {
        dir,
        daemon: Some(daemon),
    }
}

/// One host daemon with no devices (add RoCE links through its socket).
pub fn start_host(name: &str, seed: u64) -> Running {
    let dir = test_dir(name);
    let d = dir.clone();
    let daemon = DaemonThread::spawn(move || Daemon::single_host("h", &d, seed).map(|(d, _)| d))
        .expect("daemon started");
    Running {
        dir,
        daemon: Some(daemon),
    }
}

/// A QP of `qp_type` completing into `cq`, `depth` WRs deep in each queue with one SGE each.
pub fn qp_init(
    qp_type: softib_engine::verbs::QpType,
    pd: softib_engine::PdHandle,
    cq: softib_engine::CqHandle,
    depth: u32,
    sq_sig_all: bool,
) -> softib_engine::QpInitAttr {
    softib_engine::QpInitAttr {
        qp_type,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: softib_engine::QpCap {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all,
    }
}
