//! Shared receive queues: `ibv_create_srq`, `ibv_create_srq_ex` (basic SRQs; XRC and tag
//! matching are not softib's), `ibv_modify_srq` (the limit), `ibv_query_srq`,
//! `ibv_destroy_srq`, `ibv_post_srq_recv` (through `ibv_context_ops`).

use std::ffi::c_int;
use std::sync::Mutex;

use softib::SrqHandle;
use softib_verbs_abi as abi;

use crate::ah::pd;
use crate::objects::{ctx_of, free, object, zeroed, Context, Object, Srq};
use crate::{ffi_errno, ffi_ptr, refused};

fn srq<'a>(p: *mut abi::IbvSrq) -> Result<&'a Srq, c_int> {
    // SAFETY: the program passes an SRQ it created.
    unsafe { object::<Srq>(p) }
}

/// The daemon handle of an SRQ a QP is created with.
pub(crate) fn handle_of(p: *mut abi::IbvSrq, ctx: &Context) -> Result<SrqHandle, c_int> {
    let s = srq(p)?;
    if !std::ptr::eq(s.ctx, ctx) {
        return Err(libc::EINVAL);
    }
    Ok(s.handle)
}

fn create(
    pd_p: *mut abi::IbvPd,
    srq_context: *mut std::ffi::c_void,
    attr: &mut abi::IbvSrqAttr,
    verb: &str,
) -> Result<*mut abi::IbvSrq, c_int> {
    let p = pd(pd_p)?;
    // SAFETY: a PD's context outlives it.
    let ctx = unsafe { ctx_of(p.ctx) };
    let mut inner = ctx.lock();
    let handle = inner
        .ctx
        .create_srq(ctx.dev, p.handle, attr.max_wr, attr.max_sge)
        .map_err(|e| refused(verb, &e))?;
    if attr.srq_limit != 0 {
        if let Err(e) = inner.ctx.modify_srq(ctx.dev, handle, attr.srq_limit) {
            let _ = inner.ctx.destroy_srq(ctx.dev, handle);
            return Err(refused(verb, &e));
        }
    }
    // SAFETY: `ibv_srq` is pointers and integers.
    let c = unsafe { zeroed::<abi::IbvSrq>() };
    let s = Box::into_raw(Box::new(Srq {
        c,
        magic: Srq::MAGIC,
        ctx,
        handle,
        attr: Mutex::new(*attr),
    }));
    inner.srqs.insert(handle.0, s);
    drop(inner);
    // SAFETY: a fresh allocation.
    unsafe {
        let c = &mut *(*s).c.get();
        c.context = ctx.ibv();
        c.srq_context = srq_context;
        c.pd = pd_p;
        c.handle = handle.0;
    }
    Ok(s as *mut abi::IbvSrq)
}

/// `ibv_create_srq`.
pub(crate) extern "C" fn ibv_create_srq(
    pd: *mut abi::IbvPd,
    attr: *mut abi::IbvSrqInitAttr,
) -> *mut abi::IbvSrq {
    ffi_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable, writable init struct.
        let a = unsafe { &mut *attr };
        create(pd, a.srq_context, &mut a.attr, "ibv_create_srq")
    })
}

/// `verbs_context.create_srq_ex` (the inline `ibv_create_srq_ex` with more than a PD).
pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut abi::IbvContext,
    attr: *mut abi::IbvSrqInitAttrEx,
) -> *mut abi::IbvSrq {
    ffi_ptr(|| {
        // SAFETY: the program passes a context it opened.
        let ctx = unsafe { Context::from_ibv(context)? };
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable, writable init struct.
        let a = unsafe { &mut *attr };
        use abi::srq_init_attr_mask as m;
        if a.comp_mask & m::PD == 0 {
            return Err(libc::EINVAL);
        }
        if a.comp_mask & !(m::PD | m::TYPE) != 0 || (a.comp_mask & m::TYPE != 0 && a.srq_type != 0)
        {
            // XRC and tag-matching SRQs are not softib's.
            return Err(libc::EOPNOTSUPP);
        }
        let p = pd(a.pd)?;
        if !std::ptr::eq(p.ctx, ctx) {
            return Err(libc::EINVAL);
        }
        create(a.pd, a.srq_context, &mut a.attr, "ibv_create_srq_ex")
    })
}

/// `ibv_modify_srq`: the limit (`IBV_SRQ_LIMIT`); resizing (`IBV_SRQ_MAX_WR`) is not softib's.
pub(crate) extern "C" fn ibv_modify_srq(
    srq: *mut abi::IbvSrq,
    attr: *mut abi::IbvSrqAttr,
    mask: c_int,
) -> c_int {
    ffi_errno(|| {
        let s = self::srq(srq)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        use abi::srq_attr_mask as m;
        if mask & m::MAX_WR != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        if mask & !m::LIMIT != 0 {
            return Err(libc::EINVAL);
        }
        if mask & m::LIMIT == 0 {
            return Ok(());
        }
        // SAFETY: the caller passes a readable attribute struct.
        let limit = unsafe { (*attr).srq_limit };
        // SAFETY: an SRQ's context outlives it.
        let ctx = unsafe { ctx_of(s.ctx) };
        ctx.lock()
            .ctx
            .modify_srq(ctx.dev, s.handle, limit)
            .map_err(|e| refused("ibv_modify_srq", &e))?;
        s.attr.lock().unwrap_or_else(|e| e.into_inner()).srq_limit = limit;
        Ok(())
    })
}

/// `ibv_query_srq`: the sizes it was created with and its current limit.
pub(crate) extern "C" fn ibv_query_srq(srq: *mut abi::IbvSrq, attr: *mut abi::IbvSrqAttr) -> c_int {
    ffi_errno(|| {
        let s = self::srq(srq)?;
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = *s.attr.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the caller passes a writable attribute struct.
        unsafe { *attr = a };
        Ok(())
    })
}

/// `ibv_destroy_srq`.
pub(crate) extern "C" fn ibv_destroy_srq(srq: *mut abi::IbvSrq) -> c_int {
    ffi_errno(|| {
        let s = self::srq(srq)?;
        // SAFETY: an SRQ's context outlives it.
        let ctx = unsafe { ctx_of(s.ctx) };
        let mut inner = ctx.lock();
        inner
            .ctx
            .destroy_srq(ctx.dev, s.handle)
            .map_err(|e| refused("ibv_destroy_srq", &e))?;
        inner.srqs.remove(&s.handle.0);
        drop(inner);
        // SAFETY: ours; not used again.
        unsafe { free(s as *const Srq as *mut Srq, |s| s.magic = 0) };
        Ok(())
    })
}

/// `ibv_context_ops.post_srq_recv` (the inline `ibv_post_srq_recv`).
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut abi::IbvSrq,
    wr: *mut abi::IbvRecvWr,
    bad_wr: *mut *mut abi::IbvRecvWr,
) -> c_int {
    let r = crate::catch(|| -> Result<(), (c_int, *mut abi::IbvRecvWr)> {
        let s = self::srq(srq).map_err(|e| (e, wr))?;
        // SAFETY: the program's list.
        let list = unsafe { crate::qp::recv_list(wr)? };
        if list.is_empty() {
            return Ok(());
        }
        // SAFETY: an SRQ's context outlives it.
        let ctx = unsafe { ctx_of(s.ctx) };
        let r = ctx.lock().ctx.post_srq_recv(ctx.dev, s.handle, list);
        r.map_err(|e| crate::qp::recv_refused("ibv_post_srq_recv", &e, wr))
    });
    match r {
        Ok(Ok(())) => 0,
        Ok(Err((e, p))) => {
            if !bad_wr.is_null() {
                // SAFETY: the caller passes a writable out-pointer.
                unsafe { *bad_wr = p };
            }
            e
        }
        Err(_) => libc::EIO,
    }
}
