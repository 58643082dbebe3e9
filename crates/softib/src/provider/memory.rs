//! The process engine's [`Memory`]: the process's own registered memory, reached directly.
//!
//! Two kinds of region: a [`crate::Buffer`] (a memfd), which the provider maps a second
//! time so that the region stays valid whatever the application does with its `Buffer`, and
//! any other memory of the process (`reg_mr_process`, `reg_mr_shared`), reached at its own
//! addresses through raw pointers — the one `unsafe` of the provider. The engine checks key,
//! PD, access and bounds before it touches a region; every access here checks the bounds of
//! the region again, so that a bug in the engine cannot reach outside what was registered.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use softib_engine::memory::{AtomicOp, MemoryFault};
use softib_engine::{Memory, RegionId};
use softib_net::shm::SharedRegion;

use super::peers::{BufferRef, PayloadRef};

/// One registered region.
#[derive(Debug)]
enum Region {
    /// A buffer: where the application has it, the provider's own mapping of it, and its
    /// memfd's inode (which names it to a peer engine, with the descriptor's number).
    Mapped {
        base: u64,
        map: SharedRegion,
        ino: u64,
    },
    /// Process memory at its own addresses: `len` bytes from `base`.
    Own { base: u64, len: u64 },
}

/// The registered memory of one process engine.
#[derive(Debug, Default)]
pub(crate) struct LocalMemory {
    regions: BTreeMap<RegionId, Region>,
}

impl LocalMemory {
    /// Makes `map` (a mapping of a buffer the application has at `base`) reachable as `id`.
    pub(crate) fn add_mapped(&mut self, id: RegionId, base: u64, map: SharedRegion) {
        let ino = rustix::fs::fstat(map.fd()).map_or(0, |st| st.st_ino);
        self.regions.insert(id, Region::Mapped { base, map, ino });
    }

    /// Makes `len` bytes of this process's memory at `base` reachable as `id`.
    ///
    /// The caller promises what `Context::reg_mr_process` asks of its caller: the memory
    /// stays mapped and writable until the region is removed.
    pub(crate) fn add_own(&mut self, id: RegionId, base: u64, len: u64) {
        self.regions.insert(id, Region::Own { base, len });
    }

    /// Where `len` bytes at `addr` of `region` lie, for a peer engine to read them from
    /// there (bounds-checked): in a buffer (its memfd, as this process holds it, and the
    /// offset in it), or elsewhere in this process (the address).
    pub(crate) fn payload_ref(
        &self,
        region: RegionId,
        addr: u64,
        len: usize,
    ) -> Option<PayloadRef> {
        match (self.at(region, addr, len).ok()?, self.regions.get(&region)?) {
            (At::Mapped(map, off), Region::Mapped { ino, .. }) => match *ino {
                0 => Some(PayloadRef::Process(map.addr() + off as u64)),
                ino => Some(PayloadRef::Buffer(BufferRef {
                    fd: u32::try_from(map.fd().as_raw_fd()).ok()?,
                    ino,
                    offset: off as u64,
                })),
            },
            (At::Own(p), _) => Some(PayloadRef::Process(p as u64)),
            _ => None,
        }
    }

    /// Forgets a region.
    pub(crate) fn remove(&mut self, id: RegionId) {
        self.regions.remove(&id);
    }

    /// Where `len` bytes at `addr` of `region` lie, bounds-checked.
    fn at(&self, region: RegionId, addr: u64, len: usize) -> Result<At<'_>, MemoryFault> {
        let fits = |base: u64, size: u64| {
            let off = addr.checked_sub(base)?;
            let end = off.checked_add(len as u64)?;
            (end <= size).then_some(off)
        };
        match self.regions.get(&region).ok_or(MemoryFault)? {
            Region::Mapped { base, map, .. } => {
                let off = fits(*base, map.len() as u64).ok_or(MemoryFault)?;
                Ok(At::Mapped(map, off as usize))
            }
            Region::Own { base, len: size } => {
                fits(*base, *size).ok_or(MemoryFault)?;
                Ok(At::Own(addr as usize as *mut u8))
            }
        }
    }
}

enum At<'a> {
    Mapped(&'a SharedRegion, usize),
    Own(*mut u8),
}

impl Memory for LocalMemory {
    fn read(&mut self, region: RegionId, addr: u64, dst: &mut [u8]) -> Result<(), MemoryFault> {
        match self.at(region, addr, dst.len())? {
            At::Mapped(map, off) => map.read(off, dst).map_err(|_| MemoryFault),
            At::Own(p) => {
                #[allow(unsafe_code)]
                // SAFETY: `at` checked that the `dst.len()` bytes at `p` lie inside a region
                // registered with `add_own`, whose caller keeps it mapped until it is removed;
                // `dst` is the engine's own buffer, so the two do not overlap. The peer or
                // the application may write the region meanwhile, as hardware DMA races with
                // the CPU: the bytes are copied, never referenced.
                unsafe {
                    std::ptr::copy_nonoverlapping(p.cast_const(), dst.as_mut_ptr(), dst.len())
                };
                Ok(())
            }
        }
    }

    fn write(&mut self, region: RegionId, addr: u64, src: &[u8]) -> Result<(), MemoryFault> {
        match self.at(region, addr, src.len())? {
            At::Mapped(map, off) => map.write(off, src).map_err(|_| MemoryFault),
            At::Own(p) => {
                let Some((last, head)) = src.split_last() else {
                    return Ok(());
                };
                #[allow(unsafe_code)]
                // SAFETY: as in `read`: the bytes lie inside a registered region kept mapped
                // and writable by the caller of `add_own`, and `src` is the engine's. The last
                // byte is written last, after a release fence, as `Memory::write` promises
                // (perftest polls it).
                unsafe {
                    std::ptr::copy_nonoverlapping(head.as_ptr(), p, head.len());
                    std::sync::atomic::fence(Ordering::Release);
                    std::ptr::write_volatile(p.add(head.len()), *last);
                }
                Ok(())
            }
        }
    }

    fn atomic(&mut self, region: RegionId, addr: u64, op: AtomicOp) -> Result<u64, MemoryFault> {
        let word: &AtomicU64 = match self.at(region, addr, 8)? {
            At::Mapped(map, off) => map.atomic_u64(off).map_err(|_| MemoryFault)?,
            At::Own(p) => {
                if p.align_offset(std::mem::align_of::<AtomicU64>()) != 0 {
                    return Err(MemoryFault);
                }
                #[allow(unsafe_code)]
                // SAFETY: the 8 bytes at `p` lie inside a registered region kept mapped and
                // writable (see `read`), and `p` is aligned for an `AtomicU64`; the reference
                // lives only for this call and every access through it is atomic.
                unsafe {
                    &*p.cast::<AtomicU64>()
                }
            }
        };
        Ok(match op {
            AtomicOp::FetchAdd { add } => word.fetch_add(add, Ordering::SeqCst),
            AtomicOp::CompareSwap { compare, swap } => {
                match word.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(v) | Err(v) => v,
                }
            }
        })
    }
}

// SAFETY: the raw addresses of `Own` regions are plain process memory with no thread
// affinity, touched only through copies and atomics by whichever thread holds the engine.
#[allow(unsafe_code)]
unsafe impl Send for LocalMemory {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn accesses_stay_inside_their_region() {
        let mut mem = LocalMemory::default();
        let mut own = vec![0u64; 4];
        let base = own.as_mut_ptr() as u64;
        mem.add_own(RegionId(1), base, 32);
        mem.write(RegionId(1), base + 8, &[1, 2, 3]).unwrap();
        let mut back = [0u8; 3];
        mem.read(RegionId(1), base + 8, &mut back).unwrap();
        assert_eq!(back, [1, 2, 3]);
        assert!(mem.write(RegionId(1), base + 30, &[0; 3]).is_err());
        assert!(mem.read(RegionId(1), base - 1, &mut back).is_err());
        assert!(mem.read(RegionId(2), base, &mut back).is_err());
        assert_eq!(
            mem.atomic(RegionId(1), base + 16, AtomicOp::FetchAdd { add: 5 })
                .unwrap(),
            0
        );
        assert!(mem
            .atomic(RegionId(1), base + 17, AtomicOp::FetchAdd { add: 5 })
            .is_err());
        assert_eq!(own[2], 5);

        let map = SharedRegion::create("softib-unit-local", 4096).unwrap();
        let at = 0x7000_0000u64;
        let fd = map.fd().as_raw_fd() as u32;
        mem.add_mapped(RegionId(3), at, map);
        mem.write(RegionId(3), at + 4090, &[9; 6]).unwrap();
        // A peer may reach it through its memfd, within the bounds; own memory it may not.
        let Some(PayloadRef::Buffer(r)) = mem.payload_ref(RegionId(3), at + 96, 4000) else {
            panic!("in a buffer");
        };
        assert_eq!((r.fd, r.offset), (fd, 96));
        assert_ne!(r.ino, 0);
        assert!(mem.payload_ref(RegionId(3), at + 97, 4000).is_none());
        assert_eq!(
            mem.payload_ref(RegionId(1), base + 8, 8),
            Some(PayloadRef::Process(base + 8))
        );
        assert!(mem.write(RegionId(3), at + 4091, &[9; 6]).is_err());
        mem.remove(RegionId(3));
        assert!(mem.read(RegionId(3), at, &mut back).is_err());
    }
}
