//! Noticing a daemon that stopped answering: a client that waits on softibd (for an answer,
//! a completion, a MAD) looks at the daemon's heartbeat (`softib_proto::liveness`) twice
//! a second, and once the count has not changed for `SILENT_AFTER` it stops waiting and says
//! why, with the state the kernel reports for the daemon's pid.

use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use softib_proto::liveness::{Beat, ALIVE_FILE, SILENT_AFTER};

use crate::Error;

/// How often a waiting client looks at the heartbeat.
pub(crate) const LOOK_EVERY: Duration = Duration::from_millis(500);

/// What the kernel says of a daemon that stopped beating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonState {
    /// Suspended: SIGSTOP, a terminal stop or a debugger (state `T` or `t`).
    Stopped,
    /// Gone or a zombie (no `/proc/PID`, or state `Z`/`X`), though its socket is still open
    /// (a child holds it) — or it runs in another PID namespace.
    Dead,
    /// Running or sleeping, but its loop has not turned (the state letter).
    Hung(char),
}

impl DaemonState {
    /// The state of process `pid`, from `/proc/PID/stat`.
    pub fn of(pid: u32) -> DaemonState {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return DaemonState::Dead;
        };
        // "PID (COMM) S ...": the command may hold spaces and parentheses, the state follows
        // the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        match state {
            Some('T' | 't') => DaemonState::Stopped,
            Some('Z' | 'X') | None => DaemonState::Dead,
            Some(c) => DaemonState::Hung(c),
        }
    }

    /// What a user can do about it.
    pub fn hint(&self, pid: u32) -> String {
        match self {
            DaemonState::Stopped => {
                format!(
                    "it is suspended; `kill -CONT {pid}` resumes it, then open the device again"
                )
            }
            DaemonState::Dead => {
                "start it again (`softib daemon`) and open the device again".to_string()
            }
            DaemonState::Hung(_) => format!(
                "its loop has not turned for {} s; its log may say why, and a restart \
                 (`softib daemon`) ends every client's session",
                SILENT_AFTER.as_secs()
            ),
        }
    }
}

impl fmt::Display for DaemonState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DaemonState::Stopped => f.write_str("stopped"),
            DaemonState::Dead => f.write_str("dead"),
            DaemonState::Hung(c) => write!(f, "hung, {c}"),
        }
    }
}

/// A client's view of one daemon's heartbeat.
#[derive(Debug)]
pub(crate) struct Watch {
    path: PathBuf,
    /// The count last read and when it was first seen (the daemon has been silent since).
    seen: Option<(u64, Instant)>,
    last_look: Option<Instant>,
}

impl Watch {
    /// Watches the heartbeat in runtime directory `dir`.
    pub(crate) fn new(dir: &Path) -> Watch {
        Watch {
            path: dir.join(ALIVE_FILE),
            seen: None,
            last_look: None,
        }
    }

    /// Looks at the heartbeat (at most every [`LOOK_EVERY`]); the error once the daemon has
    /// been silent for `SILENT_AFTER`, naming the pid its heartbeat gives (known before its
    /// Hello answered). A daemon without a heartbeat file (an older one, or one that could
    /// not write it) is never judged.
    pub(crate) fn check(&mut self, now: Instant) -> Result<(), Error> {
        if self
            .last_look
            .is_some_and(|t| now.saturating_duration_since(t) < LOOK_EVERY)
        {
            return Ok(());
        }
        self.last_look = Some(now);
        let Some(beat) = read_beat(&self.path) else {
            return Ok(());
        };
        match self.seen {
            Some((count, since)) if count == beat.count => {
                if now.saturating_duration_since(since) >= SILENT_AFTER {
                    return Err(Error::DaemonUnresponsive {
                        pid: beat.pid,
                        state: DaemonState::of(beat.pid),
                    });
                }
            }
            _ => self.seen = Some((beat.count, now)),
        }
        Ok(())
    }
}

fn read_beat(path: &Path) -> Option<Beat> {
    let f = File::open(path).ok()?;
    let mut b = [0u8; Beat::LEN];
    f.read_exact_at(&mut b, 0).ok()?;
    Beat::decode(&b)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;

    #[test]
    fn a_count_that_stops_changing_is_noticed_after_silent_after() {
        let dir = std::env::temp_dir().join(format!("softib-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = File::create(dir.join(ALIVE_FILE)).unwrap();
        let pid = std::process::id();
        let beat = |count| {
            f.write_at(&Beat { pid, count }.encode(), 0).unwrap();
        };
        let mut w = Watch::new(&dir);
        let t0 = Instant::now();
        beat(1);
        w.check(t0).unwrap();
        // Beats keep it alive however long it is watched.
        for i in 1..20u64 {
            beat(1 + i);
            w.check(t0 + LOOK_EVERY * i as u32).unwrap();
        }
        // Then silence from the last beat seen: fine until SILENT_AFTER, then the error with
        // this process's state (running or sleeping: "hung").
        let last = t0 + LOOK_EVERY * 19;
        w.check(last + LOOK_EVERY).unwrap();
        w.check(last + SILENT_AFTER - LOOK_EVERY).unwrap();
        let e = w.check(last + SILENT_AFTER).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DaemonUnresponsive {
                    state: DaemonState::Hung(_),
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().contains("has stopped answering (state: hung"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn no_heartbeat_file_is_never_judged() {
        let mut w = Watch::new(Path::new("/nonexistent/softib"));
        let t0 = Instant::now();
        for i in 0..10u32 {
            w.check(t0 + SILENT_AFTER * i).unwrap();
        }
    }

    #[test]
    fn process_states_are_read_from_proc() {
        assert!(matches!(
            DaemonState::of(std::process::id()),
            DaemonState::Hung('R' | 'S')
        ));
        // PIDs above the kernel's pid_max never exist.
        assert_eq!(DaemonState::of(u32::MAX), DaemonState::Dead);
        assert!(DaemonState::Stopped.hint(7).contains("kill -CONT 7"));
    }
}
