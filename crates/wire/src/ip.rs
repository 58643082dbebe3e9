//! The Ethernet, IPv4, IPv6 and UDP headers that carry RoCEv2 (IBA Annex A17), just enough of
//! each to frame RoCEv2 packets, compute their ICRC and decode captures.
//!
//! Parsing follows the crate's contract: the `parse` functions check every length they use and
//! never panic; `emit` functions require a buffer of at least `HEADER_LEN` bytes.

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::{Error, Result};

/// The UDP destination port of RoCEv2 (IANA "roce").
pub const ROCE_V2_UDP_PORT: u16 = 4791;
/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

/// EtherType values a RoCE capture contains.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// IPv6.
    pub const IPV6: u16 = 0x86DD;
    /// IEEE 802.1Q VLAN tag.
    pub const VLAN: u16 = 0x8100;
    /// IEEE 802.1ad service VLAN tag.
    pub const QINQ: u16 = 0x88A8;
    /// RoCE v1 (IB GRH directly over Ethernet).
    pub const ROCE_V1: u16 = 0x8915;
}

/// An Ethernet II header, with any 802.1Q/802.1ad tags skipped over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// The EtherType after the VLAN tags.
    pub ethertype: u16,
    /// The VLAN ID of the innermost tag, if tagged.
    pub vlan: Option<u16>,
}

impl EthernetRepr {
    /// Length of an untagged header.
    pub const HEADER_LEN: usize = 14;

    /// Parses an Ethernet frame; returns the header and the bytes after it.
    pub fn parse(frame: &[u8]) -> Result<(EthernetRepr, &[u8])> {
        if frame.len() < Self::HEADER_LEN {
            return Err(Error::Truncated("Ethernet header"));
        }
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        src.copy_from_slice(&frame[6..12]);
        let mut at = 12;
        let mut ethertype = read_u16(frame, at);
        let mut vlan = None;
        while ethertype == ethertype::VLAN || ethertype == ethertype::QINQ {
            if frame.len() < at + 6 {
                return Err(Error::Truncated("802.1Q tag"));
            }
            vlan = Some(read_u16(frame, at + 2) & 0x0FFF);
            at += 4;
            ethertype = read_u16(frame, at);
        }
        let repr = EthernetRepr {
            dst,
            src,
            ethertype,
            vlan,
        };
        Ok((repr, &frame[at + 2..]))
    }

    /// Writes an untagged header (`vlan` must be `None`; tags are not emitted).
    pub fn emit(&self, out: &mut [u8]) {
        out[0..6].copy_from_slice(&self.dst);
        out[6..12].copy_from_slice(&self.src);
        write_u16(out, 12, self.ethertype);
    }
}

/// The fields of an IPv4 header (RFC 791) that RoCEv2 uses. Options are not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// DSCP and ECN (the old TOS byte). RoCEv2 copies the GRH traffic class here.
    pub tos: u8,
    /// Identification. Covered by the ICRC.
    pub ident: u16,
    /// The Don't Fragment flag (rxe always sets it).
    pub dont_frag: bool,
    /// Time to live (the GRH hop limit).
    pub ttl: u8,
    /// The protocol of the payload.
    pub protocol: u8,
    /// Source address.
    pub src: [u8; 4],
    /// Destination address.
    pub dst: [u8; 4],
}

impl Ipv4Repr {
    /// Length of a header without options.
    pub const HEADER_LEN: usize = 20;

    /// Parses an IPv4 datagram; returns the header and its payload (trailing link-layer padding
    /// beyond Total Length is cut off). The header checksum is not verified: RoCEv2 does not
    /// depend on it and captures from offloading NICs often carry a wrong one.
    pub fn parse(datagram: &[u8]) -> Result<(Ipv4Repr, &[u8])> {
        if datagram.len() < Self::HEADER_LEN {
            return Err(Error::Truncated("IPv4 header"));
        }
        if datagram[0] >> 4 != 4 {
            return Err(Error::Malformed("IPv4 version is not 4"));
        }
        let ihl = usize::from(datagram[0] & 0x0F) * 4;
        if ihl < Self::HEADER_LEN {
            return Err(Error::Malformed("IPv4 IHL below 5"));
        }
        if ihl != Self::HEADER_LEN {
            return Err(Error::Unsupported("IPv4 options"));
        }
        let total = usize::from(read_u16(datagram, 2));
        if total < ihl {
            return Err(Error::Malformed(
                "IPv4 Total Length shorter than its header",
            ));
        }
        if total > datagram.len() {
            return Err(Error::Truncated(
                "IPv4 payload (Total Length beyond the capture)",
            ));
        }
        let flags_frag = read_u16(datagram, 6);
        if flags_frag & 0x3FFF != 0 {
            return Err(Error::Unsupported("IPv4 fragment"));
        }
        let repr = Ipv4Repr {
            tos: datagram[1],
            ident: read_u16(datagram, 4),
            dont_frag: flags_frag & 0x4000 != 0,
            ttl: datagram[8],
            protocol: datagram[9],
            src: [datagram[12], datagram[13], datagram[14], datagram[15]],
            dst: [datagram[16], datagram[17], datagram[18], datagram[19]],
        };
        Ok((repr, &datagram[ihl..total]))
    }

    /// Writes the header for a payload of `payload_len` bytes, with a correct header checksum.
    pub fn emit(&self, out: &mut [u8], payload_len: usize) {
        out[0] = 0x45;
        out[1] = self.tos;
        write_u16(out, 2, (Self::HEADER_LEN + payload_len) as u16);
        write_u16(out, 4, self.ident);
        write_u16(out, 6, if self.dont_frag { 0x4000 } else { 0 });
        out[8] = self.ttl;
        out[9] = self.protocol;
        write_u16(out, 10, 0);
        out[12..16].copy_from_slice(&self.src);
        out[16..20].copy_from_slice(&self.dst);
        let checksum = !fold(sum_words(&out[..Self::HEADER_LEN]));
        write_u16(out, 10, checksum);
    }
}

/// The fields of an IPv6 header (RFC 8200). Extension headers are not supported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Traffic class (the GRH traffic class).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// The protocol of the payload.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source address.
    pub src: [u8; 16],
    /// Destination address.
    pub dst: [u8; 16],
}

impl Ipv6Repr {
    /// Length of the fixed header.
    pub const HEADER_LEN: usize = 40;

    /// Parses an IPv6 packet; returns the header and its payload (trailing bytes beyond Payload
    /// Length are cut off).
    pub fn parse(packet: &[u8]) -> Result<(Ipv6Repr, &[u8])> {
        if packet.len() < Self::HEADER_LEN {
            return Err(Error::Truncated("IPv6 header"));
        }
        let first = read_u32(packet, 0);
        if first >> 28 != 6 {
            return Err(Error::Malformed("IPv6 version is not 6"));
        }
        let payload_len = usize::from(read_u16(packet, 4));
        if Self::HEADER_LEN + payload_len > packet.len() {
            return Err(Error::Truncated(
                "IPv6 payload (Payload Length beyond the capture)",
            ));
        }
        let mut src = [0u8; 16];
        let mut dst = [0u8; 16];
        src.copy_from_slice(&packet[8..24]);
        dst.copy_from_slice(&packet[24..40]);
        let repr = Ipv6Repr {
            traffic_class: (first >> 20) as u8,
            flow_label: first & 0x000F_FFFF,
            next_header: packet[6],
            hop_limit: packet[7],
            src,
            dst,
        };
        Ok((
            repr,
            &packet[Self::HEADER_LEN..Self::HEADER_LEN + payload_len],
        ))
    }

    /// Writes the header for a payload of `payload_len` bytes.
    pub fn emit(&self, out: &mut [u8], payload_len: usize) {
        let first =
            (6u32 << 28) | (u32::from(self.traffic_class) << 20) | (self.flow_label & 0x000F_FFFF);
        write_u32(out, 0, first);
        write_u16(out, 4, payload_len as u16);
        out[6] = self.next_header;
        out[7] = self.hop_limit;
        out[8..24].copy_from_slice(&self.src);
        out[24..40].copy_from_slice(&self.dst);
    }
}

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Parses an IPv4 or IPv6 datagram by its version nibble.
    pub fn parse(datagram: &[u8]) -> Result<(IpRepr, &[u8])> {
        match datagram.first().map(|b| b >> 4) {
            None => Err(Error::Truncated("IP header")),
            Some(4) => Ipv4Repr::parse(datagram).map(|(r, p)| (IpRepr::V4(r), p)),
            Some(6) => Ipv6Repr::parse(datagram).map(|(r, p)| (IpRepr::V6(r), p)),
            Some(_) => Err(Error::Malformed("IP version is neither 4 nor 6")),
        }
    }

    /// The header length.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => Ipv4Repr::HEADER_LEN,
            IpRepr::V6(_) => Ipv6Repr::HEADER_LEN,
        }
    }

    /// The protocol of the payload.
    pub fn protocol(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.protocol,
            IpRepr::V6(r) => r.next_header,
        }
    }

    /// Writes the header for a payload of `payload_len` bytes.
    pub fn emit(&self, out: &mut [u8], payload_len: usize) {
        match self {
            IpRepr::V4(r) => r.emit(out, payload_len),
            IpRepr::V6(r) => r.emit(out, payload_len),
        }
    }
}

/// A UDP header (RFC 768). The length is derived from the payload when emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (RoCEv2: entropy from the QPNs, 0xC000..=0xFFFF).
    pub src_port: u16,
    /// Destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// The checksum as carried (0 = none, allowed over IPv4; rxe sends 0). See
    /// [`udp_checksum`] to compute a real one.
    pub checksum: u16,
}

impl UdpRepr {
    /// Length of the header.
    pub const HEADER_LEN: usize = 8;

    /// Parses a UDP datagram; returns the header and the payload (as long as the UDP Length
    /// field says).
    pub fn parse(datagram: &[u8]) -> Result<(UdpRepr, &[u8])> {
        if datagram.len() < Self::HEADER_LEN {
            return Err(Error::Truncated("UDP header"));
        }
        let len = usize::from(read_u16(datagram, 4));
        if len < Self::HEADER_LEN {
            return Err(Error::Malformed("UDP Length shorter than its header"));
        }
        if len > datagram.len() {
            return Err(Error::Truncated(
                "UDP payload (Length beyond the IP payload)",
            ));
        }
        let repr = UdpRepr {
            src_port: read_u16(datagram, 0),
            dst_port: read_u16(datagram, 2),
            checksum: read_u16(datagram, 6),
        };
        Ok((repr, &datagram[Self::HEADER_LEN..len]))
    }

    /// Writes the header for a payload of `payload_len` bytes.
    pub fn emit(&self, out: &mut [u8], payload_len: usize) {
        write_u16(out, 0, self.src_port);
        write_u16(out, 2, self.dst_port);
        write_u16(out, 4, (Self::HEADER_LEN + payload_len) as u16);
        write_u16(out, 6, self.checksum);
    }
}

fn sum_words(bytes: &[u8]) -> u32 {
    let mut sum = 0u32;
    let mut chunks = bytes.chunks_exact(2);
    for c in &mut chunks {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([c[0], c[1]])));
    }
    if let [last] = chunks.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// The UDP checksum (RFC 768 / RFC 8200 §8.1) of `udp_datagram` (header with any checksum
/// value, then payload) sent from `ip`: the pseudo-header sum over addresses, protocol and
/// length. A computed 0 is sent as 0xFFFF.
pub fn udp_checksum(ip: &IpRepr, udp_datagram: &[u8]) -> u16 {
    let len = udp_datagram.len() as u32;
    let mut sum = match ip {
        IpRepr::V4(r) => sum_words(&r.src) + sum_words(&r.dst),
        IpRepr::V6(r) => sum_words(&r.src) + sum_words(&r.dst),
    };
    sum = sum.wrapping_add(u32::from(PROTOCOL_UDP)).wrapping_add(len);
    sum = sum.wrapping_add(sum_words(udp_datagram.get(..6).unwrap_or(udp_datagram)));
    sum = sum.wrapping_add(sum_words(udp_datagram.get(8..).unwrap_or(&[])));
    match !fold(sum) {
        0 => 0xFFFF,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // IPv4 and UDP headers of an RC SEND_ONLY from the Linux rxe driver (rc_send_lat.pcap).
    static IPV4_UDP: [u8; 28] = [
        0x45, 0x00, 0x00, 0x6c, 0x31, 0xd6, 0x40, 0x00, 0x40, 0x11, 0xf4, 0x0e, 0x0a, 0x4d, 0x00,
        0x01, 0x0a, 0x4d, 0x00, 0x02, 0xc1, 0x44, 0x12, 0xb7, 0x00, 0x58, 0x00, 0x00,
    ];

    #[test]
    fn ipv4_roundtrip_with_checksum() {
        let mut datagram = std::vec::Vec::from(&IPV4_UDP[..]);
        datagram.resize(0x6c, 0);
        let (ip, payload) = Ipv4Repr::parse(&datagram).unwrap();
        assert_eq!(ip.ident, 0x31d6);
        assert!(ip.dont_frag);
        assert_eq!(ip.ttl, 64);
        assert_eq!(ip.src, [10, 77, 0, 1]);
        let (udp, body) = UdpRepr::parse(payload).unwrap();
        assert_eq!(udp.src_port, 0xc144);
        assert_eq!(udp.dst_port, ROCE_V2_UDP_PORT);
        assert_eq!(body.len(), 0x58 - 8);
        let mut out = [0u8; 28];
        ip.emit(&mut out, payload.len());
        udp.emit(&mut out[20..], body.len());
        assert_eq!(out, IPV4_UDP, "header checksum 0xf40e recomputed");
    }

    #[test]
    fn truncations_are_errors() {
        assert!(Ipv4Repr::parse(&IPV4_UDP[..19]).is_err());
        assert!(
            Ipv4Repr::parse(&IPV4_UDP).is_err(),
            "Total Length beyond data"
        );
        assert!(Ipv6Repr::parse(&[0x60; 39]).is_err());
        assert!(UdpRepr::parse(&IPV4_UDP[20..27]).is_err());
        assert!(EthernetRepr::parse(&[0u8; 13]).is_err());
        assert!(IpRepr::parse(&[]).is_err());
        let tagged = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x81, 0x00, 0x00];
        assert!(EthernetRepr::parse(&tagged).is_err());
    }

    #[test]
    fn vlan_tag_is_skipped() {
        let mut frame = [0u8; 18];
        frame[12] = 0x81;
        frame[14] = 0x00;
        frame[15] = 0x05;
        frame[16] = 0x08;
        let (eth, rest) = EthernetRepr::parse(&frame).unwrap();
        assert_eq!(eth.vlan, Some(5));
        assert_eq!(eth.ethertype, ethertype::IPV4);
        assert!(rest.is_empty());
    }

    #[test]
    fn ipv6_roundtrip() {
        let repr = Ipv6Repr {
            traffic_class: 0x12,
            flow_label: 0xABCDE,
            next_header: PROTOCOL_UDP,
            hop_limit: 64,
            src: [1; 16],
            dst: [2; 16],
        };
        let mut out = [0u8; 48];
        repr.emit(&mut out, 8);
        let (back, payload) = Ipv6Repr::parse(&out).unwrap();
        assert_eq!(back, repr);
        assert_eq!(payload.len(), 8);
    }

    #[test]
    fn udp_checksum_verifies_to_zero_sum() {
        let ip = IpRepr::V6(Ipv6Repr {
            traffic_class: 0,
            flow_label: 0,
            next_header: PROTOCOL_UDP,
            hop_limit: 64,
            src: [0xfe; 16],
            dst: [0x01; 16],
        });
        let mut udp = [0x12u8, 0x34, 0x12, 0xb7, 0, 13, 0, 0, 1, 2, 3, 4, 5];
        let c = udp_checksum(&ip, &udp);
        udp[6..8].copy_from_slice(&c.to_be_bytes());
        // Summing everything including the checksum gives all ones.
        let (src, dst) = match ip {
            IpRepr::V6(r) => (r.src, r.dst),
            IpRepr::V4(_) => unreachable!(),
        };
        let total = sum_words(&src) + sum_words(&dst) + 17 + 13 + sum_words(&udp);
        assert_eq!(fold(total), 0xFFFF);
    }
}
