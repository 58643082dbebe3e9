//! `softib-link` — the sans-IO link adapters between an engine and the frames a link carries.
//!
//! * [`roce`]: [`RoceCa`], one device's engine (`softib_engine::Hca`) on a RoCEv2 link — the
//!   framing and ICRC exactly as the Linux rxe driver puts packets on the wire, GSO runs sealed
//!   for the IPv4 Identification each segment gets, rxe's per-QP UDP source ports, receive-side
//!   checks counted by reason, and which QPs talk to a peer of the same process, decided once
//!   per QP when it gets its path. The daemon drives it over its sockets, a process's provider
//!   over its own, the simulator over its seeded faulty network.
//! * [`ib`]: native InfiniBand framing (LRH, GRH, ICRC, VCRC) of the engine's packets and the
//!   first look at a received frame (its CRCs, and whether it is for the SMI, QP1's agents or
//!   the engine); the subnet management agent that composes with it lives with the daemon
//!   (`softib-hca`'s `IbCa`), because the link must not depend on `softib-fabric`.
//! * [`driver`]: the thinnest real driver of a `RoceCa`, one UDP socket and the wall clock, for
//!   tests and as the reference for embedders.
//!
//! # What it must never do
//!
//! `roce` and `ib` read no clock, open no socket, block on nothing and spawn no thread: time
//! comes in as `now`, datagrams come in as bytes with their addresses and go out as values the
//! embedder acts on. Only [`driver`] does I/O. Nothing here knows the subnet manager or the SMA
//! (`softib-fabric`), nor the control protocol.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

// The tests' shared helpers (tests/common, included by the unit tests too) name this crate as
// an outside test does.
#[cfg(test)]
extern crate self as softib_link;

pub mod driver;
pub mod ib;
pub mod roce;

pub use roce::framing;
pub use roce::{Incoming, RoceCa, RoceConfig, RoceDrop, RoceDrops, RoceTransmit, Senders, SrcKey};
