//! Framing: a 4-byte little-endian length, then the postcard encoding of one message. Both
//! sides refuse a length over [`MAX_FRAME`] before reading its body.

use std::io::{self, Read};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

/// The largest frame either side accepts.
pub const MAX_FRAME: usize = 4 << 20;
/// The most request bytes the daemon buffers per client before serving them: one largest
/// frame with its length prefix, plus one read.
pub const MAX_BUFFERED: usize = MAX_FRAME + 4 + 64 * 1024;

/// The most descriptors a client may have sent that no request has claimed yet. Each request
/// that carries one (`AttachBuffer`, `CreateCompChannel`) claims it when it is served, and a
/// client has one request in flight, so more is a client stuffing the daemon's descriptor
/// table: its connection is closed.
pub const MAX_PENDING_FDS: usize = 16;

/// Encodes a message into a frame.
pub fn encode<T: Serialize>(msg: &T) -> io::Result<Vec<u8>> {
    let body = postcard::to_stdvec(msg).map_err(|e| io::Error::other(format!("encode: {e}")))?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message too large"))?;
    frame.extend_from_slice(&len.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Decodes a frame body.
pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    postcard::from_bytes(body).map_err(|e| format!("malformed message: {e}"))
}

/// Writes one message (with descriptors) to a stream without waiting: `Ok(false)` when it has
/// no room now (see [`softib_net::fdpass::try_send`]).
pub fn try_send<T: Serialize>(
    stream: &UnixStream,
    msg: &T,
    fds: &[BorrowedFd<'_>],
) -> io::Result<bool> {
    softib_net::fdpass::try_send(stream, &encode(msg)?, fds)
}

/// Writes one message (with descriptors) to a stream.
pub fn send<T: Serialize>(stream: &UnixStream, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    softib_net::fdpass::send(stream, &encode(msg)?, fds)
}

/// Reads one whole frame body from a blocking stream (descriptors are not expected here).
pub fn recv_blocking(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the daemon sent a {len}-byte frame, more than the {MAX_FRAME} allowed"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body)?;
    Ok(body)
}

/// Accumulates bytes (and descriptors) from a non-blocking stream and yields whole frames.
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf`: frames are consumed by moving this, and the
    /// bytes before it are dropped only when that is cheap (a drain per frame made a buffer
    /// of a million empty frames cost a million moves of up to 4 MiB).
    start: usize,
    /// Descriptors received and not yet claimed by a request.
    pub fds: Vec<OwnedFd>,
}

impl FrameReader {
    /// Reads what is available, but stops once a whole largest frame is buffered: a client
    /// that writes faster than its requests are served is held back by its socket, not by the
    /// daemon's memory (the socket stays readable, so the rest is read after those frames).
    /// Returns `Ok(false)` at end of stream.
    pub fn fill(&mut self, stream: &UnixStream) -> io::Result<bool> {
        let mut chunk = [0u8; 64 * 1024];
        loop {
            if self.buffered() >= MAX_BUFFERED {
                return Ok(true);
            }
            match softib_net::fdpass::recv(stream, &mut chunk, &mut self.fds) {
                Ok(0) => return Ok(false),
                Ok(_) if self.fds.len() > MAX_PENDING_FDS => {
                    self.fds.clear();
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "more than {MAX_PENDING_FDS} descriptors sent without requests \
                             that claim them"
                        ),
                    ));
                }
                Ok(n) => {
                    self.push(&chunk[..n]);
                    if n < chunk.len() {
                        return Ok(true);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }

    /// Appends bytes received from the stream (what [`FrameReader::fill`] does with each read).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// How many bytes are buffered and not yet returned as frames.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Whether bytes are buffered (a request may be complete without the socket being
    /// readable again).
    pub fn has_data(&self) -> bool {
        self.buffered() > 0
    }

    /// The next whole frame's body, if one has arrived; an error for a frame too large.
    pub fn next_frame(&mut self) -> Result<Option<Vec<u8>>, String> {
        let rest = &self.buf[self.start..];
        let Some(&[a, b, c, d]) = rest.first_chunk::<4>() else {
            return Ok(None);
        };
        let len = u32::from_le_bytes([a, b, c, d]) as usize;
        if len > MAX_FRAME {
            return Err(format!(
                "a {len}-byte request is more than the {MAX_FRAME} bytes allowed"
            ));
        }
        let Some(body) = rest.get(4..4 + len) else {
            return Ok(None);
        };
        let body = body.to_vec();
        self.start += 4 + len;
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        }
        Ok(Some(body))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::Request;

    #[test]
    fn frames_come_out_whole_however_the_bytes_arrive() {
        let a = encode(&Request::ListDevices).unwrap();
        let b = encode(&Request::AllocPd { dev: 7 }).unwrap();
        let stream: Vec<u8> = [a.clone(), b.clone(), vec![9, 0, 0]].concat();
        for piece in 1..=stream.len() {
            let mut r = FrameReader::default();
            let mut got = Vec::new();
            for chunk in stream.chunks(piece) {
                r.push(chunk);
                while let Some(f) = r.next_frame().unwrap() {
                    got.push(f);
                }
            }
            assert_eq!(got, vec![a[4..].to_vec(), b[4..].to_vec()], "piece {piece}");
            assert_eq!(r.buffered(), 3, "the incomplete length prefix stays");
        }
    }

    #[test]
    fn a_buffer_full_of_empty_frames_is_served_in_linear_time() {
        // A client writing 4 MiB of zero-length frames: draining the buffer in front of each
        // frame would be a million moves of up to 4 MiB, freezing the daemon for minutes.
        let mut r = FrameReader::default();
        r.push(&vec![0u8; MAX_FRAME]);
        let t0 = std::time::Instant::now();
        let mut n = 0;
        while let Some(f) = r.next_frame().unwrap() {
            assert!(f.is_empty());
            n += 1;
        }
        assert_eq!(n, MAX_FRAME / 4);
        assert_eq!(r.buffered(), 0);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            t0.elapsed()
        );
        // Frames split across pushes after a partly consumed buffer still come out whole.
        let a = encode(&Request::ListDevices).unwrap();
        r.push(&[a.clone(), a.clone()].concat());
        r.push(&a[..3]);
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        r.push(&a[3..]);
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        assert_eq!(r.next_frame().unwrap(), Some(a[4..].to_vec()));
        assert_eq!(r.next_frame().unwrap(), None);
    }

    #[test]
    fn a_length_over_max_frame_is_refused_before_its_body_arrives() {
        let mut r = FrameReader::default();
        r.push(&u32::try_from(MAX_FRAME + 1).unwrap().to_le_bytes());
        assert!(r.next_frame().unwrap_err().contains("allowed"));
        let mut r = FrameReader::default();
        r.push(&u32::MAX.to_le_bytes());
        assert!(r.next_frame().is_err());
    }

    #[test]
    fn a_message_sent_on_a_stream_comes_back_as_it_was() {
        use softib_engine::verbs::AccessFlags;
        let (a, mut b) = UnixStream::pair().unwrap();
        let reqs = [
            Request::Hello {
                version: crate::VERSION,
                pid: 4242,
                program: "ib_write_bw".into(),
            },
            Request::RegMr {
                dev: 1,
                pd: 2,
                buffer: 3,
                addr: 0x7f00_0000_1000,
                len: 1 << 20,
                access: AccessFlags::LOCAL_WRITE.with(AccessFlags::REMOTE_READ),
            },
            Request::AttachWakeup,
            Request::AttachAsyncEvents,
            Request::AttachMadWakeup,
        ];
        for req in &reqs {
            send(&a, req, &[]).unwrap();
        }
        for req in &reqs {
            let body = recv_blocking(&mut b).unwrap();
            let back: Request = decode(&body).unwrap();
            // The encoding is the identity of a message: equal bytes, equal message.
            assert_eq!(encode(&back).unwrap(), encode(req).unwrap());
        }
    }

    #[test]
    fn a_reader_refuses_a_frame_too_large_and_a_closed_stream() {
        let (mut a, mut b) = UnixStream::pair().unwrap();
        std::io::Write::write_all(&mut a, &u32::MAX.to_le_bytes()).unwrap();
        let e = recv_blocking(&mut b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("allowed"), "{e}");
        // A frame cut short by the peer going away is an end of stream, not a message.
        std::io::Write::write_all(&mut a, &[8, 0, 0, 0, 1, 2]).unwrap();
        drop(a);
        let e = recv_blocking(&mut b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn a_body_that_is_no_message_is_refused_with_a_reason() {
        // A variant index past the last request, and a request cut short.
        let e = decode::<Request>(&[0xff, 0x01]).unwrap_err();
        assert!(e.starts_with("malformed message"), "{e}");
        let frame = encode(&Request::AllocPd { dev: 300 }).unwrap();
        let body = &frame[4..];
        assert!(decode::<Request>(&body[..body.len() - 1]).is_err());
        assert!(decode::<Request>(&[]).is_err());
    }
}
