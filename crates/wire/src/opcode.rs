//! The BTH opcode table (IBA vol 1 §9.2.1 table 38–39; rxe's `rxe_opcode.c` made type-safe).
//!
//! An opcode's upper 3 bits name the transport, its lower 5 bits the operation. For every
//! opcode softib understands, [`Opcode::info`] says which extended transport headers follow the
//! BTH (in the order the spec puts them), whether the packet is the FIRST, MIDDLE, LAST or ONLY
//! packet of its message, and whether a payload follows.

use core::fmt;

/// The transport service, the upper 3 bits of an opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connection (0b000).
    Rc,
    /// Unreliable Connection (0b001).
    Uc,
    /// Reliable Datagram (0b010) — not implemented by softib.
    Rd,
    /// Unreliable Datagram (0b011).
    Ud,
    /// Congestion Notification Packet (0b100, RoCEv2 Annex A17).
    Cnp,
    /// Extended Reliable Connection (0b101) — not implemented by softib.
    Xrc,
    /// Reserved (0b110).
    Reserved,
    /// Manufacturer-specific (0b111).
    Manufacturer,
}

impl Transport {
    /// The opcode bits of this transport (upper 3 bits).
    pub const fn bits(self) -> u8 {
        match self {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Rd => 0x40,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x80,
            Transport::Xrc => 0xA0,
            Transport::Reserved => 0xC0,
            Transport::Manufacturer => 0xE0,
        }
    }

    /// The short name tools print ("RC", "UC", "UD", ...).
    pub const fn name(self) -> &'static str {
        match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Rd => "RD",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
            Transport::Xrc => "XRC",
            Transport::Reserved => "RESERVED",
            Transport::Manufacturer => "MANUFACTURER",
        }
    }
}

enum_with_unknown! {
    /// The operation, the lower 5 bits of an opcode (IBA table 39), in the spec's order.
    pub enum Operation(u8) {
        /// SEND First.
        SendFirst = 0x00,
        /// SEND Middle.
        SendMiddle = 0x01,
        /// SEND Last.
        SendLast = 0x02,
        /// SEND Last with Immediate.
        SendLastWithImmediate = 0x03,
        /// SEND Only.
        SendOnly = 0x04,
        /// SEND Only with Immediate.
        SendOnlyWithImmediate = 0x05,
        /// RDMA WRITE First.
        RdmaWriteFirst = 0x06,
        /// RDMA WRITE Middle.
        RdmaWriteMiddle = 0x07,
        /// RDMA WRITE Last.
        RdmaWriteLast = 0x08,
        /// RDMA WRITE Last with Immediate.
        RdmaWriteLastWithImmediate = 0x09,
        /// RDMA WRITE Only.
        RdmaWriteOnly = 0x0A,
        /// RDMA WRITE Only with Immediate.
        RdmaWriteOnlyWithImmediate = 0x0B,
        /// RDMA READ Request.
        RdmaReadRequest = 0x0C,
        /// RDMA READ response First.
        RdmaReadResponseFirst = 0x0D,
        /// RDMA READ response Middle.
        RdmaReadResponseMiddle = 0x0E,
        /// RDMA READ response Last.
        RdmaReadResponseLast = 0x0F,
        /// RDMA READ response Only.
        RdmaReadResponseOnly = 0x10,
        /// Acknowledge.
        Acknowledge = 0x11,
        /// ATOMIC Acknowledge.
        AtomicAcknowledge = 0x12,
        /// CmpSwap.
        CompareSwap = 0x13,
        /// FetchAdd.
        FetchAdd = 0x14,
        /// Resync (RD only).
        Resync = 0x15,
        /// SEND Last with Invalidate.
        SendLastWithInvalidate = 0x16,
        /// SEND Only with Invalidate.
        SendOnlyWithInvalidate = 0x17,
    }
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// The first packet of a multi-packet message.
    First,
    /// A packet between the first and the last.
    Middle,
    /// The last packet of a multi-packet message.
    Last,
    /// The only packet of a single-packet message.
    Only,
}

impl Position {
    /// Whether a packet in this position starts a message (FIRST or ONLY).
    pub const fn starts_message(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Whether a packet in this position ends a message (LAST or ONLY).
    pub const fn ends_message(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// What a packet is, in terms the transport engine acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A SEND request packet.
    Send,
    /// An RDMA WRITE request packet.
    RdmaWrite,
    /// An RDMA READ request.
    RdmaReadRequest,
    /// An RDMA READ response packet.
    RdmaReadResponse,
    /// An ATOMIC request (CmpSwap or FetchAdd).
    Atomic,
    /// An Acknowledge packet (ACK or NAK).
    Acknowledge,
    /// An ATOMIC Acknowledge.
    AtomicAcknowledge,
    /// A congestion notification packet.
    Cnp,
}

impl Kind {
    /// Whether packets of this kind are requests (handled by a responder) rather than
    /// responses (handled by a requester's completer).
    pub const fn is_request(self) -> bool {
        matches!(
            self,
            Kind::Send | Kind::RdmaWrite | Kind::RdmaReadRequest | Kind::Atomic
        )
    }
}

/// A set of extended transport headers, in the order they follow the BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// No extended header.
    pub const NONE: HeaderSet = HeaderSet(0);
    /// Reliable Datagram ETH (4 bytes; RD only).
    pub const RDETH: HeaderSet = HeaderSet(1 << 0);
    /// Datagram ETH (8 bytes).
    pub const DETH: HeaderSet = HeaderSet(1 << 1);
    /// RDMA ETH (16 bytes).
    pub const RETH: HeaderSet = HeaderSet(1 << 2);
    /// Atomic ETH (28 bytes).
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 3);
    /// ACK ETH (4 bytes).
    pub const AETH: HeaderSet = HeaderSet(1 << 4);
    /// Atomic ACK ETH (8 bytes).
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 5);
    /// Immediate data (4 bytes).
    pub const IMMDT: HeaderSet = HeaderSet(1 << 6);
    /// Invalidate ETH (4 bytes).
    pub const IETH: HeaderSet = HeaderSet(1 << 7);
    /// The 16 reserved bytes of a RoCEv2 CNP.
    pub const CNP: HeaderSet = HeaderSet(1 << 8);

    /// The union of two sets.
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }
    /// Whether every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }
    /// The total length in bytes of the headers in the set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        if self.contains(HeaderSet::RDETH) {
            n += 4;
        }
        if self.contains(HeaderSet::DETH) {
            n += 8;
        }
        if self.contains(HeaderSet::RETH) {
            n += 16;
        }
        if self.contains(HeaderSet::ATOMIC_ETH) {
            n += 28;
        }
        if self.contains(HeaderSet::AETH) {
            n += 4;
        }
        if self.contains(HeaderSet::ATOMIC_ACK_ETH) {
            n += 8;
        }
        if self.contains(HeaderSet::IMMDT) {
            n += 4;
        }
        if self.contains(HeaderSet::IETH) {
            n += 4;
        }
        if self.contains(HeaderSet::CNP) {
            n += 16;
        }
        n
    }
    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What the table knows about one opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpcodeInfo {
    /// The transport service.
    pub transport: Transport,
    /// The operation name as rxe and the spec write it ("SEND_ONLY").
    pub name: &'static str,
    /// The extended headers that follow the BTH.
    pub headers: HeaderSet,
    /// The packet's place in its message.
    pub position: Position,
    /// What the packet does.
    pub kind: Kind,
    /// Whether a payload (possibly empty) follows the headers.
    pub has_payload: bool,
    /// Whether the packet carries immediate data.
    pub has_immediate: bool,
}

/// A BTH opcode: any 8-bit value. [`Opcode::info`] tells whether softib understands it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Opcode(pub u8);

impl Opcode {
    /// The opcode of `operation` on `transport`.
    pub fn new(transport: Transport, operation: Operation) -> Opcode {
        Opcode(transport.bits() | (u8::from(operation) & 0x1F))
    }

    /// The transport (upper 3 bits).
    pub const fn transport(self) -> Transport {
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            2 => Transport::Rd,
            3 => Transport::Ud,
            4 => Transport::Cnp,
            5 => Transport::Xrc,
            6 => Transport::Reserved,
            _ => Transport::Manufacturer,
        }
    }

    /// The operation (lower 5 bits).
    pub fn operation(self) -> Operation {
        Operation::from(self.0 & 0x1F)
    }

    /// The table entry, or `None` for an opcode softib does not implement (RD, XRC,
    /// reserved and manufacturer opcodes, and operations a transport does not have).
    pub fn info(self) -> Option<OpcodeInfo> {
        let transport = self.transport();
        let op = self.0 & 0x1F;
        let valid = match transport {
            Transport::Rc => op <= 0x14 || op == 0x16 || op == 0x17,
            Transport::Uc => op <= 0x0B,
            Transport::Ud => op == 0x04 || op == 0x05,
            Transport::Cnp => op == 0x01,
            _ => false,
        };
        if !valid {
            return None;
        }
        if transport == Transport::Cnp {
            return Some(OpcodeInfo {
                transport,
                name: "CNP",
                headers: HeaderSet::CNP,
                position: Position::Only,
                kind: Kind::Cnp,
                has_payload: false,
                has_immediate: false,
            });
        }
        use HeaderSet as H;
        use Kind as K;
        use Position as P;
        let (name, headers, position, kind, has_payload) = match op {
            0x00 => ("SEND_FIRST", H::NONE, P::First, K::Send, true),
            0x01 => ("SEND_MIDDLE", H::NONE, P::Middle, K::Send, true),
            0x02 => ("SEND_LAST", H::NONE, P::Last, K::Send, true),
            0x03 => ("SEND_LAST_WITH_IMMEDIATE", H::IMMDT, P::Last, K::Send, true),
            0x04 => ("SEND_ONLY", H::NONE, P::Only, K::Send, true),
            0x05 => ("SEND_ONLY_WITH_IMMEDIATE", H::IMMDT, P::Only, K::Send, true),
            0x06 => ("RDMA_WRITE_FIRST", H::RETH, P::First, K::RdmaWrite, true),
            0x07 => ("RDMA_WRITE_MIDDLE", H::NONE, P::Middle, K::RdmaWrite, true),
            0x08 => ("RDMA_WRITE_LAST", H::NONE, P::Last, K::RdmaWrite, true),
            0x09 => (
                "RDMA_WRITE_LAST_WITH_IMMEDIATE",
                H::IMMDT,
                P::Last,
                K::RdmaWrite,
                true,
            ),
            0x0A => ("RDMA_WRITE_ONLY", H::RETH, P::Only, K::RdmaWrite, true),
            0x0B => (
                "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
                H::RETH.with(H::IMMDT),
                P::Only,
                K::RdmaWrite,
                true,
            ),
            0x0C => (
                "RDMA_READ_REQUEST",
                H::RETH,
                P::Only,
                K::RdmaReadRequest,
                false,
            ),
            0x0D => (
                "RDMA_READ_RESPONSE_FIRST",
                H::AETH,
                P::First,
                K::RdmaReadResponse,
                true,
            ),
            0x0E => (
                "RDMA_READ_RESPONSE_MIDDLE",
                H::NONE,
                P::Middle,
                K::RdmaReadResponse,
                true,
            ),
            0x0F => (
                "RDMA_READ_RESPONSE_LAST",
                H::AETH,
                P::Last,
                K::RdmaReadResponse,
                true,
            ),
            0x10 => (
                "RDMA_READ_RESPONSE_ONLY",
                H::AETH,
                P::Only,
                K::RdmaReadResponse,
                true,
            ),
            0x11 => ("ACKNOWLEDGE", H::AETH, P::Only, K::Acknowledge, false),
            0x12 => (
                "ATOMIC_ACKNOWLEDGE",
                H::AETH.with(H::ATOMIC_ACK_ETH),
                P::Only,
                K::AtomicAcknowledge,
                false,
            ),
            0x13 => ("COMPARE_SWAP", H::ATOMIC_ETH, P::Only, K::Atomic, false),
            0x14 => ("FETCH_ADD", H::ATOMIC_ETH, P::Only, K::Atomic, false),
            0x16 => ("SEND_LAST_WITH_INVALIDATE", H::IETH, P::Last, K::Send, true),
            0x17 => ("SEND_ONLY_WITH_INVALIDATE", H::IETH, P::Only, K::Send, true),
            _ => return None,
        };
        let headers = if transport == Transport::Ud {
            H::DETH.with(headers)
        } else {
            headers
        };
        Some(OpcodeInfo {
            transport,
            name,
            headers,
            position,
            kind,
            has_payload,
            has_immediate: headers.contains(H::IMMDT),
        })
    }

    /// Every opcode softib implements, in numeric order.
    pub fn all_known() -> impl Iterator<Item = Opcode> {
        (0u8..=255).map(Opcode).filter(|op| op.info().is_some())
    }

    // Named constants for the opcodes the engine emits most; the rest are built with `new`.
    /// RC SEND_ONLY.
    pub const RC_SEND_ONLY: Opcode = Opcode(0x04);
    /// RC RDMA_WRITE_ONLY.
    pub const RC_RDMA_WRITE_ONLY: Opcode = Opcode(0x0A);
    /// RC RDMA_READ_REQUEST.
    pub const RC_RDMA_READ_REQUEST: Opcode = Opcode(0x0C);
    /// RC ACKNOWLEDGE.
    pub const RC_ACKNOWLEDGE: Opcode = Opcode(0x11);
    /// RC ATOMIC_ACKNOWLEDGE.
    pub const RC_ATOMIC_ACKNOWLEDGE: Opcode = Opcode(0x12);
    /// UD SEND_ONLY.
    pub const UD_SEND_ONLY: Opcode = Opcode(0x64);
    /// UD SEND_ONLY_WITH_IMMEDIATE.
    pub const UD_SEND_ONLY_WITH_IMMEDIATE: Opcode = Opcode(0x65);
    /// RoCEv2 CNP.
    pub const CNP: Opcode = Opcode(0x81);
}

impl fmt::Display for Opcode {
    /// "RC SEND_ONLY"; an opcode softib does not implement prints as "RD 0x4c" style text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(info) if info.transport == Transport::Cnp => f.write_str("CNP"),
            Some(info) => write!(f, "{} {}", info.transport.name(), info.name),
            None => write!(f, "{} 0x{:02x}", self.transport().name(), self.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn counts_per_transport() {
        let count = |t: Transport| Opcode::all_known().filter(|o| o.transport() == t).count();
        assert_eq!(count(Transport::Rc), 23);
        assert_eq!(count(Transport::Uc), 12);
        assert_eq!(count(Transport::Ud), 2);
        assert_eq!(count(Transport::Cnp), 1);
        assert_eq!(count(Transport::Rd), 0);
    }

    #[test]
    fn header_sets_follow_the_spec() {
        let info = |b: u8| Opcode(b).info().expect("known opcode");
        assert_eq!(info(0x0B).headers, HeaderSet::RETH.with(HeaderSet::IMMDT));
        assert_eq!(info(0x0E).headers, HeaderSet::NONE);
        assert_eq!(
            info(0x12).headers,
            HeaderSet::AETH.with(HeaderSet::ATOMIC_ACK_ETH)
        );
        assert_eq!(info(0x65).headers, HeaderSet::DETH.with(HeaderSet::IMMDT));
        assert_eq!(info(0x65).headers.len(), 12);
        assert_eq!(info(0x13).headers.len(), 28);
        assert_eq!(info(0x81).headers.len(), 16);
        assert!(info(0x17).headers.contains(HeaderSet::IETH));
        assert_eq!(info(0x2B).position, Position::Only);
        assert!(Opcode(0x2C).info().is_none(), "UC has no RDMA READ");
        assert!(Opcode(0x15).info().is_none(), "RESYNC is RD-only");
    }

    #[test]
    fn names() {
        assert_eq!(Opcode(0x04).to_string(), "RC SEND_ONLY");
        assert_eq!(Opcode(0x64).to_string(), "UD SEND_ONLY");
        assert_eq!(
            Opcode(0x29).to_string(),
            "UC RDMA_WRITE_LAST_WITH_IMMEDIATE"
        );
        assert_eq!(Opcode(0x81).to_string(), "CNP");
        assert_eq!(Opcode(0x4c).to_string(), "RD 0x4c");
        assert_eq!(
            Opcode::new(Transport::Uc, Operation::SendOnly),
            Opcode(0x24)
        );
    }
}
