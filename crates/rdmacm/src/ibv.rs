//! The functions of the program's `libibverbs.so.1` this library calls: looked up once, by
//! name and version, in the copy the program has loaded (softib's, under `softib run`), so
//! that the contexts, PDs, CQs and QPs are the program's own objects. Loaded at run time
//! rather than linked so that building softib needs no libibverbs at all.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use softib_verbs_abi::{
    IbvCompChannel, IbvContext, IbvCq, IbvDevice, IbvGid, IbvPd, IbvQp, IbvQpAttr, IbvQpInitAttr,
};

/// `ibv_get_device_list`.
pub type GetDeviceListFn = unsafe extern "C" fn(*mut c_int) -> *mut *mut IbvDevice;
/// `ibv_free_device_list`.
pub type FreeDeviceListFn = unsafe extern "C" fn(*mut *mut IbvDevice);
/// `ibv_get_device_name`.
pub type GetDeviceNameFn = unsafe extern "C" fn(*mut IbvDevice) -> *const c_char;
/// `ibv_open_device`.
pub type OpenDeviceFn = unsafe extern "C" fn(*mut IbvDevice) -> *mut IbvContext;
/// `ibv_alloc_pd`.
pub type AllocPdFn = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvPd;
/// `ibv_create_qp`.
pub type CreateQpFn = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
/// `ibv_modify_qp`.
pub type ModifyQpFn = unsafe extern "C" fn(*mut IbvQp, *mut IbvQpAttr, c_int) -> c_int;
/// `ibv_destroy_qp`.
pub type DestroyQpFn = unsafe extern "C" fn(*mut IbvQp) -> c_int;
/// `ibv_create_comp_channel`.
pub type CreateCompChannelFn = unsafe extern "C" fn(*mut IbvContext) -> *mut IbvCompChannel;
/// `ibv_destroy_comp_channel`.
pub type DestroyCompChannelFn = unsafe extern "C" fn(*mut IbvCompChannel) -> c_int;
/// `ibv_create_cq`.
pub type CreateCqFn = unsafe extern "C" fn(
    *mut IbvContext,
    c_int,
    *mut c_void,
    *mut IbvCompChannel,
    c_int,
) -> *mut IbvCq;
/// `ibv_destroy_cq`.
pub type DestroyCqFn = unsafe extern "C" fn(*mut IbvCq) -> c_int;
/// `ibv_attach_mcast` and `ibv_detach_mcast`.
pub type McastFn = unsafe extern "C" fn(*mut IbvQp, *const IbvGid, u16) -> c_int;

/// The libibverbs functions in use.
#[allow(missing_docs)]
pub struct Ibv {
    pub get_device_list: GetDeviceListFn,
    pub free_device_list: FreeDeviceListFn,
    pub get_device_name: GetDeviceNameFn,
    pub open_device: OpenDeviceFn,
    pub alloc_pd: AllocPdFn,
    pub create_qp: CreateQpFn,
    pub modify_qp: ModifyQpFn,
    pub destroy_qp: DestroyQpFn,
    pub create_comp_channel: CreateCompChannelFn,
    pub destroy_comp_channel: DestroyCompChannelFn,
    pub create_cq: CreateCqFn,
    pub destroy_cq: DestroyCqFn,
    pub attach_mcast: McastFn,
    pub detach_mcast: McastFn,
}

static IBV: OnceLock<Result<Ibv, String>> = OnceLock::new();

/// The functions, or why libibverbs.so.1 could not give them.
pub fn ibv() -> Result<&'static Ibv, c_int> {
    match IBV.get_or_init(load) {
        Ok(i) => Ok(i),
        Err(why) => Err(crate::refused("librdmacm", why, libc::ENOSYS)),
    }
}

fn load() -> Result<Ibv, String> {
    // SAFETY: a constant NUL-terminated name; dlopen of a library the program has loaded
    // already returns it (with its reference count raised: it stays).
    let h = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return Err("cannot load libibverbs.so.1 (run the program with `softib run`)".into());
    }
    let sym = |name: &CStr, version: &CStr| -> Result<*mut c_void, String> {
        // SAFETY: `h` is a live handle; both strings are NUL-terminated constants.
        let p = unsafe { libc::dlvsym(h, name.as_ptr(), version.as_ptr()) };
        if p.is_null() {
            Err(format!(
                "libibverbs.so.1 has no {}@{}",
                name.to_string_lossy(),
                version.to_string_lossy()
            ))
        } else {
            Ok(p)
        }
    };
    macro_rules! f {
        ($name:literal, $ver:literal, $t:ty) => {
            // SAFETY: the symbol is the libibverbs function of that name and version, whose C
            // signature is `$t` (verbs.h).
            unsafe { std::mem::transmute::<*mut c_void, $t>(sym($name, $ver)?) }
        };
    }
    Ok(Ibv {
        get_device_list: f!(c"ibv_get_device_list", c"IBVERBS_1.1", GetDeviceListFn),
        free_device_list: f!(c"ibv_free_device_list", c"IBVERBS_1.1", FreeDeviceListFn),
        get_device_name: f!(c"ibv_get_device_name", c"IBVERBS_1.1", GetDeviceNameFn),
        open_device: f!(c"ibv_open_device", c"IBVERBS_1.1", OpenDeviceFn),
        alloc_pd: f!(c"ibv_alloc_pd", c"IBVERBS_1.1", AllocPdFn),
        create_qp: f!(c"ibv_create_qp", c"IBVERBS_1.1", CreateQpFn),
        modify_qp: f!(c"ibv_modify_qp", c"IBVERBS_1.1", ModifyQpFn),
        destroy_qp: f!(c"ibv_destroy_qp", c"IBVERBS_1.1", DestroyQpFn),
        create_comp_channel: f!(
            c"ibv_create_comp_channel",
            c"IBVERBS_1.0",
            CreateCompChannelFn
        ),
        destroy_comp_channel: f!(
            c"ibv_destroy_comp_channel",
            c"IBVERBS_1.0",
            DestroyCompChannelFn
        ),
        create_cq: f!(c"ibv_create_cq", c"IBVERBS_1.1", CreateCqFn),
        destroy_cq: f!(c"ibv_destroy_cq", c"IBVERBS_1.1", DestroyCqFn),
        attach_mcast: f!(c"ibv_attach_mcast", c"IBVERBS_1.1", McastFn),
        detach_mcast: f!(c"ibv_detach_mcast", c"IBVERBS_1.1", McastFn),
    })
}
