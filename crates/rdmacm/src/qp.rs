//! Queue pairs on ids: `rdma_create_qp` (INIT at once, as rdma_cm leaves it),
//! `rdma_destroy_qp`, `rdma_init_qp_attr`, and the RTR/RTS steps the connection takes (from
//! the REP on the active side, from the REQ before the REP on the passive side, as the
//! kernel's rdma_cm does), and ERR at disconnect.

use std::ffi::c_int;

use softib_verbs_abi::rdma_cm::{port_space, RdmaCmId};
use softib_verbs_abi::{
    qp_type, IbvAhAttr, IbvGid, IbvGlobalRoute, IbvPd, IbvQp, IbvQpAttr, IbvQpInitAttr,
    IbvQpInitAttrEx,
};

use crate::agent::{self, IdState, State};
use crate::ibv::ibv;
use crate::{ffi, set_errno};

/// `ibv_qp_attr_mask` bits.
#[allow(missing_docs)]
pub mod mask {
    pub const STATE: i32 = 1;
    pub const ACCESS_FLAGS: i32 = 1 << 3;
    pub const PKEY_INDEX: i32 = 1 << 4;
    pub const PORT: i32 = 1 << 5;
    pub const QKEY: i32 = 1 << 6;
    pub const AV: i32 = 1 << 7;
    pub const PATH_MTU: i32 = 1 << 8;
    pub const TIMEOUT: i32 = 1 << 9;
    pub const RETRY_CNT: i32 = 1 << 10;
    pub const RNR_RETRY: i32 = 1 << 11;
    pub const RQ_PSN: i32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const MIN_RNR_TIMER: i32 = 1 << 15;
    pub const SQ_PSN: i32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const DEST_QPN: i32 = 1 << 20;
}

/// `enum ibv_qp_state`.
#[allow(missing_docs)]
pub mod state {
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
    pub const ERR: u32 = 6;
}

pub use softib_cm::rdma_cm::UDP_QKEY;

/// Local write and every remote access: what rdma_cm's RC QPs allow once connected.
const ACCESS: u32 = 0x1 | 0x2 | 0x4 | 0x8;

/// The INIT attributes of an id's QP.
fn init_attr(id: &IdState, qp_kind: u32) -> (IbvQpAttr, c_int) {
    let mut a = IbvQpAttr {
        qp_state: state::INIT,
        pkey_index: 0,
        port_num: 1,
        ..IbvQpAttr::default()
    };
    let mut m = mask::STATE | mask::PKEY_INDEX | mask::PORT;
    if qp_kind == qp_type::UD {
        a.qkey = if id.ps == port_space::IB { 0 } else { UDP_QKEY };
        m |= mask::QKEY;
    } else {
        a.qp_access_flags = ACCESS;
        m |= mask::ACCESS_FLAGS;
    }
    (a, m)
}

/// The RTR attributes of a connected QP: its peer's QPN, the path, and the first PSN it
/// receives: the Starting PSN this side put in its REQ or REP. The kernel's CM reads a
/// message's Starting PSN as the PSN its sender will receive from (its receiver's send queue
/// starts there: `cm_req_handler` and `cm_rep_handler` take it as `sq_psn`, `ib_send_cm_req`
/// and `ib_send_cm_rep` keep their own as `rq_psn`), so softib does too.
pub fn rtr_attr(st: &State, id: &IdState, remote_qpn: u32) -> (IbvQpAttr, c_int) {
    let (ah_attr, mtu) = av_of(st, id);
    let a = IbvQpAttr {
        qp_state: state::RTR,
        path_mtu: u32::from(mtu),
        dest_qp_num: remote_qpn,
        rq_psn: id.psn,
        max_dest_rd_atomic: id.responder_resources.max(1),
        min_rnr_timer: 12,
        ah_attr,
        ..IbvQpAttr::default()
    };
    let m = mask::STATE
        | mask::AV
        | mask::PATH_MTU
        | mask::DEST_QPN
        | mask::RQ_PSN
        | mask::MAX_DEST_RD_ATOMIC
        | mask::MIN_RNR_TIMER;
    (a, m)
}

/// The RTS attributes: the first PSN this side sends (the peer's Starting PSN, see
/// [`rtr_attr`]; a UD QP, which has no peer, its own), timeouts and retries.
pub fn rts_attr(id: &IdState) -> (IbvQpAttr, c_int) {
    let a = IbvQpAttr {
        qp_state: state::RTS,
        sq_psn: remote_of(id).map_or(id.psn, |(_, psn)| psn),
        timeout: id.ack_timeout,
        retry_cnt: id.retry_count.min(7),
        rnr_retry: id.rnr_retry_count.min(7),
        max_rd_atomic: id.initiator_depth.max(1),
        ..IbvQpAttr::default()
    };
    let m = mask::STATE
        | mask::SQ_PSN
        | mask::TIMEOUT
        | mask::RETRY_CNT
        | mask::RNR_RETRY
        | mask::MAX_QP_RD_ATOMIC;
    (a, m)
}

/// The address vector to an id's peer and the path MTU: on InfiniBand LID-routed along the
/// id's path (no GRH inside the subnet), on RoCE a GRH to the peer's GID.
fn av_of(st: &State, id: &IdState) -> (IbvAhAttr, u8) {
    let dev = id.dev.and_then(|d| st.devs.get(d));
    if let Some(p) = id.ib_path() {
        let av = IbvAhAttr {
            dlid: p.dlid.0,
            sl: p.sl,
            static_rate: 0,
            is_global: 0,
            port_num: 1,
            ..IbvAhAttr::default()
        };
        return (av, p.mtu.clamp(1, 5));
    }
    let sgid_index = dev.and_then(|d| d.gid_index(&id.sgid())).unwrap_or(0);
    let mtu = dev.map_or(3, |d| d.mtu).clamp(1, 5);
    let av = IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: IbvGid { raw: id.dgid().0 },
            flow_label: 0,
            sgid_index,
            hop_limit: 64,
            traffic_class: id.tos,
        },
        is_global: 1,
        port_num: 1,
        ..IbvAhAttr::default()
    };
    (av, mtu)
}

/// Moves the id's QP with `attr`/`mask`.
pub fn modify(id: &IdState, attr: (IbvQpAttr, c_int)) -> Result<(), c_int> {
    // SAFETY: the id's C struct is live while it is in the table.
    let qp = unsafe { (*id.c).qp };
    if qp.is_null() {
        return Ok(());
    }
    let (mut a, m) = attr;
    // SAFETY: the program's QP (made by rdma_create_qp or set by the program), live while
    // the id holds it; `a` is a valid ibv_qp_attr.
    match unsafe { (ibv()?.modify_qp)(qp, &mut a, m) } {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Moves the id's QP to ERR (disconnect: outstanding work completes with flush errors).
pub fn to_error(id: &IdState) {
    let a = IbvQpAttr {
        qp_state: state::ERR,
        ..IbvQpAttr::default()
    };
    let _ = modify(id, (a, mask::STATE));
}

/// `rdma_create_qp`: a QP on the id's device, with the library's PD and CQs where the
/// program gives none, moved to INIT (UD: to RTS, ready to send).
///
/// # Safety
/// `id` comes from `rdma_create_id`; `pd` is NULL or the program's PD on the id's device;
/// `attr` points to a valid `ibv_qp_init_attr`.
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    ffi(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        agent::with(|st| create(st, id, pd, attr))
    })
}

/// `rdma_create_qp_ex`: as `rdma_create_qp`, with the PD from the extended attributes.
///
/// # Safety
/// As `rdma_create_qp`, `attr` a valid `ibv_qp_init_attr_ex` (its first fields are an
/// `ibv_qp_init_attr`).
pub unsafe extern "C" fn rdma_create_qp_ex(id: *mut RdmaCmId, attr: *mut IbvQpInitAttrEx) -> c_int {
    ffi(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        let pd = unsafe { (*attr).pd };
        agent::with(|st| create(st, id, pd, attr.cast::<IbvQpInitAttr>()))
    })
}

fn create(
    st: &mut State,
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> Result<(), c_int> {
    let ibv = ibv()?;
    let dev = st.id(id)?.dev.ok_or_else(|| {
        crate::refused(
            "rdma_create_qp",
            "the id has no device yet: bind or resolve its address first",
            libc::EINVAL,
        )
    })?;
    let ctx = crate::device::context(st, dev)?;
    // SAFETY: the id's C struct, live while in the table.
    let c = unsafe { &mut *id };
    let pd = if !pd.is_null() {
        pd
    } else if !c.pd.is_null() {
        c.pd
    } else {
        crate::device::pd(st, dev)?
    };
    // SAFETY: the id's C struct, live while in the table (again: `device::pd` took `st`).
    let c = unsafe { &mut *id };
    // SAFETY: the caller's attributes (checked non-null).
    let a = unsafe { &mut *attr };
    if a.qp_type == qp_type::XRC_SEND || a.qp_type == qp_type::XRC_RECV {
        return Err(crate::refused(
            "rdma_create_qp",
            "softib has no XRC QPs (as rxe): connect RC QPs instead",
            libc::EOPNOTSUPP,
        ));
    }
    let mut own_cqs = false;
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        let n = a.cap.max_send_wr.max(a.cap.max_recv_wr).max(1) as c_int;
        // SAFETY: the program's context; the CQs and channels belong to the id from now on.
        unsafe {
            let sch = (ibv.create_comp_channel)(ctx);
            let scq = (ibv.create_cq)(ctx, n, id.cast(), sch, 0);
            let rch = (ibv.create_comp_channel)(ctx);
            let rcq = (ibv.create_cq)(ctx, n, id.cast(), rch, 0);
            if scq.is_null() || rcq.is_null() {
                return Err(libc::ENOMEM);
            }
            c.send_cq_channel = sch;
            c.send_cq = scq;
            c.recv_cq_channel = rch;
            c.recv_cq = rcq;
        }
        if a.send_cq.is_null() {
            a.send_cq = c.send_cq;
        }
        if a.recv_cq.is_null() {
            a.recv_cq = c.recv_cq;
        }
        own_cqs = true;
    }
    // SAFETY: a PD of the id's device and the caller's attributes.
    let qp: *mut IbvQp = unsafe { (ibv.create_qp)(pd, attr) };
    if qp.is_null() {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM);
        return Err(e);
    }
    c.qp = qp;
    c.pd = pd;
    c.qp_type = a.qp_type;
    let state = st.id(id)?;
    state.own_cqs |= own_cqs;
    let kind = a.qp_type;
    modify(state, init_attr(state, kind)).inspect_err(|_| destroy_qp_of(state))?;
    if kind == qp_type::UD {
        let rtr = IbvQpAttr {
            qp_state: state::RTR,
            ..IbvQpAttr::default()
        };
        modify(state, (rtr, mask::STATE))?;
        let (rts, m) = rts_attr(state);
        modify(state, (rts, m & (mask::STATE | mask::SQ_PSN)))?;
    }
    Ok(())
}

fn destroy_qp_of(id: &IdState) {
    // SAFETY: the id's C struct, live while in the table.
    let c = unsafe { &mut *id.c };
    if let (false, Ok(ibv)) = (c.qp.is_null(), ibv()) {
        // SAFETY: the QP rdma_create_qp made (or the program set), destroyed once.
        unsafe { (ibv.destroy_qp)(c.qp) };
    }
    c.qp = std::ptr::null_mut();
}

/// Frees what the library made for an id: its QP, CQs and channels, PD.
pub fn release(id: &IdState) {
    destroy_qp_of(id);
    let Ok(ibv) = ibv() else { return };
    // SAFETY: the id's C struct; the CQs and channels freed are the library's own
    // (own_cqs), each once.
    unsafe {
        let c = &mut *id.c;
        if id.own_cqs {
            for cq in [c.send_cq, c.recv_cq] {
                if !cq.is_null() {
                    (ibv.destroy_cq)(cq);
                }
            }
            for ch in [c.send_cq_channel, c.recv_cq_channel] {
                if !ch.is_null() {
                    (ibv.destroy_comp_channel)(ch);
                }
            }
            c.send_cq = std::ptr::null_mut();
            c.recv_cq = std::ptr::null_mut();
            c.send_cq_channel = std::ptr::null_mut();
            c.recv_cq_channel = std::ptr::null_mut();
        }
    }
}

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut RdmaCmId) {
    let _ = ffi(|| {
        agent::with(|st| {
            let state = st.id(id)?;
            destroy_qp_of(state);
            Ok(())
        })
    });
}

/// `rdma_init_qp_attr`: the attributes (and mask) that move the id's QP to
/// `attr.qp_state`, for a program that moves its own QP.
///
/// # Safety
/// `id` comes from `rdma_create_id`; `attr` and `mask` are writable.
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut RdmaCmId,
    attr: *mut IbvQpAttr,
    mask: *mut c_int,
) -> c_int {
    ffi(|| {
        if attr.is_null() || mask.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's attributes.
        let want = unsafe { (*attr).qp_state };
        agent::with(|st| {
            let key = id as usize;
            let state = st.ids.get(&key).ok_or(libc::EINVAL)?;
            // SAFETY: the id's C struct.
            let kind = unsafe { (*id).qp_type };
            let (a, m) = match want {
                state::INIT => init_attr(state, kind),
                state::RTR => {
                    let (qpn, _) = remote_of(state).ok_or(libc::EINVAL)?;
                    rtr_attr(st, state, qpn)
                }
                state::RTS => rts_attr(state),
                _ => {
                    set_errno(libc::EINVAL);
                    return Err(libc::EINVAL);
                }
            };
            // SAFETY: both checked non-null; the caller's.
            unsafe {
                *attr = a;
                *mask = m;
            }
            Ok(())
        })
    })
}

/// The peer's QPN and the Starting PSN of its message, once known (REQ on the passive side,
/// REP on the active).
pub fn remote_of(id: &IdState) -> Option<(u32, u32)> {
    if let Some(r) = &id.req {
        return Some((r.local_qpn.value(), r.starting_psn.value()));
    }
    id.rep
        .as_ref()
        .map(|r| (r.local_qpn.value(), r.starting_psn.value()))
}

/// At `rdma_destroy_id`: frees the QP and CQs if the library made the CQs for the id (the
/// QP then uses them); a program's own objects stay, and so does the device's PD.
pub fn release_own(id: &IdState) {
    if id.own_cqs {
        release(id);
    }
}

#[cfg(test)]
mod tests {
    use softib_cm::Rep;
    use softib_wire::{Psn, Qpn};

    use super::*;

    /// A connected QP sends from its peer's Starting PSN (the kernel's CM reads a Starting
    /// PSN as the one its sender receives from: rxe answers anything else with a PSN sequence
    /// NAK); a UD QP, with no peer, from its own.
    #[test]
    fn a_connected_qp_sends_from_the_peers_starting_psn() {
        let mut id = crate::id::new_state(std::ptr::null_mut(), port_space::TCP);
        id.psn = 0x11_1111;
        assert_eq!(rts_attr(&id).0.sq_psn, 0x11_1111, "no peer yet (UD)");
        id.rep = Some(Box::new(Rep {
            local_qpn: Qpn::new(0x44),
            starting_psn: Psn::new(0x22_2222),
            ..Rep::default()
        }));
        assert_eq!(rts_attr(&id).0.sq_psn, 0x22_2222);
        assert_eq!(remote_of(&id), Some((0x44, 0x22_2222)));
    }
}
