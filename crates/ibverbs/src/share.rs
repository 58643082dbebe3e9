//! Registered memory the daemon maps instead of reaching by cross-memory attach.
//!
//! A C program registers its own `malloc`ed memory. The daemon could reach it only through
//! `process_vm_readv`/`writev`, a system call and an extra copy for every packet: a third of
//! the bandwidth softib's own tools get from buffers they share with the daemon. So, where it
//! is safe, `ibv_reg_mr` moves the pages under the region onto a memory file both processes
//! map: the program's bytes stay where they are, with the same contents, and the daemon reads
//! and writes them directly.
//!
//! When it is safe, and otherwise the region is registered by cross-memory attach as before:
//! - the pages are anonymous private memory (the heap or an anonymous `mmap`, readable and
//!   writable — never a file, a shared mapping, the stack or huge pages, whose meaning would
//!   change) not yet moved, or all inside one segment already moved (and still mapped);
//! - the process has one thread — besides the process data path's progress threads, which
//!   park meanwhile (`softib::pause_progress`) — so nothing can write the pages between the
//!   copy and the switch (signals are blocked meanwhile), and the switch itself is one
//!   `mremap` that replaces the old pages or fails and leaves them;
//! - `SOFTIB_SHARE_MR` is not `0`.
//!
//! What changes for the program: the pages are now a shared mapping. After `fork`, the child
//! gets private copies of them (a `pthread_atfork` handler), as it would of private memory;
//! `madvise(MADV_DONTNEED)` on them keeps their contents rather than zeroing them.

use std::ffi::c_void;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, Once};

/// A range of the program's memory moved onto a memory file.
pub(crate) struct Segment {
    pub start: usize,
    pub len: usize,
    pub fd: OwnedFd,
    /// The memory file's inode: how `/proc/self/maps` tells the mapping is still ours.
    ino: u64,
}

static SEGMENTS: Mutex<Vec<Segment>> = Mutex::new(Vec::new());

/// The segments again, as (start, len) pairs a `fork` child reads without the lock (another
/// thread of the parent may have held it at the fork). Zero length: an unused slot.
const MAX_SEGMENTS: usize = 256;
static FORK_VIEW: [(AtomicUsize, AtomicUsize); MAX_SEGMENTS] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_SEGMENTS];

/// A memory mapping of this process, as `/proc/self/maps` lists it.
struct Mapping {
    start: usize,
    end: usize,
    perms: String,
    inode: u64,
    path: String,
}

fn mappings() -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let range = f.next()?;
            let perms = f.next()?.to_string();
            let _offset = f.next()?;
            let _dev = f.next()?;
            let inode = f.next()?.parse().ok()?;
            let path = f.collect::<Vec<_>>().join(" ");
            let (a, b) = range.split_once('-')?;
            Some(Mapping {
                start: usize::from_str_radix(a, 16).ok()?,
                end: usize::from_str_radix(b, 16).ok()?,
                perms,
                inode,
                path,
            })
        })
        .collect()
}

/// Whether `[start, end)` is covered, without gaps, by mappings that `ok` accepts.
fn covered(maps: &[Mapping], start: usize, end: usize, ok: impl Fn(&Mapping) -> bool) -> bool {
    let mut at = start;
    for m in maps.iter().filter(|m| m.end > start && m.start < end) {
        if m.start > at || !ok(m) {
            return false;
        }
        at = m.end;
    }
    at >= end
}

/// Whether the process has exactly `n` threads.
fn threads_are(n: usize) -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|t| t.trim().parse::<usize>().ok())
            == Some(n)
    })
}

/// Where a region lies in a segment: a descriptor of the memory file of its own, the
/// segment's first address and length, and the file's inode (which names the segment).
pub(crate) struct Place {
    pub fd: OwnedFd,
    pub start: usize,
    pub len: usize,
    pub ino: u64,
}

impl Segment {
    fn place(&self) -> Option<Place> {
        Some(Place {
            fd: self.fd.try_clone().ok()?,
            start: self.start,
            len: self.len,
            ino: self.ino,
        })
    }
}

/// The segment that holds `[addr, addr + len)`, moving the pages onto a memory file first if
/// that is safe; `None` to register the region by cross-memory attach.
pub(crate) fn segment(addr: usize, len: usize) -> Option<Place> {
    if len == 0 || std::env::var_os("SOFTIB_SHARE_MR").is_some_and(|v| v == "0") {
        return None;
    }
    let page = rustix::param::page_size();
    let start = addr & !(page - 1);
    let end = addr.checked_add(len)?.checked_add(page - 1)? & !(page - 1);
    let mut segs = SEGMENTS.lock().unwrap_or_else(|e| e.into_inner());
    let maps = mappings();
    // Forget segments the program has unmapped (or mapped over) since.
    let before = segs.len();
    segs.retain(|s| covered(&maps, s.start, s.start + s.len, |m| m.inode == s.ino));
    if segs.len() != before {
        publish(&segs);
    }
    if let Some(s) = segs
        .iter()
        .find(|s| s.start <= start && end <= s.start + s.len)
    {
        return s.place();
    }
    if segs
        .iter()
        .any(|s| s.start < end && start < s.start + s.len)
        || segs.len() == MAX_SEGMENTS
    {
        return None;
    }
    let plain = |m: &Mapping| {
        m.perms == "rw-p" && m.inode == 0 && (m.path.is_empty() || m.path == "[heap]")
    };
    if !covered(&maps, start, end, plain) {
        return None;
    }
    // The process data path's progress threads park meanwhile: then they do not count.
    let pause = softib::pause_progress(std::time::Duration::from_millis(500));
    if !threads_are(1 + pause.as_ref().map_or(0, softib::ProgressPause::threads)) {
        return None;
    }
    let seg = move_pages(start, end - start);
    drop(pause);
    let seg = seg?;
    static ATFORK: Once = Once::new();
    ATFORK.call_once(|| {
        // SAFETY: registers a plain function, run in the child only.
        unsafe { libc::pthread_atfork(None, None, Some(privatise_in_child)) };
    });
    let place = seg.place();
    segs.push(seg);
    publish(&segs);
    place
}

fn publish(segs: &[Segment]) {
    for (i, slot) in FORK_VIEW.iter().enumerate() {
        let (start, len) = segs.get(i).map_or((0, 0), |s| (s.start, s.len));
        slot.0.store(start, Ordering::Relaxed);
        slot.1.store(len, Ordering::Release);
    }
}

/// Moves the pages of `[start, start + len)` onto a new memory file, contents and all.
fn move_pages(start: usize, len: usize) -> Option<Segment> {
    use rustix::mm::{MapFlags, MremapFlags, ProtFlags};
    let fd = rustix::fs::memfd_create(
        "softib-mr",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .ok()?;
    rustix::fs::ftruncate(&fd, len as u64).ok()?;
    // The daemon maps only files that cannot shrink under it (a shrunk file would fault its
    // accesses with SIGBUS), and refuses the others.
    rustix::fs::fcntl_add_seals(&fd, rustix::fs::SealFlags::SHRINK).ok()?;
    let ino = rustix::fs::fstat(&fd).ok()?.st_ino;
    // SAFETY: a new mapping of our own file at an address the kernel picks.
    let tmp = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd.as_fd(),
            0,
        )
    }
    .ok()?;
    // Nothing else may run between the copy and the switch: the process has one running
    // thread (the caller checked, with the progress threads parked), and signals wait.
    // SAFETY: sigset_t is plain data; the masks are the calling thread's.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    // SAFETY: `[start, start + len)` is readable private memory of this process (checked in
    // /proc/self/maps), `tmp` a fresh writable mapping of `len` bytes; they do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(start as *const u8, tmp as *mut u8, len) };
    // SAFETY: replaces the pages at `start` with the file's, which hold the same bytes: the
    // program's memory keeps its contents. On failure nothing was replaced.
    let moved = unsafe {
        rustix::mm::mremap_fixed(tmp, len, len, MremapFlags::MAYMOVE, start as *mut c_void)
    };
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    match moved {
        Ok(_) => Some(Segment {
            start,
            len,
            fd,
            ino,
        }),
        Err(_) => {
            // SAFETY: `tmp` is our mapping, still where mmap put it.
            let _ = unsafe { rustix::mm::munmap(tmp, len) };
            None
        }
    }
}

/// In a child of `fork`: each moved segment becomes private memory again, with the contents
/// it has now, so the child and the parent no longer share it.
extern "C" fn privatise_in_child() {
    use rustix::mm::{MapFlags, MremapFlags, ProtFlags};
    for slot in &FORK_VIEW {
        let len = slot.1.load(Ordering::Acquire);
        let start = slot.0.load(Ordering::Relaxed);
        if len == 0 {
            continue;
        }
        // SAFETY: a fresh private anonymous mapping of `len` bytes.
        let Ok(tmp) = (unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }) else {
            continue;
        };
        // SAFETY: the segment is mapped and readable; the child has one thread.
        unsafe { std::ptr::copy_nonoverlapping(start as *const u8, tmp as *mut u8, len) };
        // SAFETY: replaces the shared pages with the private copy, or leaves them.
        let r = unsafe {
            rustix::mm::mremap_fixed(tmp, len, len, MremapFlags::MAYMOVE, start as *mut c_void)
        };
        if r.is_err() {
            // SAFETY: our mapping, still where mmap put it.
            let _ = unsafe { rustix::mm::munmap(tmp, len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: usize, end: usize, perms: &str, inode: u64, path: &str) -> Mapping {
        Mapping {
            start,
            end,
            perms: perms.into(),
            inode,
            path: path.into(),
        }
    }

    #[test]
    fn coverage_needs_every_byte_and_every_mapping_to_qualify() {
        let maps = [
            m(0x1000, 0x3000, "rw-p", 0, "[heap]"),
            m(0x3000, 0x5000, "rw-p", 0, ""),
            m(0x6000, 0x7000, "rw-p", 0, ""),
            m(0x7000, 0x8000, "rw-s", 42, "/memfd:x (deleted)"),
        ];
        let plain = |m: &Mapping| m.perms == "rw-p" && m.inode == 0;
        assert!(covered(&maps, 0x1000, 0x5000, plain));
        assert!(covered(&maps, 0x2000, 0x4000, plain));
        assert!(!covered(&maps, 0x4000, 0x7000, plain), "a gap");
        assert!(!covered(&maps, 0x6000, 0x8000, plain), "a shared mapping");
        assert!(!covered(&maps, 0x9000, 0xa000, plain), "nothing mapped");
        assert!(covered(&maps, 0x7000, 0x8000, |m| m.inode == 42));
    }

    #[test]
    #[allow(clippy::unwrap_used)]
    fn moved_pages_keep_their_contents_and_pass_the_daemons_check() {
        use rustix::mm::{MapFlags, ProtFlags};
        let len = 4 * rustix::param::page_size();
        // SAFETY: a fresh anonymous mapping that only this test uses.
        let p = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }
        .unwrap();
        // SAFETY: the mapping is `len` bytes, readable and writable, and ours alone.
        let bytes = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let seg = move_pages(p as usize, len).unwrap();
        // SAFETY: as above: the same addresses, now backed by the memory file.
        let moved = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
        assert!(moved.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
        // The daemon maps a buffer only if it cannot shrink under it.
        softib_net::shm::SharedRegion::from_fd(seg.fd.try_clone().unwrap(), len).unwrap();
        // SAFETY: nothing refers to the mapping any more.
        unsafe { rustix::mm::munmap(p, len) }.unwrap();
    }
}
