//! IPv4 multicast groups on a device's interface, as RoCEv2 carries a UD QP's multicast: a
//! socket per group, bound to the group's address and the device's UDP port and joined on the
//! device's address. Every socket of the host bound so gets each datagram sent to the group
//! (SO_REUSEADDR): the daemon's, for its own QPs, and each process engine's, for its.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};

use rustix::net::{sockopt, AddressFamily, SocketFlags, SocketType};

/// A non-blocking socket that receives group `group` on UDP port `port`, a member on the
/// interface of `local`. Errors name the step that failed.
pub fn join(group: Ipv4Addr, port: u16, local: Ipv4Addr) -> io::Result<UdpSocket> {
    let named = |what: &str, e: io::Error| {
        io::Error::new(e.kind(), format!("{what} multicast group {group}: {e}"))
    };
    let fd = rustix::net::socket_with(
        AddressFamily::INET,
        SocketType::DGRAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )
    .map_err(|e| named("a socket for", e.into()))?;
    sockopt::set_socket_reuseaddr(&fd, true).map_err(|e| named("sharing", e.into()))?;
    rustix::net::bind(&fd, &SocketAddr::V4(SocketAddrV4::new(group, port)))
        .map_err(|e| named("binding a socket for", e.into()))?;
    let socket = UdpSocket::from(fd);
    socket
        .join_multicast_v4(&group, &local)
        .map_err(|e| named("joining", e))?;
    Ok(socket)
}

/// Makes what `socket` sends to a group leave by the interface of `local`, not by the
/// routing table's choice (which need not have a multicast route at all).
pub fn send_from(socket: &UdpSocket, local: Ipv4Addr) -> io::Result<()> {
    sockopt::set_ip_multicast_if(socket, &local).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_sockets_of_one_group_each_get_every_datagram() {
        let group = Ipv4Addr::new(239, 77, 1, 9);
        let local = Ipv4Addr::LOCALHOST;
        let (Ok(a), Ok(b)) = (join(group, 47911, local), join(group, 47911, local)) else {
            // A machine whose loopback takes no multicast: nothing to show here.
            eprintln!("skipped: loopback does not join multicast groups here");
            return;
        };
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        send_from(&tx, local).unwrap();
        tx.send_to(b"hello", SocketAddrV4::new(group, 47911))
            .unwrap();
        for s in [&a, &b] {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            let mut buf = [0u8; 16];
            let (n, _) = s.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], b"hello");
        }
    }
}
