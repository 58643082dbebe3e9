//! The IBVERBS_PRIVATE_34 symbols: libibverbs' interface to its provider libraries.
//!
//! perftest, UCX's `libuct_ib` and libfabric link the real `libmlx5.so.1` and
//! `libefa.so.1` (DT_NEEDED), and those import about 60 of these symbols with their exact
//! version; under BIND_NOW the program does not start unless they exist. Two ways out were
//! measured (DROPIN-ABI.md §1.1): export them, or ship stand-in libmlx5/libefa. softib
//! exports them, because then one library is the whole drop-in, the real providers are left
//! as they are (a stand-in would have to track every `mlx5dv_*`/`efadv_*` symbol the
//! consumers import, and a newer perftest adds more), and none of these functions is ever
//! reached: the providers' constructors register their drivers with
//! `verbs_register_driver_34` (which does nothing here), and everything else they export
//! first checks that a device is theirs — by comparing `verbs_device::ops` at offset 664 of
//! the `ibv_device` with their own table, NULL on softib's devices ([`crate::objects::Device`])
//! — so `mlx5dv_is_supported()` is false and `efadv_query_device()` answers EOPNOTSUPP.
//!
//! The `ibv_cmd_*` functions and `execute_ioctl` write commands to the kernel's uverbs file
//! for a provider's own context; softib has neither, so they answer ENOSYS. The context and
//! CQ set-up helpers (`_verbs_init_and_alloc_context`, `verbs_open_device`,
//! `verbs_init_cq`, `verbs_set_ops`, `verbs_uninit_context`) exist for a provider's
//! `alloc_context`, which softib never calls. `ibv_query_gid_type`, which `ibv_devinfo`
//! imports, is real ([`crate::device::ibv_query_gid_type`]).
//!
//! Their C signatures differ; each is defined here without parameters, which the C calling
//! conventions of LP64 Linux allow (a callee may ignore the registers its caller filled).

use std::ffi::{c_int, c_void};

// `verbs_allow_disassociate_destroy`, a `bool` libmlx5 reads, is defined by build.rs (a data
// symbol of one byte, false).

/// `verbs_register_driver_34`: the real providers' constructors call it when they load; softib
/// lists only its own devices, so the registration is not kept.
pub(crate) extern "C" fn verbs_register_driver_34() {}

/// `__verbs_log`: a provider's debug print; none runs here.
pub(crate) extern "C" fn __verbs_log() {}

/// `verbs_set_ops`: fills a provider's context; never asked for one.
pub(crate) extern "C" fn verbs_set_ops() {}

/// `verbs_uninit_context`: see [`verbs_set_ops`].
pub(crate) extern "C" fn verbs_uninit_context() {}

/// `verbs_init_cq`: see [`verbs_set_ops`].
pub(crate) extern "C" fn verbs_init_cq() {}

/// `_verbs_init_and_alloc_context`: NULL with ENOSYS (see the module docs).
pub(crate) extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    crate::set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

/// `verbs_open_device`: NULL with ENOSYS (see the module docs).
pub(crate) extern "C" fn verbs_open_device() -> *mut c_void {
    crate::set_errno(libc::ENOSYS);
    std::ptr::null_mut()
}

macro_rules! enosys {
    ($($name:ident),* $(,)?) => {$(
        /// A uverbs kernel command of a provider: ENOSYS (see the module docs).
        pub(crate) extern "C" fn $name() -> c_int {
            crate::set_errno(libc::ENOSYS);
            libc::ENOSYS
        }
    )*};
}

enosys!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_query_context,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);
