//! MADs for a host's local agents: a response goes to the agent whose request it answers
//! (by TID), SMPs and SA requests to the SM, PerfMgt requests to the PMA, the rest to every
//! agent on the port; a GMP Get or Set with no agent on its port at all is answered
//! UNSUPPORTED_METHOD_ATTR, as by the kernel.

use std::collections::BTreeMap;

use softib_proto::{Mad, MadQp};
use softib_wire::mad;
use softib_wire::mad::attr::{capability_mask, SmInfo};

use super::client::Client;
use super::cm_routes::Route;
use super::host_rt::Host;
use crate::device::Device;
use crate::ib::MadIn;

/// MADs queued for an agent that does not read them are dropped beyond this.
pub(super) const MAX_QUEUED_MADS: usize = 4096;
/// Outstanding requests remembered per host; beyond this the oldest are forgotten (their
/// responses then go to every agent on the port, which filter by TID).
const MAX_TIDS: usize = 64 * 1024;

/// Who sent each outstanding MAD request, so that its response goes back to that agent
/// only: (device, port, TID) → client.
#[derive(Debug, Default)]
pub(super) struct TidOwners(BTreeMap<(u32, u8, u64), u64>);

impl TidOwners {
    /// Client `client` sent a request with `tid` from `port` of `dev`.
    pub fn note(&mut self, dev: u32, port: u8, tid: u64, client: u64) {
        if self.0.len() >= MAX_TIDS {
            self.0.clear();
        }
        self.0.insert((dev, port, tid), client);
    }

    /// Who sent the request a response with `tid` answers (forgotten now).
    fn take(&mut self, dev: u32, port: u8, tid: u64) -> Option<u64> {
        self.0.remove(&(dev, port, tid))
    }

    /// Forgets the requests of a client that went away.
    pub fn forget(&mut self, client: u64) {
        self.0.retain(|_, owner| *owner != client);
    }

    /// Whether no request is outstanding.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Hands a MAD that arrived on `dev` to the agents that want it: a response to the agent that
/// asked, SMP and SA requests to the SM, PerfMgt requests to the PMA.
pub(super) fn dispatch_mad(h: &mut Host, clients: &mut BTreeMap<u64, Client>, dev: u32, m: MadIn) {
    let header = mad::Repr::parse(&mad::Packet::new_unchecked(&m.mad[..])).ok();
    let is_response = header.is_some_and(|h| h.method.is_response());
    let class = header.map(|h| h.mgmt_class);
    let msg = || mad_of(dev, &m);
    if let Some(hdr) = header.filter(|_| is_response) {
        if let Some(owner) = h.tids.take(dev, m.port, hdr.tid) {
            if let Some(c) = clients.get_mut(&owner) {
                queue(c, msg());
                return;
            }
        }
    }
    if m.qp == MadQp::Gsi && class == Some(mad::MgmtClass::ComMgt) {
        match h.cm.route(dev, m.port, &m.mad) {
            Route::To(owner) => {
                if let Some(c) = clients
                    .get_mut(&owner)
                    .filter(|c| c.is_agent(dev, m.port, false))
                {
                    queue(c, msg());
                    return;
                }
            }
            Route::Answer(answer) => {
                answer_gmp(&mut h.devs, dev, &m, &answer);
                return;
            }
            Route::Hold(service_id) => {
                if let Some(m) =
                    h.cm.hold(std::time::Instant::now(), dev, service_id, m.clone())
                {
                    let answer = super::cm_routes::CmRoutes::no_listener(&m.mad);
                    if let Some(answer) = answer {
                        answer_gmp(&mut h.devs, dev, &m, &answer);
                    }
                }
                return;
            }
            Route::All => {}
        }
    }
    if m.qp == MadQp::Gsi && !is_response && class == Some(mad::MgmtClass::PerfMgt) {
        answer_pma(&mut h.devs, dev, &m);
        return;
    }
    let to_sm_only = m.qp == MadQp::Smi || (!is_response && class == Some(mad::MgmtClass::SubnAdm));
    let msg = msg();
    let mut claimed = false;
    for c in clients.values_mut() {
        if c.is_agent(dev, m.port, to_sm_only) && queue(c, msg.clone()) {
            claimed = true;
        }
    }
    if !claimed {
        h.unclaimed_mads += 1;
        // A CM MAD for a connection nobody has is answered as a CM without it would; any
        // other request for a class no agent registered as the kernel's MAD layer answers
        // it, so that the asker learns it at once instead of timing out. (With an agent on
        // the port, its library decides: the daemon does not know which classes it took.)
        let cm = m.qp == MadQp::Gsi && class == Some(mad::MgmtClass::ComMgt);
        let answer = if cm {
            super::cm_routes::CmRoutes::answer_unclaimed(&m.mad).map(|a| *a)
        } else if m.qp == MadQp::Gsi {
            mad::unmatched_response(&m.mad)
        } else {
            None
        };
        if let Some(answer) = answer {
            answer_gmp(&mut h.devs, dev, &m, &answer);
        }
    }
}

/// A client now listens on `service_id` of `dev`: the REQs held for it are its.
pub(super) fn release_held(h: &mut Host, c: &mut Client, dev: u32, service_id: u64) {
    for m in h.cm.take_held(dev, service_id) {
        queue(c, mad_of(dev, &m));
    }
}

/// Answers the held REQs whose wait ran out (or whose service's process went away) as for a
/// service nobody listens on.
pub(super) fn expire_held(h: &mut Host, now: std::time::Instant) {
    for (dev, m) in h.cm.expired(now) {
        if let Some(answer) = super::cm_routes::CmRoutes::no_listener(&m.mad) {
            answer_gmp(&mut h.devs, dev, &m, &answer);
        }
    }
}

fn mad_of(dev: u32, m: &MadIn) -> Mad {
    Mad {
        dev,
        port: m.port,
        qp: m.qp,
        slid: m.slid,
        src_qpn: m.src_qpn,
        sgid: m.sgid,
        mad: m.mad.to_vec(),
    }
}

/// Queues `m` for `c` and wakes it (`AttachMadWakeup`); `false` when its queue is full (an
/// agent that does not read its MADs loses the newest, and blocks nobody).
fn queue(c: &mut Client, m: Mad) -> bool {
    if c.mads.len() >= MAX_QUEUED_MADS {
        return false;
    }
    c.mads.push_back(m);
    if let Some(fd) = &c.mad_wakeup {
        // Non-blocking; a counter already at its maximum is still readable.
        let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
    }
    true
}

/// Sends the daemon's own answer to a GMP (a CM MAD, a request nobody takes) back where it
/// came from.
fn answer_gmp(devs: &mut [Device], dev: u32, m: &MadIn, answer: &[u8; mad::MAD_LEN]) {
    let Some(d) = devs.get_mut(dev as usize) else {
        return;
    };
    if let (Some(roce), Some(sgid)) = (d.roce(), m.sgid) {
        roce.send_gmp(sgid, m.src_qpn, answer);
    } else if let Some(ib) = d.ib() {
        ib.ca.send_gmp(m.port, m.slid, m.src_qpn, answer);
    }
}

/// The performance management agent (PMA, IBA §16.1) on QP1: PortCounters (`crate::pma`).
fn answer_pma(devs: &mut [Device], dev: u32, m: &MadIn) {
    let Some(ib) = devs.get_mut(dev as usize).and_then(Device::ib) else {
        return;
    };
    if let Some(resp) = crate::pma::answer(&ib.ca, &mut ib.pma, m.port, &m.mad) {
        ib.ca.send_gmp(m.port, m.slid, m.src_qpn, &resp);
    }
}

/// Sets (or clears) the SMInfo of `port`'s SMA and IsSM in its capability mask: an SM runs
/// there (or no longer does).
pub(super) fn set_sm(devs: &mut [Device], dev: u32, port: u8, info: Option<SmInfo>) {
    let Some(ib) = devs.get_mut(dev as usize).and_then(Device::ib) else {
        return;
    };
    set_is_sm(ib, port, info.is_some());
    ib.ca.sma_mut().set_sm_info(info);
}

/// Sets or clears IsSM in the CapabilityMask of `port` (an SM runs there: softib's through
/// `SetSm`, or a program holding the port's IsSM file, `crate::issm`).
pub(super) fn set_is_sm(ib: &mut crate::device::IbDev, port: u8, on: bool) {
    let sma = ib.ca.sma_mut();
    let mask = sma.port_info(port).map_or(0, |p| p.capability_mask);
    let mask = if on {
        mask | capability_mask::IS_SM
    } else {
        mask & !capability_mask::IS_SM
    };
    sma.set_capability_mask(port, mask);
}
