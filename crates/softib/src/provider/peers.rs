//! Rings to other processes' engines on the same daemon (intra-host; decision 5 of
//! docs/dev/process-datapath.md): the daemon gives two engines a pair of `PacketRing`s when
//! an RC QP of one gets a path to a QP of the other (`RingTo`, `Event::Ring`), and from then
//! on their packets travel through shared memory instead of the kernel — whole, unsealed, in
//! in-process segments (up to `softib_engine::IN_PROCESS_SEGMENT` bytes of payload each).
//!
//! A record is what a datagram would be: the sender's address
//! ([`softib_proto::HAND_ON_ADDR_LEN`] bytes) and the UDP payload. Packets for a peer whose
//! ring is full wait in a bounded backlog, tried again every turn; beyond it they are lost,
//! as on a congested wire, and RC retransmits them. After a turn that wrote to a peer, the
//! peer's doorbell is written once, unless the peer said it is polling.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;

use softib_engine::QPN_BLOCK;
use softib_net::ring::PacketRing;
use softib_wire::Qpn;

/// The most bytes waiting for one peer's full ring.
const MAX_BACKLOG_BYTES: usize = 8 << 20;

/// The most records taken from one peer in one turn, so that a busy peer cannot keep a
/// poller inside forever.
const MAX_RECORDS_PER_TURN: usize = 256;

/// One peer engine.
#[derive(Debug)]
struct Peer {
    reads: PacketRing,
    writes: PacketRing,
    /// The peer's doorbell.
    bell: OwnedFd,
    backlog: VecDeque<Vec<u8>>,
    backlog_bytes: usize,
    /// Written to since its doorbell was last considered.
    wrote: bool,
}

/// The rings of one engine to its peers, and which destinations they reach.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    by_id: BTreeMap<u64, Peer>,
    /// (the peer device's address, the first QPN of a block) → the pair that reaches it.
    routes: HashMap<(IpAddr, u32), u64>,
    /// Packets put into peers' rings (or their backlogs), and taken from them.
    pub sent: u64,
    pub received: u64,
    /// Packets lost for a full backlog, or for a peer that is gone.
    pub lost: u64,
    /// Rings a peer broke (impossible indices): the pair is dropped.
    pub broken: u64,
}

fn block(qpn: Qpn) -> u32 {
    qpn.value() & !(QPN_BLOCK - 1)
}

impl Peers {
    /// Adds pair `id` from its three descriptors (the ring this engine reads, the ring it
    /// writes, the peer's doorbell) and routes `blocks` at `peer` through it.
    pub fn add(
        &mut self,
        id: u64,
        peer: SocketAddr,
        blocks: &[u32],
        [reads, writes, bell]: [OwnedFd; 3],
    ) -> std::io::Result<()> {
        let bytes = softib_proto::PEER_RING_BYTES;
        let p = Peer {
            reads: PacketRing::from_fd(reads, bytes)?,
            writes: PacketRing::from_fd(writes, bytes)?,
            bell,
            backlog: VecDeque::new(),
            backlog_bytes: 0,
            wrote: false,
        };
        self.by_id.insert(id, p);
        self.route(id, peer, blocks);
        Ok(())
    }

    /// How many peers there are.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether pair `id` is known.
    pub fn has(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Routes `blocks` at `peer` through pair `id`.
    pub fn route(&mut self, id: u64, peer: SocketAddr, blocks: &[u32]) {
        for &b in blocks {
            self.routes.insert((peer.ip(), b), id);
        }
    }

    /// Whether QP `qpn` at `peer` is reached through a ring.
    pub fn reaches(&self, peer: IpAddr, qpn: Qpn) -> bool {
        self.routes
            .get(&(peer, block(qpn)))
            .is_some_and(|id| self.by_id.contains_key(id))
    }

    /// Pair `id`'s other end is gone: its rings are dropped (what was in them with them).
    pub fn gone(&mut self, id: u64) {
        self.by_id.remove(&id);
        self.routes.retain(|_, p| *p != id);
    }

    /// Puts a datagram for QP `dqpn` at `to`, from `from`, into its peer's ring (or the
    /// backlog behind it); false when it has no ring (lost, counted).
    pub fn send(&mut self, to: IpAddr, dqpn: Qpn, from: SocketAddr, bytes: &[u8]) -> bool {
        let Some(p) = self
            .routes
            .get(&(to, block(dqpn)))
            .and_then(|id| self.by_id.get_mut(id))
        else {
            self.lost += 1;
            return false;
        };
        let addr = softib_proto::hand_on_addr(from);
        if p.backlog.is_empty() {
            match p.writes.push(0, &[&addr, bytes]) {
                Ok(true) => {
                    p.wrote = true;
                    self.sent += 1;
                    return true;
                }
                Ok(false) => {}
                Err(_) => {
                    self.lost += 1;
                    return false;
                }
            }
        }
        if p.backlog_bytes + bytes.len() > MAX_BACKLOG_BYTES {
            self.lost += 1;
            return false;
        }
        let mut record = Vec::with_capacity(addr.len() + bytes.len());
        record.extend_from_slice(&addr);
        record.extend_from_slice(bytes);
        p.backlog_bytes += record.len();
        p.backlog.push_back(record);
        self.sent += 1;
        true
    }

    /// Moves what waits in the backlogs into the rings as far as they take it, and writes
    /// the doorbell of every peer written to that is not polling. Returns whether anything
    /// still waits (the caller turns again soon).
    pub fn flush(&mut self) -> bool {
        let mut waiting = false;
        let mut broken = Vec::new();
        for (&id, p) in &mut self.by_id {
            while let Some(r) = p.backlog.front() {
                match p.writes.push(0, &[r]) {
                    Ok(true) => {
                        p.backlog_bytes -= r.len();
                        p.backlog.pop_front();
                        p.wrote = true;
                    }
                    Ok(false) => break,
                    Err(_) => {
                        broken.push(id);
                        break;
                    }
                }
            }
            waiting |= !p.backlog.is_empty();
            if std::mem::take(&mut p.wrote) && p.writes.wants_wakeup().unwrap_or(true) {
                let _ = rustix::io::write(&p.bell, &1u64.to_ne_bytes());
            }
        }
        for id in broken {
            self.broken += 1;
            self.gone(id);
        }
        waiting
    }

    /// Hands every record waiting in the rings (up to a bound per peer) to `take` as the
    /// sender's address and the datagram; returns whether there were any.
    pub fn receive(&mut self, mut take: impl FnMut(SocketAddr, &[u8])) -> bool {
        let mut got = false;
        let mut broken = Vec::new();
        for (&id, p) in &self.by_id {
            for _ in 0..MAX_RECORDS_PER_TURN {
                let r = p.reads.pop_with(|_, record| {
                    softib_proto::parse_hand_on(record).map(|(from, data)| take(from, data))
                });
                match r {
                    Ok(Some(Some(()))) => {
                        got = true;
                        self.received += 1;
                    }
                    Ok(None) => break,
                    Ok(Some(None)) | Err(_) => {
                        broken.push(id);
                        break;
                    }
                }
            }
        }
        for id in broken {
            self.broken += 1;
            self.gone(id);
        }
        got
    }

    /// Tells every peer whether this engine is polling its rings (then they need not write
    /// its doorbell); returns whether any of them holds a record.
    pub fn set_polling(&self, polling: bool) -> bool {
        let mut waiting = false;
        for p in self.by_id.values() {
            let _ = p.reads.set_polling(polling);
            waiting |= !p.reads.is_empty().unwrap_or(true);
        }
        waiting
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pair() -> (Peers, Peers) {
        let bytes = softib_proto::PEER_RING_BYTES;
        let to_a = PacketRing::create("t", bytes).unwrap();
        let to_b = PacketRing::create("t", bytes).unwrap();
        let bell = |_| -> OwnedFd {
            rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).unwrap()
        };
        let fd = |r: &PacketRing| r.fd().try_clone_to_owned().unwrap();
        let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        );
        let mut a = Peers::default();
        let mut b = Peers::default();
        a.add(7, b_addr, &[64], [fd(&to_a), fd(&to_b), bell(0)])
            .unwrap();
        b.add(7, a_addr, &[128], [fd(&to_b), fd(&to_a), bell(1)])
            .unwrap();
        (a, b)
    }

    #[test]
    fn a_datagram_reaches_the_peer_with_its_sender() {
        let (mut a, mut b) = pair();
        let to: IpAddr = "127.0.0.3".parse().unwrap();
        let from: SocketAddr = "127.0.0.2:50000".parse().unwrap();
        assert!(a.reaches(to, Qpn::new(70)));
        assert!(!a.reaches(to, Qpn::new(140)));
        assert!(a.send(to, Qpn::new(70), from, b"hello"));
        assert!(!a.flush());
        let mut seen = Vec::new();
        assert!(b.receive(|f, d| seen.push((f, d.to_vec()))));
        assert_eq!(seen, vec![(from, b"hello".to_vec())]);
        assert!(!b.receive(|_, _| panic!("one record only")));
    }

    #[test]
    fn a_full_ring_holds_packets_back_in_order_and_a_gone_peer_loses_them() {
        let (mut a, mut b) = pair();
        let to: IpAddr = "127.0.0.3".parse().unwrap();
        let from: SocketAddr = "127.0.0.2:50000".parse().unwrap();
        let big = vec![0u8; 60 * 1024];
        // More than the ring holds: the rest waits in the backlog.
        let n = softib_proto::PEER_RING_BYTES / big.len() + 8;
        for i in 0..n {
            let mut d = big.clone();
            d[0] = i as u8;
            assert!(a.send(to, Qpn::new(64), from, &d));
        }
        assert!(a.flush(), "some wait for room");
        let mut order = Vec::new();
        for _ in 0..1000 {
            if order.len() == n {
                break;
            }
            b.receive(|_, d| order.push(d[0]));
            a.flush();
        }
        assert_eq!(order, (0..n).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(a.lost, 0);
        a.gone(7);
        assert!(!a.send(to, Qpn::new(64), from, b"x"));
        assert_eq!(a.lost, 1);
    }
}
