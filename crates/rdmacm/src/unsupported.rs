//! What this librdmacm does not provide, answered as rdma-core answers a call the kernel
//! lacks: -1 (or NULL) with `errno` ENOSYS, said once on stderr.
//!
//! - rsockets (`rsocket`, `rbind`, ... `riomap`): the socket API over RDMA that rdma-core
//!   builds into librdmacm. Not built here. `rpoll` and `rselect` are the exception: a
//!   program (rping, ucmatose) may call them on ordinary descriptors, where rsockets pass
//!   them to `poll`/`select`, and so does this library.
//! - SRQs made through the CM (`rdma_create_srq*`): the program can make them with
//!   `ibv_create_srq` and pass them in `ibv_qp_init_attr`.
//! - ECE (`rdma_get_remote_ece`, `rdma_reject_ece`, `rdma_set_local_ece`): enhanced connection
//!   establishment, a vendor extension the CM messages here do not carry.

use std::ffi::c_int;

fn enosys(call: &str, why: &str) -> c_int {
    use std::collections::BTreeSet;
    use std::sync::Mutex;
    static SEEN: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());
    let first = SEEN
        .lock()
        .map(|mut s| s.insert(call.to_string()))
        .unwrap_or(true);
    if first {
        crate::refused(call, why, libc::ENOSYS);
    }
    crate::set_errno(libc::ENOSYS);
    -1
}

macro_rules! not_built {
    ($why:literal: $($name:ident),* $(,)?) => {
        $(
            /// Not provided (see the module documentation): -1, ENOSYS.
            pub extern "C" fn $name() -> isize {
                enosys(stringify!($name), $why) as isize
            }
        )*
    };
}

not_built!("softib's librdmacm has no rsockets": rsocket, rbind, rlisten, raccept, rconnect,
    rshutdown, rclose, rrecv, rrecvfrom, rrecvmsg, rsend, rsendto, rsendmsg, rread, rreadv,
    rwrite, rwritev, rgetpeername, rgetsockname, rsetsockopt, rgetsockopt, rfcntl, riomap,
    riounmap, riowrite);
not_built!("make the SRQ with ibv_create_srq and pass it in the QP's init attributes":
    rdma_create_srq, rdma_create_srq_ex, rdma_destroy_srq);
not_built!("ECE is not carried by softib's CM": rdma_get_remote_ece, rdma_reject_ece,
    rdma_set_local_ece);

/// `rpoll`: on ordinary descriptors (there are no rsockets here) it is `poll`.
///
/// # Safety
/// As `poll(2)`: `fds` points to `nfds` pollfds.
pub unsafe extern "C" fn rpoll(
    fds: *mut libc::pollfd,
    nfds: libc::nfds_t,
    timeout: c_int,
) -> c_int {
    // SAFETY: the caller's contract is poll's.
    unsafe { libc::poll(fds, nfds, timeout) }
}

/// `rselect`: on ordinary descriptors it is `select`.
///
/// # Safety
/// As `select(2)`.
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's contract is select's.
    unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) }
}
