//! The engine's [`Memory`] over buffers applications share with the daemon (memfds).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::Ordering;

use softib_engine::memory::{AtomicOp, MemoryFault};
use softib_engine::{Memory, RegionId};
use softib_net::shm::SharedRegion;

/// One registered region: where the buffer starts in the client, and the mapping.
#[derive(Debug, Clone)]
struct Region {
    client_base: u64,
    map: Rc<SharedRegion>,
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
        self.regions.insert(id, Region { client_base, map });
    }

    /// Forgets a region.
    pub fn remove(&mut self, id: RegionId) {
        self.regions.remove(&id);
    }

    fn at(&self, region: RegionId, addr: u64) -> Result<(&SharedRegion, usize), MemoryFault> {
        let r = self.regions.get(&region).ok_or(MemoryFault)?;
        let off = addr.checked_sub(r.client_base).ok_or(MemoryFault)?;
        Ok((&r.map, usize::try_from(off).map_err(|_| MemoryFault)?))
    }
}

impl Memory for ShmMemory {
    fn read(&mut self, region: RegionId, addr: u64, dst: &mut [u8]) -> Result<(), MemoryFault> {
        let (map, off) = self.at(region, addr)?;
        map.read(off, dst).map_err(|_| MemoryFault)
    }

    fn write(&mut self, region: RegionId, addr: u64, src: &[u8]) -> Result<(), MemoryFault> {
        let (map, off) = self.at(region, addr)?;
        map.write(off, src).map_err(|_| MemoryFault)
    }

    fn atomic(&mut self, region: RegionId, addr: u64, op: AtomicOp) -> Result<u64, MemoryFault> {
        let (map, off) = self.at(region, addr)?;
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
