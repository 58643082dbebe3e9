//! The CM machine's events turned into rdma_cm's, in rdma_cm's order: CONNECT_REQUEST on the
//! listener's channel with a new id for the request, the peer's REP readying the QP (or
//! CONNECT_RESPONSE for an id without one), ESTABLISHED, REJECTED with the REJ's reason as
//! status, UNREACHABLE or CONNECT_ERROR with -ETIMEDOUT, DISCONNECTED.

use std::ffi::c_int;
use std::net::SocketAddr;

use softib_cm::{CmaHeader, Event as CmEvent, RejectReason};
use softib_verbs_abi::rdma_cm::{event, RdmaCmId, RdmaEventChannel};
use softib_verbs_abi::IbvGid;

use crate::agent::{self, At, Peer, State};
use crate::event::{new_event, set_private_data};
use crate::id::{new_state, qp_type_of, storage_of, zeroed_id};
use crate::qp;

/// Turns one of the machine's events into rdma_cm's.
pub fn on_cm_event(st: &mut State, ev: CmEvent<Peer>) {
    match ev {
        CmEvent::ConnectRequest {
            id: comm,
            from,
            req,
        } => connect_request(st, comm, from, &req),
        CmEvent::Reply { id: comm, rep } => {
            let Some(&key) = st.by_comm.get(&comm) else {
                return;
            };
            let Some(s) = st.ids.get_mut(&key) else {
                return;
            };
            s.initiator_depth = s.initiator_depth.min(rep.responder_resources);
            s.responder_resources = s.responder_resources.min(rep.initiator_depth);
            s.rnr_retry_count = rep.rnr_retry_count;
            s.rep = Some(Box::new(rep));
            let s = &st.ids[&key];
            // SAFETY: the id's C struct.
            if unsafe { (*s.c).qp }.is_null() {
                connect_response(st, key, &rep);
                return;
            }
            let rtr = qp::rtr_attr(st, s, rep.local_qpn.value());
            let ready = qp::modify(s, rtr).and_then(|()| qp::modify(s, qp::rts_attr(s)));
            match ready {
                Ok(()) => {
                    let _ = st.cm.ready_to_use(comm, &[]);
                }
                Err(e) => {
                    let _ = st.cm.reject(comm, RejectReason::ConsumerDefined, &[]);
                    finish(st, key, comm, event::CONNECT_ERROR, -e, &[]);
                }
            }
        }
        CmEvent::Established { id: comm } => {
            let Some(&key) = st.by_comm.get(&comm) else {
                return;
            };
            let Some(s) = st.ids.get(&key) else { return };
            // SAFETY: the id's C struct.
            if s.rep.is_some() && unsafe { (*s.c).qp }.is_null() {
                // The program heard CONNECT_RESPONSE and sent the RTU (rdma_establish).
                return;
            }
            let mut e = new_event(s.c, event::ESTABLISHED, 0);
            if let Some(rep) = &s.rep {
                set_private_data(&mut e, &rep.private_data);
                // Writing a union's plain-data fields is safe.
                e.ev.param.conn.responder_resources = rep.responder_resources;
                e.ev.param.conn.initiator_depth = rep.initiator_depth;
                e.ev.param.conn.qp_num = rep.local_qpn.value();
            }
            // SAFETY: the id's C struct.
            let channel = unsafe { (*s.c).channel };
            st.post(channel, e);
        }
        CmEvent::Rejected {
            id: comm,
            reason,
            private_data,
        } => {
            let Some(&key) = st.by_comm.get(&comm) else {
                return;
            };
            let status = c_int::from(u16::from(reason));
            finish(st, key, comm, event::REJECTED, status, &private_data);
        }
        CmEvent::TimedOut { id: comm, active } => {
            let Some(&key) = st.by_comm.get(&comm) else {
                return;
            };
            let kind = if active {
                event::UNREACHABLE
            } else {
                event::CONNECT_ERROR
            };
            finish(st, key, comm, kind, -libc::ETIMEDOUT, &[]);
        }
        CmEvent::Disconnected { id: comm } => {
            let Some(&key) = st.by_comm.get(&comm) else {
                return;
            };
            let Some(s) = st.ids.get(&key) else { return };
            // The QP is left as it is, as rdma-core leaves it: the program moves it with
            // rdma_disconnect, and may already have destroyed it with ibv_destroy_qp (rping
            // does, after its own rdma_disconnect) while the id still points at it.
            let e = new_event(s.c, event::DISCONNECTED, 0);
            // SAFETY: the id's C struct.
            let channel = unsafe { (*s.c).channel };
            st.post(channel, e);
        }
        CmEvent::TimeWaitExit { id: comm } => {
            st.by_comm.remove(&comm);
        }
        CmEvent::SidrRequest { id, from, req } => crate::ud::on_sidr_request(st, id, from, &req),
        CmEvent::SidrReply { id, rep } => crate::ud::on_sidr_reply(st, id, &rep),
        CmEvent::SidrTimedOut { id } => {
            let Some(&key) = st.by_comm.get(&id) else {
                return;
            };
            finish(st, key, id, event::UNREACHABLE, -libc::ETIMEDOUT, &[]);
        }
    }
}

/// The REP of a connection without a QP: CONNECT_RESPONSE with the REP's parameters, for
/// the program to ready its QP and call `rdma_establish`.
fn connect_response(st: &mut State, key: usize, rep: &softib_cm::Rep) {
    let Some(s) = st.ids.get(&key) else { return };
    let mut e = new_event(s.c, event::CONNECT_RESPONSE, 0);
    set_private_data(&mut e, &rep.private_data);
    e.ev.param.conn.responder_resources = rep.responder_resources;
    e.ev.param.conn.initiator_depth = rep.initiator_depth;
    e.ev.param.conn.flow_control = u8::from(rep.end_to_end_flow_control);
    e.ev.param.conn.rnr_retry_count = rep.rnr_retry_count;
    e.ev.param.conn.srq = u8::from(rep.srq);
    e.ev.param.conn.qp_num = rep.local_qpn.value();
    // SAFETY: the id's C struct.
    let channel = unsafe { (*s.c).channel };
    st.post(channel, e);
}

/// Ends a connection attempt with `kind` (REJECTED, UNREACHABLE, CONNECT_ERROR).
pub fn finish(
    st: &mut State,
    key: usize,
    comm: softib_cm::CommId,
    kind: c_int,
    status: c_int,
    pd: &[u8],
) {
    st.by_comm.remove(&comm);
    let Some(s) = st.ids.get_mut(&key) else {
        return;
    };
    s.comm = None;
    let mut e = new_event(s.c, kind, status);
    if !pd.is_empty() {
        set_private_data(&mut e, pd);
    }
    // SAFETY: the id's C struct.
    let channel = unsafe { (*s.c).channel };
    st.post(channel, e);
}

/// A REQ for a service listened on: a new id on the listener's channel, and
/// CONNECT_REQUEST with the consumer's private data (after rdma_cm's header).
fn connect_request(st: &mut State, comm: softib_cm::CommId, from: Peer, req: &softib_cm::Req) {
    let (c, lkey, listen_channel) =
        match request_id(st, comm, from, req.service_id, &req.private_data) {
            Ok(x) => x,
            Err(reason) => {
                let _ = st.cm.reject(comm, reason, &[]);
                return;
            }
        };
    if let Some(s) = st.ids.get_mut(&(c as usize)) {
        s.req = Some(Box::new(*req));
        if let Some(r) = s.ib.as_mut() {
            // On InfiniBand the REQ names the path (and the requester's port GID): the
            // passive side takes it instead of asking the SA, as the kernel's CM does.
            r.dgid = req.primary.local_gid;
            r.path = Some(crate::fabric::IbPath::from_req(&req.primary, req.path_mtu));
            // SAFETY: the id's C struct, made just now.
            unsafe { (*c).route.addr.ibaddr.dgid = IbvGid { raw: r.dgid.0 } };
        }
    }
    let mut e = new_event(c, event::CONNECT_REQUEST, 0);
    e.ev.listen_id = lkey as *mut RdmaCmId;
    set_private_data(&mut e, &req.private_data[CmaHeader::LEN..]);
    e.ev.param.conn.responder_resources = req.responder_resources;
    e.ev.param.conn.initiator_depth = req.initiator_depth;
    e.ev.param.conn.flow_control = u8::from(req.end_to_end_flow_control);
    e.ev.param.conn.retry_count = req.retry_count;
    e.ev.param.conn.rnr_retry_count = req.rnr_retry_count;
    e.ev.param.conn.srq = u8::from(req.srq);
    e.ev.param.conn.qp_num = req.local_qpn.value();
    st.post(listen_channel, e);
}

/// The id a request (REQ or SIDR_REQ) for `service_id` from `from` gets: made like the
/// listener, bound to the addresses rdma_cm's header in `private_data` names, and holding
/// connection `comm`. Returns it, the listener, and the channel CONNECT_REQUEST goes to;
/// or why the request is refused.
pub fn request_id(
    st: &mut State,
    comm: softib_cm::CommId,
    from: Peer,
    service_id: u64,
    private_data: &[u8],
) -> Result<(*mut RdmaCmId, usize, *mut RdmaEventChannel), RejectReason> {
    let &lkey = st
        .listeners
        .get(&service_id)
        .ok_or(RejectReason::InvalidServiceId)?;
    let (peer_addr, our_ip) =
        softib_cm::rdma_cm::request_addrs(private_data).ok_or(RejectReason::ConsumerDefined)?;
    let dev = st
        .devs
        .iter()
        .position(|d| d.index == from.0)
        .ok_or(RejectReason::NoResources)?;
    let ib = st.devs[dev].ib.then(|| {
        let sgid = st.devs[dev].gids.first().copied().unwrap_or_default();
        let dlid = match from.1 {
            At::Lid(l) => l,
            At::Gid(_) => softib_wire::Lid(0),
        };
        crate::fabric::IbRoute {
            sgid,
            dgid: softib_wire::Gid::default(),
            pkey: 0xFFFF,
            path: Some(crate::fabric::IbPath::back_to(dlid)),
        }
    });
    let ctx = crate::device::context(st, dev).map_err(|_| RejectReason::NoResources)?;
    let pd = crate::device::pd(st, dev).map_err(|_| RejectReason::NoResources)?;
    let l = st.ids.get(&lkey).ok_or(RejectReason::InvalidServiceId)?;
    let port = l.src.map_or(0, |s| s.port());
    let (ps, sync) = (l.ps, l.sync);
    // SAFETY: the listener's C struct.
    let (listen_channel, context) = unsafe { ((*l.c).channel, (*l.c).context) };
    // A synchronous listener's requests become synchronous ids, each with its channel.
    let channel = if sync {
        crate::event::new_channel(st).map_err(|_| RejectReason::NoResources)?
    } else {
        listen_channel
    };
    let src = SocketAddr::new(our_ip, port);
    let dst = peer_addr;
    let mut c = zeroed_id();
    c.verbs = ctx;
    c.pd = pd;
    c.channel = channel;
    c.context = context;
    c.ps = ps;
    c.port_num = 1;
    c.qp_type = qp_type_of(ps);
    c.route.addr.src_addr = storage_of(src);
    c.route.addr.dst_addr = storage_of(dst);
    let (sgid, dgid) = match (&ib, from.1) {
        (Some(r), _) => (r.sgid, r.dgid),
        (None, At::Gid(g)) => (agent::gid_of(our_ip), g),
        (None, At::Lid(_)) => (agent::gid_of(our_ip), softib_wire::Gid::default()),
    };
    c.route.addr.ibaddr.sgid = IbvGid { raw: sgid.0 };
    c.route.addr.ibaddr.dgid = IbvGid { raw: dgid.0 };
    c.route.addr.ibaddr.pkey = 0xFFFF;
    c.route.num_paths = 0;
    let c = Box::into_raw(Box::new(c));
    let mut s = new_state(c, ps);
    s.dev = Some(dev);
    s.src = Some(src);
    s.dst = Some(dst);
    s.comm = Some(comm);
    s.peer = Some(from);
    s.ib = ib;
    s.sync = sync;
    st.ids.insert(c as usize, s);
    st.by_comm.insert(comm, c as usize);
    Ok((c, lkey, listen_channel))
}
