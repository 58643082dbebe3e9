//! Completions: CQs, polling them (a poll that waits is parked), the completion ring a CQ may
//! have (the client polls it without a request), completion channels and arming a CQ on
//! one, and the wakeup eventfd a client sleeps on.

use std::os::fd::OwnedFd;

use softib_engine::verbs::WorkCompletion;
use softib_engine::{CqHandle, Hca};
use softib_net::ring::Ring;
use softib_proto::{ErrorKind, Response, CQ_RING_SLOTS_MAX, CQ_RING_SLOT_LEN};

use super::{nonblocking, passed_fd, refused, Handled, Refused};
use crate::host::client::{owns, Client, MAX_CQS_PER_CLIENT};
use crate::host::host_rt::Host;
use crate::host::parked::{deadline, Parked};
use crate::host::rings::feed_ring;
use crate::shm_memory::ShmMemory;

/// `CreateCq`.
pub(super) fn create_cq(h: &mut Host, c: &mut Client, dev: u32, cqe: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    if c.owned.cqs.len() >= MAX_CQS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may create at most {MAX_CQS_PER_CLIENT} CQs"),
        ));
    }
    let cq = hca.create_cq(cqe)?;
    c.owned.cqs.insert((dev, cq.0));
    Ok(Response::Handle(u64::from(cq.0)))
}

/// `DestroyCq` of one of the client's CQs; it is no longer armed and its ring is unmapped.
pub(super) fn destroy_cq(h: &mut Host, c: &mut Client, dev: u32, cq: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.cqs, dev, cq, "CQ")?;
    hca.destroy_cq(CqHandle(cq))?;
    c.owned.cqs.remove(&(dev, cq));
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
    if c.channels.len() >= MAX_CQS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            "too many completion channels for one client",
        ));
    }
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
