//! The program's verbs contexts on the host's devices, opened through libibverbs on first
//! use and kept open for the life of the process (as the real librdmacm keeps them), and
//! `rdma_get_devices`/`rdma_free_devices`.

use std::ffi::{c_int, CStr};

use softib_verbs_abi::{IbvContext, IbvPd};

use crate::agent::{self, State};
use crate::ibv::ibv;

/// The context of device `dev` (an index into `st.devs`), opened now if it is not yet.
pub fn context(st: &mut State, dev: usize) -> Result<*mut IbvContext, c_int> {
    let d = st.devs.get_mut(dev).ok_or(libc::ENODEV)?;
    if !d.ctx.is_null() {
        return Ok(d.ctx);
    }
    let ibv = ibv()?;
    let mut n: c_int = 0;
    // SAFETY: libibverbs' own list, freed below; `n` receives its length.
    let list = unsafe { (ibv.get_device_list)(&mut n) };
    if list.is_null() {
        return Err(libc::ENODEV);
    }
    let mut found = std::ptr::null_mut();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers.
        let dev_ptr = unsafe { *list.add(i) };
        // SAFETY: a listed device; its name is a NUL-terminated string it owns.
        let name = unsafe { CStr::from_ptr((ibv.get_device_name)(dev_ptr)) };
        if name.to_bytes() == d.name.as_bytes() {
            // SAFETY: opening a listed device.
            found = unsafe { (ibv.open_device)(dev_ptr) };
            break;
        }
    }
    // SAFETY: the list from get_device_list, freed once; opened contexts outlive it.
    unsafe { (ibv.free_device_list)(list) };
    if found.is_null() {
        return Err(crate::refused(
            "rdma_cm",
            &format!("libibverbs.so.1 has no device {} (is it softib's?)", d.name),
            libc::ENODEV,
        ));
    }
    d.ctx = found;
    Ok(found)
}

/// The PD of device `dev` every id on it carries, allocated now if it is not yet.
pub fn pd(st: &mut State, dev: usize) -> Result<*mut IbvPd, c_int> {
    let ctx = context(st, dev)?;
    let d = st.devs.get_mut(dev).ok_or(libc::ENODEV)?;
    if d.pd.is_null() {
        let ibv = ibv()?;
        // SAFETY: the program's open context on the device.
        let pd = unsafe { (ibv.alloc_pd)(ctx) };
        if pd.is_null() {
            return Err(libc::ENOMEM);
        }
        d.pd = pd;
    }
    Ok(d.pd)
}

/// `rdma_get_devices`: a NULL-terminated array of the contexts of every device.
///
/// # Safety
/// `num` is NULL or writable.
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut IbvContext {
    crate::ffi_ptr(|| {
        let ctxs = agent::with(|st| {
            (0..st.devs.len())
                .map(|i| context(st, i))
                .collect::<Result<Vec<_>, _>>()
        })?;
        if !num.is_null() {
            // SAFETY: the caller's pointer, checked non-null.
            unsafe { *num = ctxs.len() as c_int };
        }
        let mut v = ctxs;
        v.push(std::ptr::null_mut());
        Ok(Box::into_raw(v.into_boxed_slice()).cast::<*mut IbvContext>())
    })
}

/// `rdma_free_devices`: frees the array (the contexts stay open).
///
/// # Safety
/// `list` comes from `rdma_get_devices`.
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut IbvContext) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: the array is NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the boxed slice `rdma_get_devices` leaked, of n + 1 entries.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}
