//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr`,
//! `ibv_reg_mr_iova`, `ibv_reg_mr_iova2`, `ibv_dereg_mr`, `ibv_rereg_mr`,
//! `ibv_reg_dmabuf_mr`.
//!
//! A region is the program's own memory: where it is safe, its pages are moved onto a
//! memory file the daemon maps ([`crate::share`]); otherwise the daemon reaches it by
//! cross-memory attach ([`softib::Context::reg_mr_process`]).

use std::ffi::{c_int, c_uint, c_void};
use std::os::fd::AsFd;

use softib::AccessFlags;
use softib_verbs_abi as abi;

use crate::ah::pd;
use crate::objects::{ctx_of, free, object, zeroed, Context, Mr, Object, Pd};
use crate::{ffi_errno, ffi_ptr, refused};

/// `ibv_alloc_pd`.
pub(crate) extern "C" fn ibv_alloc_pd(context: *mut abi::IbvContext) -> *mut abi::IbvPd {
    ffi_ptr(|| {
        // SAFETY: the program passes a context it opened.
        let ctx = unsafe { Context::from_ibv(context)? };
        let handle = ctx
            .lock()
            .ctx
            .alloc_pd(ctx.dev)
            .map_err(|e| refused("ibv_alloc_pd", &e))?;
        // SAFETY: `ibv_pd` is a pointer and an int.
        let c = unsafe { zeroed::<abi::IbvPd>() };
        let p = Box::into_raw(Box::new(Pd {
            c,
            magic: Pd::MAGIC,
            ctx,
            handle,
        }));
        // SAFETY: a fresh allocation.
        unsafe {
            (*(*p).c.get()).context = context;
            (*(*p).c.get()).handle = handle.0;
        }
        Ok(p as *mut abi::IbvPd)
    })
}

/// `ibv_dealloc_pd`: EBUSY while objects use it, as the kernel answers.
pub(crate) extern "C" fn ibv_dealloc_pd(pd: *mut abi::IbvPd) -> c_int {
    ffi_errno(|| {
        let p = self::pd(pd)?;
        // SAFETY: a PD's context outlives it.
        let ctx = unsafe { ctx_of(p.ctx) };
        ctx.lock()
            .ctx
            .dealloc_pd(ctx.dev, p.handle)
            .map_err(|e| refused("ibv_dealloc_pd", &e))?;
        // SAFETY: ours; not used again.
        unsafe { free(p as *const Pd as *mut Pd, |p| p.magic = 0) };
        Ok(())
    })
}

/// softib's access flags for `ibv_access_flags`: the optional bits (relaxed ordering, ...)
/// are hints a device without them ignores, as rdma-core drops them, and so is the huge-page
/// hint; on-demand paging softib does not have.
fn access(flags: c_uint) -> Result<AccessFlags, c_int> {
    let flags = flags & !abi::access::OPTIONAL_RANGE;
    if flags & abi::access::ON_DEMAND != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    if flags & !(abi::access::BASIC | abi::access::HUGETLB) != 0 {
        return Err(libc::EINVAL);
    }
    Ok(AccessFlags(flags & abi::access::BASIC))
}

fn reg(
    pd: *mut abi::IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    flags: c_uint,
    verb: &str,
) -> Result<*mut abi::IbvMr, c_int> {
    let p = self::pd(pd)?;
    let access = access(flags)?;
    if flags & abi::access::ZERO_BASED != 0 || iova != addr as u64 {
        // The engine addresses a region by the program's own virtual addresses.
        return Err(libc::EOPNOTSUPP);
    }
    if addr.is_null() && length > 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: a PD's context outlives it.
    let ctx = unsafe { ctx_of(p.ctx) };
    let place = crate::share::segment(addr as usize, length);
    let mut inner = ctx.lock();
    let shared = place.and_then(|s| match inner.attached.get(&s.ino) {
        Some(&id) => Some(id),
        // An older daemon, or its limit of buffers: cross-memory attach instead.
        None => {
            let id = inner
                .ctx
                .attach_shared(s.fd.as_fd(), s.start as u64, s.len)
                .ok()?;
            inner.attached.insert(s.ino, id);
            Some(id)
        }
    });
    let keys = match shared {
        Some(id) => inner
            .ctx
            .reg_mr_shared(ctx.dev, p.handle, id, addr as u64, length, access),
        None => inner
            .ctx
            .reg_mr_process(ctx.dev, p.handle, addr as u64, length, access),
    }
    .map_err(|e| refused(verb, &e))?;
    drop(inner);
    // SAFETY: `ibv_mr` is pointers and integers.
    let c = unsafe { zeroed::<abi::IbvMr>() };
    let mr = Box::into_raw(Box::new(Mr {
        c,
        magic: Mr::MAGIC,
        ctx,
        keys,
    }));
    // SAFETY: a fresh allocation.
    unsafe {
        let c = &mut *(*mr).c.get();
        c.context = ctx.ibv();
        c.pd = pd;
        c.addr = addr;
        c.length = length;
        c.handle = keys.lkey;
        c.lkey = keys.lkey;
        c.rkey = keys.rkey;
    }
    Ok(mr as *mut abi::IbvMr)
}

/// `ibv_reg_mr@IBVERBS_1.1` (what the `ibv_reg_mr` macro calls with constant flags).
pub(crate) extern "C" fn ibv_reg_mr(
    pd: *mut abi::IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut abi::IbvMr {
    ffi_ptr(|| {
        reg(
            pd,
            addr,
            length,
            addr as u64,
            access as c_uint,
            "ibv_reg_mr",
        )
    })
}

/// `ibv_reg_mr_iova`.
pub(crate) extern "C" fn ibv_reg_mr_iova(
    pd: *mut abi::IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut abi::IbvMr {
    ffi_ptr(|| reg(pd, addr, length, iova, access as c_uint, "ibv_reg_mr_iova"))
}

/// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls with run-time flags).
pub(crate) extern "C" fn ibv_reg_mr_iova2(
    pd: *mut abi::IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut abi::IbvMr {
    ffi_ptr(|| reg(pd, addr, length, iova, access, "ibv_reg_mr_iova2"))
}

/// `ibv_reg_dmabuf_mr`: softib reaches memory through the program's address space, not a
/// dma-buf (EOPNOTSUPP, as rxe's provider answers).
pub(crate) extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut abi::IbvPd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut abi::IbvMr {
    crate::set_errno(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// The MR behind a program's `ibv_mr`.
fn mr<'a>(p: *mut abi::IbvMr) -> Result<&'a Mr, c_int> {
    // SAFETY: the program passes an MR it registered.
    unsafe { object::<Mr>(p) }
}

/// `ibv_dereg_mr`.
pub(crate) extern "C" fn ibv_dereg_mr(mr: *mut abi::IbvMr) -> c_int {
    ffi_errno(|| {
        let m = self::mr(mr)?;
        // SAFETY: an MR's context outlives it.
        let ctx = unsafe { ctx_of(m.ctx) };
        ctx.lock()
            .ctx
            .dereg_mr(ctx.dev, &m.keys)
            .map_err(|e| refused("ibv_dereg_mr", &e))?;
        // SAFETY: ours; not used again.
        unsafe { free(m as *const Mr as *mut Mr, |m| m.magic = 0) };
        Ok(())
    })
}

/// `ibv_rereg_mr`: changing a region in place is not a softib verb; programs deregister and
/// register again. Returns `IBV_REREG_MR_ERR_INPUT`'s errno convention: EOPNOTSUPP.
pub(crate) extern "C" fn ibv_rereg_mr(
    mr: *mut abi::IbvMr,
    _flags: c_int,
    _pd: *mut abi::IbvPd,
    _addr: *mut c_void,
    _length: usize,
    _access: c_int,
) -> c_int {
    match self::mr(mr) {
        Ok(_) => {
            crate::set_errno(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
        Err(e) => e,
    }
}
