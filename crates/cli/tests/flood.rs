//! Floods: a checked RC transfer between two real daemons keeps every byte right while a junk
//! flooder sprays the target device's UDP port with what cannot be ours — random bytes,
//! BTHs to QPs that do not exist, opcodes of another transport, another partition, a
//! transport version that is not 0, the live QP's BTH with a wrong ICRC, and sealed ACKs
//! nobody asked for — and the device's counters say what was dropped and why. The test prints
//! the transfer's rate alone and under the flood, and the flood's rate: the figures in
//! docs/reliability.md.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softib::{AccessFlags, Device, Mtu, QpType, WcStatus};

mod common;
use common::junk::{cpu_seconds, drops, flood};
use common::roce_daemon;

#[test]
fn a_checked_rc_transfer_keeps_every_byte_through_a_junk_flood() {
    let base = std::env::temp_dir().join(format!("softib-flood-{}", std::process::id()));
    let (dir_a, dir_b) = (base.join("a"), base.join("b"));
    for d in [&dir_a, &dir_b] {
        let _ = std::fs::remove_dir_all(d);
        std::fs::create_dir_all(d).unwrap();
    }
    let _da = roce_daemon(&dir_a, "127.0.0.161");
    let db = roce_daemon(&dir_b, "127.0.0.162");
    let target_pid = db.0.id();
    let target: SocketAddr = "127.0.0.162:4791".parse().unwrap();

    let all = AccessFlags::LOCAL_WRITE
        .with(AccessFlags::REMOTE_WRITE)
        .with(AccessFlags::REMOTE_READ);
    let a = Device::open_at(&dir_a, Some("rxe0")).unwrap();
    let b = Device::open_at(&dir_b, Some("rxe0")).unwrap();
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    const LEN: usize = 256 << 10;
    let (buf_a, buf_b) = (a.alloc_buffer(LEN).unwrap(), b.alloc_buffer(LEN).unwrap());
    let (mr_a, mr_b) = (
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

    // 256 KiB WRITEs, one at a time, each checked byte for byte, for `secs`: MiB/s, or the
    // status of the first that failed (the QP is then in the error state).
    let mut round = 0u32;
    let mut transfer = |secs: f64, phase: &str| -> Result<f64, WcStatus> {
        let t0 = Instant::now();
        let mut bytes = 0usize;
        while t0.elapsed().as_secs_f64() < secs {
            round += 1;
            let data: Vec<u8> = (0..LEN as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(round) >> 7) as u8)
                .collect();
            buf_a.write(0, &data);
            qp_a.write(&mr_a, 0, LEN, eb.addr, eb.rkey, u64::from(round))
                .unwrap();
            // Retries run out within 7 local ACK timeouts (and an RNR wait): a WRITE that
            // neither completes nor fails in a minute is a hang.
            let wcs = cq_a.poll_wait(1, Duration::from_secs(60)).unwrap();
            assert_eq!(
                wcs.len(),
                1,
                "{phase}, round {round}: no completion in 60 s; drops: requester {:?}, target {:?}",
                drops(&dir_a),
                drops(&dir_b)
            );
            if wcs[0].status != WcStatus::Success {
                return Err(wcs[0].status);
            }
            let mut got = vec![0u8; LEN];
            assert!(buf_b.read(0, &mut got));
            assert!(got == data, "{phase}, round {round}: the bytes differ");
            bytes += LEN;
        }
        Ok(bytes as f64 / (1 << 20) as f64 / t0.elapsed().as_secs_f64())
    };

    let cpu0 = cpu_seconds(target_pid);
    let t_alone = Instant::now();
    let alone = transfer(2.0, "alone").expect("the transfer fails without a flood");
    let cpu_alone = (cpu_seconds(target_pid) - cpu0) / t_alone.elapsed().as_secs_f64();
    let before = drops(&dir_b);
    let mut report = Vec::new();
    // A flood a debug build absorbs on a loaded machine: the transfer must go on, every byte
    // right. Then as fast as one thread sends (beyond what a debug daemon given a third of a
    // core absorbs — the 49,000 datagrams/s): the transfer may fail, but only with
    // the status the spec gives a requester whose packets were lost (RETRY_EXC_ERR),
    // never with wrong data, a crash or a hang.
    for (rate, name) in [(Some(10_000), "paced flood"), (None, "unpaced flood")] {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let flooder = {
            let (stop, sent) = (stop.clone(), sent.clone());
            let qpn = eb.qpn.value();
            std::thread::spawn(move || flood(target, qpn, rate, stop, sent))
        };
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let sent0 = sent.load(Ordering::Relaxed);
        let cpu0 = cpu_seconds(target_pid);
        let under = transfer(3.0, name);
        let secs = t0.elapsed().as_secs_f64();
        let junk_rate = (sent.load(Ordering::Relaxed) - sent0) as f64 / secs;
        let cpu = (cpu_seconds(target_pid) - cpu0) / secs;
        stop.store(true, Ordering::Relaxed);
        flooder.join().unwrap();
        let outcome = match (rate, under) {
            (_, Ok(mib)) => format!("the transfer at {mib:.1} MiB/s"),
            (None, Err(WcStatus::RetryExcErr)) => "the transfer failed with RETRY_EXC_ERR".into(),
            (_, Err(s)) => panic!(
                "{name}: the transfer failed with {s:?}: {:?}",
                drops(&dir_b)
            ),
        };
        report.push(format!(
            "{name}: {junk_rate:.0} junk datagrams/s, {outcome}, the target daemon busy {:.0}% \
             of a core",
            cpu * 100.0
        ));
    }
    let after = drops(&dir_b);
    let grew = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
    eprintln!(
        "transfer alone: {alone:.1} MiB/s, the target daemon busy {:.0}% of a core",
        cpu_alone * 100.0
    );
    for r in &report {
        eprintln!("{r}");
    }
    eprintln!(
        "target's drops during the floods: {:?}",
        after
            .keys()
            .map(|k| (k.as_str(), grew(k)))
            .filter(|(_, n)| *n > 0)
            .collect::<Vec<_>>()
    );
    // Each kind of junk is named by what caught it; those the screen caught never cost an ICRC.
    for reason in [
        "screened",
        "unknown_qp",
        "wrong_transport",
        "pkey_mismatch",
        "bad_transport_version",
        "bad_icrc",
        "rc_unexpected_response",
    ] {
        assert!(grew(reason) > 0, "no {reason} counted: {after:?}");
    }
    assert_eq!(
        grew("screened"),
        grew("unknown_qp")
            + grew("wrong_transport")
            + grew("pkey_mismatch")
            + grew("bad_transport_version"),
        "what the screen caught is what the engine counts for those reasons: {after:?}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
