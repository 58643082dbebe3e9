//! The Immediate Data Extended Transport Header (IBA vol 1 §9.3.6, 4 bytes): 32 opaque bits
//! carried by the "with Immediate" SEND and RDMA WRITE opcodes and handed unchanged to the
//! receiver's work completion.
//!
//! ```text
//!  0: Immediate Data(32)
//! ```
//!
//! The value is read big-endian here; verbs treat it as opaque network-order bytes
//! (`ibv_wc.imm_data` is `__be32`), so whoever hands it to verbs must keep that in mind.

use crate::bytes::{read_u32, write_u32};
use crate::{Error, Result};

mod field {
    pub const DATA: usize = 0;
}

/// Length of the ImmDt header in bytes.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an ImmDt header at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole ImmDt header.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole ImmDt header; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("ImmDt"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Immediate Data, read big-endian.
    #[inline]
    pub fn data(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::DATA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets Immediate Data, written big-endian.
    #[inline]
    pub fn set_data(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::DATA, value);
    }
}

/// The contents of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Immediate Data, as read big-endian from the wire.
    pub data: u32,
}

impl Repr {
    /// Parses an ImmDt header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            data: packet.data(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the ImmDt header into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_data(self.data);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // Built by hand: immediate data 0x12345678, big-endian on the wire.
    static BYTES: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

    fn repr() -> Repr {
        Repr { data: 0x1234_5678 }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.data(), 0x1234_5678);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 4];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_data(0x1234_5678);
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
            Error::Truncated("ImmDt")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        any::<u32>().prop_map(|data| Repr { data })
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
    }
}
