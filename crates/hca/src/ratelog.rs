//! Log lines that a peer can cause, rate-limited: a flood of refused connections or of junk
//! datagrams must not turn into a flood of writes to the log (each a system call on the
//! daemon's only thread). At most [`BURST`] lines per [`WINDOW`] per log; the lines held back
//! are counted and said with the next line let through.

use std::time::{Duration, Instant};

/// How many lines a window lets through.
pub const BURST: u32 = 5;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// One rate-limited log.
#[derive(Debug)]
pub struct RateLog {
    window_start: Option<Instant>,
    in_window: u32,
    suppressed: u64,
}

impl Default for RateLog {
    fn default() -> RateLog {
        RateLog::new()
    }
}

impl RateLog {
    /// A log that has said nothing yet.
    pub const fn new() -> RateLog {
        RateLog {
            window_start: None,
            in_window: 0,
            suppressed: 0,
        }
    }

    /// The line to write for `line` at `now`, with the count of those held back since the
    /// last one written; `None` when this one is held back.
    pub fn admit(&mut self, now: Instant, line: impl FnOnce() -> String) -> Option<String> {
        let fresh = self
            .window_start
            .is_none_or(|t| now.duration_since(t) >= WINDOW);
        if fresh {
            self.window_start = Some(now);
            self.in_window = 0;
        }
        if self.in_window >= BURST {
            self.suppressed += 1;
            return None;
        }
        self.in_window += 1;
        let mut s = line();
        if self.suppressed > 0 {
            s += &format!(
                " ({} more like this were not logged)",
                std::mem::take(&mut self.suppressed)
            );
        }
        Some(s)
    }

    /// Writes `line` to stderr unless held back.
    pub fn say(&mut self, line: impl FnOnce() -> String) {
        if let Some(s) = self.admit(Instant::now(), line) {
            eprintln!("{s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_let_through_the_rest_counted_and_said_after_the_window() {
        let mut log = RateLog::new();
        let t0 = Instant::now();
        let said: Vec<_> = (0..100)
            .filter_map(|i| log.admit(t0, || format!("line {i}")))
            .collect();
        assert_eq!(said.len(), BURST as usize);
        assert_eq!(said[0], "line 0");
        assert_eq!(log.admit(t0 + WINDOW / 2, || "held".into()), None);
        let next = log.admit(t0 + WINDOW, || "next".into()).unwrap();
        assert_eq!(next, "next (96 more like this were not logged)");
        assert_eq!(log.admit(t0 + WINDOW, || "clean".into()).unwrap(), "clean");
    }
}
