//! Multicast through rdma_cm: `rdma_join_multicast(_ex)` and `rdma_leave_multicast`.
//!
//! On an InfiniBand port the group is joined through the SA, as the kernel's cma does
//! (`cma_join_ib_multicast`): an IPv4 group's MGID is `ip_ib_mc_map`'s (with rdma_cm's
//! signature for RDMA_PS_UDP, [`crate::fabric::mgid`]), the MCMemberRecord join creates the
//! group when it is new ([`crate::fabric::join`], asked without the agent's lock), the id's
//! QP is attached to the MGID and the MLID the SA gave, and MULTICAST_JOIN carries an address
//! handle to the MLID with a GRH to the MGID (multicast on InfiniBand always has one), the
//! group's Q_Key and QPN 0xFFFFFF. A leave detaches the QP and deletes the membership at the
//! SA (so does destroying the id).
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

use softib_verbs_abi::rdma_cm::{event, port_space, RdmaCmId};
use softib_verbs_abi::{IbvAhAttr, IbvGid, IbvGlobalRoute};
use softib_wire::mad::sa::join_state;
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
    /// Its LID (InfiniBand; 0 on RoCE).
    pub mlid: u16,
    /// Whether the id's QP was attached to it (not for a send-only member).
    pub attached: bool,
    /// On InfiniBand, the membership the SA holds: the device, the port GID and the
    /// JoinState to give up when leaving.
    pub sa: Option<(u32, Gid, u8)>,
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
        if agent::with(|st| Ok(st.id(id)?.ib.is_some()))? {
            return join_ib(id, group, flags == FULLMEMBER, context);
        }
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
    let peer = (st.devs[dev].index, agent::At::Gid(mgid));
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
            mlid: 0,
            attached: attach,
            sa: None,
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
        let j = agent::with(|st| {
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
                let rc = unsafe { (ibv::ibv()?.detach_mcast)(qp, &raw, j.mlid) };
                if rc != 0 {
                    return Err(rc.abs());
                }
            }
            Ok(j)
        })?;
        leave_sa(&j);
        Ok(())
    })
}

/// `rdma_join_multicast` on InfiniBand: the SA join (without the agent's lock), then the
/// QP attached and MULTICAST_JOIN, or MULTICAST_ERROR saying why the SA refused.
fn join_ib(
    id: *mut RdmaCmId,
    group: SocketAddr,
    member: bool,
    context: *mut c_void,
) -> Result<(), c_int> {
    let IpAddr::V4(v4) = group.ip().to_canonical() else {
        return Err(crate::refused(
            "rdma_join_multicast",
            "IPv6 multicast groups are not mapped to InfiniBand MGIDs here (IPoIB carries IPv4)",
            libc::EOPNOTSUPP,
        ));
    };
    if !v4.is_multicast() {
        return Err(crate::refused(
            "rdma_join_multicast",
            &format!("{v4} is not a multicast address"),
            libc::EINVAL,
        ));
    }
    let (dev_index, route, ps) = agent::with(|st| {
        let s = st.id(id)?;
        if s.mcast.iter().any(|j| j.addr == group.ip()) {
            return Err(libc::EADDRINUSE);
        }
        let (Some(r), Some(dev)) = (s.ib, s.dev) else {
            return Err(libc::EINVAL);
        };
        let ps = s.ps;
        Ok((st.devs[dev].index, r, ps))
    })?;
    let mgid = crate::fabric::mgid(v4, route.pkey, ps == port_space::UDP);
    // RDMA_PS_IPOIB ids share the broadcast group's Q_Key, the others rdma_cm's (the
    // kernel's `cma_set_qkey`).
    let qkey = (ps != port_space::IPOIB).then_some(UDP_QKEY);
    let joined = crate::fabric::join(dev_index, route.sgid, mgid, route.pkey, qkey, !member);
    agent::with(|st| {
        st.id(id)?;
        // SAFETY: the id's C struct (in the table); its QP, if any, is the program's.
        let (qp, channel) = unsafe { ((*id).qp, (*id).channel) };
        let rec = match joined {
            Ok(rec) => rec,
            Err(why) => {
                let errno = crate::refused(
                    "rdma_join_multicast",
                    &format!("the SA refused the join of {mgid} ({v4}): {why}"),
                    libc::EHOSTUNREACH,
                );
                let mut e = new_event(id, event::MULTICAST_ERROR, -errno);
                e.ev.param.ud.private_data = context.cast_const();
                st.post(channel, e);
                return Ok(());
            }
        };
        let attach = member && !qp.is_null();
        let status = if attach {
            let raw = IbvGid { raw: mgid.0 };
            // SAFETY: the program's QP and a live local GID.
            -unsafe { (ibv::ibv()?.attach_mcast)(qp, &raw, rec.mlid.0) }.abs()
        } else {
            0
        };
        let join_state = if member {
            join_state::FULL_MEMBER
        } else {
            join_state::SEND_ONLY_FULL_MEMBER
        };
        let j = Joined {
            addr: group.ip(),
            mgid,
            mlid: rec.mlid.0,
            attached: attach,
            sa: Some((dev_index, route.sgid, join_state)),
        };
        if status != 0 {
            leave_sa(&j);
        } else {
            st.id(id)?.mcast.push(j);
        }
        let sgid_index = st
            .id(id)?
            .dev
            .and_then(|d| st.devs.get(d))
            .and_then(|d| d.gid_index(&route.sgid))
            .unwrap_or(0);
        let mut e = new_event(id, event::MULTICAST_JOIN, status);
        e.ev.param.ud.private_data = context.cast_const();
        e.ev.param.ud.private_data_len = 0;
        e.ev.param.ud.ah_attr = IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: IbvGid { raw: mgid.0 },
                flow_label: rec.flow_label,
                sgid_index,
                hop_limit: rec.hop_limit,
                traffic_class: rec.tclass,
            },
            dlid: rec.mlid.0,
            sl: rec.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global: 1,
            port_num: 1,
        };
        e.ev.param.ud.qp_num = MULTICAST_QPN;
        e.ev.param.ud.qkey = rec.q_key.0;
        st.post(channel, e);
        Ok(())
    })
}

/// Gives up an InfiniBand membership at the SA; said on stderr when the SA does not answer
/// (the SM drops the membership of a port that leaves the subnet anyway).
pub fn leave_sa(j: &Joined) {
    if let Some((dev, port_gid, state)) = j.sa {
        if let Err(why) = crate::fabric::leave(dev, port_gid, j.mgid, state) {
            crate::refused(
                "rdma_leave_multicast",
                &format!("leaving {} at the SA: {why}", j.mgid),
                libc::EHOSTUNREACH,
            );
        }
    }
}
