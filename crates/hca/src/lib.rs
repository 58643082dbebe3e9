//! `softib-hca` — the runtime around the engine: real links, real time.
//!
//! The engine (`softib-engine`) is a pure state machine; this crate is the only place that
//! reads the clock or blocks. Today it holds the RoCEv2 link ([`roce`]): framing exactly as the
//! Linux rxe driver puts packets on the wire (UDP to port 4791, ICRC over the IP and UDP
//! headers the kernel writes) and a [`driver::Driver`] that moves packets between an engine and
//! a UDP socket; and the daemon (`softibd`, [`host`]), which serves the control protocol of
//! `softib-proto`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod device;
pub mod driver;
pub mod host;
pub mod ib;
pub mod pma;
pub mod roce;
pub mod shm_memory;
