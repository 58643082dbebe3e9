//! Two daemons with an RC connection between them, and a checked WRITE over it: what the
//! flood and process-path tests share.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use softib::{AccessFlags, Device, MemoryRegion, Mtu, ProtectionDomain, QpType, WcStatus};

use super::{roce_daemon, Kill};

/// What a test gets from [`rc_pair`].
pub struct Pair<'a> {
    pub daemons: (&'a Kill, &'a Kill),
    pub dirs: (&'a Path, &'a Path),
    /// The target device's address and its RC QP's number (the flood's aim).
    pub target: SocketAddr,
    pub target_qpn: u32,
    pub pd_a: &'a ProtectionDomain,
    pub buf_a: &'a softib::Buffer,
    /// Posts one checked WRITE (round `n`) and waits for it: Ok once its bytes are
    /// right, or the status it failed with. A WRITE that neither completes nor fails in 60 s
    /// fails the test.
    pub write: &'a dyn Fn(u32) -> Result<(), WcStatus>,
}

/// Two daemons with a RoCE device `rxe0` each at `ips`, and an RC connection between them
/// (through the daemons, or between engines of this process when `SOFTIB_DATAPATH=process`)
/// whose WRITEs are `len` bytes; runs `body` with it.
pub fn rc_pair(name: &str, ips: (&str, &str), len: usize, body: impl FnOnce(&Pair<'_>)) {
    let base = std::env::temp_dir().join(format!("softib-{name}-{}", std::process::id()));
    let (dir_a, dir_b): (PathBuf, PathBuf) = (base.join("a"), base.join("b"));
    for d in [&dir_a, &dir_b] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ);
    let da = roce_daemon(&dir_a, ips.0);
    let db = roce_daemon(&dir_b, ips.1);
    let a = Device::open_at(&dir_a, Some("rxe0")).unwrap();
    let b = Device::open_at(&dir_b, Some("rxe0")).unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (buf_a, buf_b) = (a.alloc_buffer(len).unwrap(), b.alloc_buffer(len).unwrap());
    let (mr_a, mr_b): (MemoryRegion<'_>, MemoryRegion<'_>) = (
        pd_a.register(&buf_a, all).unwrap(),
        pd_b.register(&buf_b, all).unwrap(),
    );
    let qp_a = pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 8).unwrap();
    let qp_b = pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 8).unwrap();
    let (ea, eb) = (
        qp_a.endpoint_with(Some(&mr_a)).unwrap(),
        qp_b.endpoint_with(Some(&mr_b)).unwrap(),
    );
    qp_a.connect(&eb, Mtu::Mtu1024).unwrap();
    qp_b.connect(&ea, Mtu::Mtu1024).unwrap();
    let write = |round: u32| -> Result<(), WcStatus> {
        let data: Vec<u8> = (0..len as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(round) >> 9) as u8)
            .collect();
        buf_a.write(0, &data);
        qp_a.write(&mr_a, 0, len, eb.addr, eb.rkey, u64::from(round))
            .unwrap();
        // Retries run out within 7 local ACK timeouts (and an RNR wait): a WRITE that
        // neither completes nor fails in a minute is a hang.
        let wcs = cq_a.poll_wait(1, Duration::from_secs(60)).unwrap();
        assert_eq!(
            wcs.len(),
            1,
            "round {round}: no completion in 60 s; drops: requester {:?}, target {:?}",
            super::junk::drops(&dir_a),
            super::junk::drops(&dir_b)
        );
        if wcs[0].status != WcStatus::Success {
            return Err(wcs[0].status);
        }
        let mut got = vec![0u8; len];
        assert!(buf_b.read(0, &mut got));
        assert!(got == data, "round {round}: the bytes differ");
        Ok(())
    };
    body(&Pair {
        daemons: (&da, &db),
        dirs: (&dir_a, &dir_b),
        target: SocketAddr::new(ips.1.parse().unwrap(), 4791),
        target_qpn: eb.qpn.value(),
        pd_a: &pd_a,
        buf_a: &buf_a,
        write: &write,
    });
    let _ = std::fs::remove_dir_all(&base);
}
