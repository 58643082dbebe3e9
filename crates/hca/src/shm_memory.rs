//! The engine's [`Memory`] over what applications registered: buffers they share with the
//! daemon (memfds, reached with loads and stores) or any memory of their own (reached with
//! cross-memory attach, `softib_net::procmem`).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use softib_engine::memory::{AtomicOp, MemoryFault};
use softib_engine::{Memory, RegionId};
use softib_net::procmem::ProcessMemory;
use softib_net::shm::SharedRegion;

/// One registered region.
#[derive(Debug, Clone)]
enum Region {
    /// A shared buffer: where it starts in the client, and the daemon's mapping of it.
    Shared {
        client_base: u64,
        map: Rc<SharedRegion>,
    },
    /// Memory of the client process itself, at the client's own addresses.
    Process(ProcessMemory),
}

/// Registered memory of every client of one device.
#[derive(Debug, Default)]
pub struct ShmMemory {
    regions: BTreeMap<RegionId, Region>,
}

impl ShmMemory {
    /// No regions.
    pub fn new() -> ShmMemory {
        ShmMemory::default()
    }

    /// Makes `map`, mapped at `client_base` in its client, reachable as `id`.
    pub fn add(&mut self, id: RegionId, client_base: u64, map: Rc<SharedRegion>) {
        self.regions.insert(id, Region::Shared { client_base, map });
    }

    /// Makes memory of process `mem` reachable as `id` (the engine's MR table bounds it).
    pub fn add_process(&mut self, id: RegionId, mem: ProcessMemory) {
        self.regions.insert(id, Region::Process(mem));
    }

    /// Forgets a region.
    pub fn remove(&mut self, id: RegionId) {
        self.regions.remove(&id);
    }

    /// The mapping that holds `len` bytes at `addr` of `region`, and their offset in it: a
    /// payload to hand to another device of this daemon as it lies. `None` for memory of the
    /// client process itself (reached by system calls, not mapped) or out of bounds.
    pub fn borrow(
        &self,
        region: RegionId,
        addr: u64,
        len: usize,
    ) -> Option<(Rc<SharedRegion>, usize)> {
        match self.regions.get(&region)? {
            Region::Shared { client_base, map } => {
                let off = usize::try_from(addr.checked_sub(*client_base)?).ok()?;
                (off.checked_add(len)? <= map.len()).then(|| (Rc::clone(map), off))
            }
            Region::Process(_) => None,
        }
    }

    fn at(&self, region: RegionId, addr: u64) -> Result<At<'_>, MemoryFault> {
        match self.regions.get(&region).ok_or(MemoryFault)? {
            Region::Shared { client_base, map } => {
                let off = addr.checked_sub(*client_base).ok_or(MemoryFault)?;
                Ok(At::Shared(
                    map,
                    usize::try_from(off).map_err(|_| MemoryFault)?,
                ))
            }
            Region::Process(p) => Ok(At::Process(*p)),
        }
    }
}

enum At<'a> {
    Shared(&'a SharedRegion, usize),
    Process(ProcessMemory),
}

impl Memory for ShmMemory {
    fn read(&mut self, region: RegionId, addr: u64, dst: &mut [u8]) -> Result<(), MemoryFault> {
        match self.at(region, addr)? {
            At::Shared(map, off) => map.read(off, dst).map_err(|_| MemoryFault),
            At::Process(p) => p.read(addr, dst).map_err(|_| MemoryFault),
        }
    }

    fn write(&mut self, region: RegionId, addr: u64, src: &[u8]) -> Result<(), MemoryFault> {
        match self.at(region, addr)? {
            At::Shared(map, off) => map.write(off, src).map_err(|_| MemoryFault),
            At::Process(p) => p.write(addr, src).map_err(|_| MemoryFault),
        }
    }

    fn atomic(&mut self, region: RegionId, addr: u64, op: AtomicOp) -> Result<u64, MemoryFault> {
        let (map, off) = match self.at(region, addr)? {
            At::Shared(map, off) => (map, off),
            At::Process(p) => {
                // Read, compute, write: atomic with respect to every other atomic of this HCA
                // (one thread performs them all), which is what IBA atomics promise without
                // ATOMIC_GLOB; the application's own CPU atomics are not ordered with it.
                let mut b = [0u8; 8];
                p.read(addr, &mut b).map_err(|_| MemoryFault)?;
                let old = u64::from_ne_bytes(b);
                let new = match op {
                    AtomicOp::FetchAdd { add } => Some(old.wrapping_add(add)),
                    AtomicOp::CompareSwap { compare, swap } => (old == compare).then_some(swap),
                };
                if let Some(v) = new {
                    p.write(addr, &v.to_ne_bytes()).map_err(|_| MemoryFault)?;
                }
                return Ok(old);
            }
        };
        let word = map.atomic_u64(off).map_err(|_| MemoryFault)?;
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
