//! The Base Transport Header (IBA vol 1 §9.2, 12 bytes): present in every transport packet.
//!
//! ```text
//!  0: OpCode(8)
//!  1: SE(1) MigReq(1) PadCnt(2) TVer(4)
//!  2: P_Key(16)
//!  4: FECN(1) BECN(1) Resv6(6)   DestQP(24)
//!  8: AckReq(1) Resv7(7)          PSN(24)
//! ```

use crate::bytes::{read_u16, read_u24, write_u16, write_u24};
use crate::{Error, Opcode, PKey, Psn, Qpn, Result};

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const ECN: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK_REQ: usize = 8;
    pub const PSN: usize = 9;
}

/// Length of the BTH in bytes.
pub const HEADER_LEN: usize = 12;

/// A read/write view of a BTH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole BTH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole BTH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("BTH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// OpCode.
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode(self.buffer.as_ref()[field::OPCODE])
    }

    /// SE, the solicited event bit.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }

    /// MigReq, the migration state bit.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }

    /// PadCnt: bytes of padding (0..=3) after the payload that make it a multiple of 4.
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 0x3
    }

    /// TVer, the transport header version (0).
    #[inline]
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0F
    }

    /// P_Key.
    #[inline]
    pub fn pkey(&self) -> PKey {
        PKey(read_u16(self.buffer.as_ref(), field::PKEY))
    }

    /// FECN, forward explicit congestion notification.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x80 != 0
    }

    /// BECN, backward explicit congestion notification.
    #[inline]
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x40 != 0
    }

    /// DestQP.
    #[inline]
    pub fn dest_qpn(&self) -> Qpn {
        Qpn::new(read_u24(self.buffer.as_ref(), field::DEST_QP))
    }

    /// AckReq: the requester asks the responder to acknowledge this packet.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }

    /// PSN.
    #[inline]
    pub fn psn(&self) -> Psn {
        Psn::new(read_u24(self.buffer.as_ref(), field::PSN))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets OpCode.
    #[inline]
    pub fn set_opcode(&mut self, value: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = value.0;
    }

    /// Sets SE, MigReq, PadCnt and TVer at once (they share a byte).
    #[inline]
    pub fn set_flags(&mut self, solicited: bool, mig_req: bool, pad_count: u8, tver: u8) {
        self.buffer.as_mut()[field::FLAGS] = (u8::from(solicited) << 7)
            | (u8::from(mig_req) << 6)
            | ((pad_count & 0x3) << 4)
            | (tver & 0x0F);
    }

    /// Sets PadCnt alone.
    #[inline]
    pub fn set_pad_count(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x30) | ((value & 0x3) << 4);
    }

    /// Sets P_Key.
    #[inline]
    pub fn set_pkey(&mut self, value: PKey) {
        write_u16(self.buffer.as_mut(), field::PKEY, value.0);
    }

    /// Sets FECN and BECN; the reserved bits of that byte become 0.
    #[inline]
    pub fn set_ecn(&mut self, fecn: bool, becn: bool) {
        self.buffer.as_mut()[field::ECN] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }

    /// Sets DestQP.
    #[inline]
    pub fn set_dest_qpn(&mut self, value: Qpn) {
        write_u24(self.buffer.as_mut(), field::DEST_QP, value.value());
    }

    /// Sets AckReq; the reserved bits of that byte become 0.
    #[inline]
    pub fn set_ack_req(&mut self, value: bool) {
        self.buffer.as_mut()[field::ACK_REQ] = u8::from(value) << 7;
    }

    /// Sets PSN.
    #[inline]
    pub fn set_psn(&mut self, value: Psn) {
        write_u24(self.buffer.as_mut(), field::PSN, value.value());
    }
}

/// The meaningful contents of a BTH. Reserved bits are not kept: they are emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// MigReq.
    pub mig_req: bool,
    /// PadCnt (0..=3).
    pub pad_count: u8,
    /// TVer (0..=15; 0 is the only version defined).
    pub tver: u8,
    /// P_Key.
    pub pkey: PKey,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP.
    pub dest_qpn: Qpn,
    /// AckReq.
    pub ack_req: bool,
    /// PSN.
    pub psn: Psn,
}

impl Repr {
    /// Parses a BTH. Any opcode is accepted here; the whole-packet parser decides what an
    /// unknown opcode means.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            opcode: packet.opcode(),
            solicited: packet.solicited(),
            mig_req: packet.mig_req(),
            pad_count: packet.pad_count(),
            tver: packet.tver(),
            pkey: packet.pkey(),
            fecn: packet.fecn(),
            becn: packet.becn(),
            dest_qpn: packet.dest_qpn(),
            ack_req: packet.ack_req(),
            psn: packet.psn(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the BTH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_opcode(self.opcode);
        packet.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        packet.set_pkey(self.pkey);
        packet.set_ecn(self.fecn, self.becn);
        packet.set_dest_qpn(self.dest_qpn);
        packet.set_ack_req(self.ack_req);
        packet.set_psn(self.psn);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The BTH of an RC SEND_ONLY captured from the Linux rxe driver (rc_send_lat.pcap).
    static BYTES: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0xaf, 0x47, 0xee,
    ];

    fn repr() -> Repr {
        Repr {
            opcode: Opcode::RC_SEND_ONLY,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: PKey::DEFAULT,
            fecn: false,
            becn: false,
            dest_qpn: Qpn::new(0x12),
            ack_req: true,
            psn: Psn::new(0xaf47ee),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.opcode(), Opcode(0x04));
        assert!(!packet.solicited());
        assert_eq!(packet.pad_count(), 0);
        assert_eq!(packet.pkey(), PKey(0xffff));
        assert_eq!(packet.dest_qpn(), Qpn::new(0x12));
        assert!(packet.ack_req());
        assert_eq!(packet.psn(), Psn::new(0xaf47ee));
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 12];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_opcode(Opcode(0x04));
        packet.set_flags(false, false, 0, 0);
        packet.set_pkey(PKey(0xffff));
        packet.set_ecn(false, false);
        packet.set_dest_qpn(Qpn::new(0x12));
        packet.set_ack_req(true);
        packet.set_psn(Psn::new(0xaf47ee));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0u8; 12];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..11]).unwrap_err(),
            Error::Truncated("BTH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn flag_bits() {
        let mut bytes = BYTES;
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_flags(true, true, 3, 0xF);
        packet.set_ecn(true, true);
        assert_eq!(packet.buffer[1], 0xFF);
        assert_eq!(packet.buffer[4], 0xC0);
        assert!(packet.solicited() && packet.mig_req() && packet.fecn() && packet.becn());
        assert_eq!(packet.pad_count(), 3);
        assert_eq!(packet.tver(), 0xF);
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (
            any::<u8>(),
            any::<(bool, bool, bool, bool, bool)>(),
            0u8..4,
            0u8..16,
            any::<u16>(),
            0u32..=0xFF_FFFF,
            0u32..=Psn::MAX,
        )
            .prop_map(
                |(op, (se, mig, fecn, becn, ack), pad, tver, pkey, qpn, psn)| Repr {
                    opcode: Opcode(op),
                    solicited: se,
                    mig_req: mig,
                    pad_count: pad,
                    tver,
                    pkey: PKey(pkey),
                    fecn,
                    becn,
                    dest_qpn: Qpn::new(qpn),
                    ack_req: ack,
                    psn: Psn::new(psn),
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
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..24)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
