//! A client of a host: one connection's session — who it is, what it owns, what it waits
//! for — and the reclamation of what it owned when it goes away.
//!
//! A `Client` holds no socket (the connection is the host's, `host_rt::Conn`), so that the
//! control handlers, which work on a `Client`, can be tested without one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Display;
use std::os::fd::OwnedFd;
use std::rc::Rc;

use softib_engine::verbs::AsyncEvent;
use softib_engine::{AhHandle, CqHandle, Hca, PdHandle, RegionId, SrqHandle};
use softib_net::ring::{PacketRing, Ring};
use softib_net::shm::SharedRegion;
use softib_proto::{ErrorKind, Mad, ProcessObject};
use softib_wire::Qpn;

use super::handlers::{refused, Refused};
use super::host_rt::Host;
use super::parked::Parked;
use super::quarantine::Held;
use crate::device::Device;
use crate::shm_memory::ShmMemory;

/// Per-client limits: a client that needs more gets a clear error, and one client cannot
/// exhaust the HCA for everyone else.
pub(super) const MAX_QPS_PER_CLIENT: usize = 16 * 1024;
pub(super) const MAX_MRS_PER_CLIENT: usize = 16 * 1024;
pub(super) const MAX_BUFFERS_PER_CLIENT: usize = 1024;
/// A quarter of the device's CQ table (`max_cq`), as QPs are a quarter of `max_qp`: at the
/// device's size, one client could take every CQ and leave none to anyone else. SRQs and
/// completion channels are held to it too.
pub(super) const MAX_CQS_PER_CLIENT: usize = 4 * 1024;
/// A quarter of the device's PD and address handle tables (`max_pd`, `max_ah`).
pub(super) const MAX_PDS_PER_CLIENT: usize = 16 * 1024;
pub(super) const MAX_AHS_PER_CLIENT: usize = 8 * 1024;
/// The most asynchronous events kept for a client that does not ask for them.
pub(super) const MAX_ASYNC_EVENTS: usize = 1024;

/// What a client owns, by (device, handle); everything here is reclaimed when it goes away.
#[derive(Debug, Default)]
pub(super) struct Owned {
    pub pds: BTreeSet<(u32, u32)>,
    pub cqs: BTreeSet<(u32, u32)>,
    pub qps: BTreeSet<(u32, Qpn)>,
    pub ahs: BTreeSet<(u32, u32)>,
    pub srqs: BTreeSet<(u32, u32)>,
    /// (device, MR L_Key) → its region id.
    pub mrs: BTreeMap<(u32, u32), RegionId>,
    /// Buffer id → (mapping, address in the client).
    pub buffers: BTreeMap<u64, (Rc<SharedRegion>, u64)>,
    /// The process data path: QPN blocks (device, first QPN) and memory keys (device, key)
    /// the client's own engine numbers its QPs and regions from, the objects that engine
    /// made (for `softib res`), and the devices whose steering group it joined.
    pub qpn_blocks: BTreeSet<(u32, Qpn)>,
    pub keys: BTreeSet<(u32, u32)>,
    pub process: BTreeSet<(u32, ProcessObject)>,
    pub steered: BTreeSet<u32>,
}

/// Refuses one more object when the client already holds `max` of them (`what`, plural, as
/// the refusal names them: "a client may hold at most 4096 QPs").
pub(super) fn within_limit(held: usize, max: usize, what: &str) -> Result<(), Refused> {
    if held < max {
        Ok(())
    } else {
        Err(refused(
            ErrorKind::Exhausted,
            format!("a client may hold at most {max} {what}"),
        ))
    }
}

/// Refuses a request that names an object of `set` this client does not own.
pub(super) fn owns<K: Ord + Copy + Display>(
    set: &BTreeSet<(u32, K)>,
    dev: u32,
    key: K,
    what: &str,
) -> Result<(), Refused> {
    if set.contains(&(dev, key)) {
        Ok(())
    } else {
        Err(refused(
            ErrorKind::NotFound,
            format!("no {what} {key} on device {dev} belongs to this client"),
        ))
    }
}

impl Owned {
    /// How many PDs, CQs, QPs, MRs and AHs it has on `dev` (`softib res`).
    /// What its own engine holds counts as its, as a hardware provider's objects do.
    pub fn count(&self, dev: u32) -> [u32; 5] {
        let mut own = [0u32; 5];
        for (_, o) in self.process.iter().filter(|k| k.0 == dev) {
            match o {
                ProcessObject::Pd(_) => own[0] += 1,
                ProcessObject::Cq(_) => own[1] += 1,
                ProcessObject::Qp(_) => own[2] += 1,
                ProcessObject::Ah(_) => own[4] += 1,
                ProcessObject::Srq(_) => {}
            }
        }
        own[3] = self.keys.iter().filter(|k| k.0 == dev).count() as u32;
        [
            own[0] + self.pds.iter().filter(|k| k.0 == dev).count() as u32,
            own[1] + self.cqs.iter().filter(|k| k.0 == dev).count() as u32,
            own[2] + self.qps.iter().filter(|k| k.0 == dev).count() as u32,
            own[3] + self.mrs.keys().filter(|k| k.0 == dev).count() as u32,
            own[4] + self.ahs.iter().filter(|k| k.0 == dev).count() as u32,
        ]
    }

    /// Whether it uses `dev` (has PDs or QPs there, or QPNs or objects of its own engine).
    pub fn uses(&self, dev: u32) -> bool {
        self.pds.iter().any(|(d, _)| *d == dev)
            || self.qps.iter().any(|(d, _)| *d == dev)
            || self.qpn_blocks.iter().any(|(d, _)| *d == dev)
            || self.process.iter().any(|(d, _)| *d == dev)
    }

    /// Whether `qpn` lies in one of its blocks of `dev`.
    pub fn has_qpn(&self, dev: u32, qpn: Qpn) -> bool {
        let first = Qpn::new(qpn.value() & !(softib_engine::QPN_BLOCK - 1));
        self.qpn_blocks.contains(&(dev, first))
    }

    /// Destroys all of it in the engines, users before what they use: QPs, SRQs, AHs, MRs
    /// (and their memory), CQs, PDs.
    fn destroy(&self, devs: &mut [Device]) {
        for (d, qpn) in &self.qps {
            if let Some(h) = hca(devs, *d) {
                let _ = h.destroy_qp(*qpn);
            }
            if let Some(dev) = devs.get_mut(*d as usize) {
                dev.forget_qp(*qpn);
            }
        }
        for (d, srq) in &self.srqs {
            if let Some(h) = hca(devs, *d) {
                let _ = h.destroy_srq(SrqHandle(*srq));
            }
        }
        for (d, ah) in &self.ahs {
            if let Some(h) = hca(devs, *d) {
                let _ = h.destroy_ah(AhHandle(*ah));
            }
        }
        for ((d, lkey), region) in &self.mrs {
            if let Some(h) = hca(devs, *d) {
                let _ = h.dereg_mr(*lkey);
                h.memory_mut().remove(*region);
            }
        }
        for (d, cq) in &self.cqs {
            if let Some(h) = hca(devs, *d) {
                let _ = h.destroy_cq(CqHandle(*cq));
            }
        }
        for (d, pd) in &self.pds {
            if let Some(h) = hca(devs, *d) {
                let _ = h.dealloc_pd(PdHandle(*pd));
            }
        }
    }
}

fn hca(devs: &mut [Device], dev: u32) -> Option<&mut Hca<ShmMemory>> {
    devs.get_mut(dev as usize).map(Device::hca_mut)
}

/// A MAD agent: the port a client opened (`OpenMad`), and whether as the SM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Agent {
    pub dev: u32,
    pub port: u8,
    pub sm: bool,
}

/// One client's session.
pub(super) struct Client {
    /// Its id on this host (the key of the host's maps).
    pub id: u64,
    /// Whether it said Hello (nothing else is served before).
    pub hello: bool,
    /// The pid and program it named in its Hello (for messages and `softib res`).
    pub pid: u32,
    pub program: String,
    /// The process at the other end of the socket, as the kernel says (SO_PEERCRED): whose
    /// memory `RegMrProcess` reaches.
    pub peer_pid: u32,
    /// Its user (SO_PEERCRED) and what that user may do here.
    pub uid: u32,
    pub access: super::admission::Access,
    pub owned: Owned,
    /// The request it waits on, answered later.
    pub parked: Option<Parked>,
    /// The ports it is a MAD agent on.
    pub agents: Vec<Agent>,
    pub mads: VecDeque<Mad>,
    /// Completion channels (eventfds the client passed), by handle.
    pub channels: BTreeMap<u64, OwnedFd>,
    /// Armed CQs: (device, CQ) → the channel to signal.
    pub armed: BTreeMap<(u32, u32), u64>,
    /// Completion rings: (device, CQ) → the ring the daemon moves that CQ's completions into,
    /// which the client polls without a request.
    pub cq_rings: BTreeMap<(u32, u32), Ring>,
    /// A ring broke (the client scribbled on it): the client is dropped.
    pub broken: bool,
    /// The submission ring and its doorbell, once the client attached them.
    pub submit: Option<(Ring, OwnedFd)>,
    /// The eventfd that wakes the client when it sleeps for a completion (`AttachWakeup`).
    pub wakeup: Option<OwnedFd>,
    /// Ring entries the engine refused although the library had checked them (their WRs
    /// are lost; counted and logged, as a device reports an asynchronous error).
    pub submit_errors: u64,
    /// Hand-on rings by device (`SteerJoin`), drained every turn.
    pub hand_on: BTreeMap<u32, PacketRing>,
    /// Descriptors that travel with the next answer (a steering socket).
    pub reply_fds: Vec<OwnedFd>,
    /// Asynchronous events of its objects and of the ports, not yet asked for (the newest
    /// [`MAX_ASYNC_EVENTS`]).
    pub events: VecDeque<(u32, AsyncEvent)>,
    /// The eventfd signalled when an event is queued (`AttachAsyncEvents`).
    pub events_fd: Option<OwnedFd>,
    /// The eventfd signalled when a MAD is queued for it (`AttachMadWakeup`).
    pub mad_wakeup: Option<OwnedFd>,
    /// Its process engines' event channels, by device (`OpenEvents`).
    pub event_channels: BTreeMap<u32, super::peer_rings::EventChannel>,
}

impl Client {
    /// Client `id`, connected from process `peer_pid`, that has not said Hello yet.
    pub fn new(id: u64, peer_pid: u32) -> Client {
        Client {
            id,
            hello: false,
            pid: 0,
            program: String::new(),
            peer_pid,
            uid: 0,
            access: super::admission::Access::Manage,
            owned: Owned::default(),
            parked: None,
            agents: Vec::new(),
            mads: VecDeque::new(),
            channels: BTreeMap::new(),
            armed: BTreeMap::new(),
            cq_rings: BTreeMap::new(),
            broken: false,
            submit: None,
            wakeup: None,
            submit_errors: 0,
            hand_on: BTreeMap::new(),
            reply_fds: Vec::new(),
            events: VecDeque::new(),
            events_fd: None,
            mad_wakeup: None,
            event_channels: BTreeMap::new(),
        }
    }

    /// Whether it is an agent on `port` of `dev` (as the SM, if `sm`).
    pub fn is_agent(&self, dev: u32, port: u8, sm: bool) -> bool {
        self.agents
            .iter()
            .any(|a| a.dev == dev && a.port == port && (a.sm || !sm))
    }

    /// The client went away: reclaims everything it owned, as the kernel does when a
    /// process holding uverbs objects exits. Its QPs are destroyed; their peers see what a peer
    /// of a dead process sees on real hardware (no more responses: retries exhausted). A port
    /// it ran the SM on no longer says IsSM, and responses to its MADs go to nobody in
    /// particular.
    ///
    /// On the process data path its QPs died with its engine: its QPN blocks and memory keys
    /// are quarantined (`quarantine`), and its steering sockets leave their groups.
    pub fn reclaim(self, host: &mut Host) {
        self.owned.destroy(&mut host.devs);
        let now = std::time::Instant::now();
        for &(dev, first) in &self.owned.qpn_blocks {
            host.quarantine.hold(now, dev, Held::Block(first));
        }
        for &(dev, key) in &self.owned.keys {
            host.quarantine.hold(now, dev, Held::Key(key));
        }
        for &dev in &self.owned.steered {
            if let Some((group, socket)) =
                host.devs.get_mut(dev as usize).and_then(Device::steering)
            {
                if let Err(e) = group.leave(self.id, socket) {
                    eprintln!(
                        "softibd[{}]: cannot steer device {dev}'s datagrams after client {} \
                         left: {e}",
                        host.name, self.id
                    );
                }
            }
        }
        for a in self.agents.iter().filter(|a| a.sm) {
            super::mads::set_sm(&mut host.devs, a.dev, a.port, None);
        }
        host.tids.forget(self.id);
        host.cm.forget(self.id);
        host.peer_rings.client_gone(self.id);
        for (&dev, ch) in &self.event_channels {
            host.departed.keep(dev, &ch.counters);
        }
        if std::env::var_os("SOFTIB_LOG").is_some() {
            eprintln!(
                "softibd[{}]: client {} (pid {}) gone; its resources reclaimed",
                host.name, self.program, self.pid
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use softib_proto::{Request, Response};

    use super::*;
    use crate::host::testing::{eventfd, TestHost};

    #[test]
    fn a_client_that_goes_leaves_nothing_behind_in_the_engine() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let (pd, cq, _) = t.qp(a);
        let srq = t.srq(a, pd);
        let ah = t.ah(a, pd);
        let map = SharedRegion::create("softib-unit-reclaim", 4096).unwrap();
        let fd = map.fd().try_clone_to_owned().unwrap();
        let Some(Response::Handle(buffer)) =
            t.call_with(a, vec![fd], Request::AttachBuffer { len: 4096, addr: 0 })
        else {
            panic!("not attached");
        };
        let Response::Mr { lkey, .. } = t.ok(
            a,
            Request::RegMr {
                dev: 0,
                pd,
                buffer,
                addr: 0,
                len: 4096,
                access: Default::default(),
            },
        ) else {
            panic!("no MR");
        };
        let region = t.clients[&a].owned.mrs[&(0, lkey)];
        t.call_with(a, vec![eventfd()], Request::CreateCompChannel);
        t.ok(
            a,
            Request::OpenMad {
                dev: 0,
                port: 1,
                sm: true,
            },
        );
        let (_, _, b_qpn) = t.qp(b);

        t.drop_client(a);
        let hca = t.hca();
        assert_eq!(
            hca.qpns().collect::<Vec<_>>(),
            [b_qpn],
            "only B's QP is left"
        );
        assert!(hca.mr(lkey).is_none());
        assert!(
            hca.memory().borrow(region, 0, 1).is_none(),
            "its memory is still reachable"
        );
        // Everything it held was destroyed, the PD last (it is refused while in use).
        assert!(hca.destroy_srq(SrqHandle(srq)).is_err());
        assert!(hca.destroy_ah(AhHandle(ah)).is_err());
        assert!(hca.destroy_cq(CqHandle(cq)).is_err());
        assert!(hca.dealloc_pd(PdHandle(pd)).is_err());
        // The port it was the SM on is free for another SM.
        t.ok(
            b,
            Request::OpenMad {
                dev: 0,
                port: 1,
                sm: true,
            },
        );
    }
}
