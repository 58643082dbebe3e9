//! The daemon's heartbeat (`softib_proto::liveness`): while the loop turns it raises a count
//! in each host's `softibd.alive` at least every `BEAT_EVERY`, so that a client waiting on it
//! can tell a busy or idle daemon from one that stopped answering.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant as StdInstant;

use softib_proto::liveness::{Beat, ALIVE_FILE, BEAT_EVERY};

/// The heartbeat files of a daemon's hosts.
pub(super) struct Heartbeat {
    files: Vec<(PathBuf, File)>,
    beat: Beat,
    due: StdInstant,
}

impl Heartbeat {
    /// Creates the heartbeat file in each of `dirs` and beats once. A file that cannot be
    /// written is said once and left out: its clients then cannot tell a stopped daemon, but
    /// everything else works.
    pub fn start<'a>(dirs: impl Iterator<Item = &'a Path>) -> Heartbeat {
        let mut files = Vec::new();
        for dir in dirs {
            let path = dir.join(ALIVE_FILE);
            match File::create(&path) {
                Ok(f) => files.push((path, f)),
                Err(e) => eprintln!(
                    "softibd: cannot create {} ({e}); clients will not notice if this daemon stops answering",
                    path.display()
                ),
            }
        }
        let mut h = Heartbeat {
            files,
            beat: Beat {
                pid: std::process::id(),
                count: 0,
            },
            due: StdInstant::now(),
        };
        h.beat(StdInstant::now());
        h
    }

    /// Raises the count if a beat is due.
    pub fn beat(&mut self, now: StdInstant) {
        if now < self.due {
            return;
        }
        self.due = now + BEAT_EVERY;
        self.beat.count += 1;
        let bytes = self.beat.encode();
        self.files.retain(|(path, f)| match f.write_at(&bytes, 0) {
            Ok(_) => true,
            Err(e) => {
                eprintln!(
                    "softibd: cannot write {} ({e}); no more heartbeats there",
                    path.display()
                );
                false
            }
        });
    }

    /// Removes the files: a daemon that stopped on purpose leaves no heartbeat to misread.
    pub fn stop(self) {
        for (path, _) in self.files {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn read(dir: &Path) -> Option<Beat> {
        Beat::decode(&std::fs::read(dir.join(ALIVE_FILE)).ok()?)
    }

    #[test]
    fn beats_when_due_and_removes_its_file_on_stop() {
        let dir = std::env::temp_dir().join(format!("softib-beat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let t0 = StdInstant::now();
        let mut h = Heartbeat::start(std::iter::once(dir.as_path()));
        let first = read(&dir).unwrap();
        assert_eq!(first.pid, std::process::id());
        // Not yet due: the count stays.
        h.beat(t0);
        assert_eq!(read(&dir), Some(first));
        h.beat(t0 + BEAT_EVERY + Duration::from_millis(1));
        assert_eq!(read(&dir).unwrap().count, first.count + 1);
        h.stop();
        assert!(!dir.join(ALIVE_FILE).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
