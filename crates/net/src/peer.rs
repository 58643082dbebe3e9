//! Who is at the other end of a unix socket, as the kernel says: its process, user and
//! groups at the moment it connected (SO_PEERCRED, SO_PEERGROUPS) — never what the peer
//! claims about itself.

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// The credentials of a unix socket's peer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerCred {
    /// Its process id.
    pub pid: u32,
    /// Its effective user id.
    pub uid: u32,
    /// Its effective group id.
    pub gid: u32,
    /// Its supplementary groups.
    pub groups: Vec<u32>,
}

impl PeerCred {
    /// Whether the peer is in group `gid`, as its primary or a supplementary group.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || self.groups.contains(&gid)
    }
}

/// The credentials of `socket`'s peer.
pub fn peer_cred(socket: impl AsFd) -> io::Result<PeerCred> {
    let fd = socket.as_fd();
    let cred = rustix::net::sockopt::socket_peercred(fd)?;
    Ok(PeerCred {
        pid: cred.pid.as_raw_nonzero().get() as u32,
        uid: cred.uid.as_raw(),
        gid: cred.gid.as_raw(),
        groups: peer_groups(fd)?,
    })
}

/// SO_PEERGROUPS: the peer's supplementary groups (rustix does not wrap it). The kernel
/// answers ERANGE with the length it needs when the buffer is short.
fn peer_groups(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut groups = vec![0 as libc::gid_t; 64];
    loop {
        let mut len = (groups.len() * std::mem::size_of::<libc::gid_t>()) as libc::socklen_t;
        #[allow(unsafe_code)]
        // SAFETY: the descriptor is open for the whole call (borrowed); the buffer is a live
        // `Vec` of `len` bytes, which the kernel writes at most, and `len` is a live socklen_t.
        let rc = unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        let n = len as usize / std::mem::size_of::<libc::gid_t>();
        if rc == 0 {
            groups.truncate(n);
            return Ok(groups);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ERANGE) && n > groups.len() && n <= 1 << 16 {
            groups.resize(n, 0);
            continue;
        }
        return Err(e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_pair_names_this_process_and_its_groups() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let c = peer_cred(&a).unwrap();
        assert_eq!(c.pid, std::process::id());
        assert_eq!(c.uid, rustix::process::geteuid().as_raw());
        assert_eq!(c.gid, rustix::process::getegid().as_raw());
        assert!(c.in_group(c.gid));
        let mine: Vec<u32> = rustix::process::getgroups()
            .unwrap()
            .iter()
            .map(|g| g.as_raw())
            .collect();
        let mut got = c.groups.clone();
        got.sort_unstable();
        let mut want = mine;
        want.sort_unstable();
        assert_eq!(got, want);
    }
}
