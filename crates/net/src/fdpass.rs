//! Byte streams over unix sockets that can carry file descriptors (SCM_RIGHTS): how an
//! application hands the daemon the memfd of a buffer it registers.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// At most this many descriptors travel with one message.
pub const MAX_FDS: usize = 4;

/// Sends all of `bytes` with `fds` in one call that never waits, for a peer that must not be
/// able to stall the sender (the daemon pushing events to a process that does not read them):
/// `Ok(false)` when the socket has no room for any of it now, an error when only a part fit —
/// the stream then holds half a message and must not be used for messages again.
pub fn try_send(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<bool> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if fds.len() > MAX_FDS
        || (!fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)))
    {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many file descriptors for one message",
        ));
    }
    let iov = [io::IoSlice::new(bytes)];
    let flags = SendFlags::NOSIGNAL | SendFlags::DONTWAIT;
    loop {
        match sendmsg(stream.as_fd(), &iov, &mut control, flags) {
            Ok(n) if n == bytes.len() => return Ok(true),
            Ok(n) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    format!("only {n} of {} bytes fit in the socket", bytes.len()),
                ))
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends all of `bytes`, with `fds` attached to the first chunk.
pub fn send(stream: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut sent = 0;
    if !fds.is_empty() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        if fds.len() > MAX_FDS || !control.push(SendAncillaryMessage::ScmRights(fds)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many file descriptors for one message",
            ));
        }
        let iov = [io::IoSlice::new(bytes)];
        sent = sendmsg(stream.as_fd(), &iov, &mut control, SendFlags::NOSIGNAL)?;
    }
    while sent < bytes.len() {
        let iov = [io::IoSlice::new(&bytes[sent..])];
        let mut control = SendAncillaryBuffer::default();
        match sendmsg(stream.as_fd(), &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                // A non-blocking socket whose buffer is full: wait until it drains.
                let mut pfd = [rustix::event::PollFd::new(
                    stream,
                    rustix::event::PollFlags::OUT,
                )];
                rustix::event::poll(&mut pfd, None)?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receives what is available into `buf` (at most its length), appending any descriptors
/// that came with it to `fds`. Returns 0 at end of stream.
pub fn recv(stream: &UnixStream, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<usize> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = loop {
        match recvmsg(
            stream.as_fd(),
            &mut iov,
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = m {
            fds.extend(received);
        }
    }
    Ok(msg.bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shm::SharedRegion;

    #[test]
    fn try_send_to_a_peer_that_never_reads_says_full_instead_of_waiting() {
        let (a, b) = UnixStream::pair().unwrap();
        let msg = [7u8; 64];
        let mut sent = 0;
        // A blocking socket, a reader that never reads: `send` would wait forever here.
        while try_send(&a, &msg, &[]).unwrap() {
            sent += 1;
            assert!(sent < 1 << 20, "the socket never filled");
        }
        assert!(sent > 0);
        assert!(!try_send(&a, &msg, &[b.as_fd()]).unwrap(), "still full");
        let mut got = [0u8; 64];
        let mut fds = Vec::new();
        assert_eq!(recv(&b, &mut got, &mut fds).unwrap(), 64);
        assert_eq!(got, msg);
    }

    #[test]
    fn a_memfd_crosses_a_socket_pair() {
        let (a, b) = UnixStream::pair().unwrap();
        let region = SharedRegion::create("t", 64).unwrap();
        region.write(0, b"shared").unwrap();
        send(&a, b"hi", &[region.fd()]).unwrap();
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        let n = recv(&b, &mut buf, &mut fds).unwrap();
        assert_eq!(&buf[..n], b"hi");
        assert_eq!(fds.len(), 1);
        let other = SharedRegion::from_fd(fds.pop().unwrap(), region.len()).unwrap();
        let mut got = [0u8; 6];
        other.read(0, &mut got).unwrap();
        assert_eq!(&got, b"shared");
    }
}
