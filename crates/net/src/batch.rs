//! Batched UDP: many datagrams per system call each way.
//!
//! The kernel's UDP path costs a few microseconds per call whatever the datagram's size, so a
//! device that sends and receives one datagram per call spends most of its time there. Here:
//!
//! * **Send**: [`TxQueue`] collects a turn's datagrams and [`TxQueue::flush`] hands them to the
//!   kernel with one `sendmmsg(2)` per socket. Runs of equal-sized datagrams to one destination
//!   (the packets of one message) go as a single *UDP GSO* send (`UDP_SEGMENT`, Linux 4.18): one
//!   trip through the stack for up to [`GSO_MAX_SEGMENTS`] datagrams, cut apart only where the
//!   path needs it (never on loopback or a veth whose peer socket takes GRO).
//! * **Receive**: [`UdpLink::recv_batch`] takes up to [`RX_SLOTS`] datagrams with one
//!   `recvmmsg(2)`; with *UDP GRO* on (`UDP_GRO`, Linux 5.0), a slot may hold a run of segments
//!   coalesced by the kernel, which [`RxBatch::datagrams`] cuts apart again.
//!
//! Both fall back cleanly: a kernel without `UDP_SEGMENT` or `UDP_GRO` (or
//! `SOFTIB_UDP_GSO=0` / `SOFTIB_UDP_GRO=0` in the environment) gets one datagram per message,
//! still many messages per call.
//!
//! **The IPv4 Identification of segments.** The kernel gives the datagrams of one GSO send the
//! Identifications 0, 1, 2, ... (an unconnected socket with DF starts at 0 and segmentation
//! counts up, checked on this machine's kernel with a capture). A protocol whose checksum covers
//! the Identification — RoCEv2's ICRC does — must know it when it seals a datagram:
//! [`TxQueue::push`] returns it. On receive, [`RxBatch::datagrams`] gives each segment's index
//! within its coalesced run, which is the Identification it had when the run was one GSO send.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::AsRawFd;

use crate::UdpLink;

/// The most datagrams in one GSO send (the kernel's `UDP_MAX_SEGMENTS` is 64 on older kernels).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// The most bytes in one GSO send: an IPv4 datagram's 65,535 minus its IP and UDP headers,
/// with room to spare.
pub const GSO_MAX_BYTES: usize = 65_000;
/// Datagrams (or coalesced runs) taken per `recvmmsg`: many, so that a flood of small
/// datagrams costs few system calls.
pub const RX_SLOTS: usize = 64;
/// Bytes per receive slot: a whole coalesced run, or the largest datagram.
const RX_SLOT_BYTES: usize = 65_536;
/// Messages per `sendmmsg` call, and the iovecs all of them may use.
const TX_MSGS_PER_CALL: usize = 64;
const TX_IOVS_PER_CALL: usize = 1024;

/// `UDP_SEGMENT` and `UDP_GRO` from `linux/udp.h` (level `SOL_UDP`); the libc crate does not
/// name them.
pub(crate) const UDP_SEGMENT: libc::c_int = 103;
pub(crate) const UDP_GRO: libc::c_int = 104;

/// Whether the environment turns a batching feature off (`SOFTIB_UDP_GSO=0`, ...).
pub(crate) fn env_disabled(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "0" || v.eq_ignore_ascii_case("off"))
}

/// Where datagrams for this process's own sockets go instead of the kernel
/// ([`TxQueue::flush_or_deliver`]).
pub trait Loopback<K> {
    /// Whether `to` is a socket of this process.
    fn is_local(&self, to: &SocketAddr) -> bool;
    /// Takes a datagram for `to` from socket `key`: the `index`th of its run.
    fn deliver(&mut self, key: K, to: SocketAddr, index: u16, bytes: &[u8]);
}

/// No destination is local.
struct NoLoopback;

impl<K> Loopback<K> for NoLoopback {
    fn is_local(&self, _: &SocketAddr) -> bool {
        false
    }
    fn deliver(&mut self, _: K, _: SocketAddr, _: u16, _: &[u8]) {}
}

/// One datagram waiting in a [`TxQueue`]: bytes `off..off + len` of its data.
#[derive(Debug, Clone, Copy)]
struct Segment {
    off: usize,
    len: usize,
    group: usize,
}

/// Datagrams for one socket and destination that leave in one send: a GSO run when there are
/// several (all `seg` bytes long but the last, which may be shorter).
#[derive(Debug)]
struct Group<K> {
    key: K,
    to: SocketAddr,
    seg: usize,
    bytes: usize,
    /// Where its segments' indices start in `TxQueue::members` (set by a flush).
    first: usize,
    count: usize,
    /// Closed groups take no more datagrams.
    closed: bool,
}

/// A fast hash for the queue's small per-turn map (std's SipHash was 7% of the daemon with
/// 256 QPs), keyed per queue with a random seed so that destinations a client picks cannot
/// be made to collide on purpose.
#[derive(Debug, Clone)]
struct FastState(u64);

impl FastState {
    fn new() -> FastState {
        FastState(std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64))
    }
}

impl BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

/// The FxHash step (rotate, xor, multiply) over 8-byte words.
struct FastHasher(u64);

impl FastHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.mix(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.mix(u64::from_le_bytes(w) ^ (rest.len() as u64) << 56);
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.mix(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.mix(u64::from(v));
    }
    fn write_u32(&mut self, v: u32) {
        self.mix(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.mix(v);
    }
    fn write_usize(&mut self, v: usize) {
        self.mix(v as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// What a flush did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TxFlush {
    /// Datagrams the kernel took.
    pub sent: u64,
    /// Datagrams lost: a full socket buffer, an unreachable destination, a refused GSO send.
    pub dropped: u64,
    /// System calls made.
    pub calls: u64,
}

/// Datagrams collected for sending together, for sockets named by keys `K`.
///
/// The storage is reused from flush to flush: the steady state allocates nothing.
#[derive(Debug)]
pub struct TxQueue<K> {
    /// The datagrams' bytes: the first `used` hold them; beyond is room ([`TxQueue::space`]).
    data: Vec<u8>,
    used: usize,
    segments: Vec<Segment>,
    /// Segment indices grouped by group, in order (built by a flush: the groups of different
    /// destinations interleave in `segments`).
    members: Vec<usize>,
    groups: Vec<Group<K>>,
    /// The open group of each (socket, destination).
    open: HashMap<(K, SocketAddr), usize, FastState>,
    /// Group order for a flush: by socket, each socket's groups in the order they were made.
    order: Vec<usize>,
}

impl<K> Default for TxQueue<K> {
    fn default() -> Self {
        TxQueue::with_hash_seed(FastState::new().0)
    }
}

impl<K> TxQueue<K> {
    /// An empty queue whose hash is keyed by `seed` rather than by a random key, for an
    /// embedder whose runs must not touch the OS's randomness (the simulator). Only lookups use
    /// the hash: which datagrams form a run, and the order a flush hands them on, never depend
    /// on it.
    pub fn with_hash_seed(seed: u64) -> TxQueue<K> {
        TxQueue {
            data: Vec::new(),
            used: 0,
            segments: Vec::new(),
            members: Vec::new(),
            groups: Vec::new(),
            open: HashMap::with_hasher(FastState(seed)),
            order: Vec::new(),
        }
    }
}

impl<K: Copy + Eq + Hash + Ord> TxQueue<K> {
    /// An empty queue.
    pub fn new() -> TxQueue<K> {
        TxQueue::default()
    }

    /// Datagrams waiting.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.used
    }

    /// Room for the next datagram, `n` bytes after the queued ones: build it here, then
    /// [`TxQueue::commit`] it (or leave it: the room is reused).
    pub fn space(&mut self, n: usize) -> &mut [u8] {
        if self.data.len() < self.used + n {
            self.data.resize(self.used + n, 0);
        }
        &mut self.data[self.used..self.used + n]
    }

    /// Queues `frame` to leave socket `key` for `to`, in a GSO run when `gso` (the socket's
    /// [`UdpLink::gso`]). Returns the datagram's index within its run — the IPv4 Identification
    /// the kernel will give it — and the queued copy, for a caller whose checksum covers that
    /// Identification to finish.
    pub fn push(&mut self, key: K, to: SocketAddr, frame: &[u8], gso: bool) -> (u16, &mut [u8]) {
        self.space(frame.len()).copy_from_slice(frame);
        self.commit(key, to, frame.len(), gso)
    }

    /// Queues the `len` bytes built in [`TxQueue::space`], as [`TxQueue::push`] queues a copy.
    pub fn commit(&mut self, key: K, to: SocketAddr, len: usize, gso: bool) -> (u16, &mut [u8]) {
        if self.data.len() < self.used + len {
            self.data.resize(self.used + len, 0);
        }
        let off = self.used;
        self.used += len;
        let joined = match self.open.get(&(key, to)) {
            Some(&g) if gso => {
                let group = &mut self.groups[g];
                if len <= group.seg
                    && group.count < GSO_MAX_SEGMENTS
                    && group.bytes + len <= GSO_MAX_BYTES
                {
                    group.count += 1;
                    group.bytes += len;
                    // A shorter datagram can only end a run.
                    if len < group.seg
                        || group.count == GSO_MAX_SEGMENTS
                        || group.bytes + group.seg > GSO_MAX_BYTES
                    {
                        group.closed = true;
                    }
                    Some((g, group.count - 1, group.closed))
                } else {
                    group.closed = true;
                    None
                }
            }
            _ => None,
        };
        let (group, index) = match joined {
            Some((g, index, closed)) => {
                if closed {
                    self.open.remove(&(key, to));
                }
                (g, index)
            }
            None => {
                let g = self.groups.len();
                self.groups.push(Group {
                    key,
                    to,
                    seg: len,
                    bytes: len,
                    first: 0,
                    count: 1,
                    closed: !gso,
                });
                if gso {
                    self.open.insert((key, to), g);
                } else {
                    self.open.remove(&(key, to));
                }
                (g, 0)
            }
        };
        self.segments.push(Segment { off, len, group });
        // The index is below GSO_MAX_SEGMENTS.
        (index as u16, &mut self.data[off..off + len])
    }

    /// Sends everything queued: one `sendmmsg` per socket (more when a socket has more than
    /// fits one call). `link_of` finds the socket of a key; datagrams for a key it does not
    /// know are dropped. A send the kernel refuses for GSO turns GSO off on that socket; its
    /// datagrams are lost, as on a wire, and the next sends go one by one.
    pub fn flush<'a>(&mut self, link_of: impl FnMut(K) -> Option<&'a UdpLink>) -> TxFlush {
        self.flush_or_deliver(link_of, &mut NoLoopback)
    }

    /// [`TxQueue::flush`], except that datagrams for destinations in this process (as
    /// `loopback` says) go to it instead of the kernel.
    pub fn flush_or_deliver<'a>(
        &mut self,
        mut link_of: impl FnMut(K) -> Option<&'a UdpLink>,
        loopback: &mut impl Loopback<K>,
    ) -> TxFlush {
        let mut out = TxFlush::default();
        if self.groups.is_empty() {
            self.clear();
            return out;
        }
        // Each group's segments together, in order: a counting sort by group.
        let mut first = 0;
        for g in self.groups.iter_mut() {
            g.first = first;
            first += g.count;
            g.count = 0;
        }
        self.members.clear();
        self.members.resize(self.segments.len(), 0);
        for (i, s) in self.segments.iter().enumerate() {
            let g = &mut self.groups[s.group];
            self.members[g.first + g.count] = i;
            g.count += 1;
        }
        self.order.clear();
        for (g, group) in self.groups.iter().enumerate() {
            if loopback.is_local(&group.to) {
                for k in 0..group.count {
                    let s = self.segments[self.members[group.first + k]];
                    let bytes = &self.data[s.off..s.off + s.len];
                    loopback.deliver(group.key, group.to, k as u16, bytes);
                    out.sent += 1;
                }
            } else {
                self.order.push(g);
            }
        }
        let groups = &self.groups;
        self.order.sort_by_key(|&g| groups[g].key);
        let mut i = 0;
        while i < self.order.len() {
            let key = self.groups[self.order[i]].key;
            let mut j = i;
            while j < self.order.len() && self.groups[self.order[j]].key == key {
                j += 1;
            }
            match link_of(key) {
                Some(link) => self.send_groups(link, i, j, &mut out),
                None => {
                    for &g in &self.order[i..j] {
                        out.dropped += self.groups[g].count as u64;
                    }
                }
            }
            i = j;
        }
        self.clear();
        out
    }

    fn clear(&mut self) {
        self.used = 0;
        self.segments.clear();
        self.members.clear();
        self.groups.clear();
        self.open.clear();
        self.order.clear();
    }

    /// Sends groups `order[from..to]`, all for `link`.
    fn send_groups(&self, link: &UdpLink, from: usize, to: usize, out: &mut TxFlush) {
        let mut next = from;
        while next < to {
            // SAFETY: all-zero bytes are valid values of these plain C structs (integers and
            // null pointers).
            #[allow(unsafe_code)]
            let (mut hdrs, mut iovs, mut names, mut cmsgs) = unsafe {
                (
                    zeroed::<[libc::mmsghdr; TX_MSGS_PER_CALL]>(),
                    zeroed::<[libc::iovec; TX_IOVS_PER_CALL]>(),
                    zeroed::<[libc::sockaddr_storage; TX_MSGS_PER_CALL]>(),
                    zeroed::<[GsoCmsg; TX_MSGS_PER_CALL]>(),
                )
            };
            // Fill the call's messages: whole groups while they fit.
            let mut n = 0;
            let mut niov = 0;
            let mut counts = [0usize; TX_MSGS_PER_CALL];
            while next < to && n < TX_MSGS_PER_CALL {
                let g = &self.groups[self.order[next]];
                if niov + g.count > TX_IOVS_PER_CALL {
                    break;
                }
                let first_iov = niov;
                for k in 0..g.count {
                    let s = self.segments[self.members[g.first + k]];
                    iovs[niov] = libc::iovec {
                        iov_base: self.data[s.off..].as_ptr() as *mut libc::c_void,
                        iov_len: s.len,
                    };
                    niov += 1;
                }
                let namelen = write_sockaddr(&g.to, &mut names[n]);
                let h = &mut hdrs[n].msg_hdr;
                h.msg_name = (&mut names[n] as *mut libc::sockaddr_storage).cast();
                h.msg_namelen = namelen;
                h.msg_iov = iovs[first_iov..].as_mut_ptr();
                h.msg_iovlen = g.count as _;
                if g.count > 1 {
                    cmsgs[n] = GsoCmsg::new(g.seg as u16);
                    h.msg_control = (&mut cmsgs[n] as *mut GsoCmsg).cast();
                    h.msg_controllen = size_of::<GsoCmsg>() as _;
                }
                counts[n] = g.count;
                n += 1;
                next += 1;
            }
            // Send them; a message the kernel refuses is dropped and the rest go on.
            let mut done = 0;
            while done < n {
                out.calls += 1;
                // SAFETY: `hdrs[done..n]` are initialised message headers whose name, iovec
                // and control pointers point into `names`, `iovs`, `cmsgs` and `self.data`,
                // all alive and unmoved for this call; the count passed is that of the slice.
                #[allow(unsafe_code)]
                let rc = unsafe {
                    libc::sendmmsg(
                        link.socket().as_raw_fd(),
                        hdrs[done..n].as_mut_ptr(),
                        (n - done) as libc::c_uint,
                        0,
                    )
                };
                if rc > 0 {
                    let sent = rc as usize;
                    out.sent += counts[done..done + sent].iter().sum::<usize>() as u64;
                    done += sent;
                    continue;
                }
                let err = io::Error::last_os_error();
                if err.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if err.kind() == io::ErrorKind::WouldBlock {
                    // The socket buffer is full: what has not gone is lost, as on a wire.
                    out.dropped += counts[done..n].iter().sum::<usize>() as u64;
                    break;
                }
                if counts[done] > 1
                    && matches!(
                        err.raw_os_error(),
                        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
                    )
                {
                    // The route cannot segment (no checksum offload, an old kernel).
                    link.disable_gso();
                }
                out.dropped += counts[done] as u64;
                done += 1;
            }
        }
    }
}

/// A control message carrying `UDP_SEGMENT`'s segment size.
#[repr(C)]
#[derive(Clone, Copy)]
struct GsoCmsg {
    hdr: libc::cmsghdr,
    size: u16,
    _pad: [u8; 6],
}

impl GsoCmsg {
    fn new(size: u16) -> GsoCmsg {
        // SAFETY: an all-zero `cmsghdr` is a valid value (integers only).
        #[allow(unsafe_code)]
        let mut hdr: libc::cmsghdr = unsafe { zeroed() };
        // CMSG_LEN(2): the header, then the data right after it (the header is 8-aligned).
        hdr.cmsg_len = (size_of::<libc::cmsghdr>() + size_of::<u16>()) as _;
        hdr.cmsg_level = libc::SOL_UDP;
        hdr.cmsg_type = UDP_SEGMENT;
        GsoCmsg {
            hdr,
            size,
            _pad: [0; 6],
        }
    }
}

/// Writes `addr` as a C socket address; returns its length.
fn write_sockaddr(addr: &SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: `sockaddr_storage` is larger than and suitably aligned for
            // `sockaddr_in`, which is plain data.
            #[allow(unsafe_code)]
            let sin =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from_ne_bytes(a.ip().octets()),
            };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for `sockaddr_in6`.
            #[allow(unsafe_code)]
            let sin6 =
                unsafe { &mut *(out as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Reads a C socket address the kernel wrote.
fn read_sockaddr(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`; it is larger and
            // aligned for one.
            #[allow(unsafe_code)]
            let sin = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                sin.sin_addr.s_addr.to_ne_bytes().into(),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for `sockaddr_in6`.
            #[allow(unsafe_code)]
            let sin6 =
                unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                sin6.sin6_addr.s6_addr.into(),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// What one receive slot holds.
#[derive(Debug, Clone, Copy)]
struct RxSlot {
    len: usize,
    from: Option<SocketAddr>,
    /// The kernel's segment size when the slot holds a coalesced run (UDP GRO).
    seg: usize,
    truncated: bool,
    /// The socket's count of datagrams dropped for a full receive buffer (`SO_RXQ_OVFL`).
    overflows: Option<u32>,
}

/// Datagrams received together by [`UdpLink::recv_batch`].
#[derive(Debug)]
pub struct RxBatch {
    data: Vec<u8>,
    slots: [RxSlot; RX_SLOTS],
    filled: usize,
}

impl Default for RxBatch {
    fn default() -> Self {
        RxBatch::new()
    }
}

/// One datagram of an [`RxBatch`].
#[derive(Debug, Clone, Copy)]
pub struct RxDatagram<'a> {
    /// The sender.
    pub from: SocketAddr,
    /// Its index within a run the kernel coalesced (0 for a datagram received alone): the
    /// IPv4 Identification it had if the run was one GSO send.
    pub index: u16,
    /// The bytes.
    pub data: &'a [u8],
}

impl RxBatch {
    /// Room for [`RX_SLOTS`] datagrams or runs (4 MiB, of which the kernel touches only what
    /// datagrams fill).
    pub fn new() -> RxBatch {
        RxBatch {
            data: vec![0; RX_SLOTS * RX_SLOT_BYTES],
            slots: [RxSlot {
                len: 0,
                from: None,
                seg: 0,
                truncated: false,
                overflows: None,
            }; RX_SLOTS],
            filled: 0,
        }
    }

    /// Slots filled by the last receive.
    pub fn slots(&self) -> usize {
        self.filled
    }

    /// Datagrams of the last receive that were cut short (larger than a slot) or came from an
    /// address that is not IP: not delivered by [`RxBatch::datagrams`].
    pub fn malformed(&self) -> usize {
        self.slots[..self.filled]
            .iter()
            .filter(|s| s.truncated || s.from.is_none())
            .count()
    }

    /// How many datagrams the kernel has dropped on this socket so far because its receive
    /// buffer was full, as of the last receive (`SO_RXQ_OVFL`; `None` where not reported).
    pub fn overflows(&self) -> Option<u32> {
        self.slots[..self.filled]
            .iter()
            .filter_map(|s| s.overflows)
            .max()
    }

    /// The datagrams of the last receive, coalesced runs cut apart again.
    pub fn datagrams(&self) -> impl Iterator<Item = RxDatagram<'_>> + '_ {
        self.slots[..self.filled]
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.truncated)
            .filter_map(|(i, s)| Some((i, s, s.from?)))
            .flat_map(move |(i, s, from)| {
                let bytes = &self.data[i * RX_SLOT_BYTES..i * RX_SLOT_BYTES + s.len];
                let seg = if s.seg == 0 {
                    bytes.len().max(1)
                } else {
                    s.seg
                };
                bytes
                    .chunks(seg)
                    .enumerate()
                    .map(move |(k, data)| RxDatagram {
                        from,
                        index: k as u16,
                        data,
                    })
            })
    }
}

impl UdpLink {
    /// Receives what is waiting, up to [`RX_SLOTS`] datagrams or coalesced runs, with one
    /// system call; returns the slots filled (0: nothing was waiting).
    pub fn recv_batch(&self, batch: &mut RxBatch) -> io::Result<usize> {
        batch.filled = 0;
        // SAFETY: all-zero bytes are valid values of these plain C structs.
        #[allow(unsafe_code)]
        let (mut hdrs, mut iovs, mut names, mut ctrl) = unsafe {
            (
                zeroed::<[libc::mmsghdr; RX_SLOTS]>(),
                zeroed::<[libc::iovec; RX_SLOTS]>(),
                zeroed::<[libc::sockaddr_storage; RX_SLOTS]>(),
                zeroed::<[[u64; 8]; RX_SLOTS]>(),
            )
        };
        for (i, chunk) in batch.data.chunks_mut(RX_SLOT_BYTES).enumerate() {
            iovs[i] = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: chunk.len(),
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = ctrl[i].as_mut_ptr().cast();
            h.msg_controllen = size_of::<[u64; 8]>() as _;
        }
        let got = loop {
            // SAFETY: every header points at its own name, one iovec into `batch.data` (a
            // slot of RX_SLOT_BYTES), and its control buffer, all alive for the call; the
            // count is the array's length; a null timeout with MSG_DONTWAIT never blocks.
            #[allow(unsafe_code)]
            let rc = unsafe {
                libc::recvmmsg(
                    self.socket().as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    RX_SLOTS as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                io::ErrorKind::Interrupted => continue,
                // An ICMP port-unreachable from an earlier send surfaces here; not our input.
                io::ErrorKind::ConnectionRefused => continue,
                _ => return Err(err),
            }
        };
        for i in 0..got {
            let h = &hdrs[i].msg_hdr;
            // `msg_controllen` is a `size_t` on glibc, a `socklen_t` elsewhere.
            #[allow(clippy::unnecessary_cast)]
            let controllen = (h.msg_controllen as usize).min(size_of::<[u64; 8]>());
            let cmsgs = control_messages(&ctrl[i], controllen);
            batch.slots[i] = RxSlot {
                len: (hdrs[i].msg_len as usize).min(RX_SLOT_BYTES),
                from: read_sockaddr(&names[i]),
                seg: cmsgs.gro_segment,
                truncated: h.msg_flags & libc::MSG_TRUNC != 0,
                overflows: cmsgs.overflows,
            };
        }
        batch.filled = got;
        Ok(got)
    }
}

/// What the kernel said about a received datagram in its control messages.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ControlMessages {
    /// `UDP_GRO`: the segment size of a coalesced run (0: a single datagram).
    gro_segment: usize,
    /// `SO_RXQ_OVFL`: the socket's running count of receive-buffer drops.
    overflows: Option<u32>,
}

/// Parses a control buffer the kernel filled (`len` bytes).
fn control_messages(ctrl: &[u64; 8], len: usize) -> ControlMessages {
    let mut raw = [0u8; 64];
    for (k, w) in ctrl.iter().enumerate() {
        raw[k * 8..k * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    let raw = &raw[..len.min(64)];
    let mut out = ControlMessages::default();
    let hdr = size_of::<libc::cmsghdr>();
    let int = |at: usize| {
        raw.get(at..at + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let mut off = 0;
    while off + hdr <= raw.len() {
        let clen = usize::from_ne_bytes(raw[off..off + 8].try_into().unwrap_or([0; 8]));
        let level = i32::from_ne_bytes(raw[off + 8..off + 12].try_into().unwrap_or([0; 4]));
        let kind = i32::from_ne_bytes(raw[off + 12..off + 16].try_into().unwrap_or([0; 4]));
        if clen < hdr || clen > raw.len() - off {
            break;
        }
        if clen >= hdr + 4 {
            match (level, kind) {
                (libc::SOL_UDP, UDP_GRO) => {
                    out.gro_segment = int(off + hdr).map_or(0, |v| v as usize);
                }
                (libc::SOL_SOCKET, libc::SO_RXQ_OVFL) => out.overflows = int(off + hdr),
                _ => {}
            }
        }
        // The next header starts 8-aligned (CMSG_ALIGN).
        off += (clen + 7) & !7;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn frame(tag: u8, n: usize, len: usize) -> Vec<u8> {
        let mut f = vec![tag; len];
        f[..8].copy_from_slice(&(n as u64).to_be_bytes());
        f
    }

    #[test]
    fn runs_of_equal_datagrams_share_a_group_and_count_their_indices() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut q: TxQueue<u16> = TxQueue::new();
        // A first packet larger than the rest, middles, a shorter last, interleaved with
        // another destination.
        let idx: Vec<u16> = [
            (a, 120),
            (a, 100),
            (b, 100),
            (a, 100),
            (b, 100),
            (a, 100),
            (a, 60),
            (a, 100),
        ]
        .iter()
        .map(|&(to, len)| q.push(7, to, &vec![0; len], true).0)
        .collect();
        // [120, 100] (shorter ends the run), [b100, b100], [100, 100, 60], [100].
        assert_eq!(idx, [0, 1, 0, 0, 1, 1, 2, 0]);
        assert_eq!(q.groups.len(), 4);
        // Without GSO every datagram goes alone.
        let mut q: TxQueue<u16> = TxQueue::new();
        for _ in 0..3 {
            assert_eq!(q.push(7, a, &[0; 100], false).0, 0);
        }
        assert_eq!(q.groups.len(), 3);
    }

    #[test]
    fn a_datagram_built_in_place_is_queued_as_a_pushed_copy_is() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let (mut p, mut c): (TxQueue<u16>, TxQueue<u16>) = (TxQueue::new(), TxQueue::new());
        for (n, len) in [100usize, 100, 60, 100].into_iter().enumerate() {
            let frame = vec![n as u8; len];
            let (ip, bp) = p.push(1, a, &frame, true);
            let (ip, bp) = (ip, bp.to_vec());
            c.space(4096)[..len].copy_from_slice(&frame);
            let (ic, bc) = c.commit(1, a, len, true);
            assert_eq!((ip, bp.as_slice()), (ic, &*bc));
        }
        assert_eq!((p.len(), p.bytes()), (c.len(), c.bytes()));
        assert_eq!(p.groups.len(), c.groups.len());
    }

    #[test]
    fn a_run_never_exceeds_the_kernel_limits() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut q: TxQueue<u16> = TxQueue::new();
        let idx: Vec<u16> = (0..100).map(|_| q.push(1, a, &[0; 4128], true).0).collect();
        // 15 × 4128 = 61,920 fits 65,000; a 16th would not.
        assert_eq!(idx[14], 14);
        assert_eq!(idx[15], 0);
        let mut q: TxQueue<u16> = TxQueue::new();
        let idx: Vec<u16> = (0..100).map(|_| q.push(1, a, &[0; 64], true).0).collect();
        assert_eq!(idx[63], 63);
        assert_eq!(idx[64], 0);
    }

    /// Sends `frames` (destination index, length) through a queue and receives them all.
    fn roundtrip(gso: bool, gro: bool, frames: &[(usize, usize)]) -> [Vec<(u16, Vec<u8>)>; 2] {
        let tx = UdpLink::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        if !gso {
            tx.disable_gso();
        }
        let rx: Vec<UdpLink> = (0..2)
            .map(|_| UdpLink::bind_with("127.0.0.1:0".parse().unwrap(), gro).unwrap())
            .collect();
        let mut q: TxQueue<u8> = TxQueue::new();
        let mut pushed = [Vec::new(), Vec::new()];
        for (n, &(d, len)) in frames.iter().enumerate() {
            let f = frame(d as u8 + 1, n, len);
            let (index, stored) = q.push(0, rx[d].local_addr(), &f, tx.gso());
            assert_eq!(stored, &f[..]);
            pushed[d].push((index, f));
        }
        let out = q.flush(|_| Some(&tx));
        assert_eq!(out.sent, frames.len() as u64, "{out:?}");
        assert_eq!(out.dropped, 0);
        assert!(q.is_empty());
        let mut got = [Vec::new(), Vec::new()];
        let mut batch = RxBatch::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        for d in 0..2 {
            while got[d].len() < pushed[d].len() {
                assert!(Instant::now() < deadline, "timed out receiving");
                if rx[d].recv_batch(&mut batch).unwrap() == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                assert_eq!(batch.malformed(), 0);
                for dg in batch.datagrams() {
                    assert_eq!(dg.from, tx.local_addr());
                    got[d].push((dg.index, dg.data.to_vec()));
                }
            }
        }
        // Every datagram arrives whole and in order; a coalesced run's indices are the ones
        // the sender was given.
        for d in 0..2 {
            let bytes: Vec<&Vec<u8>> = got[d].iter().map(|(_, f)| f).collect();
            let want: Vec<&Vec<u8>> = pushed[d].iter().map(|(_, f)| f).collect();
            assert_eq!(bytes, want);
        }
        got
    }

    fn mixed() -> Vec<(usize, usize)> {
        let mut f = Vec::new();
        for m in 0..6 {
            // A message: a longer first packet, middles, a short last, to alternating
            // destinations.
            let d = m % 2;
            f.push((d, 1060));
            f.extend(std::iter::repeat_n((d, 1044), 20));
            f.push((d, 300));
            f.push((1 - d, 64));
        }
        f
    }

    #[test]
    fn gso_runs_arrive_whole_through_gro_with_their_indices() {
        let got = roundtrip(true, true, &mixed());
        // With GRO the kernel hands runs over whole: the indices the receiver sees are the
        // sender's (this loopback never segments).
        let sent = {
            let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
            let mut q: TxQueue<u8> = TxQueue::new();
            let mut idx = [Vec::new(), Vec::new()];
            for &(d, len) in &mixed() {
                idx[d].push(q.push(0, [a, b][d], &vec![0; len], true).0);
            }
            idx
        };
        for d in 0..2 {
            let seen: Vec<u16> = got[d].iter().map(|(i, _)| *i).collect();
            assert_eq!(seen, sent[d]);
        }
    }

    #[test]
    fn gso_runs_reach_a_socket_without_gro_as_single_datagrams() {
        let got = roundtrip(true, false, &mixed());
        assert!(got.iter().flatten().all(|(i, _)| *i == 0));
    }

    #[test]
    fn without_gso_everything_still_arrives_in_batches() {
        roundtrip(false, true, &mixed());
        roundtrip(false, false, &mixed());
    }

    #[test]
    fn receive_buffer_overflows_are_counted() {
        let rx = UdpLink::bind_with("127.0.0.1:0".parse().unwrap(), true).unwrap();
        // A small buffer (the kernel doubles it and keeps a floor) that a burst overflows.
        rustix::net::sockopt::set_socket_recv_buffer_size(rx.socket(), 4096).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for _ in 0..2000 {
            let _ = tx.send_to(&[7u8; 1000], rx.local_addr());
        }
        let mut batch = RxBatch::new();
        let mut got = 0;
        let mut overflows = None;
        // The count rides on the datagrams queued after a drop: one more, once there is room.
        for round in 0..2 {
            if round == 1 {
                tx.send_to(&[8u8; 1000], rx.local_addr()).unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
            while rx.recv_batch(&mut batch).unwrap() > 0 {
                got += batch.datagrams().count();
                overflows = batch.overflows().or(overflows);
            }
        }
        let dropped = overflows.expect("SO_RXQ_OVFL reported") as usize;
        assert!(
            dropped > 0 && got + dropped == 2001,
            "{got} received, {dropped} dropped"
        );
    }

    #[test]
    fn any_control_buffer_parses_without_panicking() {
        // What the kernel writes is trusted, but the parser must not be the thing that breaks:
        // arbitrary bytes and lengths, including lengths past the buffer.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut ctrl = [0u64; 8];
            for w in ctrl.iter_mut() {
                *w = next();
            }
            // Sometimes a well-formed header in front, so the walk goes further.
            if next() % 2 == 0 {
                ctrl[0] = 20 + next() % 40;
                ctrl[1] = (next() % 3) | (next() % 200) << 32;
            }
            let len = (next() % 80) as usize;
            let _ = control_messages(&ctrl, len);
        }
        // A real one: UDP_GRO with a segment size of 1400, then SO_RXQ_OVFL with 7.
        let mut raw = [0u8; 64];
        raw[0..8].copy_from_slice(&20usize.to_ne_bytes());
        raw[8..12].copy_from_slice(&libc::SOL_UDP.to_ne_bytes());
        raw[12..16].copy_from_slice(&UDP_GRO.to_ne_bytes());
        raw[16..20].copy_from_slice(&1400i32.to_ne_bytes());
        raw[24..32].copy_from_slice(&20usize.to_ne_bytes());
        raw[32..36].copy_from_slice(&libc::SOL_SOCKET.to_ne_bytes());
        raw[36..40].copy_from_slice(&libc::SO_RXQ_OVFL.to_ne_bytes());
        raw[40..44].copy_from_slice(&7u32.to_ne_bytes());
        let mut ctrl = [0u64; 8];
        for (k, w) in ctrl.iter_mut().enumerate() {
            *w = u64::from_ne_bytes(raw[k * 8..k * 8 + 8].try_into().unwrap());
        }
        assert_eq!(
            control_messages(&ctrl, 48),
            ControlMessages {
                gro_segment: 1400,
                overflows: Some(7)
            }
        );
    }

    #[test]
    fn datagrams_for_an_unknown_socket_are_dropped_and_counted() {
        let mut q: TxQueue<u8> = TxQueue::new();
        q.push(3, "127.0.0.1:9".parse().unwrap(), &[1; 10], true);
        let out = q.flush(|_| None);
        assert_eq!((out.sent, out.dropped), (0, 1));
    }
}
