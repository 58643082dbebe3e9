//! Devices and contexts: `ibv_get_device_list`, `ibv_open_device`, and the queries
//! (device, port, GID, P_Key) — answered from the daemon's live view of the device through
//! [`softib::verbs_attr`], the same values softib's own `ibv_devinfo` prints.

use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, CStr};
use std::path::Path;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

use softib::verbs_attr::{self, GidType};
use softib::DeviceInfo;
use softib_verbs_abi as abi;

use crate::objects::{object, set_c_string, zeroed, Context, Device, Inner};
use crate::{ffi_errno, ffi_neg, ffi_ptr, refused};

/// Every device this process has listed, one per (runtime directory, name). Boxed: programs
/// hold pointers to them, which must not move when the list grows.
#[allow(clippy::vec_box)]
static DEVICES: Mutex<Vec<Box<Device>>> = Mutex::new(Vec::new());

/// The directory a device's sysfs-style files are in (`ibv_device::ibdev_path`): written
/// by the daemon under its runtime directory.
pub(crate) fn ibdev_path(dir: &Path, name: &str) -> std::path::PathBuf {
    dir.join("sys/class/infiniband").join(name)
}

/// Says once per process that no daemon answers, and what to start.
fn no_daemon(e: &softib::Error) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        eprintln!("softib: {e}; this program sees no RDMA devices");
    });
}

/// The device list of the host's daemon, registered as `Device`s.
fn list() -> Result<Vec<*mut abi::IbvDevice>, c_int> {
    let dir = softib::runtime_dir();
    let infos = match softib::Context::open_at(&dir).and_then(|mut c| c.devices()) {
        Ok(d) => d,
        Err(e @ softib::Error::NoDaemon { .. }) => {
            no_daemon(&e);
            return Ok(Vec::new());
        }
        Err(e) => return Err(refused("ibv_get_device_list", &e)),
    };
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    let mut out = Vec::with_capacity(infos.len());
    for (index, info) in infos.iter().enumerate() {
        let at = devices
            .iter()
            .position(|d| d.name == info.name && d.dir == dir);
        let d = match at {
            Some(i) => &mut devices[i],
            None => {
                devices.push(new_device(&dir, index, info));
                let last = devices.len() - 1;
                &mut devices[last]
            }
        };
        d.index.store(index, Ordering::Relaxed);
        d.guid.store(info.node_guid.0, Ordering::Relaxed);
        out.push(d.c.get());
    }
    Ok(out)
}

fn new_device(dir: &Path, index: usize, info: &DeviceInfo) -> Box<Device> {
    // SAFETY: `ibv_device` is integers and char arrays.
    let c = unsafe { zeroed::<abi::IbvDevice>() };
    {
        // SAFETY: a fresh value nobody else sees yet.
        let d = unsafe { &mut *c.get() };
        d.node_type = abi::IBV_NODE_CA;
        d.transport_type = abi::IBV_TRANSPORT_IB;
        set_c_string(&mut d.name, &info.name);
        set_c_string(&mut d.dev_name, &format!("uverbs{index}"));
        let sys = dir
            .join("sys/class/infiniband_verbs")
            .join(format!("uverbs{index}"));
        set_c_string(&mut d.dev_path, &sys.to_string_lossy());
        set_c_string(
            &mut d.ibdev_path,
            &ibdev_path(dir, &info.name).to_string_lossy(),
        );
    }
    Box::new(Device {
        c,
        verbs_device_ops: 0,
        magic: <Device as crate::objects::Object>::MAGIC,
        dir: dir.to_path_buf(),
        name: info.name.clone(),
        index: AtomicUsize::new(index),
        guid: AtomicU64::new(info.node_guid.0),
    })
}

/// `ibv_get_device_list`: the daemon's devices, NULL-terminated; with no daemon reachable an
/// empty list (and one line on stderr saying what to start), as rdma-core gives on a
/// machine without RDMA devices.
pub(crate) extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut abi::IbvDevice {
    if !num.is_null() {
        // SAFETY: the caller passes NULL or a writable int.
        unsafe { *num = 0 };
    }
    ffi_ptr(|| {
        let mut v = list()?;
        let n = v.len() as c_int;
        v.push(std::ptr::null_mut());
        if !num.is_null() {
            // SAFETY: as above.
            unsafe { *num = n };
        }
        Ok(Box::into_raw(v.into_boxed_slice()) as *mut *mut abi::IbvDevice)
    })
}

/// `ibv_free_device_list`.
pub(crate) extern "C" fn ibv_free_device_list(list: *mut *mut abi::IbvDevice) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: `list` came from `ibv_get_device_list`: a boxed slice ending with NULL.
    unsafe {
        while !(*list.add(n)).is_null() {
            n += 1;
        }
        drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
            list,
            n + 1,
        )));
    }
}

/// The device behind a program's `ibv_device` pointer.
fn device<'a>(p: *mut abi::IbvDevice) -> Result<&'a Device, c_int> {
    // SAFETY: devices are never freed; a pointer we did not hand out fails the magic check
    // (as far as reading it is safe at all, which is the caller's side of the ABI).
    unsafe { object::<Device>(p) }
}

/// `ibv_get_device_name`.
pub(crate) extern "C" fn ibv_get_device_name(device: *mut abi::IbvDevice) -> *const c_char {
    ffi_ptr(|| {
        let d = self::device(device)?;
        // SAFETY: a field of a device that lives as long as the process.
        Ok(unsafe { (*d.c.get()).name.as_ptr() } as *mut c_char)
    })
}

/// `ibv_get_device_guid`: the node GUID in network order (0 for a bad pointer).
pub(crate) extern "C" fn ibv_get_device_guid(device: *mut abi::IbvDevice) -> u64 {
    match self::device(device) {
        Ok(d) => d.guid.load(Ordering::Relaxed).to_be(),
        Err(_) => 0,
    }
}

/// `ibv_get_device_index`: the device's index in the daemon's list (-1 for a bad pointer).
pub(crate) extern "C" fn ibv_get_device_index(device: *mut abi::IbvDevice) -> c_int {
    match self::device(device) {
        Ok(d) => d.index.load(Ordering::Relaxed) as c_int,
        Err(_) => -1,
    }
}

/// `ibv_open_device`: a connection of its own to the daemon, as rdma-core opens a uverbs
/// file per context.
pub(crate) extern "C" fn ibv_open_device(device: *mut abi::IbvDevice) -> *mut abi::IbvContext {
    ffi_ptr(|| {
        let d = self::device(device)?;
        let mut ctx = softib::Context::open_at(&d.dir).map_err(|e| {
            if matches!(e, softib::Error::NoDaemon { .. }) {
                no_daemon(&e);
            }
            refused("ibv_open_device", &e)
        })?;
        let infos = ctx.devices().map_err(|e| refused("ibv_open_device", &e))?;
        let dev = infos.iter().position(|i| i.name == d.name).ok_or_else(|| {
            eprintln!(
                "softib: ibv_open_device: the daemon at {} no longer has device {}",
                d.dir.display(),
                d.name
            );
            libc::ENODEV
        })?;
        let events = crate::async_event::AsyncState::new(&mut ctx)?;
        // SAFETY: `verbs_context` is pointers, integers and optional function pointers.
        let c: UnsafeCell<abi::VerbsContext> = unsafe { zeroed() };
        let context = Box::into_raw(Box::new(Context {
            c,
            magic: <Context as crate::objects::Object>::MAGIC,
            device: d,
            dev: dev as u32,
            limits: infos[dev].attr.clone(),
            inner: Mutex::new(Inner {
                ctx,
                cqs: Default::default(),
                qps: Default::default(),
                srqs: Default::default(),
                attached: Default::default(),
            }),
            events,
        }));
        // SAFETY: a fresh allocation nobody else sees yet.
        let ctx = unsafe { &*context };
        // SAFETY: as above.
        let v = unsafe { &mut *ctx.c.get() };
        crate::unsupported::fill_ops(v);
        v.sz = std::mem::size_of::<abi::VerbsContext>();
        v.context.device = device;
        v.context.cmd_fd = -1;
        v.context.async_fd = ctx.events.fd();
        v.context.num_comp_vectors = 1;
        v.context.abi_compat = abi::VERBS_ABI_IS_EXTENDED as *mut std::ffi::c_void;
        Ok(ctx.ibv())
    })
}

/// `ibv_close_device`: closes the connection; the daemon reclaims whatever the context
/// still held.
pub(crate) extern "C" fn ibv_close_device(context: *mut abi::IbvContext) -> c_int {
    ffi_errno(|| {
        // SAFETY: the program passes a context it opened and does not use it again.
        let ctx = unsafe { Context::from_ibv(context)? } as *const Context as *mut Context;
        // SAFETY: `ctx` is our allocation (checked above).
        unsafe {
            crate::objects::free(ctx, |c| c.magic = 0);
        }
        Ok(())
    })
}

/// The device's current view, looked up by name (an index can move when a device is added
/// or removed on the daemon).
pub(crate) fn info(ctx: &Context, inner: &mut Inner) -> Result<DeviceInfo, c_int> {
    let mut infos = inner
        .ctx
        .devices()
        .map_err(|e| refused("ibv_query_device", &e))?;
    // SAFETY: a context's device lives as long as the process.
    let name = unsafe { &(*ctx.device).name };
    let at = if infos.get(ctx.dev as usize).is_some_and(|i| &i.name == name) {
        ctx.dev as usize
    } else {
        infos
            .iter()
            .position(|i| &i.name == name)
            .ok_or(libc::ENODEV)?
    };
    Ok(infos.swap_remove(at))
}

fn fill_device_attr(a: &verbs_attr::IbvDeviceAttr, out: &mut abi::IbvDeviceAttr) {
    set_c_string(&mut out.fw_ver, &a.fw_ver);
    out.node_guid = a.node_guid.to_be();
    out.sys_image_guid = a.sys_image_guid.to_be();
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.max_qp = a.max_qp;
    out.max_qp_wr = a.max_qp_wr;
    out.device_cap_flags = a.device_cap_flags;
    out.max_sge = a.max_sge;
    out.max_sge_rd = a.max_sge_rd;
    out.max_cq = a.max_cq;
    out.max_cqe = a.max_cqe;
    out.max_mr = a.max_mr;
    out.max_pd = a.max_pd;
    out.max_qp_rd_atom = a.max_qp_rd_atom;
    out.max_ee_rd_atom = 0;
    out.max_res_rd_atom = a.max_res_rd_atom;
    out.max_qp_init_rd_atom = a.max_qp_init_rd_atom;
    out.max_ee_init_rd_atom = 0;
    out.atomic_cap = a.atomic_cap;
    out.max_ee = 0;
    out.max_rdd = 0;
    out.max_mw = a.max_mw;
    out.max_raw_ipv6_qp = 0;
    out.max_raw_ethy_qp = 0;
    out.max_mcast_grp = a.max_mcast_grp;
    out.max_mcast_qp_attach = a.max_mcast_qp_attach;
    out.max_total_mcast_qp_attach = a.max_total_mcast_qp_attach;
    out.max_ah = a.max_ah;
    out.max_fmr = 0;
    out.max_map_per_fmr = 0;
    out.max_srq = a.max_srq;
    out.max_srq_wr = a.max_srq_wr;
    out.max_srq_sge = a.max_srq_sge;
    out.max_pkeys = a.max_pkeys;
    out.local_ca_ack_delay = a.local_ca_ack_delay;
    out.phys_port_cnt = a.phys_port_cnt;
}

fn device_attr(context: *mut abi::IbvContext) -> Result<verbs_attr::IbvDeviceAttr, c_int> {
    // SAFETY: the program passes a context it opened.
    let ctx = unsafe { Context::from_ibv(context)? };
    let mut inner = ctx.lock();
    let info = info(ctx, &mut inner)?;
    Ok(verbs_attr::device_attr(&info))
}

/// `ibv_query_device`.
pub(crate) extern "C" fn ibv_query_device(
    context: *mut abi::IbvContext,
    attr: *mut abi::IbvDeviceAttr,
) -> c_int {
    ffi_errno(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = device_attr(context)?;
        // SAFETY: the caller passes a writable `ibv_device_attr`.
        fill_device_attr(&a, unsafe { &mut *attr });
        Ok(())
    })
}

/// `verbs_context.query_device_ex` (what the inline `ibv_query_device_ex` calls, with the
/// caller's `sizeof(struct ibv_device_attr_ex)`): the original attributes, and none of the
/// extended capabilities (ODP, timestamps, TSO, RSS, tag matching, device memory).
pub(crate) unsafe extern "C" fn query_device_ex(
    context: *mut abi::IbvContext,
    input: *const abi::IbvQueryDeviceExInput,
    attr: *mut abi::IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    ffi_errno(|| {
        // SAFETY: the caller passes NULL or a readable input.
        if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
            return Err(libc::EINVAL);
        }
        let orig = std::mem::size_of::<abi::IbvDeviceAttr>();
        if attr.is_null() || attr_size < orig {
            return Err(libc::EINVAL);
        }
        let a = device_attr(context)?;
        // SAFETY: `ibv_device_attr_ex` is integers; the bytes past what we fill stay zero.
        let mut ex: abi::IbvDeviceAttrEx = unsafe { std::mem::zeroed() };
        fill_device_attr(&a, &mut ex.orig_attr);
        ex.device_cap_flags_ex = u64::from(a.device_cap_flags);
        ex.phys_port_cnt_ex = u32::from(a.phys_port_cnt);
        let n = attr_size.min(std::mem::size_of::<abi::IbvDeviceAttrEx>());
        // SAFETY: the caller's struct is `attr_size` bytes; we write the first `n`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                &ex as *const abi::IbvDeviceAttrEx as *const u8,
                attr as *mut u8,
                n,
            )
        };
        Ok(())
    })
}

fn port_attr(context: *mut abi::IbvContext, port: u8) -> Result<abi::IbvPortAttr, c_int> {
    // SAFETY: the program passes a context it opened.
    let ctx = unsafe { Context::from_ibv(context)? };
    let mut inner = ctx.lock();
    let info = info(ctx, &mut inner)?;
    let p = verbs_attr::port_attr(&info, port).ok_or(libc::EINVAL)?;
    Ok(abi::IbvPortAttr {
        state: u32::from(p.state),
        max_mtu: u32::from(u8::from(p.max_mtu)),
        active_mtu: u32::from(u8::from(p.active_mtu)),
        gid_tbl_len: p.gid_tbl_len as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid.0,
        sm_lid: p.sm_lid.0,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: p.init_type_reply,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: if p.link_layer_ib {
            abi::IBV_LINK_LAYER_INFINIBAND
        } else {
            abi::IBV_LINK_LAYER_ETHERNET
        },
        flags: 0,
        port_cap_flags2: p.port_cap_flags2,
    })
}

/// Writes the first `len` bytes of `attr` to `out`.
fn write_port_attr(attr: &abi::IbvPortAttr, out: *mut abi::IbvPortAttr, len: usize) {
    let n = len.min(std::mem::size_of::<abi::IbvPortAttr>());
    // SAFETY: the caller's struct is at least `len` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(
            attr as *const abi::IbvPortAttr as *const u8,
            out as *mut u8,
            n,
        )
    };
}

/// `ibv_query_port@IBVERBS_1.1`: what the inline `ibv_query_port` falls back to, and what
/// old binaries call, with the 48-byte `struct _compat_ibv_port_attr` — so it writes no more.
pub(crate) extern "C" fn ibv_query_port(
    context: *mut abi::IbvContext,
    port_num: u8,
    port_attr: *mut abi::IbvPortAttr,
) -> c_int {
    ffi_errno(|| {
        if port_attr.is_null() {
            return Err(libc::EINVAL);
        }
        let a = self::port_attr(context, port_num)?;
        write_port_attr(&a, port_attr, abi::COMPAT_PORT_ATTR_SIZE);
        Ok(())
    })
}

/// `verbs_context.query_port`: what the inline `ibv_query_port` calls, with the caller's
/// `sizeof(struct ibv_port_attr)`.
pub(crate) unsafe extern "C" fn query_port(
    context: *mut abi::IbvContext,
    port_num: u8,
    port_attr: *mut abi::IbvPortAttr,
    len: usize,
) -> c_int {
    ffi_errno(|| {
        if port_attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's struct is `len` bytes.
        unsafe { std::ptr::write_bytes(port_attr as *mut u8, 0, len) };
        let a = self::port_attr(context, port_num)?;
        write_port_attr(&a, port_attr, len);
        Ok(())
    })
}

/// One GID table entry: `Err(ENODATA)` for an unused one, `Err(EINVAL)` past the table.
fn gid_entry(
    context: *mut abi::IbvContext,
    port_num: u32,
    index: u32,
) -> Result<abi::IbvGidEntry, c_int> {
    // SAFETY: the program passes a context it opened.
    let ctx = unsafe { Context::from_ibv(context)? };
    let mut inner = ctx.lock();
    let info = info(ctx, &mut inner)?;
    let port = u8::try_from(port_num).map_err(|_| libc::EINVAL)?;
    let p = info
        .ports
        .iter()
        .find(|p| p.number == port)
        .ok_or(libc::EINVAL)?;
    let gid = verbs_attr::gid(&info, p, index).ok_or(libc::EINVAL)?;
    if gid.0 == [0; 16] {
        return Err(libc::ENODATA);
    }
    Ok(abi::IbvGidEntry {
        gid: abi::IbvGid { raw: gid.0 },
        gid_index: index,
        port_num,
        gid_type: match (p.link_layer_ib, verbs_attr::gid_type(p)) {
            (true, _) => abi::gid_type::IB,
            (false, GidType::IbRoceV1) => abi::gid_type::ROCE_V1,
            (false, GidType::RoceV2) => abi::gid_type::ROCE_V2,
        },
        ndev_ifindex: 0,
    })
}

/// `ibv_query_gid`: 0 and the GID (zeros for an unused entry), or -1 with errno.
pub(crate) extern "C" fn ibv_query_gid(
    context: *mut abi::IbvContext,
    port_num: u8,
    index: c_int,
    gid: *mut abi::IbvGid,
) -> c_int {
    ffi_neg(|| {
        if gid.is_null() {
            return Err(libc::EINVAL);
        }
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        let raw = match gid_entry(context, u32::from(port_num), index) {
            Ok(e) => e.gid,
            Err(libc::ENODATA) => abi::IbvGid::default(),
            Err(e) => return Err(e),
        };
        // SAFETY: the caller passes a writable GID.
        unsafe { *gid = raw };
        Ok(0)
    })
}

/// `_ibv_query_gid_ex@IBVERBS_1.11` (behind the `ibv_query_gid_ex` macro): 0, or an errno
/// value (ENODATA for an unused entry).
pub(crate) extern "C" fn _ibv_query_gid_ex(
    context: *mut abi::IbvContext,
    port_num: u32,
    gid_index: u32,
    entry: *mut abi::IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ffi_errno(|| {
        if entry.is_null() || flags != 0 || entry_size < std::mem::size_of::<abi::IbvGidEntry>() {
            return Err(libc::EINVAL);
        }
        let e = gid_entry(context, port_num, gid_index)?;
        // SAFETY: the caller's entry is `entry_size` bytes, at least ours.
        unsafe { *entry = e };
        Ok(())
    })
}

/// `_ibv_query_gid_table@IBVERBS_1.11`: every valid GID of every port, or a negative errno.
pub(crate) extern "C" fn _ibv_query_gid_table(
    context: *mut abi::IbvContext,
    entries: *mut abi::IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let r = crate::catch(|| -> Result<isize, c_int> {
        let size = std::mem::size_of::<abi::IbvGidEntry>();
        if (entries.is_null() && max_entries > 0) || flags != 0 || entry_size < size {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program passes a context it opened.
        let ctx = unsafe { Context::from_ibv(context)? };
        let info = {
            let mut inner = ctx.lock();
            info(ctx, &mut inner)?
        };
        let mut n = 0usize;
        for p in &info.ports {
            let len = verbs_attr::port_attr(&info, p.number).map_or(0, |a| a.gid_tbl_len);
            for i in 0..len {
                let Ok(e) = gid_entry(context, u32::from(p.number), i) else {
                    continue;
                };
                if n == max_entries {
                    return Err(libc::EINVAL);
                }
                // SAFETY: `entries` holds `max_entries` entries of `entry_size` bytes.
                unsafe { *((entries as *mut u8).add(n * entry_size) as *mut abi::IbvGidEntry) = e };
                n += 1;
            }
        }
        Ok(n as isize)
    });
    match r {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => -(e as isize),
        Err(_) => -(libc::EIO as isize),
    }
}

/// `ibv_query_gid_type@IBVERBS_PRIVATE_34` (ibv_devinfo prints it per GID): 0 and the
/// sysfs type, or -1.
pub(crate) extern "C" fn ibv_query_gid_type(
    context: *mut abi::IbvContext,
    port_num: u8,
    index: u32,
    gid_type: *mut u32,
) -> c_int {
    ffi_neg(|| {
        if gid_type.is_null() {
            return Err(libc::EINVAL);
        }
        let t = match gid_entry(context, u32::from(port_num), index) {
            Ok(e) if e.gid_type == abi::gid_type::ROCE_V2 => abi::gid_type_sysfs::ROCE_V2,
            Ok(_) | Err(libc::ENODATA) => abi::gid_type_sysfs::IB_ROCE_V1,
            Err(e) => return Err(e),
        };
        // SAFETY: the caller passes a writable enum.
        unsafe { *gid_type = t };
        Ok(0)
    })
}

/// `ibv_query_pkey`: the default P_Key (0xFFFF, full member) at index 0 and empty entries
/// after it, up to the port's `pkey_tbl_len`; -1 with errno past it. The daemon's device
/// view carries no P_Key table, so a P_Key an SM added at another index is not seen here.
pub(crate) extern "C" fn ibv_query_pkey(
    context: *mut abi::IbvContext,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ffi_neg(|| {
        if pkey.is_null() {
            return Err(libc::EINVAL);
        }
        let a = port_attr(context, port_num)?;
        let index = u16::try_from(index).map_err(|_| libc::EINVAL)?;
        if index >= a.pkey_tbl_len {
            return Err(libc::EINVAL);
        }
        let value: u16 = if index == 0 { 0xffff } else { 0 };
        // SAFETY: the caller passes a writable `__be16`.
        unsafe { *pkey = value.to_be() };
        Ok(0)
    })
}

/// `ibv_get_pkey_index`: the index of `pkey` (network order) in the port's table, or -1.
pub(crate) extern "C" fn ibv_get_pkey_index(
    context: *mut abi::IbvContext,
    port_num: u8,
    pkey: u16,
) -> c_int {
    let mut i = 0;
    loop {
        let mut v = 0u16;
        if ibv_query_pkey(context, port_num, i, &mut v) != 0 {
            return -1;
        }
        if v == pkey {
            return i;
        }
        i += 1;
    }
}

/// The C string at `p`, or EINVAL.
pub(crate) fn c_str<'a>(p: *const c_char) -> Result<&'a str, c_int> {
    if p.is_null() {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| libc::EINVAL)
}
