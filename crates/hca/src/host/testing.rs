//! What the host's unit tests share: a host with one IB HCA that has no cables (nothing but
//! memory: no socket is opened), clients without sockets, and requests served through the
//! real dispatch table, so that a test sees exactly what a client would be answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::time::Instant as StdInstant;

use softib_engine::verbs::{QpState, QpType, RecvWr};
use softib_engine::{AddressVector, CqHandle, Hca, PdHandle, QpCap, QpInitAttr};
use softib_fabric::LinkRate;
use softib_proto::{self as proto, ErrorKind, Request, Response};
use softib_wire::{Guid, Lid, Qpn};

use super::assembly::ib_device;
use super::client::Client;
use super::handlers;
use super::host_rt::Host;
use super::{events, mads, parked, rings};
use crate::device::Device;
use crate::ib::Identity;
use crate::shm_memory::ShmMemory;

/// A host of one two-port IB HCA and its clients.
pub(super) struct TestHost {
    pub host: Host,
    pub clients: BTreeMap<u64, Client>,
    next: u64,
}

impl TestHost {
    pub fn new() -> TestHost {
        let identity = Identity {
            name: "mlx4_0".into(),
            description: "unit mlx4_0".into(),
            fw_ver: "2.42.5000".into(),
            hw_ver: 0xa1,
            node_guid: Guid(0xe41d_2d03_0000_1000),
            sys_image_guid: Guid(0xe41d_2d03_0000_1003),
            vendor_id: 0x02c9,
            device_id: 4099,
            num_ports: 2,
            rate: LinkRate::QDR_4X,
        };
        let dev = ib_device(identity, 7, (0..=2).map(|_| None).collect());
        TestHost {
            host: Host::new("unit".into(), vec![dev], None, 7),
            clients: BTreeMap::new(),
            next: 1,
        }
    }

    /// A client of this process that has not said Hello.
    pub fn connect(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        self.clients.insert(id, Client::new(id, std::process::id()));
        id
    }

    /// A client that said Hello.
    pub fn client(&mut self) -> u64 {
        let id = self.connect();
        let hello = Request::Hello {
            version: proto::VERSION,
            pid: 4242,
            program: format!("client{id}"),
        };
        assert!(matches!(self.call(id, hello), Some(Response::Hello { .. })));
        id
    }

    /// Serves `req` of client `id`, which came without descriptors.
    pub fn call(&mut self, id: u64, req: Request) -> Option<Response> {
        self.call_with(id, Vec::new(), req)
    }

    /// Serves `req` of client `id`, which came with `fds`.
    pub fn call_with(&mut self, id: u64, mut fds: Vec<OwnedFd>, req: Request) -> Option<Response> {
        handlers::handle(&mut self.host, &mut self.clients, id, &mut fds, req)
    }

    /// Serves `req`, which must be answered without an error.
    pub fn ok(&mut self, id: u64, req: Request) -> Response {
        match self.call(id, req) {
            Some(Response::Error { kind, message }) => {
                panic!("refused ({kind:?}): {message}")
            }
            Some(r) => r,
            None => panic!("parked"),
        }
    }

    /// Serves `req`, which must wait (be parked).
    pub fn parks(&mut self, id: u64, req: Request) {
        if let Some(r) = self.call(id, req) {
            panic!("answered at once: {r:?}");
        }
        assert!(self.clients[&id].parked.is_some());
    }

    /// Serves `req`, which must be answered with a handle.
    pub fn handle(&mut self, id: u64, req: Request) -> u32 {
        match self.ok(id, req) {
            Response::Handle(h) => u32::try_from(h).unwrap(),
            r => panic!("not a handle: {r:?}"),
        }
    }

    /// Serves `req`, which must be refused; its kind and message.
    pub fn refused(&mut self, id: u64, req: Request) -> (ErrorKind, String) {
        self.refused_with(id, Vec::new(), req)
    }

    /// Serves `req` with `fds`, which must be refused; its kind and message.
    pub fn refused_with(
        &mut self,
        id: u64,
        fds: Vec<OwnedFd>,
        req: Request,
    ) -> (ErrorKind, String) {
        match self.call_with(id, fds, req) {
            Some(Response::Error { kind, message }) => (kind, message),
            r => panic!("not refused: {r:?}"),
        }
    }

    /// A PD, a CQ and an RC QP (in INIT, ready for receives) of client `id`: (pd, cq, qpn).
    pub fn qp(&mut self, id: u64) -> (u32, u32, Qpn) {
        let pd = self.handle(id, Request::AllocPd { dev: 0 });
        let cq = self.handle(id, Request::CreateCq { dev: 0, cqe: 16 });
        let init = qp_init(pd, cq);
        let Response::Qp(qpn) = self.ok(id, Request::CreateQp { dev: 0, init }) else {
            panic!("no QP");
        };
        let mut attr = softib_engine::QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            ..Default::default()
        };
        attr.qp_access_flags = softib_engine::verbs::AccessFlags::LOCAL_WRITE;
        use softib_engine::AttrMask;
        let mask = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT)
            .with(AttrMask::ACCESS_FLAGS);
        self.ok(
            id,
            Request::ModifyQp {
                dev: 0,
                qpn,
                attr: Box::new(attr),
                mask,
            },
        );
        (pd, cq, qpn)
    }

    /// An SRQ of 4 WRs of one SGE in `pd` of client `id`.
    pub fn srq(&mut self, id: u64, pd: u32) -> u32 {
        let req = Request::CreateSrq {
            dev: 0,
            pd,
            max_wr: 4,
            max_sge: 1,
        };
        self.handle(id, req)
    }

    /// An address handle (to LID 1 from port 1) in `pd` of client `id`.
    pub fn ah(&mut self, id: u64, pd: u32) -> u32 {
        self.handle(
            id,
            Request::CreateAh {
                dev: 0,
                pd,
                av: av(),
            },
        )
    }

    /// Posts an empty receive `wr_id` to `qpn` of client `id`.
    pub fn recv(&mut self, id: u64, qpn: Qpn, wr_id: u64) {
        let wrs = vec![RecvWr {
            wr_id,
            sg_list: Vec::new(),
        }];
        let r = self.ok(id, Request::PostRecv { dev: 0, qpn, wrs });
        assert!(
            matches!(
                r,
                Response::Posted {
                    posted: 1,
                    error: None
                }
            ),
            "{r:?}"
        );
    }

    /// Moves `qpn` of client `id` to the error state: its posted receives complete, flushed.
    pub fn fail_qp(&mut self, id: u64, qpn: Qpn) {
        let attr = softib_engine::QpAttr {
            qp_state: QpState::Err,
            ..Default::default()
        };
        let req = Request::ModifyQp {
            dev: 0,
            qpn,
            attr: Box::new(attr),
            mask: softib_engine::AttrMask::STATE,
        };
        self.ok(id, req);
    }

    /// The device's engine.
    pub fn hca(&mut self) -> &mut Hca<ShmMemory> {
        self.host.devs[0].hca_mut()
    }

    /// The client went away.
    pub fn drop_client(&mut self, id: u64) {
        let c = self.clients.remove(&id).expect("a client");
        c.reclaim(&mut self.host);
    }

    /// Hands the MADs the device has for local agents to them, as a turn does.
    pub fn dispatch_mads(&mut self) {
        for d in 0..self.host.devs.len() {
            while let Some(m) = self.host.devs[d].poll_mad() {
                mads::dispatch_mad(&mut self.host, &mut self.clients, d as u32, m);
            }
        }
    }

    /// What the end of a turn delivers to the clients (`HostRt::deliver_to_clients`, less the
    /// socket): the answers to parked requests, by client.
    pub fn deliver(&mut self, now: StdInstant) -> Vec<(u64, Response)> {
        let devs: &mut [Device] = &mut self.host.devs;
        rings::feed_rings(&mut self.clients, devs);
        events::route_events(&mut self.clients, devs);
        events::signal_armed_cqs(&mut self.clients, devs);
        self.clients
            .iter_mut()
            .filter_map(|(id, c)| parked::answer(c, devs, now).map(|r| (*id, r)))
            .collect()
    }
}

/// An RC QP of `pd` completing into `cq`, 4 WRs of one SGE deep.
pub(super) fn qp_init(pd: u32, cq: u32) -> QpInitAttr {
    QpInitAttr {
        qp_type: QpType::Rc,
        pd: PdHandle(pd),
        send_cq: CqHandle(cq),
        recv_cq: CqHandle(cq),
        srq: None,
        cap: QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: false,
    }
}

/// An address vector to LID 1 from port 1.
pub(super) fn av() -> AddressVector {
    AddressVector {
        dlid: Lid(1),
        port_num: 1,
        ..Default::default()
    }
}

/// An eventfd, as a client passes for a completion channel or its wakeup.
pub(super) fn eventfd() -> OwnedFd {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
}

/// What an eventfd holds (0 when nothing signalled it), reset.
pub(super) fn eventfd_count(fd: &OwnedFd) -> u64 {
    use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
    let fl = fcntl_getfl(fd).unwrap();
    fcntl_setfl(fd, fl | OFlags::NONBLOCK).unwrap();
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        _ => 0,
    }
}
