//! The RDMA Extended Transport Header (IBA vol 1 §9.3.3, 16 bytes): the remote buffer of an
//! RDMA WRITE (FIRST and ONLY packets) or RDMA READ request.
//!
//! ```text
//!  0: VA(64)
//!  8: R_Key(32)
//! 12: DMA Length(32)
//! ```

use crate::bytes::{read_u32, read_u64, write_u32, write_u64};
use crate::{Error, RKey, Result};

mod field {
    pub const VA: usize = 0;
    pub const RKEY: usize = 8;
    pub const DMA_LEN: usize = 12;
}

/// Length of the RETH in bytes.
pub const HEADER_LEN: usize = 16;

/// A read/write view of a RETH at the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length (see the crate's panic-freedom contract).
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking that it holds a whole RETH.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Packet::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks that the buffer holds a whole RETH; after this no accessor panics.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            Err(Error::Truncated("RETH"))
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// VA, the remote virtual address.
    #[inline]
    pub fn va(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::VA)
    }

    /// R_Key of the remote memory region or window.
    #[inline]
    pub fn rkey(&self) -> RKey {
        RKey(read_u32(self.buffer.as_ref(), field::RKEY))
    }

    /// DMA Length: the length of the whole transfer in bytes.
    #[inline]
    pub fn dma_len(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::DMA_LEN)
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

    /// Sets DMA Length.
    #[inline]
    pub fn set_dma_len(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::DMA_LEN, value);
    }
}

/// The contents of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// VA.
    pub va: u64,
    /// R_Key.
    pub rkey: RKey,
    /// DMA Length.
    pub dma_len: u32,
}

impl Repr {
    /// Parses a RETH.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr> {
        packet.check_len()?;
        Ok(Repr {
            va: packet.va(),
            rkey: packet.rkey(),
            dma_len: packet.dma_len(),
        })
    }

    /// The number of bytes `emit` writes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the RETH into the first `HEADER_LEN` bytes of `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    // The RETH of an RC RDMA_READ_REQUEST captured from the Linux rxe driver (the 16 bytes
    // after the BTH of 0c00ffff0000001680615f02...).
    static BYTES: [u8; 16] = [
        0x00, 0x00, 0x56, 0x2b, 0xa6, 0x9d, 0x10, 0x00, 0x00, 0x00, 0x07, 0x47, 0x00, 0x00, 0x00,
        0x40,
    ];

    fn repr() -> Repr {
        Repr {
            va: 0x0000_562b_a69d_1000,
            rkey: RKey(0x747),
            dma_len: 64,
        }
    }

    #[test]
    fn test_deconstruct() {
        let packet = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(packet.va(), 0x0000_562b_a69d_1000);
        assert_eq!(packet.rkey(), RKey(0x747));
        assert_eq!(packet.dma_len(), 64);
    }

    #[test]
    fn test_construct() {
        let mut bytes = [0xa5u8; 16];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        packet.set_va(0x0000_562b_a69d_1000);
        packet.set_rkey(RKey(0x747));
        packet.set_dma_len(64);
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_parse() {
        let packet = Packet::new_unchecked(&BYTES[..]);
        assert_eq!(Repr::parse(&packet), Ok(repr()));
    }

    #[test]
    fn test_emit() {
        let mut bytes = [0u8; 16];
        repr().emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(bytes, BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&BYTES[..15]).unwrap_err(),
            Error::Truncated("RETH")
        );
        assert!(Repr::parse(&Packet::new_unchecked(&BYTES[..0])).is_err());
    }

    /// A strategy over every valid `Repr`, shared with the whole-packet tests.
    pub(crate) fn arb_repr() -> impl Strategy<Value = Repr> {
        (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(va, rkey, dma_len)| Repr {
            va,
            rkey: RKey(rkey),
            dma_len,
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
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..32)) {
            let _ = Repr::parse(&Packet::new_unchecked(&bytes[..]));
        }
    }
}
