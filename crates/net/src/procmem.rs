//! Another process's memory, read and written with `process_vm_readv`/`process_vm_writev`
//! (cross-memory attach): how the daemon reaches memory an application registered without
//! allocating it from a shared buffer — a `Vec`, a stack array, a memory-mapped file.
//!
//! The kernel allows it when the daemon could ptrace the application: same user and, under
//! Yama's `ptrace_scope` 1, only if the application named the daemon with
//! `prctl(PR_SET_PTRACER)` (the `softib` library does so before it registers such memory), or
//! the daemon runs with CAP_SYS_PTRACE. Which process a client is comes from the control
//! socket's SO_PEERCRED, never from what the client says.

use std::io;
use std::os::fd::AsFd;

/// The memory of process `pid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessMemory {
    pid: i32,
}

impl ProcessMemory {
    /// The memory of `pid`.
    pub fn new(pid: u32) -> io::Result<ProcessMemory> {
        let pid = i32::try_from(pid)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a process id"))?;
        Ok(ProcessMemory { pid })
    }

    /// The process at the other end of a unix socket (SO_PEERCRED).
    pub fn of_peer(socket: impl AsFd) -> io::Result<ProcessMemory> {
        let cred = rustix::net::sockopt::socket_peercred(socket)?;
        ProcessMemory::new(cred.pid.as_raw_nonzero().get() as u32)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Copies `dst.len()` bytes at `addr` of the process into `dst`.
    pub fn read(&self, addr: u64, dst: &mut [u8]) -> io::Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: dst.as_mut_ptr().cast(),
            iov_len: dst.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: dst.len(),
        };
        // SAFETY: `local` describes `dst`, a buffer we own and may write for its length; the
        // remote iovec is only an address in the other process, which the kernel checks (a
        // bad one is EFAULT, not undefined behaviour here).
        #[allow(unsafe_code)]
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        complete(n, dst.len())
    }

    /// Copies `src` to `addr` of the process, the last byte last (a poller of the last byte
    /// then sees the others).
    pub fn write(&self, addr: u64, src: &[u8]) -> io::Result<()> {
        let Some((last, head)) = src.split_last() else {
            return Ok(());
        };
        self.write_once(addr, head)?;
        self.write_once(addr + head.len() as u64, std::slice::from_ref(last))
    }

    fn write_once(&self, addr: u64, src: &[u8]) -> io::Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let local = libc::iovec {
            iov_base: src.as_ptr() as *mut libc::c_void,
            iov_len: src.len(),
        };
        let remote = libc::iovec {
            iov_base: addr as usize as *mut libc::c_void,
            iov_len: src.len(),
        };
        // SAFETY: `local` describes `src`, which the kernel only reads; the remote address is
        // checked by the kernel in the other process.
        #[allow(unsafe_code)]
        let n = unsafe { libc::process_vm_writev(self.pid, &local, 1, &remote, 1, 0) };
        complete(n, src.len())
    }
}

fn complete(n: isize, want: usize) -> io::Result<()> {
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("only {n} of {want} bytes were accessible"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_reads_and_writes_its_own_memory_through_the_kernel() {
        let me = ProcessMemory::new(std::process::id()).unwrap();
        let mut target = vec![0u8; 64];
        let addr = target.as_mut_ptr() as u64;
        me.write(addr + 8, b"cross-memory").unwrap();
        let mut back = [0u8; 12];
        me.read(addr + 8, &mut back).unwrap();
        assert_eq!(&back, b"cross-memory");
        assert_eq!(&target[8..20], b"cross-memory");
        // An unmapped address is an error, not a crash.
        assert!(me.read(8, &mut back).is_err());
        assert!(ProcessMemory::new(0).is_err());
    }
}
