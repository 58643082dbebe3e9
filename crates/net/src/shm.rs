//! Memory shared between an application and the HCA daemon: a memfd mapped by both.
//!
//! An application's registered buffers are allocated from a memfd; the file descriptor travels
//! to the daemon over the control socket ([`crate::fdpass`]) and the daemon maps the same pages.
//! The HCA then reads and writes the application's memory directly — zero-copy, the way a NIC
//! does DMA — and polling a buffer for a byte the peer wrote (perftest's latency tests do) is
//! a load, not a system call.
//!
//! The one place in softib where `unsafe` is needed for this: the mapping is memory another
//! process writes at any time. Every access here goes through raw pointers (never a Rust
//! reference the compiler may assume is unaliased), bounds are checked first, and 8-byte
//! atomics use `AtomicU64` on aligned addresses, as the verbs contract requires.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{
    fcntl_add_seals, fcntl_get_seals, fstat, ftruncate, memfd_create, MemfdFlags, SealFlags,
};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};

/// An access outside the mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfBounds;

/// A shared mapping of a memfd.
#[derive(Debug)]
pub struct SharedRegion {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain shared memory with no thread affinity; all access goes through
// raw-pointer copies and atomics, never through references handed across threads.
#[allow(unsafe_code)]
unsafe impl Send for SharedRegion {}

impl SharedRegion {
    /// Creates a memfd of `len` bytes (rounded up to a page), sealed against shrinking (the
    /// other side checks, see [`SharedRegion::from_fd`]), and maps it read-write.
    pub fn create(name: &str, len: usize) -> io::Result<SharedRegion> {
        let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
        let len = round_to_page(len.max(1));
        ftruncate(&fd, len as u64)?;
        fcntl_add_seals(&fd, SealFlags::SHRINK)?;
        SharedRegion::map(fd, len)
    }

    /// Maps a memfd received from another process. `len` must not exceed the file's size: a
    /// mapping beyond the end would fault (SIGBUS) on access, which a daemon must never risk.
    /// For the same reason the file must be sealed against shrinking (F_SEAL_SHRINK): the
    /// other process could otherwise truncate it under the mapping at any time, and the
    /// daemon's next access to the region would kill it with SIGBUS.
    pub fn from_fd(fd: OwnedFd, len: usize) -> io::Result<SharedRegion> {
        let sealed = fcntl_get_seals(&fd).is_ok_and(|s| s.contains(SealFlags::SHRINK));
        if !sealed {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the shared buffer's memfd is not sealed against shrinking (F_SEAL_SHRINK): \
                 its owner could truncate it under the mapping",
            ));
        }
        let st = fstat(&fd)?;
        let size = usize::try_from(st.st_size).unwrap_or(0);
        if len == 0 || len > size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("shared buffer of {len} bytes asked for, but the file holds {size}"),
            ));
        }
        SharedRegion::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<SharedRegion> {
        // SAFETY: a fresh shared mapping of a file we hold; no existing Rust object is aliased.
        #[allow(unsafe_code)]
        let raw = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )?
        };
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(SharedRegion { fd, ptr, len })
    }

    /// The length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, once created).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The memfd, to send to the other side.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The address of the first byte in this process.
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn check(&self, offset: usize, len: usize) -> Result<*mut u8, OutOfBounds> {
        let end = offset.checked_add(len).ok_or(OutOfBounds)?;
        if end > self.len {
            return Err(OutOfBounds);
        }
        // SAFETY: offset + len <= self.len, inside the mapping.
        #[allow(unsafe_code)]
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// Copies bytes at `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), OutOfBounds> {
        let src = self.check(offset, dst.len())?;
        // SAFETY: `src..src+len` is inside the mapping (checked); `dst` is a distinct Rust
        // buffer, so the ranges cannot overlap.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    /// Copies `src` to `offset`. The bytes are stored in ascending order, so the last byte
    /// becomes visible last (what a poller of the buffer's last byte relies on).
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), OutOfBounds> {
        let dst = self.check(offset, src.len())?;
        if let Some((last, head)) = src.split_last() {
            // SAFETY: inside the mapping (checked). `src` may itself lie in a shared mapping
            // (a payload handed over between two devices of the daemon), even in this one, so
            // the copy is a `memmove`, correct for overlapping ranges.
            #[allow(unsafe_code)]
            unsafe {
                std::ptr::copy(head.as_ptr(), dst, head.len());
                std::sync::atomic::fence(Ordering::Release);
                std::ptr::write_volatile(dst.add(head.len()), *last);
            }
        }
        Ok(())
    }

    /// The 8-byte word at `offset` (which must be 8-aligned) as an atomic.
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, OutOfBounds> {
        let p = self.check(offset, 8)?;
        if (p as usize) % 8 != 0 {
            return Err(OutOfBounds);
        }
        // SAFETY: aligned, inside the mapping, valid for the mapping's lifetime, which the
        // returned reference cannot outlive; AtomicU64 tolerates concurrent access from the
        // other process.
        #[allow(unsafe_code)]
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// The mapping as a mutable byte slice, for the application that owns the buffer.
    ///
    /// The HCA writes into this memory only where the application posted work that allows it
    /// (a receive, or remote access it granted) — the same contract as DMA under ibverbs.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` bytes, valid while `self` lives, and `&mut self` keeps
        // other Rust references in this process out for the slice's lifetime.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }

    /// The mapping as a byte slice.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as for `as_mut_slice`; shared.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl Drop for SharedRegion {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping; no reference into it outlives `self`.
        #[allow(unsafe_code)]
        unsafe {
            let _ = munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

fn round_to_page(len: usize) -> usize {
    let page = rustix::param::page_size();
    len.div_ceil(page).saturating_mul(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_of_one_memfd_see_each_other() {
        let a = SharedRegion::create("t", 100).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        let b = SharedRegion::from_fd(fd, a.len()).unwrap();
        a.write(10, b"hello").unwrap();
        let mut got = [0u8; 5];
        b.read(10, &mut got).unwrap();
        assert_eq!(&got, b"hello");
        b.atomic_u64(16).unwrap().fetch_add(5, Ordering::SeqCst);
        assert_eq!(a.atomic_u64(16).unwrap().load(Ordering::SeqCst), 5);
        assert_eq!(a.read(a.len() - 2, &mut got), Err(OutOfBounds));
        assert_eq!(a.write(usize::MAX, b"x"), Err(OutOfBounds));
        assert!(a.atomic_u64(3).is_err());
    }

    #[test]
    fn a_mapping_longer_than_the_file_is_refused() {
        let a = SharedRegion::create("t", 4096).unwrap();
        let fd = a.fd().try_clone_to_owned().unwrap();
        assert!(SharedRegion::from_fd(fd, 1 << 20).is_err());
    }

    #[test]
    fn a_memfd_its_owner_could_shrink_is_refused_and_a_sealed_one_cannot_shrink() {
        // A client that truncated its buffer after the daemon mapped it would kill the
        // daemon with SIGBUS on its next access to the region.
        let fd = memfd_create("t", MemfdFlags::CLOEXEC).unwrap();
        ftruncate(&fd, 4096).unwrap();
        let e = SharedRegion::from_fd(fd, 4096).unwrap_err().to_string();
        assert!(e.contains("F_SEAL_SHRINK"), "{e}");
        let a = SharedRegion::create("t", 4096).unwrap();
        assert!(ftruncate(a.fd(), 0).is_err(), "sealed against shrinking");
        assert!(SharedRegion::from_fd(a.fd().try_clone_to_owned().unwrap(), 4096).is_ok());
    }
}
