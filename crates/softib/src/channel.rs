//! Completion channels (`ibv_comp_channel`): a file descriptor that becomes readable when an
//! armed CQ receives a completion, so a program can wait for its CQs and its other files
//! (sockets, a TUN device) in one `poll`/`epoll`, or register it with an async runtime.
//!
//! The channel is an eventfd the library creates and hands to the daemon; the daemon adds to
//! its counter when a CQ armed with [`crate::Context::req_notify_cq`] holds a completion.
//! Arming is one-shot, as in verbs: after an event, poll the CQ empty, arm again, and poll once
//! more (a completion may have arrived between the last poll and the arming).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

/// A completion channel.
#[derive(Debug)]
pub struct CompChannel {
    pub(crate) fd: OwnedFd,
    pub(crate) handle: u64,
}

impl CompChannel {
    pub(crate) fn new_fd() -> io::Result<OwnedFd> {
        Ok(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?)
    }

    /// The daemon's handle of this channel.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// `ibv_get_cq_event`, with a bound: waits up to `timeout` (`None`: forever) for an event
    /// and consumes every event pending. Returns how many arrived (0: the wait ran out).
    pub fn get_events(&self, timeout: Option<Duration>) -> io::Result<u64> {
        wait_events(self.fd.as_fd(), timeout)
    }

    /// Consumes pending events without waiting: `None` when there are none.
    pub fn try_get_events(&self) -> io::Result<Option<u64>> {
        take_events(self.fd.as_fd())
    }
}

/// Waits up to `timeout` (`None`: forever) for the eventfd `fd` to count something, and
/// consumes the count: how much it was (0: the wait ran out).
pub(crate) fn wait_events(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<u64> {
    if let Some(n) = take_events(fd)? {
        return Ok(n);
    }
    let ts = timeout.map(|d| Timespec {
        tv_sec: d.as_secs().try_into().unwrap_or(i64::MAX),
        tv_nsec: d.subsec_nanos().into(),
    });
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    loop {
        match poll(&mut fds, ts.as_ref()) {
            Ok(0) => return Ok(0),
            Ok(_) => return Ok(take_events(fd)?.unwrap_or(0)),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Consumes the eventfd `fd`'s count without waiting: `None` when it is zero.
pub(crate) fn take_events(fd: BorrowedFd<'_>) -> io::Result<Option<u64>> {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(8) => Ok(Some(u64::from_ne_bytes(b))),
        Ok(_) => Ok(None),
        Err(rustix::io::Errno::AGAIN) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

impl AsFd for CompChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
