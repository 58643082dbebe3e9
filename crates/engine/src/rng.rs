//! The engine's only source of randomness: a seeded generator (SplitMix64), so that a run is
//! a pure function of its configuration, seed and inputs. Used for initial PSNs, QPNs and the
//! key bits of L_Keys and R_Keys, never for protocol decisions.

/// A small, fast, seedable generator (SplitMix64). Not cryptographic: keys drawn from it are
/// as guessable as rxe's, which is the point of comparison.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose whole output is determined by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Fills `out` with random bytes.
    pub fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let r = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&r[..chunk.len()]);
        }
    }

    /// A value in `0..n` (`n` > 0), without modulo bias worth caring about for n ≪ 2^32.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
        let mut r = Rng::new(7);
        assert!((0..1000).all(|_| r.below(10) < 10));
        let (mut x, mut y) = ([0u8; 13], [0u8; 13]);
        Rng::new(3).fill(&mut x);
        Rng::new(3).fill(&mut y);
        assert_eq!(x, y);
        assert!(x.iter().any(|&b| b != 0));
    }
}
