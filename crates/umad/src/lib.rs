//! softib's `libibumad.so.3`: rdma-core's umad C ABI over softib's MAD interface, so that the
//! real infiniband-diags (through the real libibmad and libibnetdisc) and the real opensm
//! (through libosmvendor) manage and inspect a softib fabric unmodified — `softib run` and
//! `softib fabric exec` put this library first on their library path.
//!
//! Where the real library reads `/sys/class/infiniband*` and opens `/dev/infiniband/umadN`,
//! this one reads the host's sysfs-style tree in its runtime directory (`DIR/sys`, kept by the
//! daemon: [`ca`]) and opens a connection to the host's daemon as a MAD agent ([`port`]). What
//! the kernel's umad driver does between the two — agents per class and method mask, TID
//! rewriting, timeouts and retries, RMPP — is [`agents`], a sans-IO machine. The port's
//! "file descriptor" is an epoll descriptor: readable when a MAD waits, so programs may poll
//! it as they poll the kernel's.
//!
//! The symbols, their version nodes (IBUMAD_1.0, 1.1, 1.2) and the soname are rdma-core 44's
//! (`exports.txt`, `build.rs`). Unsafe code is confined to the exported functions' handling of
//! their callers' pointers, each dereference saying why it is valid.
#![allow(unsafe_code)]
#![deny(missing_docs)]
// The exported functions are reached from the entry points build.rs generates, which unit
// tests do not build.
#![cfg_attr(test, allow(dead_code))]

use std::ffi::{c_char, c_int, CStr};

pub mod agents;
mod buffer;
mod ca;
mod port;
mod strings;

pub(crate) use softib_verbs_abi::ffi::{returning_neg_errno as ffi_neg, set_errno};

include!(concat!(env!("OUT_DIR"), "/exports.rs"));

/// A C string argument, or EINVAL.
pub(crate) fn c_str<'a>(p: *const c_char) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: a non-NULL string argument points at a NUL-terminated string that lives for
    // the call (the C contract of every function taking one).
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| libc::EINVAL)
}

/// Reports on stderr, once per distinct message, why softib could not do what a program
/// asked (the tools print only "can't open UMAD port"); `SOFTIB_VERBS_LOG=0` silences it.
pub(crate) fn say(line: String) {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    if std::env::var("SOFTIB_VERBS_LOG").is_ok_and(|m| m == "0") {
        return;
    }
    let first = SEEN
        .lock()
        .map(|mut s| s.insert(line.clone()))
        .unwrap_or(true);
    if first {
        eprintln!("softib: {line}");
    }
}

/// `umad_debug`'s level: above 0, the library says what it does on stderr.
pub(crate) static DEBUG: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Writes a debug line when `umad_debug` asked for them (as libibumad's "ibwarn:" lines).
pub(crate) fn debug(f: impl FnOnce() -> String) {
    if DEBUG.load(std::sync::atomic::Ordering::Relaxed) > 0 {
        eprintln!("ibwarn: [{}] {}", std::process::id(), f());
    }
}
