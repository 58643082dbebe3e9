//! What the daemon sets on a process engine's link and what it reads back (decision 9 of
//! docs/dev/process-datapath.md): the device's faults, applied to every datagram the engine
//! sends, through the kernel or a ring, as the daemon applies them to its own; a capture
//! (`softib capture`), for which the engine copies each datagram it sends or receives, whole
//! and sealed as the wire would carry it, into a ring the daemon drains into the pcap; and the
//! engine's counters (drops by reason, what the faults did), in a page the daemon maps and adds
//! to the device's own.
//!
//! While faults or a capture are set the link is not clean: the engine's datagrams come out
//! whole (payloads copied in, not left in memory) and sealed, and a ring carries them so
//! (tag bit `SEALED`): the receiving engine checks their ICRC, so a corrupted bit is caught
//! as on a wire.

use std::net::SocketAddr;
use std::time::SystemTime;

use softib_engine::counters::DropReason;
use softib_link::{RoceCa, RoceDrop, SrcKey};
use softib_net::counters::CounterPage;
use softib_net::fault::{FaultSpec, FaultStats, Faults};
use softib_net::ring::PacketRing;
use softib_wire::Qpn;

use super::memory::LocalMemory;

/// Where a datagram the faults let through (or held back, and release later) goes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Dest {
    /// Through the kernel, from source key `0` to `1`.
    Wire(SrcKey, SocketAddr),
    /// Through the ring to the engine holding QP `dqpn` at `to`, from `from`.
    Ring {
        to: SocketAddr,
        dqpn: Qpn,
        from: SocketAddr,
    },
}

/// The counters an engine keeps besides its engine's and link's drops.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LinkDrops {
    pub rx_truncated: u64,
    pub rx_overflow: u64,
    pub tx_refused: u64,
    pub hand_on_full: u64,
    pub ring_lost: u64,
}

/// The names of the extra drops, in [`LinkDrops`]' order (as the daemon's device names them).
const LINK_DROPS: [&str; 5] = [
    "datagram_truncated",
    "rcvbuf_overflow",
    "tx_refused",
    "hand_on_full",
    "ring_lost",
];

/// The names of [`FaultStats`]' fields, in order.
const FAULT_STATS: [&str; 5] = ["lost", "duplicated", "reordered", "corrupted", "delayed"];

/// Every counter an engine's page holds, in order: `drop.*` (the engine's reasons, the
/// link's, [`LINK_DROPS`], `capture_lost`), then `fault.*`.
fn counter_names() -> Vec<String> {
    DropReason::ALL
        .iter()
        .map(|r| r.name())
        .chain(RoceDrop::ALL.iter().map(|r| r.name()))
        .chain(LINK_DROPS)
        .chain(["capture_lost"])
        .map(|n| format!("drop.{n}"))
        .chain(FAULT_STATS.iter().map(|n| format!("fault.{n}")))
        .collect()
}

/// What the daemon set on a process engine's link, and the counters it reads.
pub(crate) struct Oversight {
    pub faults: Faults<Dest>,
    /// The running capture's ring, if one runs.
    pub capture: Option<PacketRing>,
    /// Datagrams the full capture ring could not take.
    pub capture_lost: u64,
    page: CounterPage,
    /// The sum of what was last published, to publish only after a change.
    published: u64,
}

impl Oversight {
    /// A clean link with a fresh counter page.
    pub fn new() -> std::io::Result<Oversight> {
        Ok(Oversight {
            faults: Faults::default(),
            capture: None,
            capture_lost: 0,
            page: CounterPage::create(&counter_names())?,
            published: 0,
        })
    }

    /// The counter page (for `OpenEvents`).
    pub fn page(&self) -> &CounterPage {
        &self.page
    }

    /// Whether nothing between this engine and its peers could see or change a datagram: no
    /// fault set or holding one back, no capture.
    pub fn is_clean(&self) -> bool {
        self.capture.is_none() && self.faults.is_idle()
    }

    /// The faults are now `spec` (what the old ones held back is dropped with them, as the
    /// daemon's device does).
    pub fn set_faults(&mut self, spec: FaultSpec) {
        self.faults = Faults::new(spec);
    }

    /// Copies `packet` (an IP packet as the wire carries it) into the capture ring.
    pub fn capture(&mut self, packet: Option<Vec<u8>>) {
        capture_into(&self.capture, &mut self.capture_lost, packet);
    }

    /// Writes the counters into the page when any changed since the last time.
    pub fn publish(&mut self, ca: &RoceCa<LocalMemory>, extra: &LinkDrops) {
        let engine = ca.hca().drops();
        let link = ca.drops();
        let faults = self.faults.stats();
        let sum = engine.total()
            + link.total()
            + extra.rx_truncated
            + extra.rx_overflow
            + extra.tx_refused
            + extra.hand_on_full
            + extra.ring_lost
            + self.capture_lost
            + faults.lost
            + faults.duplicated
            + faults.reordered
            + faults.corrupted
            + faults.delayed;
        if sum == self.published {
            return;
        }
        self.published = sum;
        let values = DropReason::ALL
            .iter()
            .map(|&r| engine.get(r))
            .chain(RoceDrop::ALL.iter().map(|&r| link.get(r)))
            .chain([
                extra.rx_truncated,
                extra.rx_overflow,
                extra.tx_refused,
                extra.hand_on_full,
                extra.ring_lost,
                self.capture_lost,
            ])
            .chain(fault_values(&faults));
        for (i, v) in values.enumerate() {
            self.page.set(i, v);
        }
    }
}

/// Copies `packet` into the capture ring `ring` (if one runs), counting it in `lost` when the
/// ring is full.
pub(crate) fn capture_into(ring: &Option<PacketRing>, lost: &mut u64, packet: Option<Vec<u8>>) {
    let (Some(ring), Some(packet)) = (ring, packet) else {
        return;
    };
    let at = softib_proto::capture_prefix(SystemTime::now());
    match ring.push(0, &[&at, &packet]) {
        Ok(true) => {}
        Ok(false) | Err(_) => *lost += 1,
    }
}

fn fault_values(f: &FaultStats) -> [u64; 5] {
    [f.lost, f.duplicated, f.reordered, f.corrupted, f.delayed]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_name_fits_a_page_and_is_unique_in_its_group() {
        let names = counter_names();
        let page = CounterPage::create(&names).unwrap();
        assert_eq!(page.len(), names.len());
        let drops = names.iter().filter(|n| n.starts_with("drop.")).count();
        assert_eq!(
            drops,
            DropReason::ALL.len() + RoceDrop::ALL.len() + LINK_DROPS.len() + 1
        );
        assert!(names.iter().any(|n| n == "fault.corrupted"));
    }
}
