//! The port a benchmark runs on, as the HCA reports it: why a run stopped making progress
//! ([`diagnose`]: the port not Active — no SM —, what the HCA dropped), and which GID a RoCE
//! port sends from ([`roce_gid_index`]). perftest's tools and the pingpong examples explain a
//! stall from the same facts, each in its own words.

use std::time::{Duration, Instant};

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
    /// What it dropped while the run stood still (nonzero counts only) and for how long that
    /// was counted, when a [`StallWatch`] took a baseline.
    pub recent: Option<(Duration, Vec<(String, u64)>)>,
    /// The faults set on the port (`softib link set DEV fault ...`) and what they did, when
    /// any are set.
    pub faults: Option<(softib::FaultSpec, softib::FaultStats)>,
}

impl Stall {
    /// The drops that explain the stall: those counted while it lasted when that is known,
    /// else every drop since the device started. A UD receiver that dropped messages early in
    /// a run and then heard nothing must not blame those early drops.
    pub fn relevant_drops(&self) -> &[(String, u64)] {
        match &self.recent {
            Some((_, d)) => d,
            None => &self.drops,
        }
    }

    /// The words for the span [`Stall::relevant_drops`] covers: " in the last 4.5 s", or
    /// nothing when the counts are since the device started.
    pub fn drops_span(&self) -> String {
        match &self.recent {
            Some((d, _)) => format!(" in the last {:.1} s", d.as_secs_f64()),
            None => String::new(),
        }
    }

    /// Whether the device dropped anything for `reason` in [`Stall::relevant_drops`].
    pub fn dropped(&self, reason: &str) -> bool {
        self.relevant_drops().iter().any(|(r, _)| r == reason)
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
        recent: None,
        faults,
    }))
}

/// How long a run stands still before [`StallWatch`] asks the HCA for its drop counts: long
/// enough that a run making progress never asks, short next to any `--timeout`.
const BASELINE_AFTER: Duration = Duration::from_millis(500);

/// Follows a run's progress so that, when it stalls, [`StallWatch::diagnose`] can say what the
/// HCA dropped while it stood still rather than since the device started.
#[derive(Debug)]
pub struct StallWatch {
    last_progress: Instant,
    /// The drop counts when the run had stood still for [`BASELINE_AFTER`], and when.
    baseline: Option<(Instant, Vec<(String, u64)>)>,
}

impl Default for StallWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl StallWatch {
    /// A watch on a run that has just made progress.
    pub fn new() -> Self {
        Self {
            last_progress: Instant::now(),
            baseline: None,
        }
    }

    /// The run moved on.
    pub fn progressed(&mut self) {
        self.last_progress = Instant::now();
        self.baseline = None;
    }

    /// How long the run has stood still.
    pub fn still_for(&self) -> Duration {
        self.last_progress.elapsed()
    }

    /// The run is standing still: once it has for a moment, note the HCA's drop counts (a
    /// failed ask is tried again at the next call).
    pub fn idle(&mut self, ctx: &mut Context, dev: &str, port: u8) {
        if self.baseline.is_some() || self.still_for() < BASELINE_AFTER {
            return;
        }
        if let Ok(Some(now)) = diagnose(ctx, dev, port) {
            self.baseline = Some((Instant::now(), now.drops));
        }
    }

    /// [`diagnose`], with what was dropped since the baseline when one was taken.
    pub fn diagnose(
        &self,
        ctx: &mut Context,
        dev: &str,
        port: u8,
    ) -> softib::Result<Option<Stall>> {
        let mut stall = diagnose(ctx, dev, port)?;
        if let (Some(s), Some((at, base))) = (stall.as_mut(), &self.baseline) {
            s.recent = Some((at.elapsed(), drops_since(base, &s.drops)));
        }
        Ok(stall)
    }
}

/// The nonzero increases from `base` to `now`, by reason.
fn drops_since(base: &[(String, u64)], now: &[(String, u64)]) -> Vec<(String, u64)> {
    now.iter()
        .filter_map(|(r, n)| {
            let before = base.iter().find(|(b, _)| b == r).map_or(0, |(_, b)| *b);
            (*n > before).then(|| (r.clone(), n - before))
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(r, n)| (r.to_string(), *n)).collect()
    }

    #[test]
    fn a_stall_counts_only_what_was_dropped_while_it_lasted() {
        let base = counts(&[("ud_no_receive", 8188)]);
        let now = counts(&[("ud_no_receive", 8188), ("bad_icrc", 3)]);
        assert_eq!(drops_since(&base, &now), counts(&[("bad_icrc", 3)]));
        let mut stall = Stall {
            port_down: None,
            drops: now.clone(),
            recent: Some((Duration::from_millis(4500), drops_since(&base, &now))),
            faults: None,
        };
        assert!(stall.dropped("bad_icrc"));
        assert!(!stall.dropped("ud_no_receive"));
        assert_eq!(stall.drops_span(), " in the last 4.5 s");
        stall.recent = Some((Duration::from_secs(4), drops_since(&now, &now)));
        assert!(stall.relevant_drops().is_empty());
        // Without a baseline, every drop since the device started counts.
        stall.recent = None;
        assert_eq!(stall.relevant_drops(), &now[..]);
        assert_eq!(stall.drops_span(), "");
    }
}
