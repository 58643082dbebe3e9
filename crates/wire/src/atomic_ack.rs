//! The Atomic Acknowledge Extended Transport Header (IBA vol 1 §9.3.8, 8 bytes): follows the
//! AETH of an ATOMIC ACKNOWLEDGE and returns the remote value as it was before the operation.
//!
//! ```text
//!  0: Original Remote Data(64)
//! ```

use crate::bytes::{read_u64, write_u64};
use crate::{Error, Result};

mod field {
    pub const ORIG: usize = 0;
}

/// Length of the AtomicAckETH in bytes.
pub const HEADER_LEN: usize = 8;

/// A read/write view of an AtomicAckETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole AtomicAckETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole AtomicAckETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("AtomicAckETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Original Remote Data: the 64-bit value before the atomic operation.
    #[inline]
    pub fn orig(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ORIG)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Original Remote Data.
    #[inline]
    pub fn set_orig(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::ORIG, value);
    }
}

/// The contents of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Original Remote Data.
    pub orig: u64,
}

impl Repr {
    /// Parses an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            orig: packet.orig(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicAckETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_orig(self.orig);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The AtomicAckETH of an RC ATOMIC_ACKNOWLEDGE captured from the Linux rxe driver (the 8
    // bytes after BTH and AETH of 1200ffff000000180083aa0a 1f000001 ...).
    static BYTES: [u8; 8] = [0xe8, 0xf3, 0xc9, 0x63, 0xeb, 0x00, 0x0c, 0x16];

    fn repr() -> Repr {
        Repr {
            orig: 0xe8f3_c963_eb00_0c16,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.orig(), 0xe8f3_c963_eb00_0c16);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 8];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_orig(0xe8f3_c963_eb00_0c16);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0u8; 8];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated("AtomicAckETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        any::<u64>().prop_map(|orig| Repr { orig })
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
