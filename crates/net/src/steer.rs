//! Steering RoCEv2 datagrams to the process that owns their destination QP.
//!
//! Every process that uses a RoCEv2 device binds the device's address and UDP port with
//! `SO_REUSEPORT`, so all of them form one reuseport group with the daemon's socket. A classic
//! BPF program attached to the group (`SO_ATTACH_REUSEPORT_CBPF`) runs on each datagram with
//! the UDP payload — the BTH — at offset 0, reads the 24-bit DestQP at bytes 5..8 and returns
//! the index of the socket that gets the datagram. The kernel delivers an index it does not
//! have to a socket chosen by hash, and a datagram too short for the load to index 0; the
//! daemon's socket is index 0, so anything not claimed reaches it.
//!
//! The kernel keeps a group's sockets in an array in the order they were bound; when one
//! closes, the last one moves into its place (`reuseport_detach_sock`). [`Members`] mirrors
//! that array so the daemon knows which index each owner holds; [`Program::compile`] turns a
//! table of QPN ranges into a program (a binary search over the ranges), and [`Program::run`]
//! executes a program the way the kernel does, for tests. A group is per user: a process of
//! another user cannot join it (EADDRINUSE).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::ops::RangeInclusive;

/// The byte offset of the 32-bit word whose low 24 bits are the BTH's DestQP (the byte before
/// DestQP is reserved).
const DEST_QP_WORD: u32 = 4;
/// The largest QPN (24 bits).
const QPN_MAX: u32 = 0x00FF_FFFF;
/// The kernel's limit on a classic BPF program (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h): class | size/op | mode/source.
/// `BPF_LD | BPF_W | BPF_ABS` (BPF_LD and BPF_W are 0).
const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`.
const ALU_AND_K: u16 = 0x04 | 0x50;
/// `BPF_JMP | BPF_JA`.
const JMP_JA: u16 = 0x05;
/// `BPF_JMP | BPF_JGE | BPF_K`.
const JMP_JGE_K: u16 = 0x05 | 0x30;
/// `BPF_RET | BPF_K`.
const RET_K: u16 = 0x06;

/// One classic BPF instruction, laid out as `struct sock_filter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    /// The opcode.
    pub code: u16,
    /// Jump offset when the condition holds.
    pub jt: u8,
    /// Jump offset when it does not.
    pub jf: u8,
    /// The operand.
    pub k: u32,
}

const _: () = assert!(std::mem::size_of::<Insn>() == 8);

/// A steering program: which socket index each destination QPN goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<Insn>,
}

/// Why a table could not become a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramError {
    /// Two ranges overlap, or one is empty or beyond 24 bits.
    BadRange(RangeInclusive<u32>),
    /// The program would exceed the kernel's [`MAX_INSNS`] instructions.
    TooLarge(usize),
}

impl std::fmt::Display for ProgramError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProgramError::BadRange(r) => write!(
                f,
                "QPN range {:#x}..={:#x} is empty, beyond 24 bits or overlaps another",
                r.start(),
                r.end()
            ),
            ProgramError::TooLarge(n) => write!(
                f,
                "a steering program for this table needs {n} instructions, more than the \
                 kernel's {MAX_INSNS}"
            ),
        }
    }
}

impl std::error::Error for ProgramError {}

impl Program {
    /// Compiles `ranges` (QPN ranges and the socket index each goes to) into a program that
    /// returns `default` for every QPN no range holds.
    pub fn compile(
        ranges: &[(RangeInclusive<u32>, u32)],
        default: u32,
    ) -> Result<Program, ProgramError> {
        // The mapping as a step function: (first QPN, index) pieces covering 0..=QPN_MAX.
        let mut sorted: Vec<_> = ranges.to_vec();
        sorted.sort_by_key(|(r, _)| *r.start());
        let mut pieces: Vec<(u32, u32)> = vec![(0, default)];
        let mut next_free = 0u32;
        for (r, index) in sorted {
            if r.is_empty() || *r.end() > QPN_MAX || *r.start() < next_free {
                return Err(ProgramError::BadRange(r));
            }
            push_piece(&mut pieces, *r.start(), index);
            if *r.end() < QPN_MAX {
                push_piece(&mut pieces, r.end() + 1, default);
            }
            next_free = r.end().saturating_add(1);
        }
        let mut insns = vec![
            Insn {
                code: LD_W_ABS,
                jt: 0,
                jf: 0,
                k: DEST_QP_WORD,
            },
            Insn {
                code: ALU_AND_K,
                jt: 0,
                jf: 0,
                k: QPN_MAX,
            },
        ];
        emit_search(&pieces, &mut insns);
        if insns.len() > MAX_INSNS {
            return Err(ProgramError::TooLarge(insns.len()));
        }
        Ok(Program { insns })
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.insns
    }

    /// Runs the program on a UDP payload as the kernel does: the socket index it returns (0
    /// when a load falls outside the payload).
    pub fn run(&self, payload: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        while let Some(i) = self.insns.get(pc) {
            pc += 1;
            match i.code {
                LD_W_ABS => {
                    let at = i.k as usize;
                    let Some(w) = payload.get(at..at + 4) else {
                        return 0;
                    };
                    a = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                }
                ALU_AND_K => a &= i.k,
                JMP_JA => pc += i.k as usize,
                JMP_JGE_K => pc += usize::from(if a >= i.k { i.jt } else { i.jf }),
                RET_K => return i.k,
                _ => return 0,
            }
        }
        0
    }

    /// Attaches the program to the reuseport group `socket` belongs to (replacing the one
    /// before); every member's datagrams are steered by it from then on.
    pub fn attach(&self, socket: &UdpSocket) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let prog = libc::sock_fprog {
            len: u16::try_from(self.insns.len())
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "program too long"))?,
            filter: self.insns.as_ptr().cast_mut().cast::<libc::sock_filter>(),
        };
        #[allow(unsafe_code)]
        // SAFETY: `Insn` has `struct sock_filter`'s layout (asserted size, repr(C), same field
        // order); `prog` points at `self.insns`, which outlives the call (the kernel copies
        // the program); the descriptor is an open socket owned by `socket`; the length passed
        // is exactly `sock_fprog`'s size.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_REUSEPORT_CBPF,
                (&prog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Appends a piece of the step function, merging it with the last when both go to one index.
fn push_piece(pieces: &mut Vec<(u32, u32)>, first: u32, index: u32) {
    match pieces.last_mut() {
        Some(last) if last.0 == first => last.1 = index,
        Some(last) if last.1 == index => {}
        _ => pieces.push((first, index)),
    }
    // A piece that now starts where its predecessor ends with the same index is one piece.
    if pieces.len() >= 2 && pieces[pieces.len() - 2].1 == pieces[pieces.len() - 1].1 {
        pieces.pop();
    }
}

/// Emits a binary search over `pieces` (sorted by first QPN, A holding the QPN): each inner
/// node tests `A >= first of the right half`; the left half follows it, the right half after.
fn emit_search(pieces: &[(u32, u32)], out: &mut Vec<Insn>) {
    if let [(_, index)] = pieces {
        out.push(Insn {
            code: RET_K,
            jt: 0,
            jf: 0,
            k: *index,
        });
        return;
    }
    let mid = pieces.len() / 2;
    let mut left = Vec::new();
    emit_search(&pieces[..mid], &mut left);
    let pivot = pieces[mid].0;
    match u8::try_from(left.len()) {
        Ok(jt) => out.push(Insn {
            code: JMP_JGE_K,
            jt,
            jf: 0,
            k: pivot,
        }),
        // Too far for an 8-bit offset: the test skips a long jump over the left half.
        Err(_) => {
            out.push(Insn {
                code: JMP_JGE_K,
                jt: 0,
                jf: 1,
                k: pivot,
            });
            out.push(Insn {
                code: JMP_JA,
                jt: 0,
                jf: 0,
                k: left.len() as u32,
            });
        }
    }
    out.extend(left);
    emit_search(&pieces[mid..], out);
}

/// The kernel's array of a reuseport group's sockets, mirrored: who holds which index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Members<T> {
    slots: Vec<T>,
}

impl<T> Default for Members<T> {
    fn default() -> Self {
        Members { slots: Vec::new() }
    }
}

impl<T: PartialEq> Members<T> {
    /// An empty group.
    pub fn new() -> Members<T> {
        Members::default()
    }

    /// `owner` bound a socket: it holds the next index.
    pub fn join(&mut self, owner: T) -> u32 {
        self.slots.push(owner);
        (self.slots.len() - 1) as u32
    }

    /// The socket at `index` closed: the last socket moves into its place, as in the kernel.
    /// Returns the owner that left and, if one moved, the owner now at `index`.
    pub fn leave(&mut self, index: u32) -> Option<(T, Option<&T>)> {
        let i = index as usize;
        if i >= self.slots.len() {
            return None;
        }
        let gone = self.slots.swap_remove(i);
        Some((gone, self.slots.get(i)))
    }

    /// The index `owner` holds.
    pub fn index_of(&self, owner: &T) -> Option<u32> {
        self.slots.iter().position(|o| o == owner).map(|i| i as u32)
    }

    /// How many sockets the group has.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the group is empty.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Owners by index.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.slots.iter().enumerate().map(|(i, o)| (i as u32, o))
    }
}

/// Binds a UDP socket at `local` with `SO_REUSEPORT`, non-blocking and close-on-exec: a member
/// of `local`'s reuseport group.
pub fn bind_reuseport(local: SocketAddr) -> io::Result<UdpSocket> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let family = match local {
        SocketAddr::V4(_) => AddressFamily::INET,
        SocketAddr::V6(_) => AddressFamily::INET6,
    };
    let fd = rustix::net::socket_with(
        family,
        SocketType::DGRAM,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::net::sockopt::set_socket_reuseport(&fd, true)?;
    rustix::net::bind(&fd, &local)?;
    Ok(UdpSocket::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTH-sized payload for DestQP `qpn`.
    fn bth(qpn: u32) -> [u8; 12] {
        let mut b = [0u8; 12];
        b[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b
    }

    #[test]
    fn every_qpn_goes_to_its_range_or_the_default() {
        let table = [(0x100..=0x1ff, 1), (0x200..=0x23f, 2), (0x400..=0x400, 3)];
        let p = Program::compile(&table, 0).unwrap();
        for (qpn, want) in [
            (0, 0),
            (1, 0),
            (0xff, 0),
            (0x100, 1),
            (0x1ff, 1),
            (0x200, 2),
            (0x23f, 2),
            (0x240, 0),
            (0x3ff, 0),
            (0x400, 3),
            (0x401, 0),
            (QPN_MAX, 0),
        ] {
            assert_eq!(p.run(&bth(qpn)), want, "QPN {qpn:#x}");
        }
        // The reserved byte before DestQP does not change the choice.
        let mut b = bth(0x150);
        b[4] = 0xff;
        assert_eq!(p.run(&b), 1);
    }

    #[test]
    fn a_payload_too_short_for_a_bth_goes_to_index_0() {
        let p = Program::compile(&[(0..=QPN_MAX, 5)], 0).unwrap();
        assert_eq!(p.run(&bth(7)), 5);
        assert_eq!(p.run(&[0u8; 7]), 0);
    }

    #[test]
    fn adjacent_ranges_of_one_index_are_one_piece() {
        let p = Program::compile(&[(0x10..=0x1f, 1), (0x20..=0x2f, 1)], 0).unwrap();
        let q = Program::compile(&[(0x10..=0x2f, 1)], 0).unwrap();
        assert_eq!(p, q);
    }

    #[test]
    fn overlapping_or_empty_ranges_are_refused() {
        assert!(matches!(
            Program::compile(&[(0x10..=0x20, 1), (0x20..=0x30, 2)], 0),
            Err(ProgramError::BadRange(_))
        ));
        #[allow(clippy::reversed_empty_ranges)]
        let empty = 5..=4;
        assert!(Program::compile(&[(empty, 1)], 0).is_err());
        assert!(Program::compile(&[(0..=QPN_MAX + 1, 1)], 0).is_err());
    }

    #[test]
    fn a_large_table_uses_long_jumps_and_stays_right() {
        // 900 blocks of 64 QPNs to 7 alternating indices: left halves far beyond 255.
        let table: Vec<_> = (0..900u32)
            .map(|b| (0x1000 + b * 128..=0x1000 + b * 128 + 63, 1 + b % 7))
            .collect();
        let p = Program::compile(&table, 0).unwrap();
        assert!(p.insns().iter().any(|i| i.code == JMP_JA));
        for (r, want) in &table {
            assert_eq!(p.run(&bth(*r.start())), *want);
            assert_eq!(p.run(&bth(*r.end())), *want);
            assert_eq!(p.run(&bth(r.end() + 1)), 0);
        }
    }

    #[test]
    fn a_table_beyond_the_kernel_limit_is_refused() {
        let table: Vec<_> = (0..3000u32).map(|b| (b * 4..=b * 4 + 1, 1)).collect();
        assert!(matches!(
            Program::compile(&table, 0),
            Err(ProgramError::TooLarge(_))
        ));
    }

    #[test]
    fn members_mirror_the_kernels_compaction() {
        let mut m = Members::new();
        assert_eq!(m.join("daemon"), 0);
        assert_eq!(m.join("a"), 1);
        assert_eq!(m.join("b"), 2);
        assert_eq!(m.join("c"), 3);
        let (gone, moved) = m.leave(1).unwrap();
        assert_eq!((gone, moved), ("a", Some(&"c")));
        assert_eq!(m.index_of(&"c"), Some(1));
        let (gone, moved) = m.leave(2).unwrap();
        assert_eq!((gone, moved), ("b", None));
        assert_eq!(m.len(), 2);
        assert!(m.leave(5).is_none());
    }

    /// Receives what is waiting on each socket: the DestQPs each got.
    fn drain(socks: &[Option<UdpSocket>]) -> Vec<Vec<u32>> {
        socks
            .iter()
            .map(|s| {
                let mut got = Vec::new();
                if let Some(s) = s {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.recv(&mut buf) {
                        if n >= 8 {
                            got.push(u32::from_be_bytes([0, buf[5], buf[6], buf[7]]));
                        }
                    }
                }
                got
            })
            .collect()
    }

    fn send_and_wait(to: SocketAddr, qpns: &[u32]) {
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for q in qpns {
            tx.send_to(&bth(*q), to).unwrap();
        }
        // Loopback delivery is synchronous with the send, but leave the softirq a moment.
        std::thread::sleep(std::time::Duration::from_millis(20));
    }

    #[test]
    fn the_kernel_steers_by_dest_qp_and_compaction_is_mirrored() {
        let first = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = first.local_addr().unwrap();
        let mut socks = vec![Some(first)];
        let mut members = Members::new();
        members.join("daemon");
        for owner in ["a", "b", "c"] {
            socks.push(Some(bind_reuseport(addr).unwrap()));
            members.join(owner);
        }
        let block = |owner: &str| match owner {
            "a" => 0x100..=0x1ff,
            "b" => 0x200..=0x2ff,
            _ => 0x300..=0x3ff,
        };
        let table = |m: &Members<&str>| -> Vec<(RangeInclusive<u32>, u32)> {
            m.iter()
                .filter(|(_, o)| **o != "daemon")
                .map(|(i, o)| (block(o), i))
                .collect()
        };
        let p = Program::compile(&table(&members), 0).unwrap();
        p.attach(socks[1].as_ref().unwrap()).unwrap();
        send_and_wait(addr, &[0x150, 0x250, 0x350, 1, 0x900]);
        assert_eq!(
            drain(&socks),
            vec![vec![1, 0x900], vec![0x150], vec![0x250], vec![0x350]]
        );

        // "a" leaves: the kernel moves "c" (the last) into index 1; the mirror says so, and
        // the program made from it is right again.
        socks[1] = None;
        let (_, moved) = members.leave(1).unwrap();
        assert_eq!(moved, Some(&"c"));
        socks.swap(1, 3);
        socks.pop();
        let p = Program::compile(&table(&members), 0).unwrap();
        p.attach(socks[0].as_ref().unwrap()).unwrap();
        send_and_wait(addr, &[0x150, 0x250, 0x350]);
        assert_eq!(drain(&socks), vec![vec![0x150], vec![0x350], vec![0x250]]);
    }
}
