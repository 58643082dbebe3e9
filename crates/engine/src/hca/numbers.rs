//! Where QP numbers and memory keys come from, and the ones set aside for engines elsewhere.
//!
//! A device's QPNs and keys must be unique across every engine that serves it: the daemon's
//! and those of the processes whose data path runs in their own address space (each with its
//! own `Hca`). The daemon's engine is the authority: it sets aside blocks of
//! [`QPN_BLOCK`] QPNs ([`Hca::reserve_qpn_block`]) and single keys ([`Hca::reserve_key`]) that
//! its own `create_qp` and `reg_mr` never hand out; a process's engine then makes its QPs and
//! regions with exactly those numbers ([`Hca::create_qp_numbered`], [`Hca::reg_mr_keyed`]).

use std::collections::BTreeSet;

use softib_wire::Qpn;

use super::{Hca, VerbsError};
use crate::memory::{Memory, Mr, RegionId};
use crate::qp::{Qp, QpInitAttr};
use crate::verbs::AccessFlags;
use crate::PdHandle;

/// The QPNs of one block: a process's QPs are few contiguous ranges, so the steering program
/// that sends their datagrams to it stays small (64: a thousand QPs are 16 ranges).
pub const QPN_BLOCK: u32 = 64;

/// The largest QPN (24 bits); 0xFFFFFF itself is the multicast QPN.
const QPN_MAX: u32 = 0x00FF_FFFF;

/// QPN blocks and keys set aside, and where the search for the next block starts.
#[derive(Debug, Clone, Default)]
pub(super) struct Reserved {
    /// First QPN of each reserved block (each [`QPN_BLOCK`] long, aligned to it).
    blocks: BTreeSet<u32>,
    /// Where the next block search starts (a block's first QPN); 0 until the first search.
    next_block: u32,
    keys: BTreeSet<u32>,
}

impl Reserved {
    fn holds_qpn(&self, q: u32) -> bool {
        self.blocks.contains(&(q & !(QPN_BLOCK - 1)))
    }
}

impl<M: Memory> Hca<M> {
    /// Sets aside a block of [`QPN_BLOCK`] QPNs that no QP of this engine has and that its own
    /// `create_qp` will never hand out; returns the first. Blocks are aligned to their size
    /// and never include QP0, QP1 or the multicast QPN.
    pub fn reserve_qpn_block(&mut self) -> Result<Qpn, VerbsError> {
        let blocks = (QPN_MAX + 1) / QPN_BLOCK;
        if self.reserved.next_block == 0 {
            // Above where the engine's own QPNs start (0x10..0x1010), spread by the seed.
            self.reserved.next_block = (0x80 + self.rng.below(0x800) as u32) * QPN_BLOCK;
        }
        for _ in 0..blocks {
            let first = self.reserved.next_block;
            self.reserved.next_block = match first + QPN_BLOCK {
                n if n > QPN_MAX - QPN_BLOCK => QPN_BLOCK,
                n => n,
            };
            let last = first + QPN_BLOCK - 1;
            if first == 0 || last >= QPN_MAX || self.reserved.blocks.contains(&first) {
                continue;
            }
            if self.qps.keys().any(|q| (first..=last).contains(&q.value())) {
                continue;
            }
            self.reserved.blocks.insert(first);
            return Ok(Qpn::new(first));
        }
        Err(VerbsError::Exhausted("the QPN space"))
    }

    /// Gives a block back (its QPNs may be handed out again); false if it was not reserved.
    pub fn release_qpn_block(&mut self, first: Qpn) -> bool {
        self.reserved.blocks.remove(&first.value())
    }

    /// Whether `qpn` lies in a reserved block.
    pub fn qpn_reserved(&self, qpn: Qpn) -> bool {
        self.reserved.holds_qpn(qpn.value())
    }

    /// Sets aside a memory key no region of this engine has and its own `reg_mr` will never
    /// hand out (made as `reg_mr` makes keys).
    pub fn reserve_key(&mut self) -> Result<u32, VerbsError> {
        if self.reserved.keys.len() >= self.device.max_mr as usize {
            return Err(VerbsError::Exhausted("the memory key space"));
        }
        let key = self.fresh_key();
        self.reserved.keys.insert(key);
        Ok(key)
    }

    /// Gives a key back; false if it was not reserved.
    pub fn release_key(&mut self, key: u32) -> bool {
        self.reserved.keys.remove(&key)
    }

    /// Whether `key` is reserved.
    pub fn key_reserved(&self, key: u32) -> bool {
        self.reserved.keys.contains(&key)
    }

    /// Creates a QP numbered `qpn` (one the daemon handed out), in the RESET state.
    pub fn create_qp_numbered(&mut self, init: QpInitAttr, qpn: Qpn) -> Result<(), VerbsError> {
        self.check_create_qp(&init)?;
        let q = qpn.value();
        if q <= 1 || q >= QPN_MAX {
            return Err(VerbsError::Invalid(
                "a QP cannot be numbered 0, 1 or 0xFFFFFF",
            ));
        }
        if self.qps.contains_key(&qpn) || self.reserved.holds_qpn(q) {
            return Err(VerbsError::Busy("the QPN is taken"));
        }
        self.qps.insert(qpn, Qp::new(qpn, init));
        Ok(())
    }

    /// Registers a region under `key` (one the daemon handed out), as [`Hca::reg_mr`] does
    /// otherwise.
    pub fn reg_mr_keyed(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        access: AccessFlags,
        region: RegionId,
        key: u32,
    ) -> Result<(), VerbsError> {
        self.check_reg_mr(pd, addr, length, access)?;
        if key >> 8 == 0 {
            return Err(VerbsError::Invalid("a memory key's index cannot be 0"));
        }
        if self.res.mrs.contains(key) || self.reserved.keys.contains(&key) {
            return Err(VerbsError::Busy("the memory key is taken"));
        }
        self.insert_mr(pd, addr, length, access, region, key);
        Ok(())
    }

    /// Enters a checked region under `key`.
    pub(super) fn insert_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        access: AccessFlags,
        region: RegionId,
        key: u32,
    ) {
        self.res.mrs.insert(Mr {
            pd,
            addr,
            length,
            access,
            key,
            region,
        });
    }

    /// The checks of `ibv_reg_mr` before a key is chosen.
    pub(super) fn check_reg_mr(
        &self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        access: AccessFlags,
    ) -> Result<(), VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if length > self.device.max_mr_size {
            return Err(VerbsError::Invalid(
                "length exceeds the device's max_mr_size",
            ));
        }
        if addr.checked_add(length).is_none() {
            return Err(VerbsError::Invalid(
                "addr + length overflows the address space",
            ));
        }
        // IBA §11.2.8.2 (and ibv_reg_mr): remote write or atomic access needs local write.
        if (access.contains(AccessFlags::REMOTE_WRITE)
            || access.contains(AccessFlags::REMOTE_ATOMIC))
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::Invalid(
                "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE",
            ));
        }
        if self.res.mrs.len() >= self.device.max_mr as usize {
            return Err(VerbsError::Exhausted("the MR table"));
        }
        Ok(())
    }

    /// A key no region has and none reserved: index << 8 | an 8-bit key, like rxe's; the key
    /// bits come from the seed so a stale key is unlikely to name a new region.
    pub(super) fn fresh_key(&mut self) -> u32 {
        loop {
            let index = self.next_key_index & 0x00FF_FFFF;
            self.next_key_index = self.next_key_index.wrapping_add(1).max(1);
            let key = (index << 8) | (self.rng.next_u32() & 0xFF);
            if index != 0 && !self.res.mrs.contains(key) && !self.reserved.keys.contains(&key) {
                return key;
            }
        }
    }

    /// The checks of `ibv_create_qp` before a number is chosen.
    pub(super) fn check_create_qp(&self, init: &QpInitAttr) -> Result<(), VerbsError> {
        if !self.pds.contains(&init.pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if !self.res.cqs.contains_key(&init.send_cq) || !self.res.cqs.contains_key(&init.recv_cq) {
            return Err(VerbsError::NotFound("CQ"));
        }
        if let Some(srq) = init.srq {
            if !self.res.srqs.contains_key(&srq) {
                return Err(VerbsError::NotFound("SRQ"));
            }
        }
        let d = &self.device;
        let c = &init.cap;
        if c.max_send_wr > d.max_qp_wr || c.max_recv_wr > d.max_qp_wr {
            return Err(VerbsError::Invalid(
                "max_send_wr/max_recv_wr beyond max_qp_wr",
            ));
        }
        if c.max_send_sge > d.max_sge || c.max_recv_sge > d.max_sge {
            return Err(VerbsError::Invalid(
                "max_send_sge/max_recv_sge beyond max_sge",
            ));
        }
        if c.max_inline_data > d.max_inline_data {
            return Err(VerbsError::Invalid(
                "max_inline_data beyond the device's limit",
            ));
        }
        if self.qps.len() >= d.max_qp as usize {
            return Err(VerbsError::Exhausted("the QP table"));
        }
        Ok(())
    }

    /// A QPN no QP has, outside the reserved blocks.
    pub(super) fn fresh_qpn(&mut self) -> Qpn {
        loop {
            let q = self.next_qpn & QPN_MAX;
            self.next_qpn = self.next_qpn.wrapping_add(1);
            if q > 1
                && q != QPN_MAX
                && !self.reserved.holds_qpn(q)
                && !self.qps.contains_key(&Qpn::new(q))
            {
                return Qpn::new(q);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::verbs::QpType;
    use crate::{CqHandle, HcaConfig, QpCap, VecMemory};

    fn hca() -> (Hca<VecMemory>, QpInitAttr) {
        let mut h = Hca::new(HcaConfig::with_seed(3), VecMemory::new());
        let pd = h.alloc_pd().unwrap();
        let cq = h.create_cq(16).unwrap();
        let init = QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: CqHandle(cq.0),
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        };
        (h, init)
    }

    /// A send WQE holds the QP's SGEs or its inline data, whichever is more, and the QP
    /// gets both (rxe's `rxe_qp_init_req`): one SGE and no inline data is 16 bytes inline.
    #[test]
    fn a_qp_gets_what_its_send_wqe_holds_as_rxe_gives_it() {
        let (mut h, init) = hca();
        for ((sge, inline), (got_sge, got_inline)) in [
            ((1, 0), (1, 16)),
            ((2, 100), (6, 100)),
            ((4, 0), (4, 64)),
            ((0, 0), (0, 0)),
        ] {
            let mut init = init;
            init.cap.max_send_sge = sge;
            init.cap.max_inline_data = inline;
            let qpn = h.create_qp(init).unwrap();
            let cap = h.query_qp(qpn).unwrap().1.cap;
            assert_eq!(
                (cap.max_send_sge, cap.max_inline_data),
                (got_sge, got_inline),
                "asked for {sge} SGEs and {inline} bytes inline"
            );
        }
    }

    #[test]
    fn a_reserved_block_is_never_handed_out_by_create_qp() {
        let (mut h, init) = hca();
        let block = h.reserve_qpn_block().unwrap();
        assert_eq!(block.value() % QPN_BLOCK, 0);
        // Walk the engine's own counter over the whole block.
        h.next_qpn = block.value() - 3;
        let made: Vec<Qpn> = (0..8).map(|_| h.create_qp(init).unwrap()).collect();
        assert!(made.iter().all(|q| !h.qpn_reserved(*q)), "{made:?}");
        assert_eq!(made[3].value(), block.value() + QPN_BLOCK);
        // Another block never overlaps the first nor a QP that exists.
        let second = h.reserve_qpn_block().unwrap();
        assert_ne!(second, block);
        for q in &made {
            assert!(!(second.value()..second.value() + QPN_BLOCK).contains(&q.value()));
        }
        // The daemon's own engine refuses to number a QP inside a reservation; once released,
        // the number is free.
        let inside = Qpn::new(block.value() + 5);
        assert_eq!(
            h.create_qp_numbered(init, inside),
            Err(VerbsError::Busy("the QPN is taken"))
        );
        assert!(h.release_qpn_block(block));
        assert!(!h.release_qpn_block(block));
        h.create_qp_numbered(init, inside).unwrap();
        assert_eq!(
            h.create_qp_numbered(init, inside),
            Err(VerbsError::Busy("the QPN is taken"))
        );
        assert!(h.create_qp_numbered(init, Qpn::new(1)).is_err());
    }

    #[test]
    fn a_block_with_a_qp_in_it_is_skipped() {
        let (mut h, init) = hca();
        let probe = h.reserve_qpn_block().unwrap();
        h.release_qpn_block(probe);
        h.reserved.next_block = probe.value();
        h.create_qp_numbered(init, Qpn::new(probe.value() + 63))
            .unwrap();
        let got = h.reserve_qpn_block().unwrap();
        assert_eq!(got.value(), probe.value() + QPN_BLOCK);
    }

    #[test]
    fn reserved_keys_are_not_reused_and_keyed_regions_are_checked() {
        let (mut h, _) = hca();
        let pd = h.alloc_pd().unwrap();
        let key = h.reserve_key().unwrap();
        assert!(h.key_reserved(key));
        for _ in 0..300 {
            let k = h
                .reg_mr(pd, 0, 8, AccessFlags::LOCAL_WRITE, RegionId(1))
                .unwrap();
            assert_ne!(k, key);
        }
        // A process's engine registers under a key it was given; a taken one is refused.
        let (mut p, _) = hca();
        let ppd = p.alloc_pd().unwrap();
        p.reg_mr_keyed(ppd, 0x1000, 64, AccessFlags::LOCAL_WRITE, RegionId(1), key)
            .unwrap();
        assert_eq!(
            p.reg_mr_keyed(ppd, 0x1000, 64, AccessFlags::LOCAL_WRITE, RegionId(2), key),
            Err(VerbsError::Busy("the memory key is taken"))
        );
        assert!(p
            .reg_mr_keyed(ppd, 0, 8, AccessFlags::REMOTE_WRITE, RegionId(3), key + 1)
            .is_err());
        assert_eq!(p.mr(key).map(|m| m.length), Some(64));
        assert!(h.release_key(key));
        assert!(!h.key_reserved(key));
    }
}
