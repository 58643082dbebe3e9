//! The HCA's shared resources as the transport roles see them: memory and the region table,
//! CQs, SRQs, address handles, ports, counters and the event queues. A QP role borrows this
//! while the HCA keeps the QP table separately, so a role can touch one QP and everything
//! else at once.

use std::collections::{BTreeMap, VecDeque};

use softib_wire::PKey;

use crate::config::{PortAttr, TransportConfig};
use crate::counters::{DropCounters, DropReason, PortCounters};
use crate::cq::{Cq, Pushed};
use crate::memory::{KeyError, Memory, MrTable};
use crate::qp::AddressVector;
use crate::verbs::{AccessFlags, AsyncEvent, RecvWr, Sge, WcStatus, WorkCompletion};
use crate::{AhHandle, CqHandle, PdHandle, SrqHandle};

/// A shared receive queue.
#[derive(Debug, Clone)]
pub struct Srq {
    /// Its protection domain.
    pub pd: PdHandle,
    pub(crate) wqes: VecDeque<RecvWr>,
    /// Its capacity.
    pub max_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// When nonzero, the limit event fires once the queue holds fewer WQEs, then disarms.
    pub limit: u32,
}

/// An address handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ah {
    /// Its protection domain.
    pub pd: PdHandle,
    /// Where it points.
    pub av: AddressVector,
}

/// Why a scatter into receive buffers failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScatterError {
    /// The message is longer than the buffers.
    TooLong,
    /// An SGE failed its L_Key check, or the memory could not be reached.
    Protection,
}

pub(crate) struct Resources<M> {
    pub mem: M,
    pub mrs: MrTable,
    pub cqs: BTreeMap<CqHandle, Cq>,
    pub srqs: BTreeMap<SrqHandle, Srq>,
    pub ahs: BTreeMap<AhHandle, Ah>,
    pub ports: Vec<PortAttr>,
    pub counters: Vec<PortCounters>,
    pub drops: DropCounters,
    pub events: VecDeque<AsyncEvent>,
    pub comp_events: VecDeque<CqHandle>,
    /// CQs that overflowed since the HCA last put their QPs in error.
    pub overflowed: Vec<CqHandle>,
    pub transport: TransportConfig,
}

impl<M: Memory> Resources<M> {
    /// Delivers a completion to a CQ, raising the CQ error event on overflow (the HCA then
    /// puts the CQ's QPs in error, `Hca::fail_overflowed_cqs`).
    pub fn complete(&mut self, cq: CqHandle, wc: WorkCompletion, solicited: bool) {
        let Some(q) = self.cqs.get_mut(&cq) else {
            return;
        };
        match q.push(wc, solicited) {
            Pushed::Queued { notify } => {
                if notify {
                    self.comp_events.push_back(cq);
                }
            }
            Pushed::Overflowed => {
                self.events.push_back(AsyncEvent::CqErr(cq));
                self.overflowed.push(cq);
            }
            Pushed::InError => {}
        }
    }
}

impl<M> Resources<M> {
    /// The port's attributes (port numbers start at 1).
    pub fn port(&self, port: u8) -> Option<&PortAttr> {
        self.ports.get(usize::from(port).checked_sub(1)?)
    }

    /// The port's counters.
    pub fn counters_mut(&mut self, port: u8) -> Option<&mut PortCounters> {
        self.counters.get_mut(usize::from(port).checked_sub(1)?)
    }

    /// The P_Key at `index` of `port`'s table.
    pub fn pkey(&self, port: u8, index: u16) -> PKey {
        self.port(port)
            .and_then(|p| p.pkeys.get(usize::from(index)).copied())
            .unwrap_or(PKey::DEFAULT)
    }

    /// Counts a dropped packet.
    pub fn drop_packet(&mut self, reason: DropReason) {
        self.drops.count(reason);
    }
}

impl<M: Memory> Resources<M> {
    /// Checks every SGE of a list for `need` in `pd`; returns the total length.
    pub fn check_sges(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        need: AccessFlags,
    ) -> Result<u64, KeyError> {
        let mut total = 0u64;
        for s in sges {
            self.mrs
                .check(s.lkey, pd, s.addr, u64::from(s.length), need)?;
            total += u64::from(s.length);
        }
        Ok(total)
    }

    /// Reads `out.len()` bytes of a message at `offset` from its SGEs.
    pub fn gather(
        &mut self,
        pd: PdHandle,
        sges: &[Sge],
        mut offset: u64,
        out: &mut [u8],
    ) -> Result<(), WcStatus> {
        let mut done = 0usize;
        for s in sges {
            if done == out.len() {
                break;
            }
            let len = u64::from(s.length);
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = ((len - offset) as usize).min(out.len() - done);
            let addr = s.addr + offset;
            let region = self
                .mrs
                .check(s.lkey, pd, addr, n as u64, AccessFlags::NONE)
                .map_err(|_| WcStatus::LocProtErr)?;
            if let Some(region) = region {
                self.mem
                    .read(region, addr, &mut out[done..done + n])
                    .map_err(|_| WcStatus::LocProtErr)?;
            }
            done += n;
            offset = 0;
        }
        if done == out.len() {
            Ok(())
        } else {
            Err(WcStatus::LocLenErr)
        }
    }

    /// Where `len` bytes of a message at `offset` lie, when they lie in one SGE (checked as
    /// `gather` checks them): the payload of an in-process packet, left in place. `Ok(None)`
    /// when they span SGEs or the SGE's region has no bytes: gather them instead.
    pub fn payload_ref(
        &self,
        pd: PdHandle,
        sges: &[Sge],
        mut offset: u64,
        len: u32,
    ) -> Result<Option<crate::PayloadRef>, WcStatus> {
        for s in sges {
            let sl = u64::from(s.length);
            if offset >= sl {
                offset -= sl;
                continue;
            }
            if offset + u64::from(len) > sl {
                return Ok(None);
            }
            let addr = s.addr + offset;
            let region = self
                .mrs
                .check(s.lkey, pd, addr, u64::from(len), AccessFlags::NONE)
                .map_err(|_| WcStatus::LocProtErr)?;
            return Ok(region.map(|region| crate::PayloadRef { region, addr, len }));
        }
        Err(WcStatus::LocLenErr)
    }

    /// Writes `data` into a message's SGEs at `offset` (LOCAL_WRITE required).
    pub fn scatter(
        &mut self,
        pd: PdHandle,
        sges: &[Sge],
        mut offset: u64,
        data: &[u8],
    ) -> Result<(), ScatterError> {
        let mut done = 0usize;
        for s in sges {
            if done == data.len() {
                break;
            }
            let len = u64::from(s.length);
            if offset >= len {
                offset -= len;
                continue;
            }
            let n = ((len - offset) as usize).min(data.len() - done);
            let addr = s.addr + offset;
            let region = self
                .mrs
                .check(s.lkey, pd, addr, n as u64, AccessFlags::LOCAL_WRITE)
                .map_err(|_| ScatterError::Protection)?;
            if let Some(region) = region {
                self.mem
                    .write(region, addr, &data[done..done + n])
                    .map_err(|_| ScatterError::Protection)?;
            }
            done += n;
            offset = 0;
        }
        if done == data.len() {
            Ok(())
        } else {
            Err(ScatterError::TooLong)
        }
    }

    /// Takes a receive WQE from an SRQ, raising the limit event when it falls below its limit.
    pub fn srq_pop(&mut self, srq: SrqHandle) -> Option<RecvWr> {
        let q = self.srqs.get_mut(&srq)?;
        let wr = q.wqes.pop_front()?;
        if q.limit > 0 && (q.wqes.len() as u32) < q.limit {
            q.limit = 0;
            self.events.push_back(AsyncEvent::SrqLimitReached(srq));
        }
        Some(wr)
    }

    /// Puts a receive WQE back at the head of an SRQ (a UC message that was dropped).
    pub fn srq_unpop(&mut self, srq: SrqHandle, wr: RecvWr) {
        if let Some(q) = self.srqs.get_mut(&srq) {
            q.wqes.push_front(wr);
        }
    }
}
