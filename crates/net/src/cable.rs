//! The emulated InfiniBand cable: a UDP association between two port endpoints, with a
//! physical-layer training handshake.
//!
//! A real IB port trains its link with the port at the other end of the cable before anything
//! else can flow (PortPhysicalState Polling → LinkUp, IBA §5.6). Here each end sends small
//! *training beacons* to the other; the link is up while both ends hear each other. Beacons
//! keep flowing while the link is up, so a peer that goes away (process killed, cable "pulled"
//! with [`Cable::set_enabled`]) takes the link down after [`LINK_TIMEOUT`] — the event a
//! subnet manager's light sweep notices.
//!
//! A real link stays up however busy the hosts are; only the peer's silence takes it down. So
//! silence counts only while this end looks: any datagram from the peer, beacon or frame, is
//! hearing it, and the time between two [`Cable::poll`]s counts at most [`MAX_COUNTED_GAP`]
//! (an end whose own process was stalled — a loaded machine, a long turn of its loop — has not
//! seen the peer go quiet, and finds the peer's beacons waiting when it looks again).
//!
//! Beacons can never be mistaken for IB packets: their first byte is `0xFF`, whose low nibble
//! would be LRH.LVer = 15, and only LVer 0 exists. Everything else on the cable is handed up as
//! an opaque frame (LRH through VCRC); this module knows nothing else of InfiniBand.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::UdpLink;

/// The physical state of a cable end (IBA PortPhysicalState, the subset that applies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhysState {
    /// Switched off: no beacons are sent and none are answered.
    Disabled,
    /// Training: beacons go out, the peer has not answered yet.
    Polling,
    /// Trained: both ends hear each other.
    LinkUp,
}

/// A change of [`PhysState`] that the node must act on (tell its SMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CableEvent {
    /// The link trained.
    Up,
    /// The link was lost (peer silent, peer restarted, or disabled here).
    Down,
}

/// What [`Cable::recv`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CableRecv {
    /// Nothing is waiting.
    Empty,
    /// A frame of this many bytes is at the start of the buffer.
    Frame(usize),
    /// A beacon (or stray datagram) was consumed; it may have changed the state.
    Consumed(Option<CableEvent>),
}

/// How long a cable end stays up without hearing its peer.
pub const LINK_TIMEOUT: Duration = Duration::from_millis(1000);
/// Beacon period while training.
const POLLING_BEACON: Duration = Duration::from_millis(50);
/// Beacon period while up (a keepalive).
const UP_BEACON: Duration = Duration::from_millis(200);
/// The most one gap between two polls adds to the peer's silence: a running end polls at
/// least every [`UP_BEACON`] ([`Cable::next_deadline`]); a longer gap means this end was not
/// looking.
pub const MAX_COUNTED_GAP: Duration = Duration::from_millis(250);

const BEACON_LEN: usize = 16;
const BEACON_MAGIC: [u8; 4] = [0xFF, b'S', b'I', b'B'];
const BEACON_VERSION: u8 = 1;
/// Beacon flag: the sender has heard the receiver (the second half of the handshake).
const FLAG_HEARD_YOU: u8 = 0x01;

/// Counters of one cable end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CableStats {
    /// Frames handed up.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames not sent because the link was not up.
    pub tx_link_down: u64,
    /// Datagrams from an address other than the peer's, dropped.
    pub rx_stranger: u64,
    /// Datagrams that looked like beacons but were malformed, dropped.
    pub rx_bad_beacon: u64,
    /// Frames received while the link was not up, dropped.
    pub rx_link_down: u64,
    /// Times the link went down.
    pub link_downs: u64,
}

/// One end of a cable.
#[derive(Debug)]
pub struct Cable {
    link: UdpLink,
    peer: SocketAddr,
    state: PhysState,
    /// A random-ish id of this end's lifetime: a peer that sees it change knows we restarted.
    session: u64,
    peer_session: Option<u64>,
    /// Whether the peer has been heard since the link last went down (training began).
    heard: bool,
    /// How long the peer has been silent while this end looked (see the module docs).
    silent: Duration,
    /// When [`Cable::poll`] last ran.
    last_poll: Option<Instant>,
    peer_hears_us: bool,
    next_beacon: Instant,
    stats: CableStats,
}

impl Cable {
    /// Binds this end to `local`, cabled to `peer`. The link starts Polling.
    pub fn bind(local: SocketAddr, peer: SocketAddr, now: Instant) -> io::Result<Cable> {
        Ok(Cable::new(UdpLink::bind(local)?, peer, now))
    }

    /// This end on an already bound socket, cabled to `peer`. The link starts Polling.
    pub fn new(link: UdpLink, peer: SocketAddr, now: Instant) -> Cable {
        // Distinct per process and per cable end without OS randomness: the process id, the
        // local port and the time of creation.
        let session = (u64::from(std::process::id()) << 32)
            ^ (u64::from(link.local_addr().port()) << 16)
            ^ u64::from(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_nanos()),
            );
        Cable {
            link,
            peer,
            state: PhysState::Polling,
            session,
            peer_session: None,
            heard: false,
            silent: Duration::ZERO,
            last_poll: None,
            peer_hears_us: false,
            next_beacon: now,
            stats: CableStats::default(),
        }
    }

    /// This end's address.
    pub fn local_addr(&self) -> SocketAddr {
        self.link.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The physical state.
    pub fn state(&self) -> PhysState {
        self.state
    }

    /// The counters.
    pub fn stats(&self) -> CableStats {
        self.stats
    }

    /// The socket, for readiness polling.
    pub fn socket(&self) -> &std::net::UdpSocket {
        self.link.socket()
    }

    /// Enables (Polling) or disables (Disabled) this end — the operator "pulling the cable" or
    /// the SM setting PortPhysicalState. Disabling a link that was up returns `Down`.
    pub fn set_enabled(&mut self, enabled: bool, now: Instant) -> Option<CableEvent> {
        match (enabled, self.state) {
            (false, PhysState::Disabled) | (true, PhysState::Polling | PhysState::LinkUp) => None,
            (false, old) => {
                self.state = PhysState::Disabled;
                self.forget_peer();
                self.went_down(old)
            }
            (true, PhysState::Disabled) => {
                self.state = PhysState::Polling;
                self.next_beacon = now;
                None
            }
        }
    }

    /// Sends a beacon when one is due and takes the link down when the peer has been silent
    /// for [`LINK_TIMEOUT`]. Call at [`Cable::next_deadline`] (earlier is harmless).
    pub fn poll(&mut self, now: Instant) -> Option<CableEvent> {
        if self.state == PhysState::Disabled {
            return None;
        }
        let mut event = None;
        if let Some(last) = self.last_poll.replace(now) {
            self.silent += now.saturating_duration_since(last).min(MAX_COUNTED_GAP);
        }
        if self.heard && self.silent >= LINK_TIMEOUT {
            let old = self.state;
            self.state = PhysState::Polling;
            self.forget_peer();
            event = self.went_down(old);
        }
        if now >= self.next_beacon {
            self.send_beacon();
            let period = if self.state == PhysState::LinkUp {
                UP_BEACON
            } else {
                POLLING_BEACON
            };
            self.next_beacon = now + period;
        }
        event
    }

    /// When [`Cable::poll`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.state == PhysState::Disabled {
            return None;
        }
        let timeout = match (self.heard, self.last_poll) {
            (true, Some(last)) => Some(last + LINK_TIMEOUT.saturating_sub(self.silent)),
            _ => None,
        };
        Some(timeout.map_or(self.next_beacon, |t| t.min(self.next_beacon)))
    }

    /// Receives one datagram without blocking. Beacons are consumed here; frames are returned
    /// only while the link is up (a port that has not trained receives nothing).
    pub fn recv(&mut self, now: Instant, buf: &mut [u8]) -> io::Result<CableRecv> {
        let Some((len, from)) = self.link.try_recv(buf)? else {
            return Ok(CableRecv::Empty);
        };
        if from != self.peer {
            self.stats.rx_stranger += 1;
            return Ok(CableRecv::Consumed(None));
        }
        let bytes = &buf[..len];
        if bytes.first() == Some(&BEACON_MAGIC[0]) {
            return Ok(CableRecv::Consumed(self.handle_beacon(now, bytes)));
        }
        if !self.heard_frame() {
            return Ok(CableRecv::Consumed(None));
        }
        Ok(CableRecv::Frame(len))
    }

    /// A frame from the peer arrived by another way than this end's socket (handed over inside
    /// the process): it is hearing the peer as a received one is. Returns whether the link is
    /// up, i.e. whether the frame may be handed up.
    pub fn heard_frame(&mut self) -> bool {
        if self.state != PhysState::LinkUp {
            self.stats.rx_link_down += 1;
            return false;
        }
        self.stats.rx_frames += 1;
        self.silent = Duration::ZERO;
        true
    }

    /// Sends a frame to the peer. While the link is not up the frame is dropped and counted,
    /// as a real port's transmitter would discard it.
    pub fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if self.state != PhysState::LinkUp {
            self.stats.tx_link_down += 1;
            return Ok(());
        }
        self.stats.tx_frames += 1;
        match self.link.send_to(frame, self.peer) {
            // The peer's socket is gone (ECONNREFUSED from an earlier datagram) or its buffer is
            // full: on a cable that is a lost packet, which the transport above recovers from.
            Err(e) if is_transient(&e) => Ok(()),
            other => other,
        }
    }

    fn handle_beacon(&mut self, now: Instant, bytes: &[u8]) -> Option<CableEvent> {
        if bytes.len() != BEACON_LEN || bytes[..4] != BEACON_MAGIC || bytes[4] != BEACON_VERSION {
            self.stats.rx_bad_beacon += 1;
            return None;
        }
        if self.state == PhysState::Disabled {
            return None;
        }
        let mut session = [0u8; 8];
        session.copy_from_slice(&bytes[8..16]);
        let session = u64::from_be_bytes(session);
        let mut event = None;
        let peer_retrains = self.state == PhysState::LinkUp && bytes[5] & FLAG_HEARD_YOU == 0;
        if self.peer_session.is_some_and(|s| s != session) || peer_retrains {
            // The peer restarted, or its end went down and trains again (a cable pulled and
            // put back before this end judged it silent): the link it had with us is gone, as
            // on a real link, where both ends retrain; train again.
            let old = self.state;
            self.state = PhysState::Polling;
            self.forget_peer();
            event = self.went_down(old);
        }
        let first_contact = self.peer_session.is_none();
        self.peer_session = Some(session);
        self.heard = true;
        self.silent = Duration::ZERO;
        self.peer_hears_us = bytes[5] & FLAG_HEARD_YOU != 0;
        if first_contact {
            // Answer at once so that the peer learns we hear it without waiting a period.
            self.send_beacon();
        }
        if self.state == PhysState::Polling && self.peer_hears_us {
            self.state = PhysState::LinkUp;
            self.next_beacon = now + UP_BEACON;
            return Some(CableEvent::Up);
        }
        event
    }

    fn send_beacon(&mut self) {
        let mut b = [0u8; BEACON_LEN];
        b[..4].copy_from_slice(&BEACON_MAGIC);
        b[4] = BEACON_VERSION;
        b[5] = if self.peer_session.is_some() {
            FLAG_HEARD_YOU
        } else {
            0
        };
        b[8..].copy_from_slice(&self.session.to_be_bytes());
        // A beacon that cannot be sent is a beacon lost; training simply retries.
        let _ = self.link.send_to(&b, self.peer);
    }

    fn forget_peer(&mut self) {
        self.peer_session = None;
        self.heard = false;
        self.silent = Duration::ZERO;
        self.peer_hears_us = false;
    }

    fn went_down(&mut self, old: PhysState) -> Option<CableEvent> {
        (old == PhysState::LinkUp).then(|| {
            self.stats.link_downs += 1;
            CableEvent::Down
        })
    }
}

/// Send errors that mean "this datagram was lost", not "the socket is broken".
fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused | io::ErrorKind::WouldBlock
    ) || e.raw_os_error() == Some(rustix::io::Errno::NOBUFS.raw_os_error())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(now: Instant) -> (Cable, Cable) {
        let a = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let b = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let (aa, ba) = (a.local_addr(), b.local_addr());
        drop((a, b));
        (
            Cable::bind(aa, ba, now).unwrap(),
            Cable::bind(ba, aa, now).unwrap(),
        )
    }

    /// Runs both ends for `steps` rounds of poll + drain, advancing time by `dt` each round.
    fn run(
        a: &mut Cable,
        b: &mut Cable,
        now: &mut Instant,
        dt: Duration,
        steps: usize,
    ) -> Vec<(char, CableEvent)> {
        let mut events = Vec::new();
        let mut buf = [0u8; 2048];
        for _ in 0..steps {
            for (name, c) in [('a', &mut *a), ('b', &mut *b)] {
                if let Some(e) = c.poll(*now) {
                    events.push((name, e));
                }
            }
            std::thread::sleep(Duration::from_millis(1));
            for (name, c) in [('a', &mut *a), ('b', &mut *b)] {
                loop {
                    match c.recv(*now, &mut buf).unwrap() {
                        CableRecv::Empty => break,
                        CableRecv::Consumed(Some(e)) => events.push((name, e)),
                        _ => {}
                    }
                }
            }
            *now += dt;
        }
        events
    }

    #[test]
    fn trains_then_carries_frames_then_detects_a_silent_peer() {
        let mut now = Instant::now();
        let (mut a, mut b) = pair(now);
        assert_eq!(a.state(), PhysState::Polling);
        // Frames sent before training are dropped and counted.
        a.send(b"early").unwrap();
        assert_eq!(a.stats().tx_link_down, 1);
        let events = run(&mut a, &mut b, &mut now, Duration::from_millis(10), 10);
        assert!(events.contains(&('a', CableEvent::Up)), "{events:?}");
        assert!(events.contains(&('b', CableEvent::Up)), "{events:?}");
        assert_eq!(
            (a.state(), b.state()),
            (PhysState::LinkUp, PhysState::LinkUp)
        );

        a.send(&[0x00, 1, 2, 3]).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let mut buf = [0u8; 64];
        let got = loop {
            match b.recv(now, &mut buf).unwrap() {
                CableRecv::Frame(n) => break n,
                CableRecv::Empty => panic!("frame lost"),
                CableRecv::Consumed(_) => {}
            }
        };
        assert_eq!(&buf[..got], &[0x00, 1, 2, 3]);

        // "Pull the cable" at a: b stops hearing it and goes down after LINK_TIMEOUT.
        assert_eq!(a.set_enabled(false, now), Some(CableEvent::Down));
        let events = run(&mut a, &mut b, &mut now, Duration::from_millis(100), 15);
        assert!(events.contains(&('b', CableEvent::Down)), "{events:?}");
        assert_eq!(b.state(), PhysState::Polling);
        assert_eq!(a.state(), PhysState::Disabled);

        // Plug it back in: both train again.
        a.set_enabled(true, now);
        let events = run(&mut a, &mut b, &mut now, Duration::from_millis(10), 10);
        assert!(events.contains(&('a', CableEvent::Up)), "{events:?}");
        assert!(events.contains(&('b', CableEvent::Up)), "{events:?}");
    }

    #[test]
    fn a_cable_put_back_before_the_peer_noticed_takes_both_ends_down_and_up() {
        let mut now = Instant::now();
        let (mut a, mut b) = pair(now);
        run(&mut a, &mut b, &mut now, Duration::from_millis(10), 10);
        assert_eq!(b.state(), PhysState::LinkUp);
        // Pulled and plugged at once: b has not been silent for LINK_TIMEOUT, yet a's
        // training beacons tell it that the link went down.
        assert_eq!(a.set_enabled(false, now), Some(CableEvent::Down));
        a.set_enabled(true, now);
        let events = run(&mut a, &mut b, &mut now, Duration::from_millis(10), 10);
        assert_eq!(
            events.iter().filter(|(n, _)| *n == 'b').collect::<Vec<_>>(),
            [&('b', CableEvent::Down), &('b', CableEvent::Up)],
            "{events:?}"
        );
        assert!(events.contains(&('a', CableEvent::Up)), "{events:?}");
        assert_eq!(
            (a.state(), b.state()),
            (PhysState::LinkUp, PhysState::LinkUp)
        );
    }

    #[test]
    fn a_stalled_end_does_not_judge_its_peer_silent() {
        let mut now = Instant::now();
        let (mut a, mut b) = pair(now);
        run(&mut a, &mut b, &mut now, Duration::from_millis(10), 10);
        assert_eq!(b.state(), PhysState::LinkUp);
        // b's loop stalls for three link timeouts; a is paused too (nothing sent). The gap
        // counts at most MAX_COUNTED_GAP, so b does not drop the link on its next look.
        now += LINK_TIMEOUT * 3;
        assert_eq!(b.poll(now), None);
        assert_eq!(b.state(), PhysState::LinkUp);
        // A frame from the peer is hearing it.
        now += MAX_COUNTED_GAP;
        b.poll(now);
        assert!(b.heard_frame());
        // But a peer that stays silent while b keeps looking is gone after LINK_TIMEOUT.
        let mut down = false;
        for _ in 0..(LINK_TIMEOUT.as_millis() / 100 + 2) {
            now += Duration::from_millis(100);
            down |= b.poll(now) == Some(CableEvent::Down);
        }
        assert!(down, "b never noticed the silent peer");
        assert_eq!(b.state(), PhysState::Polling);
    }

    #[test]
    fn strangers_and_bad_beacons_are_counted_and_dropped() {
        let now = Instant::now();
        let (mut a, _b) = pair(now);
        let stranger = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        stranger.send_to(&[0u8; 8], a.local_addr()).unwrap();
        std::thread::sleep(Duration::from_millis(2));
        let mut buf = [0u8; 64];
        assert_eq!(a.recv(now, &mut buf).unwrap(), CableRecv::Consumed(None));
        assert_eq!(a.stats().rx_stranger, 1);
    }
}
