//! The `switchboard` module deals with *frames between devices of one daemon*: a fabric
//! daemon's cable ends that are both its own ([`Switchboard`]), and RoCEv2 datagrams between
//! its own RoCE devices ([`LocalRoce`]), handed over in-process instead of through the kernel.

use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use softib_net::cable::Cable;
use softib_net::shm::SharedRegion;

/// Frames on cables whose both ends live in this process, by the receiving end's address.
///
/// A fabric daemon hosts many nodes; a frame from one of its cable ends to another is handed
/// over here instead of through the kernel's UDP stack. The cable itself is unchanged — its
/// beacons still travel over UDP, so training, link state and a pulled cable behave exactly as
/// across processes — only the frames skip two system calls each.
///
/// It also knows which node of the daemon owns each end ([`Owner`]), so that the loop can give
/// a turn to just the nodes that have frames waiting ([`Switchboard::take_waiting`]): an SMP
/// then crosses every switch of its route within one round of the loop, instead of one hop
/// per round of all the fabric's nodes.
#[derive(Debug, Default)]
pub struct Switchboard {
    queues: std::collections::BTreeMap<SocketAddr, (Owner, std::collections::VecDeque<Vec<u8>>)>,
    pending: usize,
    /// The owners of the ends frames were queued for since the last `take_waiting`.
    waiting: std::collections::BTreeSet<Owner>,
    /// RoCEv2 datagrams between this process's own RoCE devices.
    pub roce: LocalRoce,
}

/// The node of a daemon a cable end belongs to: a host (by index) or a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// The daemon's host of this index.
    Host(usize),
    /// The daemon's switch of this index.
    Switch(usize),
}

/// RoCEv2 datagrams between the RoCE devices of one daemon, handed over in-process.
///
/// Two QPs on devices of the same daemon (the intra-host case: `rxe0` and `rxe1` on `lo`, or
/// two QPs of one device) would otherwise cross the kernel's UDP stack twice per datagram
/// (send, then receive) and wait for the loop to wake on the socket. Here a device's queued
/// datagrams for an address of this daemon go straight to that device's inbound queue, which
/// it takes at its next receive, as if from its socket: the same ICRC check, capture, counters
/// and faults (faults act before the queue). Nothing is allocated in the steady state.
#[derive(Debug, Default)]
pub struct LocalRoce {
    /// The devices' addresses (refreshed every turn).
    ends: Vec<SocketAddr>,
    /// The waiting datagrams' bytes, one after another; the first `used` are taken by them.
    /// A sender builds its next packet right after them ([`LocalRoce::space`]), so a
    /// datagram for a local device is never copied between its making and its receipt.
    data: Vec<u8>,
    used: usize,
    items: Vec<LocalItem>,
    pending: usize,
}

/// A payload handed over as it lies: `len` bytes at `off` of a client's shared buffer.
#[derive(Debug, Clone)]
pub struct LocalPayload {
    pub(crate) map: Rc<SharedRegion>,
    pub(crate) off: usize,
    pub(crate) len: usize,
}

impl LocalPayload {
    fn bytes(&self) -> &[u8] {
        // In bounds: `ShmMemory::borrow` checked it against this mapping.
        self.map
            .as_slice()
            .get(self.off..self.off + self.len)
            .unwrap_or(&[])
    }
}

/// A datagram waiting in [`LocalRoce`].
#[derive(Debug, Clone)]
struct LocalItem {
    from: SocketAddr,
    to: SocketAddr,
    /// Its index in its GSO run (the IPv4 Identification it is sealed for).
    index: u16,
    off: usize,
    len: usize,
    /// Whether it carries its ICRC (see `RoceDev::trust_local`).
    sealed: bool,
    /// Its sender said it goes in-process (`Transmit::in_process`), which the receiving
    /// engine is told ([`RxMeta::in_process`]).
    in_process: bool,
    /// The payload, when it was left where it lies (the bytes are then the headers and
    /// room for the ICRC, and it is unsealed).
    payload: Option<LocalPayload>,
    taken: bool,
}

/// Bytes of waiting datagrams past which the arena is compacted even though some still wait.
const LOCAL_COMPACT_BYTES: usize = 8 << 20;

impl LocalRoce {
    /// The addresses of this process's RoCE devices; what waited for an address that is gone
    /// is lost, as datagrams to a vanished host.
    pub fn set_ends<I: Iterator<Item = SocketAddr> + Clone>(&mut self, ends: I) {
        if ends.clone().eq(self.ends.iter().copied()) {
            return;
        }
        self.ends = ends.collect();
        for it in self.items.iter_mut().filter(|i| !i.taken) {
            if !self.ends.contains(&it.to) {
                it.taken = true;
                self.pending -= 1;
            }
        }
        self.tidy();
    }

    /// The addresses of this process's RoCE devices.
    pub fn ends(&self) -> &[SocketAddr] {
        &self.ends
    }

    /// Whether `to` is a device of this process.
    pub fn is_local(&self, to: &SocketAddr) -> bool {
        self.ends.contains(to)
    }

    /// Room for the next datagram, `n` bytes after the waiting ones: build it here, then
    /// [`LocalRoce::commit_parts`] it (or leave it: the room is reused).
    pub fn space(&mut self, n: usize) -> &mut [u8] {
        if self.data.len() < self.used + n {
            self.data.resize(self.used + n, 0);
        }
        &mut self.data[self.used..self.used + n]
    }

    /// Queues the `len` bytes built in [`LocalRoce::space`] for the device at `to`; with a
    /// `payload`, they are its headers (and room for the ICRC) and the payload stays where it
    /// lies: the receiving device copies it from there (one copy in all).
    #[allow(clippy::too_many_arguments)]
    pub fn commit_parts(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        index: u16,
        len: usize,
        sealed: bool,
        in_process: bool,
        payload: Option<LocalPayload>,
    ) {
        if !self.is_local(&to) || self.data.len() < self.used + len {
            return;
        }
        self.items.push(LocalItem {
            from,
            to,
            index,
            off: self.used,
            len,
            sealed,
            in_process,
            payload,
            taken: false,
        });
        self.used += len;
        self.pending += 1;
    }

    /// Queues a copy of `bytes` for the device at `to`; `sealed`: it carries its ICRC.
    pub fn deliver(
        &mut self,
        from: SocketAddr,
        to: SocketAddr,
        index: u16,
        bytes: &[u8],
        sealed: bool,
        in_process: bool,
    ) {
        if self.is_local(&to) {
            self.space(bytes.len()).copy_from_slice(bytes);
            self.commit_parts(from, to, index, bytes.len(), sealed, in_process, None);
        }
    }

    /// Hands what waits for the device at `at` to `take` (sender, index, bytes, sealed,
    /// in-process, and the payload when it was left where it lies), in order.
    pub fn drain(
        &mut self,
        at: SocketAddr,
        mut take: impl FnMut(SocketAddr, u16, &[u8], bool, bool, Option<&[u8]>),
    ) {
        if self.pending == 0 {
            return;
        }
        let mut n = 0;
        for it in self.items.iter_mut().filter(|i| !i.taken && i.to == at) {
            take(
                it.from,
                it.index,
                &self.data[it.off..it.off + it.len],
                it.sealed,
                it.in_process,
                it.payload.as_ref().map(LocalPayload::bytes),
            );
            it.taken = true;
            // The mapping is released now, not when the arena is next tidied.
            it.payload = None;
            n += 1;
        }
        self.pending -= n;
        self.tidy();
    }

    /// Frees the room of taken datagrams: all of it once nothing waits (the usual case, every
    /// turn), else by moving the waiting ones to the front once they hold too much.
    fn tidy(&mut self) {
        if self.pending == 0 {
            self.items.clear();
            self.used = 0;
        } else if self.used > LOCAL_COMPACT_BYTES {
            let mut to = 0;
            self.items.retain(|i| !i.taken);
            for it in self.items.iter_mut() {
                self.data.copy_within(it.off..it.off + it.len, to);
                it.off = to;
                to += it.len;
            }
            self.used = to;
        }
    }
}

impl Switchboard {
    /// Makes `addr` (a cable end of this process, belonging to `owner`) reachable in-process.
    pub fn register(&mut self, addr: SocketAddr, owner: Owner) {
        self.queues
            .entry(addr)
            .or_insert((owner, Default::default()));
    }

    /// Sends `frame` on `cable`: in-process when the peer end is here, else over UDP.
    pub fn send(&mut self, cable: &mut Cable, frame: &[u8]) -> io::Result<()> {
        match self.queues.get_mut(&cable.peer_addr()) {
            Some((owner, q)) if cable.state() == softib_net::cable::PhysState::LinkUp => {
                q.push_back(frame.to_vec());
                self.pending += 1;
                self.waiting.insert(*owner);
                Ok(())
            }
            // Not up: the cable counts and drops it, as it would any frame.
            _ => cable.send(frame),
        }
    }

    /// Whether the cable end at `addr` is this process's (frames to it go in-process; its
    /// socket carries only the cable's beacons).
    pub fn has_end(&self, addr: &SocketAddr) -> bool {
        self.queues.contains_key(addr)
    }

    /// The frames waiting for the cable end at `local`.
    pub fn take(&mut self, local: SocketAddr) -> std::collections::VecDeque<Vec<u8>> {
        if self.pending == 0 {
            return Default::default();
        }
        match self.queues.get_mut(&local) {
            Some((_, q)) if !q.is_empty() => {
                self.pending -= q.len();
                std::mem::take(q)
            }
            _ => std::collections::VecDeque::new(),
        }
    }

    /// The nodes frames were queued for since the last call (some may have taken them
    /// already), in order.
    pub fn take_waiting(&mut self) -> Vec<Owner> {
        let w = std::mem::take(&mut self.waiting);
        if self.pending == 0 {
            return Vec::new();
        }
        w.into_iter().collect()
    }

    /// Whether frames are waiting anywhere.
    pub fn is_busy(&self) -> bool {
        self.pending > 0 || self.roce.pending > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_handed_over_as_it_lies_reaches_the_receiver_and_is_released_there() {
        let (a, b): (SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
        );
        let mut l = LocalRoce::default();
        l.set_ends([a, b].into_iter());
        let mut map = SharedRegion::create("softib-test-payload", 4096).unwrap();
        map.as_mut_slice()[100..105].copy_from_slice(b"hello");
        let map = Rc::new(map);
        l.space(16)[..4].copy_from_slice(b"hdr!");
        let payload = LocalPayload {
            map: Rc::clone(&map),
            off: 100,
            len: 5,
        };
        l.commit_parts(a, b, 0, 4, false, true, Some(payload));
        assert_eq!(Rc::strong_count(&map), 2);
        let mut got = Vec::new();
        l.drain(b, |_, _, d, sealed, in_process, p| {
            got.push((d.to_vec(), sealed, in_process, p.map(<[u8]>::to_vec)))
        });
        assert_eq!(
            got,
            [(b"hdr!".to_vec(), false, true, Some(b"hello".to_vec()))]
        );
        // The mapping is let go as soon as the receiver has taken the payload.
        assert_eq!(Rc::strong_count(&map), 1);
    }

    #[test]
    fn local_datagrams_wait_for_their_device_in_order_and_their_room_is_reused() {
        let (a, b, c): (SocketAddr, SocketAddr, SocketAddr) = (
            "127.0.0.2:4791".parse().unwrap(),
            "127.0.0.3:4791".parse().unwrap(),
            "127.0.0.9:4791".parse().unwrap(),
        );
        let mut l = LocalRoce::default();
        l.set_ends([a, b].into_iter());
        assert!(l.is_local(&a) && !l.is_local(&c));
        // Built in place and committed, or copied in; one for an unknown address is dropped.
        l.space(64)[..3].copy_from_slice(b"one");
        l.commit_parts(a, b, 0, 3, false, false, None);
        l.deliver(b, a, 1, b"two", true, false);
        l.deliver(a, b, 2, b"three", true, false);
        l.deliver(a, c, 0, b"lost", true, false);
        assert_eq!(l.pending, 3);
        let mut got = Vec::new();
        l.drain(b, |from, i, d, sealed, _, _| {
            got.push((from, i, d.to_vec(), sealed))
        });
        assert_eq!(
            got,
            [
                (a, 0, b"one".to_vec(), false),
                (a, 2, b"three".to_vec(), true)
            ]
        );
        assert_eq!((l.pending, l.used), (1, 11));
        // Once nothing waits, all the room is free again.
        l.drain(a, |_, _, d, _, _, _| assert_eq!(d, b"two"));
        assert_eq!((l.pending, l.used, l.items.len()), (0, 0, 0));
        // A device that goes away loses what waited for it.
        l.deliver(a, b, 0, b"x", true, false);
        l.set_ends([a].into_iter());
        assert_eq!((l.pending, l.used), (0, 0));
        // Past the compaction size, waiting datagrams move to the front.
        l.set_ends([a, b].into_iter());
        let big = vec![7u8; LOCAL_COMPACT_BYTES / 2 + 1];
        l.deliver(a, b, 0, &big, true, false);
        l.deliver(a, b, 0, &big, true, false);
        l.deliver(b, a, 0, b"keep", true, false);
        l.drain(b, |_, _, _, _, _, _| {});
        assert_eq!((l.pending, l.used), (1, 4));
        l.drain(a, |_, _, d, _, _, _| assert_eq!(d, b"keep"));
    }
}
