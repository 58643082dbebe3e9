//! The daemon's heartbeat: how a client that waits on softibd tells a daemon that is busy or
//! idle from one that stopped answering (SIGSTOP, a hang, a crash that left the socket open).
//!
//! The daemon keeps [`ALIVE_FILE`] in each host's runtime directory: [`Beat::LEN`] bytes, its
//! pid and a count it raises at least every [`BEAT_EVERY`] while its loop turns (the loop
//! never sleeps longer than a second). A client that has waited [`SILENT_AFTER`] without seeing
//! the count change says so, with the process state the kernel reports for the pid. The file
//! lives where the socket does — tmpfs under /run or /tmp in practice — so reading it is a
//! page-cache copy, and it costs the daemon one `pwrite` per beat, not one per turn.

use std::time::Duration;

/// The heartbeat file in a host's runtime directory.
pub const ALIVE_FILE: &str = "softibd.alive";

/// The daemon raises its count at least this often while its loop turns.
pub const BEAT_EVERY: Duration = Duration::from_millis(250);

/// How long a client waits without a beat before it says the daemon stopped answering: long
/// enough for the longest sleep of a live loop (one second) and a loaded machine's delays.
pub const SILENT_AFTER: Duration = Duration::from_secs(4);

/// One beat: who beats, and how many times it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Beat {
    /// The daemon's process id.
    pub pid: u32,
    /// Raised at every beat; a changed value is a live daemon.
    pub count: u64,
}

impl Beat {
    /// The encoded length.
    pub const LEN: usize = 16;
    const MAGIC: [u8; 4] = *b"SIBA";

    /// The file's bytes: magic, pid, count (little-endian).
    pub fn encode(&self) -> [u8; Beat::LEN] {
        let mut b = [0u8; Beat::LEN];
        b[..4].copy_from_slice(&Beat::MAGIC);
        b[4..8].copy_from_slice(&self.pid.to_le_bytes());
        b[8..].copy_from_slice(&self.count.to_le_bytes());
        b
    }

    /// A beat from the file's bytes; `None` for anything else (a short read, another file).
    pub fn decode(bytes: &[u8]) -> Option<Beat> {
        let b: &[u8; Beat::LEN] = bytes.get(..Beat::LEN)?.try_into().ok()?;
        if b[..4] != Beat::MAGIC {
            return None;
        }
        let pid = u32::from_le_bytes(b[4..8].try_into().ok()?);
        let count = u64::from_le_bytes(b[8..].try_into().ok()?);
        Some(Beat { pid, count })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_round_trips_and_anything_else_is_refused() {
        let b = Beat {
            pid: 4242,
            count: u64::MAX - 1,
        };
        assert_eq!(Beat::decode(&b.encode()), Some(b));
        assert_eq!(Beat::decode(&b.encode()[..15]), None);
        let mut other = b.encode();
        other[0] = b'X';
        assert_eq!(Beat::decode(&other), None);
        assert_eq!(Beat::decode(&[]), None);
    }
}
