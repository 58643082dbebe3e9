//! Packet Sequence Numbers: 24-bit serial arithmetic (IBA §9.7.1).
//!
//! PSNs wrap at 2^24. Two PSNs are compared by the sign of their 24-bit difference, so "a comes
//! before b" holds when b is less than 2^23 ahead of a. This is not a total order, which is why
//! `Psn` does not implement `Ord`: use [`Psn::cmp_serial`] or [`Psn::diff`].

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit Packet Sequence Number. The upper 8 bits of the inner value are always zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Psn(u32);

/// Deserializes the plain 24-bit value (as the derived form would, for formats that write a
/// newtype as its content) and refuses one with any of the upper 8 bits set, so a value read
/// from a control socket keeps the invariant [`Psn::new`] keeps.
#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for Psn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Psn, D::Error> {
        let v = <u32 as serde::Deserialize>::deserialize(d)?;
        if v > 0x00FF_FFFF {
            return Err(<D::Error as serde::de::Error>::custom("a PSN has 24 bits"));
        }
        Ok(Psn(v))
    }
}

impl Psn {
    /// The largest PSN value, 2^24 - 1.
    pub const MAX: u32 = 0x00FF_FFFF;

    /// A PSN from the low 24 bits of `value`.
    pub const fn new(value: u32) -> Psn {
        Psn(value & Psn::MAX)
    }

    /// The 24-bit value.
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n`, wrapping at 2^24.
    pub const fn add(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_add(n))
    }

    /// `self - n`, wrapping at 2^24.
    pub const fn sub(self, n: u32) -> Psn {
        Psn::new(self.0.wrapping_sub(n))
    }

    /// The next PSN.
    pub const fn next(self) -> Psn {
        self.add(1)
    }

    /// The signed distance from `other` to `self` in 24-bit serial arithmetic, in
    /// `-2^23..2^23`: positive when `self` is after `other`.
    pub const fn diff(self, other: Psn) -> i32 {
        // Shift the 24-bit difference into the top of an i32 and back, sign-extending it.
        ((self.0.wrapping_sub(other.0) << 8) as i32) >> 8
    }

    /// Serial comparison: `Less` when `self` comes before `other`.
    pub fn cmp_serial(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }

    /// Whether `self` lies in the half-open window `[start, start + len)`.
    pub fn in_window(self, start: Psn, len: u32) -> bool {
        self.0.wrapping_sub(start.0) & Psn::MAX < len
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn wraps_at_24_bits() {
        assert_eq!(Psn::new(Psn::MAX).next(), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1).value(), Psn::MAX);
        assert_eq!(Psn::new(0x0123_4567).value(), 0x23_4567);
    }

    #[test]
    fn compares_across_the_wrap() {
        let before = Psn::new(Psn::MAX - 2);
        let after = Psn::new(3);
        assert_eq!(after.diff(before), 6);
        assert_eq!(before.diff(after), -6);
        assert_eq!(before.cmp_serial(after), Ordering::Less);
        assert_eq!(after.cmp_serial(after), Ordering::Equal);
        assert!(Psn::new(1).in_window(before, 7));
        assert!(!Psn::new(4).in_window(before, 6));
    }

    proptest! {
        #[test]
        fn add_then_diff_is_identity(a in 0u32..=Psn::MAX, n in 0u32..(1 << 23)) {
            let a = Psn::new(a);
            prop_assert_eq!(a.add(n).diff(a), n as i32);
            prop_assert_eq!(a.add(n).sub(n), a);
        }

        #[test]
        fn diff_is_antisymmetric(a in 0u32..=Psn::MAX, b in 0u32..=Psn::MAX) {
            let (a, b) = (Psn::new(a), Psn::new(b));
            let d = a.diff(b);
            prop_assert!((-(1 << 23)..(1 << 23)).contains(&d));
            if d != -(1 << 23) {
                prop_assert_eq!(b.diff(a), -d);
            }
        }
    }
}
