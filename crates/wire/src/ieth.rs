//! The Invalidate Extended Transport Header (IBA vol 1 §9.3.7, 4 bytes): the R_Key that a
//! SEND with Invalidate asks the receiver to invalidate.
//!
//! ```text
//!  0: R_Key(32)
//! ```

use crate::bytes::{read_u32, write_u32};
use crate::{Error, RKey, Result};

mod field {
    pub const RKEY: usize = 0;
}

/// Length of the IETH in bytes.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an IETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole IETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole IETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("IETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// R_Key to invalidate.
    #[inline]
    pub fn rkey(&self) -> RKey {
        RKey(read_u32(self.buffer.as_ref(), field::RKEY))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets R_Key.
    #[inline]
    pub fn set_rkey(&mut self, value: RKey) {
        write_u32(self.buffer.as_mut(), field::RKEY, value.0);
    }
}

/// The contents of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// R_Key to invalidate.
    pub rkey: RKey,
}

impl Repr {
    /// Parses an IETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            rkey: packet.rkey(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the IETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_rkey(self.rkey);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // Built by hand: R_Key 0x00000747 (the key seen in the rxe RDMA READ capture).
    static BYTES: [u8; 4] = [0x00, 0x00, 0x07, 0x47];

    fn repr() -> Repr {
        Repr { rkey: RKey(0x747) }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.rkey(), RKey(0x747));
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 4];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_rkey(RKey(0x747));
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
            Error::Truncated("IETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        any::<u32>().prop_map(|rkey| Repr { rkey: RKey(rkey) })
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
