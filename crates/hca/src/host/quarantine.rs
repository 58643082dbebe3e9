//! QPN blocks and memory keys of processes that went away, held back before they are handed
//! out again: a late packet to a dead process's QP, or with its stale R_Key, must never reach
//! a new QP or region. Until released they stay reserved in the daemon's engine, where
//! packets to them are dropped and counted (the steering program sends them to the daemon).

use std::collections::VecDeque;
use std::time::{Duration, Instant as StdInstant};

use softib_wire::Qpn;

use crate::device::Device;

/// How long a dead process's numbers are held: beyond any retransmission a peer still makes
/// (7 retries of the longest local ACK timeout softib uses stay below it) and any packet the
/// network still holds.
pub(super) const QUARANTINE: Duration = Duration::from_secs(60);

/// What is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// A QPN block, by its first QPN.
    Block(Qpn),
    /// A memory key.
    Key(u32),
}

/// Numbers held until a time, oldest first.
#[derive(Debug, Default)]
pub(super) struct Quarantine {
    held: VecDeque<(StdInstant, u32, Held)>,
}

impl Quarantine {
    /// Holds `what` of device `dev` until [`QUARANTINE`] after `now`.
    pub fn hold(&mut self, now: StdInstant, dev: u32, what: Held) {
        self.held.push_back((now + QUARANTINE, dev, what));
    }

    /// How many numbers are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether `what` of `dev` is held.
    #[cfg(test)]
    pub fn holds(&self, dev: u32, what: Held) -> bool {
        self.held.iter().any(|&(_, d, w)| d == dev && w == what)
    }

    /// Gives back to their engines the numbers whose time is up by `now`; returns how many.
    pub fn release_due(&mut self, now: StdInstant, devs: &mut [Device]) -> usize {
        let mut n = 0;
        while let Some(&(until, dev, what)) = self.held.front() {
            if until > now {
                break;
            }
            self.held.pop_front();
            n += 1;
            let Some(d) = devs.get_mut(dev as usize) else {
                continue;
            };
            let hca = d.hca_mut();
            match what {
                Held::Block(first) => {
                    hca.release_qpn_block(first);
                }
                Held::Key(key) => {
                    hca.release_key(key);
                }
            }
        }
        n
    }
}
