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

/// `PostSend` to one of the client's QPs.
pub(super) fn post_send(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    qpn: Qpn,
    wrs: Vec<SendWr>,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    Ok(post_list(wrs, |wr| {
        post_owned(hca, &c.owned, dev, Post::Send(qpn, wr))
    }))
}

/// `PostRecv` to one of the client's QPs.
pub(super) fn post_recv(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    qpn: Qpn,
    wrs: Vec<RecvWr>,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    Ok(post_list(wrs, |wr| {
        post_owned(hca, &c.owned, dev, Post::Recv(qpn, wr))
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
