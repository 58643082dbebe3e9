//! The invariant CRC (ICRC) and variant CRC (VCRC) of IBA vol 1 §7.8, and the RoCEv2 ICRC of
//! Annex A17 — bit for bit what the Linux rxe driver (`rxe_icrc.c`) and Wireshark compute.
//!
//! The ICRC is the standard CRC-32 (reflected polynomial 0xEDB88320, as zlib and Ethernet use
//! it) over a pseudo-packet in which every field that may change in flight is replaced by ones:
//!
//! * **RoCEv2**: 8 bytes of 0xFF standing for the absent LRH; the IPv4 header with TOS, TTL and
//!   header checksum all ones (or the IPv6 header with traffic class, flow label and hop limit
//!   all ones); the UDP header with its checksum all ones; the BTH with its byte 4
//!   (FECN, BECN, reserved) all ones; then every extended header, the payload and the pad.
//! * **Native IB, local (LNH = IBA local)**: the LRH with its VL nibble all ones, then the BTH
//!   masked as above and the rest.
//! * **Native IB, global (LNH = IBA global)**: the LRH all ones (routers rewrite it), the GRH
//!   with traffic class, flow label and hop limit all ones, then the BTH masked and the rest.
//!
//! The value is placed in the last four bytes of the packet **little-endian** (the CRC
//! register's natural byte order); [`read_icrc`] and [`write_icrc`] do that.
//!
//! The VCRC is a CRC-16 (polynomial 0x100B, reflected 0xD008, initial value 0xFFFF, final
//! exclusive-or 0xFFFF) over the whole native packet from the LRH through the ICRC. Like the
//! ICRC it is written little-endian; no hardware capture confirms that byte order (see
//! docs/dev/spec-map.md).
//!
//! Every function here takes already-delimited slices and indexes only within the lengths it
//! checks, so none panics.

use crc32fast::Hasher;

/// Length of the ICRC in bytes.
pub const ICRC_LEN: usize = 4;
/// Length of the VCRC in bytes.
pub const VCRC_LEN: usize = 2;

const MASKED_LRH: [u8; 8] = [0xFF; 8];
const BTH_LEN: usize = 12;
const UDP_LEN: usize = 8;

fn feed_masked_bth(h: &mut Hasher, bth_to_end: &[u8]) {
    if bth_to_end.len() < BTH_LEN {
        h.update(bth_to_end);
        return;
    }
    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(&bth_to_end[..BTH_LEN]);
    bth[4] = 0xFF;
    h.update(&bth);
    h.update(&bth_to_end[BTH_LEN..]);
}

fn feed_masked_udp(h: &mut Hasher, udp_header: &[u8]) {
    if udp_header.len() < UDP_LEN {
        h.update(udp_header);
        return;
    }
    let mut udp = [0u8; UDP_LEN];
    udp.copy_from_slice(&udp_header[..UDP_LEN]);
    udp[6] = 0xFF; // checksum
    udp[7] = 0xFF;
    h.update(&udp);
    h.update(&udp_header[UDP_LEN..]);
}

/// Masks the variant fields of an IPv6 header or GRH (same first 8 bytes): traffic class and
/// flow label (all but the version nibble of bytes 0..4) and hop limit (byte 7).
fn feed_masked_ipv6_like(h: &mut Hasher, header: &[u8]) {
    if header.len() < 8 {
        h.update(header);
        return;
    }
    let mut first = [0u8; 8];
    first.copy_from_slice(&header[..8]);
    first[0] |= 0x0F;
    first[1] = 0xFF;
    first[2] = 0xFF;
    first[3] = 0xFF;
    first[7] = 0xFF;
    h.update(&first);
    h.update(&header[8..]);
}

/// The RoCEv2 ICRC of a packet sent over IPv4.
///
/// `ipv4_header` is the whole IPv4 header as sent (including options, if any), `udp_header` the
/// 8-byte UDP header, `bth_to_end` everything from the BTH through the pad, without the ICRC.
pub fn icrc_roce_v4(ipv4_header: &[u8], udp_header: &[u8], bth_to_end: &[u8]) -> u32 {
    // The usual packet (no IP options): the 48 masked header bytes in one piece, then the
    // rest — a CRC update has a fixed cost, which six small ones paid per packet.
    if ipv4_header.len() == 20 && udp_header.len() == UDP_LEN && bth_to_end.len() >= BTH_LEN {
        let mut pseudo = [0xFFu8; 8 + 20 + UDP_LEN + BTH_LEN];
        pseudo[8..28].copy_from_slice(ipv4_header);
        pseudo[8 + 1] = 0xFF; // TOS (DSCP and ECN)
        pseudo[8 + 8] = 0xFF; // TTL
        pseudo[8 + 10] = 0xFF; // header checksum
        pseudo[8 + 11] = 0xFF;
        pseudo[28..36].copy_from_slice(udp_header);
        pseudo[28 + 6] = 0xFF; // UDP checksum
        pseudo[28 + 7] = 0xFF;
        pseudo[36..48].copy_from_slice(&bth_to_end[..BTH_LEN]);
        pseudo[36 + 4] = 0xFF; // FECN, BECN, reserved
        let mut h = Hasher::new();
        h.update(&pseudo);
        h.update(&bth_to_end[BTH_LEN..]);
        return h.finalize();
    }
    icrc_roce_v4_pieces(ipv4_header, udp_header, bth_to_end)
}

/// [`icrc_roce_v4`] for any header lengths, field by field.
fn icrc_roce_v4_pieces(ipv4_header: &[u8], udp_header: &[u8], bth_to_end: &[u8]) -> u32 {
    let mut h = Hasher::new();
    h.update(&MASKED_LRH);
    if ipv4_header.len() >= 20 {
        let mut ip = [0u8; 20];
        ip.copy_from_slice(&ipv4_header[..20]);
        ip[1] = 0xFF; // TOS (DSCP and ECN)
        ip[8] = 0xFF; // TTL
        ip[10] = 0xFF; // header checksum
        ip[11] = 0xFF;
        h.update(&ip);
        h.update(&ipv4_header[20..]);
    } else {
        h.update(ipv4_header);
    }
    feed_masked_udp(&mut h, udp_header);
    feed_masked_bth(&mut h, bth_to_end);
    h.finalize()
}

/// The reflected CRC-32 polynomial (zlib's, the ICRC's).
const CRC32_POLY: u32 = 0xEDB8_8320;

/// `m · v` over GF(2), where the 32×32 matrix `m` holds in column `j` the image of bit `j`.
fn gf2_apply(m: &[u32; 32], mut v: u32) -> u32 {
    let mut out = 0;
    let mut j = 0;
    while v != 0 && j < 32 {
        if v & 1 != 0 {
            out ^= m[j];
        }
        v >>= 1;
        j += 1;
    }
    out
}

fn gf2_square(m: &[u32; 32]) -> [u32; 32] {
    let mut s = [0u32; 32];
    for (j, col) in s.iter_mut().enumerate() {
        *col = gf2_apply(m, m[j]);
    }
    s
}

/// The operator that moves the CRC-32 register over one zero byte.
fn zero_byte_operator() -> [u32; 32] {
    // One zero bit: shift right, and fold the polynomial in when bit 0 falls out.
    let mut op = [0u32; 32];
    op[0] = CRC32_POLY;
    for (j, col) in op.iter_mut().enumerate().skip(1) {
        *col = 1 << (j - 1);
    }
    gf2_square(&gf2_square(&gf2_square(&op)))
}

/// How the IPv4 Identification of a RoCEv2 packet changes its ICRC, for packets with a given
/// number of bytes after the Identification field.
///
/// The ICRC is affine in the message over GF(2), so changing the Identification from 0 to `x`
/// XORs into the ICRC a value that depends only on `x` and on how many bytes follow the field
/// (`delta`). A sender that hands the kernel a batch of datagrams to segment (UDP GSO) knows
/// the kernel numbers the segments' Identifications 0, 1, 2, ... and seals each with its own;
/// a receiver that gets such a batch back whole (UDP GRO) checks each segment the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4IdentEffect {
    /// Bytes after the Identification field (the rest of the IPv4 header, UDP, BTH to the end).
    pub after: usize,
    /// The ICRC change of each Identification bit (bit 0 = the field's least significant bit).
    columns: [u32; 16],
}

impl Ipv4IdentEffect {
    /// The effect for packets with `after` bytes after the Identification field: for a packet
    /// with a 20-byte IPv4 header whose UDP payload is BTH..ICRC of `n` bytes, `after` is
    /// 14 + 8 + (n - 4).
    pub fn new(after: usize) -> Ipv4IdentEffect {
        // How flipping each Identification bit changes the final CRC: the register change
        // after the two Identification bytes, moved over every byte after them.
        let byte = zero_byte_operator();
        let mut columns = [0u32; 16];
        for (i, col) in columns.iter_mut().enumerate() {
            let [hi, lo] = (1u16 << i).to_be_bytes();
            *col = gf2_apply(&byte, gf2_apply(&byte, u32::from(hi)) ^ u32::from(lo));
        }
        let mut rest = after;
        let mut op = byte;
        while rest != 0 {
            if rest & 1 != 0 {
                for col in columns.iter_mut() {
                    *col = gf2_apply(&op, *col);
                }
            }
            rest >>= 1;
            if rest != 0 {
                op = gf2_square(&op);
            }
        }
        Ipv4IdentEffect { after, columns }
    }

    /// What to XOR into the ICRC computed with Identification 0 to get the one with `ident`.
    pub fn delta(&self, ident: u16) -> u32 {
        self.columns
            .iter()
            .enumerate()
            .filter(|(i, _)| ident & (1 << i) != 0)
            .fold(0, |acc, (_, c)| acc ^ c)
    }
}

/// The IPv4 Identification that makes `icrc` the RoCEv2 ICRC of a packet whose other bytes are
/// `ipv4_header` (its own Identification is ignored), `udp_header` and `bth_to_end`, if one does.
///
/// A receiver behind a UDP socket learns every IP and UDP field the ICRC covers except the
/// Identification, which the kernel does not report; the Linux rxe driver writes a nonzero one
/// (one per packet). The ICRC is affine in the message over GF(2) and a change confined to 16
/// bits always changes a CRC-32, so at most one Identification fits: this finds it with a
/// 16-unknown linear solve (no search), then checks it by recomputing the ICRC. The price is
/// detection strength: a packet corrupted elsewhere is accepted when its ICRC error happens to
/// equal the effect of some Identification, a chance of 2^-16 instead of 2^-32.
pub fn roce_v4_ident_for_icrc(
    ipv4_header: &[u8],
    udp_header: &[u8],
    bth_to_end: &[u8],
    icrc: u32,
) -> Option<u16> {
    if ipv4_header.len() < 20 || udp_header.len() != UDP_LEN {
        return None;
    }
    let mut ip = [0u8; 60];
    let ip = ip.get_mut(..ipv4_header.len())?;
    ip.copy_from_slice(ipv4_header);
    ip[4] = 0;
    ip[5] = 0;
    let diff = icrc ^ icrc_roce_v4(ip, udp_header, bth_to_end);
    let ident = if diff == 0 {
        0
    } else {
        let after = ip.len() - 6 + UDP_LEN + bth_to_end.len();
        solve16(&Ipv4IdentEffect::new(after).columns, diff)?
    };
    ip[4..6].copy_from_slice(&ident.to_be_bytes());
    (icrc_roce_v4(ip, udp_header, bth_to_end) == icrc).then_some(ident)
}

/// The `x` with `XOR of columns[i] for each bit i of x == target`, if there is one (Gaussian
/// elimination over GF(2); each row remembers which columns it combines).
fn solve16(columns: &[u32; 16], target: u32) -> Option<u16> {
    let mut rows = [(0u32, 0u16); 16];
    let mut n = 0;
    let reduce = |rows: &[(u32, u16)], mut v: u32, mut m: u16| {
        for &(r, rm) in rows {
            let pivot = 1u32 << (31 - r.leading_zeros());
            if v & pivot != 0 {
                v ^= r;
                m ^= rm;
            }
        }
        (v, m)
    };
    for (i, &c) in columns.iter().enumerate() {
        let (v, m) = reduce(&rows[..n], c, 1 << i);
        if v != 0 {
            rows[n] = (v, m);
            n += 1;
        }
    }
    match reduce(&rows[..n], target, 0) {
        (0, m) => Some(m),
        _ => None,
    }
}

/// The RoCEv2 ICRC of a packet sent over IPv6: as [`icrc_roce_v4`] with the 40-byte IPv6 header.
pub fn icrc_roce_v6(ipv6_header: &[u8], udp_header: &[u8], bth_to_end: &[u8]) -> u32 {
    let mut h = Hasher::new();
    h.update(&MASKED_LRH);
    feed_masked_ipv6_like(&mut h, ipv6_header);
    feed_masked_udp(&mut h, udp_header);
    feed_masked_bth(&mut h, bth_to_end);
    h.finalize()
}

/// The ICRC of a native IB packet: `lrh` is the 8-byte LRH, `grh` the 40-byte GRH when the LRH
/// says LNH = IBA global, `bth_to_end` everything from the BTH through the pad.
pub fn icrc_native(lrh: &[u8], grh: Option<&[u8]>, bth_to_end: &[u8]) -> u32 {
    let mut h = Hasher::new();
    match grh {
        Some(grh) => {
            h.update(&MASKED_LRH);
            feed_masked_ipv6_like(&mut h, grh);
        }
        None => {
            if let Some((&first, rest)) = lrh.split_first() {
                h.update(&[first | 0xF0]); // VL
                h.update(rest);
            }
        }
    }
    feed_masked_bth(&mut h, bth_to_end);
    h.finalize()
}

/// Reads the ICRC stored in the last four bytes of `packet` (little-endian), if it has four.
pub fn read_icrc(packet: &[u8]) -> Option<u32> {
    let n = packet.len().checked_sub(ICRC_LEN)?;
    let b = &packet[n..];
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Writes `icrc` little-endian into the first four bytes of `out` (which must hold four).
pub fn write_icrc(out: &mut [u8], icrc: u32) {
    out[..ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
}

/// The VCRC lookup tables for slicing by sixteen (Intel's "slicing-by-N"): `VCRC_TABLES[0]` is the
/// classic byte table of the reflected CRC-16 (polynomial 0x100B, reflected 0xD008), and
/// `VCRC_TABLES[k][b]` is the CRC of byte `b` followed by `k` zero bytes. Sixteen independent
/// table look-ups then fold sixteen input bytes at once; the VCRC covers every byte of every native packet, so
/// the byte-at-a-time loop was the fabric's hottest code.
const fn vcrc_tables() -> [[u16; 256]; 16] {
    let mut t = [[0u16; 256]; 16];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u16;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xD008
            } else {
                crc >> 1
            };
            bit += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

static VCRC_TABLES: [[u16; 256]; 16] = vcrc_tables();

/// The VCRC of a native IB packet: `lrh_to_icrc` runs from the LRH through the ICRC.
pub fn vcrc(lrh_to_icrc: &[u8]) -> u16 {
    vcrc_update(0xFFFF, lrh_to_icrc) ^ 0xFFFF
}

/// Advances the (reflected, un-inverted) VCRC register `crc` over `bytes`.
fn vcrc_update(mut crc: u16, bytes: &[u8]) -> u16 {
    let t = &VCRC_TABLES;
    let mut chunks = bytes.chunks_exact(16);
    for c in &mut chunks {
        let [lo, hi] = crc.to_le_bytes();
        let b = |i: usize| usize::from(c[i]);
        crc = (t[15][b(0) ^ usize::from(lo)] ^ t[14][b(1) ^ usize::from(hi)])
            ^ (t[13][b(2)] ^ t[12][b(3)])
            ^ (t[11][b(4)] ^ t[10][b(5)])
            ^ (t[9][b(6)] ^ t[8][b(7)])
            ^ (t[7][b(8)] ^ t[6][b(9)])
            ^ (t[5][b(10)] ^ t[4][b(11)])
            ^ (t[3][b(12)] ^ t[2][b(13)])
            ^ (t[1][b(14)] ^ t[0][b(15)]);
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][usize::from((crc as u8) ^ b)];
    }
    crc
}

/// The plain CRC-32 of `bytes` (zlib's), the reference the ICRC benchmark compares against.
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut h = Hasher::new();
    h.update(bytes);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> std::vec::Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// An RC SEND_ONLY from the Linux rxe driver (rc_send_lat.pcap), IPv4 header onwards. rxe
    /// wrote a nonzero IPv4 Identification (0x31d6), which the ICRC covers.
    const RXE_SEND_ONLY: &str = "4500006c31d640004011f40e0a4d00010a4d0002c14412b7005800000400ffff0000001280af47ee7ecc643fdc88e56cf200beceb151642e4f675f0f259dba236e6e6524f2e06370acc7b0885095f44295b2104704747553dcd46201711c25df8a8a037c6a66ed164c0ea981";

    #[test]
    fn rxe_ipv4_icrc_matches() {
        let p = unhex(RXE_SEND_ONLY);
        let (ip, rest) = p.split_at(20);
        let (udp, rest) = rest.split_at(8);
        let (body, icrc) = rest.split_at(rest.len() - 4);
        let want = read_icrc(icrc).unwrap();
        assert_eq!(icrc_roce_v4(ip, udp, body), want);
    }

    #[test]
    fn ident_is_recovered_from_the_icrc() {
        let p = unhex(RXE_SEND_ONLY);
        let (ip, rest) = p.split_at(20);
        let (udp, rest) = rest.split_at(8);
        let (body, icrc) = rest.split_at(rest.len() - 4);
        let want = read_icrc(icrc).unwrap();
        // rxe's own Identification, whatever the header handed in says.
        let mut zeroed = ip.to_vec();
        zeroed[4] = 0;
        zeroed[5] = 0;
        assert_eq!(
            roce_v4_ident_for_icrc(&zeroed, udp, body, want),
            Some(0x31d6)
        );
        assert_eq!(roce_v4_ident_for_icrc(ip, udp, body, want), Some(0x31d6));
        // Every Identification is found again, for short and long bodies.
        for len in [12usize, 13, 40, 1024, 4096 + 28] {
            let body: std::vec::Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            for id in [0u16, 1, 0x8000, 0xb62d, 0xffff] {
                let mut ip = zeroed.clone();
                ip[4..6].copy_from_slice(&id.to_be_bytes());
                let icrc = icrc_roce_v4(&ip, udp, &body);
                assert_eq!(roce_v4_ident_for_icrc(&zeroed, udp, &body, icrc), Some(id));
            }
        }
    }

    #[test]
    fn the_one_piece_ipv4_icrc_equals_the_field_by_field_one() {
        let p = unhex(RXE_SEND_ONLY);
        let (ip, rest) = p.split_at(20);
        let (udp, _) = rest.split_at(8);
        for len in [12usize, 13, 40, 1024 + 12, 4096 + 28] {
            let body: std::vec::Vec<u8> = (0..len).map(|i| (i * 11 + 1) as u8).collect();
            for flip in [0usize, 1, 4, 8, 10, 30] {
                let mut ip = ip.to_vec();
                ip[flip % 20] ^= 0x5A;
                assert_eq!(
                    icrc_roce_v4(&ip, udp, &body),
                    icrc_roce_v4_pieces(&ip, udp, &body),
                    "{len} {flip}"
                );
            }
        }
    }

    #[test]
    fn ident_effect_turns_an_icrc_with_ident_zero_into_one_with_any_ident() {
        let p = unhex(RXE_SEND_ONLY);
        let (ip, rest) = p.split_at(20);
        let (udp, _) = rest.split_at(8);
        let mut zeroed = ip.to_vec();
        zeroed[4] = 0;
        zeroed[5] = 0;
        for len in [12usize, 40, 1024 + 12, 4096 + 28] {
            let body: std::vec::Vec<u8> = (0..len).map(|i| (i * 13 + 5) as u8).collect();
            let effect = Ipv4IdentEffect::new(14 + 8 + len);
            let base = icrc_roce_v4(&zeroed, udp, &body);
            for id in [0u16, 1, 2, 63, 0x8000, 0xffff] {
                let mut ip = zeroed.clone();
                ip[4..6].copy_from_slice(&id.to_be_bytes());
                assert_eq!(
                    base ^ effect.delta(id),
                    icrc_roce_v4(&ip, udp, &body),
                    "{len} {id}"
                );
            }
        }
    }

    #[test]
    fn ident_solve_rejects_other_corruption() {
        let p = unhex(RXE_SEND_ONLY);
        let (ip, rest) = p.split_at(20);
        let (udp, rest) = rest.split_at(8);
        let (body, icrc) = rest.split_at(rest.len() - 4);
        let want = read_icrc(icrc).unwrap();
        let mut accepted = 0;
        // (BTH byte 4 is masked: changing it changes nothing.)
        for i in (0..body.len()).filter(|&i| i != 4) {
            let mut bad = body.to_vec();
            bad[i] ^= 0x5a;
            accepted += usize::from(roce_v4_ident_for_icrc(ip, udp, &bad, want).is_some());
        }
        assert_eq!(accepted, 0);
        // A wrong address or UDP port is not mistaken for an Identification either.
        let mut other = ip.to_vec();
        other[19] ^= 1;
        assert_eq!(roce_v4_ident_for_icrc(&other, udp, body, want), None);
        assert_eq!(roce_v4_ident_for_icrc(&ip[..19], udp, body, want), None);
    }

    #[test]
    fn initial_state_is_eight_ones() {
        // ANCHORS §2.8: the state after 8×0xFF is 0xDEBB20E3 (before final inversion).
        assert_eq!(crc32(&[0xFF; 8]) ^ 0xFFFF_FFFF, 0xDEBB_20E3);
    }

    #[test]
    fn icrc_ignores_variant_fields() {
        let mut p = unhex(RXE_SEND_ONLY);
        let reference = {
            let (ip, rest) = p.split_at(20);
            let (udp, rest) = rest.split_at(8);
            icrc_roce_v4(ip, udp, &rest[..rest.len() - 4])
        };
        p[1] = 0x02; // ECN bits
        p[8] = 3; // TTL
        p[10] = 0x12; // checksum
        p[26] = 0xAB; // UDP checksum
        p[28 + 4] = 0xC0; // FECN, BECN
        let (ip, rest) = p.split_at(20);
        let (udp, rest) = rest.split_at(8);
        assert_eq!(icrc_roce_v4(ip, udp, &rest[..rest.len() - 4]), reference);
        // ...but not the Identification field.
        let mut q = p.clone();
        q[5] ^= 1;
        let (ip, rest) = q.split_at(20);
        let (udp, rest) = rest.split_at(8);
        assert_ne!(icrc_roce_v4(ip, udp, &rest[..rest.len() - 4]), reference);
    }

    #[test]
    fn native_local_masks_only_vl() {
        let lrh = [0x02, 0x02, 0x00, 0x02, 0x00, 0x06, 0x00, 0x01];
        let body = [0u8; 12];
        let a = icrc_native(&lrh, None, &body);
        let mut vl15 = lrh;
        vl15[0] = 0xF2;
        assert_eq!(icrc_native(&vl15, None, &body), a);
        let mut other_dlid = lrh;
        other_dlid[3] = 3;
        assert_ne!(icrc_native(&other_dlid, None, &body), a);
    }

    #[test]
    fn vcrc_sliced_equals_bytewise() {
        // Every length 0..64 (all remainders, several whole chunks) of a non-trivial pattern.
        let data: std::vec::Vec<u8> = (0u32..64).map(|i| (i * 37 + 11) as u8).collect();
        for len in 0..data.len() {
            let mut crc = 0xFFFFu16;
            for &b in &data[..len] {
                crc = (crc >> 8) ^ VCRC_TABLES[0][usize::from((crc as u8) ^ b)];
            }
            assert_eq!(vcrc(&data[..len]), crc ^ 0xFFFF, "length {len}");
        }
    }

    #[test]
    fn vcrc_check_value() {
        // CRC-16 with poly 0x100B reflected, init and xorout 0xFFFF: the catalogue check value
        // over "123456789" computed by the bitwise definition.
        let bitwise = |data: &[u8]| {
            let mut crc = 0xFFFFu16;
            for &b in data {
                crc ^= u16::from(b);
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        (crc >> 1) ^ 0xD008
                    } else {
                        crc >> 1
                    };
                }
            }
            crc ^ 0xFFFF
        };
        assert_eq!(vcrc(b"123456789"), bitwise(b"123456789"));
        assert_eq!(vcrc(&[]), 0);
    }
}
