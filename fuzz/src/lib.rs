//! What the fuzz targets share: reference CRCs written from their definitions (independent of
//! `softib_wire::crc`, which uses crc32fast and a table), a `fmt::Write` sink that only counts,
//! and the checks every successfully parsed or freshly built packet must pass.
//!
//! The checks panic on failure; that is how a fuzz target reports a bug.

use core::fmt::{self, Write};

use softib_wire::packet::{IbPacketRepr, Parsed, RoceV2Repr};

/// A `fmt::Write` that throws the text away and counts its bytes, so `Display` impls can be
/// exercised without allocating.
#[derive(Debug, Default)]
pub struct CountingSink(pub usize);

impl Write for CountingSink {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Formats `value` with `Display` into a [`CountingSink`] and returns the length of the text.
pub fn display_len<T: fmt::Display + ?Sized>(value: &T) -> usize {
    let mut sink = CountingSink(0);
    // A Display impl may only fail when the sink does, and this sink never does.
    write!(sink, "{value}").expect("Display failed although the sink cannot");
    sink.0
}

/// Reference CRCs, written from the textbook definitions: MSB-first shift registers over
/// bit-reversed input bytes, with the result reflected back. Slow, obviously right, and
/// sharing nothing with the table-driven code under test.
pub mod reference {
    /// CRC-32 generator polynomial (normal form), as in Ethernet and zlib.
    const CRC32_POLY: u32 = 0x04C1_1DB7;
    /// The IB VCRC generator polynomial (IBA §7.8.2), normal form.
    const CRC16_POLY: u16 = 0x100B;

    /// A CRC-32 computed over several pieces, as if they were concatenated.
    #[derive(Debug, Clone, Copy)]
    pub struct Crc32(u32);

    impl Default for Crc32 {
        fn default() -> Self {
            Crc32::new()
        }
    }

    impl Crc32 {
        /// The register after the initial value (all ones).
        pub fn new() -> Crc32 {
            Crc32(0xFFFF_FFFF)
        }

        /// Shifts `bytes` through the register, least significant bit of each byte first.
        pub fn update(&mut self, bytes: &[u8]) {
            for &b in bytes {
                self.0 ^= u32::from(b.reverse_bits()) << 24;
                for _ in 0..8 {
                    self.0 = if self.0 & 0x8000_0000 != 0 {
                        (self.0 << 1) ^ CRC32_POLY
                    } else {
                        self.0 << 1
                    };
                }
            }
        }

        /// The CRC: the register reflected and inverted.
        pub fn finish(self) -> u32 {
            !self.0.reverse_bits()
        }
    }

    /// The CRC-32 of `bytes`.
    pub fn crc32(bytes: &[u8]) -> u32 {
        let mut c = Crc32::new();
        c.update(bytes);
        c.finish()
    }

    /// The VCRC of `bytes`: CRC-16, polynomial 0x100B, reflected in and out, initial value and
    /// final exclusive-or 0xFFFF (IBA §7.8.2).
    pub fn vcrc(bytes: &[u8]) -> u16 {
        let mut reg = 0xFFFFu16;
        for &b in bytes {
            reg ^= u16::from(b.reverse_bits()) << 8;
            for _ in 0..8 {
                reg = if reg & 0x8000 != 0 {
                    (reg << 1) ^ CRC16_POLY
                } else {
                    reg << 1
                };
            }
        }
        !reg.reverse_bits()
    }

    /// `bytes` with each listed offset set to all ones, if `bytes` holds at least `min_len`
    /// bytes; otherwise unchanged. (softib feeds a slice too short for its fixed header into the
    /// ICRC unmasked; the targets only rely on that for their own split slices.)
    fn masked(bytes: &[u8], min_len: usize, offsets: &[usize], nibble0: bool) -> Vec<u8> {
        let mut v = bytes.to_vec();
        if v.len() >= min_len {
            for &i in offsets {
                v[i] = 0xFF;
            }
            if nibble0 {
                v[0] |= 0x0F;
            }
        }
        v
    }

    /// The IPv4 header as the ICRC sees it: TOS, TTL and header checksum all ones (A17.8.1).
    pub fn mask_ipv4(h: &[u8]) -> Vec<u8> {
        masked(h, 20, &[1, 8, 10, 11], false)
    }

    /// An IPv6 header or GRH as the ICRC sees it: traffic class, flow label and hop limit all
    /// ones.
    pub fn mask_ipv6(h: &[u8]) -> Vec<u8> {
        masked(h, 8, &[1, 2, 3, 7], true)
    }

    /// The UDP header as the ICRC sees it: checksum all ones.
    pub fn mask_udp(h: &[u8]) -> Vec<u8> {
        masked(h, 8, &[6, 7], false)
    }

    /// BTH onwards as the ICRC sees it: byte 4 (FECN, BECN, reserved) all ones.
    pub fn mask_bth(h: &[u8]) -> Vec<u8> {
        masked(h, 12, &[4], false)
    }

    /// The RoCEv2 ICRC: eight bytes of ones for the absent LRH, then the masked IP header
    /// (IPv6 when `v6`), UDP header and BTH onwards.
    pub fn icrc_roce(v6: bool, ip: &[u8], udp: &[u8], bth_to_end: &[u8]) -> u32 {
        let mut c = Crc32::new();
        c.update(&[0xFF; 8]);
        c.update(&if v6 { mask_ipv6(ip) } else { mask_ipv4(ip) });
        c.update(&mask_udp(udp));
        c.update(&mask_bth(bth_to_end));
        c.finish()
    }

    /// The native ICRC: with a GRH, the LRH is all ones and the GRH masked like IPv6; without,
    /// only the VL nibble of the LRH is masked.
    pub fn icrc_native(lrh: &[u8], grh: Option<&[u8]>, bth_to_end: &[u8]) -> u32 {
        let mut c = Crc32::new();
        match grh {
            Some(g) => {
                c.update(&[0xFF; 8]);
                c.update(&mask_ipv6(g));
            }
            None => {
                let mut l = lrh.to_vec();
                if let Some(first) = l.first_mut() {
                    *first |= 0xF0;
                }
                c.update(&l);
            }
        }
        c.update(&mask_bth(bth_to_end));
        c.finish()
    }

    /// For an IP datagram that `RoceV2Repr::parse` accepted: the ICRC computed here and the one
    /// carried, delimiting the packet by the IP and UDP length fields as a receiver does.
    /// `None` if the lengths do not fit (which parse would have rejected).
    pub fn roce_datagram_icrc(datagram: &[u8]) -> Option<(u32, u32)> {
        let v6 = datagram.first()? >> 4 == 6;
        let (ip_len, ip_end) = if v6 {
            let pay = usize::from(u16::from_be_bytes([*datagram.get(4)?, *datagram.get(5)?]));
            (40, 40 + pay)
        } else {
            let ihl = usize::from(datagram[0] & 0x0F) * 4;
            let total = usize::from(u16::from_be_bytes([*datagram.get(2)?, *datagram.get(3)?]));
            (ihl, total)
        };
        let ip = datagram.get(..ip_len)?;
        let ip_payload = datagram.get(ip_len..ip_end)?;
        let udp_len = usize::from(u16::from_be_bytes([
            *ip_payload.get(4)?,
            *ip_payload.get(5)?,
        ]));
        let udp = ip_payload.get(..8)?;
        let bth_to_icrc = ip_payload.get(8..udp_len)?;
        let body = bth_to_icrc.get(..bth_to_icrc.len().checked_sub(4)?)?;
        let rx = bth_to_icrc.get(body.len()..)?;
        let rx = u32::from_le_bytes([rx[0], rx[1], rx[2], rx[3]]);
        Some((icrc_roce(v6, ip, udp, body), rx))
    }

    /// For bytes that `IbPacketRepr::parse` accepted: (ICRC computed, ICRC carried, VCRC
    /// computed, VCRC carried), delimiting the packet by LRH PktLen. `None` if out of bounds.
    pub fn native_packet_crcs(bytes: &[u8]) -> Option<(u32, u32, u16, u16)> {
        let global = bytes.get(1)? & 0x3 == 0x3;
        let words = u16::from_be_bytes([*bytes.get(4)?, *bytes.get(5)?]) & 0x07FF;
        let end = usize::from(words) * 4;
        let packet = bytes.get(..end)?;
        let vcrc_rx = bytes.get(end..end + 2)?;
        let vcrc_rx = u16::from_le_bytes([vcrc_rx[0], vcrc_rx[1]]);
        let icrc_at = end.checked_sub(4)?;
        let rx = packet.get(icrc_at..)?;
        let icrc_rx = u32::from_le_bytes([rx[0], rx[1], rx[2], rx[3]]);
        let lrh = packet.get(..8)?;
        let (grh, bth_at) = if global {
            (Some(packet.get(8..48)?), 48)
        } else {
            (None, 8)
        };
        let body = packet.get(bth_at..icrc_at)?;
        Some((icrc_native(lrh, grh, body), icrc_rx, vcrc(packet), vcrc_rx))
    }
}

/// Emits with `emit` into a zeroed buffer of exactly `len` bytes, and again into a longer
/// buffer full of junk (a reused buffer may hold anything): the first `len` bytes must agree,
/// and the bytes past `len` must be left alone. Returns the emitted bytes.
pub fn emit_checked(len: usize, emit: impl Fn(&mut [u8])) -> Vec<u8> {
    let mut clean = vec![0u8; len];
    emit(&mut clean);
    let mut dirty = vec![0xA5u8; len + 5];
    emit(&mut dirty);
    assert_eq!(
        &dirty[..len],
        &clean[..],
        "emit output depends on what the buffer held before"
    );
    assert!(
        dirty[len..].iter().all(|&b| b == 0xA5),
        "emit wrote past buffer_len()"
    );
    clean
}

/// Checks a RoCEv2 packet that `RoceV2Repr::parse` accepted from `bytes`: it prints, its ICRC
/// verdict agrees with the reference ICRC, and it re-emits into bytes that parse back to the
/// same (normalized) repr with a good ICRC.
pub fn check_parsed_roce(bytes: &[u8], parsed: &Parsed<RoceV2Repr<'_>>) {
    assert!(display_len(&parsed.repr) > 0);
    let (want, rx) = reference::roce_datagram_icrc(bytes)
        .expect("parse accepted the datagram, so its length fields are in bounds");
    assert_eq!(rx, parsed.icrc, "received ICRC read from the wrong place");
    assert_eq!(
        parsed.icrc_ok,
        want == rx,
        "icrc_ok disagrees with the reference ICRC"
    );
    check_roce_roundtrip(&parsed.repr);
}

/// Emits `repr` (normalized) and checks that the bytes parse back to it with an ICRC that
/// both softib and the reference accept. Returns the emitted bytes.
pub fn check_roce_roundtrip(repr: &RoceV2Repr<'_>) -> Vec<u8> {
    let n = repr.normalized();
    assert_eq!(n.buffer_len(), repr.buffer_len());
    let buf = emit_checked(n.buffer_len(), |out| n.emit(out));
    let back = RoceV2Repr::parse(&buf)
        .unwrap_or_else(|e| panic!("emitted RoCEv2 packet does not parse: {e}\n{n:?}"));
    assert_eq!(back.repr, n, "parse(emit(repr)) != repr");
    assert!(back.icrc_ok, "ICRC of an emitted packet does not verify");
    let (want, rx) = reference::roce_datagram_icrc(&buf).expect("emitted lengths are consistent");
    assert_eq!(want, rx, "emitted ICRC differs from the reference ICRC");
    assert_eq!(display_len(&back.repr), display_len(&n));
    buf
}

/// Checks a native packet that `IbPacketRepr::parse` accepted from `bytes`, as
/// [`check_parsed_roce`] does, with the VCRC too.
pub fn check_parsed_native(bytes: &[u8], parsed: &Parsed<IbPacketRepr<'_>>) {
    assert!(display_len(&parsed.repr) > 0);
    let (icrc_want, icrc_rx, vcrc_want, vcrc_rx) = reference::native_packet_crcs(bytes)
        .expect("parse accepted the packet, so PktLen is in bounds");
    assert_eq!(icrc_rx, parsed.icrc);
    assert_eq!(parsed.icrc_ok, icrc_want == icrc_rx);
    assert_eq!(parsed.vcrc, Some(vcrc_rx));
    assert_eq!(parsed.vcrc_ok, Some(vcrc_want == vcrc_rx));
    check_native_roundtrip(&parsed.repr);
}

/// The largest native packet LRH PktLen (11 bits of 4-byte words) can describe, VCRC included.
pub const NATIVE_MAX_LEN: usize = 0x7FF * 4 + 2;

/// Emits `repr` (normalized) and checks that the bytes parse back to it with ICRC and VCRC
/// that softib and the reference accept. A packet too long for PktLen is only emitted.
pub fn check_native_roundtrip(repr: &IbPacketRepr<'_>) -> Vec<u8> {
    let n = repr.normalized();
    assert_eq!(n.buffer_len(), repr.buffer_len());
    let buf = emit_checked(n.buffer_len(), |out| n.emit(out));
    if buf.len() > NATIVE_MAX_LEN {
        return buf;
    }
    let back = IbPacketRepr::parse(&buf)
        .unwrap_or_else(|e| panic!("emitted native packet does not parse: {e}\n{n:?}"));
    assert_eq!(back.repr, n, "parse(emit(repr)) != repr");
    assert!(back.icrc_ok, "ICRC of an emitted packet does not verify");
    assert_eq!(back.vcrc_ok, Some(true), "VCRC of an emitted packet");
    let (iw, ir, vw, vr) = reference::native_packet_crcs(&buf).expect("consistent lengths");
    assert_eq!(iw, ir, "emitted ICRC differs from the reference ICRC");
    assert_eq!(vw, vr, "emitted VCRC differs from the reference VCRC");
    assert_eq!(display_len(&back.repr), display_len(&n));
    buf
}
