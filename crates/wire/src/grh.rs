//! The Global Route Header (IBA vol 1 §8.3, 40 bytes): follows the LRH when LNH is "IBA global"
//! and carries the GIDs needed to route between subnets. Its layout is that of an IPv6 header.
//!
//! ```text
//!  0: IPVer(4)=6 TClass(8) FlowLabel(20)
//!  4: PayLen(16)              NxtHdr(8)  HopLmt(8)
//!  8: SGID(128)
//! 24: DGID(128)
//! ```
//!
//! PayLen counts bytes from the first byte after the GRH (the BTH) to the last byte of the ICRC
//! inclusive. NxtHdr is 0x1B ([`NEXT_HEADER_IBA`]) when a BTH follows.

use crate::bytes::{read_u16, read_u32, write_u16, write_u32};
use crate::{Error, Gid, Result};

mod field {
    use core::ops::Range;

    pub const VER_TC_FLOW: usize = 0;
    pub const PAY_LEN: usize = 4;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LMT: usize = 7;
    pub const SGID: Range<usize> = 8..24;
    pub const DGID: Range<usize> = 24..40;
}

/// Length of the GRH in bytes.
pub const HEADER_LEN: usize = 40;

/// The IPVer value of every GRH.
pub const IP_VERSION: u8 = 6;

/// NxtHdr when an IBA transport header (the BTH) follows the GRH (IBA §8.3.1).
pub const NEXT_HEADER_IBA: u8 = 0x1B;

/// The largest FlowLabel value (20 bits).
pub const FLOW_LABEL_MAX: u32 = 0x000F_FFFF;

/// A read/write view of a GRH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole GRH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole GRH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("GRH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// IPVer (6 in a valid GRH).
    #[inline]
    pub fn ip_ver(&self) -> u8 {
        self.buffer.as_ref()[field::VER_TC_FLOW] >> 4
    }

    /// TClass, the traffic class.
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        // The 8 bits straddle bytes 0 and 1: bits 27..20 of the first word.
        (read_u32(self.buffer.as_ref(), field::VER_TC_FLOW) >> 20) as u8
    }

    /// FlowLabel (20 bits).
    #[inline]
    pub fn flow_label(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::VER_TC_FLOW) & FLOW_LABEL_MAX
    }

    /// PayLen: bytes from the BTH to the ICRC inclusive.
    #[inline]
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PAY_LEN)
    }

    /// NxtHdr ([`NEXT_HEADER_IBA`] when a BTH follows).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// HopLmt, the hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LMT]
    }

    /// SGID, the source GID.
    #[inline]
    pub fn sgid(&self) -> Gid {
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&self.buffer.as_ref()[field::SGID]);
        Gid(gid)
    }

    /// DGID, the destination GID.
    #[inline]
    pub fn dgid(&self) -> Gid {
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&self.buffer.as_ref()[field::DGID]);
        Gid(gid)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets IPVer (low 4 bits of `value`), keeping TClass and FlowLabel.
    #[inline]
    pub fn set_ip_ver(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_TC_FLOW];
        *b = (*b & 0x0F) | ((value & 0x0F) << 4);
    }

    /// Sets TClass, keeping IPVer and FlowLabel.
    #[inline]
    pub fn set_traffic_class(&mut self, value: u8) {
        let buf = self.buffer.as_mut();
        let word = read_u32(buf, field::VER_TC_FLOW);
        let word = (word & 0xF00F_FFFF) | (u32::from(value) << 20);
        write_u32(buf, field::VER_TC_FLOW, word);
    }

    /// Sets FlowLabel (low 20 bits of `value`), keeping IPVer and TClass.
    #[inline]
    pub fn set_flow_label(&mut self, value: u32) {
        let buf = self.buffer.as_mut();
        let word = read_u32(buf, field::VER_TC_FLOW);
        let word = (word & !FLOW_LABEL_MAX) | (value & FLOW_LABEL_MAX);
        write_u32(buf, field::VER_TC_FLOW, word);
    }

    /// Sets PayLen.
    #[inline]
    pub fn set_payload_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::PAY_LEN, value);
    }

    /// Sets NxtHdr.
    #[inline]
    pub fn set_next_header(&mut self, value: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = value;
    }

    /// Sets HopLmt.
    #[inline]
    pub fn set_hop_limit(&mut self, value: u8) {
        self.buffer.as_mut()[field::HOP_LMT] = value;
    }

    /// Sets SGID.
    #[inline]
    pub fn set_sgid(&mut self, value: Gid) {
        self.buffer.as_mut()[field::SGID].copy_from_slice(&value.0);
    }

    /// Sets DGID.
    #[inline]
    pub fn set_dgid(&mut self, value: Gid) {
        self.buffer.as_mut()[field::DGID].copy_from_slice(&value.0);
    }
}

/// The meaningful contents of a GRH. IPVer is not kept: it is always 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// TClass.
    pub traffic_class: u8,
    /// FlowLabel (0..=0xFFFFF).
    pub flow_label: u32,
    /// PayLen: bytes from the BTH to the ICRC inclusive.
    pub payload_len: u16,
    /// NxtHdr ([`NEXT_HEADER_IBA`] when a BTH follows).
    pub next_header: u8,
    /// HopLmt.
    pub hop_limit: u8,
    /// SGID.
    pub sgid: Gid,
    /// DGID.
    pub dgid: Gid,
}

impl Repr {
    /// Parses a GRH. IPVer must be 6; any NxtHdr is accepted here, the whole-packet parser
    /// decides what a non-IBA next header means.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.ip_ver() != IP_VERSION {
            return Err(Error::Malformed("GRH IPVer is not 6"));
        }
        Ok(Repr {
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            payload_len: packet.payload_len(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            sgid: packet.sgid(),
            dgid: packet.dgid(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the GRH, with IPVer 6, into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_ip_ver(IP_VERSION);
        packet.set_traffic_class(self.traffic_class);
        packet.set_flow_label(self.flow_label);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_sgid(self.sgid);
        packet.set_dgid(self.dgid);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::Guid;
    use proptest::prelude::*;

    // Built by hand from the spec layout: IPVer 6, TClass 0xA5, FlowLabel 0x12345,
    // PayLen 32 (BTH 12 + payload 16 + ICRC 4), NxtHdr 0x1B, HopLmt 64,
    // SGID fe80::2:c903:0:1, DGID fe80::2:c903:0:2.
    static BYTES: [u8; 40] = [
        0x6a, 0x51, 0x23, 0x45, // IPVer, TClass, FlowLabel
        0x00, 0x20, 0x1b, 0x40, // PayLen, NxtHdr, HopLmt
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // SGID prefix
        0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x00, 0x01, // SGID interface ID
        0xfe, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // DGID prefix
        0x00, 0x02, 0xc9, 0x03, 0x00, 0x00, 0x00, 0x02, // DGID interface ID
    ];

    fn repr() -> Repr {
        Repr {
            traffic_class: 0xA5,
            flow_label: 0x12345,
            payload_len: 32,
            next_header: NEXT_HEADER_IBA,
            hop_limit: 64,
            sgid: Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(0x0002_c903_0000_0001)),
            dgid: Gid::from_prefix_guid(0xfe80_0000_0000_0000, Guid(0x0002_c903_0000_0002)),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.ip_ver(), 6);
        assert_eq!(packet.traffic_class(), 0xA5);
        assert_eq!(packet.flow_label(), 0x12345);
        assert_eq!(packet.payload_len(), 32);
        assert_eq!(packet.next_header(), 0x1B);
        assert_eq!(packet.hop_limit(), 64);
        assert_eq!(packet.sgid().prefix(), 0xfe80_0000_0000_0000);
        assert_eq!(packet.sgid().interface_id(), 0x0002_c903_0000_0001);
        assert_eq!(packet.dgid().interface_id(), 0x0002_c903_0000_0002);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 40];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_ip_ver(6);
        packet.set_traffic_class(0xA5);
        packet.set_flow_label(0x12345);
        packet.set_payload_len(32);
        packet.set_next_header(0x1B);
        packet.set_hop_limit(64);
        packet.set_sgid(repr().sgid);
        packet.set_dgid(repr().dgid);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xffu8; 40];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..39]).unwrap_err(),
            Error::Truncated("GRH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn test_bad_version() {
        let mut bytes = BYTES;
        bytes[0] = 0x4a;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&bytes[..])),
            Err(Error::Malformed("GRH IPVer is not 6"))
        );
    }

    #[test]
    fn setters_keep_neighbours() {
        let mut bytes = [0u8; 40];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_flow_label(0xFFFF_FFFF);
        packet.set_ip_ver(6);
        packet.set_traffic_class(0xFF);
        assert_eq!(bytes[..4], [0x6F, 0xFF, 0xFF, 0xFF]);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_traffic_class(0);
        assert_eq!(bytes[..4], [0x60, 0x0F, 0xFF, 0xFF]);
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_flow_label(0);
        assert_eq!(bytes[..4], [0x60, 0x00, 0x00, 0x00]);
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<u8>(),
            0u32..=FLOW_LABEL_MAX,
            any::<u16>(),
            any::<u8>(),
            any::<u8>(),
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
        )
            .prop_map(
                |(traffic_class, flow_label, payload_len, next_header, hop_limit, sgid, dgid)| {
                    Repr {
                        traffic_class,
                        flow_label,
                        payload_len,
                        next_header,
                        hop_limit,
                        sgid: Gid(sgid),
                        dgid: Gid(dgid),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(repr in arb_repr()) {
            let mut bytes = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
