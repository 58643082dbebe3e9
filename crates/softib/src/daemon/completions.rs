//! Completions from the daemon: a ring per CQ in memory shared with it, polled without a
//! request (as a hardware CQ is polled in host memory), and the wakeup eventfd a waiting poll
//! sleeps on. What each slot holds and who may sleep when: `softib_proto`'s ring module.
//!
//! A poll with no wait is `ibv_poll_cq`: it takes what the ring holds and returns at once. It
//! never sleeps, yields or waits for the daemon; the one request it may make is after draining
//! a ring it found full, when completions may be left in the daemon's CQ (rare: the ring holds
//! as many as the CQ). Waiting is the caller's choice, a nonzero wait: look at the ring for a
//! moment, yielding so the daemon — the "hardware", which needs a CPU too — can run, then sleep
//! until the daemon fills a ring.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use softib_net::ring::Ring;
use softib_proto::{self as proto, Request, Response};

use super::{ring_broken, Conn};
use crate::channel;
use crate::{CompChannel, Error, Result, WorkCompletion};

/// How long a poll that may wait looks at the completion ring before it sleeps: a completion on
/// its way is usually a few microseconds off, and a sleep costs a wakeup on each side.
const SPIN_BEFORE_WAITING: Duration = Duration::from_micros(200);

/// The completion rings of a session and its wakeup.
#[derive(Debug)]
pub(crate) struct CqRings {
    /// By (device, CQ).
    rings: BTreeMap<(u32, u32), Ring>,
    /// Scratch for one entry.
    buf: Vec<u8>,
    /// The eventfd the daemon adds to when it puts completions into a ring of this session
    /// while the session sleeps (made the first time a poll sleeps).
    wakeup: Option<OwnedFd>,
    /// No wakeup eventfd (SOFTIB_WAKEUP=0, or the daemon refused it: an older one); waiting
    /// polls park in the daemon.
    wakeup_off: bool,
}

impl CqRings {
    pub(crate) fn new(wakeup_off: bool) -> CqRings {
        CqRings {
            rings: BTreeMap::new(),
            buf: Vec::new(),
            wakeup: None,
            wakeup_off,
        }
    }

    /// Gives CQ `cq` (made with `cqe` entries) a completion ring.
    pub(crate) fn attach(&mut self, conn: &mut Conn, dev: u32, cq: u32, cqe: u32) -> Result<()> {
        // The ring holds every completion the CQ can: the engine's CQ then never holds more
        // than the ring has room for, and overflow behaves as without a ring.
        let slots = cqe.clamp(1, proto::CQ_RING_SLOTS_MAX as u32);
        let ring = Ring::create("softib-cq", slots, proto::CQ_RING_SLOT_LEN)?;
        match conn.call_with_fds(&Request::AttachCqRing { dev, cq, slots }, &[ring.fd()])? {
            Response::Ok => {
                // The library polls its rings except while it sleeps in `sleep`, and says so:
                // the daemon then wakes it only then.
                ring.set_polling(true)
                    .map_err(|e| ring_broken("completion", &e))?;
                self.rings.insert((dev, cq), ring);
                Ok(())
            }
            _ => Err(Error::Unexpected("not Ok")),
        }
    }

    /// Forgets a destroyed CQ's ring.
    pub(crate) fn forget(&mut self, dev: u32, cq: u32) {
        self.rings.remove(&(dev, cq));
    }

    /// Up to `max` completions of `cq`. With `wait` zero, what is there now (`ibv_poll_cq`:
    /// never blocks); otherwise waits up to `wait` for the first.
    pub(crate) fn poll(
        &mut self,
        conn: &mut Conn,
        dev: u32,
        cq: u32,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<WorkCompletion>> {
        let Some(ring) = self.rings.get(&(dev, cq)) else {
            // A CQ without a ring: the daemon answers, and waits when asked to.
            let wait_us = u32::try_from(wait.as_micros()).unwrap_or(u32::MAX);
            return match conn.call(&Request::PollCq {
                dev,
                cq,
                max,
                wait_us,
            })? {
                Response::Completions(v) => Ok(v),
                _ => Err(Error::Unexpected("not completions")),
            };
        };
        // A full ring may have left completions in the daemon's CQ; the daemon moves them when
        // it next runs, so after draining a full ring, ask it to.
        let was_full = ring.len().is_ok_and(|n| n == ring.capacity());
        let mut v = Vec::new();
        self.pop(dev, cq, max, &mut v)?;
        if was_full {
            if let Response::Completions(mut direct) = conn.call(&Request::PollCq {
                dev,
                cq,
                max,
                wait_us: 0,
            })? {
                self.pop(dev, cq, max, &mut v)?;
                v.append(&mut direct);
            }
        }
        if !v.is_empty() || wait.is_zero() {
            return Ok(v);
        }
        // Waiting: look at the ring for a while (yielding, so the daemon gets a CPU), then
        // sleep until the daemon fills a ring (this CQ's, or another one's: then look again).
        let spin_until = Instant::now() + wait.min(SPIN_BEFORE_WAITING);
        while Instant::now() < spin_until {
            std::thread::yield_now();
            self.pop(dev, cq, max, &mut v)?;
            if !v.is_empty() {
                return Ok(v);
            }
        }
        let deadline = Instant::now() + wait.saturating_sub(SPIN_BEFORE_WAITING);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(v);
            }
            // In slices, to notice a daemon that stopped answering.
            self.sleep(conn, dev, cq, left.min(super::liveness::LOOK_EVERY))?;
            self.pop(dev, cq, max, &mut v)?;
            if !v.is_empty() {
                return Ok(v);
            }
            conn.check_alive()?;
        }
    }

    /// Sleeps until the daemon puts a completion into any of this session's rings, or for
    /// `timeout`. A daemon that cannot wake it (an older one) is asked instead to answer when
    /// `cq`'s ring holds a completion (a parked `PollCq`).
    ///
    /// Each ring carries the consumer's polling flag: the library keeps it set, and clears it
    /// only here, for every ring, before it looks at them once more and sleeps; the daemon,
    /// after filling a ring, adds to the wakeup eventfd when it finds the flag clear. One of
    /// the two always sees the other (`Ring::set_polling`). Waking for any ring, not only the
    /// polled CQ's, keeps a program that polls two CQs in turn from sleeping through the other.
    fn sleep(&mut self, conn: &mut Conn, dev: u32, cq: u32, timeout: Duration) -> Result<()> {
        if self.wakeup.is_none() && !self.wakeup_off {
            let fd = CompChannel::new_fd()?;
            match conn.call_with_fds(&Request::AttachWakeup, &[fd.as_fd()]) {
                Ok(Response::Ok) => self.wakeup = Some(fd),
                // An older daemon, or a refusal: park in the daemon from now on.
                _ => self.wakeup_off = true,
            }
        }
        let Some(fd) = &self.wakeup else {
            // A ring CQ's completions are in its ring: the daemon's answer only wakes.
            let wait_us = u32::try_from(timeout.as_micros())
                .unwrap_or(u32::MAX)
                .max(1);
            return match conn.call(&Request::PollCq {
                dev,
                cq,
                max: 0,
                wait_us,
            })? {
                Response::Completions(_) => Ok(()),
                _ => Err(Error::Unexpected("not completions")),
            };
        };
        let broken = |e| ring_broken("completion", &e);
        for ring in self.rings.values() {
            ring.set_polling(false).map_err(broken)?;
        }
        let mut waiting = false;
        for ring in self.rings.values() {
            waiting |= !ring.is_empty().map_err(broken)?;
        }
        if !waiting {
            channel::wait_events(fd.as_fd(), Some(timeout))?;
        }
        for ring in self.rings.values() {
            ring.set_polling(true).map_err(broken)?;
        }
        Ok(())
    }

    /// Takes up to `max` completions from `cq`'s ring into `out`.
    fn pop(&mut self, dev: u32, cq: u32, max: u32, out: &mut Vec<WorkCompletion>) -> Result<()> {
        let Some(ring) = self.rings.get(&(dev, cq)) else {
            return Ok(());
        };
        while out.len() < max as usize {
            match ring.pop(&mut self.buf) {
                Ok(true) => match proto::decode_completion(&self.buf) {
                    Ok(wc) => out.push(wc),
                    Err(e) => {
                        return Err(Error::Io(std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("a completion in the CQ ring does not decode: {e}"),
                        )))
                    }
                },
                Ok(false) => break,
                Err(e) => return Err(ring_broken("completion", &e)),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Qpn, WcOpcode, WcStatus};
    use std::os::unix::net::UnixStream;

    /// A session's rings with one CQ ring, over a connection whose daemon is gone (so any
    /// request fails), and the daemon's end of that ring.
    fn rings_without_a_daemon() -> (CqRings, Conn, Ring) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let conn = Conn {
            stream: ours,
            daemon_pid: 1,
            watch: super::super::liveness::Watch::new(std::path::Path::new("/nonexistent")),
            unresponsive: None,
        };
        let ring = Ring::create("softib-test-cq", 8, proto::CQ_RING_SLOT_LEN).unwrap();
        let daemon = Ring::from_fd(
            ring.fd().try_clone_to_owned().unwrap(),
            8,
            proto::CQ_RING_SLOT_LEN,
        )
        .unwrap();
        ring.set_polling(true).unwrap();
        let mut cqs = CqRings::new(false);
        cqs.rings.insert((0, 5), ring);
        (cqs, conn, daemon)
    }

    fn completion(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 8,
            imm_data: None,
            invalidated_rkey: None,
            qp_num: Qpn::new(77),
            src_qp: Qpn::new(0),
            grh: false,
            slid: crate::Lid(0),
            sl: 0,
            pkey_index: 0,
        }
    }

    #[test]
    fn a_poll_without_wait_never_sleeps_nor_asks_the_daemon() {
        let (mut cqs, mut conn, daemon) = rings_without_a_daemon();
        // However often an empty CQ is polled, the poll neither sleeps (which would attach
        // the wakeup, or park a PollCq: both requests, which fail here) nor asks.
        for _ in 0..10_000 {
            let got = cqs.poll(&mut conn, 0, 5, 16, Duration::ZERO).unwrap();
            assert!(got.is_empty());
        }
        assert!(cqs.wakeup.is_none(), "a poll never prepares to sleep");
        let mut buf = [0u8; proto::COMPLETION_ENTRY_MAX];
        for id in [1, 2] {
            let entry = proto::encode_completion(&completion(id), &mut buf).unwrap();
            assert!(daemon.push(entry).unwrap());
        }
        let got = cqs.poll(&mut conn, 0, 5, 16, Duration::ZERO).unwrap();
        assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn a_waiting_poll_sleeps_through_the_daemon_and_says_when_it_is_gone() {
        let (mut cqs, mut conn, daemon) = rings_without_a_daemon();
        // A completion already there is returned without waiting.
        let mut buf = [0u8; proto::COMPLETION_ENTRY_MAX];
        let entry = proto::encode_completion(&completion(9), &mut buf).unwrap();
        assert!(daemon.push(entry).unwrap());
        let got = cqs
            .poll(&mut conn, 0, 5, 16, Duration::from_secs(5))
            .unwrap();
        assert_eq!(got.len(), 1);
        // Nothing there: the wait goes to sleep, which needs the daemon — gone here.
        let e = cqs
            .poll(&mut conn, 0, 5, 16, Duration::from_millis(1))
            .unwrap_err();
        assert!(matches!(e, Error::DaemonGone { pid: 1 }), "{e}");
    }
}
