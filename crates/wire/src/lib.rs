//! `softib-wire` — the InfiniBand and RoCEv2 wire formats.
//!
//! This is the lowest layer of softib: packet headers (LRH, GRH, BTH and every extended transport
//! header), management datagrams (SMPs, SA, PMA and their attributes) and the invariant and
//! variant CRCs. It knows nothing of queue pairs, time or I/O, never allocates and never logs.
//!
//! # Two levels, as in smoltcp
//!
//! Each header lives in its own module and offers
//! * a *view*, `Packet<T: AsRef<[u8]>>`, with one accessor per field (`psn()`, `set_psn()`), and
//! * a *representation*, `Repr`, a plain struct holding only the meaningful fields, with
//!   `parse(&Packet)`, `buffer_len()` and `emit(&mut Packet)`.
//!
//! The whole-packet types in [`packet`] combine them: a native IB packet or a RoCEv2 UDP payload
//! parses into one structure whose optional headers are `Option`s, and emits back into the same
//! bytes.
//!
//! # The panic-freedom contract
//!
//! * `Packet::new_unchecked` wraps any buffer; `check_len` verifies that the buffer is long
//!   enough for every fixed field; `new_checked` = `new_unchecked` + `check_len`.
//! * After `check_len` has succeeded, **no accessor panics**. Untrusted input must therefore go
//!   through `new_checked` (or a `Repr::parse`, which checks for itself).
//! * `Repr::parse` never panics, whatever the bytes: it returns an [`Error`] naming what is wrong.
//! * `Repr::emit` never panics when the buffer is at least `buffer_len()` bytes long. Emission
//!   does not check lengths (a reused buffer may hold anything); callers size the buffer.
//! * Field enums keep an `Unknown(raw)` variant, so an unknown opcode, syndrome or attribute never
//!   makes parsing fail; it is reported as such.
//!
//! These promises are enforced by property tests and by the fuzz targets in `fuzz/`.
//!
//! Spec references are to the InfiniBand Architecture Specification, volume 1 ("IBA"), and to
//! its Annex A16/A17 (RoCE/RoCEv2).
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(test)]
extern crate std;

#[macro_use]
mod macros;
mod bytes;

pub mod aeth;
pub mod atomic_ack;
pub mod atomic_eth;
pub mod bth;
pub mod cnp;
pub mod crc;
pub mod deth;
pub mod grh;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod lrh;
pub mod mad;
pub mod mtu;
pub mod opcode;
pub mod packet;
pub mod pretty_print;
pub mod psn;
pub mod reth;
pub mod types;

pub use aeth::{Packet as AethPacket, Repr as AethRepr, Syndrome};
pub use atomic_ack::{Packet as AtomicAckEthPacket, Repr as AtomicAckEthRepr};
pub use atomic_eth::{Packet as AtomicEthPacket, Repr as AtomicEthRepr};
pub use bth::{Packet as BthPacket, Repr as BthRepr};
pub use cnp::{Packet as CnpPacket, Repr as CnpRepr};
pub use deth::{Packet as DethPacket, Repr as DethRepr};
pub use grh::{Packet as GrhPacket, Repr as GrhRepr};
pub use ieth::{Packet as IethPacket, Repr as IethRepr};
pub use immdt::{Packet as ImmDtPacket, Repr as ImmDtRepr};
pub use lrh::{Lnh, Packet as LrhPacket, Repr as LrhRepr};
pub use mtu::Mtu;
pub use opcode::{HeaderSet, Opcode, OpcodeInfo, Operation, Position, Transport};
pub use psn::Psn;
pub use reth::{Packet as RethPacket, Repr as RethRepr};
pub use types::{Gid, Guid, Lid, PKey, QKey, Qpn, RKey};

use core::fmt;

/// Why bytes could not be understood. Small and `Copy`, so drop counters can be keyed by it;
/// the `&'static str` names the header or field concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer ends before the named header or field does.
    Truncated(&'static str),
    /// A field holds a value the format does not allow (the text says which and why).
    Malformed(&'static str),
    /// The named CRC (ICRC or VCRC) does not match the bytes.
    BadCrc(&'static str),
    /// Well-formed, but a kind of packet softib does not handle (the text says which).
    Unsupported(&'static str),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated(what) => write!(f, "truncated: {what}"),
            Error::Malformed(what) => write!(f, "malformed: {what}"),
            Error::BadCrc(what) => write!(f, "bad {what}"),
            Error::Unsupported(what) => write!(f, "unsupported: {what}"),
        }
    }
}

impl core::error::Error for Error {}

/// The result type of every parser in this crate.
pub type Result<T> = core::result::Result<T, Error>;
