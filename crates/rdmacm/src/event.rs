//! Event channels and events: `rdma_create_event_channel` (a pipe: its read end is the fd
//! programs poll, one byte per queued event), `rdma_get_cm_event` (blocking unless the
//! program made the fd non-blocking, as with the real library), `rdma_ack_cm_event`,
//! `rdma_event_str`.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int};

use softib_verbs_abi::rdma_cm::{event, RdmaCmEvent, RdmaCmId, RdmaEventChannel};

use crate::agent::{self, Channel, EventBox};
use crate::{ffi, ffi_ptr};

/// `rdma_create_event_channel`.
pub extern "C" fn rdma_create_event_channel() -> *mut RdmaEventChannel {
    ffi_ptr(|| agent::with(new_channel))
}

/// A new channel (also a synchronous id's own).
pub fn new_channel(st: &mut agent::State) -> Result<*mut RdmaEventChannel, c_int> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EMFILE));
    }
    let c = Box::into_raw(Box::new(RdmaEventChannel { fd: fds[0] }));
    st.channels.insert(
        c as usize,
        Channel {
            c,
            wfd: fds[1],
            queue: VecDeque::new(),
        },
    );
    Ok(c)
}

/// `rdma_destroy_event_channel`: the program has destroyed the channel's ids and acked its
/// events, as rdma_cm requires; what is still queued is freed.
///
/// # Safety
/// `channel` comes from `rdma_create_event_channel`.
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
    let _ = ffi(|| agent::with(|st| destroy_channel(st, channel)));
}

/// Frees a channel and the events it still holds.
pub fn destroy_channel(st: &mut agent::State, channel: *mut RdmaEventChannel) -> Result<(), c_int> {
    let ch = st
        .channels
        .remove(&(channel as usize))
        .ok_or(libc::EINVAL)?;
    for ev in ch.queue {
        // SAFETY: queued events are boxes this library leaked and nobody took.
        drop(unsafe { Box::from_raw(ev) });
    }
    // The write end stays open: a thread of the program may still be blocked reading the
    // channel (rping's CM thread is, when its main thread tears down), and with the kernel's
    // rdma_cm such a read keeps waiting rather than failing.
    // SAFETY: the read end is the channel's, closed once here; the C struct is the box leaked
    // at creation.
    unsafe {
        libc::close((*ch.c).fd);
        drop(Box::from_raw(ch.c));
    }
    Ok(())
}

/// `rdma_get_cm_event`: the next event, waiting for one unless the fd is non-blocking
/// (then -1 with EAGAIN).
///
/// # Safety
/// `channel` comes from `rdma_create_event_channel`; `out` is writable.
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut RdmaEventChannel,
    out: *mut *mut RdmaCmEvent,
) -> c_int {
    ffi(|| {
        if channel.is_null() || out.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: the caller passes a live channel.
        let fd = unsafe { (*channel).fd };
        loop {
            read_byte(fd)?;
            let taken = agent::with(|st| {
                Ok(match st.channels.get_mut(&(channel as usize)) {
                    None => Taken::ChannelGone,
                    Some(ch) => match ch.queue.pop_front() {
                        Some(ev) => Taken::Event(ev),
                        None => Taken::Withdrawn,
                    },
                })
            })?;
            match taken {
                Taken::Event(ev) => {
                    // SAFETY: `ev` is a live EventBox whose first field is the C event; `out`
                    // is writable (checked non-null; the caller's contract).
                    unsafe { *out = ev.cast::<RdmaCmEvent>() };
                    return Ok(());
                }
                // Its id was destroyed before anyone took it: wait for the next one.
                Taken::Withdrawn => {}
                Taken::ChannelGone => wait_on_destroyed_channel(),
            }
        }
    })
}

/// One byte of a channel's pipe: an event was queued (or the fd is non-blocking: EAGAIN).
fn read_byte(fd: c_int) -> Result<(), c_int> {
    loop {
        let mut byte = 0u8;
        // SAFETY: one byte into a live local, from the channel's pipe.
        let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if n == 1 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if n < 0 && e == libc::EINTR {
            continue;
        }
        return Err(if n == 0 { libc::ENODEV } else { e });
    }
}

/// What `rdma_get_cm_event` found after a byte of the pipe.
enum Taken {
    Event(*mut EventBox),
    /// The event the byte stood for went with its id (`withdraw`).
    Withdrawn,
    /// Another thread destroyed the channel while this one waited on it.
    ChannelGone,
}

/// A thread that waited on a channel another thread destroyed waits on, as a read of the
/// kernel's rdma_cm file does: no event can come any more, and an error would make programs
/// that leave their CM thread blocked at exit (rping) fail at the end of a clean run. Its
/// fd may already be another file's, so it is not read again.
fn wait_on_destroyed_channel() -> ! {
    loop {
        std::thread::park();
    }
}

/// Frees the events queued on `channel` for `id` that nobody took yet: after
/// `rdma_destroy_id` they would name freed memory (the kernel's rdma_cm drops an id's
/// unreported events with it). Their bytes stay in the pipe; `rdma_get_cm_event` skips them.
pub fn withdraw(st: &mut agent::State, channel: *mut RdmaEventChannel, id: *mut RdmaCmId) {
    let Some(ch) = st.channels.get_mut(&(channel as usize)) else {
        return;
    };
    ch.queue.retain(|&ev| {
        // SAFETY: queued events are live boxes this library leaked and nobody took.
        if unsafe { (*ev).ev.id } != id {
            return true;
        }
        // SAFETY: as above; removed from the queue here, so freed once.
        drop(unsafe { Box::from_raw(ev) });
        false
    });
}

/// `rdma_ack_cm_event`: frees the event.
///
/// # Safety
/// `ev` comes from `rdma_get_cm_event` and is acked once.
pub unsafe extern "C" fn rdma_ack_cm_event(ev: *mut RdmaCmEvent) -> c_int {
    ffi(|| {
        if ev.is_null() {
            return Err(libc::EINVAL);
        }
        // SAFETY: events handed out are EventBoxes (the C struct is their first field).
        drop(unsafe { Box::from_raw(ev.cast::<EventBox>()) });
        Ok(())
    })
}

/// A new event for `id` on its channel.
pub fn new_event(
    id: *mut softib_verbs_abi::rdma_cm::RdmaCmId,
    kind: c_int,
    status: c_int,
) -> Box<EventBox> {
    Box::new(EventBox {
        ev: RdmaCmEvent {
            id,
            listen_id: std::ptr::null_mut(),
            event: kind,
            status,
            param: softib_verbs_abi::rdma_cm::RdmaCmEventParam {
                conn: softib_verbs_abi::rdma_cm::RdmaConnParam {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                },
            },
        },
        private_data: [0; 256],
    })
}

/// Copies `data` into the event and points its connection parameters at it.
pub fn set_private_data(ev: &mut EventBox, data: &[u8]) {
    let n = data.len().min(ev.private_data.len()).min(255);
    ev.private_data[..n].copy_from_slice(&data[..n]);
    ev.ev.param.conn.private_data = ev.private_data.as_ptr().cast();
    ev.ev.param.conn.private_data_len = n as u8;
}

/// `rdma_event_str`.
pub extern "C" fn rdma_event_str(kind: c_int) -> *const c_char {
    let s: &'static std::ffi::CStr = match kind {
        event::ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        event::ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        event::ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        event::ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        event::CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        event::CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        event::CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        event::UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        event::REJECTED => c"RDMA_CM_EVENT_REJECTED",
        event::ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        event::DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        event::DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        event::MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        event::MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        event::ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        event::TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
