//! The verbs vocabulary the engine speaks: the types of `ibv_*` calls, work requests and
//! completions (IBA chapter 11; libibverbs `verbs.h` names and values).

use core::fmt;

use softib_wire::{Lid, Qpn, RKey};

/// Memory access rights of an MR or a QP (`enum ibv_access_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// No remote access, local read only.
    pub const NONE: AccessFlags = AccessFlags(0);
    /// The HCA may write the memory locally (receives, READ responses, atomic results).
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// Remote RDMA WRITE.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// Remote RDMA READ.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// Remote atomics.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// Memory window binding.
    pub const MW_BIND: AccessFlags = AccessFlags(16);
    /// Zero-based virtual addresses.
    pub const ZERO_BASED: AccessFlags = AccessFlags(32);

    /// The union.
    pub const fn with(self, other: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | other.0)
    }
    /// Whether all of `other` is granted.
    pub const fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any remote right is granted (remote rights need LOCAL_WRITE for writes/atomics,
    /// as ibv_reg_mr requires).
    pub const fn any_remote(self) -> bool {
        self.0 & (2 | 4 | 8) != 0
    }
}

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QpType {
    /// Reliable Connection.
    Rc,
    /// Unreliable Connection.
    Uc,
    /// Unreliable Datagram.
    Ud,
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        })
    }
}

/// QP states (IBA §10.3.1, `enum ibv_qp_state`), in the spec's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QpState {
    /// Reset: nothing posted, nothing processed.
    Reset,
    /// Initialized: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error (UC/UD).
    Sqe,
    /// Error: every WQE is flushed.
    Err,
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// Work-completion status (IBA §11.6.2, `enum ibv_wc_status`, same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WcStatus {
    /// The operation completed.
    Success = 0,
    /// Local length error: a message larger than the receive buffer or the port allows.
    LocLenErr = 1,
    /// Local QP operation error: an invalid WQE or a UD message too big.
    LocQpOpErr = 2,
    /// Local EE context operation error (RD only).
    LocEecOpErr = 3,
    /// Local protection error: an SGE's L_Key, PD or access check failed.
    LocProtErr = 4,
    /// The QP went to the error state before this WQE completed.
    WrFlushErr = 5,
    /// Memory window bind error.
    MwBindErr = 6,
    /// An unexpected transport opcode in a response.
    BadRespErr = 7,
    /// Local access error (e.g. a READ response written to memory without LOCAL_WRITE).
    LocAccessErr = 8,
    /// The responder answered NAK Invalid Request.
    RemInvReqErr = 9,
    /// The responder answered NAK Remote Access Error.
    RemAccessErr = 10,
    /// The responder answered NAK Remote Operational Error.
    RemOpErr = 11,
    /// The transport retry counter was exceeded: the peer did not answer.
    RetryExcErr = 12,
    /// The RNR retry counter was exceeded: the peer had no receive posted.
    RnrRetryExcErr = 13,
    /// Local RDD violation (RD only).
    LocRddViolErr = 14,
    /// Remote invalid RD request.
    RemInvRdReqErr = 15,
    /// Operation aborted.
    RemAbortErr = 16,
    /// Invalid EE context number.
    InvEecnErr = 17,
    /// Invalid EE context state.
    InvEecStateErr = 18,
    /// Fatal error.
    FatalErr = 19,
    /// Response timeout.
    RespTimeoutErr = 20,
    /// General error.
    GeneralErr = 21,
}

impl WcStatus {
    /// The text `ibv_wc_status_str` gives.
    pub fn as_str(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => "local length error",
            WcStatus::LocQpOpErr => "local QP operation error",
            WcStatus::LocEecOpErr => "local EE context operation error",
            WcStatus::LocProtErr => "local protection error",
            WcStatus::WrFlushErr => "Work Request Flushed Error",
            WcStatus::MwBindErr => "memory management operation error",
            WcStatus::BadRespErr => "bad response error",
            WcStatus::LocAccessErr => "local access error",
            WcStatus::RemInvReqErr => "remote invalid request error",
            WcStatus::RemAccessErr => "remote access error",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => "transport retry counter exceeded",
            WcStatus::RnrRetryExcErr => "RNR retry counter exceeded",
            WcStatus::LocRddViolErr => "local RDD violation error",
            WcStatus::RemInvRdReqErr => "remote invalid RD request",
            WcStatus::RemAbortErr => "operation aborted",
            WcStatus::InvEecnErr => "invalid EE context number",
            WcStatus::InvEecStateErr => "invalid EE context state",
            WcStatus::FatalErr => "fatal error",
            WcStatus::RespTimeoutErr => "response timeout error",
            WcStatus::GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.as_str(), *self as u8)
    }
}

/// What a completion reports (`enum ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WcOpcode {
    /// A SEND (any variant) completed on the send queue.
    Send,
    /// An RDMA WRITE (with or without immediate) completed on the send queue.
    RdmaWrite,
    /// An RDMA READ completed.
    RdmaRead,
    /// A compare-and-swap completed.
    CompSwap,
    /// A fetch-and-add completed.
    FetchAdd,
    /// A receive consumed by a SEND.
    Recv,
    /// A receive consumed by an RDMA WRITE with immediate.
    RecvRdmaWithImm,
}

/// A remote address for RDMA and atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RemoteAddr {
    /// The virtual address at the responder.
    pub addr: u64,
    /// The R_Key of the responder's region.
    pub rkey: RKey,
}

/// The operation of a send work request (`enum ibv_wr_opcode` with its arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum WrOpcode {
    /// SEND.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// SEND with invalidate of a remote R_Key (RC only).
    SendWithInv(RKey),
    /// RDMA WRITE.
    RdmaWrite(RemoteAddr),
    /// RDMA WRITE with immediate data (consumes a receive at the responder).
    RdmaWriteWithImm(RemoteAddr, u32),
    /// RDMA READ (RC only).
    RdmaRead(RemoteAddr),
    /// ATOMIC compare-and-swap of 8 bytes (RC only): if `*addr == compare` then `*addr = swap`.
    AtomicCmpAndSwp {
        /// Where.
        remote: RemoteAddr,
        /// The value expected.
        compare: u64,
        /// The value written when it matches.
        swap: u64,
    },
    /// ATOMIC fetch-and-add of 8 bytes (RC only).
    AtomicFetchAndAdd {
        /// Where.
        remote: RemoteAddr,
        /// The value added.
        add: u64,
    },
}

impl WrOpcode {
    /// The completion opcode this WR reports.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::SendWithInv(_) => WcOpcode::Send,
            WrOpcode::RdmaWrite(_) | WrOpcode::RdmaWriteWithImm(..) => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead(_) => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    /// Whether the QP type offers this operation (IBA table 95: UD has SEND only, UC no READ
    /// or atomics).
    pub fn allowed_on(&self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                self,
                WrOpcode::Send
                    | WrOpcode::SendWithImm(_)
                    | WrOpcode::RdmaWrite(_)
                    | WrOpcode::RdmaWriteWithImm(..)
            ),
            QpType::Ud => matches!(self, WrOpcode::Send | WrOpcode::SendWithImm(_)),
        }
    }

    /// Whether this is an RDMA READ or an atomic: needs a responder resource
    /// (max_rd_atomic) and is what a fence waits for.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead(_)
                | WrOpcode::AtomicCmpAndSwp { .. }
                | WrOpcode::AtomicFetchAndAdd { .. }
        )
    }
}

/// A scatter/gather element: `length` bytes at `addr` in the region named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Sge {
    /// Virtual address.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The L_Key of the region holding the buffer.
    pub lkey: u32,
}

/// Send flags (`enum ibv_send_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// Wait for outstanding READs and atomics before starting this WR.
    pub const FENCE: SendFlags = SendFlags(1);
    /// Generate a completion (on a QP that does not signal all WRs).
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// Set the solicited event bit on the last packet.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// The data was copied at post time (see [`SendWr::inline_data`]).
    pub const INLINE: SendFlags = SendFlags(8);

    /// Whether all of `other` is set.
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// The union.
    pub const fn with(self, other: SendFlags) -> SendFlags {
        SendFlags(self.0 | other.0)
    }
}

/// The destination of a UD send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct UdDest {
    /// The address handle.
    pub ah: crate::AhHandle,
    /// The remote QPN.
    pub remote_qpn: Qpn,
    /// The remote Q_Key (bit 31 set: use the QP's own Q_Key, IBA §10.2.4).
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SendWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WrOpcode,
    /// Where the data comes from (or, for READ and atomics, where the result goes).
    pub sg_list: Vec<Sge>,
    /// Flags.
    pub flags: SendFlags,
    /// With `SendFlags::INLINE`: the data itself, copied when the WR was posted.
    pub inline_data: Option<Vec<u8>>,
    /// The destination, for UD.
    pub ud: Option<UdDest>,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecvWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sg_list: Vec<Sge>,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct WorkCompletion {
    /// The WR's identifier.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What completed (valid on success).
    pub opcode: WcOpcode,
    /// A vendor-specific code explaining an error: softib puts the drop/NAK reason here.
    pub vendor_err: u32,
    /// Bytes transferred (receives: bytes written, including the 40-byte GRH area on UD).
    pub byte_len: u32,
    /// Immediate data (IBV_WC_WITH_IMM).
    pub imm_data: Option<u32>,
    /// The R_Key invalidated by a SEND with invalidate (IBV_WC_WITH_INV).
    pub invalidated_rkey: Option<u32>,
    /// The local QP.
    pub qp_num: Qpn,
    /// UD receives: the source QP.
    pub src_qp: Qpn,
    /// UD receives: whether a GRH is present in the first 40 bytes (IBV_WC_GRH).
    pub grh: bool,
    /// Receives: the sender's LID.
    pub slid: Lid,
    /// Receives: the service level.
    pub sl: u8,
    /// Receives: the P_Key index.
    pub pkey_index: u16,
}

/// Asynchronous events (IBA §11.6.3, `enum ibv_event_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum AsyncEvent {
    /// A CQ overflowed (IBV_EVENT_CQ_ERR).
    CqErr(crate::CqHandle),
    /// A QP went to the error state because of a transport error (IBV_EVENT_QP_FATAL).
    QpFatal(Qpn),
    /// A request violated the responder's rules (IBV_EVENT_QP_REQ_ERR).
    QpReqErr(Qpn),
    /// A local access violation (IBV_EVENT_QP_ACCESS_ERR).
    QpAccessErr(Qpn),
    /// The send queue drained after entering SQD (IBV_EVENT_SQ_DRAINED).
    SqDrained(Qpn),
    /// The last WQE of a QP attached to an SRQ was consumed (IBV_EVENT_QP_LAST_WQE_REACHED).
    QpLastWqeReached(Qpn),
    /// An SRQ fell below its limit (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached(crate::SrqHandle),
    /// A port became active (IBV_EVENT_PORT_ACTIVE).
    PortActive(u8),
    /// A port left the active state (IBV_EVENT_PORT_ERR).
    PortErr(u8),
}
