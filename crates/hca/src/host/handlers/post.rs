//! Work requests: posted by request (`PostSend`, `PostRecv`, `PostSrqRecv`) or through the
//! client's submission ring (`AttachSubmitRing`; drained by `rings::drain_submit`). Both go
//! through [`post_owned`], the one place a WR is checked against what the client owns.

use std::os::fd::OwnedFd;

use softib_engine::verbs::{RecvWr, SendWr};
use softib_engine::{Hca, SrqHandle};
use softib_net::ring::Ring;
use softib_proto::{self as proto, ErrorKind, Response};
use softib_wire::Qpn;

use super::{nonblocking, refused, Handled};
use crate::host::client::{owns, Client, Owned};
use crate::host::host_rt::Host;
use crate::shm_memory::ShmMemory;

/// `PostSend` or `PostRecv` (`post` says which) to one of the client's QPs.
pub(super) fn post_to_qp<W>(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    qpn: Qpn,
    wrs: Vec<W>,
    post: fn(Qpn, W) -> Post,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    Ok(post_list(wrs, |wr| {
        post_owned(hca, &c.owned, dev, post(qpn, wr))
    }))
}

/// `PostSrqRecv` to one of the client's SRQs.
pub(super) fn post_srq_recv(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    srq: u32,
    wrs: Vec<RecvWr>,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.srqs, dev, srq, "SRQ")?;
    Ok(post_list(wrs, |wr| {
        post_owned(hca, &c.owned, dev, Post::SrqRecv(srq, wr))
    }))
}

/// `AttachSubmitRing`: the memfd and the doorbell eventfd that came with the request become
/// the client's submission ring.
pub(super) fn attach_submit_ring(c: &mut Client, fds: &mut Vec<OwnedFd>, slots: u32) -> Handled {
    let (Some(bell), Some(fd)) = (fds.pop(), fds.pop()) else {
        return Err(refused(
            ErrorKind::Protocol,
            "AttachSubmitRing arrived without its memfd and doorbell",
        ));
    };
    if c.submit.is_some() {
        return Err(refused(
            ErrorKind::Busy,
            "a submission ring is attached already",
        ));
    }
    if slots == 0 || slots > proto::SUBMIT_SLOTS_MAX {
        return Err(refused(
            ErrorKind::Invalid,
            format!(
                "a submission ring has 1 to {} slots",
                proto::SUBMIT_SLOTS_MAX
            ),
        ));
    }
    // The client holds the doorbell too and could drain it between the daemon's poll and its
    // read: a blocking read would then hang the daemon.
    let bell = nonblocking(bell)?;
    let ring = Ring::from_fd(fd, slots, proto::SUBMIT_SLOT_LEN)
        .map_err(|e| refused(ErrorKind::Invalid, format!("cannot map the ring: {e}")))?;
    c.submit = Some((ring, bell));
    Ok(Response::Ok)
}

/// One work request to post.
pub(in crate::host) enum Post {
    Send(Qpn, SendWr),
    Recv(Qpn, RecvWr),
    SrqRecv(u32, RecvWr),
}

impl Post {
    /// The QPN (or SRQ handle) it goes to, for messages.
    pub fn target(&self) -> u32 {
        match self {
            Post::Send(q, _) | Post::Recv(q, _) => q.value(),
            Post::SrqRecv(s, _) => *s,
        }
    }
}

/// Posts one WR for a client whose objects are `owned`: the single place where both a
/// `PostSend`/`PostRecv`/`PostSrqRecv` request and an entry of the submission ring are checked
/// (the queue, and a UD WR's address handle, must be the client's own) and executed.
pub(in crate::host) fn post_owned(
    hca: &mut Hca<ShmMemory>,
    owned: &Owned,
    dev: u32,
    post: Post,
) -> Result<(), String> {
    match post {
        Post::Send(qpn, wr) => {
            owns(&owned.qps, dev, qpn, "QP").map_err(|r| r.message)?;
            if let Some(ud) = &wr.ud {
                if !owned.ahs.contains(&(dev, ud.ah.0)) {
                    return Err(format!("no AH {} belongs to this client", ud.ah.0));
                }
            }
            hca.post_send(qpn, wr)
        }
        Post::Recv(qpn, wr) => {
            owns(&owned.qps, dev, qpn, "QP").map_err(|r| r.message)?;
            hca.post_recv(qpn, wr)
        }
        Post::SrqRecv(srq, wr) => {
            owns(&owned.srqs, dev, srq, "SRQ").map_err(|r| r.message)?;
            hca.post_srq_recv(SrqHandle(srq), wr)
        }
    }
    .map_err(|e| e.to_string())
}

/// Posts a list in order, stopping at the first WR that fails (the verbs' `bad_wr`).
fn post_list<W>(wrs: Vec<W>, mut post: impl FnMut(W) -> Result<(), String>) -> Response {
    let mut posted = 0;
    for wr in wrs {
        if let Err(error) = post(wr) {
            return Response::Posted {
                posted,
                error: Some(error),
            };
        }
        posted += 1;
    }
    Response::Posted {
        posted,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant as StdInstant;

    use softib_engine::verbs::{QpType, Sge, UdDest, WrOpcode};
    use softib_engine::{AhHandle, CqHandle, QpInitAttr};
    use softib_proto::{Request, SubmitRef, SUBMIT_ENTRY_MAX, SUBMIT_SLOT_LEN};

    use super::*;
    use crate::host::rings::drain_submit;
    use crate::host::testing::{eventfd, qp_init, TestHost};

    fn empty_recv(wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            sg_list: Vec::new(),
        }
    }

    /// How many of `qpn`'s receives were posted: flushed by an error, they complete.
    fn posted_receives(t: &mut TestHost, id: u64, qpn: Qpn, cq: u32) -> usize {
        t.fail_qp(id, qpn);
        t.deliver(StdInstant::now());
        let mut n = 0;
        while t.hca().poll_cq(CqHandle(cq)).is_some() {
            n += 1;
        }
        n
    }

    #[test]
    fn posting_to_another_clients_qp_posts_nothing() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let (_, cq, qpn) = t.qp(a);
        let wrs = vec![empty_recv(1)];
        assert_eq!(
            t.refused(b, Request::PostRecv { dev: 0, qpn, wrs }),
            (
                ErrorKind::NotFound,
                format!("no QP {qpn} on device 0 belongs to this client")
            )
        );
        assert_eq!(posted_receives(&mut t, a, qpn, cq), 0);
    }

    #[test]
    fn a_list_stops_at_the_first_wr_that_fails() {
        let mut t = TestHost::new();
        let a = t.client();
        let (_, cq, qpn) = t.qp(a);
        let two_sges = RecvWr {
            wr_id: 2,
            sg_list: vec![
                Sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                };
                2
            ],
        };
        let wrs = vec![empty_recv(1), two_sges, empty_recv(3)];
        let Response::Posted { posted, error } = t.ok(a, Request::PostRecv { dev: 0, qpn, wrs })
        else {
            panic!("not posted");
        };
        assert_eq!(posted, 1);
        assert!(error.is_some());
        assert_eq!(posted_receives(&mut t, a, qpn, cq), 1);
    }

    #[test]
    fn a_ud_send_through_another_clients_address_handle_is_refused() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let pd = t.handle(a, Request::AllocPd { dev: 0 });
        let cq = t.handle(a, Request::CreateCq { dev: 0, cqe: 4 });
        let init = QpInitAttr {
            qp_type: QpType::Ud,
            ..qp_init(pd, cq)
        };
        let Response::Qp(qpn) = t.ok(a, Request::CreateQp { dev: 0, init }) else {
            panic!("no QP");
        };
        let b_pd = t.handle(b, Request::AllocPd { dev: 0 });
        let b_ah = t.ah(b, b_pd);
        let send = |ah| SendWr {
            wr_id: 1,
            opcode: WrOpcode::Send,
            sg_list: Vec::new(),
            flags: Default::default(),
            inline_data: None,
            ud: Some(UdDest {
                ah: AhHandle(ah),
                remote_qpn: Qpn::new(0x11),
                remote_qkey: 0x1111,
            }),
        };
        let r = t.ok(
            a,
            Request::PostSend {
                dev: 0,
                qpn,
                wrs: vec![send(b_ah)],
            },
        );
        let Response::Posted {
            posted: 0,
            error: Some(e),
        } = r
        else {
            panic!("{r:?}");
        };
        assert_eq!(e, format!("no AH {b_ah} belongs to this client"));
        // Its own AH passes the check (and meets the engine's: the QP is not ready to send).
        let a_ah = t.ah(a, pd);
        let r = t.ok(
            a,
            Request::PostSend {
                dev: 0,
                qpn,
                wrs: vec![send(a_ah)],
            },
        );
        let Response::Posted { error: Some(e), .. } = r else {
            panic!("{r:?}");
        };
        assert!(!e.contains("belongs to this client"), "{e}");
    }

    #[test]
    fn a_ring_entry_is_checked_as_a_request_is() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let (_, cq, qpn) = t.qp(a);
        let ring = |t: &mut TestHost, id| {
            let ring = Ring::create("softib-unit-submit", 8, SUBMIT_SLOT_LEN).unwrap();
            let fds = vec![ring.fd().try_clone_to_owned().unwrap(), eventfd()];
            let r = t.call_with(id, fds, Request::AttachSubmitRing { slots: 8 });
            assert!(matches!(r, Some(Response::Ok)), "{r:?}");
            ring
        };
        let (a_ring, b_ring) = (ring(&mut t, a), ring(&mut t, b));
        let wr = empty_recv(5);
        let mut buf = [0u8; SUBMIT_ENTRY_MAX];
        let entry = SubmitRef::Recv {
            dev: 0,
            qpn,
            wr: &wr,
        }
        .encode(&mut buf)
        .unwrap()
        .to_vec();
        // B's ring names A's QP: refused and counted.
        assert!(b_ring.push(&entry).unwrap());
        drain_submit(&mut t.host, t.clients.get_mut(&b).unwrap());
        assert_eq!(t.clients[&b].submit_errors, 1);
        // A's own ring: posted.
        assert!(a_ring.push(&entry).unwrap());
        drain_submit(&mut t.host, t.clients.get_mut(&a).unwrap());
        assert_eq!(t.clients[&a].submit_errors, 0);
        assert_eq!(posted_receives(&mut t, a, qpn, cq), 1);
        // Garbage in a ring breaks it (the client is then dropped), it is not followed.
        assert!(a_ring.push(&[0xff; 40]).unwrap());
        drain_submit(&mut t.host, t.clients.get_mut(&a).unwrap());
        assert!(t.clients[&a].broken);
    }

    #[test]
    fn a_submission_ring_needs_its_descriptors_and_a_size() {
        let mut t = TestHost::new();
        let a = t.client();
        let ring = Ring::create("softib-unit-submit", 8, SUBMIT_SLOT_LEN).unwrap();
        let fds = || vec![ring.fd().try_clone_to_owned().unwrap(), eventfd()];
        let attach = |slots| Request::AttachSubmitRing { slots };
        assert_eq!(
            t.refused(a, attach(8)),
            (
                ErrorKind::Protocol,
                "AttachSubmitRing arrived without its memfd and doorbell".into()
            )
        );
        assert_eq!(
            t.refused_with(a, fds(), attach(0)),
            (
                ErrorKind::Invalid,
                format!(
                    "a submission ring has 1 to {} slots",
                    proto::SUBMIT_SLOTS_MAX
                )
            )
        );
        assert!(matches!(
            t.call_with(a, fds(), attach(8)),
            Some(Response::Ok)
        ));
        assert_eq!(
            t.refused_with(a, fds(), attach(8)),
            (
                ErrorKind::Busy,
                "a submission ring is attached already".into()
            )
        );
    }
}
