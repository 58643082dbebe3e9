//! The pingpong programs' out-of-band exchange, byte for byte as rdma-core's: each side's
//! LID, QPN, PSN and GID as one fixed-size text message (`struct pingpong_dest` through
//! `pp_client_exch_dest` / `pp_server_exch_dest`), then "done". The TCP under it — connecting
//! with retries, accepting within the timeout — is [`crate::oob`]'s, as perftest's is.

use std::io::{Read, Write};
use std::net::{Ipv6Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::oob;

use super::args::Args;

use super::{because, fail, Fail, Pp, Result, Transport};

/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`: the message with its NUL.
pub(super) const MSG_LEN: usize = 52;
/// `sizeof "done"`.
const DONE: &[u8; 5] = b"done\0";

/// One side's address as the exchange carries it (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Dest {
    pub(super) lid: u16,
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) gid: [u8; 16],
}

impl Dest {
    /// `"%04x:%06x:%06x:%s"` with the GID as upstream's `gid_to_wire_gid` writes it, NUL
    /// padded to the fixed message size.
    ///
    /// `gid_to_wire_gid` prints each 32-bit word of the raw GID after `htonl` of its native
    /// load, which on either byte order is the bytes in memory order: plain hex of the 16
    /// bytes.
    pub(super) fn to_wire(self) -> [u8; MSG_LEN] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut msg = [0u8; MSG_LEN];
        let n = text.len().min(MSG_LEN - 1);
        msg[..n].copy_from_slice(&text.as_bytes()[..n]);
        msg
    }

    /// Parses what `sscanf(msg, "%x:%x:%x:%s")` + `wire_gid_to_gid` read.
    pub(super) fn from_wire(msg: &[u8]) -> Option<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).ok()?;
        let mut f = text.splitn(4, ':');
        let lid = u32::from_str_radix(f.next()?, 16).ok()?;
        let qpn = u32::from_str_radix(f.next()?, 16).ok()?;
        let psn = u32::from_str_radix(f.next()?, 16).ok()?;
        let g = f.next()?.trim();
        if g.len() < 32 || !g.is_char_boundary(32) {
            return None;
        }
        let mut gid = [0u8; 16];
        for (k, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(g.get(2 * k..2 * k + 2)?, 16).ok()?;
        }
        Some(Dest {
            lid: u16::try_from(lid).ok()?,
            qpn: qpn & 0xff_ffff,
            psn: psn & 0xff_ffff,
            gid,
        })
    }

    /// Upstream uses a GRH exactly when the peer's GID has a nonzero interface id.
    pub(super) fn global(&self) -> bool {
        self.gid[8..].iter().any(|&b| b != 0)
    }
}

/// `inet_ntop(AF_INET6, ...)` as glibc writes it: like Rust's, except that glibc also writes
/// the deprecated IPv4-compatible form (`::a.b.c.d`) in dotted quad.
fn gid_text(gid: &[u8; 16]) -> String {
    let a = Ipv6Addr::from(*gid);
    let w = a.segments();
    if w[..6].iter().all(|&x| x == 0) && w[6] != 0 {
        return format!("::{}.{}.{}.{}", gid[12], gid[13], gid[14], gid[15]);
    }
    a.to_string()
}

/// The address lines; `ibv_ud_pingpong` writes a colon before the GID of its local line.
pub(super) fn address_line(t: Transport, local: bool, d: &Dest) -> String {
    let (label, sep) = match (local, t) {
        (true, Transport::Ud) => ("  local address:  ", ":"),
        (true, _) => ("  local address:  ", ","),
        (false, _) => ("  remote address: ", ","),
    };
    format!(
        "{label}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
        d.lid,
        d.qpn,
        d.psn,
        gid_text(&d.gid)
    )
}

fn io_why(e: &std::io::Error, timeout: Duration) -> String {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => {
            "the peer closed the connection: it exited or refused the exchange".to_string()
        }
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => format!(
            "the peer sent nothing for {} s (--timeout)",
            timeout.as_secs_f64()
        ),
        _ => e.to_string(),
    }
}

/// `pp_client_exch_dest`: connect, send ours, read theirs, send "done".
pub(super) fn client_exchange(a: &Args, host: &str, mine: &Dest) -> Result<Dest> {
    let addrs: Vec<SocketAddr> = match (host, a.port).to_socket_addrs() {
        Ok(it) => it.collect(),
        Err(e) => return fail(format!("{e} for {host}:{}", a.port)),
    };
    // Upstream tries once; softib retries a refused connection until the timeout, so that a
    // client started a moment before its server still finds it.
    let mut s = match oob::connect_retrying(|| Ok(addrs.clone()), a.timeout) {
        Ok((s, _)) => s,
        Err(why) => {
            return fail(format!(
                "Couldn't connect to {host}:{}\n ({why} for {} s: is the server running and \
                 listening on port {}?)",
                a.port,
                a.timeout.as_secs_f64(),
                a.port
            ))
        }
    };
    // The exchange itself gets a full --timeout of its own, however long connecting took.
    let deadline = Instant::now() + a.timeout;
    let _ = s.set_write_timeout(Some(oob::remaining(deadline)));
    if let Err(e) = s.write_all(&mine.to_wire()) {
        return Err(because(
            "Couldn't send local address",
            io_why(&e, a.timeout),
        ));
    }
    let mut msg = [0u8; MSG_LEN];
    let _ = s.set_read_timeout(Some(oob::remaining(deadline)));
    let exchanged = s.read_exact(&mut msg).and_then(|()| s.write_all(DONE));
    if let Err(e) = exchanged {
        return Err(because(
            "Couldn't read/write remote address",
            io_why(&e, a.timeout),
        ));
    }
    Dest::from_wire(&msg).ok_or_else(|| {
        Fail(format!(
            "Couldn't read/write remote address\n (the server sent {:?}, not \
             LID:QPN:PSN:GID)",
            String::from_utf8_lossy(&msg).trim_end_matches('\0')
        ))
    })
}

/// `pp_server_exch_dest`: accept, read theirs, connect the QP, send ours, read "done".
pub(super) fn server_exchange(a: &Args, pp: &mut Pp, mine: &Dest) -> Result<Dest> {
    let listener = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], a.port)))
        .map_err(|e| because(&format!("Couldn't listen to port {}", a.port), e))?;
    // Upstream waits in accept() forever; softib gives up after --timeout.
    let mut s = match oob::accept_within(&listener, a.timeout) {
        Ok(Some((s, _))) => s,
        Ok(None) => {
            return fail(format!(
                "No client connected to port {} within {} s (--timeout): start the client \
                 with this host's name, or raise --timeout",
                a.port,
                a.timeout.as_secs_f64()
            ))
        }
        Err(e) => return Err(because("accept() failed", e)),
    };
    drop(listener);
    // The exchange itself gets a full --timeout of its own, however long the wait was.
    let deadline = Instant::now() + a.timeout;
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(oob::remaining(deadline)));
    let mut msg = [0u8; MSG_LEN];
    if let Err(e) = s.read_exact(&mut msg) {
        return Err(because(
            &format!("0/{MSG_LEN}: Couldn't read remote address"),
            io_why(&e, a.timeout),
        ));
    }
    let Some(remote) = Dest::from_wire(&msg) else {
        return fail(format!(
            "{MSG_LEN}/{MSG_LEN}: Couldn't read remote address\n (the client sent {:?}, not \
             LID:QPN:PSN:GID)",
            String::from_utf8_lossy(&msg).trim_end_matches('\0')
        ));
    };
    if let Err(Fail(m)) = pp.connect(a, mine.psn, &remote) {
        return fail(format!("{m}\nCouldn't connect to remote QP"));
    }
    let _ = s.set_write_timeout(Some(oob::remaining(deadline)));
    let _ = s.set_read_timeout(Some(oob::remaining(deadline)));
    let mut done = [0u8; DONE.len()];
    let sent = s
        .write_all(&mine.to_wire())
        .and_then(|()| s.read_exact(&mut done));
    if let Err(e) = sent {
        return Err(because(
            "Couldn't send/recv local address",
            io_why(&e, a.timeout),
        ));
    }
    Ok(remote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_message_round_trips_and_has_upstreams_size() {
        let d = Dest {
            lid: 2,
            qpn: 0x123,
            psn: 0x4a5b6c,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xe4, 0x1d, 0x2d, 0x03, 0, 0xb4, 0x7d, 0x01,
            ],
        };
        let w = d.to_wire();
        assert_eq!(
            &w[..51],
            b"0002:000123:4a5b6c:fe80000000000000e41d2d0300b47d01"
        );
        assert_eq!(w[51], 0);
        assert_eq!(
            w.len(),
            "0000:000000:000000:00000000000000000000000000000000\0".len()
        );
        assert_eq!(Dest::from_wire(&w), Some(d));
        assert!(d.global());
        assert_eq!(Dest::from_wire(b"zz:1:2:00"), None);
        assert_eq!(Dest::from_wire(b"0001:000001:000001:0011"), None);
    }

    #[test]
    fn address_lines_print_like_upstream() {
        let mut d = Dest {
            lid: 1,
            qpn: 0x123,
            psn: 0x4a5b6c,
            gid: [0; 16],
        };
        assert_eq!(
            address_line(Transport::Rc, true, &d),
            "  local address:  LID 0x0001, QPN 0x000123, PSN 0x4a5b6c, GID ::"
        );
        assert_eq!(
            address_line(Transport::Ud, true, &d),
            "  local address:  LID 0x0001, QPN 0x000123, PSN 0x4a5b6c: GID ::"
        );
        d.gid[10] = 0xff;
        d.gid[11] = 0xff;
        d.gid[12..].copy_from_slice(&[127, 0, 0, 2]);
        assert_eq!(
            address_line(Transport::Ud, false, &d),
            "  remote address: LID 0x0001, QPN 0x000123, PSN 0x4a5b6c, GID ::ffff:127.0.0.2"
        );
        let mut compat = [0u8; 16];
        compat[12..].copy_from_slice(&[1, 2, 3, 4]);
        assert_eq!(gid_text(&compat), "::1.2.3.4");
        let mut one = [0u8; 16];
        one[15] = 1;
        assert_eq!(gid_text(&one), "::1");
    }
}
