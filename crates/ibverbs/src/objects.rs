//! The objects handed to C programs: each is the C struct a program expects (`struct ibv_qp`,
//! ...) as its first field, followed by this library's own fields, so that the pointer a
//! program holds is the pointer to the whole object.
//!
//! The C part sits in an `UnsafeCell`: programs write some of its fields (`ibv_qp_ex.wr_id`,
//! `ibv_cq.comp_events_completed` through us, ...) while we hold references to the rest, and
//! it is only ever reached through raw pointers. Each object carries a magic number, checked
//! on every entry, so that a pointer of the wrong kind (or of another library) is refused
//! with EINVAL rather than followed.

use std::cell::UnsafeCell;
use std::collections::BTreeMap;
use std::ffi::c_int;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, AtomicUsize};
use std::sync::{Condvar, Mutex, MutexGuard};

use softib::{AhHandle, CqHandle, MrKeys, PdHandle, QpType, Qpn, SrqHandle};
use softib_verbs_abi as abi;

/// An object whose C part a program holds a pointer to.
pub(crate) trait Object {
    /// The C struct programs see.
    type C;
    /// What `magic` holds in a live object of this kind.
    const MAGIC: u64;
    /// The object's magic field.
    fn magic(&self) -> u64;
}

/// The object behind a C pointer this library handed out: EINVAL for NULL or for a pointer
/// that is not one of ours of this kind.
///
/// # Safety
/// `p` must be NULL or point to readable memory at least as large as `T` (a pointer this
/// library returned, and that was not destroyed). The C struct is `T`'s first field.
pub(crate) unsafe fn object<'a, T: Object>(p: *mut T::C) -> Result<&'a T, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller promises `p` is one of our objects of kind `T`, whose first field is
    // the C struct (`#[repr(C)]`), so the object starts where the C struct does.
    let o = unsafe { &*(p as *const T) };
    if o.magic() != T::MAGIC {
        return Err(libc::EINVAL);
    }
    Ok(o)
}

/// Zero-initialised C struct storage.
///
/// # Safety
/// `T` must be a C struct of integers, raw pointers, arrays and optional function pointers,
/// for which all-zero bytes are a valid value (NULL, `None`, 0).
pub(crate) unsafe fn zeroed<T>() -> UnsafeCell<T> {
    // SAFETY: see the function's contract.
    UnsafeCell::new(unsafe { std::mem::zeroed() })
}

macro_rules! object {
    ($t:ident, $c:ty, $magic:expr) => {
        impl Object for $t {
            type C = $c;
            const MAGIC: u64 = $magic;
            fn magic(&self) -> u64 {
                self.magic
            }
        }
    };
}

/// A device of the host's daemon, as `ibv_get_device_list` lists it. Never freed: the list
/// keeps one per name for the life of the process, as rdma-core keeps its devices.
#[repr(C)]
pub(crate) struct Device {
    pub c: UnsafeCell<abi::IbvDevice>,
    /// `struct verbs_device::ops`, which the real libmlx5/libefa (loaded beside us as
    /// DT_NEEDED of perftest, UCX and libfabric) compare with their own to recognise their
    /// devices: NULL, never theirs.
    pub verbs_device_ops: usize,
    pub magic: u64,
    /// The daemon's runtime directory.
    pub dir: PathBuf,
    /// The device's name.
    pub name: String,
    /// Its index in the daemon's list when last listed.
    pub index: AtomicUsize,
    /// Its node GUID when last listed (host order).
    pub guid: std::sync::atomic::AtomicU64,
}
object!(Device, abi::IbvDevice, 0x736f_6669_6264_6576);

const _: () = assert!(std::mem::offset_of!(Device, verbs_device_ops) == 664);

/// An open device (`struct verbs_context`, whose last field is the `ibv_context` programs
/// hold).
#[repr(C)]
pub(crate) struct Context {
    pub c: UnsafeCell<abi::VerbsContext>,
    pub magic: u64,
    pub device: *const Device,
    /// The device's index in the daemon's list.
    pub dev: u32,
    /// The device's limits, which do not change while it exists.
    pub limits: softib::DeviceAttr,
    pub inner: Mutex<Inner>,
    pub events: crate::async_event::AsyncState,
}
object!(Context, abi::VerbsContext, 0x736f_6669_6263_7478);

/// What the verbs of one context share, behind its lock: the daemon connection (one
/// request at a time) and the maps that turn the daemon's handles back into the objects
/// programs hold (for asynchronous events and `ibv_query_qp`).
pub(crate) struct Inner {
    pub ctx: softib::Context,
    pub cqs: BTreeMap<u32, *mut Cq>,
    pub qps: BTreeMap<u32, *mut Qp>,
    pub srqs: BTreeMap<u32, *mut Srq>,
    /// The daemon's handles of the shared segments ([`crate::share`]) this context has
    /// attached, by the segment's memory-file inode.
    pub attached: BTreeMap<u64, u64>,
}

impl Context {
    /// The context behind a program's `ibv_context`.
    ///
    /// # Safety
    /// `p` is NULL or an `ibv_context` this library returned from `ibv_open_device` and
    /// that was not closed.
    pub unsafe fn from_ibv<'a>(p: *mut abi::IbvContext) -> Result<&'a Context, c_int> {
        if p.is_null() {
            return Err(libc::EINVAL);
        }
        let offset = std::mem::offset_of!(abi::VerbsContext, context);
        // SAFETY: the `ibv_context` is the last field of the `verbs_context`, the first field
        // of `Context` (the caller promises `p` is ours).
        unsafe { object::<Context>((p as *mut u8).sub(offset) as *mut abi::VerbsContext) }
    }

    /// The `ibv_context` programs hold.
    pub fn ibv(&self) -> *mut abi::IbvContext {
        // SAFETY: a field projection of our own allocation.
        unsafe { std::ptr::addr_of_mut!((*self.c.get()).context) }
    }

    /// Locks the verbs of this context. A poisoned lock (a panic in a verb, a bug) is taken
    /// over: the state it protects is the daemon connection, which stays usable.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `struct ibv_pd`.
#[repr(C)]
pub(crate) struct Pd {
    pub c: UnsafeCell<abi::IbvPd>,
    pub magic: u64,
    pub ctx: *const Context,
    pub handle: PdHandle,
}
object!(Pd, abi::IbvPd, 0x736f_6669_6270_6400);

/// `struct ibv_mr`.
#[repr(C)]
pub(crate) struct Mr {
    pub c: UnsafeCell<abi::IbvMr>,
    pub magic: u64,
    pub ctx: *const Context,
    pub keys: MrKeys,
}
object!(Mr, abi::IbvMr, 0x736f_6669_626d_7200);

/// `struct ibv_comp_channel`. Its `fd` is an epoll instance holding the eventfd of every CQ
/// that uses the channel, so that it is readable when any of them fired and
/// `ibv_get_cq_event` learns which.
#[repr(C)]
pub(crate) struct Channel {
    pub c: UnsafeCell<abi::IbvCompChannel>,
    pub magic: u64,
    pub epoll: OwnedFd,
    /// CQs using it (`ibv_comp_channel::refcnt` mirrors it).
    pub refs: AtomicI32,
}
object!(Channel, abi::IbvCompChannel, 0x736f_6669_6263_6368);

/// `struct ibv_cq` / `struct ibv_cq_ex` (every CQ has the extended table: a legacy CQ may be
/// polled either way).
#[repr(C)]
pub(crate) struct Cq {
    pub c: UnsafeCell<abi::IbvCqEx>,
    pub magic: u64,
    pub ctx: *const Context,
    pub handle: CqHandle,
    /// The channel the CQ was created with, and the daemon's completion channel that stands
    /// for this CQ in it.
    pub channel: *const Channel,
    pub notify: Option<softib::CompChannel>,
    /// Extended polling: completions taken from the daemon but not yet consumed, and the
    /// current one (between `start_poll` and `end_poll`).
    pub poll: Mutex<crate::cq::PollState>,
    /// Events delivered through the channel, for `ibv_ack_cq_events`.
    pub events: Mutex<u32>,
}
object!(Cq, abi::IbvCqEx, 0x736f_6669_6263_7100);

/// `struct ibv_srq`.
#[repr(C)]
pub(crate) struct Srq {
    pub c: UnsafeCell<abi::IbvSrq>,
    pub magic: u64,
    pub ctx: *const Context,
    pub handle: SrqHandle,
    pub attr: Mutex<abi::IbvSrqAttr>,
}
object!(Srq, abi::IbvSrq, 0x736f_6669_6273_7271);

/// `struct ibv_qp` / `struct ibv_qp_ex`.
#[repr(C)]
pub(crate) struct Qp {
    pub c: UnsafeCell<abi::IbvQpEx>,
    pub magic: u64,
    pub ctx: *const Context,
    pub qpn: Qpn,
    pub qp_type: QpType,
    /// Whether the program asked for `ibv_qp_ex` (`IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`), and
    /// for which operations.
    pub send_ops: Option<u64>,
    /// The `ibv_wr_*` batch being built, and the wait for it (see [`crate::qp_ex`]).
    pub batch: Mutex<crate::qp_ex::Batch>,
    pub batch_done: Condvar,
}
object!(Qp, abi::IbvQpEx, 0x736f_6669_6271_7000);

/// `struct ibv_ah`.
#[repr(C)]
pub(crate) struct Ah {
    pub c: UnsafeCell<abi::IbvAh>,
    pub magic: u64,
    pub handle: AhHandle,
}
object!(Ah, abi::IbvAh, 0x736f_6669_6261_6800);

/// Frees an object made with `Box::into_raw`, clearing its magic first so that a program
/// that passes the pointer again is refused while the memory is not reused.
///
/// # Safety
/// `p` came from `Box::into_raw` of a `T` and is not used again by this library.
pub(crate) unsafe fn free<T>(p: *mut T, magic: impl FnOnce(&mut T)) {
    // SAFETY: the caller promises `p` is a live `Box<T>` we own.
    let mut b = unsafe { Box::from_raw(p) };
    magic(&mut b);
    drop(b);
}

/// The context an object belongs to.
///
/// # Safety
/// `ctx` is the `Context` pointer stored in a live object of this library (contexts outlive
/// their objects: a program closes a device after destroying what it made on it).
pub(crate) unsafe fn ctx_of<'a>(ctx: *const Context) -> &'a Context {
    // SAFETY: see the function's contract.
    unsafe { &*ctx }
}

/// Copies a Rust string into a fixed C char array, truncated and NUL-terminated.
pub(crate) fn set_c_string(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as std::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}
