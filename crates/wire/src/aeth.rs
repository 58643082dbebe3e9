//! The ACK Extended Transport Header (IBA vol 1 §9.3.5, 4 bytes): carried by ACKNOWLEDGE,
//! ATOMIC ACKNOWLEDGE and the FIRST, LAST and ONLY RDMA READ responses of the RC transport.
//!
//! ```text
//!  0: Syndrome(8) MSN(24)
//!
//!  Syndrome: 0(1) Type(2) Value(5)
//!    Type 00: ACK      Value = credit count code (IBA table 44)
//!    Type 01: RNR NAK  Value = RNR timer code (IBA table 45)
//!    Type 10: reserved
//!    Type 11: NAK      Value = NAK code (IBA table 46)
//! ```
//!
//! MSN, the Message Sequence Number, counts the requests the responder has completed.

use core::fmt;

use crate::bytes::{read_u24, write_u24};
use crate::{Error, Result};

mod field {
    pub const SYNDROME: usize = 0;
    pub const MSN: usize = 1;
}

/// Length of the AETH in bytes.
pub const HEADER_LEN: usize = 4;

/// The largest MSN value (24 bits).
pub const MSN_MAX: u32 = 0x00FF_FFFF;

enum_with_unknown! {
    /// A NAK code, the value of a NAK syndrome (IBA §9.7.5.2.4, table 46).
    pub enum NakCode(u8) {
        /// PSN Sequence Error: the responder expected an earlier PSN (syndrome 0x60).
        PsnSequenceError = 0,
        /// Invalid Request (syndrome 0x61).
        InvalidRequest = 1,
        /// Remote Access Error: R_Key, bounds or access rights check failed (syndrome 0x62).
        RemoteAccessError = 2,
        /// Remote Operational Error (syndrome 0x63).
        RemoteOperationalError = 3,
        /// Invalid RD Request (syndrome 0x64; RD only).
        InvalidRdRequest = 4,
    }
}

impl fmt::Display for NakCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NakCode::PsnSequenceError => f.write_str("PSN sequence error"),
            NakCode::InvalidRequest => f.write_str("invalid request"),
            NakCode::RemoteAccessError => f.write_str("remote access error"),
            NakCode::RemoteOperationalError => f.write_str("remote operational error"),
            NakCode::InvalidRdRequest => f.write_str("invalid RD request"),
            NakCode::Unknown(code) => write!(f, "reserved code {code}"),
        }
    }
}

/// The AETH Syndrome byte (IBA §9.7.5.2, table 43), decoded.
///
/// `Syndrome::from(u8)` is total and `u8::from` gives the same byte back. Values built by hand
/// are expected to be canonical (5-bit `credit`, `timer` and NAK code; `Reserved` only for bytes
/// that decode as reserved); `u8::from` masks the others into shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// ACK (type 00), with the credit count code (IBA table 44, see [`credit_count`]).
    Ack {
        /// The 5-bit credit count code; 31 means "invalid", i.e. unlimited credits.
        credit: u8,
    },
    /// RNR NAK (type 01), with the RNR timer code (IBA table 45, see [`rnr_timer_usec`]).
    RnrNak {
        /// The 5-bit RNR timer code: how long the requester must wait before retrying.
        timer: u8,
    },
    /// NAK (type 11), with its code.
    Nak(NakCode),
    /// A reserved syndrome (bit 7 set, or type 10), with the raw byte.
    Reserved(u8),
}

impl Syndrome {
    /// An ACK with credit code 31, "invalid credit count": what Linux rxe always sends
    /// (`AETH_ACK_UNLIMITED`, syndrome byte 0x1F).
    pub const ACK_UNLIMITED_CREDIT: Syndrome = Syndrome::Ack { credit: 31 };

    /// The kind of syndrome: `"ack"`, `"rnr_nak"`, `"nak"` or `"reserved"`.
    pub const fn kind(&self) -> &'static str {
        match self {
            Syndrome::Ack { .. } => "ack",
            Syndrome::RnrNak { .. } => "rnr_nak",
            Syndrome::Nak(_) => "nak",
            Syndrome::Reserved(_) => "reserved",
        }
    }

    /// The low 5 bits of the syndrome byte: the credit code, RNR timer code or NAK code.
    pub fn value(&self) -> u8 {
        u8::from(*self) & 0x1F
    }
}

impl From<u8> for Syndrome {
    fn from(byte: u8) -> Syndrome {
        let value = byte & 0x1F;
        if byte & 0x80 != 0 {
            return Syndrome::Reserved(byte);
        }
        match (byte >> 5) & 0x3 {
            0b00 => Syndrome::Ack { credit: value },
            0b01 => Syndrome::RnrNak { timer: value },
            0b11 => Syndrome::Nak(NakCode::from(value)),
            _ => Syndrome::Reserved(byte),
        }
    }
}

impl From<Syndrome> for u8 {
    fn from(syndrome: Syndrome) -> u8 {
        match syndrome {
            Syndrome::Ack { credit } => credit & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(code) => 0x60 | (u8::from(code) & 0x1F),
            Syndrome::Reserved(byte) => byte,
        }
    }
}

impl fmt::Display for Syndrome {
    /// `ACK credit 31`, `RNR NAK timer 12 (640 us)`, `NAK PSN sequence error`,
    /// `reserved syndrome 0x40`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Syndrome::Ack { credit } => write!(f, "ACK credit {credit}"),
            Syndrome::RnrNak { timer } => {
                write!(f, "RNR NAK timer {timer} ({} us)", rnr_timer_usec(timer))
            }
            Syndrome::Nak(code) => write!(f, "NAK {code}"),
            Syndrome::Reserved(byte) => write!(f, "reserved syndrome 0x{byte:02x}"),
        }
    }
}

/// Credit counts of the ACK credit codes 0..=30 (IBA §9.7.7.2.4, table 44).
const CREDIT_COUNTS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// The number of credits (receive WQEs) an ACK credit count code advertises (IBA table 44).
///
/// `None` for code 31, "invalid credit count", which requesters treat as unlimited credits, and
/// for any value that does not fit in 5 bits.
pub fn credit_count(code: u8) -> Option<u32> {
    CREDIT_COUNTS.get(usize::from(code)).copied()
}

/// RNR NAK timer delays in microseconds, indexed by code (IBA §9.7.5.2.8, table 45).
const RNR_TIMER_USEC: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The minimum delay in microseconds that an RNR NAK timer code asks for (IBA table 45). Only
/// the low 5 bits of `code` are used. Code 0 is the longest delay, 655.36 ms.
pub fn rnr_timer_usec(code: u8) -> u32 {
    RNR_TIMER_USEC[usize::from(code & 0x1F)]
}

/// The RNR timer code with the shortest delay that is at least `usec` microseconds. Code 0
/// counts as the longest delay (655.36 ms) and is also returned for any longer request.
pub fn rnr_timer_code_at_least(usec: u32) -> u8 {
    (1u8..32)
        .find(|&code| rnr_timer_usec(code) >= usec)
        .unwrap_or(0)
}

/// A read/write view of an AETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole AETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole AETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("AETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Syndrome.
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.buffer.as_ref()[field::SYNDROME])
    }

    /// MSN, the Message Sequence Number (24 bits).
    #[inline]
    pub fn msn(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Syndrome.
    #[inline]
    pub fn set_syndrome(&mut self, value: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = u8::from(value);
    }

    /// Sets MSN (low 24 bits of `value`).
    #[inline]
    pub fn set_msn(&mut self, value: u32) {
        write_u24(self.buffer.as_mut(), field::MSN, value & MSN_MAX);
    }
}

/// The contents of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// MSN (0..=0xFFFFFF).
    pub msn: u32,
}

impl Repr {
    /// Parses an AETH. A reserved syndrome or unknown NAK code is reported as such, not
    /// rejected; what to do about it is the transport's business.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            syndrome: packet.syndrome(),
            msn: packet.msn(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::string::ToString;

    // The AETH of an RC ACKNOWLEDGE captured from the Linux rxe driver
    // (1100ffff0000001200af47ee 1f000001 a92cbb8a): ACK, unlimited credit, MSN 1.
    static BYTES: [u8; 4] = [0x1f, 0x00, 0x00, 0x01];

    fn repr() -> Repr {
        Repr {
            syndrome: Syndrome::ACK_UNLIMITED_CREDIT,
            msn: 1,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.syndrome(), Syndrome::Ack { credit: 31 });
        assert_eq!(packet.msn(), 1);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 4];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_syndrome(Syndrome::Ack { credit: 31 });
        packet.set_msn(1);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0u8; 4];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..3]).unwrap_err(),
            Error::Truncated("AETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn test_nak_and_rnr_nak() {
        // Built by hand: a PSN sequence error NAK with MSN 0x123456.
        let bytes = [0x60, 0x12, 0x34, 0x56];
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(repr.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
        assert_eq!(repr.msn, 0x12_3456);
        // An RNR NAK with timer code 12 (0.64 ms).
        let bytes = [0x2c, 0x00, 0x00, 0x07];
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(repr.syndrome, Syndrome::RnrNak { timer: 12 });
        let mut out = [0u8; 4];
        repr.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
    }

    #[test]
    fn syndrome_bytes() {
        assert_eq!(Syndrome::from(0x1F), Syndrome::ACK_UNLIMITED_CREDIT);
        assert_eq!(Syndrome::from(0x00), Syndrome::Ack { credit: 0 });
        assert_eq!(Syndrome::from(0x20), Syndrome::RnrNak { timer: 0 });
        assert_eq!(Syndrome::from(0x3F), Syndrome::RnrNak { timer: 31 });
        assert_eq!(Syndrome::from(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from(0x5F), Syndrome::Reserved(0x5F));
        assert_eq!(Syndrome::from(0x61), Syndrome::Nak(NakCode::InvalidRequest));
        assert_eq!(
            Syndrome::from(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(
            Syndrome::from(0x63),
            Syndrome::Nak(NakCode::RemoteOperationalError)
        );
        assert_eq!(
            Syndrome::from(0x64),
            Syndrome::Nak(NakCode::InvalidRdRequest)
        );
        assert_eq!(Syndrome::from(0x65), Syndrome::Nak(NakCode::Unknown(5)));
        assert_eq!(Syndrome::from(0x80), Syndrome::Reserved(0x80));
        assert_eq!(Syndrome::from(0xE0), Syndrome::Reserved(0xE0));
        for byte in 0..=255u8 {
            assert_eq!(u8::from(Syndrome::from(byte)), byte);
            assert_eq!(Syndrome::from(byte).value(), byte & 0x1F);
        }
    }

    #[test]
    fn syndrome_kind_and_value() {
        assert_eq!(Syndrome::ACK_UNLIMITED_CREDIT.kind(), "ack");
        assert_eq!(Syndrome::ACK_UNLIMITED_CREDIT.value(), 31);
        assert_eq!(Syndrome::RnrNak { timer: 12 }.kind(), "rnr_nak");
        assert_eq!(Syndrome::RnrNak { timer: 12 }.value(), 12);
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).kind(), "nak");
        assert_eq!(Syndrome::Nak(NakCode::RemoteAccessError).value(), 2);
        assert_eq!(Syndrome::Reserved(0xC3).kind(), "reserved");
        assert_eq!(Syndrome::Reserved(0xC3).value(), 3);
    }

    #[test]
    fn syndrome_display() {
        assert_eq!(Syndrome::ACK_UNLIMITED_CREDIT.to_string(), "ACK credit 31");
        assert_eq!(
            Syndrome::RnrNak { timer: 12 }.to_string(),
            "RNR NAK timer 12 (640 us)"
        );
        assert_eq!(
            Syndrome::Nak(NakCode::PsnSequenceError).to_string(),
            "NAK PSN sequence error"
        );
        assert_eq!(
            Syndrome::Nak(NakCode::Unknown(9)).to_string(),
            "NAK reserved code 9"
        );
        assert_eq!(
            Syndrome::Reserved(0x40).to_string(),
            "reserved syndrome 0x40"
        );
    }

    #[test]
    fn credit_count_table() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(1), Some(1));
        assert_eq!(credit_count(2), Some(2));
        // From code 2 on, even codes are powers of two and odd codes 1.5 times the one before.
        for code in 2..=30u8 {
            let expected = if code % 2 == 0 {
                1u32 << (code / 2)
            } else {
                3u32 << ((code - 3) / 2)
            };
            assert_eq!(credit_count(code), Some(expected), "code {code}");
        }
        assert_eq!(credit_count(30), Some(32768));
        assert_eq!(credit_count(31), None);
        assert_eq!(credit_count(32), None);
        assert_eq!(credit_count(255), None);
    }

    #[test]
    fn rnr_timer_table() {
        assert_eq!(rnr_timer_usec(0), 655_360);
        assert_eq!(rnr_timer_usec(1), 10);
        assert_eq!(rnr_timer_usec(12), 640);
        assert_eq!(rnr_timer_usec(31), 491_520);
        assert_eq!(rnr_timer_usec(0x20 | 12), 640);
        // Codes 1..=31 are strictly increasing; code 0 is the longest of all.
        for code in 2..32u8 {
            assert!(rnr_timer_usec(code) > rnr_timer_usec(code - 1));
            assert!(rnr_timer_usec(0) > rnr_timer_usec(code));
        }
    }

    #[test]
    fn rnr_timer_inverse() {
        assert_eq!(rnr_timer_code_at_least(0), 1);
        assert_eq!(rnr_timer_code_at_least(10), 1);
        assert_eq!(rnr_timer_code_at_least(11), 2);
        assert_eq!(rnr_timer_code_at_least(640), 12);
        assert_eq!(rnr_timer_code_at_least(641), 13);
        assert_eq!(rnr_timer_code_at_least(491_520), 31);
        assert_eq!(rnr_timer_code_at_least(491_521), 0);
        assert_eq!(rnr_timer_code_at_least(655_360), 0);
        assert_eq!(rnr_timer_code_at_least(u32::MAX), 0);
        for code in 0..32u8 {
            assert_eq!(rnr_timer_code_at_least(rnr_timer_usec(code)), code);
        }
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (any::<u8>(), 0u32..=MSN_MAX).prop_map(|(syndrome, msn)| Repr {
            syndrome: Syndrome::from(syndrome),
            msn,
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
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..8)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }

        #[test]
        fn rnr_timer_code_is_smallest_sufficient(usec in 0u32..=700_000) {
            let code = rnr_timer_code_at_least(usec);
            let delay = rnr_timer_usec(code);
            if usec <= rnr_timer_usec(0) {
                prop_assert!(delay >= usec);
            }
            // No code has a delay in [usec, delay).
            for other in 0..32u8 {
                let d = rnr_timer_usec(other);
                prop_assert!(!(d >= usec && d < delay));
            }
        }
    }
}
