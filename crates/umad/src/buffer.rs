//! The buffer a MAD travels in (`struct ib_user_mad`, 64 bytes, the MAD after it) and its
//! accessors, as rdma-core's (the "new" user MAD API with P_Key indices, which every kernel
//! since 2.6.x has): nothing here talks to the daemon.

use std::ffi::{c_int, c_void};

use softib_verbs_abi::umad::{IbMadAddr, IbUserMad};

use crate::DEBUG;

/// `umad_size`: the header in front of every MAD.
pub(crate) extern "C" fn umad_size() -> usize {
    std::mem::size_of::<IbUserMad>()
}

/// `umad_get_mad`: where the MAD starts.
pub(crate) extern "C" fn umad_get_mad(umad: *mut c_void) -> *mut c_void {
    (umad as *mut u8).wrapping_add(umad_size()).cast()
}

fn header<'a>(umad: *mut c_void) -> Option<&'a mut IbUserMad> {
    // SAFETY: the callers pass a buffer of at least umad_size() bytes that they own for the
    // call, aligned as malloc aligns (the header's alignment is 4).
    unsafe { (umad as *mut IbUserMad).as_mut() }
}

/// `umad_status`: 0, or the errno value of a send that failed (ETIMEDOUT).
pub(crate) extern "C" fn umad_status(umad: *mut c_void) -> c_int {
    header(umad).map_or(-libc::EINVAL, |h| h.status as c_int)
}

/// `umad_get_mad_addr`.
pub(crate) extern "C" fn umad_get_mad_addr(umad: *mut c_void) -> *mut IbMadAddr {
    header(umad).map_or(std::ptr::null_mut(), |h| &mut h.addr)
}

/// `umad_set_grh`: copies the GRH fields of `mad_addr` (flow label in host order), or clears
/// the GRH when NULL.
pub(crate) extern "C" fn umad_set_grh(umad: *mut c_void, mad_addr: *mut c_void) -> c_int {
    let Some(h) = header(umad) else {
        return -libc::EINVAL;
    };
    // SAFETY: a non-NULL `mad_addr` is an ib_mad_addr_t of the caller's.
    match unsafe { (mad_addr as *const IbMadAddr).as_ref() } {
        Some(a) => {
            h.addr.grh_present = 1;
            h.addr.gid = a.gid;
            h.addr.flow_label = a.flow_label.to_be();
            h.addr.hop_limit = a.hop_limit;
            h.addr.traffic_class = a.traffic_class;
        }
        None => h.addr.grh_present = 0,
    }
    0
}

/// `umad_set_addr`: destination LID, QP, SL and Q_Key, in host order.
pub(crate) extern "C" fn umad_set_addr(
    umad: *mut c_void,
    dlid: c_int,
    dqp: c_int,
    sl: c_int,
    qkey: c_int,
) -> c_int {
    let Some(h) = header(umad) else {
        return -libc::EINVAL;
    };
    h.addr.qpn = (dqp as u32).to_be();
    h.addr.lid = (dlid as u16).to_be();
    h.addr.qkey = (qkey as u32).to_be();
    h.addr.sl = sl as u8;
    0
}

/// `umad_set_addr_net`: the same, already in network order.
pub(crate) extern "C" fn umad_set_addr_net(
    umad: *mut c_void,
    dlid: u16,
    dqp: u32,
    sl: c_int,
    qkey: u32,
) -> c_int {
    let Some(h) = header(umad) else {
        return -libc::EINVAL;
    };
    h.addr.qpn = dqp;
    h.addr.lid = dlid;
    h.addr.qkey = qkey;
    h.addr.sl = sl as u8;
    0
}

/// `umad_set_pkey`.
pub(crate) extern "C" fn umad_set_pkey(umad: *mut c_void, pkey_index: c_int) -> c_int {
    let Some(h) = header(umad) else {
        return -libc::EINVAL;
    };
    h.addr.pkey_index = pkey_index as u16;
    0
}

/// `umad_get_pkey`.
pub(crate) extern "C" fn umad_get_pkey(umad: *mut c_void) -> c_int {
    header(umad).map_or(0, |h| c_int::from(h.addr.pkey_index))
}

/// `umad_debug`: sets the level (when >= 0) and returns it.
pub(crate) extern "C" fn umad_debug(level: c_int) -> c_int {
    use std::sync::atomic::Ordering;
    if level >= 0 {
        DEBUG.store(level, Ordering::Relaxed);
    }
    DEBUG.load(Ordering::Relaxed)
}

/// The lines `umad_addr_dump` writes.
pub(crate) fn addr_text(a: &IbMadAddr) -> String {
    let gid: String = a.gid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "qpn {} qkey 0x{:x} lid {} sl {}\ngrh_present {} gid_index {} hop_limit {} \
         traffic_class {} flow_label 0x{:x} pkey_index 0x{:x}\nGid 0x{gid}",
        u32::from_be(a.qpn),
        u32::from_be(a.qkey),
        u16::from_be(a.lid),
        a.sl,
        a.grh_present,
        a.gid_index,
        a.hop_limit,
        a.traffic_class,
        a.flow_label,
        a.pkey_index
    )
}

/// `umad_addr_dump`.
pub(crate) extern "C" fn umad_addr_dump(addr: *mut IbMadAddr) {
    // SAFETY: a non-NULL `addr` is an ib_mad_addr_t of the caller's.
    if let Some(a) = unsafe { addr.as_ref() } {
        eprintln!(
            "ibwarn: [{}] umad_addr_dump: {}",
            std::process::id(),
            addr_text(a)
        );
    }
}

/// `umad_dump`.
pub(crate) extern "C" fn umad_dump(umad: *mut c_void) {
    if let Some(h) = header(umad) {
        eprintln!(
            "ibwarn: [{}] umad_dump: agent id {} status {:x} timeout {}",
            std::process::id(),
            h.agent_id,
            h.status,
            h.timeout_ms
        );
        umad_addr_dump(&mut h.addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_kept_in_network_order() {
        let mut buf = vec![0u8; umad_size() + 256];
        let p = buf.as_mut_ptr().cast();
        assert_eq!(umad_get_mad(p) as usize - p as usize, 64);
        umad_set_addr(p, 0x12, 1, 3, 0x8001_0000u32 as c_int);
        umad_set_pkey(p, 2);
        let a = umad_get_mad_addr(p);
        // SAFETY: points into `buf`.
        let a = unsafe { &*a };
        assert_eq!(u16::from_be(a.lid), 0x12);
        assert_eq!(u32::from_be(a.qpn), 1);
        assert_eq!(u32::from_be(a.qkey), 0x8001_0000);
        assert_eq!(umad_get_pkey(p), 2);
        assert!(addr_text(a).starts_with("qpn 1 qkey 0x80010000 lid 18 sl 3"));
    }
}
