//! What the daemon tests of this crate share: two devices of one embedded daemon, the access
//! every test region gets, and an RC pair between them.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::Path;

use softib::embedded::EmbeddedDaemon;
use softib::{
    AccessFlags, Buffer, CompletionQueue, Device, Endpoint, MemoryRegion, Mtu, QpType, QueuePair,
};

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

/// [`open_pair`] on the daemon's data path, for a test of what only that path has (the
/// submission and completion rings between a client and the daemon).
pub fn open_pair_in_daemon(dir: &Path) -> (Device, Device) {
    let on = |name| Device::open_on(dir, Some(name), softib::DataPath::Daemon).unwrap();
    (on("rxe0"), on("rxe1"))
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

/// Two contexts of one embedded daemon (on `rxe0` and `rxe1`), each with a PD, a CQ, an
/// 8 KiB buffer registered for everything and a QP of one type, the QPs connected to each
/// other.
#[allow(dead_code)]
pub struct Pair<'a> {
    pub a: &'a Device,
    pub b: &'a Device,
    pub buf_a: &'a Buffer,
    pub buf_b: &'a Buffer,
    pub cq_a: &'a CompletionQueue,
    pub cq_b: &'a CompletionQueue,
    pub mr_a: &'a MemoryRegion<'a>,
    pub mr_b: &'a MemoryRegion<'a>,
    pub qp_a: &'a QueuePair,
    pub qp_b: &'a QueuePair,
}

/// Runs `test` on a [`Pair`] of `qp_type` QPs.
#[allow(dead_code)]
pub fn with_pair(qp_type: QpType, test: impl FnOnce(&Pair<'_>)) {
    let (_hca, a, b) = loopback_pair();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(8192).unwrap(), b.alloc_buffer(8192).unwrap());
    let mr_a = pd_a.register(&buf_a, all()).unwrap();
    let mr_b = pd_b.register(&buf_b, all()).unwrap();
    let qp_a = pd_a.create_qp(qp_type, &cq_a, &cq_a, 16).unwrap();
    let qp_b = pd_b.create_qp(qp_type, &cq_b, &cq_b, 16).unwrap();
    connect(&qp_a, &qp_b);
    test(&Pair {
        a: &a,
        b: &b,
        buf_a: &buf_a,
        buf_b: &buf_b,
        cq_a: &cq_a,
        cq_b: &cq_b,
        mr_a: &mr_a,
        mr_b: &mr_b,
        qp_a: &qp_a,
        qp_b: &qp_b,
    });
}
