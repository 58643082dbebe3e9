//! Whole packets: a native IB packet (LRH … VCRC) or a RoCEv2 datagram (IP, UDP, BTH … ICRC)
//! parses into one typed structure whose optional headers are `Option`s, and emits back into
//! the same bytes.
//!
//! Layering (IBA vol 1 §5.3, Annex A17):
//!
//! ```text
//! native IB: LRH [GRH] BTH [ETHs…] payload pad ICRC VCRC
//! RoCEv2:    IPv4|IPv6 UDP BTH [ETHs…] payload pad ICRC
//! ```
//!
//! The ETHs that follow a BTH are fixed by its opcode ([`crate::opcode`]), so a missing RETH
//! is `None` rather than a bad offset, and an opcode softib does not implement is an
//! [`Error::Unsupported`] instead of a guess.
//!
//! CRCs are reported, not enforced: [`Parsed`] carries the received ICRC/VCRC and whether each
//! matches, so a decoder can show a corrupt packet and a receiver can count and drop it.
//!
//! Emission derives every length and CRC from the contents: the BTH pad count from the payload
//! length, LRH PktLen, GRH PayLen, IP and UDP lengths, the IPv4 header checksum, the ICRC and the
//! VCRC. `normalized()` returns a repr with those derived fields set the way `emit` writes
//! them, which is what `parse` returns for the emitted bytes.

use crate::crc::{self, ICRC_LEN, VCRC_LEN};
use crate::ip::{IpRepr, UdpRepr};
use crate::opcode::HeaderSet;
use crate::{
    aeth, atomic_ack, atomic_eth, bth, cnp, deth, grh, ieth, immdt, lrh, reth, AethRepr,
    AtomicAckEthRepr, AtomicEthRepr, BthRepr, CnpRepr, DethRepr, Error, GrhRepr, IethRepr,
    ImmDtRepr, Lnh, LrhRepr, Result, RethRepr,
};

/// The BTH and the extended transport headers its opcode calls for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TransportRepr {
    /// The base transport header.
    pub bth: BthRepr,
    /// Datagram ETH (UD).
    pub deth: Option<DethRepr>,
    /// RDMA ETH (RDMA WRITE FIRST/ONLY, RDMA READ request).
    pub reth: Option<RethRepr>,
    /// Atomic ETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ACK ETH (ACK, read responses FIRST/LAST/ONLY, atomic ACK).
    pub aeth: Option<AethRepr>,
    /// Atomic ACK ETH.
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<ImmDtRepr>,
    /// Invalidate ETH.
    pub ieth: Option<IethRepr>,
    /// The reserved bytes of a CNP.
    pub cnp: Option<CnpRepr>,
}

impl TransportRepr {
    /// A transport header with only a BTH; add the ETHs the opcode needs.
    pub fn new(bth: BthRepr) -> TransportRepr {
        TransportRepr {
            bth,
            deth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            immdt: None,
            ieth: None,
            cnp: None,
        }
    }

    /// The set of ETHs present.
    pub fn headers(&self) -> HeaderSet {
        let mut set = HeaderSet::NONE;
        let mut add = |present: bool, h: HeaderSet| {
            if present {
                set = set.with(h);
            }
        };
        add(self.deth.is_some(), HeaderSet::DETH);
        add(self.reth.is_some(), HeaderSet::RETH);
        add(self.atomic_eth.is_some(), HeaderSet::ATOMIC_ETH);
        add(self.aeth.is_some(), HeaderSet::AETH);
        add(self.atomic_ack_eth.is_some(), HeaderSet::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), HeaderSet::IMMDT);
        add(self.ieth.is_some(), HeaderSet::IETH);
        add(self.cnp.is_some(), HeaderSet::CNP);
        set
    }

    /// Checks that the ETHs present are exactly the ones the opcode calls for.
    pub fn check_headers(&self) -> Result<()> {
        let info = self.bth.opcode.info().ok_or(Error::Unsupported(
            "opcode not implemented (RD, XRC, reserved or manufacturer-specific)",
        ))?;
        if info.headers == self.headers() {
            Ok(())
        } else {
            Err(Error::Malformed(
                "extended headers do not match what the opcode calls for",
            ))
        }
    }

    /// The length of the BTH and ETHs.
    pub fn header_len(&self) -> usize {
        bth::HEADER_LEN + self.headers().len()
    }

    /// Parses the BTH and its ETHs from `bytes` (BTH onwards, without ICRC); returns the repr
    /// and the bytes after the headers (payload and pad).
    pub fn parse(bytes: &[u8]) -> Result<(TransportRepr, &[u8])> {
        let bth = BthRepr::parse(&bth::Packet::new_unchecked(bytes))?;
        let info = bth.opcode.info().ok_or(Error::Unsupported(
            "opcode not implemented (RD, XRC, reserved or manufacturer-specific)",
        ))?;
        let mut t = TransportRepr::new(bth);
        let mut rest = &bytes[bth::HEADER_LEN..];
        let h = info.headers;
        // The order below is the order IBA §9.2 puts the ETHs in.
        if h.contains(HeaderSet::DETH) {
            t.deth = Some(DethRepr::parse(&deth::Packet::new_unchecked(rest))?);
            rest = &rest[deth::HEADER_LEN..];
        }
        if h.contains(HeaderSet::RETH) {
            t.reth = Some(RethRepr::parse(&reth::Packet::new_unchecked(rest))?);
            rest = &rest[reth::HEADER_LEN..];
        }
        if h.contains(HeaderSet::ATOMIC_ETH) {
            t.atomic_eth = Some(AtomicEthRepr::parse(&atomic_eth::Packet::new_unchecked(
                rest,
            ))?);
            rest = &rest[atomic_eth::HEADER_LEN..];
        }
        if h.contains(HeaderSet::AETH) {
            t.aeth = Some(AethRepr::parse(&aeth::Packet::new_unchecked(rest))?);
            rest = &rest[aeth::HEADER_LEN..];
        }
        if h.contains(HeaderSet::ATOMIC_ACK_ETH) {
            t.atomic_ack_eth = Some(AtomicAckEthRepr::parse(
                &atomic_ack::Packet::new_unchecked(rest),
            )?);
            rest = &rest[atomic_ack::HEADER_LEN..];
        }
        if h.contains(HeaderSet::IMMDT) {
            t.immdt = Some(ImmDtRepr::parse(&immdt::Packet::new_unchecked(rest))?);
            rest = &rest[immdt::HEADER_LEN..];
        }
        if h.contains(HeaderSet::IETH) {
            t.ieth = Some(IethRepr::parse(&ieth::Packet::new_unchecked(rest))?);
            rest = &rest[ieth::HEADER_LEN..];
        }
        if h.contains(HeaderSet::CNP) {
            t.cnp = Some(CnpRepr::parse(&cnp::Packet::new_unchecked(rest))?);
            rest = &rest[cnp::HEADER_LEN..];
        }
        Ok((t, rest))
    }

    /// Writes the BTH and ETHs into the first `header_len()` bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) {
        self.bth.emit(&mut bth::Packet::new_unchecked(&mut *out));
        let mut at = bth::HEADER_LEN;
        if let Some(r) = &self.deth {
            r.emit(&mut deth::Packet::new_unchecked(&mut out[at..]));
            at += deth::HEADER_LEN;
        }
        if let Some(r) = &self.reth {
            r.emit(&mut reth::Packet::new_unchecked(&mut out[at..]));
            at += reth::HEADER_LEN;
        }
        if let Some(r) = &self.atomic_eth {
            r.emit(&mut atomic_eth::Packet::new_unchecked(&mut out[at..]));
            at += atomic_eth::HEADER_LEN;
        }
        if let Some(r) = &self.aeth {
            r.emit(&mut aeth::Packet::new_unchecked(&mut out[at..]));
            at += aeth::HEADER_LEN;
        }
        if let Some(r) = &self.atomic_ack_eth {
            r.emit(&mut atomic_ack::Packet::new_unchecked(&mut out[at..]));
            at += atomic_ack::HEADER_LEN;
        }
        if let Some(r) = &self.immdt {
            r.emit(&mut immdt::Packet::new_unchecked(&mut out[at..]));
            at += immdt::HEADER_LEN;
        }
        if let Some(r) = &self.ieth {
            r.emit(&mut ieth::Packet::new_unchecked(&mut out[at..]));
            at += ieth::HEADER_LEN;
        }
        if let Some(r) = &self.cnp {
            r.emit(&mut cnp::Packet::new_unchecked(&mut out[at..]));
        }
    }
}

/// The pad count that makes a payload of `len` bytes a multiple of four (BTH PadCnt).
pub const fn pad_for(len: usize) -> u8 {
    ((4 - len % 4) % 4) as u8
}

/// Splits the bytes after the transport headers into payload and pad, checking the pad count
/// and that header-only opcodes carry nothing.
fn split_payload<'a>(t: &TransportRepr, rest: &'a [u8]) -> Result<&'a [u8]> {
    let pad = usize::from(t.bth.pad_count);
    let has_payload = t.bth.opcode.info().is_some_and(|i| i.has_payload);
    if !has_payload {
        if !rest.is_empty() || pad != 0 {
            return Err(Error::Malformed("payload after a header-only opcode"));
        }
        return Ok(rest);
    }
    if rest.len() < pad {
        return Err(Error::Malformed("BTH PadCnt larger than the payload"));
    }
    if rest.len() % 4 != 0 {
        return Err(Error::Malformed(
            "payload and pad are not a multiple of 4 bytes",
        ));
    }
    Ok(&rest[..rest.len() - pad])
}

/// Parses the bytes of a transport packet from the BTH through the pad, without an ICRC (a
/// link has checked and removed it): returns the headers and the payload (without pad).
pub fn parse_body(body: &[u8]) -> Result<(TransportRepr, &[u8])> {
    let (t, rest) = TransportRepr::parse(body)?;
    let payload = split_payload(&t, rest)?;
    Ok((t, payload))
}

/// Parses the bytes of a transport packet from the BTH through the ICRC: returns the headers,
/// the payload (without pad), and the received ICRC. This is what a RoCEv2 receiver gets from
/// a UDP socket.
pub fn parse_transport(bth_to_icrc: &[u8]) -> Result<(TransportRepr, &[u8], u32)> {
    let body_len = bth_to_icrc
        .len()
        .checked_sub(ICRC_LEN)
        .ok_or(Error::Truncated("ICRC"))?;
    let (body, icrc) = bth_to_icrc.split_at(body_len);
    let (t, rest) = TransportRepr::parse(body)?;
    let payload = split_payload(&t, rest)?;
    let icrc = crc::read_icrc(icrc).ok_or(Error::Truncated("ICRC"))?;
    Ok((t, payload, icrc))
}

/// Writes headers, payload and zero pad into `out` (which holds at least
/// `transport_len(t, payload)` bytes) and returns the number written, without the ICRC. The BTH
/// pad count written is derived from the payload length.
fn emit_transport(t: &TransportRepr, payload: &[u8], out: &mut [u8]) -> usize {
    let mut t = *t;
    t.bth.pad_count = pad_for(payload.len());
    t.emit(out);
    let at = t.header_len();
    out[at..at + payload.len()].copy_from_slice(payload);
    let end = at + payload.len() + usize::from(t.bth.pad_count);
    out[at + payload.len()..end].fill(0);
    end
}

/// Bytes from the BTH through the pad (no ICRC).
fn transport_len(t: &TransportRepr, payload: &[u8]) -> usize {
    t.header_len() + payload.len() + usize::from(pad_for(payload.len()))
}

/// A parsed packet with what its CRCs said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<R> {
    /// The packet.
    pub repr: R,
    /// The ICRC as received.
    pub icrc: u32,
    /// Whether the received ICRC matches the bytes.
    pub icrc_ok: bool,
    /// The VCRC as received (native IB only).
    pub vcrc: Option<u16>,
    /// Whether the received VCRC matches the bytes (native IB only).
    pub vcrc_ok: Option<bool>,
}

/// A native InfiniBand packet, from the LRH through the VCRC (IBA vol 1 §5.3 and §7.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbPacketRepr<'a> {
    /// The local route header. Its LNH must be IBA local or IBA global.
    pub lrh: LrhRepr,
    /// The global route header, present exactly when LNH is IBA global.
    pub grh: Option<GrhRepr>,
    /// The BTH and ETHs.
    pub transport: TransportRepr,
    /// The payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> IbPacketRepr<'a> {
    /// Parses a native packet. LNH raw and IPv6 packets are [`Error::Unsupported`]; lengths
    /// that disagree with the bytes are [`Error::Malformed`] or [`Error::Truncated`].
    pub fn parse(bytes: &'a [u8]) -> Result<Parsed<IbPacketRepr<'a>>> {
        let lrh = LrhRepr::parse(&lrh::Packet::new_unchecked(bytes))?;
        let grh_present = match lrh.lnh {
            Lnh::IbaLocal => false,
            Lnh::IbaGlobal => true,
            Lnh::Raw | Lnh::Ipv6 => {
                return Err(Error::Unsupported(
                    "LRH LNH is raw or IPv6, not an IBA transport packet",
                ))
            }
        };
        let pkt_bytes = usize::from(lrh.pkt_len) * 4;
        if pkt_bytes + VCRC_LEN > bytes.len() {
            return Err(Error::Truncated("packet shorter than LRH PktLen says"));
        }
        if pkt_bytes + VCRC_LEN < bytes.len() {
            return Err(Error::Malformed(
                "bytes after the VCRC (LRH PktLen too small)",
            ));
        }
        let (packet, vcrc) = bytes.split_at(pkt_bytes);
        let mut at = lrh::HEADER_LEN;
        let grh = if grh_present {
            let g = GrhRepr::parse(&grh::Packet::new_unchecked(
                packet.get(at..).ok_or(Error::Truncated("GRH"))?,
            ))?;
            at += grh::HEADER_LEN;
            Some(g)
        } else {
            None
        };
        let bth_to_icrc = packet.get(at..).ok_or(Error::Truncated("BTH"))?;
        if let Some(g) = &grh {
            if usize::from(g.payload_len) != bth_to_icrc.len() {
                return Err(Error::Malformed("GRH PayLen disagrees with LRH PktLen"));
            }
        }
        let (transport, payload, icrc) = parse_transport(bth_to_icrc)?;
        let body = &bth_to_icrc[..bth_to_icrc.len() - ICRC_LEN];
        let grh_bytes = if grh_present {
            Some(&packet[lrh::HEADER_LEN..lrh::HEADER_LEN + grh::HEADER_LEN])
        } else {
            None
        };
        let want_icrc = crc::icrc_native(&packet[..lrh::HEADER_LEN], grh_bytes, body);
        let vcrc = u16::from_le_bytes([vcrc[0], vcrc[1]]);
        Ok(Parsed {
            repr: IbPacketRepr {
                lrh,
                grh,
                transport,
                payload,
            },
            icrc,
            icrc_ok: icrc == want_icrc,
            vcrc: Some(vcrc),
            vcrc_ok: Some(vcrc == crc::vcrc(packet)),
        })
    }

    /// The repr with the derived fields (LNH, PktLen, PayLen, pad count) set as `emit` writes
    /// them.
    pub fn normalized(mut self) -> IbPacketRepr<'a> {
        let t_len = transport_len(&self.transport, self.payload) + ICRC_LEN;
        self.transport.bth.pad_count = pad_for(self.payload.len());
        if let Some(g) = &mut self.grh {
            g.payload_len = t_len as u16;
            self.lrh.lnh = Lnh::IbaGlobal;
        } else {
            self.lrh.lnh = Lnh::IbaLocal;
        }
        self.lrh.pkt_len = ((self.buffer_len() - VCRC_LEN) / 4) as u16;
        self
    }

    /// The length of the packet on the wire, LRH through VCRC.
    pub fn buffer_len(&self) -> usize {
        lrh::HEADER_LEN
            + self.grh.map_or(0, |_| grh::HEADER_LEN)
            + transport_len(&self.transport, self.payload)
            + ICRC_LEN
            + VCRC_LEN
    }

    /// Writes the packet into `out[..buffer_len()]`, computing lengths, ICRC and VCRC.
    pub fn emit(&self, out: &mut [u8]) {
        let n = self.normalized();
        n.lrh.emit(&mut lrh::Packet::new_unchecked(&mut *out));
        let mut at = lrh::HEADER_LEN;
        if let Some(g) = &n.grh {
            g.emit(&mut grh::Packet::new_unchecked(&mut out[at..]));
            at += grh::HEADER_LEN;
        }
        let body_len = emit_transport(&n.transport, n.payload, &mut out[at..]);
        let (head, tail) = out.split_at_mut(at + body_len);
        let grh_bytes = n
            .grh
            .map(|_| &head[lrh::HEADER_LEN..lrh::HEADER_LEN + grh::HEADER_LEN]);
        let icrc = crc::icrc_native(&head[..lrh::HEADER_LEN], grh_bytes, &head[at..]);
        crc::write_icrc(tail, icrc);
        let end = at + body_len + ICRC_LEN;
        let vcrc = crc::vcrc(&out[..end]);
        out[end..end + VCRC_LEN].copy_from_slice(&vcrc.to_le_bytes());
    }
}

/// A RoCEv2 packet: an IPv4 or IPv6 datagram carrying UDP carrying BTH … ICRC (Annex A17).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RoceV2Repr<'a> {
    /// The IP header (its length fields are derived on emit).
    pub ip: IpRepr,
    /// The UDP header (its length is derived on emit; the checksum is written as given).
    pub udp: UdpRepr,
    /// The BTH and ETHs.
    pub transport: TransportRepr,
    /// The payload, without pad.
    pub payload: &'a [u8],
}

impl<'a> RoceV2Repr<'a> {
    /// Parses an IP datagram (from the IP header on). The UDP destination port is not checked,
    /// so that RoCEv2 on a non-standard port decodes too; the caller decides what it accepts.
    pub fn parse(ip_datagram: &'a [u8]) -> Result<Parsed<RoceV2Repr<'a>>> {
        let (ip, ip_payload) = IpRepr::parse(ip_datagram)?;
        if ip.protocol() != crate::ip::PROTOCOL_UDP {
            return Err(Error::Unsupported("IP payload is not UDP"));
        }
        let (udp, bth_to_icrc) = UdpRepr::parse(ip_payload)?;
        let (transport, payload, icrc) = parse_transport(bth_to_icrc)?;
        let ip_header = &ip_datagram[..ip.header_len()];
        let udp_header = &ip_payload[..UdpRepr::HEADER_LEN];
        let body = &bth_to_icrc[..bth_to_icrc.len() - ICRC_LEN];
        let want = match ip {
            IpRepr::V4(_) => crc::icrc_roce_v4(ip_header, udp_header, body),
            IpRepr::V6(_) => crc::icrc_roce_v6(ip_header, udp_header, body),
        };
        Ok(Parsed {
            repr: RoceV2Repr {
                ip,
                udp,
                transport,
                payload,
            },
            icrc,
            icrc_ok: icrc == want,
            vcrc: None,
            vcrc_ok: None,
        })
    }

    /// The repr with the BTH pad count set as `emit` writes it.
    pub fn normalized(mut self) -> RoceV2Repr<'a> {
        self.transport.bth.pad_count = pad_for(self.payload.len());
        self
    }

    /// The length of the IP datagram.
    pub fn buffer_len(&self) -> usize {
        self.ip.header_len()
            + UdpRepr::HEADER_LEN
            + transport_len(&self.transport, self.payload)
            + ICRC_LEN
    }

    /// Writes the whole IP datagram into `out[..buffer_len()]`: IP header (with lengths and the
    /// IPv4 checksum), UDP header, transport headers, payload, pad and ICRC.
    pub fn emit(&self, out: &mut [u8]) {
        let ip_len = self.ip.header_len();
        let udp_payload_len = transport_len(&self.transport, self.payload) + ICRC_LEN;
        self.ip.emit(out, UdpRepr::HEADER_LEN + udp_payload_len);
        self.udp.emit(&mut out[ip_len..], udp_payload_len);
        let at = ip_len + UdpRepr::HEADER_LEN;
        let body_len = emit_transport(&self.transport, self.payload, &mut out[at..]);
        let (head, tail) = out.split_at_mut(at + body_len);
        let icrc = match self.ip {
            IpRepr::V4(_) => crc::icrc_roce_v4(&head[..ip_len], &head[ip_len..at], &head[at..]),
            IpRepr::V6(_) => crc::icrc_roce_v6(&head[..ip_len], &head[ip_len..at], &head[at..]),
        };
        crc::write_icrc(tail, icrc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ip::{Ipv4Repr, Ipv6Repr};
    use crate::{Lid, Opcode};
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    // RC COMPARE_SWAP and RC ATOMIC_ACKNOWLEDGE from the Linux rxe driver (rc_atomic_cas.pcap),
    // IPv4 header onwards.
    const RXE_CMP_SWAP: &str = "450000483ed840004011e7300a4d00010a4d0002c24012b7003400001300ffff000000188083aa0a000055f6a566a00000000919000000000000000000000000000000008852e1d7";
    const RXE_ATOMIC_ACK: &str = "4500003884c240004011a1560a4d00020a4d0001c24012b7002400001200ffff000000180083aa0a1f000001e8f3c963eb000c1690ab2a69";
    const RXE_UD_SEND: &str = "45000074442740004011e1b50a4d00010a4d0002fb9712b7006000006400ffff0000001a00954fb7111111110000001a29f59b2d11ef0d347bfdd678ba6c68b63157b41aa4bac7b2470c4979d9bb1202b0ad2fc29c3cf6173acc8ff438f7aa694f5e83f3194ba66057efd930aaeb335b1c57f1aa";

    fn roundtrip(hex: &str) -> Parsed<RoceV2Repr<'static>> {
        let bytes: &'static [u8] = Vec::leak(unhex(hex));
        let parsed = RoceV2Repr::parse(bytes).unwrap();
        assert!(parsed.icrc_ok, "ICRC of a real rxe packet must verify");
        let mut out = vec![0u8; parsed.repr.buffer_len()];
        parsed.repr.emit(&mut out);
        assert_eq!(out, bytes, "emit must give back the same bytes");
        parsed
    }

    #[test]
    fn rxe_atomic_exchange() {
        let req = roundtrip(RXE_CMP_SWAP).repr;
        let a = req.transport.atomic_eth.unwrap();
        assert_eq!(req.transport.bth.opcode, Opcode(0x13));
        assert_eq!(a.compare, 0);
        assert!(req.payload.is_empty());
        let ack = roundtrip(RXE_ATOMIC_ACK).repr;
        assert!(ack.transport.aeth.is_some());
        assert!(ack.transport.atomic_ack_eth.is_some());
        assert!(ack.transport.reth.is_none());
    }

    #[test]
    fn rxe_ud_send() {
        let p = roundtrip(RXE_UD_SEND).repr;
        let deth = p.transport.deth.unwrap();
        assert_eq!(deth.qkey.0, 0x1111_1111);
        assert_eq!(p.payload.len(), 0x60 - 8 - 12 - 8 - 4);
    }

    #[test]
    fn corrupt_byte_fails_icrc_only() {
        let mut bytes = unhex(RXE_UD_SEND);
        let last_payload = bytes.len() - 5;
        bytes[last_payload] ^= 0x01;
        let parsed = RoceV2Repr::parse(&bytes).unwrap();
        assert!(!parsed.icrc_ok);
    }

    #[test]
    fn malformed_inputs_are_named() {
        let bytes = unhex(RXE_CMP_SWAP);
        // Cut the atomic ETH short but keep lengths consistent: a truncated ETH.
        let (_, _, _) = parse_transport(&bytes[28..]).unwrap();
        assert_eq!(
            parse_transport(&bytes[28..28 + 12 + 4]).unwrap_err(),
            Error::Truncated("AtomicETH")
        );
        assert_eq!(
            parse_transport(&bytes[28..30]).unwrap_err(),
            Error::Truncated("ICRC")
        );
        let mut rd = bytes[28..].to_vec();
        rd[0] = 0x44; // an RD opcode
        assert!(matches!(parse_transport(&rd), Err(Error::Unsupported(_))));
    }

    fn sample_native(grh: bool) -> (IbPacketRepr<'static>, Vec<u8>) {
        let payload: &'static [u8] = b"hello, fabric";
        let mut t = TransportRepr::new(BthRepr {
            opcode: Opcode::UD_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: crate::PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qpn: crate::Qpn::new(0x48),
            ack_req: false,
            psn: crate::Psn::new(7),
        });
        t.deth = Some(DethRepr {
            qkey: crate::QKey(0x1111_1111),
            src_qpn: crate::Qpn::new(0x49),
        });
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
            grh: grh.then_some(GrhRepr {
                traffic_class: 0,
                flow_label: 0,
                payload_len: 0,
                next_header: grh::NEXT_HEADER_IBA,
                hop_limit: 64,
                sgid: crate::Gid([1; 16]),
                dgid: crate::Gid([2; 16]),
            }),
            transport: t,
            payload,
        }
        .normalized();
        let mut out = vec![0u8; repr.buffer_len()];
        repr.emit(&mut out);
        (repr, out)
    }

    #[test]
    fn native_roundtrip_local_and_global() {
        for grh in [false, true] {
            let (repr, bytes) = sample_native(grh);
            let parsed = IbPacketRepr::parse(&bytes).unwrap();
            assert_eq!(parsed.repr, repr);
            assert!(parsed.icrc_ok);
            assert_eq!(parsed.vcrc_ok, Some(true));
            assert_eq!(bytes.len() % 4, 2, "PktLen words plus the 2-byte VCRC");
            assert_eq!(usize::from(repr.lrh.pkt_len) * 4, bytes.len() - 2);
        }
    }

    #[test]
    fn native_vl_change_keeps_icrc_but_not_vcrc() {
        let (_, mut bytes) = sample_native(false);
        bytes[0] |= 0xF0;
        let parsed = IbPacketRepr::parse(&bytes).unwrap();
        assert!(parsed.icrc_ok, "VL is variant: the ICRC does not cover it");
        assert_eq!(parsed.vcrc_ok, Some(false));
    }

    #[test]
    fn native_length_errors() {
        let (_, bytes) = sample_native(true);
        assert!(matches!(
            IbPacketRepr::parse(&bytes[..bytes.len() - 1]),
            Err(Error::Truncated(_))
        ));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            IbPacketRepr::parse(&longer),
            Err(Error::Malformed(_))
        ));
    }

    /// Every valid transport header: a BTH with a known opcode and exactly its ETHs.
    pub(crate) fn arb_transport() -> impl Strategy<Value = TransportRepr> {
        let ops: Vec<Opcode> = Opcode::all_known().collect();
        (
            proptest::sample::select(ops),
            crate::bth::tests::arb_repr(),
            crate::deth::tests::arb_repr(),
            crate::reth::tests::arb_repr(),
            crate::atomic_eth::tests::arb_repr(),
            crate::aeth::tests::arb_repr(),
            crate::atomic_ack::tests::arb_repr(),
            crate::immdt::tests::arb_repr(),
            crate::ieth::tests::arb_repr(),
        )
            .prop_map(|(op, mut bth, deth, reth, atomic, aeth, ack, imm, ieth)| {
                bth.opcode = op;
                let h = op.info().map(|i| i.headers).unwrap_or_default();
                let mut t = TransportRepr::new(bth);
                t.deth = h.contains(HeaderSet::DETH).then_some(deth);
                t.reth = h.contains(HeaderSet::RETH).then_some(reth);
                t.atomic_eth = h.contains(HeaderSet::ATOMIC_ETH).then_some(atomic);
                t.aeth = h.contains(HeaderSet::AETH).then_some(aeth);
                t.atomic_ack_eth = h.contains(HeaderSet::ATOMIC_ACK_ETH).then_some(ack);
                t.immdt = h.contains(HeaderSet::IMMDT).then_some(imm);
                t.ieth = h.contains(HeaderSet::IETH).then_some(ieth);
                t.cnp = h.contains(HeaderSet::CNP).then_some(CnpRepr);
                t
            })
    }

    fn arb_ip() -> impl Strategy<Value = IpRepr> {
        prop_oneof![
            (any::<(u8, u16, bool, u8)>(), any::<([u8; 4], [u8; 4])>()).prop_map(
                |((tos, ident, df, ttl), (src, dst))| IpRepr::V4(Ipv4Repr {
                    tos,
                    ident,
                    dont_frag: df,
                    ttl,
                    protocol: crate::ip::PROTOCOL_UDP,
                    src,
                    dst,
                })
            ),
            (
                any::<(u8, u8)>(),
                0u32..(1 << 20),
                any::<([u8; 16], [u8; 16])>()
            )
                .prop_map(|((tc, hl), fl, (src, dst))| IpRepr::V6(Ipv6Repr {
                    traffic_class: tc,
                    flow_label: fl,
                    next_header: crate::ip::PROTOCOL_UDP,
                    hop_limit: hl,
                    src,
                    dst,
                })),
        ]
    }

    proptest! {
        #[test]
        fn transport_roundtrip(t in arb_transport()) {
            let mut buf = vec![0u8; t.header_len()];
            t.emit(&mut buf);
            let (back, rest) = TransportRepr::parse(&buf).unwrap();
            prop_assert!(rest.is_empty());
            prop_assert_eq!(back, t);
            prop_assert!(t.check_headers().is_ok());
        }

        #[test]
        fn roce_v2_roundtrip(
            ip in arb_ip(),
            ports in any::<(u16, u16, u16)>(),
            t in arb_transport(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let has_payload = t.bth.opcode.info().is_some_and(|i| i.has_payload);
            let payload: &[u8] = if has_payload { &payload } else { &[] };
            let repr = RoceV2Repr {
                ip,
                udp: UdpRepr { src_port: ports.0, dst_port: ports.1, checksum: ports.2 },
                transport: t,
                payload,
            }.normalized();
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf);
            let parsed = RoceV2Repr::parse(&buf).unwrap();
            prop_assert!(parsed.icrc_ok);
            prop_assert_eq!(parsed.repr, repr);
        }

        #[test]
        fn native_roundtrip(
            lrh in crate::lrh::tests::arb_repr(),
            grh in proptest::option::of(crate::grh::tests::arb_repr()),
            t in arb_transport(),
            payload in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let has_payload = t.bth.opcode.info().is_some_and(|i| i.has_payload);
            let payload: &[u8] = if has_payload { &payload } else { &[] };
            let repr = IbPacketRepr { lrh, grh, transport: t, payload }.normalized();
            let mut buf = vec![0u8; repr.buffer_len()];
            repr.emit(&mut buf);
            let parsed = IbPacketRepr::parse(&buf).unwrap();
            prop_assert!(parsed.icrc_ok);
            prop_assert_eq!(parsed.vcrc_ok, Some(true));
            prop_assert_eq!(parsed.repr, repr);
        }

        #[test]
        fn parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = RoceV2Repr::parse(&bytes);
            let _ = IbPacketRepr::parse(&bytes);
            let _ = parse_transport(&bytes);
        }
    }
}
