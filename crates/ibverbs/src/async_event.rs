//! Asynchronous events: `ibv_context::async_fd`, `ibv_get_async_event`,
//! `ibv_ack_async_event`.
//!
//! The daemon queues each context's events (port active/error, QP fatal/last WQE, CQ error,
//! SRQ limit) and adds to an eventfd the context gave it. `async_fd` is an epoll instance
//! watching that eventfd: a file of the program's own (it may make it non-blocking and poll
//! it, as UCX does) that is readable while an event is pending — here or in the daemon.

use std::collections::VecDeque;
use std::ffi::{c_int, c_void};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

use softib::AsyncEvent;
use softib_verbs_abi as abi;

use crate::objects::Context;
use crate::{ffi_neg, refused};

/// A context's asynchronous-event state.
pub(crate) struct AsyncState {
    /// What `async_fd` is.
    epoll: OwnedFd,
    /// What the daemon adds to; the library adds to it too while events wait in `queue`.
    eventfd: OwnedFd,
    /// Whether the daemon signals `eventfd` (an older one does not: then a wait asks it
    /// every 100 ms).
    attached: bool,
    /// Events fetched from the daemon, not yet handed out.
    queue: Mutex<VecDeque<(u32, AsyncEvent)>>,
}

impl AsyncState {
    /// Makes the fds and hands the eventfd to the daemon.
    pub fn new(ctx: &mut softib::Context) -> Result<AsyncState, c_int> {
        let eventfd = rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| e.raw_os_error())?;
        let epoll = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .map_err(|e| e.raw_os_error())?;
        rustix::event::epoll::add(
            &epoll,
            &eventfd,
            rustix::event::epoll::EventData::new_u64(0),
            rustix::event::epoll::EventFlags::IN,
        )
        .map_err(|e| e.raw_os_error())?;
        let attached = ctx
            .attach_async_fd(eventfd.as_fd())
            .map_err(|e| refused("ibv_open_device", &e))?;
        Ok(AsyncState {
            epoll,
            eventfd,
            attached,
            queue: Mutex::new(VecDeque::new()),
        })
    }

    /// `async_fd`.
    pub fn fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    fn signal(&self) {
        let _ = rustix::io::write(&self.eventfd, &1u64.to_ne_bytes());
    }
}

/// The C view of one event: the object it names (a pointer of the program's, or the port
/// number) and its `enum ibv_event_type`. `None` for an event about an object this context
/// no longer has.
fn c_event(ctx: &Context, dev: u32, e: AsyncEvent) -> Option<(*mut c_void, u32)> {
    use abi::event_type as t;
    if dev != ctx.dev {
        return None;
    }
    let inner = ctx.lock();
    let qp = |q: softib::Qpn, ty| {
        inner
            .qps
            .get(&q.value())
            // SAFETY: the map holds live QPs of this context.
            .map(|&p| (unsafe { (*p).c.get() } as *mut c_void, ty))
    };
    match e {
        AsyncEvent::CqErr(cq) => inner
            .cqs
            .get(&cq.0)
            // SAFETY: the map holds live CQs of this context.
            .map(|&p| (unsafe { (*p).c.get() } as *mut c_void, t::CQ_ERR)),
        AsyncEvent::QpFatal(q) => qp(q, t::QP_FATAL),
        AsyncEvent::QpReqErr(q) => qp(q, t::QP_REQ_ERR),
        AsyncEvent::QpAccessErr(q) => qp(q, t::QP_ACCESS_ERR),
        AsyncEvent::SqDrained(q) => qp(q, t::SQ_DRAINED),
        AsyncEvent::QpLastWqeReached(q) => qp(q, t::QP_LAST_WQE_REACHED),
        AsyncEvent::SrqLimitReached(s) => inner
            .srqs
            .get(&s.0)
            // SAFETY: the map holds live SRQs of this context.
            .map(|&p| (unsafe { (*p).c.get() } as *mut c_void, t::SRQ_LIMIT_REACHED)),
        AsyncEvent::PortActive(port) => Some((usize::from(port) as *mut c_void, t::PORT_ACTIVE)),
        AsyncEvent::PortErr(port) => Some((usize::from(port) as *mut c_void, t::PORT_ERR)),
    }
}

/// Consumes an eventfd's count (without waiting: ours are non-blocking); how much it was.
pub(crate) fn drain_eventfd(fd: impl AsFd) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}

/// Whether the program made `fd` non-blocking.
fn nonblocking(fd: RawFd) -> bool {
    // SAFETY: F_GETFL on a descriptor number only reads its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// Waits on the epoll instance `epoll` for up to `timeout_ms` (-1: forever); whether it
/// became readable.
pub(crate) fn epoll_wait(epoll: &OwnedFd, timeout_ms: c_int) -> Result<Option<u64>, c_int> {
    let timeout = (timeout_ms >= 0).then(|| rustix::event::Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    });
    loop {
        let mut events = [std::mem::MaybeUninit::<rustix::event::epoll::Event>::uninit()];
        match rustix::event::epoll::wait(epoll, &mut events, timeout.as_ref()) {
            Ok((ready, _)) => return Ok(ready.first().map(|e| e.data.u64())),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.raw_os_error()),
        }
    }
}

/// `ibv_get_async_event`: the next event, waiting for one unless `async_fd` was made
/// non-blocking (then -1 with EAGAIN).
pub(crate) extern "C" fn ibv_get_async_event(
    context: *mut abi::IbvContext,
    event: *mut abi::IbvAsyncEvent,
) -> c_int {
    ffi_neg(|| {
        if event.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the program passes a context it opened.
        let ctx = unsafe { Context::from_ibv(context)? };
        let s = &ctx.events;
        loop {
            let next = s
                .queue
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .pop_front();
            if let Some((dev, e)) = next {
                let left = !s.queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
                if left {
                    // Readable while events wait here.
                    s.signal();
                }
                let Some((element, event_type)) = c_event(ctx, dev, e) else {
                    continue;
                };
                // SAFETY: the caller passes a writable event.
                unsafe {
                    (*event).element = element;
                    (*event).event_type = event_type;
                }
                return Ok(0);
            }
            // Take what the daemon signalled, then ask it.
            drain_eventfd(&s.eventfd);
            let fetched = ctx
                .lock()
                .ctx
                .async_events()
                .map_err(|e| refused("ibv_get_async_event", &e))?;
            if !fetched.is_empty() {
                s.queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend(fetched);
                continue;
            }
            if nonblocking(s.fd()) {
                return Err(libc::EAGAIN);
            }
            let timeout = if s.attached { -1 } else { 100 };
            epoll_wait(&s.epoll, timeout)?;
        }
    })
}

/// `ibv_ack_async_event`: counts the event on its object, as rdma-core does (destroying an
/// object does not wait for the count here).
pub(crate) extern "C" fn ibv_ack_async_event(event: *mut abi::IbvAsyncEvent) {
    let _ = crate::catch(|| {
        if event.is_null() {
            return;
        }
        // SAFETY: the caller passes an event `ibv_get_async_event` filled.
        let (element, ty) = unsafe { ((*event).element, (*event).event_type) };
        use abi::event_type as t;
        match ty {
            t::CQ_ERR => {
                // SAFETY: the element of a CQ event is one of our CQs.
                if let Ok(cq) = unsafe {
                    crate::objects::object::<crate::objects::Cq>(element as *mut abi::IbvCqEx)
                } {
                    // SAFETY: a field of a live CQ; the count is only ever added to.
                    unsafe { (*cq.c.get()).cq.async_events_completed += 1 };
                }
            }
            t::QP_FATAL
            | t::QP_REQ_ERR
            | t::QP_ACCESS_ERR
            | t::SQ_DRAINED
            | t::QP_LAST_WQE_REACHED
            | t::COMM_EST
            | t::PATH_MIG
            | t::PATH_MIG_ERR => {
                // SAFETY: the element of a QP event is one of our QPs.
                if let Ok(qp) = unsafe {
                    crate::objects::object::<crate::objects::Qp>(element as *mut abi::IbvQpEx)
                } {
                    // SAFETY: as above.
                    unsafe { (*qp.c.get()).qp_base.events_completed += 1 };
                }
            }
            t::SRQ_LIMIT_REACHED | t::SRQ_ERR => {
                // SAFETY: the element of an SRQ event is one of our SRQs.
                if let Ok(srq) = unsafe {
                    crate::objects::object::<crate::objects::Srq>(element as *mut abi::IbvSrq)
                } {
                    // SAFETY: as above.
                    unsafe { (*srq.c.get()).events_completed += 1 };
                }
            }
            _ => {}
        }
    });
}
