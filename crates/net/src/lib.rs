//! `softib-net` — the operating-system plumbing of softib: UDP links and the IB cable
//! ([`cable`]), memory shared with applications ([`shm`]), descriptor passing ([`fdpass`]),
//! network interfaces ([`netdev`]). It moves opaque byte frames and knows nothing of
//! InfiniBand: framing lives in `softib-link`.
#![deny(missing_docs)]

use std::io;
use std::net::{SocketAddr, UdpSocket};

use rustix::net::sockopt;

pub mod batch;
pub mod cable;
pub mod counters;
pub mod devns;
pub mod fault;
pub mod fdpass;
pub mod mcast;
pub mod netdev;
pub mod pcap;
pub mod peer;
pub mod procmem;
pub mod ring;
pub mod shm;
pub mod steer;
pub mod tun;

pub use batch::{RxBatch, RxDatagram, TxFlush, TxQueue};
pub use cable::{Cable, CableEvent, CableRecv, CableStats, PhysState};

/// Socket buffer size asked for: a burst of READ responses or a 64-packet window must not
/// overflow the kernel's default ~200 KiB (the kernel caps it at `net.core.rmem_max`).
pub const SOCKET_BUFFER: usize = 8 << 20;

/// Receive buffer size asked for (the kernel doubles it for its bookkeeping): deeper than the
/// send side's, because a flood of small junk datagrams fills a buffer by the kernel's
/// per-datagram overhead, not by their bytes — 32 MiB hold some 20,000 of them, half a
/// second of a 40,000 datagrams/s flood while the daemon is kept from reading.
pub const RECV_BUFFER: usize = 16 << 20;

/// A UDP socket set up the way a RoCEv2 sender needs it.
///
/// Unconnected, with path-MTU discovery forced on (`IP_PMTUDISC_DO`): Linux then sends every
/// IPv4 datagram with DF set and Identification 0 (`ip_select_ident_segs`), which is what lets
/// a userspace sender compute the RoCEv2 ICRC, which covers the IP header, before the kernel
/// writes it. (With the default `IP_PMTUDISC_WANT` the kernel hashes a nonzero ID.)
#[derive(Debug)]
pub struct UdpLink {
    socket: UdpSocket,
    local: SocketAddr,
    /// Whether sends may be UDP GSO runs ([`batch`]); turned off when the kernel refuses one.
    gso: std::sync::atomic::AtomicBool,
    /// Whether the kernel may hand this socket coalesced runs (UDP GRO is on).
    gro: bool,
}

/// `UDP_NO_CHECK6_RX` from `linux/udp.h` (level `SOL_UDP`); the libc crate does not name it.
const UDP_NO_CHECK6_RX: libc::c_int = 102;

/// Sets an integer socket option at level `SOL_UDP`.
fn set_udp_option(socket: &UdpSocket, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    set_int_option(socket, libc::SOL_UDP, option, value)
}

/// Sets an integer socket option.
fn set_int_option(
    socket: &UdpSocket,
    level: libc::c_int,
    option: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    #[allow(unsafe_code)]
    // SAFETY: the descriptor is an open socket owned by `socket` for the whole call; the option
    // value is a live `c_int` and the length passed is exactly its size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether the kernel knows `UDP_SEGMENT` (reading it fails with ENOPROTOOPT before 4.18).
fn kernel_has_gso(socket: &UdpSocket) -> bool {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    #[allow(unsafe_code)]
    // SAFETY: an open socket, a live out-parameter and its exact length.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_UDP,
            batch::UDP_SEGMENT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0
}

/// Lets an IPv6 UDP socket receive datagrams whose UDP checksum is zero.
///
/// Linux drops those by default (RFC 8200), but RoCEv2 senders write zero over IPv6 — the Linux
/// rxe driver does (its own socket accepts them the same way; RFC 6935 allows zero for
/// tunnels), and the ICRC covers the packet anyway. Without this, every packet from rxe over
/// IPv6 vanished in the kernel before softib saw it.
fn accept_zero_udp6_checksum(socket: &UdpSocket) -> io::Result<()> {
    set_udp_option(socket, UDP_NO_CHECK6_RX, 1)
}

impl UdpLink {
    /// Binds `local`, non-blocking, DF on, ID 0, large buffers; over IPv6 it also accepts
    /// datagrams with a zero UDP checksum (see `accept_zero_udp6_checksum`). Received datagrams
    /// come one by one (no GRO).
    pub fn bind(local: SocketAddr) -> io::Result<UdpLink> {
        UdpLink::bind_with(local, false)
    }

    /// Binds `local` like [`UdpLink::bind`], with UDP GRO on where the kernel has it when
    /// `gro`: for readers that use [`UdpLink::recv_batch`].
    pub fn bind_with(local: SocketAddr, gro: bool) -> io::Result<UdpLink> {
        UdpLink::from_socket(UdpSocket::bind(local)?, gro)
    }

    /// Binds `local` like [`UdpLink::bind_with`], as the first member of an SO_REUSEPORT group
    /// (`steer`): refused, as a plain bind is, when any socket holds the address already. (A
    /// socket of this user that binds the same address with SO_REUSEPORT between the check and
    /// the bind joins the group unseen; the check is what keeps two daemons apart otherwise.)
    pub fn bind_reuseport_with(local: SocketAddr, gro: bool) -> io::Result<UdpLink> {
        let probe = UdpSocket::bind(local)?;
        let local = probe.local_addr()?;
        drop(probe);
        UdpLink::from_socket(steer::bind_reuseport(local)?, gro)
    }

    /// A link over a bound socket (made non-blocking, DF on, large buffers, GRO as `gro`).
    pub fn from_socket(socket: UdpSocket, gro: bool) -> io::Result<UdpLink> {
        let local = socket.local_addr()?;
        socket.set_nonblocking(true)?;
        match local {
            SocketAddr::V4(_) => {
                sockopt::set_ip_mtu_discover(&socket, sockopt::Ipv4PathMtuDiscovery::DO)?
            }
            SocketAddr::V6(_) => {
                sockopt::set_ipv6_mtu_discover(&socket, sockopt::Ipv6PathMtuDiscovery::DO)?;
                accept_zero_udp6_checksum(&socket)?;
            }
        }
        // Root may exceed net.core.[rw]mem_max (SO_RCVBUFFORCE); anyone else gets at most
        // that. A deep receive buffer is what keeps bursts from many QPs from being dropped.
        if sockopt::set_socket_recv_buffer_size_force(&socket, RECV_BUFFER).is_err() {
            let _ = sockopt::set_socket_recv_buffer_size(&socket, RECV_BUFFER);
        }
        if sockopt::set_socket_send_buffer_size_force(&socket, SOCKET_BUFFER).is_err() {
            let _ = sockopt::set_socket_send_buffer_size(&socket, SOCKET_BUFFER);
        }
        let local = socket.local_addr()?;
        let gso = !batch::env_disabled("SOFTIB_UDP_GSO") && kernel_has_gso(&socket);
        if gro {
            // Batched readers learn how many datagrams a full buffer cost (RxBatch::overflows).
            let _ = set_int_option(&socket, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1);
        }
        let gro = gro
            && !batch::env_disabled("SOFTIB_UDP_GRO")
            && set_udp_option(&socket, batch::UDP_GRO, 1).is_ok();
        Ok(UdpLink {
            socket,
            local,
            gso: std::sync::atomic::AtomicBool::new(gso),
            gro,
        })
    }

    /// Whether sends may be UDP GSO runs.
    pub fn gso(&self) -> bool {
        self.gso.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Turns GSO off (the kernel refused a GSO send on this socket's route).
    pub fn disable_gso(&self) {
        self.gso.store(false, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the kernel may coalesce received datagrams into runs (UDP GRO): a socket with
    /// GRO must be read with [`UdpLink::recv_batch`], never with [`UdpLink::try_recv`] alone.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// The socket, for readiness polling.
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Sends one datagram. `WouldBlock` means the socket buffer is full.
    pub fn send_to(&self, payload: &[u8], to: SocketAddr) -> io::Result<()> {
        self.socket.send_to(payload, to).map(|_| ())
    }

    /// Receives one datagram if one is waiting (`Ok(None)` otherwise).
    pub fn try_recv(&self, buf: &mut [u8]) -> io::Result<Option<(usize, SocketAddr)>> {
        loop {
            match self.socket.recv_from(buf) {
                Ok(v) => return Ok(Some(v)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                // An ICMP port-unreachable from an earlier send surfaces here; not our input.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits up to `timeout` for a datagram to be waiting, without taking it; returns whether
    /// one is.
    pub fn wait_readable(&self, timeout: std::time::Duration) -> io::Result<bool> {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let ts = Timespec {
            tv_sec: timeout.as_secs().try_into().unwrap_or(i64::MAX),
            tv_nsec: timeout.subsec_nanos().into(),
        };
        let mut fds = [PollFd::new(&self.socket, PollFlags::IN)];
        loop {
            match poll(&mut fds, Some(&ts)) {
                Ok(n) => return Ok(n > 0),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits up to `timeout` for a datagram, then receives it.
    pub fn recv_timeout(
        &self,
        buf: &mut [u8],
        timeout: std::time::Duration,
    ) -> io::Result<Option<(usize, SocketAddr)>> {
        if timeout.is_zero() {
            return self.try_recv(buf);
        }
        self.socket.set_nonblocking(false)?;
        self.socket.set_read_timeout(Some(timeout))?;
        let got = self.socket.recv_from(buf);
        self.socket.set_nonblocking(true)?;
        match got {
            Ok(v) => Ok(Some(v)),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::ConnectionRefused
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod udp6_tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn no_check6_rx(socket: &UdpSocket) -> libc::c_int {
        let mut v: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        #[allow(unsafe_code)]
        // SAFETY: an open socket, a live out-parameter and its exact length.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_UDP,
                UDP_NO_CHECK6_RX,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        v
    }

    #[test]
    fn ipv6_links_accept_a_zero_udp_checksum() {
        let Ok(link) = UdpLink::bind("[::1]:0".parse().unwrap()) else {
            eprintln!("skipped: no IPv6 loopback here");
            return;
        };
        assert_eq!(no_check6_rx(link.socket()), 1);
        // A plain socket does not (the kernel's default, which dropped rxe's packets).
        let plain = UdpSocket::bind("[::1]:0").unwrap();
        assert_eq!(no_check6_rx(&plain), 0);
    }
}
