//! The Datagram Extended Transport Header (IBA vol 1 §9.3.2, 8 bytes): present in every UD
//! packet, after the BTH.
//!
//! ```text
//!  0: Q_Key(32)
//!  4: Rsv8(8) SrcQP(24)
//! ```

use crate::bytes::{read_u24, read_u32, write_u32};
use crate::{Error, QKey, Qpn, Result};

mod field {
    pub const QKEY: usize = 0;
    pub const RSV_SRC_QP: usize = 4;
    pub const SRC_QP: usize = 5;
}

/// Length of the DETH in bytes.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a DETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole DETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole DETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("DETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Q_Key, checked against the destination QP's Q_Key.
    #[inline]
    pub fn qkey(&self) -> QKey {
        QKey(read_u32(self.buffer.as_ref(), field::QKEY))
    }

    /// SrcQP, the sender's QP number.
    #[inline]
    pub fn src_qpn(&self) -> Qpn {
        Qpn::new(read_u24(self.buffer.as_ref(), field::SRC_QP))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Q_Key.
    #[inline]
    pub fn set_qkey(&mut self, value: QKey) {
        write_u32(self.buffer.as_mut(), field::QKEY, value.0);
    }

    /// Sets SrcQP; the reserved byte before it becomes 0.
    #[inline]
    pub fn set_src_qpn(&mut self, value: Qpn) {
        write_u32(self.buffer.as_mut(), field::RSV_SRC_QP, value.value());
    }
}

/// The meaningful contents of a DETH. The reserved byte is not kept: it is emitted as zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Q_Key.
    pub qkey: QKey,
    /// SrcQP.
    pub src_qpn: Qpn,
}

impl Repr {
    /// Parses a DETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            qkey: packet.qkey(),
            src_qpn: packet.src_qpn(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the DETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_qkey(self.qkey);
        packet.set_src_qpn(self.src_qpn);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The DETH of a UD SEND_ONLY captured from the Linux rxe driver (the 8 bytes after the BTH
    // of 6400ffff0000001a00954fb7...): Q_Key 0x11111111, SrcQP 0x1a.
    static BYTES: [u8; 8] = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x1a];

    fn repr() -> Repr {
        Repr {
            qkey: QKey(0x1111_1111),
            src_qpn: Qpn::new(0x1a),
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.qkey(), QKey(0x1111_1111));
        assert_eq!(packet.src_qpn(), Qpn::new(0x1a));
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_qkey(QKey(0x1111_1111));
        packet.set_src_qpn(Qpn::new(0x1a));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xffu8; 8];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated("DETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn reserved_byte_ignored() {
        // A GSI DETH (well-known Q_Key, SrcQP 1) with the reserved byte set on the wire.
        let bytes = [0x80, 0x01, 0x00, 0x00, 0xff, 0x00, 0x00, 0x01];
        let repr = Repr::parse(&Packet::new_unchecked(&bytes[..])).unwrap();
        assert_eq!(repr.qkey, QKey::GSI);
        assert_eq!(repr.src_qpn, Qpn::GSI);
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (any::<u32>(), 0u32..=0xFF_FFFF).prop_map(|(qkey, qpn)| Repr {
            qkey: QKey(qkey),
            src_qpn: Qpn::new(qpn),
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
