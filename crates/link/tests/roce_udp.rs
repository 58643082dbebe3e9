//! Two engines over real UDP sockets on loopback: RC, UD, every ICRC checked by the receiver,
//! and (where tshark can capture) the packets on the wire verified by softib-wire.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests fail loudly by design

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use softib_engine::memory::{RegionId, VecMemory};
use softib_engine::verbs::{
    QpType, RecvWr, RemoteAddr, Sge, UdDest, WcStatus, WorkCompletion, WrOpcode,
};
use softib_engine::{CqHandle, PdHandle};
use softib_link::driver::Driver;
use softib_link::RoceDrop;
use softib_wire::{Qpn, RKey};

mod common;
use common::{av_to, wr, BUF};

const LEN: usize = 4 << 20;

struct Host {
    d: Driver<VecMemory>,
    pd: PdHandle,
    cq: CqHandle,
    key: u32,
    ip: IpAddr,
}

fn host(ip: &str, port: u16, seed: u64) -> Host {
    try_host(ip, port, seed).unwrap()
}

fn try_host(ip: &str, port: u16, seed: u64) -> std::io::Result<Host> {
    let ip: IpAddr = ip.parse().unwrap();
    let e = common::engine(ip, seed, LEN);
    let d = Driver::bind(e.hca, SocketAddr::new(ip, port), port)?;
    Ok(Host {
        d,
        pd: e.pd,
        cq: e.cq,
        key: e.key,
        ip,
    })
}

fn pair() -> (Host, Host) {
    // A free port on 127.0.0.2, then the same port on 127.0.0.3. The tests of this file run
    // at once and each looks for a port this way: one may take the port another just found
    // and let go of, so a taken port means looking again.
    for _ in 0..20 {
        let a = host("127.0.0.2", 0, 1);
        let port = a.d.local_addr().port();
        drop(a);
        let (Ok(a), Ok(b)) = (
            try_host("127.0.0.2", port, 1),
            try_host("127.0.0.3", port, 2),
        ) else {
            continue;
        };
        return (a, b);
    }
    panic!("no UDP port free on both 127.0.0.2 and 127.0.0.3 in 20 tries");
}

fn create_qp(h: &mut Host, t: QpType) -> Qpn {
    common::create_qp(h.d.ca.hca_mut(), h.pd, h.cq, t)
}

fn rc_up(h: &mut Host, qpn: Qpn, remote: Qpn, remote_ip: IpAddr) {
    common::rc_up(&mut h.d.ca, qpn, remote, av_to(remote_ip));
}

/// Polls both drivers until `want` completions arrived on each side (or 20 s pass).
fn run(
    a: &mut Host,
    b: &mut Host,
    want_a: usize,
    want_b: usize,
) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    let (mut wa, mut wb) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    while wa.len() < want_a || wb.len() < want_b {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for completions: A has {}/{want_a}, B has {}/{want_b}; A {:?} drops {} {:?}; B {:?} drops {} {:?}",
            wa.len(),
            wb.len(),
            a.d.stats(),
            a.d.ca.hca().drops(),
            a.d.ca.drops(),
            b.d.stats(),
            b.d.ca.hca().drops(),
            b.d.ca.drops()
        );
        a.d.poll_wait(Duration::from_millis(1)).unwrap();
        b.d.poll_wait(Duration::from_millis(1)).unwrap();
        while let Some(wc) = a.d.ca.hca_mut().poll_cq(a.cq) {
            wa.push(wc);
        }
        while let Some(wc) = b.d.ca.hca_mut().poll_cq(b.cq) {
            wb.push(wc);
        }
    }
    (wa, wb)
}

fn fill(h: &mut Host, at: u64, data: &[u8]) {
    let off = (at - BUF) as usize;
    h.d.ca
        .hca_mut()
        .memory_mut()
        .bytes_mut(RegionId(1))
        .unwrap()[off..off + data.len()]
        .copy_from_slice(data);
}

fn bytes(h: &Host, at: u64, len: usize) -> Vec<u8> {
    let off = (at - BUF) as usize;
    h.d.ca.hca().memory().bytes(RegionId(1)).unwrap()[off..off + len].to_vec()
}

#[test]
fn rc_write_read_send_atomic_over_udp() {
    let (mut a, mut b) = pair();
    let qa = create_qp(&mut a, QpType::Rc);
    let qb = create_qp(&mut b, QpType::Rc);
    let (ipa, ipb) = (a.ip, b.ip);
    rc_up(&mut a, qa, qb, ipb);
    rc_up(&mut b, qb, qa, ipa);
    let data: Vec<u8> = (0..(1 << 20))
        .map(|i: u32| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fill(&mut a, BUF, &data);
    let sge = Sge {
        addr: BUF,
        length: data.len() as u32,
        lkey: a.key,
    };
    let rkey = RKey(b.key);
    a.d.ca
        .hca_mut()
        .post_send(
            qa,
            wr(
                1,
                WrOpcode::RdmaWrite(RemoteAddr {
                    addr: BUF + 0x20_0000,
                    rkey,
                }),
                sge,
            ),
        )
        .unwrap();
    let back = Sge {
        addr: BUF + 0x10_0000,
        length: data.len() as u32,
        lkey: a.key,
    };
    a.d.ca
        .hca_mut()
        .post_send(
            qa,
            wr(
                2,
                WrOpcode::RdmaRead(RemoteAddr {
                    addr: BUF + 0x20_0000,
                    rkey,
                }),
                back,
            ),
        )
        .unwrap();
    b.d.ca
        .hca_mut()
        .post_recv(
            qb,
            RecvWr {
                wr_id: 9,
                sg_list: vec![Sge {
                    addr: BUF,
                    length: 4096,
                    lkey: b.key,
                }],
            },
        )
        .unwrap();
    let small = Sge {
        addr: BUF,
        length: 3000,
        lkey: a.key,
    };
    a.d.ca
        .hca_mut()
        .post_send(qa, wr(3, WrOpcode::SendWithImm(0xfeed), small))
        .unwrap();
    fill(&mut b, BUF + 0x30_0000, &100u64.to_le_bytes());
    let result = Sge {
        addr: BUF + 0x30_0000,
        length: 8,
        lkey: a.key,
    };
    a.d.ca
        .hca_mut()
        .post_send(
            qa,
            wr(
                4,
                WrOpcode::AtomicFetchAndAdd {
                    remote: RemoteAddr {
                        addr: BUF + 0x30_0000,
                        rkey,
                    },
                    add: 5,
                },
                result,
            ),
        )
        .unwrap();
    let (wa, wb) = run(&mut a, &mut b, 4, 1);
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    assert_eq!(
        wa.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(bytes(&b, BUF + 0x20_0000, data.len()), data, "WRITE landed");
    assert_eq!(
        bytes(&a, BUF + 0x10_0000, data.len()),
        data,
        "READ came back"
    );
    assert_eq!((wb[0].byte_len, wb[0].imm_data), (3000, Some(0xfeed)));
    assert_eq!(bytes(&b, BUF, 3000), data[..3000]);
    assert_eq!(bytes(&a, BUF + 0x30_0000, 8), 100u64.to_le_bytes());
    assert_eq!(bytes(&b, BUF + 0x30_0000, 8), 105u64.to_le_bytes());
    for h in [&a, &b] {
        let s = h.d.stats();
        assert_eq!(
            h.d.ca.drops().get(RoceDrop::BadIcrc),
            0,
            "every ICRC verified: the kernel wrote IP ID 0 as assumed"
        );
        assert_eq!((s.rx_dropped, s.tx_dropped), (0, 0), "{:?}", h.d.ca.drops());
    }
}

#[test]
fn ud_send_over_udp_fills_the_grh_area() {
    let (mut a, mut b) = pair();
    let qa = create_qp(&mut a, QpType::Ud);
    let qb = create_qp(&mut b, QpType::Ud);
    for (h, q) in [(&mut a, qa), (&mut b, qb)] {
        common::ud_up(&mut h.d.ca, q);
    }
    let ah = a.d.ca.hca_mut().create_ah(a.pd, av_to(b.ip)).unwrap();
    b.d.ca
        .hca_mut()
        .post_recv(
            qb,
            RecvWr {
                wr_id: 5,
                sg_list: vec![Sge {
                    addr: BUF,
                    length: 2048,
                    lkey: b.key,
                }],
            },
        )
        .unwrap();
    fill(&mut a, BUF, b"hello over RoCEv2");
    let mut w = wr(
        1,
        WrOpcode::Send,
        Sge {
            addr: BUF,
            length: 17,
            lkey: a.key,
        },
    );
    w.ud = Some(UdDest {
        ah,
        remote_qpn: qb,
        remote_qkey: 0x1111_1111,
    });
    a.d.ca.hca_mut().post_send(qa, w).unwrap();
    let (_, wb) = run(&mut a, &mut b, 1, 1);
    assert_eq!(wb[0].status, WcStatus::Success);
    assert_eq!(wb[0].byte_len, 57);
    assert_eq!(wb[0].src_qp, qa);
    assert!(wb[0].grh);
    let area = bytes(&b, BUF, 57);
    assert_eq!(
        &area[20..21],
        &[0x45],
        "the IPv4 header sits in the second half of the GRH area"
    );
    assert_eq!(&area[32..36], &[127, 0, 0, 2], "source address");
    assert_eq!(&area[40..], b"hello over RoCEv2");
}

/// Starts tshark capturing UDP on `port` into a pcap file, once it says it is capturing.
fn start_capture(port: u16, file: &std::path::Path) -> Option<std::process::Child> {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new("tshark")
        .args(["-i", "lo", "-F", "pcap", "-q", "-w"])
        .arg(file)
        .args(["-f", &format!("udp port {port}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    let stderr = child.stderr.take()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("Capture started") {
                let _ = tx.send(());
            }
        }
    });
    match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(()) => Some(child),
        Err(_) => {
            let _ = child.kill();
            None
        }
    }
}

#[test]
fn packets_on_the_wire_carry_valid_icrcs() {
    let ci = std::env::var_os("CI").is_some();
    let dir = std::env::temp_dir().join(format!("softib-link-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("lo.pcap");
    let (mut a, mut b) = pair();
    let port = a.d.local_addr().port();
    let Some(mut tshark) = start_capture(port, &file) else {
        assert!(
            !ci,
            "tshark cannot capture on lo; CI must be able to (apt-get install tshark)"
        );
        eprintln!("SKIPPED: tshark cannot capture on lo here");
        return;
    };
    let qa = create_qp(&mut a, QpType::Rc);
    let qb = create_qp(&mut b, QpType::Rc);
    let (ipa, ipb) = (a.ip, b.ip);
    rc_up(&mut a, qa, qb, ipb);
    rc_up(&mut b, qb, qa, ipa);
    let rkey = RKey(b.key);
    let sge = Sge {
        addr: BUF,
        length: 64 * 1024,
        lkey: a.key,
    };
    a.d.ca
        .hca_mut()
        .post_send(
            qa,
            wr(1, WrOpcode::RdmaWrite(RemoteAddr { addr: BUF, rkey }), sge),
        )
        .unwrap();
    let sge = Sge {
        addr: BUF + 0x10_0000,
        length: 5000,
        lkey: a.key,
    };
    a.d.ca
        .hca_mut()
        .post_send(
            qa,
            wr(2, WrOpcode::RdmaRead(RemoteAddr { addr: BUF, rkey }), sge),
        )
        .unwrap();
    run(&mut a, &mut b, 2, 0);
    std::thread::sleep(Duration::from_millis(500));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &tshark.id().to_string()])
        .status();
    let _ = tshark.wait();
    let pcap = std::fs::read(&file).unwrap();
    // pcap: 24-byte file header, then 16-byte record headers; link type Ethernet (lo).
    let mut at = 24;
    let (mut total, mut good) = (0, 0);
    while at + 16 <= pcap.len() {
        let len = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &pcap[at + 16..at + 16 + len];
        at += 16 + len;
        let parsed = softib_wire::packet::RoceV2Repr::parse(&frame[14..]).unwrap();
        total += 1;
        good += usize::from(parsed.icrc_ok);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(total >= 64 + 5, "captured {total} packets");
    assert_eq!(
        good, total,
        "every ICRC on the wire is right (IPv4 ID 0, DF, as computed)"
    );
}
