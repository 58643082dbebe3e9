//! The Local Route Header (IBA vol 1 §7.7, 8 bytes): the link-layer header of every native
//! InfiniBand packet. RoCE packets have no LRH; Ethernet and IP take its place.
//!
//! ```text
//!  0: VL(4) LVer(4)
//!  1: SL(4) Rsv2(2) LNH(2)
//!  2: DLID(16)
//!  4: Rsv5(5) PktLen(11)
//!  6: SLID(16)
//! ```
//!
//! PktLen counts 4-byte words from the first byte of the LRH to the last byte of the ICRC
//! inclusive; the VCRC is not counted.

use crate::bytes::{read_u16, write_u16};
use crate::{Error, Lid, Result};

mod field {
    pub const VL_LVER: usize = 0;
    pub const SL_LNH: usize = 1;
    pub const DLID: usize = 2;
    pub const PKT_LEN: usize = 4;
    pub const SLID: usize = 6;
}

/// Length of the LRH in bytes.
pub const HEADER_LEN: usize = 8;

/// The largest PktLen value (11 bits).
pub const PKT_LEN_MAX: u16 = 0x07FF;

/// LNH, the Link Next Header field (IBA §7.7.7): what follows the LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lnh {
    /// 0b00: raw packet, no IBA transport header follows.
    Raw,
    /// 0b01: raw IPv6 packet.
    Ipv6,
    /// 0b10: IBA local — a BTH follows the LRH directly.
    IbaLocal,
    /// 0b11: IBA global — a GRH follows the LRH, then a BTH.
    IbaGlobal,
}

impl Lnh {
    /// The LNH named by the low 2 bits of `bits` (the upper bits are ignored).
    pub const fn from_bits(bits: u8) -> Lnh {
        match bits & 0x3 {
            0 => Lnh::Raw,
            1 => Lnh::Ipv6,
            2 => Lnh::IbaLocal,
            _ => Lnh::IbaGlobal,
        }
    }

    /// The 2-bit field value.
    pub const fn bits(self) -> u8 {
        match self {
            Lnh::Raw => 0,
            Lnh::Ipv6 => 1,
            Lnh::IbaLocal => 2,
            Lnh::IbaGlobal => 3,
        }
    }
}

/// A read/write view of an LRH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole LRH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole LRH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("LRH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// VL, the virtual lane (15 is the management lane, VL15).
    #[inline]
    pub fn vl(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] >> 4
    }

    /// LVer, the link version (0).
    #[inline]
    pub fn lver(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] & 0x0F
    }

    /// SL, the service level.
    #[inline]
    pub fn sl(&self) -> u8 {
        self.buffer.as_ref()[field::SL_LNH] >> 4
    }

    /// LNH, what follows the LRH.
    #[inline]
    pub fn lnh(&self) -> Lnh {
        Lnh::from_bits(self.buffer.as_ref()[field::SL_LNH])
    }

    /// DLID, the destination LID.
    #[inline]
    pub fn dlid(&self) -> Lid {
        Lid(read_u16(self.buffer.as_ref(), field::DLID))
    }

    /// PktLen: the packet length in 4-byte words, LRH..ICRC inclusive (11 bits).
    #[inline]
    pub fn pkt_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::PKT_LEN) & PKT_LEN_MAX
    }

    /// SLID, the source LID.
    #[inline]
    pub fn slid(&self) -> Lid {
        Lid(read_u16(self.buffer.as_ref(), field::SLID))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets VL (low 4 bits of `value`), keeping LVer.
    #[inline]
    pub fn set_vl(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VL_LVER];
        *b = (*b & 0x0F) | ((value & 0x0F) << 4);
    }

    /// Sets LVer (low 4 bits of `value`), keeping VL.
    #[inline]
    pub fn set_lver(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VL_LVER];
        *b = (*b & 0xF0) | (value & 0x0F);
    }

    /// Sets SL (low 4 bits of `value`), keeping LNH; the reserved bits of that byte become 0.
    #[inline]
    pub fn set_sl(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::SL_LNH];
        *b = ((value & 0x0F) << 4) | (*b & 0x03);
    }

    /// Sets LNH, keeping SL; the reserved bits of that byte become 0.
    #[inline]
    pub fn set_lnh(&mut self, value: Lnh) {
        let b = &mut self.buffer.as_mut()[field::SL_LNH];
        *b = (*b & 0xF0) | value.bits();
    }

    /// Sets DLID.
    #[inline]
    pub fn set_dlid(&mut self, value: Lid) {
        write_u16(self.buffer.as_mut(), field::DLID, value.0);
    }

    /// Sets PktLen (low 11 bits of `value`); the 5 reserved bits before it become 0.
    #[inline]
    pub fn set_pkt_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::PKT_LEN, value & PKT_LEN_MAX);
    }

    /// Sets SLID.
    #[inline]
    pub fn set_slid(&mut self, value: Lid) {
        write_u16(self.buffer.as_mut(), field::SLID, value.0);
    }
}

/// The meaningful contents of an LRH. Reserved bits are not kept: they are emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VL (0..=15).
    pub vl: u8,
    /// LVer (0..=15; 0 is the only version defined).
    pub lver: u8,
    /// SL (0..=15).
    pub sl: u8,
    /// LNH.
    pub lnh: Lnh,
    /// DLID.
    pub dlid: Lid,
    /// PktLen in 4-byte words, LRH..ICRC inclusive (0..=2047).
    pub pkt_len: u16,
    /// SLID.
    pub slid: Lid,
}

impl Repr {
    /// Parses an LRH. Every field value is accepted here; checking PktLen against the buffer and
    /// LVer against the supported version is the whole-packet parser's business.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            vl: packet.vl(),
            lver: packet.lver(),
            sl: packet.sl(),
            lnh: packet.lnh(),
            dlid: packet.dlid(),
            pkt_len: packet.pkt_len(),
            slid: packet.slid(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the LRH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_vl(self.vl);
        packet.set_lver(self.lver);
        packet.set_sl(self.sl);
        packet.set_lnh(self.lnh);
        packet.set_dlid(self.dlid);
        packet.set_pkt_len(self.pkt_len);
        packet.set_slid(self.slid);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // Built by hand from the spec layout: VL 0, LVer 0, SL 0, LNH 2 (IBA local), DLID 2,
    // PktLen 8 words (LRH 8 + BTH 12 + payload 8 + ICRC 4 = 32 bytes), SLID 1.
    static BYTES: [u8; 8] = [0x00, 0x02, 0x00, 0x02, 0x00, 0x08, 0x00, 0x01];

    // A directed-route SMP on VL15 between permissive LIDs: PktLen 72 words
    // (LRH 8 + BTH 12 + DETH 8 + MAD 256 + ICRC 4 = 288 bytes).
    static SMP_BYTES: [u8; 8] = [0xf0, 0x02, 0xff, 0xff, 0x00, 0x48, 0xff, 0xff];

    fn repr() -> Repr {
        Repr {
            vl: 0,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid: Lid(2),
            pkt_len: 8,
            slid: Lid(1),
        }
    }

    fn smp_repr() -> Repr {
        Repr {
            vl: 15,
            lver: 0,
            sl: 0,
            lnh: Lnh::IbaLocal,
            dlid: Lid::PERMISSIVE,
            pkt_len: 72,
            slid: Lid::PERMISSIVE,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.vl(), 0);
        assert_eq!(packet.lver(), 0);
        assert_eq!(packet.sl(), 0);
        assert_eq!(packet.lnh(), Lnh::IbaLocal);
        assert_eq!(packet.dlid(), Lid(2));
        assert_eq!(packet.pkt_len(), 8);
        assert_eq!(packet.slid(), Lid(1));

        let packet = Packet::new_checked(&SMP_BYTES[..]).unwrap();
        assert_eq!(packet.vl(), 15);
        assert_eq!(packet.lver(), 0);
        assert_eq!(packet.dlid(), Lid::PERMISSIVE);
        assert_eq!(packet.pkt_len(), 72);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_vl(0);
        packet.set_lver(0);
        packet.set_sl(0);
        packet.set_lnh(Lnh::IbaLocal);
        packet.set_dlid(Lid(2));
        packet.set_pkt_len(8);
        packet.set_slid(Lid(1));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
        let packet = Packet::new_unchecked(&SMP_BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(smp_repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xa5u8; 8];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
        smp_repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, SMP_BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated("LRH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn field_bits() {
        let mut bytes = [0u8; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_vl(0xF);
        packet.set_lver(0x3);
        packet.set_sl(0xC);
        packet.set_lnh(Lnh::IbaGlobal);
        packet.set_pkt_len(0xFFFF);
        assert_eq!(bytes[..2], [0xF3, 0xC3]);
        assert_eq!(bytes[4..6], [0x07, 0xFF]);
        // Reserved bits set on the wire are ignored when reading.
        let bytes = [0x00, 0x0E, 0, 0, 0xF8, 0x01, 0, 0];
        let packet = Packet::new_unchecked(&bytes[..]);
        assert_eq!(packet.lnh(), Lnh::IbaLocal);
        assert_eq!(packet.sl(), 0);
        assert_eq!(packet.pkt_len(), 1);
    }

    #[test]
    fn lnh_bits() {
        for bits in 0..4u8 {
            assert_eq!(Lnh::from_bits(bits).bits(), bits);
        }
        assert_eq!(Lnh::from_bits(0xFE), Lnh::IbaLocal);
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            0u8..16,
            0u8..16,
            0u8..16,
            0u8..4,
            any::<u16>(),
            0u16..=PKT_LEN_MAX,
            any::<u16>(),
        )
            .prop_map(|(vl, lver, sl, lnh, dlid, pkt_len, slid)| Repr {
                vl,
                lver,
                sl,
                lnh: Lnh::from_bits(lnh),
                dlid: Lid(dlid),
                pkt_len,
                slid: Lid(slid),
            })
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(repr in arb_repr()) {
            let mut bytes = [0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..16)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
