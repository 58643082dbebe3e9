//! Drives one engine over one UDP socket: received datagrams in (ICRC checked), due timers
//! fired, everything the engine has to send out — the quinn `ConnectionDriver` shape:
//! process input, drive transmit until the engine is empty, arm the timer.

use std::io;
use std::net::SocketAddr;
use std::time::Duration as StdDuration;

use softib_engine::qp::requester::MAX_TRANSPORT_LEN;
use softib_engine::{Hca, Instant, Memory, RxMeta};
use softib_net::UdpLink;
use softib_wire::crc::ICRC_LEN;

use crate::roce;

/// What the driver saw that the engine did not.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Datagrams dropped for a bad ICRC (corruption, or a foreign IPv4 sender; see [`roce`]).
    pub rx_bad_icrc: u64,
    /// Datagrams dropped as too short to be RoCEv2.
    pub rx_too_short: u64,
    /// Datagrams sent.
    pub tx_datagrams: u64,
    /// Packets the engine built that could not be sent (no GRH to route by, or a send error).
    pub tx_dropped: u64,
}

/// One engine, one UDP socket.
pub struct Driver<M: Memory> {
    /// The engine.
    pub hca: Hca<M>,
    socket: UdpLink,
    local: SocketAddr,
    peer_port: u16,
    origin: std::time::Instant,
    tx: Vec<u8>,
    rx: Vec<u8>,
    stats: DriverStats,
}

impl<M: Memory> Driver<M> {
    /// Binds a UDP socket on `local` (e.g. `127.0.0.2:4791`) for `hca`; packets go to
    /// `peer_port` at the IP address of each destination GID.
    pub fn bind(hca: Hca<M>, local: SocketAddr, peer_port: u16) -> io::Result<Driver<M>> {
        let socket = UdpLink::bind(local)?;
        let local = socket.local_addr();
        Ok(Driver {
            hca,
            socket,
            local,
            peer_port,
            origin: std::time::Instant::now(),
            tx: vec![0u8; MAX_TRANSPORT_LEN + ICRC_LEN],
            rx: vec![0u8; 65536],
            stats: DriverStats::default(),
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// What the driver counted.
    pub fn stats(&self) -> DriverStats {
        self.stats
    }

    /// The engine's notion of now: microseconds since the driver started.
    pub fn now(&self) -> Instant {
        Instant::from_micros(self.origin.elapsed().as_micros() as u64)
    }

    /// Receives every waiting datagram, fires due timers and sends everything the engine has
    /// to send. Never blocks.
    pub fn poll(&mut self) -> io::Result<()> {
        while let Some((n, from)) = self.socket.try_recv(&mut self.rx)? {
            self.deliver(n, from);
        }
        let now = self.now();
        self.hca.handle_timeout(now);
        self.flush()
    }

    /// Waits up to `max` for a datagram or the engine's next deadline, then polls.
    pub fn poll_wait(&mut self, max: StdDuration) -> io::Result<()> {
        let now = self.now();
        let wait = match self.hca.poll_timeout() {
            Some(t) => StdDuration::from_micros(t.saturating_since(now).as_micros()).min(max),
            None => max,
        };
        if let Some((n, from)) = self.socket.recv_timeout(&mut self.rx, wait)? {
            self.deliver(n, from);
        }
        self.poll()
    }

    fn deliver(&mut self, n: usize, from: SocketAddr) {
        self.stats.rx_datagrams += 1;
        let now = self.now();
        match roce::open(from, self.local, &self.rx[..n]) {
            Ok(body) => {
                let mut meta = RxMeta::default();
                if let Some(grh) = roce::grh_area(from, self.local, n) {
                    meta.grh = Some(grh);
                }
                self.hca.handle_packet(now, 1, &meta, body);
            }
            Err(roce::RxError::TooShort) => self.stats.rx_too_short += 1,
            Err(_) => self.stats.rx_bad_icrc += 1,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        loop {
            let now = self.now();
            let Some(t) = self.hca.poll_transmit(now, &mut self.tx) else {
                return Ok(());
            };
            let Some(grh) = t.av.grh else {
                // RoCE is routed by GID: an address vector without a GRH goes nowhere.
                self.stats.tx_dropped += 1;
                continue;
            };
            let dst = SocketAddr::new(roce::ip_of(&grh.dgid), self.peer_port);
            let Some(len) = roce::seal(self.local, dst, &mut self.tx, t.len) else {
                self.stats.tx_dropped += 1;
                continue;
            };
            match self.socket.send_to(&self.tx[..len], dst) {
                Ok(_) => self.stats.tx_datagrams += 1,
                // A full socket buffer or an unreachable peer loses the packet, as a wire
                // would; RC recovers by retransmission.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::ConnectionRefused
                    ) =>
                {
                    self.stats.tx_dropped += 1
                }
                Err(e) => return Err(e),
            }
        }
    }
}
