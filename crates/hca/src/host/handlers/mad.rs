//! Management datagrams: a client becomes a MAD agent on an IB port (`OpenMad`, as the SM or
//! not), sends SMPs and GMPs (a request's TID is noted, so that its response comes back to
//! this agent only: `mads::TidOwners`), receives what `mads::dispatch_mad` queued for it, and,
//! as the SM, sets the port's SMInfo and IsSM.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

use softib_proto::{ErrorKind, Response};
use softib_wire::mad::attr::SmInfo;
use softib_wire::mad::{self, smp, MAD_LEN};
use softib_wire::{Gid, Lid, Qpn};

use super::{nonblocking, passed_fd, refused, Handled, Refused};
use crate::host::client::{Agent, Client};
use crate::host::host_rt::Host;
use crate::host::mads;
use crate::host::parked::{deadline, Parked};

/// `OpenMad`: client `id` becomes an agent on `port`; only one client per port may be the SM.
pub(super) fn open_mad(
    h: &mut Host,
    clients: &mut BTreeMap<u64, Client>,
    id: u64,
    dev: u32,
    port: u8,
    sm: bool,
) -> Handled {
    // A RoCE device has one port, whose QP1 carries the CM's GMPs.
    let ports = match h.dev(dev)?.ib() {
        Some(ib) => ib.ca.identity().num_ports,
        None => 1,
    };
    if sm && h.dev(dev)?.ib().is_none() {
        return Err(refused(
            ErrorKind::Invalid,
            format!("device {dev} is a RoCE device: it has no subnet manager"),
        ));
    }
    if port == 0 || port > ports {
        return Err(refused(ErrorKind::NotFound, format!("no port {port}")));
    }
    if sm && clients.values().any(|o| o.is_agent(dev, port, true)) {
        return Err(refused(
            ErrorKind::Busy,
            format!("an SM already runs on port {port} of this host"),
        ));
    }
    if let Some(c) = clients.get_mut(&id) {
        c.agents.push(Agent { dev, port, sm });
    }
    Ok(Response::Ok)
}

/// `SendSmp` from one of the client's agent ports: directed-route when `dlid` is `None`.
pub(super) fn send_smp(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    port: u8,
    dlid: Option<Lid>,
    mad: &[u8],
) -> Handled {
    let parsed = <[u8; MAD_LEN]>::try_from(mad)
        .ok()
        .and_then(|b| smp::Repr::parse(&smp::Packet::new_unchecked(&b[..])).ok());
    let Some(s) = parsed else {
        return Err(refused(ErrorKind::Invalid, "not a 256-byte SMP"));
    };
    agent_of(c, dev, port)?;
    if !s.header.method.is_response() {
        h.tids.note(dev, port, s.header.tid, c.id);
    }
    if dlid.is_none() && s.dr.is_some_and(|d| d.hop_cnt == 0) && c.is_agent(dev, port, true) {
        // An SM asking its own node (the first SMP of a sweep) sees the IsSM its IsSM file
        // gives, as the kernel sets it when the file is opened.
        h.poll_issm();
    }
    h.ib(dev)?.ca.send_smp(port, dlid, &s);
    Ok(Response::Ok)
}

/// `SendGmp` from one of the client's agent ports to QP `dest_qpn` at `dlid`.
pub(super) fn send_gmp(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    port: u8,
    dlid: Lid,
    dest_qpn: Qpn,
    mad: &[u8],
) -> Handled {
    let Ok(m) = <[u8; MAD_LEN]>::try_from(mad) else {
        return Err(refused(ErrorKind::Invalid, "a GMP is 256 bytes"));
    };
    agent_of(c, dev, port)?;
    note_sent(h, c, dev, port, &m);
    h.ib(dev)?.ca.send_gmp(port, dlid, dest_qpn, &m);
    Ok(Response::Ok)
}

/// Remembers who sent a GMP: a request's TID (for its response), a CM message's
/// connection (for the messages that answer it).
fn note_sent(h: &mut Host, c: &Client, dev: u32, port: u8, m: &[u8; MAD_LEN]) {
    if let Ok(header) = mad::Repr::parse(&mad::Packet::new_unchecked(&m[..])) {
        if header.mgmt_class == mad::MgmtClass::ComMgt {
            h.cm.note_sent(dev, port, m, c.id);
        } else if !header.method.is_response() {
            h.tids.note(dev, port, header.tid, c.id);
        }
    }
}

/// `SendGmpGid` from one of the client's agent ports of a RoCE device to QP `dest_qpn` at
/// `dgid`.
pub(super) fn send_gmp_gid(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    port: u8,
    dgid: Gid,
    dest_qpn: Qpn,
    mad: &[u8],
) -> Handled {
    let Ok(m) = <[u8; MAD_LEN]>::try_from(mad) else {
        return Err(refused(ErrorKind::Invalid, "a GMP is 256 bytes"));
    };
    agent_of(c, dev, port)?;
    note_sent(h, c, dev, port, &m);
    let Some(roce) = h.dev(dev)?.roce() else {
        return Err(refused(
            ErrorKind::Invalid,
            format!("device {dev} is an IB device: address its GMPs by LID (SendGmp)"),
        ));
    };
    if !roce.send_gmp(dgid, dest_qpn, &m) {
        return Err(refused(
            ErrorKind::Exhausted,
            "QP1's send queue is full (the port sends nothing?)",
        ));
    }
    Ok(Response::Ok)
}

/// `CmListen`: the client's CM listens (or stops listening) on `service_id` of `dev`, so
/// that REQs for it are routed to it (`cm_routes`).
pub(super) fn cm_listen(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    service_id: u64,
    listen: bool,
) -> Handled {
    agent_of(c, dev, 1)?;
    if !h.cm.listen(dev, service_id, c.id, listen) {
        return Err(refused(
            ErrorKind::Busy,
            format!("another process listens on service ID 0x{service_id:016x} of device {dev}"),
        ));
    }
    if listen {
        crate::host::mads::release_held(h, c, dev, service_id);
    }
    Ok(Response::Ok)
}

/// `RecvMads`: up to `max` MADs queued for the client, or, with `wait_us`, parks (`None`)
/// until one comes.
pub(super) fn recv_mads(c: &mut Client, max: u32, wait_us: u32) -> Option<Response> {
    if c.mads.is_empty() && wait_us > 0 {
        c.parked = Some(Parked::RecvMads {
            max,
            until: deadline(wait_us),
        });
        return None;
    }
    Some(take_mads(c, max))
}

/// Up to `max` of the MADs queued for `c`, oldest first.
pub(in crate::host) fn take_mads(c: &mut Client, max: u32) -> Response {
    let n = c.mads.len().min(max as usize);
    Response::Mads(c.mads.drain(..n).collect())
}

/// `AttachMadWakeup`: the eventfd that came with the request is signalled whenever a MAD is
/// queued for the client (at once if some already wait).
pub(super) fn attach_mad_wakeup(c: &mut Client, fds: &mut Vec<OwnedFd>) -> Handled {
    let fd = passed_fd(fds, "AttachMadWakeup arrived without its eventfd")?;
    let fd = nonblocking(fd)?;
    if !c.mads.is_empty() {
        let _ = rustix::io::write(&fd, &1u64.to_ne_bytes());
    }
    c.mad_wakeup = Some(fd);
    Ok(Response::Ok)
}

/// `SetSm`: the client that is the SM on `port` sets (or, with `None`, clears) the SMInfo
/// the port's SMA answers with, and IsSM in its capability mask.
pub(super) fn set_sm(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    port: u8,
    sm_info: Option<Vec<u8>>,
) -> Handled {
    if !c.is_agent(dev, port, true) {
        return Err(refused(
            ErrorKind::Protocol,
            format!("open port {port} as the SM first (OpenMad with sm)"),
        ));
    }
    let info = match sm_info {
        Some(bytes) => Some(
            SmInfo::parse(&bytes)
                .map_err(|e| refused(ErrorKind::Invalid, format!("SMInfo: {e}")))?,
        ),
        None => None,
    };
    mads::set_sm(&mut h.devs, dev, port, info);
    Ok(Response::Ok)
}

/// Refuses a MAD from a port the client has not opened as an agent.
fn agent_of(c: &Client, dev: u32, port: u8) -> Result<(), Refused> {
    if c.is_agent(dev, port, false) {
        Ok(())
    } else {
        Err(refused(
            ErrorKind::Protocol,
            format!("open port {port} as a MAD agent first (OpenMad)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use softib_proto::{MadQp, Request};
    use softib_wire::mad::attr::SmState;
    use softib_wire::mad::AttrId;
    use softib_wire::Guid;

    use super::*;
    use crate::host::testing::TestHost;

    fn open(port: u8, sm: bool) -> Request {
        Request::OpenMad { dev: 0, port, sm }
    }

    /// A directed-route Get(NodeInfo) of the local node (hop count 0): its own SMA answers.
    fn get_node_info(tid: u64) -> Request {
        let smp = smp::Repr::dr_get(tid, AttrId::NODE_INFO, 0, 0, &[]).unwrap();
        let mut mad = vec![0u8; MAD_LEN];
        smp.emit(&mut smp::Packet::new_unchecked(&mut mad[..]));
        Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: None,
            mad,
        }
    }

    fn tids(t: &TestHost, id: u64) -> Vec<u64> {
        t.clients[&id]
            .mads
            .iter()
            .map(|m| {
                assert_eq!(m.qp, MadQp::Smi);
                mad::Repr::parse(&mad::Packet::new_unchecked(&m.mad[..]))
                    .unwrap()
                    .tid
            })
            .collect()
    }

    #[test]
    fn a_mad_is_sent_from_an_opened_port_and_one_sm_runs_per_port() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        assert_eq!(
            t.refused(a, get_node_info(1)),
            (
                ErrorKind::Protocol,
                "open port 1 as a MAD agent first (OpenMad)".into()
            )
        );
        for port in [0, 3] {
            assert_eq!(
                t.refused(a, open(port, false)),
                (ErrorKind::NotFound, format!("no port {port}"))
            );
        }
        t.ok(a, open(1, true));
        assert_eq!(
            t.refused(b, open(1, true)),
            (
                ErrorKind::Busy,
                "an SM already runs on port 1 of this host".into()
            )
        );
        t.ok(b, open(1, false));
        t.ok(b, open(2, true));
        let short = Request::SendSmp {
            dev: 0,
            port: 1,
            dlid: None,
            mad: vec![0; 100],
        };
        assert_eq!(
            t.refused(b, short),
            (ErrorKind::Invalid, "not a 256-byte SMP".into())
        );
    }

    #[test]
    fn a_response_goes_to_the_agent_that_asked_and_to_no_other() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        t.ok(a, open(1, false));
        // B is even the SM, which gets every SMP nobody asked for.
        t.ok(b, open(1, true));
        t.ok(a, get_node_info(0xa1));
        t.ok(b, get_node_info(0xb1));
        t.dispatch_mads();
        assert_eq!(tids(&t, a), [0xa1]);
        assert_eq!(tids(&t, b), [0xb1]);
        // A goes away with a response outstanding: nobody owns its TID any more, and the
        // response goes where unclaimed SMPs go, to the SM.
        t.ok(a, get_node_info(0xa2));
        t.drop_client(a);
        assert!(t.host.tids.is_empty());
        t.dispatch_mads();
        assert_eq!(tids(&t, b), [0xb1, 0xa2]);
    }

    #[test]
    fn an_agent_that_never_reads_loses_its_newest_mads_and_blocks_nobody() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        t.ok(a, open(1, false));
        t.ok(b, open(1, false));
        // A asks and asks and never reads its answers.
        let max = crate::host::mads::MAX_QUEUED_MADS as u64;
        for tid in 0..max + 10 {
            t.ok(a, get_node_info(tid));
            t.dispatch_mads();
        }
        assert_eq!(t.clients[&a].mads.len() as u64, max);
        assert_eq!(tids(&t, a).last(), Some(&(max - 1)), "the newest are lost");
        // B is answered all the same.
        t.ok(b, get_node_info(0xb0));
        t.dispatch_mads();
        assert_eq!(tids(&t, b), [0xb0]);
    }

    #[test]
    fn recv_mads_waits_for_a_mad() {
        let mut t = TestHost::new();
        let a = t.client();
        t.ok(a, open(1, false));
        t.parks(
            a,
            Request::RecvMads {
                max: 4,
                wait_us: 5_000_000,
            },
        );
        assert!(t.deliver(StdInstant::now()).is_empty());
        // A parked client sends nothing else; here the SMA's answer arrives by other means.
        t.clients.get_mut(&a).unwrap().parked = None;
        t.ok(a, get_node_info(7));
        t.parks(
            a,
            Request::RecvMads {
                max: 4,
                wait_us: 5_000_000,
            },
        );
        t.dispatch_mads();
        let answers = t.deliver(StdInstant::now());
        assert!(
            matches!(&answers[..], [(id, Response::Mads(m))] if *id == a && m.len() == 1),
            "{answers:?}"
        );
    }

    #[test]
    fn a_queued_mad_signals_the_agents_wakeup() {
        let mut t = TestHost::new();
        let a = t.client();
        t.ok(a, open(1, false));
        let wakeup = crate::host::testing::eventfd();
        assert!(matches!(
            t.call_with(
                a,
                vec![wakeup.try_clone().unwrap()],
                Request::AttachMadWakeup
            ),
            Some(Response::Ok)
        ));
        assert_eq!(crate::host::testing::eventfd_count(&wakeup), 0);
        t.ok(a, get_node_info(7));
        t.ok(a, get_node_info(8));
        t.dispatch_mads();
        assert_eq!(crate::host::testing::eventfd_count(&wakeup), 2);
        assert!(matches!(
            t.ok(a, Request::RecvMads { max: 8, wait_us: 0 }),
            Response::Mads(m) if m.len() == 2
        ));
        assert_eq!(
            t.refused(a, Request::AttachMadWakeup).1,
            "AttachMadWakeup arrived without its eventfd"
        );
    }

    #[test]
    fn the_sm_sets_is_sm_and_its_going_away_clears_it() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        t.ok(a, open(1, false));
        let info = SmInfo {
            guid: Guid(0x1001),
            sm_key: 0,
            act_count: 1,
            priority: 3,
            sm_state: SmState::Master,
        };
        let mut bytes = vec![0u8; SmInfo::LEN];
        info.emit(&mut bytes);
        let set = |sm_info| Request::SetSm {
            dev: 0,
            port: 1,
            sm_info,
        };
        assert_eq!(
            t.refused(a, set(Some(bytes.clone()))),
            (
                ErrorKind::Protocol,
                "open port 1 as the SM first (OpenMad with sm)".into()
            )
        );
        t.ok(b, open(1, true));
        let (kind, message) = t.refused(b, set(Some(vec![1, 2, 3])));
        assert_eq!(kind, ErrorKind::Invalid);
        assert!(message.starts_with("SMInfo: "), "{message}");
        let is_sm = |t: &mut TestHost| {
            let ib = t.host.devs[0].ib().unwrap();
            let mask = ib.ca.sma().port_info(1).unwrap().capability_mask;
            mask & softib_wire::mad::attr::capability_mask::IS_SM != 0
        };
        assert!(!is_sm(&mut t));
        t.ok(b, set(Some(bytes)));
        assert!(is_sm(&mut t));
        assert_eq!(t.host.devs[0].ib().unwrap().ca.sma().sm_info(), Some(&info));
        t.drop_client(b);
        assert!(!is_sm(&mut t));
    }

    /// A REQ that came while its listener's process listened nowhere (between two listens on
    /// the same port) is handed to it when it listens again, through the real dispatch.
    #[test]
    fn a_held_req_reaches_the_process_when_it_listens_again() {
        let mut t = TestHost::new();
        let a = t.client();
        t.ok(a, open(1, false));
        let svc = 0x0106_0000_0000_4853;
        let listen = |on| Request::CmListen {
            dev: 0,
            service_id: svc,
            listen: on,
        };
        t.ok(a, listen(true));
        t.ok(a, listen(false));
        let req = crate::host::cm_routes::test_req(7, svc, 0x77);
        let m = crate::ib::MadIn {
            port: 1,
            qp: MadQp::Gsi,
            slid: softib_wire::Lid(3),
            src_qpn: Qpn::GSI,
            sgid: None,
            mad: req,
        };
        crate::host::mads::dispatch_mad(&mut t.host, &mut t.clients, 0, m);
        assert!(t.clients[&a].mads.is_empty(), "held, not delivered");
        t.ok(a, listen(true));
        let got: Vec<_> = t.clients[&a].mads.iter().map(|m| m.mad.clone()).collect();
        assert_eq!(got, vec![req.to_vec()]);
    }
}
