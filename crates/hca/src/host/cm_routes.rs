//! Which agent gets a CM MAD (class 0x07). The kernel runs one CM per port and its users
//! are cm_ids; here every process runs its own CM machine (softib's librdmacm), so the
//! daemon sends each message to the process whose connection it names, as the kernel's
//! ib_cm finds the cm_id: a REQ or SIDR_REQ by its ServiceID, among the services the agents
//! listen on (`CmListen`); every other message by the communication ID it addresses (its
//! RemoteCommID — or, for a SIDR_REP, its RequestID), which the daemon learned when that
//! agent sent a message carrying it as its LocalCommID.
//!
//! A REQ for a service nobody listens on is rejected here and now (REJ, InvalidServiceID),
//! as the kernel's CM does; a SIDR_REQ gets a SIDR_REP saying the same. A message that names
//! no known connection goes to every agent of the port, whose machines answer as the spec
//! says (a DREP for a stray DREQ) or drop it; when no agent is there to hear it (the process
//! that owned the connection has exited), the daemon answers it itself as the kernel's CM,
//! which outlives its processes, would ([`CmRoutes::answer_unclaimed`]): otherwise the peer's
//! DREQ goes unanswered through every retry.

use std::collections::BTreeMap;

use softib_wire::mad::cm::{private_len, Drep, Message, MessageKind, Rej, RejectReason, SidrRep};
use softib_wire::mad::MAD_LEN;

/// Connections remembered per host; beyond this the table starts again (old connections'
/// messages then go to every agent, which filter them).
const MAX_CONNECTIONS: usize = 64 * 1024;

/// (device, port) → the routes of its CM.
#[derive(Debug, Default)]
pub(super) struct CmRoutes {
    /// (device, port, local communication ID) → the client whose connection it is.
    owners: BTreeMap<(u32, u8, u32), u64>,
    /// (device, ServiceID) → the client listening.
    listeners: BTreeMap<(u32, u64), u64>,
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
                true
            }
            (false, Some(&owner)) if owner == client => {
                self.listeners.remove(&(dev, service_id));
                true
            }
            (false, _) => true,
        }
    }

    /// Forgets what a client that went away owned.
    pub fn forget(&mut self, client: u64) {
        self.owners.retain(|_, c| *c != client);
        self.listeners.retain(|_, c| *c != client);
    }

    /// Where `mad`, arrived on `port` of `dev`, goes.
    pub fn route(&self, dev: u32, port: u8, mad: &[u8]) -> Route {
        let Ok((header, m)) = Message::parse(mad) else {
            // Malformed: every agent's machine counts it.
            return Route::All;
        };
        let owner = |id: u32| {
            self.owners
                .get(&(dev, port, id))
                .map_or(Route::All, |&c| Route::To(c))
        };
        match m {
            Message::Req(req) => match self.listeners.get(&(dev, req.service_id)) {
                Some(&c) => Route::To(c),
                None => {
                    let rej = Rej::new(
                        0,
                        req.local_comm_id,
                        MessageKind::Req,
                        RejectReason::InvalidServiceId,
                    );
                    Route::Answer(Box::new(Message::Rej(rej).emit(header.tid)))
                }
            },
            Message::SidrReq(req) => match self.listeners.get(&(dev, req.service_id)) {
                Some(&c) => Route::To(c),
                None => {
                    let rep = SidrRep::unsupported(&req);
                    Route::Answer(Box::new(Message::SidrRep(rep).emit(header.tid)))
                }
            },
            Message::Mra(x) => owner(x.remote_comm_id),
            Message::Rej(x) => owner(x.remote_comm_id),
            Message::Rep(x) => owner(x.remote_comm_id),
            Message::Rtu(x) => owner(x.remote_comm_id),
            Message::Dreq(x) => owner(x.remote_comm_id),
            Message::Drep(x) => owner(x.remote_comm_id),
            Message::SidrRep(x) => owner(x.request_id),
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use softib_wire::mad::cm::{self, Dreq, Rep, Rtu};
    use softib_wire::{Guid, Psn, QKey, Qpn};

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
        let req = {
            let mut m = Message::Rtu(Rtu {
                local_comm_id: 5,
                remote_comm_id: 0,
                private_data: [0; private_len::RTU],
            })
            .emit(9);
            // A REQ: attribute 0x0010 and a ServiceID at bytes 32..40.
            m[16..18].copy_from_slice(&0x0010u16.to_be_bytes());
            m[32..40].copy_from_slice(&cm::service_id(cm::PortSpace::Tcp, 7174).to_be_bytes());
            m
        };
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
            local_qkey: QKey(0),
            local_qpn: Qpn::new(0x20),
            local_eecn: 0,
            starting_psn: Psn::new(1),
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: 0,
            failover_accepted: 1,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: false,
            vendor_id: 0,
            local_ca_guid: Guid(1),
            private_data: [0; private_len::REP],
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
}
