//! The `net` module deals with *the fault model*: links between HCAs that lose, duplicate,
//! reorder, delay and corrupt packets, and partitions that cut links for a while.
//!
//! A link carries RoCEv2 datagrams — the UDP payload each HCA's `RoceCa` sealed, BTH through
//! ICRC — with what the UDP and IP headers would say beside them (the source port, the
//! datagram's index in its GSO run). Corruption flips one to three random bits anywhere in
//! those bytes and remembers which; the receiving `RoceCa` checks the real ICRC and drops what
//! fails, as an HCA does. (The ICRC is a CRC-32 over the datagram and headers derived from the
//! addresses, so it catches every error of up to three bits in frames this short — except in
//! BTH byte 4, which the ICRC masks because switches may set FECN and BECN there; the world
//! checks that nothing else ever gets through.)
//!
//! Faults are drawn per direction of every link, TigerBeetle-style:
//! * delay: `min + Exp(mean)`, capped, and first-in first-out per direction;
//! * reordering: with its probability a packet gets an extra uniform delay and skips the
//!   first-in first-out rule, so later packets may overtake it;
//! * loss, duplication (the copy travels as a packet of its own) and corruption;
//! * partitions: a set of directed links is down from `start` to `end` (symmetric when both
//!   directions are down); a packet is lost if its link is down when it is sent or when it
//!   arrives. [`Net::heal`] ends every fault at once (the liveness phase).
//!
//! Everything is ordered: the in-flight queue is a `BTreeMap` keyed by (arrival time, sequence
//! number), so equal arrival times are delivered in sending order.

use std::collections::BTreeMap;
use std::fmt;

use softib_engine::{Duration, Instant};

use crate::rng::SimRng;

/// Fault probabilities of one direction of one link.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LinkFaults {
    /// Probability that a packet is lost.
    pub loss: f64,
    /// Probability that a packet is delivered twice.
    pub dup: f64,
    /// Probability that a packet is delayed by an extra random time (and may be overtaken).
    pub reorder: f64,
    /// Probability that bits of a packet are flipped.
    pub corrupt: f64,
}

impl LinkFaults {
    /// Whether the link can lose a packet outright or make the receiver see a PSN gap (the
    /// faults that can exhaust a requester's retries).
    pub fn can_lose_or_reorder(&self) -> bool {
        self.loss > 0.0 || self.corrupt > 0.0 || self.reorder > 0.0
    }

    /// Whether any fault is enabled.
    pub fn any(&self) -> bool {
        self.can_lose_or_reorder() || self.dup > 0.0
    }
}

/// Link latency: `min + Exp(mean)`, at most `cap`; reordered packets get up to `reorder_max`
/// more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayModel {
    /// The shortest one-way delay.
    pub min: Duration,
    /// The mean of the exponential part.
    pub mean: Duration,
    /// The longest delay of a packet that is not reordered.
    pub cap: Duration,
    /// The longest extra delay of a reordered packet.
    pub reorder_max: Duration,
}

impl DelayModel {
    /// The longest a packet can be in flight: after this long every packet sent before has
    /// been delivered or dropped.
    pub fn max_lifetime(&self) -> Duration {
        self.cap + self.reorder_max + Duration::from_micros(1)
    }
}

/// A partition: directed links that are down during `[start, end)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// When the links go down.
    pub start: Instant,
    /// When they heal.
    pub end: Instant,
    /// The directed links `(from, to)` (HCA indices) that are down.
    pub links: Vec<(usize, usize)>,
    /// What it is, for the log ("hca1 <-> hca2", "hca3 -> hca1", "hca2 isolated").
    pub what: String,
}

impl Partition {
    /// Whether the partition cuts `from -> to` at `at`.
    pub fn cuts(&self, from: usize, to: usize, at: Instant) -> bool {
        at >= self.start && at < self.end && self.links.contains(&(from, to))
    }
}

/// What the network did, in packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NetStats {
    /// Packets handed to the network.
    pub sent: u64,
    /// Packets handed to an engine.
    pub delivered: u64,
    /// Packets lost by the loss fault.
    pub lost: u64,
    /// Extra copies made by the duplication fault.
    pub duplicated: u64,
    /// Packets given an extra reordering delay.
    pub reordered: u64,
    /// Packets corrupted on the wire.
    pub corrupted: u64,
    /// Corrupted packets the receiving link dropped (a bad ICRC, or an opcode the corruption
    /// made one softib does not have).
    pub crc_dropped: u64,
    /// Packets lost to a partition.
    pub partitioned: u64,
}

impl fmt::Display for NetStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "sent {} delivered {} lost {} dup {} reordered {} corrupted {} crc_dropped {} partitioned {}",
            self.sent,
            self.delivered,
            self.lost,
            self.duplicated,
            self.reordered,
            self.corrupted,
            self.crc_dropped,
            self.partitioned
        )
    }
}

/// What the network did with one packet (for the packet trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendOutcome {
    /// Lost to the loss fault.
    pub lost: bool,
    /// Lost to a partition.
    pub partitioned: bool,
    /// Copies in flight (2 when duplicated).
    pub copies: u8,
    /// Copies corrupted.
    pub corrupted: u8,
    /// Copies given a reordering delay.
    pub reordered: u8,
    /// When the last copy arrives.
    pub at: Instant,
}

impl fmt::Display for SendOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.partitioned {
            return f.write_str("cut by a partition");
        }
        if self.lost {
            return f.write_str("lost");
        }
        write!(f, "arrives {}", self.at)?;
        if self.copies > 1 {
            f.write_str(" duplicated")?;
        }
        if self.reordered > 0 {
            write!(f, " reordered x{}", self.reordered)?;
        }
        if self.corrupted > 0 {
            write!(f, " corrupted x{}", self.corrupted)?;
        }
        Ok(())
    }
}

/// What travels with a datagram besides its bytes, as the IP and UDP headers carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Label {
    /// The UDP source port.
    pub src_port: u16,
    /// Its index in its GSO run: the IPv4 Identification it carries.
    pub index: u16,
    /// The sender said it goes in-process (`Transmit::in_process`).
    pub in_process: bool,
}

/// A packet in flight.
#[derive(Debug, Clone)]
struct Frame {
    from: usize,
    to: usize,
    label: Label,
    /// The bits corruption flipped (none for an intact frame).
    flipped: Vec<u64>,
    /// The datagram.
    bytes: Vec<u8>,
}

/// A packet that arrived, intact or not.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The receiving HCA.
    pub to: usize,
    /// The sending HCA.
    pub from: usize,
    /// What came with it.
    pub label: Label,
    /// The bits corruption flipped on the way (bit `i` is bit `i % 8` of byte `i / 8`); empty
    /// when it arrived as it was sent.
    pub flipped: Vec<u64>,
    /// The datagram (BTH through ICRC).
    pub bytes: Vec<u8>,
}

/// The network: every directed link between `n` HCAs (including each HCA's loopback).
#[derive(Debug)]
pub struct Net {
    rng: SimRng,
    n: usize,
    links: Vec<LinkFaults>,
    delay: DelayModel,
    partitions: Vec<Partition>,
    healed: bool,
    queue: BTreeMap<(Instant, u64), Frame>,
    /// Per directed link, the latest arrival time of a first-in first-out packet.
    fifo: Vec<Instant>,
    seq: u64,
    /// What happened so far.
    pub stats: NetStats,
}

impl Net {
    /// A network of `n` HCAs; `links[from * n + to]` are the faults of `from -> to`.
    pub(crate) fn new(
        rng: SimRng,
        n: usize,
        links: Vec<LinkFaults>,
        delay: DelayModel,
        partitions: Vec<Partition>,
    ) -> Net {
        debug_assert_eq!(links.len(), n * n);
        Net {
            rng,
            n,
            links,
            delay,
            partitions,
            healed: false,
            queue: BTreeMap::new(),
            fifo: vec![Instant::ZERO; n * n],
            seq: 0,
            stats: NetStats::default(),
        }
    }

    /// Ends every fault: no more loss, duplication, reordering or corruption, every partition
    /// healed. Packets already in flight still arrive (intact or not, as they were sent).
    pub fn heal(&mut self) {
        self.healed = true;
        self.partitions.clear();
        for l in &mut self.links {
            *l = LinkFaults::default();
        }
    }

    /// Whether [`Net::heal`] was called.
    pub fn is_healed(&self) -> bool {
        self.healed
    }

    /// Whether a partition cuts `from -> to` at `at`.
    pub fn is_cut(&self, from: usize, to: usize, at: Instant) -> bool {
        self.partitions.iter().any(|p| p.cuts(from, to, at))
    }

    /// The number of packets in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// When the next packet arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        self.queue.keys().next().map(|&(t, _)| t)
    }

    /// Sends `datagram` from HCA `from` to HCA `to` at `now`.
    pub(crate) fn send(
        &mut self,
        now: Instant,
        from: usize,
        to: usize,
        label: Label,
        datagram: &[u8],
    ) -> SendOutcome {
        let mut out = SendOutcome::default();
        self.stats.sent += 1;
        if self.is_cut(from, to, now) {
            self.stats.partitioned += 1;
            out.partitioned = true;
            return out;
        }
        let faults = self.links[from * self.n + to];
        if self.rng.chance(faults.loss) {
            self.stats.lost += 1;
            out.lost = true;
            return out;
        }
        let bytes = datagram.to_vec();
        let copies = if self.rng.chance(faults.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut frame = Frame {
                from,
                to,
                label,
                flipped: Vec::new(),
                bytes: bytes.clone(),
            };
            out.copies += 1;
            if self.rng.chance(faults.corrupt) {
                self.stats.corrupted += 1;
                out.corrupted += 1;
                // One to three distinct bits (flipping one bit twice would undo it).
                let flips = self.rng.range(1, 3) as usize;
                let nbits = frame.bytes.len() as u64 * 8;
                let mut bits: Vec<u64> = Vec::with_capacity(flips);
                while bits.len() < flips.min(nbits as usize) {
                    let bit = self.rng.below(nbits);
                    if !bits.contains(&bit) {
                        bits.push(bit);
                    }
                }
                for &bit in &bits {
                    frame.bytes[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
                frame.flipped = bits;
            }
            let d = self.delay;
            let extra = self
                .rng
                .exponential(d.mean.as_micros() as f64)
                .min(d.cap.as_micros().saturating_sub(d.min.as_micros()));
            let mut at = now + d.min + Duration::from_micros(extra);
            let link = from * self.n + to;
            if self.rng.chance(faults.reorder) {
                self.stats.reordered += 1;
                out.reordered += 1;
                at += Duration::from_micros(self.rng.range(1, d.reorder_max.as_micros().max(1)));
            } else {
                at = at.max(self.fifo[link]);
                self.fifo[link] = at;
            }
            self.seq += 1;
            self.queue.insert((at, self.seq), frame);
            out.at = out.at.max(at);
        }
        out
    }

    /// Takes the next packet that has arrived by `now`, corrupted or not (the receiving link
    /// judges); counts and discards the ones whose link is cut on arrival.
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<Delivery> {
        loop {
            let (&(at, seq), _) = self.queue.iter().next()?;
            if at > now {
                return None;
            }
            let frame = self.queue.remove(&(at, seq))?;
            if self.is_cut(frame.from, frame.to, at) {
                self.stats.partitioned += 1;
                continue;
            }
            return Some(Delivery {
                to: frame.to,
                from: frame.from,
                label: frame.label,
                flipped: frame.flipped,
                bytes: frame.bytes,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label of a frame from source port `port`.
    fn lab(port: u16) -> Label {
        Label {
            src_port: port,
            ..Label::default()
        }
    }

    fn net_with(faults: LinkFaults, cap: u64) -> Net {
        Net::new(
            SimRng::new(7),
            2,
            vec![faults; 4],
            DelayModel {
                min: Duration::from_micros(2),
                mean: Duration::from_micros(5),
                cap: Duration::from_micros(cap),
                reorder_max: Duration::from_micros(100),
            },
            Vec::new(),
        )
    }

    fn net(faults: LinkFaults) -> Net {
        net_with(faults, 40)
    }

    fn drain(n: &mut Net) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while let Some(d) = n.pop_due(Instant::NEVER) {
            out.push(d.bytes);
        }
        out
    }

    #[test]
    fn clean_link_is_fifo_and_exact() {
        let mut n = net(LinkFaults::default());
        for i in 0..100u8 {
            n.send(Instant::from_micros(u64::from(i)), 0, 1, lab(1), &[i; 13]);
        }
        let got = drain(&mut n);
        assert_eq!(got.len(), 100);
        for (i, b) in got.iter().enumerate() {
            assert_eq!(b, &vec![i as u8; 13]);
        }
    }

    #[test]
    fn corrupted_frames_arrive_with_the_bits_that_were_flipped() {
        let mut n = net(LinkFaults {
            corrupt: 1.0,
            ..LinkFaults::default()
        });
        for i in 0..1000u32 {
            n.send(Instant::ZERO, 0, 1, lab(1), &i.to_le_bytes());
        }
        let mut seen = 0;
        while let Some(d) = n.pop_due(Instant::NEVER) {
            assert!((1..=3).contains(&d.flipped.len()));
            // Flipping the recorded bits back gives what was sent.
            let mut b = d.bytes.clone();
            for &bit in &d.flipped {
                b[(bit / 8) as usize] ^= 1 << (bit % 8);
            }
            assert_eq!(b, (seen as u32).to_le_bytes());
            seen += 1;
        }
        assert_eq!((seen, n.stats.corrupted), (1000, 1000));
    }

    #[test]
    fn loss_and_dup_are_counted() {
        let mut n = net(LinkFaults {
            loss: 0.3,
            dup: 0.3,
            ..LinkFaults::default()
        });
        for _ in 0..1000 {
            n.send(Instant::ZERO, 1, 0, lab(2), &[1, 2, 3, 4]);
        }
        let got = drain(&mut n).len() as u64;
        assert_eq!(got, 1000 - n.stats.lost + n.stats.duplicated);
        assert!(n.stats.lost > 200 && n.stats.lost < 400, "{:?}", n.stats);
    }

    #[test]
    fn partition_drops_both_at_send_and_on_arrival() {
        let mut n = net_with(LinkFaults::default(), 2);
        n.partitions.push(Partition {
            start: Instant::from_micros(10),
            end: Instant::from_micros(20),
            links: vec![(0, 1)],
            what: String::from("test"),
        });
        n.send(Instant::from_micros(9), 0, 1, lab(1), &[1; 4]); // arrives during the cut
        n.send(Instant::from_micros(12), 0, 1, lab(1), &[2; 4]); // sent during the cut
        n.send(Instant::from_micros(12), 1, 0, lab(2), &[3; 4]); // the other direction
        n.send(Instant::from_micros(30), 0, 1, lab(1), &[4; 4]); // healed
        let got = drain(&mut n);
        assert_eq!(got, vec![vec![3; 4], vec![4; 4]]);
        assert_eq!(n.stats.partitioned, 2);
    }
}
