//! Queues: QPs (created in the client's PD on its CQs, modified, queried, destroyed), shared
//! receive queues, address handles, and a UD QP's multicast groups.

use softib_engine::{AddressVector, AhHandle, AttrMask, PdHandle, QpAttr, QpInitAttr, SrqHandle};
use softib_proto::{ErrorKind, Response};
use softib_wire::{Gid, Lid, Qpn};

use super::{refused, Handled};
use crate::host::client::{
    owns, Client, MAX_AHS_PER_CLIENT, MAX_CQS_PER_CLIENT, MAX_QPS_PER_CLIENT,
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
    if c.owned.qps.len() >= MAX_QPS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may create at most {MAX_QPS_PER_CLIENT} QPs"),
        ));
    }
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
    d.hca_mut().modify_qp(qpn, attr, mask)?;
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
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    hca.destroy_qp(qpn)?;
    c.owned.qps.remove(&(dev, qpn));
    Ok(Response::Ok)
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
    if c.owned.srqs.len() >= MAX_CQS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            "too many SRQs for one client",
        ));
    }
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
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.srqs, dev, srq, "SRQ")?;
    hca.destroy_srq(SrqHandle(srq))?;
    c.owned.srqs.remove(&(dev, srq));
    Ok(Response::Ok)
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
    if c.owned.ahs.len() >= MAX_AHS_PER_CLIENT {
        return Err(refused(
            ErrorKind::Exhausted,
            format!("a client may create at most {MAX_AHS_PER_CLIENT} AHs"),
        ));
    }
    let ah = hca.create_ah(PdHandle(pd), av)?;
    c.owned.ahs.insert((dev, ah.0));
    Ok(Response::Handle(u64::from(ah.0)))
}

/// `DestroyAh` of one of the client's address handles.
pub(super) fn destroy_ah(h: &mut Host, c: &mut Client, dev: u32, ah: u32) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.ahs, dev, ah, "AH")?;
    hca.destroy_ah(AhHandle(ah))?;
    c.owned.ahs.remove(&(dev, ah));
    Ok(Response::Ok)
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
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    hca.attach_mcast(qpn, gid, lid)?;
    Ok(Response::Ok)
}

/// `DetachMcast`: one of the client's QPs leaves group `gid`.
pub(super) fn detach_mcast(h: &mut Host, c: &mut Client, dev: u32, qpn: Qpn, gid: Gid) -> Handled {
    let hca = h.dev(dev)?.hca_mut();
    owns(&c.owned.qps, dev, qpn, "QP")?;
    hca.detach_mcast(qpn, gid)?;
    Ok(Response::Ok)
}
