//! Named counters one process keeps and another reads, in a memfd both map: how a process
//! engine's counters (what its links carried, dropped, and what its faults did) reach the
//! daemon, which adds them to the device's (`softib res`, the drop counters, the PMA) without
//! asking and without waiting for the process.
//!
//! The page is a header — [`MAGIC`], then the number of entries — and the entries, each a
//! name of at most [`NAME_LEN`] bytes (NUL-padded) and a `u64` value. The writer names every
//! entry when it creates the page, before the descriptor leaves the process; from then on only
//! the values change, each an atomic store. The reader copies the names once when it maps the
//! page (so a writer that renames later changes nothing) and loads the values whenever it
//! wants them. Counters only grow, so a reader needs no snapshot of all of them at one
//! instant: each value is one the writer stored.

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;

use crate::shm::SharedRegion;

/// The page's first word ("SIBCNT01", little-endian).
pub const MAGIC: u64 = u64::from_le_bytes(*b"SIBCNT01");

/// The longest name an entry has.
pub const NAME_LEN: usize = 40;

/// The most entries a page has (a reader refuses more).
pub const MAX_ENTRIES: usize = 1024;

const HEADER: usize = 16;
const ENTRY: usize = NAME_LEN + 8;

/// A page of named counters.
#[derive(Debug)]
pub struct CounterPage {
    region: SharedRegion,
    names: Vec<String>,
}

impl CounterPage {
    /// A new page with one counter per name, each 0. A name must be printable ASCII of 1 to
    /// [`NAME_LEN`] bytes; more than [`MAX_ENTRIES`] names are refused.
    pub fn create<S: AsRef<str>>(names: &[S]) -> io::Result<CounterPage> {
        if names.len() > MAX_ENTRIES {
            return Err(invalid(format!(
                "{} counters asked for; a page holds at most {MAX_ENTRIES}",
                names.len()
            )));
        }
        let region = SharedRegion::create("softib-counters", HEADER + names.len() * ENTRY)?;
        let mut kept = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let name = name.as_ref();
            if name.is_empty()
                || name.len() > NAME_LEN
                || !name.bytes().all(|c| c.is_ascii_graphic())
            {
                return Err(invalid(format!(
                    "counter name {name:?} is empty, longer than {NAME_LEN} bytes, or not \
                     printable ASCII"
                )));
            }
            write(&region, HEADER + i * ENTRY, name.as_bytes())?;
            kept.push(name.to_string());
        }
        write(&region, 8, &(names.len() as u64).to_le_bytes())?;
        write(&region, 0, &MAGIC.to_le_bytes())?;
        Ok(CounterPage {
            region,
            names: kept,
        })
    }

    /// Maps a page another process made, said to hold `entries` counters: refused unless the
    /// file is sealed against shrinking and large enough ([`SharedRegion::from_fd`]), the
    /// header says so, and every name is printable ASCII.
    pub fn from_fd(fd: OwnedFd, entries: usize) -> io::Result<CounterPage> {
        if entries > MAX_ENTRIES {
            return Err(invalid(format!(
                "a counter page of {entries} entries (at most {MAX_ENTRIES})"
            )));
        }
        let region = SharedRegion::from_fd(fd, HEADER + entries * ENTRY)?;
        let word = |at: usize| -> io::Result<u64> {
            let mut b = [0u8; 8];
            region
                .read(at, &mut b)
                .map_err(|_| invalid("the counter page is too short".into()))?;
            Ok(u64::from_le_bytes(b))
        };
        if word(0)? != MAGIC {
            return Err(invalid("not a counter page (its magic is wrong)".into()));
        }
        if word(8)? != entries as u64 {
            return Err(invalid(format!(
                "the counter page holds {} entries, not the {entries} it was said to",
                word(8)?
            )));
        }
        let mut names = Vec::with_capacity(entries);
        for i in 0..entries {
            let mut b = [0u8; NAME_LEN];
            region
                .read(HEADER + i * ENTRY, &mut b)
                .map_err(|_| invalid("the counter page is too short".into()))?;
            let end = b.iter().position(|&c| c == 0).unwrap_or(NAME_LEN);
            let name = &b[..end];
            if name.is_empty() || !name.iter().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(format!(
                    "counter {i}'s name is empty or not printable ASCII"
                )));
            }
            names.push(String::from_utf8_lossy(name).into_owned());
        }
        Ok(CounterPage { region, names })
    }

    /// The memfd, to send to the reader.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.region.fd()
    }

    /// The number of counters.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether the page has no counters.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The counters' names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Stores `value` in counter `i` (ignored past the end).
    pub fn set(&self, i: usize, value: u64) {
        if let Some(a) = self.slot(i) {
            a.store(value, Ordering::Relaxed);
        }
    }

    /// Counter `i`'s value (0 past the end).
    pub fn get(&self, i: usize) -> u64 {
        self.slot(i).map_or(0, |a| a.load(Ordering::Relaxed))
    }

    /// Every counter, by name, in order.
    pub fn values(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), self.get(i)))
    }

    fn slot(&self, i: usize) -> Option<&std::sync::atomic::AtomicU64> {
        if i >= self.names.len() {
            return None;
        }
        self.region.atomic_u64(HEADER + i * ENTRY + NAME_LEN).ok()
    }
}

fn write(region: &SharedRegion, at: usize, bytes: &[u8]) -> io::Result<()> {
    region
        .write(at, bytes)
        .map_err(|_| invalid("the counter page is too short".into()))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(page: &CounterPage) -> io::Result<CounterPage> {
        let fd = page.fd().try_clone_to_owned()?;
        CounterPage::from_fd(fd, page.len())
    }

    #[test]
    fn the_reader_sees_the_names_and_every_value_stored() {
        let w = CounterPage::create(&["port.xmit_pkts", "drop.unknown_qp"]).unwrap();
        let r = reader_of(&w).unwrap();
        assert_eq!(r.names(), ["port.xmit_pkts", "drop.unknown_qp"]);
        w.set(0, 7);
        w.set(1, u64::MAX);
        w.set(2, 9);
        let seen: Vec<_> = r.values().map(|(n, v)| (n.to_string(), v)).collect();
        assert_eq!(
            seen,
            [
                ("port.xmit_pkts".to_string(), 7),
                ("drop.unknown_qp".to_string(), u64::MAX)
            ]
        );
        assert_eq!(r.get(5), 0);
    }

    #[test]
    fn a_page_is_refused_when_it_is_not_what_it_is_said_to_be() {
        let w = CounterPage::create(&["a", "b"]).unwrap();
        let count = |n| {
            CounterPage::from_fd(w.fd().try_clone_to_owned().unwrap(), n)
                .unwrap_err()
                .to_string()
        };
        assert!(
            count(3).contains("holds 2 entries, not the 3"),
            "{}",
            count(3)
        );
        assert!(
            count(MAX_ENTRIES + 1).contains("at most"),
            "{}",
            count(MAX_ENTRIES + 1)
        );
        // A memfd that is not a page.
        let other = SharedRegion::create("x", 4096).unwrap();
        let e = CounterPage::from_fd(other.fd().try_clone_to_owned().unwrap(), 1).unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
        // A page too large for its file.
        let e = CounterPage::from_fd(other.fd().try_clone_to_owned().unwrap(), 200).unwrap_err();
        assert!(e.to_string().contains("file holds"), "{e}");
    }

    #[test]
    fn names_are_checked_when_the_page_is_made() {
        let long = "x".repeat(NAME_LEN + 1);
        assert!(CounterPage::create(&[long.as_str()]).is_err());
        assert!(CounterPage::create(&["a\0b"]).is_err());
        let many: Vec<String> = (0..=MAX_ENTRIES).map(|i| i.to_string()).collect();
        assert!(CounterPage::create(&many).is_err());
        assert!(CounterPage::create(&[""]).is_err());
    }
}
