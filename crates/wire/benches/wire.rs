//! `cargo bench -p softib-wire`: ICRC throughput beside plain CRC-32, whole-packet parse and
//! emit times, and the VCRC rate. No benchmark framework: each row runs its closure for a fixed
//! time after a warm-up, with `black_box` around inputs and outputs, and prints one line.
//!
//! Sizes are those of RoCEv2 over IPv4. GB/s counts the bytes the CRC covers in the datagram
//! (IP header through pad, not the ICRC itself, nor the eight 0xFF bytes standing for the LRH),
//! so the ICRC and CRC-32 rows of one size process the same bytes.

use std::hint::black_box;
use std::time::{Duration, Instant};

use softib_wire::crc::{self, ICRC_LEN};
use softib_wire::ip::{IpRepr, Ipv4Repr, UdpRepr, PROTOCOL_UDP, ROCE_V2_UDP_PORT};
use softib_wire::packet::{IbPacketRepr, RoceV2Repr, TransportRepr};
use softib_wire::{
    AethRepr, BthRepr, Error, Lid, Lnh, LrhRepr, Opcode, Operation, PKey, Psn, Qpn, RKey, RethRepr,
    Syndrome, Transport,
};

/// How long each row warms up before it is timed.
const WARM_UP: Duration = Duration::from_millis(100);
/// How long each row is timed.
const MEASURE: Duration = Duration::from_millis(300);

fn main() -> Result<(), Error> {
    println!(
        "softib-wire benchmarks: each row {} ms after {} ms of warm-up\n",
        MEASURE.as_millis(),
        WARM_UP.as_millis()
    );
    icrc_vs_crc32()?;
    parse_and_emit()?;
    vcrc();
    Ok(())
}

/// (a) and (b): the RoCEv2 ICRC and the plain CRC-32 of the same datagram bytes.
fn icrc_vs_crc32() -> Result<(), Error> {
    println!("ICRC vs plain CRC-32, RoCEv2 IPv4 RC SEND_ONLY");
    println!(
        "{:>8} {:>7} {:>10} {:>12} {:>12}",
        "payload", "bytes", "ICRC GB/s", "CRC-32 GB/s", "ICRC/CRC-32"
    );
    for payload_len in [64, 1024, 4096] {
        let payload = filler(payload_len);
        let bytes = emit_roce(&roce(send_only(), &payload))?;
        let covered = &bytes[..bytes.len() - ICRC_LEN];
        let (ip, rest) = covered.split_at(Ipv4Repr::HEADER_LEN);
        let (udp, body) = rest.split_at(UdpRepr::HEADER_LEN);
        let icrc_ns = time_per_iter(|| {
            black_box(crc::icrc_roce_v4(
                black_box(ip),
                black_box(udp),
                black_box(body),
            ));
        });
        let crc32_ns = time_per_iter(|| {
            black_box(crc::crc32(black_box(covered)));
        });
        let icrc = gb_per_s(covered.len(), icrc_ns);
        let crc32 = gb_per_s(covered.len(), crc32_ns);
        println!(
            "{:>8} {:>7} {:>10.2} {:>12.2} {:>12.2}",
            payload_len,
            covered.len(),
            icrc,
            crc32,
            icrc / crc32
        );
    }
    println!();
    Ok(())
}

/// (c): `RoceV2Repr::parse` and `RoceV2Repr::emit`, ICRC included in both.
fn parse_and_emit() -> Result<(), Error> {
    println!("RoceV2Repr parse and emit (ICRC computed in both)");
    println!(
        "{:<28} {:>6} {:>10} {:>10}",
        "packet", "bytes", "parse ns", "emit ns"
    );
    let small = filler(64);
    let large = filler(4096);
    let mut write_first =
        TransportRepr::new(bth(Opcode::new(Transport::Rc, Operation::RdmaWriteFirst)));
    write_first.reth = Some(RethRepr {
        va: 0x7f00_1234_5000,
        rkey: RKey(0x1234),
        dma_len: 1 << 20,
    });
    let mut ack = TransportRepr::new(bth(Opcode::RC_ACKNOWLEDGE));
    ack.aeth = Some(AethRepr {
        syndrome: Syndrome::from(0x1F),
        msn: 42,
    });
    let cases = [
        ("RC SEND_ONLY 64 B", roce(send_only(), &small)),
        ("RC RDMA_WRITE_FIRST 4 KiB", roce(write_first, &large)),
        ("RC ACKNOWLEDGE", roce(ack, &[])),
    ];
    for (name, repr) in cases {
        let bytes = emit_roce(&repr)?;
        let parse_ns = time_per_iter(|| {
            let _ = black_box(RoceV2Repr::parse(black_box(&bytes)));
        });
        let mut out = vec![0u8; repr.buffer_len()];
        let emit_ns = time_per_iter(|| {
            black_box(&repr).emit(black_box(&mut out));
            black_box(&out);
        });
        println!(
            "{:<28} {:>6} {:>10.1} {:>10.1}",
            name,
            bytes.len(),
            parse_ns,
            emit_ns
        );
    }
    println!();
    Ok(())
}

/// (d): the VCRC (CRC-16) of a native 4 KiB packet, softib's table-driven `crc::vcrc` beside a
/// bitwise implementation of the definition.
fn vcrc() {
    let payload = filler(4096);
    let repr = IbPacketRepr {
        lrh: LrhRepr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid: Lid(2),
            pkt_len: 0,
            slid: Lid(1),
        },
        grh: None,
        transport: send_only(),
        payload: &payload,
    }
    .normalized();
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes);
    let covered = &bytes[..bytes.len() - crc::VCRC_LEN];
    assert_eq!(crc::vcrc(covered), vcrc_bitwise(covered));
    println!("VCRC (CRC-16) of a native RC SEND_ONLY 4 KiB packet");
    println!("{:<28} {:>6} {:>10}", "implementation", "bytes", "GB/s");
    let table_ns = time_per_iter(|| {
        black_box(crc::vcrc(black_box(covered)));
    });
    let bitwise_ns = time_per_iter(|| {
        black_box(vcrc_bitwise(black_box(covered)));
    });
    for (name, ns) in [
        ("crc::vcrc (slice-by-16)", table_ns),
        ("bitwise", bitwise_ns),
    ] {
        println!(
            "{:<28} {:>6} {:>10.3}",
            name,
            covered.len(),
            gb_per_s(covered.len(), ns)
        );
    }
}

/// The VCRC one bit at a time: polynomial 0x100B reflected, initial value and final
/// exclusive-or 0xFFFF.
fn vcrc_bitwise(bytes: &[u8]) -> u16 {
    let mut crc = 0xFFFFu16;
    for &b in bytes {
        crc ^= u16::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xD008 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// Runs `f` for [`WARM_UP`], then for [`MEASURE`], and returns the mean nanoseconds per call.
/// Calls are made in batches, doubled until one batch takes a millisecond, so reading the
/// clock costs nothing measurable.
fn time_per_iter(mut f: impl FnMut()) -> f64 {
    let mut run = |length: Duration| {
        let start = Instant::now();
        let mut batch = 1u64;
        let mut calls = 0u64;
        loop {
            let batch_start = Instant::now();
            for _ in 0..batch {
                f();
            }
            calls += batch;
            let elapsed = start.elapsed();
            if elapsed >= length {
                return elapsed.as_nanos() as f64 / calls as f64;
            }
            if batch_start.elapsed() < Duration::from_millis(1) {
                batch *= 2;
            }
        }
    };
    run(WARM_UP);
    run(MEASURE)
}

fn gb_per_s(bytes: usize, ns_per_iter: f64) -> f64 {
    bytes as f64 / ns_per_iter
}

fn filler(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + 7) as u8).collect()
}

fn bth(opcode: Opcode) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_count: 0,
        tver: 0,
        pkey: PKey::DEFAULT,
        fecn: false,
        becn: false,
        dest_qpn: Qpn::new(0x12),
        ack_req: true,
        psn: Psn::new(0x00AB_CDEF),
    }
}

fn send_only() -> TransportRepr {
    TransportRepr::new(bth(Opcode::RC_SEND_ONLY))
}

fn roce<'a>(transport: TransportRepr, payload: &'a [u8]) -> RoceV2Repr<'a> {
    RoceV2Repr {
        ip: IpRepr::V4(Ipv4Repr {
            tos: 0,
            ident: 0x31d6,
            dont_frag: true,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            src: [10, 77, 0, 1],
            dst: [10, 77, 0, 2],
        }),
        udp: UdpRepr {
            src_port: 0xC144,
            dst_port: ROCE_V2_UDP_PORT,
            checksum: 0,
        },
        transport,
        payload,
    }
    .normalized()
}

/// Emits `repr` and checks that it parses back, so that every row measures a valid packet.
fn emit_roce(repr: &RoceV2Repr<'_>) -> Result<Vec<u8>, Error> {
    let mut bytes = vec![0u8; repr.buffer_len()];
    repr.emit(&mut bytes);
    let parsed = RoceV2Repr::parse(&bytes)?;
    if parsed.repr != *repr || !parsed.icrc_ok {
        return Err(Error::Malformed("benchmark packet does not round-trip"));
    }
    Ok(bytes)
}
