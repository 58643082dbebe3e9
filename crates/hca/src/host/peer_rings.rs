//! Rings between the engines of two processes (the process data path, intra-host; decision 5
//! of docs/dev/process-datapath.md): when an RC QP of one process's engine gets a path to a
//! QP another process's engine holds on a device of this daemon, the daemon makes a pair of
//! shared-memory packet rings (one per direction) and gives each engine its ends and the
//! other's doorbell — the asker in the answer to `RingTo`, the other on its event channel
//! (`OpenEvents`). From then on their packets go through the rings, not the kernel.
//!
//! One pair per pair of engines (client, device), made on the first `RingTo` between them
//! and named by an id. The daemon keeps no ring, only each end's event channel: when one end
//! goes, the other hears `RingGone` and drops its rings, and its QPs then see what they would
//! with a dead node (retry exceeded).

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use softib_net::ring::PacketRing;
use softib_proto::{self as proto, Event};

/// One engine: its client and device.
pub(super) type EngineId = (u64, u32);

/// A process engine's event channel: the daemon's end of its stream and the engine's
/// doorbell; the engine's counters, and its capture ring while a capture of the device runs
/// (`oversight`).
#[derive(Debug)]
pub(super) struct EventChannel {
    pub stream: UnixStream,
    pub bell: OwnedFd,
    pub counters: softib_net::counters::CounterPage,
    pub capture: Option<PacketRing>,
    /// The port state the engine was last told (or started with).
    pub port_up: bool,
    /// Where the daemon puts datagrams for the engine's QPNs that reached the daemon
    /// (`rings::forward_to_owners`); the doorbell tells the engine.
    pub inbound: PacketRing,
}

impl EventChannel {
    /// Pushes `event` with `fds`, never waiting (a process that does not read its channel
    /// cannot stall the daemon); false when the engine cannot take it now (its socket full or
    /// closed), which the caller treats as an engine that is not there.
    pub fn push(&self, event: &Event, fds: &[std::os::fd::BorrowedFd<'_>]) -> bool {
        proto::try_send(&self.stream, event, fds).unwrap_or(false)
    }
}

#[derive(Debug)]
struct Pair {
    ends: [EngineId; 2],
    /// Each end's event channel (a clone of the daemon's end), to tell it the other went.
    streams: [UnixStream; 2],
}

/// The ring pairs of a host.
#[derive(Debug, Default)]
pub(super) struct PeerRings {
    pairs: BTreeMap<u64, Pair>,
    next: u64,
}

/// One direction of a new pair: the ring the engine reads and the ring it writes.
pub(super) struct NewRings {
    pub id: u64,
    /// Read by `a`, written by `b`.
    pub to_a: PacketRing,
    /// Read by `b`, written by `a`.
    pub to_b: PacketRing,
}

impl PeerRings {
    /// The id of the pair between `a` and `b`, if they have one.
    pub fn find(&self, a: EngineId, b: EngineId) -> Option<u64> {
        self.pairs
            .iter()
            .find(|(_, p)| p.ends == [a, b] || p.ends == [b, a])
            .map(|(id, _)| *id)
    }

    /// Makes the rings of a new pair between `a` and `b` (not yet recorded: [`Self::record`]
    /// once both ends have their descriptors).
    pub fn make(&mut self) -> std::io::Result<NewRings> {
        let to_a = PacketRing::create("softib-peer", proto::PEER_RING_BYTES)?;
        let to_b = PacketRing::create("softib-peer", proto::PEER_RING_BYTES)?;
        self.next += 1;
        Ok(NewRings {
            id: self.next,
            to_a,
            to_b,
        })
    }

    /// Records pair `id` between `a` and `b`, whose event channels are `streams`.
    pub fn record(&mut self, id: u64, ends: [EngineId; 2], streams: [UnixStream; 2]) {
        self.pairs.insert(id, Pair { ends, streams });
    }

    /// Client `client` went: every pair it was an end of is dropped, the other end told.
    pub fn client_gone(&mut self, client: u64) {
        self.pairs.retain(|&id, p| {
            let Some(mine) = p.ends.iter().position(|e| e.0 == client) else {
                return true;
            };
            let other = &p.streams[1 - mine];
            // Never waiting: a partner that does not read keeps its rings, and its QPs see
            // retry-exceeded all the same (nothing answers in the dead one's ring).
            let _ = proto::try_send(other, &Event::RingGone { id }, &[]);
            false
        });
    }
}

/// The three descriptors an engine gets for its end of a pair: the ring it reads, the ring it
/// writes, the other engine's doorbell.
pub(super) fn end_fds<'a>(
    reads: &'a PacketRing,
    writes: &'a PacketRing,
    other_bell: &'a OwnedFd,
) -> [std::os::fd::BorrowedFd<'a>; 3] {
    [reads.fd(), writes.fd(), other_bell.as_fd()]
}
