//! The `world` module deals with *the HCAs and the clock*: 1–4 soft HCAs (`Hca<VecMemory>`),
//! each a RoCEv2 device (`softib_link::RoceCa`) with one port (HCA `i` has the address
//! `10.0.0.i+1` or `fd00::i+1` and LID `i + 1`), one protection domain, a send and a receive
//! CQ, and one large memory region of seeded random bytes of which the workload registers
//! sub-ranges; and the discrete-event step that moves datagrams between them through [`Net`].
//!
//! Time is virtual: the driver jumps to the earlier of the next packet arrival and the
//! earliest `poll_timeout` of any HCA (or the next workload action), delivers what has arrived,
//! fires what is due, and lets every HCA transmit until it has nothing left — the same loop as
//! the engine's two-HCA bench, generalised to a network. Each HCA's datagrams go through the
//! same code as the daemon's: `RoceCa` frames and seals them, a `TxQueue` groups them in GSO
//! runs (when the swarm says so), and the receiving `RoceCa` checks every ICRC.

use std::collections::VecDeque;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

use softib_engine::verbs::{AsyncEvent, WorkCompletion};
use softib_engine::{
    CqHandle, Hca, HcaConfig, Instant, PdHandle, RegionId, VecMemory, IN_PROCESS_MAX_LEN,
};
use softib_link::framing::{self, ROCE_V2_PORT};
use softib_link::{Incoming, RoceCa, RoceConfig, Senders, SrcKey};
use softib_net::batch::Loopback;
use softib_net::TxQueue;
use softib_wire::crc::ICRC_LEN;
use softib_wire::{Gid, Lid};

use crate::net::{Label, Net};
use crate::oracle::Oracle;
use crate::rng::SimRng;
use crate::swarm::{Config, START};

/// The embedder's id of each HCA's one memory region.
pub const REGION: RegionId = RegionId(1);

/// The virtual address where each HCA's memory region starts.
pub const BASE: u64 = 0x4000_0000;

/// CQ depth: deep enough that polling after every step never lets one overflow.
const CQ_DEPTH: u32 = 16_384;

/// The room each datagram is built in: the largest in-process packet and its ICRC.
const ROOM: usize = IN_PROCESS_MAX_LEN + ICRC_LEN;

/// BTH byte 4 (FECN, BECN, reserved), the one byte of a datagram the ICRC does not cover.
const MASKED_BYTE: u64 = 4;

/// The short log of a run: one line per QP state transition or notable event, kept in memory
/// and printed when the run fails. Long logs keep their beginning and their end.
#[derive(Debug, Default, Clone)]
pub struct Log {
    head: Vec<String>,
    tail: VecDeque<String>,
    omitted: usize,
    keep_all: bool,
}

impl Log {
    const HEAD: usize = 300;
    const TAIL: usize = 1500;

    /// Keeps every line from now on (for packet traces).
    pub fn keep_all(&mut self) {
        self.keep_all = true;
    }

    /// Adds a line stamped with virtual time `now`.
    pub fn push(&mut self, now: Instant, line: impl fmt::Display) {
        self.push_raw(format!("{now} {line}"));
    }

    /// Adds a line as it is.
    pub fn push_raw(&mut self, line: String) {
        if self.head.len() < Self::HEAD {
            self.head.push(line);
            return;
        }
        if self.tail.len() >= Self::TAIL && !self.keep_all {
            self.tail.pop_front();
            self.omitted += 1;
        }
        self.tail.push_back(line);
    }

    /// The lines, with a marker where some were left out.
    pub fn lines(&self) -> Vec<String> {
        let mut v = self.head.clone();
        if self.omitted > 0 {
            v.push(format!("... {} lines omitted ...", self.omitted));
        }
        v.extend(self.tail.iter().cloned());
        v
    }
}

/// One HCA and what the world set up for it.
pub struct Node {
    /// The engine on its RoCEv2 link.
    pub ca: RoceCa<VecMemory>,
    /// Its RoCEv2 address (and UDP port).
    pub addr: SocketAddr,
    /// Its port's LID (IB addressing, which the RoCE link does not use).
    pub lid: Lid,
    /// Its protection domain.
    pub pd: PdHandle,
    /// Where send completions go.
    pub send_cq: CqHandle,
    /// Where receive completions go.
    pub recv_cq: CqHandle,
    /// The memory region as it was before anything ran (the model's starting point).
    pub initial: Vec<u8>,
    /// Its datagrams of this step, in GSO runs.
    tx: TxQueue<SrcKey>,
}

impl Node {
    /// The engine.
    pub fn hca(&self) -> &Hca<VecMemory> {
        self.ca.hca()
    }

    /// The engine, for every verb but `modify_qp` (which goes through [`Node::ca`]).
    pub fn hca_mut(&mut self) -> &mut Hca<VecMemory> {
        self.ca.hca_mut()
    }

    /// Its port's GID (the IPv4-mapped or IPv6 address).
    pub fn gid(&self) -> Gid {
        framing::gid_of(self.addr.ip())
    }

    /// The region's current bytes.
    pub fn memory(&self) -> &[u8] {
        self.hca().memory().bytes(REGION).unwrap_or(&[])
    }
}

/// The address of HCA `i`.
fn address(i: usize, ipv6: bool) -> SocketAddr {
    let n = i as u8 + 1;
    let ip = if ipv6 {
        IpAddr::from([0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)])
    } else {
        IpAddr::from([10, 0, 0, n])
    };
    SocketAddr::new(ip, ROCE_V2_PORT)
}

/// The HCAs, the network and the clock.
pub struct World {
    /// Virtual time.
    pub now: Instant,
    /// The HCAs; node `i` has LID `i + 1`.
    pub nodes: Vec<Node>,
    /// The network.
    pub net: Net,
    /// The short log.
    pub log: Log,
    /// Whether every packet goes into the log.
    pub trace: bool,
    /// Whether datagrams leave in GSO runs.
    gso: bool,
    /// The room local datagrams are built in.
    local_room: Vec<u8>,
}

impl World {
    /// Builds `cfg.hcas` HCAs with `mem_len[i]` bytes of memory each.
    pub(crate) fn new(
        cfg: &Config,
        mem_len: &[usize],
        mut rng: SimRng,
        net: Net,
        log: Log,
    ) -> Result<World, String> {
        let mut nodes = Vec::with_capacity(cfg.hcas);
        let addrs: Vec<SocketAddr> = (0..cfg.hcas).map(|i| address(i, cfg.ipv6)).collect();
        for (i, &len) in mem_len.iter().enumerate().take(cfg.hcas) {
            let mut hc = HcaConfig::with_seed(rng.u64());
            let lid = Lid(i as u16 + 1);
            let addr = addrs[i];
            hc.ports[0].lid = lid;
            hc.ports[0].active_mtu = cfg.mtu;
            hc.ports[0].gids = vec![framing::gid_of(addr.ip())];
            let mut mem = VecMemory::new();
            mem.add(REGION, BASE, len);
            let bytes = mem
                .bytes_mut(REGION)
                .ok_or("sim: the region just added is missing")?;
            rng.fill(bytes);
            let initial = bytes.clone();
            let mut hca = Hca::new(hc, mem);
            let err = |e| format!("sim: setting up hca{}: {e}", i + 1);
            let pd = hca.alloc_pd().map_err(err)?;
            let send_cq = hca.create_cq(CQ_DEPTH).map_err(err)?;
            let recv_cq = hca.create_cq(CQ_DEPTH).map_err(err)?;
            // Every sender is softib and every index arrives as sent: each ICRC is checked for
            // exactly the Identification its datagram carries.
            let mut ca = RoceCa::new(
                hca,
                RoceConfig {
                    senders: Senders::Softib,
                    ..RoceConfig::new(addr)
                },
            );
            // In-process: every HCA is a device of one daemon, as the daemon's RoCE devices
            // are, and decides so for each RC QP when it reaches RTR. Something (the faults)
            // stands between, so every datagram is sealed and its payload carried whole.
            if cfg.in_process {
                ca.set_local_peers(addrs.iter().copied());
            }
            nodes.push(Node {
                ca,
                addr,
                lid,
                pd,
                send_cq,
                recv_cq,
                initial,
                tx: TxQueue::with_hash_seed(cfg.seed),
            });
        }
        Ok(World {
            now: START,
            nodes,
            net,
            log,
            trace: false,
            gso: cfg.gso,
            local_room: vec![0; ROOM],
        })
    }

    /// The node at RoCEv2 address `addr`.
    pub fn node_at(&self, addr: SocketAddr) -> Option<usize> {
        self.nodes.iter().position(|n| n.addr == addr)
    }

    /// Lets every HCA transmit until it has nothing left; every packet is shown to the oracle
    /// (a QP in ERR sends nothing) and routed by its destination address.
    pub(crate) fn transmit(&mut self, oracle: &mut Oracle) -> Result<(), String> {
        let now = self.now;
        let addrs: Vec<SocketAddr> = self.nodes.iter().map(|n| n.addr).collect();
        for i in 0..self.nodes.len() {
            let node = &mut self.nodes[i];
            while let Some(t) =
                node.ca
                    .poll_transmit(now, node.tx.space(ROOM), &mut self.local_room)
            {
                let room: &mut [u8] = if t.local {
                    &mut self.local_room
                } else {
                    node.tx.space(ROOM)
                };
                let state = node.ca.hca().qp(t.packet.src_qpn).map(|q| q.state);
                oracle.on_transmit(i, t.packet.src_qpn, state, &room[..t.packet.len])?;
                if !addrs.contains(&t.to) {
                    return Err(format!(
                        "hca{} QP {} sent a packet to {}, which no HCA has",
                        i + 1,
                        t.packet.src_qpn,
                        t.to
                    ));
                }
                let sealed = if t.local {
                    // For a device of the same daemon, through the faults: sealed alone, then
                    // queued, as the daemon does when a fault or a capture is on.
                    let sealed = node.ca.seal(&t, room);
                    if sealed {
                        let frame = &self.local_room[..t.datagram_len()];
                        node.ca.queue(&mut node.tx, t.key(), t.to, frame, self.gso);
                    }
                    sealed
                } else {
                    node.ca.commit(&mut node.tx, &t, self.gso).is_some()
                };
                if !sealed {
                    return Err(format!(
                        "hca{} QP {}: a datagram to {} could not be sealed",
                        i + 1,
                        t.packet.src_qpn,
                        t.to
                    ));
                }
            }
            let mut out = ToNet {
                from: i,
                now,
                addrs: &addrs,
                net: &mut self.net,
                log: &mut self.log,
                trace: self.trace,
            };
            node.tx.flush_or_deliver(|_| None, &mut out);
        }
        Ok(())
    }

    /// Hands every packet that has arrived by now to its HCA's link.
    pub(crate) fn deliver(&mut self) -> Result<(), String> {
        while let Some(d) = self.net.pop_due(self.now) {
            let from = SocketAddr::new(self.nodes[d.from].addr.ip(), d.label.src_port);
            let incoming = Incoming {
                in_process: d.label.in_process,
                ..Incoming::wire(from, d.label.index, &d.bytes)
            };
            if self.trace {
                let what = describe(&d.bytes);
                self.log.push(
                    self.now,
                    format_args!("hca{} <- hca{} {what}", d.to + 1, d.from + 1),
                );
            }
            let got = self.nodes[d.to].ca.handle_datagram(self.now, &incoming);
            match (got, d.flipped.is_empty()) {
                (Ok(()), true) => self.net.stats.delivered += 1,
                (Ok(()), false) => {
                    // Only the byte the ICRC masks may change unseen.
                    if d.flipped.iter().any(|&bit| bit / 8 != MASKED_BYTE) {
                        return Err(format!(
                            "hca{}: a datagram from hca{} corrupted in bits {:?} passed its ICRC",
                            d.to + 1,
                            d.from + 1,
                            d.flipped
                        ));
                    }
                    self.net.stats.delivered += 1;
                }
                (Err(_), false) => self.net.stats.crc_dropped += 1,
                // The engine refused it by its BTH before the ICRC, as it would have after:
                // its drop counters say why (a UD datagram to a QP not receiving, say).
                (Err(softib_link::RoceDrop::Screened), true) => self.net.stats.delivered += 1,
                (Err(reason), true) => {
                    return Err(format!(
                        "hca{}: the link dropped an intact datagram from hca{} ({reason}): {}",
                        d.to + 1,
                        d.from + 1,
                        describe(&d.bytes)
                    ));
                }
            }
        }
        Ok(())
    }

    /// Fires every due timer.
    pub(crate) fn fire_timers(&mut self) {
        for n in &mut self.nodes {
            n.ca.handle_timeout(self.now);
        }
    }

    /// Checks every engine invariant of every HCA (`Hca::check_invariants`): the run calls
    /// it after every step, so a broken one fails the seed where it first shows, naming the
    /// HCA, the QP, the rule and the state.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            n.hca()
                .check_invariants()
                .map_err(|v| format!("hca{}: engine invariant broken: {v}", i + 1))?;
        }
        Ok(())
    }

    /// The earliest packet arrival or HCA timer.
    pub fn next_event(&self) -> Option<Instant> {
        self.nodes
            .iter()
            .filter_map(|n| n.ca.poll_timeout())
            .chain(self.net.next_arrival())
            .min()
    }

    /// Whether any HCA has a timer armed.
    pub fn timers_armed(&self) -> bool {
        self.nodes.iter().any(|n| n.ca.poll_timeout().is_some())
    }

    /// Takes every completion from every CQ: `(node, from the receive CQ, completion)`.
    pub(crate) fn poll_cqs(&mut self, out: &mut Vec<(usize, bool, WorkCompletion)>) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            let (send_cq, recv_cq) = (n.send_cq, n.recv_cq);
            while let Some(wc) = n.hca_mut().poll_cq(send_cq) {
                out.push((i, false, wc));
            }
            while let Some(wc) = n.hca_mut().poll_cq(recv_cq) {
                out.push((i, true, wc));
            }
        }
    }

    /// Takes every asynchronous event: `(node, event)`.
    pub(crate) fn poll_events(&mut self, out: &mut Vec<(usize, AsyncEvent)>) {
        for (i, n) in self.nodes.iter_mut().enumerate() {
            while let Some(e) = n.ca.poll_event() {
                out.push((i, e));
            }
        }
    }
}

/// A node's flushed queue, into the network: every destination is an HCA of the world.
struct ToNet<'a> {
    from: usize,
    now: Instant,
    addrs: &'a [SocketAddr],
    net: &'a mut Net,
    log: &'a mut Log,
    trace: bool,
}

impl Loopback<SrcKey> for ToNet<'_> {
    fn is_local(&self, _: &SocketAddr) -> bool {
        true
    }

    fn deliver(&mut self, key: SrcKey, to: SocketAddr, index: u16, bytes: &[u8]) {
        // `transmit` checked every destination.
        let Some(to) = self.addrs.iter().position(|a| *a == to) else {
            return;
        };
        let label = Label {
            src_port: key.port,
            index,
            in_process: key.in_process,
        };
        let outcome = self.net.send(self.now, self.from, to, label, bytes);
        if self.trace {
            self.log.push(
                self.now,
                format_args!(
                    "hca{} -> hca{} {}: {outcome}",
                    self.from + 1,
                    to + 1,
                    describe(bytes)
                ),
            );
        }
    }
}

/// A datagram in one line, for the packet trace.
fn describe(datagram: &[u8]) -> String {
    let body = &datagram[..datagram.len().saturating_sub(ICRC_LEN)];
    softib_wire::packet::parse_body(body).map_or_else(
        |e| format!("{e:?}"),
        |(t, p)| format!("{t} payload {}", p.len()),
    )
}
