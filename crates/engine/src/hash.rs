//! A fixed hash for the small keys of the data path's tables (QPNs; a device address and a
//! QPN): a multiply and a rotate per word, no per-process seed, so that runs stay
//! reproducible and a look-up costs a few cycles where std's SipHash cost a tenth of a busy
//! UD sender. Only for keys the table's owner chooses (its own QPNs, the peers the daemon
//! named), never for keys a peer on the wire picks: nothing stops chosen collisions.

use core::hash::{BuildHasherDefault, Hasher};

/// See the module docs.
#[derive(Debug, Default, Clone, Copy)]
pub struct FixedHasher(u64);

/// What a `HashMap`/`HashSet` takes to use [`FixedHasher`].
pub type FixedState = BuildHasherDefault<FixedHasher>;

impl Hasher for FixedHasher {
    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 29)
    }

    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, n: u8) {
        self.write_u64(u64::from(n));
    }

    fn write_u16(&mut self, n: u16) {
        self.write_u64(u64::from(n));
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(26) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::hash::BuildHasher;

    #[test]
    fn equal_keys_hash_alike_and_close_keys_apart() {
        let h = |k: (u32, u32)| FixedState::default().hash_one(k);
        assert_eq!(h((7, 0x4000)), h((7, 0x4000)));
        let mut seen: Vec<u64> = (0..1024).map(|q| h((7, 0x4000 + q * 64))).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1024, "blocks of one peer spread");
        // The bytes of a longer key all count.
        let b = |bytes: &[u8]| {
            let mut s = FixedHasher::default();
            s.write(bytes);
            s.finish()
        };
        assert_ne!(
            b(&[1; 16]),
            b(&[1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2])
        );
    }
}
