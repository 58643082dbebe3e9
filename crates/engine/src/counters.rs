//! Counters: IBA PortCounters (§16.1.3.5) per port and a named counter for every reason a
//! packet is dropped (like rxe's `RXE_CNT_*`), because counters are how an operator sees what
//! the HCA did with traffic it did not deliver.

use core::fmt;

/// The PortCounters a PMA serves, kept with 64 bits (the PortCountersExtended width).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// PortXmitData: data octets sent, divided by 4 (as the spec counts).
    pub xmit_data_words: u64,
    /// PortRcvData: data octets received, divided by 4.
    pub rcv_data_words: u64,
    /// PortXmitPkts.
    pub xmit_pkts: u64,
    /// PortRcvPkts.
    pub rcv_pkts: u64,
    /// PortRcvErrors: packets received with errors (malformed, bad headers).
    pub rcv_errors: u64,
    /// PortXmitDiscards: packets the port could not send (port down).
    pub xmit_discards: u64,
    /// P_Key violations seen on this port.
    pub pkey_violations: u64,
    /// Q_Key violations seen on this port.
    pub qkey_violations: u64,
}

macro_rules! drop_reasons {
    ($( $(#[$doc:meta])* $name:ident => $text:literal, )+) => {
        /// Why the engine dropped a received packet or a message.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum DropReason {
            $( $(#[$doc])* $name, )+
        }

        impl DropReason {
            /// Every reason, in declaration order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$name),+];

            /// A short snake_case name for logs and tools.
            pub fn name(self) -> &'static str {
                match self { $( DropReason::$name => $text, )+ }
            }
        }
    };
}

drop_reasons! {
    /// The bytes did not parse (truncated or malformed headers, wrong pad).
    Malformed => "malformed",
    /// The opcode is not implemented (RD, XRC, reserved).
    UnsupportedOpcode => "unsupported_opcode",
    /// No QP with the destination QPN.
    UnknownQp => "unknown_qp",
    /// The destination QP's type does not match the opcode's transport.
    WrongTransport => "wrong_transport",
    /// The destination QP is in a state that does not receive (RESET, INIT, ERR).
    QpNotReceiving => "qp_not_receiving",
    /// The BTH P_Key does not match the QP's partition.
    PKeyMismatch => "pkey_mismatch",
    /// The DETH Q_Key does not match the QP's Q_Key.
    QKeyMismatch => "qkey_mismatch",
    /// The port is not active.
    PortNotActive => "port_not_active",
    /// UD: a message arrived with no receive posted (silent drop, IBA class D).
    UdNoReceive => "ud_no_receive",
    /// UD: the message does not fit the receive buffer.
    UdTooLong => "ud_too_long",
    /// UC: a message arrived with no receive posted.
    UcNoReceive => "uc_no_receive",
    /// UC: a PSN gap; the rest of the message is dropped.
    UcSequenceGap => "uc_sequence_gap",
    /// UC: an invalid request (access, length, opcode sequence) dropped silently.
    UcInvalidRequest => "uc_invalid_request",
    /// RC: a request ahead of the expected PSN (a PSN sequence error NAK was sent once).
    RcOutOfSequence => "rc_out_of_sequence",
    /// RC: a duplicate request (re-acknowledged or replayed, not re-executed).
    RcDuplicate => "rc_duplicate",
    /// RC: a duplicate READ or atomic whose responder resource is gone.
    RcDuplicateUnknown => "rc_duplicate_unknown",
    /// RC: a response that matches no outstanding request (ghost or stale ACK).
    RcUnexpectedResponse => "rc_unexpected_response",
    /// RC: a request answered with an RNR NAK (no receive posted).
    RcRnrNakSent => "rc_rnr_nak_sent",
    /// A multicast packet (not supported yet).
    Multicast => "multicast",
    /// The BTH's transport header version (TVer) is not 0, the only one defined (IBA
    /// §9.2; C9-3: silently dropped).
    TransportVersion => "bad_transport_version",
}

/// How many packets were dropped for each reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DropCounters([u64; DropReason::ALL.len()]);

impl Default for DropCounters {
    fn default() -> DropCounters {
        DropCounters([0; DropReason::ALL.len()])
    }
}

impl DropCounters {
    /// Counts one drop.
    pub fn count(&mut self, reason: DropReason) {
        self.0[reason as usize] += 1;
    }
    /// How many drops for `reason`.
    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize]
    }
    /// Every reason with a nonzero count.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .iter()
            .map(|&r| (r, self.get(r)))
            .filter(|&(_, n)| n > 0)
    }
    /// The sum over all reasons.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

impl fmt::Display for DropCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (r, n) in self.nonzero() {
            if !first {
                f.write_str(" ")?;
            }
            write!(f, "{}={n}", r.name())?;
            first = false;
        }
        Ok(())
    }
}
