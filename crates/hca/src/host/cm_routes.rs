//! Which agent gets a CM MAD (class 0x07). The kernel runs one CM per port and its users
//! are cm_ids; here every process runs its own CM machine (softib's librdmacm), so the
//! daemon sends each message to the process whose connection it names, as the kernel's
//! ib_cm finds the cm_id: a REQ or SIDR_REQ by its ServiceID, among the services the agents
//! listen on (`CmListen`); every other message by the communication ID it addresses (its
//! RemoteCommID — or, for a SIDR_REP, its RequestID), which the daemon learned when that
//! agent sent a message carrying it as its LocalCommID.
//!
//! A REQ for a service nobody listens on is rejected here and now (REJ, InvalidServiceID),
//! as the kernel's CM does; a SIDR_REQ gets a SIDR_REP saying the same. One exception: a
//! service that a process still connected to the daemon listened on and stopped listening on
//! has its REQs held for [`HOLD`] (then rejected), and handed to the process if it listens
//! again meanwhile. A listen here is a request to the daemon through the process's CM
//! thread, slower than the kernel's system call, and programs count on a listen's speed:
//! perftest's `-R` server stops listening after the connection of its exchange, then listens
//! on the same port for its test QPs while its client, told to go on by that exchange,
//! already sends its REQ. A message that names
//! no known connection goes to every agent of the port, whose machines answer as the spec
//! says (a DREP for a stray DREQ) or drop it; when no agent is there to hear it (the process
//! that owned the connection has exited), the daemon answers it itself as the kernel's CM,
//! which outlives its processes, would ([`CmRoutes::answer_unclaimed`]): otherwise the peer's
//! DREQ goes unanswered through every retry.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use softib_wire::mad::cm::{private_len, Drep, Message, MessageKind, Rej, RejectReason, SidrRep};
use softib_wire::mad::MAD_LEN;

use crate::ib::MadIn;

/// Connections remembered per host; beyond this the table starts again (old connections'
/// messages then go to every agent, which filter them).
const MAX_CONNECTIONS: usize = 64 * 1024;

/// How long a REQ (or SIDR_REQ) for a service its process stopped listening on waits for it
/// to listen again. Below the CM response timeout rdma_cm's REQs give (4.3 s), so that the
/// requester does not retransmit meanwhile.
pub(super) const HOLD: Duration = Duration::from_secs(2);

/// REQs held at once; beyond this they are rejected at once.
const MAX_HELD: usize = 1024;

/// (device, port) → the routes of its CM.
#[derive(Debug, Default)]
pub(super) struct CmRoutes {
    /// (device, port, local communication ID) → the client whose connection it is.
    owners: BTreeMap<(u32, u8, u32), u64>,
    /// (device, ServiceID) → the client listening.
    listeners: BTreeMap<(u32, u64), u64>,
    /// (device, ServiceID) → the client that listened there last and no longer does (while
    /// it is connected).
    unlistened: BTreeMap<(u32, u64), u64>,
    /// REQs and SIDR_REQs for an unlistened service, oldest first: until when, the device,
    /// the ServiceID, the MAD.
    held: Vec<(Instant, u32, u64, MadIn)>,
}

/// Where an arriving CM MAD goes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    /// To this client.
    To(u64),
    /// To every agent of the port.
    All,
    /// Nobody listens: send this answer back instead.
    Answer(Box<[u8; MAD_LEN]>),
    /// A REQ for a service its process stopped listening on: hold it ([`CmRoutes::hold`]).
    Hold(u64),
}

impl CmRoutes {
    /// Client `client` sent `mad` from `port` of `dev`: the connection it names is its.
    pub fn note_sent(&mut self, dev: u32, port: u8, mad: &[u8], client: u64) {
        let Ok((_, m)) = Message::parse(mad) else {
            return;
        };
        let local = match m {
            Message::Req(x) => x.local_comm_id,
            Message::Mra(x) => x.local_comm_id,
            Message::Rej(x) => x.local_comm_id,
            Message::Rep(x) => x.local_comm_id,
            Message::Rtu(x) => x.local_comm_id,
            Message::Dreq(x) => x.local_comm_id,
            Message::Drep(x) => x.local_comm_id,
            Message::SidrReq(x) => x.request_id,
            Message::SidrRep(_) => return,
        };
        if local == 0 {
            return;
        }
        if self.owners.len() >= MAX_CONNECTIONS {
            self.owners.clear();
        }
        self.owners.insert((dev, port, local), client);
    }

    /// Client `client` listens (or no longer does) on `service_id` of `dev`. False when
    /// another client listens there already.
    pub fn listen(&mut self, dev: u32, service_id: u64, client: u64, on: bool) -> bool {
        match (on, self.listeners.get(&(dev, service_id))) {
            (true, Some(&other)) if other != client => false,
            (true, _) => {
                self.listeners.insert((dev, service_id), client);
                self.unlistened.remove(&(dev, service_id));
                true
            }
            (false, Some(&owner)) if owner == client => {
                self.listeners.remove(&(dev, service_id));
                self.unlistened.insert((dev, service_id), client);
                true
            }
            (false, _) => true,
        }
    }

    /// Forgets what a client that went away owned.
    pub fn forget(&mut self, client: u64) {
        self.owners.retain(|_, c| *c != client);
        self.listeners.retain(|_, c| *c != client);
        self.unlistened.retain(|_, c| *c != client);
    }

    /// Holds `m`, a REQ or SIDR_REQ for `service_id` ([`Route::Hold`]), until `now` +
    /// [`HOLD`]; gives it back (answer it now) when too many are held.
    pub fn hold(&mut self, now: Instant, dev: u32, service_id: u64, m: MadIn) -> Option<MadIn> {
        if self.held.len() >= MAX_HELD {
            return Some(m);
        }
        self.held.push((now + HOLD, dev, service_id, m));
        None
    }

    /// The held REQs for `service_id` of `dev`, which a client now listens on.
    pub fn take_held(&mut self, dev: u32, service_id: u64) -> Vec<MadIn> {
        let (take, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.1 == dev && h.2 == service_id);
        self.held = keep;
        take.into_iter().map(|h| h.3).collect()
    }

    /// The held REQs whose wait ran out by `now`, or whose service's process went away,
    /// with the device they came on: to be answered as for a service nobody listens on.
    pub fn expired(&mut self, now: Instant) -> Vec<(u32, MadIn)> {
        if self.held.is_empty() {
            return Vec::new();
        }
        let unlistened = &self.unlistened;
        let (gone, keep) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| now >= h.0 || !unlistened.contains_key(&(h.1, h.2)));
        self.held = keep;
        gone.into_iter().map(|h| (h.1, h.3)).collect()
    }

    /// When the first held REQ's wait runs out.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.0).min()
    }

    /// Where `mad`, arrived on `port` of `dev`, goes.
    pub fn route(&self, dev: u32, port: u8, mad: &[u8]) -> Route {
        let Ok((_, m)) = Message::parse(mad) else {
            // Malformed: every agent's machine counts it.
            return Route::All;
        };
        let owner = |id: u32| {
            self.owners
                .get(&(dev, port, id))
                .map_or(Route::All, |&c| Route::To(c))
        };
        match m {
            Message::Req(req) => self.to_listener(dev, req.service_id, mad),
            Message::SidrReq(req) => self.to_listener(dev, req.service_id, mad),
            Message::Mra(x) => owner(x.remote_comm_id),
            Message::Rej(x) => owner(x.remote_comm_id),
            Message::Rep(x) => owner(x.remote_comm_id),
            Message::Rtu(x) => owner(x.remote_comm_id),
            Message::Dreq(x) => owner(x.remote_comm_id),
            Message::Drep(x) => owner(x.remote_comm_id),
            Message::SidrRep(x) => owner(x.request_id),
        }
    }

    /// Where a REQ or SIDR_REQ for `service_id` goes: to its listener; held, when its
    /// process stopped listening there; else answered at once.
    fn to_listener(&self, dev: u32, service_id: u64, mad: &[u8]) -> Route {
        if let Some(&c) = self.listeners.get(&(dev, service_id)) {
            return Route::To(c);
        }
        if self.unlistened.contains_key(&(dev, service_id)) {
            return Route::Hold(service_id);
        }
        // A REQ or SIDR_REQ that parsed always has an answer.
        Self::no_listener(mad).map_or(Route::All, Route::Answer)
    }

    /// The answer to a REQ (REJ InvalidServiceID) or SIDR_REQ (SIDR_REP unsupported
    /// ServiceID) for a service nobody listens on.
    pub fn no_listener(mad: &[u8]) -> Option<Box<[u8; MAD_LEN]>> {
        let (header, m) = Message::parse(mad).ok()?;
        let answer = match m {
            Message::Req(req) => Message::Rej(Rej::new(
                0,
                req.local_comm_id,
                MessageKind::Req,
                RejectReason::InvalidServiceId,
            )),
            Message::SidrReq(req) => Message::SidrRep(SidrRep::unsupported(&req)),
            _ => return None,
        };
        Some(Box::new(answer.emit(header.tid)))
    }

    /// The answer to a CM MAD no agent of the port took, as a CM that has no such
    /// connection gives it: a DREQ gets a DREP (IBA §12.9.8.4, so that the peer leaves
    /// DreqSent at once), a REP a REJ with InvalidCommID (§12.6.5). Everything else is
    /// dropped: nothing waits for an answer to it.
    pub fn answer_unclaimed(mad: &[u8]) -> Option<Box<[u8; MAD_LEN]>> {
        let (header, m) = Message::parse(mad).ok()?;
        let answer = match m {
            Message::Dreq(dreq) => Message::Drep(Drep {
                local_comm_id: dreq.remote_comm_id,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; private_len::DREP],
            }),
            Message::Rep(rep) => Message::Rej(Rej::new(
                0,
                rep.local_comm_id,
                MessageKind::Rep,
                RejectReason::InvalidCommId,
            )),
            _ => return None,
        };
        Some(Box::new(answer.emit(header.tid)))
    }
}

/// A REQ from communication ID `local_comm_id` for `service_id`, with `tid` (an RTU with a
/// REQ's attribute and ServiceID: the routes read no more of it).
#[cfg(test)]
pub(super) fn test_req(local_comm_id: u32, service_id: u64, tid: u64) -> [u8; MAD_LEN] {
    let mut m = Message::Rtu(softib_wire::mad::cm::Rtu {
        local_comm_id,
        remote_comm_id: 0,
        private_data: [0; private_len::RTU],
    })
    .emit(tid);
    m[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
    m[32..40].copy_from_slice(&service_id.to_be_bytes());
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_wire::mad::cm::{self, Dreq, Rep, Rtu};
    use softib_wire::Qpn;

    fn rtu(local: u32, remote: u32) -> [u8; MAD_LEN] {
        Message::Rtu(Rtu {
            local_comm_id: local,
            remote_comm_id: remote,
            private_data: [0; private_len::RTU],
        })
        .emit(1)
    }

    #[test]
    fn messages_go_to_the_owner_of_the_connection_they_name() {
        let mut r = CmRoutes::default();
        r.note_sent(0, 1, &rtu(7, 99), 42);
        assert_eq!(r.route(0, 1, &rtu(99, 7)), Route::To(42));
        assert_eq!(r.route(0, 1, &rtu(99, 8)), Route::All);
        assert_eq!(r.route(1, 1, &rtu(99, 7)), Route::All, "another device");
        r.forget(42);
        assert_eq!(r.route(0, 1, &rtu(99, 7)), Route::All);
        assert_eq!(r.route(0, 1, &[0u8; 10]), Route::All);
    }

    #[test]
    fn a_req_goes_to_its_listener_or_is_rejected_here() {
        let mut r = CmRoutes::default();
        let req = test_req(5, cm::service_id(cm::PortSpace::Tcp, 7174), 9);
        let Route::Answer(rej) = r.route(0, 1, &req) else {
            panic!("no REJ");
        };
        let Ok((h, Message::Rej(j))) = Message::parse(&rej[..]) else {
            panic!("not a REJ");
        };
        assert_eq!(
            (h.tid, j.remote_comm_id, j.reason),
            (9, 5, RejectReason::InvalidServiceId)
        );
        assert!(r.listen(0, cm::service_id(cm::PortSpace::Tcp, 7174), 3, true));
        assert!(!r.listen(0, cm::service_id(cm::PortSpace::Tcp, 7174), 4, true));
        assert_eq!(r.route(0, 1, &req), Route::To(3));
    }

    /// The owner of a connection exited without tearing it down (perftest's ib_atomic_lat
    /// server returns from main after its last handshake): the peer's DREQ finds no agent,
    /// and the daemon answers it with the DREP, naming the connection as the DREQ did.
    #[test]
    fn a_dreq_nobody_takes_gets_a_drep_and_a_stray_rep_a_rej() {
        let mut r = CmRoutes::default();
        let dreq = Message::Dreq(Dreq {
            local_comm_id: 0x51,
            remote_comm_id: 0x77,
            remote_qpn: Qpn::new(0x12),
            private_data: [0; private_len::DREQ],
        })
        .emit(0xAB);
        let drep_of = |mad: &[u8]| {
            let answer = CmRoutes::answer_unclaimed(mad).expect("a DREQ is answered");
            match Message::parse(&answer[..]) {
                Ok((h, Message::Drep(d))) => (h.tid, d.local_comm_id, d.remote_comm_id),
                other => panic!("not a DREP: {other:?}"),
            }
        };
        // The agent that owned connection 0x77 went away: its DREQ goes to whoever is left.
        r.note_sent(0, 1, &rtu(0x77, 0x51), 3);
        r.forget(3);
        assert_eq!(r.route(0, 1, &dreq), Route::All);
        assert_eq!(drep_of(&dreq), (0xAB, 0x77, 0x51));

        let rep = Message::Rep(Rep {
            local_comm_id: 0x99,
            remote_comm_id: 0x42,
            local_qpn: Qpn::new(0x20),
            ..Rep::default()
        })
        .emit(5);
        let answer = CmRoutes::answer_unclaimed(&rep).expect("a REP is answered");
        let Ok((_, Message::Rej(j))) = Message::parse(&answer[..]) else {
            panic!("not a REJ");
        };
        assert_eq!(
            (j.remote_comm_id, j.reason, j.message_rejected),
            (0x99, RejectReason::InvalidCommId, MessageKind::Rep)
        );
        assert!(CmRoutes::answer_unclaimed(&rtu(1, 2)).is_none(), "an RTU");
        assert!(CmRoutes::answer_unclaimed(&[0u8; 12]).is_none(), "junk");
    }

    fn mad_in(mad: [u8; MAD_LEN]) -> MadIn {
        MadIn {
            port: 1,
            qp: softib_proto::MadQp::Gsi,
            slid: softib_wire::Lid(0),
            src_qpn: Qpn::GSI,
            sgid: None,
            mad,
        }
    }

    /// perftest's `-R` server stops listening on its port after the exchange's connection and
    /// listens there again for its test QPs; the client's REQ that arrives in between waits
    /// for the listen instead of being rejected. A port nobody listened on is still
    /// rejected at once, and a held REQ is rejected once its wait runs out or its process
    /// goes.
    #[test]
    fn a_req_for_a_service_its_process_stopped_listening_on_waits_for_it() {
        let svc = cm::service_id(cm::PortSpace::Tcp, 18515);
        let mut r = CmRoutes::default();
        let t0 = Instant::now();
        assert!(matches!(
            r.route(0, 1, &test_req(1, svc, 1)),
            Route::Answer(_)
        ));
        assert!(r.listen(0, svc, 3, true));
        assert!(r.listen(0, svc, 3, false));
        assert_eq!(r.route(0, 1, &test_req(1, svc, 1)), Route::Hold(svc));
        assert!(r.hold(t0, 0, svc, mad_in(test_req(1, svc, 1))).is_none());
        assert_eq!(r.next_deadline(), Some(t0 + HOLD));
        assert!(r.expired(t0).is_empty(), "held until the listen");
        assert!(r.listen(0, svc, 3, true));
        let released = r.take_held(0, svc);
        assert_eq!(released.len(), 1);
        assert_eq!(released[0].mad, test_req(1, svc, 1));
        assert_eq!(r.route(0, 1, &test_req(2, svc, 2)), Route::To(3));
        // Not listened on again: rejected when the wait runs out.
        assert!(r.listen(0, svc, 3, false));
        assert!(r.hold(t0, 0, svc, mad_in(test_req(3, svc, 3))).is_none());
        assert!(r.expired(t0 + HOLD / 2).is_empty());
        assert_eq!(r.expired(t0 + HOLD).len(), 1);
        assert_eq!(r.next_deadline(), None);
        // The process went away: at once.
        assert!(r.hold(t0, 0, svc, mad_in(test_req(4, svc, 4))).is_none());
        r.forget(3);
        assert_eq!(r.expired(t0).len(), 1);
        assert!(matches!(
            r.route(0, 1, &test_req(5, svc, 5)),
            Route::Answer(_)
        ));
        let rej = CmRoutes::no_listener(&test_req(5, svc, 5)).expect("a REJ");
        assert!(matches!(
            Message::parse(&rej[..]),
            Ok((
                _,
                Message::Rej(Rej {
                    reason: RejectReason::InvalidServiceId,
                    remote_comm_id: 5,
                    ..
                })
            ))
        ));
    }
}
