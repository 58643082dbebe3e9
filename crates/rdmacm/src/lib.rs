//! softib's `librdmacm.so.1`: rdma-core's RDMA-CM C ABI over softib, so that programs built
//! against rdma-core's librdmacm (rping, ucmatose, perftest with `-R`, ...) connect on softib
//! unmodified — `softib run -- PROG` puts this library first on their library path, beside
//! softib's libibverbs.so.1.
//!
//! The real librdmacm is a thin client of the kernel's rdma_cm, which resolves addresses and
//! runs the InfiniBand CM. Here the process does both itself:
//!
//! - addresses are resolved against the host's softib devices: a RoCE device's IP address is
//!   its GID (IPv4-mapped), so an IP address names the peer's GID and the route is the GRH
//!   ([`agent`]); on an InfiniBand port (a host of an emulated fabric) the addresses are
//!   IPoIB's, resolved to GIDs by IPoIB ARP, and the route is an SA PathRecord ([`fabric`]);
//! - the CM protocol is `softib-cm`'s machine, speaking REQ/REP/RTU, REJ, DREQ/DREP on QP1
//!   through the daemon's MAD interface (one agent per process, [`agent::Agent`], with a
//!   thread that feeds it MADs and time);
//! - queue pairs are the program's own, made and moved through INIT, RTR and RTS through the
//!   libibverbs.so.1 the program uses ([`ibv`]: its C functions, looked up once with `dlvsym`
//!   — the very objects the program holds, not a second copy of softib's verbs).
//!
//! Every object handed to a program is the C struct it expects (`rdma_cm_id`,
//! `rdma_cm_event`, `rdma_event_channel`, `rdma_addrinfo`; layouts in
//! `softib_verbs_abi::rdma_cm`), with this library's state beside it in [`agent::Agent`].
//!
//! Unsafe code lives here: every pointer comes from a C caller, and every dereference says
//! why it is valid.
#![allow(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(test, allow(dead_code))]

use std::ffi::c_int;

mod addrinfo;
mod agent;
mod cm_event;
mod device;
mod event;
mod fabric;
mod ibv;
mod id;
mod mcast;
mod qp;
mod sync;
mod ud;
mod unsupported;

pub(crate) use softib_verbs_abi::ffi::{
    returning_ptr as ffi_ptr, returning_zero_or_minus_one as ffi, set_errno,
};

include!(concat!(env!("OUT_DIR"), "/exports.rs"));

/// Says on stderr why softib refused an rdma_cm call (rdma-core says nothing, and programs
/// print only "rdma_connect: Invalid argument"); `SOFTIB_VERBS_LOG=0` silences it. Returns
/// `errno`.
pub(crate) fn refused(call: &str, why: &str, errno: c_int) -> c_int {
    if std::env::var("SOFTIB_VERBS_LOG").as_deref() != Ok("0") {
        eprintln!(
            "softib: {call}: {why} ({})",
            std::io::Error::from_raw_os_error(errno)
        );
    }
    errno
}
