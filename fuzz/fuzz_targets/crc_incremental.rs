//! softib's CRCs against reference CRCs written from their definitions, over arbitrary bytes
//! cut at points the fuzzer chooses.
//!
//! Input: three 16-bit cut points, then the data. The data is split at the cuts into three
//! pieces `a`, `b`, `c`, which are handed to the ICRC functions as IP/LRH header, UDP header/GRH
//! and BTH-onwards; each must equal the reference CRC-32 of the masked concatenation. The plain
//! CRC-32 and the VCRC of the whole data must equal the bitwise references, including when the
//! reference is fed the pieces one by one, and both CRCs must show their residue property.
#![no_main]

use libfuzzer_sys::fuzz_target;
use softib_fuzz::reference::{self, Crc32};
use softib_wire::crc;

fuzz_target!(|input: &[u8]| {
    let Some((cuts, data)) = input.split_first_chunk::<6>() else {
        return;
    };
    let cut = |i: usize| usize::from(u16::from_le_bytes([cuts[2 * i], cuts[2 * i + 1]]));
    let mut points = [cut(0), cut(1), cut(2)].map(|p| p % (data.len() + 1));
    points.sort_unstable();
    let (a, rest) = data.split_at(points[0]);
    let (b, rest) = rest.split_at(points[1] - points[0]);
    let (c, d) = rest.split_at(points[2] - points[1]);

    // Plain CRC-32, whole and piecewise.
    let whole = crc::crc32(data);
    assert_eq!(
        whole,
        reference::crc32(data),
        "crc32 differs from the bitwise CRC-32"
    );
    let mut pieces = Crc32::new();
    for p in [a, b, c, d] {
        pieces.update(p);
    }
    assert_eq!(
        whole,
        pieces.finish(),
        "CRC-32 depends on where the data is cut"
    );
    // Residue: appending the CRC (little-endian) gives a constant whatever the data.
    let mut with_crc = data.to_vec();
    with_crc.extend_from_slice(&whole.to_le_bytes());
    assert_eq!(crc::crc32(&with_crc), crc::crc32(&[0; 4]), "CRC-32 residue");

    // VCRC.
    let v = crc::vcrc(data);
    assert_eq!(
        v,
        reference::vcrc(data),
        "vcrc differs from the bitwise CRC-16"
    );
    let mut with_vcrc = data.to_vec();
    with_vcrc.extend_from_slice(&v.to_le_bytes());
    assert_eq!(crc::vcrc(&with_vcrc), crc::vcrc(&[0; 2]), "VCRC residue");

    // ICRCs over the pieces (d, past the last cut, is left out).
    let abc = &data[..points[2]];
    let body = c;
    assert_eq!(
        crc::icrc_roce_v4(a, b, body),
        reference::icrc_roce(false, a, b, body),
        "icrc_roce_v4"
    );
    assert_eq!(
        crc::icrc_roce_v6(a, b, body),
        reference::icrc_roce(true, a, b, body),
        "icrc_roce_v6"
    );
    assert_eq!(
        crc::icrc_native(a, None, body),
        reference::icrc_native(a, None, body),
        "icrc_native, LRH only"
    );
    assert_eq!(
        crc::icrc_native(a, Some(b), body),
        reference::icrc_native(a, Some(b), body),
        "icrc_native with GRH"
    );
    // With nothing masked (pieces too short for a header), the ICRC is a plain CRC-32.
    if a.is_empty() && b.len() < 8 && c.len() < 12 {
        let mut plain = Crc32::new();
        plain.update(&[0xFF; 8]);
        plain.update(abc);
        assert_eq!(crc::icrc_roce_v6(a, b, c), plain.finish());
    }

    // The ICRC's place in a packet: little-endian in the last four bytes.
    let mut tail = [0u8; 4];
    crc::write_icrc(&mut tail, whole);
    assert_eq!(tail, whole.to_le_bytes());
    assert_eq!(crc::read_icrc(&tail), Some(whole));
    assert_eq!(
        crc::read_icrc(data),
        data.len().checked_sub(4).map(|n| u32::from_le_bytes([
            data[n],
            data[n + 1],
            data[n + 2],
            data[n + 3]
        ]))
    );
});
