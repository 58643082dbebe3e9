//! Multicast through rdma_cm on RoCE: `rdma_join_multicast(_ex)` and `rdma_leave_multicast`.
//!
//! On RoCEv2 there is no SA to join through: as the kernel's cma does
//! (`cma_iboe_join_multicast`), the group's IPv4 address is mapped to its GID
//! (`::ffff:a.b.c.d`, `cma_iboe_set_mgid`), the id's QP is attached to it (rdma-core's
//! `ucma_process_join`: not for a send-only member), and MULTICAST_JOIN follows at once with
//! where to send: a GRH to that GID, QPN 0xFFFFFF, rdma_cm's Q_Key, and the consumer's context
//! as the private data. The daemon has the device join the IP group on its interface when the
//! QP attaches (`softib-hca`'s `Device::join_group`). IPv6 groups on RoCEv2 are refused with
//! EOPNOTSUPP, as the kernel refuses them.

use std::ffi::{c_int, c_void};
use std::net::{IpAddr, SocketAddr};

use softib_verbs_abi::rdma_cm::{event, RdmaCmId};
use softib_verbs_abi::IbvGid;
use softib_wire::Gid;

use crate::agent::{self, State};
use crate::event::new_event;
use crate::qp::UDP_QKEY;
use crate::{ffi, ibv};

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
pub struct JoinMcAttrEx {
    /// Which fields are set (`RDMA_CM_JOIN_MC_ATTR_*`).
    pub comp_mask: u32,
    /// `RDMA_MC_JOIN_FLAG_*`.
    pub join_flags: u32,
    /// The group's address.
    pub addr: *mut libc::sockaddr,
}

/// `RDMA_CM_JOIN_MC_ATTR_ADDRESS`.
const ATTR_ADDRESS: u32 = 1;
/// `RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS`.
const ATTR_JOIN_FLAGS: u32 = 2;
/// `RDMA_MC_JOIN_FLAG_FULLMEMBER`.
const FULLMEMBER: u32 = 0;
/// `RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER`.
const SENDONLY_FULLMEMBER: u32 = 1;

/// The QPN multicast datagrams are sent to.
const MULTICAST_QPN: u32 = 0xFF_FFFF;

/// A group an id has joined.
pub struct Joined {
    /// The address it was joined by.
    pub addr: IpAddr,
    /// Its GID.
    pub mgid: Gid,
    /// Whether the id's QP was attached to it (not for a send-only member).
    pub attached: bool,
}

/// The GID of multicast group `ip` on RoCEv2, or why it has none.
fn group_gid(ip: IpAddr) -> Result<Gid, c_int> {
    match ip.to_canonical() {
        IpAddr::V4(v4) if v4.is_multicast() => Ok(agent::gid_of(IpAddr::V4(v4))),
        IpAddr::V6(v6) if v6.is_multicast() => Err(crate::refused(
            "rdma_join_multicast",
            "IPv6 multicast groups are not carried over RoCEv2 (the kernel refuses them too)",
            libc::EOPNOTSUPP,
        )),
        other => Err(crate::refused(
            "rdma_join_multicast",
            &format!("{other} is not a multicast address"),
            libc::EINVAL,
        )),
    }
}

/// `rdma_join_multicast`: as a full member.
///
/// # Safety
/// `id` comes from `rdma_create_id`; `addr` is a valid sockaddr.
pub unsafe extern "C" fn rdma_join_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
    context: *mut c_void,
) -> c_int {
    let mut attr = JoinMcAttrEx {
        comp_mask: ATTR_ADDRESS | ATTR_JOIN_FLAGS,
        join_flags: FULLMEMBER,
        addr,
    };
    // SAFETY: the caller's contract, and a live local.
    unsafe { rdma_join_multicast_ex(id, &mut attr, context) }
}

/// `rdma_join_multicast_ex`.
///
/// # Safety
/// `id` comes from `rdma_create_id`; `attr` is valid, its address a valid sockaddr.
pub unsafe extern "C" fn rdma_join_multicast_ex(
    id: *mut RdmaCmId,
    attr: *mut JoinMcAttrEx,
    context: *mut c_void,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's attributes.
        let a = unsafe { attr.as_ref() }.ok_or(libc::EINVAL)?;
        if a.comp_mask & ATTR_ADDRESS == 0 {
            return Err(libc::EINVAL);
        }
        let flags = if a.comp_mask & ATTR_JOIN_FLAGS != 0 {
            a.join_flags
        } else {
            FULLMEMBER
        };
        if flags != FULLMEMBER && flags != SENDONLY_FULLMEMBER {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's sockaddr.
        let group = unsafe { crate::id::read_sockaddr(a.addr) }.ok_or(libc::EAFNOSUPPORT)?;
        agent::with(|st| join(st, id, group, flags == FULLMEMBER, context))
    })
}

fn join(
    st: &mut State,
    id: *mut RdmaCmId,
    group: SocketAddr,
    member: bool,
    context: *mut c_void,
) -> Result<(), c_int> {
    let mgid = group_gid(group.ip())?;
    let s = st.id(id)?;
    let Some(dev) = s.dev else {
        return Err(crate::refused(
            "rdma_join_multicast",
            "the id is not bound to a device (rdma_bind_addr or rdma_resolve_addr first)",
            libc::EINVAL,
        ));
    };
    if s.mcast.iter().any(|j| j.addr == group.ip()) {
        return Err(libc::EADDRINUSE);
    }
    let peer = (st.devs[dev].index, mgid);
    let ah = crate::ud::ah_to(st, id as usize, peer).ok_or(libc::EADDRNOTAVAIL)?;
    // SAFETY: the id's C struct; its QP, if any, is the program's, live while the id is.
    let qp = unsafe { (*id).qp };
    let attach = member && !qp.is_null();
    let status = if attach {
        let raw = IbvGid { raw: mgid.0 };
        // SAFETY: the program's QP and a live local GID.
        -unsafe { (ibv::ibv()?.attach_mcast)(qp, &raw, 0) }.abs()
    } else {
        0
    };
    let s = st.id(id)?;
    if status == 0 {
        s.mcast.push(crate::mcast::Joined {
            addr: group.ip(),
            mgid,
            attached: attach,
        });
    }
    let mut e = new_event(id, event::MULTICAST_JOIN, status);
    e.ev.param.ud.private_data = context.cast_const();
    e.ev.param.ud.private_data_len = 0;
    e.ev.param.ud.ah_attr = ah;
    e.ev.param.ud.qp_num = MULTICAST_QPN;
    e.ev.param.ud.qkey = UDP_QKEY;
    // SAFETY: the id's C struct.
    let channel = unsafe { (*id).channel };
    st.post(channel, e);
    Ok(())
}

/// `rdma_leave_multicast`: the QP is detached from the group.
///
/// # Safety
/// `id` comes from `rdma_create_id`; `addr` is a valid sockaddr.
pub unsafe extern "C" fn rdma_leave_multicast(
    id: *mut RdmaCmId,
    addr: *mut libc::sockaddr,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's sockaddr.
        let group = unsafe { crate::id::read_sockaddr(addr) }.ok_or(libc::EAFNOSUPPORT)?;
        agent::with(|st| {
            let s = st.id(id)?;
            let i = s
                .mcast
                .iter()
                .position(|j| j.addr == group.ip())
                .ok_or(libc::EADDRNOTAVAIL)?;
            let j = s.mcast.remove(i);
            // SAFETY: the id's C struct.
            let qp = unsafe { (*id).qp };
            if j.attached && !qp.is_null() {
                let raw = IbvGid { raw: j.mgid.0 };
                // SAFETY: the program's QP and a live local GID.
                let rc = unsafe { (ibv::ibv()?.detach_mcast)(qp, &raw, 0) };
                if rc != 0 {
                    return Err(rc.abs());
                }
            }
            Ok(())
        })
    })
}
