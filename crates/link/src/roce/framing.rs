//! The `framing` module deals with *RoCEv2 datagrams as the kernel carries them* (IBA Annex
//! A17; Linux `rxe_net.c`, `rxe_icrc.c`): the ICRC over the IP and UDP headers, the UDP source
//! port rxe uses per QP, the GRH area of a UD receive, the IB MTU an Ethernet MTU allows.
//!
//! A userspace sender does not write the IP and UDP headers — the kernel does — yet the ICRC
//! covers them. So the ICRC is computed over the headers the kernel *will* write:
//!
//! * IPv4: version 4, IHL 5, the TOS and TTL (masked anyway), Total Length, **Identification 0**
//!   and **DF**: Linux gives every datagram of an *unconnected* UDP socket with path-MTU
//!   discovery on (the default) the ID 0 and the DF flag (`ip_select_ident`); protocol 17, the
//!   addresses. The header checksum is masked. The segments of one UDP GSO send get the
//!   Identifications 0, 1, 2, ... instead ([`seal_for`], [`IdentPatch`]).
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
//! (docs/interop.md): when the check with the expected Identification fails, solve for the one
//! Identification that would make the ICRC match (`crc::roce_v4_ident_for_icrc`: a 16-unknown
//! linear solve, then an exact recomputation) and accept the packet if there is one. Every
//! other covered bit is still checked, but 16 of the ICRC's 32 bits are spent on the unknown:
//! a corrupted packet slips through with probability 2^-16 instead of 2^-32 (the Ethernet FCS
//! and the kernel's IPv4 header checksum still guard the link). IPv6 has no Identification, so
//! over IPv6 every ICRC is checked at full strength: use IPv6 addresses where that matters. A
//! receiver whose senders are all softib ([`Senders::Softib`], the simulator) does not solve.

use std::net::{IpAddr, SocketAddr};

use softib_wire::crc::{self, ICRC_LEN};
use softib_wire::ip::{Ipv4Repr, Ipv6Repr, PROTOCOL_UDP};
use softib_wire::{Gid, Mtu};

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

/// What the wire would have carried for a datagram handed over unsealed (for a capture): the
/// IP datagram with `data`'s headers, the `payload` left apart (with its pad) when there is one,
/// and a valid ICRC for Identification `ident`. `data` ends in the ICRC's room.
pub fn wire_datagram(
    src: SocketAddr,
    dst: SocketAddr,
    data: &[u8],
    payload: Option<&[u8]>,
    ident: u16,
) -> Option<Vec<u8>> {
    let mut c = data.to_vec();
    if let Some(p) = payload {
        let at = c.len().saturating_sub(ICRC_LEN);
        let pad = usize::from(softib_wire::packet::pad_for(p.len()));
        c.splice(at..at, p.iter().copied().chain(std::iter::repeat_n(0, pad)));
    }
    let body = c.len().checked_sub(ICRC_LEN)?;
    seal_for(src, dst, &mut c, body, ident)?;
    datagram(src, dst, &c, if src.is_ipv4() { ident } else { 0 })
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
/// `dst` sent alone (IPv4 Identification 0); returns the UDP payload length.
pub fn seal(src: SocketAddr, dst: SocketAddr, buf: &mut [u8], len: usize) -> Option<usize> {
    seal_for(src, dst, buf, len, 0)
}

/// [`seal`] for a datagram that will carry IPv4 Identification `ident`: the `ident`th segment
/// of a UDP GSO send (ignored over IPv6, which has no Identification).
pub fn seal_for(
    src: SocketAddr,
    dst: SocketAddr,
    buf: &mut [u8],
    len: usize,
    ident: u16,
) -> Option<usize> {
    let ident = if src.is_ipv4() { ident } else { 0 };
    let value = icrc_with_ident(src, dst, buf.get(..len)?, ident)?;
    crc::write_icrc(buf.get_mut(len..len + ICRC_LEN)?, value);
    Some(len + ICRC_LEN)
}

/// Why a received datagram's ICRC check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxError {
    /// Shorter than a BTH and an ICRC.
    TooShort,
    /// The ICRC does not match (corrupted, or a foreign IPv4 sender with a nonzero IP ID).
    BadIcrc,
    /// The source and destination address families differ.
    AddressFamily,
}

/// Who may have sent the datagrams a receiver checks, which decides how an IPv4 Identification
/// it cannot see is treated (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Senders {
    /// Anyone: rxe and RoCE NICs too, whose Identification is solved for.
    Any,
    /// Only softib, each datagram's index in its GSO run reaching the receiver as its sender
    /// queued it (the simulator): the ICRC is checked for exactly that Identification, at full
    /// strength.
    Softib,
}

/// Checks the ICRC of a received UDP payload from `src` to `dst`; returns the body (BTH
/// through pad) the engine takes.
pub fn open(src: SocketAddr, dst: SocketAddr, payload: &[u8]) -> Result<&[u8], RxError> {
    open_hinted(src, dst, payload, 0)
}

/// [`open`] for a datagram that most likely carried IPv4 Identification `ident`: the `ident`th
/// segment of a run the kernel coalesced (UDP GRO), which a softib sender sealed for that
/// Identification ([`seal_for`]). Tried first; then 0; then any (foreign senders).
pub fn open_hinted(
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    ident: u16,
) -> Result<&[u8], RxError> {
    open_from(src, dst, payload, ident, Senders::Any)
}

/// [`open_hinted`] for datagrams from `senders`.
pub fn open_from(
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    ident: u16,
    senders: Senders,
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
    if let (Senders::Any, IpAddr::V4(_)) = (senders, src.ip()) {
        if let Some(h) = headers(src, dst, payload.len(), 0) {
            let (ip, udp) = (&h.bytes[..h.ip_len], &h.bytes[h.ip_len..h.ip_len + 8]);
            if crc::roce_v4_ident_for_icrc(ip, udp, body, got).is_some() {
                return Ok(body);
            }
        }
    }
    Err(RxError::BadIcrc)
}

/// Re-seals IPv4 RoCEv2 datagrams sealed for Identification 0 (by [`seal`]) for the one the
/// kernel will really give them: the `n`th datagram of a UDP GSO run gets `n`
/// (`softib_net::batch`) — for a datagram sealed before its place in a run was known (one a
/// fault held back). The ICRC change depends only on the Identification and the length, and a
/// run's datagrams share their length, so the few lengths in use are remembered.
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

/// The group an IPv4 multicast GID names on RoCEv2 (`::ffff:a.b.c.d`, a.b.c.d in
/// 224.0.0.0/4: the kernel's `cma_iboe_set_mgid` for RoCEv2), if `gid` is one.
pub fn ipv4_group(gid: &Gid) -> Option<std::net::Ipv4Addr> {
    gid.to_ipv4()
        .map(std::net::Ipv4Addr::from)
        .filter(std::net::Ipv4Addr::is_multicast)
}

/// The MGID the engine files RoCEv2 IPv4 group `group` under: `ff0e::ffff:a.b.c.d`, the
/// kernel's RoCE (v1) mapping of the same group. The engine's multicast table takes only
/// GIDs whose first byte is 0xFF, and a RoCEv2 group's GID (`::ffff:a.b.c.d`) is not one.
pub fn engine_mgid(group: std::net::Ipv4Addr) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xff;
    g[1] = 0x0e;
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&group.octets());
    Gid(g)
}

/// The GRH area of a datagram that arrived for a multicast group: a GRH (the IPv6 layout)
/// from the sender's GID to the group's engine MGID, which the engine looks the group up by.
pub fn group_grh_area(from: SocketAddr, mgid: Gid, udp_payload_len: usize) -> [u8; 40] {
    let mut area = [0u8; 40];
    Ipv6Repr {
        traffic_class: 0,
        flow_label: 0,
        next_header: PROTOCOL_UDP,
        hop_limit: 64,
        src: gid_of(from.ip()).0,
        dst: mgid.0,
    }
    .emit(&mut area, 8 + udp_payload_len);
    area
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

/// The UDP source port the Linux rxe driver (6.1) uses for a packet of QP `lqpn`: for a
/// connected QP the port `rdma_get_udp_sport` derives from the path's flow label, or from the
/// two QP numbers ([`udp_source_port`]); for UD, 0xC000 plus the 14-bit `hash_32` of the QPN it
/// gives every QP at creation. Checked against the source ports in rxe's own captures.
pub fn rxe_source_port(ud: bool, flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    if ud {
        const GOLDEN_RATIO_32: u32 = 0x61C8_8647;
        0xC000 | ((lqpn.wrapping_mul(GOLDEN_RATIO_32) >> 18) & 0x3FFF) as u16
    } else {
        udp_source_port(flow_label, lqpn, rqpn)
    }
}

/// The largest IB MTU that fits an Ethernet MTU after IP, UDP, BTH and ICRC (rxe's
/// `eth_mtu_int_to_enum`: 1500 → 1024, 9000 → 4096).
pub fn ib_mtu_for(eth_mtu: u32) -> Mtu {
    let room = eth_mtu.saturating_sub(20 + 8 + 12 + 4 + 28);
    match room {
        r if r >= 4096 => Mtu::Mtu4096,
        r if r >= 2048 => Mtu::Mtu2048,
        r if r >= 1024 => Mtu::Mtu1024,
        r if r >= 512 => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// The 40 bytes a UD receive buffer starts with on RoCEv2 (what rxe writes): for IPv4, 20 zero
/// bytes and the IPv4 header; for IPv6, the IPv6 header.
pub fn grh_area(from: SocketAddr, to: SocketAddr, udp_payload_len: usize) -> Option<[u8; 40]> {
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
    fn an_ipv4_group_gid_maps_to_an_engine_mgid_and_back() {
        let g = gid_of(IpAddr::from([239, 1, 2, 3]));
        let group = ipv4_group(&g).unwrap();
        assert_eq!(group, std::net::Ipv4Addr::new(239, 1, 2, 3));
        let m = engine_mgid(group);
        assert_eq!(m.0[..2], [0xff, 0x0e]);
        assert_eq!(m.0[12..], [239, 1, 2, 3]);
        assert!(ipv4_group(&gid_of(IpAddr::from([10, 0, 0, 1]))).is_none());
        let area = group_grh_area(SocketAddr::from(([10, 0, 0, 1], 4791)), m, 100);
        assert_eq!(area[24..40], m.0);
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
    fn source_ports_are_the_ones_rxe_sends_from() {
        // ../shared/captures/rxe: ibv_rc_pingpong between QPs 0x1b and 0x1b went from port
        // 49881 both ways; ibv_ud_pingpong's QP 0x1c sent from 60539.
        assert_eq!(rxe_source_port(false, 0, 0x1b, 0x1b), 49881);
        assert_eq!(rxe_source_port(true, 0, 0x1c, 0x1c), 60539);
        for q in [1u32, 0x1c, 0xff_ffff] {
            assert!(rxe_source_port(true, 0, q, 0) >= 0xC000);
        }
    }

    #[test]
    fn a_segment_sealed_for_its_identification_is_what_the_wire_checks() {
        let src: SocketAddr = "10.0.0.1:49881".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        let mut a: Vec<u8> = (0..1024 + 16).map(|i| (i * 7 + 3) as u8).collect();
        a[..12].copy_from_slice(&unhex("0400ffff0000001280af47ee"));
        let mut b = a.clone();
        // Sealed for 5 at once, or for 0 and then patched: the same bytes.
        let n = seal_for(src, dst, &mut a, 1024 + 12, 5).unwrap();
        seal(src, dst, &mut b, 1024 + 12).unwrap();
        IdentPatch::default().apply(&mut b[..n], 5);
        assert_eq!(a, b);
        let wire = datagram(src, dst, &a[..n], 5).unwrap();
        assert!(RoceV2Repr::parse(&wire).unwrap().icrc_ok);
        // A receiver of softib senders only checks exactly the Identification it was told;
        // one that also takes foreign senders solves for it.
        let body = &a[..1024 + 12];
        assert_eq!(open_from(src, dst, &a[..n], 5, Senders::Softib), Ok(body));
        assert_eq!(
            open_from(src, dst, &a[..n], 0, Senders::Softib),
            Err(RxError::BadIcrc)
        );
        assert_eq!(open_from(src, dst, &a[..n], 0, Senders::Any), Ok(body));
        // Over IPv6 the Identification means nothing.
        let (s6, d6): (SocketAddr, SocketAddr) = (
            "[fd00::1]:49881".parse().unwrap(),
            "[fd00::2]:4791".parse().unwrap(),
        );
        let n = seal_for(s6, d6, &mut b, 1024 + 12, 5).unwrap();
        assert_eq!(open_from(s6, d6, &b[..n], 0, Senders::Softib), Ok(body));
        // Families that differ cannot be sealed or opened.
        assert_eq!(seal_for(src, d6, &mut b, 1024 + 12, 0), None);
        assert_eq!(open(src, d6, &b[..n]), Err(RxError::AddressFamily));
    }

    #[test]
    fn an_unsealed_handover_is_captured_as_the_wire_would_carry_it() {
        let src: SocketAddr = "10.0.0.1:49881".parse().unwrap();
        let dst: SocketAddr = "10.0.0.2:4791".parse().unwrap();
        // RDMA WRITE ONLY headers (BTH + RETH), the ICRC's room, and a 5-byte payload apart.
        let mut headers = unhex("0a00ffff0000001280af47ee");
        headers.extend_from_slice(&[0; 16]);
        headers[0] = 0x0a;
        headers[1] |= 3 << 4; // pad count 3
        headers.extend_from_slice(&[0; 4]);
        let d = wire_datagram(src, dst, &headers, Some(b"hello"), 2).unwrap();
        let parsed = RoceV2Repr::parse(&d).unwrap();
        assert!(parsed.icrc_ok);
        assert_eq!(d.len(), 28 + 12 + 16 + 5 + 3 + 4);
        assert_eq!(&d[28 + 28..28 + 33], b"hello");
        assert_eq!(u16::from_be_bytes([d[4], d[5]]), 2);
    }

    #[test]
    fn ib_mtu_follows_the_ethernet_mtu_as_rxe_maps_it() {
        assert_eq!(ib_mtu_for(1500), Mtu::Mtu1024);
        assert_eq!(ib_mtu_for(9000), Mtu::Mtu4096);
        assert_eq!(ib_mtu_for(65536), Mtu::Mtu4096);
        assert_eq!(ib_mtu_for(0), Mtu::Mtu256);
    }

    #[test]
    fn gid_ip_roundtrip() {
        let ip: IpAddr = "127.0.0.2".parse().unwrap();
        assert_eq!(ip_of(&gid_of(ip)), ip);
        let ip6: IpAddr = "fe80::1".parse().unwrap();
        assert_eq!(ip_of(&gid_of(ip6)), ip6);
    }
}
