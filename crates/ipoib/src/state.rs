//! What `softib ipoib show` sees: each running interface writes its state — port, group,
//! hardware address, counters — to a JSON file in the runtime directory (`ipoib/<ifname>.json`),
//! and whoever wants to know reads it there; the process behind a file is started, awaited and
//! stopped through it.

use std::path::PathBuf;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What an interface reports about itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct IfState {
    /// Interface name.
    pub ifname: String,
    /// Device.
    pub dev: String,
    /// Port.
    pub port: u8,
    /// P_Key.
    pub pkey: u16,
    /// The process that runs it.
    pub pid: u32,
    /// "up" (joined, carrying traffic), "port down", "joining", ...
    pub state: String,
    /// The hardware address: QPN and port GID, as `ip link` shows an IPoIB address.
    pub hwaddr: String,
    /// The broadcast group's MLID (0 until joined).
    pub mlid: u16,
    /// Packets and drops.
    pub counters: Counters,
    /// The neighbours IPoIB ARP has resolved, as `ip neigh show dev ib0` would list them on
    /// the kernel's IPoIB. The TUN device is layer 3, so the kernel has no neighbour table for
    /// it: this is where others (softib's librdmacm resolving an address) find a neighbour's
    /// GID.
    #[serde(default)]
    pub neighbours: Vec<Neighbour>,
}

/// A resolved neighbour of an interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Neighbour {
    /// Its IPv4 address.
    pub ip: std::net::Ipv4Addr,
    /// Its hardware address (QPN and port GID), as [`crate::encap::HwAddr`] writes it.
    pub lladdr: String,
}

/// Packet counters of an interface.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Counters {
    /// IP packets sent to the fabric.
    pub tx_packets: u64,
    /// IP packets received from the fabric.
    pub rx_packets: u64,
    /// ARP messages sent.
    pub arp_tx: u64,
    /// ARP messages received.
    pub arp_rx: u64,
    /// Dropped: the port was not Active or not joined.
    pub drop_port_down: u64,
    /// Dropped: no neighbour answered ARP in time.
    pub drop_unresolved: u64,
    /// Dropped: not IPv4 (IPv6 is not carried).
    pub drop_not_ipv4: u64,
    /// Dropped: no send slot free.
    pub drop_tx_full: u64,
    /// Dropped: malformed packets from the fabric.
    pub drop_malformed: u64,
}

impl std::fmt::Display for IfState {
    /// The three lines `softib ipoib show` prints per interface.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.counters;
        write!(
            f,
            "{}: {} port {} pkey 0x{:04x} {} mlid 0x{:04x} pid {}\n    link/infiniband {}\n    \
             tx {} rx {} arp tx/rx {}/{} dropped: port down {}, unresolved {}, not IPv4 {}, \
             tx full {}, malformed {}",
            self.ifname,
            self.dev,
            self.port,
            self.pkey,
            self.state,
            self.mlid,
            self.pid,
            self.hwaddr,
            c.tx_packets,
            c.rx_packets,
            c.arp_tx,
            c.arp_rx,
            c.drop_port_down,
            c.drop_unresolved,
            c.drop_not_ipv4,
            c.drop_tx_full,
            c.drop_malformed,
        )
    }
}

/// Where the interfaces of this host keep their state files.
pub fn dir() -> PathBuf {
    softib::runtime_dir().join("ipoib")
}

/// The state file of `ifname`.
pub fn path(ifname: &str) -> PathBuf {
    dir().join(format!("{ifname}.json"))
}

/// The state `ifname` last wrote, if it has a readable file.
pub fn read(ifname: &str) -> Option<IfState> {
    read_path(&path(ifname))
}

fn read_path(path: &std::path::Path) -> Option<IfState> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Whether process `pid` still runs.
pub fn alive(pid: u32) -> bool {
    pid_of(pid).is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

fn pid_of(pid: u32) -> Option<rustix::process::Pid> {
    rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)
}

/// Every interface with a state file, by name; one whose process is gone says so in its state.
pub fn list() -> Vec<IfState> {
    let mut all = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir()) {
        for e in rd.filter_map(|e| e.ok()) {
            if e.path().extension().is_some_and(|x| x == "json") {
                if let Some(mut s) = read_path(&e.path()) {
                    if !alive(s.pid) {
                        s.state = "gone (process exited)".into();
                    }
                    all.push(s);
                }
            }
        }
    }
    all.sort_by(|a, b| a.ifname.cmp(&b.ifname));
    all
}

/// How a freshly started interface process turned out.
#[derive(Debug)]
pub enum Startup {
    /// It wrote its state: the interface exists.
    Up(Box<IfState>),
    /// It exited first.
    Exited(ExitStatus),
    /// It neither came up nor exited in time.
    TimedOut,
}

/// Waits up to `timeout` for the interface process `child` to write the state of `ifname`.
pub fn wait_up(ifname: &str, child: &mut Child, timeout: Duration) -> std::io::Result<Startup> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = read(ifname) {
            if s.pid == child.id() {
                return Ok(Startup::Up(Box::new(s)));
            }
        }
        if let Some(status) = child.try_wait()? {
            return Ok(Startup::Exited(status));
        }
        if t0.elapsed() > timeout {
            return Ok(Startup::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What stopping an interface did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stopped {
    /// Its process.
    pub pid: u32,
    /// The process ignored SIGTERM for `grace` and was killed.
    pub killed: bool,
}

/// Stops the process of `ifname` (SIGTERM, then SIGKILL after `grace`) and removes its state
/// file; `None` when there is no such interface.
pub fn stop(ifname: &str, grace: Duration) -> Option<Stopped> {
    let file = path(ifname);
    let s = read_path(&file)?;
    let mut killed = false;
    if alive(s.pid) {
        if let Some(p) = pid_of(s.pid) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        let t0 = Instant::now();
        while alive(s.pid) && t0.elapsed() < grace {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive(s.pid) {
            if let Some(p) = pid_of(s.pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
            killed = true;
        }
    }
    let _ = std::fs::remove_file(&file);
    Some(Stopped { pid: s.pid, killed })
}

/// Writes `text` (an [`IfState`] as JSON) as the state file of `ifname`, atomically.
pub(crate) fn store(ifname: &str, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir())?;
    let path = path(ifname);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_prints_three_lines_per_interface() {
        let s = IfState {
            ifname: "ib0".into(),
            dev: "mlx4_0".into(),
            port: 1,
            pkey: 0xffff,
            pid: 42,
            state: "up".into(),
            hwaddr: "00:00:00:48".into(),
            mlid: 0xc000,
            counters: Counters {
                tx_packets: 3,
                ..Counters::default()
            },
            neighbours: Vec::new(),
        };
        assert_eq!(
            s.to_string(),
            "ib0: mlx4_0 port 1 pkey 0xffff up mlid 0xc000 pid 42\n    link/infiniband \
             00:00:00:48\n    tx 3 rx 0 arp tx/rx 0/0 dropped: port down 0, unresolved 0, not \
             IPv4 0, tx full 0, malformed 0"
        );
    }

    #[test]
    fn a_pid_that_cannot_be_a_process_is_not_alive() {
        assert!(!alive(u32::MAX));
        assert!(alive(std::process::id()));
    }
}
