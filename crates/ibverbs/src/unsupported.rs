//! The function-pointer tables of a context: `ibv_context_ops` (what `ibv_post_send`,
//! `ibv_poll_cq`, ... call inline) and `verbs_context` (what `ibv_create_qp_ex`,
//! `ibv_query_port`, ... call inline), filled completely.
//!
//! Where softib has no such verb — memory windows, XRC domains, flows, work queues,
//! counters, device memory, parent domains and thread domains, CQ moderation, rate limits,
//! tag matching — the slot answers EOPNOTSUPP (NULL with errno for the ones that return an
//! object), as rdma-core's own placeholders (`libibverbs/dummy_ops.c`) answer for a provider
//! that lacks the verb, rxe's among them. A NULL slot would do the same for programs built
//! against these headers, but not for older binaries that call through without looking.

use std::ffi::{c_int, c_void};
use std::sync::Once;

use softib_verbs_abi as abi;

/// Says once per process that XRC is not available, because `ibv_xsrq_pingpong` and friends
/// report only "Couldn't open XRC domain".
fn no_xrc() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "softib: XRC (ibv_open_xrcd) is not supported by softib devices: EOPNOTSUPP, \
             as rxe's provider answers"
        );
    });
}

/// An object-returning verb softib does not have.
///
/// The slot types differ in their argument lists; every slot that gets this function takes
/// pointer and integer arguments only, which the C calling conventions of LP64 Linux pass
/// in registers the callee may ignore.
unsafe extern "C" fn unsupported_ptr(_a: *mut c_void, _b: *mut c_void) -> *mut c_void {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// An int-returning verb softib does not have: EOPNOTSUPP, returned and in errno (the
/// callers of these slots read either).
unsafe extern "C" fn unsupported_int(_a: *mut c_void) -> c_int {
    crate::set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

unsafe extern "C" fn unsupported_int2(_a: *mut c_void, _b: *mut c_void) -> c_int {
    crate::set_errno(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

unsafe extern "C" fn open_xrcd(_context: *mut c_void, _attr: *mut c_void) -> *mut c_void {
    no_xrc();
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

unsafe extern "C" fn advise_mr(
    _pd: *mut abi::IbvPd,
    _advice: u32,
    _flags: u32,
    _sg: *mut abi::IbvSge,
    _n: u32,
) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn read_counters(_c: *mut c_void, _v: *mut u64, _n: u32, _f: u32) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn attach_counters(_c: *mut c_void, _a: *mut c_void, _f: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn reg_dm_mr(
    _pd: *mut abi::IbvPd,
    _dm: *mut c_void,
    _off: u64,
    _len: usize,
    _access: u32,
) -> *mut abi::IbvMr {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

unsafe extern "C" fn post_srq_ops(
    _srq: *mut abi::IbvSrq,
    _op: *mut c_void,
    _bad: *mut *mut c_void,
) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn get_srq_num(_srq: *mut abi::IbvSrq, _num: *mut u32) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn alloc_mw(_pd: *mut abi::IbvPd, _type: c_int) -> *mut c_void {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

unsafe extern "C" fn bind_mw(_qp: *mut abi::IbvQp, _mw: *mut c_void, _bind: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

unsafe extern "C" fn dealloc_mw(_mw: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// Fills both tables of a fresh context.
pub(crate) fn fill_ops(v: &mut abi::VerbsContext) {
    let ops = &mut v.context.ops;
    ops.compat_query_device = Some(compat_query_device);
    ops.compat_query_port = Some(compat_query_port);
    ops.alloc_mw = Some(alloc_mw);
    ops.bind_mw = Some(bind_mw);
    ops.dealloc_mw = Some(dealloc_mw);
    ops.poll_cq = Some(crate::cq::poll_cq);
    ops.req_notify_cq = Some(crate::cq::req_notify_cq);
    ops.post_srq_recv = Some(crate::srq::post_srq_recv);
    ops.post_send = Some(crate::qp::post_send);
    ops.post_recv = Some(crate::qp::post_recv);

    v.query_port = Some(crate::device::query_port);
    v.advise_mr = Some(advise_mr);
    v.alloc_null_mr = Some(unsupported_ptr);
    v.read_counters = Some(read_counters);
    v.attach_counters_point_flow = Some(attach_counters);
    v.create_counters = Some(unsupported_ptr);
    v.destroy_counters = Some(unsupported_int);
    v.reg_dm_mr = Some(reg_dm_mr);
    v.alloc_dm = Some(unsupported_ptr);
    v.free_dm = Some(unsupported_int);
    v.modify_flow_action_esp = Some(unsupported_int2);
    v.destroy_flow_action = Some(unsupported_int);
    v.create_flow_action_esp = Some(unsupported_ptr);
    v.modify_qp_rate_limit = Some(unsupported_int2);
    v.alloc_parent_domain = Some(unsupported_ptr);
    v.dealloc_td = Some(unsupported_int);
    v.alloc_td = Some(unsupported_ptr);
    v.modify_cq = Some(unsupported_int2);
    v.post_srq_ops = Some(post_srq_ops);
    v.destroy_rwq_ind_table = Some(unsupported_int);
    v.create_rwq_ind_table = Some(unsupported_ptr);
    v.destroy_wq = Some(unsupported_int);
    v.modify_wq = Some(unsupported_int2);
    v.create_wq = Some(unsupported_ptr);
    v.query_rt_values = Some(unsupported_int2);
    v.create_cq_ex = Some(crate::cq::create_cq_ex);
    v.query_device_ex = Some(crate::device::query_device_ex);
    v.ibv_destroy_flow = Some(unsupported_int);
    v.ibv_create_flow = Some(unsupported_ptr);
    // Programs built against libibverbs 1.1.8 look for the flow calls here.
    // SAFETY: only the pointer's type changes; those programs call it with its own arguments.
    v.abi_placeholder1 = Some(unsafe {
        std::mem::transmute::<
            unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void,
            unsafe extern "C" fn(),
        >(unsupported_ptr)
    });
    // SAFETY: as above.
    v.abi_placeholder2 = Some(unsafe {
        std::mem::transmute::<unsafe extern "C" fn(*mut c_void) -> c_int, unsafe extern "C" fn()>(
            unsupported_int,
        )
    });
    v.open_qp = Some(unsupported_ptr);
    v.create_qp_ex = Some(crate::qp::create_qp_ex);
    v.get_srq_num = Some(get_srq_num);
    v.create_srq_ex = Some(crate::srq::create_srq_ex);
    v.open_xrcd = Some(open_xrcd);
    v.close_xrcd = Some(unsupported_int);
}

/// `ibv_context_ops._compat_query_device`: what very old binaries call.
unsafe extern "C" fn compat_query_device(
    context: *mut abi::IbvContext,
    attr: *mut abi::IbvDeviceAttr,
) -> c_int {
    crate::device::ibv_query_device(context, attr)
}

/// `ibv_context_ops._compat_query_port`: the 48-byte port attributes.
unsafe extern "C" fn compat_query_port(
    context: *mut abi::IbvContext,
    port: u8,
    attr: *mut abi::IbvPortAttr,
) -> c_int {
    crate::device::ibv_query_port(context, port, attr)
}
