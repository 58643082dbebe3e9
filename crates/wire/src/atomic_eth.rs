//! The Atomic Extended Transport Header (IBA vol 1 §9.3.4, 28 bytes): the operands of a
//! COMPARE SWAP or FETCH ADD request.
//!
//! ```text
//!  0: VA(64)
//!  8: R_Key(32)
//! 12: Swap (or Add) Data(64)
//! 20: Compare Data(64)
//! ```
//!
//! COMPARE SWAP writes Swap Data if the remote value equals Compare Data; FETCH ADD adds the
//! Add Data (in the swap field) and ignores Compare Data. VA must be 8-byte aligned; that is
//! the responder's check, not the parser's.

use crate::bytes::{read_u32, read_u64, write_u32, write_u64};
use crate::{Error, RKey, Result};

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const SWAP_ADD: usize = 12;
    pub const COMPARE: usize = 20;
}

/// Length of the AtomicETH in bytes.
pub const HEADER_LEN: usize = 28;

/// A read/write view of an AtomicETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole AtomicETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole AtomicETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("AtomicETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// VA, the remote virtual address of the 64-bit operand.
    #[inline]
    pub fn va(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::VA)
    }

    /// R_Key of the remote memory region or window.
    #[inline]
    pub fn rkey(&self) -> RKey {
        RKey(read_u32(self.buffer.as_ref(), field::RKEY))
    }

    /// Swap Data (COMPARE SWAP) or Add Data (FETCH ADD).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }

    /// Compare Data (COMPARE SWAP only).
    #[inline]
    pub fn compare(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets VA.
    #[inline]
    pub fn set_va(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::VA, value);
    }

    /// Sets R_Key.
    #[inline]
    pub fn set_rkey(&mut self, value: RKey) {
        write_u32(self.buffer.as_mut(), field::RKEY, value.0);
    }

    /// Sets Swap (or Add) Data.
    #[inline]
    pub fn set_swap_add(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::SWAP_ADD, value);
    }

    /// Sets Compare Data.
    #[inline]
    pub fn set_compare(&mut self, value: u64) {
        write_u64(self.buffer.as_mut(), field::COMPARE, value);
    }
}

/// The contents of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VA.
    pub va: u64,
    /// R_Key.
    pub rkey: RKey,
    /// Swap Data (COMPARE SWAP) or Add Data (FETCH ADD).
    pub swap_add: u64,
    /// Compare Data (ignored by FETCH ADD).
    pub compare: u64,
}

impl Repr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The AtomicETH of an RC COMPARE_SWAP captured from the Linux rxe driver (the 28 bytes
    // after the BTH of 1300ffff000000188083aa0a...): swap and compare are both 0.
    static BYTES: [u8; 28] = [
        0x00, 0x00, 0x55, 0xf6, 0xa5, 0x66, 0xa0, 0x00, // VA
        0x00, 0x00, 0x09, 0x19, // R_Key
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Swap Data
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // Compare Data
    ];

    fn repr() -> Repr {
        Repr {
            va: 0x0000_55f6_a566_a000,
            rkey: RKey(0x919),
            swap_add: 0,
            compare: 0,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.va(), 0x0000_55f6_a566_a000);
        assert_eq!(packet.rkey(), RKey(0x919));
        assert_eq!(packet.swap_add(), 0);
        assert_eq!(packet.compare(), 0);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 28];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_va(0x0000_55f6_a566_a000);
        packet.set_rkey(RKey(0x919));
        packet.set_swap_add(0);
        packet.set_compare(0);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0xffu8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..27]).unwrap_err(),
            Error::Truncated("AtomicETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    #[test]
    fn swap_comes_before_compare() {
        // Built by hand: the capture has both operands 0, so check their order separately.
        let repr = Repr {
            va: 0x1000,
            rkey: RKey(0x0102_0304),
            swap_add: 0x1111_2222_3333_4444,
            compare: 0x5555_6666_7777_8888,
        };
        let mut bytes = [0u8; 28];
        repr.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes[12..20], 0x1111_2222_3333_4444u64.to_be_bytes());
        assert_eq!(bytes[20..28], 0x5555_6666_7777_8888u64.to_be_bytes());
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (any::<u64>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
            |(va, rkey, swap_add, compare)| Repr {
                va,
                rkey: RKey(rkey),
                swap_add,
                compare,
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
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..48)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
