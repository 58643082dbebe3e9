//! `softib-proto` — the control protocol between a process and `softibd`, and everything both
//! sides must agree on, so that an application never links the daemon.
//!
//! - **Where**: a host's daemon listens on [`SOCKET_NAME`] in its runtime directory
//!   ([`runtime_dir`]), a unix stream socket.
//! - **A session**: like the kernel's uverbs commands, each [`Request`] is answered by exactly
//!   one [`Response`], in order. The first request must be [`Request::Hello`] with
//!   [`VERSION`]; a daemon that speaks another version answers with an error naming both.
//! - **Framing** (`frame`): a 4-byte little-endian length, then the message encoded with
//!   postcard; no frame is longer than [`MAX_FRAME`]. Descriptors (a buffer's memfd, a ring, an
//!   eventfd) travel as SCM_RIGHTS with the request that names them.
//! - **Rings** (`ring`): the data path mostly bypasses the socket. Work requests go into a
//!   submission ring ([`Submit`] entries), completions come back through a ring per CQ, both
//!   SPSC rings in shared memory (`softib_net::ring`); the module says what each slot holds and
//!   which side may sleep when.
//! - **Values** (`types`): devices, ports, MADs, links and resources as the tools show them;
//!   work requests, completions and QP attributes are the engine's own types
//!   (`softib_engine::verbs`), which is why this crate depends on `softib-engine`.
//!
//! - **Liveness** (`liveness`): the daemon's heartbeat file, which tells a waiting client a
//!   busy daemon from one that stopped answering.
//!
//! This crate holds no policy of either side: the daemon's checks are in `softib-hca`, the
//! library's in `softib`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod frame;
pub mod liveness;
mod message;
mod ring;
mod types;

pub use frame::{
    decode, encode, recv_blocking, send, try_send, FrameReader, MAX_BUFFERED, MAX_FRAME,
    MAX_PENDING_FDS,
};
pub use message::{Event, ProcessObject, Request, Response};
pub use ring::{
    decode_completion, encode_completion, Submit, SubmitRef, COMPLETION_ENTRY_MAX,
    CQ_RING_SLOTS_MAX, CQ_RING_SLOT_LEN, SUBMIT_ENTRY_MAX, SUBMIT_SLOTS_MAX, SUBMIT_SLOT_LEN,
};
pub use types::{
    ClientResources, DeviceInfo, ErrorKind, LinkConfig, Mad, MadQp, PortInfo, VerbsAttr,
    VerbsPortAttr,
};

/// The protocol version; bumped on any incompatible change.
pub const VERSION: u32 = 6;

/// The record bytes of each ring between two process engines ([`Event::Ring`]). Large
/// payloads travel by reference (the records hold headers), so this holds perftest's default
/// window (128 WRs) of payloads below the reference size, and stays small for the cache.
pub const PEER_RING_BYTES: usize = 4 << 20;

/// The sender's address before each handed-on datagram ([`Request::SteerJoin`]): 16 bytes
/// of IPv6 (IPv4-mapped for IPv4) and the UDP port, big-endian.
pub const HAND_ON_ADDR_LEN: usize = 18;

/// A sender's address as a hand-on record carries it.
pub fn hand_on_addr(from: std::net::SocketAddr) -> [u8; HAND_ON_ADDR_LEN] {
    let ip = match from.ip() {
        std::net::IpAddr::V4(a) => a.to_ipv6_mapped(),
        std::net::IpAddr::V6(a) => a,
    };
    let mut out = [0u8; HAND_ON_ADDR_LEN];
    out[..16].copy_from_slice(&ip.octets());
    out[16..].copy_from_slice(&from.port().to_be_bytes());
    out
}

/// The sender's address of a hand-on record, and the datagram after it; `None` when the
/// record is shorter than an address.
pub fn parse_hand_on(record: &[u8]) -> Option<(std::net::SocketAddr, &[u8])> {
    let (addr, data) = record.split_at_checked(HAND_ON_ADDR_LEN)?;
    let mut ip = [0u8; 16];
    ip.copy_from_slice(&addr[..16]);
    let ip = std::net::Ipv6Addr::from(ip);
    let ip = match ip.to_ipv4_mapped() {
        Some(v4) => std::net::IpAddr::V4(v4),
        None => std::net::IpAddr::V6(ip),
    };
    let port = u16::from_be_bytes([addr[16], addr[17]]);
    Some((std::net::SocketAddr::new(ip, port), data))
}

/// The record bytes of a process engine's inbound ring ([`Request::OpenEvents`]): datagrams
/// for its QPNs that reached the daemon while the steering group changed, each a hand-on
/// record (the sender's address, then the datagram; the tag its index in its GRO run).
pub const INBOUND_RING_BYTES: usize = 1 << 18;

/// The record bytes of a process engine's capture ring ([`Event::Capture`]): a turn's
/// worth of datagrams at full size, drained by the daemon's every turn.
pub const CAPTURE_RING_BYTES: usize = 4 << 20;

/// What comes before the packet in a capture ring's record: when the datagram was seen
/// (microseconds since the Unix epoch, little-endian). The packet is the IP packet as the
/// wire carried it.
pub fn capture_prefix(at: std::time::SystemTime) -> [u8; 8] {
    let micros = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64);
    micros.to_le_bytes()
}

/// When a capture record's packet was seen, and the packet; `None` when the record is
/// shorter than its time.
pub fn parse_capture_record(record: &[u8]) -> Option<(std::time::SystemTime, &[u8])> {
    let (at, packet) = record.split_at_checked(8)?;
    let micros = u64::from_le_bytes(at.try_into().ok()?);
    let at = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_micros(micros))?;
    Some((at, packet))
}

/// The daemon's control socket, in its runtime directory.
pub const SOCKET_NAME: &str = "softibd.sock";

/// The runtime directory of this host's daemon: `$SOFTIB_RUNTIME_DIR`, else `/run/softib` for
/// root, else `$XDG_RUNTIME_DIR/softib`, else `/tmp/softib-<uid>`.
pub fn runtime_dir() -> std::path::PathBuf {
    if let Some(d) = std::env::var_os("SOFTIB_RUNTIME_DIR") {
        return d.into();
    }
    let uid = rustix::process::getuid();
    if uid.is_root() {
        return "/run/softib".into();
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => std::path::PathBuf::from(d).join("softib"),
        None => format!("/tmp/softib-{}", uid.as_raw()).into(),
    }
}
