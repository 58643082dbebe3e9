//! Posting work requests to the daemon: through the submission ring when the library can
//! vouch for them, else as a request whose answer carries the error.
//!
//! The library checks a post as the verb would — the QP is in a state that takes it, its queue
//! has room (counted from the completions polled, as on hardware), each WR passes
//! `softib_engine::check_send_wr` — so the verb fails at once; then the WRs go into the ring
//! (encoded by reference into a buffer the session reuses) and the daemon's doorbell rings,
//! only when the daemon may be asleep. No request, no reply to wait for.

use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, OwnedFd};

use softib_net::ring::Ring;
use softib_proto::{self as proto, Request, Response, SubmitRef};

use super::{refused_at, ring_broken, Conn};
use crate::{
    CompChannel, Error, ErrorKind, QpCap, QpInitAttr, QpState, QpType, Qpn, RecvWr, Result,
    SendFlags, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

/// Slots of the submission ring.
const SUBMIT_SLOTS: u32 = 4096;

/// A QP of the session: (device index, QPN).
pub(crate) type QpKey = (u32, Qpn);

/// A QP as the library sees it: enough to check `ibv_post_*` without asking the daemon.
#[derive(Debug)]
struct QpTrack {
    qp_type: QpType,
    cap: QpCap,
    sig_all: bool,
    srq: bool,
    state: QpState,
    /// Posted send WRs whose completion has not been polled: (wr_id, signaled). A send
    /// queue slot is free again once the completion of its WR, or of a later signaled WR, is
    /// polled — as on hardware, where the library advances the queue when it polls.
    sq: VecDeque<(u64, bool)>,
    /// Posted receives whose completion has not been polled.
    rq: u32,
}

/// The QPs of a session and its submission ring.
#[derive(Debug)]
pub(crate) struct Posting {
    qps: BTreeMap<QpKey, QpTrack>,
    /// The submission ring and its doorbell (made at the first post that can use it).
    ring: Option<(Ring, OwnedFd)>,
    /// The submission ring is not used (SOFTIB_SUBMIT_RING=0, or the daemon refused it).
    off: bool,
    /// Scratch for the entries of a post (see [`Encoded`]).
    encoded: Encoded,
}

impl Posting {
    pub(crate) fn new(off: bool) -> Posting {
        Posting {
            qps: BTreeMap::new(),
            ring: None,
            off,
            encoded: Encoded::default(),
        }
    }

    /// Starts tracking a QP the daemon just made.
    pub(crate) fn track(&mut self, dev: u32, qpn: Qpn, init: &QpInitAttr) {
        self.qps.insert(
            (dev, qpn),
            QpTrack {
                qp_type: init.qp_type,
                cap: init.cap.as_created(),
                sig_all: init.sq_sig_all,
                srq: init.srq.is_some(),
                state: QpState::Reset,
                sq: VecDeque::new(),
                rq: 0,
            },
        );
    }

    /// A QP the daemon moved to `state`.
    pub(crate) fn set_state(&mut self, dev: u32, qpn: Qpn, state: QpState) {
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            t.state = state;
            if state == QpState::Reset {
                // RESET empties both queues without completions.
                t.sq.clear();
                t.rq = 0;
            }
        }
    }

    /// Forgets a destroyed QP.
    pub(crate) fn forget(&mut self, dev: u32, qpn: Qpn) {
        self.qps.remove(&(dev, qpn));
    }

    /// `ibv_post_send` of a list: all posted, or the error of the first that was not (the ones
    /// before it are posted, as with the verb's `bad_wr`).
    pub(crate) fn post_send(&mut self, conn: &mut Conn, qp: QpKey, wrs: Vec<SendWr>) -> Result<()> {
        let (dev, qpn) = qp;
        if self.try_submit_sends(conn, qp, &wrs)? {
            return Ok(());
        }
        let marks: Vec<(u64, bool)> = wrs
            .iter()
            .map(|w| (w.wr_id, w.flags.contains(SendFlags::SIGNALED)))
            .collect();
        let (posted, error) = conn.posted(&Request::PostSend { dev, qpn, wrs })?;
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            let n = if error.is_some() {
                posted as usize
            } else {
                marks.len()
            };
            let sig_all = t.sig_all;
            t.sq.extend(marks.into_iter().take(n).map(|(id, s)| (id, s || sig_all)));
        }
        match error {
            None => Ok(()),
            Some(message) => Err(refused_at("work request", posted, message)),
        }
    }

    /// `ibv_post_recv` of a list.
    pub(crate) fn post_recv(&mut self, conn: &mut Conn, qp: QpKey, wrs: Vec<RecvWr>) -> Result<()> {
        let (dev, qpn) = qp;
        if self.try_submit_recvs(conn, qp, &wrs)? {
            return Ok(());
        }
        let n = wrs.len() as u32;
        let (posted, error) = conn.posted(&Request::PostRecv { dev, qpn, wrs })?;
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            t.rq += if error.is_some() { posted } else { n };
        }
        match error {
            None => Ok(()),
            Some(message) => Err(refused_at("receive request", posted, message)),
        }
    }

    /// Frees the queue slots of the WRs whose completions were just polled.
    pub(crate) fn note_completions(&mut self, dev: u32, wcs: &[WorkCompletion]) {
        for wc in wcs {
            let Some(t) = self.qps.get_mut(&(dev, wc.qp_num)) else {
                continue;
            };
            if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                t.rq = t.rq.saturating_sub(1);
                continue;
            }
            // Send completions come in the order the WRs were posted, and a successful one
            // stands for the unsignaled WRs before it: it is the oldest signaled WR with its
            // wr_id (programs such as perftest give every WR the same wr_id, so the id alone
            // would find an older, unsignaled one). Errors complete WRs one by one.
            let ok = wc.status == WcStatus::Success;
            if let Some(i) =
                t.sq.iter()
                    .position(|&(id, signaled)| id == wc.wr_id && (signaled || !ok))
            {
                t.sq.drain(..=i);
            }
        }
    }

    /// Puts `wrs` into the submission ring when the library can vouch for them; `false` when
    /// they must go as a request.
    fn try_submit_sends(&mut self, conn: &mut Conn, qp: QpKey, wrs: &[SendWr]) -> Result<bool> {
        let (dev, qpn) = qp;
        let Some(t) = self.ring_may_take(qp, wrs.len()) else {
            return Ok(false);
        };
        if t.state != QpState::Rts {
            return Ok(false);
        }
        // A slot is free once its completion (or a later signaled one) has been polled, as on
        // hardware: so the library, not the daemon, knows when the queue is full.
        let room = (t.cap.max_send_wr as usize).saturating_sub(t.sq.len());
        if wrs.len() > room {
            return Err(Error::Refused {
                kind: ErrorKind::Exhausted,
                message: format!(
                    "the send queue is full: {} work requests are posted whose completions \
                     have not been polled (max_send_wr {}); poll the CQ, and signal now and \
                     then when posting unsignaled",
                    t.sq.len(),
                    t.cap.max_send_wr
                ),
            });
        }
        let (qp_type, cap) = (t.qp_type, t.cap);
        let submitted = self.submit_all(conn, wrs, |entries, wr| {
            softib_engine::check_send_wr(qp_type, &cap, wr, u32::MAX).is_ok()
                && entries.push(&SubmitRef::Send { dev, qpn, wr })
        })?;
        if !submitted {
            return Ok(false);
        }
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            let sig_all = t.sig_all;
            t.sq.extend(
                wrs.iter()
                    .map(|w| (w.wr_id, sig_all || w.flags.contains(SendFlags::SIGNALED))),
            );
        }
        Ok(true)
    }

    /// Puts receives into the submission ring when the library can vouch for them.
    fn try_submit_recvs(&mut self, conn: &mut Conn, qp: QpKey, wrs: &[RecvWr]) -> Result<bool> {
        let (dev, qpn) = qp;
        let Some(t) = self.ring_may_take(qp, wrs.len()) else {
            return Ok(false);
        };
        if t.srq || t.state == QpState::Reset {
            return Ok(false);
        }
        let room = t.cap.max_recv_wr.saturating_sub(t.rq) as usize;
        if wrs.len() > room {
            return Err(Error::Refused {
                kind: ErrorKind::Exhausted,
                message: format!(
                    "the receive queue is full: {} receives are posted whose completions have \
                     not been polled (max_recv_wr {}); poll the CQ",
                    t.rq, t.cap.max_recv_wr
                ),
            });
        }
        let max_sge = t.cap.max_recv_sge as usize;
        let submitted = self.submit_all(conn, wrs, |entries, wr| {
            wr.sg_list.len() <= max_sge && entries.push(&SubmitRef::Recv { dev, qpn, wr })
        })?;
        if !submitted {
            return Ok(false);
        }
        if let Some(t) = self.qps.get_mut(&(dev, qpn)) {
            t.rq += wrs.len() as u32;
        }
        Ok(true)
    }

    /// The QP's track, when a post of `n` WRs to it may go through the ring at all.
    fn ring_may_take(&self, qp: QpKey, n: usize) -> Option<&QpTrack> {
        if self.off || n == 0 {
            return None;
        }
        self.qps.get(&qp)
    }

    /// Encodes every WR of a post with `encode` (which checks it too) into the session's
    /// scratch and pushes them all into the submission ring; `false`, with nothing pushed, when
    /// one is refused or the ring lacks room.
    fn submit_all<W>(
        &mut self,
        conn: &mut Conn,
        wrs: &[W],
        mut encode: impl FnMut(&mut Encoded, &W) -> bool,
    ) -> Result<bool> {
        let mut entries = std::mem::take(&mut self.encoded);
        entries.clear();
        let encoded = wrs.iter().all(|wr| encode(&mut entries, wr));
        let submitted = encoded && self.submit_entries(conn, &entries)?;
        self.encoded = entries;
        Ok(submitted)
    }

    /// Pushes encoded entries into the submission ring (made on first use) and rings the
    /// doorbell; `false` when the ring lacks room for all of them (nothing pushed then).
    fn submit_entries(&mut self, conn: &mut Conn, entries: &Encoded) -> Result<bool> {
        if self.ring.is_none() {
            let ring = Ring::create("softib-submit", SUBMIT_SLOTS, proto::SUBMIT_SLOT_LEN)?;
            let bell = CompChannel::new_fd()?;
            match conn.call_with_fds(
                &Request::AttachSubmitRing {
                    slots: SUBMIT_SLOTS,
                },
                &[ring.fd(), bell.as_fd()],
            ) {
                Ok(Response::Ok) => self.ring = Some((ring, bell)),
                // An older daemon, or a refusal: post by request from now on.
                _ => {
                    self.off = true;
                    return Ok(false);
                }
            }
        }
        let Some((ring, bell)) = &self.ring else {
            return Ok(false);
        };
        let broken = |e| ring_broken("submission", &e);
        let used = ring.len().map_err(broken)?;
        if ring.capacity() - used < entries.len() as u64 {
            return Ok(false);
        }
        for e in entries.iter() {
            if !ring.push(e).map_err(broken)? {
                return Err(Error::Unexpected("the submission ring filled while in use"));
            }
        }
        // A daemon that is polling its rings takes these at its next turn: the doorbell (a
        // system call here, a wakeup there) is only for one that may be asleep. An eventfd
        // adds to its counter; a full counter is readable already.
        if ring.wants_wakeup().unwrap_or(true) {
            let _ = rustix::io::write(bell, &1u64.to_ne_bytes());
        }
        Ok(true)
    }
}

/// Work requests encoded for the submission ring, back to back. A session keeps one and
/// reuses it, so that posting allocates nothing once it has grown to the usual batch (a clone
/// and an encoding allocated per WR cost a quarter of a posting client's time at 2-byte
/// messages).
#[derive(Debug, Default)]
struct Encoded {
    bytes: Vec<u8>,
    /// Where each entry ends in `bytes`.
    ends: Vec<usize>,
}

impl Encoded {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
    }

    /// Appends `entry`; `false` when it does not fit a ring slot (it then goes as a request).
    fn push(&mut self, entry: &SubmitRef<'_>) -> bool {
        let mut slot = [0u8; proto::SUBMIT_ENTRY_MAX];
        match entry.encode(&mut slot) {
            Some(b) => {
                self.bytes.extend_from_slice(b);
                self.ends.push(self.bytes.len());
                true
            }
            None => false,
        }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Sge, WrOpcode};

    #[test]
    fn encoded_entries_come_back_as_the_submits_they_were() {
        let mut e = Encoded::default();
        let qpn = Qpn::new(77);
        let sge = |n| Sge {
            addr: 0x1000 * n,
            length: 64,
            lkey: 3,
        };
        let sends: Vec<SendWr> = (1..=3u64)
            .map(|n| SendWr {
                wr_id: n,
                opcode: WrOpcode::Send,
                sg_list: (0..n).map(sge).collect(),
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: None,
            })
            .collect();
        for round in 0..2 {
            e.clear();
            for wr in &sends {
                assert!(e.push(&SubmitRef::Send { dev: 1, qpn, wr }));
            }
            assert_eq!(e.len(), 3, "round {round}");
            let back: Vec<SendWr> = e
                .iter()
                .map(|b| match proto::Submit::decode(b).unwrap() {
                    proto::Submit::Send { dev: 1, wr, .. } => wr,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(back, sends);
        }
        // An entry larger than a ring slot is refused, and what was there stays.
        let huge = SendWr {
            inline_data: Some(vec![0; proto::SUBMIT_SLOT_LEN]),
            ..sends[0].clone()
        };
        assert!(!e.push(&SubmitRef::Send {
            dev: 1,
            qpn,
            wr: &huge
        }));
        assert_eq!(e.len(), 3);
        assert_eq!(e.iter().count(), 3);
    }
}
