//! Time as the engine sees it: microseconds since an origin the caller chooses.
//!
//! The engine never reads a clock. Every input carries `now`; the driver (or the simulator)
//! decides what it means. Microseconds are fine-grained enough for the IBA timers: the local
//! ACK timeout is 4.096 µs × 2^timeout and the shortest RNR timer is 10 µs.

use core::fmt;
use core::ops::{Add, AddAssign, Sub};

/// A point in time, in microseconds since the caller's origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    /// The origin.
    pub const ZERO: Instant = Instant(0);
    /// The far future, used for "no deadline".
    pub const NEVER: Instant = Instant(u64::MAX);

    /// An instant `micros` after the origin.
    pub const fn from_micros(micros: u64) -> Instant {
        Instant(micros)
    }

    /// Microseconds since the origin.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// `self - earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration(self.0.saturating_sub(earlier.0))
    }
}

/// A span of time in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Duration(u64);

impl Duration {
    /// No time.
    pub const ZERO: Duration = Duration(0);

    /// `micros` microseconds.
    pub const fn from_micros(micros: u64) -> Duration {
        Duration(micros)
    }

    /// `millis` milliseconds.
    pub const fn from_millis(millis: u64) -> Duration {
        Duration(millis.saturating_mul(1000))
    }

    /// The span in microseconds.
    pub const fn as_micros(self) -> u64 {
        self.0
    }

    /// The local ACK timeout of IBA §9.7.6.1.3: 4.096 µs × 2^`timeout`, for `timeout` in 1..=31
    /// (0 means "infinite" and gives `None`). Rounded up to whole microseconds.
    pub fn local_ack_timeout(timeout: u8) -> Option<Duration> {
        match timeout & 0x1F {
            0 => None,
            t => {
                let nanos = 4096u64 << t;
                Some(Duration(nanos.div_ceil(1000)))
            }
        }
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(d.0))
    }
}

impl AddAssign<Duration> for Instant {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, earlier: Instant) -> Duration {
        self.saturating_since(earlier)
    }
}

impl Add for Duration {
    type Output = Duration;
    fn add(self, d: Duration) -> Duration {
        Duration(self.0.saturating_add(d.0))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:06}s", self.0 / 1_000_000, self.0 % 1_000_000)
    }
}

impl fmt::Display for Duration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}us", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ack_timeout_follows_the_spec_formula() {
        assert_eq!(Duration::local_ack_timeout(0), None);
        assert_eq!(
            Duration::local_ack_timeout(1),
            Some(Duration::from_micros(9))
        );
        // perftest's default -u 14: 4.096 µs × 16384 = 67.108864 ms.
        assert_eq!(
            Duration::local_ack_timeout(14),
            Some(Duration::from_micros(67_109))
        );
        assert_eq!(
            Duration::local_ack_timeout(31),
            Some(Duration::from_micros(8_796_093_023))
        );
    }

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Instant::NEVER + Duration::from_micros(1), Instant::NEVER);
        assert_eq!(Instant::ZERO - Instant::from_micros(5), Duration::ZERO);
    }
}
