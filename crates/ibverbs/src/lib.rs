//! softib's `libibverbs.so.1`: rdma-core's C ABI over the `softib` verbs API, so that programs
//! built against rdma-core (perftest, ibverbs-utils, UCX, libfabric, ...) run on softib
//! unmodified — `softib run -- PROG` puts this library first on their library path.
//!
//! This crate is the thin layer between the two: it holds no transport logic. Each exported
//! function checks its arguments, turns the C structs into `softib` calls on the process's
//! connection to the host's daemon (one [`softib::Context`] per `ibv_context`), and turns the
//! answer back into rdma-core's conventions (a pointer or NULL with `errno`, 0 or an errno
//! value, `-1` with `errno`, each as the real function does). Every object handed to a
//! program is the C struct it expects followed by this crate's own fields
//! ([`objects`]); the function-pointer tables that `verbs.h`'s inline functions call through
//! (`ibv_context_ops`, `verbs_context`, `ibv_cq_ex`, `ibv_qp_ex`) are filled completely, with
//! EOPNOTSUPP answers where softib has no such verb (as rdma-core's own dummies do).
//!
//! The symbols, their version nodes and the soname are rdma-core 44's (`exports.txt`,
//! `build.rs`). The IBVERBS_PRIVATE_34 symbols the real provider libraries import are here as
//! answers that say "not supported" ([`private`]): programs such as perftest, UCX and
//! libfabric link libmlx5.so.1 and libefa.so.1, which then load beside this library and find
//! no device of theirs.
//!
//! Unsafe code lives here and only here (with `softib-net`'s OS plumbing): every pointer
//! comes from a C caller, and every dereference says why it is valid.
#![allow(unsafe_code)]
#![deny(missing_docs)]
// The exported functions are reached from the entry points build.rs generates, which unit
// tests do not build.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::c_int;
use std::panic::AssertUnwindSafe;

pub mod abi {
    //! The C declarations ([`softib_verbs_abi`]).
    pub use softib_verbs_abi::*;
}

mod ah;
mod async_event;
mod cq;
mod device;
mod misc;
mod mr;
mod objects;
mod private;
mod qp;
mod qp_ex;
mod share;
mod srq;
mod sysfs;
mod unsupported;

pub(crate) use softib_verbs_abi::ffi::{
    returning_errno as ffi_errno, returning_minus_one as ffi_neg, returning_ptr as ffi_ptr,
    set_errno,
};

include!(concat!(env!("OUT_DIR"), "/exports.rs"));

/// Runs `f`, turning a panic (a bug) into `Err` instead of unwinding into C.
pub(crate) fn catch<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    std::panic::catch_unwind(AssertUnwindSafe(f))
}

/// The errno value rdma-core would return for what softib answered.
pub(crate) fn errno_of(e: &softib::Error) -> c_int {
    use softib::{Error, ErrorKind};
    match e {
        Error::NoDaemon { .. } => libc::ENODEV,
        // The device went away under the program: rdma-core's disassociated device.
        Error::DaemonGone { .. } => libc::EIO,
        // The device stopped responding: a hung adapter's ETIMEDOUT.
        Error::DaemonUnresponsive { .. } => libc::ETIMEDOUT,
        Error::Refused { kind, .. } => match kind {
            ErrorKind::NotFound | ErrorKind::Invalid | ErrorKind::WrongState => libc::EINVAL,
            ErrorKind::Exhausted => libc::ENOMEM,
            ErrorKind::Busy => libc::EBUSY,
            ErrorKind::Protocol => libc::EPROTO,
            ErrorKind::Permission => libc::EPERM,
        },
        Error::RdmaCore(_) => libc::EOPNOTSUPP,
        Error::Io(io) => io.raw_os_error().unwrap_or(libc::EIO),
        Error::Unexpected(_) => libc::EPROTO,
    }
}

/// Reports on stderr what softib refused and why, once per distinct message (rdma-core says
/// nothing, and programs print only "Failed to modify QP"; the daemon's reason is what tells
/// the user what to change). `SOFTIB_VERBS_LOG=0` silences it, `=all` repeats every one.
/// Returns the errno value to answer with.
pub(crate) fn refused(verb: &str, e: &softib::Error) -> c_int {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let errno = errno_of(e);
    let mode = std::env::var("SOFTIB_VERBS_LOG").unwrap_or_default();
    if mode == "0" {
        return errno;
    }
    let line = format!("softib: {verb}: {e}");
    let first = SEEN
        .lock()
        .map(|mut s| s.insert(line.clone()))
        .unwrap_or(true);
    if first || mode == "all" {
        eprintln!("{line} ({})", std::io::Error::from_raw_os_error(errno));
    }
    errno
}
