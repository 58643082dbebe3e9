//! The HCA inside the application: a host daemon on a thread of this process, with its own
//! runtime directory, for tests and single-process programs that have no `softibd`.
//!
//! The API is the same — [`crate::Device::open_at`] with [`EmbeddedDaemon::dir`] — because the
//! daemon is the same code; only where it runs differs.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use softib_hca::host::{Daemon, DaemonThread};

use crate::{Context, Error, ErrorKind, LinkConfig, Result};

/// A daemon running on a thread of this process; stopped (and its directory removed) when
/// dropped.
#[derive(Debug)]
pub struct EmbeddedDaemon {
    dir: PathBuf,
    /// The daemon, stopped in `drop` before the directory goes.
    daemon: Option<DaemonThread>,
}

impl EmbeddedDaemon {
    /// Starts a daemon with no devices in a fresh temporary runtime directory.
    pub fn start() -> Result<EmbeddedDaemon> {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("softib-embedded-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let d = dir.clone();
        let seed = u64::from(std::process::id()) << 16 | u64::from(n);
        let daemon = DaemonThread::spawn(move || {
            Daemon::single_host("embedded", &d, seed).map(|(daemon, _)| daemon)
        })
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => Error::Refused {
                kind: ErrorKind::Busy,
                message: "the embedded daemon did not start within 10 s".into(),
            },
            _ => Error::Io(e),
        })?;
        Ok(EmbeddedDaemon {
            dir,
            daemon: Some(daemon),
        })
    }

    /// Its runtime directory (give it to [`crate::Device::open_at`] / [`Context::open_at`]).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Adds a RoCEv2 device `name` on the loopback interface at `addr` (e.g. 127.0.0.2), UDP
    /// port `udp_port`.
    pub fn add_loopback_device(&self, name: &str, addr: &str, udp_port: u16) -> Result<()> {
        let addr = addr.parse().map_err(|_| Error::Refused {
            kind: ErrorKind::Invalid,
            message: format!("{addr} is not an IP address"),
        })?;
        Context::open_at(&self.dir)?.link_add(LinkConfig {
            name: name.into(),
            netdev: "lo".into(),
            addr,
            udp_port,
        })
    }

    /// Adds two RoCEv2 devices that reach each other, `rxe0` at 127.0.0.2 and `rxe1` at
    /// 127.0.0.3 on the loopback interface, on a UDP port free on both (what tests running at
    /// once in one process need: each pair its own port, found rather than guessed); returns
    /// the port.
    pub fn add_loopback_pair(&self) -> Result<u16> {
        let mut last = None;
        for _ in 0..20 {
            let port = std::net::UdpSocket::bind("127.0.0.2:0")?
                .local_addr()?
                .port();
            // The probe is closed here; another test may take the port before the devices do,
            // which only means looking again.
            match self.add_loopback_device("rxe0", "127.0.0.2", port) {
                Ok(()) => {}
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            }
            match self.add_loopback_device("rxe1", "127.0.0.3", port) {
                Ok(()) => return Ok(port),
                Err(e) => {
                    Context::open_at(&self.dir)?.link_del("rxe0")?;
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or(Error::Unexpected("no free port")))
    }
}

impl Drop for EmbeddedDaemon {
    fn drop(&mut self) {
        // Stopped and joined first, then its directory goes.
        self.daemon.take();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
