//! `softib-hca` — the daemon `softibd`: the devices of a host (or of a whole emulated fabric)
//! with their real links and the real clock, and the control socket applications attach to.
//!
//! The engine (`softib-engine`) and the link adapters (`softib-link`: RoCEv2 framing in
//! `RoceCa`) are pure state machines; this crate drives them. [`device`] holds a host's devices
//! and their sockets: RoCEv2 devices (a `RoceCa` with its UDP sockets, send queue, faults and
//! capture) and HCAs on emulated IB cables ([`ib`]: the engine, the SMA and native framing);
//! [`switchboard`] hands frames and datagrams between the daemon's own devices without the
//! kernel; [`host`] is the event loop, the control requests (the protocol of `softib-proto`) and the
//! switches.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod device;
pub mod host;
pub mod ib;
pub mod issm;
pub mod pma;
pub mod ratelog;
pub mod shm_memory;
pub mod steering;
pub mod switchboard;
pub mod sysfs;
