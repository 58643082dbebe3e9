//! `softib-hca` — the runtime around the engine: real links, real time.
//!
//! The engine (`softib-engine`) is a pure state machine; this crate is the only place that
//! reads the clock or blocks. Today it holds the RoCEv2 link ([`roce`]): framing exactly as the
//! Linux rxe driver puts packets on the wire (UDP to port 4791, ICRC over the IP and UDP
//! headers the kernel writes) and a [`driver::Driver`] that moves packets between an engine and
//! a UDP socket. The daemon (`softibd`), shared-memory rings and the control protocol come next.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod device;
pub mod driver;
pub mod host;
pub mod ib;
pub mod pma;
pub mod proto;
pub mod roce;
pub mod shm_memory;
pub mod sysfs;

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
