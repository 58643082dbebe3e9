//! The control requests a host serves: one named function per request, over the client that
//! asks and what it needs of the host, grouped by concept —
//!
//! - `device`: the devices and who uses them (ListDevices, Resources, AsyncEvents);
//! - `memory`: buffers, PDs and MRs;
//! - `completion`: CQs, polling, completion rings, completion channels, the wakeup;
//! - `queue`: QPs, SRQs, address handles, multicast attachment;
//! - `post`: work requests, by request or through the submission ring;
//! - `mad`: MAD agents, SMPs and GMPs, the SM;
//! - `links`: RoCE links added, deleted, listed; IB cables pulled and plugged;
//! - `faults`: injected faults and packet capture;
//! - `process`: the process data path — QPN blocks, memory keys, the objects a process's own
//!   engine made, the steering group.
//!
//! [`handle`] is the dispatch table. A session starts with Hello; after it, every handler
//! checks that the device exists and that the objects the request names are the client's own
//! (a foreign or missing object gets `NotFound` "no … belongs to this client"), and returns
//! the response or a [`Refused`] that becomes the error response.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

use softib_engine::VerbsError;
use softib_proto::{self as proto, ErrorKind, Request, Response};

use super::admission::Access;
use super::client::Client;
use super::host_rt::Host;
use memory::Span;
use post::Post;

pub(super) mod completion;
mod device;
mod faults;
mod links;
pub(super) mod mad;
mod memory;
pub(super) mod post;
mod process;
mod queue;

/// Destroys one of the client's objects: `key` must be one of `set` (named `what` in the
/// refusal), `destroy` tells the engine, and only when the engine agrees does the client stop
/// owning it.
fn destroy_owned<K: Ord + Copy + std::fmt::Display>(
    h: &mut Host,
    set: &mut std::collections::BTreeSet<(u32, K)>,
    dev: u32,
    key: K,
    what: &str,
    destroy: impl FnOnce(
        &mut softib_engine::Hca<crate::shm_memory::ShmMemory>,
    ) -> Result<(), VerbsError>,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    super::client::owns(set, dev, key, what)?;
    destroy(hca)?;
    set.remove(&(dev, key));
    Ok(Response::Ok)
}

/// A request refused: the error response it gets.
#[derive(Debug)]
pub(in crate::host) struct Refused {
    kind: ErrorKind,
    message: String,
}

/// A refusal of `kind` saying `message`.
pub(in crate::host) fn refused(kind: ErrorKind, message: impl Into<String>) -> Refused {
    Refused {
        kind,
        message: message.into(),
    }
}

impl From<Refused> for Response {
    fn from(r: Refused) -> Response {
        Response::Error {
            kind: r.kind,
            message: r.message,
        }
    }
}

impl From<VerbsError> for Refused {
    fn from(e: VerbsError) -> Refused {
        let kind = match e {
            VerbsError::NotFound(_) => ErrorKind::NotFound,
            VerbsError::Invalid(_) | VerbsError::ModifyQp(_) => ErrorKind::Invalid,
            VerbsError::Exhausted(_) => ErrorKind::Exhausted,
            VerbsError::Busy(_) => ErrorKind::Busy,
            VerbsError::WrongState { .. } => ErrorKind::WrongState,
            _ => ErrorKind::Invalid,
        };
        refused(kind, e.to_string())
    }
}

/// What a handler returns: the response, or why the request is refused.
pub(in crate::host) type Handled = Result<Response, Refused>;

/// The error response to a frame that is not a request.
pub(in crate::host) fn protocol_error(message: String) -> Response {
    refused(ErrorKind::Protocol, message).into()
}

/// The descriptor a request carries (the newest the client sent), or the protocol error
/// `missing` saying what the request arrived without.
fn passed_fd(fds: &mut Vec<OwnedFd>, missing: &str) -> Result<OwnedFd, Refused> {
    fds.pop()
        .ok_or_else(|| refused(ErrorKind::Protocol, missing))
}

/// A file descriptor a client passed for the daemon to signal, made non-blocking: the
/// daemon's thread must never wait on a client's file (a pipe passed for an eventfd would
/// otherwise block it once full).
fn nonblocking(fd: OwnedFd) -> Result<OwnedFd, Refused> {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    fcntl_getfl(&fd)
        .and_then(|fl| fcntl_setfl(&fd, fl | OFlags::NONBLOCK))
        .map_err(|e| {
            refused(
                ErrorKind::Invalid,
                format!("the file descriptor passed cannot be made non-blocking: {e}"),
            )
        })?;
    Ok(fd)
}

/// Serves request `req` of client `id`, with the descriptors `fds` that came with its
/// requests; `None` when it waits (parked) and will be answered later.
pub(in crate::host) fn handle(
    h: &mut Host,
    clients: &mut BTreeMap<u64, Client>,
    id: u64,
    fds: &mut Vec<OwnedFd>,
    req: Request,
) -> Option<Response> {
    let c = clients.get_mut(&id)?;
    if !c.hello {
        return Some(hello(h, c, req));
    }
    if let Some(what) = super::admission::management(&req) {
        if c.access != Access::Manage {
            let message = h.admission.management_refused(what);
            return Some(refused(ErrorKind::Permission, message).into());
        }
    }
    use Request as R;
    // The one request that needs two clients: the asker and the owner of the QP it names.
    if let R::RingTo { dev, dgid, dqpn } = req {
        return Some(
            process::ring_to(h, clients, id, dev, dgid, dqpn).unwrap_or_else(Response::from),
        );
    }
    let c = clients.get_mut(&id)?;
    let r = match req {
        R::Hello { .. } => Err(refused(ErrorKind::Protocol, "Hello was already sent")),
        // The devices and who uses them.
        R::ListDevices => Ok(device::list_devices(h, clients)),
        R::Resources => Ok(device::resources(h, clients)),
        R::AsyncEvents => Ok(device::async_events(c)),
        R::AttachAsyncEvents => device::attach_async_events(c, fds),
        R::AttachMadWakeup => mad::attach_mad_wakeup(c, fds),
        // Buffers, PDs, MRs.
        R::AttachBuffer { len, addr } => memory::attach_buffer(h, c, fds, len, addr),
        R::DetachBuffer { buffer } => memory::detach_buffer(c, buffer),
        R::AllocPd { dev } => memory::alloc_pd(h, c, dev),
        R::DeallocPd { dev, pd } => memory::dealloc_pd(h, c, dev, pd),
        R::RegMr {
            dev,
            pd,
            buffer,
            addr,
            len,
            access,
        } => memory::reg_mr(h, c, dev, pd, buffer, Span { addr, len, access }),
        R::RegMrProcess {
            dev,
            pd,
            addr,
            len,
            access,
        } => memory::reg_mr_process(h, c, dev, pd, Span { addr, len, access }),
        R::DeregMr { dev, lkey } => memory::dereg_mr(h, c, dev, lkey),
        // CQs and how completions reach the client.
        R::CreateCq { dev, cqe } => completion::create_cq(h, c, dev, cqe),
        R::DestroyCq { dev, cq } => completion::destroy_cq(h, c, dev, cq),
        R::PollCq {
            dev,
            cq,
            max,
            wait_us,
        } => return completion::poll_cq(h, c, dev, cq, max, wait_us).unwrap_or_else(into_some),
        R::AttachCqRing { dev, cq, slots } => completion::attach_cq_ring(h, c, fds, dev, cq, slots),
        R::CreateCompChannel => completion::create_comp_channel(c, fds),
        R::DestroyCompChannel { channel } => completion::destroy_comp_channel(c, channel),
        R::ReqNotifyCq { dev, cq, channel } => completion::req_notify_cq(h, c, dev, cq, channel),
        R::AttachWakeup => completion::attach_wakeup(c, fds),
        // QPs, SRQs, AHs.
        R::CreateQp { dev, init } => queue::create_qp(h, c, dev, init),
        R::ModifyQp {
            dev,
            qpn,
            attr,
            mask,
        } => queue::modify_qp(h, c, dev, qpn, &attr, mask),
        R::QueryQp { dev, qpn } => queue::query_qp(h, c, dev, qpn),
        R::DestroyQp { dev, qpn } => queue::destroy_qp(h, c, dev, qpn),
        R::CreateSrq {
            dev,
            pd,
            max_wr,
            max_sge,
        } => queue::create_srq(h, c, dev, pd, max_wr, max_sge),
        R::ModifySrq { dev, srq, limit } => queue::modify_srq(h, c, dev, srq, limit),
        R::DestroySrq { dev, srq } => queue::destroy_srq(h, c, dev, srq),
        R::CreateAh { dev, pd, av } => queue::create_ah(h, c, dev, pd, av),
        R::DestroyAh { dev, ah } => queue::destroy_ah(h, c, dev, ah),
        R::AttachMcast { dev, qpn, gid, lid } => queue::attach_mcast(h, c, dev, qpn, gid, lid),
        R::DetachMcast { dev, qpn, gid } => queue::detach_mcast(h, c, dev, qpn, gid),
        // Work requests.
        R::PostSend { dev, qpn, wrs } => post::post_to_qp(h, c, dev, qpn, wrs, Post::Send),
        R::PostRecv { dev, qpn, wrs } => post::post_to_qp(h, c, dev, qpn, wrs, Post::Recv),
        R::PostSrqRecv { dev, srq, wrs } => post::post_srq_recv(h, c, dev, srq, wrs),
        R::AttachSubmitRing { slots } => post::attach_submit_ring(c, fds, slots),
        // MADs and the SM.
        R::OpenMad { dev, port, sm } => mad::open_mad(h, clients, id, dev, port, sm),
        R::SendSmp {
            dev,
            port,
            dlid,
            mad,
        } => mad::send_smp(h, c, dev, port, dlid, &mad),
        R::SendGmp {
            dev,
            port,
            dlid,
            dest_qpn,
            mad,
        } => mad::send_gmp(h, c, dev, port, dlid, dest_qpn, &mad),
        R::SendGmpGid {
            dev,
            port,
            dgid,
            dest_qpn,
            mad,
        } => mad::send_gmp_gid(h, c, dev, port, dgid, dest_qpn, &mad),
        R::CmListen {
            dev,
            service_id,
            listen,
        } => mad::cm_listen(h, c, dev, service_id, listen),
        R::RecvMads { max, wait_us } => return mad::recv_mads(c, max, wait_us),
        R::SetSm { dev, port, sm_info } => mad::set_sm(h, c, dev, port, sm_info),
        // Links and cables.
        R::LinkAdd(config) => links::link_add(h, config),
        R::LinkDel { name } => links::link_del(h, clients, &name),
        R::LinkShow => Ok(links::link_show(h)),
        R::SetPortEnabled { dev, port, enabled } => links::set_port_enabled(h, dev, port, enabled),
        // Faults and capture.
        R::SetFaults { dev, port, spec } => faults::set_faults(h, clients, dev, port, spec),
        R::Faults { dev } => faults::faults(h, clients, dev),
        R::Capture { dev, path } => faults::capture(h, clients, dev, path),
        R::CaptureCount { dev } => faults::capture_count(h, dev),
        // The process data path.
        R::AllocQpnBlock { dev } => process::alloc_qpn_block(h, c, dev),
        R::AllocMrKey { dev } => process::alloc_mr_key(h, c, dev),
        R::FreeMrKey { dev, key } => process::free_mr_key(h, c, dev, key),
        R::Own { dev, object } => process::own(h, c, dev, object),
        R::Disown { dev, object } => process::disown(h, c, dev, object),
        R::SteerJoin { dev, hand_on } => process::steer_join(h, c, fds, dev, hand_on),
        R::SteerLeave { dev } => process::steer_leave(h, c, dev),
        R::OpenEvents { dev, counters } => process::open_events(h, c, fds, dev, counters),
        // Served before the others (it needs the owner's client too).
        R::RingTo { .. } => Err(refused(ErrorKind::Protocol, "RingTo was not served")),
    };
    Some(r.unwrap_or_else(Response::from))
}

fn into_some(r: Refused) -> Option<Response> {
    Some(r.into())
}

/// The first request of a session: the client names itself and the protocol it speaks.
fn hello(h: &Host, c: &mut Client, req: Request) -> Response {
    if let Access::Refused(why) = &c.access {
        return refused(ErrorKind::Permission, why.clone()).into();
    }
    match req {
        Request::Hello {
            version,
            pid,
            program,
        } if version == proto::VERSION => {
            c.hello = true;
            c.pid = pid;
            c.program = program;
            Response::Hello {
                version: proto::VERSION,
                pid: std::process::id(),
                host: h.name.clone(),
            }
        }
        Request::Hello { version, .. } => refused(
            ErrorKind::Protocol,
            format!(
                "this softibd speaks control protocol {}, the client {version}: \
                 use a softib library and daemon of the same release",
                proto::VERSION
            ),
        )
        .into(),
        _ => refused(ErrorKind::Protocol, "the first request must be Hello").into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::testing::TestHost;

    #[test]
    fn a_session_starts_with_one_hello_of_this_protocol_version() {
        let mut t = TestHost::new();
        let id = t.connect();
        assert_eq!(
            t.refused(id, Request::ListDevices),
            (
                ErrorKind::Protocol,
                "the first request must be Hello".into()
            )
        );
        let old = Request::Hello {
            version: proto::VERSION + 1,
            pid: 1,
            program: "old".into(),
        };
        let (kind, message) = t.refused(id, old);
        assert_eq!(kind, ErrorKind::Protocol);
        assert!(
            message.contains(&format!("speaks control protocol {}", proto::VERSION)),
            "{message}"
        );
        // Refused twice, still not in session.
        assert!(!t.clients[&id].hello);
        let hello = Request::Hello {
            version: proto::VERSION,
            pid: 77,
            program: "prog".into(),
        };
        let Some(Response::Hello { host, .. }) = t.call(id, hello.clone()) else {
            panic!("no Hello answer");
        };
        assert_eq!(host, "unit");
        assert_eq!((t.clients[&id].pid, &*t.clients[&id].program), (77, "prog"));
        assert_eq!(
            t.refused(id, hello),
            (ErrorKind::Protocol, "Hello was already sent".into())
        );
        assert!(matches!(
            t.call(id, Request::ListDevices),
            Some(Response::Devices(d)) if d.len() == 1
        ));
    }

    #[test]
    fn a_request_for_a_missing_device_names_how_many_there_are() {
        let mut t = TestHost::new();
        let a = t.client();
        for req in [
            Request::AllocPd { dev: 3 },
            Request::CreateCq { dev: 3, cqe: 4 },
            Request::Faults { dev: 3 },
        ] {
            assert_eq!(
                t.refused(a, req),
                (ErrorKind::NotFound, "no device 3 (this host has 1)".into())
            );
        }
    }
}
