//! `softib-ipoib` — IP over InfiniBand (RFC 4391/4392, datagram mode) on a softib IB port, as a
//! Linux TUN interface.
//!
//! Like the kernel's `ib_ipoib`, IPoIB here is an upper-layer protocol on top of verbs: one
//! process per interface owns a TUN device and a UD QP on the port ([`Interface`]). It joins
//! the partition's IPv4 broadcast group through the SA (MCMemberRecord Set), attaches the QP to
//! it, resolves neighbours with IPoIB ARP (20-byte hardware addresses: flags and QPN, then the
//! port GID) and their paths with SA PathRecord queries, and carries IPv4 packets behind the
//! 4-byte IPoIB encapsulation header. The TUN device is layer 3 (the kernel does no ARP on it),
//! so the interface answers and asks ARP itself.
//!
//! By concept: [`encap`] (the encapsulation header, hardware addresses, ARP), [`sa`] (the
//! group join and path lookups, through `softib`'s MAD agent), [`interface`] (the TUN/UD
//! forwarding loop), [`state`] (what `softib ipoib show` reads, and the process behind it).
//!
//! What is not here: connected mode (RFC 4755; datagram mode only), IPv6 (dropped and counted),
//! IP multicast groups other than the broadcast group (IPv4 multicast is sent to the broadcast
//! group), and routing through a gateway (every destination is treated as on-link).
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod encap;
pub mod interface;
pub mod sa;
pub mod state;

pub use interface::{Interface, Settings};
pub use state::{Counters, IfState};

/// What stops an interface.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A verb failed (or the daemon went away).
    #[error(transparent)]
    Verbs(#[from] softib::Error),
    /// A query to the SA failed.
    #[error(transparent)]
    Mad(#[from] softib::mad::MadError),
    /// The SA's answer is not the record asked for.
    #[error("the SA answered a bad {what}: {detail}")]
    Answer {
        /// The record.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// The TUN device or the interface configuration failed.
    #[error("{what}: {error}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The interface cannot run as asked (no such device or port, a RoCE port, a partition
    /// the port does not have).
    #[error("{0}")]
    Setup(String),
}
