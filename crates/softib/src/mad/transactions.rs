//! MAD transactions, sans-IO: what the kernel's MAD layer (`ib_mad`) does for a umad agent.
//!
//! [`Transactions`] holds the requests an agent has outstanding. [`Transactions::start`] gives
//! a request its TransactionID — the agent's 32 bits ([`Transactions::hi_tid`]) above 32 of its
//! own — and queues it; [`Transactions::poll_transmit`] hands out what is due to be sent (first
//! sends and resends); [`Transactions::handle_mad`] matches a received MAD to its request by
//! TID and management class, reassembling RMPP segments of an SA response in any order
//! ([`Reassembly`]); [`Transactions::handle_timeout`] resends a request whose answer is late,
//! with the same TID (IBA §13.4.6.4: a retry is the same transaction), until its tries are
//! used up. Finished transactions come out of [`Transactions::poll_event`], answered or timed
//! out. A response to a transaction that finished a moment ago is a duplicate; one whose TID
//! was never sent is a stray; both are counted and otherwise ignored.
//!
//! Time comes in as a [`Duration`] since an origin the caller picks; nothing here reads a
//! clock or blocks.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use softib_wire::mad::{self, MgmtClass, MAD_LEN};

use super::rmpp::Reassembly;
use super::{MadDest, MadError, Response, RetryPolicy};
use crate::Mad;

/// How many finished TIDs are remembered to recognise late duplicates.
const FINISHED_KEPT: usize = 64;

/// The outstanding requests of one agent.
#[derive(Debug)]
pub struct Transactions {
    hi_tid: u32,
    next_low: u32,
    pending: BTreeMap<u64, Pending>,
    /// TIDs whose MAD is due to be sent, in order.
    due: VecDeque<u64>,
    /// The most recently finished TIDs, oldest first.
    finished: VecDeque<u64>,
    events: VecDeque<Event>,
    counters: Counters,
}

#[derive(Debug)]
struct Pending {
    dest: MadDest,
    mad: [u8; MAD_LEN],
    class: MgmtClass,
    policy: RetryPolicy,
    sends: u32,
    /// When the current send times out; `None` while it waits to be sent.
    deadline: Option<Duration>,
    /// For an RMPP response (the SA's): the segments so far, kept across resends.
    reassembly: Option<Reassembly>,
}

/// What [`Transactions::handle_mad`] made of a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// The answer to `tid`, which is finished ([`Event::Answered`]).
    Answered(u64),
    /// A segment of the RMPP answer to `tid`; more are to come.
    Segment(u64),
    /// Another copy of the answer to `tid`, which already finished.
    Duplicate(u64),
    /// A response to no request of this agent (or of another class than the request).
    Stray,
    /// A request (or trap) addressed to this agent: not a transaction of its own.
    Request,
    /// Not a MAD (shorter than 256 bytes or without a common header).
    Malformed,
}

/// A finished transaction.
#[derive(Debug, Clone)]
pub enum Event {
    /// The request was answered.
    Answered {
        /// Its TID.
        tid: u64,
        /// The answer (every RMPP segment, in order).
        response: Response,
    },
    /// No answer after every try.
    TimedOut(TimedOut),
}

/// A request that went unanswered.
#[derive(Debug, Clone)]
pub struct TimedOut {
    /// Its TID.
    pub tid: u64,
    /// Where it went.
    pub dest: MadDest,
    /// The request as sent (with its TID).
    pub request: [u8; MAD_LEN],
    /// How often it was sent.
    pub sends: u32,
    /// How long each send waited.
    pub timeout: Duration,
}

impl From<TimedOut> for MadError {
    fn from(t: TimedOut) -> MadError {
        let header = mad::Repr::parse(&mad::Packet::new_unchecked(&t.request[..])).ok();
        MadError::TimedOut {
            request: super::describe(&t.request),
            dest: t.dest,
            tries: t.sends,
            timeout: t.timeout,
            class: header.map_or(MgmtClass::Unknown(0), |h| h.mgmt_class),
        }
    }
}

/// What was dropped, for tests and diagnostics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Copies of answers to finished transactions.
    pub duplicates: u64,
    /// Responses that matched no request.
    pub strays: u64,
    /// Received buffers that are not MADs.
    pub malformed: u64,
    /// Resends after a timeout.
    pub resends: u64,
}

impl Transactions {
    /// No requests yet; every TID will carry `hi_tid` in its upper 32 bits.
    pub fn new(hi_tid: u32) -> Transactions {
        Transactions {
            hi_tid,
            next_low: 0,
            pending: BTreeMap::new(),
            due: VecDeque::new(),
            finished: VecDeque::new(),
            events: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// The upper 32 bits of this agent's TIDs.
    pub fn hi_tid(&self) -> u32 {
        self.hi_tid
    }

    /// Whether `tid` is one of this agent's (its upper 32 bits are the agent's).
    pub fn owns(&self, tid: u64) -> bool {
        (tid >> 32) as u32 == self.hi_tid
    }

    /// Starts a transaction: `mad` (a request method: Get, Set, GetTable, ...) to `dest`,
    /// answered within `policy`. Its TID is the agent's upper 32 bits over `low`, or over the
    /// next number of the agent's own when `low` is `None` (umad keeps the caller's low 32
    /// bits; the tools let the agent count). Returns the TID; the request is due to be sent.
    pub fn start(
        &mut self,
        dest: MadDest,
        mut mad: [u8; MAD_LEN],
        policy: RetryPolicy,
        low: Option<u32>,
    ) -> Result<u64, MadError> {
        let header = mad::Repr::parse(&mad::Packet::new_unchecked(&mad[..]))
            .map_err(|e| MadError::Invalid(format!("not a MAD: {e}")))?;
        if header.method.is_response() {
            return Err(MadError::Invalid(format!(
                "{} is a response, not a request: send it untracked",
                super::describe(&mad)
            )));
        }
        let low = match low {
            Some(l) => l,
            None => self.fresh_low(),
        };
        let tid = u64::from(self.hi_tid) << 32 | u64::from(low);
        if self.pending.contains_key(&tid) {
            return Err(MadError::Invalid(format!(
                "TID 0x{tid:016x} is already outstanding"
            )));
        }
        mad::Packet::new_unchecked(&mut mad[..]).set_tid(tid);
        let class = header.mgmt_class;
        self.pending.insert(
            tid,
            Pending {
                dest,
                mad,
                class,
                policy: RetryPolicy {
                    tries: policy.tries.max(1),
                    ..policy
                },
                sends: 0,
                deadline: None,
                reassembly: (class == MgmtClass::SubnAdm).then(Reassembly::new),
            },
        );
        self.due.push_back(tid);
        Ok(tid)
    }

    fn fresh_low(&mut self) -> u32 {
        loop {
            self.next_low = self.next_low.wrapping_add(1);
            let tid = u64::from(self.hi_tid) << 32 | u64::from(self.next_low);
            if !self.pending.contains_key(&tid) {
                return self.next_low;
            }
        }
    }

    /// The next MAD to send and where; its answer is awaited from `now` for the policy's
    /// timeout.
    pub fn poll_transmit(&mut self, now: Duration) -> Option<(MadDest, [u8; MAD_LEN])> {
        while let Some(tid) = self.due.pop_front() {
            // A transaction cancelled or answered while it waited is no longer due.
            let Some(p) = self.pending.get_mut(&tid) else {
                continue;
            };
            p.sends += 1;
            p.deadline = Some(now + p.policy.timeout);
            return Some((p.dest.clone(), p.mad));
        }
        None
    }

    /// When [`Transactions::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Duration> {
        self.pending.values().filter_map(|p| p.deadline).min()
    }

    /// Resends what waited past its timeout, or gives it up after its last try.
    pub fn handle_timeout(&mut self, now: Duration) {
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.deadline.is_some_and(|d| d <= now))
            .map(|(&tid, _)| tid)
            .collect();
        for tid in late {
            let Some(p) = self.pending.get_mut(&tid) else {
                continue;
            };
            if p.sends < p.policy.tries {
                p.deadline = None;
                self.due.push_back(tid);
                self.counters.resends += 1;
            } else if let Some(p) = self.pending.remove(&tid) {
                self.finish(tid);
                self.events.push_back(Event::TimedOut(TimedOut {
                    tid,
                    dest: p.dest,
                    request: p.mad,
                    sends: p.sends,
                    timeout: p.policy.timeout,
                }));
            }
        }
    }

    /// Takes a received MAD: the answer (or an RMPP segment of it) to an outstanding request,
    /// or something that is not, said by the result.
    pub fn handle_mad(&mut self, mad: &Mad) -> Received {
        let Ok(bytes) = <[u8; MAD_LEN]>::try_from(mad.mad.as_slice()) else {
            self.counters.malformed += 1;
            return Received::Malformed;
        };
        let Ok(header) = mad::Repr::parse(&mad::Packet::new_unchecked(&bytes[..])) else {
            self.counters.malformed += 1;
            return Received::Malformed;
        };
        if !header.method.is_response() {
            return Received::Request;
        }
        let tid = header.tid;
        let Some(p) = self
            .pending
            .get_mut(&tid)
            .filter(|p| p.class == header.mgmt_class)
        else {
            if self.finished.contains(&tid) {
                self.counters.duplicates += 1;
                return Received::Duplicate(tid);
            }
            self.counters.strays += 1;
            return Received::Stray;
        };
        let segments = match &mut p.reassembly {
            None => vec![bytes],
            Some(r) => {
                r.add(&bytes);
                match r.segments() {
                    Some(s) => s,
                    None => return Received::Segment(tid),
                }
            }
        };
        let Some(response) = Response::new(mad, segments) else {
            return Received::Segment(tid);
        };
        self.pending.remove(&tid);
        self.finish(tid);
        self.events.push_back(Event::Answered { tid, response });
        Received::Answered(tid)
    }

    /// The next finished transaction.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Forgets `tid` (its caller stopped waiting); whether it was outstanding.
    pub fn cancel(&mut self, tid: u64) -> bool {
        let was = self.pending.remove(&tid).is_some();
        if was {
            self.finish(tid);
        }
        was
    }

    /// How many requests are outstanding.
    pub fn outstanding(&self) -> usize {
        self.pending.len()
    }

    /// What was dropped so far.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    fn finish(&mut self, tid: u64) {
        if self.finished.len() >= FINISHED_KEPT {
            self.finished.pop_front();
        }
        self.finished.push_back(tid);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::{Lid, MadQp, Qpn};
    use softib_wire::mad::sa::{self, RmppHeader};
    use softib_wire::mad::{smp, AttrId, Method};

    use crate::mad::SmpDest;

    const MS: Duration = Duration::from_millis(1);

    fn policy() -> RetryPolicy {
        RetryPolicy {
            timeout: 100 * MS,
            tries: 3,
        }
    }

    fn node_info_get() -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        smp::Repr::lid_get(0, AttrId::NODE_INFO, 0, 0)
            .emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        b
    }

    fn path_query() -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        sa::Repr::request(Method::GetTable, 0, AttrId::PATH_RECORD, 0, &[])
            .emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        b
    }

    /// The GetResp an SMA would send to `request`.
    fn answer(request: &[u8; MAD_LEN]) -> Mad {
        let r = smp::Repr::parse(&smp::Packet::new_unchecked(&request[..])).unwrap();
        let mut b = [0u8; MAD_LEN];
        r.response(0, [7; 64])
            .emit(&mut smp::Packet::new_unchecked(&mut b[..]));
        received(MadQp::Smi, b)
    }

    fn received(qp: MadQp, b: [u8; MAD_LEN]) -> Mad {
        Mad {
            dev: 0,
            port: 1,
            qp,
            slid: Lid(5),
            src_qpn: Qpn::new(u32::from(qp == MadQp::Gsi)),
            sgid: None,
            mad: b.to_vec(),
        }
    }

    /// Segment `n` of `of` of the SA's GetTableResp to `request`, each segment's 200 data
    /// bytes filled with its number.
    fn segment(request: &[u8; MAD_LEN], n: u32, of: u32) -> Mad {
        let req = sa::Repr::parse(&sa::Packet::new_unchecked(&request[..])).unwrap();
        let data = [n as u8; sa::DATA_LEN];
        let mut r = req.response(0, 40, 5, &data);
        r.rmpp = RmppHeader::data_segment(n, of, if n == 1 { of * 220 } else { 0 });
        let mut b = [0u8; MAD_LEN];
        r.emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        received(MadQp::Gsi, b)
    }

    fn dest() -> MadDest {
        MadDest::Smp(SmpDest::Lid(Lid(5)))
    }

    fn answered(t: &mut Transactions) -> Response {
        match t.poll_event() {
            Some(Event::Answered { response, .. }) => response,
            other => panic!("not answered: {other:?}"),
        }
    }

    #[test]
    fn a_tid_carries_the_agents_upper_bits_and_the_answer_is_matched_by_it() {
        let mut t = Transactions::new(0xabcd);
        let a = t.start(dest(), node_info_get(), policy(), None).unwrap();
        let b = t.start(dest(), node_info_get(), policy(), None).unwrap();
        assert_eq!(a >> 32, 0xabcd);
        assert_ne!(a, b);
        let (_, sent_a) = t.poll_transmit(Duration::ZERO).unwrap();
        let (_, sent_b) = t.poll_transmit(Duration::ZERO).unwrap();
        assert_eq!(mad::Packet::new_unchecked(&sent_a[..]).tid(), a);
        // b's answer first: each goes to its own request.
        assert_eq!(t.handle_mad(&answer(&sent_b)), Received::Answered(b));
        assert_eq!(t.handle_mad(&answer(&sent_a)), Received::Answered(a));
        match t.poll_event() {
            Some(Event::Answered { tid, .. }) => assert_eq!(tid, b),
            other => panic!("{other:?}"),
        }
        assert_eq!(answered(&mut t).slid(), Lid(5));
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn umad_style_tids_keep_the_callers_low_bits() {
        let mut t = Transactions::new(7);
        let tid = t
            .start(dest(), node_info_get(), policy(), Some(0x1234))
            .unwrap();
        assert_eq!(tid, 7 << 32 | 0x1234);
        assert!(t.owns(tid));
        assert!(!t.owns(8 << 32 | 0x1234));
        // The same TID twice at once would make answers ambiguous.
        assert!(t
            .start(dest(), node_info_get(), policy(), Some(0x1234))
            .is_err());
    }

    #[test]
    fn responses_are_not_requests() {
        let mut t = Transactions::new(1);
        let resp = answer(&node_info_get());
        let err = t
            .start(
                dest(),
                <[u8; MAD_LEN]>::try_from(resp.mad.as_slice()).unwrap(),
                policy(),
                None,
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("SubnGetResp(NodeInfo) is a response"),
            "{err}"
        );
    }

    #[test]
    fn a_late_answer_is_sent_again_with_the_same_tid_then_given_up() {
        let mut t = Transactions::new(1);
        let tid = t.start(dest(), node_info_get(), policy(), None).unwrap();
        let mut sent = Vec::new();
        let mut now = Duration::ZERO;
        loop {
            while let Some((_, m)) = t.poll_transmit(now) {
                sent.push(mad::Packet::new_unchecked(&m[..]).tid());
            }
            let Some(next) = t.poll_timeout() else { break };
            assert!(next > now, "a deadline lies ahead of the send");
            now = next;
            t.handle_timeout(now);
        }
        assert_eq!(sent, vec![tid; 3]);
        assert_eq!(now, 300 * MS);
        let Some(Event::TimedOut(out)) = t.poll_event() else {
            panic!("no timeout");
        };
        assert_eq!((out.tid, out.sends), (tid, 3));
        let err = MadError::from(out);
        assert_eq!(
            err.to_string(),
            "no answer to SubnGet(NodeInfo) from LID 5 after 3 tries of 100ms (is the port \
             Active and the LID assigned?)"
        );
        assert_eq!(t.counters().resends, 2);
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn an_answer_to_the_first_send_that_comes_after_the_resend_still_counts() {
        let mut t = Transactions::new(1);
        let tid = t.start(dest(), node_info_get(), policy(), None).unwrap();
        let (_, first) = t.poll_transmit(Duration::ZERO).unwrap();
        t.handle_timeout(100 * MS);
        assert!(t.poll_transmit(100 * MS).is_some(), "resent");
        assert_eq!(t.handle_mad(&answer(&first)), Received::Answered(tid));
        // The second send's answer, later, is a duplicate.
        assert_eq!(t.handle_mad(&answer(&first)), Received::Duplicate(tid));
        assert_eq!(t.counters().duplicates, 1);
        assert_eq!(t.poll_timeout(), None, "nothing left to time out");
    }

    #[test]
    fn strays_and_requests_are_told_apart() {
        let mut t = Transactions::new(1);
        let tid = t.start(dest(), node_info_get(), policy(), None).unwrap();
        let (_, sent) = t.poll_transmit(Duration::ZERO).unwrap();
        let mut other = sent;
        mad::Packet::new_unchecked(&mut other[..]).set_tid(tid + 100);
        assert_eq!(t.handle_mad(&answer(&other)), Received::Stray);
        // Same TID, another class: not the answer either.
        let mut wrong_class = answer(&sent);
        wrong_class.mad[1] = u8::from(MgmtClass::PerfMgt);
        assert_eq!(t.handle_mad(&wrong_class), Received::Stray);
        assert_eq!(t.handle_mad(&received(MadQp::Smi, sent)), Received::Request);
        let short = Mad {
            mad: vec![1; 10],
            ..answer(&sent)
        };
        assert_eq!(t.handle_mad(&short), Received::Malformed);
        assert_eq!(t.counters().strays, 2);
        assert!(t.poll_event().is_none());
        assert_eq!(t.handle_mad(&answer(&sent)), Received::Answered(tid));
    }

    #[test]
    fn rmpp_segments_out_of_order_and_duplicated_make_one_answer() {
        let mut t = Transactions::new(1);
        let sa_dest = MadDest::gsi(Lid(1));
        let tid = t.start(sa_dest, path_query(), policy(), None).unwrap();
        let (_, sent) = t.poll_transmit(Duration::ZERO).unwrap();
        for n in [3, 1, 3] {
            assert_eq!(t.handle_mad(&segment(&sent, n, 4)), Received::Segment(tid));
        }
        // The request times out with segment 2 and 4 missing: sent again, the segments so far
        // are kept.
        t.handle_timeout(100 * MS);
        assert!(t.poll_transmit(100 * MS).is_some());
        assert_eq!(t.handle_mad(&segment(&sent, 4, 4)), Received::Segment(tid));
        assert_eq!(t.handle_mad(&segment(&sent, 2, 4)), Received::Answered(tid));
        let r = answered(&mut t);
        let numbers: Vec<u8> = r
            .segments()
            .map(|s| sa::Packet::new_unchecked(&s[..]).data()[0])
            .collect();
        assert_eq!(numbers, vec![1, 2, 3, 4]);
        let table = r.table().unwrap();
        assert_eq!(table.payload.len(), 4 * 200);
        assert_eq!(
            t.handle_mad(&segment(&sent, 2, 4)),
            Received::Duplicate(tid)
        );
    }

    #[test]
    fn a_single_mad_sa_answer_needs_no_segments() {
        let mut t = Transactions::new(1);
        let sa_dest = MadDest::gsi(Lid(1));
        let mut get = [0u8; MAD_LEN];
        sa::Repr::request(Method::Get, 0, AttrId::PATH_RECORD, 0, &[])
            .emit(&mut sa::Packet::new_unchecked(&mut get[..]));
        let tid = t.start(sa_dest, get, policy(), None).unwrap();
        let (_, sent) = t.poll_transmit(Duration::ZERO).unwrap();
        let req = sa::Repr::parse(&sa::Packet::new_unchecked(&sent[..])).unwrap();
        let mut b = [0u8; MAD_LEN];
        req.response(0, 64, 1, &[9; 64])
            .emit(&mut sa::Packet::new_unchecked(&mut b[..]));
        assert_eq!(
            t.handle_mad(&received(MadQp::Gsi, b)),
            Received::Answered(tid)
        );
        assert_eq!(answered(&mut t).segments().count(), 1);
    }

    #[test]
    fn a_cancelled_request_is_not_sent_and_its_answer_is_a_duplicate() {
        let mut t = Transactions::new(1);
        let tid = t.start(dest(), node_info_get(), policy(), None).unwrap();
        assert!(t.cancel(tid));
        assert!(!t.cancel(tid));
        assert!(t.poll_transmit(Duration::ZERO).is_none());
        let mut m = node_info_get();
        mad::Packet::new_unchecked(&mut m[..]).set_tid(tid);
        assert_eq!(t.handle_mad(&answer(&m)), Received::Duplicate(tid));
    }

    #[test]
    fn zero_tries_still_sends_once() {
        let mut t = Transactions::new(1);
        t.start(
            dest(),
            node_info_get(),
            RetryPolicy {
                timeout: MS,
                tries: 0,
            },
            None,
        )
        .unwrap();
        assert!(t.poll_transmit(Duration::ZERO).is_some());
        t.handle_timeout(MS);
        assert!(t.poll_transmit(MS).is_none());
        assert!(matches!(t.poll_event(), Some(Event::TimedOut(_))));
    }
}
