//! The body of a RoCEv2 Congestion Notification Packet (IBA Annex A17 §A17.9.3, 16 bytes).
//!
//! A CNP is a BTH with opcode 0x81 whose DestQP names the QP to slow down (and, on the wire,
//! BECN set), followed by 16 reserved bytes and the ICRC. This module handles those 16 bytes.
//!
//! ```text
//!  0: Reserved(128)
//! ```

use crate::{Error, Result};

mod field {
    use core::ops::Range;

    pub const RESERVED: Range<usize> = 0..16;
}

/// Length of the reserved CNP body in bytes.
pub const HEADER_LEN: usize = 16;

/// A read/write view of the reserved body of a CNP at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds the whole CNP body.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds the whole CNP body; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("CNP"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16 reserved bytes (zero when sent; receivers ignore them).
    #[inline]
    pub fn reserved(&self) -> &[u8] {
        &self.buffer.as_ref()[field::RESERVED]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the 16 reserved bytes to zero.
    #[inline]
    pub fn clear_reserved(&mut self) {
        self.buffer.as_mut()[field::RESERVED].fill(0);
    }
}

/// The contents of a CNP body: nothing, the 16 bytes are reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr;

impl Repr {
    /// Parses a CNP body: only its length is checked, the reserved bytes are ignored.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr)
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes 16 zero bytes into the start of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.clear_reserved();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The body of a CNP: the 16 zero bytes after the BTH of the example in NVIDIA/Mellanox's
    // "RoCEv2 CNP Packet Format Example" (8100ffff400000d200000000 <16 x 00> e42dad81).
    // Linux rxe does not send CNPs.
    static BYTES: [u8; 16] = [0; 16];

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.reserved(), &[0u8; 16][..]);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 16];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.clear_reserved();
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(Repr));
        // Nonzero reserved bytes are ignored.
        let bytes = [0xffu8; 16];
        assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(Repr));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xffu8; 20];
        Repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[..16], BYTES);
        // Only the 16-byte body is written.
        assert_eq!(bytes[16..], [0xff; 4]);
        assert_eq!(Repr.buffer_len(), 16);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..15]).unwrap_err(),
            Error::Truncated("CNP")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    /// A strategy over every valid `Repr` (there is one), shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        Just(Repr)
    }

    proptest! {
        #[test]
        fn parse_emit_roundtrip(repr in arb_repr()) {
            let mut bytes = [0xa5u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
            prop_assert_eq!(bytes, [0u8; HEADER_LEN]);
            prop_assert_eq!(Repr::parse(&Packet::new_unchecked(&bytes[..])), Ok(repr));
        }

        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
