//! The CM's input from the network: [`Cm::handle_mad`] and a handler per message (IBA §12.6),
//! which moves the connection it names along the state diagram of §12.9, answers duplicates
//! and strays as the spec says, and counts what it drops.

use std::time::Duration;

use softib_wire::mad::cm::{private_len, ARI_LEN};
use softib_wire::mad::MAD_LEN;
use softib_wire::types::Qpn;

use crate::{
    cm_timeout, Cm, CommId, Conn, Drep, Dreq, Event, Message, MessageKind, Mra, Rej, RejectReason,
    Rep, Req, Rtu, SidrRep, SidrReq, State, TransportService,
};

impl<A: Copy + Ord + std::fmt::Debug> Cm<A> {
    /// A CM MAD arrived from `from`.
    pub fn handle_mad(&mut self, now: Duration, from: A, mad: &[u8]) {
        // A MAD is exactly 256 bytes (IBA §13.4); what is not is no CM message.
        let parsed = (mad.len() == MAD_LEN).then(|| Message::parse(mad));
        let Some(Ok((_, m))) = parsed else {
            self.counters.malformed += 1;
            return;
        };
        match m {
            Message::Req(req) => self.on_req(from, req),
            Message::Mra(mra) => self.on_mra(now, from, mra),
            Message::Rej(rej) => self.on_rej(now, from, rej),
            Message::Rep(rep) => self.on_rep(from, rep),
            Message::Rtu(rtu) => self.on_rtu(from, rtu),
            Message::Dreq(dreq) => self.on_dreq(now, from, dreq),
            Message::Drep(drep) => self.on_drep(now, from, drep),
            Message::SidrReq(req) => self.on_sidr_req(from, req),
            Message::SidrRep(rep) => self.on_sidr_rep(from, rep),
        }
    }

    /// The connection a message names by its RemoteCommID, if it is ours and from `from`.
    fn addressed(&mut self, from: A, remote_comm_id: u32) -> Option<CommId> {
        match self.conns.get(&remote_comm_id) {
            Some(c) if c.peer == from => Some(remote_comm_id),
            _ => {
                self.counters.unknown_comm_id += 1;
                None
            }
        }
    }

    fn reject_req(&mut self, to: A, req: &Req, reason: RejectReason) {
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: req.local_comm_id,
            message_rejected: MessageKind::Req,
            rejected_info_len: 0,
            reason,
            ari: [0; ARI_LEN],
            private_data: [0; private_len::REJ],
        };
        self.send(to, &Message::Rej(rej));
    }

    fn on_req(&mut self, from: A, req: Req) {
        let dup = self.conns.iter().find(|(_, c)| {
            !c.active
                && c.peer == from
                && c.remote_comm_id == req.local_comm_id
                && c.remote_ca_guid == req.local_ca_guid
        });
        if let Some((&id, c)) = dup {
            self.counters.duplicate_req += 1;
            match c.state {
                State::ReqRcvd => {
                    let mra = Mra {
                        local_comm_id: id,
                        remote_comm_id: req.local_comm_id,
                        message_mraed: MessageKind::Req,
                        service_timeout: self.config.mra_service_timeout,
                        private_data: [0; private_len::MRA],
                    };
                    self.send(from, &Message::Mra(mra));
                }
                State::RepSent => {
                    if let Some(rep) = c.last {
                        self.transmit.push_back((from, rep));
                    }
                }
                _ => {}
            }
            return;
        }
        let stale = self.conns.values().any(|c| {
            c.peer == from
                && c.remote_ca_guid == req.local_ca_guid
                && c.remote_qpn == req.local_qpn
                && matches!(c.state, State::RepSent | State::Established)
        });
        if stale {
            self.counters.stale += 1;
            self.reject_req(from, &req, RejectReason::StaleConn);
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            self.counters.no_listener += 1;
            self.reject_req(from, &req, RejectReason::InvalidServiceId);
            return;
        }
        // What no QP could be set up for is rejected before the consumer hears of it, with
        // the reason that names the field (IBA §12.6.7.2, table 106).
        let invalid = if !matches!(
            req.transport_service,
            TransportService::Rc | TransportService::Uc
        ) {
            Some(RejectReason::InvalidTransportType)
        } else if !(1..=5).contains(&req.path_mtu) {
            Some(RejectReason::InvalidMtu)
        } else {
            None
        };
        if let Some(reason) = invalid {
            self.counters.invalid_req += 1;
            self.reject_req(from, &req, reason);
            return;
        }
        let Some(l) = self.listeners.get_mut(&req.service_id) else {
            return;
        };
        if l.pending >= l.backlog {
            self.counters.backlog_full += 1;
            self.reject_req(from, &req, RejectReason::NoResources);
            return;
        }
        l.pending += 1;
        let id = self.alloc_comm_id();
        self.conns.insert(
            id,
            Conn {
                peer: from,
                state: State::ReqRcvd,
                active: false,
                remote_comm_id: req.local_comm_id,
                remote_ca_guid: req.local_ca_guid,
                remote_qpn: req.local_qpn,
                local_qpn: Qpn::new(0),
                listener: Some(req.service_id),
                peer_timeout: cm_timeout(req.local_cm_response_timeout),
                peer_retries: req.max_cm_retries,
                last: None,
                retx: None,
                time_wait_until: None,
            },
        );
        self.events
            .push_back(Event::ConnectRequest { id, from, req });
    }

    fn on_mra(&mut self, now: Duration, from: A, mra: Mra) {
        let Some(id) = self.addressed(from, mra.remote_comm_id) else {
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        let fits = match (c.state, mra.message_mraed) {
            (State::ReqSent | State::RepWait, MessageKind::Req) => {
                c.state = State::RepWait;
                true
            }
            (State::RepSent, MessageKind::Rep) => true,
            _ => false,
        };
        match (fits, c.retx.as_mut()) {
            (true, Some(r)) => {
                // The peer needs its service timeout on top of the usual wait; the retries
                // left stay as they were.
                r.deadline = now + cm_timeout(mra.service_timeout) + r.interval;
            }
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_rej(&mut self, now: Duration, from: A, rej: Rej) {
        let Some(id) = self.addressed(from, rej.remote_comm_id) else {
            return;
        };
        let Some(c) = self.conns.get(&id) else {
            return;
        };
        match c.state {
            State::ReqSent | State::RepWait | State::RepRcvd | State::RepSent => {
                let listener = c.listener;
                self.release_backlog(listener);
                self.conns.remove(&id);
                self.events.push_back(Event::Rejected {
                    id,
                    reason: rej.reason,
                    private_data: rej.private_data,
                });
            }
            // The peer gave up on our RTU (all lost) after we thought the connection
            // established: it is gone (IBA §12.9.7: REJ in Established enters TimeWait).
            State::Established => {
                self.enter_time_wait(now, id);
                self.events.push_back(Event::Disconnected { id });
            }
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_rep(&mut self, from: A, rep: Rep) {
        let Some(c) = self
            .conns
            .get_mut(&rep.remote_comm_id)
            .filter(|c| c.peer == from && c.active)
        else {
            self.counters.unknown_comm_id += 1;
            let rej = Rej::new(
                0,
                rep.local_comm_id,
                MessageKind::Rep,
                RejectReason::InvalidCommId,
            );
            self.send(from, &Message::Rej(rej));
            return;
        };
        let id = rep.remote_comm_id;
        match c.state {
            State::ReqSent | State::RepWait => {
                c.state = State::RepRcvd;
                c.remote_comm_id = rep.local_comm_id;
                c.remote_ca_guid = rep.local_ca_guid;
                c.remote_qpn = rep.local_qpn;
                c.retx = None;
                self.events.push_back(Event::Reply { id, rep });
            }
            State::Established if c.remote_comm_id == rep.local_comm_id => {
                // Our RTU was lost: send it again.
                self.counters.duplicate_rep += 1;
                if let Some(rtu) = c.last {
                    self.transmit.push_back((from, rtu));
                }
            }
            State::RepRcvd => self.counters.duplicate_rep += 1,
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_rtu(&mut self, from: A, rtu: Rtu) {
        let Some(id) = self.addressed(from, rtu.remote_comm_id) else {
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        match c.state {
            State::RepSent if c.remote_comm_id == rtu.local_comm_id => {
                c.state = State::Established;
                c.retx = None;
                self.events.push_back(Event::Established { id });
            }
            // A duplicate RTU, or one after `establish`.
            State::Established => {}
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_dreq(&mut self, now: Duration, from: A, dreq: Dreq) {
        let drep = |local: u32| {
            Message::Drep(Drep {
                local_comm_id: local,
                remote_comm_id: dreq.local_comm_id,
                private_data: [0; private_len::DREP],
            })
        };
        let known = self.conns.get(&dreq.remote_comm_id).filter(|c| {
            c.peer == from
                && c.remote_comm_id == dreq.local_comm_id
                && c.local_qpn == dreq.remote_qpn
        });
        let Some(c) = known else {
            // IBA §12.9.8.4: a DREQ for a connection we do not know is answered, so that
            // the peer can leave its DreqSent.
            self.counters.unknown_comm_id += 1;
            self.send(from, &drep(dreq.remote_comm_id));
            return;
        };
        let id = dreq.remote_comm_id;
        match c.state {
            State::Established | State::DreqSent | State::RepSent => {
                let mad = self.send(from, &drep(id));
                if let Some(c) = self.conns.get_mut(&id) {
                    c.last = Some(mad);
                }
                self.enter_time_wait(now, id);
                self.events.push_back(Event::Disconnected { id });
            }
            State::TimeWait => {
                self.counters.duplicate_dreq += 1;
                let mad = self.conns.get(&id).and_then(|c| c.last);
                match mad {
                    Some(m)
                        if Message::parse(&m).is_ok_and(|(_, x)| matches!(x, Message::Drep(_))) =>
                    {
                        self.transmit.push_back((from, m));
                    }
                    _ => {
                        self.send(from, &drep(id));
                    }
                }
            }
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_drep(&mut self, now: Duration, from: A, drep: Drep) {
        let Some(id) = self.addressed(from, drep.remote_comm_id) else {
            return;
        };
        let state = self.conns.get(&id).map(|c| c.state);
        match state {
            Some(State::DreqSent) => {
                self.enter_time_wait(now, id);
                self.events.push_back(Event::Disconnected { id });
            }
            Some(State::TimeWait) => {}
            _ => self.counters.wrong_state += 1,
        }
    }

    fn on_sidr_req(&mut self, from: A, req: SidrReq) {
        if self
            .sidr_in
            .values()
            .any(|&(p, r, _)| p == from && r == req.request_id)
        {
            // Still with the consumer: the answer will go when it comes.
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            self.counters.no_listener += 1;
            let rep = SidrRep::unsupported(&req);
            self.send(from, &Message::SidrRep(rep));
            return;
        }
        let id = self.alloc_comm_id();
        self.sidr_in
            .insert(id, (from, req.request_id, req.service_id));
        self.events.push_back(Event::SidrRequest { id, from, req });
    }

    fn on_sidr_rep(&mut self, from: A, rep: SidrRep) {
        match self.sidr_out.get(&rep.request_id) {
            Some(s) if s.peer == from => {
                self.sidr_out.remove(&rep.request_id);
                self.events.push_back(Event::SidrReply {
                    id: rep.request_id,
                    rep,
                });
            }
            _ => self.counters.unknown_comm_id += 1,
        }
    }
}
