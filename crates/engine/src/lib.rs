//! `softib-engine` — the soft HCA's InfiniBand transport as a pure, sans-IO state machine.
//!
//! This crate is the HCA: protection domains, memory regions, completion queues, queue pairs
//! (RC, UC, UD) and shared receive queues, the QP state machine, and the transport roles the
//! Linux rxe driver names — the *requester* turns send WQEs into packets, the *responder*
//! executes incoming requests and answers them, the *completer* matches acknowledgements and
//! responses to WQEs and retires them.
//!
//! # What it must never do
//!
//! No sockets, threads, clocks, OS randomness or `unsafe`. Time comes in with every call that
//! needs it (`now`), randomness from a seed in the configuration, memory through the
//! [`memory::Memory`] trait. A run is a pure function of (configuration, seed, inputs), which is
//! what lets the simulator replay any failure from its seed.
//!
//! # How it is driven (quinn-proto's shape)
//!
//! * commands: `alloc_pd`, `reg_mr`, `create_cq`, `create_qp`, `modify_qp`, `post_send`,
//!   `post_recv`, `poll_cq`, ...;
//! * inputs: `handle_packet(now, port, meta, bytes)` for a received transport packet (its ICRC
//!   already checked by the link) and `handle_timeout(now)`;
//! * outputs: `poll_transmit(now, buf)` until it returns `None`, then `poll_timeout()` for the
//!   next deadline, and `poll_event()` for asynchronous events.
//!
//! After any command or input, call `poll_transmit` until it returns `None`, then
//! `poll_timeout`. `handle_timeout` may be called early or spuriously; it does only what is due.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod rng;
pub mod time;
pub mod verbs;

use core::fmt;

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
        pub struct $name(pub u32);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

handle!(
    /// A protection domain.
    PdHandle
);
handle!(
    /// A completion queue.
    CqHandle
);
handle!(
    /// A shared receive queue.
    SrqHandle
);
handle!(
    /// An address handle.
    AhHandle
);

pub mod config;
pub mod counters;
pub mod cq;
pub mod hash;
pub mod hca;
mod invariant;
pub mod memory;
#[cfg(feature = "planted-bugs")]
pub mod planted;
pub mod qp;
mod res;

pub use config::{DeviceAttr, HcaConfig, PortAttr, TransportConfig};
pub use hca::{check_send_wr, Hca, VerbsError, QPN_BLOCK};
pub use invariant::InvariantViolation;
pub use memory::{Memory, RegionId, VecMemory};
pub use qp::{AddressVector, AttrMask, GlobalRoute, QpAttr, QpCap, QpInitAttr};
pub use res::{Ah, Srq};
pub use time::{Duration, Instant};

/// What a link needs to know to send a packet the engine built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Transmit {
    /// The local port to send from.
    pub port: u8,
    /// Where the packet goes (LRH/GRH or IP fields come from here).
    pub av: AddressVector,
    /// The sending QP (RoCEv2 derives the UDP source port from it).
    pub src_qpn: softib_wire::Qpn,
    /// The QP the packet is for (the BTH's DestQP; RoCEv2 derives the UDP source port of a
    /// connected QP from it), so that no link parses the bytes for it.
    pub dest_qpn: softib_wire::Qpn,
    /// The packet's BTH opcode (its transport and operation, see
    /// [`softib_wire::opcode::Opcode::info`]).
    pub opcode: softib_wire::Opcode,
    /// Bytes written at the start of the buffer: BTH through pad, without the ICRC — or,
    /// when `payload` is set, only the headers (BTH through the last extension header).
    pub len: usize,
    /// The payload, when it was left in registered memory instead of copied into the buffer
    /// (only for QPs the link marked in-process, see [`Hca::set_in_process`]). The BTH's pad
    /// count is already set for it. A link that carries the packet itself first appends it
    /// with [`Hca::materialize`]; one that hands it to an engine of the same process passes
    /// it to [`Hca::handle_packet_parts`] as it lies, which makes the transfer one copy.
    pub payload: Option<PayloadRef>,
    /// Whether the packet goes in-process: its QP is marked so — except that a READ request
    /// goes in-process exactly when its READ was sized for large response segments (when it
    /// started), and READ responses in such segments go in-process whether or not their QP
    /// is marked yet. A link that hands the packet to an engine of this process passes this
    /// on as [`RxMeta::in_process`]. The link decides where a QP's packets go once, when it
    /// sets the QP's path ([`Hca::set_in_process`]); the engine never learns it packet by
    /// packet.
    pub in_process: bool,
}

/// A packet's payload left where it lies: `len` bytes at `addr` of the embedder's `region`,
/// already checked against the memory region's key, bounds and access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadRef {
    /// The embedder's region.
    pub region: RegionId,
    /// The application's address of the first byte.
    pub addr: u64,
    /// The payload's length (without pad).
    pub len: u32,
}

/// The largest payload of one packet between in-process QPs: RC SENDs and WRITEs between
/// QPs whose peers are in the same process go in segments of this size instead of the path
/// MTU (a 64 KiB message is two packets, not sixteen). It is 15 × 4096 so that a packet,
/// with its headers, still fits one IPv4 datagram when a capture or a fault needs it whole.
pub const IN_PROCESS_SEGMENT: u32 = 15 * 4096;

/// The buffer `poll_transmit` needs when a QP is marked in-process: the headers, one
/// [`IN_PROCESS_SEGMENT`] and its pad.
pub const IN_PROCESS_MAX_LEN: usize = 12 + 28 + 16 + 4 + IN_PROCESS_SEGMENT as usize + 3;

/// What the link knows about a received packet beyond its transport bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RxMeta {
    /// The sender's LID (native IB; 0 on RoCE).
    pub slid: softib_wire::Lid,
    /// The service level.
    pub sl: u8,
    /// The 40 bytes a UD receive buffer starts with: the GRH, or on RoCEv2 over IPv4 twenty
    /// zero bytes and the IPv4 header. `None` when the packet had no GRH.
    pub grh: Option<[u8; 40]>,
    /// The packet came from an engine of this process, not from a wire, and its sender said
    /// so ([`Transmit::in_process`]): its RC SEND and WRITE packets may carry up to
    /// [`IN_PROCESS_SEGMENT`] bytes instead of one path MTU, and a READ request asks for its
    /// responses in segments of that size.
    pub in_process: bool,
}

#[cfg(test)]
mod tests;
