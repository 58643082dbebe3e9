//! The thinnest real driver of a [`RoceCa`]: one UDP socket, the wall clock, nothing else — the
//! quinn `ConnectionDriver` shape (take what arrived, fire due timers, send everything the
//! engine has, arm the timer). Tests use it to run engines over real sockets on loopback; an
//! embedder reads it as the minimum a `RoceCa` needs around it.
//!
//! Every datagram leaves from the socket's own port (rxe's per-QP source ports need a socket
//! per port, which the daemon keeps; here the ICRC is sealed for the port really used), by
//! itself — not in GSO runs, which a capture on `lo` would see as one datagram never cut
//! apart —, many to a `sendmmsg`, and datagrams are received in batches.

use std::io;
use std::net::SocketAddr;
use std::time::Duration as StdDuration;

use softib_engine::{Instant, Memory, IN_PROCESS_MAX_LEN};
use softib_net::{RxBatch, TxQueue, UdpLink};
use softib_wire::crc::ICRC_LEN;

use crate::roce::{Incoming, RoceCa, RoceConfig, SrcKey};

/// What the driver saw beyond what the device counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Datagrams received.
    pub rx_datagrams: u64,
    /// Datagrams the device dropped (by reason: [`RoceCa::drops`]).
    pub rx_dropped: u64,
    /// Datagrams the kernel took.
    pub tx_datagrams: u64,
    /// Datagrams the kernel refused (a full socket buffer, an unreachable peer).
    pub tx_dropped: u64,
}

/// One device, one UDP socket.
pub struct Driver<M: Memory> {
    /// The device.
    pub ca: RoceCa<M>,
    socket: UdpLink,
    origin: std::time::Instant,
    tx: TxQueue<SrcKey>,
    rx: Box<RxBatch>,
    stats: DriverStats,
}

impl<M: Memory> Driver<M> {
    /// Binds a UDP socket on `local` (e.g. `127.0.0.2:4791`; port 0 picks one) for `hca`;
    /// packets go to `peer_port` at the IP address of each destination GID.
    pub fn bind(
        hca: softib_engine::Hca<M>,
        local: SocketAddr,
        peer_port: u16,
    ) -> io::Result<Driver<M>> {
        let socket = UdpLink::bind_with(local, true)?;
        let config = RoceConfig {
            peer_port,
            ..RoceConfig::new(socket.local_addr())
        };
        Ok(Driver {
            ca: RoceCa::new(hca, config),
            socket,
            origin: std::time::Instant::now(),
            tx: TxQueue::new(),
            rx: Box::new(RxBatch::new()),
            stats: DriverStats::default(),
        })
    }

    /// The socket's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.socket.local_addr()
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
        while self.socket.recv_batch(&mut self.rx)? > 0 {
            let now = self.now();
            for dg in self.rx.datagrams() {
                self.stats.rx_datagrams += 1;
                let d = Incoming::wire(dg.from, dg.index, dg.data);
                if self.ca.handle_datagram(now, &d).is_err() {
                    self.stats.rx_dropped += 1;
                }
            }
        }
        self.ca.handle_timeout(self.now());
        self.transmit();
        Ok(())
    }

    /// Waits up to `max` for a datagram or the engine's next deadline, then polls.
    pub fn poll_wait(&mut self, max: StdDuration) -> io::Result<()> {
        let now = self.now();
        let wait = match self.ca.poll_timeout() {
            Some(t) => StdDuration::from_micros(t.saturating_since(now).as_micros()).min(max),
            None => max,
        };
        self.socket.wait_readable(wait)?;
        self.poll()
    }

    /// Everything the engine has to send, queued and sent.
    fn transmit(&mut self) {
        let room = IN_PROCESS_MAX_LEN + ICRC_LEN;
        let port = self.socket.local_addr().port();
        loop {
            let now = self.now();
            let Some(mut t) = self.ca.poll_transmit(now, self.tx.space(room), &mut []) else {
                break;
            };
            // One socket: every datagram leaves from its port, and is sealed for it.
            t.src_port = port;
            let _ = self.ca.commit(&mut self.tx, &t, false);
        }
        let socket = &self.socket;
        let out = self.tx.flush(|_| Some(socket));
        self.stats.tx_datagrams += out.sent;
        self.stats.tx_dropped += out.dropped;
    }
}
