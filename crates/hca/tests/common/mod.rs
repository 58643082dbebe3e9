//! What the daemon tests share: a daemon on a thread of the test, with a runtime directory of
//! its own, stopped and cleaned up when the test lets go of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use softib::{Context, MadQp};
use softib_fabric::Topology;
use softib_hca::host::{host_dir, Daemon, DaemonThread};
use softib_wire::mad::attr::{PortInfo, SmpAttribute};
use softib_wire::mad::{smp, AttrId, Method, MAD_LEN};

pub const TOPO_A: &str = include_str!("../../../../topologies/topoA.net");
/// One switch, a 4X EDR link to h1 and a 1X SDR link to h2.
pub const RATES: &str = include_str!("../../../../topologies/rates.net");

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

/// A MAD agent on port 1 of one host, asking with directed-route SMPs.
pub struct Agent {
    pub ctx: Context,
    tid: u64,
    /// Traps that arrived (an SM's agent receives them).
    pub traps: Vec<smp::Repr>,
}

impl Agent {
    pub fn open(f: &Running, host: &str, sm: bool) -> Agent {
        let mut ctx = Context::open_at(&host_dir(&f.dir, host)).unwrap();
        ctx.open_mad(0, 1, sm).unwrap();
        Agent {
            ctx,
            tid: u64::from(sm) << 32 | 0x100,
            traps: Vec::new(),
        }
    }

    /// Sends a directed-route SMP along `path` and returns the response, or `None` when
    /// none comes within `wait`.
    pub fn ask(&mut self, req: smp::Repr, wait: Duration) -> Option<smp::Repr> {
        let mut b = [0u8; MAD_LEN];
        req.emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        self.ctx.send_smp(0, 1, None, &b).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < wait {
            for m in self.ctx.recv_mads(16, Duration::from_millis(50)).unwrap() {
                if m.qp != MadQp::Smi {
                    continue;
                }
                let r = smp::Repr::parse(&smp::Packet::new_unchecked(&m.mad[..])).unwrap();
                if r.header.method == Method::Trap {
                    self.traps.push(r);
                } else if r.header.tid == req.header.tid {
                    return Some(r);
                }
            }
        }
        None
    }

    pub fn next_tid(&mut self) -> u64 {
        self.tid += 1;
        self.tid
    }

    /// PortInfo of the port the SMP arrives on at the end of `path`, with its status.
    pub fn get_port_info(&mut self, path: &[u8], m_key: u64) -> Option<(u16, PortInfo)> {
        self.get_port_info_of(path, 0, m_key)
    }

    /// PortInfo of port `port` of the node at the end of `path` (a switch's ports by number).
    pub fn get_port_info_of(
        &mut self,
        path: &[u8],
        port: u8,
        m_key: u64,
    ) -> Option<(u16, PortInfo)> {
        let tid = self.next_tid();
        let req = smp::Repr::dr_get(tid, AttrId::PORT_INFO, u32::from(port), m_key, path).unwrap();
        self.ask(req, Duration::from_secs(1))
            .map(|r| (r.header.status, PortInfo::parse(&r.data).unwrap()))
    }

    pub fn set_port_info(&mut self, path: &[u8], m_key: u64, pi: &PortInfo) -> Option<u16> {
        let tid = self.next_tid();
        let req = smp::Repr::dr_set(tid, AttrId::PORT_INFO, 0, m_key, path, pi.to_data()).unwrap();
        self.ask(req, Duration::from_secs(1))
            .map(|r| r.header.status)
    }
}
