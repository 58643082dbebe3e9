//! `softib-hca` — the daemon `softibd`: the devices of a host (or of a whole emulated fabric)
//! with their real links and the real clock, and the control socket applications attach to.
//!
//! The engine (`softib-engine`) and the link adapters (`softib-link`: RoCEv2 framing in
//! `RoceCa`) are pure state machines; this crate drives them. [`device`] holds a host's devices
//! and their sockets: RoCEv2 devices (a `RoceCa` with its UDP sockets, send queue, faults and
//! capture) and HCAs on emulated IB cables ([`ib`]: the engine, the SMA and native framing);
//! [`switchboard`] hands frames and datagrams between the daemon's own devices without the
//! kernel; [`host`] is the event loop, the control requests and the switches.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod device;
pub mod host;
pub mod ib;
pub mod pma;
pub mod proto;
pub mod shm_memory;
pub mod switchboard;

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
