//! The HCA: the object tables, the verbs commands, and the sans-IO driving interface
//! (`handle_packet`, `handle_timeout`, `poll_transmit`, `poll_timeout`, `poll_event`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use softib_wire::packet::parse_body;
use softib_wire::packet::TransportRepr;
use softib_wire::{Gid, Lid, Qpn, Transport};

use crate::config::{DeviceAttr, HcaConfig, PortAttr};
use crate::counters::{DropCounters, DropReason, PortCounters};
use crate::cq::Cq;
use crate::memory::{Memory, Mr, MrTable, RegionId};
use crate::qp::{
    attr, AddressVector, AttrMask, ModifyQpError, Qp, QpAttr, QpCap, QpInitAttr, SendWqe,
};
use crate::res::{Ah, Resources, Srq};
use crate::rng::Rng;
use crate::time::Instant;
use crate::verbs::{
    AccessFlags, AsyncEvent, QpState, QpType, RecvWr, SendFlags, SendWr, WcStatus, WorkCompletion,
    WrOpcode,
};
use crate::{AhHandle, CqHandle, PdHandle, RxMeta, SrqHandle, Transmit};

mod invariants;
mod numbers;
mod screen;

pub use numbers::QPN_BLOCK;

/// Why a verbs command was refused. Nothing changed. The text fits "failed to ...: {error}".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum VerbsError {
    /// A handle or number names no object (the text says which kind).
    NotFound(&'static str),
    /// An argument is not acceptable (the text says which and why).
    Invalid(&'static str),
    /// A queue or table is full (the text says which).
    Exhausted(&'static str),
    /// The object is still in use (the text says by what).
    Busy(&'static str),
    /// The QP's state does not allow the operation.
    WrongState {
        /// The QP.
        qpn: Qpn,
        /// Its state.
        state: QpState,
        /// What was attempted.
        op: &'static str,
    },
    /// `modify_qp` refused.
    ModifyQp(ModifyQpError),
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VerbsError::NotFound(what) => write!(f, "no such {what}"),
            VerbsError::Invalid(why) => write!(f, "invalid argument: {why}"),
            VerbsError::Exhausted(what) => write!(f, "{what} is full"),
            VerbsError::Busy(why) => write!(f, "still in use: {why}"),
            VerbsError::WrongState { qpn, state, op } => {
                write!(f, "QP {qpn} is in {state}, which does not allow {op}")
            }
            VerbsError::ModifyQp(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for VerbsError {}

impl From<ModifyQpError> for VerbsError {
    fn from(e: ModifyQpError) -> VerbsError {
        VerbsError::ModifyQp(e)
    }
}

/// The QPs by number. Every packet looks its QP up several times (delivery, the transmit
/// schedule, rescheduling), and with hundreds of QPs a `BTreeMap`'s search was a tenth of a
/// busy daemon; a hash table with a fixed hash keeps runs reproducible (no per-process
/// seed), and what must come out in order (`qpns`, events) is sorted. QPNs are the engine's
/// own choice, so no peer can pick keys that collide.
type QpTable = std::collections::HashMap<Qpn, Qp, crate::hash::FixedState>;

/// A soft HCA: one device with its ports, as a pure state machine over memory `M`.
pub struct Hca<M: Memory> {
    device: DeviceAttr,
    rng: Rng,
    res: Resources<M>,
    qps: QpTable,
    pds: BTreeSet<PdHandle>,
    next_handle: u32,
    next_qpn: u32,
    next_key_index: u32,
    /// QPN blocks and keys set aside for engines elsewhere (`numbers`).
    reserved: numbers::Reserved,
    timers: BTreeSet<(Instant, Qpn)>,
    schedule: VecDeque<Qpn>,
    /// Multicast groups this HCA's UD QPs are attached to (`ibv_attach_mcast`): MGID → its
    /// MLID and the attached QPs. A packet to QPN 0xFFFFFF is delivered to every QP attached
    /// to the group its GRH's DGID names.
    mcast: BTreeMap<Gid, (Lid, BTreeSet<Qpn>)>,
    /// The latest `now` any input carried: commands without a time of their own (posting,
    /// modifying) judge readiness by it.
    last_now: Instant,
}

/// The checks `ibv_post_send` makes on a send WR that depend only on the QP's type and
/// capabilities (not its state or queue): on success, the message length. The library runs
/// them too, before it puts a WR in a submission ring, so that the verb still fails at once.
pub fn check_send_wr(
    qp_type: QpType,
    cap: &QpCap,
    wr: &SendWr,
    max_msg: u32,
) -> Result<u64, VerbsError> {
    if !wr.opcode.allowed_on(qp_type) {
        return Err(VerbsError::Invalid(
            "the opcode is not available on this QP type",
        ));
    }
    if (qp_type == QpType::Ud) != wr.ud.is_some() {
        return Err(VerbsError::Invalid(
            "UD send WRs need an address handle and remote QPN; connected QPs take none",
        ));
    }
    let inline = wr.flags.contains(SendFlags::INLINE);
    let len: u64 = match (&wr.inline_data, inline) {
        (Some(data), true) => {
            if wr.opcode.is_read_or_atomic() {
                return Err(VerbsError::Invalid("READ and atomics cannot be inline"));
            }
            if data.len() > cap.max_inline_data as usize {
                return Err(VerbsError::Invalid(
                    "inline data larger than max_inline_data",
                ));
            }
            data.len() as u64
        }
        (None, false) => {
            if wr.sg_list.len() > cap.max_send_sge as usize {
                return Err(VerbsError::Invalid("more SGEs than the QP's max_send_sge"));
            }
            wr.sg_list.iter().map(|s| u64::from(s.length)).sum()
        }
        _ => {
            return Err(VerbsError::Invalid(
                "inline_data must be given exactly when SendFlags::INLINE is set",
            ))
        }
    };
    if matches!(
        wr.opcode,
        WrOpcode::AtomicCmpAndSwp { .. } | WrOpcode::AtomicFetchAndAdd { .. }
    ) && len != 8
    {
        return Err(VerbsError::Invalid(
            "atomics need exactly 8 bytes of local buffer",
        ));
    }
    if len > u64::from(max_msg) {
        return Err(VerbsError::Invalid("message larger than max_msg_sz"));
    }
    Ok(len)
}

impl<M: Memory> Hca<M> {
    /// An HCA made from `config`, reaching registered memory through `memory`.
    pub fn new(config: HcaConfig, memory: M) -> Hca<M> {
        let mut rng = Rng::new(config.seed);
        // QPNs start at a seeded place above the special QPs, as hardware spreads them.
        let next_qpn = 0x10 + (rng.below(0x1000) as u32);
        let nports = config.ports.len();
        Hca {
            device: config.device,
            rng,
            res: Resources {
                mem: memory,
                mrs: MrTable::default(),
                cqs: BTreeMap::new(),
                srqs: BTreeMap::new(),
                ahs: BTreeMap::new(),
                ports: config.ports,
                counters: vec![PortCounters::default(); nports],
                drops: DropCounters::default(),
                events: VecDeque::new(),
                comp_events: VecDeque::new(),
                overflowed: Vec::new(),
                transport: config.transport,
            },
            qps: QpTable::default(),
            pds: BTreeSet::new(),
            next_handle: 1,
            next_qpn,
            next_key_index: 1,
            reserved: numbers::Reserved::default(),
            timers: BTreeSet::new(),
            schedule: VecDeque::new(),
            mcast: BTreeMap::new(),
            last_now: Instant::ZERO,
        }
    }

    // ---- getters ----------------------------------------------------------------------------

    /// The device attributes.
    pub fn device(&self) -> &DeviceAttr {
        &self.device
    }

    /// A port's attributes (ports are numbered from 1).
    pub fn port(&self, port: u8) -> Option<&PortAttr> {
        self.res.port(port)
    }

    /// A port's counters.
    pub fn counters(&self, port: u8) -> Option<&PortCounters> {
        self.res.counters.get(usize::from(port).checked_sub(1)?)
    }

    /// Drops by reason, over all ports.
    pub fn drops(&self) -> &DropCounters {
        &self.res.drops
    }

    /// A QP.
    pub fn qp(&self, qpn: Qpn) -> Option<&Qp> {
        self.qps.get(&qpn)
    }

    /// Every QP number, ascending.
    pub fn qpns(&self) -> impl Iterator<Item = Qpn> + '_ {
        let mut qpns: Vec<Qpn> = self.qps.keys().copied().collect();
        qpns.sort_unstable();
        qpns.into_iter()
    }

    /// The memory.
    pub fn memory(&self) -> &M {
        &self.res.mem
    }

    /// The memory, writable (tests and embedders that own the bytes).
    pub fn memory_mut(&mut self) -> &mut M {
        &mut self.res.mem
    }

    /// Marks whether a QP's peer is an engine of this process (the link knows: it hands that
    /// peer's packets over in-process; it decides once, when the QP gets its path at RTR,
    /// from the address vector). An RC QP so marked sends each SEND and WRITE that
    /// starts from now on in segments of [`crate::IN_PROCESS_SEGMENT`] bytes, asks for each
    /// READ that starts from now on to be answered in them, and leaves
    /// payloads (its requests', its READ responses') in memory ([`Transmit::payload`]); its
    /// `poll_transmit` buffer must hold [`crate::IN_PROCESS_MAX_LEN`] bytes. The receiving
    /// engine must be told the packets are in-process ([`RxMeta::in_process`]). Other QP
    /// types ignore it. Moving the QP to RESET or giving it a new path clears it.
    pub fn set_in_process(&mut self, qpn: Qpn, in_process: bool) {
        if let Some(qp) = self.qps.get_mut(&qpn) {
            qp.in_process = in_process && qp.qp_type() == QpType::Rc;
        }
    }

    /// Appends a [`Transmit`]'s payload left in memory to its headers in `buf` (where
    /// `poll_transmit` wrote them) with its pad, so that the packet is whole: for a link that
    /// carries it rather than handing it over. Returns false when the memory is gone or `buf`
    /// is too short; the packet is then lost, as on a wire — except that a request whose own
    /// payload can no longer be read fails its work request with a local protection error,
    /// as the gather would have had the engine copied it.
    pub fn materialize(&mut self, t: &mut Transmit, buf: &mut [u8]) -> bool {
        let Some(p) = t.payload else {
            return true;
        };
        let n = p.len as usize;
        let pad = usize::from(softib_wire::packet::pad_for(n));
        let Some(out) = buf.get_mut(t.len..t.len + n + pad) else {
            return false;
        };
        let (body, tail) = out.split_at_mut(n);
        if self.res.mem.read(p.region, p.addr, body).is_err() {
            let request = t.opcode.info().is_some_and(|i| i.kind.is_request());
            let psn = buf
                .get(..softib_wire::bth::HEADER_LEN)
                .and_then(|b| softib_wire::BthPacket::new_checked(b).ok())
                .map(|b| b.psn());
            if let (true, Some(psn)) = (request, psn) {
                if let Some(qp) = self.qps.get_mut(&t.src_qpn) {
                    qp.local_read_failed(psn, &mut self.res);
                }
            }
            return false;
        }
        tail.fill(0);
        t.len += n + pad;
        t.payload = None;
        true
    }

    /// A registered region.
    pub fn mr(&self, key: u32) -> Option<&Mr> {
        self.res.mrs.get(key)
    }

    // ---- ports ------------------------------------------------------------------------------

    /// Changes a port's state (the link came up or went down), with the async event.
    pub fn set_port_active(&mut self, port: u8, active: bool) -> Result<(), VerbsError> {
        let idx = usize::from(port)
            .checked_sub(1)
            .filter(|&i| i < self.res.ports.len())
            .ok_or(VerbsError::NotFound("port"))?;
        if self.res.ports[idx].active != active {
            self.res.ports[idx].active = active;
            self.res.events.push_back(if active {
                AsyncEvent::PortActive(port)
            } else {
                AsyncEvent::PortErr(port)
            });
        }
        Ok(())
    }

    /// Replaces a port's attributes (LID, GIDs, P_Keys, MTUs), e.g. when the SM configures it.
    pub fn set_port_attr(&mut self, port: u8, attr: PortAttr) -> Result<(), VerbsError> {
        let idx = usize::from(port)
            .checked_sub(1)
            .filter(|&i| i < self.res.ports.len())
            .ok_or(VerbsError::NotFound("port"))?;
        let was = self.res.ports[idx].active;
        let now_active = attr.active;
        self.res.ports[idx] = PortAttr {
            active: was,
            ..attr
        };
        self.set_port_active(port, now_active)
    }

    // ---- PDs, MRs, CQs, SRQs, AHs -----------------------------------------------------------

    fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdHandle, VerbsError> {
        if self.pds.len() >= self.device.max_pd as usize {
            return Err(VerbsError::Exhausted("the PD table"));
        }
        let pd = PdHandle(self.handle());
        self.pds.insert(pd);
        Ok(pd)
    }

    /// Frees a protection domain that nothing uses any more.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.res.mrs.count_in(pd) > 0 {
            return Err(VerbsError::Busy("memory regions are registered in it"));
        }
        if self.qps.values().any(|q| q.init.pd == pd) {
            return Err(VerbsError::Busy("QPs were created in it"));
        }
        if self.res.srqs.values().any(|s| s.pd == pd) || self.res.ahs.values().any(|a| a.pd == pd) {
            return Err(VerbsError::Busy(
                "SRQs or address handles were created in it",
            ));
        }
        self.pds.remove(&pd);
        Ok(())
    }

    /// Registers `length` bytes at `addr` (backed by the embedder's `region`) with `access`;
    /// returns the key, which is both the L_Key and (with remote access) the R_Key.
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        addr: u64,
        length: u64,
        access: AccessFlags,
        region: RegionId,
    ) -> Result<u32, VerbsError> {
        self.check_reg_mr(pd, addr, length, access)?;
        let key = self.fresh_key();
        self.insert_mr(pd, addr, length, access, region, key);
        Ok(key)
    }

    /// Deregisters a region.
    pub fn dereg_mr(&mut self, key: u32) -> Result<Mr, VerbsError> {
        self.res
            .mrs
            .remove(key)
            .ok_or(VerbsError::NotFound("memory region"))
    }

    /// Creates a CQ with room for `cqe` completions.
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle, VerbsError> {
        if cqe == 0 || cqe > self.device.max_cqe {
            return Err(VerbsError::Invalid("cqe must be 1..=max_cqe"));
        }
        if self.res.cqs.len() >= self.device.max_cq as usize {
            return Err(VerbsError::Exhausted("the CQ table"));
        }
        let cq = CqHandle(self.handle());
        self.res.cqs.insert(cq, Cq::new(cqe as usize));
        Ok(cq)
    }

    /// Destroys a CQ no QP uses.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbsError> {
        if self
            .qps
            .values()
            .any(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
        {
            return Err(VerbsError::Busy("QPs complete into it"));
        }
        self.res
            .cqs
            .remove(&cq)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("CQ"))
    }

    /// Takes the oldest completion of a CQ.
    pub fn poll_cq(&mut self, cq: CqHandle) -> Option<WorkCompletion> {
        self.res.cqs.get_mut(&cq)?.pop()
    }

    /// How many completions wait in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> usize {
        self.res.cqs.get(&cq).map_or(0, Cq::len)
    }

    /// Whether CQ `cq` exists.
    pub fn has_cq(&self, cq: CqHandle) -> bool {
        self.res.cqs.contains_key(&cq)
    }

    /// Arms a CQ's completion event (`ibv_req_notify_cq`).
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), VerbsError> {
        self.res
            .cqs
            .get_mut(&cq)
            .ok_or(VerbsError::NotFound("CQ"))?
            .req_notify(solicited_only);
        Ok(())
    }

    /// The next completion event (a CQ that was armed got a completion).
    pub fn poll_comp_event(&mut self) -> Option<CqHandle> {
        self.res.comp_events.pop_front()
    }

    /// Creates a shared receive queue.
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<SrqHandle, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if max_wr == 0 || max_wr > self.device.max_srq_wr || max_sge > self.device.max_sge {
            return Err(VerbsError::Invalid(
                "max_wr or max_sge beyond the device's limits",
            ));
        }
        if self.res.srqs.len() >= self.device.max_srq as usize {
            return Err(VerbsError::Exhausted("the SRQ table"));
        }
        let srq = SrqHandle(self.handle());
        self.res.srqs.insert(
            srq,
            Srq {
                pd,
                wqes: VecDeque::new(),
                max_wr,
                max_sge,
                limit: 0,
            },
        );
        Ok(srq)
    }

    /// Whether SRQ `srq` exists.
    pub fn has_srq(&self, srq: SrqHandle) -> bool {
        self.res.srqs.contains_key(&srq)
    }

    /// Arms the SRQ limit event: it fires once when fewer than `limit` WQEs remain.
    pub fn modify_srq(&mut self, srq: SrqHandle, limit: u32) -> Result<(), VerbsError> {
        let q = self
            .res
            .srqs
            .get_mut(&srq)
            .ok_or(VerbsError::NotFound("SRQ"))?;
        if limit > q.max_wr {
            return Err(VerbsError::Invalid("srq_limit exceeds max_wr"));
        }
        q.limit = limit;
        Ok(())
    }

    /// Destroys an SRQ no QP uses.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbsError> {
        if self.qps.values().any(|q| q.init.srq == Some(srq)) {
            return Err(VerbsError::Busy("QPs receive from it"));
        }
        self.res
            .srqs
            .remove(&srq)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("SRQ"))
    }

    /// Posts a receive WQE to an SRQ.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), VerbsError> {
        let q = self
            .res
            .srqs
            .get_mut(&srq)
            .ok_or(VerbsError::NotFound("SRQ"))?;
        if q.wqes.len() >= q.max_wr as usize {
            return Err(VerbsError::Exhausted("the SRQ"));
        }
        if wr.sg_list.len() > q.max_sge as usize {
            return Err(VerbsError::Invalid("more SGEs than the SRQ's max_sge"));
        }
        q.wqes.push_back(wr);
        Ok(())
    }

    /// Creates an address handle.
    pub fn create_ah(&mut self, pd: PdHandle, av: AddressVector) -> Result<AhHandle, VerbsError> {
        if !self.pds.contains(&pd) {
            return Err(VerbsError::NotFound("protection domain"));
        }
        if self.res.port(av.port_num).is_none() {
            return Err(VerbsError::Invalid("port_num names no port of this device"));
        }
        if self.res.ahs.len() >= self.device.max_ah as usize {
            return Err(VerbsError::Exhausted("the AH table"));
        }
        let ah = AhHandle(self.handle());
        self.res.ahs.insert(ah, Ah { pd, av });
        Ok(ah)
    }

    /// The address vector of an address handle.
    pub fn ah_av(&self, ah: AhHandle) -> Option<&AddressVector> {
        self.res.ahs.get(&ah).map(|a| &a.av)
    }

    /// Destroys an address handle.
    pub fn destroy_ah(&mut self, ah: AhHandle) -> Result<(), VerbsError> {
        self.res
            .ahs
            .remove(&ah)
            .map(|_| ())
            .ok_or(VerbsError::NotFound("address handle"))
    }

    // ---- QPs --------------------------------------------------------------------------------

    /// Creates a QP in the RESET state; returns its number.
    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<Qpn, VerbsError> {
        self.check_create_qp(&init)?;
        let qpn = self.fresh_qpn();
        self.qps.insert(qpn, Qp::new(qpn, init));
        Ok(qpn)
    }

    /// Destroys a QP. Its outstanding work is discarded without completions, as
    /// `ibv_destroy_qp` does.
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), VerbsError> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        if let Some(t) = qp.armed {
            self.timers.remove(&(t, qpn));
        }
        // A destroyed QP leaves its groups (ibv_destroy_qp detaches, as the kernel does).
        self.mcast.retain(|_, (_, qps)| {
            qps.remove(&qpn);
            !qps.is_empty()
        });
        Ok(())
    }

    /// Attaches a UD QP to the multicast group `mgid`/`mlid` (`ibv_attach_mcast`): packets
    /// to QPN 0xFFFFFF whose GRH names `mgid` reach it. Attaching twice is not an error.
    pub fn attach_mcast(&mut self, qpn: Qpn, mgid: Gid, mlid: Lid) -> Result<(), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        if qp.qp_type() != QpType::Ud {
            return Err(VerbsError::Invalid(
                "only UD QPs can be attached to a multicast group",
            ));
        }
        if mgid.0[0] != 0xFF {
            return Err(VerbsError::Invalid(
                "the MGID is not a multicast GID (its first byte must be 0xFF)",
            ));
        }
        if !mlid.is_multicast() && mlid != Lid::UNASSIGNED {
            return Err(VerbsError::Invalid(
                "the MLID is not a multicast LID (0xC000..=0xFFFE)",
            ));
        }
        let entry = self.mcast.entry(mgid).or_insert((mlid, BTreeSet::new()));
        entry.0 = mlid;
        entry.1.insert(qpn);
        Ok(())
    }

    /// Detaches a QP from a multicast group (`ibv_detach_mcast`).
    pub fn detach_mcast(&mut self, qpn: Qpn, mgid: Gid) -> Result<(), VerbsError> {
        let Some((_, qps)) = self.mcast.get_mut(&mgid) else {
            return Err(VerbsError::NotFound("multicast group"));
        };
        if !qps.remove(&qpn) {
            return Err(VerbsError::NotFound("QP in the multicast group"));
        }
        if qps.is_empty() {
            self.mcast.remove(&mgid);
        }
        Ok(())
    }

    /// The QP's attributes and state (`ibv_query_qp`).
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        Ok((a, qp.init))
    }

    /// Modifies a QP (`ibv_modify_qp`): checks the mask against the state table and the values
    /// against the device, then applies them and performs the transition.
    pub fn modify_qp(&mut self, qpn: Qpn, attr: &QpAttr, mask: AttrMask) -> Result<(), VerbsError> {
        let qp = self.qps.get(&qpn).ok_or(ModifyQpError::UnknownQp(qpn))?;
        let to = attr::validate(qp.qp_type(), qp.state, attr, mask)?;
        let port = if mask.contains(AttrMask::PORT) {
            attr.port_num
        } else {
            qp.attr.port_num
        };
        let Some(port_attr) = self.res.port(port) else {
            return Err(
                ModifyQpError::InvalidValue("port_num names no port of this device").into(),
            );
        };
        if mask.contains(AttrMask::PKEY_INDEX)
            && usize::from(attr.pkey_index) >= port_attr.pkeys.len()
        {
            return Err(
                ModifyQpError::InvalidValue("pkey_index beyond the port's P_Key table").into(),
            );
        }
        if mask.contains(AttrMask::PATH_MTU)
            && attr.path_mtu.bytes().unwrap_or(usize::MAX) > port_attr.max_mtu.bytes().unwrap_or(0)
        {
            return Err(
                ModifyQpError::InvalidValue("path_mtu larger than the port's max_mtu").into(),
            );
        }
        if mask.contains(AttrMask::MAX_QP_RD_ATOMIC)
            && attr.max_rd_atomic > self.device.max_qp_init_rd_atom
        {
            return Err(
                ModifyQpError::InvalidValue("max_rd_atomic beyond max_qp_init_rd_atom").into(),
            );
        }
        if mask.contains(AttrMask::MAX_DEST_RD_ATOMIC)
            && attr.max_dest_rd_atomic > self.device.max_qp_rd_atom
        {
            return Err(
                ModifyQpError::InvalidValue("max_dest_rd_atomic beyond max_qp_rd_atom").into(),
            );
        }
        if mask.contains(AttrMask::AV) {
            if let Some(g) = attr.ah_attr.grh {
                if usize::from(g.sgid_index) >= port_attr.gids.len().max(1) {
                    return Err(ModifyQpError::InvalidValue(
                        "ah_attr.grh.sgid_index beyond the port's GID table",
                    )
                    .into());
                }
            }
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return Err(ModifyQpError::UnknownQp(qpn).into());
        };
        let a = &mut qp.attr;
        let m = |bit| mask.contains(bit);
        if m(AttrMask::ACCESS_FLAGS) {
            a.qp_access_flags = attr.qp_access_flags;
        }
        if m(AttrMask::PKEY_INDEX) {
            a.pkey_index = attr.pkey_index;
        }
        if m(AttrMask::PORT) {
            a.port_num = attr.port_num;
        }
        if m(AttrMask::QKEY) {
            a.qkey = attr.qkey;
        }
        if m(AttrMask::AV) {
            a.ah_attr = attr.ah_attr;
            a.ah_attr.port_num = a.port_num;
            // A new path may lead elsewhere: the link marks it again from the new path.
            qp.in_process = false;
        }
        if m(AttrMask::PATH_MTU) {
            a.path_mtu = attr.path_mtu;
        }
        if m(AttrMask::TIMEOUT) {
            a.timeout = attr.timeout;
        }
        if m(AttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
        }
        if m(AttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
        }
        if m(AttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn;
        }
        if m(AttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn;
        }
        if m(AttrMask::MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = attr.max_rd_atomic;
        }
        if m(AttrMask::MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = attr.max_dest_rd_atomic;
        }
        if m(AttrMask::MIN_RNR_TIMER) {
            a.min_rnr_timer = attr.min_rnr_timer;
        }
        if m(AttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num;
        }
        // SQD -> SQD may change these while work is outstanding: a finite timeout starts the
        // ACK timer if the infinite one left it stopped, and a smaller responder limit
        // forgets the oldest READ/atomic resources at once.
        if m(AttrMask::TIMEOUT) {
            qp.sq.resume_retransmit(self.last_now, qp.attr.timeout);
        }
        if m(AttrMask::MAX_DEST_RD_ATOMIC) {
            qp.resp.limit_resources(qp.attr.max_dest_rd_atomic);
        }
        let from = qp.state;
        match to {
            QpState::Reset => {
                qp.reset();
                qp.state = QpState::Reset;
            }
            QpState::Err => {
                if from != QpState::Err {
                    qp.enter_error(&mut self.res, None);
                }
            }
            QpState::Rtr => {
                if m(AttrMask::RQ_PSN) {
                    qp.resp.epsn = qp.attr.rq_psn;
                }
                qp.state = to;
            }
            QpState::Rts => {
                if m(AttrMask::SQ_PSN) {
                    qp.sq.start_at(qp.attr.sq_psn);
                }
                qp.sq.reset_retries(qp.attr.retry_cnt, qp.attr.rnr_retry);
                qp.state = to;
            }
            QpState::Sqd => {
                qp.state = to;
                // The SQ is drained when every WQE that had started is finished: at once, or
                // later (see `reschedule`). `has_outstanding` alone missed a WQE partly sent.
                if qp.sq.begin_drain() {
                    self.res.events.push_back(AsyncEvent::SqDrained(qpn));
                }
            }
            _ => qp.state = to,
        }
        self.reschedule(qpn);
        Ok(())
    }

    /// Posts a send WR (`ibv_post_send`). Checks what can be checked now; what depends on
    /// memory or the peer is reported in the WR's completion.
    pub fn post_send(&mut self, qpn: Qpn, wr: SendWr) -> Result<(), VerbsError> {
        let max_msg = self.device.max_msg_sz;
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        match qp.state {
            QpState::Rts | QpState::Sqd | QpState::Err | QpState::Sqe => {}
            state => {
                return Err(VerbsError::WrongState {
                    qpn,
                    state,
                    op: "posting send work requests (the QP must be in RTS)",
                })
            }
        }
        if qp.sq.len() >= qp.init.cap.max_send_wr as usize {
            return Err(VerbsError::Exhausted("the send queue"));
        }
        let len = check_send_wr(qp.qp_type(), &qp.init.cap, &wr, max_msg)?;
        let signaled = qp.init.sq_sig_all || wr.flags.contains(SendFlags::SIGNALED);
        let flush = matches!(qp.state, QpState::Err | QpState::Sqe);
        qp.sq.post(SendWqe::new(
            wr,
            len as u32,
            signaled,
            flush.then_some(WcStatus::WrFlushErr),
        ));
        if flush {
            qp.retire(&mut self.res);
        }
        self.reschedule(qpn);
        Ok(())
    }

    /// Posts a receive WR (`ibv_post_recv`).
    pub fn post_recv(&mut self, qpn: Qpn, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NotFound("QP"))?;
        if qp.init.srq.is_some() {
            return Err(VerbsError::Invalid(
                "the QP receives from an SRQ; post there",
            ));
        }
        if qp.state == QpState::Reset {
            return Err(VerbsError::WrongState {
                qpn,
                state: qp.state,
                op: "posting receives (move it to INIT first)",
            });
        }
        if qp.rq.len() >= qp.init.cap.max_recv_wr as usize {
            return Err(VerbsError::Exhausted("the receive queue"));
        }
        if wr.sg_list.len() > qp.init.cap.max_recv_sge as usize {
            return Err(VerbsError::Invalid("more SGEs than the QP's max_recv_sge"));
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            qp.flush_receives(&mut self.res);
            self.fail_overflowed_cqs();
        }
        self.debug_check_qp(qpn);
        Ok(())
    }

    // ---- driving ----------------------------------------------------------------------------

    /// Handles a received transport packet: `body` runs from the BTH through the pad; the link
    /// has verified and removed the ICRC (and VCRC). Never fails: what cannot be delivered is
    /// dropped and counted by reason.
    pub fn handle_packet(&mut self, now: Instant, port: u8, meta: &RxMeta, body: &[u8]) {
        let parsed = parse_body(body);
        self.handle_parsed(now, port, meta, body.len(), parsed);
    }

    /// Handles a received transport packet whose payload lies apart from its headers: what a
    /// [`Transmit`] with a [`Transmit::payload`] becomes when handed over in-process (the
    /// payload then goes straight from the sender's memory into the receiver's). `headers`
    /// runs from the BTH through the last extension header; `payload` has no pad.
    pub fn handle_packet_parts(
        &mut self,
        now: Instant,
        port: u8,
        meta: &RxMeta,
        headers: &[u8],
        payload: &[u8],
    ) {
        let parsed = TransportRepr::parse(headers).and_then(|(t, rest)| {
            let has_payload = t.bth.opcode.info().is_some_and(|i| i.has_payload);
            let pad_ok = usize::from(t.bth.pad_count)
                == usize::from(softib_wire::packet::pad_for(payload.len()));
            if !rest.is_empty() || !pad_ok || (!has_payload && !payload.is_empty()) {
                Err(softib_wire::Error::Malformed(
                    "headers and a separate payload do not agree",
                ))
            } else {
                Ok((t, payload))
            }
        });
        let pad = usize::from(softib_wire::packet::pad_for(payload.len()));
        self.handle_parsed(now, port, meta, headers.len() + payload.len() + pad, parsed);
    }

    fn handle_parsed(
        &mut self,
        now: Instant,
        port: u8,
        meta: &RxMeta,
        body_len: usize,
        parsed: softib_wire::Result<(TransportRepr, &[u8])>,
    ) {
        self.last_now = self.last_now.max(now);
        let Some(counters) = self.res.counters_mut(port) else {
            return;
        };
        counters.rcv_pkts += 1;
        counters.rcv_data_words += (body_len as u64 + 4) / 4;
        let (t, payload) = match parsed.and_then(|(t, p)| t.check_headers().map(|()| (t, p))) {
            Ok(v) => v,
            Err(softib_wire::Error::Unsupported(_)) => {
                self.res.drop_packet(DropReason::UnsupportedOpcode);
                return;
            }
            Err(_) => {
                if let Some(c) = self.res.counters_mut(port) {
                    c.rcv_errors += 1;
                }
                self.res.drop_packet(DropReason::Malformed);
                return;
            }
        };
        if t.bth.tver != 0 {
            self.res.drop_packet(DropReason::TransportVersion);
            return;
        }
        if !self.res.port(port).is_some_and(|p| p.active) {
            self.res.drop_packet(DropReason::PortNotActive);
            return;
        }
        let qpn = t.bth.dest_qpn;
        if qpn == Qpn::MULTICAST {
            // IBA §10.5.2.4: a multicast packet carries a GRH; its DGID names the group.
            let group = meta
                .grh
                .map(|g| {
                    let mut gid = [0u8; 16];
                    gid.copy_from_slice(&g[24..40]);
                    Gid(gid)
                })
                .filter(|_| t.bth.opcode.transport() == Transport::Ud)
                .and_then(|mgid| self.mcast.get(&mgid));
            let Some((_, members)) = group else {
                self.res.drop_packet(DropReason::Multicast);
                return;
            };
            let members: Vec<Qpn> = members.iter().copied().collect();
            for member in members {
                self.deliver(now, port, meta, &t, payload, member);
            }
            return;
        }
        self.deliver(now, port, meta, &t, payload, qpn);
    }

    /// The part of `handle_packet` for one destination QP.
    fn deliver(
        &mut self,
        now: Instant,
        port: u8,
        meta: &RxMeta,
        t: &TransportRepr,
        payload: &[u8],
        qpn: Qpn,
    ) {
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.res.drop_packet(DropReason::UnknownQp);
            return;
        };
        let transport_ok = matches!(
            (t.bth.opcode.transport(), qp.qp_type()),
            (Transport::Rc, QpType::Rc) | (Transport::Uc, QpType::Uc) | (Transport::Ud, QpType::Ud)
        );
        if !transport_ok {
            self.res.drop_packet(DropReason::WrongTransport);
            return;
        }
        if !matches!(
            qp.state,
            QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
        ) {
            self.res.drop_packet(DropReason::QpNotReceiving);
            return;
        }
        // IBA §10.9.3: the packet's P_Key must match the QP's partition, and at least one of
        // the two must be a full member.
        let own = self.res.pkey(qp.attr.port_num, qp.attr.pkey_index);
        let theirs = t.bth.pkey;
        if own.base() != theirs.base() || (!own.is_full_member() && !theirs.is_full_member()) {
            self.res.drop_packet(DropReason::PKeyMismatch);
            if let Some(c) = self.res.counters_mut(port) {
                c.pkey_violations += 1;
            }
            return;
        }
        let is_request = t.bth.opcode.info().is_some_and(|i| i.kind.is_request());
        if is_request {
            qp.responder_handle(now, &mut self.res, meta, t, payload);
        } else if qp.qp_type() == QpType::Rc {
            qp.completer_handle(now, &mut self.res, t, payload);
        } else {
            self.res.drop_packet(DropReason::WrongTransport);
        }
        self.reschedule(qpn);
    }

    /// Fires every timer that is due at `now`. Safe to call early or spuriously.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        while let Some(&(t, qpn)) = self.timers.first() {
            if t > now {
                break;
            }
            self.timers.remove(&(t, qpn));
            if let Some(qp) = self.qps.get_mut(&qpn) {
                qp.armed = None;
                qp.completer_timeout(now, &mut self.res);
            }
            self.reschedule(qpn);
        }
    }

    /// Writes the next packet to send into `buf` (at least
    /// [`crate::qp::requester::MAX_TRANSPORT_LEN`] bytes; BTH through pad, the link adds its
    /// headers and the CRCs) and says where it goes. Call until it returns `None`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.last_now = self.last_now.max(now);
        while let Some(qpn) = self.schedule.pop_front() {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            qp.scheduled = false;
            let port_up = self.res.port(qp.attr.port_num).is_some_and(|p| p.active);
            // `requester_poll` finds nothing to send exactly when `requester_ready` would say
            // so, before it changes anything: asking first scanned the send queue twice.
            let tx = if qp.responder_ready() {
                qp.responder_poll(&mut self.res, buf)
            } else if port_up {
                qp.requester_poll(now, &mut self.res, buf)
            } else {
                None
            };
            self.reschedule(qpn);
            if let Some(tx) = tx {
                if !port_up {
                    if let Some(c) = self.res.counters_mut(tx.port) {
                        c.xmit_discards += 1;
                    }
                    continue;
                }
                return Some(tx);
            }
        }
        None
    }

    /// The next deadline at which `handle_timeout` has work, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|&(t, _)| t)
    }

    /// The next asynchronous event.
    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.res.events.pop_front()
    }

    /// IBA §11.6.3.1 and what hardware does: a CQ that overflowed is in error (CQ_ERR was
    /// raised), and so is every QP that completes into it (QP_FATAL): its work is flushed and
    /// it answers nothing more, so its peer's requests end in retries exceeded. The QPs used
    /// to go on as if nothing had happened, their completions silently lost.
    fn fail_overflowed_cqs(&mut self) {
        while let Some(cq) = self.res.overflowed.pop() {
            let qpns: Vec<Qpn> = self
                .qps
                .values()
                .filter(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
                .filter(|q| !matches!(q.state, QpState::Reset | QpState::Err))
                .map(|q| q.qpn)
                .collect();
            let mut qpns = qpns;
            // In QPN order, whatever the table's: the events come out the same every run.
            qpns.sort_unstable();
            for qpn in qpns {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.enter_error(&mut self.res, None);
                    self.res.events.push_back(AsyncEvent::QpFatal(qpn));
                }
                self.reschedule(qpn);
            }
        }
    }

    /// Puts a QP in the transmit schedule if it has something to send, and re-arms its timer.
    fn reschedule(&mut self, qpn: Qpn) {
        self.fail_overflowed_cqs();
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        // IBA §10.3.1 (SQD) and §11.6.3.1: when a QP entered SQD with work in progress, the SQ
        // Drained event follows the completion of that work, not only an SQD entered with
        // nothing outstanding.
        if qp.state == QpState::Sqd && qp.sq.drained() {
            self.res.events.push_back(AsyncEvent::SqDrained(qpn));
        }
        // The timer set holds, per QP, a time no later than its earliest deadline. A deadline
        // that moves later (every acknowledgement pushes the retransmission timer out) leaves
        // the entry as it is: it fires early, `handle_timeout` does only what is due, and the
        // QP is armed again then. The set so changes about once per timeout instead of on
        // every acknowledgement (with 256 busy QPs its updates were 5% of the daemon). A
        // deadline that goes away takes its entry with it, so an idle HCA has no timer.
        let deadline = qp.deadline();
        let rearm = match (deadline, qp.armed) {
            (Some(d), Some(a)) => d < a,
            (d, a) => d != a,
        };
        if rearm {
            if let Some(t) = qp.armed {
                self.timers.remove(&(t, qpn));
            }
            if let Some(t) = deadline {
                self.timers.insert((t, qpn));
            }
            qp.armed = deadline;
        }
        if !qp.scheduled {
            let port_up = self.res.port(qp.attr.port_num).is_some_and(|p| p.active);
            let ready =
                qp.responder_ready() || (port_up && qp.requester_ready(self.last_now, &self.res));
            if ready {
                qp.scheduled = true;
                self.schedule.push_back(qpn);
            }
        }
        self.debug_check_qp(qpn);
    }
}
