//! What the daemon tests of this crate share: two devices of one embedded daemon, the access
//! every test region gets, and an RC pair between them.
#![allow(dead_code, clippy::unwrap_used)]

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, Device, Mtu, QueuePair};

/// LOCAL_WRITE, REMOTE_WRITE and REMOTE_READ.
pub fn all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ)
}

/// An embedded daemon with `rxe0` and `rxe1` on loopback, and a device handle on each.
pub fn loopback_pair() -> (EmbeddedDaemon, Device, Device) {
    let hca = EmbeddedDaemon::start().unwrap();
    hca.add_loopback_pair().unwrap();
    let a = Device::open_at(hca.dir(), Some("rxe0")).unwrap();
    let b = Device::open_at(hca.dir(), Some("rxe1")).unwrap();
    (hca, a, b)
}

/// Connects two RC QPs to each other (path MTU 1024).
pub fn connect(a: &QueuePair, b: &QueuePair) {
    a.connect(&b.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
    b.connect(&a.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
}
