//! A single-producer, single-consumer ring of fixed-size slots in shared memory: how the daemon
//! hands completions to an application without a system call on either side (the CQ of a real
//! HCA is such a ring in host memory, written by the device and polled by the library).
//!
//! Layout: the producer index at offset 0 and the consumer index at offset 64 (each on its own
//! cache line, each a `u64` that only grows), then `slots` slots of `slot_len` bytes from offset
//! 128. A slot holds a 2-byte little-endian length and the message. The producer writes the
//! slot, then publishes it by storing the producer index with Release; the consumer reads the
//! index with Acquire, copies the slot out, then frees it by storing the consumer index.
//!
//! At offset 72, on the consumer's line, the consumer says whether it is polling the ring
//! (nonzero) or may be asleep (zero, as a new ring starts): a producer that finds it polling
//! after publishing a message need not wake it (see [`Ring::wants_wakeup`]).
//!
//! Either side may be hostile or broken: indices that claim more than `slots` messages, or a
//! length larger than a slot, make the ring report [`RingError::Corrupt`] instead of reading out
//! of place; the daemon then drops that client.
//!
//! [`PacketRing`] is the same protocol for records of any length up to half its size: packets
//! between the engines of two processes (headers and payloads of up to an in-process
//! segment), packed back to back instead of one slot each.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::shm::SharedRegion;

const PRODUCER: usize = 0;
const CONSUMER: usize = 64;
const POLLING: usize = 72;
const SLOTS: usize = 128;
/// The bytes at the start of each slot that hold its message's length (little-endian): a
/// message may have a slot's length less these.
pub const LEN_PREFIX: usize = 2;

/// Why a ring operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingError {
    /// The message does not fit in a slot.
    TooLarge,
    /// The indices or a slot's length are impossible: the other side broke the ring.
    Corrupt,
}

/// One end of a ring.
#[derive(Debug)]
pub struct Ring {
    region: SharedRegion,
    slots: u64,
    slot_len: usize,
}

impl Ring {
    /// The bytes a ring of `slots` slots of `slot_len` bytes needs.
    pub fn bytes_for(slots: u32, slot_len: usize) -> usize {
        SLOTS + slots as usize * slot_len
    }

    /// Creates a ring in a new memfd.
    pub fn create(name: &str, slots: u32, slot_len: usize) -> io::Result<Ring> {
        Ring::check_shape(slots, slot_len)?;
        let region = SharedRegion::create(name, Ring::bytes_for(slots, slot_len))?;
        Ok(Ring {
            region,
            slots: u64::from(slots),
            slot_len,
        })
    }

    /// Maps a ring another process created.
    pub fn from_fd(fd: OwnedFd, slots: u32, slot_len: usize) -> io::Result<Ring> {
        Ring::check_shape(slots, slot_len)?;
        let region = SharedRegion::from_fd(fd, Ring::bytes_for(slots, slot_len))?;
        Ok(Ring {
            region,
            slots: u64::from(slots),
            slot_len,
        })
    }

    fn check_shape(slots: u32, slot_len: usize) -> io::Result<()> {
        if slots == 0 || slots > 1 << 20 || !(8..=4096).contains(&slot_len) || slot_len % 8 != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a ring of {slots} slots of {slot_len} bytes: give 1 to 2^20 slots of 8 to \
                     4096 bytes (a multiple of 8)"
                ),
            ));
        }
        Ok(())
    }

    /// The number of slots.
    pub fn capacity(&self) -> u64 {
        self.slots
    }

    /// The memfd, to pass to the other side.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd()
    }

    fn index(&self, at: usize) -> Result<&std::sync::atomic::AtomicU64, RingError> {
        self.region.atomic_u64(at).map_err(|_| RingError::Corrupt)
    }

    /// The number of messages waiting (as this side sees it).
    pub fn len(&self) -> Result<u64, RingError> {
        let p = self.index(PRODUCER)?.load(Ordering::Acquire);
        let c = self.index(CONSUMER)?.load(Ordering::Acquire);
        let n = p.wrapping_sub(c);
        if n > self.slots {
            return Err(RingError::Corrupt);
        }
        Ok(n)
    }

    /// Whether no message waits.
    pub fn is_empty(&self) -> Result<bool, RingError> {
        Ok(self.len()? == 0)
    }

    /// The consumer says whether it polls the ring (so producers need not wake it) or may
    /// sleep. Before it sleeps it must clear this and then look at the ring once more
    /// ([`Ring::is_empty`]): with the producer's [`Ring::wants_wakeup`] after each push, one of
    /// the two always sees the other (both sides order their store before their load with a
    /// sequentially consistent fence).
    pub fn set_polling(&self, polling: bool) -> Result<(), RingError> {
        set_polling(self.index(POLLING)?, polling);
        Ok(())
    }

    /// After a push: whether the consumer may be asleep and must be woken (its doorbell rung).
    pub fn wants_wakeup(&self) -> Result<bool, RingError> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(self.index(POLLING)?.load(Ordering::Relaxed) == 0)
    }

    /// Appends `msg`; `Ok(false)` when the ring is full.
    pub fn push(&self, msg: &[u8]) -> Result<bool, RingError> {
        if msg.len() + LEN_PREFIX > self.slot_len {
            return Err(RingError::TooLarge);
        }
        let prod = self.index(PRODUCER)?;
        let p = prod.load(Ordering::Relaxed);
        let c = self.index(CONSUMER)?.load(Ordering::Acquire);
        let used = p.wrapping_sub(c);
        if used > self.slots {
            return Err(RingError::Corrupt);
        }
        if used == self.slots {
            return Ok(false);
        }
        let at = SLOTS + (p % self.slots) as usize * self.slot_len;
        let len = (msg.len() as u16).to_le_bytes();
        self.region
            .write(at, &len)
            .map_err(|_| RingError::Corrupt)?;
        self.region
            .write(at + LEN_PREFIX, msg)
            .map_err(|_| RingError::Corrupt)?;
        prod.store(p.wrapping_add(1), Ordering::Release);
        Ok(true)
    }

    /// Takes the oldest message into `out` (cleared first); `Ok(false)` when the ring is empty.
    pub fn pop(&self, out: &mut Vec<u8>) -> Result<bool, RingError> {
        let cons = self.index(CONSUMER)?;
        let c = cons.load(Ordering::Relaxed);
        let p = self.index(PRODUCER)?.load(Ordering::Acquire);
        let n = p.wrapping_sub(c);
        if n > self.slots {
            return Err(RingError::Corrupt);
        }
        if n == 0 {
            return Ok(false);
        }
        let at = SLOTS + (c % self.slots) as usize * self.slot_len;
        let mut len = [0u8; LEN_PREFIX];
        self.region
            .read(at, &mut len)
            .map_err(|_| RingError::Corrupt)?;
        let len = usize::from(u16::from_le_bytes(len));
        if len + LEN_PREFIX > self.slot_len {
            return Err(RingError::Corrupt);
        }
        out.clear();
        out.resize(len, 0);
        self.region
            .read(at + LEN_PREFIX, out)
            .map_err(|_| RingError::Corrupt)?;
        cons.store(c.wrapping_add(1), Ordering::Release);
        Ok(true)
    }
}

/// A [`PacketRing`]'s consumer flags, on a line of their own that is written only when one
/// changes, so that the producer's look at them after every publish finds them in its cache
/// (the consumer's position, written at every record taken, has its own line).
///
/// The consumer's polling flag (as [`Ring`]'s at 72).
const PR_POLLING: usize = 128;
/// Set when the consumer cannot take records that name the producer's memory instead of
/// carrying it ([`PacketRing::refuse_references`]).
const REFERENCES_REFUSED: usize = 136;
/// Where a [`PacketRing`]'s records start.
const DATA: usize = 192;
/// A record's header: its length and the producer's tag, each a little-endian `u32`.
const RECORD_HEADER: usize = 8;
/// The length of a record header that says "the rest of the data area is unused; the next
/// record starts at its beginning".
const WRAP: u32 = u32::MAX;

/// A single-producer, single-consumer ring of variable-length records in shared memory.
///
/// Layout: the producer's and the consumer's byte positions at offsets 0 and 64 (`u64`s that
/// only grow, each on its own cache line), the consumer's flags on the line at 128 (polling,
/// references refused), and `capacity` bytes of records from offset 192. A record is an
/// 8-byte header (length, tag) and its bytes, padded to a multiple of 8; one that would cross
/// the end of the area is preceded by a wrap marker and starts at the beginning instead. The consumer checks every header against the producer's position and
/// the area before it reads: a broken producer makes the ring report [`RingError::Corrupt`],
/// never read out of place.
///
/// Each side keeps the other's position as it last read it and reads it again only when that
/// is not enough (the producer when the ring looks full, the consumer when it looks empty):
/// a line the other side writes at every record is a cache miss at every read.
#[derive(Debug)]
pub struct PacketRing {
    region: SharedRegion,
    capacity: u64,
    /// The producer's copy of the consumer's position (never ahead of it).
    seen_consumer: AtomicU64,
    /// The consumer's copy of the producer's position (never ahead of it).
    seen_producer: AtomicU64,
}

impl PacketRing {
    /// The bytes a ring of `capacity` record bytes needs.
    pub fn bytes_for(capacity: usize) -> usize {
        DATA + capacity
    }

    /// Creates a ring with `capacity` bytes of records (a power of two, 4 KiB to 1 GiB) in a
    /// new memfd.
    pub fn create(name: &str, capacity: usize) -> io::Result<PacketRing> {
        PacketRing::check_shape(capacity)?;
        let region = SharedRegion::create(name, PacketRing::bytes_for(capacity))?;
        Ok(PacketRing::over(region, capacity))
    }

    /// Maps a ring another process created.
    pub fn from_fd(fd: OwnedFd, capacity: usize) -> io::Result<PacketRing> {
        PacketRing::check_shape(capacity)?;
        let region = SharedRegion::from_fd(fd, PacketRing::bytes_for(capacity))?;
        Ok(PacketRing::over(region, capacity))
    }

    fn over(region: SharedRegion, capacity: usize) -> PacketRing {
        PacketRing {
            region,
            capacity: capacity as u64,
            // Behind any real position: the first use reads the real one.
            seen_consumer: AtomicU64::new(0),
            seen_producer: AtomicU64::new(0),
        }
    }

    fn check_shape(capacity: usize) -> io::Result<()> {
        if !capacity.is_power_of_two() || !(4096..=1 << 30).contains(&capacity) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a packet ring of {capacity} bytes: give a power of two from 4 KiB to 1 GiB"
                ),
            ));
        }
        Ok(())
    }

    /// The memfd, to pass to the other side.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd()
    }

    /// The longest record: half the area, less a header, so that one always fits once the
    /// consumer has caught up, wherever the producer stands.
    pub fn max_record(&self) -> usize {
        self.capacity as usize / 2 - RECORD_HEADER
    }

    fn index(&self, at: usize) -> Result<&std::sync::atomic::AtomicU64, RingError> {
        self.region.atomic_u64(at).map_err(|_| RingError::Corrupt)
    }

    /// Bytes in use (as this side sees it).
    fn used(&self) -> Result<(u64, u64), RingError> {
        let p = self.index(PRODUCER)?.load(Ordering::Acquire);
        let c = self.index(CONSUMER)?.load(Ordering::Acquire);
        if p.wrapping_sub(c) > self.capacity {
            return Err(RingError::Corrupt);
        }
        Ok((p, c))
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> Result<bool, RingError> {
        let (p, c) = self.used()?;
        Ok(p == c)
    }

    /// As [`Ring::set_polling`].
    pub fn set_polling(&self, polling: bool) -> Result<(), RingError> {
        set_polling(self.index(PR_POLLING)?, polling);
        Ok(())
    }

    /// As [`Ring::wants_wakeup`]: the flag lives on a line the consumer writes only when it
    /// changes, so after the fence this look finds it in the cache.
    pub fn wants_wakeup(&self) -> Result<bool, RingError> {
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(self.index(PR_POLLING)?.load(Ordering::Relaxed) == 0)
    }

    /// The consumer says it cannot read the producer's memory (the kernel refused it): from
    /// now on the producer puts payloads into the ring itself.
    pub fn refuse_references(&self) -> Result<(), RingError> {
        self.index(REFERENCES_REFUSED)?.store(1, Ordering::Release);
        Ok(())
    }

    /// Whether the consumer takes records that name the producer's memory.
    pub fn takes_references(&self) -> bool {
        self.index(REFERENCES_REFUSED)
            .is_ok_and(|f| f.load(Ordering::Acquire) == 0)
    }

    /// Room for a record of `len` bytes with `tag`: writes the wrap marker if it must start
    /// at the beginning, then its header, and returns where its bytes go in the region and
    /// the producer position that publishes it; `None` when the ring is full.
    fn reserve(&self, tag: u32, len: usize) -> Result<Option<(usize, u64)>, RingError> {
        if len > self.max_record() {
            return Err(RingError::TooLarge);
        }
        let size = (RECORD_HEADER + len).next_multiple_of(8) as u64;
        let mut p = self.index(PRODUCER)?.load(Ordering::Relaxed);
        let at = p % self.capacity;
        let skip = if at + size > self.capacity {
            self.capacity - at
        } else {
            0
        };
        let fits = |c: u64| {
            let used = p.wrapping_sub(c);
            used <= self.capacity && used + skip + size <= self.capacity
        };
        if !fits(self.seen_consumer.load(Ordering::Relaxed)) {
            let c = self.index(CONSUMER)?.load(Ordering::Acquire);
            if p.wrapping_sub(c) > self.capacity {
                return Err(RingError::Corrupt);
            }
            self.seen_consumer.store(c, Ordering::Relaxed);
            if !fits(c) {
                return Ok(None);
            }
        }
        let w = |off: u64, bytes: &[u8]| {
            self.region
                .write(DATA + off as usize, bytes)
                .map_err(|_| RingError::Corrupt)
        };
        if skip != 0 {
            w(at, &WRAP.to_le_bytes())?;
            p = p.wrapping_add(skip);
        }
        let at = p % self.capacity;
        let mut header = [0u8; RECORD_HEADER];
        header[..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4..].copy_from_slice(&tag.to_le_bytes());
        w(at, &header)?;
        Ok(Some((
            DATA + at as usize + RECORD_HEADER,
            p.wrapping_add(size),
        )))
    }

    /// Appends a record of `len` bytes that `fill` writes in place (after `head`, which is
    /// copied first): one copy fewer for a payload that lies elsewhere. `Ok(None)` when the
    /// ring is full; `Ok(Some(false))` when `fill` failed, and nothing is published.
    pub fn push_with(
        &mut self,
        tag: u32,
        head: &[u8],
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> bool,
    ) -> Result<Option<bool>, RingError> {
        let total = head.len() + len;
        let Some((at, next)) = self.reserve(tag, total)? else {
            return Ok(None);
        };
        let record = self
            .region
            .as_mut_slice()
            .get_mut(at..at + total)
            .ok_or(RingError::Corrupt)?;
        let (hd, body) = record.split_at_mut(head.len());
        hd.copy_from_slice(head);
        if !fill(body) {
            return Ok(Some(false));
        }
        self.index(PRODUCER)?.store(next, Ordering::Release);
        Ok(Some(true))
    }

    /// Appends one record of the concatenation of `parts`, with `tag`; `Ok(false)` when the
    /// ring has no room for it now.
    pub fn push(&self, tag: u32, parts: &[&[u8]]) -> Result<bool, RingError> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let Some((mut at, next)) = self.reserve(tag, len)? else {
            return Ok(false);
        };
        for part in parts {
            self.region
                .write(at, part)
                .map_err(|_| RingError::Corrupt)?;
            at += part.len();
        }
        self.index(PRODUCER)?.store(next, Ordering::Release);
        Ok(true)
    }

    /// The oldest record's place: its tag, where its bytes start in the region, their length,
    /// and the consumer position after it. `None` when the ring is empty.
    fn front(&self) -> Result<Option<(u32, usize, usize, u64)>, RingError> {
        let mut c = self.index(CONSUMER)?.load(Ordering::Relaxed);
        let mut p = self.seen_producer.load(Ordering::Relaxed);
        let seen = p.wrapping_sub(c);
        if seen == 0 || seen > self.capacity {
            p = self.index(PRODUCER)?.load(Ordering::Acquire);
            self.seen_producer.store(p, Ordering::Relaxed);
        }
        loop {
            let waiting = p.wrapping_sub(c);
            if waiting > self.capacity {
                return Err(RingError::Corrupt);
            }
            if waiting == 0 {
                return Ok(None);
            }
            let at = c % self.capacity;
            if waiting < RECORD_HEADER as u64 || at + RECORD_HEADER as u64 > self.capacity {
                return Err(RingError::Corrupt);
            }
            let mut header = [0u8; RECORD_HEADER];
            self.region
                .read(DATA + at as usize, &mut header)
                .map_err(|_| RingError::Corrupt)?;
            let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
            if len == WRAP {
                c = c.wrapping_add(self.capacity - at);
                continue;
            }
            let len = len as usize;
            let size = (RECORD_HEADER + len).next_multiple_of(8) as u64;
            if len > self.max_record() || size > waiting || at + size > self.capacity {
                return Err(RingError::Corrupt);
            }
            let tag = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
            return Ok(Some((
                tag,
                DATA + at as usize + RECORD_HEADER,
                len,
                c.wrapping_add(size),
            )));
        }
    }

    /// Takes the oldest record into `out` (cleared first) and returns its tag; `Ok(None)`
    /// when the ring is empty. What a consumer that does not trust the producer uses.
    pub fn pop(&self, out: &mut Vec<u8>) -> Result<Option<u32>, RingError> {
        let Some((tag, at, len, next)) = self.front()? else {
            return Ok(None);
        };
        out.clear();
        out.resize(len, 0);
        self.region.read(at, out).map_err(|_| RingError::Corrupt)?;
        self.index(CONSUMER)?.store(next, Ordering::Release);
        Ok(Some(tag))
    }

    /// Hands the oldest record to `f` where it lies, then frees it; `Ok(None)` when the ring
    /// is empty.
    ///
    /// Only for a producer this process trusts (another process of the same user, which could
    /// ptrace this one anyway): the producer must not write a record between publishing it and
    /// the consumer freeing it. One that breaks that rule can change the bytes `f` reads
    /// (never their bounds, which were checked first); a consumer that cannot rule it out
    /// uses [`PacketRing::pop`].
    pub fn pop_with<R>(&self, f: impl FnOnce(u32, &[u8]) -> R) -> Result<Option<R>, RingError> {
        let Some((tag, at, len, next)) = self.front()? else {
            return Ok(None);
        };
        let bytes = self
            .region
            .as_slice()
            .get(at..at + len)
            .ok_or(RingError::Corrupt)?;
        let r = f(tag, bytes);
        self.index(CONSUMER)?.store(next, Ordering::Release);
        Ok(Some(r))
    }
}

/// The consumer's half of the wakeup handshake (see [`Ring::set_polling`]).
fn set_polling(flag: &std::sync::atomic::AtomicU64, polling: bool) {
    if (flag.load(Ordering::Relaxed) != 0) != polling {
        flag.store(u64::from(polling), Ordering::Relaxed);
        // Only clearing needs the fence (the producer must not miss it); a producer that
        // misses a set only rings once more than it needed to. A flag cleared earlier was
        // fenced then.
        if !polling {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_cross_between_two_mappings_in_order_and_the_ring_fills() {
        let a = Ring::create("t", 4, 64).unwrap();
        let b = Ring::from_fd(a.fd().try_clone_to_owned().unwrap(), 4, 64).unwrap();
        let mut out = Vec::new();
        assert!(!b.pop(&mut out).unwrap());
        for round in 0..3u8 {
            for i in 0..4u8 {
                assert!(a.push(&[round, i, 7]).unwrap());
            }
            assert!(!a.push(b"full").unwrap(), "a fifth message does not fit");
            assert_eq!(b.len().unwrap(), 4);
            for i in 0..4u8 {
                assert!(b.pop(&mut out).unwrap());
                assert_eq!(out, [round, i, 7]);
            }
            assert!(b.is_empty().unwrap());
        }
        assert_eq!(a.push(&[0; 63]), Err(RingError::TooLarge));
        assert!(a.push(&[1; 62]).unwrap());
        assert!(b.pop(&mut out).unwrap());
        assert_eq!(out, vec![1; 62]);
    }

    #[test]
    fn a_producer_wakes_the_consumer_only_when_it_may_be_asleep() {
        let consumer = Ring::create("t", 4, 64).unwrap();
        let producer = Ring::from_fd(consumer.fd().try_clone_to_owned().unwrap(), 4, 64).unwrap();
        // A new ring: the consumer may be asleep.
        assert!(producer.wants_wakeup().unwrap());
        consumer.set_polling(true).unwrap();
        assert!(producer.push(b"m").unwrap());
        assert!(!producer.wants_wakeup().unwrap());
        // Going to sleep: clear, then look again — the message pushed while it polled is seen.
        consumer.set_polling(false).unwrap();
        assert!(!consumer.is_empty().unwrap());
        assert!(producer.wants_wakeup().unwrap());
    }

    #[test]
    fn a_broken_ring_is_reported_not_followed() {
        let a = Ring::create("t", 4, 64).unwrap();
        let b = Ring::from_fd(a.fd().try_clone_to_owned().unwrap(), 4, 64).unwrap();
        // The other side claims 100 messages.
        a.index(PRODUCER).unwrap().store(100, Ordering::Release);
        let mut out = Vec::new();
        assert_eq!(b.pop(&mut out), Err(RingError::Corrupt));
        assert_eq!(b.len(), Err(RingError::Corrupt));
        // A slot length beyond the slot.
        a.index(PRODUCER).unwrap().store(1, Ordering::Release);
        a.region.write(SLOTS, &[0xFF, 0xFF]).unwrap();
        assert_eq!(b.pop(&mut out), Err(RingError::Corrupt));
        assert!(Ring::create("t", 0, 64).is_err());
        assert!(Ring::create("t", 4, 12).is_err());
    }

    fn packet_pair(capacity: usize) -> (PacketRing, PacketRing) {
        let a = PacketRing::create("t", capacity).unwrap();
        let b = PacketRing::from_fd(a.fd().try_clone_to_owned().unwrap(), capacity).unwrap();
        (a, b)
    }

    #[test]
    fn records_of_any_length_cross_in_order_and_wrap() {
        let (tx, rx) = packet_pair(4096);
        let mut out = Vec::new();
        assert_eq!(rx.pop(&mut out).unwrap(), None);
        // Lengths that leave every alignment at the end of the area, many times around.
        let mut sent = std::collections::VecDeque::new();
        let mut n = 0u32;
        for round in 0..2000u32 {
            let len = (round as usize * 37) % 700;
            let rec: Vec<u8> = (0..len).map(|i| (i as u32 + round) as u8).collect();
            while !tx.push(round, &[&rec[..len / 2], &rec[len / 2..]]).unwrap() {
                let want: (u32, Vec<u8>) = sent.pop_front().unwrap();
                assert_eq!(rx.pop(&mut out).unwrap(), Some(want.0));
                assert_eq!(out, want.1);
                n += 1;
            }
            sent.push_back((round, rec));
        }
        while let Some(want) = sent.pop_front() {
            let got = rx.pop_with(|tag, b| (tag, b.to_vec())).unwrap();
            assert_eq!(got, Some(want));
            n += 1;
        }
        assert_eq!(n, 2000);
        assert!(rx.is_empty().unwrap());
        assert_eq!(rx.pop(&mut out).unwrap(), None);
    }

    #[test]
    fn the_largest_record_always_fits_once_the_ring_is_drained() {
        let (tx, rx) = packet_pair(4096);
        let big = vec![9u8; tx.max_record()];
        let mut out = Vec::new();
        for skew in [0usize, 8, 100, 1000, 2032, 2040] {
            assert!(tx.push(0, &[&vec![1u8; skew]]).unwrap());
            assert_eq!(rx.pop(&mut out).unwrap(), Some(0));
            assert!(tx.push(1, &[&big]).unwrap(), "skew {skew}");
            assert_eq!(rx.pop(&mut out).unwrap(), Some(1));
            assert_eq!(out, big);
        }
        assert_eq!(
            tx.push(0, &[&vec![0u8; tx.max_record() + 1]]),
            Err(RingError::TooLarge)
        );
    }

    #[test]
    fn a_broken_packet_ring_is_reported_not_followed() {
        let (tx, rx) = packet_pair(4096);
        let mut out = Vec::new();
        // A length beyond what was published.
        assert!(tx.push(0, &[b"abc"]).unwrap());
        tx.region.write(DATA, &200u32.to_le_bytes()).unwrap();
        assert_eq!(rx.pop(&mut out), Err(RingError::Corrupt));
        // A producer position beyond the area.
        tx.index(PRODUCER)
            .unwrap()
            .store(1 << 20, Ordering::Release);
        assert_eq!(rx.pop(&mut out), Err(RingError::Corrupt));
        assert_eq!(rx.is_empty(), Err(RingError::Corrupt));
        assert!(PacketRing::create("t", 5000).is_err());
        assert!(PacketRing::create("t", 1024).is_err());
    }

    #[test]
    fn the_packet_ring_wakeup_handshake_is_the_rings() {
        let (tx, rx) = packet_pair(4096);
        assert!(tx.wants_wakeup().unwrap());
        rx.set_polling(true).unwrap();
        assert!(tx.push(3, &[b"m"]).unwrap());
        assert!(!tx.wants_wakeup().unwrap());
        rx.set_polling(false).unwrap();
        assert!(!rx.is_empty().unwrap());
        assert!(tx.wants_wakeup().unwrap());
    }
}
