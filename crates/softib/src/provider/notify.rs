//! Completion channels on the process data path: which of the engine's CQs are armed
//! (`ibv_req_notify_cq`) on which channel. The channel is the same eventfd the daemon path
//! signals ([`crate::CompChannel`]); here the engine signals it itself, after every turn that
//! may have added a completion — an application thread's post or poll, or the progress
//! thread's turn for the passive side — with the daemon path's rule: a CQ armed while it
//! holds a completion, or that gets one, is signalled once and disarmed.

use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};

use softib_engine::{CqHandle, Hca, Memory};

/// The armed CQs of one engine and the channels they are armed on.
#[derive(Debug, Default)]
pub(crate) struct Notifications {
    /// Each channel this engine has signalled or will, by the daemon's handle: a copy of its
    /// eventfd, made on first use.
    channels: HashMap<u64, OwnedFd>,
    /// (the CQ, its channel's handle).
    armed: Vec<(CqHandle, u64)>,
}

impl Notifications {
    /// Arms `cq` on channel `handle` (eventfd `fd`) for one notification.
    pub fn arm(&mut self, cq: CqHandle, handle: u64, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        if let std::collections::hash_map::Entry::Vacant(e) = self.channels.entry(handle) {
            e.insert(fd.try_clone_to_owned()?);
        }
        self.armed.retain(|&(c, _)| c != cq);
        self.armed.push((cq, handle));
        Ok(())
    }

    /// Forgets `cq` (destroyed).
    pub fn forget_cq(&mut self, cq: CqHandle) {
        self.armed.retain(|&(c, _)| c != cq);
    }

    /// Forgets channel `handle` (destroyed) and disarms what was armed on it.
    pub fn forget_channel(&mut self, handle: u64) {
        self.channels.remove(&handle);
        self.armed.retain(|&(_, h)| h != handle);
    }

    /// Whether a CQ is armed on channel `handle`.
    pub fn in_use(&self, handle: u64) -> bool {
        self.armed.iter().any(|&(_, h)| h == handle)
    }

    /// Signals the channel of every armed CQ of `hca` that holds a completion, and disarms it.
    pub fn signal<M: Memory>(&mut self, hca: &Hca<M>) {
        if self.armed.is_empty() {
            return;
        }
        let channels = &self.channels;
        self.armed.retain(|&(cq, handle)| {
            let ready = hca.cq_len(cq) > 0;
            if ready {
                if let Some(fd) = channels.get(&handle) {
                    // A full counter (EAGAIN) is readable already, which is all it takes.
                    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                }
            }
            !ready
        });
    }
}
