//! A RoCE device's steering group: which process gets the datagrams of which QPNs.
//!
//! The device's socket is member 0 of an SO_REUSEPORT group on the device's address and UDP
//! port (`softib_net::steer`). A client on the process data path joins with
//! [`SteerGroup::join`]: the daemon itself binds the new member (so that it knows the index
//! the kernel gives it — joins are serialised by the daemon's single thread) and hands the
//! socket to the client. The table of QPN blocks by owner becomes a classic BPF program that
//! returns the owner's index; every QPN no block names — QP0/QP1, the daemon's own QPs,
//! quarantined blocks, multicast — returns 0, the daemon. The program is attached again after
//! every change (a join, a leave, a block given or taken back).

use std::collections::BTreeMap;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::ops::RangeInclusive;

use softib_engine::QPN_BLOCK;
use softib_net::steer::{bind_reuseport, Members, Program};

/// Who holds a member's socket: the daemon (index 0) or a client (by its id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// The device's own socket.
    Daemon,
    /// A client's engine.
    Client(u64),
}

/// One device's steering group.
#[derive(Debug)]
pub struct SteerGroup {
    addr: SocketAddr,
    members: Members<Member>,
    /// First QPN of each block → the client whose engine has it.
    blocks: BTreeMap<u32, u64>,
    /// Attached programs (for tests and `softib res -v`).
    programs: u64,
}

impl SteerGroup {
    /// The group of the device socket bound at `addr` (member 0).
    pub fn new(addr: SocketAddr) -> SteerGroup {
        let mut members = Members::new();
        members.join(Member::Daemon);
        SteerGroup {
            addr,
            members,
            blocks: BTreeMap::new(),
            programs: 0,
        }
    }

    /// The index `client` holds, if it joined.
    pub fn index_of(&self, client: u64) -> Option<u32> {
        self.members.index_of(&Member::Client(client))
    }

    /// The client whose engine has `qpn`, if any.
    pub fn owner_of(&self, qpn: u32) -> Option<u64> {
        self.blocks.get(&(qpn & !(QPN_BLOCK - 1))).copied()
    }

    /// Whether any client joined.
    pub fn has_members(&self) -> bool {
        self.members.len() > 1
    }

    /// How many programs were attached.
    pub fn programs(&self) -> u64 {
        self.programs
    }

    /// Binds a new member for `client` and steers its blocks to it (through `device`, the
    /// group's member 0); returns the socket and its index.
    pub fn join(&mut self, client: u64, device: &UdpSocket) -> io::Result<(UdpSocket, u32)> {
        if self.index_of(client).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "this client joined the device's steering group already",
            ));
        }
        let socket = bind_reuseport(self.addr)?;
        let index = self.members.join(Member::Client(client));
        self.reprogram(device)?;
        Ok((socket, index))
    }

    /// `client`'s socket closes (or closed): the last member moves into its index, as in the
    /// kernel, and its blocks go to the daemon.
    pub fn leave(&mut self, client: u64, device: &UdpSocket) -> io::Result<()> {
        if let Some(i) = self.index_of(client) {
            self.members.leave(i);
        }
        self.blocks.retain(|_, c| *c != client);
        self.reprogram(device)
    }

    /// Block `first` is `client`'s from now on.
    pub fn add_block(&mut self, client: u64, first: u32, device: &UdpSocket) -> io::Result<()> {
        self.blocks.insert(first, client);
        if self.index_of(client).is_some() {
            self.reprogram(device)?;
        }
        Ok(())
    }

    /// The table as QPN ranges and member indices (blocks of clients that have not joined go
    /// to the daemon, which is the default anyway).
    pub fn table(&self) -> Vec<(RangeInclusive<u32>, u32)> {
        let mut table: Vec<(RangeInclusive<u32>, u32)> = Vec::new();
        for (&first, &client) in &self.blocks {
            let Some(index) = self.index_of(client) else {
                continue;
            };
            let last = first + QPN_BLOCK - 1;
            match table.last_mut() {
                Some((r, i)) if *i == index && *r.end() + 1 == first => *r = *r.start()..=last,
                _ => table.push((first..=last, index)),
            }
        }
        table
    }

    /// Compiles the table and attaches it to the group.
    fn reprogram(&mut self, device: &UdpSocket) -> io::Result<()> {
        let program = Program::compile(&self.table(), 0)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        program.attach(device)?;
        self.programs += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn bth(qpn: u32) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    fn dest_qps(s: &UdpSocket) -> Vec<u32> {
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok(n) = s.recv(&mut buf) {
            if n >= 8 {
                got.push(u32::from_be_bytes([0, buf[5], buf[6], buf[7]]));
            }
        }
        got
    }

    #[test]
    fn members_get_their_blocks_and_the_daemon_the_rest() {
        let device = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = device.local_addr().unwrap();
        let mut g = SteerGroup::new(addr);
        let (a, ia) = g.join(7, &device).unwrap();
        let (b, ib) = g.join(9, &device).unwrap();
        assert_eq!((ia, ib), (1, 2));
        assert!(g.join(7, &device).is_err(), "joined twice");
        g.add_block(7, 0x4000, &device).unwrap();
        g.add_block(7, 0x4040, &device).unwrap();
        g.add_block(9, 0x8000, &device).unwrap();
        assert_eq!(g.table(), vec![(0x4000..=0x407f, 1), (0x8000..=0x803f, 2)]);
        assert_eq!(g.owner_of(0x4071), Some(7));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for q in [0x4001, 0x407f, 0x8010, 1, 0x9000, 0xff_ffff] {
            tx.send_to(&bth(q), addr).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(dest_qps(&a), [0x4001, 0x407f]);
        assert_eq!(dest_qps(&b), [0x8010]);
        assert_eq!(dest_qps(&device), [1, 0x9000, 0xff_ffff]);

        // 7 leaves (its socket closes): 9 moves into index 1, 7's blocks go to the daemon.
        drop(a);
        g.leave(7, &device).unwrap();
        assert_eq!(g.index_of(9), Some(1));
        assert_eq!(g.owner_of(0x4001), None);
        for q in [0x4001, 0x8010] {
            tx.send_to(&bth(q), addr).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(dest_qps(&b), [0x8010]);
        assert_eq!(dest_qps(&device), [0x4001]);
    }
}
