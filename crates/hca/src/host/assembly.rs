//! Building a daemon: hosts and switches from specs or from a topology, their cables bound,
//! their control sockets listening.
//!
//! A topology gives every link a rate (ibsim's 4X SDR when the file names none); each end
//! trains to it: a switch port to the rate of the link on that port, a CA's ports to the rate
//! of its first link (`Identity::rate`).

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant as StdInstant;

use softib_fabric::{LinkRate, Node, Switch, Topology};
use softib_net::cable::Cable;
use softib_net::UdpLink;

use super::admission::Admission;
use super::event_loop::Daemon;
use super::host_rt::{Host, HostRt};
use super::switch_rt::SwitchRt;
use super::SOCKET_NAME;
use crate::device::{Device, IbDev, RoceDev};
use crate::ib::{IbCa, Identity};
use crate::shm_memory::ShmMemory;

/// One end of a cable: which port, this end's address, the peer's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CableSpec {
    /// The port it is plugged into.
    pub port: u8,
    /// This end's UDP address.
    pub local: SocketAddr,
    /// The other end's UDP address.
    pub peer: SocketAddr,
}

/// A simulated host: one HCA and the directory of its control socket.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Host name (`test213`).
    pub name: String,
    /// Runtime directory; the control socket is `dir/softibd.sock`.
    pub dir: PathBuf,
    /// The HCA (its `rate` is what every port trains to).
    pub identity: Identity,
    /// Its cables.
    pub cables: Vec<CableSpec>,
    /// Seed of the engine's random choices (QPNs, keys).
    pub seed: u64,
}

/// A soft switch.
#[derive(Debug, Clone)]
pub struct SwitchSpec {
    /// The switch as the topology describes it.
    pub node: Node,
    /// Its cables.
    pub cables: Vec<CableSpec>,
    /// The rate each port's link trains to; a port not named trains to 4X QDR.
    pub rates: BTreeMap<u8, LinkRate>,
}

/// Which nodes of a topology a daemon runs, and how cable ends find each other.
#[derive(Debug, Clone)]
pub enum CablePlan {
    /// Every node, in this process; cable ends on ephemeral UDP ports.
    AllHere,
    /// Only `nodes` (their ids); every cable end of the topology on UDP port `port_base` plus
    /// its index in the file's link order (`a` end, then `b` end), so processes that run other
    /// parts of the same topology with the same base reach each other.
    Fixed {
        /// The node ids run here.
        nodes: BTreeSet<String>,
        /// The first UDP port.
        port_base: u16,
    },
}

/// Where `softib fabric up` puts the hosts of a topology: `dir/hosts/<node id>`.
pub fn host_dir(dir: &Path, id: &str) -> PathBuf {
    dir.join("hosts").join(id)
}

/// A node's cables before they are cables: (port, bound socket, peer address).
type BoundLinks = Vec<(u8, UdpLink, SocketAddr)>;

impl Daemon {
    /// Builds every node, binds every cable and control socket.
    pub fn new(hosts: Vec<HostSpec>, switches: Vec<SwitchSpec>) -> io::Result<Daemon> {
        let hosts = hosts
            .into_iter()
            .map(|h| {
                let links = bind_cables(&h.cables)?;
                Ok((h, links))
            })
            .collect::<io::Result<Vec<_>>>()?;
        let switches = switches
            .into_iter()
            .map(|s| {
                let links = bind_cables(&s.cables)?;
                Ok((s, links))
            })
            .collect::<io::Result<Vec<_>>>()?;
        Daemon::build(hosts, switches)
    }

    /// Every node of `topology` in this process: CAs as hosts under `dir/hosts/<id>`, switches,
    /// and every link a cable between two UDP sockets on `ip` (ports chosen by the kernel).
    pub fn from_topology(
        topology: &Topology,
        dir: &Path,
        ip: std::net::IpAddr,
        seed: u64,
    ) -> io::Result<Daemon> {
        Daemon::from_topology_part(topology, dir, ip, seed, &CablePlan::AllHere)
    }

    /// Like [`Daemon::from_topology`], for the nodes `plan` says run here. With
    /// [`CablePlan::Fixed`], every cable end of the topology has a known UDP port (the base
    /// plus its place in the file's link order), so that the other nodes can run in other
    /// processes — `softib switch` runs one switch so — and still find each other.
    pub fn from_topology_part(
        topology: &Topology,
        dir: &Path,
        ip: std::net::IpAddr,
        seed: u64,
        plan: &CablePlan,
    ) -> io::Result<Daemon> {
        let here = |node: usize| match plan {
            CablePlan::AllHere => true,
            CablePlan::Fixed { nodes, .. } => topology
                .nodes()
                .get(node)
                .is_some_and(|n| nodes.contains(&n.id)),
        };
        // Each end's address: bound now (ephemeral) when all run here, else fixed.
        let mut ends: BTreeMap<(usize, u8), UdpLink> = BTreeMap::new();
        let mut addr_of: BTreeMap<(usize, u8), SocketAddr> = BTreeMap::new();
        let mut k = 0u32;
        for l in topology.links() {
            for e in [l.a, l.b] {
                let fixed = match plan {
                    CablePlan::AllHere => None,
                    CablePlan::Fixed { port_base, .. } => {
                        let port = u16::try_from(u32::from(*port_base) + k).map_err(|_| {
                            io::Error::new(
                                io::ErrorKind::InvalidInput,
                                format!(
                                    "UDP port base {port_base} leaves no room for the \
                                     topology's {} cable ends",
                                    2 * topology.link_count()
                                ),
                            )
                        })?;
                        Some(SocketAddr::new(ip, port))
                    }
                };
                k += 1;
                if here(e.node) {
                    let link = UdpLink::bind(fixed.unwrap_or(SocketAddr::new(ip, 0)))?;
                    addr_of.insert((e.node, e.port), link.local_addr());
                    ends.insert((e.node, e.port), link);
                } else if let Some(a) = fixed {
                    addr_of.insert((e.node, e.port), a);
                }
            }
        }
        let mut links_of = |node: usize| -> BoundLinks {
            let mut v = Vec::new();
            for l in topology.links() {
                for (me, peer) in [(l.a, l.b), (l.b, l.a)] {
                    if me.node != node {
                        continue;
                    }
                    if let (Some(link), Some(&paddr)) = (
                        ends.remove(&(me.node, me.port)),
                        addr_of.get(&(peer.node, peer.port)),
                    ) {
                        v.push((me.port, link, paddr));
                    }
                }
            }
            v
        };
        let mut hosts = Vec::new();
        let mut switches = Vec::new();
        for (i, node) in topology.nodes().iter().enumerate() {
            if !here(i) {
                continue;
            }
            let links = links_of(i);
            if node.is_switch() {
                switches.push((
                    SwitchSpec {
                        node: node.clone(),
                        cables: Vec::new(),
                        rates: port_rates(topology, i),
                    },
                    links,
                ));
            } else {
                let rate = topology
                    .links()
                    .find(|l| l.a.node == i || l.b.node == i)
                    .map(|l| l.rate);
                hosts.push((
                    HostSpec {
                        name: node.id.clone(),
                        dir: host_dir(dir, &node.id),
                        identity: Identity::from_node(node, rate),
                        cables: Vec::new(),
                        seed: seed ^ node.node_guid.0,
                    },
                    links,
                ));
            }
        }
        Daemon::build(hosts, switches)
    }

    /// The daemon of a real host: no IB fabric, RoCE devices from `dir/links.json` (what
    /// earlier `softib link add` commands configured). A device that cannot come back (its
    /// interface or address is gone) is reported and left out, not fatal.
    pub fn single_host(name: &str, dir: &Path, seed: u64) -> io::Result<(Daemon, Vec<String>)> {
        let mut d = Daemon::build(Vec::new(), Vec::new())?;
        let listener = bind_listener(dir)?;
        let links_file = dir.join("links.json");
        let mut warnings = Vec::new();
        let mut devs = Vec::new();
        if let Ok(text) = std::fs::read_to_string(&links_file) {
            match serde_json::from_str::<Vec<softib_proto::LinkConfig>>(&text) {
                Ok(links) => {
                    for (i, l) in links.into_iter().enumerate() {
                        let name = l.name.clone();
                        match RoceDev::new(l, seed ^ i as u64) {
                            Ok(r) => devs.push(Device::Roce(Box::new(r))),
                            Err(e) => warnings.push(format!("link {name} not restored: {e}")),
                        }
                    }
                }
                Err(e) => warnings.push(format!(
                    "{} is not readable ({e}); starting without links",
                    links_file.display()
                )),
            }
        }
        let host = Host::new(name.to_string(), devs, Some(links_file), seed);
        d.hosts.push(HostRt::new(host, dir.to_path_buf(), listener));
        Ok((d, warnings))
    }

    /// Admits the users and groups of `admission` to every host's verbs (management stays
    /// with the owner and root), and opens the control socket and its directory to them:
    /// the socket to everyone (who is served is decided by the credentials the kernel gives,
    /// see [`Admission`]), the directory to be entered and read (the heartbeat and the
    /// device files live there).
    pub fn set_admission(&mut self, admission: Admission) -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for h in &mut self.hosts {
            if admission.admits_others() {
                let chmod = |path: &Path, mode: u32| {
                    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(
                        |e| {
                            io::Error::new(
                                e.kind(),
                                format!(
                                    "opening {} to the admitted users (mode {mode:o}): {e}",
                                    path.display()
                                ),
                            )
                        },
                    )
                };
                chmod(&h.dir, 0o755)?;
                chmod(&h.dir.join(SOCKET_NAME), 0o777)?;
            }
            h.host.admission = admission.clone();
        }
        Ok(())
    }

    fn build(
        hosts: Vec<(HostSpec, BoundLinks)>,
        switches: Vec<(SwitchSpec, BoundLinks)>,
    ) -> io::Result<Daemon> {
        let now = StdInstant::now();
        let mut hrt = Vec::new();
        for (h, links) in hosts {
            std::fs::create_dir_all(&h.dir).map_err(|e| {
                io::Error::new(e.kind(), format!("creating {}: {e}", h.dir.display()))
            })?;
            let listener = bind_listener(&h.dir)?;
            let cables = make_cables(links, h.identity.num_ports, now)?;
            let dev = ib_device(h.identity, h.seed, cables);
            let host = Host::new(h.name, vec![dev], None, h.seed);
            hrt.push(HostRt::new(host, h.dir, listener));
        }
        let mut srt = Vec::new();
        for (s, links) in switches {
            let sw = Switch::from_node(&s.node).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("node {} is not a switch", s.node.id),
                )
            })?;
            let cables = make_cables(links, s.node.num_ports, now)?;
            srt.push(SwitchRt::new(sw, cables, &s.rates));
        }
        let mut sb = crate::switchboard::Switchboard::default();
        use crate::switchboard::Owner;
        for (i, h) in hrt.iter().enumerate() {
            for d in &h.host.devs {
                if let Device::Ib(ib) = d {
                    for c in ib.cables.iter().flatten() {
                        sb.register(c.local_addr(), Owner::Host(i));
                    }
                }
            }
        }
        for (i, s) in srt.iter().enumerate() {
            for c in s.cables.iter().flatten() {
                sb.register(c.local_addr(), Owner::Switch(i));
            }
        }
        Ok(Daemon {
            hosts: hrt,
            switches: srt,
            sb,
            origin: now,
            // Room for any packet the engines build: an in-process QP's are up to 60 KiB.
            buf: vec![0u8; (softib_engine::IN_PROCESS_MAX_LEN + 64).max(16 * 1024)],
            wake: Arc::new(rustix::event::eventfd(
                0,
                rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
            )?),
            slots: Vec::new(),
            ready: Vec::new(),
            polled_all: now,
        })
    }
}

/// An HCA on IB ports with `cables` (indexed by port; `None` where nothing is plugged in).
pub(super) fn ib_device(identity: Identity, seed: u64, cables: Vec<Option<Cable>>) -> Device {
    Device::Ib(Box::new(IbDev {
        ca: IbCa::new(identity, seed, ShmMemory::new()),
        ready: vec![true; cables.len()],
        faults: (0..cables.len()).map(|_| Default::default()).collect(),
        capture: None,
        pma: Default::default(),
        cables,
    }))
}

/// The rate of the link on each port of node `node` of `topology`.
fn port_rates(topology: &Topology, node: usize) -> BTreeMap<u8, LinkRate> {
    topology
        .links()
        .flat_map(|l| [(l.a, l.rate), (l.b, l.rate)])
        .filter(|(end, _)| end.node == node)
        .map(|(end, rate)| (end.port, rate))
        .collect()
}

fn bind_cables(specs: &[CableSpec]) -> io::Result<BoundLinks> {
    specs
        .iter()
        .map(|c| {
            let link = UdpLink::bind(c.local).map_err(|e| {
                io::Error::new(e.kind(), format!("binding cable end {}: {e}", c.local))
            })?;
            Ok((c.port, link, c.peer))
        })
        .collect()
}

fn make_cables(
    links: BoundLinks,
    num_ports: u8,
    now: StdInstant,
) -> io::Result<Vec<Option<Cable>>> {
    let mut cables: Vec<Option<Cable>> = (0..=num_ports).map(|_| None).collect();
    for (port, link, peer) in links {
        let slot = cables
            .get_mut(usize::from(port))
            .filter(|_| port != 0)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("cable on port {port} of a node with {num_ports} ports"),
                )
            })?;
        *slot = Some(Cable::new(link, peer, now));
    }
    Ok(cables)
}

/// Binds the control socket in `dir`, refusing when a live daemon serves it already and
/// reusing the name when a dead one left it behind.
fn bind_listener(dir: &Path) -> io::Result<UnixListener> {
    std::fs::create_dir_all(dir)
        .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", dir.display())))?;
    let sock = dir.join(SOCKET_NAME);
    if sock.exists() {
        if UnixStream::connect(&sock).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "a daemon already serves {} (stop it first, e.g. `softib fabric down`)",
                    sock.display()
                ),
            ));
        }
        let _ = std::fs::remove_file(&sock);
    }
    let listener = UnixListener::bind(&sock)
        .map_err(|e| io::Error::new(e.kind(), format!("binding {}: {e}", sock.display())))?;
    // Only this user (and root) may talk to the HCA: its clients can reach registered memory.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o700));
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATES: &str = include_str!("../../../../topologies/rates.net");

    #[test]
    fn each_switch_port_takes_the_rate_of_its_own_link() {
        let t = Topology::parse(RATES).expect("topology parses");
        let sw = t
            .nodes()
            .iter()
            .position(Node::is_switch)
            .expect("a switch");
        let rates = port_rates(&t, sw);
        assert_eq!(
            rates.get(&1).map(ToString::to_string).as_deref(),
            Some("4xEDR")
        );
        assert_eq!(
            rates.get(&2).map(ToString::to_string).as_deref(),
            Some("1xSDR")
        );
        // Port 3 has no link, so no rate of its own.
        assert_eq!(rates.get(&3), None);
    }
}
