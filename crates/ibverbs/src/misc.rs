//! The rest of the public API: the `*_str` helpers and rate conversions (rdma-core's tables),
//! fork support, the kernel-struct conversions librdmacm uses, and the import calls, which
//! share objects through a uverbs file softib does not have.

use std::ffi::{c_char, c_int, c_void};

use softib_verbs_abi as abi;

fn text(s: &'static str) -> *const c_char {
    s.as_ptr() as *const c_char
}

/// `ibv_node_type_str`.
pub(crate) extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    text(match node_type {
        1 => "InfiniBand channel adapter\0",
        2 => "InfiniBand switch\0",
        3 => "InfiniBand router\0",
        4 => "iWARP NIC\0",
        5 => "usNIC\0",
        6 => "usNIC UDP\0",
        7 => "unspecified\0",
        _ => "unknown\0",
    })
}

/// `ibv_port_state_str`.
pub(crate) extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    text(match port_state {
        0 => "no state change (NOP)\0",
        1 => "down\0",
        2 => "init\0",
        3 => "armed\0",
        4 => "active\0",
        5 => "active defer\0",
        _ => "unknown\0",
    })
}

/// `ibv_event_type_str`.
pub(crate) extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const NAMES: [&str; 20] = [
        "CQ error\0",
        "local work queue catastrophic error\0",
        "invalid request local work queue error\0",
        "local access violation work queue error\0",
        "communication established\0",
        "send queue drained\0",
        "path migrated\0",
        "path migration request error\0",
        "local catastrophic error\0",
        "port active\0",
        "port error\0",
        "LID change\0",
        "P_Key change\0",
        "SM change\0",
        "SRQ catastrophic error\0",
        "SRQ limit reached\0",
        "last WQE reached\0",
        "client reregistration\0",
        "GID table change\0",
        "WQ fatal\0",
    ];
    text(
        usize::try_from(event)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unknown\0"),
    )
}

/// `ibv_wc_status_str`: rdma-core's text (softib's own tools print the engine's names).
pub(crate) extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const NAMES: [&str; 24] = [
        "success\0",
        "local length error\0",
        "local QP operation error\0",
        "local EE context operation error\0",
        "local protection error\0",
        "Work Request Flushed Error\0",
        "memory management operation error\0",
        "bad response error\0",
        "local access error\0",
        "remote invalid request error\0",
        "remote access error\0",
        "remote operation error\0",
        "transport retry counter exceeded\0",
        "RNR retry counter exceeded\0",
        "local RDD violation error\0",
        "remote invalid RD request\0",
        "aborted error\0",
        "invalid EE context number\0",
        "invalid EE context state\0",
        "fatal error\0",
        "response timeout error\0",
        "general error\0",
        "TM error\0",
        "TM software rendezvous\0",
    ];
    text(
        usize::try_from(status)
            .ok()
            .and_then(|i| NAMES.get(i))
            .copied()
            .unwrap_or("unknown\0"),
    )
}

/// `enum ibv_rate` values with their multiple of 2.5 Gb/s and their Mb/s (rdma-core's
/// tables: the multiple exists only for the rates that are one).
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, -1, 14062),
    (12, -1, 56250),
    (13, -1, 112500),
    (14, -1, 168750),
    (15, -1, 25781),
    (16, -1, 103125),
    (17, -1, 206250),
    (18, -1, 309375),
    (19, 11, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

/// `ibv_rate_to_mult`.
pub(crate) extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

/// `mult_to_ibv_rate` (`IBV_RATE_MAX`, 0, for an unknown multiple).
pub(crate) extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult > 0)
        .map_or(0, |r| r.0)
}

/// `ibv_rate_to_mbps`.
pub(crate) extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

/// `mbps_to_ibv_rate`.
pub(crate) extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

/// `ibv_fork_init`: nothing to do — the daemon reaches a region through the process that
/// registered it (cross-memory attach by pid), so a child's copy-on-write pages never
/// confuse it, and no page needs `MADV_DONTFORK`.
pub(crate) extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED` (see [`ibv_fork_init`]).
pub(crate) extern "C" fn ibv_is_fork_initialized() -> u32 {
    abi::fork_status::UNNEEDED
}

/// `ibv_dontfork_range`: see [`ibv_fork_init`].
pub(crate) extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: see [`ibv_fork_init`].
pub(crate) extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_copy_ah_attr_from_kern` (rdma-core's `marshall.c`).
pub(crate) extern "C" fn ibv_copy_ah_attr_from_kern(
    dst: *mut abi::IbvAhAttr,
    src: *const abi::IbUverbsAhAttr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes the two structs.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    copy_ah_attr(d, s);
}

fn copy_ah_attr(d: &mut abi::IbvAhAttr, s: &abi::IbUverbsAhAttr) {
    d.grh.dgid.raw = s.dgid;
    d.grh.flow_label = s.flow_label;
    d.grh.sgid_index = s.sgid_index;
    d.grh.hop_limit = s.hop_limit;
    d.grh.traffic_class = s.traffic_class;
    d.dlid = s.dlid;
    d.sl = s.sl;
    d.src_path_bits = s.src_path_bits;
    d.static_rate = s.static_rate;
    d.is_global = s.is_global;
    d.port_num = s.port_num;
}

/// `ibv_copy_qp_attr_from_kern` (rdma-core's: everything but the state).
pub(crate) extern "C" fn ibv_copy_qp_attr_from_kern(
    dst: *mut abi::IbvQpAttr,
    src: *const abi::IbUverbsQpAttr,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes the two structs.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.cur_qp_state = s.cur_qp_state;
    d.path_mtu = s.path_mtu;
    d.path_mig_state = s.path_mig_state;
    d.qkey = s.qkey;
    d.rq_psn = s.rq_psn;
    d.sq_psn = s.sq_psn;
    d.dest_qp_num = s.dest_qp_num;
    d.qp_access_flags = s.qp_access_flags;
    d.cap = abi::IbvQpCap {
        max_send_wr: s.max_send_wr,
        max_recv_wr: s.max_recv_wr,
        max_send_sge: s.max_send_sge,
        max_recv_sge: s.max_recv_sge,
        max_inline_data: s.max_inline_data,
    };
    copy_ah_attr(&mut d.ah_attr, &s.ah_attr);
    copy_ah_attr(&mut d.alt_ah_attr, &s.alt_ah_attr);
    d.pkey_index = s.pkey_index;
    d.alt_pkey_index = s.alt_pkey_index;
    d.en_sqd_async_notify = s.en_sqd_async_notify;
    d.sq_draining = s.sq_draining;
    d.max_rd_atomic = s.max_rd_atomic;
    d.max_dest_rd_atomic = s.max_dest_rd_atomic;
    d.min_rnr_timer = s.min_rnr_timer;
    d.port_num = s.port_num;
    d.timeout = s.timeout;
    d.retry_cnt = s.retry_cnt;
    d.rnr_retry = s.rnr_retry;
    d.alt_port_num = s.alt_port_num;
    d.alt_timeout = s.alt_timeout;
}

/// `ibv_copy_path_rec_from_kern`.
pub(crate) extern "C" fn ibv_copy_path_rec_from_kern(
    dst: *mut abi::IbvSaPathRec,
    src: *const abi::IbUserPathRec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes the two structs.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.dgid.raw = s.dgid;
    d.sgid.raw = s.sgid;
    d.dlid = s.dlid;
    d.slid = s.slid;
    d.raw_traffic = s.raw_traffic as c_int;
    d.flow_label = s.flow_label;
    d.hop_limit = s.hop_limit;
    d.traffic_class = s.traffic_class;
    d.reversible = s.reversible as c_int;
    d.numb_path = s.numb_path;
    d.pkey = s.pkey;
    d.sl = s.sl;
    d.mtu_selector = s.mtu_selector;
    d.mtu = s.mtu as u8;
    d.rate_selector = s.rate_selector;
    d.rate = s.rate;
    d.packet_life_time = s.packet_life_time;
    d.preference = s.preference;
    d.packet_life_time_selector = s.packet_life_time_selector;
}

/// `ibv_copy_path_rec_to_kern`.
pub(crate) extern "C" fn ibv_copy_path_rec_to_kern(
    dst: *mut abi::IbUserPathRec,
    src: *const abi::IbvSaPathRec,
) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: the caller passes the two structs.
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.dgid = s.dgid.raw;
    d.sgid = s.sgid.raw;
    d.dlid = s.dlid;
    d.slid = s.slid;
    d.raw_traffic = s.raw_traffic as u32;
    d.flow_label = s.flow_label;
    d.hop_limit = s.hop_limit;
    d.traffic_class = s.traffic_class;
    d.reversible = s.reversible as u32;
    d.numb_path = s.numb_path;
    d.pkey = s.pkey;
    d.sl = s.sl;
    d.mtu_selector = s.mtu_selector;
    d.mtu = u32::from(s.mtu);
    d.rate_selector = s.rate_selector;
    d.rate = s.rate;
    d.packet_life_time = s.packet_life_time;
    d.preference = s.preference;
    d.packet_life_time_selector = s.packet_life_time_selector;
}

/// `ibv_resolve_eth_l2_from_gid`: the peer's MAC address, which only kernel-bypass RoCE
/// providers need (softib sends over the host's UDP stack, which resolves it): a negative
/// EOPNOTSUPP, the function's error convention.
pub(crate) extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut abi::IbvContext,
    _attr: *mut abi::IbvAhAttr,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    -libc::EOPNOTSUPP
}

/// `ibv_import_device`: a context shared through its uverbs command fd, which softib does
/// not have (EOPNOTSUPP).
pub(crate) extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut abi::IbvContext {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_import_pd`: see [`ibv_import_device`].
pub(crate) extern "C" fn ibv_import_pd(
    _context: *mut abi::IbvContext,
    _handle: u32,
) -> *mut abi::IbvPd {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_unimport_pd`: nothing was imported.
pub(crate) extern "C" fn ibv_unimport_pd(_pd: *mut abi::IbvPd) {}

/// `ibv_import_mr`: see [`ibv_import_device`].
pub(crate) extern "C" fn ibv_import_mr(_pd: *mut abi::IbvPd, _handle: u32) -> *mut abi::IbvMr {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_unimport_mr`: nothing was imported.
pub(crate) extern "C" fn ibv_unimport_mr(_mr: *mut abi::IbvMr) {}

/// `ibv_import_dm`: see [`ibv_import_device`] (and softib has no device memory).
pub(crate) extern "C" fn ibv_import_dm(
    _context: *mut abi::IbvContext,
    _handle: u32,
) -> *mut c_void {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_unimport_dm`: nothing was imported.
pub(crate) extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: the functions return static NUL-terminated strings.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
    }

    #[test]
    fn strings_are_rdma_cores_and_unknown_past_the_tables() {
        assert_eq!(s(ibv_wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(ibv_wc_status_str(16)), "aborted error");
        assert_eq!(s(ibv_wc_status_str(24)), "unknown");
        assert_eq!(s(ibv_wc_status_str(-1)), "unknown");
        assert_eq!(s(ibv_event_type_str(9)), "port active");
        assert_eq!(s(ibv_event_type_str(20)), "unknown");
        assert_eq!(s(ibv_node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(ibv_node_type_str(0)), "unknown");
        assert_eq!(s(ibv_port_state_str(4)), "active");
    }

    #[test]
    fn rates_convert_both_ways() {
        assert_eq!(ibv_rate_to_mult(3), 4);
        assert_eq!(mult_to_ibv_rate(4), 3);
        assert_eq!(ibv_rate_to_mult(11), -1);
        assert_eq!(mult_to_ibv_rate(-1), 0);
        assert_eq!(ibv_rate_to_mbps(16), 103125);
        assert_eq!(mbps_to_ibv_rate(103125), 16);
        assert_eq!(mbps_to_ibv_rate(1), 0);
        for r in RATES {
            assert_eq!(mbps_to_ibv_rate(ibv_rate_to_mbps(r.0)), r.0);
        }
    }
}
