//! Completion queues and channels: `ibv_create_cq`, `ibv_create_cq_ex` with the extended
//! polling table (`ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` / `ibv_wc_read_*`),
//! `ibv_poll_cq` and `ibv_req_notify_cq` (through `ibv_context_ops`), completion channels
//! with pollable fds, `ibv_get_cq_event`, `ibv_ack_cq_events`.
//!
//! Polling takes completions from the CQ's ring in memory shared with the daemon without a
//! request and never sleeps ([`softib::Context::poll_cq_nowait`]).

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use softib::{CqHandle, WcOpcode, WorkCompletion};
use softib_verbs_abi as abi;

use crate::objects::{ctx_of, free, object, zeroed, Channel, Context, Cq, Object};
use crate::{ffi_errno, ffi_neg, ffi_ptr, refused};

/// Completions taken from the daemon that an extended poll has not consumed yet, and the
/// one it is at (between `start_poll` and `end_poll`).
#[derive(Default)]
pub(crate) struct PollState {
    pending: VecDeque<WorkCompletion>,
    current: Option<WorkCompletion>,
}

/// The C form of a completion.
pub(crate) fn c_wc(wc: &WorkCompletion) -> abi::IbvWc {
    use abi::wc_flags as f;
    let mut flags = 0;
    let mut imm = 0;
    if let Some(i) = wc.imm_data {
        flags |= f::WITH_IMM;
        // `imm_data` is in network order in the C struct.
        imm = i.to_be();
    }
    if let Some(r) = wc.invalidated_rkey {
        flags |= f::WITH_INV;
        imm = r;
    }
    if wc.grh {
        flags |= f::GRH;
    }
    abi::IbvWc {
        wr_id: wc.wr_id,
        status: wc.status as u32,
        opcode: c_opcode(wc.opcode),
        vendor_err: wc.vendor_err,
        byte_len: wc.byte_len,
        imm_data: imm,
        qp_num: wc.qp_num.value(),
        src_qp: wc.src_qp.value(),
        wc_flags: flags,
        pkey_index: wc.pkey_index,
        slid: wc.slid.0,
        sl: wc.sl,
        dlid_path_bits: 0,
    }
}

fn c_opcode(op: WcOpcode) -> u32 {
    use abi::wc_opcode as o;
    match op {
        WcOpcode::Send => o::SEND,
        WcOpcode::RdmaWrite => o::RDMA_WRITE,
        WcOpcode::RdmaRead => o::RDMA_READ,
        WcOpcode::CompSwap => o::COMP_SWAP,
        WcOpcode::FetchAdd => o::FETCH_ADD,
        WcOpcode::Recv => o::RECV,
        WcOpcode::RecvRdmaWithImm => o::RECV_RDMA_WITH_IMM,
    }
}

/// The CQ behind a program's `ibv_cq` (or `ibv_cq_ex`, the same pointer).
pub(crate) fn cq<'a>(p: *mut abi::IbvCq) -> Result<&'a Cq, c_int> {
    // SAFETY: the program passes a CQ it created (an `ibv_cq` is the head of our `ibv_cq_ex`).
    unsafe { object::<Cq>(p as *mut abi::IbvCqEx) }
}

/// Creates a CQ: the daemon's CQ and, with a channel, the daemon's completion channel that
/// stands for it in the channel's epoll set.
fn create(
    context: *mut abi::IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut abi::IbvCompChannel,
    comp_vector: c_int,
    verb: &str,
) -> Result<*mut Cq, c_int> {
    // SAFETY: the program passes a context it opened.
    let ctx = unsafe { Context::from_ibv(context)? };
    let cqe = u32::try_from(cqe).map_err(|_| libc::EINVAL)?;
    if cqe == 0 || cqe > ctx.limits.max_cqe || comp_vector != 0 {
        // One completion vector (`num_comp_vectors` is 1).
        let why = format!(
            "{cqe} entries (1..={} allowed) on completion vector {comp_vector} (only 0)",
            ctx.limits.max_cqe
        );
        let e = softib::Error::Refused {
            kind: softib::ErrorKind::Invalid,
            message: why,
        };
        return Err(refused(verb, &e));
    }
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: the program passes a channel it created.
        Some(unsafe { object::<Channel>(channel)? })
    };
    // At least MIN_CQE entries, as providers round a CQ up (and report the size they made):
    // a CQ the size of one WR (perftest's latency tests make them) would keep its completion
    // ring full, and a full ring costs a request to the daemon at every poll.
    let cqe = cqe.max(MIN_CQE.min(ctx.limits.max_cqe));
    let mut inner = ctx.lock();
    let handle = inner
        .ctx
        .create_cq(ctx.dev, cqe)
        .map_err(|e| refused(verb, &e))?;
    let notify = match ch {
        None => None,
        Some(_) => match inner.ctx.create_comp_channel() {
            Ok(n) => Some(n),
            Err(e) => {
                let _ = inner.ctx.destroy_cq(ctx.dev, handle);
                return Err(refused(verb, &e));
            }
        },
    };
    // SAFETY: `ibv_cq_ex` is pointers, integers and optional function pointers.
    let c = unsafe { zeroed::<abi::IbvCqEx>() };
    let cq = Box::into_raw(Box::new(Cq {
        c,
        magic: Cq::MAGIC,
        ctx,
        handle,
        channel: ch.map_or(std::ptr::null(), |c| c as *const Channel),
        notify,
        poll: Mutex::new(PollState::default()),
        events: Mutex::new(0),
    }));
    // SAFETY: a fresh allocation.
    let o = unsafe { &*cq };
    if let (Some(ch), Some(n)) = (ch, &o.notify) {
        let added = rustix::event::epoll::add(
            &ch.epoll,
            n,
            rustix::event::epoll::EventData::new_u64(cq as u64),
            rustix::event::epoll::EventFlags::IN,
        );
        if let Err(e) = added {
            let _ = inner.ctx.destroy_cq(ctx.dev, handle);
            // SAFETY: ours, never handed out.
            unsafe { free(cq, |c| c.magic = 0) };
            return Err(e.raw_os_error());
        }
        let refs = ch.refs.fetch_add(1, Ordering::Relaxed) + 1;
        // SAFETY: a field of a live channel; `refs` is the count, this its mirror.
        unsafe { (*ch.c.get()).refcnt = refs };
    }
    inner.cqs.insert(handle.0, cq);
    drop(inner);
    // SAFETY: a fresh allocation nobody else sees yet.
    let c = unsafe { &mut *o.c.get() };
    c.cq.context = context;
    c.cq.channel = channel;
    c.cq.cq_context = cq_context;
    c.cq.handle = handle.0;
    c.cq.cqe = cqe as c_int;
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
    c.read_completion_ts = Some(read_zero_u64);
    c.read_cvlan = Some(read_zero_u16);
    c.read_flow_tag = Some(read_zero_u32);
    c.read_tm_info = Some(read_tm_info);
    c.read_completion_wallclock_ns = Some(read_zero_u64);
    Ok(cq)
}

/// `ibv_create_cq`.
pub(crate) extern "C" fn ibv_create_cq(
    context: *mut abi::IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut abi::IbvCompChannel,
    comp_vector: c_int,
) -> *mut abi::IbvCq {
    ffi_ptr(|| {
        let cq = create(
            context,
            cqe,
            cq_context,
            channel,
            comp_vector,
            "ibv_create_cq",
        )?;
        Ok(cq as *mut abi::IbvCq)
    })
}

/// `verbs_context.create_cq_ex`: the standard completion fields only; a timestamp, CVLAN,
/// flow tag or tag-matching field is refused with EOPNOTSUPP, as rxe's provider does.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut abi::IbvContext,
    attr: *mut abi::IbvCqInitAttrEx,
) -> *mut abi::IbvCqEx {
    ffi_ptr(|| {
        if attr.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a readable attribute struct.
        let a = unsafe { &*attr };
        if a.wc_flags & !abi::cq_wc_flags::STANDARD != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        // `comp_mask` may name `flags` (single-threaded, ignore overrun: hints) and a parent
        // domain, which softib has not.
        const FLAGS: u32 = 1;
        if a.comp_mask & !FLAGS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let cqe = c_int::try_from(a.cqe).map_err(|_| libc::EINVAL)?;
        let comp_vector = c_int::try_from(a.comp_vector).map_err(|_| libc::EINVAL)?;
        let cq = create(
            context,
            cqe,
            a.cq_context,
            a.channel,
            comp_vector,
            "ibv_create_cq_ex",
        )?;
        Ok(cq as *mut abi::IbvCqEx)
    })
}

/// `ibv_resize_cq`: softib's CQs keep their size (EOPNOTSUPP).
pub(crate) extern "C" fn ibv_resize_cq(cq: *mut abi::IbvCq, _cqe: c_int) -> c_int {
    match self::cq(cq) {
        Ok(_) => libc::EOPNOTSUPP,
        Err(e) => e,
    }
}

/// `ibv_destroy_cq`.
pub(crate) extern "C" fn ibv_destroy_cq(cq: *mut abi::IbvCq) -> c_int {
    ffi_errno(|| {
        let o = self::cq(cq)?;
        // SAFETY: a CQ's context outlives it.
        let ctx = unsafe { ctx_of(o.ctx) };
        let mut inner = ctx.lock();
        inner
            .ctx
            .destroy_cq(ctx.dev, o.handle)
            .map_err(|e| refused("ibv_destroy_cq", &e))?;
        inner.cqs.remove(&o.handle.0);
        if let Some(n) = &o.notify {
            if !o.channel.is_null() {
                // SAFETY: the channel outlives its CQs (it cannot be destroyed while used).
                let ch = unsafe { &*o.channel };
                let _ = rustix::event::epoll::delete(&ch.epoll, n);
                let refs = ch.refs.fetch_sub(1, Ordering::Relaxed) - 1;
                // SAFETY: a field of a live channel.
                unsafe { (*ch.c.get()).refcnt = refs };
            }
        }
        let notify = o.notify.as_ref().map(|n| n.handle());
        drop(inner);
        let p = o as *const Cq as *mut Cq;
        // SAFETY: our allocation; the program does not use the CQ again.
        let cq = unsafe { Box::from_raw(p) };
        if let Some(n) = cq.notify {
            let _ = notify;
            let _ = ctx.lock().ctx.destroy_comp_channel(n);
        }
        Ok(())
    })
}

/// Takes up to `max` completions of `o` into `out`: first those an extended poll left, then
/// the daemon's. Never sleeps.
fn take(o: &Cq, max: usize, out: &mut Vec<WorkCompletion>) -> Result<(), c_int> {
    {
        let mut p = o.poll.lock().unwrap_or_else(|e| e.into_inner());
        while out.len() < max {
            let Some(wc) = p.pending.pop_front() else {
                break;
            };
            out.push(wc);
        }
    }
    if out.len() < max {
        // SAFETY: a CQ's context outlives it.
        let ctx = unsafe { ctx_of(o.ctx) };
        let mut inner = ctx.lock();
        let left = (max - out.len()) as u32;
        inner
            .ctx
            .poll_cq_nowait(ctx.dev, o.handle, left, out)
            .map_err(|e| refused("ibv_poll_cq", &e))?;
    }
    Ok(())
}

/// `ibv_context_ops.poll_cq` (the inline `ibv_poll_cq`): how many completions it wrote, or
/// -1 (rdma-core's providers return a negative value on error).
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut abi::IbvCq,
    num_entries: c_int,
    wc: *mut abi::IbvWc,
) -> c_int {
    let r = crate::catch(|| -> Result<c_int, c_int> {
        let o = self::cq(cq)?;
        let max = usize::try_from(num_entries).map_err(|_| libc::EINVAL)?;
        if max == 0 {
            return Ok(0);
        }
        if wc.is_null() {
            return Err(libc::EINVAL);
        }
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<WorkCompletion>> = const {
                std::cell::RefCell::new(Vec::new())
            };
        }
        SCRATCH.with(|s| {
            let mut v = s.borrow_mut();
            v.clear();
            take(o, max, &mut v)?;
            for (i, w) in v.iter().enumerate() {
                // SAFETY: the caller's array has `num_entries` entries.
                unsafe { *wc.add(i) = c_wc(w) };
            }
            Ok(v.len() as c_int)
        })
    });
    match r {
        Ok(Ok(n)) => n,
        Ok(Err(_)) | Err(_) => -1,
    }
}

/// `ibv_context_ops.req_notify_cq` (the inline `ibv_req_notify_cq`): the CQ's channel fires
/// once the CQ has a completion. softib does not tell solicited completions apart, so
/// `solicited_only` arms for any (a program polls the CQ after an event anyway).
pub(crate) unsafe extern "C" fn req_notify_cq(
    cq: *mut abi::IbvCq,
    _solicited_only: c_int,
) -> c_int {
    ffi_errno(|| {
        let o = self::cq(cq)?;
        let Some(n) = &o.notify else {
            // A CQ made without a channel has nowhere to signal.
            return Err(libc::EINVAL);
        };
        // SAFETY: a CQ's context outlives it.
        let ctx = unsafe { ctx_of(o.ctx) };
        // Verbs arm a CQ for its *next* completion (IBA 11.4.2.2); the daemon fires for any
        // completion the CQ's ring holds. So the ring is emptied into the CQ's own queue first
        // (where polls find them before the ring's): a program that arms before it polls, as
        // perftest does, is not woken again for what it is about to poll.
        let mut p = o.poll.lock().unwrap_or_else(|e| e.into_inner());
        let mut inner = ctx.lock();
        let mut v = Vec::new();
        loop {
            let before = v.len();
            inner
                .ctx
                .poll_cq_nowait(ctx.dev, o.handle, BATCH as u32, &mut v)
                .map_err(|e| refused("ibv_req_notify_cq", &e))?;
            if v.len() == before {
                break;
            }
        }
        p.pending.extend(v);
        inner
            .ctx
            .req_notify_cq(ctx.dev, o.handle, n)
            .map_err(|e| refused("ibv_req_notify_cq", &e))
    })
}

/// `ibv_create_comp_channel`.
pub(crate) extern "C" fn ibv_create_comp_channel(
    context: *mut abi::IbvContext,
) -> *mut abi::IbvCompChannel {
    ffi_ptr(|| {
        // SAFETY: the program passes a context it opened.
        unsafe { Context::from_ibv(context)? };
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .map_err(|e| e.raw_os_error())?;
        // SAFETY: `ibv_comp_channel` is a pointer and two ints.
        let c = unsafe { zeroed::<abi::IbvCompChannel>() };
        let ch = Box::into_raw(Box::new(Channel {
            c,
            magic: Channel::MAGIC,
            epoll,
            refs: AtomicI32::new(0),
        }));
        // SAFETY: a fresh allocation.
        unsafe {
            (*(*ch).c.get()).context = context;
            (*(*ch).c.get()).fd = (*ch).epoll.as_raw_fd();
        }
        Ok(ch as *mut abi::IbvCompChannel)
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while a CQ uses it.
pub(crate) extern "C" fn ibv_destroy_comp_channel(channel: *mut abi::IbvCompChannel) -> c_int {
    ffi_errno(|| {
        // SAFETY: the program passes a channel it created.
        let ch = unsafe { object::<Channel>(channel)? };
        if ch.refs.load(Ordering::Relaxed) != 0 {
            return Err(libc::EBUSY);
        }
        // SAFETY: ours; not used again.
        unsafe { free(ch as *const Channel as *mut Channel, |c| c.magic = 0) };
        Ok(())
    })
}

/// `ibv_get_cq_event`: waits for an armed CQ of the channel to fire (unless the program
/// made the channel's fd non-blocking: then -1 with EAGAIN) and returns it.
pub(crate) extern "C" fn ibv_get_cq_event(
    channel: *mut abi::IbvCompChannel,
    cq: *mut *mut abi::IbvCq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ffi_neg(|| {
        if cq.is_null() || cq_context.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program passes a channel it created.
        let ch = unsafe { object::<Channel>(channel)? };
        // SAFETY: F_GETFL only reads the descriptor's flags.
        let flags = unsafe { libc::fcntl(ch.epoll.as_raw_fd(), libc::F_GETFL) };
        let timeout = if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            0
        } else {
            -1
        };
        loop {
            let Some(data) = crate::async_event::epoll_wait(&ch.epoll, timeout)? else {
                return Err(libc::EAGAIN);
            };
            let p = data as *mut abi::IbvCq;
            let o = self::cq(p)?;
            let Some(n) = &o.notify else { continue };
            if crate::async_event::drain_eventfd(n.as_fd()) == 0 {
                // Another thread took this one.
                continue;
            }
            *o.events.lock().unwrap_or_else(|e| e.into_inner()) += 1;
            // SAFETY: the caller passes writable out-pointers; the CQ is live.
            unsafe {
                *cq = p;
                *cq_context = (*o.c.get()).cq.cq_context;
            }
            return Ok(0);
        }
    })
}

/// `ibv_ack_cq_events`.
pub(crate) extern "C" fn ibv_ack_cq_events(cq: *mut abi::IbvCq, nevents: u32) {
    if let Ok(o) = self::cq(cq) {
        let _held = o.events.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: a field of a live CQ, written under its events lock.
        unsafe {
            let c = &mut (*o.c.get()).cq;
            c.comp_events_completed = c.comp_events_completed.wrapping_add(nevents);
        }
    }
}

// ---- the extended polling table ---------------------------------------------------------

/// How many completions an extended poll takes from the daemon at a time.
const BATCH: usize = 32;

/// The fewest entries a CQ is made with.
const MIN_CQE: u32 = 256;

fn ex<'a>(cq: *mut abi::IbvCqEx) -> Option<&'a Cq> {
    // SAFETY: the program passes a CQ it created.
    unsafe { object::<Cq>(cq) }.ok()
}

/// Makes `wc` the current completion: its status and wr_id go where programs read them.
fn set_current(o: &Cq, p: &mut PollState, wc: WorkCompletion) {
    // SAFETY: fields of a live CQ that programs only read between start and end.
    unsafe {
        (*o.c.get()).status = wc.status as u32;
        (*o.c.get()).wr_id = wc.wr_id;
    }
    p.current = Some(wc);
}

/// Moves to the next completion: 0, or ENOENT when the CQ is empty.
fn advance(o: &Cq) -> c_int {
    let mut p = o.poll.lock().unwrap_or_else(|e| e.into_inner());
    if p.pending.is_empty() {
        let mut v = Vec::with_capacity(BATCH);
        // SAFETY: a CQ's context outlives it.
        let ctx = unsafe { ctx_of(o.ctx) };
        let r = ctx
            .lock()
            .ctx
            .poll_cq_nowait(ctx.dev, o.handle, BATCH as u32, &mut v);
        if let Err(e) = r {
            return refused("ibv_start_poll", &e);
        }
        p.pending.extend(v);
    }
    match p.pending.pop_front() {
        Some(wc) => {
            set_current(o, &mut p, wc);
            0
        }
        None => {
            p.current = None;
            libc::ENOENT
        }
    }
}

unsafe extern "C" fn start_poll(cq: *mut abi::IbvCqEx, attr: *mut abi::IbvPollCqAttr) -> c_int {
    let Some(o) = ex(cq) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller passes NULL or a readable attribute.
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    crate::catch(|| advance(o)).unwrap_or(libc::EIO)
}

unsafe extern "C" fn next_poll(cq: *mut abi::IbvCqEx) -> c_int {
    let Some(o) = ex(cq) else {
        return libc::EINVAL;
    };
    crate::catch(|| advance(o)).unwrap_or(libc::EIO)
}

unsafe extern "C" fn end_poll(cq: *mut abi::IbvCqEx) {
    if let Some(o) = ex(cq) {
        o.poll.lock().unwrap_or_else(|e| e.into_inner()).current = None;
    }
}

/// A field of the current completion (zero outside a poll).
fn current<T: Default>(cq: *mut abi::IbvCqEx, f: impl FnOnce(&WorkCompletion) -> T) -> T {
    ex(cq)
        .and_then(|o| {
            let p = o.poll.lock().unwrap_or_else(|e| e.into_inner());
            p.current.as_ref().map(f)
        })
        .unwrap_or_default()
}

unsafe extern "C" fn read_opcode(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| c_opcode(w.opcode))
}
unsafe extern "C" fn read_vendor_err(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| w.vendor_err)
}
unsafe extern "C" fn read_byte_len(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| w.byte_len)
}
unsafe extern "C" fn read_imm_data(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| c_wc(w).imm_data)
}
unsafe extern "C" fn read_qp_num(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| w.qp_num.value())
}
unsafe extern "C" fn read_src_qp(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| w.src_qp.value())
}
unsafe extern "C" fn read_wc_flags(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| c_wc(w).wc_flags)
}
unsafe extern "C" fn read_slid(cq: *mut abi::IbvCqEx) -> u32 {
    current(cq, |w| u32::from(w.slid.0))
}
unsafe extern "C" fn read_sl(cq: *mut abi::IbvCqEx) -> u8 {
    current(cq, |w| w.sl)
}
unsafe extern "C" fn read_dlid_path_bits(_cq: *mut abi::IbvCqEx) -> u8 {
    0
}
/// The fields a CQ cannot be created with here (timestamps, flow tag): never asked for.
unsafe extern "C" fn read_zero_u64(_cq: *mut abi::IbvCqEx) -> u64 {
    0
}
unsafe extern "C" fn read_zero_u32(_cq: *mut abi::IbvCqEx) -> u32 {
    0
}
unsafe extern "C" fn read_zero_u16(_cq: *mut abi::IbvCqEx) -> u16 {
    0
}
unsafe extern "C" fn read_tm_info(_cq: *mut abi::IbvCqEx, _info: *mut c_void) {}

/// The daemon handle of a CQ pointer a QP or SRQ is created with.
pub(crate) fn handle_of(p: *mut abi::IbvCq, ctx: &Context) -> Result<CqHandle, c_int> {
    let o = cq(p)?;
    if !std::ptr::eq(o.ctx, ctx) {
        return Err(libc::EINVAL);
    }
    Ok(o.handle)
}
