//! Management datagrams: a client becomes a MAD agent on an IB port (`OpenMad`, as the SM or
//! not), sends SMPs and GMPs (a request's TID is noted, so that its response comes back to
//! this agent only: `mads::TidOwners`), receives what `mads::dispatch_mad` queued for it, and,
//! as the SM, sets the port's SMInfo and IsSM.

use std::collections::BTreeMap;

use softib_proto::{ErrorKind, Response};
use softib_wire::mad::attr::SmInfo;
use softib_wire::mad::{self, smp, MAD_LEN};
use softib_wire::{Lid, Qpn};

use super::{refused, Handled, Refused};
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
    let ports = h.ib(dev)?.ca.identity().num_ports;
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
    if let Ok(header) = mad::Repr::parse(&mad::Packet::new_unchecked(&m[..])) {
        if !header.method.is_response() {
            h.tids.note(dev, port, header.tid, c.id);
        }
    }
    h.ib(dev)?.ca.send_gmp(port, dlid, dest_qpn, &m);
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
