//! rdma-core's libibverbs C ABI as Rust declarations: the structs, enums and function-pointer
//! tables of `<infiniband/verbs.h>` that programs compiled against rdma-core 44 (Debian 12)
//! read and call through, for the drop-in `libibverbs.so.1` (`softib-ibverbs`) and the
//! libraries that will sit on it (`librdmacm.so.1`).
//!
//! Every struct a consumer touches has its size and the offsets consumers rely on asserted at
//! compile time, against values measured with a C program compiled against Debian's
//! `libibverbs-dev` 44.0 on x86-64 (`../shared/reference/DROPIN-ABI.md` §3.4; the crate's test
//! `layout_matches_the_installed_header` measures them again when the header is installed).
//! The layouts are LP64's, so the crate refuses to build elsewhere.
//!
//! Names follow the header: `struct ibv_qp` is [`IbvQp`], its fields keep their C names.
//! `pthread_mutex_t` and `pthread_cond_t` are opaque storage of their glibc sizes: all zeros
//! is their static initializer, and only code of the object's owner touches them.
//!
//! One file on purpose (about 1,350 lines): the declarations follow verbs.h in its order,
//! each with its size and offsets asserted, so that the two read side by side.

use core::ffi::{c_char, c_int, c_uint, c_void};
use core::mem::{offset_of, size_of};

#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("softib-verbs-abi declares the LP64 Linux layout of rdma-core's structs");

/// `pthread_mutex_t` (40 bytes on LP64 glibc).
pub type PthreadMutex = [u64; 5];
/// `pthread_cond_t` (48 bytes).
pub type PthreadCond = [u64; 6];
/// A slot of a function-pointer table whose signature nothing here calls.
pub type AnyFn = Option<unsafe extern "C" fn()>;

// ---- enums (values of verbs.h) ---------------------------------------------------------------

/// `IBV_NODE_CA`.
pub const IBV_NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB`.
pub const IBV_TRANSPORT_IB: c_int = 0;
/// `IBV_LINK_LAYER_INFINIBAND`.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context::abi_compat` of a context that is a `verbs_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

/// `enum ibv_qp_type`.
pub mod qp_type {
    /// `IBV_QPT_RC`.
    pub const RC: u32 = 2;
    /// `IBV_QPT_UC`.
    pub const UC: u32 = 3;
    /// `IBV_QPT_UD`.
    pub const UD: u32 = 4;
    /// `IBV_QPT_RAW_PACKET`.
    pub const RAW_PACKET: u32 = 8;
    /// `IBV_QPT_XRC_SEND`.
    pub const XRC_SEND: u32 = 9;
    /// `IBV_QPT_XRC_RECV`.
    pub const XRC_RECV: u32 = 10;
}

/// `enum ibv_wr_opcode`.
pub mod wr_opcode {
    /// `IBV_WR_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// `IBV_WR_SEND`.
    pub const SEND: u32 = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u32 = 3;
    /// `IBV_WR_RDMA_READ`.
    pub const RDMA_READ: u32 = 4;
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// `IBV_WR_LOCAL_INV`.
    pub const LOCAL_INV: u32 = 7;
    /// `IBV_WR_BIND_MW`.
    pub const BIND_MW: u32 = 8;
    /// `IBV_WR_SEND_WITH_INV`.
    pub const SEND_WITH_INV: u32 = 9;
    /// `IBV_WR_TSO`.
    pub const TSO: u32 = 10;
    /// `IBV_WR_ATOMIC_WRITE`.
    pub const ATOMIC_WRITE: u32 = 15;
}

/// `enum ibv_wc_opcode`.
pub mod wc_opcode {
    /// `IBV_WC_SEND`.
    pub const SEND: u32 = 0;
    /// `IBV_WC_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 1;
    /// `IBV_WC_RDMA_READ`.
    pub const RDMA_READ: u32 = 2;
    /// `IBV_WC_COMP_SWAP`.
    pub const COMP_SWAP: u32 = 3;
    /// `IBV_WC_FETCH_ADD`.
    pub const FETCH_ADD: u32 = 4;
    /// `IBV_WC_RECV`.
    pub const RECV: u32 = 128;
    /// `IBV_WC_RECV_RDMA_WITH_IMM`.
    pub const RECV_RDMA_WITH_IMM: u32 = 129;
}

/// `enum ibv_wc_flags`.
pub mod wc_flags {
    /// `IBV_WC_GRH`.
    pub const GRH: u32 = 1;
    /// `IBV_WC_WITH_IMM`.
    pub const WITH_IMM: u32 = 1 << 1;
    /// `IBV_WC_WITH_INV`.
    pub const WITH_INV: u32 = 1 << 3;
}

/// `enum ibv_create_cq_wc_flags`.
pub mod cq_wc_flags {
    /// `IBV_WC_EX_WITH_BYTE_LEN`.
    pub const BYTE_LEN: u64 = 1;
    /// `IBV_WC_EX_WITH_IMM`.
    pub const IMM: u64 = 1 << 1;
    /// `IBV_WC_EX_WITH_QP_NUM`.
    pub const QP_NUM: u64 = 1 << 2;
    /// `IBV_WC_EX_WITH_SRC_QP`.
    pub const SRC_QP: u64 = 1 << 3;
    /// `IBV_WC_EX_WITH_SLID`.
    pub const SLID: u64 = 1 << 4;
    /// `IBV_WC_EX_WITH_SL`.
    pub const SL: u64 = 1 << 5;
    /// `IBV_WC_EX_WITH_DLID_PATH_BITS`.
    pub const DLID_PATH_BITS: u64 = 1 << 6;
    /// `IBV_WC_STANDARD_FLAGS`: what every provider supports.
    pub const STANDARD: u64 = BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID | SL | DLID_PATH_BITS;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    /// `IBV_SEND_FENCE`.
    pub const FENCE: u32 = 1;
    /// `IBV_SEND_SIGNALED`.
    pub const SIGNALED: u32 = 1 << 1;
    /// `IBV_SEND_SOLICITED`.
    pub const SOLICITED: u32 = 1 << 2;
    /// `IBV_SEND_INLINE`.
    pub const INLINE: u32 = 1 << 3;
    /// `IBV_SEND_IP_CSUM`.
    pub const IP_CSUM: u32 = 1 << 4;
}

/// `enum ibv_access_flags`.
pub mod access {
    /// `IBV_ACCESS_LOCAL_WRITE` .. `IBV_ACCESS_ZERO_BASED`: what softib's engine knows.
    pub const BASIC: u32 = 0x3f;
    /// `IBV_ACCESS_ZERO_BASED`.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// `IBV_ACCESS_ON_DEMAND`.
    pub const ON_DEMAND: u32 = 1 << 6;
    /// `IBV_ACCESS_HUGETLB`.
    pub const HUGETLB: u32 = 1 << 7;
    /// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20..=29, which a device that lacks them ignores
    /// (`IBV_ACCESS_RELAXED_ORDERING` is the first).
    pub const OPTIONAL_RANGE: u32 = 0x3ff0_0000;
}

/// `enum ibv_qp_init_attr_mask`.
pub mod qp_init_attr_mask {
    /// `IBV_QP_INIT_ATTR_PD`.
    pub const PD: u32 = 1;
    /// `IBV_QP_INIT_ATTR_XRCD`.
    pub const XRCD: u32 = 1 << 1;
    /// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
    pub const CREATE_FLAGS: u32 = 1 << 2;
    /// `IBV_QP_INIT_ATTR_MAX_TSO_HEADER`.
    pub const MAX_TSO_HEADER: u32 = 1 << 3;
    /// `IBV_QP_INIT_ATTR_IND_TABLE`.
    pub const IND_TABLE: u32 = 1 << 4;
    /// `IBV_QP_INIT_ATTR_RX_HASH`.
    pub const RX_HASH: u32 = 1 << 5;
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
}

/// `enum ibv_qp_create_send_ops_flags`.
pub mod send_ops {
    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    pub const RDMA_WRITE: u64 = 1;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    pub const SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    pub const RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// `IBV_QP_EX_WITH_LOCAL_INV`.
    pub const LOCAL_INV: u64 = 1 << 7;
    /// `IBV_QP_EX_WITH_BIND_MW`.
    pub const BIND_MW: u64 = 1 << 8;
    /// `IBV_QP_EX_WITH_SEND_WITH_INV`.
    pub const SEND_WITH_INV: u64 = 1 << 9;
    /// `IBV_QP_EX_WITH_TSO`.
    pub const TSO: u64 = 1 << 10;
    /// `IBV_QP_EX_WITH_ATOMIC_WRITE`.
    pub const ATOMIC_WRITE: u64 = 1 << 12;
}

/// `enum ibv_srq_attr_mask`.
pub mod srq_attr_mask {
    /// `IBV_SRQ_MAX_WR`.
    pub const MAX_WR: core::ffi::c_int = 1;
    /// `IBV_SRQ_LIMIT`.
    pub const LIMIT: core::ffi::c_int = 1 << 1;
}

/// `enum ibv_srq_init_attr_mask`.
pub mod srq_init_attr_mask {
    /// `IBV_SRQ_INIT_ATTR_TYPE`.
    pub const TYPE: u32 = 1;
    /// `IBV_SRQ_INIT_ATTR_PD`.
    pub const PD: u32 = 1 << 1;
}

/// `enum ibv_event_type`.
pub mod event_type {
    /// `IBV_EVENT_CQ_ERR`.
    pub const CQ_ERR: u32 = 0;
    /// `IBV_EVENT_QP_FATAL`.
    pub const QP_FATAL: u32 = 1;
    /// `IBV_EVENT_QP_REQ_ERR`.
    pub const QP_REQ_ERR: u32 = 2;
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    pub const QP_ACCESS_ERR: u32 = 3;
    /// `IBV_EVENT_COMM_EST`.
    pub const COMM_EST: u32 = 4;
    /// `IBV_EVENT_SQ_DRAINED`.
    pub const SQ_DRAINED: u32 = 5;
    /// `IBV_EVENT_PATH_MIG`.
    pub const PATH_MIG: u32 = 6;
    /// `IBV_EVENT_PATH_MIG_ERR`.
    pub const PATH_MIG_ERR: u32 = 7;
    /// `IBV_EVENT_DEVICE_FATAL`.
    pub const DEVICE_FATAL: u32 = 8;
    /// `IBV_EVENT_PORT_ACTIVE`.
    pub const PORT_ACTIVE: u32 = 9;
    /// `IBV_EVENT_PORT_ERR`.
    pub const PORT_ERR: u32 = 10;
    /// `IBV_EVENT_LID_CHANGE`.
    pub const LID_CHANGE: u32 = 11;
    /// `IBV_EVENT_PKEY_CHANGE`.
    pub const PKEY_CHANGE: u32 = 12;
    /// `IBV_EVENT_SM_CHANGE`.
    pub const SM_CHANGE: u32 = 13;
    /// `IBV_EVENT_SRQ_ERR`.
    pub const SRQ_ERR: u32 = 14;
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    pub const CLIENT_REREGISTER: u32 = 17;
    /// `IBV_EVENT_GID_CHANGE`.
    pub const GID_CHANGE: u32 = 18;
    /// `IBV_EVENT_WQ_FATAL`.
    pub const WQ_FATAL: u32 = 19;
}

/// `enum ibv_qp_attr_mask`: the bits softib's engine takes are the same (IBV_QP_STATE ..
/// IBV_QP_DEST_QPN); these are the ones past them.
pub mod qp_attr_mask {
    /// Every bit from `IBV_QP_STATE` to `IBV_QP_DEST_QPN`.
    pub const STANDARD: core::ffi::c_int = (1 << 21) - 1;
    /// `IBV_QP_RATE_LIMIT`.
    pub const RATE_LIMIT: core::ffi::c_int = 1 << 25;
}

/// `enum ibv_fork_status`.
pub mod fork_status {
    /// `IBV_FORK_UNNEEDED`: memory stays correct across `fork` without madvise.
    pub const UNNEEDED: u32 = 2;
}

// ---- function-pointer types -----------------------------------------------------------------

/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut IbvSrq, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
/// `ibv_context_ops.alloc_mw`.
pub type AllocMwFn = unsafe extern "C" fn(*mut IbvPd, c_int) -> *mut c_void;
/// `ibv_context_ops.bind_mw`.
pub type BindMwFn = unsafe extern "C" fn(*mut IbvQp, *mut c_void, *mut c_void) -> c_int;
/// `ibv_context_ops.dealloc_mw`.
pub type DeallocMwFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// `ibv_context_ops._compat_query_device`.
pub type QueryDeviceFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvDeviceAttr) -> c_int;
/// `ibv_context_ops._compat_query_port` (the 48-byte `_compat_ibv_port_attr`).
pub type CompatQueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr) -> c_int;

/// `verbs_context.query_port` (with the caller's `sizeof(struct ibv_port_attr)`).
pub type QueryPortFn = unsafe extern "C" fn(*mut IbvContext, u8, *mut IbvPortAttr, usize) -> c_int;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut IbvContext,
    *const IbvQueryDeviceExInput,
    *mut IbvDeviceAttrEx,
    usize,
) -> c_int;
/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvCqInitAttrEx) -> *mut IbvCqEx;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn = unsafe extern "C" fn(*mut IbvContext, *mut IbvQpInitAttrEx) -> *mut IbvQp;
/// `verbs_context.create_srq_ex`.
pub type CreateSrqExFn =
    unsafe extern "C" fn(*mut IbvContext, *mut IbvSrqInitAttrEx) -> *mut IbvSrq;
/// A `verbs_context` slot that returns an object pointer (NULL with errno on failure), with
/// the context or another object first and one attribute pointer.
pub type PtrOpFn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> *mut c_void;
/// A `verbs_context` slot that returns an int (0 or an errno value).
pub type IntOpFn = unsafe extern "C" fn(*mut c_void) -> c_int;
/// A `verbs_context` slot that returns an int and takes two arguments.
pub type IntOp2Fn = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
/// `verbs_context.advise_mr`.
pub type AdviseMrFn = unsafe extern "C" fn(*mut IbvPd, u32, u32, *mut IbvSge, u32) -> c_int;
/// `verbs_context.read_counters`.
pub type ReadCountersFn = unsafe extern "C" fn(*mut c_void, *mut u64, u32, u32) -> c_int;
/// `verbs_context.attach_counters_point_flow`.
pub type AttachCountersFn = unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void) -> c_int;
/// `verbs_context.reg_dm_mr`.
pub type RegDmMrFn =
    unsafe extern "C" fn(*mut IbvPd, *mut c_void, u64, usize, c_uint) -> *mut IbvMr;
/// `verbs_context.post_srq_ops`.
pub type PostSrqOpsFn = unsafe extern "C" fn(*mut IbvSrq, *mut c_void, *mut *mut c_void) -> c_int;
/// `verbs_context.get_srq_num`.
pub type GetSrqNumFn = unsafe extern "C" fn(*mut IbvSrq, *mut u32) -> c_int;

// ---- the structs --------------------------------------------------------------------------

/// `union ibv_gid` (8-byte aligned: it also holds two `__be64`).
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvGid {
    /// The 16 bytes, network order.
    pub raw: [u8; 16],
}

/// `struct _ibv_device_ops` (two legacy pointers nobody calls).
#[repr(C)]
pub struct IbvDeviceOps {
    /// `_dummy1`.
    pub dummy1: AnyFn,
    /// `_dummy2`.
    pub dummy2: AnyFn,
}

/// `struct ibv_device`.
#[repr(C)]
pub struct IbvDevice {
    /// `_ops`.
    pub ops: IbvDeviceOps,
    /// `node_type` (`enum ibv_node_type`).
    pub node_type: c_int,
    /// `transport_type` (`enum ibv_transport_type`).
    pub transport_type: c_int,
    /// `name`: the device name (`rxe0`).
    pub name: [c_char; 64],
    /// `dev_name`: the uverbs device name (`uverbs0`).
    pub dev_name: [c_char; 64],
    /// `dev_path`: the uverbs sysfs directory.
    pub dev_path: [c_char; 256],
    /// `ibdev_path`: the device's sysfs directory (`/sys/class/infiniband/rxe0`).
    pub ibdev_path: [c_char; 256],
}

/// `struct ibv_context_ops`: 32 slots, of which 8 are live.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvContextOps {
    pub compat_query_device: Option<QueryDeviceFn>,
    pub compat_query_port: Option<CompatQueryPortFn>,
    pub compat_alloc_pd: AnyFn,
    pub compat_dealloc_pd: AnyFn,
    pub compat_reg_mr: AnyFn,
    pub compat_rereg_mr: AnyFn,
    pub compat_dereg_mr: AnyFn,
    pub alloc_mw: Option<AllocMwFn>,
    pub bind_mw: Option<BindMwFn>,
    pub dealloc_mw: Option<DeallocMwFn>,
    pub compat_create_cq: AnyFn,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub compat_cq_event: AnyFn,
    pub compat_resize_cq: AnyFn,
    pub compat_destroy_cq: AnyFn,
    pub compat_create_srq: AnyFn,
    pub compat_modify_srq: AnyFn,
    pub compat_query_srq: AnyFn,
    pub compat_destroy_srq: AnyFn,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub compat_create_qp: AnyFn,
    pub compat_query_qp: AnyFn,
    pub compat_modify_qp: AnyFn,
    pub compat_destroy_qp: AnyFn,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub compat_create_ah: AnyFn,
    pub compat_destroy_ah: AnyFn,
    pub compat_attach_mcast: AnyFn,
    pub compat_detach_mcast: AnyFn,
    pub compat_async_event: AnyFn,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct IbvContext {
    /// `device`.
    pub device: *mut IbvDevice,
    /// `ops`.
    pub ops: IbvContextOps,
    /// `cmd_fd`: the uverbs command file (softib: the daemon's control socket).
    pub cmd_fd: c_int,
    /// `async_fd`: readable when an asynchronous event is pending.
    pub async_fd: c_int,
    /// `num_comp_vectors`.
    pub num_comp_vectors: c_int,
    /// `mutex`.
    pub mutex: PthreadMutex,
    /// `abi_compat`: [`VERBS_ABI_IS_EXTENDED`] for a `verbs_context`.
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: the extended context, which ends with the `ibv_context` that
/// programs hold; new fields are prepended, so each field's distance from the end is fixed
/// and `sz` says which exist.
#[repr(C)]
#[allow(missing_docs)]
pub struct VerbsContext {
    pub query_port: Option<QueryPortFn>,
    pub advise_mr: Option<AdviseMrFn>,
    pub alloc_null_mr: Option<PtrOpFn>,
    pub read_counters: Option<ReadCountersFn>,
    pub attach_counters_point_flow: Option<AttachCountersFn>,
    pub create_counters: Option<PtrOpFn>,
    pub destroy_counters: Option<IntOpFn>,
    pub reg_dm_mr: Option<RegDmMrFn>,
    pub alloc_dm: Option<PtrOpFn>,
    pub free_dm: Option<IntOpFn>,
    pub modify_flow_action_esp: Option<IntOp2Fn>,
    pub destroy_flow_action: Option<IntOpFn>,
    pub create_flow_action_esp: Option<PtrOpFn>,
    pub modify_qp_rate_limit: Option<IntOp2Fn>,
    pub alloc_parent_domain: Option<PtrOpFn>,
    pub dealloc_td: Option<IntOpFn>,
    pub alloc_td: Option<PtrOpFn>,
    pub modify_cq: Option<IntOp2Fn>,
    pub post_srq_ops: Option<PostSrqOpsFn>,
    pub destroy_rwq_ind_table: Option<IntOpFn>,
    pub create_rwq_ind_table: Option<PtrOpFn>,
    pub destroy_wq: Option<IntOpFn>,
    pub modify_wq: Option<IntOp2Fn>,
    pub create_wq: Option<PtrOpFn>,
    pub query_rt_values: Option<IntOp2Fn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub priv_: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Option<IntOpFn>,
    pub abi_placeholder2: AnyFn,
    pub ibv_create_flow: Option<PtrOpFn>,
    pub abi_placeholder1: AnyFn,
    pub open_qp: Option<PtrOpFn>,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: Option<GetSrqNumFn>,
    pub create_srq_ex: Option<CreateSrqExFn>,
    pub open_xrcd: Option<PtrOpFn>,
    pub close_xrcd: Option<IntOpFn>,
    pub abi_placeholder3: u64,
    /// `sizeof(struct verbs_context)` of the library that made it.
    pub sz: usize,
    /// The context programs hold (must be last).
    pub context: IbvContext,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct IbvPd {
    /// `context`.
    pub context: *mut IbvContext,
    /// `handle`.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct IbvMr {
    /// `context`.
    pub context: *mut IbvContext,
    /// `pd`.
    pub pd: *mut IbvPd,
    /// `addr`.
    pub addr: *mut c_void,
    /// `length`.
    pub length: usize,
    /// `handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct IbvCompChannel {
    /// `context`.
    pub context: *mut IbvContext,
    /// `fd`: readable when an armed CQ of the channel has a completion.
    pub fd: c_int,
    /// `refcnt`: CQs using the channel.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct IbvCq {
    /// `context`.
    pub context: *mut IbvContext,
    /// `channel`.
    pub channel: *mut IbvCompChannel,
    /// `cq_context`.
    pub cq_context: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `cqe`.
    pub cqe: c_int,
    /// `mutex`.
    pub mutex: PthreadMutex,
    /// `cond`.
    pub cond: PthreadCond,
    /// `comp_events_completed`.
    pub comp_events_completed: u32,
    /// `async_events_completed`.
    pub async_events_completed: u32,
}

/// `struct ibv_poll_cq_attr`.
#[repr(C)]
pub struct IbvPollCqAttr {
    /// `comp_mask`.
    pub comp_mask: u32,
}

/// `ibv_cq_ex.start_poll`.
pub type StartPollFn = unsafe extern "C" fn(*mut IbvCqEx, *mut IbvPollCqAttr) -> c_int;
/// `ibv_cq_ex.next_poll`.
pub type NextPollFn = unsafe extern "C" fn(*mut IbvCqEx) -> c_int;
/// `ibv_cq_ex.end_poll`.
pub type EndPollFn = unsafe extern "C" fn(*mut IbvCqEx);
/// An `ibv_cq_ex.read_*` returning 32 bits.
pub type ReadU32Fn = unsafe extern "C" fn(*mut IbvCqEx) -> u32;
/// An `ibv_cq_ex.read_*` returning 8 bits.
pub type ReadU8Fn = unsafe extern "C" fn(*mut IbvCqEx) -> u8;
/// An `ibv_cq_ex.read_*` returning 16 bits.
pub type ReadU16Fn = unsafe extern "C" fn(*mut IbvCqEx) -> u16;
/// An `ibv_cq_ex.read_*` returning 64 bits.
pub type ReadU64Fn = unsafe extern "C" fn(*mut IbvCqEx) -> u64;
/// `ibv_cq_ex.read_tm_info`.
pub type ReadTmInfoFn = unsafe extern "C" fn(*mut IbvCqEx, *mut c_void);

/// `struct ibv_cq_ex`: an `ibv_cq` (its first 128 bytes) with the extended polling table.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqEx {
    pub cq: IbvCq,
    pub comp_mask: u32,
    /// The current completion's status (read by programs directly).
    pub status: u32,
    /// The current completion's `wr_id` (read by programs directly).
    pub wr_id: u64,
    pub start_poll: Option<StartPollFn>,
    pub next_poll: Option<NextPollFn>,
    pub end_poll: Option<EndPollFn>,
    pub read_opcode: Option<ReadU32Fn>,
    pub read_vendor_err: Option<ReadU32Fn>,
    pub read_byte_len: Option<ReadU32Fn>,
    pub read_imm_data: Option<ReadU32Fn>,
    pub read_qp_num: Option<ReadU32Fn>,
    pub read_src_qp: Option<ReadU32Fn>,
    pub read_wc_flags: Option<ReadU32Fn>,
    pub read_slid: Option<ReadU32Fn>,
    pub read_sl: Option<ReadU8Fn>,
    pub read_dlid_path_bits: Option<ReadU8Fn>,
    pub read_completion_ts: Option<ReadU64Fn>,
    pub read_cvlan: Option<ReadU16Fn>,
    pub read_flow_tag: Option<ReadU32Fn>,
    pub read_tm_info: Option<ReadTmInfoFn>,
    pub read_completion_wallclock_ns: Option<ReadU64Fn>,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

/// `struct ibv_srq`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrq {
    pub context: *mut IbvContext,
    pub srq_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub handle: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvSrqAttr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttr {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvTmCap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSrqInitAttrEx {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`: 0 basic, 1 XRC, 2 tag matching.
    pub srq_type: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub cq: *mut IbvCq,
    pub tm_cap: IbvTmCap,
}

/// `struct ibv_qp`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQp {
    pub context: *mut IbvContext,
    pub qp_context: *mut c_void,
    pub pd: *mut IbvPd,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub handle: u32,
    pub qp_num: u32,
    /// `enum ibv_qp_state`.
    pub state: u32,
    /// `enum ibv_qp_type`.
    pub qp_type: u32,
    pub mutex: PthreadMutex,
    pub cond: PthreadCond,
    pub events_completed: u32,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `ibv_qp_ex.wr_atomic_cmp_swp`.
pub type WrAtomicCmpSwpFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64, u64);
/// `ibv_qp_ex.wr_atomic_fetch_add`.
pub type WrAtomicFetchAddFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u64);
/// `ibv_qp_ex.wr_bind_mw`.
pub type WrBindMwFn = unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, u32, *const c_void);
/// `ibv_qp_ex.wr_local_inv`, `wr_send_inv`, `wr_set_xrc_srqn`, `wr_send_imm`: one `u32`.
pub type WrU32Fn = unsafe extern "C" fn(*mut IbvQpEx, u32);
/// `ibv_qp_ex.wr_rdma_read`, `wr_rdma_write`.
pub type WrRdmaFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64);
/// `ibv_qp_ex.wr_rdma_write_imm`.
pub type WrRdmaImmFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32);
/// `ibv_qp_ex.wr_send`, `wr_start`, `wr_abort`.
pub type WrVoidFn = unsafe extern "C" fn(*mut IbvQpEx);
/// `ibv_qp_ex.wr_send_tso`.
pub type WrSendTsoFn = unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, u16, u16);
/// `ibv_qp_ex.wr_set_ud_addr`.
pub type WrSetUdAddrFn = unsafe extern "C" fn(*mut IbvQpEx, *mut IbvAh, u32, u32);
/// `ibv_qp_ex.wr_set_inline_data`.
pub type WrSetInlineDataFn = unsafe extern "C" fn(*mut IbvQpEx, *mut c_void, usize);
/// `ibv_qp_ex.wr_set_inline_data_list`.
pub type WrSetInlineDataListFn = unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvDataBuf);
/// `ibv_qp_ex.wr_set_sge`.
pub type WrSetSgeFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, u32);
/// `ibv_qp_ex.wr_set_sge_list`.
pub type WrSetSgeListFn = unsafe extern "C" fn(*mut IbvQpEx, usize, *const IbvSge);
/// `ibv_qp_ex.wr_complete`.
pub type WrCompleteFn = unsafe extern "C" fn(*mut IbvQpEx) -> c_int;
/// `ibv_qp_ex.wr_atomic_write`.
pub type WrAtomicWriteFn = unsafe extern "C" fn(*mut IbvQpEx, u32, u64, *const c_void);

/// `struct ibv_qp_ex`: an `ibv_qp` with the `ibv_wr_*` table.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpEx {
    pub qp_base: IbvQp,
    pub comp_mask: u64,
    /// The next WR's `wr_id` (written by programs directly).
    pub wr_id: u64,
    /// The next WR's `enum ibv_send_flags` (written by programs directly).
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<WrAtomicCmpSwpFn>,
    pub wr_atomic_fetch_add: Option<WrAtomicFetchAddFn>,
    pub wr_bind_mw: Option<WrBindMwFn>,
    pub wr_local_inv: Option<WrU32Fn>,
    pub wr_rdma_read: Option<WrRdmaFn>,
    pub wr_rdma_write: Option<WrRdmaFn>,
    pub wr_rdma_write_imm: Option<WrRdmaImmFn>,
    pub wr_send: Option<WrVoidFn>,
    pub wr_send_imm: Option<WrU32Fn>,
    pub wr_send_inv: Option<WrU32Fn>,
    pub wr_send_tso: Option<WrSendTsoFn>,
    pub wr_set_ud_addr: Option<WrSetUdAddrFn>,
    pub wr_set_xrc_srqn: Option<WrU32Fn>,
    pub wr_set_inline_data: Option<WrSetInlineDataFn>,
    pub wr_set_inline_data_list: Option<WrSetInlineDataListFn>,
    pub wr_set_sge: Option<WrSetSgeFn>,
    pub wr_set_sge_list: Option<WrSetSgeListFn>,
    pub wr_start: Option<WrVoidFn>,
    pub wr_complete: Option<WrCompleteFn>,
    pub wr_abort: Option<WrVoidFn>,
    pub wr_atomic_write: Option<WrAtomicWriteFn>,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRxHashConf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: `ibv_qp_init_attr` (its first 60 bytes) and more.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQpInitAttrEx {
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut IbvSrq,
    pub cap: IbvQpCap,
    pub qp_type: u32,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: IbvRxHashConf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvGlobalRoute {
    pub dgid: IbvGid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvAhAttr {
    pub grh: IbvGlobalRoute,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvQpAttr {
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: IbvQpCap,
    pub ah_attr: IbvAhAttr,
    pub alt_ah_attr: IbvAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvAh {
    pub context: *mut IbvContext,
    pub pd: *mut IbvPd,
    pub handle: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvSge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `ibv_send_wr.wr.rdma`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvRdmaWr {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.atomic`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvAtomicWr {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `ibv_send_wr.wr.ud`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvUdWr {
    pub ah: *mut IbvAh,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(missing_docs)]
pub union IbvSendWrWr {
    pub rdma: IbvRdmaWr,
    pub atomic: IbvAtomicWr,
    pub ud: IbvUdWr,
}

/// `struct ibv_send_wr`. The `imm_data`/`invalidate_rkey` union is `imm_data` (network
/// order when it is immediate data); the `qp_type` and `bind_mw`/`tso` unions are opaque.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSendWr {
    pub wr_id: u64,
    pub next: *mut IbvSendWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
    pub opcode: u32,
    pub send_flags: c_uint,
    pub imm_data: u32,
    pub wr: IbvSendWrWr,
    /// `qp_type.xrc.remote_srqn`.
    pub remote_srqn: u32,
    /// The `bind_mw` / `tso` union (48 bytes).
    pub bind_mw_or_tso: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvRecvWr {
    pub wr_id: u64,
    pub next: *mut IbvRecvWr,
    pub sg_list: *mut IbvSge,
    pub num_sge: c_int,
}

/// `struct ibv_wc`. `imm_data` is the `imm_data`/`invalidated_rkey` union.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub vendor_err: u32,
    pub byte_len: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_grh`: the 40 bytes a UD receive gets before the payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvGrh {
    pub version_tclass_flow: u32,
    pub paylen: u16,
    pub next_hdr: u8,
    pub hop_limit: u8,
    pub sgid: IbvGid,
    pub dgid: IbvGid,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDeviceAttr {
    pub fw_ver: [c_char; 64],
    /// Network order.
    pub node_guid: u64,
    /// Network order.
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: u32,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvQueryDeviceExInput {
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex`: the original attributes and the extended capabilities, which
/// softib reports as absent (all zero) except `device_cap_flags_ex` and `phys_port_cnt_ex`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    /// `odp_caps` .. `tso_caps`'s start: `general_caps` (u64) and three transport caps.
    pub odp_caps: [u64; 3],
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `tso_caps`, `rss_caps`, `max_wq_type_rq`, `packet_pacing_caps`, `raw_packet_caps`,
    /// `tm_caps`, `cq_mod_caps`: 88 bytes of capabilities softib does not have.
    pub other_caps: [u32; 22],
    pub max_dm_size: u64,
    /// `pci_atomic_caps` (three u16) and padding.
    pub pci_atomic_caps: [u16; 4],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_port_attr` (52 bytes; the exported `ibv_query_port@IBVERBS_1.1` takes the
/// first 48, `_compat_ibv_port_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvPortAttr {
    pub state: u32,
    pub max_mtu: u32,
    pub active_mtu: u32,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// The size of `struct _compat_ibv_port_attr`: `ibv_port_attr` without `port_cap_flags2`.
pub const COMPAT_PORT_ATTR_SIZE: usize = 48;

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvGidEntry {
    pub gid: IbvGid,
    pub gid_index: u32,
    pub port_num: u32,
    /// `enum ibv_gid_type`: 0 IB, 1 RoCE v1, 2 RoCE v2.
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `enum ibv_gid_type` (`ibv_gid_entry.gid_type`).
pub mod gid_type {
    /// `IBV_GID_TYPE_IB`.
    pub const IB: u32 = 0;
    /// `IBV_GID_TYPE_ROCE_V1`.
    pub const ROCE_V1: u32 = 1;
    /// `IBV_GID_TYPE_ROCE_V2`.
    pub const ROCE_V2: u32 = 2;
}

/// `enum ibv_gid_type_sysfs` (what `ibv_query_gid_type` writes).
pub mod gid_type_sysfs {
    /// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1`.
    pub const IB_ROCE_V1: u32 = 0;
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2`.
    pub const ROCE_V2: u32 = 1;
}

/// `struct ibv_async_event`: `element` is the union of `cq`, `qp`, `srq`, `wq` pointers and
/// `port_num`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvAsyncEvent {
    pub element: *mut c_void,
    pub event_type: u32,
}

/// `struct ibv_ece`.
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvEce {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ib_uverbs_qp_attr` (rdma/ib_user_verbs.h): the kernel's QP attributes, which
/// `ibv_copy_qp_attr_from_kern` converts (librdmacm uses it on kernel replies).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbUverbsQpAttr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: IbUverbsAhAttr,
    pub alt_ah_attr: IbUverbsAhAttr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_uverbs_ah_attr` (its `grh` flattened in).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbUverbsAhAttr {
    pub dgid: [u8; 16],
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reserved_grh: u8,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
    pub reserved: u8,
}

/// `struct ib_user_path_rec` (rdma/ib_user_sa.h).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbUserPathRec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (infiniband/sa.h).
#[repr(C)]
#[allow(missing_docs)]
pub struct IbvSaPathRec {
    pub dgid: IbvGid,
    pub sgid: IbvGid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

// ---- layout assertions (measured: DROPIN-ABI.md §3.4 and this crate's test) --------------

macro_rules! layout {
    ($t:ty, $size:expr $(, $field:ident @ $off:expr)* $(,)?) => {
        const _: () = assert!(size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
        $(const _: () = assert!(
            offset_of!($t, $field) == $off,
            concat!(stringify!($t), ".", stringify!($field))
        );)*
    };
}

layout!(IbvDevice, 664, node_type @ 16, transport_type @ 20, name @ 24, dev_name @ 88,
    dev_path @ 152, ibdev_path @ 408);
layout!(IbvContextOps, 256, alloc_mw @ 56, bind_mw @ 64, dealloc_mw @ 72, poll_cq @ 88,
    req_notify_cq @ 96, post_srq_recv @ 160, post_send @ 200, post_recv @ 208);
layout!(IbvContext, 328, ops @ 8, cmd_fd @ 264, async_fd @ 268, num_comp_vectors @ 272,
    mutex @ 280, abi_compat @ 320);
layout!(VerbsContext, 648, query_port @ 0, create_cq_ex @ 200, priv_ @ 208,
    query_device_ex @ 216, create_qp_ex @ 264, close_xrcd @ 296, abi_placeholder3 @ 304,
    sz @ 312, context @ 320);
layout!(IbvPd, 16, handle @ 8);
layout!(IbvMr, 48, addr @ 16, length @ 24, handle @ 32, lkey @ 36, rkey @ 40);
layout!(IbvCompChannel, 16, fd @ 8, refcnt @ 12);
layout!(IbvCq, 128, channel @ 8, cq_context @ 16, handle @ 24, cqe @ 28, mutex @ 32,
    cond @ 72, comp_events_completed @ 120, async_events_completed @ 124);
layout!(IbvCqEx, 288, comp_mask @ 128, status @ 132, wr_id @ 136, start_poll @ 144,
    next_poll @ 152, end_poll @ 160, read_opcode @ 168, read_completion_wallclock_ns @ 280);
layout!(IbvCqInitAttrEx, 56, cq_context @ 8, channel @ 16, comp_vector @ 24, wc_flags @ 32,
    comp_mask @ 40, flags @ 44, parent_domain @ 48);
layout!(IbvSrq, 128, srq_context @ 8, pd @ 16, handle @ 24, mutex @ 32, cond @ 72,
    events_completed @ 120);
layout!(IbvSrqAttr, 12);
layout!(IbvSrqInitAttr, 24);
layout!(IbvSrqInitAttrEx, 64, comp_mask @ 20, srq_type @ 24, pd @ 32, xrcd @ 40, cq @ 48,
    tm_cap @ 56);
layout!(IbvQp, 160, qp_context @ 8, pd @ 16, send_cq @ 24, recv_cq @ 32, srq @ 40,
    handle @ 48, qp_num @ 52, state @ 56, qp_type @ 60, mutex @ 64, cond @ 104,
    events_completed @ 152);
layout!(IbvQpEx, 352, comp_mask @ 160, wr_id @ 168, wr_flags @ 176, wr_atomic_cmp_swp @ 184,
    wr_rdma_read @ 216, wr_rdma_write @ 224, wr_send @ 240, wr_set_ud_addr @ 272,
    wr_set_inline_data @ 288, wr_set_sge @ 304, wr_set_sge_list @ 312, wr_start @ 320,
    wr_complete @ 328, wr_abort @ 336, wr_atomic_write @ 344);
layout!(IbvDataBuf, 16);
layout!(IbvQpCap, 20);
layout!(IbvQpInitAttr, 64, cap @ 32, qp_type @ 52, sq_sig_all @ 56);
layout!(IbvQpInitAttrEx, 136, comp_mask @ 60, pd @ 64, xrcd @ 72, create_flags @ 80,
    max_tso_header @ 84, rwq_ind_tbl @ 88, rx_hash_conf @ 96, source_qpn @ 120,
    send_ops_flags @ 128);
layout!(IbvGlobalRoute, 24, flow_label @ 16, sgid_index @ 20);
layout!(IbvAhAttr, 32, dlid @ 24, sl @ 26, is_global @ 29, port_num @ 30);
layout!(IbvQpAttr, 144, qkey @ 16, rq_psn @ 20, sq_psn @ 24, dest_qp_num @ 28,
    qp_access_flags @ 32, cap @ 36, ah_attr @ 56, alt_ah_attr @ 88, pkey_index @ 120,
    alt_pkey_index @ 122, en_sqd_async_notify @ 124, max_rd_atomic @ 126,
    max_dest_rd_atomic @ 127, min_rnr_timer @ 128, port_num @ 129, timeout @ 130,
    retry_cnt @ 131, rnr_retry @ 132, alt_port_num @ 133, alt_timeout @ 134, rate_limit @ 136);
layout!(IbvAh, 24, pd @ 8, handle @ 16);
layout!(IbvSge, 16);
layout!(IbvSendWr, 128, next @ 8, sg_list @ 16, num_sge @ 24, opcode @ 28, send_flags @ 32,
    imm_data @ 36, wr @ 40, remote_srqn @ 72, bind_mw_or_tso @ 80);
layout!(IbvAtomicWr, 32, compare_add @ 8, swap @ 16, rkey @ 24);
layout!(IbvUdWr, 16, remote_qpn @ 8, remote_qkey @ 12);
layout!(IbvRecvWr, 32);
layout!(IbvWc, 48, status @ 8, opcode @ 12, vendor_err @ 16, byte_len @ 20, imm_data @ 24,
    qp_num @ 28, src_qp @ 32, wc_flags @ 36, pkey_index @ 40, slid @ 42, sl @ 44,
    dlid_path_bits @ 45);
layout!(IbvGrh, 40, paylen @ 4, next_hdr @ 6, hop_limit @ 7, sgid @ 8, dgid @ 24);
layout!(IbvDeviceAttr, 232, node_guid @ 64, max_mr_size @ 80, vendor_id @ 96, max_qp @ 108,
    device_cap_flags @ 116, atomic_cap @ 164, max_srq_sge @ 220, max_pkeys @ 224,
    local_ca_ack_delay @ 226, phys_port_cnt @ 227);
layout!(IbvQueryDeviceExInput, 4);
layout!(IbvDeviceAttrEx, 400, comp_mask @ 232, odp_caps @ 240,
    completion_timestamp_mask @ 264, hca_core_clock @ 272, device_cap_flags_ex @ 280,
    other_caps @ 288, max_dm_size @ 376, pci_atomic_caps @ 384, xrc_odp_caps @ 392,
    phys_port_cnt_ex @ 396);
layout!(IbvPortAttr, 52, gid_tbl_len @ 12, pkey_tbl_len @ 32, lid @ 34, lmc @ 38,
    phys_state @ 45, link_layer @ 46, flags @ 47, port_cap_flags2 @ 48);
layout!(IbvGidEntry, 32, gid_index @ 16, port_num @ 20, gid_type @ 24, ndev_ifindex @ 28);
layout!(IbvAsyncEvent, 16, event_type @ 8);
layout!(IbvEce, 12);
layout!(IbvPollCqAttr, 4);
layout!(IbUverbsAhAttr, 32, flow_label @ 16, sgid_index @ 20, dlid @ 24, port_num @ 30);
layout!(IbUverbsQpAttr, 144, ah_attr @ 40, alt_ah_attr @ 72, max_send_wr @ 104,
    pkey_index @ 124, port_num @ 133, alt_timeout @ 138);
layout!(IbUserPathRec, 64, dlid @ 32, raw_traffic @ 36, mtu @ 48, pkey @ 52, preference @ 63);
layout!(IbvSaPathRec, 64, dlid @ 32, raw_traffic @ 36, reversible @ 48, numb_path @ 52,
    pkey @ 54, preference @ 63);

pub mod ffi;
pub mod umad;
// After `layout!`, which it uses.
pub mod rdma_cm;
