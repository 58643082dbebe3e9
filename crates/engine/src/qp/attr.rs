//! QP attributes and the `ibv_modify_qp` rules: which attributes each state transition
//! requires and which it allows, per QP type (IBA §11.2.4.2 table 91–93; the Linux kernel's
//! `qp_state_table` gives the same matrix). An invalid request changes nothing and says why.

use core::fmt;

use softib_wire::{Gid, Lid, Mtu, Psn, Qpn};

use crate::verbs::{AccessFlags, QpState, QpType};

/// The attribute mask of `ibv_modify_qp` (`enum ibv_qp_attr_mask`, same bit values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AttrMask(pub u32);

impl AttrMask {
    /// `qp_state`.
    pub const STATE: AttrMask = AttrMask(1 << 0);
    /// `cur_qp_state`.
    pub const CUR_STATE: AttrMask = AttrMask(1 << 1);
    /// `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: AttrMask = AttrMask(1 << 2);
    /// `qp_access_flags`.
    pub const ACCESS_FLAGS: AttrMask = AttrMask(1 << 3);
    /// `pkey_index`.
    pub const PKEY_INDEX: AttrMask = AttrMask(1 << 4);
    /// `port_num`.
    pub const PORT: AttrMask = AttrMask(1 << 5);
    /// `qkey`.
    pub const QKEY: AttrMask = AttrMask(1 << 6);
    /// `ah_attr` (the primary path).
    pub const AV: AttrMask = AttrMask(1 << 7);
    /// `path_mtu`.
    pub const PATH_MTU: AttrMask = AttrMask(1 << 8);
    /// `timeout` (local ACK timeout).
    pub const TIMEOUT: AttrMask = AttrMask(1 << 9);
    /// `retry_cnt`.
    pub const RETRY_CNT: AttrMask = AttrMask(1 << 10);
    /// `rnr_retry`.
    pub const RNR_RETRY: AttrMask = AttrMask(1 << 11);
    /// `rq_psn`.
    pub const RQ_PSN: AttrMask = AttrMask(1 << 12);
    /// `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: AttrMask = AttrMask(1 << 13);
    /// `alt_ah_attr` and friends.
    pub const ALT_PATH: AttrMask = AttrMask(1 << 14);
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: AttrMask = AttrMask(1 << 15);
    /// `sq_psn`.
    pub const SQ_PSN: AttrMask = AttrMask(1 << 16);
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: AttrMask = AttrMask(1 << 17);
    /// `path_mig_state`.
    pub const PATH_MIG_STATE: AttrMask = AttrMask(1 << 18);
    /// `cap`.
    pub const CAP: AttrMask = AttrMask(1 << 19);
    /// `dest_qp_num`.
    pub const DEST_QPN: AttrMask = AttrMask(1 << 20);

    const NAMES: [&'static str; 21] = [
        "IBV_QP_STATE",
        "IBV_QP_CUR_STATE",
        "IBV_QP_EN_SQD_ASYNC_NOTIFY",
        "IBV_QP_ACCESS_FLAGS",
        "IBV_QP_PKEY_INDEX",
        "IBV_QP_PORT",
        "IBV_QP_QKEY",
        "IBV_QP_AV",
        "IBV_QP_PATH_MTU",
        "IBV_QP_TIMEOUT",
        "IBV_QP_RETRY_CNT",
        "IBV_QP_RNR_RETRY",
        "IBV_QP_RQ_PSN",
        "IBV_QP_MAX_QP_RD_ATOMIC",
        "IBV_QP_ALT_PATH",
        "IBV_QP_MIN_RNR_TIMER",
        "IBV_QP_SQ_PSN",
        "IBV_QP_MAX_DEST_RD_ATOMIC",
        "IBV_QP_PATH_MIG_STATE",
        "IBV_QP_CAP",
        "IBV_QP_DEST_QPN",
    ];

    /// The union.
    pub const fn with(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 | other.0)
    }
    /// Whether all of `other` is set.
    pub const fn contains(self, other: AttrMask) -> bool {
        self.0 & other.0 == other.0
    }
    /// The bits of `self` not in `other`.
    pub const fn minus(self, other: AttrMask) -> AttrMask {
        AttrMask(self.0 & !other.0)
    }
    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for AttrMask {
    /// `IBV_QP_AV|IBV_QP_PATH_MTU`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (bit, name) in AttrMask::NAMES.iter().enumerate() {
            if self.0 & (1 << bit) != 0 {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if self.0 >> AttrMask::NAMES.len() != 0 {
            if !first {
                f.write_str("|")?;
            }
            write!(
                f,
                "0x{:x}",
                self.0 >> AttrMask::NAMES.len() << AttrMask::NAMES.len()
            )?;
        }
        Ok(())
    }
}

/// The global routing part of an address vector (`struct ibv_global_route`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Index of the source GID in the port's GID table.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// An address vector (`struct ibv_ah_attr`): where a QP's packets go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AddressVector {
    /// Destination LID.
    pub dlid: Lid,
    /// Service level.
    pub sl: u8,
    /// Source path bits (LMC).
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// The GRH, when the path is global (always on RoCE).
    pub grh: Option<GlobalRoute>,
    /// The local port.
    pub port_num: u8,
}

/// The attributes of `ibv_modify_qp`/`ibv_query_qp` (`struct ibv_qp_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct QpAttr {
    /// The state to move to.
    pub qp_state: QpState,
    /// The state the caller believes the QP is in (checked with `CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// Receive PSN: the first PSN the responder expects.
    pub rq_psn: Psn,
    /// Send PSN: the first PSN the requester sends.
    pub sq_psn: Psn,
    /// Remote QPN.
    pub dest_qp_num: Qpn,
    /// Remote access rights granted to incoming requests.
    pub qp_access_flags: AccessFlags,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Primary path.
    pub ah_attr: AddressVector,
    /// P_Key table index.
    pub pkey_index: u16,
    /// Port number (1-based).
    pub port_num: u8,
    /// Outstanding READ/atomic requests this QP may issue.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomic requests this QP accepts as a responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code this responder sends (AETH RNR timer, 0..=31).
    pub min_rnr_timer: u8,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Retries on timeout or sequence error (0..=7).
    pub retry_cnt: u8,
    /// Retries on RNR NAK (0..=7; 7 = infinite).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    fn default() -> QpAttr {
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: Mtu::Mtu1024,
            rq_psn: Psn::new(0),
            sq_psn: Psn::new(0),
            dest_qp_num: Qpn::new(0),
            qp_access_flags: AccessFlags::NONE,
            qkey: 0,
            ah_attr: AddressVector::default(),
            pkey_index: 0,
            port_num: 1,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

/// Why `modify_qp` refused. Nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModifyQpError {
    /// No QP with that number.
    UnknownQp(Qpn),
    /// The transition is not in the QP state table.
    InvalidTransition {
        /// The QP's current state.
        from: QpState,
        /// The state asked for.
        to: QpState,
    },
    /// Attributes the transition requires are missing from the mask.
    MissingAttributes {
        /// The transition.
        from: QpState,
        /// The transition.
        to: QpState,
        /// What is missing.
        missing: AttrMask,
    },
    /// Attributes the transition does not allow are in the mask.
    UnexpectedAttributes {
        /// The transition.
        from: QpState,
        /// The transition.
        to: QpState,
        /// What is not allowed.
        extra: AttrMask,
    },
    /// `CUR_STATE` was given and does not match the QP's state.
    CurrentStateMismatch {
        /// The QP's state.
        actual: QpState,
        /// What the caller said.
        given: QpState,
    },
    /// An attribute value is out of range (the text names it).
    InvalidValue(&'static str),
}

impl fmt::Display for ModifyQpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModifyQpError::UnknownQp(q) => write!(f, "no QP {q}"),
            ModifyQpError::InvalidTransition { from, to } => {
                write!(f, "a QP cannot move from {from} to {to}")
            }
            ModifyQpError::MissingAttributes { from, to, missing } => write!(
                f,
                "{from}->{to} requires {missing}; add them to the attribute mask"
            ),
            ModifyQpError::UnexpectedAttributes { from, to, extra } => write!(
                f,
                "{from}->{to} does not accept {extra}; remove them from the attribute mask"
            ),
            ModifyQpError::CurrentStateMismatch { actual, given } => {
                write!(f, "cur_qp_state says {given} but the QP is in {actual}")
            }
            ModifyQpError::InvalidValue(what) => write!(f, "invalid attribute value: {what}"),
        }
    }
}

impl std::error::Error for ModifyQpError {}

/// The required and optional attributes of a transition, or `None` if it is not allowed.
/// Without `STATE` in the mask the transition is `cur -> cur`.
pub fn transition_rules(
    qp_type: QpType,
    from: QpState,
    to: QpState,
) -> Option<(AttrMask, AttrMask)> {
    use AttrMask as M;
    use QpState::*;
    let none = M(0);
    let by_type = |ud: AttrMask, uc: AttrMask, rc: AttrMask| match qp_type {
        QpType::Ud => ud,
        QpType::Uc => uc,
        QpType::Rc => rc,
    };
    // Any state may go to RESET or ERR with no other attribute.
    if to == Reset || to == Err {
        return Some((none, none));
    }
    let rules = match (from, to) {
        (Reset, Init) => (
            by_type(
                M::PKEY_INDEX.with(M::PORT).with(M::QKEY),
                M::PKEY_INDEX.with(M::PORT).with(M::ACCESS_FLAGS),
                M::PKEY_INDEX.with(M::PORT).with(M::ACCESS_FLAGS),
            ),
            none,
        ),
        (Init, Init) => (
            none,
            by_type(
                M::PKEY_INDEX.with(M::PORT).with(M::QKEY),
                M::PKEY_INDEX.with(M::PORT).with(M::ACCESS_FLAGS),
                M::PKEY_INDEX.with(M::PORT).with(M::ACCESS_FLAGS),
            ),
        ),
        (Init, Rtr) => (
            by_type(
                none,
                M::AV.with(M::PATH_MTU).with(M::DEST_QPN).with(M::RQ_PSN),
                M::AV
                    .with(M::PATH_MTU)
                    .with(M::DEST_QPN)
                    .with(M::RQ_PSN)
                    .with(M::MAX_DEST_RD_ATOMIC)
                    .with(M::MIN_RNR_TIMER),
            ),
            by_type(
                M::PKEY_INDEX.with(M::QKEY),
                M::ALT_PATH.with(M::ACCESS_FLAGS).with(M::PKEY_INDEX),
                M::ALT_PATH.with(M::ACCESS_FLAGS).with(M::PKEY_INDEX),
            ),
        ),
        (Rtr, Rts) => (
            by_type(
                M::SQ_PSN,
                M::SQ_PSN,
                M::TIMEOUT
                    .with(M::RETRY_CNT)
                    .with(M::RNR_RETRY)
                    .with(M::SQ_PSN)
                    .with(M::MAX_QP_RD_ATOMIC),
            ),
            by_type(
                M::CUR_STATE.with(M::QKEY),
                M::CUR_STATE
                    .with(M::ALT_PATH)
                    .with(M::ACCESS_FLAGS)
                    .with(M::PATH_MIG_STATE),
                M::CUR_STATE
                    .with(M::ALT_PATH)
                    .with(M::ACCESS_FLAGS)
                    .with(M::MIN_RNR_TIMER)
                    .with(M::PATH_MIG_STATE),
            ),
        ),
        (Rts, Rts) | (Sqd, Rts) => (
            none,
            by_type(
                M::CUR_STATE.with(M::QKEY),
                M::CUR_STATE
                    .with(M::ACCESS_FLAGS)
                    .with(M::ALT_PATH)
                    .with(M::PATH_MIG_STATE),
                M::CUR_STATE
                    .with(M::ACCESS_FLAGS)
                    .with(M::ALT_PATH)
                    .with(M::PATH_MIG_STATE)
                    .with(M::MIN_RNR_TIMER),
            ),
        ),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => (
            none,
            by_type(
                M::PKEY_INDEX.with(M::QKEY),
                M::AV
                    .with(M::ALT_PATH)
                    .with(M::ACCESS_FLAGS)
                    .with(M::PKEY_INDEX)
                    .with(M::PATH_MIG_STATE),
                M::PORT
                    .with(M::AV)
                    .with(M::TIMEOUT)
                    .with(M::RETRY_CNT)
                    .with(M::RNR_RETRY)
                    .with(M::MAX_QP_RD_ATOMIC)
                    .with(M::MAX_DEST_RD_ATOMIC)
                    .with(M::ALT_PATH)
                    .with(M::ACCESS_FLAGS)
                    .with(M::PKEY_INDEX)
                    .with(M::MIN_RNR_TIMER)
                    .with(M::PATH_MIG_STATE),
            ),
        ),
        (Sqe, Rts) if qp_type != QpType::Rc => (
            none,
            by_type(
                M::CUR_STATE.with(M::QKEY),
                M::CUR_STATE.with(M::ACCESS_FLAGS),
                none,
            ),
        ),
        (Reset, Reset) | (Err, Err) => (none, none),
        _ => return None,
    };
    Some(rules)
}

/// Checks a modify request against the state table: the transition exists, every required
/// attribute is present and nothing else but the optional ones is. Returns the target state.
pub fn validate(
    qp_type: QpType,
    current: QpState,
    attr: &QpAttr,
    mask: AttrMask,
) -> Result<QpState, ModifyQpError> {
    let to = if mask.contains(AttrMask::STATE) {
        attr.qp_state
    } else {
        current
    };
    if mask.contains(AttrMask::CUR_STATE) && attr.cur_qp_state != current {
        return Err(ModifyQpError::CurrentStateMismatch {
            actual: current,
            given: attr.cur_qp_state,
        });
    }
    let (required, optional) = transition_rules(qp_type, current, to)
        .ok_or(ModifyQpError::InvalidTransition { from: current, to })?;
    let given = mask.minus(AttrMask::STATE);
    let missing = required.minus(given);
    if !missing.is_empty() {
        return Err(ModifyQpError::MissingAttributes {
            from: current,
            to,
            missing,
        });
    }
    let extra = given.minus(required).minus(optional);
    if !extra.is_empty() {
        return Err(ModifyQpError::UnexpectedAttributes {
            from: current,
            to,
            extra,
        });
    }
    if mask.contains(AttrMask::RETRY_CNT) && attr.retry_cnt > 7 {
        return Err(ModifyQpError::InvalidValue("retry_cnt must be 0..=7"));
    }
    if mask.contains(AttrMask::RNR_RETRY) && attr.rnr_retry > 7 {
        return Err(ModifyQpError::InvalidValue("rnr_retry must be 0..=7"));
    }
    if mask.contains(AttrMask::MIN_RNR_TIMER) && attr.min_rnr_timer > 31 {
        return Err(ModifyQpError::InvalidValue("min_rnr_timer must be 0..=31"));
    }
    if mask.contains(AttrMask::TIMEOUT) && attr.timeout > 31 {
        return Err(ModifyQpError::InvalidValue("timeout must be 0..=31"));
    }
    if mask.contains(AttrMask::PATH_MTU) && attr.path_mtu.bytes().is_none() {
        return Err(ModifyQpError::InvalidValue(
            "path_mtu is not one of 256..4096",
        ));
    }
    Ok(to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    fn init_mask() -> AttrMask {
        AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT)
            .with(AttrMask::ACCESS_FLAGS)
    }

    fn attr(to: QpState) -> QpAttr {
        QpAttr {
            qp_state: to,
            ..QpAttr::default()
        }
    }

    #[test]
    fn rc_reset_to_init_needs_access_flags() {
        let ok = validate(
            QpType::Rc,
            QpState::Reset,
            &attr(QpState::Init),
            init_mask(),
        );
        assert_eq!(ok, Ok(QpState::Init));
        let e = validate(
            QpType::Rc,
            QpState::Reset,
            &attr(QpState::Init),
            init_mask().minus(AttrMask::ACCESS_FLAGS),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "RESET->INIT requires IBV_QP_ACCESS_FLAGS; add them to the attribute mask"
        );
    }

    #[test]
    fn ud_init_takes_qkey_not_access_flags() {
        let m = AttrMask::STATE
            .with(AttrMask::PKEY_INDEX)
            .with(AttrMask::PORT)
            .with(AttrMask::QKEY);
        assert!(validate(QpType::Ud, QpState::Reset, &attr(QpState::Init), m).is_ok());
        assert!(matches!(
            validate(
                QpType::Ud,
                QpState::Reset,
                &attr(QpState::Init),
                init_mask()
            ),
            Err(ModifyQpError::MissingAttributes { .. })
        ));
    }

    #[test]
    fn rc_rtr_requires_the_path_and_responder_attributes() {
        let full = AttrMask::STATE
            .with(AttrMask::AV)
            .with(AttrMask::PATH_MTU)
            .with(AttrMask::DEST_QPN)
            .with(AttrMask::RQ_PSN)
            .with(AttrMask::MAX_DEST_RD_ATOMIC)
            .with(AttrMask::MIN_RNR_TIMER);
        assert_eq!(
            validate(QpType::Rc, QpState::Init, &attr(QpState::Rtr), full),
            Ok(QpState::Rtr)
        );
        let e = validate(
            QpType::Rc,
            QpState::Init,
            &attr(QpState::Rtr),
            full.minus(AttrMask::MIN_RNR_TIMER),
        );
        assert!(
            matches!(e, Err(ModifyQpError::MissingAttributes { missing, .. }) if missing == AttrMask::MIN_RNR_TIMER)
        );
        // UC takes neither responder resources nor an RNR timer.
        assert!(matches!(
            validate(QpType::Uc, QpState::Init, &attr(QpState::Rtr), full),
            Err(ModifyQpError::UnexpectedAttributes { .. })
        ));
    }

    #[test]
    fn illegal_transitions_are_refused() {
        for (from, to) in [
            (QpState::Reset, QpState::Rtr),
            (QpState::Init, QpState::Rts),
            (QpState::Rts, QpState::Rtr),
            (QpState::Err, QpState::Init),
        ] {
            assert_eq!(
                validate(QpType::Rc, from, &attr(to), AttrMask::STATE),
                Err(ModifyQpError::InvalidTransition { from, to })
            );
        }
        // RC has no SQE state to recover from.
        assert!(transition_rules(QpType::Rc, QpState::Sqe, QpState::Rts).is_none());
        assert!(transition_rules(QpType::Ud, QpState::Sqe, QpState::Rts).is_some());
    }

    #[test]
    fn any_state_to_reset_or_error() {
        for from in [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
        ] {
            for to in [QpState::Reset, QpState::Err] {
                assert_eq!(
                    validate(QpType::Uc, from, &attr(to), AttrMask::STATE),
                    Ok(to)
                );
            }
        }
    }

    #[test]
    fn cur_state_must_match() {
        let mut a = attr(QpState::Rts);
        a.cur_qp_state = QpState::Init;
        assert!(matches!(
            validate(
                QpType::Rc,
                QpState::Rts,
                &a,
                AttrMask::STATE.with(AttrMask::CUR_STATE)
            ),
            Err(ModifyQpError::CurrentStateMismatch { .. })
        ));
    }

    #[test]
    fn values_are_range_checked() {
        let mut a = attr(QpState::Rts);
        a.retry_cnt = 8;
        let m = AttrMask::STATE
            .with(AttrMask::TIMEOUT)
            .with(AttrMask::RETRY_CNT)
            .with(AttrMask::RNR_RETRY)
            .with(AttrMask::SQ_PSN)
            .with(AttrMask::MAX_QP_RD_ATOMIC);
        assert!(matches!(
            validate(QpType::Rc, QpState::Rtr, &a, m),
            Err(ModifyQpError::InvalidValue(_))
        ));
    }

    #[test]
    fn mask_display() {
        assert_eq!(
            AttrMask::AV.with(AttrMask::PATH_MTU).to_string(),
            "IBV_QP_AV|IBV_QP_PATH_MTU"
        );
    }
}
