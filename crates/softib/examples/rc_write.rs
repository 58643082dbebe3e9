//! Two RoCEv2 devices on loopback, an RC queue pair on each, one RDMA WRITE and one SEND
//! between them — the whole verbs flow in one program, with the HCA embedded.
//!
//! ```sh
//! cargo run -p softib --example rc_write
//! ```
//!
//! With a `softibd` running (`softib daemon --detach`, `softib link add rxe0 type rxe netdev
//! lo --addr 127.0.0.2`, ...), the same code works with `Device::open(Some("rxe0"))`.

use std::time::Duration;

use softib::embedded::EmbeddedDaemon;
use softib::{AccessFlags, Device, Mtu, QpType, WcStatus};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let hca = EmbeddedDaemon::start()?;
    // rxe0 at 127.0.0.2 and rxe1 at 127.0.0.3 on loopback, on a UDP port free on both.
    hca.add_loopback_pair()?;

    // Side A on rxe0, side B on rxe1 (in a real program: two processes or two hosts).
    let (a, b) = (
        Device::open_at(hca.dir(), Some("rxe0"))?,
        Device::open_at(hca.dir(), Some("rxe1"))?,
    );
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(16)?, b.create_cq(16)?);
    let (buf_a, buf_b) = (a.alloc_buffer(4096)?, b.alloc_buffer(4096)?);
    let rw = AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_WRITE);
    let (mr_a, mr_b) = (pd_a.register(&buf_a, rw)?, pd_b.register(&buf_b, rw)?);
    let (qp_a, qp_b) = (
        pd_a.create_qp(QpType::Rc, &cq_a, &cq_a, 16)?,
        pd_b.create_qp(QpType::Rc, &cq_b, &cq_b, 16)?,
    );

    // The out-of-band exchange: each side's endpoint (serde-serialisable) to the other.
    let ep_a = qp_a.endpoint_with(Some(&mr_a))?;
    let ep_b = qp_b.endpoint_with(Some(&mr_b))?;
    qp_a.connect(&ep_b, Mtu::Mtu1024)?;
    qp_b.connect(&ep_a, Mtu::Mtu1024)?;

    // A writes into B's buffer.
    buf_a.write(0, b"written by RDMA WRITE");
    qp_a.write(&mr_a, 0, 21, ep_b.addr, ep_b.rkey, 1)?;
    let wc = cq_a.wait(Duration::from_secs(5))?;
    assert_eq!(wc.status, WcStatus::Success);
    let mut got = [0u8; 21];
    buf_b.read(0, &mut got);
    println!("B's buffer: {}", String::from_utf8_lossy(&got));

    // B sends to A, which posted a receive.
    qp_a.recv(&mr_a, 1024, 64, 7)?;
    buf_b.write(100, b"hello over SEND");
    qp_b.send(&mr_b, 100, 15, None, 2)?;
    let wc = cq_a.wait(Duration::from_secs(5))?;
    let mut got = [0u8; 15];
    buf_a.read(1024, &mut got);
    println!(
        "A received {} bytes (wr_id {}): {}",
        wc.byte_len,
        wc.wr_id,
        String::from_utf8_lossy(&got)
    );
    Ok(())
}
