//! RoCEv2 framing over a kernel UDP socket (IBA Annex A17; Linux `rxe_net.c`, `rxe_icrc.c`).
//!
//! A userspace sender does not write the IP and UDP headers — the kernel does — yet the ICRC
//! covers them. So the ICRC is computed over the headers the kernel *will* write:
//!
//! * IPv4: version 4, IHL 5, the TOS and TTL (masked anyway), Total Length, **Identification 0**
//!   and **DF**: Linux gives every datagram of an *unconnected* UDP socket with path-MTU
//!   discovery on (the default) the ID 0 and the DF flag (`ip_select_ident`); protocol 17, the
//!   addresses. The header checksum is masked.
//! * IPv6: version 6, payload length, next header 17, the addresses; traffic class, flow label
//!   and hop limit are masked.
//! * UDP: the ports and length; the checksum is masked.
//!
//! A receiver reconstructs the same headers from what `recvfrom` reports (the peer's address and
//! port) and the address its socket is bound to. This verifies every packet from a softib peer
//! exactly.
//!
//! **Foreign IPv4 senders.** The Linux rxe driver (and RoCE NICs) write a nonzero IPv4
//! Identification, which the ICRC covers and a UDP socket does not report. softib's policy
//! (docs/interop.md): when the check with Identification 0 fails, solve for the one
//! Identification that would make the ICRC match (`crc::roce_v4_ident_for_icrc`: a 16-unknown
//! linear solve, then an exact recomputation) and accept the packet if there is one. Every
//! other covered bit is still checked, but 16 of the ICRC's 32 bits are spent on the unknown:
//! a corrupted packet slips through with probability 2^-16 instead of 2^-32 (the Ethernet FCS
//! and the kernel's IPv4 header checksum still guard the link). IPv6 has no Identification, so
//! over IPv6 every ICRC is checked at full strength: use IPv6 addresses where that matters.
//!
//! The UDP source port is the one rxe uses per QP (`device::rxe_source_port`): a device sends
//! from a socket bound to that port (one per port in use, up to a limit beyond which QPs share
//! the device's own port), and receives everything on its own port (4791).

use std::net::{IpAddr, SocketAddr};

use softib_wire::crc::{self, ICRC_LEN};
use softib_wire::ip::{Ipv4Repr, Ipv6Repr, PROTOCOL_UDP};
use softib_wire::Gid;

/// The IANA port of RoCEv2.
pub const ROCE_V2_PORT: u16 = softib_wire::ip::ROCE_V2_UDP_PORT;

/// The IP and UDP headers as the kernel writes them for a datagram of `payload_len` bytes from
/// `src` to `dst`, in a buffer (`len` bytes used): the bytes the ICRC covers.
struct Headers {
    bytes: [u8; 48],
    ip_len: usize,
}

fn headers(src: SocketAddr, dst: SocketAddr, payload_len: usize, ident: u16) -> Option<Headers> {
    let mut bytes = [0u8; 48];
    let ip_len = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            Ipv4Repr {
                tos: 0,
                ident,
                dont_frag: true,
                ttl: 64,
                protocol: PROTOCOL_UDP,
                src: s.octets(),
                dst: d.octets(),
            }
            .emit(&mut bytes, 8 + payload_len);
            20
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            Ipv6Repr {
                traffic_class: 0,
                flow_label: 0,
                next_header: PROTOCOL_UDP,
                hop_limit: 64,
                src: s.octets(),
                dst: d.octets(),
            }
            .emit(&mut bytes, 8 + payload_len);
            40
        }
        _ => return None,
    };
    let udp = &mut bytes[ip_len..ip_len + 8];
    udp[0..2].copy_from_slice(&src.port().to_be_bytes());
    udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
    udp[4..6].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    Some(Headers { bytes, ip_len })
}

/// The whole IP datagram the kernel puts on the wire for `payload` from `src` to `dst` with
/// IPv4 Identification `ident` (for captures): the headers the ICRC was computed over, then the
/// payload. The UDP checksum is left 0, which IPv4 allows; captures of IPv6 show it as missing.
pub fn datagram(src: SocketAddr, dst: SocketAddr, payload: &[u8], ident: u16) -> Option<Vec<u8>> {
    let h = headers(src, dst, payload.len(), ident)?;
    let mut v = Vec::with_capacity(h.ip_len + 8 + payload.len());
    v.extend_from_slice(&h.bytes[..h.ip_len + 8]);
    v.extend_from_slice(payload);
    Some(v)
}

/// The ICRC of a RoCEv2 packet whose UDP payload is `body` followed by the 4-byte ICRC (sent
/// with IPv4 Identification 0).
pub fn icrc(src: SocketAddr, dst: SocketAddr, body: &[u8]) -> Option<u32> {
    icrc_with_ident(src, dst, body, 0)
}

fn icrc_with_ident(src: SocketAddr, dst: SocketAddr, body: &[u8], ident: u16) -> Option<u32> {
    let h = headers(src, dst, body.len() + ICRC_LEN, ident)?;
    let ip = &h.bytes[..h.ip_len];
    let udp = &h.bytes[h.ip_len..h.ip_len + 8];
    Some(if src.is_ipv4() {
        crc::icrc_roce_v4(ip, udp, body)
    } else {
        crc::icrc_roce_v6(ip, udp, body)
    })
}

/// Appends the ICRC to `buf[..len]` (which must have 4 more bytes) for a datagram from `src` to
/// `dst`; returns the UDP payload length.
pub fn seal(src: SocketAddr, dst: SocketAddr, buf: &mut [u8], len: usize) -> Option<usize> {
    let value = icrc(src, dst, &buf[..len])?;
    crc::write_icrc(buf.get_mut(len..len + ICRC_LEN)?, value);
    Some(len + ICRC_LEN)
}

/// Why a received datagram was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError {
    /// Shorter than a BTH and an ICRC.
    TooShort,
    /// The ICRC does not match (corrupted, or a foreign IPv4 sender with a nonzero IP ID).
    BadIcrc,
    /// The source and destination address families differ.
    AddressFamily,
}

/// Checks the ICRC of a received UDP payload from `src` to `dst`; returns the body (BTH
/// through pad) the engine takes.
pub fn open(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Result<&[u8], RxError> {
    open_hinted(src, dst, payload, 0)
}

/// [`open`] for a datagram that most likely carried IPv4 Identification `ident`: the `ident`th
/// segment of a run the kernel coalesced (UDP GRO), which a softib sender sealed for that
/// Identification (see [`IdentPatch`]). Tried first; then 0; then any (foreign senders).
pub fn open_hinted(
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    ident: u16,
) -> Result<&[u8], RxError> {
    if payload.len() < 12 + ICRC_LEN {
        return Err(RxError::TooShort);
    }
    let (body, tail) = payload.split_at(payload.len() - ICRC_LEN);
    let ident = if src.is_ipv4() { ident } else { 0 };
    let want = icrc_with_ident(src, dst, body, ident).ok_or(RxError::AddressFamily)?;
    let got = crc::read_icrc(tail).ok_or(RxError::TooShort)?;
    if got == want {
        return Ok(body);
    }
    // A foreign IPv4 sender's nonzero Identification (see the module docs); the solve also
    // covers Identification 0 when the hint was another.
    if let (IpAddr::V4(_), Some(h)) = (src.ip(), headers(src, dst, payload.len(), 0)) {
        let (ip, udp) = (&h.bytes[..h.ip_len], &h.bytes[h.ip_len..h.ip_len + 8]);
        if crc::roce_v4_ident_for_icrc(ip, udp, body, got).is_some() {
            return Ok(body);
        }
    }
    Err(RxError::BadIcrc)
}

/// Re-seals IPv4 RoCEv2 datagrams sealed for Identification 0 (by [`seal`]) for the one the
/// kernel will really give them: the `n`th datagram of a UDP GSO run gets `n`
/// (`softib_net::batch`). The ICRC change depends only on the Identification and the length,
/// and a run's datagrams share their length, so the few lengths in use are remembered.
#[derive(Debug, Default)]
pub struct IdentPatch {
    recent: [Option<crc::Ipv4IdentEffect>; 4],
    next: usize,
}

impl IdentPatch {
    /// Makes `payload` (a UDP payload ending in its ICRC, sent over IPv4 with a 20-byte header)
    /// carry the ICRC for Identification `ident`. Nothing to do for 0.
    pub fn apply(&mut self, payload: &mut [u8], ident: u16) {
        let Some(body_len) = payload.len().checked_sub(ICRC_LEN) else {
            return;
        };
        if ident == 0 {
            return;
        }
        // After the Identification: the rest of the IPv4 header (14), UDP (8), the body.
        let after = 14 + 8 + body_len;
        let effect = match self.recent.iter().flatten().find(|e| e.after == after) {
            Some(e) => *e,
            None => {
                let e = crc::Ipv4IdentEffect::new(after);
                self.recent[self.next] = Some(e);
                self.next = (self.next + 1) % self.recent.len();
                e
            }
        };
        let tail = &mut payload[body_len..];
        if let Some(old) = crc::read_icrc(tail) {
            crc::write_icrc(tail, old ^ effect.delta(ident));
        }
    }
}

/// The RoCEv2 GID of an IP address: IPv4-mapped for IPv4 (IBA A17.8), the address itself for
/// IPv6.
pub fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => Gid::from_ipv4(v4.octets()),
        IpAddr::V6(v6) => Gid(v6.octets()),
    }
}

/// The IP address a RoCEv2 GID stands for.
pub fn ip_of(gid: &Gid) -> IpAddr {
    match gid.to_ipv4() {
        Some(v4) => IpAddr::from(v4),
        None => IpAddr::from(gid.0),
    }
}

/// The UDP source port rdma-core/rxe derive from a flow label or the QP numbers
/// (`rdma_get_udp_sport`): a value in 0xC000..=0xFFFF.
pub fn udp_source_port(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    let mut fl = u64::from(flow_label & 0xF_FFFF);
    if fl == 0 {
        let v = u64::from(lqpn) * u64::from(rqpn);
        fl = v ^ (v >> 20) ^ (v >> 40);
        fl &= 0xF_FFFF;
    }
    (((fl & 0x3FFF) ^ ((fl & 0xF_C000) >> 14)) as u16) | 0xC000
}

/// The 40 bytes a UD receive buffer starts with on RoCEv2 (what rxe writes): for IPv4, 20 zero
/// bytes and the IPv4 header; for IPv6, the IPv6 header.
pub fn grh_area(from: SocketAddr, to: SocketAddr, udp_payload_len: usize) -> Option<[u8; 40]> {
    use softib_wire::ip::{Ipv4Repr, Ipv6Repr, PROTOCOL_UDP};
    let mut area = [0u8; 40];
    match (from, to) {
        (SocketAddr::V4(s), SocketAddr::V4(d)) => Ipv4Repr {
            tos: 0,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            src: s.ip().octets(),
            dst: d.ip().octets(),
        }
        .emit(&mut area[20..], 8 + udp_payload_len),
        (SocketAddr::V6(s), SocketAddr::V6(d)) => Ipv6Repr {
            traffic_class: 0,
            flow_label: 0,
            next_header: PROTOCOL_UDP,
            hop_limit: 64,
            src: s.ip().octets(),
            dst: d.ip().octets(),
        }
        .emit(&mut area, 8 + udp_payload_len),
        _ => return None,
    }
    Some(area)
}

#[cfg(test)]
mod tests {
    use super::*;
    use softib_wire::packet::RoceV2Repr;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn sealed_packets_match_the_wire_crate_with_ip_id_zero() {
        let src: SocketAddr = "10.0.0.1:4791".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        // An RC SEND_ONLY body from rxe (BTH + 64 bytes).
        let rxe = unhex("4500006c31d640004011f40e0a4d00010a4d0002c14412b7005800000400ffff0000001280af47ee7ecc643fdc88e56cf200beceb151642e4f675f0f259dba236e6e6524f2e06370acc7b0885095f44295b2104704747553dcd46201711c25df8a8a037c6a66ed164c0ea981");
        let body = &rxe[28..rxe.len() - 4];
        let mut buf = body.to_vec();
        buf.extend_from_slice(&[0; 4]);
        let n = seal(src, dst, &mut buf, body.len()).unwrap();
        assert_eq!(open(src, dst, &buf[..n]), Ok(body));
        // The same packet as the kernel would put on the wire parses with a valid ICRC.
        let mut datagram = vec![0u8; 28];
        let h = headers(src, dst, n, 0).unwrap();
        datagram.copy_from_slice(&h.bytes[..28]);
        datagram.extend_from_slice(&buf[..n]);
        assert!(RoceV2Repr::parse(&datagram).unwrap().icrc_ok);
        // A flipped bit, or another source port, fails.
        let mut bad = buf.clone();
        bad[20] ^= 1;
        assert_eq!(open(src, dst, &bad[..n]), Err(RxError::BadIcrc));
        let other: SocketAddr = "10.0.0.1:4792".parse().unwrap();
        assert_eq!(open(other, dst, &buf[..n]), Err(RxError::BadIcrc));
    }

    #[test]
    fn rxe_packets_with_a_nonzero_ip_id_are_accepted() {
        // rc_send_lat.pcap: rxe at 10.77.0.1 sent this with IPv4 Identification 0x31d6.
        let rxe = unhex("4500006c31d640004011f40e0a4d00010a4d0002c14412b7005800000400ffff0000001280af47ee7ecc643fdc88e56cf200beceb151642e4f675f0f259dba236e6e6524f2e06370acc7b0885095f44295b2104704747553dcd46201711c25df8a8a037c6a66ed164c0ea981");
        let src: SocketAddr = "10.77.0.1:49476".parse().unwrap();
        let dst: SocketAddr = "10.77.0.2:4791".parse().unwrap();
        let payload = &rxe[28..];
        assert_eq!(open(src, dst, payload), Ok(&payload[..payload.len() - 4]));
        // Corruption anywhere else is still caught.
        let mut bad = payload.to_vec();
        bad[30] ^= 0x10;
        assert_eq!(open(src, dst, &bad), Err(RxError::BadIcrc));
        let wrong_port: SocketAddr = "10.77.0.1:49477".parse().unwrap();
        assert_eq!(open(wrong_port, dst, payload), Err(RxError::BadIcrc));
    }

    #[test]
    fn a_gso_segment_is_sealed_for_the_identification_the_kernel_gives_it() {
        let src: SocketAddr = "10.0.0.1:49881".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let mut patch = IdentPatch::default();
        for (len, ident) in [
            (12usize, 1u16),
            (1024 + 12, 2),
            (4096 + 12, 14),
            (4096 + 12, 63),
        ] {
            // An RC SEND_ONLY BTH (rxe's), then any payload.
            let mut buf: Vec<u8> = (0..len + 4).map(|i| (i * 31 + 7) as u8).collect();
            buf[..12].copy_from_slice(&unhex("0400ffff0000001280af47ee"));
            let n = seal(src, dst, &mut buf, len).unwrap();
            patch.apply(&mut buf[..n], ident);
            // What the wire carries: the header with that Identification, a valid ICRC.
            let mut wire = datagram(src, dst, &buf[..n], ident).unwrap();
            assert!(RoceV2Repr::parse(&wire).unwrap().icrc_ok, "{len} {ident}");
            // A receiver told the index checks it at once; one that is not still accepts it.
            assert_eq!(open_hinted(src, dst, &buf[..n], ident), Ok(&buf[..len]));
            assert_eq!(open(src, dst, &buf[..n]), Ok(&buf[..len]));
            // Identification 0 on the wire would not match.
            wire[4] = 0;
            wire[5] = 0;
            assert!(!RoceV2Repr::parse(&wire).unwrap().icrc_ok);
        }
    }

    #[test]
    fn rxe_source_port_formula() {
        let p = udp_source_port(0, 0x11, 0x12);
        assert!(p >= 0xC000);
        assert_eq!(
            udp_source_port(0x12345, 0, 0),
            ((0x12345 & 0x3FFF) ^ (0x12345 >> 14)) as u16 | 0xC000
        );
    }

    #[test]
    fn gid_ip_roundtrip() {
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(ip_of(&gid_of(ip)), ip);
        let ip6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_of(&gid_of(ip6)), ip6);
    }
}
