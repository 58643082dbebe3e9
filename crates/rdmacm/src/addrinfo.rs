//! `rdma_getaddrinfo`/`rdma_freeaddrinfo`: the node and service resolved as IP addresses
//! (getaddrinfo), the source address when `RAI_PASSIVE`, else the destination, with
//! rdma_cm's defaults (RC over RDMA_PS_TCP). The route stays to be resolved
//! (`rdma_resolve_route`), as without ibacm.

use std::ffi::{c_char, c_int, c_void};

use softib_verbs_abi::qp_type;
use softib_verbs_abi::rdma_cm::{port_space, rai, RdmaAddrinfo};

use crate::{ffi, set_errno};

/// One address, copied into its own allocation (freed by `rdma_freeaddrinfo`).
fn copy_addr(sa: *const libc::sockaddr, len: u32) -> *mut c_void {
    if sa.is_null() || len == 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `len` bytes of the sockaddr getaddrinfo gave (or the caller's hints).
    let bytes = unsafe { std::slice::from_raw_parts(sa.cast::<u8>(), len as usize) };
    Box::into_raw(bytes.to_vec().into_boxed_slice()).cast::<c_void>()
}

fn free_addr(p: *mut c_void, len: u32) {
    if !p.is_null() {
        // SAFETY: a boxed slice of `len` bytes made by `copy_addr`.
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                p.cast::<u8>(),
                len as usize,
            ))
        });
    }
}

/// `rdma_getaddrinfo`.
///
/// # Safety
/// `node` and `service` are NULL or C strings; `hints` is NULL or valid; `res` is writable.
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
    res: *mut *mut RdmaAddrinfo,
) -> c_int {
    ffi(|| {
        // SAFETY: the caller's hints, if any.
        let h = unsafe { hints.as_ref() };
        if res.is_null() || (node.is_null() && service.is_null() && h.is_none()) {
            return Err(libc::EINVAL);
        }
        if node.is_null() && service.is_null() {
            // Only hints (libfabric's verbs provider passes the addresses it has in them):
            // the result is their addresses, as rdma-core copies them.
            let Some(h) = h else { return Err(libc::EINVAL) };
            // SAFETY: checked non-null; the caller's.
            unsafe { *res = Box::into_raw(Box::new(from_hints(h))) };
            return Ok(());
        }
        let flags = h.map_or(0, |h| h.ai_flags);
        let passive = flags & rai::PASSIVE != 0;
        // SAFETY: all-zero is a valid `addrinfo` (no pointers set).
        let mut lh: libc::addrinfo = unsafe { std::mem::zeroed() };
        lh.ai_family = h.map_or(libc::AF_UNSPEC, |h| h.ai_family);
        lh.ai_socktype = libc::SOCK_STREAM;
        if passive {
            lh.ai_flags |= libc::AI_PASSIVE;
        }
        if flags & rai::NUMERICHOST != 0 {
            lh.ai_flags |= libc::AI_NUMERICHOST;
        }
        let mut out: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: C strings or NULL from the caller; `lh` and `out` are live locals.
        let rc = unsafe { libc::getaddrinfo(node, service, &lh, &mut out) };
        if rc != 0 || out.is_null() {
            // rdma_getaddrinfo answers with an errno (ENODEV: no such address).
            return Err(if rc == libc::EAI_SYSTEM {
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EINVAL)
            } else {
                libc::ENODEV
            });
        }
        // SAFETY: getaddrinfo succeeded: `out` is its first result, freed below.
        let first = unsafe { &*out };
        let (src, src_len, dst, dst_len) = if passive {
            (
                copy_addr(first.ai_addr, first.ai_addrlen),
                first.ai_addrlen,
                std::ptr::null_mut(),
                0,
            )
        } else {
            let (hs, hl) = h.map_or((std::ptr::null(), 0), |h| {
                (
                    h.ai_src_addr.cast_const().cast::<libc::sockaddr>(),
                    h.ai_src_len,
                )
            });
            (
                copy_addr(hs, hl),
                hl,
                copy_addr(first.ai_addr, first.ai_addrlen),
                first.ai_addrlen,
            )
        };
        let family = first.ai_family;
        // SAFETY: the list getaddrinfo made, freed once.
        unsafe { libc::freeaddrinfo(out) };
        let ai = new_addrinfo(flags, family, h, (src, src_len), (dst, dst_len));
        // SAFETY: checked non-null; the caller's.
        unsafe { *res = Box::into_raw(Box::new(ai)) };
        Ok(())
    })
}

/// The answer to hints alone: their addresses (copied), flags, port space and QP type.
fn from_hints(h: &RdmaAddrinfo) -> RdmaAddrinfo {
    let src = copy_addr(h.ai_src_addr.cast_const().cast(), h.ai_src_len);
    let dst = copy_addr(h.ai_dst_addr.cast_const().cast(), h.ai_dst_len);
    let family_of = |p: *mut c_void, len: u32| {
        // SAFETY: a sockaddr of `len` bytes this function copied; its family comes first.
        (!p.is_null() && len >= 2).then(|| c_int::from(unsafe { *p.cast::<libc::sa_family_t>() }))
    };
    let family = family_of(src, h.ai_src_len)
        .or_else(|| family_of(dst, h.ai_dst_len))
        .unwrap_or(h.ai_family);
    let len = |p: *mut c_void, n: u32| if p.is_null() { 0 } else { n };
    new_addrinfo(
        h.ai_flags,
        family,
        Some(h),
        (src, len(src, h.ai_src_len)),
        (dst, len(dst, h.ai_dst_len)),
    )
}

/// One result: its addresses (this library's copies), with rdma_cm's defaults (RC over
/// RDMA_PS_TCP) for what the hints leave unsaid.
fn new_addrinfo(
    flags: c_int,
    family: c_int,
    h: Option<&RdmaAddrinfo>,
    (src, src_len): (*mut c_void, u32),
    (dst, dst_len): (*mut c_void, u32),
) -> RdmaAddrinfo {
    RdmaAddrinfo {
        ai_flags: flags,
        ai_family: family,
        ai_qp_type: h
            .map(|h| h.ai_qp_type)
            .filter(|&t| t != 0)
            .unwrap_or(qp_type::RC as c_int),
        ai_port_space: h
            .map(|h| h.ai_port_space)
            .filter(|&p| p != 0)
            .unwrap_or(port_space::TCP),
        ai_src_len: src_len,
        ai_dst_len: dst_len,
        ai_src_addr: src,
        ai_dst_addr: dst,
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    }
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` comes from `rdma_getaddrinfo`.
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut RdmaAddrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: each entry is a box `rdma_getaddrinfo` leaked, with its own addresses.
        let ai = unsafe { Box::from_raw(p) };
        free_addr(ai.ai_src_addr, ai.ai_src_len);
        free_addr(ai.ai_dst_addr, ai.ai_dst_len);
        p = ai.ai_next;
    }
    let _ = set_errno;
}
