//! Requests that wait: a PollCq or RecvMads with a wait is not answered at once when there is
//! nothing to return; it is parked on its client (who sends nothing else meanwhile) and
//! answered at the end of a turn in which its condition came true or its wait ran out.

use std::time::{Duration as StdDuration, Instant as StdInstant};

use softib_engine::CqHandle;
use softib_proto::Response;

use super::client::Client;
use super::handlers::{completion::drain_cq, mad::take_mads};
use crate::device::Device;

/// A request that waits.
#[derive(Debug, Clone, Copy)]
pub(super) enum Parked {
    /// PollCq: for a completion on `cq` of `dev` (in its ring, for a CQ with one).
    PollCq {
        dev: u32,
        cq: u32,
        max: u32,
        until: StdInstant,
    },
    /// RecvMads: for a MAD for this client.
    RecvMads { max: u32, until: StdInstant },
}

impl Parked {
    /// When its wait runs out.
    pub fn until(&self) -> StdInstant {
        match self {
            Parked::PollCq { until, .. } | Parked::RecvMads { until, .. } => *until,
        }
    }
}

/// The deadline of a wait of `wait_us` microseconds from now.
pub(super) fn deadline(wait_us: u32) -> StdInstant {
    StdInstant::now() + StdDuration::from_micros(u64::from(wait_us))
}

/// The answer to `c`'s parked request, if its condition came true or its wait ran out by
/// `now`; the client is then no longer parked.
pub(super) fn answer(c: &mut Client, devs: &mut [Device], now: StdInstant) -> Option<Response> {
    let response = match c.parked? {
        Parked::PollCq {
            dev,
            cq,
            max,
            until,
        } => match devs.get_mut(dev as usize).map(Device::hca_mut) {
            // A ring CQ's completions are in its ring: the answer only wakes the client.
            Some(_) if c.cq_rings.contains_key(&(dev, cq)) => c
                .cq_rings
                .get(&(dev, cq))
                .filter(|r| r.is_empty() != Ok(true) || now >= until)
                .map(|_| Response::Completions(Vec::new())),
            Some(hca) if hca.cq_len(CqHandle(cq)) > 0 || now >= until => {
                Some(Response::Completions(drain_cq(hca, cq, max)))
            }
            Some(_) => None,
            // The device went away while the client waited.
            None => Some(Response::Completions(Vec::new())),
        },
        Parked::RecvMads { max, until } => {
            (!c.mads.is_empty() || now >= until).then(|| take_mads(c, max))
        }
    };
    if response.is_some() {
        c.parked = None;
    }
    response
}
