//! Registered memory: the [`Memory`] trait through which the engine reaches bytes, and the
//! memory-region table with its L_Key/R_Key, protection-domain, access and bounds checks.
//!
//! The engine checks every access *before* it touches memory (IBA §10.6.3, C10-?): the key
//! names a valid region, the region belongs to the QP's protection domain, the region grants
//! the access, and `[addr, addr + len)` lies inside it. Only then does it call [`Memory`], with
//! the embedder's own [`RegionId`] — so an embedder can never be asked for bytes outside what an
//! application registered.

use std::collections::BTreeMap;

use crate::verbs::AccessFlags;
use crate::PdHandle;

/// The embedder's name for the backing store of one region (a client's mapping, a `Vec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RegionId(pub u64);

/// An 8-byte atomic operation on remote memory (IBA §9.4.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AtomicOp {
    /// If the value equals `compare`, replace it with `swap`.
    CompareSwap {
        /// The value expected.
        compare: u64,
        /// The value written on a match.
        swap: u64,
    },
    /// Add `add` (wrapping).
    FetchAdd {
        /// The addend.
        add: u64,
    },
}

/// The embedder could not reach the memory it promised (a client process went away).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryFault;

/// How the engine reads and writes registered memory. Addresses are the virtual addresses the
/// application registered (`[addr, addr + length)` of the region); the engine has already
/// checked them against the region's bounds.
pub trait Memory {
    /// Copies `dst.len()` bytes at `addr` of `region` into `dst`.
    fn read(&mut self, region: RegionId, addr: u64, dst: &mut [u8]) -> Result<(), MemoryFault>;
    /// Copies `src` to `addr` of `region`, in order, so that the last byte becomes visible last
    /// (perftest's write latency test polls the last byte of a buffer).
    fn write(&mut self, region: RegionId, addr: u64, src: &[u8]) -> Result<(), MemoryFault>;
    /// Performs `op` on the 8 bytes at `addr` (native byte order, 8-byte aligned) atomically
    /// with respect to every other atomic of this HCA, and returns the original value.
    fn atomic(&mut self, region: RegionId, addr: u64, op: AtomicOp) -> Result<u64, MemoryFault>;
}

/// Memory made of plain byte vectors: one per region, for tests and the simulator.
#[derive(Debug, Clone, Default)]
pub struct VecMemory {
    regions: BTreeMap<RegionId, (u64, Vec<u8>)>,
}

impl VecMemory {
    /// An empty memory.
    pub fn new() -> VecMemory {
        VecMemory::default()
    }

    /// Adds a region of `len` zero bytes at virtual address `base`.
    pub fn add(&mut self, id: RegionId, base: u64, len: usize) {
        self.regions.insert(id, (base, vec![0; len]));
    }

    /// The bytes of a region.
    pub fn bytes(&self, id: RegionId) -> Option<&[u8]> {
        self.regions.get(&id).map(|(_, v)| v.as_slice())
    }

    /// The bytes of a region, writable.
    pub fn bytes_mut(&mut self, id: RegionId) -> Option<&mut Vec<u8>> {
        self.regions.get_mut(&id).map(|(_, v)| v)
    }

    fn range(&mut self, id: RegionId, addr: u64, len: usize) -> Result<&mut [u8], MemoryFault> {
        let (base, bytes) = self.regions.get_mut(&id).ok_or(MemoryFault)?;
        let start = usize::try_from(addr.checked_sub(*base).ok_or(MemoryFault)?)
            .map_err(|_| MemoryFault)?;
        let end = start.checked_add(len).ok_or(MemoryFault)?;
        bytes.get_mut(start..end).ok_or(MemoryFault)
    }
}

impl Memory for VecMemory {
    fn read(&mut self, region: RegionId, addr: u64, dst: &mut [u8]) -> Result<(), MemoryFault> {
        dst.copy_from_slice(self.range(region, addr, dst.len())?);
        Ok(())
    }

    fn write(&mut self, region: RegionId, addr: u64, src: &[u8]) -> Result<(), MemoryFault> {
        self.range(region, addr, src.len())?.copy_from_slice(src);
        Ok(())
    }

    fn atomic(&mut self, region: RegionId, addr: u64, op: AtomicOp) -> Result<u64, MemoryFault> {
        let slot = self.range(region, addr, 8)?;
        let mut b = [0u8; 8];
        b.copy_from_slice(slot);
        let orig = u64::from_le_bytes(b);
        let new = match op {
            AtomicOp::CompareSwap { compare, swap } => {
                if orig == compare {
                    swap
                } else {
                    orig
                }
            }
            AtomicOp::FetchAdd { add } => orig.wrapping_add(add),
        };
        slot.copy_from_slice(&new.to_le_bytes());
        Ok(orig)
    }
}

/// A registered memory region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mr {
    /// The protection domain it belongs to.
    pub pd: PdHandle,
    /// Its first virtual address.
    pub addr: u64,
    /// Its length in bytes.
    pub length: u64,
    /// What it allows.
    pub access: AccessFlags,
    /// Its L_Key (equal to its R_Key, as rxe does; the R_Key is honoured only with remote
    /// access flags).
    pub key: u32,
    /// The embedder's backing store.
    pub region: RegionId,
}

/// Why a key check failed. Maps onto completion statuses and NAK codes by the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyError {
    /// No region has this key (never registered, or deregistered or invalidated).
    InvalidKey,
    /// The region belongs to another protection domain.
    WrongPd,
    /// The region does not grant the access.
    AccessDenied,
    /// The range is not inside the region.
    OutOfBounds,
}

/// The memory-region table.
#[derive(Debug, Clone, Default)]
pub struct MrTable {
    by_key: BTreeMap<u32, Mr>,
}

impl MrTable {
    /// Registers a region under `key` (the caller makes keys unique).
    pub fn insert(&mut self, mr: Mr) {
        self.by_key.insert(mr.key, mr);
    }

    /// Removes the region with `key`.
    pub fn remove(&mut self, key: u32) -> Option<Mr> {
        self.by_key.remove(&key)
    }

    /// The region with `key`.
    pub fn get(&self, key: u32) -> Option<&Mr> {
        self.by_key.get(&key)
    }

    /// Whether `key` is in use.
    pub fn contains(&self, key: u32) -> bool {
        self.by_key.contains_key(&key)
    }

    /// How many regions belong to `pd`.
    pub fn count_in(&self, pd: PdHandle) -> usize {
        self.by_key.values().filter(|m| m.pd == pd).count()
    }

    /// The number of regions.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Checks `key` for `len` bytes at `addr` with rights `need` on behalf of a QP in `pd`,
    /// and returns the backing region. A zero-length access needs no valid key (IBA §9.4.4:
    /// zero-length RDMA operations do not check the R_Key).
    pub fn check(
        &self,
        key: u32,
        pd: PdHandle,
        addr: u64,
        len: u64,
        need: AccessFlags,
    ) -> Result<Option<RegionId>, KeyError> {
        if len == 0 {
            return Ok(None);
        }
        let mr = self.by_key.get(&key).ok_or(KeyError::InvalidKey)?;
        if mr.pd != pd {
            return Err(KeyError::WrongPd);
        }
        if !mr.access.contains(need) {
            return Err(KeyError::AccessDenied);
        }
        let end = addr.checked_add(len).ok_or(KeyError::OutOfBounds)?;
        let mr_end = mr.addr.saturating_add(mr.length);
        if addr < mr.addr || end > mr_end {
            return Err(KeyError::OutOfBounds);
        }
        Ok(Some(mr.region))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> MrTable {
        let mut t = MrTable::default();
        t.insert(Mr {
            pd: PdHandle(1),
            addr: 0x1000,
            length: 0x100,
            access: AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE),
            key: 0x0105,
            region: RegionId(9),
        });
        t
    }

    #[test]
    fn key_checks_in_order() {
        let t = table();
        let w = AccessFlags::REMOTE_WRITE;
        assert_eq!(
            t.check(0x0105, PdHandle(1), 0x1000, 0x100, w),
            Ok(Some(RegionId(9)))
        );
        assert_eq!(
            t.check(0x0106, PdHandle(1), 0x1000, 1, w),
            Err(KeyError::InvalidKey)
        );
        assert_eq!(
            t.check(0x0105, PdHandle(2), 0x1000, 1, w),
            Err(KeyError::WrongPd)
        );
        assert_eq!(
            t.check(0x0105, PdHandle(1), 0x1000, 1, AccessFlags::REMOTE_READ),
            Err(KeyError::AccessDenied)
        );
        assert_eq!(
            t.check(0x0105, PdHandle(1), 0x0fff, 2, w),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            t.check(0x0105, PdHandle(1), 0x10ff, 2, w),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            t.check(0x0105, PdHandle(1), u64::MAX, 2, w),
            Err(KeyError::OutOfBounds)
        );
        assert_eq!(
            t.check(0xdead, PdHandle(7), 0, 0, w),
            Ok(None),
            "zero length"
        );
    }

    #[test]
    fn vec_memory_atomics() {
        let mut m = VecMemory::new();
        m.add(RegionId(1), 0x2000, 16);
        let r = RegionId(1);
        assert_eq!(m.atomic(r, 0x2008, AtomicOp::FetchAdd { add: 5 }), Ok(0));
        assert_eq!(
            m.atomic(
                r,
                0x2008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 9
                }
            ),
            Ok(5)
        );
        assert_eq!(
            m.atomic(
                r,
                0x2008,
                AtomicOp::CompareSwap {
                    compare: 5,
                    swap: 1
                }
            ),
            Ok(9)
        );
        let mut b = [0u8; 8];
        m.read(r, 0x2008, &mut b).unwrap();
        assert_eq!(u64::from_le_bytes(b), 9);
        assert_eq!(m.write(r, 0x2010, &[1]), Err(MemoryFault));
    }
}
