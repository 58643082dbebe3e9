//! What clients learn without asking: the engines' asynchronous events, kept for the client
//! owning the object they name (port events for every client) until it asks (`AsyncEvents`);
//! and the completion channels of armed CQs, signalled once a CQ holds a completion.

use std::collections::BTreeMap;

use softib_engine::verbs::AsyncEvent;
use softib_engine::CqHandle;

use super::client::{Client, Owned, MAX_ASYNC_EVENTS};
use crate::device::Device;

/// Hands each engine's asynchronous events to the clients owning the object they name (port
/// events to every client); a client keeps the newest [`MAX_ASYNC_EVENTS`].
pub(super) fn route_events(clients: &mut BTreeMap<u64, Client>, devs: &mut [Device]) {
    for (dev, d) in devs.iter_mut().enumerate() {
        let dev = dev as u32;
        while let Some(e) = d.hca_mut().poll_event() {
            for c in clients
                .values_mut()
                .filter(|c| owns_subject(&c.owned, dev, e))
            {
                if c.events.len() >= MAX_ASYNC_EVENTS {
                    c.events.pop_front();
                }
                c.events.push_back((dev, e));
                if let Some(fd) = &c.events_fd {
                    // An eventfd adds to its counter; a full counter is readable already.
                    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                }
            }
        }
    }
}

/// Whether the object event `e` of `dev` names is one of `o` (a port is everybody's).
fn owns_subject(o: &Owned, dev: u32, e: AsyncEvent) -> bool {
    match e {
        AsyncEvent::CqErr(cq) => o.cqs.contains(&(dev, cq.0)),
        AsyncEvent::SrqLimitReached(srq) => o.srqs.contains(&(dev, srq.0)),
        AsyncEvent::QpFatal(q)
        | AsyncEvent::QpReqErr(q)
        | AsyncEvent::QpAccessErr(q)
        | AsyncEvent::SqDrained(q)
        | AsyncEvent::QpLastWqeReached(q) => o.qps.contains(&(dev, q)),
        AsyncEvent::PortActive(_) | AsyncEvent::PortErr(_) => true,
    }
}

/// Signals the channel of every armed CQ that holds a completion (in the engine or in its
/// ring) and disarms it: `ibv_req_notify_cq` arms for one notification.
pub(super) fn signal_armed_cqs(clients: &mut BTreeMap<u64, Client>, devs: &mut [Device]) {
    for c in clients.values_mut().filter(|c| !c.armed.is_empty()) {
        let channels = &c.channels;
        let rings = &c.cq_rings;
        c.armed.retain(|&(dev, cq), ch| {
            let in_ring = rings
                .get(&(dev, cq))
                .is_some_and(|r| r.is_empty() == Ok(false));
            let ready = in_ring
                || devs
                    .get_mut(dev as usize)
                    .map(Device::hca_mut)
                    .is_some_and(|h| h.cq_len(CqHandle(cq)) > 0);
            if ready {
                if let Some(fd) = channels.get(ch) {
                    // An eventfd adds the 8-byte value to its counter; a full counter
                    // (EAGAIN) is already readable, which is all we need.
                    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
                }
            }
            !ready
        });
    }
}
