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

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

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
        let flag = self.index(POLLING)?;
        if (flag.load(Ordering::Relaxed) != 0) != polling {
            flag.store(u64::from(polling), Ordering::Relaxed);
            // Only clearing needs the fence (the producer must not miss it); a producer that
            // misses a set only rings once more than it needed to. A flag cleared earlier was
            // fenced then.
            if !polling {
                std::sync::atomic::fence(Ordering::SeqCst);
            }
        }
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
}
