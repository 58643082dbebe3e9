//! The port a benchmark runs on, as the HCA reports it: why a run stopped making progress
//! ([`diagnose`]: the port not Active — no SM —, what the HCA dropped), and which GID a RoCE
//! port sends from ([`roce_gid_index`]). perftest's tools and the pingpong examples explain a
//! stall from the same facts, each in its own words.

use softib::{
    AccessFlags, AddressVector, AttrMask, Context, Mtu, PortInfo, Psn, QpAttr, QpState, Qpn,
};

/// What the HCA says about a stalled run.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// Why the port carries no data (`PortInfo::why_not_active`), when it is not Active.
    pub port_down: Option<String>,
    /// What the device dropped since it started, by reason (nonzero counts only).
    pub drops: Vec<(String, u64)>,
    /// The faults set on the port (`softib link set DEV fault ...`) and what they did, when
    /// any are set.
    pub faults: Option<(softib::FaultSpec, softib::FaultStats)>,
}

impl Stall {
    /// Whether the device dropped anything for `reason`.
    pub fn dropped(&self, reason: &str) -> bool {
        self.drops.iter().any(|(r, _)| r == reason)
    }
}

/// Asks the HCA about port `port` of device `dev` now; `None` when the device is no longer
/// listed.
pub fn diagnose(ctx: &mut Context, dev: &str, port: u8) -> softib::Result<Option<Stall>> {
    let devs = ctx.devices()?;
    let Some(index) = devs.iter().position(|d| d.name == dev) else {
        return Ok(None);
    };
    // Faults are softib's: an rdma-core device has none to report.
    let faults = ctx
        .faults(index as u32)
        .unwrap_or_default()
        .into_iter()
        .find(|(p, spec, _)| *p == port && !spec.is_none())
        .map(|(_, spec, stats)| (spec, stats));
    let d = &devs[index];
    Ok(Some(Stall {
        port_down: d
            .ports
            .iter()
            .find(|p| p.number == port)
            .and_then(|p| p.why_not_active(&d.name)),
        drops: d.drops.clone(),
        faults,
    }))
}

/// The GID index a RoCE port sends from when none is asked for: the device's own address
/// (its IPv4-mapped GID on an IPv4 device), else index 0. Upstream takes index 0, rxe's IPv6
/// link-local GID, which the kernel routes by interface; softib sends from the device's own
/// address.
pub fn roce_gid_index(port: &PortInfo) -> u8 {
    port.gids
        .iter()
        .position(|g| g.0[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff])
        .map_or(0, |i| u8::try_from(i).unwrap_or(0))
}

/// The RESET → INIT attributes of a QP on `port`, as perftest and the pingpongs give them: a
/// UD QP gets the Q_Key both use (0x11111111, [`softib::UD_QKEY`]), a connected one `access`.
pub fn init_attr(ud: bool, port: u8, access: AccessFlags) -> (QpAttr, AttrMask) {
    let mut attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: port,
        ..QpAttr::default()
    };
    let mut mask = AttrMask::STATE
        .with(AttrMask::PKEY_INDEX)
        .with(AttrMask::PORT);
    if ud {
        attr.qkey = softib::UD_QKEY;
        mask = mask.with(AttrMask::QKEY);
    } else {
        attr.qp_access_flags = access;
        mask = mask.with(AttrMask::ACCESS_FLAGS);
    }
    (attr, mask)
}

/// What moving a connected QP (RC or UC) from INIT through RTR to RTS takes, however the two
/// sides learned it: perftest's out-of-band exchange, or the CM's REQ and REP (`-R`).
#[derive(Debug, Clone)]
pub struct ConnectedQp {
    /// RC (the reliability attributes apply) or UC.
    pub reliable: bool,
    /// Path MTU.
    pub mtu: Mtu,
    /// The peer's QP.
    pub remote_qpn: Qpn,
    /// The PSN the peer starts sending with (this side's receive PSN).
    pub remote_psn: Psn,
    /// The PSN this side starts sending with.
    pub local_psn: Psn,
    /// The route to the peer.
    pub av: AddressVector,
    /// RDMA reads and atomics this side answers at once (RC).
    pub max_dest_rd_atomic: u8,
    /// RDMA reads and atomics this side has outstanding at once (RC).
    pub max_rd_atomic: u8,
    /// Local ACK timeout exponent (RC).
    pub timeout: u8,
    /// Transport retries (RC).
    pub retry_cnt: u8,
    /// RNR retries, 7 = forever (RC).
    pub rnr_retry: u8,
}

/// The RNR NAK timer perftest gives its receivers (upstream `MIN_RNR_TIMER`, 0.64 ms).
pub const MIN_RNR_TIMER: u8 = 12;

/// A transition of [`ready_connected`] the HCA refused.
#[derive(Debug, thiserror::Error)]
#[error("cannot move QP {qpn:#x} to {to}: {source}")]
pub struct ReadyError {
    /// The QP.
    pub qpn: u32,
    /// "RTR" or "RTS".
    pub to: &'static str,
    /// Why.
    pub source: softib::Error,
}

/// INIT → RTR → RTS for QP `qpn` of device `dev` (perftest's `ctx_connect`, the
/// pingpongs' `pp_connect_ctx`, and what rdma_cm does on `rdma_accept` / the REP).
pub fn ready_connected(
    ctx: &mut Context,
    dev: u32,
    qpn: Qpn,
    c: &ConnectedQp,
) -> Result<(), ReadyError> {
    let refused = |to, source| ReadyError {
        qpn: qpn.value(),
        to,
        source,
    };
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: c.mtu,
        dest_qp_num: c.remote_qpn,
        rq_psn: c.remote_psn,
        ah_attr: c.av,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: MIN_RNR_TIMER,
        ..QpAttr::default()
    };
    let mut mask = AttrMask::STATE
        .with(AttrMask::AV)
        .with(AttrMask::PATH_MTU)
        .with(AttrMask::DEST_QPN)
        .with(AttrMask::RQ_PSN);
    if c.reliable {
        mask = mask
            .with(AttrMask::MAX_DEST_RD_ATOMIC)
            .with(AttrMask::MIN_RNR_TIMER);
    }
    ctx.modify_qp(dev, qpn, &rtr, mask)
        .map_err(|e| refused("RTR", e))?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: c.local_psn,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        max_rd_atomic: c.max_rd_atomic,
        ..QpAttr::default()
    };
    let mut mask = AttrMask::STATE.with(AttrMask::SQ_PSN);
    if c.reliable {
        mask = mask
            .with(AttrMask::TIMEOUT)
            .with(AttrMask::RETRY_CNT)
            .with(AttrMask::RNR_RETRY)
            .with(AttrMask::MAX_QP_RD_ATOMIC);
    }
    ctx.modify_qp(dev, qpn, &rts, mask)
        .map_err(|e| refused("RTS", e))
}
