//! Synchronous ids (made without an event channel, as `rdma_create_ep` makes them): each
//! call that would produce an event waits for it on the id's own channel and answers with
//! its outcome, as the real librdmacm does; `rdma_get_request` waits for a connection
//! request on a synchronous listener; `rdma_create_ep`/`rdma_destroy_ep` wrap it all.

use std::ffi::c_int;

use softib_verbs_abi::rdma_cm::{event, port_space, rai, RdmaAddrinfo, RdmaCmEvent, RdmaCmId};
use softib_verbs_abi::{IbvPd, IbvQpInitAttr};

use crate::agent::{self, EventBox};
use crate::event::{rdma_ack_cm_event, rdma_get_cm_event};
use crate::{ffi, id, qp};

/// The errno an event's failure means.
fn errno_of(ev: &RdmaCmEvent) -> c_int {
    match ev.event {
        event::REJECTED => libc::ECONNREFUSED,
        _ if ev.status < 0 => -ev.status,
        _ => libc::EIO,
    }
}

/// Whether `id` is synchronous.
pub fn is_sync(id: *mut RdmaCmId) -> bool {
    agent::with(|st| Ok(st.id(id)?.sync)).unwrap_or(false)
}

/// Waits on a synchronous id's channel for `want`; an error event becomes its errno.
/// Other events (a DISCONNECTED nobody waits for) are dropped.
pub fn wait(id: *mut RdmaCmId, want: c_int) -> Result<(), c_int> {
    loop {
        let ev = next(id)?;
        // SAFETY: `ev` is the live event just taken; acked once below.
        let (kind, errno) = unsafe { ((*ev).event, errno_of(&*ev)) };
        // SAFETY: as above.
        unsafe { rdma_ack_cm_event(ev) };
        if kind == want {
            return Ok(());
        }
        if matches!(
            kind,
            event::ADDR_ERROR
                | event::ROUTE_ERROR
                | event::CONNECT_ERROR
                | event::UNREACHABLE
                | event::REJECTED
        ) {
            return Err(errno);
        }
    }
}

/// The next event on the id's channel.
fn next(id: *mut RdmaCmId) -> Result<*mut RdmaCmEvent, c_int> {
    // SAFETY: the id is live (the caller's contract); its channel is its own.
    let channel = unsafe { (*id).channel };
    let mut ev: *mut RdmaCmEvent = std::ptr::null_mut();
    // SAFETY: a live channel and a local to write to.
    if unsafe { rdma_get_cm_event(channel, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    Ok(ev)
}

/// `rdma_get_request`: the next connection request on a synchronous listener, as a new id
/// (with a QP when the listener was made by `rdma_create_ep` with QP attributes). The
/// request's event stays readable in `id->event` until the id is destroyed.
///
/// # Safety
/// `listen` is a listening synchronous id; `out` is writable.
pub unsafe extern "C" fn rdma_get_request(listen: *mut RdmaCmId, out: *mut *mut RdmaCmId) -> c_int {
    ffi(|| {
        if out.is_null() || !is_sync(listen) {
            return Err(libc::EINVAL);
        }
        let ev = loop {
            let ev = next(listen)?;
            // SAFETY: the live event just taken.
            if unsafe { (*ev).event } == event::CONNECT_REQUEST {
                break ev;
            }
            // SAFETY: as above, acked once.
            unsafe { rdma_ack_cm_event(ev) };
        };
        // SAFETY: a CONNECT_REQUEST's id is the new connection's.
        let child = unsafe { (*ev).id };
        // SAFETY: the child is live; its event is the request, freed with it.
        unsafe { (*child).event = ev };
        let saved = agent::with(|st| Ok(st.id(listen)?.ep_qp.clone()))?;
        if let Some((mut attr, pd)) = saved {
            // SAFETY: the child is live; the attributes are the listener's copy.
            if unsafe { qp::rdma_create_qp(child, pd, &mut attr.0) } != 0 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::ENOMEM);
                // SAFETY: the child is ours to destroy.
                unsafe { id::rdma_destroy_id(child) };
                return Err(e);
            }
        }
        // SAFETY: checked non-null; the caller's.
        unsafe { *out = child };
        Ok(())
    })
}

/// The QP attributes an endpoint listener gives each request's id.
pub struct SavedAttr(pub IbvQpInitAttr);

impl Clone for SavedAttr {
    fn clone(&self) -> SavedAttr {
        // SAFETY: `ibv_qp_init_attr` is plain data (pointers and integers): a bitwise copy
        // is a copy.
        SavedAttr(unsafe { std::ptr::read(&self.0) })
    }
}

// SAFETY: the attributes' pointers (CQs, SRQ, context) are the program's, used only under
// the agent's lock or by the program's own threads.
unsafe impl Send for SavedAttr {}

/// `rdma_create_ep`: a synchronous id for `res` — bound (passive) or resolved to its
/// destination with its route (active) — with a QP when `attr` is given (passive: one for
/// each request `rdma_get_request` returns).
///
/// # Safety
/// `out` is writable; `res` comes from `rdma_getaddrinfo`; `pd` and `attr` are NULL or
/// valid.
pub unsafe extern "C" fn rdma_create_ep(
    out: *mut *mut RdmaCmId,
    res: *mut RdmaAddrinfo,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    ffi(|| {
        if out.is_null() || res.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's addrinfo.
        let r = unsafe { &*res };
        let mut idp: *mut RdmaCmId = std::ptr::null_mut();
        // SAFETY: a NULL channel makes a synchronous id; `idp` is a local.
        if unsafe {
            id::rdma_create_id(
                std::ptr::null_mut(),
                &mut idp,
                std::ptr::null_mut(),
                r.ai_port_space,
            )
        } != 0
        {
            return Err(last());
        }
        if r.ai_port_space == port_space::IB {
            // RDMA_PS_IB holds connected and UD services: the id is of the addrinfo's QP
            // type, as rdma-core's rdma_create_ep makes it (rdma_create_id2).
            // SAFETY: the id just made.
            unsafe { (*idp).qp_type = r.ai_qp_type as u32 };
        }
        let fail = |e: c_int| {
            // SAFETY: the id just made, destroyed once.
            unsafe { id::rdma_destroy_id(idp) };
            Err(e)
        };
        if r.ai_flags & rai::PASSIVE != 0 {
            // SAFETY: the addrinfo's source address.
            if unsafe { id::rdma_bind_addr(idp, r.ai_src_addr.cast()) } != 0 {
                return fail(last());
            }
            if !attr.is_null() {
                // As rdma-core: the endpoint's QP is of the addrinfo's type.
                // SAFETY: the caller's attributes (checked non-null), then copied.
                unsafe { (*attr).qp_type = r.ai_qp_type as u32 };
                // SAFETY: as above.
                let copy = SavedAttr(unsafe { std::ptr::read(attr) });
                agent::with(|st| {
                    st.id(idp)?.ep_qp = Some((copy, pd));
                    Ok(())
                })?;
            }
        } else {
            // SAFETY: the addrinfo's addresses.
            let rc = unsafe {
                id::rdma_resolve_addr(idp, r.ai_src_addr.cast(), r.ai_dst_addr.cast(), 2000)
            };
            // SAFETY: a resolved id.
            if rc != 0 || unsafe { id::rdma_resolve_route(idp, 2000) } != 0 {
                return fail(last());
            }
            if !attr.is_null() {
                // SAFETY: the caller's attributes (checked non-null): the endpoint's QP is of
                // the addrinfo's type, as rdma-core makes it; then its PD and attributes.
                unsafe { (*attr).qp_type = r.ai_qp_type as u32 };
                // SAFETY: as above.
                if unsafe { qp::rdma_create_qp(idp, pd, attr) } != 0 {
                    return fail(last());
                }
            }
        }
        // SAFETY: checked non-null; the caller's.
        unsafe { *out = idp };
        Ok(())
    })
}

fn last() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Frees the request event a synchronous id kept (`rdma_get_request`).
pub fn free_request_event(c: *mut RdmaCmId) {
    // SAFETY: the id is live; its `event`, if set, is a box this library made.
    unsafe {
        let ev = (*c).event;
        if !ev.is_null() {
            (*c).event = std::ptr::null_mut();
            drop(Box::from_raw(ev.cast::<EventBox>()));
        }
    }
}
