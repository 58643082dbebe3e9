//! The UD port space (`RDMA_PS_UDP`): no connection, only a lookup. `rdma_connect` sends a
//! SIDR_REQ (IBA §12.11) for the destination port's ServiceID, with rdma_cm's header in its
//! private data; the listener hears CONNECT_REQUEST and `rdma_accept` answers with a
//! SIDR_REP naming its UD QP and Q_Key (`rdma_reject`: status Rejected). The requester then
//! hears ESTABLISHED with `param.ud` — the address handle attributes, QPN and Q_Key to send
//! to — or UNREACHABLE (the SIDR_REP's status, or -ETIMEDOUT), as the kernel's rdma_cm
//! reports them. The passive side hears no ESTABLISHED.

use std::ffi::c_int;

use softib_cm::{CmaHeader, CommId, SidrRep, SidrReq, SidrStatus};
use softib_verbs_abi::rdma_cm::{event, port_space, RdmaCmId};
use softib_verbs_abi::{qp_type, IbvAhAttr, IbvGid, IbvGlobalRoute};
use softib_wire::mad::cm::private_len;
use softib_wire::{PKey, QKey, Qpn};

use crate::agent::EventBox;
use crate::agent::{self, At, Peer, State};
use crate::event::{new_event, set_private_data};
use crate::id;
use crate::qp::UDP_QKEY;

/// How much private data a consumer may put in a SIDR_REQ after rdma_cm's header.
pub const SIDR_REQ_USER_LEN: usize = private_len::SIDR_REQ - CmaHeader::LEN;

/// The hop limit of the GRH to a UD peer (the kernel's `IPV6_DEFAULT_HOPLIMIT`).
const HOP_LIMIT: u8 = 64;

/// Whether `id` resolves a UD service: of the UD port space, or of RDMA_PS_IB (which holds
/// both kinds, as the kernel's rdma_cm decides by the id's QP type) with a UD QP type.
pub fn is_ud(id: *mut RdmaCmId) -> bool {
    agent::with(|st| {
        let ps = st.id(id)?.ps;
        // SAFETY: the id's C struct, live while in the table.
        let qp_type = unsafe { (*id).qp_type };
        Ok(ps == port_space::UDP || (ps == port_space::IB && qp_type == qp_type::UD))
    })
    .unwrap_or(false)
}

/// `rdma_connect` on a UD id: the SIDR_REQ.
pub fn connect(st: &mut State, id: *mut RdmaCmId, user: &[u8]) -> Result<(), c_int> {
    let state = st.id(id)?;
    let (src, dst, peer) = id::route_to_connect(state)?;
    let service_id = id::service_of(state.ps, dst.port());
    let pkey = state.ib.map_or(PKey::DEFAULT, |r| PKey(r.pkey));
    let mut private_data = [0u8; private_len::SIDR_REQ];
    id::cma_private_data(src, dst, user, &mut private_data);
    let now = st.now();
    let comm = st
        .cm
        .sidr_request(now, peer, service_id, pkey, &private_data);
    st.id(id)?.comm = Some(comm);
    st.by_comm.insert(comm, id as usize);
    Ok(())
}

/// `rdma_accept` on a UD request: the SIDR_REP naming the id's QP (or `qp_num`, when the
/// program made its QP without rdma_cm).
pub fn accept(st: &mut State, id: *mut RdmaCmId, qp_num: u32, user: &[u8]) -> Result<(), c_int> {
    let comm = st.id(id)?.comm.ok_or_else(|| {
        crate::refused(
            "rdma_accept",
            "the id has no request to accept",
            libc::EINVAL,
        )
    })?;
    // SAFETY: the id's C struct; its QP, when there is one, is the program's live QP.
    let qp = unsafe { (*id).qp };
    let qpn = if qp.is_null() {
        qp_num
    } else {
        // SAFETY: checked non-null.
        unsafe { (*qp).qp_num }
    };
    if qpn == 0 {
        return Err(crate::refused(
            "rdma_accept",
            "a UD request is accepted with a QP (rdma_create_qp, or qp_num in the parameters)",
            libc::EINVAL,
        ));
    }
    st.cm
        .sidr_reply(comm, SidrStatus::Ok, Qpn::new(qpn), QKey(UDP_QKEY), user)
        .map_err(|_| libc::EINVAL)?;
    st.by_comm.remove(&comm);
    st.id(id)?.comm = None;
    Ok(())
}

/// A SIDR_REQ: a new id and CONNECT_REQUEST on the listener's channel, or a SIDR_REP that
/// says why not.
pub fn on_sidr_request(st: &mut State, comm: CommId, from: Peer, req: &SidrReq) {
    let (c, lkey, channel) =
        match crate::cm_event::request_id(st, comm, from, req.service_id, &req.private_data) {
            Ok(x) => x,
            Err(reason) => {
                let status = match reason {
                    softib_cm::RejectReason::InvalidServiceId => SidrStatus::UnsupportedServiceId,
                    softib_cm::RejectReason::NoResources => SidrStatus::NoQp,
                    _ => SidrStatus::Rejected,
                };
                let _ = st.cm.sidr_reply(comm, status, Qpn::new(0), QKey(0), &[]);
                return;
            }
        };
    let mut e = new_event(c, event::CONNECT_REQUEST, 0);
    e.ev.listen_id = lkey as *mut RdmaCmId;
    set_private_data(&mut e, &req.private_data[CmaHeader::LEN..]);
    if let Some(ah) = ah_to(st, c as usize, from) {
        e.ev.param.ud.ah_attr = ah;
    }
    st.post(channel, e);
}

/// The SIDR_REP to this side's request: ESTABLISHED with where to send, or UNREACHABLE
/// with the status.
pub fn on_sidr_reply(st: &mut State, comm: CommId, rep: &SidrRep) {
    let Some(&key) = st.by_comm.get(&comm) else {
        return;
    };
    if rep.status != SidrStatus::Ok {
        let status = c_int::from(u8::from(rep.status));
        crate::cm_event::finish(st, key, comm, event::UNREACHABLE, status, &[]);
        return;
    }
    st.by_comm.remove(&comm);
    let Some(s) = st.ids.get_mut(&key) else {
        return;
    };
    s.comm = None;
    let (c, peer) = (s.c, s.peer);
    let mut e: Box<EventBox> = new_event(c, event::ESTABLISHED, 0);
    set_private_data(&mut e, &rep.private_data);
    if let Some(ah) = peer.and_then(|p| ah_to(st, key, p)) {
        e.ev.param.ud.ah_attr = ah;
    }
    e.ev.param.ud.qp_num = rep.qpn.value();
    e.ev.param.ud.qkey = rep.qkey.0;
    // SAFETY: the id's C struct.
    let channel = unsafe { (*c).channel };
    st.post(channel, e);
}

/// The address handle attributes from id `key` to `peer`: on RoCE a GRH to its GID from
/// the id's source GID; on InfiniBand LID-routed, on the id's path's SL.
pub fn ah_to(st: &State, key: usize, peer: Peer) -> Option<IbvAhAttr> {
    let s = st.ids.get(&key)?;
    let dev = st.devs.get(s.dev?)?;
    let gid = match peer.1 {
        At::Lid(dlid) => {
            return Some(IbvAhAttr {
                dlid: dlid.0,
                sl: s.ib_path().map_or(0, |p| p.sl),
                port_num: 1,
                ..IbvAhAttr::default()
            })
        }
        At::Gid(g) => g,
    };
    Some(IbvAhAttr {
        grh: IbvGlobalRoute {
            dgid: IbvGid { raw: gid.0 },
            flow_label: 0,
            sgid_index: dev.gid_index(&s.sgid())?,
            hop_limit: HOP_LIMIT,
            traffic_class: s.tos,
        },
        dlid: 0,
        sl: 0,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: 1,
    })
}
