//! The IPv4 multicast groups a process engine's UD QPs are attached to: a socket per group
//! (`softib_net::mcast::join`: every such socket of the host gets each datagram, the
//! daemon's and other engines' alike), registered in an epoll set the progress thread sleeps
//! on, and the QPs attached to each; the last to leave closes the socket.

use std::collections::BTreeSet;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::epoll;
use softib_wire::Qpn;

/// The most groups one engine receives.
pub(crate) const MAX_GROUPS: usize = 64;

/// The most datagrams taken from one group in a turn.
const PER_TURN: usize = 64;

struct Group {
    addr: Ipv4Addr,
    socket: UdpSocket,
    members: BTreeSet<Qpn>,
}

/// An engine's multicast groups.
pub(crate) struct Groups {
    epoll: OwnedFd,
    list: Vec<Group>,
    /// The device's address and UDP port: where groups are joined and received.
    local: SocketAddr,
    buf: Box<[u8]>,
}

impl Groups {
    /// No groups yet, for the device at `local`.
    pub fn new(local: SocketAddr) -> io::Result<Groups> {
        Ok(Groups {
            epoll: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            list: Vec::new(),
            local,
            buf: vec![0u8; 9216].into_boxed_slice(),
        })
    }

    /// The epoll set of the group sockets: readable while one of them is.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }

    /// Whether no QP is attached to a group.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// QP `qpn` receives `group` (one more member when others do already).
    pub fn join(&mut self, group: Ipv4Addr, qpn: Qpn) -> io::Result<()> {
        if let Some(g) = self.list.iter_mut().find(|g| g.addr == group) {
            g.members.insert(qpn);
            return Ok(());
        }
        let IpAddr::V4(local) = self.local.ip() else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("IPv4 multicast group {group} on a device with an IPv6 address"),
            ));
        };
        if self.list.len() >= MAX_GROUPS {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("an engine receives at most {MAX_GROUPS} multicast groups"),
            ));
        }
        let socket = softib_net::mcast::join(group, self.local.port(), local)?;
        epoll::add(
            &self.epoll,
            &socket,
            epoll::EventData::new_u64(u64::from(u32::from(group))),
            epoll::EventFlags::IN,
        )?;
        self.list.push(Group {
            addr: group,
            socket,
            members: BTreeSet::from([qpn]),
        });
        Ok(())
    }

    /// QP `qpn` leaves the groups `which` picks; a group's last member closes its socket
    /// (which leaves the group and the epoll set).
    pub fn leave(&mut self, which: impl Fn(Ipv4Addr) -> bool, qpn: Qpn) {
        for g in self.list.iter_mut().filter(|g| which(g.addr)) {
            g.members.remove(&qpn);
        }
        self.list.retain(|g| !g.members.is_empty());
    }

    /// Hands what waits on the groups' sockets (a bounded number each) to `take` as the
    /// group, the sender and the datagram; returns whether there was any.
    pub fn receive(&mut self, mut take: impl FnMut(Ipv4Addr, SocketAddr, &[u8])) -> bool {
        let mut got = false;
        for g in &self.list {
            for _ in 0..PER_TURN {
                match g.socket.recv_from(&mut self.buf) {
                    Ok((n, from)) => {
                        take(g.addr, from, &self.buf[..n]);
                        got = true;
                    }
                    Err(_) => break,
                }
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_received_until_its_last_member_leaves() {
        let local: SocketAddr = "127.0.0.1:47933".parse().unwrap();
        let group = Ipv4Addr::new(239, 77, 2, 3);
        let mut g = Groups::new(local).unwrap();
        if g.join(group, Qpn::new(5)).is_err() {
            eprintln!("skipped: loopback does not join multicast groups here");
            return;
        }
        g.join(group, Qpn::new(6)).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        softib_net::mcast::send_from(&tx, Ipv4Addr::LOCALHOST).unwrap();
        tx.send_to(b"one", (group, 47933)).unwrap();
        let mut seen = Vec::new();
        let t0 = std::time::Instant::now();
        while seen.is_empty() && t0.elapsed() < std::time::Duration::from_secs(2) {
            g.receive(|grp, _, d| seen.push((grp, d.to_vec())));
        }
        assert_eq!(seen, [(group, b"one".to_vec())]);
        g.leave(|a| a == group, Qpn::new(5));
        assert!(!g.is_empty());
        g.leave(|_| true, Qpn::new(6));
        assert!(g.is_empty());
    }
}
