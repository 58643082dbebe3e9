//! Rings to other processes' engines on the same daemon (intra-host; decision 5 of
//! docs/dev/process-datapath.md): the daemon gives two engines a pair of `PacketRing`s when
//! an RC QP of one gets a path to a QP of the other (`RingTo`, `Event::Ring`), and from then
//! on their packets travel through shared memory instead of the kernel — whole, unsealed, in
//! in-process segments (up to `softib_engine::IN_PROCESS_SEGMENT` bytes of payload each).
//!
//! A record is what a datagram would be: the sender's address
//! ([`softib_proto::HAND_ON_ADDR_LEN`] bytes), then the UDP payload — its headers with the
//! ICRC's room, then the packet's payload, written into the ring straight from the memory it
//! lies in (one copy there, one out). The record's tag is the length of the headers and the
//! ICRC's room; a record whose payload is empty is a whole datagram.
//!
//! A large payload goes by reference instead (tag bit [`BY_REFERENCE`], a [`PayloadRef`]):
//! - one that lies in one of the sender's buffers (a memfd, `Context::alloc_buffer`), of
//!   [`BUFFER_REFERENCE_MIN`] bytes or more: the record names the memfd as the sender holds
//!   it (descriptor number and inode) and where the payload lies in it. The receiver takes
//!   the memfd from the sender once (`pidfd_getfd`), maps it, and its engine copies the
//!   payload from that mapping into the target region after its own checks: one copy, as
//!   the daemon makes between its clients' buffers;
//! - one elsewhere in the sender's memory, of [`PROCESS_REFERENCE_MIN`] bytes or more: the
//!   record names its address, and the receiver reads it with `process_vm_readv`
//!   (cross-memory attach, as UCX's `cma`) into a scratch buffer the engine copies from. On
//!   this machine kind that moves 3.3 GB/s, a seventh of `memcpy`, but a large payload
//!   through a 4 MiB ring is slower still (docs/performance.md).
//!
//! The kernel allows both to whoever could ptrace the sender: the same user, as the daemon
//! makes rings only between one user's clients. The sender's payload stays put until the
//! receiver has it: an RC requester keeps it until the acknowledgement, a responder's READ
//! data is the region itself. A receiver the kernel does not let reach the sender says so in
//! the ring ([`PacketRing::refuse_references`]) and drops that packet, which RC retransmits
//! whole, through the ring from then on.
//!
//! Packets for a peer whose ring is full wait in a bounded backlog, tried again every turn;
//! beyond it they are lost, as on a congested wire, and RC retransmits them. After a turn
//! that wrote to a peer, the peer's doorbell is written once, unless the peer said it is
//! polling.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;

use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags};
use softib_engine::hash::FixedState;
use softib_engine::QPN_BLOCK;
use softib_net::procmem::ProcessMemory;
use softib_net::ring::PacketRing;
use softib_net::shm::SharedRegion;
use softib_wire::Qpn;

/// The least payload in a buffer that goes by reference rather than through the ring: a
/// page, below which the copy saved is smaller than the record.
pub(crate) const BUFFER_REFERENCE_MIN: usize = 4096;

/// The least payload elsewhere in the sender's memory that goes by reference.
pub(crate) const PROCESS_REFERENCE_MIN: usize = 16 * 1024;

/// A record's tag bit: its payload is a reference ([`PayloadRef::encode`]).
const BY_REFERENCE: u32 = 1 << 31;

/// A record's tag bit: the record is a whole datagram with its ICRC, for the receiver to
/// check (the sender's link is not clean: faults or a capture, `oversight`).
const SEALED: u32 = 1 << 30;

/// A record's tag bit: the sender's capture has the datagram already.
const CAPTURED: u32 = 1 << 29;

/// The tag's bits that are the headers' length.
const HEAD_LEN: u32 = !(BY_REFERENCE | SEALED | CAPTURED);

/// What a record's tag says besides its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Sealing {
    /// A whole datagram with its ICRC (check it).
    pub sealed: bool,
    /// The sender captured it.
    pub captured: bool,
}

/// The most buffers of one peer kept mapped; beyond it the mappings are dropped and made
/// again as payloads name them.
const MAX_PEER_BUFFERS: usize = 64;

/// Where a payload lies in one of the sender's buffers: the memfd's descriptor number in the
/// sender, its inode (which tells a number used again for another file apart), the offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BufferRef {
    pub fd: u32,
    pub ino: u64,
    pub offset: u64,
}

/// Where a payload lies in the sending process, for its peer to read it from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayloadRef {
    /// In one of its buffers, which the peer maps.
    Buffer(BufferRef),
    /// At this address of its memory, read with cross-memory attach.
    Process(u64),
}

impl PayloadRef {
    const BUFFER: u8 = 1;
    const PROCESS: u8 = 2;

    /// Whether a payload of `len` bytes lying here goes by reference.
    fn worth_it(self, len: usize) -> bool {
        match self {
            PayloadRef::Buffer(_) => len >= BUFFER_REFERENCE_MIN,
            PayloadRef::Process(_) => len >= PROCESS_REFERENCE_MIN,
        }
    }

    /// The record's body: a kind byte, then (little-endian) descriptor `u32`, inode `u64`
    /// and offset `u64` of a buffer, or the address `u64`; then the length `u32`.
    fn encode(self, len: u32) -> ([u8; 25], usize) {
        let mut r = [0u8; 25];
        let fields = match self {
            PayloadRef::Buffer(b) => {
                r[0] = Self::BUFFER;
                r[1..5].copy_from_slice(&b.fd.to_le_bytes());
                r[5..13].copy_from_slice(&b.ino.to_le_bytes());
                r[13..21].copy_from_slice(&b.offset.to_le_bytes());
                20
            }
            PayloadRef::Process(at) => {
                r[0] = Self::PROCESS;
                r[1..9].copy_from_slice(&at.to_le_bytes());
                8
            }
        };
        r[1 + fields..5 + fields].copy_from_slice(&len.to_le_bytes());
        (r, 5 + fields)
    }

    fn decode(b: &[u8]) -> Option<(PayloadRef, usize)> {
        let (&kind, rest) = b.split_first()?;
        let (fields, len) = rest.split_last_chunk::<4>()?;
        let u64_at = |i: usize| Some(u64::from_le_bytes(*fields.get(i..i + 8)?.first_chunk()?));
        let r = match (kind, fields.len()) {
            (Self::BUFFER, 20) => PayloadRef::Buffer(BufferRef {
                fd: u32::from_le_bytes(*fields.first_chunk()?),
                ino: u64_at(4)?,
                offset: u64_at(12)?,
            }),
            (Self::PROCESS, 8) => PayloadRef::Process(u64_at(0)?),
            _ => return None,
        };
        Some((r, u32::from_le_bytes(*len) as usize))
    }
}

/// Why a payload named by reference could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unreadable {
    /// The kernel would not give this process the peer's memfd: take no references.
    Refused,
    /// The reference names no buffer the peer has, or lies outside it.
    Stale,
}

/// The buffers of one peer that this engine has mapped to read payloads named by reference.
#[derive(Debug)]
struct PeerBuffers {
    /// The peer process (a pid used again cannot stand in for it); `None` when the kernel
    /// gave none.
    pidfd: Option<OwnedFd>,
    maps: HashMap<(u32, u64), SharedRegion, FixedState>,
}

impl PeerBuffers {
    fn open(pid: u32) -> PeerBuffers {
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| rustix::process::pidfd_open(p, PidfdFlags::empty()).ok());
        PeerBuffers {
            pidfd,
            maps: HashMap::default(),
        }
    }

    /// The `len` bytes `r` names in the peer's buffer, mapped on first use.
    fn bytes(&mut self, r: BufferRef, len: usize) -> Result<&[u8], Unreadable> {
        let key = (r.fd, r.ino);
        if !self.maps.contains_key(&key) {
            let pidfd = self.pidfd.as_ref().ok_or(Unreadable::Refused)?;
            let fd = i32::try_from(r.fd).map_err(|_| Unreadable::Stale)?;
            let fd =
                rustix::process::pidfd_getfd(pidfd, fd, PidfdGetfdFlags::empty()).map_err(|e| {
                    match e {
                        rustix::io::Errno::PERM | rustix::io::Errno::NOSYS => Unreadable::Refused,
                        _ => Unreadable::Stale,
                    }
                })?;
            let st = rustix::fs::fstat(&fd).map_err(|_| Unreadable::Stale)?;
            let size = usize::try_from(st.st_size).map_err(|_| Unreadable::Stale)?;
            if st.st_ino != r.ino {
                return Err(Unreadable::Stale);
            }
            // Only a memfd sealed against shrinking is mapped: the peer cannot truncate it
            // under the mapping (SIGBUS here).
            let map = SharedRegion::from_fd(fd, size).map_err(|_| Unreadable::Stale)?;
            if self.maps.len() >= MAX_PEER_BUFFERS {
                self.maps.clear();
            }
            self.maps.insert(key, map);
        }
        let map = self.maps.get(&key).ok_or(Unreadable::Stale)?;
        let start = usize::try_from(r.offset).map_err(|_| Unreadable::Stale)?;
        let end = start.checked_add(len).ok_or(Unreadable::Stale)?;
        map.as_slice().get(start..end).ok_or(Unreadable::Stale)
    }
}

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
    /// The peer's buffers and memory, which its records may name.
    buffers: PeerBuffers,
    memory: Option<ProcessMemory>,
    /// Records (tag, bytes) waiting for room in `writes`.
    backlog: VecDeque<(u32, Vec<u8>)>,
    backlog_bytes: usize,
    /// Written to since its doorbell was last considered.
    wrote: bool,
}

/// The rings of one engine to its peers, and which destinations they reach.
#[derive(Debug, Default)]
pub(crate) struct Peers {
    by_id: BTreeMap<u64, Peer>,
    /// (the peer device's address, the first QPN of a block) → the pair that reaches it.
    routes: HashMap<(IpAddr, u32), u64, FixedState>,
    /// Packets put into peers' rings (or their backlogs), and taken from them.
    pub sent: u64,
    pub received: u64,
    /// Packets lost for a full backlog, or for a peer that is gone.
    pub lost: u64,
    /// Doorbells written: turns that put records into a ring whose reader was not looking.
    pub bells: u64,
    /// Rings a peer broke (impossible indices): the pair is dropped.
    pub broken: u64,
    /// Payloads sent by reference, and those read from a peer's buffers or memory.
    pub by_reference: u64,
    pub read_by_reference: u64,
    /// Where a payload read from a peer's memory lands before the engine takes it (reused:
    /// it stays in the cache).
    scratch: Vec<u8>,
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
        peer_pid: u32,
        blocks: &[u32],
        [reads, writes, bell]: [OwnedFd; 3],
    ) -> std::io::Result<()> {
        let bytes = softib_proto::PEER_RING_BYTES;
        let reads = PacketRing::from_fd(reads, bytes)?;
        let buffers = PeerBuffers::open(peer_pid);
        let memory = ProcessMemory::new(peer_pid).ok();
        if buffers.pidfd.is_none() || memory.is_none() {
            let _ = reads.refuse_references();
        }
        let p = Peer {
            reads,
            writes: PacketRing::from_fd(writes, bytes)?,
            bell,
            buffers,
            memory,
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

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
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
    /// backlog behind it): `head`, its headers and the ICRC's room, then `payload_len` bytes
    /// that `fill` writes (false: they cannot be read) — or, when the payload is large and
    /// lies at `at`, a reference to it. False when it is lost
    /// (counted): no ring, a full backlog, a payload that cannot be read.
    pub fn send(
        &mut self,
        to: IpAddr,
        dqpn: Qpn,
        from: SocketAddr,
        head: &[u8],
        payload: (usize, Option<PayloadRef>),
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> bool {
        self.send_tagged(0, to, dqpn, from, head, payload, fill)
    }

    /// Puts a whole sealed datagram `frame` for QP `dqpn` at `to` into its peer's ring, as
    /// [`Peers::send`] does (`captured`: this engine's capture has it).
    pub fn send_sealed(
        &mut self,
        to: IpAddr,
        dqpn: Qpn,
        from: SocketAddr,
        frame: &[u8],
        captured: bool,
    ) -> bool {
        let bits = SEALED | if captured { CAPTURED } else { 0 };
        self.send_tagged(bits, to, dqpn, from, frame, (0, None), |_| true)
    }

    #[allow(clippy::too_many_arguments)]
    fn send_tagged(
        &mut self,
        bits: u32,
        to: IpAddr,
        dqpn: Qpn,
        from: SocketAddr,
        head: &[u8],
        payload: (usize, Option<PayloadRef>),
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> bool {
        let Some(p) = self
            .routes
            .get(&(to, block(dqpn)))
            .and_then(|id| self.by_id.get_mut(id))
        else {
            self.lost += 1;
            return false;
        };
        let addr = softib_proto::hand_on_addr(from);
        let (payload_len, at) = payload;
        let mut tag = head.len() as u32 | bits;
        let reference = match at {
            Some(at) if at.worth_it(payload_len) && p.writes.takes_references() => {
                tag |= BY_REFERENCE;
                Some(at.encode(payload_len as u32))
            }
            _ => None,
        };
        let reference = reference.as_ref().map(|(r, n)| &r[..*n]);
        let payload_len = reference.map_or(payload_len, <[u8]>::len);
        // What follows the headers: the reference, or the payload `fill` writes (once).
        let mut fill = Some(fill);
        let mut body = |into: &mut [u8]| match &reference {
            Some(r) => {
                into.copy_from_slice(r);
                true
            }
            None => fill.take().is_some_and(|f| f(into)),
        };
        if p.backlog.is_empty() {
            // The headers are a whole datagram when the payload travels inside it (inline
            // data, a READ response the engine built whole): copied in place with the rest.
            let pushed = p
                .writes
                .push_with(tag, &addr, head.len() + payload_len, |rest| {
                    let (h, b) = rest.split_at_mut(head.len());
                    h.copy_from_slice(head);
                    body(b)
                });
            match pushed {
                Ok(Some(true)) => {
                    p.wrote = true;
                    self.sent += 1;
                    self.by_reference += u64::from(reference.is_some());
                    return true;
                }
                Ok(None) => {}
                Ok(Some(false)) | Err(_) => {
                    self.lost += 1;
                    return false;
                }
            }
        }
        let len = addr.len() + head.len() + payload_len;
        if p.backlog_bytes + len > MAX_BACKLOG_BYTES {
            self.lost += 1;
            return false;
        }
        let mut record = vec![0u8; len];
        record[..addr.len()].copy_from_slice(&addr);
        record[addr.len()..addr.len() + head.len()].copy_from_slice(head);
        // The ring was full (before `fill` ran), or the backlog was waiting.
        if !body(&mut record[addr.len() + head.len()..]) {
            self.lost += 1;
            return false;
        }
        p.backlog_bytes += record.len();
        p.backlog.push_back((tag, record));
        self.sent += 1;
        self.by_reference += u64::from(reference.is_some());
        true
    }

    /// Moves what waits in the backlogs into the rings as far as they take it, and writes
    /// the doorbell of every peer written to that is not polling. Returns whether anything
    /// still waits (the caller turns again soon).
    pub fn flush(&mut self) -> bool {
        let mut waiting = false;
        let mut broken = Vec::new();
        for (&id, p) in &mut self.by_id {
            while let Some((tag, r)) = p.backlog.front() {
                match p.writes.push(*tag, &[r]) {
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
                self.bells += 1;
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
    /// sender's address, the headers with the ICRC's room, the payload (`None`: the headers
    /// are the whole datagram), and what the tag says of its sealing; returns whether there
    /// were any.
    pub fn receive(
        &mut self,
        mut take: impl FnMut(SocketAddr, &[u8], Option<&[u8]>, Sealing),
    ) -> bool {
        let mut got = false;
        let mut broken = Vec::new();
        let mut read_by_reference = 0;
        let scratch = &mut self.scratch;
        for (&id, p) in &mut self.by_id {
            let Peer {
                reads,
                buffers,
                memory,
                ..
            } = p;
            for _ in 0..MAX_RECORDS_PER_TURN {
                let r = reads.pop_with(|tag, record| {
                    let (from, data) = softib_proto::parse_hand_on(record)?;
                    let (head, payload) = data.split_at_checked((tag & HEAD_LEN) as usize)?;
                    let sealing = Sealing {
                        sealed: tag & SEALED != 0,
                        captured: tag & CAPTURED != 0,
                    };
                    if tag & BY_REFERENCE == 0 {
                        take(
                            from,
                            head,
                            (!payload.is_empty()).then_some(payload),
                            sealing,
                        );
                        return Some(());
                    }
                    let (r, len) = PayloadRef::decode(payload)?;
                    if len > softib_engine::IN_PROCESS_SEGMENT as usize {
                        return None;
                    }
                    let bytes = match r {
                        PayloadRef::Buffer(r) => buffers.bytes(r, len),
                        PayloadRef::Process(at) => {
                            scratch.resize(len, 0);
                            match memory.as_ref().map(|m| m.read(at, scratch)) {
                                Some(Ok(())) => Ok(&scratch[..]),
                                Some(Err(e))
                                    if e.raw_os_error()
                                        == Some(rustix::io::Errno::FAULT.raw_os_error()) =>
                                {
                                    Err(Unreadable::Stale)
                                }
                                _ => Err(Unreadable::Refused),
                            }
                        }
                    };
                    match bytes {
                        Ok(bytes) => {
                            read_by_reference += 1;
                            take(from, head, Some(bytes), sealing);
                        }
                        // Lost, as on a wire: RC sends it again, whole.
                        Err(Unreadable::Refused) => {
                            let _ = reads.refuse_references();
                        }
                        Err(Unreadable::Stale) => {}
                    }
                    Some(())
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
        self.read_by_reference += read_by_reference;
        for id in broken {
            self.broken += 1;
            self.gone(id);
        }
        got
    }

    /// Tells every peer whether this engine is polling its rings (then they need not write
    /// its doorbell). Stopping, returns whether any of them holds a record (one that came
    /// while it looked, for which nobody rang); starting, false without looking — the ring's
    /// producer position is a line the peer writes at every record, a cache miss each time.
    pub fn set_polling(&self, polling: bool) -> bool {
        let mut waiting = false;
        for p in self.by_id.values() {
            let _ = p.reads.set_polling(polling);
            if !polling {
                waiting |= !p.reads.is_empty().unwrap_or(true);
            }
        }
        waiting
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Where A's records go (B's device address), and the UDP source A sends them from.
    const TO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 3));
    const FROM: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
        std::net::Ipv4Addr::new(127, 0, 0, 2),
        50000,
    ));

    fn pair() -> (Peers, Peers) {
        pair_of(std::process::id(), std::process::id())
    }

    /// Two engines' peers joined by a ring pair: A's peer process is `b_pid`, B's `a_pid`.
    fn pair_of(a_pid: u32, b_pid: u32) -> (Peers, Peers) {
        let bytes = softib_proto::PEER_RING_BYTES;
        let to_a = PacketRing::create("t", bytes).unwrap();
        let to_b = PacketRing::create("t", bytes).unwrap();
        let bell = || rustix::event::eventfd(0, rustix::event::EventfdFlags::NONBLOCK).unwrap();
        let fd = |r: &PacketRing| r.fd().try_clone_to_owned().unwrap();
        let (a_addr, b_addr): (SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        );
        let (mut a, mut b) = (Peers::default(), Peers::default());
        a.add(7, b_addr, b_pid, &[64], [fd(&to_a), fd(&to_b), bell()])
            .unwrap();
        b.add(7, a_addr, a_pid, &[128], [fd(&to_b), fd(&to_a), bell()])
            .unwrap();
        (a, b)
    }

    #[test]
    fn a_datagram_reaches_the_peer_with_its_sender() {
        let (mut a, mut b) = pair();
        let (to, from) = (TO, FROM);
        assert!(a.reaches(to, Qpn::new(70)));
        assert!(!a.reaches(to, Qpn::new(140)));
        assert!(a.send(to, Qpn::new(70), from, b"head", (5, None), |b| {
            b.copy_from_slice(b"hello");
            true
        }));
        assert!(a.send(to, Qpn::new(70), from, b"whole", (0, None), |_| true));
        assert!(!a.flush());
        let mut seen = Vec::new();
        assert!(b.receive(|f, h, p, _| seen.push((f, h.to_vec(), p.map(<[u8]>::to_vec)))));
        assert_eq!(
            seen,
            vec![
                (from, b"head".to_vec(), Some(b"hello".to_vec())),
                (from, b"whole".to_vec(), None)
            ]
        );
        assert!(!b.receive(|_, _, _, _| panic!("two records only")));
        // A payload that cannot be read loses the packet.
        assert!(!a.send(to, Qpn::new(70), from, b"head", (5, None), |_| false));
        assert_eq!(a.lost, 1);
    }

    #[test]
    fn a_whole_datagram_of_any_length_goes_through() {
        let (mut a, mut b) = pair();
        let (to, from) = (TO, FROM);
        // Headers with 4 KiB of inline data in them: no payload by reference.
        let whole: Vec<u8> = (0..4096 + 16).map(|i| i as u8).collect();
        assert!(a.send(to, Qpn::new(64), from, &whole, (0, None), |_| true));
        let mut got = Vec::new();
        assert!(b.receive(|_, h, p, _| got.push((h.to_vec(), p.is_none()))));
        assert_eq!(got, vec![(whole, true)]);
        assert_eq!(a.lost, 0);
    }

    #[test]
    fn a_sealed_record_says_so_and_whether_its_sender_captured_it() {
        let (mut a, mut b) = pair();
        let frame: Vec<u8> = (0..100).map(|i| i as u8).collect();
        assert!(a.send_sealed(TO, Qpn::new(64), FROM, &frame, true));
        assert!(a.send_sealed(TO, Qpn::new(64), FROM, &frame, false));
        assert!(a.send(TO, Qpn::new(64), FROM, &frame, (0, None), |_| true));
        let mut got = Vec::new();
        assert!(b.receive(|_, h, p, s| got.push((h.len(), p.is_none(), s))));
        let sealing = |sealed, captured| Sealing { sealed, captured };
        assert_eq!(
            got,
            [
                (100, true, sealing(true, true)),
                (100, true, sealing(true, false)),
                (100, true, sealing(false, false)),
            ]
        );
    }

    #[test]
    fn a_full_ring_holds_packets_back_in_order_and_a_gone_peer_loses_them() {
        let (mut a, mut b) = pair();
        let (to, from) = (TO, FROM);
        let big = vec![0u8; 60 * 1024];
        // More than the ring holds: the rest waits in the backlog.
        let n = softib_proto::PEER_RING_BYTES / big.len() + 8;
        for i in 0..n {
            assert!(
                a.send(to, Qpn::new(64), from, &[i as u8], (big.len(), None), |b| {
                    b.copy_from_slice(&big);
                    true
                })
            );
        }
        assert!(a.flush(), "some wait for room");
        let mut order = Vec::new();
        for _ in 0..1000 {
            if order.len() == n {
                break;
            }
            b.receive(|_, h, _, _| order.push(h[0]));
            a.flush();
        }
        assert_eq!(order, (0..n).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(a.lost, 0);
        a.gone(7);
        assert!(!a.send(to, Qpn::new(64), from, b"x", (0, None), |_| true));
        assert_eq!(a.lost, 1);
    }

    /// A buffer of `data`, as `Context::alloc_buffer` makes one, and a reference to
    /// `offset` of it.
    fn buffer(data: &[u8], offset: u64) -> (SharedRegion, BufferRef) {
        use std::os::fd::AsRawFd;
        let map = SharedRegion::create("softib-unit-peer", data.len()).unwrap();
        map.write(0, data).unwrap();
        let r = BufferRef {
            fd: map.fd().as_raw_fd() as u32,
            ino: rustix::fs::fstat(map.fd()).unwrap().st_ino,
            offset,
        };
        (map, r)
    }

    #[test]
    fn a_large_payload_in_a_buffer_goes_by_reference_and_is_read_from_its_mapping() {
        let (mut a, mut b) = pair();
        let (to, from) = (TO, FROM);
        let data: Vec<u8> = (0..3 * BUFFER_REFERENCE_MIN + 5)
            .map(|i| (i * 7) as u8)
            .collect();
        let (_map, at) = buffer(&data, 0);
        let len = data.len() - 5;
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"hd",
            (len, Some(PayloadRef::Buffer(at))),
            |_| { panic!("a reference needs no copy") }
        ));
        // The same buffer again, further in: mapped once, read where the reference says.
        let at5 = BufferRef { offset: 5, ..at };
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"h2",
            (len, Some(PayloadRef::Buffer(at5))),
            |_| { panic!("a reference needs no copy") }
        ));
        a.flush();
        let mut got = Vec::new();
        assert!(b.receive(|_, h, p, _| got.push((h.to_vec(), p.unwrap().to_vec()))));
        assert_eq!(
            got,
            vec![
                (b"hd".to_vec(), data[..len].to_vec()),
                (b"h2".to_vec(), data[5..].to_vec())
            ]
        );
        assert_eq!((a.by_reference, b.read_by_reference), (2, 2));
        assert_eq!(b.by_id[&7].buffers.maps.len(), 1);
        // A small one goes through the ring.
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"hd",
            (10, Some(PayloadRef::Buffer(at))),
            |into| {
                into.copy_from_slice(&data[..10]);
                true
            }
        ));
        assert!(b.receive(|_, _, p, _| assert_eq!(p, Some(&data[..10]))));
        assert_eq!(a.by_reference, 2);
        // A reference past the buffer's end (16 KiB, a whole number of pages), or to a file
        // the sender no longer has, is lost (RC sends it again) and does not stop references.
        for stale in [
            BufferRef { offset: 8192, ..at },
            BufferRef {
                ino: at.ino + 1,
                ..at
            },
        ] {
            assert!(a.send(
                to,
                Qpn::new(64),
                from,
                b"hd",
                (len, Some(PayloadRef::Buffer(stale))),
                |_| true
            ));
            assert!(b.receive(|_, _, _, _| panic!("nothing to take")));
        }
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"hd",
            (len, Some(PayloadRef::Buffer(at))),
            |_| false
        ));
        assert!(b.receive(|_, _, p, _| assert_eq!(p, Some(&data[..len]))));
        assert_eq!((a.by_reference, b.read_by_reference), (5, 3));
    }

    #[test]
    fn a_large_payload_elsewhere_is_read_from_the_senders_memory() {
        let (mut a, mut b) = pair();
        let (to, from) = (TO, FROM);
        let data: Vec<u8> = (0..PROCESS_REFERENCE_MIN + 5)
            .map(|i| (i * 7) as u8)
            .collect();
        let at = PayloadRef::Process(data.as_ptr() as u64);
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"hd",
            (data.len(), Some(at)),
            |_| { panic!("a reference needs no copy") }
        ));
        let mut got = Vec::new();
        assert!(b.receive(|_, h, p, _| got.push((h.to_vec(), p.unwrap().to_vec()))));
        assert_eq!(got, vec![(b"hd".to_vec(), data.clone())]);
        assert_eq!((a.by_reference, b.read_by_reference), (1, 1));
        // Smaller than a buffer's payload needs, but memory elsewhere goes through the ring.
        let small = BUFFER_REFERENCE_MIN * 2;
        assert!(
            a.send(to, Qpn::new(64), from, b"hd", (small, Some(at)), |into| {
                into.copy_from_slice(&data[..small]);
                true
            })
        );
        assert!(b.receive(|_, _, p, _| assert_eq!(p, Some(&data[..small]))));
        assert_eq!(a.by_reference, 1);
        // An address the sender does not have is lost (RC sends it again) and does not stop
        // references.
        let nowhere = PayloadRef::Process(8);
        let n = PROCESS_REFERENCE_MIN;
        assert!(a.send(to, Qpn::new(64), from, b"hd", (n, Some(nowhere)), |_| true));
        assert!(b.receive(|_, _, _, _| panic!("nothing to take")));
        assert!(a.send(to, Qpn::new(64), from, b"hd", (n, Some(at)), |_| false));
        assert!(b.receive(|_, _, p, _| assert_eq!(p, Some(&data[..n]))));
        assert_eq!((a.by_reference, b.read_by_reference), (3, 2));
    }

    #[test]
    fn references_survive_their_encoding() {
        let refs = [
            PayloadRef::Buffer(BufferRef {
                fd: 7,
                ino: u64::MAX - 3,
                offset: 1 << 40,
            }),
            PayloadRef::Process(0x7fff_1234_5678),
        ];
        for r in refs {
            let (bytes, n) = r.encode(61_440);
            assert_eq!(PayloadRef::decode(&bytes[..n]), Some((r, 61_440)));
            assert_eq!(PayloadRef::decode(&bytes[..n - 1]), None);
            let mut other = bytes;
            other[0] = 9;
            assert_eq!(PayloadRef::decode(&other[..n]), None);
        }
    }

    #[test]
    fn a_peer_that_cannot_take_the_buffers_gets_payloads_through_the_ring() {
        // B cannot reach A's process (no such pid): it says so before the first packet.
        let (mut a, mut b) = pair_of(0, std::process::id());
        let data: Vec<u8> = (0..2 * BUFFER_REFERENCE_MIN)
            .map(|i| (i * 3) as u8)
            .collect();
        let (_map, at) = buffer(&data, 0);
        let (to, from) = (TO, FROM);
        assert!(a.send(
            to,
            Qpn::new(64),
            from,
            b"hd",
            (data.len(), Some(PayloadRef::Buffer(at))),
            |into| {
                into.copy_from_slice(&data);
                true
            }
        ));
        assert!(b.receive(|_, _, p, _| assert_eq!(p, Some(&data[..]))));
        assert_eq!((a.by_reference, b.read_by_reference), (0, 0));
    }
}
