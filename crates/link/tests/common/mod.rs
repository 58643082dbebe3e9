//! What the link's tests share, the unit tests beside `RoceCa` (which include this file) and
//! the real-socket ones alike: an engine with one registered region, QPs brought up through a
//! `RoceCa`, and paths by GID.
#![allow(dead_code, clippy::unwrap_used)] // tests fail loudly by design

use std::net::IpAddr;

use softib_engine::memory::{RegionId, VecMemory};
use softib_engine::qp::{AddressVector, AttrMask, GlobalRoute, QpAttr, QpCap, QpInitAttr};
use softib_engine::verbs::{AccessFlags, QpState, QpType, SendFlags, SendWr, Sge, WrOpcode};
use softib_engine::{CqHandle, Hca, HcaConfig, PdHandle};
use softib_link::{framing, RoceCa};
use softib_wire::{Mtu, Psn, Qpn};

/// Where every test region starts.
pub const BUF: u64 = 0x1000_0000;

/// An engine for the device at `ip`: port 1 with that address's GID and an active MTU of
/// 1024, one PD, one CQ, and `len` bytes at [`BUF`] registered for everything.
pub struct Engine {
    /// The engine.
    pub hca: Hca<VecMemory>,
    /// Its PD.
    pub pd: PdHandle,
    /// Its one CQ (send and receive).
    pub cq: CqHandle,
    /// The key of the region at [`BUF`].
    pub key: u32,
}

/// [`Engine`] at `ip`, seeded with `seed`.
pub fn engine(ip: IpAddr, seed: u64, len: usize) -> Engine {
    let mut cfg = HcaConfig::with_seed(seed);
    cfg.ports[0].gids = vec![framing::gid_of(ip)];
    cfg.ports[0].active_mtu = Mtu::Mtu1024;
    let mut mem = VecMemory::new();
    mem.add(RegionId(1), BUF, len);
    let mut hca = Hca::new(cfg, mem);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(8192).unwrap();
    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ)
        .with(AccessFlags::REMOTE_ATOMIC);
    let key = hca.reg_mr(pd, BUF, len as u64, all, RegionId(1)).unwrap();
    Engine { hca, pd, cq, key }
}

/// A QP of type `t` on `pd` completing into `cq`, 512 WRs deep each way.
pub fn create_qp(hca: &mut Hca<VecMemory>, pd: PdHandle, cq: CqHandle, t: QpType) -> Qpn {
    hca.create_qp(QpInitAttr {
        qp_type: t,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: 512,
            max_recv_wr: 512,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
    })
    .unwrap()
}

/// The path to the device at `ip`: by GID, as RoCEv2 routes.
pub fn av_to(ip: IpAddr) -> AddressVector {
    AddressVector {
        port_num: 1,
        grh: Some(GlobalRoute {
            dgid: framing::gid_of(ip),
            flow_label: 0,
            sgid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
        }),
        ..AddressVector::default()
    }
}

/// Brings RC QP `qpn` from RESET to RTS towards QP `remote` over `av`, through the `RoceCa`
/// (so that its RTR path is looked at).
pub fn rc_up(ca: &mut RoceCa<VecMemory>, qpn: Qpn, remote: Qpn, av: AddressVector) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qp_access_flags: AccessFlags::LOCAL_WRITE
            .with(AccessFlags::REMOTE_WRITE)
            .with(AccessFlags::REMOTE_READ)
            .with(AccessFlags::REMOTE_ATOMIC),
        port_num: 1,
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: remote,
        rq_psn: Psn::new(0x1000),
        sq_psn: Psn::new(0x1000),
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ah_attr: av,
        ..QpAttr::default()
    };
    let steps = [
        (QpState::Init, AttrMask::ACCESS_FLAGS),
        (
            QpState::Rtr,
            AttrMask::AV
                .with(AttrMask::PATH_MTU)
                .with(AttrMask::DEST_QPN)
                .with(AttrMask::RQ_PSN)
                .with(AttrMask::MAX_DEST_RD_ATOMIC)
                .with(AttrMask::MIN_RNR_TIMER),
        ),
        (
            QpState::Rts,
            AttrMask::SQ_PSN
                .with(AttrMask::TIMEOUT)
                .with(AttrMask::RETRY_CNT)
                .with(AttrMask::RNR_RETRY)
                .with(AttrMask::MAX_QP_RD_ATOMIC),
        ),
    ];
    for (state, mask) in steps {
        a.qp_state = state;
        let mask = if state == QpState::Init {
            mask.with(AttrMask::PKEY_INDEX).with(AttrMask::PORT)
        } else {
            mask
        };
        ca.modify_qp(qpn, &a, AttrMask::STATE.with(mask)).unwrap();
    }
}

/// Brings UD QP `qpn` from RESET to RTS with Q_Key 0x11111111.
pub fn ud_up(ca: &mut RoceCa<VecMemory>, qpn: Qpn) {
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        qkey: 0x1111_1111,
        port_num: 1,
        ..QpAttr::default()
    };
    let init = AttrMask::PKEY_INDEX
        .with(AttrMask::PORT)
        .with(AttrMask::QKEY);
    for (state, mask) in [
        (QpState::Init, init),
        (QpState::Rtr, AttrMask(0)),
        (QpState::Rts, AttrMask::SQ_PSN),
    ] {
        attr.qp_state = state;
        ca.modify_qp(qpn, &attr, AttrMask::STATE.with(mask))
            .unwrap();
    }
}

/// A signaled work request with one SGE.
pub fn wr(wr_id: u64, opcode: WrOpcode, sge: Sge) -> SendWr {
    SendWr {
        wr_id,
        opcode,
        sg_list: vec![sge],
        flags: SendFlags::SIGNALED,
        inline_data: None,
        ud: None,
    }
}
