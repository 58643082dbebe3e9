//! The simulator's randomness: the engine's seeded SplitMix64 with the helpers a fault model
//! and a workload need. Every stream is forked from the run's seed, never from the OS.

use softib_engine::rng::Rng;

/// A seeded random stream.
#[derive(Debug, Clone)]
pub(crate) struct SimRng(Rng);

impl SimRng {
    /// A stream whose whole output is determined by `seed`.
    pub(crate) fn new(seed: u64) -> SimRng {
        SimRng(Rng::new(seed))
    }

    /// An independent stream derived from this one (so that drawing more numbers in one part of
    /// the simulator does not shift what another part draws).
    pub(crate) fn fork(&mut self) -> SimRng {
        let s = self.0.next_u64();
        SimRng(Rng::new(s ^ 0xD1B5_4A32_D192_ED03))
    }

    /// 64 random bits.
    pub(crate) fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A value in `0..n` (0 when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.0.below(n)
        }
    }

    /// A value in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo + 1)
        }
    }

    /// A uniform value in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }

    /// An exponentially distributed value with mean `mean`, rounded down.
    pub(crate) fn exponential(&mut self, mean: f64) -> u64 {
        if mean <= 0.0 {
            return 0;
        }
        let u = 1.0 - self.unit(); // (0, 1]
        (-mean * u.ln()) as u64
    }

    /// Fills `buf` with random bytes.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.u64().to_le_bytes();
        rest.copy_from_slice(&last[..rest.len()]);
    }

    /// One element of a non-empty slice.
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// An index drawn with the given weights (at least one nonzero).
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let mut x = self.below(total);
        for (i, &w) in weights.iter().enumerate() {
            if x < u64::from(w) {
                return i;
            }
            x -= u64::from(w);
        }
        weights.len() - 1
    }
}
