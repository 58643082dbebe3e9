//! `rdma_cm_id`s: creation, addresses (bind, resolve_addr, resolve_route: on RoCE an IP
//! address is a GID, and the route is the GRH to it), the connection calls (listen, connect,
//! accept, reject, disconnect, establish) and options. ADDR_RESOLVED and ROUTE_RESOLVED come
//! from here; the CM machine's events become rdma_cm's in `cm_event`.

use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use softib_cm::{
    msg, AcceptParams, CmaHeader, ConnectParams, Path, PortSpace, RejectReason, SidrStatus,
    TransportService,
};
use softib_verbs_abi::rdma_cm::{
    event, option, port_space, RdmaCmId, RdmaConnParam, RdmaEventChannel, RdmaRoute,
    SockaddrStorage,
};
use softib_verbs_abi::{qp_type, IbvGid, IbvSaPathRec};
use softib_wire::mad::cm::private_len;
use softib_wire::{PKey, Psn, QKey, Qpn};

use crate::agent::{self, At, IdState, Peer, State};
use crate::event::new_event;
use crate::qp;
use crate::{ffi, ffi_ptr};

/// The largest backlog a listener gets (the kernel's `max_backlog` default).
const MAX_BACKLOG: usize = 1024;

/// How much private data a consumer may put in a REQ after rdma_cm's header.
const REQ_USER_LEN: usize = private_len::REQ - CmaHeader::LEN;

/// The socket address at `sa`, if it is IPv4 or IPv6.
///
/// # Safety
/// `sa` is NULL or points to a `sockaddr` of its family's size.
pub unsafe fn read_sockaddr(sa: *const libc::sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: the caller's sockaddr; its family says how long it is.
    unsafe {
        match c_int::from((*sa).sa_family) {
            libc::AF_INET => {
                let s = &*sa.cast::<libc::sockaddr_in>();
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = &*sa.cast::<libc::sockaddr_in6>();
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    0,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// `a` as a `sockaddr_storage`.
pub fn storage_of(a: SocketAddr) -> SockaddrStorage {
    let mut s = SockaddrStorage::default();
    match a {
        SocketAddr::V4(v4) => {
            s.0[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
            s.0[2..4].copy_from_slice(&v4.port().to_be_bytes());
            s.0[4..8].copy_from_slice(&v4.ip().octets());
        }
        SocketAddr::V6(v6) => {
            s.0[..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
            s.0[2..4].copy_from_slice(&v6.port().to_be_bytes());
            s.0[8..24].copy_from_slice(&v6.ip().octets());
            s.0[24..28].copy_from_slice(&v6.scope_id().to_ne_bytes());
        }
    }
    s
}

pub(crate) fn zeroed_id() -> RdmaCmId {
    RdmaCmId {
        verbs: std::ptr::null_mut(),
        channel: std::ptr::null_mut(),
        context: std::ptr::null_mut(),
        qp: std::ptr::null_mut(),
        route: RdmaRoute {
            addr: Default::default(),
            path_rec: std::ptr::null_mut(),
            num_paths: 0,
        },
        ps: 0,
        port_num: 0,
        event: std::ptr::null_mut(),
        send_cq_channel: std::ptr::null_mut(),
        send_cq: std::ptr::null_mut(),
        recv_cq_channel: std::ptr::null_mut(),
        recv_cq: std::ptr::null_mut(),
        srq: std::ptr::null_mut(),
        pd: std::ptr::null_mut(),
        qp_type: 0,
    }
}

pub(crate) fn new_state(c: *mut RdmaCmId, ps: c_int) -> IdState {
    IdState {
        c,
        ps,
        dev: None,
        src: None,
        dst: None,
        comm: None,
        listening: None,
        req: None,
        rep: None,
        peer: None,
        ib: None,
        psn: 0,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        tos: 0,
        ack_timeout: 14,
        own_cqs: false,
        sync: false,
        ep_qp: None,
        mcast: Vec::new(),
    }
}

/// A first PSN: unpredictable enough that a stale packet of an earlier connection does
/// not fit.
fn fresh_psn(st: &State, salt: usize) -> u32 {
    let t = st.now().as_nanos() as u64;
    let x = (t ^ (salt as u64).rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 40) as u32 & 0xFF_FFFF
}

/// `rdma_create_id`.
///
/// # Safety
/// `channel` comes from `rdma_create_event_channel`; `out` is writable.
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut RdmaEventChannel,
    out: *mut *mut RdmaCmId,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    ffi(|| {
        if out.is_null() {
            return Err(libc::EINVAL);
        }
        if ![
            port_space::TCP,
            port_space::IPOIB,
            port_space::UDP,
            port_space::IB,
        ]
        .contains(&ps)
        {
            return Err(crate::refused(
                "rdma_create_id",
                &format!(
                    "port space 0x{ps:04x} is none of RDMA_PS_TCP, RDMA_PS_UDP, RDMA_PS_IPOIB \
                     and RDMA_PS_IB"
                ),
                libc::EINVAL,
            ));
        }
        agent::with(|st| {
            let sync = channel.is_null();
            let channel = if sync {
                crate::event::new_channel(st)?
            } else {
                channel
            };
            if !st.channels.contains_key(&(channel as usize)) {
                return Err(libc::EINVAL);
            }
            let mut c = zeroed_id();
            c.channel = channel;
            c.context = context;
            c.ps = ps;
            c.qp_type = qp_type_of(ps);
            let c = Box::into_raw(Box::new(c));
            let mut s = new_state(c, ps);
            s.sync = sync;
            st.ids.insert(c as usize, s);
            // SAFETY: checked non-null; the caller's.
            unsafe { *out = c };
            Ok(())
        })
    })
}

/// `rdma_destroy_id`: its connection is torn down (DREQ, or REJ if it was being set up),
/// its listening stopped; the program destroyed its QP before.
///
/// # Safety
/// `id` comes from `rdma_create_id` (or a CONNECT_REQUEST event) and is destroyed once.
pub unsafe extern "C" fn rdma_destroy_id(id: *mut RdmaCmId) -> c_int {
    ffi(|| {
        let groups = agent::with(|st| {
            let mut state = st.ids.remove(&(id as usize)).ok_or(libc::EINVAL)?;
            if let Some(svc) = state.listening {
                let _ = st.cm.unlisten(svc);
                st.listeners.remove(&svc);
                let devs: Vec<u32> = match state.dev {
                    Some(d) => vec![st.devs[d].index],
                    None => st.devs.iter().map(|d| d.index).collect(),
                };
                for d in devs {
                    st.listens.push_back((d, svc, false));
                }
            }
            if let Some(comm) = state.comm {
                st.cm.destroy(comm);
                st.by_comm.remove(&comm);
            }
            qp::release_own(&state);
            crate::sync::free_request_event(state.c);
            // SAFETY: the id's C struct, freed below.
            crate::event::withdraw(st, unsafe { (*state.c).channel }, id);
            if state.sync {
                // SAFETY: the id's C struct; a synchronous id's channel is its own.
                let _ = crate::event::destroy_channel(st, unsafe { (*state.c).channel });
            }
            // SAFETY: the C struct and path record this library leaked, freed once.
            unsafe {
                let c = Box::from_raw(state.c);
                if !c.route.path_rec.is_null() {
                    drop(Box::from_raw(c.route.path_rec));
                }
            }
            Ok(std::mem::take(&mut state.mcast))
        })?;
        // Memberships at an SA end with the id, as the kernel's rdma_cm leaves them.
        for j in &groups {
            crate::mcast::leave_sa(j);
        }
        agent::flush();
        Ok(())
    })
}

/// Binds `state` to `addr` (port 0: an ephemeral port).
pub(crate) fn bind(st: &mut State, id: *mut RdmaCmId, addr: SocketAddr) -> Result<(), c_int> {
    let ps = st.id(id)?.ps;
    // A loopback address no device has is bound to no device, as a wildcard is: the kernel's
    // rdma_cm binds such an id to a device only when it resolves or listens
    // (`cma_bind_loopback`). libfabric's verbs provider binds "localhost" when it is given
    // no address, and then takes a device's address for its listener.
    let unbound_loopback =
        addr.ip().to_canonical().is_loopback() && st.dev_of_ip(addr.ip()).is_none();
    let (dev, ipoib) = if addr.ip().is_unspecified() || unbound_loopback {
        (None, None)
    } else {
        let (d, ipoib) = st.dev_and_ipoib_of(addr.ip()).ok_or_else(|| {
            crate::refused(
                "rdma_bind_addr",
                &format!(
                    "no softib device of this host has the address {} (on a fabric host, \
                     the address of an IPoIB interface: softib ipoib add ib0 ...)",
                    addr.ip()
                ),
                libc::EADDRNOTAVAIL,
            )
        })?;
        (Some(d), ipoib)
    };
    let mut addr = addr;
    if addr.port() == 0 {
        addr.set_port(st.ephemeral_port(ps));
    } else {
        let taken = st.ids.iter().any(|(&k, i)| {
            k != id as usize
                && i.ps == ps
                && i.src.is_some_and(|s| {
                    s.port() == addr.port()
                        && (s.ip() == addr.ip()
                            || s.ip().is_unspecified()
                            || addr.ip().is_unspecified())
                })
                && (i.listening.is_some() || i.comm.is_none())
        });
        if taken {
            return Err(libc::EADDRINUSE);
        }
    }
    let (ctx, pd) = match dev {
        Some(d) => (crate::device::context(st, d)?, crate::device::pd(st, d)?),
        None => (std::ptr::null_mut(), std::ptr::null_mut()),
    };
    let state = st.id(id)?;
    state.src = Some(addr);
    state.dev = dev;
    state.ib = ipoib.as_ref().map(crate::fabric::IbRoute::on);
    let (sgid, pkey) = (state.sgid(), state.ib.map_or(0xFFFF, |r| r.pkey));
    // SAFETY: the id's C struct.
    let c = unsafe { &mut *id };
    c.route.addr.src_addr = storage_of(addr);
    if !ctx.is_null() {
        c.verbs = ctx;
        if c.pd.is_null() {
            c.pd = pd;
        }
        c.port_num = 1;
        c.route.addr.ibaddr.sgid = IbvGid { raw: sgid.0 };
        c.route.addr.ibaddr.pkey = pkey.to_be();
    }
    Ok(())
}

/// `rdma_bind_addr`.
///
/// # Safety
/// `id` comes from `rdma_create_id`; `addr` is a valid sockaddr.
pub unsafe extern "C" fn rdma_bind_addr(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
    ffi(|| {
        // SAFETY: the caller's sockaddr.
        let a = unsafe { read_sockaddr(addr) }.ok_or(libc::EAFNOSUPPORT)?;
        agent::with(|st| bind(st, id, a))
    })
}

/// `rdma_resolve_addr`: picks the local device (the source address's, else the first with
/// an address of the destination's family), whose GID the source address is, and names the
/// peer by the destination's GID. ADDR_RESOLVED follows. On a host whose addresses are
/// IPoIB's (an emulated fabric), the address is resolved as on InfiniBand
/// ([`crate::fabric::resolve_addr`]).
///
/// # Safety
/// `id` comes from `rdma_create_id`; `src` is NULL or a valid sockaddr; `dst` is valid.
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut RdmaCmId,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's sockaddrs.
        let (src, dst) = unsafe { (read_sockaddr(src), read_sockaddr(dst)) };
        let dst = dst.ok_or(libc::EAFNOSUPPORT)?;
        let (bound, has_ib) = agent::with(|st| {
            let bound = st.id(id)?.src;
            Ok((bound, st.devs.iter().any(|d| d.ib)))
        })?;
        let wanted = src.or(bound);
        if has_ib {
            if let Some((ip, local)) = crate::fabric::ipoib_source(wanted, dst) {
                let port = wanted.map_or(0, |a| a.port());
                let src = SocketAddr::new(IpAddr::V4(ip), port);
                crate::fabric::resolve_addr(id, src, &local, dst, timeout_ms)?;
                return sync_wait(id, event::ADDR_RESOLVED);
            }
        }
        agent::with(|st| {
            let local_ip = match wanted.map(|a| a.ip()).filter(|ip| !ip.is_unspecified()) {
                Some(ip) => ip,
                None => first_ip(st, dst.ip()).ok_or_else(|| {
                    crate::refused(
                        "rdma_resolve_addr",
                        &format!("no softib device of this host can reach {}", dst.ip()),
                        libc::EADDRNOTAVAIL,
                    )
                })?,
            };
            let port = wanted.map_or(0, |a| a.port());
            bind(st, id, SocketAddr::new(local_ip, port))?;
            let dev = st.id(id)?.dev.ok_or(libc::EADDRNOTAVAIL)?;
            let dev_index = st.devs[dev].index;
            let dgid = agent::gid_of(dst.ip());
            let state = st.id(id)?;
            state.dst = Some(dst);
            state.peer = Some((dev_index, At::Gid(dgid)));
            // SAFETY: the id's C struct.
            let c = unsafe { &mut *id };
            c.route.addr.dst_addr = storage_of(dst);
            c.route.addr.ibaddr.dgid = IbvGid { raw: dgid.0 };
            let channel = c.channel;
            st.post(channel, new_event(id, event::ADDR_RESOLVED, 0));
            Ok(())
        })?;
        sync_wait(id, event::ADDR_RESOLVED)
    })
}

/// On a synchronous id, waits for the event the call produces.
fn sync_wait(id: *mut RdmaCmId, want: c_int) -> Result<(), c_int> {
    if crate::sync::is_sync(id) {
        crate::sync::wait(id, want)
    } else {
        Ok(())
    }
}

/// The address of the first device with one of `like`'s family.
fn first_ip(st: &State, like: IpAddr) -> Option<IpAddr> {
    let want_v4 = like.is_ipv4() || like.to_canonical().is_ipv4();
    // A destination that is this host's own address is reached from that device.
    if let Some(d) = st.dev_of_ip(like) {
        return Some(like).filter(|_| d < st.devs.len());
    }
    st.devs.iter().find_map(|d| {
        d.gids.iter().find_map(|g| match (g.to_ipv4(), want_v4) {
            (Some(v4), true) => Some(IpAddr::from(v4)),
            (None, false) if g.0[0] != 0xfe => Some(IpAddr::from(g.0)),
            _ => None,
        })
    })
}

/// `rdma_resolve_route`: on RoCE the route is the GRH to the peer's GID: one path record,
/// and ROUTE_RESOLVED. On InfiniBand it is the SA's PathRecord
/// ([`crate::fabric::resolve_route`]).
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_resolve_route(id: *mut RdmaCmId, _timeout_ms: c_int) -> c_int {
    ffi(|| {
        if agent::with(|st| Ok(st.id(id)?.ib.is_some()))? {
            crate::fabric::resolve_route(id)?;
            return sync_wait(id, event::ROUTE_RESOLVED);
        }
        agent::with(|st| {
            let state = st.id(id)?;
            let (Some(_), Some(_)) = (state.src, state.peer) else {
                return Err(crate::refused(
                    "rdma_resolve_route",
                    "the address is not resolved (rdma_resolve_addr first)",
                    libc::EINVAL,
                ));
            };
            let (tos, dev) = (state.tos, state.dev);
            let (sgid, dgid) = (state.sgid(), state.dgid());
            let mtu = dev.and_then(|d| st.devs.get(d)).map_or(3, |d| d.mtu);
            let rec = IbvSaPathRec {
                dgid: IbvGid { raw: dgid.0 },
                sgid: IbvGid { raw: sgid.0 },
                dlid: 0,
                slid: 0,
                raw_traffic: 0,
                flow_label: 0,
                hop_limit: 64,
                traffic_class: tos,
                reversible: 1,
                numb_path: 1,
                pkey: 0xFFFF_u16.to_be(),
                sl: 0,
                mtu_selector: 2,
                mtu,
                rate_selector: 2,
                rate: 0,
                packet_life_time_selector: 2,
                packet_life_time: 0,
                preference: 0,
            };
            set_path_rec(id, rec);
            // SAFETY: the id's C struct.
            let channel = unsafe { (*id).channel };
            st.post(channel, new_event(id, event::ROUTE_RESOLVED, 0));
            Ok(())
        })?;
        sync_wait(id, event::ROUTE_RESOLVED)
    })
}

/// Sets the id's one path record (`id->route.path_rec`), freeing an earlier one.
pub fn set_path_rec(id: *mut RdmaCmId, rec: IbvSaPathRec) {
    // SAFETY: the id's C struct (the caller holds the agent's lock and the id is in its
    // table); a previous path record is the library's own.
    let c = unsafe { &mut *id };
    if !c.route.path_rec.is_null() {
        // SAFETY: leaked by an earlier resolve_route.
        drop(unsafe { Box::from_raw(c.route.path_rec) });
    }
    c.route.path_rec = Box::into_raw(Box::new(rec));
    c.route.num_paths = 1;
}

/// The ServiceID rdma_cm uses for `port` in port space `ps`.
pub fn service_of(ps: c_int, port: u16) -> u64 {
    let space = PortSpace::from(ps as u16);
    msg::service_id(space, port)
}

/// `rdma_listen`: REQs for the bound port's service ID become CONNECT_REQUEST events.
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_listen(id: *mut RdmaCmId, backlog: c_int) -> c_int {
    ffi(|| {
        let svc = agent::with(|st| {
            if st.id(id)?.src.is_none() {
                bind(st, id, SocketAddr::from(([0, 0, 0, 0], 0)))?;
            }
            let state = st.id(id)?;
            let Some(src) = state.src else {
                return Err(libc::EINVAL);
            };
            let svc = service_of(state.ps, src.port());
            // As the kernel's ucma: a backlog of 0 or less (or beyond it) is the maximum.
            let backlog = match usize::try_from(backlog) {
                Ok(n @ 1..=MAX_BACKLOG) => n,
                _ => MAX_BACKLOG,
            };
            st.cm.listen(svc, backlog).map_err(|_| libc::EADDRINUSE)?;
            st.listeners.insert(svc, id as usize);
            let state = st.id(id)?;
            state.listening = Some(svc);
            let devs: Vec<u32> = match state.dev {
                Some(d) => vec![st.devs[d].index],
                None => st.devs.iter().map(|d| d.index).collect(),
            };
            st.refused_listens.retain(|&s| s != svc);
            for d in devs {
                st.listens.push_back((d, svc, true));
            }
            Ok(svc)
        })?;
        // The daemon routes REQs here once it has been told; a client may connect as soon
        // as rdma_listen returns.
        agent::flush();
        agent::with(|st| {
            if st.refused_listens.contains(&svc) {
                return Err(libc::EADDRINUSE);
            }
            Ok(())
        })
    })
}

/// The caller's private data, bounded by what the message carries.
///
/// # Safety
/// `p` is NULL or points to a valid `rdma_conn_param`.
unsafe fn private_of(p: *const RdmaConnParam, max: usize) -> Result<Vec<u8>, c_int> {
    if p.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's parameters; the data is `private_data_len` bytes.
    unsafe {
        let n = usize::from((*p).private_data_len);
        if n > max {
            return Err(libc::EINVAL);
        }
        if n == 0 || (*p).private_data.is_null() {
            return Ok(Vec::new());
        }
        Ok(std::slice::from_raw_parts((*p).private_data.cast::<u8>(), n).to_vec())
    }
}

/// `rdma_connect`: sends the REQ. ESTABLISHED follows once the REP came and the QP is
/// ready (or REJECTED, UNREACHABLE). On a UD id it sends a SIDR_REQ instead
/// ([`crate::ud::connect`]).
///
/// # Safety
/// `id` comes from `rdma_create_id`; `param` is NULL or valid.
pub unsafe extern "C" fn rdma_connect(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    ffi(|| {
        if crate::ud::is_ud(id) {
            // SAFETY: the caller's parameters.
            let user = unsafe { private_of(param, crate::ud::SIDR_REQ_USER_LEN) }?;
            agent::with(|st| crate::ud::connect(st, id, &user))?;
            return sync_wait(id, event::ESTABLISHED);
        }
        // SAFETY: the caller's parameters.
        let user = unsafe { private_of(param, REQ_USER_LEN) }?;
        agent::with(|st| {
            let salt = id as usize;
            let psn = fresh_psn(st, salt);
            let dev = st.id(id)?.dev;
            let mtu = dev.and_then(|d| st.devs.get(d)).map_or(3, |d| d.mtu);
            let dev_limits = dev_rd_atomic(st, dev);
            let state = st.id(id)?;
            let (src, dst, peer) = route_to_connect(state)?;
            // SAFETY: the id's C struct, and the caller's parameters (NULL or valid).
            let (qpn, srq) = unsafe { qp_of(id, param.as_ref()) }.ok_or_else(|| {
                crate::refused(
                    "rdma_connect",
                    "the id has no QP: make one (rdma_create_qp) or name yours in qp_num",
                    libc::EINVAL,
                )
            })?;
            if !param.is_null() {
                // SAFETY: the caller's parameters (checked non-null).
                let p = unsafe { &*param };
                let (rr, id_) = read_atomic_resources("rdma_connect", dev_limits, p)?;
                state.responder_resources = rr;
                state.initiator_depth = id_;
                state.retry_count = p.retry_count;
                state.rnr_retry_count = p.rnr_retry_count;
            }
            state.psn = psn;
            let mut private_data = [0u8; private_len::REQ];
            cma_private_data(src, dst, &user, &mut private_data);
            let (primary, path_mtu, pkey) = primary_path(state, mtu);
            let params = ConnectParams {
                service_id: service_of(state.ps, dst.port()),
                local_qpn: Qpn::new(qpn),
                starting_psn: Psn::new(psn),
                responder_resources: state.responder_resources,
                initiator_depth: state.initiator_depth,
                transport: TransportService::Rc,
                pkey,
                path_mtu,
                retry_count: state.retry_count.min(7),
                rnr_retry_count: state.rnr_retry_count.min(7),
                srq,
                primary,
                private_data,
            };
            let now = st.now();
            let comm = st.cm.connect(now, peer, &params);
            st.id(id)?.comm = Some(comm);
            st.by_comm.insert(comm, id as usize);
            agent::drain_events(st);
            Ok(())
        })?;
        sync_wait(id, event::ESTABLISHED)
    })
}

/// The REQ's primary path, path MTU and P_Key for an id whose route is resolved (`mtu`: its
/// device's active MTU). On RoCE the path is the GRH between the two GIDs; on InfiniBand
/// the SA's PathRecord: LIDs, SL, rate, the path's MTU, in the subnet (no GRH), and an ACK
/// timeout of at least what the packet lifetime asks (the kernel's `cm_ack_timeout`).
fn primary_path(state: &IdState, mtu: u8) -> (Path, u8, PKey) {
    let mut p = Path {
        local_gid: state.sgid(),
        remote_gid: state.dgid(),
        hop_limit: 64,
        traffic_class: state.tos,
        local_ack_timeout: state.ack_timeout,
        ..Path::default()
    };
    let (Some(r), Some(ib)) = (state.ib, state.ib_path()) else {
        return (p, mtu, PKey::DEFAULT);
    };
    p.local_lid = ib.slid;
    p.remote_lid = ib.dlid;
    p.sl = ib.sl;
    p.packet_rate = ib.rate;
    p.subnet_local = true;
    p.hop_limit = 0;
    p.local_ack_timeout = state
        .ack_timeout
        .max(ib.packet_life_time.saturating_add(1))
        .min(31);
    (p, ib.mtu, PKey(r.pkey))
}

/// The RDMA read/atomic limits of device `dev` (responder resources, initiator depth).
fn dev_rd_atomic(st: &State, dev: Option<usize>) -> (u8, u8) {
    dev.and_then(|d| st.devs.get(d))
        .map_or((1, 1), |d| (d.max_rd_atom, d.max_init_rd_atom))
}

/// rdma_cm's `responder_resources` and `initiator_depth` from the caller's parameters:
/// `RDMA_MAX_RESP_RES`/`RDMA_MAX_INIT_DEPTH` (0xFF) mean the device's maximum, a value
/// beyond it is refused (rdma-core's `ucma_valid_param`).
fn read_atomic_resources(
    call: &str,
    (max_resp, max_init): (u8, u8),
    p: &RdmaConnParam,
) -> Result<(u8, u8), c_int> {
    const MAX: u8 = 0xFF;
    let pick = |asked: u8, max: u8, what: &str| match asked {
        MAX => Ok(max),
        n if n <= max => Ok(n),
        n => Err(crate::refused(
            call,
            &format!("{what} {n} is beyond the device's {max} (0xFF asks for the maximum)"),
            libc::EINVAL,
        )),
    };
    Ok((
        pick(p.responder_resources, max_resp, "responder_resources")?,
        pick(p.initiator_depth, max_init, "initiator_depth")?,
    ))
}

/// Fills `out` (a REQ's or SIDR_REQ's private data) with rdma_cm's header for a
/// connection from `src` to `dst`, then the consumer's `user` bytes (which fit: the caller
/// checked).
pub fn cma_private_data(src: SocketAddr, dst: SocketAddr, user: &[u8], out: &mut [u8]) {
    let left = softib_cm::rdma_cm::private_data(src, dst, user, out);
    debug_assert_eq!(left, 0, "the caller bounds the private data");
}

/// The QPN (and whether it uses an SRQ) a REQ or REP names: the id's QP's, or — for a
/// program that drives its QP itself (UCX) — the parameters' `qp_num` and `srq`. `None`
/// when there is neither.
///
/// # Safety
/// `id` is a live id.
unsafe fn qp_of(id: *mut RdmaCmId, param: Option<&RdmaConnParam>) -> Option<(u32, bool)> {
    // SAFETY: the caller's id.
    let qp = unsafe { (*id).qp };
    if !qp.is_null() {
        // SAFETY: the program's QP, live while the id holds it.
        return Some(unsafe { ((*qp).qp_num, !(*qp).srq.is_null()) });
    }
    param
        .filter(|p| p.qp_num != 0)
        .map(|p| (p.qp_num & 0xFF_FFFF, p.srq != 0))
}

/// What `rdma_connect` needs of an id: its resolved source, destination and peer CM, and
/// no connection yet.
pub fn route_to_connect(state: &IdState) -> Result<(SocketAddr, SocketAddr, Peer), c_int> {
    let (Some(src), Some(dst), Some(peer)) = (state.src, state.dst, state.peer) else {
        return Err(crate::refused(
            "rdma_connect",
            "the route is not resolved (rdma_resolve_addr, rdma_resolve_route first)",
            libc::EINVAL,
        ));
    };
    if state.comm.is_some() {
        return Err(libc::EISCONN);
    }
    Ok((src, dst, peer))
}

/// `rdma_accept`: readies the QP (RTR, RTS, from the REQ) and sends the REP; ESTABLISHED
/// follows with the RTU.
///
/// # Safety
/// `id` comes from a CONNECT_REQUEST event; `param` is NULL or valid.
pub unsafe extern "C" fn rdma_accept(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    ffi(|| {
        if crate::ud::is_ud(id) {
            // SAFETY: the caller's parameters.
            let user = unsafe { private_of(param, private_len::SIDR_REP) }?;
            // SAFETY: the caller's parameters, NULL or valid.
            let qp_num = unsafe { param.as_ref() }.map_or(0, |p| p.qp_num);
            agent::with(|st| crate::ud::accept(st, id, qp_num, &user))?;
            agent::flush();
            return Ok(());
        }
        // SAFETY: the caller's parameters.
        let user = unsafe { private_of(param, private_len::REP) }?;
        agent::with(|st| {
            let salt = id as usize;
            let psn = fresh_psn(st, salt);
            let dev = st.id(id)?.dev;
            let dev_limits = dev_rd_atomic(st, dev);
            let state = st.id(id)?;
            let (Some(comm), Some(req)) = (state.comm, state.req.as_deref().copied()) else {
                return Err(crate::refused(
                    "rdma_accept",
                    "the id has no connection request to accept",
                    libc::EINVAL,
                ));
            };
            // SAFETY: the id's C struct, and the caller's parameters (NULL or valid).
            let (qpn, srq) = unsafe { qp_of(id, param.as_ref()) }.ok_or_else(|| {
                crate::refused(
                    "rdma_accept",
                    "the id has no QP: make one (rdma_create_qp) or name yours in qp_num",
                    libc::EINVAL,
                )
            })?;
            if !param.is_null() {
                // SAFETY: the caller's parameters (checked non-null).
                let p = unsafe { &*param };
                let (rr, id_) = read_atomic_resources("rdma_accept", dev_limits, p)?;
                state.responder_resources = rr;
                state.initiator_depth = id_;
                state.rnr_retry_count = p.rnr_retry_count;
            }
            state.retry_count = req.retry_count;
            state.ack_timeout = req.primary.local_ack_timeout.max(state.ack_timeout);
            state.psn = psn;
            let rtr = {
                let s = &st.ids[&(id as usize)];
                qp::rtr_attr(st, s, req.local_qpn.value())
            };
            let s = &st.ids[&(id as usize)];
            qp::modify(s, rtr)?;
            qp::modify(s, qp::rts_attr(s))?;
            let mut private_data = [0u8; private_len::REP];
            private_data[..user.len()].copy_from_slice(&user);
            let p = AcceptParams {
                local_qpn: Qpn::new(qpn),
                starting_psn: Psn::new(psn),
                responder_resources: s.responder_resources,
                initiator_depth: s.initiator_depth,
                rnr_retry_count: s.rnr_retry_count.min(7),
                srq,
                private_data,
            };
            let now = st.now();
            st.cm.accept(now, comm, &p).map_err(|_| libc::EINVAL)?;
            Ok(())
        })?;
        sync_wait(id, event::ESTABLISHED)
    })
}

/// `rdma_reject`: a REJ (consumer defined) with the private data.
///
/// # Safety
/// `id` comes from a CONNECT_REQUEST event; `data` is NULL or `len` bytes.
pub unsafe extern "C" fn rdma_reject(id: *mut RdmaCmId, data: *const c_void, len: u8) -> c_int {
    ffi(|| {
        let pd: &[u8] = if data.is_null() || len == 0 {
            &[]
        } else {
            // SAFETY: the caller's `len` bytes.
            unsafe { std::slice::from_raw_parts(data.cast(), usize::from(len)) }
        };
        if pd.len() > private_len::REJ {
            return Err(libc::EINVAL);
        }
        agent::with(|st| {
            let comm = st.id(id)?.comm.ok_or(libc::EINVAL)?;
            if st.id(id)?.ps == port_space::UDP {
                st.cm
                    .sidr_reply(comm, SidrStatus::Rejected, Qpn::new(0), QKey(0), pd)
                    .map_err(|_| libc::EINVAL)?;
            } else {
                st.cm
                    .reject(comm, RejectReason::ConsumerDefined, pd)
                    .map_err(|_| libc::EINVAL)?;
            }
            st.by_comm.remove(&comm);
            st.id(id)?.comm = None;
            Ok(())
        })?;
        agent::flush();
        Ok(())
    })
}

/// `rdma_disconnect`: the QP goes to ERR (its work flushes) and a DREQ goes to the peer;
/// DISCONNECTED follows. After the peer's DREQ (DISCONNECTED already delivered) it only
/// moves the QP.
///
/// # Safety
/// `id` comes from `rdma_create_id` or a CONNECT_REQUEST event.
pub unsafe extern "C" fn rdma_disconnect(id: *mut RdmaCmId) -> c_int {
    ffi(|| {
        agent::with(|st| {
            let state = st.id(id)?;
            qp::to_error(state);
            let Some(comm) = state.comm else {
                return Err(libc::EINVAL);
            };
            let now = st.now();
            if st.cm.is_established(comm) {
                st.cm.disconnect(now, comm, &[]).map_err(|_| libc::EINVAL)?;
            }
            Ok(())
        })?;
        agent::flush();
        Ok(())
    })
}

/// `rdma_establish`: the passive side saw traffic before the RTU; or, on the active side
/// of a connection without a QP, the program has readied its QP after CONNECT_RESPONSE
/// (the RTU goes out; no ESTABLISHED follows, as with rdma-core).
///
/// # Safety
/// `id` comes from a CONNECT_REQUEST event.
pub unsafe extern "C" fn rdma_establish(id: *mut RdmaCmId) -> c_int {
    ffi(|| {
        agent::with(|st| {
            let state = st.id(id)?;
            let comm = state.comm.ok_or(libc::EINVAL)?;
            if state.rep.is_some() {
                // The active side of a connection without a QP, after CONNECT_RESPONSE:
                // the program readied its QP and now has the RTU sent.
                st.cm.ready_to_use(comm, &[]).map_err(|_| libc::EINVAL)?;
            } else {
                st.cm.establish(comm).map_err(|_| libc::EINVAL)?;
            }
            agent::drain_events(st);
            Ok(())
        })
    })
}

/// `rdma_notify`: IBV_EVENT_COMM_EST (the QP's first receive) establishes a passive
/// connection; other events mean nothing to the CM.
///
/// # Safety
/// As `rdma_establish`.
pub unsafe extern "C" fn rdma_notify(id: *mut RdmaCmId, ev: c_int) -> c_int {
    const IBV_EVENT_COMM_EST: c_int = 6;
    if ev != IBV_EVENT_COMM_EST {
        return 0;
    }
    // SAFETY: the caller's contract.
    unsafe { rdma_establish(id) }
}

/// `rdma_migrate_id`: the id's future events go to `channel`.
///
/// # Safety
/// `id` and `channel` are live.
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut RdmaCmId,
    channel: *mut RdmaEventChannel,
) -> c_int {
    ffi(|| {
        agent::with(|st| {
            if channel.is_null() || !st.channels.contains_key(&(channel as usize)) {
                return Err(crate::refused(
                    "rdma_migrate_id",
                    "migrating to synchronous operation (no channel) is not implemented on softib",
                    libc::ENOSYS,
                ));
            }
            let was_sync = std::mem::replace(&mut st.id(id)?.sync, false);
            // SAFETY: the id's C struct.
            let old = unsafe { std::mem::replace(&mut (*id).channel, channel) };
            // A synchronous id's channel was its own; from now on its events go to the
            // program's channel, and its calls no longer wait for them (rdma-core's
            // rdma_migrate_id: libfabric's verbs provider makes its endpoints synchronous,
            // resolves the address, then migrates them to its event queue).
            if was_sync && old != channel {
                crate::event::destroy_channel(st, old)?;
            }
            Ok(())
        })
    })
}

/// `rdma_set_option`: TOS, REUSEADDR, AFONLY, ACK_TIMEOUT.
///
/// # Safety
/// `value` points to `len` bytes.
pub unsafe extern "C" fn rdma_set_option(
    id: *mut RdmaCmId,
    level: c_int,
    name: c_int,
    value: *mut c_void,
    len: usize,
) -> c_int {
    ffi(|| {
        if value.is_null() || len == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's first byte (every option here is a u8 or an int whose low
        // byte is read on little-endian... read it as its own width below).
        let byte = unsafe { *value.cast::<u8>() };
        let int = if len >= 4 {
            // SAFETY: at least 4 bytes.
            unsafe { value.cast::<c_int>().read_unaligned() }
        } else {
            c_int::from(byte)
        };
        agent::with(|st| {
            let s = st.id(id)?;
            match (level, name) {
                (option::LEVEL_ID, option::ID_TOS) => s.tos = byte,
                (option::LEVEL_ID, option::ID_REUSEADDR | option::ID_AFONLY) => {
                    let _ = int;
                }
                (option::LEVEL_ID, option::ID_ACK_TIMEOUT) => s.ack_timeout = byte.min(31),
                (option::LEVEL_IB, option::IB_PATH) => return Err(crate::refused(
                    "rdma_set_option",
                    "RDMA_OPTION_IB_PATH is not implemented on softib (routes are resolved here)",
                    libc::ENOSYS,
                )),
                _ => return Err(libc::EINVAL),
            }
            Ok(())
        })
    })
}

/// `rdma_get_src_port`: the bound port, network order.
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_get_src_port(id: *mut RdmaCmId) -> u16 {
    agent::with(|st| Ok(st.id(id)?.src.map_or(0, |a| a.port().to_be()))).unwrap_or(0)
}

/// `rdma_get_dst_port`: the peer's port, network order.
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut RdmaCmId) -> u16 {
    agent::with(|st| Ok(st.id(id)?.dst.map_or(0, |a| a.port().to_be()))).unwrap_or(0)
}

/// `rdma_destroy_ep`: as `rdma_destroy_qp` then `rdma_destroy_id`.
///
/// # Safety
/// `id` comes from `rdma_create_id`.
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut RdmaCmId) {
    let _ = ffi_ptr(|| {
        agent::with(|st| {
            let s = st.id(id)?;
            qp::release(s);
            Ok(std::ptr::null_mut::<c_void>())
        })
    });
    // SAFETY: the caller's contract.
    unsafe { rdma_destroy_id(id) };
}

/// The QP type ids of port space `ps` start with: UD for RDMA_PS_UDP, RC for the others.
pub(crate) fn qp_type_of(ps: c_int) -> u32 {
    if ps == port_space::UDP {
        qp_type::UD
    } else {
        qp_type::RC
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(responder_resources: u8, initiator_depth: u8) -> RdmaConnParam {
        RdmaConnParam {
            private_data: std::ptr::null(),
            private_data_len: 0,
            responder_resources,
            initiator_depth,
            flow_control: 0,
            retry_count: 7,
            rnr_retry_count: 7,
            srq: 0,
            qp_num: 0,
        }
    }

    /// On an IB port the REQ's primary path is the SA's PathRecord: both LIDs, its SL, rate
    /// and MTU, in the subnet without a GRH, with an ACK timeout the packet lifetime allows;
    /// on RoCE it stays the GRH between the GIDs.
    #[test]
    fn an_ib_reqs_primary_path_comes_from_the_path_record() {
        use crate::fabric::{IbPath, IbRoute};
        use softib_wire::{Gid, Lid};
        let mut s = new_state(std::ptr::null_mut(), port_space::TCP);
        let (sgid, dgid) = (Gid([0xfe; 16]), Gid([0xaa; 16]));
        s.ib = Some(IbRoute {
            sgid,
            dgid,
            pkey: 0xffff,
            path: Some(IbPath {
                slid: Lid(1),
                dlid: Lid(7),
                sl: 3,
                mtu: 4,
                rate: 7,
                packet_life_time: 18,
            }),
        });
        let (p, mtu, pkey) = primary_path(&s, 5);
        assert_eq!((p.local_lid, p.remote_lid), (Lid(1), Lid(7)));
        assert_eq!((p.local_gid, p.remote_gid), (sgid, dgid));
        assert_eq!((p.sl, p.packet_rate, p.hop_limit), (3, 7, 0));
        assert!(p.subnet_local);
        assert_eq!(
            p.local_ack_timeout, 19,
            "packet lifetime 18 + 1 beats the default 14"
        );
        assert_eq!((mtu, pkey), (4, PKey(0xffff)));
        // The passive side reads the same path back, its ends swapped.
        let back = IbPath::from_req(&p, mtu);
        assert_eq!(
            (back.slid, back.dlid, back.sl, back.mtu),
            (Lid(7), Lid(1), 3, 4)
        );
        assert_eq!(back.packet_life_time, 18);

        let mut r = new_state(std::ptr::null_mut(), port_space::TCP);
        r.src = Some(SocketAddr::from(([10, 0, 0, 1], 1)));
        r.peer = Some((0, At::Gid(agent::gid_of(IpAddr::from([10, 0, 0, 2])))));
        let (p, mtu, _) = primary_path(&r, 3);
        assert_eq!(
            (p.local_lid, p.remote_lid, p.hop_limit, mtu),
            (Lid(0), Lid(0), 64, 3)
        );
        assert_eq!(p.remote_gid, agent::gid_of(IpAddr::from([10, 0, 0, 2])));
    }

    /// libfabric's verbs provider asks for RDMA_MAX_RESP_RES and RDMA_MAX_INIT_DEPTH (0xFF):
    /// the device's maximum, not 255 (which the QP's RTR would refuse).
    #[test]
    fn max_read_atomic_resources_mean_the_devices_and_more_is_refused() {
        let dev = (128, 16);
        assert_eq!(
            read_atomic_resources("t", dev, &param(0xFF, 0xFF)),
            Ok((128, 16))
        );
        assert_eq!(read_atomic_resources("t", dev, &param(4, 2)), Ok((4, 2)));
        assert_eq!(
            read_atomic_resources("t", dev, &param(128, 16)),
            Ok((128, 16))
        );
        assert_eq!(
            read_atomic_resources("t", dev, &param(129, 1)),
            Err(libc::EINVAL)
        );
        assert_eq!(
            read_atomic_resources("t", dev, &param(1, 17)),
            Err(libc::EINVAL)
        );
    }
}
