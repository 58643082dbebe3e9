//! Communication management MADs (IBA vol 1 chapter 12; class 0x07, ClassVersion 2).
//!
//! The CM sets up and tears down connections with MADs of method Send on QP1: REQ, MRA, REJ,
//! REP, RTU, DREQ, DREP (§12.6) and, for UD service lookup, SIDR_REQ and SIDR_REP (§12.11).
//! Each message is one 256-byte MAD: the common header, then the message's 232 bytes
//! (`DATA_LEN`), whose layouts are the spec's tables 99–120 (the offsets below count from the
//! start of that data area; the spec counts from the start of the MAD, 24 bytes earlier).
//!
//! Fields narrower than a byte sit at the high end of their byte first, as everywhere in the
//! IBA: "bits 0–4 of byte 43" are the five most significant bits.
//!
//! Private data has a fixed length per message on the wire (92 bytes in a REQ, 196 in a REP,
//! ...): the CM carries no length, so a consumer gets the whole field, as rdma_cm hands it out.
//!
//! [`CmaHeader`] is the header rdma_cm puts at the start of a REQ's (and SIDR_REQ's)
//! private data for the IP port spaces (IBA annex A11, "RDMA IP CM Service"), and
//! [`PortSpace`] / [`service_id`] the service IDs it listens on.

use crate::bytes::{
    read_u16, read_u24, read_u32, read_u64, write_u16, write_u24, write_u32, write_u64,
};
use crate::mad::{self, AttrId, Method, MgmtClass, HEADER_LEN, MAD_LEN};
use crate::psn::Psn;
use crate::types::{Gid, Guid, Lid, PKey, QKey, Qpn};
use crate::{Error, Result};

/// Length of a CM message: the MAD after its common header.
pub const DATA_LEN: usize = MAD_LEN - HEADER_LEN;

/// The CM's ClassVersion (IBA 1.2 and later).
pub const CLASS_VERSION: u8 = 2;

/// The AttributeIDs of the CM messages (IBA §12.6, table 98).
pub mod attr {
    use crate::mad::AttrId;
    /// Request for communication.
    pub const REQ: AttrId = AttrId(0x0010);
    /// Message receipt acknowledgement.
    pub const MRA: AttrId = AttrId(0x0011);
    /// Reject.
    pub const REJ: AttrId = AttrId(0x0012);
    /// Reply to request for communication.
    pub const REP: AttrId = AttrId(0x0013);
    /// Ready to use.
    pub const RTU: AttrId = AttrId(0x0014);
    /// Request for communication release (disconnect request).
    pub const DREQ: AttrId = AttrId(0x0015);
    /// Reply to request for communication release.
    pub const DREP: AttrId = AttrId(0x0016);
    /// Service ID resolution request.
    pub const SIDR_REQ: AttrId = AttrId(0x0017);
    /// Service ID resolution response.
    pub const SIDR_REP: AttrId = AttrId(0x0018);
    /// Load alternate path.
    pub const LAP: AttrId = AttrId(0x0019);
    /// Alternate path response.
    pub const APR: AttrId = AttrId(0x001A);
}

/// Private data lengths per message (IBA table 99 and the message tables).
pub mod private_len {
    /// REQ.
    pub const REQ: usize = 92;
    /// MRA.
    pub const MRA: usize = 222;
    /// REJ.
    pub const REJ: usize = 148;
    /// REP.
    pub const REP: usize = 196;
    /// RTU.
    pub const RTU: usize = 224;
    /// DREQ.
    pub const DREQ: usize = 220;
    /// DREP.
    pub const DREP: usize = 224;
    /// SIDR_REQ.
    pub const SIDR_REQ: usize = 216;
    /// SIDR_REP.
    pub const SIDR_REP: usize = 136;
}

/// Length of a REJ's AdditionalRejectionInformation and a SIDR_REP's AdditionalInformation.
pub const ARI_LEN: usize = 72;

/// Bits `[msb, msb + width)` of `byte`, counting from the most significant bit.
const fn bits(byte: u8, msb: u32, width: u32) -> u8 {
    (byte >> (8 - msb - width)) & ((1u16 << width) - 1) as u8
}

/// `byte` with bits `[msb, msb + width)` set to `v` (excess bits of `v` dropped).
const fn set_bits(byte: u8, msb: u32, width: u32, v: u8) -> u8 {
    let mask = (((1u16 << width) - 1) as u8) << (8 - msb - width);
    (byte & !mask) | ((v << (8 - msb - width)) & mask)
}

fn array<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[at..at + N]);
    a
}

enum_with_unknown! {
    /// The transport service a REQ asks for (REQ byte 43 bits 5–6).
    pub enum TransportService(u8) {
        /// Reliable connection.
        Rc = 0,
        /// Unreliable connection.
        Uc = 1,
        /// Reliable datagram.
        Rd = 2,
    }
}

/// One path of a REQ: primary or alternate (IBA table 103, 44 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Path {
    /// The requester's port LID.
    pub local_lid: Lid,
    /// The responder's port LID.
    pub remote_lid: Lid,
    /// The requester's port GID.
    pub local_gid: Gid,
    /// The responder's port GID.
    pub remote_gid: Gid,
    /// Flow label of the GRH (20 bits).
    pub flow_label: u32,
    /// Static rate code (6 bits, IBA table 235).
    pub packet_rate: u8,
    /// Traffic class of the GRH.
    pub traffic_class: u8,
    /// Hop limit of the GRH.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Whether the path stays in the local subnet (no GRH needed on IB).
    pub subnet_local: bool,
    /// Local ACK timeout exponent (5 bits): 4.096 µs × 2^n.
    pub local_ack_timeout: u8,
}

impl Path {
    const LEN: usize = 44;

    fn parse(b: &[u8]) -> Path {
        Path {
            local_lid: Lid(read_u16(b, 0)),
            remote_lid: Lid(read_u16(b, 2)),
            local_gid: Gid(array(b, 4)),
            remote_gid: Gid(array(b, 20)),
            flow_label: read_u32(b, 36) >> 12,
            packet_rate: bits(b[39], 2, 6),
            traffic_class: b[40],
            hop_limit: b[41],
            sl: bits(b[42], 0, 4),
            subnet_local: bits(b[42], 4, 1) != 0,
            local_ack_timeout: bits(b[43], 0, 5),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u16(b, 0, self.local_lid.0);
        write_u16(b, 2, self.remote_lid.0);
        b[4..20].copy_from_slice(&self.local_gid.0);
        b[20..36].copy_from_slice(&self.remote_gid.0);
        write_u32(b, 36, (self.flow_label & 0xF_FFFF) << 12);
        b[39] = set_bits(b[39], 2, 6, self.packet_rate);
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = set_bits(set_bits(0, 0, 4, self.sl), 4, 1, self.subnet_local as u8);
        b[43] = set_bits(0, 0, 5, self.local_ack_timeout);
    }
}

/// REQ: request for communication (IBA §12.6.5, table 102).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    /// The requester's communication ID for this connection.
    pub local_comm_id: u32,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// The service the requester wants to reach.
    pub service_id: u64,
    /// The requester's CA GUID.
    pub local_ca_guid: Guid,
    /// The requester's Q_Key (meaningful for RD).
    pub local_qkey: QKey,
    /// The requester's QP number.
    pub local_qpn: Qpn,
    /// RDMA read/atomic responder resources the requester offers.
    pub responder_resources: u8,
    /// Local EE context (RD only, 24 bits).
    pub local_eecn: u32,
    /// RDMA read/atomic operations the requester will have outstanding.
    pub initiator_depth: u8,
    /// Remote EE context (RD only, 24 bits).
    pub remote_eecn: u32,
    /// How long the responder may take to answer, 4.096 µs × 2^n (5 bits).
    pub remote_cm_response_timeout: u8,
    /// RC, UC or RD.
    pub transport_service: TransportService,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The PSN the requester's first packet will carry.
    pub starting_psn: Psn,
    /// How long the requester takes to answer, 4.096 µs × 2^n (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// The partition.
    pub pkey: PKey,
    /// Path MTU code (4 bits, IBA table 237).
    pub path_mtu: u8,
    /// RDD exists (RD only).
    pub rdc_exists: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// How many times the CM retries a message (4 bits).
    pub max_cm_retries: u8,
    /// The requester's QP uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits; 1 is XRC).
    pub extended_transport: u8,
    /// The primary path.
    pub primary: Path,
    /// The alternate path (all zero when there is none).
    pub alternate: Path,
    /// Private data.
    pub private_data: [u8; private_len::REQ],
}

impl Req {
    fn parse(b: &[u8]) -> Req {
        Req {
            local_comm_id: read_u32(b, 0),
            vendor_id: read_u24(b, 5),
            service_id: read_u64(b, 8),
            local_ca_guid: Guid(read_u64(b, 16)),
            local_qkey: QKey(read_u32(b, 28)),
            local_qpn: Qpn::new(read_u24(b, 32)),
            responder_resources: b[35],
            local_eecn: read_u24(b, 36),
            initiator_depth: b[39],
            remote_eecn: read_u24(b, 40),
            remote_cm_response_timeout: bits(b[43], 0, 5),
            transport_service: TransportService::from(bits(b[43], 5, 2)),
            end_to_end_flow_control: bits(b[43], 7, 1) != 0,
            starting_psn: Psn::new(read_u24(b, 44)),
            local_cm_response_timeout: bits(b[47], 0, 5),
            retry_count: bits(b[47], 5, 3),
            pkey: PKey(read_u16(b, 48)),
            path_mtu: bits(b[50], 0, 4),
            rdc_exists: bits(b[50], 4, 1) != 0,
            rnr_retry_count: bits(b[50], 5, 3),
            max_cm_retries: bits(b[51], 0, 4),
            srq: bits(b[51], 4, 1) != 0,
            extended_transport: bits(b[51], 5, 3),
            primary: Path::parse(&b[52..52 + Path::LEN]),
            alternate: Path::parse(&b[96..96 + Path::LEN]),
            private_data: array(b, 140),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        b[4] = 0;
        write_u24(b, 5, self.vendor_id & 0xFF_FFFF);
        write_u64(b, 8, self.service_id);
        write_u64(b, 16, self.local_ca_guid.0);
        write_u32(b, 24, 0);
        write_u32(b, 28, self.local_qkey.0);
        write_u24(b, 32, self.local_qpn.value());
        b[35] = self.responder_resources;
        write_u24(b, 36, self.local_eecn & 0xFF_FFFF);
        b[39] = self.initiator_depth;
        write_u24(b, 40, self.remote_eecn & 0xFF_FFFF);
        let mut x = set_bits(0, 0, 5, self.remote_cm_response_timeout);
        x = set_bits(x, 5, 2, self.transport_service.into());
        b[43] = set_bits(x, 7, 1, self.end_to_end_flow_control as u8);
        write_u24(b, 44, self.starting_psn.value());
        b[47] = set_bits(
            set_bits(0, 0, 5, self.local_cm_response_timeout),
            5,
            3,
            self.retry_count,
        );
        write_u16(b, 48, self.pkey.0);
        let mut x = set_bits(0, 0, 4, self.path_mtu);
        x = set_bits(x, 4, 1, self.rdc_exists as u8);
        b[50] = set_bits(x, 5, 3, self.rnr_retry_count);
        let mut x = set_bits(0, 0, 4, self.max_cm_retries);
        x = set_bits(x, 4, 1, self.srq as u8);
        b[51] = set_bits(x, 5, 3, self.extended_transport);
        self.primary.emit(&mut b[52..52 + Path::LEN]);
        self.alternate.emit(&mut b[96..96 + Path::LEN]);
        b[140..140 + private_len::REQ].copy_from_slice(&self.private_data);
    }
}

enum_with_unknown! {
    /// Which message an MRA or REJ answers (2 bits).
    pub enum MessageKind(u8) {
        /// The REQ.
        Req = 0,
        /// The REP.
        Rep = 1,
        /// The LAP (MRA) or "other" (REJ).
        Other = 2,
    }
}

/// MRA: message receipt acknowledgement, "I need more time" (IBA §12.6.6, table 104).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mra {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 when the MRA answers a REQ whose sender has none
    /// of ours yet).
    pub remote_comm_id: u32,
    /// Which message is acknowledged.
    pub message_mraed: MessageKind,
    /// How much longer the sender needs, 4.096 µs × 2^n (5 bits).
    pub service_timeout: u8,
    /// Private data.
    pub private_data: [u8; private_len::MRA],
}

impl Mra {
    fn parse(b: &[u8]) -> Mra {
        Mra {
            local_comm_id: read_u32(b, 0),
            remote_comm_id: read_u32(b, 4),
            message_mraed: MessageKind::from(bits(b[8], 0, 2)),
            service_timeout: bits(b[9], 0, 5),
            private_data: array(b, 10),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        write_u32(b, 4, self.remote_comm_id);
        b[8] = set_bits(0, 0, 2, self.message_mraed.into());
        b[9] = set_bits(0, 0, 5, self.service_timeout);
        b[10..10 + private_len::MRA].copy_from_slice(&self.private_data);
    }
}

enum_with_unknown! {
    /// Why a REJ rejects (IBA §12.6.7.2, table 106).
    pub enum RejectReason(u16) {
        /// No QP available.
        NoQp = 1,
        /// No EE context available.
        NoEec = 2,
        /// No resources available.
        NoResources = 3,
        /// The sender timed out waiting for an answer.
        Timeout = 4,
        /// The REQ's transport service is not supported.
        Unsupported = 5,
        /// Invalid communication ID.
        InvalidCommId = 6,
        /// Invalid communication instance.
        InvalidCommInstance = 7,
        /// No one listens on the service ID.
        InvalidServiceId = 8,
        /// Invalid transport service type.
        InvalidTransportType = 9,
        /// A stale connection: the QP is still connected elsewhere.
        StaleConn = 10,
        /// RDD does not exist.
        RdcNotExist = 11,
        /// Primary remote GID rejected.
        InvalidGid = 12,
        /// Primary remote LID rejected.
        InvalidLid = 13,
        /// Primary SL rejected.
        InvalidSl = 14,
        /// Primary traffic class rejected.
        InvalidTrafficClass = 15,
        /// Primary hop limit rejected.
        InvalidHopLimit = 16,
        /// Primary packet rate rejected.
        InvalidPacketRate = 17,
        /// Alternate remote GID rejected.
        InvalidAltGid = 18,
        /// Alternate remote LID rejected.
        InvalidAltLid = 19,
        /// Alternate SL rejected.
        InvalidAltSl = 20,
        /// Alternate traffic class rejected.
        InvalidAltTrafficClass = 21,
        /// Alternate hop limit rejected.
        InvalidAltHopLimit = 22,
        /// Alternate packet rate rejected.
        InvalidAltPacketRate = 23,
        /// Port CM redirection.
        PortCmRedirect = 24,
        /// Port redirection.
        PortRedirect = 25,
        /// Invalid path MTU.
        InvalidMtu = 26,
        /// Insufficient responder resources.
        InsufficientRespResources = 27,
        /// Consumer-defined (rdma_reject).
        ConsumerDefined = 28,
        /// Invalid RNR retry count.
        InvalidRnrRetry = 29,
        /// Duplicate local communication ID.
        DuplicateLocalCommId = 30,
        /// Unsupported class version.
        InvalidClassVersion = 31,
        /// Invalid primary flow label.
        InvalidFlowLabel = 32,
        /// Invalid alternate flow label.
        InvalidAltFlowLabel = 33,
        /// Vendor option not supported.
        VendorOptionNotSupported = 35,
    }
}

/// REJ: reject (IBA §12.6.7, table 105).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rej {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (0 if the rejected REQ's sender has none of ours).
    pub remote_comm_id: u32,
    /// Which message is rejected.
    pub message_rejected: MessageKind,
    /// How many bytes of `ari` count (7 bits).
    pub rejected_info_len: u8,
    /// The reason.
    pub reason: RejectReason,
    /// Additional rejection information.
    pub ari: [u8; ARI_LEN],
    /// Private data.
    pub private_data: [u8; private_len::REJ],
}

impl Rej {
    /// A REJ of `message_rejected` for `reason`, with no ARI and no private data.
    pub fn new(
        local_comm_id: u32,
        remote_comm_id: u32,
        message_rejected: MessageKind,
        reason: RejectReason,
    ) -> Rej {
        Rej {
            local_comm_id,
            remote_comm_id,
            message_rejected,
            rejected_info_len: 0,
            reason,
            ari: [0; ARI_LEN],
            private_data: [0; private_len::REJ],
        }
    }

    fn parse(b: &[u8]) -> Result<Rej> {
        let rejected_info_len = bits(b[9], 0, 7);
        if usize::from(rejected_info_len) > ARI_LEN {
            return Err(Error::Malformed(
                "REJ RejectedInfoLength exceeds the 72-byte ARI",
            ));
        }
        Ok(Rej {
            local_comm_id: read_u32(b, 0),
            remote_comm_id: read_u32(b, 4),
            message_rejected: MessageKind::from(bits(b[8], 0, 2)),
            rejected_info_len,
            reason: RejectReason::from(read_u16(b, 10)),
            ari: array(b, 12),
            private_data: array(b, 84),
        })
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        write_u32(b, 4, self.remote_comm_id);
        b[8] = set_bits(0, 0, 2, self.message_rejected.into());
        b[9] = set_bits(0, 0, 7, self.rejected_info_len.min(ARI_LEN as u8));
        write_u16(b, 10, self.reason.into());
        b[12..12 + ARI_LEN].copy_from_slice(&self.ari);
        b[84..84 + private_len::REJ].copy_from_slice(&self.private_data);
    }
}

/// REP: reply to a REQ (IBA §12.6.8, table 107).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rep {
    /// The responder's communication ID.
    pub local_comm_id: u32,
    /// The requester's communication ID.
    pub remote_comm_id: u32,
    /// The responder's Q_Key (RD).
    pub local_qkey: QKey,
    /// The responder's QP number.
    pub local_qpn: Qpn,
    /// The responder's EE context (RD, 24 bits).
    pub local_eecn: u32,
    /// The PSN the responder's first packet will carry.
    pub starting_psn: Psn,
    /// RDMA read/atomic responder resources the responder offers.
    pub responder_resources: u8,
    /// RDMA read/atomic operations the responder will have outstanding.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits: 0 accepted, 1 not supported, 2 rejected).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retry count (3 bits).
    pub rnr_retry_count: u8,
    /// The responder's QP uses an SRQ.
    pub srq: bool,
    /// VendorID (24 bits, spread over three reserved bytes).
    pub vendor_id: u32,
    /// The responder's CA GUID.
    pub local_ca_guid: Guid,
    /// Private data.
    pub private_data: [u8; private_len::REP],
}

/// A REP of zeros: a start for one built field by field (`Rep { local_qpn, ..Rep::default() }`).
impl Default for Rep {
    fn default() -> Rep {
        Rep::parse(&[0; DATA_LEN])
    }
}

impl Rep {
    fn parse(b: &[u8]) -> Rep {
        Rep {
            local_comm_id: read_u32(b, 0),
            remote_comm_id: read_u32(b, 4),
            local_qkey: QKey(read_u32(b, 8)),
            local_qpn: Qpn::new(read_u24(b, 12)),
            vendor_id: u32::from(b[15]) << 16 | u32::from(b[19]) << 8 | u32::from(b[23]),
            local_eecn: read_u24(b, 16),
            starting_psn: Psn::new(read_u24(b, 20)),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: bits(b[26], 0, 5),
            failover_accepted: bits(b[26], 5, 2),
            end_to_end_flow_control: bits(b[26], 7, 1) != 0,
            rnr_retry_count: bits(b[27], 0, 3),
            srq: bits(b[27], 3, 1) != 0,
            local_ca_guid: Guid(read_u64(b, 28)),
            private_data: array(b, 36),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        write_u32(b, 4, self.remote_comm_id);
        write_u32(b, 8, self.local_qkey.0);
        write_u24(b, 12, self.local_qpn.value());
        b[15] = (self.vendor_id >> 16) as u8;
        write_u24(b, 16, self.local_eecn & 0xFF_FFFF);
        b[19] = (self.vendor_id >> 8) as u8;
        write_u24(b, 20, self.starting_psn.value());
        b[23] = self.vendor_id as u8;
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        let mut x = set_bits(0, 0, 5, self.target_ack_delay);
        x = set_bits(x, 5, 2, self.failover_accepted);
        b[26] = set_bits(x, 7, 1, self.end_to_end_flow_control as u8);
        b[27] = set_bits(
            set_bits(0, 0, 3, self.rnr_retry_count),
            3,
            1,
            self.srq as u8,
        );
        write_u64(b, 28, self.local_ca_guid.0);
        b[36..36 + private_len::REP].copy_from_slice(&self.private_data);
    }
}

/// RTU, DREP: the two IDs and private data (IBA tables 108 and 110).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ids<const N: usize> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: [u8; N],
}

/// RTU: ready to use (IBA §12.6.9).
pub type Rtu = Ids<{ private_len::RTU }>;
/// DREP: reply to a DREQ (IBA §12.6.11).
pub type Drep = Ids<{ private_len::DREP }>;

impl<const N: usize> Ids<N> {
    fn parse(b: &[u8]) -> Ids<N> {
        Ids {
            local_comm_id: read_u32(b, 0),
            remote_comm_id: read_u32(b, 4),
            private_data: array(b, 8),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        write_u32(b, 4, self.remote_comm_id);
        b[8..8 + N].copy_from_slice(&self.private_data);
    }
}

/// DREQ: request for communication release (IBA §12.6.10, table 109).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dreq {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number (so it can check the DREQ is for that QP).
    pub remote_qpn: Qpn,
    /// Private data.
    pub private_data: [u8; private_len::DREQ],
}

impl Dreq {
    fn parse(b: &[u8]) -> Dreq {
        Dreq {
            local_comm_id: read_u32(b, 0),
            remote_comm_id: read_u32(b, 4),
            remote_qpn: Qpn::new(read_u24(b, 8)),
            private_data: array(b, 12),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.local_comm_id);
        write_u32(b, 4, self.remote_comm_id);
        write_u24(b, 8, self.remote_qpn.value());
        b[11] = 0;
        b[12..12 + private_len::DREQ].copy_from_slice(&self.private_data);
    }
}

/// SIDR_REQ: which UD QP serves this service ID? (IBA §12.11.1, table 117).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrReq {
    /// The requester's ID for this request.
    pub request_id: u32,
    /// The partition.
    pub pkey: PKey,
    /// The service asked for.
    pub service_id: u64,
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REQ],
}

impl SidrReq {
    fn parse(b: &[u8]) -> SidrReq {
        SidrReq {
            request_id: read_u32(b, 0),
            pkey: PKey(read_u16(b, 4)),
            service_id: read_u64(b, 8),
            private_data: array(b, 16),
        }
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.request_id);
        write_u16(b, 4, self.pkey.0);
        write_u16(b, 6, 0);
        write_u64(b, 8, self.service_id);
        b[16..16 + private_len::SIDR_REQ].copy_from_slice(&self.private_data);
    }
}

enum_with_unknown! {
    /// A SIDR_REP's status (IBA §12.11.2, table 119).
    pub enum SidrStatus(u8) {
        /// The QP is valid.
        Ok = 0,
        /// No one serves the service ID.
        UnsupportedServiceId = 1,
        /// The service is rejected (by its consumer).
        Rejected = 2,
        /// No QP is available.
        NoQp = 3,
        /// Redirect (the additional information says where).
        Redirect = 4,
        /// The class version is not supported.
        UnsupportedVersion = 5,
    }
}

/// SIDR_REP: the UD QP that serves the service ID (IBA §12.11.2, table 118).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SidrRep {
    /// The requester's ID, echoed.
    pub request_id: u32,
    /// The status.
    pub status: SidrStatus,
    /// How many bytes of `info` count.
    pub info_len: u8,
    /// VendorID (24 bits).
    pub vendor_id: u32,
    /// The QP that serves the service.
    pub qpn: Qpn,
    /// The service ID, echoed.
    pub service_id: u64,
    /// The QP's Q_Key.
    pub qkey: QKey,
    /// Additional information.
    pub info: [u8; ARI_LEN],
    /// Private data.
    pub private_data: [u8; private_len::SIDR_REP],
}

impl SidrRep {
    /// The answer to `req` when nobody serves its ServiceID.
    pub fn unsupported(req: &SidrReq) -> SidrRep {
        SidrRep {
            request_id: req.request_id,
            status: SidrStatus::UnsupportedServiceId,
            info_len: 0,
            vendor_id: 0,
            qpn: Qpn::new(0),
            service_id: req.service_id,
            qkey: QKey(0),
            info: [0; ARI_LEN],
            private_data: [0; private_len::SIDR_REP],
        }
    }

    fn parse(b: &[u8]) -> Result<SidrRep> {
        let info_len = b[5];
        if usize::from(info_len) > ARI_LEN {
            return Err(Error::Malformed(
                "SIDR_REP AdditionalInformationLength exceeds 72 bytes",
            ));
        }
        Ok(SidrRep {
            request_id: read_u32(b, 0),
            status: SidrStatus::from(b[4]),
            info_len,
            vendor_id: u32::from(read_u16(b, 6)) << 8 | u32::from(b[11]),
            qpn: Qpn::new(read_u24(b, 8)),
            service_id: read_u64(b, 12),
            qkey: QKey(read_u32(b, 20)),
            info: array(b, 24),
            private_data: array(b, 96),
        })
    }

    fn emit(&self, b: &mut [u8]) {
        write_u32(b, 0, self.request_id);
        b[4] = self.status.into();
        b[5] = self.info_len.min(ARI_LEN as u8);
        write_u16(b, 6, (self.vendor_id >> 8) as u16);
        write_u24(b, 8, self.qpn.value());
        b[11] = self.vendor_id as u8;
        write_u64(b, 12, self.service_id);
        write_u32(b, 20, self.qkey.0);
        b[24..24 + ARI_LEN].copy_from_slice(&self.info);
        b[96..96 + private_len::SIDR_REP].copy_from_slice(&self.private_data);
    }
}

/// One CM message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // a MAD's worth each; they live on the stack briefly
pub enum Message {
    /// REQ.
    Req(Req),
    /// MRA.
    Mra(Mra),
    /// REJ.
    Rej(Rej),
    /// REP.
    Rep(Rep),
    /// RTU.
    Rtu(Rtu),
    /// DREQ.
    Dreq(Dreq),
    /// DREP.
    Drep(Drep),
    /// SIDR_REQ.
    SidrReq(SidrReq),
    /// SIDR_REP.
    SidrRep(SidrRep),
}

impl Message {
    /// The message's AttributeID.
    pub fn attr_id(&self) -> AttrId {
        match self {
            Message::Req(_) => attr::REQ,
            Message::Mra(_) => attr::MRA,
            Message::Rej(_) => attr::REJ,
            Message::Rep(_) => attr::REP,
            Message::Rtu(_) => attr::RTU,
            Message::Dreq(_) => attr::DREQ,
            Message::Drep(_) => attr::DREP,
            Message::SidrReq(_) => attr::SIDR_REQ,
            Message::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name as the spec writes it ("REQ", "SIDR_REP").
    pub fn name(&self) -> &'static str {
        match self {
            Message::Req(_) => "REQ",
            Message::Mra(_) => "MRA",
            Message::Rej(_) => "REJ",
            Message::Rep(_) => "REP",
            Message::Rtu(_) => "RTU",
            Message::Dreq(_) => "DREQ",
            Message::Drep(_) => "DREP",
            Message::SidrReq(_) => "SIDR_REQ",
            Message::SidrRep(_) => "SIDR_REP",
        }
    }

    /// Parses a CM MAD (the first [`MAD_LEN`] bytes of `bytes`): its header and message.
    /// A MAD of another class, another ClassVersion, another method than Send, or an
    /// attribute that is not one of the nine messages is an error naming which.
    pub fn parse(bytes: &[u8]) -> Result<(mad::Repr, Message)> {
        let bytes = bytes.get(..MAD_LEN).ok_or(Error::Truncated("CM MAD"))?;
        let header = mad::Repr::parse(&mad::Packet::new_unchecked(bytes))?;
        if header.mgmt_class != MgmtClass::ComMgt {
            return Err(Error::Malformed("not a CM MAD (class is not 0x07)"));
        }
        if header.class_version != CLASS_VERSION {
            return Err(Error::Unsupported("CM ClassVersion other than 2"));
        }
        if header.method != Method::Send {
            return Err(Error::Unsupported("CM method other than Send"));
        }
        let b = &bytes[HEADER_LEN..];
        let msg = match header.attr_id {
            attr::REQ => Message::Req(Req::parse(b)),
            attr::MRA => Message::Mra(Mra::parse(b)),
            attr::REJ => Message::Rej(Rej::parse(b)?),
            attr::REP => Message::Rep(Rep::parse(b)),
            attr::RTU => Message::Rtu(Rtu::parse(b)),
            attr::DREQ => Message::Dreq(Dreq::parse(b)),
            attr::DREP => Message::Drep(Drep::parse(b)),
            attr::SIDR_REQ => Message::SidrReq(SidrReq::parse(b)),
            attr::SIDR_REP => Message::SidrRep(SidrRep::parse(b)?),
            attr::LAP | attr::APR => return Err(Error::Unsupported("CM LAP/APR (path migration)")),
            _ => return Err(Error::Unsupported("CM attribute that is no CM message")),
        };
        Ok((header, msg))
    }

    /// The whole MAD: header (method Send, TID `tid`) and message.
    pub fn emit(&self, tid: u64) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        let header = mad::Repr::request(
            MgmtClass::ComMgt,
            CLASS_VERSION,
            Method::Send,
            tid,
            self.attr_id(),
            0,
        );
        header.emit(&mut mad::Packet::new_unchecked(&mut out[..]));
        let b = &mut out[HEADER_LEN..];
        match self {
            Message::Req(m) => m.emit(b),
            Message::Mra(m) => m.emit(b),
            Message::Rej(m) => m.emit(b),
            Message::Rep(m) => m.emit(b),
            Message::Rtu(m) => m.emit(b),
            Message::Dreq(m) => m.emit(b),
            Message::Drep(m) => m.emit(b),
            Message::SidrReq(m) => m.emit(b),
            Message::SidrRep(m) => m.emit(b),
        }
        out
    }
}

enum_with_unknown! {
    /// rdma_cm's port spaces (`enum rdma_port_space`): the high half of the 32-bit service
    /// number an IP address's port is put in.
    pub enum PortSpace(u16) {
        /// RDMA_PS_IPOIB.
        Ipoib = 0x0002,
        /// RDMA_PS_IB (AF_IB addressing: no private-data header).
        Ib = 0x013F,
        /// RDMA_PS_TCP: reliable connections.
        Tcp = 0x0106,
        /// RDMA_PS_UDP: unreliable datagrams (SIDR).
        Udp = 0x0111,
    }
}

/// The service ID rdma_cm uses for `port` of port space `ps` (IBA annex A11.2.1:
/// 0x0000_0000_01_PP_port for the IP spaces).
pub fn service_id(ps: PortSpace, port: u16) -> u64 {
    (u64::from(u16::from(ps)) << 16) | u64::from(port)
}

/// The port space and port of an rdma_cm service ID, if it is one.
pub fn split_service_id(id: u64) -> Option<(PortSpace, u16)> {
    if id >> 32 != 0 {
        return None;
    }
    let ps = PortSpace::from((id >> 16) as u16);
    match ps {
        PortSpace::Unknown(_) => None,
        ps => Some((ps, id as u16)),
    }
}

/// The addresses of a [`CmaHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmaAddrs {
    /// IPv4 source and destination.
    V4 {
        /// Source.
        src: [u8; 4],
        /// Destination.
        dst: [u8; 4],
    },
    /// IPv6 source and destination.
    V6 {
        /// Source.
        src: [u8; 16],
        /// Destination.
        dst: [u8; 16],
    },
}

/// The header rdma_cm puts first in a REQ's or SIDR_REQ's private data for the IP port
/// spaces (IBA annex A11.4, table A11-1): version, IP version, the source port, and the
/// source and destination addresses (IPv4 in the last four bytes of each 16-byte field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHeader {
    /// The requester's port.
    pub src_port: u16,
    /// The addresses.
    pub addrs: CmaAddrs,
}

impl CmaHeader {
    /// Length in bytes.
    pub const LEN: usize = 36;
    /// The only version defined (CMA_VERSION).
    pub const VERSION: u8 = 0;

    /// Parses the first [`CmaHeader::LEN`] bytes of a private data field.
    pub fn parse(b: &[u8]) -> Result<CmaHeader> {
        let b = b
            .get(..Self::LEN)
            .ok_or(Error::Truncated("rdma_cm private-data header"))?;
        if b[0] != Self::VERSION {
            return Err(Error::Unsupported("rdma_cm header version other than 0"));
        }
        let addrs = match b[1] >> 4 {
            4 => CmaAddrs::V4 {
                src: array(b, 16),
                dst: array(b, 32),
            },
            6 => CmaAddrs::V6 {
                src: array(b, 4),
                dst: array(b, 20),
            },
            _ => {
                return Err(Error::Malformed(
                    "rdma_cm header IP version is neither 4 nor 6",
                ))
            }
        };
        Ok(CmaHeader {
            src_port: read_u16(b, 2),
            addrs,
        })
    }

    /// Writes the header into the first [`CmaHeader::LEN`] bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        b[..Self::LEN].fill(0);
        b[0] = Self::VERSION;
        write_u16(b, 2, self.src_port);
        match self.addrs {
            CmaAddrs::V4 { src, dst } => {
                b[1] = 4 << 4;
                b[16..20].copy_from_slice(&src);
                b[32..36].copy_from_slice(&dst);
            }
            CmaAddrs::V6 { src, dst } => {
                b[1] = 6 << 4;
                b[4..20].copy_from_slice(&src);
                b[20..36].copy_from_slice(&dst);
            }
        }
    }
}

#[cfg(test)]
mod tests;
