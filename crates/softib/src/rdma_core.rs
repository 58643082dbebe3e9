//! The rdma-core backend: the same [`crate::Context`] verbs on a real RDMA device (a ConnectX,
//! the kernel's Soft-RoCE `rxe`, ...) through rdma-core's `libibverbs.so.1`.
//!
//! The library is loaded with `dlopen` when first needed, never linked, so a softib binary still
//! runs where rdma-core is absent. The structures below are this crate's own declarations of the
//! subset of `<infiniband/verbs.h>` (rdma-core) the verbs need, with the layout of the C ABI;
//! the sizes and offsets are checked at compile time against the values the header gives on
//! x86-64 and aarch64 (LP64). `ibv_post_send`, `ibv_post_recv` and `ibv_poll_cq` are inline
//! functions in the header that call through `context->ops`, so they are called the same way
//! here.
//!
//! Handles: PDs, CQs and AHs get small numbers of this backend's own; a QP is named by its real
//! QP number (what the peer must be told) and a memory region by its L_Key, as on softib.
//!
//! One file on purpose (about 1,600 lines): the C declarations it needs, their layout
//! assertions and the verbs over them, so that this backend's unsafe code stays in one place.
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::mem::{offset_of, size_of};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use softib_engine::verbs::{
    AccessFlags, QpState, QpType, RecvWr, SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
    WrOpcode,
};
use softib_engine::{
    AddressVector, AhHandle, AttrMask, CqHandle, DeviceAttr, GlobalRoute, PdHandle, QpAttr, QpCap,
    QpInitAttr,
};
use softib_proto::{DeviceInfo, PortInfo, VerbsAttr, VerbsPortAttr};
use softib_wire::{Gid, Guid, Lid, Mtu, Psn, Qpn};

use crate::{Error, MrKeys, Result};

/// The shared object loaded (rdma-core's ABI 1).
pub const LIBIBVERBS: &str = "libibverbs.so.1";

// ---- the C declarations (rdma-core include/infiniband/verbs.h) ------------------------------

/// `union ibv_gid` (8-byte aligned: it also holds two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Default)]
struct IbvGid {
    raw: [u8; 16],
}

/// `struct ibv_device_attr`.
#[repr(C)]
struct IbvDeviceAttr {
    fw_ver: [c_char; 64],
    node_guid: u64,
    sys_image_guid: u64,
    max_mr_size: u64,
    page_size_cap: u64,
    vendor_id: u32,
    vendor_part_id: u32,
    hw_ver: u32,
    max_qp: c_int,
    max_qp_wr: c_int,
    device_cap_flags: u32,
    max_sge: c_int,
    max_sge_rd: c_int,
    max_cq: c_int,
    max_cqe: c_int,
    max_mr: c_int,
    max_pd: c_int,
    max_qp_rd_atom: c_int,
    max_ee_rd_atom: c_int,
    max_res_rd_atom: c_int,
    max_qp_init_rd_atom: c_int,
    max_ee_init_rd_atom: c_int,
    atomic_cap: u32,
    max_ee: c_int,
    max_rdd: c_int,
    max_mw: c_int,
    max_raw_ipv6_qp: c_int,
    max_raw_ethy_qp: c_int,
    max_mcast_grp: c_int,
    max_mcast_qp_attach: c_int,
    max_total_mcast_qp_attach: c_int,
    max_ah: c_int,
    max_fmr: c_int,
    max_map_per_fmr: c_int,
    max_srq: c_int,
    max_srq_wr: c_int,
    max_srq_sge: c_int,
    max_pkeys: u16,
    local_ca_ack_delay: u8,
    phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Default)]
struct IbvPortAttr {
    state: u32,
    max_mtu: u32,
    active_mtu: u32,
    gid_tbl_len: c_int,
    port_cap_flags: u32,
    max_msg_sz: u32,
    bad_pkey_cntr: u32,
    qkey_viol_cntr: u32,
    pkey_tbl_len: u16,
    lid: u16,
    sm_lid: u16,
    lmc: u8,
    max_vl_num: u8,
    sm_sl: u8,
    subnet_timeout: u8,
    init_type_reply: u8,
    active_width: u8,
    active_speed: u8,
    phys_state: u8,
    link_layer: u8,
    flags: u8,
    port_cap_flags2: u16,
}

type PollCqFn = unsafe extern "C" fn(*mut c_void, c_int, *mut IbvWc) -> c_int;
type PostSendFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
type PostRecvFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
type AnyFn = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: 32 function pointers, of which the data path uses three.
#[repr(C)]
struct IbvContextOps {
    compat_query_device: AnyFn,
    compat_query_port: AnyFn,
    compat_alloc_pd: AnyFn,
    compat_dealloc_pd: AnyFn,
    compat_reg_mr: AnyFn,
    compat_rereg_mr: AnyFn,
    compat_dereg_mr: AnyFn,
    alloc_mw: AnyFn,
    bind_mw: AnyFn,
    dealloc_mw: AnyFn,
    compat_create_cq: AnyFn,
    poll_cq: Option<PollCqFn>,
    req_notify_cq: AnyFn,
    compat_cq_event: AnyFn,
    compat_resize_cq: AnyFn,
    compat_destroy_cq: AnyFn,
    compat_create_srq: AnyFn,
    compat_modify_srq: AnyFn,
    compat_query_srq: AnyFn,
    compat_destroy_srq: AnyFn,
    post_srq_recv: AnyFn,
    compat_create_qp: AnyFn,
    compat_query_qp: AnyFn,
    compat_modify_qp: AnyFn,
    compat_destroy_qp: AnyFn,
    post_send: Option<PostSendFn>,
    post_recv: Option<PostRecvFn>,
    compat_create_ah: AnyFn,
    compat_destroy_ah: AnyFn,
    compat_attach_mcast: AnyFn,
    compat_detach_mcast: AnyFn,
    compat_async_event: AnyFn,
}

/// The beginning of `struct ibv_context` (the library allocates it; only read here).
#[repr(C)]
struct IbvContext {
    device: *mut c_void,
    ops: IbvContextOps,
    cmd_fd: c_int,
    async_fd: c_int,
    num_comp_vectors: c_int,
}

/// The beginning of `struct ibv_mr`.
#[repr(C)]
struct IbvMr {
    context: *mut IbvContext,
    pd: *mut c_void,
    addr: *mut c_void,
    length: usize,
    handle: u32,
    lkey: u32,
    rkey: u32,
}

/// The beginning of `struct ibv_qp`.
#[repr(C)]
struct IbvQp {
    context: *mut IbvContext,
    qp_context: *mut c_void,
    pd: *mut c_void,
    send_cq: *mut c_void,
    recv_cq: *mut c_void,
    srq: *mut c_void,
    handle: u32,
    qp_num: u32,
    state: u32,
    qp_type: u32,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvSge {
    addr: u64,
    length: u32,
    lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WrRdma {
    remote_addr: u64,
    rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WrAtomic {
    remote_addr: u64,
    compare_add: u64,
    swap: u64,
    rkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WrUd {
    ah: *mut c_void,
    remote_qpn: u32,
    remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
union WrUnion {
    rdma: WrRdma,
    atomic: WrAtomic,
    ud: WrUd,
}

/// `struct ibv_send_wr` (the XRC and memory-window/TSO tails are never used: zeroed).
#[repr(C)]
struct IbvSendWr {
    wr_id: u64,
    next: *mut IbvSendWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
    opcode: u32,
    send_flags: u32,
    imm_data: u32,
    wr: WrUnion,
    xrc_remote_srqn: u32,
    tail: [u64; 6],
}

/// `struct ibv_recv_wr`.
#[repr(C)]
struct IbvRecvWr {
    wr_id: u64,
    next: *mut IbvRecvWr,
    sg_list: *mut IbvSge,
    num_sge: c_int,
}

/// A work request of libibverbs' singly linked lists (`ibv_send_wr`, `ibv_recv_wr`).
trait ChainedWr {
    fn set_next(&mut self, next: *mut Self);
}

impl ChainedWr for IbvSendWr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

impl ChainedWr for IbvRecvWr {
    fn set_next(&mut self, next: *mut Self) {
        self.next = next;
    }
}

/// Links `list` in order (the last one's `next` stays as it is: NULL) and returns its head.
/// The list must not move or be resized while the pointers are in use.
fn link<T: ChainedWr>(list: &mut [T]) -> *mut T {
    let base = list.as_mut_ptr();
    for i in 1..list.len() {
        // SAFETY: `i` is within `list`, so `base + i` points at one of its elements.
        let next = unsafe { base.add(i) };
        list[i - 1].set_next(next);
    }
    base
}

/// The position in a linked list of `len` requests at `base` of the one a failed post named
/// (`bad`); 0 when it names none of them.
fn failed_at<T>(base: *mut T, len: usize, bad: *mut T) -> usize {
    (0..len)
        .find(|&i| std::ptr::eq(base.wrapping_add(i), bad))
        .unwrap_or(0)
}

/// A scatter/gather list as libibverbs takes it.
fn ibv_sges(sg_list: &[softib_engine::verbs::Sge]) -> Vec<IbvSge> {
    sg_list
        .iter()
        .map(|s| IbvSge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        })
        .collect()
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy)]
struct IbvWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u16,
    slid: u16,
    sl: u8,
    dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvQpCap {
    max_send_wr: u32,
    max_recv_wr: u32,
    max_send_sge: u32,
    max_recv_sge: u32,
    max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
struct IbvQpInitAttr {
    qp_context: *mut c_void,
    send_cq: *mut c_void,
    recv_cq: *mut c_void,
    srq: *mut c_void,
    cap: IbvQpCap,
    qp_type: u32,
    sq_sig_all: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvGlobalRoute {
    dgid: IbvGid,
    flow_label: u32,
    sgid_index: u8,
    hop_limit: u8,
    traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvAhAttr {
    grh: IbvGlobalRoute,
    dlid: u16,
    sl: u8,
    src_path_bits: u8,
    static_rate: u8,
    is_global: u8,
    port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct IbvQpAttr {
    qp_state: u32,
    cur_qp_state: u32,
    path_mtu: u32,
    path_mig_state: u32,
    qkey: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_qp_num: u32,
    qp_access_flags: u32,
    cap: IbvQpCap,
    ah_attr: IbvAhAttr,
    alt_ah_attr: IbvAhAttr,
    pkey_index: u16,
    alt_pkey_index: u16,
    en_sqd_async_notify: u8,
    sq_draining: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    port_num: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    alt_port_num: u8,
    alt_timeout: u8,
    rate_limit: u32,
}

// The layout of rdma-core's header on LP64 (checked with offsetof against verbs.h of rdma-core 44).
const _: () = {
    assert!(size_of::<IbvGid>() == 16);
    assert!(size_of::<IbvDeviceAttr>() == 232);
    assert!(offset_of!(IbvDeviceAttr, node_guid) == 64);
    assert!(offset_of!(IbvDeviceAttr, max_qp) == 108);
    assert!(offset_of!(IbvDeviceAttr, atomic_cap) == 164);
    assert!(offset_of!(IbvDeviceAttr, max_pkeys) == 224);
    assert!(offset_of!(IbvDeviceAttr, phys_port_cnt) == 227);
    assert!(size_of::<IbvPortAttr>() == 52);
    assert!(offset_of!(IbvPortAttr, lid) == 34);
    assert!(offset_of!(IbvPortAttr, active_width) == 43);
    assert!(offset_of!(IbvPortAttr, link_layer) == 46);
    assert!(size_of::<IbvContextOps>() == 256);
    assert!(offset_of!(IbvContext, ops) == 8);
    assert!(offset_of!(IbvContext, cmd_fd) == 264);
    assert!(offset_of!(IbvContext, num_comp_vectors) == 272);
    assert!(offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, poll_cq) == 96);
    assert!(offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, post_send) == 208);
    assert!(offset_of!(IbvContext, ops) + offset_of!(IbvContextOps, post_recv) == 216);
    assert!(offset_of!(IbvMr, lkey) == 36);
    assert!(offset_of!(IbvQp, qp_num) == 52);
    assert!(size_of::<IbvSge>() == 16);
    assert!(size_of::<IbvSendWr>() == 128);
    assert!(offset_of!(IbvSendWr, imm_data) == 36);
    assert!(offset_of!(IbvSendWr, wr) == 40);
    assert!(offset_of!(IbvSendWr, xrc_remote_srqn) == 72);
    assert!(offset_of!(IbvSendWr, tail) == 80);
    assert!(size_of::<IbvRecvWr>() == 32);
    assert!(size_of::<IbvWc>() == 48);
    assert!(offset_of!(IbvWc, qp_num) == 28);
    assert!(offset_of!(IbvWc, wc_flags) == 36);
    assert!(offset_of!(IbvWc, slid) == 42);
    assert!(offset_of!(IbvWc, sl) == 44);
    assert!(size_of::<IbvQpCap>() == 20);
    assert!(size_of::<IbvQpInitAttr>() == 64);
    assert!(offset_of!(IbvQpInitAttr, cap) == 32);
    assert!(offset_of!(IbvQpInitAttr, qp_type) == 52);
    assert!(size_of::<IbvGlobalRoute>() == 24);
    assert!(offset_of!(IbvGlobalRoute, flow_label) == 16);
    assert!(size_of::<IbvAhAttr>() == 32);
    assert!(offset_of!(IbvAhAttr, dlid) == 24);
    assert!(offset_of!(IbvAhAttr, port_num) == 30);
    assert!(size_of::<IbvQpAttr>() == 144);
    assert!(offset_of!(IbvQpAttr, cap) == 36);
    assert!(offset_of!(IbvQpAttr, ah_attr) == 56);
    assert!(offset_of!(IbvQpAttr, alt_ah_attr) == 88);
    assert!(offset_of!(IbvQpAttr, pkey_index) == 120);
    assert!(offset_of!(IbvQpAttr, rate_limit) == 136);
};

const IBV_WC_GRH: u32 = 1;
const IBV_WC_WITH_IMM: u32 = 2;
const IBV_WC_WITH_INV: u32 = 8;

// ---- the library ---------------------------------------------------------------------------

type Dev = *mut c_void;
type Ctx = *mut IbvContext;
type Ptr = *mut c_void;

/// The functions of libibverbs this backend calls.
struct Lib {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut Dev,
    get_device_name: unsafe extern "C" fn(Dev) -> *const c_char,
    open_device: unsafe extern "C" fn(Dev) -> Ctx,
    close_device: unsafe extern "C" fn(Ctx) -> c_int,
    query_device: unsafe extern "C" fn(Ctx, *mut IbvDeviceAttr) -> c_int,
    query_port: unsafe extern "C" fn(Ctx, u8, *mut IbvPortAttr) -> c_int,
    query_gid: unsafe extern "C" fn(Ctx, u8, c_int, *mut IbvGid) -> c_int,
    alloc_pd: unsafe extern "C" fn(Ctx) -> Ptr,
    dealloc_pd: unsafe extern "C" fn(Ptr) -> c_int,
    reg_mr: unsafe extern "C" fn(Ptr, *mut c_void, usize, c_int) -> *mut IbvMr,
    dereg_mr: unsafe extern "C" fn(*mut IbvMr) -> c_int,
    create_cq: unsafe extern "C" fn(Ctx, c_int, Ptr, Ptr, c_int) -> Ptr,
    destroy_cq: unsafe extern "C" fn(Ptr) -> c_int,
    create_qp: unsafe extern "C" fn(Ptr, *mut IbvQpInitAttr) -> *mut IbvQp,
    modify_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int,
    query_qp: unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int, *mut IbvQpInitAttr) -> c_int,
    destroy_qp: unsafe extern "C" fn(*mut IbvQp) -> c_int,
    create_ah: unsafe extern "C" fn(Ptr, *mut IbvAhAttr) -> Ptr,
    destroy_ah: unsafe extern "C" fn(Ptr) -> c_int,
    /// Kept loaded for the life of the process (the function pointers above point into it).
    _lib: libloading::Library,
}

/// Loads libibverbs once per process; the error says what is missing and what to do.
fn lib() -> std::result::Result<&'static Lib, String> {
    static LIB: OnceLock<std::result::Result<Lib, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> std::result::Result<Lib, String> {
    load_named(LIBIBVERBS)
}

fn load_named(name: &str) -> std::result::Result<Lib, String> {
    // SAFETY: loading libibverbs runs its initializers, which only set up the library's own
    // state (provider list, fork support); no Rust invariant depends on them. (Only ever
    // called with libibverbs' name, or in a test with a name that does not exist.)
    let lib = unsafe { libloading::Library::new(name) }.map_err(|e| {
        format!(
            "{name} not found ({e}): rdma-core is not installed here (install \
             libibverbs1 and the provider package, e.g. `apt install ibverbs-providers`)"
        )
    })?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the symbol is libibverbs' exported function of that name, whose C
            // signature (verbs.h) is the function pointer type the field declares; the pointer
            // is copied out and stays valid because the library is never unloaded.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                .map_err(|e| format!("{name} lacks {} ({e}): rdma-core too old?", $name))?
        };
    }
    Ok(Lib {
        get_device_list: sym!("ibv_get_device_list"),
        get_device_name: sym!("ibv_get_device_name"),
        open_device: sym!("ibv_open_device"),
        close_device: sym!("ibv_close_device"),
        query_device: sym!("ibv_query_device"),
        query_port: sym!("ibv_query_port"),
        query_gid: sym!("ibv_query_gid"),
        alloc_pd: sym!("ibv_alloc_pd"),
        dealloc_pd: sym!("ibv_dealloc_pd"),
        reg_mr: sym!("ibv_reg_mr"),
        dereg_mr: sym!("ibv_dereg_mr"),
        create_cq: sym!("ibv_create_cq"),
        destroy_cq: sym!("ibv_destroy_cq"),
        create_qp: sym!("ibv_create_qp"),
        modify_qp: sym!("ibv_modify_qp"),
        query_qp: sym!("ibv_query_qp"),
        destroy_qp: sym!("ibv_destroy_qp"),
        create_ah: sym!("ibv_create_ah"),
        destroy_ah: sym!("ibv_destroy_ah"),
        _lib: lib,
    })
}

/// Whether libibverbs loads and lists at least one device (what `Context::open` asks before
/// choosing this backend); the error says which of the two is missing.
pub(crate) fn probe() -> std::result::Result<(), String> {
    Backend::open().map(drop).map_err(|e| e.to_string())
}

fn err(msg: String) -> Error {
    Error::RdmaCore(msg)
}

/// `what failed: strerror`, from an errno a verb returned (0 or negative: from `errno`).
fn verb_err(what: &str, rc: c_int) -> Error {
    let e = if rc > 0 {
        std::io::Error::from_raw_os_error(rc)
    } else {
        std::io::Error::last_os_error()
    };
    err(format!("{what} failed on the rdma-core device: {e}"))
}

// ---- the backend ---------------------------------------------------------------------------

struct Qp {
    ptr: *mut IbvQp,
    init: QpInitAttr,
}

/// One open device and what this context made on it.
struct Device {
    name: String,
    ctx: Ctx,
    pds: BTreeMap<u32, Ptr>,
    mrs: BTreeMap<u32, *mut IbvMr>,
    cqs: BTreeMap<u32, Ptr>,
    qps: BTreeMap<u32, Qp>,
    ahs: BTreeMap<u32, Ptr>,
    next: u32,
}

/// A session with the RDMA devices of this host through libibverbs.
pub(crate) struct Backend {
    lib: &'static Lib,
    devs: Vec<Device>,
    wcs: Vec<IbvWc>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("rdma_core::Backend")
            .field(
                "devices",
                &self
                    .devs
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

// SAFETY: the raw pointers are libibverbs objects, which the library documents as thread-safe
// (every verb may be called from any thread); this backend is only used through `&mut self`,
// so it is never used from two threads at once anyway.
unsafe impl Send for Backend {}

fn no_such(what: &str, n: u32) -> Error {
    err(format!(
        "no {what} {n} in this context on the rdma-core device"
    ))
}

impl Backend {
    /// Loads libibverbs and opens every device it lists.
    pub(crate) fn open() -> Result<Backend> {
        let lib = lib().map_err(err)?;
        let mut n: c_int = 0;
        // SAFETY: `n` is a valid out pointer; the list returned is owned by us until freed.
        let list = unsafe { (lib.get_device_list)(&mut n) };
        if list.is_null() {
            return Err(err(format!(
                "no RDMA devices: ibv_get_device_list failed: {} (the kernel has no RDMA \
                 support loaded: load the driver and ib_uverbs, e.g. `modprobe rdma_rxe` and \
                 `rdma link add rxe0 type rxe netdev eth0` for Soft-RoCE)",
                std::io::Error::last_os_error()
            )));
        }
        let mut devs = Vec::new();
        let mut failed = Vec::new();
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: the list holds `n` valid device pointers (then a NULL).
            let dev = unsafe { *list.add(i) };
            if dev.is_null() {
                break;
            }
            // SAFETY: `dev` is a device of the list; the name is a NUL-terminated string
            // inside it, copied out at once.
            let name = unsafe { CStr::from_ptr((lib.get_device_name)(dev)) }
                .to_string_lossy()
                .into_owned();
            // SAFETY: `dev` is a device of the list, which stays valid until it is freed; an
            // open context keeps its own reference to the device.
            let ctx = unsafe { (lib.open_device)(dev) };
            if ctx.is_null() {
                failed.push(format!("{name}: {}", std::io::Error::last_os_error()));
                continue;
            }
            devs.push(Device {
                name,
                ctx,
                pds: BTreeMap::new(),
                mrs: BTreeMap::new(),
                cqs: BTreeMap::new(),
                qps: BTreeMap::new(),
                ahs: BTreeMap::new(),
                next: 1,
            });
        }
        // Deliberately not freed: ibv_free_device_list would drop the devices' references, and
        // rdma-core keeps a device alive while a context of it is open anyway; the list is a few
        // pointers, once per process that opens a context.
        let _ = list;
        if devs.is_empty() {
            let mut msg = String::from(
                "no RDMA devices: libibverbs found none on this host (load the kernel driver, \
                 e.g. `rdma link add rxe0 type rxe netdev eth0` for Soft-RoCE, and check \
                 /sys/class/infiniband)",
            );
            if !failed.is_empty() {
                msg = format!(
                    "no RDMA device could be opened ({}); check the permissions of \
                     /dev/infiniband/uverbs*",
                    failed.join("; ")
                );
            }
            return Err(err(msg));
        }
        Ok(Backend {
            lib,
            devs,
            wcs: Vec::new(),
        })
    }

    fn dev(&mut self, dev: u32) -> Result<&mut Device> {
        let n = self.devs.len();
        self.devs.get_mut(dev as usize).ok_or_else(|| {
            err(format!(
                "no device {dev}: this host has {n} rdma-core device(s)"
            ))
        })
    }

    /// The devices, with ports and GID tables.
    pub(crate) fn devices(&mut self) -> Result<Vec<DeviceInfo>> {
        let lib = self.lib;
        let mut out = Vec::new();
        for d in &self.devs {
            // SAFETY: all-zero is a valid value of this plain C struct.
            let mut a: IbvDeviceAttr = unsafe { std::mem::zeroed() };
            // SAFETY: `d.ctx` is an open context and `a` a writable ibv_device_attr.
            let rc = unsafe { (lib.query_device)(d.ctx, &mut a) };
            if rc != 0 {
                return Err(verb_err(&format!("ibv_query_device({})", d.name), rc));
            }
            let fw: [u8; 64] = a.fw_ver.map(|c| c as u8);
            let fw_ver = CStr::from_bytes_until_nul(&fw)
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let u = |v: c_int| u32::try_from(v).unwrap_or(0);
            let mut ports = Vec::new();
            let mut verbs_ports = Vec::new();
            let mut max_msg_sz = 0;
            for p in 1..=a.phys_port_cnt {
                let mut pa = IbvPortAttr::default();
                // SAFETY: an open context and a zeroed, writable ibv_port_attr of the full size
                // (the exported ibv_query_port fills at most that, as the header's inline
                // wrapper relies on).
                let rc = unsafe { (lib.query_port)(d.ctx, p, &mut pa) };
                if rc != 0 {
                    return Err(verb_err(
                        &format!("ibv_query_port({} port {p})", d.name),
                        rc,
                    ));
                }
                max_msg_sz = pa.max_msg_sz;
                verbs_ports.push(VerbsPortAttr {
                    max_msg_sz: pa.max_msg_sz,
                    max_vl_num: pa.max_vl_num,
                    pkey_tbl_len: pa.pkey_tbl_len,
                    gid_tbl_len: pa.gid_tbl_len,
                    subnet_timeout: pa.subnet_timeout,
                });
                let mut gids = Vec::new();
                let len = pa.gid_tbl_len.clamp(0, 128);
                for i in 0..len {
                    let mut g = IbvGid::default();
                    // SAFETY: an open context, a port and index in range, a writable gid.
                    let rc = unsafe { (lib.query_gid)(d.ctx, p, i, &mut g) };
                    gids.push(if rc == 0 { Gid(g.raw) } else { Gid([0; 16]) });
                }
                while gids.last().is_some_and(|g| g.0 == [0; 16]) {
                    gids.pop();
                }
                let port_guid = gids
                    .first()
                    .and_then(|g| g.0[8..16].try_into().ok())
                    .map(|b: [u8; 8]| Guid(u64::from_be_bytes(b)))
                    .unwrap_or(Guid(u64::from_be(a.node_guid)));
                ports.push(PortInfo {
                    number: p,
                    state: u8::try_from(pa.state).unwrap_or(0),
                    phys_state: pa.phys_state,
                    rate: rate(pa.active_width, pa.active_speed),
                    width: pa.active_width,
                    speed: pa.active_speed,
                    lid: Lid(pa.lid),
                    lmc: pa.lmc,
                    sm_lid: Lid(pa.sm_lid),
                    capability_mask: pa.port_cap_flags,
                    port_guid,
                    // IBV_LINK_LAYER_UNSPECIFIED (0) is InfiniBand for old drivers.
                    link_layer_ib: pa.link_layer != 2,
                    max_mtu: Mtu::from(u8::try_from(pa.max_mtu).unwrap_or(0)),
                    active_mtu: Mtu::from(u8::try_from(pa.active_mtu).unwrap_or(0)),
                    gids,
                });
            }
            let sysfs = |f: &str| {
                std::fs::read_to_string(format!("/sys/class/infiniband/{}/{f}", d.name))
                    .map(|s| s.trim().to_string())
                    .unwrap_or_default()
            };
            let attr = DeviceAttr {
                node_guid: Guid(u64::from_be(a.node_guid)),
                sys_image_guid: Guid(u64::from_be(a.sys_image_guid)),
                vendor_id: a.vendor_id,
                vendor_part_id: a.vendor_part_id,
                hw_ver: a.hw_ver,
                fw_ver,
                max_mr_size: a.max_mr_size,
                max_qp: u(a.max_qp),
                max_qp_wr: u(a.max_qp_wr),
                max_sge: u(a.max_sge),
                max_cq: u(a.max_cq),
                max_cqe: u(a.max_cqe),
                max_mr: u(a.max_mr),
                max_pd: u(a.max_pd),
                max_qp_rd_atom: u8::try_from(a.max_qp_rd_atom).unwrap_or(u8::MAX),
                max_qp_init_rd_atom: u8::try_from(a.max_qp_init_rd_atom).unwrap_or(u8::MAX),
                max_srq: u(a.max_srq),
                max_srq_wr: u(a.max_srq_wr),
                max_ah: u(a.max_ah),
                ..DeviceAttr::default()
            };
            let attr = DeviceAttr {
                max_msg_sz,
                phys_port_cnt: a.phys_port_cnt,
                ..attr
            };
            out.push(DeviceInfo {
                name: d.name.clone(),
                ca_type: sysfs("hca_type"),
                description: sysfs("node_desc"),
                // What sysfs says (as ibstat prints it: empty for rxe); the verb's value is in
                // `attr.fw_ver`.
                fw_ver: sysfs("fw_ver"),
                hw_ver: a.hw_ver,
                node_guid: Guid(u64::from_be(a.node_guid)),
                sys_image_guid: Guid(u64::from_be(a.sys_image_guid)),
                vendor_id: a.vendor_id,
                vendor_part_id: a.vendor_part_id,
                attr,
                ports,
                drops: Vec::new(),
                verbs: Some(VerbsAttr {
                    device_cap_flags: a.device_cap_flags,
                    page_size_cap: a.page_size_cap,
                    max_sge_rd: a.max_sge_rd,
                    max_res_rd_atom: a.max_res_rd_atom,
                    atomic_cap: a.atomic_cap,
                    max_mw: a.max_mw,
                    max_mcast_grp: a.max_mcast_grp,
                    max_mcast_qp_attach: a.max_mcast_qp_attach,
                    max_total_mcast_qp_attach: a.max_total_mcast_qp_attach,
                    max_ah: a.max_ah,
                    max_srq_sge: a.max_srq_sge,
                    max_pkeys: a.max_pkeys,
                    local_ca_ack_delay: a.local_ca_ack_delay,
                    // SAFETY: `d.ctx` is an open context; `num_comp_vectors` is a plain int
                    // the library set when it opened it, at the offset declared above.
                    num_comp_vectors: unsafe { (*d.ctx).num_comp_vectors },
                    ports: verbs_ports,
                }),
            });
        }
        Ok(out)
    }

    /// `ibv_alloc_pd`.
    pub(crate) fn alloc_pd(&mut self, dev: u32) -> Result<PdHandle> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        // SAFETY: an open context.
        let pd = unsafe { (lib.alloc_pd)(d.ctx) };
        if pd.is_null() {
            return Err(verb_err("ibv_alloc_pd", 0));
        }
        let h = d.next;
        d.next += 1;
        d.pds.insert(h, pd);
        Ok(PdHandle(h))
    }

    /// `ibv_dealloc_pd`.
    pub(crate) fn dealloc_pd(&mut self, dev: u32, pd: PdHandle) -> Result<()> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let p = *d.pds.get(&pd.0).ok_or_else(|| no_such("PD", pd.0))?;
        // SAFETY: a PD this context allocated and has not freed.
        let rc = unsafe { (lib.dealloc_pd)(p) };
        if rc != 0 {
            return Err(verb_err("ibv_dealloc_pd", rc));
        }
        d.pds.remove(&pd.0);
        Ok(())
    }

    /// `ibv_reg_mr` of `len` bytes at `addr` of this process.
    ///
    /// The caller (the crate) guarantees the memory is mapped (a [`crate::Buffer`], or memory
    /// the caller of `reg_mr_process` vouched for); the kernel checks it again when pinning.
    pub(crate) fn reg_mr(
        &mut self,
        dev: u32,
        pd: PdHandle,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<MrKeys> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let p = *d.pds.get(&pd.0).ok_or_else(|| no_such("PD", pd.0))?;
        let flags = c_int::try_from(access.0)
            .map_err(|_| err(format!("access flags {:#x} out of range", access.0)))?;
        // SAFETY: a live PD; the kernel pins the pages at `addr` and fails (EFAULT) on an
        // unmapped range, so no Rust memory is touched by this call.
        let mr = unsafe { (lib.reg_mr)(p, addr as usize as *mut c_void, len, flags) };
        if mr.is_null() {
            return Err(verb_err("ibv_reg_mr", 0));
        }
        // SAFETY: a non-NULL ibv_mr the library just returned.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        if let Some(old) = d.mrs.insert(lkey, mr) {
            // Cannot happen (keys are unique per device); keep both released on drop anyway.
            // SAFETY: the region this context registered under that key.
            unsafe { (lib.dereg_mr)(old) };
        }
        Ok(MrKeys {
            lkey,
            rkey,
            addr,
            len: len as u64,
        })
    }

    /// `ibv_dereg_mr`.
    pub(crate) fn dereg_mr(&mut self, dev: u32, lkey: u32) -> Result<()> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let mr = *d
            .mrs
            .get(&lkey)
            .ok_or_else(|| no_such("MR with L_Key", lkey))?;
        // SAFETY: a region this context registered and has not deregistered.
        let rc = unsafe { (lib.dereg_mr)(mr) };
        if rc != 0 {
            return Err(verb_err("ibv_dereg_mr", rc));
        }
        d.mrs.remove(&lkey);
        Ok(())
    }

    /// `ibv_create_cq`.
    pub(crate) fn create_cq(&mut self, dev: u32, cqe: u32) -> Result<CqHandle> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let n = c_int::try_from(cqe.max(1)).unwrap_or(c_int::MAX);
        // SAFETY: an open context; no channel, no CQ context, vector 0.
        let cq =
            unsafe { (lib.create_cq)(d.ctx, n, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        if cq.is_null() {
            return Err(verb_err(&format!("ibv_create_cq({cqe} entries)"), 0));
        }
        let h = d.next;
        d.next += 1;
        d.cqs.insert(h, cq);
        Ok(CqHandle(h))
    }

    /// `ibv_destroy_cq`.
    pub(crate) fn destroy_cq(&mut self, dev: u32, cq: CqHandle) -> Result<()> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let p = *d.cqs.get(&cq.0).ok_or_else(|| no_such("CQ", cq.0))?;
        // SAFETY: a CQ this context created and has not destroyed.
        let rc = unsafe { (lib.destroy_cq)(p) };
        if rc != 0 {
            return Err(verb_err("ibv_destroy_cq", rc));
        }
        d.cqs.remove(&cq.0);
        Ok(())
    }

    /// `ibv_create_qp`.
    pub(crate) fn create_qp(&mut self, dev: u32, init: QpInitAttr) -> Result<Qpn> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        if init.srq.is_some() {
            return Err(err(
                "shared receive queues are not available on an rdma-core device in softib".into(),
            ));
        }
        let pd = *d
            .pds
            .get(&init.pd.0)
            .ok_or_else(|| no_such("PD", init.pd.0))?;
        let scq = *d
            .cqs
            .get(&init.send_cq.0)
            .ok_or_else(|| no_such("CQ", init.send_cq.0))?;
        let rcq = *d
            .cqs
            .get(&init.recv_cq.0)
            .ok_or_else(|| no_such("CQ", init.recv_cq.0))?;
        let mut a = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: scq,
            recv_cq: rcq,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: init.cap.max_recv_wr,
                max_send_sge: init.cap.max_send_sge,
                max_recv_sge: init.cap.max_recv_sge,
                max_inline_data: init.cap.max_inline_data,
            },
            qp_type: qp_type_code(init.qp_type),
            sq_sig_all: c_int::from(init.sq_sig_all),
        };
        // SAFETY: a live PD and CQs of this context, and a filled ibv_qp_init_attr.
        let qp = unsafe { (lib.create_qp)(pd, &mut a) };
        if qp.is_null() {
            return Err(verb_err(
                &format!(
                    "ibv_create_qp({} send WRs, {} receive WRs, {} inline bytes)",
                    init.cap.max_send_wr, init.cap.max_recv_wr, init.cap.max_inline_data
                ),
                0,
            ));
        }
        // SAFETY: a non-NULL ibv_qp the library just returned.
        let qpn = unsafe { (*qp).qp_num };
        let mut init = init;
        init.cap = QpCap {
            max_send_wr: a.cap.max_send_wr,
            max_recv_wr: a.cap.max_recv_wr,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
            max_inline_data: a.cap.max_inline_data,
        };
        d.qps.insert(qpn, Qp { ptr: qp, init });
        Ok(Qpn::new(qpn))
    }

    fn qp(&mut self, dev: u32, qpn: Qpn) -> Result<*mut IbvQp> {
        let d = self.dev(dev)?;
        d.qps
            .get(&qpn.value())
            .map(|q| q.ptr)
            .ok_or_else(|| no_such("QP", qpn.value()))
    }

    /// `ibv_modify_qp`.
    pub(crate) fn modify_qp(
        &mut self,
        dev: u32,
        qpn: Qpn,
        attr: &QpAttr,
        mask: AttrMask,
    ) -> Result<()> {
        let lib = self.lib;
        let qp = self.qp(dev, qpn)?;
        let mut a = IbvQpAttr {
            qp_state: qp_state_code(attr.qp_state),
            cur_qp_state: qp_state_code(attr.cur_qp_state),
            path_mtu: u32::from(u8::from(attr.path_mtu)),
            qkey: attr.qkey,
            rq_psn: attr.rq_psn.value(),
            sq_psn: attr.sq_psn.value(),
            dest_qp_num: attr.dest_qp_num.value(),
            qp_access_flags: attr.qp_access_flags.0,
            ah_attr: ah_attr(&attr.ah_attr),
            pkey_index: attr.pkey_index,
            max_rd_atomic: attr.max_rd_atomic,
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            port_num: attr.port_num,
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            ..IbvQpAttr::default()
        };
        // The mask bits are IBV_QP_* (softib's AttrMask keeps libibverbs' values).
        let m = c_int::try_from(mask.0)
            .map_err(|_| err(format!("QP attribute mask {:#x} out of range", mask.0)))?;
        // SAFETY: a live QP of this context and a filled ibv_qp_attr.
        let rc = unsafe { (lib.modify_qp)(qp, &mut a, m) };
        if rc != 0 {
            return Err(verb_err(
                &format!("ibv_modify_qp(QP {:#x} to {})", qpn.value(), attr.qp_state),
                rc,
            ));
        }
        Ok(())
    }

    /// `ibv_query_qp`.
    pub(crate) fn query_qp(&mut self, dev: u32, qpn: Qpn) -> Result<(QpAttr, QpInitAttr)> {
        let lib = self.lib;
        let qp = self.qp(dev, qpn)?;
        let mut init = self
            .dev(dev)?
            .qps
            .get(&qpn.value())
            .map(|q| q.init)
            .ok_or_else(|| no_such("QP", qpn.value()))?;
        let mut a = IbvQpAttr::default();
        let mut ia = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: std::ptr::null_mut(),
            recv_cq: std::ptr::null_mut(),
            srq: std::ptr::null_mut(),
            cap: IbvQpCap::default(),
            qp_type: 0,
            sq_sig_all: 0,
        };
        // Every attribute the verb can report (IBV_QP_STATE .. IBV_QP_DEST_QPN).
        let mask: c_int = (1 << 21) - 1;
        // SAFETY: a live QP and writable attribute structures.
        let rc = unsafe { (lib.query_qp)(qp, &mut a, mask, &mut ia) };
        if rc != 0 {
            return Err(verb_err("ibv_query_qp", rc));
        }
        init.cap = QpCap {
            max_send_wr: ia.cap.max_send_wr,
            max_recv_wr: ia.cap.max_recv_wr,
            max_send_sge: ia.cap.max_send_sge,
            max_recv_sge: ia.cap.max_recv_sge,
            max_inline_data: ia.cap.max_inline_data,
        };
        let g = a.ah_attr.grh;
        let attr = QpAttr {
            qp_state: qp_state_from(a.qp_state),
            cur_qp_state: qp_state_from(a.cur_qp_state),
            path_mtu: Mtu::from(u8::try_from(a.path_mtu).unwrap_or(0)),
            rq_psn: Psn::new(a.rq_psn),
            sq_psn: Psn::new(a.sq_psn),
            dest_qp_num: Qpn::new(a.dest_qp_num),
            qp_access_flags: AccessFlags(a.qp_access_flags),
            qkey: a.qkey,
            ah_attr: AddressVector {
                dlid: Lid(a.ah_attr.dlid),
                sl: a.ah_attr.sl,
                src_path_bits: a.ah_attr.src_path_bits,
                static_rate: a.ah_attr.static_rate,
                grh: (a.ah_attr.is_global != 0).then_some(GlobalRoute {
                    dgid: Gid(g.dgid.raw),
                    flow_label: g.flow_label,
                    sgid_index: g.sgid_index,
                    hop_limit: g.hop_limit,
                    traffic_class: g.traffic_class,
                }),
                port_num: a.ah_attr.port_num,
            },
            pkey_index: a.pkey_index,
            port_num: a.port_num,
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
        };
        Ok((attr, init))
    }

    /// `ibv_destroy_qp`.
    pub(crate) fn destroy_qp(&mut self, dev: u32, qpn: Qpn) -> Result<()> {
        let lib = self.lib;
        let qp = self.qp(dev, qpn)?;
        // SAFETY: a QP this context created and has not destroyed.
        let rc = unsafe { (lib.destroy_qp)(qp) };
        if rc != 0 {
            return Err(verb_err("ibv_destroy_qp", rc));
        }
        self.dev(dev)?.qps.remove(&qpn.value());
        Ok(())
    }

    /// `ibv_create_ah`.
    pub(crate) fn create_ah(
        &mut self,
        dev: u32,
        pd: PdHandle,
        av: AddressVector,
    ) -> Result<AhHandle> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let p = *d.pds.get(&pd.0).ok_or_else(|| no_such("PD", pd.0))?;
        let mut a = ah_attr(&av);
        // SAFETY: a live PD and a filled ibv_ah_attr.
        let ah = unsafe { (lib.create_ah)(p, &mut a) };
        if ah.is_null() {
            return Err(verb_err(
                &format!(
                    "ibv_create_ah(LID {}, {})",
                    av.dlid.0,
                    match av.grh {
                        Some(g) => format!("GID index {}", g.sgid_index),
                        None => "no GRH: a RoCE device needs one (-g)".into(),
                    }
                ),
                0,
            ));
        }
        let h = d.next;
        d.next += 1;
        d.ahs.insert(h, ah);
        Ok(AhHandle(h))
    }

    /// `ibv_destroy_ah`.
    pub(crate) fn destroy_ah(&mut self, dev: u32, ah: AhHandle) -> Result<()> {
        let lib = self.lib;
        let d = self.dev(dev)?;
        let p = *d.ahs.get(&ah.0).ok_or_else(|| no_such("AH", ah.0))?;
        // SAFETY: an AH this context created and has not destroyed.
        let rc = unsafe { (lib.destroy_ah)(p) };
        if rc != 0 {
            return Err(verb_err("ibv_destroy_ah", rc));
        }
        d.ahs.remove(&ah.0);
        Ok(())
    }

    /// `ibv_post_send` of a list.
    pub(crate) fn post_send(&mut self, dev: u32, qpn: Qpn, wrs: &[SendWr]) -> Result<()> {
        let qp = self.qp(dev, qpn)?;
        let d = self.dev(dev)?;
        if wrs.is_empty() {
            return Ok(());
        }
        // Scatter lists first (their addresses must not move once the WRs point at them).
        let sges: Vec<Vec<IbvSge>> = wrs
            .iter()
            .map(
                |w| match (&w.inline_data, w.flags.contains(SendFlags::INLINE)) {
                    (Some(data), true) => vec![IbvSge {
                        addr: data.as_ptr() as u64,
                        length: u32::try_from(data.len()).unwrap_or(u32::MAX),
                        lkey: 0,
                    }],
                    _ => ibv_sges(&w.sg_list),
                },
            )
            .collect();
        let mut list = Vec::with_capacity(wrs.len());
        for (i, (w, sg)) in wrs.iter().zip(&sges).enumerate() {
            let rdma = |addr: u64, rkey: u32| WrUnion {
                rdma: WrRdma {
                    remote_addr: addr,
                    rkey,
                },
            };
            let (opcode, imm, mut wr) = match w.opcode {
                WrOpcode::RdmaWrite(r) => (0, 0, rdma(r.addr, r.rkey.0)),
                WrOpcode::RdmaWriteWithImm(r, imm) => (1, imm.to_be(), rdma(r.addr, r.rkey.0)),
                WrOpcode::Send => (2, 0, rdma(0, 0)),
                WrOpcode::SendWithImm(imm) => (3, imm.to_be(), rdma(0, 0)),
                WrOpcode::RdmaRead(r) => (4, 0, rdma(r.addr, r.rkey.0)),
                WrOpcode::AtomicCmpAndSwp {
                    remote,
                    compare,
                    swap,
                } => (
                    5,
                    0,
                    WrUnion {
                        atomic: WrAtomic {
                            remote_addr: remote.addr,
                            compare_add: compare,
                            swap,
                            rkey: remote.rkey.0,
                        },
                    },
                ),
                WrOpcode::AtomicFetchAndAdd { remote, add } => (
                    6,
                    0,
                    WrUnion {
                        atomic: WrAtomic {
                            remote_addr: remote.addr,
                            compare_add: add,
                            swap: 0,
                            rkey: remote.rkey.0,
                        },
                    },
                ),
                WrOpcode::SendWithInv(rkey) => (9, rkey.0, rdma(0, 0)),
            };
            if let Some(ud) = &w.ud {
                let ah = *d.ahs.get(&ud.ah.0).ok_or_else(|| {
                    err(format!(
                        "work request {i} of the list: no AH {} in this context",
                        ud.ah.0
                    ))
                })?;
                wr = WrUnion {
                    ud: WrUd {
                        ah,
                        remote_qpn: ud.remote_qpn.value(),
                        remote_qkey: ud.remote_qkey,
                    },
                };
            }
            list.push(IbvSendWr {
                wr_id: w.wr_id,
                next: std::ptr::null_mut(),
                sg_list: sg.as_ptr().cast_mut(),
                num_sge: c_int::try_from(sg.len()).unwrap_or(c_int::MAX),
                opcode,
                send_flags: w.flags.0,
                imm_data: imm,
                wr,
                xrc_remote_srqn: 0,
                tail: [0; 6],
            });
        }
        let base = link(&mut list);
        // SAFETY: `qp` is live; its context is open, and its ops table holds the provider's
        // post_send.
        let post = unsafe { (*(*qp).context).ops.post_send }
            .ok_or_else(|| err("the provider has no post_send".into()))?;
        let mut bad: *mut IbvSendWr = std::ptr::null_mut();
        // SAFETY: a live QP and a NULL-terminated list of WRs whose scatter lists (and inline
        // data) live until after the call; `bad` is a writable out pointer.
        let rc = unsafe { post(qp, base, &mut bad) };
        if rc != 0 {
            let which = failed_at(base, list.len(), bad);
            return Err(verb_err(
                &format!("ibv_post_send (work request {which} of the list)"),
                rc,
            ));
        }
        Ok(())
    }

    /// `ibv_post_recv` of a list.
    pub(crate) fn post_recv(&mut self, dev: u32, qpn: Qpn, wrs: &[RecvWr]) -> Result<()> {
        let qp = self.qp(dev, qpn)?;
        if wrs.is_empty() {
            return Ok(());
        }
        let sges: Vec<Vec<IbvSge>> = wrs.iter().map(|w| ibv_sges(&w.sg_list)).collect();
        let mut list: Vec<IbvRecvWr> = wrs
            .iter()
            .zip(&sges)
            .map(|(w, sg)| IbvRecvWr {
                wr_id: w.wr_id,
                next: std::ptr::null_mut(),
                sg_list: sg.as_ptr().cast_mut(),
                num_sge: c_int::try_from(sg.len()).unwrap_or(c_int::MAX),
            })
            .collect();
        let base = link(&mut list);
        // SAFETY: `qp` is live; its context's ops table holds the provider's post_recv.
        let post = unsafe { (*(*qp).context).ops.post_recv }
            .ok_or_else(|| err("the provider has no post_recv".into()))?;
        let mut bad: *mut IbvRecvWr = std::ptr::null_mut();
        // SAFETY: a live QP, a NULL-terminated list whose scatter lists outlive the call.
        let rc = unsafe { post(qp, base, &mut bad) };
        if rc != 0 {
            let which = failed_at(base, list.len(), bad);
            return Err(verb_err(
                &format!("ibv_post_recv (receive request {which} of the list)"),
                rc,
            ));
        }
        Ok(())
    }

    /// `ibv_poll_cq` for up to `max` completions, polling for up to `wait` for the first.
    pub(crate) fn poll_cq(
        &mut self,
        dev: u32,
        cq: CqHandle,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        let d = self.dev(dev)?;
        let p = *d.cqs.get(&cq.0).ok_or_else(|| no_such("CQ", cq.0))?;
        let ctx = d.ctx;
        // SAFETY: an open context; its ops table holds the provider's poll_cq.
        let poll = unsafe { (*ctx).ops.poll_cq }
            .ok_or_else(|| err("the provider has no poll_cq".into()))?;
        let max = max.clamp(1, 4096) as usize;
        self.wcs.resize(
            max,
            IbvWc {
                wr_id: 0,
                status: 0,
                opcode: 0,
                vendor_err: 0,
                byte_len: 0,
                imm_data: 0,
                qp_num: 0,
                src_qp: 0,
                wc_flags: 0,
                pkey_index: 0,
                slid: 0,
                sl: 0,
                dlid_path_bits: 0,
            },
        );
        let start = Instant::now();
        let mut spins = 0u32;
        let n = loop {
            // SAFETY: a live CQ of this context and room for `max` ibv_wc.
            let n = unsafe { poll(p, max as c_int, self.wcs.as_mut_ptr()) };
            if n < 0 {
                return Err(err(format!(
                    "ibv_poll_cq failed on the rdma-core device ({n}): the CQ overran or the \
                     device failed"
                )));
            }
            if n > 0 || start.elapsed() >= wait {
                break n as usize;
            }
            spins += 1;
            if spins < 1000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        };
        Ok(self.wcs[..n.min(max)].iter().map(wc_from).collect())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        let lib = self.lib;
        for d in &mut self.devs {
            // Children before parents: QPs and AHs, then MRs and CQs, then PDs, then the context.
            // SAFETY (every call below): each pointer is an object this context created and
            // has not released; each is released exactly once (the tables are drained).
            for (_, q) in std::mem::take(&mut d.qps) {
                // SAFETY: as above.
                unsafe { (lib.destroy_qp)(q.ptr) };
            }
            for (_, a) in std::mem::take(&mut d.ahs) {
                // SAFETY: as above.
                unsafe { (lib.destroy_ah)(a) };
            }
            for (_, m) in std::mem::take(&mut d.mrs) {
                // SAFETY: as above.
                unsafe { (lib.dereg_mr)(m) };
            }
            for (_, c) in std::mem::take(&mut d.cqs) {
                // SAFETY: as above.
                unsafe { (lib.destroy_cq)(c) };
            }
            for (_, p) in std::mem::take(&mut d.pds) {
                // SAFETY: as above.
                unsafe { (lib.dealloc_pd)(p) };
            }
            // SAFETY: the context this backend opened, closed once.
            unsafe { (lib.close_device)(d.ctx) };
        }
    }
}

fn qp_type_code(t: QpType) -> u32 {
    match t {
        QpType::Rc => 2,
        QpType::Uc => 3,
        QpType::Ud => 4,
    }
}

fn qp_state_code(s: QpState) -> u32 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

fn qp_state_from(c: u32) -> QpState {
    match c {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        _ => QpState::Err,
    }
}

fn ah_attr(av: &AddressVector) -> IbvAhAttr {
    let mut a = IbvAhAttr {
        dlid: av.dlid.0,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: 0,
        port_num: av.port_num,
        ..IbvAhAttr::default()
    };
    if let Some(g) = av.grh {
        a.is_global = 1;
        a.grh = IbvGlobalRoute {
            dgid: IbvGid { raw: g.dgid.0 },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        };
    }
    a
}

/// `ibv_wc_status` → [`WcStatus`] (same numbers; an unknown one is a general error).
fn wc_status(s: u32) -> WcStatus {
    use WcStatus::*;
    const ALL: [WcStatus; 22] = [
        Success,
        LocLenErr,
        LocQpOpErr,
        LocEecOpErr,
        LocProtErr,
        WrFlushErr,
        MwBindErr,
        BadRespErr,
        LocAccessErr,
        RemInvReqErr,
        RemAccessErr,
        RemOpErr,
        RetryExcErr,
        RnrRetryExcErr,
        LocRddViolErr,
        RemInvRdReqErr,
        RemAbortErr,
        InvEecnErr,
        InvEecStateErr,
        FatalErr,
        RespTimeoutErr,
        GeneralErr,
    ];
    ALL.get(s as usize).copied().unwrap_or(GeneralErr)
}

fn wc_from(w: &IbvWc) -> WorkCompletion {
    let opcode = match w.opcode {
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::CompSwap,
        4 => WcOpcode::FetchAdd,
        128 => WcOpcode::Recv,
        129 => WcOpcode::RecvRdmaWithImm,
        _ => WcOpcode::Send,
    };
    WorkCompletion {
        wr_id: w.wr_id,
        status: wc_status(w.status),
        opcode,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: (w.wc_flags & IBV_WC_WITH_IMM != 0).then(|| u32::from_be(w.imm_data)),
        invalidated_rkey: (w.wc_flags & IBV_WC_WITH_INV != 0).then_some(w.imm_data),
        qp_num: Qpn::new(w.qp_num),
        src_qp: Qpn::new(w.src_qp),
        grh: w.wc_flags & IBV_WC_GRH != 0,
        slid: Lid(w.slid),
        sl: w.sl,
        pkey_index: w.pkey_index,
    }
}

/// The rate in Gb/s of `width` lanes (IBV width bits) at `speed` (IBV speed bits), rounded
/// down as softib's PortInfo carries whole Gb/s.
fn rate(width: u8, speed: u8) -> u32 {
    let lanes: f64 = match width {
        1 => 1.0,
        2 => 4.0,
        4 => 8.0,
        8 => 12.0,
        16 => 2.0,
        _ => 0.0,
    };
    let per_lane: f64 = match speed {
        1 => 2.5,
        2 => 5.0,
        4 | 8 => 10.0,
        16 => 14.0,
        32 => 25.0,
        64 => 50.0,
        128 => 100.0,
        _ => 0.0,
    };
    (lanes * per_lane) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_opcodes_keep_libibverbs_numbers() {
        for s in 0..22u32 {
            assert_eq!(wc_status(s) as u32, s);
        }
        assert_eq!(wc_status(999), WcStatus::GeneralErr);
        let mut w = IbvWc {
            wr_id: 7,
            status: 12,
            opcode: 129,
            vendor_err: 0,
            byte_len: 8,
            imm_data: 0x1234_5678u32.to_be(),
            qp_num: 0x11,
            src_qp: 0,
            wc_flags: IBV_WC_WITH_IMM | IBV_WC_GRH,
            pkey_index: 0,
            slid: 3,
            sl: 0,
            dlid_path_bits: 0,
        };
        let wc = wc_from(&w);
        assert_eq!(wc.status, WcStatus::RetryExcErr);
        assert_eq!(wc.opcode, WcOpcode::RecvRdmaWithImm);
        assert_eq!(wc.imm_data, Some(0x1234_5678));
        assert!(wc.grh);
        w.wc_flags = 0;
        assert_eq!(wc_from(&w).imm_data, None);
    }

    #[test]
    fn rates() {
        assert_eq!(rate(2, 4), 40);
        assert_eq!(rate(1, 32), 25);
        assert_eq!(rate(2, 64), 200);
    }

    /// Where libibverbs is absent, loading says so and what to install (no panic).
    #[test]
    fn absent_library_is_named() {
        let Err(m) = load_named("libibverbs-absent-softib-test.so.1") else {
            panic!("a library that does not exist loaded");
        };
        assert!(
            m.contains("libibverbs-absent-softib-test.so.1 not found"),
            "{m}"
        );
        assert!(m.contains("install"), "{m}");
    }

    /// The context-level entry: a clear error (never a panic) where there is no device.
    #[test]
    fn context_open_rdma_core_is_clear() {
        match crate::Context::open_rdma_core() {
            Ok(mut ctx) => {
                assert!(ctx.is_rdma_core());
                // A softib-only request says so.
                let e = ctx.captured(0).expect_err("capture on rdma-core");
                assert!(e
                    .to_string()
                    .contains("not available on an rdma-core device"));
            }
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("not found")
                        || m.contains("no RDMA devices")
                        || m.contains("opened"),
                    "unclear: {m}"
                );
                eprintln!("rdma-core here: {m}");
            }
        }
    }

    /// Wherever this runs — rdma-core absent, present with no device (a build host), or a host
    /// with devices — opening the backend either works or says plainly what is missing.
    #[test]
    fn open_says_what_is_missing() {
        match Backend::open() {
            Ok(mut b) => {
                assert!(!b.devices().unwrap_or_default().is_empty());
            }
            Err(e) => {
                let m = e.to_string();
                assert!(
                    m.contains("libibverbs.so.1 not found")
                        || m.contains("no RDMA devices")
                        || m.contains("could be opened")
                        || m.contains("ibv_get_device_list failed"),
                    "unclear: {m}"
                );
            }
        }
    }
}
