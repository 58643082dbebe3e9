//! Queues: QPs (created in the client's PD on its CQs, modified, queried, destroyed), shared
//! receive queues, address handles, and a UD QP's multicast groups.

use softib_engine::{AddressVector, AhHandle, AttrMask, PdHandle, QpAttr, QpInitAttr, SrqHandle};
use softib_proto::{ErrorKind, Response};
use softib_wire::{Gid, Lid, Qpn};

use super::{destroy_owned, Handled};
use crate::host::client::{
    owns, within_limit, Client, MAX_AHS_PER_CLIENT, MAX_CQS_PER_CLIENT, MAX_QPS_PER_CLIENT,
};
use crate::host::host_rt::Host;

/// `CreateQp`: its PD, CQs and SRQ must be the client's own.
pub(super) fn create_qp(h: &mut Host, c: &mut Client, dev: u32, init: QpInitAttr) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.pds, dev, init.pd.0, "PD")?;
    owns(&c.owned.cqs, dev, init.send_cq.0, "CQ")?;
    owns(&c.owned.cqs, dev, init.recv_cq.0, "CQ")?;
    if let Some(srq) = init.srq {
        owns(&c.owned.srqs, dev, srq.0, "SRQ")?;
    }
    within_limit(c.owned.qps.len(), MAX_QPS_PER_CLIENT, "QPs")?;
    let qpn = hca.create_qp(init)?;
    c.owned.qps.insert((dev, qpn));
    Ok(Response::Qp(qpn))
}

/// `ModifyQp` of one of the client's QPs.
pub(super) fn modify_qp(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    qpn: Qpn,
    attr: &QpAttr,
    mask: AttrMask,
) -> Handled {
    let d = h.dev(dev)?;
    owns(&c.owned.qps, dev, qpn, "QP")?;
    d.modify_qp(qpn, attr, mask)?;
    Ok(Response::Ok)
}

/// `QueryQp` of one of the client's QPs.
pub(super) fn query_qp(h: &mut Host, c: &mut Client, dev: u32, qpn: Qpn) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    let (attr, init) = hca.query_qp(qpn)?;
    Ok(Response::QpAttr(Box::new(attr), init))
}

/// `DestroyQp` of one of the client's QPs.
pub(super) fn destroy_qp(h: &mut Host, c: &mut Client, dev: u32, qpn: Qpn) -> Handled {
    let done = destroy_owned(h, &mut c.owned.qps, dev, qpn, "QP", |hca| {
        hca.destroy_qp(qpn)
    })?;
    // Its multicast groups (the engine detached it with the QP).
    h.dev(dev)?.forget_qp(qpn);
    Ok(done)
}

/// `CreateSrq` in one of the client's PDs.
pub(super) fn create_srq(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    pd: u32,
    max_wr: u32,
    max_sge: u32,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.pds, dev, pd, "PD")?;
    within_limit(c.owned.srqs.len(), MAX_CQS_PER_CLIENT, "SRQs")?;
    let srq = hca.create_srq(PdHandle(pd), max_wr, max_sge)?;
    c.owned.srqs.insert((dev, srq.0));
    Ok(Response::Handle(u64::from(srq.0)))
}

/// `ModifySrq` (its limit) of one of the client's SRQs.
pub(super) fn modify_srq(h: &mut Host, c: &mut Client, dev: u32, srq: u32, limit: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.srqs, dev, srq, "SRQ")?;
    hca.modify_srq(SrqHandle(srq), limit)?;
    Ok(Response::Ok)
}

/// `DestroySrq` of one of the client's SRQs.
pub(super) fn destroy_srq(h: &mut Host, c: &mut Client, dev: u32, srq: u32) -> Handled {
    destroy_owned(h, &mut c.owned.srqs, dev, srq, "SRQ", |hca| {
        hca.destroy_srq(SrqHandle(srq))
    })
}

/// `CreateAh` in one of the client's PDs.
pub(super) fn create_ah(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    pd: u32,
    av: AddressVector,
) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.pds, dev, pd, "PD")?;
    within_limit(c.owned.ahs.len(), MAX_AHS_PER_CLIENT, "AHs")?;
    let ah = hca.create_ah(PdHandle(pd), av)?;
    c.owned.ahs.insert((dev, ah.0));
    Ok(Response::Handle(u64::from(ah.0)))
}

/// `DestroyAh` of one of the client's address handles.
pub(super) fn destroy_ah(h: &mut Host, c: &mut Client, dev: u32, ah: u32) -> Handled {
    destroy_owned(h, &mut c.owned.ahs, dev, ah, "AH", |hca| {
        hca.destroy_ah(AhHandle(ah))
    })
}

/// `AttachMcast`: one of the client's (UD) QPs joins multicast group `gid` at `lid`.
pub(super) fn attach_mcast(
    h: &mut Host,
    c: &mut Client,
    dev: u32,
    qpn: Qpn,
    gid: Gid,
    lid: Lid,
) -> Handled {
    owns(&c.owned.qps, dev, qpn, "QP")?;
    let d = h.dev(dev)?;
    let mgid = d
        .join_group(gid, qpn)
        .map_err(|e| super::refused(ErrorKind::Invalid, e.to_string()))?;
    if let Err(e) = d.hca_mut().attach_mcast(qpn, mgid, lid) {
        d.leave_group(gid, qpn);
        return Err(e.into());
    }
    Ok(Response::Ok)
}

/// `DetachMcast`: one of the client's QPs leaves group `gid`.
pub(super) fn detach_mcast(h: &mut Host, c: &mut Client, dev: u32, qpn: Qpn, gid: Gid) -> Handled {
    owns(&c.owned.qps, dev, qpn, "QP")?;
    let d = h.dev(dev)?;
    let mgid = d.group_mgid(gid);
    d.hca_mut().detach_mcast(qpn, mgid)?;
    d.leave_group(gid, qpn);
    Ok(Response::Ok)
}

#[cfg(test)]
mod tests {
    use softib_engine::verbs::QpState;
    use softib_engine::{CqHandle, QpAttr};
    use softib_proto::{ErrorKind, Request};

    use super::*;
    use crate::host::testing::{qp_init, TestHost};

    fn foreign(what: &str, key: impl std::fmt::Display) -> (ErrorKind, String) {
        (
            ErrorKind::NotFound,
            format!("no {what} {key} on device 0 belongs to this client"),
        )
    }

    #[test]
    fn a_qp_is_made_of_its_creators_own_pd_cqs_and_srq() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let a_pd = t.handle(a, Request::AllocPd { dev: 0 });
        let a_cq = t.handle(a, Request::CreateCq { dev: 0, cqe: 4 });
        let a_srq = t.srq(a, a_pd);
        let b_pd = t.handle(b, Request::AllocPd { dev: 0 });
        let b_cq = t.handle(b, Request::CreateCq { dev: 0, cqe: 4 });
        let create = |pd, send_cq, recv_cq, srq: Option<u32>| Request::CreateQp {
            dev: 0,
            init: QpInitAttr {
                send_cq: CqHandle(send_cq),
                recv_cq: CqHandle(recv_cq),
                srq: srq.map(SrqHandle),
                ..qp_init(pd, send_cq)
            },
        };
        assert_eq!(
            t.refused(b, create(a_pd, b_cq, b_cq, None)),
            foreign("PD", a_pd)
        );
        assert_eq!(
            t.refused(b, create(b_pd, a_cq, b_cq, None)),
            foreign("CQ", a_cq)
        );
        assert_eq!(
            t.refused(b, create(b_pd, b_cq, a_cq, None)),
            foreign("CQ", a_cq)
        );
        assert_eq!(
            t.refused(b, create(b_pd, b_cq, b_cq, Some(a_srq))),
            foreign("SRQ", a_srq)
        );
        assert!(t.hca().qpns().next().is_none(), "a QP was made");
        assert!(matches!(
            t.ok(b, create(b_pd, b_cq, b_cq, None)),
            Response::Qp(_)
        ));
        assert!(matches!(
            t.ok(a, create(a_pd, a_cq, a_cq, Some(a_srq))),
            Response::Qp(_)
        ));
    }

    #[test]
    fn another_clients_qp_cannot_be_modified_queried_attached_or_destroyed() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let (_, _, qpn) = t.qp(a);
        let to_error = QpAttr {
            qp_state: QpState::Err,
            ..Default::default()
        };
        for req in [
            Request::ModifyQp {
                dev: 0,
                qpn,
                attr: Box::new(to_error),
                mask: AttrMask::STATE,
            },
            Request::QueryQp { dev: 0, qpn },
            Request::AttachMcast {
                dev: 0,
                qpn,
                gid: Gid::default(),
                lid: Lid(0xc001),
            },
            Request::DetachMcast {
                dev: 0,
                qpn,
                gid: Gid::default(),
            },
            Request::DestroyQp { dev: 0, qpn },
        ] {
            assert_eq!(t.refused(b, req), foreign("QP", qpn));
        }
        // Untouched: still INIT, and its owner may destroy it.
        let Response::QpAttr(attr, _) = t.ok(a, Request::QueryQp { dev: 0, qpn }) else {
            panic!("no attributes");
        };
        assert_eq!(attr.qp_state, QpState::Init);
        t.ok(a, Request::DestroyQp { dev: 0, qpn });
        assert_eq!(
            t.refused(a, Request::QueryQp { dev: 0, qpn }),
            foreign("QP", qpn)
        );
    }

    #[test]
    fn address_handles_and_srqs_are_their_creators() {
        let mut t = TestHost::new();
        let (a, b) = (t.client(), t.client());
        let pd = t.handle(a, Request::AllocPd { dev: 0 });
        let ah = t.ah(a, pd);
        let srq = t.srq(a, pd);
        assert_eq!(
            t.refused(b, Request::DestroyAh { dev: 0, ah }),
            foreign("AH", ah)
        );
        assert_eq!(
            t.refused(
                b,
                Request::ModifySrq {
                    dev: 0,
                    srq,
                    limit: 1
                }
            ),
            foreign("SRQ", srq)
        );
        assert_eq!(
            t.refused(b, Request::DestroySrq { dev: 0, srq }),
            foreign("SRQ", srq)
        );
        t.ok(
            a,
            Request::ModifySrq {
                dev: 0,
                srq,
                limit: 1,
            },
        );
        t.ok(a, Request::DestroyAh { dev: 0, ah });
        t.ok(a, Request::DestroySrq { dev: 0, srq });
        assert_eq!(
            t.refused(a, Request::DestroyAh { dev: 0, ah }),
            foreign("AH", ah)
        );
    }
}
