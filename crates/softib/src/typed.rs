//! Queue pairs whose state is in their type.
//!
//! A [`Qp<S>`] is a [`QueuePair`] known to be in state `S` ([`state::Reset`], [`state::Init`],
//! [`state::Rtr`], [`state::Rts`], [`state::Error`]). Each transition of the IBA QP state
//! table (C10-29..) that an application drives is a method that consumes the QP and returns
//! it in its new state, so a program that posts a send before RTS, or moves a QP from RESET
//! straight to RTR, does not compile:
//!
//! ```compile_fail
//! # use softib::typed::{state, Qp};
//! # fn f(qp: Qp<state::Init>, mr: &softib::MemoryRegion<'_>) {
//! qp.send(mr, 0, 64, 1); // no `send` before RTS
//! # }
//! ```
//!
//! A transition the HCA refuses gives the QP back, in the state it was in, inside the
//! [`TransitionError`]: nothing is lost and the program may retry with other attributes.
//!
//! The type records what the application did, not what the HCA may do on its own: a QP in
//! [`state::Rts`] moves to the error state when a transfer fails (retries exhausted, a remote
//! access error), exactly as on hardware; its work requests then complete with
//! `WR_FLUSH_ERR`. [`Qp::state`] asks the HCA for the state it is really in, and
//! [`Qp::reset`] starts over from any state.
//!
//! ```no_run
//! use softib::typed::{InitAttr, RtrAttr, RtsAttr};
//! use softib::{AccessFlags, Device, Mtu, QpType};
//! # fn main() -> softib::Result<()> {
//! let dev = Device::open(Some("rxe0"))?;
//! let pd = dev.alloc_pd()?;
//! let cq = dev.create_cq(16)?;
//! let buf = dev.alloc_buffer(4096)?;
//! let mr = pd.register(&buf, AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE))?;
//! let qp = pd.create_qp_typed(QpType::Rc, &cq, &cq, 16)?;
//! let qp = qp.init(&InitAttr::default()).map_err(|e| e.error)?;
//! qp.recv(&mr, 0, 1024, 1)?; // receives may be posted from INIT on
//! let mine = qp.endpoint_with(Some(&mr))?;
//! # let peer = mine.clone();
//! // ... send `mine` to the peer, receive its `peer` endpoint ...
//! let qp = qp.ready_to_receive(&RtrAttr::connect(&peer, Mtu::Mtu1024)).map_err(|e| e.error)?;
//! let qp = qp.ready_to_send(&RtsAttr::default()).map_err(|e| e.error)?;
//! qp.write(&mr, 0, 64, peer.addr, peer.rkey, 2)?;
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::marker::PhantomData;

use crate::objects::{AddressHandle, Endpoint, MemoryRegion, QueuePair};
use crate::{AccessFlags, Error, Mtu, QpState, QpType, Qpn, RecvWr, Result, SendWr};

/// The states a [`Qp`] can be known to be in (zero-sized markers).
pub mod state {
    /// A state marker.
    pub trait QpStateKind: sealed::Sealed + std::fmt::Debug {
        /// The IBA state it stands for.
        const STATE: crate::QpState;
    }
    mod sealed {
        pub trait Sealed {}
    }
    macro_rules! states {
        ($($(#[$doc:meta])* $name:ident => $state:ident),* $(,)?) => {$(
            $(#[$doc])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub struct $name;
            impl sealed::Sealed for $name {}
            impl QpStateKind for $name {
                const STATE: crate::QpState = crate::QpState::$state;
            }
        )*};
    }
    states! {
        /// RESET: just created (or reset); nothing may be posted.
        Reset => Reset,
        /// INIT: receives may be posted; nothing is sent or received yet.
        Init => Init,
        /// RTR (ready to receive): incoming packets are taken; sends may not be posted.
        Rtr => Rtr,
        /// RTS (ready to send): everything may be posted.
        Rts => Rts,
        /// ERROR: every outstanding and newly posted work request completes flushed.
        Error => Err,
    }
}

use state::QpStateKind;

/// A queue pair in state `S`: see the [module documentation](self).
#[derive(Debug)]
pub struct Qp<S: QpStateKind> {
    // Boxed: a transition moves the QP (and a refused one carries it in its error).
    qp: Box<QueuePair>,
    _state: PhantomData<S>,
}

/// A transition the HCA refused: the QP, still in state `S`, and why.
pub struct TransitionError<S: QpStateKind> {
    /// The QP, unchanged.
    pub qp: Qp<S>,
    /// What the HCA said.
    pub error: Error,
}

impl<S: QpStateKind> fmt::Debug for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError")
            .field("qpn", &self.qp.qpn())
            .field("from", &S::STATE)
            .field("error", &self.error)
            .finish()
    }
}

impl<S: QpStateKind> fmt::Display for TransitionError<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "QP {:#x} stays in {:?}: {}",
            self.qp.qpn().value(),
            S::STATE,
            self.error
        )
    }
}

impl<S: QpStateKind> std::error::Error for TransitionError<S> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<S: QpStateKind> From<TransitionError<S>> for Error {
    fn from(e: TransitionError<S>) -> Error {
        e.error
    }
}

/// RESET → INIT: the port, the partition and what the peer may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    /// The HCA port (1-based).
    pub port: u8,
    /// The P_Key table index.
    pub pkey_index: u16,
    /// What remote peers may do through this QP (RC/UC; ignored on UD).
    pub access: AccessFlags,
    /// The Q_Key (UD; ignored on RC/UC).
    pub qkey: u32,
}

impl Default for InitAttr {
    /// Port 1, the default partition, remote write/read/atomic allowed, softib's UD Q_Key.
    fn default() -> Self {
        InitAttr {
            port: 1,
            pkey_index: 0,
            access: AccessFlags::REMOTE_WRITE
                .with(AccessFlags::REMOTE_READ)
                .with(AccessFlags::REMOTE_ATOMIC),
            qkey: crate::UD_QKEY,
        }
    }
}

/// INIT → RTR: the peer and the path to it (RC/UC), nothing (UD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtrAttr {
    /// The peer (required on RC/UC; UD QPs name their peers per send).
    pub peer: Option<Endpoint>,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// RDMA READs and atomics the peer may have outstanding at this responder (RC).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer code this responder sends (RC).
    pub min_rnr_timer: u8,
}

impl RtrAttr {
    /// Towards `peer` (RC/UC) with path MTU `mtu`; 16 outstanding reads, RNR timer code 12
    /// (0.64 ms), perftest's and the pingpongs' values.
    pub fn connect(peer: &Endpoint, mtu: Mtu) -> RtrAttr {
        RtrAttr {
            peer: Some(peer.clone()),
            path_mtu: mtu,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
        }
    }

    /// For a UD QP.
    pub fn datagram() -> RtrAttr {
        RtrAttr {
            peer: None,
            path_mtu: Mtu::Mtu1024,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
        }
    }
}

/// RTR → RTS: the requester's retry behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// The first PSN sent; `None`: the one this QP's [`Endpoint`] announced.
    pub sq_psn: Option<u32>,
    /// The local ACK timeout code (4.096 µs × 2^timeout; RC).
    pub timeout: u8,
    /// Retries after a timeout (RC).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK (7: forever; RC).
    pub rnr_retry: u8,
    /// RDMA READs and atomics outstanding as requester (RC).
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    /// Timeout code 14 (67 ms), 7 retries, RNR retries forever, 16 outstanding reads.
    fn default() -> Self {
        RtsAttr {
            sq_psn: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

impl crate::ProtectionDomain {
    /// `ibv_create_qp` with `depth` work requests in each queue and one SGE each, in RESET,
    /// its state in its type ([`Qp`]).
    pub fn create_qp_typed(
        &self,
        qp_type: QpType,
        send_cq: &crate::CompletionQueue,
        recv_cq: &crate::CompletionQueue,
        depth: u32,
    ) -> Result<Qp<state::Reset>> {
        let qp = self.create_qp_reset(qp_type, send_cq, recv_cq, None, depth)?;
        Ok(Qp::new(Box::new(qp)))
    }
}

impl<S: QpStateKind> Qp<S> {
    fn new(qp: Box<QueuePair>) -> Qp<S> {
        Qp {
            qp,
            _state: PhantomData,
        }
    }

    fn step<T: QpStateKind>(
        self,
        modify: impl FnOnce(&QueuePair) -> Result<()>,
    ) -> std::result::Result<Qp<T>, TransitionError<S>> {
        match modify(&self.qp) {
            Ok(()) => Ok(Qp::new(self.qp)),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }

    /// The QP number.
    pub fn qpn(&self) -> Qpn {
        self.qp.qpn()
    }

    /// The state the HCA says the QP is in: `S`, or Error (or SQE) after a failed transfer.
    pub fn state(&self) -> Result<QpState> {
        self.qp.query_state()
    }

    /// What a peer needs to reach this QP (see [`QueuePair::endpoint`]).
    pub fn endpoint(&self) -> Result<Endpoint> {
        self.qp.endpoint()
    }

    /// [`Qp::endpoint`] offering `mr` to the peer.
    pub fn endpoint_with(&self, mr: Option<&MemoryRegion<'_>>) -> Result<Endpoint> {
        self.qp.endpoint_with(mr)
    }

    /// Any state → RESET: outstanding work requests are dropped without completions.
    pub fn reset(self) -> std::result::Result<Qp<state::Reset>, TransitionError<S>> {
        self.step(|qp| qp.modify_state(QpState::Reset))
    }

    /// Any state → ERROR: outstanding and later work requests complete with `WR_FLUSH_ERR`
    /// (how an application drains a QP before destroying it).
    pub fn into_error(self) -> std::result::Result<Qp<state::Error>, TransitionError<S>> {
        self.step(|qp| qp.modify_state(QpState::Err))
    }

    /// The untyped QP (all verbs, no compile-time state).
    pub fn into_untyped(self) -> QueuePair {
        *self.qp
    }
}

impl Qp<state::Reset> {
    /// RESET → INIT.
    pub fn init(
        self,
        attr: &InitAttr,
    ) -> std::result::Result<Qp<state::Init>, TransitionError<state::Reset>> {
        self.step(|qp| qp.modify_to_init(attr))
    }
}

/// Receives may be posted from INIT on.
macro_rules! receive_verbs {
    ($($s:ty),*) => {$(
        impl Qp<$s> {
            /// Posts receives.
            pub fn post_recv(&self, wrs: Vec<RecvWr>) -> Result<()> {
                self.qp.post_recv(wrs)
            }

            /// Posts one receive of `len` bytes at `offset` of `mr`.
            pub fn recv(
                &self,
                mr: &MemoryRegion<'_>,
                offset: usize,
                len: usize,
                wr_id: u64,
            ) -> Result<()> {
                self.qp.recv(mr, offset, len, wr_id)
            }
        }
    )*};
}
receive_verbs!(state::Init, state::Rtr, state::Rts);

impl Qp<state::Init> {
    /// INIT → RTR.
    pub fn ready_to_receive(
        self,
        attr: &RtrAttr,
    ) -> std::result::Result<Qp<state::Rtr>, TransitionError<state::Init>> {
        self.step(|qp| qp.modify_to_rtr(attr))
    }
}

impl Qp<state::Rtr> {
    /// RTR → RTS.
    pub fn ready_to_send(
        self,
        attr: &RtsAttr,
    ) -> std::result::Result<Qp<state::Rts>, TransitionError<state::Rtr>> {
        self.step(|qp| qp.modify_to_rts(attr))
    }
}

impl Qp<state::Rts> {
    /// Posts work requests (all, or the error of the first that failed).
    pub fn post_send(&self, wrs: Vec<SendWr>) -> Result<()> {
        self.qp.post_send(wrs)
    }

    /// Sends `len` bytes at `offset` of `mr` (signaled; RC/UC).
    pub fn send(&self, mr: &MemoryRegion<'_>, offset: usize, len: usize, wr_id: u64) -> Result<()> {
        self.qp.send(mr, offset, len, None, wr_id)
    }

    /// UD: sends `len` bytes at `offset` of `mr` to `peer` (signaled).
    pub fn send_to_endpoint(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        peer: &Endpoint,
        wr_id: u64,
    ) -> Result<()> {
        self.qp.send(mr, offset, len, Some(peer), wr_id)
    }

    /// UD: an address handle for sends to `peer` ([`Qp::send_to`]).
    pub fn address_handle(&self, peer: &Endpoint) -> Result<AddressHandle> {
        self.qp.address_handle(peer)
    }

    /// UD: sends through `ah` to QP `remote_qpn` (see [`QueuePair::send_to`]).
    pub fn send_to(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        ah: &AddressHandle,
        remote_qpn: Qpn,
        wr_id: u64,
    ) -> Result<()> {
        self.qp.send_to(mr, offset, len, ah, remote_qpn, wr_id)
    }

    /// RDMA WRITE (see [`QueuePair::write`]).
    pub fn write(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        self.qp.write(mr, offset, len, addr, rkey, wr_id)
    }

    /// RDMA READ (see [`QueuePair::read`]).
    pub fn read(
        &self,
        mr: &MemoryRegion<'_>,
        offset: usize,
        len: usize,
        addr: u64,
        rkey: u32,
        wr_id: u64,
    ) -> Result<()> {
        self.qp.read(mr, offset, len, addr, rkey, wr_id)
    }
}
