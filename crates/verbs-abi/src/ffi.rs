//! rdma-core's return conventions, for the exported functions of the three drop-in libraries:
//! each runs its body under `catch_unwind` (a panic is a bug, and must not unwind into C: it
//! becomes EIO) and turns `Err(errno)` into what the real function returns.

use std::ffi::c_int;
use std::panic::AssertUnwindSafe;

/// Sets the calling thread's `errno`.
#[allow(unsafe_code)]
pub fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = e }
}

/// `f`, with a panic as EIO.
fn guarded<T>(f: impl FnOnce() -> Result<T, c_int>) -> Result<T, c_int> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(libc::EIO))
}

/// 0, or a positive errno value (`ibv_modify_qp`, `ibv_dereg_mr`, ...).
pub fn returning_errno(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    match guarded(f) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A pointer, or NULL with `errno` (`ibv_create_qp`, `rdma_create_event_channel`, ...).
pub fn returning_ptr<T>(f: impl FnOnce() -> Result<*mut T, c_int>) -> *mut T {
    guarded(f).unwrap_or_else(|e| {
        set_errno(e);
        std::ptr::null_mut()
    })
}

/// A count or 0, or -1 with `errno` (`ibv_get_cq_event`, `ibv_query_gid`, ...).
pub fn returning_minus_one(f: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    guarded(f).unwrap_or_else(|e| {
        set_errno(e);
        -1
    })
}

/// 0, or -1 with `errno` (rdma_cm's convention for almost every call).
pub fn returning_zero_or_minus_one(f: impl FnOnce() -> Result<(), c_int>) -> c_int {
    returning_minus_one(|| f().map(|()| 0))
}

/// A count, an id or 0, or a negative errno value with `errno` set too (libibumad's
/// convention).
pub fn returning_neg_errno(f: impl FnOnce() -> Result<c_int, c_int>) -> c_int {
    guarded(f).unwrap_or_else(|e| {
        set_errno(e);
        -e
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errno() -> c_int {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn each_convention_returns_what_rdma_core_does_and_a_panic_is_eio() {
        assert_eq!(returning_errno(|| Ok(())), 0);
        assert_eq!(returning_errno(|| Err(libc::EINVAL)), libc::EINVAL);
        assert_eq!(returning_errno(|| panic!("bug")), libc::EIO);
        assert!(returning_ptr::<u8>(|| Err(libc::ENOMEM)).is_null());
        assert_eq!(errno(), libc::ENOMEM);
        assert_eq!(returning_minus_one(|| Ok(3)), 3);
        assert_eq!(returning_minus_one(|| Err(libc::EAGAIN)), -1);
        assert_eq!(errno(), libc::EAGAIN);
        assert_eq!(returning_zero_or_minus_one(|| Err(libc::ENODEV)), -1);
        assert_eq!(errno(), libc::ENODEV);
        assert_eq!(
            returning_neg_errno(|| Err(libc::ETIMEDOUT)),
            -libc::ETIMEDOUT
        );
        assert_eq!(errno(), libc::ETIMEDOUT);
        assert_eq!(returning_neg_errno(|| panic!("bug")), -libc::EIO);
    }
}
