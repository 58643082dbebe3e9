//! What the daemon tests of this crate share: two devices of one embedded daemon, the access
//! every test region gets, and an RC pair between them.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, Device, Endpoint, MemoryRegion, Mtu, QueuePair};

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
    let (a, b) = open_pair(hca.dir());
    (hca, a, b)
}

/// Opens `rxe0` and `rxe1` of the daemon whose runtime directory is `dir`.
pub fn open_pair(dir: &Path) -> (Device, Device) {
    (
        Device::open_at(dir, Some("rxe0")).unwrap(),
        Device::open_at(dir, Some("rxe1")).unwrap(),
    )
}

/// Connects two RC QPs to each other (path MTU 1024).
pub fn connect(a: &QueuePair, b: &QueuePair) {
    a.connect(&b.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
    b.connect(&a.endpoint().unwrap(), Mtu::Mtu1024).unwrap();
}

/// Connects two RC QPs to each other (path MTU 1024), each endpoint naming its QP's region;
/// returns the endpoints (A's, B's).
pub fn connect_regions(
    a: &QueuePair,
    mr_a: &MemoryRegion<'_>,
    b: &QueuePair,
    mr_b: &MemoryRegion<'_>,
) -> (Endpoint, Endpoint) {
    let (ea, eb) = (
        a.endpoint_with(Some(mr_a)).unwrap(),
        b.endpoint_with(Some(mr_b)).unwrap(),
    );
    a.connect(&eb, Mtu::Mtu1024).unwrap();
    b.connect(&ea, Mtu::Mtu1024).unwrap();
    (ea, eb)
}
