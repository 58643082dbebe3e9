//! Completions: CQs, polling them (a poll that waits is parked), the completion ring a CQ may
//! have (the client polls it without a request), completion channels and arming a CQ on
//! one, and the wakeup eventfd a client sleeps on.

use std::os::fd::OwnedFd;

use softib_engine::verbs::WorkCompletion;
use softib_engine::{CqHandle, Hca};
use softib_net::ring::Ring;
use softib_proto::{ErrorKind, Response, CQ_RING_SLOTS_MAX, CQ_RING_SLOT_LEN};

use super::{destroy_owned, nonblocking, passed_fd, refused, Handled, Refused};
use crate::host::client::{owns, within_limit, Client, MAX_CQS_PER_CLIENT};
use crate::host::host_rt::Host;
use crate::host::parked::{deadline, Parked};
use crate::host::rings::feed_ring;
use crate::shm_memory::ShmMemory;

/// `CreateCq`.
pub(super) fn create_cq(h: &mut Host, c: &mut Client, dev: u32, cqe: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    within_limit(c.owned.cqs.len(), MAX_CQS_PER_CLIENT, "CQs")?;
    let cq = hca.create_cq(cqe)?;
    c.owned.cqs.insert((dev, cq.0));
    Ok(Response::Handle(u64::from(cq.0)))
}

/// `DestroyCq` of one of the client's CQs; it is no longer armed and its ring is unmapped.
pub(super) fn destroy_cq(h: &mut Host, c: &mut Client, dev: u32, cq: u32) -> Handled {
    destroy_owned(h, &mut c.owned.cqs, dev, cq, "CQ", |hca| {
        hca.destroy_cq(CqHandle(cq))
    })?;
    c.armed.remove(&(dev, cq));
    c.cq_rings.remove(&(dev, cq));
    Ok(Response::Ok)
}

/// `PollCq`: up to `max` completions, or, with `wait_us`, parks (`Ok(None)`) until there is
/// one. A CQ with a completion ring gets its completions in the ring; the answer then only
/// says when to look.
pub(super) fn poll_cq(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    cq: u32,
    max: u32,
    wait_us: u32,
) -> Result<Option<Response>, Refused> {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.cqs, dev, cq, "CQ")?;
    let park = || Parked::PollCq {
        dev,
        cq,
        max,
        until: deadline(wait_us),
    };
    if let Some(ring) = c.cq_rings.get(&(dev, cq)) {
        if feed_ring(hca, cq, ring).is_err() {
            return Err(refused(
                ErrorKind::Protocol,
                "the completion ring is broken",
            ));
        }
        if ring.is_empty() == Ok(true) && wait_us > 0 {
            c.parked = Some(park());
            return Ok(None);
        }
        return Ok(Some(Response::Completions(Vec::new())));
    }
    if hca.cq_len(CqHandle(cq)) == 0 && wait_us > 0 {
        c.parked = Some(park());
        return Ok(None);
    }
    Ok(Some(Response::Completions(drain_cq(hca, cq, max))))
}

/// Up to `max` completions of `cq`.
pub(in crate::host) fn drain_cq(
    hca: &mut Hca<ShmMemory>,
    cq: u32,
    max: u32,
) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    while v.len() < max as usize {
        match hca.poll_cq(CqHandle(cq)) {
            Some(wc) => v.push(wc),
            None => break,
        }
    }
    v
}

/// `AttachCqRing`: the memfd that came with the request becomes the completion ring of one
/// of the client's CQs.
pub(super) fn attach_cq_ring(
    h: &mut Host,
    c: &mut Client,
    fds: &mut Vec<OwnedFd>,
    dev: u32,
    cq: u32,
    slots: u32,
) -> Handled {
    h.dev(dev)?;
    owns(&c.owned.cqs, dev, cq, "CQ")?;
    let fd = passed_fd(fds, "AttachCqRing arrived without its memfd")?;
    if slots == 0 || slots > CQ_RING_SLOTS_MAX as u32 {
        return Err(refused(
            ErrorKind::Invalid,
            format!("a completion ring has 1 to {CQ_RING_SLOTS_MAX} slots"),
        ));
    }
    let ring = Ring::from_fd(fd, slots, CQ_RING_SLOT_LEN)
        .map_err(|e| refused(ErrorKind::Invalid, format!("cannot map the ring: {e}")))?;
    c.cq_rings.insert((dev, cq), ring);
    Ok(Response::Ok)
}

/// `CreateCompChannel`: the eventfd that came with the request becomes a completion channel.
pub(super) fn create_comp_channel(c: &mut Client, fds: &mut Vec<OwnedFd>) -> Handled {
    within_limit(c.channels.len(), MAX_CQS_PER_CLIENT, "completion channels")?;
    let fd = passed_fd(fds, "CreateCompChannel arrived without its eventfd")?;
    let fd = nonblocking(fd)?;
    let handle = c.channels.keys().next_back().map_or(1, |k| k + 1);
    c.channels.insert(handle, fd);
    Ok(Response::Handle(handle))
}

/// `DestroyCompChannel` of a channel no CQ is armed on.
pub(super) fn destroy_comp_channel(c: &mut Client, channel: u64) -> Handled {
    if c.armed.values().any(|&ch| ch == channel) {
        return Err(refused(
            ErrorKind::Busy,
            "a CQ is still armed on this completion channel",
        ));
    }
    match c.channels.remove(&channel) {
        Some(_) => Ok(Response::Ok),
        None => Err(no_channel(channel)),
    }
}

/// `ReqNotifyCq`: arms one of the client's CQs on one of its channels, once (the channel is
/// signalled when the CQ holds a completion, and the CQ is disarmed).
pub(super) fn req_notify_cq(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    cq: u32,
    channel: u64,
) -> Handled {
    h.dev(dev)?;
    owns(&c.owned.cqs, dev, cq, "CQ")?;
    if !c.channels.contains_key(&channel) {
        return Err(no_channel(channel));
    }
    c.armed.insert((dev, cq), channel);
    Ok(Response::Ok)
}

/// `AttachWakeup`: the eventfd that came with the request is signalled when the daemon fills
/// a completion ring of a client that may be asleep.
pub(super) fn attach_wakeup(c: &mut Client, fds: &mut Vec<OwnedFd>) -> Handled {
    let fd = passed_fd(fds, "AttachWakeup arrived without its eventfd")?;
    c.wakeup = Some(nonblocking(fd)?);
    Ok(Response::Ok)
}

fn no_channel(channel: u64) -> Refused {
    refused(
        ErrorKind::NotFound,
        format!("no completion channel {channel} belongs to this client"),
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration as StdDuration, Instant as StdInstant};

    use softib_engine::verbs::WcStatus;
    use softib_proto::{decode_completion, Request};

    use super::*;
    use crate::host::testing::{eventfd, eventfd_count, TestHost};

    fn poll(cq: u32, wait_us: u32) -> Request {
        Request::PollCq {
            dev: 0,
            cq,
            max: 8,
            wait_us,
        }
    }

    #[test]
    fn another_clients_cq_is_refused() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let cq = t.handle(a, Request::CreateCq { dev: 0, cqe: 4 });
        let foreign = (
            ErrorKind::NotFound,
            format!("no CQ {cq} on device 0 belongs to this client"),
        );
        assert_eq!(t.refused(b, poll(cq, 0)), foreign);
        assert_eq!(t.refused(b, Request::DestroyCq { dev: 0, cq }), foreign);
        assert_eq!(
            t.refused(
                b,
                Request::ReqNotifyCq {
                    dev: 0,
                    cq,
                    channel: 1
                }
            ),
            foreign
        );
        assert_eq!(
            t.refused_with(
                b,
                vec![eventfd()],
                Request::AttachCqRing {
                    dev: 0,
                    cq,
                    slots: 8
                }
            ),
            foreign
        );
        // The owner still polls it.
        assert!(matches!(t.ok(a, poll(cq, 0)), Response::Completions(v) if v.is_empty()));
    }

    #[test]
    fn a_poll_that_waits_is_answered_by_a_completion_or_its_deadline() {
        let mut t = TestHost::new();
        let a = t.client();
        let (_, cq, qpn) = t.qp(a);
        t.recv(a, qpn, 41);
        t.parks(a, poll(cq, 5_000_000));
        assert!(t.deliver(StdInstant::now()).is_empty());
        t.fail_qp(a, qpn);
        let answers = t.deliver(StdInstant::now());
        let [(who, Response::Completions(wcs))] = &answers[..] else {
            panic!("{answers:?}");
        };
        assert_eq!((*who, wcs.len()), (a, 1));
        assert_eq!((wcs[0].wr_id, wcs[0].status), (41, WcStatus::WrFlushErr));
        assert!(t.clients[&a].parked.is_none());
        // Nothing comes: the wait runs out with no completions.
        t.parks(a, poll(cq, 1000));
        assert!(t.deliver(StdInstant::now()).is_empty());
        let late = StdInstant::now() + StdDuration::from_millis(5);
        assert!(matches!(
            &t.deliver(late)[..],
            [(_, Response::Completions(v))] if v.is_empty()
        ));
    }

    #[test]
    fn an_armed_cq_signals_its_channel_once() {
        let mut t = TestHost::new();
        let a = t.client();
        let (_, cq, qpn) = t.qp(a);
        let ours = eventfd();
        let theirs = ours.try_clone().unwrap();
        let Some(Response::Handle(channel)) =
            t.call_with(a, vec![theirs], Request::CreateCompChannel)
        else {
            panic!("no channel");
        };
        // The daemon never blocks on a descriptor a client passed.
        let fl = rustix::fs::fcntl_getfl(&t.clients[&a].channels[&channel]).unwrap();
        assert!(fl.contains(rustix::fs::OFlags::NONBLOCK));
        assert_eq!(
            t.refused(
                a,
                Request::ReqNotifyCq {
                    dev: 0,
                    cq,
                    channel: channel + 1
                }
            ),
            (
                ErrorKind::NotFound,
                format!(
                    "no completion channel {} belongs to this client",
                    channel + 1
                )
            )
        );
        t.ok(
            a,
            Request::ReqNotifyCq {
                dev: 0,
                cq,
                channel,
            },
        );
        assert_eq!(
            t.refused(a, Request::DestroyCompChannel { channel }),
            (
                ErrorKind::Busy,
                "a CQ is still armed on this completion channel".into()
            )
        );
        t.deliver(StdInstant::now());
        assert_eq!(eventfd_count(&ours), 0, "signalled with an empty CQ");
        t.recv(a, qpn, 1);
        t.fail_qp(a, qpn);
        t.deliver(StdInstant::now());
        assert_eq!(eventfd_count(&ours), 1);
        // Disarmed: the completion still waiting signals nothing more.
        t.deliver(StdInstant::now());
        assert_eq!(eventfd_count(&ours), 0);
        t.ok(a, Request::DestroyCompChannel { channel });
        assert_eq!(
            t.refused(a, Request::DestroyCompChannel { channel }).0,
            ErrorKind::NotFound
        );
    }

    #[test]
    fn a_ring_cq_gets_its_completions_in_the_ring_and_the_sleeper_is_woken() {
        let mut t = TestHost::new();
        let a = t.client();
        let (_, cq, qpn) = t.qp(a);
        let ring = Ring::create("softib-unit-cq", 8, CQ_RING_SLOT_LEN).unwrap();
        let ring_fd = || ring.fd().try_clone_to_owned().unwrap();
        let attach = |slots| Request::AttachCqRing { dev: 0, cq, slots };
        assert_eq!(
            t.refused(a, attach(8)),
            (
                ErrorKind::Protocol,
                "AttachCqRing arrived without its memfd".into()
            )
        );
        assert_eq!(
            t.refused_with(a, vec![ring_fd()], attach(0)),
            (
                ErrorKind::Invalid,
                format!("a completion ring has 1 to {CQ_RING_SLOTS_MAX} slots")
            )
        );
        assert!(matches!(
            t.call_with(a, vec![ring_fd()], attach(8)),
            Some(Response::Ok)
        ));
        let wakeup = eventfd();
        t.call_with(a, vec![wakeup.try_clone().unwrap()], Request::AttachWakeup);
        // The client goes to sleep on it: not polling, and waiting in a PollCq.
        ring.set_polling(false).unwrap();
        t.parks(a, poll(cq, 5_000_000));
        t.recv(a, qpn, 9);
        t.fail_qp(a, qpn);
        let answers = t.deliver(StdInstant::now());
        // The answer only says "look": the completion is in the ring.
        assert!(
            matches!(&answers[..], [(_, Response::Completions(v))] if v.is_empty()),
            "{answers:?}"
        );
        assert_eq!(eventfd_count(&wakeup), 1);
        let mut entry = Vec::new();
        assert!(ring.pop(&mut entry).unwrap());
        let wc = decode_completion(&entry).unwrap();
        assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
        assert_eq!(t.hca().cq_len(CqHandle(cq)), 0);
        // Destroying the CQ unmaps its ring.
        t.ok(a, Request::DestroyQp { dev: 0, qpn });
        t.ok(a, Request::DestroyCq { dev: 0, cq });
        assert!(t.clients[&a].cq_rings.is_empty());
    }
}
