//! The devices and who uses them: the device list with its ports, every client's resources
//! (`softib res`), and the asynchronous events of the client's objects and of the ports.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

use softib_proto::{ClientResources, Response};

use super::{nonblocking, passed_fd, Handled};
use crate::host::client::Client;
use crate::host::host_rt::Host;

/// `ListDevices`: every device of the host, with its ports' state, and its drops with those
/// of the process engines on it.
pub(super) fn list_devices(h: &Host, clients: &BTreeMap<u64, Client>) -> Response {
    let infos = h.devs.iter().enumerate().map(|(i, d)| {
        let mut info = d.info();
        crate::host::oversight::add_drops(h, clients, i as u32, &mut info);
        info
    });
    Response::Devices(infos.collect())
}

/// `Resources`: what each client (that said Hello) holds on each device.
pub(super) fn resources(h: &Host, clients: &BTreeMap<u64, Client>) -> Response {
    let ndev = h.devs.len() as u32;
    let list = clients
        .values()
        .filter(|c| c.hello)
        .map(|c| ClientResources {
            pid: c.pid,
            program: c.program.clone(),
            per_device: (0..ndev).map(|d| (d, c.owned.count(d))).collect(),
            buffers: c.owned.buffers.len() as u32,
        })
        .collect();
    Response::Resources(list)
}

/// `AsyncEvents`: the events `events::route_events` kept for the client since it last asked.
pub(super) fn async_events(c: &mut Client) -> Response {
    Response::AsyncEvents(c.events.drain(..).collect())
}

/// `AttachAsyncEvents`: the eventfd that came with the request is signalled whenever an
/// event is queued for the client (at once if some already wait).
pub(super) fn attach_async_events(c: &mut Client, fds: &mut Vec<OwnedFd>) -> Handled {
    let fd = passed_fd(fds, "AttachAsyncEvents arrived without its eventfd")?;
    let fd = nonblocking(fd)?;
    if !c.events.is_empty() {
        let _ = rustix::io::write(&fd, &1u64.to_ne_bytes());
    }
    c.events_fd = Some(fd);
    Ok(Response::Ok)
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use softib_engine::verbs::AsyncEvent;
    use softib_engine::{QpInitAttr, SrqHandle};
    use softib_proto::Request;

    use super::*;
    use crate::host::testing::{qp_init, TestHost};

    #[test]
    fn resources_count_each_clients_objects_and_leave_out_those_without_hello() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let _silent = t.connect();
        t.qp(a);
        t.handle(b, Request::AllocPd { dev: 0 });
        let Response::Resources(list) = t.ok(b, Request::Resources) else {
            panic!("no resources");
        };
        let seen: Vec<_> = list
            .iter()
            .map(|r| (r.program.as_str(), r.pid, r.per_device.clone(), r.buffers))
            .collect();
        assert_eq!(
            seen,
            [
                (&*format!("client{a}"), 4242, vec![(0, [1, 1, 1, 0, 0])], 0),
                (&*format!("client{b}"), 4242, vec![(0, [1, 0, 0, 0, 0])], 0),
            ]
        );
    }

    #[test]
    fn an_event_reaches_the_owner_of_its_object_and_a_port_event_everyone() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let pd = t.handle(a, Request::AllocPd { dev: 0 });
        let cq = t.handle(a, Request::CreateCq { dev: 0, cqe: 4 });
        let srq = t.srq(a, pd);
        let init = QpInitAttr {
            srq: Some(SrqHandle(srq)),
            ..qp_init(pd, cq)
        };
        let Response::Qp(qpn) = t.ok(a, Request::CreateQp { dev: 0, init }) else {
            panic!("no QP");
        };
        t.qp(b);
        // A QP on an SRQ that enters the error state raises Last WQE Reached.
        t.fail_qp(a, qpn);
        t.hca().set_port_active(1, true).unwrap();
        t.deliver(StdInstant::now());
        let events = |t: &mut TestHost, id| match t.ok(id, Request::AsyncEvents) {
            Response::AsyncEvents(e) => e,
            r => panic!("{r:?}"),
        };
        assert_eq!(
            events(&mut t, a),
            [
                (0, AsyncEvent::QpLastWqeReached(qpn)),
                (0, AsyncEvent::PortActive(1))
            ]
        );
        assert_eq!(events(&mut t, b), [(0, AsyncEvent::PortActive(1))]);
        // Asked for, they are gone.
        assert!(events(&mut t, a).is_empty());
    }
}
