//! The send queue: the posted send WQEs with each one's progress, the requester's position,
//! the completer's timers and retry counters, and the congestion window.
//!
//! Two roles work it. The requester (`requester.rs`) starts WQEs (assigning their PSNs) and
//! records what it sent; the completer (`completer.rs`) records what was acknowledged, rewinds
//! on loss (go-back-N), runs the local ACK and RNR timers and retires finished WQEs. The state
//! is private to this module: each role reads it through accessors and changes it only through
//! the methods below, each named after the protocol event it records ("acked through PSN n",
//! "rewind to PSN n", "wait for the RNR timer until t"), so neither role writes the other's
//! position directly.

use std::cell::Cell;
use std::collections::VecDeque;

use softib_wire::Psn;

use crate::time::{Duration, Instant};
use crate::verbs::{SendWr, WcStatus, WrOpcode};

/// One send work queue element and its progress. Only the send queue changes it.
#[derive(Debug, Clone)]
pub(crate) struct SendWqe {
    wr: SendWr,
    len: u32,
    signaled: bool,
    first_psn: Option<Psn>,
    npkts: u32,
    seg: u32,
    sent: u32,
    /// The most of its PSNs ever transmitted: `sent` goes back on a rewind, this does not.
    sent_max: u32,
    acked: u32,
    read_restart: u32,
    status: Option<WcStatus>,
    vendor_err: u32,
}

impl SendWqe {
    /// A WQE as `post_send` queues it: not started, or already completed with `status` (a WR
    /// posted to a QP in ERR or SQE is flushed at once).
    #[inline]
    pub fn new(wr: SendWr, len: u32, signaled: bool, status: Option<WcStatus>) -> SendWqe {
        SendWqe {
            wr,
            len,
            signaled,
            first_psn: None,
            npkts: 0,
            seg: 0,
            sent: 0,
            sent_max: 0,
            acked: 0,
            read_restart: 0,
            status,
            vendor_err: 0,
        }
    }

    /// The work request.
    #[inline]
    pub fn wr(&self) -> &SendWr {
        &self.wr
    }
    /// Message length: bytes sent, or bytes to read, or 8 for atomics.
    #[inline]
    pub fn len(&self) -> u32 {
        self.len
    }
    /// Whether a successful completion is reported.
    #[inline]
    pub fn signaled(&self) -> bool {
        self.signaled
    }
    /// The first PSN, once assigned (when the WQE first starts transmitting).
    #[inline]
    pub fn first_psn(&self) -> Option<Psn> {
        self.first_psn
    }
    /// How many PSNs the WQE occupies: request packets, or READ response packets.
    #[inline]
    pub fn npkts(&self) -> u32 {
        self.npkts
    }
    /// The payload bytes per request packet, fixed when the WQE starts: the path MTU, or
    /// [`crate::IN_PROCESS_SEGMENT`] for an RC SEND or WRITE of an in-process QP.
    #[inline]
    pub fn seg(&self) -> u32 {
        self.seg
    }
    /// How many of its PSNs have been transmitted (READ: `npkts` once the request is out).
    #[inline]
    pub fn sent(&self) -> u32 {
        self.sent
    }
    /// How many of its PSNs have ever been transmitted, before a rewind too: how far an
    /// acknowledgement may reach.
    #[inline]
    pub fn sent_max(&self) -> u32 {
        self.sent_max
    }
    /// How many of its PSNs are acknowledged (READ: response packets received in order).
    #[inline]
    pub fn acked(&self) -> u32 {
        self.acked
    }
    /// READ: the packet index at which the current response message starts (0, or where a
    /// retried READ asked the responder to resume).
    #[inline]
    pub fn read_restart(&self) -> u32 {
        self.read_restart
    }
    /// The completion status once the WQE is finished.
    #[inline]
    pub fn status(&self) -> Option<WcStatus> {
        self.status
    }
    /// Extra detail for an error completion (`vendor_err`).
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.vendor_err
    }

    #[inline]
    pub fn is_read_or_atomic(&self) -> bool {
        self.wr.opcode.is_read_or_atomic()
    }
    #[inline]
    pub fn is_read(&self) -> bool {
        matches!(self.wr.opcode, WrOpcode::RdmaRead(_))
    }
    #[inline]
    pub fn is_atomic(&self) -> bool {
        self.is_read_or_atomic() && !self.is_read()
    }
    /// Whether `psn` is one of the WQE's PSNs.
    #[inline]
    pub fn contains(&self, psn: Psn) -> bool {
        self.first_psn.is_some_and(|f| psn.in_window(f, self.npkts))
    }
}

/// The send queue and the requester's position in it.
#[derive(Debug, Clone, Default)]
pub(crate) struct SendQueue {
    /// Posted WQEs not yet retired, oldest first.
    wqes: VecDeque<SendWqe>,
    /// The PSN the next not-yet-started WQE gets.
    next_psn: Psn,
    /// Retries left for timeouts and sequence errors.
    retry_left: u8,
    /// RNR retries left (ignored when the QP's rnr_retry is 7, "infinite").
    rnr_retry_left: u8,
    /// Until when an RNR NAK holds the requester back.
    rnr_until: Option<Instant>,
    /// When the local ACK timeout fires, while PSNs are outstanding.
    retransmit_at: Option<Instant>,
    /// How many WQEs have been retired (a progress measure).
    completed_count: u64,
    /// Acknowledged packets and completed WQEs, counted as the completer records them: what
    /// tells it that a response made forward progress without scanning the queue.
    progress: u64,
    /// SQD was entered with work in progress: the SQ Drained event is still due.
    drain_pending: bool,
    /// How many WQEs at the head are finished or have every packet sent, as the requester
    /// last found them: where its search for the next packet starts, instead of at the
    /// head of up to `max_send_wr` WQEs in flight (it was 14% of a busy daemon). Only a
    /// rewind (go-back-N) makes such a WQE sendable again, and resets it; retiring one
    /// lowers it.
    sent_prefix: Cell<usize>,
    /// The congestion window in packets (`None`: the full PSN window). A soft HCA's "wire"
    /// is a socket buffer that overflows when many QPs send at once; go-back-N then resends
    /// everything in flight, which overflows it again. Halving the window on each loss and
    /// growing it by one per acknowledgement that makes progress (AIMD, as TCP and RoCE's
    /// DCQCN do in spirit) lets the aggregate settle below what the receiver drains.
    cwnd: Option<u32>,
}

/// The smallest congestion window.
pub(crate) const MIN_CWND: u32 = 2;

// ---- reading ----------------------------------------------------------------------------------

impl SendQueue {
    /// Posted WQEs not yet retired.
    #[inline]
    pub fn len(&self) -> usize {
        self.wqes.len()
    }

    /// WQE `i` (counted from the oldest not retired).
    #[inline]
    pub fn wqe(&self, i: usize) -> &SendWqe {
        &self.wqes[i]
    }

    /// The WQEs not yet retired, oldest first.
    #[inline]
    pub fn iter(&self) -> impl Iterator<Item = &SendWqe> + '_ {
        self.wqes.iter()
    }

    /// The PSN the next WQE to start gets.
    #[inline]
    pub fn next_psn(&self) -> Psn {
        self.next_psn
    }

    /// Until when an RNR NAK holds the requester back.
    #[inline]
    pub fn rnr_until(&self) -> Option<Instant> {
        self.rnr_until
    }

    /// When the local ACK timer fires.
    #[inline]
    pub fn retransmit_at(&self) -> Option<Instant> {
        self.retransmit_at
    }

    /// The congestion window (`None`: the full PSN window).
    #[inline]
    pub fn cwnd(&self) -> Option<u32> {
        self.cwnd
    }

    /// How many WQEs at the head the requester last found finished or wholly sent.
    #[inline]
    pub fn sent_prefix(&self) -> usize {
        self.sent_prefix.get()
    }

    /// The earliest timer.
    #[inline]
    pub fn deadline(&self) -> Option<Instant> {
        match (self.retransmit_at, self.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The window the requester may fill: the congestion window within the PSN window.
    #[inline]
    pub fn window(&self, max: u32) -> u32 {
        self.cwnd.map_or(max, |c| c.min(max)).max(1)
    }

    /// The oldest PSN that is transmitted but not acknowledged, if any.
    #[inline]
    pub fn una(&self) -> Option<Psn> {
        for w in &self.wqes {
            let first = w.first_psn?;
            if w.status.is_some() {
                continue;
            }
            if w.acked < w.sent {
                return Some(first.add(w.acked));
            }
            if w.acked < w.npkts {
                return None;
            }
        }
        None
    }

    /// The oldest PSN not yet acknowledged (the first unfinished WQE's next unacknowledged
    /// PSN), whether or not a rewind has taken the requester back before it.
    #[inline]
    pub fn oldest_unacked(&self) -> Option<Psn> {
        let w = self.wqes.iter().find(|w| w.status.is_none())?;
        w.first_psn.map(|f| f.add(w.acked))
    }

    /// Whether a WQE has started and not finished: what SQD waits for before the SQ is
    /// drained (a WQE partly sent, even with every sent PSN acknowledged, is still going).
    #[inline]
    pub fn in_progress(&self) -> bool {
        self.wqes
            .iter()
            .any(|w| w.status.is_none() && w.first_psn.is_some())
    }

    /// Whether any transmitted PSN is unacknowledged.
    #[inline]
    pub fn has_outstanding(&self) -> bool {
        self.wqes
            .iter()
            .any(|w| w.status.is_none() && w.first_psn.is_some() && w.acked < w.sent)
    }

    /// A number that grows whenever an acknowledgement makes progress: every packet newly
    /// acknowledged and every WQE newly retired counts.
    #[inline]
    pub fn progress_mark(&self) -> u64 {
        self.progress + self.completed_count
    }
}

// ---- posting, completing, retiring ------------------------------------------------------------

impl SendQueue {
    /// Queues a posted WQE.
    #[inline]
    pub fn post(&mut self, w: SendWqe) {
        self.wqes.push_back(w);
    }

    /// Finishes WQE `i` with `status` (and `vendor_err` for an error).
    #[inline]
    pub fn finish(&mut self, i: usize, status: WcStatus, vendor_err: u32) {
        if let Some(w) = self.wqes.get_mut(i) {
            w.status = Some(status);
            w.vendor_err = vendor_err;
        }
    }

    /// Takes the oldest WQE if it is finished: completions leave in posting order.
    #[inline]
    pub fn pop_finished(&mut self) -> Option<SendWqe> {
        self.wqes.front()?.status?;
        let w = self.wqes.pop_front()?;
        let prefix = &self.sent_prefix;
        prefix.set(prefix.get().saturating_sub(1));
        self.completed_count += 1;
        Some(w)
    }

    /// The QP entered ERR (IBA §10.3.1): every unfinished WQE is flushed, and so is every
    /// later one that had succeeded — completions come in order, so after the first error
    /// nothing completes successfully (a READ answered after an earlier atomic failed). The
    /// timers stop.
    #[inline]
    pub fn flush_in_order(&mut self) {
        let mut failed = false;
        for w in self.wqes.iter_mut() {
            match w.status {
                None => w.status = Some(WcStatus::WrFlushErr),
                Some(WcStatus::Success) if failed => w.status = Some(WcStatus::WrFlushErr),
                Some(WcStatus::Success) => {}
                Some(_) => failed = true,
            }
            if w.status == Some(WcStatus::WrFlushErr) {
                failed = true;
            }
        }
        self.retransmit_at = None;
        self.rnr_until = None;
    }

    /// The send queue entered SQE (UC, UD): every unfinished WQE is flushed.
    #[inline]
    pub fn flush_unfinished(&mut self) {
        for w in self.wqes.iter_mut() {
            if w.status.is_none() {
                w.status = Some(WcStatus::WrFlushErr);
            }
        }
    }
}

// ---- the requester's events -------------------------------------------------------------------

impl SendQueue {
    /// The first WQE that is neither finished nor wholly sent: the one the requester sends
    /// from next (or starts).
    #[inline]
    pub fn first_to_send(&self) -> Option<usize> {
        let mut i = self.sent_prefix.get().min(self.wqes.len());
        while let Some(w) = self.wqes.get(i) {
            if w.status.is_some() || (w.first_psn.is_some() && w.sent >= w.npkts) {
                i += 1;
            } else {
                break;
            }
        }
        self.sent_prefix.set(i);
        self.wqes.get(i).map(|_| i)
    }

    /// The send PSN the QP starts from (RTR → RTS with `sq_psn`).
    #[inline]
    pub fn start_at(&mut self, psn: Psn) {
        self.next_psn = psn;
    }

    /// WQE `i` starts: it takes the next `npkts` PSNs, sent in segments of `seg` bytes.
    #[inline]
    pub fn start(&mut self, i: usize, seg: u32, npkts: u32) {
        let w = &mut self.wqes[i];
        w.seg = seg;
        w.npkts = npkts;
        w.first_psn = Some(self.next_psn);
        self.next_psn = self.next_psn.add(npkts);
    }

    /// WQE `i`'s next packet went out (a READ or atomic's request: all its PSNs). Returns
    /// whether every packet of the WQE is now sent.
    #[inline]
    pub fn record_sent(&mut self, i: usize) -> bool {
        let w = &mut self.wqes[i];
        if w.is_read_or_atomic() {
            w.sent = w.npkts;
        } else {
            w.sent += 1;
        }
        w.sent_max = w.sent_max.max(w.sent);
        if w.is_read() {
            w.read_restart = w.acked;
        }
        w.sent == w.npkts
    }

    /// Sending again ends an RNR wait.
    #[inline]
    pub fn end_rnr_wait(&mut self) {
        self.rnr_until = None;
    }

    /// Starts the local ACK timer (`timeout` is the QP's exponent) unless it runs already.
    #[inline]
    pub fn arm_retransmit(&mut self, now: Instant, timeout: u8) {
        if self.retransmit_at.is_none() {
            self.retransmit_at = Duration::local_ack_timeout(timeout).map(|d| now + d);
        }
    }
}

// ---- the completer's events -------------------------------------------------------------------

impl SendQueue {
    /// Every PSN up to and including `psn` is acknowledged (an ACK, or implied by a NAK or a
    /// response). READs and atomics complete only with their data: an acknowledgement that
    /// passes an unfinished one means its responses were lost (IBA §9.7.5.1.2, "implied
    /// NAK"): the PSN to retry from is returned.
    #[inline]
    pub fn ack_through(&mut self, psn: Psn) -> Option<Psn> {
        let mut retry_at = None;
        for w in self.wqes.iter_mut() {
            if w.status.is_some() {
                continue;
            }
            let Some(first) = w.first_psn else { break };
            if psn.diff(first) < 0 {
                break;
            }
            let last = first.add(w.npkts - 1);
            if w.is_read_or_atomic() {
                // Only while its request is out: after a rewind, further (duplicate)
                // acknowledgements must not cost another retry each.
                if psn.diff(last) >= 0 && w.acked < w.npkts && w.sent == w.npkts {
                    retry_at = Some(first.add(w.acked));
                }
                break;
            }
            // Every PSN it names that was ever transmitted, before a rewind too (IBA
            // §9.7.5.1.1): an ACK that comes after the timer sent the requester back
            // acknowledges what the responder has, which is not sent again. Never one not yet
            // transmitted (no responder can have it).
            let n = (psn.diff(first) + 1).min(w.npkts as i32) as u32;
            let n = n.min(w.sent_max);
            if n > w.acked {
                self.progress += u64::from(n - w.acked);
                w.acked = n;
                w.sent = w.sent.max(n);
            }
            if w.acked == w.npkts {
                w.status = Some(WcStatus::Success);
                self.progress += 1;
            }
            if psn.diff(last) < 0 {
                break;
            }
        }
        retry_at
    }

    /// The next READ response packet of WQE `i` arrived and was placed.
    #[inline]
    pub fn record_read_response(&mut self, i: usize) {
        let w = &mut self.wqes[i];
        w.acked += 1;
        self.progress += 1;
        if w.acked == w.npkts {
            w.status = Some(WcStatus::Success);
            self.progress += 1;
        }
    }

    /// WQE `i`'s atomic acknowledgement arrived and its original value was placed.
    #[inline]
    pub fn record_atomic_ack(&mut self, i: usize) {
        let w = &mut self.wqes[i];
        w.acked = 1;
        w.status = Some(WcStatus::Success);
        self.progress += 2;
    }

    /// Moves the requester back so that the next packet sent has PSN `psn` (go-back-N); the
    /// local ACK timer stops.
    #[inline]
    pub fn rewind(&mut self, psn: Psn) {
        self.sent_prefix.set(0);
        let mut found = false;
        for w in self.wqes.iter_mut() {
            if w.status.is_some() {
                continue;
            }
            let Some(first) = w.first_psn else { break };
            if !found {
                if w.contains(psn) {
                    found = true;
                    w.sent = if w.is_read_or_atomic() {
                        w.acked
                    } else {
                        (psn.diff(first) as u32).max(w.acked)
                    };
                } else if psn.diff(first) < 0 {
                    found = true;
                    w.sent = w.acked;
                }
            } else {
                w.sent = w.acked;
            }
        }
        self.retransmit_at = None;
    }

    /// Forward progress (IBA §9.7.6.1.3): the retry counters start again.
    #[inline]
    pub fn reset_retries(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retry_left = retry_cnt;
        self.rnr_retry_left = rnr_retry;
    }

    /// Uses up one retry for a timeout or sequence error; false when none is left.
    #[inline]
    pub fn use_retry(&mut self) -> bool {
        if self.retry_left == 0 {
            return false;
        }
        self.retry_left -= 1;
        true
    }

    /// Uses up one RNR retry (none when they are `infinite`); false when none is left.
    #[inline]
    pub fn use_rnr_retry(&mut self, infinite: bool) -> bool {
        if infinite {
            return true;
        }
        if self.rnr_retry_left == 0 {
            return false;
        }
        self.rnr_retry_left -= 1;
        true
    }

    /// An RNR NAK holds the requester back until `until`.
    #[inline]
    pub fn start_rnr_wait(&mut self, until: Instant) {
        self.rnr_until = Some(until);
    }

    /// Whether the RNR wait is over at `now`; ends it if so.
    #[inline]
    pub fn rnr_wait_over(&mut self, now: Instant) -> bool {
        take_due(&mut self.rnr_until, now)
    }

    /// Whether the local ACK timer is due at `now`; stops it if so.
    #[inline]
    pub fn retransmit_due(&mut self, now: Instant) -> bool {
        take_due(&mut self.retransmit_at, now)
    }

    /// Restarts the local ACK timer while PSNs are outstanding and no RNR wait runs, stops it
    /// otherwise.
    #[inline]
    pub fn rearm_retransmit(&mut self, now: Instant, timeout: u8) {
        let at = if self.has_outstanding() && self.rnr_until.is_none() {
            Duration::local_ack_timeout(timeout).map(|d| now + d)
        } else {
            None
        };
        #[cfg(feature = "planted-bugs")]
        let at = if crate::planted::active(crate::planted::Bug::AckTimerNotRearmed) {
            None
        } else {
            at
        };
        self.retransmit_at = at;
    }

    /// Starts the local ACK timer if it is stopped while PSNs are outstanding and no RNR wait
    /// runs (an RNR wait ended, or the timeout became finite).
    #[inline]
    pub fn resume_retransmit(&mut self, now: Instant, timeout: u8) {
        if self.retransmit_at.is_none() {
            self.rearm_retransmit(now, timeout);
        }
    }

    /// A loss: halve the window.
    #[inline]
    pub fn on_loss(&mut self, max: u32) {
        self.cwnd = Some((self.window(max) / 2).max(MIN_CWND.min(max)));
    }

    /// Progress: widen the window by one, up to the PSN window (then no limit is kept).
    #[inline]
    pub fn on_progress(&mut self, max: u32) {
        if let Some(c) = self.cwnd {
            self.cwnd = (c + 1 < max).then_some(c + 1);
        }
    }
}

/// Whether the timer in `slot` is due at `now`; clears it if so.
#[inline]
fn take_due(slot: &mut Option<Instant>, now: Instant) -> bool {
    let due = slot.is_some_and(|t| t <= now);
    if due {
        *slot = None;
    }
    due
}

// ---- SQD --------------------------------------------------------------------------------------

impl SendQueue {
    /// SQD is entered: returns whether the send queue is drained at once (nothing started is
    /// unfinished); otherwise the SQ Drained event is due when it is ([`SendQueue::drained`]).
    #[inline]
    pub fn begin_drain(&mut self) -> bool {
        self.drain_pending = self.in_progress();
        !self.drain_pending
    }

    /// Whether a drain begun in SQD has just finished (once: it is then no longer pending).
    #[inline]
    pub fn drained(&mut self) -> bool {
        if self.drain_pending && !self.in_progress() {
            self.drain_pending = false;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::{Qp, QpCap, QpInitAttr};
    use crate::verbs::{QpState, QpType, RemoteAddr, SendFlags};
    use crate::{CqHandle, PdHandle};
    use softib_wire::{Qpn, RKey};

    const NOW: Instant = Instant::from_micros(1_000_000);

    /// An RC QP in RTS whose send queue holds `wqes` (each: opcode, npkts, sent, acked),
    /// started back to back from PSN 100, with the local ACK timer running.
    fn rc_with(wqes: &[(WrOpcode, u32, u32, u32)]) -> Qp {
        let mut qp = Qp::new(
            Qpn::new(0x42),
            QpInitAttr {
                qp_type: QpType::Rc,
                pd: PdHandle(1),
                send_cq: CqHandle(1),
                recv_cq: CqHandle(1),
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    ..QpCap::default()
                },
                sq_sig_all: true,
            },
        );
        qp.state = QpState::Rts;
        qp.sq.next_psn = Psn::new(100);
        for (opcode, npkts, sent, acked) in wqes {
            let wr = SendWr {
                wr_id: 0,
                opcode: *opcode,
                sg_list: Vec::new(),
                flags: SendFlags::SIGNALED,
                inline_data: None,
                ud: None,
            };
            let mut w = SendWqe::new(wr, npkts * 1024, true, None);
            w.first_psn = Some(qp.sq.next_psn);
            w.npkts = *npkts;
            w.seg = 1024;
            w.sent = *sent;
            w.sent_max = *sent;
            w.acked = *acked;
            qp.sq.next_psn = qp.sq.next_psn.add(*npkts);
            qp.sq.wqes.push_back(w);
        }
        qp.sq.retransmit_at = Some(NOW);
        qp
    }

    fn read() -> WrOpcode {
        WrOpcode::RdmaRead(RemoteAddr {
            addr: 0,
            rkey: RKey(1),
        })
    }

    fn write() -> WrOpcode {
        WrOpcode::RdmaWrite(RemoteAddr {
            addr: 0,
            rkey: RKey(1),
        })
    }

    /// The rule the requester and the completer find broken, if any.
    fn broken(qp: &Qp) -> Option<&'static str> {
        let requester = qp.check_requester(128).err();
        requester
            .or_else(|| qp.check_completer().err())
            .map(|b| b.invariant)
    }

    #[test]
    fn a_consistent_queue_breaks_no_rule() {
        // A WRITE half acknowledged, a READ waiting for its responses, a SEND not yet sent.
        let qp = rc_with(&[
            (write(), 4, 4, 2),
            (read(), 3, 3, 0),
            (WrOpcode::Send, 2, 0, 0),
        ]);
        assert_eq!(broken(&qp), None);
    }

    #[test]
    fn each_requester_rule_catches_the_state_that_breaks_it() {
        let mut qp = rc_with(&[(write(), 4, 2, 3)]);
        assert_eq!(
            broken(&qp),
            Some("only PSNs that were sent are acknowledged")
        );
        qp = rc_with(&[(write(), 4, 4, 0), (WrOpcode::Send, 1, 1, 0)]);
        qp.sq.wqes[1].first_psn = Some(Psn::new(105));
        assert_eq!(broken(&qp), Some("started WQEs take consecutive PSNs"));
        qp = rc_with(&[(write(), 4, 4, 0)]);
        qp.sq.next_psn = Psn::new(103);
        assert_eq!(
            broken(&qp),
            Some("the newest started WQE ends where the next one will start (next_psn)")
        );
        qp = rc_with(&[(write(), 4, 2, 0), (WrOpcode::Send, 1, 0, 0)]);
        qp.sq.sent_prefix.set(1);
        assert_eq!(
            broken(&qp),
            Some("every WQE before the requester's search start is finished or wholly sent")
        );
        qp = rc_with(&[(read(), 8, 4, 2)]);
        assert_eq!(
            broken(&qp),
            Some("an unfinished READ's request is out, or is to be sent again from its first missing response")
        );
        qp = rc_with(&[(write(), 4, 4, 0)]);
        qp.sq.cwnd = Some(1);
        assert_eq!(
            broken(&qp),
            Some("the congestion window stays between its floor and the PSN window")
        );
    }

    #[test]
    fn each_completer_rule_catches_the_state_that_breaks_it() {
        let mut qp = rc_with(&[(write(), 4, 4, 1)]);
        qp.sq.retransmit_at = None;
        assert_eq!(
            broken(&qp),
            Some("while a transmitted PSN awaits its acknowledgement and no RNR wait runs, the local ACK timer runs")
        );
        qp.sq.rnr_until = Some(NOW);
        qp.sq.retransmit_at = Some(NOW);
        assert_eq!(
            broken(&qp),
            Some("an RNR wait stops the local ACK timer (it runs again when the wait ends)")
        );
        qp = rc_with(&[(write(), 4, 4, 4)]);
        qp.sq.retransmit_at = None;
        assert_eq!(
            broken(&qp),
            Some("a WQE whose every PSN is acknowledged (or answered) is finished")
        );
        qp = rc_with(&[(write(), 4, 4, 4)]);
        qp.sq.wqes[0].status = Some(WcStatus::Success);
        qp.sq.retransmit_at = None;
        assert_eq!(
            broken(&qp),
            Some("finished WQEs are retired at once, in posting order: the oldest is unfinished")
        );
        qp = rc_with(&[(write(), 4, 4, 1)]);
        qp.state = QpState::Err;
        assert_eq!(
            broken(&qp),
            Some("only an RC QP in RTS or SQD runs the local ACK or RNR timer")
        );
        for (sent, sent_max) in [(3, 2), (4, 5)] {
            qp = rc_with(&[(write(), 4, sent, 1)]);
            qp.sq.wqes[0].sent_max = sent_max;
            assert_eq!(
                broken(&qp),
                Some("what an acknowledgement may reach (the most PSNs ever sent) is at least what is sent now, at most the WQE"),
                "sent {sent}, most ever sent {sent_max}"
            );
        }
    }

    #[test]
    fn no_ack_timer_is_needed_while_what_precedes_the_outstanding_psns_is_to_be_resent() {
        // A sequence NAK inside the WRITE passed the unanswered READ before it: the READ was
        // rewound (its request is to go again) while the WRITE's packets before the NAK are
        // still counted as sent. The requester resends the READ first, which starts the timer.
        let mut qp = rc_with(&[(read(), 2, 0, 0), (write(), 4, 2, 0)]);
        qp.sq.retransmit_at = None;
        assert_eq!(qp.sq.una(), None);
        assert!(qp.sq.has_outstanding());
        assert_eq!(broken(&qp), None);
    }

    #[test]
    fn the_congestion_window_halves_on_each_loss_and_grows_back_by_one_per_progress() {
        let mut sq = SendQueue::default();
        assert_eq!(sq.window(128), 128);
        for want in [64, 32, 16, 8, 4, 2, 2] {
            sq.on_loss(128);
            assert_eq!(sq.window(128), want);
        }
        for _ in 0..125 {
            sq.on_progress(128);
        }
        assert_eq!(sq.window(128), 127);
        sq.on_progress(128);
        assert_eq!(
            (sq.window(128), sq.cwnd),
            (128, None),
            "back to the full window"
        );
        // A PSN window at the floor stays there; a window of one stays one.
        sq.on_loss(2);
        assert_eq!(sq.window(2), 2);
        sq.on_loss(1);
        assert_eq!(sq.window(1), 1);
    }
}
