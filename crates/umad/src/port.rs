//! An open umad port: `umad_open_port` connects to the host's daemon as a MAD agent on one
//! port, and the descriptor it returns stands for that connection as `/dev/infiniband/umadN`
//! does for the kernel's. It is an epoll descriptor over three of ours — an eventfd the daemon
//! signals when it queues a MAD for us (`AttachMadWakeup`), a timerfd at the next send's
//! timeout, and an eventfd that is readable while a MAD waits for the program — so a program
//! may poll it, and `umad_recv` sleeps on it. Taking MADs from the daemon never waits there,
//! so other threads keep sending while one sleeps in `umad_recv` (opensm's receiver thread).
//! What the kernel does between the wire and the program is [`crate::agents`].

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_long, c_void};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{epoll, eventfd, EventfdFlags};
use rustix::time::{
    timerfd_create, timerfd_settime, Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags,
    Timespec,
};
use softib::{Context, Lid, MadQp, Qpn};
use softib_verbs_abi::umad::{IbUserMad, UmadRegAttr, UMAD_USER_RMPP};
use softib_wire::mad::MAD_LEN;

use crate::agents::{
    is_smi_class, is_vendor_oui_class, Agents, Delivered, Outgoing, Registration, Send,
};
use crate::{c_str, ca, debug, ffi_neg, say};

/// MADs taken from the daemon per request.
const BATCH: u32 = 64;
/// The OpenIB OUI `umad_register` gives non-vendor agents (rdma-core's IB_OPENIB_OUI).
const OPENIB_OUI: [u8; 3] = [0x00, 0x14, 0x05];
/// The Q_Key of QP1 (IBA §10.2.5), reported as received MADs' Q_Key.
const GSI_QKEY: u32 = 0x8001_0000;

struct Inner {
    ctx: Context,
    agents: Agents,
    /// Whether this connection is the SM of its port (receives SMP and SA requests).
    sm: bool,
    /// Whether `ready` is signalled.
    ready_set: bool,
}

/// One open port.
struct Port {
    dev: u32,
    port: u8,
    epoll: OwnedFd,
    wake: OwnedFd,
    timer: OwnedFd,
    ready: OwnedFd,
    inner: Mutex<Inner>,
}

/// The open ports, by descriptor.
static PORTS: Mutex<BTreeMap<RawFd, Arc<Port>>> = Mutex::new(BTreeMap::new());
/// Ports opened by this process so far: part of each agent's TID upper half.
static OPENED: AtomicU32 = AtomicU32::new(0);

fn port_of(fd: c_int) -> Result<Arc<Port>, c_int> {
    PORTS
        .lock()
        .map_err(|_| libc::EIO)?
        .get(&fd)
        .cloned()
        .ok_or(libc::EBADF)
}

impl Port {
    fn lock(&self) -> Result<MutexGuard<'_, Inner>, c_int> {
        self.inner.lock().map_err(|_| libc::EIO)
    }

    /// Puts `s` on the wire.
    fn transmit(&self, ctx: &mut Context, s: &Send) -> Result<(), softib::Error> {
        for mad in &s.mads {
            if s.smi {
                let dlid = (!s.directed).then_some(Lid(s.dlid));
                ctx.send_smp(self.dev, self.port, dlid, mad)?;
            } else {
                ctx.send_gmp(self.dev, self.port, Lid(s.dlid), Qpn::new(s.dest_qpn), mad)?;
            }
        }
        Ok(())
    }

    /// Takes what the daemon queued for us, sends what timed out again, and makes the
    /// descriptors say what is true now.
    fn pump(&self, inner: &mut Inner) -> Result<(), c_int> {
        let mut counter = [0u8; 8];
        let _ = rustix::io::read(&self.wake, &mut counter);
        let _ = rustix::io::read(&self.timer, &mut counter);
        loop {
            let mads = inner
                .ctx
                .recv_mads(BATCH, Duration::ZERO)
                .map_err(|e| lost(&e))?;
            let n = mads.len();
            for m in mads {
                if m.dev != self.dev || m.port != self.port {
                    continue;
                }
                inner
                    .agents
                    .receive(&m.mad, m.qp == MadQp::Gsi, m.slid.0, m.src_qpn.value());
            }
            if n < BATCH as usize {
                break;
            }
        }
        self.arm(inner)
    }

    /// Sends what timed out again and makes the descriptors say what is true now, without
    /// asking the daemon for MADs (after a send: its answer is not there yet, and a round
    /// trip to a daemon running a large fabric is not free; its wakeup tells when it is).
    fn arm(&self, inner: &mut Inner) -> Result<(), c_int> {
        let mut counter = [0u8; 8];
        let now = Instant::now();
        for s in inner.agents.expire(now) {
            self.transmit(&mut inner.ctx, &s).map_err(|e| lost(&e))?;
        }
        let next = inner
            .agents
            .next_deadline()
            .map(|d| d.saturating_duration_since(now));
        let spec = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: match next {
                // A deadline already passed still arms the timer (zero would disarm it).
                Some(d) => Timespec {
                    tv_sec: d.as_secs() as i64,
                    tv_nsec: i64::from(d.subsec_nanos().max(1)),
                },
                None => Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                },
            },
        };
        let _ = timerfd_settime(&self.timer, TimerfdTimerFlags::empty(), &spec);
        let queued = inner.agents.has_queued();
        if queued && !inner.ready_set {
            let _ = rustix::io::write(&self.ready, &1u64.to_ne_bytes());
        } else if !queued && inner.ready_set {
            let _ = rustix::io::read(&self.ready, &mut counter);
        }
        inner.ready_set = queued;
        Ok(())
    }
}

/// The daemon went away or refused: says why (once) and gives the errno value.
fn lost(e: &softib::Error) -> c_int {
    say(format!("umad: {e}"));
    match e {
        softib::Error::NoDaemon { .. } => libc::ENODEV,
        _ => libc::EIO,
    }
}

fn open(ca_name: Option<&str>, portnum: c_int) -> Result<c_int, c_int> {
    let mut port = u8::try_from(portnum).map_err(|_| libc::EINVAL)?;
    let name = ca::resolve(ca_name, Some(&mut port))?;
    if port == 0 {
        // A switch's port 0: softib runs its diagnostics on hosts.
        return Err(libc::EINVAL);
    }
    let dir = softib::runtime_dir();
    let mut ctx = Context::open_at(&dir).map_err(|e| lost(&e))?;
    let devices = ctx.devices().map_err(|e| lost(&e))?;
    let dev = devices
        .iter()
        .position(|d| d.name == name)
        .ok_or(libc::ENODEV)? as u32;
    ctx.open_mad(dev, port, false).map_err(|e| lost(&e))?;
    let err = |e: rustix::io::Errno| e.raw_os_error();
    let wake = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(err)?;
    ctx.attach_mad_wakeup(wake.as_fd()).map_err(|e| lost(&e))?;
    let ready = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).map_err(err)?;
    let timer = timerfd_create(
        TimerfdClockId::Monotonic,
        TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK,
    )
    .map_err(err)?;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(err)?;
    for fd in [&wake, &ready, &timer] {
        epoll::add(&ep, fd, epoll::EventData::new_u64(0), epoll::EventFlags::IN).map_err(err)?;
    }
    let seq = OPENED.fetch_add(1, Ordering::Relaxed) & 0x1f;
    let hi_tid_base = ((std::process::id() & 0x3f_ffff) << 10) | (seq << 5);
    let raw = ep.as_raw_fd();
    let p = Arc::new(Port {
        dev,
        port,
        epoll: ep,
        wake,
        timer,
        ready,
        inner: Mutex::new(Inner {
            ctx,
            agents: Agents::new(hi_tid_base),
            sm: false,
            ready_set: false,
        }),
    });
    PORTS.lock().map_err(|_| libc::EIO)?.insert(raw, p);
    debug(|| {
        format!(
            "umad_open_port: {name} port {port} is fd {raw} (device {dev} of {})",
            dir.display()
        )
    });
    Ok(raw)
}

/// `umad_open_port`: the port's descriptor, or a negative errno value.
pub(crate) extern "C" fn umad_open_port(ca_name: *const c_char, portnum: c_int) -> c_int {
    ffi_neg(|| {
        let name = if ca_name.is_null() {
            None
        } else {
            Some(c_str(ca_name)?)
        };
        open(name, portnum)
    })
}

/// `umad_close_port`: the connection closes, and the daemon forgets its agents.
pub(crate) extern "C" fn umad_close_port(fd: c_int) -> c_int {
    ffi_neg(|| {
        let p = PORTS.lock().map_err(|_| libc::EIO)?.remove(&fd);
        p.map(|_| 0).ok_or(libc::EBADF)
    })
}

/// `umad_get_fd`: the descriptor itself, as rdma-core's.
pub(crate) extern "C" fn umad_get_fd(fd: c_int) -> c_int {
    fd
}

fn register(fd: c_int, reg: Registration) -> Result<u32, c_int> {
    let p = port_of(fd)?;
    let mut inner = p.lock()?;
    let id = inner.agents.register(reg)?;
    if inner.agents.wants_sm_requests() && !inner.sm {
        // An agent that answers SMP or SA requests is the port's SM: the daemon gives it
        // those, and refuses a second one on the port.
        if let Err(e) = inner.ctx.open_mad(p.dev, p.port, true) {
            let _ = inner.agents.unregister(id);
            say(format!("umad_register: {e}"));
            return Err(libc::EBUSY);
        }
        inner.sm = true;
    }
    debug(|| format!("fd {fd} registered agent {id}: {reg:?}"));
    Ok(id)
}

fn method_mask(mask: *const c_long) -> u128 {
    if mask.is_null() {
        return 0;
    }
    // SAFETY: libibumad's method masks are 16 bytes (`long[16 / sizeof(long)]`).
    let bytes = unsafe { std::slice::from_raw_parts(mask as *const u8, 16) };
    u128::from_le_bytes(bytes.try_into().unwrap_or_default())
}

/// `umad_register`: the agent id, or -EPERM (rdma-core's answer to any refusal).
pub(crate) extern "C" fn umad_register(
    fd: c_int,
    mgmt_class: c_int,
    mgmt_version: c_int,
    rmpp_version: u8,
    mask: *const c_long,
) -> c_int {
    ffi_neg(|| {
        let (Ok(class), Ok(class_version)) = (u8::try_from(mgmt_class), u8::try_from(mgmt_version))
        else {
            return Err(libc::EPERM);
        };
        let reg = Registration {
            class,
            class_version,
            methods: method_mask(mask),
            oui: OPENIB_OUI,
            rmpp_version,
        };
        register(fd, reg)
            .map(|id| id as c_int)
            .map_err(|_| libc::EPERM)
    })
}

/// `umad_register_oui`: a vendor class (0x30–0x4F) agent of class version 1 for `oui`.
pub(crate) extern "C" fn umad_register_oui(
    fd: c_int,
    mgmt_class: c_int,
    rmpp_version: u8,
    oui: *const u8,
    mask: *const c_long,
) -> c_int {
    ffi_neg(|| {
        let class = u8::try_from(mgmt_class).map_err(|_| libc::EINVAL)?;
        if !is_vendor_oui_class(class) || oui.is_null() {
            return Err(libc::EINVAL);
        }
        let mut o = [0u8; 3];
        // SAFETY: `oui` points at the caller's 3-byte OUI.
        unsafe { std::ptr::copy_nonoverlapping(oui, o.as_mut_ptr(), 3) };
        let reg = Registration {
            class,
            class_version: 1,
            methods: method_mask(mask),
            oui: o,
            rmpp_version,
        };
        register(fd, reg)
            .map(|id| id as c_int)
            .map_err(|_| libc::EPERM)
    })
}

/// `umad_register2`: 0 and the id in `*agent_id`, or a positive errno value.
pub(crate) extern "C" fn umad_register2(
    fd: c_int,
    attr: *mut UmadRegAttr,
    agent_id: *mut u32,
) -> c_int {
    let r = ffi_neg(|| {
        if attr.is_null() || agent_id.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller's umad_reg_attr.
        let a = unsafe { *attr };
        if is_vendor_oui_class(a.mgmt_class) && (a.oui & 0x00ff_ffff == 0 || a.oui >> 24 != 0) {
            return Err(libc::EINVAL);
        }
        if a.flags & !UMAD_USER_RMPP != 0 {
            // Flags softib does not know: say which are supported, as the kernel does.
            // SAFETY: as above.
            unsafe { (*attr).flags = UMAD_USER_RMPP };
            return Err(libc::EINVAL);
        }
        let oui = if is_vendor_oui_class(a.mgmt_class) {
            let b = a.oui.to_be_bytes();
            [b[1], b[2], b[3]]
        } else {
            OPENIB_OUI
        };
        let methods = u128::from(a.method_mask[0]) | (u128::from(a.method_mask[1]) << 64);
        let rmpp_version = if a.flags & UMAD_USER_RMPP != 0 {
            0
        } else {
            a.rmpp_version
        };
        let id = register(
            fd,
            Registration {
                class: a.mgmt_class,
                class_version: a.mgmt_class_version,
                methods,
                oui,
                rmpp_version,
            },
        )?;
        // SAFETY: the caller's u32.
        unsafe { *agent_id = id };
        Ok(0)
    });
    -r
}

/// `umad_unregister`: 0, or -1 with errno (an ioctl's answer).
pub(crate) extern "C" fn umad_unregister(fd: c_int, agent_id: c_int) -> c_int {
    let r = ffi_neg(|| {
        let p = port_of(fd)?;
        let mut inner = p.lock()?;
        let id = u32::try_from(agent_id).map_err(|_| libc::EINVAL)?;
        inner.agents.unregister(id)?;
        Ok(0)
    });
    if r < 0 {
        -1
    } else {
        0
    }
}

/// `umad_send`: 0, or -EIO with errno saying why.
pub(crate) extern "C" fn umad_send(
    fd: c_int,
    agent_id: c_int,
    umad: *mut c_void,
    length: c_int,
    timeout_ms: c_int,
    retries: c_int,
) -> c_int {
    let r = ffi_neg(|| {
        let p = port_of(fd)?;
        let len = usize::try_from(length).map_err(|_| libc::EINVAL)?;
        if umad.is_null() {
            return Err(libc::EINVAL);
        }
        let id = u32::try_from(agent_id).map_err(|_| libc::EINVAL)?;
        // SAFETY: the caller's buffer holds the header and `length` bytes of MAD after it.
        let (hdr, mad) = unsafe {
            let h = &mut *(umad as *mut IbUserMad);
            let m = std::slice::from_raw_parts((umad as *const u8).add(64), len);
            (h, m)
        };
        hdr.agent_id = id;
        hdr.timeout_ms = timeout_ms.max(0) as u32;
        hdr.retries = retries.max(0) as u32;
        let mut inner = p.lock()?;
        if inner
            .agents
            .registration(id)
            .is_some_and(|r| is_smi_class(r.class))
            && len > MAD_LEN
        {
            return Err(libc::EINVAL);
        }
        let send = inner.agents.send(
            Instant::now(),
            &Outgoing {
                agent: id,
                mad,
                dlid: u16::from_be(hdr.addr.lid),
                dest_qpn: u32::from_be(hdr.addr.qpn),
                timeout_ms: hdr.timeout_ms,
                retries: hdr.retries,
            },
        )?;
        let inner = &mut *inner;
        p.transmit(&mut inner.ctx, &send).map_err(|e| lost(&e))?;
        // A timeout to watch.
        p.arm(inner)?;
        Ok(0)
    });
    if r < 0 {
        -libc::EIO
    } else {
        0
    }
}

/// Writes `d` into the caller's buffer: the header (with the whole length) and, when
/// `with_data`, the MAD.
fn write_out(umad: *mut c_void, d: &Delivered, with_data: bool) {
    let hdr = IbUserMad {
        agent_id: d.agent,
        status: d.status,
        timeout_ms: 0,
        retries: 0,
        length: (64 + d.data.len()) as u32,
        addr: softib_verbs_abi::umad::IbMadAddr {
            qpn: d.src_qpn.to_be(),
            qkey: if d.qp1 { GSI_QKEY.to_be() } else { 0 },
            lid: d.slid.to_be(),
            ..Default::default()
        },
    };
    // SAFETY: the caller's buffer holds the header and, when `with_data`, `*length >=
    // d.data.len()` bytes after it (checked by Agents::pop).
    unsafe {
        std::ptr::write_unaligned(umad as *mut IbUserMad, hdr);
        if with_data {
            std::ptr::copy_nonoverlapping(d.data.as_ptr(), (umad as *mut u8).add(64), d.data.len());
        }
    }
}

/// What one look at a port found.
#[derive(Debug, Clone, Copy)]
enum Look {
    /// The function's answer.
    Done(c_int),
    /// Nothing for the program yet: wait on this descriptor.
    Wait(RawFd),
}

/// Takes what the daemon has for the port; a MAD for the program is written out.
fn recv_once(fd: c_int, umad: *mut c_void, length: *mut c_int) -> Look {
    let mut wait_on = None;
    let r = ffi_neg(|| {
        if umad.is_null() || length.is_null() {
            return Err(libc::EINVAL);
        }
        let p = port_of(fd)?;
        // SAFETY: the caller's int.
        let room = usize::try_from(unsafe { *length }).unwrap_or(0);
        let mut inner = p.lock()?;
        // What an earlier fetch brought comes first, without a round trip to the daemon;
        // only an empty queue asks it (its wakeup stays set meanwhile, so the descriptor
        // stays readable while it holds more).
        if inner.agents.has_queued() {
            p.arm(&mut inner)?;
        } else {
            p.pump(&mut inner)?;
        }
        let got = inner.agents.pop(room);
        p.arm(&mut inner)?;
        match got {
            None => {
                wait_on = Some(p.epoll.as_raw_fd());
                Err(libc::EWOULDBLOCK)
            }
            Some(Ok(d)) => {
                write_out(umad, &d, true);
                // SAFETY: as above.
                unsafe { *length = d.data.len() as c_int };
                Ok(d.agent as c_int)
            }
            Some(Err((d, needed))) => {
                write_out(umad, &d, false);
                // SAFETY: as above.
                unsafe { *length = needed as c_int };
                Err(libc::ENOSPC)
            }
        }
    });
    match wait_on {
        Some(ep) => Look::Wait(ep),
        None => Look::Done(r),
    }
}

/// Waits until there may be something on the port's descriptor `ep`, at most until `until`;
/// `false` once `until` has passed.
///
/// `epoll_wait` is a cancellation point, and this is where opensm's receiver thread is when
/// opensm stops it with `pthread_cancel` (then `pthread_join`), as it would be in the real
/// library's `poll`: nothing with a destructor is alive in this frame or in the exported
/// function's (both "C-unwind"), so the cancellation's forced unwind may pass through them.
fn wait_on(ep: RawFd, until: Option<Instant>) -> bool {
    let ms = match until {
        Some(u) => {
            let left = u.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            left.as_millis().clamp(1, i32::MAX as u128) as c_int
        }
        None => -1,
    };
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 4];
    // SAFETY: `events` has room for the 4 events we ask for; `ep` is the port's epoll fd (a
    // closed one makes epoll_wait fail, and the next look says EBADF).
    unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 4, ms) };
    true
}

fn deadline(timeout_ms: c_int) -> Option<Instant> {
    u64::try_from(timeout_ms)
        .ok()
        .map(|ms| Instant::now() + Duration::from_millis(ms))
}

/// `umad_recv`: the agent id of the MAD now in `umad` (its length in `*length`);
/// -ETIMEDOUT after `timeout_ms` (negative: forever; 0: do not wait, -EWOULDBLOCK); -ENOSPC
/// with the length needed in `*length` when the buffer is too small (the MAD stays first).
pub(crate) extern "C-unwind" fn umad_recv(
    fd: c_int,
    umad: *mut c_void,
    length: *mut c_int,
    timeout_ms: c_int,
) -> c_int {
    let until = deadline(timeout_ms);
    loop {
        match recv_once(fd, umad, length) {
            Look::Done(r) => return r,
            Look::Wait(_) if timeout_ms == 0 => return -libc::EWOULDBLOCK,
            Look::Wait(ep) => {
                if !wait_on(ep, until) {
                    crate::set_errno(libc::ETIMEDOUT);
                    return -libc::ETIMEDOUT;
                }
            }
        }
    }
}

/// `umad_poll`: 0 once a MAD waits, -ETIMEDOUT after `timeout_ms` (negative: forever).
pub(crate) extern "C-unwind" fn umad_poll(fd: c_int, timeout_ms: c_int) -> c_int {
    let until = deadline(timeout_ms);
    loop {
        let look = ffi_neg(|| {
            let p = port_of(fd)?;
            let mut inner = p.lock()?;
            p.pump(&mut inner)?;
            if inner.agents.has_queued() {
                Ok(0)
            } else {
                Ok(p.epoll.as_raw_fd() + 1)
            }
        });
        if look <= 0 {
            return look;
        }
        if !wait_on(look - 1, until) {
            crate::set_errno(libc::ETIMEDOUT);
            return -libc::ETIMEDOUT;
        }
    }
}
