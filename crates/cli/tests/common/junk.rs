//! Junk for the flood tests: datagrams a device can tell apart from its traffic, sprayed at
//! its UDP port from a thread of the test.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use softib::Context;
use softib_engine::rng::Rng;

/// The engine's seeded generator, with bytes in a vector: a failure can be replayed.
pub fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut b = vec![0u8; n];
    rng.fill(&mut b);
    b
}

/// A BTH (12 bytes) followed by `extra` random bytes and a random ICRC.
pub fn bth(rng: &mut Rng, opcode: u8, flags: u8, pkey: u16, qpn: u32, extra: usize) -> Vec<u8> {
    let mut b = random_bytes(rng, 12 + extra + 4);
    b[0] = opcode;
    b[1] = flags;
    b[2..4].copy_from_slice(&pkey.to_be_bytes());
    b[4] = 0;
    b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    b
}

/// One datagram of junk of kind `kind` (0..7) for the device at `to` whose live RC QP is
/// `qpn`, sent from `from`.
pub fn junk(rng: &mut Rng, kind: u64, from: SocketAddr, to: SocketAddr, qpn: u32) -> Vec<u8> {
    const RC_WRITE_ONLY: u8 = 0x0A;
    const RC_ACK: u8 = 0x11;
    const UD_SEND_ONLY: u8 = 0x64;
    match kind {
        // Random bytes.
        0 => {
            let n = rng.below(1200) as usize;
            random_bytes(rng, n)
        }
        // To a QP that does not exist.
        1 => {
            let other = (qpn + 1 + rng.below(0xFFFF) as u32) & 0x00FF_FFFF;
            bth(rng, RC_WRITE_ONLY, 0, 0xFFFF, other, 16 + 256)
        }
        // A UD opcode to the RC QP.
        2 => bth(rng, UD_SEND_ONLY, 0, 0xFFFF, qpn, 8 + 256),
        // Another partition.
        3 => bth(rng, RC_WRITE_ONLY, 0, 0x8123, qpn, 16 + 256),
        // A transport version that is not 0.
        4 => {
            let tver = 1 + rng.below(15) as u8;
            bth(rng, RC_WRITE_ONLY, tver, 0xFFFF, qpn, 16 + 256)
        }
        // The live QP's header with a wrong ICRC (a mutated packet).
        5 => bth(rng, RC_WRITE_ONLY, 0, 0xFFFF, qpn, 16 + 1024),
        // A sealed ACK for a PSN nobody sent: the ICRC passes, the engine drops it.
        _ => {
            let mut b = bth(rng, RC_ACK, 0, 0xFFFF, qpn, 4);
            b[12] = 0; // AETH: an ACK
            let n = b.len() - 4;
            softib_link::framing::seal(from, to, &mut b, n).unwrap();
            b
        }
    }
}

/// Sprays junk at `to` until `stop`, at about `rate` datagrams a second (`None`: as fast as
/// one thread can); counts what it sent.
pub fn flood(
    to: SocketAddr,
    qpn: u32,
    rate: Option<u64>,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
) {
    let sock = UdpSocket::bind("127.0.0.169:0").unwrap();
    let from = sock.local_addr().unwrap();
    let mut rng = Rng::new(0xf100_d5ee_d001);
    // Made beforehand and sent round and round, so that the flooder's own work (a debug
    // build's random bytes) does not take the CPU the daemons need.
    let pool: Vec<Vec<u8>> = (0..8192)
        .map(|_| {
            let kind = rng.below(7);
            junk(&mut rng, kind, from, to, qpn)
        })
        .collect();
    let t0 = Instant::now();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if let Some(r) = rate {
            // Paced: no further ahead than the rate allows.
            let due = t0.elapsed().as_secs_f64() * r as f64;
            if n as f64 >= due {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        let _ = sock.send_to(&pool[n as usize % pool.len()], to);
        n += 1;
        sent.store(n, Ordering::Relaxed);
    }
}

/// The CPU time process `pid` has used (user and system), in seconds.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's closing parenthesis: state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0
}

/// The drop counters of the first device of the daemon in `dir`.
pub fn drops(dir: &Path) -> BTreeMap<String, u64> {
    let mut ctx = Context::open_at(dir).unwrap();
    ctx.devices().unwrap()[0].drops.iter().cloned().collect()
}
